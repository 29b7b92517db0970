//! Checked views of the SD card's first sectors: the MBR's first partition and the FAT boot
//! sector (BIOS parameter block) it points to, read before the card is handed to the FAT
//! library.
//!
//! embedded-sdmmc trusts these fields: a boot sector with 0 sectors per cluster divides by
//! zero while the volume is opened (review M4), a FAT32 root cluster above 0x3FFF_FFFF trips
//! a `panic!` when the root folder is walked (and so does a file's first cluster above it,
//! from its directory entry, see [`BootSector::check_file_start`]), and FAT32 is read with
//! 512-byte sectors whatever the boot sector says. On the Pi a panic at boot is a reboot
//! loop, so the kernel checks the card with [`check_card`] first, and each file's entry
//! before reading it, and serves the diagnostic page when a check fails.
//!
//! The checks follow Microsoft's FAT specification (fatgen103, "BPB"/"FAT Type
//! Determination") for what the kernel reads: partition types 0x04, 0x06, 0x0E (FAT16) and
//! 0x0B, 0x0C (FAT32), 512-byte sectors, a power of two from 1 to 128 sectors per cluster,
//! at least one reserved sector and one FAT, FATs large enough for every cluster, a volume
//! inside its partition and the partition inside the card. All arithmetic is checked: the
//! fields are untrusted and the Pi's `usize` is 32 bits.
//!
//! [`store_region`] finds the one region of the card the kernel writes: the certificate
//! store's partition, which `bramble image` reserves before the FAT partition.
#![no_std]
#![forbid(unsafe_code)]

use core::fmt;

pub mod site_slots;
pub mod store_region;

/// Bytes in a sector: the only size the kernel reads.
pub const SECTOR_LEN: usize = 512;
/// Partition type codes of FAT volumes the kernel reads.
pub const FAT_PARTITION_TYPES: [u8; 5] = [0x04, 0x06, 0x0B, 0x0C, 0x0E];
/// Fewest clusters of a FAT16 volume (fewer is FAT12, which the kernel does not read).
pub const MIN_FAT16_CLUSTERS: u32 = 4085;
/// Fewest clusters of a FAT32 volume.
pub const MIN_FAT32_CLUSTERS: u32 = 65525;
/// Largest cluster number embedded-sdmmc walks without panicking (`u32::MAX / 4`).
const MAX_CLUSTER: u32 = u32::MAX / 4;

/// Offset of the 55 AA signature in the MBR and in a boot sector.
const SIGNATURE_AT: usize = 510;
/// Offset of the first partition entry in the MBR.
const PARTITION_AT: usize = 446;
/// Bytes in one directory entry (FAT16's fixed root folder).
const DIRECTORY_ENTRY_LEN: u32 = 32;

/// What is wrong with the card's layout; `Display` says it for the console and the
/// diagnostic page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FatLayoutError {
    /// A sector shorter than 512 bytes (or a directory entry shorter than 32) was given.
    Truncated,
    /// Sector 0 does not end in 55 AA: no MBR partition table.
    NoPartitionTable,
    /// The first partition's status byte is neither 0x00 nor 0x80.
    BadPartitionStatus(u8),
    /// The first partition is not a FAT16 or FAT32 partition (its type code).
    NotFat(u8),
    /// The first partition starts at sector 0, is empty, or runs past the end of the card.
    PartitionOutsideCard {
        /// First sector of the partition.
        first_sector: u32,
        /// Sectors in the partition.
        sectors: u32,
    },
    /// The boot sector does not end in 55 AA.
    NoBootSignature,
    /// Bytes per sector is not 512.
    BadSectorSize(u16),
    /// Sectors per cluster is not a power of two from 1 to 128.
    BadClusterSize(u8),
    /// No reserved sectors (the boot sector itself is one).
    NoReservedSectors,
    /// No FAT.
    NoFat,
    /// The FAT size is 0.
    EmptyFat,
    /// The total sector count is 0.
    NoSectors,
    /// Reserved sectors, FATs and root folder take more than the whole volume.
    MetadataLargerThanVolume,
    /// The volume has more sectors than its partition.
    VolumeLargerThanPartition {
        /// Sectors the boot sector claims.
        volume: u32,
        /// Sectors in the partition.
        partition: u32,
    },
    /// Fewer than 4085 clusters: FAT12, which the kernel does not read.
    Fat12,
    /// A FAT32 volume whose version is not 0.0.
    UnsupportedFat32Version(u16),
    /// The FAT32 root folder's cluster is not a data cluster of the volume.
    BadRootCluster(u32),
    /// The FATs are too small to hold an entry for every cluster.
    FatTooSmall,
    /// A file's directory entry names a first cluster outside the volume (or none for a
    /// file that has bytes).
    BadFileCluster {
        /// The first cluster the entry names.
        cluster: u32,
        /// The file's size in bytes.
        size: u32,
    },
}

impl fmt::Display for FatLayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated => write!(f, "a sector read short"),
            Self::NoPartitionTable => write!(f, "no MBR partition table (sector 0 lacks 55 AA)"),
            Self::BadPartitionStatus(status) => {
                write!(
                    f,
                    "partition 1 has status {status:#04x} (0x00 or 0x80 expected)"
                )
            }
            Self::NotFat(kind) => write!(f, "partition 1 has type {kind:#04x}, not FAT16 or FAT32"),
            Self::PartitionOutsideCard {
                first_sector,
                sectors,
            } => write!(
                f,
                "partition 1 ({sectors} sectors from sector {first_sector}) is not on the card"
            ),
            Self::NoBootSignature => write!(f, "the FAT boot sector lacks 55 AA"),
            Self::BadSectorSize(size) => write!(f, "{size} bytes per sector (512 expected)"),
            Self::BadClusterSize(count) => write!(
                f,
                "{count} sectors per cluster (a power of two from 1 to 128 expected)"
            ),
            Self::NoReservedSectors => write!(f, "no reserved sectors in the boot sector"),
            Self::NoFat => write!(f, "the boot sector lists no FAT"),
            Self::EmptyFat => write!(f, "the FAT size is 0"),
            Self::NoSectors => write!(f, "the volume has 0 sectors"),
            Self::MetadataLargerThanVolume => {
                write!(f, "the FATs and root folder are larger than the volume")
            }
            Self::VolumeLargerThanPartition { volume, partition } => write!(
                f,
                "the volume has {volume} sectors but its partition only {partition}"
            ),
            Self::Fat12 => write!(f, "FAT12 volume (fewer than 4085 clusters): not supported"),
            Self::UnsupportedFat32Version(version) => {
                write!(f, "FAT32 version {version:#06x} (0.0 expected)")
            }
            Self::BadRootCluster(cluster) => {
                write!(
                    f,
                    "the root folder starts at cluster {cluster}, outside the volume"
                )
            }
            Self::FatTooSmall => write!(f, "the FATs are too small for the volume's clusters"),
            Self::BadFileCluster { cluster, size } => write!(
                f,
                "a file of {size} bytes starts at cluster {cluster}, outside the volume"
            ),
        }
    }
}

/// Why [`check_card`] failed: a read, or the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CardCheckError<E> {
    /// Reading a sector failed.
    Read(E),
    /// The layout is unusable.
    Layout(FatLayoutError),
}

fn le16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The first MBR partition, checked to be a FAT partition that lies on the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Type code (one of [`FAT_PARTITION_TYPES`]).
    pub kind: u8,
    /// First sector (LBA), at least 1.
    pub first_sector: u32,
    /// Sectors in the partition, at least 1.
    pub sectors: u32,
}

impl Partition {
    /// Reads partition 1 from the MBR in `sector` (sector 0 of a card of `card_sectors`).
    pub fn first(sector: &[u8], card_sectors: u64) -> Result<Self, FatLayoutError> {
        let sector = sector.get(..SECTOR_LEN).ok_or(FatLayoutError::Truncated)?;
        if sector[SIGNATURE_AT..] != [0x55, 0xAA] {
            return Err(FatLayoutError::NoPartitionTable);
        }
        let entry = &sector[PARTITION_AT..PARTITION_AT + 16];
        if entry[0] & 0x7F != 0 {
            return Err(FatLayoutError::BadPartitionStatus(entry[0]));
        }
        let kind = entry[4];
        if !FAT_PARTITION_TYPES.contains(&kind) {
            return Err(FatLayoutError::NotFat(kind));
        }
        let first_sector = le32(entry, 8);
        let sectors = le32(entry, 12);
        let end = u64::from(first_sector) + u64::from(sectors);
        if first_sector == 0 || sectors == 0 || end > card_sectors {
            return Err(FatLayoutError::PartitionOutsideCard {
                first_sector,
                sectors,
            });
        }
        Ok(Self {
            kind,
            first_sector,
            sectors,
        })
    }
}

/// FAT16 or FAT32, as decided by the cluster count (fatgen103, "FAT Type Determination").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FatType {
    /// 4,085 to 65,524 clusters.
    Fat16,
    /// 65,525 clusters or more.
    Fat32,
}

/// A FAT boot sector whose geometry was checked; the accessors cannot fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootSector {
    sectors_per_cluster: u8,
    reserved_sectors: u16,
    fat_count: u8,
    root_entries: u16,
    total_sectors: u32,
    fat_sectors: u32,
    first_data_sector: u32,
    clusters: u32,
    fat_type: FatType,
    root_cluster: Option<u32>,
}

impl BootSector {
    /// Checks the boot sector in `sector`, the first sector of a partition of
    /// `partition_sectors` sectors.
    pub fn new_checked(sector: &[u8], partition_sectors: u32) -> Result<Self, FatLayoutError> {
        let b = sector.get(..SECTOR_LEN).ok_or(FatLayoutError::Truncated)?;
        if b[SIGNATURE_AT..] != [0x55, 0xAA] {
            return Err(FatLayoutError::NoBootSignature);
        }
        let bytes_per_sector = le16(b, 11);
        if usize::from(bytes_per_sector) != SECTOR_LEN {
            return Err(FatLayoutError::BadSectorSize(bytes_per_sector));
        }
        let sectors_per_cluster = b[13];
        if !sectors_per_cluster.is_power_of_two() {
            // 0 is not a power of two; u8 caps it at 128.
            return Err(FatLayoutError::BadClusterSize(sectors_per_cluster));
        }
        let reserved_sectors = le16(b, 14);
        if reserved_sectors == 0 {
            return Err(FatLayoutError::NoReservedSectors);
        }
        let fat_count = b[16];
        if fat_count == 0 {
            return Err(FatLayoutError::NoFat);
        }
        let root_entries = le16(b, 17);
        let total_sectors = match le16(b, 19) {
            0 => le32(b, 32),
            small => u32::from(small),
        };
        if total_sectors == 0 {
            return Err(FatLayoutError::NoSectors);
        }
        if total_sectors > partition_sectors {
            return Err(FatLayoutError::VolumeLargerThanPartition {
                volume: total_sectors,
                partition: partition_sectors,
            });
        }
        let fat_sectors = match le16(b, 22) {
            0 => le32(b, 36),
            small => u32::from(small),
        };
        if fat_sectors == 0 {
            return Err(FatLayoutError::EmptyFat);
        }
        let root_sectors = (u32::from(root_entries) * DIRECTORY_ENTRY_LEN).div_ceil(512);
        let first_data_sector = u32::from(fat_count)
            .checked_mul(fat_sectors)
            .and_then(|fats| fats.checked_add(u32::from(reserved_sectors)))
            .and_then(|sum| sum.checked_add(root_sectors))
            .filter(|&first| first < total_sectors)
            .ok_or(FatLayoutError::MetadataLargerThanVolume)?;
        // Cannot underflow or divide by zero: checked just above.
        let clusters = (total_sectors - first_data_sector) / u32::from(sectors_per_cluster);
        let fat_type = if clusters < MIN_FAT16_CLUSTERS {
            return Err(FatLayoutError::Fat12);
        } else if clusters < MIN_FAT32_CLUSTERS {
            FatType::Fat16
        } else {
            FatType::Fat32
        };
        // Entries 0 and 1 are reserved: the FAT holds clusters + 2 entries.
        let entry_bytes = match fat_type {
            FatType::Fat16 => 2,
            FatType::Fat32 => 4,
        };
        let needed = (u64::from(clusters) + 2) * entry_bytes;
        if u64::from(fat_sectors) * (SECTOR_LEN as u64) < needed {
            return Err(FatLayoutError::FatTooSmall);
        }
        let root_cluster = match fat_type {
            FatType::Fat16 => None,
            FatType::Fat32 => {
                let version = le16(b, 42);
                if version != 0 {
                    return Err(FatLayoutError::UnsupportedFat32Version(version));
                }
                let root = le32(b, 44);
                // Data clusters are numbered from 2.
                if root < 2 || root - 2 >= clusters || root > MAX_CLUSTER {
                    return Err(FatLayoutError::BadRootCluster(root));
                }
                Some(root)
            }
        };
        Ok(Self {
            sectors_per_cluster,
            reserved_sectors,
            fat_count,
            root_entries,
            total_sectors,
            fat_sectors,
            first_data_sector,
            clusters,
            fat_type,
            root_cluster,
        })
    }

    /// FAT16 or FAT32.
    pub fn fat_type(&self) -> FatType {
        self.fat_type
    }
    /// Sectors per cluster (a power of two, 1 to 128).
    pub fn sectors_per_cluster(&self) -> u8 {
        self.sectors_per_cluster
    }
    /// Reserved sectors before the first FAT (at least 1).
    pub fn reserved_sectors(&self) -> u16 {
        self.reserved_sectors
    }
    /// Number of FATs (at least 1).
    pub fn fat_count(&self) -> u8 {
        self.fat_count
    }
    /// Sectors per FAT.
    pub fn fat_sectors(&self) -> u32 {
        self.fat_sectors
    }
    /// Entries in FAT16's fixed root folder (0 on FAT32).
    pub fn root_entries(&self) -> u16 {
        self.root_entries
    }
    /// Sectors in the volume.
    pub fn total_sectors(&self) -> u32 {
        self.total_sectors
    }
    /// First sector of cluster 2, from the start of the volume.
    pub fn first_data_sector(&self) -> u32 {
        self.first_data_sector
    }
    /// Data clusters in the volume.
    pub fn clusters(&self) -> u32 {
        self.clusters
    }
    /// FAT32's root folder cluster.
    pub fn root_cluster(&self) -> Option<u32> {
        self.root_cluster
    }

    /// Checks the first cluster a directory entry gives for a file of `size` bytes, before
    /// the file is read: a data cluster of the volume (2 up to the cluster count + 1), or 0
    /// for an empty file. embedded-sdmmc panics on a FAT32 cluster above 0x3FFF_FFFF once a
    /// read crosses into the file's second cluster, and a directory entry can hold any value.
    pub fn check_file_start(&self, cluster: u32, size: u32) -> Result<(), FatLayoutError> {
        let in_volume = cluster >= 2 && cluster - 2 < self.clusters && cluster <= MAX_CLUSTER;
        if in_volume || (cluster == 0 && size == 0) {
            Ok(())
        } else {
            Err(FatLayoutError::BadFileCluster { cluster, size })
        }
    }

    /// [`BootSector::check_file_start`] for a raw 32-byte directory entry as it is on the
    /// card (its first cluster's high half counts on FAT32 only, as readers take it).
    pub fn check_file_entry(&self, entry: &[u8]) -> Result<(), FatLayoutError> {
        let entry = entry.get(..32).ok_or(FatLayoutError::Truncated)?;
        let low = u32::from(le16(entry, 26));
        let cluster = match self.fat_type {
            FatType::Fat16 => low,
            FatType::Fat32 => u32::from(le16(entry, 20)) << 16 | low,
        };
        self.check_file_start(cluster, le32(entry, 28))
    }
}

/// The checked first partition and its boot sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatVolume {
    /// The partition.
    pub partition: Partition,
    /// Its boot sector.
    pub boot_sector: BootSector,
}

/// Reads sector 0 and the first partition's boot sector through `read` (sector number,
/// buffer) and checks both, for a card of `card_sectors` sectors.
pub fn check_card<E>(
    card_sectors: u64,
    mut read: impl FnMut(u64, &mut [u8; SECTOR_LEN]) -> Result<(), E>,
) -> Result<FatVolume, CardCheckError<E>> {
    let mut sector = [0u8; SECTOR_LEN];
    read(0, &mut sector).map_err(CardCheckError::Read)?;
    let partition = Partition::first(&sector, card_sectors).map_err(CardCheckError::Layout)?;
    read(u64::from(partition.first_sector), &mut sector).map_err(CardCheckError::Read)?;
    let boot_sector =
        BootSector::new_checked(&sector, partition.sectors).map_err(CardCheckError::Layout)?;
    // The partition's type code is not compared with the FAT type: embedded-sdmmc decides by
    // the cluster count, as the specification says, and formatters do put a small FAT16
    // volume in a partition typed FAT32.
    Ok(FatVolume {
        partition,
        boot_sector,
    })
}
