//! The owner's private status page (`/.well-known/bramble/status`, HTML) and metrics
//! (`/metrics`, the Prometheus text format 0.0.4), answered only to the sources the owner
//! allows ([`StatusAccess`]: `status_from` prefixes, default the link-local ranges) or to a
//! request carrying the owner's bearer token (`status_token`). Anyone else is routed like any
//! other request, so a stranger gets the site's own 404 (or the site's file, if it has one at
//! that path): the same bytes as any missing page, nothing that says the page exists.
//!
//! The figures come from the server's own counters and from a [`StatusSnapshot`] that the
//! board refreshes (uptime, reset reason, memory, card, TLS, clock, syslog). Both bodies are
//! built at request time into a fixed buffer of [`STATUS_BODY_LEN`] bytes and sent with the
//! response head, so they carry only what fits: a dozen figures, kept short. Nothing is
//! cached (`Cache-Control: no-store`).

use crate::counters::{Counters, STATUSES};
use crate::visitors::Visitors;
use core::fmt::{self, Write};
use core::net::IpAddr;

/// The status page's path.
pub const STATUS_PATH: &str = "/.well-known/bramble/status";
/// The metrics' path.
pub const METRICS_PATH: &str = "/metrics";
/// Most `status_from` prefixes kept.
pub const MAX_STATUS_PREFIXES: usize = 4;
/// Longest bearer token kept.
pub const MAX_TOKEN_LEN: usize = 64;
/// The largest status or metrics body (it travels in the response head's buffer).
pub const STATUS_BODY_LEN: usize = 1920;

/// An address prefix: an address and how many leading bits of it count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The network address.
    pub address: IpAddr,
    /// Its length in bits (at most 32 for IPv4, 128 for IPv6).
    pub len: u8,
}

impl Prefix {
    /// Whether `address` lies in this prefix (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
            v4 => v4,
        };
        match (self.address, address) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let len = u32::from(self.len.min(32));
                let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let len = u32::from(self.len.min(128));
                let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The link-local ranges: the default `status_from`.
pub const LINK_LOCAL: [Prefix; 2] = [
    Prefix {
        address: IpAddr::V4(core::net::Ipv4Addr::new(169, 254, 0, 0)),
        len: 16,
    },
    Prefix {
        address: IpAddr::V6(core::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0)),
        len: 10,
    },
];

/// Who may see the status page and metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusAccess {
    /// Sources allowed without a token (empty: [`LINK_LOCAL`]).
    pub from: heapless::Vec<Prefix, MAX_STATUS_PREFIXES>,
    /// A bearer token that lets any source in (`Authorization: Bearer TOKEN`).
    pub token: Option<heapless::String<MAX_TOKEN_LEN>>,
}

impl Default for StatusAccess {
    fn default() -> Self {
        Self {
            from: heapless::Vec::new(),
            token: None,
        }
    }
}

impl StatusAccess {
    /// Whether a request from `peer` with `authorization` (the header's value) may see it.
    pub fn allows(&self, peer: Option<IpAddr>, authorization: Option<&[u8]>) -> bool {
        if let (Some(token), Some(value)) = (&self.token, authorization)
            && let Some(given) = bearer(value)
            && same_bytes(given, token.as_bytes())
        {
            return true;
        }
        let Some(peer) = peer else {
            return false;
        };
        let from: &[Prefix] = if self.from.is_empty() {
            &LINK_LOCAL
        } else {
            &self.from
        };
        from.iter().any(|prefix| prefix.contains(peer))
    }
}

/// The token of `Bearer TOKEN` (RFC 6750 §2.1; the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return None;
    }
    let token = rest.strip_prefix(b" ")?.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Compares without stopping at the first difference (the time says nothing of the token).
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// What the board knows and the HTTP engine does not, refreshed by the board.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusSnapshot {
    /// Microseconds since reset.
    pub uptime_micros: u64,
    /// Why the board last reset (a short phrase).
    pub reset_reason: &'static str,
    /// Resets since power-on.
    pub resets: u32,
    /// RAM in use and free, bytes.
    pub memory_used: u64,
    /// RAM free, bytes.
    pub memory_free: u64,
    /// Card cache hits and misses, and bytes read from the card.
    pub cache_hits: u64,
    /// Card cache misses.
    pub cache_misses: u64,
    /// Bytes read from the card.
    pub card_bytes_read: u64,
    /// TLS handshakes completed (full and resumed).
    pub tls_handshakes: u64,
    /// TLS sessions ended by an error.
    pub tls_failures: u64,
    /// Where the wall clock came from (`sntp`, `none`).
    pub clock_source: &'static str,
    /// Unix seconds now, once the clock is set.
    pub unix_seconds: Option<u64>,
    /// Syslog messages sent and lines dropped.
    pub syslog_sent: u64,
    /// Syslog lines dropped.
    pub syslog_dropped: u64,
    /// Connections refused or reset by the defences (per-source cap, evictions, deadlines).
    pub defence_drops: u64,
    /// The served certificate's end (Unix seconds), when HTTPS has one.
    pub certificate_not_after: Option<i64>,
    /// When ACME next orders (renewal or retry), Unix seconds, when one is planned.
    pub next_renewal: Option<i64>,
    /// The port mapping on the home router (`None`: `router_ports = off`).
    pub router: Option<RouterSummary>,
    /// The public address, dyndns2 and the outside check (`None`: none of them is on).
    pub reach: Option<ReachSummary>,
}

/// The public address, dyndns2's state and the outside check, in short, for the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReachSummary {
    /// The public IPv4 address as last learned.
    pub public: Option<[u8; 4]>,
    /// Who said so (`echo`, `PCP`, ...), or empty.
    pub source: &'static str,
    /// dyndns2's state (`up to date`, `stopped by badauth`, ...), or empty without it.
    pub dyndns: &'static str,
    /// dyndns2 updates the provider confirmed.
    pub updates: u32,
    /// `unchecked`, `reachable` or `failed`.
    pub check: &'static str,
}

impl fmt::Display for ReachSummary {
    /// `public 203.0.113.7 (echo); dyndns up to date, 1 update; outside check unchecked`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.public {
            Some(address) => write!(
                f,
                "public {} ({})",
                core::net::Ipv4Addr::from(address),
                self.source
            )?,
            None => f.write_str("public address unknown")?,
        }
        if !self.dyndns.is_empty() {
            write!(f, "; dyndns {}, {} updates", self.dyndns, self.updates)?;
        }
        write!(f, "; outside check {}", self.check)
    }
}

impl fmt::Display for RouterSummary {
    /// `PCP 203.0.113.7 :80 :443, 3550 s left; double NAT`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.protocol)?;
        if let Some(address) = self.external {
            write!(f, " {}", core::net::Ipv4Addr::from(address))?;
        }
        for port in self.ports.iter().filter(|port| **port != 0) {
            write!(f, " :{port}")?;
        }
        if self.ports.iter().any(|port| *port != 0) {
            write!(f, ", {} s left", self.seconds_left)?;
        }
        if !self.problem.is_empty() {
            write!(f, "; {}", self.problem)?;
        }
        Ok(())
    }
}

/// The port mapping on the home router, in short, for the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterSummary {
    /// The protocol that answered (`PCP`, `NAT-PMP`), or empty while none did.
    pub protocol: &'static str,
    /// The outside address the router reported.
    pub external: Option<[u8; 4]>,
    /// The outside ports mapped now (0: none).
    pub ports: [u16; 2],
    /// Seconds left of the shortest mapping.
    pub seconds_left: u64,
    /// What is wrong, in a few words (double NAT, no answer), or empty.
    pub problem: &'static str,
}

/// Which of the two pages a path asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StatusPage {
    Html,
    Metrics,
}

impl StatusPage {
    pub(crate) fn for_path(path: &str) -> Option<StatusPage> {
        match path {
            STATUS_PATH => Some(StatusPage::Html),
            METRICS_PATH => Some(StatusPage::Metrics),
            _ => None,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            StatusPage::Html => "text/html; charset=utf-8",
            StatusPage::Metrics => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Answers a GET or HEAD for the status page or the metrics, if `target` asks for one and
/// the request may see it; `None` otherwise (the request is then routed as usual, so a
/// stranger gets the site's own answer for the path).
pub(crate) fn respond(
    response: &mut crate::respond::Response<'_, '_>,
    target: &str,
    authorization: Option<&[u8]>,
    server: &crate::Server<'_>,
    peer: Option<IpAddr>,
) -> Option<crate::respond::Outcome> {
    let (path, _) = crate::path::split_query(target);
    let page = StatusPage::for_path(path)?;
    if !server.status_access.allows(peer, authorization) {
        return None;
    }
    let mut body = heapless::String::<STATUS_BODY_LEN>::new();
    let written = match page {
        StatusPage::Html => write_html(
            &mut body,
            &server.counters,
            &server.status_snapshot,
            &server.visitors,
        ),
        StatusPage::Metrics => write_metrics(
            &mut body,
            &server.counters,
            &server.status_snapshot,
            &server.visitors,
        ),
    };
    if written.is_err() {
        // Cannot happen with the figures' widths (tested at their largest); say so if it does.
        body.clear();
        let _ = body.push_str("the status does not fit its buffer\n");
    }
    let head = crate::response::Head {
        content_type: Some(page.content_type()),
        content_length: Some(body.len() as u64),
        cache_control: Some("no-store"),
        ..crate::response::Head::new(200)
    };
    Some(response.finish(head, Some(&body), None))
}

/// One metric with its HELP and TYPE lines.
fn metric(out: &mut impl Write, name: &str, kind: &str, help: &str, value: u64) -> fmt::Result {
    writeln!(out, "# HELP bramble_{name} {help}")?;
    writeln!(out, "# TYPE bramble_{name} {kind}")?;
    writeln!(out, "bramble_{name} {value}")
}

/// A Unix time as `DD Mon YYYY` (UTC), or the number when out of range.
struct Day(i64);

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut date = heapless::String::<40>::new();
        match u64::try_from(self.0) {
            Ok(seconds) if crate::date::write_imf_fixdate(&mut date, seconds).is_ok() => {
                // "Sun, 06 Nov 1994 08:49:37 GMT": the day, month and year.
                f.write_str(date.get(5..16).unwrap_or(&date))
            }
            _ => write!(f, "Unix time {}", self.0),
        }
    }
}

/// The metrics in the Prometheus text format.
pub(crate) fn write_metrics(
    out: &mut impl Write,
    counters: &Counters,
    snapshot: &StatusSnapshot,
    visitors: &Visitors,
) -> fmt::Result {
    metric(
        out,
        "uptime_seconds",
        "gauge",
        "Uptime.",
        snapshot.uptime_micros / 1_000_000,
    )?;
    writeln!(out, "# HELP bramble_responses_total Responses.")?;
    writeln!(out, "# TYPE bramble_responses_total counter")?;
    for class in 1..=5u16 {
        let count: u64 = STATUSES
            .iter()
            .zip(counters.by_status.iter())
            .filter(|(status, _)| **status / 100 == class)
            .fold(0u64, |sum, (_, count)| sum.saturating_add(*count));
        writeln!(
            out,
            "bramble_responses_total{{class=\"{class}xx\"}} {count}"
        )?;
    }
    metric(
        out,
        "sent_bytes_total",
        "counter",
        "Bytes sent.",
        counters.bytes_sent,
    )?;
    metric(
        out,
        "connections_total",
        "counter",
        "Connections.",
        counters.connections_accepted,
    )?;
    metric(
        out,
        "defence_cuts_total",
        "counter",
        "Defence cuts.",
        snapshot.defence_drops,
    )?;
    metric(
        out,
        "tls_handshakes_total",
        "counter",
        "Handshakes.",
        snapshot.tls_handshakes,
    )?;
    // One family for both times (a label each): the body's room is counted.
    if snapshot.certificate_not_after.is_some() || snapshot.next_renewal.is_some() {
        writeln!(
            out,
            "# HELP bramble_certificate_timestamp_seconds Expiry, next renewal."
        )?;
        writeln!(out, "# TYPE bramble_certificate_timestamp_seconds gauge")?;
        for (event, time) in [
            ("expiry", snapshot.certificate_not_after),
            ("renewal", snapshot.next_renewal),
        ] {
            if let Some(time) = time {
                writeln!(
                    out,
                    "bramble_certificate_timestamp_seconds{{event=\"{event}\"}} {time}"
                )?;
            }
        }
    }
    metric(
        out,
        "cache_hits_total",
        "counter",
        "Card cache hits.",
        snapshot.cache_hits,
    )?;
    metric(
        out,
        "card_read_bytes_total",
        "counter",
        "Card reads.",
        snapshot.card_bytes_read,
    )?;
    metric(
        out,
        "memory_used_bytes",
        "gauge",
        "RAM used.",
        snapshot.memory_used,
    )?;
    let (unique, _) = visitors.unique();
    metric(out, "pages_today", "gauge", "Pages today.", visitors.pages)?;
    metric(out, "visitors_today", "gauge", "Visitors today.", unique)
}

/// The status page: a small HTML table.
pub(crate) fn write_html(
    out: &mut impl Write,
    counters: &Counters,
    snapshot: &StatusSnapshot,
    visitors: &Visitors,
) -> fmt::Result {
    let up = snapshot.uptime_micros / 1_000_000;
    out.write_str(
        "<!doctype html><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
         <title>Bramble status</title><style>body{font:16px system-ui;margin:2em}\
         td{padding:.2em 1em .2em 0}td+td{text-align:right;font-variant-numeric:tabular-nums}\
         </style><h1>Bramble status</h1><table>",
    )?;
    let mut row =
        |name: &str, value: fmt::Arguments<'_>| writeln!(out, "<tr><td>{name}<td>{value}");
    row(
        "Up",
        format_args!(
            "{}d {}h {}m {}s",
            up / 86_400,
            up / 3600 % 24,
            up / 60 % 60,
            up % 60
        ),
    )?;
    row(
        "Last reset",
        format_args!(
            "{} ({} since power-on)",
            snapshot.reset_reason, snapshot.resets
        ),
    )?;
    row("Requests", format_args!("{}", counters.requests))?;
    row("Bytes sent", format_args!("{}", counters.bytes_sent))?;
    row(
        "200 / 304 / 404",
        format_args!(
            "{} / {} / {}",
            counters.status(200),
            counters.status(304),
            counters.status(404)
        ),
    )?;
    row(
        "Connections",
        format_args!(
            "{} open, {} accepted, {} cut by the defences",
            counters.open_connections, counters.connections_accepted, snapshot.defence_drops
        ),
    )?;
    row(
        "TLS handshakes",
        format_args!(
            "{} ({} failed)",
            snapshot.tls_handshakes, snapshot.tls_failures
        ),
    )?;
    row(
        "Card cache",
        format_args!(
            "{} hits, {} misses, {} bytes read",
            snapshot.cache_hits, snapshot.cache_misses, snapshot.card_bytes_read
        ),
    )?;
    row("Clock", format_args!("{}", snapshot.clock_source))?;
    match (snapshot.certificate_not_after, snapshot.unix_seconds) {
        (Some(end), Some(now)) => row(
            "Certificate",
            format_args!(
                "expires {} (in {} days)",
                Day(end),
                end.saturating_sub(now as i64).max(0) / 86_400
            ),
        )?,
        (Some(end), None) => row("Certificate", format_args!("expires {}", Day(end)))?,
        (None, _) => row("Certificate", format_args!("none"))?,
    }
    if let Some(at) = snapshot.next_renewal {
        row("Next renewal", format_args!("{}", Day(at)))?;
    }
    row(
        "Memory",
        format_args!(
            "{} KiB used, {} KiB free",
            snapshot.memory_used / 1024,
            snapshot.memory_free / 1024
        ),
    )?;
    row(
        "Syslog",
        format_args!(
            "{} sent, {} dropped",
            snapshot.syslog_sent, snapshot.syslog_dropped
        ),
    )?;
    if let Some(router) = snapshot.router {
        row("Router", format_args!("{router}"))?;
    }
    if let Some(reach) = snapshot.reach {
        row("Reach", format_args!("{reach}"))?;
    }
    let (unique, floor) = visitors.unique();
    row(
        "Today",
        format_args!(
            "{} pages, {}{unique} visitors",
            visitors.pages,
            if floor { "at least " } else { "" }
        ),
    )?;
    for (name, top) in [
        ("Top pages", &visitors.top_pages),
        ("Referrers", &visitors.referrers),
    ] {
        write!(out, "<tr><td>{name}<td>")?;
        for (entry, count) in top.entries().take(TOP_SHOWN) {
            write_escaped(out, entry)?;
            write!(out, " {count}<br>")?;
        }
        out.write_str("\n")?;
    }
    out.write_str("</table>\n")
}

/// Entries of each top list on the page.
const TOP_SHOWN: usize = 3;

/// Most bytes of an escaped name on the page (the rest is cut).
const SHOWN_NAME_LEN: usize = 48;

/// `text` with `&`, `<`, `>` and `"` as HTML entities (a path or host a client chose), cut
/// after [`SHOWN_NAME_LEN`] bytes of output.
fn write_escaped(out: &mut impl Write, text: &str) -> fmt::Result {
    let mut written = 0;
    for c in text.chars() {
        written += match c {
            '&' => 5,
            '<' | '>' => 4,
            '"' => 6,
            c => c.len_utf8(),
        };
        if written > SHOWN_NAME_LEN {
            return out.write_str("…");
        }
        match c {
            '&' => out.write_str("&amp;")?,
            '<' => out.write_str("&lt;")?,
            '>' => out.write_str("&gt;")?,
            '"' => out.write_str("&quot;")?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn prefixes_and_tokens_decide() {
        let mut access = StatusAccess::default();
        assert!(access.allows(Some(v4(169, 254, 3, 4)), None));
        assert!(access.allows(Some("fe80::1".parse().unwrap()), None));
        assert!(!access.allows(Some(v4(192, 168, 1, 20)), None));
        assert!(!access.allows(None, None));
        let _ = access.from.push(Prefix {
            address: v4(192, 168, 1, 0),
            len: 24,
        });
        assert!(access.allows(Some(v4(192, 168, 1, 20)), None));
        assert!(access.allows(
            Some(IpAddr::V6(Ipv4Addr::new(192, 168, 1, 20).to_ipv6_mapped())),
            None
        ));
        assert!(!access.allows(Some(v4(192, 168, 2, 20)), None));
        assert!(
            !access.allows(Some(v4(169, 254, 3, 4)), None),
            "a list replaces the default"
        );
        let all = Prefix {
            address: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            len: 0,
        };
        assert!(all.contains("2001:db8::1".parse().unwrap()));
        assert!(!all.contains(v4(1, 2, 3, 4)));
        access.token = Some(heapless::String::try_from("s3cret-token").unwrap());
        let stranger = Some(v4(203, 0, 113, 9));
        assert!(access.allows(stranger, Some(b"Bearer s3cret-token")));
        assert!(access.allows(stranger, Some(b"bearer  s3cret-token ")));
        for wrong in [
            &b"Bearer s3cret-toke"[..],
            b"Bearer s3cret-tokenx",
            b"Basic s3cret-token",
            b"Bearer",
            b"Bearers3cret-token",
            b"",
        ] {
            assert!(!access.allows(stranger, Some(wrong)), "{wrong:?}");
        }
    }

    #[test]
    fn the_certificate_and_its_renewal_are_shown() {
        let snapshot = StatusSnapshot {
            // 2027-03-01T00:00:00Z, renewal 2027-01-30, clock 2026-12-01.
            certificate_not_after: Some(1_803_859_200),
            next_renewal: Some(1_801_267_200),
            unix_seconds: Some(1_796_083_200),
            ..StatusSnapshot::default()
        };
        let visitors = Visitors::default();
        let mut html = heapless::String::<STATUS_BODY_LEN>::new();
        write_html(&mut html, &Counters::default(), &snapshot, &visitors).unwrap();
        assert!(
            html.contains("<td>Certificate<td>expires 01 Mar 2027 (in 90 days)")
                && html.contains("<td>Next renewal<td>30 Jan 2027"),
            "{html}"
        );
        let mut metrics = heapless::String::<STATUS_BODY_LEN>::new();
        write_metrics(&mut metrics, &Counters::default(), &snapshot, &visitors).unwrap();
        assert!(
            metrics
                .contains("\nbramble_certificate_timestamp_seconds{event=\"expiry\"} 1803859200\n")
                && metrics.contains(
                    "\nbramble_certificate_timestamp_seconds{event=\"renewal\"} 1801267200\n"
                ),
            "{metrics}"
        );
        let none = StatusSnapshot::default();
        html.clear();
        write_html(&mut html, &Counters::default(), &none, &visitors).unwrap();
        assert!(html.contains("<td>Certificate<td>none") && !html.contains("Next renewal"));
        metrics.clear();
        write_metrics(&mut metrics, &Counters::default(), &none, &visitors).unwrap();
        assert!(!metrics.contains("certificate"), "{metrics}");
    }

    #[test]
    fn the_bodies_fit_at_their_largest() {
        let counters = Counters {
            requests: u64::MAX,
            bytes_sent: u64::MAX,
            connections_accepted: u64::MAX,
            open_connections: u32::MAX,
            by_status: [u64::MAX; STATUSES.len()],
            ..Counters::default()
        };
        let snapshot = StatusSnapshot {
            uptime_micros: u64::MAX,
            reset_reason: "the watchdog (the main loop stopped making progress)",
            resets: u32::MAX,
            memory_used: u64::MAX,
            memory_free: u64::MAX,
            cache_hits: u64::MAX,
            cache_misses: u64::MAX,
            card_bytes_read: u64::MAX,
            tls_handshakes: u64::MAX,
            tls_failures: u64::MAX,
            clock_source: "sntp",
            unix_seconds: Some(1),
            syslog_sent: u64::MAX,
            syslog_dropped: u64::MAX,
            defence_drops: u64::MAX,
            certificate_not_after: Some(i64::MIN),
            next_renewal: Some(i64::MAX),
            router: Some(RouterSummary {
                protocol: "NAT-PMP",
                external: Some([255; 4]),
                ports: [65535; 2],
                seconds_left: u64::MAX,
                problem: "no public address: double NAT or carrier-grade NAT",
            }),
            reach: Some(ReachSummary {
                public: Some([255; 4]),
                source: "UPnP IGD",
                dyndns: "stopped by !donator",
                updates: u32::MAX,
                check: "unchecked",
            }),
        };
        let mut html = heapless::String::<STATUS_BODY_LEN>::new();
        // Visitors at their widest: full top lists of the longest names, all escaped.
        let mut visitors = Visitors::default();
        visitors.offer_salt([1; 16]);
        for i in 0..8u8 {
            let mut path = heapless::String::<64>::new();
            write!(path, "/{:\"<39}", i).unwrap();
            let mut referer = heapless::String::<96>::new();
            write!(referer, "https://{:<<39}/", i).unwrap();
            visitors.count(
                1,
                crate::visitors::VisitRequest {
                    status: 200,
                    path: &path,
                    peer: None,
                    user_agent: None,
                    referer: Some(&referer),
                    own_host: "",
                },
            );
        }
        write_html(&mut html, &counters, &snapshot, &visitors).unwrap();
        assert!(!html.contains("<<") && html.contains("&lt;"), "{html}");
        let mut metrics = heapless::String::<STATUS_BODY_LEN>::new();
        write_metrics(&mut metrics, &counters, &snapshot, &visitors).unwrap();
        assert!(metrics.contains("bramble_responses_total{class=\"5xx\"} 18446744073709551615"));
    }
}
