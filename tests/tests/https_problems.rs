//! What the owner sees when the card's certificate or key is bad: files copied onto the card
//! by hand, past `bramble image`'s checks. The guest says on the console which file is wrong
//! and why, its `status` command says that HTTPS is not running and why, and plain HTTP
//! serves every file of the site (with `https = only` too: no redirect to a port that cannot
//! answer) instead of the board resetting or going quiet. An expired certificate is still
//! served over HTTPS, and once SNTP has set the clock the console and the status line say
//! that it expired. Without a site, the 503 diagnostic page that a browser gets says it too.

mod support;

use bramble::image::TlsFiles;
use std::process::Command;
use std::time::Duration;
use support::tls::fixture;
use support::*;

/// CERT.PEM and KEY.PEM on the card with these bytes, unchecked.
fn files(certificate: Vec<u8>, key: Vec<u8>) -> TlsFiles {
    TlsFiles {
        certificate_name: "CERT.PEM".into(),
        certificate,
        key_name: "KEY.PEM".into(),
        key,
    }
}

fn read_fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

/// curl over HTTPS to the guest as `bramble.test`, trusting only the test CA.
fn curl_https(https_port: u16, path: &str) -> std::process::Output {
    Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "30", "--cacert"])
        .arg(fixture("ca.pem"))
        .arg("--resolve")
        .arg(format!("bramble.test:{https_port}:127.0.0.1"))
        .arg(format!("https://bramble.test:{https_port}{path}"))
        .output()
        .expect("curl (installed by tools/setup.sh)")
}

/// The guest's `status: https` line after a `status` command.
fn https_status(served: &mut ServedSite) -> String {
    served.guest.send_line("status");
    served
        .guest
        .wait_for(
            |line| line.contains("status: https"),
            Duration::from_secs(20),
        )
        .unwrap_or_else(|| {
            panic!(
                "no status: https line; serial:\n{}",
                served.guest.transcript.join("\n")
            )
        })
}

/// Boots the default site with `settings` and `tls` on the card, and checks what a bad
/// certificate or key must give: `console` on the console, a status line naming `reason`,
/// every file over plain HTTP, and no HTTPS.
fn check_refused(what: &str, settings: &str, tls: TlsFiles, console: &str, reason: &str) {
    let site = default_site_dir();
    let (mut served, https_port) = boot_site_with(&site, settings, Some(tls), false);
    let https_port = https_port.unwrap();
    let mut checks = Checks::default();
    let transcript = served.guest.transcript.join("\n");
    let line = served
        .guest
        .transcript
        .iter()
        .find(|line| line.contains("HTTPS is not started"))
        .cloned()
        .unwrap_or_default();
    checks.check(
        "the console says HTTPS is not started, and why",
        line.contains(console) && line.contains("plain HTTP is served"),
        || transcript.clone(),
    );
    checks.check(
        "no reset and no panic",
        !transcript.contains("panic") && !transcript.contains("reset by"),
        || transcript.clone(),
    );
    for (url, bytes) in site_files(&site) {
        let response = get(served.port, &url, "");
        checks.check(
            &format!("{url} over plain HTTP"),
            response.status == 200 && response.body == bytes,
            || format!("{}, {} bytes", response.status, response.body.len()),
        );
    }
    let output = curl_https(https_port, "/");
    checks.check("no HTTPS", !output.status.success(), || {
        String::from_utf8_lossy(&output.stdout).into_owned()
    });
    let status = https_status(&mut served);
    checks.check(
        "the status line says why HTTPS is not running",
        status.contains("status: https not started: ")
            && status.contains(reason)
            && status.contains("plain HTTP is served"),
        || status.clone(),
    );
    checks.finish(what);
}

#[test]
fn a_certificate_file_that_is_not_pem_leaves_plain_http_serving_with_https_only() {
    check_refused(
        "a certificate that is not PEM",
        "https = only\n",
        files(
            b"this is not a certificate\n".to_vec(),
            read_fixture("p256.key"),
        ),
        "tls: tls_certificate CERT.PEM with tls_key KEY.PEM: no PEM CERTIFICATE block",
        "no PEM CERTIFICATE block in the certificate file",
    );
}

#[test]
fn a_key_of_another_certificate_leaves_plain_http_serving() {
    check_refused(
        "a key that is not the certificate's",
        "https = on\n",
        files(read_fixture("p256.pem"), read_fixture("other.key")),
        "tls: tls_certificate CERT.PEM with tls_key KEY.PEM: the key does not belong to the \
         certificate",
        "the key does not belong to the certificate",
    );
}

#[test]
fn a_key_file_missing_from_the_card_leaves_plain_http_serving() {
    check_refused(
        "a key file that is not on the card",
        "https = on\ntls_key = GONE.PEM\n",
        files(read_fixture("p256.pem"), read_fixture("p256.key")),
        "tls: tls_key GONE.PEM: not on the card",
        "tls_key GONE.PEM: not on the card",
    );
}

#[test]
fn an_expired_certificate_is_reported_once_the_clock_is_set() {
    let site = default_site_dir();
    let sntp = start_sntp_server();
    let settings = format!("https = on\nntp = 10.0.2.2:{sntp}\n");
    let tls = files(read_fixture("expired.pem"), read_fixture("p256.key"));
    let (mut served, https_port) = boot_site_with(&site, &settings, Some(tls), true);
    let https_port = https_port.unwrap();
    let mut checks = Checks::default();
    let expired = served
        .guest
        .wait_for(
            |line| line.contains("tls: the certificate"),
            Duration::from_secs(60),
        )
        .unwrap_or_default();
    checks.check(
        "the console says it expired, and when",
        expired.contains("tls: the certificate EXPIRED on Mon, 01 Jan 2001 00:00:00 GMT")
            && expired.contains("plain HTTP is served"),
        || served.guest.transcript.join("\n"),
    );
    let output = curl_https(https_port, "/");
    let error = String::from_utf8_lossy(&output.stderr).to_ascii_lowercase();
    checks.check(
        "HTTPS serves it, and curl refuses it as expired",
        !output.status.success() && error.contains("expired"),
        || error.clone(),
    );
    let plain = get(served.port, "/", "");
    checks.check("plain HTTP serves", plain.status == 200, || {
        plain.status.to_string()
    });
    let status = https_status(&mut served);
    checks.check(
        "the status line says it expired",
        status.contains("certificate EXPIRED on Mon, 01 Jan 2001 00:00:00 GMT"),
        || status.clone(),
    );
    checks.finish("an expired certificate");
}

/// SITE.BIN bytes that are not a site image: the guest serves the 503 diagnostic page.
const NOT_A_SITE: &[u8] = b"this is not a site image";

/// The 503 diagnostic page's body over plain HTTP.
fn diagnostic_page(served: &ServedSite) -> (u16, String) {
    let response = get(served.port, "/", "");
    (
        response.status,
        String::from_utf8_lossy(&response.body).into_owned(),
    )
}

#[test]
fn the_diagnostic_page_says_why_https_is_not_running_escaped() {
    // The key file named in the settings is not on the card; its name has characters that
    // FAT allows and HTML must escape.
    let settings = "https = on\ntls_key = K&'Y.PEM\n";
    let tls = files(read_fixture("p256.pem"), read_fixture("p256.key"));
    let (served, _) = boot_image_with(NOT_A_SITE.to_vec(), settings, Some(tls), false);
    let mut checks = Checks::default();
    let (status, page) = diagnostic_page(&served);
    checks.check("the diagnostic page", status == 503, || status.to_string());
    checks.check(
        "it says why HTTPS is not running, escaped, in a paragraph of its own",
        page.contains(
            "<p>HTTPS is not running: tls_key K&amp;&#39;Y.PEM: not on the card; plain HTTP \
             is served.</p>",
        ),
        || page.clone(),
    );
    checks.check(
        "and still names the site's problem",
        page.contains("SITE.BIN"),
        || page.clone(),
    );
    checks.finish("the diagnostic page without HTTPS");
}

#[test]
fn the_diagnostic_page_says_the_certificate_expired_and_which_names_it_misses() {
    let sntp = start_sntp_server();
    // expired.pem covers bramble.test (and www.), not example.org.
    let settings =
        format!("https = on\nntp = 10.0.2.2:{sntp}\ndomain = bramble.test, example.org\n");
    let tls = files(read_fixture("expired.pem"), read_fixture("p256.key"));
    let (mut served, _) = boot_image_with(NOT_A_SITE.to_vec(), &settings, Some(tls), true);
    let mut checks = Checks::default();
    let uncovered = "The HTTPS certificate does not cover example.org (domain in BRAMBLE.TXT): \
                     browsers asking for it refuse HTTPS.";
    let console = served.guest.transcript.join("\n");
    checks.check(
        "the console names the name it misses, and only that",
        console.contains("tls: the certificate does not cover example.org")
            && !console.contains("does not cover bramble.test"),
        || console.clone(),
    );
    served.guest.wait_for(
        |line| line.contains("tls: the certificate EXPIRED"),
        Duration::from_secs(60),
    );
    let (status, page) = diagnostic_page(&served);
    checks.check("the diagnostic page", status == 503, || status.to_string());
    checks.check(
        "once the clock is set it says the certificate expired, and the name it misses",
        page.contains(&format!(
            "<p>{uncovered} The HTTPS certificate EXPIRED on Mon, 01 Jan 2001 00:00:00 GMT: \
             browsers refuse HTTPS until a new one is on the card; plain HTTP is served.</p>"
        )),
        || page.clone(),
    );
    let status = https_status(&mut served);
    checks.check(
        "the status line says so too",
        status.contains(
            "certificate EXPIRED on Mon, 01 Jan 2001 00:00:00 GMT, does not cover \
                         example.org",
        ),
        || status.clone(),
    );
    checks.finish("the diagnostic page with an expired certificate");
}
