//! A card in RAM for the writer's and the upload's tests, and signed test sites.

extern crate std;

use crate::manifest::{Action, Manifest};
use crate::writer::Publisher;
use bramble_fat::site_slots::{SlotEntry, SlotRecord, Slots};
use bramble_hal::block::{BLOCK_SIZE, BlockDevice, BlockError, BlockWrite};
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};
use std::vec;
use std::vec::Vec;

pub(crate) const SLOT_BLOCKS: u32 = 2048;
pub(crate) const FIRST: u32 = 100;

/// A card in RAM. After `budget` block writes the power goes: the next write lands only its
/// first `tear` bytes, and nothing after it lands at all.
pub(crate) struct Card {
    pub(crate) bytes: Vec<u8>,
    pub(crate) budget: Option<usize>,
    pub(crate) tear: usize,
    pub(crate) writes: usize,
}

impl Card {
    pub(crate) fn new() -> Card {
        let blocks = FIRST as usize + Slots::partition_sectors(SLOT_BLOCKS) as usize;
        Card {
            bytes: vec![0; blocks * BLOCK_SIZE],
            budget: None,
            tear: 0,
            writes: 0,
        }
    }

    pub(crate) fn block(&self, n: u64) -> &[u8] {
        &self.bytes[n as usize * BLOCK_SIZE..(n as usize + 1) * BLOCK_SIZE]
    }
}

impl BlockDevice for Card {
    fn block_count(&self) -> u64 {
        (self.bytes.len() / BLOCK_SIZE) as u64
    }

    fn read_blocks(&mut self, first: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        let at = first as usize * BLOCK_SIZE;
        let source = self
            .bytes
            .get(at..at + buffer.len())
            .ok_or(BlockError::OutOfRange)?;
        buffer.copy_from_slice(source);
        Ok(())
    }
}

impl BlockWrite for Card {
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), BlockError> {
        for (index, block) in data.chunks(BLOCK_SIZE).enumerate() {
            let at = (first as usize + index) * BLOCK_SIZE;
            match self.budget {
                Some(0) => {
                    self.bytes[at..at + self.tear].copy_from_slice(&block[..self.tear]);
                    self.budget = Some(usize::MAX);
                    return Err(BlockError::WriteFailed);
                }
                Some(usize::MAX) => return Err(BlockError::WriteFailed),
                Some(left) => self.budget = Some(left - 1),
                None => {}
            }
            self.writes += 1;
            self.bytes[at..at + BLOCK_SIZE].copy_from_slice(block);
        }
        Ok(())
    }
}

pub(crate) fn key() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}

/// A site image as the writer checks one: magic, index checksum, image length; noise after.
pub(crate) fn site(len: usize, seed: u8) -> Vec<u8> {
    let mut state = u32::from(seed) | 0x100;
    let mut bytes: Vec<u8> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state as u8
        })
        .collect();
    bytes[..8].copy_from_slice(b"BRMSITE\0");
    bytes[20..24].copy_from_slice(&(0xC0DE_0000 + u32::from(seed)).to_le_bytes());
    bytes[60..64].copy_from_slice(&(len as u32).to_le_bytes());
    bytes
}

pub(crate) fn sha(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A card as `bramble image` leaves it: `old` in slot A, live, version 0.
pub(crate) fn card_with(old: &[u8]) -> (Card, Publisher) {
    let mut card = Card::new();
    let slots = Slots {
        first_sector: FIRST,
        slot_blocks: SLOT_BLOCKS,
        publish_key: Some(key().verifying_key().to_bytes()),
    };
    let record = SlotRecord {
        sequence: 1,
        live: 0,
        accepted: 0,
        slots: [
            SlotEntry {
                valid: true,
                version: 0,
                len: old.len() as u32,
                index_checksum: 0,
                sha256: sha(old),
            },
            SlotEntry::default(),
        ],
    };
    let at = slots.slot_block(0) as usize * BLOCK_SIZE;
    card.bytes[at..at + old.len()].copy_from_slice(old);
    let at = slots.record_block(0) as usize * BLOCK_SIZE;
    card.bytes[at..at + BLOCK_SIZE].copy_from_slice(&record.encode());
    (card, Publisher::new(slots, record, 1))
}

pub(crate) fn signed(
    action: Action,
    version: u64,
    image: &[u8],
    host: &str,
) -> ([u8; 128], [u8; 64]) {
    let len = if action == Action::Publish {
        image.len() as u32
    } else {
        0
    };
    let manifest = Manifest::new(action, version, len, sha(image), host)
        .unwrap()
        .encode();
    (manifest, key().sign(&manifest).to_bytes())
}

/// What a boot would serve: the newest whole record's first slot whose bytes hash to what
/// the record says (the kernel checks the index and each segment; this is stricter).
pub(crate) fn boot(card: &Card, slots: &Slots) -> Vec<u8> {
    let (record, _) = SlotRecord::current([
        card.block(slots.record_block(0)),
        card.block(slots.record_block(1)),
    ])
    .expect("a whole record copy");
    for slot in record.boot_order() {
        let entry = record.slots[usize::from(slot)];
        let at = slots.slot_block(slot) as usize * BLOCK_SIZE;
        let bytes = &card.bytes[at..at + entry.len as usize];
        if sha(bytes) == entry.sha256 {
            return bytes.to_vec();
        }
    }
    panic!("no slot to serve");
}
