//! Misbehaving clients and a polite one, for the attack tests and for measuring other servers
//! the same way: a [`Hoard`] keeps many connections open against one server from one thread
//! (epoll, non-blocking sockets), each with one kind of bad manners, and re-opens every one
//! the server closes; a [`Polite`] client meanwhile asks for a page on a fresh connection at a
//! fixed interval and records whether each answer came, whole and within a bound.
//!
//! Every loop here is bounded in time (the caller's run length, a hard cap per call) and in
//! count (the plan's connection numbers); connections go only to the address given.

use bramble_testkit::epoll::{connect_result, wait as epoll_wait};
use rustix::event::epoll;
use rustix::net::{AddressFamily, SocketAddrV4, SocketFlags, SocketType, ipproto, sockopt};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest any hoard or polite run may last, whatever the caller asks (a test that forgets to
/// stop one still ends).
pub const HARD_CAP: Duration = Duration::from_secs(600);
/// A connect that has not completed after this long is given up and tried again.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Pause before re-opening a connection the server closed or refused.
const REOPEN_DELAY: Duration = Duration::from_millis(20);
/// Receive buffer asked for on never-reading connections (the kernel rounds it up), so that
/// the host absorbs little of what the server sends.
const NEVER_READ_RCVBUF: i32 = 4096;

/// One kind of bad manners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Manner {
    /// Connects and never sends a byte.
    Silent,
    /// Sends a request header one byte at a time, `interval` apart, never finishing it.
    SlowHeader,
    /// Asks for a large file and never reads the answer.
    NeverRead,
    /// Asks for one page, reads the answer, then keeps the connection open and says nothing.
    KeepAliveIdle,
}

impl Manner {
    /// Every manner, in the order of [`HoardStats::by_manner`].
    pub const ALL: [Manner; 4] = [
        Manner::Silent,
        Manner::SlowHeader,
        Manner::NeverRead,
        Manner::KeepAliveIdle,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Manner::Silent => "silent",
            Manner::SlowHeader => "slow-header",
            Manner::NeverRead => "never-read",
            Manner::KeepAliveIdle => "keep-alive-idle",
        }
    }
}

/// How many connections of each manner to keep open, and against what.
#[derive(Clone, Debug)]
pub struct HoardPlan {
    /// The server.
    pub target: SocketAddr,
    /// Host header value.
    pub host: String,
    /// Connections per manner, in the order of [`Manner::ALL`].
    pub counts: [usize; 4],
    /// Time between the bytes of a slow header.
    pub slow_header_interval: Duration,
    /// What never-reading connections ask for (a large file).
    pub never_read_path: String,
    /// What idle keep-alive connections ask for once.
    pub keep_alive_path: String,
    /// Local address to connect from (`None`: the system's choice).
    pub source: Option<Ipv4Addr>,
    /// Connections opened per second at most while ramping up (0: no limit). Re-opens after
    /// the server closed one are not limited.
    pub open_rate: u32,
}

impl HoardPlan {
    /// The mixed hoarding load of issue 12: 300 silent, 300 slow-header (one byte every
    /// 5 s), 100 never-reading requests for `big_path`, 300 idle keep-alive connections.
    pub fn mixed(target: SocketAddr, big_path: &str) -> HoardPlan {
        HoardPlan {
            target,
            host: "bramble".to_string(),
            counts: [300, 300, 100, 300],
            slow_header_interval: Duration::from_secs(5),
            never_read_path: big_path.to_string(),
            keep_alive_path: "/".to_string(),
            source: None,
            open_rate: 0,
        }
    }

    /// Only `count` idle keep-alive connections, each asking for `/` once.
    pub fn keep_alive(target: SocketAddr, count: usize) -> HoardPlan {
        HoardPlan {
            counts: [0, 0, 0, count],
            ..HoardPlan::mixed(target, "/")
        }
    }
}

/// What a hoard did.
#[derive(Clone, Debug, Default)]
pub struct HoardStats {
    /// Connects attempted, per manner.
    pub connects: [u64; 4],
    /// Connections that completed the TCP handshake, per manner.
    pub established: [u64; 4],
    /// Connections the server ended (FIN or reset) after they were established, per manner.
    pub closed_by_server: [u64; 4],
    /// Connects refused, reset or timed out, per manner.
    pub connect_failures: [u64; 4],
    /// Most connections established at once (all manners).
    pub most_open: usize,
    /// Idle keep-alive connections whose one answer arrived.
    pub keep_alive_answered: u64,
}

impl HoardStats {
    /// One line for a report.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for manner in Manner::ALL {
            let i = manner.index();
            if self.connects[i] == 0 {
                continue;
            }
            parts.push(format!(
                "{}: {} connects, {} established, {} closed by the server, {} failed",
                manner.name(),
                self.connects[i],
                self.established[i],
                self.closed_by_server[i],
                self.connect_failures[i]
            ));
        }
        format!(
            "{}; at most {} open at once",
            parts.join("; "),
            self.most_open
        )
    }
}

/// A running hoard: its thread and the flag that stops it.
pub struct Hoard {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<HoardStats>>,
}

impl Hoard {
    /// Starts the hoard's thread; it runs until [`Hoard::stop`] (or [`HARD_CAP`]).
    pub fn start(plan: HoardPlan) -> Hoard {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || run_hoard(&plan, &flag));
        Hoard {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the hoard, closes all its connections and returns what it did.
    pub fn stop(mut self) -> HoardStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|thread| thread.join().expect("hoard thread"))
            .unwrap_or_default()
    }
}

impl Drop for Hoard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where one hoarding connection is.
enum Phase {
    /// Not open; open again at this instant.
    Waiting(Instant),
    /// connect() in progress since then.
    Connecting(Instant),
    /// Established: sending its bytes or sitting on the connection.
    Open,
}

struct Slot {
    manner: Manner,
    phase: Phase,
    stream: Option<TcpStream>,
    /// Bytes of the request still to send.
    to_send: Vec<u8>,
    /// When the next slow-header byte is due.
    next_byte: Instant,
    /// Response bytes read so far (keep-alive: until the answer is whole).
    received: Vec<u8>,
    /// The keep-alive answer has arrived; the connection now sits idle.
    answered: bool,
}

/// Opens a non-blocking TCP socket to `target` (optionally from `source`); the connect
/// completes later (epoll reports it writable).
pub fn start_connect(
    target: SocketAddr,
    source: Option<Ipv4Addr>,
    rcvbuf: Option<i32>,
) -> std::io::Result<TcpStream> {
    let family = match target {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd: OwnedFd = rustix::net::socket_with(
        family,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        Some(ipproto::TCP),
    )?;
    if let Some(bytes) = rcvbuf {
        sockopt::set_socket_recv_buffer_size(&fd, bytes as usize)?;
    }
    sockopt::set_tcp_nodelay(&fd, true)?;
    // A source address is an IPv4 one: over IPv6 the kernel picks.
    if let Some(source) = source
        && target.is_ipv4()
    {
        rustix::net::bind(&fd, &SocketAddrV4::new(source, 0))?;
    }
    match rustix::net::connect(&fd, &target) {
        Ok(()) | Err(rustix::io::Errno::INPROGRESS) => {}
        Err(error) => return Err(error.into()),
    }
    Ok(TcpStream::from(fd))
}

fn run_hoard(plan: &HoardPlan, stop: &AtomicBool) -> HoardStats {
    let started = Instant::now();
    let mut stats = HoardStats::default();
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
    let mut slots: Vec<Slot> = Vec::new();
    for manner in Manner::ALL {
        for _ in 0..plan.counts[manner.index()] {
            slots.push(Slot {
                manner,
                phase: Phase::Waiting(started),
                stream: None,
                to_send: Vec::new(),
                next_byte: started,
                received: Vec::new(),
                answered: false,
            });
        }
    }
    // Interleave the manners so a rate-limited ramp-up opens some of each early.
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by_key(|&i| {
        let manner = slots[i].manner.index();
        let rank = slots[..i]
            .iter()
            .filter(|s| s.manner.index() == manner)
            .count();
        (rank, manner)
    });
    let mut first_open_done = vec![false; slots.len()];
    let mut ramp_opened = 0u64;
    let mut events: Vec<epoll::Event> = Vec::with_capacity(1024);
    let mut open_now = 0usize;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < HARD_CAP {
        let now = Instant::now();
        // Timers: opens due, connects timed out, slow-header bytes due.
        for &i in &order {
            let slot = &mut slots[i];
            match slot.phase {
                Phase::Waiting(at) if at <= now => {
                    if !first_open_done[i] && plan.open_rate > 0 {
                        let allowed =
                            (started.elapsed().as_secs_f64() * f64::from(plan.open_rate)) as u64;
                        if ramp_opened >= allowed {
                            continue;
                        }
                        ramp_opened += 1;
                    }
                    first_open_done[i] = true;
                    open_slot(plan, slot, i, &epoll, &mut stats, now);
                }
                Phase::Connecting(since) if now.duration_since(since) > CONNECT_TIMEOUT => {
                    stats.connect_failures[slot.manner.index()] += 1;
                    close_slot(slot, &epoll, now);
                }
                Phase::Open
                    if slot.manner == Manner::SlowHeader
                        && slot.next_byte <= now
                        && !slot.to_send.is_empty() =>
                {
                    let byte = slot.to_send[0];
                    let stream = slot.stream.as_mut().expect("open slot has a stream");
                    match stream.write(&[byte]) {
                        Ok(1) => {
                            slot.to_send.remove(0);
                            if slot.to_send.is_empty() {
                                // Never finish: another header line, forever.
                                slot.to_send.extend_from_slice(b"X-Slow: a\r\n");
                            }
                        }
                        Ok(_) => {}
                        Err(error) if error.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => {
                            stats.closed_by_server[slot.manner.index()] += 1;
                            open_now = open_now.saturating_sub(1);
                            close_slot(slot, &epoll, now);
                            continue;
                        }
                    }
                    slot.next_byte = now + plan.slow_header_interval;
                }
                _ => {}
            }
        }
        if !epoll_wait(&epoll, &mut events, 20) {
            continue;
        }
        let now = Instant::now();
        for event in events.iter() {
            let (flags, data) = (event.flags, event.data);
            let i = data.u64() as usize;
            let Some(slot) = slots.get_mut(i) else {
                continue;
            };
            let Some(stream) = slot.stream.as_mut() else {
                continue;
            };
            if let Phase::Connecting(_) = slot.phase {
                if !flags.intersects(epoll::EventFlags::OUT | epoll::EventFlags::ERR) {
                    continue;
                }
                match connect_result(stream) {
                    Ok(()) => {
                        stats.established[slot.manner.index()] += 1;
                        open_now += 1;
                        stats.most_open = stats.most_open.max(open_now);
                        slot.phase = Phase::Open;
                        let _ = epoll::modify(
                            &epoll,
                            stream.as_fd(),
                            epoll::EventData::new_u64(i as u64),
                            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
                        );
                        slot.to_send = match slot.manner {
                            Manner::Silent => Vec::new(),
                            Manner::SlowHeader => {
                                format!("GET / HTTP/1.1\r\nHost: {}\r\n", plan.host).into_bytes()
                            }
                            Manner::NeverRead => format!(
                                "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
                                plan.never_read_path, plan.host
                            )
                            .into_bytes(),
                            Manner::KeepAliveIdle => format!(
                                "GET {} HTTP/1.1\r\nHost: {}\r\n\r\n",
                                plan.keep_alive_path, plan.host
                            )
                            .into_bytes(),
                        };
                        slot.next_byte = now;
                        if matches!(slot.manner, Manner::NeverRead | Manner::KeepAliveIdle) {
                            let request: Vec<u8> = std::mem::take(&mut slot.to_send);
                            let _ = stream.write(&request);
                        }
                    }
                    Err(_) => {
                        stats.connect_failures[slot.manner.index()] += 1;
                        close_slot(slot, &epoll, now);
                    }
                }
                continue;
            }
            // Open: the server sent something or closed.
            let mut ended = flags.intersects(epoll::EventFlags::ERR | epoll::EventFlags::HUP);
            if slot.manner != Manner::NeverRead {
                let mut chunk = [0u8; 16 * 1024];
                loop {
                    match stream.read(&mut chunk) {
                        Ok(0) => {
                            ended = true;
                            break;
                        }
                        Ok(n) => {
                            if slot.manner == Manner::KeepAliveIdle && !slot.answered {
                                slot.received.extend_from_slice(&chunk[..n]);
                                if response_complete(&slot.received) {
                                    slot.answered = true;
                                    slot.received = Vec::new();
                                    stats.keep_alive_answered += 1;
                                }
                            }
                        }
                        Err(error) if error.kind() == ErrorKind::WouldBlock => break,
                        Err(_) => {
                            ended = true;
                            break;
                        }
                    }
                }
            } else if flags.contains(epoll::EventFlags::RDHUP) {
                ended = true;
            }
            if ended {
                stats.closed_by_server[slot.manner.index()] += 1;
                open_now = open_now.saturating_sub(1);
                close_slot(slot, &epoll, now);
            }
        }
    }
    stats
}

fn open_slot(
    plan: &HoardPlan,
    slot: &mut Slot,
    index: usize,
    epoll: &OwnedFd,
    stats: &mut HoardStats,
    now: Instant,
) {
    stats.connects[slot.manner.index()] += 1;
    let rcvbuf = (slot.manner == Manner::NeverRead).then_some(NEVER_READ_RCVBUF);
    match start_connect(plan.target, plan.source, rcvbuf) {
        Ok(stream) => {
            let added = epoll::add(
                epoll,
                stream.as_fd(),
                epoll::EventData::new_u64(index as u64),
                epoll::EventFlags::OUT | epoll::EventFlags::ERR,
            );
            if added.is_err() {
                stats.connect_failures[slot.manner.index()] += 1;
                slot.phase = Phase::Waiting(now + REOPEN_DELAY);
                return;
            }
            slot.stream = Some(stream);
            slot.phase = Phase::Connecting(now);
            slot.answered = false;
            slot.received.clear();
        }
        Err(_) => {
            stats.connect_failures[slot.manner.index()] += 1;
            slot.phase = Phase::Waiting(now + REOPEN_DELAY);
        }
    }
}

fn close_slot(slot: &mut Slot, epoll: &OwnedFd, now: Instant) {
    if let Some(stream) = slot.stream.take() {
        let _ = epoll::delete(epoll, stream.as_fd());
        drop(stream);
    }
    slot.to_send.clear();
    slot.received.clear();
    slot.answered = false;
    slot.phase = Phase::Waiting(now + REOPEN_DELAY);
}

/// Whether `bytes` hold one whole HTTP response with a Content-Length body (or none).
pub fn response_complete(bytes: &[u8]) -> bool {
    response_length(bytes).is_some_and(|length| bytes.len() >= length)
}

/// The length of the response at the front of `bytes` (head plus Content-Length body), once
/// its head is complete. A response without Content-Length counts as head only.
pub fn response_length(bytes: &[u8]) -> Option<usize> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&bytes[..end]).ok()?;
    let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
    let no_body = status == 204 || status == 304 || (100..200).contains(&status);
    let body = if no_body {
        0
    } else {
        head.lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
            .and_then(|(_, value)| value.trim().parse::<usize>().ok())
            .unwrap_or(0)
    };
    Some(end + body)
}

/// The status code of the response at the front of `bytes`, once its status line is there.
pub fn response_status(bytes: &[u8]) -> Option<u16> {
    let line_end = bytes.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&bytes[..line_end]).ok()?;
    line.split(' ').nth(1)?.parse().ok()
}

/// What the polite client saw.
#[derive(Clone, Debug, Default)]
pub struct PoliteReport {
    /// Requests made.
    pub attempts: u64,
    /// Requests answered with a whole 200 within the bound.
    pub served: u64,
    /// The slowest answer that came within the bound.
    pub worst: Duration,
    /// Why each failed request failed (first 20).
    pub failures: Vec<String>,
}

impl PoliteReport {
    /// Served requests as a share of all, in percent.
    pub fn percent(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            100.0 * self.served as f64 / self.attempts as f64
        }
    }

    /// One line for a report.
    pub fn summary(&self) -> String {
        format!(
            "polite client served {} of {} ({:.1}%), worst answer {} ms",
            self.served,
            self.attempts,
            self.percent(),
            self.worst.as_millis()
        )
    }
}

/// A polite client: every `interval` it opens a fresh connection, asks for `path` with
/// `Connection: close`, and counts the request served if a whole 200 answer arrives within
/// `bound` of starting the connect.
pub struct Polite {
    /// The server.
    pub target: SocketAddr,
    /// What to ask for.
    pub path: String,
    /// Host header value.
    pub host: String,
    /// Time between request starts.
    pub interval: Duration,
    /// Longest an answer may take (connect included).
    pub bound: Duration,
    /// Local address to connect from.
    pub source: Option<Ipv4Addr>,
}

impl Polite {
    /// Asks for `path` every 0.5 s with a 3 s bound.
    pub fn new(target: SocketAddr, path: &str) -> Polite {
        Polite {
            target,
            path: path.to_string(),
            host: "bramble".to_string(),
            interval: Duration::from_millis(500),
            bound: Duration::from_secs(3),
            source: None,
        }
    }

    /// Makes `count` requests, one every interval (a request still waiting when the next is
    /// due runs on alongside it, in its own thread), and reports.
    pub fn run(&self, count: u64) -> PoliteReport {
        let count =
            count.min(HARD_CAP.as_millis() as u64 / self.interval.as_millis().max(1) as u64);
        let started = Instant::now();
        let mut handles = Vec::new();
        for n in 0..count {
            let due = started + self.interval * n as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let (target, source, bound) = (self.target, self.source, self.bound);
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                self.path, self.host
            );
            handles.push(std::thread::spawn(move || {
                polite_request(target, source, &request, bound)
            }));
        }
        let mut report = PoliteReport::default();
        for handle in handles {
            report.attempts += 1;
            match handle.join().expect("polite request thread") {
                Ok(took) => {
                    report.served += 1;
                    report.worst = report.worst.max(took);
                }
                Err(why) => {
                    if report.failures.len() < 20 {
                        report.failures.push(why);
                    }
                }
            }
        }
        report
    }
}

/// One polite request: how long the whole answer took, or why it failed.
fn polite_request(
    target: SocketAddr,
    source: Option<Ipv4Addr>,
    request: &str,
    bound: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    let deadline = started + bound;
    let left = |what: &str| {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("{what}: over {} ms", bound.as_millis()))
    };
    let mut stream = start_connect(target, source, None).map_err(|e| format!("socket: {e}"))?;
    // Wait for the connect with poll(2) on this one socket.
    loop {
        let wait = left("connect")?;
        let mut fds = [rustix::event::PollFd::new(
            &stream,
            rustix::event::PollFlags::OUT,
        )];
        let timeout = rustix::time::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: i64::from(wait.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) => continue,
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(error) => return Err(format!("poll: {error}")),
        }
    }
    connect_result(&stream).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_nonblocking(false)
        .map_err(|e| format!("blocking: {e}"))?;
    stream
        .set_write_timeout(Some(left("send")?))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("send: {e}"))?;
    let mut received = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(length) = response_length(&received)
            && received.len() >= length
        {
            let status = response_status(&received).unwrap_or(0);
            return if status == 200 {
                Ok(started.elapsed())
            } else {
                Err(format!("status {status}"))
            };
        }
        stream
            .set_read_timeout(Some(left("answer")?))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut chunk) {
            Ok(0) => {
                return Err(format!(
                    "closed after {} bytes ({} ms)",
                    received.len(),
                    started.elapsed().as_millis()
                ));
            }
            Ok(n) => received.extend_from_slice(&chunk[..n]),
            Err(error)
                if error.kind() == ErrorKind::WouldBlock || error.kind() == ErrorKind::TimedOut =>
            {
                return Err(format!(
                    "answer: over {} ms ({} bytes)",
                    bound.as_millis(),
                    received.len()
                ));
            }
            Err(error) => {
                return Err(format!(
                    "read after {} bytes: {error} ({} ms)",
                    received.len(),
                    started.elapsed().as_millis()
                ));
            }
        }
    }
}
