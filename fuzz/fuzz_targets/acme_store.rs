//! Fuzz target: bytes as the card's certificate store region. Loading must never panic; a
//! record it finds saves and loads back the same, into the slot that did not hold it.
#![no_main]

use bramble_acme::store::{BLOCK_LEN, CertificateStore, MemoryBlocks};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A region of 8 blocks (two slots of 2 KiB), filled from the input.
    let mut region = MemoryBlocks::new(8);
    let len = data.len().min(8 * BLOCK_LEN);
    region.bytes[..len].copy_from_slice(&data[..len]);
    let mut store = CertificateStore::new(region).unwrap();
    let loaded = store.load();
    if let Some(record) = loaded.record {
        if store.save(&record).is_ok() {
            let again = store.load();
            assert_eq!(again.record.as_ref(), Some(&record));
        }
    }
});
