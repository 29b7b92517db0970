//! The board-rules judge (qemu/plugin/boardrules.c, bramble_qemu::board_rules) on real boots:
//! every guest of the tests runs under it (`bramble_tests::Guest`), and here it is shown to
//! see the EMMC's register writes and the peripheral switches of a whole boot of the kernel
//! with none broken, and to catch a kernel built with the EMMC write spacing removed (the
//! `break-board-rule-spacing` feature), with no false barrier violation.

use bramble::image::{ImageInputs, build_image};
use bramble::pack::{PackOptions, pack_site};
use bramble_qemu::board_rules::Verdict;
use bramble_qemu::{Kernel, Machine, QemuConfig};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel};
use std::path::{Path, PathBuf};
use std::process::Command;
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

/// The kernel built with `break-board-rule-spacing`, in a target folder of its own (seeded
/// from the normal kernel's, so only the changed crates are rebuilt).
fn kernel_without_spacing() -> PathBuf {
    let normal = kernel();
    let root = bramble::workspace_root();
    let target = root.join("target/kernel-broken-spacing");
    if !target.exists() {
        let seeded = Command::new("cp")
            .arg("-a")
            .arg(root.join("target/kernel"))
            .arg(&target)
            .status()
            .expect("cp");
        assert!(seeded.success(), "seeding {}", target.display());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "bramble-kernel",
            "--features",
            "break-board-rule-spacing",
            "--target",
            "armv6-none-eabihf",
            "-Zbuild-std=core,alloc",
            "-Zbuild-std-features=compiler-builtins-mem",
            "--target-dir",
        ])
        .arg(&target)
        .current_dir(&root)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("cargo");
    assert!(status.success(), "the broken kernel's build failed");
    let elf = target.join("armv6-none-eabihf/release/bramble-kernel");
    let image = bramble::kernel::flat_image(&std::fs::read(elf).unwrap()).unwrap();
    let raw = target.join("kernel.img");
    std::fs::write(&raw, &image).unwrap();
    assert_ne!(
        image,
        std::fs::read(&normal.raw).unwrap(),
        "the feature changed the kernel"
    );
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
    let broken = kernel_without_spacing();
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
