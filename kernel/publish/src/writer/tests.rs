//! The writer over a card in RAM that can lose power after any block write.

extern crate std;

use super::*;
use bramble_fat::site_slots::{SlotEntry, SlotRecord, Slots};
use ed25519_dalek::{Signer, SigningKey};
use std::vec;
use std::vec::Vec;

const SLOT_BLOCKS: u32 = 2048;
const FIRST: u32 = 100;

/// A card in RAM. After `budget` block writes the power goes: the next write lands only its
/// first `tear` bytes, and nothing after it lands at all.
struct Card {
    bytes: Vec<u8>,
    budget: Option<usize>,
    tear: usize,
    writes: usize,
}

impl Card {
    fn new() -> Card {
        let blocks = FIRST as usize + Slots::partition_sectors(SLOT_BLOCKS) as usize;
        Card {
            bytes: vec![0; blocks * BLOCK_SIZE],
            budget: None,
            tear: 0,
            writes: 0,
        }
    }

    fn block(&self, n: u64) -> &[u8] {
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

fn key() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}

/// A site image as the writer checks one: magic, index checksum, image length; noise after.
fn site(len: usize, seed: u8) -> Vec<u8> {
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

fn sha(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A card as `bramble image` leaves it: `old` in slot A, live, version 0.
fn card_with(old: &[u8]) -> (Card, Publisher) {
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

fn signed(action: Action, version: u64, image: &[u8], host: &str) -> ([u8; 128], [u8; 64]) {
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
fn boot(card: &Card, slots: &Slots) -> Vec<u8> {
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

fn publish(
    card: &mut Card,
    publisher: &mut Publisher,
    image: &[u8],
    version: u64,
    piece: usize,
) -> Result<SlotRecord, PublishError> {
    let (manifest, signature) = signed(Action::Publish, version, image, "garden");
    let mut offset = publisher.begin(card, &manifest, &signature, "garden")?;
    for chunk in image.chunks(piece) {
        offset = publisher.write(card, offset, chunk)?;
    }
    let mut scratch = vec![0u8; 8 * BLOCK_SIZE];
    publisher.finish(card, &mut scratch)
}

#[test]
fn a_publish_writes_the_idle_slot_switches_and_a_rollback_switches_back() {
    let old = site(3000, 1);
    let new = site(70_000, 2);
    let (mut card, mut publisher) = card_with(&old);
    let slots = *publisher.slots();
    let record = publish(&mut card, &mut publisher, &new, 5, 1000).unwrap();
    assert_eq!((record.live, record.accepted), (1, 5));
    assert_eq!(record.slots[1].index_checksum, 0xC0DE_0002);
    assert_eq!(boot(&card, &slots), new);
    // Body blocks and one record save (slot B was empty, so no "invalid" save first).
    assert_eq!(card.writes, 70_000usize.div_ceil(BLOCK_SIZE) + 1);
    assert_eq!(publisher.blocks_written(), card.writes as u64);

    // A second publish goes to slot A, after marking it invalid: two record saves.
    let newer = site(5000, 3);
    let before = card.writes;
    publish(&mut card, &mut publisher, &newer, 6, 777).unwrap();
    assert_eq!(card.writes - before, 5000usize.div_ceil(BLOCK_SIZE) + 2);
    assert_eq!(boot(&card, &slots), newer);

    // Rollback to slot B (the previous site), signed, one block.
    let (manifest, signature) = signed(Action::Rollback, 7, &new, "garden");
    let before = card.writes;
    let record = publisher
        .rollback(&mut card, &manifest, &signature, "garden")
        .unwrap();
    assert_eq!((record.live, card.writes - before), (1, 1));
    assert_eq!(boot(&card, &slots), new);
    // The same rollback again is old; one naming a hash the other slot lacks is refused.
    assert_eq!(
        publisher.rollback(&mut card, &manifest, &signature, "garden"),
        Err(PublishError::OldVersion {
            version: 7,
            accepted: 7
        })
    );
    let (manifest, signature) = signed(Action::Rollback, 8, &old, "garden");
    assert_eq!(
        publisher.rollback(&mut card, &manifest, &signature, "garden"),
        Err(PublishError::NothingToRollBack)
    );
}

#[test]
fn every_bad_case_is_refused_and_the_live_site_stays() {
    let old = site(3000, 1);
    let new = site(9000, 2);
    let (mut card, mut publisher) = card_with(&old);
    let slots = *publisher.slots();
    let (manifest, signature) = signed(Action::Publish, 5, &new, "garden");
    let refuse = |publisher: &mut Publisher, card: &mut Card, m: &[u8], s: &[u8], host: &str| {
        publisher.begin(card, m, s, host).unwrap_err()
    };
    // Another key.
    let other = SigningKey::from_bytes(&[9; 32]).sign(&manifest).to_bytes();
    assert_eq!(
        refuse(&mut publisher, &mut card, &manifest, &other, "garden"),
        PublishError::Manifest(ManifestError::BadSignature)
    );
    // Another host.
    assert_eq!(
        refuse(&mut publisher, &mut card, &manifest, &signature, "orchard"),
        PublishError::Manifest(ManifestError::WrongHost)
    );
    // Version 0 is not above the accepted 0.
    let (old_manifest, old_signature) = signed(Action::Publish, 0, &new, "garden");
    assert_eq!(
        refuse(
            &mut publisher,
            &mut card,
            &old_manifest,
            &old_signature,
            "garden"
        ),
        PublishError::OldVersion {
            version: 0,
            accepted: 0
        }
    );
    // Larger than a slot.
    let huge = Manifest::new(Action::Publish, 9, SLOT_BLOCKS * 512 + 1, [0; 32], "garden")
        .unwrap()
        .encode();
    let huge_signature = key().sign(&huge).to_bytes();
    assert!(matches!(
        refuse(&mut publisher, &mut card, &huge, &huge_signature, "garden"),
        PublishError::TooLarge { .. }
    ));
    // No key on the card: publishing off.
    let mut keyless = Publisher::new(
        Slots {
            publish_key: None,
            ..slots
        },
        *publisher.record(),
        1,
    );
    assert_eq!(
        refuse(&mut keyless, &mut card, &manifest, &signature, "garden"),
        PublishError::Manifest(ManifestError::PublishingOff)
    );
    assert_eq!(card.writes, 0, "nothing refused wrote to the card");

    // Truncated: the finish says where to resume, and a resume from there completes.
    assert_eq!(
        publisher.begin(&mut card, &manifest, &signature, "garden"),
        Ok(0)
    );
    publisher.write(&mut card, 0, &new[..4000]).unwrap();
    let mut scratch = vec![0u8; 4096];
    assert_eq!(
        publisher.finish(&mut card, &mut scratch),
        Err(PublishError::Truncated {
            received: 4000,
            expected: 9000
        })
    );
    assert_eq!(
        publisher.write(&mut card, 3000, &new[3000..]),
        Err(PublishError::WrongOffset { expected: 4000 })
    );
    assert_eq!(
        publisher.begin(&mut card, &manifest, &signature, "garden"),
        Ok(4000)
    );
    // Another manifest while this one is under way.
    let (second, second_signature) = signed(Action::Publish, 6, &new, "garden");
    assert_eq!(
        publisher.begin(&mut card, &second, &second_signature, "garden"),
        Err(PublishError::Busy)
    );
    assert_eq!(
        publisher.write(&mut card, 4000, &[0; 6000]),
        Err(PublishError::TooLong)
    );
    // A corrupted body (one byte changed in transit): refused at the finish.
    let mut corrupted = new[4000..].to_vec();
    corrupted[100] ^= 1;
    publisher.write(&mut card, 4000, &corrupted).unwrap();
    assert_eq!(
        publisher.finish(&mut card, &mut scratch),
        Err(PublishError::Corrupt)
    );
    assert_eq!(boot(&card, &slots), old);
    assert_eq!(
        publisher.record().accepted,
        0,
        "a failed publish does not use up its version"
    );
    // Not a site image (signed and whole, but no site header).
    let mut not_site = new.clone();
    not_site[0] = b'X';
    assert_eq!(
        publish(&mut card, &mut publisher, &not_site, 5, 4096),
        Err(PublishError::NotASite)
    );
    // A card error abandons the upload; the old site stays.
    card.budget = Some(3);
    assert_eq!(
        publish(&mut card, &mut publisher, &new, 5, 4096),
        Err(PublishError::Card(BlockError::WriteFailed))
    );
    assert!(publisher.received().is_none());
    card.budget = None;
    assert_eq!(boot(&card, &slots), old);
    // Then the same manifest publishes.
    publish(&mut card, &mut publisher, &new, 5, 4096).unwrap();
    assert_eq!(boot(&card, &slots), new);
}

/// The power cut: after every number of block writes a publish (and a second one, which must
/// first mark the slot it reuses invalid) makes, with the cut block torn at a few lengths,
/// the next boot serves the old site or the new one, byte for byte.
#[test]
fn a_power_cut_after_any_block_write_leaves_the_old_or_the_new_site_whole() {
    let first = site(6000, 1);
    let second = site(7000, 2);
    let third = site(2000, 3);
    let (card, mut publisher) = card_with(&first);
    let slots = *publisher.slots();
    let mut reference = card;
    publish(&mut reference, &mut publisher, &second, 1, 1500).unwrap();
    let after_second = *publisher.record();
    let writes_third = 2000usize.div_ceil(BLOCK_SIZE) + 2;
    let mut cuts = 0;
    for (before, image, version, writes, record) in [
        (
            None,
            &second,
            1u64,
            7000usize.div_ceil(BLOCK_SIZE) + 1,
            None,
        ),
        (Some(&first), &third, 2u64, writes_third, Some(after_second)),
    ] {
        for budget in 0..=writes {
            for tear in [0, 1, 300, 511] {
                let (mut card, mut publisher) = card_with(&first);
                if let Some(record) = record {
                    // Start from the state after the second publish.
                    publish(&mut card, &mut publisher, &second, 1, 1500).unwrap();
                    assert_eq!(*publisher.record(), record);
                }
                let old = if before.is_some() {
                    second.clone()
                } else {
                    first.clone()
                };
                card.budget = Some(budget);
                card.tear = tear;
                let result = publish(&mut card, &mut publisher, image, version, 1500);
                let served = boot(&card, &slots);
                if result.is_ok() {
                    assert_eq!(&served, image, "finished");
                } else {
                    assert!(
                        served == old || &served == image,
                        "cut after {budget} writes, {tear} bytes torn"
                    );
                }
                if budget == writes {
                    assert!(result.is_ok(), "{writes} writes are enough");
                }
                cuts += 1;
            }
        }
    }
    assert_eq!(cuts, 4 * (16 + 7), "every cut point, four tears each");
}
