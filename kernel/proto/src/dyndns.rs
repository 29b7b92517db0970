//! The dyndns2 update protocol, as DuckDNS, deSEC, No-IP, Dynu and most routers' lists
//! speak it: the request's path and query ([`update_target`]) and the checked reading of the
//! provider's answer ([`parse_answer`]) with what each answer means for the next request
//! ([`Answer::verdict`]). Pure code, no socket.
//!
//! The request is `GET /nic/update?hostname=NAME&myip=V4[&myipv6=V6]` with HTTP Basic
//! authentication. The providers differ in the parameters, so the owner names the dialect:
//!
//! - `dyndns2`: `myip` (IPv4) and `myipv6`, each only when known (Dyn's own and No-IP's
//!   servers, Dynu);
//! - `desec`: `myipv4` and `myipv6`, and `preserve` for a family not known: deSEC *removes*
//!   the records of a family a request leaves out, so a board without IPv6 would delete the
//!   owner's AAAA;
//! - `duckdns`: DuckDNS's own form, `/update?domains=NAME&token=PASSWORD&ip=V4&ipv6=V6`: it
//!   takes the IPv6 address only when named explicitly (it never guesses it from the
//!   connection), and answers `OK` or `KO` rather than dyndns2's codes.
//!
//! The dyndns2 answers (the first word of the body) and what follows from them: `good` and
//! `nochg` (done; `nochg` repeated is what gets hosts blocked, so the sender only ever sends
//! on a change); `badauth`, `nohost`, `notfqdn`, `numhost`, `abuse`, `badagent`, `!donator`
//! (the settings or the account are wrong: sending again cannot help, so nothing is sent
//! until the settings change, which takes a restart); `911` and `dnserr` (the
//! provider's trouble: the protocol asks for at least 30 minutes before the next try);
//! anything else is retried with the usual back-off.

use core::fmt::Write;

/// Which provider dialect to speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Plain dyndns2: `myip`, `myipv6`.
    Dyndns2,
    /// deSEC: `myipv4`, `myipv6`, `preserve` for an unknown family.
    Desec,
    /// DuckDNS: `/update?domains=&token=&ip=&ipv6=`, answers `OK`/`KO`.
    DuckDns,
}

/// The longest request target [`update_target`] writes.
pub const TARGET_LEN: usize = 512;

/// Writes the request target (path and query) for `name` with the addresses known, after
/// `path` (the URL's path, `/nic/update` or DuckDNS's `/update`). `token` is DuckDNS's (the
/// password); the others authenticate with Basic. `None` if it does not fit.
pub fn update_target(
    dialect: Dialect,
    path: &str,
    name: &str,
    token: &str,
    ipv4: Option<[u8; 4]>,
    ipv6: Option<[u8; 16]>,
) -> Option<heapless::String<TARGET_LEN>> {
    let mut out = heapless::String::new();
    let v4 = ipv4.map(core::net::Ipv4Addr::from);
    let v6 = ipv6.map(core::net::Ipv6Addr::from);
    let separator = if path.contains('?') { '&' } else { '?' };
    write!(out, "{path}{separator}").ok()?;
    match dialect {
        Dialect::Dyndns2 => {
            write!(out, "hostname=").ok()?;
            escape(&mut out, name)?;
            if let Some(v4) = v4 {
                write!(out, "&myip={v4}").ok()?;
            }
            if let Some(v6) = v6 {
                write!(out, "&myipv6={v6}").ok()?;
            }
        }
        Dialect::Desec => {
            write!(out, "hostname=").ok()?;
            escape(&mut out, name)?;
            match v4 {
                Some(v4) => write!(out, "&myipv4={v4}").ok()?,
                None => write!(out, "&myipv4=preserve").ok()?,
            }
            match v6 {
                Some(v6) => write!(out, "&myipv6={v6}").ok()?,
                None => write!(out, "&myipv6=preserve").ok()?,
            }
        }
        Dialect::DuckDns => {
            // DuckDNS wants the subdomain alone (`home` of home.duckdns.org).
            let label = name.strip_suffix(".duckdns.org").unwrap_or(name);
            write!(out, "domains=").ok()?;
            escape(&mut out, label)?;
            write!(out, "&token=").ok()?;
            escape(&mut out, token)?;
            if let Some(v4) = v4 {
                write!(out, "&ip={v4}").ok()?;
            }
            if let Some(v6) = v6 {
                write!(out, "&ipv6={v6}").ok()?;
            }
        }
    }
    Some(out)
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn escape(out: &mut heapless::String<TARGET_LEN>, text: &str) -> Option<()> {
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte)).ok()?;
        } else {
            write!(out, "%{byte:02X}").ok()?;
        }
    }
    Some(())
}

/// The provider's answer, from the first word of its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `good`: updated (DuckDNS: `OK`).
    Good,
    /// `nochg`: the records already held these addresses.
    NoChange,
    /// `badauth`: the user name or password is wrong.
    BadAuth,
    /// `nohost`: no such host name in the account.
    NoHost,
    /// `notfqdn`: the name is not a fully qualified domain name.
    NotFqdn,
    /// `numhost`: too many hosts in one request.
    NumHost,
    /// `abuse`: the host is blocked for abuse.
    Abuse,
    /// `badagent`: the provider refuses this client (its User-Agent or method).
    BadAgent,
    /// `!donator`: a feature of paid accounts was asked for.
    NotDonator,
    /// `dnserr`: the provider's DNS failed.
    DnsError,
    /// `911`: the provider has a problem; try again after 30 minutes or more.
    ServerError,
    /// DuckDNS's `KO`: the token or the domain is wrong.
    DuckKo,
    /// Anything else (an HTML error page, an empty body).
    Unknown,
}

/// What to do after an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The records hold the addresses sent.
    Done,
    /// Do not send again until the settings change (a restart), whatever the addresses do:
    /// the settings or the account need the owner.
    Stop,
    /// Try again, no sooner than this many seconds.
    RetryAfter(u64),
    /// Try again with the usual back-off.
    Retry,
}

/// The shortest wait after `911` or `dnserr` (the dyndns2 protocol asks for 30 minutes).
pub const SERVER_ERROR_WAIT_SECONDS: u64 = 30 * 60;

impl Answer {
    /// What the sender does next.
    pub fn verdict(self) -> Verdict {
        match self {
            Answer::Good | Answer::NoChange => Verdict::Done,
            Answer::BadAuth
            | Answer::NoHost
            | Answer::NotFqdn
            | Answer::NumHost
            | Answer::Abuse
            | Answer::BadAgent
            | Answer::NotDonator
            | Answer::DuckKo => Verdict::Stop,
            Answer::DnsError | Answer::ServerError => {
                Verdict::RetryAfter(SERVER_ERROR_WAIT_SECONDS)
            }
            Answer::Unknown => Verdict::Retry,
        }
    }

    /// The answer's word, for the log.
    pub fn word(self) -> &'static str {
        match self {
            Answer::Good => "good",
            Answer::NoChange => "nochg",
            Answer::BadAuth => "badauth",
            Answer::NoHost => "nohost",
            Answer::NotFqdn => "notfqdn",
            Answer::NumHost => "numhost",
            Answer::Abuse => "abuse",
            Answer::BadAgent => "badagent",
            Answer::NotDonator => "!donator",
            Answer::DnsError => "dnserr",
            Answer::ServerError => "911",
            Answer::DuckKo => "KO",
            Answer::Unknown => "an unknown answer",
        }
    }
}

/// What the provider's response means: the body's first word, and for a body without a
/// known one, a 401 or 403 status as `badauth`.
pub fn answer_of(status: u16, body: &[u8]) -> Answer {
    match parse_answer(body) {
        Answer::Unknown if matches!(status, 401 | 403) => Answer::BadAuth,
        answer => answer,
    }
}

/// Reads the answer's first word (at most the first 64 bytes are looked at; what follows
/// it, such as the address after `good`, is not needed).
pub fn parse_answer(body: &[u8]) -> Answer {
    let head = body.get(..body.len().min(64)).unwrap_or(&[]);
    let start = head
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(head.len());
    let rest = &head[start..];
    let end = rest
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    let word = &rest[..end];
    const WORDS: [(&[u8], Answer); 13] = [
        (b"good", Answer::Good),
        (b"nochg", Answer::NoChange),
        (b"badauth", Answer::BadAuth),
        (b"nohost", Answer::NoHost),
        (b"notfqdn", Answer::NotFqdn),
        (b"numhost", Answer::NumHost),
        (b"abuse", Answer::Abuse),
        (b"badagent", Answer::BadAgent),
        (b"!donator", Answer::NotDonator),
        (b"dnserr", Answer::DnsError),
        (b"911", Answer::ServerError),
        (b"OK", Answer::Good),
        (b"KO", Answer::DuckKo),
    ];
    WORDS
        .iter()
        .find(|(known, _)| *known == word)
        .map_or(Answer::Unknown, |(_, answer)| *answer)
}

/// Parses an echo service's answer: the body's first word as an IPv4 address (as
/// `https://api.ipify.org`, `https://ipv4.icanhazip.com` or `https://checkip.amazonaws.com`
/// answer). `None` for anything else, or an address that cannot be a public one
/// (unspecified, loopback, private, shared, link-local, multicast, broadcast, documentation
/// ranges excepted: tests use them).
pub fn parse_echo(body: &[u8]) -> Option<[u8; 4]> {
    let head = body.get(..body.len().min(64)).unwrap_or(body);
    let text = core::str::from_utf8(head).ok()?;
    let word = text.split_ascii_whitespace().next()?;
    let address: core::net::Ipv4Addr = word.parse().ok()?;
    let octets = address.octets();
    let shared = octets[0] == 100 && octets[1] & 0xc0 == 64;
    if address.is_unspecified()
        || address.is_loopback()
        || address.is_private()
        || address.is_link_local()
        || address.is_multicast()
        || address.is_broadcast()
        || shared
    {
        return None;
    }
    Some(octets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn each_dialect_names_the_addresses_its_own_way() {
        let v4 = Some([203, 0, 113, 7]);
        let v6 = Some([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        let target = |dialect, path, v4, v6| {
            update_target(dialect, path, "home.example.org", "t0k&n", v4, v6)
                .unwrap()
                .to_string()
        };
        assert_eq!(
            target(Dialect::Dyndns2, "/nic/update", v4, v6),
            "/nic/update?hostname=home.example.org&myip=203.0.113.7&myipv6=2001:db8::1"
        );
        assert_eq!(
            target(Dialect::Dyndns2, "/nic/update", v4, None),
            "/nic/update?hostname=home.example.org&myip=203.0.113.7"
        );
        // deSEC would delete the family left out: `preserve` keeps it.
        assert_eq!(
            target(Dialect::Desec, "/", v4, None),
            "/?hostname=home.example.org&myipv4=203.0.113.7&myipv6=preserve"
        );
        assert_eq!(
            target(Dialect::Desec, "/", None, v6),
            "/?hostname=home.example.org&myipv4=preserve&myipv6=2001:db8::1"
        );
        assert_eq!(
            update_target(
                Dialect::DuckDns,
                "/update",
                "home.duckdns.org",
                "t0k&n",
                v4,
                v6
            )
            .unwrap()
            .as_str(),
            "/update?domains=home&token=t0k%26n&ip=203.0.113.7&ipv6=2001:db8::1"
        );
        let long = "a".repeat(600);
        assert!(update_target(Dialect::Dyndns2, "/nic/update", &long, "", v4, v6).is_none());
    }

    #[test]
    fn answers_and_what_follows_from_them() {
        assert_eq!(parse_answer(b"good 203.0.113.7\n"), Answer::Good);
        assert_eq!(parse_answer(b"nochg 203.0.113.7"), Answer::NoChange);
        assert_eq!(parse_answer(b"  badauth\r\n"), Answer::BadAuth);
        assert_eq!(parse_answer(b"911"), Answer::ServerError);
        assert_eq!(parse_answer(b"OK"), Answer::Good);
        assert_eq!(parse_answer(b"KO"), Answer::DuckKo);
        assert_eq!(parse_answer(b"goodbye"), Answer::Unknown);
        assert_eq!(parse_answer(b""), Answer::Unknown);
        assert_eq!(parse_answer(b"<html>"), Answer::Unknown);
        assert_eq!(Answer::Good.verdict(), Verdict::Done);
        assert_eq!(Answer::NoChange.verdict(), Verdict::Done);
        for stop in [
            Answer::BadAuth,
            Answer::NoHost,
            Answer::Abuse,
            Answer::DuckKo,
        ] {
            assert_eq!(stop.verdict(), Verdict::Stop);
        }
        assert_eq!(
            Answer::ServerError.verdict(),
            Verdict::RetryAfter(SERVER_ERROR_WAIT_SECONDS)
        );
        assert_eq!(Answer::DnsError.verdict(), Verdict::RetryAfter(1800));
        assert_eq!(Answer::Unknown.verdict(), Verdict::Retry);
    }

    #[test]
    fn echo_answers_give_a_public_address_or_nothing() {
        assert_eq!(parse_echo(b"203.0.113.7\n"), Some([203, 0, 113, 7]));
        assert_eq!(parse_echo(b"  198.51.100.1 "), Some([198, 51, 100, 1]));
        for bad in [
            &b"192.168.1.2"[..],
            b"10.0.0.1",
            b"100.64.0.1",
            b"127.0.0.1",
            b"0.0.0.0",
            b"not an address",
            b"",
            b"\xff\xfe",
        ] {
            assert_eq!(parse_echo(bad), None, "{bad:?}");
        }
    }
}
