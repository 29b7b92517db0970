//! The card store: serves body bytes from the RAM cache, reads missing segments from the card
//! in the background one at a time (demand first, then one segment of read-ahead, then idle
//! warm-up), and verifies every segment against its checksum before any byte of it is used.

use core::cell::RefCell;

use bramble_hal::Instant;
use bramble_hal::block::{BLOCK_SIZE, BackgroundRead, BlockDevice, BlockError, ReadPoll};
use bramble_site::{BodyCopy, BodyRequest, BodySource, BodyStatus, FormatError, SiteIndex};

use crate::cache::{Page, SegmentCache, SegmentState};
use crate::fat::FileExtents;

/// Segments waiting to be read for a response.
const DEMAND_QUEUE: usize = 32;
/// Segments waiting to be read ahead of a response streaming a large body.
const AHEAD_QUEUE: usize = 8;
/// How often the loop should look at a read in flight (the card moves a 64 KiB segment in
/// about 3 ms at 20 MB/s).
pub const POLL_INTERVAL_MICROS: u64 = 500;
/// Quiet time (no request looked anything up) before idle warm-up reads ahead.
pub const WARM_UP_IDLE_MICROS: u64 = 200_000;
/// Time between two warm-up reads: warm-up takes a fraction of the card and the CPU, never all
/// of it (under QEMU a segment's DMA holds the emulator for several milliseconds; back to back
/// they starved the network).
pub const WARM_UP_PACE_MICROS: u64 = 25_000;
/// Segments idle warm-up looks past per poll when looking for one not yet cached.
const WARM_UP_SCAN: u32 = 256;

/// What the store has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Segment lookups (one per response and segment) found in RAM.
    pub hits: u64,
    /// Segment lookups that had to wait for the card.
    pub misses: u64,
    /// Segments read from the card and verified.
    pub segments_read: u64,
    /// Bytes read from the card for them (whole blocks).
    pub bytes_read: u64,
    /// Microseconds reads were in flight (for the card's speed: bytes / time).
    pub read_micros: u64,
    /// Reads the card failed (errors or timeouts).
    pub read_errors: u64,
    /// Segments read whole whose checksum did not match (their bodies are served only where
    /// each passes its own checksum).
    pub checksum_failures: u64,
    /// Bodies in such a segment that failed their own checksum: never served.
    pub body_failures: u64,
    /// Segments pushed out of the cache to make room.
    pub evictions: u64,
    /// Segments read by idle warm-up rather than for a request.
    pub warmed: u64,
    /// Pages in the cache.
    pub pages: usize,
    /// Pages holding a segment.
    pub pages_used: usize,
    /// Bytes of one page (the segment length).
    pub page_len: usize,
}

impl StoreCounters {
    /// Card read speed so far in kB/s (bytes per millisecond), 0 before any read.
    pub fn card_kilobytes_per_second(&self) -> u64 {
        (self.bytes_read * 1000)
            .checked_div(self.read_micros)
            .unwrap_or(0)
    }
}

/// Why the index could not be had from the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexError {
    /// A card read failed.
    Read(BlockError),
    /// The index is not a valid site index.
    Format(FormatError),
    /// The index does not fit in the memory given.
    NoMemory {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        available: usize,
    },
    /// The file is shorter than the image its index describes.
    Truncated {
        /// Length of the file.
        file: u32,
        /// Length of the image.
        image: u32,
    },
    /// A body segment lies in more pieces of the file than one read takes.
    TooFragmented,
}

impl core::fmt::Display for IndexError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            IndexError::Read(error) => write!(f, "card read failed: {error}"),
            IndexError::Format(error) => write!(f, "{error}"),
            IndexError::NoMemory { needed, available } => write!(
                f,
                "its index needs {needed} bytes of RAM, {available} are free"
            ),
            IndexError::Truncated { file, image } => write!(
                f,
                "the file is {file} bytes but its index describes {image} (truncated copy?)"
            ),
            IndexError::TooFragmented => f.write_str(
                "it is too fragmented on the card; write the card again with `bramble image`",
            ),
        }
    }
}

impl From<BlockError> for IndexError {
    fn from(error: BlockError) -> Self {
        IndexError::Read(error)
    }
}

/// Reads `len` bytes (whole blocks) from `offset` of the file into `out`, with one
/// multi-block read per run.
fn read_file<D: BlockDevice>(
    device: &mut D,
    extents: &FileExtents,
    offset: u32,
    out: &mut [u8],
) -> Result<(), IndexError> {
    let mut done = 0usize;
    // Up to 64 KiB per plan, so a plan never needs more runs than it may have.
    for chunk in out.chunks_mut(64 * 1024) {
        let at = u32::try_from(done)
            .ok()
            .and_then(|done| offset.checked_add(done))
            .ok_or(IndexError::TooFragmented)?;
        let len = (chunk.len() as u32).min(extents.len().saturating_sub(at));
        let plan = extents.plan(at, len).ok_or(IndexError::TooFragmented)?;
        let mut filled = 0usize;
        for run in plan {
            let bytes = run.blocks as usize * BLOCK_SIZE;
            let piece = chunk
                .get_mut(filled..filled + bytes)
                .ok_or(IndexError::TooFragmented)?;
            device.read_blocks(run.first_block, piece)?;
            filled += bytes;
        }
        done += chunk.len();
    }
    Ok(())
}

/// How many bytes of memory [`read_index`] needs for the index of the file at `extents` (its
/// length from the header, in whole blocks). Reads the first block.
pub fn index_memory_len<D: BlockDevice>(
    device: &mut D,
    extents: &FileExtents,
) -> Result<usize, IndexError> {
    if extents.len() < bramble_site::HEADER_LEN as u32 {
        return Err(IndexError::Format(FormatError::TooShort {
            len: extents.len() as usize,
        }));
    }
    let mut header = [0u8; BLOCK_SIZE];
    read_file(device, extents, 0, &mut header)?;
    let index_len = SiteIndex::index_len(&header).map_err(IndexError::Format)?;
    Ok(index_len.next_multiple_of(BLOCK_SIZE))
}

/// Reads and verifies the site index at the start of the file described by `extents`, into
/// the start of `memory` (rounded up to whole blocks); returns it and the memory left.
pub fn read_index<'m, D: BlockDevice>(
    device: &mut D,
    extents: &FileExtents,
    memory: &'m mut [u8],
) -> Result<(SiteIndex<'m>, &'m mut [u8]), IndexError> {
    let available = memory.len();
    let header = memory.get_mut(..BLOCK_SIZE).ok_or(IndexError::NoMemory {
        needed: BLOCK_SIZE,
        available,
    })?;
    if extents.len() < bramble_site::HEADER_LEN as u32 {
        return Err(IndexError::Format(FormatError::TooShort {
            len: extents.len() as usize,
        }));
    }
    read_file(device, extents, 0, header)?;
    let index_len = SiteIndex::index_len(header).map_err(IndexError::Format)?;
    let needed = index_len.next_multiple_of(BLOCK_SIZE);
    if needed > available {
        return Err(IndexError::NoMemory { needed, available });
    }
    if index_len > extents.len() as usize {
        return Err(IndexError::Truncated {
            file: extents.len(),
            image: index_len as u32,
        });
    }
    let (index_memory, rest) = memory.split_at_mut(needed);
    read_file(device, extents, 0, index_memory)?;
    let index_memory: &'m [u8] = index_memory;
    let index = SiteIndex::new_checked(index_memory).map_err(IndexError::Format)?;
    if index.image_len() > extents.len() {
        return Err(IndexError::Truncated {
            file: extents.len(),
            image: index.image_len(),
        });
    }
    for segment in 0..index.segment_count() {
        let (start, len) = index.segment(segment).ok_or(IndexError::TooFragmented)?;
        let at = index
            .bodies_offset()
            .checked_add(start)
            .ok_or(IndexError::TooFragmented)?;
        extents.plan(at, len).ok_or(IndexError::TooFragmented)?;
    }
    Ok((index, rest))
}

/// A read in flight.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    /// Its entry in the segment table.
    segment: u32,
    /// The site it is read for, and that site's serial: a site retired (or replaced) while
    /// its read was out does not get the bytes.
    side: usize,
    serial: u32,
    page: usize,
    started: Instant,
    warm_up: bool,
}

/// One site the store serves: the live one, or the one before it while its last responses
/// finish ([`CardStore::switch`]).
#[derive(Clone, Debug)]
struct Side<'m> {
    index: SiteIndex<'m>,
    extents: FileExtents,
    /// Its first entry in the segment table (segment `n` is entry `base + n`).
    base: u32,
    /// Distinct for every site installed since boot.
    serial: u32,
}

impl Side<'_> {
    /// The table entries this site uses.
    fn entries(&self) -> core::ops::Range<u32> {
        self.base..self.base.saturating_add(self.index.segment_count())
    }
}

/// Why [`CardStore::switch`] could not take a new site (the caller keeps serving the live
/// one, and may switch by a restart instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SwitchError {
    /// The site before the live one still has responses reading it.
    Retiring,
    /// The new site's segments are not as long as the cache pages (the live site's).
    SegmentLength {
        /// The cache pages' length.
        pages: u32,
        /// The new site's segment length.
        new: u32,
    },
    /// The segment table set aside at boot cannot hold both sites' segments.
    TableTooSmall {
        /// Entries both sites need.
        needed: usize,
        /// Entries set aside.
        available: usize,
    },
}

impl core::fmt::Display for SwitchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SwitchError::Retiring => {
                f.write_str("the site before the live one is still finishing responses")
            }
            SwitchError::SegmentLength { pages, new } => write!(
                f,
                "its segments are {new} bytes, the cache pages {pages} (pack both sites with one \
                 segment length)"
            ),
            SwitchError::TableTooSmall { needed, available } => write!(
                f,
                "both sites need {needed} segment table entries, {available} were set aside"
            ),
        }
    }
}

/// The mutable state of a [`CardStore`].
struct Inner<'m, 'b, D> {
    device: D,
    /// The sites served: `sides[live]`, and the one before it while it retires.
    sides: [Option<Side<'m>>; 2],
    live: usize,
    /// The serial the next site installed gets.
    next_serial: u32,
    cache: SegmentCache<'m, 'b>,
    demand: heapless::Deque<u32, DEMAND_QUEUE>,
    ahead: heapless::Deque<u32, AHEAD_QUEUE>,
    in_flight: Option<InFlight>,
    counters: StoreCounters,
    /// Whether idle warm-up runs, and the next segment it considers.
    warm_up: bool,
    warm_next: u32,
    /// The time of the last poll, of the last lookup by a request and of the last warm-up
    /// read's start.
    now: Instant,
    last_lookup: Instant,
    last_warm_up: Instant,
    /// A clock read when reads start and end (their speed), if given; else poll times.
    clock: Option<fn() -> Instant>,
}

/// A site's bodies on the card, served through a RAM cache: a [`BodySource`] that never
/// blocks. Drive it with [`CardStore::poll`] from the main loop and sleep no longer than
/// [`CardStore::next_deadline`].
pub struct CardStore<'m, 'b, D> {
    inner: RefCell<Inner<'m, 'b, D>>,
}

impl<'m, 'b, D: BackgroundRead<'b>> CardStore<'m, 'b, D> {
    /// A store for `index` (read by [`read_index`] from the file at `extents`) on `device`,
    /// with `table` (one entry per segment: [`CardStore::table_len`]; more, up to
    /// [`CardStore::switch_table_len`], for [`CardStore::switch`]) and no cache pages yet
    /// (see [`CardStore::attach_pages`]). Idle warm-up is on.
    pub fn new(
        device: D,
        index: SiteIndex<'m>,
        extents: FileExtents,
        table: &'m mut [u32],
    ) -> Self {
        Self {
            inner: RefCell::new(Inner {
                device,
                sides: [
                    Some(Side {
                        index,
                        extents,
                        base: 0,
                        serial: 0,
                    }),
                    None,
                ],
                live: 0,
                next_serial: 1,
                cache: SegmentCache::new(&mut [], table),
                demand: heapless::Deque::new(),
                ahead: heapless::Deque::new(),
                in_flight: None,
                counters: StoreCounters {
                    page_len: index.segment_len() as usize,
                    ..StoreCounters::default()
                },
                warm_up: true,
                warm_next: 0,
                now: Instant::from_micros(0),
                last_lookup: Instant::from_micros(0),
                last_warm_up: Instant::from_micros(0),
                clock: None,
            }),
        }
    }

    /// Times reads with `clock` (read when each starts and ends) instead of the instants
    /// given to [`CardStore::poll`], so that the card speed counts only the reads.
    pub fn with_clock(self, clock: fn() -> Instant) -> Self {
        self.inner.borrow_mut().clock = Some(clock);
        self
    }

    /// Entries the segment table of a store for `index` needs.
    pub fn table_len(index: &SiteIndex<'_>) -> usize {
        index.segment_count() as usize
    }

    /// Entries the segment table needs so that a store serving `index` can switch to any site
    /// of at most `other_bytes` packed with the same segment length, and back (the two
    /// sites' entries sit at either end of the table, each new one at the end the live one
    /// does not use).
    pub fn switch_table_len(index: &SiteIndex<'_>, other_bytes: u64) -> usize {
        let segment = u64::from(index.segment_len().max(1));
        let other = usize::try_from(other_bytes.div_ceil(segment)).unwrap_or(usize::MAX);
        other
            .saturating_mul(2)
            .max(Self::table_len(index).saturating_add(other))
    }

    /// Makes `index` (read by [`read_index`] from the file at `extents`, on the same
    /// device) the live site, between requests: from now on [`CardStore::side`] of the
    /// returned side serves it, and the store's own [`BodySource`] too. The site that was
    /// live keeps its side, its cached segments and its reads, so that responses already
    /// reading it finish from it, until [`CardStore::retire`]. Nothing is read here.
    pub fn switch(&self, index: SiteIndex<'m>, extents: FileExtents) -> Result<usize, SwitchError> {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return Err(SwitchError::Retiring);
        };
        let inner = &mut *inner;
        let other = 1 - inner.live;
        let Some(live) = inner.sides[inner.live].as_ref() else {
            return Err(SwitchError::Retiring);
        };
        if inner.sides[other].is_some() {
            return Err(SwitchError::Retiring);
        }
        let pages = live.index.segment_len();
        if index.segment_len() != pages {
            return Err(SwitchError::SegmentLength {
                pages,
                new: index.segment_len(),
            });
        }
        let available = inner.cache.table_len();
        let count = index.segment_count();
        let needed = (live.index.segment_count() as usize).saturating_add(count as usize);
        // The new site's entries at the end of the table the live one leaves free.
        let base = if live.base == 0 {
            (available as u32).checked_sub(count)
        } else {
            Some(0)
        };
        let fits = base.is_some_and(|base| {
            let end = u64::from(base) + u64::from(count);
            if live.base == 0 {
                u64::from(base) >= u64::from(live.index.segment_count())
            } else {
                end <= u64::from(live.base)
            }
        });
        let (Some(base), true) = (base, fits) else {
            return Err(SwitchError::TableTooSmall { needed, available });
        };
        let side = Side {
            index,
            extents,
            base,
            serial: inner.next_serial,
        };
        inner.next_serial = inner.next_serial.wrapping_add(1);
        inner.cache.drop_range(side.entries());
        inner.sides[other] = Some(side);
        inner.live = other;
        inner.warm_next = 0;
        Ok(other)
    }

    /// Stops serving `side` (not the live one): its cached segments are dropped, a read in
    /// flight for it is thrown away when it ends, and its [`CardStore::side`] fails every
    /// request from now on. Its blocks on the card may be written after this. False if
    /// `side` is the live one or serves nothing.
    pub fn retire(&self, side: usize) -> bool {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return false;
        };
        if side == inner.live {
            return false;
        }
        let Some(retired) = inner.sides.get_mut(side).and_then(Option::take) else {
            return false;
        };
        inner.cache.drop_range(retired.entries());
        true
    }

    /// The side that is live (see [`CardStore::switch`]).
    pub fn live_side(&self) -> usize {
        self.inner.try_borrow().map_or(0, |inner| inner.live)
    }

    /// Where the live site lies on the card.
    pub fn extents(&self) -> Option<FileExtents> {
        let inner = self.inner.try_borrow().ok()?;
        inner.sides[inner.live]
            .as_ref()
            .map(|side| side.extents.clone())
    }

    /// The body source of one side (0 or 1) of the store: the site it holds, whether it is
    /// live or retiring; every request fails once it serves nothing. A response keeps the
    /// side it started with, so a switch never mixes two sites in one response.
    pub fn side(&self, side: usize) -> StoreSide<'_, 'm, 'b, D> {
        StoreSide { store: self, side }
    }

    /// Gives the store its cache pages (each exactly one segment long; others are left out).
    /// Replaces any pages given before (and forgets what they held).
    pub fn attach_pages(&self, pages: &'m mut [Page<'b>]) {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return;
        };
        let inner = &mut *inner;
        if inner.in_flight.is_some() {
            log::warn!("store: a read is in flight; cache pages not replaced");
            return;
        }
        let Some(live) = inner.sides[inner.live].as_ref() else {
            return;
        };
        let segment_len = live.index.segment_len() as usize;
        if pages
            .iter()
            .any(|page| page.memory.as_ref().is_some_and(|m| m.len() != segment_len))
        {
            log::warn!("store: cache pages must be {segment_len} bytes; none attached");
            return;
        }
        inner.cache.replace_pages(pages);
        inner.counters.pages = inner.cache.page_count();
    }

    /// Turns idle warm-up on or off.
    pub fn set_warm_up(&self, on: bool) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            inner.warm_up = on;
        }
    }

    /// Drops every cached segment and stops idle warm-up (a cold cache, as after boot, for
    /// measuring the card).
    pub fn clear(&self) {
        if let Ok(mut inner) = self.inner.try_borrow_mut() {
            inner.cache.clear();
            inner.warm_up = false;
        }
    }

    /// The counters so far.
    pub fn counters(&self) -> StoreCounters {
        match self.inner.try_borrow() {
            Ok(inner) => StoreCounters {
                evictions: inner.cache.evictions(),
                pages_used: inner.cache.used_pages(),
                ..inner.counters
            },
            Err(_) => StoreCounters::default(),
        }
    }

    /// The index of the live site.
    pub fn index(&self) -> Option<SiteIndex<'m>> {
        let inner = self.inner.try_borrow().ok()?;
        inner.sides[inner.live].as_ref().map(|side| side.index)
    }

    /// Runs the background reads: finishes a read that ended (verifying it), starts the next.
    /// Returns true when a segment arrived or failed (responses waiting for it can move on).
    /// Never waits for the card.
    pub fn poll(&self, now: Instant) -> bool {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return false;
        };
        inner.now = now;
        let mut finished = inner.finish_read(now);
        if inner.in_flight.is_none() {
            inner.start_next(now);
            // A device that finishes while it starts (QEMU's DMA model copies at once) need
            // not wait for the next poll. One read starts per poll, so the loop is never held
            // for more than one segment's worth.
            finished |= inner.finish_read(now);
        }
        finished
    }

    /// When [`CardStore::poll`] next has work: soon while a read is in flight, at once when
    /// one is waiting to start, at the end of the quiet time when warm-up could run, `None`
    /// when there is nothing to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let inner = self.inner.try_borrow().ok()?;
        if inner.in_flight.is_some() {
            return Some(inner.now.add_micros(POLL_INTERVAL_MICROS));
        }
        if !inner.demand.is_empty() || !inner.ahead.is_empty() {
            return Some(inner.now);
        }
        if inner.warm_up_possible() {
            let quiet = inner.last_lookup.add_micros(WARM_UP_IDLE_MICROS);
            let paced = inner.last_warm_up.add_micros(WARM_UP_PACE_MICROS);
            return Some(quiet.max(paced).max(inner.now));
        }
        None
    }

    /// The device (for its own counters).
    pub fn with_device<R>(&self, f: impl FnOnce(&mut D) -> R) -> Option<R> {
        self.inner
            .try_borrow_mut()
            .ok()
            .map(|mut inner| f(&mut inner.device))
    }
}

impl<'m, 'b, D: BackgroundRead<'b>> Inner<'m, 'b, D> {
    /// The clock's time if there is one, else `now`.
    fn time(&self, now: Instant) -> Instant {
        self.clock.map_or(now, |clock| clock())
    }

    fn warm_up_possible(&self) -> bool {
        let free = self.cache.page_count() - self.cache.used_pages();
        let count = self.sides[self.live]
            .as_ref()
            .map_or(0, |side| side.index.segment_count());
        self.warm_up && self.warm_next < count && free > self.cache.page_count() / 4
    }

    /// The site using table entry `segment`, and the segment's number in it.
    fn locate(&self, segment: u32) -> Option<(usize, u32)> {
        self.sides.iter().enumerate().find_map(|(at, side)| {
            let side = side.as_ref()?;
            side.entries()
                .contains(&segment)
                .then(|| (at, segment - side.base))
        })
    }

    /// Queues `segment` for reading (demand or read-ahead) if it is not in RAM or on its way.
    fn enqueue(&mut self, segment: u32, demand: bool) {
        match self.cache.state(segment) {
            SegmentState::Absent | SegmentState::Failed => {}
            _ => return,
        }
        let queued = if demand {
            self.demand.push_back(segment).is_ok()
        } else {
            self.ahead.push_back(segment).is_ok()
        };
        if queued {
            self.cache.mark(segment, SegmentState::Queued);
        }
    }

    fn read(
        &mut self,
        side: usize,
        request: BodyRequest,
        out: &mut [u8],
        copy: &mut BodyCopy<'_>,
    ) -> BodyStatus {
        let Some((index, base)) = self
            .sides
            .get(side)
            .and_then(Option::as_ref)
            .map(|side| (side.index, side.base))
        else {
            return BodyStatus::Failed;
        };
        let body = request.body;
        let (Some(start), Some(end)) = (
            body.offset.checked_add(request.offset),
            body.offset.checked_add(body.len),
        ) else {
            return BodyStatus::Failed;
        };
        if request.offset >= body.len || end > index.bodies_len() {
            return BodyStatus::Failed;
        }
        let segment_len = index.segment_len();
        let local = index.segment_of(start);
        // Its entry in the table: the cache knows segments by entry.
        let Some(segment) = base.checked_add(local) else {
            return BodyStatus::Failed;
        };
        if request.lookup {
            self.last_lookup = self.now;
        }
        match self.cache.state(segment) {
            SegmentState::Cached(_) => {
                let Some((segment_start, segment_bytes)) = index.segment(local) else {
                    return BodyStatus::Failed;
                };
                let Some((data, verified)) = self.cache.get(segment) else {
                    return BodyStatus::Failed;
                };
                let data = &data[..(segment_bytes as usize).min(data.len())];
                if !verified {
                    // The segment failed its checksum when read. A new response reads it
                    // again (the fault may have been on the way, not on the card); one already
                    // waiting for it may take a body that lies wholly in it and passes its own
                    // checksum.
                    if request.lookup {
                        self.counters.misses += 1;
                        self.cache.drop_segment(segment);
                        self.enqueue(segment, true);
                        return BodyStatus::Pending;
                    }
                    // Only a body wholly inside this segment can be checked here.
                    let intact = body
                        .offset
                        .checked_sub(segment_start)
                        .map(|at| at as usize)
                        .and_then(|at| data.get(at..at.checked_add(body.len as usize)?))
                        .is_some_and(|bytes| bramble_site::crc32(bytes) == body.crc);
                    if !intact {
                        self.counters.body_failures += 1;
                        log::error!(
                            "store: {} ({} bytes at {}) failed its checksum; not sent",
                            index.path(body.file),
                            body.len,
                            body.offset
                        );
                        return BodyStatus::Failed;
                    }
                } else if request.lookup {
                    self.counters.hits += 1;
                    self.cache.touch(segment);
                    // Read the body's next segment while this one is being sent.
                    let next = local + 1;
                    if end > next.saturating_mul(segment_len) {
                        self.enqueue(segment + 1, false);
                    }
                }
                let Some((data, _)) = self.cache.get(segment) else {
                    return BodyStatus::Failed;
                };
                let data = &data[..(segment_bytes as usize).min(data.len())];
                let within = (start - segment_start) as usize;
                let available = data
                    .len()
                    .saturating_sub(within)
                    .min((end - start) as usize);
                let n = available.min(out.len());
                match data.get(within..within + n) {
                    Some(bytes) => {
                        copy(&mut out[..n], Some(bytes));
                        BodyStatus::Ready(n)
                    }
                    None => BodyStatus::Failed,
                }
            }
            SegmentState::Queued | SegmentState::Reading => {
                if request.lookup {
                    self.counters.misses += 1;
                }
                BodyStatus::Pending
            }
            SegmentState::Failed if !request.lookup => BodyStatus::Failed,
            SegmentState::Failed | SegmentState::Absent => {
                if request.lookup {
                    self.counters.misses += 1;
                }
                self.enqueue(segment, true);
                BodyStatus::Pending
            }
        }
    }

    /// Where the byte at `request.offset` of the body lies in the cache, if its segment is
    /// there and verified (no counting, no reading: a hint for [`BodySource::address`]).
    fn address(&self, side: usize, request: BodyRequest) -> Option<usize> {
        let side = self.sides.get(side)?.as_ref()?;
        let start = request.body.offset.checked_add(request.offset)?;
        if request.offset >= request.body.len {
            return None;
        }
        let local = side.index.segment_of(start);
        let (segment_start, _) = side.index.segment(local)?;
        let (data, verified) = self.cache.get(side.base.checked_add(local)?)?;
        let within = start.checked_sub(segment_start)? as usize;
        let byte = data.get(within).filter(|_| verified)?;
        Some(core::ptr::from_ref(byte) as usize)
    }

    /// Takes a finished read back from the device; true if one ended.
    fn finish_read(&mut self, now: Instant) -> bool {
        let Some(flight) = self.in_flight else {
            return false;
        };
        // The site the read was for, if it is still served (not retired or replaced).
        let side = self
            .sides
            .get(flight.side)
            .and_then(Option::as_ref)
            .filter(|side| side.serial == flight.serial)
            .map(|side| (side.index, side.base));
        let (memory, result) = match self.device.poll_read() {
            ReadPoll::Busy => return false,
            ReadPoll::Idle => {
                // The device forgot the read (and kept the page): nothing to verify.
                log::error!(
                    "store: the card lost the read of segment {}",
                    flight.segment
                );
                self.in_flight = None;
                self.counters.read_errors += 1;
                if side.is_some() {
                    self.cache.mark(flight.segment, SegmentState::Failed);
                }
                return true;
            }
            ReadPoll::Done(memory, result) => (memory, result),
        };
        self.in_flight = None;
        self.counters.read_micros += self.time(now).micros_since(flight.started);
        let segment = flight.segment;
        let Some((index, base)) = side else {
            // Its site is no longer served: the bytes go nowhere, the page is free again.
            self.cache.return_page(flight.page, memory, None, false);
            return true;
        };
        let local = segment - base;
        let (_, len) = index.segment(local).unwrap_or((0, 0));
        match result {
            Ok(()) => {
                let stored = index.segment_checksum(local);
                let computed = memory.get(..len as usize).map(bramble_site::crc32);
                if stored.is_some() && stored == computed {
                    self.counters.segments_read += 1;
                    self.counters.bytes_read += u64::from(len.next_multiple_of(BLOCK_SIZE as u32));
                    if flight.warm_up {
                        self.counters.warmed += 1;
                    }
                    self.cache
                        .return_page(flight.page, memory, Some(segment), true);
                } else {
                    // Kept, unverified: its intact bodies can still be served.
                    self.counters.checksum_failures += 1;
                    self.cache
                        .return_page(flight.page, memory, Some(segment), false);
                    log_failure(
                        &index,
                        local,
                        format_args!(
                            "failed its checksum (stored {:#010x}, read {:#010x})",
                            stored.unwrap_or(0),
                            computed.unwrap_or(0)
                        ),
                    );
                }
            }
            Err(error) => {
                self.counters.read_errors += 1;
                self.cache.return_page(flight.page, memory, None, false);
                self.cache.mark(segment, SegmentState::Failed);
                log_failure(
                    &index,
                    local,
                    format_args!("could not be read from the card ({error})"),
                );
            }
        }
        true
    }

    /// Starts the next read: a segment a response waits for, else one read ahead, else (when
    /// idle) warm-up of the live site.
    fn start_next(&mut self, now: Instant) {
        let (segment, warm_up) = loop {
            if let Some(segment) = self.demand.pop_front().or_else(|| self.ahead.pop_front()) {
                // Cleared, read meanwhile, or its site retired: skip.
                if self.cache.state(segment) == SegmentState::Queued {
                    break (segment, false);
                }
                continue;
            }
            if now.micros_since(self.last_lookup) < WARM_UP_IDLE_MICROS
                || now < self.last_warm_up.add_micros(WARM_UP_PACE_MICROS)
                || !self.warm_up_possible()
            {
                return;
            }
            let Some((count, base)) = self.sides[self.live]
                .as_ref()
                .map(|side| (side.index.segment_count(), side.base))
            else {
                return;
            };
            let mut found = None;
            for _ in 0..WARM_UP_SCAN {
                if self.warm_next >= count {
                    break;
                }
                let candidate = base + self.warm_next;
                self.warm_next += 1;
                if self.cache.state(candidate) == SegmentState::Absent {
                    found = Some(candidate);
                    break;
                }
            }
            match found {
                Some(segment) => break (segment, true),
                None => return,
            }
        };
        let Some((side, local)) = self.locate(segment) else {
            self.cache.mark(segment, SegmentState::Absent);
            return;
        };
        let Some(site) = self.sides[side].as_ref() else {
            return;
        };
        let serial = site.serial;
        let plan = site.index.segment(local).and_then(|(start, len)| {
            site.index
                .bodies_offset()
                .checked_add(start)
                .and_then(|at| site.extents.plan(at, len))
        });
        let Some(plan) = plan else {
            // `read_index` checked every segment's plan: cannot happen.
            self.counters.read_errors += 1;
            self.cache.mark(segment, SegmentState::Failed);
            return;
        };
        let Some((page, memory)) = self.cache.take_page(warm_up) else {
            // Every page is lent out or (warm-up) none is free: try again later.
            if warm_up {
                self.warm_next = local;
            } else {
                let _ = self.demand.push_front(segment);
            }
            return;
        };
        let started = self.time(now);
        if warm_up {
            self.last_warm_up = now;
        }
        match self.device.start_read(&plan, memory) {
            Ok(()) => {
                self.cache.mark(segment, SegmentState::Reading);
                self.in_flight = Some(InFlight {
                    segment,
                    side,
                    serial,
                    page,
                    started,
                    warm_up,
                });
            }
            Err((error, memory)) => {
                self.cache.return_page(page, memory, None, false);
                self.counters.read_errors += 1;
                self.cache.mark(segment, SegmentState::Failed);
                log::error!("store: the card refused the read of segment {local}: {error}");
            }
        }
    }
}

/// Logs a segment of `index` that failed, naming (the first few of) the files in it.
fn log_failure(index: &SiteIndex<'_>, segment: u32, what: core::fmt::Arguments<'_>) {
    const NAMED: usize = 4;
    let (start, len) = index.segment(segment).unwrap_or((0, 0));
    let end = start.saturating_add(len);
    let mut names: heapless::String<256> = heapless::String::new();
    let mut count = 0usize;
    for file in index.files() {
        let touches = [Some(file.identity), file.gzip, file.brotli]
            .into_iter()
            .flatten()
            .any(|v| {
                !v.body.is_empty()
                    && v.body.offset < end
                    && start < v.body.offset.saturating_add(v.body.len)
            });
        if !touches {
            continue;
        }
        if count < NAMED {
            let separator = if count > 0 { ", " } else { "" };
            let _ =
                core::fmt::Write::write_fmt(&mut names, format_args!("{separator}{}", file.path));
        }
        count += 1;
    }
    if count > NAMED {
        let _ =
            core::fmt::Write::write_fmt(&mut names, format_args!(" and {} more", count - NAMED));
    }
    log::error!(
        "store: SITE.BIN segment {segment} {what}; files in it: {names}; each is sent only if \
         it passes its own checksum, and read again when asked for"
    );
}

impl<'m, 'b, D: BackgroundRead<'b>> CardStore<'m, 'b, D> {
    /// [`BodySource::read_with`] for one side.
    fn read_side(
        &self,
        side: usize,
        request: BodyRequest,
        out: &mut [u8],
        copy: &mut BodyCopy<'_>,
    ) -> BodyStatus {
        match self.inner.try_borrow_mut() {
            Ok(mut inner) => inner.read(side, request, out, copy),
            Err(_) => BodyStatus::Pending,
        }
    }

    /// [`BodySource::address`] for one side.
    fn address_side(&self, side: usize, request: BodyRequest) -> Option<usize> {
        self.inner.try_borrow().ok()?.address(side, request)
    }
}

/// Copies `from` into `to` (the [`BodySource::read`] of a store, which copies itself).
fn copy_into(to: &mut [u8], from: Option<&[u8]>) {
    if let Some(from) = from {
        to.copy_from_slice(from);
    }
}

/// The live site of the store.
impl<'m, 'b, D: BackgroundRead<'b>> BodySource for CardStore<'m, 'b, D> {
    fn read(&self, request: BodyRequest, out: &mut [u8]) -> BodyStatus {
        self.read_side(self.live_side(), request, out, &mut copy_into)
    }

    fn read_with(
        &self,
        request: BodyRequest,
        out: &mut [u8],
        copy: &mut BodyCopy<'_>,
    ) -> BodyStatus {
        self.read_side(self.live_side(), request, out, copy)
    }

    fn address(&self, request: BodyRequest) -> Option<usize> {
        self.address_side(self.live_side(), request)
    }
}

/// One side of a [`CardStore`] ([`CardStore::side`]): the site it held when a response
/// started, for as long as that response reads it.
pub struct StoreSide<'s, 'm, 'b, D> {
    store: &'s CardStore<'m, 'b, D>,
    side: usize,
}

impl<'m, 'b, D: BackgroundRead<'b>> BodySource for StoreSide<'_, 'm, 'b, D> {
    fn read(&self, request: BodyRequest, out: &mut [u8]) -> BodyStatus {
        self.store
            .read_side(self.side, request, out, &mut copy_into)
    }

    fn read_with(
        &self,
        request: BodyRequest,
        out: &mut [u8],
        copy: &mut BodyCopy<'_>,
    ) -> BodyStatus {
        self.store.read_side(self.side, request, out, copy)
    }

    fn address(&self, request: BodyRequest) -> Option<usize> {
        self.store.address_side(self.side, request)
    }
}
