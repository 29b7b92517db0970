//! Fuzz target: the card's site slots (`bramble_fat::site_slots`). The input is the card's
//! size, the boot partition's place, an MBR sector, a label sector and the record's two
//! copies; whatever `candidates` and `Slots::confirm` accept must lie on the card, clear of the
//! boot partition, with both slots inside the partition; a record `SlotRecord::current` finds
//! must encode and decode back the same, and boot only from slots it calls whole.
#![no_main]

use bramble_fat::Partition;
use bramble_fat::site_slots::{SlotRecord, Slots, candidates};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let (numbers, rest) = data.split_at(16);
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
    let chunk = |n: usize| rest.get(n * 512..).map(|tail| &tail[..tail.len().min(512)]);
    let (mbr, label) = (chunk(0).unwrap_or(&[]), chunk(1).unwrap_or(&[]));
    let copies = [chunk(2).unwrap_or(&[]), chunk(3).unwrap_or(&[])];
    if let Some((record, next)) = SlotRecord::current(copies) {
        assert!(next < 2);
        assert_eq!(SlotRecord::decode(&record.encode()), Some(record));
        for slot in record.boot_order() {
            assert!(record.slots[usize::from(slot)].valid);
        }
    }
    let Ok(found) = candidates(mbr) else {
        return;
    };
    for (first, sectors) in found.into_iter().flatten() {
        let Ok(slots) = Slots::confirm(first, sectors, card_sectors, &boot, label) else {
            continue;
        };
        let end = u64::from(first) + u64::from(sectors);
        assert!(end <= card_sectors && first > 0);
        let boot_end = u64::from(boot.first_sector) + u64::from(boot.sectors);
        assert!(end <= u64::from(boot.first_sector) || u64::from(first) >= boot_end);
        assert_eq!(slots.slot_block(1) + u64::from(slots.slot_blocks), end);
        assert!(slots.record_block(1) < slots.slot_block(0));
        let (writable_first, writable_blocks) = slots.writable();
        assert_eq!(writable_first + writable_blocks, end);
    }
});
