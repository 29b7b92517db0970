//! The mDNS responder's UDP socket: queries in, answers, probes and announcements out.

use super::Appliance;
use super::memory::MdnsSocketMemory;
use crate::mdns::{self, Destination, LinkAddress, MdnsResponder, Origin};
use bramble_hal::{EthernetDevice, Instant};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::socket::udp;
use smoltcp::wire::{IpAddress, IpCidr, IpEndpoint, Ipv4Address, Ipv4Cidr};

/// Largest mDNS message the responder writes or reads whole.
const MDNS_MESSAGE_LEN: usize = 512;

/// Starts the responder for `hostname` on a UDP socket in `sockets`, with `iface` in the
/// mDNS group; `None` (with a warning) if the hostname is not a DNS label.
pub(super) fn start_mdns<'a>(
    hostname: &str,
    seed: u32,
    iface: &mut Interface,
    sockets: &mut SocketSet<'a>,
    memory: &'a mut MdnsSocketMemory,
    now: Instant,
) -> Option<(SocketHandle, MdnsResponder)> {
    let Ok(mut responder) = MdnsResponder::new(hostname, seed) else {
        log::warn!(
            "mdns: hostname {hostname:?} is not a valid DNS label (letters, digits, '-', at \
             most 63); mDNS is off"
        );
        return None;
    };
    let mut socket = udp::Socket::new(
        udp::PacketBuffer::new(&mut memory.rx_meta[..], &mut memory.rx[..]),
        udp::PacketBuffer::new(&mut memory.tx_meta[..], &mut memory.tx[..]),
    );
    // RFC 6762 §11: mDNS packets are sent with IP TTL 255.
    socket.set_hop_limit(Some(255));
    // Cannot fail: the port is not zero and the socket is new.
    let _ = socket.bind(mdns::MDNS_PORT);
    let group = Ipv4Address::from_octets(mdns::MDNS_GROUP);
    if let Err(error) = iface.join_multicast_group(group) {
        log::warn!("mdns: cannot join {group}: {error}");
    }
    let handle = sockets.add(socket);
    responder.set_address(interface_link_address(iface), now);
    Some((handle, responder))
}

/// The mDNS responder's view of an interface address: the address and its subnet.
pub(super) fn link_address(cidr: Ipv4Cidr) -> LinkAddress {
    LinkAddress {
        address: cidr.address().octets(),
        prefix_len: cidr.prefix_len(),
    }
}

/// The interface's IPv4 address and subnet, if it has one.
pub(super) fn interface_link_address(iface: &Interface) -> Option<LinkAddress> {
    iface.ip_addrs().iter().find_map(|cidr| match cidr {
        IpCidr::Ipv4(cidr) => Some(link_address(*cidr)),
        // With IPv6 enabled there would be other kinds; without it this is the only one.
        #[allow(unreachable_patterns)]
        _ => None,
    })
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Probes and announces the name again (after the link returns): it may be taken on
    /// this network.
    pub(super) fn reprobe_mdns(&mut self, now: Instant) {
        if let Some((_, responder)) = &mut self.mdns {
            let address = interface_link_address(&self.iface);
            responder.set_address(None, now);
            responder.set_address(address, now);
        }
    }

    /// Answers the queries received, then sends the responder's due probe or announcement.
    pub(super) fn poll_mdns(&mut self, now: Instant) {
        let Some((handle, responder)) = &mut self.mdns else {
            return;
        };
        let socket = self.sockets.get_mut::<udp::Socket>(*handle);
        let mut out = [0u8; MDNS_MESSAGE_LEN];
        while let Ok((datagram, meta)) = socket.recv() {
            let IpAddress::Ipv4(source) = meta.endpoint.addr;
            let origin = Origin {
                address: source.octets(),
                port: meta.endpoint.port,
                to_group: meta.local_address
                    == Some(Ipv4Address::from_octets(mdns::MDNS_GROUP).into()),
            };
            let reply = responder.handle(datagram, origin, now, &mut out);
            match reply {
                Ok(Some((len, destination))) => {
                    let endpoint = match destination {
                        Destination::Multicast => IpEndpoint::new(
                            Ipv4Address::from_octets(mdns::MDNS_GROUP).into(),
                            mdns::MDNS_PORT,
                        ),
                        Destination::Unicast(address, port) => {
                            IpEndpoint::new(Ipv4Address::from_octets(address).into(), port)
                        }
                    };
                    if socket.send_slice(&out[..len], endpoint).is_err() {
                        log::debug!("mdns: transmit queue full; answer dropped");
                    }
                }
                Ok(None) => {}
                Err(_) => self.counters.mdns_malformed += 1,
            }
        }
        if let Some(len) = responder.poll(now, &mut out) {
            let group = IpEndpoint::new(
                Ipv4Address::from_octets(mdns::MDNS_GROUP).into(),
                mdns::MDNS_PORT,
            );
            if socket.send_slice(&out[..len], group).is_err() {
                log::debug!("mdns: transmit queue full; probe or announcement dropped");
            }
        }
    }
}
