//! Switching the served site between requests (`Server::switch_site`, issue 28): new requests
//! get the new site and its ETags on every connection, a response already being sent finishes
//! byte for byte from the site it started with, the old site retires once its last response
//! is done, and a response whose site was retired early is cut, never finished from another.

mod support;

use bramble_http::{ConnectionAction, Server, SiteSource};
use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};
use support::{Client, big_body, config, index_body, one, parse_responses, site_image};

/// The bytes of the new site's `/big.bin`: as long as the old one's, other bytes.
fn new_big_body() -> Vec<u8> {
    big_body().iter().map(|b| b ^ 0x5a).collect()
}

fn file(path: &str, body: Vec<u8>, tag: &str) -> FileSpec {
    FileSpec {
        path: path.into(),
        content_type: "text/html; charset=utf-8".into(),
        cache_control: "no-cache".into(),
        last_modified: 0,
        last_modified_http: http_date(0),
        identity: VariantSpec {
            body,
            etag: format!("\"{tag}\""),
        },
        gzip: None,
        brotli: None,
    }
}

/// The new site: another `/index.html` and `/big.bin`, and `/new.html`.
fn new_site() -> Vec<u8> {
    let mut writer = SiteImageWriter::new();
    writer
        .add(file(
            "/index.html",
            b"<p>the new site</p>".to_vec(),
            "new-idx",
        ))
        .unwrap();
    writer
        .add(file("/big.bin", new_big_body(), "new-big"))
        .unwrap();
    writer
        .add(file("/new.html", b"<p>new page</p>".to_vec(), "new"))
        .unwrap();
    writer.finish().unwrap()
}

/// Starts `GET path` on `client` and takes `rounds` windows of it.
fn start(client: &mut Client, server: &mut Server, path: &str, rounds: usize) -> Vec<u8> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: pi\r\n\r\n");
    assert_eq!(
        client
            .connection
            .receive(server, request.as_bytes(), client.now),
        request.len()
    );
    take(client, server, rounds)
}

/// Up to `rounds` more transmit windows of `client`'s response.
fn take(client: &mut Client, server: &mut Server, rounds: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rounds {
        let mut buffer = vec![0u8; client.window];
        let n = client.connection.transmit(server, &mut buffer, client.now);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buffer[..n]);
    }
    out
}

#[test]
fn new_requests_get_the_new_site_while_a_response_in_flight_finishes_from_the_old() {
    let old_bytes = site_image(true);
    let new_bytes = new_site();
    let old = SiteImage::new_checked(&old_bytes).unwrap();
    let new = SiteImage::new_checked(&new_bytes).unwrap();
    let mut server = Server::new(SiteSource::Ready(old), config());
    let old_index = one(&mut server, "GET / HTTP/1.1\r\nHost: pi\r\n\r\n");
    assert_eq!(old_index.body, index_body());

    // A large response starts from the old site: a few windows of it go out.
    let mut slow = Client::open(&mut server);
    let mut got = start(&mut slow, &mut server, "/big.bin", 5);
    assert!(slow.connection.is_responding());
    assert_eq!(server.retiring_responses(), None);

    assert!(server.switch_site(SiteSource::Ready(new)));
    assert_eq!(server.site_generation(), 1);
    assert_eq!(server.retiring_responses(), Some(1));
    // A second switch waits for the first to retire.
    assert!(!server.switch_site(SiteSource::Ready(old)));

    // New requests, on a new connection and on a kept-alive one, get the new site.
    let new_index = one(&mut server, "GET / HTTP/1.1\r\nHost: pi\r\n\r\n");
    assert_eq!(new_index.body, b"<p>the new site</p>");
    assert_ne!(new_index.header("etag"), old_index.header("etag"));
    assert_eq!(new_index.header("etag"), Some("\"new-idx\""));
    assert_eq!(
        one(&mut server, "GET /new.html HTTP/1.1\r\nHost: pi\r\n\r\n").status,
        200
    );
    assert_eq!(
        one(&mut server, "GET /style.css HTTP/1.1\r\nHost: pi\r\n\r\n").status,
        404,
        "the old site's page is gone"
    );
    let mut fresh = Client::open(&mut server);
    let fresh_big = start(&mut fresh, &mut server, "/big.bin", 10_000);
    assert_eq!(
        parse_responses(&fresh_big, &[false])[0].body,
        new_big_body()
    );

    // The response in flight finishes from the old site, byte for byte.
    got.extend(take(&mut slow, &mut server, 10_000));
    let responses = parse_responses(&got, &[false]);
    assert_eq!(responses.len(), 1);
    assert_eq!(responses[0].status, 200);
    assert!(responses[0].body == big_body(), "the old site's bytes");
    assert_eq!(server.retiring_responses(), Some(0));
    assert!(server.retire_site());
    assert_eq!(server.retiring_responses(), None);

    // The same connection's next request gets the new site.
    let next = start(&mut slow, &mut server, "/", 100);
    assert_eq!(
        parse_responses(&next, &[false])[0].body,
        b"<p>the new site</p>"
    );
    assert_eq!(server.counters().body_failures, 0);
}

#[test]
fn a_response_whose_site_retired_early_is_cut_not_finished_from_the_new_site() {
    let old_bytes = site_image(true);
    let new_bytes = new_site();
    let old = SiteImage::new_checked(&old_bytes).unwrap();
    let new = SiteImage::new_checked(&new_bytes).unwrap();
    let mut server = Server::new(SiteSource::Ready(old), config());
    let mut slow = Client::open(&mut server);
    let got = start(&mut slow, &mut server, "/big.bin", 3);
    assert!(!got.is_empty());
    assert!(server.switch_site(SiteSource::Ready(new)));
    // The caller gave up waiting (its deadline passed): the old site is gone.
    assert!(server.retire_site());
    let rest = take(&mut slow, &mut server, 10_000);
    assert!(
        rest.is_empty(),
        "no byte of the new site in the old response"
    );
    assert_eq!(slow.action(), ConnectionAction::Abort);
    assert_eq!(server.counters().body_failures, 1);
    slow.connection.close(&mut server);
    // A connection closed mid-response is no longer counted against any site.
    assert!(server.switch_site(SiteSource::Ready(old)));
    assert_eq!(server.retiring_responses(), Some(0));
}

#[test]
fn responses_cut_by_a_close_stop_counting_against_the_retiring_site() {
    let old_bytes = site_image(true);
    let new_bytes = new_site();
    let old = SiteImage::new_checked(&old_bytes).unwrap();
    let new = SiteImage::new_checked(&new_bytes).unwrap();
    let mut server = Server::new(SiteSource::Ready(old), config());
    let mut clients: Vec<Client> = (0..3).map(|_| Client::open(&mut server)).collect();
    for client in &mut clients {
        start(client, &mut server, "/big.bin", 2);
    }
    assert!(server.switch_site(SiteSource::Ready(new)));
    assert_eq!(server.retiring_responses(), Some(3));
    for (left, client) in clients.iter_mut().enumerate().rev() {
        client.connection.close(&mut server);
        assert_eq!(server.retiring_responses(), Some(left as u32));
    }
}
