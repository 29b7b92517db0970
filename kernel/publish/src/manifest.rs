//! The publish manifest: what `bramble publish` signs, 128 bytes, little-endian.
//!
//! ```text
//! 0..8     magic "BRPUBMF1"
//! 8        action: 1 publish, 2 rollback
//! 9        host name length (1..=63)
//! 10..16   zero
//! 16..24   version: must be higher than every version the board accepted before
//! 24..28   image length in bytes (0 for a rollback)
//! 28..32   zero
//! 32..64   SHA-256 of the image (for a rollback: of the image to go back to)
//! 64..127  host name (the board's `hostname`, lower case), zero-padded
//! 127      zero
//! ```
//!
//! The signature is Ed25519 (RFC 8032, checked strictly: no small-order keys or malleable
//! signatures) over these 128 bytes; the magic keeps a signature over anything else from
//! passing for one. The version makes every signed manifest good once: an old one replayed,
//! or a rollback replayed, is refused as old.

/// Bytes of a manifest.
pub const MANIFEST_LEN: usize = 128;
/// Bytes of its signature.
pub const SIGNATURE_LEN: usize = 64;
/// The manifest's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"BRPUBMF1";
/// Longest host name a manifest carries.
pub const MAX_HOST_LEN: usize = 63;

/// What the owner asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write the image into the idle slot and serve it.
    Publish,
    /// Serve the other slot again (it must hold the image with the manifest's hash).
    Rollback,
}

/// A decoded manifest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Publish or rollback.
    pub action: Action,
    /// Higher than any accepted before.
    pub version: u64,
    /// The image's length (0 for a rollback).
    pub len: u32,
    /// The image's SHA-256.
    pub sha256: [u8; 32],
    host: [u8; MAX_HOST_LEN],
    host_len: u8,
}

/// Why a manifest is refused before anything is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestError {
    /// Not 128 bytes, a bad magic, action or host name, or non-zero padding.
    Malformed,
    /// The card has no publish key: publishing is off.
    PublishingOff,
    /// The signature is not the card's key's over these bytes.
    BadSignature,
    /// The manifest names another host.
    WrongHost,
}

impl Manifest {
    /// A manifest for `host` (at most 63 bytes of letters, digits, `-` and `.`; compared
    /// without regard to case); `None` for a bad host name.
    pub fn new(
        action: Action,
        version: u64,
        len: u32,
        sha256: [u8; 32],
        host: &str,
    ) -> Option<Self> {
        let bytes = host.as_bytes();
        if bytes.is_empty()
            || bytes.len() > MAX_HOST_LEN
            || !bytes.iter().all(|&b| valid_host_byte(b))
        {
            return None;
        }
        let mut stored = [0u8; MAX_HOST_LEN];
        for (out, byte) in stored.iter_mut().zip(bytes) {
            *out = byte.to_ascii_lowercase();
        }
        Some(Manifest {
            action,
            version,
            len,
            sha256,
            host: stored,
            host_len: bytes.len() as u8,
        })
    }

    /// The host name, lower case.
    pub fn host(&self) -> &str {
        // Only ASCII bytes are ever stored (new and decode check them).
        core::str::from_utf8(&self.host[..usize::from(self.host_len)]).unwrap_or("")
    }

    /// The 128 bytes that are signed.
    pub fn encode(&self) -> [u8; MANIFEST_LEN] {
        let mut out = [0u8; MANIFEST_LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8] = match self.action {
            Action::Publish => 1,
            Action::Rollback => 2,
        };
        out[9] = self.host_len;
        out[16..24].copy_from_slice(&self.version.to_le_bytes());
        out[24..28].copy_from_slice(&self.len.to_le_bytes());
        out[32..64].copy_from_slice(&self.sha256);
        out[64..64 + MAX_HOST_LEN].copy_from_slice(&self.host);
        out
    }

    /// Decodes and checks the form of `bytes` (not the signature).
    pub fn decode(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let bytes: &[u8; MANIFEST_LEN] = bytes.try_into().map_err(|_| ManifestError::Malformed)?;
        if bytes[..8] != MAGIC {
            return Err(ManifestError::Malformed);
        }
        let action = match bytes[8] {
            1 => Action::Publish,
            2 => Action::Rollback,
            _ => return Err(ManifestError::Malformed),
        };
        let host_len = usize::from(bytes[9]);
        let zero = |range: core::ops::Range<usize>| bytes[range].iter().all(|&b| b == 0);
        if !(1..=MAX_HOST_LEN).contains(&host_len)
            || !zero(10..16)
            || !zero(28..32)
            || !zero(64 + host_len..MANIFEST_LEN)
        {
            return Err(ManifestError::Malformed);
        }
        let host = core::str::from_utf8(&bytes[64..64 + host_len])
            .map_err(|_| ManifestError::Malformed)?;
        let mut le = [0u8; 8];
        le.copy_from_slice(&bytes[16..24]);
        let version = u64::from_le_bytes(le);
        let len = u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]);
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(&bytes[32..64]);
        let manifest =
            Manifest::new(action, version, len, sha256, host).ok_or(ManifestError::Malformed)?;
        // Lower case only: one host name has one encoding, so one signature.
        if manifest.encode() != *bytes {
            return Err(ManifestError::Malformed);
        }
        if action == Action::Rollback && len != 0 {
            return Err(ManifestError::Malformed);
        }
        Ok(manifest)
    }

    /// Decodes `bytes` and checks `signature` with the card's `key` (`None`: publishing off)
    /// and the host name against `hostname` (the board's, any case).
    pub fn verify(
        bytes: &[u8],
        signature: &[u8],
        key: Option<&[u8; 32]>,
        hostname: &str,
    ) -> Result<Manifest, ManifestError> {
        let key = key.ok_or(ManifestError::PublishingOff)?;
        let manifest = Manifest::decode(bytes)?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(key)
            .map_err(|_| ManifestError::BadSignature)?;
        let signature = ed25519_dalek::Signature::from_slice(signature)
            .map_err(|_| ManifestError::BadSignature)?;
        key.verify_strict(bytes, &signature)
            .map_err(|_| ManifestError::BadSignature)?;
        if !manifest.host().eq_ignore_ascii_case(hostname) {
            return Err(ManifestError::WrongHost);
        }
        Ok(manifest)
    }
}

fn valid_host_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'.'
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn a_signed_manifest_verifies_and_round_trips() {
        let manifest = Manifest::new(Action::Publish, 42, 1000, [5; 32], "Garden.example").unwrap();
        assert_eq!(manifest.host(), "garden.example");
        let bytes = manifest.encode();
        assert_eq!(Manifest::decode(&bytes), Ok(manifest));
        let signature = key(1).sign(&bytes).to_bytes();
        let public = key(1).verifying_key().to_bytes();
        assert_eq!(
            Manifest::verify(&bytes, &signature, Some(&public), "GARDEN.example"),
            Ok(manifest)
        );
    }

    #[test]
    fn another_key_a_changed_byte_another_host_or_no_key_is_refused() {
        let manifest = Manifest::new(Action::Publish, 42, 1000, [5; 32], "garden").unwrap();
        let bytes = manifest.encode();
        let signature = key(1).sign(&bytes).to_bytes();
        let public = key(1).verifying_key().to_bytes();
        let other = key(2).verifying_key().to_bytes();
        assert_eq!(
            Manifest::verify(&bytes, &signature, Some(&other), "garden"),
            Err(ManifestError::BadSignature)
        );
        assert_eq!(
            Manifest::verify(&bytes, &signature, None, "garden"),
            Err(ManifestError::PublishingOff)
        );
        assert_eq!(
            Manifest::verify(&bytes, &signature, Some(&public), "orchard"),
            Err(ManifestError::WrongHost)
        );
        let mut changed = bytes;
        changed[16] ^= 1; // the version
        assert_eq!(
            Manifest::verify(&changed, &signature, Some(&public), "garden"),
            Err(ManifestError::BadSignature)
        );
        assert_eq!(
            Manifest::verify(&bytes, &signature[..63], Some(&public), "garden"),
            Err(ManifestError::BadSignature)
        );
    }

    #[test]
    fn malformed_manifests_are_refused() {
        let good = Manifest::new(Action::Publish, 1, 10, [0; 32], "garden")
            .unwrap()
            .encode();
        let mut cases: [[u8; MANIFEST_LEN]; 7] = [good; 7];
        cases[0][0] = b'X';
        cases[1][8] = 3;
        cases[2][9] = 0;
        cases[3][9] = 64;
        cases[4][12] = 1;
        cases[5][64] = b'G'; // upper case: a second encoding of one name
        cases[6][100] = 1; // past the host name
        for (index, case) in cases.iter().enumerate() {
            assert_eq!(
                Manifest::decode(case),
                Err(ManifestError::Malformed),
                "case {index}"
            );
        }
        assert_eq!(
            Manifest::decode(&good[..100]),
            Err(ManifestError::Malformed)
        );
        let rollback_with_len = Manifest::new(Action::Rollback, 1, 10, [0; 32], "garden").unwrap();
        assert_eq!(
            Manifest::decode(&rollback_with_len.encode()),
            Err(ManifestError::Malformed)
        );
        assert!(Manifest::new(Action::Publish, 1, 1, [0; 32], "a b").is_none());
        assert!(Manifest::new(Action::Publish, 1, 1, [0; 32], "").is_none());
        assert!(Manifest::new(Action::Publish, 1, 1, [0; 32], &"a".repeat(64)).is_none());
    }
}
