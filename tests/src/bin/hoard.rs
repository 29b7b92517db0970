//! `hoard`: the mixed hoarding load of issue 12 against any server, from one process, with a
//! polite client alongside; prints the polite client's success rate and worst answer.
//!
//! ```text
//! hoard TARGET BIG_PATH [--polite N] [--counts SILENT,SLOW,NEVER_READ,KEEP_ALIVE]
//!       [--ramp SECONDS] [--source ADDR]
//! ```
//! e.g. `hoard 127.0.0.1:8080 /big.bin --polite 120`: 300 silent connections, 300 sending a
//! header one byte every 5 s, 100 asking for /big.bin and never reading, 300 idle keep-alive
//! connections, each re-opened when closed; after the ramp (default 20 s) the polite client
//! asks for `/` every 0.5 s, N times (default 120), each answer bounded by 3 s.

use bramble_tests::hoard::{Hoard, HoardPlan, Polite};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 || args.iter().any(|a| a == "--help" || a == "-h") {
        eprintln!(
            "usage: hoard TARGET BIG_PATH [--polite N] [--counts S,H,N,K] [--ramp SECONDS] \
             [--source ADDR]"
        );
        return if args.iter().any(|a| a == "--help" || a == "-h") {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let target: SocketAddr = match args[0].parse() {
        Ok(target) => target,
        Err(error) => {
            eprintln!("hoard: {:?}: {error}", args[0]);
            return ExitCode::FAILURE;
        }
    };
    let mut plan = HoardPlan::mixed(target, &args[1]);
    let mut polite_count = 120u64;
    let mut ramp = Duration::from_secs(20);
    let mut rest = args[2..].iter();
    while let Some(flag) = rest.next() {
        let Some(value) = rest.next() else {
            eprintln!("hoard: {flag} needs a value");
            return ExitCode::FAILURE;
        };
        let ok = match flag.as_str() {
            "--polite" => value.parse().map(|n| polite_count = n).is_ok(),
            "--ramp" => value
                .parse::<u64>()
                .map(|s| ramp = Duration::from_secs(s))
                .is_ok(),
            "--source" => value
                .parse::<Ipv4Addr>()
                .map(|a| plan.source = Some(a))
                .is_ok(),
            "--counts" => {
                let counts: Vec<usize> = value.split(',').filter_map(|c| c.parse().ok()).collect();
                if counts.len() == 4 {
                    plan.counts.copy_from_slice(&counts);
                    true
                } else {
                    false
                }
            }
            _ => false,
        };
        if !ok {
            eprintln!("hoard: bad {flag} {value:?}");
            return ExitCode::FAILURE;
        }
    }
    let source = plan.source;
    let hoard = Hoard::start(plan);
    eprintln!("hoard: ramping up for {} s", ramp.as_secs());
    std::thread::sleep(ramp);
    let mut polite = Polite::new(target, "/");
    polite.source = source;
    let report = polite.run(polite_count);
    let stats = hoard.stop();
    println!("{}", report.summary());
    for failure in &report.failures {
        println!("  failed: {failure}");
    }
    println!("hoard: {}", stats.summary());
    ExitCode::SUCCESS
}
