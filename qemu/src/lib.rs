//! QEMU argument sets for Bramble: machines, kernel loading, serial, SD card and network.
//!
//! The `bramble` tool, the integration tests and the benchmarks all build their QEMU command
//! lines here, so what a test boots is exactly what a user boots.

pub mod board_rules;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The QEMU binary Bramble needs (Debian package `qemu-system-arm`).
pub const QEMU_BINARY: &str = "qemu-system-arm";

/// An emulated board with the Pi B+'s SoC (BCM2835, ARM1176, 512 MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Machine {
    /// Raspberry Pi A+ (QEMU `raspi1ap`): the B+'s SoC and memory, one USB port.
    #[default]
    Raspi1ap,
    /// Raspberry Pi Zero (QEMU `raspi0`).
    Raspi0,
}

impl Machine {
    /// QEMU's `-M` name.
    pub fn qemu_name(self) -> &'static str {
        match self {
            Machine::Raspi1ap => "raspi1ap",
            Machine::Raspi0 => "raspi0",
        }
    }

    /// The model name the kernel's banner decodes from the revision code QEMU reports.
    pub fn board_model(self) -> &'static str {
        match self {
            Machine::Raspi1ap => "Raspberry Pi A+",
            Machine::Raspi0 => "Raspberry Pi Zero",
        }
    }

    /// Every machine Bramble supports.
    pub const ALL: [Machine; 2] = [Machine::Raspi1ap, Machine::Raspi0];
}

impl std::str::FromStr for Machine {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "raspi1ap" => Ok(Machine::Raspi1ap),
            "raspi0" => Ok(Machine::Raspi0),
            other => Err(format!(
                "unknown machine '{other}' (use raspi1ap or raspi0)"
            )),
        }
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.qemu_name())
    }
}

/// How the kernel is handed to QEMU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// The ELF, loaded at its link addresses with `-kernel`.
    Elf(PathBuf),
    /// The flat kernel.img, loaded at 0x8000 with `-bios` (as the Pi firmware would). A raw
    /// image given to `-kernel` would be loaded at 0x10000 as a Linux zImage, which is wrong.
    Raw(PathBuf),
}

/// Where the USB NIC sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Topology {
    /// Behind QEMU's automatically inserted full-speed hub: the B+ shape (LAN9514 hub).
    #[default]
    BehindHub,
    /// Directly on the DWC2 root port (`port=1`).
    RootPort,
}

/// The emulated network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Network {
    /// QEMU user-mode networking (slirp: DHCP gives 10.0.2.15, gateway 10.0.2.2), with
    /// 127.0.0.1:`host_port` forwarded to the guest's port 80.
    User {
        /// Host port on 127.0.0.1.
        host_port: u16,
        /// NIC placement.
        topology: Topology,
    },
    /// A TAP device that already exists (inside a network namespace for tests).
    Tap {
        /// Interface name.
        interface: String,
        /// NIC placement.
        topology: Topology,
    },
    /// The B+'s own NIC: an SMSC LAN9514 Ethernet function played by a usbredir server
    /// (`bramble-usbredir`) listening on `socket`, attached with `-device usb-redir` at high
    /// speed on the DWC2 root port (QEMU's automatic hub is full speed only). The model's
    /// wire is the server's business (a TAP device); QEMU has no network backend here.
    Smsc95xxModel {
        /// The server's Unix socket.
        socket: PathBuf,
    },
}

/// Everything that varies between QEMU runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QemuConfig {
    /// Board to emulate.
    pub machine: Machine,
    /// Kernel to boot.
    pub kernel: Kernel,
    /// Raw SD card image (its size must be a power of two).
    pub sd_card: Option<PathBuf>,
    /// USB network card, if any.
    pub network: Option<Network>,
    /// A Unix socket for the QEMU monitor (for `set_link` and friends in tests).
    pub monitor_socket: Option<PathBuf>,
    /// Run with `-icount shift=0`: the guest clock counts instructions (benchmarks).
    pub count_instructions: bool,
    /// With user-mode networking, also forward 127.0.0.1:this port to the guest's HTTPS
    /// port (443).
    pub https_host_port: Option<u16>,
    /// With user-mode networking, keep the guest from reaching anything by itself
    /// (`restrict=on`: no route out, no DNS forwarding; forwarded ports still work). On by
    /// default: tests and benchmarks must send no traffic beyond this machine, and a guest
    /// with the default `ntp = auto` resolves pool.ntp.org by itself. Off for an owner's
    /// `bramble qemu`, and for tests that run their own server on the host's loopback
    /// (10.0.2.2 to the guest), which must then give the guest addresses, never names.
    pub isolated: bool,
    /// Run under the board-rules judge ([`board_rules`]): every boot of the test command does.
    pub board_rules: Option<board_rules::BoardRules>,
}

impl QemuConfig {
    /// A machine booting `kernel`, no SD card, no network.
    pub fn new(machine: Machine, kernel: Kernel) -> Self {
        Self {
            machine,
            kernel,
            sd_card: None,
            network: None,
            monitor_socket: None,
            count_instructions: false,
            https_host_port: None,
            isolated: true,
            board_rules: None,
        }
    }

    /// The arguments after the binary name. The serial console is on stdio; there is no
    /// display; QEMU stops on SIGINT/SIGTERM.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |parts: &[&str]| args.extend(parts.iter().map(OsString::from));
        push(&[
            "-M",
            self.machine.qemu_name(),
            "-display",
            "none",
            "-serial",
            "stdio",
        ]);
        match &self.monitor_socket {
            Some(path) => push(&[
                "-monitor",
                &format!("unix:{},server=on,wait=off", path.display()),
            ]),
            None => push(&["-monitor", "none"]),
        }
        match &self.kernel {
            Kernel::Elf(path) => push(&["-kernel", &path.display().to_string()]),
            Kernel::Raw(path) => push(&["-bios", &path.display().to_string()]),
        }
        if let Some(card) = &self.sd_card {
            push(&[
                "-drive",
                &format!("if=sd,format=raw,file={}", escape_option(card)),
            ]);
        }
        match &self.network {
            Some(Network::Smsc95xxModel { socket }) => push(&[
                "-chardev",
                &format!("socket,id=smsc0,path={}", escape_option(socket)),
                "-device",
                "usb-redir,chardev=smsc0,port=1",
            ]),
            Some(network) => {
                let (netdev, topology) = match network {
                    Network::User {
                        host_port,
                        topology,
                    } => {
                        let mut netdev =
                            format!("user,id=net0,hostfwd=tcp:127.0.0.1:{host_port}-:80");
                        if self.isolated {
                            netdev.push_str(",restrict=on");
                        }
                        if let Some(https) = self.https_host_port {
                            netdev.push_str(&format!(",hostfwd=tcp:127.0.0.1:{https}-:443"));
                        }
                        (netdev, topology)
                    }
                    Network::Tap {
                        interface,
                        topology,
                    } => (
                        format!("tap,id=net0,ifname={interface},script=no,downscript=no"),
                        topology,
                    ),
                    Network::Smsc95xxModel { .. } => unreachable!("matched above"),
                };
                let device = match topology {
                    Topology::BehindHub => "usb-net,netdev=net0".to_string(),
                    Topology::RootPort => "usb-net,netdev=net0,port=1".to_string(),
                };
                push(&["-netdev", &netdev, "-device", &device]);
            }
            None => {}
        }
        if self.count_instructions {
            push(&["-icount", "shift=0"]);
        }
        if let Some(rules) = &self.board_rules {
            args.extend(rules.args());
        }
        args
    }
}

/// QEMU's option syntax doubles commas inside a value.
fn escape_option(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}

/// Finds `qemu-system-arm` on PATH, or says how to install it.
pub fn find_qemu() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(QEMU_BINARY))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            format!(
                "{QEMU_BINARY} was not found on PATH. Install it with \
                 `sudo apt-get install -y qemu-system-arm` (Debian/Ubuntu)."
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(config: &QemuConfig) -> String {
        config
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn plain_boot_uses_elf_and_stdio_serial() {
        let config = QemuConfig::new(Machine::Raspi0, Kernel::Elf("/k/kernel.elf".into()));
        assert_eq!(
            joined(&config),
            "-M raspi0 -display none -serial stdio -monitor none -kernel /k/kernel.elf"
        );
    }

    #[test]
    fn raw_kernel_goes_through_bios_so_it_lands_at_0x8000() {
        let config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw("kernel.img".into()));
        assert!(joined(&config).contains("-bios kernel.img"));
        assert!(!joined(&config).contains("-kernel"));
    }

    #[test]
    fn https_is_forwarded_beside_http() {
        let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw("kernel.img".into()));
        config.network = Some(Network::User {
            host_port: 8080,
            topology: Topology::BehindHub,
        });
        config.https_host_port = Some(8443);
        assert!(joined(&config).contains(
            "-netdev user,id=net0,hostfwd=tcp:127.0.0.1:8080-:80,restrict=on,\
             hostfwd=tcp:127.0.0.1:8443-:443"
        ));
    }

    #[test]
    fn network_sd_monitor_and_icount() {
        let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw("k.img".into()));
        config.sd_card = Some("/tmp/a,b.img".into());
        config.network = Some(Network::User {
            host_port: 8080,
            topology: Topology::RootPort,
        });
        config.monitor_socket = Some("/tmp/mon.sock".into());
        config.count_instructions = true;
        let line = joined(&config);
        assert!(line.contains("-drive if=sd,format=raw,file=/tmp/a,,b.img"));
        assert!(line.contains("-netdev user,id=net0,hostfwd=tcp:127.0.0.1:8080-:80"));
        assert!(line.contains("-device usb-net,netdev=net0,port=1"));
        assert!(line.contains("-monitor unix:/tmp/mon.sock,server=on,wait=off"));
        assert!(line.ends_with("-icount shift=0"));
        config.network = Some(Network::Tap {
            interface: "tap7".into(),
            topology: Topology::BehindHub,
        });
        let line = joined(&config);
        assert!(line.contains("-netdev tap,id=net0,ifname=tap7,script=no,downscript=no"));
        assert!(
            line.contains("-device usb-net,netdev=net0 ")
                || line.ends_with("-device usb-net,netdev=net0 -icount shift=0")
        );
    }

    #[test]
    fn smsc95xx_model_is_a_usb_redir_device_on_the_root_port() {
        let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw("k.img".into()));
        config.network = Some(Network::Smsc95xxModel {
            socket: "/tmp/a,b.sock".into(),
        });
        let line = joined(&config);
        assert!(line.contains("-chardev socket,id=smsc0,path=/tmp/a,,b.sock"));
        assert!(line.contains("-device usb-redir,chardev=smsc0,port=1"));
        assert!(!line.contains("-netdev"), "{line}");
    }

    #[test]
    fn machine_names_round_trip() {
        for machine in Machine::ALL {
            assert_eq!(machine.qemu_name().parse::<Machine>(), Ok(machine));
        }
        assert!("raspi3b".parse::<Machine>().is_err());
    }
}
