//! The Bramble kernel: brings up the Pi, reports who and where it is, and serves.
//!
//! Init order (see `platform`): MMU and caches (boot stub) -> mailbox board facts -> console
//! -> banner -> interrupts -> main loop. The main loop sleeps in WFI whenever there is no work.
#![no_std]
#![no_main]

mod arena;
mod commands;
mod console;
mod faults;
mod network;
mod platform;
mod storage;

use bramble_bcm2835::{revision, timer, uart};
use bramble_boot::cpu;
use bramble_hal::Instant;
use core::sync::atomic::{AtomicU32, Ordering};
use platform::{INTERRUPTS, TIMER};

/// Kernel version shown in the banner.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `git describe` of the tree the kernel was built from.
pub const GIT_REVISION: &str = env!("BRAMBLE_GIT_REVISION");

/// Timer alarm interrupts taken since boot.
pub static ALARMS: AtomicU32 = AtomicU32::new(0);

/// Called by the boot stub once the MMU and caches are on.
#[unsafe(no_mangle)]
fn kernel_main() -> ! {
    let mmu_up = TIMER.micros();
    let platform = platform::init();
    console::init_logger();
    print_banner(&platform, mmu_up);
    let mut platform = platform;
    let emmc_clock = platform
        .board
        .as_ref()
        .map(|info| info.emmc_clock_hz)
        .unwrap_or(0);
    let (card, free) = storage::load(emmc_clock, platform::free_memory(&platform.board));
    let mut arena = arena::Arena::new(free);
    let site = match card.site {
        Ok(site) => bramble_http::SiteSource::Ready(site),
        Err(problem) => {
            log::error!("site: {problem}; the server will answer with a diagnostic page");
            let mut text = heapless::String::<200>::new();
            let _ = core::fmt::Write::write_fmt(&mut text, format_args!("{problem}"));
            match arena.value(text) {
                Some(text) => bramble_http::SiteSource::Unavailable(text.as_str()),
                None => bramble_http::SiteSource::Unavailable("the site image could not be loaded"),
            }
        }
    };

    TIMER.clear_alarm();
    INTERRUPTS.register(timer::ALARM_IRQ, on_alarm);
    platform::CONSOLE.enable_receive_interrupt();
    INTERRUPTS.register(uart::IRQ, console::on_uart_interrupt);
    // SAFETY: the dispatcher (`__bramble_irq`) and every registered handler are ready.
    unsafe { cpu::enable_irq() };
    let board_mac = platform.board.as_ref().ok().map(|info| info.mac_address);
    let mut net = network::start(
        &mut platform.dma,
        platform.mailbox_buffer,
        board_mac,
        &card.settings,
        site,
        &mut arena,
    );
    log::info!("ready: idle in WFI; type 'help' on this console for commands");
    let mut address_reported = false;

    let mut lines = console::LineReader::new();
    let mut commands = commands::Commands::new();
    loop {
        lines.poll(|line| commands.run(line));
        commands.poll(TIMER.micros());
        // Remember the USB interrupt count before polling: a completion that lands during
        // or after the poll changes it, and then we poll again instead of sleeping.
        let usb_interrupts = bramble_bcm2835::dwc2::interrupts_taken();
        let mut deadline = commands.next_deadline();
        if let Some(appliance) = net.as_mut() {
            let next = appliance.poll(Instant::from_micros(TIMER.micros()));
            if !address_reported && let Some(address) = appliance.ipv4_address() {
                address_reported = true;
                let [a, b, c, d] = address;
                log::info!(
                    "serving: http://{a}.{b}.{c}.{d}/ at {} us since reset",
                    TIMER.micros()
                );
            }
            deadline = match (deadline, next.map(|next| next.as_micros())) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if let Some(deadline) = deadline
            && !TIMER.set_alarm(Instant::from_micros(deadline))
        {
            continue; // already due: run the loop again instead of sleeping
        }
        // Mask, re-check, sleep: an interrupt arriving between the check and WFI still wakes
        // us, because WFI returns on a pending interrupt even while IRQs are masked.
        cpu::disable_irq();
        if !console::LineReader::pending()
            && bramble_bcm2835::dwc2::interrupts_taken() == usb_interrupts
        {
            cpu::wait_for_interrupt();
        }
        // SAFETY: as above; unmasking lets the pending interrupt's handler run now.
        unsafe { cpu::enable_irq() };
    }
}

fn on_alarm() {
    TIMER.clear_alarm();
    ALARMS.fetch_add(1, Ordering::Relaxed);
}

/// Called by the boot stub's IRQ vector.
#[unsafe(no_mangle)]
extern "C" fn __bramble_irq() {
    let unhandled = INTERRUPTS.dispatch();
    if unhandled != 0 {
        log::warn!("disabled {unhandled} interrupt line(s) that had no handler");
    }
}

fn print_banner(platform: &platform::Platform, mmu_up: u64) {
    log::info!("Bramble {VERSION} ({GIT_REVISION}): a web server with no operating system");
    match &platform.board {
        Ok(board) => {
            match revision::decode(board.board_revision) {
                Some(decoded) => log::info!(
                    "board: {} rev {} ({}, {} MiB, made by {}), revision code {:#08x}",
                    decoded.model,
                    decoded.pcb_revision,
                    decoded.processor,
                    decoded.memory_mib,
                    decoded.manufacturer,
                    board.board_revision
                ),
                None => log::warn!("board: unknown revision code {:#08x}", board.board_revision),
            }
            log::info!(
                "memory: ARM has {} MiB at {:#010x}; kernel uses {} KiB",
                board.arm_memory_size >> 20,
                board.arm_memory_base,
                (bramble_boot::cpu::layout::heap_start()
                    - bramble_boot::cpu::layout::kernel_start())
                    / 1024
            );
            log::info!(
                "mac: {}, serial {:016x}, firmware {:#x}",
                bramble_hal::MacAddress(board.mac_address),
                board.serial,
                board.firmware_revision
            );
            log::info!(
                "clocks: ARM {} MHz, UART {} MHz, EMMC {} MHz",
                board.arm_clock_hz / 1_000_000,
                board.uart_clock_hz / 1_000_000,
                board.emmc_clock_hz / 1_000_000
            );
        }
        Err(error) => log::error!("mailbox: board facts unavailable: {error:?}"),
    }
    log::info!(
        "boot: MMU and caches on at {mmu_up} us, banner at {} us since reset",
        TIMER.micros()
    );
}
