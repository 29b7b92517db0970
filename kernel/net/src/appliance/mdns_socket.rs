//! The mDNS responder's UDP socket: queries in, answers, probes and announcements out, over
//! IPv4 (224.0.0.251) and IPv6 (ff02::fb, from the link-local address).

use super::Appliance;
use super::memory::MdnsSocketMemory;
use bramble_hal::{EthernetDevice, Instant};
use bramble_proto::mdns::{self, Destination, Ipv6LinkAddress, LinkAddress, MdnsResponder, Origin};
use bramble_proto::slaac::{AddressOrigin, AddressState};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::socket::udp::{self, UdpMetadata};
use smoltcp::wire::{IpAddress, IpCidr, IpEndpoint, Ipv4Address, Ipv4Cidr, Ipv6Address};

/// Largest mDNS message the responder writes or reads whole.
const MDNS_MESSAGE_LEN: usize = 512;

/// Starts the responder for `hostname` on a UDP socket in `sockets`, with `iface` in the
/// IPv4 mDNS group (and the IPv6 one with `ipv6`); `None` (with a warning) if the hostname is
/// not a DNS label.
pub(super) fn start_mdns<'a>(
    hostname: &str,
    seed: u32,
    ipv6: bool,
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
    // RFC 6762 §11: mDNS packets are sent with IP TTL (hop limit) 255.
    socket.set_hop_limit(Some(255));
    // Cannot fail: the port is not zero and the socket is new.
    let _ = socket.bind(mdns::MDNS_PORT);
    let group = IpAddress::Ipv4(Ipv4Address::from_octets(mdns::MDNS_GROUP));
    let group6 = IpAddress::Ipv6(Ipv6Address::from(mdns::MDNS_GROUP_V6));
    for group in core::iter::once(group).chain(ipv6.then_some(group6)) {
        if let Err(error) = iface.join_multicast_group(group) {
            log::warn!("mdns: cannot join {group}: {error}");
        }
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
        IpCidr::Ipv6(_) => None,
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

    /// Tells the responder the IPv6 addresses to answer with: the link-local one and every
    /// preferred one (deprecated addresses still accept connections but are no longer
    /// offered), the link-local one first.
    pub(super) fn update_mdns_ipv6(&mut self, now: Instant) {
        let (Some((_, responder)), Some(state)) = (&mut self.mdns, &self.ipv6) else {
            return;
        };
        let mut addresses: heapless::Vec<Ipv6LinkAddress, { mdns::MAX_IPV6_ADDRESSES }> =
            heapless::Vec::new();
        let mut preferred = state
            .config
            .assigned()
            .filter(|e| e.state == AddressState::Preferred)
            .collect::<heapless::Vec<_, { bramble_proto::slaac::MAX_ADDRESSES }>>();
        preferred.sort_by_key(|e| e.origin != AddressOrigin::LinkLocal);
        for entry in preferred {
            let _ = addresses.push(Ipv6LinkAddress {
                address: entry.address,
                prefix_len: entry.prefix_len,
            });
        }
        responder.set_ipv6_addresses(&addresses, now);
    }

    /// Answers the queries received, then sends the responder's due probe or announcement,
    /// to each family's group that we have an address for.
    pub(super) fn poll_mdns(&mut self, now: Instant) {
        let Some((handle, responder)) = &mut self.mdns else {
            return;
        };
        let socket = self.sockets.get_mut::<udp::Socket>(*handle);
        let link_local = self
            .ipv6
            .as_ref()
            .and_then(|state| state.config.link_local())
            .map(Ipv6Address::from);
        let group = IpAddress::Ipv4(Ipv4Address::from_octets(mdns::MDNS_GROUP));
        let group6 = IpAddress::Ipv6(Ipv6Address::from(mdns::MDNS_GROUP_V6));
        let mut out = [0u8; MDNS_MESSAGE_LEN];
        while let Ok((datagram, meta)) = socket.recv() {
            let source = meta.endpoint.addr;
            let origin = Origin {
                address: source.into(),
                port: meta.endpoint.port,
                to_group: meta.local_address == Some(group) || meta.local_address == Some(group6),
            };
            let reply = responder.handle(datagram, origin, now, &mut out);
            match reply {
                Ok(Some((len, destination))) => {
                    let endpoint = match destination {
                        Destination::Multicast => match source {
                            IpAddress::Ipv4(_) => IpEndpoint::new(group, mdns::MDNS_PORT),
                            IpAddress::Ipv6(_) => IpEndpoint::new(group6, mdns::MDNS_PORT),
                        },
                        Destination::Unicast(address, port) => {
                            IpEndpoint::new(address.into(), port)
                        }
                    };
                    // Over IPv6, from the link-local address (RFC 6762 §15 asks answers to
                    // come from an address on the link the query came on).
                    let local_address = match endpoint.addr {
                        IpAddress::Ipv6(_) => link_local.map(IpAddress::Ipv6),
                        IpAddress::Ipv4(_) => None,
                    };
                    let meta = UdpMetadata {
                        local_address,
                        ..UdpMetadata::from(endpoint)
                    };
                    if socket.send_slice(&out[..len], meta).is_err() {
                        log::debug!("mdns: transmit queue full; answer dropped");
                    }
                }
                Ok(None) => {}
                Err(_) => self.counters.mdns_malformed += 1,
            }
        }
        if let Some(len) = responder.poll(now, &mut out) {
            let has_ipv4 = self.iface.ipv4_addr().is_some();
            let v4 = has_ipv4.then(|| UdpMetadata::from(IpEndpoint::new(group, mdns::MDNS_PORT)));
            let v6 = link_local.map(|source| UdpMetadata {
                local_address: Some(IpAddress::Ipv6(source)),
                ..UdpMetadata::from(IpEndpoint::new(group6, mdns::MDNS_PORT))
            });
            for meta in v4.into_iter().chain(v6) {
                if socket.send_slice(&out[..len], meta).is_err() {
                    log::debug!("mdns: transmit queue full; probe or announcement dropped");
                }
            }
        }
    }
}
