//! The card's site slots as the board reads them (`bramble_fat::site_slots` has the layout
//! and the record's format): finding the slot partition by its label, reading the record's
//! two copies. Switching the served site to the slot a publish made live: `live_switch`.

use bramble_fat::site_slots::{SlotRecord, Slots, SlotsError};
use bramble_hal::block::{BLOCK_SIZE, BlockDevice};

/// "A" or "B".
pub fn slot_name(slot: u8) -> &'static str {
    if slot & 1 == 0 { "A" } else { "B" }
}

/// Finds the slot partition: a 0xDA entry of the partition table whose first block is a slot
/// label, placed on the card and clear of the boot partition `boot`.
pub fn find(
    reader: &mut impl BlockDevice,
    boot: &bramble_fat::Partition,
) -> Result<Slots, SlotsError> {
    let mut sector = [0u8; BLOCK_SIZE];
    reader
        .read_blocks(0, &mut sector)
        .map_err(|_| SlotsError::NoPartitionTable)?;
    let candidates = bramble_fat::site_slots::candidates(&sector)?;
    let card_sectors = reader.block_count();
    let mut found = Err(SlotsError::Absent);
    for (first_sector, sectors) in candidates.into_iter().flatten() {
        if reader
            .read_blocks(u64::from(first_sector), &mut sector)
            .is_err()
        {
            continue;
        }
        match Slots::confirm(first_sector, sectors, card_sectors, boot, &sector) {
            Ok(slots) => return Ok(slots),
            Err(SlotsError::Absent) => {}
            Err(error) => found = Err(error),
        }
    }
    found
}

/// The current record from its two copies, and the copy the next save goes to; `None` when
/// neither copy reads whole.
pub fn read_record(reader: &mut impl BlockDevice, slots: &Slots) -> Option<(SlotRecord, usize)> {
    let mut copies = [[0u8; BLOCK_SIZE]; 2];
    for (copy, block) in copies.iter_mut().enumerate() {
        if let Err(error) = reader.read_blocks(slots.record_block(copy), block) {
            log::warn!("slots: record copy {copy} unreadable ({error:?})");
        }
    }
    SlotRecord::current([&copies[0], &copies[1]])
}
