//! `bramble flash` tests: the write/verify path against regular files, and every refusal
//! against fake mount tables and a fake sysfs tree.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use bramble::flash::{self, DiskUse, FlashError, SystemTables};

/// A fake sysfs root with `block/<disk>/...` entries.
struct FakeSys {
    dir: tempfile::TempDir,
}

impl FakeSys {
    fn new() -> Self {
        FakeSys {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Adds a disk with its attributes and partitions.
    fn disk(&self, name: &str, removable: bool, sectors: u64, model: &str, partitions: &[&str]) {
        let dir = self.root().join("block").join(name);
        fs::create_dir_all(dir.join("device")).unwrap();
        fs::write(dir.join("removable"), if removable { "1\n" } else { "0\n" }).unwrap();
        fs::write(dir.join("size"), format!("{sectors}\n")).unwrap();
        fs::write(dir.join("device/model"), format!("{model}  \n")).unwrap();
        for partition in partitions {
            fs::create_dir_all(dir.join(partition)).unwrap();
            fs::write(dir.join(partition).join("partition"), "1\n").unwrap();
        }
    }

    fn set(&self, disk: &str, file: &str, value: &str) {
        let path = self.root().join("block").join(disk).join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, value).unwrap();
    }

    fn tables<'a>(&'a self, mounts: &'a str, swaps: &'a str) -> SystemTables<'a> {
        SystemTables {
            mounts,
            swaps,
            sys_root: self.root(),
        }
    }
}

const NO_SWAPS: &str = "Filename\tType\tSize\tUsed\tPriority\n";
const ROOT_ON_NVME: &str = "sysfs /sys sysfs rw 0 0\n/dev/nvme0n1p2 / ext4 rw,relatime 0 0\n";

fn card_reader(sys: &FakeSys) {
    sys.disk("sdz", true, 62_333_952, "SD Card Reader", &["sdz1", "sdz2"]);
    sys.set("sdz", "device/vendor", "Generic \n");
    sys.disk(
        "nvme0n1",
        false,
        1_000_215_216,
        "Samsung SSD 980",
        &["nvme0n1p1", "nvme0n1p2"],
    );
}

#[test]
fn a_clean_removable_card_passes_and_is_described() {
    let sys = FakeSys::new();
    card_reader(&sys);
    let tables = sys.tables(ROOT_ON_NVME, NO_SWAPS);
    let info = tables.examine(Path::new("/dev/sdz"), "sdz").unwrap();
    assert!(info.removable);
    assert!(info.uses.is_empty(), "{:?}", info.uses);
    assert_eq!(info.size_bytes, 62_333_952 * 512);
    assert_eq!(info.describe(), "Generic SD Card Reader (sdz), 31.9 GB");
    assert!(flash::refusals(Path::new("/dev/sdz"), &info).is_empty());
}

#[test]
fn a_mounted_partition_is_refused() {
    let sys = FakeSys::new();
    card_reader(&sys);
    let mounts = format!("{ROOT_ON_NVME}/dev/sdz1 /media/me/MY\\040CARD vfat rw 0 0\n");
    let info = sys
        .tables(&mounts, NO_SWAPS)
        .examine(Path::new("/dev/sdz"), "sdz")
        .unwrap();
    assert_eq!(
        info.uses,
        [DiskUse {
            device: "/dev/sdz1".into(),
            place: "/media/me/MY CARD".into()
        }]
    );
    let refusals = flash::refusals(Path::new("/dev/sdz"), &info);
    assert_eq!(refusals.len(), 1);
    let message = refusals[0].to_string();
    assert!(matches!(refusals[0], FlashError::InUse { .. }));
    assert!(
        message.contains("/dev/sdz1 is mounted on /media/me/MY CARD"),
        "{message}"
    );
    assert!(message.contains("umount /dev/sdz1"), "{message}");
}

#[test]
fn the_whole_disk_mounted_or_swap_is_refused() {
    let sys = FakeSys::new();
    card_reader(&sys);
    let mounts = format!("{ROOT_ON_NVME}/dev/sdz /mnt vfat rw 0 0\n");
    let info = sys
        .tables(&mounts, NO_SWAPS)
        .examine(Path::new("/dev/sdz"), "sdz")
        .unwrap();
    assert_eq!(info.uses.len(), 1);

    let swaps = format!("{NO_SWAPS}/dev/sdz2  partition\t1048572\t0\t-2\n");
    let info = sys
        .tables(ROOT_ON_NVME, &swaps)
        .examine(Path::new("/dev/sdz"), "sdz")
        .unwrap();
    assert_eq!(
        info.uses,
        [DiskUse {
            device: "/dev/sdz2".into(),
            place: "swap".into()
        }]
    );
    assert!(
        flash::refusals(Path::new("/dev/sdz"), &info)[0]
            .to_string()
            .contains("is swap")
    );
}

#[test]
fn the_system_disk_is_refused_and_so_is_a_fixed_disk() {
    let sys = FakeSys::new();
    card_reader(&sys);
    let tables = sys.tables(ROOT_ON_NVME, NO_SWAPS);
    let device = Path::new("/dev/nvme0n1");
    let info = tables.examine(device, "nvme0n1").unwrap();
    assert!(info.holds_root());
    let refusals = flash::refusals(device, &info);
    assert!(
        matches!(refusals[0], FlashError::SystemDisk(_)),
        "{refusals:?}"
    );
    assert!(
        refusals
            .iter()
            .any(|r| matches!(r, FlashError::InUse { .. }))
    );
    assert!(
        refusals
            .iter()
            .any(|r| matches!(r, FlashError::NotRemovable { .. }))
    );

    // A second fixed disk, not mounted: refused only as not removable.
    sys.disk("sdy", false, 3_907_029_168, "WDC WD20EZRZ", &[]);
    let info = tables.examine(Path::new("/dev/sdy"), "sdy").unwrap();
    let refusals = flash::refusals(Path::new("/dev/sdy"), &info);
    assert_eq!(refusals.len(), 1);
    assert!(
        refusals[0].to_string().contains("not removable"),
        "{}",
        refusals[0]
    );
}

#[test]
fn root_through_device_mapper_is_traced_to_its_disk() {
    let sys = FakeSys::new();
    card_reader(&sys);
    sys.disk("dm-0", false, 1_000_000, "", &[]);
    sys.set("dm-0", "slaves/nvme0n1p2", "");
    let tables = sys.tables("/dev/dm-0 / ext4 rw 0 0\n", NO_SWAPS);
    let info = tables
        .examine(Path::new("/dev/nvme0n1"), "nvme0n1")
        .unwrap();
    assert!(info.holds_root(), "{:?}", info.uses);
    let card = tables.examine(Path::new("/dev/sdz"), "sdz").unwrap();
    assert!(card.uses.is_empty());
}

#[test]
fn a_partition_or_unknown_device_is_refused() {
    let sys = FakeSys::new();
    card_reader(&sys);
    let tables = sys.tables(ROOT_ON_NVME, NO_SWAPS);
    let err = tables.examine(Path::new("/dev/sdz1"), "sdz1").unwrap_err();
    assert!(
        matches!(&err, FlashError::Partition { disk, .. } if disk == "sdz"),
        "{err}"
    );
    assert!(err.to_string().contains("/dev/sdz"), "{err}");
    let err = tables.examine(Path::new("/dev/sdq"), "sdq").unwrap_err();
    assert!(matches!(err, FlashError::UnknownDisk(_)), "{err}");
}

#[test]
fn an_sd_card_in_a_built_in_slot_counts_as_removable() {
    let sys = FakeSys::new();
    sys.disk("mmcblk0", false, 31_116_288, "", &["mmcblk0p1"]);
    sys.set("mmcblk0", "device/type", "SD\n");
    sys.set("mmcblk0", "device/name", "SC32G\n");
    sys.disk("mmcblk1", false, 61_071_360, "", &[]);
    sys.set("mmcblk1", "device/type", "MMC\n");
    let tables = sys.tables("", NO_SWAPS);
    let sd = tables
        .examine(Path::new("/dev/mmcblk0"), "mmcblk0")
        .unwrap();
    assert!(sd.removable);
    assert!(
        sd.describe().starts_with("SC32G (mmcblk0)"),
        "{}",
        sd.describe()
    );
    let emmc = tables
        .examine(Path::new("/dev/mmcblk1"), "mmcblk1")
        .unwrap();
    assert!(!emmc.removable, "soldered eMMC is not removable");
}

fn noise(len: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn image_and_target(dir: &Path, image_len: usize, target_len: usize) -> (PathBuf, PathBuf) {
    let image = dir.join("bramble.img");
    fs::write(&image, noise(image_len)).unwrap();
    let target = dir.join("card");
    fs::write(&target, vec![0xEEu8; target_len]).unwrap();
    (image, target)
}

#[test]
fn write_and_verify_copies_every_byte_and_reports_progress() {
    let dir = tempfile::tempdir().unwrap();
    // Not a multiple of the chunk size, and a target larger than the image.
    let (image, target) = image_and_target(dir.path(), 9 * 1024 * 1024 + 17, 12 * 1024 * 1024);
    let mut seen = Vec::new();
    let written = flash::write_and_verify(&image, &target, |what, done, total| {
        seen.push((what.to_string(), done, total))
    })
    .unwrap();
    let image_bytes = fs::read(&image).unwrap();
    assert_eq!(written, image_bytes.len() as u64);
    let card = fs::read(&target).unwrap();
    assert!(card[..image_bytes.len()] == image_bytes[..]);
    assert!(
        card[image_bytes.len()..].iter().all(|&b| b == 0xEE),
        "the rest is left alone"
    );
    let last_write = seen.iter().rev().find(|(w, ..)| w == "writing").unwrap();
    assert_eq!((last_write.1, last_write.2), (written, written));
    let last_verify = seen.last().unwrap();
    assert_eq!(
        (last_verify.0.as_str(), last_verify.1),
        ("verifying", written)
    );
}

#[test]
fn verify_finds_the_first_differing_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (image, target) = image_and_target(dir.path(), 5 * 1024 * 1024, 0);
    let mut bytes = fs::read(&image).unwrap();
    bytes[4_500_001] ^= 0x40;
    fs::write(&target, &bytes).unwrap();
    let err = flash::verify(&image, &target, |_, _| {}).unwrap_err();
    assert!(
        matches!(
            err,
            FlashError::Mismatch {
                offset: 4_500_001,
                ..
            }
        ),
        "{err}"
    );

    // A target that ends early (a fake-capacity card) fails at its end.
    fs::write(&target, &bytes[..1000]).unwrap();
    let err = flash::verify(&image, &target, |_, _| {}).unwrap_err();
    assert!(
        matches!(err, FlashError::Mismatch { offset: 1000, .. }),
        "{err}"
    );
}

fn bramble() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
}

#[test]
fn cli_flashes_a_regular_file_with_yes() {
    let dir = tempfile::tempdir().unwrap();
    let (image, target) = image_and_target(dir.path(), 3 * 1024 * 1024 + 5, 0);
    let output = bramble()
        .arg("flash")
        .arg(&image)
        .arg(&target)
        .arg("--yes")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("verified"), "{stdout}");
    assert_eq!(fs::read(&target).unwrap(), fs::read(&image).unwrap());
}

#[test]
fn cli_asks_first_and_writes_nothing_without_a_yes() {
    let dir = tempfile::tempdir().unwrap();
    let (image, target) = image_and_target(dir.path(), 1024 * 1024, 16);
    // No terminal on stdin and no --yes: it must not write.
    let output = bramble()
        .arg("flash")
        .arg(&image)
        .arg(&target)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--yes"));
    assert_eq!(fs::read(&target).unwrap(), vec![0xEE; 16]);

    let missing = dir.path().join("no-such-card");
    let output = bramble()
        .arg("flash")
        .arg(&image)
        .arg(&missing)
        .arg("--yes")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not exist"));
    assert!(!missing.exists(), "never creates the target");
}
