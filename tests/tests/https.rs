//! HTTPS from the QEMU guest: a certificate made with openssl (the fixtures of kernel/tls),
//! put on the card as `bramble image --tls-cert --tls-key` does. curl fetches every file of
//! the default site byte for byte over HTTPS; openssl s_client sees TLS 1.3 and has a
//! session resumed; plain HTTP still serves, with a Date once SNTP (a server on the host)
//! has set the clock; with `https = only` plain HTTP answers 308, except the ACME challenge
//! path. testssl.sh (Debian's package; its protocol, cipher, forward-secrecy and
//! vulnerability checks), against the guest on a TAP link in a namespace, finds no
//! vulnerability, nothing below TLS 1.2, and no cipher or group beyond Mozilla's
//! "intermediate" profile.

mod netns;
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use support::tls::{curl, fixture, tls_files};
use support::*;

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
    // (curl takes h2 when offered: ALPN offers it first.)
    checks.check(
        "https serves",
        text.starts_with("http/1.1 200") || text.starts_with("http/2 200"),
        || text.clone(),
    );
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

/// What Mozilla's "intermediate" server profile (ssl-config.mozilla.org, guidelines 5.x) allows
/// with an ECDSA certificate, as testssl.sh's hex codes: TLS 1.3's three suites, and TLS 1.2's
/// ECDHE-ECDSA with AES-GCM or ChaCha20-Poly1305 (its RSA and DHE suites need an RSA key).
const MOZILLA_INTERMEDIATE_CIPHERS: &[&str] = &[
    "tls1_3_x1301", // TLS_AES_128_GCM_SHA256
    "tls1_3_x1302", // TLS_AES_256_GCM_SHA384
    "tls1_3_x1303", // TLS_CHACHA20_POLY1305_SHA256
    "tls1_2_xc02b", // ECDHE-ECDSA-AES128-GCM-SHA256
    "tls1_2_xc02c", // ECDHE-ECDSA-AES256-GCM-SHA384
    "tls1_2_xcca9", // ECDHE-ECDSA-CHACHA20-POLY1305
];
/// The key-exchange groups of the same profile.
const MOZILLA_INTERMEDIATE_CURVES: &[&str] = &["X25519", "prime256v1", "secp384r1"];
/// The guest's static address on the namespace's TAP link.
const TAP_GUEST: &str = "192.168.77.2";

#[test]
fn testssl_over_tap_finds_no_vulnerability_and_nothing_beyond_mozilla_intermediate() {
    // The guest on a TAP link inside a namespace this test creates, testssl.sh inside it:
    // nothing leaves the namespace (it has no route out; --nodns none).
    let netns = netns::Netns::create();
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("card.img");
    let packed =
        bramble::pack::pack_site(&default_site_dir(), &bramble::pack::PackOptions::default())
            .expect("pack the site");
    let inputs = bramble::image::ImageInputs {
        kernel: std::fs::read(&bramble_tests::kernel().raw).expect("kernel.img"),
        site: packed.image,
        settings: format!("https = on\naddress = {TAP_GUEST}/24\nmdns = off\n"),
        firmware: Vec::new(),
        size_mib: None,
        tls: Some(tls_files()),
    };
    bramble::image::build_image(&inputs, &card).expect("build the SD card image");
    let mut config = bramble_qemu::QemuConfig::new(
        bramble_qemu::Machine::Raspi1ap,
        bramble_qemu::Kernel::Raw(bramble_tests::kernel().raw.clone()),
    );
    config.sd_card = Some(card);
    config.network = Some(bramble_qemu::Network::Tap {
        interface: netns::TAP.to_string(),
        topology: bramble_qemu::Topology::BehindHub,
    });
    let mut guest = netns::NetnsGuest::start(&netns, &config);
    guest.expect_line("serving: http://", bramble_tests::BOOT_TIMEOUT);
    let json = dir.path().join("testssl.json");
    // Protocols, cipher categories, each cipher per protocol, forward secrecy (with the
    // groups) and the vulnerability checks; the full default run adds client simulations.
    let started = std::time::Instant::now();
    let output = netns
        .command("timeout")
        .arg("300")
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
        .args([
            "--protocols",
            "--std",
            "-E",
            "--fs",
            "--vulnerable",
            "--jsonfile",
        ])
        .arg(&json)
        .arg(format!("{TAP_GUEST}:443"))
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
    // Every cipher offered (testssl.sh's -E, one finding per cipher and protocol) is one that
    // Mozilla's intermediate profile allows, and each protocol offers some.
    let offered: Vec<String> = findings
        .iter()
        .filter_map(|finding| {
            let id = field(finding, "id");
            id.strip_prefix("cipher-").map(str::to_string)
        })
        .collect();
    eprintln!("ciphers offered: {offered:?}");
    for cipher in &offered {
        checks.check(
            &format!("cipher {cipher} is in Mozilla intermediate"),
            MOZILLA_INTERMEDIATE_CIPHERS.contains(&cipher.as_str()),
            || by_id(&format!("cipher-{cipher}")).unwrap_or_default(),
        );
    }
    for protocol in ["tls1_2_", "tls1_3_"] {
        checks.check(
            &format!("ciphers offered with {protocol}"),
            offered.iter().any(|cipher| cipher.starts_with(protocol)),
            || format!("{offered:?}"),
        );
    }
    let curves = by_id("PFS_ECDHE_curves").unwrap_or_default();
    eprintln!("key-exchange groups: {curves}");
    checks.check(
        "the key-exchange groups are Mozilla intermediate's",
        !curves.is_empty()
            && curves
                .split_whitespace()
                .all(|curve| MOZILLA_INTERMEDIATE_CURVES.contains(&curve)),
        || curves.clone(),
    );
    // Anything testssl.sh rates LOW or worse is a finding; WARN means a check could not run.
    for finding in &findings {
        let (id, severity) = (field(finding, "id"), field(finding, "severity"));
        let rated = ["LOW", "MEDIUM", "HIGH", "CRITICAL", "WARN"].contains(&severity.as_str());
        let expected = TESTSSL_EXPECTED.iter().any(|(known, _)| *known == id);
        checks.check(&format!("{id}: {severity}"), !rated || expected, || {
            field(finding, "finding")
        });
    }
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    if std::fs::create_dir_all(&artifacts).is_ok() {
        let _ = std::fs::write(artifacts.join("testssl.txt"), &text);
    }
    drop(guest);
    checks.finish("testssl.sh against the guest over TAP");
}
