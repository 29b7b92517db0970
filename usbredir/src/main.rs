//! `bramble-usbredir`: serve the LAN9514 Ethernet model to QEMU's usb-redir device.
//!
//! ```text
//! bramble-usbredir --socket /tmp/smsc.sock --tap tap0 --log regs.log &
//! qemu-system-arm ... -chardev socket,id=smsc,path=/tmp/smsc.sock \
//!                     -device usb-redir,chardev=smsc,port=1
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// A usbredir device server playing an SMSC LAN9514 Ethernet function (0424:ec00) for
/// QEMU's `-device usb-redir`, with its wire on a TAP device. Fault-injection commands are
/// read from stdin and from --control: link down|up, stall in|out, rx-errors N, unplug,
/// plug, replug MS, burst N, stats, note TEXT.
#[derive(Parser, Debug)]
#[command(name = "bramble-usbredir", version)]
struct Args {
    /// Unix socket to listen on for QEMU (`-chardev socket,path=SOCKET`).
    #[arg(long, value_name = "SOCKET")]
    socket: PathBuf,
    /// Existing TAP device that is the model's Ethernet wire.
    #[arg(long, value_name = "IFNAME")]
    tap: Option<String>,
    /// Connect at full speed (12 Mbit/s) instead of high speed.
    #[arg(long)]
    full_speed: bool,
    /// Write every register and PHY access to this file.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Also take commands on this Unix socket (one line in, one line out).
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
    /// Fit an EEPROM holding this MAC address (aa:bb:cc:dd:ee:ff); a Pi B+ has none.
    #[arg(long, value_name = "MAC", value_parser = parse_mac)]
    eeprom_mac: Option<[u8; 6]>,
    /// Auto-negotiation time in milliseconds.
    #[arg(long, default_value_t = 400)]
    aneg_ms: u64,
    /// Do not read commands from stdin.
    #[arg(long)]
    no_stdin: bool,
}

fn parse_mac(text: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{text:?} is not a MAC address"));
    }
    let mut mac = [0u8; 6];
    for (byte, part) in mac.iter_mut().zip(parts) {
        *byte =
            u8::from_str_radix(part, 16).map_err(|_| format!("{text:?} is not a MAC address"))?;
    }
    Ok(mac)
}

fn main() {
    let args = Args::parse();
    let options = bramble_usbredir::run::Options {
        socket: args.socket,
        tap: args.tap,
        full_speed: args.full_speed,
        log: args.log,
        control: args.control,
        eeprom_mac: args.eeprom_mac,
        aneg: Duration::from_millis(args.aneg_ms),
        stdin_commands: !args.no_stdin,
    };
    let result = bramble_usbredir::run::run(options, |socket| {
        println!("usbredir: listening on {socket}");
    });
    if let Err(error) = result {
        eprintln!("bramble-usbredir: {error}");
        std::process::exit(1);
    }
}
