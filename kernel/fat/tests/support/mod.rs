//! Cards for the tests and the fuzz target: real volumes formatted by fatfs (as the image
//! tool does), and [`open_card`], which hands a card to embedded-sdmmc the way the kernel
//! does (open the volume and the root folder, read BRAMBLE.TXT and SITE.BIN).
#![allow(dead_code)] // each test binary uses part of it

use std::io::{Cursor, Write};

/// Sector size.
pub const SECTOR: usize = 512;
/// Where the partition starts, in sectors (1 MiB, as the image tool puts it).
pub const PARTITION_START: u32 = 2048;

/// A whole card image: MBR, then one FAT partition formatted by fatfs with `files`.
pub fn formatted_card(fat32: bool, partition_mib: u32, files: &[(&str, &[u8])]) -> Vec<u8> {
    let partition_sectors = partition_mib * 2048;
    let mut volume = vec![0u8; partition_sectors as usize * SECTOR];
    {
        let mut cursor = Cursor::new(&mut volume[..]);
        let mut options = fatfs::FormatVolumeOptions::new().volume_label(*b"BRAMBLE    ");
        options = options.fat_type(if fat32 {
            fatfs::FatType::Fat32
        } else {
            fatfs::FatType::Fat16
        });
        // FAT32 needs 65,525 clusters, FAT16 4,085: small volumes need small clusters.
        if fat32 || partition_mib < 16 {
            options = options.bytes_per_cluster(512);
        }
        fatfs::format_volume(&mut cursor, options).expect("format");
    }
    {
        let fs = fatfs::FileSystem::new(Cursor::new(&mut volume[..]), fatfs::FsOptions::new())
            .expect("mount");
        for (name, bytes) in files {
            let mut file = fs.root_dir().create_file(name).expect("create");
            file.write_all(bytes).expect("write");
        }
        fs.unmount().expect("unmount");
    }
    let mut card = mbr(
        if fat32 { 0x0C } else { 0x0E },
        PARTITION_START,
        partition_sectors,
    );
    card.resize(PARTITION_START as usize * SECTOR, 0);
    card.extend_from_slice(&volume);
    card
}

/// An MBR with one partition.
pub fn mbr(kind: u8, first_sector: u32, sectors: u32) -> Vec<u8> {
    let mut sector = vec![0u8; SECTOR];
    sector[446 + 4] = kind;
    sector[446 + 8..446 + 12].copy_from_slice(&first_sector.to_le_bytes());
    sector[446 + 12..446 + 16].copy_from_slice(&sectors.to_le_bytes());
    sector[510] = 0x55;
    sector[511] = 0xAA;
    sector
}

/// The card as the kernel's FAT library sees it: reads only.
struct MemoryCard<'a>(&'a [u8]);

/// A read past the end of the card (or a write).
#[derive(Debug)]
pub struct OutOfCard;

impl std::fmt::Display for OutOfCard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "outside the card")
    }
}

impl std::error::Error for OutOfCard {}

impl embedded_sdmmc::BlockDevice for MemoryCard<'_> {
    type Error = OutOfCard;

    fn read(
        &self,
        blocks: &mut [embedded_sdmmc::Block],
        start: embedded_sdmmc::BlockIdx,
    ) -> Result<(), OutOfCard> {
        let card = self.0;
        for (i, block) in blocks.iter_mut().enumerate() {
            let at = (start.0 as usize + i) * SECTOR;
            block
                .contents
                .copy_from_slice(card.get(at..at + SECTOR).ok_or(OutOfCard)?);
        }
        Ok(())
    }

    fn write(
        &self,
        _: &[embedded_sdmmc::Block],
        _: embedded_sdmmc::BlockIdx,
    ) -> Result<(), OutOfCard> {
        Err(OutOfCard)
    }

    fn num_blocks(&self) -> Result<embedded_sdmmc::BlockCount, OutOfCard> {
        Ok(embedded_sdmmc::BlockCount((self.0.len() / SECTOR) as u32))
    }
}

struct NoClock;

impl embedded_sdmmc::TimeSource for NoClock {
    fn get_timestamp(&self) -> embedded_sdmmc::Timestamp {
        embedded_sdmmc::Timestamp::from_fat(0x21, 0)
    }
}

/// What embedded-sdmmc read from a card.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// The volume and its root folder opened.
    pub root: bool,
    /// BRAMBLE.TXT's bytes, if it was read (at most 16 KiB, as the kernel reads).
    pub settings: Option<Vec<u8>>,
    /// SITE.BIN's bytes, if it was read (at most `site_limit`).
    pub site: Option<Vec<u8>>,
}

/// Opens `card` with embedded-sdmmc as the kernel does: after [`check`] accepted the card,
/// each file's directory entry is checked with `check_file_start` before the file is read (at
/// most `site_limit` bytes of SITE.BIN). Errors end the walk; a panic inside the library
/// propagates.
pub fn open_card(card: &[u8], site_limit: usize) -> Opened {
    match check(card) {
        Ok(volume) => open_with_library(card, site_limit, Some(&volume.boot_sector)),
        Err(_) => Opened::default(),
    }
}

/// Opens `card` with embedded-sdmmc without any check: what the kernel did before.
pub fn open_card_unchecked(card: &[u8], site_limit: usize) -> Opened {
    open_with_library(card, site_limit, None)
}

fn open_with_library(
    card: &[u8],
    site_limit: usize,
    checked: Option<&bramble_fat::BootSector>,
) -> Opened {
    let volumes: embedded_sdmmc::VolumeManager<_, _, 2, 2, 1> =
        embedded_sdmmc::VolumeManager::new_with_limits(MemoryCard(card), NoClock, 0);
    let mut opened = Opened::default();
    let Ok(volume) = volumes.open_volume(embedded_sdmmc::VolumeIdx(0)) else {
        return opened;
    };
    let Ok(root) = volume.open_root_dir() else {
        return opened;
    };
    opened.root = true;
    for (name, limit, out) in [
        ("BRAMBLE.TXT", 16 * 1024, &mut opened.settings),
        ("SITE.BIN", site_limit, &mut opened.site),
    ] {
        let Ok(entry) = root.find_directory_entry(name) else {
            continue;
        };
        // The kernel reads the raw entry back from the card the same way.
        let at = entry.entry_block.0 as usize * SECTOR + entry.entry_offset as usize;
        let raw = card.get(at..at + 32).unwrap_or(&[]);
        if checked.is_some_and(|boot| boot.check_file_entry(raw).is_err()) {
            continue;
        }
        let Ok(file) = root.open_file_in_dir(name, embedded_sdmmc::Mode::ReadOnly) else {
            continue;
        };
        let mut bytes = vec![0u8; (file.length() as usize).min(limit)];
        let mut filled = 0;
        while filled < bytes.len() {
            match file.read(&mut bytes[filled..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => filled += n,
            }
        }
        bytes.truncate(filled);
        *out = Some(bytes);
    }
    opened
}

/// Checks `card` with bramble-fat as the kernel does before handing it over.
pub fn check(card: &[u8]) -> Result<bramble_fat::FatVolume, bramble_fat::CardCheckError<()>> {
    bramble_fat::check_card((card.len() / SECTOR) as u64, |sector, buffer| {
        let at = usize::try_from(sector).map_err(|_| ())? * SECTOR;
        buffer.copy_from_slice(card.get(at..at + SECTOR).ok_or(())?);
        Ok(())
    })
}
