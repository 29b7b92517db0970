//! The `walk` target's script through the real wrk: against a small HTTP server on 127.0.0.1
//! that records each request line, every path of the list is asked for (percent-encoded as
//! given), with the `-H` headers, and only those paths. Bounded: one second of load, two
//! connections.

use bramble_bench::load::{LoadRun, run_wrk};
use bramble_bench::walk::{encode_path, walk_script};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Answers every request on every connection with a 2-byte 200 and counts, per request path,
/// the requests and those that carried `Accept-Encoding: gzip, br`.
fn start_server(seen: Arc<Mutex<BTreeMap<String, (u32, u32)>>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut encoded = false;
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        if header == "\r\n" {
                            break;
                        }
                        encoded |= header.eq_ignore_ascii_case("accept-encoding: gzip, br\r\n");
                    }
                    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
                    let mut seen = seen.lock().unwrap();
                    let entry = seen.entry(path).or_default();
                    entry.0 += 1;
                    entry.1 += u32::from(encoded);
                    drop(seen);
                    if stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn wrk_walks_every_path_of_the_script_with_the_given_headers() {
    let paths: Vec<String> = (0..40)
        .map(|i| format!("/walk/dir {}/page-{i}.html", i % 3))
        .chain(["/walk/index.html".to_string()])
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("walk.lua");
    std::fs::write(&script, walk_script(&paths)).unwrap();
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let port = start_server(seen.clone());
    let url = format!("http://127.0.0.1:{port}/walk/");
    let headers = vec![("Accept-Encoding".to_string(), "gzip, br".to_string())];
    let run = LoadRun {
        url: &url,
        headers: &headers,
        concurrency: 2,
        duration: Duration::from_secs(1),
        timeout: Duration::from_secs(5),
        namespace: None,
        script: Some(&script),
    };
    let figures = run_wrk(&run, &dir.path().join("wrk.txt"))
        .expect("wrk runs the script (tools/setup.sh installs wrk)");
    assert_eq!(figures.errors(), 0, "{figures:?}");
    let seen = seen.lock().unwrap();
    let expected: Vec<String> = paths.iter().map(|path| encode_path(path)).collect();
    for path in &expected {
        let (requests, encoded) = seen.get(path).copied().unwrap_or_default();
        assert!(requests > 0, "{path} never asked for: {seen:?}");
        assert_eq!(encoded, requests, "{path}: a request without the -H header");
    }
    let unexpected: Vec<_> = seen
        .keys()
        .filter(|path| !expected.contains(path))
        .collect();
    assert!(
        unexpected.is_empty(),
        "asked for paths not in the list: {unexpected:?}"
    );
    let total: u32 = seen.values().map(|(requests, _)| requests).sum();
    assert!(
        u64::from(total) >= figures.responses,
        "{total} against {figures:?}"
    );
}

#[test]
fn the_real_binary_lists_walk_site_and_refuses_a_walk_without_a_folder() {
    let bench = env!("CARGO_BIN_EXE_bramble-bench");
    let help = std::process::Command::new(bench)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--walk-site <DIR>"), "{help}");
    assert!(help.contains("walk (Bramble in QEMU only"), "{help}");
    // Both refused before anything is built or booted.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let missing = missing.to_str().unwrap();
    for (extra, expected) in [
        (
            &["--targets", "walk"][..],
            "the walk target needs --walk-site DIR",
        ),
        (
            &["--targets", "page", "--walk-site", missing][..],
            "not a folder",
        ),
    ] {
        let output = std::process::Command::new(bench)
            .args(extra)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{extra:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
}
