//! `bramble-bench`: the command-line entry point of the benchmarks (the library holds them).
use clap::Parser;

/// Benchmark Bramble against Linux + busybox httpd in the same QEMU machine, side by side, or
/// (with --hosted) the hosted build against nginx and busybox httpd on this machine.
#[derive(Parser)]
#[command(name = "bramble-bench", version, about)]
struct Cli {
    #[command(flatten)]
    args: bramble_bench::BenchArgs,
}

fn main() -> anyhow::Result<()> {
    bramble_bench::run(Cli::parse().args)
}
