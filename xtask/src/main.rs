//! Project steps beyond plain cargo: `cargo xtask test [--all]` and `cargo xtask dist`.
//!
//! `cargo xtask test` runs the quick host tier (a plain `cargo test`); `cargo xtask test --all`
//! runs every tier, the QEMU, namespace and attack tests included (`cargo test-all`, the
//! alias in .cargo/config.toml that tools/test.sh runs). Further arguments go to cargo.
//!
//! `cargo xtask dist`, a release of the `bramble` tool that carries its kernel:
//!
//! 1. builds the kernel with the pinned toolchain (`cargo kernel`, rust-toolchain.toml) and
//!    writes kernel.img;
//! 2. builds the tool in release mode with that kernel.img embedded (`BRAMBLE_KERNEL_IMG`,
//!    read by tools/build.rs), both stamped with the same revision (`BRAMBLE_GIT_REVISION`), so
//!    `bramble --version` and the kernel's banner name the same commit;
//! 3. writes `target/dist/bramble-<version>-<revision>-<arch>-linux.tar.gz` (the binary,
//!    kernel.img, the README) and `SHA256SUMS` beside it (the archive and the files in it).
//!
//! The binary needs neither the source tree nor a Rust toolchain to run.

use anyhow::{Context, bail, ensure};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("dist") => dist(),
        Some("test") => test(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask test [--all] [CARGO ARGS...]   (--all: QEMU, namespace and \
                 attack tiers too)\n       cargo xtask dist   (a release archive with \
                 checksums in target/dist)"
            );
            std::process::exit(2);
        }
    }
}

/// `cargo test` (the host tier) or, with `--all` first, `cargo test-all` (every tier), with
/// the remaining arguments passed on; exits with cargo's status.
fn test(args: &[String]) -> anyhow::Result<()> {
    let (alias, rest) = match args.split_first() {
        Some((first, rest)) if first == "--all" => ("test-all", rest),
        _ => ("test", args),
    };
    let status = bramble::nested_cargo()
        .arg(alias)
        .args(rest)
        .status()
        .with_context(|| format!("cannot run cargo {alias}"))?;
    std::process::exit(status.code().unwrap_or(1));
}

/// The tree's `git describe`, the revision both the kernel and the tool are stamped with.
fn revision(root: &Path) -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=10"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn sha256_hex(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect())
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

fn dist() -> anyhow::Result<()> {
    let root = bramble::workspace_root();
    let revision = revision(&root);
    let version = env!("CARGO_PKG_VERSION");
    let dist = root.join("target/dist");
    std::fs::create_dir_all(&dist)?;

    // 1. The kernel, with the pinned toolchain, stamped with this revision.
    eprintln!("xtask dist: building the kernel ({revision})");
    let mut kernel_build = Command::new("cargo");
    kernel_build
        .arg("kernel")
        .current_dir(&root)
        .env("BRAMBLE_GIT_REVISION", &revision)
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    run(&mut kernel_build)?;
    let elf = root.join("target/kernel/armv6-none-eabihf/release/bramble-kernel");
    let image = bramble::kernel::flat_image(&std::fs::read(&elf)?)?;
    let kernel_id = bramble::kernel::kernel_id(&image).context("the kernel carries no id")?;
    ensure!(
        kernel_id.ends_with(&format!("({revision})")),
        "the kernel says {kernel_id}, not revision {revision}"
    );
    let kernel_path = dist.join("kernel.img");
    std::fs::write(&kernel_path, &image)?;
    eprintln!("xtask dist: {kernel_id}, {} bytes", image.len());

    // 2. The tool, with that kernel inside.
    eprintln!("xtask dist: building bramble (release) with it embedded");
    let mut tool_build = Command::new("cargo");
    tool_build
        .args(["build", "--release", "-p", "bramble", "--bin", "bramble"])
        .current_dir(&root)
        .env("BRAMBLE_KERNEL_IMG", &kernel_path)
        .env("BRAMBLE_GIT_REVISION", &revision)
        .env_remove("CARGO_TARGET_DIR");
    run(&mut tool_build)?;
    let binary = root.join("target/release/bramble");
    let version_line = Command::new(&binary).arg("--version").output()?;
    let version_text = String::from_utf8_lossy(&version_line.stdout).into_owned();
    ensure!(
        version_text.contains(&kernel_id),
        "the built tool does not name its kernel ({kernel_id}): {version_text}"
    );

    // 3. The archive and its checksums.
    let arch = std::env::consts::ARCH;
    let name = format!("bramble-{version}-{revision}-{arch}-linux");
    let staging = dist.join(&name);
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    std::fs::copy(&binary, staging.join("bramble"))?;
    std::fs::copy(&kernel_path, staging.join("kernel.img"))?;
    std::fs::copy(root.join("README.md"), staging.join("README.md"))?;
    let archive = dist.join(format!("{name}.tar.gz"));
    run(Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(&dist)
        .arg(&name))?;
    let mut sums = String::new();
    let entries: Vec<(PathBuf, String)> = vec![
        (archive.clone(), format!("{name}.tar.gz")),
        (staging.join("bramble"), format!("{name}/bramble")),
        (staging.join("kernel.img"), format!("{name}/kernel.img")),
        (staging.join("README.md"), format!("{name}/README.md")),
    ];
    for (path, label) in &entries {
        sums.push_str(&format!("{}  {label}\n", sha256_hex(path)?));
    }
    std::fs::write(dist.join("SHA256SUMS"), &sums)?;
    print!("{sums}");
    println!(
        "xtask dist: {} ({} bytes) and {}",
        archive.display(),
        std::fs::metadata(&archive)?.len(),
        dist.join("SHA256SUMS").display()
    );
    println!("{}", version_text.trim_end());
    Ok(())
}
