//! Bramble's network layer: the smoltcp device adapter and the appliance loop.
//!
//! The loop ([`appliance`]) runs smoltcp over an Ethernet device ([`phy`]): DHCP with a
//! link-local fallback, or static IPv4; IPv6 by SLAAC or static; ARP, neighbour discovery,
//! ICMP and ICMPv6 echo; the mDNS responder. It hands the frames of the service ports to the
//! stream pools of `bramble-stream` (Bramble's own TCP, serving HTTP and HTTPS over both
//! families), and drives the codecs of `bramble-proto` (mDNS, NDP, SLAAC, SNTP, port mapping,
//! DNS UPDATE, syslog) over its sockets.
//!
//! This is where smoltcp is named (and `bramble-jobs`, the loop's outbound clients, which
//! take its sockets). It is portable `no_std` code: the Pi kernel runs it over its USB
//! Ethernet drivers, `bramble-hosted` runs it over a Linux TAP device, and the tests run it
//! over in-memory devices.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod appliance;
pub mod phy;

#[cfg(test)]
mod test_support;

pub use appliance::{
    AddressConfig, AddressList, Appliance, ApplianceCounters, ApplianceMemory, Ipv6Config,
    NetError, NetworkConfig, PoolSizes,
};
pub use phy::{EthernetPhy, PhyCounters};
/// Socket slots for [`appliance::ApplianceMemory`], re-exported so callers need not name smoltcp.
pub use smoltcp::iface::SocketStorage;
