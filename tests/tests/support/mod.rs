//! Helpers shared by the end-to-end HTTP tests: boot a guest serving a site through a
//! forwarded 127.0.0.1 port, speak raw HTTP/1.1 to it, read its responses (through the one
//! parser, bramble-testkit), read access-log lines.

#![allow(dead_code)] // each test binary uses a different part of this module

pub mod chromium;
pub mod tls;

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
pub use bramble_testkit::{Parsed, Response, parse_response};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long one read may block before a test gives up on a response (generous: QEMU's
/// usb-net is slow and the CI machine is shared).
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Last-Modified the packer records for every file of the test sites (SOURCE_DATE_EPOCH).
pub const SOURCE_DATE_EPOCH: u64 = 1_700_000_000;
/// [`SOURCE_DATE_EPOCH`] as an IMF-fixdate.
pub const SOURCE_DATE: &str = "Tue, 14 Nov 2023 22:13:20 GMT";

/// A booted guest serving a site on `127.0.0.1:port`.
pub struct ServedSite {
    /// The QEMU guest (killed on drop).
    pub guest: Guest,
    /// The host port forwarded to the guest's port 80.
    pub port: u16,
    /// Holds the SD card image until the guest is gone.
    _dir: tempfile::TempDir,
}

/// A free TCP port on 127.0.0.1 (closed again at once; QEMU binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local address")
        .port()
}

/// Packs `site` (every Last-Modified = [`SOURCE_DATE_EPOCH`]), builds an SD card with
/// `settings` as BRAMBLE.TXT, boots raspi1ap with the NIC behind a hub (the B+ shape) and
/// waits until the kernel says it is serving.
pub fn boot_site(site: &Path, settings: &str) -> ServedSite {
    boot_site_with(site, settings, None, false).0
}

/// Packs `site` as [`boot_site`] does (every Last-Modified = [`SOURCE_DATE_EPOCH`]).
pub fn pack(site: &Path) -> bramble::pack::PackOutput {
    let options = PackOptions {
        source_date_epoch: Some(SOURCE_DATE_EPOCH),
        ..PackOptions::default()
    };
    pack_site(site, &options).expect("pack the site")
}

/// Like [`boot_site`], with a certificate chain and key on the card (`tls`: the files'
/// names on the card and their bytes) and the guest's port 443 forwarded too; returns the
/// HTTPS host port as well. With `host_loopback`, the guest may reach the host's loopback
/// as 10.0.2.2 (a test's SNTP server): `settings` must then name servers by address only
/// (`ntp = 10.0.2.2:PORT`), so that the guest resolves no name through the host.
pub fn boot_site_with(
    site: &Path,
    settings: &str,
    tls: Option<bramble::image::TlsFiles>,
    host_loopback: bool,
) -> (ServedSite, Option<u16>) {
    boot_site_packed(
        site,
        settings,
        tls,
        host_loopback,
        bramble::pack::SiteOptions::default(),
    )
}

/// Like [`boot_site_with`], packing the site with `site_options` (`--search`, `--listing`,
/// `--clean-urls`...).
pub fn boot_site_packed(
    site: &Path,
    settings: &str,
    tls: Option<bramble::image::TlsFiles>,
    host_loopback: bool,
    site_options: bramble::pack::SiteOptions,
) -> (ServedSite, Option<u16>) {
    let options = PackOptions {
        source_date_epoch: Some(SOURCE_DATE_EPOCH),
        site: site_options,
        ..PackOptions::default()
    };
    let packed = pack_site(site, &options).expect("pack the site");
    boot_image_with(packed.image, settings, tls, host_loopback)
}

/// Builds an SD card holding `site_image` as SITE.BIN and `settings` as BRAMBLE.TXT, boots
/// raspi1ap with the NIC behind a hub and waits until the kernel says it is serving.
pub fn boot_image(site_image: Vec<u8>, settings: &str) -> ServedSite {
    boot_image_with(site_image, settings, None, false).0
}

/// [`boot_image`] with a certificate chain and key on the card and the host's loopback
/// reachable, as [`boot_site_with`].
pub fn boot_image_with(
    site_image: Vec<u8>,
    settings: &str,
    tls: Option<bramble::image::TlsFiles>,
    host_loopback: bool,
) -> (ServedSite, Option<u16>) {
    boot_card(site_image, settings, tls, host_loopback, None)
}

/// [`boot_image`] with the QEMU monitor on the Unix socket `monitor` (for
/// [`bramble_tests::monitor::Monitor`]: pull the card, take the link down).
pub fn boot_image_with_monitor(site_image: Vec<u8>, settings: &str, monitor: &Path) -> ServedSite {
    boot_card(site_image, settings, None, false, Some(monitor)).0
}

fn boot_card(
    site_image: Vec<u8>,
    settings: &str,
    tls: Option<bramble::image::TlsFiles>,
    host_loopback: bool,
    monitor: Option<&Path>,
) -> (ServedSite, Option<u16>) {
    assert!(
        !host_loopback || settings.contains("ntp = 10.0.2.2:"),
        "a guest that can reach the host must be given its time server's address"
    );
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let card = dir.path().join("card.img");
    let inputs = ImageInputs {
        kernel: std::fs::read(&kernel().raw).expect("kernel.img"),
        site: site_image,
        settings: settings.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls,
    };
    let https_port = inputs.tls.as_ref().map(|_| free_port());
    build_image(&inputs, &card).expect("build the SD card image");
    let port = free_port();
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::User {
        host_port: port,
        topology: Topology::BehindHub,
    });
    config.https_host_port = https_port;
    config.isolated = !host_loopback;
    config.monitor_socket = monitor.map(Path::to_path_buf);
    let mut guest = Guest::start(&config);
    guest.expect_line("serving: http://", BOOT_TIMEOUT);
    eprintln!(
        "guest serving on 127.0.0.1:{port} after {:.1} s (kernel built, site packed, booted)",
        started.elapsed().as_secs_f64()
    );
    (
        ServedSite {
            guest,
            port,
            _dir: dir,
        },
        https_port,
    )
}

/// Asks the kernel for its status and returns its card cache line.
pub fn cache_status(guest: &mut Guest) -> bramble_status::Cache {
    guest.send_line("status");
    let line = guest.expect_line(bramble_status::Cache::PREFIX, Duration::from_secs(20));
    bramble_status::Cache::parse(&line).unwrap_or_else(|| panic!("unreadable: {line:?}"))
}

/// Every file under `root` as (URL path, bytes), sorted by URL.
pub fn site_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).expect("read site dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let url = format!("/{}", path.strip_prefix(root).unwrap().display());
                files.push((url, std::fs::read(&path).expect("read site file")));
            }
        }
    }
    files.sort();
    files
}

/// The repository's default site (what `bramble` packs when given no site).
pub fn default_site_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../site/default")
}

/// One client connection speaking raw bytes.
pub struct Client {
    stream: TcpStream,
    /// Received bytes not yet parsed into responses.
    pending: Vec<u8>,
    /// The server closed its side (read returned 0) or reset the connection.
    pub eof: bool,
    /// How long one read may block.
    timeout: Duration,
}

impl Client {
    /// Connects to 127.0.0.1:`port`.
    pub fn connect(port: u16) -> Client {
        Client::connect_with_timeout(port, READ_TIMEOUT)
    }

    /// Connects to 127.0.0.1:`port`; each read gives up after `timeout`.
    pub fn connect_with_timeout(port: u16, timeout: Duration) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        stream.set_read_timeout(Some(timeout)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            stream,
            pending: Vec::new(),
            eof: false,
            timeout,
        }
    }

    /// Sends `bytes` as they are.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("sending {:?}: {e}", String::from_utf8_lossy(bytes)));
    }

    /// Sends `bytes`; false if the server had already closed or reset the connection.
    pub fn try_send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    /// Closes the sending half.
    pub fn finish_sending(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Reads more bytes into `pending`; false at end of stream, reset, or read timeout.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => {
                self.eof = true;
                false
            }
            Ok(n) => {
                self.pending.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => false,
            Err(_) => {
                self.eof = true;
                false
            }
        }
    }

    /// Reads the next response; `None` if the stream ended (or timed out) before a whole
    /// one arrived.
    pub fn try_response(&mut self, head_request: bool) -> Option<Response> {
        loop {
            match parse_response(&self.pending, head_request, self.eof) {
                Parsed::Complete(response, used) => {
                    self.pending.drain(..used);
                    return Some(response);
                }
                Parsed::Invalid(why) => panic!("{why}"),
                Parsed::Partial => {
                    // At end of stream the parse above already knew it; a read that times out
                    // gives up; otherwise parse again with what arrived (or with the EOF).
                    if self.eof || (!self.fill() && !self.eof) {
                        return None;
                    }
                }
            }
        }
    }

    /// Reads the next response, panicking with `context` if none comes.
    pub fn response(&mut self, head_request: bool, context: &str) -> Response {
        self.try_response(head_request).unwrap_or_else(|| {
            panic!(
                "{context}: no complete response (eof {}, {} bytes pending: {:?})",
                self.eof,
                self.pending.len(),
                String::from_utf8_lossy(&self.pending[..self.pending.len().min(300)])
            )
        })
    }

    /// Waits up to `timeout` for the server to close the connection, discarding whatever
    /// arrives meanwhile. True if it closed (FIN or reset).
    pub fn wait_closed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.eof {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.stream.set_read_timeout(Some(self.timeout)).unwrap();
                return false;
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(10))))
                .unwrap();
            self.fill();
            self.pending.clear();
        }
        self.stream.set_read_timeout(Some(self.timeout)).unwrap();
        true
    }

    /// Bytes received but not parsed as a response.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// The underlying stream (e.g. to set socket options).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

/// Sends one raw request on a fresh connection and reads one response (HEAD if the request
/// starts with "HEAD ").
pub fn exchange(port: u16, request: &str) -> Response {
    let mut client = Client::connect(port);
    client.send(request.as_bytes());
    client.response(request.starts_with("HEAD "), request)
}

/// A GET of `path` on a fresh connection with `Connection: close` and `extra` header lines
/// (each ending in CRLF).
pub fn get(port: u16, path: &str, extra: &str) -> Response {
    exchange(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: bramble\r\nConnection: close\r\n{extra}\r\n"),
    )
}

/// An access-log line from the serial console: method, target, status, bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessLine {
    /// Request method ("-" for an unparsable request).
    pub method: String,
    /// Request target as received.
    pub target: String,
    /// Status sent.
    pub status: u16,
    /// Bytes handed to the socket (head and body).
    pub bytes: u64,
    /// The response was cut off before its end.
    pub interrupted: bool,
}

/// Parses a serial line such as `[    5.123456] INFO  GET /a.css 200 1234 0.512ms`.
pub fn access_line(line: &str) -> Option<AccessLine> {
    let rest = line.split_once("] ")?.1;
    let rest = rest.strip_prefix("INFO")?.trim_start();
    let fields: Vec<&str> = rest.split(' ').collect();
    if fields.len() < 5 || !fields[4].ends_with("ms") {
        return None;
    }
    let method = fields[0];
    if method != "-" && !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    Some(AccessLine {
        method: method.to_string(),
        target: fields[1].to_string(),
        status: fields[2].parse().ok()?,
        bytes: fields[3].parse().ok()?,
        interrupted: fields.get(5) == Some(&"interrupted"),
    })
}

/// Collects serial lines for `quiet` after the last one arrives (at most `limit`), and
/// returns the access-log lines among everything seen so far from `from` on.
pub fn access_log_since(guest: &mut Guest, from: usize, quiet: Duration) -> Vec<AccessLine> {
    while guest.wait_for(|_| true, quiet).is_some() {}
    guest.transcript[from.min(guest.transcript.len())..]
        .iter()
        .filter_map(|line| access_line(line))
        .collect()
}

/// Asks the kernel for its status and returns its HTTP line.
pub fn http_status(guest: &mut Guest) -> bramble_status::Http {
    guest.send_line("status");
    let line = guest.expect_line(bramble_status::Http::PREFIX, Duration::from_secs(20));
    bramble_status::Http::parse(&line).unwrap_or_else(|| panic!("unreadable: {line:?}"))
}

/// Decodes a gzip body.
pub fn gunzip(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut out)
        .expect("valid gzip body");
    out
}

/// Decodes a brotli body.
pub fn unbrotli(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    brotli::Decompressor::new(body, 4096)
        .read_to_end(&mut out)
        .expect("valid brotli body");
    out
}

/// Collects check failures so one guest boot can run many checks and report them all.
#[derive(Default)]
pub struct Checks {
    failures: Vec<String>,
    passed: usize,
}

impl Checks {
    /// Records `ok` for the check `name`, with `detail` when it failed.
    pub fn check(&mut self, name: &str, ok: bool, detail: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
            eprintln!("  ok   {name}");
        } else {
            let detail = detail();
            eprintln!("  FAIL {name}: {detail}");
            self.failures.push(format!("{name}: {detail}"));
        }
    }

    /// Panics listing every failure, if any.
    pub fn finish(self, what: &str) {
        assert!(
            self.failures.is_empty(),
            "{what}: {} of {} checks failed:\n{}",
            self.failures.len(),
            self.failures.len() + self.passed,
            self.failures.join("\n")
        );
        eprintln!("{what}: all {} checks passed", self.passed);
    }
}

/// An SNTP server on 127.0.0.1 answering every request with the host's time (stratum 2),
/// for guests told `ntp = 10.0.2.2:PORT` (QEMU's user network maps 10.0.2.2 to the host).
/// Returns the port; the server thread ends with the test process.
pub fn start_sntp_server() -> u16 {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind the SNTP server");
    let port = socket.local_addr().expect("local address").port();
    std::thread::spawn(move || {
        let mut request = [0u8; 512];
        while let Ok((len, peer)) = socket.recv_from(&mut request) {
            if len < 48 {
                continue;
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970");
            let seconds = now.as_secs() + 2_208_988_800;
            let fraction = (u64::from(now.subsec_nanos()) << 32) / 1_000_000_000;
            let timestamp = ((seconds << 32) | fraction).to_be_bytes();
            let mut reply = [0u8; 48];
            reply[0] = (4 << 3) | 4; // version 4, server
            reply[1] = 2; // stratum
            reply[24..32].copy_from_slice(&request[40..48]);
            reply[32..40].copy_from_slice(&timestamp);
            reply[40..48].copy_from_slice(&timestamp);
            let _ = socket.send_to(&reply, peer);
        }
    });
    port
}
