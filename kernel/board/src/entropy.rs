//! Entropy: the hardware RNG, health-tested, seeds the CSPRNG at boot whether or not HTTPS
//! is on, and reseeds it every hour; every key the network uses comes from the CSPRNG.
//!
//! The raw words pass through the SP 800-90B continuous tests ([`bramble_tls::health`]):
//! [`STARTUP_BYTES`] at boot before any is used, and every reseed's bytes after. A failure
//! is final until the next boot: the CSPRNG enters its error state, so HTTPS stays off
//! (`tls::prepare` says why) or, after a failed reseed, refuses every new handshake;
//! reseeding stops, and the console and the status line say so. The network's non-TLS secrets (SYN-cookie
//! and connection-table key, smoltcp's seed for DNS IDs and ports, SNTP nonces) then fall
//! back to the timer and the MAC, loudly: plain HTTP must still be served, but never
//! silently on a weak key.

use bramble_bcm2835::rng::HardwareRng;
use bramble_tls::health::STARTUP_BYTES;
use bramble_tls::random::RANDOM;
use bramble_tls::reseed::{Poll, SeedProblem, Seeding};
use core::sync::atomic::{AtomicU64, Ordering};

use crate::platform::micros;

/// Why the CSPRNG has no (more) seed from the hardware.
pub type Problem = SeedProblem;

/// The schedule and the running health tests ([`bramble_tls::reseed`]: its host tests drive
/// it with a stuck source and an hour's jump).
static SEEDING: spin::Mutex<Seeding> = spin::Mutex::new(Seeding::new());
/// Microseconds the boot's seeding took (the RNG's warm-up included).
static BOOT_MICROS: AtomicU64 = AtomicU64::new(0);

/// Fills `out` from the hardware RNG; on a timeout, how many bytes it got.
fn hardware(out: &mut [u8]) -> Result<(), usize> {
    // SAFETY: the RNG is touched only from this module, on the one core, never from an
    // interrupt handler: one instance at a time.
    let rng = unsafe { HardwareRng::new() };
    rng.enable();
    rng.fill(out, micros).map_err(|timeout| timeout.filled)
}

/// `selftest board`: `out.len()` bytes from the hardware RNG through the same health tests
/// (not mixed into the CSPRNG; a failure fails it, as at a reseed), and how long the boot's
/// seeding took (0: it failed).
pub fn sample_for_selftest(out: &mut [u8]) -> Result<u64, Problem> {
    let mut seeding = SEEDING.lock();
    seeding
        .sample(&RANDOM, &mut hardware, out)
        .inspect_err(|problem| {
            log::error!("entropy: {problem} in a self-test; HTTPS now refuses new handshakes")
        })?;
    Ok(if seeding.seeded_at().is_some() {
        BOOT_MICROS.load(Ordering::Relaxed)
    } else {
        0
    })
}

/// Seeds the CSPRNG from [`STARTUP_BYTES`] health-tested bytes of the hardware RNG; on any
/// problem, keeps it for [`problem`] and says so on the console.
pub fn seed_at_boot() {
    let started = micros();
    let result = SEEDING
        .lock()
        .seed_at_boot(started.max(1), &RANDOM, &mut hardware);
    let took = micros().saturating_sub(started);
    BOOT_MICROS.store(took, Ordering::Relaxed);
    match result {
        Ok(()) => log::info!(
            "entropy: CSPRNG seeded from {STARTUP_BYTES} health-tested bytes of the hardware \
             RNG in {took} us"
        ),
        Err(problem) => log::error!(
            "entropy: {problem}; HTTPS stays off this boot, and the network's keys fall back \
             to the timer and MAC (weak)"
        ),
    }
}

/// Mixes fresh hardware bytes into the CSPRNG once an hour; a failure puts the CSPRNG in its
/// error state for good, so HTTPS refuses new handshakes from then on. Returns when the next
/// reseed is due, for the main loop's sleep.
pub fn poll(now: u64) -> Option<u64> {
    let result = SEEDING.lock().poll(now, &RANDOM, &mut hardware);
    if let Poll::Failed(problem) = result {
        log::error!(
            "entropy: {problem} at a reseed; the CSPRNG is stopped, HTTPS refuses new \
             handshakes until the next boot"
        );
    }
    result.next_due()
}

/// Why the hardware RNG could not be used, if it could not.
pub fn problem() -> Option<Problem> {
    SEEDING.lock().problem()
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
    let (tested, reseeds, problem) = {
        let seeding = SEEDING.lock();
        (seeding.tested(), seeding.reseeds(), seeding.problem())
    };
    match problem {
        None => {
            let line = bramble_status::EntropyOk {
                tested,
                boot_seeding_us: BOOT_MICROS.load(Ordering::Relaxed),
                reseeds,
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
