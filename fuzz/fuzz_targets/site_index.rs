//! Fuzz target: arbitrary bytes through the kernel's card path. With the first byte's bit 1
//! clear they are a SITE.BIN on a card in RAM: its index is read and verified, and if valid
//! every body is served through the card store (two cache pages, a card that answers one poll
//! late); with it set they are a whole card whose FAT is searched for SITE.BIN. Inputs whose
//! first byte is odd get their lengths and checksums fixed first, so mutations reach the
//! table checks and the store instead of stopping at the checksum.
#![no_main]

use bramble_http::exercise::reseal_image;
use bramble_store::exercise::{exercise_card, exercise_site_bin};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    if first & 2 != 0 {
        exercise_card(rest);
        return;
    }
    let mut bytes = rest.to_vec();
    if first & 1 == 1 {
        reseal_image(&mut bytes);
    }
    exercise_site_bin(&bytes);
});
