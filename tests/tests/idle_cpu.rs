//! Measures (does not assert) QEMU's host CPU while the kernel idles: CPU seconds over 10 s
//! after "serving:" with usb-net on QEMU's user network, and after "ready:" with no NIC at all.
//! Run with `cargo test -p bramble-tests --test idle_cpu -- --ignored --nocapture`.

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use std::time::{Duration, Instant};

/// How long each idle period is measured.
const IDLE: Duration = Duration::from_secs(10);
/// Settle time after the ready line (mDNS probes and announcements finish in about 3 s).
const SETTLE: Duration = Duration::from_secs(4);

/// User plus system CPU time so far of each thread of `pid`, in seconds (`/proc/PID/task/
/// TID/stat` fields 14 and 15, in clock ticks), keyed by thread id.
fn thread_cpu_seconds(pid: u32) -> Vec<(u32, f64)> {
    let output = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf CLK_TCK");
    let per_second: f64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK");
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).expect("reading task list") {
        let entry = entry.unwrap();
        let Ok(tid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue; // The thread ended meanwhile.
        };
        // After "PID (COMM) " come the fields from 3 (state) on: utime is 14, stime 15.
        let fields: Vec<&str> = stat[stat.rfind(')').expect("comm") + 2..]
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        threads.push((tid, ticks as f64 / per_second));
    }
    threads
}

/// CPU seconds over a measurement: QEMU's main loop thread (device models, timers, the user
/// network) and all its other threads (the vCPU running the guest, RCU, workers).
struct IdleCpu {
    main_loop: f64,
    other_threads: f64,
    wall: Duration,
}

fn split(pid: u32, before: &[(u32, f64)], after: &[(u32, f64)]) -> (f64, f64) {
    let mut main_loop = 0.0;
    let mut others = 0.0;
    for (tid, seconds) in after {
        let start = before
            .iter()
            .find(|(t, _)| t == tid)
            .map_or(0.0, |(_, s)| *s);
        if *tid == pid {
            main_loop += seconds - start;
        } else {
            others += seconds - start;
        }
    }
    (main_loop, others)
}

/// Boots, waits for the ready line and SETTLE, then returns QEMU's CPU seconds over IDLE and
/// the wall time actually measured.
fn measure(network: bool) -> IdleCpu {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "<h1>idle</h1>").unwrap();
    let card = dir.path().join("card.img");
    let inputs = ImageInputs {
        kernel: std::fs::read(&kernel().raw).unwrap(),
        site: pack_site(&site, &PackOptions::default()).unwrap().image,
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: None,
    };
    build_image(&inputs, &card).unwrap();
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    let ready_line = if network {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        config.network = Some(Network::User {
            host_port: port,
            topology: Topology::BehindHub,
        });
        "serving: http://10.0.2.15/"
    } else {
        "ready: idle in WFI"
    };
    let mut guest = Guest::start(&config);
    guest.expect_line(ready_line, BOOT_TIMEOUT);
    // Collects serial output meanwhile, so the pipe never fills.
    let _ = guest.wait_for(|_| false, SETTLE);
    let before = thread_cpu_seconds(guest.pid());
    let start = Instant::now();
    let _ = guest.wait_for(|_| false, IDLE);
    let after = thread_cpu_seconds(guest.pid());
    let wall = start.elapsed();
    let (main_loop, other_threads) = split(guest.pid(), &before, &after);
    IdleCpu {
        main_loop,
        other_threads,
        wall,
    }
}

#[test]
#[ignore = "measurement, not a check: run by hand with --ignored --nocapture"]
fn idle_host_cpu_with_and_without_the_network() {
    for (network, label) in [(true, "usb-net, user network, serving"), (false, "no NIC")] {
        let idle = measure(network);
        let total = idle.main_loop + idle.other_threads;
        let wall = idle.wall.as_secs_f64();
        eprintln!(
            "idle QEMU ({label}): {total:.2} CPU s over {wall:.1} s = {:.1}% of one core \
             (main loop {:.2} s, vCPU and other threads {:.2} s)",
            100.0 * total / wall,
            idle.main_loop,
            idle.other_threads
        );
    }
}
