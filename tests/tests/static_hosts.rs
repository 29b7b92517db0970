//! QEMU end to end for what static hosts do: a site with `_redirects` (static, splat,
//! placeholder, 200 rewrite, 410, force), `_headers` (CSP and CORS on a pattern, a `!`
//! removal), nested 404.html pages, a listed downloads folder and `--search`, served by the
//! guest; every rule and header behaves as Netlify's and Cloudflare's documentation describes;
//! the search page renders in headless Chromium with JavaScript off (screenshot under
//! target/test-artifacts/); a 4 KiB query, a 200-term query and a punctuation query answer.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::chromium::{find_chromium, run_chromium};
use support::{Checks, access_log_since, boot_site_packed, get};

fn write(dir: &Path, path: &str, text: &str) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn html(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
         </head><body><nav><a href=\"/\">Home</a></nav><main>{body}</main></body></html>\n"
    )
}

fn site(dir: &Path) {
    write(
        dir,
        "index.html",
        &html("Home", "<h1>Welcome</h1><p>A small site on a Pi.</p>"),
    );
    write(
        dir,
        "about.html",
        &html("About us", "<p>We grow brambles and serve pages.</p>"),
    );
    write(
        dir,
        "404.html",
        &html("Not here", "<p>site-wide missing page</p>"),
    );
    write(
        dir,
        "docs/index.html",
        &html("Docs", "<p>Documentation.</p>"),
    );
    write(
        dir,
        "docs/install.html",
        &html(
            "Installing the server",
            "<h1>Installation</h1><p>To install, write the card image and boot the Pi. \
             Installation takes a minute.</p><h2>Networking</h2><p>The server takes its \
             address by DHCP.</p>",
        ),
    );
    write(
        dir,
        "docs/404.html",
        &html("Docs: not here", "<p>docs missing page</p>"),
    );
    write(
        dir,
        "app/index.html",
        &html("App", "<p>single page app shell</p>"),
    );
    write(
        dir,
        "gone.html",
        &html("Gone", "<p>this page was removed</p>"),
    );
    write(
        dir,
        "posts/2024-hello.html",
        &html("Hello", "<p>first post</p>"),
    );
    write(dir, "downloads/bramble-1.0.tar.gz", &"x".repeat(3000));
    write(dir, "downloads/notes.txt", "release notes\n");
    write(dir, "downloads/old/bramble-0.9.tar.gz", "old");
    write(
        dir,
        "_redirects",
        "# Moved pages\n\
         /old-about /about 301\n\
         /blog/* /posts/:splat 302\n\
         /archive/:year/:slug /posts/:year-:slug.html 301\n\
         /app/* /app/index.html 200\n\
         /removed /gone.html 410\n\
         /about.html /about-moved 302!\n\
         /go https://example.com/landing 307\n",
    );
    write(
        dir,
        "_headers",
        "/docs/*\n  Content-Security-Policy: default-src 'self'\n  \
         Access-Control-Allow-Origin: *\n  ! X-Frame-Options\n\
         /*\n  X-Robots-Tag: noarchive\n",
    );
}

/// Checks that `path` answers `status`, with `location` and a body holding `body`.
fn check_response(
    checks: &mut Checks,
    port: u16,
    path: &str,
    status: u16,
    location: Option<&str>,
    body: Option<&str>,
) {
    let r = get(port, path, "");
    let text = String::from_utf8_lossy(&r.body).to_string();
    let ok = r.status == status
        && r.header("location") == location
        && body.is_none_or(|b| text.contains(b));
    checks.check(path, ok, || {
        format!(
            "got {} {:?}, wanted {status} {location:?} {body:?}: {}",
            r.status,
            r.header("location"),
            text.chars().take(200).collect::<String>()
        )
    });
}

#[test]
fn rules_headers_listings_and_search_in_the_guest() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    site(&dir);
    let options = bramble::pack::SiteOptions {
        search: true,
        listing: vec!["downloads/".into()],
        ..Default::default()
    };
    let (mut served, _) = boot_site_packed(&dir, bramble_settings::TEMPLATE, None, false, options);
    let port = served.port;
    let mut checks = Checks::default();
    // _redirects.
    check_response(
        &mut checks,
        port,
        "/old-about?ref=x",
        301,
        Some("/about?ref=x"),
        None,
    );
    check_response(
        &mut checks,
        port,
        "/blog/2024/hello",
        302,
        Some("/posts/2024/hello"),
        None,
    );
    check_response(
        &mut checks,
        port,
        "/archive/2024/hello",
        301,
        Some("/posts/2024-hello.html"),
        None,
    );
    check_response(
        &mut checks,
        port,
        "/app/settings/profile",
        200,
        None,
        Some("single page app shell"),
    );
    check_response(
        &mut checks,
        port,
        "/removed",
        410,
        None,
        Some("this page was removed"),
    );
    check_response(
        &mut checks,
        port,
        "/about.html",
        302,
        Some("/about-moved"),
        None,
    );
    check_response(
        &mut checks,
        port,
        "/go",
        307,
        Some("https://example.com/landing"),
        None,
    );
    // Clean URLs, folders, nested 404 pages.
    check_response(
        &mut checks,
        port,
        "/about",
        200,
        None,
        Some("We grow brambles"),
    );
    check_response(&mut checks, port, "/docs", 301, Some("/docs/"), None);
    check_response(
        &mut checks,
        port,
        "/docs/nothing",
        404,
        None,
        Some("docs missing page"),
    );
    check_response(
        &mut checks,
        port,
        "/nothing/at/all",
        404,
        None,
        Some("site-wide missing page"),
    );
    check_response(&mut checks, port, "/_redirects", 404, None, None);
    // The listing, HTML and JSON.
    check_response(
        &mut checks,
        port,
        "/downloads/",
        200,
        None,
        Some("bramble-1.0.tar.gz"),
    );
    check_response(
        &mut checks,
        port,
        "/downloads/index.json",
        200,
        None,
        Some("\"name\":\"notes.txt\""),
    );
    check_response(
        &mut checks,
        port,
        "/downloads/old/",
        200,
        None,
        Some("bramble-0.9.tar.gz"),
    );

    // _headers: a pattern's CSP and CORS, a removal, defaults elsewhere.
    let r = get(port, "/docs/install.html", "");
    let mut checks_headers = |name: &str, ok: bool, detail: String| {
        checks.check(name, ok, || detail);
    };
    checks_headers(
        "docs CSP",
        r.header("content-security-policy") == Some("default-src 'self'"),
        format!("{:?}", r.header("content-security-policy")),
    );
    checks_headers(
        "docs CORS",
        r.header("access-control-allow-origin") == Some("*"),
        format!("{:?}", r.header("access-control-allow-origin")),
    );
    checks_headers(
        "docs X-Frame-Options removed",
        r.header("x-frame-options").is_none(),
        format!("{:?}", r.header("x-frame-options")),
    );
    checks_headers(
        "every page X-Robots-Tag",
        r.header("x-robots-tag") == Some("noarchive"),
        format!("{:?}", r.header("x-robots-tag")),
    );
    let r = get(port, "/", "");
    checks_headers(
        "default security headers",
        r.header("x-frame-options") == Some("SAMEORIGIN")
            && r.header("referrer-policy") == Some("strict-origin-when-cross-origin")
            && r.header("x-content-type-options") == Some("nosniff")
            && r.header("content-security-policy").is_none(),
        format!("{:?}", r.headers),
    );

    // Search: ranked, marked, bounded.
    let r = get(port, "/search?q=install+server", "");
    let body = String::from_utf8_lossy(&r.body).to_string();
    checks_headers(
        "search ranks the install page first",
        r.status == 200
            && body.contains("href=\"/docs/install.html\">Installing the server</a>")
            && body.contains("<mark>install</mark>")
            && body.find("/docs/install.html") < body.find("/about.html").or(Some(usize::MAX)),
        body.chars().take(400).collect(),
    );
    let r = get(port, "/search.json?q=brambles", "");
    let body = String::from_utf8_lossy(&r.body).to_string();
    checks_headers(
        "search JSON",
        r.status == 200
            && r.header("content-type") == Some("application/json")
            && body.contains("\"url\":\"/about.html\""),
        body.chars().take(400).collect(),
    );
    for (what, target, status, needle) in [
        (
            "4 KiB query",
            format!("/search?q={}", "a".repeat(4096)),
            414,
            "",
        ),
        (
            "200-term query",
            format!(
                "/search?q={}",
                (0..200)
                    .map(|i| format!("t{i}"))
                    .collect::<Vec<_>>()
                    .join("+")
            ),
            200,
            "first 8 different words",
        ),
        (
            "punctuation query",
            "/search?q=%21%3F%2E%2C%3B%3A%2D%2A".to_string(),
            200,
            "no words to search for",
        ),
    ] {
        let started = Instant::now();
        let r = get(port, &target, "");
        let elapsed = started.elapsed();
        let body = String::from_utf8_lossy(&r.body).to_string();
        eprintln!(
            "{what}: {} in {:.1} ms",
            r.status,
            elapsed.as_secs_f64() * 1000.0
        );
        checks_headers(
            what,
            r.status == status && body.contains(needle),
            body.chars().take(300).collect(),
        );
    }

    // The search page in a real browser, with JavaScript off.
    {
        let chromium = find_chromium();
        let url = format!("http://127.0.0.1:{port}/search?q=install+networking");
        let log_from = served.guest.transcript.len();
        let profile = tempfile::tempdir().unwrap();
        // The page needs no script: the browser runs none.
        let no_script = "--disable-javascript";
        let dom = run_chromium(&chromium, profile.path(), &url, &[no_script, "--dump-dom"]);
        let dom_text = String::from_utf8_lossy(&dom.stdout).to_string();
        checks_headers(
            "chromium renders the results",
            dom.status.success()
                && dom_text.contains("<mark>Networking</mark>")
                && dom_text.contains("Installing the server")
                && !dom_text.contains("<script"),
            dom_text.chars().take(600).collect(),
        );
        let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        let screenshot = artifacts.join("search-chromium.png");
        let _ = std::fs::remove_file(&screenshot);
        let fresh = tempfile::tempdir().unwrap();
        let shot = run_chromium(
            &chromium,
            fresh.path(),
            &url,
            &[no_script, &format!("--screenshot={}", screenshot.display())],
        );
        let saved = std::fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0);
        eprintln!("screenshot: {} ({saved} bytes)", screenshot.display());
        checks_headers(
            "screenshot",
            shot.status.success() && saved > 1000,
            String::from_utf8_lossy(&shot.stderr)
                .chars()
                .take(300)
                .collect(),
        );
        let log = access_log_since(&mut served.guest, log_from, Duration::from_millis(500));
        checks_headers(
            "the browser's search requests answered 200",
            log.iter()
                .any(|l| l.target.starts_with("/search?") && l.status == 200),
            format!("{log:?}"),
        );
    }
    checks.finish("static-host features in the guest");
}
