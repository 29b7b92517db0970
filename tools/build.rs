//! Embeds what an installed `bramble` needs without the source tree: the kernel it is released
//! with and the default site. Which kernel (see tools/src/kernel.rs):
//!
//! - `BRAMBLE_KERNEL_IMG=path`: that kernel.img (what `cargo xtask dist` does, and what a
//!   packager with a release's kernel.img does: no nightly needed);
//! - otherwise, in a release build (`cargo install --path tools`, `cargo build --release`):
//!   the kernel is built now with the pinned toolchain (`cargo kernel`, rust-toolchain.toml);
//!   if that toolchain is missing, the build stops with a message saying what to do;
//! - otherwise (a debug build in the source tree, `cargo run`, `cargo test`): none; the tool
//!   builds the tree's kernel when it needs one, as it always has.
//!
//! It also records the tool's revision (`BRAMBLE_GIT_REVISION`, or `git describe`).

#[path = "src/kernel_id.rs"]
#[allow(dead_code)] // the build script uses part of the module
mod kernel_id;

use std::path::{Path, PathBuf};
use std::process::Command;

fn git_describe(root: &Path) -> Option<String> {
    Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=10"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_string())
}

fn fail(message: &str) -> ! {
    eprintln!("\nerror: {message}\n");
    std::process::exit(1);
}

/// Builds the kernel with the toolchain rust-toolchain.toml pins, as `cargo kernel` from the
/// workspace root, with this build's own cargo settings kept away from it.
fn build_kernel(root: &Path) -> Vec<u8> {
    for watched in [
        "boot",
        "kernel",
        "site/src",
        "site/Cargo.toml",
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
        "rust-toolchain.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    let mut command = Command::new("cargo");
    command.arg("kernel").current_dir(root);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let inherited =
            (key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_MAKEFLAGS")
                || key.starts_with("RUSTC")
                || key.starts_with("RUSTDOC")
                || matches!(
                    key.as_str(),
                    "RUSTFLAGS"
                        | "RUSTUP_TOOLCHAIN"
                        | "TARGET"
                        | "HOST"
                        | "PROFILE"
                        | "OUT_DIR"
                        | "OPT_LEVEL"
                        | "DEBUG"
                        | "NUM_JOBS"
                );
        if inherited && key != "BRAMBLE_GIT_REVISION" {
            command.env_remove(&key);
        }
    }
    let status = command.status().unwrap_or_else(|error| {
        fail(&format!(
            "bramble embeds the kernel it is released with, and cannot run cargo to build it \
             ({error}). Set BRAMBLE_KERNEL_IMG to a kernel.img (a release archive has one), or \
             build with `cargo xtask dist`."
        ))
    });
    if !status.success() {
        fail(&format!(
            "bramble embeds the kernel it is released with; building it needs the pinned \
             nightly toolchain with rust-src (run `rustup toolchain install` in {}: it reads \
             rust-toolchain.toml). Or set BRAMBLE_KERNEL_IMG=path/to/kernel.img (the one in a \
             release archive) to embed a kernel without building it.",
            root.display()
        ))
    }
    let elf = root.join("target/kernel/armv6-none-eabihf/release/bramble-kernel");
    let bytes = std::fs::read(&elf)
        .unwrap_or_else(|error| fail(&format!("cannot read {}: {error}", elf.display())));
    kernel_id::flat_image(&bytes)
        .unwrap_or_else(|error| fail(&format!("{}: {error}", elf.display())))
}

/// `default_site.rs`: the default site's files, so `bramble image` and `bramble qemu` have
/// it without the source tree.
fn embed_default_site(root: &Path, out: &Path) {
    let dir = root.join("site/default");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut source = String::from("&[\n");
    for name in names {
        source.push_str(&format!(
            "    ({name:?}, include_bytes!({:?}).as_slice()),\n",
            dir.join(&name).display().to_string()
        ));
    }
    source.push_str("]\n");
    std::fs::write(out.join("default_site.rs"), source).expect("writing default_site.rs");
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest
        .parent()
        .expect("tools/ has a parent")
        .to_path_buf();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/kernel_id.rs");
    println!("cargo:rerun-if-env-changed=BRAMBLE_KERNEL_IMG");
    println!("cargo:rerun-if-env-changed=BRAMBLE_GIT_REVISION");
    let revision = std::env::var("BRAMBLE_GIT_REVISION")
        .ok()
        .filter(|value| !value.is_empty())
        .or_else(|| git_describe(&root))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BRAMBLE_TOOL_REVISION={revision}");

    let given = std::env::var_os("BRAMBLE_KERNEL_IMG").filter(|value| !value.is_empty());
    let kernel = match given {
        Some(path) => {
            let path = PathBuf::from(path);
            println!("cargo:rerun-if-changed={}", path.display());
            let bytes = std::fs::read(&path).unwrap_or_else(|error| {
                fail(&format!("BRAMBLE_KERNEL_IMG={}: {error}", path.display()))
            });
            if bytes.starts_with(b"\x7fELF") {
                fail(&format!(
                    "BRAMBLE_KERNEL_IMG={} is an ELF; give the flat kernel.img",
                    path.display()
                ));
            }
            bytes
        }
        None if std::env::var("PROFILE").as_deref() == Ok("release") => build_kernel(&root),
        None => Vec::new(),
    };
    std::fs::write(out.join("kernel.img"), &kernel).expect("writing kernel.img to OUT_DIR");
    let id = kernel_id::kernel_id(&kernel).unwrap_or_default();
    if !kernel.is_empty() && id.is_empty() {
        println!("cargo:warning=the embedded kernel.img carries no Bramble id string");
    }
    println!("cargo:rustc-env=BRAMBLE_EMBEDDED_KERNEL_ID={id}");
    embed_default_site(&root, &out);
}
