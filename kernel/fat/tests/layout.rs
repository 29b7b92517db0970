//! The card check against real volumes (formatted by fatfs, as the image tool does) and
//! against every way a boot sector can lie, with embedded-sdmmc as the witness: what the
//! check accepts, the library opens without panicking.

mod support;

use bramble_fat::{BootSector, CardCheckError, FatLayoutError, FatType, Partition};
use support::*;

const SETTINGS: &[u8] = b"hostname = pi\n";

fn site() -> Vec<u8> {
    (0..20_000u32).map(|i| (i % 251) as u8).collect()
}

fn small_fat16_card() -> Vec<u8> {
    formatted_card(
        false,
        4,
        &[("BRAMBLE.TXT", SETTINGS), ("SITE.BIN", &site())],
    )
}

/// Byte offset of the boot sector in a card made by [`formatted_card`].
const BOOT: usize = PARTITION_START as usize * SECTOR;

fn layout_error(card: &[u8]) -> FatLayoutError {
    match check(card) {
        Err(CardCheckError::Layout(error)) => error,
        other => panic!("expected a layout error, got {other:?}"),
    }
}

#[test]
fn formatted_volumes_pass_and_open() {
    let site = site();
    for (fat32, mib, fat_type) in [
        (false, 4, FatType::Fat16),
        (false, 32, FatType::Fat16),
        (true, 40, FatType::Fat32),
    ] {
        let card = formatted_card(
            fat32,
            mib,
            &[("BRAMBLE.TXT", SETTINGS), ("SITE.BIN", &site)],
        );
        let volume = check(&card).unwrap_or_else(|e| panic!("{mib} MiB: {e:?}"));
        assert_eq!(volume.partition.first_sector, PARTITION_START);
        assert_eq!(volume.partition.sectors, mib * 2048);
        let boot = volume.boot_sector;
        assert_eq!(boot.fat_type(), fat_type, "{mib} MiB");
        assert!(boot.total_sectors() <= mib * 2048);
        assert!(boot.first_data_sector() < boot.total_sectors());
        assert_eq!(boot.root_cluster().is_some(), fat32);
        let opened = open_card(&card, usize::MAX);
        assert!(opened.root, "{mib} MiB");
        assert_eq!(opened.settings.as_deref(), Some(SETTINGS));
        assert_eq!(opened.site.as_deref(), Some(site.as_slice()));
    }
}

#[test]
fn zero_sectors_per_cluster_is_refused_before_embedded_sdmmc_divides_by_zero() {
    // Review M4: embedded-sdmmc 0.10 divides the data sectors by the sectors per cluster
    // while it opens the volume (fat/bpb.rs:39), at every boot. The kernel checks first.
    let mut card = small_fat16_card();
    card[BOOT + 13] = 0;
    assert_eq!(layout_error(&card), FatLayoutError::BadClusterSize(0));
    let crashed = std::panic::catch_unwind(|| open_card_unchecked(&card, 0)).is_err();
    assert!(
        crashed,
        "embedded-sdmmc opened the card: the check may be relaxed"
    );
}

#[test]
fn every_lie_in_the_partition_table_is_named() {
    let card = small_fat16_card();
    let sectors = (card.len() / SECTOR) as u64;
    type Patch = fn(&mut [u8]);
    let cases: [(&str, Patch, FatLayoutError); 5] = [
        (
            "signature",
            |m| m[510] = 0,
            FatLayoutError::NoPartitionTable,
        ),
        (
            "status",
            |m| m[446] = 0x01,
            FatLayoutError::BadPartitionStatus(1),
        ),
        ("type", |m| m[450] = 0x83, FatLayoutError::NotFat(0x83)),
        (
            "start 0",
            |m| m[454..458].copy_from_slice(&0u32.to_le_bytes()),
            FatLayoutError::PartitionOutsideCard {
                first_sector: 0,
                sectors: 8192,
            },
        ),
        (
            "past the card",
            |m| m[458..462].copy_from_slice(&u32::MAX.to_le_bytes()),
            FatLayoutError::PartitionOutsideCard {
                first_sector: 2048,
                sectors: u32::MAX,
            },
        ),
    ];
    for (name, patch, expected) in cases {
        let mut mbr = card[..SECTOR].to_vec();
        patch(&mut mbr);
        assert_eq!(Partition::first(&mbr, sectors), Err(expected), "{name}");
    }
    assert_eq!(
        Partition::first(&card[..100], sectors),
        Err(FatLayoutError::Truncated)
    );
    // Bootable (0x80) is fine.
    let mut bootable = card[..SECTOR].to_vec();
    bootable[446] = 0x80;
    assert!(Partition::first(&bootable, sectors).is_ok());
}

#[test]
fn every_lie_in_the_boot_sector_is_named() {
    let card = small_fat16_card();
    let good = card[BOOT..BOOT + SECTOR].to_vec();
    let partition = 8192;
    let boot = BootSector::new_checked(&good, partition).unwrap();
    let total = boot.total_sectors();
    let put16 = |s: &mut [u8], at: usize, v: u16| s[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |s: &mut [u8], at: usize, v: u32| s[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let mut cases: Vec<(&str, Vec<u8>, FatLayoutError)> = Vec::new();
    let mut case = |name, patch: &dyn Fn(&mut [u8]), expected| {
        let mut sector = good.clone();
        patch(&mut sector);
        cases.push((name, sector, expected));
    };
    case(
        "signature",
        &|s| s[511] = 0,
        FatLayoutError::NoBootSignature,
    );
    case(
        "sector size",
        &|s| put16(s, 11, 4096),
        FatLayoutError::BadSectorSize(4096),
    );
    case(
        "3 per cluster",
        &|s| s[13] = 3,
        FatLayoutError::BadClusterSize(3),
    );
    case(
        "0 per cluster",
        &|s| s[13] = 0,
        FatLayoutError::BadClusterSize(0),
    );
    case(
        "no reserved",
        &|s| put16(s, 14, 0),
        FatLayoutError::NoReservedSectors,
    );
    case("no fat", &|s| s[16] = 0, FatLayoutError::NoFat);
    // A 0 in the 16-bit field sends readers to the 32-bit one (as on FAT32).
    case(
        "fat size 0",
        &|s| {
            put16(s, 22, 0);
            put32(s, 36, 0);
        },
        FatLayoutError::EmptyFat,
    );
    case(
        "no sectors",
        &|s| {
            put16(s, 19, 0);
            put32(s, 32, 0);
        },
        FatLayoutError::NoSectors,
    );
    case(
        "bigger than partition",
        &|s| {
            put16(s, 19, 0);
            put32(s, 32, 9000);
        },
        FatLayoutError::VolumeLargerThanPartition {
            volume: 9000,
            partition,
        },
    );
    case(
        "huge fats",
        &|s| {
            s[16] = 255;
            put16(s, 22, 0xFFFF);
        },
        FatLayoutError::MetadataLargerThanVolume,
    );
    case(
        "reserved fills it",
        &|s| put16(s, 14, total as u16),
        FatLayoutError::MetadataLargerThanVolume,
    );
    case("fat12", &|s| s[13] = 2, FatLayoutError::Fat12);
    case(
        "fat too small",
        &|s| put16(s, 22, 1),
        FatLayoutError::FatTooSmall,
    );
    for (name, sector, expected) in cases {
        assert_eq!(
            BootSector::new_checked(&sector, partition),
            Err(expected),
            "{name}"
        );
    }
    assert_eq!(
        BootSector::new_checked(&good[..511], partition),
        Err(FatLayoutError::Truncated)
    );
}

#[test]
fn fat32_root_cluster_and_version_are_checked() {
    let card = formatted_card(true, 40, &[("SITE.BIN", b"x")]);
    let good = card[BOOT..BOOT + SECTOR].to_vec();
    let partition = 40 * 2048;
    let boot = BootSector::new_checked(&good, partition).unwrap();
    assert_eq!(boot.fat_type(), FatType::Fat32);
    for (root, ok) in [
        (0, false),
        (1, false),
        (2, true),
        (boot.clusters() + 1, true),
        (boot.clusters() + 2, false),
        (0xFFFF_FFF0, false),
    ] {
        let mut sector = good.clone();
        sector[44..48].copy_from_slice(&root.to_le_bytes());
        let result = BootSector::new_checked(&sector, partition);
        assert_eq!(result.is_ok(), ok, "root cluster {root}: {result:?}");
        if !ok {
            assert_eq!(result, Err(FatLayoutError::BadRootCluster(root)));
        }
    }
    let mut sector = good.clone();
    sector[42] = 1;
    assert_eq!(
        BootSector::new_checked(&sector, partition),
        Err(FatLayoutError::UnsupportedFat32Version(1))
    );
}

#[test]
fn a_file_entry_with_a_cluster_outside_the_volume_is_refused_before_it_is_read() {
    // Found by the boot_sector fuzz target: a FAT32 directory entry whose first cluster is
    // above 0x3FFF_FFFF makes embedded-sdmmc panic (fat/volume.rs:302) as soon as a read
    // crosses into the file's second cluster. The kernel checks each entry first.
    let site = site();
    let mut card = formatted_card(true, 40, &[("SITE.BIN", &site)]);
    let volume = check(&card).unwrap();
    let boot = volume.boot_sector;
    let entry = card
        .windows(11)
        .position(|w| w == b"SITE    BIN")
        .expect("SITE.BIN's entry");
    let cluster_at = |b: &[u8]| {
        u32::from(u16::from_le_bytes([b[entry + 20], b[entry + 21]])) << 16
            | u32::from(u16::from_le_bytes([b[entry + 26], b[entry + 27]]))
    };
    let first = cluster_at(&card);
    let size = site.len() as u32;
    assert_eq!(boot.check_file_start(first, size), Ok(()));
    assert_eq!(boot.check_file_entry(&card[entry..entry + 32]), Ok(()));
    // 0xFFFF_FF00: past 0x3FFF_FFFF, and (with wrapping sums, as in the kernel's release
    // build) a sector inside the card, so the first cluster reads and the second panics.
    card[entry + 20..entry + 22].copy_from_slice(&0xFFFFu16.to_le_bytes());
    card[entry + 26..entry + 28].copy_from_slice(&0xFF00u16.to_le_bytes());
    let bad = cluster_at(&card);
    assert_eq!(
        boot.check_file_entry(&card[entry..entry + 32]),
        Err(FatLayoutError::BadFileCluster { cluster: bad, size })
    );
    let crashed = std::panic::catch_unwind(|| open_card_unchecked(&card, usize::MAX)).is_err();
    assert!(
        crashed,
        "embedded-sdmmc read the file: the check may be relaxed"
    );
    // The checked path refuses the file and carries on.
    let opened = open_card(&card, usize::MAX);
    assert!(opened.root && opened.site.is_none());
    // Cluster 0 is only for empty files; 1 and one past the last are never valid.
    assert_eq!(boot.check_file_start(0, 0), Ok(()));
    for (cluster, size) in [(0, 1), (1, 1), (boot.clusters() + 2, 1)] {
        assert!(boot.check_file_start(cluster, size).is_err(), "{cluster}");
    }
    assert_eq!(boot.check_file_start(boot.clusters() + 1, 1), Ok(()));
}

#[test]
fn errors_read_as_sentences() {
    assert_eq!(
        FatLayoutError::BadClusterSize(0).to_string(),
        "0 sectors per cluster (a power of two from 1 to 128 expected)"
    );
    assert_eq!(
        FatLayoutError::VolumeLargerThanPartition {
            volume: 9,
            partition: 8
        }
        .to_string(),
        "the volume has 9 sectors but its partition only 8"
    );
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn what_the_check_accepts_embedded_sdmmc_opens_without_panicking() {
    // Mutations of the geometry fields of the boot sector and the partition entry, bounded in
    // count: the check either refuses the card or embedded-sdmmc opens it (or fails) cleanly.
    let mut card = small_fat16_card();
    let base = card.clone();
    let fields: &[usize] = &[
        11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 23, 32, 33, 34, 35, 36, 37, 38, 39, 42, 43, 44,
        45, 46, 47,
    ];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut accepted = 0;
    for _ in 0..3_000 {
        card.copy_from_slice(&base);
        for _ in 0..1 + rng.next() % 3 {
            let r = rng.next();
            if r.is_multiple_of(4) {
                let at = 446 + 8 + (r >> 8) as usize % 8;
                card[at] = (r >> 16) as u8;
            } else {
                let at = BOOT + fields[(r >> 8) as usize % fields.len()];
                card[at] = (r >> 16) as u8;
            }
        }
        if check(&card).is_ok() {
            accepted += 1;
            let result = std::panic::catch_unwind(|| open_card(&card, 64 * 1024));
            assert!(
                result.is_ok(),
                "accepted card made embedded-sdmmc panic: mbr {:02x?} bpb {:02x?}",
                &card[446..462],
                &card[BOOT..BOOT + 64]
            );
        }
    }
    assert!(
        accepted > 100,
        "only {accepted} mutants accepted: the test exercises little"
    );
}
