//! `/search` and `/search.json` in the engine: ranked results with marked snippets, the
//! site's template, the same bytes through any transmit window and from a body source that
//! reads from a card, HEAD, bounded and odd queries, and the site's headers.

mod support;

use std::cell::RefCell;
use std::collections::HashSet;

use bramble_http::{Server, SiteSource};
use bramble_site::search::build::{SearchDocument, build, template_pieces};
use bramble_site::{
    BodyRequest, BodySource, BodyStatus, FileSpec, HeaderBlockSpec, HeaderEntrySpec, SiteImage,
    SiteImageWriter, VariantSpec, http_date,
};
use support::*;

fn page(path: &str) -> FileSpec {
    FileSpec {
        path: path.into(),
        content_type: "text/html; charset=utf-8".into(),
        cache_control: "no-cache".into(),
        last_modified: MTIME,
        last_modified_http: http_date(MTIME),
        identity: VariantSpec {
            body: b"<p>page</p>".to_vec(),
            etag: format!("\"{}\"", path.len()),
        },
        gzip: None,
        brotli: None,
    }
}

fn doc(path: &str, title: &str, text: &str) -> SearchDocument {
    SearchDocument {
        path: path.into(),
        title: title.into(),
        headings: String::new(),
        text: text.into(),
    }
}

fn site(template: Option<&str>) -> Vec<u8> {
    let mut docs = vec![
        doc(
            "/docs/install.html",
            "Installing <Bramble>",
            "To install Bramble, write the card image. Installation takes a minute, then the \
             server boots and answers on port 80.",
        ),
        doc(
            "/blog/index.html",
            "Blog",
            "We installed a server on a solar panel: the server runs all day & all night.",
        ),
        doc("/about.html", "About", "People, not servers."),
    ];
    // Filler pages, so that results span pages and the text spans body segments.
    for i in 0..40 {
        docs.push(doc(
            &format!("/notes/{i:02}.html"),
            &format!("Note {i}"),
            &format!(
                "{} common words of note number {i}.",
                "padding text ".repeat(600)
            ),
        ));
    }
    let mut writer = SiteImageWriter::new();
    for d in &docs {
        writer.add(page(&d.path)).unwrap();
    }
    let pieces = template.map_or(Vec::new(), |t| template_pieces(t).unwrap());
    writer.set_search(build(&docs, true, pieces)).unwrap();
    writer
        .set_header_blocks(vec![HeaderBlockSpec {
            pattern: "/search".into(),
            entries: vec![HeaderEntrySpec {
                name: "X-Robots-Tag".into(),
                value: "noindex".into(),
                remove: false,
            }],
        }])
        .unwrap();
    writer.finish().unwrap()
}

fn get(server: &mut Server, target: &str) -> Response {
    one(
        server,
        &format!("GET {target} HTTP/1.1\r\nHost: example.test\r\n\r\n"),
    )
}

fn text(response: &Response) -> String {
    String::from_utf8(response.body.clone()).unwrap()
}

#[test]
fn results_are_ranked_with_marked_snippets() {
    let image = site(None);
    let mut server = support::server(&image);
    let r = get(&mut server, "/search?q=install+server");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(
        r.header("x-robots-tag"),
        Some("noindex"),
        "the site's _headers apply"
    );
    assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));
    let body = text(&r);
    assert_eq!(
        r.header("content-length"),
        Some(body.len().to_string().as_str())
    );
    let install = body.find("href=\"/docs/install.html\"").unwrap();
    let blog = body.find("href=\"/blog/\"").unwrap();
    assert!(install < blog, "the page about installing ranks first");
    assert!(body.contains("2 results for <strong>install server</strong>"));
    assert!(
        body.contains("Installing &lt;Bramble&gt;"),
        "titles are escaped"
    );
    assert!(body.contains("<mark>install</mark>"));
    assert!(body.contains("<mark>Installation</mark>"));
    assert!(body.contains("<mark>server</mark>"));
    assert!(!body.contains("<script"));
    assert!(body.contains("value=\"install server\""));
}

#[test]
fn json_answers_the_same() {
    let image = site(None);
    let mut server = support::server(&image);
    let r = get(&mut server, "/search.json?q=solar%20PANELS");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = text(&r);
    assert!(body.starts_with("{\"query\":\"solar PANELS\",\"terms\":[\"solar\",\"panel\"]"));
    assert!(body.contains("\"total\":1,\"all_terms\":true"));
    assert!(body.contains("\"url\":\"/blog/\""));
    assert!(body.contains("<mark>solar</mark> <mark>panel</mark>"));
    assert!(
        body.contains("all day & all night"),
        "plain snippet unescaped"
    );
}

#[test]
fn the_sites_template_frames_the_results() {
    let image = site(Some(
        "<!DOCTYPE html><title>Find: {{query}}</title><h1>My site</h1>{{results}}<footer>f</footer>",
    ));
    let mut server = support::server(&image);
    let body = text(&get(&mut server, "/search?q=%3Cb%3Esolar"));
    assert!(body.starts_with("<!DOCTYPE html><title>Find: &lt;b&gt;solar</title><h1>My site</h1>"));
    assert!(body.contains("<section class=\"bramble-search\""));
    assert!(body.ends_with("</section>\n<footer>f</footer>"));
}

#[test]
fn pages_and_head_and_small_windows() {
    let image = site(None);
    let mut server = support::server(&image);
    let first = text(&get(&mut server, "/search?q=common"));
    assert!(first.contains("40 results for"));
    assert!(first.contains("page 1 of 4"));
    assert!(first.contains("page=2\">Next"));
    let third = text(&get(&mut server, "/search?q=common&page=3"));
    assert!(third.contains("<ol class=\"bramble-search-results\" start=\"21\">"));
    assert!(third.contains("Previous</a>"));

    // HEAD gives the GET's length and no body.
    let mut client = Client::open(&mut server);
    let r = client.exchange(
        &mut server,
        b"HEAD /search?q=common HTTP/1.1\r\nHost: a\r\n\r\n",
        &[true],
    );
    assert_eq!(
        r[0].header("content-length"),
        Some(first.len().to_string().as_str())
    );
    assert!(r[0].body.is_empty());

    // Byte for byte the same through a tiny transmit window.
    let mut client = Client::open(&mut server);
    client.window = 37;
    let r = client.exchange(
        &mut server,
        b"GET /search?q=common HTTP/1.1\r\nHost: a\r\n\r\n",
        &[false],
    );
    assert_eq!(text(&r[0]), first);
}

#[test]
fn bounded_and_odd_queries() {
    let image = site(None);
    let mut server = support::server(&image);
    let r = get(&mut server, "/search?q=%21%40%23%24%25%5E%26*()%2C.%3B");
    assert_eq!(r.status, 200);
    assert!(text(&r).contains("no words to search for"));
    let r = get(&mut server, "/search");
    assert!(text(&r).contains("Type one or more words"));
    let many: Vec<String> = (0..200).map(|i| format!("w{i}")).collect();
    let r = get(&mut server, &format!("/search?q={}", many.join("+")));
    assert_eq!(r.status, 200);
    let body = text(&r);
    assert!(body.contains("Only the first 8 different words were searched for"));
    let long = "install+".repeat(240);
    let r = get(&mut server, &format!("/search.json?q={long}"));
    assert_eq!(r.status, 200);
    assert!(text(&r).contains("only its first 256 bytes were read"));
    // A 4 KiB target is refused before the search runs.
    let r = get(&mut server, &format!("/search?q={}", "a".repeat(4096)));
    assert_eq!(r.status, 414);
    // Bad escapes and bytes that are not UTF-8 are spaces.
    let r = get(&mut server, "/search?q=%FFsolar%zz");
    assert!(text(&r).contains("href=\"/blog/\""));
}

/// A body source like the card store: every segment is "not yet" the first time it is asked
/// for, then cached; optionally every read fails.
struct Card<'a> {
    image: SiteImage<'a>,
    cached: RefCell<HashSet<u32>>,
    fail: bool,
    reads: RefCell<u32>,
}

impl BodySource for Card<'_> {
    fn read(&self, request: BodyRequest, out: &mut [u8]) -> BodyStatus {
        if self.fail {
            return BodyStatus::Failed;
        }
        let segment_len = self.image.index().segment_len();
        let at = request.body.offset + request.offset;
        if self.cached.borrow_mut().insert(at / segment_len) {
            *self.reads.borrow_mut() += 1;
            return BodyStatus::Pending;
        }
        let n = out.len().min((segment_len - at % segment_len) as usize);
        self.image.read(request, &mut out[..n])
    }
}

#[test]
fn waits_for_the_card_and_fails_cleanly() {
    let bytes = site(None);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let expected = text(&get(&mut support::server(&bytes), "/search?q=common+words"));

    let card = Card {
        image,
        cached: RefCell::new(HashSet::new()),
        fail: false,
        reads: RefCell::new(0),
    };
    let mut server = Server::new(SiteSource::Store(image.index(), &card), config());
    let mut client = Client::open(&mut server);
    let request = b"GET /search?q=common+words HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(
        client.connection.receive(&mut server, request, client.now),
        request.len()
    );
    let mut out = Vec::new();
    for _ in 0..200 {
        let mut buffer = vec![0u8; 1460];
        let n = client
            .connection
            .transmit(&mut server, &mut buffer, client.now);
        out.extend_from_slice(&buffer[..n]);
    }
    let responses = parse_responses(&out, &[false]);
    assert_eq!(text(&responses[0]), expected);
    assert!(
        *card.reads.borrow() >= 2,
        "postings and text came from the card"
    );

    let failing = Card {
        image,
        cached: RefCell::new(HashSet::new()),
        fail: true,
        reads: RefCell::new(0),
    };
    let mut server = Server::new(SiteSource::Store(image.index(), &failing), config());
    let r = get(&mut server, "/search?q=install");
    assert_eq!(r.status, 500);
}

#[test]
fn no_index_no_search() {
    // A site packed without --search: /search is an ordinary path (here: a miss).
    let image = site_image(true);
    let mut server = support::server(&image);
    assert_eq!(get(&mut server, "/search?q=x").status, 404);
}

#[test]
fn a_few_searches_at_once_then_503() {
    let bytes = site(None);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let card = Card {
        image,
        cached: RefCell::new(HashSet::new()),
        fail: false,
        reads: RefCell::new(0),
    };
    let mut server = Server::new(SiteSource::Store(image.index(), &card), config());
    let request = b"GET /search?q=install HTTP/1.1\r\nHost: a\r\n\r\n";
    // Each client's search waits for the card: it holds a slot meanwhile.
    let mut clients: Vec<Client> = (0..5).map(|_| Client::open(&mut server)).collect();
    for client in &mut clients {
        client.connection.receive(&mut server, request, client.now);
    }
    let mut outputs = vec![Vec::new(); clients.len()];
    for _ in 0..50 {
        for (client, out) in clients.iter_mut().zip(&mut outputs) {
            let mut buffer = vec![0u8; 4096];
            let n = client
                .connection
                .transmit(&mut server, &mut buffer, client.now);
            out.extend_from_slice(&buffer[..n]);
        }
    }
    let statuses: Vec<u16> = outputs
        .iter()
        .map(|out| parse_responses(out, &[false])[0].status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 200, 503]);
    // The slots are free again.
    for client in &mut clients {
        client.connection.close(&mut server);
    }
    let r = get(&mut server, "/search?q=install");
    assert_eq!(r.status, 200);
}

#[test]
fn a_stale_slot_never_shows_one_visitor_anothers_results() {
    // Four slow readers take every search slot and read a little of their pages; after the
    // slots go stale, a new visitor's search takes one over. The slow reader whose slot it was
    // must not go on to read the visitor's results (with its query echoed in them).
    let bytes = site(None);
    let mut server = support::server(&bytes);
    let request = b"GET /search?q=common+words HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut slow: Vec<Client> = (0..4).map(|_| Client::open(&mut server)).collect();
    let mut outputs = Vec::new();
    for client in &mut slow {
        let n = client.connection.receive(&mut server, request, client.now);
        assert_eq!(n, request.len());
        let mut buffer = vec![0u8; 600];
        let n = client
            .connection
            .transmit(&mut server, &mut buffer, client.now);
        assert!(n > 0, "the head and the start of the page went out");
        outputs.push(buffer[..n].to_vec());
    }
    let stale = config().limits.response_micros;
    let mut visitor = Client::open(&mut server);
    visitor.advance_micros(stale + 1_000_000);
    let request = b"GET /search?q=people HTTP/1.1\r\nHost: a\r\n\r\n";
    let n = visitor
        .connection
        .receive(&mut server, request, visitor.now);
    assert_eq!(n, request.len());
    // The visitor's page is under way (its slot held) while the slow readers read on.
    let mut visited = vec![0u8; 200];
    let n = visitor
        .connection
        .transmit(&mut server, &mut visited, visitor.now);
    visited.truncate(n);

    for (client, out) in slow.iter_mut().zip(&mut outputs) {
        client.advance_micros(stale + 2_000_000);
        for _ in 0..400 {
            let mut buffer = vec![0u8; 1460];
            let n = client
                .connection
                .transmit(&mut server, &mut buffer, client.now);
            out.extend_from_slice(&buffer[..n]);
        }
        let seen = String::from_utf8_lossy(out);
        assert!(
            !seen.contains("value=\"people\"") && !seen.contains("About"),
            "a slow reader received another visitor's search"
        );
        client.connection.close(&mut server);
    }
    // The slow readers' closes did not free the visitor's slot under it: its page is whole.
    for _ in 0..400 {
        let mut buffer = vec![0u8; 1460];
        let n = visitor
            .connection
            .transmit(&mut server, &mut buffer, visitor.now);
        visited.extend_from_slice(&buffer[..n]);
    }
    let responses = parse_responses(&visited, &[false]);
    assert_eq!(responses[0].status, 200);
    assert!(text(&responses[0]).contains("value=\"people\""));
    // And the slots work for the next searches.
    let r = get(&mut server, "/search?q=people");
    assert_eq!(r.status, 200);
    assert!(text(&r).contains("value=\"people\""));
}
