//! The known HTTP/2 attacks, each against its bound, and a polite client beside each that
//! stays served. Every test here fails if its bound is taken away: the attack would then run
//! to its end without the GOAWAY, RST_STREAM or status the test expects.

mod support;

use bramble_h2::conn::{
    CONTROL_LEN, HEADER_BLOCK_LEN, MAX_CONTINUATIONS, MAX_STREAMS, RESET_BUDGET, STALL_MICROS,
};
use bramble_h2::frame::{self, ErrorCode, PREFACE, flag, kind, setting};
use bramble_h2::hpack::encode_int;
use bramble_site::{FileSpec, SiteImageWriter, VariantSpec, http_date};
use support::*;

fn site() -> Vec<u8> {
    let mut writer = SiteImageWriter::new();
    for (path, body) in [
        ("/index.html", b"<p>home</p>".to_vec()),
        ("/big.bin", vec![7u8; 300_000]),
    ] {
        writer
            .add(FileSpec {
                path: path.into(),
                content_type: "text/html".into(),
                cache_control: "no-cache".into(),
                last_modified: 0,
                last_modified_http: http_date(0),
                identity: VariantSpec {
                    body,
                    etag: "\"1\"".into(),
                },
                gzip: None,
                brotli: None,
            })
            .unwrap();
    }
    writer.finish().unwrap()
}

const CALM: u32 = ErrorCode::EnhanceYourCalm as u32;

fn polite_fetch(peer: &mut Peer, stream: u32) {
    let reply = peer.fetch(stream, &get_fields("GET", "/"));
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, b"<p>home</p>");
}

/// CVE-2023-44487: open a stream, reset it, again and again. The budget of resets ends the
/// connection; the streams cost a queue entry each and no response.
#[test]
fn rapid_reset_ends_the_connection_once_the_budget_is_spent() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    let mut attack = Vec::new();
    for i in 0..1_000u32 {
        let stream = 1 + 2 * i;
        attack.extend(request(stream, &get_fields("GET", "/big.bin")));
        attack.extend(rst(stream, ErrorCode::Cancel));
    }
    peer.send(&attack);
    peer.pump();
    assert_eq!(peer.goaway, Some(CALM));
    let counters = peer.session.h2().counters();
    assert_eq!(counters.client_resets, u64::from(RESET_BUDGET) + 1);
    assert!(counters.requests <= u64::from(RESET_BUDGET) + 1);
    assert!(peer.received < 4096, "no response bodies went out");

    // A browser that cancels now and then, between completed responses, is never cut off.
    let mut server = bramble_h2_server(&image);
    let mut polite = Peer::wide(&mut server);
    for i in 0..(3 * RESET_BUDGET) {
        let stream = 1 + 4 * i;
        polite_fetch(&mut polite, stream);
        polite.send(&request(stream + 2, &get_fields("GET", "/big.bin")));
        polite.send(&rst(stream + 2, ErrorCode::Cancel));
    }
    polite.pump();
    assert_eq!(polite.goaway, None);
}

fn bramble_h2_server(image: &[u8]) -> bramble_http::Server<'_> {
    server(image)
}

/// A header block that never ends: empty CONTINUATION frames (no bytes to count) and full
/// ones (bytes to buffer). Both stop at their bound.
#[test]
fn continuation_floods_stop_at_the_frame_and_byte_bounds() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    let mut attack = frame(kind::HEADERS, 0, 1, &block(&get_fields("GET", "/")));
    for _ in 0..10_000 {
        attack.extend(frame(kind::CONTINUATION, 0, 1, &[]));
    }
    peer.send(&attack);
    peer.pump();
    assert_eq!(peer.goaway, Some(CALM));

    let mut server = bramble_h2_server(&image);
    let mut peer = Peer::wide(&mut server);
    let mut attack = frame(kind::HEADERS, 0, 1, &block(&get_fields("GET", "/")));
    let filler = vec![0x82u8; 4000];
    for _ in 0..(HEADER_BLOCK_LEN / 4000 + 1) {
        attack.extend(frame(kind::CONTINUATION, 0, 1, &filler));
    }
    peer.send(&attack);
    peer.pump();
    assert_eq!(peer.goaway, Some(CALM));

    // A long but bounded block, split in the allowed number of frames, is served.
    let mut server = bramble_h2_server(&image);
    let mut peer = Peer::wide(&mut server);
    let mut fields = get_fields("GET", "/");
    let cookie = "c".repeat(3000);
    fields.push(("cookie", &cookie));
    let whole = block(&fields);
    let pieces: Vec<&[u8]> = whole
        .chunks(whole.len().div_ceil(MAX_CONTINUATIONS as usize))
        .collect();
    let mut polite = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let (kind, mut flags) = if i == 0 {
            (kind::HEADERS, flag::END_STREAM)
        } else {
            (kind::CONTINUATION, 0)
        };
        if i + 1 == pieces.len() {
            flags |= flag::END_HEADERS;
        }
        polite.extend(frame(kind, flags, 1, piece));
    }
    peer.send(&polite);
    peer.pump();
    assert_eq!(peer.replies[&1].status, 200);
    assert_eq!(peer.goaway, None);
}

/// An HPACK bomb at the connection level: a 4000-byte table entry named 5,000 times. The
/// stream gets a 431 (the list is not built), the table stays in step, and the next request
/// on the connection is served.
#[test]
fn an_hpack_bomb_gets_a_431_and_the_connection_goes_on() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    let mut bomb = block(&get_fields("GET", "/"));
    // Literal with incremental indexing, new name "x-big", 4000-byte value.
    bomb.extend([0x40, 5]);
    bomb.extend(b"x-big");
    let mut len = [0u8; 4];
    let mut at = 0;
    encode_int(&mut len, &mut at, 7, 0, 4000).unwrap();
    bomb.extend(&len[..at]);
    bomb.extend(std::iter::repeat_n(b'a', 4000));
    // 2,000 references to it (index 62): 8 MB of header list from 2 KB.
    bomb.extend(std::iter::repeat_n(0xbeu8, 2_000));
    let mut bytes = frame(kind::HEADERS, flag::END_STREAM, 1, &bomb[..3000]);
    bytes.extend(frame(
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
        &bomb[3000..],
    ));
    peer.send(&bytes);
    peer.pump();
    assert_eq!(peer.replies[&1].status, 431);
    assert!(peer.replies[&1].ended);
    assert_eq!(peer.goaway, None);
    // The next block names the same entry once: the table survived.
    let mut next = block(&get_fields("GET", "/"));
    next.push(0xbe);
    peer.send(&frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        3,
        &next,
    ));
    peer.pump();
    assert_eq!(peer.replies[&3].status, 200);
}

/// SETTINGS and PING from a client that never reads the acknowledgements: the queue of
/// them is bounded, and the connection ends once it is full.
#[test]
fn settings_and_ping_floods_end_the_connection_when_unread() {
    let image = site();
    for flood in [settings(&[]), frame(kind::PING, 0, 0, &[1; 8])] {
        let mut server = server(&image);
        let mut peer = Peer::wide(&mut server);
        for _ in 0..(CONTROL_LEN / 9 + 1) {
            peer.send(&flood);
        }
        peer.pump();
        assert_eq!(peer.goaway, Some(CALM));
        assert!(peer.received < 2 * CONTROL_LEN);
        // The same number, each read before the next is sent: served for ever.
        let mut server = bramble_h2_server(&image);
        let mut polite = Peer::wide(&mut server);
        for _ in 0..10 * CONTROL_LEN {
            polite.send(&flood);
            polite.pump();
        }
        assert_eq!(polite.goaway, None);
        polite_fetch(&mut polite, 1);
    }
}

/// A client that never opens its window: the response waits STALL_MICROS, then is
/// cancelled, and the connection's next stream is served. A shut connection window ends the
/// connection.
#[test]
fn a_zero_window_stall_is_cancelled_and_others_are_served() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::new(&mut server, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    peer.send(&request(1, &get_fields("GET", "/big.bin")));
    peer.pump();
    assert_eq!(peer.replies[&1].status, 200);
    assert!(peer.replies[&1].body.is_empty());
    peer.send(&request(3, &get_fields("GET", "/")));
    peer.now = peer.now.add_micros(STALL_MICROS - 1);
    peer.pump();
    assert_eq!(peer.replies[&1].reset, None, "not yet");
    peer.now = peer.now.add_micros(1);
    peer.pump();
    assert_eq!(peer.replies[&1].reset, Some(ErrorCode::Cancel as u32));
    assert_eq!(peer.replies[&3].status, 200, "the next stream is answered");
    peer.send(&window_update(3, 100));
    peer.pump();
    assert_eq!(peer.replies[&3].body, b"<p>home</p>");
    assert_eq!(peer.goaway, None);

    // The connection's window spent and never reopened.
    let mut server = bramble_h2_server(&image);
    let mut peer = Peer::new(
        &mut server,
        &[(setting::INITIAL_WINDOW_SIZE, frame::MAX_WINDOW)],
    );
    peer.send(&request(1, &get_fields("GET", "/big.bin")));
    peer.pump();
    assert_eq!(peer.replies[&1].body.len(), 65_535);
    peer.now = peer.now.add_micros(STALL_MICROS);
    peer.pump();
    assert_eq!(peer.goaway, Some(CALM));
}

/// Priority is not kept, so a dependency loop costs nothing; a stream that depends on
/// itself is a stream error (RFC 9113 §5.3.1).
#[test]
fn dependency_loops_are_harmless_and_self_dependency_is_refused() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    let priority = |stream: u32, on: u32| {
        frame(
            kind::PRIORITY,
            0,
            stream,
            &[&on.to_be_bytes()[..], &[16]].concat(),
        )
    };
    let mut bytes = Vec::new();
    for _ in 0..1_000 {
        bytes.extend(priority(1, 3));
        bytes.extend(priority(3, 5));
        bytes.extend(priority(5, 1));
    }
    peer.send(&bytes);
    polite_fetch(&mut peer, 1);
    // HEADERS whose priority names its own stream.
    let mut payload = 3u32.to_be_bytes().to_vec();
    payload.push(16);
    payload.extend(block(&get_fields("GET", "/")));
    peer.send(&frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM | flag::PRIORITY,
        3,
        &payload,
    ));
    peer.send(&priority(5, 5));
    peer.pump();
    assert_eq!(
        peer.replies[&3].reset,
        Some(ErrorCode::ProtocolError as u32)
    );
    assert_eq!(
        peer.replies[&5].reset,
        Some(ErrorCode::ProtocolError as u32)
    );
    polite_fetch(&mut peer, 7);
    assert_eq!(peer.goaway, None);
}

/// More streams than SETTINGS_MAX_CONCURRENT_STREAMS at once: the extra ones are refused
/// (the client may retry them), the rest answered.
#[test]
fn streams_beyond_the_limit_are_refused() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    let mut bytes = Vec::new();
    let total = MAX_STREAMS as u32 + 4;
    for i in 0..total {
        bytes.extend(request(1 + 2 * i, &get_fields("GET", "/")));
    }
    peer.send(&bytes);
    peer.pump();
    let refused = (0..total)
        .filter(|i| peer.replies[&(1 + 2 * i)].reset == Some(ErrorCode::RefusedStream as u32))
        .count();
    let served = (0..total)
        .filter(|i| peer.replies[&(1 + 2 * i)].status == 200)
        .count();
    assert_eq!((served, refused), (MAX_STREAMS, 4));
}

/// Requests HTTP/2 calls malformed (RFC 9113 §8.1.1, §8.2) get PROTOCOL_ERROR on their
/// stream; none reaches the engine, so no field can smuggle a second HTTP/1.1 request.
#[test]
fn malformed_requests_are_stream_errors() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "a"),
        ],
        vec![
            (":method", "GET"),
            (":path", "/"),
            (":scheme", "https"),
            ("X-Upper", "1"),
        ],
        vec![
            (":method", "GET"),
            (":path", "/"),
            (":scheme", "https"),
            ("x", "a\r\nGET /big.bin HTTP/1.1"),
        ],
        vec![
            (":method", "GET"),
            (":path", "/"),
            (":scheme", "https"),
            ("connection", "close"),
        ],
        vec![
            (":method", "GET"),
            (":path", "/"),
            (":scheme", "https"),
            ("te", "gzip"),
        ],
        vec![
            (":method", "GET"),
            (":scheme", "https"),
            ("x", "1"),
            (":path", "/"),
        ],
        vec![
            (":method", "GET"),
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
        ],
        vec![
            (":method", "GET"),
            (":path", "/ HTTP/1.0\r\n"),
            (":scheme", "https"),
        ],
        vec![
            (":method", "GET"),
            (":path", "/"),
            (":scheme", "https"),
            (":status", "200"),
        ],
    ];
    for (i, fields) in cases.iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        peer.send(&request(stream, fields));
        peer.pump();
        assert_eq!(
            peer.replies[&stream].reset,
            Some(ErrorCode::ProtocolError as u32),
            "{fields:?}"
        );
        assert_eq!(peer.replies[&stream].status, 0);
    }
    assert_eq!(server_requests(&peer), 0);
    polite_fetch(&mut peer, 101);
}

fn server_requests(peer: &Peer) -> u64 {
    peer.server.counters().requests
}

/// Connection errors: a bad preface, an oversized frame, DATA on an idle stream, a
/// PUSH_PROMISE, a window overflow, a bad HPACK block. Each ends the connection with
/// GOAWAY and its code.
#[test]
fn connection_errors_end_with_goaway() {
    let image = site();
    let cases: Vec<(Vec<u8>, ErrorCode)> = vec![
        (frame(kind::DATA, 0, 1, b"x"), ErrorCode::ProtocolError),
        (
            frame(kind::PUSH_PROMISE, 0, 1, &[0, 0, 0, 2]),
            ErrorCode::ProtocolError,
        ),
        (
            frame(kind::PING, 0, 0, &[0; 20_000]),
            ErrorCode::FrameSizeError,
        ),
        (frame(kind::PING, 0, 0, &[0; 7]), ErrorCode::FrameSizeError),
        (
            window_update(0, frame::MAX_WINDOW),
            ErrorCode::FlowControlError,
        ),
        (window_update(0, 0), ErrorCode::ProtocolError),
        (
            frame(kind::HEADERS, flag::END_HEADERS, 1, &[0x80]),
            ErrorCode::CompressionError,
        ),
        (
            frame(kind::HEADERS, flag::END_HEADERS, 2, &[0x82]),
            ErrorCode::ProtocolError,
        ),
        (
            settings(&[(setting::INITIAL_WINDOW_SIZE, 0x8000_0000)]),
            ErrorCode::FlowControlError,
        ),
        (
            settings(&[(setting::MAX_FRAME_SIZE, 100)]),
            ErrorCode::ProtocolError,
        ),
        (
            frame(kind::CONTINUATION, flag::END_HEADERS, 1, &[0x82]),
            ErrorCode::ProtocolError,
        ),
    ];
    for (bytes, code) in cases {
        let mut server = server(&image);
        let mut peer = Peer::new(&mut server, &[]);
        peer.send(&bytes);
        peer.pump();
        assert_eq!(peer.goaway, Some(code as u32), "{:?}", &bytes[..9]);
        assert!(peer.session.h2().is_finished());
    }
    // Not the preface: GOAWAY, and nothing else is read.
    let mut server = server(&image);
    let mut session = bramble_h2::H2Session::new();
    let now = bramble_hal::Instant::from_micros(0);
    assert_eq!(session.receive(b"GET / HTTP/1.1\r\n\r\n", now), 18);
    assert!(session.h2().is_finished());
    let _ = &mut server;
    let _ = PREFACE;
}

#[test]
fn arbitrary_frames_never_panic() {
    let mut seed = 0x1234_5678u32;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for _ in 0..300 {
        let len = (next() % 2000) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Splice in valid frames so that deeper states are reached.
        if next() % 2 == 0 {
            data.splice(0..0, request(1, &get_fields("GET", "/")));
        }
        bramble_h2::exercise::frames(&data);
        bramble_h2::exercise::hpack_blocks(&data);
    }
}
