//! The stream pool: Bramble's own passive-open TCP for its service ports, built so that a
//! connection costs little while it waits and so that no client, however many connections
//! it opens from however few addresses, can keep a polite client from being served.
//!
//! # Why not smoltcp's sockets
//!
//! smoltcp (which still does ARP, ICMP, DHCP and mDNS) gives every TCP socket its own receive
//! and transmit buffers, finds the socket of a received segment by walking all of them, and
//! walks all of them again on every poll to see which has something to send. That caps a
//! pool at a few hundred connections (256 of 36 KiB each on the Pi) and makes every frame
//! cost work proportional to the pool. Here a connection is a small control block ([`Tcb`],
//! about 200 bytes); a segment finds its block through a hash table; only blocks with
//! something to send are visited, in a ready queue; timers sit in a timer wheel and in lists
//! ordered by their deadline, so a poll never walks the pool.
//!
//! # How a connection lives
//!
//! - **Handshake: no state.** A SYN is answered at once with a SYN-ACK whose sequence
//!   number is a SYN cookie ([`cookie`]). The block is made only when the client's ACK
//!   proves the cookie, so half-open connections cost nothing and a SYN flood from one
//!   address costs one reply per SYN, nothing more.
//! - **Admission and eviction.** When every block is taken, a new connection takes the block
//!   of the least valuable one, which is reset: first one that is closing (all sent, waiting
//!   for the peer's FIN), then the connection idle longest between requests (keep-alive, as
//!   nginx reclaims them), then the oldest that has not completed a request header (silent
//!   connections and slow headers). Connections waiting for an answer, or being answered,
//!   are never evicted for a newcomer; if nothing can go, the newcomer is refused with a
//!   reset. An optional cap per source address refuses more (off by default).
//! - **Sessions are leased.** The per-connection protocol state that is large (an HTTP
//!   exchange with its 8 KiB request buffer, later a TLS session) lives in a smaller pool of
//!   sessions, leased to a connection while a request is received or answered and given
//!   back when it is idle. A request that arrives while every session is busy is parked in a
//!   small cell (acknowledged, so the client does not retransmit) and the connection queues
//!   for a session, first come first served: when more clients wait than there are sessions,
//!   each gets its turn, and a keep-alive connection gives its session back after every
//!   answer. A client offering a window narrower than two segments (the mark of a slow
//!   reader, whose answers are what hold sessions) queues apart and gets one turn in four
//!   while others wait, so that a slow-read attack cannot put a polite request behind
//!   hundreds of its own; and while a request from an open window waits, an answer to a
//!   narrow window that made no progress for a second gives its session back. The service
//!   may also sort waiting requests by their price ([`Lane`]: a TLS handshake offering only
//!   the dearest key exchange, a resumption): the lanes then share the work by price (the lane
//!   whose grants cost least so far goes next), so a flood of one kind waits behind itself,
//!   not in front of others, and takes no more than an even share of the work while others
//!   wait. A waiting request the service cannot answer once its client has closed (a TLS
//!   ClientHello followed by a FIN) is reset when the FIN arrives, not served later.
//! - **Transmit without buffers.** A session does not hand its response to a socket buffer:
//!   the pool asks it for the bytes at any offset past the last acknowledged one
//!   ([`Service::read_at`]), for a first transmission or a retransmission alike, and copies
//!   them straight into the frame. For plain HTTP those bytes come from the response head
//!   and the site image; a TLS session would keep its records in a buffer of its own.
//! - **Deadlines follow progress.** A new connection must send its first byte within
//!   [`PoolLimits::first_byte_micros`]; a request header must complete within
//!   [`PoolLimits::header_micros`], extended by one second for every
//!   [`PoolLimits::header_min_rate`] bytes received (in the manner of Apache's
//!   mod_reqtimeout) up to [`PoolLimits::header_max_micros`]; a response must see the
//!   client acknowledge something at least every [`PoolLimits::send_stall_micros`], however
//!   large it is; an idle keep-alive connection is closed after
//!   [`PoolLimits::idle_micros`], less when the pool is nearly full. Every decision is
//!   counted in [`PoolCounters`].
//!
//! # On the Pi
//!
//! The board serves plain HTTP on port 80 (IPv4 and IPv6 alike) through this pool: up to
//! 16,384 control blocks as its RAM allows, 512 HTTP sessions, 512-byte cells for waiting
//! requests. A waiting complete request takes the session of an incomplete request that
//! made no progress for 1 s (a header, a TLS handshake waiting for the client's Finished,
//! an upload's body, whose start moves with each byte), else of a response that made no
//! progress for 5 s; an answer to a narrow window without progress
//! for 1 s gives its session back while an open window's request waits. Deadlines: the
//! first request byte within 10 s, a header within 20 s (extended while 500 bytes/s
//! arrive), a response the client does not read for 30 s is cut off; the idle keep-alive
//! allowance shrinks as the pool fills. `connections_per_address` (off by default) caps one
//! IPv4 address or one IPv6 /64. Each decision is counted on the `status` line (`status:
//! connections open ..., syn ..., accepted ..., refused full/per-source, evicted
//! closing/idle/incomplete/stalled, timeouts first-byte/header/idle/send/close ...`); the
//! attack suite that holds these rules against real attack tools is described in
//! doc/robustness.md.
//!
//! # TCP subset
//!
//! Passive open only (IPv4), MSS option (no window scaling, SACK or timestamps: windows stay
//! below 64 KiB), in-order receive (out-of-order segments are acknowledged and dropped),
//! RFC 6298 retransmission timer, RFC 5681 slow start and congestion avoidance with fast
//! retransmit, zero-window probes, RFC 5961 challenge ACKs for in-window RST and SYN. After
//! our FIN is acknowledged and the peer's FIN arrives, the block is freed at once (no
//! TIME-WAIT: the client, which closes last or first, keeps that state, and every new
//! connection's sequence numbers come from a fresh cookie).
//!
//! # Where it sits
//!
//! The engine (this module, `pool`, [`wire`], [`cookie`]) knows frames and [`Service`]s,
//! nothing of sockets or of smoltcp: the appliance loop in `bramble-net` hands it the frames
//! of the service ports and sends what it writes ([`Transmit`]). What a connection's bytes
//! mean lives in [`services`]: plain HTTP ([`services::http`]) and HTTPS
//! ([`services::tls`]); `bramble serve` on a host drives those same services over std
//! sockets, so the host tool links this crate and not smoltcp. SipHash comes from
//! `bramble-proto`, shared with SLAAC.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod cookie;
#[doc(hidden)]
pub mod exercise;
mod pool;
pub mod services;
pub mod wire;

pub use pool::{
    CELL_LEN, Cell, Lease, MAX_IPV6_ADDRESSES, MAX_UNCAPPED, PoolConfig, PoolCounters, PoolLimits,
    PoolMemory, Source, StreamPool, Tcb, Transmit, source_key,
};

use bramble_hal::Instant;

/// Where a session is, as far as the pool needs to know (to choose deadlines, to give the
/// session back, or to close).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionPhase {
    /// Between requests: nothing buffered, nothing to send. The session may be given back.
    Idle,
    /// A request has begun (its first byte arrived at `since`) and is not complete yet;
    /// `bytes` of it have been received.
    Receiving {
        /// When the request's first byte arrived.
        since: Instant,
        /// Bytes of it so far.
        bytes: usize,
    },
    /// Answering: bytes to send or not yet acknowledged.
    Sending,
    /// Everything the session will ever send is ready (maybe already sent): close after it.
    Closing,
    /// Reset the connection now (a response that cannot be completed).
    Abort,
}

/// What [`Service::admit`] decided about a waiting request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Give it a session now.
    Now,
    /// Not before this instant: the pool asks again then.
    Later(Instant),
    /// Reset the connection.
    Refuse,
}

/// Which queue a complete parked request waits in for its session, as the service prices
/// it ([`Service::lane`]). The pool gives sessions to the queues by the work their grants
/// cost ([`Service::price`]): the queue whose grants so far cost least goes next (a queue
/// that was empty starts level with the others, never with credit saved up), so a flood of
/// one kind of request (a TLS handshake with the dearest key exchange, a replayed
/// resumption) fills its own queue, takes at most an even share of the work while others
/// wait, and delays a request of another kind by at most one of its own, however long that
/// queue grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// The common request: plain HTTP, a full TLS handshake at the usual price.
    Common,
    /// Dearer than common (a TLS handshake with the dearest key exchange).
    Heavy,
    /// Cheaper than a full handshake (a TLS resumption by ticket).
    Light,
    /// A request that [`Service::admit`] never puts off (TLS: the next request on a
    /// connection whose keys are agreed, whose session was given back between requests).
    /// It takes its turn in the common lane, in arrival order with the rest; but while the
    /// request whose turn it is waits for the service's budget (a handshake put off), it
    /// does not wait with it: nothing it costs comes out of that budget.
    Keyed,
}

/// How a connection ended, for the session's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Both sides closed in order.
    Closed,
    /// Reset: by the peer, by a deadline, or evicted for another connection.
    Reset,
}

/// A protocol served over the pool's connections: plain HTTP today, TLS around it later.
/// The pool owns the TCP side and the connection's life; the service owns the bytes.
///
/// A session is leased to a connection with [`Service::open`], fed in order with
/// [`Service::receive`], asked how much it can give at an offset with [`Service::readable`]
/// and read from with [`Service::read_at`] (offsets count from the last acknowledged byte;
/// the same offset may be read again for a retransmission and must give the same bytes),
/// told of acknowledgments with [`Service::acknowledge`], and given back with
/// [`Service::release`] when idle (the connection stays open; `release` returns a small
/// value the next `open` on that connection receives) or [`Service::close`] when the
/// connection ends.
///
/// A TLS session fits the same calls: it decrypts in `receive`, keeps its encrypted records
/// in a buffer of its own from which `readable`/`read_at` serve and which `acknowledge`
/// trims, and says [`SessionPhase::Closing`] after its close_notify.
pub trait Service {
    /// Per-connection protocol state, leased from the pool's session slots.
    type Session;

    /// Starts serving a connection from `peer` (IPv4-mapped for IPv4) on `local_port` with
    /// `session`. `carry` is what [`Service::release`] returned when the connection last
    /// gave a session back (0 for a new connection).
    fn open(
        &mut self,
        session: &mut Self::Session,
        peer: &wire::Address,
        local_port: u16,
        carry: u32,
        now: Instant,
    );

    /// Offers the next received bytes; returns how many were taken (the rest is offered
    /// again, or dropped and retransmitted by the peer).
    fn receive(&mut self, session: &mut Self::Session, data: &[u8], now: Instant) -> usize;

    /// Whether `parked`, the first bytes a connection sent while every session was busy,
    /// make a request worth a session (for HTTP: a whole header section; for TLS: a whole
    /// ClientHello, or a whole record). Until then they wait in their cell, costing no
    /// session, under the header deadline. `carry` is as for [`Service::open`].
    fn parked_ready(&self, parked: &[u8], carry: u32) -> bool;

    /// Whether a connection's bytes must wait in a cell until [`Service::parked_ready`] and
    /// [`Service::admit`] say so, even while sessions are free (for TLS: a ClientHello is
    /// priced before any work is done for it). `carry` is as for [`Service::open`].
    fn must_park(&self, carry: u32) -> bool {
        let _ = carry;
        false
    }

    /// Asked before a waiting request is given a session: now, later (it stays at the head
    /// of its queue, and no other passes it but those of [`Lane::Keyed`]), or never (the
    /// connection is reset). `first`: the first time this request is asked about. The
    /// default admits every request.
    fn admit(&mut self, parked: &[u8], carry: u32, first: bool, now: Instant) -> Admission {
        let _ = (parked, carry, first, now);
        Admission::Now
    }

    /// The queue a complete parked request waits in (see [`Lane`]). The default puts every
    /// request in the common one.
    fn lane(&self, parked: &[u8], carry: u32) -> Lane {
        let _ = (parked, carry);
        Lane::Common
    }

    /// What a complete parked request will cost to serve, in the service's own units (for
    /// TLS: thousands of instructions of its handshake). The lanes share sessions by these
    /// prices, not by turns: while several lanes have requests waiting, the one whose
    /// grants so far cost least goes next, so a lane of dear requests takes no more of the
    /// work than a lane of cheap ones. The default prices every request at 1.
    fn price(&self, parked: &[u8], carry: u32) -> u32 {
        let _ = (parked, carry);
        1
    }

    /// Whether a complete parked request can still be answered once its client has closed
    /// its side (a FIN) before the request's turn came. HTTP: yes (a client may send its
    /// request and half-close). TLS: not a ClientHello, whose handshake cannot end without
    /// the client's Finished: such a request is reset at once (counted, `abandoned`) rather
    /// than served, so that a flood whose clients give up and come back spends nothing on
    /// the hellos it left behind. The default answers.
    fn answerable_after_fin(&self, carry: u32) -> bool {
        let _ = carry;
        true
    }

    /// Whether waiting requests take turns by source: when the request at the head of a
    /// lane comes from a source one of the last few grants went to, an older-first request
    /// from another source a little further down goes before it (for TLS, where a request
    /// is a handshake: one address's flood of hellos must not stand in front of every other
    /// visitor's). The default keeps each lane first come, first served.
    fn fair_by_source(&self) -> bool {
        false
    }

    /// A connection that held no session ended: `carry` (what [`Service::release`] last
    /// returned for it) will never be given to [`Service::open`].
    fn forget(&mut self, carry: u32) {
        let _ = carry;
    }

    /// How many bytes [`Service::receive`] would take now (the window to offer).
    fn receive_window(&self, session: &Self::Session) -> usize;

    /// Bytes to send, counted from the last acknowledged byte (sent or not; available now or
    /// not: see [`Service::readable`]). The FIN goes after them.
    fn send_len(&self, session: &Self::Session) -> usize;

    /// How many bytes from `offset` (past the last acknowledged one) [`Service::read_at`]
    /// can copy now, in one piece, at most `max`. 0 while they are not available yet: the
    /// service makes sure the loop runs again when they are, and the pool asks again then.
    fn readable(
        &mut self,
        session: &mut Self::Session,
        offset: usize,
        max: usize,
        now: Instant,
    ) -> usize;

    /// Copies the bytes at `offset` from the last acknowledged byte into `out` (as many as
    /// [`Service::readable`] just said); returns how many.
    fn read_at(&self, session: &mut Self::Session, offset: usize, out: &mut [u8]) -> usize;

    /// Where the byte at `offset` lies in memory, if it is copied from memory: the pool
    /// cuts segments so that source and frame words line up. `None` (the default) when it
    /// is not known.
    fn source_address(&self, session: &Self::Session, offset: usize) -> Option<usize> {
        let _ = (session, offset);
        None
    }

    /// [`Service::read_at`], also returning the Internet checksum's partial sum of the bytes
    /// copied ([`wire::sum`] from 0 over them). A service that can give its bytes to the
    /// copy itself saves a pass over them with [`wire::copy_and_sum`].
    fn read_summed(
        &self,
        session: &mut Self::Session,
        offset: usize,
        out: &mut [u8],
    ) -> (usize, u32) {
        let n = self.read_at(session, offset, out);
        (n, wire::sum(0, &out[..n]))
    }

    /// The peer acknowledged the next `n` bytes (at most `send_len`).
    fn acknowledge(&mut self, session: &mut Self::Session, n: usize, now: Instant);

    /// Where the session is.
    fn phase(&self, session: &Self::Session) -> SessionPhase;

    /// The connection keeps going without a session for now; returns the value to give the
    /// next [`Service::open`] on it. Only called in [`SessionPhase::Idle`].
    fn release(&mut self, session: &mut Self::Session) -> u32;

    /// The connection ended while it held `session`.
    fn close(&mut self, session: &mut Self::Session, ending: Ending);
}

#[cfg(test)]
mod tests;
