//! The settings for the owner's view from afar: where the log goes (`syslog`), who sees the
//! status page (`status_from`, `status_token`).

use crate::Problem;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

/// The syslog port (RFC 5426) when `syslog` names none.
pub const DEFAULT_SYSLOG_PORT: u16 = 514;

/// The collector's host: an address, or a DNS name looked up by the board.
#[derive(Clone, Debug, PartialEq, Eq)]
// One per settings, parsed once: no heap to box the name into.
#[allow(clippy::large_enum_variant)]
pub enum SyslogHost {
    /// An IPv4 or IPv6 address.
    Address(IpAddr),
    /// A DNS name (RFC 1123 labels, the last not all digits), without a trailing dot.
    Name(heapless::String<{ crate::MAX_DNS_NAME_LEN }>),
}

/// `syslog`: the collector the log is sent to over UDP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyslogTarget {
    /// Its address or name.
    pub host: SyslogHost,
    /// Its UDP port.
    pub port: u16,
}

/// A DNS name as `syslog` takes one: RFC 1123 labels, at most 253 bytes, the last label not
/// all digits (so that a mistyped address is not taken for a name).
fn dns_name(text: &str) -> Option<heapless::String<{ crate::MAX_DNS_NAME_LEN }>> {
    let text = text.strip_suffix('.').unwrap_or(text);
    let last = text.rsplit('.').next()?;
    let valid = !text.is_empty()
        && text
            .split('.')
            .all(|label| crate::Hostname::new(label).is_ok())
        && !last.bytes().all(|b| b.is_ascii_digit());
    valid
        .then(|| heapless::String::try_from(text).ok())
        .flatten()
}

/// Parses `off`, `A.B.C.D[:PORT]`, `NAME[:PORT]`, `[IPv6][:PORT]` or a bare IPv6 address.
pub(crate) fn parse_syslog(value: &str) -> Result<Option<SyslogTarget>, Problem> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let (host, port) = if let Some(rest) = value.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or(Problem::NotASyslogTarget)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(Problem::NotASyslogTarget)?),
        };
        let address = Ipv6Addr::from_str(host).map_err(|_| Problem::NotASyslogTarget)?;
        (SyslogHost::Address(IpAddr::V6(address)), port)
    } else if let Ok(address) = Ipv6Addr::from_str(value) {
        (SyslogHost::Address(IpAddr::V6(address)), None)
    } else {
        let (host, port) = match value.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        };
        let host = match Ipv4Addr::from_str(host) {
            Ok(address) => SyslogHost::Address(IpAddr::V4(address)),
            Err(_) => SyslogHost::Name(dns_name(host).ok_or(Problem::NotASyslogTarget)?),
        };
        (host, port)
    };
    let port = match port {
        None => DEFAULT_SYSLOG_PORT,
        Some(text) => text
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0 && text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(Problem::NotASyslogTarget)?,
    };
    let usable = match &host {
        SyslogHost::Address(IpAddr::V4(v4)) => {
            !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast())
        }
        SyslogHost::Address(IpAddr::V6(v6)) => !(v6.is_unspecified() || v6.is_multicast()),
        SyslogHost::Name(_) => true,
    };
    if !usable {
        return Err(Problem::NotASyslogTarget);
    }
    Ok(Some(SyslogTarget { host, port }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectors_in_every_form() {
        let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        assert_eq!(parse_syslog("off"), Ok(None));
        assert_eq!(
            parse_syslog("192.168.1.9"),
            Ok(Some(SyslogTarget {
                host: SyslogHost::Address(v4(192, 168, 1, 9)),
                port: 514
            }))
        );
        assert_eq!(
            parse_syslog("192.168.1.9:1514"),
            Ok(Some(SyslogTarget {
                host: SyslogHost::Address(v4(192, 168, 1, 9)),
                port: 1514
            }))
        );
        let v6 = IpAddr::V6("2001:db8::9".parse().unwrap());
        assert_eq!(
            parse_syslog("2001:db8::9"),
            Ok(Some(SyslogTarget {
                host: SyslogHost::Address(v6),
                port: 514
            }))
        );
        assert_eq!(
            parse_syslog("[2001:db8::9]:6514"),
            Ok(Some(SyslogTarget {
                host: SyslogHost::Address(v6),
                port: 6514
            }))
        );
        assert_eq!(
            parse_syslog("[2001:db8::9]"),
            Ok(Some(SyslogTarget {
                host: SyslogHost::Address(v6),
                port: 514
            }))
        );
        let name = |text: &str| SyslogHost::Name(heapless::String::try_from(text).unwrap());
        assert_eq!(
            parse_syslog("logs.example.org"),
            Ok(Some(SyslogTarget {
                host: name("logs.example.org"),
                port: 514
            }))
        );
        assert_eq!(
            parse_syslog("collector.:1514"),
            Ok(Some(SyslogTarget {
                host: name("collector"),
                port: 1514
            }))
        );
        for bad in [
            "192.168.1.999",
            "logs..example.org",
            "-logs.example.org",
            "logs_example.org:514",
            "logs.example.org:",
            "192.168.1.9:0",
            "192.168.1.9:+5",
            "192.168.1.9:70000",
            "[2001:db8::9",
            "[2001:db8::9]6514",
            "0.0.0.0",
            "255.255.255.255",
            "ff02::1",
            "::",
            "[192.168.1.9]:514",
        ] {
            assert_eq!(parse_syslog(bad), Err(Problem::NotASyslogTarget), "{bad}");
        }
    }
}

/// Most `status_from` prefixes.
pub const MAX_STATUS_PREFIXES: usize = 4;
/// Shortest and longest `status_token`.
pub const STATUS_TOKEN_LEN: core::ops::RangeInclusive<usize> = 16..=64;

/// An address prefix of `status_from`: `192.168.1.0/24`, `2001:db8::/32`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressPrefix {
    /// The network address.
    pub address: IpAddr,
    /// The prefix length (32 or 128 for one address).
    pub len: u8,
}

/// Parses `link` (the default: the link-local ranges) or up to [`MAX_STATUS_PREFIXES`]
/// comma-separated prefixes.
pub(crate) fn parse_status_from(
    value: &str,
) -> Result<heapless::Vec<AddressPrefix, MAX_STATUS_PREFIXES>, Problem> {
    let mut list = heapless::Vec::new();
    if value.eq_ignore_ascii_case("link") {
        return Ok(list);
    }
    for item in value.split(',') {
        let item = item.trim();
        let (address, len) = match item.split_once('/') {
            Some((address, len)) => (address, Some(len)),
            None => (item, None),
        };
        let address = IpAddr::from_str(address).map_err(|_| Problem::NotAPrefix)?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(text) => text
                .parse::<u8>()
                .ok()
                .filter(|len| *len <= max && text.bytes().all(|b| b.is_ascii_digit()))
                .ok_or(Problem::NotAPrefix)?,
        };
        list.push(AddressPrefix { address, len })
            .map_err(|_| Problem::TooManyPrefixes)?;
    }
    Ok(list)
}

/// Parses `off` (the default: no proxy is trusted) or up to [`MAX_STATUS_PREFIXES`]
/// comma-separated prefixes of the owner's caching proxies (`proxy_from`).
pub(crate) fn parse_proxy_from(
    value: &str,
) -> Result<heapless::Vec<AddressPrefix, MAX_STATUS_PREFIXES>, Problem> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(heapless::Vec::new());
    }
    // `link` is status_from's word, not a proxy.
    if value.eq_ignore_ascii_case("link") {
        return Err(Problem::NotAPrefix);
    }
    parse_status_from(value)
}

/// Parses `heartbeat`, `public_ip_url` and `reach_check_url`: `off` or an `https://` URL
/// of at most [`crate::MAX_ACME_TEXT_LEN`] printable characters with a host.
pub(crate) fn parse_https_url_or_off(
    value: &str,
) -> Result<Option<heapless::String<{ crate::MAX_ACME_TEXT_LEN }>>, Problem> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let rest = value
        .get(..8)
        .filter(|scheme| scheme.eq_ignore_ascii_case("https://"))
        .map(|_| &value[8..])
        .ok_or(Problem::NotAnHttpsUrl)?;
    let host = rest.split(['/', ':', '?']).next().unwrap_or("");
    if host.is_empty() || value.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err(Problem::NotAnHttpsUrl);
    }
    heapless::String::try_from(value)
        .map(Some)
        .map_err(|_| Problem::NotAnHttpsUrl)
}

/// Parses `off` or a bearer token: 16 to 64 of `A-Z a-z 0-9 - . _ ~`.
pub(crate) fn parse_status_token(value: &str) -> Result<Option<heapless::String<64>>, Problem> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let valid = STATUS_TOKEN_LEN.contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'));
    if !valid {
        return Err(Problem::NotAToken);
    }
    heapless::String::try_from(value)
        .map(Some)
        .map_err(|_| Problem::NotAToken)
}

#[cfg(test)]
mod status_tests {
    use super::*;

    #[test]
    fn prefixes_and_tokens() {
        assert_eq!(parse_status_from("link").unwrap().len(), 0);
        let list = parse_status_from("192.168.1.0/24, 2001:db8::/32, 10.0.0.7").unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[2].len, 32);
        for bad in [
            "192.168.1.0/33",
            "2001:db8::/129",
            "host/24",
            "1.2.3.4/+8",
            "",
        ] {
            assert_eq!(parse_status_from(bad), Err(Problem::NotAPrefix), "{bad}");
        }
        assert_eq!(
            parse_status_from("1.0.0.0/8,2.0.0.0/8,3.0.0.0/8,4.0.0.0/8,5.0.0.0/8"),
            Err(Problem::TooManyPrefixes)
        );
        assert_eq!(parse_proxy_from("off").unwrap().len(), 0);
        assert_eq!(
            parse_proxy_from("10.0.0.0/8, 2001:db8::/32").unwrap().len(),
            2
        );
        assert_eq!(parse_proxy_from("link"), Err(Problem::NotAPrefix));
        assert_eq!(parse_https_url_or_off("off"), Ok(None));
        assert_eq!(
            parse_https_url_or_off("https://hc-ping.com/0f1e2d3c")
                .unwrap()
                .as_deref(),
            Some("https://hc-ping.com/0f1e2d3c")
        );
        for bad in ["http://hc-ping.com/x", "https:///x", "https://a b/", "ping"] {
            assert_eq!(
                parse_https_url_or_off(bad),
                Err(Problem::NotAnHttpsUrl),
                "{bad}"
            );
        }
        assert_eq!(parse_status_token("off"), Ok(None));
        assert!(parse_status_token("abcdefghijklmnop").unwrap().is_some());
        for bad in [
            "short",
            "has space in it ok",
            "quote\"quote\"quote\"",
            &"x".repeat(65),
        ] {
            assert_eq!(parse_status_token(bad), Err(Problem::NotAToken), "{bad}");
        }
    }
}
