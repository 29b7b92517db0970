//! The settings for the owner's view from afar: where the log goes (`syslog`).

use crate::Problem;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

/// The syslog port (RFC 5426) when `syslog` names none.
pub const DEFAULT_SYSLOG_PORT: u16 = 514;

/// `syslog`: the collector the log is sent to over UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyslogTarget {
    /// Its address (IPv4 or IPv6).
    pub address: IpAddr,
    /// Its UDP port.
    pub port: u16,
}

/// Parses `off`, `A.B.C.D[:PORT]`, `[IPv6][:PORT]` or a bare IPv6 address.
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
        (IpAddr::V6(address), port)
    } else if let Ok(address) = Ipv6Addr::from_str(value) {
        (IpAddr::V6(address), None)
    } else {
        let (host, port) = match value.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        };
        let address = Ipv4Addr::from_str(host).map_err(|_| Problem::NotASyslogTarget)?;
        (IpAddr::V4(address), port)
    };
    let port = match port {
        None => DEFAULT_SYSLOG_PORT,
        Some(text) => text
            .parse::<u16>()
            .ok()
            .filter(|port| *port != 0 && text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(Problem::NotASyslogTarget)?,
    };
    let usable = match host {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    };
    if !usable {
        return Err(Problem::NotASyslogTarget);
    }
    Ok(Some(SyslogTarget {
        address: host,
        port,
    }))
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
                address: v4(192, 168, 1, 9),
                port: 514
            }))
        );
        assert_eq!(
            parse_syslog("192.168.1.9:1514"),
            Ok(Some(SyslogTarget {
                address: v4(192, 168, 1, 9),
                port: 1514
            }))
        );
        let v6 = IpAddr::V6("2001:db8::9".parse().unwrap());
        assert_eq!(
            parse_syslog("2001:db8::9"),
            Ok(Some(SyslogTarget {
                address: v6,
                port: 514
            }))
        );
        assert_eq!(
            parse_syslog("[2001:db8::9]:6514"),
            Ok(Some(SyslogTarget {
                address: v6,
                port: 6514
            }))
        );
        assert_eq!(
            parse_syslog("[2001:db8::9]"),
            Ok(Some(SyslogTarget {
                address: v6,
                port: 514
            }))
        );
        for bad in [
            "logs.example.org",
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
