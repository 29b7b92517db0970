//! When the CSPRNG takes hardware entropy, and what a failure does: the schedule the board
//! runs ([`Seeding`]), portable so that the host tests can drive it with a stuck source and
//! a clock that jumps an hour.
//!
//! - At boot, [`STARTUP_BYTES`] raw bytes pass the health tests ([`crate::health`]) before
//!   any is mixed in (SP 800-90B §4.3).
//! - Every [`RESEED_MICROS`] after the last seeding, [`RESEED_BYTES`] more, through the same
//!   running tests, are mixed into the state ([`Csprng::seed`] hashes them with output of the
//!   current state, so a reseed never weakens it).
//! - A failure of either kind (the source stops answering, or a health test fails), at boot,
//!   at a reseed or in a self-test sample, is final until the next boot: the generator is put
//!   in its error state ([`Csprng::fail`]), so TLS refuses new handshakes and new server
//!   configurations, and ACME makes no key; [`Seeding::problem`] says why for the console,
//!   the status line and the log. Nothing falls back to a weaker source for a TLS key.

use crate::health::{Health, HealthFailure, STARTUP_BYTES};
use crate::random::Csprng;

/// Bytes drawn at each reseed.
pub const RESEED_BYTES: usize = 64;
/// Time between reseeds: an hour.
pub const RESEED_MICROS: u64 = 3_600_000_000;

/// Why the generator has no (more) hardware entropy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedProblem {
    /// The source gave only `filled` of the `wanted` bytes in time.
    Timeout {
        /// Bytes obtained.
        filled: usize,
        /// Bytes asked for.
        wanted: usize,
    },
    /// A health test failed.
    Health(HealthFailure),
}

impl core::fmt::Display for SeedProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Timeout { filled, wanted } => write!(
                f,
                "the hardware RNG stopped answering after {filled} of {wanted} bytes"
            ),
            Self::Health(failure) => write!(f, "the hardware RNG's {failure}"),
        }
    }
}

/// What [`Seeding::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// Nothing yet; the next reseed is due at this time (micros).
    Due(u64),
    /// Fresh bytes were mixed in; the next reseed is due at this time.
    Reseeded(u64),
    /// The source failed now: the generator is in its error state.
    Failed(SeedProblem),
    /// The source failed earlier (or never seeded the generator): no reseed is ever due.
    Stopped,
}

impl Poll {
    /// When the caller should poll again, for its sleep.
    pub fn next_due(self) -> Option<u64> {
        match self {
            Self::Due(at) | Self::Reseeded(at) => Some(at),
            Self::Failed(_) | Self::Stopped => None,
        }
    }
}

/// The seeding schedule and its health tests; one per hardware source.
#[derive(Debug, Clone)]
pub struct Seeding {
    health: Health,
    seeded_at: Option<u64>,
    reseeds: u64,
    problem: Option<SeedProblem>,
}

impl Default for Seeding {
    fn default() -> Self {
        Self::new()
    }
}

impl Seeding {
    /// Before the boot's seeding.
    pub const fn new() -> Self {
        Self {
            health: Health::new(),
            seeded_at: None,
            reseeds: 0,
            problem: None,
        }
    }

    /// Seeds `rng` at `now` from [`STARTUP_BYTES`] of `source`, which fills its buffer or
    /// says how many bytes it managed before giving up.
    pub fn seed_at_boot(
        &mut self,
        now: u64,
        rng: &Csprng,
        source: &mut dyn FnMut(&mut [u8]) -> Result<(), usize>,
    ) -> Result<(), SeedProblem> {
        let mut bytes = [0u8; STARTUP_BYTES];
        let result = self.mix(rng, source, &mut bytes);
        if result.is_ok() {
            self.seeded_at = Some(now);
        }
        result
    }

    /// Reseeds `rng` from [`RESEED_BYTES`] of `source` when [`RESEED_MICROS`] have passed
    /// since the last seeding.
    pub fn poll(
        &mut self,
        now: u64,
        rng: &Csprng,
        source: &mut dyn FnMut(&mut [u8]) -> Result<(), usize>,
    ) -> Poll {
        let Some(last) = self.seeded_at.filter(|_| self.problem.is_none()) else {
            return Poll::Stopped;
        };
        let due = last.saturating_add(RESEED_MICROS);
        if now < due {
            return Poll::Due(due);
        }
        let mut bytes = [0u8; RESEED_BYTES];
        match self.mix(rng, source, &mut bytes) {
            Ok(()) => {
                self.seeded_at = Some(now);
                self.reseeds = self.reseeds.saturating_add(1);
                Poll::Reseeded(now.saturating_add(RESEED_MICROS))
            }
            Err(problem) => Poll::Failed(problem),
        }
    }

    /// Fills `out` from `source` through the same running health tests, without mixing it
    /// in (the console's self-test). A failure counts as at a reseed: `rng` fails too.
    pub fn sample(
        &mut self,
        rng: &Csprng,
        source: &mut dyn FnMut(&mut [u8]) -> Result<(), usize>,
        out: &mut [u8],
    ) -> Result<(), SeedProblem> {
        self.draw(source, out)
            .inspect_err(|&problem| self.failed(rng, problem))
    }

    fn draw(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Result<(), usize>,
        out: &mut [u8],
    ) -> Result<(), SeedProblem> {
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        source(out).map_err(|filled| SeedProblem::Timeout {
            filled,
            wanted: out.len(),
        })?;
        self.health.check(out).map_err(SeedProblem::Health)
    }

    /// Draws into `bytes`, mixes them into `rng`, and wipes them.
    fn mix(
        &mut self,
        rng: &Csprng,
        source: &mut dyn FnMut(&mut [u8]) -> Result<(), usize>,
        bytes: &mut [u8],
    ) -> Result<(), SeedProblem> {
        let result = self.draw(source, bytes).and_then(|()| {
            rng.seed(bytes).map_err(|_| SeedProblem::Timeout {
                filled: bytes.len(),
                wanted: bytes.len(),
            })
        });
        bytes.fill(0);
        result.inspect_err(|&problem| self.failed(rng, problem))
    }

    fn failed(&mut self, rng: &Csprng, problem: SeedProblem) {
        self.problem.get_or_insert(problem);
        rng.fail();
    }

    /// Why the source can no longer be used, if it cannot.
    pub fn problem(&self) -> Option<SeedProblem> {
        self.problem
    }

    /// When the generator was last seeded (micros), if it was.
    pub fn seeded_at(&self) -> Option<u64> {
        self.seeded_at
    }

    /// Reseeds done since boot.
    pub fn reseeds(&self) -> u64 {
        self.reseeds
    }

    /// Raw bytes the health tests have seen.
    pub fn tested(&self) -> u64 {
        self.health.tested()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that pass the health tests: a counter through an odd multiplier.
    fn good(state: &mut u32) -> impl FnMut(&mut [u8]) -> Result<(), usize> + '_ {
        move |out: &mut [u8]| {
            for byte in out.iter_mut() {
                *state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                *byte = (*state >> 24) as u8;
            }
            Ok(())
        }
    }

    fn stuck(out: &mut [u8]) -> Result<(), usize> {
        out.fill(0x5a);
        Ok(())
    }

    #[test]
    fn seeds_at_boot_then_reseeds_each_hour() {
        let rng = Csprng::new();
        let mut seeding = Seeding::new();
        let mut state = 1;
        seeding
            .seed_at_boot(1_000, &rng, &mut good(&mut state))
            .unwrap();
        assert!(rng.is_seeded());
        assert_eq!(seeding.tested(), STARTUP_BYTES as u64);
        let mut calls = 0;
        let mut counting = |out: &mut [u8]| {
            calls += 1;
            good(&mut state)(out)
        };
        let due = 1_000 + RESEED_MICROS;
        assert_eq!(seeding.poll(5_000, &rng, &mut counting), Poll::Due(due));
        assert_eq!(seeding.poll(due - 1, &rng, &mut counting), Poll::Due(due));
        assert_eq!(
            seeding.poll(due + 7, &rng, &mut counting),
            Poll::Reseeded(due + 7 + RESEED_MICROS)
        );
        assert_eq!(
            seeding.poll(due + 8, &rng, &mut counting),
            Poll::Due(due + 7 + RESEED_MICROS)
        );
        assert_eq!(calls, 1, "one draw per hour, none in between");
        assert_eq!(seeding.reseeds(), 1);
        assert_eq!(
            seeding.tested(),
            (STARTUP_BYTES + RESEED_BYTES) as u64,
            "reseed bytes are health-tested too"
        );
        assert!(rng.is_seeded());
    }

    #[test]
    fn a_reseed_changes_what_the_generator_gives() {
        let (reseeded, untouched) = (Csprng::new(), Csprng::new());
        let (mut a, mut b) = (Seeding::new(), Seeding::new());
        let (mut first, mut second) = (1, 1);
        a.seed_at_boot(0, &reseeded, &mut good(&mut first)).unwrap();
        b.seed_at_boot(0, &untouched, &mut good(&mut second))
            .unwrap();
        let mut more = 99;
        assert!(matches!(
            a.poll(RESEED_MICROS, &reseeded, &mut good(&mut more)),
            Poll::Reseeded(_)
        ));
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        reseeded.fill_bytes(&mut x).unwrap();
        untouched.fill_bytes(&mut y).unwrap();
        assert_ne!(x, y);
    }

    #[test]
    fn a_stuck_source_at_boot_leaves_the_generator_failed() {
        let rng = Csprng::new();
        let mut seeding = Seeding::new();
        let problem = seeding
            .seed_at_boot(0, &rng, &mut stuck)
            .expect_err("a stuck source must not seed");
        assert_eq!(problem, SeedProblem::Health(HealthFailure::RepetitionCount));
        assert!(rng.has_failed() && !rng.is_seeded());
        assert_eq!(seeding.problem(), Some(problem));
        assert_eq!(
            seeding.poll(RESEED_MICROS * 2, &rng, &mut stuck),
            Poll::Stopped
        );
    }

    #[test]
    fn a_source_that_goes_stuck_at_a_reseed_stops_tls_for_good() {
        let rng = Csprng::new();
        let mut seeding = Seeding::new();
        let mut state = 3;
        seeding
            .seed_at_boot(0, &rng, &mut good(&mut state))
            .unwrap();
        let failed = seeding.poll(RESEED_MICROS, &rng, &mut stuck);
        assert_eq!(
            failed,
            Poll::Failed(SeedProblem::Health(HealthFailure::RepetitionCount))
        );
        assert_eq!(failed.next_due(), None);
        assert!(rng.has_failed());
        assert_eq!(rng.fill_bytes(&mut [0u8; 8]), Err(crate::random::Unseeded));
        // A healthy source later does not bring it back.
        assert_eq!(
            seeding.poll(RESEED_MICROS * 3, &rng, &mut good(&mut state)),
            Poll::Stopped
        );
        assert!(!rng.is_seeded());
    }

    #[test]
    fn a_silent_source_is_a_timeout_and_fails_too() {
        let rng = Csprng::new();
        let mut seeding = Seeding::new();
        let mut state = 5;
        seeding
            .seed_at_boot(0, &rng, &mut good(&mut state))
            .unwrap();
        let mut silent = |_: &mut [u8]| Err(10usize);
        assert_eq!(
            seeding.poll(RESEED_MICROS, &rng, &mut silent),
            Poll::Failed(SeedProblem::Timeout {
                filled: 10,
                wanted: RESEED_BYTES
            })
        );
        assert!(rng.has_failed());
    }

    #[test]
    fn a_failed_self_test_sample_fails_the_generator() {
        let rng = Csprng::new();
        let mut seeding = Seeding::new();
        let mut state = 7;
        seeding
            .seed_at_boot(0, &rng, &mut good(&mut state))
            .unwrap();
        let mut out = [0u8; 256];
        seeding
            .sample(&rng, &mut good(&mut state), &mut out)
            .unwrap();
        assert!(rng.is_seeded(), "a good sample changes nothing");
        assert!(seeding.sample(&rng, &mut stuck, &mut out).is_err());
        assert!(rng.has_failed());
    }
}
