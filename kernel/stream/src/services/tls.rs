//! HTTPS over the stream pool: a TLS session around the HTTP engine's [`Connection`](bramble_http::Connection), served
//! by the same pool, with the same admission, eviction, deadlines and fair turns as plain
//! HTTP (one [`crate::StreamPool`] per port; the HTTPS one is [`TlsService`] over cells of
//! [`TLS_CELL_LEN`] bytes).
//!
//! # What a connection holds, and when
//!
//! - **Before its ClientHello:** a control block, nothing else. Its first bytes wait in a
//!   cell ([`Service::must_park`]) until they hold the whole ClientHello (or fill the cell);
//!   then [`bramble_tls::hello`] prices the handshake in instructions measured on the target
//!   (6.62 M with X25519 and an ECDSA P-256 certificate, 19.5 M with P-256 key exchange,
//!   3.63 M with an Ed25519 certificate), and the [`HandshakeBudget`] admits it
//!   ([`Service::admit`]) or puts it off: it then waits at the head of the pool's queue, and
//!   no newer hello passes it, so a flood of cheap hellos cannot starve a client offering
//!   only P-256. Hellos wait in three lanes by their price ([`Service::lane`]): dearer than
//!   an X25519 handshake (P-256 only, a retry, unreadable), a resumption, the rest; the
//!   pool gives the lanes turns, so a flood of P-256-only hellos or of replayed tickets
//!   waits behind itself while a browser's X25519 hello waits for at most one of them.
//!   Bytes that are no TLS handshake record are refused (reset) at once.
//! - **While bytes flow** (a handshake, a request, a response): a session slot ([`TlsSlot`],
//!   leased by the pool) with the HTTP engine's connection, a receive buffer of a whole
//!   record and a transmit queue. The queue keeps sealed records until the client
//!   acknowledges them: the pool reads them from it ([`Service::read_at`]) for a first
//!   transmission or a retransmission alike. Plaintext is sealed into it through one
//!   scratch buffer the service shares among all slots (the loop serves one at a time).
//! - **Idle between requests:** rustls's state only (keys, sequence numbers), suspended
//!   ([`bramble_tls::session::Suspended`]) in a [`Carried`] entry the connection's carry
//!   names; the slot and its buffers go back to the pool for another connection. An HTTP/2
//!   connection is idle when no stream is open and nothing waits to be sent or read
//!   ([`Negotiated::can_park`]): its 27 KiB session goes back to the heap too, and the entry
//!   keeps a compact state beside rustls's ([`Parked`]: windows, last stream id, the
//!   client's initial window, and the HPACK dynamic table's contents, 27 bytes plus the
//!   table's). Its next bytes carry it on in a slot as an HTTP/1.1 connection's do. The
//!   parked HTTP/2 states together stay within a bound
//!   ([`bramble_h2::PARKED_BYTES_PER_CONNECTION`] per connection the pool holds, which the
//!   board's TLS heap reserves); an idle HTTP/2 connection whose state would pass it is
//!   told GOAWAY and closed instead of keeping its slot (counted, `closed for room`).
//!
//! # The plaintext side
//!
//! The session hands decrypted bytes to an [`Application`] and seals what the application
//! writes: the HTTP engine as ALPN chose ([`Negotiated`]: HTTP/1.1's [`bramble_http::Connection`]
//! or an HTTP/2 session around it; the choices offered are `bramble_tls`'s
//! `ALPN_PROTOCOLS`), told the protocol once the handshake is done. Both give their slot
//! back between requests (above); an HTTP/2 connection in the middle of a frame keeps it and
//! waits for the rest as a request being received does, under the same deadlines and taken
//! back first when others wait.

use crate::{Admission, Ending, Lane, Service, SessionPhase, wire};
use alloc::sync::Arc;
use bramble_h2::{Negotiated, Parked, Protocol};
use bramble_hal::Instant;
use bramble_http::{Activity, Server};
use bramble_tls::hello::{self, CertificateKey, Group, HandshakeCost, Peek};
use bramble_tls::session::{Phase, SessionError, Suspended, TlsSession};
use bramble_tls::{Application, ServerConfig};
use core::cell::RefCell;

/// Bytes of a cell for the first bytes of an HTTPS connection: a whole ClientHello, even
/// one with a post-quantum key share (about 1,800 bytes from current browsers), so that
/// it is priced by its group rather than at the dearest.
pub const TLS_CELL_LEN: usize = 2048;
/// Bytes of a slot's transmit queue: the server's first flight (the certificate chain plus
/// about 2 KiB), or sealed records waiting for their acknowledgment.
pub const QUEUE_LEN: usize = 24 * 1024;
/// Bytes of the plaintext scratch the service shares: the largest record it seals.
pub const SCRATCH_LEN: usize = 16 * 1024;
/// The smallest record sealed while earlier ones wait in the queue for their
/// acknowledgment (smaller ones would waste 22-29 bytes and a seal each).
const MIN_RECORD: usize = 4 * 1024;
/// Queue room that close_notify needs at most (a sealed alert: 5 + 2 + 1 + 16 bytes in TLS
/// 1.3, 5 + 8 + 2 + 16 in TLS 1.2).
const CLOSE_NOTIFY_ROOM: usize = 64;
/// The server's first flight besides the certificate chain: ServerHello,
/// EncryptedExtensions, CertificateVerify, Finished, record framing, tickets.
pub const FLIGHT_OVERHEAD: usize = 2 * 1024;

/// The CPU handshakes may take, in thousands of instructions a second: 45% of a 700 MHz
/// ARM1176 at about one instruction a cycle (what 48 X25519 handshakes a second took), so
/// that plain HTTP and the open connections keep the rest whatever groups the clients offer:
/// 47 full handshakes a second with X25519, 16 with P-256 only, 86 with an Ed25519
/// certificate, about 100 resumptions.
pub const HANDSHAKE_SHARE_PER_SECOND: u32 = 315_000;
/// Handshake work that may start back to back after a quiet spell (thousands of
/// instructions): 16 full X25519 handshakes, more than the dearest one (19.5 M).
pub const HANDSHAKE_BURST: u32 = 16 * 6_620;

/// A token bucket of handshake work (thousands of instructions): refills at a fixed rate up
/// to a burst.
#[derive(Clone, Copy, Debug)]
pub struct HandshakeBudget {
    per_second: u32,
    burst: u32,
    /// Work in millionths of a unit.
    micro_tokens: u64,
    refilled_at: Instant,
}

const ONE_TOKEN: u64 = 1_000_000;

impl HandshakeBudget {
    /// A full bucket of `burst` units refilling at `per_second` units a second.
    pub fn new(per_second: u32, burst: u32, now: Instant) -> Self {
        Self {
            per_second: per_second.max(1),
            burst: burst.max(1),
            micro_tokens: u64::from(burst.max(1)) * ONE_TOKEN,
            refilled_at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.micros_since(self.refilled_at);
        self.refilled_at = now;
        let added = elapsed.saturating_mul(u64::from(self.per_second));
        self.micro_tokens = self
            .micro_tokens
            .saturating_add(added)
            .min(u64::from(self.burst) * ONE_TOKEN);
    }

    /// What `cost` needs in the bucket: all of it, or a full bucket for work beyond a burst.
    fn needed(&self, cost: u32) -> u64 {
        u64::from(cost.min(self.burst)) * ONE_TOKEN
    }

    /// Takes `cost` units if the bucket holds them.
    pub fn take(&mut self, cost: u32, now: Instant) -> bool {
        self.refill(now);
        if self.micro_tokens >= self.needed(cost) {
            self.micro_tokens = self
                .micro_tokens
                .saturating_sub(u64::from(cost) * ONE_TOKEN);
            true
        } else {
            false
        }
    }

    /// Returns `units` taken for work that was not done (up to the burst).
    pub fn give_back(&mut self, units: u32, now: Instant) {
        self.refill(now);
        self.micro_tokens = self
            .micro_tokens
            .saturating_add(u64::from(units) * ONE_TOKEN)
            .min(u64::from(self.burst) * ONE_TOKEN);
    }

    /// When `cost` units will be there (now, if they are).
    pub fn next_token(&self, cost: u32, now: Instant) -> Instant {
        let mut copy = *self;
        copy.refill(now);
        let missing = self.needed(cost).saturating_sub(copy.micro_tokens);
        now.add_micros(missing.div_ceil(u64::from(self.per_second)))
    }
}

/// Share of the wall-clock time that handshakes may take, measured, in thousandths: the
/// share [`HANDSHAKE_SHARE_PER_SECOND`] is of a 700 MHz core. The instruction budget prices a
/// hello before its work; where the CPU runs slower than priced (QEMU on a busy host ran the
/// guest at about 100 M instructions a second, a seventh of a Pi), the same budget let
/// handshakes take the whole CPU and plain HTTP starved. With a clock
/// ([`TlsService::set_cpu_clock`]) the time each handshake really took is counted too, and a
/// new hello waits while handshakes have used more than this share.
pub const HANDSHAKE_TIME_PER_MILLE: u64 = 450;
/// Measured handshake time that may run back to back after a quiet spell (microseconds).
pub const HANDSHAKE_TIME_BURST_MICROS: u64 = 250_000;

/// The measured side of the handshake budget: microseconds of handshake work allowed,
/// refilling at [`HANDSHAKE_TIME_PER_MILLE`] of the time passing, up to a burst; what
/// handshakes take is subtracted, and may run it into debt.
#[derive(Clone, Copy, Debug)]
pub struct HandshakeTime {
    per_mille: u64,
    burst: i64,
    /// Allowed microseconds, in thousandths (negative: in debt).
    milli_available: i64,
    refilled_at: Instant,
}

impl HandshakeTime {
    /// A full bucket of `burst_micros`, refilling at `per_mille` thousandths of real time.
    pub fn new(per_mille: u64, burst_micros: u64, now: Instant) -> Self {
        let burst = i64::try_from(burst_micros.saturating_mul(1000)).unwrap_or(i64::MAX);
        Self {
            per_mille: per_mille.clamp(1, 1000),
            burst,
            milli_available: burst,
            refilled_at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.micros_since(self.refilled_at);
        self.refilled_at = now;
        let added = i64::try_from(elapsed.saturating_mul(self.per_mille)).unwrap_or(i64::MAX);
        self.milli_available = self.milli_available.saturating_add(added).min(self.burst);
    }

    /// Handshake work took `micros`.
    pub fn spend(&mut self, micros: u64, now: Instant) {
        self.refill(now);
        let spent = i64::try_from(micros.saturating_mul(1000)).unwrap_or(i64::MAX);
        self.milli_available = self.milli_available.saturating_sub(spent);
    }

    /// When a new handshake may start: now if nothing is owed.
    pub fn ready_at(&self, now: Instant) -> Instant {
        let mut copy = *self;
        copy.refill(now);
        if copy.milli_available > 0 {
            return now;
        }
        let owed = copy.milli_available.unsigned_abs().saturating_add(1);
        now.add_micros(owed.div_ceil(self.per_mille))
    }
}

/// TLS counts, for the status line (the connections' own are the pool's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsCounters {
    /// Handshakes completed with a full key exchange and signature.
    pub full_handshakes: u64,
    /// Handshakes completed by resuming a ticket.
    pub resumed_handshakes: u64,
    /// Sessions ended by a TLS error (bad record, failed handshake, refused name).
    pub failures: u64,
    /// ClientHellos put off because the handshake budget was spent.
    pub deferred: u64,
    /// Connections reset because their first bytes were no TLS handshake record.
    pub refused_not_tls: u64,
    /// ClientHellos priced with P-256 key exchange (offered only P-256, first, or asked for
    /// a retry; or unreadable, priced as dearest).
    pub priced_p256: u64,
    /// Handshake work charged to the budget, in millions of instructions (resumptions' given
    /// back signatures deducted).
    pub charged_millions: u64,
    /// Of `failures`: sessions closed because their waiting plaintext found no heap, or
    /// would have passed its bound (`bramble_tls::session::MAX_PENDING_LEN`).
    pub memory_closed: u64,
    /// Connections that negotiated HTTP/2 (ALPN `h2`).
    pub h2_connections: u64,
    /// Idle sessions suspended (their slot given back) and resumed.
    pub suspended: u64,
    /// Idle sessions that are suspended now.
    pub suspended_now: u32,
    /// Of `suspended`: idle HTTP/2 connections (their session freed, a compact state kept).
    pub h2_suspended: u64,
    /// Suspended HTTP/2 connections carried on when their next bytes came.
    pub h2_resumed: u64,
    /// Idle HTTP/2 connections ended (GOAWAY, or dropped when their state found no room)
    /// because the parked HTTP/2 state would have passed its bound.
    pub h2_closed_for_room: u64,
    /// Heap the suspended HTTP/2 connections' compact states hold now.
    pub h2_parked_bytes: usize,
}

impl TlsCounters {
    /// Counts a session that ended with `error`.
    fn failed(&mut self, error: &SessionError) {
        self.failures += 1;
        if matches!(
            error,
            SessionError::OutOfMemory | SessionError::PlaintextOverflow
        ) {
            self.memory_closed += 1;
        }
    }
}

/// The HTTP engine (HTTP/1.1 or HTTP/2, as ALPN chose) as a TLS session's application.
pub struct Http<'c, 's, 'a> {
    connection: &'c mut Negotiated,
    server: &'s mut Server<'a>,
    now: Instant,
}

impl Application for Http<'_, '_, '_> {
    fn receive(&mut self, data: &[u8]) -> usize {
        self.connection.receive(self.server, data, self.now)
    }

    fn transmit(&mut self, out: &mut [u8]) -> usize {
        self.connection.transmit(self.server, out, self.now)
    }
}

/// A TLS session, or its buffers while the slot has none.
// Large only while active; both variants live in the pool's fixed memory, where boxing would
// move the session into the TLS heap for nothing.
#[allow(clippy::large_enum_variant)]
enum Slot<'a> {
    Idle(Option<(&'a mut [u8], &'a mut [u8])>),
    Active(TlsSession<'a>),
}

/// One session slot of the HTTPS pool: the HTTP engine's connection inside a TLS session,
/// over a receive buffer of a whole record ([`bramble_tls::session::MAX_RECORD_LEN`]) and a
/// transmit queue ([`QUEUE_LEN`]), both lent for the appliance's life.
pub struct TlsSlot<'a> {
    http: Negotiated,
    tls: Slot<'a>,
    /// The ClientHello's price (a resumption gives its signature back).
    price: Option<HandshakeCost>,
    /// The handshake's completion has been counted.
    counted: bool,
    /// The session cannot go on (reset the connection).
    broken: bool,
    /// When the handshake, or the record being received between requests, began.
    since: Instant,
}

impl<'a> TlsSlot<'a> {
    /// A slot over its two buffers.
    pub fn new(incoming: &'a mut [u8], outgoing: &'a mut [u8]) -> Self {
        Self {
            http: Negotiated::new(),
            tls: Slot::Idle(Some((incoming, outgoing))),
            price: None,
            counted: false,
            broken: false,
            since: Instant(0),
        }
    }

    /// Ends the TLS session (rustls's state is freed) and takes the buffers back.
    fn end(&mut self) {
        if let Slot::Active(_) = self.tls {
            let Slot::Active(session) = core::mem::replace(&mut self.tls, Slot::Idle(None)) else {
                return;
            };
            self.tls = Slot::Idle(Some(session.into_buffers()));
        }
    }

    fn session(&self) -> Option<&TlsSession<'a>> {
        match &self.tls {
            Slot::Active(session) => Some(session),
            Slot::Idle(_) => None,
        }
    }
}

/// Where an idle connection's TLS state waits for its next request: one entry per
/// connection the HTTPS pool can hold.
pub struct Carried {
    state: Option<(Suspended, Parked)>,
    next: u32,
}

impl Carried {
    /// An empty entry.
    pub const fn new() -> Self {
        Self {
            state: None,
            next: u32::MAX,
        }
    }
}

impl Default for Carried {
    fn default() -> Self {
        Self::new()
    }
}

/// HTTPS as a [`Service`]: the site's [`Server`] (shared with the plain HTTP pool), the
/// TLS configuration, the handshake budget and the suspended sessions.
pub struct TlsService<'a> {
    server: &'a RefCell<Server<'a>>,
    config: Arc<ServerConfig>,
    /// The certificate's key (what a full handshake's signature costs).
    key: CertificateKey,
    budget: HandshakeBudget,
    /// Handshake time measured against its share, with `cpu_clock`.
    time: HandshakeTime,
    /// Reads the time now, to measure handshake work (`None`: priced by instructions only).
    cpu_clock: Option<fn() -> Instant>,
    /// Charged work not yet counted in whole millions.
    charged_thousands: u64,
    counters: TlsCounters,
    carried: &'a mut [Carried],
    free_carried: u32,
    /// Heap held by parked HTTP/2 connections' states, and its bound.
    parked_h2_bytes: usize,
    parked_h2_budget: usize,
    scratch: &'a mut [u8],
    /// The price [`Service::admit`] just took, for the [`Service::open`] that follows.
    admitted: Option<HandshakeCost>,
}

impl<'a> TlsService<'a> {
    /// Serves `server`'s site over TLS with `config` (whose certificate has `key`), keeping
    /// idle sessions in `carried` (one entry per connection the pool holds; entries made
    /// with [`Carried::new`], or holding sessions an earlier service over them suspended)
    /// and sealing through `scratch` ([`SCRATCH_LEN`] bytes), with the default handshake
    /// budget.
    pub fn new(
        server: &'a RefCell<Server<'a>>,
        config: Arc<ServerConfig>,
        key: CertificateKey,
        carried: &'a mut [Carried],
        scratch: &'a mut [u8],
        now: Instant,
    ) -> Self {
        // Entries that hold a session already (a service made again over the same memory,
        // as `bramble serve` does for each new image) keep it.
        let mut free_carried = u32::MAX;
        let mut suspended_now = 0;
        let mut parked_h2_bytes = 0;
        for (i, entry) in carried.iter_mut().enumerate().rev() {
            if let Some((_, parked)) = &entry.state {
                suspended_now += 1;
                parked_h2_bytes += parked.heap_len();
            } else {
                entry.next = free_carried;
                free_carried = i as u32;
            }
        }
        Self {
            server,
            config,
            key,
            budget: HandshakeBudget::new(HANDSHAKE_SHARE_PER_SECOND, HANDSHAKE_BURST, now),
            time: HandshakeTime::new(HANDSHAKE_TIME_PER_MILLE, HANDSHAKE_TIME_BURST_MICROS, now),
            cpu_clock: None,
            charged_thousands: 0,
            counters: TlsCounters {
                suspended_now,
                ..TlsCounters::default()
            },
            parked_h2_budget: (carried.len() * bramble_h2::PARKED_BYTES_PER_CONNECTION)
                .max(bramble_h2::MAX_PARKED_LEN),
            carried,
            free_carried,
            parked_h2_bytes,
            scratch,
            admitted: None,
        }
    }

    /// Replaces the handshake budget (tests).
    pub fn set_budget(&mut self, budget: HandshakeBudget) {
        self.budget = budget;
    }

    /// Measures handshake work with `clock` (the time now, read at every call), holding it to
    /// [`HANDSHAKE_TIME_PER_MILLE`] of the time as well as to the instruction budget.
    pub fn set_cpu_clock(&mut self, clock: fn() -> Instant) {
        self.cpu_clock = Some(clock);
    }

    /// Bounds the heap parked HTTP/2 connections may hold together (by default
    /// [`bramble_h2::PARKED_BYTES_PER_CONNECTION`] for each connection the pool holds, and
    /// at least one connection's most, [`bramble_h2::MAX_PARKED_LEN`]).
    pub fn set_parked_h2_budget(&mut self, bytes: usize) {
        self.parked_h2_budget = bytes;
    }

    /// Heap parked HTTP/2 connections hold now.
    pub fn parked_h2_bytes(&self) -> usize {
        self.parked_h2_bytes
    }

    /// Whether `slot`'s parked HTTP/2 state would fit beside the others'.
    fn parked_h2_fits(&self, slot: &TlsSlot<'_>) -> bool {
        self.parked_h2_bytes.saturating_add(slot.http.parked_len()) <= self.parked_h2_budget
    }

    /// Replaces the measured side of the handshake budget (tests).
    pub fn set_time_budget(&mut self, time: HandshakeTime) {
        self.time = time;
    }

    /// The time now by the CPU clock, if there is one and `slot` is in its handshake.
    fn handshake_started(&self, slot: &TlsSlot<'_>) -> Option<Instant> {
        if slot.counted {
            return None;
        }
        self.cpu_clock.map(|clock| clock())
    }

    /// Counts the handshake work since `started` (see [`TlsService::handshake_started`]).
    fn handshake_worked(&mut self, started: Option<Instant>) {
        let Some(started) = started else {
            return;
        };
        let Some(clock) = self.cpu_clock else {
            return;
        };
        let now = clock();
        self.time.spend(now.micros_since(started), now);
    }

    /// Serves `config` (a renewed certificate, with `key`) to connections opened from now
    /// on; open ones finish with the one they started with.
    pub fn replace_config(&mut self, config: Arc<ServerConfig>, key: CertificateKey) {
        self.config = config;
        self.key = key;
    }

    /// The counts so far.
    pub fn counters(&self) -> TlsCounters {
        TlsCounters {
            h2_parked_bytes: self.parked_h2_bytes,
            ..self.counters
        }
    }

    fn charge(&mut self, thousands: u32, given_back: bool) {
        if given_back {
            self.charged_thousands = self.charged_thousands.saturating_sub(u64::from(thousands));
        } else {
            self.charged_thousands = self.charged_thousands.saturating_add(u64::from(thousands));
        }
        self.counters.charged_millions = self.charged_thousands / 1000;
    }

    /// Keeps a suspended session; returns its carry (0: no room, it is dropped).
    fn keep(&mut self, state: (Suspended, Parked)) -> u32 {
        let index = self.free_carried;
        let Some(entry) = self.carried.get_mut(index as usize) else {
            return 0;
        };
        self.free_carried = entry.next;
        let h2 = state.1.heap_len();
        entry.state = Some(state);
        entry.next = u32::MAX;
        self.counters.suspended += 1;
        self.counters.suspended_now += 1;
        if h2 > 0 {
            self.counters.h2_suspended += 1;
            self.parked_h2_bytes += h2;
        }
        index + 1
    }

    /// Takes back the suspended session `carry` names.
    fn take(&mut self, carry: u32) -> Option<(Suspended, Parked)> {
        let index = carry.checked_sub(1)?;
        let entry = self.carried.get_mut(index as usize)?;
        let state = entry.state.take()?;
        entry.next = self.free_carried;
        self.free_carried = index;
        self.counters.suspended_now -= 1;
        self.parked_h2_bytes = self.parked_h2_bytes.saturating_sub(state.1.heap_len());
        Some(state)
    }

    /// Moves the session on after anything happened to it: plaintext waiting for the HTTP
    /// engine goes to it, what it has to send is sealed into the queue, and once it is done
    /// (or the peer closed) close_notify follows its last bytes (RFC 8446 §6.1).
    fn advance(&mut self, slot: &mut TlsSlot<'_>, now: Instant) {
        let Slot::Active(session) = &mut slot.tls else {
            return;
        };
        let server_cell = self.server;
        let mut server = server_cell.borrow_mut();
        // Once the handshake is done, the engine learns the protocol ALPN chose; plaintext
        // that came with the client's Finished waited in the session for it (the poll
        // below offers it).
        if slot.http.protocol() == Protocol::Undecided
            && !session.is_handshaking()
            && session.error().is_none()
        {
            slot.http.select(session.alpn_protocol());
            if slot.http.protocol() == Protocol::H2 {
                self.counters.h2_connections += 1;
            }
        }
        let mut http = Http {
            connection: &mut slot.http,
            server: &mut server,
            now,
        };
        if session.error().is_none() {
            // Plaintext the engine could not take while a response was going out.
            if let Err(error) = session.poll(&mut http) {
                self.counters.failed(&error);
            }
        }
        // An idle HTTP/2 connection whose compact state would pass the bound on parked ones
        // is told GOAWAY (and closes once it is out) rather than keep its slot.
        if http.connection.protocol() == Protocol::H2
            && session.error().is_none()
            && session.is_quiet()
            && http.connection.can_park()
            && self
                .parked_h2_bytes
                .saturating_add(http.connection.parked_len())
                > self.parked_h2_budget
        {
            http.connection.shut_down();
            self.counters.h2_closed_for_room += 1;
        }
        if session.error().is_none() {
            session.fill(&mut http, self.scratch, MIN_RECORD);
            if let Some(error) = session.error() {
                self.counters.failed(&error.clone());
            }
        }
        drop(server);
        let http_done = slot.http.activity() == Activity::Closing && slot.http.pending_len() == 0;
        let peer_closed = matches!(session.phase(), Phase::PeerClosed | Phase::Closed);
        // (close_notify is sealed once the queue has room for it: acknowledgments make it.)
        if session.error().is_none()
            && !session.is_closing()
            && (http_done || peer_closed)
            && session.queue_room() >= CLOSE_NOTIFY_ROOM
        {
            session.close();
        }
        // The handshake's completion.
        if !slot.counted && session.phase() != Phase::Handshaking && session.error().is_none() {
            slot.counted = true;
            if session.is_resumed() {
                self.counters.resumed_handshakes += 1;
                // No signature was made: its price goes back to the budget.
                if let Some(price) = slot.price {
                    self.budget.give_back(price.signature, now);
                    self.charge(price.signature, true);
                }
            } else {
                self.counters.full_handshakes += 1;
            }
        }
    }

    /// A whole TLS record at the start of `bytes`.
    fn whole_record(bytes: &[u8]) -> bool {
        match bytes.get(..5) {
            Some(header) => {
                let length = usize::from(u16::from_be_bytes([header[3], header[4]]));
                bytes.len() >= 5 + length
            }
            None => false,
        }
    }
}

impl<'a> Service for TlsService<'a> {
    type Session = TlsSlot<'a>;

    fn open(
        &mut self,
        slot: &mut TlsSlot<'a>,
        peer: &wire::Address,
        _local_port: u16,
        carry: u32,
        now: Instant,
    ) {
        slot.end();
        slot.broken = false;
        slot.since = now;
        let Slot::Idle(buffers) = &mut slot.tls else {
            slot.broken = true;
            return;
        };
        let Some((incoming, outgoing)) = buffers.take() else {
            slot.broken = true;
            return;
        };
        let server_cell = self.server;
        let mut server = server_cell.borrow_mut();
        if carry == 0 {
            slot.price = self.admitted.take();
            slot.counted = false;
            match TlsSession::new(self.config.clone(), incoming, outgoing) {
                Ok(session) => slot.tls = Slot::Active(session),
                Err(error) => {
                    // Cannot happen with a checked configuration; the buffers are lost to
                    // this slot, which then resets every connection it is lent to.
                    log::error!("tls: cannot start a session: {error}");
                    self.counters.failures += 1;
                    slot.broken = true;
                }
            }
            slot.http.open_secure(&mut server, now);
        } else {
            slot.price = None;
            slot.counted = true;
            match self.take(carry) {
                Some((suspended, parked)) => {
                    slot.tls = Slot::Active(TlsSession::resume(suspended, incoming, outgoing));
                    let h2 = matches!(parked, Parked::H2(_));
                    if slot.http.unpark(&mut server, now, parked) {
                        self.counters.h2_resumed += u64::from(h2);
                    } else {
                        self.counters.failures += 1;
                        self.counters.memory_closed += 1;
                        slot.broken = true;
                    }
                }
                None => {
                    slot.tls = Slot::Idle(Some((incoming, outgoing)));
                    slot.broken = true;
                    slot.http.open_secure(&mut server, now);
                }
            }
        }
        // The access log ends each line with the client's address (its family shows).
        let address = match wire::as_v4(peer) {
            Some(v4) => core::net::IpAddr::from(v4),
            None => core::net::IpAddr::from(*peer),
        };
        slot.http.set_peer(address);
    }

    fn receive(&mut self, slot: &mut TlsSlot<'a>, data: &[u8], now: Instant) -> usize {
        let Slot::Active(session) = &mut slot.tls else {
            return data.len();
        };
        if session.error().is_some() {
            // Nothing more is read from a failed session.
            return data.len();
        }
        if session.is_quiet() {
            // The first bytes of a record between requests.
            slot.since = now;
        }
        let started = self.handshake_started(slot);
        let Slot::Active(session) = &mut slot.tls else {
            return data.len();
        };
        let taken = {
            let server_cell = self.server;
            let mut server = server_cell.borrow_mut();
            let mut http = Http {
                connection: &mut slot.http,
                server: &mut server,
                now,
            };
            match session.receive(&mut http, data) {
                Ok(taken) => taken,
                Err(error) => {
                    log::debug!("tls: {error}");
                    self.counters.failed(&error);
                    data.len()
                }
            }
        };
        self.advance(slot, now);
        self.handshake_worked(started);
        taken
    }

    fn parked_ready(&self, parked: &[u8], carry: u32) -> bool {
        if carry == 0 {
            hello::peek(parked) != Peek::Incomplete
        } else {
            Self::whole_record(parked)
        }
    }

    fn must_park(&self, carry: u32) -> bool {
        carry == 0
    }

    fn admit(&mut self, parked: &[u8], carry: u32, first: bool, now: Instant) -> Admission {
        if carry != 0 {
            return Admission::Now;
        }
        let peeked = match hello::peek(parked) {
            Peek::NotTls => {
                self.counters.refused_not_tls += 1;
                return Admission::Refuse;
            }
            Peek::Hello(summary) => Some(summary),
            // A full cell still without the whole record, or a record this view cannot
            // read: rustls decides, at the dearest price.
            Peek::Incomplete | Peek::Unreadable => None,
        };
        if first {
            let p256 = match peeked {
                Some(summary) => summary.group == Some(Group::P256) || summary.retry,
                None => true,
            };
            self.counters.priced_p256 += u64::from(p256);
        }
        let price = HandshakeCost::of(peeked, self.key);
        // Handshakes took their share of the time already (a slower CPU than priced).
        let ready = self.time.ready_at(now);
        if ready > now {
            self.counters.deferred += u64::from(first);
            return Admission::Later(ready);
        }
        if self.budget.take(price.charged, now) {
            self.charge(price.charged, false);
            self.admitted = Some(price);
            Admission::Now
        } else {
            self.counters.deferred += u64::from(first);
            Admission::Later(self.budget.next_token(price.charged, now))
        }
    }

    fn lane(&self, parked: &[u8], carry: u32) -> Lane {
        if carry != 0 {
            // The next request on a connection with keys: no handshake, never put off.
            return Lane::Keyed;
        }
        let peeked = match hello::peek(parked) {
            // Refused when its turn comes, at no cost.
            Peek::NotTls => return Lane::Common,
            Peek::Hello(summary) => Some(summary),
            Peek::Incomplete | Peek::Unreadable => None,
        };
        let common = HandshakeCost::of(
            Some(hello::HelloSummary {
                group: Some(Group::X25519),
                retry: false,
                tls13: true,
                resumption: false,
            }),
            self.key,
        );
        let price = HandshakeCost::of(peeked, self.key);
        if price.charged > common.charged {
            Lane::Heavy
        } else if peeked.is_some_and(|summary| summary.resumption) {
            Lane::Light
        } else {
            Lane::Common
        }
    }

    fn price(&self, parked: &[u8], carry: u32) -> u32 {
        if carry != 0 {
            // A request between others on a connection with keys: no handshake.
            return 1;
        }
        let peeked = match hello::peek(parked) {
            // Refused when its turn comes, at no cost.
            Peek::NotTls => return 1,
            Peek::Hello(summary) => Some(summary),
            Peek::Incomplete | Peek::Unreadable => None,
        };
        HandshakeCost::of(peeked, self.key).charged
    }

    fn answerable_after_fin(&self, carry: u32) -> bool {
        // A handshake cannot end without the client's Finished.
        carry != 0
    }

    fn fair_by_source(&self) -> bool {
        true
    }

    fn forget(&mut self, carry: u32) {
        // Dropping the suspended session frees rustls's state.
        let _ = self.take(carry);
    }

    fn receive_window(&self, slot: &TlsSlot<'a>) -> usize {
        slot.session().map_or(0, TlsSession::receive_space)
    }

    fn send_len(&self, slot: &TlsSlot<'a>) -> usize {
        let Some(session) = slot.session() else {
            return 0;
        };
        // While the engine has more to give than the queue holds, some of it is announced
        // (up to a small record's worth: sealing adds to it), so that the pool asks for it
        // ([`Service::readable`] seals it then).
        let more = if session.error().is_none() && !session.is_closing() {
            slot.http.pending_len().min(MIN_RECORD)
        } else {
            0
        };
        session.queued() + more
    }

    fn readable(
        &mut self,
        slot: &mut TlsSlot<'a>,
        offset: usize,
        max: usize,
        now: Instant,
    ) -> usize {
        let queued = slot.session().map_or(0, TlsSession::queued);
        if offset.saturating_add(max) > queued {
            self.advance(slot, now);
        }
        let queued = slot.session().map_or(0, TlsSession::queued);
        queued.saturating_sub(offset).min(max)
    }

    fn read_at(&self, slot: &mut TlsSlot<'a>, offset: usize, out: &mut [u8]) -> usize {
        slot.session()
            .map_or(0, |session| session.read_queued(offset, out))
    }

    fn acknowledge(&mut self, slot: &mut TlsSlot<'a>, n: usize, now: Instant) {
        let started = self.handshake_started(slot);
        if let Slot::Active(session) = &mut slot.tls {
            session.acknowledge(n);
        }
        self.advance(slot, now);
        self.handshake_worked(started);
    }

    fn phase(&self, slot: &TlsSlot<'a>) -> SessionPhase {
        if slot.broken {
            return SessionPhase::Abort;
        }
        let Some(session) = slot.session() else {
            return SessionPhase::Abort;
        };
        let queued = session.queued() > 0;
        if session.error().is_some() {
            // An alert waits to be sent, or nothing does.
            return if queued {
                SessionPhase::Closing
            } else {
                SessionPhase::Abort
            };
        }
        if session.is_closing() {
            return SessionPhase::Closing;
        }
        let receiving = SessionPhase::Receiving {
            since: slot.since,
            bytes: 0,
        };
        if session.phase() == Phase::Handshaking {
            return if queued {
                SessionPhase::Sending
            } else {
                receiving
            };
        }
        match slot.http.activity() {
            Activity::Broken => SessionPhase::Abort,
            Activity::Responding | Activity::Closing => SessionPhase::Sending,
            _ if queued => SessionPhase::Sending,
            Activity::Receiving { since, bytes } => SessionPhase::Receiving { since, bytes },
            // An HTTP/1.1 connection gives its slot back between requests, an HTTP/2 one
            // when no stream is open and nothing is queued (its compact state is kept).
            Activity::Idle if session.is_quiet() && slot.http.can_park() => SessionPhase::Idle,
            Activity::Idle => receiving,
        }
    }

    fn release(&mut self, slot: &mut TlsSlot<'a>) -> u32 {
        let Slot::Active(_) = slot.tls else {
            return 0;
        };
        let Slot::Active(session) = core::mem::replace(&mut slot.tls, Slot::Idle(None)) else {
            return 0;
        };
        if !session.is_quiet() {
            // The pool asks only when it is. Keep it whole.
            slot.tls = Slot::Active(session);
            return 0;
        }
        if slot.http.protocol() == Protocol::H2 && !self.parked_h2_fits(slot) {
            // Others parked since its GOAWAY was decided against: it is dropped, and reset
            // when it next speaks.
            self.counters.h2_closed_for_room += 1;
            slot.tls = Slot::Active(session);
            slot.http.close(&mut self.server.borrow_mut());
            slot.end();
            return 0;
        }
        let Some(parked) = slot.http.park(&mut self.server.borrow_mut()) else {
            self.counters.h2_closed_for_room += 1;
            self.counters.memory_closed += 1;
            slot.tls = Slot::Active(session);
            slot.http.close(&mut self.server.borrow_mut());
            slot.end();
            return 0;
        };
        match session.suspend() {
            Ok((suspended, incoming, outgoing)) => {
                slot.tls = Slot::Idle(Some((incoming, outgoing)));
                self.keep((suspended, parked))
            }
            Err(session) => {
                // Not quiet: the pool asks only when it is. Keep it whole.
                slot.tls = Slot::Active(session);
                0
            }
        }
    }

    fn close(&mut self, slot: &mut TlsSlot<'a>, _ending: Ending) {
        slot.http.close(&mut self.server.borrow_mut());
        slot.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refills_at_its_rate_up_to_its_burst() {
        let start = Instant::from_micros(1_000_000);
        let mut budget = HandshakeBudget::new(10, 3, start);
        assert!(budget.take(1, start) && budget.take(1, start) && budget.take(1, start));
        assert!(!budget.take(1, start), "the burst is spent");
        assert_eq!(budget.next_token(1, start), start.add_micros(100_000));
        assert!(!budget.take(1, start.add_micros(99_999)));
        assert!(budget.take(1, start.add_micros(100_000)));
        let later = start.add_micros(60_000_000);
        assert!(budget.take(3, later));
        assert!(
            !budget.take(1, later),
            "a long quiet spell refills only the burst"
        );
    }

    #[test]
    fn measured_handshake_time_is_held_to_its_share_of_the_clock() {
        let start = Instant::from_micros(1_000_000);
        let mut time = HandshakeTime::new(450, 250_000, start);
        assert_eq!(time.ready_at(start), start, "a full burst");
        // A handshake that took 1 s on a slow CPU: 0.75 s of debt past the burst, paid back
        // at 0.45 s a second.
        time.spend(1_000_000, start);
        let ready = time.ready_at(start);
        assert_eq!(
            ready.micros_since(start),
            1_666_667,
            "0.75 s at 0.45 s a second"
        );
        assert_eq!(time.ready_at(ready), ready);
        // Over any long stretch, handshakes started only when nothing was owed take at most
        // their share of it (and one burst).
        let mut now = start.add_micros(10_000_000);
        let mut worked = 0u64;
        let end = now.add_micros(60_000_000);
        while now < end {
            let at = time.ready_at(now);
            if at > now {
                now = at;
                continue;
            }
            time.spend(110_000, now);
            worked += 110_000;
            now = now.add_micros(110_000);
        }
        assert!(
            worked <= 60_000_000 * 450 / 1000 + 250_000 + 110_000,
            "{worked}"
        );
        assert!(worked >= 60_000_000 * 450 / 1000 - 110_000, "{worked}");
    }

    #[test]
    fn dear_handshakes_take_more_of_the_budget_and_resumptions_give_back() {
        let start = Instant::from_micros(0);
        let mut budget = HandshakeBudget::new(HANDSHAKE_SHARE_PER_SECOND, HANDSHAKE_BURST, start);
        let ecdsa = CertificateKey::EcdsaP256;
        let p256 = HandshakeCost::dearest(ecdsa);
        // Flat out for ten seconds after the burst: only the share's worth of P-256 ones.
        let mut done = 0u32;
        let mut now = start;
        while budget.take(p256.charged, now) {
            done += 1;
        }
        let burst = done;
        for _ in 0..10_000 {
            now = now.add_micros(1_000);
            while budget.take(p256.charged, now) {
                done += 1;
            }
        }
        let share = (done - burst) * p256.charged;
        assert!(
            share <= 10 * HANDSHAKE_SHARE_PER_SECOND,
            "{share} k instructions in 10 s"
        );
        assert_eq!(done - burst, 10 * HANDSHAKE_SHARE_PER_SECOND / 19_500);
        // A resumption's signature comes back.
        let mut budget = HandshakeBudget::new(1, 6_620, start);
        assert!(budget.take(6_620, start));
        assert!(!budget.take(3_640, start));
        budget.give_back(3_640, start);
        assert!(budget.take(3_640, start));
        // Work beyond a burst needs a full bucket, and is not refused for ever.
        let mut small = HandshakeBudget::new(1_000, 1_000, start);
        assert!(small.take(19_500, start));
        assert_eq!(small.next_token(19_500, start), start.add_micros(1_000_000));
    }
}
