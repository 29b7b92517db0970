//! The measuring tools `hoard` and `attack` through their real binaries: `--help` prints
//! the usage and succeeds, bad arguments fail with a message naming them, and `hoard`
//! measures a server: against a small one on 127.0.0.1 that answers every request, the
//! polite client is served every time while 20 idle keep-alive connections are held.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn run(program: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("{program}: {error}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn hoard_and_attack_print_their_usage_and_refuse_bad_arguments() {
    let hoard = env!("CARGO_BIN_EXE_hoard");
    let attack = env!("CARGO_BIN_EXE_attack");
    let (ok, text) = run(hoard, &["--help"]);
    assert!(
        ok && text.contains("usage: hoard TARGET BIG_PATH"),
        "{text}"
    );
    for flag in ["--polite", "--counts", "--ramp", "--source"] {
        assert!(text.contains(flag), "hoard --help lists {flag}: {text}");
    }
    let (ok, text) = run(hoard, &[]);
    assert!(!ok && text.contains("usage"), "{text}");
    let (ok, text) = run(hoard, &["127.0.0.1:9", "/big", "--counts", "1,2"]);
    assert!(!ok && text.contains("--counts"), "{text}");
    let (ok, text) = run(attack, &["--help"]);
    assert!(
        ok && text.contains("usage: attack TARGET BIG_PATH"),
        "{text}"
    );
    for word in [
        "--attacks",
        "--polite",
        "--ramp",
        "--syn-rate",
        "--slow-connections",
        "mixed",
        "syn-flood",
        "slowloris",
        "slow-read",
        "keep-alive",
    ] {
        assert!(text.contains(word), "attack --help lists {word}: {text}");
    }
    let (ok, text) = run(
        attack,
        &["127.0.0.1:9", "/big", "--attacks", "mixed,teardrop"],
    );
    assert!(!ok && text.contains("bad --attacks"), "{text}");
    let (ok, text) = run(attack, &["not-an-address", "/big"]);
    assert!(!ok && text.contains("not-an-address"), "{text}");
    let (ok, text) = run(attack, &["127.0.0.1:9", "/big", "--polite", "0"]);
    assert!(!ok && text.contains("--polite"), "{text}");
}

/// A server on 127.0.0.1 that answers every request on a connection with a small page and
/// keeps the connection open (one thread per connection, at most `limit` connections).
fn tiny_server(stop: Arc<AtomicBool>, limit: usize) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut threads = Vec::new();
        while !stop.load(Ordering::Relaxed) && threads.len() < limit {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    let stop = Arc::clone(&stop);
                    threads.push(std::thread::spawn(move || {
                        stream.set_nonblocking(false).unwrap();
                        stream
                            .set_read_timeout(Some(Duration::from_millis(200)))
                            .unwrap();
                        let mut buffer = Vec::new();
                        let mut chunk = [0u8; 1024];
                        while !stop.load(Ordering::Relaxed) {
                            match stream.read(&mut chunk) {
                                Ok(0) => return,
                                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                                Err(_) => continue,
                            }
                            while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                                buffer.drain(..end + 4);
                                let _ = stream.write_all(
                                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                                );
                            }
                        }
                    }));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        for thread in threads {
            let _ = thread.join();
        }
    });
    (port, handle)
}

#[test]
fn hoard_measures_a_server_on_loopback() {
    let stop = Arc::new(AtomicBool::new(false));
    let (port, server) = tiny_server(Arc::clone(&stop), 200);
    let target = format!("127.0.0.1:{port}");
    // 20 idle keep-alive connections (a thread each here), then 4 polite requests.
    let (ok, text) = run(
        env!("CARGO_BIN_EXE_hoard"),
        &[
            &target, "/", "--counts", "0,0,0,20", "--ramp", "1", "--polite", "4",
        ],
    );
    assert!(ok, "{text}");
    assert!(text.contains("served 4 of 4 (100.0%)"), "{text}");
    assert!(
        text.contains("keep-alive-idle: 20 connects, 20 established"),
        "{text}"
    );
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}
