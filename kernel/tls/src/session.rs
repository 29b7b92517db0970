//! One TLS connection over caller-owned buffers: ciphertext in, plaintext to an
//! [`Application`], plaintext from it, ciphertext out.
//!
//! rustls's buffered `ServerConnection` needs `std::io`; in no_std only the unbuffered API
//! exists, and it fits the appliance anyway: records are decrypted in the session's receive
//! buffer, the ciphertext buffers are fixed slices the pool hands out (so most of a
//! connection's RAM is known up front), and nothing is queued without bound: rustls decrypts
//! one record per call, and a record the application cannot take yet waits in one
//! record-sized heap buffer (rustls 0.23 hands plaintext over in a buffer of its own).

use alloc::sync::Arc;
use alloc::vec::Vec;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, WriteTraffic};
use rustls::{Error, ServerConfig};

/// What a TLS session carries: the HTTP engine in the appliance, anything byte-oriented in
/// tests.
pub trait Application {
    /// Plaintext from the peer; returns how many bytes were taken (the rest is offered again).
    fn receive(&mut self, data: &[u8]) -> usize;
    /// Writes plaintext to send into `out`; returns how many bytes were written.
    fn transmit(&mut self, out: &mut [u8]) -> usize;
}

/// The most a TLS record can take on the wire (RFC 8446 §5.2: 2^14 + 256, plus 5 of header).
pub const MAX_RECORD_LEN: usize = 16_384 + 256 + 5;
/// Bytes a sealed record adds to its plaintext at most: 5 of header, plus either TLS 1.3's
/// content type and tag (1 + 16) or TLS 1.2 GCM's explicit nonce and tag (8 + 16).
pub const RECORD_OVERHEAD: usize = 5 + 8 + 16;
/// The largest plaintext one record carries.
pub const MAX_FRAGMENT_LEN: usize = 16_384;
/// Plaintext waiting for the application, at most: what [`TlsSession::receive`] lets wait
/// before it takes no more ciphertext (a record's worth), plus what sealing a response must
/// drain from a full receive buffer (rustls hands received records over before it seals).
/// A session that would need more is closed ([`SessionError::PlaintextOverflow`]).
pub const MAX_PENDING_LEN: usize = MAX_FRAGMENT_LEN + MAX_RECORD_LEN;

/// Why a session stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionError {
    /// rustls refused the peer's bytes (bad record, failed handshake, bad MAC...). An alert
    /// for the peer may wait in the transmit queue.
    Protocol(Error),
    /// The peer sent a record larger than the receive buffer.
    RecordTooLarge,
    /// The transmit buffer cannot hold a handshake flight (the certificate chain is too long
    /// for the buffer size the pool chose).
    TransmitBufferTooSmall,
    /// The heap could not hold the plaintext waiting for the application: the connection is
    /// closed rather than the board reset.
    OutOfMemory,
    /// More than [`MAX_PENDING_LEN`] bytes of plaintext would wait for the application.
    PlaintextOverflow,
}

impl core::fmt::Display for SessionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Protocol(error) => write!(f, "TLS: {error}"),
            Self::RecordTooLarge => f.write_str("TLS record larger than the receive buffer"),
            Self::TransmitBufferTooSmall => {
                f.write_str("TLS handshake flight larger than the transmit buffer")
            }
            Self::OutOfMemory => f.write_str("no heap for the plaintext waiting to be read"),
            Self::PlaintextOverflow => f.write_str("too much plaintext waiting to be read"),
        }
    }
}

impl core::error::Error for SessionError {}

/// Where the session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Handshake in progress.
    Handshaking,
    /// Application data flows both ways.
    Open,
    /// The peer sent close_notify: no more plaintext will arrive.
    PeerClosed,
    /// Both sides closed, or an error ended the session; only queued bytes remain to send.
    Closed,
}

/// A session between two exchanges, without its buffers: rustls's state (keys, sequence
/// numbers, the resumption secret) and where the session is. What a keep-alive connection
/// keeps while it waits for its next request; [`TlsSession::resume`] lends it buffers again.
pub struct Suspended {
    connection: UnbufferedServerConnection,
    phase: Phase,
}

/// A server-side TLS session over two caller-owned buffers.
///
/// Two ways to send: [`TlsSession::transmit`] seals straight into the caller's socket buffer;
/// or, for a TCP engine that retransmits from the session's own bytes,
/// [`TlsSession::fill`] seals into the transmit queue, from which [`TlsSession::read_queued`]
/// copies at any offset past the last acknowledged byte and [`TlsSession::acknowledge`]
/// trims.
pub struct TlsSession<'b> {
    connection: UnbufferedServerConnection,
    /// Received ciphertext; after a decryption, the plaintext of one record sits inside it.
    incoming: &'b mut [u8],
    incoming_len: usize,
    /// Encoded handshake records, alerts and close_notify waiting to be sent; empty between
    /// flights, when it doubles as the plaintext scratch for [`TlsSession::transmit`].
    outgoing: &'b mut [u8],
    outgoing_start: usize,
    outgoing_end: usize,
    /// Plaintext of a record the application has not fully taken yet, from `pending_start`.
    pending: Vec<u8>,
    pending_start: usize,
    phase: Phase,
    close_queued: bool,
    error: Option<SessionError>,
}

impl<'b> TlsSession<'b> {
    /// A session for one accepted connection. `incoming` should hold [`MAX_RECORD_LEN`]
    /// bytes (smaller buffers refuse larger records); `outgoing` must hold the server's
    /// first flight (certificate chain plus about 1 KiB).
    pub fn new(
        config: Arc<ServerConfig>,
        incoming: &'b mut [u8],
        outgoing: &'b mut [u8],
    ) -> Result<Self, SessionError> {
        Ok(Self {
            connection: UnbufferedServerConnection::new(config).map_err(SessionError::Protocol)?,
            incoming,
            incoming_len: 0,
            outgoing,
            outgoing_start: 0,
            outgoing_end: 0,
            pending: Vec::new(),
            pending_start: 0,
            phase: Phase::Handshaking,
            close_queued: false,
            error: None,
        })
    }

    /// Ends the session (rustls's state is freed) and gives the buffers back.
    pub fn into_buffers(self) -> (&'b mut [u8], &'b mut [u8]) {
        (self.incoming, self.outgoing)
    }

    /// Whether the session holds nothing but rustls's state: handshake done, no error, no
    /// ciphertext received or queued, no plaintext waiting, no close queued. Only then can it
    /// be suspended.
    pub fn is_quiet(&self) -> bool {
        self.phase == Phase::Open
            && self.error.is_none()
            && !self.close_queued
            && self.incoming_len == 0
            && self.outgoing_start == self.outgoing_end
            && self.pending_start >= self.pending.len()
    }

    /// Keeps rustls's state apart from the buffers, if the session [`is_quiet`]
    /// (`Err(self)` if not).
    ///
    /// [`is_quiet`]: TlsSession::is_quiet
    #[allow(clippy::type_complexity, clippy::result_large_err)]
    pub fn suspend(self) -> Result<(Suspended, &'b mut [u8], &'b mut [u8]), Self> {
        if !self.is_quiet() {
            return Err(self);
        }
        Ok((
            Suspended {
                connection: self.connection,
                phase: self.phase,
            },
            self.incoming,
            self.outgoing,
        ))
    }

    /// Carries on a suspended session over `incoming` and `outgoing` (see
    /// [`TlsSession::new`]).
    pub fn resume(suspended: Suspended, incoming: &'b mut [u8], outgoing: &'b mut [u8]) -> Self {
        Self {
            connection: suspended.connection,
            incoming,
            incoming_len: 0,
            outgoing,
            outgoing_start: 0,
            outgoing_end: 0,
            pending: Vec::new(),
            pending_start: 0,
            phase: suspended.phase,
            close_queued: false,
            error: None,
        }
    }

    /// Ciphertext in the transmit queue not yet acknowledged ([`TlsSession::acknowledge`]),
    /// sent or not.
    pub fn queued(&self) -> usize {
        self.outgoing_end - self.outgoing_start
    }

    /// Copies queued ciphertext from `offset` past the last acknowledged byte into `out`;
    /// returns how many bytes (the same bytes for the same offset until acknowledged).
    pub fn read_queued(&self, offset: usize, out: &mut [u8]) -> usize {
        let queued = self
            .outgoing
            .get(self.outgoing_start..self.outgoing_end)
            .unwrap_or_default();
        let from = queued.get(offset..).unwrap_or_default();
        let n = from.len().min(out.len());
        out[..n].copy_from_slice(&from[..n]);
        n
    }

    /// The peer acknowledged the next `n` queued bytes: they leave the queue.
    pub fn acknowledge(&mut self, n: usize) {
        self.outgoing_start += n.min(self.queued());
        if self.outgoing_start == self.outgoing_end {
            self.outgoing_start = 0;
            self.outgoing_end = 0;
        }
    }

    /// Seals the application's plaintext into the transmit queue, through `scratch` (where
    /// the application writes it), in records of at most `scratch.len()` bytes. While
    /// earlier ciphertext is still queued, a record is sealed only if one of at least
    /// `min_record` bytes fits (so that records stay large; acknowledgments make room).
    /// Records rustls encodes on the way (a ticket, a KeyUpdate answer) join the queue in
    /// order. Returns the ciphertext bytes added.
    pub fn fill(
        &mut self,
        application: &mut impl Application,
        scratch: &mut [u8],
        min_record: usize,
    ) -> usize {
        let before = self.queued();
        if self.error.is_some()
            || self.close_queued
            || !matches!(self.phase, Phase::Open | Phase::PeerClosed)
        {
            return 0;
        }
        loop {
            self.compact();
            let free = self.outgoing.len() - self.outgoing_end;
            let room = free
                .saturating_sub(RECORD_OVERHEAD)
                .min(scratch.len())
                .min(MAX_FRAGMENT_LEN);
            if room == 0 || (room < min_record && self.queued() > 0) {
                break;
            }
            let sealed = self.seal_with(|traffic, outgoing, _, end| {
                let plain = application.transmit(&mut scratch[..room]);
                if plain == 0 {
                    return None;
                }
                // Cannot fail: `room` leaves RECORD_OVERHEAD for the one record.
                traffic
                    .encrypt(&scratch[..plain], &mut outgoing[end..])
                    .ok()
            });
            match sealed.flatten() {
                Some(written) => self.outgoing_end += written,
                None => break,
            }
        }
        self.queued() - before
    }

    /// Where the session is.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Why the session failed, if it did.
    pub fn error(&self) -> Option<&SessionError> {
        self.error.as_ref()
    }

    /// Whether the handshake is still going on. It can be over while [`TlsSession::phase`]
    /// still says `Handshaking`: plaintext that came with the client's Finished is handed
    /// over before the session reports itself open.
    pub fn is_handshaking(&self) -> bool {
        self.connection.is_handshaking()
    }

    /// The negotiated application protocol (ALPN), if the client offered one.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.connection.alpn_protocol()
    }

    /// Whether this session was resumed from a ticket (valid once open).
    pub fn is_resumed(&self) -> bool {
        matches!(
            self.connection.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed)
        )
    }

    /// The negotiated protocol version, once known.
    pub fn protocol_version(&self) -> Option<rustls::ProtocolVersion> {
        self.connection.protocol_version()
    }

    /// The negotiated cipher suite, once known.
    pub fn cipher_suite(&self) -> Option<rustls::CipherSuite> {
        self.connection
            .negotiated_cipher_suite()
            .map(|suite| suite.suite())
    }

    /// Free room for ciphertext, in bytes.
    pub fn receive_space(&self) -> usize {
        self.incoming.len() - self.incoming_len
    }

    /// Whether ciphertext waits to be sent.
    pub fn wants_transmit(&self) -> bool {
        self.outgoing_end > self.outgoing_start
    }

    /// Takes ciphertext from the peer (as much as fits) and processes it, passing plaintext
    /// to `application`. Returns how many bytes were taken.
    pub fn receive(
        &mut self,
        application: &mut impl Application,
        ciphertext: &[u8],
    ) -> Result<usize, SessionError> {
        self.check()?;
        // While a record's worth of plaintext waits for the application, take no more
        // ciphertext: the peer waits (TCP flow control), and the waiting plaintext stays
        // bounded.
        let waiting = self.pending.len() - self.pending_start;
        let taken = if waiting >= MAX_FRAGMENT_LEN {
            0
        } else {
            ciphertext.len().min(self.receive_space())
        };
        self.incoming[self.incoming_len..self.incoming_len + taken]
            .copy_from_slice(&ciphertext[..taken]);
        self.incoming_len += taken;
        self.poll(application)?;
        if taken < ciphertext.len() && self.receive_space() == 0 && self.pending.is_empty() {
            // A full buffer that holds no complete record: the record is too large for it.
            return self.fail(SessionError::RecordTooLarge);
        }
        Ok(taken)
    }

    /// Processes what has been received: handshake progress, and plaintext for
    /// `application` (call again when the application can take more).
    pub fn poll(&mut self, application: &mut impl Application) -> Result<(), SessionError> {
        self.check()?;
        loop {
            if self.pending_start < self.pending.len() {
                let taken = application.receive(&self.pending[self.pending_start..]);
                self.pending_start += taken.min(self.pending.len() - self.pending_start);
                if self.pending_start < self.pending.len() {
                    return Ok(());
                }
                // Give the record-sized buffer back: most connections never need it again.
                self.pending = Vec::new();
                self.pending_start = 0;
            }
            if !self.step(application)? {
                return Ok(());
            }
        }
    }

    /// Runs rustls once over the received bytes; returns whether to go on.
    fn step(&mut self, application: &mut impl Application) -> Result<bool, SessionError> {
        let status = self
            .connection
            .process_tls_records(&mut self.incoming[..self.incoming_len]);
        let discard = status.discard;
        let mut failure = None;
        let go_on = match status.state {
            Err(error) => {
                failure = Some(SessionError::Protocol(error));
                false
            }
            Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                // rustls hands each record's plaintext over in a buffer of its own; what the
                // application does not take now waits in `pending`.
                while let Some(record) = traffic.next_record() {
                    match record {
                        Ok(record) => {
                            let taken = application.receive(record.payload);
                            if taken < record.payload.len() {
                                let rest = record.payload.get(taken..).unwrap_or_default();
                                if let Err(error) =
                                    keep(&mut self.pending, &mut self.pending_start, rest)
                                {
                                    failure = Some(error);
                                }
                                break;
                            }
                        }
                        Err(error) => {
                            failure = Some(SessionError::Protocol(error));
                            break;
                        }
                    }
                }
                failure.is_none()
            }
            Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                match encode.encode(&mut self.outgoing[self.outgoing_end..]) {
                    Ok(written) => self.outgoing_end += written,
                    Err(EncodeError::InsufficientSize(_)) => {
                        failure = Some(SessionError::TransmitBufferTooSmall);
                    }
                    Err(EncodeError::AlreadyEncoded) => {}
                }
                failure.is_none()
            }
            Ok(ConnectionState::TransmitTlsData(transmit)) => {
                // The records are in `outgoing`, which is sent before anything else.
                transmit.done();
                true
            }
            Ok(ConnectionState::BlockedHandshake) => false,
            Ok(ConnectionState::WriteTraffic(_)) => {
                if self.phase == Phase::Handshaking {
                    self.phase = Phase::Open;
                }
                false
            }
            Ok(ConnectionState::PeerClosed) => {
                self.phase = Phase::PeerClosed;
                true
            }
            Ok(ConnectionState::Closed) => {
                self.phase = Phase::Closed;
                false
            }
            // Early data is never enabled, and the list of states may grow.
            Ok(_) => false,
        };
        self.discard(discard);
        if let Some(error) = failure {
            // Whatever the connection has left to say (an alert) is encoded by the next
            // calls; queue it so the peer learns why.
            self.drain_alert();
            return self.fail(error);
        }
        Ok(go_on)
    }

    /// After an error rustls has an alert queued: put it in the transmit queue. One call
    /// only: rustls hands queued records out before it reads input, and reading the bad
    /// input again would fail again (and queue a second fatal alert).
    fn drain_alert(&mut self) {
        let status = self
            .connection
            .process_tls_records(&mut self.incoming[..self.incoming_len]);
        if let Ok(ConnectionState::EncodeTlsData(mut encode)) = status.state
            && let Ok(written) = encode.encode(&mut self.outgoing[self.outgoing_end..])
        {
            self.outgoing_end += written;
        }
    }

    /// Runs rustls over the received bytes until it can seal application data, then calls
    /// `seal` with the sealing state, the transmit buffer, and where its queue starts and
    /// ends (records in the queue go out before anything sealed elsewhere). Plaintext that arrives meanwhile waits in
    /// `pending` (bounded: [`TlsSession::receive`] takes no ciphertext while a record's worth
    /// waits), records rustls encodes go to the transmit buffer. Returns `None` when rustls
    /// cannot seal now.
    ///
    /// The received bytes are always passed, never an empty buffer: rustls keeps the place of
    /// a handshake message it is still joining in them, and a buffer shorter than that place
    /// makes it panic (a client sending half a post-handshake message could otherwise reset
    /// the board).
    fn seal_with<R>(
        &mut self,
        seal: impl FnOnce(&mut WriteTraffic<'_, ServerConnectionData>, &mut [u8], usize, usize) -> R,
    ) -> Option<R> {
        let mut seal = Some(seal);
        for _ in 0..8 {
            let status = self
                .connection
                .process_tls_records(&mut self.incoming[..self.incoming_len]);
            let discard = status.discard;
            let mut sealed = None;
            let mut failure = None;
            let go_on = match status.state {
                Ok(ConnectionState::WriteTraffic(mut traffic)) => {
                    if let Some(seal) = seal.take() {
                        sealed = Some(seal(
                            &mut traffic,
                            &mut self.outgoing[..],
                            self.outgoing_start,
                            self.outgoing_end,
                        ));
                    }
                    false
                }
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(record) => {
                                if let Err(error) =
                                    keep(&mut self.pending, &mut self.pending_start, record.payload)
                                {
                                    failure = Some(error);
                                    break;
                                }
                            }
                            Err(error) => {
                                failure = Some(SessionError::Protocol(error));
                                break;
                            }
                        }
                    }
                    failure.is_none()
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    match encode.encode(&mut self.outgoing[self.outgoing_end..]) {
                        Ok(written) => self.outgoing_end += written,
                        Err(EncodeError::InsufficientSize(_)) => {
                            failure = Some(SessionError::TransmitBufferTooSmall)
                        }
                        Err(EncodeError::AlreadyEncoded) => {}
                    }
                    failure.is_none()
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => {
                    transmit.done();
                    true
                }
                Ok(ConnectionState::PeerClosed) => {
                    self.phase = Phase::PeerClosed;
                    true
                }
                Err(error) => {
                    failure = Some(SessionError::Protocol(error));
                    false
                }
                Ok(_) => false,
            };
            self.discard(discard);
            if let Some(error) = failure {
                self.drain_alert();
                let _ = self.fail::<()>(error);
                return None;
            }
            if sealed.is_some() || !go_on {
                return sealed;
            }
        }
        None
    }

    /// Writes ciphertext into `out`: queued handshake records first, then the application's
    /// plaintext sealed into records. Returns how many bytes were written.
    pub fn transmit(&mut self, application: &mut impl Application, out: &mut [u8]) -> usize {
        let mut written = self.flush(out);
        if self.wants_transmit() || self.error.is_some() || self.close_queued {
            return written;
        }
        if !matches!(self.phase, Phase::Open | Phase::PeerClosed) {
            return written;
        }
        while out.len() - written > RECORD_OVERHEAD {
            let room = (out.len() - written - RECORD_OVERHEAD).min(MAX_FRAGMENT_LEN);
            let target = &mut out[written..];
            let sealed = self.seal_with(|traffic, outgoing, start, end| {
                // The empty transmit queue is the plaintext's scratch.
                let scratch = (start == end).then_some(outgoing)?;
                let room = room.min(scratch.len());
                let plain = application.transmit(&mut scratch[..room]);
                if plain == 0 {
                    return None;
                }
                // Cannot fail: `room` leaves RECORD_OVERHEAD for the one record.
                traffic.encrypt(&scratch[..plain], target).ok()
            });
            match sealed.flatten() {
                Some(count) => written += count,
                None => break,
            }
        }
        // Records rustls encoded on the way (a KeyUpdate answer) go out next time, in order.
        written
    }

    /// Moves the transmit queue to the front of its buffer (acknowledged bytes make room
    /// there).
    fn compact(&mut self) {
        if self.outgoing_start > 0 {
            self.outgoing
                .copy_within(self.outgoing_start..self.outgoing_end, 0);
            self.outgoing_end -= self.outgoing_start;
            self.outgoing_start = 0;
        }
    }

    /// Room left in the transmit queue for more records, in bytes.
    pub fn queue_room(&self) -> usize {
        self.outgoing.len() - self.queued()
    }

    /// Queues close_notify (RFC 8446 §6.1); the caller sends it with [`TlsSession::transmit`]
    /// and then closes the TCP connection.
    pub fn close(&mut self) {
        if self.close_queued || self.error.is_some() {
            return;
        }
        self.close_queued = true;
        let mut notify = [0u8; 64];
        let written = self
            .seal_with(|traffic, _, _, _| traffic.queue_close_notify(&mut notify).ok())
            .flatten();
        if written.is_some_and(|written| self.outgoing.len() - self.outgoing_end < written) {
            self.compact();
        }
        if let Some(written) = written
            && self.outgoing.len() - self.outgoing_end >= written
        {
            self.outgoing[self.outgoing_end..self.outgoing_end + written]
                .copy_from_slice(&notify[..written]);
            self.outgoing_end += written;
        }
    }

    /// Whether close() was called (nothing more will be sealed).
    pub fn is_closing(&self) -> bool {
        self.close_queued
    }

    fn flush(&mut self, out: &mut [u8]) -> usize {
        let count = (self.outgoing_end - self.outgoing_start).min(out.len());
        out[..count]
            .copy_from_slice(&self.outgoing[self.outgoing_start..self.outgoing_start + count]);
        self.outgoing_start += count;
        if self.outgoing_start == self.outgoing_end {
            self.outgoing_start = 0;
            self.outgoing_end = 0;
        }
        count
    }

    fn discard(&mut self, count: usize) {
        if count == 0 {
            return;
        }
        self.incoming.copy_within(count..self.incoming_len, 0);
        self.incoming_len -= count;
    }

    /// Bytes of plaintext waiting for the application (at most [`MAX_PENDING_LEN`]).
    pub fn pending_len(&self) -> usize {
        self.pending.len() - self.pending_start
    }

    fn check(&self) -> Result<(), SessionError> {
        match &self.error {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    fn fail<T>(&mut self, error: SessionError) -> Result<T, SessionError> {
        self.error = Some(error.clone());
        self.phase = Phase::Closed;
        Err(error)
    }
}

/// Appends `bytes` to the waiting plaintext: bounded by [`MAX_PENDING_LEN`], and with the
/// allocation's failure an error (the session closes) instead of `handle_alloc_error`'s
/// reset of the board.
fn keep(pending: &mut Vec<u8>, start: &mut usize, bytes: &[u8]) -> Result<(), SessionError> {
    if *start > 0 {
        // What the application took is dropped before the buffer grows.
        pending.drain(..(*start).min(pending.len()));
        *start = 0;
    }
    let total = pending
        .len()
        .checked_add(bytes.len())
        .filter(|&total| total <= MAX_PENDING_LEN)
        .ok_or(SessionError::PlaintextOverflow)?;
    pending
        .try_reserve(total - pending.len())
        .map_err(|_| SessionError::OutOfMemory)?;
    pending.extend_from_slice(bytes);
    Ok(())
}
