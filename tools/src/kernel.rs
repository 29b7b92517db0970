//! Building the kernel: `cargo kernel` (build-std for armv6-none-eabihf), then the flat
//! kernel.img the Pi firmware loads at 0x8000.

use anyhow::{Context, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the kernel is linked and where the firmware (or QEMU's `-bios`) loads kernel.img.
pub const LOAD_ADDRESS: u32 = 0x8000;

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
    let status = Command::new(&cargo)
        .arg("kernel")
        .current_dir(&root)
        // The alias names its own target directory; an inherited one must not override it.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
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
    std::fs::write(&raw, &image).with_context(|| format!("writing {}", raw.display()))?;
    eprintln!("kernel.img: {} bytes ({})", image.len(), raw.display());
    Ok(KernelArtifacts { elf, raw })
}

/// The kernel's identity, `Bramble <version> (<revision>)`, read from a kernel.img (or ELF):
/// the kernel keeps it as one string (`KERNEL_ID` in kernel/board) and starts its banner
/// with it. `None` for a file that holds none (not a Bramble kernel, or one built before the
/// string existed).
pub fn kernel_id(image: &[u8]) -> Option<String> {
    const PREFIX: &[u8] = b"Bramble ";
    let mut from = 0;
    while let Some(found) = image
        .get(from..)?
        .windows(PREFIX.len())
        .position(|window| window == PREFIX)
    {
        let start = from + found;
        from = start + 1;
        let rest = &image[start + PREFIX.len()..];
        let version_len = rest
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .count();
        let version = &rest[..version_len];
        if version.is_empty()
            || !version[0].is_ascii_digit()
            || !rest[version_len..].starts_with(b" (")
        {
            continue;
        }
        let revision = &rest[version_len + 2..];
        let revision_len = revision
            .iter()
            .take(64)
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
            .count();
        if revision_len == 0 || revision.get(revision_len) != Some(&b')') {
            continue;
        }
        let end = start + PREFIX.len() + version_len + 2 + revision_len + 1;
        return Some(String::from_utf8_lossy(&image[start..end]).into_owned());
    }
    None
}

/// The kernel.img that `bramble image` puts on a card when no --kernel is given: built now
/// from the source tree.
pub fn kernel_image() -> anyhow::Result<Vec<u8>> {
    let built = build_kernel()?;
    std::fs::read(&built.raw).with_context(|| format!("reading {}", built.raw.display()))
}

fn u16_at(bytes: &[u8], offset: usize) -> anyhow::Result<u16> {
    let field = bytes.get(offset..offset + 2).context("ELF truncated")?;
    Ok(u16::from_le_bytes([field[0], field[1]]))
}

fn u32_at(bytes: &[u8], offset: usize) -> anyhow::Result<u32> {
    let field = bytes.get(offset..offset + 4).context("ELF truncated")?;
    Ok(u32::from_le_bytes([field[0], field[1], field[2], field[3]]))
}

/// The loadable contents of a 32-bit little-endian ARM ELF as one flat image starting at
/// [`LOAD_ADDRESS`] (what `objcopy -O binary` produces), gaps zero-filled.
pub fn flat_image(elf: &[u8]) -> anyhow::Result<Vec<u8>> {
    ensure!(
        elf.len() >= 52 && elf[..4] == *b"\x7fELF",
        "not an ELF file"
    );
    ensure!(elf[4] == 1 && elf[5] == 1, "not a 32-bit little-endian ELF");
    ensure!(u16_at(elf, 18)? == 40, "not an ARM ELF");
    let program_headers = u32_at(elf, 28)? as usize;
    let entry_size = u16_at(elf, 42)? as usize;
    let count = u16_at(elf, 44)? as usize;
    let mut segments = Vec::new();
    for index in 0..count {
        let header = program_headers + index * entry_size;
        const PT_LOAD: u32 = 1;
        if u32_at(elf, header)? != PT_LOAD {
            continue;
        }
        let offset = u32_at(elf, header + 4)? as usize;
        let physical = u32_at(elf, header + 12)?;
        let file_size = u32_at(elf, header + 16)? as usize;
        if file_size == 0 {
            continue; // .bss and friends: zeroed at boot, not stored
        }
        let data = elf
            .get(offset..offset + file_size)
            .context("segment past end of ELF")?;
        segments.push((physical, data));
    }
    segments.sort_by_key(|(address, _)| *address);
    let first = segments
        .first()
        .context("the ELF has no loadable contents")?
        .0;
    ensure!(
        first == LOAD_ADDRESS,
        "the kernel starts at {first:#x}, but the firmware loads it at {LOAD_ADDRESS:#x}"
    );
    let mut image = Vec::new();
    for (address, data) in segments {
        let start = (address - LOAD_ADDRESS) as usize;
        ensure!(start >= image.len(), "overlapping segments at {address:#x}");
        ensure!(
            start - image.len() < 16 << 20,
            "a 16 MiB gap in the kernel: wrong linker script?"
        );
        image.resize(start, 0);
        image.extend_from_slice(data);
    }
    Ok(image)
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
