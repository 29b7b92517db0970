//! Shared fixtures for the engine tests: a test site image and a client that drives a
//! `Connection` with byte strings.
#![allow(dead_code)] // each test binary uses a different part of this module

use bramble_hal::Instant;
use bramble_http::{Connection, ConnectionAction, Server, ServerConfig, SiteSource};
use bramble_site::{FileSpec, SiteImageWriter, VariantSpec, http_date};
pub use bramble_testkit::{Parsed, Response, parse_response};

/// Last-Modified of every fixture file: Sun, 06 Nov 1994 08:49:37 GMT.
pub const MTIME: u64 = 784_111_777;
pub const MTIME_HTTP: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

pub fn index_body() -> Vec<u8> {
    b"<!DOCTYPE html><title>home</title><p>Hello from the test site.</p>\n".repeat(4)
}

pub fn big_body() -> Vec<u8> {
    (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn file(path: &str, content_type: &str, cache: &str, body: Vec<u8>, tag: &str) -> FileSpec {
    FileSpec {
        path: path.into(),
        content_type: content_type.into(),
        cache_control: cache.into(),
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

/// The test site: `/index.html` (gzip and br variants), `/style.css`, `/dir/index.html`,
/// `/a b.txt`, `/big.bin`, `/empty.txt`, and `/404.html` when `with_404`.
pub fn site_image(with_404: bool) -> Vec<u8> {
    build_site(with_404, true)
}

/// The test site without `/big.bin`, for loops that validate many images.
pub fn small_site_image() -> Vec<u8> {
    build_site(true, false)
}

fn build_site(with_404: bool, with_big: bool) -> Vec<u8> {
    let mut writer = SiteImageWriter::new();
    let mut index = file(
        "/index.html",
        "text/html; charset=utf-8",
        "no-cache",
        index_body(),
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
            "public, max-age=3600",
            b"body { color: green }\n".to_vec(),
            "css",
        ))
        .unwrap();
    writer
        .add(file(
            "/dir/index.html",
            "text/html; charset=utf-8",
            "no-cache",
            b"<p>dir</p>".to_vec(),
            "dir",
        ))
        .unwrap();
    writer
        .add(file(
            "/a b.txt",
            "text/plain; charset=utf-8",
            "no-cache",
            b"spaced".to_vec(),
            "ab",
        ))
        .unwrap();
    if with_big {
        writer
            .add(file(
                "/big.bin",
                "application/octet-stream",
                "no-cache",
                big_body(),
                "big",
            ))
            .unwrap();
    }
    writer
        .add(file(
            "/empty.txt",
            "text/plain; charset=utf-8",
            "no-cache",
            Vec::new(),
            "empty",
        ))
        .unwrap();
    if with_404 {
        let mut page = file(
            "/404.html",
            "text/html; charset=utf-8",
            "no-cache",
            b"<h1>custom missing page</h1>".to_vec(),
            "nf",
        );
        page.gzip = Some(VariantSpec {
            body: b"GZ404".to_vec(),
            etag: "\"nf-gz\"".into(),
        });
        writer.add(page).unwrap();
    }
    writer.finish().unwrap()
}

pub fn config() -> ServerConfig {
    ServerConfig::default()
}

pub fn server(image: &[u8]) -> Server<'_> {
    Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(image).unwrap()),
        config(),
    )
}

/// Splits `bytes` into responses (through the one response parser of the tests and the
/// bench); `no_body[i]` marks responses to HEAD (no body whatever Content-Length says).
/// Panics on anything that is not a sequence of whole, well-formed responses.
pub fn parse_responses(mut bytes: &[u8], no_body: &[bool]) -> Vec<Response> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let head_request = no_body.get(out.len()).copied().unwrap_or(false);
        // Not at the end of the stream: the engine frames every response it sends, so one
        // that would run to the end is an error here, not a body.
        match parse_response(bytes, head_request, false) {
            Parsed::Complete(response, used) => {
                out.push(response);
                bytes = &bytes[used..];
            }
            Parsed::Partial => {
                panic!("truncated response: {:?}", String::from_utf8_lossy(bytes))
            }
            Parsed::Invalid(why) => panic!("malformed response: {why}"),
        }
    }
    out
}

/// A client driving one connection with a fake clock.
pub struct Client {
    pub connection: Connection,
    pub now: Instant,
    /// Transmit space offered per `transmit` call.
    pub window: usize,
}

impl Client {
    pub fn open(server: &mut Server) -> Self {
        let mut connection = Connection::new();
        let now = Instant::from_micros(1_000_000);
        connection.open(server, now);
        Self {
            connection,
            now,
            window: 1460,
        }
    }

    /// Sends `request` (all of it, transmitting in between when the buffer is full) and
    /// collects every response byte the connection produces.
    pub fn send(&mut self, server: &mut Server, request: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut offered = 0;
        let mut stalls = 0;
        loop {
            if offered < request.len() {
                let n = self
                    .connection
                    .receive(server, &request[offered..], self.now);
                offered += n;
                stalls = if n == 0 { stalls + 1 } else { 0 };
            }
            let mut buffer = vec![0u8; self.window];
            let n = self.connection.transmit(server, &mut buffer, self.now);
            out.extend_from_slice(&buffer[..n]);
            if n == 0 && (offered == request.len() || stalls > 3) {
                break;
            }
        }
        out
    }

    /// Sends `request` and parses the responses.
    pub fn exchange(
        &mut self,
        server: &mut Server,
        request: &[u8],
        no_body: &[bool],
    ) -> Vec<Response> {
        let bytes = self.send(server, request);
        parse_responses(&bytes, no_body)
    }

    pub fn action(&self) -> ConnectionAction {
        self.connection.action(self.now)
    }

    pub fn advance_micros(&mut self, micros: u64) {
        self.now = self.now.add_micros(micros);
    }
}

/// One GET (or other) request on a fresh connection; returns the single response.
pub fn one(server: &mut Server, request: &str) -> Response {
    let mut client = Client::open(server);
    let head = request.starts_with("HEAD ");
    let mut responses = client.exchange(server, request.as_bytes(), &[head]);
    assert_eq!(responses.len(), 1, "one response to {request:?}");
    responses.remove(0)
}
