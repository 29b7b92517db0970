//! The board: every peripheral instance, the DMA region and the init order live here.

use bramble_bcm2835::dma::DmaAllocator;
use bramble_bcm2835::gpio::{Function, Gpio, Pull};
use bramble_bcm2835::interrupts::InterruptController;
use bramble_bcm2835::mailbox::{BoardInfo, Mailbox, MailboxError, PropertyBuffer};
use bramble_bcm2835::power::Watchdog;
use bramble_bcm2835::timer::SystemTimer;
use bramble_bcm2835::uart::Pl011;

// Each peripheral below has exactly this one instance in the kernel, which is what each
// constructor's safety contract asks.
/// The serial console (PL011 on GPIO14/15).
// SAFETY: the kernel's only `Pl011`.
pub static CONSOLE: Pl011 = unsafe { Pl011::new() };
/// The 1 MHz system timer.
// SAFETY: the kernel's only `SystemTimer`, so compare channel 1 has one owner.
pub static TIMER: SystemTimer = unsafe { SystemTimer::new() };
/// The interrupt controller.
// SAFETY: the kernel's only `InterruptController`, so lines have one owner.
pub static INTERRUPTS: InterruptController = unsafe { InterruptController::new() };
/// The PM watchdog (board reset).
// SAFETY: the kernel's only `Watchdog`.
pub static WATCHDOG: Watchdog = unsafe { Watchdog::new() };
/// The VideoCore mailbox.
// SAFETY: the kernel's only `Mailbox`.
pub static MAILBOX: Mailbox = unsafe { Mailbox::new() };
/// GPIO.
// SAFETY: the kernel's only `Gpio`, so each pin has one owner.
pub static GPIO: Gpio = unsafe { Gpio::new() };

/// Baud rate of the serial console.
pub const CONSOLE_BAUD: u32 = 115_200;
/// UART reference clock assumed if the firmware does not say (QEMU and old firmware).
const DEFAULT_UART_CLOCK_HZ: u32 = 3_000_000;

/// Microseconds since reset.
pub fn micros() -> u64 {
    TIMER.micros()
}

/// What early init found.
pub struct Platform {
    /// Board facts from the firmware, if the mailbox answered.
    pub board: Result<BoardInfo, MailboxError>,
    /// Allocator for DMA buffers (USB, EMMC, mailbox).
    pub dma: DmaAllocator,
    /// The mailbox message buffer (in the DMA region).
    pub mailbox_buffer: &'static mut PropertyBuffer,
}

/// Brings up the console and reads the board facts. Called once, first thing.
pub fn init() -> Platform {
    // SAFETY: the linker reserves the .dma section for this allocator alone.
    let mut dma = unsafe { DmaAllocator::new(bramble_boot::cpu::layout::dma_region()) };
    let mailbox_buffer = dma
        .allocate(PropertyBuffer([0; 64]))
        .expect("the DMA region holds the mailbox buffer");
    let board = MAILBOX.board_info(mailbox_buffer, micros);
    let uart_clock = match &board {
        Ok(info) if info.uart_clock_hz != 0 => info.uart_clock_hz,
        _ => DEFAULT_UART_CLOCK_HZ,
    };
    GPIO.set_function(14, Function::Alt0);
    GPIO.set_function(15, Function::Alt0);
    GPIO.set_pull(14, Pull::None, |cycles| {
        TIMER.delay_micros(cycles.div_ceil(250) as u64)
    });
    GPIO.set_pull(15, Pull::None, |cycles| {
        TIMER.delay_micros(cycles.div_ceil(250) as u64)
    });
    CONSOLE.init(uart_clock, CONSOLE_BAUD);
    Platform {
        board,
        dma,
        mailbox_buffer,
    }
}

/// The RAM after everything the linker placed, up to the end of the ARM's memory: where the
/// site image is loaded. Call once.
pub fn free_memory(board: &Result<BoardInfo, MailboxError>) -> &'static mut [u8] {
    let start = bramble_boot::cpu::layout::heap_start();
    // Without the mailbox, assume the smallest split (256 MiB boards with gpu_mem=64 leave 192).
    let end = match board {
        Ok(info) => (info.arm_memory_base as usize + info.arm_memory_size as usize)
            .min(bramble_bcm2835::memory_map::RAM_END),
        Err(_) => 192 << 20,
    };
    // SAFETY: [heap_start, end) is RAM the linker left free, mapped by the MMU, and this is
    // its only owner (called once).
    unsafe { core::slice::from_raw_parts_mut(start as *mut u8, end.saturating_sub(start)) }
}

/// Whether this is a real board rather than QEMU: QEMU reports serial number 0, which no
/// Raspberry Pi has. Decides whether the PM watchdog (not modelled by QEMU 7.2) is armed.
pub fn is_real_hardware(board: &Result<BoardInfo, MailboxError>) -> bool {
    matches!(board, Ok(info) if info.serial != 0)
}

/// Applies the power settings of BRAMBLE.TXT: HDMI and composite video off unless asked for,
/// and an optional lower ARM clock.
pub fn apply_power_settings(buffer: &mut PropertyBuffer, settings: &bramble_settings::Settings) {
    use bramble_bcm2835::mailbox::{clock, domain};
    if !settings.hdmi {
        for (name, id) in [
            ("HDMI", domain::HDMI),
            ("composite video", domain::COMPOSITE),
        ] {
            match MAILBOX.set_domain(buffer, id, false, micros) {
                Ok(()) => log::info!("power: {name} off"),
                Err(error) => log::info!("power: {name} stays as the firmware left it ({error:?})"),
            }
        }
    }
    if let Some(mhz) = settings.arm_freq_mhz {
        match MAILBOX.set_clock_rate(buffer, clock::ARM, u32::from(mhz) * 1_000_000, micros) {
            Ok(hz) => log::info!("power: ARM clock now {} MHz", hz / 1_000_000),
            Err(error) => log::warn!("power: could not set the ARM clock: {error:?}"),
        }
    }
}

/// Resets the board through the PM watchdog.
pub fn reset() -> ! {
    CONSOLE.flush();
    WATCHDOG.reset()
}
