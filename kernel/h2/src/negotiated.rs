//! The plaintext side of an HTTPS connection, HTTP/1.1 or HTTP/2 as ALPN chose: what a TLS
//! slot holds in place of a bare [`bramble_http::Connection`].
//!
//! The interface with the TLS layer is plaintext bytes in and out plus the negotiated
//! protocol: the slot calls [`Negotiated::select`] with `TlsSession::alpn_protocol()` once
//! the handshake is done. Until then [`Negotiated::receive`] takes nothing, so plaintext
//! that arrives in the same flight as the client's Finished waits in the session (one
//! record at most) and is offered again after the choice (`TlsSession::poll`).
//!
//! Both protocols use the one HTTP/1.1 connection (the HTTP/2 session drives it as its
//! lane). The HTTP/2 state ([`crate::H2Session`], about 27 KiB) is allocated when h2 is
//! chosen and freed when the connection closes or rests between requests
//! ([`Negotiated::park`]: a compact [`Parked`] state is kept, and [`Negotiated::unpark`]
//! allocates the session again), so HTTP/1.1 and idle HTTP/2 connections never pay for it;
//! the allocation is fallible ([`HEAP_BYTES_PER_CONNECTION`] is what a heap must reserve per
//! connection), and a connection that finds no memory is aborted.

use crate::ALPN_H2;
use crate::serve::H2Session;
use alloc::boxed::Box;
use alloc::vec::Vec;
use bramble_hal::Instant;
use bramble_http::{Activity, Connection, ConnectionAction, Server};

/// Which protocol a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The handshake is not done: no plaintext yet.
    Undecided,
    /// HTTP/1.1 (ALPN `http/1.1`, or none).
    Http1,
    /// HTTP/2 (ALPN `h2`).
    H2,
    /// HTTP/2 was chosen but its state found no memory: the connection is aborted.
    NoMemory,
}

/// Heap an HTTP/2 connection takes: its session and the allocator's overhead.
pub const HEAP_BYTES_PER_CONNECTION: usize = core::mem::size_of::<H2Session>() + 64;

/// What an HTTPS connection keeps of its HTTP side while it holds no TLS slot (see
/// [`Negotiated::park`]).
pub enum Parked {
    /// HTTP/1.1: the requests served so far.
    Http1(u32),
    /// HTTP/2: the lane's requests served (4 bytes), then the protocol state
    /// ([`crate::H2::park_into`]: windows, last stream, the HPACK dynamic table), on the
    /// heap and exactly as long as it is.
    H2(Box<[u8]>),
}

impl Parked {
    /// Heap bytes it holds (the allocator's overhead aside).
    pub fn heap_len(&self) -> usize {
        match self {
            Parked::Http1(_) => 0,
            Parked::H2(bytes) => bytes.len(),
        }
    }
}

/// Bytes of a parked HTTP/2 connection's lane count.
const LANE_SERVED_LEN: usize = 4;

/// The most heap one parked HTTP/2 connection's state takes: the lane count, the fixed
/// part, the table's whole capacity and the lengths of as many entries as it may hold (a
/// bound: no table has both at once).
pub const MAX_PARKED_LEN: usize = LANE_SERVED_LEN
    + crate::conn::PARKED_FIXED_LEN
    + 2
    + 4 * crate::hpack::MAX_ENTRIES
    + crate::hpack::TABLE_CAPACITY;

/// Heap to reserve for parked HTTP/2 connections, per connection the pool can hold, on
/// average. A parked connection takes 27 bytes and its HPACK table's contents (4 bytes an
/// entry besides its name and value), [`MAX_PARKED_LEN`] at most with the 4,096-byte table
/// full. Measured (2026-12-02, a Python h2 server printing its decoder's table after each
/// request): curl 7.88 and nghttp 1.52 leave 3 entries, 94 and 97 bytes parked; headless
/// Chromium 156 after a page and two assets 23 entries (table size 1,551 of 4,096), 934 bytes.
/// The TLS service keeps the parked total within this times its connections, and ends
/// (GOAWAY) an idle HTTP/2 connection whose state would pass it.
pub const PARKED_BYTES_PER_CONNECTION: usize = 1024;

/// An HTTPS connection's HTTP side.
pub struct Negotiated {
    http: Connection,
    /// The HTTP/2 session while h2 is in use (one element), empty otherwise.
    h2: Vec<H2Session>,
    protocol: Protocol,
    peer: Option<core::net::IpAddr>,
}

impl Default for Negotiated {
    fn default() -> Self {
        Self::new()
    }
}

impl Negotiated {
    /// A closed connection.
    pub fn new() -> Self {
        Self {
            http: Connection::new(),
            h2: Vec::new(),
            protocol: Protocol::Undecided,
            peer: None,
        }
    }

    /// Starts serving a new TLS connection; the protocol is chosen later.
    pub fn open_secure(&mut self, server: &mut Server, now: Instant) {
        self.http.open_secure(server, now);
        self.protocol = Protocol::Undecided;
        self.peer = None;
    }

    /// Records the protocol ALPN chose (`None`: the client offered none, HTTP/1.1). Only the
    /// first call after [`Negotiated::open_secure`] counts.
    pub fn select(&mut self, alpn: Option<&[u8]>) {
        if self.protocol != Protocol::Undecided {
            return;
        }
        if alpn == Some(ALPN_H2) {
            self.h2 = Vec::new();
            if self.h2.try_reserve_exact(1).is_err() {
                log::warn!("h2: no memory for a connection's state");
                self.protocol = Protocol::NoMemory;
                return;
            }
            let mut session = H2Session::new();
            if let Some(peer) = self.peer {
                session.set_peer(peer);
            }
            self.h2.push(session);
            self.protocol = Protocol::H2;
        } else {
            self.protocol = Protocol::Http1;
        }
    }

    /// The protocol in use.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The HTTP/2 session, when h2 was chosen (counters).
    pub fn h2(&self) -> Option<&H2Session> {
        self.h2.first()
    }

    /// See [`Connection::set_peer`].
    pub fn set_peer(&mut self, peer: core::net::IpAddr) {
        self.http.set_peer(peer);
        self.peer = Some(peer);
        if let Some(session) = self.h2.first_mut() {
            session.set_peer(peer);
        }
    }

    /// Plaintext from the client; returns how many bytes were taken.
    pub fn receive(&mut self, server: &mut Server, data: &[u8], now: Instant) -> usize {
        match (self.protocol, self.h2.first_mut()) {
            (Protocol::Undecided, _) => 0,
            (Protocol::Http1, _) => self.http.receive(server, data, now),
            (Protocol::H2, Some(session)) => session.receive(data, now),
            (Protocol::H2 | Protocol::NoMemory, _) => data.len(),
        }
    }

    /// Plaintext to send, written into `out`; returns its length.
    pub fn transmit(&mut self, server: &mut Server, out: &mut [u8], now: Instant) -> usize {
        match (self.protocol, self.h2.first_mut()) {
            (Protocol::Http1, _) => self.http.transmit(server, out, now),
            (Protocol::H2, Some(session)) => session.transmit(&mut self.http, server, out, now),
            _ => 0,
        }
    }

    /// What to do with the socket (see [`Connection::action`]).
    pub fn action(&self, now: Instant) -> ConnectionAction {
        match (self.protocol, self.h2.first()) {
            (Protocol::Undecided | Protocol::Http1, _) => self.http.action(now),
            (Protocol::H2, Some(session)) => session.action(&self.http, now),
            _ => ConnectionAction::Abort,
        }
    }

    /// When to look again if nothing happens.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.h2.first() {
            Some(session) => session.next_deadline(&self.http),
            None => self.http.next_deadline(),
        }
    }

    /// Whether a response is being sent (its body refers to the site being served).
    pub fn is_responding(&self) -> bool {
        self.http.is_responding()
    }

    /// What the connection is doing; an h2 connection is `Responding` while frames wait,
    /// `Closing` once its GOAWAY is out, `Idle` otherwise.
    pub fn activity(&self) -> Activity {
        match (self.protocol, self.h2.first()) {
            (Protocol::H2, Some(session))
                if session.h2().is_finished() && !session.wants_transmit() =>
            {
                Activity::Closing
            }
            (Protocol::H2, Some(session)) if session.wants_transmit() => Activity::Responding,
            (Protocol::H2, Some(_)) => Activity::Idle,
            (Protocol::NoMemory, _) => Activity::Broken,
            _ => self.http.activity(),
        }
    }

    /// Plaintext still to come of the response being sent, at least (see
    /// [`Connection::pending_len`]; 1 while HTTP/2 frames wait).
    pub fn pending_len(&self) -> usize {
        match (self.protocol, self.h2.first()) {
            (Protocol::H2, Some(session)) => usize::from(session.wants_transmit()),
            _ => self.http.pending_len(),
        }
    }

    /// Whether the connection rests between requests, so that [`Negotiated::park`] can let
    /// go of its slot: any open HTTP/1.1 connection the TLS layer finds idle, an HTTP/2 one
    /// with no stream open, nothing queued and no frame half read
    /// ([`H2Session::can_park`]).
    pub fn can_park(&self) -> bool {
        match (self.protocol, self.h2.first()) {
            (Protocol::Http1, _) => true,
            (Protocol::H2, Some(session)) => {
                session.can_park() && self.http.activity() == Activity::Idle
            }
            _ => false,
        }
    }

    /// Heap bytes [`Negotiated::park`] would take (0 for HTTP/1.1).
    pub fn parked_len(&self) -> usize {
        match (self.protocol, self.h2.first()) {
            (Protocol::H2, Some(session)) => LANE_SERVED_LEN + session.h2().parked_len(),
            _ => 0,
        }
    }

    /// Lets go of a connection that stays open while it rests ([`Negotiated::can_park`]):
    /// the stream pool lends its slot to another connection meanwhile, and an HTTP/2
    /// connection's session goes back to the heap, its compact state kept in the
    /// [`Parked`] returned (for [`Negotiated::unpark`]). `None`: the heap had no room for
    /// that state, and nothing changed.
    pub fn park(&mut self, server: &mut Server) -> Option<Parked> {
        let parked = match (self.protocol, self.h2.first()) {
            (Protocol::H2, Some(session)) => {
                let mut bytes = Vec::new();
                let len = LANE_SERVED_LEN + session.h2().parked_len();
                if bytes.try_reserve_exact(len).is_err() {
                    return None;
                }
                bytes.extend_from_slice(&self.http.requests_served().to_be_bytes());
                session.h2().park_into(&mut bytes);
                // The capacity is the length: no reallocation.
                Parked::H2(bytes.into_boxed_slice())
            }
            _ => Parked::Http1(self.http.requests_served()),
        };
        self.http.suspend(server);
        self.protocol = Protocol::Undecided;
        self.peer = None;
        // The HTTP/2 session goes back to the heap.
        self.h2 = Vec::new();
        Some(parked)
    }

    /// Carries on a connection that [`Negotiated::park`] let go of. `false`: an HTTP/2
    /// connection found no memory for its session (the connection is then
    /// [`Protocol::NoMemory`], aborted).
    pub fn unpark(&mut self, server: &mut Server, now: Instant, parked: Parked) -> bool {
        self.peer = None;
        self.h2 = Vec::new();
        let bytes = match parked {
            Parked::Http1(served) => {
                self.http.resume_secure(server, now, served);
                self.protocol = Protocol::Http1;
                return true;
            }
            Parked::H2(bytes) => bytes,
        };
        let served = bytes
            .get(..LANE_SERVED_LEN)
            .and_then(|four| Some(u32::from_be_bytes(four.try_into().ok()?)))
            .unwrap_or(0);
        self.http.resume_secure(server, now, served);
        self.protocol = Protocol::NoMemory;
        if self.h2.try_reserve_exact(1).is_err() {
            log::warn!("h2: no memory to carry on a connection");
            return false;
        }
        let mut session = H2Session::new();
        let state = bytes.get(LANE_SERVED_LEN..).unwrap_or_default();
        if session.h2_mut().unpark(state).is_none() {
            // Cannot happen: the bytes are the ones park wrote.
            log::error!("h2: a parked connection's state does not read back");
            return false;
        }
        self.h2.push(session);
        self.protocol = Protocol::H2;
        true
    }

    /// Ends an HTTP/2 connection politely (GOAWAY with NO_ERROR; streams already open are
    /// finished). Nothing for HTTP/1.1.
    pub fn shut_down(&mut self) {
        if let (Protocol::H2, Some(session)) = (self.protocol, self.h2.first_mut()) {
            session.h2_mut().shut_down();
        }
    }

    /// The socket is gone.
    pub fn close(&mut self, server: &mut Server) {
        self.http.close(server);
        self.protocol = Protocol::Undecided;
        // The HTTP/2 state goes back to the heap.
        self.h2 = Vec::new();
    }
}
