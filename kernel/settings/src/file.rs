//! The file itself: its name on the card, its size limit, its template, and the keys it
//! knows.

/// The name of the settings file in the root folder of the card's FAT partition (8.3).
pub const FILE_NAME: &str = "BRAMBLE.TXT";

/// The commented settings file that `bramble image` puts on a new card. Every setting in it
/// has its default value, so it parses to [`Settings::default`].
///
/// [`Settings::default`]: crate::Settings::default
pub const TEMPLATE: &str = include_str!("../BRAMBLE.TXT");

/// The largest BRAMBLE.TXT worth reading: the template is about 6 KiB, so 32 KiB leaves room
/// for any owner's notes. The host tool refuses a larger file; the kernel reads at most this
/// much into its boot arena.
pub const MAX_FILE_BYTES: usize = 32 * 1024;

/// The settings BRAMBLE.TXT knows, in the order the template lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
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
    PublishUrl,
    PublishEvery,
}

impl Key {
    pub(crate) const ALL: [Key; 48] = [
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
        Key::PublishUrl,
        Key::PublishEvery,
    ];

    pub(crate) fn name(self) -> &'static str {
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
            Key::PublishUrl => "publish_url",
            Key::PublishEvery => "publish_every",
        }
    }

    pub(crate) fn find(name: &str) -> Option<Key> {
        Key::ALL
            .iter()
            .copied()
            .find(|key| key.name().eq_ignore_ascii_case(name))
    }
}
