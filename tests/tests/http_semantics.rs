//! QEMU end to end, HTTP semantics: conditional requests, ranges, compression, error cases,
//! redirects, HEAD and keep-alive, all through the forwarded port of one booted guest.

mod support;

use std::path::Path;
use support::{Checks, Client, Response, SOURCE_DATE, boot_site, exchange, get, gunzip, unbrotli};

/// A site with a compressible page and stylesheet, an incompressible binary (for ranges),
/// a directory index and its own 404 page.
fn make_site(root: &Path) -> Vec<u8> {
    std::fs::create_dir_all(root.join("docs")).unwrap();
    let mut page = String::from("<!doctype html>\n<title>Semantics</title>\n");
    for i in 0..80 {
        page.push_str(&format!(
            "<p>Paragraph {i} of a page that compresses well.</p>\n"
        ));
    }
    std::fs::write(root.join("index.html"), page).unwrap();
    let css = "body { margin: 0 auto; max-width: 40rem; font-family: sans-serif }\n".repeat(40);
    std::fs::write(root.join("style.css"), css).unwrap();
    let noise: Vec<u8> = (0u32..20_000)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("data.bin"), &noise).unwrap();
    std::fs::write(root.join("docs/index.html"), "<p>docs index</p>\n").unwrap();
    std::fs::write(
        root.join("404.html"),
        "<!doctype html><title>Not here</title><h1>This site's own 404 page</h1>\n",
    )
    .unwrap();
    noise
}

fn has_no_body_headers(response: &Response) -> bool {
    response.header("content-type").is_none() && response.body.is_empty()
}

#[test]
fn http_semantics_through_qemu() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    let noise = make_site(&root);
    let index = std::fs::read(root.join("index.html")).unwrap();
    let css = std::fs::read(root.join("style.css")).unwrap();
    let not_found_page = std::fs::read(root.join("404.html")).unwrap();
    let settings = "access_log = on\nmdns = off\n";
    let served = boot_site(&root, settings);
    let port = served.port;
    let mut c = Checks::default();

    // --- Plain GET: headers a static site should get (issue 5, §2) ---
    let plain = get(port, "/index.html", "");
    let etag = plain.header("etag").unwrap_or("").to_string();
    c.check(
        "GET /index.html is 200 with the file's bytes",
        plain.status == 200 && plain.body == index,
        || plain.head.clone(),
    );
    c.check(
        "Content-Type text/html",
        plain
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        || plain.head.clone(),
    );
    c.check(
        "Content-Length matches",
        plain.header("content-length") == Some(index.len().to_string().as_str()),
        || plain.head.clone(),
    );
    c.check(
        "strong ETag",
        etag.starts_with('"') && etag.ends_with('"') && etag.len() > 2,
        || plain.head.clone(),
    );
    c.check(
        "Last-Modified is SOURCE_DATE_EPOCH",
        plain.header("last-modified") == Some(SOURCE_DATE),
        || plain.head.clone(),
    );
    c.check(
        "Cache-Control present",
        plain.header("cache-control").is_some(),
        || plain.head.clone(),
    );
    c.check(
        "X-Content-Type-Options: nosniff",
        plain.header("x-content-type-options") == Some("nosniff"),
        || plain.head.clone(),
    );
    c.check(
        "Accept-Ranges: bytes",
        plain.header("accept-ranges") == Some("bytes"),
        || plain.head.clone(),
    );
    c.check(
        "Vary: Accept-Encoding on the identity variant",
        plain.lists("vary", "accept-encoding"),
        || plain.head.clone(),
    );
    c.check(
        "no Date header (no clock set)",
        plain.header("date").is_none(),
        || plain.head.clone(),
    );
    c.check(
        "no Content-Encoding without Accept-Encoding",
        plain.header("content-encoding").is_none(),
        || plain.head.clone(),
    );
    let root_page = get(port, "/", "");
    c.check(
        "GET / serves index.html",
        root_page.status == 200 && root_page.body == index,
        || root_page.head.clone(),
    );

    // --- HEAD: the same header fields, no body ---
    let head = exchange(
        port,
        "HEAD /index.html HTTP/1.1\r\nHost: bramble\r\nConnection: close\r\n\r\n",
    );
    let same_headers = [
        "content-type",
        "content-length",
        "etag",
        "last-modified",
        "cache-control",
        "vary",
        "accept-ranges",
    ]
    .iter()
    .all(|name| head.header(name) == plain.header(name));
    c.check(
        "HEAD has GET's headers",
        head.status == 200 && same_headers,
        || format!("{}\n--- GET:\n{}", head.head, plain.head),
    );
    let mut after_head = Client::connect(port);
    after_head.send(b"HEAD /style.css HTTP/1.1\r\nHost: bramble\r\n\r\nGET /docs/ HTTP/1.1\r\nHost: bramble\r\nConnection: close\r\n\r\n");
    let first = after_head.response(true, "HEAD then GET");
    let second = after_head.response(false, "HEAD then GET");
    c.check(
        "HEAD sends no body (the next response follows at once)",
        first.status == 200 && second.status == 200 && second.body == b"<p>docs index</p>\n",
        || format!("{}\n---\n{}", first.head, second.head),
    );

    // --- Conditional requests ---
    let inm = get(port, "/index.html", &format!("If-None-Match: {etag}\r\n"));
    c.check(
        "If-None-Match with the ETag gives 304",
        inm.status == 304,
        || inm.head.clone(),
    );
    c.check(
        "304 repeats ETag, Cache-Control and Vary",
        inm.header("etag") == Some(etag.as_str())
            && inm.header("cache-control") == plain.header("cache-control")
            && inm.lists("vary", "accept-encoding"),
        || inm.head.clone(),
    );
    c.check(
        "304 has no body and no Content-Type",
        has_no_body_headers(&inm),
        || inm.head.clone(),
    );
    let weak = get(port, "/index.html", &format!("If-None-Match: W/{etag}\r\n"));
    c.check(
        "If-None-Match uses weak comparison (W/ form matches)",
        weak.status == 304,
        || weak.head.clone(),
    );
    let list = get(
        port,
        "/index.html",
        &format!("If-None-Match: \"other\", {etag}\r\n"),
    );
    c.check(
        "If-None-Match list containing the ETag gives 304",
        list.status == 304,
        || list.head.clone(),
    );
    let star = get(port, "/index.html", "If-None-Match: *\r\n");
    c.check("If-None-Match: * gives 304", star.status == 304, || {
        star.head.clone()
    });
    let other = get(port, "/index.html", "If-None-Match: \"not-this-one\"\r\n");
    c.check(
        "If-None-Match mismatch gives 200",
        other.status == 200 && other.body == index,
        || other.head.clone(),
    );
    let ims = get(
        port,
        "/index.html",
        &format!("If-Modified-Since: {SOURCE_DATE}\r\n"),
    );
    c.check(
        "If-Modified-Since Last-Modified gives 304",
        ims.status == 304 && has_no_body_headers(&ims),
        || ims.head.clone(),
    );
    let later = get(
        port,
        "/index.html",
        "If-Modified-Since: Wed, 01 Jan 2025 00:00:00 GMT\r\n",
    );
    c.check(
        "If-Modified-Since a later date gives 304",
        later.status == 304,
        || later.head.clone(),
    );
    let older = get(
        port,
        "/index.html",
        "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
    );
    c.check(
        "If-Modified-Since an older date gives 200",
        older.status == 200 && older.body == index,
        || older.head.clone(),
    );
    let precedence = get(
        port,
        "/index.html",
        &format!("If-None-Match: \"nope\"\r\nIf-Modified-Since: {SOURCE_DATE}\r\n"),
    );
    c.check(
        "If-None-Match takes precedence over If-Modified-Since",
        precedence.status == 200,
        || precedence.head.clone(),
    );

    // --- Ranges ---
    let n = noise.len();
    let range = get(port, "/data.bin", "Range: bytes=100-199\r\n");
    c.check(
        "Range bytes=100-199 gives 206 with the slice",
        range.status == 206 && range.body == noise[100..200],
        || range.head.clone(),
    );
    c.check(
        "206 Content-Range bytes 100-199/N",
        range.header("content-range") == Some(format!("bytes 100-199/{n}").as_str()),
        || range.head.clone(),
    );
    let suffix = get(port, "/data.bin", "Range: bytes=-100\r\n");
    c.check(
        "suffix range bytes=-100 gives the last 100 bytes",
        suffix.status == 206 && suffix.body == noise[n - 100..],
        || suffix.head.clone(),
    );
    let open = get(port, "/data.bin", &format!("Range: bytes={}-\r\n", n - 10));
    c.check(
        "open range bytes=N-10- gives the tail",
        open.status == 206 && open.body == noise[n - 10..],
        || open.head.clone(),
    );
    let beyond = get(port, "/data.bin", &format!("Range: bytes={n}-\r\n"));
    c.check(
        "unsatisfiable range gives 416 with Content-Range bytes */N",
        beyond.status == 416
            && beyond.header("content-range") == Some(format!("bytes */{n}").as_str()),
        || beyond.head.clone(),
    );
    let data_etag = get(port, "/data.bin", "")
        .header("etag")
        .unwrap_or("")
        .to_string();
    let if_range = get(
        port,
        "/data.bin",
        &format!("Range: bytes=0-9\r\nIf-Range: {data_etag}\r\n"),
    );
    c.check(
        "If-Range with the current ETag gives 206",
        if_range.status == 206 && if_range.body == noise[..10],
        || if_range.head.clone(),
    );
    let stale = get(
        port,
        "/data.bin",
        "Range: bytes=0-9\r\nIf-Range: \"stale\"\r\n",
    );
    c.check(
        "If-Range with a stale ETag gives the whole file",
        stale.status == 200 && stale.body == noise,
        || stale.head.clone(),
    );
    let head_range = exchange(
        port,
        "HEAD /data.bin HTTP/1.1\r\nHost: b\r\nRange: bytes=0-9\r\nConnection: close\r\n\r\n",
    );
    // RFC 9110 §14.2: range handling is defined for GET only; other methods ignore Range.
    c.check(
        "HEAD ignores Range (200, full length)",
        head_range.status == 200
            && head_range.header("content-length") == Some(n.to_string().as_str()),
        || head_range.head.clone(),
    );
    let raw = get(port, "/data.bin", "Accept-Encoding: gzip, br\r\n");
    c.check(
        "a file without variants is sent as identity",
        raw.status == 200 && raw.header("content-encoding").is_none() && raw.body == noise,
        || raw.head.clone(),
    );

    // --- Compression: the packer's variants ---
    let br = get(port, "/index.html", "Accept-Encoding: br\r\n");
    c.check(
        "Accept-Encoding: br gives the brotli variant",
        br.status == 200 && br.header("content-encoding") == Some("br"),
        || br.head.clone(),
    );
    c.check(
        "brotli body decodes to the file",
        br.header("content-encoding") == Some("br") && unbrotli(&br.body) == index,
        || br.head.clone(),
    );
    c.check(
        "brotli variant is smaller and Vary: Accept-Encoding",
        br.body.len() < index.len() && br.lists("vary", "accept-encoding"),
        || br.head.clone(),
    );
    c.check(
        "brotli ETag differs from identity ETag",
        br.header("etag").is_some_and(|e| e != etag),
        || br.head.clone(),
    );
    let gz = get(port, "/style.css", "Accept-Encoding: gzip\r\n");
    c.check(
        "Accept-Encoding: gzip gives gzip that decodes to the file",
        gz.header("content-encoding") == Some("gzip") && gunzip(&gz.body) == css,
        || gz.head.clone(),
    );
    let both = get(port, "/style.css", "Accept-Encoding: gzip, deflate, br\r\n");
    c.check(
        "gzip, deflate, br picks br",
        both.header("content-encoding") == Some("br") && unbrotli(&both.body) == css,
        || both.head.clone(),
    );
    let refuse = get(port, "/style.css", "Accept-Encoding: gzip;q=0\r\n");
    c.check(
        "gzip;q=0 refuses gzip (identity)",
        refuse.status == 200 && refuse.header("content-encoding").is_none() && refuse.body == css,
        || refuse.head.clone(),
    );
    let prefer = get(
        port,
        "/style.css",
        "Accept-Encoding: br;q=0, gzip;q=0.5\r\n",
    );
    c.check(
        "br;q=0, gzip;q=0.5 gives gzip",
        prefer.header("content-encoding") == Some("gzip"),
        || prefer.head.clone(),
    );
    let br_etag = br.header("etag").unwrap_or("").to_string();
    let br_304 = get(
        port,
        "/index.html",
        &format!("Accept-Encoding: br\r\nIf-None-Match: {br_etag}\r\n"),
    );
    c.check(
        "If-None-Match with the br ETag gives 304 for a br request",
        br_304.status == 304 && br_304.header("etag") == Some(br_etag.as_str()),
        || br_304.head.clone(),
    );
    let br_vs_identity = get(
        port,
        "/index.html",
        &format!("If-None-Match: {br_etag}\r\n"),
    );
    c.check(
        "the br ETag does not validate the identity variant",
        br_vs_identity.status == 200,
        || br_vs_identity.head.clone(),
    );
    let gz_range = get(
        port,
        "/style.css",
        "Accept-Encoding: gzip\r\nRange: bytes=0-1\r\n",
    );
    c.check(
        "ranges apply to the selected variant (gzip magic)",
        gz_range.status == 206 && gz_range.body == [0x1f, 0x8b],
        || gz_range.head.clone(),
    );

    // --- Misses, methods, redirects ---
    let missing = get(port, "/no/such/page.html", "");
    c.check(
        "404 with the site's 404.html",
        missing.status == 404 && missing.body == not_found_page,
        || missing.head.clone(),
    );
    let post = exchange(
        port,
        "POST /index.html HTTP/1.1\r\nHost: b\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    );
    let allow_ok = |r: &Response| r.lists("allow", "GET") && r.lists("allow", "HEAD");
    c.check(
        "POST gives 405 with Allow: GET, HEAD",
        post.status == 405 && allow_ok(&post),
        || post.head.clone(),
    );
    let delete = exchange(
        port,
        "DELETE /index.html HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n",
    );
    c.check(
        "DELETE gives 405 with Allow",
        delete.status == 405 && allow_ok(&delete),
        || delete.head.clone(),
    );
    let options = exchange(
        port,
        "OPTIONS * HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n",
    );
    c.check(
        "OPTIONS is answered with Allow",
        options.status < 300 && allow_ok(&options),
        || options.head.clone(),
    );
    let unknown = exchange(
        port,
        "BREW /index.html HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n",
    );
    c.check(
        "unknown method gives 501 or 405",
        unknown.status == 501 || unknown.status == 405,
        || unknown.head.clone(),
    );
    let redirect = get(port, "/docs?x=1", "");
    c.check(
        "/docs redirects to /docs/ keeping the query",
        (redirect.status == 301 || redirect.status == 308)
            && redirect
                .header("location")
                .is_some_and(|l| l.ends_with("/docs/?x=1")),
        || redirect.head.clone(),
    );
    let query = get(port, "/index.html?v=123", "");
    c.check(
        "a query string is ignored",
        query.status == 200 && query.body == index,
        || query.head.clone(),
    );
    let encoded = get(port, "/%69ndex%2Ehtml", "");
    c.check(
        "percent-decoding",
        encoded.status == 200 && encoded.body == index,
        || encoded.head.clone(),
    );
    let dots = get(port, "/docs/../docs/./index.html", "");
    c.check(
        "dot segments are removed",
        dots.status == 200 && dots.body == b"<p>docs index</p>\n",
        || dots.head.clone(),
    );
    let traversal = get(port, "/../../etc/passwd", "");
    c.check(
        "traversal gets 400 or 404",
        traversal.status == 400 || traversal.status == 404,
        || traversal.head.clone(),
    );
    let encoded_traversal = get(port, "/%2e%2e/%2e%2e/etc/passwd", "");
    c.check(
        "encoded traversal gets 400 or 404",
        encoded_traversal.status == 400 || encoded_traversal.status == 404,
        || encoded_traversal.head.clone(),
    );

    // --- Bad requests: right status, connection closed, others still served ---
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: b\r\n\r\n", "a".repeat(9000));
    let many_headers: String = (0..100).map(|i| format!("X-Header-{i}: {i}\r\n")).collect();
    let big_header = format!("X-Big: {}\r\n", "b".repeat(9000));
    let bad: Vec<(&str, String, &[u16])> = vec![
        ("garbage request line", "HELLO\r\n\r\n".into(), &[400]),
        ("missing Host in HTTP/1.1", "GET / HTTP/1.1\r\n\r\n".into(), &[400]),
        ("header line without a colon", "GET / HTTP/1.1\r\nHost: b\r\nNoColonHere\r\n\r\n".into(), &[400]),
        ("space before the colon", "GET / HTTP/1.1\r\nHost : b\r\n\r\n".into(), &[400]),
        ("Content-Length with Transfer-Encoding", "POST / HTTP/1.1\r\nHost: b\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(), &[400]),
        ("duplicate Content-Length", "GET / HTTP/1.1\r\nHost: b\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".into(), &[400]),
        ("negative Content-Length", "GET / HTTP/1.1\r\nHost: b\r\nContent-Length: -1\r\n\r\n".into(), &[400]),
        ("NUL byte in a header", "GET / HTTP/1.1\r\nHost: b\r\nX-A: a\0b\r\n\r\n".into(), &[400]),
        ("unknown HTTP version", "GET / HTTP/3.0\r\nHost: b\r\n\r\n".into(), &[505]),
        ("request target too long", long_target, &[414]),
        ("too many header fields", format!("GET / HTTP/1.1\r\nHost: b\r\n{many_headers}\r\n"), &[431]),
        ("header section too large", format!("GET / HTTP/1.1\r\nHost: b\r\n{big_header}\r\n"), &[431]),
    ];
    for (name, request, statuses) in bad {
        let mut client = Client::connect(port);
        client.send(request.as_bytes());
        let response = client.try_response(false);
        let status = response.as_ref().map(|r| r.status);
        c.check(
            &format!("{name}: {statuses:?}"),
            status.is_some_and(|s| statuses.contains(&s)),
            || format!("got {:?}", response.as_ref().map(|r| r.head.clone())),
        );
        let closed = client.wait_closed(std::time::Duration::from_secs(30));
        c.check(&format!("{name}: connection closed"), closed, || {
            "still open 30 s after the error".into()
        });
        let after = get(port, "/style.css", "");
        c.check(
            &format!("{name}: next client still served"),
            after.status == 200 && after.body == css,
            || after.head.clone(),
        );
    }

    // --- Connection management ---
    let mut keep = Client::connect(port);
    keep.send(b"GET /style.css HTTP/1.1\r\nHost: b\r\n\r\n");
    let one = keep.response(false, "keep-alive 1");
    keep.send(b"GET /index.html HTTP/1.1\r\nHost: b\r\n\r\n");
    let two = keep.response(false, "keep-alive 2");
    c.check(
        "HTTP/1.1 keeps the connection alive by default",
        one.body == css
            && two.body == index
            && one
                .header("connection")
                .is_none_or(|v| !v.eq_ignore_ascii_case("close")),
        || one.head.clone(),
    );
    keep.send(b"GET /data.bin HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n");
    let three = keep.response(false, "keep-alive 3");
    c.check(
        "Connection: close is honoured",
        three.body == noise && keep.wait_closed(std::time::Duration::from_secs(30)),
        || three.head.clone(),
    );
    let mut old = Client::connect(port);
    old.send(b"GET /style.css HTTP/1.0\r\n\r\n");
    let old_response = old.response(false, "HTTP/1.0");
    c.check(
        "HTTP/1.0 without keep-alive closes after the response",
        old_response.body == css && old.wait_closed(std::time::Duration::from_secs(30)),
        || old_response.head.clone(),
    );
    let mut old_keep = Client::connect(port);
    old_keep.send(b"GET /style.css HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let ok1 = old_keep.response(false, "HTTP/1.0 keep-alive 1");
    old_keep.send(b"GET /docs/ HTTP/1.0\r\n\r\n");
    let ok2 = old_keep.response(false, "HTTP/1.0 keep-alive 2");
    c.check(
        "HTTP/1.0 with Connection: keep-alive stays open",
        ok1.lists("connection", "keep-alive") && ok2.status == 200,
        || ok1.head.clone(),
    );
    let mut body = Client::connect(port);
    body.send(b"GET /style.css HTTP/1.1\r\nHost: b\r\nContent-Length: 11\r\n\r\nhello worldGET /docs/ HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n");
    let with_body = body.response(false, "request with a body");
    let next = body.response(false, "request after a body");
    c.check(
        "a request body is read and discarded, the stream stays in step",
        with_body.body == css && next.status == 200 && next.body == b"<p>docs index</p>\n",
        || format!("{}\n---\n{}", with_body.head, next.head),
    );

    c.finish("HTTP semantics");
}
