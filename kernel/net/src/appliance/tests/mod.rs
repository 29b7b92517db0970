//! Host tests of the appliance over in-memory devices, by part: the poll loop's wake-ups and
//! device changes (`poll`), addresses (`address`), the mDNS socket (`mdns`), HTTP over
//! TCP through the stream pool (`pool`), HTTPS through the TLS pool (`https`), and ACME's
//! lookups of the CA (`acme`). This file holds the fixtures they share.

mod acme;
mod address;
mod clock;
mod ddns;
mod https;
mod ipv6;
mod mdns;
mod poll;
mod pool;
mod router;

use super::*;
use crate::test_support::{MockDevice, WiredDevice, wired_pair};
use bramble_http::{ServerConfig, SiteSource};
use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};
use smoltcp::iface::SocketStorage;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::socket::tcp;
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, DhcpMessageType, DhcpPacket, DhcpRepr, EthernetFrame,
    EthernetProtocol, EthernetRepr, Icmpv4Packet, Icmpv4Repr, IpAddress, IpCidr, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};
use std::boxed::Box;
use std::string::String;
use std::vec::Vec;

const GUEST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const BODY: &[u8] = b"<h1>hello from the appliance</h1>";

fn site() -> &'static [u8] {
    let mut writer = SiteImageWriter::new();
    writer
        .add(FileSpec {
            path: "/index.html".into(),
            content_type: "text/html; charset=utf-8".into(),
            cache_control: "no-cache".into(),
            last_modified: 1_700_000_000,
            last_modified_http: http_date(1_700_000_000),
            identity: VariantSpec {
                body: BODY.to_vec(),
                etag: "\"abc\"".into(),
            },
            gzip: None,
            brotli: None,
        })
        .unwrap();
    writer
        .add(FileSpec {
            path: "/big.bin".into(),
            content_type: "application/octet-stream".into(),
            cache_control: "no-cache".into(),
            last_modified: 1_700_000_000,
            last_modified_http: http_date(1_700_000_000),
            identity: VariantSpec {
                body: big_body(),
                etag: "\"big\"".into(),
            },
            gzip: None,
            brotli: None,
        })
        .unwrap();
    Box::leak(writer.finish().unwrap().into_boxed_slice())
}

/// A body several times the test sockets' 4 KiB transmit buffer.
fn big_body() -> Vec<u8> {
    (0..20_000u32).map(|i| (i % 251) as u8).collect()
}

fn server() -> Server<'static> {
    let image = SiteImage::new_checked(site()).unwrap();
    Server::new(SiteSource::Ready(image), ServerConfig::default())
}

/// Leaked memory for `pool` connections, each with a session and a cell.
fn memory(pool: usize) -> &'static mut ApplianceMemory<'static> {
    memory_for(PoolSizes {
        connections: pool,
        sessions: pool,
        cells: pool,
        sources: 0,
    })
}

/// Leaked memory for a pool of `sizes`, with as many socket slots to spare as there are
/// connections (for an HTTPS pool: see [`ApplianceMemory::reserved_sockets`]).
fn memory_for(sizes: PoolSizes) -> &'static mut ApplianceMemory<'static> {
    let memory = ApplianceMemory::leaked(sizes);
    let sockets = (0..EXTRA_SOCKETS + sizes.connections)
        .map(|_| SocketStorage::EMPTY)
        .collect::<Vec<_>>();
    memory.sockets = Box::leak(sockets.into_boxed_slice());
    memory
}

fn static_config(mdns: bool) -> NetworkConfig<'static> {
    NetworkConfig {
        hostname: "bramble",
        address: AddressConfig::Static {
            address: [10, 0, 0, 2],
            prefix_len: 24,
            gateway: Some([10, 0, 0, 1]),
        },
        ipv6: Ipv6Config::autoconfigured([3; 16]),
        http_port: 80,
        mdns,
        random_seed: 7,
        secret_key: [7, 8],
        limits: bramble_stream::PoolLimits::DEFAULT,
        max_per_source: 0,
    }
}

/// [`static_config`] without IPv6, for tests that need a loop with nothing of its own to do,
/// or an ARP cache no IPv6 address change flushes.
fn static_ipv4_only(mdns: bool) -> NetworkConfig<'static> {
    NetworkConfig {
        ipv6: Ipv6Config::OFF,
        ..static_config(mdns)
    }
}

fn at(millis: u64) -> Instant {
    Instant::from_micros(millis * 1000)
}

/// DHCP options as (kind, data) pairs.
type Options = Vec<(u8, Vec<u8>)>;

/// The DHCP message type and options of a frame, if it is a DHCP client message.
fn dhcp_options(frame: &[u8]) -> Option<(DhcpMessageType, Options)> {
    let ethernet = EthernetFrame::new_checked(frame).ok()?;
    if ethernet.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(ethernet.payload()).ok()?;
    if ip.next_header() != IpProtocol::Udp {
        return None;
    }
    let udp = UdpPacket::new_checked(ip.payload()).ok()?;
    if udp.dst_port() != 67 {
        return None;
    }
    let dhcp = DhcpPacket::new_checked(udp.payload()).ok()?;
    let options: Vec<(u8, Vec<u8>)> = dhcp.options().map(|o| (o.kind, o.data.to_vec())).collect();
    let kind = options.iter().find(|(k, _)| *k == 53)?.1[0];
    Some((DhcpMessageType::from(kind), options))
}

fn discovers(device: &MockDevice) -> usize {
    device
        .tx
        .iter()
        .filter(|f| matches!(dhcp_options(f), Some((DhcpMessageType::Discover, _))))
        .count()
}
