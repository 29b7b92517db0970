//! `bramble qemu` stops QEMU cleanly on SIGTERM and SIGINT (Ctrl-C), leaving no QEMU behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The PIDs of `pid`'s children (Linux /proc).
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            found.extend(
                text.split_whitespace()
                    .filter_map(|n| n.parse::<u32>().ok()),
            );
        }
    }
    found
}

fn is_running(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie has state Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.split(") ").nth(1).unwrap_or("").starts_with('Z'))
        .unwrap_or(false)
}

fn stops_cleanly_on(signal: &str) {
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed");
        return;
    }
    let kernel = bramble::kernel::build_kernel().expect("kernel build");
    let mut tool = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .args(["qemu", "--no-network", "--no-card", "--kernel"])
        .arg(&kernel.raw)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start bramble qemu");
    let tool_pid = tool.id();
    let mut lines = BufReader::new(tool.stdout.take().unwrap()).lines();
    let banner = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.contains("ready:"));
    assert!(
        banner.is_some(),
        "the kernel booted and reached its main loop"
    );
    let qemu: Vec<u32> = children(tool_pid);
    assert_eq!(
        qemu.len(),
        1,
        "bramble runs exactly one QEMU child: {qemu:?}"
    );
    let qemu = qemu[0];

    let status = Command::new("kill")
        .args([signal, &tool_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = tool.try_wait().unwrap() {
            break exit;
        }
        if Instant::now() > deadline {
            let _ = tool.kill();
            let _ = Command::new("kill")
                .args(["-KILL", &qemu.to_string()])
                .status();
            panic!("bramble qemu did not stop within 20 s of {signal}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let qemu_left = is_running(qemu);
    if qemu_left {
        // Never leave it behind, even when the test fails.
        let _ = Command::new("kill")
            .args(["-KILL", &qemu.to_string()])
            .status();
    }
    assert!(exit.success(), "bramble exits cleanly on {signal}: {exit}");
    assert!(!qemu_left, "QEMU (pid {qemu}) was stopped too");
}

#[test]
fn sigterm_stops_qemu_cleanly() {
    stops_cleanly_on("-TERM");
}

#[test]
fn sigint_stops_qemu_cleanly() {
    stops_cleanly_on("-INT");
}

#[test]
fn qemu_help_lists_the_network_cards_and_the_model_options() {
    let output = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .args(["qemu", "--help"])
        .output()
        .expect("bramble qemu --help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "--nic <NIC>",
        "usb-net",
        "smsc95xx",
        "--tap <IFNAME>",
        "--model-log <FILE>",
        "--model-control <SOCKET>",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .args(["qemu", "--nic", "e1000"])
        .output()
        .expect("bramble qemu --nic e1000");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("possible values"));
}
