//! The writer over a card in RAM that can lose power after any block write.

extern crate std;

use super::*;
use bramble_fat::site_slots::{SlotRecord, Slots};
use ed25519_dalek::{Signer, SigningKey};
use std::vec;

use crate::test_card::*;
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
