//! The benchmark's results: the data kept as JSON, the side-by-side table printed on stdout,
//! and the markdown summary kept with the plots.

use super::judge::JudgeReport;
use super::load::LoadFigures;
pub use super::profile::{FunctionCost, TargetProfile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One benchmark run of every system.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// UTC date of the run, YYYY-MM-DD.
    pub date: String,
    /// `git describe --always --dirty` of the work tree.
    pub commit: String,
    /// The machine the guests ran on.
    pub host: Host,
    /// QEMU machine and NIC.
    pub machine: String,
    /// NIC mode both guests use.
    pub nic: String,
    /// Load generator and version.
    pub load_generator: String,
    /// Seconds of load at each level.
    pub duration_seconds: u64,
    /// Every request asked for `Connection: close` (one TCP connection per request).
    #[serde(default)]
    pub connection_close: bool,
    /// The concurrency levels.
    pub levels: Vec<u32>,
    /// One entry per system, Bramble first.
    pub systems: Vec<SystemReport>,
    /// A hosted run (`bramble-bench --hosted`): the servers are Linux processes on this host,
    /// not QEMU guests, and the CPU figures are the server processes' own.
    #[serde(default)]
    pub hosted: bool,
    /// How the servers' CPU time was counted (hosted runs).
    #[serde(default)]
    pub server_cpu_method: Option<String>,
    /// A TAP run (`bramble-bench --tap`): the guests' NIC on a TAP device in the benchmark's
    /// namespace, the load from the judging client (`LoadReport::judge`).
    #[serde(default)]
    pub tap: bool,
    /// QEMU's host CPU while a guest that only sleeps in WFI idles with the same NIC
    /// attached, in percent of one core (TAP runs): the floor of QEMU's own models.
    #[serde(default)]
    pub idle_floor_qemu_cpu_percent: Option<f64>,
    /// The TAP device's transmit queue towards QEMU, in frames (`--tap-queue`, as the device
    /// reported it after it was set; TAP runs).
    #[serde(default)]
    pub tap_queue_frames: Option<u32>,
}

/// The host the run happened on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Logical CPUs.
    pub cpus: usize,
    /// /proc/loadavg before the run (others' work shares the cores).
    pub load_average_before: String,
    /// /proc/loadavg after the run.
    pub load_average_after: String,
    /// `qemu-system-arm --version`, first line.
    pub qemu: String,
}

/// What was measured for one system.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemReport {
    /// Short name: `bramble` or `linux-busybox`.
    pub name: String,
    /// What was booted.
    pub description: String,
    /// Wall time from starting QEMU to the first HTTP 200 for `/`.
    pub boot_to_first_200_seconds: Option<f64>,
    /// QEMU's host CPU use while the guest idles, in percent of one core.
    pub idle_qemu_cpu_percent: Option<f64>,
    /// Guest RAM in use after boot, as the guest counts it.
    pub guest_ram_used_bytes: Option<u64>,
    /// The guest's own busy time over the idle window, in percent of its CPU (TAP runs).
    #[serde(default)]
    pub idle_guest_busy_percent: Option<f64>,
    /// QEMU's peak resident memory on the host.
    pub qemu_peak_rss_bytes: Option<u64>,
    /// Sizes of what is booted, by file name.
    pub image_bytes: BTreeMap<String, u64>,
    /// Load runs, by target and concurrency.
    pub loads: Vec<LoadReport>,
    /// Guest CPU cost per request, counted under `-icount shift=0`.
    pub cpu_cost: Vec<CpuCost>,
    /// With `--profile`: the guest's instructions per request by kernel function, per target,
    /// counted by our TCG plugin in the `-icount shift=0` boot.
    #[serde(default)]
    pub profiles: Vec<TargetProfile>,
    /// Anything the reader must know (failures, missing counters).
    pub notes: Vec<String>,
    /// URLs whose body came back byte for byte equal to the site's file, with its length.
    #[serde(default)]
    pub checked_bytes: BTreeMap<String, u64>,
    /// The `cold` target: a large body read through the server from its card with the cache
    /// emptied first (Bramble only).
    #[serde(default)]
    pub cold: Option<ColdBody>,
    /// The card cache's counters after the load runs (Bramble's `status: cache` line).
    #[serde(default)]
    pub cache_after_loads: BTreeMap<String, u64>,
    /// The guest's own boot phase stamps, in guest microseconds since reset (Bramble's `boot
    /// phases` line once it has served its first request: `table verified`, `ready`, `first
    /// request served`, ...). Guest time, so less shaken by the host's load than the wall time
    /// to the first 200.
    #[serde(default)]
    pub boot_phases_us: BTreeMap<String, u64>,
    /// Files the walk target asks for in turn (the `--walk-site` site as packed), if walked.
    #[serde(default)]
    pub walk_files: Option<u64>,
    /// `--tap --https`: HTTPS and h2 levels, handshake rates, the large file, instructions
    /// per full handshake by group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https: Option<crate::https::HttpsReport>,
}

/// The `cold` target's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ColdBody {
    /// The file's URL.
    pub path: String,
    /// Its length.
    pub bytes: u64,
    /// Seconds each uncached GET took (start to last byte), one per round.
    pub http_seconds: Vec<f64>,
    /// The card's speed as the server measured it over every read of the rounds (bytes read
    /// from the card over the time reads were in flight), in MB/s.
    pub card_megabytes_per_second: Option<f64>,
    /// Bytes the server read from the card over the rounds.
    pub card_bytes: Option<u64>,
}

impl ColdBody {
    /// The median round's transfer rate over HTTP, in MB/s.
    pub fn http_megabytes_per_second(&self) -> Option<f64> {
        let mut seconds = self.http_seconds.clone();
        seconds.sort_by(f64::total_cmp);
        let median = *seconds.get(seconds.len() / 2)?;
        (median > 0.0).then(|| self.bytes as f64 / median / 1e6)
    }
}

impl SystemReport {
    /// The load run for `target` at `concurrency`.
    pub fn load(&self, target: &str, concurrency: u32) -> Option<&LoadReport> {
        self.loads
            .iter()
            .find(|load| load.target == target && load.concurrency == concurrency)
    }

    /// The CPU cost for `target`.
    pub fn cost(&self, target: &str) -> Option<&CpuCost> {
        self.cpu_cost.iter().find(|cost| cost.target == target)
    }

    /// The `--profile` result for `target`.
    pub fn profile(&self, target: &str) -> Option<&TargetProfile> {
        self.profiles
            .iter()
            .find(|profile| profile.target == target)
    }
}

/// One load run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// `page`, `100k` or `304`.
    pub target: String,
    /// Open connections.
    pub concurrency: u32,
    /// QEMU's host CPU during the run, percent of one core.
    pub qemu_cpu_percent: Option<f64>,
    /// The guest's own busy time during the run, percent of its (emulated) CPU: near 100 means
    /// the guest CPU is the limit, low means something outside it is (NIC path, protocol).
    pub guest_busy_percent: Option<f64>,
    /// How much the guest's network and server event counters grew over the run (hosted
    /// runs: bramble-hosted's read and write syscalls and context switches).
    pub guest_events: BTreeMap<String, u64>,
    /// The load generator's figures; `None` when the run failed.
    pub figures: Option<LoadFigures>,
    /// Why the run failed.
    pub failure: Option<String>,
    /// The server processes' CPU time over the run (hosted runs).
    #[serde(default)]
    pub server_cpu: Option<ServerCpu>,
    /// The judging client's verdict (TAP runs); `figures` then holds the same counts.
    #[serde(default)]
    pub judge: Option<JudgeReport>,
    /// Guest RAM in use halfway through the run, while the clients are connected.
    #[serde(default)]
    pub guest_ram_used_bytes: Option<u64>,
}

/// CPU time the server's processes used over one load run (hosted runs): the meaningful
/// comparison on a shared host, where throughput depends on what else runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerCpu {
    /// User + system CPU seconds of all the server's processes over the run.
    pub cpu_seconds: f64,
    /// The same as a share of one core over the run's wall time, in percent.
    pub percent_of_a_core: f64,
    /// CPU microseconds per good response; `None` without good responses.
    pub microseconds_per_request: Option<f64>,
    /// The share of that CPU time spent in the kernel (system time), in percent: for
    /// bramble-hosted mostly its TAP writes, which run the host's receive path for each frame.
    #[serde(default)]
    pub system_share_percent: Option<f64>,
}

impl ServerCpu {
    /// The figures for `cpu_seconds` used over `wall_seconds` while `requests` good
    /// responses were counted.
    pub fn new(cpu_seconds: f64, wall_seconds: f64, requests: u64) -> ServerCpu {
        ServerCpu {
            cpu_seconds,
            percent_of_a_core: if wall_seconds > 0.0 {
                100.0 * cpu_seconds / wall_seconds
            } else {
                0.0
            },
            microseconds_per_request: (requests > 0).then(|| cpu_seconds * 1e6 / requests as f64),
            system_share_percent: None,
        }
    }
}

/// Guest CPU per request, from the guest's busy-time counters under `-icount shift=0`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCost {
    /// `page`, `100k` or `304`.
    pub target: String,
    /// Good responses counted.
    pub requests: u64,
    /// Guest busy time over the run, in guest microseconds (= thousands of instructions).
    pub busy_us: u64,
    /// Instructions per request (busy ns per request at one instruction per ns).
    pub instructions_per_request: f64,
    /// The rate a real 700 MHz ARM1176 would reach if the CPU were the only limit, at one
    /// instruction per cycle (an optimistic bound: real IPC is lower, memory stalls are not
    /// in the count).
    pub cpu_bound_requests_per_second_at_700mhz: f64,
}

impl CpuCost {
    /// Computes the cost from a busy-time delta and the good responses counted.
    pub fn new(target: &str, busy_us: u64, requests: u64) -> Option<CpuCost> {
        if requests == 0 || busy_us == 0 {
            return None;
        }
        let instructions_per_request = busy_us as f64 * 1000.0 / requests as f64;
        Some(CpuCost {
            target: target.to_string(),
            requests,
            busy_us,
            instructions_per_request,
            cpu_bound_requests_per_second_at_700mhz: 700e6 / instructions_per_request,
        })
    }
}

/// The request kinds, in report order: (target name, description).
pub const TARGETS: [(&str, &str); 9] = [
    ("page", "6,271-byte index.html"),
    ("100k", "100 KiB file"),
    ("304", "revalidation of / (If-None-Match), 304"),
    (
        "tls-page",
        "index.html over HTTPS, connections kept open (one handshake per connection)",
    ),
    (
        "tls-resumed",
        "index.html over HTTPS with Connection: close: a new TCP connection and TLS handshake \
         per request, which wrk resumes with the server's session ticket",
    ),
    (
        "tls-full",
        "index.html over HTTPS, a new TCP connection and a full TLS handshake per request \
         (openssl s_time -new, at most 10 clients; no latency figures)",
    ),
    ("search1", "/search?q= one word, 1,000 pages"),
    ("search3", "/search?q= three words, 1,000 pages"),
    (
        "walk",
        "every file of --walk-site in turn, Accept-Encoding gzip, deflate, br; card cache \
         emptied first",
    ),
];

/// The TAP run's counter of frames the TAP device passed to QEMU (the guest's receive side).
pub const TAP_TO_QEMU: &str = "tap frames to QEMU";
/// The TAP run's counter of frames the TAP device dropped because QEMU had not read them.
pub const TAP_TO_QEMU_DROPPED: &str = "tap frames to QEMU dropped";

/// Whether `target` is one of the HTTPS targets.
pub fn is_tls_target(target: &str) -> bool {
    target.starts_with("tls-")
}

/// The target that is not a load run: an 8 MiB body read once per round with the server's
/// card cache emptied first (`cache clear` on Bramble's console), for the card's speed.
pub const COLD_TARGET: (&str, &str) = ("cold", "8 MiB file read from the card, cache emptied");

fn number(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

fn megabytes(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| format!("{:.2}", b as f64 / 1_048_576.0))
}

/// `a / b` as "12.3x"; `-` when either is missing or zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => format!("{:.1}x", a / b),
        _ => "-".into(),
    }
}

/// Rows of the side-by-side table: label, one cell per system, and the advantage of the first
/// system over the second (>1: the first is better) where that is meaningful.
pub fn rows(report: &Report) -> Vec<(String, Vec<String>, String)> {
    let systems = &report.systems;
    let pair = |f: &dyn Fn(&SystemReport) -> Option<f64>, higher_is_better: bool| {
        if systems.len() < 2 {
            return "-".to_string();
        }
        let (a, b) = (f(&systems[0]), f(&systems[1]));
        if higher_is_better {
            ratio(a, b)
        } else {
            ratio(b, a)
        }
    };
    let mut rows = Vec::new();
    let mut row = |label: String, cell: &dyn Fn(&SystemReport) -> String, advantage: String| {
        rows.push((label, systems.iter().map(cell).collect(), advantage));
    };
    let boot = |s: &SystemReport| s.boot_to_first_200_seconds;
    if !report.hosted {
        row(
            "boot: QEMU start -> first 200 (s)".into(),
            &|s| number(boot(s), 2),
            pair(&boot, false),
        );
        if systems.iter().any(|s| !s.boot_phases_us.is_empty()) {
            row(
                "boot, guest time: table verified / ready / first request served (ms)".into(),
                &|s| {
                    let ms = |name: &str| {
                        s.boot_phases_us
                            .get(name)
                            .map_or("-".to_string(), |us| format!("{:.0}", *us as f64 / 1000.0))
                    };
                    if s.boot_phases_us.is_empty() {
                        return "-".into();
                    }
                    format!(
                        "{} / {} / {}",
                        ms("table verified"),
                        ms("ready"),
                        ms("first request served")
                    )
                },
                "-".into(),
            );
        }
        let idle = |s: &SystemReport| s.idle_qemu_cpu_percent;
        row(
            "idle: QEMU host CPU (% of a core)".into(),
            &|s| number(idle(s), 1),
            pair(&idle, false),
        );
        if let Some(frames) = report.tap_queue_frames {
            row(
                "TAP device's queue towards QEMU (frames, --tap-queue)".into(),
                &|_| frames.to_string(),
                "-".into(),
            );
        }
        if report.tap {
            let busy = |s: &SystemReport| s.idle_guest_busy_percent;
            row(
                "idle: guest busy (% of its CPU)".into(),
                &|s| number(busy(s), 3),
                pair(&busy, false),
            );
            if let Some(floor) = report.idle_floor_qemu_cpu_percent {
                row(
                    "idle: WFI-only guest's QEMU host CPU, same NIC (floor, %)".into(),
                    &|_| number(Some(floor), 1),
                    "-".into(),
                );
                row(
                    "idle: QEMU host CPU above the floor (points)".into(),
                    &|s| number(idle(s).map(|v| v - floor), 1),
                    "-".into(),
                );
            }
        }
        let ram = |s: &SystemReport| s.guest_ram_used_bytes.map(|b| b as f64);
        row(
            "guest RAM in use (MiB)".into(),
            &|s| megabytes(s.guest_ram_used_bytes),
            pair(&ram, false),
        );
        let image = |s: &SystemReport| Some(s.image_bytes.values().sum::<u64>() as f64);
        row(
            "boot image bytes (sum)".into(),
            &|s| s.image_bytes.values().sum::<u64>().to_string(),
            pair(&image, false),
        );
        if systems.iter().any(|s| s.cold.is_some()) {
            row(
                "cold 8 MiB body over HTTP, cache emptied (MB/s, median)".into(),
                &|s| {
                    number(
                        s.cold.as_ref().and_then(|c| c.http_megabytes_per_second()),
                        2,
                    )
                },
                "-".into(),
            );
            row(
                "card read speed, as the server measured it (MB/s)".into(),
                &|s| number(s.cold.as_ref().and_then(|c| c.card_megabytes_per_second), 2),
                "-".into(),
            );
        }
        if systems.iter().any(|s| !s.cache_after_loads.is_empty()) {
            row(
                "card cache after the loads: hits / misses (hit %)".into(),
                &|s| {
                    let get = |name: &str| s.cache_after_loads.get(name).copied();
                    match (get("hits"), get("misses"), get("hit percent")) {
                        (Some(hits), Some(misses), Some(percent)) => {
                            format!("{hits} / {misses} ({percent}%)")
                        }
                        _ => "-".into(),
                    }
                },
                "-".into(),
            );
        }
    }
    // A TAP run loads one target: the others get no rows.
    let measured = |target: &str| {
        !report.tap
            || systems
                .iter()
                .any(|s| s.loads.iter().any(|l| l.target == target))
    };
    for (target, _) in TARGETS.into_iter().filter(|(t, _)| measured(t)) {
        for &level in &report.levels {
            let figures = |s: &SystemReport| s.load(target, level).and_then(|l| l.figures.clone());
            let rps = |s: &SystemReport| figures(s).map(|f| f.requests_per_second);
            row(
                format!("{target} c={level}: req/s"),
                &|s| number(rps(s), 1),
                pair(&rps, true),
            );
            let p99 = |s: &SystemReport| figures(s).map(|f| f.latency_ms.p99);
            row(
                format!("{target} c={level}: p50/p90/p99/max ms"),
                &|s| match (figures(s), s.load(target, level)) {
                    (Some(f), _) => format!(
                        "{:.0}/{:.0}/{:.0}/{:.0}",
                        f.latency_ms.p50, f.latency_ms.p90, f.latency_ms.p99, f.latency_ms.max
                    ),
                    (None, Some(_)) => "failed".into(),
                    (None, None) => "-".into(),
                },
                pair(&p99, false),
            );
            row(
                format!("{target} c={level}: errors / responses"),
                &|s| figures(s).map_or("-".into(), |f| format!("{} / {}", f.errors(), f.responses)),
                String::new(),
            );
            if target == "walk" {
                row(
                    format!(
                        "{target} c={level}: card cache hits / misses (hit %), MiB read, \
                         passes over the site"
                    ),
                    &|s| {
                        let Some(load) = s.load(target, level) else {
                            return "-".into();
                        };
                        let passes = match (&load.figures, s.walk_files) {
                            (Some(figures), Some(files)) if files > 0 => {
                                format!(", {:.2} passes", figures.responses as f64 / files as f64)
                            }
                            _ => String::new(),
                        };
                        match super::counters::cache_hit_rate(&load.guest_events) {
                            Some((hits, misses, percent)) => format!(
                                "{hits} / {misses} ({percent:.1}%), {}{passes}",
                                megabytes(load.guest_events.get("card bytes").copied())
                            ),
                            None => "-".into(),
                        }
                    },
                    String::new(),
                );
            }
            if report.tap {
                let judged = |s: &SystemReport| s.load(target, level).and_then(|l| l.judge.clone());
                row(
                    format!("{target} c={level}: failures connect/read/timeout/non-2xx"),
                    &|s| {
                        judged(s).map_or("-".into(), |j| {
                            let f = &j.failures;
                            format!("{}/{}/{}/{}", f.connect, f.read, f.timeout, f.status)
                        })
                    },
                    String::new(),
                );
                row(
                    format!("{target} c={level}: clients never served / requests over timeout"),
                    &|s| {
                        judged(s).map_or("-".into(), |j| {
                            format!("{} / {}", j.clients_never_served, j.requests_over_timeout)
                        })
                    },
                    String::new(),
                );
                let first = |s: &SystemReport| judged(s).map(|j| j.first_answer_ms.p99);
                row(
                    format!("{target} c={level}: first answer p50/p90/p99/max ms"),
                    &|s| {
                        judged(s).map_or("-".into(), |j| {
                            let p = &j.first_answer_ms;
                            format!("{:.0}/{:.0}/{:.0}/{:.0}", p.p50, p.p90, p.p99, p.max)
                        })
                    },
                    pair(&first, false),
                );
                row(
                    format!("{target} c={level}: answers per client min/p1/p50/p99/max"),
                    &|s| {
                        judged(s).map_or("-".into(), |j| {
                            let a = &j.answers_per_client;
                            format!("{}/{}/{}/{}/{}", a.min, a.p1, a.p50, a.p99, a.max)
                        })
                    },
                    String::new(),
                );
                row(
                    format!("{target} c={level}: TAP frames to QEMU / dropped there"),
                    &|s| {
                        let events = s.load(target, level).map(|l| &l.guest_events);
                        let get = |name: &str| events.and_then(|e| e.get(name).copied());
                        match (get(TAP_TO_QEMU), get(TAP_TO_QEMU_DROPPED)) {
                            (Some(sent), Some(dropped)) => format!("{sent} / {dropped}"),
                            _ => "-".into(),
                        }
                    },
                    String::new(),
                );
                row(
                    format!("{target} c={level}: first answer within 2 s (% of clients)"),
                    &|s| number(judged(s).map(|j| j.first_answer_within_2s_percent), 1),
                    String::new(),
                );
                let ram = |s: &SystemReport| {
                    s.load(target, level)
                        .and_then(|l| l.guest_ram_used_bytes)
                        .map(|b| b as f64)
                };
                row(
                    format!("{target} c={level}: guest RAM in use mid-run (MiB)"),
                    &|s| megabytes(s.load(target, level).and_then(|l| l.guest_ram_used_bytes)),
                    pair(&ram, false),
                );
            }
            if report.hosted {
                let server =
                    |s: &SystemReport| s.load(target, level).and_then(|l| l.server_cpu.clone());
                let per_request =
                    |s: &SystemReport| server(s).and_then(|c| c.microseconds_per_request);
                row(
                    format!("{target} c={level}: server CPU us/request"),
                    &|s| number(per_request(s), 1),
                    pair(&per_request, false),
                );
                let share = |s: &SystemReport| server(s).map(|c| c.percent_of_a_core);
                let kernel = |s: &SystemReport| server(s).and_then(|c| c.system_share_percent);
                row(
                    format!("{target} c={level}: server CPU % of a core / % in kernel"),
                    &|s| format!("{} / {}", number(share(s), 0), number(kernel(s), 0)),
                    String::new(),
                );
                continue;
            }
            let cpu = |s: &SystemReport| s.load(target, level).and_then(|l| l.qemu_cpu_percent);
            let busy = |s: &SystemReport| s.load(target, level).and_then(|l| l.guest_busy_percent);
            row(
                format!("{target} c={level}: QEMU host / guest busy CPU %"),
                &|s| format!("{} / {}", number(cpu(s), 0), number(busy(s), 0)),
                String::new(),
            );
        }
    }
    if report.hosted || report.tap {
        rows.extend(crate::https::rows(report));
        return rows;
    }
    for (target, _) in TARGETS {
        let instructions = |s: &SystemReport| s.cost(target).map(|c| c.instructions_per_request);
        row(
            format!("{target}: guest instructions/request"),
            &|s| match s.cost(target) {
                Some(cost) => format!("{:.0}", cost.instructions_per_request),
                None => "pending".into(),
            },
            pair(&instructions, false),
        );
        let bound = |s: &SystemReport| {
            s.cost(target)
                .map(|c| c.cpu_bound_requests_per_second_at_700mhz)
        };
        row(
            format!("{target}: CPU-bound req/s at 700 MHz, IPC 1"),
            &|s| number(bound(s), 0),
            pair(&bound, true),
        );
        if systems.iter().any(|s| s.profile(target).is_some()) {
            let profiled = |s: &SystemReport| s.profile(target).map(|p| p.instructions_per_request);
            row(
                format!("{target}: all guest instructions/request (profile)"),
                &|s| number(profiled(s), 0),
                pair(&profiled, false),
            );
        }
    }
    rows
}

/// The `--profile` tables: per system and target, the top functions by instructions per
/// request, as markdown.
pub fn profile_tables(report: &Report) -> String {
    let mut out = String::new();
    for system in &report.systems {
        for profile in &system.profiles {
            let _ = writeln!(
                out,
                "### {}: {} profile, {:.0} instructions/request ({} requests, {} instructions)\n",
                system.name,
                profile.target,
                profile.instructions_per_request,
                profile.requests,
                profile.instructions
            );
            let _ = writeln!(out, "| function | instructions/request | share |");
            let _ = writeln!(out, "|---|---:|---:|");
            for entry in &profile.top {
                let _ = writeln!(
                    out,
                    "| `{}` | {:.0} | {:.1}% |",
                    entry.function.replace('|', "\\|"),
                    entry.instructions_per_request,
                    entry.share_percent
                );
            }
            let listed: f64 = profile.top.iter().map(|e| e.share_percent).sum();
            let _ = writeln!(
                out,
                "| (the rest) | {:.0} | {:.1}% |\n",
                profile.instructions_per_request * (100.0 - listed).max(0.0) / 100.0,
                (100.0 - listed).max(0.0)
            );
        }
    }
    out
}

/// How connections were used, for headings.
fn connections(report: &Report) -> &'static str {
    if report.connection_close {
        ", Connection: close (a TCP connection per request)"
    } else {
        ", persistent connections where the server keeps them"
    }
}

/// The table printed on stdout (plain text, fixed-width columns).
pub fn table(report: &Report) -> String {
    let rows = rows(report);
    let label_width = rows
        .iter()
        .map(|(label, _, _)| label.len())
        .max()
        .unwrap_or(10)
        + 2;
    let cell_width = rows
        .iter()
        .flat_map(|(_, cells, _)| cells.iter().map(String::len))
        .chain(report.systems.iter().map(|s| s.name.len()))
        .max()
        .unwrap_or(8)
        + 2;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} on {} ({}), {}, {} s per level{}; {} {}",
        report
            .systems
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()
            .join(" vs "),
        report.machine,
        report.nic,
        report.load_generator,
        report.duration_seconds,
        connections(report),
        report.date,
        report.commit
    );
    let _ = write!(out, "{:label_width$}", "metric");
    for system in &report.systems {
        let _ = write!(out, "{:>cell_width$}", system.name);
    }
    let _ = writeln!(out, "{:>12}", "advantage");
    for (label, cells, advantage) in &rows {
        let _ = write!(out, "{label:label_width$}");
        for cell in cells {
            let _ = write!(out, "{cell:>cell_width$}");
        }
        let _ = writeln!(out, "{advantage:>12}");
    }
    let _ = writeln!(
        out,
        "advantage: how many times better the first system is than the second (>1: better)."
    );
    out.push_str(&profile_tables(report));
    out
}

/// The markdown summary kept next to the JSON and the plots.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Benchmark {} ({})\n", report.date, report.commit);
    if report.hosted {
        let _ = writeln!(
            out,
            "Hosted run: {}, {}, all serving the same files, measured with {} for {} s per \
             level{}; host: {} CPUs, load average before/after `{}` / `{}`. Server CPU: {}. \
             A regression guard for the portable code, not a claim about the Pi.\n",
            report.machine,
            report.nic,
            report.load_generator,
            report.duration_seconds,
            connections(report),
            report.host.cpus,
            report.host.load_average_before,
            report.host.load_average_after,
            report
                .server_cpu_method
                .as_deref()
                .unwrap_or("not measured")
        );
    } else {
        let _ = writeln!(
            out,
            "QEMU `{}`, NIC {}, both systems serving the same files, measured with {} \
             for {} s per level{}; host: {} CPUs, load average before/after `{}` / `{}`; {}.\n",
            report.machine,
            report.nic,
            report.load_generator,
            report.duration_seconds,
            connections(report),
            report.host.cpus,
            report.host.load_average_before,
            report.host.load_average_after,
            report.host.qemu
        );
    }
    let _ = writeln!(
        out,
        "Targets: {}.\n",
        TARGETS
            .iter()
            .map(|(name, what)| format!("`{name}` = {what}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = write!(out, "| metric |");
    for system in &report.systems {
        let _ = write!(out, " {} |", system.name);
    }
    let _ = writeln!(out, " advantage |");
    let _ = writeln!(out, "|---|{}---|", "---:|".repeat(report.systems.len()));
    for (label, cells, advantage) in rows(report) {
        let _ = writeln!(out, "| {label} | {} | {advantage} |", cells.join(" | "));
    }
    let first = report.systems.first().map_or("", |s| s.name.as_str());
    let second = report.systems.get(1).map_or("", |s| s.name.as_str());
    if report.hosted {
        let _ = writeln!(
            out,
            "\n\"advantage\" is how many times better {first} is than {second} (>1: better). \
             Server CPU is the user + system time of all the server's processes over the run, \
             divided by the good responses: the figure to compare on a shared host, where \
             requests/s also depend on wrk and everything else competing for the cores.\n"
        );
    } else {
        let _ = writeln!(
            out,
            "\n\"advantage\" is how many times better {first} is than {second} (>1: better). \
             Instructions per request come from the guests' busy time under `-icount shift=0` \
             (one instruction per guest nanosecond); the 700 MHz figure assumes one \
             instruction per cycle and no I/O limit, an optimistic bound for a real B+.\n"
        );
    }
    for system in &report.systems {
        let _ = writeln!(out, "## {}\n\n{}\n", system.name, system.description);
        for (file, bytes) in &system.image_bytes {
            let _ = writeln!(out, "- `{file}`: {bytes} bytes");
        }
        for (url, bytes) in &system.checked_bytes {
            let _ = writeln!(out, "- `{url}`: {bytes} bytes, equal to the site's file");
        }
        for note in &system.notes {
            let _ = writeln!(out, "- {note}");
        }
        for load in system
            .loads
            .iter()
            .filter(|load| !load.guest_events.is_empty())
        {
            let events: Vec<String> = load
                .guest_events
                .iter()
                .map(|(name, count)| format!("{name} {count}"))
                .collect();
            let _ = writeln!(
                out,
                "- {} c={}: {} counters grew by: {}",
                load.target,
                load.concurrency,
                if report.hosted { "process" } else { "guest" },
                events.join(", ")
            );
        }
        let _ = writeln!(out);
    }
    let profiles = profile_tables(report);
    if !profiles.is_empty() {
        let _ = writeln!(
            out,
            "## Profile\n\nThe guest's instructions over each target's `-icount` run (every \
             instruction: interrupts, timers and polling included), counted per translation \
             block by the benchmark's TCG plugin (bench/plugin/tbcount.c) and attributed to the \
             kernel function each block starts in, per good response.\n\n{profiles}"
        );
    }
    let _ = writeln!(
        out,
        "![throughput](throughput.png)\n\n![latency](latency.png)"
    );
    if report.hosted {
        let _ = writeln!(out, "\n![server CPU per request](cpu.png)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Latency;

    fn system(name: &str, rps: f64, boot: f64) -> SystemReport {
        SystemReport {
            name: name.into(),
            boot_to_first_200_seconds: Some(boot),
            loads: vec![LoadReport {
                target: "page".into(),
                concurrency: 10,
                qemu_cpu_percent: Some(99.0),
                guest_busy_percent: Some(50.0),
                guest_events: BTreeMap::new(),
                figures: Some(LoadFigures {
                    responses: 100,
                    requests_per_second: rps,
                    latency_ms: Latency {
                        p50: 1.0,
                        p90: 2.0,
                        p99: 3.0,
                        max: 4.0,
                    },
                    elapsed_seconds: 1.0,
                    ..Default::default()
                }),
                failure: None,
                server_cpu: None,
                judge: None,
                guest_ram_used_bytes: None,
            }],
            cpu_cost: vec![CpuCost::new("page", 2000, 100).unwrap()],
            ..Default::default()
        }
    }

    fn report() -> Report {
        Report {
            levels: vec![10],
            systems: vec![system("bramble", 1000.0, 1.0), system("linux", 100.0, 6.0)],
            ..Default::default()
        }
    }

    #[test]
    fn advantage_is_the_ratio_in_the_better_direction() {
        let rows = rows(&report());
        let find = |label: &str| rows.iter().find(|row| row.0 == label).unwrap().clone();
        assert_eq!(find("page c=10: req/s").1, vec!["1000.0", "100.0"]);
        assert_eq!(find("page c=10: req/s").2, "10.0x");
        assert_eq!(find("boot: QEMU start -> first 200 (s)").2, "6.0x");
        assert_eq!(find("page c=10: p50/p90/p99/max ms").1[0], "1/2/3/4");
        assert_eq!(find("100k: guest instructions/request").1[0], "pending");
    }

    #[test]
    fn profiles_appear_in_the_table_and_the_markdown() {
        let mut bramble = system("bramble", 1000.0, 1.0);
        bramble.profiles.push(TargetProfile {
            target: "page".into(),
            requests: 10,
            instructions: 800_000,
            instructions_per_request: 80_000.0,
            top: vec![FunctionCost {
                function: "compiler_builtins::mem::memcpy".into(),
                instructions_per_request: 20_000.0,
                share_percent: 25.0,
            }],
        });
        let report = Report {
            systems: vec![bramble, system("linux", 500.0, 2.0)],
            ..Default::default()
        };
        let markdown = markdown(&report);
        assert!(
            markdown.contains("| page: all guest instructions/request (profile) | 80000 | - |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| `compiler_builtins::mem::memcpy` | 20000 | 25.0% |"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| (the rest) | 60000 | 75.0% |"),
            "{markdown}"
        );
        assert!(table(&report).contains("80000 instructions/request (10 requests"));
    }

    #[test]
    fn cpu_cost_converts_busy_time_to_instructions() {
        let cost = CpuCost::new("page", 2000, 100).unwrap();
        assert_eq!(cost.instructions_per_request, 20_000.0);
        assert_eq!(cost.cpu_bound_requests_per_second_at_700mhz, 35_000.0);
        assert_eq!(CpuCost::new("page", 2000, 0), None);
    }

    #[test]
    fn json_round_trips_and_outputs_name_every_system() {
        let report = report();
        let json = serde_json::to_string_pretty(&report).unwrap();
        assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), report);
        let text = table(&report);
        assert!(text.contains("bramble") && text.contains("linux"));
        assert!(
            text.lines()
                .any(|line| line.starts_with("page c=10: req/s") && line.ends_with("10.0x"))
        );
        let md = markdown(&report);
        assert!(md.contains("| page c=10: req/s | 1000.0 | 100.0 | 10.0x |"));
    }

    #[test]
    fn the_walk_rows_give_the_hit_rate_card_traffic_and_passes_and_boot_phases_in_guest_ms() {
        let mut report = report();
        let bramble = &mut report.systems[0];
        bramble.walk_files = Some(100);
        bramble.boot_phases_us = [
            ("table verified", 210_459),
            ("ready", 969_095),
            ("first request served", 1_036_969),
        ]
        .into_iter()
        .map(|(name, us)| (name.to_string(), us))
        .collect();
        let mut walk = bramble.loads[0].clone();
        walk.target = "walk".into();
        walk.figures.as_mut().unwrap().responses = 250;
        walk.guest_events = [
            ("cache hits", 150),
            ("cache misses", 50),
            ("card bytes", 3 * 1_048_576),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
        bramble.loads.push(walk);
        let rows = rows(&report);
        let find = |label: &str| {
            rows.iter()
                .find(|row| row.0.starts_with(label))
                .unwrap()
                .clone()
        };
        assert_eq!(
            find("walk c=10: card cache hits / misses").1,
            vec!["150 / 50 (75.0%), 3.00, 2.50 passes", "-"]
        );
        assert_eq!(
            find("boot, guest time: table verified / ready / first request served").1,
            vec!["210 / 969 / 1037", "-"]
        );
    }
}
