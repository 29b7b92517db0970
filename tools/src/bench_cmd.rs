//! `bramble bench`: the benchmark harness (the `bramble-bench` crate under bench/) run from
//! the tool, with every argument passed on: `bramble bench --tap --levels 10,100,1000,10000`
//! boots Bramble and Linux + busybox in QEMU on a TAP link and judges every client;
//! `bramble bench --help` lists the harness's own flags. The harness is a separate crate (its
//! load generator, plots and namespaces are no part of the appliance's tool), so this builds
//! and runs it from the source tree, in release mode: a benchmark's own client must not be
//! the slow side of the measurement.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// Arguments of `bramble bench`: all of them go to the harness.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct BenchArgs {
    /// The harness's arguments (see `bramble bench --help`), for example `--tap --levels
    /// 10,100,1000,10000 --duration 60`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    pub args: Vec<OsString>,
}

/// The Cargo profile the harness is built with: `release` unless `BRAMBLE_BENCH_PROFILE`
/// names another (the tool's tests use `dev`, which `cargo test` has built already).
fn profile(env: impl Fn(&str) -> Option<OsString>) -> OsString {
    env("BRAMBLE_BENCH_PROFILE")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "release".into())
}

/// The command that runs the harness from the source tree at `root`.
fn cargo_command(root: &Path, profile: &OsString, args: &[OsString]) -> Command {
    // The workspace's own target directory and a clean package environment
    // (`crate::nested_cargo`), whatever the caller's environment says.
    let mut command = crate::nested_cargo();
    command
        .current_dir(root)
        .args([
            "run",
            "-q",
            "-p",
            "bramble-bench",
            "--bin",
            "bramble-bench",
            "--profile",
        ])
        .arg(profile)
        .arg("--")
        .args(args);
    command
}

/// A `bramble-bench` beside this executable (an installed pair), if there is one.
fn sibling_harness() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let sibling = exe.with_file_name(format!("bramble-bench{}", std::env::consts::EXE_SUFFIX));
    sibling.is_file().then_some(sibling)
}

/// Runs the harness with `args`, its output on this terminal; fails with its exit status.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let root = crate::workspace_root();
    let mut command = if root.join("bench/Cargo.toml").is_file() {
        cargo_command(&root, &profile(|key| std::env::var_os(key)), &args.args)
    } else if let Some(harness) = sibling_harness() {
        let mut command = Command::new(harness);
        command.args(&args.args);
        command
    } else {
        bail!(
            "the benchmark harness is built from the source tree ({}), which is gone, and no \
             bramble-bench is installed beside this bramble",
            root.display()
        );
    };
    let status = command
        .status()
        .with_context(|| format!("could not run {:?}", command.get_program()))?;
    if !status.success() {
        bail!("the benchmark harness failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_is_built_in_release_unless_told_otherwise() {
        assert_eq!(profile(|_| None), "release");
        assert_eq!(profile(|_| Some("".into())), "release");
        assert_eq!(profile(|_| Some("dev".into())), "dev");
    }

    #[test]
    fn every_argument_reaches_the_harness_in_order() {
        let args: Vec<OsString> = ["--tap", "--levels", "10,100", "--duration", "60"]
            .map(OsString::from)
            .into();
        let command = cargo_command(Path::new("/src"), &"release".into(), &args);
        let all: Vec<&std::ffi::OsStr> = command.get_args().collect();
        let split = all.iter().position(|a| *a == "--").unwrap();
        assert_eq!(
            &all[split + 1..],
            args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>()
        );
        assert!(
            all[..split]
                .windows(2)
                .any(|w| w[0] == "--profile" && w[1] == "release")
        );
        assert_eq!(command.get_current_dir(), Some(Path::new("/src")));
    }
}
