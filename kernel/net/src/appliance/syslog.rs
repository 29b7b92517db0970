//! The syslog sender: one UDP socket that sends the kernel's log lines to the owner's
//! collector as RFC 5424 messages (see [`crate::syslog`] for the format, the ring and the
//! rate limit). It reads the ring behind its own cursor and never waits: lines wait in the
//! ring while the interface has no address of the collector's family or the socket's queue is
//! full, and are counted as dropped when the ring overwrote them first or the token bucket
//! was empty.

use super::Appliance;
use crate::syslog::{LineSource, MAX_MESSAGE_LEN, MessageBuffer, TokenBucket, format_message};
use bramble_hal::{EthernetDevice, Instant};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use smoltcp::wire::{IpAddress, IpCidr, IpEndpoint};

/// Datagrams queued on the socket.
const SYSLOG_PACKETS: usize = 8;
/// The local port the messages leave from.
const SYSLOG_LOCAL_PORT: u16 = 50_514;
/// Most lines looked at in one poll (the rest wait for the next).
const LINES_PER_POLL: usize = 16;
/// While lines wait for an address or queue room, how often to look again.
const RETRY_MICROS: u64 = 100_000;

/// Memory for the syslog socket: its send queue (it receives nothing).
pub struct SyslogMemory {
    rx_meta: [udp::PacketMetadata; 1],
    tx_meta: [udp::PacketMetadata; SYSLOG_PACKETS],
    rx: [u8; 0],
    tx: [u8; SYSLOG_PACKETS * MAX_MESSAGE_LEN],
}

impl SyslogMemory {
    /// Empty queues.
    pub const fn new() -> Self {
        Self {
            rx_meta: [udp::PacketMetadata::EMPTY; 1],
            tx_meta: [udp::PacketMetadata::EMPTY; SYSLOG_PACKETS],
            rx: [],
            tx: [0; SYSLOG_PACKETS * MAX_MESSAGE_LEN],
        }
    }
}

impl Default for SyslogMemory {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the log goes and what it reads.
#[derive(Clone, Copy)]
pub struct SyslogConfig<'a> {
    /// The collector's address (IPv4 or IPv6) and port.
    pub collector: (core::net::IpAddr, u16),
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
    collector: IpEndpoint,
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
        if self.syslog.is_some() || self.sockets_free() < 1 {
            log::warn!("syslog: no socket slot left; the log stays on the console");
            return;
        }
        let SyslogMemory {
            rx_meta,
            tx_meta,
            rx,
            tx,
        } = memory;
        let mut socket = udp::Socket::new(
            udp::PacketBuffer::new(&mut rx_meta[..], &mut rx[..]),
            udp::PacketBuffer::new(&mut tx_meta[..], &mut tx[..]),
        );
        // Cannot fail: the port is not zero and the socket is new.
        let _ = socket.bind(SYSLOG_LOCAL_PORT);
        let socket = self.sockets.add(socket);
        let (address, port) = config.collector;
        let cursor = match config.lines.copy_line(0) {
            Ok(_) => 0,
            Err(oldest) => oldest,
        };
        self.syslog = Some(SyslogState {
            socket,
            collector: IpEndpoint::new(IpAddress::from(address), port),
            hostname: config.hostname,
            lines: config.lines,
            cursor,
            bucket: TokenBucket::new(now.as_micros()),
            counters: SyslogCounters::default(),
            retry_at: None,
            message: MessageBuffer::new(),
        });
        log::info!("syslog: sending the log to {address} port {port}");
    }

    /// Gives the status page and metrics `snapshot` (the board's figures) with the
    /// appliance's own filled in: syslog, TLS handshakes, the defences' cuts (refusals,
    /// evictions, timeouts).
    pub fn set_status_snapshot(&mut self, mut snapshot: bramble_http::status::StatusSnapshot) {
        if let Some(counters) = self.syslog_counters() {
            snapshot.syslog_sent = counters.sent;
            snapshot.syslog_dropped = counters.dropped;
        }
        if let Some(tls) = self.tls_counters() {
            snapshot.tls_handshakes = tls.full_handshakes + tls.resumed_handshakes;
            snapshot.tls_failures = tls.failures;
        }
        let pool = self.pool_counters();
        snapshot.defence_drops = pool.refused_full
            + pool.refused_source
            + pool.bad_cookies
            + pool.evictions()
            + pool.timeouts();
        self.pool.service_mut().server.set_status_snapshot(snapshot);
    }

    /// Whether the visitor counts want a fresh salt ([`bramble_http::visitors`]).
    pub fn wants_visitor_salt(&self) -> bool {
        self.server().wants_visitor_salt()
    }

    /// Gives the visitor counts a fresh salt from the CSPRNG for the next day.
    pub fn offer_visitor_salt(&mut self, salt: [u8; 16]) {
        self.pool.service_mut().server.offer_visitor_salt(salt);
    }

    /// The sender's counts, once started.
    pub fn syslog_counters(&self) -> Option<SyslogCounters> {
        self.syslog.as_ref().map(|state| state.counters)
    }

    /// Sends what the ring has gained since the last poll, as the bucket and queue allow.
    pub(super) fn poll_syslog(&mut self, now: Instant) {
        let Some(state) = &mut self.syslog else {
            return;
        };
        state.retry_at = None;
        let has_source = self.iface.ip_addrs().iter().any(|cidr| {
            matches!(
                (cidr, state.collector.addr),
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
            match socket.send_slice(state.message.as_bytes(), state.collector) {
                Ok(()) => state.counters.sent += 1,
                Err(_) => state.counters.dropped += 1,
            }
        }
        // More lines than one poll takes: come back at once.
        state.retry_at = Some(now);
    }

    /// When the sender next needs a poll: lines still wait (for an address, queue room, or
    /// the rest of a long batch), or lines were logged since the last poll.
    pub(super) fn syslog_deadline(&self, now: Instant) -> Option<Instant> {
        let state = self.syslog.as_ref()?;
        if let Some(at) = state.retry_at {
            return Some(at);
        }
        (state.cursor < state.lines.next_sequence()).then_some(now)
    }
}
