//! Drivers for fuzzing, shared by the cargo-fuzz targets (`fuzz/fuzz_targets/h2_frames.rs`,
//! `hpack_block.rs`) and the pseudo-random tests that run without cargo-fuzz.

use crate::conn::H2;
use crate::frame::PREFACE;
use crate::hpack::{Decoder, Sink};
use bramble_hal::Instant;

struct Count(usize);

impl Sink for Count {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.0 += name.len() + value.len();
    }
}

/// Feeds `data` (after a valid preface) to a connection in pieces whose sizes come from the
/// data itself, draining control frames and requests between pieces, and parking the
/// connection and carrying it on whenever it is at rest; checks the bounds.
pub fn frames(data: &[u8]) {
    let mut h2 = alloc::boxed::Box::new(H2::new());
    let now = Instant::from_micros(0);
    assert_eq!(h2.receive(PREFACE, now), PREFACE.len());
    let mut out = [0u8; 256];
    let mut at = 0usize;
    while at < data.len() {
        let piece = usize::from(data[at] % 64) + 1;
        let end = (at + piece).min(data.len());
        assert_eq!(h2.receive(&data[at..end], now), end - at);
        at = end;
        while h2.write_control(&mut out) > 0 {}
        while let Some(request) = h2.peek_request() {
            assert!(request.head.len() <= crate::conn::QUEUE_LEN);
            let stream = request.stream;
            h2.pop_request();
            let _ = h2.send_allowance(stream);
        }
        assert!(h2.open_streams() <= crate::conn::MAX_STREAMS);
        // At rest, the connection is parked and carried on from its compact state, as an
        // idle one is between requests: it must read back whole and go on alike.
        if h2.can_park() {
            let mut parked = alloc::vec::Vec::with_capacity(h2.parked_len());
            h2.park_into(&mut parked);
            assert_eq!(parked.len(), h2.parked_len());
            let mut carried = alloc::boxed::Box::new(H2::new());
            assert!(carried.unpark(&parked).is_some());
            assert_eq!(carried.parked_len(), parked.len());
            assert!(carried.can_park() && !carried.wants_transmit());
            h2 = carried;
        }
    }
}

/// Decodes `data` as a run of header blocks (each prefixed by a length byte) through one
/// decoder, parking and restoring its table after each; checks the table's bound.
pub fn hpack_blocks(data: &[u8]) {
    let mut decoder = Decoder::new();
    let mut at = 0usize;
    while at < data.len() {
        let len = usize::from(data[at]);
        let start = at + 1;
        let end = (start + len).min(data.len());
        let mut count = Count(0);
        let limit = 4096;
        if let Ok(decoded) = decoder.decode(&data[start..end], limit, &mut count) {
            assert!(count.0 <= limit);
            assert!(!decoded.complete || decoded.list_size <= limit);
        }
        assert!(decoder.table().size() <= crate::hpack::TABLE_CAPACITY);
        // The table parked and restored (an idle connection's) holds the same.
        let mut parked = alloc::vec::Vec::with_capacity(decoder.table().parked_len());
        decoder.table().park_into(&mut parked);
        let mut restored = Decoder::new();
        assert_eq!(restored.table_mut().restore(&parked), Some(parked.len()));
        assert_eq!(restored.table().size(), decoder.table().size());
        assert_eq!(restored.table().len(), decoder.table().len());
        decoder = restored;
        at = end;
    }
}
