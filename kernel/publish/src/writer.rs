//! The card-writing service: a signed site into the idle slot, then the switch.
//!
//! A publish, as the card sees it (`bramble_fat::site_slots` has the record's format):
//!
//! 1. [`Publisher::begin`]: the manifest is checked (signature by the card's key, host name,
//!    a version above every one accepted, a length the slot holds). If the record calls the
//!    idle slot whole, one record save marks it invalid first, so that a power cut while its
//!    blocks change can never leave it named whole.
//! 2. [`Publisher::write`]: the body arrives in order, in pieces of any size; whole blocks go
//!    to the slot as they fill, the tail waits in a 512-byte buffer, and the SHA-256 runs as
//!    the bytes pass. A dropped connection resumes with the next piece at
//!    [`Publisher::received`] (the state lives in RAM until [`Publisher::abandon`]).
//! 3. [`Publisher::finish`]: all bytes there, their hash the signed one; the slot is read back
//!    from the card and hashed again; then one record save names it live, with its version,
//!    length, index checksum and hash, and raises the accepted version.
//!
//! A cut before the last save leaves the old site live; a cut during it leaves the copy
//! being written torn, and the reader takes the other one (the state before). So every boot
//! serves one whole site, old or new. A publish costs the card `ceil(len / 512)` block writes
//! for the body and one or two for the record; a rollback, one.

use crate::manifest::{Action, Manifest, ManifestError};
use bramble_fat::site_slots::{SlotEntry, SlotRecord, Slots};
use bramble_hal::block::{BLOCK_SIZE, BlockDevice, BlockError, BlockWrite};
use core::fmt;
use sha2::{Digest, Sha256};

/// Why a publish or rollback was refused or failed; the live site is served either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// The manifest or its signature was refused.
    Manifest(ManifestError),
    /// The manifest's version is not above the highest accepted.
    OldVersion {
        /// The manifest's.
        version: u64,
        /// The highest accepted so far.
        accepted: u64,
    },
    /// The image is larger than a slot.
    TooLarge {
        /// The manifest's length.
        len: u32,
        /// A slot's bytes.
        slot: u64,
    },
    /// Another upload is under way.
    Busy,
    /// No upload is under way (a body or a finish without a manifest first).
    NoUpload,
    /// A piece did not start where the received bytes end.
    WrongOffset {
        /// Where it must start.
        expected: u32,
    },
    /// More bytes than the manifest's length.
    TooLong,
    /// Fewer bytes than the manifest's length at the finish.
    Truncated {
        /// Bytes received.
        received: u32,
        /// Bytes the manifest names.
        expected: u32,
    },
    /// The bytes received, or read back from the card, do not hash to the signed SHA-256.
    Corrupt,
    /// The image's header is not a site image's.
    NotASite,
    /// A rollback names a slot that is not whole or holds another image.
    NothingToRollBack,
    /// The card refused a read or a write.
    Card(BlockError),
}

impl From<ManifestError> for PublishError {
    fn from(error: ManifestError) -> Self {
        PublishError::Manifest(error)
    }
}

impl PublishError {
    /// The HTTP status for the publisher.
    pub fn status(&self) -> u16 {
        match self {
            PublishError::Manifest(ManifestError::Malformed) => 400,
            PublishError::Manifest(ManifestError::PublishingOff) => 403,
            PublishError::Manifest(ManifestError::BadSignature) => 403,
            PublishError::Manifest(ManifestError::WrongHost) => 421,
            PublishError::OldVersion { .. } => 409,
            PublishError::TooLarge { .. } => 413,
            PublishError::Busy => 409,
            PublishError::NoUpload => 409,
            PublishError::WrongOffset { .. } => 416,
            PublishError::TooLong => 413,
            PublishError::Truncated { .. } => 400,
            PublishError::Corrupt => 422,
            PublishError::NotASite => 422,
            PublishError::NothingToRollBack => 409,
            PublishError::Card(_) => 503,
        }
    }

    /// A short machine-readable code for the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            PublishError::Manifest(ManifestError::Malformed) => "bad-manifest",
            PublishError::Manifest(ManifestError::PublishingOff) => "publishing-off",
            PublishError::Manifest(ManifestError::BadSignature) => "bad-signature",
            PublishError::Manifest(ManifestError::WrongHost) => "wrong-host",
            PublishError::OldVersion { .. } => "old-version",
            PublishError::TooLarge { .. } => "too-large",
            PublishError::Busy => "busy",
            PublishError::NoUpload => "no-upload",
            PublishError::WrongOffset { .. } => "wrong-offset",
            PublishError::TooLong => "too-long",
            PublishError::Truncated { .. } => "truncated",
            PublishError::Corrupt => "corrupt",
            PublishError::NotASite => "not-a-site",
            PublishError::NothingToRollBack => "nothing-to-roll-back",
            PublishError::Card(_) => "card-error",
        }
    }

    /// The JSON body: `{"error":"CODE","message":"..."}` (the message has no quotes or
    /// backslashes to escape).
    pub fn write_json(&self, out: &mut impl fmt::Write) -> fmt::Result {
        write!(
            out,
            "{{\"error\":\"{}\",\"message\":\"{}\"}}",
            self.code(),
            self
        )
    }
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PublishError::Manifest(ManifestError::Malformed) => {
                f.write_str("the manifest is not one `bramble publish` makes")
            }
            PublishError::Manifest(ManifestError::PublishingOff) => f.write_str(
                "publishing is off: the card has no publish key (bramble image --publish-key)",
            ),
            PublishError::Manifest(ManifestError::BadSignature) => {
                f.write_str("the signature is not the card's publish key's")
            }
            PublishError::Manifest(ManifestError::WrongHost) => {
                f.write_str("the manifest names another host")
            }
            PublishError::OldVersion { version, accepted } => write!(
                f,
                "version {version} is not above {accepted}, the highest this board accepted"
            ),
            PublishError::TooLarge { len, slot } => {
                write!(f, "the image is {len} bytes; a slot holds {slot}")
            }
            PublishError::Busy => f.write_str("another upload is under way"),
            PublishError::NoUpload => f.write_str("no upload is under way; send the manifest"),
            PublishError::WrongOffset { expected } => {
                write!(f, "the body must continue at byte {expected}")
            }
            PublishError::TooLong => f.write_str("more bytes than the manifest's length"),
            PublishError::Truncated { received, expected } => write!(
                f,
                "the body ended after {received} of {expected} bytes; resume from {received}"
            ),
            PublishError::Corrupt => {
                f.write_str("the image does not hash to the signed SHA-256; nothing switched")
            }
            PublishError::NotASite => f.write_str("the image is not a Bramble site image"),
            PublishError::NothingToRollBack => {
                f.write_str("the other slot does not hold the image the rollback names")
            }
            PublishError::Card(error) => write!(f, "SD card: {error}"),
        }
    }
}

/// An upload under way.
struct Upload {
    manifest: Manifest,
    slot: u8,
    received: u32,
    hasher: Sha256,
    tail: [u8; BLOCK_SIZE],
    tail_len: usize,
    /// Blocks of the slot written so far.
    blocks: u32,
}

/// The card-writing service over the slot record of `slots`.
pub struct Publisher {
    slots: Slots,
    record: SlotRecord,
    next_copy: usize,
    upload: Option<Upload>,
    /// Card blocks written since it was made (body and record).
    blocks_written: u64,
}

impl Publisher {
    /// The service for the card's `slots` with its current `record` (as boot read it) and the
    /// record copy the next save goes to.
    pub fn new(slots: Slots, record: SlotRecord, next_copy: usize) -> Publisher {
        Publisher {
            slots,
            record,
            next_copy: next_copy & 1,
            upload: None,
            blocks_written: 0,
        }
    }

    /// The record as last saved.
    pub fn record(&self) -> &SlotRecord {
        &self.record
    }

    /// The slots.
    pub fn slots(&self) -> &Slots {
        &self.slots
    }

    /// Card blocks written so far.
    pub fn blocks_written(&self) -> u64 {
        self.blocks_written
    }

    /// The upload under way: its manifest and the bytes received (where a resumed body
    /// continues).
    pub fn received(&self) -> Option<(&Manifest, u32)> {
        self.upload
            .as_ref()
            .map(|upload| (&upload.manifest, upload.received))
    }

    /// Drops the upload under way (a stalled or refused one): its slot stays marked invalid.
    pub fn abandon(&mut self) {
        self.upload = None;
    }

    fn save<D: BlockWrite>(
        &mut self,
        card: &mut D,
        record: SlotRecord,
    ) -> Result<(), PublishError> {
        let block = record.encode();
        self.blocks_written += 1;
        card.write_blocks(self.slots.record_block(self.next_copy), &block)
            .map_err(PublishError::Card)?;
        self.record = record;
        self.next_copy ^= 1;
        Ok(())
    }

    fn check_version(&self, manifest: &Manifest) -> Result<(), PublishError> {
        if manifest.version <= self.record.accepted {
            return Err(PublishError::OldVersion {
                version: manifest.version,
                accepted: self.record.accepted,
            });
        }
        Ok(())
    }

    /// Checks a publish manifest (`bytes` and its `signature`, for this board's `hostname`)
    /// and starts its upload, or continues the same one; returns where the body continues.
    pub fn begin<D: BlockWrite>(
        &mut self,
        card: &mut D,
        bytes: &[u8],
        signature: &[u8],
        hostname: &str,
    ) -> Result<u32, PublishError> {
        let manifest =
            Manifest::verify(bytes, signature, self.slots.publish_key.as_ref(), hostname)?;
        if manifest.action != Action::Publish {
            return Err(PublishError::Manifest(ManifestError::Malformed));
        }
        if let Some(upload) = &self.upload {
            return if upload.manifest == manifest {
                Ok(upload.received)
            } else {
                Err(PublishError::Busy)
            };
        }
        self.check_version(&manifest)?;
        if u64::from(manifest.len) > self.slots.slot_bytes() {
            return Err(PublishError::TooLarge {
                len: manifest.len,
                slot: self.slots.slot_bytes(),
            });
        }
        let slot = self.record.idle();
        if self.record.slots[usize::from(slot)].valid {
            let marked = self
                .record
                .next(|record| record.slots[usize::from(slot)].valid = false);
            self.save(card, marked)?;
        }
        self.upload = Some(Upload {
            manifest,
            slot,
            received: 0,
            hasher: Sha256::new(),
            tail: [0; BLOCK_SIZE],
            tail_len: 0,
            blocks: 0,
        });
        Ok(0)
    }

    /// Takes the body's bytes from `offset` (which must be where the received ones end);
    /// returns the bytes received so far. A card error abandons the upload.
    pub fn write<D: BlockWrite>(
        &mut self,
        card: &mut D,
        offset: u32,
        mut data: &[u8],
    ) -> Result<u32, PublishError> {
        let slot_start;
        {
            let upload = self.upload.as_mut().ok_or(PublishError::NoUpload)?;
            if offset != upload.received {
                return Err(PublishError::WrongOffset {
                    expected: upload.received,
                });
            }
            let end = u64::from(upload.received) + data.len() as u64;
            if end > u64::from(upload.manifest.len) {
                return Err(PublishError::TooLong);
            }
            upload.hasher.update(data);
            upload.received = end as u32; // at most the manifest's u32 length
            slot_start = self.slots.slot_block(upload.slot);
        }
        let result = (|| {
            while !data.is_empty() {
                let upload = self.upload.as_mut().ok_or(PublishError::NoUpload)?;
                if upload.tail_len == 0 && data.len() >= BLOCK_SIZE {
                    let whole = data.len() / BLOCK_SIZE * BLOCK_SIZE;
                    let block = slot_start + u64::from(upload.blocks);
                    card.write_blocks(block, &data[..whole])
                        .map_err(PublishError::Card)?;
                    upload.blocks += (whole / BLOCK_SIZE) as u32;
                    self.blocks_written += (whole / BLOCK_SIZE) as u64;
                    data = &data[whole..];
                    continue;
                }
                let take = (BLOCK_SIZE - upload.tail_len).min(data.len());
                upload.tail[upload.tail_len..upload.tail_len + take].copy_from_slice(&data[..take]);
                upload.tail_len += take;
                data = &data[take..];
                if upload.tail_len == BLOCK_SIZE {
                    card.write_blocks(slot_start + u64::from(upload.blocks), &upload.tail)
                        .map_err(PublishError::Card)?;
                    upload.blocks += 1;
                    upload.tail_len = 0;
                    self.blocks_written += 1;
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(self.upload.as_ref().map_or(0, |upload| upload.received)),
            Err(error) => {
                self.upload = None;
                Err(error)
            }
        }
    }

    /// Ends the upload: every byte there and hashing to the signed SHA-256, the slot read
    /// back (through `scratch`, whole blocks) and hashed again, then the record switched to
    /// it. Returns the new record. On any error the old site stays live and the upload is
    /// dropped (except [`PublishError::Truncated`], which keeps it for a resume).
    pub fn finish<D: BlockWrite>(
        &mut self,
        card: &mut D,
        scratch: &mut [u8],
    ) -> Result<SlotRecord, PublishError> {
        let upload = self.upload.as_ref().ok_or(PublishError::NoUpload)?;
        if upload.received != upload.manifest.len {
            return Err(PublishError::Truncated {
                received: upload.received,
                expected: upload.manifest.len,
            });
        }
        let Some(mut upload) = self.upload.take() else {
            return Err(PublishError::NoUpload);
        };
        let slot_start = self.slots.slot_block(upload.slot);
        if upload.tail_len > 0 {
            upload.tail[upload.tail_len..].fill(0);
            card.write_blocks(slot_start + u64::from(upload.blocks), &upload.tail)
                .map_err(PublishError::Card)?;
            self.blocks_written += 1;
        }
        let sha256: [u8; 32] = upload.hasher.finalize().into();
        if sha256 != upload.manifest.sha256 {
            return Err(PublishError::Corrupt);
        }
        let index_checksum = read_back(card, slot_start, upload.manifest.len, scratch, &sha256)?;
        let slot = upload.slot;
        let manifest = upload.manifest;
        let done = self.record.next(|record| {
            record.slots[usize::from(slot)] = SlotEntry {
                valid: true,
                version: manifest.version,
                len: manifest.len,
                index_checksum,
                sha256,
            };
            record.live = slot;
            record.accepted = manifest.version;
        });
        self.save(card, done)?;
        Ok(self.record)
    }

    /// A signed rollback: the other slot, if the record calls it whole and it holds the image
    /// the manifest names, becomes live again. Returns the new record.
    pub fn rollback<D: BlockWrite>(
        &mut self,
        card: &mut D,
        bytes: &[u8],
        signature: &[u8],
        hostname: &str,
    ) -> Result<SlotRecord, PublishError> {
        let manifest =
            Manifest::verify(bytes, signature, self.slots.publish_key.as_ref(), hostname)?;
        if manifest.action != Action::Rollback {
            return Err(PublishError::Manifest(ManifestError::Malformed));
        }
        if self.upload.is_some() {
            return Err(PublishError::Busy);
        }
        self.check_version(&manifest)?;
        let other = self.record.idle();
        let entry = self.record.slots[usize::from(other)];
        if !entry.valid || entry.sha256 != manifest.sha256 {
            return Err(PublishError::NothingToRollBack);
        }
        let back = self.record.next(|record| {
            record.live = other;
            record.accepted = manifest.version;
        });
        self.save(card, back)?;
        Ok(self.record)
    }
}

/// Reads `len` bytes of the slot from `first_block` back through `scratch` and checks their
/// SHA-256 against `sha256` and their header against a site image's; returns the index
/// checksum from the header.
fn read_back<D: BlockDevice>(
    card: &mut D,
    first_block: u64,
    len: u32,
    scratch: &mut [u8],
    sha256: &[u8; 32],
) -> Result<u32, PublishError> {
    let chunk = scratch.len() / BLOCK_SIZE * BLOCK_SIZE;
    if chunk == 0 {
        return Err(PublishError::Card(BlockError::BadBuffer));
    }
    let mut hasher = Sha256::new();
    let mut left = len as usize;
    let mut block = first_block;
    let mut index_checksum = None;
    while left > 0 {
        let bytes = left.next_multiple_of(BLOCK_SIZE).min(chunk);
        card.read_blocks(block, &mut scratch[..bytes])
            .map_err(PublishError::Card)?;
        if index_checksum.is_none() {
            index_checksum = Some(site_header_checksum(&scratch[..bytes], len)?);
        }
        let take = bytes.min(left);
        hasher.update(&scratch[..take]);
        left -= take;
        block += (bytes / BLOCK_SIZE) as u64;
    }
    if <[u8; 32]>::from(hasher.finalize()) != *sha256 {
        return Err(PublishError::Corrupt);
    }
    index_checksum.ok_or(PublishError::NotASite)
}

/// The index checksum from a site image's first bytes, if they are a site header whose image
/// length is `len`.
fn site_header_checksum(first: &[u8], len: u32) -> Result<u32, PublishError> {
    const MAGIC: &[u8; 8] = b"BRMSITE\0";
    let le32 = |at: usize| {
        first
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if first.get(..8) != Some(&MAGIC[..]) || le32(60) != Some(len) {
        return Err(PublishError::NotASite);
    }
    le32(20).ok_or(PublishError::NotASite)
}

#[cfg(test)]
mod tests;
