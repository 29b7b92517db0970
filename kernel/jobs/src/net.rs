//! What a job sees of the appliance's network: [`Net`], split borrows of the interface, the
//! sockets and what is known of the addresses; and the name servers its lookups ask.

use crate::public::{AddressKind, PublicAddress, PublicSource};
use bramble_hal::Instant;
use bramble_proto::slaac::{AddressEntry, Ipv6Autoconfig};
use smoltcp::iface::{Interface, SocketSet};
use smoltcp::wire::{IpAddress, Ipv4Address};

/// Most name servers a lookup is given.
pub const MAX_NAME_SERVERS: usize = 3;

/// The name servers: the DHCP server's (`dhcp`), else the static ones, then the IPv6
/// routers' (for the clock's and the jobs' lookups).
pub fn name_servers(
    static_servers: &[[u8; 4]],
    dhcp: &[[u8; 4]],
    router_advertised: impl Iterator<Item = [u8; 16]>,
) -> heapless::Vec<IpAddress, MAX_NAME_SERVERS> {
    let list = if dhcp.is_empty() {
        static_servers
    } else {
        dhcp
    };
    // The IPv6 routers' name servers (RFC 8106) after the IPv4 ones, as room allows.
    list.iter()
        .map(|octets| IpAddress::Ipv4(Ipv4Address::from_octets(*octets)))
        .chain(router_advertised.map(|octets| IpAddress::Ipv6(octets.into())))
        .take(MAX_NAME_SERVERS)
        .collect()
}

/// The appliance's network as a job sees it: split borrows of its interface, its socket set
/// (where each job's sockets live) and what it knows of the addresses.
pub struct Net<'x, 'a> {
    /// The interface (its addresses; the context sockets connect and look up with).
    pub iface: &'x mut Interface,
    /// Every socket, the jobs' among them.
    pub sockets: &'x mut SocketSet<'a>,
    /// The name servers DHCP gave (empty without DHCP).
    pub dhcp_dns_servers: &'x [[u8; 4]],
    /// IPv6 configuration (`None`: IPv6 is off).
    pub ipv6: Option<&'x Ipv6Autoconfig>,
    /// The public IPv4 address as last learned.
    pub public: &'x mut PublicAddress,
    /// The MAC address the interface uses.
    pub mac: [u8; 6],
}

impl Net<'_, '_> {
    /// The IPv6 addresses and what is known of each; empty with IPv6 off.
    pub fn ipv6_addresses(&self) -> &[AddressEntry] {
        self.ipv6.map_or(&[], |config| config.entries())
    }

    /// The IPv6 default router in use, if any.
    pub fn ipv6_router(&self) -> Option<[u8; 16]> {
        self.ipv6.and_then(|config| config.default_router())
    }

    /// The name servers for a lookup: DHCP's, else `configured` (a static address's), then
    /// the IPv6 routers' (RFC 8106).
    pub fn name_servers(
        &self,
        configured: &[[u8; 4]],
    ) -> heapless::Vec<IpAddress, MAX_NAME_SERVERS> {
        let advertised = self
            .ipv6
            .into_iter()
            .flat_map(|config| config.dns_servers());
        name_servers(configured, self.dhcp_dns_servers, advertised)
    }

    /// Records the public IPv4 address learned by `source`; returns whether it changed. Logs
    /// a change, with the plain NAT warning when the address is not a global one.
    pub fn set_public_ipv4(
        &mut self,
        address: Option<[u8; 4]>,
        source: PublicSource,
        now: Instant,
    ) -> bool {
        let changed = self.public.set(address, source, now);
        if changed {
            match address {
                Some(octets) => {
                    let shown = core::net::Ipv4Addr::from(octets);
                    log::info!("public: address {shown} (from {})", source.name());
                    if let Some(warning) = AddressKind::of(octets).warning() {
                        log::warn!("public: {shown}: {warning}");
                    }
                }
                None => log::warn!("public: address unknown ({} lost it)", source.name()),
            }
        }
        changed
    }
}
