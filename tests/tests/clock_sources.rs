//! Where the guest's clock comes from, end to end on a TAP link inside a network namespace the
//! test creates: dnsmasq gives the DHCP lease (with its own address as the name server) and
//! answers DNS; an SNTP responder of this test answers on addresses of its own in the
//! namespace, with a time far from the host's so that the guest's clock can only have come
//! from it.
//!
//! - A time server named in BRAMBLE.TXT (`ntp = time.bramble.test`) is looked up through the
//!   DHCP name server with smoltcp's DNS socket (dnsmasq logs the query) and sets the clock.
//! - With `ntp = auto`, the time server of DHCP option 42 (RFC 2132 §8.3) sets it, and no name
//!   is looked up, although dnsmasq would answer `pool.ntp.org` (the fallback) with another
//!   responder.
//! - With `ntp = auto` and no option 42, `pool.ntp.org` is looked up the same way and sets it.
//!
//! No packet leaves the namespace: it has no route out, and dnsmasq forwards nothing
//! (`--no-resolv`).

mod netns;

use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel, sntp};
use netns::{Daemon, HOST_ADDRESS, Netns, NetnsGuest, PREFIX_LEN, TAP, build_card, run};
use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The time the responders give: 2033-05-18 03:33:20 UTC plus the seconds since they
/// started, years from the host's clock.
const RESPONDER_EPOCH: u64 = 2_000_000_000;
/// The SNTP responder for a name (`time.bramble.test`, `pool.ntp.org`).
const NAMED_SERVER: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 4);
/// The SNTP responder DHCP names in option 42.
const OPTION_42_SERVER: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 3);
/// How long the guest may take from its lease to a set clock (its first request goes out
/// right after the address; a DNS lookup first adds a round trip).
const CLOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// SNTP responders inside a namespace: one UDP socket on port 123 per address, each answering
/// from its own address (the guest takes replies only from the server it asked). The thread
/// that serves them entered the namespace before binding; it stops when this is dropped.
struct SntpResponders {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SntpResponders {
    fn start(netns: &Netns, addresses: &[Ipv4Addr]) -> SntpResponders {
        let addresses = addresses.to_vec();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let (ready, bound) = std::sync::mpsc::channel();
        let thread = bramble_testkit::netns::spawn_inside(netns.name(), move || {
            let sockets: Vec<UdpSocket> = addresses
                .iter()
                .map(|address| {
                    let socket = UdpSocket::bind((*address, 123)).expect("bind port 123");
                    socket
                        .set_read_timeout(Some(Duration::from_millis(50)))
                        .unwrap();
                    socket
                })
                .collect();
            ready.send(()).unwrap();
            let started = std::time::Instant::now();
            let mut request = [0u8; 512];
            while !stopping.load(Ordering::Relaxed) {
                for socket in &sockets {
                    let Ok((len, peer)) = socket.recv_from(&mut request) else {
                        continue;
                    };
                    if len < 48 {
                        continue;
                    }
                    let elapsed = started.elapsed();
                    let time = Duration::from_secs(RESPONDER_EPOCH) + elapsed;
                    let _ = socket.send_to(&sntp::reply(&request, time), peer);
                }
            }
        });
        bound
            .recv_timeout(Duration::from_secs(10))
            .expect("the SNTP responders did not start");
        SntpResponders {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SntpResponders {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// dnsmasq on the TAP link: leases from 192.168.77.50-59 with itself as the name server,
/// `names` answered from its own table, nothing forwarded, every query and lease logged;
/// `options` added to its command line.
fn start_dnsmasq(
    netns: &Netns,
    dir: &Path,
    names: &[(&str, Ipv4Addr)],
    options: &[&str],
) -> Daemon {
    let mut command = netns.command("dnsmasq");
    command.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--bind-interfaces",
        &format!("--interface={TAP}"),
        "--except-interface=lo",
        "--dhcp-range=192.168.77.50,192.168.77.59,255.255.255.0,10m",
        "--dhcp-authoritative",
        "--user=root",
        "--log-queries",
        "--log-dhcp",
        "--log-facility=-",
        &format!("--dhcp-leasefile={}", dir.join("dnsmasq.leases").display()),
        &format!("--pid-file={}", dir.join("dnsmasq.pid").display()),
    ]);
    for (name, address) in names {
        command.arg(format!("--host-record={name},{address}"));
    }
    command.args(options);
    Daemon::start(command, &dir.join("dnsmasq.log"))
}

/// Boots the guest with `settings` on the namespace's TAP link and waits for its lease.
fn boot(netns: &Netns, dir: &Path, settings: &str) -> Guest {
    netns::write_site(&dir.join("site"));
    let card = dir.join("card.img");
    build_card(&dir.join("site"), settings, &card);
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::Tap {
        interface: TAP.to_string(),
        topology: Topology::BehindHub,
    });
    let mut guest = NetnsGuest::start(netns, &config);
    let from_dnsmasq = format!("from {HOST_ADDRESS}");
    if guest
        .wait_for(
            |line| line.contains("dhcp: lease 192.168.77.") && line.contains(&from_dnsmasq),
            BOOT_TIMEOUT,
        )
        .is_none()
    {
        panic!(
            "no DHCP lease from dnsmasq; serial:\n{}\ndnsmasq:\n{}",
            guest.transcript.join("\n"),
            std::fs::read_to_string(dir.join("dnsmasq.log")).unwrap_or_default()
        );
    }
    guest
}

/// Waits for the guest's `clock: set from ADDRESS:123 to Unix time T` line; returns T.
fn clock_set_from(guest: &mut Guest, server: Ipv4Addr, dir: &Path) -> u64 {
    let Some(line) = guest.wait_for(|line| line.contains("clock: set from"), CLOCK_TIMEOUT) else {
        panic!(
            "the clock was not set; serial:\n{}\ndnsmasq:\n{}",
            guest.transcript.join("\n"),
            std::fs::read_to_string(dir.join("dnsmasq.log")).unwrap_or_default()
        );
    };
    assert!(
        line.contains(&format!("clock: set from {server}:123 ")),
        "set from the wrong server (expected {server}): {line}"
    );
    line.rsplit("Unix time ")
        .next()
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or_else(|| panic!("no time in {line:?}"))
}

/// The guest's clock per its `status` line (`status: clock set, Unix time T, ...`).
fn status_clock(guest: &mut Guest) -> String {
    guest.send_line("status");
    guest.expect_line("status: clock", Duration::from_secs(20))
}

/// The namespace's TAP link with the responders' addresses beside its own.
fn namespace_with(addresses: &[Ipv4Addr]) -> Netns {
    let netns = Netns::create();
    for address in addresses {
        run(Command::new("ip").args([
            "-n",
            netns.name(),
            "addr",
            "add",
            &format!("{address}/{PREFIX_LEN}"),
            "dev",
            TAP,
        ]));
    }
    netns
}

#[test]
fn a_time_server_named_in_the_settings_is_looked_up_through_the_dhcp_name_server() {
    let dir = tempfile::tempdir().unwrap();
    let netns = namespace_with(&[NAMED_SERVER]);
    let _responders = SntpResponders::start(&netns, &[NAMED_SERVER]);
    let _dnsmasq = start_dnsmasq(
        &netns,
        dir.path(),
        &[("time.bramble.test", NAMED_SERVER)],
        &[],
    );
    let mut guest = boot(&netns, dir.path(), "ntp = time.bramble.test\nmdns = off\n");
    let set_to = clock_set_from(&mut guest, NAMED_SERVER, dir.path());
    assert!(
        (RESPONDER_EPOCH..RESPONDER_EPOCH + 600).contains(&set_to),
        "the clock was set to {set_to}, not the responder's time"
    );
    let log = std::fs::read_to_string(dir.path().join("dnsmasq.log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|line| line.contains("query[A] time.bramble.test from 192.168.77.5")),
        "dnsmasq saw no lookup of time.bramble.test from the guest:\n{log}"
    );
    assert!(
        log.contains(&format!("time.bramble.test is {NAMED_SERVER}")),
        "dnsmasq did not answer the name:\n{log}"
    );
    let status = status_clock(&mut guest);
    assert!(
        status.contains("clock set, Unix time 2000000"),
        "status line: {status}"
    );
}

#[test]
fn the_time_server_of_dhcp_option_42_sets_the_clock_without_a_name_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let netns = namespace_with(&[OPTION_42_SERVER, NAMED_SERVER]);
    let _responders = SntpResponders::start(&netns, &[OPTION_42_SERVER, NAMED_SERVER]);
    let _dnsmasq = start_dnsmasq(
        &netns,
        dir.path(),
        // The fallback, should the guest ignore option 42.
        &[("pool.ntp.org", NAMED_SERVER)],
        &[&format!(
            "--dhcp-option=option:ntp-server,{OPTION_42_SERVER}"
        )],
    );
    let mut guest = boot(&netns, dir.path(), "ntp = auto\nmdns = off\n");
    let set_to = clock_set_from(&mut guest, OPTION_42_SERVER, dir.path());
    assert!(
        (RESPONDER_EPOCH..RESPONDER_EPOCH + 600).contains(&set_to),
        "the clock was set to {set_to}, not the responder's time"
    );
    let log = std::fs::read_to_string(dir.path().join("dnsmasq.log")).unwrap_or_default();
    assert!(
        log.contains("option: 42 ntp-server"),
        "dnsmasq did not send option 42:\n{log}"
    );
    assert!(
        !log.contains("query["),
        "the guest looked up a name although DHCP named a time server:\n{log}"
    );
    let status = status_clock(&mut guest);
    assert!(
        status.contains("clock set, Unix time 2000000"),
        "status line: {status}"
    );
}

#[test]
fn without_option_42_auto_asks_pool_ntp_org_through_the_dhcp_name_server() {
    let dir = tempfile::tempdir().unwrap();
    let netns = namespace_with(&[NAMED_SERVER]);
    let _responders = SntpResponders::start(&netns, &[NAMED_SERVER]);
    let _dnsmasq = start_dnsmasq(&netns, dir.path(), &[("pool.ntp.org", NAMED_SERVER)], &[]);
    let mut guest = boot(&netns, dir.path(), "ntp = auto\nmdns = off\n");
    let set_to = clock_set_from(&mut guest, NAMED_SERVER, dir.path());
    assert!(
        (RESPONDER_EPOCH..RESPONDER_EPOCH + 600).contains(&set_to),
        "the clock was set to {set_to}, not the responder's time"
    );
    let log = std::fs::read_to_string(dir.path().join("dnsmasq.log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|line| line.contains("query[A] pool.ntp.org from 192.168.77.5")),
        "dnsmasq saw no lookup of pool.ntp.org from the guest:\n{log}"
    );
}
