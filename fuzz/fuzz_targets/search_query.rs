//! Fuzz target: arbitrary bytes as the query string of `/search` and `/search.json` on a
//! small site with a search index (decoding, terms, the query's run, the page written in
//! windows). Every request must be answered, and the connection's invariants hold (see
//! `bramble_http::exercise::run_script`).
#![no_main]

use std::sync::OnceLock;

use bramble_http::{Server, ServerConfig, SiteSource};
use bramble_site::search::build::{SearchDocument, build};
use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};
use libfuzzer_sys::fuzz_target;

fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let pages = [
            ("/index.html", "Home", "Welcome to the café: servers, solar panels and running."),
            ("/docs/install.html", "Installing", "To install, write the card. Installation is quick."),
            ("/blog/index.html", "Blog", "We installed a server; it runs all day. 東京 ok."),
        ];
        let mut writer = SiteImageWriter::new();
        let mut docs = Vec::new();
        for (path, title, text) in pages {
            writer
                .add(FileSpec {
                    path: path.into(),
                    content_type: "text/html; charset=utf-8".into(),
                    cache_control: "no-cache".into(),
                    last_modified: 0,
                    last_modified_http: http_date(0),
                    identity: VariantSpec {
                        body: text.as_bytes().to_vec(),
                        etag: format!("\"{}\"", path.len()),
                    },
                    gzip: None,
                    brotli: None,
                })
                .unwrap();
            docs.push(SearchDocument {
                path: path.into(),
                title: title.into(),
                headings: String::new(),
                text: text.into(),
            });
        }
        writer.set_search(build(&docs, true, Vec::new())).unwrap();
        writer.finish().unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let site = SiteImage::new_checked(image()).unwrap();
    let mut server = Server::new(SiteSource::Ready(site), ServerConfig::default());
    // The bytes, made into one request target (spaces and line ends escaped).
    let mut request = Vec::from(&b"GET /search"[..]);
    if data.first().is_some_and(|b| b & 1 == 1) {
        request.extend_from_slice(b".json");
    }
    request.extend_from_slice(b"?q=");
    for &b in data.iter().skip(1).take(1500) {
        if b <= b' ' || b >= 0x7f {
            request.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            request.push(b);
        }
    }
    request.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
    let mut script = Vec::new();
    for chunk in request.chunks(255) {
        script.extend_from_slice(&[0, chunk.len() as u8]);
        script.extend_from_slice(chunk);
    }
    // Transmit in windows of every size the script picks.
    for window in [1u8, 7, 64, 255] {
        script.extend_from_slice(&[1, window]);
    }
    bramble_http::exercise::run_script(&mut server, &script);
});
