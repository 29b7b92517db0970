//! The kernel the tool boots and puts on cards when none is given.
//!
//! A `bramble` binary that lives in the source tree's `target/` (`cargo run`, `cargo test`)
//! builds the tree's kernel (`cargo kernel`, build-std for armv6-none-eabihf, then the flat
//! kernel.img the Pi firmware loads at 0x8000), as kernel developers want. Any other binary
//! (installed with `cargo install --path tools`, unpacked from a `cargo xtask dist` archive,
//! copied elsewhere) uses the kernel embedded in it when it was built (tools/build.rs); one
//! that carries none falls back to the tree it was built from, if that still exists.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

pub use crate::kernel_id::{LOAD_ADDRESS, kernel_id};

/// The kernel.img embedded at build time; empty in a debug build of the source tree.
const EMBEDDED_KERNEL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kernel.img"));

/// The embedded kernel's id (`Bramble <version> (<revision>)`), empty if none.
pub const EMBEDDED_KERNEL_ID: &str = env!("BRAMBLE_EMBEDDED_KERNEL_ID");

/// The tool's own version and revision.
pub const TOOL_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("BRAMBLE_TOOL_REVISION"),
    ")"
);

/// What `bramble --version` prints after the name: the tool's version and revision, and
/// which kernel it boots and puts on cards.
pub fn version_text() -> String {
    let kernel = match embedded_kernel() {
        Some(bytes) => format!(
            "embedded kernel: {} ({} bytes)",
            if EMBEDDED_KERNEL_ID.is_empty() {
                "a kernel.img without a Bramble id"
            } else {
                EMBEDDED_KERNEL_ID
            },
            bytes.len()
        ),
        None => format!(
            "kernel: none embedded; built from the source tree ({}) when needed",
            crate::workspace_root().display()
        ),
    };
    format!("{TOOL_VERSION}\n{kernel}")
}

/// The embedded kernel.img, if this binary carries one.
pub fn embedded_kernel() -> Option<&'static [u8]> {
    (!EMBEDDED_KERNEL.is_empty()).then_some(EMBEDDED_KERNEL)
}

/// The source tree this binary was built from, if it still holds the kernel's sources.
fn source_tree() -> Option<PathBuf> {
    let root = crate::workspace_root();
    (root.join("kernel/board/Cargo.toml").is_file() && root.join("rust-toolchain.toml").is_file())
        .then_some(root)
}

/// Does this binary live in the source tree's `target/` (a `cargo run` or `cargo test`
/// build)?
fn runs_from_the_tree(root: &Path) -> bool {
    let target = root.join("target");
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
        .zip(target.canonicalize().ok())
        .is_some_and(|(exe, target)| exe.starts_with(target))
}

/// Where the kernel comes from when none is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelOrigin {
    /// Built now from this source tree.
    SourceTree(PathBuf),
    /// The kernel.img embedded in this binary.
    Embedded,
}

/// Decides where the kernel comes from: the tree for a binary that runs from its
/// `target/`, else the embedded kernel, else the tree if it still exists.
pub fn kernel_origin() -> anyhow::Result<KernelOrigin> {
    let tree = source_tree();
    match (&tree, embedded_kernel()) {
        (Some(root), _) if runs_from_the_tree(root) => Ok(KernelOrigin::SourceTree(root.clone())),
        (_, Some(_)) => Ok(KernelOrigin::Embedded),
        (Some(root), None) => Ok(KernelOrigin::SourceTree(root.clone())),
        (None, None) => bail!(
            "this bramble carries no kernel and the source tree it was built from ({}) is \
             gone: give --kernel FILE, or install a release that carries one (`cargo install \
             --path tools`, `cargo xtask dist`)",
            crate::workspace_root().display()
        ),
    }
}

/// The kernel.img for a card or a boot when none is given: built now from the source tree,
/// or the embedded one (see [`kernel_origin`]).
pub fn kernel_image() -> anyhow::Result<Vec<u8>> {
    match kernel_origin()? {
        KernelOrigin::Embedded => Ok(embedded_kernel().unwrap_or_default().to_vec()),
        KernelOrigin::SourceTree(_) => {
            let built = build_kernel()?;
            std::fs::read(&built.raw).with_context(|| format!("reading {}", built.raw.display()))
        }
    }
}

/// A kernel to boot when none is given: the built ELF and kernel.img, or the embedded
/// kernel.img in a temporary file (removed when this is dropped).
pub struct DefaultKernel {
    /// The flat kernel.img.
    pub raw: PathBuf,
    /// The ELF, when the kernel was built from the tree.
    pub elf: Option<PathBuf>,
    _temporary: Option<tempfile::NamedTempFile>,
}

/// The kernel `bramble qemu` boots when none is given (see [`kernel_origin`]).
pub fn default_kernel() -> anyhow::Result<DefaultKernel> {
    use std::io::Write;
    match kernel_origin()? {
        KernelOrigin::SourceTree(_) => {
            let built = build_kernel()?;
            Ok(DefaultKernel {
                raw: built.raw,
                elf: Some(built.elf),
                _temporary: None,
            })
        }
        KernelOrigin::Embedded => {
            let mut file = tempfile::Builder::new()
                .prefix("bramble-kernel-")
                .suffix(".img")
                .tempfile()
                .context("creating a temporary file for the embedded kernel")?;
            file.write_all(embedded_kernel().unwrap_or_default())
                .context("writing the embedded kernel")?;
            Ok(DefaultKernel {
                raw: file.path().to_path_buf(),
                elf: None,
                _temporary: Some(file),
            })
        }
    }
}

/// The default site (site/default), from the source tree or, without one, from the copy
/// embedded at build time, written to a temporary folder. The folder lives as long as the
/// returned guard.
pub fn default_site() -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    let dir = crate::workspace_root().join("site/default");
    if dir.is_dir() {
        return Ok((dir, None));
    }
    const FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/default_site.rs"));
    let temporary = tempfile::Builder::new()
        .prefix("bramble-default-site-")
        .tempdir()
        .context("creating a folder for the default site")?;
    for (name, bytes) in FILES {
        std::fs::write(temporary.path().join(name), bytes)?;
    }
    Ok((temporary.path().to_path_buf(), Some(temporary)))
}

/// The two forms of a built kernel.
#[derive(Clone, Debug)]
pub struct KernelArtifacts {
    /// The ELF with symbols (for `-kernel`, gdb, addr2line).
    pub elf: PathBuf,
    /// The flat image starting at [`LOAD_ADDRESS`] (kernel.img on the SD card, `-bios`).
    pub raw: PathBuf,
}

/// Builds the kernel in release mode and writes kernel.img beside the ELF. Prints the image
/// size, a figure the project tracks.
pub fn build_kernel() -> anyhow::Result<KernelArtifacts> {
    let root = crate::workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The alias names its own target directory; an inherited one must not override it.
    let status = crate::nested_cargo()
        .arg("kernel")
        .current_dir(&root)
        .status()
        .with_context(|| format!("could not run {}", Path::new(&cargo).display()))?;
    if !status.success() {
        bail!(
            "the kernel build failed ({status}). If the toolchain is missing, run \
             `rustup toolchain install` in {} (it reads rust-toolchain.toml).",
            root.display()
        );
    }
    let dir = root.join("target/kernel/armv6-none-eabihf/release");
    let elf = dir.join("bramble-kernel");
    let raw = dir.join("kernel.img");
    let elf_bytes = std::fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
    let image = flat_image(&elf_bytes).context("turning the kernel ELF into kernel.img")?;
    write_unless_same(&raw, &image).with_context(|| format!("writing {}", raw.display()))?;
    eprintln!("kernel.img: {} bytes ({})", image.len(), raw.display());
    Ok(KernelArtifacts { elf, raw })
}

/// Writes `bytes` to `path` so that a reader never sees a partial file: nothing when the file
/// already holds them, else a temporary file beside it renamed over it. Tests that boot QEMU
/// build the kernel from several threads at once, and a QEMU started on a kernel.img that
/// another thread was rewriting booted a truncated kernel and never printed its ready line.
fn write_unless_same(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}-{serial}.tmp", std::process::id()));
    let temporary = path.with_file_name(name);
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

/// The loadable contents of a 32-bit little-endian ARM ELF as one flat image starting at
/// [`LOAD_ADDRESS`] (what `objcopy -O binary` produces), gaps zero-filled.
pub fn flat_image(elf: &[u8]) -> anyhow::Result<Vec<u8>> {
    crate::kernel_id::flat_image(elf).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF32 ARM file with the given (physical address, file bytes, memory size)
    /// loadable segments.
    fn elf(segments: &[(u32, &[u8], u32)]) -> Vec<u8> {
        let mut file = vec![0u8; 52];
        file[..6].copy_from_slice(b"\x7fELF\x01\x01");
        file[18..20].copy_from_slice(&40u16.to_le_bytes());
        file[28..32].copy_from_slice(&52u32.to_le_bytes());
        file[42..44].copy_from_slice(&32u16.to_le_bytes());
        file[44..46].copy_from_slice(&(segments.len() as u16).to_le_bytes());
        let data_start = 52 + 32 * segments.len();
        let mut data = Vec::new();
        for (address, bytes, memory_size) in segments {
            let mut header = [0u8; 32];
            header[0..4].copy_from_slice(&1u32.to_le_bytes());
            header[4..8].copy_from_slice(&((data_start + data.len()) as u32).to_le_bytes());
            header[8..12].copy_from_slice(&address.to_le_bytes());
            header[12..16].copy_from_slice(&address.to_le_bytes());
            header[16..20].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            header[20..24].copy_from_slice(&memory_size.to_le_bytes());
            file.extend_from_slice(&header);
            data.extend_from_slice(bytes);
        }
        file.extend_from_slice(&data);
        file
    }

    #[test]
    fn the_kernel_id_is_found_among_other_bytes() {
        let mut image = vec![0u8; 100];
        image.extend_from_slice(
            b"Bramble is here; Bramble 1.x (no); Bramble 0.1.0 (f083352769-dirty)",
        );
        image.extend_from_slice(b": a web server with no operating system\0more");
        assert_eq!(
            kernel_id(&image).as_deref(),
            Some("Bramble 0.1.0 (f083352769-dirty)")
        );
        assert_eq!(kernel_id(b"Bramble 0.1.0 (unterminated"), None);
        assert_eq!(kernel_id(b"no id at all"), None);
        assert_eq!(kernel_id(b""), None);
    }

    #[test]
    fn segments_are_laid_out_from_0x8000_with_gaps_zeroed() {
        let image = flat_image(&elf(&[
            (0x8010, b"data", 4),
            (0x8000, b"text", 4),
            (0x9000, b"", 0x1000), // bss: not stored
        ]))
        .unwrap();
        let mut expected = b"text".to_vec();
        expected.resize(16, 0);
        expected.extend_from_slice(b"data");
        assert_eq!(image, expected);
    }

    #[test]
    fn wrong_load_address_and_garbage_are_refused() {
        assert!(flat_image(&elf(&[(0x10000, b"text", 4)])).is_err());
        assert!(flat_image(b"not an elf at all, clearly not one....................").is_err());
        assert!(flat_image(&elf(&[])).is_err());
        let mut truncated = elf(&[(0x8000, b"text", 4)]);
        truncated.truncate(60);
        assert!(flat_image(&truncated).is_err());
    }
}
