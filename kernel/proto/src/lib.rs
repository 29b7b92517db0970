//! Bramble's protocol codecs: what goes in and comes out of a packet, without sockets.
//!
//! Each module reads untrusted bytes through checked views and builds its messages into a
//! caller's buffer; none of them names smoltcp or does I/O, so the stream engine, the
//! appliance loop and the fuzz targets all use them as they are.
#![no_std]
#![forbid(unsafe_code)]

pub mod siphash;
