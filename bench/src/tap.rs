//! `bramble-bench --tap`: Bramble and the Linux + busybox httpd baseline booted one after the
//! other in the same QEMU machine, each with its usb-net NIC on a TAP device inside a fresh
//! network namespace the benchmark creates (so QEMU's user-mode port forward, whose listen
//! backlog of 1 drops connections at 1,000 clients, is not in the path), loaded by the judging
//! client (judge.rs) from inside that namespace: every client on its own keep-alive
//! connection, each connection and request judged.
//!
//! Per system: boot (QEMU started from a thread that has entered the namespace, so QEMU opens
//! the namespace's TAP), the body checks, an idle window (QEMU's host CPU and the guest's own
//! busy %), then one judged run per level with the guest's counters before, in the middle
//! (RAM in use while the clients are connected) and after. Before the systems, a floor guest
//! that only sleeps in WFI, with the same NIC attached, gives QEMU's own idle cost over the
//! same window. Every run is bounded (the judge's duration plus its timeout); every QEMU is
//! stopped by its PID; each namespace is deleted when its system is done.

use super::guest::Guest;
use super::hosted::Namespace;
use super::judge::{self, JudgeReport, JudgeRun};
use super::load::{Latency, LoadFigures, SocketErrors};
use super::report::{Host, LoadReport, Report, SystemReport};
use super::systems::{self, Link, System, TAP_GUEST};
use super::{BenchArgs, probe};
use anyhow::{Context, bail};
use rustix::net::SocketAddrV4;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a boot may take to answer its first HTTP 200 over the TAP link.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// The one target of the TAP runs: the 6 KB page.
const TARGET: &str = "page";
/// Settling time after the first 200 before the idle window starts.
const SETTLE: Duration = Duration::from_secs(3);
/// More silence before the idle window: under QEMU, Bramble's quiet receive path polls less
/// often as a silence goes on and reaches its longest interval after 20 s (kernel/board/src/
/// network.rs). A page on battery is silent for minutes, so the window measures that steady
/// state, not the first seconds after the last request. Every system gets the same wait.
const IDLE_SETTLE: Duration = Duration::from_secs(22);

/// The guest's HTTP address on the TAP link.
fn guest_address() -> SocketAddr {
    SocketAddr::from((TAP_GUEST, 80))
}

/// Runs the TAP benchmark.
pub(super) fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let root = bramble::workspace_root();
    let work = root.join("target/bench");
    let super::RunDir {
        date,
        commit,
        path: run_dir,
    } = super::new_run_dir(&root, "-tap")?;
    super::raise_open_file_limit();
    let names = args.system_names();
    let site = systems::prepare_site(&root, &work.join("site"))?;
    let mut report = Report {
        date: date.clone(),
        commit: commit.clone(),
        host: Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_average_before: super::load_average(),
            load_average_after: String::new(),
            qemu: super::qemu_version(),
        },
        machine: "raspi1ap".into(),
        nic: format!(
            "usb-net behind QEMU's hub (RNDIS) on a TAP device in the benchmark's network \
             namespace, its queue towards QEMU {} frames (--tap-queue: QEMU's usb-net takes one \
             frame at a time where a B+'s LAN9514 has a receive FIFO, so bursts wait there; \
             what it cannot hold is dropped and counted per level)",
            args.tap_queue
        ),
        load_generator: "judge (bench/src/judge.rs): one keep-alive connection per client, \
                         every connection and request judged"
            .into(),
        duration_seconds: args.duration,
        connection_close: false,
        levels: args.levels.clone(),
        systems: Vec::new(),
        hosted: false,
        server_cpu_method: None,
        tap: true,
        idle_floor_qemu_cpu_percent: None,
        tap_queue_frames: None,
    };
    eprintln!(
        "bench: tap: {} on raspi1ap over a TAP link, levels {:?}, {} s each; logs in {}",
        names.join(" vs "),
        args.levels,
        args.duration,
        run_dir.display()
    );
    let mut built = Vec::new();
    for name in &names {
        built.push(match name.as_str() {
            "bramble" => System::bramble(&site, &work, None, Link::Tap)?,
            "linux" => System::linux(&root, &site, &work)?,
            other => bail!("unknown system '{other}' (use bramble or linux)"),
        });
    }
    report.idle_floor_qemu_cpu_percent = match floor_idle(&work, &run_dir, args) {
        Ok(percent) => {
            eprintln!("bench: tap: WFI floor guest idles at {percent:.1}% of a core");
            Some(percent)
        }
        Err(error) => {
            eprintln!("bench: tap: WFI floor guest: {error:#}");
            None
        }
    };
    for system in &built {
        let namespace = Namespace::create_labelled(&format!("tap-{}", system.name()))?;
        tune_namespace(&namespace)?;
        // Before QEMU opens the device (the tun driver resizes its ring on a change anyway).
        let frames = namespace.set_tap_queue(args.tap_queue)?;
        if frames != args.tap_queue {
            bail!(
                "the TAP device took a queue of {frames} frames, not --tap-queue {}",
                args.tap_queue
            );
        }
        report.tap_queue_frames = Some(frames);
        let dir = run_dir.join(system.name());
        std::fs::create_dir_all(&dir)?;
        let result = namespace.inside(|| measure(system, &namespace.name, &site, args, &dir))??;
        report.systems.push(result);
        super::write_json(&report, &run_dir.join("results.json"))?;
    }
    super::finish_run(&mut report, args, &root, &run_dir, "-tap")
}

/// Lets the judge open 10,000 connections and reconnect after the server closes them: the
/// whole port range for its local ports, and TIME-WAIT ports reused (busybox httpd closes
/// every connection after one answer). Both are per-namespace settings.
pub(super) fn tune_namespace(namespace: &Namespace) -> anyhow::Result<()> {
    namespace.sysctl("net.ipv4.ip_local_port_range", "1024 65535")?;
    namespace.sysctl("net.ipv4.tcp_tw_reuse", "1")
}

/// Boots `system` (on the calling thread, which is in the system's namespace) and measures
/// it: boot, body checks, idle, one judged run per level.
fn measure(
    system: &System,
    namespace: &str,
    site: &systems::Site,
    args: &BenchArgs,
    dir: &Path,
) -> anyhow::Result<SystemReport> {
    let mut result = SystemReport {
        name: system.name().into(),
        description: format!(
            "{} Over the TAP link: {TAP_GUEST}/24, the namespace is 192.168.77.1.",
            system.description()
        ),
        image_bytes: system.image_bytes(),
        ..Default::default()
    };
    let address = guest_address();
    // Unused over the TAP link; QemuConfig wants them for user networking only.
    let ports = super::Ports { http: 0, https: 0 };
    let args_qemu = system.qemu_args(ports, false, Link::Tap);
    let Some((mut guest, boot_time)) =
        boot(system.name(), namespace, &args_qemu, dir, &mut result.notes)?
    else {
        return Ok(result);
    };
    result.boot_to_first_200_seconds = Some(boot_time.as_secs_f64());
    // The page and the 100 KiB file byte for byte (the validator is for the 304 target,
    // which the TAP runs do not load).
    super::check_site_at(address, site, &mut result.notes, &mut result.checked_bytes);

    std::thread::sleep(SETTLE);
    if let System::Bramble { .. } = system {
        // After boot Bramble reads the site's bodies into its card cache in the background;
        // idle starts when that is done.
        match wait_until_warm(&mut guest) {
            Some(after) => result.notes.push(format!(
                "card cache warm {:.1} s after the first 200 + {} s; the idle window starts then",
                after.as_secs_f64(),
                SETTLE.as_secs()
            )),
            None => result.notes.push(format!(
                "card cache still warming after {} s; idle measured while it warms",
                WARM_LIMIT.as_secs()
            )),
        }
    }
    // The Linux guest's counters CGI is not read over the TAP link: in 5 of 5 tries the guest
    // stopped answering anything (ping included) while it ran (its answer stalled after the
    // first lines, read from /proc), which the same CGI never does behind the port forward.
    // Cause not found; without it the Linux rows have no guest busy % or RAM.
    let linux = matches!(system, System::Linux { .. });
    if linux {
        result.notes.push(
            "guest busy % and RAM not read: the counters CGI hangs this guest over the TAP \
             link (5 of 5 tries; cause not found)"
                .into(),
        );
    }
    let counters = |guest: &mut Guest| {
        if linux {
            return None;
        }
        system.counters_with(guest, || {
            probe::get_at(address, "/cgi-bin/counters", &[], Duration::from_secs(20))
        })
    };
    std::thread::sleep(IDLE_SETTLE);
    result.notes.push(format!(
        "idle window: {} s, after {} s more of silence",
        args.idle,
        IDLE_SETTLE.as_secs()
    ));
    let before = counters(&mut guest);
    let cpu_before = guest.cpu_time()?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(args.idle));
    let cpu_used = guest.cpu_time()? - cpu_before;
    let wall = started.elapsed().as_secs_f64();
    let after = counters(&mut guest);
    result.idle_qemu_cpu_percent = Some(100.0 * cpu_used.as_secs_f64() / wall);
    if let (Some(before), Some(after)) = (&before, &after) {
        result.idle_guest_busy_percent = super::busy_percent(before, after);
    }
    result.guest_ram_used_bytes = after.as_ref().and_then(|c| c.ram_used_bytes);

    for &level in &args.levels {
        let load = judged_level(&mut guest, level, args, &counters);
        eprintln!(
            "bench: {}: {}",
            system.name(),
            describe(&load, args.timeout)
        );
        result.loads.push(load);
        std::thread::sleep(Duration::from_secs(2));
    }
    let mut https = args
        .https
        .then(|| super::https::measure(&mut guest, !linux, args, dir));
    result.qemu_peak_rss_bytes = guest.peak_rss_bytes();
    // One QEMU at a time on the namespace's TAP device.
    drop(guest);
    if let Some(https) = &mut https
        && args.icount_duration > 0
        && let Err(error) = super::https::count_handshakes(system, namespace, dir, https)
    {
        https
            .notes
            .push(format!("instructions per handshake: {error:#}"));
    }
    result.https = https;
    Ok(result)
}

/// Longest wait for Bramble's card cache to finish warming before the idle window.
const WARM_LIMIT: Duration = Duration::from_secs(90);

/// Waits until the `warmed` count on Bramble's `status: cache` line stops growing between two
/// readings a second apart; the time waited, or `None` after [`WARM_LIMIT`].
fn wait_until_warm(guest: &mut Guest) -> Option<Duration> {
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < WARM_LIMIT {
        guest.drain();
        guest.send_line("status").ok()?;
        let line = guest.wait_line("status: cache", Duration::from_secs(10))?;
        let warmed = super::counters::parse_cache_status(&line)?
            .get("warmed")
            .copied();
        if warmed.is_some() && warmed == last {
            return Some(started.elapsed());
        }
        last = warmed;
        std::thread::sleep(Duration::from_secs(1));
    }
    None
}

/// One judged run at `level` clients, with the guest's counters before, in the middle and
/// after, and QEMU's host CPU over it.
fn judged_level(
    guest: &mut Guest,
    level: u32,
    args: &BenchArgs,
    counters: &dyn Fn(&mut Guest) -> Option<super::counters::GuestCounters>,
) -> LoadReport {
    let mut load = LoadReport {
        target: TARGET.into(),
        concurrency: level,
        ..Default::default()
    };
    if let Err(error) = guest.check_alive() {
        load.failure = Some(error.to_string());
        return load;
    }
    let alive = (0..3).any(|_| {
        probe::get_at(guest_address(), "/", &[], Duration::from_secs(10))
            .is_some_and(|r| r.status == 200)
    });
    if !alive {
        load.failure = Some(super::NOT_ANSWERING.into());
        return load;
    }
    let std::net::IpAddr::V4(ip) = guest_address().ip() else {
        unreachable!("the TAP guest has an IPv4 address")
    };
    let run = JudgeRun {
        target: SocketAddrV4::new(ip, 80),
        path: "/".into(),
        headers: Vec::new(),
        clients: level,
        duration: Duration::from_secs(args.duration),
        timeout: Duration::from_secs(args.timeout),
    };
    let counters_before = counters(guest);
    let tap_before = tap_statistics();
    let cpu_before = guest.cpu_time().ok();
    let started = Instant::now();
    // The judge runs on a thread of its own (in this thread's namespace: threads inherit
    // it); this one reads the guest's counters halfway, while the clients are connected.
    let (judged, middle) = std::thread::scope(|scope| {
        let judge = scope.spawn(|| judge::run(&run));
        let half = run.duration / 2;
        std::thread::sleep(half);
        let middle = counters(guest);
        (judge.join(), middle)
    });
    let wall = started.elapsed().as_secs_f64();
    let counters_after = counters(guest);
    if let (Some(before), Some(after)) = (&counters_before, &counters_after) {
        load.guest_busy_percent = super::busy_percent(before, after);
        load.guest_events = after.event_deltas(before);
    }
    if let (Some(before), Some(after)) = (tap_before, tap_statistics()) {
        for (name, (b, a)) in TAP_STATISTICS.iter().zip(before.iter().zip(after)) {
            load.guest_events
                .insert(name.to_string(), a.saturating_sub(*b));
        }
    }
    load.guest_ram_used_bytes = middle.and_then(|c| c.ram_used_bytes);
    if let (Some(before), Ok(after)) = (cpu_before, guest.cpu_time()) {
        load.qemu_cpu_percent = Some(100.0 * (after - before).as_secs_f64() / wall);
    }
    match judged {
        Ok(judged) => {
            load.figures = Some(figures(&judged));
            load.judge = Some(judged);
        }
        Err(_) => load.failure = Some("the judging client panicked".into()),
    }
    load
}

/// The TAP device's counters that [`tap_statistics`] reads, as the namespace sees them:
/// "transmit" is towards QEMU (the guest's receive side).
const TAP_STATISTICS: [&str; 4] = [
    super::report::TAP_TO_QEMU,
    super::report::TAP_TO_QEMU_DROPPED,
    "tap frames from QEMU",
    "tap frames from QEMU dropped",
];

/// The TAP device's packet and drop counts, in [`TAP_STATISTICS`]' order, from
/// /proc/thread-self/net/dev (the calling thread's namespace).
fn tap_statistics() -> Option<[u64; 4]> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").ok()?;
    parse_net_dev(&text, systems::TAP_DEVICE)
}

/// [`tap_statistics`] from the text of a /proc/net/dev.
fn parse_net_dev(text: &str, device: &str) -> Option<[u64; 4]> {
    let line = text
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{device}:")))?;
    let fields: Vec<u64> = line
        .split_once(':')?
        .1
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // Receive: bytes packets errs drop ...(8); transmit: bytes packets errs drop ...
    Some([
        *fields.get(9)?,
        *fields.get(11)?,
        *fields.get(1)?,
        *fields.get(3)?,
    ])
}

/// The judge's verdict in the shape of the wrk figures (so that the table's throughput and
/// latency rows and the charts read both the same way).
pub fn figures(judged: &JudgeReport) -> LoadFigures {
    LoadFigures {
        responses: judged.good + judged.failures.status,
        bad_status: judged.failures.status,
        socket_errors: SocketErrors {
            connect: judged.failures.connect,
            read: judged.failures.read,
            write: 0,
            timeout: judged.failures.timeout,
        },
        requests_per_second: judged.requests_per_second,
        latency_ms: Latency {
            p50: judged.latency_ms.p50,
            p90: judged.latency_ms.p90,
            p99: judged.latency_ms.p99,
            max: judged.latency_ms.max,
        },
        elapsed_seconds: judged.duration_seconds,
    }
}

fn describe(load: &LoadReport, timeout_seconds: u64) -> String {
    match (&load.judge, &load.failure) {
        (Some(j), _) => format!(
            "{} c={}: {:.1} req/s, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; failures \
             connect {} read {} timeout {} status {}; never served {}, over {} s {}; first \
             answer p99 {:.0} ms, max {:.0} ms; answers per client min {} median {} max {}; \
             most connected {}; QEMU {:.0}% host CPU, guest busy {}%",
            load.target,
            load.concurrency,
            j.requests_per_second,
            j.latency_ms.p50,
            j.latency_ms.p99,
            j.latency_ms.max,
            j.failures.connect,
            j.failures.read,
            j.failures.timeout,
            j.failures.status,
            j.clients_never_served,
            timeout_seconds,
            j.requests_over_timeout,
            j.first_answer_ms.p99,
            j.first_answer_ms.max,
            j.answers_per_client.min,
            j.answers_per_client.p50,
            j.answers_per_client.max,
            j.most_connected,
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

/// Boots a guest (QEMU started on the calling thread, inside its namespace) until `/` on the
/// TAP link answers 200, in up to two tries. Returns it with the wall time to that 200.
fn boot(
    name: &str,
    namespace: &str,
    qemu_args: &[OsString],
    dir: &Path,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<(Guest, Duration)>> {
    boot_with_timeout(name, namespace, qemu_args, dir, notes, BOOT_TIMEOUT)
}

/// [`boot`] with its own limit per try (longer under `-icount`).
pub(super) fn boot_with_timeout(
    name: &str,
    namespace: &str,
    qemu_args: &[OsString],
    dir: &Path,
    notes: &mut Vec<String>,
    timeout: Duration,
) -> anyhow::Result<Option<(Guest, Duration)>> {
    for attempt in 1..=2 {
        eprintln!("bench: {name}: booting on the TAP link (try {attempt})");
        let log = (1..)
            .map(|n| dir.join(format!("serial-{n}.log")))
            .find(|path| !path.exists())
            .expect("an unused log name");
        let mut guest = Guest::start_in(Some(namespace), qemu_args, &log)?;
        while guest.started.elapsed() < timeout {
            guest.check_alive()?;
            if probe::get_at(guest_address(), "/", &[], Duration::from_millis(500))
                .is_some_and(|r| r.status == 200)
            {
                let boot = guest.started.elapsed();
                eprintln!("bench: {name}: first 200 after {:.2} s", boot.as_secs_f64());
                return Ok(Some((guest, boot)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        notes.push(format!(
            "boot try {attempt}: no HTTP 200 over the TAP link within {} s; see {}",
            timeout.as_secs(),
            log.display()
        ));
    }
    Ok(None)
}

/// ARM code of the floor guest: `wfi` then a branch back to it, forever (position
/// independent; QEMU's -bios puts it at 0x8000 with interrupts masked and none enabled).
const WFI_LOOP: [u32; 2] = [
    0xE320_F003, // wfi
    0xEAFF_FFFD, // b .-4 (the wfi): offset -3 words from pc+8
];

/// QEMU's host CPU over the idle window for a guest that only sleeps in WFI, with the same
/// usb-net NIC behind the hub on a TAP device in a namespace of its own: the cost of QEMU's
/// own models (DWC2 polling its ports), the floor Bramble's idle is compared against.
fn floor_idle(work: &Path, run_dir: &Path, args: &BenchArgs) -> anyhow::Result<f64> {
    let image = work.join("wfi-floor.img");
    let bytes: Vec<u8> = WFI_LOOP
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .collect();
    std::fs::write(&image, bytes).with_context(|| format!("writing {}", image.display()))?;
    let mut config = bramble_qemu::QemuConfig::new(
        bramble_qemu::Machine::Raspi1ap,
        bramble_qemu::Kernel::Raw(image),
    );
    config.network = Some(bramble_qemu::Network::Tap {
        interface: systems::TAP_DEVICE.into(),
        topology: bramble_qemu::Topology::BehindHub,
    });
    let namespace = Namespace::create_labelled("tap-floor")?;
    namespace.set_tap_queue(args.tap_queue)?;
    let dir = run_dir.join("wfi-floor");
    std::fs::create_dir_all(&dir)?;
    namespace.inside(|| -> anyhow::Result<f64> {
        let guest = Guest::start_in(
            Some(&namespace.name),
            &config.args(),
            &dir.join("serial.log"),
        )?;
        std::thread::sleep(SETTLE);
        let before = guest.cpu_time()?;
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs(args.idle));
        let used = guest.cpu_time()? - before;
        Ok(100.0 * used.as_secs_f64() / started.elapsed().as_secs_f64())
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_reads_as_load_figures() {
        let judged = JudgeReport {
            clients: 10,
            duration_seconds: 2.0,
            good: 100,
            requests_per_second: 50.0,
            failures: judge::Failures {
                connect: 1,
                read: 2,
                timeout: 3,
                status: 4,
            },
            ..Default::default()
        };
        let f = figures(&judged);
        assert_eq!(f.responses, 104);
        assert_eq!(f.errors(), 10);
        assert_eq!(f.requests_per_second, 50.0);
    }

    #[test]
    fn tap_counters_come_from_the_devices_line() {
        let text = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame \
                    compressed multicast|bytes packets errs drop fifo colls carrier compressed\n\
                    \x20   lo: 1 2 0 0 0 0 0 0 1 2 0 0 0 0 0 0\n\
                    bbench0: 100 7 0 1 0 0 0 0 200 9 0 3 0 0 0 0\n";
        assert_eq!(parse_net_dev(text, "bbench0"), Some([9, 3, 7, 1]));
        assert_eq!(parse_net_dev(text, "eth0"), None);
    }

    #[test]
    fn the_floor_guest_is_a_wfi_loop() {
        // The branch's 24-bit offset is -3 words: back from pc+8 to the wfi.
        let offset = (WFI_LOOP[1] & 0x00FF_FFFF) as i32;
        assert_eq!((offset << 8) >> 8, -3);
        assert_eq!(WFI_LOOP[0], 0xE320_F003);
    }
}
