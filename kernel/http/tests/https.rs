//! The engine's HTTPS side: `https = only` redirects plain requests (308, method kept, ACME
//! challenges excepted), HSTS on secure connections only.

mod support;

use bramble_http::{Connection, Server, ServerConfig, SiteSource};
use support::*;

fn server_with<'a>(image: &'a [u8], config: ServerConfig) -> Server<'a> {
    Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(image).unwrap()),
        config,
    )
}

fn only(port: u16) -> ServerConfig {
    ServerConfig {
        redirect_to_https_port: Some(port),
        hsts_seconds: Some(31_536_000),
        ..ServerConfig::default()
    }
}

fn secure_client(server: &mut Server) -> Client {
    let mut client = Client::open(server);
    client.connection = Connection::new();
    client.connection.open_secure(server, client.now);
    client
}

#[test]
fn plain_requests_are_redirected_to_the_same_target_over_https() {
    let image = site_image(true);
    let mut server = server_with(&image, only(443));
    let response = one(
        &mut server,
        "GET /docs/page.html?x=1 HTTP/1.1\r\nHost: example.test:80\r\n\r\n",
    );
    assert_eq!(response.status, 308);
    assert_eq!(
        response.header("location"),
        Some("https://example.test/docs/page.html?x=1")
    );
    assert_eq!(
        response.header("strict-transport-security"),
        None,
        "never over HTTP"
    );
    let post = one(
        &mut server,
        "POST /form HTTP/1.1\r\nHost: [::1]:8080\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(
        post.status, 308,
        "308 keeps the method, so a POST is redirected too"
    );
    assert_eq!(post.header("location"), Some("https://[::1]/form"));
}

#[test]
fn a_port_other_than_443_is_named_and_absolute_targets_are_reduced() {
    let image = site_image(true);
    let mut server = server_with(&image, only(8443));
    let response = one(
        &mut server,
        "GET http://example.test/a HTTP/1.1\r\nHost: example.test\r\n\r\n",
    );
    assert_eq!(
        response.header("location"),
        Some("https://example.test:8443/a")
    );
}

#[test]
fn acme_challenges_stay_on_plain_http() {
    let image = site_image(true);
    let mut server = server_with(&image, only(443));
    let response = one(
        &mut server,
        "GET /.well-known/acme-challenge/token HTTP/1.1\r\nHost: example.test\r\n\r\n",
    );
    assert_ne!(
        response.status, 308,
        "answered by the site (here: not found)"
    );
}

#[test]
fn secure_connections_serve_the_site_with_hsts() {
    let image = site_image(true);
    let mut server = server_with(&image, only(443));
    let mut client = secure_client(&mut server);
    let responses = client.exchange(
        &mut server,
        b"GET / HTTP/1.1\r\nHost: example.test\r\n\r\nGET /missing HTTP/1.1\r\nHost: example.test\r\n\r\n",
        &[false, false],
    );
    assert_eq!(responses[0].status, 200);
    assert_eq!(
        responses[0].header("strict-transport-security"),
        Some("max-age=31536000")
    );
    assert_eq!(responses[1].status, 404);
    assert_eq!(
        responses[1].header("strict-transport-security"),
        Some("max-age=31536000"),
        "on error pages too"
    );
}

#[test]
fn without_https_only_plain_http_serves_and_sends_no_hsts() {
    let image = site_image(true);
    let mut server = server_with(
        &image,
        ServerConfig {
            hsts_seconds: Some(600),
            ..ServerConfig::default()
        },
    );
    let response = one(&mut server, "GET / HTTP/1.1\r\nHost: example.test\r\n\r\n");
    assert_eq!(response.status, 200);
    assert_eq!(response.header("strict-transport-security"), None);
    assert_eq!(server.counters().status(200), 1);
}

#[test]
fn acme_answers_are_served_while_published_and_only_for_their_token() {
    let image = site_image(true);
    let mut server = server_with(&image, only(443));
    let request = "GET /.well-known/acme-challenge/tok-en_1 HTTP/1.1\r\nHost: example.test\r\n\r\n";
    assert_eq!(one(&mut server, request).status, 404);
    assert!(server.add_acme_answer("tok-en_1", "tok-en_1.thumbprint"));
    assert!(
        !server.add_acme_answer("../x", "bad"),
        "tokens are base64url"
    );
    assert!(!server.add_acme_answer(&"a".repeat(200), "too long"));
    let response = one(&mut server, request);
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"tok-en_1.thumbprint");
    assert_eq!(response.header("cache-control"), Some("no-store"));
    let other = "GET /.well-known/acme-challenge/other HTTP/1.1\r\nHost: example.test\r\n\r\n";
    assert_eq!(one(&mut server, other).status, 404);
    // Over HTTPS too (a CA follows a redirect to 443).
    let mut client = secure_client(&mut server);
    let responses = client.exchange(&mut server, request.as_bytes(), &[false]);
    assert_eq!(responses[0].body, b"tok-en_1.thumbprint");
    server.clear_acme_answers();
    assert_eq!(one(&mut server, request).status, 404);
    // The oldest answer makes room.
    for i in 0..=bramble_http::MAX_ACME_ANSWERS {
        assert!(server.add_acme_answer(&format!("t{i}"), "k"));
    }
    let first = "GET /.well-known/acme-challenge/t0 HTTP/1.1\r\nHost: example.test\r\n\r\n";
    assert_eq!(one(&mut server, first).status, 404);
}

#[test]
fn a_path_that_leaves_the_challenge_folder_is_redirected() {
    // Under `https = only` only a challenge token is served over plain HTTP: a path that
    // climbs out of the folder, plainly or percent-encoded, is redirected like any other.
    let image = site_image(true);
    let mut server = server_with(&image, only(443));
    for target in [
        "/.well-known/acme-challenge/../index.html",
        "/.well-known/acme-challenge/%2e%2e/index.html",
        "/.well-known/acme-challenge/a/../../index.html",
        "/.well-known/acme-challenge/",
    ] {
        let response = one(
            &mut server,
            &format!("GET {target} HTTP/1.1\r\nHost: example.test\r\n\r\n"),
        );
        assert_eq!(response.status, 308, "{target} is not a challenge");
    }
    let token = one(
        &mut server,
        "GET /.well-known/acme-challenge/tok-en_1?x HTTP/1.1\r\nHost: example.test\r\n\r\n",
    );
    assert_eq!(token.status, 404, "a token is answered by plain HTTP");
}

#[test]
fn the_redirect_names_the_configured_domain_and_never_a_target_host() {
    let image = site_image(true);
    let mut server = server_with(
        &image,
        ServerConfig {
            redirect_host: bramble_http::RedirectHost::new("page.example"),
            ..only(443)
        },
    );
    let response = one(
        &mut server,
        "GET /a?b HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    );
    assert_eq!(response.status, 308);
    assert_eq!(
        response.header("location"),
        Some("https://page.example/a?b")
    );

    // Without a domain the Host is named, but a target that is not a path never is.
    let mut server = server_with(&image, only(443));
    let response = one(&mut server, "GET @evil/ HTTP/1.1\r\nHost: host\r\n\r\n");
    assert_eq!(response.status, 400);
    assert_eq!(response.header("location"), None);
    assert!(bramble_http::RedirectHost::new("a/b").is_none());
    assert!(bramble_http::RedirectHost::new("").is_none());
}
