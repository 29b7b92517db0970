//! `bramble qemu`: build the kernel and boot it in QEMU, serial console on stdout.

use anyhow::Context;
use bramble_qemu::{Kernel, Machine, Network, QemuConfig, Topology};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Arguments of `bramble qemu`.
#[derive(clap::Args, Debug)]
pub struct QemuArgs {
    /// Emulated board (both have the B+'s BCM2835 and 512 MiB).
    #[arg(long, default_value = "raspi1ap")]
    pub machine: Machine,
    /// Boot this kernel image or ELF instead of building one (or the one on --image).
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Boot the ELF with `-kernel` instead of kernel.img with `-bios`.
    #[arg(long)]
    pub elf: bool,
    /// Attach this SD card image instead of building one, and boot the kernel on it (the one
    /// its config.txt names) unless --kernel or --elf says otherwise.
    #[arg(long, conflicts_with_all = ["site", "no_card"])]
    pub image: Option<PathBuf>,
    /// Pack this site folder onto a fresh SD card image [default: site/default].
    #[arg(long)]
    pub site: Option<PathBuf>,
    /// BRAMBLE.TXT for the card built from --site.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Boot without an SD card.
    #[arg(long)]
    pub no_card: bool,
    /// Forward 127.0.0.1:PORT to the guest's port 80.
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Also forward 127.0.0.1:PORT to the guest's HTTPS port 443 (user-mode networking;
    /// the card needs a certificate: `bramble image --tls-cert --tls-key`, or --tls-cert
    /// and --tls-key here).
    #[arg(long, value_name = "PORT")]
    pub https_port: Option<u16>,
    /// With --site: put this PEM certificate chain on the card and turn HTTPS on.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        conflicts_with = "image"
    )]
    pub tls_cert: Option<PathBuf>,
    /// With --site: the certificate's PEM private key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert",
        conflicts_with = "image"
    )]
    pub tls_key: Option<PathBuf>,
    /// Put the USB NIC on the root port instead of behind a hub (the B+ shape).
    #[arg(long)]
    pub root_port: bool,
    /// Attach the NIC to this existing TAP device (real L2: ARP, ping, mDNS) instead of
    /// user-mode networking; run inside the network namespace that owns the device.
    #[arg(long, value_name = "IFNAME", conflicts_with = "no_network")]
    pub tap: Option<String>,
    /// The network card: QEMU's usb-net, or a model of the B+'s SMSC LAN9514 Ethernet
    /// (bramble-usbredir, run inside this process, attached with usb-redir at high speed on
    /// the root port; its wire is --tap).
    #[arg(long, value_enum, default_value_t = Nic::UsbNet, conflicts_with = "no_network")]
    pub nic: Nic,
    /// With --nic smsc95xx: write the model's register log to FILE.
    #[arg(long, value_name = "FILE")]
    pub model_log: Option<PathBuf>,
    /// With --nic smsc95xx: take fault-injection commands (link down|up, stall in|out,
    /// rx-errors N, replug MS, burst N, stats) on this Unix socket.
    #[arg(long, value_name = "SOCKET")]
    pub model_control: Option<PathBuf>,
    /// No network card.
    #[arg(long)]
    pub no_network: bool,
}

/// The emulated network card.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nic {
    /// QEMU's usb-net (CDC-ECM/RNDIS gadget, full speed).
    UsbNet,
    /// A model of the LAN9514's Ethernet function (the B+'s NIC) over usb-redir.
    Smsc95xx,
}

/// Runs `bramble qemu`.
pub fn run(args: QemuArgs) -> anyhow::Result<()> {
    let qemu = bramble_qemu::find_qemu().map_err(anyhow::Error::msg)?;
    // What boots: --kernel; else with --image the kernel on that card (what will be
    // flashed); else (or with --elf) a kernel built now.
    let built = match (&args.kernel, &args.image) {
        (Some(_), _) => None,
        (None, Some(_)) if !args.elf => None,
        (None, _) => Some(crate::kernel::default_kernel()?),
    };
    let card_kernel = match (&args.image, &args.kernel, &built) {
        (Some(card), None, None) => Some(kernel_from_card(card)?),
        _ => None,
    };
    let kernel = match (&args.kernel, &built, &card_kernel) {
        (Some(path), _, _) if is_elf(path)? => Kernel::Elf(path.clone()),
        (Some(path), _, _) => Kernel::Raw(path.clone()),
        (None, Some(built), _) if args.elf => match &built.elf {
            Some(elf) => Kernel::Elf(elf.clone()),
            None => {
                return Err(crate::report::Usage(
                    "--elf boots the kernel's ELF, but this bramble carries only kernel.img: \
                     give --kernel path/to/bramble-kernel"
                        .into(),
                )
                .into());
            }
        },
        (None, Some(built), _) => Kernel::Raw(built.raw.clone()),
        (None, None, Some(file)) => Kernel::Raw(file.path().to_path_buf()),
        (None, None, None) => unreachable!("a kernel is given, on the card, or built"),
    };
    let mut config = QemuConfig::new(args.machine, kernel);
    // What keeps a card made here (its lock in the tree, or its temporary folder) until
    // QEMU ends.
    let mut place = CardPlace::default();
    config.sd_card = match (&args.image, args.no_card) {
        (Some(image), _) => Some(image.clone()),
        (None, true) => None,
        (None, false) => Some(card_for_site(&args, built.as_ref(), &mut place)?),
    };
    config.network = network_for(&args, || start_smsc95xx_model(&args, args.tap.clone()))?;
    if !args.no_network {
        config.https_host_port = args.https_port;
        // An owner's guest may reach time servers (and resolve their names), as on a LAN.
        config.isolated = false;
    }
    eprintln!(
        "booting {} in QEMU; serial console follows. Stop with Ctrl-C.",
        args.machine
    );
    let judge = crate::board_rules::attach(&mut config)?;
    let result = run_until_stopped(Command::new(qemu).args(config.args()));
    if let Some(Network::Smsc95xxModel { socket }) = &config.network {
        let _ = std::fs::remove_file(socket);
    }
    result?;
    match judge {
        Some(judge) => judge.check(),
        None => Ok(()),
    }
}

/// The network card `args` ask for; `start_model` starts the LAN9514 model when one is
/// wanted and returns its socket.
fn network_for(
    args: &QemuArgs,
    start_model: impl FnOnce() -> anyhow::Result<PathBuf>,
) -> anyhow::Result<Option<Network>> {
    if args.no_network {
        return Ok(None);
    }
    let topology = if args.root_port {
        Topology::RootPort
    } else {
        Topology::BehindHub
    };
    Ok(Some(match (args.nic, &args.tap) {
        (Nic::UsbNet, None) => Network::User {
            host_port: args.port,
            topology,
        },
        (Nic::UsbNet, Some(interface)) => Network::Tap {
            interface: interface.clone(),
            topology,
        },
        (Nic::Smsc95xx, _) => Network::Smsc95xxModel {
            socket: start_model()?,
        },
    }))
}

/// Starts the LAN9514 model in a thread of this process and returns its socket once it
/// listens. Its wire is the TAP device `tap` (this process must be in the device's
/// namespace); without one the link is up but nothing is on the other end.
fn start_smsc95xx_model(args: &QemuArgs, tap: Option<String>) -> anyhow::Result<PathBuf> {
    let dir = crate::workspace_root().join("target/qemu");
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join(format!("smsc95xx-{}.sock", std::process::id()));
    if tap.is_none() {
        eprintln!("--nic smsc95xx without --tap: the model's cable goes nowhere");
    }
    let options = bramble_usbredir::run::Options {
        socket: socket.clone(),
        tap,
        full_speed: false,
        log: args.model_log.clone(),
        control: args.model_control.clone(),
        eeprom_mac: None,
        aneg: Duration::from_millis(400),
        stdin_commands: false,
    };
    let (ready, listening) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let failed = ready.clone();
        if let Err(error) = bramble_usbredir::run::run(options, move |_| {
            let _ = ready.send(Ok(()));
        }) {
            let _ = failed.send(Err(error));
        }
    });
    match listening.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => Ok(socket),
        Ok(Err(error)) => Err(anyhow::Error::new(error).context("starting the smsc95xx model")),
        Err(_) => anyhow::bail!("the smsc95xx model did not start"),
    }
}

/// Copies the kernel the card at `card` boots into a temporary file (deleted when dropped)
/// and says which kernel it is.
fn kernel_from_card(card: &std::path::Path) -> anyhow::Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let (name, bytes) = crate::image::card::read_kernel(card)?;
    let id = crate::kernel::kernel_id(&bytes);
    eprintln!(
        "kernel: {name} from {} ({} bytes): {}",
        card.display(),
        bytes.len(),
        id.as_deref()
            .unwrap_or("not a Bramble kernel this tool recognises")
    );
    let mut file = tempfile::Builder::new()
        .prefix("bramble-card-kernel-")
        .suffix(".img")
        .tempfile()
        .context("creating a temporary file for the card's kernel")?;
    file.write_all(&bytes)
        .context("writing the card's kernel to a temporary file")?;
    Ok(file)
}

/// Where `bramble qemu` keeps the card it made, for as long as QEMU runs.
#[derive(Default)]
struct CardPlace {
    /// The temporary folder holding it (removed when dropped), outside the source tree or
    /// when another `bramble qemu` uses target/qemu/bramble.img.
    _scratch: Option<tempfile::TempDir>,
    /// The lock on target/qemu/bramble.img (released when dropped).
    _lock: Option<std::fs::File>,
}

/// Takes the exclusive lock on `path` if no other process holds it.
fn try_lock(path: &std::path::Path) -> Option<std::fs::File> {
    let file = std::fs::File::create(path).ok()?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(file)
}

/// Builds a card from --site (or the default site) and the kernel: target/qemu/bramble.img
/// in the source tree (locked while QEMU runs, so that two `bramble qemu` at once do not
/// boot each other's card: the second makes its own in a temporary folder), else in a
/// temporary folder; `place` keeps the lock or the folder.
fn card_for_site(
    args: &QemuArgs,
    built: Option<&crate::kernel::DefaultKernel>,
    place: &mut CardPlace,
) -> anyhow::Result<PathBuf> {
    let target = crate::workspace_root().join("target");
    let in_tree = if target.is_dir() {
        let dir = target.join("qemu");
        std::fs::create_dir_all(&dir)?;
        try_lock(&dir.join("bramble.img.lock")).map(|lock| (dir.join("bramble.img"), lock))
    } else {
        None
    };
    let output = match in_tree {
        Some((output, lock)) => {
            place._lock = Some(lock);
            output
        }
        None => {
            let dir = tempfile::Builder::new()
                .prefix("bramble-qemu-")
                .tempdir()
                .context("creating a folder for the card")?;
            let output = dir.path().join("bramble.img");
            place._scratch = Some(dir);
            output
        }
    };
    let fallback;
    let kernel = match (built, &args.kernel) {
        (Some(built), _) => built.raw.clone(),
        (None, Some(path)) if !is_elf(path)? => path.clone(),
        (None, _) => {
            fallback = crate::kernel::default_kernel()?;
            fallback.raw.clone()
        }
    };
    crate::image::run(crate::image::ImageArgs {
        site: args.site.clone(),
        site_image: None,
        fast: false,
        skip_broken_links: false,
        output: output.clone(),
        kernel: Some(kernel),
        firmware: None,
        fetch_firmware: false,
        firmware_unpinned: false,
        config: args.config.clone(),
        size: None,
        tls_cert: args.tls_cert.clone(),
        tls_key: args.tls_key.clone(),
        acme_ca: None,
        slot_mib: None,
        publish_key: None,
    })?;
    Ok(output)
}

fn is_elf(path: &PathBuf) -> anyhow::Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(file.read(&mut magic)? == 4 && magic == *b"\x7fELF")
}

/// Runs QEMU in the foreground; on Ctrl-C or SIGTERM, asks it to stop (SIGTERM, which QEMU
/// handles by shutting down cleanly) and waits for it.
pub fn run_until_stopped(command: &mut Command) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    let mut child = command.spawn().context("starting QEMU")?;
    let pid = child.id();
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() && !stop.load(Ordering::SeqCst) {
                anyhow::bail!("QEMU exited with {status}");
            }
            return Ok(());
        }
        if stop.swap(false, Ordering::SeqCst) {
            terminate(pid);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends SIGTERM to `pid`, a child we spawned and have not reaped (so the PID is still ours).
pub(crate) fn terminate(pid: u32) {
    // `kill` from procps is on every Linux machine; it keeps libc's unsafe API out of here.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        qemu: QemuArgs,
    }

    fn network(line: &[&str]) -> Option<Network> {
        let args = Cli::parse_from(std::iter::once("qemu").chain(line.iter().copied())).qemu;
        network_for(&args, || Ok(PathBuf::from("/run/model.sock"))).unwrap()
    }

    #[test]
    fn tap_and_nic_choose_the_network() {
        assert_eq!(
            network(&[]),
            Some(Network::User {
                host_port: 8080,
                topology: Topology::BehindHub
            })
        );
        assert_eq!(
            network(&["--tap", "tap7", "--root-port"]),
            Some(Network::Tap {
                interface: "tap7".into(),
                topology: Topology::RootPort
            })
        );
        assert_eq!(
            network(&["--nic", "smsc95xx", "--tap", "tap7"]),
            Some(Network::Smsc95xxModel {
                socket: "/run/model.sock".into()
            })
        );
        assert_eq!(network(&["--no-network"]), None);
    }
}
