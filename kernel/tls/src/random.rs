//! The CSPRNG every key, nonce and ticket comes from: ChaCha20 (rand_chacha) seeded from
//! hardware entropy. Until it has a seed it refuses to give out bytes, so TLS cannot start
//! without one; once its source has failed a health test ([`Csprng::fail`], see
//! [`crate::reseed`]) it refuses for good, so TLS stops: a handshake that needs a random
//! byte ends with an error, and new server configurations are refused.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use rustls::crypto::{GetRandomFailed, SecureRandom};
use sha2::{Digest, Sha256};

/// The CSPRNG has not been seeded yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unseeded;

/// A ChaCha20 generator behind a lock, empty until [`Csprng::seed`].
pub struct Csprng {
    state: spin::Mutex<Option<ChaCha20Rng>>,
    failed: core::sync::atomic::AtomicBool,
}

/// Entropy needed before the generator counts as seeded: 256 bits, given as at least this
/// many bytes of hardware output (which is hashed down, so its bias does not matter).
pub const MINIMUM_SEED_BYTES: usize = 32;

/// The generator TLS draws from.
pub static RANDOM: Csprng = Csprng::new();

impl Csprng {
    /// An unseeded generator.
    pub const fn new() -> Self {
        Self {
            state: spin::Mutex::new(None),
            failed: core::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Puts the generator in its error state for good: the state is wiped, and every later
    /// [`Csprng::seed`] and [`Csprng::fill_bytes`] is refused. For a hardware source that
    /// failed its health tests: nothing keyed after that moment may rest on it.
    pub fn fail(&self) {
        self.failed
            .store(true, core::sync::atomic::Ordering::SeqCst);
        *self.state.lock() = None;
    }

    /// Whether [`Csprng::fail`] was called.
    pub fn has_failed(&self) -> bool {
        self.failed.load(core::sync::atomic::Ordering::SeqCst)
    }

    /// Mixes `entropy` into the generator (SHA-256 of the current state's output and the new
    /// bytes), seeding it the first time. Returns `Err` (and changes nothing) when fewer than
    /// [`MINIMUM_SEED_BYTES`] are given.
    pub fn seed(&self, entropy: &[u8]) -> Result<(), Unseeded> {
        if entropy.len() < MINIMUM_SEED_BYTES {
            return Err(Unseeded);
        }
        let mut state = self.state.lock();
        if self.has_failed() {
            return Err(Unseeded);
        }
        let mut hasher = Sha256::new();
        if let Some(rng) = state.as_mut() {
            let mut carried = [0u8; 32];
            rng.fill_bytes(&mut carried);
            hasher.update(carried);
        }
        hasher.update(entropy);
        *state = Some(ChaCha20Rng::from_seed(hasher.finalize().into()));
        Ok(())
    }

    /// Whether [`Csprng::seed`] has succeeded.
    pub fn is_seeded(&self) -> bool {
        self.state.lock().is_some()
    }

    /// Fills `out` with random bytes, or says the generator has no seed yet.
    pub fn fill_bytes(&self, out: &mut [u8]) -> Result<(), Unseeded> {
        match self.state.lock().as_mut() {
            Some(rng) => {
                rng.fill_bytes(out);
                Ok(())
            }
            None => Err(Unseeded),
        }
    }
}

impl Default for Csprng {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Csprng {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Csprng")
    }
}

impl SecureRandom for Csprng {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        self.fill_bytes(buf).map_err(|_| GetRandomFailed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_until_seeded_and_short_seeds() {
        let rng = Csprng::new();
        let mut out = [0u8; 16];
        assert_eq!(rng.fill_bytes(&mut out), Err(Unseeded));
        assert_eq!(rng.seed(&[7; MINIMUM_SEED_BYTES - 1]), Err(Unseeded));
        assert!(!rng.is_seeded());
        rng.seed(&[7; MINIMUM_SEED_BYTES]).unwrap();
        assert!(rng.is_seeded());
        rng.fill_bytes(&mut out).unwrap();
        assert_ne!(out, [0; 16]);
    }

    #[test]
    fn a_failed_generator_refuses_for_good() {
        let rng = Csprng::new();
        rng.seed(&[7; MINIMUM_SEED_BYTES]).unwrap();
        rng.fail();
        let mut out = [0u8; 16];
        assert_eq!(rng.fill_bytes(&mut out), Err(Unseeded));
        assert!(!rng.is_seeded());
        assert!(rng.has_failed());
        assert_eq!(rng.seed(&[8; 64]), Err(Unseeded), "no reseed revives it");
        assert_eq!(rng.fill_bytes(&mut out), Err(Unseeded));
    }

    #[test]
    fn reseeding_mixes_in_rather_than_replacing() {
        let first = Csprng::new();
        let second = Csprng::new();
        first.seed(&[1; 32]).unwrap();
        second.seed(&[2; 32]).unwrap();
        second.seed(&[1; 32]).unwrap();
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        first.fill_bytes(&mut a).unwrap();
        second.fill_bytes(&mut b).unwrap();
        assert_ne!(a, b, "a reseed keeps the earlier entropy");
    }
}
