//! Visitor counts without cookies and without keeping addresses: pages viewed today, the
//! most viewed pages and the hosts that referred visitors, and an estimate of today's
//! unique visitors, all in RAM, shown on the status page and in the metrics.
//!
//! A page view is a GET answered 200 for a path that names a page (it ends in `/` or
//! `.html`, or its last segment has no dot). A visitor is counted once a day by a 32-bit
//! SipHash of their address and User-Agent keyed with a salt that lives one day: the salt is
//! replaced at the day's turn (UTC once the clock is set, else each 24 h of uptime) by a fresh
//! one the board draws from the CSPRNG, and the day's hashes are dropped with it, so
//! yesterday's visitors cannot be linked to today's nor their hashes recomputed. The set
//! holds [`MAX_VISITORS`] hashes; past that the count says "at least". The top lists keep
//! [`TOP_ENTRIES`] entries each (a newcomer replaces the least-counted one, whose count it
//! takes over plus one: the space-saving estimate, exact while the list has room).
//! Nothing else is kept: no address, no User-Agent, no query string, no full referrer URL.

#![allow(deprecated)] // core::hash::SipHasher: the keyed hash in core, good for this use.

use core::hash::{Hasher, SipHasher};
use core::net::IpAddr;

/// Distinct visitor hashes kept per day.
pub const MAX_VISITORS: usize = 1024;
/// Entries of each top list.
pub const TOP_ENTRIES: usize = 5;
/// Bytes kept of a page path or referrer host.
pub const NAME_LEN: usize = 40;

/// One top list: names and counts.
#[derive(Clone, Debug, Default)]
pub struct Top {
    entries: heapless::Vec<(heapless::String<NAME_LEN>, u64), TOP_ENTRIES>,
}

impl Top {
    fn count(&mut self, name: &str) {
        let mut kept = heapless::String::<NAME_LEN>::new();
        for c in name.chars() {
            if kept.push(c).is_err() {
                break;
            }
        }
        if let Some(entry) = self.entries.iter_mut().find(|(n, _)| *n == kept) {
            entry.1 += 1;
        } else if self.entries.push((kept.clone(), 1)).is_err()
            && let Some(least) = self.entries.iter_mut().min_by_key(|(_, count)| *count)
        {
            *least = (kept, least.1 + 1);
        }
        self.entries
            .sort_unstable_by_key(|entry| core::cmp::Reverse(entry.1));
    }

    /// The entries, most counted first.
    pub fn entries(&self) -> impl Iterator<Item = (&str, u64)> {
        self.entries
            .iter()
            .map(|(name, count)| (name.as_str(), *count))
    }
}

/// Today's counts.
#[derive(Clone, Debug, Default)]
pub struct Visitors {
    /// The day counted (UTC day number, or uptime day + 2^40 before the clock is set).
    day: Option<u64>,
    salt: Option<[u8; 16]>,
    /// A fresh salt from the board, for the next day's turn.
    next_salt: Option<[u8; 16]>,
    /// Pages viewed today.
    pub pages: u64,
    seen: heapless::Vec<u32, MAX_VISITORS>,
    /// The most viewed pages today.
    pub top_pages: Top,
    /// The hosts that referred visitors today (other than this site).
    pub referrers: Top,
}

/// Whether `path` names a page rather than an asset.
fn is_page(path: &str) -> bool {
    let last = path.rsplit('/').next().unwrap_or("");
    path.ends_with('/') || path.ends_with(".html") || !last.contains('.')
}

/// The host of a Referer URL (`https://host:port/path` gives `host`).
fn referrer_host(referer: &str) -> Option<&str> {
    let rest = referer.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let host = if host.starts_with('[') {
        host.split_inclusive(']').next()?
    } else {
        host.split(':').next()?
    };
    (!host.is_empty() && host.bytes().all(|b| b.is_ascii_graphic())).then_some(host)
}

impl Visitors {
    /// Whether a fresh salt is wanted (none waiting for the next day).
    pub fn wants_salt(&self) -> bool {
        self.next_salt.is_none()
    }

    /// Gives a fresh salt from the CSPRNG, used at the next day's turn.
    pub fn offer_salt(&mut self, salt: [u8; 16]) {
        self.next_salt = Some(salt);
    }

    /// Unique visitors today, and whether that is a floor (the set was full).
    pub fn unique(&self) -> (u64, bool) {
        (self.seen.len() as u64, self.seen.is_full())
    }

    /// Counts a GET answered `status` for `path` on `day`; `own_host` is the request's Host
    /// (referrers from it are the site's own).
    pub fn count(&mut self, day: u64, request: VisitRequest<'_>) {
        if request.status != 200 || !is_page(request.path) {
            return;
        }
        if self.day != Some(day) {
            // A new day: drop the counts and the salt; without a fresh salt, none is used
            // (no visitor is counted as unique until the board gives one).
            *self = Visitors {
                day: Some(day),
                salt: self.next_salt.take(),
                ..Visitors::default()
            };
        }
        self.pages += 1;
        self.top_pages.count(request.path);
        if let Some(host) = request.referer.and_then(referrer_host)
            && !host.eq_ignore_ascii_case(request.own_host.split(':').next().unwrap_or(""))
        {
            self.referrers.count(host);
        }
        if let (Some(salt), Some(peer)) = (self.salt, request.peer) {
            let mut key = [0u8; 8];
            key.copy_from_slice(&salt[..8]);
            let mut key2 = [0u8; 8];
            key2.copy_from_slice(&salt[8..]);
            let mut hasher =
                SipHasher::new_with_keys(u64::from_le_bytes(key), u64::from_le_bytes(key2));
            match peer {
                IpAddr::V4(v4) => hasher.write(&v4.octets()),
                IpAddr::V6(v6) => hasher.write(&v6.octets()),
            }
            hasher.write(request.user_agent.unwrap_or(b""));
            let hash = hasher.finish() as u32;
            if let Err(at) = self.seen.binary_search(&hash) {
                let _ = self.seen.insert(at, hash);
            }
        }
    }
}

/// What [`Visitors::count`] looks at in one request.
pub struct VisitRequest<'r> {
    /// The response's status.
    pub status: u16,
    /// The path (no query).
    pub path: &'r str,
    /// The client's address.
    pub peer: Option<IpAddr>,
    /// The User-Agent header's value.
    pub user_agent: Option<&'r [u8]>,
    /// The Referer header's value.
    pub referer: Option<&'r str>,
    /// The Host header's value.
    pub own_host: &'r str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn visit<'r>(path: &'r str, peer: u8, referer: Option<&'r str>) -> VisitRequest<'r> {
        VisitRequest {
            status: 200,
            path,
            peer: Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, peer))),
            user_agent: Some(b"curl/8"),
            referer,
            own_host: "sill.example:80",
        }
    }

    #[test]
    fn pages_visitors_and_referrers_of_a_day() {
        let mut visitors = Visitors::default();
        assert!(visitors.wants_salt());
        visitors.offer_salt([7; 16]);
        for peer in 1..=3 {
            visitors.count(1, visit("/", peer, Some("https://news.example/item?id=1")));
            visitors.count(1, visit("/post/", peer, Some("https://sill.example/")));
        }
        visitors.count(1, visit("/style.css", 4, None));
        let mut missing = visit("/gone", 5, None);
        missing.status = 404;
        visitors.count(1, missing);
        assert_eq!(visitors.pages, 6);
        assert_eq!(visitors.unique(), (3, false));
        let top: heapless::Vec<_, TOP_ENTRIES> = visitors.top_pages.entries().collect();
        assert_eq!(top.as_slice(), [("/", 3), ("/post/", 3)]);
        let referrers: heapless::Vec<_, TOP_ENTRIES> = visitors.referrers.entries().collect();
        assert_eq!(referrers.as_slice(), [("news.example", 3)]);
        drop((top, referrers));
        // The next day starts from nothing, and without a fresh salt counts no one unique.
        visitors.count(2, visit("/", 1, None));
        assert_eq!((visitors.pages, visitors.unique()), (1, (0, false)));
        assert!(visitors.wants_salt());
    }

    #[test]
    fn top_lists_stay_bounded() {
        let mut top = Top::default();
        for i in 0..100 {
            let mut name = heapless::String::<80>::new();
            core::fmt::Write::write_fmt(&mut name, format_args!("/page-{}/{:x<60}", i % 9, ""))
                .unwrap();
            top.count(&name);
        }
        assert_eq!(top.entries().count(), TOP_ENTRIES);
        assert!(top.entries().all(|(name, _)| name.len() <= NAME_LEN));
        assert_eq!(
            referrer_host("http://[2001:db8::1]:8080/x"),
            Some("[2001:db8::1]")
        );
        assert_eq!(
            referrer_host("https://u@host.example:443/"),
            Some("host.example")
        );
        assert_eq!(referrer_host("not a url"), None);
    }
}
