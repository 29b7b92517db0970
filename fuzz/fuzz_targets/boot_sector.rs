//! Fuzz target: the SD card's first sectors. The input overwrites sector 0 (the MBR), the
//! partition's boot sector and the first root-folder sector of a real volume (FAT16 or
//! FAT32 as formatted by fatfs, with BRAMBLE.TXT and SITE.BIN); whatever the kernel's check
//! (`bramble_fat::check_card`) accepts is then opened and read with embedded-sdmmc, the
//! kernel's FAT library, which must not panic: the check is what keeps a bad card from
//! crashing the kernel at boot.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;

#[path = "../../kernel/fat/tests/support/mod.rs"]
mod support;

use support::{PARTITION_START, SECTOR, check, formatted_card, open_card};

/// A formatted card and where its root folder's first sector is.
struct Base {
    card: Vec<u8>,
    root_at: usize,
}

impl Base {
    fn new(fat32: bool) -> Self {
        let site: Vec<u8> = (0..3_000u32).map(|i| (i % 251) as u8).collect();
        let card = formatted_card(
            fat32,
            if fat32 { 33 } else { 4 },
            &[("BRAMBLE.TXT", b"hostname = pi\n"), ("SITE.BIN", &site)],
        );
        let volume = check(&card).expect("a formatted card passes");
        let boot = volume.boot_sector;
        let root_sector = match boot.root_cluster() {
            None => {
                u32::from(boot.reserved_sectors())
                    + u32::from(boot.fat_count()) * boot.fat_sectors()
            }
            Some(cluster) => {
                boot.first_data_sector() + (cluster - 2) * u32::from(boot.sectors_per_cluster())
            }
        };
        let root_at = (PARTITION_START + root_sector) as usize * SECTOR;
        Base { card, root_at }
    }
}

thread_local! {
    // Formatted once; each run overwrites three sectors and puts them back (copying a
    // 33 MiB card per run would cost more than the run).
    static BASES: [RefCell<Base>; 2] = [RefCell::new(Base::new(false)), RefCell::new(Base::new(true))];
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    BASES.with(|bases| {
        let mut base = bases[usize::from(first & 1)].borrow_mut();
        let root_at = base.root_at;
        let card = &mut base.card;
        let boot_at = PARTITION_START as usize * SECTOR;
        let mut saved = Vec::new();
        for (chunk, at) in rest.chunks(SECTOR).zip([0, boot_at, root_at]) {
            saved.push((at, card[at..at + chunk.len()].to_vec()));
            card[at..at + chunk.len()].copy_from_slice(chunk);
        }
        if check(card).is_ok() {
            let _ = open_card(card, 64 * 1024);
        }
        for (at, bytes) in saved {
            card[at..at + bytes.len()].copy_from_slice(&bytes);
        }
    });
});
