//! The pool's machinery: its memory (control blocks, session slots, parking cells) and
//! the pool that holds them; each job on it in a file of its own. See the module above
//! for the design.
//!
//! The files, in the order a segment meets them:
//!
//! - `receive`: a received frame finds its connection (or the handshake); RFC 9293 segment
//!   processing, the ACK field (congestion window, RTT samples), in-order delivery to the
//!   connection's session or to a parking cell.
//! - `accept`: no state before the handshake completes: SYN-ACKs carrying SYN cookies,
//!   resets for segments of no connection, the queue of these control replies, and a block
//!   for an ACK that proves its cookie.
//! - `sources`: the per-source cap's counts, by IPv4 address or IPv6 /64.
//! - `evict`: who gives way when every block is taken (for a newcomer) or every session is
//!   (for a waiting request).
//! - `sessions`: leasing sessions and giving them back, the class lists that order the
//!   connections, and the turns of the two queues of waiting requests.
//! - `transmit`: [`StreamPool::poll`], the ready queue's turns, segments cut from the
//!   service's bytes, window probes, FIN and ACK.
//! - `timers`: each class's deadline (shrinking as the pool fills), the retransmission
//!   timer (RFC 6298), and when the pool must run next.
//! - `close`: resets, the last ACK, and freeing a block of everything it holds.
//! - `tables`: the indexes: the hash table a segment finds its block by, the lists linked
//!   through the blocks, the timer wheel.
//! - `config`: what the caller sets (deadlines, port, cap) and reads back (counters).

mod accept;
mod close;
mod config;
mod evict;
mod receive;
mod sessions;
mod sources;
mod tables;
mod timers;
mod transmit;

pub use config::{PoolConfig, PoolCounters, PoolLimits};
#[cfg(test)]
pub(crate) use sources::holds;
pub use sources::{MAX_UNCAPPED, source_key};
pub use transmit::Transmit;

use crate::cookie::{Cookies, siphash24};
use crate::wire::{self, Address, seq_le, seq_lt};
use crate::{Ending, Lane, Service};
use bramble_hal::Instant;
use tables::{List, Wheel};

/// "No index" in every link field.
const NONE: u32 = u32::MAX;
/// Bytes a parked request may take before the connection waits for a session with a full
/// cell (what larger requests get instead: the rest is not acknowledged until then).
pub const CELL_LEN: usize = 512;
/// Replies sent without a control block (SYN-ACKs, resets, the last ACK of a close) that may
/// wait for the device at once; more are dropped (the peer retries).
const CONTROL_QUEUE: usize = 256;
/// Addresses the pool answers on at once: one IPv4 and up to [`MAX_IPV6_ADDRESSES`] IPv6.
const MAX_ADDRESSES: usize = 1 + MAX_IPV6_ADDRESSES;
/// IPv6 addresses the pool answers on at once (link-local, a few global ones); more are
/// ignored.
pub const MAX_IPV6_ADDRESSES: usize = 7;
/// Segments one connection sends per turn of the ready queue before the next one's turn.
const BURST: u32 = 4;
/// Resolution and span of the retransmission timer wheel.
const WHEEL_SLOTS: usize = 2048;
/// A tick is 2^10 µs (a shift, where 1,000 µs would cost a 64-bit division on the Pi).
const WHEEL_TICK_SHIFT: u32 = 10;
const WHEEL_TICK_MICROS: u64 = 1 << WHEEL_TICK_SHIFT;
/// RFC 6298 §2: initial retransmission timeout (before any round-trip sample).
const INITIAL_RTO_MICROS: u32 = 1_000_000;
/// Lower bound of the retransmission timeout (Linux's; RFC 6298 suggests 1 s).
const MIN_RTO_MICROS: u32 = 200_000;
/// Upper bound of the retransmission timeout and of its back-off.
const MAX_RTO_MICROS: u32 = 30_000_000;
/// RFC 6928: initial congestion window in segments.
const INITIAL_WINDOW_SEGMENTS: u32 = 10;
/// Largest congestion window worth keeping: a peer's window without scaling is below it.
const MAX_USEFUL_CWND: u32 = 65_535 + 1460;
/// Largest window offered while a session holds the connection.
const MAX_RECEIVE_WINDOW: usize = 8192;
/// Most partially received headers looked at per poll for their deadline.
const PARTIAL_SCAN: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Established,
    CloseWait,
    FinWait1,
    FinWait2,
    Closing,
    LastAck,
}

/// The lists a connection can be on, each ordered by `since` (oldest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// On no list (free).
    None = 0,
    /// Admitted, no byte yet. `since`: admission.
    Fresh,
    /// Between requests, no session. `since`: when it went idle.
    Idle,
    /// Part of a request header received (parked or in a session). `since`: its first byte.
    Partial,
    /// A parked request waits for a session (the lease queue, first come first served),
    /// from a client whose window takes its answer at a useful pace. `since`: when it
    /// started waiting.
    Waiting,
    /// A session is answering. `since`: the last acknowledgment progress.
    Busy,
    /// Closing. `since`: when the close was decided.
    Closing,
    /// A parked request waits for a session from a client offering a window narrower than
    /// [`NARROW_WINDOW_SEGMENTS`] segments (a slow reader's mark): its queue gets one grant
    /// in [`NARROW_TURN`] while the other queue is not empty. `since`: when it started
    /// waiting.
    WaitingNarrow,
    /// A parked request the service priced dearer than common ([`Lane::Heavy`]) waits for
    /// a session. `since`: when it started waiting.
    WaitingHeavy,
    /// A parked request the service priced cheaper than common ([`Lane::Light`]) waits for
    /// a session. `since`: when it started waiting.
    WaitingLight,
    /// A parked request of [`Lane::Keyed`] (no admission to wait for) waits for a session,
    /// from a client whose window takes its answer at a useful pace. With
    /// [`Class::Waiting`], the common lane: the older of the two heads goes first; while
    /// the request whose turn it is is put off, this queue's go. `since`: when it started
    /// waiting.
    WaitingKeyed,
}
const CLASSES: usize = 11;
/// The lanes waiting requests wait in, in the order that breaks a tie of their work: the
/// common one (its open and narrow-window queues), then the light one, then the heavy one.
const LANE_ORDER: [Lane; 3] = [Lane::Common, Lane::Light, Lane::Heavy];
/// The common lane's index in [`LANE_ORDER`] (its keyed queue's grants count there).
const COMMON_LANE: usize = 0;
const _: () = assert!(matches!(LANE_ORDER[COMMON_LANE], Lane::Common));
/// With [`Service::fair_by_source`], the sources of this many last grants are passed over
/// for a request from another source among the first [`SOURCE_SCAN`] of a lane.
const RECENT_SOURCES: usize = 4;
/// How far down a lane the pool looks for a request from a source not served lately.
const SOURCE_SCAN: u32 = 256;
/// A waiting request whose client offers a window of fewer segments than this queues
/// behind those that can take their answer (see [`Class::WaitingNarrow`]). Every ordinary
/// client offers tens of segments; a slow-read attack offers a window of a few bytes, and
/// sessions held by such answers are what makes a request wait at all.
const NARROW_WINDOW_SEGMENTS: u32 = 2;
/// While both queues have requests waiting, the narrow queue gets every this-many-th free
/// session (it is never starved, only served after).
const NARROW_TURN: u32 = 4;
/// While a request from a client with an open window waits for a session, a response to a
/// client whose window is narrow (as above, or shut) that has seen no progress for this
/// long gives its session back (the connection is reset): slow readers that acknowledge a
/// few bytes now and then, inside [`PoolLimits::stall_evict_micros`], would otherwise
/// keep every session. A client reading at any useful pace acknowledges far more often.
const NARROW_STALL_MICROS: u64 = 1_000_000;
/// How often the pool looks again for such a response while such a request waits.
const NARROW_RECHECK_MICROS: u64 = 100_000;
/// A session holding an incomplete request is taken back for a waiting one only once the
/// request has made no progress for this long. A TLS handshake waits an exchange for the
/// client's Finished (evicting it then throws its priced work away and fails a client who
/// did nothing wrong: 1 of 1,000 at once in the attack test on a slow host), and an
/// upload's body moves its start with every byte; a header trickled in is still cut off
/// within a second when others wait.
const INCOMPLETE_HOLD_MICROS: u64 = 1_000_000;

// Flag bits of `Tcb::flags`.
const ACK_NOW: u16 = 1 << 0;
const FIN_WANTED: u16 = 1 << 1;
const FIN_SENT: u16 = 1 << 2;
const FIN_RECEIVED: u16 = 1 << 3;
const READY: u16 = 1 << 4;
const TIMING: u16 = 1 << 5;
const IN_WHEEL: u16 = 1 << 6;
const PERSIST: u16 = 1 << 7;
const SERVED: u16 = 1 << 8;
const CELL_COMPLETE: u16 = 1 << 9;
const RECOVERY: u16 = 1 << 10;
const BLOCKED: u16 = 1 << 11;
const DEFERRED: u16 = 1 << 12;

/// One connection's control block.
#[derive(Clone, Copy, Debug)]
pub struct Tcb {
    state: State,
    class: Class,
    flags: u16,
    /// The peer's address (IPv4-mapped for IPv4).
    remote_ip: Address,
    /// Ours that it connected to (replies come from it).
    local_ip: Address,
    remote_port: u16,
    remote_mac: [u8; 6],
    mss: u16,
    dupacks: u8,
    backoff: u8,
    /// Oldest unacknowledged sequence number.
    snd_una: u32,
    /// Next sequence number to send.
    snd_nxt: u32,
    /// Highest sequence number sent so far (snd_nxt goes back to snd_una on a timeout).
    snd_max: u32,
    /// The peer's window, and the segment that last updated it (RFC 9293 SND.WL1/WL2).
    snd_wnd: u32,
    snd_wl1: u32,
    snd_wl2: u32,
    /// Sequence number of our FIN, once sent.
    fin_seq: u32,
    /// RFC 6582: highest sequence number sent when fast recovery began.
    recover: u32,
    cwnd: u32,
    ssthresh: u32,
    srtt: u32,
    rttvar: u32,
    rto: u32,
    rtt_seq: u32,
    rtt_start: Instant,
    rcv_nxt: u32,
    /// Window offered in the last segment sent.
    rcv_wnd: u16,
    /// Retransmission (or window-probe) deadline, while IN_WHEEL.
    rto_at: Instant,
    wheel_slot: u16,
    lease: u32,
    cell: u32,
    /// What the service returned when the connection last gave its session back.
    carry: u32,
    /// Per the class (see [`Class`]).
    since: Instant,
    /// First byte of the request being parked.
    request_start: Instant,
    hash_next: u32,
    prev: u32,
    next: u32,
    ready_prev: u32,
    ready_next: u32,
    wheel_prev: u32,
    wheel_next: u32,
}

impl Tcb {
    /// A free block.
    pub const EMPTY: Tcb = Tcb {
        state: State::Free,
        class: Class::None,
        flags: 0,
        remote_ip: [0; 16],
        local_ip: [0; 16],
        remote_port: 0,
        remote_mac: [0; 6],
        mss: 536,
        dupacks: 0,
        backoff: 0,
        snd_una: 0,
        snd_nxt: 0,
        snd_max: 0,
        snd_wnd: 0,
        snd_wl1: 0,
        snd_wl2: 0,
        fin_seq: 0,
        recover: 0,
        cwnd: 0,
        ssthresh: 0,
        srtt: 0,
        rttvar: 0,
        rto: INITIAL_RTO_MICROS,
        rtt_seq: 0,
        rtt_start: Instant(0),
        rcv_nxt: 0,
        rcv_wnd: 0,
        rto_at: Instant(0),
        wheel_slot: 0,
        lease: NONE,
        cell: NONE,
        carry: 0,
        since: Instant(0),
        request_start: Instant(0),
        hash_next: NONE,
        prev: NONE,
        next: NONE,
        ready_prev: NONE,
        ready_next: NONE,
        wheel_prev: NONE,
        wheel_next: NONE,
    };

    fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    fn in_flight(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }

    /// Data bytes sent past `snd_una` (the FIN, once sent, is not data).
    fn data_sent(&self) -> usize {
        let mut sent = self.snd_nxt.wrapping_sub(self.snd_una);
        if self.has(FIN_SENT)
            && seq_le(self.snd_una, self.fin_seq)
            && seq_lt(self.fin_seq, self.snd_nxt)
        {
            sent -= 1;
        }
        sent as usize
    }
}

impl Default for Tcb {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// A parking cell: the bytes of a request that arrived while every session was busy (or,
/// for a service that prices its first request, before it had one: see
/// [`Service::must_park`]). `N` bytes: [`CELL_LEN`] for HTTP, more for a TLS ClientHello.
pub struct Cell<const N: usize = CELL_LEN> {
    bytes: [u8; N],
    len: u16,
    next: u32,
}

impl<const N: usize> Cell<N> {
    /// An empty cell.
    pub const fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
            next: NONE,
        }
    }
}

impl<const N: usize> Default for Cell<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// A session slot.
pub struct Lease<S> {
    session: S,
    next: u32,
    owner: u32,
}

impl<S> Lease<S> {
    /// A free slot holding `session`.
    pub const fn new(session: S) -> Self {
        Self {
            session,
            next: NONE,
            owner: NONE,
        }
    }
}

/// A slot of the per-source count table.
#[derive(Clone, Copy, Debug, Default)]
pub struct Source {
    /// An IPv4-mapped address, or an IPv6 /64 (the rest zero): [`source_key`].
    ip: Address,
    count: u32,
}

impl Source {
    /// An empty slot.
    pub const EMPTY: Source = Source {
        ip: [0; 16],
        count: 0,
    };
}

/// Memory the caller lends the pool for its whole life.
pub struct PoolMemory<'a, S, const N: usize = CELL_LEN> {
    /// Connection blocks: the most connections open at once.
    pub tcbs: &'a mut [Tcb],
    /// Hash table heads; its length is rounded down to a power of two (at least 1).
    pub buckets: &'a mut [u32],
    /// Session slots: the most connections being served at once.
    pub leases: &'a mut [Lease<S>],
    /// Parking cells.
    pub cells: &'a mut [Cell<N>],
    /// Per-source counts (only with a cap; twice the connection count is ample).
    pub sources: &'a mut [Source],
}

/// A reply sent without a control block, queued for the device.
#[derive(Clone, Copy, Debug)]
struct Control {
    dst_mac: [u8; 6],
    /// Ours it answers from.
    src_ip: Address,
    dst_ip: Address,
    dst_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    /// The MSS option (SYN-ACK only; 0: none).
    mss: u16,
    window: u16,
}

/// The stream pool: every connection of one TCP port. See the module documentation.
pub struct StreamPool<'a, S: Service, const N: usize = CELL_LEN> {
    tcbs: &'a mut [Tcb],
    buckets: &'a mut [u32],
    bucket_mask: u32,
    leases: &'a mut [Lease<S::Session>],
    cells: &'a mut [Cell<N>],
    sources: &'a mut [Source],
    service: S,
    config: PoolConfig,
    /// Prefixes the per-source cap does not apply to ([`StreamPool::set_uncapped`]).
    uncapped: heapless::Vec<bramble_http::status::Prefix, MAX_UNCAPPED>,
    cookies: Cookies,
    hash_key: u32,
    mac: [u8; 6],
    /// Our IPv4 address, if any.
    ip: Option<[u8; 4]>,
    /// Every address the pool answers on: the IPv4 one (mapped), then the IPv6 ones.
    ours: heapless::Vec<Address, MAX_ADDRESSES>,
    free_tcb: u32,
    free_lease: u32,
    free_cell: u32,
    lists: [List; CLASSES],
    ready: List,
    /// Connections whose next bytes the service did not have yet (linked like `ready`):
    /// they get a turn again at the next poll.
    blocked: List,
    wheel: Wheel,
    control: heapless::Deque<Control, CONTROL_QUEUE>,
    ip_id: u16,
    /// Where frame payloads begin, modulo 4, in the device's buffer (learned from the last
    /// frame sent; the usual layout, a word-aligned frame, puts it at 2).
    payload_alignment: usize,
    /// Grants given from the open-window queue since the narrow-window queue's last turn.
    narrow_passed: u32,
    /// The work ([`Service::price`]) granted to each lane (by its index in [`LANE_ORDER`]);
    /// a lane with nothing waiting is kept level with the least of those that wait.
    lane_work: [u64; LANE_ORDER.len()],
    /// The sources ([`source_key`]) of the last grants, for [`Service::fair_by_source`].
    recent_sources: [Address; RECENT_SOURCES],
    /// Where the next grant's source goes in `recent_sources`.
    recent_next: usize,
    /// When the service said the request at the head of the queue may be admitted.
    admit_at: Option<Instant>,
    counters: PoolCounters,
}

/// Why a connection is being reset, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    EvictClosing,
    EvictIdle,
    EvictIncomplete,
    EvictStalled,
    HeaderTimeout,
    SendTimeout,
    CloseTimeout,
    Aborted,
    Abandoned,
}

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// A pool over `memory` serving `service` on `config.port`. The pool holds
    /// `memory.tcbs.len()` connections and serves `memory.leases.len()` at once.
    pub fn new(memory: PoolMemory<'a, S::Session, N>, service: S, config: PoolConfig) -> Self {
        let PoolMemory {
            tcbs,
            buckets,
            leases,
            cells,
            sources,
        } = memory;
        let bucket_count = if buckets.is_empty() {
            0
        } else {
            1usize << (usize::BITS - 1 - buckets.len().leading_zeros())
        };
        let buckets = &mut buckets[..bucket_count];
        buckets.fill(NONE);
        let count = tcbs.len();
        for (i, tcb) in tcbs.iter_mut().enumerate() {
            *tcb = Tcb::EMPTY;
            tcb.next = if i + 1 < count { (i + 1) as u32 } else { NONE };
        }
        let lease_count = leases.len();
        for (i, lease) in leases.iter_mut().enumerate() {
            lease.owner = NONE;
            lease.next = if i + 1 < lease_count {
                (i + 1) as u32
            } else {
                NONE
            };
        }
        let cell_count = cells.len();
        for (i, cell) in cells.iter_mut().enumerate() {
            cell.len = 0;
            cell.next = if i + 1 < cell_count {
                (i + 1) as u32
            } else {
                NONE
            };
        }
        sources.fill(Source::EMPTY);
        let cookies = Cookies::new(config.seed);
        let hash_key = (siphash24(config.seed, b"bramble table") as u32) | 1;
        Self {
            free_tcb: if count > 0 { 0 } else { NONE },
            free_lease: if lease_count > 0 { 0 } else { NONE },
            free_cell: if cell_count > 0 { 0 } else { NONE },
            tcbs,
            bucket_mask: (bucket_count as u32).wrapping_sub(1),
            buckets,
            leases,
            cells,
            sources,
            service,
            config,
            uncapped: heapless::Vec::new(),
            cookies,
            hash_key,
            mac: [0; 6],
            ip: None,
            ours: heapless::Vec::new(),
            lists: [List::EMPTY; CLASSES],
            ready: List::EMPTY,
            blocked: List::EMPTY,
            wheel: Wheel {
                slots: [NONE; WHEEL_SLOTS],
                used: [0; WHEEL_SLOTS / 32],
                cursor: 0,
            },
            control: heapless::Deque::new(),
            ip_id: (siphash24(config.seed, b"bramble ip id") >> 16) as u16,
            payload_alignment: 2,
            narrow_passed: 0,
            lane_work: [0; LANE_ORDER.len()],
            recent_sources: [[0xff; 16]; RECENT_SOURCES],
            recent_next: 0,
            admit_at: None,
            counters: PoolCounters::default(),
        }
    }
}

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// The deadlines in force.
    pub fn limits(&self) -> PoolLimits {
        self.config.limits
    }

    /// The TCP port served.
    pub fn port(&self) -> u16 {
        self.config.port
    }

    /// Sets our MAC and IPv4 address (`None` while there is none). Connections to another
    /// IPv4 address than the new one are reset.
    pub fn set_address(&mut self, mac: [u8; 6], ip: Option<[u8; 4]>, now: Instant) {
        self.mac = mac;
        if ip != self.ip {
            self.ip = ip;
            let v6: heapless::Vec<Address, MAX_ADDRESSES> = self
                .ours
                .iter()
                .filter(|address| wire::as_v4(address).is_none())
                .copied()
                .collect();
            self.rebuild_ours(&v6);
            self.reset_strays(now);
        }
    }

    /// Sets the IPv6 addresses the pool answers on (at most [`MAX_IPV6_ADDRESSES`]; IPv4
    /// addresses among them are ignored). Connections to an IPv6 address no longer among
    /// them are reset.
    pub fn set_ipv6_addresses(&mut self, addresses: &[Address], now: Instant) {
        let v6: heapless::Vec<Address, MAX_ADDRESSES> = addresses
            .iter()
            .filter(|address| wire::as_v4(address).is_none())
            .take(MAX_IPV6_ADDRESSES)
            .copied()
            .collect();
        let current = self
            .ours
            .iter()
            .filter(|address| wire::as_v4(address).is_none());
        if current.clone().count() == v6.len() && current.zip(&v6).all(|(a, b)| a == b) {
            return;
        }
        self.rebuild_ours(&v6);
        self.reset_strays(now);
    }

    /// `ours` from the IPv4 address and `v6`.
    fn rebuild_ours(&mut self, v6: &[Address]) {
        self.ours.clear();
        if let Some(ip) = self.ip {
            let _ = self.ours.push(wire::v4_mapped(ip));
        }
        for address in v6 {
            if !self.ours.contains(address) {
                let _ = self.ours.push(*address);
            }
        }
    }

    /// Resets the connections to an address that is no longer ours.
    fn reset_strays(&mut self, now: Instant) {
        for i in 0..self.tcbs.len() as u32 {
            let tcb = &self.tcbs[i as usize];
            if tcb.state != State::Free && !self.ours.contains(&tcb.local_ip) {
                self.free(i, Ending::Reset);
            }
        }
        let _ = now;
    }

    /// The addresses the pool answers on (the IPv4 one IPv4-mapped).
    pub fn addresses(&self) -> &[Address] {
        &self.ours
    }

    /// The service (for its counters and configuration).
    pub fn service(&self) -> &S {
        &self.service
    }

    /// The service, mutably.
    pub fn service_mut(&mut self) -> &mut S {
        &mut self.service
    }

    /// The counts so far.
    pub fn counters(&self) -> PoolCounters {
        let mut counters = self.counters;
        counters.waiting = self.waiting_len();
        counters
    }

    /// Connections per class: fresh, idle, partial, waiting, busy, closing, waiting with a
    /// narrow window, waiting in the heavy lane, waiting in the light lane (for tests and
    /// failure messages).
    #[doc(hidden)]
    pub fn class_counts(&self) -> [u32; CLASSES - 1] {
        core::array::from_fn(|k| self.lists[k + 1].len)
    }

    /// Requests waiting for a session, in every queue.
    fn waiting_len(&self) -> u32 {
        self.lists[Class::WaitingNarrow as usize].len + self.open_waiting_len()
    }

    /// Requests from clients with an open window waiting for a session (every queue but the
    /// narrow-window one).
    fn open_waiting_len(&self) -> u32 {
        self.lists[Class::Waiting as usize].len
            + self.lists[Class::WaitingKeyed as usize].len
            + self.lists[Class::WaitingHeavy as usize].len
            + self.lists[Class::WaitingLight as usize].len
    }

    /// The queue of a complete parked request on connection `i`.
    fn waiting_class(&self, i: u32) -> Class {
        let tcb = &self.tcbs[i as usize];
        let lane = match self.cells.get(tcb.cell as usize) {
            Some(cell) => self
                .service
                .lane(&cell.bytes[..usize::from(cell.len)], tcb.carry),
            None => Lane::Common,
        };
        match lane {
            Lane::Heavy => Class::WaitingHeavy,
            Lane::Light => Class::WaitingLight,
            Lane::Common | Lane::Keyed if self.narrow(i) => Class::WaitingNarrow,
            Lane::Keyed => Class::WaitingKeyed,
            Lane::Common => Class::Waiting,
        }
    }

    /// The first request of `class`'s queue, or with [`Service::fair_by_source`] the oldest
    /// of its first [`SOURCE_SCAN`] whose source none of the last [`RECENT_SOURCES`] grants
    /// went to (if there is one): one source's many requests then take turns with another's
    /// few instead of all going first.
    fn first_of(&self, class: Class) -> u32 {
        let head = self.lists[class as usize].head;
        if head == NONE || !self.service.fair_by_source() {
            return head;
        }
        let recent = |i: u32| {
            let key = source_key(&self.tcbs[i as usize].remote_ip);
            self.recent_sources.contains(&key)
        };
        let mut i = head;
        let mut looked = 0;
        while i != NONE && looked < SOURCE_SCAN {
            if !recent(i) {
                return i;
            }
            i = self.tcbs[i as usize].next;
            looked += 1;
        }
        head
    }

    /// The head of the lane that goes next (see [`StreamPool::first_of`]), and that lane's
    /// index in [`LANE_ORDER`]: of the lanes with a request waiting, the one whose grants
    /// cost least so far (a tie to the first in [`LANE_ORDER`]); in the common lane, the
    /// narrow-window queue's head one turn in [`NARROW_TURN`] while the open one has
    /// requests. A lane with nothing waiting is brought level with the least of the others
    /// first, so that it saves no credit while empty.
    fn next_waiting(&mut self) -> Option<(u32, usize)> {
        let (open, keyed, narrow) = (
            self.first_of(Class::Waiting),
            self.first_of(Class::WaitingKeyed),
            self.first_of(Class::WaitingNarrow),
        );
        // The common lane's open queues in arrival order: the older of their heads.
        let open = if keyed != NONE
            && (open == NONE || self.tcbs[keyed as usize].since < self.tcbs[open as usize].since)
        {
            keyed
        } else {
            open
        };
        let heads = LANE_ORDER.map(|lane| match lane {
            Lane::Heavy => self.first_of(Class::WaitingHeavy),
            Lane::Light => self.first_of(Class::WaitingLight),
            Lane::Common | Lane::Keyed if open != NONE => open,
            Lane::Common | Lane::Keyed => narrow,
        });
        let least = (0..LANE_ORDER.len())
            .filter(|&lane| heads[lane] != NONE)
            .map(|lane| self.lane_work[lane])
            .min()?;
        for (work, &head) in self.lane_work.iter_mut().zip(&heads) {
            if head == NONE {
                *work = (*work).max(least);
            }
        }
        let lane = (0..LANE_ORDER.len())
            .find(|&lane| heads[lane] != NONE && self.lane_work[lane] == least)?;
        let i = match LANE_ORDER[lane] {
            Lane::Common if narrow != NONE && open != NONE => {
                if self.narrow_passed + 1 >= NARROW_TURN {
                    self.narrow_passed = 0;
                    narrow
                } else {
                    self.narrow_passed += 1;
                    open
                }
            }
            Lane::Common if narrow != NONE => {
                self.narrow_passed = 0;
                narrow
            }
            _ => heads[lane],
        };
        Some((i, lane))
    }

    /// Most connections at once.
    pub fn capacity(&self) -> usize {
        self.tcbs.len()
    }

    /// Sessions (connections served at once).
    pub fn sessions(&self) -> usize {
        self.leases.len()
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.counters.open as usize
    }

    /// Whether `frame` is for this pool (TCP to its port, either family): such frames should be given
    /// to [`StreamPool::receive`] rather than to the rest of the stack.
    pub fn wants(&self, frame: &[u8]) -> bool {
        wire::is_tcp_to(frame, &[self.config.port])
    }
}
