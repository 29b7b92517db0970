//! BRAMBLE.TXT, the owner's settings file on the SD card: a parser that never allocates.
//!
//! The file is plain text, one `key = value` per line; `#` starts a comment (on its own line or
//! after a value); blank lines are ignored; CRLF line ends and a leading UTF-8 byte-order mark
//! (as Windows editors write them) are accepted; keys are case-insensitive.
//!
//! A bad line never stops the server: [`Settings::parse_lenient`] keeps every good line, leaves
//! the setting of each bad line at its default, and hands each problem to a callback as a
//! [`SettingsError`] whose `Display` names the line number, the key and what is wrong, ready to
//! print on the serial console. [`Settings::parse`] is the strict form (first problem is an
//! error) that the host tool uses to check a file before putting it on a card.
//!
//! [`TEMPLATE`] is the commented file that `bramble image` writes; it parses to
//! [`Settings::default`].
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod ddns;
mod remote;
mod router;

pub use ddns::{
    DNS_PORT, DdnsProtocol, DdnsSettings, Ipv4Source, MAX_KEY_NAME_LEN, MAX_KEY_SECRET_LEN,
    TsigKeySetting,
};

pub use remote::{
    AddressPrefix, DEFAULT_SYSLOG_PORT, MAX_STATUS_PREFIXES, STATUS_TOKEN_LEN, SyslogHost,
    SyslogTarget,
};
pub use router::{DEFAULT_ROUTER_LIFETIME, MAX_ROUTER_LIFETIME, MIN_ROUTER_LIFETIME, RouterPorts};

use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

/// The name of the settings file in the root folder of the card's FAT partition (8.3).
pub const FILE_NAME: &str = "BRAMBLE.TXT";

/// The commented settings file that `bramble image` puts on a new card. Every setting in it
/// has its default value, so it parses to [`Settings::default`].
pub const TEMPLATE: &str = include_str!("../BRAMBLE.TXT");

/// The largest BRAMBLE.TXT worth reading: the template is about 6 KiB, so 32 KiB leaves room
/// for any owner's notes. The host tool refuses a larger file; the kernel reads at most this
/// much into its boot arena.
pub const MAX_FILE_BYTES: usize = 32 * 1024;

/// The host name used when BRAMBLE.TXT names none.
pub const DEFAULT_HOSTNAME: &str = "bramble";

/// The longest host name: one DNS label (RFC 1123 section 2.1, RFC 1035 section 2.3.4).
pub const MAX_HOSTNAME_LEN: usize = 63;

/// How many name servers `dns` may list.
pub const MAX_DNS_SERVERS: usize = 3;

/// The lowest ARM clock `arm_freq` accepts, in MHz.
pub const MIN_ARM_FREQ_MHZ: u16 = 100;

/// The highest ARM clock `arm_freq` accepts, in MHz: the BCM2835's rated 700 MHz. The setting
/// exists to save power; overclocking needs voltage changes Bramble does not make.
pub const MAX_ARM_FREQ_MHZ: u16 = 700;

/// How many time servers `ntp` may list.
pub const MAX_NTP_SERVERS: usize = 3;

/// The longest DNS name (RFC 1035 section 2.3.4, without the root's trailing dot).
pub const MAX_DNS_NAME_LEN: usize = 253;

/// The time servers asked when neither BRAMBLE.TXT nor the DHCP server names any.
pub const DEFAULT_NTP_SERVER: &str = "pool.ntp.org";

/// The longest `hsts` max-age accepted: two years, as the HSTS preload list asks for at most
/// (a longer one only makes a mistake last longer).
pub const MAX_HSTS_SECONDS: u32 = 2 * 365 * 24 * 60 * 60;

/// Whether and how the server answers HTTPS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpsMode {
    /// Plain HTTP only (the default).
    #[default]
    Off,
    /// HTTPS beside plain HTTP.
    On,
    /// HTTPS; plain HTTP answers every request with a 308 redirect to https, except the
    /// ACME HTTP-01 challenge path `/.well-known/acme-challenge/`.
    Only,
}

/// How many names `domain` may list (one certificate covers them all).
pub const MAX_DOMAINS: usize = 4;

/// The longest `acme_directory` URL and `acme_email` address.
pub const MAX_ACME_TEXT_LEN: usize = 200;

/// Let's Encrypt's production directory: the default `acme_directory`.
pub const DEFAULT_ACME_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Where the certificate obtained by ACME (with its keys) is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CertificateStore {
    /// In the store on the card, which survives restarts and power cuts (the default).
    #[default]
    Card,
    /// In RAM only: nothing is ever written to the card, and every boot orders a new
    /// certificate (which counts against the CA's rate limits).
    Ram,
}

/// How the CA validates the names (`acme_challenge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AcmeChallenge {
    /// HTTP-01: the CA fetches a file over plain HTTP on port 80 (the default).
    #[default]
    Http01,
    /// TLS-ALPN-01 (RFC 8737): the CA connects to the HTTPS port with ALPN `acme-tls/1`,
    /// for owners who can forward only 443.
    TlsAlpn01,
    /// DNS-01: a TXT record at `_acme-challenge.NAME`, put up by dynamic DNS (`ddns =
    /// rfc2136`); for hosts without port 80 or 443 reachable, and for wildcard names.
    Dns01,
}

/// Which names (TLS SNI) the HTTPS server answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SniPolicy {
    /// Any name, or none: one site (the default).
    #[default]
    Any,
    /// Only names the certificate covers; clients asking for another name are refused during
    /// the handshake (clients that send no name are still answered).
    Certificate,
}

/// A file in the root folder of the card's FAT partition, as an 8.3 name (what the kernel's
/// FAT reader opens): 1 to 8 characters, optionally a dot and 1 to 3 more; letters, digits
/// and `_ - ~ ! # $ % & ' ( ) @ ^ { }`. Kept upper-cased, as FAT stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CardFileName(heapless::String<12>);

impl CardFileName {
    /// Checks `name` as an 8.3 file name.
    pub fn new(name: &str) -> Result<Self, Problem> {
        let (stem, extension) = match name.split_once('.') {
            Some((stem, extension)) => (stem, Some(extension)),
            None => (name, None),
        };
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_-~!#$%&'()@^{}".contains(c);
        let stem_ok = (1..=8).contains(&stem.len()) && stem.chars().all(allowed);
        let extension_ok =
            extension.is_none_or(|e| (1..=3).contains(&e.len()) && e.chars().all(allowed));
        if !stem_ok || !extension_ok {
            return Err(Problem::NotACardFileName);
        }
        let mut text = heapless::String::new();
        for c in name.chars() {
            // Cannot fail: at most 12 ASCII characters were checked above.
            let _ = text.push(c.to_ascii_uppercase());
        }
        Ok(CardFileName(text))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CardFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A time server: an IPv4 address or a DNS name (resolved through the network's name
/// servers), as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NtpServer(heapless::String<MAX_DNS_NAME_LEN>);

impl NtpServer {
    /// Checks `text` as an IPv4 address or a DNS name (dot-separated RFC 1123 labels), with
    /// an optional `:port` (for a server on another port than NTP's 123).
    pub fn new(text: &str) -> Result<Self, Problem> {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        };
        if let Some(port) = port
            && !port.parse::<u16>().is_ok_and(|port| port != 0)
        {
            return Err(Problem::NotAServer);
        }
        let host = host.strip_suffix('.').unwrap_or(host);
        let is_address = Ipv4Addr::from_str(host).is_ok();
        let labels_ok = host.split('.').all(|label| Hostname::new(label).is_ok());
        if host.is_empty() || host.len() > MAX_DNS_NAME_LEN || !(is_address || labels_ok) {
            return Err(Problem::NotAServer);
        }
        let mut kept = heapless::String::new();
        // Cannot fail: the length was checked above, and a port adds at most 6 bytes to a
        // name that is then at most 253 - 6 (a longer one fails the push and is refused).
        if kept.push_str(host).is_err() {
            return Err(Problem::NotAServer);
        }
        if let Some(port) = port
            && (kept.push(':').is_err() || kept.push_str(port).is_err())
        {
            return Err(Problem::NotAServer);
        }
        Ok(NtpServer(kept))
    }

    /// The host part: an address or a name.
    pub fn host(&self) -> &str {
        self.0.rsplit_once(':').map_or(&self.0, |(host, _)| host)
    }

    /// The port (123 unless given).
    pub fn port(&self) -> u16 {
        self.0
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or(123)
    }

    /// The server's address, if it was given as one.
    pub fn address(&self) -> Option<Ipv4Addr> {
        Ipv4Addr::from_str(self.host()).ok()
    }

    /// The server as written (an address or a name, and the port if one was given).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NtpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name a certificate is asked for: a DNS name of at least two RFC 1123 labels, kept in
/// lower case; a wildcard (`*.example.org`) only through [`DomainName::new_or_wildcard`],
/// for `domain` with DNS-01 (HTTP-01 and TLS-ALPN-01 cannot prove one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainName(heapless::String<MAX_DNS_NAME_LEN>);

impl DomainName {
    /// Checks `text` as a DNS name such as `www.example.org` (a trailing dot is dropped).
    pub fn new(text: &str) -> Result<Self, Problem> {
        let name = text.strip_suffix('.').unwrap_or(text);
        if name.len() > MAX_DNS_NAME_LEN
            || !name.contains('.')
            || !name.split('.').all(|label| Hostname::new(label).is_ok())
            || Ipv4Addr::from_str(name).is_ok()
        {
            return Err(Problem::NotADomainName);
        }
        let mut kept = heapless::String::new();
        for c in name.chars() {
            // Cannot fail: at most MAX_DNS_NAME_LEN ASCII characters were checked above.
            let _ = kept.push(c.to_ascii_lowercase());
        }
        Ok(DomainName(kept))
    }

    /// Like [`DomainName::new`], also taking a wildcard name (`*.example.org`, RFC 8555
    /// §7.1.3), which only DNS-01 can validate.
    pub fn new_or_wildcard(text: &str) -> Result<Self, Problem> {
        match text.strip_prefix("*.") {
            Some(rest) => {
                let base = DomainName::new(rest)?;
                let mut kept = heapless::String::new();
                kept.push_str("*.").map_err(|_| Problem::NotADomainName)?;
                kept.push_str(base.as_str())
                    .map_err(|_| Problem::NotADomainName)?;
                Ok(DomainName(kept))
            }
            None => DomainName::new(text),
        }
    }

    /// Whether it is a wildcard name (`*.example.org`).
    pub fn is_wildcard(&self) -> bool {
        self.0.starts_with("*.")
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DomainName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A host name that is a valid RFC 1123 label: 1 to 63 ASCII letters, digits and hyphens, not
/// starting or ending with a hyphen. Used for mDNS (`<name>.local`) and sent in DHCP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hostname(heapless::String<MAX_HOSTNAME_LEN>);

impl Hostname {
    /// Checks `name` and keeps it as given (host names compare case-insensitively).
    pub fn new(name: &str) -> Result<Self, HostnameError> {
        if name.is_empty() {
            return Err(HostnameError::Empty);
        }
        if name.len() > MAX_HOSTNAME_LEN {
            return Err(HostnameError::TooLong { len: name.len() });
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
        {
            return Err(HostnameError::BadCharacter(c));
        }
        if name.starts_with('-') || name.ends_with('-') {
            return Err(HostnameError::HyphenAtEnd);
        }
        let mut text = heapless::String::new();
        // Cannot fail: the length was checked above.
        let _ = text.push_str(name);
        Ok(Hostname(text))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Hostname {
    fn default() -> Self {
        Hostname::new(DEFAULT_HOSTNAME).expect("the default host name is valid")
    }
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a host name was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostnameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_HOSTNAME_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The name holds a character other than an ASCII letter, digit or hyphen (dots included:
    /// the name is one label, `.local` is added by mDNS).
    BadCharacter(char),
    /// The name starts or ends with a hyphen.
    HyphenAtEnd,
}

impl fmt::Display for HostnameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostnameError::Empty => f.write_str("the name is empty"),
            HostnameError::TooLong { len } => write!(
                f,
                "the name is {len} characters long; at most {MAX_HOSTNAME_LEN} are allowed"
            ),
            HostnameError::BadCharacter(c) => write!(
                f,
                "{c:?} is not allowed; use only letters a-z, digits 0-9 and '-'"
            ),
            HostnameError::HyphenAtEnd => f.write_str("the name must not start or end with '-'"),
        }
    }
}

/// A fixed IPv4 address and the length of its network prefix, as in `192.168.1.50/24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticAddress {
    /// This server's address.
    pub address: Ipv4Addr,
    /// The network prefix length in bits, 1 to 32.
    pub prefix_len: u8,
}

impl StaticAddress {
    /// The netmask that the prefix length stands for (`/24` is 255.255.255.0).
    pub fn netmask(&self) -> Ipv4Addr {
        Ipv4Addr::from(prefix_mask(self.prefix_len))
    }

    /// Whether `other` lies in this address's network.
    pub fn contains(&self, other: Ipv4Addr) -> bool {
        let mask = prefix_mask(self.prefix_len);
        u32::from(self.address) & mask == u32::from(other) & mask
    }
}

impl fmt::Display for StaticAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

fn prefix_mask(prefix_len: u8) -> u32 {
    match prefix_len {
        0 => 0,
        n if n >= 32 => u32::MAX,
        n => u32::MAX << (32 - u32::from(n)),
    }
}

/// How the server gets its IPv4 address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddressMode {
    /// Ask the network's DHCP server (the default).
    #[default]
    Dhcp,
    /// Use a fixed address.
    Static(StaticAddress),
}

/// A fixed IPv6 address and the length of its network prefix, as in `2001:db8:1::50/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticAddress6 {
    /// This server's address (global or unique-local unicast).
    pub address: Ipv6Addr,
    /// The network prefix length in bits, 1 to 128 (64 on almost every network).
    pub prefix_len: u8,
}

impl fmt::Display for StaticAddress6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

/// Which protocol to speak to a USB Ethernet device that offers both (QEMU's usb-net does;
/// most real adapters offer one, which is then used whatever this says).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UsbProtocol {
    /// RNDIS: full frames in one transfer; about 7 times faster on QEMU's usb-net.
    #[default]
    Rndis,
    /// CDC-ECM, the standard class most USB Ethernet adapters speak.
    Ecm,
}

/// How much the kernel prints on the serial console, from least to most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// The normal amount: start-up, address, problems (the default).
    #[default]
    Info,
    /// Detail for diagnosing problems.
    Debug,
    /// Everything, including per-packet detail.
    Trace,
}

/// The owner's settings, each at its default unless BRAMBLE.TXT says otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `hostname`: the name answered over mDNS and sent in DHCP. Default `bramble`.
    pub hostname: Hostname,
    /// `address`: `dhcp` (default) or a fixed address such as `192.168.1.50/24`.
    pub address: AddressMode,
    /// `gateway`: the default router for a fixed address (it must lie in the address's
    /// network). Ignored with DHCP, where the DHCP server names the router. Default none.
    pub gateway: Option<Ipv4Addr>,
    /// `dns`: up to [`MAX_DNS_SERVERS`] name servers for a fixed address, comma-separated.
    /// Ignored with DHCP. Default none.
    pub dns: heapless::Vec<Ipv4Addr, MAX_DNS_SERVERS>,
    /// `http_port`: the TCP port the web server listens on. Default 80.
    pub http_port: u16,
    /// `connections_per_address`: most connections one IPv4 address may hold open at once
    /// (`off`, the default: no cap; many visitors may share an address behind a NAT).
    pub connections_per_address: Option<u16>,
    /// `mdns`: answer `<hostname>.local` queries. Default on.
    pub mdns: bool,
    /// `access_log`: print one line per request on the serial console. Default on.
    pub access_log: bool,
    /// `log_level`: how much the kernel prints on the serial console. Default `info`.
    pub log_level: LogLevel,
    /// `led`: show the server's state on the ACT LED. Default on.
    pub led: bool,
    /// `hdmi`: keep HDMI and composite video powered. Default off (saves power).
    pub hdmi: bool,
    /// `arm_freq`: run the ARM core at this lower clock, in MHz. Default none (700 MHz).
    pub arm_freq_mhz: Option<u16>,
    /// `usb_protocol`: `rndis` or `ecm`, for USB Ethernet devices that offer both.
    pub usb_protocol: UsbProtocol,
    /// `https`: `off` (default), `on`, or `only` (plain HTTP redirects to https).
    pub https: HttpsMode,
    /// `https_port`: the TCP port the HTTPS server listens on. Default 443.
    pub https_port: u16,
    /// `hsts`: `off` (default) or a max-age in seconds for Strict-Transport-Security, sent
    /// on HTTPS responses (RFC 6797).
    pub hsts_seconds: Option<u32>,
    /// `tls_certificate`: the PEM certificate chain on the card, leaf first. Default
    /// `CERT.PEM`.
    pub tls_certificate: CardFileName,
    /// `tls_key`: the PEM private key on the card (ECDSA P-256 or Ed25519). Default
    /// `KEY.PEM`.
    pub tls_key: CardFileName,
    /// `sni`: `any` (default) or `certificate` (refuse names the certificate lacks).
    pub sni: SniPolicy,
    /// `ntp = off` clears this: no clock. Default on.
    pub ntp: bool,
    /// `ntp`: up to [`MAX_NTP_SERVERS`] names or addresses; empty (`auto`, the default)
    /// means the DHCP server's time servers (option 42), or [`DEFAULT_NTP_SERVER`].
    pub ntp_servers: heapless::Vec<NtpServer, MAX_NTP_SERVERS>,
    /// `ipv6`: speak IPv6 (a link-local address, addresses from the routers' advertisements,
    /// `address6`). Default on. Off: no IPv6 packet is sent or answered.
    pub ipv6: bool,
    /// `address6`: `auto` (default: addresses from router advertisements, RFC 4862) or a
    /// fixed address such as `2001:db8:1::50/64` (then no address is formed from the
    /// advertisements; their routers and name servers are still used).
    pub address6: Option<StaticAddress6>,
    /// `gateway6`: the IPv6 default router (often a link-local `fe80::...` address); routers
    /// that advertise themselves are then not used as default. Default none.
    pub gateway6: Option<Ipv6Addr>,
    /// `ipv6_secret`: the key of the stable IPv6 addresses (RFC 7217 section 5), 32 hex
    /// digits that `bramble image` draws at random for a new card; `board` (the default, and
    /// what a reproducible image keeps) keys them by the board's serial number and MAC,
    /// which anyone who learns the serial can repeat.
    pub ipv6_secret: Option<[u8; 16]>,
    /// `acme`: obtain and renew the HTTPS certificate by ACME (RFC 8555). Default off.
    pub acme: bool,
    /// `domain`: up to [`MAX_DOMAINS`] DNS names, comma-separated, that the certificate
    /// covers (the first is its subject). Default none.
    pub domains: heapless::Vec<DomainName, MAX_DOMAINS>,
    /// `acme_directory`: the CA's directory URL (https). Default
    /// [`DEFAULT_ACME_DIRECTORY`].
    pub acme_directory: heapless::String<MAX_ACME_TEXT_LEN>,
    /// `acme_email`: the contact address given to the CA. Default none.
    pub acme_email: Option<heapless::String<MAX_ACME_TEXT_LEN>>,
    /// `acme_ca_certificate`: a PEM file on the card with the roots the CA's own HTTPS
    /// server chains to (private or test CAs). Default none: the Let's Encrypt roots built
    /// into the kernel.
    pub acme_ca_certificate: Option<CardFileName>,
    /// `certificate_store`: `card` (default) or `ram`.
    pub certificate_store: CertificateStore,
    /// `acme_challenge`: `http-01` (default), `tls-alpn-01` or `dns-01`.
    pub acme_challenge: AcmeChallenge,
    /// `syslog`: `off` (default) or the collector the log is also sent to over UDP
    /// (RFC 5424 messages): `192.168.1.9`, `192.168.1.9:1514`, `logs.lan`, `2001:db8::9` or
    /// `[2001:db8::9]:1514`; port [`DEFAULT_SYSLOG_PORT`] unless named.
    pub syslog: Option<SyslogTarget>,
    /// `status_from`: `link` (default: the link-local ranges) or up to
    /// [`MAX_STATUS_PREFIXES`] prefixes whose clients may see the status page and metrics.
    pub status_from: heapless::Vec<AddressPrefix, MAX_STATUS_PREFIXES>,
    /// `status_token`: `off` (default) or a bearer token that lets any client see them.
    pub status_token: Option<heapless::String<64>>,
    /// The dynamic DNS settings (`ddns`, `ddns_name`, `ddns_zone`, `ddns_server`,
    /// `ddns_key`, `ddns_ipv4`, `ddns_ipv6`).
    pub ddns: DdnsSettings,
    /// `router_ports`: `off` (default), `on` (ask the router to forward the HTTP and HTTPS
    /// ports, same numbers outside) or the outside ports `HTTP,HTTPS`.
    pub router_ports: RouterPorts,
    /// `router_lifetime`: seconds each mapping is asked for. Default
    /// [`DEFAULT_ROUTER_LIFETIME`].
    pub router_lifetime: u32,
    /// `proxy_from`: `off` (default) or up to [`MAX_STATUS_PREFIXES`] prefixes of the
    /// owner's caching proxies, whose X-Forwarded-For / Forwarded name the client.
    pub proxy_from: heapless::Vec<AddressPrefix, MAX_STATUS_PREFIXES>,
    /// `heartbeat`: `off` (default) or an `https://` URL pinged with a GET every
    /// `heartbeat_every` minutes.
    pub heartbeat: Option<heapless::String<MAX_ACME_TEXT_LEN>>,
    /// `heartbeat_every`: minutes between pings, 1 to 1440. Default 5.
    pub heartbeat_every: u16,
}

/// Default `tls_certificate`.
pub const DEFAULT_TLS_CERTIFICATE: &str = "CERT.PEM";
/// Default `tls_key`.
pub const DEFAULT_TLS_KEY: &str = "KEY.PEM";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            hostname: Hostname::default(),
            address: AddressMode::Dhcp,
            gateway: None,
            dns: heapless::Vec::new(),
            http_port: 80,
            connections_per_address: None,
            mdns: true,
            access_log: true,
            log_level: LogLevel::Info,
            led: true,
            hdmi: false,
            arm_freq_mhz: None,
            usb_protocol: UsbProtocol::Rndis,
            https: HttpsMode::Off,
            https_port: 443,
            hsts_seconds: None,
            tls_certificate: CardFileName::new(DEFAULT_TLS_CERTIFICATE)
                .expect("the default certificate name is valid"),
            tls_key: CardFileName::new(DEFAULT_TLS_KEY).expect("the default key name is valid"),
            sni: SniPolicy::Any,
            ntp: true,
            ntp_servers: heapless::Vec::new(),
            ipv6: true,
            address6: None,
            gateway6: None,
            ipv6_secret: None,
            acme: false,
            domains: heapless::Vec::new(),
            acme_directory: heapless::String::try_from(DEFAULT_ACME_DIRECTORY)
                .expect("the default directory fits"),
            acme_email: None,
            acme_ca_certificate: None,
            certificate_store: CertificateStore::Card,
            acme_challenge: AcmeChallenge::Http01,
            syslog: None,
            status_from: heapless::Vec::new(),
            status_token: None,
            ddns: DdnsSettings::default(),
            router_ports: RouterPorts::Off,
            router_lifetime: DEFAULT_ROUTER_LIFETIME,
            proxy_from: heapless::Vec::new(),
            heartbeat: None,
            heartbeat_every: 5,
        }
    }
}

/// The settings BRAMBLE.TXT knows, in the order the template lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Hostname,
    Address,
    Gateway,
    Dns,
    HttpPort,
    ConnectionsPerAddress,
    Mdns,
    AccessLog,
    LogLevel,
    Led,
    Hdmi,
    ArmFreq,
    UsbProtocol,
    Https,
    HttpsPort,
    Hsts,
    CertificateFile,
    PrivateKeyFile,
    Sni,
    Ntp,
    Ipv6,
    Address6,
    Gateway6,
    Ipv6Secret,
    Acme,
    Domain,
    AcmeDirectory,
    AcmeEmail,
    AcmeCaCertificate,
    CertificateStore,
    AcmeChallenge,
    Syslog,
    StatusFrom,
    StatusToken,
    Ddns,
    DdnsName,
    DdnsZone,
    DdnsServer,
    DdnsTsig,
    DdnsIpv4,
    DdnsIpv6,
    RouterPorts,
    RouterLifetime,
    ProxyFrom,
    Heartbeat,
    HeartbeatEvery,
}

impl Key {
    const ALL: [Key; 46] = [
        Key::Hostname,
        Key::Address,
        Key::Gateway,
        Key::Dns,
        Key::HttpPort,
        Key::ConnectionsPerAddress,
        Key::Mdns,
        Key::AccessLog,
        Key::LogLevel,
        Key::Led,
        Key::Hdmi,
        Key::ArmFreq,
        Key::UsbProtocol,
        Key::Https,
        Key::HttpsPort,
        Key::Hsts,
        Key::CertificateFile,
        Key::PrivateKeyFile,
        Key::Sni,
        Key::Ntp,
        Key::Ipv6,
        Key::Address6,
        Key::Gateway6,
        Key::Ipv6Secret,
        Key::Acme,
        Key::Domain,
        Key::AcmeDirectory,
        Key::AcmeEmail,
        Key::AcmeCaCertificate,
        Key::CertificateStore,
        Key::AcmeChallenge,
        Key::Syslog,
        Key::StatusFrom,
        Key::StatusToken,
        Key::Ddns,
        Key::DdnsName,
        Key::DdnsZone,
        Key::DdnsServer,
        Key::DdnsTsig,
        Key::DdnsIpv4,
        Key::DdnsIpv6,
        Key::RouterPorts,
        Key::RouterLifetime,
        Key::ProxyFrom,
        Key::Heartbeat,
        Key::HeartbeatEvery,
    ];

    fn name(self) -> &'static str {
        match self {
            Key::Hostname => "hostname",
            Key::Address => "address",
            Key::Gateway => "gateway",
            Key::Dns => "dns",
            Key::HttpPort => "http_port",
            Key::ConnectionsPerAddress => "connections_per_address",
            Key::Mdns => "mdns",
            Key::AccessLog => "access_log",
            Key::LogLevel => "log_level",
            Key::Led => "led",
            Key::Hdmi => "hdmi",
            Key::ArmFreq => "arm_freq",
            Key::UsbProtocol => "usb_protocol",
            Key::Https => "https",
            Key::HttpsPort => "https_port",
            Key::Hsts => "hsts",
            Key::CertificateFile => "tls_certificate",
            Key::PrivateKeyFile => "tls_key",
            Key::Sni => "sni",
            Key::Ntp => "ntp",
            Key::Ipv6 => "ipv6",
            Key::Address6 => "address6",
            Key::Gateway6 => "gateway6",
            Key::Ipv6Secret => "ipv6_secret",
            Key::Acme => "acme",
            Key::Domain => "domain",
            Key::AcmeDirectory => "acme_directory",
            Key::AcmeEmail => "acme_email",
            Key::AcmeCaCertificate => "acme_ca_certificate",
            Key::CertificateStore => "certificate_store",
            Key::AcmeChallenge => "acme_challenge",
            Key::Syslog => "syslog",
            Key::StatusFrom => "status_from",
            Key::StatusToken => "status_token",
            Key::Ddns => "ddns",
            Key::DdnsName => "ddns_name",
            Key::DdnsZone => "ddns_zone",
            Key::DdnsServer => "ddns_server",
            Key::DdnsTsig => "ddns_key",
            Key::DdnsIpv4 => "ddns_ipv4",
            Key::DdnsIpv6 => "ddns_ipv6",
            Key::RouterPorts => "router_ports",
            Key::RouterLifetime => "router_lifetime",
            Key::ProxyFrom => "proxy_from",
            Key::Heartbeat => "heartbeat",
            Key::HeartbeatEvery => "heartbeat_every",
        }
    }

    fn find(name: &str) -> Option<Key> {
        Key::ALL
            .iter()
            .copied()
            .find(|key| key.name().eq_ignore_ascii_case(name))
    }
}

/// What is wrong with one line of BRAMBLE.TXT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The line is not valid UTF-8 text.
    NotUtf8,
    /// The line has no `=` between a key and a value.
    MissingEquals,
    /// The line has nothing before its `=`.
    MissingKey,
    /// The key is not one Bramble knows (a typo, most likely).
    UnknownKey,
    /// The key was already set on an earlier line.
    Duplicate {
        /// The line that set it first (1-based).
        first_line: usize,
    },
    /// The line has nothing after its `=`.
    EmptyValue,
    /// The host name is not a valid RFC 1123 label.
    Hostname(HostnameError),
    /// The value is not an IPv4 address in dotted form (`192.168.1.50`).
    NotAnIpv4Address,
    /// `address` is neither `dhcp` nor an address with a prefix length.
    NotAnAddressMode,
    /// A fixed address lacks its prefix length (`/24`).
    MissingPrefixLength,
    /// The prefix length is not a number from 1 to 32.
    BadPrefixLength,
    /// The address cannot belong to a host: unspecified, loopback, multicast, broadcast, or the
    /// network or broadcast address of its own network.
    NotAHostAddress,
    /// The gateway does not lie in the fixed address's network.
    GatewayOutsideNetwork,
    /// `dns` lists more than [`MAX_DNS_SERVERS`] servers.
    TooManyDnsServers,
    /// The value is not `on` or `off` (`yes`/`no` and `true`/`false` are accepted too).
    NotOnOff,
    /// The value is not a whole number.
    NotANumber,
    /// The number is outside the range the setting allows.
    OutOfRange {
        /// The smallest value allowed.
        min: u32,
        /// The largest value allowed.
        max: u32,
    },
    /// `log_level` is not one of error, warn, info, debug, trace.
    NotALogLevel,
    /// `usb_protocol` is neither `rndis` nor `ecm`.
    NotAUsbProtocol,
    /// `https` is not `on`, `off` or `only`.
    NotAnHttpsMode,
    /// `hsts` is neither `off` nor a number of seconds in range.
    NotAnHstsSetting,
    /// A file name is not an 8.3 name in the card's root folder.
    NotACardFileName,
    /// `sni` is neither `any` nor `certificate`.
    NotAnSniPolicy,
    /// A time server is neither an IPv4 address nor a DNS name.
    NotAServer,
    /// `ntp` lists more than [`MAX_NTP_SERVERS`] servers.
    TooManyNtpServers,
    /// `https_port` is the same as `http_port`.
    SamePortTwice,
    /// The value is not an IPv6 address (`2001:db8::1`, `fe80::1`).
    NotAnIpv6Address,
    /// `address6` is neither `auto` nor an IPv6 address with a prefix length.
    NotAnAddress6Mode,
    /// The IPv6 prefix length is not a number from 1 to 128.
    BadPrefixLength6,
    /// The IPv6 address cannot be this host's: unspecified, loopback, multicast, IPv4-mapped,
    /// or (for `address6`) link-local, which Bramble forms itself.
    NotAHostAddress6,
    /// A `domain` name is not a DNS name of at least two labels.
    NotADomainName,
    /// `domain` lists more than [`MAX_DOMAINS`] names.
    TooManyDomains,
    /// `acme_directory` is not an `https://` URL of at most [`MAX_ACME_TEXT_LEN`] bytes.
    NotAnHttpsUrl,
    /// `acme_email` is not an address such as `owner@example.org`.
    NotAnEmailAddress,
    /// `certificate_store` is neither `card` nor `ram`.
    NotACertificateStore,
    /// `acme_challenge` is not `http-01`, `tls-alpn-01` or `dns-01`.
    NotAnAcmeChallenge,
    /// A wildcard `domain` without `acme_challenge = dns-01`.
    WildcardNeedsDns01,
    /// `acme_challenge = dns-01` without dynamic DNS to publish its answers.
    Dns01WithoutDdns,
    /// `acme = on` without a `domain` to ask a certificate for.
    AcmeWithoutDomain,
    /// `syslog` is neither `off` nor an IPv4 or IPv6 address with an optional port.
    NotASyslogTarget,
    /// A `status_from` item is not an address with an optional prefix length.
    NotAPrefix,
    /// `status_from` lists more than [`MAX_STATUS_PREFIXES`] prefixes.
    TooManyPrefixes,
    /// `status_token` is neither `off` nor 16 to 64 letters, digits, `-`, `.`, `_`, `~`.
    NotAToken,
    /// `ddns` is not `off` or `rfc2136`.
    NotADdnsProtocol,
    /// `ddns_ipv4` is not `public`, `interface` or `off`.
    NotAnIpv4Source,
    /// `ddns_server` is not an IPv4 or IPv6 address with an optional port.
    NotADnsServer,
    /// `ddns_key` is not `hmac-sha256:NAME:BASE64` with a secret of 16 to 64 bytes.
    NotATsigKey,
    /// `ddns` is on but a setting it needs is missing (named).
    DdnsIncomplete(&'static str),
    /// `ipv6_secret` is neither `board` nor 32 hexadecimal digits.
    NotASecret,
    /// `router_ports` is neither `off`, `on`, nor two different port numbers `HTTP,HTTPS`.
    NotRouterPorts,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotUtf8 => f.write_str("the line is not plain text (invalid UTF-8)"),
            Problem::MissingEquals => f.write_str("expected a setting written as `key = value`"),
            Problem::MissingKey => f.write_str("there is no setting name before '='"),
            Problem::UnknownKey => {
                f.write_str("is not a known setting; known settings are ")?;
                for (i, key) in Key::ALL.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(key.name())?;
                }
                Ok(())
            }
            Problem::Duplicate { first_line } => {
                write!(f, "is set twice (first on line {first_line}); this line is ignored")
            }
            Problem::EmptyValue => f.write_str("has no value after '='"),
            Problem::Hostname(e) => write!(f, "is not a valid host name: {e}"),
            Problem::NotAnIpv4Address => {
                f.write_str("expected an IPv4 address such as 192.168.1.1")
            }
            Problem::NotAnAddressMode => f.write_str(
                "expected `dhcp` or a fixed address with its prefix length, such as 192.168.1.50/24",
            ),
            Problem::MissingPrefixLength => f.write_str(
                "a fixed address needs its prefix length, such as 192.168.1.50/24 \
                 (/24 is netmask 255.255.255.0)",
            ),
            Problem::BadPrefixLength => f.write_str("the prefix length must be a number from 1 to 32"),
            Problem::NotAHostAddress => f.write_str(
                "is not an address a host can use (it is reserved, or the network's own \
                 network or broadcast address)",
            ),
            Problem::GatewayOutsideNetwork => {
                f.write_str("the gateway must be in the same network as the fixed address")
            }
            Problem::TooManyDnsServers => {
                write!(f, "at most {MAX_DNS_SERVERS} name servers may be listed")
            }
            Problem::NotOnOff => f.write_str("expected `on` or `off`"),
            Problem::NotANumber => f.write_str("expected a whole number"),
            Problem::OutOfRange { min, max } => {
                write!(f, "the number must be from {min} to {max}")
            }
            Problem::NotALogLevel => {
                f.write_str("expected one of error, warn, info, debug, trace")
            }
            Problem::NotAUsbProtocol => f.write_str("expected `rndis` or `ecm`"),
            Problem::NotAnHttpsMode => f.write_str("expected `on`, `off` or `only`"),
            Problem::NotAnHstsSetting => write!(
                f,
                "expected `off` or a max-age in seconds from 1 to {MAX_HSTS_SECONDS} (two years)"
            ),
            Problem::NotACardFileName => f.write_str(
                "expected a file name in the card's top folder, at most 8 characters, a dot \
                 and 3 more (for example CERT.PEM)",
            ),
            Problem::NotAnSniPolicy => f.write_str("expected `any` or `certificate`"),
            Problem::NotAServer => {
                f.write_str("expected a server name such as pool.ntp.org or an IPv4 address")
            }
            Problem::TooManyNtpServers => {
                write!(f, "at most {MAX_NTP_SERVERS} time servers may be listed")
            }
            Problem::SamePortTwice => f.write_str(
                "https_port must differ from http_port; HTTPS uses 443 (8443 when http_port is 443)",
            ),
            Problem::NotAnIpv6Address => {
                f.write_str("expected an IPv6 address such as 2001:db8::1 or fe80::1")
            }
            Problem::NotAnAddress6Mode => f.write_str(
                "expected `auto` or a fixed IPv6 address with its prefix length, such as \
                 2001:db8:1::50/64",
            ),
            Problem::BadPrefixLength6 => {
                f.write_str("the prefix length must be a number from 1 to 128 (usually 64)")
            }
            Problem::NotAHostAddress6 => f.write_str(
                "is not an IPv6 address this server can use (unspecified, loopback, multicast, \
                 IPv4-mapped, or link-local, which Bramble makes itself)",
            ),
            Problem::NotADomainName => f.write_str(
                "expected a domain name such as example.org (letters, digits, '-', dots)",
            ),
            Problem::TooManyDomains => {
                write!(f, "at most {MAX_DOMAINS} names may be listed")
            }
            Problem::NotAnHttpsUrl => write!(
                f,
                "expected an https:// URL of at most {MAX_ACME_TEXT_LEN} characters"
            ),
            Problem::NotAnEmailAddress => {
                f.write_str("expected an e-mail address such as owner@example.org")
            }
            Problem::NotACertificateStore => f.write_str("expected `card` or `ram`"),
            Problem::NotAnAcmeChallenge => {
                f.write_str("expected `http-01`, `tls-alpn-01` or `dns-01`")
            }
            Problem::WildcardNeedsDns01 => f.write_str(
                "a wildcard name (*.example.org) can only be validated by acme_challenge = \
                 dns-01; it is left out",
            ),
            Problem::Dns01WithoutDdns => f.write_str(
                "dns-01 puts its TXT records up by dynamic DNS: it needs ddns = rfc2136 with \
                 its ddns_ settings",
            ),
            Problem::AcmeWithoutDomain => f.write_str(
                "acme = on needs the names to ask for, for example `domain = example.org`; \
                 ACME stays off",
            ),
            Problem::NotAPrefix => f.write_str(
                "expected `link` or addresses with optional prefix lengths, such as \
                 192.168.1.0/24, 2001:db8::/32",
            ),
            Problem::TooManyPrefixes => {
                write!(f, "at most {MAX_STATUS_PREFIXES} prefixes may be listed")
            }
            Problem::NotASecret => {
                f.write_str("expected `board` or 32 hexadecimal digits (16 random bytes)")
            }
            Problem::NotAToken => f.write_str(
                "expected `off` or 16 to 64 letters, digits, '-', '.', '_' or '~'",
            ),
            Problem::NotADdnsProtocol => f.write_str("expected `off` or `rfc2136`"),
            Problem::NotAnIpv4Source => f.write_str("expected `public`, `interface` or `off`"),
            Problem::NotADnsServer => f.write_str(
                "expected a name server's address with an optional port, such as \
                 192.0.2.53 or [2001:db8::53]:53",
            ),
            Problem::NotATsigKey => f.write_str(
                "expected hmac-sha256:KEYNAME:SECRET, the secret in base64 (16 to 64 bytes), \
                 as `tsig-keygen` or `keymgr -t` print it",
            ),
            Problem::DdnsIncomplete(missing) => {
                write!(f, "needs {missing} too; dynamic DNS stays off")
            }
            Problem::NotRouterPorts => f.write_str(
                "expected `off`, `on`, or the outside ports for HTTP and HTTPS, such as 8080,8443",
            ),
            Problem::NotASyslogTarget => f.write_str(
                "expected `off` or a collector's address with an optional port, such as \
                 192.168.1.9, 192.168.1.9:1514 or [2001:db8::9]:1514",
            ),
        }
    }
}

/// One bad line of BRAMBLE.TXT: where it is, which setting, and what is wrong.
///
/// `Display` gives one line for the serial console, for example
/// `BRAMBLE.TXT line 7: led = blue: expected `on` or `off``.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingsError<'a> {
    /// The line number, counting from 1.
    pub line: usize,
    /// The key as written on the line (empty when the line has none or is not text; the whole
    /// trimmed line when it has no `=`).
    pub key: &'a str,
    /// The value as written (empty when the line has none).
    pub value: &'a str,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for SettingsError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{FILE_NAME} line {}: ", self.line)?;
        match self.problem {
            Problem::NotUtf8 | Problem::MissingKey => write!(f, "{}", self.problem),
            Problem::MissingEquals => write!(f, "`{}`: {}", self.key, self.problem),
            Problem::UnknownKey | Problem::Duplicate { .. } | Problem::EmptyValue => {
                write!(f, "`{}` {}", self.key, self.problem)
            }
            _ => write!(f, "{} = {}: {}", self.key, self.value, self.problem),
        }
    }
}

impl Settings {
    /// Parses BRAMBLE.TXT strictly: the first bad line is an error. The host tool uses this
    /// to check a file before it goes on a card.
    pub fn parse(text: &str) -> Result<Settings, SettingsError<'_>> {
        let mut first = None;
        let settings = Self::parse_lenient(text, |error| {
            first.get_or_insert(error);
        });
        match first {
            Some(error) => Err(error),
            None => Ok(settings),
        }
    }

    /// Parses BRAMBLE.TXT the way the kernel does: every good line is applied, every bad line
    /// is passed to `report` and leaves its setting at the default.
    pub fn parse_lenient<'a>(text: &'a str, report: impl FnMut(SettingsError<'a>)) -> Settings {
        Self::parse_bytes(text.as_bytes(), report)
    }

    /// Like [`Settings::parse_lenient`], for the raw bytes read from the card: a line that is
    /// not UTF-8 is reported and skipped, the others are parsed.
    pub fn parse_bytes<'a>(bytes: &'a [u8], mut report: impl FnMut(SettingsError<'a>)) -> Settings {
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let mut settings = Settings::default();
        let mut first_seen = [0usize; Key::ALL.len()];
        let mut gateway_line: Option<(usize, &'a str, &'a str)> = None;

        for (index, raw_line) in bytes.split(|&b| b == b'\n').enumerate() {
            let line = index + 1;
            let Ok(text) = core::str::from_utf8(raw_line) else {
                report(SettingsError {
                    line,
                    key: "",
                    value: "",
                    problem: Problem::NotUtf8,
                });
                continue;
            };
            let content = match text.find('#') {
                Some(at) => &text[..at],
                None => text,
            }
            .trim();
            if content.is_empty() {
                continue;
            }
            let Some((key_text, value)) = content.split_once('=') else {
                report(SettingsError {
                    line,
                    key: content,
                    value: "",
                    problem: Problem::MissingEquals,
                });
                continue;
            };
            let (key_text, value) = (key_text.trim(), value.trim());
            let error = |problem| SettingsError {
                line,
                key: key_text,
                value,
                problem,
            };
            if key_text.is_empty() {
                report(error(Problem::MissingKey));
                continue;
            }
            let Some(key) = Key::find(key_text) else {
                report(error(Problem::UnknownKey));
                continue;
            };
            let slot = &mut first_seen[key as usize];
            if *slot != 0 {
                report(error(Problem::Duplicate { first_line: *slot }));
                continue;
            }
            *slot = line;
            if value.is_empty() {
                report(error(Problem::EmptyValue));
                continue;
            }
            if let Err(problem) = settings.apply(key, value) {
                report(error(problem));
                continue;
            }
            if key == Key::Gateway {
                gateway_line = Some((line, key_text, value));
            }
        }

        // HTTPS needs a port of its own; checked once both are known.
        if settings.https_port == settings.http_port {
            let line = first_seen[Key::HttpsPort as usize].max(first_seen[Key::HttpPort as usize]);
            settings.https_port = if settings.http_port == 443 { 8443 } else { 443 };
            report(SettingsError {
                line,
                key: "https_port",
                value: "",
                problem: Problem::SamePortTwice,
            });
        }

        // Wildcard names only by DNS-01, and DNS-01 only through dynamic DNS.
        if settings.acme_challenge != AcmeChallenge::Dns01
            && settings.domains.iter().any(DomainName::is_wildcard)
        {
            settings.domains.retain(|name| !name.is_wildcard());
            report(SettingsError {
                line: first_seen[Key::Domain as usize],
                key: "domain",
                value: "",
                problem: Problem::WildcardNeedsDns01,
            });
        }
        if settings.acme_challenge == AcmeChallenge::Dns01
            && (settings.ddns.protocol == DdnsProtocol::Off || settings.ddns.missing().is_some())
        {
            report(SettingsError {
                line: first_seen[Key::AcmeChallenge as usize],
                key: "acme_challenge",
                value: "dns-01",
                problem: Problem::Dns01WithoutDdns,
            });
        }

        // ACME needs names; checked once both are known.
        if settings.acme && settings.domains.is_empty() {
            settings.acme = false;
            report(SettingsError {
                line: first_seen[Key::Acme as usize],
                key: "acme",
                value: "on",
                problem: Problem::AcmeWithoutDomain,
            });
        }

        // Dynamic DNS needs its name, server and key; checked once all are known.
        if let Some(missing) = settings.ddns.missing() {
            settings.ddns.protocol = DdnsProtocol::Off;
            report(SettingsError {
                line: first_seen[Key::Ddns as usize],
                key: "ddns",
                value: "rfc2136",
                problem: Problem::DdnsIncomplete(missing),
            });
        }

        // A gateway must be reachable from a fixed address; checked once both are known.
        if let (AddressMode::Static(fixed), Some(gateway), Some((line, key, value))) =
            (settings.address, settings.gateway, gateway_line)
            && (!fixed.contains(gateway) || gateway == fixed.address)
        {
            settings.gateway = None;
            report(SettingsError {
                line,
                key,
                value,
                problem: Problem::GatewayOutsideNetwork,
            });
        }
        settings
    }

    /// Sets `key` from its (trimmed, non-empty) value text, or says what is wrong with it.
    fn apply(&mut self, key: Key, value: &str) -> Result<(), Problem> {
        match key {
            Key::Hostname => self.hostname = Hostname::new(value).map_err(Problem::Hostname)?,
            Key::Address => self.address = parse_address_mode(value)?,
            Key::Gateway => self.gateway = Some(parse_host_address(value)?),
            Key::Dns => {
                let mut servers = heapless::Vec::new();
                for item in value.split(',') {
                    let server = parse_host_address(item.trim())?;
                    servers
                        .push(server)
                        .map_err(|_| Problem::TooManyDnsServers)?;
                }
                self.dns = servers;
            }
            Key::HttpPort => self.http_port = parse_number(value, 1, u16::MAX)?,
            Key::ConnectionsPerAddress => {
                self.connections_per_address = if value.eq_ignore_ascii_case("off") {
                    None
                } else {
                    Some(parse_number(value, 1, u16::MAX)?)
                }
            }
            Key::Mdns => self.mdns = parse_switch(value)?,
            Key::AccessLog => self.access_log = parse_switch(value)?,
            Key::LogLevel => self.log_level = parse_log_level(value)?,
            Key::Led => self.led = parse_switch(value)?,
            Key::Hdmi => self.hdmi = parse_switch(value)?,
            Key::ArmFreq => {
                self.arm_freq_mhz = Some(parse_number(value, MIN_ARM_FREQ_MHZ, MAX_ARM_FREQ_MHZ)?)
            }
            Key::Https => {
                self.https = match_word(
                    value,
                    &[
                        ("off", HttpsMode::Off),
                        ("on", HttpsMode::On),
                        ("only", HttpsMode::Only),
                    ],
                )
                .ok_or(Problem::NotAnHttpsMode)?
            }
            Key::HttpsPort => self.https_port = parse_number(value, 1, u16::MAX)?,
            Key::Hsts => {
                self.hsts_seconds = if value.eq_ignore_ascii_case("off") {
                    None
                } else {
                    let seconds: u32 = value
                        .parse()
                        .ok()
                        .filter(|seconds| (1..=MAX_HSTS_SECONDS).contains(seconds))
                        .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                        .ok_or(Problem::NotAnHstsSetting)?;
                    Some(seconds)
                }
            }
            Key::CertificateFile => self.tls_certificate = CardFileName::new(value)?,
            Key::PrivateKeyFile => self.tls_key = CardFileName::new(value)?,
            Key::Sni => {
                self.sni = match_word(
                    value,
                    &[
                        ("any", SniPolicy::Any),
                        ("certificate", SniPolicy::Certificate),
                    ],
                )
                .ok_or(Problem::NotAnSniPolicy)?
            }
            Key::Ntp => {
                let mut servers = heapless::Vec::new();
                let off = value.eq_ignore_ascii_case("off");
                if !off && !value.eq_ignore_ascii_case("auto") {
                    for item in value.split(',') {
                        servers
                            .push(NtpServer::new(item.trim())?)
                            .map_err(|_| Problem::TooManyNtpServers)?;
                    }
                }
                self.ntp = !off;
                self.ntp_servers = servers;
            }
            Key::Ipv6 => self.ipv6 = parse_switch(value)?,
            Key::Address6 => {
                self.address6 = if value.eq_ignore_ascii_case("auto") {
                    None
                } else {
                    Some(parse_address6(value)?)
                }
            }
            Key::Gateway6 => {
                let gateway = Ipv6Addr::from_str(value).map_err(|_| Problem::NotAnIpv6Address)?;
                if !is_host_address6(gateway) {
                    return Err(Problem::NotAHostAddress6);
                }
                self.gateway6 = Some(gateway);
            }
            Key::Ipv6Secret => self.ipv6_secret = parse_secret(value)?,
            Key::Acme => self.acme = parse_switch(value)?,
            Key::Domain => {
                let mut names = heapless::Vec::new();
                for item in value.split(',') {
                    names
                        .push(DomainName::new_or_wildcard(item.trim())?)
                        .map_err(|_| Problem::TooManyDomains)?;
                }
                self.domains = names;
            }
            Key::AcmeDirectory => {
                let rest = value
                    .get(..8)
                    .filter(|scheme| scheme.eq_ignore_ascii_case("https://"))
                    .map(|_| &value[8..])
                    .ok_or(Problem::NotAnHttpsUrl)?;
                let host = rest.split(['/', ':']).next().unwrap_or("");
                if host.is_empty() || value.bytes().any(|b| !b.is_ascii_graphic()) {
                    return Err(Problem::NotAnHttpsUrl);
                }
                self.acme_directory =
                    heapless::String::try_from(value).map_err(|_| Problem::NotAnHttpsUrl)?;
            }
            Key::AcmeEmail => {
                let ok = value.split_once('@').is_some_and(|(local, domain)| {
                    !local.is_empty()
                        && domain.contains('.')
                        && !domain.contains('@')
                        && value.bytes().all(|b| b.is_ascii_graphic() && b != b',')
                });
                if !ok {
                    return Err(Problem::NotAnEmailAddress);
                }
                self.acme_email = Some(
                    heapless::String::try_from(value).map_err(|_| Problem::NotAnEmailAddress)?,
                );
            }
            Key::AcmeCaCertificate => self.acme_ca_certificate = Some(CardFileName::new(value)?),
            Key::CertificateStore => {
                self.certificate_store = match_word(
                    value,
                    &[
                        ("card", CertificateStore::Card),
                        ("ram", CertificateStore::Ram),
                    ],
                )
                .ok_or(Problem::NotACertificateStore)?
            }
            Key::AcmeChallenge => {
                self.acme_challenge = match_word(
                    value,
                    &[
                        ("http-01", AcmeChallenge::Http01),
                        ("tls-alpn-01", AcmeChallenge::TlsAlpn01),
                        ("dns-01", AcmeChallenge::Dns01),
                    ],
                )
                .ok_or(Problem::NotAnAcmeChallenge)?
            }
            Key::Syslog => self.syslog = remote::parse_syslog(value)?,
            Key::StatusFrom => self.status_from = remote::parse_status_from(value)?,
            Key::StatusToken => self.status_token = remote::parse_status_token(value)?,
            Key::Ddns => self.ddns.protocol = ddns::parse_protocol(value)?,
            Key::DdnsName => self.ddns.name = Some(DomainName::new(value)?),
            Key::DdnsZone => self.ddns.zone = Some(DomainName::new(value)?),
            Key::DdnsServer => self.ddns.server = Some(ddns::parse_server(value)?),
            Key::DdnsTsig => self.ddns.key = Some(ddns::parse_key(value)?),
            Key::DdnsIpv4 => self.ddns.ipv4 = ddns::parse_ipv4_source(value)?,
            Key::DdnsIpv6 => self.ddns.ipv6 = parse_switch(value)?,
            Key::RouterPorts => self.router_ports = router::parse_router_ports(value)?,
            Key::RouterLifetime => self.router_lifetime = router::parse_router_lifetime(value)?,
            Key::ProxyFrom => self.proxy_from = remote::parse_proxy_from(value)?,
            Key::Heartbeat => self.heartbeat = remote::parse_heartbeat(value)?,
            Key::HeartbeatEvery => self.heartbeat_every = parse_number(value, 1, 1440)?,
            Key::UsbProtocol => {
                self.usb_protocol = if value.eq_ignore_ascii_case("rndis") {
                    UsbProtocol::Rndis
                } else if value.eq_ignore_ascii_case("ecm") {
                    UsbProtocol::Ecm
                } else {
                    return Err(Problem::NotAUsbProtocol);
                }
            }
        }
        Ok(())
    }
}

/// The value paired with `value` (compared case-insensitively) in `words`.
fn match_word<T: Copy>(value: &str, words: &[(&str, T)]) -> Option<T> {
    words
        .iter()
        .find(|(word, _)| word.eq_ignore_ascii_case(value))
        .map(|(_, result)| *result)
}

/// `board`, or 32 hex digits: the 16-byte RFC 7217 key.
fn parse_secret(value: &str) -> Result<Option<[u8; 16]>, Problem> {
    if value.eq_ignore_ascii_case("board") {
        return Ok(None);
    }
    let digits = value.as_bytes();
    if digits.len() != 32 {
        return Err(Problem::NotASecret);
    }
    let mut secret = [0u8; 16];
    for (byte, pair) in secret.iter_mut().zip(digits.chunks_exact(2)) {
        let high = hex_digit(pair[0]).ok_or(Problem::NotASecret)?;
        let low = hex_digit(pair[1]).ok_or(Problem::NotASecret)?;
        *byte = (high << 4) | low;
    }
    Ok(Some(secret))
}

fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

fn parse_switch(value: &str) -> Result<bool, Problem> {
    const ON: [&str; 3] = ["on", "yes", "true"];
    const OFF: [&str; 3] = ["off", "no", "false"];
    if ON.iter().any(|word| word.eq_ignore_ascii_case(value)) {
        Ok(true)
    } else if OFF.iter().any(|word| word.eq_ignore_ascii_case(value)) {
        Ok(false)
    } else {
        Err(Problem::NotOnOff)
    }
}

fn parse_number(value: &str, min: u16, max: u16) -> Result<u16, Problem> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::NotANumber);
    }
    let out_of_range = Problem::OutOfRange {
        min: min.into(),
        max: max.into(),
    };
    // All digits: the only parse failure left is overflow.
    let number: u32 = value.parse().map_err(|_| out_of_range)?;
    u16::try_from(number)
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or(out_of_range)
}

fn parse_log_level(value: &str) -> Result<LogLevel, Problem> {
    const LEVELS: [(&str, LogLevel); 5] = [
        ("error", LogLevel::Error),
        ("warn", LogLevel::Warn),
        ("info", LogLevel::Info),
        ("debug", LogLevel::Debug),
        ("trace", LogLevel::Trace),
    ];
    LEVELS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(value))
        .map(|(_, level)| *level)
        .ok_or(Problem::NotALogLevel)
}

/// An IPv4 address that a host on a LAN can have (not 0.0.0.0, loopback, multicast or
/// 255.255.255.255).
fn parse_host_address(value: &str) -> Result<Ipv4Addr, Problem> {
    let address = Ipv4Addr::from_str(value).map_err(|_| Problem::NotAnIpv4Address)?;
    if address.is_unspecified()
        || address.is_loopback()
        || address.is_multicast()
        || address.is_broadcast()
    {
        return Err(Problem::NotAHostAddress);
    }
    Ok(address)
}

/// Whether `address` can be a unicast host's: not unspecified, loopback, multicast or an
/// IPv4-mapped address (`::ffff:a.b.c.d`).
fn is_host_address6(address: Ipv6Addr) -> bool {
    !(address.is_unspecified()
        || address.is_loopback()
        || address.is_multicast()
        || address.to_ipv4_mapped().is_some())
}

/// A fixed IPv6 address with its prefix length (`2001:db8::5/64`): global or unique-local,
/// not link-local (Bramble forms its own link-local address).
fn parse_address6(value: &str) -> Result<StaticAddress6, Problem> {
    let (address_text, prefix_text) = value.split_once('/').ok_or(Problem::NotAnAddress6Mode)?;
    let address =
        Ipv6Addr::from_str(address_text.trim()).map_err(|_| Problem::NotAnAddress6Mode)?;
    let link_local = address.segments()[0] & 0xffc0 == 0xfe80;
    if !is_host_address6(address) || link_local {
        return Err(Problem::NotAHostAddress6);
    }
    let prefix_text = prefix_text.trim();
    let prefix_len = match prefix_text.parse::<u8>() {
        Ok(n) if (1..=128).contains(&n) && prefix_text.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => return Err(Problem::BadPrefixLength6),
    };
    Ok(StaticAddress6 {
        address,
        prefix_len,
    })
}

fn parse_address_mode(value: &str) -> Result<AddressMode, Problem> {
    if value.eq_ignore_ascii_case("dhcp") {
        return Ok(AddressMode::Dhcp);
    }
    let Some((address_text, prefix_text)) = value.split_once('/') else {
        return Err(if Ipv4Addr::from_str(value).is_ok() {
            Problem::MissingPrefixLength
        } else {
            Problem::NotAnAddressMode
        });
    };
    let address = parse_host_address(address_text.trim()).map_err(|problem| match problem {
        Problem::NotAnIpv4Address => Problem::NotAnAddressMode,
        other => other,
    })?;
    let prefix_text = prefix_text.trim();
    let prefix_len = match prefix_text.parse::<u8>() {
        Ok(n) if (1..=32).contains(&n) && prefix_text.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => return Err(Problem::BadPrefixLength),
    };
    // On networks of four addresses or more, the all-zeros and all-ones host parts are the
    // network and broadcast addresses (RFC 919, RFC 950); /31 and /32 have no such addresses.
    if prefix_len <= 30 {
        let host_mask = !prefix_mask(prefix_len);
        let host = u32::from(address) & host_mask;
        if host == 0 || host == host_mask {
            return Err(Problem::NotAHostAddress);
        }
    }
    Ok(AddressMode::Static(StaticAddress {
        address,
        prefix_len,
    }))
}
