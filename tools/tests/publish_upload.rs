//! `bramble publish SITE --to https://HOST:PORT`, through the binary, against the board's own
//! upload path run on the host: the HTTP engine (`bramble_http::Connection`) and the card
//! writer (`bramble_publish::upload::PublishService`) over a card image `bramble image
//! --publish-key` made, behind rustls on 127.0.0.1 with a certificate from a CA made here.
//! The server can cut the first upload's connection mid-body, as a dropped link would.
//!
//! Checked: a publish cut mid-body resumes (the CLI asks where, the board continues) and the
//! card then serves the new site, as the kernel reads it; the board's refusals (the same
//! version again, another key, another host) are printed as its JSON and the command fails;
//! `--rollback --to` switches back; `--ca-file` is what makes the certificate trusted; plain
//! `http://` is refused by the tool.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bramble_fat::site_slots::{SlotRecord, Slots, candidates};
use bramble_http::{Connection, ConnectionAction, Server, ServerConfig, SiteSource};
use bramble_publish::upload::PublishService;

fn bramble() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl (tools/setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`) and a certificate for 127.0.0.1 from it (`board.pem`, `board.key`).
fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"],
            &["-subj", "/CN=Upload test CA"],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "board.key",
                "-out",
                "board.csr",
                "-subj",
                "/CN=garden",
            ],
        ]
        .concat(),
    );
    fs::write(dir.join("board.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
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
            "2",
            "-extfile",
            "board.ext",
        ],
    );
}

fn server_config(dir: &Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(dir.join("board.pem"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("board.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// The board's upload path on 127.0.0.1: returns its port and a stop flag. The first
/// upload connection that has sent `cut_after` bytes of plaintext is dropped. With `pulls`
/// the board is one that pulls (`publish_url`), so a manifest with no body is a nudge.
fn start_board(
    dir: &Path,
    card: &Path,
    cut_after: Option<usize>,
    pulls: bool,
) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let config = server_config(dir);
    let card = card.to_path_buf();
    let stopping = stop.clone();
    std::thread::spawn(move || {
        let open = bramble::publish::card::open_card(&card).unwrap();
        let (card, publisher, hostname) = open.into_writer();
        let card: &'static mut (dyn bramble_hal::block::BlockWrite + Send) = Box::leak(card);
        let scratch: &'static mut [u8] = vec![0u8; 64 * 1024].leak();
        let hostname: &'static str = hostname.leak();
        let service: &'static std::cell::RefCell<PublishService<'static>> = Box::leak(Box::new(
            std::cell::RefCell::new(PublishService::new(publisher, card, scratch, hostname)),
        ));
        let mut server = Server::new(
            SiteSource::Unavailable("the upload test serves no site"),
            ServerConfig::default(),
        );
        service.borrow_mut().set_pulls(pulls);
        server.set_upload(service);
        let started = Instant::now();
        let mut cut = cut_after;
        // Bounded: the test's own run is far shorter.
        while !stopping.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(300) {
            match listener.accept() {
                Ok((socket, _)) => serve(&mut server, &config, socket, &mut cut, started),
                Err(error) if error.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(error) => panic!("accept: {error}"),
            }
        }
    });
    (port, stop)
}

/// One connection, to its end (or to the cut).
fn serve(
    server: &mut Server,
    config: &Arc<rustls::ServerConfig>,
    mut socket: TcpStream,
    cut: &mut Option<usize>,
    started: Instant,
) {
    let now = || bramble_hal::Instant::from_micros(started.elapsed().as_micros() as u64 + 1);
    socket.set_nonblocking(false).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut tls = rustls::ServerConnection::new(config.clone()).unwrap();
    let mut http = Connection::new();
    http.open_secure(server, now());
    http.set_peer("127.0.0.1".parse().unwrap());
    let mut received = 0usize;
    let mut buffer = vec![0u8; 32 * 1024];
    let mut out = vec![0u8; 16 * 1024];
    let limit = Instant::now();
    while limit.elapsed() < Duration::from_secs(120) {
        let eof = match tls.read_tls(&mut socket) {
            Ok(0) => true,
            Ok(_) => {
                if tls.process_new_packets().is_err() {
                    break;
                }
                false
            }
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                false
            }
            Err(_) => true,
        };
        loop {
            let n = tls.reader().read(&mut buffer).unwrap_or_default();
            if n == 0 {
                break;
            }
            received += n;
            let mut at = 0;
            while at < n {
                at += http.receive(server, &buffer[at..n], now());
                let sent = http.transmit(server, &mut out, now());
                tls.writer().write_all(&out[..sent]).unwrap();
            }
            if cut.is_some_and(|limit| received >= limit && received > 2000) {
                // The link drops mid-body.
                *cut = None;
                http.close(server);
                let _ = socket.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
        loop {
            let sent = http.transmit(server, &mut out, now());
            if sent == 0 {
                break;
            }
            tls.writer().write_all(&out[..sent]).unwrap();
        }
        while tls.wants_write() {
            if tls.write_tls(&mut socket).is_err() {
                break;
            }
        }
        if eof || http.action(now()) != ConnectionAction::KeepOpen {
            break;
        }
    }
    http.close(server);
}

/// What the kernel would serve from the card: the newer whole record's live slot (its
/// index read with the kernel's code and matching the record), else the other.
fn served(card: &Path) -> Vec<u8> {
    let bytes = fs::read(card).unwrap();
    let sectors = (bytes.len() / 512) as u64;
    let volume = bramble_fat::check_card(sectors, |sector, buffer| {
        let at = sector as usize * 512;
        buffer.copy_from_slice(bytes.get(at..at + 512).ok_or(())?);
        Ok::<(), ()>(())
    })
    .unwrap();
    let slots = candidates(&bytes[..512])
        .unwrap()
        .into_iter()
        .flatten()
        .find_map(|(first, count)| {
            let at = first as usize * 512;
            Slots::confirm(
                first,
                count,
                sectors,
                &volume.partition,
                &bytes[at..at + 512],
            )
            .ok()
        })
        .unwrap();
    let block = |n: u64| &bytes[n as usize * 512..n as usize * 512 + 512];
    let (record, _) =
        SlotRecord::current([block(slots.record_block(0)), block(slots.record_block(1))]).unwrap();
    for slot in record.boot_order() {
        let entry = record.slots[usize::from(slot)];
        let extents =
            bramble_store::fat::FileExtents::contiguous(slots.slot_block(slot), entry.len);
        let mut memory = vec![0u8; 1 << 20];
        let mut reader = bramble_store::MemoryCard::new(&bytes);
        if let Ok((index, _)) = bramble_store::read_index(&mut reader, &extents, &mut memory)
            && index.checksum() == entry.index_checksum
            && index.image_len() == entry.len
        {
            let at = slots.slot_block(slot) as usize * 512;
            return bytes[at..at + entry.len as usize].to_vec();
        }
    }
    panic!("no slot would be served");
}

fn site_dir(dir: &Path, name: &str, pages: usize) -> PathBuf {
    let root = dir.join(name);
    fs::create_dir_all(&root).unwrap();
    for page in 0..pages {
        // Random letters (barely compressible): many blocks to write.
        let mut state = (page as u64 + 1) * 0x9E37_79B9 + name.len() as u64;
        let text: String = (0..4000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'a' + (state % 26) as u8)
            })
            .collect();
        fs::write(root.join(format!("{name}{page}.html")), text).unwrap();
    }
    root
}

fn packed(dir: &Path) -> Vec<u8> {
    bramble::pack::pack_site(dir, &bramble::pack::PackOptions::default())
        .expect("pack")
        .image
}

fn run(command: &mut Command) -> Output {
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn cli_publish_to_uploads_resumes_after_a_cut_and_prints_the_boards_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    make_certificates(dir);
    let a = site_dir(dir, "a", 10);
    let b = site_dir(dir, "b", 60);
    let key = dir.join("owner.key");
    let other = dir.join("other.key");
    for path in [&key, &other] {
        assert!(run(bramble().arg("keygen").arg(path)).status.success());
    }
    fs::write(dir.join("BRAMBLE.TXT"), "hostname = garden\n").unwrap();
    fs::write(dir.join("kernel.img"), [0xEAu8; 4096]).unwrap();
    let card = dir.join("card.img");
    let out = run(bramble()
        .args(["image", "--slot-mib", "2", "--kernel"])
        .arg(dir.join("kernel.img"))
        .arg("--site")
        .arg(&a)
        .arg("--config")
        .arg(dir.join("BRAMBLE.TXT"))
        .arg("--publish-key")
        .arg(dir.join("owner.pub"))
        .arg("-o")
        .arg(&card));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let image_b = packed(&b);
    assert!(image_b.len() > 150_000, "{}", image_b.len());

    // Cut 100 KB into the first upload.
    let (port, stop) = start_board(dir, &card, Some(100_000), false);
    let url = format!("https://127.0.0.1:{port}");
    let publish_at = |url: &str, site: &Path, key: &Path, extra: &[&str]| {
        run(bramble()
            .arg("publish")
            .arg(site)
            .args(["--to", url, "--ca-file"])
            .arg(dir.join("ca.pem"))
            .arg("--key")
            .arg(key)
            .args(extra))
    };
    let publish = |site: &Path, key: &Path, extra: &[&str]| publish_at(&url, site, key, extra);
    let out = publish(&b, &key, &["--version", "10"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("connection lost"), "{stderr}");
    assert!(stderr.contains("resuming at byte"), "{stderr}");
    assert!(
        stdout.starts_with("{\"published\":10,") && stdout.contains("\"slot\":\"B\""),
        "{stdout}"
    );
    assert!(served(&card) == image_b, "the card serves site B");

    // Refusals: the board's JSON, printed; the command fails; site B stays.
    for (site, key, extra, code) in [
        (&b, &key, &["--version", "10"][..], "old-version"),
        (&a, &other, &["--version", "20"], "bad-signature"),
        (
            &a,
            &key,
            &["--version", "20", "--host", "orchard"],
            "wrong-host",
        ),
    ] {
        let out = publish(site, key, extra);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("{{\"error\":\"{code}\",\"message\":\"")),
            "{stderr}"
        );
        assert!(served(&card) == image_b);
    }

    // The test CA is not among the web's roots: without --ca-file the certificate fails.
    let out = run(bramble()
        .arg("publish")
        .arg(&a)
        .args(["--to", &url, "--version", "30", "--key"])
        .arg(&key));
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("TLS"), "{}", text(&out.stderr));

    // A signed rollback to site A, over the same path.
    let out = publish(&a, &key, &["--rollback", "--version", "31"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("{\"rolled_back\":31,\"slot\":\"A\""),
        "{}",
        text(&out.stdout)
    );
    assert!(served(&card) == packed(&a), "the card serves site A again");

    // A nudge (the manifest without its image) to a board that does not pull: refused.
    let out = publish(&b, &key, &["--nudge", "--version", "40"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("{\"error\":\"no-pull\""),
        "{}",
        text(&out.stderr)
    );
    stop.store(true, Ordering::Relaxed);

    // To a board that pulls: accepted (202), nothing written; an old version's is refused.
    let (port, stop) = start_board(dir, &card, None, true);
    let url = format!("https://127.0.0.1:{port}");
    let out = publish_at(&url, &b, &key, &["--nudge", "--version", "40"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("{\"nudged\":40,"),
        "{}",
        text(&out.stdout)
    );
    assert!(served(&card) == packed(&a), "a nudge writes nothing");
    let out = publish_at(&url, &b, &key, &["--nudge", "--version", "9"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("old-version"),
        "{}",
        text(&out.stderr)
    );
    stop.store(true, Ordering::Relaxed);

    // Plain HTTP never carries a site.
    let out = run(bramble()
        .arg("publish")
        .arg(&a)
        .args(["--to", "http://127.0.0.1:1", "--key"])
        .arg(&key));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("https://"),
        "{}",
        text(&out.stderr)
    );
}
