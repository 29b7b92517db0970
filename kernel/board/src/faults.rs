//! What happens when things go wrong: CPU exceptions and Rust panics are reported on the
//! serial console, then the board resets.

use crate::console::ConsoleWriter;
use crate::health::{self, ResetReason};
use crate::platform::TIMER;
use bramble_boot::{ExceptionFrame, ExceptionKind, cpu};
use core::fmt::Write;

/// How long the report stays on screen before the reset, in microseconds.
const RESET_DELAY_MICROS: u64 = 2_000_000;

/// Called by the boot stub's fault vectors.
#[unsafe(no_mangle)]
extern "C" fn __bramble_exception(frame: &ExceptionFrame) -> ! {
    cpu::disable_irq();
    let faults = cpu::fault_registers();
    let mut out = ConsoleWriter;
    let _ = write!(
        out,
        "\n!!! {:?} at pc {:#010x} (cpsr {:#010x})\n",
        frame.kind,
        frame.fault_pc(),
        frame.spsr
    );
    match frame.kind {
        ExceptionKind::DataAbort => {
            let _ = writeln!(
                out,
                "    fault address {:#010x}, status {:#06x} (DFSR)",
                faults.data_fault_address, faults.data_fault_status
            );
        }
        ExceptionKind::PrefetchAbort => {
            let _ = writeln!(
                out,
                "    fault address {:#010x}, status {:#06x} (IFSR)",
                faults.instruction_fault_address, faults.instruction_fault_status
            );
        }
        _ => {}
    }
    for (index, value) in frame.registers.iter().enumerate() {
        let _ = write!(out, "    r{index:<2} {value:#010x}");
        if index % 4 == 3 {
            let _ = writeln!(out);
        }
    }
    let _ = writeln!(out, "    lr  {:#010x}", frame.link_register);
    reset_after_delay(&mut out, ResetReason::Fault)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    cpu::disable_irq();
    let mut out = ConsoleWriter;
    let _ = write!(out, "\n!!! PANIC");
    if let Some(location) = info.location() {
        let _ = write!(out, " at {}:{}", location.file(), location.line());
    }
    let _ = writeln!(out, ": {}", info.message());
    reset_after_delay(&mut out, ResetReason::Panic)
}

fn reset_after_delay(out: &mut ConsoleWriter, reason: ResetReason) -> ! {
    let _ = writeln!(out, "!!! resetting in {} s", RESET_DELAY_MICROS / 1_000_000);
    // The hardware watchdog, if armed, must not cut the report short.
    health::feed();
    TIMER.delay_micros(RESET_DELAY_MICROS);
    health::reset(reason)
}
