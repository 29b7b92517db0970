//! Fuzz target: arbitrary bytes as BRAMBLE.TXT. The lenient parser (what the kernel runs)
//! must never panic and must agree with the strict one (what the host tool runs) whenever
//! the strict one accepts; every reported problem must print.
#![no_main]

use std::fmt::Write;

use bramble_settings::Settings;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut problems = 0usize;
    let mut text = String::new();
    let lenient = Settings::parse_bytes(data, |error| {
        problems += 1;
        text.clear();
        let _ = write!(text, "{error}");
        assert!(!text.is_empty());
    });
    if let Ok(utf8) = std::str::from_utf8(data)
        && let Ok(strict) = Settings::parse(utf8)
    {
        assert_eq!(problems, 0, "strict accepted what lenient reported");
        assert_eq!(strict, lenient);
    }
});
