//! Real IPv6 peers for the namespace tests: radvd (Debian's router advertisement daemon)
//! announcing prefixes, Avahi (the mDNS stack of Linux desktops, with a D-Bus of its own)
//! resolving names, and tcpdump recording what a guest sends. Shared by the QEMU tests
//! (tests/tests) and the hosted ones (kernel/hosted/tests, which include this file by path).
//!
//! Each helper takes `in_namespace`, a function that makes a `Command` running a program
//! inside the test's namespace; it must exec the program (`nsenter`, `ip netns exec`) so
//! that the PID held is the program's own. Every process is killed by that PID on drop.

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Makes a command that runs a program inside the test's namespace.
pub type InNamespace<'a> = &'a dyn Fn(&str) -> Command;

/// A prefix radvd announces (always /64, on-link, autonomous).
#[derive(Clone, Copy, Debug)]
pub struct Prefix {
    /// The prefix (the host part zero).
    pub prefix: Ipv6Addr,
    /// Valid lifetime, seconds.
    pub valid: u32,
    /// Preferred lifetime, seconds.
    pub preferred: u32,
}

/// radvd's configuration: advertisements every 3-4 s on `interface` with `prefixes` and,
/// if given, one recursive DNS server (RFC 8106).
pub fn radvd_config(interface: &str, prefixes: &[Prefix], dns: Option<Ipv6Addr>) -> String {
    let mut text = format!(
        "interface {interface} {{\n    AdvSendAdvert on;\n    MinRtrAdvInterval 3;\n    \
         MaxRtrAdvInterval 4;\n"
    );
    for prefix in prefixes {
        text.push_str(&format!(
            "    prefix {}/64 {{\n        AdvOnLink on;\n        AdvAutonomous on;\n        \
             AdvValidLifetime {};\n        AdvPreferredLifetime {};\n    }};\n",
            prefix.prefix, prefix.valid, prefix.preferred
        ));
    }
    if let Some(server) = dns {
        text.push_str(&format!(
            "    RDNSS {server} {{\n        AdvRDNSSLifetime 60;\n    }};\n"
        ));
    }
    text.push_str("};\n");
    text
}

/// Waits (bounded) until `log` holds `needle`, or `child` has exited; panics with the log.
fn wait_for_file_line(child: &mut Child, log: &Path, needle: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{} exited ({status}) before {needle:?}:\n{text}",
                log.display()
            );
        }
        assert!(
            start.elapsed() < limit,
            "no {needle:?} in {} within {limit:?}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `command` with stdout and stderr going to `log`.
fn spawn_logged(command: &mut Command, log: &Path) -> Child {
    let file = std::fs::File::create(log).expect("creating a log file");
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("duplicating the log file"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"))
}

/// A running radvd, killed on drop. Its router is the namespace's side of the link (radvd
/// needs that side to have its link-local address: start it once the guest holds the TAP).
pub struct Radvd {
    child: Child,
    log: PathBuf,
}

impl Radvd {
    /// Starts radvd in the foreground with `config`; `name` tells the files in `dir` apart.
    /// Returns once radvd has read its configuration.
    pub fn start(in_namespace: InNamespace, dir: &Path, name: &str, config: &str) -> Radvd {
        let config_path = dir.join(format!("{name}.conf"));
        std::fs::write(&config_path, config).unwrap();
        let log = dir.join(format!("{name}.log"));
        let mut command = in_namespace("radvd");
        command
            .args([
                "--nodaemon",
                "--logmethod",
                "stderr",
                "--debug",
                "1",
                "--config",
            ])
            .arg(&config_path)
            .arg("--pidfile")
            .arg(dir.join(format!("{name}.pid")));
        let mut child = spawn_logged(&mut command, &log);
        wait_for_file_line(&mut child, &log, "syntax ok", Duration::from_secs(10));
        Radvd { child, log }
    }

    /// What radvd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// radvd's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Radvd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Gives the namespace's side of `interface` the IPv6 address `cidr` at once (no DAD).
pub fn add_address(in_namespace: InNamespace, interface: &str, cidr: &str) {
    let output = in_namespace("ip")
        .args(["-6", "addr", "add", cidr, "dev", interface, "nodad"])
        .output()
        .expect("ip -6 addr add");
    assert!(
        output.status.success(),
        "ip -6 addr add {cidr} dev {interface}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// radvd announcing `prefix` (valid and preferred 600 s) on `interface`, once the link has
/// its link-local address (within 10 s); its files in `dir`.
pub fn advertise_prefix(
    in_namespace: InNamespace,
    dir: &Path,
    interface: &str,
    prefix: Ipv6Addr,
) -> Radvd {
    wait_for_link_local(in_namespace, interface, Duration::from_secs(10));
    let prefixes = [Prefix {
        prefix,
        valid: 600,
        preferred: 600,
    }];
    Radvd::start(
        in_namespace,
        dir,
        "radvd",
        &radvd_config(interface, &prefixes, None),
    )
}

/// Waits (bounded) until the namespace's side of `interface` has a usable (not tentative)
/// link-local address: radvd advertises from it.
pub fn wait_for_link_local(in_namespace: InNamespace, interface: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let output = in_namespace("ip")
            .args(["-6", "addr", "show", "dev", interface, "scope", "link"])
            .output()
            .expect("ip -6 addr");
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        if text.contains("inet6 fe80::") && !text.contains("tentative") {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{interface} has no link-local address after {limit:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The address family an [`Avahi`] judge speaks mDNS over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// 224.0.0.251 only (`use-ipv6=no`).
    Ipv4,
    /// ff02::fb only (`use-ipv4=no`).
    Ipv6,
}

/// A private Avahi: its own D-Bus daemon (a socket in `dir`), and avahi-daemon inside the
/// namespace on `interface`, over one transport, publishing nothing. Its /run/avahi-daemon
/// is a tmpfs of its own (a private mount namespace), so it never meets the machine's Avahi
/// or another test's. Both processes are killed on drop.
pub struct Avahi {
    bus: Child,
    daemon: Child,
    bus_address: String,
    log: PathBuf,
}

impl Avahi {
    /// Starts the bus and the daemon; returns once the daemon is up on `interface`.
    pub fn start(
        in_namespace: InNamespace,
        dir: &Path,
        interface: &str,
        transport: Transport,
    ) -> Avahi {
        let name = match transport {
            Transport::Ipv4 => "avahi4",
            Transport::Ipv6 => "avahi6",
        };
        let socket = dir.join(format!("{name}.bus"));
        let _ = std::fs::remove_file(&socket);
        let bus_config = dir.join(format!("{name}-bus.conf"));
        std::fs::write(
            &bus_config,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration \
                 1.0//EN\" \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
                 <busconfig><type>system</type><listen>unix:path={}</listen>\
                 <auth>EXTERNAL</auth><policy context=\"default\"><allow user=\"*\"/>\
                 <allow own=\"*\"/><allow send_destination=\"*\"/>\
                 <allow receive_sender=\"*\"/></policy></busconfig>\n",
                socket.display()
            ),
        )
        .unwrap();
        let bus_log = dir.join(format!("{name}-bus.log"));
        let mut bus = spawn_logged(
            Command::new("dbus-daemon")
                .arg(format!("--config-file={}", bus_config.display()))
                .args(["--nofork", "--nopidfile"]),
            &bus_log,
        );
        let start = Instant::now();
        while !socket.exists() {
            if let Ok(Some(status)) = bus.try_wait() {
                panic!(
                    "dbus-daemon exited ({status}):\n{}",
                    std::fs::read_to_string(&bus_log).unwrap_or_default()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "dbus-daemon made no socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let bus_address = format!("unix:path={}", socket.display());
        let (ipv4, ipv6) = match transport {
            Transport::Ipv4 => ("yes", "no"),
            Transport::Ipv6 => ("no", "yes"),
        };
        let daemon_config = dir.join(format!("{name}.conf"));
        std::fs::write(
            &daemon_config,
            format!(
                "[server]\nhost-name=judge\nuse-ipv4={ipv4}\nuse-ipv6={ipv6}\n\
                 allow-interfaces={interface}\nenable-dbus=yes\n[wide-area]\n\
                 enable-wide-area=no\n[publish]\ndisable-publishing=yes\n"
            ),
        )
        .unwrap();
        let log = dir.join(format!("{name}.log"));
        // `unshare --mount` execs sh, which execs avahi-daemon: the PID stays the daemon's.
        let script = format!(
            "mkdir -p /run/avahi-daemon && mount -t tmpfs bramble-avahi /run/avahi-daemon && \
             exec avahi-daemon --file {} --no-drop-root --no-chroot --no-rlimits",
            daemon_config.display()
        );
        let mut daemon = spawn_logged(
            in_namespace("unshare")
                .args(["--mount", "sh", "-c", &script])
                .env("DBUS_SYSTEM_BUS_ADDRESS", &bus_address),
            &log,
        );
        wait_for_file_line(
            &mut daemon,
            &log,
            "Server startup complete",
            Duration::from_secs(15),
        );
        Avahi {
            bus,
            daemon,
            bus_address,
            log,
        }
    }

    /// Resolves `name` with `avahi-resolve --name` for one family's address (AAAA with
    /// IPv6, A with IPv4); `None` when Avahi finds nothing (it gives up after about 5 s).
    /// Returns Avahi's output too, for failure messages.
    pub fn resolve(
        &self,
        in_namespace: InNamespace,
        name: &str,
        family: Transport,
    ) -> (Option<IpAddr>, String) {
        let flag = match family {
            Transport::Ipv4 => "-4",
            Transport::Ipv6 => "-6",
        };
        let output = in_namespace("timeout")
            .args(["20", "avahi-resolve", flag, "--name", name])
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.bus_address)
            .stdin(Stdio::null())
            .output()
            .expect("running avahi-resolve");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let address = text
            .lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse().ok());
        (address, text)
    }

    /// What avahi-daemon logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Avahi {
    fn drop(&mut self) {
        for child in [&mut self.daemon, &mut self.bus] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A tcpdump writing every frame on `interface` to a pcap file, killed on drop.
pub struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    /// Starts tcpdump (packet-buffered, so the file is whole whenever it is killed); returns
    /// once it listens.
    pub fn start(in_namespace: InNamespace, dir: &Path, interface: &str) -> Capture {
        let file = dir.join(format!("{interface}.pcap"));
        let log = dir.join(format!("{interface}-tcpdump.log"));
        let mut command = in_namespace("tcpdump");
        command
            .args(["-n", "-i", interface, "-U", "--immediate-mode", "-w"])
            .arg(&file);
        let mut child = spawn_logged(&mut command, &log);
        wait_for_file_line(&mut child, &log, "listening on", Duration::from_secs(10));
        Capture { child, file }
    }

    /// Stops the capture (the file keeps every frame seen until now).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// tcpdump's one-line summaries of the captured frames that `mac` sent and that match
    /// `filter` (a pcap filter expression). Call [`Capture::stop`] first.
    pub fn frames_from(&self, mac: &str, filter: &str) -> Vec<String> {
        let expression = format!("ether src {mac} and ({filter})");
        let output = Command::new("tcpdump")
            .args(["-n", "-e", "-r"])
            .arg(&self.file)
            .arg(&expression)
            .output()
            .expect("tcpdump -r");
        assert!(
            output.status.success(),
            "tcpdump -r {expression}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The global addresses in `serving: http://[ADDR]/` lines of a guest's log, in order.
pub fn serving_addresses(log: &str) -> Vec<Ipv6Addr> {
    log.lines()
        .filter_map(|line| {
            let rest = line.split("serving: http://[").nth(1)?;
            rest.split(']').next()?.parse().ok()
        })
        .collect()
}

/// Whether `address` lies in the /64 `prefix`.
pub fn in_prefix(address: Ipv6Addr, prefix: Ipv6Addr) -> bool {
    address.segments()[..4] == prefix.segments()[..4]
}
