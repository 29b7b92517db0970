//! The site slots: two places for SITE.BIN outside the FAT partition, so that a new site can
//! be written next to the one being served and switched to at once (issue 28).
//!
//! `bramble image --slot-mib N` reserves them as one partition at the end of the card, after
//! the FAT partition: MBR type 0xDA (like the certificate store's, "non-file-system data", so
//! no OS mounts it), found by its label, never by its place in the table. Inside it, counting
//! from its first sector:
//!
//! ```text
//! block 0            label: magic, version, slot size, the owner's publish key
//! blocks 1, 2        the slot record, two copies (magic, sequence, live slot, highest
//!                    version accepted, per slot: whole, version, length, index checksum,
//!                    SHA-256; CRC-32)
//! blocks 3 .. 2048   unused (the slots start 1 MiB in, on an erase-block boundary)
//! 2048 ..            slot A: slot_blocks blocks
//! 2048 + slot_blocks slot B: slot_blocks blocks
//! ```
//!
//! The record says which slot is live, and for each slot whether it holds a whole site, its
//! version (a publish must bring a higher one), its length, SHA-256 and the site index's own
//! checksum. It is written the way the certificate store writes its slots: each save goes to
//! the copy the previous one did not, with a sequence number one higher and a CRC-32 over the
//! block, so a power cut during a save tears at most the copy being written and the other
//! still holds the state before it. The reader takes the valid copy with the higher sequence
//! number. A publish saves twice: first "the idle slot is being written" (so a cut during the
//! body leaves that slot marked invalid), then, once the body is on the card and read back
//! and verified, "the idle slot is whole and live".
//!
//! The label is written by `bramble image` only: the kernel's write window covers the record
//! and the slots, never the label, so the publish key cannot be changed over the network.
//!
//! All fields are untrusted and all arithmetic on them is checked.

use crate::{PARTITION_AT, Partition, SECTOR_LEN, SIGNATURE_AT, le32};
use core::fmt;

/// The slot partition's MBR type code (shared with the certificate store's; the label tells
/// them apart).
pub const SLOTS_PARTITION_TYPE: u8 = 0xDA;
/// The first 16 bytes of the label block.
pub const SLOTS_LABEL_MAGIC: [u8; 16] = *b"BRAMBLE-SITESLOT";
/// The label format's version (byte 16).
pub const SLOTS_LABEL_VERSION: u8 = 1;
/// The first 8 bytes of a record copy.
pub const RECORD_MAGIC: [u8; 8] = *b"BRSLOTR1";
/// Where slot A starts, in blocks from the partition's first sector (1 MiB).
pub const SLOTS_OFFSET_BLOCKS: u32 = 2048;
/// Fewest blocks in a slot (1 MiB).
pub const MIN_SLOT_BLOCKS: u32 = 2048;
/// Most blocks in a slot (4 GiB less one block: a site image's offsets are `u32`).
pub const MAX_SLOT_BLOCKS: u32 = (u32::MAX / SECTOR_LEN as u32) - 1;
/// Bytes of an Ed25519 public key.
pub const KEY_LEN: usize = 32;

/// Why the card's slots cannot be used; `Display` says it for the console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotsError {
    /// No 0xDA partition carries the slot label: a card without slots (SITE.BIN on FAT).
    Absent,
    /// Sector 0 has no MBR signature.
    NoPartitionTable,
    /// The label's slot size disagrees with the partition's, or is out of range.
    BadSize {
        /// Blocks per slot the label names.
        slot_blocks: u32,
        /// Sectors in the partition.
        sectors: u32,
    },
    /// The partition reaches past the card, starts at sector 0 or overlaps the boot partition.
    Misplaced {
        /// Its first sector.
        first_sector: u32,
        /// Its length in sectors.
        sectors: u32,
    },
}

impl fmt::Display for SlotsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Absent => f.write_str("the card has no site slots (SITE.BIN is on FAT)"),
            Self::NoPartitionTable => f.write_str("the card has no MBR partition table"),
            Self::BadSize {
                slot_blocks,
                sectors,
            } => write!(
                f,
                "the site slot label names slots of {slot_blocks} blocks, which a partition \
                 of {sectors} sectors does not hold"
            ),
            Self::Misplaced {
                first_sector,
                sectors,
            } => write!(
                f,
                "the site slot partition ({sectors} sectors from sector {first_sector}) is \
                 off the card or overlaps the boot partition"
            ),
        }
    }
}

/// The 0xDA partitions of MBR `sector` (entries 2 to 4), as (first sector, sectors).
pub fn candidates(sector: &[u8]) -> Result<[Option<(u32, u32)>; 3], SlotsError> {
    let sector = sector
        .get(..SECTOR_LEN)
        .ok_or(SlotsError::NoPartitionTable)?;
    if sector[SIGNATURE_AT..] != [0x55, 0xAA] {
        return Err(SlotsError::NoPartitionTable);
    }
    let mut found = [None; 3];
    for (index, out) in (1..4).zip(found.iter_mut()) {
        let entry = &sector[PARTITION_AT + 16 * index..PARTITION_AT + 16 * (index + 1)];
        if entry[4] == SLOTS_PARTITION_TYPE {
            *out = Some((le32(entry, 8), le32(entry, 12)));
        }
    }
    Ok(found)
}

/// The slots as a confirmed label describes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slots {
    /// The partition's first sector (the label block).
    pub first_sector: u32,
    /// Blocks in each slot.
    pub slot_blocks: u32,
    /// The owner's Ed25519 publish key; `None`: publishing is off.
    pub publish_key: Option<[u8; KEY_LEN]>,
}

impl Slots {
    /// Checks the label in `label`, for the 0xDA partition of `sectors` sectors from
    /// `first_sector` on a card of `card_sectors` with boot partition `boot`. `Absent` when
    /// the label is not a slot label (another 0xDA partition).
    pub fn confirm(
        first_sector: u32,
        sectors: u32,
        card_sectors: u64,
        boot: &Partition,
        label: &[u8],
    ) -> Result<Slots, SlotsError> {
        let label = label.get(..SECTOR_LEN).ok_or(SlotsError::Absent)?;
        if label[..16] != SLOTS_LABEL_MAGIC || label[16] != SLOTS_LABEL_VERSION {
            return Err(SlotsError::Absent);
        }
        let misplaced = SlotsError::Misplaced {
            first_sector,
            sectors,
        };
        let end = u64::from(first_sector) + u64::from(sectors);
        let boot_end = u64::from(boot.first_sector) + u64::from(boot.sectors);
        let overlaps_boot =
            u64::from(first_sector) < boot_end && end > u64::from(boot.first_sector);
        if first_sector == 0 || end > card_sectors || overlaps_boot {
            return Err(misplaced);
        }
        let slot_blocks = le32(label, 20);
        let needed = u64::from(slot_blocks) * 2 + u64::from(SLOTS_OFFSET_BLOCKS);
        if !(MIN_SLOT_BLOCKS..=MAX_SLOT_BLOCKS).contains(&slot_blocks)
            || needed != u64::from(sectors)
        {
            return Err(SlotsError::BadSize {
                slot_blocks,
                sectors,
            });
        }
        let publish_key = match label[24] {
            1 => {
                let mut key = [0u8; KEY_LEN];
                key.copy_from_slice(&label[32..32 + KEY_LEN]);
                Some(key)
            }
            _ => None,
        };
        Ok(Slots {
            first_sector,
            slot_blocks,
            publish_key,
        })
    }

    /// The sectors of a slot partition with slots of `slot_blocks`.
    pub fn partition_sectors(slot_blocks: u32) -> u64 {
        u64::from(SLOTS_OFFSET_BLOCKS) + 2 * u64::from(slot_blocks)
    }

    /// The card block of record copy `copy` (0 or 1).
    pub fn record_block(&self, copy: usize) -> u64 {
        u64::from(self.first_sector) + 1 + (copy as u64 & 1)
    }

    /// The card block slot `slot` (0: A, 1: B) starts at.
    pub fn slot_block(&self, slot: u8) -> u64 {
        u64::from(self.first_sector)
            + u64::from(SLOTS_OFFSET_BLOCKS)
            + u64::from(slot & 1) * u64::from(self.slot_blocks)
    }

    /// Bytes a slot holds.
    pub fn slot_bytes(&self) -> u64 {
        u64::from(self.slot_blocks) * SECTOR_LEN as u64
    }

    /// The blocks the kernel may write: the two record copies and both slots (not the label).
    pub fn writable(&self) -> (u64, u64) {
        (
            u64::from(self.first_sector) + 1,
            Self::partition_sectors(self.slot_blocks) - 1,
        )
    }
}

/// The label block `bramble image` writes for slots of `slot_blocks`, with the owner's
/// publish key if any.
pub fn label_block(slot_blocks: u32, publish_key: Option<&[u8; KEY_LEN]>) -> [u8; SECTOR_LEN] {
    let mut block = [0u8; SECTOR_LEN];
    block[..16].copy_from_slice(&SLOTS_LABEL_MAGIC);
    block[16] = SLOTS_LABEL_VERSION;
    block[20..24].copy_from_slice(&slot_blocks.to_le_bytes());
    if let Some(key) = publish_key {
        block[24] = 1;
        block[32..32 + KEY_LEN].copy_from_slice(key);
    }
    block
}

/// What the record says of one slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotEntry {
    /// The slot holds a whole, verified site (false: empty, or a write was started).
    pub valid: bool,
    /// The site's version (0 for the one `bramble image` put there).
    pub version: u64,
    /// The site image's length in bytes.
    pub len: u32,
    /// The site index's checksum (the header's), which boot compares.
    pub index_checksum: u32,
    /// SHA-256 of the whole image.
    pub sha256: [u8; 32],
}

/// The slot record: which slot is live, and what each holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotRecord {
    /// Saves so far; the copy with the higher number is the current one.
    pub sequence: u64,
    /// The live slot: 0 (A) or 1 (B).
    pub live: u8,
    /// The highest manifest version the board accepted (a publish or a rollback must bring a
    /// higher one, so no signed manifest is good twice).
    pub accepted: u64,
    /// Slot A and slot B.
    pub slots: [SlotEntry; 2],
}

const ENTRY_AT: [usize; 2] = [32, 32 + 64];
const CRC_AT: usize = SECTOR_LEN - 4;

impl SlotRecord {
    /// The record block for this record.
    pub fn encode(&self) -> [u8; SECTOR_LEN] {
        let mut block = [0u8; SECTOR_LEN];
        block[..8].copy_from_slice(&RECORD_MAGIC);
        block[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        block[16] = self.live & 1;
        block[24..32].copy_from_slice(&self.accepted.to_le_bytes());
        for (entry, &at) in self.slots.iter().zip(ENTRY_AT.iter()) {
            block[at] = u8::from(entry.valid);
            block[at + 4..at + 8].copy_from_slice(&entry.len.to_le_bytes());
            block[at + 8..at + 16].copy_from_slice(&entry.version.to_le_bytes());
            block[at + 16..at + 20].copy_from_slice(&entry.index_checksum.to_le_bytes());
            block[at + 32..at + 64].copy_from_slice(&entry.sha256);
        }
        let crc = bramble_site::crc32(&block[..CRC_AT]);
        block[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        block
    }

    /// A record block, if it is one and its checksum holds.
    pub fn decode(block: &[u8]) -> Option<SlotRecord> {
        let block = block.get(..SECTOR_LEN)?;
        if block[..8] != RECORD_MAGIC
            || le32(block, CRC_AT) != bramble_site::crc32(&block[..CRC_AT])
        {
            return None;
        }
        let le64 = |at: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&block[at..at + 8]);
            u64::from_le_bytes(bytes)
        };
        let live = block[16];
        if live > 1 {
            return None;
        }
        let mut slots = [SlotEntry::default(); 2];
        for (entry, &at) in slots.iter_mut().zip(ENTRY_AT.iter()) {
            let mut sha256 = [0u8; 32];
            sha256.copy_from_slice(&block[at + 32..at + 64]);
            *entry = SlotEntry {
                valid: block[at] == 1,
                len: le32(block, at + 4),
                version: le64(at + 8),
                index_checksum: le32(block, at + 16),
                sha256,
            };
        }
        Some(SlotRecord {
            sequence: le64(8),
            live,
            accepted: le64(24),
            slots,
        })
    }

    /// The current record from the two copies as read (either may be torn or blank): the
    /// valid one with the higher sequence number, and which copy the next save goes to.
    pub fn current(copies: [&[u8]; 2]) -> Option<(SlotRecord, usize)> {
        let a = SlotRecord::decode(copies[0]);
        let b = SlotRecord::decode(copies[1]);
        match (a, b) {
            (Some(a), Some(b)) if b.sequence > a.sequence => Some((b, 0)),
            (Some(a), _) => Some((a, 1)),
            (None, Some(b)) => Some((b, 0)),
            (None, None) => None,
        }
    }

    /// The record after this one with `change` applied: the sequence number one higher.
    pub fn next(&self, change: impl FnOnce(&mut SlotRecord)) -> SlotRecord {
        let mut next = *self;
        next.sequence = self.sequence.wrapping_add(1);
        change(&mut next);
        next
    }

    /// The slots to try at boot, in order: the live one, then the other, each only if the
    /// record calls it valid.
    pub fn boot_order(&self) -> impl Iterator<Item = u8> + '_ {
        let live = self.live & 1;
        [live, live ^ 1]
            .into_iter()
            .filter(|&slot| self.slots[usize::from(slot)].valid)
    }

    /// The idle slot (the one a publish writes).
    pub fn idle(&self) -> u8 {
        (self.live & 1) ^ 1
    }

    /// This record as the board must use it after boot served `served`: unchanged when that
    /// is the live slot; when the live slot failed its checks and boot served the other one,
    /// the served one is live, so that [`SlotRecord::idle`] (where a publish writes) is the
    /// slot that failed and never the one being served. Kept in RAM: the sequence number is
    /// not changed, and a publish's first save (which marks the idle slot invalid before
    /// writing it) puts it on the card.
    pub fn served_from(&self, served: u8) -> SlotRecord {
        let mut record = *self;
        record.live = served & 1;
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CARD: u64 = 131072; // 64 MiB
    const BOOT: Partition = Partition {
        kind: 0x0E,
        first_sector: 2048,
        sectors: 131072 - 2048 - 6144,
    };

    #[test]
    fn a_publish_never_writes_the_slot_boot_fell_back_to() {
        let record = SlotRecord {
            sequence: 7,
            live: 0,
            accepted: 3,
            slots: [entry(3), entry(2)],
        };
        // Slot A (live) failed its checks; boot served B.
        let served = record.served_from(1);
        assert_eq!(served.idle(), 0, "the publish goes to the slot that failed");
        assert_eq!(served.live, 1);
        assert_eq!(served.sequence, 7, "nothing saved yet");
        assert_eq!(served.slots, record.slots);
        assert_eq!(
            record.served_from(0),
            record,
            "the live slot served: unchanged"
        );
    }

    fn entry(version: u64) -> SlotEntry {
        SlotEntry {
            valid: true,
            version,
            len: 1000 + version as u32,
            index_checksum: 0xABCD_0000 + version as u32,
            sha256: [version as u8; 32],
        }
    }

    #[test]
    fn a_label_bramble_image_writes_confirms_and_places_the_slots() {
        let key = [7u8; 32];
        let label = label_block(2048, Some(&key));
        let first = 131072 - 6144;
        let slots = Slots::confirm(first, 6144, CARD, &BOOT, &label).unwrap();
        assert_eq!(slots.publish_key, Some(key));
        assert_eq!(slots.record_block(0), u64::from(first) + 1);
        assert_eq!(slots.record_block(1), u64::from(first) + 2);
        assert_eq!(slots.slot_block(0), u64::from(first) + 2048);
        assert_eq!(slots.slot_block(1), u64::from(first) + 4096);
        assert_eq!(slots.slot_block(1) + 2048, CARD, "slot B ends the card");
        assert_eq!(slots.writable(), (u64::from(first) + 1, 6143));
        let no_key = Slots::confirm(first, 6144, CARD, &BOOT, &label_block(2048, None)).unwrap();
        assert_eq!(no_key.publish_key, None);
    }

    #[test]
    fn a_store_label_a_bad_size_or_a_bad_place_is_refused() {
        let first = 131072 - 6144;
        let store = crate::store_region::label_block(64);
        assert_eq!(
            Slots::confirm(first, 6144, CARD, &BOOT, &store),
            Err(SlotsError::Absent)
        );
        assert_eq!(
            Slots::confirm(first, 6144, CARD, &BOOT, &[0; 10]),
            Err(SlotsError::Absent)
        );
        for blocks in [0, 2047, 4096, u32::MAX] {
            assert!(matches!(
                Slots::confirm(first, 6144, CARD, &BOOT, &label_block(blocks, None)),
                Err(SlotsError::BadSize { .. })
            ));
        }
        for (first, sectors) in [
            (0, 6144),
            (2048, 6144),
            (CARD as u32 - 100, 6144),
            (u32::MAX, 6144),
        ] {
            assert!(matches!(
                Slots::confirm(first, sectors, CARD, &BOOT, &label_block(2048, None)),
                Err(SlotsError::Misplaced { .. })
            ));
        }
    }

    #[test]
    fn candidates_are_the_0xda_entries_after_the_boot_partition() {
        let mut mbr = [0u8; SECTOR_LEN];
        assert_eq!(candidates(&mbr), Err(SlotsError::NoPartitionTable));
        mbr[510] = 0x55;
        mbr[511] = 0xAA;
        for (index, first, sectors) in [(0usize, 2048u32, 10u32), (1, 1024, 65), (2, 9000, 6144)] {
            let at = PARTITION_AT + 16 * index;
            mbr[at + 4] = 0xDA;
            mbr[at + 8..at + 12].copy_from_slice(&first.to_le_bytes());
            mbr[at + 12..at + 16].copy_from_slice(&sectors.to_le_bytes());
        }
        assert_eq!(
            candidates(&mbr).unwrap(),
            [Some((1024, 65)), Some((9000, 6144)), None]
        );
    }

    #[test]
    fn records_round_trip_and_a_torn_or_foreign_block_is_not_one() {
        let record = SlotRecord {
            sequence: 9,
            live: 1,
            accepted: 4,
            slots: [entry(3), entry(4)],
        };
        let block = record.encode();
        assert_eq!(SlotRecord::decode(&block), Some(record));
        for at in [0, 8, 16, 32, 40, 100, 200, 508] {
            let mut torn = block;
            torn[at] ^= 1;
            assert_eq!(SlotRecord::decode(&torn), None, "byte {at}");
        }
        assert_eq!(SlotRecord::decode(&[0u8; SECTOR_LEN]), None);
        assert_eq!(SlotRecord::decode(&block[..100]), None);
        // A live byte past 1 with a good checksum is still refused.
        let mut odd = block;
        odd[16] = 2;
        let crc = bramble_site::crc32(&odd[..CRC_AT]);
        odd[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(SlotRecord::decode(&odd), None);
    }

    /// A publish as two saves into alternate copies, cut (a copy zeroed or torn) at every
    /// point: the record read back is always the one before the save or the one after.
    #[test]
    fn a_cut_during_any_save_leaves_the_state_before_or_after_it() {
        let first = SlotRecord {
            sequence: 1,
            live: 0,
            accepted: 0,
            slots: [entry(0), SlotEntry::default()],
        };
        let mut copies = [first.encode(), [0u8; SECTOR_LEN]];
        let (current, next_copy) = SlotRecord::current([&copies[0], &copies[1]]).expect("one copy");
        assert_eq!((current, next_copy), (first, 1));
        let writing = current.next(|r| r.slots[usize::from(r.idle())].valid = false);
        let done = writing.next(|r| {
            let idle = r.idle();
            r.slots[usize::from(idle)] = entry(5);
            r.live = idle;
        });
        for (save, copy, before) in [(writing, 1usize, first), (done, 0usize, writing)] {
            let block = save.encode();
            for cut in [0, 1, 17, 255, 508, 511] {
                let mut torn = copies;
                torn[copy][..cut].copy_from_slice(&block[..cut]);
                let (seen, _) = SlotRecord::current([&torn[0], &torn[1]]).unwrap();
                assert_eq!(seen, before, "cut after {cut} bytes");
            }
            copies[copy] = block;
            let (seen, next) = SlotRecord::current([&copies[0], &copies[1]]).unwrap();
            assert_eq!(seen, save);
            assert_eq!(next, copy ^ 1);
        }
        let (last, _) = SlotRecord::current([&copies[0], &copies[1]]).unwrap();
        assert_eq!(last.live, 1);
        let mut order = last.boot_order();
        assert_eq!(
            (order.next(), order.next(), order.next()),
            (Some(1), Some(0), None)
        );
        let mut only_a = last;
        only_a.slots[1].valid = false;
        let mut order = only_a.boot_order();
        assert_eq!((order.next(), order.next()), (Some(0), None));
    }
}
