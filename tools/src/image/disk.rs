//! The SD card image on disk: an MBR partition table, one FAT16/FAT32 partition, and the
//! certificate store's small partition before it (type 0xDA: a label block and a zeroed
//! region, the only blocks the kernel ever writes; see `bramble_fat::store_region`), written
//! with the `mbrman` and `fatfs` crates.

use bramble_hal::calendar::UtcDateTime;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Bytes per sector, the only size SD cards and QEMU's SDHCI model use.
pub const SECTOR_BYTES: u64 = 512;

/// Where the partition starts: 1 MiB, the usual alignment to SD card erase blocks.
pub const PARTITION_START_BYTES: u64 = 1024 * 1024;

/// Where the certificate store's partition starts (its label block), in sectors: in the gap
/// between the MBR and the FAT partition.
pub const STORE_FIRST_SECTOR: u32 = bramble_fat::store_region::DEFAULT_STORE_FIRST_SECTOR;

/// Blocks of the certificate store's region (after its label).
pub const STORE_REGION_BLOCKS: u32 = bramble_fat::store_region::DEFAULT_STORE_REGION_BLOCKS;

/// The smallest image Bramble writes (enough for firmware, kernel and a small site).
pub const MIN_IMAGE_BYTES: u64 = 32 * MIB;

/// Images from this size on get FAT32; smaller ones FAT16 (FAT32 needs at least 65,525
/// clusters, and small FAT16 volumes waste less space on a little card).
pub const FAT32_FROM_BYTES: u64 = 128 * MIB;

/// The largest image Bramble writes: MBR partitions end at 2 TiB, and no Pi B+ site needs
/// more than a few hundred MiB anyway.
pub const MAX_IMAGE_BYTES: u64 = 64 * 1024 * MIB;

/// The volume label of the boot partition, 11 bytes padded with spaces.
pub const VOLUME_LABEL: [u8; 11] = *b"BRAMBLE    ";

const MIB: u64 = 1024 * 1024;

/// Which FAT variant the partition holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FatKind {
    /// FAT16, for images under [`FAT32_FROM_BYTES`].
    Fat16,
    /// FAT32.
    Fat32,
}

impl FatKind {
    /// The MBR partition type byte: 0x0E (FAT16, LBA) or 0x0C (FAT32, LBA). Both are what the
    /// Pi's boot ROM and embedded-sdmmc look for.
    pub fn partition_type(self) -> u8 {
        match self {
            FatKind::Fat16 => 0x0E,
            FatKind::Fat32 => 0x0C,
        }
    }

    fn fatfs_type(self) -> fatfs::FatType {
        match self {
            FatKind::Fat16 => fatfs::FatType::Fat16,
            FatKind::Fat32 => fatfs::FatType::Fat32,
        }
    }
}

/// The shape of an image: its total size and where its one partition lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Total image size in bytes, a power of two.
    pub image_bytes: u64,
    /// Offset of the partition in bytes.
    pub partition_start: u64,
    /// Length of the partition in bytes (to the end of the image).
    pub partition_bytes: u64,
    /// The FAT variant.
    pub fat: FatKind,
    /// Blocks of each site slot; 0: no slots (SITE.BIN on the FAT partition). With slots,
    /// their partition (`bramble_fat::site_slots`) ends the card and the FAT partition
    /// stops before it.
    pub slot_blocks: u32,
}

impl Layout {
    /// The layout of an image of exactly `image_bytes`, which must be a power of two from
    /// [`MIN_IMAGE_BYTES`] to [`MAX_IMAGE_BYTES`].
    pub fn with_size(image_bytes: u64) -> Result<Layout, DiskError> {
        if !image_bytes.is_power_of_two()
            || !(MIN_IMAGE_BYTES..=MAX_IMAGE_BYTES).contains(&image_bytes)
        {
            return Err(DiskError::BadSize { bytes: image_bytes });
        }
        let fat = if image_bytes >= FAT32_FROM_BYTES {
            FatKind::Fat32
        } else {
            FatKind::Fat16
        };
        Ok(Layout {
            image_bytes,
            partition_start: PARTITION_START_BYTES,
            partition_bytes: image_bytes - PARTITION_START_BYTES,
            fat,
            slot_blocks: 0,
        })
    }

    /// This layout with two site slots of `slot_bytes` each (a whole number of MiB) at the
    /// end of the card, the FAT partition shortened to make room.
    pub fn with_slots(mut self, slot_bytes: u64) -> Result<Layout, DiskError> {
        let slot_blocks = u32::try_from(slot_bytes / SECTOR_BYTES)
            .ok()
            .filter(|&blocks| {
                slot_bytes.is_multiple_of(MIB)
                    && (bramble_fat::site_slots::MIN_SLOT_BLOCKS
                        ..=bramble_fat::site_slots::MAX_SLOT_BLOCKS)
                        .contains(&blocks)
            })
            .ok_or(DiskError::BadSlotSize { bytes: slot_bytes })?;
        let slots_bytes =
            bramble_fat::site_slots::Slots::partition_sectors(slot_blocks) * SECTOR_BYTES;
        // The FAT partition keeps at least the smallest image's room.
        if self.partition_bytes < slots_bytes + (MIN_IMAGE_BYTES - PARTITION_START_BYTES) {
            return Err(DiskError::TooSmall {
                image_bytes: self.image_bytes,
                needed_bytes: MIN_IMAGE_BYTES + slots_bytes,
            });
        }
        self.partition_bytes -= slots_bytes;
        self.slot_blocks = slot_blocks;
        Ok(self)
    }

    /// The slot partition's first sector (0 without slots).
    pub fn slots_first_lba(&self) -> u32 {
        if self.slot_blocks == 0 {
            return 0;
        }
        ((self.partition_start + self.partition_bytes) / SECTOR_BYTES) as u32
    }

    /// The smallest layout whose partition holds `files`, with room to spare for the file
    /// system's own tables.
    pub fn smallest_for(files: &[BootFile]) -> Result<Layout, DiskError> {
        Layout::smallest_with(files, 0)
    }

    /// The smallest layout whose FAT partition holds `files` and which has room for two site
    /// slots of `slot_bytes` each (none for 0).
    pub fn smallest_with(files: &[BootFile], slot_bytes: u64) -> Result<Layout, DiskError> {
        let slots = if slot_bytes == 0 {
            0
        } else {
            bramble_fat::site_slots::Slots::partition_sectors((slot_bytes / SECTOR_BYTES) as u32)
                * SECTOR_BYTES
        };
        let needed = needed_image_bytes(files).max(MIN_IMAGE_BYTES) + slots;
        let size = needed.next_power_of_two();
        let layout = Layout::with_size(size).map_err(|_| DiskError::TooSmall {
            image_bytes: MAX_IMAGE_BYTES,
            needed_bytes: needed,
        })?;
        if slot_bytes == 0 {
            Ok(layout)
        } else {
            layout.with_slots(slot_bytes)
        }
    }

    /// The partition's first sector.
    pub fn partition_first_lba(&self) -> u32 {
        (self.partition_start / SECTOR_BYTES) as u32
    }

    /// The partition's length in sectors.
    pub fn partition_sectors(&self) -> u32 {
        (self.partition_bytes / SECTOR_BYTES) as u32
    }
}

/// A file for the root folder of the boot partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootFile {
    /// Its 8.3 name, e.g. `kernel.img`.
    pub name: String,
    /// Its contents.
    pub bytes: Vec<u8>,
}

/// A generous estimate of the image size `files` need: the partition offset, each file
/// rounded up to the largest cluster size used (32 KiB), the FAT tables (4 bytes per 512-byte
/// cluster, twice) and root folder, plus 1 MiB of slack.
pub fn needed_image_bytes(files: &[BootFile]) -> u64 {
    const CLUSTER: u64 = 32 * 1024;
    let data: u64 = files
        .iter()
        .map(|f| (f.bytes.len() as u64).div_ceil(CLUSTER) * CLUSTER)
        .sum();
    let tables = data / 512 * 4 * 2;
    PARTITION_START_BYTES + data + tables + MIB
}

/// Everything that can go wrong writing an image.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// The requested size is not a power of two in the allowed range.
    #[error(
        "an image must be a power of two from {} to {} MiB (QEMU's SD card needs a power of \
         two); {} bytes is not",
        MIN_IMAGE_BYTES / MIB,
        MAX_IMAGE_BYTES / MIB,
        bytes
    )]
    BadSize {
        /// The size asked for, in bytes.
        bytes: u64,
    },
    /// The files do not fit in an image of the requested size.
    #[error(
        "the files need an image of about {} MiB, more than the {} MiB asked for; give a \
         larger --size (a power of two) or leave it out",
        needed_bytes.div_ceil(MIB),
        image_bytes / MIB
    )]
    TooSmall {
        /// The image size, in bytes.
        image_bytes: u64,
        /// The estimated size needed, in bytes.
        needed_bytes: u64,
    },
    /// The slot size is not a whole number of MiB from 1 MiB to 4 GiB.
    #[error("a site slot must be a whole number of MiB from 1 to 4095; {bytes} bytes is not")]
    BadSlotSize {
        /// The size asked for, in bytes.
        bytes: u64,
    },
    /// The site image does not fit in a slot.
    #[error(
        "the site image is {site_bytes} bytes, more than a slot's {slot_bytes}; give a larger \
         --slot-mib"
    )]
    SiteLargerThanSlot {
        /// The site image's length.
        site_bytes: u64,
        /// A slot's length.
        slot_bytes: u64,
    },
    /// A file name is not a valid 8.3 name (a programming error in the caller).
    #[error("{0:?} is not an 8.3 file name")]
    BadName(String),
    /// Writing the output failed.
    #[error("writing {path}: {source}")]
    Io {
        /// The file being written.
        path: PathBuf,
        /// What the OS or the FAT writer said.
        source: io::Error,
    },
    /// Writing the partition table failed.
    #[error("writing the partition table of {path}: {message}")]
    PartitionTable {
        /// The file being written.
        path: PathBuf,
        /// What mbrman said.
        message: String,
    },
}

/// Whether `name` is a valid 8.3 name: 1-8 characters, a dot, 1-3 characters, from letters,
/// digits and `_`-`~` style punctuation allowed in short names (we only need `_`).
pub fn is_short_name(name: &str) -> bool {
    let ok = |part: &str, max: usize| {
        !part.is_empty()
            && part.len() <= max
            && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    matches!(name.split_once('.'), Some((stem, ext)) if ok(stem, 8) && ok(ext, 3))
}

/// Writes the image to `path`: MBR, one FAT partition, `files` in its root folder. The image
/// is built in `path` with `.partial` added and renamed into place when complete, so a failed
/// run leaves no half-written image under the final name. `disk_signature` is the MBR's disk
/// signature and, read little-endian, the FAT volume ID.
pub fn write_image(
    path: &Path,
    layout: &Layout,
    files: &[BootFile],
    disk_signature: [u8; 4],
) -> Result<(), DiskError> {
    write_image_with_slots(path, layout, files, None, disk_signature)
}

/// What goes into the site slots of a layout that has them: the site for slot A and the
/// owner's publish key for the label.
#[derive(Clone, Copy, Debug)]
pub struct SlotContents<'a> {
    /// The site image, the live site of slot A at version 0.
    pub site: &'a [u8],
    /// The owner's Ed25519 publish key; `None` leaves publishing off.
    pub publish_key: Option<&'a [u8; 32]>,
}

/// [`write_image`], with the site slots of `layout` (if any) filled from `slots`.
pub fn write_image_with_slots(
    path: &Path,
    layout: &Layout,
    files: &[BootFile],
    slots: Option<SlotContents<'_>>,
    disk_signature: [u8; 4],
) -> Result<(), DiskError> {
    if let Some(contents) = &slots {
        let slot_bytes = u64::from(layout.slot_blocks) * SECTOR_BYTES;
        if contents.site.len() as u64 > slot_bytes {
            return Err(DiskError::SiteLargerThanSlot {
                site_bytes: contents.site.len() as u64,
                slot_bytes,
            });
        }
    }
    if let Some(bad) = files.iter().find(|f| !is_short_name(&f.name)) {
        return Err(DiskError::BadName(bad.name.clone()));
    }
    let needed_bytes = needed_image_bytes(files);
    if needed_bytes > layout.image_bytes {
        return Err(DiskError::TooSmall {
            image_bytes: layout.image_bytes,
            needed_bytes,
        });
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let io_error = |source| DiskError::Io {
        path: path.to_path_buf(),
        source,
    };

    let result = (|| {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&partial)
            .map_err(io_error)?;
        // Sparse: the zeros of an empty card cost no disk space here.
        file.set_len(layout.image_bytes).map_err(io_error)?;
        write_partition_table(&mut file, layout, disk_signature).map_err(|message| {
            DiskError::PartitionTable {
                path: path.to_path_buf(),
                message,
            }
        })?;
        if let Some(contents) = slots {
            write_slots(&mut file, layout, contents).map_err(io_error)?;
        }
        write_file_system(&mut file, layout, files, u32::from_le_bytes(disk_signature)).map_err(
            |source| {
                if is_out_of_space(&source) {
                    DiskError::TooSmall {
                        image_bytes: layout.image_bytes,
                        needed_bytes,
                    }
                } else {
                    io_error(source)
                }
            },
        )?;
        file.sync_all().map_err(io_error)?;
        fs::rename(&partial, path).map_err(io_error)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&partial);
    }
    result
}

fn is_out_of_space(error: &io::Error) -> bool {
    // fatfs reports a full volume as an `Other` error with this text.
    error.to_string().contains("No space left")
}

fn write_partition_table(
    file: &mut File,
    layout: &Layout,
    disk_signature: [u8; 4],
) -> Result<(), String> {
    let mut mbr = mbrman::MBR::new_from(file, SECTOR_BYTES as u32, disk_signature)
        .map_err(|e| e.to_string())?;
    let first = layout.partition_first_lba();
    let last = first + layout.partition_sectors() - 1;
    mbr[1] = mbrman::MBRPartitionEntry {
        boot: mbrman::BOOT_ACTIVE,
        first_chs: chs_of(first),
        sys: layout.fat.partition_type(),
        last_chs: chs_of(last),
        starting_lba: first,
        sectors: layout.partition_sectors(),
    };
    // The certificate store: its label block and region, in the gap before the FAT
    // partition, so the FAT partition is where it always was.
    let store_first = STORE_FIRST_SECTOR;
    let store_sectors = STORE_REGION_BLOCKS + 1;
    mbr[2] = mbrman::MBRPartitionEntry {
        boot: mbrman::BOOT_INACTIVE,
        first_chs: chs_of(store_first),
        sys: bramble_fat::store_region::STORE_PARTITION_TYPE,
        last_chs: chs_of(store_first + store_sectors - 1),
        starting_lba: store_first,
        sectors: store_sectors,
    };
    if layout.slot_blocks > 0 {
        let first = layout.slots_first_lba();
        let sectors = bramble_fat::site_slots::Slots::partition_sectors(layout.slot_blocks) as u32;
        mbr[3] = mbrman::MBRPartitionEntry {
            boot: mbrman::BOOT_INACTIVE,
            first_chs: chs_of(first),
            sys: bramble_fat::site_slots::SLOTS_PARTITION_TYPE,
            last_chs: chs_of(first + sectors - 1),
            starting_lba: first,
            sectors,
        };
    }
    mbr.write_into(file).map_err(|e| e.to_string())?;
    let label = bramble_fat::store_region::label_block(STORE_REGION_BLOCKS);
    file.seek(SeekFrom::Start(u64::from(store_first) * SECTOR_BYTES))
        .and_then(|_| file.write_all(&label))
        .map_err(|e| format!("writing the certificate store label: {e}"))
}

/// The slot partition: its label, the record's first copy (slot A live, version 0) and the
/// site in slot A. Slot B and the second copy stay zero (sparse).
fn write_slots(file: &mut File, layout: &Layout, contents: SlotContents<'_>) -> io::Result<()> {
    use bramble_fat::site_slots::{SlotEntry, SlotRecord, Slots, label_block};
    use sha2::Digest;
    let first = layout.slots_first_lba();
    let slots = Slots {
        first_sector: first,
        slot_blocks: layout.slot_blocks,
        publish_key: contents.publish_key.copied(),
    };
    let index_checksum = bramble_site::SiteImage::new_checked(contents.site)
        .map(|index| index.checksum())
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error.to_string()))?;
    let record = SlotRecord {
        sequence: 1,
        live: 0,
        accepted: 0,
        slots: [
            SlotEntry {
                valid: true,
                version: 0,
                len: contents.site.len() as u32,
                index_checksum,
                sha256: sha2::Sha256::digest(contents.site).into(),
            },
            SlotEntry::default(),
        ],
    };
    let at = |block: u64| SeekFrom::Start(block * SECTOR_BYTES);
    file.seek(at(u64::from(first)))?;
    file.write_all(&label_block(layout.slot_blocks, contents.publish_key))?;
    file.seek(at(slots.record_block(0)))?;
    file.write_all(&record.encode())?;
    file.seek(at(slots.slot_block(0)))?;
    file.write_all(contents.site)
}

/// The cylinder/head/sector address of `lba` in the conventional 255-head, 63-sector geometry,
/// or the "use LBA" maximum (1023/254/63) past what CHS can address. Only very old BIOSes read
/// these; the Pi and embedded-sdmmc use the LBA fields.
fn chs_of(lba: u32) -> mbrman::CHS {
    const HEADS: u32 = 255;
    const SECTORS: u32 = 63;
    let cylinder = lba / (HEADS * SECTORS);
    if cylinder > 1023 {
        return mbrman::CHS::new(1023, 254, 63);
    }
    let head = (lba / SECTORS) % HEADS;
    let sector = lba % SECTORS + 1;
    mbrman::CHS::new(cylinder as u16, head as u8, sector as u8)
}

fn write_file_system(
    file: &mut File,
    layout: &Layout,
    files: &[BootFile],
    volume_id: u32,
) -> io::Result<()> {
    let mut partition = PartitionStream::new(file, layout.partition_start, layout.partition_bytes);
    fatfs::format_volume(
        &mut partition,
        fatfs::FormatVolumeOptions::new()
            .fat_type(layout.fat.fatfs_type())
            .volume_id(volume_id)
            .volume_label(VOLUME_LABEL),
    )?;
    set_hidden_sectors(&mut partition, layout)?;
    partition.seek(SeekFrom::Start(0))?;
    let options = fatfs::FsOptions::new().time_provider(&IMAGE_CLOCK);
    let fs = fatfs::FileSystem::new(&mut partition, options)?;
    {
        let root = fs.root_dir();
        for boot_file in files {
            let mut out = root.create_file(&boot_file.name)?;
            out.truncate()?;
            out.write_all(&boot_file.bytes)?;
            out.flush()?;
        }
    }
    fs.unmount()
}

/// The time stamped on the files of an image: `SOURCE_DATE_EPOCH` when set (so that the same
/// inputs give a byte-identical image, see reproducible-builds.org), else now; in UTC, as FAT
/// has no time zones.
#[derive(Debug)]
struct ImageClock;

static IMAGE_CLOCK: ImageClock = ImageClock;

impl fatfs::TimeProvider for ImageClock {
    fn get_current_date(&self) -> fatfs::Date {
        self.get_current_date_time().date
    }

    fn get_current_date_time(&self) -> fatfs::DateTime {
        let now = std::env::var("SOURCE_DATE_EPOCH")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            });
        fat_date_time(now)
    }
}

/// Unix seconds as a FAT date and time (UTC), clamped to FAT's range, 1980 to 2107.
fn fat_date_time(unix_seconds: u64) -> fatfs::DateTime {
    const FAT_EPOCH: u64 = 315_532_800; // 1980-01-01T00:00:00Z
    const FAT_END: u64 = 4_354_819_199; // 2107-12-31T23:59:59Z
    let seconds = unix_seconds.clamp(FAT_EPOCH, FAT_END);
    let time = UtcDateTime::from_unix_seconds(seconds);
    // In range for u16 after the clamp: years 1980..=2107.
    fatfs::DateTime {
        date: fatfs::Date {
            year: time.date.year as u16,
            month: time.date.month as u16,
            day: time.date.day as u16,
        },
        time: fatfs::Time {
            hour: time.hour as u16,
            min: time.minute as u16,
            sec: time.second as u16,
            millis: 0,
        },
    }
}

/// Sets the boot sector's "hidden sectors" field (BPB offset 28: the sectors before the
/// partition) to the partition's first LBA, as mkfs.fat and Windows do on a partitioned disk;
/// fatfs leaves it 0. On FAT32 the backup boot sector (its sector number at BPB offset 50)
/// gets the same value.
fn set_hidden_sectors<S: Read + Write + Seek>(
    partition: &mut S,
    layout: &Layout,
) -> io::Result<()> {
    const HIDDEN_SECTORS: u64 = 28;
    const BACKUP_BOOT_SECTOR: u64 = 50;
    let hidden = layout.partition_first_lba().to_le_bytes();
    let mut sectors = vec![0u64];
    if layout.fat == FatKind::Fat32 {
        let mut backup = [0u8; 2];
        partition.seek(SeekFrom::Start(BACKUP_BOOT_SECTOR))?;
        partition.read_exact(&mut backup)?;
        let backup = u16::from_le_bytes(backup);
        if backup != 0 {
            sectors.push(u64::from(backup));
        }
    }
    for sector in sectors {
        partition.seek(SeekFrom::Start(sector * SECTOR_BYTES + HIDDEN_SECTORS))?;
        partition.write_all(&hidden)?;
    }
    Ok(())
}

/// A window of `len` bytes at `start` in a larger stream: what the FAT writer sees as its
/// whole disk.
pub(crate) struct PartitionStream<'a, S> {
    inner: &'a mut S,
    start: u64,
    len: u64,
    position: u64,
}

impl<'a, S: Seek> PartitionStream<'a, S> {
    pub(crate) fn new(inner: &'a mut S, start: u64, len: u64) -> Self {
        PartitionStream {
            inner,
            start,
            len,
            position: 0,
        }
    }

    fn remaining(&self) -> usize {
        usize::try_from(self.len.saturating_sub(self.position)).unwrap_or(usize::MAX)
    }

    fn place_inner(&mut self) -> io::Result<()> {
        self.inner
            .seek(SeekFrom::Start(self.start + self.position))
            .map(|_| ())
    }
}

impl<S: Read + Seek> Read for PartitionStream<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.remaining());
        if n == 0 {
            return Ok(0);
        }
        self.place_inner()?;
        let read = self.inner.read(&mut buf[..n])?;
        self.position += read as u64;
        Ok(read)
    }
}

impl<S: Write + Seek> Write for PartitionStream<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(self.remaining());
        if n == 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "write past the partition end",
            ));
        }
        self.place_inner()?;
        let written = self.inner.write(&buf[..n])?;
        self.position += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<S: Seek> Seek for PartitionStream<'_, S> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(offset) => Some(offset),
            SeekFrom::Current(delta) => self.position.checked_add_signed(delta),
            SeekFrom::End(delta) => self.len.checked_add_signed(delta),
        };
        match target {
            Some(position) => {
                self.position = position;
                Ok(position)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the partition",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn layouts() {
        assert!(matches!(
            Layout::with_size(48 * MIB),
            Err(DiskError::BadSize { .. })
        ));
        assert!(matches!(
            Layout::with_size(16 * MIB),
            Err(DiskError::BadSize { .. })
        ));
        let small = Layout::with_size(32 * MIB).unwrap();
        assert_eq!(small.fat, FatKind::Fat16);
        assert_eq!(small.partition_first_lba(), 2048);
        assert_eq!(
            small.partition_sectors() as u64 * 512 + 1024 * 1024,
            32 * MIB
        );
        assert_eq!(Layout::with_size(128 * MIB).unwrap().fat, FatKind::Fat32);

        let tiny = [BootFile {
            name: "a.bin".into(),
            bytes: vec![1; 10],
        }];
        assert_eq!(
            Layout::smallest_for(&tiny).unwrap().image_bytes,
            MIN_IMAGE_BYTES
        );
        let big = [BootFile {
            name: "a.bin".into(),
            bytes: vec![0; 40 * MIB as usize],
        }];
        assert_eq!(Layout::smallest_for(&big).unwrap().image_bytes, 64 * MIB);
    }

    #[test]
    fn fat_timestamps() {
        let at = |secs| {
            let t = fat_date_time(secs);
            (
                t.date.year,
                t.date.month,
                t.date.day,
                t.time.hour,
                t.time.min,
                t.time.sec,
            )
        };
        assert_eq!(at(0), (1980, 1, 1, 0, 0, 0), "clamped to the FAT epoch");
        assert_eq!(at(951_782_400), (2000, 2, 29, 0, 0, 0), "leap day");
        assert_eq!(at(1_798_761_599), (2026, 12, 31, 23, 59, 59));
        assert_eq!(at(1_709_251_199), (2024, 2, 29, 23, 59, 59));
        assert_eq!(
            at(u64::MAX),
            (2107, 12, 31, 23, 59, 59),
            "clamped to FAT's end"
        );
    }

    #[test]
    fn short_names() {
        for good in ["kernel.img", "SITE.BIN", "start_cd.elf", "a.b"] {
            assert!(is_short_name(good), "{good}");
        }
        for bad in [
            "bootcode",
            "toolongname.bin",
            "a.text",
            ".bin",
            "a b.txt",
            "a.b.c",
        ] {
            assert!(!is_short_name(bad), "{bad}");
        }
    }

    #[test]
    fn chs_addresses() {
        let chs = chs_of(2048);
        assert_eq!((chs.cylinder, chs.head, chs.sector), (0, 32, 33));
        let far = chs_of(u32::MAX);
        assert_eq!((far.cylinder, far.head, far.sector), (1023, 254, 63));
    }

    #[test]
    fn partition_stream_stays_inside_its_window() {
        let mut disk = Cursor::new(vec![0u8; 64]);
        let mut part = PartitionStream::new(&mut disk, 16, 32);
        part.write_all(&[7; 32]).unwrap();
        assert!(part.write(&[9]).is_err(), "no writes past the end");
        assert_eq!(part.seek(SeekFrom::End(-2)).unwrap(), 30);
        let mut two = [0; 4];
        assert_eq!(part.read(&mut two).unwrap(), 2, "reads stop at the end");
        assert!(part.seek(SeekFrom::Current(-100)).is_err());
        let bytes = disk.into_inner();
        assert_eq!(&bytes[..16], &[0; 16]);
        assert_eq!(&bytes[16..48], &[7; 32]);
        assert_eq!(&bytes[48..], &[0; 16]);
    }
}
