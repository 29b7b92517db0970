//! What the host tool reads from a kernel without building it, shared with tools/build.rs
//! (which embeds the release kernel): the id string the banner starts with, and the flat
//! kernel.img made from the ELF. Only `std`, so the build script can include it.

/// Where the kernel is linked and where the firmware (or QEMU's `-bios`) loads kernel.img.
pub const LOAD_ADDRESS: u32 = 0x8000;

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

fn u16_at(bytes: &[u8], offset: usize) -> Result<u16, String> {
    let field = bytes.get(offset..offset + 2).ok_or("ELF truncated")?;
    Ok(u16::from_le_bytes([field[0], field[1]]))
}

fn u32_at(bytes: &[u8], offset: usize) -> Result<u32, String> {
    let field = bytes.get(offset..offset + 4).ok_or("ELF truncated")?;
    Ok(u32::from_le_bytes([field[0], field[1], field[2], field[3]]))
}

/// The loadable contents of a 32-bit little-endian ARM ELF as one flat image starting at
/// [`LOAD_ADDRESS`] (what `objcopy -O binary` produces), gaps zero-filled.
pub fn flat_image(elf: &[u8]) -> Result<Vec<u8>, String> {
    if elf.len() < 52 || elf[..4] != *b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if elf[4] != 1 || elf[5] != 1 {
        return Err("not a 32-bit little-endian ELF".into());
    }
    if u16_at(elf, 18)? != 40 {
        return Err("not an ARM ELF".into());
    }
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
            .ok_or("segment past end of ELF")?;
        segments.push((physical, data));
    }
    segments.sort_by_key(|(address, _)| *address);
    let first = segments
        .first()
        .ok_or("the ELF has no loadable contents")?
        .0;
    if first != LOAD_ADDRESS {
        return Err(format!(
            "the kernel starts at {first:#x}, but the firmware loads it at {LOAD_ADDRESS:#x}"
        ));
    }
    let mut image = Vec::new();
    for (address, data) in segments {
        let start = (address - LOAD_ADDRESS) as usize;
        if start < image.len() {
            return Err(format!("overlapping segments at {address:#x}"));
        }
        if start - image.len() >= 16 << 20 {
            return Err("a 16 MiB gap in the kernel: wrong linker script?".into());
        }
        image.resize(start, 0);
        image.extend_from_slice(data);
    }
    Ok(image)
}
