//! The pool's machinery: control blocks, the demultiplexing hash table, the class lists that
//! order connections by deadline and by value, the ready queue, the retransmission timer
//! wheel, session leases and parking cells. See the module above for the design.

use super::cookie::{CookieInput, Cookies, siphash24};
use super::wire::{self, Address, Outgoing, Segment, flags, seq_le, seq_lt};
use super::{Admission, Ending, Service, SessionPhase};
use bramble_hal::Instant;

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

/// Deadlines of the pool (microseconds) and its per-source cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    /// From the handshake to the first request byte.
    pub first_byte_micros: u64,
    /// From the first byte of a request to the end of its header, before extensions.
    pub header_micros: u64,
    /// Bytes per second of header that extend [`PoolLimits::header_micros`] by one second
    /// each (0: no extension).
    pub header_min_rate: u64,
    /// Longest a header may take, extensions included.
    pub header_max_micros: u64,
    /// Longest a keep-alive connection may sit idle between requests while the pool is at
    /// most half full; shorter above that, down to [`PoolLimits::idle_min_micros`].
    pub idle_micros: u64,
    /// Shortest idle allowance (when the pool is full).
    pub idle_min_micros: u64,
    /// Longest a response may go without the client acknowledging anything.
    pub send_stall_micros: u64,
    /// While connections wait for a session, a session whose response has seen no progress
    /// for this long is taken back (the connection is reset).
    pub stall_evict_micros: u64,
    /// From our FIN (or deciding to close) to the close being complete.
    pub close_micros: u64,
}

impl PoolLimits {
    /// 10 s to the first byte; 20 s for a header, plus 1 s per 500 bytes, at most 40 s;
    /// 15 s idle (1 s when full); 30 s without progress for a response (5 s while others
    /// wait for its session); 10 s to close.
    pub const DEFAULT: PoolLimits = PoolLimits {
        first_byte_micros: 10_000_000,
        header_micros: 20_000_000,
        header_min_rate: 500,
        header_max_micros: 40_000_000,
        idle_micros: 15_000_000,
        idle_min_micros: 1_000_000,
        send_stall_micros: 30_000_000,
        stall_evict_micros: 5_000_000,
        close_micros: 10_000_000,
    };
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What the pool serves and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The TCP port served (the HTTP port).
    pub port: u16,
    /// Deadlines.
    pub limits: PoolLimits,
    /// Most connections from one source at once (0: no cap, the default): one IPv4 address,
    /// or one IPv6 /64 (a host picks any address of its /64 at will). Beyond it new
    /// connections from that source are refused with a reset.
    pub max_per_source: u32,
    /// The 128-bit secret keying the SYN cookies and the connection table's hash: drawn from
    /// the CSPRNG at each boot, so that neither can be predicted from what the pool sends.
    pub seed: [u64; 2],
}

/// What the pool has done: every admission decision, eviction and deadline is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// SYNs answered with a cookie.
    pub syns: u64,
    /// Connections admitted (the cookie came back).
    pub accepted: u64,
    /// Of those, the ones over IPv6.
    pub accepted_ipv6: u64,
    /// ACKs for no connection whose cookie was not ours (answered with a reset).
    pub bad_cookies: u64,
    /// New connections refused because every block held a connection worth keeping.
    pub refused_full: u64,
    /// New connections refused by the per-source cap.
    pub refused_source: u64,
    /// Closing connections reset to make room for a new one.
    pub evicted_closing: u64,
    /// Idle keep-alive connections reset to make room for a new one.
    pub evicted_idle: u64,
    /// Connections without a complete request header reset to make room (for a new
    /// connection, or for a session a waiting request needs).
    pub evicted_incomplete: u64,
    /// Responses without progress reset because others waited for their session.
    pub evicted_stalled: u64,
    /// Of those, responses to a narrow window taken back early for a request from a client
    /// with an open window.
    pub evicted_narrow: u64,
    /// Connections closed for sending no first byte in time.
    pub timeout_first_byte: u64,
    /// Connections reset for a request header too slow.
    pub timeout_header: u64,
    /// Keep-alive connections closed for being idle too long.
    pub timeout_idle: u64,
    /// Connections reset for acknowledging nothing of a response too long.
    pub timeout_send: u64,
    /// Closes that did not complete in time (reset).
    pub timeout_close: u64,
    /// Requests parked in a cell to wait for a session.
    pub parked: u64,
    /// Parked requests the service put off ([`Service::admit`]: a TLS handshake budget).
    pub deferred: u64,
    /// Parked requests the service refused (reset): not its protocol.
    pub refused_service: u64,
    /// Sessions given back by a keep-alive connection whose next request came with the
    /// acknowledgment of its last answer, because others waited (that request parked).
    pub yielded: u64,
    /// Connections reset by the peer.
    pub peer_resets: u64,
    /// Connections reset because the session could not complete (or data came after close).
    pub aborted: u64,
    /// Retransmission timeouts.
    pub retransmit_timeouts: u64,
    /// Fast retransmits (three duplicate ACKs).
    pub fast_retransmits: u64,
    /// Segments received for the pool (valid).
    pub segments_in: u64,
    /// Segments sent.
    pub segments_out: u64,
    /// Frames for the pool's port that failed their checks.
    pub malformed: u64,
    /// Replies without a connection dropped because the control queue was full.
    pub control_dropped: u64,
    /// Connections open now.
    pub open: u32,
    /// Most connections open at once.
    pub peak_open: u32,
    /// Sessions leased now.
    pub leased: u32,
    /// Connections waiting for a session now.
    pub waiting: u32,
}

impl PoolCounters {
    /// Every deadline that ended a connection.
    pub fn timeouts(&self) -> u64 {
        self.timeout_first_byte
            + self.timeout_header
            + self.timeout_idle
            + self.timeout_send
            + self.timeout_close
    }

    /// Every eviction.
    pub fn evictions(&self) -> u64 {
        self.evicted_closing + self.evicted_idle + self.evicted_incomplete + self.evicted_stalled
    }
}

impl core::fmt::Display for PoolCounters {
    /// `open 3 (peak 9), leased 1, waiting 0, accepted 12, refused 0+0, evicted
    /// 0/0/0/0, timeouts 1/0/2/0/0, ...`: the connection decisions in one line.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "open {} (peak {}), leased {}, waiting {}, syn {}, accepted {} ({} IPv6), bad cookies {}, \
             refused full {} per-source {}, evicted closing {} idle {} incomplete {} \
             stalled {} (narrow {}), timeouts first-byte {} header {} idle {} send {} close {}, parked {}, yielded {}, \
             peer resets {}, aborted {}, retransmits {}+{} fast, segments in {} out {}, \
             malformed {}, control dropped {}, deferred {}, refused by service {}",
            self.open,
            self.peak_open,
            self.leased,
            self.waiting,
            self.syns,
            self.accepted,
            self.accepted_ipv6,
            self.bad_cookies,
            self.refused_full,
            self.refused_source,
            self.evicted_closing,
            self.evicted_idle,
            self.evicted_incomplete,
            self.evicted_stalled,
            self.evicted_narrow,
            self.timeout_first_byte,
            self.timeout_header,
            self.timeout_idle,
            self.timeout_send,
            self.timeout_close,
            self.parked,
            self.yielded,
            self.peer_resets,
            self.aborted,
            self.retransmit_timeouts,
            self.fast_retransmits,
            self.segments_in,
            self.segments_out,
            self.malformed,
            self.control_dropped,
            self.deferred,
            self.refused_service
        )
    }
}

/// Where frames go out. The appliance implements it over its device adapter; tests over a
/// queue.
pub trait Transmit {
    /// Whether a frame could be sent now.
    fn can_transmit(&mut self) -> bool;
    /// Sends one frame of `len` bytes written by `fill`; false if the device refused it.
    fn transmit<F: FnOnce(&mut [u8])>(&mut self, len: usize, fill: F) -> bool;
}

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
}
const CLASSES: usize = 8;
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

/// The 16 bytes of `address` folded to 32 bits (for the hash tables; the keyed mixing is
/// theirs).
fn fold_address(address: &Address) -> u32 {
    address.chunks_exact(4).fold(0, |acc, word| {
        acc.rotate_left(5) ^ u32::from_be_bytes([word[0], word[1], word[2], word[3]])
    })
}

/// What the per-source cap counts `address` as: an IPv4 address itself, an IPv6 address
/// by its /64 (one host or one household's network: a host may use any address of it).
pub fn source_key(address: &Address) -> Address {
    let mut key = *address;
    if wire::as_v4(address).is_none() {
        key[8..].fill(0);
    }
    key
}

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

#[derive(Clone, Copy, Debug)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    const EMPTY: List = List {
        head: NONE,
        tail: NONE,
        len: 0,
    };
}

/// Which pair of links a list uses.
#[derive(Clone, Copy)]
enum Links {
    Class,
    Ready,
}

fn links(tcb: &mut Tcb, which: Links) -> (&mut u32, &mut u32) {
    match which {
        Links::Class => (&mut tcb.prev, &mut tcb.next),
        Links::Ready => (&mut tcb.ready_prev, &mut tcb.ready_next),
    }
}

fn push_back(list: &mut List, tcbs: &mut [Tcb], i: u32, which: Links) {
    {
        let (prev, next) = links(&mut tcbs[i as usize], which);
        *prev = list.tail;
        *next = NONE;
    }
    if list.tail == NONE {
        list.head = i;
    } else {
        *links(&mut tcbs[list.tail as usize], which).1 = i;
    }
    list.tail = i;
    list.len += 1;
}

fn unlink(list: &mut List, tcbs: &mut [Tcb], i: u32, which: Links) {
    let (prev, next) = {
        let (prev, next) = links(&mut tcbs[i as usize], which);
        let pair = (*prev, *next);
        *prev = NONE;
        *next = NONE;
        pair
    };
    if prev == NONE {
        list.head = next;
    } else {
        *links(&mut tcbs[prev as usize], which).1 = next;
    }
    if next == NONE {
        list.tail = prev;
    } else {
        *links(&mut tcbs[next as usize], which).0 = prev;
    }
    list.len -= 1;
}

/// The retransmission timers: a wheel of 1 ms slots (each the head of a list linked
/// through the blocks) with a bitmap of the slots in use.
struct Wheel {
    slots: [u32; WHEEL_SLOTS],
    used: [u32; WHEEL_SLOTS / 32],
    /// The last tick processed.
    cursor: u64,
}

impl Wheel {
    fn tick_of(at: Instant) -> u64 {
        at.as_micros() >> WHEEL_TICK_SHIFT
    }

    fn insert(&mut self, tcbs: &mut [Tcb], i: u32) {
        let tick = Self::tick_of(tcbs[i as usize].rto_at)
            .max(self.cursor + 1)
            .min(self.cursor + WHEEL_SLOTS as u64 - 1);
        let slot = (tick % WHEEL_SLOTS as u64) as usize;
        let head = self.slots[slot];
        let tcb = &mut tcbs[i as usize];
        tcb.wheel_slot = slot as u16;
        tcb.flags |= IN_WHEEL;
        tcb.wheel_prev = NONE;
        tcb.wheel_next = head;
        if head != NONE {
            tcbs[head as usize].wheel_prev = i;
        }
        self.slots[slot] = i;
        self.used[slot / 32] |= 1 << (slot % 32);
    }

    fn remove(&mut self, tcbs: &mut [Tcb], i: u32) {
        let tcb = &mut tcbs[i as usize];
        if !tcb.has(IN_WHEEL) {
            return;
        }
        let slot = usize::from(tcb.wheel_slot);
        let (prev, next) = (tcb.wheel_prev, tcb.wheel_next);
        tcb.wheel_prev = NONE;
        tcb.wheel_next = NONE;
        tcb.flags &= !IN_WHEEL;
        if prev == NONE {
            self.slots[slot] = next;
        } else {
            tcbs[prev as usize].wheel_next = next;
        }
        if next != NONE {
            tcbs[next as usize].wheel_prev = prev;
        }
        if self.slots[slot] == NONE {
            self.used[slot / 32] &= !(1 << (slot % 32));
        }
    }

    /// The tick of the next slot in use after the cursor, if any.
    fn next_tick(&self) -> Option<u64> {
        let start = ((self.cursor + 1) % WHEEL_SLOTS as u64) as usize;
        let words = WHEEL_SLOTS / 32;
        for step in 0..=words {
            let word_index = (start / 32 + step) % words;
            let mut word = self.used[word_index];
            if step == 0 {
                word &= !0u32 << (start % 32);
            }
            if step == words {
                word &= !(!0u32 << (start % 32));
            }
            if word != 0 {
                let slot = word_index * 32 + word.trailing_zeros() as usize;
                let distance = (slot + WHEEL_SLOTS - start) % WHEEL_SLOTS;
                return Some(self.cursor + 1 + distance as u64);
            }
        }
        None
    }
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
    /// narrow window (for tests and failure messages).
    #[doc(hidden)]
    pub fn class_counts(&self) -> [u32; 7] {
        core::array::from_fn(|k| self.lists[k + 1].len)
    }

    /// Requests waiting for a session, in both queues.
    fn waiting_len(&self) -> u32 {
        self.lists[Class::Waiting as usize].len + self.lists[Class::WaitingNarrow as usize].len
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

    fn bucket(&self, ip: &Address, port: u16) -> usize {
        let x = fold_address(ip) ^ self.hash_key;
        let y = (x.wrapping_mul(0x9e37_79b1) ^ u32::from(port)).wrapping_mul(self.hash_key);
        ((y ^ (y >> 15)) & self.bucket_mask) as usize
    }

    fn lookup(&self, ip: &Address, port: u16) -> u32 {
        if self.buckets.is_empty() {
            return NONE;
        }
        let mut i = self.buckets[self.bucket(ip, port)];
        while i != NONE {
            let tcb = &self.tcbs[i as usize];
            if tcb.remote_port == port && tcb.remote_ip == *ip {
                return i;
            }
            i = tcb.hash_next;
        }
        NONE
    }

    /// Whether a control reply (a SYN-ACK or a reset) could be queued now. While not, the
    /// appliance leaves received frames where they wait (in the device, on the link) rather
    /// than take a SYN it has no room to answer.
    pub fn has_control_room(&self) -> bool {
        !self.control.is_full()
    }

    /// Handles one received frame (one that [`StreamPool::wants`]).
    pub fn receive(&mut self, frame: &[u8], now: Instant) {
        if self.ours.is_empty() {
            return;
        }
        let segment = match wire::parse(frame, self.mac, &self.ours) {
            Ok(segment) if segment.dst_port == self.config.port => segment,
            Ok(_) => return,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        self.counters.segments_in += 1;
        let mut i = self.lookup(&segment.src_ip, segment.src_port);
        if i == NONE {
            if segment.has(flags::RST) {
                return;
            }
            if segment.has(flags::SYN) {
                if !segment.has(flags::ACK) && !segment.has(flags::FIN) {
                    self.answer_syn(&segment, now);
                } else {
                    self.reset_for(&segment);
                }
                return;
            }
            if !segment.has(flags::ACK) {
                return;
            }
            i = self.admit(&segment, now);
            if i == NONE {
                return;
            }
        }
        self.process(i, &segment, now);
        if self.tcbs[i as usize].state != State::Free {
            self.settle(i, now);
        }
    }

    fn answer_syn(&mut self, segment: &Segment<'_>, now: Instant) {
        let input = CookieInput {
            ip: segment.src_ip,
            local_ip: segment.dst_ip,
            port: segment.src_port,
            local_port: segment.dst_port,
            client_isn: segment.seq,
        };
        let (cookie, mss) = self
            .cookies
            .make(&input, segment.mss, now.as_micros() / 1_000_000);
        // Over IPv6 the header is 20 bytes longer: no more than 1440 per segment.
        let mss = mss.min(wire::max_mss(&segment.src_ip));
        self.counters.syns += 1;
        self.queue_control(Control {
            dst_mac: segment.src_mac,
            src_ip: segment.dst_ip,
            dst_ip: segment.src_ip,
            dst_port: segment.src_port,
            seq: cookie,
            ack: segment.seq.wrapping_add(1),
            flags: flags::SYN | flags::ACK,
            mss,
            window: N as u16,
        });
    }

    /// RFC 9293 §3.10.7.1: a segment for no connection gets a reset (unless it is one).
    fn reset_for(&mut self, segment: &Segment<'_>) {
        let (seq, ack, reset_flags) = if segment.has(flags::ACK) {
            (segment.ack, 0, flags::RST)
        } else {
            (
                0,
                segment.seq.wrapping_add(segment.seq_len()),
                flags::RST | flags::ACK,
            )
        };
        self.queue_control(Control {
            dst_mac: segment.src_mac,
            src_ip: segment.dst_ip,
            dst_ip: segment.src_ip,
            dst_port: segment.src_port,
            seq,
            ack,
            flags: reset_flags,
            mss: 0,
            window: 0,
        });
    }

    fn queue_control(&mut self, reply: Control) {
        if self.control.push_back(reply).is_err() {
            self.counters.control_dropped += 1;
        }
    }

    /// An ACK for no connection: admit it if it carries our cookie.
    fn admit(&mut self, segment: &Segment<'_>, now: Instant) -> u32 {
        let input = CookieInput {
            ip: segment.src_ip,
            local_ip: segment.dst_ip,
            port: segment.src_port,
            local_port: segment.dst_port,
            client_isn: segment.seq.wrapping_sub(1),
        };
        let cookie = segment.ack.wrapping_sub(1);
        let Some(mss) = self
            .cookies
            .check(&input, cookie, now.as_micros() / 1_000_000)
        else {
            self.counters.bad_cookies += 1;
            self.reset_for(segment);
            return NONE;
        };
        let mss = mss.min(wire::max_mss(&segment.src_ip));
        let source = source_key(&segment.src_ip);
        if self.config.max_per_source > 0
            && self.source_count(&source) >= self.config.max_per_source
        {
            self.counters.refused_source += 1;
            self.reset_for(segment);
            return NONE;
        }
        if self.free_tcb == NONE && !self.evict_for_newcomer() {
            self.counters.refused_full += 1;
            self.reset_for(segment);
            return NONE;
        }
        let i = self.free_tcb;
        self.free_tcb = self.tcbs[i as usize].next;
        let tcb = &mut self.tcbs[i as usize];
        *tcb = Tcb::EMPTY;
        tcb.state = State::Established;
        tcb.remote_ip = segment.src_ip;
        tcb.local_ip = segment.dst_ip;
        tcb.remote_port = segment.src_port;
        tcb.remote_mac = segment.src_mac;
        tcb.mss = mss;
        tcb.snd_una = segment.ack;
        tcb.snd_nxt = segment.ack;
        tcb.snd_max = segment.ack;
        tcb.snd_wnd = u32::from(segment.window);
        tcb.snd_wl1 = segment.seq;
        tcb.snd_wl2 = segment.ack;
        tcb.rcv_nxt = segment.seq;
        tcb.rcv_wnd = N as u16;
        tcb.cwnd = INITIAL_WINDOW_SEGMENTS * u32::from(mss);
        tcb.ssthresh = 65_535;
        tcb.since = now;
        let bucket = self.bucket(&segment.src_ip, segment.src_port);
        self.tcbs[i as usize].hash_next = self.buckets[bucket];
        self.buckets[bucket] = i;
        self.set_class(i, Class::Fresh, now);
        if self.config.max_per_source > 0 {
            self.source_add(&source, 1);
        }
        self.counters.accepted += 1;
        self.counters.accepted_ipv6 += u64::from(wire::as_v4(&segment.src_ip).is_none());
        self.counters.open += 1;
        self.counters.peak_open = self.counters.peak_open.max(self.counters.open);
        i
    }

    /// Frees the least valuable connection for a newcomer; false if none may go.
    fn evict_for_newcomer(&mut self) -> bool {
        for (class, cause) in [
            (Class::Closing, Cause::EvictClosing),
            (Class::Idle, Cause::EvictIdle),
            (Class::Fresh, Cause::EvictIncomplete),
            (Class::Partial, Cause::EvictIncomplete),
        ] {
            let victim = match class {
                Class::Fresh | Class::Partial => self.oldest_incomplete(),
                Class::Closing => self.spent_closing(),
                _ => self.lists[class as usize].head,
            };
            if victim != NONE {
                self.abort(victim, cause);
                return true;
            }
        }
        false
    }

    /// A closing connection with nothing left to deliver (our FIN acknowledged, or a close
    /// decided without a session), looking at the oldest few.
    fn spent_closing(&self) -> u32 {
        let mut i = self.lists[Class::Closing as usize].head;
        for _ in 0..8 {
            if i == NONE {
                break;
            }
            let tcb = &self.tcbs[i as usize];
            if tcb.state == State::FinWait2 || tcb.lease == NONE {
                return i;
            }
            i = tcb.next;
        }
        NONE
    }

    /// The oldest connection without a complete request header: fresh or partial.
    fn oldest_incomplete(&self) -> u32 {
        let fresh = self.lists[Class::Fresh as usize].head;
        let partial = self.lists[Class::Partial as usize].head;
        match (fresh, partial) {
            (NONE, p) => p,
            (f, NONE) => f,
            (f, p) => {
                if self.tcbs[p as usize].since < self.tcbs[f as usize].since {
                    p
                } else {
                    f
                }
            }
        }
    }

    fn source_home(&self, ip: &Address) -> usize {
        (fold_address(ip).wrapping_mul(0x9e37_79b1) ^ self.hash_key) as usize % self.sources.len()
    }

    fn source_slot(&self, ip: &Address) -> Option<usize> {
        let len = self.sources.len();
        if len == 0 {
            return None;
        }
        let start = self.source_home(ip);
        (0..len)
            .map(|k| (start + k) % len)
            .find(|&slot| self.sources[slot].count == 0 || self.sources[slot].ip == *ip)
    }

    fn source_count(&self, ip: &Address) -> u32 {
        self.source_slot(ip)
            .map_or(0, |slot| self.sources[slot].count)
    }

    fn source_add(&mut self, ip: &Address, delta: i32) {
        let Some(slot) = self.source_slot(ip) else {
            return;
        };
        let entry = &mut self.sources[slot];
        if delta > 0 {
            entry.ip = *ip;
            entry.count += 1;
            return;
        }
        if entry.count == 0 || entry.ip != *ip {
            return;
        }
        entry.count -= 1;
        if entry.count == 0 {
            // Backward-shift deletion keeps every probe sequence unbroken.
            let len = self.sources.len();
            let mut hole = slot;
            let mut k = (slot + 1) % len;
            while self.sources[k].count != 0 {
                let home = self.source_home(&self.sources[k].ip);
                let distance_home = (k + len - home) % len;
                let distance_hole = (k + len - hole) % len;
                if distance_home >= distance_hole {
                    self.sources[hole] = self.sources[k];
                    self.sources[k] = Source::EMPTY;
                    hole = k;
                }
                k = (k + 1) % len;
                if k == slot {
                    break;
                }
            }
        }
    }

    /// The receive window to offer now.
    fn receive_window(&self, i: u32) -> u16 {
        let tcb = &self.tcbs[i as usize];
        let window = if tcb.lease != NONE {
            self.service
                .receive_window(&self.leases[tcb.lease as usize].session)
                .min(MAX_RECEIVE_WINDOW)
        } else if tcb.cell != NONE {
            N - usize::from(self.cells[tcb.cell as usize].len)
        } else if self.free_cell != NONE || self.free_lease != NONE {
            N
        } else {
            0
        };
        window as u16
    }

    /// RFC 9293 §3.10.7.4 for a segment of a synchronized connection.
    fn process(&mut self, i: u32, segment: &Segment<'_>, now: Instant) {
        let idx = i as usize;
        // The peer's MAC is the one it was admitted with. No checksum covers the Ethernet
        // header (a real NIC's FCS does): a frame damaged there must not send the rest of
        // the connection astray. A different one is taken only once the connection is
        // retransmitting (the old one no longer works: a router's failover, a new card).
        if segment.src_mac != self.tcbs[idx].remote_mac && self.tcbs[idx].backoff >= 2 {
            self.tcbs[idx].remote_mac = segment.src_mac;
        }
        let rcv_nxt = self.tcbs[idx].rcv_nxt;
        let window = u32::from(self.tcbs[idx].rcv_wnd).max(1);
        let seg_len = segment.seq_len();
        // First: is the segment in the window?
        let acceptable = if seg_len == 0 {
            seq_le(rcv_nxt, segment.seq) && seq_lt(segment.seq, rcv_nxt.wrapping_add(window))
                || segment.seq == rcv_nxt
        } else {
            let last = segment.seq.wrapping_add(seg_len - 1);
            (seq_le(rcv_nxt, segment.seq) && seq_lt(segment.seq, rcv_nxt.wrapping_add(window)))
                || (seq_le(rcv_nxt, last) && seq_lt(last, rcv_nxt.wrapping_add(window)))
        };
        if !acceptable {
            if !segment.has(flags::RST) {
                self.tcbs[idx].flags |= ACK_NOW;
            }
            return;
        }
        if segment.has(flags::RST) {
            if segment.seq == rcv_nxt {
                self.counters.peer_resets += 1;
                self.free(i, Ending::Reset);
            } else {
                // RFC 5961 §3.2: a challenge ACK for an in-window reset.
                self.tcbs[idx].flags |= ACK_NOW;
            }
            return;
        }
        if segment.has(flags::SYN) {
            // RFC 5961 §4.2: a challenge ACK for a SYN on a synchronized connection.
            self.tcbs[idx].flags |= ACK_NOW;
            return;
        }
        if !segment.has(flags::ACK) {
            return;
        }
        if !self.process_ack(i, segment, now) {
            return;
        }
        let state = self.tcbs[idx].state;
        // Text: only in order; a segment starting before rcv_nxt is trimmed.
        let mut consumed_all = true;
        if !segment.payload.is_empty() {
            let skip = self.tcbs[idx].rcv_nxt.wrapping_sub(segment.seq) as usize;
            if seq_lt(self.tcbs[idx].rcv_nxt, segment.seq) {
                // Out of order: ask for what is missing.
                self.tcbs[idx].flags |= ACK_NOW;
                return;
            }
            let fresh = segment.payload.get(skip..).unwrap_or(&[]);
            if !fresh.is_empty() {
                if !matches!(
                    state,
                    State::Established | State::FinWait1 | State::FinWait2
                ) || self.tcbs[idx].has(FIN_RECEIVED)
                {
                    // Data after the peer's FIN cannot be: ignore it.
                } else if self.tcbs[idx].lease == NONE && self.tcbs[idx].has(FIN_WANTED) {
                    // We closed (a deadline) and the client sent a request anyway: reset,
                    // as a socket closed with data unread does, so it retries elsewhere.
                    self.abort(i, Cause::Aborted);
                    return;
                } else {
                    let taken = self.deliver(i, fresh, now);
                    if self.tcbs[idx].state == State::Free {
                        return;
                    }
                    self.tcbs[idx].rcv_nxt = self.tcbs[idx].rcv_nxt.wrapping_add(taken as u32);
                    consumed_all = taken == fresh.len();
                }
                self.tcbs[idx].flags |= ACK_NOW;
            }
        }
        if segment.has(flags::FIN) && consumed_all && !self.tcbs[idx].has(FIN_RECEIVED) {
            let fin_at = segment.seq.wrapping_add(segment.payload.len() as u32);
            if fin_at == self.tcbs[idx].rcv_nxt {
                let tcb = &mut self.tcbs[idx];
                tcb.rcv_nxt = tcb.rcv_nxt.wrapping_add(1);
                tcb.flags |= FIN_RECEIVED | ACK_NOW;
                match tcb.state {
                    State::Established => tcb.state = State::CloseWait,
                    State::FinWait1 => tcb.state = State::Closing,
                    State::FinWait2 => {
                        // Both sides done: acknowledge the FIN and forget the connection.
                        self.final_ack(i);
                        self.free(i, Ending::Closed);
                    }
                    _ => {}
                }
            }
        }
    }

    /// The ACK field; false if processing should stop.
    fn process_ack(&mut self, i: u32, segment: &Segment<'_>, now: Instant) -> bool {
        let idx = i as usize;
        let ack = segment.ack;
        let (una, max) = (self.tcbs[idx].snd_una, self.tcbs[idx].snd_max);
        if seq_lt(max, ack) {
            // Acknowledges what was never sent.
            self.tcbs[idx].flags |= ACK_NOW;
            return false;
        }
        if seq_lt(una, ack) {
            let mut acked = ack.wrapping_sub(una);
            let tcb = &mut self.tcbs[idx];
            let fin_acked = tcb.has(FIN_SENT) && seq_lt(tcb.fin_seq, ack);
            if fin_acked {
                acked -= 1;
            }
            // RTT sample (Karn: only for a segment not retransmitted).
            if tcb.has(TIMING) && seq_le(tcb.rtt_seq, ack) {
                tcb.flags &= !TIMING;
                let sample = now.micros_since(tcb.rtt_start).min(u64::from(u32::MAX)) as u32;
                update_rtt(tcb, sample);
            }
            // Congestion window (RFC 5681 §3.1; RFC 6582 for partial ACKs in recovery).
            if tcb.has(RECOVERY) {
                if seq_le(tcb.recover, ack) {
                    tcb.flags &= !RECOVERY;
                    tcb.cwnd = tcb.ssthresh;
                } else {
                    // A partial ACK: the next hole is lost too; send it again.
                    tcb.snd_nxt = ack;
                }
            } else if tcb.cwnd >= MAX_USEFUL_CWND {
                // No peer offers more without window scaling: nothing to grow (and no
                // division per ACK on a CPU without a divider).
            } else if tcb.cwnd < tcb.ssthresh {
                tcb.cwnd += acked.min(u32::from(tcb.mss));
            } else {
                let mss = u32::from(tcb.mss);
                tcb.cwnd += (mss * mss / tcb.cwnd.max(1)).max(1);
            }
            tcb.cwnd = tcb.cwnd.min(MAX_USEFUL_CWND);
            tcb.snd_una = ack;
            if seq_lt(tcb.snd_nxt, ack) {
                tcb.snd_nxt = ack;
            }
            tcb.dupacks = 0;
            tcb.backoff = 0;
            tcb.flags &= !PERSIST;
            let outstanding = tcb.snd_una != tcb.snd_max;
            let lease = tcb.lease;
            let state = tcb.state;
            if outstanding {
                tcb.rto_at = now.add_micros(u64::from(tcb.rto));
            }
            if outstanding {
                self.wheel.remove(self.tcbs, i);
                self.wheel.insert(self.tcbs, i);
            } else {
                self.wheel.remove(self.tcbs, i);
            }
            if acked > 0 && lease != NONE {
                let session = &mut self.leases[lease as usize].session;
                self.service.acknowledge(session, acked as usize, now);
            }
            if matches!(self.tcbs[idx].class, Class::Busy | Class::Closing) {
                // Progress: the stall (or close) deadline starts again.
                self.touch(i, now);
            }
            if fin_acked {
                match state {
                    State::FinWait1 => self.tcbs[idx].state = State::FinWait2,
                    State::Closing | State::LastAck => {
                        self.free(i, Ending::Closed);
                        return false;
                    }
                    _ => {}
                }
            }
        } else if ack == una
            && segment.payload.is_empty()
            && !segment.has(flags::FIN)
            && una != max
            && u32::from(segment.window) == self.tcbs[idx].snd_wnd
        {
            let tcb = &mut self.tcbs[idx];
            tcb.dupacks = tcb.dupacks.saturating_add(1);
            if tcb.dupacks == 3 && !tcb.has(RECOVERY) {
                // RFC 5681 §3.2 fast retransmit, RFC 6582 recovery point.
                let flight = tcb.in_flight();
                let mss = u32::from(tcb.mss);
                tcb.ssthresh = (flight / 2).max(2 * mss);
                tcb.cwnd = tcb.ssthresh + 3 * mss;
                tcb.recover = tcb.snd_max;
                tcb.flags |= RECOVERY;
                tcb.flags &= !TIMING;
                tcb.snd_nxt = tcb.snd_una;
                self.counters.fast_retransmits += 1;
            } else if tcb.has(RECOVERY) {
                tcb.cwnd += u32::from(tcb.mss);
            }
        }
        // Window update (RFC 9293 §3.10.7.4, SND.WL1/WL2).
        let tcb = &mut self.tcbs[idx];
        if seq_lt(tcb.snd_wl1, segment.seq)
            || (tcb.snd_wl1 == segment.seq && seq_le(tcb.snd_wl2, ack))
        {
            tcb.snd_wnd = u32::from(segment.window);
            tcb.snd_wl1 = segment.seq;
            tcb.snd_wl2 = ack;
        }
        true
    }

    /// Hands in-order payload to the connection's session, or parks it; returns how many
    /// bytes were taken.
    fn deliver(&mut self, i: u32, data: &[u8], now: Instant) -> usize {
        let idx = i as usize;
        // A keep-alive client that sends its next request in the segment that acknowledges
        // the end of its last answer (as Linux's delayed ACK does) reaches this point still
        // holding that answer's session, now idle: settling after the segment would be too
        // late to give it back. While others wait, it gives it back here and its request
        // parks at the tail of the queue, so that it takes turns with them instead of
        // keeping the session for as long as it asks. (A request too large for a cell keeps
        // the session: parking would drop what does not fit.)
        if self.tcbs[idx].lease != NONE
            && self.waiting_len() > 0
            && data.len() <= N
            && self.tcbs[idx].state == State::Established
            && !self.tcbs[idx].has(FIN_RECEIVED)
            && self.lease_phase(i) == Some(SessionPhase::Idle)
        {
            self.release(i);
            self.counters.yielded += 1;
        }
        if self.tcbs[idx].lease == NONE
            && self.tcbs[idx].cell == NONE
            && self.free_lease != NONE
            && self.waiting_len() == 0
            && !self.service.must_park(self.tcbs[idx].carry)
        {
            let lease = self.free_lease;
            self.grant(i, lease, now);
        }
        let lease = self.tcbs[idx].lease;
        if lease != NONE {
            let session = &mut self.leases[lease as usize].session;
            return self.service.receive(session, data, now);
        }
        // Park.
        if self.tcbs[idx].cell == NONE {
            if self.free_cell == NONE {
                return 0;
            }
            let cell = self.free_cell;
            self.free_cell = self.cells[cell as usize].next;
            self.cells[cell as usize].len = 0;
            self.tcbs[idx].cell = cell;
            self.tcbs[idx].request_start = now;
            self.tcbs[idx].flags &= !CELL_COMPLETE;
            self.counters.parked += 1;
        }
        let cell = &mut self.cells[self.tcbs[idx].cell as usize];
        let start = usize::from(cell.len);
        let n = data.len().min(N - start);
        cell.bytes[start..start + n].copy_from_slice(&data[..n]);
        cell.len = (start + n) as u16;
        let carry = self.tcbs[idx].carry;
        let complete = self.service.parked_ready(&cell.bytes[..start + n], carry);
        if complete || usize::from(cell.len) == N {
            self.tcbs[idx].flags |= CELL_COMPLETE;
        }
        n
    }

    /// Leases session slot `lease` to connection `i` and feeds it any parked bytes.
    fn grant(&mut self, i: u32, lease: u32, now: Instant) {
        let idx = i as usize;
        debug_assert_eq!(self.free_lease, lease);
        self.free_lease = self.leases[lease as usize].next;
        self.leases[lease as usize].owner = i;
        self.tcbs[idx].lease = lease;
        self.counters.leased += 1;
        let carry = self.tcbs[idx].carry;
        let port = self.config.port;
        let peer = self.tcbs[idx].remote_ip;
        let session = &mut self.leases[lease as usize].session;
        self.service.open(session, &peer, port, carry, now);
        let cell = self.tcbs[idx].cell;
        if cell != NONE {
            let len = usize::from(self.cells[cell as usize].len);
            let session = &mut self.leases[lease as usize].session;
            let _ = self
                .service
                .receive(session, &self.cells[cell as usize].bytes[..len], now);
            self.cells[cell as usize].len = 0;
            self.cells[cell as usize].next = self.free_cell;
            self.free_cell = cell;
            self.tcbs[idx].cell = NONE;
            self.tcbs[idx].flags &= !CELL_COMPLETE;
            // The window was the cell's: offer the session's now.
            self.tcbs[idx].flags |= ACK_NOW;
        }
    }

    fn release(&mut self, i: u32) {
        let idx = i as usize;
        let lease = self.tcbs[idx].lease;
        if lease == NONE {
            return;
        }
        let session = &mut self.leases[lease as usize].session;
        self.tcbs[idx].carry = self.service.release(session);
        self.tcbs[idx].lease = NONE;
        self.tcbs[idx].flags |= SERVED;
        self.leases[lease as usize].owner = NONE;
        self.leases[lease as usize].next = self.free_lease;
        self.free_lease = lease;
        self.counters.leased -= 1;
    }

    /// Moves connection `i` to `class`'s list (at the tail, with `since`).
    fn set_class(&mut self, i: u32, class: Class, since: Instant) {
        let idx = i as usize;
        let old = self.tcbs[idx].class;
        if old == class {
            return;
        }
        if old != Class::None {
            unlink(&mut self.lists[old as usize], self.tcbs, i, Links::Class);
        }
        self.tcbs[idx].class = class;
        self.tcbs[idx].since = since;
        if class != Class::None {
            push_back(&mut self.lists[class as usize], self.tcbs, i, Links::Class);
        }
    }

    /// Records acknowledgment progress of a busy connection: to the tail of its list.
    fn touch(&mut self, i: u32, now: Instant) {
        let class = self.tcbs[i as usize].class;
        unlink(&mut self.lists[class as usize], self.tcbs, i, Links::Class);
        self.tcbs[i as usize].since = now;
        push_back(&mut self.lists[class as usize], self.tcbs, i, Links::Class);
    }

    /// After anything happened to connection `i`: its session's phase, its class, whether
    /// it has something to send.
    fn settle(&mut self, i: u32, now: Instant) {
        let idx = i as usize;
        if self.tcbs[idx].state == State::Free {
            return;
        }
        let mut phase = None;
        let lease = self.tcbs[idx].lease;
        if lease != NONE {
            let session = &self.leases[lease as usize].session;
            let current = self.service.phase(session);
            match current {
                SessionPhase::Abort => {
                    self.abort(i, Cause::Aborted);
                    return;
                }
                SessionPhase::Closing => self.tcbs[idx].flags |= FIN_WANTED,
                SessionPhase::Idle => {
                    if self.tcbs[idx].has(FIN_RECEIVED) {
                        self.tcbs[idx].flags |= FIN_WANTED;
                    } else if self.tcbs[idx].state == State::Established {
                        self.release(i);
                    }
                }
                SessionPhase::Receiving { .. } => {
                    if self.tcbs[idx].has(FIN_RECEIVED) {
                        // The request can never complete.
                        self.tcbs[idx].flags |= FIN_WANTED;
                    }
                }
                SessionPhase::Sending => {}
            }
            phase = Some(current);
        } else if self.tcbs[idx].has(FIN_RECEIVED)
            && !(self.tcbs[idx].cell != NONE && self.tcbs[idx].has(CELL_COMPLETE))
        {
            // The client is done and nothing of it waits for an answer.
            self.tcbs[idx].flags |= FIN_WANTED;
        }
        let tcb = &self.tcbs[idx];
        let class = if matches!(
            tcb.state,
            State::FinWait1 | State::FinWait2 | State::Closing | State::LastAck
        ) || (tcb.has(FIN_WANTED) && tcb.lease == NONE)
        {
            Class::Closing
        } else if tcb.lease != NONE {
            match phase {
                Some(SessionPhase::Receiving { .. }) => Class::Partial,
                _ => Class::Busy,
            }
        } else if tcb.cell != NONE {
            if !tcb.has(CELL_COMPLETE) {
                Class::Partial
            } else if self.narrow(i) {
                Class::WaitingNarrow
            } else {
                Class::Waiting
            }
        } else if tcb.has(SERVED) {
            Class::Idle
        } else {
            Class::Fresh
        };
        let since = match (class, phase) {
            (Class::Partial, Some(SessionPhase::Receiving { since, .. })) => since,
            (Class::Partial, _) => tcb.request_start,
            (Class::Fresh, _) => tcb.since,
            _ => now,
        };
        self.set_class(i, class, since);
        if self.wants_transmit(i) {
            self.make_ready(i);
        }
    }

    fn lease_phase(&self, i: u32) -> Option<SessionPhase> {
        let lease = self.tcbs[i as usize].lease;
        (lease != NONE).then(|| self.service.phase(&self.leases[lease as usize].session))
    }

    fn send_len(&self, i: u32) -> usize {
        let lease = self.tcbs[i as usize].lease;
        if lease == NONE {
            0
        } else {
            self.service.send_len(&self.leases[lease as usize].session)
        }
    }

    fn wants_transmit(&self, i: u32) -> bool {
        let tcb = &self.tcbs[i as usize];
        if tcb.has(ACK_NOW) || tcb.has(PERSIST) {
            return true;
        }
        let unsent = self.send_len(i).saturating_sub(tcb.data_sent());
        if unsent > 0 {
            return true;
        }
        tcb.has(FIN_WANTED) && !(tcb.has(FIN_SENT) && seq_lt(tcb.fin_seq, tcb.snd_nxt))
    }

    fn make_ready(&mut self, i: u32) {
        if self.tcbs[i as usize].has(BLOCKED) {
            // It waits for its service's bytes: the next poll gives it a turn anyway.
            return;
        }
        if !self.tcbs[i as usize].has(READY) {
            self.tcbs[i as usize].flags |= READY;
            push_back(&mut self.ready, self.tcbs, i, Links::Ready);
        }
    }

    /// Resets connection `i` (counted by `cause`) and frees it.
    fn abort(&mut self, i: u32, cause: Cause) {
        let counter = match cause {
            Cause::EvictClosing => &mut self.counters.evicted_closing,
            Cause::EvictIdle => &mut self.counters.evicted_idle,
            Cause::EvictIncomplete => &mut self.counters.evicted_incomplete,
            Cause::EvictStalled => &mut self.counters.evicted_stalled,
            Cause::HeaderTimeout => &mut self.counters.timeout_header,
            Cause::SendTimeout => &mut self.counters.timeout_send,
            Cause::CloseTimeout => &mut self.counters.timeout_close,
            Cause::Aborted => &mut self.counters.aborted,
        };
        *counter += 1;
        let tcb = &self.tcbs[i as usize];
        let reply = Control {
            dst_mac: tcb.remote_mac,
            src_ip: tcb.local_ip,
            dst_ip: tcb.remote_ip,
            dst_port: tcb.remote_port,
            seq: tcb.snd_nxt,
            ack: tcb.rcv_nxt,
            flags: flags::RST | flags::ACK,
            mss: 0,
            window: 0,
        };
        self.queue_control(reply);
        self.free(i, Ending::Reset);
    }

    /// Queues the ACK of the peer's FIN for a connection about to be freed.
    fn final_ack(&mut self, i: u32) {
        let tcb = &self.tcbs[i as usize];
        let reply = Control {
            dst_mac: tcb.remote_mac,
            src_ip: tcb.local_ip,
            dst_ip: tcb.remote_ip,
            dst_port: tcb.remote_port,
            seq: tcb.snd_nxt,
            ack: tcb.rcv_nxt,
            flags: flags::ACK,
            mss: 0,
            window: 0,
        };
        self.queue_control(reply);
    }

    /// Releases everything connection `i` holds and returns its block to the free list.
    fn free(&mut self, i: u32, ending: Ending) {
        let idx = i as usize;
        if self.tcbs[idx].state == State::Free {
            return;
        }
        let lease = self.tcbs[idx].lease;
        if lease == NONE && self.tcbs[idx].carry != 0 {
            // What the service kept of it between leases goes too.
            self.service.forget(self.tcbs[idx].carry);
        }
        if lease != NONE {
            let session = &mut self.leases[lease as usize].session;
            self.service.close(session, ending);
            self.leases[lease as usize].owner = NONE;
            self.leases[lease as usize].next = self.free_lease;
            self.free_lease = lease;
            self.counters.leased -= 1;
        }
        let cell = self.tcbs[idx].cell;
        if cell != NONE {
            self.cells[cell as usize].len = 0;
            self.cells[cell as usize].next = self.free_cell;
            self.free_cell = cell;
        }
        self.set_class(i, Class::None, Instant(0));
        if self.tcbs[idx].has(READY) {
            unlink(&mut self.ready, self.tcbs, i, Links::Ready);
        }
        if self.tcbs[idx].has(BLOCKED) {
            unlink(&mut self.blocked, self.tcbs, i, Links::Ready);
        }
        self.wheel.remove(self.tcbs, i);
        // Out of the hash chain.
        let (ip, port) = (self.tcbs[idx].remote_ip, self.tcbs[idx].remote_port);
        let bucket = self.bucket(&ip, port);
        let mut link = self.buckets[bucket];
        let mut prev = NONE;
        while link != NONE && link != i {
            prev = link;
            link = self.tcbs[link as usize].hash_next;
        }
        if link == i {
            let next = self.tcbs[idx].hash_next;
            if prev == NONE {
                self.buckets[bucket] = next;
            } else {
                self.tcbs[prev as usize].hash_next = next;
            }
        }
        if self.config.max_per_source > 0 {
            self.source_add(&source_key(&ip), -1);
        }
        self.tcbs[idx] = Tcb::EMPTY;
        self.tcbs[idx].next = self.free_tcb;
        self.free_tcb = i;
        self.counters.open -= 1;
    }

    /// Occupancy in thousandths of the capacity.
    fn pressure(&self) -> u64 {
        let capacity = self.tcbs.len().max(1) as u64;
        u64::from(self.counters.open) * 1000 / capacity
    }

    /// `full` while the pool is at most half full, shrinking linearly to `min` when full.
    fn shrunk(&self, full: u64, min: u64) -> u64 {
        if self.counters.open as usize * 2 <= self.tcbs.len() {
            // The common case, without the division.
            return full;
        }
        let pressure = self.pressure();
        if pressure <= 500 {
            return full;
        }
        let left = 1000u64.saturating_sub(pressure);
        (full * left / 500).max(min).min(full)
    }

    /// The oldest connection of `class` (its list is in order of `since`) if it has been there
    /// `allowance` microseconds or more by `now`.
    fn overdue_head(&self, class: Class, allowance: u64, now: Instant) -> Option<u32> {
        let head = self.lists[class as usize].head;
        (head != NONE && now >= self.tcbs[head as usize].since.add_micros(allowance))
            .then_some(head)
    }

    fn idle_allowance(&self) -> u64 {
        let limits = self.config.limits;
        self.shrunk(limits.idle_micros, limits.idle_min_micros)
    }

    fn first_byte_allowance(&self) -> u64 {
        let limits = self.config.limits;
        self.shrunk(limits.first_byte_micros, limits.idle_min_micros)
    }

    fn header_deadline(&self, i: u32) -> Instant {
        let limits = self.config.limits;
        let tcb = &self.tcbs[i as usize];
        let bytes = if tcb.lease != NONE {
            match self.service.phase(&self.leases[tcb.lease as usize].session) {
                SessionPhase::Receiving { bytes, .. } => bytes as u64,
                _ => 0,
            }
        } else if tcb.cell != NONE {
            u64::from(self.cells[tcb.cell as usize].len)
        } else {
            0
        };
        let extension = bytes
            .checked_div(limits.header_min_rate)
            .map_or(0, |seconds| seconds.saturating_mul(1_000_000));
        tcb.since.add_micros(
            limits
                .header_micros
                .saturating_add(extension)
                .min(limits.header_max_micros.max(limits.header_micros)),
        )
    }

    /// Runs every deadline due at `now`: retransmissions, and the class deadlines.
    fn expire(&mut self, now: Instant) {
        // Retransmission and window-probe timers.
        // Every tick before the current one is over: all its timers are due. (The current
        // tick waits for the next poll: at most one tick late, never processed twice.)
        let last_tick = Wheel::tick_of(now).saturating_sub(1);
        let mut steps = 0;
        while self.wheel.cursor < last_tick && steps < WHEEL_SLOTS {
            let Some(tick) = self.wheel.next_tick() else {
                self.wheel.cursor = last_tick;
                break;
            };
            if tick > last_tick {
                self.wheel.cursor = last_tick;
                break;
            }
            self.wheel.cursor = tick;
            steps += 1;
            let slot = (tick % WHEEL_SLOTS as u64) as usize;
            while self.wheel.slots[slot] != NONE {
                let i = self.wheel.slots[slot];
                self.wheel.remove(self.tcbs, i);
                if self.tcbs[i as usize].rto_at <= now {
                    self.on_rto(i, now);
                } else {
                    self.wheel.insert(self.tcbs, i);
                }
            }
        }
        let limits = self.config.limits;
        while let Some(i) = self.overdue_head(Class::Closing, limits.close_micros, now) {
            self.abort(i, Cause::CloseTimeout);
        }
        let first_byte = self.first_byte_allowance();
        while let Some(i) = self.overdue_head(Class::Fresh, first_byte, now) {
            self.counters.timeout_first_byte += 1;
            self.close_gracefully(i, now);
        }
        let idle = self.idle_allowance();
        while let Some(i) = self.overdue_head(Class::Idle, idle, now) {
            self.counters.timeout_idle += 1;
            self.close_gracefully(i, now);
        }
        while let Some(i) = self.overdue_head(Class::Busy, limits.send_stall_micros, now) {
            self.abort(i, Cause::SendTimeout);
        }
        // Partial headers: deadlines depend on the bytes received, so look at every one old
        // enough to be due, a bounded number per poll.
        let mut i = self.lists[Class::Partial as usize].head;
        let mut looked = 0;
        while i != NONE && looked < PARTIAL_SCAN {
            let next = self.tcbs[i as usize].next;
            let since = self.tcbs[i as usize].since;
            if now < since.add_micros(limits.header_micros) {
                break;
            }
            if self.header_deadline(i) <= now {
                self.abort(i, Cause::HeaderTimeout);
            } else {
                looked += 1;
            }
            i = next;
        }
        // Sessions for waiting requests.
        self.grant_waiting(now);
    }

    /// Gives free sessions to the connections waiting for one, each queue in order (the
    /// narrow-window queue one turn in [`NARROW_TURN`] while the other has requests); when
    /// none is free, takes them back from slow headers and stalled responses.
    fn grant_waiting(&mut self, now: Instant) {
        while self.waiting_len() > 0 {
            if self.free_lease == NONE && !self.reclaim_lease(now) {
                break;
            }
            let open = self.lists[Class::Waiting as usize].head;
            let narrow = self.lists[Class::WaitingNarrow as usize].head;
            let i = if narrow == NONE {
                open
            } else if open == NONE || self.narrow_passed + 1 >= NARROW_TURN {
                self.narrow_passed = 0;
                narrow
            } else {
                self.narrow_passed += 1;
                open
            };
            // The service may price the request first (a TLS handshake's cost) and put it off:
            // then it stays at the head of its queue, and nothing passes it.
            let cell = self.tcbs[i as usize].cell;
            if cell != NONE {
                let parked = &self.cells[cell as usize];
                let first = !self.tcbs[i as usize].has(DEFERRED);
                let carry = self.tcbs[i as usize].carry;
                match self.service.admit(
                    &parked.bytes[..usize::from(parked.len)],
                    carry,
                    first,
                    now,
                ) {
                    Admission::Now => {}
                    Admission::Later(at) => {
                        if first {
                            self.tcbs[i as usize].flags |= DEFERRED;
                            self.counters.deferred += 1;
                        }
                        self.admit_at = Some(at);
                        break;
                    }
                    Admission::Refuse => {
                        self.counters.refused_service += 1;
                        self.abort(i, Cause::Aborted);
                        continue;
                    }
                }
            }
            self.admit_at = None;
            let class = self.tcbs[i as usize].class;
            let lease = self.free_lease;
            self.grant(i, lease, now);
            self.settle(i, now);
            if self.tcbs[i as usize].class == class {
                // Should not happen (a granted connection leaves the queue); never spin.
                break;
            }
        }
    }

    /// Whether connection `i`'s client offers a window narrower than
    /// [`NARROW_WINDOW_SEGMENTS`] segments.
    fn narrow(&self, i: u32) -> bool {
        let tcb = &self.tcbs[i as usize];
        tcb.snd_wnd < NARROW_WINDOW_SEGMENTS * u32::from(tcb.mss)
    }

    /// Frees a session for a waiting request: the oldest incomplete header holding one,
    /// else a response without progress for a while, else, when a request from a client
    /// with an open window waits, a response to a narrow window without progress for
    /// [`NARROW_STALL_MICROS`] (among the least recently progressed few). False if none
    /// may go.
    fn reclaim_lease(&mut self, now: Instant) -> bool {
        let mut i = self.lists[Class::Partial as usize].head;
        let mut looked = 0;
        while i != NONE && looked < PARTIAL_SCAN {
            if self.tcbs[i as usize].lease != NONE {
                self.abort(i, Cause::EvictIncomplete);
                return true;
            }
            i = self.tcbs[i as usize].next;
            looked += 1;
        }
        let head = self.lists[Class::Busy as usize].head;
        if head != NONE
            && now
                >= self.tcbs[head as usize]
                    .since
                    .add_micros(self.config.limits.stall_evict_micros)
        {
            self.abort(head, Cause::EvictStalled);
            return true;
        }
        if self.lists[Class::Waiting as usize].len > 0 {
            let mut i = head;
            let mut looked = 0;
            while i != NONE && looked < PARTIAL_SCAN {
                if now < self.tcbs[i as usize].since.add_micros(NARROW_STALL_MICROS) {
                    // Ordered by last progress: the rest progressed more recently.
                    break;
                }
                if self.narrow(i) {
                    self.counters.evicted_narrow += 1;
                    self.abort(i, Cause::EvictStalled);
                    return true;
                }
                i = self.tcbs[i as usize].next;
                looked += 1;
            }
        }
        false
    }

    /// Closes connection `i` with a FIN (a quiet deadline: nothing was lost).
    fn close_gracefully(&mut self, i: u32, now: Instant) {
        self.tcbs[i as usize].flags |= FIN_WANTED;
        self.set_class(i, Class::Closing, now);
        self.make_ready(i);
    }

    fn on_rto(&mut self, i: u32, now: Instant) {
        let tcb = &mut self.tcbs[i as usize];
        if tcb.has(PERSIST) || (tcb.snd_una == tcb.snd_max && tcb.snd_wnd == 0) {
            // Zero-window probe due.
            tcb.flags |= PERSIST;
            tcb.backoff = tcb.backoff.saturating_add(1);
            self.make_ready(i);
            return;
        }
        if tcb.snd_una == tcb.snd_max {
            return;
        }
        self.counters.retransmit_timeouts += 1;
        let mss = u32::from(tcb.mss);
        tcb.ssthresh = (tcb.in_flight() / 2).max(2 * mss);
        tcb.cwnd = mss;
        tcb.snd_nxt = tcb.snd_una;
        tcb.flags &= !(TIMING | RECOVERY);
        tcb.dupacks = 0;
        tcb.backoff = tcb.backoff.saturating_add(1);
        tcb.rto = tcb.rto.saturating_mul(2).min(MAX_RTO_MICROS);
        tcb.rto_at = now.add_micros(u64::from(tcb.rto));
        self.wheel.insert(self.tcbs, i);
        self.make_ready(i);
    }

    /// Does what is due at `now` (deadlines, sessions for waiting requests) and sends what
    /// the device takes. Returns when to run again if nothing arrives first.
    pub fn poll<T: Transmit>(&mut self, now: Instant, tx: &mut T) -> Option<Instant> {
        self.expire(now);
        self.transmit(now, tx);
        self.next_deadline(now)
    }

    /// Gives each ready connection its turn, alternating with control replies (so that a
    /// flood of SYNs cannot hold up answers, nor answers hold up handshakes).
    fn transmit<T: Transmit>(&mut self, now: Instant, tx: &mut T) {
        if self.ours.is_empty() {
            self.control.clear();
            return;
        }
        // Those that waited for their service's bytes try again.
        while self.blocked.head != NONE {
            let i = self.blocked.head;
            unlink(&mut self.blocked, self.tcbs, i, Links::Ready);
            self.tcbs[i as usize].flags &= !BLOCKED;
            self.make_ready(i);
        }
        // Each connection ready now gets one turn; those with more to send go to the back.
        let mut turns = self.ready.len;
        loop {
            if !tx.can_transmit() {
                return;
            }
            if let Some(control) = self.control.pop_front() {
                let reply = Outgoing {
                    dst_mac: control.dst_mac,
                    src_mac: self.mac,
                    src_ip: control.src_ip,
                    dst_ip: control.dst_ip,
                    src_port: self.config.port,
                    dst_port: control.dst_port,
                    seq: control.seq,
                    ack: control.ack,
                    flags: control.flags,
                    window: control.window,
                    mss: (control.mss != 0).then_some(control.mss),
                    ip_id: self.next_ip_id(),
                };
                let layout = reply.layout();
                if tx.transmit(layout.headers_len(), |frame| {
                    reply.write_laid_out(&layout, frame, 0)
                }) {
                    self.counters.segments_out += 1;
                }
                if !tx.can_transmit() {
                    return;
                }
            }
            if turns == 0 || self.ready.head == NONE {
                if self.control.is_empty() {
                    return;
                }
                continue;
            }
            turns -= 1;
            let i = self.ready.head;
            unlink(&mut self.ready, self.tcbs, i, Links::Ready);
            self.tcbs[i as usize].flags &= !READY;
            let turn_over = self.send_turn(i, now, tx);
            if self.tcbs[i as usize].state == State::Free {
                continue;
            }
            // More now (its turn ended, not its window), or the device filled up mid-turn.
            let more = turn_over || (!tx.can_transmit() && self.wants_transmit(i));
            if self.lease_phase(i) == Some(SessionPhase::Abort) {
                // The service found it cannot complete what it was sending.
                self.abort(i, Cause::Aborted);
                continue;
            }
            if more || self.tcbs[i as usize].has(ACK_NOW) {
                self.make_ready(i);
            }
        }
    }

    fn next_ip_id(&mut self) -> u16 {
        self.ip_id = self.ip_id.wrapping_add(1);
        self.ip_id
    }

    fn outgoing(&mut self, i: u32, seq: u32, seg_flags: u8) -> Outgoing {
        let window = self.receive_window(i);
        let ip_id = self.next_ip_id();
        let tcb = &mut self.tcbs[i as usize];
        tcb.rcv_wnd = window;
        Outgoing {
            dst_mac: tcb.remote_mac,
            src_mac: self.mac,
            src_ip: tcb.local_ip,
            dst_ip: tcb.remote_ip,
            src_port: self.config.port,
            dst_port: tcb.remote_port,
            seq,
            ack: tcb.rcv_nxt,
            flags: seg_flags,
            window,
            mss: None,
            ip_id,
        }
    }

    /// One turn of connection `i`: up to [`BURST`] data segments, a FIN, or an ACK. Returns
    /// whether it stopped only because its turn was over (it has more it may send now).
    fn send_turn<T: Transmit>(&mut self, i: u32, now: Instant, tx: &mut T) -> bool {
        let idx = i as usize;
        if self.tcbs[idx].has(PERSIST) {
            // A window probe: an old sequence number makes the peer answer with its window.
            self.tcbs[idx].flags &= !PERSIST;
            let seq = self.tcbs[idx].snd_una.wrapping_sub(1);
            let out = self.outgoing(i, seq, flags::ACK);
            let layout = out.layout();
            if tx.transmit(layout.headers_len(), |frame| {
                out.write_laid_out(&layout, frame, 0)
            }) {
                self.counters.segments_out += 1;
            }
            let unsent = self.send_len(i) > self.tcbs[idx].data_sent();
            let tcb = &mut self.tcbs[idx];
            tcb.flags &= !ACK_NOW;
            self.wheel.remove(self.tcbs, i);
            if unsent {
                let tcb = &mut self.tcbs[idx];
                let interval = u64::from(tcb.rto) << tcb.backoff.min(6);
                tcb.rto_at = now.add_micros(interval.min(u64::from(MAX_RTO_MICROS)));
                self.wheel.insert(self.tcbs, i);
            }
            return false;
        }
        let mut sent = 0;
        let mut turn_over = false;
        let lease = self.tcbs[idx].lease;
        loop {
            if sent == BURST {
                turn_over = true;
                break;
            }
            if !tx.can_transmit() {
                break;
            }
            let send_len = self.send_len(i);
            let tcb = &self.tcbs[idx];
            let offset = tcb.data_sent();
            let unsent = send_len.saturating_sub(offset);
            let window = tcb.snd_wnd.min(tcb.cwnd);
            let room = window.saturating_sub(tcb.in_flight()) as usize;
            let want = unsent.min(room).min(usize::from(tcb.mss));
            if want == 0 {
                if unsent > 0 && tcb.snd_wnd == 0 && tcb.snd_una == tcb.snd_max {
                    // Zero window with nothing in flight: probe later.
                    let rto = u64::from(tcb.rto);
                    let tcb = &mut self.tcbs[idx];
                    if !tcb.has(IN_WHEEL) {
                        tcb.rto_at = now.add_micros(rto);
                        self.wheel.insert(self.tcbs, i);
                    }
                }
                break;
            }
            // Sender-side silly window avoidance: no small segment while others fly, unless
            // it ends the data.
            if want < usize::from(tcb.mss) && want < unsent && tcb.in_flight() > 0 {
                break;
            }
            let seq = tcb.snd_nxt;
            // Cut the segment so that the next one's bytes line up with its frame's words
            // (segments are multiples of 4 bytes, so after one cut they all do).
            let want = if want < unsent && want > 8 {
                let session = &self.leases[lease as usize].session;
                match self.service.source_address(session, offset + want) {
                    Some(address) => want - (address + 4 - self.payload_alignment) % 4,
                    None => want,
                }
            } else {
                want
            };
            let session = &mut self.leases[lease as usize].session;
            let len = self.service.readable(session, offset, want, now);
            if len == 0 {
                // Not available yet (a body still on its way from the card): next poll.
                if self.send_len(i) > self.tcbs[idx].data_sent() {
                    self.tcbs[idx].flags |= BLOCKED;
                    push_back(&mut self.blocked, self.tcbs, i, Links::Ready);
                }
                break;
            }
            // `readable` may have replaced the response (a 500 for a body that cannot be
            // had): the length to send is the new one's.
            let unsent = self.send_len(i).saturating_sub(offset);
            let last = len == unsent;
            let seg_flags = flags::ACK | if last { flags::PSH } else { 0 };
            let out = self.outgoing(i, seq, seg_flags);
            let layout = out.layout();
            let header = layout.headers_len();
            let session = &mut self.leases[lease as usize].session;
            let service = &self.service;
            let mut alignment = self.payload_alignment;
            let ok = tx.transmit(header + len, |frame| {
                let payload = &mut frame[header..];
                alignment = payload.as_ptr() as usize % 4;
                let (_, payload_sum) = service.read_summed(session, offset, payload);
                out.write_laid_out(&layout, frame, payload_sum);
            });
            self.payload_alignment = alignment;
            if !ok {
                break;
            }
            self.counters.segments_out += 1;
            sent += 1;
            let tcb = &mut self.tcbs[idx];
            tcb.flags &= !ACK_NOW;
            let end = seq.wrapping_add(len as u32);
            if seq_le(tcb.snd_max, seq) {
                // New data (not a retransmission): time it if nothing is being timed.
                if !tcb.has(TIMING) {
                    tcb.flags |= TIMING;
                    tcb.rtt_seq = end;
                    tcb.rtt_start = now;
                }
            }
            tcb.snd_nxt = end;
            if seq_lt(tcb.snd_max, end) {
                tcb.snd_max = end;
            }
            if !tcb.has(IN_WHEEL) {
                tcb.rto_at = now.add_micros(u64::from(tcb.rto));
                self.wheel.insert(self.tcbs, i);
            }
        }
        // FIN once all data is out.
        let send_len = self.send_len(i);
        let tcb = &self.tcbs[idx];
        let fin_pending = tcb.has(FIN_WANTED)
            && tcb.data_sent() >= send_len
            && !(tcb.has(FIN_SENT) && seq_lt(tcb.fin_seq, tcb.snd_nxt));
        if fin_pending && tx.can_transmit() {
            let seq = tcb.snd_nxt;
            let out = self.outgoing(i, seq, flags::FIN | flags::ACK);
            let layout = out.layout();
            if tx.transmit(layout.headers_len(), |frame| {
                out.write_laid_out(&layout, frame, 0)
            }) {
                self.counters.segments_out += 1;
                let tcb = &mut self.tcbs[idx];
                tcb.flags |= FIN_SENT;
                tcb.flags &= !ACK_NOW;
                tcb.fin_seq = seq;
                tcb.snd_nxt = seq.wrapping_add(1);
                if seq_lt(tcb.snd_max, tcb.snd_nxt) {
                    tcb.snd_max = tcb.snd_nxt;
                }
                match tcb.state {
                    State::Established => tcb.state = State::FinWait1,
                    State::CloseWait => tcb.state = State::LastAck,
                    _ => {}
                }
                if !tcb.has(IN_WHEEL) {
                    tcb.rto_at = now.add_micros(u64::from(tcb.rto));
                    self.wheel.insert(self.tcbs, i);
                }
                if self.tcbs[idx].class != Class::Closing {
                    self.set_class(i, Class::Closing, now);
                }
            }
            return false;
        }
        if self.tcbs[idx].has(ACK_NOW) && tx.can_transmit() {
            let seq = self.tcbs[idx].snd_nxt;
            let out = self.outgoing(i, seq, flags::ACK);
            let layout = out.layout();
            if tx.transmit(layout.headers_len(), |frame| {
                out.write_laid_out(&layout, frame, 0)
            }) {
                self.counters.segments_out += 1;
                self.tcbs[idx].flags &= !ACK_NOW;
            }
        }
        turn_over
    }

    /// When the pool next needs to run if nothing arrives: the earliest retransmission or
    /// class deadline, or now if replies wait to be sent.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        if !self.control.is_empty() || self.ready.head != NONE {
            return Some(now);
        }
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| {
            next = Some(next.map_or(at, |n| n.min(at)));
        };
        if let Some(tick) = self.wheel.next_tick() {
            // Processed once its tick is over.
            consider(Instant::from_micros((tick + 1) * WHEEL_TICK_MICROS));
        }
        let limits = self.config.limits;
        let head_since = |class: Class| {
            let head = self.lists[class as usize].head;
            (head != NONE).then(|| self.tcbs[head as usize].since)
        };
        if let Some(since) = head_since(Class::Closing) {
            consider(since.add_micros(limits.close_micros));
        }
        if let Some(at) = self.admit_at.filter(|_| self.waiting_len() > 0) {
            consider(at);
        }
        if let Some(since) = head_since(Class::Fresh) {
            consider(since.add_micros(self.first_byte_allowance()));
        }
        if let Some(since) = head_since(Class::Idle) {
            consider(since.add_micros(self.idle_allowance()));
        }
        if let Some(since) = head_since(Class::Busy) {
            consider(since.add_micros(limits.send_stall_micros));
            if self.waiting_len() > 0 {
                consider(since.add_micros(limits.stall_evict_micros));
            }
            if self.lists[Class::Waiting as usize].len > 0 {
                // A narrow response may be taken back: from when the least recently
                // progressed one could be, looking again now and then (the one at the
                // head may have an open window).
                consider(
                    since
                        .add_micros(NARROW_STALL_MICROS)
                        .max(now.add_micros(NARROW_RECHECK_MICROS)),
                );
            }
        }
        let partial = self.lists[Class::Partial as usize].head;
        if partial != NONE {
            let since = self.tcbs[partial as usize].since;
            let at = since.add_micros(limits.header_micros);
            // Past its base allowance: its exact deadline (or, if others behind it are due
            // too, the next poll looks at them) no later than a second from now.
            consider(if at <= now {
                self.header_deadline(partial).min(now.add_micros(1_000_000))
            } else {
                at
            });
        }
        next
    }
}

/// RFC 6298 §2 round-trip estimate from a sample of `sample` microseconds.
fn update_rtt(tcb: &mut Tcb, sample: u32) {
    if tcb.srtt == 0 {
        tcb.srtt = sample.max(1);
        tcb.rttvar = sample / 2;
    } else {
        let delta = tcb.srtt.abs_diff(sample);
        tcb.rttvar = (3 * (tcb.rttvar / 4)).saturating_add(delta / 4);
        tcb.srtt = (7 * (tcb.srtt / 8)).saturating_add(sample / 8).max(1);
    }
    tcb.rto = tcb
        .srtt
        .saturating_add((4 * tcb.rttvar).max(1_000))
        .clamp(MIN_RTO_MICROS, MAX_RTO_MICROS);
}
