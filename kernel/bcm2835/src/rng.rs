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

const CTRL: usize = 0x00;
const STATUS: usize = 0x04;
const DATA: usize = 0x08;
const CTRL_ENABLE: u32 = 1;
/// Numbers to discard after enabling: the first ones are less random (Linux's value).
const WARMUP_COUNT: u32 = 0x4_0000;
const STATUS_READY_SHIFT: u32 = 24;

/// How long [`HardwareRng::fill`] waits for each word before giving up.
pub const WORD_TIMEOUT_MICROS: u64 = 250_000;

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

    /// Fills `out` with generator output, waiting up to [`WORD_TIMEOUT_MICROS`] for each
    /// word (`micros` reads the system timer).
    pub fn fill(&self, out: &mut [u8], micros: impl Fn() -> u64) -> Result<(), RngTimeout> {
        for (index, chunk) in out.chunks_mut(4).enumerate() {
            let started = micros();
            while words_ready(self.registers.register(STATUS).read()) == 0 {
                if micros().saturating_sub(started) > WORD_TIMEOUT_MICROS {
                    return Err(RngTimeout { filled: index * 4 });
                }
            }
            let word = self.registers.register(DATA).read().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
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
}
