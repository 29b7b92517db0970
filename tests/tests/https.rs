//! HTTPS from the QEMU guest: a certificate made with openssl (the fixtures of kernel/tls),
//! put on the card as `bramble image --tls-cert --tls-key` does. curl fetches every file of
//! the default site byte for byte over HTTPS; openssl s_client sees TLS 1.3 and has a
//! session resumed; plain HTTP still serves, with a Date once SNTP (a server on the host)
//! has set the clock; with `https = only` plain HTTP answers 308, except the ACME challenge
//! path. testssl.sh (Debian's package; its protocol, cipher-category, forward-secrecy and
//! vulnerability checks) finds no vulnerability and nothing below TLS 1.2.

mod support;

use bramble::image::{TlsFiles, check_tls_files};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernel/tls/tests/data")
        .join(name)
}

fn tls_files() -> TlsFiles {
    let (certificate, key, check) =
        check_tls_files(&fixture("p256.pem"), &fixture("p256.key"), 1_800_000_000).unwrap();
    assert!(check.warning.is_none());
    TlsFiles {
        certificate_name: "CERT.PEM".into(),
        certificate,
        key_name: "KEY.PEM".into(),
        key,
    }
}

/// curl over HTTPS to the guest, as `bramble.test`, trusting only the test CA.
fn curl(https_port: u16) -> Command {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "60", "--cacert"])
        .arg(fixture("ca.pem"))
        .arg("--resolve")
        .arg(format!("bramble.test:{https_port}:127.0.0.1"));
    command
}

/// openssl s_client sending one request; returns its whole output.
fn s_client(https_port: u16, extra: &[&str]) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{https_port}"))
        .args(["-servername", "bramble.test", "-CAfile"])
        .arg(fixture("ca.pem"))
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client (Debian package openssl, installed by tools/setup.sh)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        let _ =
            stdin.write_all(b"GET / HTTP/1.1\r\nHost: bramble.test\r\nConnection: close\r\n\r\n");
        // Give the answer time to come back before stdin closes (s_client quits on EOF).
        std::thread::sleep(std::time::Duration::from_secs(3));
    }
    let output = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn https_serves_every_file_resumes_sessions_and_plain_http_still_works() {
    let site = default_site_dir();
    let sntp = start_sntp_server();
    let settings = format!("https = on\nntp = 10.0.2.2:{sntp}\n");
    let (mut served, https_port) = boot_site_with(&site, &settings, Some(tls_files()), true);
    let https_port = https_port.unwrap();
    let mut checks = Checks::default();
    let files = site_files(&site);
    let dir = tempfile::tempdir().unwrap();
    // One curl for every file: one TLS connection, kept alive between them.
    let mut command = curl(https_port);
    for (index, (url, _)) in files.iter().enumerate() {
        command
            .arg("-o")
            .arg(dir.path().join(index.to_string()))
            .arg(format!("https://bramble.test:{https_port}{url}"));
    }
    let output = command.output().unwrap();
    checks.check("curl over https succeeded", output.status.success(), || {
        String::from_utf8_lossy(&output.stderr).into_owned()
    });
    for (index, (url, bytes)) in files.iter().enumerate() {
        let got = std::fs::read(dir.path().join(index.to_string())).unwrap_or_default();
        checks.check(
            &format!("{url} byte for byte over https"),
            &got == bytes,
            || format!("{} bytes, expected {}", got.len(), bytes.len()),
        );
    }
    let first = s_client(
        https_port,
        &[
            "-sess_out",
            &dir.path().join("session").display().to_string(),
        ],
    );
    checks.check("s_client: TLSv1.3", first.contains("New, TLSv1.3"), || {
        first.clone()
    });
    checks.check(
        "s_client: verified",
        first.contains("Verify return code: 0 (ok)"),
        || first.clone(),
    );
    checks.check(
        "s_client: a 200 over TLS",
        first.contains("HTTP/1.1 200 OK"),
        || first.clone(),
    );
    let second = s_client(
        https_port,
        &[
            "-sess_in",
            &dir.path().join("session").display().to_string(),
        ],
    );
    checks.check(
        "s_client: the session is resumed",
        second.contains("Reused, TLSv1.3"),
        || second.clone(),
    );
    let plain = get(served.port, "/", "");
    checks.check("plain HTTP still serves", plain.status == 200, || {
        plain.status.to_string()
    });
    checks.check(
        "no HSTS unless asked",
        plain.header("strict-transport-security").is_none(),
        String::new,
    );
    served.guest.send_line("status");
    let status = served
        .guest
        .wait_for(
            |line| line.contains("status: https"),
            std::time::Duration::from_secs(10),
        )
        .unwrap_or_default();
    checks.check(
        "status line counts a resumed handshake",
        status.contains("resumed 1"),
        || status.clone(),
    );
    checks.finish("HTTPS from the guest");
}

#[test]
fn https_only_redirects_plain_http_except_acme_challenges() {
    let site = default_site_dir();
    let (served, https_port) = boot_site_with(
        &site,
        "https = only\nhsts = 600\n",
        Some(tls_files()),
        false,
    );
    let https_port = https_port.unwrap();
    let mut checks = Checks::default();
    let redirect = get(served.port, "/index.html?x=1", "");
    checks.check("308 to https", redirect.status == 308, || {
        redirect.status.to_string()
    });
    let location = redirect.header("location").unwrap_or_default().to_string();
    checks.check(
        "Location keeps the target",
        location.starts_with("https://") && location.ends_with("/index.html?x=1"),
        || location.clone(),
    );
    let challenge = get(served.port, "/.well-known/acme-challenge/token", "");
    checks.check(
        "the ACME challenge path is not redirected",
        challenge.status == 404,
        || challenge.status.to_string(),
    );
    let output = curl(https_port)
        .args(["--include", "--output", "-"])
        .arg(format!("https://bramble.test:{https_port}/"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
    checks.check("https serves", text.starts_with("http/1.1 200"), || {
        text.clone()
    });
    checks.check(
        "HSTS over https",
        text.contains("strict-transport-security: max-age=600"),
        || text.clone(),
    );
    checks.finish("https = only");
}

/// testssl.sh findings Bramble may have, with the reason.
const TESTSSL_EXPECTED: &[(&str, &str)] = &[(
    "BREACH",
    "the packer's brotli and gzip variants are static files: a page the server never \
     writes secrets or request data into gives BREACH nothing to guess",
)];

/// What testssl.sh must have tested: every protocol, the cipher categories, forward secrecy
/// and each vulnerability check of `-U` (a scan that silently skipped one would pass).
const TESTSSL_REQUIRED: &[&str] = &[
    "SSLv2",
    "SSLv3",
    "TLS1",
    "TLS1_1",
    "TLS1_2",
    "TLS1_3",
    "cipherlist_NULL",
    "cipherlist_aNULL",
    "cipherlist_EXPORT",
    "cipherlist_LOW",
    "cipherlist_3DES_IDEA",
    "cipherlist_AVERAGE",
    "cipherlist_STRONG",
    "PFS",
    "heartbleed",
    "CCS",
    "ticketbleed",
    "ROBOT",
    "secure_renego",
    "secure_client_renego",
    "CRIME_TLS",
    "BREACH",
    "POODLE_SSL",
    "fallback_SCSV",
    "SWEET32",
    "FREAK",
    "DROWN",
    "LOGJAM",
    "BEAST",
    "LUCKY13",
    "RC4",
];

#[test]
fn testssl_finds_no_vulnerability_and_nothing_below_tls_1_2() {
    let site = default_site_dir();
    let (_served, https_port) = boot_site_with(&site, "https = on\n", Some(tls_files()), false);
    let https_port = https_port.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("testssl.json");
    // Protocols, cipher categories, forward secrecy and the vulnerability checks: about 25 s
    // against the guest (the full default run, with client simulations, takes 100 s). No DNS
    // lookups (the target is an address), nothing sent anywhere but the guest's port.
    let started = std::time::Instant::now();
    let output = Command::new("timeout")
        .arg("240")
        .args([
            "testssl",
            "--quiet",
            "--color",
            "0",
            "--warnings",
            "off",
            "--nodns",
            "none",
        ])
        .args(["--protocols", "--std", "--fs", "--vulnerable", "--jsonfile"])
        .arg(&json)
        .arg(format!("127.0.0.1:{https_port}"))
        .stdin(Stdio::null())
        .output()
        .expect("testssl (Debian package testssl.sh, installed by tools/setup.sh)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    eprintln!(
        "testssl.sh ran for {:.0} s:\n{text}",
        started.elapsed().as_secs_f64()
    );
    let findings: Vec<serde_json::Value> = std::fs::read(&json)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| {
            panic!(
                "testssl.sh wrote no JSON ({}): {text}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let field =
        |finding: &serde_json::Value, name: &str| finding[name].as_str().unwrap_or("").to_string();
    let by_id = |id: &str| {
        findings
            .iter()
            .find(|finding| finding["id"] == id)
            .map(|finding| field(finding, "finding"))
    };
    let mut checks = Checks::default();
    for id in TESTSSL_REQUIRED {
        checks.check(&format!("testssl tested {id}"), by_id(id).is_some(), || {
            "no finding with that id".into()
        });
    }
    for old in ["SSLv2", "SSLv3", "TLS1", "TLS1_1"] {
        let finding = by_id(old).unwrap_or_default();
        checks.check(
            &format!("{old} not offered"),
            finding.starts_with("not offered"),
            || finding.clone(),
        );
    }
    for (id, wanted) in [
        ("TLS1_2", "offered"),
        ("TLS1_3", "offered"),
        ("cipherlist_STRONG", "offered"),
        ("PFS", "offered"),
    ] {
        let finding = by_id(id).unwrap_or_default();
        checks.check(
            &format!("{id} {wanted}"),
            finding.starts_with(wanted),
            || finding.clone(),
        );
    }
    // Anything testssl.sh rates LOW or worse is a finding; WARN means a check could not run.
    for finding in &findings {
        let (id, severity) = (field(finding, "id"), field(finding, "severity"));
        let rated = ["LOW", "MEDIUM", "HIGH", "CRITICAL", "WARN"].contains(&severity.as_str());
        let expected = TESTSSL_EXPECTED.iter().any(|(known, _)| *known == id);
        checks.check(&format!("{id}: {severity}"), !rated || expected, || {
            field(finding, "finding")
        });
    }
    checks.finish("testssl.sh against the guest");
}
