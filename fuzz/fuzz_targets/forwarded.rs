//! Fuzz target: the client's address behind a trusted proxy (`proxy_from`), from untrusted
//! `Forwarded` and `X-Forwarded-For` values. It may not panic, a peer outside the proxies is
//! always its own client, and the address given is the peer or one written in the headers.
#![no_main]

use bramble_http::forwarded::client_address;
use bramble_http::status::Prefix;
use core::net::{IpAddr, Ipv4Addr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let proxies = [Prefix {
        address: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0)),
        len: 8,
    }];
    let peer = if selector & 1 == 0 {
        IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))
    } else {
        IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7))
    };
    // Fields split at newlines; the selector's second bit says which header they are.
    let fields = rest.split(|&b| b == b'\n');
    let none = core::iter::empty::<&[u8]>();
    let client = if selector & 2 == 0 {
        client_address(Some(peer), &proxies, fields, none)
    } else {
        client_address(Some(peer), &proxies, none, fields)
    };
    let client = client.expect("a peer always gives a client");
    if selector & 1 == 1 {
        assert_eq!(client, peer, "headers from an untrusted peer were believed");
    }
    if client != peer {
        let text = String::from_utf8_lossy(rest).to_ascii_lowercase();
        let written = match client {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => v6.to_string(),
        };
        // Written in the headers, perhaps in another spelling of IPv6: at least its family.
        assert!(
            text.contains(&written) || (client.is_ipv6() && text.contains(':')),
            "{client} is in no header: {text:?}"
        );
    }
});
