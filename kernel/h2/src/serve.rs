//! HTTP/2 requests answered by the HTTP/1.1 engine: one [`bramble_http::Connection`] (the
//! "lane", the one the TLS slot already has) takes each request's HTTP/1.1 head in turn, and
//! its response head and body become a HEADERS frame and DATA frames.
//!
//! So routing, the site's `_headers` and `_redirects` rules, HEAD, conditional requests,
//! ranges, precompressed variants, HSTS, error pages, the access log and the counters are
//! exactly HTTP/1.1's; only framing differs. The response head is read from the lane without
//! being taken ([`bramble_http::Connection::readable`] and `read_at`), its names lowered and
//! the connection-specific fields dropped (RFC 9113 §8.2.2), then acknowledged; body bytes go
//! from the site straight into the DATA frame's payload.
//!
//! Streams are answered one at a time, in the order their requests arrived: the lane's
//! buffers are the only response buffers, whatever the number of streams. A response whose
//! flow-control window stays shut for [`crate::conn::STALL_MICROS`] is cancelled
//! (RST_STREAM) so the streams behind it go on; a shut connection window ends the
//! connection.

use crate::conn::{H2, STALL_MICROS};
use crate::frame::{ErrorCode, HEADER_LEN};
use bramble_hal::Instant;
use bramble_http::{Activity, Connection, ConnectionAction, RESPONSE_HEAD_LEN, Server};

/// Header fields a response head can have, at most (the engine writes about 15).
const MAX_RESPONSE_FIELDS: usize = 40;

/// The response being sent.
#[derive(Clone, Copy, Debug)]
struct Current {
    stream: u32,
    head_method: bool,
    /// The header list was too large: a 431 goes out without the engine.
    too_large: bool,
    head_done: bool,
    /// Body bytes still to send.
    remaining: u64,
    /// Since when the window has been shut with body bytes left.
    stalled_since: Option<Instant>,
}

/// One HTTP/2 connection: the protocol state and the response in progress. The lane is the
/// caller's (see the module notes).
pub struct H2Session {
    h2: H2,
    current: Option<Current>,
    /// Deadline for the response in progress to get a window again.
    stall_deadline: Option<Instant>,
    /// The client's address, given to the lane again whenever it is reopened.
    peer: Option<core::net::IpAddr>,
}

impl Default for H2Session {
    fn default() -> Self {
        Self::new()
    }
}

/// Reopens the lane (a response was cut short, or the lane closed itself after an error
/// or its request limit), keeping the client's address for the access log.
fn reopen(
    lane: &mut Connection,
    server: &mut Server,
    now: Instant,
    peer: Option<core::net::IpAddr>,
) {
    lane.close(server);
    lane.open_secure(server, now);
    if let Some(peer) = peer {
        lane.set_peer(peer);
    }
}

impl H2Session {
    /// A new session (its SETTINGS queued). Open the lane with
    /// [`Connection::open_secure`] first.
    pub fn new() -> Self {
        Self {
            h2: H2::new(),
            current: None,
            stall_deadline: None,
            peer: None,
        }
    }

    /// Remembers the client's address (the lane has it already; a reopened lane gets it
    /// again).
    pub fn set_peer(&mut self, peer: core::net::IpAddr) {
        self.peer = Some(peer);
    }

    /// The protocol state (counters, tests).
    pub fn h2(&self) -> &H2 {
        &self.h2
    }

    /// Whether the connection rests between requests (see [`H2::can_park`]) with no
    /// response in progress: what it needs to go on is then [`H2::park_into`]'s.
    pub fn can_park(&self) -> bool {
        self.current.is_none() && self.stall_deadline.is_none() && self.h2.can_park()
    }

    /// The protocol state, to park it or carry it on ([`H2::park_into`], [`H2::unpark`]).
    pub fn h2_mut(&mut self) -> &mut H2 {
        &mut self.h2
    }

    /// Takes plaintext from the client (always all of it).
    pub fn receive(&mut self, data: &[u8], now: Instant) -> usize {
        self.h2.receive(data, now)
    }

    /// Writes frames into `out`: control frames first, then the responses in order.
    pub fn transmit(
        &mut self,
        lane: &mut Connection,
        server: &mut Server,
        out: &mut [u8],
        now: Instant,
    ) -> usize {
        let mut n = 0usize;
        self.check_stall(lane, server, now);
        loop {
            n += self.h2.write_control(&mut out[n..]);
            if self.h2.wants_transmit() {
                return n;
            }
            let Some(mut current) = self.current else {
                if !self.start_next(lane, server, now) {
                    break;
                }
                continue;
            };
            if !self.h2.is_stream_open(current.stream) {
                // Reset by the client (or by us): whatever the lane was sending is dropped.
                if lane.activity() != Activity::Idle {
                    reopen(lane, server, now, self.peer);
                }
                self.current = None;
                continue;
            }
            if !current.head_done {
                match self.send_head(lane, server, &mut out[n..], &mut current, now) {
                    Step::Wrote(w) => n += w,
                    Step::Wait => break,
                    Step::Failed => {
                        self.h2.reset(current.stream, ErrorCode::InternalError);
                        reopen(lane, server, now, self.peer);
                        self.current = None;
                        continue;
                    }
                }
            } else {
                match self.send_body(lane, server, &mut out[n..], &mut current, now) {
                    Step::Wrote(w) => n += w,
                    Step::Wait => {
                        self.current = Some(current);
                        break;
                    }
                    Step::Failed => {
                        self.h2.reset(current.stream, ErrorCode::InternalError);
                        reopen(lane, server, now, self.peer);
                        self.current = None;
                        continue;
                    }
                }
            }
            if current.head_done && current.remaining == 0 {
                // Done: the lane must be idle again, ready for the next request.
                if lane.activity() != Activity::Idle || !lane.is_open() {
                    reopen(lane, server, now, self.peer);
                }
                self.current = None;
            } else {
                self.current = Some(current);
            }
        }
        // A quiet connection ends when the lane's own deadlines say so (first request, idle).
        if self.current.is_none()
            && !self.h2.has_requests()
            && self.h2.open_streams() == 0
            && lane.action(now) != ConnectionAction::KeepOpen
        {
            self.h2.shut_down();
            n += self.h2.write_control(&mut out[n..]);
        }
        n
    }

    /// Feeds the next queued request to the lane; `false` when none waits.
    fn start_next(&mut self, lane: &mut Connection, server: &mut Server, now: Instant) -> bool {
        let Some(request) = self.h2.peek_request() else {
            return false;
        };
        let (stream, head_method, too_large) =
            (request.stream, request.head_method, request.too_large);
        if too_large {
            self.h2.pop_request();
            self.current = Some(Current {
                stream,
                head_method,
                too_large,
                head_done: false,
                remaining: 0,
                stalled_since: None,
            });
            return true;
        }
        if !lane.is_open() || lane.activity() != Activity::Idle {
            reopen(lane, server, now, self.peer);
        }
        let len = request.head.len();
        let taken = lane.receive(server, request.head, now);
        self.h2.pop_request();
        if taken < len {
            self.h2.reset(stream, ErrorCode::InternalError);
            reopen(lane, server, now, self.peer);
            return true;
        }
        self.current = Some(Current {
            stream,
            head_method,
            too_large: false,
            head_done: false,
            remaining: 0,
            stalled_since: None,
        });
        true
    }

    fn send_head(
        &mut self,
        lane: &mut Connection,
        server: &mut Server,
        out: &mut [u8],
        current: &mut Current,
        now: Instant,
    ) -> Step {
        if current.too_large {
            return match self
                .h2
                .write_headers(out, current.stream, 431, core::iter::empty(), true)
            {
                Some(w) => {
                    current.head_done = true;
                    Step::Wrote(w)
                }
                None => Step::Wait,
            };
        }
        let available = lane.readable(server, 0, RESPONSE_HEAD_LEN, now);
        if available == 0 {
            return if lane.activity() == Activity::Broken {
                Step::Failed
            } else {
                Step::Wait
            };
        }
        let mut peek = [0u8; RESPONSE_HEAD_LEN];
        let got = lane.read_at(server, 0, &mut peek[..available.min(RESPONSE_HEAD_LEN)]);
        let Some(head_len) = peek[..got]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|at| at + 4)
        else {
            // The whole head is in the lane's head buffer: it is there or it is broken.
            return if got == RESPONSE_HEAD_LEN {
                Step::Failed
            } else {
                Step::Wait
            };
        };
        lower_names(&mut peek[..head_len]);
        let mut fields = [httparse::EMPTY_HEADER; MAX_RESPONSE_FIELDS];
        let mut response = httparse::Response::new(&mut fields);
        let Ok(httparse::Status::Complete(_)) = response.parse(&peek[..head_len]) else {
            return Step::Failed;
        };
        let status = response.code.unwrap_or(500);
        let length = response
            .headers
            .iter()
            .find(|h| h.name == "content-length")
            .and_then(|h| core::str::from_utf8(h.value).ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let body = if current.head_method || status == 204 || status == 304 || status < 200 {
            0
        } else {
            length
        };
        let fields = response
            .headers
            .iter()
            .filter(|h| {
                !matches!(
                    h.name,
                    "connection"
                        | "keep-alive"
                        | "transfer-encoding"
                        | "upgrade"
                        | "proxy-connection"
                )
            })
            .map(|h| (h.name.as_bytes(), h.value));
        let Some(w) = self
            .h2
            .write_headers(out, current.stream, status, fields, body == 0)
        else {
            return Step::Wait;
        };
        lane.acknowledge(server, head_len, now);
        current.head_done = true;
        current.remaining = body;
        Step::Wrote(w)
    }

    fn send_body(
        &mut self,
        lane: &mut Connection,
        server: &mut Server,
        out: &mut [u8],
        current: &mut Current,
        now: Instant,
    ) -> Step {
        let allowance = self.h2.send_allowance(current.stream);
        let room = out.len().saturating_sub(HEADER_LEN);
        let want = (allowance.min(room) as u64).min(current.remaining) as usize;
        if want == 0 {
            if allowance == 0 && current.stalled_since.is_none() {
                current.stalled_since = Some(now);
                self.stall_deadline = Some(now.add_micros(STALL_MICROS));
            }
            return Step::Wait;
        }
        current.stalled_since = None;
        self.stall_deadline = None;
        let available = lane.readable(server, 0, want, now);
        if available == 0 {
            return if lane.activity() == Activity::Broken || !lane.is_responding() {
                Step::Failed
            } else {
                Step::Wait
            };
        }
        let take = available.min(want);
        let got = lane.read_at(server, 0, &mut out[HEADER_LEN..HEADER_LEN + take]);
        lane.acknowledge(server, got, now);
        current.remaining -= got as u64;
        let end = current.remaining == 0;
        match self.h2.write_data(out, current.stream, got, end) {
            Some(w) => Step::Wrote(w),
            None => Step::Failed,
        }
    }

    /// Gives up a response whose window stayed shut too long.
    fn check_stall(&mut self, lane: &mut Connection, server: &mut Server, now: Instant) {
        let Some(current) = self.current else {
            return;
        };
        let Some(since) = current.stalled_since else {
            return;
        };
        if now.micros_since(since) < STALL_MICROS || self.h2.send_allowance(current.stream) > 0 {
            return;
        }
        log::debug!("h2: stream {} stalled on a shut window", current.stream);
        if self.h2.connection_window_shut() {
            self.h2.fail(ErrorCode::EnhanceYourCalm);
        } else {
            self.h2.reset(current.stream, ErrorCode::Cancel);
        }
        reopen(lane, server, now, self.peer);
        self.current = None;
        self.stall_deadline = None;
    }

    /// What to do with the socket.
    pub fn action(&self, lane: &Connection, now: Instant) -> ConnectionAction {
        if self.h2.is_finished() && !self.h2.wants_transmit() {
            return ConnectionAction::CloseWhenFlushed;
        }
        if self.current.is_some() && lane.action(now) == ConnectionAction::Abort {
            return ConnectionAction::Abort;
        }
        ConnectionAction::KeepOpen
    }

    /// When to look again if nothing happens.
    pub fn next_deadline(&self, lane: &Connection) -> Option<Instant> {
        match (lane.next_deadline(), self.stall_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether frames wait to be sent.
    pub fn wants_transmit(&self) -> bool {
        self.h2.wants_transmit() || self.current.is_some() || self.h2.has_requests()
    }
}

enum Step {
    Wrote(usize),
    Wait,
    Failed,
}

/// Lowers the field names of a response head (after its status line), in place: HTTP/2
/// field names are lower case (RFC 9113 §8.2.1).
fn lower_names(head: &mut [u8]) {
    let mut in_name = false;
    let mut line_start = false;
    for byte in head.iter_mut() {
        if *byte == b'\n' {
            line_start = true;
            in_name = true;
            continue;
        }
        if line_start {
            line_start = false;
        }
        if in_name {
            if *byte == b':' {
                in_name = false;
            } else {
                byte.make_ascii_lowercase();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RAM of one h2 connection beyond its TLS slot (whose HTTP/1.1 connection is the
    /// lane): the figure doc/http2.md gives. It grows only with the constants in `conn`.
    #[test]
    fn a_session_stays_within_its_budget() {
        let size = core::mem::size_of::<H2Session>();
        std::println!(
            "H2Session: {size} bytes; Negotiated: {} bytes; Connection: {} bytes",
            core::mem::size_of::<crate::Negotiated>(),
            core::mem::size_of::<Connection>()
        );
        assert!(size <= 30 * 1024, "{size}");
    }
}
