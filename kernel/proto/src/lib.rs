//! Bramble's protocol codecs: what goes in and comes out of a packet, without sockets.
//!
//! Each module reads untrusted bytes through checked views and builds its messages into a
//! caller's buffer; none names smoltcp or does I/O, so the appliance loop (`bramble-net`),
//! its outbound jobs and the fuzz targets all use them as they are, and each can be tested
//! on its own. The appliance owns the sockets and the timing; a module here owns the bytes
//! and, where a protocol has one, its state machine (SLAAC, SNTP, the port-mapping client).
//!
//! - Link and addresses: [`ndp`] (neighbour and router discovery views), [`slaac`] (IPv6
//!   addresses from router adverts, RFC 4862 and 7217), [`ipv6_ext`] (IPv6 extension
//!   headers stripped before smoltcp and the stream pool see a frame), [`address_kind`]
//!   (what an IPv4 address says about reachability).
//! - Names and time: [`mdns`] (the responder), [`sntp`] (the clock's client),
//!   [`dns_update`] (RFC 2136 UPDATE with TSIG), [`dyndns`] (the dyndns2 answer).
//! - The router: [`portmap`] (NAT-PMP, PCP, UPnP IGD and the client that tries them).
//! - Logs: [`syslog`] (the console's ring and RFC 5424 lines).
//! - [`siphash`]: SipHash-2-4, the one keyed hash of the SYN cookies and SLAAC.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "testing"))]
extern crate std;

pub mod address_kind;
pub mod dns_update;
pub mod dyndns;
pub mod ipv6_ext;
pub mod mdns;
pub mod ndp;
pub mod portmap;
pub mod siphash;
pub mod slaac;
pub mod sntp;
pub mod syslog;
