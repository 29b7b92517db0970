//! Entropy: the hardware RNG, health-tested, seeds the CSPRNG at boot whether or not HTTPS
//! is on, and reseeds it every hour; every key the network uses comes from the CSPRNG.
//!
//! The raw words pass through the SP 800-90B continuous tests ([`bramble_tls::health`]):
//! [`STARTUP_BYTES`] at boot before any is used, and every reseed's bytes after. A failure
//! is final until the next boot: HTTPS stays off (`tls::prepare` says why), reseeding stops,
//! and the console and the status line say so. The network's non-TLS secrets (SYN-cookie
//! and connection-table key, smoltcp's seed for DNS IDs and ports, SNTP nonces) then fall
//! back to the timer and the MAC, loudly: plain HTTP must still be served, but never
//! silently on a weak key.

use bramble_bcm2835::rng::HardwareRng;
use bramble_tls::health::{Health, HealthFailure, STARTUP_BYTES};
use bramble_tls::random::RANDOM;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::platform::micros;

/// Bytes drawn at each reseed.
const RESEED_BYTES: usize = 64;
/// Time between reseeds.
const RESEED_MICROS: u64 = 3_600_000_000;

/// Why the CSPRNG has no seed from the hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// The generator gave no word in time (bytes obtained first).
    Timeout(usize),
    /// A health test failed.
    Health(HealthFailure),
}

impl core::fmt::Display for Problem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Timeout(filled) => write!(
                f,
                "the hardware RNG stopped answering after {filled} of {STARTUP_BYTES} bytes"
            ),
            Self::Health(failure) => write!(f, "the hardware RNG's {failure}"),
        }
    }
}

static HEALTH: spin::Mutex<Health> = spin::Mutex::new(Health::new());
static PROBLEM: spin::Once<Problem> = spin::Once::new();
/// When the CSPRNG was last seeded from the hardware (micros; 0: never).
static SEEDED_AT: AtomicU64 = AtomicU64::new(0);
/// Reseeds done since boot.
static RESEEDS: AtomicU64 = AtomicU64::new(0);
/// Microseconds the boot's seeding took (the RNG's warm-up included).
static BOOT_MICROS: AtomicU64 = AtomicU64::new(0);

/// Draws `out.len()` bytes from the hardware RNG through the health tests.
fn draw(out: &mut [u8]) -> Result<(), Problem> {
    // SAFETY: the RNG is touched only from this module, on the one core, never from an
    // interrupt handler: one instance at a time.
    let rng = unsafe { HardwareRng::new() };
    rng.enable();
    rng.fill(out, micros)
        .map_err(|timeout| Problem::Timeout(timeout.filled))?;
    HEALTH.lock().check(out).map_err(Problem::Health)
}

/// `selftest board`: `out.len()` bytes from the hardware RNG through the same health tests
/// (not mixed into the CSPRNG), and how long the boot's seeding took (0: it failed).
pub fn sample_for_selftest(out: &mut [u8]) -> Result<u64, Problem> {
    draw(out)?;
    Ok(if SEEDED_AT.load(Ordering::Relaxed) > 0 {
        BOOT_MICROS.load(Ordering::Relaxed)
    } else {
        0
    })
}

/// Mixes `N` health-tested hardware bytes into the CSPRNG (seeding it the first time); the
/// bytes are wiped from the stack after.
fn reseed<const N: usize>() -> Result<(), Problem> {
    let mut bytes = [0u8; N];
    let result = draw(&mut bytes).and_then(|()| {
        RANDOM
            .seed(&bytes)
            .map_err(|_| Problem::Timeout(bytes.len()))
    });
    bytes.fill(0);
    result
}

/// Seeds the CSPRNG from [`STARTUP_BYTES`] health-tested bytes of the hardware RNG; on any
/// problem, keeps it for [`problem`] and says so on the console.
pub fn seed_at_boot() {
    let started = micros();
    let result = reseed::<STARTUP_BYTES>();
    let took = micros().saturating_sub(started);
    BOOT_MICROS.store(took, Ordering::Relaxed);
    match result {
        Ok(()) => {
            SEEDED_AT.store(micros().max(1), Ordering::Relaxed);
            log::info!(
                "entropy: CSPRNG seeded from {STARTUP_BYTES} health-tested bytes of the hardware \
                 RNG in {took} us"
            );
        }
        Err(problem) => {
            PROBLEM.call_once(|| problem);
            log::error!(
                "entropy: {problem}; HTTPS stays off this boot, and the network's keys fall \
                 back to the timer and MAC (weak)"
            );
        }
    }
}

/// Mixes fresh hardware bytes into the CSPRNG once [`RESEED_MICROS`] have passed since the
/// last seeding; a failed health test stops reseeding for good (the CSPRNG keeps its state).
/// Returns when the next reseed is due, for the main loop's sleep.
pub fn poll(now: u64) -> Option<u64> {
    if PROBLEM.get().is_some() {
        return None;
    }
    let last = SEEDED_AT.load(Ordering::Relaxed);
    let due = last.saturating_add(RESEED_MICROS);
    if now < due {
        return Some(due);
    }
    let result = reseed::<RESEED_BYTES>();
    match result {
        Ok(()) => {
            SEEDED_AT.store(now, Ordering::Relaxed);
            RESEEDS.fetch_add(1, Ordering::Relaxed);
            Some(now.saturating_add(RESEED_MICROS))
        }
        Err(problem) => {
            PROBLEM.call_once(|| problem);
            log::error!("entropy: {problem} at a reseed; the CSPRNG is no longer reseeded");
            None
        }
    }
}

/// Why the hardware RNG could not be used, if it could not.
pub fn problem() -> Option<Problem> {
    PROBLEM.get().copied()
}

/// A 64-bit network secret: from the CSPRNG, or (once the hardware RNG
/// failed, said at boot) from the timer and `mac`, which an attacker may guess.
pub fn network_secret(mac: [u8; 6], salt: u64) -> u64 {
    let mut bytes = [0u8; 8];
    if RANDOM.fill_bytes(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes);
    }
    (micros() ^ salt).rotate_left(23)
        ^ u64::from_le_bytes([mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], 0x5a, 0xa5])
}

/// The console's line on the entropy source.
pub fn print_status() {
    let tested = HEALTH.lock().tested();
    match problem() {
        None => {
            let line = bramble_status::EntropyOk {
                tested,
                boot_seeding_us: BOOT_MICROS.load(Ordering::Relaxed),
                reseeds: RESEEDS.load(Ordering::Relaxed),
            };
            log::info!("{line}");
        }
        Some(problem) => {
            let line = bramble_status::EntropyFailed {
                problem: bramble_status::Text::Shown(&problem),
                tested,
            };
            log::info!("{line}");
        }
    }
}
