//! Dynamic DNS (issue 29) on the real kernel, against Debian's Knot DNS: `bramble qemu --image
//! CARD --tap tap0` in a network namespace where knotd serves the zone `home.test` and takes
//! updates signed with one TSIG key, radvd announces an IPv6 prefix, and an SNTP responder of
//! this test gives the time (TSIG signs it). The card's BRAMBLE.TXT says `ddns = rfc2136` for
//! `board.home.test` with the key, `ddns_ipv4 = interface`. One boot checks, in turn:
//!
//! 1. the A and AAAA records appear (kdig asks knotd), in one update;
//! 2. a renumbering (radvd deprecates the prefix and announces another) gives exactly one
//!    more update, with the new AAAA;
//! 3. with knotd restarted under another secret for the key, the next renumbering gives the
//!    documented error on the console (`the server refused our signature: NOTAUTH/BADSIG`)
//!    and leaves the records as they were.
//!
//! A second boot obtains a certificate for `board.home.test` and `*.board.home.test` from
//! Debian's pebble by DNS-01 (`acme_challenge = dns-01`): the guest puts each answer up as a
//! TXT record at `_acme-challenge.board.home.test` through the same signed updates, pebble
//! (`-dnsserver` pointing at knotd) finds them, and the guest then serves HTTPS that curl
//! verifies for a name under the wildcard; the TXT records are gone afterwards.
//!
//! No packet leaves the namespace.

mod netns;

use bramble_testkit::pebble::{ApiChain, make_ca};
use netns::ipv6::{Prefix, Radvd, add_address, radvd_config, wait_for_link_local};
use netns::knot::{self, updates_applied};
use netns::sntp::Sntp;
use netns::tool::{card_image, start_bramble_qemu, tap_args};
use netns::{Daemon, HOST_ADDRESS, Netns, TAP, wait_for};
use std::net::Ipv6Addr;
use std::path::Path;
use std::time::Duration;

bramble_qemu_helper!();

/// The guest's fixed IPv4 address, published as A (`ddns_ipv4 = interface`).
const GUEST: &str = "192.168.77.50";
/// The name the guest keeps up to date, in the zone knotd serves.
const NAME: &str = "board.home.test";
/// The key's secret (base64 of 32 bytes), and the other one knotd is restarted with.
const SECRET: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const OTHER_SECRET: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
/// The prefixes radvd announces in turn.
const PREFIXES: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0x2001, 0xdb8, 0x77, 1, 0, 0, 0, 0),
    Ipv6Addr::new(0x2001, 0xdb8, 0x77, 2, 0, 0, 0, 0),
    Ipv6Addr::new(0x2001, 0xdb8, 0x77, 3, 0, 0, 0, 0),
];
/// Bound on each phase: RAs come every 3-4 s, DAD takes a second, the guest waits 5 s of
/// quiet before it sends.
const PHASE: Duration = Duration::from_secs(40);

/// knotd serving `home.test` on the namespace's address (the zone and its journal stay in
/// `dir` across restarts).
fn start_knot(netns: &Netns, dir: &Path, secret: &str, generation: u32) -> Daemon {
    let in_namespace = |program: &str| netns.command(program);
    let listen = HOST_ADDRESS.to_string();
    knot::start_knot(&in_namespace, &listen, "home.test", dir, secret, generation)
}

/// kdig's answer for `NAME TYPE` from knotd: the records' data, sorted.
fn lookup(netns: &Netns, record_type: &str) -> Vec<String> {
    let in_namespace = |program: &str| netns.command(program);
    knot::lookup(&in_namespace, &HOST_ADDRESS.to_string(), NAME, record_type)
}

fn prefix(prefix: Ipv6Addr, preferred: u32) -> Prefix {
    Prefix {
        prefix,
        valid: 600,
        preferred,
    }
}

/// Whether `address` (text) lies in the /64 `prefix`.
fn in_prefix(address: &str, prefix: Ipv6Addr) -> bool {
    address
        .parse::<Ipv6Addr>()
        .is_ok_and(|a| a.segments()[..4] == prefix.segments()[..4])
}

#[test]
fn rfc2136_updates_follow_the_addresses_once_each_and_a_wrong_key_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let netns = Netns::create();
    add_address(
        &|program: &str| netns.command(program),
        TAP,
        "2001:db8:77:1::1/64",
    );
    let _sntp = Sntp::start(&netns);
    let knot = start_knot(&netns, dir, SECRET, 0);

    let settings = format!(
        "address = {GUEST}/24\ngateway = {HOST_ADDRESS}\nntp = {HOST_ADDRESS}\n\
         ddns = rfc2136\nddns_name = {NAME}\nddns_server = {HOST_ADDRESS}\n\
         ddns_key = hmac-sha256:bramble-key:{SECRET}\nddns_ipv4 = interface\n"
    );
    let (card, _) = card_image(dir, &settings, None);
    let args = tap_args(&card);
    let mut guest = start_bramble_qemu(&netns, &args);
    // The TAP link has a carrier (and radvd a link-local source) once QEMU holds it.
    let in_namespace = |program: &str| netns.command(program);
    wait_for_link_local(&in_namespace, TAP, Duration::from_secs(10));
    let radvd_phase = |n: usize| -> Radvd {
        // Every earlier prefix deprecated (preferred lifetime 0), prefix n preferred.
        let prefixes: Vec<Prefix> = (0..=n)
            .map(|i| prefix(PREFIXES[i], if i == n { 600 } else { 0 }))
            .collect();
        Radvd::start(
            &in_namespace,
            dir,
            &format!("radvd{n}"),
            &radvd_config(TAP, &prefixes, None),
        )
    };
    let radvd = radvd_phase(0);
    let fail = |guest: &netns::tool::BrambleQemu, what: &str| -> ! {
        panic!(
            "{what}; serial:\n{}\nknotd:\n{}",
            guest.transcript.join("\n"),
            knot::logs(dir)
        )
    };

    // 1. Both records, in one update.
    let Some(updated) =
        guest.wait_for(|line| line.contains("ddns: board.home.test updated"), PHASE)
    else {
        fail(&guest, "no update confirmed after boot");
    };
    assert!(
        updated.contains(&format!("A {GUEST}")) && updated.contains("AAAA 2001:db8:77:1:"),
        "{updated}"
    );
    assert_eq!(lookup(&netns, "A"), [GUEST]);
    let aaaa = lookup(&netns, "AAAA");
    if aaaa.len() != 1 || !in_prefix(&aaaa[0], PREFIXES[0]) {
        fail(&guest, &format!("AAAA after boot: {aaaa:?}"));
    }
    assert_eq!(updates_applied(dir), 1, "one update at boot");

    // 2. Renumbering: exactly one more update, the new AAAA.
    drop(radvd);
    let radvd = radvd_phase(1);
    let Some(updated) = guest.wait_for(
        |line| line.contains("ddns: board.home.test updated") && line.contains("2001:db8:77:2:"),
        PHASE,
    ) else {
        fail(&guest, "no update after the renumbering");
    };
    let aaaa = lookup(&netns, "AAAA");
    if aaaa.len() != 1 || !in_prefix(&aaaa[0], PREFIXES[1]) {
        fail(
            &guest,
            &format!("AAAA after renumbering: {aaaa:?} ({updated})"),
        );
    }
    assert_eq!(lookup(&netns, "A"), [GUEST]);
    // Some RAs later (each repeats the same prefixes), still one update per change.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(updates_applied(dir), 2, "one update per change");

    // 3. knotd now has another secret for the key: the next change is refused, loudly,
    // and the records stay.
    drop(knot);
    let _knot = start_knot(&netns, dir, OTHER_SECRET, 1);
    drop(radvd);
    let _radvd = radvd_phase(2);
    let Some(refused) = guest.wait_for(
        |line| line.contains("ddns: board.home.test not updated"),
        PHASE,
    ) else {
        fail(&guest, "no refusal with the wrong key");
    };
    assert!(
        refused.contains("the server refused our signature: NOTAUTH/BADSIG")
            && refused.contains("trying again in 3600 s"),
        "{refused}"
    );
    let aaaa = lookup(&netns, "AAAA");
    if aaaa.len() != 1 || !in_prefix(&aaaa[0], PREFIXES[1]) {
        fail(&guest, &format!("AAAA after the refused update: {aaaa:?}"));
    }
    assert_eq!(
        updates_applied(dir),
        2,
        "nothing applied with the wrong key"
    );
    guest.send_line("status");
    let line = guest.expect_line("status: ddns", Duration::from_secs(20));
    let status = bramble_status::Ddns::parse(&line).unwrap_or_else(|| panic!("{line}"));
    assert_eq!(status.ipv4.as_str(), GUEST, "{line}");
    assert!(in_prefix(status.ipv6.as_str(), PREFIXES[1]), "{line}");
    assert_eq!((status.updates, status.failures), (2, 1), "{line}");
    assert!(status.last_failure.as_str().contains("BADSIG"), "{line}");
}

#[test]
fn dns01_through_the_same_updates_gets_a_wildcard_certificate_from_pebble() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let netns = Netns::create();
    let _sntp = Sntp::start(&netns);
    let _knot = start_knot(&netns, dir, SECRET, 0);
    // pebble's API presents a chain shaped as Let's Encrypt's P-384 one (ISRG Root X2 over
    // an E-series intermediate), as acme.rs's second test does.
    make_ca(dir, ApiChain::P384, HOST_ADDRESS);
    let pebble_log = dir.join("pebble.log");
    let mut command = netns.command("pebble");
    command
        .env("PEBBLE_VA_NOSLEEP", "1")
        .arg("-config")
        .arg(dir.join("pebble.json"))
        .args(["-dnsserver", &format!("{HOST_ADDRESS}:53")]);
    let _pebble = Daemon::start(command, &pebble_log);
    wait_for(
        || std::fs::read_to_string(&pebble_log).is_ok_and(|log| log.contains("Listening on")),
        Duration::from_secs(20),
        "pebble to listen",
    );
    let root = netns.output(
        "curl",
        &[
            "--silent",
            "--insecure",
            "--max-time",
            "10",
            &format!("https://{HOST_ADDRESS}:15000/roots/0"),
        ],
    );
    assert!(root.status.success(), "pebble's root: {root:?}");
    std::fs::write(dir.join("pebble-root.pem"), &root.stdout).unwrap();

    let settings = format!(
        "address = {GUEST}/24\ngateway = {HOST_ADDRESS}\nntp = {HOST_ADDRESS}\nipv6 = off\n\
         https = on\nacme = on\nacme_challenge = dns-01\n\
         domain = {NAME}, *.{NAME}\nacme_email = owner@home.test\n\
         acme_directory = https://{HOST_ADDRESS}:14000/dir\ncertificate_store = ram\n\
         ddns = rfc2136\nddns_name = {NAME}\nddns_server = {HOST_ADDRESS}\n\
         ddns_key = hmac-sha256:bramble-key:{SECRET}\nddns_ipv4 = interface\n"
    );
    let (card, files) = card_image(dir, &settings, Some(&dir.join("ca.pem")));
    let args = tap_args(&card);
    let mut guest = start_bramble_qemu(&netns, &args);
    let fail = |guest: &netns::tool::BrambleQemu, what: &str| -> ! {
        panic!(
            "{what}; serial:\n{}\npebble:\n{}\nknotd:\n{}",
            guest.transcript.join("\n"),
            std::fs::read_to_string(dir.join("pebble.log")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("knot0.log")).unwrap_or_default()
        )
    };
    if guest
        .wait_for(
            |line| line.contains("acme: certificate issued"),
            Duration::from_secs(240),
        )
        .is_none()
    {
        fail(&guest, "no certificate by DNS-01");
    }
    // Both names were answered by TXT records the name server confirmed.
    let answers = guest
        .transcript
        .iter()
        .filter(|line| line.contains("acme: DNS-01 answer up"))
        .count();
    assert_eq!(answers, 2, "one DNS-01 answer per name");
    // A name under the wildcard, verified against pebble's root.
    let host = format!("www.{NAME}");
    let out = netns.output(
        "curl",
        &[
            "--silent",
            "--fail",
            "--max-time",
            "20",
            "--cacert",
            &dir.join("pebble-root.pem").display().to_string(),
            "--resolve",
            &format!("{host}:443:{GUEST}"),
            &format!("https://{host}/"),
        ],
    );
    if !out.status.success() || out.stdout != files[0].1 {
        fail(&guest, &format!("https://{host}/ did not verify: {out:?}"));
    }
    // The answers are taken down after the order.
    if guest
        .wait_for(
            |line| line.contains("ddns: removing 2 TXT record(s)"),
            Duration::from_secs(20),
        )
        .is_none()
    {
        fail(&guest, "the TXT records were not removed");
    }
    wait_for(
        || {
            let output = netns.output(
                "kdig",
                &[
                    &format!("@{HOST_ADDRESS}"),
                    "+short",
                    &format!("_acme-challenge.{NAME}"),
                    "TXT",
                ],
            );
            output.status.success() && output.stdout.is_empty()
        },
        Duration::from_secs(20),
        "the TXT records to be gone",
    );
}
