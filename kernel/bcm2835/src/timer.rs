//! The BCM2835 system timer: a free-running 1 MHz, 64-bit counter with four compare channels
//! (BCM2835 ARM Peripherals, chapter 12). Channels 0 and 2 belong to the GPU; the kernel uses
//! channel 1 (IRQ 1) for its alarms.

use crate::mmio::RegisterBlock;
use bramble_hal::{Clock, Instant};
use core::sync::atomic::{AtomicBool, Ordering};

const CS: usize = 0x00;
const CLO: usize = 0x04;
const CHI: usize = 0x08;
const C1: usize = 0x10;
const C3: usize = 0x18;

/// A CLO at or above this many microseconds (16.7 s) past its wrap was read under the CHI
/// read just before it: for CHI to have been carried into in between, the two reads, two
/// instructions apart, would have to be that far apart. Below it (the first 16.7 s after
/// reset, and 16.7 s of every 71 minutes) CHI is read again.
const CARRY_WINDOW: u32 = 1 << 24;

/// Interrupt line of compare channel 1 (the kernel's alarms).
pub const ALARM_IRQ: u32 = 1;
/// Interrupt line of compare channel 3 (the software watchdog's tick).
pub const TICK_IRQ: u32 = 3;

/// Delays at least this long sleep in WFI once allowed (shorter ones are not worth an
/// interrupt).
pub const SLEEPING_DELAY_MIN_MICROS: u64 = 200;

/// Set by [`SystemTimer::allow_sleeping_delays`].
static SLEEPING_DELAYS: AtomicBool = AtomicBool::new(false);

/// Stops the core until an interrupt is pending (ARMv6 CP15 wait-for-interrupt); a spin hint
/// on the host, where the unit tests run.
fn wait_for_interrupt() {
    #[cfg(target_arch = "arm")]
    // SAFETY: WFI only stops the core until an interrupt is pending.
    unsafe {
        core::arch::asm!("mcr p15, 0, {0}, c7, c0, 4", in(reg) 0u32, options(nostack, preserves_flags))
    }
    #[cfg(not(target_arch = "arm"))]
    core::hint::spin_loop();
}

/// The system timer.
#[derive(Clone, Copy)]
pub struct SystemTimer {
    registers: RegisterBlock,
}

impl SystemTimer {
    /// The timer at its BCM2835 address.
    ///
    /// # Safety
    /// Only one owner may program compare channel 1.
    pub const unsafe fn new() -> Self {
        Self {
            // SAFETY: memory_map::SYSTEM_TIMER is the system timer.
            registers: unsafe { RegisterBlock::new(crate::memory_map::SYSTEM_TIMER) },
        }
    }

    /// Microseconds since the SoC came out of reset.
    ///
    /// Two register reads, CHI then CLO, unless CLO is within [`CARRY_WINDOW`] of its last
    /// wrap: then CHI may have moved on between the reads, and is read again. (Each read is
    /// an exit from the emulated CPU under QEMU, and the kernel reads the clock dozens of
    /// times per request; the third read was a third of them.)
    pub fn micros(&self) -> u64 {
        loop {
            let high = self.registers.register(CHI).read();
            let low = self.registers.register(CLO).read();
            if low >= CARRY_WINDOW || self.registers.register(CHI).read() == high {
                return ((high as u64) << 32) | low as u64;
            }
        }
    }

    /// Waits `micros` microseconds, for the delays hardware sequences need (USB resets and
    /// settle times, card power-up). Once [`SystemTimer::allow_sleeping_delays`] was called,
    /// delays of [`SLEEPING_DELAY_MIN_MICROS`] or more sleep in WFI until the channel-1 alarm
    /// (or any other interrupt) instead of spinning; the rest, and anything left after a
    /// wake-up, is busy-waited. The delay re-arms channel 1, so the caller's own alarm must
    /// be set again afterwards (the main loop sets it before every sleep).
    pub fn delay_micros(&self, micros: u64) {
        let end = self.micros() + micros;
        if micros >= SLEEPING_DELAY_MIN_MICROS && SLEEPING_DELAYS.load(Ordering::Acquire) {
            while self.micros() < end && self.set_alarm(Instant::from_micros(end)) {
                wait_for_interrupt();
            }
            self.clear_alarm();
        }
        while self.micros() < end {}
    }

    /// Lets [`SystemTimer::delay_micros`] sleep: call once the channel-1 interrupt is enabled
    /// in the interrupt controller (its handler must acknowledge it, as the alarm handler
    /// does). WFI wakes on a pending interrupt whether or not IRQs are masked in the CPU.
    pub fn allow_sleeping_delays(&self) {
        SLEEPING_DELAYS.store(true, Ordering::Release);
    }

    /// Arms compare channel 1 to raise [`ALARM_IRQ`] at `deadline`. Returns `false` (and arms
    /// nothing) if the deadline is already so close that the interrupt could be missed; the
    /// caller should then treat it as expired.
    pub fn set_alarm(&self, deadline: Instant) -> bool {
        self.clear_alarm();
        // The compare is against the low 32 bits: fine for deadlines under 71 minutes away.
        self.registers
            .register(C1)
            .write(deadline.as_micros() as u32);
        // If the counter passed the deadline while we wrote it, the match never happens.
        self.micros() + 2 < deadline.as_micros()
    }

    /// Acknowledges the channel-1 match.
    pub fn clear_alarm(&self) {
        self.registers.register(CS).write(1 << 1);
    }

    /// Arms compare channel 3 to raise [`TICK_IRQ`] `micros` from now (and acknowledges the
    /// previous match). Used for a periodic tick that does not depend on the main loop.
    pub fn schedule_tick(&self, micros: u32) {
        self.registers.register(CS).write(1 << 3);
        let low = self.registers.register(CLO).read();
        self.registers.register(C3).write(low.wrapping_add(micros));
    }
}

impl Clock for SystemTimer {
    fn now(&self) -> Instant {
        Instant::from_micros(self.micros())
    }
}
