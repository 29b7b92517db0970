//! `bramble-bench --tap --https`: HTTPS and HTTP/2 over the TAP link, Bramble against Linux
//! with nginx and OpenSSL (bench/baseline: the same machine, the same ECDSA P-256
//! certificate), after each system's plain HTTP levels. Per system:
//!
//! - at every level, N keep-alive clients asking for the 6 KB page again and again over
//!   HTTPS with HTTP/1.1 (`tls-page`), then over HTTP/2 (`h2-page`, one stream at a time per
//!   client), for `--duration` seconds, by h2load (nghttp2-client); each run judged: every
//!   client served, none waiting more than `--timeout` (see [`Verdict`]);
//! - full and resumed handshakes per second: `openssl s_time -new` / `-reuse`, 10 clients,
//!   each a new TCP connection, a handshake and the page, over and over;
//! - MB/s of the 1 MiB file over HTTPS, one client on one kept-open connection (h2load);
//! - with `--icount-duration` > 0, a second boot under `-icount shift=0` with the
//!   benchmark's TCG plugin (bench/plugin/tbcount.c) counting every guest instruction: full
//!   handshakes (h2load, one request per new connection) offering only X25519, then only
//!   P-256, instructions per handshake less the idle rate measured in the same boot.
//!
//! h2load does not say which client got which answer: "every client served" is read from its
//! per-client request-rate spread (the least-served client's rate above 0) with no failed,
//! errored or timed-out request; "none waiting over the timeout" from the slowest request and
//! the slowest first byte, and h2load's inactivity timeout (`-N`, the run's `--timeout`),
//! which ends a connection that waits longer and counts its request as timed out.

use super::guest::Guest;
use super::load::{self, LoadRun};
use super::profile::{self, Profiler};
use super::report::{Report, SystemReport};
use super::systems::{self, Link, System, TAP_GUEST};
use super::{BenchArgs, probe};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The key-exchange groups whose full handshakes are counted under `-icount`.
pub const GROUPS: [&str; 2] = ["X25519", "P-256"];
/// Full handshakes per group in the instruction count: rounds of [`COUNT_CLIENTS`] clients.
const COUNT_ROUNDS: u32 = 3;
/// Clients (new connections, one request each) per counting round.
const COUNT_CLIENTS: u32 = 10;
/// Idle window of the instruction-counting boot, for the idle rate subtracted.
const COUNT_IDLE: Duration = Duration::from_secs(5);

/// One h2load report, as printed by nghttp2 1.52.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct H2load {
    /// `finished in`: the run's length in seconds.
    pub seconds: f64,
    /// Requests counted by h2load: total, started, done, succeeded, failed, errored, timeout.
    pub total: u64,
    /// Started.
    pub started: u64,
    /// Done.
    pub done: u64,
    /// Succeeded (2xx and 3xx... h2load counts any complete answer it could parse).
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Errored (connection failures).
    pub errored: u64,
    /// Timed out (`-N`: no activity on the connection for that long).
    pub timeout: u64,
    /// Answers with status 2xx.
    pub status_2xx: u64,
    /// Answers with status 3xx, 4xx or 5xx.
    pub status_other: u64,
    /// Response body bytes (`data`).
    pub data_bytes: u64,
    /// `time for request` in ms: min, max, mean.
    pub request_ms: [f64; 3],
    /// `time for connect` in ms (TCP and TLS): min, max, mean.
    pub connect_ms: [f64; 3],
    /// `time to 1st byte` in ms, per client: min, max, mean.
    pub first_byte_ms: [f64; 3],
    /// Each client's requests per second: min, max, mean.
    pub client_rps: [f64; 3],
    /// The TLS version, cipher, key exchange and protocol h2load reported (first client).
    pub tls: String,
}

/// The judgement of one keep-alive run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Every client got answers, and no request failed, errored or timed out.
    pub every_client_served: bool,
    /// No request and no first byte took longer than the timeout.
    pub none_over_timeout: bool,
}

impl H2load {
    /// Good answers (2xx) per second of the run.
    pub fn requests_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.status_2xx as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Response body megabytes (10^6 bytes) per second.
    pub fn megabytes_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.data_bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }

    /// The run judged against `timeout`.
    pub fn verdict(&self, timeout: Duration) -> Verdict {
        let limit = timeout.as_secs_f64() * 1000.0;
        Verdict {
            every_client_served: self.status_2xx > 0
                && self.client_rps[0] > 0.0
                && self.failed == 0
                && self.errored == 0
                && self.timeout == 0
                && self.status_other == 0,
            none_over_timeout: self.timeout == 0
                && self.request_ms[1] <= limit
                && self.first_byte_ms[1] <= limit,
        }
    }
}

/// A duration as h2load prints it (`812us`, `3.41ms`, `1.20s`, `1m2.5s` never: h2load stops
/// at seconds) in milliseconds.
fn milliseconds(text: &str) -> Option<f64> {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else {
        (text.strip_suffix('s')?, 1000.0)
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}

/// Reads h2load's report.
pub fn parse_h2load(text: &str) -> anyhow::Result<H2load> {
    let mut report = H2load::default();
    let mut found = (false, false);
    let mut tls = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = [
            "TLS Protocol:",
            "Cipher:",
            "Server Temp Key:",
            "Application protocol:",
        ]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix))
            && tls.len() < 4
        {
            tls.push(rest.trim().to_string());
            continue;
        }
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| !w.is_empty())
            .collect();
        match words.as_slice() {
            ["finished", "in", seconds, ..] => {
                report.seconds = milliseconds(seconds).context("finished in")? / 1000.0;
                found.0 = true;
            }
            ["requests:", rest @ ..] => {
                let numbers: Vec<u64> = rest.iter().filter_map(|w| w.parse().ok()).collect();
                let [total, started, done, succeeded, failed, errored, timeout] = numbers[..]
                else {
                    bail!("requests line: {line}");
                };
                (report.total, report.started, report.done, report.succeeded) =
                    (total, started, done, succeeded);
                (report.failed, report.errored, report.timeout) = (failed, errored, timeout);
                found.1 = true;
            }
            [
                "status",
                "codes:",
                ok,
                "2xx",
                redirect,
                "3xx",
                client,
                "4xx",
                server,
                "5xx",
            ] => {
                report.status_2xx = ok.parse()?;
                report.status_other =
                    redirect.parse::<u64>()? + client.parse::<u64>()? + server.parse::<u64>()?;
            }
            ["traffic:", ..] => {
                // `122.48KB (125420) data`: the number in brackets before "data".
                let data = words
                    .windows(2)
                    .find(|pair| pair[1] == "data")
                    .map(|pair| pair[0].trim_matches(|c| c == '(' || c == ')'))
                    .context("traffic line without data")?;
                report.data_bytes = data.parse()?;
            }
            ["time", "for", "request:", min, max, mean, ..] => {
                report.request_ms = three(min, max, mean)?;
            }
            ["time", "for", "connect:", min, max, mean, ..] => {
                report.connect_ms = three(min, max, mean)?;
            }
            ["time", "to", "1st", "byte:", min, max, mean, ..] => {
                report.first_byte_ms = three(min, max, mean)?;
            }
            ["req/s", ":", min, max, mean, ..] => {
                report.client_rps = [min.parse()?, max.parse()?, mean.parse()?];
            }
            _ => {}
        }
    }
    if !(found.0 && found.1) {
        bail!("no 'finished in' or 'requests:' line");
    }
    report.tls = tls.join(", ");
    Ok(report)
}

fn three(min: &str, max: &str, mean: &str) -> anyhow::Result<[f64; 3]> {
    let read = |w: &str| milliseconds(w).with_context(|| format!("duration {w:?}"));
    Ok([read(min)?, read(max)?, read(mean)?])
}

/// What one h2load run asks for.
#[derive(Clone, Debug)]
pub struct H2loadRun<'a> {
    /// `https://192.168.77.2/...`.
    pub url: &'a str,
    /// Clients (one connection each).
    pub clients: u32,
    /// HTTP/1.1 (`--h1`) instead of h2.
    pub h1: bool,
    /// Keep asking for this long (`-D`); `None`: each client asks for each URL once.
    pub duration: Option<Duration>,
    /// `-N`: a connection silent this long is ended, its request counted as timed out.
    pub timeout: Duration,
    /// Offer only this key-exchange group (`--groups`).
    pub group: Option<&'a str>,
    /// More URLs, asked for in turn after `url` by each client (a visit's assets).
    pub more_urls: &'a [String],
    /// Requests in flight per connection (`--max-concurrent-streams`; HTTP/1.1: pipelined).
    pub streams: u32,
}

impl H2loadRun<'_> {
    /// h2load's arguments.
    pub fn args(&self) -> Vec<String> {
        let clients = self.clients.max(1);
        let mut args = vec![
            format!("--clients={clients}"),
            format!("--threads={}", clients.min(2)),
            format!("--max-concurrent-streams={}", self.streams.max(1)),
            format!(
                "--connection-inactivity-timeout={}",
                self.timeout.as_secs().max(1)
            ),
        ];
        match self.duration {
            Some(duration) => args.push(format!("--duration={}", duration.as_secs().max(1))),
            None => args.push(format!(
                "--requests={}",
                clients as usize * (1 + self.more_urls.len())
            )),
        }
        if self.h1 {
            args.push("--h1".into());
        }
        if let Some(group) = self.group {
            args.push(format!("--groups={group}"));
        }
        args.push(self.url.into());
        args.extend(self.more_urls.iter().cloned());
        args
    }
}

/// Runs h2load on the calling thread's network namespace (a child inherits it), keeps its
/// report in `report_file` and parses it. Killed (by PID) when it overruns its bound.
pub fn run_h2load(run: &H2loadRun, report_file: &Path) -> anyhow::Result<H2load> {
    let output = std::fs::File::create(report_file)
        .with_context(|| format!("creating {}", report_file.display()))?;
    let mut child = Command::new("h2load")
        .args(run.args())
        .stdout(output.try_clone()?)
        .stderr(output)
        .stdin(Stdio::null())
        .spawn()
        .context("starting h2load (Debian: nghttp2-client)")?;
    // Every client's handshake comes first: at a level of many new TLS clients, as long as
    // their handshakes take at 10 a second (nginx + OpenSSL does 14.8 in the emulated Pi).
    let handshakes = Duration::from_millis(100) * run.clients.max(1);
    let bound = run.duration.unwrap_or(Duration::ZERO)
        + run.timeout * 6
        + handshakes
        + Duration::from_secs(60);
    let deadline = Instant::now() + bound;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("h2load overran {} s; killed", bound.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(report_file)?;
    let parsed = parse_h2load(&text);
    if !status.success() && parsed.is_err() {
        bail!("h2load failed ({status}): {}", text.trim());
    }
    parsed.with_context(|| format!("unexpected h2load report in {}", report_file.display()))
}

/// One keep-alive level over HTTPS.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpsLevel {
    /// `tls-page` (HTTP/1.1 over TLS) or `h2-page`.
    pub target: String,
    /// Clients.
    pub clients: u32,
    /// h2load's figures, or why the run failed.
    pub figures: Option<H2load>,
    /// The judgement.
    pub verdict: Option<Verdict>,
    /// Why there are no figures.
    pub failure: Option<String>,
    /// QEMU's host CPU over the run, percent of a core.
    pub qemu_cpu_percent: Option<f64>,
    /// Bramble's HTTPS state halfway through the run (connections open, TLS heap).
    pub guest_tls_mid_run: Option<TlsState>,
    /// Judged with one request per client (h2load's timed run aborted), not for
    /// `--duration` s.
    #[serde(default)]
    pub one_request_each: bool,
}

/// Bramble's HTTPS state from its `status` lines: connections open, the TLS heap, RAM.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TlsState {
    /// HTTPS connections open (`status: https open N`).
    pub open: u64,
    /// Idle sessions suspended now (their slot given back).
    pub suspended_now: u32,
    /// TLS heap in use, bytes.
    pub heap_in_use_bytes: u64,
    /// RAM in use (`status: up ... memory used N KiB`), bytes.
    pub memory_used_bytes: u64,
    /// The `status: https open` line as printed.
    pub line: String,
    /// The HTTPS pool's line (`status: https connections open N (peak N), leased N, waiting
    /// N, ...`): TCP connections, sessions leased, connections waiting for one.
    pub pool_line: String,
}

/// Reads [`TlsState`] from Bramble's console (`None` for the Linux guest or without HTTPS).
pub fn tls_state(guest: &mut Guest) -> Option<TlsState> {
    guest.drain();
    guest.send_line("status").ok()?;
    let up = guest.wait_line("status: up", Duration::from_secs(10))?;
    let memory_used_kib = bramble_status::Up::parse(&up)?.memory_used_kib as u64;
    let line = guest.wait_line("status: https open", Duration::from_secs(3))?;
    let https = bramble_status::Https::parse(&line)?;
    let heap = https.heap.as_str();
    let heap_in_use_bytes = heap.split(" B in use").next()?.trim().parse().ok()?;
    let pool_line = guest
        .wait_line("status: https connections", Duration::from_secs(3))
        .map(|line| line.trim().to_string())
        .unwrap_or_default();
    Some(TlsState {
        open: https.open as u64,
        suspended_now: https.suspended_now,
        heap_in_use_bytes,
        memory_used_bytes: memory_used_kib * 1024,
        line: line.trim().to_string(),
        pool_line,
    })
}

/// New visitors per second (issue 32): each visitor a new connection (a full handshake:
/// h2load does not resume between clients) fetching the page and its assets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VisitRate {
    /// `h2` (one connection, the three requests as concurrent streams), `h1` (one keep-alive
    /// connection, the requests one after the other) or `h1x3` (three connections, one
    /// request each, as browsers open parallel connections for HTTP/1.1).
    pub way: String,
    /// Rounds of [`VISITORS`] visitors arriving at once.
    pub rounds: u32,
    /// Visitors who got the page and every asset.
    pub page_views: u64,
    /// Visitors sent.
    pub visitors: u64,
    /// Requests that failed, errored or timed out.
    pub failed: u64,
    /// The rounds' time as h2load measured it (for `h1x3`, each round's slowest of three).
    pub seconds: f64,
    /// Page views per second.
    pub per_second: f64,
    /// The slowest round, seconds.
    pub slowest_round_seconds: f64,
}

/// Visitors arriving at once in each round of the visit rows.
pub const VISITORS: u32 = 10;
/// Most rounds per way (the run is also bounded by `--duration`).
const MAX_VISIT_ROUNDS: u32 = 200;

/// Rounds of [`VISITORS`] new visitors (the page and [`systems::VISIT_ASSETS`]) for
/// `duration`, one way.
fn visits(
    way: &str,
    duration: Duration,
    timeout: Duration,
    dir: &Path,
) -> anyhow::Result<VisitRate> {
    let page = url("/");
    let assets: Vec<String> = systems::VISIT_ASSETS.iter().map(|a| url(a)).collect();
    let all: Vec<String> = std::iter::once(page.clone())
        .chain(assets.iter().cloned())
        .collect();
    let mut rate = VisitRate {
        way: way.into(),
        ..Default::default()
    };
    let started = Instant::now();
    while started.elapsed() < duration && rate.rounds < MAX_VISIT_ROUNDS {
        let round = rate.rounds;
        let one = |url: &str, more: &[String], h1: bool, streams: u32, name: String| {
            let run = H2loadRun {
                url,
                clients: VISITORS,
                h1,
                duration: None,
                timeout,
                group: None,
                more_urls: more,
                streams,
            };
            run_h2load(&run, &dir.join(name))
        };
        let (views, failed, seconds) = match way {
            "h2" | "h1" => {
                let f = one(
                    &page,
                    &assets,
                    way == "h1",
                    if way == "h2" { all.len() as u32 } else { 1 },
                    format!("h2load-visit-{way}-{round}.txt"),
                )?;
                (
                    f.status_2xx / all.len() as u64,
                    f.failed + f.errored + f.timeout,
                    f.seconds,
                )
            }
            "h1x3" => {
                let runs: Vec<anyhow::Result<H2load>> = std::thread::scope(|scope| {
                    let handles: Vec<_> = all
                        .iter()
                        .enumerate()
                        .map(|(n, u)| {
                            let name = format!("h2load-visit-h1x3-{round}-{n}.txt");
                            scope.spawn(move || one(u, &[], true, 1, name))
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join()
                                .unwrap_or_else(|_| Err(anyhow::anyhow!("panicked")))
                        })
                        .collect()
                });
                let runs = runs.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
                (
                    runs.iter().map(|f| f.status_2xx).min().unwrap_or(0),
                    runs.iter().map(|f| f.failed + f.errored + f.timeout).sum(),
                    runs.iter().map(|f| f.seconds).fold(0.0, f64::max),
                )
            }
            other => bail!("unknown visit way {other}"),
        };
        rate.rounds += 1;
        rate.visitors += VISITORS as u64;
        rate.page_views += views;
        rate.failed += failed;
        rate.seconds += seconds;
        rate.slowest_round_seconds = rate.slowest_round_seconds.max(seconds);
    }
    if rate.seconds > 0.0 {
        rate.per_second = rate.page_views as f64 / rate.seconds;
    }
    Ok(rate)
}

/// RAM taken by HTTPS connections held open and idle after one request (Bramble).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HeldConnections {
    /// `http/1.1` or `h2` (ALPN).
    pub protocol: String,
    /// Connections opened (openssl s_client, one request each, then silent).
    pub held: u32,
    /// Before they were opened.
    pub before: Option<TlsState>,
    /// Once open and idle, [`HOLD_SETTLE`] after the last was opened.
    pub held_state: Option<TlsState>,
    /// TLS heap per open connection above `before`, bytes.
    pub heap_per_connection_bytes: Option<f64>,
}

/// Connections held idle for the RAM figures.
pub const HELD: u32 = 50;
/// Wait after the last one is opened before reading the counters.
const HOLD_SETTLE: Duration = Duration::from_secs(5);

/// What an idle client sent after its handshake: one request on HTTP/1.1, or for h2 the
/// connection preface, empty SETTINGS, an ACK of the server's and a GET of `/` as HPACK
/// (indexed :method GET, :scheme https, :path /, :authority as a literal).
fn idle_client_bytes(h2: bool) -> Vec<u8> {
    let host = TAP_GUEST.to_string();
    if !h2 {
        return format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
    }
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS
    bytes.extend_from_slice(&[0, 0, 0, 4, 1, 0, 0, 0, 0]); // SETTINGS ACK
    let mut block = vec![0x82, 0x87, 0x84, 0x41, host.len() as u8];
    block.extend_from_slice(host.as_bytes());
    let len = block.len() as u32;
    bytes.extend_from_slice(&len.to_be_bytes()[1..]);
    bytes.extend_from_slice(&[1, 0x05, 0, 0, 0, 1]); // HEADERS, END_STREAM | END_HEADERS
    bytes.extend_from_slice(&block);
    bytes
}

/// Opens [`HELD`] HTTPS connections (one `openssl s_client` each, in the calling thread's
/// namespace), each sends one request and stays silent; reads Bramble's TLS heap before and
/// after. Every client is ended by its PID.
fn hold_idle(guest: &mut Guest, h2: bool, dir: &Path) -> anyhow::Result<HeldConnections> {
    use std::io::Write;
    let protocol = if h2 { "h2" } else { "http/1.1" };
    let mut held = HeldConnections {
        protocol: protocol.into(),
        held: HELD,
        before: tls_state(guest),
        ..Default::default()
    };
    let bytes = idle_client_bytes(h2);
    let log = std::fs::File::create(dir.join(format!("held-{}.txt", protocol.replace('/', ""))))?;
    let mut children = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for _ in 0..HELD {
            let mut child = Command::new("openssl")
                .args(["s_client", "-quiet", "-connect"])
                .arg(format!("{TAP_GUEST}:443"))
                .args(["-alpn", protocol])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(log.try_clone()?)
                .spawn()
                .context("starting openssl s_client")?;
            child
                .stdin
                .as_mut()
                .context("s_client's stdin")?
                .write_all(&bytes)?;
            children.push(child);
            // The handshake budget admits about 48 a second; do not make it defer.
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(HOLD_SETTLE);
        Ok(())
    })();
    held.held_state = tls_state(guest);
    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    result?;
    if let (Some(before), Some(after)) = (&held.before, &held.held_state) {
        let added = after.open.saturating_sub(before.open);
        if added > 0 {
            held.heap_per_connection_bytes = Some(
                (after.heap_in_use_bytes as f64 - before.heap_in_use_bytes as f64) / added as f64,
            );
        }
    }
    Ok(held)
}

/// Handshakes per second by `openssl s_time`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HandshakeRate {
    /// Connections completed, each with a handshake and the page.
    pub connections: u64,
    /// Of them, resumed (s_time's `r`).
    pub resumed: u64,
    /// Seconds of the run.
    pub seconds: f64,
    /// Connections per second.
    pub per_second: f64,
    /// Failed connections.
    pub failures: u64,
}

/// Guest instructions per full handshake offering one group.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupCost {
    /// X25519 or P-256.
    pub group: String,
    /// Handshakes completed (each a new connection with one page).
    pub handshakes: u64,
    /// Every guest instruction over the run, less the idle rate over its wall time.
    pub instructions: u64,
    /// Per handshake.
    pub instructions_per_handshake: f64,
    /// What h2load said the connections used.
    pub tls: String,
}

/// Everything `--https` measured on one system.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HttpsReport {
    /// Keep-alive levels, HTTP/1.1 over TLS and h2.
    pub levels: Vec<HttpsLevel>,
    /// Full handshakes per second (`s_time -new`).
    pub full: Option<HandshakeRate>,
    /// Resumed handshakes per second (`s_time -reuse`).
    pub resumed: Option<HandshakeRate>,
    /// The 1 MiB file over HTTPS, one client, kept open.
    pub large_file: Option<H2load>,
    /// Instructions per full handshake, per group.
    pub group_costs: Vec<GroupCost>,
    /// The guest's idle instructions per second in the counting boot.
    pub idle_instructions_per_second: Option<f64>,
    /// New visitors' page views per second: h2, HTTP/1.1 on one connection, on three.
    pub visits: Vec<VisitRate>,
    /// Bramble: TLS heap with no HTTPS connection open, after the levels.
    pub tls_idle_state: Option<TlsState>,
    /// Bramble: RAM of idle HTTPS connections, HTTP/1.1 and h2.
    pub held: Vec<HeldConnections>,
    /// What went wrong or must be known.
    pub notes: Vec<String>,
}

impl HttpsReport {
    /// The level run for `target` at `clients`.
    pub fn level(&self, target: &str, clients: u32) -> Option<&HttpsLevel> {
        self.levels
            .iter()
            .find(|l| l.target == target && l.clients == clients)
    }
}

/// The guest's HTTPS URL for `path` on the TAP link.
fn url(path: &str) -> String {
    format!("https://{TAP_GUEST}{path}")
}

/// The keep-alive levels, the new visitors, the handshake rates and the large file, and on
/// Bramble (`bramble`) the RAM of idle connections, against a booted guest (the calling thread
/// is in its namespace).
pub(crate) fn measure(
    guest: &mut Guest,
    bramble: bool,
    args: &BenchArgs,
    dir: &Path,
) -> HttpsReport {
    let mut report = HttpsReport::default();
    let page = url("/");
    let timeout = Duration::from_secs(args.timeout);
    for (target, h1) in [("tls-page", true), ("h2-page", false)] {
        for &clients in &args.levels {
            let mut level = HttpsLevel {
                target: target.into(),
                clients,
                ..Default::default()
            };
            if !answers(guest) {
                level.failure = Some(super::NOT_ANSWERING.into());
                eprintln!("bench: https: {target} c={clients}: the guest does not answer");
                report.levels.push(level);
                continue;
            }
            let run = H2loadRun {
                url: &page,
                clients,
                h1,
                duration: Some(Duration::from_secs(args.duration)),
                timeout,
                group: None,
                more_urls: &[],
                streams: 1,
            };
            let cpu_before = guest.cpu_time().ok();
            let started = Instant::now();
            let report_file = dir.join(format!("h2load-{target}-c{clients}.txt"));
            // h2load on a thread of its own (threads inherit the namespace); this one reads
            // Bramble's TLS state halfway, while the clients are connected.
            let (ran, mid_run) = std::thread::scope(|scope| {
                let load = scope.spawn(|| run_h2load(&run, &report_file));
                std::thread::sleep(Duration::from_secs(args.duration) / 2);
                let mid_run = bramble.then(|| tls_state(guest)).flatten();
                let ran = load
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the h2load thread panicked")));
                (ran, mid_run)
            });
            level.guest_tls_mid_run = mid_run;
            // nghttp2 1.52's h2load aborts (a libev assertion, SIGABRT) when its timed run
            // ends while clients are still connecting (seen at 1,000 HTTPS clients): the
            // level is then judged with one request per client, which still says whether
            // every client was served and none waited over the timeout.
            let ran = match ran {
                Err(error) if format!("{error:#}").contains("SIGABRT") => {
                    report.notes.push(format!(
                        "{target} c={clients}: h2load --duration aborted (libev assertion while \
                         stopping clients still connecting); judged with one request per \
                         client instead"
                    ));
                    level.one_request_each = true;
                    std::thread::sleep(Duration::from_secs(2));
                    let once = H2loadRun {
                        duration: None,
                        ..run.clone()
                    };
                    run_h2load(
                        &once,
                        &dir.join(format!("h2load-{target}-c{clients}-once.txt")),
                    )
                }
                other => other,
            };
            match ran {
                Ok(figures) => {
                    level.verdict = Some(figures.verdict(timeout));
                    level.figures = Some(figures);
                }
                Err(error) => level.failure = Some(format!("{error:#}")),
            }
            if let (Some(before), Ok(after)) = (cpu_before, guest.cpu_time()) {
                level.qemu_cpu_percent =
                    Some(100.0 * (after - before).as_secs_f64() / started.elapsed().as_secs_f64());
            }
            eprintln!("bench: https: {}", describe(&level));
            report.levels.push(level);
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    for way in ["h2", "h1", "h1x3"] {
        if !answers(guest) {
            report
                .notes
                .push(format!("visits {way}: the guest did not answer before"));
            continue;
        }
        match visits(way, Duration::from_secs(args.duration), timeout, dir) {
            Ok(rate) => {
                eprintln!(
                    "bench: https: new visitors {way}: {:.2} page views/s ({} of {} in {} \
                     rounds, {:.1} s, {} requests failed, slowest round {:.2} s)",
                    rate.per_second,
                    rate.page_views,
                    rate.visitors,
                    rate.rounds,
                    rate.seconds,
                    rate.failed,
                    rate.slowest_round_seconds
                );
                report.visits.push(rate);
            }
            Err(error) => report.notes.push(format!("visits {way}: {error:#}")),
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    if bramble {
        // Let the levels' connections close before the idle reading.
        std::thread::sleep(Duration::from_secs(5));
        report.tls_idle_state = tls_state(guest);
        for h2 in [false, true] {
            match hold_idle(guest, h2, dir) {
                Ok(held) => {
                    eprintln!(
                        "bench: https: {} idle connections held ({}): TLS heap {} per \
                         connection; {}",
                        held.held,
                        held.protocol,
                        held.heap_per_connection_bytes
                            .map_or("?".into(), |b| format!("{b:.0} B")),
                        held.held_state
                            .as_ref()
                            .map_or("no status".to_string(), |s| format!(
                                "{}; {}",
                                s.line, s.pool_line
                            ))
                    );
                    report.held.push(held);
                }
                Err(error) => report
                    .notes
                    .push(format!("idle connections held: {error:#}")),
            }
            std::thread::sleep(Duration::from_secs(5));
        }
    }
    for resume in [false, true] {
        let run = LoadRun {
            url: &page,
            headers: &[],
            concurrency: load::MAX_S_TIME_CLIENTS,
            duration: Duration::from_secs(args.duration),
            timeout,
            namespace: None,
            script: None,
        };
        let name = if resume { "resumed" } else { "full" };
        if !answers(guest) {
            report.notes.push(format!(
                "{name} handshakes: the guest did not answer before"
            ));
            continue;
        }
        match load::run_s_time_mode(&run, &dir.join(format!("s_time-{name}.txt")), resume) {
            Ok((figures, resumed)) => {
                let rate = HandshakeRate {
                    connections: figures.responses,
                    resumed,
                    seconds: figures.elapsed_seconds,
                    per_second: figures.requests_per_second,
                    failures: figures.socket_errors.connect,
                };
                eprintln!(
                    "bench: https: {name} handshakes: {:.1}/s ({} connections, {} resumed, {} \
                     failed)",
                    rate.per_second, rate.connections, rate.resumed, rate.failures
                );
                if resume {
                    report.resumed = Some(rate);
                } else {
                    report.full = Some(rate);
                }
            }
            Err(error) => report.notes.push(format!("{name} handshakes: {error:#}")),
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let large = url(systems::FILE_1M_URL);
    let run = H2loadRun {
        url: &large,
        clients: 1,
        h1: true,
        duration: Some(Duration::from_secs(args.duration)),
        timeout,
        group: None,
        more_urls: &[],
        streams: 1,
    };
    match run_h2load(&run, &dir.join("h2load-large.txt")) {
        Ok(figures) => {
            eprintln!(
                "bench: https: 1 MiB file: {:.2} MB/s ({} answers)",
                figures.megabytes_per_second(),
                figures.status_2xx
            );
            report.large_file = Some(figures);
        }
        Err(error) => report.notes.push(format!("1 MiB file: {error:#}")),
    }
    report
}

/// Whether the guest still answers its page over plain HTTP (three tries, 10 s each).
fn answers(guest: &mut Guest) -> bool {
    if guest.check_alive().is_err() {
        return false;
    }
    (0..3).any(|_| {
        probe::get_at(
            std::net::SocketAddr::from((TAP_GUEST, 80)),
            "/",
            &[],
            Duration::from_secs(10),
        )
        .is_some_and(|r| r.status == 200)
    })
}

fn describe(level: &HttpsLevel) -> String {
    match (&level.figures, &level.verdict) {
        (Some(f), Some(v)) => format!(
            "{} c={}: {:.1} req/s, {} answers, failed {} errored {} timeout {}; request max \
             {:.0} ms, first byte max {:.0} ms, client req/s min {:.2}; every client served: \
             {}, none over the timeout: {}; {}",
            level.target,
            level.clients,
            f.requests_per_second(),
            f.status_2xx,
            f.failed,
            f.errored,
            f.timeout,
            f.request_ms[1],
            f.first_byte_ms[1],
            f.client_rps[0],
            v.every_client_served,
            v.none_over_timeout,
            f.tls
        ),
        _ => format!(
            "{} c={}: FAILED: {}",
            level.target,
            level.clients,
            level.failure.as_deref().unwrap_or("?")
        ),
    }
}

/// Boots `system` again under `-icount shift=0` with the counting plugin, on the calling
/// thread's TAP link, and counts the guest's instructions per full handshake for each of
/// [`GROUPS`].
pub(crate) fn count_handshakes(
    system: &System,
    namespace: &str,
    dir: &Path,
    report: &mut HttpsReport,
) -> anyhow::Result<()> {
    let dir = dir.join("icount");
    std::fs::create_dir_all(&dir)?;
    let profiler = Profiler::new(&bramble::workspace_root(), &dir)?;
    let ports = super::Ports { http: 0, https: 0 };
    let mut qemu_args = system.qemu_args(ports, true, Link::Tap);
    qemu_args.extend(profiler.qemu_args());
    let mut notes = Vec::new();
    let booted = super::tap::boot_with_timeout(
        system.name(),
        namespace,
        &qemu_args,
        &dir,
        &mut notes,
        super::ICOUNT_BOOT_TIMEOUT,
    )?;
    report.notes.extend(notes);
    let Some((guest, _)) = booted else {
        bail!("the -icount boot did not answer");
    };
    // Let boot-time work (Bramble's card cache warm-up, Linux's module loading) finish.
    std::thread::sleep(Duration::from_secs(20));
    let total = |snapshot: &profile::Snapshot| snapshot.values().sum::<u64>();
    let before = profiler.snapshot("idle-before")?;
    let started = Instant::now();
    std::thread::sleep(COUNT_IDLE);
    let after = profiler.snapshot("idle-after")?;
    let idle_rate =
        total(&profile::difference(&before, &after)?) as f64 / started.elapsed().as_secs_f64();
    report.idle_instructions_per_second = Some(idle_rate);
    eprintln!("bench: https: -icount idle: {idle_rate:.0} instructions/s");
    let page = url("/");
    for group in GROUPS {
        let name = group.replace('-', "");
        let before = profiler.snapshot(&format!("{name}-before"))?;
        let started = Instant::now();
        let mut handshakes = 0;
        let mut tls = String::new();
        for round in 0..COUNT_ROUNDS {
            let run = H2loadRun {
                url: &page,
                clients: COUNT_CLIENTS,
                h1: true,
                duration: None,
                timeout: Duration::from_secs(60),
                group: Some(group),
                more_urls: &[],
                streams: 1,
            };
            let figures = run_h2load(&run, &dir.join(format!("h2load-{name}-{round}.txt")))?;
            handshakes += figures.status_2xx;
            tls = figures.tls;
        }
        let after = profiler.snapshot(&format!("{name}-after"))?;
        let wall = started.elapsed().as_secs_f64();
        let counted = total(&profile::difference(&before, &after)?);
        let instructions = (counted as f64 - idle_rate * wall).max(0.0) as u64;
        if handshakes == 0 {
            report
                .notes
                .push(format!("{group}: no handshake completed under -icount"));
            continue;
        }
        let cost = GroupCost {
            group: group.into(),
            handshakes,
            instructions,
            instructions_per_handshake: instructions as f64 / handshakes as f64,
            tls,
        };
        eprintln!(
            "bench: https: {group}: {:.2} M instructions per full handshake ({} handshakes, \
             {counted} counted over {wall:.1} s; {})",
            cost.instructions_per_handshake / 1e6,
            cost.handshakes,
            cost.tls
        );
        report.group_costs.push(cost);
    }
    drop(guest);
    Ok(())
}

fn cell(value: Option<String>) -> String {
    value.unwrap_or_else(|| "-".into())
}

/// The HTTPS rows of the side-by-side table (TAP runs with `--https`).
pub fn rows(report: &Report) -> Vec<(String, Vec<String>, String)> {
    let systems = &report.systems;
    if systems.iter().all(|s| s.https.is_none()) {
        return Vec::new();
    }
    let https = |s: &SystemReport| s.https.clone().unwrap_or_default();
    let mut rows = Vec::new();
    let mut row = |label: String, cell: &dyn Fn(&HttpsReport) -> String| {
        let cells: Vec<String> = systems.iter().map(|s| cell(&https(s))).collect();
        rows.push((label, cells, String::new()));
    };
    for target in ["tls-page", "h2-page"] {
        for &clients in &report.levels {
            let level = |h: &HttpsReport| h.level(target, clients).cloned();
            row(format!("{target} c={clients}: req/s"), &|h| {
                cell(level(h).and_then(|l| {
                    let once = if l.one_request_each {
                        " (one request each)"
                    } else {
                        ""
                    };
                    l.figures
                        .map(|f| format!("{:.1}{once}", f.requests_per_second()))
                }))
            });
            row(
                format!("{target} c={clients}: every client served / none over the timeout"),
                &|h| {
                    cell(level(h).map(|l| match (l.verdict, l.failure) {
                        (Some(v), _) => format!(
                            "{} / {}",
                            if v.every_client_served { "yes" } else { "NO" },
                            if v.none_over_timeout { "yes" } else { "NO" }
                        ),
                        (None, failure) => format!("failed: {}", failure.unwrap_or_default()),
                    }))
                },
            );
            row(
                format!(
                    "{target} c={clients}: failed / errored / timed out; request max, first byte max (ms)"
                ),
                &|h| {
                    cell(level(h).and_then(|l| l.figures).map(|f| {
                        format!(
                            "{} / {} / {}; {:.0}, {:.0}",
                            f.failed, f.errored, f.timeout, f.request_ms[1], f.first_byte_ms[1]
                        )
                    }))
                },
            );
        }
    }
    for (way, how) in [
        ("h2", "h2, one connection, 3 streams"),
        ("h1", "HTTP/1.1, one keep-alive connection"),
        ("h1x3", "HTTP/1.1, three connections (as browsers)"),
    ] {
        row(
            format!("new visitors (a full handshake, the page and 2 assets), {how}: page views/s"),
            &|h| {
                cell(h.visits.iter().find(|v| v.way == way).map(|v| {
                    format!(
                        "{:.2} ({} of {} in {:.1} s, {} failed)",
                        v.per_second, v.page_views, v.visitors, v.seconds, v.failed
                    )
                }))
            },
        );
    }
    for protocol in ["http/1.1", "h2"] {
        row(
            format!("TLS heap per idle {protocol} connection, {HELD} held after a request (B)"),
            &|h| {
                cell(
                    h.held
                        .iter()
                        .find(|c| c.protocol == protocol)
                        .and_then(|c| {
                            let state = c.held_state.as_ref()?;
                            Some(format!(
                                "{:.0} ({} open, {} suspended)",
                                c.heap_per_connection_bytes?, state.open, state.suspended_now
                            ))
                        }),
                )
            },
        );
    }
    for target in ["tls-page", "h2-page"] {
        row(
            format!("TLS heap per active {target} connection halfway through each level (B)"),
            &|h| {
                let idle = h.tls_idle_state.as_ref().map_or(0, |s| s.heap_in_use_bytes);
                let cells: Vec<String> = h
                    .levels
                    .iter()
                    .filter(|l| l.target == target)
                    .filter_map(|l| {
                        let mid = l.guest_tls_mid_run.as_ref()?;
                        (mid.open > 0).then(|| {
                            format!(
                                "c={}: {:.0}",
                                l.clients,
                                (mid.heap_in_use_bytes as f64 - idle as f64) / mid.open as f64
                            )
                        })
                    })
                    .collect();
                cell((!cells.is_empty()).then(|| cells.join(", ")))
            },
        );
    }
    let rate = |r: &Option<HandshakeRate>| {
        cell(r.as_ref().map(|r| {
            format!(
                "{:.1} ({} of {} resumed, {} failed)",
                r.per_second, r.resumed, r.connections, r.failures
            )
        }))
    };
    row(
        "full handshakes/s, each a new connection + the page (s_time -new, 10 clients)".into(),
        &|h| rate(&h.full),
    );
    row(
        "resumed handshakes/s, each a new connection + the page (s_time -reuse, 10 clients)".into(),
        &|h| rate(&h.resumed),
    );
    row(
        "1 MiB file over HTTPS, one client kept open (MB/s)".into(),
        &|h| {
            cell(
                h.large_file
                    .as_ref()
                    .map(|f| format!("{:.2}", f.megabytes_per_second())),
            )
        },
    );
    for group in GROUPS {
        row(
            format!("guest instructions per full handshake + page, {group} only (M)"),
            &|h| {
                cell(h.group_costs.iter().find(|c| c.group == group).map(|c| {
                    format!(
                        "{:.2} ({} handshakes)",
                        c.instructions_per_handshake / 1e6,
                        c.handshakes
                    )
                }))
            },
        );
    }
    row(
        "negotiated (h2load, first client of the 10-client h1 run)".into(),
        &|h| {
            cell(
                h.level("tls-page", report.levels[0])
                    .and_then(|l| l.figures.clone())
                    .map(|f| f.tls),
            )
        },
    );
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "starting benchmark...
spawning thread #0: 1 total client(s). 20 total requests
TLS Protocol: TLSv1.3
Cipher: TLS_AES_256_GCM_SHA384
Server Temp Key: X25519 253 bits
Application protocol: h2
progress: 100% done

finished in 1.49s, 13.44 req/s, 84.04KB/s
requests: 20 total, 20 started, 20 done, 19 succeeded, 1 failed, 0 errored, 0 timeout
status codes: 19 2xx, 0 3xx, 1 4xx, 0 5xx
traffic: 125.06KB (128058) total, 2.13KB (2180) headers (space savings 39.11%), 122.48KB (125420) data
                     min         max         mean         sd        +/- sd
time for request:      812us    214.85ms    132.04ms     41.12ms    70.00%
time for connect:    93.54ms    192.29ms    142.92ms     69.83ms   100.00%
time to 1st byte:   279.42ms     10.41s    343.29ms     90.33ms   100.00%
req/s           :       6.72        6.88        6.80        0.12   100.00%
";

    #[test]
    fn h2load_reports_parse() {
        let r = parse_h2load(REPORT).unwrap();
        assert_eq!(r.seconds, 1.49);
        assert_eq!((r.total, r.succeeded, r.failed, r.timeout), (20, 19, 1, 0));
        assert_eq!(
            (r.status_2xx, r.status_other, r.data_bytes),
            (19, 1, 125_420)
        );
        assert_eq!(r.request_ms, [0.812, 214.85, 132.04]);
        assert_eq!(r.first_byte_ms[1], 10_410.0);
        assert_eq!(r.client_rps, [6.72, 6.88, 6.80]);
        assert_eq!(
            r.tls,
            "TLSv1.3, TLS_AES_256_GCM_SHA384, X25519 253 bits, h2"
        );
        assert!((r.requests_per_second() - 19.0 / 1.49).abs() < 1e-9);
        assert!((r.megabytes_per_second() - 0.125_420 / 1.49).abs() < 1e-9);
        assert!(
            parse_h2load("finished in 1s\n").is_err(),
            "no requests line"
        );
    }

    #[test]
    fn verdicts_need_every_client_and_no_wait_over_the_timeout() {
        let mut r = parse_h2load(REPORT).unwrap();
        let ten = Duration::from_secs(10);
        // A 4xx answer and a first byte after 10.41 s.
        assert_eq!(r.verdict(ten), Verdict::default());
        assert!(r.verdict(Duration::from_secs(11)).none_over_timeout);
        (r.failed, r.status_other, r.first_byte_ms[1]) = (0, 0, 300.0);
        assert_eq!(
            r.verdict(ten),
            Verdict {
                every_client_served: true,
                none_over_timeout: true
            }
        );
        // A client with no answer at all.
        r.client_rps[0] = 0.0;
        assert!(!r.verdict(ten).every_client_served);
        r.client_rps[0] = 1.0;
        r.timeout = 1;
        assert_eq!(r.verdict(ten), Verdict::default());
    }

    #[test]
    fn h2load_is_asked_as_configured() {
        let run = H2loadRun {
            url: "https://192.168.77.2/",
            clients: 1000,
            h1: true,
            duration: Some(Duration::from_secs(20)),
            timeout: Duration::from_secs(10),
            group: None,
            more_urls: &[],
            streams: 1,
        };
        assert_eq!(
            run.args(),
            [
                "--clients=1000",
                "--threads=2",
                "--max-concurrent-streams=1",
                "--connection-inactivity-timeout=10",
                "--duration=20",
                "--h1",
                "https://192.168.77.2/"
            ]
        );
        let burst = H2loadRun {
            clients: 1,
            h1: false,
            duration: None,
            group: Some("P-256"),
            ..run
        };
        let args = burst.args();
        assert!(args.contains(&"--requests=1".to_string()));
        assert!(args.contains(&"--threads=1".to_string()));
        assert!(args.contains(&"--groups=P-256".to_string()));
        assert!(!args.contains(&"--h1".to_string()));
    }

    #[test]
    fn the_table_gives_each_system_its_levels_rates_and_costs() {
        let figures = parse_h2load(REPORT).unwrap();
        let https = HttpsReport {
            levels: vec![HttpsLevel {
                target: "h2-page".into(),
                clients: 10,
                verdict: Some(figures.verdict(Duration::from_secs(10))),
                figures: Some(figures),
                ..Default::default()
            }],
            full: Some(HandshakeRate {
                connections: 100,
                seconds: 10.0,
                per_second: 10.0,
                ..Default::default()
            }),
            group_costs: vec![GroupCost {
                group: "P-256".into(),
                handshakes: 30,
                instructions: 600_000_000,
                instructions_per_handshake: 20e6,
                tls: String::new(),
            }],
            ..Default::default()
        };
        let report = Report {
            levels: vec![10],
            tap: true,
            systems: vec![
                SystemReport {
                    name: "bramble".into(),
                    https: Some(https),
                    ..Default::default()
                },
                SystemReport {
                    name: "linux".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let rows = rows(&report);
        let find = |label: &str| {
            rows.iter()
                .find(|row| row.0.starts_with(label))
                .unwrap_or_else(|| panic!("no row {label}"))
                .1
                .clone()
        };
        assert_eq!(find("h2-page c=10: req/s"), ["12.8", "-"]);
        assert_eq!(find("h2-page c=10: every client served"), ["NO / NO", "-"]);
        assert_eq!(find("tls-page c=10: req/s"), ["-", "-"]);
        assert_eq!(
            find("full handshakes/s")[0],
            "10.0 (0 of 100 resumed, 0 failed)"
        );
        assert_eq!(
            find("guest instructions per full handshake + page, P-256")[0],
            "20.00 (30 handshakes)"
        );
        assert_eq!(
            find("guest instructions per full handshake + page, X25519")[0],
            "-"
        );
        // Without --https there are no HTTPS rows at all.
        let plain = Report {
            systems: vec![SystemReport::default()],
            ..Default::default()
        };
        assert!(super::rows(&plain).is_empty());
    }

    #[test]
    fn durations_read_in_every_unit() {
        assert_eq!(milliseconds("812us"), Some(0.812));
        assert_eq!(milliseconds("3.5ms"), Some(3.5));
        assert_eq!(milliseconds("2.25s"), Some(2250.0));
        assert_eq!(milliseconds("12"), None);
    }
}
