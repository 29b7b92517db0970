//! `attack`: the five attacks of issue 12 against any server, one after the other, each
//! measured by a polite client (the attack suite's code, `bramble_tests::attack`), so that
//! another server (nginx on 127.0.0.1) is measured exactly as Bramble is; prints one line
//! per attack: the polite client's success rate and worst answer, and what the attacker did.
//!
//! ```text
//! attack TARGET BIG_PATH [--attacks NAME,...] [--polite N] [--ramp SECONDS]
//!        [--syn-rate N] [--slow-connections N]
//! ```
//! e.g. `attack 127.0.0.1:8080 /big.bin --polite 40`. NAME is one of mixed, syn-flood,
//! slowloris, slow-read, keep-alive (default: all, in that order). The SYN flood needs
//! Debian's hping3 and root, slowloris and slow read Debian's slowhttptest. Every attack is
//! bounded in time (its ramp, the polite requests at 0.5 s each, 10 s of slack); the tools
//! are killed by their PIDs when their measurement ends. Exits 1 if any attack left the
//! polite client served less than 99% of the time or the page unreachable afterwards.

use bramble_tests::attack::{self, Attack, AttackPlan};
use bramble_tests::hoard::Polite;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: attack TARGET BIG_PATH [--attacks NAME,...] [--polite N] \
                     [--ramp SECONDS] [--syn-rate N] [--slow-connections N]\n\
                     attacks: mixed, syn-flood, slowloris, slow-read, keep-alive (default: all)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.len() < 2 {
        eprintln!("{USAGE}");
        return ExitCode::FAILURE;
    }
    let target: SocketAddr = match args[0].parse() {
        Ok(target) => target,
        Err(error) => {
            eprintln!("attack: {:?}: {error}", args[0]);
            return ExitCode::FAILURE;
        }
    };
    let mut plan = AttackPlan::new(target, &args[1]);
    let mut attacks = Attack::ALL.to_vec();
    let mut rest = args[2..].iter();
    while let Some(flag) = rest.next() {
        let Some(value) = rest.next() else {
            eprintln!("attack: {flag} needs a value");
            return ExitCode::FAILURE;
        };
        let ok = match flag.as_str() {
            "--attacks" => {
                let named: Option<Vec<Attack>> = value.split(',').map(Attack::from_name).collect();
                named.map(|named| attacks = named).is_some()
            }
            "--polite" => value.parse().map(|n| plan.polite_count = n).is_ok(),
            "--ramp" => value
                .parse::<u64>()
                .map(|s| plan.ramp = Duration::from_secs(s))
                .is_ok(),
            "--syn-rate" => value
                .parse::<u32>()
                .map(|n| plan.syn_rate = n.clamp(1, 100_000))
                .is_ok(),
            "--slow-connections" => value
                .parse::<u32>()
                .map(|n| plan.slow_connections = n.clamp(1, 10_000))
                .is_ok(),
            _ => false,
        };
        if !ok {
            eprintln!("attack: bad {flag} {value:?}\n{USAGE}");
            return ExitCode::FAILURE;
        }
    }
    if plan.polite_count == 0 || plan.polite_count > 1_000 {
        eprintln!("attack: --polite must be 1 to 1000");
        return ExitCode::FAILURE;
    }
    let mut all_served = true;
    for attack in attacks {
        let report = attack::run(attack, &plan);
        println!("{}", report.summary());
        for failure in &report.polite.failures {
            println!("  polite request failed: {failure}");
        }
        // Served normally afterwards: one polite request on a fresh connection.
        std::thread::sleep(Duration::from_secs(1));
        let after = Polite::new(target, &plan.polite_path).run(1);
        if after.served != 1 {
            println!(
                "  after {}: not served ({:?})",
                attack.name(),
                after.failures
            );
        }
        all_served &=
            after.served == 1 && report.polite.served * 100 >= report.polite.attempts * 99;
    }
    if all_served {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
