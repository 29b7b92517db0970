//! The site rules in the engine: `_redirects` (every status, splats, placeholders, force,
//! first match, query kept), `_headers` (patterns, combined blocks, removal, overrides,
//! default security headers), clean URLs, nested 404 pages and the single-page-app fallback.

mod support;

use bramble_site::{
    FileSpec, HeaderBlockSpec, HeaderEntrySpec, RedirectSpec, SiteFlags, SiteImageWriter,
    VariantSpec, http_date,
};
use support::*;

fn page(path: &str, body: &str) -> FileSpec {
    let content_type = if path.ends_with(".css") {
        "text/css; charset=utf-8"
    } else {
        "text/html; charset=utf-8"
    };
    FileSpec {
        path: path.into(),
        content_type: content_type.into(),
        cache_control: "no-cache".into(),
        last_modified: MTIME,
        last_modified_http: http_date(MTIME),
        identity: VariantSpec {
            body: body.as_bytes().to_vec(),
            etag: format!("\"{}\"", path.len()),
        },
        gzip: None,
        brotli: None,
    }
}

fn rule(from: &str, to: &str, status: u16, force: bool) -> RedirectSpec {
    RedirectSpec {
        from: from.into(),
        to: to.into(),
        status,
        force,
        line: 1,
    }
}

fn block(pattern: &str, entries: &[(&str, &str)]) -> HeaderBlockSpec {
    HeaderBlockSpec {
        pattern: pattern.into(),
        entries: entries
            .iter()
            .map(|(name, value)| match name.strip_prefix("! ") {
                Some(name) => HeaderEntrySpec {
                    name: name.into(),
                    value: String::new(),
                    remove: true,
                },
                None => HeaderEntrySpec {
                    name: (*name).into(),
                    value: (*value).into(),
                    remove: false,
                },
            })
            .collect(),
    }
}

fn site(flags: u32) -> Vec<u8> {
    let mut writer = SiteImageWriter::new();
    for (path, body) in [
        ("/index.html", "home"),
        ("/about.html", "about page"),
        ("/docs/index.html", "docs index"),
        ("/docs/guide.html", "guide"),
        ("/docs/404.html", "docs missing"),
        ("/404.html", "site missing"),
        ("/app/index.html", "app shell"),
        ("/gone.html", "this page is gone"),
        ("/shadowed.html", "the file"),
        ("/forced.html", "the file you will not see"),
        ("/style.css", "body{}"),
        ("/api/data.json", "{}"),
    ] {
        writer.add(page(path, body)).unwrap();
    }
    writer.set_flags(SiteFlags(flags));
    writer
        .set_redirects(vec![
            rule("/old", "/about", 301, false),
            rule("/old", "/never", 302, false),
            rule("/blog/*", "/posts/:splat", 302, false),
            rule("/:year/:slug", "/archive/:year-:slug.html", 307, false),
            rule("/app/*", "/app/index.html", 200, false),
            rule("/removed", "/gone.html", 410, false),
            rule("/hidden", "/docs/404.html", 404, false),
            rule("/shadowed.html", "/about", 301, false),
            rule("/forced.html", "/about?from=forced", 308, true),
            rule("/away", "https://example.com/new", 303, false),
        ])
        .unwrap();
    writer
        .set_header_blocks(vec![
            block(
                "/api/*",
                &[
                    ("Access-Control-Allow-Origin", "*"),
                    ("Content-Security-Policy", "default-src 'none'"),
                    ("Cache-Control", "public, max-age=60"),
                ],
            ),
            block("/*", &[("X-Robots-Tag", "noindex")]),
            block("/api/:file", &[("X-Robots-Tag", "nofollow")]),
            block(
                "/docs/*",
                &[("! X-Robots-Tag", ""), ("! X-Frame-Options", "")],
            ),
            block("/style.css", &[("X-Frame-Options", "DENY")]),
            block("/about", &[("Strict-Transport-Security", "max-age=600")]),
        ])
        .unwrap();
    writer.finish().unwrap()
}

fn get(server: &mut bramble_http::Server, path: &str) -> Response {
    one(
        server,
        &format!("GET {path} HTTP/1.1\r\nHost: example.test\r\n\r\n"),
    )
}

fn text(response: &Response) -> &str {
    std::str::from_utf8(&response.body).unwrap()
}

#[test]
fn redirects_follow_netlify() {
    let image = site(0);
    let mut server = support::server(&image);
    let r = get(&mut server, "/old?x=1");
    assert_eq!((r.status, r.header("location")), (301, Some("/about?x=1")));
    let r = get(&mut server, "/old/");
    assert_eq!(
        r.header("location"),
        Some("/about"),
        "trailing slash, first match"
    );
    let r = get(&mut server, "/blog/2024/a%20b.html");
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("/posts/2024/a%20b.html"))
    );
    let r = get(&mut server, "/blog/");
    assert_eq!(r.header("location"), Some("/posts/"));
    let r = get(&mut server, "/2024/hello");
    assert_eq!(
        (r.status, r.header("location")),
        (307, Some("/archive/2024-hello.html"))
    );
    let r = get(&mut server, "/away?q=2");
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("https://example.com/new?q=2"))
    );
    assert!(text(&r).contains("303 See Other"));
}

#[test]
fn rewrites_and_error_rules_serve_site_files() {
    let image = site(0);
    let mut server = support::server(&image);
    let r = get(&mut server, "/app/settings/profile");
    assert_eq!((r.status, text(&r)), (200, "app shell"));
    assert_eq!(r.header("location"), None);
    let r = get(&mut server, "/removed");
    assert_eq!((r.status, text(&r)), (410, "this page is gone"));
    let r = get(&mut server, "/hidden");
    assert_eq!((r.status, text(&r)), (404, "docs missing"));
}

#[test]
fn files_shadow_rules_unless_forced() {
    let image = site(0);
    let mut server = support::server(&image);
    let r = get(&mut server, "/shadowed.html");
    assert_eq!((r.status, text(&r)), (200, "the file"));
    let r = get(&mut server, "/forced.html?x=1");
    assert_eq!(
        (r.status, r.header("location")),
        (308, Some("/about?from=forced")),
        "a target with its own query keeps it"
    );
}

#[test]
fn clean_urls_and_folder_slashes() {
    let image = site(0);
    let mut server = support::server(&image);
    assert_eq!(text(&get(&mut server, "/about")), "about page");
    assert_eq!(
        get(&mut server, "/about.html").status,
        200,
        "off by default"
    );
    let r = get(&mut server, "/docs");
    assert_eq!((r.status, r.header("location")), (301, Some("/docs/")));

    let image = site(SiteFlags::CLEAN_URLS);
    let mut server = support::server(&image);
    let r = get(&mut server, "/about.html?a=b");
    assert_eq!((r.status, r.header("location")), (308, Some("/about?a=b")));
    let r = get(&mut server, "/docs/index.html");
    assert_eq!((r.status, r.header("location")), (308, Some("/docs/")));
    let r = get(&mut server, "/index.html");
    assert_eq!((r.status, r.header("location")), (308, Some("/")));
    let r = get(&mut server, "/docs/guide");
    assert_eq!((r.status, text(&r)), (200, "guide"));
}

#[test]
fn misses_get_the_nearest_404_page() {
    let image = site(0);
    let mut server = support::server(&image);
    let r = get(&mut server, "/docs/nothing/here");
    assert_eq!((r.status, text(&r)), (404, "docs missing"));
    let r = get(&mut server, "/docs/");
    assert_eq!(r.status, 200);
    let r = get(&mut server, "/elsewhere/x/y");
    assert_eq!((r.status, text(&r)), (404, "site missing"));
    // A deep hostile path costs no more than the site's deepest 404.html.
    let deep = "/a".repeat(900);
    let r = get(&mut server, &deep);
    assert_eq!((r.status, text(&r)), (404, "site missing"));

    let image = site(SiteFlags::SPA_FALLBACK);
    let mut server = support::server(&image);
    let r = get(&mut server, "/some/client/route");
    assert_eq!((r.status, text(&r)), (200, "home"));
    let r = get(&mut server, "/old");
    assert_eq!(r.status, 301, "rules still come first");
}

#[test]
fn headers_combine_remove_and_override() {
    let image = site(0);
    let mut server = support::server(&image);
    let r = get(&mut server, "/api/data.json");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(
        r.header("content-security-policy"),
        Some("default-src 'none'")
    );
    assert_eq!(r.header("cache-control"), Some("public, max-age=60"));
    assert_eq!(r.all("cache-control").len(), 1);
    assert_eq!(r.header("x-robots-tag"), Some("noindex, nofollow"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        r.header("referrer-policy"),
        Some("strict-origin-when-cross-origin")
    );
    assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));

    let r = get(&mut server, "/docs/guide.html");
    assert_eq!(r.header("x-robots-tag"), None, "removed by a later block");
    assert_eq!(r.header("x-frame-options"), None, "a default removed");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));

    let r = get(&mut server, "/style.css");
    assert_eq!(
        r.header("x-frame-options"),
        Some("DENY"),
        "a default replaced"
    );
    assert_eq!(r.all("x-frame-options").len(), 1);

    // Headers apply to what the path answers, misses and redirects included.
    let r = get(&mut server, "/api/missing/x");
    assert_eq!(
        (r.status, r.header("access-control-allow-origin")),
        (404, Some("*"))
    );
    // HSTS from _headers never goes out over plain HTTP (RFC 6797 §7.2), only over HTTPS.
    let r = get(&mut server, "/about");
    assert_eq!(r.header("strict-transport-security"), None);
    let mut client = Client::open(&mut server);
    client.connection.open_secure(&mut server, client.now);
    let r = client.exchange(
        &mut server,
        b"GET /about HTTP/1.1\r\nHost: example.test\r\n\r\n",
        &[false],
    );
    assert_eq!(
        r[0].header("strict-transport-security"),
        Some("max-age=600")
    );

    let image = site(SiteFlags::NO_SECURITY_HEADERS);
    let mut server = support::server(&image);
    let r = get(&mut server, "/about");
    for name in [
        "x-content-type-options",
        "referrer-policy",
        "x-frame-options",
    ] {
        assert_eq!(r.header(name), None, "{name}");
    }
    assert_eq!(r.header("x-robots-tag"), Some("noindex"));
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
}

#[test]
fn corrupt_sections_are_refused_and_never_panic() {
    let image = site(0);
    let strings = u32_at(&image, 40)..u32_at(&image, 40) + u32_at(&image, 44);
    for (field, name) in [(72, "redirects"), (80, "headers")] {
        let (offset, len) = (u32_at(&image, field), u32_at(&image, field + 4));
        assert!(len > 0);
        // Every single-byte change of the section, resealed: refused with the section's
        // name, or accepted (a change the checks allow), never a panic.
        let mut refused = 0;
        for at in (offset..offset + len).step_by(3) {
            let mut bytes = image.clone();
            bytes[at] ^= 0x5a;
            bramble_http::exercise::reseal_image(&mut bytes);
            match bramble_site::SiteIndex::new_checked(&bytes) {
                Err(bramble_site::FormatError::BadSection { section, .. }) => {
                    assert_eq!(section, name);
                    refused += 1;
                }
                Err(other) => panic!("{name}: {other}"),
                Ok(_) => assert!(bramble_http::exercise::exercise_image(&bytes)),
            }
        }
        assert!(refused > 0, "{name}: no change was refused");
        // The section parsers and matchers on their own, with pseudo-random mutations.
        let mut seed = 0x2545_f491_u32;
        for _ in 0..2000 {
            let mut input = vec![(len / 8) as u8];
            input.extend_from_slice(&image[offset..offset + len]);
            input.extend_from_slice(&(strings.len() as u16).to_le_bytes());
            input.extend_from_slice(&image[strings.clone()]);
            input.extend_from_slice(b"/2024/x");
            for _ in 0..4 {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let at = seed as usize % input.len();
                input[at] = (seed >> 24) as u8;
            }
            bramble_http::exercise::exercise_rules(&input);
        }
    }
}

#[test]
fn rules_survive_the_reader() {
    let image = site(0);
    let index = bramble_site::SiteIndex::new_checked(&image).unwrap();
    assert_eq!(index.redirects().len(), 10);
    assert_eq!(index.header_rules().len(), 6);
    let found = index.redirects().find("/2024/x", false).unwrap();
    assert_eq!(found.rule.status, 307);
    assert!(index.redirects().find("/shadowed.html", true).is_none());
    assert!(index.redirects().find("/forced.html", true).is_some());
}
