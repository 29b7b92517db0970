//! `judge`: the judging load client on its own (bench/src/judge.rs): CLIENTS connections ask
//! ADDRESS:PORT for PATH with keep-alive for SECONDS; prints the verdict as JSON.
use clap::Parser;
use std::time::Duration;

/// Load a server with clients that each judge their own connection.
#[derive(Parser)]
#[command(name = "judge", version, about)]
struct Cli {
    /// The server, as IPv4-ADDRESS:PORT.
    target: String,
    /// The path to ask for.
    #[arg(default_value = "/")]
    path: String,
    /// Clients (connections at once).
    #[arg(long, default_value_t = 100)]
    clients: u32,
    /// Seconds the clients keep asking.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds a connect or an answer may take before it counts as failed.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
    /// Run inside this network namespace (/run/netns/NAME).
    #[arg(long)]
    netns: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let run = bramble_bench::judge::JudgeRun {
        target: bramble_bench::judge::parse_target(&cli.target)?,
        path: cli.path,
        headers: Vec::new(),
        clients: cli.clients,
        duration: Duration::from_secs(cli.seconds),
        timeout: Duration::from_secs(cli.timeout),
    };
    bramble_bench::raise_open_file_limit();
    let report = match &cli.netns {
        Some(name) => bramble_bench::in_namespace(name, || bramble_bench::judge::run(&run))?,
        None => bramble_bench::judge::run(&run),
    };
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
