//! The engine over a body source that is not all in RAM: bodies that arrive later hold their
//! response back without blocking, bodies that cannot be had are never sent (500 before the
//! head, a reset after it), and every body segment is looked up once per response.

mod support;

use std::cell::RefCell;

use bramble_http::{ConnectionAction, Server, SiteSource};
use bramble_site::{BodyRequest, BodySource, BodyStatus, SiteImage};
use support::{Client, big_body, config, index_body, parse_responses, site_image};

/// A body source over an image in RAM that answers `Pending` a number of times for each new
/// offset, and fails from a body offset on, as a slow or failing card would.
struct ScriptedSource<'a> {
    image: SiteImage<'a>,
    /// `Pending` answers still to give for the current offset.
    pending_left: RefCell<u32>,
    /// `Pending` answers to give for each new offset.
    pending_per_offset: u32,
    /// Offsets (inside a body) from which reads fail.
    fail_from: Option<u32>,
    /// Every request seen: (offset, lookup, output length).
    log: RefCell<Vec<(u32, bool, usize)>>,
    last_offset: RefCell<Option<u32>>,
}

impl<'a> ScriptedSource<'a> {
    fn new(image: SiteImage<'a>, pending_per_offset: u32, fail_from: Option<u32>) -> Self {
        Self {
            image,
            pending_left: RefCell::new(0),
            pending_per_offset,
            fail_from,
            log: RefCell::new(Vec::new()),
            last_offset: RefCell::new(None),
        }
    }
}

impl BodySource for ScriptedSource<'_> {
    fn read(&self, request: BodyRequest, out: &mut [u8]) -> BodyStatus {
        self.log
            .borrow_mut()
            .push((request.offset, request.lookup, out.len()));
        if self.fail_from.is_some_and(|from| request.offset >= from) {
            return BodyStatus::Failed;
        }
        let mut last = self.last_offset.borrow_mut();
        if *last != Some(request.offset) {
            *last = Some(request.offset);
            *self.pending_left.borrow_mut() = self.pending_per_offset;
        }
        let mut left = self.pending_left.borrow_mut();
        if *left > 0 {
            *left -= 1;
            return BodyStatus::Pending;
        }
        // Like the card store: never more than the rest of a 64 KiB segment per answer.
        let segment_len = self.image.index().segment_len();
        let at = request.body.offset + request.offset;
        let piece = (segment_len - at % segment_len) as usize;
        let n = out.len().min(piece);
        self.image.read(request, &mut out[..n])
    }
}

/// Drives `request` through `client`, offering transmit space up to `rounds` times, and
/// returns every byte written.
fn drive(client: &mut Client, server: &mut Server, request: &[u8], rounds: usize) -> Vec<u8> {
    assert_eq!(
        client.connection.receive(server, request, client.now),
        request.len()
    );
    let mut out = Vec::new();
    for _ in 0..rounds {
        let mut buffer = vec![0u8; client.window];
        let n = client.connection.transmit(server, &mut buffer, client.now);
        out.extend_from_slice(&buffer[..n]);
    }
    out
}

#[test]
fn a_body_that_is_not_there_yet_holds_its_response_back_then_arrives_whole() {
    let bytes = site_image(true);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let source = ScriptedSource::new(image, 3, None);
    let mut server = Server::new(SiteSource::Store(image.index(), &source), config());
    let mut client = Client::open(&mut server);
    let request = b"GET / HTTP/1.1\r\nHost: pi\r\nAccept-Encoding: identity\r\n\r\n";
    // Three transmit calls: the source is still "reading", nothing may go out, not even the
    // head (a 500 must stay possible).
    let early = drive(&mut client, &mut server, request, 3);
    assert!(early.is_empty(), "{:?}", String::from_utf8_lossy(&early));
    assert_eq!(client.action(), ConnectionAction::KeepOpen);
    assert!(client.connection.is_responding());
    let rest = drive(&mut client, &mut server, b"", 10);
    let responses = parse_responses(&rest, &[false]);
    assert_eq!(responses.len(), 1);
    assert_eq!(responses[0].status, 200);
    assert_eq!(responses[0].body, index_body());
    assert_eq!(server.counters().status(200), 1);
    assert_eq!(server.counters().body_failures, 0);
}

#[test]
fn each_segment_is_looked_up_once_per_response() {
    let bytes = site_image(true);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let source = ScriptedSource::new(image, 1, None);
    let mut server = Server::new(SiteSource::Store(image.index(), &source), config());
    let mut client = Client::open(&mut server);
    client.window = 4000;
    let out = drive(
        &mut client,
        &mut server,
        b"GET /big.bin HTTP/1.1\r\nHost: pi\r\n\r\n",
        400,
    );
    let responses = parse_responses(&out, &[false]);
    assert_eq!(responses[0].status, 200);
    assert_eq!(responses[0].body, big_body());
    let index = image.index();
    let body = index.get("/big.bin").unwrap().identity.body;
    let segment_len = index.segment_len();
    let first = body.offset / segment_len;
    let last = (body.offset + body.len - 1) / segment_len;
    let log = source.log.borrow();
    let lookups: Vec<u32> = log
        .iter()
        .filter(|(_, lookup, _)| *lookup)
        .map(|(offset, ..)| (body.offset + offset) / segment_len)
        .collect();
    let expected: Vec<u32> = (first..=last).collect();
    assert_eq!(lookups, expected, "one lookup per segment, in order");
    // A second response for the same file looks every segment up again.
    drop(log);
    let again = drive(
        &mut client,
        &mut server,
        b"GET /big.bin HTTP/1.1\r\nHost: pi\r\n\r\n",
        400,
    );
    assert_eq!(parse_responses(&again, &[false])[0].body, big_body());
    let lookups = source.log.borrow().iter().filter(|(_, l, _)| *l).count();
    assert_eq!(lookups, 2 * expected.len());
}

#[test]
fn a_body_that_cannot_be_read_is_answered_500_and_the_connection_closes() {
    let bytes = site_image(true);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let source = ScriptedSource::new(image, 0, Some(0));
    let mut server = Server::new(SiteSource::Store(image.index(), &source), config());
    let mut client = Client::open(&mut server);
    let out = drive(
        &mut client,
        &mut server,
        b"GET /style.css HTTP/1.1\r\nHost: pi\r\n\r\nGET / HTTP/1.1\r\nHost: pi\r\n\r\n",
        5,
    );
    let responses = parse_responses(&out, &[false]);
    assert_eq!(responses.len(), 1, "the pipelined request is not answered");
    assert_eq!(responses[0].status, 500);
    assert_eq!(responses[0].header("connection"), Some("close"));
    let page = String::from_utf8_lossy(&responses[0].body);
    assert!(page.contains("SD card"), "{page}");
    assert!(
        !out.windows(6).any(|w| w == b"color:"),
        "no byte of the body"
    );
    let counters = server.counters();
    assert_eq!(counters.status(500), 1);
    assert_eq!(counters.status(200), 0);
    assert_eq!(counters.body_failures, 1);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
}

#[test]
fn a_body_that_fails_after_its_head_went_out_resets_the_connection() {
    let bytes = site_image(true);
    let image = SiteImage::new_checked(&bytes).unwrap();
    // The first segment reads, the rest fails.
    let source = ScriptedSource::new(image, 0, Some(70_000));
    let mut server = Server::new(SiteSource::Store(image.index(), &source), config());
    let mut client = Client::open(&mut server);
    client.window = 8192;
    let out = drive(
        &mut client,
        &mut server,
        b"GET /big.bin HTTP/1.1\r\nHost: pi\r\n\r\n",
        100,
    );
    assert!(out.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let head_end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let body = &out[head_end..];
    assert!(
        body.len() < 200_000 && body.len() >= 60_000,
        "{}",
        body.len()
    );
    assert_eq!(body, &big_body()[..body.len()], "only verified bytes");
    assert_eq!(client.action(), ConnectionAction::Abort);
    assert_eq!(server.counters().body_failures, 1);
}

#[test]
fn head_requests_and_304s_never_ask_for_the_body() {
    let bytes = site_image(true);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let source = ScriptedSource::new(image, 0, Some(0));
    let mut server = Server::new(SiteSource::Store(image.index(), &source), config());
    let mut client = Client::open(&mut server);
    let out = drive(
        &mut client,
        &mut server,
        b"HEAD /big.bin HTTP/1.1\r\nHost: pi\r\n\r\n\
          GET /style.css HTTP/1.1\r\nHost: pi\r\nIf-None-Match: \"css\"\r\n\r\n",
        5,
    );
    let responses = parse_responses(&out, &[true, false]);
    assert_eq!(responses[0].status, 200);
    assert_eq!(responses[1].status, 304);
    assert!(source.log.borrow().is_empty());
    assert_eq!(server.counters().body_failures, 0);
}

#[test]
fn a_body_that_never_arrives_is_cut_off_at_the_response_deadline() {
    let bytes = site_image(true);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let source = ScriptedSource::new(image, u32::MAX, None);
    let mut server = Server::new(SiteSource::Store(image.index(), &source), config());
    let mut client = Client::open(&mut server);
    let out = drive(
        &mut client,
        &mut server,
        b"GET / HTTP/1.1\r\nHost: pi\r\n\r\n",
        3,
    );
    assert!(out.is_empty());
    let deadline = client.connection.next_deadline().unwrap();
    assert!(deadline.as_micros() > client.now.as_micros());
    client.now = deadline;
    assert_eq!(client.action(), ConnectionAction::Abort);
}
