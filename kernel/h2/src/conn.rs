//! The sans-IO HTTP/2 connection (RFC 9113): frames in, requests out as HTTP/1.1 messages,
//! response frames and control frames back.
//!
//! [`H2::receive`] takes every byte it is offered (a frame split across TLS records is
//! gathered here, not in the TLS layer), checks each frame against the stream states and the
//! flow-control windows, decodes header blocks with HPACK, and turns each request into an
//! HTTP/1.1 request head in a bounded queue ([`H2::next_request`]). The caller
//! ([`crate::serve`]) answers them one by one and writes the response frames through
//! [`H2::write_headers`] and [`H2::write_data`]; [`H2::write_control`] hands out SETTINGS,
//! acknowledgements, WINDOW_UPDATE, RST_STREAM and GOAWAY frames first.
//!
//! # Bounds and defences
//!
//! Everything is fixed-size; see the constants. Each known attack meets a bound:
//!
//! - rapid reset (CVE-2023-44487): streams the client resets before their response is done
//!   spend a budget of [`RESET_BUDGET`] that refills by one for each response completed; an
//!   empty budget ends the connection with ENHANCE_YOUR_CALM. A reset stream costs the
//!   server a queue removal, never a response.
//! - CONTINUATION floods: a header block may take [`HEADER_BLOCK_LEN`] bytes and
//!   [`MAX_CONTINUATIONS`] CONTINUATION frames (empty ones count); beyond, ENHANCE_YOUR_CALM.
//! - HPACK bombs: the decoded header list stops being copied at [`MAX_HEADER_LIST`] bytes
//!   (the stream gets a 431), and the dynamic table is capped at 4096 bytes.
//! - SETTINGS and PING floods: their acknowledgements wait in a [`CONTROL_LEN`]-byte queue;
//!   a client that sends them faster than it reads the answers fills it and the connection
//!   ends with ENHANCE_YOUR_CALM, instead of the queue growing.
//! - zero-window stalls: the serving side cancels a stream (or ends the connection) whose
//!   window stays shut for [`STALL_MICROS`].
//! - stream dependency loops: priority is not kept at all (RFC 9113 §5.3.2 deprecates it), so
//!   a loop costs nothing; a stream that depends on itself gets PROTOCOL_ERROR (§5.3.1).
//! - concurrent streams: at most [`MAX_STREAMS`] (SETTINGS_MAX_CONCURRENT_STREAMS); more get
//!   REFUSED_STREAM.

use crate::frame::{
    self, DEFAULT_MAX_FRAME, DEFAULT_WINDOW, ErrorCode, FrameHeader, HEADER_LEN, MAX_WINDOW,
    PREFACE, flag, kind, setting,
};
use crate::hpack::{Decoder, Encoder, Sink};
use bramble_hal::Instant;

/// SETTINGS_MAX_CONCURRENT_STREAMS, and the size of the stream table.
pub const MAX_STREAMS: usize = 16;
/// SETTINGS_MAX_HEADER_LIST_SIZE: the decoded header list a request may have (431 beyond).
pub const MAX_HEADER_LIST: usize = 8192;
/// The compressed header block gathered from HEADERS and CONTINUATION frames, at most.
pub const HEADER_BLOCK_LEN: usize = 8192;
/// CONTINUATION frames one header block may take.
pub const MAX_CONTINUATIONS: u32 = 16;
/// Bytes of queued HTTP/1.1 request heads (all streams waiting for their turn).
pub const QUEUE_LEN: usize = 8192;
/// Bytes of control frames waiting to be sent.
pub const CONTROL_LEN: usize = 1024;
/// Streams the client may reset before their response ends, beyond the responses it lets
/// complete (see the module notes).
pub const RESET_BUDGET: u32 = 100;
/// How long a response may wait on a shut flow-control window before it is given up.
pub const STALL_MICROS: u64 = 10_000_000;
/// The receive window the server keeps open for request bodies (which it discards).
const RECEIVE_WINDOW: u32 = DEFAULT_WINDOW;
/// Bytes of a parked connection's state before its HPACK table (see [`H2::park_into`]):
/// a flag, the last stream id, three windows and the reset budget.
pub const PARKED_FIXED_LEN: usize = 1 + 4 + 3 * 4 + 4;
/// Room for the fixed part of a control frame's payload.
const SMALL_LEN: usize = 8;
/// Queue entry header: stream id (4), text length (2), flags (1).
const ENTRY_HEAD: usize = 7;
/// Queue entry flag: the request is a HEAD (no body in the response).
const ENTRY_HEAD_METHOD: u8 = 1;
/// Queue entry flag: the header list was too large: answer 431.
const ENTRY_TOO_LARGE: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamState {
    /// The client may still send (a request body).
    Open,
    /// The client's side is done (END_STREAM seen).
    HalfClosedRemote,
}

#[derive(Clone, Copy, Debug)]
struct Stream {
    /// 0: the slot is free.
    id: u32,
    state: StreamState,
    /// What the server may still send on it.
    send_window: i64,
    /// What the client may still send on it.
    receive_window: i64,
}

const FREE: Stream = Stream {
    id: 0,
    state: StreamState::Open,
    send_window: 0,
    receive_window: 0,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rx {
    /// Reading the client preface; bytes of it seen.
    Preface(usize),
    /// Reading a frame header; bytes of it seen.
    Header(usize),
    /// Reading a frame's payload; bytes of it seen.
    Payload(FrameHeader, u32),
    /// A connection error was sent: everything else is dropped.
    Dead,
}

/// Counters, for tests and the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct H2Counters {
    /// Requests queued (turned into HTTP/1.1 heads).
    pub requests: u64,
    /// Streams refused (over the stream limit or the queue).
    pub refused: u64,
    /// Streams the client reset.
    pub client_resets: u64,
    /// Streams the server reset.
    pub server_resets: u64,
}

/// A request taken from the queue: its stream and HTTP/1.1 head.
#[derive(Debug)]
pub struct Request<'q> {
    /// The stream it came on.
    pub stream: u32,
    /// `METHOD target HTTP/1.1\r\n...\r\n\r\n`.
    pub head: &'q [u8],
    /// A HEAD request: the response has no body whatever its Content-Length says.
    pub head_method: bool,
    /// The header list was too large: answer 431 without asking the engine.
    pub too_large: bool,
}

/// One HTTP/2 connection's protocol state. About 30 KiB (see [`crate`] for the figures):
/// box it when a connection negotiates h2.
pub struct H2 {
    rx: Rx,
    header: [u8; HEADER_LEN],
    small: [u8; SMALL_LEN],
    /// The stream whose header block is being gathered (CONTINUATION expected when set and
    /// `block_open`).
    block_stream: u32,
    block_open: bool,
    block_end_stream: bool,
    block_continuations: u32,
    /// The block's priority named its own stream.
    block_self_dependent: bool,
    block: [u8; HEADER_BLOCK_LEN],
    block_len: usize,
    /// Where the current HEADERS frame's payload started in `block`.
    frame_start: usize,
    decoder: Decoder,
    streams: [Stream; MAX_STREAMS],
    /// Highest stream id the client opened.
    last_stream: u32,
    send_window: i64,
    receive_window: i64,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE.
    initial_send_window: i64,
    queue: [u8; QUEUE_LEN],
    queue_len: usize,
    control: [u8; CONTROL_LEN],
    control_len: usize,
    /// A GOAWAY is queued (or sent): no new streams; close once flushed.
    goaway: bool,
    /// The client sent GOAWAY.
    peer_goaway: bool,
    resets_left: u32,
    counters: H2Counters,
}

/// Why a connection ends.
type ConnError = ErrorCode;

impl Default for H2 {
    fn default() -> Self {
        Self::new()
    }
}

impl H2 {
    /// A connection whose server SETTINGS are queued; the client's preface is awaited.
    pub fn new() -> Self {
        let mut h2 = Self {
            rx: Rx::Preface(0),
            header: [0; HEADER_LEN],
            small: [0; SMALL_LEN],
            block_stream: 0,
            block_open: false,
            block_end_stream: false,
            block_continuations: 0,
            block_self_dependent: false,
            block: [0; HEADER_BLOCK_LEN],
            block_len: 0,
            frame_start: 0,
            decoder: Decoder::new(),
            streams: [FREE; MAX_STREAMS],
            last_stream: 0,
            send_window: i64::from(DEFAULT_WINDOW),
            receive_window: i64::from(RECEIVE_WINDOW),
            initial_send_window: i64::from(DEFAULT_WINDOW),
            queue: [0; QUEUE_LEN],
            queue_len: 0,
            control: [0; CONTROL_LEN],
            control_len: 0,
            goaway: false,
            peer_goaway: false,
            resets_left: RESET_BUDGET,
            counters: H2Counters::default(),
        };
        h2.queue_settings();
        h2
    }

    fn queue_settings(&mut self) {
        let mut payload = [0u8; 18];
        let entries: [(u16, u32); 3] = [
            (setting::MAX_CONCURRENT_STREAMS, MAX_STREAMS as u32),
            (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST as u32),
            (setting::ENABLE_PUSH, 0),
        ];
        for (chunk, (id, value)) in payload.chunks_exact_mut(6).zip(entries) {
            chunk[..2].copy_from_slice(&id.to_be_bytes());
            chunk[2..].copy_from_slice(&value.to_be_bytes());
        }
        self.queue_control(kind::SETTINGS, 0, 0, &payload);
    }

    /// The counters.
    pub fn counters(&self) -> H2Counters {
        self.counters
    }

    /// Whether the connection is over: a GOAWAY was queued (by either error or idleness) or
    /// the client sent one and nothing is left to answer.
    pub fn is_finished(&self) -> bool {
        self.goaway || (self.peer_goaway && self.queue_len == 0 && self.open_streams() == 0)
    }

    /// Whether control frames wait to be sent.
    pub fn wants_transmit(&self) -> bool {
        self.control_len > 0
    }

    /// Streams in the table.
    pub fn open_streams(&self) -> usize {
        self.streams.iter().filter(|s| s.id != 0).count()
    }

    /// Whether the connection is at rest between requests, so that what it needs to go on
    /// fits in [`H2::park_into`]'s few bytes: no frame half read, no header block open, no
    /// stream open, no request queued, no control frame waiting, no GOAWAY either way.
    pub fn can_park(&self) -> bool {
        matches!(self.rx, Rx::Header(0) | Rx::Preface(0))
            && !self.block_open
            && self.open_streams() == 0
            && self.queue_len == 0
            && self.control_len == 0
            && !self.goaway
            && !self.peer_goaway
    }

    /// Bytes [`H2::park_into`] writes.
    pub fn parked_len(&self) -> usize {
        PARKED_FIXED_LEN + self.decoder.table().parked_len()
    }

    /// Appends what a parked connection keeps to `out` ([`H2::parked_len`] bytes, reserved
    /// by the caller): whether the preface was read, the last stream id, the connection's
    /// windows both ways, the client's SETTINGS_INITIAL_WINDOW_SIZE (the only setting of the
    /// client's the server acts on), the rapid-reset budget left, and the HPACK decoder's
    /// dynamic table (what the client's encoder may refer to). Only when
    /// [`H2::can_park`]; the counters are not kept.
    pub fn park_into(&self, out: &mut alloc::vec::Vec<u8>) {
        out.push(u8::from(self.rx != Rx::Preface(0)));
        out.extend_from_slice(&self.last_stream.to_be_bytes());
        // Each window lies within 0..=MAX_WINDOW here: a connection window only grows by
        // checked WINDOW_UPDATEs and shrinks by what the window allowed; the initial window
        // is a checked setting.
        for window in [
            self.send_window,
            self.receive_window,
            self.initial_send_window,
        ] {
            out.extend_from_slice(&(window.clamp(0, i64::from(MAX_WINDOW)) as u32).to_be_bytes());
        }
        out.extend_from_slice(&self.resets_left.to_be_bytes());
        self.decoder.table().park_into(out);
    }

    /// A connection carried on from what [`H2::park_into`] wrote (its SETTINGS were sent
    /// long ago: nothing is queued); `None` if `parked` does not read back whole.
    pub fn unpark(&mut self, parked: &[u8]) -> Option<()> {
        let fixed = parked.get(..PARKED_FIXED_LEN)?;
        let word = |at: usize| frame::read_u32(fixed, at);
        let window = |at: usize| -> Option<i64> {
            let value = word(at)?;
            (value <= MAX_WINDOW).then_some(i64::from(value))
        };
        self.rx = if fixed[0] != 0 {
            Rx::Header(0)
        } else {
            Rx::Preface(0)
        };
        self.last_stream = word(1)?;
        self.send_window = window(5)?;
        self.receive_window = window(9)?;
        self.initial_send_window = window(13)?;
        self.resets_left = word(17)?.min(RESET_BUDGET);
        self.control_len = 0;
        self.queue_len = 0;
        let table = &parked[PARKED_FIXED_LEN..];
        let read = self.decoder.table_mut().restore(table)?;
        (read == table.len()).then_some(())
    }

    /// Queues a control frame; `false` if the queue is full.
    fn queue_control(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> bool {
        let header = FrameHeader {
            len: payload.len() as u32,
            kind,
            flags,
            stream,
        };
        match self
            .control
            .get_mut(self.control_len..)
            .and_then(|free| frame::write_frame(free, header, payload))
        {
            Some(n) => {
                self.control_len += n;
                true
            }
            None => false,
        }
    }

    /// Ends the connection: GOAWAY with `code` (room for it is always kept) and no more input.
    pub fn fail(&mut self, code: ConnError) {
        if self.goaway && self.rx == Rx::Dead {
            return;
        }
        log::debug!("h2: connection error {code:?}");
        let mut payload = [0u8; 8];
        payload[..4].copy_from_slice(&self.last_stream.to_be_bytes());
        payload[4..].copy_from_slice(&(code as u32).to_be_bytes());
        // Replies nobody will act on make way for the GOAWAY.
        if self.control_len + HEADER_LEN + 8 > CONTROL_LEN {
            self.control_len = 0;
        }
        self.queue_control(kind::GOAWAY, 0, 0, &payload);
        self.goaway = true;
        self.rx = Rx::Dead;
        self.queue_len = 0;
    }

    /// Says goodbye politely (idle, or shutting down): streams already open are finished.
    pub fn shut_down(&mut self) {
        if self.goaway {
            return;
        }
        let mut payload = [0u8; 8];
        payload[..4].copy_from_slice(&self.last_stream.to_be_bytes());
        if self.control_len + HEADER_LEN + 8 > CONTROL_LEN {
            self.control_len = 0;
        }
        self.queue_control(kind::GOAWAY, 0, 0, &payload);
        self.goaway = true;
    }

    /// Resets `stream` with `code` (the server's side). `false`: the control queue is full,
    /// which only a flood does (the connection is then failed).
    pub fn reset(&mut self, stream: u32, code: ErrorCode) -> bool {
        self.remove_stream(stream);
        self.remove_queued(stream);
        self.counters.server_resets += 1;
        if !self.queue_control(kind::RST_STREAM, 0, stream, &(code as u32).to_be_bytes()) {
            self.fail(ErrorCode::EnhanceYourCalm);
            return false;
        }
        true
    }

    fn stream_index(&self, id: u32) -> Option<usize> {
        if id == 0 {
            return None;
        }
        self.streams.iter().position(|s| s.id == id)
    }

    fn remove_stream(&mut self, id: u32) {
        if let Some(i) = self.stream_index(id) {
            self.streams[i] = FREE;
        }
    }

    /// Takes plaintext from the client; returns how many bytes were taken (all of them,
    /// unless a connection error ended reading, when the rest is dropped too).
    pub fn receive(&mut self, data: &[u8], now: Instant) -> usize {
        let mut at = 0usize;
        while at < data.len() {
            let rest = &data[at..];
            match self.rx {
                Rx::Dead => return data.len(),
                Rx::Preface(seen) => {
                    let n = rest.len().min(PREFACE.len() - seen);
                    if rest[..n] != PREFACE[seen..seen + n] {
                        self.fail(ErrorCode::ProtocolError);
                        return data.len();
                    }
                    at += n;
                    self.rx = if seen + n == PREFACE.len() {
                        Rx::Header(0)
                    } else {
                        Rx::Preface(seen + n)
                    };
                }
                Rx::Header(seen) => {
                    let n = rest.len().min(HEADER_LEN - seen);
                    self.header[seen..seen + n].copy_from_slice(&rest[..n]);
                    at += n;
                    if seen + n < HEADER_LEN {
                        self.rx = Rx::Header(seen + n);
                        continue;
                    }
                    let header = FrameHeader::parse(&self.header);
                    if let Err(code) = self.frame_start(header) {
                        self.fail(code);
                        return data.len();
                    }
                    self.rx = Rx::Payload(header, 0);
                    if header.len == 0
                        && let Err(code) = self.frame_end(header, now)
                    {
                        self.fail(code);
                        return data.len();
                    }
                }
                Rx::Payload(header, seen) => {
                    let left = (header.len - seen) as usize;
                    let n = rest.len().min(left);
                    self.payload(header, seen as usize, &rest[..n]);
                    if self.rx == Rx::Dead {
                        return data.len();
                    }
                    at += n;
                    let seen = seen + n as u32;
                    self.rx = Rx::Payload(header, seen);
                    if seen == header.len
                        && let Err(code) = self.frame_end(header, now)
                    {
                        self.fail(code);
                        return data.len();
                    }
                }
            }
            if let Rx::Payload(header, seen) = self.rx
                && seen == header.len
            {
                self.rx = Rx::Header(0);
            }
        }
        at
    }

    /// Checks a frame header before its payload.
    fn frame_start(&mut self, header: FrameHeader) -> Result<(), ConnError> {
        if header.len > DEFAULT_MAX_FRAME {
            return Err(ErrorCode::FrameSizeError);
        }
        if self.block_open
            && (header.kind != kind::CONTINUATION || header.stream != self.block_stream)
        {
            return Err(ErrorCode::ProtocolError);
        }
        match header.kind {
            kind::DATA => {
                if header.stream == 0 || header.stream > self.last_stream {
                    return Err(ErrorCode::ProtocolError);
                }
                let len = i64::from(header.len);
                if len > self.receive_window {
                    return Err(ErrorCode::FlowControlError);
                }
                self.receive_window -= len;
            }
            kind::HEADERS => {
                if header.stream == 0 || header.stream.is_multiple_of(2) {
                    return Err(ErrorCode::ProtocolError);
                }
                if header.stream <= self.last_stream && self.stream_index(header.stream).is_none() {
                    return Err(ErrorCode::StreamClosed);
                }
                self.block_stream = header.stream;
                self.block_open = true;
                self.block_end_stream = header.has(flag::END_STREAM);
                self.block_continuations = 0;
                self.block_self_dependent = false;
                self.block_len = 0;
                self.frame_start = 0;
                if header.len as usize > HEADER_BLOCK_LEN {
                    return Err(ErrorCode::EnhanceYourCalm);
                }
            }
            kind::CONTINUATION => {
                if !self.block_open {
                    return Err(ErrorCode::ProtocolError);
                }
                self.block_continuations += 1;
                if self.block_continuations > MAX_CONTINUATIONS
                    || self.block_len + header.len as usize > HEADER_BLOCK_LEN
                {
                    return Err(ErrorCode::EnhanceYourCalm);
                }
                self.frame_start = self.block_len;
            }
            kind::PRIORITY => {
                if header.stream == 0 {
                    return Err(ErrorCode::ProtocolError);
                }
            }
            kind::RST_STREAM => {
                if header.stream == 0 || header.stream > self.last_stream {
                    return Err(ErrorCode::ProtocolError);
                }
                if header.len != 4 {
                    return Err(ErrorCode::FrameSizeError);
                }
            }
            kind::SETTINGS => {
                if header.stream != 0 {
                    return Err(ErrorCode::ProtocolError);
                }
                if !header.len.is_multiple_of(6) || (header.has(flag::ACK) && header.len != 0) {
                    return Err(ErrorCode::FrameSizeError);
                }
            }
            kind::PUSH_PROMISE => return Err(ErrorCode::ProtocolError),
            kind::PING => {
                if header.stream != 0 {
                    return Err(ErrorCode::ProtocolError);
                }
                if header.len != 8 {
                    return Err(ErrorCode::FrameSizeError);
                }
            }
            kind::GOAWAY => {
                if header.stream != 0 {
                    return Err(ErrorCode::ProtocolError);
                }
                if header.len < 8 {
                    return Err(ErrorCode::FrameSizeError);
                }
            }
            kind::WINDOW_UPDATE => {
                if header.len != 4 {
                    return Err(ErrorCode::FrameSizeError);
                }
                if header.stream > self.last_stream {
                    return Err(ErrorCode::ProtocolError);
                }
            }
            // Unknown frame types are ignored (RFC 9113 §4.1).
            _ => {}
        }
        Ok(())
    }

    /// Payload bytes `bytes` at offset `seen` of the frame.
    fn payload(&mut self, header: FrameHeader, seen: usize, bytes: &[u8]) {
        match header.kind {
            kind::HEADERS | kind::CONTINUATION => {
                // frame_start checked the frame fits.
                if let Some(dest) = self
                    .block
                    .get_mut(self.block_len..self.block_len + bytes.len())
                {
                    dest.copy_from_slice(bytes);
                    self.block_len += bytes.len();
                }
            }
            kind::SETTINGS => {
                // Entries are applied as each completes (6 bytes, gathered in `small`).
                for (i, &byte) in bytes.iter().enumerate() {
                    let offset = (seen + i) % 6;
                    self.small[offset] = byte;
                    if offset == 5 {
                        let entry = self.small;
                        if let Some((id, value)) = frame::read_setting(&entry) {
                            self.apply_setting(id, value);
                        }
                    }
                }
            }
            kind::PING | kind::GOAWAY | kind::RST_STREAM | kind::WINDOW_UPDATE | kind::PRIORITY => {
                for (i, &byte) in bytes.iter().enumerate() {
                    if let Some(slot) = self.small.get_mut(seen + i) {
                        *slot = byte;
                    }
                }
            }
            // DATA and unknown frames: dropped as they come.
            _ => {}
        }
    }

    fn apply_setting(&mut self, id: u16, value: u32) {
        let result = match id {
            setting::ENABLE_PUSH if value > 1 => Err(ErrorCode::ProtocolError),
            setting::INITIAL_WINDOW_SIZE => {
                if value > MAX_WINDOW {
                    Err(ErrorCode::FlowControlError)
                } else {
                    let delta = i64::from(value) - self.initial_send_window;
                    self.initial_send_window = i64::from(value);
                    let mut result = Ok(());
                    for stream in self.streams.iter_mut().filter(|s| s.id != 0) {
                        stream.send_window += delta;
                        if stream.send_window > i64::from(MAX_WINDOW) {
                            result = Err(ErrorCode::FlowControlError);
                        }
                    }
                    result
                }
            }
            setting::MAX_FRAME_SIZE if !(DEFAULT_MAX_FRAME..=0x00ff_ffff).contains(&value) => {
                Err(ErrorCode::ProtocolError)
            }
            // The server sends frames of at most 16 KiB, uses no dynamic table for responses
            // and never pushes: the rest needs nothing.
            _ => Ok(()),
        };
        if let Err(code) = result {
            self.fail(code);
        }
    }

    /// A whole frame is in.
    fn frame_end(&mut self, header: FrameHeader, now: Instant) -> Result<(), ConnError> {
        if self.rx == Rx::Dead {
            return Ok(());
        }
        match header.kind {
            kind::DATA => self.data_end(header),
            kind::HEADERS => {
                let payload = self.block.get(..self.block_len).unwrap_or_default();
                let (range, dependency) =
                    frame::headers_fragment(header, payload).ok_or(ErrorCode::ProtocolError)?;
                self.block_self_dependent = dependency == Some(header.stream);
                self.block.copy_within(range.clone(), 0);
                self.block_len = range.len();
                if header.has(flag::END_HEADERS) {
                    self.block_end(now)?;
                }
                Ok(())
            }
            kind::CONTINUATION => {
                if header.has(flag::END_HEADERS) {
                    self.block_end(now)?;
                }
                Ok(())
            }
            kind::PRIORITY => {
                if header.len != 5 {
                    self.reset(header.stream, ErrorCode::FrameSizeError);
                } else if frame::read_dependency(&self.small) == Some(header.stream) {
                    self.reset(header.stream, ErrorCode::ProtocolError);
                }
                Ok(())
            }
            kind::RST_STREAM => {
                self.client_reset(header.stream);
                Ok(())
            }
            kind::SETTINGS => {
                if !header.has(flag::ACK)
                    && self.rx != Rx::Dead
                    && !self.queue_control(kind::SETTINGS, flag::ACK, 0, &[])
                {
                    return Err(ErrorCode::EnhanceYourCalm);
                }
                Ok(())
            }
            kind::PING => {
                if !header.has(flag::ACK) {
                    let payload = self.small;
                    if !self.queue_control(kind::PING, flag::ACK, 0, &payload) {
                        return Err(ErrorCode::EnhanceYourCalm);
                    }
                }
                Ok(())
            }
            kind::GOAWAY => {
                self.peer_goaway = true;
                Ok(())
            }
            kind::WINDOW_UPDATE => self.window_update(header.stream),
            _ => Ok(()),
        }
    }

    fn data_end(&mut self, header: FrameHeader) -> Result<(), ConnError> {
        let len = i64::from(header.len);
        // Request bodies are dropped: the connection's window reopens once half spent.
        if self.receive_window < i64::from(RECEIVE_WINDOW) / 2 {
            let increment = i64::from(RECEIVE_WINDOW) - self.receive_window;
            if !self.queue_control(kind::WINDOW_UPDATE, 0, 0, &(increment as u32).to_be_bytes()) {
                return Err(ErrorCode::EnhanceYourCalm);
            }
            self.receive_window = i64::from(RECEIVE_WINDOW);
        }
        let Some(i) = self.stream_index(header.stream) else {
            // A stream already closed: the frame counted against the connection only.
            if !self.queue_control(
                kind::RST_STREAM,
                0,
                header.stream,
                &(ErrorCode::StreamClosed as u32).to_be_bytes(),
            ) {
                return Err(ErrorCode::EnhanceYourCalm);
            }
            return Ok(());
        };
        let stream = &mut self.streams[i];
        if stream.state != StreamState::Open {
            self.reset(header.stream, ErrorCode::StreamClosed);
            return Ok(());
        }
        if len > stream.receive_window {
            self.reset(header.stream, ErrorCode::FlowControlError);
            return Ok(());
        }
        stream.receive_window -= len;
        if header.has(flag::END_STREAM) {
            stream.state = StreamState::HalfClosedRemote;
        } else if stream.receive_window < i64::from(RECEIVE_WINDOW) / 2 {
            let increment = i64::from(RECEIVE_WINDOW) - stream.receive_window;
            stream.receive_window = i64::from(RECEIVE_WINDOW);
            if !self.queue_control(
                kind::WINDOW_UPDATE,
                0,
                header.stream,
                &(increment as u32).to_be_bytes(),
            ) {
                return Err(ErrorCode::EnhanceYourCalm);
            }
        }
        Ok(())
    }

    fn window_update(&mut self, stream: u32) -> Result<(), ConnError> {
        let increment = i64::from(frame::read_u31(&self.small, 0).unwrap_or(0));
        if stream == 0 {
            if increment == 0 {
                return Err(ErrorCode::ProtocolError);
            }
            self.send_window += increment;
            if self.send_window > i64::from(MAX_WINDOW) {
                return Err(ErrorCode::FlowControlError);
            }
            return Ok(());
        }
        let Some(i) = self.stream_index(stream) else {
            // A closed stream: ignored (§6.9).
            return Ok(());
        };
        if increment == 0 {
            self.reset(stream, ErrorCode::ProtocolError);
            return Ok(());
        }
        self.streams[i].send_window += increment;
        if self.streams[i].send_window > i64::from(MAX_WINDOW) {
            self.reset(stream, ErrorCode::FlowControlError);
        }
        Ok(())
    }

    fn client_reset(&mut self, stream: u32) {
        if self.stream_index(stream).is_none() {
            // Already closed on this side: nothing to cancel, nothing spent.
            return;
        }
        self.counters.client_resets += 1;
        self.remove_stream(stream);
        self.remove_queued(stream);
        if self.resets_left == 0 {
            self.fail(ErrorCode::EnhanceYourCalm);
        } else {
            self.resets_left -= 1;
        }
    }

    /// The header block is whole: decode it and queue the request (or refuse the stream).
    fn block_end(&mut self, _now: Instant) -> Result<(), ConnError> {
        self.block_open = false;
        let id = self.block_stream;
        let existing = self.stream_index(id);
        if existing.is_some() || id <= self.last_stream {
            // Trailers (or a second HEADERS): decoded for the table's sake, then dropped.
            self.decoder
                .decode(&self.block[..self.block_len], MAX_HEADER_LIST, &mut Discard)
                .map_err(|_| ErrorCode::CompressionError)?;
            if let Some(i) = existing {
                if !self.block_end_stream || self.streams[i].state != StreamState::Open {
                    self.reset(id, ErrorCode::ProtocolError);
                } else {
                    self.streams[i].state = StreamState::HalfClosedRemote;
                }
            }
            return Ok(());
        }
        self.last_stream = id;
        let free = self.streams.iter().position(|s| s.id == 0);
        let start = self.queue_len;
        let mut builder = RequestBuilder::new(&mut self.queue[start..]);
        let decoded = self
            .decoder
            .decode(&self.block[..self.block_len], MAX_HEADER_LIST, &mut builder)
            .map_err(|_| ErrorCode::CompressionError)?;
        let built = builder.finish();
        if self.goaway {
            // After our GOAWAY no new stream is processed.
            return Ok(());
        }
        let Some(slot) = free else {
            self.counters.refused += 1;
            self.queue_reset(id, ErrorCode::RefusedStream)?;
            return Ok(());
        };
        let (entry_len, flags) = match built {
            _ if !decoded.complete => (0, ENTRY_TOO_LARGE),
            Built::Request { len, head } => (len, if head { ENTRY_HEAD_METHOD } else { 0 }),
            Built::Full => {
                self.counters.refused += 1;
                self.queue_reset(id, ErrorCode::RefusedStream)?;
                return Ok(());
            }
            Built::Malformed => {
                self.queue_reset(id, ErrorCode::ProtocolError)?;
                return Ok(());
            }
        };
        if self.block_self_dependent {
            self.queue_reset(id, ErrorCode::ProtocolError)?;
            return Ok(());
        }
        if flags == ENTRY_TOO_LARGE && self.queue.len() - start < ENTRY_HEAD {
            self.counters.refused += 1;
            self.queue_reset(id, ErrorCode::RefusedStream)?;
            return Ok(());
        }
        // The builder wrote the text after room for the entry header.
        let entry = &mut self.queue[start..start + ENTRY_HEAD];
        entry[..4].copy_from_slice(&id.to_be_bytes());
        entry[4..6].copy_from_slice(&(entry_len as u16).to_be_bytes());
        entry[6] = flags;
        self.queue_len = start + ENTRY_HEAD + entry_len;
        self.streams[slot] = Stream {
            id,
            state: if self.block_end_stream {
                StreamState::HalfClosedRemote
            } else {
                StreamState::Open
            },
            send_window: self.initial_send_window,
            receive_window: i64::from(RECEIVE_WINDOW),
        };
        self.counters.requests += 1;
        Ok(())
    }

    fn queue_reset(&mut self, stream: u32, code: ErrorCode) -> Result<(), ConnError> {
        self.counters.server_resets += 1;
        if self.queue_control(kind::RST_STREAM, 0, stream, &(code as u32).to_be_bytes()) {
            Ok(())
        } else {
            Err(ErrorCode::EnhanceYourCalm)
        }
    }

    /// Removes `stream`'s request from the queue, if it is still there.
    fn remove_queued(&mut self, stream: u32) {
        let mut at = 0usize;
        while at + ENTRY_HEAD <= self.queue_len {
            let id = frame::read_u32(&self.queue, at).unwrap_or(0);
            let len = usize::from(u16::from_be_bytes([self.queue[at + 4], self.queue[at + 5]]));
            let end = at + ENTRY_HEAD + len;
            if id == stream {
                self.queue.copy_within(end..self.queue_len, at);
                self.queue_len -= end - at;
                return;
            }
            at = end;
        }
    }

    /// The oldest queued request, if any (it stays queued until [`H2::pop_request`]).
    pub fn peek_request(&self) -> Option<Request<'_>> {
        if self.queue_len < ENTRY_HEAD {
            return None;
        }
        let stream = frame::read_u32(&self.queue, 0)?;
        let len = usize::from(u16::from_be_bytes([self.queue[4], self.queue[5]]));
        let flags = self.queue[6];
        Some(Request {
            stream,
            head: self.queue.get(ENTRY_HEAD..ENTRY_HEAD + len)?,
            head_method: flags & ENTRY_HEAD_METHOD != 0,
            too_large: flags & ENTRY_TOO_LARGE != 0,
        })
    }

    /// Drops the oldest queued request (taken with [`H2::peek_request`]).
    pub fn pop_request(&mut self) {
        if self.queue_len < ENTRY_HEAD {
            return;
        }
        let len = usize::from(u16::from_be_bytes([self.queue[4], self.queue[5]]));
        let end = (ENTRY_HEAD + len).min(self.queue_len);
        self.queue.copy_within(end..self.queue_len, 0);
        self.queue_len -= end;
    }

    /// Whether requests wait in the queue.
    pub fn has_requests(&self) -> bool {
        self.queue_len >= ENTRY_HEAD
    }

    /// Whether `stream` is still open on the server's side (not reset by either side).
    pub fn is_stream_open(&self, stream: u32) -> bool {
        self.stream_index(stream).is_some()
    }

    /// How many DATA bytes may go out on `stream` now: the smaller window, and one frame.
    pub fn send_allowance(&self, stream: u32) -> usize {
        let Some(i) = self.stream_index(stream) else {
            return 0;
        };
        let window = self.send_window.min(self.streams[i].send_window).max(0);
        window.min(i64::from(DEFAULT_MAX_FRAME)) as usize
    }

    /// Whether the connection's window (rather than the stream's) is shut.
    pub fn connection_window_shut(&self) -> bool {
        self.send_window <= 0
    }

    /// Writes a HEADERS frame for `stream` with `:status` and `fields` into `out`; returns
    /// its length, or `None` if `out` is too small (nothing is then changed).
    pub fn write_headers<'f>(
        &mut self,
        out: &mut [u8],
        stream: u32,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Option<usize> {
        let payload = out.get_mut(HEADER_LEN..)?;
        let limit = payload.len().min(DEFAULT_MAX_FRAME as usize);
        let payload = &mut payload[..limit];
        let mut at = 0usize;
        let mut digits = [0u8; 3];
        let status = status.clamp(100, 999);
        digits[0] = b'0' + (status / 100) as u8;
        digits[1] = b'0' + (status / 10 % 10) as u8;
        digits[2] = b'0' + (status % 10) as u8;
        Encoder::field(payload, &mut at, b":status", &digits)?;
        for (name, value) in fields {
            Encoder::field(payload, &mut at, name, value)?;
        }
        let header = FrameHeader {
            len: at as u32,
            kind: kind::HEADERS,
            flags: flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 },
            stream,
        };
        out[..HEADER_LEN].copy_from_slice(&header.to_bytes());
        if end_stream {
            self.stream_done(stream);
        }
        Some(HEADER_LEN + at)
    }

    /// Writes a DATA frame header for the `len` bytes the caller put at
    /// `out[HEADER_LEN..HEADER_LEN + len]` (at most [`H2::send_allowance`]), spending the
    /// windows.
    pub fn write_data(
        &mut self,
        out: &mut [u8],
        stream: u32,
        len: usize,
        end_stream: bool,
    ) -> Option<usize> {
        if len > self.send_allowance(stream) && len > 0 {
            return None;
        }
        let header = FrameHeader {
            len: len as u32,
            kind: kind::DATA,
            flags: if end_stream { flag::END_STREAM } else { 0 },
            stream,
        };
        out.get_mut(..HEADER_LEN)?
            .copy_from_slice(&header.to_bytes());
        self.send_window -= len as i64;
        if let Some(i) = self.stream_index(stream) {
            self.streams[i].send_window -= len as i64;
        }
        if end_stream {
            self.stream_done(stream);
        }
        Some(HEADER_LEN + len)
    }

    /// The response on `stream` is complete: the stream closes (a client still sending a
    /// body is told to stop with NO_ERROR, §8.1), and a reset is earned back.
    fn stream_done(&mut self, stream: u32) {
        if let Some(i) = self.stream_index(stream) {
            let still_open = self.streams[i].state == StreamState::Open;
            self.streams[i] = FREE;
            if still_open {
                self.queue_control(
                    kind::RST_STREAM,
                    0,
                    stream,
                    &(ErrorCode::NoError as u32).to_be_bytes(),
                );
            }
        }
        self.resets_left = (self.resets_left + 1).min(RESET_BUDGET);
    }

    /// Hands out queued control frames; returns how many bytes were written.
    pub fn write_control(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.control_len);
        out[..n].copy_from_slice(&self.control[..n]);
        self.control.copy_within(n..self.control_len, 0);
        self.control_len -= n;
        n
    }
}

/// A sink that keeps nothing (trailers, refused streams).
struct Discard;

impl Sink for Discard {
    fn field(&mut self, _name: &[u8], _value: &[u8]) {}
}

enum Built {
    Request {
        len: usize,
        head: bool,
    },
    /// The queue has no room for it.
    Full,
    /// Not a valid HTTP/2 request (RFC 9113 §8.1.1): a stream error.
    Malformed,
}

/// Turns decoded fields into an HTTP/1.1 request head, written after [`ENTRY_HEAD`] bytes of
/// `out`: pseudo-header fields are gathered first (they must come first), the request line
/// and Host written at the first regular field; names must be lower case tokens, values
/// free of NUL, CR and LF (so nothing can smuggle a second request into the text), and the
/// connection-specific fields of HTTP/1.1 are refused (§8.2.2).
struct RequestBuilder<'q> {
    text: Text<'q>,
    method: Small<16>,
    scheme: Small<8>,
    authority: Small<256>,
    path: Small<{ bramble_http::MAX_TARGET_LEN }>,
    line_written: bool,
    host_seen: bool,
    malformed: bool,
    /// Pseudo-header fields seen, as bits (method, scheme, authority, path).
    pseudo: u8,
}

/// The request text being written into the queue.
struct Text<'q> {
    out: &'q mut [u8],
    len: usize,
    full: bool,
}

impl Text<'_> {
    fn push(&mut self, bytes: &[u8]) {
        match self.out.get_mut(self.len..self.len + bytes.len()) {
            Some(dest) => {
                dest.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            None => self.full = true,
        }
    }
}

struct Small<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> Small<N> {
    fn new() -> Self {
        Self {
            bytes: [0; N],
            len: 0,
        }
    }

    fn set(&mut self, value: &[u8]) -> bool {
        match self.bytes.get_mut(..value.len()) {
            Some(dest) => {
                dest.copy_from_slice(value);
                self.len = value.len();
                true
            }
            None => false,
        }
    }

    fn get(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

fn is_token_lower(name: &[u8]) -> bool {
    !name.is_empty()
        && name.iter().all(|&b| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

fn value_ok(value: &[u8]) -> bool {
    !value.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n'))
        && !value.first().is_some_and(|b| matches!(b, b' ' | b'\t'))
        && !value.last().is_some_and(|b| matches!(b, b' ' | b'\t'))
}

impl<'q> RequestBuilder<'q> {
    fn new(out: &'q mut [u8]) -> Self {
        Self {
            text: Text {
                out,
                len: ENTRY_HEAD,
                full: false,
            },
            method: Small::new(),
            scheme: Small::new(),
            authority: Small::new(),
            path: Small::new(),
            line_written: false,
            host_seen: false,
            malformed: false,
            pseudo: 0,
        }
    }

    fn write_line(&mut self) {
        if self.line_written {
            return;
        }
        self.line_written = true;
        // :method, :scheme and :path are required (CONNECT, which has none of the last two,
        // is not served); an empty :path is malformed.
        if self.pseudo & 0b1011 != 0b1011 || self.path.len == 0 || self.method.len == 0 {
            self.malformed = true;
            return;
        }
        self.text.push(self.method.get());
        self.text.push(b" ");
        self.text.push(self.path.get());
        self.text.push(b" HTTP/1.1\r\n");
        if self.authority.len > 0 {
            self.text.push(b"host: ");
            self.text.push(self.authority.get());
            self.text.push(b"\r\n");
            self.host_seen = true;
        }
    }

    fn finish(mut self) -> Built {
        self.write_line();
        self.text.push(b"\r\n");
        if self.malformed {
            Built::Malformed
        } else if self.text.full {
            Built::Full
        } else {
            Built::Request {
                len: self.text.len - ENTRY_HEAD,
                head: self.method.get() == b"HEAD",
            }
        }
    }
}

impl Sink for RequestBuilder<'_> {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.malformed {
            return;
        }
        if !value_ok(value) {
            self.malformed = true;
            return;
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.line_written {
                // Pseudo-header fields after a regular one.
                self.malformed = true;
                return;
            }
            let (bit, ok) = match pseudo {
                b"method" => (1, self.method.set(value) && is_token_upper(value)),
                b"scheme" => (2, self.scheme.set(value)),
                b"authority" => (4, self.authority.set(value) && !value.contains(&b' ')),
                b"path" => (8, self.path.set(value) && !value.contains(&b' ')),
                _ => (0, false),
            };
            if !ok || self.pseudo & bit != 0 {
                self.malformed = true;
            }
            self.pseudo |= bit;
            return;
        }
        if !is_token_lower(name)
            || matches!(
                name,
                b"connection"
                    | b"keep-alive"
                    | b"proxy-connection"
                    | b"transfer-encoding"
                    | b"upgrade"
            )
            || (name == b"te" && value != b"trailers")
        {
            self.malformed = true;
            return;
        }
        self.write_line();
        // The body is not forwarded (the engine serves GET and HEAD and discards bodies), so
        // neither is its length.
        if name == b"content-length" || name == b"te" {
            return;
        }
        if name == b"host" {
            if self.host_seen {
                // :authority already gave it.
                return;
            }
            self.host_seen = true;
        }
        self.text.push(name);
        self.text.push(b": ");
        self.text.push(value);
        self.text.push(b"\r\n");
    }
}

fn is_token_upper(method: &[u8]) -> bool {
    !method.is_empty()
        && method
            .iter()
            .all(|&b| b.is_ascii_uppercase() || b == b'-' || b == b'_')
}
