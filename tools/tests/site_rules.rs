//! `_redirects`, `_headers`, clean URLs and nested 404 pages through the real binary: `bramble
//! pack` and `bramble serve` report a malformed rule with file, line and column, and `serve`
//! answers with the same engine as the Pi: the cases of tests/cases/static_hosts.rs, which the
//! QEMU guest test (tests/tests/static_hosts.rs) runs too. Servers are stopped by PID.

#[path = "../../tests/cases/static_hosts.rs"]
mod cases;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Kills the server (by its PID) however the test ends.
struct ServerProcess {
    child: Child,
    base: String,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, extra: &[&str]) -> ServerProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .arg("serve")
        .arg(dir)
        .args(["--port", "0", "--bind", "127.0.0.1", "--quiet"])
        .args(extra)
        .env("XDG_CACHE_HOME", dir.join("..").join("cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run bramble serve");
    let stdout = child.stdout.take().unwrap();
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find("http://") {
                let url = line[at..].split_whitespace().next().unwrap();
                let _ = send.send(url.trim_end_matches('/').to_string());
            }
        }
    });
    let base = receive
        .recv_timeout(Duration::from_secs(120))
        .expect("bramble serve printed its address");
    ServerProcess { child, base }
}

struct Fetched {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Fetched {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn fetch(url: &str) -> Fetched {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut response = agent.get(url).call().expect("HTTP exchange");
    Fetched {
        status: response.status().as_u16(),
        headers: response
            .headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: response.body_mut().read_to_string().unwrap_or_default(),
    }
}

fn write(dir: &Path, path: &str, text: &str) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn good_site(dir: &Path) {
    write(dir, "index.html", "<p>home</p>");
    write(dir, "about.html", "<p>about</p>");
    write(dir, "404.html", "<p>site 404</p>");
    write(dir, "docs/index.html", "<p>docs</p>");
    write(dir, "docs/404.html", "<p>docs 404</p>");
    write(dir, "app/index.html", "<p>app</p>");
    write(
        dir,
        "_redirects",
        "# moved\n/old /about 301\n/blog/* /posts/:splat 302\n/app/* /app/index.html 200\n\
         /about.html /elsewhere 301!\n",
    );
    write(
        dir,
        "_headers",
        "/*\n  X-Robots-Tag: noindex\n/docs/*\n  Content-Security-Policy: default-src 'self'\n  \
         Access-Control-Allow-Origin: *\n  ! X-Frame-Options\n",
    );
}

fn pack(dir: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
        .arg("pack")
        .arg(dir)
        .arg("-o")
        .arg(out)
        .args(["--no-cache"])
        .args(extra)
        .output()
        .expect("run bramble pack")
}

#[test]
fn serve_follows_the_rules() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    good_site(&dir);
    let server = start(&dir, &["--clean-urls"]);
    let url = |path: &str| format!("{}{path}", server.base);

    let r = fetch(&url("/old?ref=1"));
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/about?ref=1"))
    );
    let r = fetch(&url("/blog/2024/post"));
    assert_eq!(
        (r.status, r.header("location")),
        (302, Some("/posts/2024/post"))
    );
    let r = fetch(&url("/app/deep/link"));
    assert_eq!((r.status, r.body.as_str()), (200, "<p>app</p>"));
    let r = fetch(&url("/about"));
    assert_eq!((r.status, r.body.as_str()), (200, "<p>about</p>"));
    let r = fetch(&url("/about.html"));
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/elsewhere")),
        "a forced rule comes before the clean-URL redirect"
    );
    let r = fetch(&url("/docs/index.html"));
    assert_eq!((r.status, r.header("location")), (308, Some("/docs/")));
    let r = fetch(&url("/docs/missing"));
    assert_eq!((r.status, r.body.as_str()), (404, "<p>docs 404</p>"));
    assert_eq!(
        r.header("content-security-policy"),
        Some("default-src 'self'")
    );
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("x-frame-options"), None);
    assert_eq!(r.header("x-robots-tag"), Some("noindex"));
    let r = fetch(&url("/missing"));
    assert_eq!((r.status, r.body.as_str()), (404, "<p>site 404</p>"));
    assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));
    assert_eq!(
        r.header("referrer-policy"),
        Some("strict-origin-when-cross-origin")
    );
    assert_eq!(
        fetch(&url("/_redirects")).status,
        404,
        "rule files are not served"
    );
    assert_eq!(fetch(&url("/_headers")).status, 404);
}

#[test]
fn serve_answers_as_the_guest_does() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    cases::write_site(&dir);
    let server = start(&dir, cases::FLAGS);
    let port: u16 = server
        .base
        .rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {}", server.base));
    let failures = cases::check(port, "bramble serve");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn malformed_rules_are_errors_with_file_line_and_column() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    good_site(&dir);
    write(&dir, "_redirects", "/ok /fine\n\n/bad /target 299\n");
    let out = temp.path().join("site.bin");
    let packed = pack(&dir, &out, &[]);
    assert!(!packed.status.success());
    let stderr = String::from_utf8_lossy(&packed.stderr);
    let expected = format!("{}:3:14: status \"299\"", dir.join("_redirects").display());
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!out.exists());

    // `serve` reports the same error the same way.
    let served = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .arg("serve")
        .arg(&dir)
        .args(["--port", "0", "--bind", "127.0.0.1"])
        .env("XDG_CACHE_HOME", temp.path().join("cache"))
        .stdin(Stdio::null())
        .output()
        .expect("run bramble serve");
    assert!(!served.status.success());
    let stderr = String::from_utf8_lossy(&served.stderr);
    assert!(stderr.contains(&expected), "{stderr}");

    write(&dir, "_redirects", "/ok /fine\n");
    write(&dir, "_headers", "/a\n  Transfer-Encoding: chunked\n");
    let packed = pack(&dir, &out, &[]);
    assert!(!packed.status.success());
    let stderr = String::from_utf8_lossy(&packed.stderr);
    let expected = format!(
        "{}:2:3: this header is set by the server",
        dir.join("_headers").display()
    );
    assert!(stderr.contains(&expected), "{stderr}");

    write(&dir, "_headers", "/a\n  X-A: b\n");
    write(&dir, "_redirects", "/x /nowhere.html 200\n");
    let packed = pack(&dir, &out, &[]);
    let stderr = String::from_utf8_lossy(&packed.stderr);
    assert!(
        stderr.contains(":1:4: /nowhere.html is not a file of this site"),
        "{stderr}"
    );
}

/// A malformed rule file: its name, its bytes, and the line, column (`None`: any) and words
/// of the error `bramble pack` must give.
type MalformedCase = (&'static str, Vec<u8>, usize, Option<usize>, &'static str);

/// Malformed rule files, each a pack error at `file:line:column` with its message; no image
/// is written.
#[test]
fn every_malformed_rule_is_a_pack_error_at_its_line() {
    let too_many: String = (0..=2000).map(|i| format!("/s{i} /t\n")).collect();
    let cases: Vec<MalformedCase> = vec![
        (
            "_redirects",
            b"/a /b\n/lonely\n".to_vec(),
            2,
            Some(8),
            "needs a target",
        ),
        (
            "_redirects",
            b"/ok /fine\n\n/bad /target 299\n".to_vec(),
            3,
            Some(14),
            "status \"299\"",
        ),
        (
            "_redirects",
            b"/a /b 301!!\n".to_vec(),
            1,
            Some(7),
            "status",
        ),
        ("_redirects", b"/a/*/b /c\n".to_vec(), 1, Some(4), "splat"),
        (
            "_redirects",
            b"/blog /posts/:splat\n".to_vec(),
            1,
            Some(14),
            "does not capture",
        ),
        (
            "_redirects",
            b"/store id=:id /blog/:id 301\n".to_vec(),
            1,
            Some(8),
            "query-parameter",
        ),
        (
            "_redirects",
            b"/ /anz 302 Country=au,nz\n".to_vec(),
            1,
            Some(12),
            "not supported",
        ),
        (
            "_redirects",
            b"/api/* https://api.example/:splat 200\n".to_vec(),
            1,
            Some(8),
            "proxying",
        ),
        (
            "_redirects",
            b"/loop /loop 301\n".to_vec(),
            1,
            Some(7),
            "itself",
        ),
        ("_redirects", b"/a relative\n".to_vec(), 1, Some(4), ""),
        ("_redirects", b"/%zz /b\n".to_vec(), 1, Some(2), "%-escape"),
        ("_redirects", b"/:a/:a /b\n".to_vec(), 1, None, "twice"),
        (
            "_redirects",
            b"/x /nowhere.html 200\n".to_vec(),
            1,
            Some(4),
            "is not a file of this site",
        ),
        (
            "_redirects",
            too_many.into_bytes(),
            2001,
            Some(1),
            "static rules",
        ),
        (
            "_redirects",
            b"/a /b\n/c\xff /d\n".to_vec(),
            2,
            Some(3),
            "not UTF-8",
        ),
        (
            "_headers",
            b"  X-A: b\n".to_vec(),
            1,
            Some(3),
            "before any path pattern",
        ),
        (
            "_headers",
            b"/a\n  Content-Length: 5\n".to_vec(),
            2,
            Some(3),
            "set by the server",
        ),
        (
            "_headers",
            b"/a\n  Transfer-Encoding: chunked\n".to_vec(),
            2,
            Some(3),
            "set by the server",
        ),
        (
            "_headers",
            b"/a\n  ! Connection\n".to_vec(),
            2,
            None,
            "set by the server",
        ),
        ("_headers", b"/a\n  Bad Name: x\n".to_vec(), 2, Some(6), ""),
        ("_headers", b"/a\n  X-A:\n".to_vec(), 2, None, "non-empty"),
        ("_headers", b"/a\n  X-A: b\x01c\n".to_vec(), 2, None, ""),
        (
            "_headers",
            b"/a\n/b\n  X-A: 1\n".to_vec(),
            1,
            Some(1),
            "without headers",
        ),
        (
            "_headers",
            b"/a\n  no colon here\n".to_vec(),
            2,
            None,
            "Name: value",
        ),
        (
            "_headers",
            b"/a extra\n  X: y\n".to_vec(),
            1,
            Some(4),
            "alone on its line",
        ),
        (
            "_headers",
            b"/a\n  X: y\n\xc3(\n".to_vec(),
            3,
            Some(1),
            "not UTF-8",
        ),
    ];
    let temp = tempfile::tempdir().unwrap();
    let out = temp.path().join("site.bin");
    let mut failures = Vec::new();
    for (number, (file, text, line, column, message)) in cases.iter().enumerate() {
        let dir = temp.path().join(format!("site{number}"));
        write(&dir, "index.html", "<p>home</p>");
        std::fs::write(dir.join(file), text).unwrap();
        let packed = pack(&dir, &out, &[]);
        let stderr = String::from_utf8_lossy(&packed.stderr);
        let at = match column {
            Some(column) => format!("{}:{line}:{column}: ", dir.join(file).display()),
            None => format!("{}:{line}:", dir.join(file).display()),
        };
        let found = stderr
            .lines()
            .any(|l| l.contains(&at) && l.contains(message));
        if packed.status.success() || !found || out.exists() {
            failures.push(format!(
                "{file} {:?}: wanted {at}...{message}, got (exit {:?}) {stderr}",
                String::from_utf8_lossy(&text[..text.len().min(60)]),
                packed.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn help_lists_the_site_options() {
    for command in ["pack", "serve"] {
        let help = Command::new(env!("CARGO_BIN_EXE_bramble"))
            .args([command, "--help"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&help.stdout);
        for flag in [
            "--clean-urls",
            "--spa-fallback",
            "--no-security-headers",
            "--listing",
            "--search",
        ] {
            assert!(
                text.contains(flag),
                "{command} --help lacks {flag}:\n{text}"
            );
        }
    }
}

#[test]
fn pack_flags_reach_the_image() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    good_site(&dir);
    let out = temp.path().join("site.bin");
    let packed = pack(
        &dir,
        &out,
        &["--clean-urls", "--spa-fallback", "--no-security-headers"],
    );
    assert!(
        packed.status.success(),
        "{}",
        String::from_utf8_lossy(&packed.stderr)
    );
    let bytes = std::fs::read(&out).unwrap();
    let image = bramble_site::SiteImage::new_checked(&bytes).unwrap();
    let flags = image.index().flags();
    for flag in [
        bramble_site::SiteFlags::CLEAN_URLS,
        bramble_site::SiteFlags::SPA_FALLBACK,
        bramble_site::SiteFlags::NO_SECURITY_HEADERS,
    ] {
        assert!(flags.has(flag));
    }
    assert_eq!(image.index().redirects().len(), 4);
    assert_eq!(image.index().header_rules().len(), 2);
    assert!(image.get("/_redirects").is_none());
}

#[test]
fn serve_lists_folders_and_searches() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    good_site(&dir);
    write(
        &dir,
        "docs/install.html",
        "<html lang=en><title>Install</title><p>Installing the server takes a minute.</p>",
    );
    write(&dir, "files/a.zip", "zip");
    write(&dir, "files/b.txt", "b");
    write(&dir, "marked/.bramble-listing", "");
    write(&dir, "marked/x.bin", "x");
    write(
        &dir,
        "search.html",
        "<!DOCTYPE html><title>{{query}} - my site</title>{{results}}",
    );
    let server = start(&dir, &["--search", "--listing", "files"]);
    let url = |path: &str| format!("{}{path}", server.base);
    let r = fetch(&url("/files/"));
    assert_eq!(r.status, 200);
    assert!(
        r.body.contains("a.zip") && r.body.contains("b.txt"),
        "{}",
        r.body
    );
    let r = fetch(&url("/files/index.json"));
    assert!(r.body.contains("\"name\":\"a.zip\""), "{}", r.body);
    let r = fetch(&url("/marked/"));
    assert!(r.body.contains("x.bin"), "a marker file lists its folder");
    assert_eq!(fetch(&url("/marked/.bramble-listing")).status, 404);
    let r = fetch(&url("/search?q=installing"));
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .starts_with("<!DOCTYPE html><title>installing - my site</title>")
    );
    assert!(r.body.contains("<mark>Installing</mark>"), "{}", r.body);
    assert_eq!(
        fetch(&url("/search.html")).status,
        404,
        "the template is not a page"
    );
    let r = fetch(&url("/search.json?q=minute"));
    assert!(
        r.body.contains("\"url\":\"/docs/install.html\""),
        "{}",
        r.body
    );

    // A template with two {{results}} is a pack error naming it; a search.html without
    // any (Sphinx writes one driven by scripts) is an ordinary page.
    write(&dir, "search.html", "{{results}}{{results}}");
    let out = temp.path().join("x.bin");
    let packed = pack(&dir, &out, &["--search"]);
    let stderr = String::from_utf8_lossy(&packed.stderr);
    assert!(!packed.status.success());
    assert!(
        stderr.contains("search.html cannot be the search template"),
        "{stderr}"
    );
    write(&dir, "search.html", "<p>a page of its own</p>");
    let packed = pack(&dir, &out, &["--search"]);
    assert!(packed.status.success());
    let bytes = std::fs::read(&out).unwrap();
    let image = bramble_site::SiteImage::new_checked(&bytes).unwrap();
    assert!(image.get("/search.html").is_some());
    assert_eq!(image.index().search().unwrap().pieces().count(), 0);
}

#[test]
fn serve_spa_fallback_and_no_security_headers() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    write(
        &dir,
        "index.html",
        "<!doctype html><title>app</title><div id=app></div>",
    );
    let plain = start(&dir, &[]);
    let r = fetch(&format!("{}/some/route", plain.base));
    assert_eq!(
        r.status, 404,
        "without --spa-fallback an unknown path is 404"
    );
    assert_eq!(r.header("x-frame-options"), Some("SAMEORIGIN"));
    drop(plain);
    let server = start(&dir, &["--spa-fallback", "--no-security-headers"]);
    let r = fetch(&format!("{}/some/route", server.base));
    assert_eq!(r.status, 200, "--spa-fallback serves /index.html");
    assert!(r.body.contains("<div id=app>"), "{}", r.body);
    for header in [
        "x-frame-options",
        "x-content-type-options",
        "referrer-policy",
    ] {
        assert_eq!(r.header(header), None, "--no-security-headers: {header}");
    }
}

#[test]
fn pack_listing_writes_the_folders_index() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    write(&dir, "index.html", "<!doctype html><title>home</title>");
    write(&dir, "files/a.zip", "zip");
    write(&dir, "files/deeper/b.txt", "b");
    let out = temp.path().join("site.bin");
    let packed = pack(&dir, &out, &["--listing", "files"]);
    assert!(
        packed.status.success(),
        "{}",
        String::from_utf8_lossy(&packed.stderr)
    );
    let bytes = std::fs::read(&out).unwrap();
    let image = bramble_site::SiteImage::new_checked(&bytes).unwrap();
    for listing in [
        "/files/index.html",
        "/files/index.json",
        "/files/deeper/index.json",
    ] {
        assert!(image.get(listing).is_some(), "{listing}");
    }
    let json = image.get("/files/index.json").unwrap();
    let body = String::from_utf8_lossy(image.body(json.identity.body));
    assert!(body.contains("\"name\":\"a.zip\""), "{body}");
    assert!(
        image.get("/index.json").is_none(),
        "only the folder asked for"
    );
}
