//! What the appliance is told at start-up: host name, how it gets its IPv4 address, whether
//! and how it speaks IPv6, the HTTP port and its connection deadlines, whether mDNS runs, and
//! a random seed.

use bramble_stream::PoolLimits;

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

/// Whether and how the interface speaks IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Config {
    /// Speak IPv6 at all. Off: every received IPv6 frame is dropped and none is sent.
    pub enabled: bool,
    /// A fixed address and prefix length (`address6`); `None`: addresses from the routers'
    /// advertisements (SLAAC, RFC 4862). The link-local address is formed either way.
    pub static_address: Option<([u8; 16], u8)>,
    /// A fixed default router (`gateway6`); `None`: the advertising routers.
    pub gateway: Option<[u8; 16]>,
    /// The key of the stable interface identifiers (RFC 7217): the same at every boot of
    /// this device, and not known off the link (the board derives it from its serial number
    /// and MAC address).
    pub secret: [u8; 16],
}

impl Ipv6Config {
    /// IPv6 off.
    pub const OFF: Ipv6Config = Ipv6Config {
        enabled: false,
        static_address: None,
        gateway: None,
        secret: [0; 16],
    };

    /// IPv6 on, addresses from router advertisements, identifiers keyed with `secret`.
    pub fn autoconfigured(secret: [u8; 16]) -> Self {
        Ipv6Config {
            enabled: true,
            secret,
            ..Self::OFF
        }
    }
}

/// What the appliance is told at start-up.
#[derive(Clone, Copy, Debug)]
pub struct NetworkConfig<'a> {
    /// Host name: sent in DHCP (option 12) and claimed in mDNS as `<hostname>.local`.
    pub hostname: &'a str,
    /// DHCP or static.
    pub address: AddressConfig,
    /// IPv6: on (the default) or off, and a static address.
    pub ipv6: Ipv6Config,
    /// TCP port of the HTTP server (80).
    pub http_port: u16,
    /// Whether to run the mDNS responder.
    pub mdns: bool,
    /// Seed for smoltcp's generator (DHCP transaction IDs, DNS query IDs, local ports) and
    /// mDNS probe timing: unpredictable (the board draws it from the CSPRNG), since guessed
    /// IDs and ports let an off-path attacker spoof DNS answers.
    pub random_seed: u64,
    /// The 128-bit secret keying the SYN cookies and the connection table (drawn from the
    /// CSPRNG at each boot).
    pub secret_key: [u64; 2],
    /// Deadlines of the HTTP connections.
    pub limits: PoolLimits,
    /// Most HTTP connections from one IPv4 address at once (0: no cap).
    pub max_per_source: u32,
}

impl<'a> NetworkConfig<'a> {
    /// DHCP, IPv6 autoconfigured (identifiers keyed with the seed), port 80, mDNS on.
    pub fn dhcp(hostname: &'a str, random_seed: u64) -> Self {
        let mut secret = [0; 16];
        secret[..8].copy_from_slice(&random_seed.to_le_bytes());
        Self {
            hostname,
            address: AddressConfig::Dhcp,
            ipv6: Ipv6Config::autoconfigured(secret),
            http_port: 80,
            mdns: true,
            random_seed,
            secret_key: [
                random_seed,
                random_seed.rotate_left(32) ^ 0x6b65_795f_7365_6564,
            ],
            limits: PoolLimits::DEFAULT,
            max_per_source: 0,
        }
    }
}
