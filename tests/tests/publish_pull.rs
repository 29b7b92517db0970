//! Publishing by pull (issue 28 item 3), through the real tools: `bramble keygen`, `bramble
//! image --publish-key` and `bramble publish --out` make the card and the files a static
//! host serves; `openssl s_server -WWW` serves them over HTTPS in a network namespace (a
//! name dnsmasq answers, a Let's Encrypt-shaped chain this test makes, whose root goes on the
//! card as `acme_ca_certificate`, as the heartbeat's test does); SNTP sets the guest's clock.
//!
//! - The guest refuses a manifest signed by another key and keeps serving; picks up a newer
//!   version signed by the owner and serves it without a restart (no second boot; the new
//!   page appears, the old one is gone, the ETags change), while a large download started
//!   before the switch finishes byte for byte from the old site; refuses an older version
//!   and keeps serving the new site; takes a signed rollback (`bramble publish --rollback
//!   --out`) and serves the old site again, still without a restart.
//! - A signed nudge: a guest that checks once a day, with HTTPS on, is sent the new version's
//!   signed manifest with no body (`PUT /.well-known/bramble/site` by curl): it checks at
//!   once and serves the new site; a nudge signed by another key is refused (403) and
//!   starts nothing.
//! - Power cuts: QEMU killed by PID at 20 random moments of the pull's card writes and the
//!   switch; each next boot serves one whole site, the old or the new, byte for byte.

mod netns;

use bramble_testkit::chain::{ChainShape, make_chain};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use clap::Parser;
use netns::sntp::Sntp;
use netns::tool::{SlotCard, slot_card};
use netns::{Daemon, HOST_ADDRESS, Netns, NetnsGuest, TAP};
use std::path::Path;
use std::time::{Duration, Instant};

const GUEST: &str = "192.168.77.2";
const PORT: u16 = 8443;
const MANIFEST_URL: &str = "https://pub.test:8443/garden/manifest";
/// A check, a fetch of the image and its write take well under this in QEMU.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Parser)]
struct PublishCli {
    #[command(flatten)]
    publish: bramble::publish::card::PublishArgs,
}

/// `bramble publish ARGS`, through the binary's parser and entry point.
fn bramble_publish(args: &[&str]) {
    let cli = PublishCli::try_parse_from(std::iter::once("publish").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("bramble publish {args:?}: {error}"));
    if let Err(error) = bramble::publish::card::run(cli.publish) {
        panic!("bramble publish {args:?}: {error:#}");
    }
}

fn keygen(path: &Path) {
    bramble::publish::keys::run(bramble::publish::keys::KeygenArgs {
        output: path.to_path_buf(),
        force: false,
    })
    .expect("keygen");
}

/// A site whose pages say `name`, and `/blob.bin`: 1 MiB of incompressible bytes from
/// `seed`. Returns the bytes of `/` and of `/blob.bin`.
fn write_site(root: &Path, name: &str, seed: u64) -> (Vec<u8>, Vec<u8>) {
    std::fs::create_dir_all(root).unwrap();
    let index = format!("<!doctype html><title>{name}</title><h1>site {name}</h1>\n").repeat(20);
    std::fs::write(root.join("index.html"), &index).unwrap();
    std::fs::write(root.join(format!("{name}.html")), index.repeat(2)).unwrap();
    let mut state = seed;
    let blob: Vec<u8> = (0..1 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(root.join("blob.bin"), &blob).unwrap();
    (index.into_bytes(), blob)
}

/// The static host: `openssl s_server -WWW` on `pub.test:8443` serving `dir/www`, with a
/// Let's Encrypt-shaped chain made here (its root in `dir/ca.pem`).
fn start_static_host(netns: &Netns, dir: &Path) -> Daemon {
    // The shape of Let's Encrypt's E-series chains (a P-384 root and intermediate over a
    // P-256 leaf), as a static host or an object store presents.
    let chain = make_chain(dir, ChainShape::P384, "pub", "pub.test", "DNS:pub.test");
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("garden")).unwrap();
    let mut command = netns.command("openssl");
    command.current_dir(&www).args([
        "s_server",
        "-accept",
        &format!("{HOST_ADDRESS}:{PORT}"),
        "-WWW",
        "-quiet",
    ]);
    command.args(chain.s_server_args());
    Daemon::start(command, &dir.join("s_server.log"))
}

fn start_dnsmasq(netns: &Netns, dir: &Path) -> Daemon {
    let mut dnsmasq = netns.command("dnsmasq");
    dnsmasq.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        "--port=53",
        &format!("--listen-address={HOST_ADDRESS}"),
        "--except-interface=lo",
        &format!("--address=/pub.test/{HOST_ADDRESS}"),
        "--user=root",
        &format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
    ]);
    Daemon::start(dnsmasq, &dir.join("dnsmasq.log"))
}

/// Everything one test needs: the namespace and its servers, the keys, the sites, the card.
struct Lab {
    dir: std::path::PathBuf,
    netns: Netns,
    _dnsmasq: Daemon,
    _host: Daemon,
    _sntp: Sntp,
    owner: std::path::PathBuf,
    other: std::path::PathBuf,
    site_a: std::path::PathBuf,
    site_b: std::path::PathBuf,
    index_a: Vec<u8>,
    index_b: Vec<u8>,
    blob_a: Vec<u8>,
    blob_b: Vec<u8>,
    card: std::path::PathBuf,
}

impl Lab {
    fn new(dir: &Path) -> Lab {
        Lab::with(dir, false)
    }

    /// With `nudged`: the guest checks once a day (a nudge starts the next check) and
    /// serves HTTPS with a certificate for its address from a CA in `dir/board/ca.pem`.
    fn with(dir: &Path, nudged: bool) -> Lab {
        let netns = Netns::create();
        let dnsmasq = start_dnsmasq(&netns, dir);
        let host = start_static_host(&netns, dir);
        let sntp = Sntp::start(&netns);
        let owner = dir.join("owner.key");
        let other = dir.join("other.key");
        keygen(&owner);
        keygen(&other);
        let site_a = dir.join("a");
        let site_b = dir.join("b");
        let (index_a, blob_a) = write_site(&site_a, "a", 0x2545_F491_4F6C_DD1D);
        let (index_b, blob_b) = write_site(&site_b, "b", 0x9E37_79B9_7F4A_7C15);
        let settings = dir.join("BRAMBLE.TXT");
        std::fs::write(
            &settings,
            format!(
                "address = {GUEST}/24\nhostname = garden\nntp = {HOST_ADDRESS}\n\
                 dns = {HOST_ADDRESS}\npublish_url = {MANIFEST_URL}\npublish_every = {}\n{}",
                if nudged { 1440 } else { 1 },
                if nudged { "https = on\n" } else { "" }
            ),
        )
        .unwrap();
        let card = dir.join("card.img");
        let board = dir.join("board");
        let chain = nudged.then(|| {
            std::fs::create_dir_all(&board).unwrap();
            make_chain(
                &board,
                ChainShape::P256,
                "garden",
                "garden",
                &format!("IP:{GUEST},DNS:garden"),
            )
        });
        slot_card(
            &site_a,
            &settings,
            &SlotCard {
                publish_key: &dir.join("owner.pub"),
                tls: chain.as_ref().map(|c| (c.leaf.as_path(), c.key.as_path())),
                acme_ca: Some(&dir.join("ca.pem")),
            },
            &card,
        );
        Lab {
            dir: dir.to_path_buf(),
            netns,
            _dnsmasq: dnsmasq,
            _host: host,
            _sntp: sntp,
            owner,
            other,
            site_a,
            site_b,
            index_a,
            index_b,
            blob_a,
            blob_b,
            card,
        }
    }

    /// `bramble publish SITE --out www/garden --host HOST --key KEY --version V`.
    fn put(&self, site: &Path, key: &Path, version: u64, host: &str) {
        let out = self.dir.join("www/garden");
        let _ = std::fs::remove_dir_all(&out);
        let path = |p: &Path| p.display().to_string();
        bramble_publish(&[
            &path(site),
            "--out",
            &path(&out),
            "--host",
            host,
            "--key",
            &path(key),
            "--version",
            &version.to_string(),
        ]);
    }

    /// `bramble publish SITE --rollback --out www/garden --host garden --key KEY --version V`:
    /// a rollback manifest naming SITE, no image.
    fn put_rollback(&self, site: &Path, key: &Path, version: u64) {
        let out = self.dir.join("www/garden");
        let _ = std::fs::remove_dir_all(&out);
        let path = |p: &Path| p.display().to_string();
        bramble_publish(&[
            &path(site),
            "--rollback",
            "--out",
            &path(&out),
            "--host",
            "garden",
            "--key",
            &path(key),
            "--version",
            &version.to_string(),
        ]);
    }

    fn config(&self) -> bramble_qemu::QemuConfig {
        let mut config = bramble_qemu::QemuConfig::new(
            bramble_qemu::Machine::Raspi1ap,
            bramble_qemu::Kernel::Raw(kernel().raw.clone()),
        );
        config.sd_card = Some(self.card.clone());
        config.network = Some(bramble_qemu::Network::Tap {
            interface: TAP.to_string(),
            topology: bramble_qemu::Topology::BehindHub,
        });
        config
    }

    /// Boots the card under the board-rules judge (the card writes' timing is judged).
    fn boot(&self) -> Guest {
        NetnsGuest::start(&self.netns, &self.config())
    }

    /// Boots the card without the judge: for a boot killed by PID, whose plugin writes no
    /// totals.
    fn boot_to_kill(&self) -> Guest {
        let qemu = bramble_qemu::find_qemu().unwrap_or_else(|message| panic!("{message}"));
        let mut command = self.netns.command(qemu);
        command.args(self.config().args());
        Guest::start_judged(command, None)
    }

    /// `curl --limit-rate RATE URL` in the namespace, started: a slow download, its body
    /// into `out`. The namespace's TCP receive buffers are 16 KiB from here on, so that the
    /// guest, not the host's socket buffer, holds what the client has not read yet: the
    /// response stays in flight on the guest as long as the download lasts.
    fn start_slow_get(&self, path: &str, rate: &str, out: &Path) -> std::process::Child {
        // The namespace's own value (net.ipv4.tcp_rmem is per namespace), by its /proc file.
        netns::run(self.netns.command("sh").args([
            "-c",
            "echo '4096 16384 16384' > /proc/sys/net/ipv4/tcp_rmem",
        ]));
        self.netns
            .command("curl")
            .args([
                "--silent",
                "--max-time",
                "120",
                "--limit-rate",
                rate,
                "--output",
                &out.display().to_string(),
                "--write-out",
                "%{http_code} %{size_download}",
                &format!("http://{GUEST}{path}"),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("curl")
    }

    /// `curl -D - URL` in the namespace: (status, headers, body).
    fn get(&self, path: &str) -> (u16, String, Vec<u8>) {
        let headers = self.dir.join("headers.txt");
        let out = self.netns.output(
            "curl",
            &[
                "--silent",
                "--max-time",
                "20",
                "--dump-header",
                &headers.display().to_string(),
                &format!("http://{GUEST}{path}"),
            ],
        );
        let head = std::fs::read_to_string(&headers).unwrap_or_default();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        (status, head, out.stdout)
    }
}

impl Lab {
    /// The manifest file in `www/garden` (manifest, then signature) sent to the guest as a
    /// nudge: `PUT /.well-known/bramble/site` with no body, over HTTPS (curl in the
    /// namespace, HTTP/1.1). Returns the status and the JSON answer.
    fn nudge(&self, manifest_file: &[u8]) -> (u16, String) {
        let hex = |bytes: &[u8]| -> String { bytes.iter().map(|b| format!("{b:02x}")).collect() };
        let (manifest, signature) = manifest_file.split_at(128);
        let out = self.netns.output(
            "curl",
            &[
                "--silent",
                "--http1.1",
                "--max-time",
                "20",
                "--cacert",
                &self.dir.join("board/ca.pem").display().to_string(),
                "--request",
                "PUT",
                "--data-binary",
                "",
                "--header",
                &format!("Bramble-Manifest: {}", hex(manifest)),
                "--header",
                &format!("Bramble-Signature: {}", hex(signature)),
                "--write-out",
                "\n%{http_code}",
                &format!("https://{GUEST}/.well-known/bramble/site"),
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (status.trim().parse().unwrap_or(0), body.to_string())
    }
}

fn etag(head: &str) -> String {
    head.lines()
        .find(|line| line.to_ascii_lowercase().starts_with("etag:"))
        .map(|line| line[5..].trim().to_string())
        .unwrap_or_default()
}

/// The console's time stamp of a line (`[   12.345678] ...`), in seconds.
fn stamp(line: &str) -> Option<f64> {
    let open = line.find('[')?;
    line[open + 1..].split_whitespace().next()?.parse().ok()
}

#[test]
fn the_guest_pulls_a_newer_signed_site_and_refuses_another_key_and_an_older_version() {
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::new(dir.path());
    // 1. A manifest signed by another key: refused, site A keeps serving.
    lab.put(&lab.site_b, &lab.other, 10, "garden");
    let mut guest = lab.boot();
    guest.expect_line("slots: serving slot A", BOOT_TIMEOUT);
    guest.expect_line(&format!("serving: http://{GUEST}/"), BOOT_TIMEOUT);
    let refused = guest.expect_line("publish: refused", PUBLISH_TIMEOUT);
    assert!(
        refused.contains("(bad-signature)") && refused.contains("keeps serving"),
        "{refused}"
    );
    let (status, head_a, body) = lab.get("/");
    assert_eq!((status, &body), (200, &lab.index_a), "{head_a}");
    assert_eq!(lab.get("/a.html").0, 200);

    let (_, blob_head_a, _) = lab.get("/blob.bin");

    // 2. The owner's version 10 of site B: fetched, written, verified, and served without a
    // restart, while a slow download of site A's /blob.bin started before the switch
    // finishes from site A; the next check finds version 10 current.
    lab.put(&lab.site_b, &lab.owner, 10, "garden");
    let fetching = guest.expect_line("publish: version 10 (", Duration::from_secs(90));
    // 1 MiB at 40 KiB/s: about 26 s, much longer than the pull (about 4 s in QEMU).
    let slow_out = lab.dir.join("slow-blob.bin");
    let mut slow = lab.start_slow_get("/blob.bin", "40k", &slow_out);
    let live = guest.expect_line("now live;", PUBLISH_TIMEOUT);
    let live_seen = Instant::now();
    assert!(live.contains("written to slot B"), "{live}");
    let switched = guest.expect_line(
        "publish: serving version 10 from slot B without a restart",
        Duration::from_secs(10),
    );
    // The first request after the switch line gets the new site.
    let (status, head_b, body) = lab.get("/");
    let first_new_page = live_seen.elapsed();
    assert_eq!((status, &body), (200, &lab.index_b), "{head_b}");
    assert!(
        slow.try_wait().unwrap().is_none(),
        "the slow download was still running at the switch"
    );
    assert_ne!(etag(&head_a), etag(&head_b), "the ETag of / changed");
    assert!(!etag(&head_b).is_empty(), "{head_b}");
    assert_eq!(lab.get("/b.html").0, 200, "the new page appears");
    assert_eq!(lab.get("/a.html").0, 404, "the old page is gone");
    let (status, blob_head_b, blob) = lab.get("/blob.bin");
    assert_eq!(status, 200);
    assert!(blob == lab.blob_b, "a new request gets site B's /blob.bin");
    assert_ne!(etag(&blob_head_a), etag(&blob_head_b));
    // The download started before the switch ends whole, with site A's bytes.
    let result = slow.wait_with_output().unwrap();
    let written = String::from_utf8_lossy(&result.stdout).to_string();
    assert!(written.starts_with("200 "), "{written}");
    let slow_bytes = std::fs::read(&slow_out).unwrap();
    assert_eq!(slow_bytes.len(), lab.blob_a.len(), "{written}");
    assert!(
        slow_bytes == lab.blob_a,
        "the response in flight finished from site A, byte for byte"
    );
    let retired = guest.expect_line("publish: slot A retired", Duration::from_secs(30));
    assert!(
        retired.contains(" 0 responses still reading it"),
        "{retired}"
    );
    guest.expect_line("publish: version 10 is live and current", PUBLISH_TIMEOUT);
    // One boot: no restart, no second banner.
    let boots = |needle: &str| {
        guest
            .transcript
            .iter()
            .filter(|line| line.contains(needle))
            .count()
    };
    assert_eq!(
        boots("a web server with no operating system"),
        1,
        "one boot"
    );
    assert_eq!(boots("slots: serving slot"), 1, "one boot");
    assert_eq!(boots("publish: restarting"), 0);
    let blocks: u64 = live
        .split("; ")
        .last()
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    eprintln!("{switched}\n{retired}");
    eprintln!(
        "publish of {} bytes: {:.2} s guest time from the manifest to live, {blocks} card \
         blocks; switched {:.3} s (guest) after live; the new page served {:.2} s (host) after \
         the live line; the old slot retired {:.2} s (guest) after the switch",
        std::fs::metadata(lab.dir.join("www/garden/site-10.bin"))
            .unwrap()
            .len(),
        stamp(&live).unwrap_or(0.0) - stamp(&fetching).unwrap_or(0.0),
        stamp(&switched).unwrap_or(0.0) - stamp(&live).unwrap_or(0.0),
        first_new_page.as_secs_f64(),
        stamp(&retired).unwrap_or(0.0) - stamp(&switched).unwrap_or(0.0),
    );
    assert!(blocks > 2048, "{live}");

    // 3. An older version, signed by the owner: refused; site B keeps serving.
    lab.put(&lab.site_a, &lab.owner, 5, "garden");
    let refused = guest.expect_line("publish: refused", Duration::from_secs(90));
    assert!(refused.contains("(old-version)"), "{refused}");
    assert_eq!(lab.get("/").2, lab.index_b);
    guest.send_line("status");
    let line = guest.expect_line("status: publish checks", Duration::from_secs(10));
    let status = bramble_status::Publish::parse(&line).expect("the publish status line");
    // The same boot: the first refusal, the publish and this refusal.
    assert_eq!(
        (status.published, status.refused, status.live_version),
        (1, 2, 10),
        "{line}"
    );
    // Printed before the publish line.
    let writes = guest
        .transcript
        .iter()
        .rev()
        .find(|line| line.contains("status: card writes"))
        .cloned()
        .unwrap_or_default();
    assert!(
        writes.contains("blocks from block"),
        "the slots' window: {writes}"
    );

    // 4. A signed rollback to site A (`bramble publish --rollback --out`): slot A is live
    // again, without a restart, one record block written.
    lab.put_rollback(&lab.site_a, &lab.owner, 11);
    let back = guest.expect_line(
        "publish: rollback version 11 signed",
        Duration::from_secs(90),
    );
    assert!(
        back.contains("slot A") && back.contains("1 card block"),
        "{back}"
    );
    guest.expect_line("from slot A without a restart", Duration::from_secs(10));
    let (status, head, body) = lab.get("/");
    assert_eq!((status, &body), (200, &lab.index_a), "{head}");
    assert_eq!(etag(&head), etag(&head_a), "site A's ETag again");
    assert_eq!(lab.get("/a.html").0, 200);
    assert_eq!(lab.get("/b.html").0, 404);
    let (status, _, blob) = lab.get("/blob.bin");
    assert_eq!(status, 200);
    assert!(blob == lab.blob_a, "site A's /blob.bin again");
    guest.expect_line("publish: slot B retired", Duration::from_secs(30));
    guest.expect_line("is live and current", PUBLISH_TIMEOUT);
    // The rollback is counted as one, not as a publish.
    guest.send_line("status");
    let line = guest.expect_line("status: publish checks", Duration::from_secs(10));
    let status = bramble_status::Publish::parse(&line).expect("the publish status line");
    assert_eq!((status.published, status.rolled_back), (1, 1), "{line}");
    assert_eq!(
        guest
            .transcript
            .iter()
            .filter(|line| line.contains("a web server with no operating system"))
            .count(),
        1,
        "one boot"
    );
}

/// A deterministic pseudo-random number below `bound` for run `run`.
#[test]
fn a_signed_nudge_has_the_guest_check_at_once_and_another_keys_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::with(dir.path(), true);
    // Another key's version 10 on the host: the boot's check refuses it; the next check is a
    // day away.
    lab.put(&lab.site_b, &lab.other, 10, "garden");
    let forged = std::fs::read(lab.dir.join("www/garden/manifest")).unwrap();
    let mut guest = lab.boot();
    guest.expect_line("slots: serving slot A", BOOT_TIMEOUT);
    guest.expect_line("HTTPS connections on port 443", BOOT_TIMEOUT);
    let refused = guest.expect_line("publish: refused", PUBLISH_TIMEOUT);
    assert!(refused.contains("the next check in 86400 s"), "{refused}");

    // The owner's version 10 goes up; the other key's manifest, sent as a nudge, is refused.
    lab.put(&lab.site_b, &lab.owner, 10, "garden");
    let (status, body) = lab.nudge(&forged);
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"error\":\"bad-signature\""), "{body}");
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !guest.transcript.iter().any(|line| line.contains("nudged")),
        "a refused nudge started a check"
    );
    assert_eq!(lab.get("/").2, lab.index_a);

    // The owner's nudge: 202, a check at once, the new site served without a restart.
    let manifest = std::fs::read(lab.dir.join("www/garden/manifest")).unwrap();
    let sent = Instant::now();
    let (status, body) = lab.nudge(&manifest);
    assert_eq!(status, 202, "{body}");
    assert!(body.starts_with("{\"nudged\":10,"), "{body}");
    guest.expect_line("publish: nudged; checking", Duration::from_secs(10));
    guest.expect_line("now live;", PUBLISH_TIMEOUT);
    guest.expect_line("without a restart", Duration::from_secs(20));
    let (status, _, page) = lab.get("/");
    assert_eq!((status, page == lab.index_b), (200, true));
    eprintln!(
        "nudge to the new site served: {:.1} s",
        sent.elapsed().as_secs_f64()
    );
    // The same nudge again: version 10 is live, so it is an old version.
    let (status, body) = lab.nudge(&manifest);
    assert_eq!(status, 409, "{body}");
    guest.send_line("status");
    let line = guest.expect_line("status: publish checks", Duration::from_secs(10));
    assert!(line.contains("status: publish checks 2,"), "{line}");
    assert_eq!(
        guest
            .transcript
            .iter()
            .filter(|l| l.contains("Bramble 0.1.0"))
            .count(),
        1
    );
}

fn random_below(bound: u64, run: u64) -> u64 {
    let mut state = (run + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64;
    state ^= state >> 31;
    state = state.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    state ^= state >> 29;
    state % bound.max(1)
}

/// `cargo test -p bramble-tests --test publish_pull power_cuts -- --nocapture`: 20 cuts
/// (`BRAMBLE_PULL_KILL_RUNS`), two boots each, about 3 minutes.
#[test]
fn power_cuts_during_the_pull_leave_a_whole_old_or_new_site() {
    let runs: u64 = std::env::var("BRAMBLE_PULL_KILL_RUNS")
        .ok()
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::new(dir.path());
    let fresh = std::fs::read(&lab.card).unwrap();
    let (mut old, mut new) = (0, 0);
    for run in 0..runs {
        std::fs::write(&lab.card, &fresh).unwrap();
        lab.put(&lab.site_b, &lab.owner, 10, "garden");
        let mut guest = lab.boot_to_kill();
        guest.expect_line("publish: version 10 (", PUBLISH_TIMEOUT);
        // The cut: anywhere from the first body block to a little after the switch.
        let delay = Duration::from_millis(random_below(4000, run));
        let deadline = Instant::now() + delay;
        while Instant::now() < deadline {
            guest.drain();
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = guest.pid().to_string();
        // SIGKILL to exactly the QEMU process this test started.
        netns::run(std::process::Command::new("kill").args(["-KILL", &pid]));
        guest.drain();
        let switched = guest
            .transcript
            .iter()
            .any(|line| line.contains("now live;"));
        drop(guest);

        // The checking boot finds nothing to pull (so it cannot restart under the checks).
        std::fs::remove_dir_all(lab.dir.join("www/garden")).unwrap();
        let mut guest = lab.boot();
        let serving = guest.expect_line("slots: serving slot", BOOT_TIMEOUT);
        guest.expect_line(&format!("serving: http://{GUEST}/"), BOOT_TIMEOUT);
        let (status, _, body) = lab.get("/");
        let page = if serving.contains("slot A") { "a" } else { "b" };
        let (wanted_index, other_page) = match page {
            "a" => (&lab.index_a, "/b.html"),
            _ => (&lab.index_b, "/a.html"),
        };
        assert_eq!((status, &body), (200, wanted_index), "run {run}: {serving}");
        assert_eq!(lab.get(&format!("/{page}.html")).0, 200, "run {run}");
        assert_eq!(lab.get(other_page).0, 404, "run {run}: no mix");
        let (status, _, blob) = lab.get("/blob.bin");
        let wanted_blob = if page == "a" {
            &lab.blob_a
        } else {
            &lab.blob_b
        };
        assert_eq!(status, 200, "run {run}");
        assert!(blob == *wanted_blob, "run {run}: /blob.bin of site {page}");
        if page == "b" {
            new += 1;
        } else {
            old += 1;
        }
        if switched {
            assert_eq!(page, "b", "run {run}: the switch was saved before the cut");
        }
        eprintln!(
            "run {run}: cut {} ms into the pull{}: the next boot serves site {page}",
            delay.as_millis(),
            if switched { " (after the switch)" } else { "" }
        );
        drop(guest);
    }
    eprintln!("{runs} cuts: {old} boots served the old site, {new} the new");
}
