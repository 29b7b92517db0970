//! Fuzz target: a body as a dyndns2 provider's answer, and as an address echo service's. The
//! readers must never panic; an echoed address must be a public one.
#![no_main]

use bramble_proto::dyndns::{Answer, parse_answer, parse_echo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let answer = parse_answer(data);
    let _ = answer.verdict();
    if answer == Answer::Good {
        assert!(data.iter().any(|b| !b.is_ascii_whitespace()));
    }
    if let Some(address) = parse_echo(data) {
        let address = core::net::Ipv4Addr::from(address);
        assert!(!address.is_private() && !address.is_loopback());
    }
});
