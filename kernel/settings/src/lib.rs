//! BRAMBLE.TXT owner settings: parser and template (to be written).
#![no_std]
#![forbid(unsafe_code)]
