//! The BCM2835 interrupt controller (BCM2835 ARM Peripherals, chapter 7) and a dispatch table.
//!
//! IRQ numbers: 0-63 are the GPU peripheral lines (pending registers 1 and 2; for example 1 and
//! 3 for system timer channels 1 and 3, 9 for USB, 57 for UART0, 62 for EMMC); 64-71 are the
//! "basic" ARM-side lines.

use crate::mmio::RegisterBlock;
use core::sync::atomic::{AtomicUsize, Ordering};

const IRQ_PENDING_1: usize = 0x04;
const IRQ_PENDING_2: usize = 0x08;
const ENABLE_IRQS_1: usize = 0x10;
const DISABLE_IRQS_1: usize = 0x1C;

/// Number of GPU peripheral interrupt lines.
pub const LINES: usize = 64;

/// A handler for one interrupt line. It runs in IRQ mode with IRQs masked, so it must be short
/// and must clear the source's interrupt condition.
pub type Handler = fn();

static HANDLERS: [AtomicUsize; LINES] = [const { AtomicUsize::new(0) }; LINES];

/// The interrupt controller.
pub struct InterruptController {
    registers: RegisterBlock,
}

impl InterruptController {
    /// The controller at its BCM2835 address.
    ///
    /// # Safety
    /// Only one owner may enable and disable lines.
    pub const unsafe fn new() -> Self {
        Self {
            // SAFETY: memory_map::INTERRUPT_CONTROLLER is the ARM interrupt registers.
            registers: unsafe { RegisterBlock::new(crate::memory_map::INTERRUPT_CONTROLLER) },
        }
    }

    /// Installs `handler` for `line` and enables the line.
    pub fn register(&self, line: u32, handler: Handler) {
        assert!(
            (line as usize) < LINES,
            "interrupt line {line} out of range"
        );
        HANDLERS[line as usize].store(handler as usize, Ordering::Release);
        let bank = (line / 32) as usize * 4;
        self.registers
            .register(ENABLE_IRQS_1 + bank)
            .write(1 << (line % 32));
    }

    /// Disables `line`.
    pub fn disable(&self, line: u32) {
        let bank = (line / 32) as usize * 4;
        self.registers
            .register(DISABLE_IRQS_1 + bank)
            .write(1 << (line % 32));
    }

    /// Whether any enabled GPU line is pending (usable with IRQs masked, before WFI).
    pub fn any_pending(&self) -> bool {
        self.registers.register(IRQ_PENDING_1).read() != 0
            || self.registers.register(IRQ_PENDING_2).read() != 0
    }

    /// Calls the handler of every pending line. Returns how many lines had no handler (they
    /// are disabled so that they cannot storm).
    pub fn dispatch(&self) -> u32 {
        let mut unhandled = 0;
        for bank in 0..2u32 {
            let mut pending = self
                .registers
                .register(IRQ_PENDING_1 + bank as usize * 4)
                .read();
            while pending != 0 {
                let bit = pending.trailing_zeros();
                pending &= pending - 1;
                let line = bank * 32 + bit;
                let handler = HANDLERS[line as usize].load(Ordering::Acquire);
                if handler == 0 {
                    self.disable(line);
                    unhandled += 1;
                } else {
                    // SAFETY: only `register` stores into HANDLERS, and it stores `fn()`
                    // pointers, so a non-zero value is a valid `Handler`.
                    let handler: Handler = unsafe { core::mem::transmute(handler) };
                    handler();
                }
            }
        }
        unhandled
    }
}
