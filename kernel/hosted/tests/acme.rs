//! ACME against Debian's pebble, in a network namespace each test creates (and deletes): the
//! hosted appliance takes a DHCP lease and name service from dnsmasq, resolves the CA's
//! directory by name, orders a certificate with HTTP-01, serves HTTPS that curl verifies
//! against pebble's root, keeps the certificate in its store (a file standing in for the
//! card: the store region in the middle, the rest never written), reuses it at the next start
//! without a new order, renews it, backs off through faults, and survives being killed in the
//! middle of saving.
//!
//! pebble's HTTPS listener gets a P-256 certificate of the test's own CA for `acme.test`; its
//! issuing root is read from its management port. The tests skip with a printed reason when
//! not root or when pebble, dnsmasq, openssl or curl is missing (tools/setup.sh installs
//! them).

use bramble_site::{FileSpec, SiteImageWriter, VariantSpec, http_date};
use bramble_testkit::netns::{TapNamespace, run_ok};
use bramble_testkit::pebble::ApiChain;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const HOST: &str = "192.168.77.1";
const GUEST: &str = "192.168.77.50";
const TAP: &str = "btap0";
const MAC: &str = "02:00:00:62:72:01";
const BIN: &str = env!("CARGO_BIN_EXE_bramble-hosted");
const DIRECTORY: &str = "https://acme.test:14000/dir";
/// The card stand-in: 4 MiB, the store's 64 blocks starting at block 2,048.
const CARD_BLOCKS: u64 = 8192;
const STORE_FIRST_BLOCK: u64 = 2048;
const STORE_BLOCKS: u64 = 64;

/// How long a start may take to serve verified HTTPS: generous, because a DHCP discover sent
/// while the TAP is still coming up is lost and smoltcp asks again only after 10 s.
const HTTPS_LIMIT: Duration = Duration::from_secs(30);

static NEXT: AtomicU32 = AtomicU32::new(0);

fn skip_reason() -> Option<String> {
    #[allow(unsafe_code)] // libc's geteuid: this test crate has no safe wrapper of it
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some("not root (network namespaces and TAP devices need it)".into());
    }
    for (program, arg) in [
        ("ip", "-V"),
        ("pebble", "-h"),
        ("dnsmasq", "--version"),
        ("openssl", "version"),
        ("curl", "--version"),
    ] {
        if Command::new(program).arg(arg).output().is_err() {
            return Some(format!(
                "{program} is not installed (tools/setup.sh installs it)"
            ));
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

macro_rules! skip_unless_able {
    () => {
        if let Some(reason) = skip_reason() {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
}

/// A child killed (by its PID, through `Child`) on drop.
struct Process {
    child: Child,
    log: PathBuf,
    name: &'static str,
}

impl Process {
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) for `needle` to appear `count` times in the log; returns the log.
    fn wait_for(&mut self, needle: &str, count: usize, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if log.matches(needle).count() >= count {
                return log;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}) before {needle:?}:\n{log}", self.name);
            }
            assert!(
                start.elapsed() < limit,
                "no {needle:?} (x{count}) in {}'s log within {limit:?}:\n{log}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.log());
        }
    }
}

/// The namespace, its TAP, dnsmasq (DHCP + DNS) and the test CA's files.
struct Lab {
    net: TapNamespace,
    dnsmasq: Option<Process>,
    site: PathBuf,
}

impl Lab {
    /// `names` are answered with the guest's address, `acme.test` with the host's.
    fn new(extra_dns: &[&str]) -> Self {
        let mut lab = Lab {
            net: TapNamespace::create("bramble-acme", TAP, &format!("{HOST}/24"))
                .keep_files_on_panic(),
            dnsmasq: None,
            site: PathBuf::new(),
        };
        lab.make_ca();
        lab.site = lab.make_site();
        let mut args = vec![
            "--keep-in-foreground".to_string(),
            "--no-resolv".into(),
            "--no-hosts".into(),
            "--port=53".into(),
            format!("--listen-address={HOST}"),
            "--bind-interfaces".into(),
            format!("--interface={TAP}"),
            format!("--address=/acme.test/{HOST}"),
            format!("--address=/bramble.test/{GUEST}"),
            "--dhcp-range=192.168.77.50,192.168.77.60,255.255.255.0,1h".into(),
            format!("--dhcp-host={MAC},{GUEST}"),
            format!("--dhcp-option=option:router,{HOST}"),
            format!("--dhcp-option=option:dns-server,{HOST}"),
            "--dhcp-authoritative".into(),
            "--no-ping".into(),
            format!(
                "--dhcp-leasefile={}",
                lab.net.dir().join("leases").display()
            ),
            format!("--pid-file={}", lab.net.dir().join("dnsmasq.pid").display()),
            "--log-queries".into(),
        ];
        for entry in extra_dns {
            args.push(format!("--address=/{entry}"));
        }
        let log = lab.net.dir().join("dnsmasq.log");
        let child = lab
            .command("dnsmasq")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("start dnsmasq");
        lab.dnsmasq = Some(Process {
            child,
            log,
            name: "dnsmasq",
        });
        lab
    }

    fn command(&self, program: &str) -> Command {
        self.net.command(program)
    }

    /// A P-256 CA and a certificate for pebble's listener (acme.test).
    fn make_ca(&self) {
        let host = HOST.parse().expect("HOST is an IPv4 address");
        bramble_testkit::pebble::make_ca(self.net.dir(), ApiChain::P256, host);
    }

    fn make_site(&self) -> PathBuf {
        let mut writer = SiteImageWriter::new();
        writer
            .add(FileSpec {
                path: "/index.html".into(),
                content_type: "text/html; charset=utf-8".into(),
                cache_control: "no-cache".into(),
                last_modified: 1_700_000_000,
                last_modified_http: http_date(1_700_000_000),
                identity: VariantSpec {
                    etag: "\"acme\"".into(),
                    body: b"<h1>acme</h1>".to_vec(),
                },
                gzip: None,
                brotli: None,
            })
            .unwrap();
        let path = self.net.dir().join("SITE.BIN");
        fs::write(&path, writer.finish().unwrap()).unwrap();
        path
    }

    /// Starts pebble with `env` (validation without its random sleeps).
    fn pebble(&self, env: &[(&str, &str)]) -> Process {
        let log = self.net.dir().join(format!(
            "pebble-{}.log",
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let mut command = self.command("pebble");
        command
            .env("PEBBLE_VA_NOSLEEP", "1")
            .args(["-config"])
            .arg(self.net.dir().join("pebble.json"))
            .args(["-dnsserver", &format!("{HOST}:53")])
            .stdout(fs::File::create(&log).unwrap())
            .stderr(Stdio::null());
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command.spawn().expect("start pebble");
        let mut process = Process {
            child,
            log,
            name: "pebble",
        };
        process.wait_for("Listening on", 1, Duration::from_secs(20));
        process
    }

    /// pebble's issuing root (a new one per pebble start), saved as a file.
    fn pebble_root(&self) -> PathBuf {
        let path = self.net.dir().join("pebble-root.pem");
        let out = run_ok(self.command("curl").args([
            "--silent",
            "--insecure",
            "--max-time",
            "10",
            &format!("https://{HOST}:15000/roots/0"),
        ]));
        fs::write(&path, out.stdout).unwrap();
        path
    }

    /// A card stand-in: random bytes, the store's region in the middle.
    fn card(&self) -> PathBuf {
        let path = self.net.dir().join("card.img");
        let mut bytes = vec![0u8; (CARD_BLOCKS * 512) as usize];
        let mut x = 0x2545_f491u32;
        for byte in &mut bytes {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *byte = x as u8;
        }
        // The store's region starts zeroed, as `bramble image` leaves it.
        let region =
            (STORE_FIRST_BLOCK * 512) as usize..((STORE_FIRST_BLOCK + STORE_BLOCKS) * 512) as usize;
        bytes[region].fill(0);
        fs::write(&path, bytes).unwrap();
        path
    }

    /// Starts bramble-hosted with ACME for bramble.test, the card's store, and `args`.
    fn guest(&self, card: Option<&Path>, args: &[&str]) -> Process {
        let log = self
            .net
            .dir()
            .join(format!("guest-{}.log", NEXT.fetch_add(1, Ordering::SeqCst)));
        let mut command = self.command(BIN);
        command
            .args(["--tap", TAP, "--mac", MAC, "--site"])
            .arg(&self.site)
            .args([
                "--domain",
                "bramble.test",
                "--acme-directory",
                DIRECTORY,
                "--acme-ca",
            ])
            .arg(self.net.dir().join("ca.pem"))
            .args(["--acme-email", "owner@bramble.test", "--no-access-log"]);
        if let Some(card) = card {
            command
                .arg("--certificate-store")
                .arg(card)
                .args(["--certificate-store-offset", &STORE_FIRST_BLOCK.to_string()]);
        }
        let child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("start bramble-hosted");
        Process {
            child,
            log,
            name: "bramble-hosted",
        }
    }

    /// The serial of the certificate served on 443, if the handshake verifies against
    /// `root`; checked by curl (a full HTTPS GET of / too).
    fn verified_serial(&self, root: &Path) -> Option<String> {
        let out = self
            .command("curl")
            .args(["--silent", "--fail", "--max-time", "10", "--cacert"])
            .arg(root)
            .args([
                "--resolve",
                &format!("bramble.test:443:{GUEST}"),
                "https://bramble.test/",
            ])
            .output()
            .unwrap();
        if !out.status.success() || out.stdout != b"<h1>acme</h1>" {
            return None;
        }
        let mut s_client = self
            .command("openssl")
            .args([
                "s_client",
                "-connect",
                &format!("{GUEST}:443"),
                "-servername",
                "bramble.test",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut pem = Vec::new();
        use std::io::Read;
        s_client
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut pem)
            .unwrap();
        let _ = s_client.wait();
        let mut x509 = Command::new("openssl")
            .args(["x509", "-noout", "-serial"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        x509.stdin.take().unwrap().write_all(&pem).unwrap();
        let out = x509.wait_with_output().unwrap();
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Polls until HTTPS verifies, bounded.
    fn wait_for_https(&self, root: &Path, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            if let Some(serial) = self.verified_serial(root) {
                return serial;
            }
            assert!(
                start.elapsed() < limit,
                "no verified HTTPS within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn plain_http_ok(&self) -> bool {
        let out = self
            .command("curl")
            .args([
                "--silent",
                "--fail",
                "--max-time",
                "5",
                &format!("http://{GUEST}/"),
            ])
            .output()
            .unwrap();
        out.status.success() && out.stdout == b"<h1>acme</h1>"
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // dnsmasq first; the namespace (a field, dropped after this) then goes with its files.
        self.dnsmasq = None;
    }
}

/// Bytes of the card outside the store's region.
fn outside_store(card: &Path) -> Vec<u8> {
    let bytes = fs::read(card).unwrap();
    let start = (STORE_FIRST_BLOCK * 512) as usize;
    let end = ((STORE_FIRST_BLOCK + STORE_BLOCKS) * 512) as usize;
    let mut outside = bytes[..start].to_vec();
    outside.extend_from_slice(&bytes[end..]);
    outside
}

fn orders(pebble: &Process) -> usize {
    pebble.log().matches("Added order").count()
}

fn seconds_in(log: &str, needle: &str) -> Option<f64> {
    let line = log.lines().find(|line| line.contains(needle))?;
    line.trim_start_matches('[')
        .split(']')
        .next()?
        .trim()
        .parse()
        .ok()
}

#[test]
fn obtains_reuses_and_renews_a_certificate_from_pebble() {
    skip_unless_able!();
    let lab = Lab::new(&[]);
    let pebble = lab.pebble(&[]);
    let root = lab.pebble_root();
    let card = lab.card();
    let before = outside_store(&card);

    // First start: a fresh account and order, HTTPS within a bounded time.
    let mut guest = lab.guest(Some(&card), &[]);
    let log = guest.wait_for(
        "acme: saved to the certificate store",
        2,
        Duration::from_secs(60),
    );
    let first = lab.wait_for_https(&root, HTTPS_LIMIT);
    assert!(lab.plain_http_ok());
    let issued_at = seconds_in(&log, "certificate issued").unwrap();
    eprintln!("certificate issued {issued_at} s after start; serial {first}");
    assert!(
        log.contains("acme: acme.test is 192.168.77.1"),
        "resolved by name:\n{log}"
    );
    assert_eq!(orders(&pebble), 1);
    guest.kill();

    // Second start: the stored certificate, no new order.
    let mut guest = lab.guest(Some(&card), &[]);
    guest.wait_for("serving the stored certificate", 1, Duration::from_secs(10));
    assert_eq!(lab.wait_for_https(&root, HTTPS_LIMIT), first);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(orders(&pebble), 1, "the second start made no order");
    guest.kill();

    // Renewal (due a second after the certificate's start): the old one is served until
    // the new one is in hand, then the new one, saved in the other slot.
    let mut guest = lab.guest(Some(&card), &["--acme-renew-after", "1"]);
    let log = guest.wait_for("certificate issued", 1, Duration::from_secs(60));
    let served = seconds_in(&log, "serving the stored certificate").unwrap();
    let ordered = seconds_in(&log, "ordering a certificate").unwrap();
    assert!(
        served <= ordered,
        "the stored certificate is served first:\n{log}"
    );
    guest.wait_for(
        "acme: saved to the certificate store",
        1,
        Duration::from_secs(10),
    );
    let renewed = lab.wait_for_https(&root, HTTPS_LIMIT);
    assert_ne!(renewed, first, "a new certificate is served");
    assert_eq!(orders(&pebble), 2);
    guest.kill();
    assert_eq!(
        before,
        outside_store(&card),
        "nothing outside the store was written"
    );

    // The renewed one is what the next start serves.
    let mut guest = lab.guest(Some(&card), &[]);
    guest.wait_for("serving the stored certificate", 1, Duration::from_secs(10));
    assert_eq!(lab.wait_for_https(&root, HTTPS_LIMIT), renewed);
}

#[test]
fn faults_are_retried_with_back_off_and_plain_http_keeps_serving() {
    skip_unless_able!();
    let lab = Lab::new(&["wrong.test/192.168.77.1"]);

    // The CA down: connection refused, retried after 1, 2, 4 s; plain HTTP serves.
    let mut guest = lab.guest(None, &["--acme-retry-seconds", "1"]);
    let log = guest.wait_for("trying again in 4 s", 1, Duration::from_secs(30));
    assert!(
        log.contains("trying again in 1 s") && log.contains("trying again in 2 s"),
        "{log}"
    );
    assert!(log.contains("refused"), "{log}");
    assert!(lab.plain_http_ok(), "plain HTTP serves while ACME fails");
    // The CA comes up: the next try succeeds.
    let pebble = lab.pebble(&[]);
    let root = lab.pebble_root();
    guest.wait_for("certificate issued", 1, Duration::from_secs(30));
    lab.wait_for_https(&root, HTTPS_LIMIT);
    guest.kill();
    drop(pebble);

    // Every nonce refused: retried, then backed off.
    let pebble = lab.pebble(&[("PEBBLE_WFE_NONCEREJECT", "100")]);
    let mut guest = lab.guest(None, &["--acme-retry-seconds", "1"]);
    let log = guest.wait_for("trying again in 2 s", 1, Duration::from_secs(30));
    assert!(log.contains("badNonce"), "{log}");
    assert!(lab.plain_http_ok());
    guest.kill();
    drop(pebble);

    // A name that does not resolve.
    let pebble = lab.pebble(&[]);
    let log = lab.net.dir().join("dns-guest.log");
    let child = lab
        .command(BIN)
        .args(["--tap", TAP, "--mac", MAC, "--site"])
        .arg(&lab.site)
        .args([
            "--domain",
            "bramble.test",
            "--acme-directory",
            "https://missing.test:14000/dir",
            "--acme-ca",
        ])
        .arg(lab.net.dir().join("ca.pem"))
        .args(["--acme-retry-seconds", "1"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut guest = Process {
        child,
        log,
        name: "bramble-hosted",
    };
    let log = guest.wait_for("trying again in 2 s", 1, Duration::from_secs(30));
    assert!(log.contains("DNS lookup of the CA's name failed"), "{log}");
    guest.kill();

    // A challenge that fails (the name points elsewhere): a validation failure waits at
    // least 15 minutes (Let's Encrypt allows 5 failed validations an hour).
    let log = lab.net.dir().join("wrong-guest.log");
    let child = lab
        .command(BIN)
        .args(["--tap", TAP, "--mac", MAC, "--site"])
        .arg(&lab.site)
        .args([
            "--domain",
            "wrong.test",
            "--acme-directory",
            DIRECTORY,
            "--acme-ca",
        ])
        .arg(lab.net.dir().join("ca.pem"))
        .args(["--acme-retry-seconds", "1"])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut guest = Process {
        child,
        log,
        name: "bramble-hosted",
    };
    let log = guest.wait_for("trying again in 900 s", 1, Duration::from_secs(60));
    assert!(log.contains("could not validate wrong.test"), "{log}");
    assert!(lab.plain_http_ok());
    drop(pebble);
}

/// Runs killed at random moments while saving; `BRAMBLE_ACME_KILL_RUNS` sets how many
/// (default 4 here; the 20 by hand).
#[test]
fn killed_while_saving_the_next_start_has_a_whole_certificate() {
    skip_unless_able!();
    let runs: u32 = std::env::var("BRAMBLE_ACME_KILL_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    let lab = Lab::new(&[]);
    let pebble = lab.pebble(&[]);
    let root = lab.pebble_root();
    let card = lab.card();
    let before = outside_store(&card);
    let mut guest = lab.guest(Some(&card), &[]);
    guest.wait_for(
        "acme: saved to the certificate store",
        2,
        Duration::from_secs(60),
    );
    guest.kill();
    let (mut serial, _) = lab.wait_for_https_after_start(&card, &root);
    let (mut old, mut new, mut torn) = (0, 0, 0);
    let mut x = std::process::id() | 1;
    for run in 0..runs {
        // Renew at once, writing each block 40 ms after the last: a save of ~6 blocks takes
        // ~240 ms, and the kill lands at a random moment in the 300 ms after issuance.
        let mut guest = lab.guest(
            Some(&card),
            &["--acme-renew-after", "0", "--store-write-delay-ms", "40"],
        );
        guest.wait_for("certificate issued", 1, Duration::from_secs(60));
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let delay = u64::from(x % 300);
        std::thread::sleep(Duration::from_millis(delay));
        guest.kill();
        let (after, cut_mid_save) = lab.wait_for_https_after_start(&card, &root);
        torn += u32::from(cut_mid_save);
        if after == serial {
            old += 1;
        } else {
            new += 1;
        }
        eprintln!(
            "run {run}: killed {delay} ms after issuance{}; the next start serves the {} certificate",
            if cut_mid_save {
                ", inside the save (a torn slot)"
            } else {
                ""
            },
            if after == serial { "old" } else { "new" }
        );
        serial = after;
        assert_eq!(
            before,
            outside_store(&card),
            "run {run}: the card outside the store changed"
        );
    }
    eprintln!(
        "kill runs: {runs}; {torn} cut a save in the middle; the next start served the old \
         certificate {old} times, the new {new}, and always a whole one"
    );
    drop(pebble);
}

impl Lab {
    /// Starts the guest without renewal, checks it serves the stored certificate (verified,
    /// no new order), stops it, and returns the certificate's serial and whether a slot was
    /// found torn.
    fn wait_for_https_after_start(&self, card: &Path, root: &Path) -> (String, bool) {
        let mut guest = self.guest(Some(card), &[]);
        let log = guest.wait_for("acme: directory", 1, Duration::from_secs(10));
        assert!(
            log.contains("serving the stored certificate"),
            "a whole certificate was in the store:\n{log}"
        );
        let serial = self.wait_for_https(root, HTTPS_LIMIT);
        guest.kill();
        (serial, log.contains("is not whole"))
    }
}
