//! The appliance loop: one smoltcp interface (DHCP with a link-local fallback, or static
//! IPv4; ARP, ICMP echo), a fixed pool of TCP sockets on port 80 each driving one HTTP
//! connection, and the mDNS responder.
//!
//! The caller owns time and sleeping: it calls [`Appliance::poll`] with the current instant
//! whenever something may have happened (a frame arrived, a timer fired) and sleeps until the
//! instant `poll` returns, or until the next interrupt. Nothing here waits or spins.

use crate::mdns::{self, Destination, MdnsResponder};
use crate::phy::{EthernetPhy, PhyCounters};
use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState};
use bramble_http::{Connection, ConnectionAction, Server};
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet, SocketStorage};
use smoltcp::socket::{dhcpv4, tcp, udp};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{
    DhcpOption, DhcpRepr, EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint,
    Ipv4Address, Ipv4Cidr,
};

/// Most TCP sockets one appliance drives (a bound for the handle table, not a target).
pub const MAX_CONNECTIONS: usize = 256;
/// Sockets the appliance needs besides the TCP pool: DHCP and mDNS.
pub const EXTRA_SOCKETS: usize = 2;
/// When smoltcp still has frames to send after a poll (the device's transmit path is busy),
/// the latest the loop wakes to try again; the device's completion interrupt usually wakes
/// it sooner.
pub const TRANSMIT_BUSY_RECHECK_MICROS: u64 = 2_000;
/// While the link is down, how often the loop wakes to look for it coming back.
pub const LINK_DOWN_CHECK_MICROS: u64 = 1_000_000;
/// DHCP option 12: host name (RFC 2132 §3.14).
const DHCP_OPTION_HOSTNAME: u8 = 12;
/// Bytes kept of the last DHCP packet, to read the lease time from it.
pub const DHCP_PACKET_BUFFER_LEN: usize = 1024;
/// Datagrams queued each way on the mDNS socket.
pub const MDNS_PACKETS: usize = 4;
/// Payload bytes queued each way on the mDNS socket.
pub const MDNS_BUFFER_LEN: usize = 1024;
/// Most egress-only passes at the end of a poll (each sends what the sockets have; the
/// device's transmit path usually fills long before).
const EGRESS_ROUNDS: usize = 64;
/// How long DHCP may go unanswered before a link-local address is taken.
pub const LINK_LOCAL_AFTER_MICROS: u64 = 10_000_000;
/// Lease length assumed when an ACK gives none (smoltcp's own default, RFC 2131 leaves it
/// to the client).
const DEFAULT_LEASE_SECONDS: u64 = 120;
/// Longest a TCP handshake may hold a pool slot (SYN received, final ACK missing).
pub const HANDSHAKE_LIMIT_MICROS: u64 = 10_000_000;
/// Longest our close may take once asked (FIN acknowledged and the client's FIN received).
pub const CLOSE_LIMIT_MICROS: u64 = 30_000_000;
/// Receive/transmit alternations per connection per poll.
const PROGRESS_ROUNDS: usize = 8;
/// Largest mDNS message the responder writes or reads whole.
const MDNS_MESSAGE_LEN: usize = 512;

/// Why the appliance could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetError {
    /// The memory given holds no complete TCP socket (too few socket slots, connections or
    /// buffer bytes for even one).
    NoSocketMemory,
    /// A static address's prefix length is over 32.
    BadPrefix,
}

impl core::fmt::Display for NetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NetError::NoSocketMemory => {
                f.write_str("not enough memory given for even one TCP connection")
            }
            NetError::BadPrefix => f.write_str("static address prefix length is over 32"),
        }
    }
}

/// How the interface gets its IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressConfig {
    /// Ask a DHCP server (the default), sending the hostname; while none answers (after
    /// [`LINK_LOCAL_AFTER_MICROS`], or at once when a lease runs out unrenewed), use a
    /// link-local 169.254.x.y address. DHCP keeps asking, and a lease replaces it.
    Dhcp,
    /// A fixed address.
    Static {
        /// The interface address.
        address: [u8; 4],
        /// Network prefix length, 0-32.
        prefix_len: u8,
        /// Default gateway, if any.
        gateway: Option<[u8; 4]>,
    },
}

/// What the appliance is told at start-up.
#[derive(Clone, Copy, Debug)]
pub struct NetworkConfig<'a> {
    /// Host name: sent in DHCP (option 12) and claimed in mDNS as `<hostname>.local`.
    pub hostname: &'a str,
    /// DHCP or static.
    pub address: AddressConfig,
    /// TCP port of the HTTP server (80).
    pub http_port: u16,
    /// Whether to run the mDNS responder.
    pub mdns: bool,
    /// Seed for TCP initial sequence numbers, DHCP transaction IDs and mDNS probe timing;
    /// should differ between boots (the timer value at boot, mixed with the MAC, is enough).
    pub random_seed: u64,
}

impl<'a> NetworkConfig<'a> {
    /// DHCP, port 80, mDNS on.
    pub fn dhcp(hostname: &'a str, random_seed: u64) -> Self {
        Self {
            hostname,
            address: AddressConfig::Dhcp,
            http_port: 80,
            mdns: true,
            random_seed,
        }
    }
}

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
    dhcp_options: [DhcpOption<'a>; 1],
    dhcp_packet: [u8; DHCP_PACKET_BUFFER_LEN],
    mdns_rx_meta: [udp::PacketMetadata; MDNS_PACKETS],
    mdns_tx_meta: [udp::PacketMetadata; MDNS_PACKETS],
    mdns_rx: [u8; MDNS_BUFFER_LEN],
    mdns_tx: [u8; MDNS_BUFFER_LEN],
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
            dhcp_options: [DhcpOption {
                kind: DHCP_OPTION_HOSTNAME,
                data: &[],
            }],
            dhcp_packet: [0; DHCP_PACKET_BUFFER_LEN],
            mdns_rx_meta: [udp::PacketMetadata::EMPTY; MDNS_PACKETS],
            mdns_tx_meta: [udp::PacketMetadata::EMPTY; MDNS_PACKETS],
            mdns_rx: [0; MDNS_BUFFER_LEN],
            mdns_tx: [0; MDNS_BUFFER_LEN],
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
            .min(self.sockets.len().saturating_sub(EXTRA_SOCKETS))
            .min(MAX_CONNECTIONS)
    }
}

/// One TCP socket of the pool and whether its HTTP connection is open.
#[derive(Clone, Copy)]
struct PoolSlot {
    handle: SocketHandle,
    /// `Connection::open` was called for the current TCP connection.
    open: bool,
    /// `close()` (FIN) has been asked of the socket.
    closing: bool,
    /// When the slot entered a phase that must end within a limit: the TCP handshake
    /// (SYN-RECEIVED) or our close.
    since: Option<Instant>,
}

/// Counts the appliance keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplianceCounters {
    /// TCP connections handed to the HTTP engine.
    pub connections_opened: u64,
    /// Connections the engine asked to abort (reset).
    pub connections_aborted: u64,
    /// Handshakes reset because the client never completed them.
    pub handshakes_abandoned: u64,
    /// Connections reset because the client never finished closing.
    pub closes_abandoned: u64,
    /// Times the link went down.
    pub link_losses: u64,
    /// mDNS datagrams that could not be parsed.
    pub mdns_malformed: u64,
}

/// The network appliance: interface, sockets, HTTP connections, mDNS.
pub struct Appliance<'a, D: EthernetDevice> {
    phy: EthernetPhy<D>,
    iface: Interface,
    sockets: SocketSet<'a>,
    connections: &'a mut [Connection],
    pool: heapless::Vec<PoolSlot, MAX_CONNECTIONS>,
    server: Server<'a>,
    http_port: u16,
    dhcp: Option<SocketHandle>,
    /// Since when DHCP has been asking without an address (for the link-local fallback).
    dhcp_waiting_since: Option<Instant>,
    /// When the lease in use runs out unless renewed.
    lease_expires_at: Option<Instant>,
    /// The interface holds a link-local address (RFC 3927) for want of a lease.
    link_local: bool,
    mac: [u8; 6],
    mdns: Option<(SocketHandle, MdnsResponder)>,
    link: LinkState,
    /// A "device gone" error seen, kept until the device is replaced.
    device_fault: Option<DeviceError>,
    counters: ApplianceCounters,
}

fn smol(now: Instant) -> SmolInstant {
    // Microseconds since boot fit an i64 for 292,000 years.
    SmolInstant::from_micros(now.as_micros() as i64)
}

fn ours(instant: SmolInstant) -> Instant {
    Instant::from_micros(instant.total_micros().max(0) as u64)
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Builds the interface and sockets over `device`, serving `server`'s site on
    /// `config.http_port`, in `memory`.
    pub fn new(
        device: D,
        config: NetworkConfig<'a>,
        memory: &'a mut ApplianceMemory<'a>,
        server: Server<'a>,
        now: Instant,
    ) -> Result<Self, NetError> {
        let pool_size = memory.pool_size();
        if pool_size == 0 {
            return Err(NetError::NoSocketMemory);
        }
        let mac = device.mac_address();
        let mut phy = EthernetPhy::new(device);
        let mut iface_config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac.0)));
        iface_config.random_seed = config.random_seed;
        let mut iface = Interface::new(iface_config, &mut phy, smol(now));

        let ApplianceMemory {
            sockets: socket_storage,
            connections,
            tcp_buffers,
            tcp_rx_len,
            tcp_tx_len,
            dhcp_options,
            dhcp_packet,
            mdns_rx_meta,
            mdns_tx_meta,
            mdns_rx,
            mdns_tx,
        } = memory;
        let mut sockets = SocketSet::new(&mut socket_storage[..]);

        let mut pool = heapless::Vec::new();
        let mut rest: &'a mut [u8] = tcp_buffers;
        for _ in 0..pool_size {
            let (rx, tail) = rest.split_at_mut(*tcp_rx_len);
            let (tx, tail) = tail.split_at_mut(*tcp_tx_len);
            rest = tail;
            let mut socket =
                tcp::Socket::new(tcp::SocketBuffer::new(rx), tcp::SocketBuffer::new(tx));
            // Whole answers go into the send buffer at once; Nagle's algorithm would only
            // hold back each answer's last partial segment until the client's delayed ACK
            // (40 ms on Linux: the page's p99 in the hosted benchmark).
            socket.set_nagle_enabled(false);
            // Cannot fail: the port is not zero and the socket is new.
            let _ = socket.listen(config.http_port);
            let handle = sockets.add(socket);
            // Cannot fail: pool_size <= MAX_CONNECTIONS.
            let _ = pool.push(PoolSlot {
                handle,
                open: false,
                closing: false,
                since: None,
            });
        }
        let connections = &mut connections[..pool_size];

        let dhcp = match config.address {
            AddressConfig::Dhcp => {
                let mut socket = dhcpv4::Socket::new();
                dhcp_options[0].data = config.hostname.as_bytes();
                socket.set_outgoing_options(&dhcp_options[..]);
                socket.set_receive_packet_buffer(&mut dhcp_packet[..]);
                Some(sockets.add(socket))
            }
            AddressConfig::Static {
                address,
                prefix_len,
                gateway,
            } => {
                if prefix_len > 32 {
                    return Err(NetError::BadPrefix);
                }
                let cidr = Ipv4Cidr::new(Ipv4Address::from_octets(address), prefix_len);
                iface.update_ip_addrs(|addrs| {
                    // Cannot fail: the address list is empty and holds at least one.
                    let _ = addrs.push(IpCidr::Ipv4(cidr));
                });
                log::info!("net: static address {cidr}");
                if let Some(gateway) = gateway {
                    let gateway = Ipv4Address::from_octets(gateway);
                    // Cannot fail: the route table is empty.
                    let _ = iface.routes_mut().add_default_ipv4_route(gateway);
                    log::info!("net: gateway {gateway}");
                }
                None
            }
        };

        let mdns = if config.mdns {
            match MdnsResponder::new(
                config.hostname,
                (config.random_seed as u32) ^ u32::from(mac.0[5]),
            ) {
                Ok(mut responder) => {
                    let mut socket = udp::Socket::new(
                        udp::PacketBuffer::new(&mut mdns_rx_meta[..], &mut mdns_rx[..]),
                        udp::PacketBuffer::new(&mut mdns_tx_meta[..], &mut mdns_tx[..]),
                    );
                    // RFC 6762 §11: mDNS packets are sent with IP TTL 255.
                    socket.set_hop_limit(Some(255));
                    // Cannot fail: the port is not zero and the socket is new.
                    let _ = socket.bind(mdns::MDNS_PORT);
                    let group = Ipv4Address::from_octets(mdns::MDNS_GROUP);
                    if let Err(error) = iface.join_multicast_group(group) {
                        log::warn!("mdns: cannot join {group}: {error}");
                    }
                    let handle = sockets.add(socket);
                    if let Some(address) = iface.ipv4_addr() {
                        responder.set_address(Some(address.octets()), now);
                    }
                    Some((handle, responder))
                }
                Err(_) => {
                    log::warn!(
                        "mdns: hostname {:?} is not a valid DNS label (letters, digits, '-', \
                         at most 63); mDNS is off",
                        config.hostname
                    );
                    None
                }
            }
        } else {
            None
        };

        log::info!(
            "net: {} HTTP connections on port {} ({} + {} bytes of buffer each), MAC {}",
            pool_size,
            config.http_port,
            tcp_rx_len,
            tcp_tx_len,
            mac
        );
        let link = phy.link_state();
        if link == LinkState::Down {
            log::warn!("net: link down");
        }
        Ok(Self {
            phy,
            iface,
            sockets,
            connections,
            pool,
            server,
            http_port: config.http_port,
            dhcp_waiting_since: dhcp.map(|_| now),
            lease_expires_at: None,
            link_local: false,
            mac: mac.0,
            dhcp,
            mdns,
            link,
            device_fault: None,
            counters: ApplianceCounters::default(),
        })
    }

    /// Does all the work that is due at `now`: link check, frames in and out, DHCP events,
    /// HTTP connections, mDNS. Returns when it next needs to run if nothing arrives first
    /// (`None`: only a received frame or a link change can give it work).
    pub fn poll(&mut self, now: Instant) -> Option<Instant> {
        self.check_link(now);
        let timestamp = smol(now);
        // Two rounds: frames in and socket work, then the replies that work produced.
        for _ in 0..2 {
            self.limit_connection_requests();
            self.iface.poll(timestamp, &mut self.phy, &mut self.sockets);
            self.poll_dhcp(now);
            self.poll_connections(now);
            self.poll_mdns(now);
        }
        self.limit_connection_requests();
        let last_pass = self.iface.poll(timestamp, &mut self.phy, &mut self.sockets);
        // That pass may have received a DHCP ACK: apply it now, at the instant smoltcp
        // counts the lease from, not whenever the loop next happens to wake.
        self.poll_dhcp(now);
        // It may also have taken in ACKs that freed send space: let the connections fill it
        // and send it now, without taking in more frames (those wake the loop anyway).
        // Without this the rest of an answer waited for the next wake-up: 615 -> 1,302
        // req/s for a 100 KiB file in the hosted benchmark, measured side by side. Skipped
        // when the pass changed nothing (it walks every connection).
        if last_pass == PollResult::SocketStateChanged {
            self.poll_connections(now);
            for _ in 0..EGRESS_ROUNDS {
                if self
                    .iface
                    .poll_egress(timestamp, &mut self.phy, &mut self.sockets)
                    == PollResult::None
                {
                    break;
                }
            }
        }
        if let Some(fault) = self.phy.take_fault()
            && self.device_fault.is_none()
        {
            log::error!("net: network device reports {fault:?}; it needs to be probed again");
            self.device_fault = Some(fault);
        }
        self.next_wake(now)
    }

    /// Lets through only as many new connection requests as there are listening sockets:
    /// when the pool is full, SYNs are dropped (clients retry) rather than refused.
    fn limit_connection_requests(&mut self) {
        let listening = self
            .pool
            .iter()
            .filter(|slot| self.sockets.get::<tcp::Socket>(slot.handle).is_listening())
            .count();
        self.phy
            .limit_connection_requests(Some((self.http_port, listening)));
    }

    fn next_wake(&mut self, now: Instant) -> Option<Instant> {
        // With the link down nothing can be sent, so smoltcp's transmit timers (a DHCP
        // DISCOVER that could not go out) stay due forever: following them would spin. Wake
        // for the next link check instead; the sockets' own deadlines below still count.
        let mut next = if self.link == LinkState::Down {
            Some(now.add_micros(LINK_DOWN_CHECK_MICROS))
        } else {
            // Right after a full poll, smoltcp is only still due if it has frames it could
            // not hand to the device: the transmit path is busy (a USB transfer in flight).
            // The device's completion interrupt wakes the loop; spinning on "now" would burn
            // the CPU the emulated or real USB transfer needs. This is only the fallback.
            self.iface.poll_at(smol(now), &self.sockets).map(|due| {
                let due = ours(due);
                if due <= now {
                    now.add_micros(TRANSMIT_BUSY_RECHECK_MICROS)
                } else {
                    due
                }
            })
        };
        let mut earliest = |candidate: Option<Instant>| {
            if let Some(candidate) = candidate {
                next = Some(next.map_or(candidate, |n| n.min(candidate)));
            }
        };
        for (slot, connection) in self.pool.iter().zip(self.connections.iter()) {
            if slot.open {
                earliest(connection.next_deadline());
            }
            if let Some(since) = slot.since {
                let limit = if slot.closing {
                    CLOSE_LIMIT_MICROS
                } else {
                    HANDSHAKE_LIMIT_MICROS
                };
                earliest(Some(since.add_micros(limit)));
            }
        }
        if let Some((_, responder)) = &self.mdns {
            earliest(responder.next_deadline());
        }
        // The link-local fallback is only taken with the link up (see poll_dhcp): with it
        // down, this deadline would stay in the past and the loop would spin.
        if let Some(since) = self.dhcp_waiting_since
            && self.link == LinkState::Up
        {
            earliest(Some(since.add_micros(LINK_LOCAL_AFTER_MICROS)));
        }
        if self.phy.has_held_frame() {
            // A frame waits for transmit space: try again soon.
            earliest(Some(now.add_micros(1_000)));
        }
        next
    }

    fn check_link(&mut self, now: Instant) {
        let link = self.phy.link_state();
        if link == self.link {
            return;
        }
        self.link = link;
        match link {
            LinkState::Down => {
                self.counters.link_losses += 1;
                self.phy.discard_held_frame();
                log::warn!("net: link down");
            }
            LinkState::Up => {
                log::info!("net: link up");
                // A device that recovers itself (a USB re-probe) may come back as another
                // adapter with another address: adopt it, or every frame we send carries
                // the old source MAC and replies go nowhere.
                let mac = self.phy.device().mac_address();
                if mac.0 != self.mac {
                    self.iface
                        .set_hardware_addr(HardwareAddress::Ethernet(EthernetAddress(mac.0)));
                    self.mac = mac.0;
                    log::warn!("net: the network device's MAC is now {mac}");
                }
                if let Some(handle) = self.dhcp {
                    // The network may be another one now: ask again from scratch. The lease
                    // is given up, not run out: the server may well answer at once.
                    self.lease_expires_at = None;
                    self.sockets.get_mut::<dhcpv4::Socket>(handle).reset();
                    log::info!("dhcp: restarting after link return");
                    if self.iface.ipv4_addr().is_none() {
                        self.dhcp_waiting_since = Some(now);
                    }
                }
                if let Some((_, responder)) = &mut self.mdns {
                    // Probe and announce again: the name may be taken on this network.
                    let address = self.iface.ipv4_addr().map(|a| a.octets());
                    responder.set_address(None, now);
                    responder.set_address(address, now);
                }
            }
        }
    }

    fn poll_dhcp(&mut self, now: Instant) {
        let Some(handle) = self.dhcp else {
            return;
        };
        let event = self.sockets.get_mut::<dhcpv4::Socket>(handle).poll();
        let address = match event {
            None => {
                if let Some(since) = self.dhcp_waiting_since
                    && self.link == LinkState::Up
                    && now.micros_since(since) >= LINK_LOCAL_AFTER_MICROS
                {
                    self.dhcp_waiting_since = None;
                    let cidr = self.use_link_local(now);
                    log::warn!(
                        "dhcp: no answer after {} s; using link-local {cidr} until a lease \
                         arrives",
                        LINK_LOCAL_AFTER_MICROS / 1_000_000
                    );
                }
                return;
            }
            Some(dhcpv4::Event::Configured(config)) => {
                let lease = config
                    .packet
                    .as_ref()
                    .and_then(|packet| DhcpRepr::parse(packet).ok())
                    .and_then(|repr| repr.lease_duration);
                let cidr = config.address;
                // smoltcp reports every renewal ACK too; the address may be the one in use.
                let renewed = self.iface.ip_addrs() == [IpCidr::Ipv4(cidr)];
                let how = if renewed { ", renewed" } else { "" };
                match lease {
                    Some(seconds) => log::info!(
                        "dhcp: lease {} from {} for {} s{how}",
                        config.address,
                        config.server.address,
                        seconds
                    ),
                    None => {
                        log::info!(
                            "dhcp: lease {} from {}{how}",
                            config.address,
                            config.server.address
                        )
                    }
                }
                // smoltcp counts the lease from the ACK, which it handled in this same poll.
                self.lease_expires_at = Some(
                    now.add_micros(lease.map_or(DEFAULT_LEASE_SECONDS, u64::from) * 1_000_000),
                );
                self.dhcp_waiting_since = None;
                self.link_local = false;
                // Setting the addresses flushes the neighbour cache: skip that on a renewal,
                // or every client would be asked for again (its next reply held for ARP).
                if !renewed {
                    self.iface.update_ip_addrs(|addrs| {
                        addrs.clear();
                        // Cannot fail: the list was just emptied.
                        let _ = addrs.push(IpCidr::Ipv4(cidr));
                    });
                }
                match config.router {
                    Some(router) => {
                        // Cannot fail: at most one default route is kept.
                        let _ = self.iface.routes_mut().add_default_ipv4_route(router);
                        log::info!("dhcp: gateway {router}");
                    }
                    None => {
                        self.iface.routes_mut().remove_default_ipv4_route();
                        log::info!("dhcp: no gateway offered");
                    }
                }
                Some(cidr.address().octets())
            }
            Some(dhcpv4::Event::Deconfigured) => {
                if self.iface.ipv4_addr().is_some() {
                    log::warn!("dhcp: lease lost; address removed");
                }
                self.iface.update_ip_addrs(|addrs| addrs.clear());
                self.iface.routes_mut().remove_default_ipv4_route();
                self.link_local = false;
                let ran_out = self
                    .lease_expires_at
                    .take()
                    .is_some_and(|expires_at| now >= expires_at);
                if ran_out && self.link == LinkState::Up {
                    // Renewing (from T1) and rebinding (from T2) went unanswered for the
                    // whole second half of the lease: the server has been gone far longer
                    // than LINK_LOCAL_AFTER already. Stay reachable without waiting again;
                    // DHCP keeps asking and a lease replaces the link-local address.
                    self.dhcp_waiting_since = None;
                    let cidr = self.use_link_local(now);
                    log::warn!(
                        "dhcp: lease ran out unrenewed; using link-local {cidr} until a lease \
                         arrives"
                    );
                    Some(cidr.address().octets())
                } else {
                    // A NAK, or the lease given up on a link return: the server may answer
                    // soon. Keep counting from the first unanswered request, not from this
                    // event.
                    self.dhcp_waiting_since.get_or_insert(now);
                    None
                }
            }
        };
        if let Some((_, responder)) = &mut self.mdns {
            responder.set_address(address, now);
        }
    }

    /// Takes a link-local address (RFC 3927 §2.1: 169.254.1.0-169.254.254.255, chosen
    /// from the MAC so a device keeps the same one) while no DHCP server answers, so that a
    /// Pi cabled straight to a laptop is still reachable as `<hostname>.local`. DHCP keeps
    /// asking; a lease replaces it. (The RFC's ARP probe for the address is not done: the
    /// choice is spread over 65,024 addresses by the MAC.) Returns the address taken.
    fn use_link_local(&mut self, now: Instant) -> Ipv4Cidr {
        let m = self.mac;
        let hash = m.iter().fold(0x811c_9dc5u32, |h, &b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        let third = 1 + (hash % 254) as u8;
        let fourth = (hash >> 8) as u8;
        let cidr = Ipv4Cidr::new(Ipv4Address::new(169, 254, third, fourth), 16);
        self.iface.update_ip_addrs(|addrs| {
            addrs.clear();
            // Cannot fail: the list was just emptied.
            let _ = addrs.push(IpCidr::Ipv4(cidr));
        });
        self.iface.routes_mut().remove_default_ipv4_route();
        self.link_local = true;
        if let Some((_, responder)) = &mut self.mdns {
            responder.set_address(Some(cidr.address().octets()), now);
        }
        cidr
    }

    fn poll_connections(&mut self, now: Instant) {
        let port = self.http_port;
        for (slot, connection) in self.pool.iter_mut().zip(self.connections.iter_mut()) {
            let socket = self.sockets.get_mut::<tcp::Socket>(slot.handle);
            if !slot.open {
                match socket.state() {
                    // CLOSE-WAIT: the client sent its request and its FIN before we looked;
                    // the request is still in the buffer and gets its answer.
                    tcp::State::Established | tcp::State::CloseWait => {
                        connection.open(&mut self.server, now);
                        slot.open = true;
                        slot.closing = false;
                        slot.since = None;
                        self.counters.connections_opened += 1;
                    }
                    tcp::State::SynReceived => {
                        // A handshake that never completes (a lost ACK, a SYN flood) must
                        // not hold the slot: give it HANDSHAKE_LIMIT_MICROS.
                        let since = *slot.since.get_or_insert(now);
                        if now.micros_since(since) >= HANDSHAKE_LIMIT_MICROS {
                            socket.abort();
                            slot.since = None;
                            self.counters.handshakes_abandoned += 1;
                        }
                        continue;
                    }
                    _ => {
                        slot.since = None;
                        if !socket.is_open() {
                            // Cannot fail: the port is not zero and the socket is not open.
                            let _ = socket.listen(port);
                        }
                        continue;
                    }
                }
            }
            // Alternate between request bytes in and response bytes out until neither moves:
            // sending a response can make room for the next pipelined request, and reading
            // a request can produce the next response. Bounded, so one connection cannot
            // hold the loop.
            let mut wrote = 0;
            // Set when this pass aborts the socket: smoltcp sends the RST on the next
            // interface poll, but only if the socket still knows its peer, so it must not be
            // put back to listening (which forgets the peer) until the next pass.
            let mut aborted = false;
            for _ in 0..PROGRESS_ROUNDS {
                let mut moved = 0;
                while socket.can_recv() {
                    let consumed = socket
                        .recv(|data| {
                            let n = connection
                                .receive(&mut self.server, data, now)
                                .min(data.len());
                            (n, n)
                        })
                        .unwrap_or(0);
                    moved += consumed;
                    if consumed == 0 {
                        break;
                    }
                }
                // Response bytes go straight into the socket's transmit buffer.
                while socket.can_send() {
                    let n = socket
                        .send(|buffer| {
                            let n = connection
                                .transmit(&mut self.server, buffer, now)
                                .min(buffer.len());
                            (n, n)
                        })
                        .unwrap_or(0);
                    wrote += n;
                    moved += n;
                    if n == 0 {
                        break;
                    }
                }
                if moved == 0 {
                    break;
                }
            }
            match connection.action(now) {
                ConnectionAction::KeepOpen => {
                    // The client finished sending and nothing more is queued for it: the
                    // exchange is over, so close our half too.
                    if !socket.may_recv() && wrote == 0 && socket.send_queue() == 0 && !slot.closing
                    {
                        socket.close();
                        slot.closing = true;
                        slot.since = Some(now);
                    }
                }
                ConnectionAction::CloseWhenFlushed => {
                    if !slot.closing {
                        // FIN goes after whatever is still queued.
                        socket.close();
                        slot.closing = true;
                        slot.since = Some(now);
                    }
                }
                ConnectionAction::Abort => {
                    socket.abort();
                    aborted = true;
                    self.counters.connections_aborted += 1;
                }
            }
            // A client that vanished while we close (never acknowledges our FIN, or never
            // sends its own) would hold the slot for ever: cut it off after CLOSE_LIMIT.
            if slot.closing
                && slot
                    .since
                    .is_some_and(|since| now.micros_since(since) >= CLOSE_LIMIT_MICROS)
                && !matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait)
            {
                socket.abort();
                aborted = true;
                self.counters.closes_abandoned += 1;
            }
            if matches!(socket.state(), tcp::State::Closed | tcp::State::TimeWait) {
                connection.close(&mut self.server);
                slot.open = false;
                slot.closing = false;
                slot.since = None;
                // Back to listening: the pool slot serves the next client. (TIME-WAIT
                // protection is given up for the slot; the client's port differs anyway.)
                // After an abort this waits one pass, for the RST to go out first.
                if !aborted {
                    let _ = socket.listen(port);
                }
            }
        }
    }

    fn poll_mdns(&mut self, now: Instant) {
        let Some((handle, responder)) = &mut self.mdns else {
            return;
        };
        let socket = self.sockets.get_mut::<udp::Socket>(*handle);
        let mut out = [0u8; MDNS_MESSAGE_LEN];
        while let Ok((datagram, meta)) = socket.recv() {
            let IpAddress::Ipv4(source) = meta.endpoint.addr;
            let reply = responder.handle(
                datagram,
                (source.octets(), meta.endpoint.port),
                now,
                &mut out,
            );
            match reply {
                Ok(Some((len, destination))) => {
                    let endpoint = match destination {
                        Destination::Multicast => IpEndpoint::new(
                            Ipv4Address::from_octets(mdns::MDNS_GROUP).into(),
                            mdns::MDNS_PORT,
                        ),
                        Destination::Unicast(address, port) => {
                            IpEndpoint::new(Ipv4Address::from_octets(address).into(), port)
                        }
                    };
                    if socket.send_slice(&out[..len], endpoint).is_err() {
                        log::debug!("mdns: transmit queue full; answer dropped");
                    }
                }
                Ok(None) => {}
                Err(_) => self.counters.mdns_malformed += 1,
            }
        }
        if let Some(len) = responder.poll(now, &mut out) {
            let group = IpEndpoint::new(
                Ipv4Address::from_octets(mdns::MDNS_GROUP).into(),
                mdns::MDNS_PORT,
            );
            if socket.send_slice(&out[..len], group).is_err() {
                log::debug!("mdns: transmit queue full; probe or announcement dropped");
            }
        }
    }

    /// The error that says the device went away (USB unplug or reset), if one was seen: the
    /// owner should probe again and hand the new device to [`Appliance::replace_device`].
    pub fn device_fault(&self) -> Option<DeviceError> {
        self.device_fault
    }

    /// Swaps in a freshly probed device and returns the old one. Sockets, connections and
    /// the address are kept; the link is treated as having just come up, so DHCP asks again
    /// and mDNS probes again. A changed MAC address is adopted.
    pub fn replace_device(&mut self, device: D) -> D {
        let mac = device.mac_address();
        let old = self.phy.replace_device(device);
        self.iface
            .set_hardware_addr(HardwareAddress::Ethernet(EthernetAddress(mac.0)));
        self.mac = mac.0;
        self.device_fault = None;
        self.link = LinkState::Down;
        log::info!("net: network device replaced, MAC {mac}");
        old
    }

    /// Whether the address in use is a link-local fallback (no DHCP server answered).
    pub fn is_link_local(&self) -> bool {
        self.link_local
    }

    /// The IPv4 address in use, if any.
    pub fn ipv4_address(&self) -> Option<[u8; 4]> {
        self.iface.ipv4_addr().map(|a| a.octets())
    }

    /// The name claimed over mDNS (the hostname, or it with a `-N` suffix after a conflict).
    pub fn mdns_name(&self) -> Option<&str> {
        self.mdns.as_ref().map(|(_, responder)| responder.name())
    }

    /// Number of TCP sockets in the pool.
    pub fn pool_size(&self) -> usize {
        self.pool.len()
    }

    /// Number of HTTP connections open now.
    pub fn open_connections(&self) -> usize {
        self.pool.iter().filter(|slot| slot.open).count()
    }

    /// The appliance's counts.
    pub fn counters(&self) -> ApplianceCounters {
        self.counters
    }

    /// The device adapter's counts.
    pub fn phy_counters(&self) -> PhyCounters {
        self.phy.counters()
    }

    /// The HTTP server (for its counters).
    pub fn server(&self) -> &Server<'a> {
        &self.server
    }

    /// The network device.
    pub fn device(&self) -> &D {
        self.phy.device()
    }

    /// The network device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        self.phy.device_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{MockDevice, WiredDevice, wired_pair};
    use bramble_http::{ServerConfig, SiteSource};
    use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        ArpOperation, ArpPacket, ArpRepr, DhcpMessageType, DhcpPacket, EthernetFrame,
        EthernetProtocol, EthernetRepr, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Packet, Ipv4Repr,
        UdpPacket, UdpRepr,
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

    /// Leaked memory for `pool` connections of 2 KiB + 4 KiB.
    fn memory(pool: usize) -> &'static mut ApplianceMemory<'static> {
        let sockets = Box::leak(
            (0..pool + EXTRA_SOCKETS)
                .map(|_| SocketStorage::EMPTY)
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let connections = Box::leak(
            (0..pool)
                .map(|_| Connection::new())
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let buffers = Box::leak(std::vec![0u8; pool * 6144].into_boxed_slice());
        Box::leak(Box::new(ApplianceMemory::new(
            sockets,
            connections,
            buffers,
            2048,
            4096,
        )))
    }

    fn static_config(mdns: bool) -> NetworkConfig<'static> {
        NetworkConfig {
            hostname: "bramble",
            address: AddressConfig::Static {
                address: [10, 0, 0, 2],
                prefix_len: 24,
                gateway: Some([10, 0, 0, 1]),
            },
            http_port: 80,
            mdns,
            random_seed: 7,
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
        let options: Vec<(u8, Vec<u8>)> =
            dhcp.options().map(|o| (o.kind, o.data.to_vec())).collect();
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

    #[test]
    fn refuses_memory_without_room_for_a_connection() {
        let mem = memory(0);
        assert_eq!(mem.pool_size(), 0);
        let result = Appliance::new(
            MockDevice::new(GUEST_MAC),
            static_config(false),
            mem,
            server(),
            at(0),
        );
        assert_eq!(result.err(), Some(NetError::NoSocketMemory));
        let mut small = memory(4);
        small.tcp_rx_len = 5000; // only two 9 KiB pairs fit in 24 KiB
        small.tcp_tx_len = 4000;
        assert_eq!(small.pool_size(), 2);
        let _ = &mut small;
    }

    #[test]
    fn dhcp_discover_carries_the_hostname() {
        let config = NetworkConfig::dhcp("pi-on-the-shelf", 99);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(2),
            server(),
            at(0),
        )
        .unwrap();
        appliance.poll(at(0));
        let (kind, options) = appliance
            .device()
            .tx
            .iter()
            .find_map(|f| dhcp_options(f))
            .expect("a DHCP message was sent");
        assert_eq!(kind, DhcpMessageType::Discover);
        let hostname = options.iter().find(|(k, _)| *k == 12).expect("option 12");
        assert_eq!(hostname.1, b"pi-on-the-shelf");
        assert_eq!(appliance.ipv4_address(), None);
    }

    #[test]
    fn link_loss_is_noticed_and_dhcp_restarts_when_it_returns() {
        let config = NetworkConfig::dhcp("bramble", 1);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        appliance.poll(at(0));
        assert_eq!(discovers(appliance.device()), 1);
        appliance.device_mut().tx.clear();
        appliance.device_mut().link = LinkState::Down;
        appliance.poll(at(500));
        assert_eq!(appliance.counters().link_losses, 1);
        appliance.device_mut().tx.clear();
        appliance.device_mut().link = LinkState::Up;
        appliance.poll(at(1000));
        // Well before the DHCP client's own retry (10 s), a fresh DISCOVER goes out.
        assert_eq!(discovers(appliance.device()), 1);
    }

    #[test]
    fn with_the_link_down_and_nothing_sendable_the_loop_sleeps_until_the_next_link_check() {
        let config = NetworkConfig::dhcp("bramble", 1);
        let mut device = MockDevice::new(GUEST_MAC);
        device.link = LinkState::Down;
        device.tx_ready = false;
        let mut appliance = Appliance::new(device, config, memory(1), server(), at(0)).unwrap();
        for step in 0..5u64 {
            let now = at(step * 1_000);
            let next = appliance.poll(now).expect("a wake-up time");
            assert!(
                next.micros_since(now) >= LINK_DOWN_CHECK_MICROS / 2,
                "woken again after only {} us: the idle loop would spin",
                next.micros_since(now)
            );
        }
        assert!(appliance.device().tx.is_empty());
    }

    #[test]
    fn with_the_link_down_past_the_link_local_wait_the_loop_still_sleeps() {
        // No device at all (the USB NIC is missing): DHCP has waited longer than the
        // link-local fallback's delay, which is not taken while the link is down.
        let config = NetworkConfig::dhcp("bramble", 1);
        let mut device = MockDevice::new(GUEST_MAC);
        device.link = LinkState::Down;
        let mut appliance = Appliance::new(device, config, memory(1), server(), at(0)).unwrap();
        let after_wait = LINK_LOCAL_AFTER_MICROS / 1_000 + 500;
        for step in 0..5u64 {
            let now = at(after_wait + step);
            let next = appliance.poll(now).expect("a wake-up time");
            assert!(
                next.micros_since(now) >= LINK_DOWN_CHECK_MICROS / 2,
                "woken again after only {} us: the idle loop would spin",
                next.micros_since(now)
            );
        }
        assert_eq!(appliance.ipv4_address(), None);
    }

    #[test]
    fn with_the_transmit_path_busy_the_loop_waits_for_the_device_instead_of_spinning() {
        // Link up, but the device cannot take a frame (a USB transfer in flight): smoltcp
        // still wants to send its DHCP DISCOVER, so its own timer says "now" for ever.
        let config = NetworkConfig::dhcp("bramble", 1);
        let mut device = MockDevice::new(GUEST_MAC);
        device.tx_ready = false;
        let mut appliance = Appliance::new(device, config, memory(1), server(), at(0)).unwrap();
        for step in 0..5u64 {
            let now = at(step);
            let next = appliance.poll(now).expect("a wake-up time");
            assert!(
                next.micros_since(now) >= TRANSMIT_BUSY_RECHECK_MICROS,
                "woken again after only {} us: the idle loop would spin",
                next.micros_since(now)
            );
        }
        // Once the device can send again, the DISCOVER goes out on the next poll.
        appliance.device_mut().tx_ready = true;
        appliance.poll(at(10));
        assert_eq!(discovers(appliance.device()), 1);
    }

    #[test]
    fn a_vanished_device_is_reported_and_can_be_replaced() {
        let config = NetworkConfig::dhcp("bramble", 1);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        appliance.poll(at(0));
        assert_eq!(appliance.device_fault(), None);
        appliance
            .device_mut()
            .rx
            .push_back(Err(bramble_hal::DeviceError::Gone));
        appliance.poll(at(10));
        assert_eq!(
            appliance.device_fault(),
            Some(bramble_hal::DeviceError::Gone)
        );
        let new_mac = [2, 0, 0, 0, 0, 9];
        let old = appliance.replace_device(MockDevice::new(new_mac));
        assert_eq!(old.mac.0, GUEST_MAC);
        assert_eq!(appliance.device_fault(), None);
        appliance.poll(at(20));
        // The new device is used at once: a DISCOVER from the new MAC.
        let device = appliance.device();
        assert_eq!(discovers(device), 1);
        let discover = device
            .tx
            .iter()
            .find(|f| dhcp_options(f).is_some())
            .unwrap();
        assert_eq!(&discover[6..12], &new_mac);
    }

    #[test]
    fn a_device_that_returns_with_another_mac_has_it_adopted() {
        // A self-recovering device (ReprobingNic) goes down and comes back as another
        // adapter, without replace_device.
        let config = NetworkConfig::dhcp("bramble", 1);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        appliance.poll(at(0));
        appliance.device_mut().link = LinkState::Down;
        appliance.poll(at(10));
        let new_mac = [2, 0, 0, 0, 0, 7];
        appliance.device_mut().mac = bramble_hal::MacAddress(new_mac);
        appliance.device_mut().tx.clear();
        appliance.device_mut().link = LinkState::Up;
        appliance.poll(at(20));
        let device = appliance.device();
        let discover = device
            .tx
            .iter()
            .find(|f| dhcp_options(f).is_some())
            .expect("DHCP asks again after the link returns");
        assert_eq!(&discover[6..12], &new_mac, "sent from the new MAC");
    }

    #[test]
    fn without_a_dhcp_answer_a_link_local_address_is_taken() {
        let config = NetworkConfig::dhcp("bramble", 3);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        let wake = appliance.poll(at(0)).unwrap();
        assert!(wake <= at(10_000));
        appliance.poll(at(9_999));
        assert_eq!(appliance.ipv4_address(), None);
        appliance.poll(at(10_000));
        let [a, b, c, _] = appliance.ipv4_address().expect("link-local address");
        assert_eq!([a, b], [169, 254]);
        assert!(
            (1..=254).contains(&c),
            "RFC 3927 excludes 169.254.0.x and 169.254.255.x"
        );
        assert!(appliance.is_link_local());
        // The same device picks the same address every time.
        let mut again = Appliance::new(
            MockDevice::new(GUEST_MAC),
            NetworkConfig::dhcp("bramble", 4),
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        again.poll(at(10_000));
        assert_eq!(again.ipv4_address(), appliance.ipv4_address());
        // mDNS now probes for the name with that address.
        appliance.device_mut().tx.clear();
        let wake = appliance.poll(at(10_001)).unwrap();
        appliance.poll(wake);
        let probe = appliance
            .device()
            .tx
            .iter()
            .find(|f| f[..6] == [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb])
            .expect("an mDNS probe");
        assert_eq!(
            &probe[26..30],
            &[169, 254, c, appliance.ipv4_address().unwrap()[3]]
        );
    }

    const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x67];
    const SERVER_ADDRESS: [u8; 4] = [10, 0, 0, 1];
    const LEASED_ADDRESS: [u8; 4] = [10, 0, 0, 50];

    /// The transaction ID and client address of the last DHCP message of `kind` sent.
    fn last_dhcp(device: &MockDevice, kind: DhcpMessageType) -> Option<(u32, [u8; 4])> {
        device.tx.iter().rev().find_map(|frame| {
            if dhcp_options(frame)?.0 != kind {
                return None;
            }
            let ip = Ipv4Packet::new_checked(&frame[14..]).ok()?;
            let udp = UdpPacket::new_checked(ip.payload()).ok()?;
            let dhcp = DhcpPacket::new_checked(udp.payload()).ok()?;
            Some((dhcp.transaction_id(), dhcp.client_ip().octets()))
        })
    }

    /// A broadcast reply of `kind` from the test's DHCP server, offering [`LEASED_ADDRESS`]
    /// for `lease_seconds`.
    fn server_reply(kind: DhcpMessageType, transaction_id: u32, lease_seconds: u32) -> Vec<u8> {
        let server = Ipv4Address::from_octets(SERVER_ADDRESS);
        let dhcp = DhcpRepr {
            message_type: kind,
            transaction_id,
            secs: 0,
            client_hardware_address: EthernetAddress(GUEST_MAC),
            client_ip: Ipv4Address::UNSPECIFIED,
            your_ip: Ipv4Address::from_octets(LEASED_ADDRESS),
            server_ip: server,
            router: None,
            subnet_mask: Some(Ipv4Address::new(255, 255, 255, 0)),
            relay_agent_ip: Ipv4Address::UNSPECIFIED,
            broadcast: false,
            requested_ip: None,
            client_identifier: None,
            server_identifier: Some(server),
            parameter_request_list: None,
            max_size: None,
            lease_duration: Some(lease_seconds),
            renew_duration: None,
            rebind_duration: None,
            dns_servers: None,
            additional_options: &[],
        };
        let dhcp_len = dhcp.buffer_len();
        let udp = UdpRepr {
            src_port: 67,
            dst_port: 68,
        };
        let ip = Ipv4Repr {
            src_addr: server,
            dst_addr: Ipv4Address::BROADCAST,
            next_header: IpProtocol::Udp,
            payload_len: 8 + dhcp_len,
            hop_limit: 64,
        };
        let ethernet = EthernetRepr {
            src_addr: EthernetAddress(SERVER_MAC),
            dst_addr: EthernetAddress::BROADCAST,
            ethertype: EthernetProtocol::Ipv4,
        };
        let checksums = ChecksumCapabilities::default();
        let mut frame = std::vec![0u8; 14 + 20 + 8 + dhcp_len];
        ethernet.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]), &checksums);
        udp.emit(
            &mut UdpPacket::new_unchecked(&mut frame[34..]),
            &server.into(),
            &Ipv4Address::BROADCAST.into(),
            dhcp_len,
            |payload| dhcp.emit(&mut DhcpPacket::new_unchecked(payload)).unwrap(),
            &checksums,
        );
        frame
    }

    /// Runs DISCOVER, OFFER, REQUEST, ACK from time 0; returns the instant the lease began.
    fn take_lease(appliance: &mut Appliance<'_, MockDevice>, lease_seconds: u32) -> Instant {
        appliance.poll(at(0));
        let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Discover).unwrap();
        let offer = server_reply(DhcpMessageType::Offer, xid, lease_seconds);
        appliance.device_mut().rx.push_back(Ok(offer));
        appliance.poll(at(10));
        let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Request).unwrap();
        let ack = server_reply(DhcpMessageType::Ack, xid, lease_seconds);
        appliance.device_mut().rx.push_back(Ok(ack));
        appliance.poll(at(20));
        assert_eq!(appliance.ipv4_address(), Some(LEASED_ADDRESS));
        at(20)
    }

    #[test]
    fn an_ack_received_in_any_pass_of_a_poll_is_applied_by_that_poll() {
        // Receive errors end a pass's receiving, so the ACK lands in pass 1, 2, 3, ... .
        for errors_first in 0..5 {
            let config = NetworkConfig::dhcp("bramble", 8);
            let mut appliance = Appliance::new(
                MockDevice::new(GUEST_MAC),
                config,
                memory(1),
                server(),
                at(0),
            )
            .unwrap();
            appliance.poll(at(0));
            let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Discover).unwrap();
            let offer = server_reply(DhcpMessageType::Offer, xid, 20);
            appliance.device_mut().rx.push_back(Ok(offer));
            appliance.poll(at(10));
            let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Request).unwrap();
            for _ in 0..errors_first {
                appliance
                    .device_mut()
                    .rx
                    .push_back(Err(bramble_hal::DeviceError::Transfer));
            }
            let ack = server_reply(DhcpMessageType::Ack, xid, 20);
            appliance.device_mut().rx.push_back(Ok(ack));
            let mut now = at(20);
            while !appliance.device().rx.is_empty() {
                appliance.poll(now);
                now = now.add_micros(1_000);
            }
            let taken = now.as_micros() - 1_000;
            assert_eq!(
                appliance.ipv4_address(),
                Some(LEASED_ADDRESS),
                "ACK after {errors_first} receive errors: received but not applied"
            );
            // The expiry is counted from the same instant as smoltcp's.
            assert_eq!(
                appliance.lease_expires_at,
                Some(Instant::from_micros(taken + 20_000_000)),
                "ACK after {errors_first} receive errors"
            );
        }
    }

    #[test]
    fn a_lease_that_runs_out_unrenewed_is_replaced_by_link_local_at_once() {
        let config = NetworkConfig::dhcp("bramble", 5);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        let began = take_lease(&mut appliance, 20);
        let expires = began.add_micros(20_000_000);
        appliance.device_mut().tx.clear();
        // The server is gone. Follow the loop's own wake-ups until the address changes.
        let mut now = began;
        for _ in 0..10_000 {
            now = appliance.poll(now).expect("DHCP always has a deadline");
            appliance.poll(now);
            if appliance.ipv4_address() != Some(LEASED_ADDRESS) {
                break;
            }
        }
        assert!(now >= expires, "the lease was dropped early, at {now:?}");
        // It asked to keep the lease before giving it up (the unicast renewal at T1 waits
        // for the vanished server's ARP answer; the broadcast rebinding at T2 goes out).
        assert_eq!(
            last_dhcp(appliance.device(), DhcpMessageType::Request).map(|(_, ciaddr)| ciaddr),
            Some(LEASED_ADDRESS),
            "no REQUEST from the leased address before the lease ran out"
        );
        // No moment without an address: the server has been silent since T1, far longer
        // than the link-local wait, so the fallback comes with the expiry.
        let [a, b, ..] = appliance
            .ipv4_address()
            .expect("an address right after the lease ran out");
        assert_eq!([a, b], [169, 254]);
        assert!(appliance.is_link_local());
        // DHCP keeps asking, and a server that answers again replaces the fallback.
        let before = discovers(appliance.device());
        let later = now.add_micros(LINK_LOCAL_AFTER_MICROS);
        appliance.poll(later);
        assert!(
            discovers(appliance.device()) > before,
            "no DISCOVER after expiry"
        );
        let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Discover).unwrap();
        let offer = server_reply(DhcpMessageType::Offer, xid, 20);
        appliance.device_mut().rx.push_back(Ok(offer));
        appliance.poll(later.add_micros(10_000));
        let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Request).unwrap();
        let ack = server_reply(DhcpMessageType::Ack, xid, 20);
        appliance.device_mut().rx.push_back(Ok(ack));
        appliance.poll(later.add_micros(20_000));
        assert_eq!(appliance.ipv4_address(), Some(LEASED_ADDRESS));
        assert!(!appliance.is_link_local());
    }

    /// A frame from the test's DHCP server to the guest (or broadcast), of `ethertype`.
    fn server_frame(
        ethertype: EthernetProtocol,
        to: EthernetAddress,
        payload_len: usize,
    ) -> Vec<u8> {
        let ethernet = EthernetRepr {
            src_addr: EthernetAddress(SERVER_MAC),
            dst_addr: to,
            ethertype,
        };
        let mut frame = std::vec![0u8; 14 + payload_len];
        ethernet.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
        frame
    }

    /// The server asks who has [`LEASED_ADDRESS`] (which puts it in the guest's ARP cache).
    fn server_arp_request() -> Vec<u8> {
        let arp = ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: EthernetAddress(SERVER_MAC),
            source_protocol_addr: Ipv4Address::from_octets(SERVER_ADDRESS),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Address::from_octets(LEASED_ADDRESS),
        };
        let mut frame = server_frame(
            EthernetProtocol::Arp,
            EthernetAddress::BROADCAST,
            arp.buffer_len(),
        );
        arp.emit(&mut ArpPacket::new_unchecked(&mut frame[14..]));
        frame
    }

    /// The server pings [`LEASED_ADDRESS`].
    fn server_ping(sequence: u16) -> Vec<u8> {
        let icmp = Icmpv4Repr::EchoRequest {
            ident: 0x4242,
            seq_no: sequence,
            data: b"still there?",
        };
        let ip = Ipv4Repr {
            src_addr: Ipv4Address::from_octets(SERVER_ADDRESS),
            dst_addr: Ipv4Address::from_octets(LEASED_ADDRESS),
            next_header: IpProtocol::Icmp,
            payload_len: icmp.buffer_len(),
            hop_limit: 64,
        };
        let checksums = ChecksumCapabilities::default();
        let mut frame = server_frame(
            EthernetProtocol::Ipv4,
            EthernetAddress(GUEST_MAC),
            20 + icmp.buffer_len(),
        );
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]), &checksums);
        icmp.emit(
            &mut Icmpv4Packet::new_unchecked(&mut frame[34..]),
            &checksums,
        );
        frame
    }

    #[test]
    fn a_renewal_that_keeps_the_address_keeps_the_neighbour_cache() {
        let config = NetworkConfig::dhcp("bramble", 6);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        let began = take_lease(&mut appliance, 20);
        appliance
            .device_mut()
            .rx
            .push_back(Ok(server_arp_request()));
        appliance.poll(began.add_micros(1_000));
        appliance.device_mut().tx.clear();
        // Follow the loop's wake-ups to T1, when the renewal REQUEST goes to the server.
        let mut now = began.add_micros(1_000);
        let mut renewal = None;
        for _ in 0..10_000 {
            now = appliance.poll(now).expect("DHCP always has a deadline");
            appliance.poll(now);
            renewal = last_dhcp(appliance.device(), DhcpMessageType::Request);
            if renewal.is_some() {
                break;
            }
        }
        let (xid, ciaddr) = renewal.expect("no renewal REQUEST");
        assert_eq!(ciaddr, LEASED_ADDRESS);
        let ack = server_reply(DhcpMessageType::Ack, xid, 20);
        appliance.device_mut().rx.push_back(Ok(ack));
        appliance.poll(now.add_micros(1_000));
        assert_eq!(appliance.ipv4_address(), Some(LEASED_ADDRESS));
        assert_eq!(
            appliance.lease_expires_at,
            Some(now.add_micros(1_000 + 20_000_000))
        );
        // The server is still known: its ping is answered at once, with no ARP first.
        appliance.device_mut().tx.clear();
        appliance.device_mut().rx.push_back(Ok(server_ping(1)));
        appliance.poll(now.add_micros(2_000));
        let sent = &appliance.device().tx;
        let arp = sent
            .iter()
            .filter(|f| {
                EthernetFrame::new_checked(&f[..]).unwrap().ethertype() == EthernetProtocol::Arp
            })
            .count();
        let replies = sent
            .iter()
            .filter(|f| {
                f[..6] == SERVER_MAC
                    && f.len() > 34
                    && f[23] == 1 // IPv4 protocol: ICMP
                    && f[34] == 0 // ICMP type: echo reply
            })
            .count();
        assert_eq!(
            (arp, replies),
            (0, 1),
            "ARP requests and echo replies after a renewal"
        );
    }

    #[test]
    fn idle_poll_sleeps_until_the_mdns_probe_and_sends_it() {
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            static_config(true),
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        let wake = appliance.poll(at(0)).expect("the mDNS probe is pending");
        assert!(wake > at(0) && wake <= at(250), "{wake:?}");
        appliance.device_mut().tx.clear();
        // Polling early sends nothing multicast.
        let early = appliance.poll(Instant::from_micros(wake.as_micros() - 1));
        assert_eq!(early, Some(wake));
        let multicast = |d: &MockDevice| {
            d.tx.iter()
                .filter(|f| f[..6] == [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb])
                .count()
        };
        assert_eq!(multicast(appliance.device()), 0);
        appliance.poll(wake);
        assert_eq!(multicast(appliance.device()), 1, "one probe to 224.0.0.251");
        // With mDNS off and nothing happening, there is nothing to wake for.
        let mut quiet = Appliance::new(
            MockDevice::new(GUEST_MAC),
            static_config(false),
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        assert_eq!(quiet.poll(at(0)), None);
        assert_eq!(quiet.poll(at(60_000)), None);
    }

    /// A plain smoltcp client on the other end of the wire.
    struct Client {
        phy: EthernetPhy<WiredDevice>,
        iface: Interface,
        sockets: SocketSet<'static>,
    }

    impl Client {
        fn new(device: WiredDevice) -> Self {
            let mut phy = EthernetPhy::new(device);
            let config = Config::new(HardwareAddress::Ethernet(EthernetAddress(CLIENT_MAC)));
            let mut iface = Interface::new(config, &mut phy, smol(at(0)));
            iface.update_ip_addrs(|a| {
                a.push(IpCidr::new(IpAddress::v4(10, 0, 0, 1), 24)).unwrap();
            });
            let storage = Box::leak(Box::new([SocketStorage::EMPTY; 4]));
            Self {
                phy,
                iface,
                sockets: SocketSet::new(&mut storage[..]),
            }
        }

        fn connect(&mut self, local_port: u16) -> SocketHandle {
            let rx = Box::leak(std::vec![0u8; 65536].into_boxed_slice());
            let tx = Box::leak(std::vec![0u8; 4096].into_boxed_slice());
            let mut socket =
                tcp::Socket::new(tcp::SocketBuffer::new(rx), tcp::SocketBuffer::new(tx));
            socket
                .connect(
                    self.iface.context(),
                    (Ipv4Address::new(10, 0, 0, 2), 80),
                    local_port,
                )
                .unwrap();
            self.sockets.add(socket)
        }

        fn socket(&mut self, handle: SocketHandle) -> &mut tcp::Socket<'static> {
            self.sockets.get_mut::<tcp::Socket>(handle)
        }

        fn poll(&mut self, now: Instant) {
            self.iface.poll(smol(now), &mut self.phy, &mut self.sockets);
        }
    }

    /// Runs both ends for up to `steps` milliseconds or until `done` says so.
    fn run_until(
        appliance: &mut Appliance<'static, WiredDevice>,
        client: &mut Client,
        clock: &mut u64,
        steps: u64,
        mut done: impl FnMut(&mut Client) -> bool,
    ) -> bool {
        for _ in 0..steps {
            appliance.poll(at(*clock));
            client.poll(at(*clock));
            if done(client) {
                return true;
            }
            *clock += 1;
        }
        false
    }

    fn read_all(client: &mut Client, handle: SocketHandle, into: &mut Vec<u8>) {
        let socket = client.socket(handle);
        while socket.can_recv() {
            socket
                .recv(|d| {
                    into.extend_from_slice(d);
                    (d.len(), ())
                })
                .unwrap();
        }
    }

    #[test]
    fn serves_http_to_a_tcp_client_over_the_wire() {
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let mut appliance =
            Appliance::new(guest, static_config(false), memory(2), server(), at(0)).unwrap();
        let mut client = Client::new(host);
        let handle = client.connect(40000);
        let mut clock = 0;
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            1000,
            |c| c.socket(handle).may_send()
        ));
        let request = b"GET / HTTP/1.1\r\nHost: bramble\r\n\r\nGET /nothing HTTP/1.0\r\n\r\n";
        client.socket(handle).send_slice(request).unwrap();
        let mut response = Vec::new();
        let closed = run_until(&mut appliance, &mut client, &mut clock, 5000, |c| {
            read_all(c, handle, &mut response);
            !c.socket(handle).may_recv()
        });
        let text = String::from_utf8_lossy(&response);
        assert!(
            closed,
            "the HTTP/1.0 request should close the connection:\n{text}"
        );
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(response.windows(BODY.len()).any(|w| w == BODY));
        let second = text
            .find("HTTP/1.1 404")
            .expect("pipelined 404 after the 200");
        assert!(second > text.find(core::str::from_utf8(BODY).unwrap()).unwrap());
        assert_eq!(appliance.counters().connections_opened, 1);
        client.socket(handle).close();
        run_until(&mut appliance, &mut client, &mut clock, 2000, |_| false);
        assert_eq!(appliance.open_connections(), 0, "the slot is free again");
    }

    /// The guest's end of the wire with the client running at the same time: whenever the
    /// appliance finds no frame waiting, the client takes a turn first and answers what the
    /// appliance has sent so far. ACKs then arrive in the middle of the appliance's poll,
    /// including its last pass, as they do from a fast client on a real network.
    struct ConcurrentDevice {
        wire: WiredDevice,
        client: std::rc::Rc<core::cell::RefCell<Client>>,
        clock: std::rc::Rc<core::cell::Cell<u64>>,
    }

    impl EthernetDevice for ConcurrentDevice {
        fn mac_address(&self) -> bramble_hal::MacAddress {
            self.wire.mac_address()
        }

        fn link_state(&mut self) -> LinkState {
            self.wire.link_state()
        }

        fn receive<R>(
            &mut self,
            f: impl FnOnce(&[u8]) -> R,
        ) -> Result<Option<R>, bramble_hal::DeviceError> {
            if !self.wire.has_frames_waiting() {
                self.client.borrow_mut().poll(at(self.clock.get()));
            }
            self.wire.receive(f)
        }

        fn can_transmit(&mut self) -> bool {
            self.wire.can_transmit()
        }

        fn transmit<R>(
            &mut self,
            len: usize,
            f: impl FnOnce(&mut [u8]) -> R,
        ) -> Result<R, bramble_hal::DeviceError> {
            self.wire.transmit(len, f)
        }
    }

    #[test]
    fn acks_taken_in_the_last_pass_of_a_poll_are_used_in_that_poll() {
        // A 20 KB answer through a 4 KiB send buffer to a client that acknowledges at once.
        // The appliance runs only when a frame waits for it or its own wake-up time comes.
        // If the ACKs of its last pass freed send space that nothing refills, nothing
        // arrives any more (the client waits for data) and the answer stalls until a timer.
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let clock = std::rc::Rc::new(core::cell::Cell::new(0u64));
        let client = std::rc::Rc::new(core::cell::RefCell::new(Client::new(host)));
        let device = ConcurrentDevice {
            wire: guest,
            client: client.clone(),
            clock: clock.clone(),
        };
        let mut appliance =
            Appliance::new(device, static_config(false), memory(1), server(), at(0)).unwrap();
        let handle = client.borrow_mut().connect(40002);
        let mut wake = Some(at(0));
        let mut response = Vec::new();
        let body = big_body();
        let mut requested = false;
        let mut done_at = None;
        for millis in 0..5_000u64 {
            clock.set(millis);
            for _ in 0..64 {
                let waiting = appliance.device().wire.has_frames_waiting();
                if !waiting && wake.is_none_or(|w| w.as_micros() > at(millis).as_micros()) {
                    break;
                }
                wake = appliance.poll(at(millis));
            }
            let mut client = client.borrow_mut();
            client.poll(at(millis));
            if !requested && client.socket(handle).may_send() {
                client
                    .socket(handle)
                    .send_slice(b"GET /big.bin HTTP/1.1\r\nHost: b\r\n\r\n")
                    .unwrap();
                client.poll(at(millis));
                requested = true;
                done_at = Some(millis);
            }
            read_all(&mut client, handle, &mut response);
            if response.ends_with(&body) {
                let took = millis - done_at.unwrap();
                assert!(
                    took < 10,
                    "the answer stalled: {took} ms of simulated time for 20 KB"
                );
                return;
            }
        }
        panic!(
            "the whole body within 5 s simulated ({} of {} bytes)",
            response.len(),
            body.len()
        );
    }

    #[test]
    fn answers_many_pipelined_requests_in_order() {
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let mut appliance =
            Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
        let mut client = Client::new(host);
        let handle = client.connect(40010);
        let mut clock = 0;
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            1000,
            |c| c.socket(handle).may_send()
        ));
        let mut requests = Vec::new();
        for i in 0..30 {
            let path = if i % 3 == 2 { "/missing" } else { "/" };
            requests.extend_from_slice(
                std::format!("GET {path} HTTP/1.1\r\nHost: b\r\n\r\n").as_bytes(),
            );
        }
        requests.extend_from_slice(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n");
        let mut sent = 0;
        let mut response = Vec::new();
        let closed = run_until(&mut appliance, &mut client, &mut clock, 20_000, |c| {
            let socket = c.socket(handle);
            if sent < requests.len() && socket.can_send() {
                sent += socket.send_slice(&requests[sent..]).unwrap();
            }
            read_all(c, handle, &mut response);
            !c.socket(handle).may_recv()
        });
        let text = String::from_utf8_lossy(&response);
        assert!(closed, "not closed after the last request");
        let statuses: Vec<&str> = text
            .match_indices("HTTP/1.1 ")
            .map(|(i, _)| &text[i + 9..i + 12])
            .collect();
        let mut expected: Vec<&str> = (0..30)
            .map(|i| if i % 3 == 2 { "404" } else { "200" })
            .collect();
        expected.push("200");
        assert_eq!(statuses, expected);
    }

    #[test]
    fn an_unfinished_handshake_frees_its_slot_after_the_limit() {
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let link = host.link.clone();
        let mut appliance =
            Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
        let mut client = Client::new(host);
        client.connect(40020);
        // Run until the guest has answered the SYN, then cut the wire: the final ACK of
        // the handshake never arrives.
        let mut clock = 0;
        while appliance.pool[0].since.is_none() {
            assert!(clock < 1000, "no SYN arrived");
            client.poll(at(clock));
            appliance.poll(at(clock));
            clock += 1;
        }
        *link.borrow_mut() = LinkState::Down;
        let wake = appliance
            .poll(at(clock))
            .expect("a deadline for the handshake");
        assert!(wake <= at(clock).add_micros(HANDSHAKE_LIMIT_MICROS));
        appliance.poll(at(clock).add_micros(HANDSHAKE_LIMIT_MICROS));
        assert_eq!(appliance.counters().handshakes_abandoned, 1);
        // The slot serves the next client.
        *link.borrow_mut() = LinkState::Up;
        let mut clock = clock + HANDSHAKE_LIMIT_MICROS / 1000 + 1;
        let next = client.connect(40021);
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            3000,
            |c| c.socket(next).may_send()
        ));
    }

    #[test]
    fn an_aborted_connection_sends_its_peer_a_reset() {
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let mut appliance =
            Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
        let mut client = Client::new(host);
        let handle = client.connect(40040);
        let mut clock = 0;
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            1000,
            |c| c.socket(handle).may_send()
        ));
        // Half a header, then silence: the engine aborts at its header deadline (10 s).
        client
            .socket(handle)
            .send_slice(b"GET / HTTP/1.1\r\nHost: b\r\nX-Slow: ")
            .unwrap();
        for _ in 0..40 {
            clock += 500;
            client.poll(at(clock));
            appliance.poll(at(clock));
            client.poll(at(clock));
        }
        assert_eq!(appliance.counters().connections_aborted, 1);
        assert_eq!(
            client.socket(handle).state(),
            tcp::State::Closed,
            "the client was never told (no RST), so it would wait for ever"
        );
    }

    #[test]
    fn a_client_that_vanishes_during_close_frees_its_slot() {
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let link = host.link.clone();
        let mut appliance =
            Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
        let mut client = Client::new(host);
        let handle = client.connect(40030);
        let mut clock = 0;
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            1000,
            |c| c.socket(handle).may_send()
        ));
        client
            .socket(handle)
            .send_slice(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
            .unwrap();
        while !appliance.pool[0].closing {
            assert!(clock < 5000, "the guest never closed");
            client.poll(at(clock));
            appliance.poll(at(clock));
            clock += 1;
        }
        // The client disappears: our FIN is never acknowledged.
        *link.borrow_mut() = LinkState::Down;
        for step in 0..=CLOSE_LIMIT_MICROS / 500_000 {
            appliance.poll(at(clock).add_micros(step * 500_000));
        }
        // Either the HTTP engine's close deadline (10 s) or the appliance's own close limit
        // (30 s) ends it; the slot must be free either way.
        let freed = appliance.counters().closes_abandoned + appliance.server().counters().timeouts;
        assert!(freed >= 1, "neither deadline ended the stuck close");
        assert_eq!(appliance.open_connections(), 0);
    }

    #[test]
    fn a_full_pool_defers_extra_clients_until_a_socket_is_free() {
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let mut appliance =
            Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
        let mut client = Client::new(host);
        let first = client.connect(40001);
        let mut clock = 0;
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            1000,
            |c| c.socket(first).may_send()
        ));
        // The only socket is taken: the second client's SYN is dropped, not refused, so
        // it keeps trying (no reset, the connection is still being opened).
        let second = client.connect(40002);
        run_until(&mut appliance, &mut client, &mut clock, 500, |_| false);
        assert_eq!(client.socket(second).state(), tcp::State::SynSent);
        assert!(appliance.phy_counters().syn_deferred >= 1);
        // The first is served and closes; the second client's next SYN finds the socket.
        client
            .socket(first)
            .send_slice(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut response = Vec::new();
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            5000,
            |c| {
                read_all(c, first, &mut response);
                !c.socket(first).may_recv()
            }
        ));
        assert!(response.starts_with(b"HTTP/1.1 200 OK"));
        client.socket(first).close();
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            10_000,
            |c| c.socket(second).may_send()
        ));
        client
            .socket(second)
            .send_slice(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n")
            .unwrap();
        let mut response = Vec::new();
        assert!(run_until(
            &mut appliance,
            &mut client,
            &mut clock,
            5000,
            |c| {
                read_all(c, second, &mut response);
                response.windows(BODY.len()).any(|w| w == BODY)
            }
        ));
    }
}
