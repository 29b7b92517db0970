//! Health tests on the hardware RNG's raw output (NIST SP 800-90B §4.4).
//!
//! Every byte the board takes from the generator, at boot and at each reseed, passes through
//! [`Health`] before it reaches the CSPRNG. Two tests, as the standard's approved continuous
//! tests, on bytes, for an assessed min-entropy of [`ASSESSED_BITS`] bits per byte (a
//! deliberately low claim for a block whose design is not public):
//!
//! - the repetition count test fails on [`REPETITION_CUTOFF`] equal bytes in a row: a stuck
//!   generator (all zeros, or one word repeated) is caught within a few bytes;
//! - the adaptive proportion test fails when, in a window of [`WINDOW`] bytes, the window's
//!   first byte occurs [`PROPORTION_CUTOFF`] times or more: a generator that lost most of its
//!   entropy (a few values, a strong bias) is caught within one window.
//!
//! Both cut-offs give a false alarm with probability at most 2^-20 per test for a source that
//! meets the claim (the unit tests recompute them from the binomial tail). The start-up test
//! (§4.3) runs them over [`STARTUP_BYTES`] bytes before any is used. A failure is final until
//! the next boot: the board then keeps HTTPS off and says why, and never falls back to a
//! weaker source for keys.

/// Min-entropy per byte the cut-offs assume.
pub const ASSESSED_BITS: u32 = 4;
/// Equal bytes in a row that fail the repetition count test: `1 + ceil(20 / H)`.
pub const REPETITION_CUTOFF: u32 = 1 + 20_u32.div_ceil(ASSESSED_BITS);
/// The adaptive proportion test's window, in bytes (SP 800-90B: 512 for non-binary samples).
pub const WINDOW: u32 = 512;
/// Occurrences of the window's first byte within the window that fail the test: the
/// smallest count whose binomial tail, for p = 2^-H over [`WINDOW`] samples, is below 2^-20.
pub const PROPORTION_CUTOFF: u32 = 63;
/// Bytes tested before the first use (SP 800-90B §4.3: at least 1,024 samples).
pub const STARTUP_BYTES: usize = 1024;

/// Which test failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthFailure {
    /// [`REPETITION_CUTOFF`] equal bytes in a row.
    RepetitionCount,
    /// [`PROPORTION_CUTOFF`] copies of one byte within a window.
    AdaptiveProportion,
}

impl core::fmt::Display for HealthFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::RepetitionCount => "repetition count test failed (the generator is stuck)",
            Self::AdaptiveProportion => {
                "adaptive proportion test failed (the output has lost its entropy)"
            }
        })
    }
}

/// The running state of both tests; a failure sticks.
#[derive(Debug, Clone)]
pub struct Health {
    last: Option<u8>,
    run: u32,
    window_first: u8,
    window_seen: u32,
    window_count: u32,
    tested: u64,
    failed: Option<HealthFailure>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Tests that have seen nothing yet.
    pub const fn new() -> Self {
        Self {
            last: None,
            run: 0,
            window_first: 0,
            window_seen: 0,
            window_count: 0,
            tested: 0,
            failed: None,
        }
    }

    /// Runs both tests over `bytes`. Once a test has failed, every later call fails too.
    pub fn check(&mut self, bytes: &[u8]) -> Result<(), HealthFailure> {
        if let Some(failure) = self.failed {
            return Err(failure);
        }
        for &byte in bytes {
            if let Err(failure) = self.sample(byte) {
                self.failed = Some(failure);
                return Err(failure);
            }
        }
        Ok(())
    }

    fn sample(&mut self, byte: u8) -> Result<(), HealthFailure> {
        self.tested = self.tested.saturating_add(1);
        // Repetition count (§4.4.1).
        if self.last == Some(byte) {
            self.run = self.run.saturating_add(1);
            if self.run >= REPETITION_CUTOFF {
                return Err(HealthFailure::RepetitionCount);
            }
        } else {
            self.last = Some(byte);
            self.run = 1;
        }
        // Adaptive proportion (§4.4.2).
        if self.window_seen == 0 {
            self.window_first = byte;
            self.window_count = 1;
        } else if byte == self.window_first {
            self.window_count = self.window_count.saturating_add(1);
            if self.window_count >= PROPORTION_CUTOFF {
                return Err(HealthFailure::AdaptiveProportion);
            }
        }
        self.window_seen += 1;
        if self.window_seen == WINDOW {
            self.window_seen = 0;
        }
        Ok(())
    }

    /// Bytes tested so far.
    pub fn tested(&self) -> u64 {
        self.tested
    }

    /// The failure, if a test has failed.
    pub fn failure(&self) -> Option<HealthFailure> {
        self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// A xorshift generator standing in for a healthy source in these tests.
    fn noise(count: usize, mut state: u64) -> Vec<u8> {
        (0..count)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn a_healthy_source_passes_for_a_long_time() {
        let mut health = Health::new();
        for round in 0..64 {
            health
                .check(&noise(64 * 1024, 0x9e37_79b9 + round))
                .unwrap();
        }
        assert_eq!(health.tested(), 64 * 64 * 1024);
        assert_eq!(health.failure(), None);
    }

    #[test]
    fn a_stuck_source_fails_the_repetition_count_within_a_few_bytes() {
        let mut health = Health::new();
        let mut bytes = noise(100, 1);
        bytes.extend_from_slice(&[0; 8]);
        assert_eq!(health.check(&bytes), Err(HealthFailure::RepetitionCount));
        assert!(health.tested() <= 100 + u64::from(REPETITION_CUTOFF));
        assert_eq!(
            health.check(&noise(10, 2)),
            Err(HealthFailure::RepetitionCount),
            "a failure sticks"
        );
        // One word repeated (a generator returning its FIFO's last word again and again).
        let mut health = Health::new();
        let word = [0x12, 0x34, 0x56, 0x78].repeat(200);
        assert_eq!(health.check(&word), Err(HealthFailure::AdaptiveProportion));
    }

    #[test]
    fn a_biased_source_fails_the_adaptive_proportion() {
        // Every other byte is 0x55, the rest noise: never 6 equal in a row, but a quarter of
        // each window repeats its first byte when that byte is 0x55.
        let mut health = Health::new();
        let bytes: Vec<u8> = noise(4096, 3)
            .into_iter()
            .enumerate()
            .map(|(i, b)| if i % 2 == 0 { 0x55 } else { b | 1 })
            .collect();
        assert_eq!(health.check(&bytes), Err(HealthFailure::AdaptiveProportion));
    }

    /// Smallest c with P(X >= c) <= 2^-20 for X ~ Binomial(n - 1, p), plus the first sample
    /// itself (SP 800-90B §4.4.2's definition of the cut-off).
    fn binomial_cutoff(n: u32, p: f64) -> u32 {
        let n = n - 1;
        let mut pmf = (1.0 - p).powi(n as i32); // P(X = 0)
        let mut cdf = pmf;
        for k in 0..n {
            if 1.0 - cdf <= 2f64.powi(-20) {
                return k + 2;
            }
            pmf *= (f64::from(n - k) / f64::from(k + 1)) * (p / (1.0 - p));
            cdf += pmf;
        }
        n + 1
    }

    #[test]
    fn the_cutoffs_follow_from_the_assessed_entropy() {
        assert_eq!(REPETITION_CUTOFF, 6);
        let computed = binomial_cutoff(WINDOW, 2f64.powi(-(ASSESSED_BITS as i32)));
        assert_eq!(PROPORTION_CUTOFF, computed, "the binomial tail's cut-off");
    }
}
