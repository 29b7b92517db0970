//! What an IPv4 address says about reachability from the internet: a public address, or one
//! behind another NAT (RFC 1918's private ranges: double NAT; RFC 6598's shared space: the
//! provider's carrier-grade NAT), or one that is never global. The port-mapping client
//! ([`crate::portmap`]) and the appliance's public address both classify with it.

/// What an IPv4 address says about reachability from the internet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressKind {
    /// A global unicast address: reachable, if the router forwards to us.
    Public,
    /// RFC 1918 (10/8, 172.16/12, 192.168/16): the router is behind another home router
    /// (double NAT).
    Private,
    /// 100.64.0.0/10 (RFC 6598): the provider's carrier-grade NAT.
    SharedCgnat,
    /// Another range that is never global: 0/8, loopback (127/8), link-local (169.254/16),
    /// multicast and reserved (224/4, 240/4).
    Special,
}

impl AddressKind {
    /// Classifies `address`.
    pub fn of(address: [u8; 4]) -> Self {
        match address {
            [10, ..] | [192, 168, ..] => AddressKind::Private,
            [172, b, ..] if (16..32).contains(&b) => AddressKind::Private,
            [100, b, ..] if (64..128).contains(&b) => AddressKind::SharedCgnat,
            [0, ..] | [127, ..] | [169, 254, ..] => AddressKind::Special,
            [a, ..] if a >= 224 => AddressKind::Special,
            _ => AddressKind::Public,
        }
    }

    /// A plain warning for the owner, `None` for a public address.
    pub fn warning(self) -> Option<&'static str> {
        match self {
            AddressKind::Public => None,
            AddressKind::Private => Some(
                "double NAT: the router's own outside address is private; \
                 forward the ports on the upstream router too, or put it in bridge mode",
            ),
            AddressKind::SharedCgnat => Some(
                "carrier-grade NAT: the provider shares one address among customers \
                 (100.64.0.0/10); ask for a public IPv4 address or serve over IPv6",
            ),
            AddressKind::Special => {
                Some("the router reports an address that is not routable on the internet")
            }
        }
    }
}
