//! The host side of Bramble as a library: the `bramble` binary, the integration tests and the
//! benchmarks (bench/) share it.

pub mod bench_cmd;
pub mod board_rules;
pub mod check;
pub mod firmware;
pub mod flash;
pub mod image;
pub mod kernel;
pub mod kernel_id;
pub mod pack;
pub mod publish;
pub mod qemu_cmd;
pub mod report;
pub mod serve;

/// The workspace root (where `Cargo.toml` and `rust-toolchain.toml` live), found from this
/// crate's manifest directory at build time.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools/ has a parent")
        .to_path_buf()
}

/// `cargo` for a nested build of this workspace (the harness, the kernel, `cargo xtask test`):
/// the `CARGO` that runs us, in the workspace root, without what the calling cargo set for
/// its own package. Under `cargo run` or `cargo test` the environment carries
/// `CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, `OUT_DIR` and the like; build scripts such as ring's rerun
/// when those change, so passing them on rebuilt ring and everything above it in both the
/// nested and the next outer build. An inherited target directory or target is dropped too:
/// the workspace's own (and the aliases' own) apply.
pub fn nested_cargo() -> std::process::Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command.current_dir(workspace_root());
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(is_package_variable) {
            command.env_remove(key);
        }
    }
    command
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    command
}

/// Variables cargo sets for one package's build or run (not the user's own settings such as
/// `CARGO_HOME` or `CARGO_NET_OFFLINE`).
fn is_package_variable(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_BIN_EXE_")
        || key.starts_with("CARGO_CFG_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "OUT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_cargo_drops_the_callers_package_variables_only() {
        for key in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_BIN_EXE_bramble",
        ] {
            assert!(is_package_variable(key), "{key}");
        }
        for key in ["CARGO_HOME", "CARGO_NET_OFFLINE", "CARGO", "PATH"] {
            assert!(!is_package_variable(key), "{key}");
        }
        // Under `cargo test` this process has CARGO_MANIFEST_DIR; the nested command does not.
        let command = nested_cargo();
        let removed: Vec<_> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(key, _)| key.to_string_lossy().into_owned())
            .collect();
        assert!(
            removed.iter().any(|key| key == "CARGO_MANIFEST_DIR"),
            "{removed:?}"
        );
        assert!(
            removed.iter().any(|key| key == "CARGO_PKG_NAME"),
            "{removed:?}"
        );
    }
}
