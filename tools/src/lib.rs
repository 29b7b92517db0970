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
