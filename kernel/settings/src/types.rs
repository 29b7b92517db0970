//! The settings' types: [`Settings`] with its defaults, and the checked values it holds
//! (host and domain names, card file names, addresses, modes).

use crate::ddns::DdnsSettings;
use crate::limits::{
    DEFAULT_ACME_DIRECTORY, DEFAULT_HOSTNAME, DEFAULT_TLS_CERTIFICATE, DEFAULT_TLS_KEY,
    MAX_ACME_TEXT_LEN, MAX_DNS_NAME_LEN, MAX_DNS_SERVERS, MAX_DOMAINS, MAX_HOSTNAME_LEN,
    MAX_NTP_SERVERS,
};
use crate::problems::{HostnameError, Problem};
use crate::remote::{AddressPrefix, MAX_STATUS_PREFIXES, SyslogTarget};
use crate::router::{DEFAULT_ROUTER_LIFETIME, RouterPorts};
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

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

pub(crate) fn prefix_mask(prefix_len: u8) -> u32 {
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
    ///
    /// [`DEFAULT_NTP_SERVER`]: crate::DEFAULT_NTP_SERVER
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
    ///
    /// [`DEFAULT_SYSLOG_PORT`]: crate::DEFAULT_SYSLOG_PORT
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
    /// `publish_url`: `off` (default) or the `https://` URL of the signed manifest the board
    /// checks every `publish_every` minutes for a new site (doc/publish.md).
    pub publish_url: Option<heapless::String<MAX_ACME_TEXT_LEN>>,
    /// `publish_every`: minutes between checks of `publish_url`, 1 to 1440. Default 15.
    pub publish_every: u16,
    /// `public_ip_url`: `off` (default) or an `https://` echo service answering the
    /// address it sees as text (the home's public IPv4 address), asked every
    /// `public_ip_every` minutes.
    pub public_ip_url: Option<heapless::String<MAX_ACME_TEXT_LEN>>,
    /// `public_ip_every`: minutes between echo requests, 1 to 1440. Default 10.
    pub public_ip_every: u16,
    /// `reach_check_url`: `off` (default) or an `https://` outside checker that fetches
    /// the page and answers `OK` (anything else: failed).
    pub reach_check_url: Option<heapless::String<MAX_ACME_TEXT_LEN>>,
}

impl Settings {
    /// Whether the reach agent runs: an address echo (`public_ip_url`), an outside check
    /// (`reach_check_url`) or a dynamic DNS update over HTTPS (`ddns = dyndns2 | desec |
    /// duckdns`).
    pub fn wants_reach_agent(&self) -> bool {
        self.public_ip_url.is_some()
            || self.reach_check_url.is_some()
            || self.ddns.protocol.is_https()
    }
}

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
            publish_url: None,
            publish_every: 15,
            public_ip_url: None,
            public_ip_every: 10,
            reach_check_url: None,
        }
    }
}
