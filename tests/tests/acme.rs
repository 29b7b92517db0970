//! The board obtains its HTTPS certificate by ACME, end to end: the real kernel in QEMU on a
//! TAP link inside a network namespace the test creates, with Debian's pebble as the CA,
//! dnsmasq answering DNS for the test names, and an SNTP responder of this test giving the
//! host's time (the kernel checks the CA's certificate against its clock). The card is made as
//! an owner would: BRAMBLE.TXT with `https = only`, `acme = on`, `domain`, `acme_email`,
//! `acme_directory`, and the test CA's roots put on by `--acme-ca` (the library calls
//! `bramble image` makes). The guest orders with HTTP-01 (pebble fetches the answer from the
//! guest's port 80), and then serves HTTPS that curl verifies against pebble's root.
//!
//! No packet leaves the namespace: it has no route out, dnsmasq forwards nothing.
//!
//! `BRAMBLE_ACME_ICOUNT=1 cargo test -p bramble-tests --test acme obtains -- --nocapture`
//! runs the guest under `-icount shift=0` and prints the status line, whose busy time is then
//! the instructions spent from boot to the certificate.

mod netns;

use bramble::image::{
    BootFile, ImageInputs, build_image_with, check_acme_ca, settings_with_acme_ca,
};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{Guest, kernel, sntp};
use netns::{Daemon, HOST_ADDRESS, Netns, NetnsGuest, TAP, run};
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The guest's fixed address (BRAMBLE.TXT), which dnsmasq gives for `bramble.test`.
const GUEST: &str = "192.168.77.50";
/// From boot to a certificate: the kernel's order under QEMU (key generation, ten or so
/// signed requests, a TLS handshake per request) takes well under a minute; bounded.
const ISSUE_TIMEOUT: Duration = Duration::from_secs(300);

/// An SNTP responder on the namespace's address, giving the host's time.
struct Sntp {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sntp {
    fn start(netns: &Netns) -> Sntp {
        let namespace = std::fs::File::open(Path::new("/run/netns").join(netns.name()))
            .expect("open the namespace");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let (ready, bound) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            rustix::thread::move_into_link_name_space(
                namespace.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("enter the test's network namespace");
            let socket = UdpSocket::bind((HOST_ADDRESS, 123)).expect("bind port 123");
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            ready.send(()).unwrap();
            let mut request = [0u8; 512];
            while !stopping.load(Ordering::Relaxed) {
                let Ok((len, peer)) = socket.recv_from(&mut request) else {
                    continue;
                };
                if len < 48 {
                    continue;
                }
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap();
                let _ = socket.send_to(&sntp::reply(&request, now), peer);
            }
        });
        bound
            .recv_timeout(Duration::from_secs(10))
            .expect("the SNTP responder did not start");
        Sntp {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Sntp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The test CA (for pebble's own HTTPS listener, `acme.test`) and pebble's configuration.
fn make_ca(dir: &Path) {
    let openssl = |args: &[&str]| {
        run(Command::new("openssl").current_dir(dir).args(args));
    };
    let key = |name: &str| {
        openssl(&[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            name,
        ])
    };
    key("ca.key");
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-sha256",
        "-days",
        "3650",
        "-subj",
        "/CN=Bramble test CA",
        "-out",
        "ca.pem",
    ]);
    key("wfe.key");
    openssl(&[
        "req",
        "-new",
        "-key",
        "wfe.key",
        "-subj",
        "/CN=acme.test",
        "-out",
        "wfe.csr",
    ]);
    std::fs::write(
        dir.join("ext.txt"),
        format!("subjectAltName=DNS:acme.test,IP:{HOST_ADDRESS}\nextendedKeyUsage=serverAuth\n"),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "wfe.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "3650",
        "-extfile",
        "ext.txt",
        "-out",
        "wfe.pem",
    ]);
    std::fs::write(
        dir.join("pebble.json"),
        format!(
            r#"{{"pebble":{{"listenAddress":"{HOST_ADDRESS}:14000","managementListenAddress":"{HOST_ADDRESS}:15000","certificate":"{}","privateKey":"{}","httpPort":80,"tlsPort":443,"ocspResponderURL":"","externalAccountBindingRequired":false}}}}"#,
            dir.join("wfe.pem").display(),
            dir.join("wfe.key").display()
        ),
    )
    .unwrap();
}

/// Waits (bounded) until `path` holds `needle`.
fn wait_for_log(path: &Path, needle: &str, limit: Duration) {
    let start = Instant::now();
    while !std::fs::read_to_string(path).is_ok_and(|log| log.contains(needle)) {
        assert!(
            start.elapsed() < limit,
            "no {needle:?} in {} within {limit:?}:\n{}",
            path.display(),
            std::fs::read_to_string(path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The namespace with its SNTP responder, dnsmasq, and the test CA's files in `dir`.
struct Lab {
    netns: Netns,
    _sntp: Sntp,
    _dnsmasq: Daemon,
}

impl Lab {
    fn new(dir: &Path) -> Lab {
        let netns = Netns::create();
        let sntp = Sntp::start(&netns);
        make_ca(dir);
        let mut command = netns.command("dnsmasq");
        command.args([
            "--keep-in-foreground",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--bind-interfaces",
            "--port=53",
            &format!("--listen-address={HOST_ADDRESS}"),
            "--except-interface=lo",
            &format!("--address=/acme.test/{HOST_ADDRESS}"),
            &format!("--address=/bramble.test/{GUEST}"),
            "--user=root",
            "--log-queries",
            "--log-facility=-",
            &format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
        ]);
        let dnsmasq = Daemon::start(command, &dir.join("dnsmasq.log"));
        Lab {
            netns,
            _sntp: sntp,
            _dnsmasq: dnsmasq,
        }
    }

    /// Starts pebble (validation without its random sleeps) and saves its issuing root as
    /// `pebble-root.pem`.
    fn pebble(&self, dir: &Path) -> Daemon {
        let log = dir.join("pebble.log");
        let mut command = self.netns.command("pebble");
        command
            .env("PEBBLE_VA_NOSLEEP", "1")
            .arg("-config")
            .arg(dir.join("pebble.json"))
            .args(["-dnsserver", &format!("{HOST_ADDRESS}:53")]);
        let pebble = Daemon::start(command, &log);
        wait_for_log(&log, "Listening on", Duration::from_secs(20));
        let root = self.netns.output(
            "curl",
            &[
                "--silent",
                "--insecure",
                "--max-time",
                "10",
                &format!("https://{HOST_ADDRESS}:15000/roots/0"),
            ],
        );
        assert!(root.status.success(), "pebble's root: {root:?}");
        std::fs::write(dir.join("pebble-root.pem"), &root.stdout).unwrap();
        pebble
    }

    /// Makes the card, as `bramble image --config BRAMBLE.TXT --acme-ca ca.pem` does, and
    /// boots it; returns the guest and the site's files.
    fn boot(&self, dir: &Path) -> (Guest, Vec<(String, Vec<u8>)>) {
        let site = dir.join("site");
        let files = netns::write_site(&site);
        let settings = format!(
            "address = {GUEST}/24\ngateway = {HOST_ADDRESS}\ndns = {HOST_ADDRESS}\n\
             ntp = {HOST_ADDRESS}\nhttps = only\nacme = on\ndomain = bramble.test\n\
             acme_email = owner@bramble.test\nacme_directory = https://acme.test:14000/dir\n\
             certificate_store = ram\n"
        );
        let ca = check_acme_ca(&dir.join("ca.pem")).expect("the test CA is accepted");
        let (ca_name, settings) = settings_with_acme_ca(&settings);
        let packed = pack_site(&site, &PackOptions::default()).expect("packing the site");
        let inputs = ImageInputs {
            kernel: std::fs::read(&kernel().raw).expect("reading kernel.img"),
            site: packed.image,
            settings,
            firmware: Vec::new(),
            size_mib: None,
            tls: None,
        };
        let card = dir.join("card.img");
        build_image_with(
            &inputs,
            vec![BootFile {
                name: ca_name,
                bytes: ca,
            }],
            &card,
        )
        .expect("building the SD card");
        let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
        config.sd_card = Some(card);
        // For the README's figure: the guest clock counts instructions, so the status line's
        // busy time is instructions (thousands per "us").
        config.count_instructions = std::env::var_os("BRAMBLE_ACME_ICOUNT").is_some();
        config.network = Some(Network::Tap {
            interface: TAP.to_string(),
            topology: Topology::BehindHub,
        });
        (NetnsGuest::start(&self.netns, &config), files)
    }

    /// `url` fetched by curl with `--cacert pebble-root.pem` (bramble.test is the guest).
    fn verified_get(&self, dir: &Path, url: &str) -> Option<Vec<u8>> {
        let out = self.netns.output(
            "curl",
            &[
                "--silent",
                "--fail",
                "--max-time",
                "20",
                "--cacert",
                &dir.join("pebble-root.pem").display().to_string(),
                "--resolve",
                &format!("bramble.test:443:{GUEST}"),
                url,
            ],
        );
        out.status.success().then_some(out.stdout)
    }
}

/// Panics with the guest's serial output and the servers' logs.
fn fail(guest: &Guest, dir: &Path, what: &str) -> ! {
    panic!(
        "{what}; serial:\n{}\npebble:\n{}\ndnsmasq:\n{}",
        guest.transcript.join("\n"),
        std::fs::read_to_string(dir.join("pebble.log")).unwrap_or_default(),
        std::fs::read_to_string(dir.join("dnsmasq.log")).unwrap_or_default()
    )
}

#[test]
fn the_board_obtains_a_certificate_from_pebble_and_serves_https_curl_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let lab = Lab::new(dir);
    let _pebble = lab.pebble(dir);
    let (mut guest, files) = lab.boot(dir);
    let Some(issued) = guest.wait_for(
        |line| line.contains("acme: certificate issued"),
        ISSUE_TIMEOUT,
    ) else {
        fail(
            &guest,
            dir,
            &format!("no certificate within {ISSUE_TIMEOUT:?}"),
        );
    };
    // HTTPS with the new certificate, verified against pebble's root, every file of the site.
    for (path, body) in &files {
        if lab
            .verified_get(dir, &format!("https://bramble.test{path}"))
            .as_ref()
            != Some(body)
        {
            fail(
                &guest,
                dir,
                &format!("https://bramble.test{path} did not verify or differs"),
            );
        }
    }
    let pebble = std::fs::read_to_string(dir.join("pebble.log")).unwrap_or_default();
    assert_eq!(
        pebble.matches("Added order").count(),
        1,
        "one order:\n{pebble}"
    );
    // https = only: now that HTTPS runs, plain HTTP answers 308 to https.
    let plain = lab.netns.output(
        "curl",
        &[
            "--silent",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code} %{redirect_url}",
            "--max-time",
            "20",
            &format!("http://{GUEST}/"),
        ],
    );
    let plain = String::from_utf8_lossy(&plain.stdout).to_string();
    assert!(
        plain.starts_with("308 https://"),
        "plain HTTP after issuance: {plain}"
    );
    // The status line shows ACME's state and the TLS heap's high-water mark (and the busy
    // time since boot: instructions with BRAMBLE_ACME_ICOUNT set).
    guest.send_line("status");
    let acme = guest.expect_line("status: acme", Duration::from_secs(20));
    assert!(
        acme.contains("issued 1") && acme.contains("failures in a row 0"),
        "{acme}"
    );
    let https = guest
        .transcript
        .iter()
        .rev()
        .find(|line| line.contains("status: https"))
        .cloned()
        .unwrap_or_default();
    assert!(https.contains("certificate from ACME"), "{https}");
    let busy = guest
        .transcript
        .iter()
        .rev()
        .find(|line| line.contains("status: up"))
        .cloned()
        .unwrap_or_default();
    eprintln!("{issued}\n{busy}\n{https}\n{acme}");
}

#[test]
fn with_the_ca_down_the_board_says_why_serves_plain_http_and_retries_after_backing_off() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let lab = Lab::new(dir);
    let (mut guest, files) = lab.boot(dir);
    // pebble is not running: the directory request is refused.
    let Some(failed) = guest.wait_for(
        |line| line.contains("acme: ") && line.contains("trying again in"),
        ISSUE_TIMEOUT,
    ) else {
        fail(&guest, dir, "no ACME failure reported");
    };
    assert!(
        failed.contains("ERROR") && failed.contains("trying again in 60 s (failure 1)"),
        "{failed}"
    );
    let failed_at = Instant::now();
    // Plain HTTP serves meanwhile (https = only redirects only once HTTPS runs).
    let index = lab.netns.output(
        "curl",
        &[
            "--silent",
            "--fail",
            "--max-time",
            "20",
            &format!("http://{GUEST}/"),
        ],
    );
    assert!(
        index.status.success() && index.stdout == files[0].1,
        "plain HTTP while ACME fails: {index:?}"
    );
    guest.send_line("status");
    let status = guest.expect_line("status: acme", Duration::from_secs(20));
    assert!(
        status.contains("failures in a row 1") && !status.contains("last error: none"),
        "{status}"
    );
    // The CA comes up; the retry, a minute after the failure, obtains the certificate.
    let _pebble = lab.pebble(dir);
    let Some(issued) = guest.wait_for(
        |line| line.contains("acme: certificate issued"),
        Duration::from_secs(120),
    ) else {
        fail(&guest, dir, "no certificate after the CA came up");
    };
    let waited = failed_at.elapsed();
    assert!(
        waited >= Duration::from_secs(50),
        "retried after {waited:?}, before the back-off ended"
    );
    if lab.verified_get(dir, "https://bramble.test/").as_ref() != Some(&files[0].1) {
        fail(&guest, dir, "HTTPS did not verify after the retry");
    }
    eprintln!("{failed}\n{status}\n{issued}");
}
