//! Behaviour of the engine against a real site image: methods, paths, validators, ranges,
//! content negotiation, persistence, bad input, deadlines and counters.

mod support;

use bramble_hal::Instant;
use bramble_http::{Connection, ConnectionAction, Server, ServerConfig, SiteSource};
use support::*;

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: example.test\r\n{extra}\r\n")
}

#[test]
fn get_serves_file_with_every_header() {
    let image = site_image(true);
    let mut server = server(&image);
    let r = one(&mut server, &get("/style.css", ""));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"body { color: green }\n");
    assert_eq!(r.header("content-type"), Some("text/css; charset=utf-8"));
    assert_eq!(r.header("content-length"), Some("22"));
    assert_eq!(r.header("etag"), Some("\"css\""));
    assert_eq!(r.header("last-modified"), Some(MTIME_HTTP));
    assert_eq!(r.header("cache-control"), Some("public, max-age=3600"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("date"), None, "no clock, no Date");
    assert_eq!(r.header("vary"), None, "no variants, nothing varies");
    assert_eq!(r.header("connection"), None);
}

#[test]
fn large_body_is_streamed_through_small_windows() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    client.window = 537;
    let r = client.exchange(&mut server, get("/big.bin", "").as_bytes(), &[false]);
    assert_eq!(r[0].status, 200);
    assert_eq!(r[0].body, big_body());
}

#[test]
fn head_has_get_headers_and_no_body() {
    let image = site_image(true);
    let mut server = server(&image);
    let g = one(&mut server, &get("/index.html", ""));
    let h = one(&mut server, "HEAD /index.html HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(h.status, 200);
    assert_eq!(g.headers, h.headers);
    assert!(h.body.is_empty());
    // And the HEAD of an error page carries its length but not its body.
    let mut client = Client::open(&mut server);
    let bytes = client.send(&mut server, b"HEAD /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = parse_responses(&bytes, &[true]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].status, 404);
    assert!(
        r[0].header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 0
    );
}

#[test]
fn options_and_method_errors_carry_allow() {
    let image = site_image(true);
    let mut server = server(&image);
    for request in [
        "OPTIONS / HTTP/1.1\r\nHost: x\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let r = one(&mut server, request);
        assert_eq!(r.status, 204);
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
        assert_eq!(r.header("content-length"), None);
    }
    for method in ["POST", "PUT", "DELETE", "PATCH", "TRACE"] {
        let r = one(
            &mut server,
            &format!("{method} /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
        );
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    }
    let r = one(&mut server, "BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 501);
    // Methods are case-sensitive: "get" is not GET.
    assert_eq!(
        one(&mut server, "get / HTTP/1.1\r\nHost: x\r\n\r\n").status,
        501
    );
}

#[test]
fn paths_are_decoded_normalised_and_query_ignored() {
    let image = site_image(true);
    let mut server = server(&image);
    let cases = [
        ("/a%20b.txt", &b"spaced"[..]),
        ("/style.css?v=3&x=%zz", b"body { color: green }\n"),
        ("/dir/./../style.css", b"body { color: green }\n"),
        ("//style.css", b"body { color: green }\n"),
        ("/dir/", b"<p>dir</p>"),
        ("/dir/index.html", b"<p>dir</p>"),
        ("/%64ir/", b"<p>dir</p>"),
        ("http://example.test/style.css", b"body { color: green }\n"),
    ];
    for (path, body) in cases {
        let r = one(&mut server, &get(path, ""));
        assert_eq!((r.status, r.body.as_slice()), (200, body), "{path}");
    }
    assert_eq!(one(&mut server, &get("/", "")).body, index_body());
}

#[test]
fn traversal_and_malformed_targets_are_refused() {
    let image = site_image(true);
    let mut server = server(&image);
    for path in [
        "/../etc/passwd",
        "/%2e%2e/secret",
        "/dir/../../x",
        "/..%2f..%2fetc",
        "/a%00b",
        "/%zz",
        "style.css",
    ] {
        let r = one(&mut server, &get(path, ""));
        assert_eq!(r.status, 400, "{path}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    }
    assert_eq!(one(&mut server, &get("/%ff%fe", "")).status, 404);
}

#[test]
fn directory_without_slash_redirects() {
    let image = site_image(true);
    let mut server = server(&image);
    let r = one(&mut server, &get("/dir", ""));
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/dir/"));
    let r = one(&mut server, &get("/%64ir?q=1", ""));
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/dir/?q=1"));
}

#[test]
fn misses_get_the_sites_404_page_or_a_builtin_one() {
    let image = site_image(true);
    let mut server = server(&image);
    let r = one(&mut server, &get("/missing.html", ""));
    assert_eq!(r.status, 404);
    assert_eq!(r.body, b"<h1>custom missing page</h1>");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    let r = one(
        &mut server,
        &get("/missing.html", "Accept-Encoding: gzip\r\n"),
    );
    assert_eq!((r.status, r.body.as_slice()), (404, &b"GZ404"[..]));
    assert_eq!(r.header("content-encoding"), Some("gzip"));

    let bare = site_image(false);
    let mut server = support::server(&bare);
    let r = one(&mut server, &get("/missing.html", ""));
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains("404 Not Found"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
}

#[test]
fn if_none_match_gives_304_with_validators_only() {
    let image = site_image(true);
    let mut server = server(&image);
    for inm in [
        "\"idx\"",
        "W/\"idx\"",
        "\"other\", \"idx\"",
        "*",
        "\"a\",W/\"idx\"",
    ] {
        let r = one(
            &mut server,
            &get("/index.html", &format!("If-None-Match: {inm}\r\n")),
        );
        assert_eq!(r.status, 304, "{inm}");
        assert_eq!(r.header("etag"), Some("\"idx\""));
        assert_eq!(r.header("cache-control"), Some("no-cache"));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(r.header("content-type"), None);
        assert_eq!(r.header("content-length"), None);
        assert!(r.body.is_empty());
    }
    let r = one(
        &mut server,
        &get("/index.html", "If-None-Match: \"nope\"\r\n"),
    );
    assert_eq!(r.status, 200);
    // A cached identity ETag does not validate the brotli variant.
    let r = one(
        &mut server,
        &get(
            "/index.html",
            "If-None-Match: \"idx\"\r\nAccept-Encoding: br\r\n",
        ),
    );
    assert_eq!((r.status, r.header("etag")), (200, Some("\"idx-br\"")));
    let r = one(
        &mut server,
        &get(
            "/index.html",
            "If-None-Match: \"idx-br\"\r\nAccept-Encoding: br\r\n",
        ),
    );
    assert_eq!((r.status, r.header("etag")), (304, Some("\"idx-br\"")));
}

#[test]
fn if_modified_since_and_precedence() {
    let image = site_image(true);
    let mut server = server(&image);
    let r = one(
        &mut server,
        &get(
            "/style.css",
            &format!("If-Modified-Since: {MTIME_HTTP}\r\n"),
        ),
    );
    assert_eq!(r.status, 304);
    let r = one(
        &mut server,
        &get(
            "/style.css",
            "If-Modified-Since: Sunday, 06-Nov-94 08:49:38 GMT\r\n",
        ),
    );
    assert_eq!(r.status, 304);
    let r = one(
        &mut server,
        &get(
            "/style.css",
            "If-Modified-Since: Sat, 05 Nov 1994 08:49:37 GMT\r\n",
        ),
    );
    assert_eq!(r.status, 200);
    let r = one(
        &mut server,
        &get("/style.css", "If-Modified-Since: not a date\r\n"),
    );
    assert_eq!(r.status, 200);
    // If-None-Match wins over If-Modified-Since, both ways.
    let r = one(
        &mut server,
        &get(
            "/style.css",
            &format!("If-None-Match: \"x\"\r\nIf-Modified-Since: {MTIME_HTTP}\r\n"),
        ),
    );
    assert_eq!(r.status, 200);
    let r = one(
        &mut server,
        &get(
            "/style.css",
            "If-None-Match: \"css\"\r\nIf-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT\r\n",
        ),
    );
    assert_eq!(r.status, 304);
}

#[test]
fn if_match_and_if_unmodified_since_give_412() {
    let image = site_image(true);
    let mut server = server(&image);
    assert_eq!(
        one(&mut server, &get("/style.css", "If-Match: \"css\"\r\n")).status,
        200
    );
    assert_eq!(
        one(&mut server, &get("/style.css", "If-Match: *\r\n")).status,
        200
    );
    assert_eq!(
        one(&mut server, &get("/style.css", "If-Match: W/\"css\"\r\n")).status,
        412
    );
    assert_eq!(
        one(&mut server, &get("/style.css", "If-Match: \"zzz\"\r\n")).status,
        412
    );
    assert_eq!(
        one(
            &mut server,
            &get(
                "/style.css",
                "If-Unmodified-Since: Sat, 05 Nov 1994 00:00:00 GMT\r\n"
            )
        )
        .status,
        412
    );
    assert_eq!(
        one(
            &mut server,
            &get(
                "/style.css",
                &format!("If-Unmodified-Since: {MTIME_HTTP}\r\n")
            )
        )
        .status,
        200
    );
}

#[test]
fn byte_ranges() {
    let image = site_image(true);
    let mut server = server(&image);
    let big = big_body();
    let n = big.len();
    let r = one(&mut server, &get("/big.bin", "Range: bytes=10-19\r\n"));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &big[10..20]);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 10-19/{n}").as_str())
    );
    assert_eq!(r.header("content-length"), Some("10"));
    let r = one(&mut server, &get("/big.bin", "Range: bytes=-5\r\n"));
    assert_eq!((r.status, r.body.as_slice()), (206, &big[n - 5..]));
    let r = one(
        &mut server,
        &get("/big.bin", &format!("Range: bytes={}-\r\n", n - 3)),
    );
    assert_eq!((r.status, r.body.as_slice()), (206, &big[n - 3..]));
    let r = one(
        &mut server,
        &get("/big.bin", "Range: bytes=0-999999999\r\n"),
    );
    assert_eq!((r.status, r.body.len()), (206, n));
    let r = one(
        &mut server,
        &get("/big.bin", &format!("Range: bytes={n}-\r\n")),
    );
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{n}").as_str())
    );
    assert!(r.body.is_empty());
    let r = one(&mut server, &get("/empty.txt", "Range: bytes=0-\r\n"));
    assert_eq!(
        (r.status, r.header("content-range")),
        (416, Some("bytes */0"))
    );
    // Several ranges, a bad unit or bad syntax: the whole file.
    for range in ["bytes=0-1,5-6", "lines=1-2", "bytes=5-1"] {
        let r = one(
            &mut server,
            &get("/big.bin", &format!("Range: {range}\r\n")),
        );
        assert_eq!((r.status, r.body.len()), (200, n), "{range}");
    }
    // HEAD ignores Range.
    let r = one(
        &mut server,
        "HEAD /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn if_range_guards_ranges() {
    let image = site_image(true);
    let mut server = server(&image);
    let r = one(
        &mut server,
        &get("/big.bin", "Range: bytes=0-1\r\nIf-Range: \"big\"\r\n"),
    );
    assert_eq!(r.status, 206);
    let r = one(
        &mut server,
        &get("/big.bin", "Range: bytes=0-1\r\nIf-Range: \"old\"\r\n"),
    );
    assert_eq!(r.status, 200);
    let r = one(
        &mut server,
        &get("/big.bin", "Range: bytes=0-1\r\nIf-Range: W/\"big\"\r\n"),
    );
    assert_eq!(r.status, 200, "weak tags never satisfy If-Range");
    let r = one(
        &mut server,
        &get(
            "/big.bin",
            &format!("Range: bytes=0-1\r\nIf-Range: {MTIME_HTTP}\r\n"),
        ),
    );
    assert_eq!(r.status, 206);
    let r = one(
        &mut server,
        &get(
            "/big.bin",
            "Range: bytes=0-1\r\nIf-Range: Sat, 05 Nov 1994 08:49:37 GMT\r\n",
        ),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn accept_encoding_selects_variants() {
    let image = site_image(true);
    let mut server = server(&image);
    let cases = [
        ("", &index_body()[..], None, "\"idx\""),
        (
            "Accept-Encoding: gzip, deflate, br\r\n",
            b"BR-BODY",
            Some("br"),
            "\"idx-br\"",
        ),
        (
            "Accept-Encoding: gzip\r\n",
            b"GZIP-BODY-OF-INDEX",
            Some("gzip"),
            "\"idx-gz\"",
        ),
        (
            "Accept-Encoding: br;q=0.5, gzip\r\n",
            b"GZIP-BODY-OF-INDEX",
            Some("gzip"),
            "\"idx-gz\"",
        ),
        (
            "Accept-Encoding: gzip;q=0\r\n",
            &index_body()[..],
            None,
            "\"idx\"",
        ),
        (
            "Accept-Encoding: identity\r\n",
            &index_body()[..],
            None,
            "\"idx\"",
        ),
        (
            "Accept-Encoding: *\r\n",
            b"BR-BODY",
            Some("br"),
            "\"idx-br\"",
        ),
    ];
    for (header, body, encoding, etag) in cases {
        let r = one(&mut server, &get("/index.html", header));
        assert_eq!(r.status, 200, "{header}");
        assert_eq!(r.body, body, "{header}");
        assert_eq!(r.header("content-encoding"), encoding, "{header}");
        assert_eq!(r.header("etag"), Some(etag), "{header}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{header}");
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    }
    // Ranges apply to the selected variant.
    let r = one(
        &mut server,
        &get("/index.html", "Accept-Encoding: br\r\nRange: bytes=0-1\r\n"),
    );
    assert_eq!((r.status, r.body.as_slice()), (206, &b"BR"[..]));
    assert_eq!(r.header("content-range"), Some("bytes 0-1/7"));
}

#[test]
fn keep_alive_and_pipelining_answer_in_order() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let paths = [
        "/style.css",
        "/a%20b.txt",
        "/dir/",
        "/big.bin",
        "/missing",
        "/",
        "/style.css",
        "/dir",
        "/empty.txt",
        "/a%20b.txt",
    ];
    let mut pipelined = String::new();
    for path in paths {
        pipelined.push_str(&get(path, ""));
    }
    let responses = client.exchange(&mut server, pipelined.as_bytes(), &[false; 10]);
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 404, 200, 200, 301, 200, 200]);
    assert_eq!(responses[1].body, b"spaced");
    assert_eq!(responses[3].body, big_body());
    assert_eq!(client.action(), ConnectionAction::KeepOpen);
    // The same connection keeps serving.
    let again = client.exchange(&mut server, get("/style.css", "").as_bytes(), &[false]);
    assert_eq!(again[0].status, 200);
    assert_eq!(server.counters().requests, 11);
}

#[test]
fn requests_split_byte_by_byte_still_parse() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let request = get("/style.css", "Accept: */*\r\n");
    let mut out = Vec::new();
    for byte in request.as_bytes() {
        assert_eq!(
            client
                .connection
                .receive(&mut server, std::slice::from_ref(byte), client.now),
            1
        );
        let mut buffer = [0u8; 4096];
        let n = client
            .connection
            .transmit(&mut server, &mut buffer, client.now);
        out.extend_from_slice(&buffer[..n]);
    }
    let r = parse_responses(&out, &[false]);
    assert_eq!(r[0].body, b"body { color: green }\n");
}

/// Sends `request` one byte per `receive` call, as a client sending one byte per TCP segment
/// would, and returns what the connection answered.
fn send_byte_by_byte(client: &mut Client, server: &mut Server, request: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for byte in request {
        client
            .connection
            .receive(server, std::slice::from_ref(byte), client.now);
        let mut buffer = [0u8; 4096];
        let n = client.connection.transmit(server, &mut buffer, client.now);
        out.extend_from_slice(&buffer[..n]);
    }
    out
}

#[test]
fn a_long_header_sent_byte_by_byte_is_parsed_once_per_line() {
    // Review L1: past MAX_TARGET_LEN + 32 buffered bytes the engine re-parsed the whole
    // buffer twice for every byte that arrived, so a 6 KiB header sent one byte per segment
    // cost about 12,000 parses of up to 6 KiB each. Parses are counted, not timed.
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let long_value = "v".repeat(6000);
    let request = get(
        "/style.css",
        &format!("X-Long: {long_value}\r\nAccept: */*\r\n"),
    );
    let lines = request.matches('\n').count() as u64;
    let out = send_byte_by_byte(&mut client, &mut server, request.as_bytes());
    let r = parse_responses(&out, &[false]);
    assert_eq!(r[0].status, 200);
    let parses = server.counters().header_parses;
    // One parse for the first byte, one per line end, one when the line grew past any
    // valid request line.
    assert!(
        parses <= lines + 2,
        "{parses} parses for {} bytes in {lines} lines",
        request.len()
    );

    // A request line that never ends is still refused as soon as it is too long, and that
    // too takes a bounded number of parses.
    let before = server.counters().header_parses;
    let mut client = Client::open(&mut server);
    let endless = format!("GET /{}", "a".repeat(bramble_http::MAX_TARGET_LEN + 100));
    let out = send_byte_by_byte(&mut client, &mut server, endless.as_bytes());
    assert_eq!(parse_responses(&out, &[false])[0].status, 414);
    let parses = server.counters().header_parses - before;
    assert!(parses <= 2, "{parses} parses for an endless request line");
}

#[test]
fn pipelined_input_is_held_back_while_a_response_is_sent() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let paths = ["/style.css", "/a%20b.txt", "/dir/"];
    let many: String = (0..900).map(|i| get(paths[i % 3], "")).collect();
    assert!(many.len() > 4 * bramble_http::REQUEST_BUFFER_LEN);
    let consumed = client
        .connection
        .receive(&mut server, many.as_bytes(), client.now);
    assert!(
        consumed < many.len(),
        "backpressure: {consumed} of {}",
        many.len()
    );
    // Draining the responses lets the rest in; all are answered, in order.
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 1000];
    let n = client
        .connection
        .transmit(&mut server, &mut buffer, client.now);
    bytes.extend_from_slice(&buffer[..n]);
    bytes.extend(client.send(&mut server, &many.as_bytes()[consumed..]));
    let responses = parse_responses(&bytes, &[false; 900]);
    assert_eq!(responses.len(), 900);
    let bodies: [&[u8]; 3] = [b"body { color: green }\n", b"spaced", b"<p>dir</p>"];
    for (i, r) in responses.iter().enumerate() {
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, bodies[i % 3]),
            "response {i}"
        );
    }
}

#[test]
fn connection_close_and_http_1_0_rules() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let r = client.exchange(
        &mut server,
        get("/style.css", "Connection: close\r\n").as_bytes(),
        &[false],
    );
    assert_eq!(r[0].header("connection"), Some("close"));
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
    // Bytes after a close are not answered.
    assert!(
        client
            .send(&mut server, get("/style.css", "").as_bytes())
            .is_empty()
    );

    let mut client = Client::open(&mut server);
    let r = client.exchange(&mut server, b"GET /style.css HTTP/1.0\r\n\r\n", &[false]);
    assert_eq!(
        (r[0].status, r[0].header("connection")),
        (200, Some("close"))
    );
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);

    let mut client = Client::open(&mut server);
    let two = "GET /style.css HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".repeat(2);
    let r = client.exchange(&mut server, two.as_bytes(), &[false, false]);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].header("connection"), Some("keep-alive"));
    assert_eq!(client.action(), ConnectionAction::KeepOpen);
}

#[test]
fn request_bodies_are_read_and_discarded() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let body = "x".repeat(20_000);
    let request = format!(
        "POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}GET /style.css HTTP/1.1\r\nHost: x\r\n\r\n",
        body.len()
    );
    let r = client.exchange(&mut server, request.as_bytes(), &[false, false]);
    assert_eq!(r.iter().map(|r| r.status).collect::<Vec<_>>(), [405, 200]);
    // A GET with a small body, the body arriving in pieces.
    let mut client = Client::open(&mut server);
    let mut bytes = client.send(
        &mut server,
        b"GET /a%20b.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab",
    );
    bytes.extend(client.send(&mut server, b"cde"));
    bytes.extend(client.send(&mut server, get("/style.css", "").as_bytes()));
    let r = parse_responses(&bytes, &[false, false]);
    assert_eq!(r.iter().map(|r| r.status).collect::<Vec<_>>(), [200, 200]);
    assert_eq!(r[1].body, b"body { color: green }\n");
    // Too large a body: 413 and close.
    let r = one(
        &mut server,
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n",
    );
    assert_eq!((r.status, r.header("connection")), (413, Some("close")));
}

/// Each malformed request gets its status and, where the stream cannot be trusted, a close.
#[test]
fn bad_input_gets_the_right_status_and_closes() {
    let image = site_image(true);
    let mut server = server(&image);
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(3000));
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(9000)
    );
    let many_headers = format!(
        "GET / HTTP/1.1\r\nHost: x\r\n{}\r\n",
        "X-A: 1\r\n".repeat(60)
    );
    let cases: Vec<(&str, String, u16)> = vec![
        ("garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\x7f\x03\x03\r\n\r\n".into(), 400),
        ("words", "HELLO THERE\r\n\r\n".into(), 400),
        ("no version", "GET /\r\n\r\n".into(), 400),
        ("missing host", "GET / HTTP/1.1\r\n\r\n".into(), 400),
        ("two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".into(), 400),
        ("bad host", "GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n".into(), 400),
        ("no colon", "GET / HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n".into(), 400),
        ("space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n".into(), 400),
        ("folded", "GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  continued\r\n\r\n".into(), 400),
        ("cl+te", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc".into(), 400),
        ("duplicate cl", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc".into(), 400),
        ("negative cl", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".into(), 400),
        ("list cl", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n".into(), 400),
        ("te in 1.0", "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n".into(), 400),
        ("unknown te", "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n".into(), 501),
        ("nul in header", "GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n".into(), 400),
        ("nul in target", "GET /a\0b HTTP/1.1\r\nHost: x\r\n\r\n".into(), 400),
        ("http/2.0", "GET / HTTP/2.0\r\nHost: x\r\n\r\n".into(), 505),
        ("http/3", "GET / HTTP/3\r\nHost: x\r\n\r\n".into(), 505),
        ("lowercase version", "GET / http/1.1\r\nHost: x\r\n\r\n".into(), 400),
        ("long target", long_target, 414),
        ("big header", big_header, 431),
        ("many headers", many_headers, 431),
    ];
    for (name, request, status) in cases {
        let mut client = Client::open(&mut server);
        let bytes = client.send(&mut server, request.as_bytes());
        let r = parse_responses(&bytes, &[false]);
        assert_eq!(r.len(), 1, "{name}");
        assert_eq!(r[0].status, status, "{name}");
        assert_eq!(r[0].header("connection"), Some("close"), "{name}");
        assert_eq!(
            r[0].header("x-content-type-options"),
            Some("nosniff"),
            "{name}"
        );
        assert_eq!(
            client.action(),
            ConnectionAction::CloseWhenFlushed,
            "{name}"
        );
        client.connection.close(&mut server);
    }
    // A target longer than any request line, without its end yet, is refused at once.
    let mut client = Client::open(&mut server);
    let bytes = client.send(&mut server, format!("GET /{}", "a".repeat(4000)).as_bytes());
    assert_eq!(parse_responses(&bytes, &[false])[0].status, 414);
    // And everyone else is still served.
    assert_eq!(one(&mut server, &get("/style.css", "")).status, 200);
    assert_eq!(server.counters().open_connections, 2);
}

#[test]
fn chunked_request_bodies_are_skipped_and_the_connection_stays_in_step() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let request = "POST /form HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                   5\r\nhello\r\n10;ext=1\r\n0123456789abcdef\r\n0\r\nX-Trailer: t\r\n\r\n\
                   GET /a%20b.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    // Byte by byte and all at once: the framing is followed either way.
    let r = client.exchange(&mut server, request.as_bytes(), &[false, false]);
    assert_eq!(r.iter().map(|r| r.status).collect::<Vec<_>>(), [405, 200]);
    assert_eq!(r[1].body, b"spaced");
    let mut client = Client::open(&mut server);
    let mut bytes = Vec::new();
    for byte in request.as_bytes() {
        bytes.extend(client.send(&mut server, std::slice::from_ref(byte)));
    }
    let r = parse_responses(&bytes, &[false, false]);
    assert_eq!(r.iter().map(|r| r.status).collect::<Vec<_>>(), [405, 200]);
    assert_eq!(client.action(), ConnectionAction::KeepOpen);
}

#[test]
fn broken_chunked_framing_closes_after_the_response() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let request = "GET /style.css HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                   zz\r\nGET /a%20b.txt HTTP/1.1\r\nHost: x\r\n\r\n";
    let r = client.exchange(&mut server, request.as_bytes(), &[false, false]);
    assert_eq!(r.len(), 1, "nothing after broken framing is answered");
    assert_eq!(r[0].status, 200);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
    // A chunked body larger than the limit is cut off the same way.
    let mut config = ServerConfig::default();
    config.limits.max_body_bytes = 100;
    let mut small = Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(&image).unwrap()),
        config,
    );
    let mut client = Client::open(&mut small);
    let big = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n200\r\n{}",
        "x".repeat(512)
    );
    let r = client.exchange(&mut small, big.as_bytes(), &[false]);
    assert_eq!(r[0].status, 405);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
}

#[test]
fn unavailable_site_gets_a_503_diagnostic_page() {
    let mut server = Server::new(
        SiteSource::Unavailable("SITE.BIN: checksum mismatch <stored 1234>"),
        ServerConfig::default(),
    );
    for request in [
        get("/", ""),
        get("/anything", ""),
        "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n".into(),
    ] {
        let r = one(&mut server, &request);
        assert_eq!(r.status, 503);
        let page = String::from_utf8(r.body.clone()).unwrap();
        assert!(
            page.contains("SITE.BIN: checksum mismatch &lt;stored 1234&gt;"),
            "{page}"
        );
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    }
    assert_eq!(server.counters().status(503), 3);
    // The addresses the network layer gives are shown too.
    server.set_addresses("10.0.0.2/24, 2001:db8::5/64");
    let page = String::from_utf8(one(&mut server, &get("/", "")).body).unwrap();
    assert!(
        page.contains("&lt;stored 1234&gt; (This server: 10.0.0.2/24, 2001:db8::5/64.)"),
        "{page}"
    );
    assert!(!page.contains("HTTPS"), "{page}");
}

#[test]
fn the_diagnostic_page_shows_the_notice_escaped_in_a_paragraph_of_its_own() {
    let mut server = Server::new(
        SiteSource::Unavailable("SITE.BIN not found on the SD card"),
        ServerConfig::default(),
    );
    server.set_addresses("10.0.0.2/24");
    server.set_notice("HTTPS is not running: tls_key <K&Y>.PEM: not on the card.");
    let r = one(&mut server, &get("/", ""));
    assert_eq!(r.status, 503);
    let page = String::from_utf8(r.body.clone()).unwrap();
    assert!(
        page.contains(
            "<p>SITE.BIN not found on the SD card (This server: 10.0.0.2/24.)</p>\n\
             <p>HTTPS is not running: tls_key &lt;K&amp;Y&gt;.PEM: not on the card.</p>\n"
        ),
        "{page}"
    );
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    // The longest notice, addresses and problem that the server keeps, each full of
    // characters that escaping lengthens, still give a whole page: the notice is dropped
    // first, then the detail, never the page.
    let long = "<&>".repeat(300);
    let mut server = Server::new(SiteSource::Unavailable(&long), ServerConfig::default());
    server.set_addresses(&"2001:db8::1/64, ".repeat(30));
    server.set_notice(&"&".repeat(1000));
    assert_eq!(server.notice().len(), bramble_http::NOTICE_LEN);
    let r = one(&mut server, &get("/", ""));
    assert_eq!(r.status, 503);
    let page = String::from_utf8(r.body.clone()).unwrap();
    assert!(page.contains("<h1>503 Service Unavailable</h1>"), "{page}");
    assert!(page.ends_with("</html>\n"), "{page}");
    // An empty notice removes it.
    server.set_notice("");
    assert_eq!(server.notice(), "");
}

#[test]
fn date_header_only_once_the_clock_is_set() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    server.set_wall_clock(MTIME, client.now);
    client.advance_micros(2_500_000);
    let r = client.exchange(&mut server, get("/style.css", "").as_bytes(), &[false]);
    assert_eq!(r[0].header("date"), Some("Sun, 06 Nov 1994 08:49:39 GMT"));
}

fn limits_server(image: &[u8]) -> Server<'_> {
    let mut config = ServerConfig::default();
    config.limits.first_byte_micros = 1_000;
    config.limits.header_micros = 2_000;
    config.limits.idle_micros = 3_000;
    config.limits.response_micros = 4_000;
    config.limits.min_send_bytes_per_second = 0;
    Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(image).unwrap()),
        config,
    )
}

#[test]
fn deadlines_cut_off_silent_slow_and_idle_clients() {
    let image = site_image(true);
    let mut server = limits_server(&image);

    // Never sends a byte.
    let mut client = Client::open(&mut server);
    let opened = client.now;
    assert_eq!(
        client.connection.next_deadline(),
        Some(opened.add_micros(1_000))
    );
    client.advance_micros(999);
    assert_eq!(client.action(), ConnectionAction::KeepOpen);
    client.advance_micros(1);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
    client.connection.close(&mut server);
    assert_eq!(server.counters().timeouts, 1);

    // Slowloris: a header that never ends.
    let mut client = Client::open(&mut server);
    client.send(&mut server, b"GET / HTTP/1.1\r\nHost: x\r\n");
    assert_eq!(
        client.connection.next_deadline(),
        Some(client.now.add_micros(2_000))
    );
    client.advance_micros(1_500);
    client.send(&mut server, b"X-Slow: 1\r\n");
    assert_eq!(client.action(), ConnectionAction::KeepOpen);
    client.advance_micros(500);
    assert_eq!(client.action(), ConnectionAction::Abort);
    client.connection.close(&mut server);

    // Idle keep-alive after a response.
    let mut client = Client::open(&mut server);
    client.exchange(&mut server, get("/style.css", "").as_bytes(), &[false]);
    let done = client.now;
    assert_eq!(
        client.connection.next_deadline(),
        Some(done.add_micros(3_000))
    );
    client.advance_micros(3_000);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
    client.connection.close(&mut server);

    // A client that does not read its response.
    let mut client = Client::open(&mut server);
    client
        .connection
        .receive(&mut server, get("/big.bin", "").as_bytes(), client.now);
    let mut buffer = [0u8; 100];
    assert_eq!(
        client
            .connection
            .transmit(&mut server, &mut buffer, client.now),
        100
    );
    assert!(client.connection.is_responding());
    client.advance_micros(3_999);
    assert_eq!(client.action(), ConnectionAction::KeepOpen);
    client.advance_micros(1);
    assert_eq!(client.action(), ConnectionAction::Abort);
    client.connection.close(&mut server);
    assert_eq!(server.counters().timeouts, 4);
    assert_eq!(server.counters().open_connections, 0);
}

#[test]
fn counters_track_requests_bytes_statuses_and_connections() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let bytes = client.send(
        &mut server,
        format!(
            "{}{}{}",
            get("/style.css", ""),
            get("/missing", ""),
            get("/dir", "")
        )
        .as_bytes(),
    );
    let c = server.counters();
    assert_eq!(c.requests, 3);
    assert_eq!(c.bytes_sent, bytes.len() as u64);
    assert_eq!((c.status(200), c.status(404), c.status(301)), (1, 1, 1));
    assert_eq!(c.errors(), 1);
    assert_eq!((c.open_connections, c.connections_accepted), (1, 1));
    let line = c.to_string();
    assert!(
        line.contains("requests=3") && line.contains("404=1"),
        "{line}"
    );
    client.connection.close(&mut server);
    assert_eq!(server.counters().open_connections, 0);
}

#[test]
fn requests_per_connection_are_capped() {
    let image = site_image(true);
    let mut config = ServerConfig::default();
    config.limits.max_requests_per_connection = 2;
    let mut server = Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(&image).unwrap()),
        config,
    );
    let mut client = Client::open(&mut server);
    let r = client.exchange(
        &mut server,
        get("/style.css", "").repeat(3).as_bytes(),
        &[false; 3],
    );
    assert_eq!(r.len(), 2);
    assert_eq!(r[1].header("connection"), Some("close"));
}

#[test]
fn a_fresh_connection_is_closed_and_reusable() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut connection = Connection::new();
    assert!(!connection.is_open());
    assert_eq!(
        connection.action(Instant(0)),
        ConnectionAction::CloseWhenFlushed
    );
    connection.open(&mut server, Instant(5));
    connection.close(&mut server);
    connection.open(&mut server, Instant(6));
    assert!(connection.is_open());
    assert_eq!(server.counters().open_connections, 1);
}

#[test]
fn non_ascii_targets_do_not_confuse_the_parser() {
    let image = site_image(true);
    let mut server = server(&image);
    for target in [
        "htt\u{e9}p://x/",
        "http\u{e9}://x/",
        "/caf\u{e9}",
        "h\u{e9}",
    ] {
        let mut client = Client::open(&mut server);
        let bytes = client.send(
            &mut server,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        );
        let r = parse_responses(&bytes, &[false]);
        assert!(
            matches!(r[0].status, 400 | 404),
            "{target}: {}",
            r[0].status
        );
    }
}

#[test]
fn blank_lines_between_requests_are_ignored() {
    let image = site_image(true);
    let mut server = limits_server(&image);
    let mut client = Client::open(&mut server);
    let r = client.exchange(
        &mut server,
        b"GET /style.css HTTP/1.1\r\nHost: x\r\n\r\n\r\n",
        &[false],
    );
    assert_eq!(r.len(), 1);
    // The stray CRLF leaves the connection idle (idle deadline), not mid-request.
    assert_eq!(
        client.connection.next_deadline(),
        Some(client.now.add_micros(3_000))
    );
    let r = client.exchange(
        &mut server,
        b"\r\nGET /a%20b.txt HTTP/1.1\r\nHost: x\r\n\r\n",
        &[false],
    );
    assert_eq!(r[0].body, b"spaced");
}

#[test]
fn a_response_whose_image_went_away_is_aborted() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    client
        .connection
        .receive(&mut server, get("/big.bin", "").as_bytes(), client.now);
    let mut buffer = [0u8; 1000];
    assert_eq!(
        client
            .connection
            .transmit(&mut server, &mut buffer, client.now),
        1000
    );
    // The loop swapped in a (much smaller) image mid-response: the body range is gone.
    let small = small_site_image();
    let mut other = support::server(&small);
    client
        .connection
        .transmit(&mut other, &mut buffer, client.now);
    assert_eq!(client.action(), ConnectionAction::Abort);
}

#[test]
fn garbage_without_a_line_end_is_refused_at_once() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    // The start of a TLS ClientHello: no newline anywhere.
    let bytes = client.send(&mut server, b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03");
    let r = parse_responses(&bytes, &[false]);
    assert_eq!(
        (r[0].status, r[0].header("connection")),
        (400, Some("close"))
    );
}

#[test]
fn higher_http_1_minor_versions_are_read_as_1_1() {
    let image = site_image(true);
    let mut server = server(&image);
    let r = one(&mut server, "GET /style.css HTTP/1.7\r\nHost: x\r\n\r\n");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"body { color: green }\n"[..])
    );
    // Leading blank lines do not hide the request line from the version check.
    let r = one(&mut server, "\r\n\r\nGET / HTTP/2.0\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 505);
    let r = one(&mut server, "\r\nGET / HTTP/1.2\r\nHost: x\r\n\r\n");
    assert_eq!(r.status, 200);
}

#[test]
fn a_connection_stays_small() {
    // The socket pool is sized from RAM; keep a connection near its two buffers.
    let size = std::mem::size_of::<Connection>();
    let buffers = bramble_http::REQUEST_BUFFER_LEN + bramble_http::RESPONSE_HEAD_LEN;
    assert!(size < buffers + 512, "{size} bytes");
}

#[test]
fn large_responses_get_time_in_proportion_to_their_size() {
    let image = site_image(true);
    let mut config = ServerConfig::default();
    config.limits.response_micros = 1_000_000;
    config.limits.min_send_bytes_per_second = 100_000;
    let mut server = Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(&image).unwrap()),
        config,
    );
    let mut client = Client::open(&mut server);
    client
        .connection
        .receive(&mut server, get("/big.bin", "").as_bytes(), client.now);
    let start = client.now;
    let mut buffer = [0u8; 100];
    client
        .connection
        .transmit(&mut server, &mut buffer, client.now);
    // 200,000 body bytes plus the head at 100,000 B/s: a little over 2 s on top of 1 s.
    let deadline = client.connection.next_deadline().unwrap();
    let allowed = deadline.micros_since(start);
    assert!((3_000_000..3_010_000).contains(&allowed), "{allowed}");
    client.now = deadline;
    assert_eq!(client.action(), ConnectionAction::Abort);
}
