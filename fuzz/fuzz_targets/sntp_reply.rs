//! Fuzz target: a datagram as the answer to an SNTP request. The parser and the client must
//! never panic; a reply that sets the clock must have echoed the request's nonce.
#![no_main]

use bramble_hal::Instant;
use bramble_proto::sntp::{SntpAction, SntpClient, parse_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut client = SntpClient::new(0x5eed, Instant::from_micros(0));
    let SntpAction::Send { nonce, .. } = client.poll(1, Instant::from_micros(0)) else {
        return;
    };
    let parsed = parse_reply(data, nonce);
    let set = client.receive(0, data, Instant::from_micros(1_000));
    if set.is_some() {
        assert!(parsed.is_ok());
        assert_eq!(data[24..32], nonce.to_be_bytes());
    }
    // The nonce of a finished exchange opens nothing later.
    let _ = client.receive(0, data, Instant::from_micros(2_000));
});
