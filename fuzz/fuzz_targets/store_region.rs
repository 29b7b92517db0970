//! Fuzz target: the certificate store's region on the card (`bramble_fat::store_region`), the
//! only blocks the kernel writes. The input is an MBR sector, a label sector, the card's size
//! and the boot partition's place; whatever `StorePartition::find` and `confirm` accept must
//! lie on the card, after sector 0, clear of the boot partition, within the size limits, and
//! start right after its label.
#![no_main]

use bramble_fat::Partition;
use bramble_fat::store_region::{MAX_STORE_REGION_BLOCKS, MIN_STORE_REGION_BLOCKS, StorePartition};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let (numbers, sectors) = data.split_at(16);
    let word = |at: usize| {
        u32::from_le_bytes([
            numbers[at],
            numbers[at + 1],
            numbers[at + 2],
            numbers[at + 3],
        ])
    };
    let card_sectors = u64::from(word(0)) | (u64::from(word(4)) << 32);
    let boot = Partition {
        kind: 0x0E,
        first_sector: word(8),
        sectors: word(12),
    };
    let (mbr, label) = sectors.split_at(sectors.len().min(512));
    let Ok(partition) = StorePartition::find(mbr, card_sectors, &boot) else {
        return;
    };
    let Ok(region) = partition.confirm(label) else {
        return;
    };
    let end = region.first_block + u64::from(region.blocks);
    assert!(
        region.first_block >= 2,
        "the label and the region come after sector 0"
    );
    assert_eq!(region.first_block, u64::from(partition.first_sector) + 1);
    assert!(end <= card_sectors, "on the card");
    let boot_end = u64::from(boot.first_sector) + u64::from(boot.sectors);
    assert!(
        end <= u64::from(boot.first_sector) || u64::from(partition.first_sector) >= boot_end,
        "clear of the boot partition"
    );
    assert!((MIN_STORE_REGION_BLOCKS..=MAX_STORE_REGION_BLOCKS).contains(&region.blocks));
});
