//! What the appliance is told at start-up: host name, how it gets its address, the HTTP
//! port, whether mDNS runs, and a random seed.

/// How the interface gets its IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressConfig {
    /// Ask a DHCP server (the default), sending the hostname; while none answers (after
    /// [`LINK_LOCAL_AFTER_MICROS`](super::LINK_LOCAL_AFTER_MICROS), or at once when a lease
    /// runs out unrenewed), use a link-local 169.254.x.y address. DHCP keeps asking, and a
    /// lease replaces it.
    Dhcp,
    /// A fixed address.
    Static {
        /// The interface address.
        address: [u8; 4],
        /// Network prefix length, 0-32.
        prefix_len: u8,
        /// Default gateway, if any.
        gateway: Option<[u8; 4]>,
    },
}

/// What the appliance is told at start-up.
#[derive(Clone, Copy, Debug)]
pub struct NetworkConfig<'a> {
    /// Host name: sent in DHCP (option 12) and claimed in mDNS as `<hostname>.local`.
    pub hostname: &'a str,
    /// DHCP or static.
    pub address: AddressConfig,
    /// TCP port of the HTTP server (80).
    pub http_port: u16,
    /// Whether to run the mDNS responder.
    pub mdns: bool,
    /// Seed for TCP initial sequence numbers, DHCP transaction IDs and mDNS probe timing;
    /// should differ between boots (the timer value at boot, mixed with the MAC, is enough).
    pub random_seed: u64,
}

impl<'a> NetworkConfig<'a> {
    /// DHCP, port 80, mDNS on.
    pub fn dhcp(hostname: &'a str, random_seed: u64) -> Self {
        Self {
            hostname,
            address: AddressConfig::Dhcp,
            http_port: 80,
            mdns: true,
            random_seed,
        }
    }
}
