//! HTTPS: a pool slot that runs the HTTP engine inside a TLS session ([`TlsConnection`]),
//! the configuration its slots share ([`TlsShared`]), and the budget that rate-limits new
//! handshakes ([`HandshakeBudget`]) so that a flood of them cannot starve plain HTTP.

use super::pool::PooledConnection;
use alloc::sync::Arc;
use bramble_hal::Instant;
use bramble_http::{Connection, ConnectionAction, Server};
use bramble_tls::session::{Phase, TlsSession};
use bramble_tls::{Application, ServerConfig};

/// New TLS handshakes allowed per second, on average. A full handshake costs about 6.6 M
/// instructions (P-256 certificate, X25519; measured with the tls-probe under -icount), so
/// 48 a second is under half of a 700 MHz ARM1176 at one instruction per cycle, leaving the
/// rest for plain HTTP and for the open connections.
pub const HANDSHAKES_PER_SECOND: u32 = 48;
/// Handshakes that may start back to back after a quiet spell.
pub const HANDSHAKE_BURST: u32 = 16;

/// A token bucket of handshakes: refills at a fixed rate up to a burst.
#[derive(Clone, Copy, Debug)]
pub struct HandshakeBudget {
    per_second: u32,
    burst: u32,
    /// Tokens in millionths.
    micro_tokens: u64,
    refilled_at: Instant,
}

const ONE_TOKEN: u64 = 1_000_000;

impl HandshakeBudget {
    /// A full bucket of `burst` tokens refilling at `per_second`.
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

    /// Takes one handshake's token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.micro_tokens >= ONE_TOKEN {
            self.micro_tokens -= ONE_TOKEN;
            true
        } else {
            false
        }
    }

    /// When the next token will be there (now, if one is).
    pub fn next_token(&self, now: Instant) -> Instant {
        let mut copy = *self;
        copy.refill(now);
        let missing = ONE_TOKEN.saturating_sub(copy.micro_tokens);
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
    /// Connection openings put off because the handshake budget was spent.
    pub deferred: u64,
    /// Of `failures`: sessions closed because their waiting plaintext found no heap, or
    /// would have passed its bound (`bramble_tls::session::MAX_PENDING_LEN`).
    pub memory_closed: u64,
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
    budget: HandshakeBudget,
    /// Connections waiting for a handshake token (deferred on this or an earlier pass).
    waiting: bool,
    counters: TlsCounters,
}

impl TlsShared {
    /// Shares `config` among the pool's connections, with the default handshake budget.
    pub fn new(config: Arc<ServerConfig>, now: Instant) -> Self {
        Self::with_budget(
            config,
            HandshakeBudget::new(HANDSHAKES_PER_SECOND, HANDSHAKE_BURST, now),
        )
    }

    /// As [`TlsShared::new`] with a budget of one's own (tests).
    pub fn with_budget(config: Arc<ServerConfig>, budget: HandshakeBudget) -> Self {
        Self {
            config,
            budget,
            waiting: false,
            counters: TlsCounters::default(),
        }
    }

    /// Serves `config` (a renewed certificate) to connections opened from now on; open
    /// ones finish with the one they started with.
    pub fn replace_config(&mut self, config: Arc<ServerConfig>) {
        self.config = config;
    }

    /// The counts so far.
    pub fn counters(&self) -> TlsCounters {
        self.counters
    }
}

/// The HTTP engine as a TLS session's application.
struct Http<'c, 's, 'a> {
    connection: &'c mut Connection,
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
/// for the handshake flight, both lent for the appliance's life.
pub struct TlsConnection<'a> {
    http: Connection,
    session: Session<'a>,
    /// The handshake's completion has been counted.
    counted: bool,
}

impl<'a> TlsConnection<'a> {
    /// An idle slot over its two buffers.
    pub fn new(incoming: &'a mut [u8], outgoing: &'a mut [u8]) -> Self {
        Self {
            http: Connection::new(),
            session: Session::Idle(Some((incoming, outgoing))),
            counted: false,
        }
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

    fn count_handshake(&mut self, shared: &mut TlsShared) {
        if let Session::Active(session) = &self.session
            && !self.counted
            && session.phase() != Phase::Handshaking
            && session.error().is_none()
        {
            self.counted = true;
            if session.is_resumed() {
                shared.counters.resumed_handshakes += 1;
            } else {
                shared.counters.full_handshakes += 1;
            }
        }
    }
}

impl PooledConnection for TlsConnection<'_> {
    type Shared = TlsShared;

    fn open(&mut self, shared: &mut TlsShared, server: &mut Server<'_>, now: Instant) -> bool {
        if !shared.budget.take(now) {
            if !shared.waiting {
                shared.counters.deferred += 1;
            }
            shared.waiting = true;
            return false;
        }
        shared.waiting = false;
        self.end_session();
        let Session::Idle(buffers) = &mut self.session else {
            return false;
        };
        let Some((incoming, outgoing)) = buffers.take() else {
            return false;
        };
        match TlsSession::new(shared.config.clone(), incoming, outgoing) {
            Ok(session) => {
                self.session = Session::Active(session);
                self.counted = false;
                self.http.open_secure(server, now);
                true
            }
            Err(error) => {
                // Cannot happen with a checked configuration; the buffers are lost to this
                // slot, which then never opens again.
                log::error!("tls: cannot start a session: {error}");
                shared.counters.failures += 1;
                false
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
        self.count_handshake(shared);
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
        self.count_handshake(shared);
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
    }

    fn is_responding(&self) -> bool {
        self.http.is_responding()
    }

    fn shared_deadline(shared: &TlsShared, now: Instant) -> Option<Instant> {
        shared.waiting.then(|| shared.budget.next_token(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refills_at_its_rate_up_to_its_burst() {
        let start = Instant::from_micros(1_000_000);
        let mut budget = HandshakeBudget::new(10, 3, start);
        assert!(budget.take(start) && budget.take(start) && budget.take(start));
        assert!(!budget.take(start), "the burst is spent");
        assert_eq!(budget.next_token(start), start.add_micros(100_000));
        assert!(!budget.take(start.add_micros(99_999)));
        assert!(budget.take(start.add_micros(100_000)));
        let later = start.add_micros(60_000_000);
        assert!(budget.take(later) && budget.take(later) && budget.take(later));
        assert!(
            !budget.take(later),
            "a long quiet spell refills only the burst"
        );
    }
}
