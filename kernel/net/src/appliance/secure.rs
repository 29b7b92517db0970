//! HTTPS: a pool slot that runs the HTTP engine inside a TLS session ([`TlsConnection`]),
//! the configuration its slots share ([`TlsShared`]), and the budget that rate-limits new
//! handshakes by their cost ([`HandshakeBudget`]) so that no mix of them can starve plain
//! HTTP.
//!
//! The budget is spent when the ClientHello is in, not at TCP accept: a connection that
//! sends nothing costs no handshake, only its slot for [`super::pool::HANDSHAKE_LIMIT_MICROS`].
//! The pool shows [`TlsConnection::open`] the bytes waiting in the socket without taking them;
//! [`bramble_tls::hello`] reads the group rustls will pick and prices the handshake in
//! instructions measured on the target (6.62 M with X25519 and an ECDSA P-256 certificate,
//! 19.5 M with P-256 key exchange, 3.63 M with an Ed25519 certificate). A resumed handshake is
//! given its signature back once rustls has resumed it. Hellos the budget defers wait in
//! arrival order (the pool's [`super::pool::Opening::Deferred`]), and newer ones do not pass
//! them, so a flood of cheap hellos cannot starve a client that offers only P-256.

use super::pool::{FirstBytes, Opening, PooledConnection};
use alloc::sync::Arc;
use bramble_h2::Negotiated;
use bramble_hal::Instant;
use bramble_http::{ConnectionAction, Server};
use bramble_tls::hello::{self, CertificateKey, Group, HandshakeCost, Peek};
use bramble_tls::session::{Phase, TlsSession};
use bramble_tls::{Application, ServerConfig};

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

/// TLS counts, for the status line.
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
    /// Of those, the connections reset after waiting the handshake limit for the budget.
    pub refused_budget: u64,
    /// Connections reset for sending no whole ClientHello within the handshake limit (or
    /// ending before one).
    pub refused_no_hello: u64,
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
}

impl TlsCounters {
    /// Counts a session that ended with `error`.
    fn failed(&mut self, error: &bramble_tls::SessionError) {
        self.failures += 1;
        if matches!(
            error,
            bramble_tls::SessionError::OutOfMemory | bramble_tls::SessionError::PlaintextOverflow
        ) {
            self.memory_closed += 1;
        }
    }
}

/// What the TLS pool's connections share.
pub struct TlsShared {
    config: Arc<ServerConfig>,
    /// The certificate's key (what a full handshake's signature costs).
    key: CertificateKey,
    budget: HandshakeBudget,
    /// The cheapest price deferred since the budget last opened a connection: when to look
    /// again.
    waiting: Option<u32>,
    /// Charged work not yet counted in whole millions.
    charged_thousands: u64,
    counters: TlsCounters,
}

impl TlsShared {
    /// Shares `config` (whose certificate has `key`) among the pool's connections, with the
    /// default handshake budget.
    pub fn new(config: Arc<ServerConfig>, key: CertificateKey, now: Instant) -> Self {
        Self::with_budget(
            config,
            key,
            HandshakeBudget::new(HANDSHAKE_SHARE_PER_SECOND, HANDSHAKE_BURST, now),
        )
    }

    /// As [`TlsShared::new`] with a budget of one's own (tests).
    pub fn with_budget(
        config: Arc<ServerConfig>,
        key: CertificateKey,
        budget: HandshakeBudget,
    ) -> Self {
        Self {
            config,
            key,
            budget,
            waiting: None,
            charged_thousands: 0,
            counters: TlsCounters::default(),
        }
    }

    /// Serves `config` (a renewed certificate, with `key`) to connections opened from now
    /// on; open ones finish with the one they started with.
    pub fn replace_config(&mut self, config: Arc<ServerConfig>, key: CertificateKey) {
        self.config = config;
        self.key = key;
    }

    fn charge(&mut self, thousands: u32, given_back: bool) {
        if given_back {
            self.charged_thousands = self.charged_thousands.saturating_sub(u64::from(thousands));
        } else {
            self.charged_thousands = self.charged_thousands.saturating_add(u64::from(thousands));
        }
        self.counters.charged_millions = self.charged_thousands / 1000;
    }

    /// The counts so far.
    pub fn counters(&self) -> TlsCounters {
        self.counters
    }
}

/// The HTTP engine (HTTP/1.1 or HTTP/2, as ALPN chose) as a TLS session's application.
struct Http<'c, 's, 'a> {
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

// Large only while active; both variants live in the pool's fixed memory, where boxing would
// move the session into the TLS heap for nothing.
#[allow(clippy::large_enum_variant)]
enum Session<'a> {
    /// No TLS connection: the buffers wait for the next one.
    Idle(Option<(&'a mut [u8], &'a mut [u8])>),
    Active(TlsSession<'a>),
}

/// One HTTPS connection: the HTTP engine's connection inside a TLS session, over a receive
/// buffer of a whole record ([`bramble_tls::session::MAX_RECORD_LEN`]) and a transmit buffer
/// for the handshake flight, both lent for the appliance's life. The engine speaks
/// HTTP/1.1 or HTTP/2 as ALPN chose ([`Negotiated`]).
pub struct TlsConnection<'a> {
    http: Negotiated,
    session: Session<'a>,
    /// The handshake's completion has been counted.
    counted: bool,
    /// The ClientHello's price, once read (kept while the budget defers it).
    price: Option<HandshakeCost>,
    /// The deferral of this connection's ClientHello has been counted.
    deferral_counted: bool,
    /// Bytes that waited in the socket at the last look for a ClientHello: no new look
    /// until more come.
    looked_at: usize,
}

impl<'a> TlsConnection<'a> {
    /// An idle slot over its two buffers.
    pub fn new(incoming: &'a mut [u8], outgoing: &'a mut [u8]) -> Self {
        Self {
            http: Negotiated::new(),
            session: Session::Idle(Some((incoming, outgoing))),
            counted: false,
            price: None,
            deferral_counted: false,
            looked_at: 0,
        }
    }

    /// Reads the ClientHello waiting in the socket (into the idle receive buffer) and
    /// prices it, or says why the connection cannot open yet.
    fn price_hello(
        &mut self,
        shared: &mut TlsShared,
        first: &mut FirstBytes<'_>,
    ) -> Result<HandshakeCost, Opening> {
        if first.queued == 0 || first.queued == self.looked_at {
            return Err(Opening::WaitForBytes);
        }
        self.looked_at = first.queued;
        let Session::Idle(Some((incoming, _))) = &mut self.session else {
            return Err(Opening::Refuse);
        };
        let len = first.queued.min(incoming.len());
        let Some(scratch) = incoming.get_mut(..len) else {
            return Err(Opening::Refuse);
        };
        let seen = (first.peek)(scratch).min(len);
        let peeked = match hello::peek(scratch.get(..seen).unwrap_or_default()) {
            // The socket is full and the record is still not whole: rustls reads it in
            // pieces, at the dearest price.
            Peek::Incomplete if first.full => None,
            Peek::Incomplete => return Err(Opening::WaitForBytes),
            Peek::NotTls => {
                shared.counters.refused_not_tls += 1;
                return Err(Opening::Refuse);
            }
            Peek::Hello(summary) => Some(summary),
            Peek::Unreadable => None,
        };
        let p256 = match peeked {
            Some(summary) => summary.group == Some(Group::P256) || summary.retry,
            None => true,
        };
        shared.counters.priced_p256 += u64::from(p256);
        Ok(HandshakeCost::of(peeked, shared.key))
    }

    /// Ready for the next TCP connection's ClientHello.
    fn forget_hello(&mut self) {
        self.price = None;
        self.deferral_counted = false;
        self.looked_at = 0;
    }

    fn end_session(&mut self) {
        if let Session::Active(_) = self.session {
            let Session::Active(session) =
                core::mem::replace(&mut self.session, Session::Idle(None))
            else {
                return;
            };
            // Dropping the session frees rustls's state.
            self.session = Session::Idle(Some(session.into_buffers()));
        }
    }

    fn count_handshake(&mut self, shared: &mut TlsShared, now: Instant) {
        if let Session::Active(session) = &self.session
            && !self.counted
            && session.phase() != Phase::Handshaking
            && session.error().is_none()
        {
            self.counted = true;
            if session.is_resumed() {
                shared.counters.resumed_handshakes += 1;
                // No signature was made: its price goes back to the budget.
                if let Some(price) = self.price {
                    shared.budget.give_back(price.signature, now);
                    shared.charge(price.signature, true);
                }
            } else {
                shared.counters.full_handshakes += 1;
            }
        }
    }
}

/// Once the handshake is done, tells the engine which protocol ALPN chose, and offers it
/// the plaintext that came with the client's Finished (which it could not take before).
/// Returns whether HTTP/2 was chosen just now.
fn choose_protocol(session: &mut TlsSession<'_>, http: &mut Http<'_, '_, '_>) -> bool {
    if http.connection.protocol() != bramble_h2::Protocol::Undecided
        || session.is_handshaking()
        || session.error().is_some()
    {
        return false;
    }
    http.connection.select(session.alpn_protocol());
    if let Err(error) = session.poll(http) {
        log::debug!("tls: {error}");
    }
    http.connection.protocol() == bramble_h2::Protocol::H2
}

impl PooledConnection for TlsConnection<'_> {
    type Shared = TlsShared;

    fn open(
        &mut self,
        shared: &mut TlsShared,
        server: &mut Server<'_>,
        mut first: FirstBytes<'_>,
        now: Instant,
    ) -> Opening {
        self.end_session();
        let price = match self.price {
            Some(price) => price,
            None => match self.price_hello(shared, &mut first) {
                Ok(price) => {
                    self.price = Some(price);
                    price
                }
                Err(opening) => return opening,
            },
        };
        if first.behind || !shared.budget.take(price.charged, now) {
            if !self.deferral_counted {
                self.deferral_counted = true;
                shared.counters.deferred += 1;
            }
            shared.waiting = Some(
                shared
                    .waiting
                    .map_or(price.charged, |cheapest| cheapest.min(price.charged)),
            );
            return Opening::Deferred;
        }
        shared.waiting = None;
        shared.charge(price.charged, false);
        let Session::Idle(buffers) = &mut self.session else {
            return Opening::Refuse;
        };
        let Some((incoming, outgoing)) = buffers.take() else {
            return Opening::Refuse;
        };
        match TlsSession::new(shared.config.clone(), incoming, outgoing) {
            Ok(session) => {
                self.session = Session::Active(session);
                self.counted = false;
                self.http.open_secure(server, now);
                Opening::Open
            }
            Err(error) => {
                // Cannot happen with a checked configuration; the buffers are lost to this
                // slot, which then never opens again.
                log::error!("tls: cannot start a session: {error}");
                shared.counters.failures += 1;
                Opening::Refuse
            }
        }
    }

    fn receive(
        &mut self,
        shared: &mut TlsShared,
        server: &mut Server<'_>,
        data: &[u8],
        now: Instant,
    ) -> usize {
        let Session::Active(session) = &mut self.session else {
            return data.len();
        };
        if session.error().is_some() {
            // Nothing more is read from a failed session.
            return data.len();
        }
        let mut http = Http {
            connection: &mut self.http,
            server,
            now,
        };
        let taken = match session.receive(&mut http, data) {
            Ok(taken) => taken,
            Err(error) => {
                log::debug!("tls: {error}");
                shared.counters.failed(&error);
                data.len()
            }
        };
        if choose_protocol(session, &mut http) {
            shared.counters.h2_connections += 1;
        }
        self.count_handshake(shared, now);
        taken
    }

    fn transmit(
        &mut self,
        shared: &mut TlsShared,
        server: &mut Server<'_>,
        out: &mut [u8],
        now: Instant,
    ) -> usize {
        let Session::Active(session) = &mut self.session else {
            return 0;
        };
        let mut http = Http {
            connection: &mut self.http,
            server,
            now,
        };
        if choose_protocol(session, &mut http) {
            shared.counters.h2_connections += 1;
        }
        // Plaintext the engine could not take while a response was going out is offered
        // again now that it may have room.
        if session.error().is_none()
            && let Err(error) = session.poll(&mut http)
        {
            shared.counters.failed(&error);
        }
        let healthy = session.error().is_none();
        let mut written = session.transmit(&mut http, out);
        // Sealing can fail the session too (plaintext drained on the way found no heap).
        if healthy && let Some(error) = session.error() {
            shared.counters.failed(&error.clone());
        }
        // The engine is done with the connection: close_notify goes after its last bytes
        // (RFC 8446 §6.1), and the TCP close after that.
        if session.error().is_none()
            && !session.is_closing()
            && !session.wants_transmit()
            && self.http.action(now) == ConnectionAction::CloseWhenFlushed
        {
            session.close();
            written += session.transmit(
                &mut Http {
                    connection: &mut self.http,
                    server,
                    now,
                },
                &mut out[written..],
            );
        }
        self.count_handshake(shared, now);
        written
    }

    fn set_peer(&mut self, peer: core::net::IpAddr) {
        self.http.set_peer(peer);
    }

    fn action(&self, now: Instant) -> ConnectionAction {
        let Session::Active(session) = &self.session else {
            return ConnectionAction::Abort;
        };
        let http = self.http.action(now);
        if http == ConnectionAction::Abort {
            return http;
        }
        if session.wants_transmit() {
            // An alert, a ticket or close_notify still waits for socket space.
            return ConnectionAction::KeepOpen;
        }
        if session.error().is_some()
            || session.is_closing()
            || matches!(session.phase(), Phase::PeerClosed | Phase::Closed)
        {
            return ConnectionAction::CloseWhenFlushed;
        }
        match http {
            // Only once close_notify is queued (transmit does that).
            ConnectionAction::CloseWhenFlushed => ConnectionAction::KeepOpen,
            other => other,
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.http.next_deadline()
    }

    fn close(&mut self, _shared: &mut TlsShared, server: &mut Server<'_>) {
        self.http.close(server);
        self.end_session();
        self.forget_hello();
    }

    fn is_responding(&self) -> bool {
        self.http.is_responding()
    }

    fn shared_deadline(shared: &TlsShared, now: Instant) -> Option<Instant> {
        shared
            .waiting
            .map(|cheapest| shared.budget.next_token(cheapest, now))
    }

    fn not_opened(&mut self) {
        self.forget_hello();
    }

    fn gave_up(shared: &mut TlsShared, waited: Opening) {
        match waited {
            Opening::Deferred => shared.counters.refused_budget += 1,
            Opening::WaitForBytes => shared.counters.refused_no_hello += 1,
            Opening::Open | Opening::Refuse => {}
        }
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
