//! A byte-script driver for fuzzing: turns arbitrary bytes into a sequence of receive,
//! transmit, clock and close operations on one connection and checks the invariants.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/request_path.rs`) and the
//! pseudo-random `#[test]` that runs in CI without cargo-fuzz.

use bramble_hal::Instant;

use crate::{Connection, ConnectionAction, Server};

/// Valid request fragments the script can splice in, so that inputs reach deep states
/// (keep-alive, ranges, conditionals, bodies) quickly.
const FRAGMENTS: [&[u8]; 16] = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"HEAD /index.html HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /index.html HTTP/1.1\r\nHost: a\r\nAccept-Encoding: br, gzip;q=0.5\r\n\r\n",
    b"GET /big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=5-",
    b"GET /dir HTTP/1.1\r\nHost: a\r\nIf-None-Match: W/\"x\", *\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789",
    b"GET /%2e%2e/x?y HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    b"\r\n",
    b"GET /missing HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n",
    b"GET /big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=-100\r\nIf-Range: \"big\"\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
    b"GET /a%20b.txt HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    b"X-Header: value\r\n",
];

/// Runs `script` against `server` on a fresh connection, then drains and closes it.
/// Panics if an invariant breaks (bytes counted twice, output larger than the window,
/// a response that never ends, connection counts out of step).
pub fn run_script(server: &mut Server, script: &[u8]) {
    let open_before = server.counters.open_connections;
    let mut connection = Connection::new();
    let mut now = Instant::from_micros(1);
    connection.open(server, now);
    let mut out = [0u8; 4096];
    let mut i = 0;
    while i + 1 < script.len() {
        let (op, arg) = (script[i], script[i + 1]);
        i += 2;
        match op % 5 {
            0 => {
                let len = usize::from(arg).min(script.len() - i);
                let data = &script[i..i + len];
                i += len;
                let consumed = connection.receive(server, data, now);
                assert!(consumed <= data.len());
            }
            1 => {
                let window = (usize::from(arg) * 16 + 1).min(out.len());
                let sent_before = server.counters.bytes_sent;
                let n = connection.transmit(server, &mut out[..window], now);
                assert!(n <= window);
                assert_eq!(server.counters.bytes_sent - sent_before, n as u64);
            }
            2 => {
                now = now.add_micros(u64::from(arg) * 250_000);
                if let Some(deadline) = connection.next_deadline() {
                    assert!(deadline.as_micros() > 0);
                }
                if connection.action(now) != ConnectionAction::KeepOpen {
                    connection.close(server);
                    connection.open(server, now);
                }
            }
            3 => {
                let fragment = FRAGMENTS[usize::from(arg) % FRAGMENTS.len()];
                let consumed = connection.receive(server, fragment, now);
                assert!(consumed <= fragment.len());
            }
            _ => {
                if arg & 1 == 1 {
                    connection.close(server);
                    connection.open(server, now);
                }
            }
        }
    }
    // Drain: every queued response must end.
    let mut rounds = 0;
    while connection.transmit(server, &mut out, now) > 0 {
        rounds += 1;
        assert!(rounds < 100_000, "a response that never ends");
    }
    let _ = connection.action(now);
    connection.close(server);
    assert_eq!(server.counters.open_connections, open_before);
}

/// Makes a mutated image pass the length and checksum checks again (see site/FORMAT.md: the
/// image and body-region lengths follow the bytes given, every segment checksum and the index
/// checksum are recomputed), so that fuzzing reaches the table and string validation.
pub fn reseal_image(bytes: &mut [u8]) {
    if bytes.len() < bramble_site::HEADER_LEN {
        return;
    }
    let get = |bytes: &[u8], at: usize| {
        u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
    };
    let put = |bytes: &mut [u8], at: usize, value: u32| {
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    };
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    let bodies_offset = get(bytes, 48);
    put(bytes, 60, len);
    put(bytes, 52, len.saturating_sub(bodies_offset));
    let index_len = (get(bytes, 16) as usize).min(bytes.len());
    let segment_len = get(bytes, 56) as usize;
    let segments_offset = get(bytes, 36) as usize;
    if segment_len.is_power_of_two()
        && segment_len >= bramble_site::MIN_SEGMENT_LEN as usize
        && (bodies_offset as usize) < bytes.len()
    {
        let body_start = bodies_offset as usize;
        let mut at = segments_offset;
        let mut start = body_start;
        while start < bytes.len() && at.saturating_add(4) <= index_len {
            let end = start.saturating_add(segment_len).min(bytes.len());
            let crc = bramble_site::crc32(&bytes[start..end]);
            // The segment table lies in the index, before the bodies.
            if at + 4 <= body_start {
                put(bytes, at, crc);
            }
            at += 4;
            start = end;
        }
    }
    let at = bramble_site::CHECKSUM_OFFSET;
    bytes[at..at + 4].copy_from_slice(&[0; 4]);
    let crc = bramble_site::crc32(&bytes[..index_len]);
    bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Validates `bytes` as a site image; if accepted, reads every accessor and serves a GET
/// (identity and compressed) for every file, checking the reader's answers are consistent.
/// Returns whether the image was accepted.
pub fn exercise_image(bytes: &[u8]) -> bool {
    let Ok(image) = bramble_site::SiteImage::new_checked(bytes) else {
        return false;
    };
    let _ = (image.checksum(), image.len(), image.not_found_page());
    let mut server = Server::new(
        crate::SiteSource::Ready(image),
        crate::ServerConfig::default(),
    );
    for (index, file) in image.files().enumerate().take(64) {
        assert!(index < image.file_count());
        assert!(matches!(
            image.resolve(file.path),
            bramble_site::Resolved::File(_)
        ));
        for accept in ["identity", "gzip, br"] {
            let mut script = heapless::Vec::<u8, 2048>::new();
            let mut request = heapless::String::<1536>::new();
            if core::fmt::Write::write_fmt(
                &mut request,
                format_args!(
                    "GET {} HTTP/1.1\r\nHost: a\r\nAccept-Encoding: {accept}\r\n\r\n",
                    file.path
                ),
            )
            .is_err()
            {
                continue;
            }
            for chunk in request.as_bytes().chunks(255) {
                let _ = script.extend_from_slice(&[0, chunk.len() as u8]);
                let _ = script.extend_from_slice(chunk);
            }
            run_script(&mut server, &script);
        }
    }
    // Searches, when the site has an index: words from its first titles, odd queries.
    if let Some(search) = image.index().search() {
        for target in [
            "/search?q=a+b+c",
            "/search.json?q=%C3%A9t%C3%A9&page=2",
            "/search?q=%21%21",
            "/search",
        ] {
            let mut script = heapless::Vec::<u8, 256>::new();
            let mut request = heapless::String::<200>::new();
            let _ = core::fmt::Write::write_fmt(
                &mut request,
                format_args!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"),
            );
            let _ = script.extend_from_slice(&[0, request.len() as u8]);
            let _ = script.extend_from_slice(request.as_bytes());
            let _ = script.extend_from_slice(&[1, 255, 1, 255, 1, 255]);
            run_script(&mut server, &script);
        }
        for doc in 0..search.doc_count().min(8) as u32 {
            let title = search.document(doc).title;
            let query = bramble_site::search::Query::parse(title, search.language());
            let mut results = bramble_site::search::Results::EMPTY;
            let _ = search.run(&query, 1, &image, &mut results);
            assert!(results.hits().len() <= bramble_site::search::PAGE_SIZE);
        }
    }
    // Requests the site's rules answer: each redirect pattern with its splat and
    // placeholders filled in, each header block's pattern likewise.
    let index = image.index();
    let redirects = index.redirects();
    let headers = index.header_rules();
    let patterns = (0..redirects.len().min(32))
        .map(|i| redirects.rule(i).from)
        .chain((0..headers.len().min(32)).map(|i| headers.pattern(i)));
    for pattern in patterns {
        let mut request = heapless::String::<1536>::new();
        let _ = request.push_str("GET ");
        for segment in pattern.split('/').skip(1) {
            let _ = request.push('/');
            let segment = if segment.starts_with(':') {
                "v"
            } else {
                segment
            };
            let _ = request.push_str(&segment.replace_star());
        }
        if request.len() == 4 {
            let _ = request.push('/');
        }
        if request.push_str(" HTTP/1.1\r\nHost: a\r\n\r\n").is_err() {
            continue;
        }
        let mut script = heapless::Vec::<u8, 2048>::new();
        for chunk in request.as_bytes().chunks(255) {
            let _ = script.extend_from_slice(&[0, chunk.len() as u8]);
            let _ = script.extend_from_slice(chunk);
        }
        let _ = script.extend_from_slice(&[1, 255, 1, 255]);
        run_script(&mut server, &script);
    }
    true
}

/// A pattern segment as request text: the splat taken as `x`; bytes a request line cannot
/// hold (spaces, controls) percent-encoded.
trait ReplaceStar {
    fn replace_star(&self) -> heapless::String<1024>;
}

impl ReplaceStar for str {
    fn replace_star(&self) -> heapless::String<1024> {
        let mut out = heapless::String::new();
        for &b in self.as_bytes() {
            if b == b'*' {
                let _ = out.push('x');
            } else if b <= b' ' || b >= 0x7f || b == b'%' || b == b'?' || b == b'#' {
                let _ = core::fmt::Write::write_fmt(&mut out, format_args!("%{b:02X}"));
            } else {
                let _ = out.push(char::from(b));
            }
        }
        out
    }
}

/// A `fmt::Write` that keeps nothing, for exercising writers.
struct Discard;

impl core::fmt::Write for Discard {
    fn write_str(&mut self, _: &str) -> core::fmt::Result {
        Ok(())
    }
}

/// Feeds arbitrary bytes to the rule parsers and matchers of the site index: the first byte
/// times 8 is the length of a redirect or header section that follows, then a little-endian
/// `u16` the length of its strings, then the strings, then a request path. Accepted sections are matched against the path and against every
/// rule's own pattern and target; patterns from the bytes are checked and matched too.
/// Panics only if a matcher breaks an invariant (it must never panic on its own).
pub fn exercise_rules(data: &[u8]) {
    use bramble_site::rules::{
        HeaderRules, Redirects, check_pattern, check_target, match_pattern, write_target,
    };
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let section_len = (usize::from(split) * 8).min(rest.len());
    let (section, rest) = rest.split_at(section_len);
    let (strings_len, rest) = match rest {
        [low, high, rest @ ..] => (usize::from(u16::from_le_bytes([*low, *high])), rest),
        _ => (0, rest),
    };
    let (strings, tail) = rest.split_at(strings_len.min(rest.len()));
    let path = core::str::from_utf8(tail).unwrap_or("/");
    let paths = [path, "/", "/a/b/c", "/a/", "/2024/x"];
    if let Ok(redirects) = Redirects::new_checked(section, strings) {
        for index in 0..redirects.len().min(64) {
            let rule = redirects.rule(index);
            for candidate in paths.iter().copied().chain([rule.from, rule.to]) {
                for forced in [false, true] {
                    if let Some(found) = redirects.find(candidate, forced) {
                        let _ = write_target(
                            &mut Discard,
                            found.rule.to,
                            found.rule.from,
                            candidate,
                            &found.captures,
                        );
                    }
                }
            }
        }
    }
    if let Ok(headers) = HeaderRules::new_checked(section, strings) {
        for candidate in paths
            .iter()
            .copied()
            .chain((0..headers.len()).map(|i| headers.pattern(i)))
        {
            let collected = headers.collect(candidate);
            let _ = collected.write(&mut Discard, candidate.len() % 2 == 0);
            let _ = collected.mentions("cache-control");
        }
    }
    // The pattern language on its own: text from the bytes as a pattern, target and path.
    let text = core::str::from_utf8(strings).unwrap_or("/*");
    let (pattern, target) = text.split_at(text.find(' ').unwrap_or(text.len()));
    if check_pattern(pattern).is_ok() {
        for candidate in paths {
            if let Some(captures) = match_pattern(pattern, candidate)
                && check_target(target.trim(), pattern, false).is_ok()
            {
                let _ = write_target(&mut Discard, target.trim(), pattern, candidate, &captures);
            }
        }
    }
}
