//! `bramble flash`: writes an SD card image to a card the way a careful person would: refuses
//! a mounted, fixed or system disk, shows what it is about to overwrite and asks, syncs, and
//! reads everything back to compare.
//!
//! The checks read the mount table, the swap table and sysfs; they take them as parameters
//! ([`SystemTables`]) so that tests can hand in fakes. A regular file is a valid target too
//! (then only the write, sync and verify apply), which is how the write path is tested.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, IsTerminal, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Arguments of `bramble flash`.
#[derive(clap::Args, Debug)]
pub struct FlashArgs {
    /// The SD card image made by `bramble image`.
    pub image: PathBuf,
    /// The card: a whole disk such as /dev/sdb or /dev/mmcblk0 (or a regular file).
    pub device: PathBuf,
    /// Do not ask before writing.
    #[arg(long)]
    pub yes: bool,
    /// Write even to a disk that is mounted, not removable, or holds the running system.
    #[arg(long)]
    pub force: bool,
}

/// The bytes moved per write and per compare.
const CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// The system's view of its disks: the mount table (`/proc/mounts` format), the swap table
/// (`/proc/swaps` format) and the sysfs root (`/sys`), of which `block/<disk>/` is read.
#[derive(Clone, Copy, Debug)]
pub struct SystemTables<'a> {
    /// Lines of `source mountpoint type options dump pass`.
    pub mounts: &'a str,
    /// A header line, then lines of `filename type size used priority`.
    pub swaps: &'a str,
    /// Where sysfs is (`/sys` on a live system).
    pub sys_root: &'a Path,
}

/// One way a disk is in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskUse {
    /// The device in use (`/dev/sdb1`).
    pub device: String,
    /// Where: a mount point, or `swap`.
    pub place: String,
}

/// What sysfs and the tables say about a whole disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskInfo {
    /// The kernel's name for it (`sdb`, `mmcblk0`).
    pub name: String,
    /// Vendor and model as the device reports them (may be empty).
    pub model: String,
    /// Capacity in bytes.
    pub size_bytes: u64,
    /// Whether it is removable media: the removable flag, or an SD card in a built-in slot.
    pub removable: bool,
    /// Mounts and swap areas on the disk or its partitions (through device-mapper or RAID
    /// layers too).
    pub uses: Vec<DiskUse>,
}

impl DiskInfo {
    /// A one-line description: `Generic SD Card Reader (sdb), 31.9 GB`.
    pub fn describe(&self) -> String {
        let model = if self.model.is_empty() {
            "unknown model"
        } else {
            &self.model
        };
        format!("{model} ({}), {}", self.name, human_size(self.size_bytes))
    }

    /// Whether a use of this disk is the root file system.
    pub fn holds_root(&self) -> bool {
        self.uses.iter().any(|u| u.place == "/")
    }
}

/// Everything that stops a flash.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    /// The device path does not exist.
    #[error("{0} does not exist (is the card inserted? `lsblk` lists the disks)")]
    NoDevice(PathBuf),
    /// The device is a partition; images go on whole disks.
    #[error(
        "{device} is a partition of /dev/{disk}; give the whole disk (/dev/{disk}), the image \
         has its own partition table"
    )]
    Partition {
        /// The path given.
        device: PathBuf,
        /// The disk it belongs to.
        disk: String,
    },
    /// A block device sysfs knows nothing about.
    #[error("{0} is a block device that /sys/block does not describe; use --force to write anyway")]
    UnknownDisk(PathBuf),
    /// The disk, or one of its partitions, is mounted or used as swap.
    #[error(
        "{device} is in use: {}. Unmount it first (for example `umount {}`), or use --force",
        describe_uses(uses),
        uses.first().map(|u| u.device.as_str()).unwrap_or("")
    )]
    InUse {
        /// The path given.
        device: PathBuf,
        /// The mounts and swap areas found.
        uses: Vec<DiskUse>,
    },
    /// The disk holds the running system's root file system.
    #[error("{0} holds the running system (/ is on it); refusing to overwrite it without --force")]
    SystemDisk(PathBuf),
    /// The disk is not removable media.
    #[error(
        "{device} ({info}) is not removable media; SD cards and USB card readers usually are. \
         Check the name with `lsblk`, or use --force if you are sure"
    )]
    NotRemovable {
        /// The path given.
        device: PathBuf,
        /// Its description.
        info: String,
    },
    /// The image does not fit on the device.
    #[error("the image is {} but {device} holds only {}", human_size(*image_bytes), human_size(*device_bytes))]
    TooSmall {
        /// The path given.
        device: PathBuf,
        /// The image size.
        image_bytes: u64,
        /// The device size.
        device_bytes: u64,
    },
    /// The person did not confirm.
    #[error("nothing written")]
    NotConfirmed,
    /// No terminal to ask on, and no --yes.
    #[error(
        "not asking without a terminal: run it in a terminal, or add --yes to write without asking"
    )]
    NoTerminal,
    /// The read-back differs from the image.
    #[error(
        "verification failed: {device} differs from the image at byte {offset}; the card may be \
         faulty or fake (its real capacity smaller than it reports)"
    )]
    Mismatch {
        /// The device written.
        device: PathBuf,
        /// The first differing byte.
        offset: u64,
    },
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or device.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
}

fn describe_uses(uses: &[DiskUse]) -> String {
    uses.iter()
        .map(|u| {
            if u.place == "swap" {
                format!("{} is swap", u.device)
            } else {
                format!("{} is mounted on {}", u.device, u.place)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sizes as disk makers print them (decimal), with the binary size for image-sized numbers.
pub fn human_size(bytes: u64) -> String {
    const GB: f64 = 1e9;
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes as f64 >= GB {
        format!("{:.1} GB", bytes as f64 / GB)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

/// A sysfs attribute without surrounding blanks; `None` if missing or empty.
fn read_trimmed(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The last path component of a device path after following symbolic links where they exist
/// (`/dev/disk/by-id/...` and `/dev/mapper/...` are links to `/dev/sdb1`, `/dev/dm-0`).
fn kernel_name(device: &str) -> String {
    let path = Path::new(device);
    let resolved = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl SystemTables<'_> {
    fn block(&self) -> PathBuf {
        self.sys_root.join("block")
    }

    /// The whole disk that block device `name` is or belongs to, if sysfs knows it.
    fn disk_of(&self, name: &str) -> Option<String> {
        if name.is_empty() || name.contains('/') {
            return None;
        }
        if self.block().join(name).is_dir() {
            return Some(name.to_string());
        }
        let disks = fs::read_dir(self.block()).ok()?;
        disks.flatten().find_map(|disk| {
            disk.path()
                .join(name)
                .join("partition")
                .is_file()
                .then(|| disk.file_name().to_string_lossy().into_owned())
        })
    }

    /// The physical disks under block device `name`: itself, or for device-mapper and RAID
    /// devices, the disks under its `slaves`.
    fn physical_disks(&self, name: &str, depth: usize) -> Vec<String> {
        let Some(disk) = self.disk_of(name) else {
            return Vec::new();
        };
        let slaves_dir = self.block().join(&disk).join("slaves");
        let slaves: Vec<String> = fs::read_dir(&slaves_dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        if slaves.is_empty() || depth > 8 {
            return vec![disk];
        }
        slaves
            .iter()
            .flat_map(|slave| self.physical_disks(slave, depth + 1))
            .collect()
    }

    /// Every mount and swap area that lives on disk `disk`.
    fn uses_of(&self, disk: &str) -> Vec<DiskUse> {
        let mounts = self.mounts.lines().filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (source, place) = (fields.next()?, fields.next()?);
            Some((source, unescape_mount_field(place)))
        });
        let swaps = self.swaps.lines().skip(1).filter_map(|line| {
            line.split_whitespace()
                .next()
                .map(|source| (source, "swap".to_string()))
        });
        mounts
            .chain(swaps)
            .filter(|(source, _)| source.starts_with("/dev/"))
            .filter(|(source, _)| {
                self.physical_disks(&kernel_name(source), 0)
                    .iter()
                    .any(|d| d == disk)
            })
            .map(|(source, place)| DiskUse {
                device: source.to_string(),
                place,
            })
            .collect()
    }

    /// Reads what sysfs and the tables say about the block device named `name` (`sdb`), given
    /// as `device` on the command line. A partition is an error.
    pub fn examine(&self, device: &Path, name: &str) -> Result<DiskInfo, FlashError> {
        let disk = self
            .disk_of(name)
            .ok_or_else(|| FlashError::UnknownDisk(device.into()))?;
        if disk != name {
            return Err(FlashError::Partition {
                device: device.into(),
                disk,
            });
        }
        let dir = self.block().join(&disk);
        let vendor = read_trimmed(&dir.join("device/vendor")).unwrap_or_default();
        let model = read_trimmed(&dir.join("device/model"))
            .or_else(|| read_trimmed(&dir.join("device/name")))
            .unwrap_or_default();
        let model = [vendor, model]
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect::<Vec<_>>();
        // sysfs gives the size in 512-byte sectors whatever the device's sector size.
        let sectors: u64 = read_trimmed(&dir.join("size"))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let removable_flag = read_trimmed(&dir.join("removable")).as_deref() == Some("1");
        // A card in a built-in SD slot (mmcblk) reports removable=0 but is an SD card; soldered
        // eMMC reports type MMC and stays "not removable".
        let sd_card = read_trimmed(&dir.join("device/type")).as_deref() == Some("SD");
        Ok(DiskInfo {
            name: disk.clone(),
            model: model.join(" "),
            size_bytes: sectors * 512,
            removable: removable_flag || sd_card,
            uses: self.uses_of(&disk),
        })
    }
}

/// `/proc/mounts` writes spaces and a few other bytes in paths as octal escapes (`\040`).
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The refusals that apply to a disk, in order of seriousness; `--force` overrides them.
pub fn refusals(device: &Path, info: &DiskInfo) -> Vec<FlashError> {
    let mut found = Vec::new();
    if info.holds_root() {
        found.push(FlashError::SystemDisk(device.into()));
    }
    if !info.uses.is_empty() {
        found.push(FlashError::InUse {
            device: device.into(),
            uses: info.uses.clone(),
        });
    }
    if !info.removable {
        found.push(FlashError::NotRemovable {
            device: device.into(),
            info: info.describe(),
        });
    }
    found
}

/// Asks `question` on `output` and reads the answer from `input`: only `yes` goes ahead.
pub fn confirm(question: &str, input: &mut impl BufRead, output: &mut impl Write) -> bool {
    let _ = write!(output, "{question} Type yes to continue: ");
    let _ = output.flush();
    let mut answer = String::new();
    input.read_line(&mut answer).is_ok() && answer.trim().eq_ignore_ascii_case("yes")
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> FlashError + '_ {
    move |source| FlashError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `image` over the start of `device`, flushes it to the medium, then reads it back
/// and compares. `progress(done, total)` is called after each chunk of the write and of the
/// compare. Returns the number of bytes written.
pub fn write_and_verify(
    image: &Path,
    device: &Path,
    mut progress: impl FnMut(&str, u64, u64),
) -> Result<u64, FlashError> {
    let total = fs::metadata(image).map_err(io_error(image))?.len();
    let mut source = File::open(image).map_err(io_error(image))?;
    let is_block = fs::metadata(device)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false);
    let mut options = OpenOptions::new();
    options.write(true);
    if is_block {
        // Linux refuses O_EXCL on a block device that is mounted or otherwise claimed: a last
        // guard against writing under a live file system.
        options.custom_flags(libc::O_EXCL);
    }
    let mut target = options.open(device).map_err(io_error(device))?;
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut done = 0u64;
    loop {
        let n = read_full(&mut source, &mut buffer).map_err(io_error(image))?;
        if n == 0 {
            break;
        }
        target.write_all(&buffer[..n]).map_err(io_error(device))?;
        done += n as u64;
        progress("writing", done, total);
    }
    target.sync_all().map_err(io_error(device))?;
    // Drop the cached pages so the compare reads what is on the card, not what is in memory.
    let _ = rustix::fs::fadvise(&target, 0, None, rustix::fs::Advice::DontNeed);
    drop(target);
    verify(image, device, |done, total| {
        progress("verifying", done, total)
    })?;
    Ok(total)
}

/// Compares `device`'s first bytes with `image`.
pub fn verify(
    image: &Path,
    device: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<(), FlashError> {
    let total = fs::metadata(image).map_err(io_error(image))?.len();
    let mut expected = File::open(image).map_err(io_error(image))?;
    let mut actual = File::open(device).map_err(io_error(device))?;
    let mut want = vec![0u8; CHUNK_BYTES];
    let mut got = vec![0u8; CHUNK_BYTES];
    let mut offset = 0u64;
    loop {
        let n = read_full(&mut expected, &mut want).map_err(io_error(image))?;
        if n == 0 {
            return Ok(());
        }
        let m = read_full(&mut actual, &mut got[..n]).map_err(io_error(device))?;
        if let Some(at) = (0..n).find(|&i| i >= m || want[i] != got[i]) {
            return Err(FlashError::Mismatch {
                device: device.into(),
                offset: offset + at as u64,
            });
        }
        offset += n as u64;
        progress(offset, total);
    }
}

/// Reads until `buffer` is full or the end of the stream.
fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Everything `bramble flash` decides before writing, for one target.
fn preflight(
    args: &FlashArgs,
    tables: &SystemTables<'_>,
    image_bytes: u64,
) -> Result<String, FlashError> {
    let meta = fs::metadata(&args.device).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => FlashError::NoDevice(args.device.clone()),
        _ => FlashError::Io {
            path: args.device.clone(),
            source: e,
        },
    })?;
    if !meta.file_type().is_block_device() {
        return Ok(format!(
            "{} (a regular file, {})",
            args.device.display(),
            human_size(meta.len())
        ));
    }
    let name = kernel_name(&args.device.to_string_lossy());
    let info = match tables.examine(&args.device, &name) {
        Ok(info) => info,
        Err(FlashError::UnknownDisk(_)) if args.force => {
            eprintln!(
                "warning: {} is not in /sys/block; writing anyway (--force)",
                name
            );
            return Ok(args.device.display().to_string());
        }
        Err(e) => return Err(e),
    };
    if info.size_bytes != 0 && info.size_bytes < image_bytes {
        return Err(FlashError::TooSmall {
            device: args.device.clone(),
            image_bytes,
            device_bytes: info.size_bytes,
        });
    }
    for refusal in refusals(&args.device, &info) {
        if args.force {
            eprintln!("warning (--force): {refusal}");
        } else {
            return Err(refusal);
        }
    }
    Ok(format!("{}: {}", args.device.display(), info.describe()))
}

/// Runs `bramble flash`.
pub fn run(args: FlashArgs) -> anyhow::Result<()> {
    let image_bytes = fs::metadata(&args.image)
        .map_err(io_error(&args.image))?
        .len();
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
    let tables = SystemTables {
        mounts: &mounts,
        swaps: &swaps,
        sys_root: Path::new("/sys"),
    };
    let target = preflight(&args, &tables, image_bytes)?;

    println!(
        "Image:  {} ({})",
        args.image.display(),
        human_size(image_bytes)
    );
    println!("Target: {target}");
    if !args.yes {
        if !io::stdin().is_terminal() {
            return Err(FlashError::NoTerminal.into());
        }
        let question = "Everything on the target will be overwritten.";
        if !confirm(question, &mut io::stdin().lock(), &mut io::stdout()) {
            return Err(FlashError::NotConfirmed.into());
        }
    }

    let show = io::stderr().is_terminal();
    let written = write_and_verify(&args.image, &args.device, |what, done, total| {
        if show {
            let percent = (done * 100).checked_div(total).unwrap_or(100);
            eprint!(
                "\r{what}: {} of {} ({percent}%)   ",
                human_size(done),
                human_size(total)
            );
        }
    })?;
    if show {
        eprintln!();
    }
    println!(
        "Wrote and verified {} on {}. The card is ready: put it in the Pi.",
        human_size(written),
        args.device.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_fields_are_unescaped() {
        assert_eq!(
            unescape_mount_field("/media/me/MY\\040CARD"),
            "/media/me/MY CARD"
        );
        assert_eq!(unescape_mount_field("/plain"), "/plain");
        assert_eq!(unescape_mount_field("/odd\\9"), "/odd\\9");
    }

    #[test]
    fn confirmation_needs_yes() {
        let mut out = Vec::new();
        assert!(confirm("Sure?", &mut "yes\n".as_bytes(), &mut out));
        assert!(confirm("Sure?", &mut "YES\r\n".as_bytes(), &mut out));
        assert!(!confirm("Sure?", &mut "y\n".as_bytes(), &mut out));
        assert!(!confirm("Sure?", &mut "no\n".as_bytes(), &mut out));
        assert!(!confirm("Sure?", &mut "".as_bytes(), &mut out));
        assert!(String::from_utf8(out).unwrap().contains("Sure?"));
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_size(64 * 1024 * 1024), "64.0 MiB");
        assert_eq!(human_size(31_914_983_424), "31.9 GB");
    }
}
