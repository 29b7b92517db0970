//! The SD card: initialise the EMMC controller (4-bit, High Speed where the card has it) and a
//! DMA channel for it, check the card's partition table and FAT boot sector (`bramble-fat`),
//! read BRAMBLE.TXT (and the HTTPS files it names), find SITE.BIN's runs of blocks, read and
//! verify only its index, and hand the card to the store that serves bodies from it on
//! demand. Every file is found through the same checked FAT code (`bramble_store::fat`).
//!
//! The card is written in two places only, each given to the EMMC driver as a write window
//! only when the owner's settings use it; every other block stays unwritable in the driver:
//! the certificate store's region (`bramble image` reserves it as a labelled partition before
//! the FAT one, `bramble_fat::store_region`), with `acme = on` and `certificate_store = card`;
//! and the site slots' record and slots (never their label, which holds the publish key),
//! with a publish key on the card and `publish_url` set or HTTPS on (uploads,
//! `PUT /.well-known/bramble/site`).

use crate::arena::Arena;
use crate::platform::{GPIO, micros};
use bramble_bcm2835::dma::DmaAllocator;
use bramble_bcm2835::dma_channel::{ControlBlock, DmaChannel};
use bramble_bcm2835::emmc::{
    DmaReadPoll, Emmc, EmmcError, WriteCounters, WriteWindow, WriteWindows,
};
use bramble_bcm2835::gpio::Function;
use bramble_fat::store_region::{StorePartition, StoreRegion, StoreRegionError};
use bramble_hal::block::{
    BLOCK_SIZE, BackgroundRead, BlockDevice, BlockError, BlockRun, BlockWrite, MAX_RUNS_PER_READ,
    ReadPoll,
};
use bramble_settings::Settings;
use bramble_site::SiteIndex;
use bramble_store::fat::{self, FileExtents};
use bramble_store::{CardStore, FatError, IndexError, Page};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

static CARD_READY_AT: AtomicU64 = AtomicU64::new(0);
static INDEX_VERIFIED_AT: AtomicU64 = AtomicU64::new(0);
static INDEX_BYTES: AtomicUsize = AtomicUsize::new(0);
static CACHE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// The longest a background read's start or poll kept the main loop, in microseconds.
static LONGEST_CARD_CALL: AtomicU64 = AtomicU64::new(0);

/// The longest the card kept the main loop in one call since boot (starting or polling a
/// background read), in microseconds: what a slow or failing card costs every connection.
pub fn longest_card_call_micros() -> u64 {
    LONGEST_CARD_CALL.load(Ordering::Relaxed)
}

/// Runs `call` (a background read's start or poll) and keeps the longest time one took.
fn timed<T>(call: impl FnOnce() -> T) -> T {
    let started = micros();
    let result = call();
    LONGEST_CARD_CALL.fetch_max(micros().saturating_sub(started), Ordering::Relaxed);
    result
}
static TLS_FILES: spin::Once<TlsFiles> = spin::Once::new();
static STORE_REGION: spin::Once<Result<StoreRegion, StoreRegionError>> = spin::Once::new();
/// The site slots as boot found them, their record and the copy the next save goes to, when
/// the card has slots and boot served one of them.
static SITE_SLOTS: spin::Once<(
    bramble_fat::site_slots::Slots,
    bramble_fat::site_slots::SlotRecord,
    usize,
)> = spin::Once::new();

/// The site slots, their record as boot read it and the record copy the next save goes to
/// (`None`: the card has no slots, or none was served).
pub fn site_slots() -> Option<(
    bramble_fat::site_slots::Slots,
    bramble_fat::site_slots::SlotRecord,
    usize,
)> {
    SITE_SLOTS.get().copied()
}

/// The certificate store's region as found on the card at boot (`None`: the card could not
/// be read that far).
pub fn store_region() -> Option<Result<StoreRegion, StoreRegionError>> {
    STORE_REGION.get().copied()
}
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

/// The `acme_ca_certificate` file read at boot (`None`: not named, neither ACME, the
/// heartbeat nor the HTTPS reachability agent on, or the card could not be read).
pub fn acme_ca_file() -> Option<&'static Result<&'static [u8], FileProblem>> {
    ACME_CA.get()
}

/// When the SD card finished initialising, in microseconds since reset (0: it did not).
pub fn card_ready_at() -> u64 {
    CARD_READY_AT.load(Ordering::Relaxed)
}

/// When the site index was read and verified, in microseconds since reset (0: it was not).
pub fn index_verified_at() -> u64 {
    INDEX_VERIFIED_AT.load(Ordering::Relaxed)
}

/// Bytes of RAM the site index occupies (the segment cache, which takes the RAM nothing else
/// wants, is reported on its own, as an OS reports its page cache apart from used memory).
pub fn site_bytes() -> usize {
    INDEX_BYTES.load(Ordering::Relaxed)
}

/// Bytes of RAM the segment cache occupies.
pub fn cache_bytes() -> usize {
    CACHE_BYTES.load(Ordering::Relaxed)
}

/// Name of the site image on the card (8.3, as the image tool writes it).
pub const SITE_FILE: &str = "SITE.BIN";
/// Largest BRAMBLE.TXT read: the host tool's limit.
const MAX_SETTINGS_BYTES: usize = bramble_settings::MAX_FILE_BYTES;
/// The DMA channel the card reads use (free for the ARM on every Pi 1 firmware: the
/// `brcm,dma-channel-mask` of 0x7f35 in Raspberry Pi's bcm2835-rpi.dtsi includes it).
const CARD_DMA_CHANNEL: usize = 5;
/// Blocks one DMA command moves in a read that waits for its data (the boot-time reads).
const DMA_BLOCKS_PER_COMMAND: usize = 2048;
/// RAM left out of the cache for anything allocated after it.
const CACHE_RESERVE: usize = 4 << 20;

/// Why the site could not be served; each names the problem for the serial console and the
/// diagnostic page.
#[derive(Debug)]
pub enum StorageError {
    /// The EMMC controller or the card failed to initialise.
    Card(EmmcError),
    /// The card's partition table or FAT boot sector is unusable (or could not be read).
    Layout(FatError),
    /// SITE.BIN is not on the card.
    SiteMissing,
    /// SITE.BIN could not be located on the card's FAT partition.
    Filesystem(FatError),
    /// SITE.BIN's index could not be read or failed verification.
    Index(IndexError),
    /// No RAM left for the store.
    NoMemory,
    /// The card has site slots but neither copy of their record is readable and whole.
    NoSlotRecord,
    /// The card has site slots but no slot the record calls whole passed its checks.
    NoWholeSlot,
}

impl core::fmt::Display for StorageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StorageError::Card(error) => write!(f, "SD card: {error:?} (is a card inserted?)"),
            StorageError::Layout(error) => write!(f, "SD card: {error}"),
            StorageError::SiteMissing => write!(f, "{SITE_FILE} is not on the SD card"),
            StorageError::Filesystem(error) => write!(f, "{SITE_FILE}: {error}"),
            // An image of another format version is not damaged: it says how to fix it.
            StorageError::Index(IndexError::Format(
                error @ bramble_site::FormatError::UnsupportedVersion { .. },
            )) => write!(f, "{SITE_FILE}: {error}"),
            StorageError::Index(IndexError::Format(error)) => {
                write!(f, "{SITE_FILE} is corrupt: {error}")
            }
            StorageError::Index(error) => write!(f, "{SITE_FILE}: {error}"),
            StorageError::NoMemory => write!(f, "no RAM left for {SITE_FILE}'s index"),
            StorageError::NoSlotRecord => {
                f.write_str("the site slots' record is unreadable or torn in both copies")
            }
            StorageError::NoWholeSlot => {
                f.write_str("no site slot holds a whole site that passes its checks")
            }
        }
    }
}

/// A read in flight in the background: the runs it is made of and the buffer it fills.
struct Background {
    runs: heapless::Vec<BlockRun, MAX_RUNS_PER_READ>,
    /// The run being read.
    next: usize,
    /// Bytes of the buffer the earlier runs filled.
    filled: usize,
    buffer: &'static mut [u8],
    /// A run that failed to start: reported at the next poll.
    failed: Option<BlockError>,
    /// The run in flight, waited for (to free the card for the certificate store) and ended
    /// this way: the next poll takes it and starts the next run.
    settled: Option<Result<(), BlockError>>,
}

/// The card as the store sees it: the EMMC controller and its DMA channel. Reads wait for
/// their data ([`BlockDevice`], at boot) or run in the background ([`BackgroundRead`]).
pub struct CardReader {
    emmc: Emmc<fn() -> u64>,
    /// The DMA channel; without one every read is programmed I/O.
    dma: Option<DmaChannel>,
    background: Option<Background>,
}

/// Whether `buffer` may be a DMA destination: whole cache lines, so that invalidating them
/// cannot discard a neighbour's data.
fn dma_capable(buffer: &[u8]) -> bool {
    (buffer.as_ptr() as usize).is_multiple_of(32) && buffer.len().is_multiple_of(32)
}

impl CardReader {
    /// Starts run `run` of the background read into the buffer after what earlier runs
    /// filled.
    fn start_run(&mut self) -> Result<(), BlockError> {
        let Some(background) = self.background.as_mut() else {
            return Ok(());
        };
        let Some(run) = background.runs.get(background.next).copied() else {
            return Ok(());
        };
        let Some(dma) = self.dma.as_mut() else {
            return Err(BlockError::Busy);
        };
        let bytes = run.blocks as usize * BLOCK_SIZE;
        let destination = background
            .buffer
            .get_mut(background.filled..background.filled + bytes)
            .ok_or(BlockError::BadBuffer)?;
        let bus = bramble_bcm2835::bus_address(destination.as_mut_ptr() as usize);
        // SAFETY: the destination is part of a buffer this reader holds (moved in by
        // `start_read`) until `poll_read` hands it back, and its cache lines were cleaned and
        // invalidated by `start_read`.
        unsafe {
            self.emmc
                .start_dma_read(dma, run.first_block, run.blocks, bus)
        }
    }

    /// A read that waits: by DMA when the buffer allows, otherwise by programmed I/O.
    fn read_waiting(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        if self.background.is_some() {
            return Err(BlockError::Busy);
        }
        let Some(dma) = self.dma.as_mut().filter(|_| dma_capable(buffer)) else {
            return self.emmc.read_blocks(first_block, buffer);
        };
        let mut block = first_block;
        for chunk in buffer.chunks_mut(DMA_BLOCKS_PER_COMMAND * BLOCK_SIZE) {
            let blocks = (chunk.len() / BLOCK_SIZE) as u32;
            let mut attempt = 0;
            loop {
                bramble_boot::cpu::clean_invalidate_dcache(chunk);
                let bus = bramble_bcm2835::bus_address(chunk.as_mut_ptr() as usize);
                // SAFETY: `chunk` is borrowed mutably for this whole loop, which does not end
                // before the read does; its lines were just cleaned and invalidated.
                let started = unsafe { self.emmc.start_dma_read(dma, block, blocks, bus) };
                let result = started.and_then(|()| {
                    loop {
                        match self.emmc.poll_dma_read(dma) {
                            DmaReadPoll::Busy => continue,
                            DmaReadPoll::Idle => break Ok(()),
                            DmaReadPoll::Done(result) => break result,
                        }
                    }
                });
                bramble_boot::cpu::invalidate_dcache(chunk);
                match result {
                    Ok(()) => break,
                    Err(error @ (BlockError::BadBuffer | BlockError::OutOfRange)) => {
                        return Err(error);
                    }
                    Err(error) if attempt == 2 => return Err(error),
                    Err(error) => {
                        log::warn!("sd: read of block {block} failed ({error:?}), retrying");
                        attempt += 1;
                    }
                }
            }
            block += u64::from(blocks);
        }
        Ok(())
    }
}

impl BlockDevice for CardReader {
    fn block_count(&self) -> u64 {
        self.emmc.block_count()
    }

    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        self.read_waiting(first_block, buffer)
    }
}

impl BackgroundRead<'static> for CardReader {
    fn start_read(
        &mut self,
        runs: &[BlockRun],
        buffer: &'static mut [u8],
    ) -> Result<(), (BlockError, &'static mut [u8])> {
        timed(|| self.start_background(runs, buffer))
    }

    fn poll_read(&mut self) -> ReadPoll<'static> {
        timed(|| self.poll_background())
    }
}

impl CardReader {
    /// [`BackgroundRead::start_read`], untimed.
    fn start_background(
        &mut self,
        runs: &[BlockRun],
        buffer: &'static mut [u8],
    ) -> Result<(), (BlockError, &'static mut [u8])> {
        if self.background.is_some() {
            return Err((BlockError::Busy, buffer));
        }
        let total: u64 = runs
            .iter()
            .map(|run| u64::from(run.blocks) * BLOCK_SIZE as u64)
            .sum();
        let Ok(runs) = heapless::Vec::from_slice(runs) else {
            return Err((BlockError::BadBuffer, buffer));
        };
        if total > buffer.len() as u64 || !dma_capable(buffer) {
            return Err((BlockError::BadBuffer, buffer));
        }
        if self.dma.is_none() {
            // No DMA channel: read now, waiting (the poll reports it done).
            let mut failed = None;
            let mut filled = 0;
            for run in &runs {
                let bytes = run.blocks as usize * BLOCK_SIZE;
                if let Err(error) = self
                    .emmc
                    .read_blocks(run.first_block, &mut buffer[filled..filled + bytes])
                {
                    failed = Some(error);
                    break;
                }
                filled += bytes;
            }
            self.background = Some(Background {
                next: runs.len(),
                runs,
                filled,
                buffer,
                failed,
                settled: None,
            });
            return Ok(());
        }
        bramble_boot::cpu::clean_invalidate_dcache(&mut buffer[..total as usize]);
        self.background = Some(Background {
            runs,
            next: 0,
            filled: 0,
            buffer,
            failed: None,
            settled: None,
        });
        if let Err(error) = self.start_run()
            && let Some(background) = self.background.as_mut()
        {
            background.failed = Some(error);
        }
        Ok(())
    }

    /// [`BackgroundRead::poll_read`], untimed.
    fn poll_background(&mut self) -> ReadPoll<'static> {
        let Some(background) = self.background.as_mut() else {
            return ReadPoll::Idle;
        };
        if let Some(error) = background.failed {
            let background = self.background.take();
            return match background {
                Some(background) => ReadPoll::Done(background.buffer, Err(error)),
                None => ReadPoll::Idle,
            };
        }
        if background.next < background.runs.len() {
            let settled = background.settled.take();
            let result = match (settled, self.dma.as_mut()) {
                (Some(result), _) => result,
                (None, Some(dma)) => match self.emmc.poll_dma_read(dma) {
                    DmaReadPoll::Busy => return ReadPoll::Busy,
                    DmaReadPoll::Idle => Ok(()),
                    DmaReadPoll::Done(result) => result,
                },
                (None, None) => Ok(()),
            };
            let Some(background) = self.background.as_mut() else {
                return ReadPoll::Idle;
            };
            match result {
                Ok(()) => {
                    let run = background.runs[background.next];
                    background.filled += run.blocks as usize * BLOCK_SIZE;
                    background.next += 1;
                    if background.next < background.runs.len() {
                        if let Err(error) = self.start_run()
                            && let Some(background) = self.background.as_mut()
                        {
                            background.failed = Some(error);
                        }
                        return ReadPoll::Busy;
                    }
                }
                Err(error) => background.failed = Some(error),
            }
        }
        let Some(background) = self.background.take() else {
            return ReadPoll::Idle;
        };
        let filled = background.filled.min(background.buffer.len());
        bramble_boot::cpu::invalidate_dcache(&mut background.buffer[..filled]);
        let result = match background.failed {
            Some(error) => Err(error),
            None => Ok(()),
        };
        ReadPoll::Done(background.buffer, result)
    }
}

impl CardReader {
    /// Waits for the background read's run in flight to end (bounded by the driver's own
    /// deadline), keeping its result for the next poll, so that the card is free for a
    /// programmed-I/O command of the certificate store.
    fn settle_background(&mut self) {
        let Some(background) = self.background.as_mut() else {
            return;
        };
        if background.failed.is_some()
            || background.settled.is_some()
            || background.next >= background.runs.len()
        {
            return;
        }
        let Some(dma) = self.dma.as_mut() else {
            return;
        };
        let result = loop {
            match self.emmc.poll_dma_read(dma) {
                DmaReadPoll::Busy => continue,
                DmaReadPoll::Idle => break Ok(()),
                DmaReadPoll::Done(result) => break result,
            }
        };
        background.settled = Some(result);
    }

    /// A read for the certificate store: by programmed I/O into any buffer, once a background
    /// read's run in flight has ended.
    fn read_for_store(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        self.settle_background();
        self.emmc.read_blocks(first_block, buffer)
    }

    /// A write for the certificate store (the driver refuses blocks outside its window).
    fn write_for_store(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError> {
        self.settle_background();
        self.emmc.write_blocks(first_block, data)
    }
}

/// The card as the certificate store reaches it: through the site store, which owns the
/// reader (the site's reads and the store's share one controller, one at a time).
pub struct StoreCard(pub &'static Store);

impl BlockDevice for StoreCard {
    fn block_count(&self) -> u64 {
        self.0
            .with_device(|reader| reader.block_count())
            .unwrap_or(0)
    }

    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        self.0
            .with_device(|reader| reader.read_for_store(first_block, buffer))
            .unwrap_or(Err(BlockError::Busy))
    }
}

impl BlockWrite for StoreCard {
    fn write_blocks(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError> {
        self.0
            .with_device(|reader| reader.write_for_store(first_block, data))
            .unwrap_or(Err(BlockError::Busy))
    }
}

/// The card as the site publisher reaches it: the certificate store's path (programmed I/O,
/// after a background read's run ends; writes only inside the driver's windows), feeding the
/// watchdog at each call, since a publish's read-back of a large site takes seconds.
pub struct PublishCard(pub &'static Store);

impl BlockDevice for PublishCard {
    fn block_count(&self) -> u64 {
        StoreCard(self.0).block_count()
    }

    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        crate::health::feed();
        StoreCard(self.0).read_blocks(first_block, buffer)
    }
}

impl BlockWrite for PublishCard {
    fn write_blocks(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError> {
        crate::health::feed();
        StoreCard(self.0).write_blocks(first_block, data)
    }
}

/// What `selftest board` measured of the card.
pub struct CardCheck {
    /// What the driver set up.
    pub info: bramble_bcm2835::emmc::CardInfo,
    /// SITE.BIN's length in bytes.
    pub bytes: u32,
    /// How long reading it took, in microseconds.
    pub micros: u64,
    /// Its SHA-256.
    pub sha256: [u8; 32],
}

/// Blocks `check_card` reads per call.
const CHECK_BLOCKS: usize = 16;

/// Reads all of the site served from the card (SITE.BIN by its FAT runs, or its site slot, 8 KiB at a time, waiting) and hashes
/// it, timing the reads: the card's real read speed and a hash to compare with the packed
/// site's. `None` while the store's own read is in flight (try again).
pub fn check_card(store: &Store) -> Option<Result<CardCheck, BlockError>> {
    use sha2::Digest;
    // The site served: SITE.BIN on FAT, or the live site slot.
    let extents = store.extents()?;
    let extents = &extents;
    #[repr(C, align(32))]
    struct Buffer([u8; CHECK_BLOCKS * BLOCK_SIZE]);
    store.with_device(|reader| {
        let info = reader.emmc.card();
        let mut buffer = Buffer([0; CHECK_BLOCKS * BLOCK_SIZE]);
        let mut hasher = sha2::Sha256::new();
        let mut left = extents.len() as usize;
        let mut reading = 0;
        for run in extents.runs() {
            let mut block = 0;
            while block < run.blocks && left > 0 {
                let blocks = (run.blocks - block).min(CHECK_BLOCKS as u32) as usize;
                let bytes = blocks * BLOCK_SIZE;
                let started = micros();
                reader.read_blocks(run.card_block + u64::from(block), &mut buffer.0[..bytes])?;
                reading += micros() - started;
                let take = bytes.min(left);
                hasher.update(&buffer.0[..take]);
                left -= take;
                block += blocks as u32;
                // A large site takes seconds: the main loop's watchdog must not fire.
                crate::health::feed();
            }
        }
        Ok(CardCheck {
            info,
            bytes: extents.len(),
            micros: reading,
            sha256: hasher.finalize().into(),
        })
    })
}

/// What the card's write path has done since boot, and its windows (for the status line).
pub fn write_counters(store: &Store) -> Option<(WriteCounters, WriteWindows)> {
    store.with_device(|reader| (reader.emmc.write_counters(), reader.emmc.write_windows()))
}

/// Finds the certificate store's region: the partition table's 0xDA entry, confirmed by its
/// label block.
fn find_store_region(
    reader: &mut CardReader,
    boot: &bramble_fat::Partition,
) -> Result<StoreRegion, StoreRegionError> {
    let mut sector = [0u8; BLOCK_SIZE];
    reader
        .read_blocks(0, &mut sector)
        .map_err(|_| StoreRegionError::NoPartitionTable)?;
    let partition = StorePartition::find(&sector, reader.block_count(), boot)?;
    reader
        .read_blocks(u64::from(partition.first_sector), &mut sector)
        .map_err(|_| StoreRegionError::NoLabel)?;
    partition.confirm(&sector)
}

/// The system timer as an instant, for the store's read timing.
fn now() -> bramble_hal::Instant {
    bramble_hal::Instant::from_micros(micros())
}

/// The store serving the site's bodies from the card.
pub type Store = CardStore<'static, 'static, CardReader>;

/// One side of the store ([`CardStore::side`]): the body source of the site a response
/// started with.
pub type StoreSide = bramble_store::StoreSide<'static, 'static, 'static, CardReader>;

/// A site ready to serve: its verified index and the store for its bodies.
pub struct Site {
    /// The verified index.
    pub index: SiteIndex<'static>,
    /// The store (cache pages are given to it later, by [`attach_cache`]).
    pub store: &'static Store,
    /// The store's two sides: the boot site is side 0's; a live switch puts the next site
    /// on the other ([`switch_live`]).
    pub sides: &'static [StoreSide; 2],
}

/// What the card held.
pub struct CardContents {
    /// The owner's settings (defaults where BRAMBLE.TXT is absent or a line is bad).
    pub settings: Settings,
    /// The site, or why there is none.
    pub site: Result<Site, StorageError>,
}

/// Initialises the card, reads the settings, finds SITE.BIN and reads and verifies its index
/// into `arena`. Bodies are not read: the store reads them when asked.
pub fn load(emmc_clock_hz: u32, arena: &mut Arena, dma: &mut DmaAllocator) -> CardContents {
    let started = micros();
    for pin in 48..=53 {
        GPIO.set_function(pin, Function::Alt3);
    }
    // SAFETY: the only EMMC instance; GPIO48-53 were just routed to it.
    let card = match unsafe { Emmc::new(emmc_clock_hz, micros as fn() -> u64) } {
        Ok(card) => card,
        Err(error) => {
            return CardContents {
                settings: Settings::default(),
                site: Err(StorageError::Card(error)),
            };
        }
    };
    let info = card.card();
    CARD_READY_AT.store(micros(), Ordering::Relaxed);
    let channel = match dma.allocate(ControlBlock::default()) {
        // SAFETY: the channel is the card's alone (see CARD_DMA_CHANNEL) and the control
        // block is in the DMA region.
        Ok(block) => Some(unsafe { DmaChannel::new(CARD_DMA_CHANNEL, block) }),
        Err(error) => {
            log::warn!("sd: no DMA control block ({error:?}); reads by programmed I/O");
            None
        }
    };
    log::info!(
        "sd: {} card, {} MiB, {}-bit bus at {} MHz{}, reads by {}, ready after {} us",
        if info.high_capacity {
            "SDHC/SDXC"
        } else {
            "SDSC"
        },
        info.blocks / 2048,
        info.bus_width,
        info.clock_hz / 1_000_000,
        if info.high_speed { " (High Speed)" } else { "" },
        if channel.is_some() {
            "DMA"
        } else {
            "programmed I/O"
        },
        micros() - started
    );
    let mut reader = CardReader {
        emmc: card,
        dma: channel,
        background: None,
    };
    // Before anything else reads the FAT: a card whose partition table or boot sector lies
    // is refused here, with its problem named, instead of being walked.
    let blocks = reader.block_count();
    let volume =
        match bramble_fat::check_card(blocks, |block, buffer| reader.read_blocks(block, buffer)) {
            Ok(volume) => volume,
            Err(error) => {
                let error = match error {
                    bramble_fat::CardCheckError::Read(error) => FatError::Read(error),
                    bramble_fat::CardCheckError::Layout(error) => FatError::Layout(error),
                };
                return CardContents {
                    settings: Settings::default(),
                    site: Err(StorageError::Layout(error)),
                };
            }
        };
    let settings = read_settings(&mut reader, arena);
    let region = find_store_region(&mut reader, &volume.partition);
    // The only write window the driver ever gets, and only when the owner lets ACME keep its
    // certificate on the card.
    if let Ok(region) = region
        && settings.acme
        && settings.certificate_store == bramble_settings::CertificateStore::Card
    {
        let window = WriteWindow {
            first_block: region.first_block,
            blocks: u64::from(region.blocks),
        };
        if !reader.emmc.allow_writes(window) {
            log::error!("sd: the certificate store's region {window:?} was not allowed");
        }
    }
    STORE_REGION.call_once(|| region);
    let site = match crate::site_slots::find(&mut reader, &volume.partition) {
        Ok(slots) => {
            // The second write window, only when the owner publishes signed sites (pulled, or
            // uploaded over HTTPS).
            if publishes(&settings) && slots.publish_key.is_some() {
                let (first_block, blocks) = slots.writable();
                let window = WriteWindow {
                    first_block,
                    blocks,
                };
                if !reader.emmc.allow_writes(window) {
                    log::error!("sd: the site slots' window {window:?} was not allowed");
                }
            }
            open_slot_site(reader, arena, &slots)
        }
        Err(bramble_fat::site_slots::SlotsError::Absent) => open_site(reader, arena),
        Err(error) => {
            log::error!("slots: {error}; looking for {SITE_FILE} on FAT instead");
            open_site(reader, arena)
        }
    };
    CardContents { settings, site }
}

/// Whether the owner's settings let signed sites in: pulled (`publish_url`) or uploaded over
/// HTTPS (`https = on` or `only`). The card must hold a publish key as well.
pub fn publishes(settings: &Settings) -> bool {
    settings.publish_url.is_some() || settings.https != bramble_settings::HttpsMode::Off
}

/// Reads one small file (at most `max` bytes) from the card's top folder into `arena`.
fn read_small_file(
    reader: &mut CardReader,
    name: &str,
    max: usize,
    arena: &mut Arena,
) -> Result<&'static [u8], FileProblem> {
    let extents = match fat::locate(reader, name) {
        Ok(extents) => extents,
        Err(FatError::NotFound) => return Err(FileProblem::Missing),
        Err(_) => return Err(FileProblem::Unreadable),
    };
    let size = extents.len();
    let len = usize::try_from(size)
        .ok()
        .filter(|&len| len <= max)
        .ok_or(FileProblem::TooLarge(size))?;
    let buffer = arena
        .bytes(len.next_multiple_of(BLOCK_SIZE), 32)
        .ok_or(FileProblem::NoMemory)?;
    fat::read_whole(reader, &extents, buffer).map_err(|_| FileProblem::Unreadable)
}

/// Reads BRAMBLE.TXT (defaults where it is absent or a line is bad) and, with `https` on, the
/// certificate chain and key it names.
fn read_settings(reader: &mut CardReader, arena: &mut Arena) -> Settings {
    let name = bramble_settings::FILE_NAME;
    let settings = match read_small_file(reader, name, MAX_SETTINGS_BYTES, arena) {
        Ok(text) => {
            let settings = Settings::parse_bytes(text, |error| {
                log::warn!("settings: {error}; using the default for that line")
            });
            log::info!(
                "settings: {} bytes read; hostname {}",
                text.len(),
                settings.hostname.as_str()
            );
            settings
        }
        Err(FileProblem::Missing) => {
            log::info!("settings: no {name} on the card, using defaults");
            Settings::default()
        }
        Err(problem) => {
            log::warn!("settings: {name}: {problem}; using defaults");
            Settings::default()
        }
    };
    let https = settings.https != bramble_settings::HttpsMode::Off;
    let mut read = |name: &str| read_small_file(reader, name, MAX_TLS_FILE_BYTES, arena);
    if https && !settings.acme {
        let certificate = read(settings.tls_certificate.as_str());
        let key = read(settings.tls_key.as_str());
        TLS_FILES.call_once(|| TlsFiles { certificate, key });
    }
    // ACME brings its own certificate; only a private CA's roots come from the card, for it
    // and for the heartbeat's, the pull's, the echo's, the dyndns2 provider's and the
    // checker's servers.
    let wants_roots = (https && settings.acme)
        || settings.heartbeat.is_some()
        || settings.publish_url.is_some()
        || settings.wants_reach_agent();
    if wants_roots && let Some(name) = &settings.acme_ca_certificate {
        let roots = read(name.as_str());
        ACME_CA.call_once(|| roots);
    }
    settings
}

/// Serves the live site slot the record names, or the other one when the live one fails its
/// checks (the index's own, and the record's length and index checksum): a slot that fails
/// is never served.
fn open_slot_site(
    mut reader: CardReader,
    arena: &mut Arena,
    slots: &bramble_fat::site_slots::Slots,
) -> Result<Site, StorageError> {
    let Some((record, next_copy)) = crate::site_slots::read_record(&mut reader, slots) else {
        return Err(StorageError::NoSlotRecord);
    };
    for slot in record.boot_order() {
        let entry = record.slots[usize::from(slot)];
        let name = crate::site_slots::slot_name(slot);
        if u64::from(entry.len) > slots.slot_bytes() {
            log::error!(
                "slots: slot {name} claims {} bytes, more than it holds",
                entry.len
            );
            continue;
        }
        let extents = FileExtents::contiguous(slots.slot_block(slot), entry.len);
        let started = micros();
        match read_verified_index(&mut reader, &extents, arena) {
            Ok(index)
                if index.checksum() == entry.index_checksum && index.image_len() == entry.len =>
            {
                log::info!(
                    "slots: serving slot {name}, version {} ({} bytes){}",
                    entry.version,
                    entry.len,
                    if slot == record.live {
                        ""
                    } else {
                        ", not the live one: that failed its checks"
                    }
                );
                // A publish must write the slot that failed, not the one served.
                let record = record.served_from(slot);
                SITE_SLOTS.call_once(|| (*slots, record, next_copy));
                let other = Some(slots.slot_bytes());
                return build_site(reader, arena, index, extents, other, started, started);
            }
            Ok(index) => log::error!(
                "slots: slot {name} holds a site of {} bytes with checksum {:#010x}, not the \
                 {} bytes and {:#010x} the record names; not served",
                index.image_len(),
                index.checksum(),
                entry.len,
                entry.index_checksum
            ),
            Err(error) => log::error!("slots: slot {name}: {error}; not served"),
        }
    }
    Err(StorageError::NoWholeSlot)
}

/// Reads and verifies the index of the site at `extents` into `arena`.
fn read_verified_index(
    reader: &mut CardReader,
    extents: &FileExtents,
    arena: &mut Arena,
) -> Result<SiteIndex<'static>, StorageError> {
    let needed = bramble_store::index_memory_len(reader, extents).map_err(StorageError::Index)?;
    let memory = arena.bytes(needed, 32).ok_or(StorageError::NoMemory)?;
    let (index, _) =
        bramble_store::read_index(reader, extents, memory).map_err(StorageError::Index)?;
    Ok(index)
}

/// Finds SITE.BIN, reads and verifies its index and builds the store over the card.
fn open_site(mut reader: CardReader, arena: &mut Arena) -> Result<Site, StorageError> {
    let started = micros();
    let extents: FileExtents = match fat::locate(&mut reader, SITE_FILE) {
        Ok(extents) => extents,
        Err(FatError::NotFound) => return Err(StorageError::SiteMissing),
        Err(error) => return Err(StorageError::Filesystem(error)),
    };
    let located = micros();
    let index = read_verified_index(&mut reader, &extents, arena)?;
    build_site(reader, arena, index, extents, None, started, located)
}

/// The store over the card for a verified index; with `other_bytes` (the site slots' size),
/// a segment table for a live switch to a site of up to that many bytes too.
fn build_site(
    reader: CardReader,
    arena: &mut Arena,
    index: SiteIndex<'static>,
    extents: FileExtents,
    other_bytes: Option<u64>,
    started: u64,
    located: u64,
) -> Result<Site, StorageError> {
    INDEX_BYTES.store(index.index_bytes(), Ordering::Relaxed);
    INDEX_VERIFIED_AT.store(micros(), Ordering::Relaxed);
    log::info!(
        "site: {} files, {} bytes, checksum {:#010x}; index of {} bytes read and verified in \
         {} us ({} runs on the card, found in {} us); bodies on demand",
        index.file_count(),
        index.image_len(),
        index.checksum(),
        index.index_bytes(),
        micros() - located,
        extents.runs().len(),
        located - started
    );
    let entries = match other_bytes {
        Some(bytes) => Store::switch_table_len(&index, bytes),
        None => Store::table_len(&index),
    };
    let table = arena
        .slice(entries, || 0u32)
        .ok_or(StorageError::NoMemory)?;
    let store: &'static Store = arena
        .value(CardStore::new(reader, index, extents, table).with_clock(now))
        .ok_or(StorageError::NoMemory)?;
    let sides = arena
        .value([store.side(0), store.side(1)])
        .ok_or(StorageError::NoMemory)?;
    Ok(Site {
        index,
        store,
        sides,
    })
}

/// Why a published site could not be switched to live (the board restarts into it instead).
#[derive(Debug)]
pub enum SwitchProblem {
    /// The card has no site slots the boot served from.
    NoSlots,
    /// Its index: unreadable, corrupt, or not what the record names.
    Index(IndexError),
    /// Its index is not the one the record names.
    NotTheRecorded,
    /// No RAM left for its index.
    NoMemory(usize),
    /// The store or the server cannot hold a second site now.
    Store(bramble_store::SwitchError),
}

impl core::fmt::Display for SwitchProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SwitchProblem::NoSlots => f.write_str("boot did not serve a site slot"),
            SwitchProblem::Index(error) => write!(f, "its index: {error}"),
            SwitchProblem::NotTheRecorded => {
                f.write_str("its index is not the one the slot record names")
            }
            SwitchProblem::NoMemory(needed) => write!(
                f,
                "its index needs {needed} bytes of RAM and less is left (each live switch \
                 takes its index's RAM until the next restart)"
            ),
            SwitchProblem::Store(error) => write!(f, "{error}"),
        }
    }
}

/// A site switched to live: the side it is on, its index and its body source.
pub struct Switched {
    /// The store side serving it.
    pub side: usize,
    /// Its verified index.
    pub index: SiteIndex<'static>,
    /// Bytes of RAM its index took.
    pub index_bytes: usize,
}

/// Makes the site `record` names live in `store` without a restart: reads its index from the
/// slot (the card path the publisher uses, after a background read's run), checks it against
/// the record, and puts it on the store's free side. The caller then gives the server
/// `sides[side]` with the index, and retires the old side once its responses are done. The
/// index's RAM comes from `arena` and stays taken until the next restart.
pub fn switch_live(
    store: &'static Store,
    arena: &mut Arena,
    record: &bramble_fat::site_slots::SlotRecord,
) -> Result<Switched, SwitchProblem> {
    let (slots, _, _) = site_slots().ok_or(SwitchProblem::NoSlots)?;
    let entry = record.slots[usize::from(record.live & 1)];
    if u64::from(entry.len) > slots.slot_bytes() {
        return Err(SwitchProblem::NotTheRecorded);
    }
    let extents = FileExtents::contiguous(slots.slot_block(record.live), entry.len);
    let mut card = PublishCard(store);
    let needed =
        bramble_store::index_memory_len(&mut card, &extents).map_err(SwitchProblem::Index)?;
    let memory = arena
        .bytes(needed, 32)
        .ok_or(SwitchProblem::NoMemory(needed))?;
    let (index, _) =
        bramble_store::read_index(&mut card, &extents, memory).map_err(SwitchProblem::Index)?;
    if index.checksum() != entry.index_checksum || index.image_len() != entry.len {
        return Err(SwitchProblem::NotTheRecorded);
    }
    let side = store.switch(index, extents).map_err(SwitchProblem::Store)?;
    INDEX_BYTES.fetch_add(index.index_bytes(), Ordering::Relaxed);
    Ok(Switched {
        side,
        index,
        index_bytes: needed,
    })
}

/// Gives the store every page of RAM left in `arena` (less a small reserve): the segment
/// cache, sized once the connection pool has taken its share.
pub fn attach_cache(store: &'static Store, arena: &mut Arena) {
    let Some(index) = store.index() else {
        return;
    };
    let page_len = index.segment_len() as usize;
    let per_page = page_len + core::mem::size_of::<Page<'static>>();
    let count = arena.remaining().saturating_sub(CACHE_RESERVE + 64) / per_page;
    // No more pages than segments: a site smaller than RAM is cached whole.
    let count = count.min(index.segment_count() as usize);
    let Some(pages) = arena.slice(count, || Page::new(&mut [])) else {
        return;
    };
    let Some(memory) = arena.bytes(count * page_len, 32) else {
        return;
    };
    for (page, chunk) in pages.iter_mut().zip(memory.chunks_exact_mut(page_len)) {
        page.memory = Some(chunk);
    }
    store.attach_pages(pages);
    CACHE_BYTES.store(count * page_len, Ordering::Relaxed);
    log::info!(
        "store: cache of {} segments of {} KiB ({} KiB), {} KiB of RAM left",
        count,
        page_len / 1024,
        count * page_len / 1024,
        arena.remaining() / 1024
    );
}
