//! Bramble's portable HTTP/1.1 engine: requests in, responses out of the in-RAM site image.
//!
//! The network loop owns the sockets; this crate owns the protocol. A [`Server`] holds the
//! site (or the reason there is none), the configuration and the counters; one
//! [`Connection`] per TCP socket buffers received bytes, parses them with `httparse`, and
//! hands out response bytes whose bodies are slices of the site image. Nothing allocates,
//! nothing is computed per request beyond parsing and a binary search, nothing panics.
//!
//! Behaviour follows RFC 9110/9111/9112 as a static origin server: GET and HEAD, OPTIONS,
//! 405 with Allow, conditional requests (ETag/If-None-Match, Last-Modified/If-Modified-Since,
//! If-Match, If-Unmodified-Since), single byte ranges with If-Range, Accept-Encoding
//! negotiation over the packer's br and gzip variants, keep-alive and in-order pipelining,
//! and a clear status for every malformed request.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod connection;
pub mod date;
#[doc(hidden)]
pub mod exercise;
mod fields;
mod path;
mod response;
mod server;

pub use connection::{
    Connection, ConnectionAction, MAX_HEADERS, REQUEST_BUFFER_LEN, RESPONSE_HEAD_LEN,
};
pub use path::MAX_TARGET_LEN;
pub use server::{Counters, Limits, STATUSES, Server, ServerConfig, SiteSource};
