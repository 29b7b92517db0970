//! Helpers for the integration tests: a network namespace with a TAP link (the model's
//! wire), processes whose stdout is read line by line and which are killed by PID on drop,
//! and the model's control socket.

#![allow(dead_code)] // each test binary uses its own part

use bramble_testkit::netns::TapNamespace;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The TAP device inside the namespace.
pub const TAP: &str = "tap0";
/// The namespace's address on the TAP link.
pub const HOST_ADDRESS: &str = "192.168.77.1";

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("has a parent")
        .to_path_buf()
}

/// Whether this test can run here (root for namespaces and TAP, QEMU installed). Prints why
/// not.
pub fn can_run() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root {
        eprintln!("skipped: needs root (network namespaces, TAP devices)");
        return false;
    }
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed (tools/setup.sh installs it)");
        return false;
    }
    true
}

/// A network namespace `bramble-ur-<pid>-<n>` with `tap0` at 192.168.77.1/24 and a route
/// for multicast: the test kit's [`TapNamespace`]; deleted on drop.
pub struct Netns(TapNamespace);

impl Netns {
    /// Creates it.
    pub fn create() -> Netns {
        let netns = TapNamespace::create("bramble-ur", TAP, &format!("{HOST_ADDRESS}/24"));
        netns.ip(&["route", "add", "224.0.0.0/4", "dev", TAP]);
        Netns(netns)
    }

    /// A command running `program` inside the namespace (`nsenter` execs it: same PID).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.0.enter(program)
    }

    /// Runs a program in the namespace and returns (success, stdout).
    pub fn output(&self, program: &str, args: &[&str]) -> (bool, String) {
        let output = self.0.output(program, args);
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }

    /// `count` pings to `address`, 200 ms apart; the number answered.
    pub fn ping(&self, address: &str, count: u32) -> u32 {
        self.0.ping(address, count)
    }

    /// GET `url` with curl; the body, or `None`.
    pub fn curl(&self, url: &str) -> Option<Vec<u8>> {
        self.0.curl(url)
    }
}

/// A child process with its stdout read line by line; killed (by PID) and reaped on drop.
pub struct Process {
    child: Child,
    /// Kept open: QEMU's stdio chardev treats end-of-file on stdin as the console closing.
    _stdin: Option<std::process::ChildStdin>,
    lines: Receiver<String>,
    /// Every line seen so far.
    pub transcript: Vec<String>,
    name: String,
}

impl Process {
    /// Starts `command` (stdin an open pipe, stdout piped, stderr inherited).
    pub fn start(mut command: Command, name: &str) -> Process {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender
                    .send(line.trim_end_matches('\r').to_string())
                    .is_err()
                {
                    break;
                }
            }
        });
        Process {
            child,
            _stdin: stdin,
            lines,
            transcript: Vec::new(),
            name: name.to_string(),
        }
    }

    /// Starts `command` with its output lines read from the file `log` as it grows (QEMU's
    /// `-serial file:`): a fast-talking guest such as a booting Linux can stall QEMU's stdio
    /// serial backend on a pipe, a file never does.
    pub fn start_tailing(mut command: Command, log: &Path, name: &str) -> Process {
        let _ = std::fs::remove_file(log);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let (sender, lines) = mpsc::channel();
        let path = log.to_path_buf();
        std::thread::spawn(move || {
            let mut seen = 0usize;
            let mut partial = String::new();
            loop {
                std::thread::sleep(Duration::from_millis(50));
                let Ok(bytes) = std::fs::read(&path) else {
                    continue;
                };
                if bytes.len() <= seen {
                    continue;
                }
                partial.push_str(&String::from_utf8_lossy(&bytes[seen..]));
                seen = bytes.len();
                while let Some(end) = partial.find('\n') {
                    let line = partial[..end].trim_end_matches('\r').to_string();
                    partial.drain(..=end);
                    if sender.send(line).is_err() {
                        return;
                    }
                }
            }
        });
        Process {
            child,
            _stdin: None,
            lines,
            transcript: Vec::new(),
            name: name.to_string(),
        }
    }

    /// Waits for a line containing `needle`; panics with the transcript after `timeout`.
    pub fn expect_line(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_for(needle, timeout).unwrap_or_else(|| {
            let tail = self.transcript.len().saturating_sub(60);
            panic!(
                "{}: no line containing {needle:?} within {timeout:?}; last lines:\n{}",
                self.name,
                self.transcript[tail..].join("\n")
            )
        })
    }

    /// Waits for a line containing `needle`.
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if line.contains(needle) {
                        return Some(line);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `line` to the model's control socket; its answer.
pub fn control(socket: &Path, line: &str) -> String {
    bramble_usbredir::run::send_command(socket, line)
        .unwrap_or_else(|e| panic!("control {line:?}: {e}"))
}

/// The value of `key=` in a `stats:` line.
pub fn stat(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}
