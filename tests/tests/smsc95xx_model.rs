//! Bramble against the LAN9514 model (bramble-usbredir) instead of QEMU's usb-net: `bramble
//! qemu --nic smsc95xx --tap tap0` in a network namespace. Bramble's own smsc95xx driver
//! meets a chip model that Linux's driver accepts (`usbredir/tests/linux_judge.rs`), at high
//! speed on the DWC2 root port like the B+'s LAN9514 Ethernet function: it brings the link
//! up, takes a DHCP lease from dnsmasq, answers mDNS and serves every file of a site byte
//! for byte; then each fault the model injects is survived and counted: link down and up
//! through the PHY interrupt, a stalled bulk-IN and bulk-OUT endpoint, frames flagged with
//! RX errors in their status words, a burst that takes more than one bulk-IN transfer, and
//! an unplug with a re-probe. Its register sequence is kept as a fixture
//! (`usbredir/fixtures/bramble-smsc95xx.seq`) for `usbredir/tests/register_sequence.rs`.
//!
//! `bramble qemu` runs inside the namespace as this test binary's ignored helper test,
//! through the same argument parser and entry point as the `bramble` binary.

mod netns;

use bramble_tests::{BOOT_TIMEOUT, kernel};
use bramble_usbredir::run::send_command;
use netns::mdns::{self, QueryMode};
use netns::tool::start_bramble_qemu;
use netns::{Daemon, HOST_ADDRESS, Netns, TAP, build_card};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const QUERY_NAME_VAR: &str = "BRAMBLE_MDNS_QUERY_NAME";
const FIXTURE: &str = "usbredir/fixtures/bramble-smsc95xx.seq";

bramble_qemu_helper!();

/// The mDNS resolver helper, as in the TAP tests.
#[test]
#[ignore = "helper: run by the mDNS check inside its namespace"]
fn mdns_query_in_namespace() {
    let Ok(name) = std::env::var(QUERY_NAME_VAR) else {
        eprintln!("{QUERY_NAME_VAR} is not set: nothing to ask");
        return;
    };
    let addresses = mdns::resolve(
        &name,
        HOST_ADDRESS,
        QueryMode::LegacyUnicast,
        Duration::from_secs(10),
    )
    .expect("mDNS query socket");
    for address in addresses {
        println!("mdns-answer: {address}");
    }
}

fn leased_address(line: &str) -> Ipv4Addr {
    line.split("lease ")
        .nth(1)
        .and_then(|rest| rest.split(['/', ' ']).next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

fn ping(netns: &Netns, address: Ipv4Addr, count: u32, extra: &[&str]) -> u32 {
    let count_text = count.to_string();
    let address_text = address.to_string();
    let mut args = vec!["-c", &count_text];
    if !extra.contains(&"-W") {
        args.extend_from_slice(&["-W", "3"]);
    }
    args.extend_from_slice(extra);
    args.push(&address_text);
    let output = netns.output("ping", &args);
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits (at most 10 s) until the guest answers one ping: after a link change or a re-probe
/// smoltcp has forgotten the namespace's MAC and drops the first echo request while it asks
/// with ARP (a host stack would queue it).
fn wait_reachable(netns: &Netns, address: Ipv4Addr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if ping(netns, address, 1, &["-W", "1"]) == 1 {
            return;
        }
    }
    panic!("{address} does not answer ping");
}

fn stat(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// Every file of the site, byte for byte.
fn check_site(netns: &Netns, address: Ipv4Addr, files: &[(String, Vec<u8>)]) {
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
fn bramble_drives_the_lan9514_model_and_survives_its_faults() {
    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped: qemu-system-arm is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let files = netns::write_site(&dir.path().join("site"));
    let card = dir.path().join("card.img");
    build_card(&dir.path().join("site"), "address = dhcp\n", &card);
    let netns = Netns::create();
    let mut dnsmasq = netns.command("dnsmasq");
    dnsmasq.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--port=0",
        "--bind-interfaces",
        &format!("--interface={TAP}"),
        "--except-interface=lo",
        "--dhcp-range=192.168.77.50,192.168.77.59,255.255.255.0,10m",
        "--dhcp-authoritative",
        "--user=root",
        "--log-facility=-",
        &format!("--dhcp-leasefile={}", dir.path().join("leases").display()),
        &format!("--pid-file={}", dir.path().join("dnsmasq.pid").display()),
    ]);
    let _dnsmasq = Daemon::start(dnsmasq, &dir.path().join("dnsmasq.log"));

    let control = dir.path().join("control.sock");
    let log = dir.path().join("registers.log");
    let args: Vec<String> = ["--nic", "smsc95xx", "--tap", TAP, "--kernel"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            kernel().raw.display().to_string(),
            "--image".into(),
            card.display().to_string(),
            "--model-control".into(),
            control.display().to_string(),
            "--model-log".into(),
            log.display().to_string(),
        ])
        .collect();
    let mut bramble = start_bramble_qemu(&netns, &args);
    let guest = bramble.guest();
    let device = guest.expect_line("usb: device 0424:ec00", BOOT_TIMEOUT);
    assert!(device.contains("High speed, root port"), "{device}");
    guest.expect_line("smsc95xx: link up", Duration::from_secs(30));
    let lease = guest.expect_line("dhcp: lease", Duration::from_secs(30));
    assert!(lease.contains(&format!("from {HOST_ADDRESS}")), "{lease}");
    let address = leased_address(&lease);
    guest.expect_line(
        &format!("serving: http://{address}/"),
        Duration::from_secs(30),
    );
    let model =
        |line: &str| send_command(&control, line).unwrap_or_else(|e| panic!("model {line}: {e}"));
    model("note bramble ready");

    check_site(&netns, address, &files);
    // The HTTP traffic went to the stream pool, so smoltcp may not know the namespace's MAC
    // yet; the pings below count replies.
    wait_reachable(&netns, address);
    // Replies of 504 and 1,016 bytes: with the 8 command bytes a transfer of exactly one and
    // two packets, which must end with a ZLP, not a pad byte the FCT would read as the next
    // TX command (the model answers that with a loss of sync and a STALL).
    for size in ["462", "974"] {
        assert_eq!(
            ping(&netns, address, 3, &["-i", "0.2", "-s", size]),
            3,
            "ping -s {size}"
        );
    }
    let stats = model("stats");
    assert_eq!(
        stat(&stats, "tx_errors"),
        0,
        "transfers of whole packets: {stats}"
    );
    let (answers, resolver) =
        mdns::resolve_in_subprocess(&netns, &[(QUERY_NAME_VAR, "bramble.local".into())]);
    assert_eq!(
        answers,
        vec![address],
        "mDNS for bramble.local:\n{resolver}"
    );
    assert_eq!(ping(&netns, address, 5, &["-i", "0.2"]), 5);

    // 1. Cable pulled and plugged back: the PHY raises its interrupt, BMSR latches the
    //    drop; the driver sees the link go down and come back, and DHCP runs again.
    assert_eq!(model("link down"), "ok");
    let guest = bramble.guest();
    guest.expect_line("net: link down", Duration::from_secs(10));
    assert_eq!(model("link up"), "ok");
    guest.expect_line("net: link up", Duration::from_secs(10));
    guest.expect_line("dhcp: lease", Duration::from_secs(30));
    wait_reachable(&netns, address);
    assert_eq!(
        ping(&netns, address, 3, &["-i", "0.2"]),
        3,
        "after the link came back"
    );

    // 2. Bulk-IN stalled: the next receive fails with STALL; the driver clears the halt.
    assert_eq!(model("stall in"), "ok");
    let guest = bramble.guest();
    guest.expect_line("receive failed: endpoint stalled", Duration::from_secs(10));
    assert_eq!(
        ping(&netns, address, 3, &["-i", "0.2"]),
        3,
        "after the bulk-IN stall"
    );

    // 3. Bulk-OUT stalled: the frame in flight is lost, the halt cleared, the rest goes.
    assert_eq!(model("stall out"), "ok");
    assert!(
        ping(&netns, address, 4, &["-i", "0.3"]) >= 3,
        "after the bulk-OUT stall"
    );
    let stats = model("stats");
    assert_eq!(
        stat(&stats, "halts_cleared"),
        2,
        "both halts cleared: {stats}"
    );

    // 4. RX errors: three frames arrive as CRC-error copies first; the driver drops them
    //    (status word ES) and delivers the good copies.
    assert_eq!(model("rx-errors 3"), "ok");
    assert_eq!(
        ping(&netns, address, 5, &["-i", "0.2"]),
        5,
        "with RX error frames"
    );
    let stats = model("stats");
    assert_eq!(stat(&stats, "rx_error_frames"), 3, "{stats}");

    // 5. A burst: 16 frames of 1,242 bytes back to back at wire speed, more than one
    //    bulk-IN transfer holds (burst cap 37 x 512 bytes); all answered.
    let before = model("stats");
    assert_eq!(model("burst 16"), "ok");
    assert_eq!(
        ping(&netns, address, 16, &["-l", "16", "-s", "1200"]),
        16,
        "the burst"
    );
    let after = model("stats");
    assert_eq!(stat(&after, "rx_fifo_dropped"), 0, "{after}");
    assert!(
        stat(&after, "in_transfers") - stat(&before, "in_transfers") >= 2,
        "the burst took more than one transfer: {before}\n{after}"
    );
    assert!(
        stat(&after, "multi_frame_transfers") > stat(&before, "multi_frame_transfers"),
        "{after}"
    );

    // The driver counted each of them: the stalls as failed transfers (cleared and
    // re-armed), the flagged frames as dropped.
    let guest = bramble.guest();
    guest.send_line("status");
    let nic = guest.expect_line(bramble_status::Nic::PREFIX, Duration::from_secs(10));
    let counts = bramble_status::Nic::parse(&nic).unwrap_or_else(|| panic!("unreadable: {nic}"));
    assert!(counts.rx_dropped >= 3, "the RX error frames: {nic}");
    assert!(counts.rx_transfer_errors >= 1, "the bulk-IN stall: {nic}");
    assert!(counts.tx_transfer_errors >= 1, "the bulk-OUT stall: {nic}");

    // 6. Unplugged and plugged back a second later: the driver's device is gone, the
    //    network device is probed again, the chip comes up from reset, DHCP again.
    assert_eq!(model("replug 1000"), "ok");
    let guest = bramble.guest();
    guest.expect_line("network device lost", Duration::from_secs(10));
    guest.expect_line("network device back", Duration::from_secs(30));
    guest.expect_line("dhcp: lease", Duration::from_secs(30));
    wait_reachable(&netns, address);
    assert_eq!(
        ping(&netns, address, 3, &["-i", "0.2"]),
        3,
        "after the re-probe"
    );
    check_site(&netns, address, &files[..1]);
    // Started with the link down, as on a real B+: the path that once overflowed the stack.
    bramble_tests::check_stack(guest);
    let stats = model("stats");
    assert_eq!(stat(&stats, "replugs"), 1, "{stats}");
    assert_eq!(
        stat(&stats, "tx_errors"),
        0,
        "Bramble's TX command words: {stats}"
    );
    guest.send_line("status");
    guest.expect_line("status: usb", Duration::from_secs(10));
    drop(bramble);

    // The register sequence until the address was set, compared with the fixture.
    let text = std::fs::read_to_string(&log).expect("register log");
    let artifacts = bramble::workspace_root().join("target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("bramble-smsc95xx-registers.log"), &text).unwrap();
    let until_ready: String = text
        .lines()
        .take_while(|l| !l.contains("NOTE bramble ready"))
        .map(|l| format!("{l}\n"))
        .collect();
    let steps = bramble_usbredir::sequence::normalize(&until_ready);
    let path = bramble::workspace_root().join(FIXTURE);
    if std::env::var_os("BRAMBLE_RECORD_FIXTURES").is_some() {
        let mut out = String::from(
            "# Bramble's smsc95xx against the LAN9514 model, from connect to link up and\n\
             # address set, normalized by bramble_usbredir::sequence::normalize. Recorded by\n\
             # BRAMBLE_RECORD_FIXTURES=1 cargo test -p bramble-tests --test smsc95xx_model\n",
        );
        for step in &steps {
            out.push_str(step);
            out.push('\n');
        }
        std::fs::write(&path, out).unwrap();
        return;
    }
    let fixture = std::fs::read_to_string(&path).expect("fixture");
    let expected: Vec<&str> = fixture.lines().filter(|l| !l.starts_with('#')).collect();
    let got: Vec<&str> = steps.iter().map(String::as_str).collect();
    assert_eq!(
        got, expected,
        "Bramble's register sequence changed: re-record {FIXTURE} (BRAMBLE_RECORD_FIXTURES=1) and update usbredir/tests/register_sequence.rs"
    );
}
