//! The access log: one line per request through the `log` facade, and none when disabled.

mod support;

use std::sync::Mutex;

use bramble_http::{Server, ServerConfig, SiteSource};
use bramble_site::SiteImage;
use support::*;

static LINES: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        LINES
            .lock()
            .unwrap()
            .push((record.target().to_string(), record.args().to_string()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;

fn lines_with(marker: &str) -> Vec<(String, String)> {
    LINES
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, line)| line.contains(marker))
        .cloned()
        .collect()
}

#[test]
fn one_line_per_request_or_none_when_disabled() {
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Info);
    let image = site_image(true);

    let mut server = support::server(&image);
    let mut client = Client::open(&mut server);
    let bytes = client.send(
        &mut server,
        b"GET /style.css?logged-1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /nothing?logged-1 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let responses = parse_responses(&bytes, &[false, true]);
    let lines = lines_with("logged-1");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0].0, "bramble_http::access");
    let fields: Vec<&str> = lines[0].1.split(' ').collect();
    assert_eq!(&fields[..3], ["GET", "/style.css?logged-1", "200"]);
    // The byte count is the whole response: head, the blank line that ends it, and body.
    let head_len = responses[0].head.len() + "\r\n\r\n".len();
    assert_eq!(fields[3], (head_len + responses[0].body.len()).to_string());
    assert!(fields[4].ends_with("ms"));
    assert!(
        lines[1].1.starts_with("HEAD /nothing?logged-1 404 "),
        "{}",
        lines[1].1
    );

    // With the client's address known, each line ends with it: the family shows.
    for (peer, marker) in [("192.168.77.1", "peer-v4"), ("2001:db8::7", "peer-v6")] {
        let mut client = Client::open(&mut server);
        client.connection.set_peer(peer.parse().unwrap());
        let request = format!("GET /style.css?{marker} HTTP/1.1\r\nHost: x\r\n\r\n");
        client.send(&mut server, request.as_bytes());
        let lines = lines_with(marker);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].1.ends_with(&format!("ms {peer}")),
            "{}",
            lines[0].1
        );
    }

    let config = ServerConfig {
        access_log: false,
        ..ServerConfig::default()
    };
    let mut quiet = Server::new(
        SiteSource::Ready(SiteImage::new_checked(&image).unwrap()),
        config,
    );
    let mut client = Client::open(&mut quiet);
    client.send(
        &mut quiet,
        b"GET /style.css?logged-2 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert!(lines_with("logged-2").is_empty());
    assert_eq!(quiet.counters().requests, 1);
}

#[test]
fn control_characters_in_targets_are_escaped_in_the_log() {
    // Review L4: the access log goes to the serial console, so a request target carrying a
    // terminal control sequence (the C1 CSI as UTF-8, C2 9B, then "2J" clears the screen)
    // must reach it as visible text, not as the sequence.
    let _ = log::set_logger(&CAPTURE);
    log::set_max_level(log::LevelFilter::Info);
    let image = site_image(true);
    let mut server = support::server(&image);
    let targets: [&[u8]; 3] = [
        b"/csi?logged-3=\xc2\x9b2J",
        b"/bell?logged-4=\xc2\x87\xc2\x85next",
        b"/back?logged-5=a\\x1b",
    ];
    for target in targets {
        let mut client = Client::open(&mut server);
        let mut request = b"GET ".to_vec();
        request.extend_from_slice(target);
        request.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        client.send(&mut server, &request);
    }
    let expected = [
        ("logged-3", "/csi?logged-3=\\xc2\\x9b2J"),
        ("logged-4", "/bell?logged-4=\\xc2\\x87\\xc2\\x85next"),
        // A backslash in the target is doubled, so an escape in the log is never ambiguous.
        ("logged-5", "/back?logged-5=a\\\\x1b"),
    ];
    for (marker, target) in expected {
        let lines = lines_with(marker);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0].1;
        assert!(!line.chars().any(char::is_control), "{line:?}");
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[1], target, "{line:?}");
    }
}
