//! The board-rules judge (qemu/plugin/boardrules.c, bramble_qemu::board_rules) on real boots:
//! every guest of the tests runs under it (`bramble_tests::Guest`), and here it is shown to
//! see the EMMC's register writes and the peripheral switches of a whole boot of the kernel
//! with none broken, and to catch a kernel without the EMMC write spacing (the same kernel
//! with its `BRAMBLE_EMMC_WRITE_SPACING` byte set to 0 in a copy of kernel.img: no second
//! build), with no false barrier violation.

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::board_rules::Verdict;
use bramble_qemu::{Kernel, Machine, QemuConfig};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A card with a one-page site and `kernel_img`.
fn card(dir: &Path, kernel_img: &Path) -> PathBuf {
    let site = dir.join("site");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<!doctype html><title>t</title>hi\n",
    )
    .unwrap();
    let packed = pack_site(&site, &PackOptions::default()).expect("pack");
    let path = dir.join("card.img");
    let inputs = ImageInputs {
        kernel: std::fs::read(kernel_img).unwrap(),
        site: packed.image,
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: None,
    };
    build_image(&inputs, &path).expect("build image");
    path
}

/// Boots `kernel_img` with a card until it is ready, then stops it and returns the verdict.
fn judge_boot(kernel_img: &Path) -> Verdict {
    let dir = tempfile::tempdir().unwrap();
    let card = card(dir.path(), kernel_img);
    let mut config = QemuConfig::new(Machine::Raspi1ap, Kernel::Raw(kernel_img.to_path_buf()));
    config.sd_card = Some(card);
    let mut guest = Guest::start(&config);
    guest.expect_line("4-bit bus", BOOT_TIMEOUT);
    guest.expect_line("ready:", Duration::from_secs(30));
    guest.stop_and_judge().expect("the guest was judged")
}

/// The address of the symbol `name` in the 32-bit little-endian ELF `elf` (its `.symtab`).
fn symbol_address(elf: &[u8], name: &str) -> Option<u32> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let sections = u32_at(32)? as usize;
    let (entry_len, count) = (usize::from(u16_at(46)?), usize::from(u16_at(48)?));
    let section = |index: usize| {
        let at = sections + index * entry_len;
        // (type, offset, size, link, entry size)
        Some((
            u32_at(at + 4)?,
            u32_at(at + 16)? as usize,
            u32_at(at + 20)? as usize,
            u32_at(at + 24)? as usize,
            u32_at(at + 36)? as usize,
        ))
    };
    const SYMTAB: u32 = 2;
    let (_, offset, size, link, entry) =
        (0..count).find_map(|i| section(i).filter(|s| s.0 == SYMTAB))?;
    let (_, strings, strings_len, _, _) = section(link)?;
    let names = elf.get(strings..strings + strings_len)?;
    (0..size / entry.max(1)).find_map(|i| {
        let at = offset + i * entry;
        let start = u32_at(at)? as usize;
        let end = start + names.get(start..)?.iter().position(|&b| b == 0)?;
        (names.get(start..end)? == name.as_bytes()).then(|| u32_at(at + 4))?
    })
}

/// The test's kernel.img with register-write spacing off: the normal image with its
/// `BRAMBLE_EMMC_WRITE_SPACING` byte (kernel/bcm2835/src/emmc.rs) set to 0, in `dir`.
fn kernel_without_spacing(dir: &Path) -> PathBuf {
    let normal = kernel();
    let elf = std::fs::read(&normal.elf).unwrap();
    let address = symbol_address(&elf, "BRAMBLE_EMMC_WRITE_SPACING")
        .expect("the kernel's symbol table has BRAMBLE_EMMC_WRITE_SPACING");
    let mut image = std::fs::read(&normal.raw).unwrap();
    let at = (address - bramble::kernel::LOAD_ADDRESS) as usize;
    assert_eq!(image[at], 1, "the spacing is on in the kernel as built");
    image[at] = 0;
    let raw = dir.join("kernel-without-spacing.img");
    std::fs::write(&raw, &image).unwrap();
    raw
}

#[test]
fn the_kernel_keeps_the_board_rules_through_a_boot() {
    let verdict = judge_boot(&kernel().raw);
    assert!(verdict.started, "{verdict:?}");
    assert!(verdict.clean(), "{:#?}", verdict.violations);
    let (spacing, barrier, emmc_writes, switches) =
        verdict.totals.expect("QEMU exited cleanly with the totals");
    assert_eq!((spacing, barrier), (0, 0));
    // The judge saw the card's initialisation and the drivers' traffic.
    assert!(emmc_writes > 100, "{emmc_writes} EMMC writes");
    assert!(switches > 1_000, "{switches} peripheral switches");
}

#[test]
fn a_kernel_without_the_emmc_write_spacing_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let broken = kernel_without_spacing(dir.path());
    let verdict = judge_boot(&broken);
    let (spacing, barrier, emmc_writes, _) =
        verdict.totals.expect("QEMU exited cleanly with the totals");
    eprintln!("without spacing: {spacing} of {emmc_writes} EMMC writes too close");
    assert!(!verdict.clean());
    assert!(spacing > 10, "{spacing} spacing violations: {verdict:?}");
    assert_eq!(
        barrier, 0,
        "only the spacing was broken: {:#?}",
        verdict.violations
    );
    assert!(
        verdict.violations[0].starts_with("violation spacing "),
        "{:?}",
        verdict.violations
    );
}
