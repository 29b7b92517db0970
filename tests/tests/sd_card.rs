//! Boots raspi1ap with SD card images built by the tool: the kernel must find, read and verify
//! SITE.BIN (naming the packer's file count and checksum), report a corrupt one clearly, and
//! never write to the card.

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::{Kernel, Machine, QemuConfig};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A small but realistic site: nested directories, text and binary files.
fn make_site(dir: &Path) {
    std::fs::create_dir_all(dir.join("blog/first-post")).unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><title>t</title><h1>Hello</h1>\n".repeat(40),
    )
    .unwrap();
    std::fs::write(dir.join("style.css"), "body { color: #222; }\n".repeat(50)).unwrap();
    std::fs::write(
        dir.join("blog/first-post/index.html"),
        "<p>first</p>\n".repeat(30),
    )
    .unwrap();
    std::fs::write(dir.join("404.html"), "<h1>Not here</h1>").unwrap();
    let noise: Vec<u8> = (0u32..20_000)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(dir.join("photo.jpg"), noise).unwrap();
}

struct Card {
    path: PathBuf,
    files: usize,
    checksum: u32,
    _dir: tempfile::TempDir,
}

fn build_card(corrupt_site: bool) -> Card {
    let dir = tempfile::tempdir().unwrap();
    let site_dir = dir.path().join("site");
    make_site(&site_dir);
    let packed = pack_site(&site_dir, &PackOptions::default()).expect("pack");
    let checksum = bramble_site::SiteImage::new_checked(&packed.image)
        .unwrap()
        .checksum();
    let mut site = packed.image;
    if corrupt_site {
        let middle = site.len() / 2;
        site[middle] ^= 0x40; // one flipped bit in a body: only the checksum can notice
    }
    let path = dir.path().join("card.img");
    let inputs = ImageInputs {
        kernel: std::fs::read(&kernel().raw).unwrap(),
        site,
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: None,
    };
    build_image(&inputs, &path).expect("build image");
    Card {
        path,
        files: packed.summary.files,
        checksum,
        _dir: dir,
    }
}

fn sha256(path: &Path) -> Vec<u8> {
    Sha256::digest(std::fs::read(path).unwrap()).to_vec()
}

fn boot_with(card: &Path) -> Guest {
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel().raw.clone()));
    config.sd_card = Some(card.to_path_buf());
    Guest::start(&config)
}

#[test]
fn kernel_loads_and_verifies_the_packed_site() {
    let card = build_card(false);
    let before = sha256(&card.path);
    let mut guest = boot_with(&card.path);
    guest.expect_line("sd: ", BOOT_TIMEOUT);
    guest.expect_line("settings: ", Duration::from_secs(10));
    let summary = guest.expect_line("site: ", Duration::from_secs(30));
    assert!(
        summary.contains(&format!("site: {} files,", card.files)),
        "file count {} in {summary:?}",
        card.files
    );
    assert!(
        summary.contains(&format!("checksum {:#010x}", card.checksum)),
        "checksum {:#010x} in {summary:?}",
        card.checksum
    );
    guest.expect_line("ready:", Duration::from_secs(10));
    drop(guest);
    assert_eq!(
        sha256(&card.path),
        before,
        "the kernel must never write to its card"
    );
}

#[test]
fn corrupt_site_is_reported_without_crash_or_write() {
    let card = build_card(true);
    let before = sha256(&card.path);
    let mut guest = boot_with(&card.path);
    let error = guest.expect_line("site: ", BOOT_TIMEOUT);
    assert!(
        error.contains("ERROR") && error.contains("SITE.BIN is corrupt"),
        "{error:?}"
    );
    // Still alive and answering on its console.
    guest.expect_line("ready:", Duration::from_secs(10));
    guest.send_line("status");
    guest.expect_line("status: up", Duration::from_secs(10));
    assert!(
        !guest.transcript.iter().any(|line| line.contains("!!!")),
        "no fault or panic"
    );
    drop(guest);
    assert_eq!(
        sha256(&card.path),
        before,
        "the kernel must never write to its card"
    );
}

#[test]
fn missing_card_is_reported_and_the_kernel_keeps_running() {
    let mut guest = Guest::start(&QemuConfig::new(
        Machine::Raspi1ap,
        Kernel::Raw(kernel().raw.clone()),
    ));
    let error = guest.expect_line("site: ", BOOT_TIMEOUT);
    assert!(error.contains("SD card"), "{error:?}");
    guest.expect_line("ready:", Duration::from_secs(10));
}

#[test]
fn a_boot_sector_with_zero_sectors_per_cluster_is_reported_without_crash_or_write() {
    // Review M4: embedded-sdmmc divides by the boot sector's sectors per cluster while it
    // opens the volume, so such a card was a divide-by-zero panic, then a reset, at every
    // boot. The kernel now checks the card first (bramble-fat) and carries on without a site.
    let card = build_card(false);
    let mut bytes = std::fs::read(&card.path).unwrap();
    let partition = u32::from_le_bytes(bytes[454..458].try_into().unwrap()) as usize;
    bytes[partition * 512 + 13] = 0;
    std::fs::write(&card.path, &bytes).unwrap();
    let before = sha256(&card.path);
    let mut guest = boot_with(&card.path);
    let error = guest.expect_line("site: ", BOOT_TIMEOUT);
    assert!(
        error.contains("ERROR") && error.contains("0 sectors per cluster"),
        "{error:?}"
    );
    // Still alive, without a site (the diagnostic page and the no-site LED), answering on
    // its console.
    guest.expect_line("ready:", Duration::from_secs(10));
    guest.send_line("status");
    guest.expect_line("status: up", Duration::from_secs(10));
    assert!(
        !guest.transcript.iter().any(|line| line.contains("!!!")),
        "no fault or panic:\n{}",
        guest.transcript.join("\n")
    );
    drop(guest);
    assert_eq!(
        sha256(&card.path),
        before,
        "the kernel must never write to its card"
    );
}
