//! Fuzz target: a body as a dyndns2 provider's answer (alone, and with a status as the
//! appliance reads it), and as an address echo service's. The readers must never panic; an
//! echoed address must be a public one.
#![no_main]

use bramble_proto::dyndns::{Answer, answer_of, parse_answer, parse_echo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let answer = parse_answer(data);
    let _ = answer.verdict();
    if answer == Answer::Good {
        assert!(data.iter().any(|b| !b.is_ascii_whitespace()));
    }
    // The first byte picks a status from 200 to 455 (401 and 403 among them).
    let status = 200 + u16::from(data.first().copied().unwrap_or(0));
    let with_status = answer_of(status, data);
    match answer {
        Answer::Unknown if matches!(status, 401 | 403) => {
            assert_eq!(with_status, Answer::BadAuth)
        }
        known => assert_eq!(with_status, known),
    }
    if let Some(address) = parse_echo(data) {
        let address = core::net::Ipv4Addr::from(address);
        assert!(!address.is_private() && !address.is_loopback());
    }
});
