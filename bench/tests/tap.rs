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
    ] {
        assert!(stdout.contains(row), "no {row:?} row:\n{stdout}");
    }

    let json = std::fs::read_to_string(results.path().join("results.json")).unwrap();
    let report: Report = serde_json::from_str(&json).unwrap();
    assert!(report.tap);
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
    assert!(load.guest_busy_percent.is_some(), "{load:?}");

    assert_namespaces_gone(pid);
}
