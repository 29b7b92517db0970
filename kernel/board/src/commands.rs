//! Operator commands on the serial console: status, cache clear, reboot, timer, fault, hang and
//! memory-routine self-tests.

use crate::health::{self, ResetReason};
use crate::platform::TIMER;
use core::sync::atomic::Ordering;

/// A command the main loop must carry out itself (it needs state this module does not own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Print the status line.
    Status,
    /// Empty the card store's cache (and stop its warm-up): the next requests read the card.
    ClearCache,
    /// `selftest board`: the RNG, the card and the link, for a first board.
    SelftestBoard,
    /// `router`: the port mapping on the home router; `router again`: ask it again now.
    Router {
        /// Ask again now.
        again: bool,
    },
    /// `reboot`: the port mappings are deleted first (a clean shutdown), then the reset.
    Reboot,
}

/// Parses and runs console commands; owns the state of those that take time.
pub struct Commands {
    /// When a `sleep` command's alarm is due, and when it was asked for.
    sleep: Option<(u64, u64)>,
}

impl Commands {
    /// No command running.
    pub const fn new() -> Self {
        Self { sleep: None }
    }

    /// Runs one command line; returns what the caller must do, if anything.
    pub fn run(&mut self, line: &str) -> Option<Request> {
        let mut words = line.split_ascii_whitespace();
        match (words.next(), words.next()) {
            (Some("help"), _) => log::info!(
                "commands: status | log (the last lines logged) | cache clear (empty the card cache, to measure the card) | \
                 router (the port mapping on the home router) | router again (ask it now) | \
                 reboot | sleep MS (timer interrupt check) | \
                 crash undefined|data|prefetch|panic|hang|frozen (fault and watchdog checks) | \
                 selftest memory (the kernel's memcpy, memset, memcmp and checksum copy against references) | \
                 selftest board (RNG warm-up and health, card clock, bus and read speed with SITE.BIN's SHA-256, link)"
            ),
            (Some("status"), _) => return Some(Request::Status),
            (Some("log"), _) => crate::console::print_ring(),
            (Some("cache"), Some("clear")) => return Some(Request::ClearCache),
            (Some("reboot"), _) => return Some(Request::Reboot),
            (Some("router"), None) => return Some(Request::Router { again: false }),
            (Some("router"), Some("again")) => return Some(Request::Router { again: true }),
            (Some("sleep"), Some(millis)) => match millis.parse::<u64>() {
                Ok(millis) if millis <= 60_000 => {
                    let now = TIMER.micros();
                    self.sleep = Some((now + millis * 1000, now));
                }
                _ => log::warn!("sleep takes milliseconds, at most 60000"),
            },
            (Some("crash"), Some(kind)) => crash(kind),
            (Some("selftest"), Some("board")) => return Some(Request::SelftestBoard),
            (Some("selftest"), Some("memory")) => match crate::selftest::memory() {
                Ok(cases) => log::info!("selftest: memory ok, {cases} cases"),
                Err(failure) => log::error!(
                    "selftest: memory FAILED: {} with destination +{}, source +{}, {} bytes",
                    failure.routine,
                    failure.dst_align,
                    failure.src_align,
                    failure.len
                ),
            },
            (Some(other), _) => log::warn!("unknown command '{other}' (try 'help')"),
            (None, _) => {}
        }
        None
    }

    /// The next time [`Commands::poll`] has work, in microseconds since reset.
    pub fn next_deadline(&self) -> Option<u64> {
        self.sleep.map(|(due, _)| due)
    }

    /// Finishes commands whose time has come.
    pub fn poll(&mut self, now: u64) {
        if let Some((due, asked)) = self.sleep
            && now >= due
        {
            self.sleep = None;
            log::info!(
                "sleep: woke after {} us, {} timer interrupts so far",
                now - asked,
                crate::ALARMS.load(Ordering::Relaxed)
            );
        }
    }
}

/// Resets the board on the owner's request (after the main loop deleted the mappings).
pub fn reboot() -> ! {
    log::info!("rebooting");
    health::reset(ResetReason::Requested);
}

/// An address the MMU leaves unmapped: above the peripheral window (see `bramble_boot::mmu`).
const UNMAPPED: usize = 0x3000_0000;

fn crash(kind: &str) {
    log::warn!("crash: causing a {kind} fault on purpose");
    match kind {
        // Each of these three arms faults on purpose: the fault handler reports it and resets.
        "undefined" => {
            // SAFETY: a permanently undefined instruction; it traps before doing anything.
            unsafe { core::arch::asm!(".word 0xe7f000f0") }
        }
        "data" => {
            // SAFETY: the MMU leaves UNMAPPED unmapped, so the read aborts before it returns.
            unsafe { core::ptr::read_volatile(UNMAPPED as *const u32) };
        }
        "prefetch" => {
            // SAFETY: the jump to unmapped memory aborts at its first fetch; nothing there
            // ever runs.
            let target: extern "C" fn() = unsafe { core::mem::transmute(UNMAPPED) };
            target();
        }
        "panic" => panic!("panic requested on the console"),
        // The main loop stops making progress with interrupts still on, as a stuck driver
        // wait would: only the watchdog gets the board back.
        "hang" => loop {
            core::hint::spin_loop();
        },
        // Interrupts off as well, as a hang inside a critical section would be: the software
        // watchdog's tick cannot run, and only the PM hardware watchdog gets the board back
        // (armed here if the platform left it off: in QEMU, whose PM model resets the machine
        // at the arming write itself).
        "frozen" => {
            crate::health::arm_hardware_watchdog();
            bramble_boot::cpu::disable_irq();
            loop {
                core::hint::spin_loop();
            }
        }
        _ => log::warn!("crash kinds: undefined, data, prefetch, panic, hang, frozen"),
    }
}
