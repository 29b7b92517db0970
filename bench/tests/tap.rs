//! `bramble-bench --tap` end to end, tiny and bounded (Bramble alone, 10 clients for 2 s, a
//! 1 s idle window): the guest boots on a TAP link in the bench's own namespace and serves the
//! site's exact bytes, the judge's verdict is in the JSON (every client judged, none left
//! unserved at 10 clients), the idle rows have the guest's busy %, QEMU's CPU and the WFI
//! floor's, and the namespace is gone afterwards. Behaviour only, never speed.
//!
//! Skips with a printed reason only when not root or without `ip` or /dev/net/tun (as the
//! hosted bench test does).

mod common;

use bramble_bench::report::Report;
use common::{assert_namespaces_gone, run_bench, skip_reason};
use std::time::Duration;

/// Generous: the first run builds the kernel and packs the bench site.
const LIMIT: Duration = Duration::from_secs(900);

#[test]
fn tap_bench_boots_bramble_on_a_tap_link_and_judges_every_client() {
    if let Some(reason) = skip_reason() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let results = tempfile::tempdir().unwrap();
    let common::Run {
        pid,
        status,
        stdout,
        stderr,
    } = run_bench(
        &[
            "--tap",
            "--systems",
            "bramble",
            "--levels",
            "10",
            "--duration",
            "2",
            "--idle",
            "1",
            "--tap-queue",
            "3000",
        ],
        results.path(),
        LIMIT,
    );
    assert!(
        status.success(),
        "bench failed ({status}):\n{stdout}\n{stderr}"
    );
    for row in [
        "page c=10: clients never served / requests over timeout",
        "idle: guest busy (% of its CPU)",
        "idle: WFI-only guest's QEMU host CPU, same NIC (floor, %)",
        "page c=10: answers per client min/p1/p50/p99/max",
        "page c=10: TAP frames to QEMU / dropped there",
    ] {
        assert!(stdout.contains(row), "no {row:?} row:\n{stdout}");
    }

    let json = std::fs::read_to_string(results.path().join("results.json")).unwrap();
    let report: Report = serde_json::from_str(&json).unwrap();
    assert!(report.tap);
    // The queue asked for is the one the device had, and the report says so.
    assert_eq!(report.tap_queue_frames, Some(3000), "{json}");
    assert!(report.nic.contains("3000 frames"), "{}", report.nic);
    let queue_row = stdout
        .lines()
        .find(|line| line.starts_with("TAP device's queue towards QEMU (frames, --tap-queue)"))
        .unwrap_or_else(|| panic!("no queue row:\n{stdout}"));
    assert!(queue_row.contains(" 3000 "), "{queue_row}");
    assert_eq!(report.levels, vec![10]);
    assert!(report.idle_floor_qemu_cpu_percent.is_some(), "{json}");
    let names: Vec<&str> = report.systems.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["bramble"]);
    let system = &report.systems[0];
    let page = std::fs::read(bramble::workspace_root().join("bench/site/index.html"))
        .unwrap()
        .len() as u64;
    assert_eq!(system.checked_bytes.get("/"), Some(&page), "{system:?}");
    assert!(system.idle_guest_busy_percent.is_some(), "{system:?}");
    assert!(system.idle_qemu_cpu_percent.is_some(), "{system:?}");
    assert!(
        system
            .notes
            .iter()
            .any(|note| note.starts_with("idle window:")),
        "{:?}",
        system.notes
    );
    let load = system.load("page", 10).expect("a page c=10 run");
    let judged = load
        .judge
        .as_ref()
        .unwrap_or_else(|| panic!("no verdict: {:?}", load.failure));
    assert_eq!(judged.clients, 10);
    assert!(judged.good > 0, "{judged:?}");
    assert_eq!(judged.clients_never_served, 0, "{judged:?}");
    // Every client was served, so each has at least one answer.
    assert!(judged.answers_per_client.min >= 1, "{judged:?}");
    assert!(
        load.guest_events.contains_key("tap frames to QEMU dropped"),
        "{load:?}"
    );
    assert!(load.guest_busy_percent.is_some(), "{load:?}");

    assert_namespaces_gone(pid);
}

/// `--tap-queue` belongs to `--tap` and takes a positive frame count; both refusals come
/// from the real binary before anything is built or booted (no root needed).
#[test]
fn the_tap_queue_flag_needs_tap_and_a_positive_length() {
    for (args, expected) in [
        (&["--tap-queue", "5000"][..], "--tap"),
        (&["--tap", "--tap-queue", "0"][..], "--tap-queue"),
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_bramble-bench"))
            .args(args)
            .output()
            .expect("run bramble-bench");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} was accepted: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
