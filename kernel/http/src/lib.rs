//! Bramble's portable HTTP/1.1 engine: requests in, responses out of the site image.
//!
//! The network loop owns the sockets; this crate owns the protocol. A [`Server`] holds the
//! site (or the reason there is none), the configuration and the counters; one
//! [`Connection`] per TCP socket buffers received bytes, parses them with `httparse`, and
//! hands out response bytes whose bodies come from the site's [`bramble_site::BodySource`]:
//! the image in RAM ([`SiteSource::Ready`]), or a store that reads bodies from the SD card on
//! demand and may answer "not yet" ([`SiteSource::Store`]), in which case the response waits
//! without blocking anything else. Nothing allocates, nothing is computed per request beyond
//! parsing and a binary search, nothing panics.
//!
//! Behaviour follows RFC 9110/9111/9112 as a static origin server: GET and HEAD, OPTIONS,
//! 405 with Allow, conditional requests (ETag/If-None-Match, Last-Modified/If-Modified-Since,
//! If-Match, If-Unmodified-Since), single byte ranges with If-Range, Accept-Encoding
//! negotiation over the packer's br and gzip variants, keep-alive and in-order pipelining,
//! and a clear status for every malformed request.
//!
//! # Driving a connection
//!
//! The network loop owns one [`Connection`] per TCP socket (about 10.5 KiB each: the
//! request buffer [`REQUEST_BUFFER_LEN`], the response-head buffer [`RESPONSE_HEAD_LEN`] and
//! a little state) and calls, for each socket on each poll:
//! [`Connection::open`] when it is accepted; [`Connection::receive`] with the bytes in its
//! receive buffer (dequeue only what was consumed); [`Connection::transmit`] with the free
//! space of its transmit buffer; [`Connection::action`] to learn whether to keep the socket,
//! close it or abort it; and [`Connection::close`] once it is gone.
//! [`Connection::next_deadline`] says when to wake up if nothing else happens.
//!
//! ```
//! use bramble_hal::Instant;
//! use bramble_http::{Connection, ConnectionAction, Server, ServerConfig, SiteSource};
//! use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};
//!
//! let mut writer = SiteImageWriter::new();
//! writer.add(FileSpec {
//!     path: "/index.html".into(),
//!     content_type: "text/html; charset=utf-8".into(),
//!     cache_control: "no-cache".into(),
//!     last_modified: 0,
//!     last_modified_http: http_date(0),
//!     identity: VariantSpec { body: b"<p>hi</p>".to_vec(), etag: "\"1\"".into() },
//!     gzip: None,
//!     brotli: None,
//! }).unwrap();
//! let bytes = writer.finish().unwrap();
//! let image = SiteImage::new_checked(&bytes).unwrap();
//! let mut server = Server::new(SiteSource::Ready(image), ServerConfig::default());
//!
//! let mut connection = Connection::new();
//! let now = Instant::from_micros(0);
//! connection.open(&mut server, now);
//! let request = b"GET / HTTP/1.1\r\nHost: pi\r\n\r\n";
//! assert_eq!(connection.receive(&mut server, request, now), request.len());
//! let mut tx = [0u8; 1024];
//! let n = connection.transmit(&mut server, &mut tx, now);
//! assert!(tx[..n].starts_with(b"HTTP/1.1 200 OK\r\n"));
//! assert!(tx[..n].ends_with(b"\r\n\r\n<p>hi</p>"));
//! assert_eq!(connection.action(now), ConnectionAction::KeepOpen);
//! connection.close(&mut server);
//! assert_eq!(server.counters().requests, 1);
//! ```
#![no_std]
#![forbid(unsafe_code)]

mod chunked;
mod connection;
pub mod counters;
pub mod date;
#[doc(hidden)]
pub mod exercise;
mod fields;
pub mod forwarded;
mod path;
mod request;
mod respond;
mod response;
mod routing;
mod search;
mod server;
pub mod status;
pub mod upload;
pub mod visitors;

pub use connection::{Activity, Connection, ConnectionAction, MAX_HEADERS, REQUEST_BUFFER_LEN};
pub use counters::{Counters, STATUSES};
pub use path::MAX_TARGET_LEN;
pub use respond::RESPONSE_HEAD_LEN;
pub use server::{
    ADDRESSES_LEN, Limits, MAX_ACME_ANSWERS, MAX_ACME_KEY_AUTHORIZATION_LEN, MAX_ACME_TOKEN_LEN,
    NOTICE_LEN, RedirectHost, Server, ServerConfig, SiteSource,
};
