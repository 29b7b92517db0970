//! Bramble's network layer: the smoltcp device adapter, the appliance loop (DHCP with a
//! link-local fallback, or static IPv4; IPv6 by SLAAC or static; ARP, neighbour discovery,
//! ICMP and ICMPv6 echo), handing the frames of the service ports to the stream pools of
//! `bramble-stream` (Bramble's own TCP, HTTP and HTTPS over both families), IPv6 address configuration ([`slaac`], over the checked views
//! of [`ndp`]) and the mDNS responder.
//!
//! This is the only crate that names smoltcp. It is portable `no_std` code: the Pi kernel
//! runs it over its USB Ethernet drivers, `bramble-hosted` runs it over a Linux TAP device,
//! and the tests run it over in-memory devices.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod appliance;
pub mod dns_update;
pub mod dyndns;
pub mod ipv6_ext;
pub mod mdns;
pub mod ndp;
pub mod phy;
pub mod portmap;
pub mod slaac;
pub mod sntp;
pub mod syslog;

#[cfg(test)]
mod test_support;

pub use appliance::{
    AddressConfig, AddressList, Appliance, ApplianceCounters, ApplianceMemory, Ipv6Config,
    NetError, NetworkConfig, PoolSizes,
};
pub use phy::{EthernetPhy, PhyCounters};
/// Socket slots for [`appliance::ApplianceMemory`], re-exported so callers need not name smoltcp.
pub use smoltcp::iface::SocketStorage;
