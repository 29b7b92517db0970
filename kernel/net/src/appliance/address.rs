//! How the interface gets and keeps its IPv4 address: a static address, or DHCP events
//! (lease, renewal, loss) and the link-local fallback (RFC 3927) while no DHCP server
//! answers.

use super::mdns_socket::{interface_link_address, link_address};
use super::memory::DhcpSocketMemory;
use super::{AddressConfig, Appliance, NetError, NetworkConfig};
use bramble_hal::{EthernetDevice, Instant, LinkState};
use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::socket::dhcpv4;
use smoltcp::wire::{DhcpRepr, IpCidr, Ipv4Address, Ipv4Cidr};

/// How long DHCP may go unanswered before a link-local address is taken.
pub const LINK_LOCAL_AFTER_MICROS: u64 = 10_000_000;
/// Lease length assumed when an ACK gives none (smoltcp's own default, RFC 2131 leaves it
/// to the client).
const DEFAULT_LEASE_SECONDS: u64 = 120;

/// What the appliance keeps about its address.
pub(super) struct AddressState {
    /// The DHCP client socket (`None`: a static address).
    dhcp: Option<SocketHandle>,
    /// Since when DHCP has been asking without an address (for the link-local fallback).
    waiting_since: Option<Instant>,
    /// When the lease in use runs out unless renewed.
    pub(super) lease_expires_at: Option<Instant>,
    /// The interface holds a link-local address (RFC 3927) for want of a lease.
    pub(super) link_local: bool,
    /// The time servers (option 42) and name servers (option 6) of the last lease.
    pub(super) dhcp_time_servers: heapless::Vec<[u8; 4], 3>,
    pub(super) dhcp_dns_servers: heapless::Vec<[u8; 4], 3>,
    /// Those lists changed since the clock last looked.
    pub(super) dhcp_servers_changed: bool,
}

/// What DHCP is asked for (option 55): subnet mask, router, name servers, time servers.
const PARAMETER_REQUEST_LIST: &[u8] = &[1, 3, 6, 42];
/// DHCP option 42: NTP servers (RFC 2132 §8.3).
const DHCP_OPTION_NTP_SERVERS: u8 = 42;

impl AddressState {
    /// Sets up how `iface` gets its address: a DHCP client socket in `sockets` that sends
    /// the hostname (option 12), or the static address and gateway.
    pub(super) fn configure<'a>(
        config: &NetworkConfig<'a>,
        iface: &mut Interface,
        sockets: &mut SocketSet<'a>,
        memory: &'a mut DhcpSocketMemory<'a>,
        now: Instant,
    ) -> Result<Self, NetError> {
        let dhcp = match config.address {
            AddressConfig::Dhcp => {
                let mut socket = dhcpv4::Socket::new();
                memory.options[0].data = config.hostname.as_bytes();
                socket.set_outgoing_options(&memory.options[..]);
                socket.set_receive_packet_buffer(&mut memory.packet[..]);
                socket.set_parameter_request_list(PARAMETER_REQUEST_LIST);
                Some(sockets.add(socket))
            }
            AddressConfig::Static {
                address,
                prefix_len,
                gateway,
            } => {
                if prefix_len > 32 {
                    return Err(NetError::BadPrefix);
                }
                let cidr = Ipv4Cidr::new(Ipv4Address::from_octets(address), prefix_len);
                iface.update_ip_addrs(|addrs| {
                    // Cannot fail: the address list is empty and holds at least one.
                    let _ = addrs.push(IpCidr::Ipv4(cidr));
                });
                log::info!("net: static address {cidr}");
                if let Some(gateway) = gateway {
                    let gateway = Ipv4Address::from_octets(gateway);
                    // Cannot fail: the route table is empty.
                    let _ = iface.routes_mut().add_default_ipv4_route(gateway);
                    log::info!("net: gateway {gateway}");
                }
                None
            }
        };
        Ok(Self {
            dhcp,
            waiting_since: dhcp.map(|_| now),
            lease_expires_at: None,
            link_local: false,
            dhcp_time_servers: heapless::Vec::new(),
            dhcp_dns_servers: heapless::Vec::new(),
            dhcp_servers_changed: false,
        })
    }

    /// A lease (new or renewed): gives `iface` its address and gateway and counts its
    /// expiry from `now`.
    fn apply_lease(&mut self, iface: &mut Interface, config: &dhcpv4::Config<'_>, now: Instant) {
        let lease = config
            .packet
            .as_ref()
            .and_then(|packet| DhcpRepr::parse(packet).ok())
            .and_then(|repr| repr.lease_duration);
        let cidr = config.address;
        // smoltcp reports every renewal ACK too; the address may be the one in use.
        let renewed = iface.ip_addrs().contains(&IpCidr::Ipv4(cidr));
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
        let mut time_servers = heapless::Vec::new();
        if let Some(packet) = &config.packet {
            for option in packet.options() {
                if option.kind == DHCP_OPTION_NTP_SERVERS {
                    for address in option.data.chunks_exact(4) {
                        let _ = time_servers.push([address[0], address[1], address[2], address[3]]);
                    }
                }
            }
        }
        let dns_servers: heapless::Vec<[u8; 4], 3> = config
            .dns_servers
            .iter()
            .take(3)
            .map(|address| address.octets())
            .collect();
        if time_servers != self.dhcp_time_servers || dns_servers != self.dhcp_dns_servers {
            self.dhcp_time_servers = time_servers;
            self.dhcp_dns_servers = dns_servers;
            self.dhcp_servers_changed = true;
        }
        // smoltcp counts the lease from the ACK, which it handled in this same poll.
        self.lease_expires_at =
            Some(now.add_micros(lease.map_or(DEFAULT_LEASE_SECONDS, u64::from) * 1_000_000));
        self.waiting_since = None;
        self.link_local = false;
        // Setting the addresses flushes the neighbour cache: skip that on a renewal, or
        // every client would be asked for again (its next reply held for ARP).
        if !renewed {
            set_ipv4_address(iface, Some(cidr));
        }
        match config.router {
            Some(router) => {
                // Cannot fail: at most one default route is kept.
                let _ = iface.routes_mut().add_default_ipv4_route(router);
                log::info!("dhcp: gateway {router}");
            }
            None => {
                iface.routes_mut().remove_default_ipv4_route();
                log::info!("dhcp: no gateway offered");
            }
        }
    }

    /// When the link-local fallback is due. It is only taken with the link up (see
    /// `poll_dhcp`): with it down, this deadline would stay in the past and the loop would
    /// spin.
    pub(super) fn link_local_deadline(&self, link: LinkState) -> Option<Instant> {
        match self.waiting_since {
            Some(since) if link == LinkState::Up => Some(since.add_micros(LINK_LOCAL_AFTER_MICROS)),
            _ => None,
        }
    }
}

/// Puts `cidr` in place of the interface's IPv4 address (`None`: removes it), leaving its
/// IPv6 addresses alone.
fn set_ipv4_address(iface: &mut Interface, cidr: Option<Ipv4Cidr>) {
    iface.update_ip_addrs(|addrs| {
        addrs.retain(|addr| !matches!(addr, IpCidr::Ipv4(_)));
        if let Some(cidr) = cidr {
            // IPv4 goes first (the list has room: at most 5 IPv6 addresses are kept).
            let _ = addrs.insert(0, IpCidr::Ipv4(cidr));
        }
    });
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Applies what the DHCP client reports (a lease, its loss), or takes the link-local
    /// fallback once DHCP has gone unanswered for [`LINK_LOCAL_AFTER_MICROS`]; tells the
    /// mDNS responder of a changed address.
    pub(super) fn poll_dhcp(&mut self, now: Instant) {
        let Some(handle) = self.address.dhcp else {
            return;
        };
        let event = self.sockets.get_mut::<dhcpv4::Socket>(handle).poll();
        match event {
            None => {
                self.fall_back_when_unanswered(now);
                return;
            }
            Some(dhcpv4::Event::Configured(config)) => {
                self.address.apply_lease(&mut self.iface, &config, now)
            }
            Some(dhcpv4::Event::Deconfigured) => self.drop_lease(now),
        }
        if let Some((_, responder)) = &mut self.mdns {
            responder.set_address(interface_link_address(&self.iface), now);
        }
    }

    /// The network may be another one after the link returns: asks DHCP again from
    /// scratch. The lease is given up, not run out: the server may well answer at once.
    pub(super) fn restart_dhcp(&mut self, now: Instant) {
        if let Some(handle) = self.address.dhcp {
            self.address.lease_expires_at = None;
            self.sockets.get_mut::<dhcpv4::Socket>(handle).reset();
            log::info!("dhcp: restarting after link return");
            if self.iface.ipv4_addr().is_none() {
                self.address.waiting_since = Some(now);
            }
        }
    }

    /// No DHCP event: takes a link-local address once DHCP has waited long enough with the
    /// link up.
    fn fall_back_when_unanswered(&mut self, now: Instant) {
        if let Some(since) = self.address.waiting_since
            && self.link == LinkState::Up
            && now.micros_since(since) >= LINK_LOCAL_AFTER_MICROS
        {
            self.address.waiting_since = None;
            let cidr = self.use_link_local(now);
            log::warn!(
                "dhcp: no answer after {} s; using link-local {cidr} until a lease arrives",
                LINK_LOCAL_AFTER_MICROS / 1_000_000
            );
        }
    }

    /// The lease is gone (ran out, NAK, or given up on a link return): removes the address,
    /// and takes a link-local one at once if the lease ran out unrenewed.
    fn drop_lease(&mut self, now: Instant) {
        if self.iface.ipv4_addr().is_some() {
            log::warn!("dhcp: lease lost; address removed");
        }
        set_ipv4_address(&mut self.iface, None);
        self.iface.routes_mut().remove_default_ipv4_route();
        self.address.link_local = false;
        let ran_out = self
            .address
            .lease_expires_at
            .take()
            .is_some_and(|expires_at| now >= expires_at);
        if ran_out && self.link == LinkState::Up {
            // Renewing (from T1) and rebinding (from T2) went unanswered for the whole second
            // half of the lease: the server has been gone far longer than LINK_LOCAL_AFTER
            // already. Stay reachable without waiting again; DHCP keeps asking and a lease
            // replaces the link-local address.
            self.address.waiting_since = None;
            let cidr = self.use_link_local(now);
            log::warn!(
                "dhcp: lease ran out unrenewed; using link-local {cidr} until a lease arrives"
            );
        } else {
            // A NAK, or the lease given up on a link return: the server may answer soon.
            // Keep counting from the first unanswered request, not from this event.
            self.address.waiting_since.get_or_insert(now);
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
        set_ipv4_address(&mut self.iface, Some(cidr));
        self.iface.routes_mut().remove_default_ipv4_route();
        self.address.link_local = true;
        if let Some((_, responder)) = &mut self.mdns {
            responder.set_address(Some(link_address(cidr)), now);
        }
        cidr
    }
}
