//! Fuzz target: arbitrary bytes as the IPv6 payload of a received Ethernet frame whose
//! fixed header says the first byte is the first next-header value
//! ([`bramble_proto::ipv6_ext::strip`]). Nothing may panic; a frame with headers removed is no
//! longer than it was, says its own length, starts its payload with no extension header
//! left to remove, and parses (or is rejected) as a segment for the stream pool.
#![no_main]

use bramble_proto::ipv6_ext::{Stripped, strip};
use bramble_stream::wire;
use libfuzzer_sys::fuzz_target;

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const OURS: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

fuzz_target!(|data: &[u8]| {
    let Some((&first, payload)) = data.split_first() else {
        return;
    };
    // Ethernet to us, IPv6 from fd00::1 to fd00::2 with the payload length of the data
    // (or, when the first byte's low bit is set, 8 bytes more than there are).
    let mut frame = Vec::with_capacity(54 + payload.len());
    frame.extend_from_slice(&MAC);
    frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x86, 0xdd, 0x60, 0, 0, 0]);
    let claimed = payload.len().min(1500) + usize::from(first & 1) * 8;
    frame.extend_from_slice(&(claimed as u16).to_be_bytes());
    frame.extend_from_slice(&[first >> 1, 64]);
    let mut source = OURS;
    source[15] = 1;
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&OURS);
    frame.extend_from_slice(&payload[..payload.len().min(1500)]);
    let before = frame.len();
    match strip(&mut frame) {
        Stripped::Removed(len) => {
            assert!(len <= before);
            frame.truncate(len);
            let payload_len = usize::from(u16::from_be_bytes([frame[18], frame[19]]));
            assert_eq!(54 + payload_len, len);
            assert_eq!(strip(&mut frame), Stripped::Unchanged, "one pass removes all");
            let _ = wire::parse(&frame, MAC, &[OURS]);
        }
        Stripped::Unchanged => {
            assert_eq!(frame.len(), before);
        }
        Stripped::Drop(_) => {}
    }
});
