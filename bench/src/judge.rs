//! The judging load client: N clients, each on its own connection, asking for one URL again
//! and again with keep-alive for a bounded time, and a verdict on every connection and every
//! request. wrk counts neither a connection that never completes nor a request never
//! answered; this client does:
//!
//! - a client connects, sends, reads the whole answer (Content-Length), and asks again on the
//!   same connection;
//! - it retries on a new connection only where an HTTP client would: when a kept-alive
//!   connection it reused is closed under it before any byte of the answer (or the server
//!   said `Connection: close`), and that is not a failure;
//! - a failure is a connect that is refused, reset or not complete within the timeout
//!   (connect), a connection ended or broken before its answer was whole (read), an answer
//!   not whole within the timeout (timeout), or an answer that is not 2xx/3xx (status);
//!   after one the client connects again;
//! - it reports the clients never served, the requests answered after more than the timeout
//!   or never, latency percentiles, and the percentiles of each client's time to its first
//!   answer.
//!
//! One thread, epoll, non-blocking sockets; bounded in time (the run's duration, plus the
//! timeout for the answers still waited for) and in count (the clients given).

use rustix::event::epoll;
use rustix::net::{AddressFamily, SocketAddrV4, SocketFlags, SocketType, ipproto, sockopt};
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Longest run accepted.
pub const MAX_DURATION: Duration = Duration::from_secs(600);
/// Most clients accepted.
pub const MAX_CLIENTS: u32 = 20_000;

/// One judged run.
#[derive(Clone, Debug)]
pub struct JudgeRun {
    /// The server.
    pub target: SocketAddrV4,
    /// What to ask for.
    pub path: String,
    /// Extra header lines (name, value).
    pub headers: Vec<(String, String)>,
    /// Clients (connections at once).
    pub clients: u32,
    /// How long the clients keep asking.
    pub duration: Duration,
    /// Longest a connect, or an answer, may take before it counts as failed.
    pub timeout: Duration,
}

/// The `q` quantile (0-1) of `sorted` (ascending, not empty) by the nearest-rank method.
fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> T {
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    fn of(mut samples: Vec<u64>) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        samples.sort_unstable();
        let at = |q: f64| nearest_rank(&samples, q) as f64 / 1000.0;
        Percentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: samples[samples.len() - 1] as f64 / 1000.0,
        }
    }
}

/// How a count spreads over the clients: the least, the 1st percentile, the median, the 99th
/// percentile and the most.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spread {
    /// Least.
    pub min: u32,
    /// 1st percentile (99% of the clients have at least this many).
    pub p1: u32,
    /// Median.
    pub p50: u32,
    /// 99th percentile.
    pub p99: u32,
    /// Most.
    pub max: u32,
}

impl Spread {
    fn of(mut counts: Vec<u32>) -> Spread {
        if counts.is_empty() {
            return Spread::default();
        }
        counts.sort_unstable();
        let at = |q: f64| nearest_rank(&counts, q);
        Spread {
            min: counts[0],
            p1: at(0.01),
            p50: at(0.50),
            p99: at(0.99),
            max: counts[counts.len() - 1],
        }
    }
}

/// Failed attempts by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    /// Connects refused, reset, or not complete within the timeout.
    pub connect: u64,
    /// Connections ended or broken before the answer was whole.
    pub read: u64,
    /// Answers not whole within the timeout.
    pub timeout: u64,
    /// Answers with a status other than 2xx or 3xx.
    pub status: u64,
}

impl Failures {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.connect + self.read + self.timeout + self.status
    }
}

/// What a judged run found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JudgeReport {
    /// Clients.
    pub clients: u32,
    /// Seconds the clients kept asking.
    pub duration_seconds: f64,
    /// Good answers (2xx/3xx, whole).
    pub good: u64,
    /// Good answers per second of the run: those that arrived within the run's duration
    /// (the answers to requests still waiting when the clients stop asking, which arrive
    /// after it, would add up to one per client to a run that is not longer for it).
    pub requests_per_second: f64,
    /// Good answers that arrived after the clients stopped asking (in `good`, not in
    /// `requests_per_second`).
    #[serde(default)]
    pub good_after_duration: u64,
    /// Failures by kind.
    pub failures: Failures,
    /// New connections made because the server closed a kept-alive one (not failures).
    pub reconnects: u64,
    /// Clients that never got a good answer.
    pub clients_never_served: u32,
    /// Requests answered after more than the timeout, or never (timeouts included).
    pub requests_over_timeout: u64,
    /// Latency of good answers (from sending the request, or from the first attempt of a
    /// retried one).
    pub latency_ms: Percentiles,
    /// Each served client's time from the start of the run to its first good answer.
    pub first_answer_ms: Percentiles,
    /// Share of all clients whose first good answer came within 2 s, in percent.
    pub first_answer_within_2s_percent: f64,
    /// Connections open at once at most.
    pub most_connected: u32,
    /// How the good answers spread over the clients (fairness: with every client asking
    /// again as soon as it is answered, a fair server gives each about as many).
    #[serde(default)]
    pub answers_per_client: Spread,
}

/// Where a client is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not connected; connect again at this instant.
    Idle(Instant),
    /// connect() in flight since then.
    Connecting(Instant),
    /// A request sent at `.0` (its first attempt), on a connection that has answered before
    /// (`.1`), waiting for its answer.
    Waiting(Instant, bool),
}

struct Client {
    phase: Phase,
    stream: Option<TcpStream>,
    /// Bytes of the answer so far.
    received: Vec<u8>,
    /// When a retried request was first sent (kept across a reconnect).
    retry_from: Option<Instant>,
    /// The connection has answered at least once.
    reused: bool,
    first_answer: Option<Duration>,
    /// Good answers so far.
    answers: u32,
}

fn connect(target: SocketAddrV4) -> std::io::Result<TcpStream> {
    let fd: OwnedFd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        Some(ipproto::TCP),
    )?;
    sockopt::set_tcp_nodelay(&fd, true)?;
    match rustix::net::connect(&fd, &target) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
        Err(error) => return Err(error.into()),
    }
    Ok(TcpStream::from(fd))
}

/// The length of the whole answer at the front of `bytes` (head plus Content-Length body),
/// its status, and whether it asks to close, once the head is complete.
fn answer_shape(bytes: &[u8]) -> Option<(usize, u16, bool)> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let mut length = 0usize;
    let mut close = false;
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    let body = if status == 204 || status == 304 || (100..200).contains(&status) {
        0
    } else {
        length
    };
    Some((end + body, status, close))
}

/// Runs the clients (on the calling thread, which must be in the target's namespace).
pub fn run(run: &JudgeRun) -> JudgeReport {
    let clients = run.clients.clamp(1, MAX_CLIENTS) as usize;
    let duration = run.duration.min(MAX_DURATION);
    let mut request = format!("GET {} HTTP/1.1\r\nHost: {}\r\n", run.path, run.target.ip());
    for (name, value) in &run.headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let request = request.into_bytes();
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
    let started = Instant::now();
    let stop_asking = started + duration;
    let hard_end = stop_asking + run.timeout + Duration::from_secs(1);
    let mut all: Vec<Client> = (0..clients)
        .map(|_| Client {
            phase: Phase::Idle(started),
            stream: None,
            received: Vec::new(),
            retry_from: None,
            reused: false,
            first_answer: None,
            answers: 0,
        })
        .collect();
    let mut report = JudgeReport {
        clients: clients as u32,
        ..JudgeReport::default()
    };
    let mut latencies = Vec::new();
    let mut connected = 0u32;
    let mut events: Vec<epoll::Event> = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut next_scan = started;
    loop {
        let now = Instant::now();
        if now >= hard_end {
            break;
        }
        let asking = now < stop_asking;
        if !asking && all.iter().all(|c| !matches!(c.phase, Phase::Waiting(..))) {
            break;
        }
        if now >= next_scan {
            next_scan = now + Duration::from_millis(20);
            for (index, client) in all.iter_mut().enumerate() {
                match client.phase {
                    Phase::Idle(at) if asking && at <= now => {
                        start_connect(client, index, run.target, &epoll, now, &mut report);
                    }
                    Phase::Connecting(since) if now.duration_since(since) > run.timeout => {
                        report.failures.connect += 1;
                        drop_connection(client, &epoll, now, &mut connected, false);
                        client.retry_from = None;
                    }
                    Phase::Waiting(sent, _) if now.duration_since(sent) > run.timeout => {
                        report.failures.timeout += 1;
                        report.requests_over_timeout += 1;
                        drop_connection(client, &epoll, now, &mut connected, true);
                        client.retry_from = None;
                    }
                    _ => {}
                }
            }
        }
        if !bramble_testkit::epoll::wait(&epoll, &mut events, 10) {
            continue;
        }
        let now = Instant::now();
        for event in events.iter() {
            let (flags, data) = (event.flags, event.data);
            let index = data.u64() as usize;
            let Some(client) = all.get_mut(index) else {
                continue;
            };
            match client.phase {
                Phase::Connecting(_) => {
                    let result = client
                        .stream
                        .as_ref()
                        .map(bramble_testkit::epoll::connect_result)
                        .unwrap_or(Err(ErrorKind::NotConnected.into()));
                    if result.is_err() {
                        report.failures.connect += 1;
                        drop_connection(client, &epoll, now, &mut connected, false);
                        client.retry_from = None;
                        continue;
                    }
                    connected += 1;
                    report.most_connected = report.most_connected.max(connected);
                    let stream = client
                        .stream
                        .as_ref()
                        .expect("connecting client has a stream");
                    let _ = epoll::modify(
                        &epoll,
                        stream.as_fd(),
                        epoll::EventData::new_u64(index as u64),
                        epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
                    );
                    client.reused = false;
                    send_request(client, &request, now, &epoll, &mut connected, &mut report);
                }
                Phase::Waiting(sent, reused) => {
                    let mut ended = false;
                    let mut broken = false;
                    while let Some(stream) = client.stream.as_mut() {
                        match stream.read(&mut chunk) {
                            Ok(0) => {
                                ended = true;
                                break;
                            }
                            Ok(n) => client.received.extend_from_slice(&chunk[..n]),
                            Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                            Err(_) => {
                                broken = true;
                                break;
                            }
                        }
                    }
                    if let Some((length, status, close)) = answer_shape(&client.received)
                        && client.received.len() >= length
                    {
                        let took = now.duration_since(sent);
                        if took > run.timeout {
                            report.requests_over_timeout += 1;
                        }
                        if (200..400).contains(&status) {
                            report.good += 1;
                            if !asking {
                                report.good_after_duration += 1;
                            }
                            latencies.push(took.as_micros() as u64);
                            client.answers += 1;
                            client
                                .first_answer
                                .get_or_insert(now.duration_since(started));
                        } else {
                            report.failures.status += 1;
                        }
                        client.received.drain(..length);
                        client.retry_from = None;
                        client.reused = true;
                        if close || ended || broken || !client.received.is_empty() {
                            // The server closes (or said it will): a new connection, as any
                            // HTTP client makes; not a failure.
                            if close || ended || broken {
                                report.reconnects += 1;
                            }
                            drop_connection(client, &epoll, now, &mut connected, true);
                            client.phase = Phase::Idle(now);
                        } else if asking {
                            send_request(
                                client,
                                &request,
                                now,
                                &epoll,
                                &mut connected,
                                &mut report,
                            );
                        } else {
                            drop_connection(client, &epoll, now, &mut connected, true);
                        }
                        continue;
                    }
                    if ended || broken || flags.contains(epoll::EventFlags::ERR) {
                        if reused && client.received.is_empty() {
                            // A reused idle connection closed under the request: send it
                            // again on a new one, its clock still running.
                            report.reconnects += 1;
                            client.retry_from = Some(sent);
                            drop_connection(client, &epoll, now, &mut connected, true);
                            client.phase = Phase::Idle(now);
                        } else {
                            report.failures.read += 1;
                            client.retry_from = None;
                            drop_connection(client, &epoll, now, &mut connected, true);
                        }
                    }
                }
                Phase::Idle(_) => {}
            }
        }
    }
    // Whatever still waits at the hard end waited longer than the timeout.
    for client in &all {
        if let Phase::Waiting(sent, _) = client.phase
            && started.elapsed() > Duration::ZERO
            && Instant::now().duration_since(sent) > run.timeout
        {
            report.requests_over_timeout += 1;
            report.failures.timeout += 1;
        }
    }
    let elapsed = duration.as_secs_f64();
    report.duration_seconds = elapsed;
    let in_duration = report.good - report.good_after_duration;
    report.requests_per_second = in_duration as f64 / elapsed.max(1e-9);
    report.latency_ms = Percentiles::of(latencies);
    let firsts: Vec<u64> = all
        .iter()
        .filter_map(|c| c.first_answer.map(|d| d.as_micros() as u64))
        .collect();
    report.clients_never_served = (clients - firsts.len()) as u32;
    let within = firsts.iter().filter(|&&f| f <= 2_000_000).count();
    report.first_answer_within_2s_percent = 100.0 * within as f64 / clients as f64;
    report.first_answer_ms = Percentiles::of(firsts);
    report.answers_per_client = Spread::of(all.iter().map(|c| c.answers).collect());
    report
}

fn start_connect(
    client: &mut Client,
    index: usize,
    target: SocketAddrV4,
    epoll: &OwnedFd,
    now: Instant,
    report: &mut JudgeReport,
) {
    match connect(target) {
        Ok(stream) => {
            if epoll::add(
                epoll,
                stream.as_fd(),
                epoll::EventData::new_u64(index as u64),
                epoll::EventFlags::OUT | epoll::EventFlags::ERR,
            )
            .is_err()
            {
                report.failures.connect += 1;
                client.phase = Phase::Idle(now + Duration::from_millis(100));
                return;
            }
            client.stream = Some(stream);
            client.received.clear();
            client.phase = Phase::Connecting(now);
        }
        Err(_) => {
            // Out of ports or descriptors: try again shortly.
            report.failures.connect += 1;
            client.phase = Phase::Idle(now + Duration::from_millis(100));
        }
    }
}

fn send_request(
    client: &mut Client,
    request: &[u8],
    now: Instant,
    epoll: &OwnedFd,
    connected: &mut u32,
    report: &mut JudgeReport,
) {
    let sent = client.retry_from.unwrap_or(now);
    let reused = client.reused;
    let Some(stream) = client.stream.as_mut() else {
        return;
    };
    // A request is far smaller than a socket's send buffer: one write takes it whole.
    match stream.write(request) {
        Ok(n) if n == request.len() => client.phase = Phase::Waiting(sent, reused),
        _ => {
            report.failures.read += 1;
            client.retry_from = None;
            drop_connection(client, epoll, now, connected, true);
        }
    }
}

fn drop_connection(
    client: &mut Client,
    epoll: &OwnedFd,
    now: Instant,
    connected: &mut u32,
    was_connected: bool,
) {
    if let Some(stream) = client.stream.take() {
        let _ = epoll::delete(epoll, stream.as_fd());
        if was_connected {
            *connected = connected.saturating_sub(1);
        }
    }
    client.received.clear();
    client.reused = false;
    // A failed client waits a little before it connects again (a refused connect would
    // otherwise spin).
    client.phase = Phase::Idle(now + Duration::from_millis(100));
}

/// The judging client as a command line: `bramble-bench judge ADDRESS:PORT PATH CLIENTS
/// SECONDS` prints the report as JSON (for measuring other servers the same way).
pub fn parse_target(text: &str) -> anyhow::Result<SocketAddrV4> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("{text:?}: expected ADDRESS:PORT"))?;
    let ip: Ipv4Addr = host.parse()?;
    Ok(SocketAddrV4::new(ip, port.parse()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn answers_are_measured_by_their_head_and_length() {
        assert_eq!(
            answer_shape(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
            Some((41, 200, false))
        );
        assert_eq!(
            answer_shape(
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
            ),
            Some((67, 304, true))
        );
        assert_eq!(answer_shape(b"HTTP/1.1 200 OK\r\nContent-"), None);
    }

    #[test]
    fn percentiles_of_a_sample() {
        let p = Percentiles::of((1..=100).map(|ms| ms * 1000).collect());
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        assert_eq!(Percentiles::of(Vec::new()), Percentiles::default());
    }

    #[test]
    fn the_spread_of_answers_over_clients() {
        let s = Spread::of((1..=200).rev().collect());
        assert_eq!((s.min, s.p1, s.p50, s.p99, s.max), (1, 2, 100, 198, 200));
        assert_eq!(Spread::of(Vec::new()), Spread::default());
    }

    /// A server on 127.0.0.1 that answers each connection's first `answers` requests, then
    /// closes it (or, with `answers` = 0, resets without answering).
    fn server(answers: usize) -> (SocketAddrV4, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(address) = listener.local_addr().unwrap() else {
            unreachable!()
        };
        listener.set_nonblocking(true).unwrap();
        let handle = std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(4);
            while Instant::now() < end {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .unwrap();
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 4096];
                    for _ in 0..answers {
                        match stream.read(&mut buffer) {
                            Ok(n) if n > 0 => {}
                            _ => return,
                        }
                        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                    }
                });
            }
        });
        (address, handle)
    }

    #[test]
    fn a_server_that_closes_kept_alive_connections_serves_every_client_without_failures() {
        let (target, handle) = server(3);
        let report = run(&JudgeRun {
            target,
            path: "/".into(),
            headers: Vec::new(),
            clients: 20,
            duration: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
        });
        handle.join().unwrap();
        assert_eq!(report.clients_never_served, 0, "{report:?}");
        assert_eq!(report.failures.total(), 0, "{report:?}");
        assert!(report.good >= 60, "{report:?}");
        assert!(report.reconnects > 0, "{report:?}");
        // At most one answer per client comes after the clients stop asking, and those are
        // left out of the rate.
        assert!(report.good_after_duration <= 20, "{report:?}");
        let in_duration = (report.good - report.good_after_duration) as f64;
        assert_eq!(report.requests_per_second, in_duration / 2.0, "{report:?}");
        let spread = &report.answers_per_client;
        assert!(spread.min >= 1 && spread.max >= spread.p50, "{report:?}");
    }

    #[test]
    fn a_server_that_never_answers_is_judged_so() {
        let (target, handle) = server(0);
        let report = run(&JudgeRun {
            target,
            path: "/".into(),
            headers: Vec::new(),
            clients: 5,
            duration: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
        });
        handle.join().unwrap();
        assert_eq!(report.good, 0);
        assert_eq!(report.clients_never_served, 5);
        assert_eq!(report.answers_per_client, Spread::default());
        assert!(
            report.failures.read + report.failures.timeout > 0,
            "{report:?}"
        );
    }
}
