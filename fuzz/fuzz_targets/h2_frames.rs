//! HTTP/2 frames after the preface, in pieces: the connection never panics and keeps its
//! bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bramble_h2::exercise::frames(data);
});
