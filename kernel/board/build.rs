//! Passes the boot stub's linker script to the kernel link and records the git revision
//! (`git describe`, or BRAMBLE_GIT_REVISION when set: a release build names its commit).
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_string())
}

fn main() {
    let linker_script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../boot/link.ld");
    println!("cargo:rerun-if-changed={}", linker_script.display());
    println!("cargo:rustc-link-arg-bins=-T{}", linker_script.display());
    println!("cargo:rerun-if-env-changed=BRAMBLE_GIT_REVISION");
    let revision = std::env::var("BRAMBLE_GIT_REVISION")
        .ok()
        .filter(|value| !value.is_empty())
        .or_else(|| git(&["describe", "--always", "--dirty", "--abbrev=10"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BRAMBLE_GIT_REVISION={revision}");
    // The revision changes with HEAD and the index; in a worktree they live in its own git
    // directory, which `git rev-parse --git-path` finds.
    for name in ["HEAD", "index"] {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
