//! The certificate store's region on the card: the only blocks the kernel ever writes.
//!
//! `bramble image` reserves it as a small partition of its own in the gap between the MBR and
//! the FAT partition (which starts at 1 MiB): MBR type 0xDA ("non-file-system data"), one
//! label block that names it, then the region's blocks, zeroed. The label keeps the kernel from
//! writing into a 0xDA partition someone else made: both the partition entry and the label
//! must agree before a region is handed out, and the region must lie on the card, after
//! sector 0 and clear of the boot partition. A card made before the region existed has no such
//! partition ([`StoreRegionError::Absent`]); the kernel then keeps its certificate in RAM.
//!
//! All fields are untrusted (the card may have been edited by anything) and all arithmetic on
//! them is checked.

use crate::{PARTITION_AT, Partition, SECTOR_LEN, SIGNATURE_AT, le32};
use core::fmt;

/// The store partition's MBR type code (0xDA, "non-file-system data": no OS mounts it).
pub const STORE_PARTITION_TYPE: u8 = 0xDA;
/// The first 16 bytes of the label block.
pub const STORE_LABEL_MAGIC: [u8; 16] = *b"BRAMBLE-CERTSTOR";
/// The label format's version (byte 16).
pub const STORE_LABEL_VERSION: u8 = 1;
/// Blocks of the region `bramble image` reserves: two slots of 16 KiB (the ACME store's
/// default region).
pub const DEFAULT_STORE_REGION_BLOCKS: u32 = 64;
/// Where `bramble image` puts the store partition (its label block): sector 1024, 512 KiB
/// into the card, half-way between the MBR and the FAT partition.
pub const DEFAULT_STORE_FIRST_SECTOR: u32 = 1024;
/// Fewest region blocks the kernel uses (two slots of two blocks).
pub const MIN_STORE_REGION_BLOCKS: u32 = 4;
/// Most region blocks the kernel uses (1 MiB).
pub const MAX_STORE_REGION_BLOCKS: u32 = 2048;

/// Why the card has no usable store region; `Display` says it for the console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreRegionError {
    /// No partition entry of type 0xDA: a card made before `bramble image` reserved one.
    Absent,
    /// Sector 0 is shorter than a sector or has no MBR signature.
    NoPartitionTable,
    /// The store partition reaches past the card, starts at sector 0, or overlaps the boot
    /// partition.
    Misplaced {
        /// Its first sector.
        first_sector: u32,
        /// Its length in sectors.
        sectors: u32,
    },
    /// The region is smaller than [`MIN_STORE_REGION_BLOCKS`] or larger than
    /// [`MAX_STORE_REGION_BLOCKS`].
    BadSize(u32),
    /// The partition's first block is not a store label (someone else's 0xDA partition).
    NoLabel,
    /// The label's region size disagrees with the partition's.
    LabelMismatch {
        /// Blocks the label names.
        label: u32,
        /// Blocks the partition holds after its label.
        partition: u32,
    },
}

impl fmt::Display for StoreRegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absent => f.write_str(
                "the card has no certificate store region (it was made by a `bramble image` \
                 from before the region was reserved)",
            ),
            Self::NoPartitionTable => f.write_str("the card has no MBR partition table"),
            Self::Misplaced {
                first_sector,
                sectors,
            } => write!(
                f,
                "the certificate store partition ({sectors} sectors from sector \
                 {first_sector}) is off the card or overlaps the boot partition"
            ),
            Self::BadSize(blocks) => write!(
                f,
                "the certificate store region has {blocks} blocks ({MIN_STORE_REGION_BLOCKS} \
                 to {MAX_STORE_REGION_BLOCKS} are used)"
            ),
            Self::NoLabel => f.write_str(
                "the 0xDA partition carries no Bramble certificate store label; it is not \
                 written",
            ),
            Self::LabelMismatch { label, partition } => write!(
                f,
                "the certificate store label names {label} blocks but its partition holds \
                 {partition}"
            ),
        }
    }
}

/// The store partition as the partition table gives it, not yet confirmed by its label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorePartition {
    /// Its first sector: the label block.
    pub first_sector: u32,
    /// Its length in sectors (the label and the region).
    pub sectors: u32,
}

/// A confirmed store region: the blocks the kernel may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreRegion {
    /// The region's first block (the sector after the label).
    pub first_block: u64,
    /// Blocks in the region.
    pub blocks: u32,
}

impl StorePartition {
    /// Finds the store partition in MBR `sector` (entries 2 to 4; entry 1 is the boot
    /// partition `boot`, already checked) of a card of `card_sectors` sectors, and checks its
    /// place and size.
    pub fn find(
        sector: &[u8],
        card_sectors: u64,
        boot: &Partition,
    ) -> Result<Self, StoreRegionError> {
        let sector = sector
            .get(..SECTOR_LEN)
            .ok_or(StoreRegionError::NoPartitionTable)?;
        if sector[SIGNATURE_AT..] != [0x55, 0xAA] {
            return Err(StoreRegionError::NoPartitionTable);
        }
        let entry = (1..4)
            .map(|index| {
                let at = PARTITION_AT + 16 * index;
                &sector[at..at + 16]
            })
            .find(|entry| entry[4] == STORE_PARTITION_TYPE)
            .ok_or(StoreRegionError::Absent)?;
        let first_sector = le32(entry, 8);
        let sectors = le32(entry, 12);
        let misplaced = StoreRegionError::Misplaced {
            first_sector,
            sectors,
        };
        let end = u64::from(first_sector) + u64::from(sectors);
        let boot_end = u64::from(boot.first_sector) + u64::from(boot.sectors);
        let overlaps_boot =
            u64::from(first_sector) < boot_end && end > u64::from(boot.first_sector);
        if first_sector == 0 || sectors == 0 || end > card_sectors || overlaps_boot {
            return Err(misplaced);
        }
        let blocks = sectors - 1;
        if !(MIN_STORE_REGION_BLOCKS..=MAX_STORE_REGION_BLOCKS).contains(&blocks) {
            return Err(StoreRegionError::BadSize(blocks));
        }
        Ok(Self {
            first_sector,
            sectors,
        })
    }

    /// Checks the label in `label` (the partition's first sector) and returns the region.
    pub fn confirm(&self, label: &[u8]) -> Result<StoreRegion, StoreRegionError> {
        let label = label.get(..SECTOR_LEN).ok_or(StoreRegionError::NoLabel)?;
        if label[..16] != STORE_LABEL_MAGIC || label[16] != STORE_LABEL_VERSION {
            return Err(StoreRegionError::NoLabel);
        }
        let named = le32(label, 20);
        let partition = self.sectors - 1; // at least MIN_STORE_REGION_BLOCKS (find)
        if named != partition {
            return Err(StoreRegionError::LabelMismatch {
                label: named,
                partition,
            });
        }
        Ok(StoreRegion {
            first_block: u64::from(self.first_sector) + 1,
            blocks: partition,
        })
    }
}

/// The label block `bramble image` writes for a region of `region_blocks` blocks: the magic,
/// the version, three zero bytes, the block count (little-endian), zeros.
pub fn label_block(region_blocks: u32) -> [u8; SECTOR_LEN] {
    let mut block = [0u8; SECTOR_LEN];
    block[..16].copy_from_slice(&STORE_LABEL_MAGIC);
    block[16] = STORE_LABEL_VERSION;
    block[20..24].copy_from_slice(&region_blocks.to_le_bytes());
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    const CARD: u64 = 65536; // 32 MiB
    const BOOT: Partition = Partition {
        kind: 0x0E,
        first_sector: 2048,
        sectors: 63488,
    };

    fn mbr(entries: &[(usize, u8, u32, u32)]) -> [u8; SECTOR_LEN] {
        let mut sector = [0u8; SECTOR_LEN];
        sector[510] = 0x55;
        sector[511] = 0xAA;
        for &(index, kind, first, sectors) in entries {
            let at = PARTITION_AT + 16 * index;
            sector[at + 4] = kind;
            sector[at + 8..at + 12].copy_from_slice(&first.to_le_bytes());
            sector[at + 12..at + 16].copy_from_slice(&sectors.to_le_bytes());
        }
        sector
    }

    #[test]
    fn the_partition_and_label_bramble_image_writes_give_the_region_after_the_label() {
        let sector = mbr(&[(0, 0x0E, 2048, 63488), (1, 0xDA, 1024, 65)]);
        let partition = StorePartition::find(&sector, CARD, &BOOT).unwrap();
        let region = partition.confirm(&label_block(64)).unwrap();
        assert_eq!(
            region,
            StoreRegion {
                first_block: 1025,
                blocks: 64
            }
        );
        // Any of entries 2-4 may hold it.
        let sector = mbr(&[(0, 0x0E, 2048, 63488), (3, 0xDA, 1024, 65)]);
        assert!(StorePartition::find(&sector, CARD, &BOOT).is_ok());
    }

    #[test]
    fn an_old_card_without_the_partition_is_told_apart_from_a_damaged_one() {
        let sector = mbr(&[(0, 0x0E, 2048, 63488)]);
        assert_eq!(
            StorePartition::find(&sector, CARD, &BOOT),
            Err(StoreRegionError::Absent)
        );
        // Entry 1 is the boot partition and never the store, whatever its type says.
        let sector = mbr(&[(0, 0xDA, 1024, 65)]);
        assert_eq!(
            StorePartition::find(&sector, CARD, &BOOT),
            Err(StoreRegionError::Absent)
        );
        assert_eq!(
            StorePartition::find(&[0u8; 100], CARD, &BOOT),
            Err(StoreRegionError::NoPartitionTable)
        );
        assert_eq!(
            StorePartition::find(&[0u8; SECTOR_LEN], CARD, &BOOT),
            Err(StoreRegionError::NoPartitionTable)
        );
    }

    #[test]
    fn a_partition_off_the_card_on_sector_0_or_over_the_boot_partition_is_refused() {
        for (first, sectors) in [
            (0, 65),          // over the MBR
            (1024, 0),        // empty
            (2000, 65),       // into the boot partition's start
            (2048, 65),       // inside it
            (65500, 65),      // past the card's end
            (u32::MAX, 2),    // an end past u32
            (1024, u32::MAX), // a length past everything
        ] {
            let sector = mbr(&[(0, 0x0E, 2048, 63488), (1, 0xDA, first, sectors)]);
            assert!(
                matches!(
                    StorePartition::find(&sector, CARD, &BOOT),
                    Err(StoreRegionError::Misplaced { .. })
                ),
                "{first} + {sectors}"
            );
        }
        // Just before the boot partition is fine.
        let sector = mbr(&[(0, 0x0E, 2048, 63488), (1, 0xDA, 2048 - 65, 65)]);
        assert!(StorePartition::find(&sector, CARD, &BOOT).is_ok());
    }

    #[test]
    fn sizes_outside_the_kernels_limits_are_refused() {
        let boot = Partition {
            first_sector: 8192,
            sectors: 57344,
            ..BOOT
        };
        for (sectors, blocks) in [(1, 0), (4, 3), (2050, 2049)] {
            let sector = mbr(&[(0, 0x0E, 8192, 57344), (1, 0xDA, 1, sectors)]);
            assert_eq!(
                StorePartition::find(&sector, CARD, &boot),
                Err(StoreRegionError::BadSize(blocks))
            );
        }
    }

    #[test]
    fn a_partition_without_our_label_or_with_another_size_is_not_used() {
        let partition = StorePartition {
            first_sector: 1024,
            sectors: 65,
        };
        assert_eq!(
            partition.confirm(&[0u8; SECTOR_LEN]),
            Err(StoreRegionError::NoLabel)
        );
        assert_eq!(
            partition.confirm(&[0u8; 10]),
            Err(StoreRegionError::NoLabel)
        );
        let mut other_version = label_block(64);
        other_version[16] = 2;
        assert_eq!(
            partition.confirm(&other_version),
            Err(StoreRegionError::NoLabel)
        );
        assert_eq!(
            partition.confirm(&label_block(128)),
            Err(StoreRegionError::LabelMismatch {
                label: 128,
                partition: 64
            })
        );
    }
}
