//! A network namespace with a TAP device, made for one test and deleted when it ends.
//!
//! Tests that run the appliance (bramble-hosted, or QEMU with `--tap`) put its TAP device in
//! a namespace of their own, so that every address they use is inside it and nothing reaches
//! the host's networks. Needs root (or CAP_NET_ADMIN) and `ip` from iproute2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
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
        let n = MADE.fetch_add(1, Ordering::SeqCst);
        let name = format!("{prefix}-{}-{n}", std::process::id());
        run_ok(Command::new("ip").args(["netns", "add", &name]));
        let dir = std::env::temp_dir().join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch folder");
        let namespace = TapNamespace {
            name,
            dir,
            keep_files_on_panic: false,
        };
        namespace.ip(&["link", "set", "lo", "up"]);
        namespace.ip(&["tuntap", "add", "dev", tap, "mode", "tap"]);
        namespace.ip(&["addr", "add", host_cidr, "dev", tap]);
        namespace.ip(&["link", "set", tap, "up"]);
        namespace
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
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
