//! The certificate store: what ACME must keep across power cuts (the account key and URL,
//! the certificate's key and chain), in two slots of a fixed block region, written in place.
//!
//! Each slot starts with a 64-byte header (magic, sequence number, payload length, the Unix
//! time of the save, SHA-256 over header and payload) followed by the payload, in the slot's
//! first blocks. A save
//! writes the slot that does not hold the newest valid record, with the next sequence
//! number; the other slot is never touched. So a cut at any moment, tearing any block at any
//! byte, leaves the previous record whole: at load the valid slot with the highest sequence
//! number wins, and a torn slot fails its checksum. Nothing outside the region is written
//! (the region is all a [`BlockStore`] can reach).
//!
//! The record also carries the issuance history ([`History`], schedule's bounds across
//! reboots). A torn slot newer than the record is reported ([`Loaded::torn`]) with the time
//! its header gives, since the header is the first block a save writes: the bounds count the
//! cut save (bramble_acme::schedule's module docs).

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use bramble_hal::block::BlockWrite;
use sha2::{Digest, Sha256};

pub use crate::schedule::History;

/// Bytes per block (an SD card's sector).
pub const BLOCK_LEN: usize = 512;
/// The slot header's size.
const HEADER_LEN: usize = 64;
/// The header's first bytes.
const MAGIC: &[u8; 8] = b"BRMACME1";
/// Payload format version: 2 adds the issuance history; 1 (without it) is still read.
const PAYLOAD_VERSION: u8 = 2;
/// Longest field (a chain) kept.
const MAX_FIELD_LEN: usize = 24 * 1024;
/// Blocks of the region `bramble image` preallocates (two slots of 16 KiB).
pub const DEFAULT_REGION_BLOCKS: u32 = 64;

/// Why the store could not be read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The device failed the read or write (or refused it: outside the region).
    Device,
    /// The record does not fit in a slot.
    TooLarge,
    /// The region is too small for two slots.
    RegionTooSmall,
}

impl core::fmt::Display for StoreError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Device => "the card failed a read or write of the certificate store",
            Self::TooLarge => "the certificate and keys do not fit in a store slot",
            Self::RegionTooSmall => "the certificate store is too small for two slots",
        })
    }
}

/// A region of blocks, numbered from 0: all of the card a store may touch.
pub trait BlockStore {
    /// Blocks in the region.
    fn block_count(&self) -> u32;
    /// Reads block `index` of the region.
    fn read_block(&mut self, index: u32, out: &mut [u8; BLOCK_LEN]) -> Result<(), StoreError>;
    /// Writes block `index` of the region.
    fn write_block(&mut self, index: u32, data: &[u8; BLOCK_LEN]) -> Result<(), StoreError>;
    /// Writes `data` (whole blocks) from block `first` of the region on: by default block by
    /// block; a card does it with one multi-block command.
    fn write_blocks(&mut self, first: u32, data: &[u8]) -> Result<(), StoreError> {
        if !data.len().is_multiple_of(BLOCK_LEN) {
            return Err(StoreError::Device);
        }
        for (offset, chunk) in data.chunks_exact(BLOCK_LEN).enumerate() {
            let index = u32::try_from(offset)
                .ok()
                .and_then(|offset| first.checked_add(offset))
                .ok_or(StoreError::Device)?;
            let block: &[u8; BLOCK_LEN] = chunk.try_into().map_err(|_| StoreError::Device)?;
            self.write_block(index, block)?;
        }
        Ok(())
    }
    /// Makes the writes so far durable (a card's own cache; a file's fsync).
    fn flush(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl<B: BlockStore + ?Sized> BlockStore for &mut B {
    fn block_count(&self) -> u32 {
        (**self).block_count()
    }
    fn read_block(&mut self, index: u32, out: &mut [u8; BLOCK_LEN]) -> Result<(), StoreError> {
        (**self).read_block(index, out)
    }
    fn write_block(&mut self, index: u32, data: &[u8; BLOCK_LEN]) -> Result<(), StoreError> {
        (**self).write_block(index, data)
    }
    fn write_blocks(&mut self, first: u32, data: &[u8]) -> Result<(), StoreError> {
        (**self).write_blocks(first, data)
    }
    fn flush(&mut self) -> Result<(), StoreError> {
        (**self).flush()
    }
}

/// A store region in RAM (`certificate_store = ram`, and tests): lost at power off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryBlocks {
    /// The region's bytes.
    pub bytes: Vec<u8>,
    /// Blocks written so far.
    pub writes: u32,
}

impl MemoryBlocks {
    /// A zeroed region of `blocks` blocks.
    pub fn new(blocks: u32) -> Self {
        Self {
            bytes: vec![0; blocks as usize * BLOCK_LEN],
            writes: 0,
        }
    }
}

impl BlockStore for MemoryBlocks {
    fn block_count(&self) -> u32 {
        u32::try_from(self.bytes.len() / BLOCK_LEN).unwrap_or(u32::MAX)
    }

    fn read_block(&mut self, index: u32, out: &mut [u8; BLOCK_LEN]) -> Result<(), StoreError> {
        SliceBlocks::new(&mut self.bytes).read_block(index, out)
    }

    fn write_block(&mut self, index: u32, data: &[u8; BLOCK_LEN]) -> Result<(), StoreError> {
        SliceBlocks::new(&mut self.bytes).write_block(index, data)?;
        self.writes += 1;
        Ok(())
    }
}

/// A region of memory seen as blocks (the board's store in RAM, and [`MemoryBlocks`]').
pub struct SliceBlocks<'a> {
    bytes: &'a mut [u8],
}

impl<'a> SliceBlocks<'a> {
    /// The whole blocks of `bytes` (a partial block at the end is not used).
    pub fn new(bytes: &'a mut [u8]) -> Self {
        Self { bytes }
    }

    fn range(&self, index: u32) -> Result<core::ops::Range<usize>, StoreError> {
        let start = usize::try_from(index)
            .ok()
            .and_then(|index| index.checked_mul(BLOCK_LEN))
            .ok_or(StoreError::Device)?;
        let end = start.checked_add(BLOCK_LEN).ok_or(StoreError::Device)?;
        Ok(start..end)
    }
}

impl BlockStore for SliceBlocks<'_> {
    fn block_count(&self) -> u32 {
        u32::try_from(self.bytes.len() / BLOCK_LEN).unwrap_or(u32::MAX)
    }

    fn read_block(&mut self, index: u32, out: &mut [u8; BLOCK_LEN]) -> Result<(), StoreError> {
        let range = self.range(index)?;
        let block = self.bytes.get(range).ok_or(StoreError::Device)?;
        out.copy_from_slice(block);
        Ok(())
    }

    fn write_block(&mut self, index: u32, data: &[u8; BLOCK_LEN]) -> Result<(), StoreError> {
        let range = self.range(index)?;
        let block = self.bytes.get_mut(range).ok_or(StoreError::Device)?;
        block.copy_from_slice(data);
        Ok(())
    }
}

/// The store's region on a card: `blocks` blocks of `device` from `first_block` on. Every
/// read and write is checked to lie inside the region before it reaches the device (a request
/// past it is refused and counted, and nothing is sent), and every write is read back and
/// compared. On the Pi the card driver also refuses writes outside this window, so a slip in
/// either layer alone cannot touch the site.
pub struct CardRegion<D> {
    device: D,
    first_block: u64,
    blocks: u32,
    counters: RegionCounters,
}

/// What a [`CardRegion`] has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionCounters {
    /// Write requests that reached the device.
    pub writes: u32,
    /// Blocks they wrote.
    pub blocks_written: u64,
    /// Requests refused because they reached outside the region.
    pub refused: u32,
    /// Writes whose read-back differed from what was written.
    pub verify_failures: u32,
}

impl<D: BlockWrite> CardRegion<D> {
    /// The region of `blocks` blocks from `first_block` on `device`; `None` if it does not
    /// lie on the device.
    pub fn new(device: D, first_block: u64, blocks: u32) -> Option<Self> {
        let end = first_block.checked_add(u64::from(blocks))?;
        (blocks > 0 && end <= device.block_count()).then_some(Self {
            device,
            first_block,
            blocks,
            counters: RegionCounters::default(),
        })
    }

    /// What the region has done.
    pub fn counters(&self) -> RegionCounters {
        self.counters
    }

    /// The device block of region block `index`, if `count` blocks from there lie inside the
    /// region; counts a refusal otherwise.
    fn device_block(&mut self, index: u32, count: usize) -> Result<u64, StoreError> {
        let inside = u32::try_from(count)
            .ok()
            .filter(|&count| count > 0)
            .and_then(|count| index.checked_add(count))
            .is_some_and(|end| end <= self.blocks);
        if !inside {
            self.counters.refused = self.counters.refused.saturating_add(1);
            log::error!(
                "store: refused {count} blocks at region block {index}: the region has {} blocks",
                self.blocks
            );
            return Err(StoreError::Device);
        }
        Ok(self.first_block + u64::from(index))
    }
}

impl<D: BlockWrite> BlockStore for CardRegion<D> {
    fn block_count(&self) -> u32 {
        self.blocks
    }

    fn read_block(&mut self, index: u32, out: &mut [u8; BLOCK_LEN]) -> Result<(), StoreError> {
        let block = self.device_block(index, 1)?;
        self.device
            .read_blocks(block, out)
            .map_err(|_| StoreError::Device)
    }

    fn write_block(&mut self, index: u32, data: &[u8; BLOCK_LEN]) -> Result<(), StoreError> {
        self.write_blocks(index, data)
    }

    fn write_blocks(&mut self, first: u32, data: &[u8]) -> Result<(), StoreError> {
        if !data.len().is_multiple_of(BLOCK_LEN) {
            return Err(StoreError::Device);
        }
        let count = data.len() / BLOCK_LEN;
        let block = self.device_block(first, count)?;
        self.counters.writes = self.counters.writes.saturating_add(1);
        self.device
            .write_blocks(block, data)
            .map_err(|_| StoreError::Device)?;
        self.counters.blocks_written = self.counters.blocks_written.saturating_add(count as u64);
        let mut back = [0u8; BLOCK_LEN];
        for (offset, written) in data.chunks_exact(BLOCK_LEN).enumerate() {
            self.device
                .read_blocks(block + offset as u64, &mut back)
                .map_err(|_| StoreError::Device)?;
            if back[..] != written[..] {
                self.counters.verify_failures = self.counters.verify_failures.saturating_add(1);
                log::error!(
                    "store: block {} reads back other bytes than were written",
                    block + offset as u64
                );
                return Err(StoreError::Device);
            }
        }
        Ok(())
    }
}

/// What is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The directory URL the account belongs to (another CA needs another account).
    pub directory_url: String,
    /// The account key's secret scalar.
    pub account_key: [u8; 32],
    /// The account URL (`kid`), once the CA made the account.
    pub account_url: String,
    /// The names the certificate was ordered for, comma-separated.
    pub names: String,
    /// The certificate key's secret scalar (zero without a certificate).
    pub certificate_key: [u8; 32],
    /// The chain, PEM, leaf first (empty without a certificate).
    pub chain_pem: String,
    /// The issuance bounds' history, as of this save (empty in a version 1 record).
    pub history: History,
}

fn put_field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        if len > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Some(head)
    }

    fn field(&mut self) -> Option<&'a [u8]> {
        let len = u32::from_le_bytes(self.bytes(4)?.try_into().ok()?) as usize;
        if len > MAX_FIELD_LEN {
            return None;
        }
        self.bytes(len)
    }

    fn text(&mut self) -> Option<String> {
        core::str::from_utf8(self.field()?).ok().map(String::from)
    }

    fn key(&mut self) -> Option<[u8; 32]> {
        self.field()?.try_into().ok()
    }
}

impl Record {
    /// The payload bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + self.chain_pem.len());
        out.push(PAYLOAD_VERSION);
        put_field(&mut out, self.directory_url.as_bytes());
        put_field(&mut out, &self.account_key);
        put_field(&mut out, self.account_url.as_bytes());
        put_field(&mut out, self.names.as_bytes());
        put_field(&mut out, &self.certificate_key);
        put_field(&mut out, self.chain_pem.as_bytes());
        let mut history = Vec::with_capacity(History::ENCODED_LEN);
        self.history.encode(&mut history);
        put_field(&mut out, &history);
        out
    }

    /// Reads payload bytes (already checksummed, but checked again field by field).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (&version, rest) = bytes.split_first()?;
        if version != 1 && version != PAYLOAD_VERSION {
            return None;
        }
        let mut reader = Reader(rest);
        let mut record = Self {
            directory_url: reader.text()?,
            account_key: reader.key()?,
            account_url: reader.text()?,
            names: reader.text()?,
            certificate_key: reader.key()?,
            chain_pem: reader.text()?,
            history: History::default(),
        };
        if version == PAYLOAD_VERSION {
            record.history = History::decode(reader.field()?)?;
        }
        reader.0.is_empty().then_some(record)
    }

    /// Whether a certificate is kept.
    pub fn has_certificate(&self) -> bool {
        !self.chain_pem.is_empty()
    }
}

/// What one slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Never written (no magic).
    Empty,
    /// A record with this sequence number.
    Valid(u64),
    /// Written but not whole: a torn write or a damaged card.
    Corrupt,
    /// Could not be read.
    Unreadable,
}

/// What loading found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The newest whole record, if any.
    pub record: Option<Record>,
    /// Each slot's state.
    pub slots: [SlotState; 2],
    /// A save newer than the record was cut off (or a slot cannot be read, or holds
    /// neither a record nor an erased block): `Some(when)`, with the Unix time its header
    /// gives if it can be read (and is not 0), `Some(None)` otherwise.
    pub torn: Option<Option<i64>>,
}

/// What a slot's first block says, whole record or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SlotHeader {
    sequence: u64,
    saved_at: i64,
}

/// Saves and loads records in a region's two slots.
#[derive(Debug)]
pub struct CertificateStore<B: BlockStore> {
    blocks: B,
    slot_blocks: u32,
    /// The slot holding the newest valid record and its sequence number, as last loaded or
    /// saved.
    newest: Option<(usize, u64)>,
    /// Blocks written by the last save.
    pub last_save_blocks: u32,
}

fn checksum(header: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(&header[..HEADER_LEN - 32]);
    hasher.update(payload);
    hasher.finalize().into()
}

impl<B: BlockStore> CertificateStore<B> {
    /// A store over `blocks`: two slots, each half of the region.
    pub fn new(blocks: B) -> Result<Self, StoreError> {
        let slot_blocks = blocks.block_count() / 2;
        if slot_blocks < 2 {
            return Err(StoreError::RegionTooSmall);
        }
        Ok(Self {
            blocks,
            slot_blocks,
            newest: None,
            last_save_blocks: 0,
        })
    }

    /// The block device (tests, and the kernel's write count).
    pub fn blocks(&self) -> &B {
        &self.blocks
    }

    /// The block device, mutably.
    pub fn blocks_mut(&mut self) -> &mut B {
        &mut self.blocks
    }

    /// Payload bytes one slot can hold.
    pub fn capacity(&self) -> usize {
        self.slot_blocks as usize * BLOCK_LEN - HEADER_LEN
    }

    fn read_slot(&mut self, slot: usize) -> (SlotState, Option<Record>, Option<SlotHeader>) {
        let first = slot as u32 * self.slot_blocks;
        let mut block = [0u8; BLOCK_LEN];
        if self.blocks.read_block(first, &mut block).is_err() {
            return (SlotState::Unreadable, None, None);
        }
        if &block[..8] != MAGIC {
            let erased = block.iter().all(|&b| b == 0) || block.iter().all(|&b| b == 0xff);
            return (
                if erased {
                    SlotState::Empty
                } else {
                    SlotState::Corrupt
                },
                None,
                None,
            );
        }
        let sequence = u64::from_le_bytes(block[8..16].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(block[16..20].try_into().unwrap_or_default()) as usize;
        let saved_at = i64::from_le_bytes(block[20..28].try_into().unwrap_or_default());
        let head = Some(SlotHeader { sequence, saved_at });
        if len > self.capacity() {
            return (SlotState::Corrupt, None, head);
        }
        let header: [u8; HEADER_LEN] = block[..HEADER_LEN].try_into().unwrap_or([0; HEADER_LEN]);
        let mut payload = Vec::with_capacity(len);
        let mut in_block = &block[HEADER_LEN..];
        let mut next = first + 1;
        while payload.len() < len {
            if in_block.is_empty() {
                if self.blocks.read_block(next, &mut block).is_err() {
                    return (SlotState::Unreadable, None, head);
                }
                next += 1;
                in_block = &block[..];
            }
            let take = in_block.len().min(len - payload.len());
            payload.extend_from_slice(&in_block[..take]);
            in_block = &in_block[take..];
        }
        if checksum(&header, &payload) != header[HEADER_LEN - 32..] {
            return (SlotState::Corrupt, None, head);
        }
        match Record::decode(&payload) {
            Some(record) => (SlotState::Valid(sequence), Some(record), head),
            None => (SlotState::Corrupt, None, head),
        }
    }

    /// Reads both slots and returns the newest whole record.
    pub fn load(&mut self) -> Loaded {
        let (state0, record0, header0) = self.read_slot(0);
        let (state1, record1, header1) = self.read_slot(1);
        let pick = match (state0, state1) {
            (SlotState::Valid(a), SlotState::Valid(b)) if b > a => Some((1, b, record1)),
            (SlotState::Valid(a), _) => Some((0, a, record0)),
            (_, SlotState::Valid(b)) => Some((1, b, record1)),
            _ => None,
        };
        let record = match pick {
            Some((slot, sequence, record)) => {
                self.newest = Some((slot, sequence));
                record
            }
            None => {
                self.newest = None;
                None
            }
        };
        // A slot that is neither whole nor erased, unless its header says it is older than
        // the record (a header torn before its sequence number reads as the older record's).
        let newest = self.newest.map(|(_, sequence)| sequence);
        let torn = [(state0, header0), (state1, header1)]
            .into_iter()
            .filter(|(state, _)| matches!(state, SlotState::Corrupt | SlotState::Unreadable))
            .filter_map(|(_, header)| match (header, newest) {
                (Some(header), Some(newest)) if header.sequence <= newest => None,
                (Some(header), _) => Some((header.saved_at > 0).then_some(header.saved_at)),
                (None, _) => Some(None),
            })
            // An unknown time (now, to the planner) before any known one.
            .min_by_key(|when| when.map(core::cmp::Reverse));
        Loaded {
            record,
            slots: [state0, state1],
            torn,
        }
    }

    /// Saves `record` into the slot that does not hold the newest one. Call [`load`] first
    /// (once, at start): the store then knows which slot to spare.
    ///
    /// [`load`]: CertificateStore::load
    pub fn save(&mut self, record: &Record) -> Result<(), StoreError> {
        let payload = record.encode();
        if payload.len() > self.capacity() {
            return Err(StoreError::TooLarge);
        }
        let (slot, sequence) = match self.newest {
            Some((slot, sequence)) => (1 - slot, sequence.wrapping_add(1)),
            None => (0, 1),
        };
        let mut image = vec![0u8; HEADER_LEN + payload.len()];
        image[..8].copy_from_slice(MAGIC);
        image[8..16].copy_from_slice(&sequence.to_le_bytes());
        image[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        image[20..28].copy_from_slice(&record.history.last_save().to_le_bytes());
        image[HEADER_LEN..].copy_from_slice(&payload);
        let sum = checksum(&image[..HEADER_LEN], &payload);
        image[HEADER_LEN - 32..HEADER_LEN].copy_from_slice(&sum);
        let first = slot as u32 * self.slot_blocks;
        let written = image.len().div_ceil(BLOCK_LEN);
        image.resize(written * BLOCK_LEN, 0);
        self.blocks.write_blocks(first, &image)?;
        let written = written as u32; // at most a slot's blocks (capacity checked above)
        self.blocks.flush()?;
        self.last_save_blocks = written;
        self.newest = Some((slot, sequence));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u8) -> Record {
        Record {
            directory_url: String::from("https://ca.test/dir"),
            account_key: [n; 32],
            account_url: String::from("https://ca.test/acct/1"),
            names: String::from("bramble.test"),
            certificate_key: [n.wrapping_add(1); 32],
            chain_pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
                .repeat(usize::from(n) * 9 + 1),
            history: History {
                issued_at: 1_800_000_000 + i64::from(n),
                saves: [1_800_000_000 + 100 * i64::from(n), 0, 0, 0, 0, 0, 0, 7],
                accounts: [0, 0, 1_799_000_000, 0, 0, 0, 0, 0],
            },
        }
    }

    #[test]
    fn a_version_1_record_reads_with_an_empty_history_and_saves_as_version_2() {
        let mut old = record(1);
        old.history = History::default();
        let mut payload = old.encode();
        // Version 1: the same fields without the history's.
        payload[0] = 1;
        payload.truncate(payload.len() - 4 - History::ENCODED_LEN);
        assert_eq!(Record::decode(&payload), Some(old.clone()));
        // A version 2 payload without its history, or with one of another length, is not read.
        payload[0] = 2;
        assert_eq!(Record::decode(&payload), None);
        let mut short = record(1).encode();
        let at = short.len() - 4 - History::ENCODED_LEN;
        short[at..at + 4].copy_from_slice(&((History::ENCODED_LEN - 8) as u32).to_le_bytes());
        short.truncate(short.len() - 8);
        assert_eq!(Record::decode(&short), None);
        assert_eq!(Record::decode(&record(2).encode()), Some(record(2)));
    }

    #[test]
    fn a_torn_save_newer_than_the_record_is_reported_with_its_header_time() {
        let mut store = CertificateStore::new(MemoryBlocks::new(64)).unwrap();
        store.load();
        store.save(&record(1)).unwrap();
        assert_eq!(store.load().torn, None);
        let whole = store.blocks().clone();
        // The second save (slot 1) cut after its first block: the header is there.
        let mut cut = CertificateStore::new(Cutting {
            inner: whole.clone(),
            writes_left: 1,
            torn_bytes: 0,
        })
        .unwrap();
        cut.load();
        assert!(cut.save(&record(2)).is_err());
        let mut after = CertificateStore::new(cut.blocks().inner.clone()).unwrap();
        let loaded = after.load();
        assert_eq!(loaded.record, Some(record(1)));
        assert_eq!(loaded.slots[1], SlotState::Corrupt);
        assert_eq!(loaded.torn, Some(Some(record(2).history.last_save())));
        // The next save goes over the torn slot: nothing torn is left.
        after.save(&record(3)).unwrap();
        assert_eq!(after.load().torn, None);
        // A header torn before its sequence number reads as the older record's: not newer.
        let mut bytes = whole.clone();
        bytes.bytes[32 * BLOCK_LEN..33 * BLOCK_LEN].copy_from_slice(&whole.bytes[..BLOCK_LEN]);
        bytes.bytes[32 * BLOCK_LEN + 100] ^= 1;
        let loaded = CertificateStore::new(bytes).unwrap().load();
        assert_eq!(loaded.slots[1], SlotState::Corrupt);
        assert_eq!(loaded.torn, None);
        // Noise where a header should be, or a slot that cannot be read: a cut save at an
        // unknown time, also with no record at all.
        let mut noise = whole.clone();
        noise.bytes[32 * BLOCK_LEN] = 0x55;
        assert_eq!(
            CertificateStore::new(noise).unwrap().load().torn,
            Some(None)
        );
        let mut fresh = MemoryBlocks::new(64);
        fresh.bytes[7] = 1;
        let loaded = CertificateStore::new(fresh).unwrap().load();
        assert_eq!((loaded.record, loaded.torn), (None, Some(None)));
        assert_eq!(
            CertificateStore::new(MemoryBlocks::new(64))
                .unwrap()
                .load()
                .torn,
            None
        );
    }

    #[test]
    fn a_slice_is_whole_blocks_and_a_block_past_it_is_refused_even_where_the_offset_overflows() {
        let mut bytes = [0u8; BLOCK_LEN * 2 + 100];
        let mut blocks = SliceBlocks::new(&mut bytes);
        assert_eq!(blocks.block_count(), 2);
        blocks.write_block(1, &[7; BLOCK_LEN]).unwrap();
        let mut out = [0; BLOCK_LEN];
        blocks.read_block(1, &mut out).unwrap();
        assert_eq!(out, [7; BLOCK_LEN]);
        for index in [2, u32::MAX / 512 + 1, u32::MAX] {
            assert_eq!(blocks.read_block(index, &mut out), Err(StoreError::Device));
            assert_eq!(blocks.write_block(index, &out), Err(StoreError::Device));
        }
        assert_eq!(bytes[BLOCK_LEN * 2..], [0; 100]);
    }

    #[test]
    fn saves_alternate_slots_and_load_takes_the_newest() {
        let mut store = CertificateStore::new(MemoryBlocks::new(64)).unwrap();
        assert_eq!(store.load().record, None);
        assert_eq!(store.load().slots, [SlotState::Empty, SlotState::Empty]);
        for n in 1..6 {
            store.save(&record(n)).unwrap();
            let loaded = CertificateStore::new(store.blocks().clone())
                .unwrap()
                .load();
            assert_eq!(loaded.record, Some(record(n)));
        }
        assert!(matches!(
            store.load().slots,
            [SlotState::Valid(_), SlotState::Valid(_)]
        ));
    }

    #[test]
    fn a_cut_at_any_write_and_any_byte_leaves_the_old_or_the_new_record() {
        let mut base = CertificateStore::new(MemoryBlocks::new(64)).unwrap();
        base.load();
        base.save(&record(1)).unwrap();
        base.save(&record(2)).unwrap();
        let before = base.blocks().clone();
        // A full save of record 3, to learn how many blocks it writes.
        let mut full = CertificateStore::new(before.clone()).unwrap();
        full.load();
        full.save(&record(3)).unwrap();
        let blocks = full.last_save_blocks;
        assert!(blocks >= 2);
        for cut_after in 0..blocks {
            for torn_bytes in [0, 1, 63, 64, 200, 511] {
                let mut store = CertificateStore::new(Cutting {
                    inner: before.clone(),
                    writes_left: cut_after,
                    torn_bytes,
                })
                .unwrap();
                store.load();
                assert!(store.save(&record(3)).is_err());
                let loaded = CertificateStore::new(store.blocks().inner.clone())
                    .unwrap()
                    .load();
                let got = loaded.record.expect("a whole record survives");
                assert!(
                    got == record(2) || got == record(3),
                    "cut {cut_after}/{torn_bytes}"
                );
                // Only the slot being written differs from before.
                let changed: Vec<usize> = (0..64)
                    .filter(|&b| {
                        before.bytes[b * BLOCK_LEN..(b + 1) * BLOCK_LEN]
                            != store.blocks().inner.bytes[b * BLOCK_LEN..(b + 1) * BLOCK_LEN]
                    })
                    .collect();
                assert!(changed.iter().all(|&b| b < 32), "{changed:?}");
            }
        }
    }

    #[test]
    fn corrupt_slots_are_reported_and_skipped() {
        let mut store = CertificateStore::new(MemoryBlocks::new(64)).unwrap();
        store.load();
        store.save(&record(1)).unwrap();
        store.save(&record(2)).unwrap();
        // Flip one payload byte of the newer slot (slot 1).
        store.blocks_mut().bytes[32 * BLOCK_LEN + 100] ^= 1;
        let loaded = store.load();
        assert_eq!(loaded.record, Some(record(1)));
        assert_eq!(loaded.slots[1], SlotState::Corrupt);
        // The next save goes to the corrupt slot, sparing the whole one.
        store.save(&record(3)).unwrap();
        assert_eq!(store.load().record, Some(record(3)));
        assert_eq!(store.load().slots[0], SlotState::Valid(1));
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let mut store = CertificateStore::new(MemoryBlocks::new(4)).unwrap();
        store.load();
        let mut big = record(1);
        big.chain_pem = "x".repeat(2000);
        assert_eq!(store.save(&big), Err(StoreError::TooLarge));
        assert!(CertificateStore::new(MemoryBlocks::new(3)).is_err());
        assert!(Record::decode(&[]).is_none());
        assert!(Record::decode(&[1, 0xff, 0xff, 0xff, 0xff]).is_none());
    }

    /// A card in memory that records every write it is asked for, and can flip a bit of
    /// what it stores (a card that lies).
    struct Card {
        bytes: Vec<u8>,
        writes: Vec<(u64, usize)>,
        flip_at: Option<usize>,
    }

    impl Card {
        fn new(blocks: usize) -> Self {
            // Not zeros: a region over noise still loads as empty-or-corrupt, never as a
            // record, and what is outside must stay this noise.
            let bytes = (0..blocks * BLOCK_LEN)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3])
                .collect();
            Self {
                bytes,
                writes: Vec::new(),
                flip_at: None,
            }
        }
    }

    impl bramble_hal::block::BlockDevice for Card {
        fn block_count(&self) -> u64 {
            (self.bytes.len() / BLOCK_LEN) as u64
        }
        fn read_blocks(
            &mut self,
            first: u64,
            buffer: &mut [u8],
        ) -> Result<(), bramble_hal::block::BlockError> {
            let start = first as usize * BLOCK_LEN;
            let part = self
                .bytes
                .get(start..start + buffer.len())
                .ok_or(bramble_hal::block::BlockError::OutOfRange)?;
            buffer.copy_from_slice(part);
            Ok(())
        }
    }

    impl BlockWrite for Card {
        fn write_blocks(
            &mut self,
            first: u64,
            data: &[u8],
        ) -> Result<(), bramble_hal::block::BlockError> {
            self.writes.push((first, data.len() / BLOCK_LEN));
            let start = first as usize * BLOCK_LEN;
            let part = self
                .bytes
                .get_mut(start..start + data.len())
                .ok_or(bramble_hal::block::BlockError::OutOfRange)?;
            part.copy_from_slice(data);
            if let Some(at) = self.flip_at {
                self.bytes[at] ^= 1;
            }
            Ok(())
        }
    }

    #[test]
    fn a_card_region_writes_only_its_own_blocks_with_one_command_per_save() {
        const FIRST: u64 = 1025;
        let mut card = Card::new(4096);
        let before = card.bytes.clone();
        {
            let region = CardRegion::new(&mut card, FIRST, 64).unwrap();
            let mut store = CertificateStore::new(region).unwrap();
            assert_eq!(store.load().record, None);
            for n in 1..5 {
                store.save(&record(n)).unwrap();
            }
            assert_eq!(store.load().record, Some(record(4)));
            let counters = store.blocks().counters();
            assert_eq!(counters.writes, 4, "one device write per save");
            assert_eq!(counters.refused, 0);
        }
        for &(first, blocks) in &card.writes {
            assert!(
                first >= FIRST && first + blocks as u64 <= FIRST + 64,
                "{first} + {blocks}"
            );
        }
        let start = FIRST as usize * BLOCK_LEN;
        let end = start + 64 * BLOCK_LEN;
        assert_eq!(card.bytes[..start], before[..start]);
        assert_eq!(card.bytes[end..], before[end..]);
        // A new region over the same blocks (the next boot) finds the newest record.
        let mut store =
            CertificateStore::new(CardRegion::new(&mut card, FIRST, 64).unwrap()).unwrap();
        assert_eq!(store.load().record, Some(record(4)));
    }

    #[test]
    fn a_card_region_refuses_blocks_past_its_end_without_touching_the_card() {
        let mut card = Card::new(256);
        let before = card.bytes.clone();
        {
            let mut region = CardRegion::new(&mut card, 100, 8).unwrap();
            let block = [7u8; BLOCK_LEN];
            let mut out = [0u8; BLOCK_LEN];
            for index in [8, 9, u32::MAX / 512 + 1, u32::MAX - 1, u32::MAX] {
                assert_eq!(region.write_block(index, &block), Err(StoreError::Device));
                assert_eq!(region.read_block(index, &mut out), Err(StoreError::Device));
            }
            // Runs that start inside but end outside, or overflow, or are empty.
            assert_eq!(
                region.write_blocks(7, &[0; 2 * BLOCK_LEN]),
                Err(StoreError::Device)
            );
            assert_eq!(
                region.write_blocks(u32::MAX, &block),
                Err(StoreError::Device)
            );
            assert_eq!(region.write_blocks(0, &[]), Err(StoreError::Device));
            assert_eq!(region.write_blocks(0, &[0; 100]), Err(StoreError::Device));
            assert_eq!(
                region.counters().refused,
                13,
                "the partial block is refused before"
            );
            assert_eq!(region.counters().writes, 0);
            // The last block is inside.
            region.write_block(7, &block).unwrap();
        }
        assert_eq!(card.writes, [(107, 1)]);
        assert_eq!(card.bytes[..107 * BLOCK_LEN], before[..107 * BLOCK_LEN]);
        assert_eq!(card.bytes[108 * BLOCK_LEN..], before[108 * BLOCK_LEN..]);
        // Regions that do not lie on the card are not made at all.
        assert!(CardRegion::new(&mut card, 250, 7).is_none());
        assert!(CardRegion::new(&mut card, u64::MAX, 2).is_none());
        assert!(CardRegion::new(&mut card, 0, 0).is_none());
    }

    #[test]
    fn a_write_that_reads_back_differently_fails_the_save_and_the_old_record_stays() {
        let mut card = Card::new(2048);
        {
            let mut store =
                CertificateStore::new(CardRegion::new(&mut card, 1025, 64).unwrap()).unwrap();
            store.load();
            store.save(&record(1)).unwrap();
        }
        // The card now corrupts a byte of slot 1 on every write.
        card.flip_at = Some((1025 + 32) * BLOCK_LEN + 300);
        let mut store =
            CertificateStore::new(CardRegion::new(&mut card, 1025, 64).unwrap()).unwrap();
        store.load();
        assert_eq!(store.save(&record(2)), Err(StoreError::Device));
        assert_eq!(store.blocks().counters().verify_failures, 1);
        let loaded = store.load();
        assert_eq!(loaded.record, Some(record(1)));
        assert_eq!(loaded.slots[1], SlotState::Corrupt);
    }

    /// A device that loses power after `writes_left` whole block writes, tearing the next
    /// after `torn_bytes` bytes.
    #[derive(Debug)]
    struct Cutting {
        inner: MemoryBlocks,
        writes_left: u32,
        torn_bytes: usize,
    }

    impl BlockStore for Cutting {
        fn block_count(&self) -> u32 {
            self.inner.block_count()
        }
        fn read_block(&mut self, index: u32, out: &mut [u8; BLOCK_LEN]) -> Result<(), StoreError> {
            self.inner.read_block(index, out)
        }
        fn write_block(&mut self, index: u32, data: &[u8; BLOCK_LEN]) -> Result<(), StoreError> {
            if self.writes_left == 0 {
                let mut torn = [0u8; BLOCK_LEN];
                self.inner.read_block(index, &mut torn)?;
                torn[..self.torn_bytes].copy_from_slice(&data[..self.torn_bytes]);
                self.inner.write_block(index, &torn)?;
                return Err(StoreError::Device);
            }
            self.writes_left -= 1;
            self.inner.write_block(index, data)
        }
    }
}
