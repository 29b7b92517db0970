//! Bramble HTTP/1.1 engine (to be written).
#![no_std]
#![forbid(unsafe_code)]
