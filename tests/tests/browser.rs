//! QEMU end to end with a real browser: headless Chromium loads the default site from the
//! guest; every request it makes answers 200 (the kernel's access log on the serial console
//! says so), the DOM is the page's, and a screenshot is saved under target/test-artifacts/.
//! Skips, saying why, only when Chromium is not installed (CI installs Debian's `chromium`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{access_log_since, boot_site, default_site_dir};

/// The longest one Chromium run may take before it is killed and the test fails.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(120);

fn find_chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// Runs Chromium headless on `url` with a fresh profile and `extra` arguments; waits for it
/// (bounded) and returns its output. Chromium runs in its own process group, which is killed
/// by that id if it overruns.
fn run_chromium(chromium: &Path, profile: &Path, url: &str, extra: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--no-proxy-server",
            // Nothing but 127.0.0.1 resolves: the test never leaves the machine.
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--hide-scrollbars",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn().expect("start chromium");
    let pid = child.id();
    let started = Instant::now();
    // Read both pipes on threads so a chatty browser cannot block on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut buffer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buffer);
        buffer
    });
    let err = std::thread::spawn(move || {
        let mut buffer = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut buffer);
        buffer
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            // Kill the browser's own process group (its id is the browser's PID).
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = child.wait();
            panic!("chromium did not finish within {BROWSER_TIMEOUT:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// The pixels of a PNG as RGB triples.
fn decode_rgb(png_bytes: &[u8]) -> Vec<[u8; 3]> {
    let mut decoder = png::Decoder::new(png_bytes);
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buffer = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buffer).expect("PNG pixels");
    let channels = info.color_type.samples();
    buffer[..info.buffer_size()]
        .chunks(channels)
        .filter(|p| p.len() >= 3)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

#[test]
fn chromium_renders_the_default_site_from_the_guest() {
    let Some(chromium) = find_chromium() else {
        eprintln!("SKIPPED: chromium is not installed (Debian package `chromium`)");
        return;
    };
    let site = default_site_dir();
    let mut served = boot_site(&site, bramble_settings::TEMPLATE);
    let url = format!("http://127.0.0.1:{}/", served.port);
    let profile = tempfile::tempdir().unwrap();
    let log_from = served.guest.transcript.len();

    let started = Instant::now();
    let dom = run_chromium(&chromium, profile.path(), &url, &["--dump-dom"]);
    let dom_text = String::from_utf8_lossy(&dom.stdout).to_string();
    assert!(
        dom.status.success()
            && dom_text.contains("Hello, and welcome.")
            && dom_text.contains("</html>"),
        "chromium --dump-dom {url}: {}\nstdout:\n{dom_text}\nstderr:\n{}",
        dom.status,
        String::from_utf8_lossy(&dom.stderr)
    );
    eprintln!("DOM dumped ({:.1} s)", started.elapsed().as_secs_f64());

    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let screenshot = artifacts.join("default-site-chromium.png");
    let _ = std::fs::remove_file(&screenshot);
    let started = Instant::now();
    let fresh_profile = tempfile::tempdir().unwrap();
    let shot = run_chromium(
        &chromium,
        fresh_profile.path(),
        &url,
        &[&format!("--screenshot={}", screenshot.display())],
    );
    assert!(
        shot.status.success(),
        "chromium --screenshot: {}\n{}",
        shot.status,
        String::from_utf8_lossy(&shot.stderr)
    );
    let png =
        std::fs::read(&screenshot).unwrap_or_else(|e| panic!("{}: {e}", screenshot.display()));
    eprintln!(
        "screenshot saved: {} ({} bytes)",
        screenshot.display(),
        png.len()
    );
    // The stylesheet took effect: the page background is the site's paper colour and its
    // green headings and berry link colour are on screen (unstyled HTML is black on white).
    let pixels = decode_rgb(&png);
    for (what, colour, at_least) in [
        (
            "paper background #fbfaf7",
            [0xfb, 0xfa, 0xf7],
            pixels.len() / 2,
        ),
        ("leaf-green heading #3d6b4a", [0x3d, 0x6b, 0x4a], 200),
        ("berry current-page link #7a2e4f", [0x7a, 0x2e, 0x4f], 20),
    ] {
        let count = pixels.iter().filter(|p| **p == colour).count();
        eprintln!("{what}: {count} pixels");
        assert!(
            count >= at_least,
            "{what}: {count} pixels in {}: the page did not render with its stylesheet",
            screenshot.display()
        );
    }
    eprintln!(
        "screenshots taken ({:.1} s)",
        started.elapsed().as_secs_f64()
    );

    // Every request the browser made, from the kernel's access log.
    let log = access_log_since(&mut served.guest, log_from, Duration::from_millis(500));
    let not_ok: Vec<_> = log
        .iter()
        .filter(|line| line.status != 200 && line.status != 304)
        .collect();
    assert!(
        not_ok.is_empty(),
        "requests the browser made that did not answer 200: {not_ok:?}\nall: {log:?}"
    );
    for needed in ["/", "/style.css", "/favicon.svg"] {
        assert!(
            log.iter()
                .any(|line| line.method == "GET" && line.target == needed && line.status == 200),
            "the browser never fetched {needed} with 200: {log:?}"
        );
    }
    // Chromium asks for br and gzip: the stylesheet must have travelled as a packed variant
    // (head and body smaller than the file), and the page rendering shows it decoded.
    let css_len = std::fs::metadata(site.join("style.css")).unwrap().len();
    let css = log
        .iter()
        .find(|line| line.target == "/style.css" && line.status == 200)
        .unwrap();
    assert!(
        css.bytes < css_len,
        "style.css sent as {} bytes (file {css_len}): not compressed for the browser",
        css.bytes
    );
    eprintln!(
        "{} requests from chromium, all 200: {:?}",
        log.len(),
        log.iter().map(|l| l.target.as_str()).collect::<Vec<_>>()
    );
}
