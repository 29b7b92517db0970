//! The load generator: runs wrk (Debian package `wrk`) for a bounded time at one concurrency
//! and parses its report into [`LoadFigures`].

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one load run measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadFigures {
    /// Responses received (any status).
    pub responses: u64,
    /// Responses with a status other than 2xx or 3xx.
    pub bad_status: u64,
    /// Socket errors: connect, read, write and timeout, as wrk counts them.
    pub socket_errors: SocketErrors,
    /// Good responses (2xx or 3xx) per second of the run.
    pub requests_per_second: f64,
    /// Latency percentiles and maximum in milliseconds (of completed requests).
    pub latency_ms: Latency,
    /// How long the run took, as wrk reports it.
    pub elapsed_seconds: f64,
}

impl LoadFigures {
    /// Every failed request: bad status plus socket errors.
    pub fn errors(&self) -> u64 {
        self.bad_status + self.socket_errors.total()
    }
}

/// wrk's socket error counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketErrors {
    /// connect() failed.
    pub connect: u64,
    /// read failed or the connection closed early.
    pub read: u64,
    /// write failed.
    pub write: u64,
    /// no response within wrk's --timeout.
    pub timeout: u64,
}

impl SocketErrors {
    /// All four added up.
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout
    }
}

/// Latency figures in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
}

/// One load run's parameters.
#[derive(Clone, Debug)]
pub struct LoadRun<'a> {
    /// The URL (127.0.0.1 only).
    pub url: &'a str,
    /// Extra request headers.
    pub headers: &'a [(String, String)],
    /// Open connections.
    pub concurrency: u32,
    /// How long to keep the load on.
    pub duration: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Run wrk inside this network namespace (`ip netns exec NAME wrk ...`), so that its
    /// traffic stays there; `None`: in the caller's namespace.
    pub namespace: Option<&'a str>,
    /// A wrk Lua script that picks each request's path (`-s`: the `walk` target's list of a
    /// site's files); `None`: every request asks for the path of `url`.
    pub script: Option<&'a Path>,
}

/// Runs wrk, keeps its report in `report_file`, and parses it. wrk's own duration bounds the
/// run; a watchdog kills it (by PID) if it overruns by 30 s.
pub fn run_wrk(run: &LoadRun, report_file: &Path) -> anyhow::Result<LoadFigures> {
    let threads = run.concurrency.clamp(1, 2);
    let mut command = match run.namespace {
        // `ip netns exec` execs wrk in its own process: the child's PID stays wrk's.
        Some(namespace) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", namespace, "wrk"]);
            command
        }
        None => Command::new("wrk"),
    };
    command
        .arg(format!("-t{threads}"))
        .arg(format!("-c{}", run.concurrency))
        .arg(format!("-d{}s", run.duration.as_secs().max(1)))
        .arg(format!("--timeout={}s", run.timeout.as_secs().max(1)))
        .arg("--latency");
    for (name, value) in run.headers {
        command.arg("-H").arg(format!("{name}: {value}"));
    }
    if let Some(script) = run.script {
        command.arg("-s").arg(script);
    }
    if let Some(script) = run.script {
        command.arg("-s").arg(script);
    }
    command.arg(run.url);
    let output = std::fs::File::create(report_file)
        .with_context(|| format!("creating {}", report_file.display()))?;
    let mut child = command
        .stdout(output.try_clone()?)
        .stderr(output)
        .stdin(Stdio::null())
        .spawn()
        .context("starting wrk (install it with `apt-get install wrk`)")?;
    let deadline = Instant::now() + run.duration + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("wrk overran its duration by 30 s; killed");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let report = std::fs::read_to_string(report_file)?;
    if !status.success() {
        bail!("wrk failed ({status}): {}", report.trim());
    }
    parse_wrk(&report).with_context(|| format!("unexpected wrk report:\n{report}"))
}

/// Runs the load generator of `target`: openssl s_time for `tls-full` (wrk resumes TLS
/// sessions, so it cannot make full handshakes), wrk for every other target.
pub fn run_target(target: &str, run: &LoadRun, report_file: &Path) -> anyhow::Result<LoadFigures> {
    if target == "tls-full" {
        run_s_time(run, report_file)
    } else {
        run_wrk(run, report_file)
    }
}

/// Most `openssl s_time` processes a full-handshake run starts at once (one process is one
/// client, one connection at a time).
pub const MAX_S_TIME_CLIENTS: u32 = 10;

/// Runs `min(concurrency, MAX_S_TIME_CLIENTS)` `openssl s_time -new` clients against
/// `host:port` (`run.url` is `https://host:port/path`) for `run.duration`: each connects,
/// makes a full TLS handshake (no session is resumed), fetches the path with HTTP/1.0 and
/// closes, over and over. s_time stops at the first failed connection: that counts as a
/// connect error, and the client starts again for the time left. Keeps their reports in
/// `report_file`; responses are the connections completed, and there are no latency
/// percentiles (left 0). Each s_time is killed (by PID) if it overruns by 30 s.
pub fn run_s_time(run: &LoadRun, report_file: &Path) -> anyhow::Result<LoadFigures> {
    run_s_time_mode(run, report_file, false).map(|(figures, _)| figures)
}

/// [`run_s_time`], with `resume` = true `openssl s_time -reuse` instead of `-new`: each client
/// makes one full handshake, then resumes that session on every new connection. Also returns
/// the connections s_time marked as resumed (`r`).
pub fn run_s_time_mode(
    run: &LoadRun,
    report_file: &Path,
    resume: bool,
) -> anyhow::Result<(LoadFigures, u64)> {
    let mode = if resume { "-reuse" } else { "-new" };
    let rest = run
        .url
        .strip_prefix("https://")
        .with_context(|| format!("s_time needs an https URL, not {}", run.url))?;
    let (address, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let address = if address.contains(':') {
        address.to_string()
    } else {
        format!("{address}:443")
    };
    let path = if path.is_empty() { "/" } else { path };
    let clients = run.concurrency.clamp(1, MAX_S_TIME_CLIENTS);
    let started = Instant::now();
    let end = started + run.duration;
    let client = || -> anyhow::Result<(String, u64, u64)> {
        let mut report = String::new();
        let (mut connections, mut failures) = (0, 0);
        loop {
            let left = end.saturating_duration_since(Instant::now()).as_secs();
            if left == 0 {
                break;
            }
            let mut command = match run.namespace {
                Some(namespace) => {
                    let mut command = Command::new("ip");
                    command.args(["netns", "exec", namespace, "openssl"]);
                    command
                }
                None => Command::new("openssl"),
            };
            command
                .args(["s_time", mode, "-connect", &address, "-www", path, "-time"])
                .arg(left.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = command.spawn().context("starting openssl s_time")?;
            let deadline = Instant::now() + Duration::from_secs(left + 30);
            while child.try_wait()?.is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let output = child.wait_with_output()?;
            let text = String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr);
            report.push_str(&text);
            report.push_str("\n----\n");
            let outcome = parse_s_time(&text)
                .with_context(|| format!("unexpected openssl s_time report:\n{text}"))?;
            connections += outcome.connections;
            if outcome.bytes_per_connection == Some(0) {
                bail!("openssl s_time read no bytes per connection: the page did not come");
            }
            if !outcome.failed {
                break;
            }
            failures += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok((report, connections, failures))
    };
    let results: Vec<anyhow::Result<(String, u64, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients).map(|_| scope.spawn(client)).collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| bail!("an s_time client panicked"))
            })
            .collect()
    });
    let mut figures = LoadFigures::default();
    let mut report = String::new();
    for result in results {
        let (text, connections, failures) = result?;
        report.push_str(&text);
        figures.responses += connections;
        figures.socket_errors.connect += failures;
    }
    std::fs::write(report_file, &report)
        .with_context(|| format!("writing {}", report_file.display()))?;
    figures.elapsed_seconds = started.elapsed().as_secs_f64();
    figures.requests_per_second = figures.responses as f64 / figures.elapsed_seconds;
    Ok((figures, resumed_connections(&report)))
}

/// The connections `openssl s_time` marked as resumed: one `r` each on its progress lines
/// (lines of `*`, `r` and version letters only; a new handshake prints `*`).
pub fn resumed_connections(report: &str) -> u64 {
    report
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && line.chars().all(|c| matches!(c, '*' | 'r' | 't' | '3')))
        .map(|line| line.chars().filter(|&c| c == 'r').count() as u64)
        .sum()
}

/// What one `openssl s_time` run reported.
#[derive(Debug, PartialEq, Eq)]
pub struct SessionTimes {
    /// Connections completed.
    pub connections: u64,
    /// Bytes read per connection (`None` when the run ended with an error).
    pub bytes_per_connection: Option<u64>,
    /// The run stopped at a failed connection (`ERROR`).
    pub failed: bool,
}

/// Reads one `openssl s_time` report: its line `N connections in T real seconds, B bytes
/// read per connection`, or, when it stopped at a failed connection (`ERROR`), the
/// connections it had completed (one `*` or `r` each on its progress line).
pub fn parse_s_time(report: &str) -> anyhow::Result<SessionTimes> {
    for line in report.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [
            count,
            "connections",
            "in",
            _,
            "real",
            "seconds,",
            bytes,
            "bytes",
            ..,
        ] = words.as_slice()
        {
            return Ok(SessionTimes {
                connections: count.parse()?,
                bytes_per_connection: Some(bytes.parse()?),
                failed: false,
            });
        }
    }
    let Some(error) = report.find("ERROR") else {
        bail!("no 'N connections in T real seconds' line and no ERROR");
    };
    let progress = report[..error].rsplit('\n').next().unwrap_or("");
    Ok(SessionTimes {
        connections: progress.chars().filter(|c| matches!(c, '*' | 'r')).count() as u64,
        bytes_per_connection: None,
        failed: true,
    })
}

/// Parses wrk's report as printed with `--latency`.
pub fn parse_wrk(report: &str) -> anyhow::Result<LoadFigures> {
    let mut figures = LoadFigures::default();
    let mut max = None;
    for line in report.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", _average, _deviation, slowest, ..] if max.is_none() => {
                max = Some(milliseconds(slowest)?);
            }
            ["50%", value] => figures.latency_ms.p50 = milliseconds(value)?,
            ["90%", value] => figures.latency_ms.p90 = milliseconds(value)?,
            ["99%", value] => figures.latency_ms.p99 = milliseconds(value)?,
            [count, "requests", "in", elapsed, ..] => {
                figures.responses = count.parse()?;
                figures.elapsed_seconds = milliseconds(elapsed.trim_end_matches(','))? / 1000.0;
            }
            ["Socket", "errors:", rest @ ..] => {
                let numbers: Vec<u64> = rest
                    .iter()
                    .filter_map(|word| word.trim_end_matches(',').parse().ok())
                    .collect();
                let [connect, read, write, timeout] = numbers[..] else {
                    bail!("socket error line: {line}");
                };
                figures.socket_errors = SocketErrors {
                    connect,
                    read,
                    write,
                    timeout,
                };
            }
            ["Non-2xx", "or", "3xx", "responses:", count] => figures.bad_status = count.parse()?,
            _ => {}
        }
    }
    figures.latency_ms.max = max.context("no Latency line")?;
    if figures.elapsed_seconds <= 0.0 {
        bail!("no 'N requests in T' line");
    }
    let good = figures.responses.saturating_sub(figures.bad_status);
    figures.requests_per_second = good as f64 / figures.elapsed_seconds;
    Ok(figures)
}

/// A wrk time ("812.00us", "1.20ms", "3.05s", "1.00m") in milliseconds.
fn milliseconds(text: &str) -> anyhow::Result<f64> {
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .with_context(|| format!("time without unit: {text}"))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().with_context(|| format!("time: {text}"))?;
    let scale = match unit {
        "us" => 0.001,
        "ms" => 1.0,
        "s" => 1000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => bail!("unknown time unit in {text}"),
    };
    Ok(number * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumed_connections_are_counted_from_the_progress_lines() {
        let report = "Collecting connection statistics for 5 seconds\n*rrrr\nrr\n\n\
                      7 connections in 1.00s; 7.00 connections/user sec, bytes read 0\n\
                      7 connections in 5 real seconds, 6271 bytes read per connection\n\
                      ----\n****\n";
        assert_eq!(resumed_connections(report), 6);
    }

    const REPORT: &str = "Running 5s test @ http://127.0.0.1:18088/
  2 threads and 100 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   90.12ms   20.00ms    1.23s    80.00%
    Req/Sec    50.00     10.00    70.00     70.00%
  Latency Distribution
     50%   88.00ms
     75%  100.00ms
     90%  152.50ms
     99%  812.00us
  500 requests in 5.00s, 3.10MB read
  Socket errors: connect 1, read 2, write 3, timeout 4
  Non-2xx or 3xx responses: 20
Requests/sec:     99.80
Transfer/sec:    633.00KB
";

    #[test]
    fn parses_a_full_report() {
        let figures = parse_wrk(REPORT).unwrap();
        assert_eq!(figures.responses, 500);
        assert_eq!(figures.bad_status, 20);
        assert_eq!(figures.socket_errors.total(), 10);
        assert_eq!(figures.errors(), 30);
        assert_eq!(figures.latency_ms.p50, 88.0);
        assert_eq!(figures.latency_ms.p90, 152.5);
        assert!((figures.latency_ms.p99 - 0.812).abs() < 1e-9);
        assert_eq!(figures.latency_ms.max, 1230.0);
        assert_eq!(figures.elapsed_seconds, 5.0);
        assert!((figures.requests_per_second - 96.0).abs() < 1e-9);
    }

    #[test]
    fn a_clean_run_has_no_errors_and_a_broken_report_is_refused() {
        let clean: String = REPORT
            .lines()
            .filter(|line| !line.contains("errors") && !line.contains("Non-2xx"))
            .map(|line| format!("{line}\n"))
            .collect();
        let figures = parse_wrk(&clean).unwrap();
        assert_eq!(figures.errors(), 0);
        assert!((figures.requests_per_second - 100.0).abs() < 1e-9);
        assert!(parse_wrk("unable to connect to 127.0.0.1:1 Connection refused").is_err());
    }

    #[test]
    fn parses_an_s_time_report() {
        let report = "Collecting connection statistics for 5 seconds
tttttttttt

1077 connections in 0.58s; 1856.90 connections/user sec, bytes read 6754869
1077 connections in 6 real seconds, 6271 bytes read per connection
";
        assert_eq!(
            parse_s_time(report).unwrap(),
            SessionTimes {
                connections: 1077,
                bytes_per_connection: Some(6271),
                failed: false
            }
        );
        let stopped = "Collecting connection statistics for 10 seconds\n****ERROR\n";
        assert_eq!(
            parse_s_time(stopped).unwrap(),
            SessionTimes {
                connections: 4,
                bytes_per_connection: None,
                failed: true
            }
        );
        assert!(parse_s_time("connect: Connection refused\n").is_err());
    }

    #[test]
    fn time_units() {
        assert_eq!(milliseconds("2.00m").unwrap(), 120_000.0);
        assert_eq!(milliseconds("1.5s").unwrap(), 1500.0);
        assert!(milliseconds("12").is_err());
    }
}
