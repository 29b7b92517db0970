//! A test client for the HTTP/2 session: writes frames, runs the session with its lane,
//! reads the frames back and decodes responses.
#![allow(dead_code)] // each test file uses part of this

use bramble_h2::H2Session;
use bramble_h2::frame::{self, ErrorCode, FrameHeader, HEADER_LEN, PREFACE, flag, kind};
use bramble_h2::hpack::{Decoder, Encoder, Sink};
use bramble_hal::Instant;
use bramble_http::{Connection, Server, ServerConfig, SiteSource};
use std::collections::BTreeMap;

/// A frame as read back.
#[derive(Clone, Debug)]
pub struct Frame {
    pub header: FrameHeader,
    pub payload: Vec<u8>,
}

/// A response as the client saw it.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    pub status: u16,
    pub fields: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub ended: bool,
    pub reset: Option<u32>,
}

impl Reply {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Fields(Vec<(String, String)>);

impl Sink for Fields {
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.0.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        ));
    }
}

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN + payload.len()];
    let header = FrameHeader {
        len: payload.len() as u32,
        kind,
        flags,
        stream,
    };
    frame::write_frame(&mut out, header, payload).unwrap();
    out
}

/// A header block of `fields`, literals without indexing.
pub fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = vec![0u8; 16_384];
    let mut at = 0;
    for (name, value) in fields {
        Encoder::field(&mut out, &mut at, name.as_bytes(), value.as_bytes()).unwrap();
    }
    out.truncate(at);
    out
}

pub fn get_fields<'a>(method: &'a str, path: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", method),
        (":scheme", "https"),
        (":path", path),
        (":authority", "pi.example"),
    ]
}

/// A whole request: HEADERS with END_HEADERS and END_STREAM.
pub fn request(stream: u32, fields: &[(&str, &str)]) -> Vec<u8> {
    frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        stream,
        &block(fields),
    )
}

pub fn settings(entries: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, value) in entries {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(kind::SETTINGS, 0, 0, &payload)
}

pub fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(kind::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

pub fn rst(stream: u32, code: ErrorCode) -> Vec<u8> {
    frame(kind::RST_STREAM, 0, stream, &(code as u32).to_be_bytes())
}

/// The client side of one connection, with the server's session and lane.
pub struct Peer<'s, 'a> {
    pub server: &'s mut Server<'a>,
    pub lane: Connection,
    pub session: H2Session,
    pub now: Instant,
    decoder: Decoder,
    pending: Vec<u8>,
    pub frames: Vec<Frame>,
    pub replies: BTreeMap<u32, Reply>,
    pub goaway: Option<u32>,
    /// Bytes the server sent.
    pub received: usize,
}

impl<'s, 'a> Peer<'s, 'a> {
    /// A connection after the preface and the client's SETTINGS (`entries`).
    pub fn new(server: &'s mut Server<'a>, entries: &[(u16, u32)]) -> Self {
        let now = Instant::from_micros(1_000_000);
        let mut lane = Connection::new();
        lane.open_secure(server, now);
        let mut peer = Self {
            server,
            lane,
            session: H2Session::new(),
            now,
            decoder: Decoder::new(),
            pending: Vec::new(),
            frames: Vec::new(),
            replies: BTreeMap::new(),
            goaway: None,
            received: 0,
        };
        let mut hello = PREFACE.to_vec();
        hello.extend(settings(entries));
        peer.send(&hello);
        peer
    }

    /// A client that opens its windows wide.
    pub fn wide(server: &'s mut Server<'a>) -> Self {
        let mut peer = Self::new(
            server,
            &[(frame::setting::INITIAL_WINDOW_SIZE, frame::MAX_WINDOW)],
        );
        peer.send(&window_update(0, frame::MAX_WINDOW - frame::DEFAULT_WINDOW));
        peer
    }

    pub fn send(&mut self, bytes: &[u8]) {
        assert_eq!(self.session.receive(bytes, self.now), bytes.len());
    }

    /// Runs the server's transmit until it has nothing more, `chunk` bytes at a time.
    pub fn pump_with(&mut self, chunk: usize) {
        let mut out = vec![0u8; chunk];
        for _ in 0..100_000 {
            let n = self
                .session
                .transmit(&mut self.lane, self.server, &mut out, self.now);
            if n == 0 {
                break;
            }
            self.received += n;
            self.pending.extend_from_slice(&out[..n]);
        }
        self.parse();
    }

    pub fn pump(&mut self) {
        self.pump_with(16_384 + 64);
    }

    fn parse(&mut self) {
        loop {
            if self.pending.len() < HEADER_LEN {
                return;
            }
            let header = FrameHeader::parse(self.pending[..HEADER_LEN].try_into().unwrap());
            let total = HEADER_LEN + header.len as usize;
            if self.pending.len() < total {
                return;
            }
            let payload = self.pending[HEADER_LEN..total].to_vec();
            self.pending.drain(..total);
            match header.kind {
                kind::HEADERS => {
                    let mut fields = Fields(Vec::new());
                    self.decoder.decode(&payload, 1 << 20, &mut fields).unwrap();
                    let reply = self.replies.entry(header.stream).or_default();
                    for (name, value) in fields.0 {
                        if name == ":status" {
                            reply.status = value.parse().unwrap();
                        } else {
                            reply.fields.push((name, value));
                        }
                    }
                    reply.ended |= header.has(flag::END_STREAM);
                }
                kind::DATA => {
                    let reply = self.replies.entry(header.stream).or_default();
                    assert!(!reply.ended, "DATA after END_STREAM");
                    reply.body.extend_from_slice(&payload);
                    reply.ended |= header.has(flag::END_STREAM);
                }
                kind::RST_STREAM => {
                    let code = u32::from_be_bytes(payload[..4].try_into().unwrap());
                    self.replies.entry(header.stream).or_default().reset = Some(code);
                }
                kind::GOAWAY => {
                    self.goaway = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
                }
                _ => {}
            }
            self.frames.push(Frame { header, payload });
        }
    }

    /// Sends one request on `stream` and runs the server until it answers.
    pub fn fetch(&mut self, stream: u32, fields: &[(&str, &str)]) -> Reply {
        self.send(&request(stream, fields));
        self.pump();
        self.replies.get(&stream).cloned().unwrap_or_default()
    }

    pub fn count(&self, kind: u8, flags: u8) -> usize {
        self.frames
            .iter()
            .filter(|f| f.header.kind == kind && f.header.flags & flags == flags)
            .count()
    }
}

pub fn server(image: &[u8]) -> Server<'_> {
    Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(image).unwrap()),
        ServerConfig::default(),
    )
}
