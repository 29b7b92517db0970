//! HPACK header blocks through one decoder: no panic, the table and list bounds hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bramble_h2::exercise::hpack_blocks(data);
});
