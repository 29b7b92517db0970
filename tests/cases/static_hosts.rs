//! One site and one table of cases for what static hosts do (issue 17), run against the QEMU
//! guest (tests/tests/static_hosts.rs) and against `bramble serve` through the real binary
//! (tools/tests/site_rules.rs), which both include this file, so that the Pi and the authors'
//! preview are held to the same answers.
//!
//! The site has a `_redirects` file (static, splat, placeholder, 200 rewrite, 410, 404, force,
//! first match wins, a file shadowing an unforced rule, an external target), `_headers` (CSP
//! and CORS on a pattern, a `!` removal, a header for every page), nested 404.html pages, a
//! listed downloads folder and a search index. The expected answers are what Netlify's and
//! Cloudflare Pages' documentation describes for these files (where the two differ, Netlify's:
//! an existing file shadows a rule that is not forced).
//!
//! Needs only std and bramble-testkit (a dependency of both crates that include it).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use bramble_testkit::{Parsed, Response, parse_response};

/// The site options both runs pack with, as `bramble pack` / `bramble serve` flags.
pub const FLAGS: &[&str] = &["--search", "--listing", "downloads/"];

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

/// Writes the site into `dir`.
pub fn write_site(dir: &Path) {
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
         /private/* /404.html 404\n\
         /about.html /about-moved 302!\n\
         /go https://example.com/landing 307\n\
         /form /thanks 303\n\
         /api/v1/* /api/v2/:splat 308\n\
         /twice /first 301\n\
         /twice /second 301\n\
         # Shadowed: the file exists and the rule is not forced.\n\
         /docs/install.html /elsewhere 301\n",
    );
    write(
        dir,
        "_headers",
        "/docs/*\n  Content-Security-Policy: default-src 'self'\n  \
         Access-Control-Allow-Origin: *\n  ! X-Frame-Options\n\
         /*\n  X-Robots-Tag: noarchive\n",
    );
}

/// What one case expects of one answer.
struct Case {
    /// The request target.
    target: String,
    /// `GET` or `HEAD`.
    method: &'static str,
    status: u16,
    /// The Location header (`None`: there must be none).
    location: Option<&'static str>,
    /// Text the body must hold (`None`: anything).
    body: Option<&'static str>,
    /// Header values the answer must carry (`Some`) or lack (`None`).
    headers: &'static [(&'static str, Option<&'static str>)],
}

fn case(
    target: &str,
    status: u16,
    location: Option<&'static str>,
    body: Option<&'static str>,
) -> Case {
    Case {
        target: target.to_string(),
        method: "GET",
        status,
        location,
        body,
        headers: &[],
    }
}

/// The default security headers, on every answer where no `_headers` block changes them.
const DEFAULTS: &[(&str, Option<&str>)] = &[
    ("x-content-type-options", Some("nosniff")),
    ("referrer-policy", Some("strict-origin-when-cross-origin")),
    ("x-frame-options", Some("SAMEORIGIN")),
    ("x-robots-tag", Some("noarchive")),
    ("content-security-policy", None),
    ("strict-transport-security", None),
];

/// The `/docs/*` block: CSP and CORS added, X-Frame-Options dropped, the `/*` block too.
const DOCS: &[(&str, Option<&str>)] = &[
    ("content-security-policy", Some("default-src 'self'")),
    ("access-control-allow-origin", Some("*")),
    ("x-frame-options", None),
    ("x-robots-tag", Some("noarchive")),
    ("x-content-type-options", Some("nosniff")),
];

fn cases() -> Vec<Case> {
    let mut cases = vec![
        // _redirects: the query string is kept; splats and placeholders fill the target.
        case("/old-about?ref=x", 301, Some("/about?ref=x"), None),
        case("/blog/2024/hello", 302, Some("/posts/2024/hello"), None),
        case(
            "/blog/2024/hello?page=2",
            302,
            Some("/posts/2024/hello?page=2"),
            None,
        ),
        case(
            "/archive/2024/hello",
            301,
            Some("/posts/2024-hello.html"),
            None,
        ),
        // A placeholder matches one whole segment: two segments below /archive/ only.
        case("/archive/2024", 404, None, Some("site-wide missing page")),
        // 200 rewrites serve the target's bytes at the asked URL.
        case(
            "/app/settings/profile",
            200,
            None,
            Some("single page app shell"),
        ),
        // 410 and 404 rules serve their target page with that status.
        case("/removed", 410, None, Some("this page was removed")),
        case("/private/keys", 404, None, Some("site-wide missing page")),
        // A forced rule wins over the file that exists.
        case("/about.html", 302, Some("/about-moved"), None),
        case("/go", 307, Some("https://example.com/landing"), None),
        case("/form", 303, Some("/thanks"), None),
        case("/api/v1/users/7", 308, Some("/api/v2/users/7"), None),
        // First match wins.
        case("/twice", 301, Some("/first"), None),
        // An unforced rule does not shadow a file (Netlify's shadowing).
        case(
            "/docs/install.html",
            200,
            None,
            Some("Installation takes a minute"),
        ),
        // Clean URLs, folders, nested 404 pages.
        case("/about", 200, None, Some("We grow brambles")),
        case("/docs", 301, Some("/docs/"), None),
        case("/docs/", 200, None, Some("Documentation.")),
        case("/docs/nothing", 404, None, Some("docs missing page")),
        case(
            "/docs/deeper/still/nothing",
            404,
            None,
            Some("docs missing page"),
        ),
        case("/nothing/at/all", 404, None, Some("site-wide missing page")),
        // The rule files configure the site; they are not pages of it.
        case("/_redirects", 404, None, Some("site-wide missing page")),
        case("/_headers", 404, None, Some("site-wide missing page")),
        // Listings, HTML and JSON, and the folders below a listed one.
        case("/downloads/", 200, None, Some("bramble-1.0.tar.gz")),
        case("/downloads", 301, Some("/downloads/"), None),
        case(
            "/downloads/index.json",
            200,
            None,
            Some("\"name\":\"notes.txt\""),
        ),
        case("/downloads/old/", 200, None, Some("bramble-0.9.tar.gz")),
        case("/downloads/notes.txt", 200, None, Some("release notes")),
        // Search: ranked, marked, as HTML and JSON.
        case(
            "/search?q=install+server",
            200,
            None,
            Some("href=\"/docs/install.html\">Installing the server</a>"),
        ),
        case(
            "/search?q=install+server",
            200,
            None,
            Some("<mark>install</mark>"),
        ),
        case(
            "/search?q=Networking",
            200,
            None,
            Some("<mark>Networking</mark>"),
        ),
        case(
            "/search.json?q=brambles",
            200,
            None,
            Some("\"url\":\"/about.html\""),
        ),
        case(
            "/search?q=zzzzqqqq",
            200,
            None,
            Some("No results for <strong>zzzzqqqq</strong>"),
        ),
        // Bounded queries: too long for a request target, many terms, only punctuation,
        // as long as a target may be.
        case(&format!("/search?q={}", "a".repeat(4096)), 414, None, None),
        case(
            &format!(
                "/search?q={}",
                (0..200)
                    .map(|i| format!("t{i}"))
                    .collect::<Vec<_>>()
                    .join("+")
            ),
            200,
            None,
            Some("first 8 different words"),
        ),
        case(
            "/search?q=%21%3F%2E%2C%3B%3A%2D%2A",
            200,
            None,
            Some("no words to search for"),
        ),
        case(
            &format!("/search?q={}", "install+".repeat(250)),
            200,
            None,
            Some("href=\"/docs/install.html\""),
        ),
    ];
    // Headers: the defaults and `_headers`, on pages, nested 404s, listings, rewrites and search.
    for (target, status, headers) in [
        ("/", 200, DEFAULTS),
        ("/about", 200, DEFAULTS),
        ("/nothing/at/all", 404, DEFAULTS),
        ("/app/settings/profile", 200, DEFAULTS),
        ("/downloads/", 200, DEFAULTS),
        ("/docs/install.html", 200, DOCS),
        ("/docs/nothing", 404, DOCS),
    ] {
        cases.push(Case {
            headers,
            ..case(target, status, None, None)
        });
    }
    // HEAD answers as GET does, without a body.
    let heads: Vec<Case> = ["/old-about?ref=x", "/about", "/removed", "/docs/nothing"]
        .into_iter()
        .map(|target| {
            let get = cases.iter().find(|c| c.target == target).unwrap();
            Case {
                method: "HEAD",
                ..case(target, get.status, get.location, None)
            }
        })
        .collect();
    cases.extend(heads);
    cases
}

/// One request on a fresh connection to 127.0.0.1:`port`, with `Connection: close`.
pub fn request(port: u16, method: &str, target: &str) -> Response {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {target} HTTP/1.1\r\nHost: bramble\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    match parse_response(&bytes, method == "HEAD", true) {
        Parsed::Complete(response, _) => response,
        Parsed::Partial => panic!("{method} {target}: incomplete response {bytes:?}"),
        Parsed::Invalid(why) => panic!("{method} {target}: {why}"),
    }
}

/// Runs every case against the server on 127.0.0.1:`port` (`what` names it in the output);
/// returns the failures, one line each.
pub fn check(port: u16, what: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let cases = cases();
    for case in &cases {
        let started = Instant::now();
        let r = request(port, case.method, &case.target);
        let elapsed = started.elapsed();
        let text = String::from_utf8_lossy(&r.body).to_string();
        let mut wrong = Vec::new();
        if r.status != case.status {
            wrong.push(format!("status {} (wanted {})", r.status, case.status));
        }
        if r.header("location") != case.location {
            wrong.push(format!(
                "Location {:?} (wanted {:?})",
                r.header("location"),
                case.location
            ));
        }
        if let Some(body) = case.body
            && !text.contains(body)
        {
            wrong.push(format!("body lacks {body:?}"));
        }
        if case.method == "HEAD" && !r.body.is_empty() {
            wrong.push("a body after HEAD".into());
        }
        for (name, value) in case.headers {
            if r.header(name) != *value {
                wrong.push(format!("{name}: {:?} (wanted {value:?})", r.header(name)));
            }
        }
        let shown: String = case.target.chars().take(60).collect();
        if wrong.is_empty() {
            eprintln!(
                "  ok   {what}: {} {shown} -> {} ({:.1} ms)",
                case.method,
                r.status,
                elapsed.as_secs_f64() * 1000.0
            );
        } else {
            let line = format!(
                "{what}: {} {shown}: {}; head: {:?}; body: {:?}",
                case.method,
                wrong.join(", "),
                r.head,
                text.chars().take(200).collect::<String>()
            );
            eprintln!("  FAIL {line}");
            failures.push(line);
        }
    }
    eprintln!(
        "{what}: {} of {} static-host cases passed",
        cases.len() - failures.len(),
        cases.len()
    );
    failures
}
