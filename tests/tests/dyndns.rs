//! dyndns2 over HTTPS (issue 29) on the real kernel: `bramble qemu --image CARD --tap tap0` in
//! a network namespace where `tests/dyndns_endpoint.py` plays the dyndns2 provider
//! (`/nic/update`, Basic authentication, `good`/`nochg`/`badauth` as the protocol answers), the
//! IPv4 echo service (`/ip`, whose answer the test changes) and the outside checker
//! (`/check`), over HTTPS with a Let's Encrypt-shaped chain (RSA root, intermediate, leaf)
//! this test makes, whose root goes on the card as `acme_ca_certificate`. radvd announces an IPv6 prefix (the AAAA record), an
//! SNTP responder gives the time (the certificate is checked against it). One boot checks,
//! in turn:
//!
//! 1. the name gets A (the echo's address) and AAAA (the SLAAC address), and the outside
//!    check runs after the update;
//! 2. the echo answering another address gives exactly one more update, and the echo asked
//!    again with the same answer gives none (the endpoint would answer `nochg` to a repeat);
//! 3. with the provider answering `badauth`, the next change is sent once, and the one after
//!    it is not sent at all; the status line says updates stopped.
//!
//! No packet leaves the namespace.

mod netns;

use bramble_testkit::chain::{ChainShape, make_chain};
use netns::ipv6::{add_address, advertise_prefix};
use netns::sntp::Sntp;
use netns::tool::{BrambleQemu, card_image, start_bramble_qemu, tap_args};
use netns::{Daemon, HOST_ADDRESS, Netns, TAP, wait_for};
use std::net::Ipv6Addr;
use std::path::Path;
use std::time::Duration;

bramble_qemu_helper!();

/// The guest's fixed IPv4 address (private: the echo's answer is what gets published).
const GUEST: &str = "192.168.77.50";
/// The name the guest keeps up to date.
const NAME: &str = "board.home.test";
/// The endpoint's port.
const PORT: u16 = 8443;
/// The prefix radvd announces.
const PREFIX: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x77, 1, 0, 0, 0, 0);
/// The public addresses the echo answers in turn (documentation ranges: the guest accepts
/// them as public).
const FIRST: &str = "203.0.113.7";
const SECOND: &str = "198.51.100.20";
const THIRD: &str = "198.51.100.30";
const FOURTH: &str = "198.51.100.40";
/// Bound on each phase: the echo is asked every minute (`public_ip_every = 1`), the guest
/// waits 5 s of quiet before it sends.
const PHASE: Duration = Duration::from_secs(100);

/// What the endpoint saw, one entry a request (`ip`, `check`, `update AUTH QUERY ANSWER`).
fn requests(state: &Path) -> Vec<String> {
    std::fs::read_to_string(state.join("requests.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The update requests among them.
fn updates(state: &Path) -> Vec<String> {
    requests(state)
        .into_iter()
        .filter(|line| line.starts_with("update "))
        .collect()
}

/// How many times the echo was asked.
fn echoes(state: &Path) -> usize {
    requests(state).iter().filter(|line| *line == "ip").count()
}

/// Waits for the echo to be asked once more than `seen` times, then for a settle time and
/// a little over: whatever the guest would send on that answer has been sent by then.
fn wait_for_another_echo(state: &Path, seen: usize) {
    wait_for(|| echoes(state) > seen, PHASE, "further echo request");
    std::thread::sleep(Duration::from_secs(10));
}

#[test]
fn dyndns2_updates_once_per_change_and_badauth_stops_them() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("echo"), FIRST).unwrap();
    let netns = Netns::create();
    add_address(
        &|program: &str| netns.command(program),
        TAP,
        "2001:db8:77:1::1/64",
    );
    let _sntp = Sntp::start(&netns);
    // The shape of Let's Encrypt's R-series chains, as the providers present.
    let chain = make_chain(
        dir,
        ChainShape::Rsa,
        "dyn",
        "dyn",
        &format!("IP:{HOST_ADDRESS}"),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/dyndns_endpoint.py");
    let endpoint_log = dir.join("endpoint.log");
    let mut command = netns.command("python3");
    command
        .arg(&script)
        .arg(HOST_ADDRESS.to_string())
        .arg(PORT.to_string())
        .arg(&chain.presented)
        .arg(&chain.key)
        .arg(&state);
    let _endpoint = Daemon::start(command, &endpoint_log);
    wait_for(
        || std::fs::read_to_string(&endpoint_log).is_ok_and(|log| log.contains("listening")),
        Duration::from_secs(20),
        "endpoint listening",
    );

    let base = format!("https://{HOST_ADDRESS}:{PORT}");
    let settings = format!(
        "address = {GUEST}/24\ngateway = {HOST_ADDRESS}\nntp = {HOST_ADDRESS}\n\
         acme_ca_certificate = DYNCA.PEM\n\
         ddns = dyndns2\nddns_name = {NAME}\nddns_url = {base}/nic/update\n\
         ddns_user = owner\nddns_password = s3cret\n\
         public_ip_url = {base}/ip\npublic_ip_every = 1\nreach_check_url = {base}/check\n"
    );
    let (card, _) = card_image(dir, &settings, Some(&dir.join("ca.pem")));
    let args = tap_args(&card);
    let mut guest = start_bramble_qemu(&netns, &args);
    let in_namespace = |program: &str| netns.command(program);
    let _radvd = advertise_prefix(&in_namespace, dir, TAP, PREFIX);
    let fail = |guest: &BrambleQemu, what: &str| -> ! {
        panic!(
            "{what}; serial:\n{}\nendpoint saw:\n{}\nendpoint log:\n{}",
            guest.transcript.join("\n"),
            requests(&state).join("\n"),
            std::fs::read_to_string(&endpoint_log).unwrap_or_default()
        )
    };
    let updated = |address: &'static str| {
        move |line: &str| line.contains("dyndns: board.home.test updated") && line.contains(address)
    };

    // 1. A from the echo and AAAA from SLAAC (perhaps in two updates, if SLAAC settles
    // before the echo answers), then the outside check.
    let both =
        |line: &str| updated(FIRST)(line) && line.contains(&format!("AAAA {}", "2001:db8:77:1:"));
    if guest.wait_for(both, PHASE).is_none() {
        fail(
            &guest,
            "no update with the echo's address and the SLAAC address",
        );
    }
    if guest
        .wait_for(
            |line| line.contains("reach: the outside check reached the page"),
            PHASE,
        )
        .is_none()
    {
        fail(&guest, "no outside check after the update");
    }
    let boot_updates = updates(&state);

    // 2. Another public address: exactly one more update; the same answer again, none.
    let seen = echoes(&state);
    std::fs::write(state.join("echo"), SECOND).unwrap();
    if guest.wait_for(updated(SECOND), PHASE).is_none() {
        fail(&guest, "no update after the echo's address changed");
    }
    wait_for_another_echo(&state, seen + 1);
    let sent = updates(&state);
    let second: Vec<&String> = sent
        .iter()
        .filter(|line| line.contains(&format!("myip={SECOND}")))
        .collect();
    if second.len() != 1 || sent.len() != boot_updates.len() + 1 {
        fail(&guest, "not exactly one update for the new address");
    }
    // Every update carried what the provider did not hold yet, with the credentials.
    for line in &sent {
        if !line.starts_with("update ok ") || !line.ends_with(" good") {
            fail(
                &guest,
                &format!("an update that was not needed, or refused: {line}"),
            );
        }
    }

    // 3. The provider refuses the credentials: that change is sent once, the next not at all.
    std::fs::write(state.join("mode"), "badauth").unwrap();
    std::fs::write(state.join("echo"), THIRD).unwrap();
    let Some(refused) =
        guest.wait_for(|line| line.contains("dyndns: the provider answered"), PHASE)
    else {
        fail(&guest, "no refusal logged");
    };
    assert!(
        refused.contains("answered badauth for board.home.test")
            && refused.contains("no more updates"),
        "{refused}"
    );
    let seen = echoes(&state);
    std::fs::write(state.join("echo"), FOURTH).unwrap();
    wait_for_another_echo(&state, seen);
    let after = updates(&state);
    if after.len() != sent.len() + 1
        || !after[sent.len()].contains(&format!("myip={THIRD}"))
        || after.iter().any(|line| line.contains(FOURTH))
    {
        fail(&guest, "updates went on after badauth");
    }

    guest.send_line("status");
    let line = guest.expect_line("status: dyndns", Duration::from_secs(20));
    let status = bramble_status::Dyndns::parse(&line).unwrap_or_else(|| panic!("{line}"));
    assert_eq!(status.ipv4.as_str(), SECOND, "{line}");
    assert_eq!(status.last_answer.as_str(), "badauth", "{line}");
    assert!(
        status.state.as_str().starts_with("stopped by badauth"),
        "{line}"
    );
    assert_eq!(status.updates as usize, sent.len(), "{line}");
    let line = guest.expect_line("status: reach", Duration::from_secs(20));
    let reach = bramble_status::Reach::parse(&line).unwrap_or_else(|| panic!("{line}"));
    assert_eq!(reach.public.as_str(), FOURTH, "{line}");
    assert_eq!(reach.source.as_str(), "echo", "{line}");
    assert_eq!(reach.check.as_str(), "reachable", "{line}");
}
