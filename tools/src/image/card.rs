//! Reading a card image back: the kernel its firmware would start, found through the MBR,
//! the FAT partition (the `fatfs` crate) and `kernel=` in config.txt, so that `bramble qemu
//! --image` boots what will be flashed.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::disk::{PartitionStream, SECTOR_BYTES};

/// Why the kernel could not be read from a card image.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// The file could not be read.
    #[error("cannot read the card image {path}: {source}")]
    Io {
        /// The card image.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// No MBR with a FAT partition.
    #[error(
        "{path} has no FAT boot partition ({problem}): is it an SD card image made by \
         `bramble image`? Pass --kernel FILE to boot a kernel of your own with it"
    )]
    NoBootPartition {
        /// The card image.
        path: PathBuf,
        /// What was wrong.
        problem: String,
    },
    /// The FAT partition does not read.
    #[error("the boot partition of {path} does not read as FAT: {source}")]
    BadFat {
        /// The card image.
        path: PathBuf,
        /// What fatfs said.
        source: io::Error,
    },
    /// The kernel config.txt names is not there.
    #[error(
        "{path} has no {name} in its boot partition (config.txt names it): pass --kernel FILE, \
         or rebuild the card with `bramble image`"
    )]
    NoKernel {
        /// The card image.
        path: PathBuf,
        /// The file that was looked for.
        name: String,
    },
}

/// The first MBR partition entry of type FAT16 or FAT32: (first byte, length in bytes).
fn boot_partition(mbr: &[u8; 512]) -> Result<(u64, u64), String> {
    if mbr[510..512] != [0x55, 0xAA] {
        return Err("no MBR boot signature".into());
    }
    for index in 0..4 {
        let entry = &mbr[446 + 16 * index..446 + 16 * (index + 1)];
        // FAT12, FAT16 (small, large, LBA), FAT32 (CHS, LBA).
        if ![0x01, 0x04, 0x06, 0x0b, 0x0c, 0x0e].contains(&entry[4]) {
            continue;
        }
        let first = u32::from_le_bytes([entry[8], entry[9], entry[10], entry[11]]);
        let sectors = u32::from_le_bytes([entry[12], entry[13], entry[14], entry[15]]);
        if first == 0 || sectors == 0 {
            return Err(format!("partition {} is empty", index + 1));
        }
        return Ok((
            u64::from(first) * SECTOR_BYTES,
            u64::from(sectors) * SECTOR_BYTES,
        ));
    }
    Err("no FAT partition in the partition table".into())
}

/// The kernel file `config.txt` names (`kernel=`; the last line wins, as in the firmware),
/// `kernel.img` without one. Lines inside a conditional section other than `[all]` and
/// `[pi1]`/`[pi0]` (the BCM2835 boards) are skipped.
pub fn kernel_name(config_txt: &str) -> String {
    let mut name = super::KERNEL_NAME.to_string();
    let mut applies = true;
    for line in config_txt.lines() {
        let line = line.trim();
        if let Some(section) = line.strip_prefix('[') {
            let section = section.trim_end_matches(']').trim().to_ascii_lowercase();
            applies = matches!(section.as_str(), "all" | "pi1" | "pi0");
            continue;
        }
        if !applies || line.starts_with('#') {
            continue;
        }
        if let Some((key, value)) = line.split_once('=')
            && key.trim() == "kernel"
            && !value.trim().is_empty()
        {
            name = value.trim().to_string();
        }
    }
    name
}

/// Reads `name` from the root folder of the boot partition of the card image at `path`;
/// `None` if the partition holds no such file.
pub fn read_boot_file(path: &Path, name: &str) -> Result<Option<Vec<u8>>, CardError> {
    let io_error = |source| CardError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io_error)?;
    let mut mbr = [0u8; 512];
    file.read_exact(&mut mbr).map_err(|source| {
        if source.kind() == io::ErrorKind::UnexpectedEof {
            CardError::NoBootPartition {
                path: path.to_path_buf(),
                problem: "the file is shorter than one sector".into(),
            }
        } else {
            io_error(source)
        }
    })?;
    let (start, len) = boot_partition(&mbr).map_err(|problem| CardError::NoBootPartition {
        path: path.to_path_buf(),
        problem,
    })?;
    let file_len = file.seek(SeekFrom::End(0)).map_err(io_error)?;
    if start.checked_add(len).is_none_or(|end| end > file_len) {
        return Err(CardError::NoBootPartition {
            path: path.to_path_buf(),
            problem: format!("the partition ends past the file's {file_len} bytes"),
        });
    }
    let bad_fat = |source| CardError::BadFat {
        path: path.to_path_buf(),
        source,
    };
    let mut partition = PartitionStream::new(&mut file, start, len);
    let fs = fatfs::FileSystem::new(&mut partition, fatfs::FsOptions::new()).map_err(bad_fat)?;
    let Ok(mut found) = fs.root_dir().open_file(name) else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    found.read_to_end(&mut bytes).map_err(bad_fat)?;
    Ok(Some(bytes))
}

/// Is the file at `path` an SD card image (an MBR with a FAT partition), rather than
/// something else (a site image, a folder)?
pub fn is_card_image(path: &Path) -> bool {
    let mut mbr = [0u8; 512];
    File::open(path)
        .and_then(|mut file| file.read_exact(&mut mbr))
        .is_ok_and(|()| boot_partition(&mbr).is_ok())
}

/// Reads the kernel that the card image at `path` boots: its name and bytes.
pub fn read_kernel(path: &Path) -> Result<(String, Vec<u8>), CardError> {
    let config = read_boot_file(path, super::CONFIG_NAME)?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let name = kernel_name(&config);
    let kernel = read_boot_file(path, &name)?.ok_or_else(|| CardError::NoKernel {
        path: path.to_path_buf(),
        name: name.clone(),
    })?;
    Ok((name, kernel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_txt_names_the_kernel() {
        assert_eq!(kernel_name(""), "kernel.img");
        assert_eq!(kernel_name(super::super::CONFIG_TXT), "kernel.img");
        assert_eq!(kernel_name("kernel=a.img\nkernel = b.img\n"), "b.img");
        assert_eq!(kernel_name("#kernel=a.img\n"), "kernel.img");
        assert_eq!(
            kernel_name("kernel=a.img\n[pi4]\nkernel=kernel8.img\n[all]\n"),
            "a.img"
        );
        assert_eq!(kernel_name("[pi1]\nkernel=old.img\n"), "old.img");
    }

    #[test]
    fn partition_table_problems_are_named() {
        let mut mbr = [0u8; 512];
        assert!(boot_partition(&mbr).unwrap_err().contains("signature"));
        mbr[510] = 0x55;
        mbr[511] = 0xAA;
        assert!(
            boot_partition(&mbr)
                .unwrap_err()
                .contains("no FAT partition")
        );
        mbr[446 + 4] = 0x0c;
        assert!(boot_partition(&mbr).unwrap_err().contains("empty"));
        mbr[446 + 8] = 0x00;
        mbr[446 + 9] = 0x08; // LBA 2048
        mbr[446 + 12] = 0x10;
        assert_eq!(boot_partition(&mbr), Ok((2048 * 512, 16 * 512)));
    }
}
