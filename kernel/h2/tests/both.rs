//! One table of requests, each answered over HTTP/1.1 and over HTTP/2 by the same engine:
//! same status, same header fields (names lowered, connection fields dropped), same body.
//! Routing, HEAD, conditional requests, ranges, precompressed variants, redirects, the
//! site's `_headers` and the 404 page all come from `bramble_http`; this shows h2 adds only
//! framing.

mod support;

use bramble_hal::Instant;
use bramble_http::Connection;
use bramble_site::{
    FileSpec, HeaderBlockSpec, HeaderEntrySpec, RedirectSpec, SiteImageWriter, VariantSpec,
    http_date,
};
use bramble_testkit::{Parsed, parse_response};
use support::*;

const MTIME: u64 = 784_111_777;
const MTIME_HTTP: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

fn file(path: &str, content_type: &str, body: Vec<u8>, tag: &str) -> FileSpec {
    FileSpec {
        path: path.into(),
        content_type: content_type.into(),
        cache_control: "no-cache".into(),
        last_modified: MTIME,
        last_modified_http: http_date(MTIME),
        identity: VariantSpec {
            body,
            etag: format!("\"{tag}\""),
        },
        gzip: None,
        brotli: None,
    }
}

fn big_body() -> Vec<u8> {
    (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn site() -> Vec<u8> {
    let mut writer = SiteImageWriter::new();
    let mut index = file(
        "/index.html",
        "text/html; charset=utf-8",
        b"<!DOCTYPE html><title>home</title><p>Hello.</p>\n".repeat(20),
        "idx",
    );
    index.gzip = Some(VariantSpec {
        body: b"GZIP-BODY-OF-INDEX".to_vec(),
        etag: "\"idx-gz\"".into(),
    });
    index.brotli = Some(VariantSpec {
        body: b"BR-BODY".to_vec(),
        etag: "\"idx-br\"".into(),
    });
    writer.add(index).unwrap();
    writer
        .add(file(
            "/style.css",
            "text/css; charset=utf-8",
            b"body{color:green}\n".to_vec(),
            "css",
        ))
        .unwrap();
    writer
        .add(file(
            "/dir/index.html",
            "text/html; charset=utf-8",
            b"<p>dir</p>".to_vec(),
            "dir",
        ))
        .unwrap();
    writer
        .add(file(
            "/a b.txt",
            "text/plain; charset=utf-8",
            b"spaced".to_vec(),
            "ab",
        ))
        .unwrap();
    writer
        .add(file(
            "/big.bin",
            "application/octet-stream",
            big_body(),
            "big",
        ))
        .unwrap();
    writer
        .add(file(
            "/empty.txt",
            "text/plain; charset=utf-8",
            Vec::new(),
            "empty",
        ))
        .unwrap();
    writer
        .add(file(
            "/404.html",
            "text/html; charset=utf-8",
            b"<h1>missing</h1>".to_vec(),
            "nf",
        ))
        .unwrap();
    writer
        .set_redirects(vec![RedirectSpec {
            from: "/old".into(),
            to: "/style.css".into(),
            status: 301,
            force: false,
            line: 1,
        }])
        .unwrap();
    writer
        .set_header_blocks(vec![HeaderBlockSpec {
            pattern: "/style.css".into(),
            entries: vec![HeaderEntrySpec {
                name: "X-Robots-Tag".into(),
                value: "noindex".into(),
                remove: false,
            }],
        }])
        .unwrap();
    writer.finish().unwrap()
}

/// Method, path, extra fields, expected status.
type Case = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    u16,
);

const CASES: &[Case] = &[
    ("GET", "/", &[], 200),
    ("HEAD", "/", &[], 200),
    (
        "GET",
        "/index.html",
        &[("accept-encoding", "br, gzip")],
        200,
    ),
    ("GET", "/index.html", &[("accept-encoding", "gzip")], 200),
    ("HEAD", "/index.html", &[("accept-encoding", "gzip")], 200),
    ("GET", "/style.css", &[("if-none-match", "\"css\"")], 304),
    (
        "GET",
        "/style.css",
        &[("if-modified-since", MTIME_HTTP)],
        304,
    ),
    ("GET", "/style.css", &[("if-match", "\"other\"")], 412),
    ("GET", "/big.bin", &[("range", "bytes=100-199")], 206),
    ("GET", "/big.bin", &[("range", "bytes=-50")], 206),
    ("GET", "/big.bin", &[("range", "bytes=999999-")], 416),
    (
        "GET",
        "/big.bin",
        &[("range", "bytes=0-9"), ("if-range", "\"nope\"")],
        200,
    ),
    ("GET", "/big.bin", &[], 200),
    ("GET", "/empty.txt", &[], 200),
    ("GET", "/missing", &[], 404),
    ("HEAD", "/missing", &[], 404),
    ("GET", "/old", &[], 301),
    ("GET", "/dir", &[], 301),
    ("GET", "/dir/", &[], 200),
    ("GET", "/a%20b.txt", &[], 200),
    (
        "GET",
        "/style.css?x=1",
        &[("user-agent", "test"), ("accept", "*/*")],
        200,
    ),
    ("POST", "/", &[], 405),
    ("DELETE", "/style.css", &[], 405),
    ("OPTIONS", "*", &[], 204),
    ("GET", "/%2e%2e/etc/passwd", &[], 400),
    ("GET", "/after-a-400", &[], 404),
];

/// The response over HTTP/1.1, names lowered, connection fields dropped.
fn over_http1(image: &[u8], method: &str, path: &str, extra: &[(&str, &str)]) -> Reply {
    let mut server = server(image);
    let now = Instant::from_micros(1_000_000);
    let mut connection = Connection::new();
    connection.open_secure(&mut server, now);
    let mut text = format!("{method} {path} HTTP/1.1\r\nhost: pi.example\r\n");
    for (name, value) in extra {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    assert_eq!(
        connection.receive(&mut server, text.as_bytes(), now),
        text.len()
    );
    let mut bytes = Vec::new();
    let mut out = vec![0u8; 4096];
    loop {
        let n = connection.transmit(&mut server, &mut out, now);
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&out[..n]);
    }
    let Parsed::Complete(response, _) = parse_response(&bytes, method == "HEAD", false) else {
        panic!("no whole HTTP/1.1 response to {method} {path}");
    };
    Reply {
        status: response.status,
        fields: response
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .filter(|(n, _)| !matches!(n.as_str(), "connection" | "keep-alive"))
            .collect(),
        body: response.body,
        ended: true,
        reset: None,
    }
}

#[test]
fn every_case_answers_the_same_over_both_protocols() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    for (i, (method, path, extra, status)) in CASES.iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        let mut fields = get_fields(method, path);
        fields.extend_from_slice(extra);
        let h2 = peer.fetch(stream, &fields);
        let h1 = over_http1(&image, method, path, extra);
        let what = format!("{method} {path} {extra:?}");
        assert_eq!(h1.status, *status, "HTTP/1.1 {what}");
        assert_eq!(h2.status, *status, "h2 {what}");
        assert_eq!(h2.fields, h1.fields, "fields of {what}");
        assert_eq!(h2.body, h1.body, "body of {what}");
        assert!(h2.ended, "{what} ended its stream");
        assert_eq!(h2.reset, None);
    }
    assert_eq!(peer.goaway, None);
    assert_eq!(peer.session.h2().open_streams(), 0);
}

#[test]
fn concurrent_requests_are_all_answered_in_small_writes() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::wide(&mut server);
    let paths = [
        "/big.bin",
        "/",
        "/style.css",
        "/missing",
        "/a%20b.txt",
        "/big.bin",
    ];
    let mut all = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        all.extend(request(1 + 2 * i as u32, &get_fields("GET", path)));
    }
    peer.send(&all);
    // A socket with little space: frames split across writes.
    peer.pump_with(700);
    for (i, path) in paths.iter().enumerate() {
        let reply = &peer.replies[&(1 + 2 * i as u32)];
        let h1 = over_http1(&image, "GET", path, &[]);
        assert_eq!(reply.status, h1.status, "{path}");
        assert_eq!(reply.body, h1.body, "{path}");
        assert!(reply.ended);
    }
    assert_eq!(peer.replies[&1].body, big_body());
}

#[test]
fn default_windows_are_respected_and_reopened_by_window_updates() {
    let image = site();
    let mut server = server(&image);
    let mut peer = Peer::new(&mut server, &[]);
    peer.send(&request(1, &get_fields("GET", "/big.bin")));
    peer.pump();
    let sent: usize = peer.replies[&1].body.len();
    assert_eq!(sent, 65_535, "the default window, no more");
    let mut total = sent;
    while total < 200_000 {
        peer.send(&window_update(0, 50_000));
        peer.send(&window_update(1, 50_000));
        peer.pump();
        let now = peer.replies[&1].body.len();
        assert!(now - total <= 50_000);
        total = now;
    }
    assert_eq!(peer.replies[&1].body, big_body());
    assert!(peer.replies[&1].ended);
}
