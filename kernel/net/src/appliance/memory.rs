//! The memory the caller lends the appliance: socket slots, HTTP connection states, TCP
//! buffers, and the small fixed buffers of the DHCP, mDNS and IPv6 neighbour discovery
//! sockets.

use super::pool::MAX_CONNECTIONS;
use bramble_http::Connection;
use smoltcp::iface::SocketStorage;
use smoltcp::socket::{raw, udp};
use smoltcp::wire::DhcpOption;

/// Sockets the appliance needs besides the TCP pool: DHCP, mDNS, and the raw ICMPv6 socket
/// of IPv6 address configuration.
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

/// Memory the caller lends the appliance for its whole life (the kernel gives static
/// memory; the hosted build leaks a heap allocation). The TCP pool size is the smallest of
/// `connections.len()`, `sockets.len() - EXTRA_SOCKETS` and the number of whole
/// `tcp_rx_len + tcp_tx_len` chunks in `tcp_buffers`.
pub struct ApplianceMemory<'a> {
    /// smoltcp socket slots.
    pub sockets: &'a mut [SocketStorage<'a>],
    /// One HTTP connection state per TCP socket.
    pub connections: &'a mut [Connection],
    /// Backing store for every TCP socket's receive and transmit buffers.
    pub tcp_buffers: &'a mut [u8],
    /// Receive buffer bytes per TCP socket (requests are small: 2-4 KiB is plenty).
    pub tcp_rx_len: usize,
    /// Transmit buffer bytes per TCP socket (responses are large: bigger is faster).
    pub tcp_tx_len: usize,
    /// Socket slots kept back from the HTTP pool for what starts later: the HTTPS pool
    /// ([`Appliance::start_https`](super::Appliance::start_https)) and the clock's two
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
    pub fn new(
        sockets: &'a mut [SocketStorage<'a>],
        connections: &'a mut [Connection],
        tcp_buffers: &'a mut [u8],
        tcp_rx_len: usize,
        tcp_tx_len: usize,
    ) -> Self {
        Self {
            sockets,
            connections,
            tcp_buffers,
            tcp_rx_len,
            tcp_tx_len,
            reserved_sockets: 0,
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

    /// How many TCP connections this memory holds.
    pub fn pool_size(&self) -> usize {
        let per_socket = self.tcp_rx_len + self.tcp_tx_len;
        let by_buffers = if per_socket == 0 || self.tcp_rx_len == 0 || self.tcp_tx_len == 0 {
            0
        } else {
            self.tcp_buffers.len() / per_socket
        };
        by_buffers
            .min(self.connections.len())
            .min(
                self.sockets
                    .len()
                    .saturating_sub(EXTRA_SOCKETS)
                    .saturating_sub(self.reserved_sockets),
            )
            .min(MAX_CONNECTIONS)
    }
}

/// Datagrams queued each way on the SNTP socket.
const SNTP_PACKETS: usize = 2;

/// Memory for the clock: the SNTP socket's queues and the DNS socket's query slot.
pub struct ClockMemory {
    pub(super) sntp_rx_meta: [udp::PacketMetadata; SNTP_PACKETS],
    pub(super) sntp_tx_meta: [udp::PacketMetadata; SNTP_PACKETS],
    pub(super) sntp_rx: [u8; SNTP_PACKETS * crate::sntp::PACKET_LEN * 2],
    pub(super) sntp_tx: [u8; SNTP_PACKETS * crate::sntp::PACKET_LEN],
    pub(super) dns_queries: [Option<smoltcp::socket::dns::DnsQuery>; 1],
}

impl ClockMemory {
    /// Empty queues.
    pub fn new() -> Self {
        Self {
            sntp_rx_meta: [udp::PacketMetadata::EMPTY; SNTP_PACKETS],
            sntp_tx_meta: [udp::PacketMetadata::EMPTY; SNTP_PACKETS],
            sntp_rx: [0; SNTP_PACKETS * crate::sntp::PACKET_LEN * 2],
            sntp_tx: [0; SNTP_PACKETS * crate::sntp::PACKET_LEN],
            dns_queries: [None],
        }
    }
}

impl Default for ClockMemory {
    fn default() -> Self {
        Self::new()
    }
}

/// Memory for the HTTPS pool: one TLS connection (with its record buffers) per socket, and
/// the sockets' TCP buffers. The socket slots come from [`ApplianceMemory::reserved_sockets`].
pub struct HttpsMemory<'a> {
    /// One TLS connection per TCP socket.
    pub connections: &'a mut [super::secure::TlsConnection<'a>],
    /// Backing store for every socket's receive and transmit buffers.
    pub tcp_buffers: &'a mut [u8],
    /// Receive buffer bytes per TCP socket.
    pub tcp_rx_len: usize,
    /// Transmit buffer bytes per TCP socket.
    pub tcp_tx_len: usize,
}

impl HttpsMemory<'_> {
    /// How many HTTPS connections this memory holds, given `socket_slots` free slots.
    pub fn pool_size(&self, socket_slots: usize) -> usize {
        let per_socket = self.tcp_rx_len + self.tcp_tx_len;
        let by_buffers = if self.tcp_rx_len == 0 || self.tcp_tx_len == 0 {
            0
        } else {
            self.tcp_buffers.len() / per_socket
        };
        by_buffers
            .min(self.connections.len())
            .min(socket_slots)
            .min(MAX_CONNECTIONS)
    }
}
