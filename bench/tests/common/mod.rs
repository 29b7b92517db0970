//! What the end-to-end bench tests share: when they must skip, and running the real
//! `bramble-bench` binary bounded in time.

use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Why the namespace and TAP tests cannot run here, if they cannot: not root, or without
/// `ip` or /dev/net/tun.
pub fn skip_reason() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root (network namespaces and TAP devices need it)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

/// How a bench run ended.
pub struct Run {
    /// The bench process's PID (its namespaces are named after it).
    pub pid: u32,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `bramble-bench ARGS --results RESULTS`; past `limit` it is sent SIGTERM (the bench
/// then stops what it started and deletes its namespaces), 20 s later SIGKILL, and the test
/// fails.
pub fn run_bench(args: &[&str], results: &Path, limit: Duration) -> Run {
    let mut bench = Command::new(env!("CARGO_BIN_EXE_bramble-bench"))
        .args(args)
        .arg("--results")
        .arg(results)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bramble-bench");
    let pid = bench.id();
    // Read both pipes on threads so that neither fills up.
    let mut stdout = bench.stdout.take().unwrap();
    let mut stderr = bench.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = bench.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&bench),
                rustix::process::Signal::TERM,
            );
            std::thread::sleep(Duration::from_secs(20));
            let _ = bench.kill();
            let _ = bench.wait();
            panic!("bramble-bench {args:?} overran {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Run {
        pid,
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Fails if the bench's namespaces (`bramble-bench-PID-...`) are still there.
pub fn assert_namespaces_gone(pid: u32) {
    let namespace = format!("bramble-bench-{pid}-");
    let namespaces = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&namespaces.stdout).contains(&namespace),
        "namespace {namespace} is still there"
    );
}
