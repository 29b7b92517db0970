//! The settings for port mapping on the home router: `router_ports` and `router_lifetime`.

use crate::Problem;

/// `router_lifetime` when BRAMBLE.TXT names none: two hours, renewed every hour.
pub const DEFAULT_ROUTER_LIFETIME: u32 = 7200;
/// The shortest `router_lifetime` (miniupnpd's own floor, and PCP's advice for a short
/// lifetime: a renewal a minute).
pub const MIN_ROUTER_LIFETIME: u32 = 120;
/// The longest `router_lifetime`: one day.
pub const MAX_ROUTER_LIFETIME: u32 = 86_400;

/// `router_ports`: whether the router is asked to forward the HTTP and HTTPS ports, and
/// which ports outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterPorts {
    /// Not asked (the default: opening ports is the owner's decision).
    Off,
    /// The same port numbers outside as served (`on`).
    Same,
    /// `HTTP,HTTPS`: these port numbers outside (`8080,8443`).
    Outside {
        /// The outside port for HTTP.
        http: u16,
        /// The outside port for HTTPS.
        https: u16,
    },
}

/// Parses `off`, `on` or `HTTP,HTTPS` (two port numbers).
pub(crate) fn parse_router_ports(value: &str) -> Result<RouterPorts, Problem> {
    if value.eq_ignore_ascii_case("off") {
        return Ok(RouterPorts::Off);
    }
    if value.eq_ignore_ascii_case("on") {
        return Ok(RouterPorts::Same);
    }
    let (http, https) = value.split_once(',').ok_or(Problem::NotRouterPorts)?;
    let port = |text: &str| {
        let text = text.trim();
        text.parse::<u16>()
            .ok()
            .filter(|port| *port != 0 && text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(Problem::NotRouterPorts)
    };
    let (http, https) = (port(http)?, port(https)?);
    if http == https {
        return Err(Problem::NotRouterPorts);
    }
    Ok(RouterPorts::Outside { http, https })
}

/// Parses `router_lifetime`: seconds, [`MIN_ROUTER_LIFETIME`] to [`MAX_ROUTER_LIFETIME`].
pub(crate) fn parse_router_lifetime(value: &str) -> Result<u32, Problem> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::NotANumber);
    }
    let out_of_range = Problem::OutOfRange {
        min: MIN_ROUTER_LIFETIME,
        max: MAX_ROUTER_LIFETIME,
    };
    value
        .parse::<u32>()
        .ok()
        .filter(|seconds| (MIN_ROUTER_LIFETIME..=MAX_ROUTER_LIFETIME).contains(seconds))
        .ok_or(out_of_range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_ports_in_every_form() {
        assert_eq!(parse_router_ports("off"), Ok(RouterPorts::Off));
        assert_eq!(parse_router_ports("ON"), Ok(RouterPorts::Same));
        assert_eq!(
            parse_router_ports("8080, 8443"),
            Ok(RouterPorts::Outside {
                http: 8080,
                https: 8443
            })
        );
        for bad in [
            "yes", "80", "80,80", "0,443", "80,+443", "80,65536", "80,443,1",
        ] {
            assert_eq!(
                parse_router_ports(bad),
                Err(Problem::NotRouterPorts),
                "{bad}"
            );
        }
    }

    #[test]
    fn lifetimes_are_bounded() {
        assert_eq!(parse_router_lifetime("7200"), Ok(7200));
        assert_eq!(parse_router_lifetime("120"), Ok(120));
        assert!(matches!(
            parse_router_lifetime("119"),
            Err(Problem::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_router_lifetime("99999999999"),
            Err(Problem::OutOfRange { .. })
        ));
        assert_eq!(parse_router_lifetime("2h"), Err(Problem::NotANumber));
    }
}
