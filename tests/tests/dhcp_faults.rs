//! The DHCP server vanishing and returning, against the real guest on a TAP link in a
//! test-made namespace: the guest renews its short lease at T1 without interrupting service,
//! drops the address when the lease runs out with the server gone, serves (and answers mDNS)
//! at its link-local fallback, and takes a new lease, found by asking from scratch, when a
//! server answers again, serving and answering mDNS there. A server that is silent from T1 and
//! back before expiry gets the rebinding at T2, and the guest never lets go of the address.
//!
//! dnsmasq will not hand out leases under two minutes, so the server here is this package's
//! `test-dhcpd` (one address, leases of seconds, a line per message it sees).

mod netns;

use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel, spawn_with_lines};
use netns::mdns::{self, QueryMode};
use netns::{HOST_ADDRESS, Netns, NetnsGuest, PREFIX_LEN, TAP, build_card, process_is_running};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, ChildStdin};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// Lease length: T1 (renewal) falls at half of it, expiry at all of it.
const LEASE_SECONDS: u32 = 16;
/// The address of the first lease.
const FIRST_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 50);
/// The address the returning server hands out (another one, so the change is visible).
const SECOND_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 60);
/// The link's broadcast address, where the server sends replies to clients without one.
const BROADCAST: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 255);
/// Most requests the loop across the renewal makes (it stops sooner once the renewal is seen;
/// T1 comes after about LEASE_SECONDS / 2 / REQUEST_PAUSE of them).
const RENEWAL_LOOP_REQUESTS: usize = 1_000;
/// Pause between the loop's requests (to spare the shared CPU, not to time anything).
const REQUEST_PAUSE: Duration = Duration::from_millis(50);
/// Requests still made after the renewal was acknowledged.
const REQUESTS_AFTER_RENEWAL: usize = 10;
/// Failure bound for each phase (a loaded 2-core machine; these are not timings).
const PHASE_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a request to an address the guest gave up may go unanswered before it counts as
/// refused (any answer at all would be the failure).
const SILENCE: &str = "3";

/// The guest's hostname: it answers mDNS for `sill.local`.
const HOSTNAME: &str = "sill";
/// The name and source address [`mdns_query_in_namespace`] asks with, when it runs as the
/// resolver subprocess.
const QUERY_NAME_VAR: &str = "BRAMBLE_DHCP_FAULTS_MDNS_NAME";
const QUERY_SOURCE_VAR: &str = "BRAMBLE_DHCP_FAULTS_MDNS_SOURCE";
/// How long the resolver subprocess asks before giving up.
const QUERY_TIMEOUT: Duration = Duration::from_secs(15);

const QEMU_NAME: &str = "qemu-system-arm";
const SERVER_NAME: &str = "test-dhcpd";

/// `test-dhcpd` running inside the namespace; killed by PID on drop.
struct DhcpServer {
    child: Child,
    /// Held open: the server exits when it closes (if this test process dies).
    _stdin: ChildStdin,
    lines: Receiver<String>,
    /// Every line the server printed so far.
    transcript: Vec<String>,
}

/// Whether the server answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Replies {
    /// Offers and acknowledges.
    Answer,
    /// Logs what it hears and answers nothing: a server that is gone, watched.
    Silent,
}

impl DhcpServer {
    /// Starts the server handing out `offer` for [`LEASE_SECONDS`], and waits until it listens.
    fn start(netns: &Netns, offer: Ipv4Addr, replies: Replies) -> DhcpServer {
        let mut command = netns.command(env!("CARGO_BIN_EXE_test-dhcpd"));
        if replies == Replies::Silent {
            command.arg("--silent");
        }
        command.args([
            "--server",
            &HOST_ADDRESS.to_string(),
            "--offer",
            &offer.to_string(),
            "--lease",
            &LEASE_SECONDS.to_string(),
            "--prefix",
            &PREFIX_LEN.to_string(),
            "--broadcast",
            &BROADCAST.to_string(),
            "--lifetime",
            "600",
        ]);
        let (child, stdin, lines) = spawn_with_lines(&mut command, "test-dhcpd");
        let mut server = DhcpServer {
            child,
            _stdin: stdin,
            lines,
            transcript: Vec::new(),
        };
        if server
            .wait_for(
                |line| line.contains("listening on"),
                Duration::from_secs(30),
            )
            .is_none()
        {
            panic!(
                "{SERVER_NAME} did not start listening:\n{}",
                server.transcript.join("\n")
            );
        }
        assert!(
            process_is_running(server.pid(), SERVER_NAME),
            "PID {} is not a running {SERVER_NAME}",
            server.pid()
        );
        server
    }

    /// Collects the lines printed so far, without waiting.
    fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.transcript.push(line);
        }
    }

    /// Waits up to `timeout` for a line matching `predicate` (earlier lines included).
    fn wait_for(&mut self, predicate: impl Fn(&str) -> bool, timeout: Duration) -> Option<String> {
        self.drain();
        if let Some(line) = self.transcript.iter().find(|line| predicate(line)) {
            return Some(line.clone());
        }
        let deadline = Instant::now() + timeout;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.transcript.push(line.clone());
            if predicate(&line) {
                return Some(line);
            }
        }
        None
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for DhcpServer {
    fn drop(&mut self) {
        // Child::kill sends SIGKILL to exactly this PID (nsenter exec'd the server).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Boots the guest with `settings` as BRAMBLE.TXT on the TAP link in `netns`.
fn boot(netns: &Netns, dir: &Path, settings: &str) -> Guest {
    let card = dir.join("card.img");
    build_card(&dir.join("site"), settings, &card);
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::Tap {
        interface: TAP.to_string(),
        topology: Topology::RootPort,
    });
    let mut guest = NetnsGuest::start(netns, &config);
    guest.expect_line("Bramble", BOOT_TIMEOUT);
    assert!(
        process_is_running(guest.pid(), QEMU_NAME),
        "PID {} is not a running {QEMU_NAME}",
        guest.pid()
    );
    guest
}

/// The address in a `dhcp: lease A.B.C.D/N from ...` or `... link-local A.B.C.D/N ...` line.
fn address_after(line: &str, marker: &str) -> Ipv4Addr {
    line.split(marker)
        .nth(1)
        .and_then(|rest| rest.split(['/', ' ']).next())
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| panic!("no address after {marker:?} in {line:?}"))
}

/// Fetches `url` from inside the namespace, giving up after `max_time` seconds.
fn fetch(netns: &Netns, url: &str, max_time: &str) -> Option<Vec<u8>> {
    let output = netns.output("curl", &["--silent", "--fail", "--max-time", max_time, url]);
    output.status.success().then_some(output.stdout)
}

/// Checks that `address` serves every file of the site byte for byte.
fn check_http(netns: &Netns, address: Ipv4Addr, files: &[(String, Vec<u8>)], context: &str) {
    for (path, bytes) in files {
        let url = format!("http://{address}{path}");
        let body =
            fetch(netns, &url, "30").unwrap_or_else(|| panic!("{context}: curl {url} failed"));
        assert!(
            &body == bytes,
            "{context}: {url}: {} bytes served, {} expected",
            body.len(),
            bytes.len()
        );
    }
}

/// Asks for `name` over mDNS (as a legacy unicast querier from `source`) from inside `netns`,
/// by running this test binary there as [`mdns_query_in_namespace`]. Returns the addresses
/// answered and the subprocess's output.
fn resolve_in(netns: &Netns, name: &str, source: Ipv4Addr) -> (Vec<Ipv4Addr>, String) {
    mdns::resolve_in_subprocess(
        netns,
        &[
            (QUERY_NAME_VAR, name.to_string()),
            (QUERY_SOURCE_VAR, source.to_string()),
        ],
    )
}

/// The resolver subprocess run by [`resolve_in`] inside the namespace; prints one
/// `mdns-answer: A.B.C.D` line per address. Without its environment (a plain `--ignored`
/// run) there is nothing to ask, and it returns.
#[test]
#[ignore = "helper: run by the test inside its namespace"]
fn mdns_query_in_namespace() {
    let (Ok(name), Ok(source)) = (
        std::env::var(QUERY_NAME_VAR),
        std::env::var(QUERY_SOURCE_VAR),
    ) else {
        eprintln!("{QUERY_NAME_VAR} is not set: nothing to ask");
        return;
    };
    let source = source.parse().expect("source address");
    let addresses = mdns::resolve(&name, source, QueryMode::LegacyUnicast, QUERY_TIMEOUT)
        .expect("mDNS query socket");
    for address in addresses {
        println!("mdns-answer: {address}");
    }
}

/// Boots the guest (DHCP, hostname [`HOSTNAME`]) with `server` running; checks it takes
/// [`FIRST_ADDRESS`] for [`LEASE_SECONDS`] and serves the site there.
fn boot_with_first_lease(
    netns: &Netns,
    dir: &Path,
    files: &[(String, Vec<u8>)],
    server: &mut DhcpServer,
) -> Guest {
    let mut guest = boot(
        netns,
        dir,
        &format!("address = dhcp\nhostname = {HOSTNAME}\n"),
    );
    let Some(lease) = guest.wait_for(|line| line.contains("dhcp: lease"), BOOT_TIMEOUT) else {
        fail("no DHCP lease", &mut guest, Some(server));
    };
    assert_eq!(address_after(&lease, "lease "), FIRST_ADDRESS, "{lease}");
    assert!(
        lease.contains(&format!("from {HOST_ADDRESS} for {LEASE_SECONDS} s")),
        "lease not from the test server, or not for {LEASE_SECONDS} s: {lease:?}"
    );
    guest.expect_line(
        &format!("serving: http://{FIRST_ADDRESS}/"),
        Duration::from_secs(30),
    );
    check_http(netns, FIRST_ADDRESS, files, "first lease");
    guest
}

/// Whether a server line shows the guest asking from its leased address to keep it, and the
/// server acknowledging (a renewal at T1 or a rebinding at T2).
fn renewal_acknowledged(line: &str) -> bool {
    line.contains(&format!("REQUEST from {FIRST_ADDRESS}:68"))
        && line.contains(&format!("ciaddr {FIRST_ADDRESS}"))
        && line.contains(&format!("-> ACK {FIRST_ADDRESS}"))
}

/// The first serial line saying the address was dropped or replaced, if any.
fn address_dropped(guest: &mut Guest) -> Option<String> {
    guest.drain();
    guest
        .transcript
        .iter()
        // "using link-local": the IPv4 fallback, not the IPv6 link-local address
        // that every boot forms.
        .find(|line| line.contains("lease lost") || line.contains("using link-local"))
        .cloned()
}

/// Panics with both logs.
fn fail(message: &str, guest: &mut Guest, server: Option<&mut DhcpServer>) -> ! {
    guest.drain();
    let server_log = server.map_or_else(String::new, |server| {
        server.drain();
        server.transcript.join("\n")
    });
    panic!(
        "{message}\nserial:\n{}\n{SERVER_NAME}:\n{server_log}",
        guest.transcript.join("\n")
    );
}

#[test]
fn lease_renews_then_expires_to_link_local_then_returns() {
    let dir = tempfile::tempdir().unwrap();
    let files = netns::write_site(&dir.path().join("site"));
    let index = files[0].1.clone();
    let netns = Netns::create();

    let started = Instant::now();
    let note = |what: &str| {
        eprintln!(
            "dhcp_faults: {:>6.1} s  {what}",
            started.elapsed().as_secs_f64()
        )
    };
    // (a) A lease, and the site served at it.
    let mut server = DhcpServer::start(&netns, FIRST_ADDRESS, Replies::Answer);
    let mut guest = boot_with_first_lease(&netns, dir.path(), &files, &mut server);
    let qemu_pid = guest.pid();
    note("first lease served");

    // (b) Renewal at T1: a loop of requests (bounded in count) runs across it; every one is
    // answered, and the server sees a REQUEST from the leased address for that address.
    let url = format!("http://{FIRST_ADDRESS}/");
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut after_renewal = None;
    let mut made = 0;
    while made < RENEWAL_LOOP_REQUESTS && after_renewal.is_none_or(|n| n < REQUESTS_AFTER_RENEWAL) {
        if Instant::now() > deadline {
            break;
        }
        match fetch(&netns, &url, "30") {
            Some(body) if body == index => {}
            other => fail(
                &format!(
                    "request {made} of the renewal loop failed ({:?} bytes)",
                    other.map(|b| b.len())
                ),
                &mut guest,
                Some(&mut server),
            ),
        }
        made += 1;
        std::thread::sleep(REQUEST_PAUSE);
        server.drain();
        match &mut after_renewal {
            Some(count) => *count += 1,
            None if server
                .transcript
                .iter()
                .any(|line| renewal_acknowledged(line)) =>
            {
                after_renewal = Some(0);
                note(&format!("renewal acknowledged after {made} requests"));
            }
            None => {}
        }
    }
    if after_renewal.is_none_or(|n| n < REQUESTS_AFTER_RENEWAL) {
        fail(
            &format!("no renewal seen across {made} requests"),
            &mut guest,
            Some(&mut server),
        );
    }
    // The guest took the renewed lease for the same address and never dropped it.
    let Some(renewal) = guest.wait_for(
        |line| {
            line.contains("dhcp: lease")
                && line.contains(&FIRST_ADDRESS.to_string())
                && line.contains("renewed")
        },
        Duration::from_secs(30),
    ) else {
        fail(
            "the guest did not log the renewed lease",
            &mut guest,
            Some(&mut server),
        );
    };
    assert_eq!(address_after(&renewal, "lease "), FIRST_ADDRESS);
    if let Some(line) = address_dropped(&mut guest) {
        fail(
            &format!("the address was dropped around the renewal: {line:?}"),
            &mut guest,
            Some(&mut server),
        );
    }

    // (c) The server vanishes. When the lease runs out the guest drops the address and falls
    // back to link-local, where it keeps serving.
    let server_pid = server.pid();
    drop(server);
    note("server stopped");
    assert!(
        !process_is_running(server_pid, SERVER_NAME),
        "{SERVER_NAME} (PID {server_pid}) still running after it was dropped"
    );
    let Some(lost) = guest.wait_for(|line| line.contains("dhcp: lease lost"), PHASE_TIMEOUT) else {
        fail("the lease never ran out", &mut guest, None);
    };
    note("lease ran out");
    let Some(fallback) = guest.wait_for(|line| line.contains("using link-local"), PHASE_TIMEOUT)
    else {
        fail(
            &format!("no link-local fallback after {lost:?}"),
            &mut guest,
            None,
        );
    };
    // The server has been silent since T1: the fallback comes with the expiry, not after
    // another wait without any address.
    assert!(
        fallback.contains("lease ran out unrenewed"),
        "the fallback waited instead of following the expiry: {fallback:?}"
    );
    let link_local = address_after(&fallback, "link-local ");
    note(&format!("link-local {link_local}"));
    assert_eq!(
        link_local.octets()[..2],
        [169, 254],
        "not link-local: {fallback:?}"
    );
    // The expired address is no longer answered.
    if fetch(&netns, &url, SILENCE).is_some() {
        fail(
            &format!("{FIRST_ADDRESS} still answered after the lease ran out"),
            &mut guest,
            None,
        );
    }
    // Give the namespace a link-local address of its own to reach the guest's.
    let [_, _, c, d] = link_local.octets();
    let ours = Ipv4Addr::new(169, 254, if c == 254 { 253 } else { c + 1 }, d);
    netns::run(std::process::Command::new("ip").args([
        "-n",
        netns.name(),
        "addr",
        "add",
        &format!("{ours}/16"),
        "dev",
        TAP,
    ]));
    check_http(&netns, link_local, &files, "link-local fallback");
    let name = format!("{HOSTNAME}.local");
    let (addresses, log) = resolve_in(&netns, &name, ours);
    if addresses != vec![link_local] {
        fail(
            &format!("mDNS for {name} during the fallback: {addresses:?}; resolver:\n{log}"),
            &mut guest,
            None,
        );
    }
    note("link-local served");

    // (d) A server answers again (with another address): the guest takes the lease and serves
    // there, and leaves link-local.
    let mut server = DhcpServer::start(&netns, SECOND_ADDRESS, Replies::Answer);
    let Some(lease) = guest.wait_for(
        |line| line.contains("dhcp: lease") && line.contains(&SECOND_ADDRESS.to_string()),
        PHASE_TIMEOUT,
    ) else {
        fail(
            "no lease after the server returned",
            &mut guest,
            Some(&mut server),
        );
    };
    assert_eq!(address_after(&lease, "lease "), SECOND_ADDRESS, "{lease}");
    note("second lease");
    assert!(
        server
            .wait_for(
                |line| line.contains(&format!("-> ACK {SECOND_ADDRESS}")),
                Duration::from_secs(10)
            )
            .is_some(),
        "the returning server acknowledged nothing:\n{}",
        server.transcript.join("\n")
    );
    check_http(
        &netns,
        SECOND_ADDRESS,
        &files,
        "lease after the server returned",
    );
    // It found the server again by asking from scratch.
    assert!(
        server
            .transcript
            .iter()
            .any(|line| line.contains("DISCOVER")),
        "no DISCOVER reached the returning server:\n{}",
        server.transcript.join("\n")
    );
    let (addresses, log) = resolve_in(&netns, &name, HOST_ADDRESS);
    if addresses != vec![SECOND_ADDRESS] {
        fail(
            &format!("mDNS for {name} after the new lease: {addresses:?}; resolver:\n{log}"),
            &mut guest,
            Some(&mut server),
        );
    }
    note("second lease served");
    if fetch(&netns, &format!("http://{link_local}/"), SILENCE).is_some() {
        fail(
            &format!("{link_local} still answered after the new lease"),
            &mut guest,
            Some(&mut server),
        );
    }

    // What the guest said about its addresses (shown with --nocapture).
    guest.drain();
    for line in guest.transcript.iter().filter(|line| {
        ["dhcp:", "mdns:", "serving:"]
            .iter()
            .any(|word| line.contains(word))
    }) {
        eprintln!("dhcp_faults: serial: {line}");
    }
    drop(guest);
    drop(server);
    assert!(
        !process_is_running(qemu_pid, QEMU_NAME),
        "QEMU (PID {qemu_pid}) still running after the guest was dropped"
    );
}

#[test]
fn lease_survives_a_server_outage_from_t1_until_rebinding() {
    let dir = tempfile::tempdir().unwrap();
    let files = netns::write_site(&dir.path().join("site"));
    let index = files[0].1.clone();
    let netns = Netns::create();
    let mut server = DhcpServer::start(&netns, FIRST_ADDRESS, Replies::Answer);
    let mut guest = boot_with_first_lease(&netns, dir.path(), &files, &mut server);

    // The server goes quiet: the renewal at T1 goes unanswered. It answers again before the
    // lease runs out, and the rebinding at T2 is acknowledged. A loop of requests (bounded in
    // count) runs across all of it; every one is answered.
    drop(server);
    let mut server = DhcpServer::start(&netns, FIRST_ADDRESS, Replies::Silent);
    let url = format!("http://{FIRST_ADDRESS}/");
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut answering = false;
    let mut after_rebinding = None;
    let mut made = 0;
    while made < RENEWAL_LOOP_REQUESTS
        && after_rebinding.is_none_or(|n| n < REQUESTS_AFTER_RENEWAL)
        && Instant::now() < deadline
    {
        match fetch(&netns, &url, "30") {
            Some(body) if body == index => {}
            other => fail(
                &format!(
                    "request {made} across the outage failed ({:?} bytes; server answering: \
                     {answering})",
                    other.map(|b| b.len())
                ),
                &mut guest,
                Some(&mut server),
            ),
        }
        made += 1;
        std::thread::sleep(REQUEST_PAUSE);
        server.drain();
        if !answering {
            let unanswered = server.transcript.iter().any(|line| {
                line.contains(&format!("REQUEST from {FIRST_ADDRESS}:68"))
                    && line.contains("ignored (silent)")
            });
            if unanswered {
                drop(server);
                server = DhcpServer::start(&netns, FIRST_ADDRESS, Replies::Answer);
                answering = true;
            }
        } else if let Some(count) = &mut after_rebinding {
            *count += 1;
        } else if server
            .transcript
            .iter()
            .any(|line| renewal_acknowledged(line))
        {
            after_rebinding = Some(0);
        }
    }
    if !answering {
        fail(
            &format!("no unanswered renewal across {made} requests"),
            &mut guest,
            Some(&mut server),
        );
    }
    if after_rebinding.is_none_or(|n| n < REQUESTS_AFTER_RENEWAL) {
        fail(
            &format!("no acknowledged rebinding across {made} requests"),
            &mut guest,
            Some(&mut server),
        );
    }
    // The guest took the extended lease and never let go of the address.
    if guest
        .wait_for(
            |line| {
                line.contains(&format!("dhcp: lease {FIRST_ADDRESS}/")) && line.contains("renewed")
            },
            Duration::from_secs(30),
        )
        .is_none()
    {
        fail(
            "the guest did not log the extended lease",
            &mut guest,
            Some(&mut server),
        );
    }
    if let Some(line) = address_dropped(&mut guest) {
        fail(
            &format!("the address was dropped during the outage: {line:?}"),
            &mut guest,
            Some(&mut server),
        );
    }
    check_http(&netns, FIRST_ADDRESS, &files, "after the outage");
}
