//! Bramble USB host stack (to be written).
#![no_std]
#![forbid(unsafe_code)]
