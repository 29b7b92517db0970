//! `bramble-bench`: boots Bramble and the Linux + busybox httpd baseline one after the other in
//! the same QEMU machine with the same usb-net NIC mode (RNDIS), serving the same files, and
//! measures both the same way: wrk at each concurrency level, time to the first HTTP 200,
//! QEMU's idle host CPU, guest RAM, image sizes, and guest instructions per request under
//! `-icount shift=0`. Prints a side-by-side table and keeps JSON, PNG charts and a markdown
//! summary in `bench/results/<date>-<commit>/`.
//!
//! `bramble-bench --hosted` (hosted.rs) measures the portable code instead: bramble-hosted
//! on a TAP device against nginx and busybox httpd on this machine, inside a network
//! namespace, with the same load runs, table, JSON and charts.
//!
//! A crate of its own, beside the `bramble` tool it uses (pack, image, kernel build), so that
//! the user's tool carries none of the benchmark's JSON, chart and font dependencies.
//!
//! Benchmarks measure; they assert nothing about timing. Every request goes to 127.0.0.1;
//! every load run is bounded in time; every QEMU is stopped by its PID.

pub mod corpus;
pub mod counters;
pub mod guest;
mod hosted;
pub mod https;
pub mod judge;
pub mod load;
pub mod plot;
pub mod probe;
pub mod profile;
pub mod report;
pub mod soak;
mod systems;
mod tap;
pub mod walk;

use anyhow::{Context, bail};
use bramble_hal::calendar::UtcDateTime;
use clap::Args;
use guest::Guest;
use report::{CpuCost, Host, LoadReport, Report, SystemReport, TARGETS};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use systems::System;

/// Options of `bramble-bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Concurrency levels (open connections), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    pub levels: Vec<u32>,
    /// Seconds of load per target and level. Longer than --timeout, so that a request stuck
    /// longer than the timeout is counted as an error.
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    /// Seconds of idle over which QEMU's host CPU is measured.
    #[arg(long, default_value_t = 10)]
    pub idle: u64,
    /// Systems to measure, comma-separated: bramble, linux (default: both); with --hosted:
    /// bramble, nginx, busybox (default: all three).
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// Targets, comma-separated: page (6 KB index.html), 100k (a 100 KiB file), 304
    /// (revalidation of / with If-None-Match), tls-page (the page over HTTPS, keep-alive),
    /// tls-resumed (the page over HTTPS, a new connection per request, the session resumed),
    /// tls-full (the page over HTTPS, a new connection and a full handshake per request, by
    /// openssl s_time), cold (Bramble only: an 8 MiB file read from the SD card with the cache
    /// emptied first, three rounds, for the card's speed), search1 and search3 (Bramble in
    /// QEMU only: `/search?q=` with one and three words over the site's 1,000 docs pages),
    /// walk (Bramble in QEMU only, with --walk-site: every file of that site in turn, as a
    /// browser asks for them, the card cache emptied before each level; its hit rate and card
    /// traffic per level). Systems without HTTPS skip the tls- targets.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "page,100k,304,tls-page,tls-resumed,tls-full,cold"
    )]
    pub targets: Vec<String>,
    /// Seconds of load (10 clients) per target in the `-icount shift=0` boot that counts
    /// guest instructions per request; 0 skips that boot.
    #[arg(long, default_value_t = 10)]
    pub icount_duration: u64,
    /// In the `-icount shift=0` boot, also profile Bramble's guest: a QEMU TCG plugin (ours,
    /// bench/plugin/tbcount.c, built with the system C compiler) counts the instructions of
    /// every translation block over each target's run, and the kernel's symbols attribute them
    /// to functions: the top functions per request go in the table, JSON and README.
    #[arg(long)]
    pub profile: bool,
    /// Only the `-icount shift=0` boot: no timed boot, idle window or load levels (for cost
    /// and --profile work).
    #[arg(long)]
    pub icount_only: bool,
    /// Per-request timeout of the load generator, in seconds: wrk counts a request still
    /// unanswered after this long as a timeout error.
    #[arg(long, default_value_t = 10)]
    pub timeout: u64,
    /// Where to keep results.json, the PNG charts and README.md (default:
    /// bench/results/<date>-<commit>/ in the workspace).
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Send `Connection: close` with every request, so that each request opens a new TCP
    /// connection (busybox httpd closes after every answer anyway; Bramble keeps connections
    /// open by default, as browsers expect).
    #[arg(long)]
    pub close: bool,
    /// Keep results only in target/bench/runs/ (for trial runs).
    #[arg(long)]
    pub no_save: bool,
    /// Benchmark the hosted build instead of the QEMU guests: bramble-hosted on a TAP device
    /// against nginx and busybox httpd, each in a fresh network namespace on this machine (needs
    /// root). A regression guard for the portable code, not a figure for the Pi. Results go
    /// to bench/results/<date>-<commit>-hosted/.
    #[arg(long)]
    pub hosted: bool,
    /// With --hosted: also measure this bramble-hosted binary, as LABEL=PATH (repeatable),
    /// reported as bramble-hosted-LABEL right after the freshly built one (which
    /// `--systems nginx,busybox` leaves out): before/after comparisons in one run.
    #[arg(long, value_name = "LABEL=PATH", requires = "hosted")]
    pub hosted_binary: Vec<String>,
    /// A site folder Bramble also serves, under /walk/, for the walk target (a real site:
    /// e.g. /usr/share/doc/python3.11/html, Debian's python3-doc, 94 MB of SITE.BIN). Linked,
    /// not copied, into the benchmark's site; the Linux baseline does not get it.
    #[arg(long, value_name = "DIR")]
    pub walk_site: Option<PathBuf>,
    /// Boot the QEMU guests with their NIC on a TAP device inside a network namespace the
    /// benchmark creates (needs root), instead of behind QEMU's port forward, and load them
    /// with the judging client (one keep-alive connection per client, each judged) from inside
    /// it: the 6 KB page only, failures by kind, clients never served, first-answer times,
    /// guest RAM mid-run, and idle against a WFI-only floor guest. Results go to
    /// bench/results/<date>-<commit>-tap/.
    #[arg(long, conflicts_with = "hosted")]
    pub tap: bool,
    /// With --tap: the TAP device's transmit queue towards QEMU, in frames (its txqueuelen,
    /// which also sizes the tun driver's ring; `ip tuntap` makes 1,000). QEMU's usb-net holds
    /// one received frame at a time, where a real B+'s LAN9514 has a receive FIFO and packs
    /// several frames into one USB transfer, so a burst of SYNs or requests waits in this
    /// queue; the frames it cannot hold are dropped (the report counts them) and come back
    /// only with the clients' TCP back-off. The report gives the length used.
    #[arg(long, value_name = "FRAMES", default_value_t = DEFAULT_TAP_QUEUE, requires = "tap",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub tap_queue: u32,
    /// With --tap: after each system's plain HTTP levels, the same levels over HTTPS with
    /// HTTP/1.1 and with h2 (h2load, from nghttp2-client: keep-alive clients, each run judged),
    /// full and resumed handshakes per second (openssl s_time -new / -reuse, 10 clients), the
    /// 1 MiB file's MB/s over HTTPS, and (unless --icount-duration 0) guest instructions per
    /// full handshake offering only X25519, then only P-256, in a second boot under -icount
    /// with the counting plugin. The Linux guest answers HTTPS with nginx and OpenSSL.
    #[arg(long, requires = "tap")]
    pub https: bool,
    /// With --tap: instead of the levels, a soak of one Bramble guest for DURATION (seconds,
    /// or with s, m or h: `1h`; at least 9 minutes): rounds of a minute, each 40 s of mixed
    /// load side by side (plain HTTP, HTTPS and h2 keep-alive, new and resumed handshakes,
    /// idle hoarders on 80 and 443, slowloris, a P-256-only handshake flood) then 17 s of
    /// quiet and the guest's status counters. The report (soak.md, soak.json in
    /// bench/results/<date>-<commit>-soak/) says which counters grow across the quiet samples
    /// and whether the guest restarted. Runs outside the test command.
    #[arg(long, value_name = "DURATION", requires = "tap", value_parser = soak::parse_duration)]
    pub soak: Option<u64>,
}

/// The TAP queue `--tap-queue` gives by default, in frames: room for a SYN from each of
/// 10,000 clients and their first requests at once.
pub const DEFAULT_TAP_QUEUE: u32 = 20_000;

impl BenchArgs {
    /// The systems to measure: `--systems`, or every system of the chosen mode.
    pub fn system_names(&self) -> Vec<String> {
        if !self.systems.is_empty() {
            return self.systems.clone();
        }
        let all: &[&str] = if self.hosted {
            &["bramble", "nginx", "busybox"]
        } else {
            &["bramble", "linux"]
        };
        all.iter().map(|name| name.to_string()).collect()
    }
}

/// Why a load run did not start: the guest no longer answers `/`.
const NOT_ANSWERING: &str = "the server did not answer before this run";
/// Fresh boots per system after a guest stops answering.
const MAX_REBOOTS: u32 = 2;

/// How long a boot may take to answer its first HTTP 200 (generous: the cores are shared).
const BOOT_TIMEOUT: Duration = Duration::from_secs(90);
/// The same under `-icount shift=0`, where a guest that spins on a timer register advances its
/// clock only a few nanoseconds per read (Bramble needed about 55 s).
const ICOUNT_BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// Boots per system and mode before giving up (the Linux guest hangs in early boot now and
/// then under QEMU 7.2).
const BOOT_TRIES: u32 = 2;

/// Runs the benchmark.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    check_args(&args)?;
    if args.hosted {
        return hosted::run(&args);
    }
    if args.tap {
        if let Some(seconds) = args.soak {
            return soak::run(&args, seconds);
        }
        return tap::run(&args);
    }
    let systems = args.system_names();
    let root = bramble::workspace_root();
    let work = root.join("target/bench");
    let RunDir {
        date,
        commit,
        path: run_dir,
    } = new_run_dir(&root, "")?;
    raise_open_file_limit();
    let site = systems::prepare_site(&root, &work.join("site"))?;
    let load_generator = wrk_version()?;
    let mut report = Report {
        date: date.clone(),
        commit: commit.clone(),
        host: Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_average_before: load_average(),
            load_average_after: String::new(),
            qemu: qemu_version(),
        },
        machine: "raspi1ap".into(),
        nic: "usb-net, RNDIS".into(),
        load_generator,
        duration_seconds: args.duration,
        connection_close: args.close,
        levels: args.levels.clone(),
        systems: Vec::new(),
        hosted: false,
        server_cpu_method: None,
        tap: false,
        idle_floor_qemu_cpu_percent: None,
        tap_queue_frames: None,
    };
    eprintln!(
        "bench: {} on raspi1ap, levels {:?}, {} s each; logs in {}",
        systems.join(" vs "),
        args.levels,
        args.duration,
        run_dir.display()
    );
    for name in &systems {
        let system = match name.as_str() {
            "bramble" => System::bramble(
                &site,
                &work,
                args.walk_site.as_deref(),
                systems::Link::UserForward,
            )?,
            "linux" => System::linux(&root, &site, &work)?,
            other => bail!("unknown system '{other}' (use bramble or linux)"),
        };
        let system_dir = run_dir.join(system.name());
        std::fs::create_dir_all(&system_dir)?;
        let result = measure(&system, &site, &args, &system_dir)?;
        report.systems.push(result);
        // Keep partial results if a later system fails.
        write_json(&report, &run_dir.join("results.json"))?;
    }
    finish_run(&mut report, &args, &root, &run_dir, "")
}

/// A run's end: the load average after it, the table on stdout, the outputs in the run's raw
/// folder and, unless `--no-save`, in `--results` or bench/results/<date>-<commit><suffix>.
pub(crate) fn finish_run(
    report: &mut Report,
    args: &BenchArgs,
    root: &Path,
    run_dir: &Path,
    suffix: &str,
) -> anyhow::Result<()> {
    report.host.load_average_after = load_average();
    print!("{}", report::table(report));
    write_outputs(report, run_dir)?;
    if args.no_save {
        eprintln!("bench: results in {}", run_dir.display());
        return Ok(());
    }
    let results = args.results.clone().unwrap_or_else(|| {
        let name = format!("{}-{}{suffix}", report.date, report.commit);
        root.join("bench/results").join(name)
    });
    write_outputs(report, &results)?;
    eprintln!("bench: results in {}", results.display());
    Ok(())
}

fn check_args(args: &BenchArgs) -> anyhow::Result<()> {
    if args.levels.is_empty() || args.levels.contains(&0) {
        bail!("--levels needs positive numbers");
    }
    for target in &args.targets {
        if !TARGETS.iter().any(|(name, _)| name == target) && target != report::COLD_TARGET.0 {
            bail!(
                "unknown target '{target}' (use page, 100k, 304, tls-page, tls-resumed, \
                 tls-full, cold, search1, search3 or walk)"
            );
        }
    }
    let walk = args.targets.iter().any(|t| t == WALK_TARGET);
    if walk && args.walk_site.is_none() {
        bail!("the walk target needs --walk-site DIR (a site folder to walk)");
    }
    if walk && args.hosted {
        bail!("the walk target runs in the QEMU guest only (it measures the card cache)");
    }
    if let Some(dir) = &args.walk_site
        && !dir.is_dir()
    {
        bail!("--walk-site {}: not a folder", dir.display());
    }
    if args.duration == 0 || args.duration > 600 {
        bail!("--duration must be 1..=600 seconds");
    }
    if args.duration <= args.timeout {
        eprintln!(
            "bench: note: with --duration {} <= --timeout {}, no request can time out; errors \
             then count only refused or reset connections",
            args.duration, args.timeout
        );
    }
    Ok(())
}

/// results.json, throughput.png, latency.png and README.md in `dir`.
fn write_outputs(report: &Report, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_json(report, &dir.join("results.json"))?;
    plot::write_plots(report, dir)?;
    std::fs::write(dir.join("README.md"), report::markdown(report))?;
    Ok(())
}

fn write_json(report: &Report, path: &Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Measures one system: a normal boot for boot time, idle CPU, RAM and load, then (unless
/// disabled) an instruction-counting boot for CPU cost per request.
fn measure(
    system: &System,
    site: &systems::Site,
    args: &BenchArgs,
    dir: &Path,
) -> anyhow::Result<SystemReport> {
    let mut result = SystemReport {
        name: system.name().into(),
        description: system.description(),
        image_bytes: system.image_bytes(),
        ..Default::default()
    };
    if args.icount_only {
        let validator = {
            let ports = Ports::free()?;
            let Some((_guest, _)) = boot(system, ports, false, &[], dir, &mut result.notes)? else {
                return Ok(result);
            };
            check_site(
                ports.http,
                site,
                &mut result.notes,
                &mut result.checked_bytes,
            )
        };
        cpu_cost(system, args, &validator, dir, &mut result)?;
        return Ok(result);
    }
    let mut ports = Ports::free()?;
    let port = ports.http;
    let mut reboots = 0;
    let Some((mut guest, boot_time)) = boot(system, ports, false, &[], dir, &mut result.notes)?
    else {
        return Ok(result);
    };
    result.boot_to_first_200_seconds = Some(boot_time.as_secs_f64());
    if let System::Bramble { .. } = system {
        // Printed again, with its last stamp, once the first response has gone out.
        result.boot_phases_us = guest
            .wait_line("first request served", Duration::from_secs(10))
            .and_then(|line| counters::parse_boot_phases(&line))
            .unwrap_or_default();
        if let Some(phases) = (!result.boot_phases_us.is_empty()).then_some(&result.boot_phases_us)
        {
            eprintln!(
                "bench: {}: boot phases (guest us): {phases:?}",
                system.name()
            );
        }
    }
    let validator = check_site(port, site, &mut result.notes, &mut result.checked_bytes);

    std::thread::sleep(Duration::from_secs(3));
    let before = guest.cpu_time()?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(args.idle));
    let used = guest.cpu_time()? - before;
    result.idle_qemu_cpu_percent =
        Some(100.0 * used.as_secs_f64() / started.elapsed().as_secs_f64());
    let counters = system.counters(&mut guest, port);
    result.guest_ram_used_bytes = counters.and_then(|c| c.ram_used_bytes);
    if result.guest_ram_used_bytes.is_none() {
        result.notes.push(format!(
            "guest RAM: {} reports no RAM counter yet",
            system.name()
        ));
    }

    for (target, _) in TARGETS
        .iter()
        .filter(|(t, _)| args.targets.iter().any(|a| a == t))
    {
        if report::is_tls_target(target) && !system.serves_https() {
            result.notes.push(format!(
                "{target}: skipped, {} serves no HTTPS",
                system.name()
            ));
            continue;
        }
        if target.starts_with("search") && !system.searches() {
            result
                .notes
                .push(format!("{target}: skipped, only Bramble answers /search"));
            continue;
        }
        if *target == WALK_TARGET && system.walk().is_none() {
            result.notes.push(format!(
                "{target}: skipped, only Bramble serves the --walk-site site (from its card)"
            ));
            continue;
        }
        if let (true, Some(walk)) = (*target == WALK_TARGET, system.walk()) {
            result.walk_files = Some(walk.files as u64);
            result.notes.push(format!(
                "walk: {} files of {} ({} bytes uncompressed) under {}, the card cache emptied \
                 before each level",
                walk.files,
                args.walk_site
                    .as_deref()
                    .unwrap_or(Path::new("?"))
                    .display(),
                walk.identity_bytes,
                systems::WALK_PREFIX
            ));
        }
        let Some(mut request) = target_request(target, &validator, args.close) else {
            result
                .notes
                .push(format!("{target}: skipped, the server sent no validator"));
            continue;
        };
        if *target == WALK_TARGET {
            request.script = system.walk().map(|walk| walk.script.clone());
        }
        for &level in &args.levels {
            let mut load = load_level(
                system, &mut guest, ports, target, &request, level, args, dir,
            );
            if load.failure.as_deref() == Some(NOT_ANSWERING) && reboots < MAX_REBOOTS {
                // The server died under the previous run: say so, boot a fresh one, go on.
                reboots += 1;
                let previous = result.loads.last().map_or("boot".to_string(), |l| {
                    format!("{} c={}", l.target, l.concurrency)
                });
                result.notes.push(format!(
                    "stopped answering after the {previous} run; rebooted for {target} c={level}"
                ));
                eprintln!("bench: {}: not answering; rebooting", system.name());
                drop(guest);
                ports = Ports::free()?;
                let Some((fresh, _)) = boot(system, ports, false, &[], dir, &mut result.notes)?
                else {
                    result.loads.push(load);
                    return Ok(result);
                };
                guest = fresh;
                std::thread::sleep(Duration::from_secs(3));
                load = load_level(
                    system, &mut guest, ports, target, &request, level, args, dir,
                );
            }
            eprintln!("bench: {}: {}", system.name(), describe(&load));
            if let Some((hits, misses, percent)) = counters::cache_hit_rate(&load.guest_events) {
                eprintln!(
                    "bench: {}: {target} c={level}: card cache {hits} hits, {misses} misses \
                     ({percent:.1}% hits), {} bytes from the card",
                    system.name(),
                    load.guest_events.get("card bytes").copied().unwrap_or(0)
                );
            }
            result.loads.push(load);
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    if let System::Bramble { .. } = system {
        if let Some(line) = guest
            .send_line("status")
            .ok()
            .and_then(|()| guest.wait_line("status: cache", Duration::from_secs(10)))
        {
            result.cache_after_loads = counters::parse_cache_status(&line).unwrap_or_default();
        }
        if args.targets.iter().any(|t| t == report::COLD_TARGET.0) {
            result.cold = cold_body(&mut guest, port, &mut result.notes);
            if let Some(cold) = &result.cold {
                eprintln!(
                    "bench: {}: cold {} bytes: {:.2} MB/s over HTTP, card {} MB/s",
                    system.name(),
                    cold.bytes,
                    cold.http_megabytes_per_second().unwrap_or(0.0),
                    cold.card_megabytes_per_second
                        .map_or("-".to_string(), |v| format!("{v:.2}"))
                );
            }
        }
    }
    result.qemu_peak_rss_bytes = guest.peak_rss_bytes();
    drop(guest);

    if args.icount_duration > 0 {
        cpu_cost(system, args, &validator, dir, &mut result)?;
    }
    Ok(result)
}

/// Rounds of the `cold` target.
const COLD_ROUNDS: usize = 3;

/// The `cold` target: empties Bramble's card cache on its console, reads the 8 MiB file once
/// (checking every byte), and repeats; then takes the card's speed from the `status: cache`
/// lines before and after the rounds (bytes read from the card over the time its reads were
/// in flight, for the rounds' reads alone: a walk before them reads more than they do).
fn cold_body(guest: &mut Guest, port: u16, notes: &mut Vec<String>) -> Option<report::ColdBody> {
    let expected = systems::noise(systems::COLD_BYTES, 0x1357_9bdf);
    let before = guest
        .send_line("status")
        .ok()
        .and_then(|()| guest.wait_line("status: cache", Duration::from_secs(10)))
        .and_then(|line| counters::parse_cache_status(&line))
        .unwrap_or_default();
    let mut cold = report::ColdBody {
        path: systems::COLD_URL.into(),
        bytes: expected.len() as u64,
        ..Default::default()
    };
    for round in 0..COLD_ROUNDS {
        guest.send_line("cache clear").ok()?;
        guest.wait_line("cache: cleared", Duration::from_secs(10))?;
        let started = Instant::now();
        let response = probe::get(port, systems::COLD_URL, &[], Duration::from_secs(120));
        let seconds = started.elapsed().as_secs_f64();
        match response {
            Some(r) if r.status == 200 && r.body == expected => cold.http_seconds.push(seconds),
            Some(r) => {
                notes.push(format!(
                    "cold round {round}: status {} with {} bytes, not the file",
                    r.status,
                    r.body.len()
                ));
                return None;
            }
            None => {
                notes.push(format!("cold round {round}: no answer within 120 s"));
                return None;
            }
        }
    }
    let after = guest
        .send_line("status")
        .ok()
        .and_then(|()| guest.wait_line("status: cache", Duration::from_secs(10)))
        .and_then(|line| counters::parse_cache_status(&line))?;
    let read = |map: &BTreeMap<String, u64>, name: &str| map.get(name).copied().unwrap_or(0);
    cold.card_bytes = Some(read(&after, "card bytes").saturating_sub(read(&before, "card bytes")));
    cold.card_megabytes_per_second = counters::card_speed_between(&before, &after);
    Some(cold)
}

/// The target that walks the files of `--walk-site`.
const WALK_TARGET: &str = "walk";

/// What a browser asks a site for: its pages compressed where the server has them.
const BROWSER_ACCEPT_ENCODING: &str = "gzip, deflate, br";

/// A request to load: path, extra headers, whether it goes over HTTPS, and the wrk script that
/// picks each request's path instead (the walk target).
struct TargetRequest {
    path: &'static str,
    headers: Vec<(String, String)>,
    tls: bool,
    script: Option<PathBuf>,
}

impl TargetRequest {
    /// The URL at `host` (plain HTTP) or `tls_host` (HTTPS), each `address[:port]`.
    fn url(&self, host: &str, tls_host: &str) -> String {
        if self.tls {
            format!("https://{tls_host}{}", self.path)
        } else {
            format!("http://{host}{}", self.path)
        }
    }
}

fn target_request(
    target: &str,
    validator: &Option<(String, String)>,
    close: bool,
) -> Option<TargetRequest> {
    let (path, mut headers) = match target {
        "page" | "tls-page" | "tls-full" => ("/", Vec::new()),
        "100k" => (systems::FILE_100K_URL, Vec::new()),
        "tls-resumed" => ("/", vec![("Connection".to_string(), "close".to_string())]),
        "search1" => (systems::search_one_word(), Vec::new()),
        "search3" => (systems::search_three_words(), Vec::new()),
        WALK_TARGET => (
            systems::WALK_PREFIX,
            vec![(
                "Accept-Encoding".to_string(),
                BROWSER_ACCEPT_ENCODING.to_string(),
            )],
        ),
        _ => ("/", vec![validator.clone()?]),
    };
    if close && target != "tls-resumed" {
        headers.push(("Connection".to_string(), "close".to_string()));
    }
    Some(TargetRequest {
        path,
        headers,
        tls: report::is_tls_target(target),
        script: None,
    })
}

/// One wrk run of `request` at `level` clients against a booted guest, with the guest's
/// counters and QEMU's CPU time around it; a failed run says why in `failure`.
// Eight borrowed parts of one run that its two callers hold anyway; a struct holding them
// would exist only for this call.
#[allow(clippy::too_many_arguments)]
fn load_level(
    system: &System,
    guest: &mut Guest,
    ports: Ports,
    target: &str,
    request: &TargetRequest,
    level: u32,
    args: &BenchArgs,
    dir: &Path,
) -> LoadReport {
    let mut load = LoadReport {
        target: target.into(),
        concurrency: level,
        ..Default::default()
    };
    if let Err(error) = guest.check_alive() {
        load.failure = Some(error.to_string());
        return load;
    }
    // Give a server that is still draining the previous level a moment to answer again.
    let port = ports.http;
    let alive = (0..3).any(|_| {
        probe::get(port, "/", &[], Duration::from_secs(10)).is_some_and(|r| r.status == 200)
    });
    if !alive {
        load.failure = Some(NOT_ANSWERING.into());
        return load;
    }
    if target == WALK_TARGET {
        // Each level starts from an empty cache (and no idle warm-up), so that its hit rate
        // is the site's, not what the previous level or the idle time left behind.
        let cleared = guest.send_line("cache clear").is_ok()
            && guest
                .wait_line("cache: cleared", Duration::from_secs(10))
                .is_some();
        if !cleared {
            load.failure = Some("the card cache could not be emptied (cache clear)".into());
            return load;
        }
    }
    let url = request.url(
        &format!("127.0.0.1:{port}"),
        &format!("127.0.0.1:{}", ports.https),
    );
    let run = load::LoadRun {
        url: &url,
        headers: &request.headers,
        concurrency: level,
        duration: Duration::from_secs(args.duration),
        timeout: Duration::from_secs(args.timeout),
        namespace: None,
        script: request.script.as_deref(),
    };
    let counters_before = system.counters(guest, port);
    let cpu_before = guest.cpu_time().ok();
    let started = Instant::now();
    let outcome = load::run_target(
        target,
        &run,
        &dir.join(format!("wrk-{target}-c{level}.txt")),
    );
    let wall = started.elapsed().as_secs_f64();
    let counters_after = system.counters(guest, port);
    if let (Some(before), Some(after)) = (&counters_before, &counters_after) {
        load.guest_busy_percent = busy_percent(before, after);
        load.guest_events = after.event_deltas(before);
    }
    if let (Some(before), Ok(after)) = (cpu_before, guest.cpu_time()) {
        load.qemu_cpu_percent = Some(100.0 * (after - before).as_secs_f64() / wall);
    }
    match outcome {
        Ok(figures) => load.figures = Some(figures),
        Err(error) => load.failure = Some(format!("{error:#}")),
    }
    load
}

/// The guest's busy share between two counter snapshots, in percent.
fn busy_percent(before: &counters::GuestCounters, after: &counters::GuestCounters) -> Option<f64> {
    let busy = after.busy_us?.checked_sub(before.busy_us?)?;
    let up = after.up_us?.checked_sub(before.up_us?)?;
    (up > 0).then(|| 100.0 * busy as f64 / up as f64)
}

fn describe(load: &LoadReport) -> String {
    match (&load.figures, &load.failure) {
        (Some(f), _) => format!(
            "{} c={}: {:.1} req/s, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, {} errors, QEMU {:.0}% \
             host CPU, guest busy {}%",
            load.target,
            load.concurrency,
            f.requests_per_second,
            f.latency_ms.p50,
            f.latency_ms.p99,
            f.latency_ms.max,
            f.errors(),
            load.qemu_cpu_percent.unwrap_or(0.0),
            load.guest_busy_percent
                .map_or("?".into(), |b| format!("{b:.0}"))
        ),
        (None, failure) => format!(
            "{} c={}: FAILED: {}",
            load.target,
            load.concurrency,
            failure.as_deref().unwrap_or("?")
        ),
    }
}

/// Boots with `-icount shift=0` and counts guest busy time over a 10-client run per target.
fn cpu_cost(
    system: &System,
    args: &BenchArgs,
    validator: &Option<(String, String)>,
    dir: &Path,
    result: &mut SystemReport,
) -> anyhow::Result<()> {
    let ports = Ports::free()?;
    let port = ports.http;
    let profiler = match (args.profile, system.elf()) {
        (false, _) => None,
        (true, None) => {
            result.notes.push(format!(
                "profile: skipped, {} has no kernel symbols here",
                system.name()
            ));
            None
        }
        (true, Some(elf)) => {
            let symbols = std::fs::read(elf)
                .with_context(|| format!("reading {}", elf.display()))
                .and_then(|bytes| profile::Symbols::from_elf(&bytes))?;
            Some((
                profile::Profiler::new(&bramble::workspace_root(), dir)?,
                symbols,
            ))
        }
    };
    let extra = profiler
        .as_ref()
        .map_or_else(Vec::new, |(profiler, _)| profiler.qemu_args());
    let Some((mut guest, _)) = boot(system, ports, true, &extra, dir, &mut result.notes)? else {
        return Ok(());
    };
    let first = system.counters(&mut guest, port);
    if first.and_then(|c| c.busy_us).is_none() {
        result.notes.push(format!(
            "instructions per request: pending ({} reports no busy-time counter yet)",
            system.name()
        ));
        return Ok(());
    }
    for (target, _) in TARGETS
        .iter()
        .filter(|(t, _)| args.targets.iter().any(|a| a == t))
    {
        if report::is_tls_target(target) && !system.serves_https()
            || target.starts_with("search") && !system.searches()
            || *target == WALK_TARGET && system.walk().is_none()
        {
            continue;
        }
        let Some(mut request) = target_request(target, validator, args.close) else {
            continue;
        };
        if *target == WALK_TARGET {
            request.script = system.walk().map(|walk| walk.script.clone());
        }
        let before = system.counters(&mut guest, port).and_then(|c| c.busy_us);
        let window_start = profiler.as_ref().and_then(|(profiler, _)| {
            profiler
                .snapshot(&format!("{target}-before"))
                .inspect_err(|error| result.notes.push(format!("profile {target}: {error:#}")))
                .ok()
        });
        let url = request.url(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{}", ports.https),
        );
        let run = load::LoadRun {
            url: &url,
            headers: &request.headers,
            concurrency: 10,
            duration: Duration::from_secs(args.icount_duration),
            timeout: Duration::from_secs(args.timeout),
            namespace: None,
            script: request.script.as_deref(),
        };
        let outcome = load::run_target(target, &run, &dir.join(format!("wrk-icount-{target}.txt")));
        if let (Some((profiler, symbols)), Some(start), Ok(figures)) =
            (&profiler, &window_start, &outcome)
        {
            let good = figures.responses.saturating_sub(figures.bad_status);
            let window = profiler
                .snapshot(&format!("{target}-after"))
                .and_then(|end| profile::difference(start, &end));
            if let Err(error) = &window {
                result.notes.push(format!("profile {target}: {error:#}"));
            }
            if let Some(found) = window
                .ok()
                .and_then(|window| profile::attribute(target, symbols, &window, good))
            {
                eprintln!(
                    "bench: {}: {target}: profile: {:.0} instructions per request; top: {}",
                    system.name(),
                    found.instructions_per_request,
                    found
                        .top
                        .iter()
                        .take(5)
                        .map(|f| format!("{} {:.0}", f.function, f.instructions_per_request))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                result.profiles.push(found);
            }
        }
        let after = system.counters(&mut guest, port).and_then(|c| c.busy_us);
        match (before, after, outcome) {
            (Some(before), Some(after), Ok(figures)) => {
                let good = figures.responses.saturating_sub(figures.bad_status);
                if let Some(cost) = CpuCost::new(target, after.saturating_sub(before), good) {
                    eprintln!(
                        "bench: {}: {target}: {:.0} instructions per request ({good} requests)",
                        system.name(),
                        cost.instructions_per_request
                    );
                    result.cpu_cost.push(cost);
                }
            }
            (_, _, Err(error)) => result
                .notes
                .push(format!("instruction count {target}: {error:#}")),
            _ => result
                .notes
                .push(format!("instruction count {target}: counters unreadable")),
        }
    }
    Ok(())
}

/// Boots `system` until `/` answers 200, in up to [`BOOT_TRIES`] tries (a boot that hangs is
/// logged in the notes; every boot's serial log is kept as `serial[-icount]-N.log`). Returns the
/// guest and the wall time from QEMU's start to the first 200.
fn boot(
    system: &System,
    ports: Ports,
    count_instructions: bool,
    extra_args: &[OsString],
    dir: &Path,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<(Guest, Duration)>> {
    let timeout = if count_instructions {
        ICOUNT_BOOT_TIMEOUT
    } else {
        BOOT_TIMEOUT
    };
    let stem = if count_instructions {
        "serial-icount"
    } else {
        "serial"
    };
    for attempt in 1..=BOOT_TRIES {
        eprintln!(
            "bench: {}: booting{} (port {}, https {}, try {attempt})",
            system.name(),
            if count_instructions {
                " with -icount shift=0"
            } else {
                ""
            },
            ports.http,
            ports.https,
        );
        // serial-1.log, serial-2.log, ...: one per boot, never overwritten.
        let log = (1..)
            .map(|n| dir.join(format!("{stem}-{n}.log")))
            .find(|path| !path.exists())
            .expect("an unused log name");
        let mut args = system.qemu_args(ports, count_instructions, systems::Link::UserForward);
        args.extend_from_slice(extra_args);
        let mut guest = Guest::start(&args, &log)?;
        if let Some(boot) = wait_for_first_200(&mut guest, ports.http, timeout) {
            eprintln!(
                "bench: {}: first 200 after {:.2} s",
                system.name(),
                boot.as_secs_f64()
            );
            return Ok(Some((guest, boot)));
        }
        notes.push(format!(
            "{}boot try {attempt}: no HTTP 200 within {} s; see {}",
            if count_instructions { "-icount " } else { "" },
            timeout.as_secs(),
            log.file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned())
        ));
    }
    Ok(None)
}

/// Polls `/` until it answers 200; the wall time since QEMU started.
fn wait_for_first_200(guest: &mut Guest, port: u16, timeout: Duration) -> Option<Duration> {
    while guest.started.elapsed() < timeout {
        guest.check_alive().ok()?;
        // slirp accepts at once even before the guest listens, so keep each poll short.
        if probe::get(port, "/", &[], Duration::from_millis(500)).is_some_and(|r| r.status == 200) {
            return Some(guest.started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Checks that both files come back byte for byte; returns the validator header for the 304
/// target (If-None-Match from ETag, else If-Modified-Since from Last-Modified).
fn check_site(
    port: u16,
    site: &systems::Site,
    notes: &mut Vec<String>,
    checked: &mut BTreeMap<String, u64>,
) -> Option<(String, String)> {
    check_site_at(
        SocketAddr::from(([127, 0, 0, 1], port)),
        site,
        notes,
        checked,
    )
}

/// [`check_site`] for a server at `address`. Each URL whose body equals the site's file byte
/// for byte is recorded in `checked` with its length.
fn check_site_at(
    address: SocketAddr,
    site: &systems::Site,
    notes: &mut Vec<String>,
    checked: &mut BTreeMap<String, u64>,
) -> Option<(String, String)> {
    let timeout = Duration::from_secs(20);
    let page = probe::get_at(address, "/", &[], timeout);
    match &page {
        Some(r) if r.status == 200 && r.body == site.page => {
            checked.insert("/".into(), r.body.len() as u64);
        }
        Some(r) => notes.push(format!(
            "/ answered {} with {} bytes, not the {}-byte page",
            r.status,
            r.body.len(),
            site.page.len()
        )),
        None => notes.push("/ did not answer the body check".into()),
    }
    match probe::get_at(address, systems::FILE_100K_URL, &[], timeout) {
        Some(r) if r.status == 200 && r.body == site.file_100k => {
            checked.insert(systems::FILE_100K_URL.into(), r.body.len() as u64);
        }
        Some(r) => notes.push(format!(
            "{} answered {} with {} bytes",
            systems::FILE_100K_URL,
            r.status,
            r.body.len()
        )),
        None => notes.push(format!("{} did not answer", systems::FILE_100K_URL)),
    }
    let page = page?;
    let header = if let Some(etag) = page.header("etag") {
        ("If-None-Match".to_string(), etag.to_string())
    } else {
        (
            "If-Modified-Since".to_string(),
            page.header("last-modified")?.to_string(),
        )
    };
    match probe::get_at(address, "/", &[(&header.0, &header.1)], timeout) {
        Some(r) if r.status == 304 => Some(header),
        Some(r) => {
            notes.push(format!(
                "{}: {} answered {}, not 304",
                header.0, header.1, r.status
            ));
            None
        }
        None => None,
    }
}

/// The host ports QEMU forwards to one boot's guest: 80 and 443.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ports {
    /// Forwarded to the guest's port 80.
    pub http: u16,
    /// Forwarded to the guest's port 443 (systems without HTTPS leave it unused).
    pub https: u16,
}

impl Ports {
    fn free() -> anyhow::Result<Ports> {
        let http = free_port()?;
        let mut https = free_port()?;
        while https == http {
            https = free_port()?;
        }
        Ok(Ports { http, https })
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs `f` on a thread that has entered the network namespace `name` (/run/netns/NAME), so
/// that its sockets, and those of the threads it starts, live there.
pub fn in_namespace<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
    bramble_testkit::netns::inside(name, f).map_err(|problem| anyhow::anyhow!(problem))
}

/// wrk (and the judging client) keep one descriptor per connection: lift the soft limit to
/// the hard one.
pub fn raise_open_file_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

fn wrk_version() -> anyhow::Result<String> {
    let output = std::process::Command::new("wrk")
        .arg("-v")
        .output()
        .context("wrk is missing: install it with `apt-get install wrk`")?;
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    let first = text.lines().next().unwrap_or("wrk").to_string();
    Ok(first
        .split(" Copyright")
        .next()
        .unwrap_or("wrk")
        .trim()
        .to_string())
}

fn qemu_version() -> String {
    std::process::Command::new(bramble_qemu::QEMU_BINARY)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|text| text.lines().next().map(str::to_string))
        .unwrap_or_default()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn git_commit(root: &Path) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=10", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}

/// A benchmark run's date, commit and raw-output folder.
pub(crate) struct RunDir {
    pub date: String,
    pub commit: String,
    pub path: PathBuf,
}

/// Creates `target/bench/runs/<date>-<seconds>-<commit><suffix>/` for a run's raw output.
pub(crate) fn new_run_dir(root: &Path, suffix: &str) -> anyhow::Result<RunDir> {
    let date = utc_date(SystemTime::now());
    let commit = git_commit(root);
    let seconds = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let path = root
        .join("target/bench/runs")
        .join(format!("{date}-{seconds}-{commit}{suffix}"));
    std::fs::create_dir_all(&path)?;
    Ok(RunDir { date, commit, path })
}

/// The UTC calendar date of `time` as YYYY-MM-DD (1970-01-01 for a time before it).
pub fn utc_date(time: SystemTime) -> String {
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let date = UtcDateTime::from_unix_seconds(seconds).date;
    format!("{:04}-{:02}-{:02}", date.year, date.month, date.day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        let at = |seconds: u64| utc_date(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds));
        assert_eq!(at(0), "1970-01-01");
        assert_eq!(at(951_782_400), "2000-02-29");
        assert_eq!(at(1_709_251_199), "2024-02-29");
        assert_eq!(at(1_798_675_200), "2026-12-31");
        assert_eq!(at(1_798_761_600), "2027-01-01");
    }

    #[test]
    fn targets_map_to_requests() {
        let header = ("If-None-Match".to_string(), "\"x\"".to_string());
        let validator = Some(header.clone());
        assert_eq!(target_request("page", &None, false).unwrap().path, "/");
        assert_eq!(
            target_request("page", &None, true).unwrap().headers,
            vec![("Connection".to_string(), "close".to_string())]
        );
        assert_eq!(
            target_request("100k", &None, false).unwrap().path,
            systems::FILE_100K_URL
        );
        assert!(target_request("304", &None, false).is_none());
        let tls = target_request("tls-page", &None, false).unwrap();
        assert!(tls.tls && tls.headers.is_empty());
        assert_eq!(tls.url("h:80", "h:443"), "https://h:443/");
        let handshake = target_request("tls-resumed", &None, true).unwrap();
        assert!(handshake.tls);
        assert_eq!(
            handshake.headers,
            vec![("Connection".to_string(), "close".to_string())]
        );
        assert_eq!(
            target_request("page", &None, false)
                .unwrap()
                .url("h:80", "h:443"),
            "http://h:80/"
        );
        assert_eq!(
            target_request("304", &validator, false).unwrap().headers,
            vec![header]
        );
        // The walk asks as a browser does; its paths come from its script.
        let walk = target_request(WALK_TARGET, &None, false).unwrap();
        assert_eq!(walk.path, systems::WALK_PREFIX);
        assert_eq!(
            walk.headers,
            vec![(
                "Accept-Encoding".to_string(),
                BROWSER_ACCEPT_ENCODING.to_string()
            )]
        );
        assert!(
            walk.script.is_none(),
            "the system's script is set by the caller"
        );
    }

    #[test]
    fn the_walk_target_needs_a_site_folder_and_a_qemu_guest() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let args = |extra: &[&str]| {
            let mut all = vec!["bench"];
            all.extend_from_slice(extra);
            Cli::parse_from(all).bench
        };
        let error = check_args(&args(&["--targets", "walk"])).unwrap_err();
        assert!(error.to_string().contains("--walk-site"), "{error}");
        let site = tempfile::tempdir().unwrap();
        let folder = site.path().to_str().unwrap();
        assert!(check_args(&args(&["--targets", "walk", "--walk-site", folder])).is_ok());
        let error = check_args(&args(&[
            "--targets",
            "walk",
            "--walk-site",
            folder,
            "--hosted",
        ]))
        .unwrap_err();
        assert!(error.to_string().contains("QEMU guest only"), "{error}");
        let missing = site.path().join("missing");
        let error = check_args(&args(&[
            "--targets",
            "page",
            "--walk-site",
            missing.to_str().unwrap(),
        ]))
        .unwrap_err();
        assert!(error.to_string().contains("not a folder"), "{error}");
    }
}
