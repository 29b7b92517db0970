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
    // With --force it does: a new pair (--debug: the global flag, with this subcommand).
    let forced = bramble()
        .args(["keygen", "--force", "--debug"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(forced.status.success());
    let again = bramble::publish::keys::read_public(&dir.path().join("owner.pub")).unwrap();
    assert_ne!(again, public, "a new key pair");
    let secret = bramble::publish::keys::read_secret(&key).unwrap();
    assert_eq!(secret.verifying_key().as_bytes(), &again);
    let public = again;
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

/// What the kernel would serve from the card image `bytes`: the newer whole record copy, its
/// live slot if the index verifies (bramble-store's `read_index`, the kernel's) and matches
/// the record, else the other: (slot, the slot's image bytes).
fn kernel_serves(bytes: &[u8]) -> (u8, Vec<u8>) {
    let (_, slots) = kernel_view(bytes);
    let block = |n: u64| &bytes[n as usize * 512..n as usize * 512 + 512];
    let (record, _) =
        SlotRecord::current([block(slots.record_block(0)), block(slots.record_block(1))])
            .expect("a whole record copy");
    for slot in record.boot_order() {
        let entry = record.slots[usize::from(slot)];
        let extents =
            bramble_store::fat::FileExtents::contiguous(slots.slot_block(slot), entry.len);
        let mut card = bramble_store::MemoryCard::new(bytes);
        let mut memory = vec![0u8; 1 << 20];
        if let Ok((index, _)) = bramble_store::read_index(&mut card, &extents, &mut memory)
            && index.checksum() == entry.index_checksum
            && index.image_len() == entry.len
        {
            let at = slots.slot_block(slot) as usize * 512;
            return (slot, bytes[at..at + entry.len as usize].to_vec());
        }
    }
    panic!("no slot would be served");
}

fn site_dir(dir: &Path, name: &str, pages: usize) -> std::path::PathBuf {
    let root = dir.join(name);
    fs::create_dir_all(&root).unwrap();
    for page in 0..pages {
        // Random letters (barely compressible), so the image has many blocks to write.
        let mut state = (page as u64 + 1) * 0x9E37_79B9 + name.len() as u64;
        let text: String = (0..4000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b'a' + (state % 26) as u8)
            })
            .collect();
        fs::write(root.join(format!("{name}{page}.html")), text).unwrap();
    }
    root
}

fn packed(dir: &Path) -> Vec<u8> {
    bramble::pack::pack_site(dir, &bramble::pack::PackOptions::default())
        .expect("pack")
        .image
}

/// A card made by the CLI with `keygen` and `image --publish-key`, the site of `site` in
/// slot A; returns (card, key).
fn cli_card(dir: &Path, site: &Path, slot_mib: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let key = dir.join("owner.key");
    if !key.exists() {
        assert!(
            bramble()
                .arg("keygen")
                .arg(&key)
                .status()
                .unwrap()
                .success()
        );
    }
    let card = dir.join("card.img");
    let out = bramble()
        .args(["image", "--slot-mib", slot_mib, "--kernel"])
        .arg(write_kernel(dir))
        .arg("--site")
        .arg(site)
        .arg("--publish-key")
        .arg(dir.join("owner.pub"))
        .arg("-o")
        .arg(&card)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (card, key)
}

fn publish(args: &[&str], card: &Path, key: &Path) -> std::process::Output {
    bramble()
        .arg("publish")
        .args(args)
        .arg("--card")
        .arg(card)
        .arg("--key")
        .arg(key)
        .output()
        .unwrap()
}

#[test]
fn cli_publish_rollback_and_the_refusals_leave_one_whole_site() {
    let dir = tempfile::tempdir().unwrap();
    let a = site_dir(dir.path(), "a", 3);
    let b = site_dir(dir.path(), "b", 5);
    let (card, key) = cli_card(dir.path(), &a, "1");
    let outside = |bytes: &[u8]| {
        let (_, slots) = kernel_view(bytes);
        bytes[..slots.first_sector as usize * 512 + 512].to_vec()
    };
    let before = outside(&fs::read(&card).unwrap());
    assert_eq!(kernel_serves(&fs::read(&card).unwrap()), (0, packed(&a)));

    let out = publish(&[b.to_str().unwrap(), "--version", "10"], &card, &key);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("published into slot B"), "{said}");
    let bytes = fs::read(&card).unwrap();
    assert_eq!(kernel_serves(&bytes), (1, packed(&b)));
    assert_eq!(
        outside(&bytes),
        before,
        "nothing but the slots and record was written"
    );

    // Refused, with the writer's JSON, and the live site unchanged: an old version, another
    // key, a site larger than the slot.
    let refused = |out: std::process::Output, code: &str| {
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("\"error\":\"{code}\"")), "{err}");
        assert_eq!(kernel_serves(&fs::read(&card).unwrap()), (1, packed(&b)));
    };
    refused(
        publish(&[a.to_str().unwrap(), "--version", "10"], &card, &key),
        "old-version",
    );
    assert!(
        bramble()
            .arg("keygen")
            .arg(dir.path().join("other.key"))
            .status()
            .unwrap()
            .success()
    );
    refused(
        publish(
            &[a.to_str().unwrap(), "--version", "11"],
            &card,
            &dir.path().join("other.key"),
        ),
        "bad-signature",
    );
    let big = site_dir(dir.path(), "big", 400);
    refused(
        publish(&[big.to_str().unwrap(), "--version", "12"], &card, &key),
        "too-large",
    );

    // Rollback: slot A again; its replay is old.
    let rollback = || {
        bramble()
            .args([
                "publish",
                "--rollback",
                "--debug",
                "--version",
                "13",
                "--card",
            ])
            .arg(&card)
            .arg("--key")
            .arg(&key)
            .output()
            .unwrap()
    };
    let out = rollback();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(kernel_serves(&fs::read(&card).unwrap()), (0, packed(&a)));
    let replay = rollback();
    assert!(!replay.status.success());
    let err = String::from_utf8_lossy(&replay.stderr);
    assert!(err.contains("\"error\":\"old-version\""), "{err}");
    assert_eq!(kernel_serves(&fs::read(&card).unwrap()).0, 0);
}

/// The power cut through the real binary: `bramble publish --card` killed by PID (SIGKILL)
/// at 20 moments spread over a publish's run; after each, the card as the kernel reads it
/// serves one whole site, the old or the new, byte for byte. (The cut lands between the
/// writer's writes; a block torn inside a write is the host test's in kernel/publish.)
#[test]
fn a_publish_killed_at_any_moment_leaves_the_old_or_the_new_site() {
    let dir = tempfile::tempdir().unwrap();
    let a = site_dir(dir.path(), "a", 3);
    let b = site_dir(dir.path(), "b", 150);
    let site_b = dir.path().join("b.bin");
    fs::write(&site_b, packed(&b)).unwrap();
    let (old, new) = (packed(&a), packed(&b));
    let (card, key) = cli_card(dir.path(), &a, "2");
    let pristine = fs::read(&card).unwrap();
    // One uncut run, to spread the cuts over its length.
    let started = std::time::Instant::now();
    let out = publish(&[site_b.to_str().unwrap(), "--version", "1"], &card, &key);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = started.elapsed();
    assert_eq!(kernel_serves(&fs::read(&card).unwrap()).1, new);
    let (mut saw_old, mut saw_new) = (0, 0);
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for cut in 0..20u32 {
        fs::write(&card, &pristine).unwrap();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = run.mul_f64(f64::from(cut) / 20.0 + (seed % 1000) as f64 / 20_000.0);
        let mut child = bramble()
            .arg("publish")
            .arg(&site_b)
            .args(["--version", "1", "--card"])
            .arg(&card)
            .arg("--key")
            .arg(&key)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL to this PID
        let _ = child.wait();
        let (_, served) = kernel_serves(&fs::read(&card).unwrap());
        if served == old {
            saw_old += 1;
        } else if served == new {
            saw_new += 1;
        } else {
            panic!("cut {cut} at {at:?}: a site that is neither");
        }
    }
    eprintln!("20 cuts over a {run:?} publish: {saw_old} old, {saw_new} new");
    assert_eq!(saw_old + saw_new, 20);
}

#[test]
fn cli_publish_out_writes_a_signed_manifest_and_the_image_for_a_static_host() {
    let dir = tempfile::tempdir().unwrap();
    let site = site_dir(dir.path(), "a", 3);
    let key = dir.path().join("owner.key");
    assert!(
        bramble()
            .arg("keygen")
            .arg(&key)
            .status()
            .unwrap()
            .success()
    );
    let out = dir.path().join("static");
    let run = |args: &[&str]| {
        bramble()
            .arg("publish")
            .arg(&site)
            .arg("--key")
            .arg(&key)
            .args(args)
            .output()
            .unwrap()
    };
    let done = run(&[
        "--out",
        out.to_str().unwrap(),
        "--host",
        "Garden",
        "--version",
        "77",
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(
        said.contains("version 77") && said.contains("site-77.bin"),
        "{said}"
    );
    let image = fs::read(out.join("site-77.bin")).unwrap();
    assert_eq!(image, packed(&site));
    let file = fs::read(out.join("manifest")).unwrap();
    let (manifest, signature) = bramble_publish::pull::split_manifest_file(&file).unwrap();
    let public = bramble::publish::keys::read_public(&dir.path().join("owner.pub")).unwrap();
    let checked =
        bramble_publish::manifest::Manifest::verify(manifest, signature, Some(&public), "garden")
            .expect("signed by the owner for garden");
    assert_eq!(checked.version, 77);
    assert_eq!(checked.len as usize, image.len());
    let sha: [u8; 32] = sha2::Digest::finalize(sha2::Digest::chain_update(
        <sha2::Sha256 as sha2::Digest>::new(),
        &image,
    ))
    .into();
    assert_eq!(checked.sha256, sha);
    // --rollback --out: a rollback manifest naming the site, and no image.
    let back = dir.path().join("back");
    let done = run(&[
        "--out",
        back.to_str().unwrap(),
        "--host",
        "garden",
        "--rollback",
        "--version",
        "78",
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let file = fs::read(back.join("manifest")).unwrap();
    let (manifest, signature) = bramble_publish::pull::split_manifest_file(&file).unwrap();
    let checked =
        bramble_publish::manifest::Manifest::verify(manifest, signature, Some(&public), "garden")
            .expect("signed by the owner for garden");
    assert_eq!(checked.action, bramble_publish::manifest::Action::Rollback);
    assert_eq!((checked.version, checked.sha256), (78, sha));
    assert_eq!(
        fs::read_dir(&back).unwrap().count(),
        1,
        "the manifest alone"
    );
    // --out needs --host, --host needs --out, --out excludes --card, --rollback --card names
    // no site, and a bad host name is refused.
    let x = dir.path().join("x");
    let x = x.to_str().unwrap();
    let card = dir.path().join("c.img");
    let card = card.to_str().unwrap();
    for (args, code) in [
        (&["--out", x][..], 2),
        (&["--host", "garden", "--card", card][..], 2),
        (&["--out", x, "--host", "garden", "--card", card][..], 2),
        (&["--rollback", "--card", card][..], 1),
        (&["--out", x, "--host", "a b"][..], 1),
    ] {
        let failed = run(args);
        assert_eq!(failed.status.code(), Some(code), "{args:?}");
    }
    assert!(
        !dir.path().join("x").exists(),
        "a refused publish wrote nothing"
    );
}
