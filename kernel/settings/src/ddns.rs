//! The dynamic DNS settings (`ddns`, `ddns_name`, `ddns_zone`, `ddns_server`, `ddns_key`,
//! `ddns_url`, `ddns_user`, `ddns_password`, `ddns_ipv4`, `ddns_ipv6`): which name follows
//! the home's addresses, on which server, and with which credentials. The TSIG secret and
//! the dyndns2 password sit on the card in plain text, as BRAMBLE.TXT does
//! (doc/reachability.md says what that means for the owner).

use crate::{DomainName, Problem};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

/// The longest TSIG key name.
pub const MAX_KEY_NAME_LEN: usize = 253;
/// The longest TSIG secret, in bytes (HMAC-SHA256 keys are usually 32).
pub const MAX_KEY_SECRET_LEN: usize = 64;
/// The DNS port, when `ddns_server` names none.
pub const DNS_PORT: u16 = 53;

/// How the name is kept up to date.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DdnsProtocol {
    /// Not at all (the default).
    #[default]
    Off,
    /// DNS UPDATE (RFC 2136) signed with TSIG, to the owner's own name server.
    Rfc2136,
    /// The dyndns2 protocol over HTTPS (`/nic/update?hostname=&myip=&myipv6=`, Basic
    /// authentication): No-IP, Dynu, Dyn and most providers' update URLs.
    Dyndns2,
    /// deSEC's dyndns2 dialect (`myipv4`, `myipv6`, `preserve` for a family not known).
    Desec,
    /// DuckDNS's own form (`/update?domains=&token=&ip=&ipv6=`).
    DuckDns,
}

impl DdnsProtocol {
    /// The setting's word.
    pub fn word(self) -> &'static str {
        match self {
            DdnsProtocol::Off => "off",
            DdnsProtocol::Rfc2136 => "rfc2136",
            DdnsProtocol::Dyndns2 => "dyndns2",
            DdnsProtocol::Desec => "desec",
            DdnsProtocol::DuckDns => "duckdns",
        }
    }

    /// Whether the name is kept over HTTPS (the dyndns2 family), not by DNS UPDATE.
    pub fn is_https(self) -> bool {
        matches!(
            self,
            DdnsProtocol::Dyndns2 | DdnsProtocol::Desec | DdnsProtocol::DuckDns
        )
    }

    /// The provider's update URL when `ddns_url` names none (`None`: it must be named).
    pub fn default_url(self) -> Option<&'static str> {
        match self {
            DdnsProtocol::Desec => Some("https://update.dedyn.io/"),
            DdnsProtocol::DuckDns => Some("https://www.duckdns.org/update"),
            _ => None,
        }
    }
}

/// The longest `ddns_url`.
pub const MAX_DDNS_URL_LEN: usize = 256;
/// The longest `ddns_user`.
pub const MAX_DDNS_USER_LEN: usize = 64;
/// The longest `ddns_password` (a DuckDNS token is 36, a deSEC token 28).
pub const MAX_DDNS_PASSWORD_LEN: usize = 128;

/// The dyndns2 password or token: never shown (not even by `Debug`).
#[derive(Clone, PartialEq, Eq)]
pub struct DdnsPassword(pub heapless::String<MAX_DDNS_PASSWORD_LEN>);

impl core::fmt::Debug for DdnsPassword {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("DdnsPassword(..)")
    }
}

/// Where the A record's address comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ipv4Source {
    /// The home's public address as learned (from the router's port mapping); only a
    /// global address is published (the default).
    #[default]
    Public,
    /// The board's own IPv4 address, whatever it is (a board with a public address on its
    /// interface, or a name for a LAN).
    Interface,
    /// No A record is touched.
    Off,
}

/// A TSIG key: `hmac-sha256:NAME:BASE64SECRET`, as `nsupdate -y` takes it.
#[derive(Clone, PartialEq, Eq)]
pub struct TsigKeySetting {
    /// The key's name as the server knows it.
    pub name: heapless::String<MAX_KEY_NAME_LEN>,
    /// The secret's bytes.
    pub secret: heapless::Vec<u8, MAX_KEY_SECRET_LEN>,
}

impl core::fmt::Debug for TsigKeySetting {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the secret.
        write!(f, "TsigKeySetting({})", self.name)
    }
}

/// The dynamic DNS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DdnsSettings {
    /// `ddns`: `off` (default), `rfc2136`, `dyndns2`, `desec` or `duckdns`.
    pub protocol: DdnsProtocol,
    /// `ddns_name`: the name whose A and AAAA records follow the addresses.
    pub name: Option<DomainName>,
    /// `ddns_zone`: the zone the name is in (default: the name without its first label).
    pub zone: Option<DomainName>,
    /// `ddns_server`: the name server's address and port (RFC 2136).
    pub server: Option<(IpAddr, u16)>,
    /// `ddns_key`: the TSIG key.
    pub key: Option<TsigKeySetting>,
    /// `ddns_url`: the dyndns2 provider's `https://` update URL (default: the dialect's,
    /// [`DdnsProtocol::default_url`]).
    pub url: Option<heapless::String<MAX_DDNS_URL_LEN>>,
    /// `ddns_user`: the dyndns2 account's user name (deSEC: default the name).
    pub user: Option<heapless::String<MAX_DDNS_USER_LEN>>,
    /// `ddns_password`: the dyndns2 password, or the provider's token.
    pub password: Option<DdnsPassword>,
    /// `ddns_ipv4`: `public` (default), `interface` or `off`.
    pub ipv4: Ipv4Source,
    /// `ddns_ipv6`: publish the global IPv6 address (SLAAC or static) as AAAA. Default on.
    pub ipv6: bool,
}

impl Default for DdnsSettings {
    fn default() -> Self {
        DdnsSettings {
            protocol: DdnsProtocol::Off,
            name: None,
            zone: None,
            server: None,
            key: None,
            url: None,
            user: None,
            password: None,
            ipv4: Ipv4Source::Public,
            ipv6: true,
        }
    }
}

impl DdnsSettings {
    /// The zone to update: `ddns_zone`, or the name without its first label.
    pub fn zone(&self) -> Option<&str> {
        if let Some(zone) = &self.zone {
            return Some(zone.as_str());
        }
        self.name
            .as_ref()
            .and_then(|name| name.as_str().split_once('.'))
            .map(|(_, zone)| zone)
    }

    /// What a `ddns` other than `off` still lacks, if anything.
    pub fn missing(&self) -> Option<&'static str> {
        match self.protocol {
            DdnsProtocol::Off => None,
            DdnsProtocol::Rfc2136 => {
                if self.name.is_none() {
                    Some("ddns_name")
                } else if self.server.is_none() {
                    Some("ddns_server")
                } else if self.key.is_none() {
                    Some("ddns_key")
                } else {
                    None
                }
            }
            DdnsProtocol::Dyndns2 | DdnsProtocol::Desec | DdnsProtocol::DuckDns => {
                if self.name.is_none() {
                    Some("ddns_name")
                } else if self.update_url().is_none() {
                    Some("ddns_url")
                } else if self.protocol == DdnsProtocol::Dyndns2 && self.user.is_none() {
                    Some("ddns_user")
                } else if self.password.is_none() {
                    Some("ddns_password")
                } else {
                    None
                }
            }
        }
    }

    /// The dyndns2 update URL: `ddns_url`, or the dialect's own.
    pub fn update_url(&self) -> Option<&str> {
        self.url.as_deref().or_else(|| self.protocol.default_url())
    }

    /// The dyndns2 user name: `ddns_user`, or (deSEC) the name itself.
    pub fn update_user(&self) -> Option<&str> {
        self.user
            .as_deref()
            .or_else(|| self.name.as_ref().map(|name| name.as_str()))
    }
}

/// `https://HOST[:PORT][/PATH]`, printable ASCII without spaces.
pub(crate) fn parse_url(value: &str) -> Result<heapless::String<MAX_DDNS_URL_LEN>, Problem> {
    let bad = Problem::NotAnHttpsUrl;
    let rest = value
        .get(..8)
        .filter(|scheme| scheme.eq_ignore_ascii_case("https://"))
        .map(|_| &value[8..])
        .ok_or(bad)?;
    let host = rest.split(['/', ':', '?']).next().unwrap_or("");
    if host.is_empty() || rest.contains('@') || value.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(bad);
    }
    heapless::String::try_from(value).map_err(|_| bad)
}

/// A user name or password: printable ASCII without spaces (a `:` is allowed in a
/// password, not in a user name: Basic authentication splits at the first).
pub(crate) fn parse_credential<const N: usize>(
    value: &str,
    user: bool,
) -> Result<heapless::String<N>, Problem> {
    let bad = Problem::NotACredential;
    if value.is_empty()
        || value.bytes().any(|b| !b.is_ascii_graphic())
        || (user && value.contains(':'))
    {
        return Err(bad);
    }
    heapless::String::try_from(value).map_err(|_| bad)
}

pub(crate) fn parse_protocol(value: &str) -> Result<DdnsProtocol, Problem> {
    if value.eq_ignore_ascii_case("off") {
        Ok(DdnsProtocol::Off)
    } else {
        [
            ("rfc2136", DdnsProtocol::Rfc2136),
            ("dyndns2", DdnsProtocol::Dyndns2),
            ("desec", DdnsProtocol::Desec),
            ("duckdns", DdnsProtocol::DuckDns),
        ]
        .iter()
        .find(|(word, _)| word.eq_ignore_ascii_case(value))
        .map(|(_, protocol)| *protocol)
        .ok_or(Problem::NotADdnsProtocol)
    }
}

pub(crate) fn parse_ipv4_source(value: &str) -> Result<Ipv4Source, Problem> {
    [
        ("public", Ipv4Source::Public),
        ("interface", Ipv4Source::Interface),
        ("off", Ipv4Source::Off),
    ]
    .iter()
    .find(|(word, _)| word.eq_ignore_ascii_case(value))
    .map(|(_, source)| *source)
    .ok_or(Problem::NotAnIpv4Source)
}

/// `A.B.C.D[:PORT]`, `[IPv6][:PORT]` or a bare IPv6 address; port 53 unless named.
pub(crate) fn parse_server(value: &str) -> Result<(IpAddr, u16), Problem> {
    let bad = Problem::NotADnsServer;
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(bad)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(bad)?),
        };
        (IpAddr::V6(Ipv6Addr::from_str(host).map_err(|_| bad)?), port)
    } else if let Ok(address) = Ipv6Addr::from_str(value) {
        (IpAddr::V6(address), None)
    } else {
        let (host, port) = match value.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        };
        (IpAddr::V4(Ipv4Addr::from_str(host).map_err(|_| bad)?), port)
    };
    let port = match port {
        None => DNS_PORT,
        Some(text) => text
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0 && text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(bad)?,
    };
    let usable = match host {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    };
    if !usable {
        return Err(bad);
    }
    Ok((host, port))
}

/// `hmac-sha256:NAME:BASE64`.
pub(crate) fn parse_key(value: &str) -> Result<TsigKeySetting, Problem> {
    let bad = Problem::NotATsigKey;
    let mut parts = value.splitn(3, ':');
    let (Some(algorithm), Some(name), Some(secret)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad);
    };
    if !algorithm.eq_ignore_ascii_case("hmac-sha256") {
        return Err(bad);
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > MAX_KEY_NAME_LEN || !name.split('.').all(label_ok) {
        return Err(bad);
    }
    let secret = decode_base64(secret).ok_or(bad)?;
    if secret.len() < 16 {
        return Err(bad);
    }
    Ok(TsigKeySetting {
        name: heapless::String::try_from(name).map_err(|_| bad)?,
        secret,
    })
}

/// Standard base64 (RFC 4648 §4) with its padding, at most [`MAX_KEY_SECRET_LEN`] bytes.
fn decode_base64(text: &str) -> Option<heapless::Vec<u8, MAX_KEY_SECRET_LEN>> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let mut out = heapless::Vec::new();
    let quads = bytes.len() / 4;
    for (index, quad) in bytes.chunks_exact(4).enumerate() {
        let last = index + 1 == quads;
        let padding = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if padding > 2 || (padding > 0 && !last) {
            return None;
        }
        let mut bits = 0u32;
        for &c in &quad[..4 - padding] {
            bits = bits << 6 | value(c)?;
        }
        bits <<= 6 * padding as u32;
        let decoded = bits.to_be_bytes();
        out.extend_from_slice(&decoded[1..4 - padding]).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn keys_are_taken_as_nsupdate_writes_them() {
        let key = parse_key("hmac-sha256:bramble-key:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
            .unwrap();
        assert_eq!(key.name.as_str(), "bramble-key");
        assert_eq!(key.secret.as_slice(), b"0123456789abcdef0123456789abcdef");
        let key = parse_key("HMAC-SHA256:update.example.org.:MDEyMzQ1Njc4OWFiY2RlZg==").unwrap();
        assert_eq!(key.name.as_str(), "update.example.org");
        assert_eq!(key.secret.as_slice(), b"0123456789abcdef");
        assert!(!format!("{key:?}").contains("0123"));
        for bad in [
            "hmac-md5:k:MDEyMzQ1Njc4OWFiY2RlZg==",
            "hmac-sha256:k",
            "hmac-sha256::MDEyMzQ1Njc4OWFiY2RlZg==",
            "hmac-sha256:a b:MDEyMzQ1Njc4OWFiY2RlZg==",
            "hmac-sha256:k:MDEyMzQ1Njc4OWFiY2RlZg",
            "hmac-sha256:k:MDEy=zQ1Njc4OWFiY2RlZg==",
            "hmac-sha256:k:c2hvcnQ=",
            "hmac-sha256:k:!!!!",
        ] {
            assert_eq!(parse_key(bad), Err(Problem::NotATsigKey), "{bad}");
        }
    }

    #[test]
    fn servers_and_sources() {
        assert_eq!(
            parse_server("192.0.2.53"),
            Ok((IpAddr::V4(Ipv4Addr::new(192, 0, 2, 53)), 53))
        );
        assert_eq!(
            parse_server("[2001:db8::53]:5353"),
            Ok((IpAddr::V6("2001:db8::53".parse().unwrap()), 5353))
        );
        for bad in ["ns.example.org", "0.0.0.0", "192.0.2.53:0", "[::1"] {
            assert_eq!(parse_server(bad), Err(Problem::NotADnsServer), "{bad}");
        }
        assert_eq!(parse_ipv4_source("Interface"), Ok(Ipv4Source::Interface));
        assert_eq!(parse_ipv4_source("echo"), Err(Problem::NotAnIpv4Source));
        assert_eq!(parse_protocol("RFC2136"), Ok(DdnsProtocol::Rfc2136));
        assert_eq!(parse_protocol("bind"), Err(Problem::NotADdnsProtocol));
        assert_eq!(parse_protocol("DuckDNS"), Ok(DdnsProtocol::DuckDns));
        assert_eq!(parse_protocol("desec"), Ok(DdnsProtocol::Desec));
        assert_eq!(parse_protocol("dyndns2"), Ok(DdnsProtocol::Dyndns2));
    }

    #[test]
    fn the_zone_defaults_to_the_name_less_its_first_label() {
        let mut settings = DdnsSettings {
            name: Some(DomainName::new("home.example.org").unwrap()),
            ..DdnsSettings::default()
        };
        assert_eq!(settings.zone(), Some("example.org"));
        settings.zone = Some(DomainName::new("home.example.org").unwrap());
        assert_eq!(settings.zone(), Some("home.example.org"));
        settings.protocol = DdnsProtocol::Rfc2136;
        assert_eq!(settings.missing(), Some("ddns_server"));
    }

    #[test]
    fn dyndns2_needs_its_url_and_credentials_unless_the_dialect_has_them() {
        let mut settings = DdnsSettings {
            name: Some(DomainName::new("home.dedyn.io").unwrap()),
            protocol: DdnsProtocol::Dyndns2,
            ..DdnsSettings::default()
        };
        assert_eq!(settings.missing(), Some("ddns_url"));
        settings.url = Some(parse_url("https://dynupdate.no-ip.com/nic/update").unwrap());
        assert_eq!(settings.missing(), Some("ddns_user"));
        settings.user = Some(parse_credential("owner", true).unwrap());
        assert_eq!(settings.missing(), Some("ddns_password"));
        settings.password = Some(DdnsPassword(parse_credential("s3cr:t", false).unwrap()));
        assert_eq!(settings.missing(), None);
        assert!(!format!("{settings:?}").contains("s3cr"));
        // deSEC: its URL, and the name as the user.
        settings.protocol = DdnsProtocol::Desec;
        settings.url = None;
        settings.user = None;
        assert_eq!(settings.missing(), None);
        assert_eq!(settings.update_url(), Some("https://update.dedyn.io/"));
        assert_eq!(settings.update_user(), Some("home.dedyn.io"));
        for bad in [
            "http://x.example/",
            "https://",
            "https://u@x.example/",
            "https://a b/",
        ] {
            assert_eq!(parse_url(bad), Err(Problem::NotAnHttpsUrl), "{bad}");
        }
        assert_eq!(
            parse_credential::<8>("a:b", true),
            Err(Problem::NotACredential)
        );
        assert_eq!(
            parse_credential::<8>("has space", false),
            Err(Problem::NotACredential)
        );
        assert_eq!(
            parse_credential::<4>("too long", false),
            Err(Problem::NotACredential)
        );
    }
}
