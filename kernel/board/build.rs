//! Passes the boot stub's linker script to the kernel link and records the git revision.
use std::process::Command;

fn main() {
    let linker_script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../boot/link.ld");
    println!("cargo:rerun-if-changed={}", linker_script.display());
    println!("cargo:rustc-link-arg-bins=-T{}", linker_script.display());
    let revision = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=10"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=BRAMBLE_GIT_REVISION={revision}");
    println!("cargo:rerun-if-env-changed=BRAMBLE_GIT_REVISION");
    for git_file in ["../../.git/HEAD", "../../.git/index"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(git_file);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}
