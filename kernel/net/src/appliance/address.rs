//! How the interface gets and keeps its IPv4 address: DHCP events (lease, renewal, loss)
//! and the link-local fallback (RFC 3927) while no DHCP server answers.

use super::Appliance;
use bramble_hal::{EthernetDevice, Instant, LinkState};
use smoltcp::socket::dhcpv4;
use smoltcp::wire::{DhcpRepr, IpCidr, Ipv4Address, Ipv4Cidr};

/// How long DHCP may go unanswered before a link-local address is taken.
pub const LINK_LOCAL_AFTER_MICROS: u64 = 10_000_000;
/// Lease length assumed when an ACK gives none (smoltcp's own default, RFC 2131 leaves it
/// to the client).
const DEFAULT_LEASE_SECONDS: u64 = 120;

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    pub(super) fn poll_dhcp(&mut self, now: Instant) {
        let Some(handle) = self.dhcp else {
            return;
        };
        let event = self.sockets.get_mut::<dhcpv4::Socket>(handle).poll();
        let address = match event {
            None => {
                if let Some(since) = self.dhcp_waiting_since
                    && self.link == LinkState::Up
                    && now.micros_since(since) >= LINK_LOCAL_AFTER_MICROS
                {
                    self.dhcp_waiting_since = None;
                    let cidr = self.use_link_local(now);
                    log::warn!(
                        "dhcp: no answer after {} s; using link-local {cidr} until a lease \
                         arrives",
                        LINK_LOCAL_AFTER_MICROS / 1_000_000
                    );
                }
                return;
            }
            Some(dhcpv4::Event::Configured(config)) => {
                let lease = config
                    .packet
                    .as_ref()
                    .and_then(|packet| DhcpRepr::parse(packet).ok())
                    .and_then(|repr| repr.lease_duration);
                let cidr = config.address;
                // smoltcp reports every renewal ACK too; the address may be the one in use.
                let renewed = self.iface.ip_addrs() == [IpCidr::Ipv4(cidr)];
                let how = if renewed { ", renewed" } else { "" };
                match lease {
                    Some(seconds) => log::info!(
                        "dhcp: lease {} from {} for {} s{how}",
                        config.address,
                        config.server.address,
                        seconds
                    ),
                    None => {
                        log::info!(
                            "dhcp: lease {} from {}{how}",
                            config.address,
                            config.server.address
                        )
                    }
                }
                // smoltcp counts the lease from the ACK, which it handled in this same poll.
                self.lease_expires_at = Some(
                    now.add_micros(lease.map_or(DEFAULT_LEASE_SECONDS, u64::from) * 1_000_000),
                );
                self.dhcp_waiting_since = None;
                self.link_local = false;
                // Setting the addresses flushes the neighbour cache: skip that on a renewal,
                // or every client would be asked for again (its next reply held for ARP).
                if !renewed {
                    self.iface.update_ip_addrs(|addrs| {
                        addrs.clear();
                        // Cannot fail: the list was just emptied.
                        let _ = addrs.push(IpCidr::Ipv4(cidr));
                    });
                }
                match config.router {
                    Some(router) => {
                        // Cannot fail: at most one default route is kept.
                        let _ = self.iface.routes_mut().add_default_ipv4_route(router);
                        log::info!("dhcp: gateway {router}");
                    }
                    None => {
                        self.iface.routes_mut().remove_default_ipv4_route();
                        log::info!("dhcp: no gateway offered");
                    }
                }
                Some(cidr.address().octets())
            }
            Some(dhcpv4::Event::Deconfigured) => {
                if self.iface.ipv4_addr().is_some() {
                    log::warn!("dhcp: lease lost; address removed");
                }
                self.iface.update_ip_addrs(|addrs| addrs.clear());
                self.iface.routes_mut().remove_default_ipv4_route();
                self.link_local = false;
                let ran_out = self
                    .lease_expires_at
                    .take()
                    .is_some_and(|expires_at| now >= expires_at);
                if ran_out && self.link == LinkState::Up {
                    // Renewing (from T1) and rebinding (from T2) went unanswered for the
                    // whole second half of the lease: the server has been gone far longer
                    // than LINK_LOCAL_AFTER already. Stay reachable without waiting again;
                    // DHCP keeps asking and a lease replaces the link-local address.
                    self.dhcp_waiting_since = None;
                    let cidr = self.use_link_local(now);
                    log::warn!(
                        "dhcp: lease ran out unrenewed; using link-local {cidr} until a lease \
                         arrives"
                    );
                    Some(cidr.address().octets())
                } else {
                    // A NAK, or the lease given up on a link return: the server may answer
                    // soon. Keep counting from the first unanswered request, not from this
                    // event.
                    self.dhcp_waiting_since.get_or_insert(now);
                    None
                }
            }
        };
        if let Some((_, responder)) = &mut self.mdns {
            responder.set_address(address, now);
        }
    }

    /// Takes a link-local address (RFC 3927 §2.1: 169.254.1.0-169.254.254.255, chosen
    /// from the MAC so a device keeps the same one) while no DHCP server answers, so that a
    /// Pi cabled straight to a laptop is still reachable as `<hostname>.local`. DHCP keeps
    /// asking; a lease replaces it. (The RFC's ARP probe for the address is not done: the
    /// choice is spread over 65,024 addresses by the MAC.) Returns the address taken.
    fn use_link_local(&mut self, now: Instant) -> Ipv4Cidr {
        let m = self.mac;
        let hash = m.iter().fold(0x811c_9dc5u32, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        let third = 1 + (hash % 254) as u8;
        let fourth = (hash >> 8) as u8;
        let cidr = Ipv4Cidr::new(Ipv4Address::new(169, 254, third, fourth), 16);
        self.iface.update_ip_addrs(|addrs| {
            addrs.clear();
            // Cannot fail: the list was just emptied.
            let _ = addrs.push(IpCidr::Ipv4(cidr));
        });
        self.iface.routes_mut().remove_default_ipv4_route();
        self.link_local = true;
        if let Some((_, responder)) = &mut self.mdns {
            responder.set_address(Some(cidr.address().octets()), now);
        }
        cidr
    }
}
