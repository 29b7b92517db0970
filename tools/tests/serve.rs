//! `bramble serve` end to end: pack a folder, serve it on a free 127.0.0.1 port, fetch with a
//! real HTTP client (ureq) and compare bytes; conditional and range requests; `--watch`
//! picks up an edit. The server is stopped by PID.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// Starts `bramble serve DIR --port 0 [extra]` and waits (bounded) for its address line.
fn start(dir: &Path, extra: &[&str]) -> ServerProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .arg("serve")
        .arg(dir)
        .args(["--port", "0", "--bind", "127.0.0.1"])
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
                let url = line[at..]
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .trim_end_matches('/');
                let _ = send.send(url.to_string());
            }
        }
    });
    let mut process = ServerProcess {
        child,
        base: String::new(),
    };
    process.base = receive
        .recv_timeout(Duration::from_secs(120))
        .expect("bramble serve printed its address");
    assert!(
        process.base.starts_with("http://127.0.0.1:"),
        "{}",
        process.base
    );
    process
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

struct Fetched {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Fetched {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn fetch(agent: &ureq::Agent, url: &str, headers: &[(&str, &str)]) -> Fetched {
    let mut request = agent.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut response = request.call().expect("HTTP exchange");
    let headers = response
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    Fetched {
        status: response.status().as_u16(),
        headers,
        body: response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .expect("body"),
    }
}

fn write_site(dir: &Path) -> Vec<u8> {
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<!DOCTYPE html><title>t</title><p>home page</p>\n",
    )
    .unwrap();
    std::fs::write(dir.join("style.css"), "body { margin: 0 }\n".repeat(50)).unwrap();
    std::fs::write(dir.join("docs/index.html"), "<p>docs</p>\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 31 % 253) as u8).collect();
    std::fs::write(dir.join("data.bin"), &big).unwrap();
    big
}

#[test]
fn serves_a_folder_byte_for_byte_with_conditionals_and_ranges() {
    let temp = tempfile::tempdir().unwrap();
    let site = temp.path().join("site");
    let big = write_site(&site);
    let server = start(&site, &["--quiet"]);
    let agent = agent();

    let index = fetch(&agent, &format!("{}/", server.base), &[]);
    assert_eq!(index.status, 200);
    assert_eq!(index.body, std::fs::read(site.join("index.html")).unwrap());
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(index.header("x-content-type-options"), Some("nosniff"));
    // The host has a clock, so the preview sends Date (the Pi does not until SNTP).
    assert!(index.header("date").is_some_and(|d| d.ends_with(" GMT")));

    let css = fetch(&agent, &format!("{}/style.css", server.base), &[]);
    assert_eq!(css.status, 200);
    assert_eq!(css.body, std::fs::read(site.join("style.css")).unwrap());
    let etag = css.header("etag").expect("ETag").to_string();

    // Conditional: the ETag validates, the Last-Modified too.
    let again = fetch(
        &agent,
        &format!("{}/style.css", server.base),
        &[("If-None-Match", &etag)],
    );
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    let last_modified = css
        .header("last-modified")
        .expect("Last-Modified")
        .to_string();
    let again = fetch(
        &agent,
        &format!("{}/style.css", server.base),
        &[("If-Modified-Since", &last_modified)],
    );
    assert_eq!(again.status, 304);

    // Compression: the packer's gzip variant, with Vary.
    let gz = fetch(
        &agent,
        &format!("{}/style.css", server.base),
        &[("Accept-Encoding", "gzip")],
    );
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    assert_eq!(gz.header("vary"), Some("Accept-Encoding"));
    assert!(gz.body.len() < css.body.len());

    // Range.
    let whole = fetch(&agent, &format!("{}/data.bin", server.base), &[]);
    assert_eq!(whole.body, big);
    let part = fetch(
        &agent,
        &format!("{}/data.bin", server.base),
        &[("Range", "bytes=1000-1999")],
    );
    assert_eq!(part.status, 206);
    assert_eq!(part.body, &big[1000..2000]);
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes 1000-1999/{}", big.len()).as_str())
    );
    let beyond = fetch(
        &agent,
        &format!("{}/data.bin", server.base),
        &[("Range", "bytes=999999999-")],
    );
    assert_eq!(beyond.status, 416);

    // Directories and misses.
    let redirect = fetch(&agent, &format!("{}/docs", server.base), &[]);
    assert_eq!(
        (redirect.status, redirect.header("location")),
        (301, Some("/docs/"))
    );
    let docs = fetch(&agent, &format!("{}/docs/", server.base), &[]);
    assert_eq!(docs.body, b"<p>docs</p>\n");
    assert_eq!(
        fetch(&agent, &format!("{}/nope", server.base), &[]).status,
        404
    );
}

#[test]
fn watch_repacks_after_an_edit() {
    let temp = tempfile::tempdir().unwrap();
    let site = temp.path().join("site");
    write_site(&site);
    let server = start(&site, &["--watch", "--quiet"]);
    let agent = agent();
    let url = format!("{}/index.html", server.base);
    // In the preview, pages carry the live-reload script (at the end, when there is no
    // </body>).
    let with_script = |page: &[u8]| {
        let mut page = page.to_vec();
        page.extend_from_slice(bramble::serve::LIVE_RELOAD_SCRIPT.as_bytes());
        page
    };
    let original = std::fs::read(site.join("index.html")).unwrap();
    let served = fetch(&agent, &url, &[]).body;
    assert_eq!(
        served,
        with_script(&original),
        "the page as written, with the script"
    );

    let edited = b"<!DOCTYPE html><p>edited while serving</p>\n";
    std::fs::write(site.join("index.html"), edited).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = fetch(&agent, &url, &[]);
        if page.body == with_script(edited) {
            break;
        }
        assert!(Instant::now() < deadline, "edit not served within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn watch_serves_the_pack_error_until_the_folder_is_fixed() {
    let temp = tempfile::tempdir().unwrap();
    let site = temp.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    // An empty folder cannot be packed: the browser gets the reason as a 503 page.
    let server = start(&site, &["--watch", "--quiet"]);
    let agent = agent();
    let url = format!("{}/", server.base);
    let page = fetch(&agent, &url, &[]);
    assert_eq!(page.status, 503);
    assert!(String::from_utf8_lossy(&page.body).contains("holds no files"));

    std::fs::write(site.join("index.html"), "<p>fixed</p>").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = fetch(&agent, &url, &[]);
        if page.status == 200 {
            let expected = format!("<p>fixed</p>{}", bramble::serve::LIVE_RELOAD_SCRIPT);
            assert_eq!(page.body, expected.as_bytes());
            break;
        }
        assert!(Instant::now() < deadline, "fix not served within 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn serves_https_with_the_certificate_given() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    let big = write_site(&site);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel/tls/tests/data");
    let https_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cert = data.join("p256.pem");
    let key = data.join("p256.key");
    let process = start(
        &site,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--https-port",
            &https_port.to_string(),
            "--hsts",
            "600",
        ],
    );
    let mut fetched = None;
    for _ in 0..50 {
        let output = Command::new("curl")
            .args(["--silent", "--max-time", "10", "--cacert"])
            .arg(data.join("ca.pem"))
            .arg("--resolve")
            .arg(format!("bramble.test:{https_port}:127.0.0.1"))
            .arg(format!("https://bramble.test:{https_port}/data.bin"))
            .output()
            .unwrap();
        if output.status.success() && !output.stdout.is_empty() {
            fetched = Some(output.stdout);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let fetched = fetched.expect("bramble serve answered over HTTPS");
    assert!(
        fetched == big,
        "{} of {} bytes, byte for byte",
        fetched.len(),
        big.len()
    );
    // --hsts: Strict-Transport-Security over HTTPS only (RFC 6797 §7.2), as on the Pi.
    let head = Command::new("curl")
        .args([
            "--silent",
            "--max-time",
            "10",
            "--output",
            "/dev/null",
            "--dump-header",
            "-",
        ])
        .arg("--cacert")
        .arg(data.join("ca.pem"))
        .arg("--resolve")
        .arg(format!("bramble.test:{https_port}:127.0.0.1"))
        .arg(format!("https://bramble.test:{https_port}/"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).to_ascii_lowercase();
    assert!(
        head.contains("strict-transport-security: max-age=600\r\n"),
        "{head}"
    );
    let plain = fetch(&agent(), &format!("{}/", process.base), &[]);
    assert_eq!(plain.status, 200, "plain HTTP beside it");
    assert!(
        plain
            .headers
            .iter()
            .all(|(name, _)| !name.eq_ignore_ascii_case("strict-transport-security")),
        "no HSTS over plain HTTP: {:?}",
        plain.headers
    );
}

#[test]
fn hsts_needs_https_and_a_sane_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    write_site(&site);
    for args in [
        &["--hsts", "600"][..],
        &["--hsts", "0"],
        &["--hsts", "999999999"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_bramble"))
            .arg("serve")
            .arg(&site)
            .args(["--port", "0"])
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} was accepted");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("--hsts"),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
