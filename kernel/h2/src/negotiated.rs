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
//! chosen and freed when the connection closes, so HTTP/1.1 connections never pay for it;
//! the allocation is fallible ([`HEAP_BYTES_PER_CONNECTION`] is what a heap must reserve per
//! connection), and a connection that finds no memory is aborted.

use crate::ALPN_H2;
use crate::serve::H2Session;
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

    /// Lets go of an idle HTTP/1.1 connection that stays open (see [`Connection::suspend`]):
    /// the stream pool lends its slot to another connection meanwhile. Returns the requests
    /// served, for [`Negotiated::resume_secure`].
    pub fn suspend(&mut self, server: &mut Server) -> u32 {
        self.protocol = Protocol::Undecided;
        self.peer = None;
        self.http.suspend(server)
    }

    /// Carries on an HTTP/1.1 connection that [`Negotiated::suspend`] let go of.
    pub fn resume_secure(&mut self, server: &mut Server, now: Instant, requests_served: u32) {
        self.http.resume_secure(server, now, requests_served);
        self.h2 = Vec::new();
        self.protocol = Protocol::Http1;
        self.peer = None;
    }

    /// The socket is gone.
    pub fn close(&mut self, server: &mut Server) {
        self.http.close(server);
        self.protocol = Protocol::Undecided;
        // The HTTP/2 state goes back to the heap.
        self.h2 = Vec::new();
    }
}
