//! QEMU end to end for what static hosts do: a site with `_redirects` (static, splat,
//! placeholder, 200 rewrite, 410, force), `_headers` (CSP and CORS on a pattern, a `!`
//! removal), nested 404.html pages, a listed downloads folder and `--search`, served by the
//! guest; every rule and header behaves as Netlify's and Cloudflare's documentation describes;
//! the search page renders in headless Chromium with JavaScript off (screenshot under
//! target/test-artifacts/); a 4 KiB query, a 200-term query and a punctuation query answer.
//! The site and the cases are tests/cases/static_hosts.rs, which tools/tests/site_rules.rs
//! runs against `bramble serve` too.

mod support;

#[path = "../cases/static_hosts.rs"]
mod cases;

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use support::chromium::{find_chromium, run_chromium};
use support::{Checks, access_log_since, boot_site_packed};

/// The site options of [`cases::FLAGS`], parsed as `bramble pack` parses them.
#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    site: bramble::pack::SiteOptions,
}

#[test]
fn rules_headers_listings_and_search_in_the_guest() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("site");
    cases::write_site(&dir);
    let options =
        Flags::parse_from(std::iter::once("pack").chain(cases::FLAGS.iter().copied())).site;
    let (mut served, _) = boot_site_packed(&dir, bramble_settings::TEMPLATE, None, false, options);
    let port = served.port;
    let failures = cases::check(port, "guest");
    let mut checks = Checks::default();
    let mut checks_headers = |name: &str, ok: bool, detail: String| {
        checks.check(name, ok, || detail);
    };
    checks_headers("the shared cases", failures.is_empty(), failures.join("\n"));

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
