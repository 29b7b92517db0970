//! The site upload's path through the engine (`bramble_http::upload`): plain HTTP refused,
//! the head to the handler, the body to it in order as it arrives, the answer after the
//! finish, refusals answered at once with the body discarded, a cut or stalled body
//! detached for a resume, and the next request on the connection served as usual.

mod support;

use std::cell::RefCell;

use bramble_hal::Instant;
use bramble_http::upload::{Answer, SiteUpload, UploadHead};
use bramble_http::{Activity, Connection, ConnectionAction, Server};
use support::*;

/// A head as the handler saw it: manifest, signature, offset, length, total.
type Head = (Vec<u8>, Vec<u8>, u64, u64, Option<u64>);

/// A handler that records what it is given and refuses what it is told to.
#[derive(Default)]
struct Recorder {
    /// Heads given: manifest, signature, offset, length, total.
    heads: Vec<Head>,
    /// The body bytes, by offset.
    body: Vec<u8>,
    /// Every write's offset and length.
    writes: Vec<(u64, usize)>,
    finished: u32,
    detached: u32,
    /// Refuse the next head with this answer.
    refuse_head: Option<Answer>,
    /// Refuse a write once the body passes this many bytes.
    refuse_after: Option<u64>,
}

impl SiteUpload for Recorder {
    fn state(&mut self, _now: Instant) -> Answer {
        let received = self.body.len();
        Answer::json(200, |out| write!(out, "{{\"received\":{received}}}"))
    }

    fn begin(&mut self, head: &UploadHead<'_>) -> Result<(), Answer> {
        self.heads.push((
            head.manifest.to_vec(),
            head.signature.to_vec(),
            head.offset,
            head.length,
            head.total,
        ));
        if let Some(answer) = self.refuse_head.take() {
            return Err(answer);
        }
        if head.offset != self.body.len() as u64 {
            return Err(Answer::error(
                416,
                "wrong-offset",
                format_args!("continue at {}", self.body.len()),
            ));
        }
        Ok(())
    }

    fn write(&mut self, offset: u64, data: &[u8], _now: Instant) -> Result<(), Answer> {
        assert_eq!(offset, self.body.len() as u64, "in order, no gap");
        self.writes.push((offset, data.len()));
        self.body.extend_from_slice(data);
        if self
            .refuse_after
            .is_some_and(|limit| self.body.len() as u64 > limit)
        {
            return Err(Answer::error(
                503,
                "card-error",
                format_args!("SD card: timeout"),
            ));
        }
        Ok(())
    }

    fn finish(&mut self, _now: Instant) -> Answer {
        self.finished += 1;
        let len = self.body.len();
        Answer::json(200, |out| write!(out, "{{\"published\":{len}}}"))
    }

    fn detach(&mut self) {
        self.detached += 1;
    }
}

const MANIFEST_HEX: &str = "00112233";
const SIGNATURE_HEX: &str = "aabb";

fn put(body: &[u8], extra: &str) -> Vec<u8> {
    let mut request = format!(
        "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: garden\r\n\
         Bramble-Manifest: {MANIFEST_HEX}\r\nBramble-Signature: {SIGNATURE_HEX}\r\n\
         Content-Length: {}\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

fn secure(server: &mut Server) -> Client {
    let mut client = Client::open(server);
    client.connection = Connection::new();
    client.connection.open_secure(server, client.now);
    client
}

fn json(response: &Response) -> String {
    assert_eq!(response.header("content-type"), Some("application/json"));
    String::from_utf8(response.body.clone()).unwrap()
}

const GET_INDEX: &[u8] = b"GET / HTTP/1.1\r\nHost: garden\r\n\r\n";

#[test]
fn plain_http_is_refused_and_the_connection_goes_on() {
    let image = site_image(true);
    let mut server = server(&image);
    let handler = RefCell::new(Recorder::default());
    server.set_upload(&handler);
    let mut client = Client::open(&mut server);
    let mut request = put(b"0123456789", "");
    request.extend_from_slice(GET_INDEX);
    let responses = client.exchange(&mut server, &request, &[false, false]);
    assert_eq!(responses[0].status, 403);
    assert!(json(&responses[0]).contains("\"error\":\"https-only\""));
    assert_eq!(
        responses[1].status, 200,
        "the body was discarded, not parsed"
    );
    assert!(
        handler.borrow().heads.is_empty(),
        "never reaches the handler"
    );
    let state = one(
        &mut server,
        "GET /.well-known/bramble/site HTTP/1.1\r\nHost: garden\r\n\r\n",
    );
    assert_eq!(state.status, 403, "nor does the state");
}

#[test]
fn without_a_handler_publishing_is_off() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = secure(&mut server);
    let responses = client.exchange(&mut server, &put(b"0123", ""), &[false]);
    assert_eq!(responses[0].status, 403);
    assert!(json(&responses[0]).contains("\"error\":\"publishing-off\""));
}

#[test]
fn the_body_streams_to_the_handler_and_the_answer_follows_the_finish() {
    let image = site_image(true);
    let mut server = server(&image);
    let handler = RefCell::new(Recorder::default());
    server.set_upload(&handler);
    let mut client = secure(&mut server);
    // 40 KiB: more than the request buffer, so most of it never sits there.
    let body: Vec<u8> = (0..40 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    let mut request = put(&body, "");
    request.extend_from_slice(GET_INDEX);
    // In pieces of 1000 bytes: the answer comes only after the last one.
    let mut out = Vec::new();
    for piece in request.chunks(1000) {
        let mut offered = 0;
        while offered < piece.len() {
            offered += client
                .connection
                .receive(&mut server, &piece[offered..], client.now);
            let mut buffer = vec![0u8; 4096];
            let n = client
                .connection
                .transmit(&mut server, &mut buffer, client.now);
            out.extend_from_slice(&buffer[..n]);
        }
        if handler.borrow().body.len() < body.len() {
            assert!(out.is_empty(), "no answer before the body is in");
            assert!(matches!(
                client.connection.activity(),
                Activity::Receiving { .. }
            ));
        }
    }
    out.extend(client.send(&mut server, b""));
    let responses = parse_responses(&out, &[false, false]);
    assert_eq!(responses[0].status, 200);
    assert_eq!(
        json(&responses[0]),
        format!("{{\"published\":{}}}", body.len())
    );
    assert_eq!(responses[1].status, 200, "the next request is served");
    let handler = handler.borrow();
    assert_eq!(handler.body, body);
    assert_eq!(handler.finished, 1);
    assert_eq!(handler.detached, 0);
    assert_eq!(
        handler.heads,
        vec![(
            vec![0x00, 0x11, 0x22, 0x33],
            vec![0xaa, 0xbb],
            0,
            body.len() as u64,
            None
        )]
    );
    // Pieces go on as they come, never gathered first.
    assert!(handler.writes.iter().all(|&(_, len)| len <= 1000));
}

#[test]
fn a_refused_head_is_answered_at_once_and_its_body_discarded() {
    let image = site_image(true);
    let mut server = server(&image);
    let handler = RefCell::new(Recorder {
        refuse_head: Some(Answer::error(
            403,
            "bad-signature",
            format_args!("the signature is not the card's publish key's"),
        )),
        ..Recorder::default()
    });
    server.set_upload(&handler);
    let mut client = secure(&mut server);
    let mut request = put(&[7u8; 5000], "");
    let head_len = request.len() - 5000;
    // The head alone: the answer is out before any body byte.
    let out = client.send(&mut server, &request[..head_len]);
    let responses = parse_responses(&out, &[false]);
    assert_eq!(responses[0].status, 403);
    assert_eq!(
        json(&responses[0]),
        "{\"error\":\"bad-signature\",\"message\":\"the signature is not the card's publish \
         key's\"}"
    );
    request.extend_from_slice(GET_INDEX);
    let responses = client.exchange(&mut server, &request[head_len..], &[false]);
    assert_eq!(responses[0].status, 200, "the body was discarded");
    assert!(handler.borrow().body.is_empty());
    assert_eq!(server.counters().status(403), 1);
}

#[test]
fn a_refusal_mid_body_is_answered_and_the_rest_discarded() {
    let image = site_image(true);
    let mut server = server(&image);
    let handler = RefCell::new(Recorder {
        refuse_after: Some(3000),
        ..Recorder::default()
    });
    server.set_upload(&handler);
    let mut client = secure(&mut server);
    let mut request = put(&[1u8; 20_000], "");
    request.extend_from_slice(GET_INDEX);
    let responses = client.exchange(&mut server, &request, &[false, false]);
    assert_eq!(responses[0].status, 503);
    assert!(json(&responses[0]).contains("card-error"));
    assert_eq!(responses[1].status, 200);
    assert!(
        handler.borrow().body.len() < 20_000,
        "no byte after the refusal"
    );
    assert_eq!(handler.borrow().finished, 0);
}

#[test]
fn a_cut_connection_and_a_stalled_body_detach_and_a_resume_continues() {
    let image = site_image(true);
    let mut server = server(&image);
    let handler = RefCell::new(Recorder::default());
    server.set_upload(&handler);
    let body: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    let request = put(&body, "");
    let head_len = request.len() - body.len();

    // Cut after 3000 body bytes.
    let mut client = secure(&mut server);
    assert!(
        client
            .send(&mut server, &request[..head_len + 3000])
            .is_empty()
    );
    client.connection.close(&mut server);
    assert_eq!(handler.borrow().detached, 1);
    assert_eq!(handler.borrow().body.len(), 3000);

    // The state says how far; a resume from there with Content-Range.
    let mut client = secure(&mut server);
    let state = client.exchange(
        &mut server,
        b"GET /.well-known/bramble/site HTTP/1.1\r\nHost: garden\r\n\r\n",
        &[false],
    );
    assert_eq!(json(&state[0]), "{\"received\":3000}");
    // Stalls after 2000 more: the deadline aborts it.
    let resume = put(&body[3000..], "Content-Range: bytes 3000-9999/10000\r\n");
    let resume_head = resume.len() - 7000;
    assert!(
        client
            .send(&mut server, &resume[..resume_head + 2000])
            .is_empty()
    );
    let deadline = client.connection.next_deadline().unwrap();
    client.now = deadline;
    assert_eq!(client.action(), ConnectionAction::Abort);
    client.connection.close(&mut server);
    assert_eq!(handler.borrow().detached, 2);
    assert_eq!(handler.borrow().heads[1].2, 3000);
    assert_eq!(handler.borrow().heads[1].4, Some(10_000));

    // The rest, and the whole image is in, in order.
    let mut client = secure(&mut server);
    let rest = put(&body[5000..], "Content-Range: bytes 5000-9999/10000\r\n");
    let responses = client.exchange(&mut server, &rest, &[false]);
    assert_eq!(responses[0].status, 200);
    assert_eq!(handler.borrow().body, body);
    assert_eq!(handler.borrow().finished, 1);
}

#[test]
fn bad_framing_and_fields_are_refused() {
    let image = site_image(true);
    let mut server = server(&image);
    let handler = RefCell::new(Recorder::default());
    server.set_upload(&handler);
    for (request, status, code) in [
        (
            "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: g\r\nBramble-Manifest: 00\r\n\
             Bramble-Signature: 00\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            411,
            "length-required",
        ),
        (
            "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: g\r\nBramble-Manifest: 00\r\n\
             Bramble-Signature: 00\r\n\r\n",
            411,
            "length-required",
        ),
        (
            "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: g\r\nBramble-Manifest: 0z\r\n\
             Bramble-Signature: 00\r\nContent-Length: 0\r\n\r\n",
            400,
            "bad-manifest",
        ),
        (
            "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: g\r\nBramble-Manifest: 00\r\n\
             Bramble-Signature: 00\r\nContent-Range: bytes 0-1/3\r\nContent-Length: 2\r\n\r\nab",
            400,
            "bad-range",
        ),
    ] {
        let mut client = secure(&mut server);
        let responses = client.exchange(&mut server, request.as_bytes(), &[false]);
        assert_eq!(responses[0].status, status, "{request}");
        assert!(json(&responses[0]).contains(code), "{request}");
    }
    assert!(handler.borrow().heads.is_empty());
    // A body larger than the engine discards: answered, then the connection closes.
    let mut client = secure(&mut server);
    let request = "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: g\r\n\
                   Bramble-Manifest: 0z\r\nBramble-Signature: 00\r\n\
                   Content-Length: 99999999\r\n\r\n";
    let responses = client.exchange(&mut server, request.as_bytes(), &[false]);
    assert_eq!(responses[0].status, 400);
    assert_eq!(responses[0].header("connection"), Some("close"));
    // Other methods on the path are the site's (405 here).
    let response = one(
        &mut server,
        "DELETE /.well-known/bramble/site HTTP/1.1\r\nHost: g\r\n\r\n",
    );
    assert_eq!(response.status, 405);
}
