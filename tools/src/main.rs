//! `bramble`: the command-line entry point. Each subcommand lives in its own module; errors
//! are reported here, once, as `error:` lines a person can act on (see [`bramble::report`]).
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

/// Bramble turns a folder of static files into an SD card that boots a Raspberry Pi B+
/// straight into a web server.
#[derive(Parser)]
#[command(
    name = "bramble",
    version,
    about,
    after_help = bramble::report::EXIT_CODES_HELP
)]
struct Cli {
    /// On an error, also print where it was raised (a backtrace); BRAMBLE_BACKTRACE=1 does
    /// the same. RUST_BACKTRACE does not: it is for panics.
    #[arg(long, global = true)]
    debug: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build the kernel and boot it in QEMU with the serial console on stdout.
    Qemu(bramble::qemu_cmd::QemuArgs),
    /// Pack a site folder into one site-image file (SITE.BIN).
    Pack(bramble::pack::PackArgs),
    /// Build a flashable SD card image: firmware, kernel, site and settings.
    Image(bramble::image::ImageArgs),
    /// Make the owner's publish key pair (OWNER.KEY and OWNER.PUB) for `bramble image
    /// --publish-key`.
    Keygen(bramble::publish::keys::KeygenArgs),
    /// Publish a signed site into the idle slot of a card image (`--card`), or switch back
    /// to the previous one (`--rollback`).
    Publish(bramble::publish::card::PublishArgs),
    /// Write an SD card image to a card, carefully, and verify it.
    Flash(bramble::flash::FlashArgs),
    /// Serve a site folder on this machine with Bramble's HTTP engine (authors' preview).
    Serve(bramble::serve::ServeArgs),
    /// Check a site as the appliance serves it (for CI): every file's bytes, every same-site
    /// link, page weight, 404.html, what the packer leaves out.
    Check(bramble::check::CheckArgs),
    /// Benchmark Bramble against Linux + busybox in QEMU (the bench/ harness, built from the
    /// source tree; `--tap` for a TAP link with every client judged; `bramble bench --help`
    /// lists its flags).
    Bench(bramble::bench_cmd::BenchArgs),
}

fn main() -> ExitCode {
    // Usage errors exit with 2 (clap's own code); --help and --version with 0. The version
    // names the kernel this binary boots and puts on cards.
    let version: &'static str = Box::leak(bramble::kernel::version_text().into_boxed_str());
    let matches = Cli::command().version(version).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    let backtrace = cli.debug || bramble::report::backtrace_asked(|key| std::env::var_os(key));
    // anyhow captures a backtrace when RUST_LIB_BACKTRACE (or else RUST_BACKTRACE) says so;
    // this decides it for errors, leaving RUST_BACKTRACE to panics.
    #[allow(unsafe_code)] // set_var is unsafe in edition 2024; see the SAFETY line.
    // SAFETY: nothing else runs yet: no thread has been started (clap parses on this one),
    // so no other code can be reading the environment while it changes.
    unsafe {
        std::env::set_var("RUST_LIB_BACKTRACE", if backtrace { "1" } else { "0" });
    }
    let result = match cli.command {
        Command::Qemu(args) => bramble::qemu_cmd::run(args),
        Command::Pack(args) => bramble::pack::run(args),
        Command::Image(args) => bramble::image::run(args),
        Command::Keygen(args) => bramble::publish::keys::run(args),
        Command::Publish(args) => bramble::publish::card::run(args),
        Command::Flash(args) => bramble::flash::run(args),
        Command::Serve(args) => bramble::serve::run(args),
        Command::Check(args) => bramble::check::run(args),
        Command::Bench(args) => bramble::bench_cmd::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprint!("{}", bramble::report::render(&error, backtrace));
            ExitCode::from(bramble::report::exit_code(&error))
        }
    }
}
