//! Fuzz target: arbitrary bytes as the text of a site's `_redirects` and `_headers` (what
//! `bramble pack` reads from the site folder). The parsers must return rules or an error
//! naming a line and column inside the text, never panic; what they accept, the image writer
//! and reader accept too.
#![no_main]

use std::path::Path;

use bramble_site::rules_text::{parse_headers, parse_redirects};
use bramble_site::{SiteImage, SiteImageWriter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = text.lines().count().max(1);
    let mut writer = SiteImageWriter::new();
    match parse_redirects(text, Path::new("_redirects")) {
        Ok(rules) => writer.set_redirects(rules).expect("accepted rules are written"),
        Err(error) => assert!(error.line >= 1 && error.line <= lines && error.column >= 1),
    }
    match parse_headers(text, Path::new("_headers")) {
        Ok(blocks) => writer
            .set_header_blocks(blocks)
            .expect("accepted blocks are written"),
        Err(error) => assert!(error.line >= 1 && error.line <= lines && error.column >= 1),
    }
    let image = writer.finish().expect("an image with rules");
    SiteImage::new_checked(&image).expect("what the writer writes, the reader reads");
});
