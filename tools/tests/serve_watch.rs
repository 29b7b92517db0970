//! `bramble serve --watch` through the real binary: an edit made the moment the serving line
//! appears is re-packed (the watcher starts before the first pack) and the terminal says what
//! was re-packed and how long it took; pages carry the live-reload script and the event
//! stream announces each new image; without --watch there is neither. Servers are stopped by
//! PID; every wait is bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    address: String,
    stderr: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(site: &Path, extra: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bramble"))
        .arg("serve")
        .arg(site)
        .args(["--port", "0", "--quiet"])
        .args(extra)
        .env("XDG_CACHE_HOME", site.join("../cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bramble serve");
    let (lines, stderr) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no serving line: {line:?}"))
        .to_string();
    Server {
        child,
        address,
        stderr,
    }
}

/// GET `path` over a fresh connection; the whole answer as text.
fn get(address: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

fn site(root: &Path) -> std::path::PathBuf {
    let site = root.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<html><body><p>first</p></body></html>\n",
    )
    .unwrap();
    std::fs::write(site.join("style.css"), "p { color: red }\n").unwrap();
    site
}

#[test]
fn an_edit_made_as_serving_starts_is_repacked_and_the_terminal_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let server = start(&site, &["--watch"]);
    // At once, before anything else: the race the polling watcher lost.
    std::fs::write(
        site.join("index.html"),
        "<html><body><p>second</p></body></html>\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let report = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match server.stderr.recv_timeout(left) {
            Ok(line) if line.starts_with("re-packed") => break line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no re-pack within 30 s; stderr:\n{}", seen.join("\n")),
        }
    };
    assert!(
        report.contains("after changes to index.html in "),
        "{report}"
    );
    assert!(report.contains(" s: 2 files"), "{report}");
    let page = get(&server.address, "/");
    assert!(page.contains("<p>second</p>"), "{page}");
}

#[test]
fn pages_reload_through_the_event_stream_after_a_repack() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let server = start(&site, &["--watch"]);
    let page = get(&server.address, "/");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let script = bramble::serve::LIVE_RELOAD_SCRIPT;
    assert!(
        page.contains(&format!("<p>first</p>{script}</body>")),
        "{page}"
    );
    assert!(!get(&server.address, "/style.css").contains("<script>"));

    let mut events = TcpStream::connect(&server.address).unwrap();
    events
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    write!(
        events,
        "GET /__bramble/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut received = String::new();
    let mut read_until = |received: &mut String, done: &dyn Fn(&str) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut buffer = [0u8; 1024];
        while !done(received) {
            assert!(
                Instant::now() < deadline,
                "event stream so far: {received:?}"
            );
            match events.read(&mut buffer) {
                Ok(0) => panic!("the event stream closed: {received:?}"),
                Ok(n) => received.push_str(&String::from_utf8_lossy(&buffer[..n])),
                Err(_) => {}
            }
        }
    };
    let data_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    };
    read_until(&mut received, &|text| !data_lines(text).is_empty());
    assert!(received.starts_with("HTTP/1.1 200 OK\r\n"), "{received}");
    assert!(
        received.contains("Content-Type: text/event-stream\r\n"),
        "{received}"
    );
    let first = data_lines(&received)[0].clone();

    std::fs::write(site.join("style.css"), "p { color: blue }\n").unwrap();
    read_until(&mut received, &|text| {
        data_lines(text).iter().any(|d| *d != first)
    });
    let page = get(&server.address, "/style.css");
    assert!(page.contains("blue"), "{page}");
}

#[test]
fn without_watch_there_is_no_script_and_no_event_stream() {
    let dir = tempfile::tempdir().unwrap();
    let site = site(dir.path());
    let server = start(&site, &[]);
    let page = get(&server.address, "/");
    assert!(
        page.contains("<p>first</p></body>") && !page.contains("<script>"),
        "{page}"
    );
    assert!(get(&server.address, "/__bramble/events").starts_with("HTTP/1.1 404"));
}
