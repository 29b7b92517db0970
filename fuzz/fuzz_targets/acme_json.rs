//! Fuzz target: bytes as a CA's JSON answer. The parser must never panic and must keep to
//! its bounds; whatever parses is read as every kind of ACME object, which must not panic
//! either, and every URL accepted must be an https:// URL the client can follow.
#![no_main]

use bramble_acme::http::parse_https_url;
use bramble_acme::json::{self, MAX_DEPTH, Value};
use bramble_acme::protocol::{Authorization, Directory, Order, Problem};
use libfuzzer_sys::fuzz_target;

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(members) => 1 + members.iter().map(|(_, v)| depth(v)).max().unwrap_or(0),
        _ => 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = json::parse(data) else {
        return;
    };
    assert!(depth(&value) <= MAX_DEPTH);
    if let Ok(directory) = Directory::from_json(&value) {
        assert!(parse_https_url(&directory.new_order).is_some());
    }
    if let Ok(order) = Order::from_json(&value) {
        assert!(
            order
                .authorizations
                .iter()
                .all(|url| parse_https_url(url).is_some())
        );
    }
    if let Ok(authz) = Authorization::from_json(&value) {
        for challenge in &authz.challenges {
            assert!(parse_https_url(&challenge.url).is_some());
            assert!(
                challenge
                    .token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
        }
    }
    let _ = Problem::from_json(&value);
});
