//! The owner's view from afar (issue 31): `bramble qemu --tap` boots the guest in a network
//! namespace with `syslog` set to a name (`logs.test`, which dnsmasq in the namespace
//! answers); a collector in the namespace receives its log as UDP datagrams and parses every
//! one strictly as RFC 5424 (the boot's events and one access-log line per request, with the
//! client's address), and the console's `log` command prints the RAM ring. The status page
//! and metrics are checked from allowed and refused sources, and Debian's Varnish is put in
//! front with doc/cdn.md's configuration (`proxy_from` trusting it). One boot serves every
//! check.

mod netns;

use bramble_testkit::chain::{ChainShape, make_chain};
use bramble_tests::{BOOT_TIMEOUT, kernel};
use netns::sntp::Sntp;
use netns::tool::{bramble_image, start_bramble_qemu};
use netns::{Daemon, HOST_ADDRESS, Netns, TAP};
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::Stdio;
use std::time::{Duration, Instant};

bramble_qemu_helper!();

/// The collector subprocess stops once a datagram contains this (the last request's path).
const UNTIL_VAR: &str = "BRAMBLE_SYSLOG_UNTIL";
/// The collector's port (not 514, to show the port setting is honoured).
const COLLECTOR_PORT: u16 = 1514;
/// The longest the collector listens.
const COLLECT_LIMIT: Duration = Duration::from_secs(150);
/// Each datagram the collector prints starts with this, then its bytes in hex.
const DATAGRAM_PREFIX: &str = "syslog-datagram: ";

/// The collector: run inside the namespace by the test below; prints every datagram it
/// receives on the collector port, in hex, until one contains the text in [`UNTIL_VAR`].
#[test]
#[ignore = "helper: run by the syslog test inside its namespace"]
fn syslog_collector_in_namespace() {
    let Ok(until) = std::env::var(UNTIL_VAR) else {
        eprintln!("{UNTIL_VAR} is not set: nothing to collect");
        return;
    };
    let socket = UdpSocket::bind((HOST_ADDRESS, COLLECTOR_PORT)).expect("binding the collector");
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    println!("collector: listening");
    let deadline = Instant::now() + COLLECT_LIMIT;
    let mut buffer = [0u8; 2048];
    while Instant::now() < deadline {
        let Ok((len, _)) = socket.recv_from(&mut buffer) else {
            continue;
        };
        let datagram = &buffer[..len];
        let hex: String = datagram.iter().map(|b| format!("{b:02x}")).collect();
        println!("{DATAGRAM_PREFIX}{hex}");
        if String::from_utf8_lossy(datagram).contains(&until) {
            return;
        }
    }
    println!("collector: time limit reached");
}

/// One RFC 5424 message, as the strict parser below reads it.
#[derive(Debug)]
struct Message {
    priority: u8,
    timestamp: String,
    hostname: String,
    app_name: String,
    msgid: String,
    /// The structured data's elements: (SD-ID, [(name, value)]).
    elements: Vec<(String, Vec<(String, String)>)>,
    text: String,
}

/// PRINTUSASCII (RFC 5424 §6): 33 to 126.
fn printable(byte: u8) -> bool {
    (33..=126).contains(&byte)
}

/// A header field: 1 to `max` printable characters, then a space.
fn field<'d>(rest: &mut &'d [u8], max: usize, name: &str) -> Result<&'d str, String> {
    let end = rest
        .iter()
        .position(|&b| b == b' ')
        .ok_or(format!("{name}: no space after it"))?;
    let value = &rest[..end];
    if value.is_empty() || value.len() > max || !value.iter().all(|&b| printable(b)) {
        return Err(format!(
            "{name}: {:?} is not 1-{max} printable characters",
            value
        ));
    }
    *rest = &rest[end + 1..];
    Ok(std::str::from_utf8(value).unwrap())
}

fn digits(text: &str, count: usize) -> bool {
    text.len() == count && text.bytes().all(|b| b.is_ascii_digit())
}

/// TIMESTAMP: `-` or FULL-DATE "T" FULL-TIME (RFC 5424 §6.2.3, RFC 3339).
fn check_timestamp(text: &str) -> Result<(), String> {
    if text == "-" {
        return Ok(());
    }
    let bad = || format!("timestamp {text:?}");
    let (date, time) = text.split_once('T').ok_or_else(bad)?;
    let parts: Vec<&str> = date.split('-').collect();
    if parts.len() != 3 || !digits(parts[0], 4) || !digits(parts[1], 2) || !digits(parts[2], 2) {
        return Err(bad());
    }
    let month: u32 = parts[1].parse().unwrap();
    let day: u32 = parts[2].parse().unwrap();
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
    let time = time.strip_suffix('Z').ok_or_else(bad)?;
    let (hms, fraction) = match time.split_once('.') {
        Some((hms, fraction)) => (hms, Some(fraction)),
        None => (time, None),
    };
    if let Some(fraction) = fraction
        && (fraction.is_empty()
            || fraction.len() > 6
            || !fraction.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad());
    }
    let hms: Vec<&str> = hms.split(':').collect();
    if hms.len() != 3 || !hms.iter().all(|part| digits(part, 2)) {
        return Err(bad());
    }
    let (h, m, s): (u32, u32, u32) = (
        hms[0].parse().unwrap(),
        hms[1].parse().unwrap(),
        hms[2].parse().unwrap(),
    );
    if h > 23 || m > 59 || s > 60 {
        return Err(bad());
    }
    Ok(())
}

/// SD-NAME: 1 to 32 printable characters except `=`, space, `]` and `"`.
fn sd_name<'d>(rest: &mut &'d [u8]) -> Result<&'d str, String> {
    let end = rest
        .iter()
        .position(|&b| !printable(b) || matches!(b, b'=' | b']' | b'"'))
        .unwrap_or(rest.len());
    if end == 0 || end > 32 {
        return Err(format!("SD-NAME in {:?}", String::from_utf8_lossy(rest)));
    }
    let name = std::str::from_utf8(&rest[..end]).unwrap();
    *rest = &rest[end..];
    Ok(name)
}

/// Parses one datagram strictly as an RFC 5424 message (§6).
fn parse_5424(datagram: &[u8]) -> Result<Message, String> {
    let mut rest = datagram;
    // PRI: "<" 1-3 digits ">", at most 191, no leading zero.
    let close = rest.iter().position(|&b| b == b'>').ok_or("PRI: no '>'")?;
    if rest.first() != Some(&b'<') || !(2..=4).contains(&close) {
        return Err("PRI: malformed".into());
    }
    let pri_text = std::str::from_utf8(&rest[1..close]).map_err(|_| "PRI: not text")?;
    if !pri_text.bytes().all(|b| b.is_ascii_digit())
        || (pri_text.len() > 1 && pri_text.starts_with('0'))
    {
        return Err(format!("PRI: {pri_text:?}"));
    }
    let priority: u8 = pri_text.parse().map_err(|_| "PRI: number")?;
    if priority > 191 {
        return Err(format!("PRI {priority} over 191"));
    }
    rest = &rest[close + 1..];
    // VERSION 1.
    rest = rest.strip_prefix(b"1 ").ok_or("VERSION is not 1")?;
    let timestamp = field(&mut rest, 64, "TIMESTAMP")?.to_string();
    check_timestamp(&timestamp)?;
    let hostname = field(&mut rest, 255, "HOSTNAME")?.to_string();
    let app_name = field(&mut rest, 48, "APP-NAME")?.to_string();
    field(&mut rest, 128, "PROCID")?;
    let msgid = field(&mut rest, 32, "MSGID")?.to_string();
    // STRUCTURED-DATA: "-" or one or more elements.
    let mut elements = Vec::new();
    if let Some(after) = rest.strip_prefix(b"-") {
        rest = after;
    } else {
        while let Some(after) = rest.strip_prefix(b"[") {
            rest = after;
            let id = sd_name(&mut rest)?.to_string();
            let mut params = Vec::new();
            while let Some(after) = rest.strip_prefix(b" ") {
                rest = after;
                let name = sd_name(&mut rest)?.to_string();
                rest = rest.strip_prefix(b"=\"").ok_or("SD-PARAM: no =\"")?;
                let mut value = Vec::new();
                loop {
                    match rest.first() {
                        None => return Err("PARAM-VALUE: unterminated".into()),
                        Some(b'"') => {
                            rest = &rest[1..];
                            break;
                        }
                        Some(b'\\') if matches!(rest.get(1), Some(b'"' | b'\\' | b']')) => {
                            value.push(rest[1]);
                            rest = &rest[2..];
                        }
                        Some(b']') => return Err("PARAM-VALUE: unescaped ]".into()),
                        Some(&byte) => {
                            value.push(byte);
                            rest = &rest[1..];
                        }
                    }
                }
                let value = String::from_utf8(value).map_err(|_| "PARAM-VALUE: not UTF-8")?;
                params.push((name, value));
            }
            rest = rest.strip_prefix(b"]").ok_or("SD-ELEMENT: no ]")?;
            elements.push((id, params));
        }
        if elements.is_empty() {
            return Err("STRUCTURED-DATA: neither - nor an element".into());
        }
    }
    // MSG: absent, or a space and the rest (UTF-8 when it starts with a BOM; any octets
    // otherwise, but Bramble sends text).
    let text = match rest {
        [] => String::new(),
        [b' ', message @ ..] => {
            let message = message.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(message);
            String::from_utf8(message.to_vec()).map_err(|_| "MSG: not UTF-8")?
        }
        _ => return Err("no space before MSG".into()),
    };
    Ok(Message {
        priority,
        timestamp,
        hostname,
        app_name,
        msgid,
        elements,
        text,
    })
}

/// The owner's bearer token in the test's BRAMBLE.TXT.
const TOKEN: &str = "owner-token-0123456789";
/// A second address in the namespace, outside `status_from`.
const STRANGER: &str = "192.168.77.3";

/// GETs `url` from `source` (an address of the namespace) with an optional bearer token;
/// returns the status code and the body.
fn fetch(netns: &Netns, source: &str, url: &str, token: Option<&str>) -> (u16, Vec<u8>) {
    let header = token.map(|token| format!("Authorization: Bearer {token}"));
    let mut args = vec!["--silent", "--max-time", "20", "--interface", source];
    if let Some(header) = &header {
        args.extend(["--header", header.as_str()]);
    }
    args.extend(["--write-out", "\n%{http_code}", url]);
    let output = netns.output("curl", &args);
    assert!(output.status.success(), "curl {url} from {source}");
    let split = output
        .stdout
        .iter()
        .rposition(|&b| b == b'\n')
        .expect("status line");
    let code = String::from_utf8_lossy(&output.stdout[split + 1..])
        .parse()
        .unwrap();
    (code, output.stdout[..split].to_vec())
}

/// The status page and metrics: served to `status_from` (promtool accepts the metrics) and
/// to the token; anyone else, or a wrong token, gets the same 404 as any missing page.
fn check_status_page_and_metrics(netns: &Netns, dir: &std::path::Path) {
    let owner = HOST_ADDRESS.to_string();
    let run = netns.output(
        "ip",
        &["addr", "add", &format!("{STRANGER}/24"), "dev", TAP],
    );
    assert!(run.status.success(), "adding {STRANGER}");
    let base = "http://192.168.77.2";
    // Visitor counts: "/" was read once from the owner's address; once more from another
    // address, referred by another site (the 12 KB blob is not a page).
    let referred = netns.output(
        "curl",
        &[
            "--silent",
            "--fail",
            "--max-time",
            "20",
            "--interface",
            STRANGER,
            "--referer",
            "https://news.example/item?id=7",
            &format!("{base}/"),
        ],
    );
    assert!(referred.status.success(), "curl / from {STRANGER}");
    let (code, metrics) = fetch(netns, &owner, &format!("{base}/metrics"), None);
    let metrics_text = String::from_utf8_lossy(&metrics).to_string();
    assert_eq!(code, 200, "{metrics_text}");
    assert!(
        metrics_text.contains("bramble_responses_total{class=\"2xx\"} ")
            && metrics_text.contains("bramble_uptime_seconds ")
            && metrics_text.contains("\nbramble_pages_today 2\n")
            && metrics_text.contains("\nbramble_visitors_today 2\n"),
        "{metrics_text}"
    );
    let promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(&metrics)?;
            child.wait_with_output()
        })
        .expect("running promtool (Debian package prometheus)");
    assert!(
        promtool.status.success(),
        "promtool check metrics: {}{}\n{metrics_text}",
        String::from_utf8_lossy(&promtool.stdout),
        String::from_utf8_lossy(&promtool.stderr)
    );
    let (code, page) = fetch(
        netns,
        &owner,
        &format!("{base}/.well-known/bramble/status"),
        None,
    );
    let page_text = String::from_utf8_lossy(&page).to_string();
    assert_eq!(code, 200);
    for needle in [
        "Bramble status",
        "Last reset",
        "power on",
        "Syslog",
        "2 pages, 2 visitors",
        "<td>/ 2<br>",
        "<td>news.example 1<br>",
    ] {
        assert!(
            page_text.contains(needle),
            "{needle:?} not on the page:\n{page_text}"
        );
    }
    std::fs::write(dir.join("status.html"), &page).unwrap();
    if let Ok(keep) = std::env::var("BRAMBLE_KEEP_STATUS_PAGE") {
        std::fs::write(keep, &page).unwrap();
    }
    // A stranger gets exactly the site's 404 for a missing page, token or not.
    let (missing_code, missing) = fetch(netns, STRANGER, &format!("{base}/no-such-page"), None);
    assert_eq!(missing_code, 404);
    for path in ["/metrics", "/.well-known/bramble/status"] {
        for token in [
            None,
            Some("owner-token-012345678"),
            Some("not-the-owner-token-at-all"),
        ] {
            let (code, body) = fetch(netns, STRANGER, &format!("{base}{path}"), token);
            assert_eq!(
                (code, &body),
                (404, &missing),
                "{path} from {STRANGER} with {token:?}"
            );
        }
        let (code, body) = fetch(netns, STRANGER, &format!("{base}{path}"), Some(TOKEN));
        assert_eq!(
            code,
            200,
            "{path} with the token: {}",
            String::from_utf8_lossy(&body)
        );
    }
}

/// Varnish's address in the namespace (the host side's own) and port.
const VARNISH: &str = "192.168.77.1:6081";
/// A stylesheet for the test's site: text, so the packer gives it gzip and brotli variants,
/// with `max-age` (cacheable).
const STYLE: &str = "body { font: 16px system-ui; margin: 2em; color: #223; }\n";

/// Starts Debian's Varnish in the namespace in front of the guest, with the configuration
/// doc/cdn.md gives (its `vcl` block, the guest's address put in), gzip handling off.
fn start_varnish(netns: &Netns, dir: &std::path::Path) -> Daemon {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../doc/cdn.md"))
        .expect("reading doc/cdn.md");
    let vcl = doc
        .split("```vcl\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a vcl block in doc/cdn.md");
    assert!(vcl.contains("192.168.1.20"), "the doc's backend address");
    let vcl_path = dir.join("bramble.vcl");
    std::fs::write(&vcl_path, vcl.replace("192.168.1.20", "192.168.77.2")).unwrap();
    let mut command = netns.command("varnishd");
    command
        .args(["-F", "-j", "none", "-a", VARNISH, "-s", "malloc,16m"])
        .args(["-p", "http_gzip_support=off", "-n"])
        .arg(dir.join("varnish"))
        .arg("-f")
        .arg(&vcl_path);
    let varnish = Daemon::start(command, &dir.join("varnishd.log"));
    let started = Instant::now();
    while !std::fs::read_to_string(dir.join("varnishd.log"))
        .unwrap_or_default()
        .contains("Child launched OK")
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "varnishd did not start:\n{}",
            std::fs::read_to_string(dir.join("varnishd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    varnish
}

/// Varnish's hit counter.
fn varnish_hits(dir: &std::path::Path) -> u64 {
    let out = std::process::Command::new("varnishstat")
        .arg("-n")
        .arg(dir.join("varnish"))
        .args(["-1", "-f", "MAIN.cache_hit"])
        .output()
        .expect("running varnishstat");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("varnishstat: {out:?}"))
}

/// GETs `path` through Varnish from the stranger's address with `Accept-Encoding:
/// encoding` (none if empty): the status, the Content-Encoding and the body's bytes.
fn through_varnish(netns: &Netns, path: &str, encoding: &str) -> (u16, String, Vec<u8>) {
    let header = format!("Accept-Encoding: {encoding}");
    let url = format!("http://{VARNISH}{path}");
    let mut args = vec!["--silent", "--max-time", "20", "--interface", STRANGER];
    if !encoding.is_empty() {
        args.extend(["--header", header.as_str()]);
    }
    args.extend([
        "--write-out",
        "\n%{http_code} %header{content-encoding}",
        url.as_str(),
    ]);
    let output = netns.output("curl", &args);
    assert!(output.status.success(), "curl {url}");
    let split = output.stdout.iter().rposition(|&b| b == b'\n').unwrap();
    let tail = String::from_utf8_lossy(&output.stdout[split + 1..]).to_string();
    let (code, content_encoding) = tail.split_once(' ').unwrap_or((&tail, ""));
    (
        code.parse().unwrap(),
        content_encoding.trim().to_string(),
        output.stdout[..split].to_vec(),
    )
}

/// Varnish in front (issue 31 item 5): a second pass over every file, in each encoding, is
/// served from Varnish's cache (its hit counter); the page is revalidated with a 304 from the
/// guest; the brotli, gzip and plain variants stay apart; the guest logs the client's address
/// (`proxy_from` trusts Varnish's X-Forwarded-For), and a client's own X-Forwarded-For, sent
/// straight to the guest, is not believed.
fn check_varnish_in_front(netns: &Netns, dir: &std::path::Path, guest: &mut bramble_tests::Guest) {
    let _varnish = start_varnish(netns, dir);
    let paths = ["/", "/blob.bin", "/style.css"];
    let encodings = ["br", "gzip", ""];
    let mut first = Vec::new();
    for path in paths {
        for encoding in encodings {
            let answer = through_varnish(netns, path, encoding);
            assert_eq!(answer.0, 200, "{path} {encoding:?} through Varnish");
            first.push(answer);
        }
    }
    // The variants: the stylesheet in brotli, gzip and plain, each as asked.
    let style: Vec<&String> = first[6..9].iter().map(|(_, ce, _)| ce).collect();
    assert_eq!(style, ["br", "gzip", ""], "the stylesheet's encodings");
    assert_eq!(first[8].2, STYLE.repeat(40).as_bytes());
    let hits_before = varnish_hits(dir);
    for (i, path) in paths.iter().enumerate() {
        for (j, encoding) in encodings.iter().enumerate() {
            let again = through_varnish(netns, path, encoding);
            assert_eq!(
                again,
                first[i * encodings.len() + j],
                "{path} {encoding:?}: the second pass differs from the first"
            );
        }
    }
    let hits = varnish_hits(dir) - hits_before;
    // Every file but the page (revalidated, by its no-cache) in each encoding.
    assert!(hits >= 6, "{hits} Varnish hits on the second pass");
    // The page went back to the guest, which answered 304, logged with the client's address.
    let revalidated = guest.expect_line("GET / 304", Duration::from_secs(20));
    assert!(
        revalidated.trim_end().ends_with(&format!(" {STRANGER}")),
        "the guest logged {revalidated:?}, not the client {STRANGER}"
    );
    // Straight to the guest, a client's own X-Forwarded-For is not believed.
    let forged = netns.output(
        "curl",
        &[
            "--silent",
            "--fail",
            "--max-time",
            "20",
            "--interface",
            STRANGER,
            "--header",
            "X-Forwarded-For: 203.0.113.9",
            "http://192.168.77.2/style.css?forged",
        ],
    );
    assert!(forged.status.success());
    let line = guest.expect_line("GET /style.css?forged 200", Duration::from_secs(20));
    assert!(line.trim_end().ends_with(&format!(" {STRANGER}")), "{line}");
}

/// The heartbeat's server in the namespace: `openssl s_server -WWW` on `hc.test:8443` (a name
/// dnsmasq answers) with a Let's Encrypt-shaped chain this test makes, whose root goes on the
/// card as `acme_ca_certificate`; it answers `GET /ping/owner-check` from a file and logs
/// `FILE:ping/owner-check` for each.
fn start_ping_server(netns: &Netns, dir: &std::path::Path) -> Daemon {
    // The shape of Let's Encrypt's R-series chains, as a health-check service presents.
    let chain = make_chain(dir, ChainShape::Rsa, "hc", "hc.test", "DNS:hc.test");
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("ping")).unwrap();
    std::fs::write(www.join("ping/owner-check"), "OK\n").unwrap();
    let mut command = netns.command("openssl");
    command.current_dir(&www).args([
        "s_server",
        "-accept",
        &format!("{HOST_ADDRESS}:{PING_PORT}"),
        "-WWW",
    ]);
    command.args(chain.s_server_args());
    Daemon::start(command, &dir.join("s_server.log"))
}

/// The heartbeat's URL (issue 31 item 4), on the ping server above.
const PING_URL: &str = "https://hc.test:8443/ping/owner-check";
/// The ping server's port.
const PING_PORT: u16 = 8443;

/// `needle` in a line the guest printed already, or (bounded) in one still to come.
fn seen_or_wait(guest: &mut bramble_tests::Guest, needle: &str, timeout: Duration) -> String {
    if let Some(line) = guest.transcript.iter().find(|line| line.contains(needle)) {
        return line.clone();
    }
    guest.expect_line(needle, timeout)
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn strict_parser_refuses_what_rfc_5424_forbids() {
    let good = b"<134>1 2026-12-02T04:33:20Z sill bramble - access [meta sequenceId=\"2\"] GET /";
    assert!(parse_5424(good).is_ok());
    for bad in [
        &b"<192>1 - sill bramble - event - x"[..],
        b"<013>1 - sill bramble - event - x",
        b"<13>2 - sill bramble - event - x",
        b"<13>1 2026-13-02T04:33:20Z sill bramble - event - x",
        b"<13>1 2026-12-02 04:33:20 sill bramble - event - x",
        b"<13>1 - sill bramble - event [meta sequenceId=2] x",
        b"<13>1 - sill bramble - event [me=ta] x",
        b"<13>1 - sill bramble - event",
        b"<13>1 - sill bramble - event -x",
        b"<13>1 -  bramble - event - x",
    ] {
        assert!(
            parse_5424(bad).is_err(),
            "accepted {:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn syslog_receives_boot_events_and_every_request_and_the_console_keeps_a_ring() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    netns::write_site(&site);
    std::fs::write(site.join("style.css"), STYLE.repeat(40)).unwrap();
    let settings = dir.path().join("BRAMBLE.TXT");
    std::fs::write(
        &settings,
        format!(
            "address = 192.168.77.2/24\nhostname = sill\nntp = {HOST_ADDRESS}\n\
             dns = {HOST_ADDRESS}\nsyslog = logs.test:{COLLECTOR_PORT}\n\
             heartbeat = {PING_URL}\nheartbeat_every = 1\n\
             status_from = {HOST_ADDRESS}/32\nstatus_token = {TOKEN}\n\
             proxy_from = {HOST_ADDRESS}/32\n"
        ),
    )
    .unwrap();
    // The kernel is built (when stale) before anything with a time limit starts.
    let kernel_image = kernel().raw.display().to_string();
    let netns = Netns::create();
    // The collector's name, answered by dnsmasq (which forwards nothing).
    let mut dnsmasq = netns.command("dnsmasq");
    dnsmasq.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        "--port=53",
        &format!("--listen-address={HOST_ADDRESS}"),
        "--except-interface=lo",
        &format!("--address=/logs.test/{HOST_ADDRESS}"),
        &format!("--address=/hc.test/{HOST_ADDRESS}"),
        "--user=root",
        "--log-queries",
        "--log-facility=-",
        &format!("--pid-file={}", dir.path().join("dnsmasq.pid").display()),
    ]);
    let _dnsmasq = Daemon::start(dnsmasq, &dir.path().join("dnsmasq.log"));
    // The heartbeat's server, whose CA's root goes on the card; the clock its certificate is
    // checked against.
    let _ping_server = start_ping_server(&netns, dir.path());
    let _sntp = Sntp::start(&netns);
    let card = dir.path().join("card.img");
    let path = |p: &std::path::Path| p.display().to_string();
    bramble_image(&[
        "--site",
        &path(&site),
        "--config",
        &path(&settings),
        "--acme-ca",
        &path(&dir.path().join("ca.pem")),
        "--kernel",
        &kernel_image,
        "-o",
        &path(&card),
    ]);
    // The collector listens before the guest boots, so the boot's lines (kept in the ring
    // until the address is up) reach it.
    let mut collector = netns
        .command(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "syslog_collector_in_namespace",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(UNTIL_VAR, "GET /missing-page")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the collector");
    let mut collector_out = BufReader::new(collector.stdout.take().unwrap());
    let mut line = String::new();
    while collector_out.read_line(&mut line).unwrap() > 0 && !line.contains("collector: listening")
    {
        line.clear();
    }
    let args: Vec<String> = vec!["--image".into(), path(&card), "--tap".into(), TAP.into()];
    let mut qemu = start_bramble_qemu(&netns, &args);
    let guest = qemu.guest();
    guest.expect_line("Bramble", BOOT_TIMEOUT);
    guest.expect_line("serving: http://192.168.77.2/", BOOT_TIMEOUT);
    // The heartbeat's first ping goes once the clock is set (its server's certificate is
    // checked against it); the requests below wait for it, so that the visitor counts all
    // fall on the clock's day.
    let ping = seen_or_wait(guest, "the next ping in", Duration::from_secs(60));
    assert!(
        ping.contains("heartbeat: answered 200; the next ping in 60 s"),
        "{ping}\ndnsmasq:\n{}\nping server:\n{}\nserial:\n{}",
        std::fs::read_to_string(dir.path().join("dnsmasq.log")).unwrap_or_default(),
        std::fs::read_to_string(dir.path().join("s_server.log")).unwrap_or_default(),
        guest.transcript.join("\n")
    );
    let served = std::fs::read_to_string(dir.path().join("s_server.log")).unwrap_or_default();
    assert!(
        served.contains("FILE:ping/owner-check"),
        "the ping server saw no ping:\n{served}"
    );
    for path in ["/", "/blob.bin"] {
        assert!(
            netns.curl(&format!("http://192.168.77.2{path}")).is_some(),
            "curl {path}"
        );
    }
    check_status_page_and_metrics(&netns, dir.path());
    check_varnish_in_front(&netns, dir.path(), guest);

    // A missing page (curl --fail: no body) is the collector's signal to stop.
    let _ = netns.curl("http://192.168.77.2/missing-page");
    guest.expect_line("GET /missing-page 404", Duration::from_secs(20));

    // The console's ring, in order.
    guest.send_line("log");
    guest.expect_line("--- log: the last", Duration::from_secs(10));
    guest.expect_line("--- end of log ---", Duration::from_secs(10));
    let transcript = guest.transcript.join("\n");
    let ring = transcript
        .rsplit("--- log: the last")
        .next()
        .unwrap()
        .to_string();
    for needle in [
        "a web server with no operating system",
        "syslog: sending the log to logs.test port 1514",
        "syslog: logs.test is 192.168.77.1",
        "GET /blob.bin 200",
        "GET /missing-page 404",
    ] {
        assert!(ring.contains(needle), "ring lacks {needle:?}:\n{ring}");
    }

    // The collector stops at the missing page's line (or its time limit).
    let mut datagrams = Vec::new();
    line.clear();
    while collector_out.read_line(&mut line).unwrap() > 0 {
        if let Some((_, hex)) = line.trim().split_once(DATAGRAM_PREFIX) {
            datagrams.push(unhex(hex));
        }
        line.clear();
    }
    let _ = collector.wait();
    let messages: Vec<Message> = datagrams
        .iter()
        .map(|datagram| {
            parse_5424(datagram)
                .unwrap_or_else(|error| panic!("{error}: {:?}", String::from_utf8_lossy(datagram)))
        })
        .collect();
    let texts: Vec<String> = messages
        .iter()
        .map(|m| format!("{} {} {}", m.priority, m.msgid, m.text))
        .collect();
    let listing = texts.join("\n");
    for message in &messages {
        assert_eq!(message.hostname, "sill");
        assert_eq!(message.app_name, "bramble");
        // RFC 5424's NILVALUE until the clock is set, then the time (checked by the parser).
        if message.msgid == "access" {
            assert_ne!(
                message.timestamp, "-",
                "requests come after the clock is set"
            );
        }
        assert_eq!(message.priority / 8, 16, "facility local0");
        assert_eq!(message.elements.len(), 1);
        assert_eq!(message.elements[0].0, "meta");
    }
    // Sequence numbers rise by one: nothing was dropped at this pace.
    let sequence: Vec<u64> = messages
        .iter()
        .map(|m| m.elements[0].1[0].1.parse().unwrap())
        .collect();
    assert!(
        sequence.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "sequence ids {sequence:?}\n{listing}"
    );
    assert_eq!(
        sequence.first(),
        Some(&1),
        "the first line of the boot:\n{listing}"
    );
    let event = |needle: &str| {
        messages
            .iter()
            .any(|m| m.msgid == "event" && m.text.contains(needle))
    };
    for needle in [
        "a web server with no operating system",
        "reset: ",
        "net: static address 192.168.77.2/24",
        "serving: http://192.168.77.2/",
        "syslog: logs.test is 192.168.77.1",
    ] {
        assert!(event(needle), "no event {needle:?}:\n{listing}");
    }
    for (path, status) in [("/", 200), ("/blob.bin", 200), ("/missing-page", 404)] {
        let line = format!("GET {path} {status} ");
        assert!(
            messages.iter().any(|m| m.msgid == "access"
                && m.priority == 16 * 8 + 6
                && m.text.starts_with(&line)
                && m.text.ends_with(" 192.168.77.1")),
            "no access line {line:?} from 192.168.77.1:\n{listing}"
        );
    }
}
