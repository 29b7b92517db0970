//! `bramble-bench --tap --soak DURATION`: one Bramble guest on the TAP link under mixed load
//! for a long time (an hour is the intended length), its counters sampled every minute, to
//! show whether anything grows (heap, TLS heap, pool, cache, stack, open connections) and
//! whether the guest restarts.
//!
//! Every round is a minute: [`LOAD_WINDOW`] of load, then [`SETTLE_WINDOW`] of quiet, then the
//! guest's `status` lines on the serial console. The quiet sample is what is compared across
//! rounds: once every load has ended, what the guest still holds should not depend on how
//! long it has been running. The loads run side by side, each bounded by the window:
//!
//! - plain HTTP: 50 keep-alive clients (h2load `--h1`);
//! - HTTPS keep-alive: 20 clients over HTTP/1.1 and 20 over h2;
//! - new visitors: full handshakes, 10 new connections at a time, one request each;
//! - returning visitors: resumed handshakes (`openssl s_time -reuse`, 4 clients);
//! - hostile: 100 idle TCP connections held on each of ports 80 and 443 (never a byte), 20
//!   slowloris connections on port 80 (a header byte every 5 s), and a flood of full
//!   handshakes offering only P-256, 10 connections at a time.
//!
//! The guest is judged restarted if its uptime goes backwards, its reset count changes, a boot
//! banner appears again, or QEMU exits. The report (soak.json and soak.md in the run folder)
//! holds every sample and, per counter, the first and last quiet values, the least and most,
//! and whether it grows: the last third of the quiet samples all above the first third's
//! highest; then the curves, round by round, as a table (soak.md) and as charts (soak.png:
//! memory, TLS heap, stack peak and open connections at each quiet sample, and what each
//! round's loads got). Traffic stays inside the benchmark's namespace; every load and the whole run are
//! bounded; QEMU is stopped by its PID.

use super::guest::Guest;
use super::hosted::Namespace;
use super::https::{H2loadRun, run_h2load};
use super::load::{self, LoadRun};
use super::systems::{self, Link, System, TAP_GUEST};
use super::{BenchArgs, probe};
use anyhow::{Context, bail};
use bramble_status::{Cache, Http, Https, Stack, Up};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Load in each round.
const LOAD_WINDOW: Duration = Duration::from_secs(40);
/// Quiet after the load, before the sample: long enough for the guest's idle deadlines (a
/// keep-alive connection's idle close, a half-open connection's 10 s) to have run.
const SETTLE_WINDOW: Duration = Duration::from_secs(17);
/// One round: load, quiet, sample.
const ROUND: Duration = Duration::from_secs(60);
/// The shortest soak that gives a third of the samples three rounds.
pub const MIN_SOAK: Duration = Duration::from_secs(9 * 60);
/// How long a boot may take to answer over the TAP link.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// Reads `--soak`'s duration: seconds, or a number with `s`, `m` or `h`.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1),
        Some((at, 'm')) => (&text[..at], 60),
        Some((at, 'h')) => (&text[..at], 3600),
        _ => (text, 1),
    };
    let seconds = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{text:?}: give seconds, or a number with s, m or h (1h)"))?;
    if seconds < MIN_SOAK.as_secs() || seconds > 24 * 3600 {
        return Err(format!(
            "{text:?}: a soak runs {} minutes to 24 hours",
            MIN_SOAK.as_secs() / 60
        ));
    }
    Ok(seconds)
}

/// One reading of the guest's counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the soak's first load.
    pub at_seconds: u64,
    /// Round number (0: before any load).
    pub round: u32,
    /// Guest uptime, microseconds.
    pub up_us: Option<u64>,
    /// Resets counted by the guest since power-on.
    pub resets: Option<u32>,
    /// Every counter read, by name.
    pub values: BTreeMap<String, u64>,
}

/// What each load of one round got.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundLoads {
    /// Round number.
    pub round: u32,
    /// Per load: answers with status 2xx, and requests that failed, errored or timed out.
    pub loads: BTreeMap<String, (u64, u64)>,
    /// What went wrong starting a load.
    pub notes: Vec<String>,
}

/// One counter across the soak's quiet samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    /// The counter.
    pub name: String,
    /// First quiet value.
    pub first: u64,
    /// Last quiet value.
    pub last: u64,
    /// Least.
    pub min: u64,
    /// Most.
    pub max: u64,
    /// The last third of the samples all above the first third's most.
    pub grows: bool,
}

/// The soak's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SoakReport {
    /// When it ran (UTC) and at which commit.
    pub date: String,
    /// Commit.
    pub commit: String,
    /// Asked length, seconds.
    pub duration_seconds: u64,
    /// The host's load average before and after (the cores are shared).
    pub load_average: (String, String),
    /// The quiet samples, round 0 first.
    pub samples: Vec<Sample>,
    /// What the loads got, per round.
    pub rounds: Vec<RoundLoads>,
    /// The counters' trends over the quiet samples.
    pub trends: Vec<Trend>,
    /// Whether the guest restarted, and why it is believed to have.
    pub restarts: Vec<String>,
    /// Anything else.
    pub notes: Vec<String>,
}

/// Runs the soak.
pub(super) fn run(args: &BenchArgs, seconds: u64) -> anyhow::Result<()> {
    let root = bramble::workspace_root();
    let work = root.join("target/bench");
    let super::RunDir {
        date,
        commit,
        path: run_dir,
    } = super::new_run_dir(&root, "-soak")?;
    super::raise_open_file_limit();
    let site = systems::prepare_site(&root, &work.join("site"))?;
    let system = System::bramble(&site, &work, None, Link::Tap)?;
    let namespace = Namespace::create_labelled("soak")?;
    super::tap::tune_namespace(&namespace)?;
    namespace.set_tap_queue(args.tap_queue)?;
    let mut report = SoakReport {
        date,
        commit,
        duration_seconds: seconds,
        load_average: (super::load_average(), String::new()),
        ..Default::default()
    };
    eprintln!(
        "bench: soak: {} s of mixed load on Bramble over a TAP link; logs in {}",
        seconds,
        run_dir.display()
    );
    let name = namespace.name.clone();
    let outcome = namespace.inside(|| soak(&system, &name, seconds, &run_dir, &mut report))?;
    report.load_average.1 = super::load_average();
    if let Err(error) = &outcome {
        report.notes.push(format!("stopped early: {error:#}"));
    }
    report.trends = trends(&report.samples);
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(run_dir.join("soak.json"), json + "\n")?;
    let text = markdown(&report);
    std::fs::write(run_dir.join("soak.md"), &text)?;
    if let Err(error) = write_curves(&report, &run_dir.join("soak.png")) {
        eprintln!("bench: soak: no soak.png: {error:#}");
    }
    print!("{text}");
    eprintln!("bench: soak: results in {}", run_dir.display());
    outcome
}

fn soak(
    system: &System,
    namespace: &str,
    seconds: u64,
    dir: &Path,
    report: &mut SoakReport,
) -> anyhow::Result<()> {
    let ports = super::Ports { http: 0, https: 0 };
    let qemu_args = system.qemu_args(ports, false, Link::Tap);
    let mut notes = Vec::new();
    let booted = super::tap::boot_with_timeout(
        "soak",
        namespace,
        &qemu_args,
        dir,
        &mut notes,
        BOOT_TIMEOUT,
    )?;
    report.notes.extend(notes);
    let Some((mut guest, _)) = booted else {
        bail!("the guest did not boot");
    };
    // The card cache warms in the background after boot; give it the time the levels do.
    std::thread::sleep(Duration::from_secs(30));
    let started = Instant::now();
    let mut previous = sample(&mut guest, 0, started)?;
    report.samples.push(previous.clone());
    let rounds = (seconds / ROUND.as_secs()).max(1) as u32;
    for round in 1..=rounds {
        let round_start = Instant::now();
        let loads = run_loads(round, dir);
        report.rounds.push(loads);
        std::thread::sleep(
            (round_start + LOAD_WINDOW + SETTLE_WINDOW).saturating_duration_since(Instant::now()),
        );
        guest.check_alive()?;
        let now = sample(&mut guest, round, started)?;
        if let Some(why) = restarted(&previous, &now) {
            report.restarts.push(format!("round {round}: {why}"));
        }
        eprintln!("bench: soak: {}", describe(&now, report.rounds.last()));
        report.samples.push(now.clone());
        previous = now;
        let _ = std::fs::write(
            dir.join("soak-partial.json"),
            serde_json::to_string_pretty(&report.samples)?,
        );
        std::thread::sleep((round_start + ROUND).saturating_duration_since(Instant::now()));
    }
    let banners = std::fs::read_to_string(dir.join("serial-1.log"))
        .map(|log| log.matches("ready: idle in WFI").count())
        .unwrap_or(0);
    if banners > 1 {
        report
            .restarts
            .push(format!("the serial log shows {banners} boot banners"));
    }
    Ok(())
}

/// Why `now` says the guest restarted since `before`, if it does.
fn restarted(before: &Sample, now: &Sample) -> Option<String> {
    match (before.up_us, now.up_us) {
        (Some(b), Some(n)) if n < b => return Some(format!("uptime went from {b} to {n} us")),
        _ => {}
    }
    match (before.resets, now.resets) {
        (Some(b), Some(n)) if n != b => Some(format!("reset count went from {b} to {n}")),
        _ => None,
    }
}

/// Asks for `status` and reads every line of its answer.
fn sample(guest: &mut Guest, round: u32, started: Instant) -> anyhow::Result<Sample> {
    guest.drain();
    guest.send_line("status")?;
    let mut sample = Sample {
        at_seconds: started.elapsed().as_secs(),
        round,
        ..Default::default()
    };
    let first = guest
        .wait_line("status: up", Duration::from_secs(15))
        .context("no `status: up` line within 15 s")?;
    let mut lines = vec![first];
    // The rest follow at once; a second of silence ends them.
    while let Some(line) = guest.wait_line("status:", Duration::from_secs(1)) {
        lines.push(line);
    }
    for line in &lines {
        read_line(line, &mut sample);
    }
    Ok(sample)
}

/// Adds the counters of one status line that a soak watches.
fn read_line(line: &str, sample: &mut Sample) {
    let mut put = |name: &str, value: u64| {
        sample.values.insert(name.into(), value);
    };
    if let Some(up) = Up::parse(line) {
        sample.up_us = Some(up.up_us);
        sample.resets = Some(up.resets);
        put("memory used KiB", up.memory_used_kib as u64);
        put("memory free KiB", up.free_kib as u64);
        put("card cache KiB", up.card_cache_kib as u64);
    } else if let Some(stack) = Stack::parse(line) {
        put("stack peak bytes", stack.peak_bytes as u64);
    } else if let Some(cache) = Cache::parse(line) {
        put("cache segments used", cache.used as u64);
        put("cache read errors", cache.read_errors);
    } else if let Some(http) = Http::parse(line) {
        put("http open connections", u64::from(http.open_connections));
        put("http requests", http.requests);
        put("http errors", http.errors);
    } else if let Some(https) = Https::parse(line) {
        put("https open", https.open as u64);
        put("https suspended now", u64::from(https.suspended_now));
        put("https full handshakes", https.full);
        put("https resumed handshakes", https.resumed);
        put("https closed for memory", https.closed_for_memory);
        // `N B in use, N B at most, of N B`.
        if let Some(in_use) = leading_number(https.heap.as_str()) {
            put("tls heap in use bytes", in_use);
        }
    }
}

/// The number a text starts with.
fn leading_number(text: &str) -> Option<u64> {
    let digits: String = text.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// Counters that only count up (so growing is what they do) are left out of the verdict.
const TOTALS: [&str; 5] = [
    "http requests",
    "http errors",
    "https full handshakes",
    "https resumed handshakes",
    "https closed for memory",
];

/// Each watched counter's trend over the quiet samples after the first load.
fn trends(samples: &[Sample]) -> Vec<Trend> {
    let quiet: Vec<&Sample> = samples.iter().filter(|s| s.round > 0).collect();
    let mut names: Vec<&String> = quiet.iter().flat_map(|s| s.values.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let values: Vec<u64> = quiet
                .iter()
                .filter_map(|s| s.values.get(name))
                .copied()
                .collect();
            let (&first, &last) = (values.first()?, values.last()?);
            let third = values.len() / 3;
            let grows = !TOTALS.contains(&name.as_str())
                && third > 0
                && name != "memory free KiB"
                && values[values.len() - third..]
                    .iter()
                    .all(|&v| v > values[..third].iter().copied().max().unwrap_or(u64::MAX));
            Some(Trend {
                name: name.clone(),
                first,
                last,
                min: values.iter().copied().min()?,
                max: values.iter().copied().max()?,
                grows,
            })
        })
        .collect()
}

fn describe(sample: &Sample, loads: Option<&RoundLoads>) -> String {
    let mut text = format!("round {} at {} s:", sample.round, sample.at_seconds);
    for (name, value) in &sample.values {
        let _ = write!(text, " {name} {value};");
    }
    if let Some(loads) = loads {
        for (name, (ok, bad)) in &loads.loads {
            let _ = write!(text, " [{name}: {ok} ok, {bad} not]");
        }
    }
    text
}

/// The guest's address for `port` on the TAP link.
fn guest(port: u16) -> SocketAddr {
    SocketAddr::from((TAP_GUEST, port))
}

/// One load's (good, not good) counts, or why it did not run.
type Outcome = Result<(u64, u64), String>;

/// One round's loads, side by side, each bounded by [`LOAD_WINDOW`].
fn run_loads(round: u32, dir: &Path) -> RoundLoads {
    let round_dir = dir.join(format!("round-{round:03}"));
    let _ = std::fs::create_dir_all(&round_dir);
    let end = Instant::now() + LOAD_WINDOW;
    let http = format!("http://{TAP_GUEST}/");
    let https = format!("https://{TAP_GUEST}/");
    let timeout = Duration::from_secs(10);
    let window = Some(LOAD_WINDOW);
    let keep_alive = |name: &'static str, url: &str, clients: u32, h1: bool| {
        let run = H2loadRun {
            url,
            clients,
            h1,
            duration: window,
            timeout,
            group: None,
            more_urls: &[],
            streams: 1,
        };
        let file = round_dir.join(format!("{name}.txt"));
        (name.to_string(), tally(run_h2load(&run, &file)))
    };
    let visitors = |name: &'static str, group: Option<&str>| {
        let (mut ok, mut bad, mut turn) = (0, 0, 0);
        let mut last_error = None;
        while Instant::now() + Duration::from_secs(12) < end {
            turn += 1;
            let run = H2loadRun {
                url: &https,
                clients: 10,
                h1: true,
                duration: None,
                timeout,
                group,
                more_urls: &[],
                streams: 1,
            };
            match tally(run_h2load(&run, &round_dir.join(format!("{name}.txt")))) {
                Ok((o, b)) => {
                    ok += o;
                    bad += b;
                }
                Err(error) => last_error = Some(error),
            }
            if turn > 1_000 {
                break;
            }
        }
        let result = match (ok + bad, last_error) {
            (0, Some(error)) => Err(error),
            _ => Ok((ok, bad)),
        };
        (name.to_string(), result)
    };
    let results: Vec<(String, Outcome)> = std::thread::scope(|scope| {
        let handles = vec![
            scope.spawn(|| keep_alive("http keep-alive", &http, 50, true)),
            scope.spawn(|| keep_alive("https h1 keep-alive", &https, 20, true)),
            scope.spawn(|| keep_alive("https h2 keep-alive", &https, 20, false)),
            scope.spawn(|| visitors("new visitors", None)),
            scope.spawn(|| visitors("p-256 flood", Some("P-256"))),
            scope.spawn(|| {
                let run = LoadRun {
                    url: &https,
                    headers: &[],
                    concurrency: 4,
                    duration: LOAD_WINDOW.saturating_sub(Duration::from_secs(5)),
                    timeout,
                    namespace: None,
                    script: None,
                };
                let file = round_dir.join("resumed.txt");
                let result = load::run_s_time_mode(&run, &file, true)
                    .map(|(figures, resumed)| (resumed, figures.responses.saturating_sub(resumed)))
                    .map_err(|error| format!("{error:#}"));
                ("resumed visitors".to_string(), result)
            }),
            scope.spawn(|| ("idle hoarders (held / refused)".to_string(), hoard(end))),
            scope.spawn(|| {
                (
                    "slowloris (bytes sent / cut by the guest)".to_string(),
                    slowloris(end),
                )
            }),
        ];
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| ("?".into(), Err("the load thread panicked".into())))
            })
            .collect()
    });
    let mut loads = RoundLoads {
        round,
        ..Default::default()
    };
    for (name, result) in results {
        match result {
            Ok(counts) => {
                loads.loads.insert(name, counts);
            }
            Err(error) => loads.notes.push(format!("{name}: {error}")),
        }
    }
    // A polite request after the load, on a fresh connection each way.
    let polite = probe::get_at(guest(80), "/", &[], timeout).is_some_and(|r| r.status == 200);
    loads.loads.insert(
        "polite after".into(),
        (u64::from(polite), u64::from(!polite)),
    );
    loads
}

/// h2load's figures as (answers 2xx, requests not answered well).
fn tally(result: anyhow::Result<super::https::H2load>) -> Result<(u64, u64), String> {
    result
        .map(|h| {
            (
                h.status_2xx,
                h.failed + h.errored + h.timeout + h.status_other,
            )
        })
        .map_err(|error| format!("{error:#}"))
}

/// Holds 100 idle TCP connections on each of ports 80 and 443 until `end`: (held, refused).
fn hoard(end: Instant) -> Result<(u64, u64), String> {
    let (mut held, mut refused) = (Vec::new(), 0);
    for port in [80, 443] {
        for _ in 0..100 {
            match TcpStream::connect_timeout(&guest(port), Duration::from_secs(3)) {
                Ok(stream) => held.push(stream),
                Err(_) => refused += 1,
            }
            if Instant::now() >= end {
                break;
            }
        }
    }
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    Ok((held.len() as u64, refused))
}

/// 20 connections on port 80 sending a request head one byte every 5 s until `end`: (bytes
/// sent, connections the guest ended).
fn slowloris(end: Instant) -> Result<(u64, u64), String> {
    let head = b"GET / HTTP/1.1\r\nHost: bramble\r\nX-Slow: ";
    let mut streams: Vec<Option<TcpStream>> = (0..20)
        .map(|_| TcpStream::connect_timeout(&guest(80), Duration::from_secs(3)).ok())
        .collect();
    let mut sent = 0;
    let mut ended = 0;
    let mut at = 0usize;
    while Instant::now() < end {
        for slot in &mut streams {
            let Some(stream) = slot else { continue };
            let byte = head.get(at).copied().unwrap_or(b'a');
            if stream.write_all(&[byte]).is_err() {
                *slot = None;
                ended += 1;
            } else {
                sent += 1;
            }
        }
        at += 1;
        std::thread::sleep(
            Duration::from_secs(5).min(end.saturating_duration_since(Instant::now())),
        );
    }
    Ok((sent, ended))
}

/// The report as markdown.
pub fn markdown(report: &SoakReport) -> String {
    let mut text = format!(
        "# Soak, {} at {}\n\n{} s asked, {} rounds of {} s load + {} s quiet; load average \
         before {} after {}.\n\n",
        report.date,
        report.commit,
        report.duration_seconds,
        report.rounds.len(),
        LOAD_WINDOW.as_secs(),
        SETTLE_WINDOW.as_secs(),
        report.load_average.0,
        report.load_average.1
    );
    let restarts = if report.restarts.is_empty() {
        "none".to_string()
    } else {
        report.restarts.join("; ")
    };
    let _ = writeln!(text, "Restarts: {restarts}.\n");
    let _ = writeln!(
        text,
        "| counter (quiet samples) | first | last | min | max | grows |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|---:|---|");
    for t in &report.trends {
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | {} | {} |",
            t.name,
            t.first,
            t.last,
            t.min,
            t.max,
            if TOTALS.contains(&t.name.as_str()) {
                "(a total)"
            } else if t.grows {
                "**yes**"
            } else {
                "no"
            }
        );
    }
    let mut totals: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for round in &report.rounds {
        for (name, (ok, bad)) in &round.loads {
            let entry = totals.entry(name).or_default();
            entry.0 += ok;
            entry.1 += bad;
        }
    }
    let _ = writeln!(text, "\n| load, all rounds | ok | not |");
    let _ = writeln!(text, "|---|---:|---:|");
    for (name, (ok, bad)) in totals {
        let _ = writeln!(text, "| {name} | {ok} | {bad} |");
    }
    for note in report
        .notes
        .iter()
        .chain(report.rounds.iter().flat_map(|r| r.notes.iter()))
        .take(20)
    {
        let _ = writeln!(text, "\n- {note}");
    }
    text.push_str(&curves_table(report));
    text
}

/// The quiet samples' counters drawn and tabled round by round.
const CURVES: [(&str, &str); 6] = [
    ("memory used KiB", "memory used (KiB)"),
    ("tls heap in use bytes", "TLS heap in use (B)"),
    ("stack peak bytes", "stack peak (B)"),
    ("http open connections", "HTTP open"),
    ("https open", "HTTPS open"),
    ("https suspended now", "HTTPS suspended"),
];

/// The loads tabled round by round (answers, and requests not answered well).
const ROUND_LOADS: [&str; 5] = [
    "http keep-alive",
    "https h1 keep-alive",
    "https h2 keep-alive",
    "new visitors",
    "p-256 flood",
];

/// The curves as a table: each round's quiet sample and what its loads got.
fn curves_table(report: &SoakReport) -> String {
    let mut text = String::from("\n## Round by round\n\n| round | minute |");
    for (_, label) in CURVES {
        let _ = write!(text, " {label} |");
    }
    for name in ROUND_LOADS {
        let _ = write!(text, " {name} (ok / not) |");
    }
    text.push_str("\n|---:|---:|");
    text.push_str(&"---:|".repeat(CURVES.len() + ROUND_LOADS.len()));
    text.push('\n');
    for sample in &report.samples {
        let _ = write!(
            text,
            "| {} | {:.1} |",
            sample.round,
            sample.at_seconds as f64 / 60.0
        );
        for (name, _) in CURVES {
            match sample.values.get(name) {
                Some(value) => {
                    let _ = write!(text, " {value} |");
                }
                None => text.push_str(" - |"),
            }
        }
        let loads = report.rounds.iter().find(|r| r.round == sample.round);
        for name in ROUND_LOADS {
            match loads.and_then(|r| r.loads.get(name)) {
                Some((ok, bad)) => {
                    let _ = write!(text, " {ok} / {bad} |");
                }
                None => text.push_str(" - |"),
            }
        }
        text.push('\n');
    }
    text
}

/// A labelled line of (minutes, value) points.
type Curve = (String, Vec<(f64, f64)>);

/// soak.png: one panel per curve (x: minutes since the first load), and one of the new
/// visitors' outcomes per round.
pub fn write_curves(report: &SoakReport, path: &Path) -> anyhow::Result<()> {
    use super::plot::{COLORS, FONT, register_font};
    use plotters::prelude::*;
    register_font()?;
    let minutes = |sample: &Sample| sample.at_seconds as f64 / 60.0;
    let series = |name: &str| -> Vec<(f64, f64)> {
        report
            .samples
            .iter()
            .filter_map(|s| Some((minutes(s), *s.values.get(name)? as f64)))
            .collect()
    };
    let per_round = |name: &str, bad: bool| -> Vec<(f64, f64)> {
        report
            .samples
            .iter()
            .filter_map(|s| {
                let loads = report.rounds.iter().find(|r| r.round == s.round)?;
                let (ok, not) = loads.loads.get(name)?;
                Some((minutes(s), (if bad { *not } else { *ok }) as f64))
            })
            .collect()
    };
    let panels: Vec<(&str, Vec<Curve>)> = vec![
        (
            "memory used (KiB)",
            vec![("memory used".into(), series("memory used KiB"))],
        ),
        (
            "TLS heap in use (B)",
            vec![("TLS heap".into(), series("tls heap in use bytes"))],
        ),
        (
            "stack peak (B)",
            vec![("stack peak".into(), series("stack peak bytes"))],
        ),
        (
            "connections open when quiet",
            vec![
                ("HTTP open".into(), series("http open connections")),
                ("HTTPS open".into(), series("https open")),
                ("HTTPS suspended".into(), series("https suspended now")),
            ],
        ),
        (
            "keep-alive answers per round",
            vec![
                ("HTTP".into(), per_round("http keep-alive", false)),
                ("HTTPS h1".into(), per_round("https h1 keep-alive", false)),
                ("HTTPS h2".into(), per_round("https h2 keep-alive", false)),
            ],
        ),
        (
            "new visitors per round",
            vec![
                ("answered".into(), per_round("new visitors", false)),
                ("not within 10 s".into(), per_round("new visitors", true)),
            ],
        ),
    ];
    let x_high = report.samples.iter().map(minutes).fold(1.0f64, f64::max) * 1.05;
    let root = BitMapBackend::new(path, (1500, 820)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let title = format!(
        "Soak {} at {}: quiet samples and loads, round by round",
        report.date, report.commit
    );
    let root = root
        .titled(&title, (FONT, 22))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (area, (caption, lines)) in root.split_evenly((2, 3)).iter().zip(&panels) {
        let y_high = lines
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.1))
            .fold(4.0f64, f64::max)
            * 1.25;
        let mut chart = ChartBuilder::on(area)
            .caption(*caption, (FONT, 16))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_high, 0.0..y_high)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .y_labels(6)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(RGBColor(235, 235, 235))
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for ((label, points), &color) in lines.iter().zip(COLORS.iter()) {
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_curves_are_tabled_and_drawn_round_by_round() {
        let sample = |round: u32, memory: u64| Sample {
            at_seconds: u64::from(round) * 60,
            round,
            values: [
                ("memory used KiB".to_string(), memory),
                ("tls heap in use bytes".to_string(), 1251),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let round = |round: u32| RoundLoads {
            round,
            loads: [("new visitors".to_string(), (90 + u64::from(round), 3))]
                .into_iter()
                .collect(),
            notes: Vec::new(),
        };
        let report = SoakReport {
            samples: vec![sample(0, 41_000), sample(1, 41_728), sample(2, 41_728)],
            rounds: vec![round(1), round(2)],
            ..Default::default()
        };
        let text = markdown(&report);
        let table = text.split("## Round by round").nth(1).unwrap();
        assert!(table.contains("| 1 | 1.0 | 41728 | 1251 | - |"), "{table}");
        assert!(table.contains("| 92 / 3 |"), "{table}");
        assert!(table.contains("| 0 | 0.0 | 41000 |"), "{table}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("soak.png");
        write_curves(&report, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1h"), Ok(3600));
        assert_eq!(parse_duration("30m"), Ok(1800));
        assert_eq!(parse_duration("600"), Ok(600));
        assert_eq!(parse_duration("900s"), Ok(900));
        assert!(parse_duration("60").is_err(), "below the least");
        assert!(parse_duration("25h").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }

    fn quiet(round: u32, heap: u64, requests: u64) -> Sample {
        Sample {
            round,
            values: [
                ("tls heap in use bytes".to_string(), heap),
                ("http requests".to_string(), requests),
            ]
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_counter_that_keeps_rising_grows_and_a_total_does_not_count() {
        let samples: Vec<Sample> = (0..10)
            .map(|r| quiet(r, 1000 + 100 * u64::from(r), 50 * u64::from(r)))
            .collect();
        let trends = trends(&samples);
        let heap = trends
            .iter()
            .find(|t| t.name == "tls heap in use bytes")
            .unwrap();
        assert!(heap.grows);
        assert_eq!((heap.first, heap.last), (1100, 1900));
        let requests = trends.iter().find(|t| t.name == "http requests").unwrap();
        assert!(!requests.grows);
    }

    #[test]
    fn a_counter_that_comes_back_does_not_grow() {
        let heaps = [0, 4000, 0, 0, 3000, 0, 0, 0, 100, 0];
        let samples: Vec<Sample> = heaps
            .iter()
            .enumerate()
            .map(|(r, &h)| quiet(r as u32 + 1, h, 0))
            .collect();
        let heap = trends(&samples)
            .into_iter()
            .find(|t| t.name == "tls heap in use bytes")
            .unwrap();
        assert!(!heap.grows);
        assert_eq!(heap.max, 4000);
    }

    #[test]
    fn a_restart_is_seen_from_the_uptime_or_the_reset_count() {
        let mut before = quiet(1, 0, 0);
        before.up_us = Some(100_000_000);
        before.resets = Some(0);
        let mut after = before.clone();
        after.up_us = Some(160_000_000);
        assert_eq!(restarted(&before, &after), None);
        after.up_us = Some(5_000_000);
        assert!(restarted(&before, &after).unwrap().contains("uptime"));
        after.up_us = Some(160_000_000);
        after.resets = Some(1);
        assert!(restarted(&before, &after).unwrap().contains("reset count"));
    }

    #[test]
    fn the_tls_heap_is_read_from_its_text() {
        assert_eq!(leading_number("1234 B in use, 9 B at most"), Some(1234));
        assert_eq!(leading_number("unknown"), None);
    }
}
