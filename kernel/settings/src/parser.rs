//! The parser: each line split into key and value, the value checked and applied to
//! [`Settings`], then the checks that need several settings at once. It never allocates.

use crate::ddns::{DdnsPassword, DdnsProtocol};
use crate::file::Key;
use crate::limits::{MAX_ARM_FREQ_MHZ, MAX_HSTS_SECONDS, MIN_ARM_FREQ_MHZ};
use crate::problems::{Problem, SettingsError};
use crate::types::{
    AcmeChallenge, AddressMode, CardFileName, CertificateStore, DomainName, Hostname, HttpsMode,
    LogLevel, NtpServer, Settings, SniPolicy, StaticAddress, StaticAddress6, UsbProtocol,
    prefix_mask,
};
use crate::{ddns, remote, router};
use core::net::{Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

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
            && (settings.ddns.protocol != DdnsProtocol::Rfc2136
                || settings.ddns.missing().is_some())
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
            let value = settings.ddns.protocol.word();
            settings.ddns.protocol = DdnsProtocol::Off;
            report(SettingsError {
                line: first_seen[Key::Ddns as usize],
                key: "ddns",
                value,
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
            Key::DdnsUrl => self.ddns.url = Some(ddns::parse_url(value)?),
            Key::DdnsUser => self.ddns.user = Some(ddns::parse_credential(value, true)?),
            Key::DdnsPassword => {
                self.ddns.password = Some(DdnsPassword(ddns::parse_credential(value, false)?))
            }
            Key::DdnsIpv4 => self.ddns.ipv4 = ddns::parse_ipv4_source(value)?,
            Key::DdnsIpv6 => self.ddns.ipv6 = parse_switch(value)?,
            Key::PublicIpUrl => self.public_ip_url = remote::parse_https_url_or_off(value)?,
            Key::PublicIpEvery => self.public_ip_every = parse_number(value, 1, 1440)?,
            Key::ReachCheckUrl => self.reach_check_url = remote::parse_https_url_or_off(value)?,
            Key::RouterPorts => self.router_ports = router::parse_router_ports(value)?,
            Key::RouterLifetime => self.router_lifetime = router::parse_router_lifetime(value)?,
            Key::ProxyFrom => self.proxy_from = remote::parse_proxy_from(value)?,
            Key::Heartbeat => self.heartbeat = remote::parse_https_url_or_off(value)?,
            Key::HeartbeatEvery => self.heartbeat_every = parse_number(value, 1, 1440)?,
            Key::PublishUrl => self.publish_url = remote::parse_https_url_or_off(value)?,
            Key::PublishEvery => self.publish_every = parse_number(value, 1, 1440)?,
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
