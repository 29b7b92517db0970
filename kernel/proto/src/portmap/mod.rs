//! Port mapping on the home router: the wire formats of PCP (RFC 6887, [`pcp`]) and NAT-PMP
//! (RFC 6886, [`natpmp`]) as checked views, and [`PortMapper`], a client that keeps TCP
//! ports forwarded with whichever of the two the gateway speaks. It owns no socket: the
//! appliance (`appliance::router`) hands it the datagrams from the gateway and sends what
//! it returns, so that the host tests drive it with bytes and instants.
//!
//! How it goes (see [`PortMapper`]): PCP first, since a PCP server also tells a NAT-PMP-only
//! client apart and a NAT-PMP-only gateway answers PCP with "unsupported version" (RFC 6887
//! §9), in which case NAT-PMP follows at once; silence to PCP is followed by NAT-PMP too.
//! Each port is asked for in turn, each request retried 4 times (250 ms, doubling: the
//! gateway is on the link, so RFC 6887's 3 s first wait would only slow the first boot),
//! and the mappings are renewed at half the shortest lifetime granted. A reply whose epoch
//! went back (RFC 6887 §8.5, RFC 6886 §3.6), a PCP ANNOUNCE or a NAT-PMP address
//! announcement (multicast to 224.0.0.1:5350 by a restarted gateway) has every port mapped
//! again at once: a restarted router forgets its mappings.
//!
//! [`Pinholes`] does the same for IPv6 with PCP alone: pinholes in the router's IPv6
//! firewall for the board's global address (RFC 6887 §11), nothing translated.

mod client;
pub mod natpmp;
pub mod pcp;
mod pinhole;
#[cfg(test)]
mod tests;
pub mod upnp;

pub use client::{
    Datagram, MAX_PORTS, MapperCounters, MapperReport, Mapping, PortMapper, PortRequest, Protocol,
    Trouble, UpnpAction,
};
pub use pinhole::{Pinhole, PinholeReport, PinholeTrouble, Pinholes};

/// Why bytes from the gateway were not taken as a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its fields.
    Truncated,
    /// Another protocol version.
    Version,
    /// A request, not a reply.
    NotAReply,
    /// An opcode the client never sends.
    Opcode,
    /// A PCP length that is not a multiple of 4, or over 1,100 bytes.
    Length,
}
