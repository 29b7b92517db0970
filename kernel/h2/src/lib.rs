//! Bramble's HTTP/2 (RFC 9113) over TLS: a frame codec, HPACK (RFC 7541) and a sans-IO
//! connection that serves requests through the same engine as HTTP/1.1.
//!
//! - [`frame`]: frame headers and payload readers over checked views, and writers.
//! - [`hpack`]: the decoder (bounded dynamic table, Huffman) and a stateless encoder.
//! - [`conn`]: the connection state machine: preface, SETTINGS, PING, GOAWAY, RST_STREAM,
//!   WINDOW_UPDATE and flow control, HEADERS and CONTINUATION, stream states; requests come
//!   out as HTTP/1.1 heads, one at a time.
//! - [`serve`]: drives [`bramble_http::Connection`] with those heads, so that routing, the
//!   site's rules, conditional requests, ranges, precompressed variants, redirects and error
//!   pages are the HTTP/1.1 engine's own, and turns its responses into HEADERS and DATA.
//!
//! - [`negotiated`]: what a TLS slot holds: HTTP/1.1 or HTTP/2 as ALPN chose.
//!
//! No push (SETTINGS_ENABLE_PUSH is 0 and the server never sends PUSH_PROMISE), priority
//! ignored (RFC 9113 §5.3.2). Every buffer is a fixed array; the whole state of one
//! connection is a [`serve::H2Session`], which [`Negotiated`] allocates (fallibly) when ALPN
//! picks `h2`.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod conn;
#[doc(hidden)]
pub mod exercise;
pub mod frame;
pub mod hpack;
pub mod negotiated;
pub mod serve;

pub use conn::H2;
pub use negotiated::{
    HEAP_BYTES_PER_CONNECTION, MAX_PARKED_LEN, Negotiated, PARKED_BYTES_PER_CONNECTION, Parked,
    Protocol,
};
pub use serve::H2Session;

/// The ALPN protocol identifier of HTTP/2 over TLS.
pub const ALPN_H2: &[u8] = b"h2";
