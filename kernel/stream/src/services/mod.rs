//! The services the pool carries, each an implementation of [`crate::Service`]: what a
//! connection's bytes mean, kept apart from the engine that moves them.
//!
//! - [`http`]: plain HTTP/1.1 over `bramble-http` (port 80 on the Pi).
//! - [`tls`]: HTTPS, the TLS session of `bramble-tls` carrying HTTP/1.1 or HTTP/2 (port 443
//!   on the Pi, and `bramble serve --tls-cert` on a host).

pub mod http;
pub mod tls;
