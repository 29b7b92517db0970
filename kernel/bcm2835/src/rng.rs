//! The hardware random number generator (RNG200-class block at bus 0x7E10_4000).
//!
//! Not in the public datasheet; the layout is the one Linux's `bcm2835-rng.c` documents:
//! CTRL at +0x0 (bit 0 enables the generator), STATUS at +0x4 (bits 0-19: warm-up count of
//! numbers to throw away after enabling; bits 24-31: words ready in the FIFO), DATA at +0x8
//! (one 32-bit word per read). Its interrupt (INT_MASK at +0x10) is left alone: the kernel
//! never enables the RNG's line in the interrupt controller, and QEMU 7.2's model
//! (`bcm2835_rng`, answering from the host's entropy) maps only the first 16 bytes, so a
//! write there is a data abort under QEMU.

use crate::mmio::RegisterBlock;
use core::cell::Cell;

const CTRL: usize = 0x00;
const STATUS: usize = 0x04;
const DATA: usize = 0x08;
const CTRL_ENABLE: u32 = 1;
/// Numbers to discard after enabling: the first ones are less random (Linux's value).
const WARMUP_COUNT: u32 = 0x4_0000;
const STATUS_READY_SHIFT: u32 = 24;

/// How long [`HardwareRng::fill`] waits for each word before giving up, once the generator
/// has given its first word.
pub const WORD_TIMEOUT_MICROS: u64 = 250_000;
/// How long it waits for the first word after the generator was enabled: the generator first
/// throws away [`WARMUP_COUNT`] numbers, whose time nobody has published (Linux's
/// bcm2835-rng waits for it without a bound, polling once a second). Five seconds keeps the
/// boot inside the hardware watchdog's 15 s; the board logs how long the seed took.
pub const WARMUP_TIMEOUT_MICROS: u64 = 5_000_000;

/// The generator gave no number in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RngTimeout {
    /// Bytes filled before it stopped.
    pub filled: usize,
}

/// Words ready in the FIFO, from a STATUS value.
pub const fn words_ready(status: u32) -> u32 {
    status >> STATUS_READY_SHIFT
}

/// The BCM2835 hardware RNG.
pub struct HardwareRng {
    registers: RegisterBlock,
    /// A word has come since this value was made: the warm-up is over.
    warmed_up: Cell<bool>,
}

impl HardwareRng {
    /// The RNG block at its BCM2835 address.
    ///
    /// # Safety
    /// Only one `HardwareRng` may exist.
    pub const unsafe fn new() -> Self {
        Self {
            // SAFETY: memory_map::RNG is the RNG block.
            registers: unsafe { RegisterBlock::new(crate::memory_map::RNG) },
            warmed_up: Cell::new(false),
        }
    }

    /// Enables the generator with the warm-up discard; a no-op if it already runs.
    pub fn enable(&self) {
        if self.registers.register(CTRL).read() & CTRL_ENABLE != 0 {
            return;
        }
        self.registers.register(STATUS).write(WARMUP_COUNT);
        self.registers.register(CTRL).write(CTRL_ENABLE);
    }

    /// Fills `out` with generator output, waiting up to [`WARMUP_TIMEOUT_MICROS`] for the
    /// first word and [`WORD_TIMEOUT_MICROS`] for each later one (`micros` reads the system
    /// timer).
    pub fn fill(&self, out: &mut [u8], micros: impl Fn() -> u64) -> Result<(), RngTimeout> {
        for (index, chunk) in out.chunks_mut(4).enumerate() {
            let started = micros();
            let limit = if self.warmed_up.get() {
                WORD_TIMEOUT_MICROS
            } else {
                WARMUP_TIMEOUT_MICROS
            };
            while words_ready(self.registers.register(STATUS).read()) == 0 {
                if micros().saturating_sub(started) > limit {
                    return Err(RngTimeout { filled: index * 4 });
                }
            }
            self.warmed_up.set(true);
            let word = self.registers.register(DATA).read().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}

/// A quick health check of generator output (for `selftest board`, not a statistical
/// certification): the share of one bits, and words equal to the one before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RngHealth {
    /// Words looked at.
    pub words: u32,
    /// One bits among them.
    pub ones: u32,
    /// Words equal to their predecessor (a stuck generator repeats).
    pub repeats: u32,
}

impl RngHealth {
    /// Counts `words`.
    pub fn of(words: &[u32]) -> Self {
        RngHealth {
            words: words.len() as u32,
            ones: words.iter().map(|word| word.count_ones()).sum(),
            repeats: words.windows(2).filter(|pair| pair[0] == pair[1]).count() as u32,
        }
    }

    /// Whether the counts look like random bits: no repeat, and the ones within five
    /// standard deviations of half (sigma = sqrt(bits) / 2; a fair generator falls outside
    /// about once in 1.7 million checks).
    pub fn healthy(&self) -> bool {
        let bits = u64::from(self.words) * 32;
        if bits == 0 || self.repeats > 0 {
            return false;
        }
        // |ones - bits/2| <= 5 * sqrt(bits) / 2, squared to stay in integers.
        let deviation = (2 * u64::from(self.ones)).abs_diff(bits);
        deviation * deviation <= 25 * bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_words_are_the_top_byte() {
        assert_eq!(words_ready(0x0400_0000), 4);
        assert_eq!(words_ready(0x000F_FFFF), 0);
        assert_eq!(words_ready(0xFF00_0000), 255);
    }

    #[test]
    fn health_flags_stuck_and_biased_output() {
        // xorshift32: good enough bits for the check.
        let mut state = 0x1234_5678u32;
        let words: std::vec::Vec<u32> = (0..256)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state
            })
            .collect();
        let health = RngHealth::of(&words);
        assert_eq!((health.words, health.repeats), (256, 0));
        assert!(health.healthy(), "{health:?}");
        assert!(!RngHealth::of(&[0xDEAD_BEEF; 256]).healthy(), "stuck");
        let biased: std::vec::Vec<u32> = words.iter().map(|w| w | 0x0000_00FF).collect();
        assert!(!RngHealth::of(&biased).healthy(), "biased");
        assert!(!RngHealth::of(&[]).healthy());
    }

    /// A generator that gives its first word `warmup` microseconds after it was enabled.
    struct Generator {
        now: std::rc::Rc<core::cell::Cell<u64>>,
        enabled_at: Option<u64>,
        warmup: u64,
    }

    impl crate::mmio::mock::Bus for Generator {
        fn read(&mut self, address: usize) -> u32 {
            let ready = self
                .enabled_at
                .is_some_and(|at| self.now.get() >= at + self.warmup);
            match address - crate::memory_map::RNG {
                STATUS if ready => 1 << STATUS_READY_SHIFT,
                DATA => 0x5A5A_5A5A,
                _ => 0,
            }
        }
        fn write(&mut self, address: usize, value: u32) {
            if address - crate::memory_map::RNG == CTRL && value & CTRL_ENABLE != 0 {
                self.enabled_at = Some(self.now.get());
            }
        }
    }

    #[test]
    fn a_warm_up_longer_than_a_word_timeout_is_waited_for() {
        let now = std::rc::Rc::new(core::cell::Cell::new(0u64));
        let _bus = crate::mmio::mock::install(Generator {
            now: now.clone(),
            enabled_at: None,
            warmup: 2_000_000,
        });
        // SAFETY: the registers are the mock's.
        let rng = unsafe { HardwareRng::new() };
        rng.enable();
        let clock = || {
            now.set(now.get() + 100);
            now.get()
        };
        let mut seed = [0u8; 32];
        assert_eq!(rng.fill(&mut seed, clock), Ok(()));
        assert_eq!(seed, [0x5A; 32]);
    }
}
