//! Boots raspi1ap on a TAP link inside a network namespace the test creates: the guest answers
//! ARP and ping (100 of 100), serves HTTP to curl, takes a DHCP lease from dnsmasq, and answers
//! mDNS queries for its `.local` name. All traffic stays inside the namespace.

mod netns;

use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{BOOT_TIMEOUT, kernel};
use netns::mdns::{self, QueryMode};
use netns::{Daemon, HOST_ADDRESS, Netns, NetnsGuest, TAP, build_card, process_is_running};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

/// The name [`mdns_query_in_namespace`] asks for, when it runs as the resolver subprocess.
const QUERY_NAME_VAR: &str = "BRAMBLE_MDNS_QUERY_NAME";
/// How it asks: [`QueryMode::name`].
const QUERY_MODE_VAR: &str = "BRAMBLE_MDNS_QUERY_MODE";
/// How long the resolver subprocess asks before giving up.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

const QEMU_NAME: &str = "qemu-system-arm";

/// Boots the guest with `settings` as BRAMBLE.TXT on a TAP link in `netns`.
fn boot(netns: &Netns, dir: &Path, settings: &str, topology: Topology) -> bramble_tests::Guest {
    let card = dir.join("card.img");
    build_card(&dir.join("site"), settings, &card);
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::Tap {
        interface: TAP.to_string(),
        topology,
    });
    let mut guest = NetnsGuest::start(netns, &config);
    // Once QEMU talks, nsenter has exec'd it: the PID we kill on drop is QEMU's own.
    guest.expect_line("Bramble", BOOT_TIMEOUT);
    assert!(
        process_is_running(guest.pid(), QEMU_NAME),
        "PID {} is not a running {QEMU_NAME}",
        guest.pid()
    );
    guest
}

/// Asks for `name` over mDNS from inside `netns` by running this test binary there as a
/// resolver subprocess ([`mdns_query_in_namespace`]). Returns the addresses answered and the
/// subprocess's output (for failure messages).
fn resolve_in(netns: &Netns, name: &str, mode: QueryMode) -> (Vec<Ipv4Addr>, String) {
    mdns::resolve_in_subprocess(
        netns,
        &[
            (QUERY_NAME_VAR, name.to_string()),
            (QUERY_MODE_VAR, mode.name().to_string()),
        ],
    )
}

/// The resolver subprocess: run by [`resolve_in`] inside a namespace with the name and mode in
/// the environment; prints one `mdns-answer: A.B.C.D` line per address. Without them (a plain
/// `--ignored` run) there is nothing to ask, and it returns.
#[test]
#[ignore = "helper: run by the mDNS tests inside their namespace"]
fn mdns_query_in_namespace() {
    let (Ok(name), Ok(mode)) = (std::env::var(QUERY_NAME_VAR), std::env::var(QUERY_MODE_VAR))
    else {
        eprintln!("{QUERY_NAME_VAR} is not set: nothing to ask");
        return;
    };
    let mode = QueryMode::from_name(&mode).expect("query mode");
    let addresses =
        mdns::resolve(&name, HOST_ADDRESS, mode, QUERY_TIMEOUT).expect("mDNS query socket");
    for address in addresses {
        println!("mdns-answer: {address}");
    }
}

/// Extracts `A.B.C.D` from `dhcp: lease A.B.C.D/N from ...`.
fn leased_address(line: &str) -> Ipv4Addr {
    line.split("lease ")
        .nth(1)
        .and_then(|rest| rest.split(['/', ' ']).next())
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// Checks that `address` serves every file of the site byte for byte to curl.
fn check_http(netns: &Netns, address: Ipv4Addr, files: &[(String, Vec<u8>)]) {
    for (path, bytes) in files {
        let url = format!("http://{address}{path}");
        let body = netns
            .curl(&url)
            .unwrap_or_else(|| panic!("curl {url} failed"));
        assert!(
            &body == bytes,
            "{url}: {} bytes served, {} expected",
            body.len(),
            bytes.len()
        );
    }
}

#[test]
fn static_address_answers_arp_ping_http_and_mdns() {
    let guest_address = Ipv4Addr::new(192, 168, 77, 2);
    let dir = tempfile::tempdir().unwrap();
    let files = netns::write_site(&dir.path().join("site"));
    let netns = Netns::create();
    let mut guest = boot(
        &netns,
        dir.path(),
        "address = 192.168.77.2/24\n",
        Topology::BehindHub,
    );
    let qemu_pid = guest.pid();
    guest.expect_line("net: static address 192.168.77.2/24", BOOT_TIMEOUT);
    guest.expect_line("serving: http://192.168.77.2/", Duration::from_secs(30));
    let mac = netns::guest_mac(&guest.transcript);

    // ARP: one ping makes the namespace resolve the guest; the entry holds the guest's MAC.
    let first = netns.output("ping", &["-c", "1", "-W", "5", &guest_address.to_string()]);
    assert!(
        first.status.success(),
        "first ping: {}",
        String::from_utf8_lossy(&first.stdout)
    );
    let neighbour = netns.neighbour(guest_address);
    assert!(
        neighbour.contains(&format!("lladdr {mac}")),
        "neighbour entry {neighbour:?}, guest MAC {mac}"
    );

    // 100 pings, 50 ms apart, none lost.
    let pings = netns.output(
        "ping",
        &[
            "-c",
            "100",
            "-i",
            "0.05",
            "-W",
            "2",
            &guest_address.to_string(),
        ],
    );
    let summary = String::from_utf8_lossy(&pings.stdout).to_string();
    assert!(
        summary.contains("100 packets transmitted, 100 received, 0% packet loss"),
        "{summary}"
    );

    check_http(&netns, guest_address, &files);
    // The access log saw the requests.
    guest.expect_line("GET /blob.bin 200", Duration::from_secs(10));

    // mDNS for the default hostname, both as a legacy resolver and as a full querier.
    for mode in [QueryMode::LegacyUnicast, QueryMode::Multicast] {
        let (addresses, log) = resolve_in(&netns, "bramble.local", mode);
        guest.drain();
        assert_eq!(
            addresses,
            vec![guest_address],
            "{mode:?} query for bramble.local; resolver:\n{log}\nserial:\n{}",
            guest.transcript.join("\n")
        );
    }
    drop(guest);
    assert!(
        !process_is_running(qemu_pid, QEMU_NAME),
        "QEMU (PID {qemu_pid}) still running after the guest was dropped"
    );
}

#[test]
fn dhcp_lease_from_dnsmasq_then_http_and_mdns_for_the_hostname() {
    let dir = tempfile::tempdir().unwrap();
    let files = netns::write_site(&dir.path().join("site"));
    let netns = Netns::create();
    let leases = dir.path().join("dnsmasq.leases");
    let mut command = netns.command("dnsmasq");
    command.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--port=0",
        "--bind-interfaces",
        &format!("--interface={TAP}"),
        "--except-interface=lo",
        "--dhcp-range=192.168.77.50,192.168.77.59,255.255.255.0,10m",
        "--dhcp-authoritative",
        "--user=root",
        "--log-dhcp",
        "--log-facility=-",
        &format!("--dhcp-leasefile={}", leases.display()),
        &format!("--pid-file={}", dir.path().join("dnsmasq.pid").display()),
    ]);
    let dnsmasq_log = dir.path().join("dnsmasq.log");
    let dnsmasq = Daemon::start(command, &dnsmasq_log);
    let dnsmasq_pid = dnsmasq.pid();

    let mut guest = boot(
        &netns,
        dir.path(),
        "address = dhcp\nhostname = windowsill\n",
        Topology::RootPort,
    );
    let qemu_pid = guest.pid();
    assert!(
        process_is_running(dnsmasq_pid, "dnsmasq"),
        "dnsmasq (PID {dnsmasq_pid}) is not running"
    );
    let Some(lease) = guest.wait_for(|line| line.contains("dhcp: lease"), BOOT_TIMEOUT) else {
        panic!(
            "no DHCP lease; serial:\n{}\ndnsmasq:\n{}",
            guest.transcript.join("\n"),
            std::fs::read_to_string(&dnsmasq_log).unwrap_or_default()
        );
    };
    let address = leased_address(&lease);
    assert!(
        lease.contains(&format!("from {HOST_ADDRESS}")),
        "lease not from dnsmasq: {lease:?}"
    );
    let last = address.octets()[3];
    assert!(
        address.octets()[..3] == [192, 168, 77] && (50..=59).contains(&last),
        "{address} is outside dnsmasq's range"
    );
    guest.expect_line(
        &format!("serving: http://{address}/"),
        Duration::from_secs(30),
    );

    // dnsmasq recorded the lease with the guest's MAC and the hostname it sent.
    let mac = netns::guest_mac(&guest.transcript);
    let recorded = std::fs::read_to_string(&leases).unwrap_or_default();
    assert!(
        recorded.lines().any(|line| line.contains(&mac)
            && line.contains(&address.to_string())
            && line.contains("windowsill")),
        "lease file:\n{recorded}\nexpected {mac} {address} windowsill"
    );

    check_http(&netns, address, &files);

    let (addresses, log) = resolve_in(&netns, "windowsill.local", QueryMode::LegacyUnicast);
    guest.drain();
    assert_eq!(
        addresses,
        vec![address],
        "resolver:\n{log}\nserial:\n{}",
        guest.transcript.join("\n")
    );
    // The default name is not claimed when another is configured.
    let (addresses, log) = resolve_in(&netns, "bramble.local", QueryMode::LegacyUnicast);
    assert_eq!(addresses, Vec::<Ipv4Addr>::new(), "resolver:\n{log}");

    drop(guest);
    drop(dnsmasq);
    for (pid, name) in [(qemu_pid, QEMU_NAME), (dnsmasq_pid, "dnsmasq")] {
        assert!(
            !process_is_running(pid, name),
            "{name} (PID {pid}) still running after the test dropped it"
        );
    }
}
