//! One HTTP/1.1 connection: its buffers, deadlines and access log.
//!
//! The connection buffers received bytes, parses requests (the checks on the request line
//! are in [`crate::request`]), hands each to [`crate::routing::dispatch`], and queues the
//! responses whose bodies come from the site's body source (the image in RAM, or the card
//! store, which may answer "not yet"); it keeps the deadlines that cut slow clients off.

use core::cell::Cell;

use bramble_hal::Instant;
use bramble_site::{Body, BodyCopy, BodyRequest, BodySource, BodyStatus, SiteFlags, SiteIndex};

use crate::chunked::{ChunkedProgress, skip_chunked};
use crate::path::MAX_TARGET_LEN;
use crate::request::{BodySkip, RequestView, VersionError, classify_version_error, origin_form};
use crate::respond::{Outcome, RESPONSE_HEAD_LEN, Response, UploadRoute};
use crate::response::Head;
use crate::routing::dispatch;
use crate::search::{SearchState, SearchTicket};
use crate::server::{Limits, Server, SiteSource};
use crate::upload::{Answer, UploadBody, UploadHead, parse_upload_fields};

/// Capacity of the request buffer: the largest header section accepted (431 beyond).
pub const REQUEST_BUFFER_LEN: usize = 8192;
/// Most header fields accepted in one request (431 beyond).
pub const MAX_HEADERS: usize = 48;
/// Longest request line accepted: the longest target plus room for the method and version.
const LONGEST_REQUEST_LINE: usize = MAX_TARGET_LEN + 32;
/// How much of a request target the access log keeps.
const LOG_TARGET_LEN: usize = 160;

/// What a connection is doing (see [`Connection::activity`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Between requests: nothing buffered, nothing to send.
    Idle,
    /// A request (or its body) is being received: its first byte came at `since`, `bytes`
    /// of it are buffered.
    Receiving {
        /// When the request's first byte arrived.
        since: Instant,
        /// Bytes of it buffered so far.
        bytes: usize,
    },
    /// A response is being sent (or awaits acknowledgment).
    Responding,
    /// No more requests are read: close once the response (if any) is through.
    Closing,
    /// A response cannot be completed: reset the connection.
    Broken,
}

/// What the network loop should do with the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionAction {
    /// Keep the socket open: more bytes to receive or send, or waiting for the next request.
    KeepOpen,
    /// Everything has been handed to the socket (or nothing is pending and a deadline passed
    /// quietly): close it gracefully, letting its transmit buffer drain first.
    CloseWhenFlushed,
    /// A deadline passed while a response or request was stuck: abort (reset) the socket.
    Abort,
}

/// The response being sent: its head (in `Connection::head`) and an optional range of a body.
#[derive(Clone, Copy, Debug, Default)]
struct Sending {
    /// Bytes of the head buffer already handed out.
    head_sent: usize,
    /// The body the range is in (none: a head-only response or a built-in page).
    body: Option<Body>,
    /// Next offset in the body to hand out.
    body_next: u32,
    /// Offset in the body one past the last byte to hand out.
    body_end: u32,
    /// The body source has the first bytes of the range: the head may go out. Until then a
    /// body that cannot be had can still be answered with a 500 instead.
    body_confirmed: bool,
    /// The body segment of the last request to the body source, so that each segment is
    /// looked up (counted as a cache hit or miss) once per response.
    last_segment: Option<u32>,
    /// The body is generated (a search results page, from `Connection::search`) rather than
    /// a file's.
    generated: bool,
    /// The head is not written yet: the generated body must be measured first.
    deferred: bool,
    /// The site's generation when the response started: its body comes from that site
    /// even after a switch ([`Server::switch_site`]).
    generation: u32,
}

/// One HTTP connection. Fixed capacity, no allocation; drive it with [`Connection::open`],
/// [`Connection::receive`], [`Connection::transmit`], [`Connection::action`] and
/// [`Connection::close`].
pub struct Connection {
    open: bool,
    /// The connection came in over TLS: no redirect to HTTPS, and HSTS when configured.
    secure: bool,
    /// Received bytes not yet parsed: the next request(s), pipelined.
    request: heapless::Vec<u8, REQUEST_BUFFER_LEN>,
    /// The response head being sent, followed by a built-in page body if any.
    head: heapless::Vec<u8, RESPONSE_HEAD_LEN>,
    sending: Sending,
    /// A response is queued and not yet fully handed out.
    responding: bool,
    /// No more requests will be read; close once everything is handed out.
    closing: bool,
    /// A response could not be completed (its body vanished): reset the connection so the
    /// client sees the truncation.
    broken: bool,
    /// Request body still to read and throw away.
    skip: BodySkip,
    /// A site upload's body being received: its bytes go to the server's upload handler.
    upload: Option<UploadBody>,
    /// How many more bytes a chunked body may take (framing included) before it counts as
    /// too large and the connection closes.
    chunked_budget: u64,
    /// A line ended since the last incomplete parse: worth parsing again. Re-parsing only
    /// when a line completes keeps a byte-at-a-time client from costing a parse per byte.
    parse_pending: bool,
    opened_at: Instant,
    /// First byte of the request being received, if any.
    request_started: Option<Instant>,
    /// When the response being sent was queued; while an upload's body arrives (no response
    /// is), when its last byte came.
    response_started: Instant,
    /// Bytes of the response being sent (head and body), for its deadline.
    response_len: u64,
    /// When the last response finished (or the connection opened).
    idle_since: Instant,
    requests_served: u32,
    /// Deadlines and sizes, copied from the server configuration at open.
    limits: Limits,
    /// Set when `action` reported a deadline; counted as a timeout on close.
    timed_out: Cell<bool>,
    /// The server's search slot holding the search being answered, when the response is a
    /// results page.
    search_slot: Option<SearchTicket>,
    /// When `action` first asked for a graceful close; the close deadline runs from here.
    close_asked: Cell<Option<Instant>>,
    // Access-log record of the response being sent.
    log_method: heapless::String<16>,
    log_target: heapless::String<LOG_TARGET_LEN>,
    log_status: u16,
    log_bytes: u64,
    log_started: Instant,
    /// The connection's own source address (its family included).
    peer: Option<core::net::IpAddr>,
    /// The current request's client, for the access log and the visitor counts: the peer,
    /// or behind one of the owner's proxies the address it forwarded ([`crate::forwarded`]).
    client: Option<core::net::IpAddr>,
}

impl Default for Connection {
    fn default() -> Self {
        Self::new()
    }
}

/// Replaces `out` with as much of `text` as fits, for the access log: control characters
/// (C0, DEL and C1, such as the CSI U+009B a terminal would act on) become `\xNN` per UTF-8
/// byte and a backslash becomes `\\`, so the log line reaches the console as visible text
/// and every escape in it is unambiguous. Truncation never splits a char or an escape.
fn push_log_text<const N: usize>(out: &mut heapless::String<N>, text: &str) {
    out.clear();
    for c in text.chars() {
        let fits = if c == '\\' {
            out.push_str("\\\\").is_ok()
        } else if c.is_control() {
            let mut utf8 = [0u8; 4];
            let bytes = c.encode_utf8(&mut utf8).as_bytes();
            let mut escaped: heapless::String<16> = heapless::String::new();
            for byte in bytes {
                // Cannot fail: at most 4 escapes of 4 characters each.
                let _ = core::fmt::write(&mut escaped, format_args!("\\x{byte:02x}"));
            }
            out.push_str(&escaped).is_ok()
        } else {
            out.push(c).is_ok()
        };
        if !fits {
            break;
        }
    }
}

impl Connection {
    /// A closed connection with empty buffers.
    pub const fn new() -> Self {
        Self {
            open: false,
            secure: false,
            request: heapless::Vec::new(),
            head: heapless::Vec::new(),
            sending: Sending {
                head_sent: 0,
                body: None,
                body_next: 0,
                body_end: 0,
                body_confirmed: false,
                last_segment: None,
                generated: false,
                deferred: false,
                generation: 0,
            },
            responding: false,
            closing: false,
            broken: false,
            skip: BodySkip::None,
            upload: None,
            chunked_budget: 0,
            parse_pending: false,
            opened_at: Instant(0),
            request_started: None,
            response_started: Instant(0),
            response_len: 0,
            idle_since: Instant(0),
            requests_served: 0,
            limits: Limits::DEFAULT,
            timed_out: Cell::new(false),
            search_slot: None,
            close_asked: Cell::new(None),
            log_method: heapless::String::new(),
            log_target: heapless::String::new(),
            log_status: 0,
            log_bytes: 0,
            log_started: Instant(0),
            peer: None,
            client: None,
        }
    }

    /// Starts serving a newly accepted TCP connection.
    pub fn open(&mut self, server: &mut Server, now: Instant) {
        if self.open {
            self.close(server);
        }
        self.reset();
        self.open = true;
        self.opened_at = now;
        self.idle_since = now;
        self.limits = server.config.limits;
        server.counters.connections_accepted += 1;
        server.counters.open_connections += 1;
    }

    /// Starts serving a newly accepted connection whose bytes arrive over TLS (the caller
    /// decrypts them): like [`Connection::open`], and responses know they travel over HTTPS.
    pub fn open_secure(&mut self, server: &mut Server, now: Instant) {
        self.open(server, now);
        self.secure = true;
    }

    /// Tells the connection (after [`Connection::open`]) who the client is: the access log
    /// ends each line with its address, so the family shows too.
    pub fn set_peer(&mut self, peer: core::net::IpAddr) {
        self.peer = Some(peer);
        self.client = Some(peer);
    }

    /// True between [`Connection::open`] and [`Connection::close`].
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// True while a response is being handed out (its body refers to the site being served,
    /// so the site must not change under it).
    pub fn is_responding(&self) -> bool {
        self.responding
    }

    /// Offers received bytes; returns how many were consumed. Fewer than offered means a
    /// response is still being sent and the request buffer is full (pipelined requests are
    /// answered in order): offer the rest again after [`Connection::transmit`].
    pub fn receive(&mut self, server: &mut Server, data: &[u8], now: Instant) -> usize {
        if !self.open || self.closing {
            return data.len();
        }
        let mut consumed = 0;
        loop {
            if self.closing {
                // An error ended the request stream: whatever else arrives is dropped.
                return data.len();
            }
            let rest = data.get(consumed..).unwrap_or(&[]);
            let mut progress = false;
            if self.upload.is_some() {
                let n = self.upload_bytes(server, rest, now);
                consumed += n;
                progress = n > 0 || self.upload.is_none();
            } else if self.skip != BodySkip::None && !rest.is_empty() {
                match self.skip {
                    BodySkip::Length(left) => {
                        let n = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                        consumed += n;
                        self.skip = match left - n as u64 {
                            0 => BodySkip::None,
                            left => BodySkip::Length(left),
                        };
                    }
                    BodySkip::Chunked(state) => {
                        match skip_chunked(state, rest, &mut self.chunked_budget) {
                            ChunkedProgress::More(state) => {
                                consumed += rest.len();
                                self.skip = BodySkip::Chunked(state);
                            }
                            ChunkedProgress::Done(n) => {
                                consumed += n;
                                self.skip = BodySkip::None;
                            }
                            ChunkedProgress::Invalid => {
                                // Broken framing: no later byte can be trusted.
                                self.skip = BodySkip::None;
                                self.closing = true;
                                self.request.clear();
                                return data.len();
                            }
                        }
                    }
                    BodySkip::None => {}
                }
                progress = true;
            } else if !rest.is_empty() {
                let n = rest.len().min(REQUEST_BUFFER_LEN - self.request.len());
                if n > 0 {
                    if self.request.is_empty() {
                        // The first bytes of a request are always parsed, so garbage (a TLS
                        // hello on port 80) is answered at once even without a line end.
                        self.parse_pending = true;
                        if self.request_started.is_none() {
                            self.request_started = Some(now);
                        }
                    }
                    let before = self.request.len();
                    // Cannot fail: n fits the free space.
                    let _ = self.request.extend_from_slice(&rest[..n]);
                    // Worth parsing again only if a line ended, or the buffer just grew
                    // past the longest valid request line (a line that never ends is 414),
                    // or it is full: the work per received byte stays bounded.
                    self.parse_pending |= rest[..n].contains(&b'\n')
                        || (before <= LONGEST_REQUEST_LINE
                            && self.request.len() > LONGEST_REQUEST_LINE)
                        || self.request.len() >= REQUEST_BUFFER_LEN;
                    consumed += n;
                    progress = true;
                }
            }
            if !self.responding
                && self.skip == BodySkip::None
                && self.upload.is_none()
                && self.process(server, now)
            {
                progress = true;
            }
            if !progress {
                return consumed;
            }
        }
    }

    /// Writes response bytes (head, then body bytes from the site's body source) into `out`,
    /// the socket's free transmit space; returns how many were written. Pipelined requests
    /// already buffered are answered as earlier responses complete. (The same as
    /// [`Connection::readable`] and [`Connection::read_at`] from offset 0, followed by
    /// [`Connection::acknowledge`].)
    ///
    /// A body the source does not have yet holds the response back (nothing more is written
    /// until a later call finds it); one that cannot be had is never sent: a 500 replaces the
    /// response if its head has not gone out, otherwise the connection is reset.
    pub fn transmit(&mut self, server: &mut Server, out: &mut [u8], now: Instant) -> usize {
        let mut written = 0;
        while self.open && self.responding {
            let space = &mut out[written..];
            let n = self.readable(server, 0, space.len(), now);
            if n == 0 {
                break;
            }
            let copied = self.read_at(server, 0, &mut space[..n]);
            self.acknowledge(server, copied, now);
            written += copied;
            if copied < n {
                break;
            }
        }
        written
    }

    /// Bytes of the response being sent that are not yet acknowledged (see
    /// [`Connection::acknowledge`]), whether the body source has them yet or not; 0 between
    /// responses.
    pub fn pending_len(&self) -> usize {
        if !self.open || !self.responding || self.broken {
            return 0;
        }
        if self.sending.deferred {
            // A generated page whose length is known only once its query has run (in
            // readable): at least one byte is coming, so the network stack asks for it.
            return 1;
        }
        (self.head.len() - self.sending.head_sent)
            + (self.sending.body_end - self.sending.body_next) as usize
    }

    /// How many response bytes from `offset` past the last acknowledged one
    /// [`Connection::read_at`] can copy now, in one piece, at most `max`: 0 while the body
    /// source does not have the next bytes yet (it wakes the network loop when it does).
    /// Before the first byte of a response goes out, the body is confirmed available; one
    /// that cannot be had is replaced by a 500 page then, and later makes the connection
    /// broken ([`Activity::Broken`]).
    pub fn readable(
        &mut self,
        server: &mut Server,
        offset: usize,
        max: usize,
        now: Instant,
    ) -> usize {
        if !self.open || !self.responding || self.broken || max == 0 {
            return 0;
        }
        if self.sending.deferred {
            // A generated page (search results): its head is written once its query has run.
            match self.prepare_generated(server, now) {
                BodyStatus::Ready(_) => {}
                BodyStatus::Pending => return 0,
                BodyStatus::Failed => self.fail_before_head(server, now),
            }
        }
        if !self.sending.body_confirmed {
            let at = self.sending.body_next;
            match self.read_body(server.site_of(self.sending.generation), at, &mut []) {
                BodyStatus::Ready(_) => self.sending.body_confirmed = true,
                BodyStatus::Pending => return 0,
                BodyStatus::Failed => self.fail_before_head(server, now),
            }
        }
        let head_left = self.head.len() - self.sending.head_sent;
        if offset < head_left {
            let n = max.min(head_left - offset);
            return n + self.readable_body(server, 0, max - n);
        }
        self.readable_body(server, offset - head_left, max)
    }

    /// The part of [`Connection::readable`] in the body: from `offset` past the next body
    /// byte to send, at most `max`, not past the end of the source's piece (a cached
    /// segment of the card) that holds it.
    fn readable_body(&mut self, server: &mut Server, offset: usize, max: usize) -> usize {
        let Some(at) = u32::try_from(offset)
            .ok()
            .and_then(|offset| self.sending.body_next.checked_add(offset))
            .filter(|&at| at < self.sending.body_end)
        else {
            return 0;
        };
        if max == 0 {
            return 0;
        }
        let left = (self.sending.body_end - at) as usize;
        if self.sending.generated {
            // The page's query ran and its length is known: its bytes are written on demand
            // (a card read it needs again makes read_at return fewer).
            return max.min(left);
        }
        let Some(body) = self.sending.body else {
            return 0;
        };
        let site = server.site_of(self.sending.generation);
        let piece_left = match site {
            SiteSource::Store(index, _) => {
                let segment = u64::from(index.segment_len().max(1));
                let position = u64::from(body.offset) + u64::from(at);
                // A mask for the power-of-two segments of a checked index (a 64-bit
                // division is a long library call on the Pi).
                let within = if segment.is_power_of_two() {
                    position & (segment - 1)
                } else {
                    position % segment
                };
                (segment - within) as usize
            }
            _ => usize::MAX,
        };
        match self.read_body(site, at, &mut []) {
            BodyStatus::Ready(_) => max.min(left).min(piece_left),
            BodyStatus::Pending => 0,
            BodyStatus::Failed => {
                // The body cannot be completed and its head is out (or will be: it was
                // confirmed): reset, so the client sees the truncation.
                server.counters.body_failures += 1;
                self.closing = true;
                self.broken = true;
                0
            }
        }
    }

    /// Copies the response bytes at `offset` past the last acknowledged one into `out`;
    /// returns how many (all of `out` after [`Connection::readable`] said that many). The
    /// same offset gives the same bytes until they are acknowledged, so a network stack can
    /// send and resend straight from here, without a transmit buffer of its own.
    pub fn read_at(&mut self, server: &Server, offset: usize, out: &mut [u8]) -> usize {
        self.read_at_into(server, offset, out, |to, from| {
            if let Some(from) = from {
                to.copy_from_slice(from);
            }
        })
    }

    /// [`Connection::read_at`] with the copying left to `copy`, called for each piece in
    /// order: `copy(to, Some(from))` to copy `from` into `to` (the same length), or
    /// `copy(to, None)` when `to` already holds the piece (a body source that can only copy
    /// itself). A network stack checksums as it copies this way.
    pub fn read_at_into(
        &mut self,
        server: &Server,
        offset: usize,
        out: &mut [u8],
        mut copy: impl FnMut(&mut [u8], Option<&[u8]>),
    ) -> usize {
        if !self.open || !self.responding || self.broken {
            return 0;
        }
        let head = &self.head[self.sending.head_sent..];
        let mut written = 0;
        if offset < head.len() {
            let n = out.len().min(head.len() - offset);
            copy(&mut out[..n], Some(&head[offset..offset + n]));
            written = n;
        }
        if written == out.len() {
            return written;
        }
        let body_offset = offset + written - head.len();
        let Some(at) = u32::try_from(body_offset)
            .ok()
            .and_then(|offset| self.sending.body_next.checked_add(offset))
            .filter(|&at| at < self.sending.body_end)
        else {
            return written;
        };
        let left = (self.sending.body_end - at) as usize;
        let space_len = (out.len() - written).min(left);
        let space = &mut out[written..written + space_len];
        if self.sending.generated {
            return match self.read_generated(server, at, space) {
                BodyStatus::Ready(n) if n <= space_len => {
                    copy(&mut space[..n], None);
                    written + n
                }
                _ => written,
            };
        }
        let site = server.site_of(self.sending.generation);
        if let Some(bytes) = self.peek_body(site, at) {
            let n = bytes.len().min(space_len);
            copy(&mut space[..n], Some(&bytes[..n]));
            return written + n;
        }
        // The source hands its bytes to `copy` (or copies them and says so): one pass.
        match self.read_body_with(site, at, space, &mut copy) {
            BodyStatus::Ready(n) if n <= space_len => written + n,
            _ => written,
        }
    }

    /// Where the response byte at `offset` past the last acknowledged one lies in memory, if
    /// it is copied from memory (the head buffer, or a body source that offers
    /// [`BodySource::peek`]): a network stack cuts its segments so that copies run word by
    /// word.
    pub fn byte_address(&self, server: &Server, offset: usize) -> Option<usize> {
        if !self.open || !self.responding || self.broken {
            return None;
        }
        let head = &self.head[self.sending.head_sent..];
        if let Some(byte) = head.get(offset) {
            return Some(core::ptr::from_ref(byte) as usize);
        }
        let body = self.sending.body?;
        let at = u32::try_from(offset - head.len())
            .ok()
            .and_then(|offset| self.sending.body_next.checked_add(offset))
            .filter(|&at| at < self.sending.body_end)?;
        let source: &dyn BodySource = match server.site_of(self.sending.generation) {
            SiteSource::Ready(image) => image,
            SiteSource::Store(_, source) => *source,
            SiteSource::Unavailable(_) => return None,
        };
        source.address(BodyRequest {
            body,
            offset: at,
            lookup: false,
        })
    }

    /// The client has the next `n` response bytes (at most [`Connection::pending_len`]):
    /// they are counted as sent, and a response that is complete ends, which answers the
    /// next pipelined request if one is buffered.
    pub fn acknowledge(&mut self, server: &mut Server, n: usize, now: Instant) {
        if !self.open || !self.responding {
            return;
        }
        let head_left = self.head.len() - self.sending.head_sent;
        let from_head = n.min(head_left);
        self.sending.head_sent += from_head;
        let body_left = (self.sending.body_end - self.sending.body_next) as usize;
        let from_body = (n - from_head).min(body_left);
        // from_body <= body_left, which is a u32.
        self.sending.body_next += from_body as u32;
        let counted = (from_head + from_body) as u64;
        self.log_bytes += counted;
        server.counters.bytes_sent += counted;
        while self.responding
            && !self.broken
            && !self.sending.deferred
            && self.sending.head_sent >= self.head.len()
            && self.sending.body_next >= self.sending.body_end
        {
            self.finish_response(server, now);
            if !self.closing && self.skip == BodySkip::None {
                self.process(server, now);
            }
        }
    }

    /// Takes over a connection that an earlier [`Connection::suspend`] let go (a network
    /// loop that lends connection states only to connections with something to do):
    /// like [`Connection::open`], but `requests_served` carries on, and no new connection is
    /// counted as accepted.
    pub fn resume(&mut self, server: &mut Server, now: Instant, requests_served: u32) {
        self.open(server, now);
        server.counters.connections_accepted -= 1;
        self.requests_served = requests_served;
    }

    /// [`Connection::resume`] for a connection whose bytes arrive over TLS (see
    /// [`Connection::open_secure`]).
    pub fn resume_secure(&mut self, server: &mut Server, now: Instant, requests_served: u32) {
        self.resume(server, now, requests_served);
        self.secure = true;
    }

    /// Lets go of a connection that stays open while it is idle (see
    /// [`Connection::activity`]); returns the requests served so far, for
    /// [`Connection::resume`]. The state is then free for another connection.
    pub fn suspend(&mut self, server: &mut Server) -> u32 {
        let served = self.requests_served;
        if self.open && self.responding {
            server.response_ended(self.sending.generation);
        }
        if self.open {
            server.counters.open_connections = server.counters.open_connections.saturating_sub(1);
        }
        self.reset();
        served
    }

    /// Requests answered on this connection so far.
    pub fn requests_served(&self) -> u32 {
        self.requests_served
    }

    /// What the connection is doing, for a network loop that keeps its own deadlines
    /// instead of asking [`Connection::action`].
    pub fn activity(&self) -> Activity {
        if !self.open {
            return Activity::Idle;
        }
        if self.broken {
            return Activity::Broken;
        }
        if self.closing {
            return Activity::Closing;
        }
        if self.responding {
            return Activity::Responding;
        }
        if self.upload.is_some() {
            // Its deadline runs from the last body byte: an upload takes as long as its
            // bytes keep coming.
            return Activity::Receiving {
                since: self.response_started,
                bytes: 0,
            };
        }
        if !self.request.is_empty() || self.skip != BodySkip::None {
            return Activity::Receiving {
                since: self.request_started.unwrap_or(self.idle_since),
                bytes: self.request.len(),
            };
        }
        Activity::Idle
    }

    /// How many bytes [`Connection::receive`] takes now.
    pub fn receive_window(&self) -> usize {
        if self.skip != BodySkip::None || self.upload.is_some() || self.closing {
            REQUEST_BUFFER_LEN
        } else {
            REQUEST_BUFFER_LEN - self.request.len()
        }
    }

    /// Asks the site's body source for the bytes at `offset` of the body being sent
    /// (an empty `out` only asks whether they are there). No body: ready at once.
    fn read_body(&mut self, site: &SiteSource<'_>, offset: u32, out: &mut [u8]) -> BodyStatus {
        self.read_body_inner(site, offset, out, None)
    }

    /// [`Connection::read_body`] and [`Connection::read_body_with`]: the lookup bookkeeping
    /// once, the copy by the source (`None`) or by `copy`.
    fn read_body_inner(
        &mut self,
        site: &SiteSource<'_>,
        offset: u32,
        out: &mut [u8],
        copy: Option<&mut BodyCopy<'_>>,
    ) -> BodyStatus {
        let Some(body) = self.sending.body else {
            return BodyStatus::Ready(0);
        };
        let (index, source): (SiteIndex<'_>, &dyn BodySource) = match site {
            SiteSource::Ready(image) => (image.index(), image),
            SiteSource::Store(index, source) => (*index, *source),
            SiteSource::Unavailable(_) => return BodyStatus::Failed,
        };
        let segment = body
            .offset
            .checked_add(offset)
            .map(|at| segment_of(at, index.segment_len()));
        let lookup = segment != self.sending.last_segment;
        self.sending.last_segment = segment;
        let request = BodyRequest {
            body,
            offset,
            lookup,
        };
        match copy {
            Some(copy) => source.read_with(request, out, copy),
            None => source.read(request, out),
        }
    }

    /// [`Connection::read_body`], the copy left to `copy` ([`BodySource::read_with`]).
    fn read_body_with(
        &mut self,
        site: &SiteSource<'_>,
        offset: u32,
        out: &mut [u8],
        copy: &mut BodyCopy<'_>,
    ) -> BodyStatus {
        self.read_body_inner(site, offset, out, Some(copy))
    }

    /// The body source's own view of the bytes at `offset` of the body being sent, if it
    /// offers one ([`BodySource::peek`]), counted as [`Connection::read_body`] counts.
    fn peek_body<'s>(&mut self, site: &'s SiteSource<'_>, offset: u32) -> Option<&'s [u8]> {
        let body = self.sending.body?;
        let (index, source): (SiteIndex<'_>, &dyn BodySource) = match site {
            SiteSource::Ready(image) => (image.index(), image),
            SiteSource::Store(index, source) => (*index, *source),
            SiteSource::Unavailable(_) => return None,
        };
        let segment = body
            .offset
            .checked_add(offset)
            .map(|at| segment_of(at, index.segment_len()));
        let lookup = segment != self.sending.last_segment;
        let bytes = source.peek(BodyRequest {
            body,
            offset,
            lookup,
        })?;
        self.sending.last_segment = segment;
        Some(bytes)
    }

    /// Bytes of the generated page (search results) at the next offset.
    fn read_generated(&self, server: &Server, at: u32, out: &mut [u8]) -> BodyStatus {
        let (index, source): (SiteIndex<'_>, &dyn BodySource) =
            match server.site_of(self.sending.generation) {
                SiteSource::Ready(image) => (image.index(), image),
                SiteSource::Store(index, source) => (*index, *source),
                SiteSource::Unavailable(_) => return BodyStatus::Failed,
            };
        match self.search_slot.and_then(|slot| server.searches.get(slot)) {
            Some(search) => search.read(index, source, at, out),
            None => BodyStatus::Failed,
        }
    }

    /// Gives the search slot back (the results page is sent, or will not be).
    fn release_search(&mut self, server: &mut Server) {
        if let Some(slot) = self.search_slot.take() {
            server.searches.release(slot);
        }
    }

    /// Runs the search of the queued response and measures its page; once both are done,
    /// writes its head. Pending while postings or page text are being read from the card.
    fn prepare_generated(&mut self, server: &mut Server, now: Instant) -> BodyStatus {
        let (index, source): (SiteIndex<'_>, &dyn BodySource) = match crate::server::site_of(
            &server.site,
            server.generation,
            &server.retiring,
            self.sending.generation,
        ) {
            SiteSource::Ready(image) => (image.index(), image),
            SiteSource::Store(index, source) => (*index, *source),
            SiteSource::Unavailable(_) => return BodyStatus::Failed,
        };
        let Some(slot) = self.search_slot else {
            return BodyStatus::Failed;
        };
        let Some(state) = server.searches.get_mut(slot) else {
            return BodyStatus::Failed;
        };
        let length = match state.prepare(index, source) {
            Ok(length) => length,
            Err(bramble_site::search::SearchWait::Pending) => return BodyStatus::Pending,
            Err(bramble_site::search::SearchWait::Failed) => return BodyStatus::Failed,
        };
        let path = state.path();
        let custom = index.header_rules().collect(path);
        let state = state.clone_head();
        let mut response = Response::new(
            &mut self.head,
            state.is_head,
            server.unix_time(now),
            state.close,
            BodySkip::None,
            state.version,
        );
        response.custom = Some(&custom);
        response.security_defaults = !index.flags().has(SiteFlags::NO_SECURITY_HEADERS);
        response.secure = state.secure;
        response.hsts_seconds = if state.secure {
            server.config.hsts_seconds
        } else {
            None
        };
        let head = Head {
            content_type: Some(state.content_type()),
            content_length: Some(u64::from(length)),
            cache_control: Some("no-cache"),
            ..Head::new(200)
        };
        let outcome = response.finish(head, None, None);
        let send_body = outcome.status == 200 && !state.is_head;
        if !send_body {
            self.release_search(server);
        }
        self.sending.deferred = false;
        self.sending.body_confirmed = true;
        self.sending.generated = send_body;
        self.sending.body_next = 0;
        self.sending.body_end = if send_body { length } else { 0 };
        if outcome.status != 200 {
            // The head did not fit (a site's very long headers): a 500 went in its place.
            server.counters.uncount_status(self.log_status);
            server.counters.count_status(outcome.status);
            self.log_status = outcome.status;
            self.closing = true;
        }
        self.response_len = self.head.len() as u64 + u64::from(self.sending.body_end);
        BodyStatus::Ready(0)
    }

    /// The body of the queued response cannot be had and nothing of it was sent: answer 500
    /// instead, and close.
    fn fail_before_head(&mut self, server: &mut Server, now: Instant) {
        self.release_search(server);
        server.counters.body_failures += 1;
        server.counters.uncount_status(self.log_status);
        server.counters.count_status(500);
        let date = server.unix_time(now);
        let mut response = Response::new(&mut self.head, false, date, true, BodySkip::None, 1);
        let outcome = response.page(
            500,
            "This file could not be read from the SD card intact, so it was not sent. \
             Asking again reads it again.",
            false,
            None,
        );
        self.sending = Sending {
            body_confirmed: true,
            generation: self.sending.generation,
            ..Sending::default()
        };
        self.log_status = outcome.status;
        self.response_len = self.head.len() as u64;
        self.closing = true;
        self.request.clear();
        self.skip = BodySkip::None;
    }

    /// What the socket should do now: keep it open, close it once flushed, or abort it
    /// because a deadline passed.
    pub fn action(&self, now: Instant) -> ConnectionAction {
        if !self.open {
            return ConnectionAction::CloseWhenFlushed;
        }
        if self.broken {
            return ConnectionAction::Abort;
        }
        if let Some(asked) = self.close_asked.get() {
            // The close was asked for already; a peer that has not let it finish by the close
            // deadline (it never reads, or never acknowledges the FIN) is reset.
            if now >= asked.add_micros(self.limits.close_micros) {
                self.timed_out.set(true);
                return ConnectionAction::Abort;
            }
            return ConnectionAction::CloseWhenFlushed;
        }
        let action = if self.closing && !self.responding {
            ConnectionAction::CloseWhenFlushed
        } else {
            match self.next_deadline() {
                Some(deadline) if now >= deadline => {
                    self.timed_out.set(true);
                    if self.responding
                        || self.request_started.is_some()
                        || self.skip != BodySkip::None
                        || self.upload.is_some()
                    {
                        ConnectionAction::Abort
                    } else {
                        ConnectionAction::CloseWhenFlushed
                    }
                }
                _ => ConnectionAction::KeepOpen,
            }
        };
        if action == ConnectionAction::CloseWhenFlushed {
            self.close_asked.set(Some(now));
        }
        action
    }

    /// The next instant at which [`Connection::action`] may change on its own, so the loop
    /// can sleep until then.
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.open {
            return None;
        }
        if let Some(asked) = self.close_asked.get() {
            // Never a deadline already passed while the close is under way: the loop would
            // spin instead of sleeping until the socket closes.
            return Some(asked.add_micros(self.limits.close_micros));
        }
        if self.closing && !self.responding {
            return None;
        }
        let limits = self.limits;
        let deadline = if self.responding {
            let allowance = match limits.min_send_bytes_per_second {
                0 => 0,
                rate => self.response_len.saturating_mul(1_000_000) / rate,
            };
            self.response_started
                .add_micros(limits.response_micros.saturating_add(allowance))
        } else if self.upload.is_some() {
            self.response_started.add_micros(limits.header_micros)
        } else if let Some(started) = self.request_started {
            started.add_micros(limits.header_micros)
        } else if self.skip != BodySkip::None {
            self.idle_since.add_micros(limits.header_micros)
        } else if self.requests_served == 0 {
            self.opened_at.add_micros(limits.first_byte_micros)
        } else {
            self.idle_since.add_micros(limits.idle_micros)
        };
        Some(deadline)
    }

    /// The socket is gone: release the connection.
    pub fn close(&mut self, server: &mut Server) {
        self.release_search(server);
        if !self.open {
            return;
        }
        if self.upload.take().is_some()
            && let Some(handler) = server.upload.0
        {
            // Cut mid-body: the handler keeps what it has for a resume.
            handler.borrow_mut().detach();
        }
        if self.responding {
            // Log what was sent of an interrupted response.
            self.log_response(server, self.idle_since, true);
            server.response_ended(self.sending.generation);
        }
        if self.timed_out.get() {
            server.counters.timeouts += 1;
        }
        server.counters.open_connections = server.counters.open_connections.saturating_sub(1);
        self.reset();
    }

    /// Back to the state of [`Connection::new`], field by field: the buffers are emptied,
    /// not rewritten (a whole new value would move 10 KiB for every connection).
    fn reset(&mut self) {
        self.open = false;
        self.request.clear();
        self.head.clear();
        self.sending = Sending::default();
        self.responding = false;
        self.closing = false;
        self.broken = false;
        self.skip = BodySkip::None;
        self.upload = None;
        self.chunked_budget = 0;
        self.parse_pending = false;
        self.opened_at = Instant(0);
        self.request_started = None;
        self.response_started = Instant(0);
        self.response_len = 0;
        self.idle_since = Instant(0);
        self.requests_served = 0;
        self.limits = Limits::DEFAULT;
        self.timed_out.set(false);
        self.close_asked.set(None);
        self.log_method.clear();
        self.log_target.clear();
        self.log_status = 0;
        self.log_bytes = 0;
        self.log_started = Instant(0);
    }
}

/// The body segment that holds image offset `at` (a shift for the power-of-two segment
/// lengths the packer uses: the Pi has no divider).
fn segment_of(at: u32, segment_len: u32) -> u32 {
    if segment_len.is_power_of_two() {
        at >> segment_len.trailing_zeros()
    } else {
        at / segment_len.max(1)
    }
}

/// Hands an upload request's head to the server's upload handler: the state for a `GET`,
/// the fields checked and [`crate::upload::SiteUpload::begin`] for a `PUT`. Returns the
/// answer written into `head`, or (the body taken) a placeholder outcome and the body's
/// state.
#[allow(clippy::too_many_arguments)] // the connection's parts, each borrowed separately
fn upload_head(
    route: UploadRoute,
    view: &RequestView<'_>,
    server: &mut Server,
    head: &mut heapless::Vec<u8, RESPONSE_HEAD_LEN>,
    peer: Option<core::net::IpAddr>,
    secure: bool,
    now: Instant,
    mut body: UploadBody,
) -> (Outcome, Option<UploadBody>) {
    let mut respond = |answer: &Answer, request_body: BodySkip, close: bool| {
        let mut response = Response::new(
            head,
            false,
            server.unix_time(now),
            close,
            request_body,
            view.version,
        );
        response.secure = secure;
        response.hsts_seconds = if secure {
            server.config.hsts_seconds
        } else {
            None
        };
        response.json(answer)
    };
    let Some(handler) = server.upload.0 else {
        // dispatch answered these already.
        let answer = Answer::error(403, "publishing-off", format_args!("publishing is off"));
        return (respond(&answer, BodySkip::None, true), None);
    };
    let length = match route {
        UploadRoute::State => {
            let answer = handler.borrow_mut().state(now);
            return (respond(&answer, BodySkip::None, body.close), None);
        }
        UploadRoute::Put { length } => length,
    };
    // A refused head: its body is read and discarded when the engine discards one that
    // long, so that the client reads the answer instead of a reset.
    let discard = length <= server.config.limits.max_body_bytes && !body.close;
    let refused_body = if discard && length > 0 {
        BodySkip::Length(length)
    } else {
        BodySkip::None
    };
    let Ok(left) = u32::try_from(length) else {
        let answer = Answer::error(
            413,
            "too-large",
            format_args!("a site image is less than 4 GiB"),
        );
        return (respond(&answer, refused_body, !discard), None);
    };
    let fields = match parse_upload_fields(
        view.headers
            .iter()
            .map(|header| (header.name, header.value)),
        length,
    ) {
        Ok(fields) => fields,
        Err(error) => return (respond(&error.answer(), refused_body, !discard), None),
    };
    let Ok(next) = u32::try_from(fields.offset) else {
        let answer = Answer::error(
            413,
            "too-large",
            format_args!("a site image is less than 4 GiB"),
        );
        return (respond(&answer, refused_body, !discard), None);
    };
    let upload = UploadHead {
        manifest: &fields.manifest,
        signature: &fields.signature,
        offset: fields.offset,
        length,
        total: fields.total,
        peer,
        now,
    };
    let begun = handler.borrow_mut().begin(&upload);
    match begun {
        Ok(()) => {
            body.next = next;
            body.left = left;
            (
                Outcome {
                    status: 0,
                    close: body.close,
                    body: None,
                    deferred: false,
                    request_body: BodySkip::None,
                    upload: None,
                },
                Some(body),
            )
        }
        Err(answer) => (respond(&answer, refused_body, !discard), None),
    }
}

/// Removes the first `n` bytes of `buffer`.
fn drain_front<const N: usize>(buffer: &mut heapless::Vec<u8, N>, n: usize) {
    let n = n.min(buffer.len());
    buffer.copy_within(n.., 0);
    let remaining = buffer.len() - n;
    buffer.truncate(remaining);
}

impl Connection {
    /// Parses the next buffered request if its header section is complete (or bad) and
    /// queues its response. Returns true if a response was queued.
    fn process(&mut self, server: &mut Server, now: Instant) -> bool {
        if !self.open
            || self.request.is_empty()
            || self.responding
            || self.closing
            || self.upload.is_some()
        {
            return false;
        }
        if self.request.iter().all(|&b| b == b'\r' || b == b'\n') {
            // Blank lines between requests (RFC 9112 §2.2): ignore them, and do not let them
            // start the header clock of a request that has not begun.
            self.request.clear();
            self.request_started = None;
            return false;
        }
        if !self.parse_pending {
            return false;
        }
        self.parse_pending = false;
        let started = self.request_started.unwrap_or(now);
        let date = server.unix_time(now);
        let mut upload_started = None;
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        server.counters.header_parses += 1;
        let result = parsed.parse(&self.request);
        self.head.clear();
        self.client = self.peer;
        let error = |status: u16,
                     log_method: &mut heapless::String<16>,
                     log_target: &mut heapless::String<LOG_TARGET_LEN>,
                     head: &mut heapless::Vec<u8, RESPONSE_HEAD_LEN>| {
            push_log_text(log_method, "-");
            push_log_text(log_target, "-");
            let mut response = Response::new(head, false, date, true, BodySkip::None, 1);
            (response.page(status, "", false, None), 0)
        };
        let (outcome, header_len) = match result {
            Ok(httparse::Status::Complete(header_len)) => {
                let view = RequestView {
                    method: parsed.method.unwrap_or(""),
                    target: parsed.path.unwrap_or(""),
                    version: parsed.version.unwrap_or(1),
                    headers: parsed.headers,
                };
                push_log_text(&mut self.log_method, view.method);
                push_log_text(&mut self.log_target, view.target);
                self.client = crate::forwarded::client_address(
                    self.peer,
                    &server.trusted_proxies,
                    view.all("forwarded"),
                    view.all("x-forwarded-for"),
                );
                let mut search = SearchState::new();
                let outcome = dispatch(
                    &view,
                    server,
                    date,
                    self.requests_served,
                    self.secure,
                    &mut self.head,
                    &mut search,
                    self.peer,
                );
                let mut outcome = match outcome.upload {
                    Some(route) => {
                        let (outcome, body) = upload_head(
                            route,
                            &view,
                            server,
                            &mut self.head,
                            self.peer,
                            self.secure,
                            now,
                            UploadBody {
                                next: 0,
                                left: 0,
                                version: view.version,
                                close: outcome.close,
                            },
                        );
                        if let Some(body) = body {
                            upload_started = Some((body, header_len));
                        }
                        outcome
                    }
                    None => outcome,
                };
                if view.method == "GET" {
                    let header = |name| view.all(name).next();
                    let (path, _) = crate::path::split_query(origin_form(view.target));
                    let request = crate::visitors::VisitRequest {
                        status: outcome.status,
                        path,
                        peer: self.client,
                        user_agent: header("user-agent"),
                        referer: header("referer").and_then(|v| core::str::from_utf8(v).ok()),
                        own_host: header("host")
                            .and_then(|v| core::str::from_utf8(v).ok())
                            .unwrap_or(""),
                    };
                    server.count_visit(now, request);
                }
                if outcome.deferred {
                    let stale = server.config.limits.response_micros;
                    if let Some(slot) = self.search_slot.take() {
                        server.searches.release(slot);
                    }
                    match server.searches.claim(search, now, stale) {
                        Some(slot) => self.search_slot = Some(slot),
                        None => {
                            let mut response = Response::new(
                                &mut self.head,
                                false,
                                date,
                                outcome.close,
                                outcome.request_body,
                                view.version,
                            );
                            outcome = response.page(
                                503,
                                "Too many searches at once: try again in a moment.",
                                false,
                                None,
                            );
                        }
                    }
                }
                (outcome, header_len)
            }
            Ok(httparse::Status::Partial) => {
                let has_line = self.request.contains(&b'\n');
                if !has_line && self.request.len() > LONGEST_REQUEST_LINE {
                    error(
                        414,
                        &mut self.log_method,
                        &mut self.log_target,
                        &mut self.head,
                    )
                } else if self.request.len() >= REQUEST_BUFFER_LEN {
                    let status = if has_line { 431 } else { 414 };
                    error(
                        status,
                        &mut self.log_method,
                        &mut self.log_target,
                        &mut self.head,
                    )
                } else {
                    return false;
                }
            }
            Err(httparse::Error::TooManyHeaders) => error(
                431,
                &mut self.log_method,
                &mut self.log_target,
                &mut self.head,
            ),
            Err(httparse::Error::Version) => match classify_version_error(&self.request) {
                VersionError::HigherMinor(at) => {
                    if let Some(minor) = self.request.get_mut(at) {
                        *minor = b'1';
                    }
                    self.parse_pending = true;
                    return self.process(server, now);
                }
                VersionError::Status(status) => error(
                    status,
                    &mut self.log_method,
                    &mut self.log_target,
                    &mut self.head,
                ),
            },
            Err(_) => error(
                400,
                &mut self.log_method,
                &mut self.log_target,
                &mut self.head,
            ),
        };

        if let Some((body, header_len)) = upload_started {
            // The body goes to the upload handler; the answer comes once it is in.
            drain_front(&mut self.request, header_len);
            self.request_started = None;
            self.log_started = started;
            self.response_started = now;
            self.upload = Some(body);
            let buffered = core::mem::take(&mut self.request);
            let used = self.upload_bytes(server, &buffered, now);
            if self.request.is_empty() {
                self.request = buffered;
                drain_front(&mut self.request, used);
            }
            return true;
        }
        self.requests_served = self.requests_served.saturating_add(1);
        server.counters.requests += 1;
        server.counters.count_status(outcome.status);
        if outcome.close {
            self.closing = true;
            self.request.clear();
            self.skip = BodySkip::None;
        } else {
            drain_front(&mut self.request, header_len);
            match outcome.request_body {
                BodySkip::None => self.skip = BodySkip::None,
                BodySkip::Length(len) => {
                    let buffered = usize::try_from(len)
                        .unwrap_or(usize::MAX)
                        .min(self.request.len());
                    drain_front(&mut self.request, buffered);
                    self.skip = match len - buffered as u64 {
                        0 => BodySkip::None,
                        left => BodySkip::Length(left),
                    };
                }
                BodySkip::Chunked(state) => {
                    self.chunked_budget = server.config.limits.max_body_bytes;
                    match skip_chunked(state, &self.request, &mut self.chunked_budget) {
                        ChunkedProgress::More(state) => {
                            self.request.clear();
                            self.skip = BodySkip::Chunked(state);
                        }
                        ChunkedProgress::Done(n) => {
                            drain_front(&mut self.request, n);
                            self.skip = BodySkip::None;
                        }
                        ChunkedProgress::Invalid => {
                            self.closing = true;
                            self.request.clear();
                            self.skip = BodySkip::None;
                        }
                    }
                }
            }
        }
        self.start_response(server, &outcome, now, started);
        true
    }

    /// Queues the response `outcome` wrote into the head buffer (its body from the site, if
    /// any); `started` is when its request began, for the access log.
    fn start_response(
        &mut self,
        server: &mut Server,
        outcome: &Outcome,
        now: Instant,
        started: Instant,
    ) {
        let (body, body_next, body_end) = match outcome.body {
            Some((body, first, end)) if first < end => (Some(body), first, end),
            _ => (None, 0, 0),
        };
        self.sending = Sending {
            head_sent: 0,
            body,
            body_next,
            body_end,
            body_confirmed: body.is_none() && !outcome.deferred,
            last_segment: None,
            generated: false,
            deferred: outcome.deferred,
            generation: server.response_started(),
        };
        self.responding = true;
        self.response_started = now;
        self.response_len = self.head.len() as u64 + u64::from(body_end - body_next);
        self.request_started = if self.request.is_empty() {
            None
        } else {
            Some(now)
        };
        self.log_status = outcome.status;
        self.log_bytes = 0;
        self.log_started = started;
    }

    /// Hands `data`, the next bytes of the upload's body, to the upload handler (as many as
    /// the body still has); returns how many were taken. The last byte (or a refusal) ends
    /// the upload and queues its answer.
    fn upload_bytes(&mut self, server: &mut Server, data: &[u8], now: Instant) -> usize {
        let Some(mut body) = self.upload else {
            return 0;
        };
        let Some(handler) = server.upload.0 else {
            self.upload = None;
            let answer = Answer::error(
                503,
                "publishing-off",
                format_args!("publishing stopped during the upload"),
            );
            self.answer_upload(server, &answer, body, body.left, now);
            return 0;
        };
        let n = usize::try_from(body.left)
            .unwrap_or(usize::MAX)
            .min(data.len());
        if n > 0 {
            let written = handler
                .borrow_mut()
                .write(u64::from(body.next), &data[..n], now);
            // n <= left, a u32.
            body.next = body.next.saturating_add(n as u32);
            body.left -= n as u32;
            self.response_started = now;
            if let Err(answer) = written {
                self.upload = None;
                self.answer_upload(server, &answer, body, body.left, now);
                return n;
            }
        }
        if body.left > 0 {
            self.upload = Some(body);
            return n;
        }
        self.upload = None;
        let answer = handler.borrow_mut().finish(now);
        self.answer_upload(server, &answer, body, 0, now);
        n
    }

    /// Queues an upload's answer; `left` bytes of its body are still to come (discarded, or
    /// the connection closes when they are more than a body the engine discards).
    fn answer_upload(
        &mut self,
        server: &mut Server,
        answer: &Answer,
        body: UploadBody,
        left: u32,
        now: Instant,
    ) {
        let close = body.close || u64::from(left) > server.config.limits.max_body_bytes;
        let skip = if left > 0 && !close {
            BodySkip::Length(u64::from(left))
        } else {
            BodySkip::None
        };
        let mut response = Response::new(
            &mut self.head,
            false,
            server.unix_time(now),
            close,
            skip,
            body.version,
        );
        response.secure = self.secure;
        response.hsts_seconds = if self.secure {
            server.config.hsts_seconds
        } else {
            None
        };
        let outcome = response.json(answer);
        self.requests_served = self.requests_served.saturating_add(1);
        server.counters.requests += 1;
        server.counters.count_status(outcome.status);
        if outcome.close {
            self.closing = true;
            self.request.clear();
            self.skip = BodySkip::None;
        } else {
            self.skip = outcome.request_body;
        }
        self.start_response(server, &outcome, now, self.log_started);
    }

    /// The current response has been handed out completely.
    fn finish_response(&mut self, server: &mut Server, now: Instant) {
        self.release_search(server);
        self.log_response(server, now, false);
        server.response_ended(self.sending.generation);
        self.responding = false;
        self.head.clear();
        self.sending = Sending::default();
        self.idle_since = now;
        if self.request_started.is_some() || !self.request.is_empty() {
            // A pipelined request waited behind this response: its header clock starts now.
            self.request_started = Some(now);
            self.parse_pending = true;
        }
        if self.closing {
            self.request.clear();
        }
    }

    /// Writes the access-log line of the current response, if enabled.
    fn log_response(&self, server: &Server, now: Instant, interrupted: bool) {
        if !server.config.access_log {
            return;
        }
        let micros = now.micros_since(self.log_started);
        // An empty address field when the caller did not say (the engine's own tests).
        struct Peer(Option<core::net::IpAddr>);
        impl core::fmt::Display for Peer {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.0 {
                    Some(address) => write!(f, " {address}"),
                    None => Ok(()),
                }
            }
        }
        log::info!(
            target: "bramble_http::access",
            "{} {} {} {} {}.{:03}ms{}{}",
            self.log_method,
            self.log_target,
            self.log_status,
            self.log_bytes,
            micros / 1000,
            micros % 1000,
            if interrupted { " interrupted" } else { "" },
            Peer(self.client)
        );
    }
}
