//! Shared helpers for the integration tests: build the kernel once, boot QEMU guests whose
//! serial output can be awaited line by line, and always stop them by PID.

pub mod attack;
pub mod hoard;
pub mod monitor;
pub mod sntp;

use bramble::kernel::KernelArtifacts;
use bramble_qemu::QemuConfig;
use bramble_qemu::board_rules::{self, BoardRules};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
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

/// The board-rules plugin (qemu/plugin/boardrules.c), built once per test binary into
/// target/board-rules/.
pub fn board_rules_plugin() -> &'static PathBuf {
    static PLUGIN: OnceLock<PathBuf> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        board_rules::build_plugin(&bramble::workspace_root().join("target/board-rules"))
            .unwrap_or_else(|message| panic!("{message}"))
    })
}

/// The board-rules judge of one guest: its report and trace log in a folder of their own.
pub struct Judge {
    dir: tempfile::TempDir,
    rules: BoardRules,
}

impl Judge {
    /// Puts `config` under a fresh judge (see [`board_rules`]); every QEMU boot of the tests
    /// goes through here.
    pub fn attach(config: &mut QemuConfig) -> Judge {
        let dir = tempfile::Builder::new()
            .prefix("bramble-board-rules")
            .tempdir()
            .expect("a folder for the board-rules report");
        let rules = BoardRules::in_dir(board_rules_plugin(), dir.path());
        config.board_rules = Some(rules.clone());
        Judge { dir, rules }
    }

    /// What the plugin reported so far.
    pub fn verdict(&self) -> board_rules::Verdict {
        board_rules::verdict(&std::fs::read_to_string(&self.rules.report).unwrap_or_default())
    }

    /// The folder holding the report and the trace log.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// A running QEMU guest. Dropping it stops QEMU (SIGTERM by its PID, so the board-rules
/// plugin writes its totals; SIGKILL if it has not exited within 5 s) and reaps it, also when
/// the test fails or panics; then, unless the test is failing already, it fails the test if
/// the board-rules judge saw a rule broken.
pub struct Guest {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Every serial line seen so far, for failure messages.
    pub transcript: Vec<String>,
    judge: Option<Judge>,
}

impl Guest {
    /// Starts QEMU with `config` under the board-rules judge; serial output is collected line
    /// by line.
    pub fn start(config: &QemuConfig) -> Guest {
        let mut config = config.clone();
        let judge = Judge::attach(&mut config);
        let qemu = bramble_qemu::find_qemu().unwrap_or_else(|message| panic!("{message}"));
        let mut command = Command::new(qemu);
        command.args(config.args());
        Guest::start_judged(command, Some(judge))
    }

    /// Starts a prepared QEMU command line (for example through `nsenter` into a network
    /// namespace, which replaces itself with QEMU, so the PID is still QEMU's), built from a
    /// config that went through [`Judge::attach`] (or `None`, for a process that is not QEMU
    /// itself but starts one that its own code judges).
    pub fn start_judged(mut command: Command, judge: Option<Judge>) -> Guest {
        let (child, stdin, lines) = spawn_with_lines(&mut command, "qemu-system-arm");
        Guest {
            child,
            stdin,
            lines,
            transcript: Vec::new(),
            judge,
        }
    }

    /// Stops QEMU and returns what the board-rules judge saw (the guest is no longer judged on
    /// drop: for a test that expects violations).
    pub fn stop_and_judge(mut self) -> Option<board_rules::Verdict> {
        self.stop();
        self.judge.take().map(|judge| judge.verdict())
    }

    /// SIGTERM, up to 5 s for QEMU to exit (and the plugin to write its totals), then SIGKILL.
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Child::kill sends SIGKILL to exactly this PID; wait reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        self.stop();
        let Some(judge) = self.judge.take() else {
            return;
        };
        let verdict = judge.verdict();
        if !verdict.clean() && !std::thread::panicking() {
            let (spacing, barrier) = verdict.counts();
            panic!(
                "the board-rules judge saw rules broken ({spacing} EMMC writes too close, \
                 {barrier} peripheral switches without a barrier):\n{}",
                verdict.violations.join("\n")
            );
        }
    }
}

/// How long a boot may take before the test fails: generous, for a loaded 2-core CI machine.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(60);

/// Asks the kernel for its status and returns its stack line (the deepest use since boot).
/// Asserts the use stayed under half the stack: the boot paths and the main loop's deepest
/// call chains (a TLS handshake, the appliance's start) must keep a wide margin, because an
/// overflow silently corrupts the exception stacks below (boot/src/stack.rs).
pub fn check_stack(guest: &mut Guest) -> bramble_status::Stack {
    guest.send_line("status");
    let line = guest.expect_line(bramble_status::Stack::PREFIX, Duration::from_secs(10));
    let stack =
        bramble_status::Stack::parse(&line).unwrap_or_else(|| panic!("unreadable: {line:?}"));
    println!("{line}");
    assert!(
        stack.peak_bytes > 0 && stack.peak_bytes <= stack.size_bytes / 2,
        "the kernel's stack was used {} of {} bytes: over half",
        stack.peak_bytes,
        stack.size_bytes
    );
    stack
}

/// Asks the kernel for its status and returns its first line (time, memory, the loop).
pub fn up_status(guest: &mut Guest) -> bramble_status::Up {
    guest.send_line("status");
    let line = guest.expect_line(bramble_status::Up::PREFIX, Duration::from_secs(10));
    bramble_status::Up::parse(&line).unwrap_or_else(|| panic!("unreadable: {line:?}"))
}
