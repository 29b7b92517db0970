//! A network namespace with a TAP device, made for one test (or one benchmark run) and
//! deleted when it ends; and a server process run inside one ([`Daemon`]).
//!
//! Tests that run the appliance (bramble-hosted, or QEMU with `--tap`) put its TAP device in
//! a namespace of their own, so that every address they use is inside it and nothing reaches
//! the host's networks. Needs root (or CAP_NET_ADMIN) and `ip` from iproute2. The QEMU
//! tests (tests/tests/netns), the usbredir tests, the hosted tests, the tool's tests and the
//! bench all make theirs here.

use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces made by this process so far: the suffix that keeps names apart.
static MADE: AtomicU32 = AtomicU32::new(0);

/// A namespace `PREFIX-PID-N` with loopback up and one TAP device holding the host's
/// address, and a scratch folder of the same name in the temporary directory. Both go on
/// drop (the folder stays, and is named, when the test panicked and asked to keep it).
pub struct TapNamespace {
    name: String,
    dir: PathBuf,
    keep_files_on_panic: bool,
}

impl TapNamespace {
    /// Makes the namespace, its TAP device `tap` with `host_cidr` (`192.168.77.1/24`) up,
    /// and an empty scratch folder. Panics, naming the command, when `ip` fails.
    pub fn create(prefix: &str, tap: &str, host_cidr: &str) -> Self {
        Self::try_create(prefix, tap, host_cidr).unwrap_or_else(|problem| panic!("{problem}"))
    }

    /// [`TapNamespace::create`], with what failed as an error instead of a panic (for the
    /// bench). Namespaces `PREFIX-PID-N` of processes that are gone (a run killed before
    /// its destructors ran) are deleted first.
    pub fn try_create(prefix: &str, tap: &str, host_cidr: &str) -> Result<Self, String> {
        remove_stale(prefix);
        let n = MADE.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        run(Command::new("ip").args(["netns", "add", &name]))?;
        let dir = std::env::temp_dir().join(&name);
        // From here on, drop deletes the namespace whatever fails next.
        let namespace = TapNamespace {
            name,
            dir,
            keep_files_on_panic: false,
        };
        let _ = std::fs::remove_dir_all(&namespace.dir);
        std::fs::create_dir_all(&namespace.dir)
            .map_err(|e| format!("scratch folder {}: {e}", namespace.dir.display()))?;
        for args in [
            &["link", "set", "lo", "up"][..],
            &["tuntap", "add", "dev", tap, "mode", "tap"],
            &["addr", "add", host_cidr, "dev", tap],
            &["link", "set", tap, "up"],
        ] {
            run(Command::new("ip").args(["-n", &namespace.name]).args(args))?;
        }
        Ok(namespace)
    }

    /// Keep the scratch folder when the test panics, for its logs.
    pub fn keep_files_on_panic(mut self) -> Self {
        self.keep_files_on_panic = true;
        self
    }

    /// The namespace's name (`ip netns` lists it; `/var/run/netns/NAME` is its handle).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The scratch folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `program` to be run inside the namespace (`ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// `program` to be run inside the namespace through `nsenter`, which execs it: the child's
    /// PID is the program's own, so stopping the child by its PID stops the program.
    pub fn enter(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.name))
            .arg("--")
            .arg(program);
        command
    }

    /// `ip ARGS` inside the namespace; panics when it fails.
    pub fn ip(&self, args: &[&str]) -> Output {
        run_ok(self.command("ip").args(args))
    }

    /// Runs `program args` inside the namespace (through `nsenter`) and returns its output,
    /// whatever its exit status.
    pub fn output(&self, program: &str, args: &[&str]) -> Output {
        self.enter(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("cannot run {program} in {}: {error}", self.name))
    }

    /// GETs `url` with curl from inside the namespace: the body, or `None` when curl fails
    /// (it retries nothing: the caller decides).
    pub fn curl(&self, url: &str) -> Option<Vec<u8>> {
        let output = self.output("curl", &["--silent", "--fail", "--max-time", "30", url]);
        output.status.success().then_some(output.stdout)
    }

    /// `count` pings to `address`, 200 ms apart: how many were answered.
    pub fn ping(&self, address: &str, count: u32) -> u32 {
        let output = self.output(
            "ping",
            &["-c", &count.to_string(), "-i", "0.2", "-W", "3", address],
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .find(|l| l.contains("packets transmitted"))
            .and_then(|l| l.split(", ").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// The namespace's neighbour entry for `address` on `dev` (`ip neigh show`).
    pub fn neighbour(&self, address: Ipv4Addr, dev: &str) -> String {
        let output = run_ok(Command::new("ip").args([
            "-n",
            &self.name,
            "neigh",
            "show",
            &address.to_string(),
            "dev",
            dev,
        ]));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// Runs `f` on a thread that has entered the namespace, so that the sockets it makes
    /// live there.
    pub fn inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, String> {
        inside(&self.name, f)
    }
}

/// Opens the namespace `name` (`/run/netns/NAME`), for a thread to enter.
fn open(name: &str) -> Result<std::fs::File, String> {
    let path = Path::new("/run/netns").join(name);
    std::fs::File::open(&path).map_err(|e| format!("opening {}: {e}", path.display()))
}

/// Moves the calling thread into the namespace `handle`.
fn enter(name: &str, handle: &std::fs::File) -> Result<(), String> {
    rustix::thread::move_into_link_name_space(
        handle.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| format!("entering namespace {name}: {e}"))
}

/// Runs `f` on a thread that has entered the namespace `name` (its sockets, and those of
/// every thread it starts, live there).
pub fn inside<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    let handle = open(name)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                enter(name, &handle)?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|_| Err(format!("the thread in namespace {name} panicked")))
    })
}

/// Starts `f` on a thread that enters the namespace `name` first (a server that outlives
/// the call). Panics when the namespace cannot be opened; the thread panics when it cannot
/// enter it.
pub fn spawn_inside<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let handle = open(name).unwrap_or_else(|problem| panic!("{problem}"));
    let name = name.to_string();
    std::thread::spawn(move || {
        enter(&name, &handle).unwrap_or_else(|problem| panic!("{problem}"));
        f()
    })
}

/// Deletes the namespaces `PREFIX-PID-N` whose process no longer exists.
fn remove_stale(prefix: &str) {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// A server process (dnsmasq, pebble, radvd, ...) run inside a namespace, with its output
/// in a log file; killed by its PID and reaped on drop.
pub struct Daemon {
    child: Child,
}

impl Daemon {
    /// Starts `command` with its output (stdout and stderr) going to the file `log`.
    pub fn start(mut command: Command, log: &Path) -> Daemon {
        let file = std::fs::File::create(log).expect("creating the daemon's log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("duplicating the log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"));
        Daemon { child }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TapNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
        if self.keep_files_on_panic && std::thread::panicking() {
            eprintln!("(test files kept in {})", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs `command` to its end; panics with its output when it cannot run or fails.
pub fn run_ok(command: &mut Command) -> Output {
    run(command).unwrap_or_else(|problem| panic!("{problem}"))
}

/// Runs `command` to its end; its output, or what went wrong (with its output).
pub fn run(command: &mut Command) -> Result<Output, String> {
    let output = command
        .output()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!(
            "{command:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
