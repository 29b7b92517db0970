//! QEMU end to end, load and abuse: 10 pipelined requests answered in order, 100 concurrent
//! clients all served, and slow clients (silent, half a header, never reading) cut off by the
//! kernel's deadlines while everyone else is still served. One guest for all of it.
//!
//! The deadlines are the connection pool's defaults (`bramble_stream::PoolLimits::DEFAULT`:
//! 10 s to the first byte, 20-40 s for a header, 15 s idle, 30 s without progress for a
//! response); the checks wait for the kernel to act on them, with generous bounds, and never
//! assert how fast anything was.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use support::{Client, access_log_since, boot_site, http_status, site_files};

/// How long the kernel may take to act on a deadline before the test calls it a failure: the
/// longest deadline (40 s for a header) plus slack for a loaded machine.
const CUT_OFF_BOUND: Duration = Duration::from_secs(120);

fn make_site(root: &Path) {
    std::fs::create_dir_all(root.join("img")).unwrap();
    let mut page = String::from("<!doctype html>\n<title>Load</title>\n");
    for i in 0..40 {
        page.push_str(&format!("<p>Line {i}</p>\n"));
    }
    std::fs::write(root.join("index.html"), page).unwrap();
    for i in 0..8 {
        std::fs::write(
            root.join(format!("page{i}.txt")),
            format!("page {i}\n").repeat(20 + i * 7),
        )
        .unwrap();
    }
    // Incompressible, so no variant is smaller and the identity body is what travels.
    let big: Vec<u8> = (0u32..96 * 1024)
        .map(|i| (i.wrapping_mul(2_246_822_519).rotate_left(7) >> 5) as u8)
        .collect();
    std::fs::write(root.join("img/big.bin"), big).unwrap();
}

/// GETs `path` with `Connection: close`; the body, or why not.
fn fetch(port: u16, path: &str) -> Result<Vec<u8>, String> {
    let mut client = Client::connect(port);
    client
        .send(format!("GET {path} HTTP/1.1\r\nHost: load\r\nConnection: close\r\n\r\n").as_bytes());
    match client.try_response(false) {
        Some(response) if response.status == 200 => Ok(response.body),
        Some(response) => Err(response.head),
        None => Err(format!("no response (eof {})", client.eof)),
    }
}

#[test]
fn pipelining_concurrency_and_slow_clients_through_qemu() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    make_site(&root);
    let files = site_files(&root);
    let body_of = |url: &str| files.iter().find(|(u, _)| u == url).unwrap().1.clone();
    let mut served = boot_site(&root, "access_log = on\nmdns = off\n");
    let port = served.port;
    let pool_line = served
        .guest
        .transcript
        .iter()
        .find(|line| line.contains("net: ") && line.contains(" connections"))
        .cloned()
        .unwrap_or_default();
    eprintln!("connection pool: {pool_line}");

    // --- 10 pipelined requests in one write, answered in order ---
    let started = Instant::now();
    let paths: Vec<String> = (0..10)
        .map(|i| match i {
            0 => "/".to_string(),
            9 => "/index.html".to_string(),
            i => format!("/page{}.txt", (i * 3) % 8),
        })
        .collect();
    let mut batch = String::new();
    for (i, path) in paths.iter().enumerate() {
        let method = if i == 4 { "HEAD" } else { "GET" };
        let close = if i == 9 { "Connection: close\r\n" } else { "" };
        batch.push_str(&format!(
            "{method} {path} HTTP/1.1\r\nHost: load\r\n{close}\r\n"
        ));
    }
    let mut pipelined = Client::connect(port);
    pipelined.send(batch.as_bytes());
    for (i, path) in paths.iter().enumerate() {
        let response = pipelined.response(i == 4, &format!("pipelined response {i} ({path})"));
        let file = if path == "/" {
            "/index.html"
        } else {
            path.as_str()
        };
        let expected = if i == 4 { Vec::new() } else { body_of(file) };
        assert!(
            response.status == 200 && response.body == expected,
            "pipelined response {i} for {path}: {} with {} body bytes, expected {}",
            response.head,
            response.body.len(),
            expected.len()
        );
        if i == 4 {
            assert_eq!(
                response.header("content-length"),
                Some(body_of(file).len().to_string().as_str()),
                "HEAD in a pipeline: {}",
                response.head
            );
        }
    }
    assert!(
        pipelined.wait_closed(Duration::from_secs(30)),
        "Connection: close on the 10th pipelined request"
    );
    eprintln!(
        "10 pipelined requests answered in order ({:.1} s)",
        started.elapsed().as_secs_f64()
    );

    // --- 100 concurrent clients, all served ---
    // QEMU's user networking accepts forwarded connections from a listen backlog of one, so
    // a burst of 100 connect() calls would mostly wait on the host kernel's SYN-ACK back-off,
    // not on the guest. The clients therefore connect a few milliseconds apart, the test
    // waits until the kernel reports all of them open at once, and only then do all 100
    // send their requests together.
    let started = Instant::now();
    let clients = 100;
    let before = http_status(&mut served.guest);
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(Client::connect(port));
        std::thread::sleep(Duration::from_millis(15));
    }
    let wait_until = Instant::now() + Duration::from_secs(8);
    let open_now: u64 = loop {
        let status = http_status(&mut served.guest);
        let open = u64::from(status.open_connections);
        if open >= clients as u64 || Instant::now() > wait_until {
            break open;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        open_now >= clients as u64,
        "the kernel reports {open_now} open connections with {clients} clients connected \
         (before: {before:?})"
    );
    let barrier = Arc::new(Barrier::new(clients));
    let handles: Vec<_> = connected
        .into_iter()
        .enumerate()
        .map(|(i, mut client)| {
            let barrier = Arc::clone(&barrier);
            let path = if i % 2 == 0 {
                "/index.html".to_string()
            } else {
                format!("/page{}.txt", i % 8)
            };
            let expected = body_of(&path);
            std::thread::spawn(move || {
                barrier.wait();
                client.send(
                    format!("GET {path} HTTP/1.1\r\nHost: load\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
                match client.try_response(false) {
                    Some(response) if response.status == 200 && response.body == expected => Ok(()),
                    Some(response) => Err(format!(
                        "client {i} {path}: {} bytes, expected {}: {}",
                        response.body.len(),
                        expected.len(),
                        response.head
                    )),
                    None => Err(format!(
                        "client {i} {path}: no response (eof {})",
                        client.eof
                    )),
                }
            })
        })
        .collect();
    let failures: Vec<String> = handles
        .into_iter()
        .filter_map(|h| h.join().expect("client thread").err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {clients} concurrent clients not served:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{clients} concurrent clients ({open_now} open in the kernel at once) served ({:.1} s)",
        started.elapsed().as_secs_f64()
    );

    // --- Slow clients are cut off while others are served ---
    // Connections are opened 50 ms apart for the same reason as above (QEMU's backlog of
    // one), so each reaches the guest at once and its deadline starts when the test thinks.
    let before = http_status(&mut served.guest);
    let log_from = served.guest.transcript.len();
    let started = Instant::now();
    let spaced = |client: Client| {
        std::thread::sleep(Duration::from_millis(50));
        client
    };
    // Silent: connects and never sends a byte (first-byte deadline).
    let mut silent: Vec<Client> = (0..3).map(|_| spaced(Client::connect(port))).collect();
    // Slowloris: half a header, then nothing (header deadline).
    let mut slowloris: Vec<Client> = (0..3)
        .map(|_| {
            let mut client = Client::connect(port);
            client.send(b"GET /index.html HTTP/1.1\r\nHost: load\r\nX-Slow: ");
            spaced(client)
        })
        .collect();
    // Idle keep-alive: one request served, then silence (idle deadline).
    let mut idle = spaced(Client::connect(port));
    idle.send(b"GET /page1.txt HTTP/1.1\r\nHost: load\r\n\r\n");
    let first = idle.response(false, "idle keep-alive client");
    assert_eq!(first.status, 200, "{}", first.head);
    // Never reads: pipelines requests for megabytes and reads nothing. QEMU's user
    // networking and the host absorb a lot of it; whatever the kernel cannot hand over, or
    // cannot finish closing, its deadlines must end.
    let big = body_of("/img/big.bin");
    let asked = 24;
    let mut sink = spaced(Client::connect(port));
    let requests = "GET /img/big.bin HTTP/1.1\r\nHost: load\r\n\r\n".repeat(asked);
    sink.send(requests.as_bytes());

    // Meanwhile, other clients keep being served.
    let stop = Arc::new(AtomicBool::new(false));
    let served_meanwhile = Arc::new(AtomicUsize::new(0));
    let others = {
        let stop = Arc::clone(&stop);
        let served_meanwhile = Arc::clone(&served_meanwhile);
        let expected = body_of("/index.html");
        std::thread::spawn(move || -> Result<(), String> {
            let deadline = Instant::now() + CUT_OFF_BOUND + Duration::from_secs(30);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let body = fetch(port, "/index.html")?;
                if body != expected {
                    return Err(format!(
                        "{} bytes instead of {}",
                        body.len(),
                        expected.len()
                    ));
                }
                served_meanwhile.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(500));
            }
            Ok(())
        })
    };

    for (i, client) in silent.iter_mut().enumerate() {
        assert!(
            client.wait_closed(CUT_OFF_BOUND),
            "silent client {i} still connected after {CUT_OFF_BOUND:?}"
        );
    }
    eprintln!(
        "silent clients cut off after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // The kernel aborts half-header clients at the header deadline; its count of deadline
    // cut-offs shows it (3 silent + 3 half-header). A byte from each client then meets a
    // connection the guest no longer has, so each stream ends.
    let cut_off_so_far = loop {
        let status = http_status(&mut served.guest);
        let counted = status.timeouts - before.timeouts;
        if counted >= 6 || started.elapsed() > CUT_OFF_BOUND {
            break counted;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        cut_off_so_far >= 6,
        "the kernel counted {cut_off_so_far} deadline cut-offs within {CUT_OFF_BOUND:?}; \
         expected 3 silent and 3 half-header clients"
    );
    for (i, client) in slowloris.iter_mut().enumerate() {
        let _ = client.try_send(b"\r\n");
        assert!(
            client.wait_closed(Duration::from_secs(30)),
            "half-header client {i}: still connected after the kernel's cut-off"
        );
    }
    eprintln!(
        "half-header clients cut off after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let left = CUT_OFF_BOUND.saturating_sub(started.elapsed());
    assert!(
        idle.wait_closed(left),
        "idle keep-alive client still connected"
    );
    eprintln!(
        "idle keep-alive client closed after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Let the normal clients finish, then every connection the slow clients held must be
    // gone from the kernel, the never-reading one included.
    stop.store(true, Ordering::Relaxed);
    others.join().expect("client thread").unwrap_or_else(|why| {
        panic!("a normal client was not served while slow ones waited: {why}")
    });
    let meanwhile = served_meanwhile.load(Ordering::Relaxed);
    assert!(
        meanwhile >= 5,
        "only {meanwhile} normal requests served while slow clients waited"
    );
    let after = loop {
        let status = http_status(&mut served.guest);
        if status.open_connections == 0 || started.elapsed() > CUT_OFF_BOUND {
            break status;
        }
        std::thread::sleep(Duration::from_millis(1000));
    };
    assert_eq!(
        after.open_connections,
        0,
        "connections still held {CUT_OFF_BOUND:?} after the slow clients started (the \
         never-reading client's, at least): {after:?}\nserial:\n{}",
        served.guest.transcript[log_from..]
            .iter()
            .filter(|line| !line.contains("GET /index.html 200"))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "never-reading client's connection ended by the kernel after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Reading now finds what the host had buffered, then the end of the stream, short of
    // what was asked.
    let mut whole = 0usize;
    while let Some(response) = sink.try_response(false) {
        if response.status == 200 && response.body == big {
            whole += 1;
        }
    }
    assert!(
        sink.eof,
        "never-reading client: the stream did not end ({whole} of {asked} responses read)"
    );
    let timeouts = after.timeouts - before.timeouts;
    assert!(
        timeouts >= 8,
        "kernel counted {timeouts} deadline cut-offs, expected at least 8 (3 silent, 3 half \
         header, 1 idle, 1 never reading): before {before:?}, after {after:?}"
    );
    let log = access_log_since(&mut served.guest, log_from, Duration::from_millis(300));
    assert!(
        log.iter()
            .filter(|l| l.target == "/index.html" && l.status == 200)
            .count()
            >= meanwhile,
        "access log lacks the requests served meanwhile: {log:?}"
    );
    eprintln!(
        "slow clients cut off ({timeouts} timeouts counted, {whole} of {asked} big responses \
         reached the never-reading client), {meanwhile} other requests served meanwhile ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    let after_all = fetch(port, "/index.html").expect("served after the abuse");
    assert_eq!(after_all, body_of("/index.html"));
}
