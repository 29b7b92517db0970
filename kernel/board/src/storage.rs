//! The SD card at boot: initialise the EMMC controller, check the card's layout
//! (`bramble_fat`: partition table, boot sector, each file's directory entry), read
//! BRAMBLE.TXT and SITE.BIN from the FAT partition, and verify the site image. Nothing is
//! ever written to the card.

use crate::platform::{GPIO, micros};
use bramble_bcm2835::emmc::{Emmc, EmmcError};
use bramble_bcm2835::gpio::Function;
use bramble_fat::{BootSector, CardCheckError, FatLayoutError};
use bramble_hal::block::{BlockDevice, BlockError};
use bramble_settings::Settings;
use core::cell::RefCell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use embedded_sdmmc::{
    Block, BlockCount, BlockIdx, Mode, TimeSource, Timestamp, VolumeIdx, VolumeManager,
};

static CARD_READY_AT: AtomicU64 = AtomicU64::new(0);
static SITE_BYTES: AtomicUsize = AtomicUsize::new(0);
static TLS_FILES: spin::Once<TlsFiles> = spin::Once::new();
static ACME_CA: spin::Once<Result<&'static [u8], FileProblem>> = spin::Once::new();

/// Largest certificate chain or key file read (a chain of four RSA-4096 certificates is
/// about 9 KiB of PEM).
pub const MAX_TLS_FILE_BYTES: usize = 16 * 1024;

/// The HTTPS certificate chain and key as read from the card (with `https` on), or why each
/// could not be read.
pub struct TlsFiles {
    /// The PEM chain, `tls_certificate`.
    pub certificate: Result<&'static [u8], FileProblem>,
    /// The PEM key, `tls_key`.
    pub key: Result<&'static [u8], FileProblem>,
}

/// Why a small file could not be read from the card.
#[derive(Debug, Clone, Copy)]
pub enum FileProblem {
    /// The file is not in the card's top folder.
    Missing,
    /// The file is larger than [`MAX_TLS_FILE_BYTES`].
    TooLarge(u32),
    /// No memory was left for it.
    NoMemory,
    /// The filesystem failed.
    Unreadable,
}

impl core::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FileProblem::Missing => f.write_str("not on the card"),
            FileProblem::TooLarge(size) => {
                write!(f, "{size} bytes, more than the {MAX_TLS_FILE_BYTES} read")
            }
            FileProblem::NoMemory => f.write_str("no memory left to read it"),
            FileProblem::Unreadable => f.write_str("could not be read"),
        }
    }
}

/// The HTTPS files read at boot (`None`: `https` is off, or the card could not be read).
pub fn tls_files() -> Option<&'static TlsFiles> {
    TLS_FILES.get()
}

/// The `acme_ca_certificate` file read at boot (`None`: not named, ACME or HTTPS off, or the
/// card could not be read).
pub fn acme_ca_file() -> Option<&'static Result<&'static [u8], FileProblem>> {
    ACME_CA.get()
}

/// When the SD card finished initialising, in microseconds since reset (0: it did not).
pub fn card_ready_at() -> u64 {
    CARD_READY_AT.load(Ordering::Relaxed)
}

/// Bytes of RAM the loaded site image occupies.
pub fn site_bytes() -> usize {
    SITE_BYTES.load(Ordering::Relaxed)
}

/// Name of the site image on the card (8.3, as the image tool writes it).
pub const SITE_FILE: &str = "SITE.BIN";
/// Largest BRAMBLE.TXT read (the template is about 3 KiB).
const MAX_SETTINGS_BYTES: usize = 16 * 1024;

/// Why the site could not be loaded; each names the problem for the serial console and the
/// diagnostic page.
#[derive(Debug)]
pub enum StorageError {
    /// The EMMC controller or the card failed to initialise.
    Card(EmmcError),
    /// The card has no readable FAT partition, or a read failed.
    Filesystem(embedded_sdmmc::Error<BlockError>),
    /// The partition table, the boot sector or a file's directory entry is unusable
    /// (checked before the FAT library sees it: some bad values crash it).
    Layout(FatLayoutError),
    /// Reading the first sectors for that check failed.
    LayoutRead(BlockError),
    /// SITE.BIN is not on the card.
    SiteMissing,
    /// SITE.BIN does not fit in the memory left for it.
    SiteTooLarge {
        /// Size of SITE.BIN.
        size: usize,
        /// Bytes available.
        available: usize,
    },
    /// SITE.BIN failed verification.
    SiteCorrupt(bramble_site::FormatError),
}

impl core::fmt::Display for StorageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StorageError::Card(error) => write!(f, "SD card: {error:?} (is a card inserted?)"),
            StorageError::Filesystem(error) => write!(f, "SD card filesystem: {error:?}"),
            StorageError::Layout(error) => write!(f, "SD card layout: {error}"),
            StorageError::LayoutRead(error) => {
                write!(
                    f,
                    "SD card: reading the partition table or boot sector: {error:?}"
                )
            }
            StorageError::SiteMissing => write!(f, "{SITE_FILE} is not on the SD card"),
            StorageError::SiteTooLarge { size, available } => {
                write!(
                    f,
                    "{SITE_FILE} is {size} bytes but only {available} bytes of RAM are free"
                )
            }
            StorageError::SiteCorrupt(error) => write!(f, "{SITE_FILE} is corrupt: {error:?}"),
        }
    }
}

/// embedded-sdmmc's view of the card: reads only.
struct ReadOnlyCard<D: BlockDevice>(RefCell<D>);

impl<D: BlockDevice> embedded_sdmmc::BlockDevice for ReadOnlyCard<D> {
    type Error = BlockError;

    fn read(&self, blocks: &mut [Block], start: BlockIdx) -> Result<(), BlockError> {
        let mut device = self.0.borrow_mut();
        for (offset, block) in blocks.iter_mut().enumerate() {
            device.read_blocks(start.0 as u64 + offset as u64, &mut block.contents)?;
        }
        Ok(())
    }

    fn write(&self, _blocks: &[Block], _start: BlockIdx) -> Result<(), BlockError> {
        Err(BlockError::ReadOnly)
    }

    fn num_blocks(&self) -> Result<BlockCount, BlockError> {
        Ok(BlockCount(
            self.0.borrow().block_count().min(u32::MAX as u64) as u32,
        ))
    }
}

/// Files never get timestamps from us (we never write), but the API asks for a clock.
struct NoClock;

impl TimeSource for NoClock {
    fn get_timestamp(&self) -> Timestamp {
        Timestamp::from_fat(0x21, 0) // 1980-01-01
    }
}

/// What the card held.
pub struct CardContents {
    /// The owner's settings (defaults where BRAMBLE.TXT is absent or a line is bad).
    pub settings: Settings,
    /// The verified site image, or why there is none.
    pub site: Result<bramble_site::SiteImage<'static>, StorageError>,
}

/// Reads settings and site from the card into the start of `memory` (the free RAM after the
/// kernel); returns what it found and the memory it did not use.
pub fn load(emmc_clock_hz: u32, memory: &'static mut [u8]) -> (CardContents, &'static mut [u8]) {
    let started = micros();
    for pin in 48..=53 {
        GPIO.set_function(pin, Function::Alt3);
    }
    // SAFETY: the only EMMC instance; GPIO48-53 were just routed to it.
    let card = match unsafe { Emmc::new(emmc_clock_hz, micros as fn() -> u64) } {
        Ok(card) => card,
        Err(error) => {
            let contents = CardContents {
                settings: Settings::default(),
                site: Err(StorageError::Card(error)),
            };
            return (contents, memory);
        }
    };
    let info = card.card();
    CARD_READY_AT.store(micros(), Ordering::Relaxed);
    log::info!(
        "sd: {} card, {} MiB, ready after {} us",
        if info.high_capacity {
            "SDHC/SDXC"
        } else {
            "SDSC"
        },
        info.blocks / 2048,
        micros() - started
    );
    let mut card = card;
    let blocks = card.block_count();
    let boot_sector =
        match bramble_fat::check_card(blocks, |sector, buffer| card.read_blocks(sector, buffer)) {
            Ok(volume) => volume.boot_sector,
            Err(error) => {
                let error = match error {
                    CardCheckError::Read(error) => StorageError::LayoutRead(error),
                    CardCheckError::Layout(error) => StorageError::Layout(error),
                };
                let contents = CardContents {
                    settings: Settings::default(),
                    site: Err(error),
                };
                return (contents, memory);
            }
        };
    let volumes: CardVolumes =
        VolumeManager::new_with_limits(ReadOnlyCard(RefCell::new(card)), NoClock, 0);
    let mut settings = Settings::default();
    let mut memory = Some(memory);
    let site = read_files(&volumes, &boot_sector, &mut settings, &mut memory);
    let rest = memory.unwrap_or(&mut []);
    (CardContents { settings, site }, rest)
}

/// Reads one small file from the card's top folder into the front of `memory`.
fn read_small_file<D, T, const DIRS: usize, const FILES: usize, const VOLUMES: usize>(
    root: &embedded_sdmmc::Directory<'_, D, T, DIRS, FILES, VOLUMES>,
    name: &str,
    memory: &mut Option<&'static mut [u8]>,
) -> Result<&'static [u8], FileProblem>
where
    D: embedded_sdmmc::BlockDevice,
    T: TimeSource,
{
    let file = match root.open_file_in_dir(name, Mode::ReadOnly) {
        Ok(file) => file,
        Err(embedded_sdmmc::Error::NotFound) => return Err(FileProblem::Missing),
        Err(_) => return Err(FileProblem::Unreadable),
    };
    let size = file.length();
    let len = usize::try_from(size)
        .ok()
        .filter(|&len| len <= MAX_TLS_FILE_BYTES)
        .ok_or(FileProblem::TooLarge(size))?;
    let available = memory.as_ref().map_or(0, |memory| memory.len());
    if len > available {
        return Err(FileProblem::NoMemory);
    }
    let (bytes, rest) = memory
        .take()
        .ok_or(FileProblem::NoMemory)?
        .split_at_mut(len);
    *memory = Some(rest);
    let mut filled = 0;
    while filled < len {
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(_) => return Err(FileProblem::Unreadable),
        }
    }
    let bytes: &'static [u8] = bytes;
    Ok(&bytes[..filled])
}

/// The filesystem stack over the card: 2 directories, 2 files, 1 volume open at once.
type CardVolumes = VolumeManager<ReadOnlyCard<Emmc<fn() -> u64>>, NoClock, 2, 2, 1>;
/// An open folder of [`CardVolumes`].
type CardDirectory<'a> =
    embedded_sdmmc::Directory<'a, ReadOnlyCard<Emmc<fn() -> u64>>, NoClock, 2, 2, 1>;

/// Checks the directory entry of `name` (read back raw from the card) before the file is
/// opened: embedded-sdmmc panics on some first-cluster values. `NotFound` passes through.
fn check_entry(
    volumes: &CardVolumes,
    root: &CardDirectory<'_>,
    boot_sector: &BootSector,
    name: &str,
) -> Result<(), StorageError> {
    let entry = root
        .find_directory_entry(name)
        .map_err(StorageError::Filesystem)?;
    let mut block = [Block::new()];
    volumes
        .device(|card| embedded_sdmmc::BlockDevice::read(card, &mut block, entry.entry_block))
        .map_err(|error| StorageError::Filesystem(embedded_sdmmc::Error::DeviceError(error)))?;
    let raw = block[0]
        .contents
        .get(entry.entry_offset as usize..)
        .unwrap_or(&[]);
    boot_sector
        .check_file_entry(raw)
        .map_err(StorageError::Layout)
}

fn read_files(
    volumes: &CardVolumes,
    boot_sector: &BootSector,
    settings: &mut Settings,
    memory: &mut Option<&'static mut [u8]>,
) -> Result<bramble_site::SiteImage<'static>, StorageError> {
    let volume = volumes
        .open_volume(VolumeIdx(0))
        .map_err(StorageError::Filesystem)?;
    let root = volume.open_root_dir().map_err(StorageError::Filesystem)?;

    let settings_file = check_entry(volumes, &root, boot_sector, bramble_settings::FILE_NAME)
        .and_then(|()| {
            root.open_file_in_dir(bramble_settings::FILE_NAME, Mode::ReadOnly)
                .map_err(StorageError::Filesystem)
        });
    match settings_file {
        Ok(file) => {
            let mut text = [0u8; MAX_SETTINGS_BYTES];
            let mut length = 0;
            while length < text.len() {
                match file.read(&mut text[length..]) {
                    Ok(0) => break,
                    Ok(read) => length += read,
                    Err(error) => {
                        log::warn!(
                            "settings: reading {}: {error:?}",
                            bramble_settings::FILE_NAME
                        );
                        break;
                    }
                }
            }
            *settings = Settings::parse_bytes(&text[..length], |error| {
                log::warn!("settings: {error}; using the default for that line")
            });
            log::info!(
                "settings: {} bytes read; hostname {}",
                length,
                settings.hostname.as_str()
            );
        }
        Err(StorageError::Filesystem(embedded_sdmmc::Error::NotFound)) => {
            log::info!(
                "settings: no {} on the card, using defaults",
                bramble_settings::FILE_NAME
            )
        }
        Err(error) => log::warn!("settings: {error}; using defaults"),
    }

    if settings.https != bramble_settings::HttpsMode::Off {
        let mut read = |name: &str| match check_entry(volumes, &root, boot_sector, name) {
            Ok(()) | Err(StorageError::Filesystem(embedded_sdmmc::Error::NotFound)) => {
                read_small_file(&root, name, memory)
            }
            Err(error) => {
                log::warn!("tls: {name}: {error}");
                Err(FileProblem::Unreadable)
            }
        };
        if settings.acme {
            // ACME brings its own certificate; only a private CA's roots come from the card.
            if let Some(name) = &settings.acme_ca_certificate {
                let roots = read(name.as_str());
                ACME_CA.call_once(|| roots);
            }
        } else {
            let certificate = read(settings.tls_certificate.as_str());
            let key = read(settings.tls_key.as_str());
            TLS_FILES.call_once(|| TlsFiles { certificate, key });
        }
    }

    let read_started = micros();
    match check_entry(volumes, &root, boot_sector, SITE_FILE) {
        Err(StorageError::Filesystem(embedded_sdmmc::Error::NotFound)) => {
            return Err(StorageError::SiteMissing);
        }
        Err(error) => return Err(error),
        Ok(()) => {}
    }
    let file = match root.open_file_in_dir(SITE_FILE, Mode::ReadOnly) {
        Ok(file) => file,
        Err(embedded_sdmmc::Error::NotFound) => return Err(StorageError::SiteMissing),
        Err(error) => return Err(StorageError::Filesystem(error)),
    };
    let size = file.length() as usize;
    let available = memory.as_ref().map_or(0, |memory| memory.len());
    if size > available {
        return Err(StorageError::SiteTooLarge { size, available });
    }
    let (image, rest) = memory.take().expect("checked above").split_at_mut(size);
    *memory = Some(rest);
    let mut filled = 0;
    while filled < size {
        match file.read(&mut image[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) => return Err(StorageError::Filesystem(error)),
        }
    }
    let read_micros = micros() - read_started;
    let verify_started = micros();
    SITE_BYTES.store(size, Ordering::Relaxed);
    let image: &'static [u8] = image;
    let site = bramble_site::SiteImage::new_checked(&image[..filled])
        .map_err(StorageError::SiteCorrupt)?;
    log::info!(
        "site: {} files, {} bytes, checksum {:#010x}, read in {} ms, verified in {} ms",
        site.file_count(),
        site.len(),
        site.checksum(),
        read_micros / 1000,
        (micros() - verify_started) / 1000
    );
    Ok(site)
}
