//! The attacks of issue 12 against one server, each measured by a polite client: the mixed
//! hoarding load, a SYN flood from one address (Debian's `hping3`), slowloris and slow read
//! (Debian's `slowhttptest`), and 1,000 keep-alive hoarders. Used by the attack tests (the
//! QEMU guest and bramble-hosted in namespaces the tests create) and by the `attack` tool (to
//! measure other servers the same way).
//!
//! External tools run inside the given network namespace through `nsenter`, which execs
//! them: the child's PID is the tool's own, and it is killed by that PID when the
//! measurement ends. Every run is bounded in time; traffic goes only to the target given.

use crate::hoard::{Hoard, HoardPlan, Polite, PoliteReport};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One attack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attack {
    /// 300 silent connections, 300 sending a header one byte every 5 s, 100 never reading a
    /// large file, 300 idle keep-alive connections, each re-opened when closed.
    Mixed,
    /// SYNs from one address with ever-changing source ports, at a fixed rate.
    SynFlood,
    /// slowhttptest -H: many connections each sending an endless header slowly.
    Slowloris,
    /// slowhttptest -X: many connections asking for a large file and reading it a few bytes
    /// at a time through a tiny window.
    SlowRead,
    /// 1,000 connections, each asking once and then sitting idle, re-opened when closed.
    KeepAliveHoard,
}

impl Attack {
    /// Every attack, in the order the tests run them.
    pub const ALL: [Attack; 5] = [
        Attack::Mixed,
        Attack::SynFlood,
        Attack::Slowloris,
        Attack::SlowRead,
        Attack::KeepAliveHoard,
    ];

    /// A short name for reports and the command line.
    pub fn name(self) -> &'static str {
        match self {
            Attack::Mixed => "mixed",
            Attack::SynFlood => "syn-flood",
            Attack::Slowloris => "slowloris",
            Attack::SlowRead => "slow-read",
            Attack::KeepAliveHoard => "keep-alive",
        }
    }

    /// The attack called `name`.
    pub fn from_name(name: &str) -> Option<Attack> {
        Attack::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// How to run the attacks against one server.
#[derive(Clone, Debug)]
pub struct AttackPlan {
    /// The server (over IPv4 or IPv6; the SYN flood is IPv4 only: hping3 has no IPv6).
    pub target: SocketAddr,
    /// A large file on it (the issue's 5 MB file).
    pub big_path: String,
    /// What the polite client asks for.
    pub polite_path: String,
    /// Polite requests per attack (one every 0.5 s; 99% of fewer than 100 allows no
    /// failure).
    pub polite_count: u64,
    /// How long the attack runs before the polite client starts.
    pub ramp: Duration,
    /// SYNs per second of the flood.
    pub syn_rate: u32,
    /// Connections slowhttptest opens.
    pub slow_connections: u32,
    /// The network namespace the external tools run in (`None`: this one).
    pub netns: Option<String>,
    /// The IPv4 address the polite client and the hoards connect from.
    pub source: Option<Ipv4Addr>,
}

impl AttackPlan {
    /// The defaults of the attack tests against `target`.
    pub fn new(target: impl Into<SocketAddr>, big_path: &str) -> AttackPlan {
        AttackPlan {
            target: target.into(),
            big_path: big_path.to_string(),
            polite_path: "/".to_string(),
            polite_count: 40,
            ramp: Duration::from_secs(8),
            syn_rate: 2_000,
            slow_connections: 1_000,
            netns: None,
            source: None,
        }
    }
}

/// What one attack run found.
#[derive(Clone, Debug)]
pub struct AttackReport {
    /// Which attack.
    pub attack: Attack,
    /// The polite client's record.
    pub polite: PoliteReport,
    /// What the attacker did (for the report).
    pub detail: String,
}

impl AttackReport {
    /// One line: attack, success rate, worst answer, attacker detail.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} [{}]",
            self.attack.name(),
            self.polite.summary(),
            self.detail
        )
    }
}

/// An external attack tool, killed by its PID when dropped.
struct Tool {
    child: Child,
    started: std::time::Instant,
}

impl Tool {
    fn start(plan: &AttackPlan, program: &'static str, args: &[String]) -> Tool {
        let mut command = match &plan.netns {
            Some(name) => {
                let mut command = Command::new("nsenter");
                command
                    .arg(format!("--net=/run/netns/{name}"))
                    .arg("--")
                    .arg(program);
                command
            }
            None => Command::new(program),
        };
        let child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot start {program} (Debian package {program}): {error}")
            });
        Tool {
            child,
            started: std::time::Instant::now(),
        }
    }

    /// "" while it runs, else when it ended (slowhttptest ends once the server has
    /// closed every one of its connections).
    fn ended(&mut self) -> String {
        match self.child.try_wait() {
            Ok(None) => String::new(),
            _ => format!(
                " (ended by itself, within {} s)",
                self.started.elapsed().as_secs()
            ),
        }
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        // Child::kill sends SIGKILL to exactly this PID; wait reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `attack` per `plan` on the calling thread (which must be in the namespace, for the
/// hoards and the polite client), and reports.
pub fn run(attack: Attack, plan: &AttackPlan) -> AttackReport {
    let target = plan.target;
    let polite_duration = Duration::from_millis(500) * plan.polite_count as u32;
    // Long enough for the ramp, the polite requests and their last bound, plus slack.
    let tool_seconds = (plan.ramp + polite_duration + Duration::from_secs(10)).as_secs();
    let url = |path: &str| format!("http://{}{}", plan.target, path);
    let mut polite = Polite::new(target, &plan.polite_path);
    polite.source = plan.source;
    let (report, detail) = match attack {
        Attack::Mixed | Attack::KeepAliveHoard => {
            let mut hoard_plan = if attack == Attack::Mixed {
                HoardPlan::mixed(target, &plan.big_path)
            } else {
                HoardPlan::keep_alive(target, 1_000)
            };
            hoard_plan.source = plan.source;
            let hoard = Hoard::start(hoard_plan);
            std::thread::sleep(plan.ramp);
            let report = polite.run(plan.polite_count);
            let stats = hoard.stop();
            (report, stats.summary())
        }
        Attack::SynFlood => {
            assert!(target.is_ipv4(), "hping3 floods over IPv4 only");
            let interval = 1_000_000 / plan.syn_rate.max(1);
            let count = u64::from(plan.syn_rate) * tool_seconds;
            let mut tool = Tool::start(
                plan,
                "hping3",
                &[
                    "-q".into(),
                    "-S".into(),
                    "-p".into(),
                    plan.target.port().to_string(),
                    "-i".into(),
                    format!("u{interval}"),
                    "-c".into(),
                    count.to_string(),
                    plan.target.ip().to_string(),
                ],
            );
            std::thread::sleep(plan.ramp);
            let report = polite.run(plan.polite_count);
            (
                report,
                format!(
                    "hping3 -S at {} SYN/s from one address{}",
                    plan.syn_rate,
                    tool.ended()
                ),
            )
        }
        Attack::Slowloris | Attack::SlowRead => {
            let mut args: Vec<String> = vec![
                "-c".into(),
                plan.slow_connections.to_string(),
                "-r".into(),
                "200".into(),
                "-l".into(),
                tool_seconds.to_string(),
                "-p".into(),
                "3".into(),
            ];
            if attack == Attack::Slowloris {
                args.extend(["-H", "-i", "10", "-x", "24"].map(String::from));
                args.extend(["-u".into(), url("/")]);
            } else {
                args.extend(
                    [
                        "-X", "-w", "10", "-y", "20", "-n", "5", "-z", "32", "-k", "3",
                    ]
                    .map(String::from),
                );
                args.extend(["-u".into(), url(&plan.big_path)]);
            }
            let mut tool = Tool::start(plan, "slowhttptest", &args);
            std::thread::sleep(plan.ramp);
            let report = polite.run(plan.polite_count);
            (
                report,
                format!(
                    "slowhttptest {} with {} connections{}",
                    if attack == Attack::Slowloris {
                        "-H"
                    } else {
                        "-X"
                    },
                    plan.slow_connections,
                    tool.ended()
                ),
            )
        }
    };
    AttackReport {
        attack,
        polite: report,
        detail,
    }
}

/// Starts `f` on a thread that enters the network namespace `name` first.
pub use bramble_testkit::netns::spawn_inside;

/// Runs `f` on a thread that has entered the network namespace `name` (its sockets, and
/// those of every thread it starts, live there).
pub fn inside<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> T {
    bramble_testkit::netns::inside(name, f).unwrap_or_else(|problem| panic!("{problem}"))
}
