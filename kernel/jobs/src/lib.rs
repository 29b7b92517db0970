//! The appliance's outbound jobs: the clients that run over the smoltcp sockets of
//! `bramble-net`'s appliance loop, each one request or datagram at a time, none waiting.
//!
//! - [`acme`]: obtains and renews the HTTPS certificate (RFC 8555), answering HTTP-01,
//!   TLS-ALPN-01 or DNS-01;
//! - [`ddns`]: keeps a name's A and AAAA records on the home's addresses with DNS UPDATE
//!   (RFC 2136, TSIG), and publishes ACME's DNS-01 TXT records;
//! - [`reach`]: the public address from an echo service, dyndns2 updates, and an outside
//!   checker's verdict;
//! - [`https_client`]: the one HTTPS request they (and the loop's heartbeat) share, and the
//!   memory each client's sockets take ([`https_client::ClientMemory`]);
//! - [`public`]: the home's public IPv4 address, the value the router's port mapping and the
//!   echo write and dynamic DNS reads.
//!
//! How a job reaches the appliance: through [`Host`], which the appliance implements. Each
//! job is a state value the appliance owns (`Option<AcmeAgent>` and so on) and moves on from
//! its loop: it takes the job out, calls its `poll` with itself as the host, and puts it
//! back. The host lends the interface, the socket set and what the jobs read of the
//! addresses as one [`Net`] of split borrows, the site's server, the dynamic DNS job (ACME's
//! DNS-01 answers go through it), and one action of its own, serving a certificate over
//! HTTPS ([`Host::serve_https`]). A trait rather than a plain struct because of that action:
//! starting HTTPS takes the stream pools, the device and the rest of the loop, which only the
//! appliance has. This crate names no device and no appliance, and `bramble-net` depends on
//! it, never the reverse.
//!
//! Why a crate of its own: the jobs are most of what the appliance does besides serving
//! (over half of `bramble-net`'s code before they moved), they change for reasons of their
//! own (a CA, a provider, an RFC), and each is tested through the appliance's host tests
//! (`kernel/net/src/appliance/tests/`) and the QEMU tests against pebble and the test name
//! servers. Portable `no_std` code, with no unsafe code.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod acme;
pub mod ddns;
mod host;
pub mod https_client;
mod net;
pub mod public;
pub mod reach;

pub use host::Host;
pub use net::{MAX_NAME_SERVERS, Net, name_servers};
