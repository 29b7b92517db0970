//! Hosted integration tests: the real appliance loop over a TAP device in a network namespace
//! each test creates (and deletes, even on failure), driven by ping, curl and dnsmasq.
//!
//! All traffic stays inside the namespace: the host side of the TAP is 192.168.77.1/24, the
//! guest 192.168.77.2 (or a DHCP lease from 192.168.77.50-60). The tests skip with a printed
//! reason only when not root, or when `ip` or /dev/net/tun is missing; CI runs as root.
//! IPv6: radvd announces 2001:db8:1::/64 (then renumbers to 2001:db8:2::/64), the host side
//! holds ::1 in each, curl -6 fetches over HTTP and HTTPS, and Avahi judges mDNS over
//! ff02::fb and 224.0.0.251; tcpdump shows that `--no-ipv6` sends no IPv6 frame.

use bramble_site::{FileSpec, SiteImageWriter, VariantSpec, http_date};
use bramble_testkit::netns::{TapNamespace, run_ok};
use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

// radvd, Avahi and tcpdump as the IPv6 peers, shared with the QEMU tests.
#[path = "../../../tests/tests/netns/ipv6.rs"]
#[allow(dead_code)] // the QEMU tests use parts these do not
mod ipv6_peers;

use ipv6_peers::{Avahi, Capture, Prefix, Radvd, Transport};
use std::net::{IpAddr, Ipv6Addr};

const HOST: &str = "192.168.77.1";
const GUEST: &str = "192.168.77.2";
const TAP: &str = "btap0";
const BIN: &str = env!("CARGO_BIN_EXE_bramble-hosted");

/// Why these tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    #[allow(unsafe_code)] // libc's geteuid: this test crate has no safe wrapper of it
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Some("not root (network namespaces and TAP devices need it)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("`ip` (iproute2) is not installed".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    None
}

macro_rules! skip_unless_able {
    () => {
        if let Some(reason) = skip_reason() {
            eprintln!("SKIPPED: {reason}");
            return;
        }
    };
}

fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

/// A network namespace with a TAP device whose host side is 192.168.77.1/24 (the test kit's),
/// deleted with everything in it on drop.
struct Namespace {
    net: TapNamespace,
}

impl Namespace {
    fn new() -> Self {
        Namespace {
            net: TapNamespace::create("bramble-test", TAP, &format!("{HOST}/24")),
        }
    }

    fn command(&self, program: &str) -> Command {
        self.net.command(program)
    }

    fn ip(&self, args: &[&str]) -> Output {
        self.net.ip(args)
    }

    /// `curl` inside the namespace, bounded to 20 s.
    fn curl(&self, url: &str, extra: &[&str]) -> Output {
        run(self
            .command("curl")
            .args(["--silent", "--show-error", "--max-time", "20"])
            .args(extra)
            .arg(url))
    }

    /// Writes `bytes` to a file in this namespace's scratch directory.
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.net.dir().join(name);
        fs::write(&path, bytes).unwrap();
        path
    }

    /// Starts `bramble-hosted` inside the namespace with `args`, logging to a file.
    fn start_guest(&self, site: &Path, args: &[&str]) -> Guest {
        let log = self.net.dir().join("guest.log");
        let log_file = fs::File::create(&log).unwrap();
        let child = self
            .command(BIN)
            .args(["--tap", TAP, "--site"])
            .arg(site)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start bramble-hosted");
        Guest { child, log }
    }

    /// Pings `address` once per attempt until it answers; false if it never does.
    fn wait_for_ping(&self, address: &str, attempts: u32) -> bool {
        (0..attempts).any(|_| {
            run(self
                .command("ping")
                .args(["-c", "1", "-W", "1", "-w", "2", address]))
            .status
            .success()
        })
    }
}

/// A running `bramble-hosted`; killed (by its PID, through `Child`) on drop.
struct Guest {
    child: Child,
    log: PathBuf,
}

impl Guest {
    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log contains `needle`; returns the log.
    fn wait_for_log(&mut self, needle: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("bramble-hosted exited ({status}) before logging {needle:?}:\n{log}");
            }
            assert!(
                start.elapsed() < limit,
                "no {needle:?} in the log within {limit:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- bramble-hosted log ---\n{}", self.log());
        }
    }
}

/// Deterministic, incompressible-looking bytes.
fn pseudo_random(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn file_spec(path: &str, content_type: &str, body: Vec<u8>) -> FileSpec {
    FileSpec {
        path: path.into(),
        content_type: content_type.into(),
        cache_control: "no-cache".into(),
        last_modified: 1_700_000_000,
        last_modified_http: http_date(1_700_000_000),
        identity: VariantSpec {
            etag: format!("\"{:08x}-{}\"", body.len(), path.len()),
            body,
        },
        gzip: None,
        brotli: None,
    }
}

const INDEX: &[u8] =
    b"<!doctype html><title>Bramble</title><h1>Hello from the hosted appliance</h1>\n";

/// A site with an index page and a 300 KB file (many windows' worth of segments).
fn test_site(ns: &Namespace) -> (PathBuf, Vec<u8>) {
    let big = pseudo_random(300_000, 7);
    let mut writer = SiteImageWriter::new();
    writer
        .add(file_spec(
            "/index.html",
            "text/html; charset=utf-8",
            INDEX.to_vec(),
        ))
        .unwrap();
    writer
        .add(file_spec(
            "/big.bin",
            "application/octet-stream",
            big.clone(),
        ))
        .unwrap();
    let image = writer.finish().unwrap();
    (ns.file("SITE.BIN", &image), big)
}

fn static_args() -> Vec<&'static str> {
    vec!["--static", "192.168.77.2/24", "--hostname", "bramble-test"]
}

#[test]
fn answers_arp_and_100_pings_without_loss() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, _) = test_site(&ns);
    let _guest = ns.start_guest(&site, &static_args());
    assert!(ns.wait_for_ping(GUEST, 20), "guest never answered a ping");
    // ARP: the host's neighbour table learned the guest's MAC.
    let neighbours = ns.ip(&["neigh", "show", "dev", TAP]);
    let neighbours = String::from_utf8_lossy(&neighbours.stdout);
    assert!(
        neighbours.contains(GUEST) && neighbours.contains("02:00:00:62:72:01"),
        "no ARP entry for the guest: {neighbours}"
    );
    let out = run(ns.command("ping").args([
        "-c", "100", "-i", "0.01", "-W", "2", "-w", "30", "-q", GUEST,
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("100 packets transmitted, 100 received"),
        "ping lost packets:\n{text}"
    );
}

#[test]
fn serves_the_site_over_http() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, big) = test_site(&ns);
    let mut guest = ns.start_guest(&site, &static_args());
    assert!(ns.wait_for_ping(GUEST, 20), "guest never answered a ping");

    let out = ns.curl(&format!("http://{GUEST}/"), &["--fail"]);
    assert!(
        out.status.success(),
        "curl /: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, INDEX);

    let out = ns.curl(&format!("http://{GUEST}/big.bin"), &["--fail"]);
    assert!(
        out.status.success(),
        "curl /big.bin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == big,
        "big.bin differs ({} bytes received)",
        out.stdout.len()
    );

    // Several requests on one kept-alive connection, then a miss.
    let index_url = format!("http://{GUEST}/index.html");
    let out = ns.curl(&index_url, &["--fail", &index_url, &index_url]);
    assert!(out.status.success());
    assert_eq!(out.stdout, [INDEX, INDEX, INDEX].concat());
    let out = ns.curl(
        &format!("http://{GUEST}/missing"),
        &["--output", "/dev/null", "--write-out", "%{http_code}"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");

    // Ten clients at once, each fetching the big file.
    let outputs: Vec<PathBuf> = (0..10)
        .map(|i| ns.net.dir().join(format!("client{i}.bin")))
        .collect();
    let children: Vec<Child> = outputs
        .iter()
        .map(|output| {
            ns.command("curl")
                .args(["--silent", "--fail", "--max-time", "30", "--output"])
                .arg(output)
                .arg(format!("http://{GUEST}/big.bin"))
                .spawn()
                .unwrap()
        })
        .collect();
    for (child, output) in children.into_iter().zip(&outputs) {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let body = fs::read(output).unwrap();
        assert!(body == big, "a concurrent client got {} bytes", body.len());
    }
    let log = guest.wait_for_log(
        "net: static address 192.168.77.2/24",
        Duration::from_secs(5),
    );
    assert!(log.contains("GET /big.bin"), "no access log line:\n{log}");
}

#[test]
fn survives_dropped_and_corrupted_frames() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, big) = test_site(&ns);
    let mut args = static_args();
    args.extend([
        "--drop-percent",
        "3",
        "--corrupt-percent",
        "2",
        "--fault-seed",
        "42",
    ]);
    let guest = ns.start_guest(&site, &args);
    assert!(ns.wait_for_ping(GUEST, 30), "guest never answered a ping");

    // Every fetch completes with the exact bytes: TCP retransmits what was dropped, and
    // checksums reject what was corrupted (nothing corrupted reaches the client). Lost
    // segments cost a retransmission timeout (1 s at least), hence the long bound.
    let out = ns.curl(
        &format!("http://{GUEST}/big.bin"),
        &["--fail", "--max-time", "120"],
    );
    assert!(
        out.status.success(),
        "big.bin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first_difference = out.stdout.iter().zip(&big).position(|(a, b)| a != b);
    assert!(
        out.stdout == big,
        "big.bin differs: {} bytes, first difference at {first_difference:?}",
        out.stdout.len()
    );
    for round in 0..5 {
        let out = ns.curl(&format!("http://{GUEST}/"), &["--fail", "--max-time", "60"]);
        assert!(
            out.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, INDEX, "round {round}");
    }

    // Pings: about one round trip in ten is lost; never all, and (with 100 tries) not none.
    let out = run(ns.command("ping").args([
        "-c", "100", "-i", "0.01", "-W", "1", "-w", "10", "-q", GUEST,
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |suffix: &str| -> u32 {
        text.split([',', '\n'])
            .find_map(|part| part.trim().strip_suffix(suffix))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let (transmitted, received) = (count(" packets transmitted"), count(" received"));
    assert!(
        received > 0 && received < transmitted && received * 2 > transmitted,
        "expected most but not all pings to survive 3% drop + 2% corruption:\n{text}"
    );
    drop(guest);
}

#[test]
fn link_loss_is_logged_and_recovered() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, _) = test_site(&ns);
    let mut guest = ns.start_guest(&site, &static_args());
    assert!(ns.wait_for_ping(GUEST, 20));
    ns.ip(&["link", "set", TAP, "down"]);
    guest.wait_for_log("net: link down", Duration::from_secs(10));
    ns.ip(&["link", "set", TAP, "up"]);
    // The host forgets its routes when the link goes down: put the address back.
    let _ = run(ns
        .command("ip")
        .args(["addr", "add", &format!("{HOST}/24"), "dev", TAP]));
    guest.wait_for_log("net: link up", Duration::from_secs(10));
    assert!(
        ns.wait_for_ping(GUEST, 20),
        "no ping after the link came back"
    );
    let out = ns.curl(&format!("http://{GUEST}/"), &["--fail"]);
    assert_eq!(out.stdout, INDEX);
}

#[test]
fn missing_site_gets_the_diagnostic_page() {
    skip_unless_able!();
    let ns = Namespace::new();
    let site = ns.net.dir().join("NOPE.BIN");
    let _guest = ns.start_guest(&site, &static_args());
    assert!(ns.wait_for_ping(GUEST, 20));
    let out = ns.curl(
        &format!("http://{GUEST}/"),
        &["--write-out", "\n%{http_code}"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n503"), "expected 503, got:\n{text}");
    assert!(
        text.contains("NOPE.BIN"),
        "the page should name the problem:\n{text}"
    );
}

#[test]
fn gets_an_address_from_dhcp_and_sends_its_hostname() {
    skip_unless_able!();
    if Command::new("dnsmasq").arg("--version").output().is_err() {
        // CI installs dnsmasq-base; a developer machine may not have it.
        eprintln!("SKIPPED: dnsmasq is not installed (apt-get install -y dnsmasq-base)");
        return;
    }
    let ns = Namespace::new();
    let (site, _) = test_site(&ns);
    let leases = ns.net.dir().join("leases");
    let mut dnsmasq = ns
        .command("dnsmasq")
        .args([
            "--keep-in-foreground",
            "--no-resolv",
            "--no-hosts",
            "--port=0",
            "--bind-interfaces",
            &format!("--interface={TAP}"),
            "--dhcp-range=192.168.77.50,192.168.77.60,255.255.255.0,2m",
            "--dhcp-option=option:router,192.168.77.1",
            "--dhcp-authoritative",
            "--no-ping",
            &format!("--pid-file={}", ns.net.dir().join("dnsmasq.pid").display()),
        ])
        .arg(format!("--dhcp-leasefile={}", leases.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dnsmasq");
    struct KillOnDrop<'a>(&'a mut Child);
    impl Drop for KillOnDrop<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _dnsmasq = KillOnDrop(&mut dnsmasq);

    let mut guest = ns.start_guest(&site, &["--hostname", "bramble-dhcp"]);
    let log = guest.wait_for_log("dhcp: gateway", Duration::from_secs(30));
    let address = log
        .lines()
        .find_map(|line| line.split("dhcp: lease ").nth(1))
        .and_then(|rest| rest.split('/').next())
        .expect("lease line")
        .to_string();
    let parsed: Ipv4Addr = address.parse().unwrap();
    assert!((50..=60).contains(&parsed.octets()[3]), "leased {address}");
    assert!(log.contains("for 120 s"), "lease time not logged:\n{log}");
    assert!(log.contains("dhcp: gateway 192.168.77.1"), "{log}");

    // dnsmasq recorded the hostname the guest sent in option 12.
    let mut lease_text = String::new();
    for _ in 0..50 {
        lease_text = fs::read_to_string(&leases).unwrap_or_default();
        if lease_text.contains("bramble-dhcp") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        lease_text.contains(&address) && lease_text.contains("bramble-dhcp"),
        "lease file lacks the hostname: {lease_text:?}"
    );
    assert!(ns.wait_for_ping(&address, 20));
    let out = ns.curl(&format!("http://{address}/"), &["--fail"]);
    assert_eq!(out.stdout, INDEX);
}

/// Runs `f` on a thread that has entered the namespace's network namespace.
fn in_namespace<T: Send + 'static>(ns: &Namespace, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{}", ns.net.name());
    std::thread::spawn(move || {
        let file = fs::File::open(&path).expect("open netns handle");
        #[allow(unsafe_code)] // libc's setns: this test crate has no safe wrapper of it
        // SAFETY: setns on a namespace file descriptor that stays open during the call;
        // it affects only this thread, which exits when `f` returns.
        let result = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(result, 0, "setns: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("namespace thread panicked")
}

/// A one-question mDNS query for `name` type A, as a legacy unicast resolver sends it.
fn mdns_query(id: u16, name: &str) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

#[test]
fn answers_mdns_for_its_hostname() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, _) = test_site(&ns);
    let mut guest = ns.start_guest(&site, &static_args());
    assert!(ns.wait_for_ping(GUEST, 20));
    // Probing and announcing take about 2 s.
    guest.wait_for_log("mdns: bramble-test.local is ours", Duration::from_secs(10));
    ns.ip(&["route", "add", "224.0.0.0/4", "dev", TAP]);
    let answer = in_namespace(&ns, || {
        let socket = UdpSocket::bind((Ipv4Addr::new(192, 168, 77, 1), 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buffer = [0u8; 512];
        for _ in 0..10 {
            socket
                .send_to(
                    &mdns_query(0x4242, "bramble-test.local"),
                    ("224.0.0.251", 5353),
                )
                .unwrap();
            if let Ok((len, from)) = socket.recv_from(&mut buffer) {
                return Some((buffer[..len].to_vec(), from));
            }
        }
        None
    });
    let (answer, from) = answer.expect("no mDNS answer");
    assert_eq!(from.ip().to_string(), GUEST);
    assert_eq!(&answer[..2], &[0x42, 0x42], "legacy query's ID echoed");
    assert_eq!(answer[2] & 0x80, 0x80, "a response");
    assert_eq!(&answer[answer.len() - 4..], &[192, 168, 77, 2]);
    // A full mDNS querier (source port 5353, as avahi and phones send) gets the answer by
    // multicast, with the cache-flush bit and a 120 s TTL.
    let multicast = in_namespace(&ns, || {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 5353)).unwrap();
        socket
            .join_multicast_v4(
                &Ipv4Addr::new(224, 0, 0, 251),
                &Ipv4Addr::new(192, 168, 77, 1),
            )
            .unwrap();
        socket.set_multicast_loop_v4(false).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buffer = [0u8; 512];
        for _ in 0..10 {
            socket
                .send_to(&mdns_query(0, "bramble-test.local"), ("224.0.0.251", 5353))
                .unwrap();
            while let Ok((len, from)) = socket.recv_from(&mut buffer) {
                // Skip anything that is not the guest's response (e.g. our own query).
                if from.ip().to_string() == GUEST && buffer[2] & 0x80 != 0 {
                    return Some(buffer[..len].to_vec());
                }
            }
        }
        None
    });
    let multicast = multicast.expect("no multicast mDNS answer");
    let tail = &multicast[multicast.len() - 12..];
    assert_eq!(
        tail,
        &[0x80, 1, 0, 0, 0, 120, 0, 4, 192, 168, 77, 2][..],
        "{multicast:?}"
    );
    // A different name gets no answer.
    let silent = in_namespace(&ns, || {
        let socket = UdpSocket::bind((Ipv4Addr::new(192, 168, 77, 1), 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        socket
            .send_to(&mdns_query(1, "someone-else.local"), ("224.0.0.251", 5353))
            .unwrap();
        let mut buffer = [0u8; 512];
        socket.recv_from(&mut buffer).is_err()
    });
    assert!(silent);
}

#[test]
fn pcap_capture_records_the_traffic() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, _) = test_site(&ns);
    let capture = ns.net.dir().join("capture.pcap");
    let capture_arg = capture.to_str().unwrap().to_string();
    let mut args = static_args();
    args.extend(["--pcap", &capture_arg]);
    let _guest = ns.start_guest(&site, &args);
    assert!(ns.wait_for_ping(GUEST, 20));
    let out = ns.curl(&format!("http://{GUEST}/"), &["--fail"]);
    assert_eq!(out.stdout, INDEX);
    let mut bytes = Vec::new();
    fs::File::open(&capture)
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    assert_eq!(&bytes[..4], &0xa1b2_c3d4u32.to_le_bytes());
    assert_eq!(&bytes[20..24], &1u32.to_le_bytes(), "link type Ethernet");
    // Walk the records: the HTTP response body is in one of the guest's frames.
    let mut offset = 24;
    let mut frames = 0;
    let mut saw_body = false;
    while offset + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[offset + 8..offset + 12].try_into().unwrap()) as usize;
        let frame = &bytes[offset + 16..(offset + 16 + len).min(bytes.len())];
        saw_body |= frame.windows(INDEX.len()).any(|w| w == INDEX);
        offset += 16 + len;
        frames += 1;
    }
    assert!(frames >= 8, "only {frames} frames captured");
    assert!(saw_body, "the response is not in the capture");
}

/// CPU time (user + system, in clock ticks) a process has used, from /proc.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn idle_guest_sleeps_instead_of_spinning() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, _) = test_site(&ns);
    let mut guest = ns.start_guest(&site, &static_args());
    assert!(ns.wait_for_ping(GUEST, 20));
    guest.wait_for_log("is ours", Duration::from_secs(10));
    // `ip netns exec` execs the program, so the child's PID is bramble-hosted's.
    let pid = guest.child.id();
    let before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_ticks(pid) - before;
    // A polling loop would burn ~300 ticks (100 Hz) in 3 s; a sleeping one a handful.
    assert!(used < 30, "{used} ticks of CPU while idle for 3 s");
}

#[test]
fn more_clients_than_sessions_are_all_served() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, big) = test_site(&ns);
    let mut args = static_args();
    args.extend(["--sessions", "2"]);
    let guest = ns.start_guest(&site, &args);
    assert!(ns.wait_for_ping(GUEST, 20));
    // Twelve clients, two sessions: the others' requests wait in their cells (acknowledged)
    // and are answered in turn, so every client is served. Each client writes to its own
    // file: a client blocked on a full pipe would hold its session.
    let outputs: Vec<PathBuf> = (0..12)
        .map(|i| ns.net.dir().join(format!("client{i}.bin")))
        .collect();
    let children: Vec<Child> = outputs
        .iter()
        .map(|output| {
            ns.command("curl")
                .args([
                    "--silent",
                    "--show-error",
                    "--fail",
                    "--max-time",
                    "60",
                    "--output",
                ])
                .arg(output)
                .arg(format!("http://{GUEST}/big.bin"))
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "client {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let body = fs::read(&outputs[i]).unwrap();
        assert!(body == big, "client {i} got {} bytes", body.len());
    }
    drop(guest);
}

#[test]
fn falls_back_to_link_local_without_a_dhcp_server() {
    skip_unless_able!();
    let ns = Namespace::new();
    let (site, _) = test_site(&ns);
    ns.ip(&["addr", "add", "169.254.0.1/16", "dev", TAP]);
    // No DHCP server on this wire, no static address.
    let mut guest = ns.start_guest(&site, &["--hostname", "direct-cable"]);
    let log = guest.wait_for_log("using link-local", Duration::from_secs(30));
    let address = log
        .lines()
        .find_map(|line| line.split("using link-local ").nth(1))
        .and_then(|rest| rest.split('/').next())
        .expect("link-local line")
        .to_string();
    assert!(address.starts_with("169.254."), "{address}");
    assert!(ns.wait_for_ping(&address, 20), "no ping to {address}");
    let out = ns.curl(&format!("http://{address}/"), &["--fail"]);
    assert_eq!(out.stdout, INDEX);
}

/// The first prefix radvd announces, and the one it renumbers to.
const PREFIX_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);
const PREFIX_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0);
/// The name server radvd advertises (RFC 8106); nothing answers there, it is only passed on.
const DNS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x53);
/// The guest's MAC (bramble-hosted's default).
const GUEST_MAC: &str = "02:00:00:62:72:01";

impl Namespace {
    /// Gives the host side an address in each test prefix and makes it a router (radvd
    /// wants forwarding on; the host then ignores advertisements itself).
    fn add_ipv6(&self) {
        for prefix in [PREFIX_A, PREFIX_B] {
            let mut host = prefix.segments();
            host[7] = 1;
            let host = format!("{}/64", Ipv6Addr::from(host));
            self.ip(&["-6", "addr", "add", &host, "dev", TAP, "nodad"]);
        }
        run_ok(
            self.command("sysctl")
                .args(["-qw", "net.ipv6.conf.all.forwarding=1"]),
        );
    }

    /// A closure making commands inside this namespace, for the shared IPv6 peers.
    fn in_namespace(&self) -> impl Fn(&str) -> Command + '_ {
        |program| self.command(program)
    }

    /// `ping -6` until `address` answers once (the guest may drop the first reply while it
    /// resolves our address: smoltcp queues nothing behind a neighbour solicitation).
    fn wait_for_ping6(&self, address: &str, attempts: u32) -> bool {
        (0..attempts).any(|_| {
            run(self
                .command("ping")
                .args(["-6", "-c", "1", "-W", "1", "-w", "2", address]))
            .status
            .success()
        })
    }
}

/// The first `serving: http://[ADDR]/` address in `log` inside `prefix`.
fn serving_in(log: &str, prefix: Ipv6Addr) -> Ipv6Addr {
    ipv6_peers::serving_addresses(log)
        .into_iter()
        .find(|address| ipv6_peers::in_prefix(*address, prefix))
        .unwrap_or_else(|| panic!("no serving line in {prefix}/64:\n{log}"))
}

/// curl -6 fetches `path` from `address` and gets exactly `expected`.
fn check_http6(ns: &Namespace, address: &str, path: &str, expected: &[u8]) {
    let url = format!("http://{address}{path}");
    let out = ns.curl(&url, &["-6", "--globoff", "--fail"]);
    assert!(
        out.status.success(),
        "curl -6 {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == expected,
        "{url}: {} bytes, {} expected",
        out.stdout.len(),
        expected.len()
    );
}

/// Avahi over `transport` resolves `name` for `family` to `expected`.
fn check_avahi(
    ns: &Namespace,
    transport: Transport,
    name: &str,
    family: Transport,
    expected: IpAddr,
) {
    let avahi = Avahi::start(&ns.in_namespace(), ns.net.dir(), TAP, transport);
    let (address, output) = avahi.resolve(&ns.in_namespace(), name, family);
    assert_eq!(
        address,
        Some(expected),
        "avahi-resolve {family:?} {name} over {transport:?}:\n{output}\navahi-daemon:\n{}",
        avahi.log()
    );
}

#[test]
fn slaac_from_radvd_then_ping6_http_mdns_aaaa_and_renumbering() {
    skip_unless_able!();
    let ns = Namespace::new();
    ns.add_ipv6();
    let (site, big) = test_site(&ns);
    let mut capture = Capture::start(&ns.in_namespace(), ns.net.dir(), TAP);
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tls/tests/data");
    let (cert, key) = (tls.join("p256.pem"), tls.join("p256.key"));
    let mut args = static_args();
    args.extend([
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let mut guest = ns.start_guest(&site, &args);
    // radvd advertises from the host side's link-local address, formed once the guest holds
    // the TAP open (carrier up).
    ipv6_peers::wait_for_link_local(&ns.in_namespace(), TAP, Duration::from_secs(10));
    let lifetimes = |prefix, valid, preferred| Prefix {
        prefix,
        valid,
        preferred,
    };
    let radvd = Radvd::start(
        &ns.in_namespace(),
        ns.net.dir(),
        "radvd-a",
        &ipv6_peers::radvd_config(TAP, &[lifetimes(PREFIX_A, 12, 8)], Some(DNS6)),
    );
    let log = guest.wait_for_log("serving: http://[2001:db8:1:", Duration::from_secs(30));
    let address_a = serving_in(&log, PREFIX_A);
    assert!(log.contains("ipv6: router fe80::"), "{log}");
    assert!(log.contains(&format!("ipv6: name server {DNS6}")), "{log}");
    // RFC 7217: not the MAC's EUI-64 (which would end in ff:fe).
    assert_ne!(address_a.segments()[5] & 0xff, 0xff, "{address_a}");

    // ping6: once to settle neighbour discovery, then 20 in a row, none lost.
    let a = address_a.to_string();
    assert!(ns.wait_for_ping6(&a, 10), "{a} never answered ping6");
    let out = run(ns
        .command("ping")
        .args(["-6", "-c", "20", "-i", "0.05", "-W", "2", "-q", &a]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("20 packets transmitted, 20 received"),
        "{text}"
    );

    // Every file over IPv6, byte for byte, at the global and at the link-local address.
    let bracketed = format!("[{address_a}]");
    check_http6(&ns, &bracketed, "/", INDEX);
    check_http6(&ns, &bracketed, "/big.bin", &big);
    let link_local = log
        .lines()
        .find_map(|line| {
            line.split("ipv6: address ")
                .nth(1)?
                .strip_suffix(" (link-local)")
        })
        .expect("a link-local address line")
        .to_string();
    check_http6(
        &ns,
        &format!("[{link_local}%25{TAP}]"),
        "/index.html",
        INDEX,
    );
    // HTTPS over IPv6 too, from the same pool, verified against the test CA.
    let ca = tls.join("ca.pem");
    let resolve = format!("bramble.test:443:[{address_a}]");
    let out = ns.curl(
        "https://bramble.test/big.bin",
        &[
            "-6",
            "--fail",
            "--cacert",
            ca.to_str().unwrap(),
            "--resolve",
            &resolve,
        ],
    );
    assert!(
        out.status.success() && out.stdout == big,
        "curl -6 https: {} bytes ({})",
        out.stdout.len(),
        String::from_utf8_lossy(&out.stderr)
    );
    let log = guest.wait_for_log("GET /big.bin 200", Duration::from_secs(5));
    assert!(
        log.lines()
            .any(|line| line.contains("GET /big.bin 200") && line.ends_with("2001:db8:1::1")),
        "the access log names the IPv6 client:\n{log}"
    );

    // mDNS: Avahi asks over ff02::fb for AAAA and A, and over 224.0.0.251 for AAAA.
    let name = "bramble-test.local";
    check_avahi(
        &ns,
        Transport::Ipv6,
        name,
        Transport::Ipv6,
        address_a.into(),
    );
    check_avahi(
        &ns,
        Transport::Ipv6,
        name,
        Transport::Ipv4,
        Ipv4Addr::new(192, 168, 77, 2).into(),
    );
    check_avahi(
        &ns,
        Transport::Ipv4,
        name,
        Transport::Ipv6,
        address_a.into(),
    );

    // Renumbering: the router deprecates prefix A (preferred lifetime 0; its valid lifetime
    // 0 is ignored, RFC 4862 5.5.3 (e), so A runs out by itself) and offers prefix B.
    drop(radvd);
    let _radvd = Radvd::start(
        &ns.in_namespace(),
        ns.net.dir(),
        "radvd-b",
        &ipv6_peers::radvd_config(
            TAP,
            &[lifetimes(PREFIX_A, 0, 0), lifetimes(PREFIX_B, 12, 8)],
            None,
        ),
    );
    guest.wait_for_log(
        &format!("ipv6: address {address_a} deprecated by the router"),
        Duration::from_secs(20),
    );
    let log = guest.wait_for_log("serving: http://[2001:db8:2:", Duration::from_secs(20));
    let address_b = serving_in(&log, PREFIX_B);
    let b = address_b.to_string();
    assert!(ns.wait_for_ping6(&b, 10), "{b} never answered ping6");
    check_http6(&ns, &format!("[{address_b}]"), "/big.bin", &big);
    // mDNS offers the new address, not the deprecated one.
    check_avahi(
        &ns,
        Transport::Ipv6,
        name,
        Transport::Ipv6,
        address_b.into(),
    );
    // The old address runs out within its 12 s and stops answering; the new one serves on.
    guest.wait_for_log(
        &format!("ipv6: address {address_a} expired"),
        Duration::from_secs(30),
    );
    let out = run(ns.command("ping").args(["-6", "-c", "2", "-W", "1", &a]));
    assert!(!out.status.success(), "{a} still answers after it expired");
    check_http6(&ns, &format!("[{address_b}]"), "/", INDEX);

    // The capture saw the guest's own IPv6 (the control for the ipv6-off test).
    capture.stop();
    let sent = capture.frames_from(GUEST_MAC, "ip6");
    assert!(
        sent.iter().any(|line| line.contains("router solicitation")),
        "no router solicitation from the guest in the capture: {sent:?}"
    );
}

#[test]
fn with_ipv6_off_no_ipv6_frame_leaves() {
    skip_unless_able!();
    let ns = Namespace::new();
    ns.add_ipv6();
    let (site, _) = test_site(&ns);
    let mut capture = Capture::start(&ns.in_namespace(), ns.net.dir(), TAP);
    let started = Instant::now();
    let mut args = static_args();
    args.push("--no-ipv6");
    let mut guest = ns.start_guest(&site, &args);
    assert!(ns.wait_for_ping(GUEST, 20), "guest never answered a ping");
    ipv6_peers::wait_for_link_local(&ns.in_namespace(), TAP, Duration::from_secs(10));
    let _radvd = Radvd::start(
        &ns.in_namespace(),
        ns.net.dir(),
        "radvd",
        &ipv6_peers::radvd_config(
            TAP,
            &[Prefix {
                prefix: PREFIX_A,
                valid: 60,
                preferred: 30,
            }],
            Some(DNS6),
        ),
    );
    // Everything that would draw IPv6 out of a host: all-nodes pings, an mDNS question over
    // ff02::fb (Avahi finds nothing), and router advertisements for a while.
    run(ns.command("ping").args([
        "-6",
        "-c",
        "3",
        "-i",
        "0.2",
        "-W",
        "1",
        &format!("ff02::1%{TAP}"),
    ]));
    let avahi = Avahi::start(&ns.in_namespace(), ns.net.dir(), TAP, Transport::Ipv6);
    let (address, output) =
        avahi.resolve(&ns.in_namespace(), "bramble-test.local", Transport::Ipv4);
    assert_eq!(
        address, None,
        "an mDNS answer over IPv6 with IPv6 off:\n{output}"
    );
    drop(avahi);
    // DAD and router solicitations would have gone within the first few seconds.
    let quiet = Duration::from_secs(10);
    if let Some(left) = quiet.checked_sub(started.elapsed()) {
        std::thread::sleep(left);
    }
    // IPv4 still works, and the guest said nothing over IPv6.
    let out = ns.curl(&format!("http://{GUEST}/"), &["--fail"]);
    assert_eq!(out.stdout, INDEX);
    capture.stop();
    let ipv6 = capture.frames_from(GUEST_MAC, "ip6");
    assert!(ipv6.is_empty(), "IPv6 frames from the guest: {ipv6:#?}");
    let ipv4 = capture.frames_from(GUEST_MAC, "arp or ip");
    assert!(
        !ipv4.is_empty(),
        "the capture saw nothing from the guest at all"
    );
    let log = guest.wait_for_log("net: addresses 192.168.77.2/24", Duration::from_secs(5));
    assert!(
        !log.contains("ipv6:"),
        "IPv6 work logged with IPv6 off:\n{log}"
    );
}

#[test]
fn diagnostic_page_over_ipv6_lists_every_address() {
    skip_unless_able!();
    let ns = Namespace::new();
    ns.add_ipv6();
    let site = ns.net.dir().join("NOPE.BIN");
    let mut guest = ns.start_guest(&site, &static_args());
    ipv6_peers::wait_for_link_local(&ns.in_namespace(), TAP, Duration::from_secs(10));
    let _radvd = Radvd::start(
        &ns.in_namespace(),
        ns.net.dir(),
        "radvd",
        &ipv6_peers::radvd_config(
            TAP,
            &[Prefix {
                prefix: PREFIX_A,
                valid: 60,
                preferred: 30,
            }],
            None,
        ),
    );
    let log = guest.wait_for_log("serving: http://[2001:db8:1:", Duration::from_secs(30));
    let address = serving_in(&log, PREFIX_A);
    let link_local = log
        .lines()
        .find_map(|line| {
            line.split("ipv6: address ")
                .nth(1)?
                .strip_suffix(" (link-local)")
        })
        .expect("a link-local address line")
        .to_string();
    let a = address.to_string();
    assert!(ns.wait_for_ping6(&a, 10), "{a} never answered ping6");
    let out = ns.curl(
        &format!("http://[{address}]/"),
        &["-6", "--globoff", "--write-out", "\n%{http_code}"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n503"), "expected 503, got:\n{text}");
    for needle in [
        "192.168.77.2/24".to_string(),
        format!("{address}/64"),
        format!("{link_local}/64"),
    ] {
        assert!(text.contains(&needle), "{needle} not on the page:\n{text}");
    }
}

#[test]
fn one_pool_serves_more_clients_of_both_families_than_it_has_sockets() {
    skip_unless_able!();
    let ns = Namespace::new();
    ns.add_ipv6();
    let (site, big) = test_site(&ns);
    let mut args = static_args();
    // The stream pool's scarce part is the session (what a connection holds while it is
    // being served); control blocks are cheap. Two sessions, then, for twelve clients.
    args.extend(["--connections", "16", "--sessions", "2"]);
    let mut guest = ns.start_guest(&site, &args);
    ipv6_peers::wait_for_link_local(&ns.in_namespace(), TAP, Duration::from_secs(10));
    let _radvd = Radvd::start(
        &ns.in_namespace(),
        ns.net.dir(),
        "radvd",
        &ipv6_peers::radvd_config(
            TAP,
            &[Prefix {
                prefix: PREFIX_A,
                valid: 60,
                preferred: 30,
            }],
            None,
        ),
    );
    let log = guest.wait_for_log("serving: http://[2001:db8:1:", Duration::from_secs(30));
    let address = serving_in(&log, PREFIX_A);
    assert!(ns.wait_for_ping(GUEST, 20));
    assert!(ns.wait_for_ping6(&address.to_string(), 10));
    // Twelve clients, six per family, two sessions between them: the requests beyond
    // them wait their turn alike (parked in the pool's cells), so all are served in the
    // end, each writing to its own file.
    let urls: Vec<String> = (0..12)
        .map(|i| match i % 2 {
            0 => format!("http://{GUEST}/big.bin"),
            _ => format!("http://[{address}]/big.bin"),
        })
        .collect();
    let outputs: Vec<PathBuf> = (0..12)
        .map(|i| ns.net.dir().join(format!("client{i}.bin")))
        .collect();
    let children: Vec<Child> = urls
        .iter()
        .zip(&outputs)
        .map(|(url, output)| {
            ns.command("curl")
                .args([
                    "--globoff",
                    "--silent",
                    "--show-error",
                    "--fail",
                    "--max-time",
                    "60",
                    "--output",
                ])
                .arg(output)
                .arg(url)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "client {i} ({}): {}",
            urls[i],
            String::from_utf8_lossy(&out.stderr)
        );
        let body = fs::read(&outputs[i]).unwrap();
        assert!(body == big, "client {i} got {} bytes", body.len());
    }
    // The server logs a response once its last byte is acknowledged, which may come after
    // the client has read it and exited: wait (bounded) for all twelve lines.
    let served_in = |log: &str, client: &str| {
        log.lines()
            .filter(|line| line.contains("GET /big.bin 200") && line.ends_with(client))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut log = guest.log();
    while served_in(&log, "") < 12 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        log = guest.log();
    }
    let served = |client: &str| served_in(&log, client);
    assert_eq!(served(HOST), 6, "IPv4 clients in the access log:\n{log}");
    assert_eq!(
        served("2001:db8:1::1"),
        6,
        "IPv6 clients in the access log:\n{log}"
    );
}
