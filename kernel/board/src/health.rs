//! Unattended recovery: watchdogs, the reason for the last reset, and the ACT LED.
//!
//! Two watchdogs guard the main loop, which calls [`feed`] each time it makes progress:
//! - a software watchdog on system-timer channel 3: a tick interrupt every two seconds checks
//!   how long ago the loop last fed it and resets the board past the budget (so within 2 s of
//!   it; a tick is a wake-up from WFI, which idle costs count). It catches hangs that
//!   leave interrupts on (a stuck driver wait, a livelock) and works everywhere, QEMU included;
//! - the PM hardware watchdog, restarted by every feed, which also catches hangs with
//!   interrupts off. QEMU 7.2 models the PM reset but not the watchdog countdown (any arming
//!   resets at once), so it is armed only on real hardware.
//!
//! The reason for every reset the kernel causes is kept in a `.noinit` record, which the boot
//! stub never clears, and printed at the next boot with running counts.

use crate::platform::{self, GPIO, TIMER, WATCHDOG};
use bramble_bcm2835::gpio::Function;
use bramble_bcm2835::timer::TICK_IRQ;
pub use bramble_hal::{LedPattern, LedState, Progress};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// How long the main loop may go without progress once serving.
pub const RUNNING_BUDGET_MICROS: u64 = 8_000_000;
/// How long a boot stage may take (reading a large site from the card is the longest).
pub const BOOT_BUDGET_MICROS: u64 = 300_000_000;
/// Hardware watchdog timeout: longer than any budget above would allow is pointless, and the
/// counter holds at most about 16 s.
const HARDWARE_TIMEOUT_MILLIS: u32 = 15_000;
/// The software watchdog's tick: a hang is caught between the budget and the budget plus this.
const TICK_MICROS: u32 = 2_000_000;

static LAST_FEED: AtomicU64 = AtomicU64::new(0);
static BUDGET: AtomicU64 = AtomicU64::new(BOOT_BUDGET_MICROS);
static HARDWARE_ARMED: AtomicBool = AtomicBool::new(false);
static TICKS: AtomicU32 = AtomicU32::new(0);

/// Why the board last reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ResetReason {
    /// No record: the power was off (RAM lost) or this is the first boot.
    PowerOn = 0,
    /// The kernel was running and did not record a reset: the hardware watchdog, or the
    /// reset pins / a brown-out that kept RAM.
    Unrecorded = 1,
    /// The software watchdog saw the main loop stuck.
    Watchdog = 2,
    /// A CPU exception (undefined instruction, abort).
    Fault = 3,
    /// A Rust panic.
    Panic = 4,
    /// Asked for on the console.
    Requested = 5,
}

impl ResetReason {
    fn from_u32(value: u32) -> Option<Self> {
        Some(match value {
            0 => ResetReason::PowerOn,
            1 => ResetReason::Unrecorded,
            2 => ResetReason::Watchdog,
            3 => ResetReason::Fault,
            4 => ResetReason::Panic,
            5 => ResetReason::Requested,
            _ => return None,
        })
    }

    fn describe(self) -> &'static str {
        match self {
            ResetReason::PowerOn => "power on",
            ResetReason::Unrecorded => "unrecorded reset (hardware watchdog or reset pin)",
            ResetReason::Watchdog => "watchdog: the main loop stopped making progress",
            ResetReason::Fault => "CPU fault",
            ResetReason::Panic => "panic",
            ResetReason::Requested => "reboot requested on the console",
        }
    }
}

/// Survives resets in `.noinit`. `check` guards against RAM garbage after a power cycle.
#[repr(C)]
struct ResetRecord {
    magic: u32,
    reason: u32,
    resets: u32,
    watchdog_resets: u32,
    check: u32,
}

const MAGIC: u32 = 0xB4A3_B1E5;

impl ResetRecord {
    fn checksum(&self) -> u32 {
        self.magic
            ^ self.reason.rotate_left(8)
            ^ self.resets.rotate_left(16)
            ^ self.watchdog_resets.rotate_left(24)
    }
}

#[unsafe(link_section = ".noinit")]
static mut RECORD: ResetRecord = ResetRecord {
    magic: 0,
    reason: 0,
    resets: 0,
    watchdog_resets: 0,
    check: 0,
};

fn record() -> &'static mut ResetRecord {
    // SAFETY: single core; the record is touched at boot, by `record_reset` right before a
    // reset (IRQs masked), and read by `status`; none of these run concurrently.
    unsafe { &mut *core::ptr::addr_of_mut!(RECORD) }
}

/// Reads and prints the previous reset's reason, then marks this run as running. Call once,
/// early.
pub fn read_reset_reason() {
    let record = record();
    let valid = record.magic == MAGIC && record.check == record.checksum();
    let reason = if valid {
        ResetReason::from_u32(record.reason)
    } else {
        None
    };
    let (reason, resets, watchdog_resets) = match reason {
        Some(reason) => {
            let watchdog = matches!(reason, ResetReason::Watchdog | ResetReason::Unrecorded) as u32;
            (reason, record.resets + 1, record.watchdog_resets + watchdog)
        }
        None => (ResetReason::PowerOn, 0, 0),
    };
    LAST_REASON.store(reason as u32, Ordering::Relaxed);
    record.magic = MAGIC;
    record.reason = ResetReason::Unrecorded as u32;
    record.resets = resets;
    record.watchdog_resets = watchdog_resets;
    record.check = record.checksum();
    log::info!(
        "reset: {}; {resets} reset(s) since power on, {watchdog_resets} by watchdog (PM status {:#x})",
        reason.describe(),
        WATCHDOG.reset_status()
    );
}

/// The previous reset's reason, as [`read_reset_reason`] found it.
static LAST_REASON: AtomicU32 = AtomicU32::new(ResetReason::PowerOn as u32);

/// Why the board last reset, in a few words (for the status page).
pub fn last_reset_reason() -> &'static str {
    ResetReason::from_u32(LAST_REASON.load(Ordering::Relaxed))
        .unwrap_or(ResetReason::PowerOn)
        .describe()
}

/// Records why the kernel is about to reset the board.
pub fn record_reset(reason: ResetReason) {
    let record = record();
    record.magic = MAGIC;
    record.reason = reason as u32;
    record.check = record.checksum();
}

/// Resets now, recording `reason`.
pub fn reset(reason: ResetReason) -> ! {
    record_reset(reason);
    platform::reset()
}

/// Starts both watchdogs with the boot budget. `real_hardware` arms the PM watchdog.
pub fn start_watchdogs(real_hardware: bool) {
    feed();
    TIMER.schedule_tick(TICK_MICROS);
    crate::platform::INTERRUPTS.register(TICK_IRQ, on_tick);
    if real_hardware {
        arm_hardware_watchdog();
    }
    log::info!(
        "watchdog: software tick every {} ms{}",
        TICK_MICROS / 1000,
        if real_hardware {
            ", PM hardware watchdog 15 s"
        } else {
            "; PM watchdog off (emulator)"
        }
    );
}

/// Arms the PM hardware watchdog (15 s), restarted by every [`feed`] from now on. At boot on
/// real hardware; in QEMU only by `crash frozen` (the console's check of this path), because
/// QEMU 7.2's PM model has no countdown and resets the machine as soon as the watchdog is
/// armed (the write of RSTC with the full-reset configuration), which is as far as QEMU can
/// show it.
pub fn arm_hardware_watchdog() {
    WATCHDOG.start(HARDWARE_TIMEOUT_MILLIS);
    HARDWARE_ARMED.store(true, Ordering::Relaxed);
}

/// Sets how long the loop may go without progress from now on.
pub fn set_budget(micros: u64) {
    BUDGET.store(micros, Ordering::Relaxed);
    feed();
}

/// Records progress: restarts both watchdogs.
pub fn feed() {
    LAST_FEED.store(TIMER.micros(), Ordering::Relaxed);
    if HARDWARE_ARMED.load(Ordering::Relaxed) {
        WATCHDOG.start(HARDWARE_TIMEOUT_MILLIS);
    }
}

/// Watchdog ticks taken (for `status`).
pub fn ticks() -> u32 {
    TICKS.load(Ordering::Relaxed)
}

/// Resets since power-on and how many were watchdog resets (for `status`).
pub fn reset_counts() -> (u32, u32) {
    let record = record();
    (record.resets, record.watchdog_resets)
}

fn on_tick() {
    TICKS.fetch_add(1, Ordering::Relaxed);
    TIMER.schedule_tick(TICK_MICROS);
    let stalled = TIMER
        .micros()
        .saturating_sub(LAST_FEED.load(Ordering::Relaxed));
    if stalled > BUDGET.load(Ordering::Relaxed) {
        log::error!("watchdog: no progress for {} ms; resetting", stalled / 1000);
        reset(ResetReason::Watchdog);
    }
}

/// The ACT LED (GPIO 47 on the B+, A+ and Zero; the Zero's is active low), showing the
/// patterns of [`LedPattern`].
pub struct Led {
    pattern: LedPattern,
    active_low: bool,
}

/// GPIO of the ACT LED on BCM2835 boards with the 40-pin header.
const LED_PIN: u32 = 47;

impl Led {
    /// Sets the pin up; `enabled = false` keeps the LED dark (BRAMBLE.TXT `led = off`).
    pub fn new(enabled: bool, active_low: bool) -> Self {
        GPIO.set_function(LED_PIN, Function::Output);
        let led = Led {
            pattern: LedPattern::new(enabled),
            active_low,
        };
        led.drive(false);
        led
    }

    fn drive(&self, on: bool) {
        GPIO.write(LED_PIN, on != self.active_low);
    }

    /// Switches to `state` (restarting its pattern if it changed).
    pub fn show(&mut self, state: LedState) {
        self.pattern.show(state);
    }

    /// Advances the pattern; returns when it next needs to run (microseconds since reset).
    pub fn poll(&mut self, now: u64) -> Option<u64> {
        if let Some(step) = self.pattern.poll(now) {
            self.drive(step.on);
        }
        self.pattern.next_change()
    }
}
