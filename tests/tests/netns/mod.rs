//! Test-only network namespaces with a TAP link, and QEMU guests (and other servers) run inside
//! them, so that tests get real L2 (ARP, ping, DHCP, mDNS) without touching the host's network.
//!
//! The namespace itself is the test kit's ([`bramble_testkit::netns`]). Every process started
//! here is entered into the namespace with `nsenter --net=...`, which `exec`s the program: the
//! PID we hold is the program itself, so killing it by PID stops it (no wrapper process left
//! in between). Namespaces are deleted on drop, also when a test panics; namespaces left
//! behind by a killed test run are removed on the next run.

#![allow(dead_code)] // Each test binary uses its own part of this module.

pub mod ipv6;
pub mod knot;
pub mod mdns;
pub mod sntp;
pub mod tool;

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::QemuConfig;
use bramble_testkit::netns::TapNamespace;
use bramble_tests::{Guest, kernel};
use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The TAP interface inside every test namespace.
pub const TAP: &str = "tap0";
/// The namespace's own address on the TAP link.
pub const HOST_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);
/// Prefix length of the TAP link.
pub const PREFIX_LEN: u8 = 24;
/// Name prefix of the namespaces these tests create: `bramble-qemu-<pid>-<n>`.
const NAME_PREFIX: &str = "bramble-qemu";

#[allow(unused_imports)] // each test binary uses its own part of this module
pub use bramble_testkit::netns::Daemon;

/// Runs `command`, panicking with its output unless it succeeds.
pub fn run(command: &mut Command) -> Output {
    bramble_testkit::netns::run_ok(command)
}

/// A network namespace holding one TAP device whose host side is 192.168.77.1/24: the test
/// kit's [`TapNamespace`], with a route for mDNS multicast.
pub struct Netns(TapNamespace);

impl Netns {
    /// Creates `bramble-qemu-<pid>-<n>` with loopback up and `tap0` (owned by the namespace,
    /// 192.168.77.1/24, up, with a route for mDNS multicast).
    pub fn create() -> Netns {
        let netns = TapNamespace::create(NAME_PREFIX, TAP, &format!("{HOST_ADDRESS}/{PREFIX_LEN}"));
        netns.ip(&["route", "add", "224.0.0.0/4", "dev", TAP]);
        Netns(netns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// A command that runs `program` inside the namespace. `nsenter` execs it, so the child's
    /// PID is the program's own.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        self.0.enter(program)
    }

    /// Runs `program args` inside the namespace and returns its output (whatever the status).
    pub fn output(&self, program: &str, args: &[&str]) -> Output {
        self.0.output(program, args)
    }

    /// The namespace's neighbour entry for `address` on the TAP link (`ip neigh show`).
    pub fn neighbour(&self, address: Ipv4Addr) -> String {
        self.0.neighbour(address, TAP)
    }

    /// Fetches `url` with curl from inside the namespace; `None` when curl fails (it retries
    /// nothing: the caller decides).
    pub fn curl(&self, url: &str) -> Option<Vec<u8>> {
        self.0.curl(url)
    }
}

/// Waits (bounded) until `done` holds; panics naming `what` otherwise.
pub fn wait_for(done: impl Fn() -> bool, limit: Duration, what: &str) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "no {what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `pid` is a live (not zombie) process named `name`.
pub fn process_is_running(pid: u32, name: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: "PID (COMM) STATE ...": COMM may hold spaces, so split at the last ')'.
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return false;
    };
    let comm = &stat[open + 1..close];
    let state = stat[close + 1..].split_whitespace().next().unwrap_or("");
    comm == name && state != "Z" && state != "X"
}

/// Starts QEMU guests inside a namespace as the shared [`Guest`] (killed by PID on drop).
pub struct NetnsGuest;

impl NetnsGuest {
    /// Starts `qemu-system-arm` with `config` inside `netns`.
    pub fn start(netns: &Netns, config: &QemuConfig) -> Guest {
        let qemu = bramble_qemu::find_qemu().unwrap_or_else(|message| panic!("{message}"));
        let mut config = config.clone();
        let judge = bramble_tests::Judge::attach(&mut config);
        let mut command = netns.command(qemu);
        command.args(config.args());
        Guest::start_judged(command, Some(judge))
    }
}

/// A small test site: an index page and a 12 KB binary file (a few dozen usb-net frames).
pub fn write_site(root: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::create_dir_all(root).unwrap();
    let index = "<!doctype html><title>tap</title><h1>Bramble on a TAP link</h1>\n"
        .repeat(8)
        .into_bytes();
    let blob: Vec<u8> = (0u32..12_000)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("index.html"), &index).unwrap();
    std::fs::write(root.join("blob.bin"), &blob).unwrap();
    vec![("/".to_string(), index), ("/blob.bin".to_string(), blob)]
}

/// Packs `site` and builds an SD card at `card` with `settings` as BRAMBLE.TXT.
pub fn build_card(site: &Path, settings: &str, card: &Path) {
    let packed = pack_site(site, &PackOptions::default()).expect("packing the site");
    let inputs = ImageInputs {
        kernel: std::fs::read(&kernel().raw).expect("reading kernel.img"),
        site: packed.image,
        settings: settings.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: None,
    };
    build_image(&inputs, card).expect("building the SD card");
}

/// The MAC address the kernel printed for its NIC (`usb: ... network device ready ..., MAC m`).
pub fn guest_mac(transcript: &[String]) -> String {
    transcript
        .iter()
        .find(|line| line.contains("network device ready"))
        .and_then(|line| line.rsplit("MAC ").next())
        .map(|mac| mac.trim().to_ascii_lowercase())
        .unwrap_or_else(|| {
            panic!(
                "no NIC MAC on the serial console:\n{}",
                transcript.join("\n")
            )
        })
}
