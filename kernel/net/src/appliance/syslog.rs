//! The syslog sender: one UDP socket that sends the kernel's log lines to the owner's
//! collector as RFC 5424 messages (see [`bramble_proto::syslog`] for the format, the ring and the
//! rate limit). It reads the ring behind its own cursor and never waits: lines wait in the
//! ring while the interface has no address of the collector's family or the socket's queue is
//! full, and are counted as dropped when the ring overwrote them first or the token bucket
//! was empty.
//!
//! A collector given by name is looked up on its own DNS socket (A, then AAAA if that
//! fails), through the same name servers as the clock's and ACME's lookups; lines wait in
//! the ring until the first answer. The answer is kept at most [`LOOKUP_LIFETIME_MICROS`]
//! (smoltcp does not pass the record's TTL on) and then looked up again, the old address
//! serving meanwhile; a failed lookup is tried again after [`LOOKUP_RETRY_MICROS`].

use super::Appliance;
use bramble_hal::{EthernetDevice, Instant};
use bramble_proto::syslog::{
    LineSource, MAX_MESSAGE_LEN, MessageBuffer, TokenBucket, format_message,
};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::dns::{self, GetQueryResultError};
use smoltcp::socket::udp;
use smoltcp::wire::{DnsQueryType, IpAddress, IpCidr, IpEndpoint};

/// Datagrams queued on the socket.
const SYSLOG_PACKETS: usize = 8;
/// The local port the messages leave from.
const SYSLOG_LOCAL_PORT: u16 = 50_514;
/// Most lines looked at in one poll (the rest wait for the next).
const LINES_PER_POLL: usize = 16;
/// While lines wait for an address or queue room, how often to look again.
const RETRY_MICROS: u64 = 100_000;
/// How long a looked-up address of the collector is used before it is looked up again.
pub const LOOKUP_LIFETIME_MICROS: u64 = 300_000_000;
/// After a failed lookup, when to try again.
pub const LOOKUP_RETRY_MICROS: u64 = 30_000_000;
/// While a lookup is out, or no name server is known yet, how often to look at it.
const LOOKUP_CHECK_MICROS: u64 = 100_000;

/// Memory for the syslog socket: its send queue (it receives nothing).
pub struct SyslogMemory {
    rx_meta: [udp::PacketMetadata; 1],
    tx_meta: [udp::PacketMetadata; SYSLOG_PACKETS],
    rx: [u8; 0],
    tx: [u8; SYSLOG_PACKETS * MAX_MESSAGE_LEN],
    /// The collector's name being looked up.
    dns_queries: [Option<dns::DnsQuery>; 1],
}

impl SyslogMemory {
    /// Empty queues.
    pub const fn new() -> Self {
        Self {
            rx_meta: [udp::PacketMetadata::EMPTY; 1],
            tx_meta: [udp::PacketMetadata::EMPTY; SYSLOG_PACKETS],
            rx: [],
            tx: [0; SYSLOG_PACKETS * MAX_MESSAGE_LEN],
            dns_queries: [None],
        }
    }
}

impl Default for SyslogMemory {
    fn default() -> Self {
        Self::new()
    }
}

/// The collector, as the owner gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectorHost<'a> {
    /// An IPv4 or IPv6 address.
    Address(core::net::IpAddr),
    /// A DNS name, looked up (module docs).
    Name(&'a str),
}

impl CollectorHost<'_> {
    /// Socket slots the sender takes: its UDP socket, and a DNS socket for a name.
    pub fn sockets(&self) -> usize {
        match self {
            CollectorHost::Address(_) => 1,
            CollectorHost::Name(_) => 2,
        }
    }
}

/// Where the log goes and what it reads.
#[derive(Clone, Copy)]
pub struct SyslogConfig<'a> {
    /// The collector's address or name, and its port.
    pub collector: (CollectorHost<'a>, u16),
    /// Name servers for a static address (DHCP gives its own), for a collector's name.
    pub dns_servers: &'a [[u8; 4]],
    /// The HOSTNAME field.
    pub hostname: &'a str,
    /// The kernel's log ring.
    pub lines: &'a dyn LineSource,
}

/// What the sender has done, for the status line and the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyslogCounters {
    /// Messages handed to the socket.
    pub sent: u64,
    /// Lines never sent: the ring overwrote them first, or the bucket was empty.
    pub dropped: u64,
}

pub(super) struct SyslogState<'a> {
    socket: SocketHandle,
    /// Where the messages go (`None`: the name is not looked up yet).
    collector: Option<IpEndpoint>,
    port: u16,
    /// The collector's name, its DNS socket, and the name servers for a static address.
    name: Option<(&'a str, SocketHandle)>,
    dns_servers: &'a [[u8; 4]],
    /// The lookup under way, and whether it asks for AAAA (after A failed).
    query: Option<dns::QueryHandle>,
    ask_aaaa: bool,
    /// When to look the name up (again).
    next_lookup: Option<Instant>,
    hostname: &'a str,
    lines: &'a dyn LineSource,
    /// The next line to send.
    cursor: u64,
    bucket: TokenBucket,
    counters: SyslogCounters,
    /// Lines wait for an address or queue room: look again then.
    retry_at: Option<Instant>,
    message: MessageBuffer,
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Starts sending the log to `config.collector`, from the ring's oldest line kept, in
    /// `memory` and one of the kept-back socket slots. Can be called once.
    pub fn start_syslog(
        &mut self,
        config: SyslogConfig<'a>,
        memory: &'a mut SyslogMemory,
        now: Instant,
    ) {
        let (host, port) = config.collector;
        if self.syslog.is_some() || self.sockets_free() < host.sockets() {
            log::warn!("syslog: no socket slot left; the log stays on the console");
            return;
        }
        let SyslogMemory {
            rx_meta,
            tx_meta,
            rx,
            tx,
            dns_queries,
        } = memory;
        let mut socket = udp::Socket::new(
            udp::PacketBuffer::new(&mut rx_meta[..], &mut rx[..]),
            udp::PacketBuffer::new(&mut tx_meta[..], &mut tx[..]),
        );
        // Cannot fail: the port is not zero and the socket is new.
        let _ = socket.bind(SYSLOG_LOCAL_PORT);
        let socket = self.sockets.add(socket);
        let (collector, name) = match host {
            CollectorHost::Address(address) => {
                (Some(IpEndpoint::new(IpAddress::from(address), port)), None)
            }
            CollectorHost::Name(name) => {
                let dns = self
                    .sockets
                    .add(dns::Socket::new(&[], &mut dns_queries[..]));
                (None, Some((name, dns)))
            }
        };
        let cursor = match config.lines.copy_line(0) {
            Ok(_) => 0,
            Err(oldest) => oldest,
        };
        self.syslog = Some(SyslogState {
            socket,
            collector,
            port,
            name,
            dns_servers: config.dns_servers,
            query: None,
            ask_aaaa: false,
            next_lookup: None,
            hostname: config.hostname,
            lines: config.lines,
            cursor,
            bucket: TokenBucket::new(now.as_micros()),
            counters: SyslogCounters::default(),
            retry_at: None,
            message: MessageBuffer::new(),
        });
        match host {
            CollectorHost::Address(address) => {
                log::info!("syslog: sending the log to {address} port {port}")
            }
            CollectorHost::Name(name) => log::info!(
                "syslog: sending the log to {name} port {port}, once the name is looked up"
            ),
        }
    }

    /// Gives the status page and metrics `snapshot` (the board's figures) with the
    /// appliance's own filled in: syslog, TLS handshakes, the defences' cuts (refusals,
    /// evictions, timeouts), ACME's certificate and next order.
    pub fn set_status_snapshot(&mut self, mut snapshot: bramble_http::status::StatusSnapshot) {
        if let Some(counters) = self.syslog_counters() {
            snapshot.syslog_sent = counters.sent;
            snapshot.syslog_dropped = counters.dropped;
        }
        if let Some(tls) = self.tls_counters() {
            snapshot.tls_handshakes = tls.full_handshakes + tls.resumed_handshakes;
            snapshot.tls_failures = tls.failures;
        }
        // ACME's certificate and its next order (the board fills in a certificate of the
        // card's own; the uptime is the appliance's clock).
        let now = Instant::from_micros(snapshot.uptime_micros);
        if let Some(acme) = self.acme_status(now) {
            snapshot.certificate_not_after = acme.not_after.or(snapshot.certificate_not_after);
            snapshot.next_renewal = match (acme.next_order_in, snapshot.unix_seconds) {
                (Some(wait), Some(unix)) => i64::try_from(unix.saturating_add(wait)).ok(),
                _ => None,
            };
        }
        snapshot.router = self.router_summary();
        snapshot.reach = self.reach_summary(now);
        let pool = self.pool_counters();
        snapshot.defence_drops = pool.refused_full
            + pool.refused_source
            + pool.bad_cookies
            + pool.evictions()
            + pool.timeouts();
        self.server.borrow_mut().set_status_snapshot(snapshot);
    }

    /// Whether the visitor counts want a fresh salt ([`bramble_http::visitors`]).
    pub fn wants_visitor_salt(&self) -> bool {
        self.server().wants_visitor_salt()
    }

    /// Gives the visitor counts a fresh salt from the CSPRNG for the next day.
    pub fn offer_visitor_salt(&mut self, salt: [u8; 16]) {
        self.server.borrow_mut().offer_visitor_salt(salt);
    }

    /// The sender's counts, once started.
    pub fn syslog_counters(&self) -> Option<SyslogCounters> {
        self.syslog.as_ref().map(|state| state.counters)
    }

    /// Sends what the ring has gained since the last poll, as the bucket and queue allow.
    pub(super) fn poll_syslog(&mut self, now: Instant) {
        self.look_up_collector(now);
        let Some(state) = &mut self.syslog else {
            return;
        };
        state.retry_at = None;
        let Some(collector) = state.collector else {
            // Lines wait in the ring for the first answer.
            state.retry_at = Some(match (state.query, state.next_lookup) {
                (None, Some(at)) if at > now => at,
                _ => now.add_micros(LOOKUP_CHECK_MICROS),
            });
            return;
        };
        let has_source = self.iface.ip_addrs().iter().any(|cidr| {
            matches!(
                (cidr, collector.addr),
                (IpCidr::Ipv4(_), IpAddress::Ipv4(_)) | (IpCidr::Ipv6(_), IpAddress::Ipv6(_))
            )
        });
        let socket = self.sockets.get_mut::<udp::Socket>(state.socket);
        for _ in 0..LINES_PER_POLL {
            if state.cursor >= state.lines.next_sequence() {
                return;
            }
            if !has_source || !socket.can_send() {
                state.retry_at = Some(now.add_micros(RETRY_MICROS));
                return;
            }
            let line = match state.lines.copy_line(state.cursor) {
                Ok(line) => line,
                Err(oldest) => {
                    // Overwritten before it could go: skip to the oldest kept.
                    state.counters.dropped += oldest.saturating_sub(state.cursor);
                    state.cursor = oldest.max(state.cursor);
                    continue;
                }
            };
            state.cursor += 1;
            if !state.bucket.take(now.as_micros()) {
                state.counters.dropped += 1;
                continue;
            }
            format_message(&line, state.hostname, &mut state.message);
            match socket.send_slice(state.message.as_bytes(), collector) {
                Ok(()) => state.counters.sent += 1,
                Err(_) => state.counters.dropped += 1,
            }
        }
        // More lines than one poll takes: come back at once.
        state.retry_at = Some(now);
    }

    /// Looks the collector's name up when it is due (first, after [`LOOKUP_LIFETIME_MICROS`],
    /// or [`LOOKUP_RETRY_MICROS`] after a failure), and takes in the answer.
    fn look_up_collector(&mut self, now: Instant) {
        let Some(state) = &mut self.syslog else {
            return;
        };
        let Some((name, dns)) = state.name else {
            return;
        };
        let socket = self.sockets.get_mut::<dns::Socket>(dns);
        if let Some(query) = state.query {
            let answer = match socket.get_query_result(query) {
                Err(GetQueryResultError::Pending) => return,
                Ok(addresses) => addresses.first().copied(),
                Err(GetQueryResultError::Failed) => None,
            };
            state.query = None;
            // Idle, the socket lists no server: smoltcp hands each DNS answer to the first
            // socket listing its source, which must be the one that asked.
            socket.update_servers(&[]);
            match answer {
                Some(address) => {
                    let endpoint = IpEndpoint::new(address, state.port);
                    if state.collector != Some(endpoint) {
                        log::info!("syslog: {name} is {address}");
                    }
                    state.collector = Some(endpoint);
                    state.next_lookup = Some(now.add_micros(LOOKUP_LIFETIME_MICROS));
                }
                None => {
                    let family = if state.ask_aaaa { "AAAA" } else { "A" };
                    state.ask_aaaa = !state.ask_aaaa;
                    // No A record: ask for AAAA at once; both failed: wait.
                    let wait = if state.ask_aaaa {
                        0
                    } else {
                        LOOKUP_RETRY_MICROS
                    };
                    if wait > 0 {
                        log::warn!(
                            "syslog: {name} has no {family} record, or the lookup failed; \
                             asking again in {} s",
                            LOOKUP_RETRY_MICROS / 1_000_000
                        );
                    }
                    state.next_lookup = Some(now.add_micros(wait));
                }
            }
            return;
        }
        if state.next_lookup.is_some_and(|at| now < at) || self.iface.ipv4_addr().is_none() {
            return;
        }
        let advertised = self
            .ipv6
            .iter()
            .flat_map(|state| state.config.dns_servers());
        let servers = super::clock::name_servers(
            state.dns_servers,
            &self.address.dhcp_dns_servers,
            advertised,
        );
        if servers.is_empty() {
            state.next_lookup = Some(now.add_micros(LOOKUP_CHECK_MICROS * 10));
            return;
        }
        socket.update_servers(&servers);
        let kind = if state.ask_aaaa {
            DnsQueryType::Aaaa
        } else {
            DnsQueryType::A
        };
        match socket.start_query(self.iface.context(), name, kind) {
            Ok(query) => state.query = Some(query),
            Err(_) => {
                log::warn!("syslog: {name} cannot be looked up; the log stays on the console");
                state.name = None;
            }
        }
    }

    /// When the sender next needs a poll: lines still wait (for an address, queue room, a
    /// lookup, or the rest of a long batch), lines were logged since the last poll, or the
    /// collector's name is due to be looked up again.
    pub(super) fn syslog_deadline(&self, now: Instant) -> Option<Instant> {
        let state = self.syslog.as_ref()?;
        let lookup = match (state.name, state.query) {
            (None, _) => None,
            (Some(_), Some(_)) => Some(now.add_micros(LOOKUP_CHECK_MICROS)),
            (Some(_), None) => state.next_lookup.map(|at| at.max(now)),
        };
        let lines = match state.retry_at {
            Some(at) => Some(at),
            None => (state.cursor < state.lines.next_sequence()).then_some(now),
        };
        super::earliest(lines, lookup)
    }
}
