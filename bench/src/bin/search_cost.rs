//! What `--search` costs, for one site: the index's size against the site's text, the pack
//! time the index adds, and the guest instructions per query. The site is packed with and
//! without `--search` (the compression cache warm, so the difference is the index), then
//! booted on raspi1ap under `-icount shift=0`, where the guest's busy time in nanoseconds is
//! its instruction count; each query is asked `--requests` times on one kept-open connection
//! and the `status` line's busy time before and after, divided by the requests (the fewest of
//! three rounds), is its cost
//! (the HTTP exchange included: `/` and an empty `/search?q=` are measured the same way, to
//! subtract).
//!
//! ```sh
//! cargo run -p bramble-bench --bin search-cost -- /usr/share/doc/python3-doc/html \
//!     --query asyncio --query "dictionary comprehension syntax"
//! cargo run -p bramble-bench --bin search-cost -- --corpus      # the bench's 1,000 pages
//! ```

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, SiteOptions, pack_site};
use bramble_bench::counters::parse_bramble_status;
use bramble_bench::guest::Guest;
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_testkit::{Parsed, parse_response};
use clap::Parser;

/// Options of `search-cost`.
#[derive(Parser, Debug)]
struct Args {
    /// The site folder (with `--corpus`, none: the bench's 1,000-page docs corpus).
    site_dir: Option<PathBuf>,
    /// Measure the benchmark's generated 1,000-page docs site (bench/src/corpus.rs) and its
    /// one- and three-word queries.
    #[arg(long)]
    corpus: bool,
    /// A query to measure (the words, as typed); repeatable.
    #[arg(long)]
    query: Vec<String>,
    /// Requests per query in the instruction count.
    #[arg(long, default_value_t = 20)]
    requests: u32,
    /// Only the sizes and pack times; no guest.
    #[arg(long)]
    no_guest: bool,
}

/// Rounds of `--requests` requests per query; the fewest instructions of them is reported.
const ROUNDS: usize = 3;

/// BRAMBLE.TXT for the guest: no access log, so the console carries only what is asked.
const SETTINGS: &str = "hostname = bramble\naddress = dhcp\naccess_log = off\n";

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let (site_dir, mut queries) = match (&args.site_dir, args.corpus) {
        (Some(dir), false) => (dir.clone(), Vec::new()),
        (None, true) => {
            let dir = temp.path().join("corpus");
            bramble_bench::corpus::write_docs(&dir, bramble_bench::corpus::PAGES)?;
            let one = bramble_bench::corpus::word(bramble_bench::corpus::ONE_WORD_RANK);
            let three = bramble_bench::corpus::THREE_WORD_RANKS
                .map(bramble_bench::corpus::word)
                .join(" ");
            (dir, vec![one, three])
        }
        _ => bail!("give a site folder or --corpus (not both)"),
    };
    queries.extend(args.query.iter().cloned());

    // Pack: once to fill the compression cache, then without and with the index, warm.
    let cache = temp.path().join("cache");
    let pack = |search: bool| -> anyhow::Result<(bramble::pack::PackOutput, Duration, Duration)> {
        let options = PackOptions {
            source_date_epoch: Some(1_700_000_000),
            cache_dir: Some(cache.clone()),
            site: SiteOptions {
                search,
                ..SiteOptions::default()
            },
            ..PackOptions::default()
        };
        let cpu = process_cpu();
        let started = Instant::now();
        let output = pack_site(&site_dir, &options)?;
        Ok((output, started.elapsed(), process_cpu().saturating_sub(cpu)))
    };
    eprintln!(
        "search-cost: packing {} (cold, to fill the cache)",
        site_dir.display()
    );
    pack(false)?;
    let (plain, plain_wall, plain_cpu) = pack(false)?;
    let (indexed, indexed_wall, indexed_cpu) = pack(true)?;
    let search = indexed
        .summary
        .search
        .as_ref()
        .context("the pack made no search index")?;
    let index_bytes = search.dictionary_bytes + search.postings_bytes;
    println!("site: {}", site_dir.display());
    println!(
        "pages indexed: {}, terms: {}, text: {} bytes",
        search.pages, search.terms, search.text_bytes
    );
    println!(
        "index: dictionary and documents {} B (read at boot) + postings {} B = {} B, {:.1}% of \
         the text; snippet text {} B ({:.1}%); all with the snippets {:.1}%",
        search.dictionary_bytes,
        search.postings_bytes,
        index_bytes,
        percent(index_bytes, search.text_bytes),
        search.snippet_bytes,
        percent(search.snippet_bytes, search.text_bytes),
        percent(index_bytes + search.snippet_bytes, search.text_bytes),
    );
    println!(
        "SITE.BIN: {} B without the index, {} B with it (+{} B)",
        plain.image.len(),
        indexed.image.len(),
        indexed.image.len().saturating_sub(plain.image.len())
    );
    println!(
        "pack, warm cache: {:.2} s CPU ({:.2} s wall) without --search, {:.2} s CPU ({:.2} s \
         wall) with it; the index's own step took {:.2} s wall",
        plain_cpu.as_secs_f64(),
        plain_wall.as_secs_f64(),
        indexed_cpu.as_secs_f64(),
        indexed_wall.as_secs_f64(),
        search.elapsed.as_secs_f64()
    );
    if args.no_guest {
        return Ok(());
    }

    // The page the HTTP exchange alone is measured with: the home page, or else the site's
    // first HTML page.
    let page = {
        let image = bramble_site::SiteImage::new_checked(&indexed.image)?;
        let home = image.get("/index.html").map(|_| "/".to_string());
        home.or_else(|| {
            image
                .files()
                .find(|file| file.content_type.starts_with("text/html"))
                .map(|file| file.path.to_string())
        })
        .context("the site has no HTML page")?
    };
    let kernel = bramble::kernel::build_kernel()?;
    let card = temp.path().join("card.img");
    build_image(
        &ImageInputs {
            kernel: std::fs::read(&kernel.raw)?,
            site: indexed.image,
            settings: SETTINGS.to_string(),
            firmware: Vec::new(),
            size_mib: None,
            tls: None,
        },
        &card,
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel.raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::User {
        host_port: port,
        topology: Topology::BehindHub,
    });
    config.count_instructions = true;
    let serial_log = temp.path().join("serial.log");
    let mut guest = Guest::start(&config.args(), &serial_log)?;
    if let Err(error) = wait_until_serving(port, Duration::from_secs(600)) {
        let log = std::fs::read_to_string(&serial_log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        eprintln!("serial console (last lines):");
        for line in tail.iter().rev() {
            eprintln!("  {line}");
        }
        return Err(error);
    }

    let mut targets = vec![
        (format!("{page} (a page, for comparison)"), page.clone()),
        (
            "/search?q= (no words)".to_string(),
            "/search?q=".to_string(),
        ),
        (
            "punctuation only".to_string(),
            "/search?q=%21%3F%2E%2C%3B%3A%2D%2A".to_string(),
        ),
        (
            "200 terms".to_string(),
            format!(
                "/search?q={}",
                (0..200)
                    .map(|i| format!("t{i}"))
                    .collect::<Vec<_>>()
                    .join("+")
            ),
        ),
    ];
    if let Some(first) = queries.first() {
        // As long as a request target may be (2,048 bytes): the first query's words again
        // and again (the engine reads the query's first bytes only).
        let words = first.split_whitespace().collect::<Vec<_>>().join("+");
        let mut long = String::from("/search?q=");
        while long.len() + words.len() < 2000 {
            long.push_str(&words);
            long.push('+');
        }
        targets.push((
            format!("{} bytes of {first:?} again and again", long.len()),
            long,
        ));
    }
    for query in &queries {
        targets.push((
            format!("{query:?}"),
            format!(
                "/search?q={}",
                query.split_whitespace().collect::<Vec<_>>().join("+")
            ),
        ));
    }
    // Reading the counter costs instructions too (the console command and its line): what
    // two readings in a row cost is taken off each measurement.
    let mut readings = Vec::new();
    for _ in 0..4 {
        readings.push(busy_us(&mut guest)?);
    }
    let reading_us = readings
        .windows(2)
        .map(|pair| pair[1].saturating_sub(pair[0]))
        .min()
        .unwrap_or(0);
    println!(
        "guest instructions per request (-icount shift=0, {} requests each, one kept-open \
         connection; the HTTP exchange included; {} k instructions of reading the counter \
         taken off):",
        args.requests, reading_us
    );
    for (what, target) in &targets {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        // Two unmeasured requests: the connection is set up and the bodies cached.
        let (status, body_len, summary) = exchange(&mut stream, target)?;
        exchange(&mut stream, target)?;
        // The fewest of three rounds: the guest's own timers (mDNS, DHCP, IPv6) run in
        // real time and now and then land inside a round.
        let mut rounds = Vec::new();
        for _ in 0..ROUNDS {
            let before = busy_us(&mut guest)?;
            for _ in 0..args.requests {
                exchange(&mut stream, target)?;
            }
            let after = busy_us(&mut guest)?;
            rounds.push(
                after.saturating_sub(before).saturating_sub(reading_us) as f64 * 1000.0
                    / f64::from(args.requests),
            );
        }
        let fewest = rounds.iter().copied().fold(f64::INFINITY, f64::min);
        let most = rounds.iter().copied().fold(0.0, f64::max);
        println!(
            "  {what}: {status}, {body_len} B, {:.0} k instructions (rounds up to {:.0} k){}",
            fewest / 1000.0,
            most / 1000.0,
            summary.map(|s| format!(" ({s})")).unwrap_or_default()
        );
    }
    Ok(())
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// User + system CPU time of this process so far (all threads: the packer's rayon pool), from
/// /proc/self/stat (clock ticks).
fn process_cpu() -> Duration {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            bramble_bench::guest::cpu_time_from_stat(
                &stat,
                rustix::param::clock_ticks_per_second().max(1),
            )
        })
        .unwrap_or_default()
}

/// Polls `/` until the guest answers (with any status).
fn wait_until_serving(port: u16, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            // Any answer will do: the site may have no home page.
            if exchange(&mut stream, "/").is_ok() {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    bail!("the guest did not answer / within {timeout:?}")
}

/// One GET on the kept-open `stream`: status, body length, and a search page's summary line.
fn exchange(stream: &mut TcpStream, target: &str) -> anyhow::Result<(u16, usize, Option<String>)> {
    write!(stream, "GET {target} HTTP/1.1\r\nHost: bramble\r\n\r\n")?;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        match parse_response(&bytes, false, false) {
            Parsed::Complete(response, _) => {
                let body = String::from_utf8_lossy(&response.body);
                let summary = body.find("bramble-search-summary\">").map(|at| {
                    let rest = &body[at + "bramble-search-summary\">".len()..];
                    rest[..rest.find("</p>").unwrap_or(rest.len())]
                        .replace("<strong>", "")
                        .replace("</strong>", "")
                });
                return Ok((response.status, response.body.len(), summary));
            }
            Parsed::Partial => {}
            Parsed::Invalid(why) => bail!("{target}: {why}"),
        }
        let n = stream.read(&mut chunk).context("reading a response")?;
        if n == 0 {
            bail!("{target}: the connection closed mid-response");
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// The guest's busy time (µs; under `-icount shift=0`, thousands of instructions).
fn busy_us(guest: &mut Guest) -> anyhow::Result<u64> {
    guest.drain();
    guest.send_line("status")?;
    let line = guest
        // The first line of the command's answer (`status: up N us, busy N us, ...`); the
        // lines after it (`status: cache ...`) may still be arriving from the last reading.
        .wait_line("us, busy ", Duration::from_secs(30))
        .context("no status line")?;
    parse_bramble_status(&line)
        .and_then(|counters| counters.busy_us)
        .context("no busy time on the status line")
}
