//! Reachable from outside (issue 29): Debian's miniupnpd as the home router. The test's TAP
//! namespace is the router: its `tap0` (192.168.77.1) is the LAN port, the guest the LAN's
//! one host; a veth pair leads to a second namespace, the "internet", where curl stands for a
//! visitor. nftables in the router namespace forwards LAN to WAN with masquerade and holds
//! the chains miniupnpd fills (its Debian nftables backend), and miniupnpd runs with NAT-PMP,
//! PCP and UPnP IGD on. No address here leaves the two namespaces: the router's WAN address
//! (11.0.0.1, a global one, since miniupnpd refuses to map on a private or documentation
//! address) exists only inside them.
//!
//! One boot of `bramble qemu --image --tap` with `router_ports = on`, `https = on` and a 120 s
//! lifetime covers, in order:
//! 1. the mapping: the guest maps 80 and 443 by PCP, and the visitor fetches the page through
//!    the router's WAN address over HTTP and HTTPS; `router` and the status page report it;
//! 2. a clean shutdown: `reboot` deletes both mappings on the router (its nftables rules go)
//!    before the reset, and the rebooted guest maps again;
//! 3. the router restarting (killed, its rules flushed as a power cycle loses them): the
//!    visitor is refused, the restarted miniupnpd's PCP ANNOUNCE has the guest map again,
//!    well within one renewal interval (60 s), and the visitor gets the page again;
//! 4. a router without any protocol (miniupnpd stopped): `router again` ends in the
//!    documented message;
//! 5. double NAT and carrier-grade NAT: the router's WAN address in 10.0.0.0/8, then in
//!    100.64.0.0/10; miniupnpd refuses to map, and the guest says which it is;
//! 6. a router with UPnP IGD only (`enable_natpmp=no`): after PCP's and NAT-PMP's silence
//!    the guest finds it by SSDP, reads its description and maps both ports by SOAP, and
//!    the visitor gets the page again; `reboot` deletes both by SOAP before the reset, and
//!    the new boot maps them again;
//! 7. a router that answers NAT-PMP but not PCP (an nftables rule drops PCP's datagrams over
//!    IPv4): the guest maps both ports by NAT-PMP, and `reboot` deletes them.
//!
//! IPv6 beside it: the router routes 2001:db8:77:1::/64 (radvd on its LAN port) to the WAN,
//! where the visitor has 2001:db8:99::2; its forward chain drops what comes in unasked, so
//! the visitor reaches the guest's SLAAC address only through the pinholes the guest asks
//! for by PCP over IPv6 (miniupnpd's IGD2 pinholes, rules in the same `miniupnpd` chain). In
//! 1 both pinholes open and the visitor gets the page over IPv6 by HTTP and HTTPS; in 2
//! `reboot` deletes them with the IPv4 mappings (the guest waits until both families'
//! deletions have left, and the router's rules of both are gone), and the new boot opens
//! them again; in 3 the restarted router's ANNOUNCE has them asked for again (the one over
//! IPv4: miniupnpd 2.3 sends its IPv6 one to ff02::1 without naming the LAN interface) and
//! the visitor gets the page over IPv6 again.
//!
//! A second boot names the card as its owner would (issue 29's first check): `ddns = rfc2136`
//! for `porch.bramble.test`, with `ddns_ipv4 = public`. Debian's knotd in the internet
//! namespace (11.0.0.3) is the owner's name server for `bramble.test`, taking updates signed
//! with the card's TSIG key (netns/knot.rs, shared with ddns.rs); an SNTP responder on the
//! router gives the time TSIG signs. The visitor asks knotd for the name's A record (kdig) and
//! fetches `http://` and `https://porch.bramble.test/` at exactly that answer (curl's
//! `--resolve`, the test CA's wildcard certificate), byte for byte:
//! 8. after boot: the A record is the address PCP reported (11.0.0.1), in one update, and the
//!    visitor fetches the page by name within a bounded time;
//! 9. the router restarting: the name still answers but the visitor is refused; within one
//!    renewal interval it gets the page again, with no further update (same address);
//! 10. the router restarting with its announcement lost (nftables drops its datagrams to
//!     224.0.0.1:5350): the renewal, at most one renewal interval after the last mapping,
//!     sees the router's epoch gone back, says and counts the restart, makes the mappings
//!     again, and the visitor gets the page by name;
//! 11. the provider renumbering the router (its WAN address 11.0.0.9, miniupnpd restarted on
//!     it): the next mapping reports the new address, the A record follows in exactly one
//!     update, and the visitor fetches the page by name at the new address.

mod netns;

use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use netns::ipv6::{add_address, advertise_prefix, serving_addresses};
use netns::tool::{start_bramble_qemu, tap_args};
use netns::{Daemon, Netns, TAP};
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

bramble_qemu_helper!();

/// The guest's address on the LAN (the TAP link).
const GUEST: &str = "192.168.77.2";
/// The router's public address, and the visitor's, on the WAN link.
const WAN_ROUTER: &str = "11.0.0.1";
const WAN_VISITOR: &str = "11.0.0.2";
/// The LAN's IPv6 prefix (radvd on the router's LAN port), the router's and the visitor's
/// IPv6 addresses on the WAN link: routed, not translated.
const LAN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 1, 0, 0, 0, 0);
const WAN6_ROUTER: &str = "2001:db8:99::1";
const WAN6_VISITOR: &str = "2001:db8:99::2";
/// The lifetime the guest asks for: renewals every 60 s.
const LIFETIME: u64 = 120;
/// The chains miniupnpd fills, in the router's `inet filter` table.
const MINIUPNPD_CHAINS: [&str; 3] = ["miniupnpd", "prerouting_miniupnpd", "postrouting_miniupnpd"];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernel/tls/tests/data")
        .join(name)
}

fn run(command: &mut Command) -> String {
    String::from_utf8_lossy(&netns::run(command).stdout).into_owned()
}

/// The "internet" namespace, joined to the router's by a veth pair; deleted on drop.
struct Wan {
    name: String,
}

impl Wan {
    fn create(router: &Netns) -> Wan {
        // One per router namespace (`bramble-qemu-PID-N` gives `bramble-wan-PID-N`): this
        // file's tests run side by side.
        let name = router.name().replacen("bramble-qemu", "bramble-wan", 1);
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        netns::run(Command::new("ip").args(["netns", "add", &name]));
        let wan = Wan { name };
        let r = router.name();
        let visitor = format!("{WAN_VISITOR}/24");
        netns::run(Command::new("ip").args([
            "-n", r, "link", "add", "wan0", "type", "veth", "peer", "name", "eth0", "netns",
            &wan.name,
        ]));
        for (space, args) in [
            (r, vec!["link", "set", "wan0", "up"]),
            (&wan.name, vec!["link", "set", "lo", "up"]),
            (&wan.name, vec!["addr", "add", &visitor, "dev", "eth0"]),
            (&wan.name, vec!["link", "set", "eth0", "up"]),
            (
                r,
                vec![
                    "-6",
                    "addr",
                    "add",
                    &format!("{WAN6_ROUTER}/64"),
                    "dev",
                    "wan0",
                    "nodad",
                ],
            ),
            (
                &wan.name,
                vec![
                    "-6",
                    "addr",
                    "add",
                    &format!("{WAN6_VISITOR}/64"),
                    "dev",
                    "eth0",
                    "nodad",
                ],
            ),
            (
                &wan.name,
                vec![
                    "-6",
                    "route",
                    "add",
                    &format!("{LAN6}/64"),
                    "via",
                    WAN6_ROUTER,
                ],
            ),
        ] {
            netns::run(Command::new("ip").args(["-n", space]).args(args));
        }
        wan
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.name))
            .arg("--")
            .arg(program);
        command
    }

    /// The visitor's fetch of `url` (the router's WAN address, over HTTP or HTTPS as
    /// `bramble.test`, trusting the test CA): the body, or `None` when it fails.
    fn fetch(&self, url: &str, seconds: u32) -> Option<Vec<u8>> {
        self.fetch_at(url, WAN_ROUTER, seconds)
    }

    /// The same, `bramble.test` standing for `address` (`[IPv6]` in brackets).
    fn fetch_at(&self, url: &str, address: &str, seconds: u32) -> Option<Vec<u8>> {
        let output = self
            .command("curl")
            .args(["--silent", "--fail", "--max-time", &seconds.to_string()])
            .arg("--cacert")
            .arg(fixture("ca.pem"))
            .args(["--resolve", &format!("bramble.test:443:{address}")])
            .arg(url)
            .stdin(Stdio::null())
            .output()
            .expect("curl (tools/setup.sh installs it)");
        output.status.success().then_some(output.stdout)
    }
}

impl Drop for Wan {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The router's forwarding, NAT and miniupnpd's (empty) chains.
fn router_firewall(router: &Netns) {
    let ruleset = format!(
        "table inet filter {{\n\
           chain forward {{ type filter hook forward priority 0; policy drop;\n\
             ct state established,related accept\n\
             iifname \"{TAP}\" oifname \"wan0\" accept\n\
             jump miniupnpd; }}\n\
           chain miniupnpd {{ }}\n\
           chain prerouting {{ type nat hook prerouting priority -100; policy accept;\n\
             jump prerouting_miniupnpd; }}\n\
           chain postrouting {{ type nat hook postrouting priority 100; policy accept;\n\
             oifname \"wan0\" masquerade\n\
             jump postrouting_miniupnpd; }}\n\
           chain prerouting_miniupnpd {{ }}\n\
           chain postrouting_miniupnpd {{ }}\n\
         }}\n"
    );
    let mut nft = router
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("nft (Debian package nftables, installed by tools/setup.sh)");
    use std::io::Write;
    nft.stdin
        .take()
        .unwrap()
        .write_all(ruleset.as_bytes())
        .unwrap();
    assert!(nft.wait().unwrap().success(), "nft refused the ruleset");
    run(router
        .command("sysctl")
        .args(["-qw", "net.ipv4.ip_forward=1"]));
    run(router
        .command("sysctl")
        .args(["-qw", "net.ipv6.conf.all.forwarding=1"]));
}

/// Empties miniupnpd's chains, as a router's power cycle does.
fn flush_mappings(router: &Netns) {
    for chain in MINIUPNPD_CHAINS {
        run(router
            .command("nft")
            .args(["flush", "chain", "inet", "filter", chain]));
    }
}

/// The DNAT rules miniupnpd holds now (one per mapping).
fn dnat_rules(router: &Netns) -> usize {
    run(router
        .command("nft")
        .args(["list", "chain", "inet", "filter", "prerouting_miniupnpd"]))
    .matches(" dnat ")
    .count()
}

/// The IPv6 pinholes miniupnpd holds now: its rules in its chain letting TCP in to an
/// address of the LAN's prefix (nft lists them as a raw match on the IPv6 destination,
/// `@nh,192,128 0x20010db800770001...`).
fn pinhole_rules(router: &Netns) -> usize {
    run(router
        .command("nft")
        .args(["list", "chain", "inet", "filter", "miniupnpd"]))
    .matches("@nh,192,128 0x20010db800770001")
    .count()
}

/// How long [`printed_since`] waits for a line that should follow at once.
const SAID: Duration = Duration::from_secs(5);

/// The line containing `needle` the guest printed since line `from` of its transcript, or
/// prints within `timeout` (the IPv4 and IPv6 clients' lines come in either order, and so do
/// a mapping's).
fn printed_since(guest: &mut Guest, from: usize, needle: &str, timeout: Duration) -> String {
    guest.drain();
    if let Some(line) = guest.transcript[from.min(guest.transcript.len())..]
        .iter()
        .find(|line| line.contains(needle))
    {
        return line.clone();
    }
    guest.expect_line(needle, timeout)
}

/// Waits (bounded) for the guest to have said, since line `from`, that PCP mapped port 443 at
/// `address`, that its public address is `address`, and that the name's A record was
/// updated to it; returns that last line.
fn mapped_and_updated(guest: &mut Guest, from: usize, address: &str) -> String {
    printed_since(
        guest,
        from,
        &format!("router: PCP: TCP {address}:443 -> port 443"),
        SAID,
    );
    printed_since(
        guest,
        from,
        &format!("public: address {address} (from PCP)"),
        SAID,
    );
    printed_since(
        guest,
        from,
        &format!("ddns: {NAME} updated: A {address}"),
        SAID,
    )
}

/// Waits (bounded) for both pinholes to be granted since line `from`, and for miniupnpd to
/// hold them; then the visitor gets the page over IPv6 by HTTP and HTTPS.
fn pinholes_let_the_visitor_in(
    guest: &mut Guest,
    from: usize,
    router: &Netns,
    wan: &Wan,
    index: &[u8],
) {
    let line = printed_since(guest, from, "serving: http://[2001:db8:77:1:", BOOT_TIMEOUT);
    let global = serving_addresses(&line)[0];
    for port in [80, 443] {
        printed_since(
            guest,
            from,
            &format!("router: PCP: IPv6 pinhole to [{global}]:{port} for"),
            Duration::from_secs(30),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while pinhole_rules(router) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        pinhole_rules(router),
        2,
        "miniupnpd holds both pinholes:\n{}",
        run(router.command("nft").args(["list", "ruleset"]))
    );
    for url in [
        format!("http://[{global}]/"),
        "https://bramble.test/".to_string(),
    ] {
        let body = wan.fetch_at(&url, &format!("[{global}]"), 30);
        assert_eq!(
            body.as_deref(),
            Some(index),
            "{url} over IPv6 from the WAN side"
        );
    }
}

/// Starts miniupnpd in the router namespace (foreground, debug log to `log`).
fn start_miniupnpd(router: &Netns, dir: &Path, log: &str, natpmp: bool) -> Daemon {
    let config = dir.join("miniupnpd.conf");
    std::fs::write(
        &config,
        format!(
            "ext_ifname=wan0\nlistening_ip={TAP}\nhttp_port=5000\nenable_natpmp={}\n\
             enable_upnp=yes\nsecure_mode=yes\nmin_lifetime=120\nmax_lifetime=86400\n\
             uuid=3a1b8e44-2d6c-4c8e-9b1a-0b5e6c7d8e9f\n\
             upnp_table_name=filter\nupnp_nat_table_name=filter\n\
             upnp_forward_chain=miniupnpd\nupnp_nat_chain=prerouting_miniupnpd\n\
             upnp_nat_postrouting_chain=postrouting_miniupnpd\n\
             allow 1-65535 192.168.77.0/24 1-65535\ndeny 0-65535 0.0.0.0/0 0-65535\n",
            if natpmp { "yes" } else { "no" }
        ),
    )
    .unwrap();
    let mut command = router.command("/usr/sbin/miniupnpd");
    command
        .args(["-d", "-f"])
        .arg(&config)
        .arg("-P")
        .arg(dir.join("miniupnpd.pid"));
    let daemon = Daemon::start(command, &dir.join(log));
    // Listening once its log says so (bounded).
    let ready = if natpmp {
        "Listening for NAT-PMP/PCP traffic"
    } else {
        "HTTP listening on port"
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
        if text.contains(ready) {
            return daemon;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "miniupnpd did not start:\n{}",
        std::fs::read_to_string(dir.join(log)).unwrap_or_default()
    );
}

/// Has the router drop PCP requests over IPv4 (version 2 in the datagram's first byte) and
/// keep NAT-PMP's (version 0): a NAT-PMP-only router, as miniupnpd cannot be configured.
fn drop_pcp_over_ipv4(router: &Netns) {
    run(router.command("nft").args([
        "add table inet pcp_block { chain input { type filter hook input priority -10; \
         meta nfproto ipv4 udp dport 5351 @th,64,8 2 drop; }; }",
    ]));
}

/// Moves the router's WAN address to `cidr`.
fn set_wan_address(router: &Netns, cidr: &str) {
    run(router.command("ip").args(["addr", "flush", "dev", "wan0"]));
    run(router
        .command("ip")
        .args(["addr", "add", cidr, "dev", "wan0"]));
}

/// The visitor's fetches over HTTP and HTTPS through the mapping give the page.
fn visitor_gets_the_page(wan: &Wan, index: &[u8]) {
    for url in [
        format!("http://{WAN_ROUTER}/"),
        "https://bramble.test/".to_string(),
    ] {
        let body = wan.fetch(&url, 30);
        assert_eq!(body.as_deref(), Some(index), "{url} from the WAN side");
    }
}

/// The card: the test site, `settings` as BRAMBLE.TXT, the test certificate (P-256, for
/// `*.bramble.test`); its path and the site's index page.
fn card_with_site(dir: &Path, settings: &str) -> (PathBuf, Vec<u8>) {
    let site = dir.join("site");
    let files = netns::write_site(&site);
    let index = files
        .iter()
        .find(|(path, _)| path == "/" || path == "/index.html")
        .map(|(_, body)| body.clone())
        .expect("the site's index");
    let packed = bramble::pack::pack_site(&site, &bramble::pack::PackOptions::default())
        .expect("pack the site");
    let (certificate, key, _) =
        bramble::image::check_tls_files(&fixture("p256.pem"), &fixture("p256.key"), 1_800_000_000)
            .unwrap();
    let card = dir.join("card.img");
    let inputs = bramble::image::ImageInputs {
        kernel: std::fs::read(&kernel().raw).expect("kernel.img"),
        site: packed.image,
        settings: settings.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: Some(bramble::image::TlsFiles {
            certificate_name: "CERT.PEM".into(),
            certificate,
            key_name: "KEY.PEM".into(),
            key,
        }),
    };
    bramble::image::build_image(&inputs, &card).expect("build the SD card image");
    (card, index)
}

#[test]
fn the_router_maps_the_ports_keeps_them_and_says_why_when_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let router = Netns::create();
    let wan = Wan::create(&router);
    run(router
        .command("ip")
        .args(["addr", "add", &format!("{WAN_ROUTER}/24"), "dev", "wan0"]));
    add_address(
        &|program: &str| router.command(program),
        TAP,
        "2001:db8:77:1::1/64",
    );
    router_firewall(&router);
    let mut miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-1.log", true);

    let settings = format!(
        "address = {GUEST}/24\ngateway = 192.168.77.1\nhostname = porch\nntp = off\n\
         mdns = off\nhttps = on\nrouter_ports = on\nrouter_lifetime = {LIFETIME}\n\
         status_from = 192.168.77.1/32\n"
    );
    let (card, index) = card_with_site(dir.path(), &settings);
    let args = tap_args(&card);
    let mut qemu = start_bramble_qemu(&router, &args);
    let in_namespace = |program: &str| router.command(program);
    let _radvd = advertise_prefix(&in_namespace, dir.path(), TAP, LAN6);
    let guest = qemu.guest();

    // 1. Mapped by PCP, and the page is reachable from outside.
    guest.expect_line("router: PCP: TCP 11.0.0.1:80 -> port 80", BOOT_TIMEOUT);
    guest.expect_line(
        "router: PCP: TCP 11.0.0.1:443 -> port 443",
        Duration::from_secs(10),
    );
    guest.expect_line(
        "public: address 11.0.0.1 (from PCP)",
        Duration::from_secs(10),
    );
    assert_eq!(dnat_rules(&router), 2);
    visitor_gets_the_page(&wan, &index);
    pinholes_let_the_visitor_in(guest, 0, &router, &wan, &index);
    guest.send_line("router");
    let line = guest.expect_line("status: router ", Duration::from_secs(10));
    assert!(
        line.contains("PCP via 192.168.77.1: 11.0.0.1:80->80,:443->443")
            && line.contains("renewal in")
            && line.contains("; IPv6 pinholes [2001:db8:77:1:")
            && line.contains("]:80,443, "),
        "{line}"
    );

    // The status page's Router row, as the owner on the LAN sees it (its figures are
    // refreshed every second: the first may predate the mapping).
    let row = "<tr><td>Router<td>PCP 11.0.0.1 :80 :443, ";
    let mut page = String::new();
    for _ in 0..40 {
        let body = router
            .curl(&format!("http://{GUEST}/.well-known/bramble/status"))
            .expect("the status page");
        page = String::from_utf8_lossy(&body).into_owned();
        if page.contains(row) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(page.contains(row), "no Router row:\n{page}");

    // 2. A clean shutdown deletes the mappings before the reset; the new boot maps again.
    guest.send_line("reboot");
    guest.expect_line("router: deleting 2 mapping(s)", Duration::from_secs(10));
    guest.expect_line(
        "router: deleting 2 IPv6 pinhole(s)",
        Duration::from_secs(10),
    );
    // The board waits until both families' deletions have left (a second at most when the
    // gateway's ARP entry and the IPv6 router's neighbor entry must both be found again).
    guest.expect_line("router: deletions sent in ", Duration::from_secs(10));
    guest.expect_line("rebooting", Duration::from_secs(10));
    let rebooted_at = guest.transcript.len();
    let deadline = Instant::now() + Duration::from_secs(5);
    while (dnat_rules(&router) > 0 || pinhole_rules(&router) > 0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    guest.drain();
    assert_eq!(
        dnat_rules(&router),
        0,
        "the deletions reached miniupnpd; serial:\n{}\nminiupnpd:\n{}",
        guest.transcript.join("\n"),
        std::fs::read_to_string(dir.path().join("miniupnpd-1.log")).unwrap_or_default()
    );
    assert_eq!(
        pinhole_rules(&router),
        0,
        "the pinholes' deletions reached miniupnpd; miniupnpd:\n{}",
        std::fs::read_to_string(dir.path().join("miniupnpd-1.log")).unwrap_or_default()
    );
    guest.expect_line("router: PCP: TCP 11.0.0.1:443 -> port 443", BOOT_TIMEOUT);
    // The new boot opens its pinholes again (SLAAC first, a few seconds): held before the
    // router restarts below, so that its announcement has them asked for again.
    pinholes_let_the_visitor_in(guest, rebooted_at, &router, &wan, &index);

    // 3. The router restarts and forgets: the guest maps again on its announcement, within
    // one renewal interval.
    drop(miniupnpd);
    flush_mappings(&router);
    assert!(
        wan.fetch(&format!("http://{WAN_ROUTER}/"), 3).is_none(),
        "nothing is forwarded once the router forgot"
    );
    guest.drain();
    let restarted_at = guest.transcript.len();
    miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-2.log", true);
    guest.expect_line(
        "router: the router announced a restart (PCP ANNOUNCE); mapping the ports again",
        Duration::from_secs(LIFETIME / 2),
    );
    guest.expect_line(
        "router: PCP: TCP 11.0.0.1:443 -> port 443",
        Duration::from_secs(10),
    );
    visitor_gets_the_page(&wan, &index);
    printed_since(
        guest,
        restarted_at,
        "asking for the IPv6 pinholes again",
        Duration::from_secs(LIFETIME / 2),
    );
    // The serving line is from the boot: look from the start for it.
    let line = printed_since(guest, 0, "serving: http://[2001:db8:77:1:", BOOT_TIMEOUT);
    let global = serving_addresses(&line)[0];
    for port in [80, 443] {
        printed_since(
            guest,
            restarted_at,
            &format!("router: PCP: IPv6 pinhole to [{global}]:{port} for"),
            Duration::from_secs(30),
        );
    }
    assert_eq!(
        pinhole_rules(&router),
        2,
        "miniupnpd holds both pinholes again"
    );
    let body = wan.fetch_at(&format!("http://[{global}]/"), &format!("[{global}]"), 30);
    assert_eq!(
        body.as_deref(),
        Some(&index[..]),
        "the page over IPv6 again"
    );

    // 4. No protocol at all: the documented message.
    drop(miniupnpd);
    flush_mappings(&router);
    guest.send_line("router again");
    guest.expect_line(
        "router: no PCP answer; trying NAT-PMP",
        Duration::from_secs(15),
    );
    guest.expect_line(
        "router: no NAT-PMP answer; searching for a UPnP IGD",
        Duration::from_secs(15),
    );
    guest.expect_line(
        "router: ports not mapped on 192.168.77.1: the router answers neither PCP, NAT-PMP nor \
         UPnP IGD",
        Duration::from_secs(15),
    );

    // 5. Behind another NAT: a private WAN address (double NAT), then a shared one (CGNAT).
    set_wan_address(&router, "10.0.0.1/24");
    miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-3.log", true);
    guest.send_line("router again");
    guest.expect_line(
        "router: ports not mapped on 192.168.77.1: the router has no public address",
        Duration::from_secs(15),
    );
    guest.expect_line("public: 10.0.0.1: double NAT", Duration::from_secs(10));
    drop(miniupnpd);
    set_wan_address(&router, "100.64.0.1/24");
    miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-4.log", true);
    guest.send_line("router again");
    guest.expect_line(
        "public: 100.64.0.1: carrier-grade NAT",
        Duration::from_secs(15),
    );
    guest.send_line("router");
    let line = guest.expect_line("status: router ", Duration::from_secs(10));
    assert!(
        line.contains("outside address 100.64.0.1: carrier-grade NAT")
            && line.contains("no public address"),
        "{line}"
    );
    assert_eq!(dnat_rules(&router), 0);

    // 6. A router with UPnP IGD only (NAT-PMP and PCP off): the fallback maps both ports by
    // SOAP, and the visitor gets the page.
    drop(miniupnpd);
    set_wan_address(&router, &format!("{WAN_ROUTER}/24"));
    miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-5.log", false);
    guest.send_line("router again");
    guest.expect_line(
        "router: UPnP IGD: TCP port 80 outside -> port 80 with a lease",
        Duration::from_secs(30),
    );
    guest.expect_line(
        "router: UPnP IGD: TCP port 443 outside -> port 443 with a lease",
        Duration::from_secs(10),
    );
    guest.expect_line(
        "router: the ports are mapped by UPnP IGD now, by PCP before",
        Duration::from_secs(10),
    );
    guest.expect_line(
        "public: address 11.0.0.1 (from UPnP IGD)",
        Duration::from_secs(10),
    );
    assert_eq!(dnat_rules(&router), 2);
    visitor_gets_the_page(&wan, &index);
    // A clean shutdown deletes them by SOAP (DeletePortMapping), each answered before the
    // reset; the new boot finds the IGD and maps again.
    guest.send_line("reboot");
    guest.expect_line("router: deleting 2 mapping(s)", Duration::from_secs(10));
    guest.expect_line(
        "router: UPnP IGD: TCP port 443 deleted",
        Duration::from_secs(10),
    );
    guest.expect_line("router: deletions sent in ", Duration::from_secs(10));
    guest.expect_line("rebooting", Duration::from_secs(10));
    assert_eq!(
        dnat_rules(&router),
        0,
        "the UPnP deletions reached miniupnpd; miniupnpd:\n{}",
        std::fs::read_to_string(dir.path().join("miniupnpd-5.log")).unwrap_or_default()
    );
    guest.expect_line(
        "router: UPnP IGD: TCP port 443 outside -> port 443 with a lease",
        BOOT_TIMEOUT + Duration::from_secs(30),
    );
    // The round ends with the external address: only then is UPnP IGD the protocol the
    // ports are mapped by (stopping the router earlier leaves the round unfinished).
    guest.expect_line(
        "public: address 11.0.0.1 (from UPnP IGD)",
        Duration::from_secs(10),
    );
    assert_eq!(dnat_rules(&router), 2);

    // 7. NAT-PMP: the router's PCP over IPv4 dropped on its way in (NAT-PMP is version 0,
    // PCP version 2: the first byte of the datagram), so the guest falls back to NAT-PMP;
    // its deletions at a clean shutdown remove both mappings. The restart's announcement is
    // dropped too: it would have the guest map by UPnP IGD again, its last protocol.
    drop(miniupnpd);
    flush_mappings(&router);
    drop_pcp_over_ipv4(&router);
    quiet_announcements(&router, true);
    let _miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-6.log", true);
    guest.send_line("router again");
    guest.expect_line(
        "router: no PCP answer; trying NAT-PMP",
        Duration::from_secs(15),
    );
    // The mappings held by UPnP IGD are made again by NAT-PMP: a change of protocol, said
    // and counted (the first since the reboot); miniupnpd's restart shows in its NAT-PMP
    // epoch.
    guest.expect_line(
        "router: NAT-PMP: TCP 11.0.0.1:443 -> port 443",
        Duration::from_secs(15),
    );
    guest.expect_line(
        "router: the ports are mapped by NAT-PMP now, by UPnP IGD before",
        Duration::from_secs(10),
    );
    guest.send_line("router");
    let line = guest.expect_line("status: router ", Duration::from_secs(10));
    assert!(
        line.contains("NAT-PMP via 192.168.77.1: 11.0.0.1:80->80,:443->443")
            && line.contains(", protocol changes 1"),
        "{line}"
    );
    quiet_announcements(&router, false);
    assert_eq!(dnat_rules(&router), 2);
    visitor_gets_the_page(&wan, &index);
    guest.send_line("reboot");
    guest.expect_line("router: deleting 2 mapping(s)", Duration::from_secs(10));
    guest.expect_line("router: deletions sent in ", Duration::from_secs(10));
    guest.expect_line("rebooting", Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(5);
    while dnat_rules(&router) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        dnat_rules(&router),
        0,
        "the NAT-PMP deletions reached miniupnpd; miniupnpd:\n{}",
        std::fs::read_to_string(dir.path().join("miniupnpd-6.log")).unwrap_or_default()
    );
}

/// The name the card keeps on the home's public address (the test certificate's wildcard,
/// `*.bramble.test`, covers it), in the zone knotd serves.
const NAME: &str = "porch.bramble.test";
const ZONE: &str = "bramble.test";
/// knotd's address in the "internet": the owner's name server.
const WAN_KNOT: &str = "11.0.0.3";
/// The router's public address after the provider renumbered it.
const WAN_RENUMBERED: &str = "11.0.0.9";
/// The TSIG secret knotd and the card share (base64 of 32 bytes).
const TSIG_SECRET: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

/// The visitor's fetch of `scheme://NAME/` at `address`, the answer kdig gave (curl's
/// `--resolve`), trusting the test CA: the body, or `None` when it fails.
fn fetch_by_name(wan: &Wan, scheme: &str, address: &str, seconds: u32) -> Option<Vec<u8>> {
    let port = if scheme == "https" { 443 } else { 80 };
    let output = wan
        .command("curl")
        .args(["--silent", "--fail", "--max-time", &seconds.to_string()])
        .arg("--cacert")
        .arg(fixture("ca.pem"))
        .args(["--resolve", &format!("{NAME}:{port}:{address}")])
        .arg(format!("{scheme}://{NAME}/"))
        .stdin(Stdio::null())
        .output()
        .expect("curl (tools/setup.sh installs it)");
    output.status.success().then_some(output.stdout)
}

/// The visitor, by name: asks knotd for NAME's A record until it is `expected`, then fetches
/// the page over HTTP and HTTPS at the address in that answer, trying again until both give
/// `index` or `deadline` passes. Returns when the name answered and when both fetches did.
fn visit_by_name(
    wan: &Wan,
    expected: &str,
    index: &[u8],
    deadline: Instant,
) -> Option<(Instant, Instant)> {
    let in_wan = |program: &str| wan.command(program);
    let mut answered = None;
    while Instant::now() < deadline {
        let records = netns::knot::lookup(&in_wan, WAN_KNOT, NAME, "A");
        let [answer] = records.as_slice() else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        if answer != expected {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let resolved_at = *answered.get_or_insert_with(Instant::now);
        if ["http", "https"]
            .iter()
            .all(|scheme| fetch_by_name(wan, scheme, answer, 10).as_deref() == Some(index))
        {
            return Some((resolved_at, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    None
}

/// Drops the router's own datagrams to 224.0.0.1:5350 (`quiet`), as a restart's
/// announcement lost on the LAN is; or lets them through again. The rule counts what it
/// dropped.
fn quiet_announcements(router: &Netns, quiet: bool) {
    if quiet {
        for args in [
            &["add", "table", "inet", "quiet"][..],
            &[
                "add", "chain", "inet", "quiet", "output", "{", "type", "filter", "hook", "output",
                "priority", "0", ";", "}",
            ],
            &[
                "add",
                "rule",
                "inet",
                "quiet",
                "output",
                "ip",
                "daddr",
                "224.0.0.1",
                "udp",
                "dport",
                "5350",
                "counter",
                "drop",
            ],
        ] {
            run(router.command("nft").args(args));
        }
    } else {
        run(router
            .command("nft")
            .args(["delete", "table", "inet", "quiet"]));
    }
}

/// The guest's uptime in a console line's time stamp (`[   12.345678 ...]`), for the
/// figures the test prints: `12.3 s`, or `?`.
fn guest_uptime(line: &str) -> String {
    line.split('[')
        .nth(1)
        .and_then(|rest| rest.split([' ', ']']).find(|s| !s.is_empty()))
        .and_then(|stamp| stamp.parse::<f64>().ok())
        .map_or_else(|| "?".to_string(), |seconds| format!("{seconds:.1} s"))
}

#[test]
fn a_visitor_fetches_the_page_by_name_after_boot_a_router_restart_and_a_renumbering() {
    let dir = tempfile::tempdir().unwrap();
    let router = Netns::create();
    let wan = Wan::create(&router);
    run(router
        .command("ip")
        .args(["addr", "add", &format!("{WAN_ROUTER}/24"), "dev", "wan0"]));
    // The owner's name server, on the internet side.
    run(Command::new("ip").args([
        "-n",
        &wan.name,
        "addr",
        "add",
        &format!("{WAN_KNOT}/24"),
        "dev",
        "eth0",
    ]));
    let in_wan = |program: &str| wan.command(program);
    let _knot = netns::knot::start_knot(&in_wan, WAN_KNOT, ZONE, dir.path(), TSIG_SECRET, 0);
    router_firewall(&router);
    let mut miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-1.log", true);
    // The time, from the router (TSIG signs it).
    let _sntp = netns::sntp::Sntp::start(&router);

    let settings = format!(
        "address = {GUEST}/24\ngateway = 192.168.77.1\nhostname = porch\n\
         ntp = 192.168.77.1\nmdns = off\nhttps = on\n\
         router_ports = on\nrouter_lifetime = {LIFETIME}\n\
         ddns = rfc2136\nddns_name = {NAME}\nddns_server = {WAN_KNOT}\n\
         ddns_key = hmac-sha256:{}:{TSIG_SECRET}\nddns_ipv4 = public\n",
        netns::knot::KEY_NAME
    );
    let (card, index) = card_with_site(dir.path(), &settings);
    let args = tap_args(&card);
    let booted = Instant::now();
    let mark = 0;
    let mut qemu = start_bramble_qemu(&router, &args);
    let guest = qemu.guest();
    let knot_log = || netns::knot::logs(dir.path());

    // 8. After boot: mapped, published, and fetched by name from the WAN side.
    let Some((resolved, fetched)) =
        visit_by_name(&wan, WAN_ROUTER, &index, booted + BOOT_TIMEOUT * 2)
    else {
        guest.drain();
        panic!(
            "{NAME} was not fetched by name after boot; serial:\n{}\nknotd:\n{}",
            guest.transcript.join("\n"),
            knot_log()
        );
    };
    let updated = mapped_and_updated(guest, mark, "11.0.0.1");
    println!(
        "after boot: {NAME} answered {WAN_ROUTER} at {:.1} s, fetched at {:.1} s (wall); \
         the guest confirmed the update at {} of uptime",
        (resolved - booted).as_secs_f64(),
        (fetched - booted).as_secs_f64(),
        guest_uptime(&updated)
    );
    assert_eq!(
        netns::knot::updates_applied(dir.path()),
        1,
        "one update at boot"
    );

    // 9. The router restarts and forgets: the visitor, resolving the same answer, is refused;
    // within one renewal interval it gets the page again, and the name needs no update.
    drop(miniupnpd);
    flush_mappings(&router);
    let answer = netns::knot::lookup(&in_wan, WAN_KNOT, NAME, "A");
    assert_eq!(
        answer,
        [WAN_ROUTER],
        "the name stays while the router is down"
    );
    assert!(
        fetch_by_name(&wan, "http", &answer[0], 3).is_none(),
        "nothing is forwarded once the router forgot"
    );
    guest.drain();
    let mark = guest.transcript.len();
    let restarted = Instant::now();
    miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-2.log", true);
    let renewal = Duration::from_secs(LIFETIME / 2);
    let Some((_, fetched)) = visit_by_name(&wan, WAN_ROUTER, &index, restarted + renewal) else {
        guest.drain();
        panic!(
            "{NAME} was not fetched by name within one renewal interval of the router's \
             restart; serial:\n{}",
            guest.transcript.join("\n")
        );
    };
    let announced = printed_since(
        guest,
        mark,
        "router: the router announced a restart (PCP ANNOUNCE); mapping the ports again",
        SAID,
    );
    printed_since(
        guest,
        mark,
        "router: PCP: TCP 11.0.0.1:443 -> port 443",
        SAID,
    );
    println!(
        "after the router's restart: fetched by name {:.1} s (wall) later; the guest heard the \
         ANNOUNCE at {} of uptime",
        (fetched - restarted).as_secs_f64(),
        guest_uptime(&announced)
    );
    assert_eq!(
        netns::knot::updates_applied(dir.path()),
        1,
        "the same address is not sent again"
    );

    // 10. The router restarts and its announcement is lost: the renewal, at most one renewal
    // interval after the last mapping, finds the mappings gone and makes them again. The
    // restart comes 20 s after the router's last answer: its epoch at the renewal is then
    // 20 s short of what the guest expects, more than the 1/8 of the time passed plus 2 s
    // that RFC 6887 (section 8.5) allows for clock drift, so the guest can tell (a restart
    // within about 10 s of the last answer looks like none: the renewal maps all the same).
    std::thread::sleep(Duration::from_secs(20));
    drop(miniupnpd);
    flush_mappings(&router);
    quiet_announcements(&router, true);
    assert!(
        fetch_by_name(&wan, "http", &answer[0], 3).is_none(),
        "nothing is forwarded once the router forgot"
    );
    guest.drain();
    let mark = guest.transcript.len();
    let restarted = Instant::now();
    miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-3.log", true);
    // The polls' own pace (kdig, two fetches, a pause) on top of the interval.
    let slack = Duration::from_secs(5);
    let Some((_, fetched)) = visit_by_name(&wan, WAN_ROUTER, &index, restarted + renewal + slack)
    else {
        guest.drain();
        panic!(
            "{NAME} was not fetched by name within one renewal interval of a silent restart; \
             serial:\n{}",
            guest.transcript.join("\n")
        );
    };
    let dropped = run(router
        .command("nft")
        .args(["list", "chain", "inet", "quiet", "output"]));
    assert!(
        !dropped.contains("counter packets 0 "),
        "the restart was announced after all:\n{dropped}"
    );
    guest.drain();
    assert!(
        !guest.transcript[mark..]
            .iter()
            .any(|line| line.contains("announced a restart")),
        "the guest heard no announcement"
    );
    // The renewal's reply showed the restart (its epoch went back): said and counted as
    // the announced one was.
    printed_since(
        guest,
        mark,
        "router: the router restarted (its PCP epoch went back); mapping the ports again",
        SAID,
    );
    guest.send_line("router");
    let line = guest.expect_line("status: router ", Duration::from_secs(10));
    assert!(line.contains(", router restarts 2,"), "{line}");
    quiet_announcements(&router, false);
    println!(
        "after a silent restart of the router: fetched by name {:.1} s (wall) later, by the \
         renewal",
        (fetched - restarted).as_secs_f64()
    );
    assert_eq!(
        netns::knot::updates_applied(dir.path()),
        1,
        "the same address is not sent again"
    );

    // 11. The provider renumbers the router (another public address, miniupnpd restarted on
    // it): the next mapping reports the new address, the A record follows in exactly one
    // update, and the visitor fetches by name at the new address.
    drop(miniupnpd);
    flush_mappings(&router);
    set_wan_address(&router, &format!("{WAN_RENUMBERED}/24"));
    guest.drain();
    let mark = guest.transcript.len();
    let renumbered = Instant::now();
    let _miniupnpd = start_miniupnpd(&router, dir.path(), "miniupnpd-4.log", true);
    let Some((resolved, fetched)) = visit_by_name(
        &wan,
        WAN_RENUMBERED,
        &index,
        renumbered + renewal + Duration::from_secs(30),
    ) else {
        guest.drain();
        panic!(
            "{NAME} was not fetched at the new address; serial:\n{}\nknotd:\n{}",
            guest.transcript.join("\n"),
            knot_log()
        );
    };
    let updated = mapped_and_updated(guest, mark, "11.0.0.9");
    println!(
        "after the renumbering: {NAME} answered {WAN_RENUMBERED} {:.1} s (wall) later, fetched \
         {:.1} s later; the guest confirmed the update at {} of uptime",
        (resolved - renumbered).as_secs_f64(),
        (fetched - renumbered).as_secs_f64(),
        guest_uptime(&updated)
    );
    guest.send_line("status");
    let line = guest.expect_line("status: ddns", Duration::from_secs(10));
    let status = bramble_status::Ddns::parse(&line).unwrap_or_else(|| panic!("{line}"));
    assert_eq!(status.ipv4.as_str(), WAN_RENUMBERED, "{line}");
    assert_eq!((status.updates, status.failures), (2, 0), "{line}");
    assert_eq!(
        netns::knot::updates_applied(dir.path()),
        2,
        "exactly one update for the new address"
    );
}
