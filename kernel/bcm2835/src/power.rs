//! The power-management block's watchdog: board reset, and (later) a hang watchdog.
//!
//! The PM registers are not in the public datasheet; their layout is the one Linux's
//! `bcm2835_wdt.c` documents: RSTC at +0x1C, RSTS at +0x20, WDOG at +0x24, every write carrying
//! the password 0x5A in the top byte. WDOG counts in 1/65536 s ticks (20 bits, about 16 s).

use crate::mmio::RegisterBlock;

const RSTC: usize = 0x1C;
const RSTS: usize = 0x20;
const WDOG: usize = 0x24;
const PASSWORD: u32 = 0x5A00_0000;
const RSTC_WRCFG_MASK: u32 = 0x30;
const RSTC_WRCFG_FULL_RESET: u32 = 0x20;
const RSTC_RESET: u32 = 0x102;
const WDOG_TIME_MASK: u32 = 0x000F_FFFF;

/// Watchdog ticks per second.
pub const TICKS_PER_SECOND: u32 = 65_536;

/// Converts milliseconds to watchdog ticks, clamped to the 20-bit counter.
pub const fn millis_to_ticks(millis: u32) -> u32 {
    let ticks = (millis as u64 * TICKS_PER_SECOND as u64) / 1000;
    if ticks > WDOG_TIME_MASK as u64 {
        WDOG_TIME_MASK
    } else {
        ticks as u32
    }
}

/// The PM watchdog.
pub struct Watchdog {
    registers: RegisterBlock,
}

impl Watchdog {
    /// The PM block at its BCM2835 address.
    ///
    /// # Safety
    /// Only one `Watchdog` may exist.
    pub const unsafe fn new() -> Self {
        Self {
            // SAFETY: memory_map::POWER_MANAGEMENT is the PM block.
            registers: unsafe { RegisterBlock::new(crate::memory_map::POWER_MANAGEMENT) },
        }
    }

    /// Arms the watchdog: the board resets unless [`Watchdog::start`] is called again within
    /// `millis` milliseconds.
    pub fn start(&self, millis: u32) {
        let rstc = self.registers.register(RSTC).read() & !RSTC_WRCFG_MASK;
        self.registers
            .register(WDOG)
            .write(PASSWORD | millis_to_ticks(millis));
        self.registers
            .register(RSTC)
            .write(PASSWORD | rstc | RSTC_WRCFG_FULL_RESET);
    }

    /// Disarms the watchdog.
    pub fn stop(&self) {
        self.registers.register(RSTC).write(PASSWORD | RSTC_RESET);
    }

    /// The raw reset status register (which reset brought the board up).
    pub fn reset_status(&self) -> u32 {
        self.registers.register(RSTS).read()
    }

    /// Resets the board as soon as possible (about 150 us).
    pub fn reset(&self) -> ! {
        self.start(0);
        self.registers.register(WDOG).write(PASSWORD | 10);
        loop {
            core::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_are_clamped_to_twenty_bits() {
        assert_eq!(super::millis_to_ticks(1000), 65_536);
        assert_eq!(super::millis_to_ticks(15), 983);
        assert_eq!(super::millis_to_ticks(60_000), 0xF_FFFF);
    }
}
