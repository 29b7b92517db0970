//! Drivers for fuzzing: arbitrary bytes as a SITE.BIN on a card in RAM, or as a whole card
//! with a FAT partition, run through the kernel's path (index, store, every body) with the
//! invariants checked.
//!
//! Shared by the cargo-fuzz target (`kernel/http/fuzz/fuzz_targets/site_index.rs`) and the
//! pseudo-random `#[test]` that runs without cargo-fuzz.

use bramble_hal::Instant;
use bramble_site::{BodyRequest, BodySource, BodyStatus};

use crate::cache::Page;
use crate::fat::{self, FileExtents};
use crate::{CardStore, MemoryCard, read_index};

/// Most bodies served per input (keeps one input's run short).
const MAX_BODIES: usize = 64;
/// Segments of memory the store under test gets.
const PAGES: usize = 2;

/// `bytes` as a SITE.BIN stored from block 0 of a card: reads its index and, if valid,
/// serves every body (up to [`MAX_BODIES`]) through a two-page store. Panics if an invariant
/// breaks (a read longer than asked, one that never ends). Returns whether the index was
/// accepted.
pub fn exercise_site_bin(bytes: &[u8]) -> bool {
    let Ok(len) = u32::try_from(bytes.len()) else {
        return false;
    };
    let extents = FileExtents::contiguous(0, len);
    let mut device = MemoryCard::new(bytes).with_delay(1);
    let needed = match crate::index_memory_len(&mut device, &extents) {
        Ok(needed) if needed <= 1 << 20 => needed,
        _ => return false,
    };
    let mut memory = std::vec![0u8; needed];
    let Ok((index, _)) = read_index(&mut device, &extents, &mut memory) else {
        return false;
    };
    let segment_len = index.segment_len() as usize;
    let mut table = std::vec![0u32; CardStore::<MemoryCard>::table_len(&index)];
    let mut page_memory = std::vec![0u8; PAGES * segment_len];
    let mut pages: std::vec::Vec<Page> = page_memory
        .chunks_exact_mut(segment_len)
        .map(Page::new)
        .collect();
    let store = CardStore::new(device, index, extents, &mut table);
    store.attach_pages(&mut pages);
    let mut now = 1u64;
    let mut out = [0u8; 3000];
    for file in index.files().take(MAX_BODIES) {
        let _ = index.resolve(file.path);
        for variant in [Some(file.identity), file.gzip, file.brotli]
            .into_iter()
            .flatten()
        {
            let body = variant.body;
            let mut offset = 0u32;
            let mut lookup = true;
            let mut rounds = 0u32;
            while offset < body.len {
                rounds += 1;
                assert!(rounds < 100_000, "a body that never ends");
                let request = BodyRequest {
                    body,
                    offset,
                    lookup,
                };
                lookup = false;
                match store.read(request, &mut out) {
                    BodyStatus::Ready(n) => {
                        assert!(n > 0 && n <= out.len());
                        offset = offset.checked_add(n as u32).expect("offset overflow");
                        assert!(offset <= body.len, "read past the body");
                        lookup = true;
                    }
                    BodyStatus::Pending => {
                        now += 1000;
                        store.poll(Instant::from_micros(now));
                        let _ = store.next_deadline();
                    }
                    BodyStatus::Failed => break,
                }
            }
        }
    }
    let counters = store.counters();
    assert!(counters.pages_used <= counters.pages);
    true
}

/// `bytes` as a whole card: looks for SITE.BIN through the FAT and, if found, plans a read of
/// every block of it. Returns whether it was found.
pub fn exercise_card(bytes: &[u8]) -> bool {
    let mut device = MemoryCard::new(bytes);
    let Ok(extents) = fat::locate(&mut device, "SITE.BIN") else {
        return false;
    };
    let mut at = 0u32;
    while at < extents.len() {
        let len = (extents.len() - at).min(64 * 1024);
        let _ = extents.plan(at, len);
        at += len;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_and_empty_inputs_are_refused_quietly() {
        assert!(!exercise_site_bin(&[]));
        assert!(!exercise_site_bin(&[0; 4096]));
        assert!(!exercise_card(&[]));
        assert!(!exercise_card(&[0; 4096]));
    }
}
