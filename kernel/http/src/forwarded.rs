//! The client's address behind a trusted proxy (`proxy_from`): from `Forwarded: for=`
//! (RFC 7239) or, without it, `X-Forwarded-For`, read only when the connection comes from one
//! of the owner's proxies. Each proxy appends the address it saw, so the list is read from the
//! right: addresses of trusted proxies are skipped, and the first other one is the client
//! (what nginx's `real_ip_recursive` does). Anything that does not parse as an address (a
//! name, `unknown`, an obfuscated identifier, garbage) ends the walk there: the last trusted
//! hop is then taken as the client, never a value the client may have made up.
//!
//! The headers are untrusted bytes: they are read as byte slices, element by element, with
//! no allocation and no indexing that can fail; `fuzz/fuzz_targets/forwarded.rs` runs it on
//! arbitrary input.

use crate::status::Prefix;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use core::str::FromStr;

/// Most entries looked at in one header (the rest, further left, are not reached).
const MAX_HOPS: usize = 16;

/// The client's address for a request that arrived from `peer` with `forwarded` (the
/// `Forwarded` fields' values, in order) and `x_forwarded_for` (the `X-Forwarded-For` values,
/// in order): `peer` itself unless it lies in `proxies`.
pub fn client_address<'h>(
    peer: Option<IpAddr>,
    proxies: &[Prefix],
    forwarded: impl Iterator<Item = &'h [u8]>,
    x_forwarded_for: impl Iterator<Item = &'h [u8]>,
) -> Option<IpAddr> {
    let peer = peer?;
    let trusted = |address: IpAddr| proxies.iter().any(|prefix| prefix.contains(address));
    if !trusted(peer) {
        return Some(peer);
    }
    let mut hops = heapless::Vec::<Option<IpAddr>, MAX_HOPS>::new();
    let mut forwarded = forwarded.peekable();
    if forwarded.peek().is_some() {
        collect(&mut hops, forwarded, for_parameter);
    } else {
        collect(&mut hops, x_forwarded_for, |element| {
            parse_address(element.trim_ascii())
        });
    }
    // Right to left: skip our own proxies; the first other address is the client.
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop {
            Some(address) if trusted(*address) => client = *address,
            Some(address) => return Some(*address),
            None => break,
        }
    }
    Some(client)
}

/// The comma-separated elements of every value, in order, each read by `read` (`None`: not
/// an address); the last [`MAX_HOPS`] kept.
fn collect<'h>(
    hops: &mut heapless::Vec<Option<IpAddr>, MAX_HOPS>,
    values: impl Iterator<Item = &'h [u8]>,
    read: impl Fn(&[u8]) -> Option<IpAddr>,
) {
    for value in values {
        for element in value.split(|&b| b == b',') {
            if hops.is_full() {
                hops.remove(0);
            }
            // Cannot fail: there is room now.
            let _ = hops.push(read(element));
        }
    }
}

/// The address of a `Forwarded` element's `for=` parameter (RFC 7239 §4, §6): a token or a
/// quoted string holding an IPv4 address, or an IPv6 address in brackets, each with an
/// optional port.
fn for_parameter(element: &[u8]) -> Option<IpAddr> {
    let value = element.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let (name, value) = pair.split_at_checked(4)?;
        name.eq_ignore_ascii_case(b"for=").then_some(value)
    })?;
    let value = match value {
        [b'"', inner @ .., b'"'] => inner,
        _ => value,
    };
    parse_address(value)
}

/// An address as proxies write them: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:4711`.
fn parse_address(text: &[u8]) -> Option<IpAddr> {
    let text = core::str::from_utf8(text).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || port(after.strip_prefix(':')?)) {
            return None;
        }
        return Ipv6Addr::from_str(inside).ok().map(IpAddr::V6);
    }
    if let Ok(v6) = Ipv6Addr::from_str(text) {
        return Some(IpAddr::V6(v6));
    }
    let host = match text.split_once(':') {
        Some((host, after)) if port(after) => host,
        Some(_) => return None,
        None => text,
    };
    Ipv4Addr::from_str(host).ok().map(IpAddr::V4)
}

fn port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    const PROXY: Prefix = Prefix {
        address: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)),
        len: 8,
    };

    fn client(peer: IpAddr, forwarded: &[&str], xff: &[&str]) -> IpAddr {
        client_address(
            Some(peer),
            &[PROXY],
            forwarded.iter().map(|v| v.as_bytes()),
            xff.iter().map(|v| v.as_bytes()),
        )
        .unwrap()
    }

    #[test]
    fn headers_count_only_from_a_trusted_proxy() {
        let stranger = v4(198, 51, 100, 7);
        assert_eq!(
            client(stranger, &["for=203.0.113.9"], &["203.0.113.9"]),
            stranger
        );
        let proxy = v4(10, 1, 2, 3);
        assert_eq!(client(proxy, &[], &[]), proxy);
        assert_eq!(client(proxy, &[], &["203.0.113.9"]), v4(203, 0, 113, 9));
        assert_eq!(
            client(proxy, &[], &[" 203.0.113.9 , 10.9.9.9"]),
            v4(203, 0, 113, 9)
        );
        // A client's own X-Forwarded-For entry, left of the one our proxy added: ignored.
        assert_eq!(
            client(proxy, &[], &["1.2.3.4, 203.0.113.9"]),
            v4(203, 0, 113, 9)
        );
        // Several fields, in order.
        assert_eq!(
            client(proxy, &[], &["1.2.3.4", "203.0.113.9:4711"]),
            v4(203, 0, 113, 9)
        );
        // Garbage right of the client: the last trusted hop, not a made-up value.
        assert_eq!(client(proxy, &[], &["1.2.3.4, unknown"]), proxy);
        assert_eq!(
            client(proxy, &[], &["1.2.3.4, junk, 10.7.7.7"]),
            v4(10, 7, 7, 7)
        );
        // Every hop trusted: the left-most.
        assert_eq!(client(proxy, &[], &["10.4.4.4, 10.5.5.5"]), v4(10, 4, 4, 4));
    }

    #[test]
    fn forwarded_wins_and_is_read_as_rfc_7239_says() {
        let proxy = v4(10, 1, 2, 3);
        assert_eq!(
            client(
                proxy,
                &["for=192.0.2.60;proto=http;by=203.0.113.43"],
                &["1.1.1.1"]
            ),
            v4(192, 0, 2, 60)
        );
        assert_eq!(
            client(
                proxy,
                &[r#"for="[2001:db8:cafe::17]:4711", For=10.2.2.2"#],
                &[]
            ),
            "2001:db8:cafe::17".parse::<IpAddr>().unwrap()
        );
        assert_eq!(client(proxy, &["for=_hidden"], &["1.1.1.1"]), proxy);
        assert_eq!(client(proxy, &["proto=https"], &[]), proxy);
    }

    #[test]
    fn addresses_in_every_form() {
        for (text, expected) in [
            ("192.0.2.1", Some(v4(192, 0, 2, 1))),
            ("192.0.2.1:80", Some(v4(192, 0, 2, 1))),
            ("192.0.2.1:", None),
            ("192.0.2.1:123456", None),
            ("[2001:db8::1]:443", "2001:db8::1".parse().ok()),
            ("[2001:db8::1]", "2001:db8::1".parse().ok()),
            ("2001:db8::1", "2001:db8::1".parse().ok()),
            ("[2001:db8::1", None),
            ("[192.0.2.1]", None),
            ("", None),
            ("\u{ff}", None),
        ] {
            assert_eq!(parse_address(text.as_bytes()), expected, "{text:?}");
        }
    }

    #[test]
    fn long_chains_keep_the_right_end() {
        let proxy = v4(10, 1, 2, 3);
        use core::fmt::Write;
        let mut chain = heapless::String::<1024>::new();
        for i in 0..40 {
            write!(chain, "1.1.1.{i}, ").unwrap();
        }
        chain.push_str("203.0.113.9").unwrap();
        assert_eq!(client(proxy, &[], &[&chain]), v4(203, 0, 113, 9));
    }
}
