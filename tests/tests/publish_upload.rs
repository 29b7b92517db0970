//! Publishing by upload (issue 28 item 2), through the real tools: `bramble keygen`, `bramble
//! image --publish-key --tls-cert --tls-key`, `bramble qemu --image --tap` in a network
//! namespace, and `bramble publish SITE --to https://GUEST --ca-file CA.PEM` run in that
//! namespace (this binary's ignored helper tests, through the binary's parser and entry
//! point, as `bramble qemu` is run here).
//!
//! - The owner's version 10 of site B is uploaded, written to the idle slot, read back and
//!   served without a restart: the new page appears, the old one is gone, the ETags change,
//!   the 1 MiB `/blob.bin` is site B's byte for byte.
//! - Another key's upload and an older version are refused with the board's JSON (printed by
//!   the tool, which fails) and site B keeps serving.
//! - An upload cut mid-body (a client that sends half the image and drops the connection)
//!   switches nothing; `bramble publish --to` of the same signed version then asks the board
//!   where it got to, resumes there, and the site is served.
//! - `bramble publish --rollback --to` switches back to the previous site, still one boot.

mod netns;

use bramble_tests::BOOT_TIMEOUT;
use clap::Parser;
use netns::tool::{SlotCard, slot_card, start_bramble_qemu};
use netns::{Netns, TAP};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};

const GUEST: &str = "192.168.77.2";
/// The helper's argument list, one a line.
const PUBLISH_ARGS: &str = "BRAMBLE_PUBLISH_ARGS";
/// The cut upload's inputs, one a line: URL host, port, CA file, manifest file, image file,
/// bytes of the image to send.
const CUT_ARGS: &str = "BRAMBLE_CUT_UPLOAD";

bramble_qemu_helper!();

#[derive(Parser)]
struct PublishCli {
    #[command(flatten)]
    publish: bramble::publish::card::PublishArgs,
}

/// The helper: `bramble publish` with the arguments in [`PUBLISH_ARGS`], run inside the
/// namespace; fails (exit 1, the error on stderr) as the binary does.
#[test]
#[ignore = "helper: run by this file's QEMU test inside its namespace"]
fn bramble_publish_in_namespace() {
    let Ok(args) = std::env::var(PUBLISH_ARGS) else {
        eprintln!("{PUBLISH_ARGS} is not set: nothing to run");
        return;
    };
    let cli = PublishCli::parse_from(std::iter::once("publish").chain(args.lines()));
    if let Err(error) = bramble::publish::card::run(cli.publish) {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

/// The helper: an upload that sends its head and the first bytes of the image, then drops
/// the connection (inputs in [`CUT_ARGS`]).
#[test]
#[ignore = "helper: run by this file's QEMU test inside its namespace"]
fn cut_upload_in_namespace() {
    use rustls::pki_types::pem::PemObject;
    let Ok(args) = std::env::var(CUT_ARGS) else {
        eprintln!("{CUT_ARGS} is not set: nothing to run");
        return;
    };
    let args: Vec<&str> = args.lines().collect();
    let [host, port, ca, manifest, image, cut] = args[..] else {
        panic!("{CUT_ARGS}: {args:?}");
    };
    let manifest = std::fs::read(manifest).unwrap();
    let image = std::fs::read(image).unwrap();
    let cut: usize = cut.parse().unwrap();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let mut seed = [0u8; 64];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut seed))
        .unwrap();
    let _ = bramble_tls::random::RANDOM.seed(&seed);
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(bramble_tls::provider::provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let socket = std::net::TcpStream::connect((host, port.parse::<u16>().unwrap())).unwrap();
    socket
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, socket);
    let head = format!(
        "PUT /.well-known/bramble/site HTTP/1.1\r\nHost: {host}\r\nBramble-Manifest: {}\r\n\
         Bramble-Signature: {}\r\nContent-Length: {}\r\n\r\n",
        hex(&manifest[..128]),
        hex(&manifest[128..]),
        image.len()
    );
    tls.write_all(head.as_bytes()).unwrap();
    tls.write_all(&image[..cut]).unwrap();
    tls.flush().unwrap();
    // The sent bytes reach the board before the reset does.
    std::thread::sleep(Duration::from_secs(2));
    // Dropped without close_notify or FIN order: as a lost link ends it.
    let _ = tls.sock.shutdown(std::net::Shutdown::Both);
    eprintln!("cut after {cut} of {} bytes", image.len());
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

/// A CA (`ca.pem`) and the board's certificate from it for its address (`board.pem`,
/// `board.key`), made with openssl in `dir`.
fn make_certificates(dir: &Path) {
    let openssl = |args: &[&str]| {
        netns::run(
            std::process::Command::new("openssl")
                .current_dir(dir)
                .args(args),
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "30"],
            &["-subj", "/CN=Upload test CA"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &["-keyout", "board.key", "-out", "board.csr"],
            &["-subj", "/CN=garden"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("board.ext"),
        format!("subjectAltName=IP:{GUEST},DNS:garden\n"),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "board.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "board.pem",
        "-days",
        "30",
        "-extfile",
        "board.ext",
    ]);
}

struct Lab {
    dir: PathBuf,
    netns: Netns,
    owner: PathBuf,
    other: PathBuf,
    site_a: PathBuf,
    site_b: PathBuf,
    index_a: Vec<u8>,
    index_b: Vec<u8>,
    blob_a: Vec<u8>,
    blob_b: Vec<u8>,
    card: PathBuf,
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

impl Lab {
    fn new(dir: &Path) -> Lab {
        let netns = Netns::create();
        make_certificates(dir);
        let owner = dir.join("owner.key");
        let other = dir.join("other.key");
        for key in [&owner, &other] {
            bramble::publish::keys::run(bramble::publish::keys::KeygenArgs {
                output: key.clone(),
                force: false,
            })
            .expect("keygen");
        }
        let site_a = dir.join("a");
        let site_b = dir.join("b");
        let (index_a, blob_a) = write_site(&site_a, "a", 0x2545_F491_4F6C_DD1D);
        let (index_b, blob_b) = write_site(&site_b, "b", 0x9E37_79B9_7F4A_7C15);
        let settings = dir.join("BRAMBLE.TXT");
        std::fs::write(
            &settings,
            format!("address = {GUEST}/24\nhostname = garden\nhttps = on\n"),
        )
        .unwrap();
        let card = dir.join("card.img");
        slot_card(
            &site_a,
            &settings,
            &SlotCard {
                publish_key: &dir.join("owner.pub"),
                tls: Some((&dir.join("board.pem"), &dir.join("board.key"))),
                acme_ca: None,
            },
            &card,
        );
        Lab {
            dir: dir.to_path_buf(),
            netns,
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

    /// `bramble publish SITE --to https://GUEST --ca-file ca.pem --key KEY EXTRA...` in the
    /// namespace.
    fn publish(&self, site: &Path, key: &Path, extra: &[&str]) -> Output {
        let mut args = vec![
            path(site),
            "--to".into(),
            format!("https://{GUEST}"),
            "--ca-file".into(),
            path(&self.dir.join("ca.pem")),
            "--key".into(),
            path(key),
        ];
        args.extend(extra.iter().map(|arg| arg.to_string()));
        let binary = std::env::current_exe().expect("this test binary");
        let output = self
            .netns
            .command(binary)
            .args([
                "--exact",
                "bramble_publish_in_namespace",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PUBLISH_ARGS, args.join("\n"))
            .output()
            .expect("the publish helper");
        eprintln!(
            "bramble publish {args:?}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// An upload of `manifest` (file: manifest and signature) and the first `cut` bytes of
    /// `image`, its connection then dropped; in the namespace.
    fn cut_upload(&self, manifest: &Path, image: &Path, cut: usize) {
        let args = [
            GUEST.to_string(),
            "443".into(),
            path(&self.dir.join("ca.pem")),
            path(manifest),
            path(image),
            cut.to_string(),
        ];
        let binary = std::env::current_exe().expect("this test binary");
        netns::run(
            self.netns
                .command(binary)
                .args([
                    "--exact",
                    "cut_upload_in_namespace",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CUT_ARGS, args.join("\n")),
        );
    }

    /// `curl -D - http://GUEST/PATH` in the namespace: (status, headers, body).
    fn get(&self, page: &str) -> (u16, String, Vec<u8>) {
        let headers = self.dir.join("headers.txt");
        let out = self.netns.output(
            "curl",
            &[
                "--silent",
                "--max-time",
                "20",
                "--dump-header",
                &path(&headers),
                &format!("http://{GUEST}{page}"),
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

fn etag(head: &str) -> String {
    head.lines()
        .find(|line| line.to_ascii_lowercase().starts_with("etag:"))
        .map(|line| line[5..].trim().to_string())
        .unwrap_or_default()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn bramble_publish_to_the_guest_is_served_without_a_restart_and_bad_uploads_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let lab = Lab::new(dir.path());
    let args = ["--image", &path(&lab.card), "--tap", TAP].map(String::from);
    let mut guest = start_bramble_qemu(&lab.netns, &args);
    guest.expect_line("slots: serving slot A", BOOT_TIMEOUT);
    guest.expect_line(&format!("serving: http://{GUEST}/"), BOOT_TIMEOUT);
    if !guest
        .transcript
        .iter()
        .any(|line| line.contains("HTTPS connections on port 443"))
    {
        guest.expect_line("HTTPS connections on port 443", BOOT_TIMEOUT);
    }
    let (status, head_a, body) = lab.get("/");
    assert_eq!((status, &body), (200, &lab.index_a), "{head_a}");
    let (_, blob_head_a, blob) = lab.get("/blob.bin");
    assert!(blob == lab.blob_a);

    // 1. The owner's version 10 of site B, uploaded: served without a restart.
    let started = Instant::now();
    let out = lab.publish(&lab.site_b, &lab.owner, &["--version", "10"]);
    let publish_time = started.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let answer = text(&out.stdout);
    assert!(
        answer.contains("\"published\":10,") && answer.contains("\"slot\":\"B\""),
        "{answer}"
    );
    let live = guest.expect_line("now live;", Duration::from_secs(10));
    assert!(live.contains("written to slot B"), "{live}");
    let switched = guest.expect_line(
        "publish: serving version 10 from slot B without a restart",
        Duration::from_secs(10),
    );
    let (status, head_b, body) = lab.get("/");
    assert_eq!((status, &body), (200, &lab.index_b), "{head_b}");
    assert_ne!(etag(&head_a), etag(&head_b), "the ETag of / changed");
    assert!(!etag(&head_b).is_empty(), "{head_b}");
    assert_eq!(lab.get("/b.html").0, 200, "the new page appears");
    assert_eq!(lab.get("/a.html").0, 404, "the old page is gone");
    let (status, blob_head_b, blob) = lab.get("/blob.bin");
    assert_eq!(status, 200);
    assert!(blob == lab.blob_b, "site B's /blob.bin, byte for byte");
    assert_ne!(etag(&blob_head_a), etag(&blob_head_b));
    let blocks: u64 = live
        .split("; ")
        .last()
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(blocks > 2048, "{live}");
    let image_len = bramble::pack::pack_site(&lab.site_b, &bramble::pack::PackOptions::default())
        .unwrap()
        .image
        .len();
    eprintln!(
        "upload of {image_len} bytes: `bramble publish --to` took {:.2} s (host), {blocks} card \
         blocks; {switched}",
        publish_time.as_secs_f64()
    );

    // Slot A (now idle) is written again only once its last response is sent.
    guest.expect_line("publish: slot A retired", Duration::from_secs(30));

    // 2. Another key, and an older version: refused with the board's JSON; B keeps serving.
    for (key, version, code) in [
        (&lab.other, "11", "bad-signature"),
        (&lab.owner, "5", "old-version"),
    ] {
        let out = lab.publish(&lab.site_a, key, &["--version", version]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("{{\"error\":\"{code}\",\"message\":\"")),
            "{stderr}"
        );
        let refused = guest.expect_line("publish: upload refused", Duration::from_secs(10));
        assert!(refused.contains(code), "{refused}");
        assert_eq!(lab.get("/").2, lab.index_b, "site B keeps serving");
    }

    // 3. Version 12 of site A, cut after 300 KB: nothing switches, B keeps serving.
    let out_dir = lab.dir.join("v12");
    let made = PublishCli::parse_from([
        "publish",
        &path(&lab.site_a),
        "--out",
        &path(&out_dir),
        "--host",
        "garden",
        "--key",
        &path(&lab.owner),
        "--version",
        "12",
    ]);
    bramble::publish::card::run(made.publish).expect("publish --out");
    lab.cut_upload(
        &out_dir.join("manifest"),
        &out_dir.join("site-12.bin"),
        300_000,
    );
    let cut = guest.expect_line(
        "publish: upload of version 12 cut after",
        Duration::from_secs(30),
    );
    assert_eq!(lab.get("/").2, lab.index_b, "site B keeps serving: {cut}");
    assert_eq!(lab.get("/a.html").0, 404);
    // The same signed version through the tool: it resumes where the board got to.
    let out = lab.publish(&lab.site_a, &lab.owner, &["--version", "12"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("resuming at byte"), "{stderr}");
    guest.expect_line(
        "publish: serving version 12 from slot A without a restart",
        Duration::from_secs(20),
    );
    let (status, head, body) = lab.get("/");
    assert_eq!((status, &body), (200, &lab.index_a), "{head}");
    assert_eq!(etag(&head), etag(&head_a), "site A's ETag again");
    let (_, _, blob) = lab.get("/blob.bin");
    assert!(blob == lab.blob_a, "site A's /blob.bin, byte for byte");

    guest.expect_line("publish: slot B retired", Duration::from_secs(30));

    // 4. `--rollback --to`: back to site B (slot B), one record block.
    let out = lab.publish(&lab.site_b, &lab.owner, &["--rollback", "--version", "13"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\"rolled_back\":13"),
        "{}",
        text(&out.stdout)
    );
    let back = guest.expect_line(
        "publish: rollback version 13 signed",
        Duration::from_secs(10),
    );
    assert!(
        back.contains("slot B") && back.contains("1 card block"),
        "{back}"
    );
    guest.expect_line("from slot B without a restart", Duration::from_secs(20));
    assert_eq!(lab.get("/").2, lab.index_b);
    assert_eq!(lab.get("/a.html").0, 404);

    // One boot throughout.
    let boots = guest
        .transcript
        .iter()
        .filter(|line| line.contains("a web server with no operating system"))
        .count();
    assert_eq!(boots, 1, "one boot");
    assert!(
        !guest
            .transcript
            .iter()
            .any(|line| line.contains("publish: restarting")),
        "no restart"
    );

    // The owner's `status` counts what the uploads did.
    guest.send_line("status");
    let line = guest.expect_line("status: uploads heads", Duration::from_secs(10));
    let uploads = bramble_status::Uploads::parse(&line).expect("the uploads status line");
    assert_eq!(
        (uploads.published, uploads.rolled_back, uploads.nudged),
        (2, 1, 0),
        "versions 10 and 12, one rollback: {line}"
    );
    assert!(
        uploads.refused >= 2,
        "another key, an older version: {line}"
    );
    assert!(uploads.resumed >= 1, "the cut upload resumed: {line}");
    assert!(uploads.heads >= 6, "{line}");
}
