//! Fuzz target: the status page's access check with an untrusted Authorization value and
//! source address, and the visitor counts with the same bytes as path, Referer, Host and
//! User-Agent. Neither may panic; only the configured token (or an allowed source) opens the
//! page, and the top lists stay bounded.
#![no_main]

use bramble_http::status::{Prefix, StatusAccess};
use bramble_http::visitors::{TOP_ENTRIES, VisitRequest, Visitors};
use core::net::{IpAddr, Ipv6Addr};
use libfuzzer_sys::fuzz_target;

const TOKEN: &str = "owner-token-0123456789";

fuzz_target!(|data: &[u8]| {
    let Some((address, authorization)) = data.split_first_chunk::<16>() else {
        return;
    };
    let peer = IpAddr::V6(Ipv6Addr::from(*address));
    let mut access = StatusAccess::default();
    access.token = Some(heapless::String::try_from(TOKEN).unwrap());
    let _ = access.from.push(Prefix {
        address: "2001:db8::".parse().unwrap(),
        len: authorization.first().copied().unwrap_or(0) % 129,
    });
    let allowed = access.allows(Some(peer), Some(authorization));
    let by_source = access.from.iter().any(|prefix| prefix.contains(peer));
    if allowed && !by_source {
        let text = core::str::from_utf8(authorization).unwrap_or("");
        assert!(text.contains(TOKEN), "opened without the token: {text:?}");
    }
    let text = String::from_utf8_lossy(authorization);
    let mut visitors = Visitors::default();
    visitors.offer_salt(*address);
    for (i, part) in text.split('\n').enumerate() {
        visitors.count(
            (i / 4) as u64,
            VisitRequest {
                status: 200,
                path: part,
                peer: Some(peer),
                user_agent: Some(part.as_bytes()),
                referer: Some(part),
                own_host: &text,
            },
        );
    }
    assert!(visitors.top_pages.entries().count() <= TOP_ENTRIES);
    assert!(visitors.referrers.entries().count() <= TOP_ENTRIES);
});
