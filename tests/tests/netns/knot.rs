//! Debian's Knot DNS as the owner's name server in a test namespace: knotd authoritative for
//! one zone, taking updates signed with one TSIG key (hmac-sha256, `bramble-key`), and kdig
//! asking it. Shared by ddns.rs (knotd on the TAP link) and reachability.rs (knotd on the
//! "internet" side of the home router).

use super::Daemon;
use super::ipv6::InNamespace;
use std::path::Path;
use std::time::{Duration, Instant};

/// The TSIG key's name, as the card's `ddns_key` names it.
pub const KEY_NAME: &str = "bramble-key";

/// knotd on `listen` (an IPv4 address, port 53), serving `zone` and taking updates signed
/// with [`KEY_NAME`] (`secret`, base64); the zone file and its journal stay in `dir` across
/// restarts. `generation` numbers the configuration and the log (`knotN.log`, read by
/// [`updates_applied`]).
pub fn start_knot(
    in_namespace: InNamespace,
    listen: &str,
    zone: &str,
    dir: &Path,
    secret: &str,
    generation: u32,
) -> Daemon {
    let file = format!("{zone}.zone");
    let path = dir.join(&file);
    if !path.exists() {
        std::fs::write(
            &path,
            format!(
                "$TTL 60\n@ SOA ns.{zone}. admin.{zone}. 1 60 60 600 60\n\
                 @ NS ns.{zone}.\nns A {listen}\n"
            ),
        )
        .unwrap();
    }
    let config = dir.join(format!("knot{generation}.conf"));
    std::fs::write(
        &config,
        format!(
            "server:\n    listen: {listen}@53\n    rundir: {dir}\n\
             key:\n  - id: {KEY_NAME}\n    algorithm: hmac-sha256\n    secret: {secret}\n\
             acl:\n  - id: update\n    key: {KEY_NAME}\n    action: update\n\
             template:\n  - id: default\n    storage: {dir}\n\
             zone:\n  - domain: {zone}\n    file: {file}\n    acl: update\n\
             log:\n  - target: stderr\n    any: info\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    let log = dir.join(format!("knot{generation}.log"));
    let mut command = in_namespace("knotd");
    command.arg("-c").arg(&config);
    let knot = Daemon::start(command, &log);
    super::wait_for(
        || std::fs::read_to_string(&log).is_ok_and(|text| text.contains("server started")),
        Duration::from_secs(20),
        "knotd to start",
    );
    knot
}

/// The updates knotd applied, by its logs (`DDNS, finished`), across its restarts.
pub fn updates_applied(dir: &Path) -> usize {
    (0..3)
        .map(|generation| {
            std::fs::read_to_string(dir.join(format!("knot{generation}.log")))
                .unwrap_or_default()
                .matches("DDNS, finished")
                .count()
        })
        .sum()
}

/// knotd's logs so far, for failure messages.
pub fn logs(dir: &Path) -> String {
    (0..3)
        .map(|g| std::fs::read_to_string(dir.join(format!("knot{g}.log"))).unwrap_or_default())
        .collect()
}

/// kdig's answer from `server` for `name type`: the records' data, sorted (empty when there
/// is none or no answer within kdig's two tries of 2 s).
pub fn lookup(
    in_namespace: InNamespace,
    server: &str,
    name: &str,
    record_type: &str,
) -> Vec<String> {
    let output = in_namespace("kdig")
        .args([
            &format!("@{server}"),
            "+short",
            "+time=2",
            "+retry=1",
            name,
            record_type,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("kdig (Debian package knot-dnsutils, installed by tools/setup.sh)");
    let mut records: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim().to_string())
        .filter(|line| !line.is_empty())
        .collect();
    records.sort();
    records
}

/// Asks `server` for `name type` until the answer is one record other than `not` (bounded by
/// `limit`); returns it and when it came, or `None`.
pub fn wait_for_answer(
    in_namespace: InNamespace,
    server: &str,
    name: &str,
    record_type: &str,
    not: Option<&str>,
    limit: Duration,
) -> Option<(String, Instant)> {
    let deadline = Instant::now() + limit;
    loop {
        let records = lookup(in_namespace, server, name, record_type);
        if let [record] = records.as_slice()
            && Some(record.as_str()) != not
        {
            return Some((record.clone(), Instant::now()));
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
