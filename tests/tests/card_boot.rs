//! Boot time does not grow with the site: a real documentation site of about 90 MB of SITE.BIN
//! (Python 3.11's HTML documentation, Debian's python3-doc: 1,063 files) answers its first
//! request within 1.5 times the default site's time in the same run, and then serves every
//! file byte for byte. The times compared are the guest's own (its `first request served`
//! stamp, microseconds since reset), as issue 14 measured them: the wall time from starting
//! QEMU, printed beside them, also counts QEMU's start and whatever else loads the host. Long
//! (packing 67 MB with brotli, fetching every file through QEMU's usb-net), so ignored in the
//! test command; run it with --ignored.

mod support;

use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use std::path::Path;
use std::time::{Duration, Instant};
use support::{cache_status, default_site_dir, free_port, get, site_files};

/// Where python3-doc puts the HTML documentation.
const PYTHON_DOCS: &str = "/usr/share/doc/python3.11/html";

struct Booted {
    guest: Guest,
    port: u16,
    /// Wall time from starting QEMU to the first 200 for `/`.
    first_200: Duration,
    /// The guest's boot phases line once it has served its first request.
    phases: String,
    _dir: tempfile::TempDir,
}

impl Booted {
    /// A stamp of the boot phases line (`table verified`, `ready`, `first request served`),
    /// in guest microseconds since reset.
    fn stamp(&self, phase: &str) -> u64 {
        let after = self
            .phases
            .split(&format!("{phase} "))
            .nth(1)
            .unwrap_or_else(|| panic!("no {phase:?} in {:?}", self.phases));
        after
            .split(' ')
            .next()
            .and_then(|number| number.parse().ok())
            .unwrap_or_else(|| panic!("no number after {phase:?} in {:?}", self.phases))
    }

    fn describe(&self) -> String {
        format!(
            "first 200 after {:.2} s of wall time; guest: table verified {} ms, ready {} ms, \
             first request served {} ms",
            self.first_200.as_secs_f64(),
            self.stamp("table verified") / 1000,
            self.stamp("ready") / 1000,
            self.stamp("first request served") / 1000
        )
    }
}

/// Packs `site` (with the packer's compression cache, as `bramble pack` does), boots it,
/// polls `/` every 20 ms until it answers 200, and waits for the boot phases line that
/// stamps the first request.
fn boot_and_time(site: &Path) -> Booted {
    let options = PackOptions {
        cache_dir: bramble::pack::compress::default_cache_dir(),
        source_date_epoch: Some(support::SOURCE_DATE_EPOCH),
        ..PackOptions::default()
    };
    let packed = pack_site(site, &options).expect("pack");
    eprintln!(
        "{}: {} files, SITE.BIN {} bytes",
        site.display(),
        packed.summary.files,
        packed.image.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let card = dir.path().join("card.img");
    bramble::image::build_image(
        &bramble::image::ImageInputs {
            kernel: std::fs::read(&kernel().raw).unwrap(),
            site: packed.image,
            settings: "access_log = off\n".into(),
            firmware: Vec::new(),
            size_mib: None,
            tls: None,
        },
        &card,
    )
    .unwrap();
    let port = free_port();
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::User {
        host_port: port,
        topology: Topology::BehindHub,
    });
    let started = Instant::now();
    let guest = Guest::start(&config);
    loop {
        if status_of_root(port) == Some(200) {
            break;
        }
        assert!(
            started.elapsed() < BOOT_TIMEOUT,
            "no 200 within {BOOT_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_200 = started.elapsed();
    let mut guest = guest;
    let phases = guest.expect_line("first request served", Duration::from_secs(10));
    Booted {
        guest,
        port,
        first_200,
        phases,
        _dir: dir,
    }
}

/// The status of `GET /` on 127.0.0.1:`port`, if it answers within 100 ms (a connection made
/// before the guest listens is given up soon, so the first 200 is timed to the poll interval).
/// The rest of the answer is read until the guest closes (or 100 ms pass without a byte), so
/// that the first exchange ends cleanly rather than in a reset: the guest stamps its first
/// request when the bytes are taken, and a reset could leave them untaken.
fn status_of_root(port: u16) -> Option<u16> {
    use std::io::{Read, Write};
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream =
        std::net::TcpStream::connect_timeout(&address, Duration::from_millis(500)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .ok()?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: bramble\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    let status = std::str::from_utf8(&head[9..12]).ok()?.parse().ok();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    status
}

#[test]
#[ignore = "packs 67 MB of documentation (minutes the first time) and fetches all 1,063 files \
            through QEMU: about 2 minutes with a warm compression cache; needs python3-doc"]
fn a_90_mb_documentation_site_answers_as_soon_as_the_default_site() {
    let docs = Path::new(PYTHON_DOCS);
    assert!(
        docs.join("index.html").exists(),
        "{PYTHON_DOCS} is missing: apt-get install python3-doc (tools/setup.sh does)"
    );
    // Three boots of each, interleaved, so that a burst of load on the host touches both;
    // medians compared (one boot's first 200 varies by a few hundred ms with QEMU's port
    // forward and the USB enumeration).
    let mut small_times = Vec::new();
    let mut big_times = Vec::new();
    let mut small_walls = Vec::new();
    let mut big_walls = Vec::new();
    let mut big = None;
    for round in 0..3 {
        let small = boot_and_time(&default_site_dir());
        eprintln!("round {round}: default site: {}", small.describe());
        small_times.push(small.stamp("first request served"));
        small_walls.push(small.first_200);
        drop(small);
        let docs = boot_and_time(docs);
        eprintln!("round {round}: documentation: {}", docs.describe());
        big_times.push(docs.stamp("first request served"));
        big_walls.push(docs.first_200);
        big = Some(docs);
    }
    let median = |times: &mut Vec<u64>| {
        times.sort();
        times[1]
    };
    let (small_median, big_median) = (median(&mut small_times), median(&mut big_times));
    small_walls.sort();
    big_walls.sort();
    eprintln!(
        "first request served, guest time, median of three: default site {:.3} s, \
         documentation {:.3} s ({:.2}x); wall time to the first 200: {:.2} s and {:.2} s",
        small_median as f64 / 1e6,
        big_median as f64 / 1e6,
        big_median as f64 / small_median as f64,
        small_walls[1].as_secs_f64(),
        big_walls[1].as_secs_f64()
    );
    assert!(
        big_median as f64 <= 1.5 * small_median as f64,
        "documentation site {big_times:?} us against the default site's {small_times:?} us \
         (guest time to the first request served)"
    );
    let mut big = big.expect("three rounds");

    // Every file, byte for byte, twice: cold from the card, then from the cache.
    // The packer leaves dotfiles out (Sphinx's .buildinfo here).
    let files: Vec<_> = site_files(docs)
        .into_iter()
        .filter(|(path, _)| !path.split('/').any(|part| part.starts_with('.')))
        .collect();
    let mut after_cold = None;
    for pass in ["cold", "warm"] {
        let started = Instant::now();
        let mut bytes = 0u64;
        for (path, expected) in &files {
            let url = path.replace(' ', "%20");
            let response = get(big.port, &url, "");
            assert_eq!(response.status, 200, "{path}: {}", response.head);
            assert!(&response.body == expected, "{path}: bytes differ");
            bytes += expected.len() as u64;
        }
        let cache = cache_status(&mut big.guest);
        eprintln!(
            "{pass} pass: {} files, {bytes} bytes in {:.1} s; cache {cache:?}",
            files.len(),
            started.elapsed().as_secs_f64()
        );
        if pass == "cold" {
            after_cold = Some(cache);
            continue;
        }
        // The cache holds the whole site (it is sized to it when RAM allows): the second
        // pass is all hits and reads nothing more from the card.
        let after_cold = after_cold.expect("the cold pass came first");
        let grew = |count: fn(&bramble_status::Cache) -> u64| count(&cache) - count(&after_cold);
        eprintln!(
            "warm pass: {} hits, {} misses, {} bytes from the card",
            grew(|c| c.hits),
            grew(|c| c.misses),
            grew(|c| c.card_bytes)
        );
        assert_eq!(grew(|c| c.misses), 0, "{after_cold:?} then {cache:?}");
        assert_eq!(grew(|c| c.card_bytes), 0, "{after_cold:?} then {cache:?}");
        let bodies = files.iter().filter(|(_, bytes)| !bytes.is_empty()).count();
        assert!(
            grew(|c| c.hits) >= bodies as u64,
            "{bodies} bodies: {cache:?}"
        );
    }
    for line in &big.guest.transcript {
        if line.contains("boot phases") || line.contains("store: cache") || line.contains("sd: ") {
            eprintln!("{line}");
        }
    }
}
