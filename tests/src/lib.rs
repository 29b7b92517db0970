//! Shared helpers for the integration tests: build the kernel once, boot QEMU guests whose
//! serial output can be awaited line by line, and always stop them by PID.

pub mod attack;
pub mod hoard;
pub mod monitor;
pub mod sntp;

use bramble::kernel::KernelArtifacts;
use bramble_qemu::QemuConfig;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Starts `command` with piped stdin and stdout (stderr passes through) and a thread that
/// sends each stdout line, without its line ending, to the returned channel. `what` names
/// the program in the panic if it cannot start.
pub fn spawn_with_lines(
    command: &mut Command,
    what: &str,
) -> (Child, ChildStdin, Receiver<String>) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|error| panic!("starting {what}: {error}"));
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
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
    (child, stdin, lines)
}

/// Builds the kernel once per test binary (the build itself is incremental across binaries).
pub fn kernel() -> &'static KernelArtifacts {
    static KERNEL: OnceLock<KernelArtifacts> = OnceLock::new();
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    KERNEL.get_or_init(|| bramble::kernel::build_kernel().expect("kernel build"))
}

/// A running QEMU guest. Dropping it kills QEMU (by its PID) and reaps it, also when the test
/// fails or panics.
pub struct Guest {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Every serial line seen so far, for failure messages.
    pub transcript: Vec<String>,
}

impl Guest {
    /// Starts QEMU with `config`; serial output is collected line by line.
    pub fn start(config: &QemuConfig) -> Guest {
        let qemu = bramble_qemu::find_qemu().unwrap_or_else(|message| panic!("{message}"));
        let mut command = Command::new(qemu);
        command.args(config.args());
        Guest::start_command(command)
    }

    /// Starts a prepared QEMU command line (for example through `nsenter` into a network
    /// namespace, which replaces itself with QEMU, so the PID is still QEMU's).
    pub fn start_command(mut command: Command) -> Guest {
        let (child, stdin, lines) = spawn_with_lines(&mut command, "qemu-system-arm");
        Guest {
            child,
            stdin,
            lines,
            transcript: Vec::new(),
        }
    }

    /// Collects the serial lines that arrived so far, without waiting.
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.transcript.push(line);
        }
    }

    /// Waits up to `timeout` for a serial line containing `needle`; returns it. Panics with the
    /// transcript when it does not come (a hung boot fails in bounded time).
    pub fn expect_line(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_for(|line| line.contains(needle), timeout)
            .unwrap_or_else(|| {
                panic!(
                    "no serial line containing {needle:?} within {timeout:?}; \
                                       serial so far:\n{}",
                    self.transcript.join("\n")
                )
            })
    }

    /// Waits up to `timeout` for a line matching `predicate`.
    pub fn wait_for(
        &mut self,
        predicate: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if predicate(&line) {
                        return Some(line);
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    return None;
                }
            }
        }
    }

    /// Types `line` on the serial console.
    pub fn send_line(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .expect("writing to the serial console");
        self.stdin.flush().expect("flushing the serial console");
    }

    /// QEMU's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // Child::kill sends SIGKILL to exactly this PID; wait reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a boot may take before the test fails: generous, for a loaded 2-core CI machine.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
