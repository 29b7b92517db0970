//! IPv6 on the real kernel (issue 20): `bramble qemu --site DIR --tap tap0` in a network
//! namespace where radvd announces 2001:db8:1::/64. The guest forms a SLAAC address (RFC 7217
//! identifier, after DAD), answers ping6, serves every file of the site over IPv6 to curl -6
//! byte for byte, answers Avahi's AAAA (and A) questions over ff02::fb and AAAA over
//! 224.0.0.251, shows its addresses and connections per family in `status`, and follows a
//! renumbering to 2001:db8:2::/64 (the old address deprecated at once, gone when its lifetime
//! runs out). A second guest with `ipv6 = off` sends no IPv6 frame at all (tcpdump judges).
//!
//! `bramble qemu` runs inside the namespace as this test binary's ignored helper test,
//! through the same argument parser and entry point as the `bramble` binary.

mod netns;

use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use bramble_tests::{BOOT_TIMEOUT, kernel};
use netns::ipv6::{self as peers, Avahi, Capture, Prefix, Radvd, Transport};
use netns::tool::start_bramble_qemu;
use netns::{Netns, NetnsGuest, TAP, build_card};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The first prefix radvd announces, and the one it renumbers to.
const PREFIX_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0);
const PREFIX_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0);
/// The name server radvd advertises (RFC 8106); only passed on, nothing answers there.
const DNS6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x53);
/// The namespace's own address in prefix A: the access log's client.
const HOST6: &str = "2001:db8:1::1";
const GUEST_ADDRESS: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 2);
/// How long the address phases may take (RAs come every 3-4 s; lifetimes are 12 s).
const PHASE: Duration = Duration::from_secs(40);

bramble_qemu_helper!();

/// Gives the namespace's side an address in each prefix (no DAD) and makes it a router.
fn add_ipv6(netns: &Netns) {
    for host in ["2001:db8:1::1/64", "2001:db8:2::1/64"] {
        netns::run(Command::new("ip").args([
            "-n",
            netns.name(),
            "-6",
            "addr",
            "add",
            host,
            "dev",
            TAP,
            "nodad",
        ]));
    }
    netns::run(
        netns
            .command("sysctl")
            .args(["-qw", "net.ipv6.conf.all.forwarding=1"]),
    );
}

/// The address of a `serving: http://[ADDR]/` line.
/// The card's `ipv6_secret` in the SLAAC test.
const SECRET_HEX: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

/// The first stable address (RFC 7217) for `prefix` under [`SECRET_HEX`] and `mac`
/// (`aa:bb:...`), as the card's setting should make it.
fn stable_address(prefix: Ipv6Addr, mac: &str) -> Ipv6Addr {
    let mut secret = [0u8; 16];
    for (index, byte) in secret.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&SECRET_HEX[index * 2..index * 2 + 2], 16).unwrap();
    }
    let mut mac_bytes = [0u8; 6];
    for (byte, part) in mac_bytes.iter_mut().zip(mac.split(':')) {
        *byte = u8::from_str_radix(part, 16).unwrap_or_else(|_| panic!("MAC {mac}"));
    }
    let mut prefix_bytes = [0u8; 8];
    prefix_bytes.copy_from_slice(&prefix.octets()[..8]);
    let iid = bramble_proto::slaac::stable_interface_id(&secret, prefix_bytes, mac_bytes, 0);
    assert!(!bramble_proto::slaac::is_reserved_interface_id(iid));
    let mut address = [0u8; 16];
    address[..8].copy_from_slice(&prefix_bytes);
    address[8..].copy_from_slice(&iid.to_be_bytes());
    Ipv6Addr::from(address)
}

fn serving_address(line: &str) -> Ipv6Addr {
    peers::serving_addresses(line)
        .first()
        .copied()
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// `ping -6` until `address` answers once (the guest drops a reply while it resolves our
/// address: smoltcp queues nothing behind a neighbour solicitation).
fn wait_for_ping6(netns: &Netns, address: &str) -> bool {
    (0..10).any(|_| {
        netns
            .output("ping", &["-6", "-c", "1", "-W", "1", "-w", "2", address])
            .status
            .success()
    })
}

/// curl -6 fetches every file of the site from `host` (bracketed) byte for byte.
fn check_http6(netns: &Netns, host: &str, files: &[(String, Vec<u8>)]) {
    for (path, bytes) in files {
        let url = format!("http://{host}{path}");
        let output = netns.output(
            "curl",
            &[
                "-6",
                "--globoff",
                "--silent",
                "--fail",
                "--max-time",
                "30",
                &url,
            ],
        );
        assert!(
            output.status.success() && &output.stdout == bytes,
            "curl -6 {url}: {} bytes of {} ({})",
            output.stdout.len(),
            bytes.len(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Avahi over `transport` resolves `name` for `family` to `expected`.
fn check_avahi(
    netns: &Netns,
    dir: &Path,
    transport: Transport,
    family: Transport,
    name: &str,
    expected: IpAddr,
) {
    let in_namespace = |program: &str| netns.command(program);
    let avahi = Avahi::start(&in_namespace, dir, TAP, transport);
    let (address, output) = avahi.resolve(&in_namespace, name, family);
    assert_eq!(
        address,
        Some(expected),
        "avahi-resolve {family:?} {name} over {transport:?}:\n{output}\navahi-daemon:\n{}",
        avahi.log()
    );
}

fn lifetimes(prefix: Ipv6Addr, valid: u32, preferred: u32) -> Prefix {
    Prefix {
        prefix,
        valid,
        preferred,
    }
}

#[test]
fn slaac_ping6_http_mdns_aaaa_status_and_renumbering_under_bramble_qemu() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    let files = netns::write_site(&site);
    let settings = dir.path().join("BRAMBLE.TXT");
    std::fs::write(
        &settings,
        format!("address = 192.168.77.2/24\nhostname = sill6\nipv6_secret = {SECRET_HEX}\n"),
    )
    .unwrap();
    let netns = Netns::create();
    add_ipv6(&netns);
    let in_namespace = |program: &str| netns.command(program);
    let args: Vec<String> = vec![
        "--kernel".into(),
        kernel().raw.display().to_string(),
        "--site".into(),
        site.display().to_string(),
        "--config".into(),
        settings.display().to_string(),
        "--tap".into(),
        TAP.into(),
    ];
    let mut qemu = start_bramble_qemu(&netns, &args);
    let guest = qemu.guest();
    guest.expect_line("Bramble", BOOT_TIMEOUT);
    guest.expect_line("serving: http://192.168.77.2/", BOOT_TIMEOUT);
    let link_local_line = guest.expect_line("(link-local)", PHASE);
    let link_local: Ipv6Addr = link_local_line
        .split("ipv6: address ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|address| address.parse().ok())
        .unwrap_or_else(|| panic!("no link-local address in {link_local_line:?}"));

    peers::wait_for_link_local(&in_namespace, TAP, Duration::from_secs(10));
    let radvd = Radvd::start(
        &in_namespace,
        dir.path(),
        "radvd-a",
        &peers::radvd_config(TAP, &[lifetimes(PREFIX_A, 12, 8)], Some(DNS6)),
    );
    let line = guest.expect_line("serving: http://[2001:db8:1:", PHASE);
    let address_a = serving_address(&line);
    guest.drain();
    let serial = guest.transcript.join("\n");
    assert!(
        serial.contains("ipv6: stable addresses keyed by the card's ipv6_secret"),
        "{serial}"
    );
    assert_eq!(
        address_a,
        stable_address(PREFIX_A, &netns::guest_mac(&guest.transcript)),
        "the SLAAC address is the one RFC 7217 gives for the card's ipv6_secret"
    );
    assert!(serial.contains("ipv6: router fe80::"), "{serial}");
    assert!(
        serial.contains(&format!("ipv6: name server {DNS6}")),
        "{serial}"
    );

    let a = address_a.to_string();
    assert!(wait_for_ping6(&netns, &a), "{a} never answered ping6");
    let pings = netns.output(
        "ping",
        &["-6", "-c", "20", "-i", "0.05", "-W", "2", "-q", &a],
    );
    let summary = String::from_utf8_lossy(&pings.stdout).to_string();
    assert!(
        summary.contains("20 packets transmitted, 20 received"),
        "{summary}"
    );

    check_http6(&netns, &format!("[{address_a}]"), &files);
    check_http6(&netns, &format!("[{link_local}%25{TAP}]"), &files[..1]);
    let guest = qemu.guest();
    let access = guest.expect_line("GET /blob.bin 200", Duration::from_secs(10));
    assert!(access.ends_with(HOST6), "access log line {access:?}");

    let name = "sill6.local";
    check_avahi(
        &netns,
        dir.path(),
        Transport::Ipv6,
        Transport::Ipv6,
        name,
        address_a.into(),
    );
    check_avahi(
        &netns,
        dir.path(),
        Transport::Ipv6,
        Transport::Ipv4,
        name,
        GUEST_ADDRESS.into(),
    );
    check_avahi(
        &netns,
        dir.path(),
        Transport::Ipv4,
        Transport::Ipv6,
        name,
        address_a.into(),
    );

    // The status command lists every address and counts connections per family.
    let guest = qemu.guest();
    guest.send_line("status");
    let status = guest.expect_line("status: addresses", Duration::from_secs(10));
    for needle in [
        "192.168.77.2/24".to_string(),
        format!("{link_local}/64 (link-local)"),
        format!("{address_a}/64"),
        "over IPv4 0,".to_string(),
    ] {
        assert!(status.contains(&needle), "{needle:?} not in {status:?}");
    }
    assert!(!status.contains("over IPv6 0"), "{status:?}");

    // Renumbering: prefix A deprecated (preferred 0; its valid lifetime 0 is ignored, RFC 4862
    // 5.5.3 (e), so A runs out by itself), prefix B offered.
    drop(radvd);
    let _radvd = Radvd::start(
        &in_namespace,
        dir.path(),
        "radvd-b",
        &peers::radvd_config(
            TAP,
            &[lifetimes(PREFIX_A, 0, 0), lifetimes(PREFIX_B, 12, 8)],
            None,
        ),
    );
    guest.expect_line(
        &format!("ipv6: address {address_a} deprecated by the router"),
        PHASE,
    );
    let line = guest.expect_line("serving: http://[2001:db8:2:", PHASE);
    let address_b = serving_address(&line);
    let b = address_b.to_string();
    assert!(wait_for_ping6(&netns, &b), "{b} never answered ping6");
    check_http6(&netns, &format!("[{address_b}]"), &files);
    check_avahi(
        &netns,
        dir.path(),
        Transport::Ipv6,
        Transport::Ipv6,
        name,
        address_b.into(),
    );
    let guest = qemu.guest();
    guest.expect_line(&format!("ipv6: address {address_a} expired"), PHASE);
    let late = netns.output("ping", &["-6", "-c", "2", "-W", "1", &a]);
    assert!(!late.status.success(), "{a} still answers after it expired");
    check_http6(&netns, &format!("[{address_b}]"), &files[..1]);
}

#[test]
fn with_ipv6_off_the_kernel_sends_no_ipv6_frame() {
    let dir = tempfile::tempdir().unwrap();
    netns::write_site(&dir.path().join("site"));
    let card = dir.path().join("card.img");
    build_card(
        &dir.path().join("site"),
        "address = 192.168.77.2/24\nipv6 = off\n",
        &card,
    );
    let netns = Netns::create();
    add_ipv6(&netns);
    let in_namespace = |program: &str| netns.command(program);
    let mut capture = Capture::start(&in_namespace, dir.path(), TAP);
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card);
    config.network = Some(Network::Tap {
        interface: TAP.to_string(),
        topology: Topology::BehindHub,
    });
    let mut guest = NetnsGuest::start(&netns, &config);
    guest.expect_line("serving: http://192.168.77.2/", BOOT_TIMEOUT);
    let served_at = Instant::now();
    let mac = netns::guest_mac(&guest.transcript);
    peers::wait_for_link_local(&in_namespace, TAP, Duration::from_secs(10));
    let _radvd = Radvd::start(
        &in_namespace,
        dir.path(),
        "radvd",
        &peers::radvd_config(TAP, &[lifetimes(PREFIX_A, 60, 30)], Some(DNS6)),
    );
    // What would draw IPv6 out of a host: all-nodes pings, an mDNS question over ff02::fb
    // (Avahi finds nothing), router advertisements for a while.
    netns.output(
        "ping",
        &[
            "-6",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "1",
            &format!("ff02::1%{TAP}"),
        ],
    );
    let avahi = Avahi::start(&in_namespace, dir.path(), TAP, Transport::Ipv6);
    let (address, output) = avahi.resolve(&in_namespace, "bramble.local", Transport::Ipv4);
    assert_eq!(
        address, None,
        "an mDNS answer over IPv6 with IPv6 off:\n{output}"
    );
    drop(avahi);
    // DAD and router solicitations would have gone within seconds of the address.
    if let Some(left) = Duration::from_secs(10).checked_sub(served_at.elapsed()) {
        std::thread::sleep(left);
    }
    let body = netns.curl(&format!("http://{GUEST_ADDRESS}/"));
    assert!(body.is_some(), "IPv4 stopped serving");
    capture.stop();
    let ipv6 = capture.frames_from(&mac, "ip6");
    assert!(ipv6.is_empty(), "IPv6 frames from the guest: {ipv6:#?}");
    let ipv4 = capture.frames_from(&mac, "arp or ip");
    assert!(!ipv4.is_empty(), "the capture saw nothing from {mac}");
    guest.drain();
    let serial = guest.transcript.join("\n");
    assert!(
        !serial.contains("ipv6: "),
        "IPv6 work with IPv6 off:\n{serial}"
    );
}
