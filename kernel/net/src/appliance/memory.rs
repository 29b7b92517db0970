//! The memory the caller lends the appliance: the connection pool's parts (control blocks,
//! hash table, HTTP sessions, parking cells), the smoltcp socket slots (DHCP, mDNS, IPv6
//! neighbour discovery, the clock's) and their small fixed buffers, and the HTTPS pool's
//! memory.

use bramble_http::Connection;
use bramble_stream::services::tls::{Carried, TLS_CELL_LEN, TlsSlot};
use bramble_stream::{Cell, Lease, PoolMemory, Source, Tcb};
use smoltcp::iface::SocketStorage;
use smoltcp::socket::{raw, udp};
use smoltcp::wire::DhcpOption;

/// smoltcp sockets the appliance always needs: DHCP, mDNS, and the raw ICMPv6 socket of
/// IPv6 address configuration (HTTP and HTTPS go to the stream pools).
pub const EXTRA_SOCKETS: usize = 3;
/// DHCP option 12: host name (RFC 2132 §3.14).
const DHCP_OPTION_HOSTNAME: u8 = 12;
/// Bytes kept of the last DHCP packet, to read the lease time from it.
pub const DHCP_PACKET_BUFFER_LEN: usize = 1024;
/// Datagrams queued each way on the mDNS socket.
pub const MDNS_PACKETS: usize = 4;
/// Payload bytes queued each way on the mDNS socket.
pub const MDNS_BUFFER_LEN: usize = 1024;
/// ICMPv6 packets queued for IPv6 address configuration, each way.
pub const ND_PACKETS: usize = 4;
/// Bytes queued for received ICMPv6 packets (Router Advertisements are rarely over 200 bytes;
/// a full-size one still fits).
pub const ND_RX_BUFFER_LEN: usize = 3072;
/// Bytes queued for the solicitations sent (80 bytes each at most).
pub const ND_TX_BUFFER_LEN: usize = 512;

/// How many of each part of the connection pool, and the RAM they take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSizes {
    /// Connections open at once (control blocks, about 200 bytes each).
    pub connections: usize,
    /// Connections served at once (HTTP sessions, about 10.5 KiB each).
    pub sessions: usize,
    /// Requests parked while every session is busy (512-byte cells).
    pub cells: usize,
    /// Slots of the per-source count table (0 without a per-source cap).
    pub sources: usize,
}

impl PoolSizes {
    /// Hash-table heads: the power of two at or above the connection count.
    pub fn buckets(&self) -> usize {
        self.connections.max(1).next_power_of_two()
    }

    /// Bytes the pool's parts take.
    pub fn bytes(&self) -> usize {
        self.connections * core::mem::size_of::<Tcb>()
            + self.buckets() * core::mem::size_of::<u32>()
            + self.sessions * core::mem::size_of::<Lease<Connection>>()
            + self.cells * core::mem::size_of::<Cell>()
            + self.sources * core::mem::size_of::<Source>()
    }
}

/// Memory the caller lends the appliance for its whole life (the kernel gives static
/// memory; the hosted build leaks heap allocations).
pub struct ApplianceMemory<'a> {
    /// smoltcp socket slots: [`EXTRA_SOCKETS`] plus [`ApplianceMemory::reserved_sockets`].
    pub sockets: &'a mut [SocketStorage<'a>],
    /// The connection pool's parts.
    pub pool: PoolMemory<'a, Connection>,
    /// Where the site's server lives, shared by the HTTP and HTTPS pools (filled in by
    /// [`Appliance::new`](super::Appliance::new)).
    pub(super) server: Option<core::cell::RefCell<bramble_http::Server<'a>>>,
    /// Socket slots kept for what starts later: ACME's, syslog's and the clock's two
    /// ([`Appliance::start_clock`](super::Appliance::start_clock)). Default 0.
    pub reserved_sockets: usize,
    pub(super) dhcp: DhcpSocketMemory<'a>,
    pub(super) mdns: MdnsSocketMemory,
    pub(super) neighbor_discovery: NdSocketMemory,
}

/// The raw ICMPv6 socket's queues (Router and Neighbor Advertisements in, solicitations out).
pub(super) struct NdSocketMemory {
    pub(super) rx_meta: [raw::PacketMetadata; ND_PACKETS],
    pub(super) tx_meta: [raw::PacketMetadata; ND_PACKETS],
    pub(super) rx: [u8; ND_RX_BUFFER_LEN],
    pub(super) tx: [u8; ND_TX_BUFFER_LEN],
}

/// The DHCP client socket's memory: the options it sends and the last packet it received.
pub(super) struct DhcpSocketMemory<'a> {
    /// Option 12 (host name), filled in at start-up.
    pub(super) options: [DhcpOption<'a>; 1],
    pub(super) packet: [u8; DHCP_PACKET_BUFFER_LEN],
}

/// The mDNS socket's datagram queues, each way.
pub(super) struct MdnsSocketMemory {
    pub(super) rx_meta: [udp::PacketMetadata; MDNS_PACKETS],
    pub(super) tx_meta: [udp::PacketMetadata; MDNS_PACKETS],
    pub(super) rx: [u8; MDNS_BUFFER_LEN],
    pub(super) tx: [u8; MDNS_BUFFER_LEN],
}

impl<'a> ApplianceMemory<'a> {
    /// Bundles the caller's memory with the appliance's small fixed buffers.
    pub fn new(sockets: &'a mut [SocketStorage<'a>], pool: PoolMemory<'a, Connection>) -> Self {
        Self {
            sockets,
            pool,
            reserved_sockets: 0,
            server: None,
            dhcp: DhcpSocketMemory {
                options: [DhcpOption {
                    kind: DHCP_OPTION_HOSTNAME,
                    data: &[],
                }],
                packet: [0; DHCP_PACKET_BUFFER_LEN],
            },
            mdns: MdnsSocketMemory {
                rx_meta: [udp::PacketMetadata::EMPTY; MDNS_PACKETS],
                tx_meta: [udp::PacketMetadata::EMPTY; MDNS_PACKETS],
                rx: [0; MDNS_BUFFER_LEN],
                tx: [0; MDNS_BUFFER_LEN],
            },
            neighbor_discovery: NdSocketMemory {
                rx_meta: [raw::PacketMetadata::EMPTY; ND_PACKETS],
                tx_meta: [raw::PacketMetadata::EMPTY; ND_PACKETS],
                rx: [0; ND_RX_BUFFER_LEN],
                tx: [0; ND_TX_BUFFER_LEN],
            },
        }
    }

    /// Memory for a pool of `sizes` from the heap, never freed (for the hosted build and
    /// tests, which run one appliance for the life of the process).
    #[cfg(any(test, feature = "std"))]
    pub fn leaked(sizes: PoolSizes) -> &'static mut ApplianceMemory<'static> {
        use std::boxed::Box;
        use std::vec::Vec;
        fn leak<T>(items: Vec<T>) -> &'static mut [T] {
            Box::leak(items.into_boxed_slice())
        }
        let buckets = if sizes.connections == 0 {
            0
        } else {
            sizes.buckets()
        };
        let pool = PoolMemory {
            tcbs: leak(std::vec![Tcb::EMPTY; sizes.connections]),
            buckets: leak(std::vec![0u32; buckets]),
            leases: leak(
                (0..sizes.sessions)
                    .map(|_| Lease::new(Connection::new()))
                    .collect(),
            ),
            cells: leak((0..sizes.cells).map(|_| Cell::new()).collect()),
            sources: leak(std::vec![Source::EMPTY; sizes.sources]),
        };
        let sockets = leak((0..EXTRA_SOCKETS).map(|_| SocketStorage::EMPTY).collect());
        Box::leak(Box::new(ApplianceMemory::new(sockets, pool)))
    }

    /// How many TCP connections this memory holds at once (0 if it cannot serve even one:
    /// no control block, session or hash bucket, or too few socket slots).
    pub fn pool_size(&self) -> usize {
        if self.pool.leases.is_empty()
            || self.pool.buckets.is_empty()
            || self.sockets.len() < EXTRA_SOCKETS
        {
            0
        } else {
            self.pool.tcbs.len()
        }
    }
}

/// Datagrams queued each way on the SNTP socket.
const SNTP_PACKETS: usize = 2;

/// Memory for the clock: the SNTP socket's queues and the DNS socket's query slot.
pub struct ClockMemory {
    pub(super) sntp_rx_meta: [udp::PacketMetadata; SNTP_PACKETS],
    pub(super) sntp_tx_meta: [udp::PacketMetadata; SNTP_PACKETS],
    pub(super) sntp_rx: [u8; SNTP_PACKETS * bramble_proto::sntp::PACKET_LEN * 2],
    pub(super) sntp_tx: [u8; SNTP_PACKETS * bramble_proto::sntp::PACKET_LEN],
    pub(super) dns_queries: [Option<smoltcp::socket::dns::DnsQuery>; 1],
}

impl ClockMemory {
    /// Empty queues.
    pub fn new() -> Self {
        Self {
            sntp_rx_meta: [udp::PacketMetadata::EMPTY; SNTP_PACKETS],
            sntp_tx_meta: [udp::PacketMetadata::EMPTY; SNTP_PACKETS],
            sntp_rx: [0; SNTP_PACKETS * bramble_proto::sntp::PACKET_LEN * 2],
            sntp_tx: [0; SNTP_PACKETS * bramble_proto::sntp::PACKET_LEN],
            dns_queries: [None],
        }
    }
}

impl Default for ClockMemory {
    fn default() -> Self {
        Self::new()
    }
}

/// Memory for the HTTPS pool: a stream pool of its own (control blocks, hash table, TLS
/// session slots with their buffers, cells for ClientHellos, per-source counts), one entry
/// per connection for the sessions that wait idle, and the plaintext scratch its sessions
/// seal through.
pub struct HttpsMemory<'a> {
    /// The pool's parts.
    pub pool: PoolMemory<'a, TlsSlot<'a>, TLS_CELL_LEN>,
    /// One per control block.
    pub carried: &'a mut [Carried],
    /// [`bramble_stream::services::tls::SCRATCH_LEN`] bytes.
    pub scratch: &'a mut [u8],
}

impl HttpsMemory<'_> {
    /// How many HTTPS connections this memory holds (0 if it cannot serve even one).
    pub fn pool_size(&self) -> usize {
        if self.pool.leases.is_empty() || self.pool.buckets.is_empty() || self.scratch.is_empty() {
            0
        } else {
            self.pool.tcbs.len().min(self.carried.len())
        }
    }

    /// Memory for `sizes` from the heap, never freed (for the hosted build and tests, which
    /// run one appliance for the life of the process).
    #[cfg(any(test, feature = "std"))]
    pub fn leaked(sizes: PoolSizes) -> &'static mut HttpsMemory<'static> {
        use bramble_stream::services::tls::{QUEUE_LEN, SCRATCH_LEN};
        use bramble_tls::session::MAX_RECORD_LEN;
        use std::boxed::Box;
        use std::vec::Vec;
        fn leak<T>(items: Vec<T>) -> &'static mut [T] {
            Box::leak(items.into_boxed_slice())
        }
        let pool = PoolMemory {
            tcbs: leak(std::vec![Tcb::EMPTY; sizes.connections]),
            buckets: leak(std::vec![0u32; sizes.buckets()]),
            leases: leak(
                (0..sizes.sessions)
                    .map(|_| {
                        Lease::new(TlsSlot::new(
                            leak(std::vec![0u8; MAX_RECORD_LEN]),
                            leak(std::vec![0u8; QUEUE_LEN]),
                        ))
                    })
                    .collect(),
            ),
            cells: leak((0..sizes.cells).map(|_| Cell::new()).collect()),
            sources: leak(std::vec![Source::EMPTY; sizes.sources]),
        };
        Box::leak(Box::new(HttpsMemory {
            pool,
            carried: leak((0..sizes.connections).map(|_| Carried::new()).collect()),
            scratch: leak(std::vec![0u8; SCRATCH_LEN]),
        }))
    }
}
