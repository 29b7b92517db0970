//! Fuzz target: arbitrary bytes as a site image. `SiteImage::new_checked` must reject or
//! accept without panicking; accepted images are read in full and served. Inputs whose first
//! byte is odd get their length and checksum fields fixed first, so mutations reach the
//! table and string checks instead of stopping at the checksum.
#![no_main]

use bramble_http::exercise::{exercise_image, reseal_image};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if first & 1 == 1 {
        reseal_image(&mut bytes);
    }
    exercise_image(&bytes);
});
