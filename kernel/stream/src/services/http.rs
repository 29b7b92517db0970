//! Plain HTTP over the stream pool: the engine's [`Connection`] is the session, the
//! engine's [`Server`] (the site, the configuration, the counters) the shared state, shared
//! with the HTTPS pool's service ([`super::tls::TlsService`]) through a `RefCell`: the loop
//! serves one connection at a time, so no borrow ever overlaps another.

use crate::{Ending, Service, SessionPhase, wire};
use bramble_hal::Instant;
use bramble_http::{Activity, Connection, Server};
use core::cell::RefCell;

/// The HTTP engine as a [`Service`].
pub struct HttpService<'a> {
    /// The site, the configuration and the counters.
    pub server: &'a RefCell<Server<'a>>,
    /// How response bytes are copied into frames and summed ([`wire::copy_words`] unless
    /// the platform has a faster routine: the Pi kernel's is in assembly).
    pub copy_words: wire::CopyWords,
}

impl<'a> HttpService<'a> {
    /// Serves `server`'s site.
    pub fn new(server: &'a RefCell<Server<'a>>) -> Self {
        Self {
            server,
            copy_words: wire::copy_words,
        }
    }
}

impl Service for HttpService<'_> {
    type Session = Connection;

    fn open(
        &mut self,
        session: &mut Connection,
        peer: &wire::Address,
        _local_port: u16,
        carry: u32,
        now: Instant,
    ) {
        // `carry` is one more than the requests served, so that 0 means a new connection.
        match carry.checked_sub(1) {
            None => session.open(&mut self.server.borrow_mut(), now),
            Some(served) => session.resume(&mut self.server.borrow_mut(), now, served),
        }
        // The access log ends each line with the client's address (its family shows).
        let address = match wire::as_v4(peer) {
            Some(v4) => core::net::IpAddr::from(v4),
            None => core::net::IpAddr::from(*peer),
        };
        session.set_peer(address);
    }

    fn receive(&mut self, session: &mut Connection, data: &[u8], now: Instant) -> usize {
        session.receive(&mut self.server.borrow_mut(), data, now)
    }

    fn parked_ready(&self, parked: &[u8], _carry: u32) -> bool {
        // A whole header section (RFC 9112 §2.2 allows a bare LF as the line end).
        parked.windows(4).any(|w| w == b"\r\n\r\n") || parked.windows(2).any(|w| w == b"\n\n")
    }

    fn receive_window(&self, session: &Connection) -> usize {
        session.receive_window()
    }

    fn send_len(&self, session: &Connection) -> usize {
        session.pending_len()
    }

    fn readable(
        &mut self,
        session: &mut Connection,
        offset: usize,
        max: usize,
        now: Instant,
    ) -> usize {
        session.readable(&mut self.server.borrow_mut(), offset, max, now)
    }

    fn read_at(&self, session: &mut Connection, offset: usize, out: &mut [u8]) -> usize {
        session.read_at(&self.server.borrow(), offset, out)
    }

    fn source_address(&self, session: &Connection, offset: usize) -> Option<usize> {
        session.byte_address(&self.server.borrow(), offset)
    }

    fn read_summed(&self, session: &mut Connection, offset: usize, out: &mut [u8]) -> (usize, u32) {
        // Head and body pieces in order; a piece that begins at an odd offset of the
        // payload adds in turned round.
        let mut total = 0u32;
        let mut position = 0usize;
        let copy_words = self.copy_words;
        let n = session.read_at_into(&self.server.borrow(), offset, out, |to, from| {
            let piece = match from {
                Some(from) => wire::copy_and_sum_with(to, from, copy_words),
                None => wire::sum(0, to),
            };
            let piece = if position % 2 == 1 {
                wire::at_odd_offset(piece)
            } else {
                piece
            };
            total = wire::add_sums(total, piece);
            position += to.len();
        });
        (n, total)
    }

    fn acknowledge(&mut self, session: &mut Connection, n: usize, now: Instant) {
        session.acknowledge(&mut self.server.borrow_mut(), n, now);
    }

    fn phase(&self, session: &Connection) -> SessionPhase {
        match session.activity() {
            Activity::Idle => SessionPhase::Idle,
            Activity::Receiving { since, bytes } => SessionPhase::Receiving { since, bytes },
            Activity::Responding => SessionPhase::Sending,
            Activity::Closing => SessionPhase::Closing,
            Activity::Broken => SessionPhase::Abort,
        }
    }

    fn release(&mut self, session: &mut Connection) -> u32 {
        session
            .suspend(&mut self.server.borrow_mut())
            .saturating_add(1)
    }

    fn close(&mut self, session: &mut Connection, _ending: Ending) {
        session.close(&mut self.server.borrow_mut());
    }
}
