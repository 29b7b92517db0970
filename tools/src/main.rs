//! `bramble`: the command-line entry point. Each subcommand lives in its own module.
use clap::{Parser, Subcommand};

/// Bramble turns a folder of static files into an SD card that boots a Raspberry Pi B+
/// straight into a web server.
#[derive(Parser)]
#[command(name = "bramble", version, about)]
struct Cli {
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
    /// Write an SD card image to a card, carefully, and verify it.
    Flash(bramble::flash::FlashArgs),
    /// Serve a site folder on this machine with Bramble's HTTP engine (authors' preview).
    Serve(bramble::serve::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Qemu(args) => bramble::qemu_cmd::run(args),
        Command::Pack(args) => bramble::pack::run(args),
        Command::Image(args) => bramble::image::run(args),
        Command::Flash(args) => bramble::flash::run(args),
        Command::Serve(args) => bramble::serve::run(args),
    }
}
