//! `bramble-bench --hosted` end to end, tiny and bounded (2 s per level, 1 and 10 clients, the
//! page, the page over HTTPS and full TLS handshakes): every server answers with the site's
//! exact bytes, bramble-hosted and nginx answer over HTTPS (busybox httpd, which has none, is
//! skipped there with a note), bramble-hosted has no errors,
//! the JSON has the fields the README documents, the charts are PNGs, and nothing is left
//! behind (namespace, processes, cgroups). It asserts behaviour, never speed.
//!
//! Skips with a printed reason only when not root or without `ip` or /dev/net/tun (as the
//! hosted TAP tests do). Missing wrk, nginx or busybox is a failure: tools/setup.sh installs
//! them.

mod common;

use bramble_bench::report::Report;
use common::{assert_namespaces_gone, run_bench, skip_reason};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Generous: the first run builds bramble-hosted in release mode (about a minute on one job).
const LIMIT: Duration = Duration::from_secs(900);

fn require(program: &str, args: &[&str], package: &str) {
    let found = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "{program} is missing: install the Debian package `{package}` (tools/setup.sh does)"
    );
}

/// Every process whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if line.contains(needle) {
            found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

#[test]
fn hosted_bench_serves_the_site_from_all_three_servers() {
    if let Some(reason) = skip_reason() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    require("wrk", &["-v"], "wrk");
    require("nginx", &["-v"], "nginx");
    require("busybox", &["--list"], "busybox");

    let results = tempfile::tempdir().unwrap();
    let common::Run {
        pid,
        status,
        stdout,
        stderr,
    } = run_bench(
        &[
            "--hosted",
            "--levels",
            "1,10",
            "--duration",
            "2",
            "--targets",
            "page,tls-page,tls-full",
        ],
        results.path(),
        LIMIT,
    );
    assert!(
        status.success(),
        "bench failed ({status}):\n{stdout}\n{stderr}"
    );

    // The table names every server.
    for name in ["bramble-hosted", "nginx", "busybox-httpd"] {
        assert!(
            stdout.contains(name),
            "{name} missing from the table:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("page c=10: server CPU us/request"),
        "{stdout}"
    );

    // The JSON, as the typed report and as plain fields.
    let json = std::fs::read_to_string(results.path().join("results.json")).unwrap();
    let report: Report = serde_json::from_str(&json).unwrap();
    assert!(report.hosted);
    assert_eq!(report.levels, vec![1, 10]);
    assert!(report.server_cpu_method.is_some());
    let names: Vec<&str> = report.systems.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["bramble-hosted", "nginx", "busybox-httpd"]);
    let page = std::fs::read(bramble::workspace_root().join("bench/site/index.html"))
        .unwrap()
        .len() as u64;
    for system in &report.systems {
        let name = &system.name;
        assert_eq!(
            system.checked_bytes.get("/"),
            Some(&page),
            "{name}: {system:?}"
        );
        assert_eq!(
            system.checked_bytes.get("/file-100k.bin"),
            Some(&(100 * 1024)),
            "{name}: {system:?}"
        );
        for level in [1, 10] {
            let load = system
                .load("page", level)
                .unwrap_or_else(|| panic!("{name}: no page c={level} run"));
            let figures = load
                .figures
                .as_ref()
                .unwrap_or_else(|| panic!("{name} c={level} failed: {:?}", load.failure));
            assert!(figures.responses > 0, "{name} c={level}: no responses");
            assert!(figures.latency_ms.max >= figures.latency_ms.p50);
            let cpu = load
                .server_cpu
                .as_ref()
                .unwrap_or_else(|| panic!("{name} c={level}: no server CPU"));
            assert!(cpu.microseconds_per_request.is_some(), "{name} c={level}");
            if name != "busybox-httpd" {
                // Long-lived processes: counted under either accounting method.
                assert!(cpu.cpu_seconds > 0.0, "{name} c={level}: {cpu:?}");
            }
            if name == "bramble-hosted" {
                assert_eq!(figures.errors(), 0, "bramble-hosted c={level}: {figures:?}");
                assert!(load.guest_events.contains_key("write syscalls"));
            }
        }
    }
    for system in &report.systems {
        let name = &system.name;
        for target in ["tls-page", "tls-full"] {
            if name == "busybox-httpd" {
                let note = format!("{target}: skipped, busybox-httpd serves no HTTPS");
                assert!(system.notes.contains(&note), "{name}: {:?}", system.notes);
                assert!(system.load(target, 1).is_none(), "{name}: {target} ran");
                continue;
            }
            for level in [1, 10] {
                let load = system
                    .load(target, level)
                    .unwrap_or_else(|| panic!("{name}: no {target} c={level} run"));
                let figures = load.figures.as_ref().unwrap_or_else(|| {
                    panic!("{name} {target} c={level} failed: {:?}", load.failure)
                });
                assert!(
                    figures.responses > 0,
                    "{name} {target} c={level}: no responses"
                );
            }
        }
    }
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let first_load = &value["systems"][0]["loads"][0];
    for field in ["p50", "p90", "p99", "max"] {
        assert!(
            first_load["figures"]["latency_ms"][field].is_number(),
            "{field}"
        );
    }
    for field in ["requests_per_second", "responses", "bad_status"] {
        assert!(first_load["figures"][field].is_number(), "{field}");
    }
    assert!(first_load["server_cpu"]["microseconds_per_request"].is_number());
    assert!(first_load["server_cpu"]["percent_of_a_core"].is_number());

    // The charts and the summary.
    for chart in ["throughput.png", "latency.png", "cpu.png"] {
        let bytes = std::fs::read(results.path().join(chart)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{chart}");
    }
    let summary = std::fs::read_to_string(results.path().join("README.md")).unwrap();
    assert!(summary.contains("not a claim about the Pi"), "{summary}");

    // Nothing left behind: the namespace, the cgroups, the servers.
    assert_namespaces_gone(pid);
    let namespace = format!("bramble-bench-{pid}-");
    // A cgroup is removed only once it is empty, so this also finds a server process left
    // running (nginx renames its worker, so the command-line check below cannot).
    for hierarchy in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        for entry in std::fs::read_dir(hierarchy).into_iter().flatten().flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            assert!(
                !file.starts_with(&namespace),
                "cgroup {file} is still there"
            );
        }
    }
    let logs = stderr
        .lines()
        .find_map(|line| {
            line.split_once("logs in ")
                .map(|(_, dir)| dir.trim().to_string())
        })
        .expect("the bench names its log folder");
    let left = processes_mentioning(&logs);
    assert!(left.is_empty(), "still running: {left:?}");
}
