//! A QEMU guest under benchmark: started with its serial console on pipes, serial lines
//! awaitable and logged to a file, host CPU time read from /proc, stopped by its PID on drop.

use anyhow::{Context, bail};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A running QEMU process.
pub struct Guest {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// When QEMU was started.
    pub started: Instant,
}

impl Guest {
    /// Starts `qemu-system-arm` with `args`; every serial line is also appended to `serial_log`,
    /// QEMU's own messages go to the same path with `.stderr` added.
    pub fn start(args: &[OsString], serial_log: &Path) -> anyhow::Result<Guest> {
        Guest::start_in(None, args, serial_log)
    }

    /// [`Guest::start`] inside the network namespace `namespace` (/run/netns/NAME), where its
    /// TAP device lives: `nsenter` execs QEMU, so the PID held is QEMU's own.
    pub fn start_in(
        namespace: Option<&str>,
        args: &[OsString],
        serial_log: &Path,
    ) -> anyhow::Result<Guest> {
        let qemu = bramble_qemu::find_qemu().map_err(anyhow::Error::msg)?;
        let mut log = std::fs::File::create(serial_log)
            .with_context(|| format!("creating {}", serial_log.display()))?;
        let mut stderr_path = serial_log.as_os_str().to_owned();
        stderr_path.push(".stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .with_context(|| format!("creating {}", Path::new(&stderr_path).display()))?;
        let started = Instant::now();
        let mut command = match namespace {
            Some(name) => {
                let mut command = Command::new("nsenter");
                command
                    .arg(format!("--net=/run/netns/{name}"))
                    .arg("--")
                    .arg(qemu);
                command
            }
            None => Command::new(qemu),
        };
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context("starting qemu-system-arm (in a namespace: nsenter, from util-linux)")?;
        let stdin = child.stdin.take().context("QEMU's stdin")?;
        let stdout = child.stdout.take().context("QEMU's stdout")?;
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { break };
                let line = String::from_utf8_lossy(&line).trim_end().to_string();
                let _ = writeln!(log, "{line}");
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Guest {
            child,
            stdin,
            lines,
            started,
        })
    }

    /// Waits up to `timeout` for a serial line containing `needle`.
    pub fn wait_line(&mut self, needle: &str, timeout: Duration) -> Option<String> {
        self.wait_line_any(&[needle], timeout)
    }

    /// Waits up to `timeout` for a serial line containing any of `needles` (for lines that
    /// may or may not come before another: the first one seen is returned).
    pub fn wait_line_any(&mut self, needles: &[&str], timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if needles.iter().any(|needle| line.contains(needle)) => {
                    return Some(line);
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Drops serial lines received so far.
    pub fn drain(&mut self) {
        while self.lines.try_recv().is_ok() {}
    }

    /// Types `line` on the serial console.
    pub fn send_line(&mut self, line: &str) -> anyhow::Result<()> {
        self.stdin.write_all(format!("{line}\n").as_bytes())?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Fails if QEMU has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("QEMU exited ({status})");
        }
        Ok(())
    }

    /// Host CPU time QEMU has used so far (user + system, all threads).
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        cpu_time_from_stat(&stat, clock_ticks_per_second())
            .context("unexpected /proc/PID/stat format")
    }

    /// QEMU's peak resident memory on the host, in bytes.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kib| kib * 1024)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        // Child::kill signals exactly this PID; wait reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// utime + stime from the text of /proc/PID/stat (fields 14 and 15; the command name in
/// parentheses may contain spaces, so fields are counted after the last ')').
pub fn cpu_time_from_stat(stat: &str, ticks_per_second: u64) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': field 3 (state) is index 0, so field N is index N - 3.
    let user: u64 = fields.get(14 - 3)?.parse().ok()?;
    let system: u64 = fields.get(15 - 3)?.parse().ok()?;
    let ticks = user + system;
    Some(Duration::from_nanos(
        ticks * 1_000_000_000 / ticks_per_second,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "4242 (qemu system) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    4 0 1000 123456 789";
        assert_eq!(
            cpu_time_from_stat(stat, 100),
            Some(Duration::from_millis(3000))
        );
        assert_eq!(cpu_time_from_stat("garbage", 100), None);
    }
}
