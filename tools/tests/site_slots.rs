//! `bramble image --slot-mib/--publish-key` and `bramble keygen`: the card's two site slots
//! after the FAT partition, read back with the kernel's own code (bramble-fat's card check,
//! slot label and record), the certificate store where it was, and the site in slot A only.

use std::fs;
use std::path::Path;
use std::process::Command;

use bramble::image::{self, ImageInputs, SlotSpec};
use bramble_fat::site_slots::{SlotRecord, Slots, candidates};

const MIB: u64 = 1024 * 1024;

fn bramble() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
}

fn site_image(dir: &Path) -> Vec<u8> {
    let site = dir.join("site");
    fs::create_dir_all(&site).unwrap();
    fs::write(site.join("index.html"), "<p>slot A".repeat(50)).unwrap();
    let packed =
        bramble::pack::pack_site(&site, &bramble::pack::PackOptions::default()).expect("pack");
    packed.image
}

/// The slots as the kernel finds them in `bytes`: the card check, then the 0xDA entries, the
/// one whose first block is a slot label.
fn kernel_view(bytes: &[u8]) -> (bramble_fat::FatVolume, Slots) {
    let sectors = (bytes.len() / 512) as u64;
    let volume = bramble_fat::check_card(sectors, |sector, buffer| {
        let at = sector as usize * 512;
        buffer.copy_from_slice(bytes.get(at..at + 512).ok_or(())?);
        Ok::<(), ()>(())
    })
    .expect("the kernel's card check");
    let slots = candidates(&bytes[..512])
        .unwrap()
        .into_iter()
        .flatten()
        .find_map(|(first, count)| {
            let at = first as usize * 512;
            Slots::confirm(
                first,
                count,
                sectors,
                &volume.partition,
                &bytes[at..at + 512],
            )
            .ok()
        })
        .expect("a slot partition");
    (volume, slots)
}

#[test]
fn slots_end_the_card_the_site_is_in_slot_a_and_the_record_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let site = site_image(dir.path());
    let inputs = ImageInputs {
        kernel: vec![7; 50_000],
        site: site.clone(),
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware: Vec::new(),
        size_mib: None,
        tls: None,
    };
    let img = dir.path().join("card.img");
    let spec = SlotSpec {
        slot_bytes: 4 * MIB,
        publish_key: Some([9; 32]),
    };
    let report = image::build_image_slotted(&inputs, Vec::new(), Some(&spec), &img).unwrap();
    let bytes = fs::read(&img).unwrap();
    assert_eq!(bytes.len() as u64, report.layout.image_bytes);
    assert!(bytes.len().is_power_of_two());
    let (volume, slots) = kernel_view(&bytes);
    assert_eq!(slots.slot_blocks, 8192);
    assert_eq!(slots.publish_key, Some([9; 32]));
    // The slots end the card, after the FAT partition, which does not overlap them.
    assert_eq!(slots.slot_block(1) + 8192, (bytes.len() / 512) as u64);
    let fat_end = u64::from(volume.partition.first_sector) + u64::from(volume.partition.sectors);
    assert!(fat_end <= u64::from(slots.first_sector));
    // The certificate store is where it always was.
    let store = bramble_fat::store_region::StorePartition::find(
        &bytes[..512],
        (bytes.len() / 512) as u64,
        &volume.partition,
    )
    .expect("the store partition");
    assert_eq!(store.first_sector, 1024);
    // The record: copy 0 whole, copy 1 blank; slot A live at version 0, B empty.
    let block = |n: u64| &bytes[n as usize * 512..n as usize * 512 + 512];
    let (record, next) =
        SlotRecord::current([block(slots.record_block(0)), block(slots.record_block(1))])
            .expect("a record");
    assert_eq!(next, 1);
    assert_eq!(record.live, 0);
    let a = record.slots[0];
    assert!(a.valid && a.version == 0 && a.len as usize == site.len());
    use sha2::Digest;
    assert_eq!(a.sha256, <[u8; 32]>::from(sha2::Sha256::digest(&site)));
    assert_eq!(
        a.index_checksum,
        bramble_site::SiteImage::new_checked(&site)
            .unwrap()
            .checksum()
    );
    assert!(!record.slots[1].valid);
    let start = slots.slot_block(0) as usize * 512;
    assert_eq!(&bytes[start..start + site.len()], &site[..]);
    // Slot B is zero, and SITE.BIN is not on the FAT partition.
    let b = slots.slot_block(1) as usize * 512;
    assert!(bytes[b..b + 8192 * 512].iter().all(|&byte| byte == 0));
    assert!(report.files.iter().all(|(name, _)| name != "SITE.BIN"));
    assert_eq!(
        bramble::image::card::read_boot_file(&img, "SITE.BIN").unwrap(),
        None
    );
}

#[test]
fn a_site_larger_than_a_slot_or_a_slot_of_no_whole_mib_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = ImageInputs {
        kernel: vec![7; 50_000],
        site: site_image(dir.path()),
        settings: bramble_settings::TEMPLATE.to_string(),
        firmware: Vec::new(),
        size_mib: Some(32),
        tls: None,
    };
    let img = dir.path().join("card.img");
    for slot_bytes in [MIB / 2, 3 * MIB / 2, 64 * MIB] {
        let spec = SlotSpec {
            slot_bytes,
            publish_key: None,
        };
        let error = image::build_image_slotted(&inputs, Vec::new(), Some(&spec), &img)
            .expect_err("refused");
        assert!(!img.exists(), "{error}");
    }
}

#[test]
fn cli_keygen_then_image_with_the_public_key_puts_it_in_the_slot_label() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("owner.key");
    let run = |command: &mut Command| {
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(bramble().arg("keygen").arg(&key));
    let public = bramble::publish::keys::read_public(&dir.path().join("owner.pub")).unwrap();
    let secret = bramble::publish::keys::read_secret(&key).unwrap();
    assert_eq!(secret.verifying_key().as_bytes(), &public);
    assert!(
        !bramble()
            .arg("keygen")
            .arg(&key)
            .output()
            .unwrap()
            .status
            .success(),
        "keygen does not overwrite"
    );
    site_image(dir.path());
    let img = dir.path().join("card.img");
    let out = run(bramble()
        .args(["image", "--kernel"])
        .arg(write_kernel(dir.path()))
        .arg("--site")
        .arg(dir.path().join("site"))
        .arg("--publish-key")
        .arg(dir.path().join("owner.pub"))
        .arg("-o")
        .arg(&img));
    assert!(out.contains("two site slots of 8 MiB"), "{out}");
    assert!(out.contains("publishing on"), "{out}");
    let bytes = fs::read(&img).unwrap();
    let (_, slots) = kernel_view(&bytes);
    assert_eq!(slots.publish_key, Some(public));
    assert_eq!(slots.slot_bytes(), 8 * MIB);
    // Slots without a key: publishing off.
    let out = run(bramble()
        .args(["image", "--slot-mib", "2", "--kernel"])
        .arg(write_kernel(dir.path()))
        .arg("--site")
        .arg(dir.path().join("site"))
        .arg("-o")
        .arg(&img));
    assert!(out.contains("publishing off"), "{out}");
    let (_, slots) = kernel_view(&fs::read(&img).unwrap());
    assert_eq!((slots.publish_key, slots.slot_bytes()), (None, 2 * MIB));
}

fn write_kernel(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("kernel.img");
    fs::write(&path, [0xEAu8; 4096]).unwrap();
    path
}
