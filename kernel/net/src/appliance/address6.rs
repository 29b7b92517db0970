//! How the interface gets and keeps its IPv6 addresses: the socket side of
//! [`Ipv6Autoconfig`] (link-local, SLAAC, static, DAD, routers, name servers). A raw ICMPv6
//! socket brings the Router and Neighbor Advertisements in and takes the solicitations out;
//! what the configuration holds is copied into the interface (addresses, default route), the
//! device adapter's IPv6 filter and the mDNS responder whenever it changes.
//!
//! smoltcp itself answers Neighbor Solicitations for the assigned addresses, resolves
//! neighbours, answers echo requests (ping6), and sends MLD reports for the solicited-node
//! groups of the addresses it holds.

use super::Appliance;
use super::memory::NdSocketMemory;
use crate::phy::{EthernetPhy, Ipv6Filter};
use bramble_hal::{EthernetDevice, Instant, LinkState};
use bramble_proto::ndp::{NEIGHBOR_ADVERT, NeighborAdvert, ROUTER_ADVERT, RouterAdvert};
use bramble_proto::slaac::{
    AddressEntry, AddressOrigin, AddressState, Ipv6Autoconfig, MAX_ADDRESSES, Solicitation,
};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::socket::raw;
use smoltcp::wire::{
    EthernetAddress, Icmpv6Packet, Icmpv6Repr, IpCidr, IpProtocol, IpVersion, Ipv6Address,
    Ipv6Cidr, Ipv6Packet, Ipv6Repr, NdiscRepr, RawHardwareAddress,
};

/// ff02::2, all routers (RFC 4291 §2.7.1).
const ALL_ROUTERS: Ipv6Address = Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// Largest solicitation built: IPv6 header, ICMPv6 header and target, one 8-byte option.
const SOLICITATION_MAX_LEN: usize = 40 + 24 + 8;

/// IPv6 configuration and its socket.
pub(super) struct Ipv6State {
    pub(super) config: Ipv6Autoconfig,
    socket: SocketHandle,
    /// [`Ipv6Autoconfig::changes`] when the interface was last brought in line.
    synced: Option<u32>,
}

impl Ipv6State {
    /// Starts IPv6 configuration with a raw ICMPv6 socket in `sockets`, and puts the
    /// link-local (and static) address on `iface` at once, while DAD for it runs: smoltcp
    /// flushes its neighbour cache whenever the addresses change, which costs nothing before
    /// the first frame but an ARP round trip per IPv4 peer (and a dropped echo reply) later.
    /// Until DAD passes, `phy` lets only neighbour discovery through, so the address answers
    /// nothing and is the source of nothing but MLD reports (RFC 4862 §5.4 would have those
    /// sent from ::) and of a Neighbor Advertisement should another host resolve it (which
    /// only a host already using it would).
    pub(super) fn start<'a, D: EthernetDevice>(
        config: Ipv6Autoconfig,
        sockets: &mut SocketSet<'a>,
        memory: &'a mut NdSocketMemory,
        iface: &mut Interface,
        phy: &mut EthernetPhy<D>,
    ) -> Self {
        let socket = raw::Socket::new(
            Some(IpVersion::Ipv6),
            Some(IpProtocol::Icmpv6),
            raw::PacketBuffer::new(&mut memory.rx_meta[..], &mut memory.rx[..]),
            raw::PacketBuffer::new(&mut memory.tx_meta[..], &mut memory.tx[..]),
        );
        let mut state = Self {
            config,
            socket: sockets.add(socket),
            synced: None,
        };
        state.sync(iface, phy);
        state
    }

    /// When the configuration changed: copies its addresses and default router into the
    /// interface, and lets all IPv6 through the device adapter once an address is assigned.
    /// Returns whether anything was to be done.
    fn sync<D: EthernetDevice>(&mut self, iface: &mut Interface, phy: &mut EthernetPhy<D>) -> bool {
        if self.synced == Some(self.config.changes()) {
            return false;
        }
        self.synced = Some(self.config.changes());
        let assigned = self.config.assigned();
        // Link-local and static addresses are held while DAD runs (see `start`).
        let early = self.config.entries().iter().filter(|e| {
            e.origin != AddressOrigin::Autoconfigured
                && matches!(e.state, AddressState::Tentative { .. })
        });
        let wanted: heapless::Vec<Ipv6Cidr, MAX_ADDRESSES> =
            assigned.chain(early).map(cidr).collect();
        let held = interface_ipv6(iface);
        let same = held.len() == wanted.len() && wanted.iter().all(|c| held.contains(c));
        if !same {
            // This flushes the neighbour cache (ARP entries too): only done when the set of
            // addresses changes, not when one is deprecated.
            iface.update_ip_addrs(|addrs| {
                addrs.retain(|addr| matches!(addr, IpCidr::Ipv4(_)));
                for cidr in &wanted {
                    // Cannot fail: the list holds IPv4's one and MAX_ADDRESSES more.
                    let _ = addrs.push(IpCidr::Ipv6(*cidr));
                }
            });
        }
        match self.config.default_router() {
            Some(router) => {
                // Cannot fail: it replaces the IPv6 default route, next to IPv4's.
                let _ = iface
                    .routes_mut()
                    .add_default_ipv6_route(Ipv6Address::from(router));
            }
            None => {
                iface.routes_mut().remove_default_ipv6_route();
            }
        }
        let filter = if self.config.assigned().next().is_none() {
            Ipv6Filter::NeighborDiscoveryOnly
        } else {
            Ipv6Filter::Pass
        };
        phy.set_ipv6_filter(filter);
        true
    }
}

/// What a received ICMPv6 packet was, as far as address configuration cares.
enum Received<'a> {
    RouterAdvert([u8; 16], RouterAdvert<'a>),
    NeighborAdvert(NeighborAdvert),
    Other,
}

/// Reads a packet from the raw socket (an IPv6 header as smoltcp re-serialised it, then the
/// ICMPv6 message): Router Advertisements from a link-local source with hop limit 255, and
/// Neighbor Advertisements with hop limit 255 (RFC 4861 §6.1.2, §7.1.2), checksum verified.
fn classify(packet: &[u8]) -> Received<'_> {
    let Ok(ip) = Ipv6Packet::new_checked(packet) else {
        return Received::Other;
    };
    let (source, destination) = (ip.src_addr(), ip.dst_addr());
    if ip.hop_limit() != 255 || ip.next_header() != IpProtocol::Icmpv6 {
        return Received::Other;
    }
    let payload = ip.payload();
    let Ok(icmp) = Icmpv6Packet::new_checked(payload) else {
        return Received::Other;
    };
    if !icmp.verify_checksum(&source, &destination) {
        return Received::Other;
    }
    match payload.first() {
        Some(&ROUTER_ADVERT) if source.is_unicast_link_local() => RouterAdvert::parse(payload)
            .map_or(Received::Other, |advert| {
                Received::RouterAdvert(source.octets(), advert)
            }),
        Some(&NEIGHBOR_ADVERT) => {
            NeighborAdvert::parse(payload).map_or(Received::Other, Received::NeighborAdvert)
        }
        _ => Received::Other,
    }
}

/// The solicited-node multicast group of `address` (RFC 4291 §2.7.1): ff02::1:ffXX:XXXX with
/// its low 24 bits.
fn solicited_node(address: [u8; 16]) -> Ipv6Address {
    let mut group = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    group[13..].copy_from_slice(&address[13..]);
    Ipv6Address::from(group)
}

/// Writes `solicitation` as a whole IPv6 packet into `out`; returns its length.
fn write_solicitation(solicitation: Solicitation, mac: [u8; 6], out: &mut [u8]) -> usize {
    let lladdr = Some(RawHardwareAddress::from(EthernetAddress(mac)));
    let (source, destination, repr) = match solicitation {
        // DAD (RFC 4862 §5.4.2): from the unspecified address, without a link-layer option,
        // to the target's solicited-node group.
        Solicitation::Neighbor { target } => (
            Ipv6Address::UNSPECIFIED,
            solicited_node(target),
            NdiscRepr::NeighborSolicit {
                target_addr: Ipv6Address::from(target),
                lladdr: None,
            },
        ),
        Solicitation::Router { source } => (
            Ipv6Address::from(source),
            ALL_ROUTERS,
            NdiscRepr::RouterSolicit { lladdr },
        ),
    };
    let icmp = Icmpv6Repr::Ndisc(repr);
    let ip = Ipv6Repr {
        src_addr: source,
        dst_addr: destination,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit: 255,
    };
    let len = ip.buffer_len() + icmp.buffer_len();
    let Some(out) = out.get_mut(..len) else {
        return 0;
    };
    let mut packet = Ipv6Packet::new_unchecked(&mut *out);
    ip.emit(&mut packet);
    let mut message = Icmpv6Packet::new_unchecked(packet.payload_mut());
    icmp.emit(
        &source,
        &destination,
        &mut message,
        &ChecksumCapabilities::default(),
    );
    len
}

/// The interface's IPv6 addresses, in order.
fn interface_ipv6(iface: &Interface) -> heapless::Vec<Ipv6Cidr, MAX_ADDRESSES> {
    iface
        .ip_addrs()
        .iter()
        .filter_map(|cidr| match cidr {
            IpCidr::Ipv6(cidr) => Some(*cidr),
            IpCidr::Ipv4(_) => None,
        })
        .take(MAX_ADDRESSES)
        .collect()
}

fn cidr(entry: &AddressEntry) -> Ipv6Cidr {
    Ipv6Cidr::new(Ipv6Address::from(entry.address), entry.prefix_len)
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Takes in what the raw socket received, sends the solicitations that are due, and
    /// brings the interface in line with the configuration when it changed.
    pub(super) fn poll_ipv6(&mut self, now: Instant) {
        let Some(state) = &mut self.ipv6 else {
            return;
        };
        let socket = self.sockets.get_mut::<raw::Socket>(state.socket);
        while let Ok(packet) = socket.recv() {
            match classify(packet) {
                Received::RouterAdvert(source, advert) => {
                    state.config.on_router_advert(source, &advert, now)
                }
                Received::NeighborAdvert(advert) => {
                    state.config.on_neighbor_advert(&advert, now);
                }
                Received::Other => {}
            }
        }
        // With the link down a solicitation goes nowhere, and DAD would pass unchecked: the
        // configuration waits for the link (its deadlines are not followed meanwhile).
        while self.link == LinkState::Up
            && let Some(solicitation) = state.config.poll(now)
        {
            let mac = self.mac;
            let sent = socket.send_with(SOLICITATION_MAX_LEN, |out| {
                write_solicitation(solicitation, mac, out)
            });
            if sent.is_err() {
                // The queue is full: DAD or the next solicitation simply waits for its turn
                // (a lost solicitation is as if the network had lost it).
                log::debug!("ipv6: solicitation queue full; {solicitation:?} dropped");
                break;
            }
        }
        if state.sync(&mut self.iface, &mut self.phy) {
            self.update_mdns_ipv6(now);
        }
    }

    /// When IPv6 configuration next has something to do.
    pub(super) fn ipv6_deadline(&self) -> Option<Instant> {
        self.ipv6
            .as_ref()
            .and_then(|state| state.config.next_deadline())
    }

    /// After the link returns: ask the routers again (the network may be another one).
    pub(super) fn restart_ipv6(&mut self, now: Instant) {
        if let Some(state) = &mut self.ipv6 {
            state.config.restart(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solicitations_are_well_formed_and_checksummed() {
        let mac = [2, 0, 0, 0, 0, 9];
        let target = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        let mut out = [0u8; SOLICITATION_MAX_LEN];
        for (solicitation, len, destination) in [
            (
                Solicitation::Neighbor { target },
                64,
                Ipv6Address::new(0xff02, 0, 0, 0, 0, 1, 0xff06, 0x0708),
            ),
            (Solicitation::Router { source: target }, 56, ALL_ROUTERS),
        ] {
            let n = write_solicitation(solicitation, mac, &mut out);
            assert_eq!(n, len, "{solicitation:?}");
            let ip = Ipv6Packet::new_checked(&out[..n]).unwrap();
            assert_eq!(ip.dst_addr(), destination);
            assert_eq!(ip.hop_limit(), 255);
            let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
            assert!(icmp.verify_checksum(&ip.src_addr(), &ip.dst_addr()));
        }
        // Too small a buffer: nothing written.
        assert_eq!(
            write_solicitation(Solicitation::Router { source: target }, mac, &mut out[..20]),
            0
        );
    }
}
