//! Fuzz target: arbitrary bytes as compiled `_redirects` and `_headers` sections of a site
//! index, their strings and a request path (see `bramble_http::exercise::exercise_rules`).
//! The section views must accept or refuse without panicking, and matching never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bramble_http::exercise::exercise_rules(data);
});
