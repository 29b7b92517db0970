//! QEMU end to end with a real browser: headless Chromium loads the default site from the
//! guest; every request it makes answers 200 (the kernel's access log on the serial console
//! says so), the DOM is the page's, and a screenshot is saved under target/test-artifacts/.
//! Without Chromium it fails, saying how to install it (tools/setup.sh installs Debian's `chromium`).

mod support;

use std::path::Path;
use std::time::{Duration, Instant};
use support::chromium::{decode_rgb, find_chromium, run_chromium};
use support::{access_log_since, boot_site, default_site_dir};

#[test]
fn chromium_renders_the_default_site_from_the_guest() {
    let chromium = find_chromium();
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
