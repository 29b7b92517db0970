//! The Bramble kernel: brings up the Pi, reports who and where it is, and serves.
//!
//! Init order (see `platform`): MMU and caches (boot stub) -> mailbox board facts -> console
//! -> banner and reset reason -> watchdogs -> SD card, settings and site -> power settings ->
//! USB and network -> main loop. The main loop sleeps in WFI whenever there is no work.
#![no_std]
#![no_main]
// The board wires the hardware, which takes unsafe code: driver statics at the SoC's fixed
// addresses, the entry points the boot stub calls (`#[unsafe(no_mangle)]`), the console's
// interrupt-fed ring, the reset record kept across resets, the `crash` command's deliberate
// faults. Every unsafe block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

mod acme;
mod appliance;
mod arena;
mod checksum;
mod clients;
mod commands;
mod console;
mod ddns;
mod entropy;
mod faults;
mod health;
mod live_switch;
mod network;
mod platform;
mod reach;
mod selftest;
mod site_slots;
mod status;
mod storage;
mod tls;

extern crate alloc;

use bramble_bcm2835::{dwc2, revision, timer, uart};
use bramble_boot::cpu;
use bramble_hal::Instant;
use bramble_status::Text;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use health::{Led, LedState};
use platform::{INTERRUPTS, TIMER};

/// Kernel version shown in the banner.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// `git describe` of the tree the kernel was built from.
pub const GIT_REVISION: &str = env!("BRAMBLE_GIT_REVISION");
/// `Bramble <version> (<revision>)`, one string: the banner starts with it, and since it sits
/// in kernel.img as these bytes, the host tool reads it back from any kernel.img (its own
/// embedded one for `bramble --version`, the one on a card for `bramble qemu --image`).
pub const KERNEL_ID: &str = concat!(
    "Bramble ",
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("BRAMBLE_GIT_REVISION"),
    ")"
);

/// Timer alarm interrupts taken since boot.
pub static ALARMS: AtomicU32 = AtomicU32::new(0);
/// Microseconds spent asleep in WFI since boot (busy time is uptime minus this).
static IDLE_MICROS: AtomicU64 = AtomicU64::new(0);
/// Main-loop passes, and how many of them ended asleep in WFI (the rest found work waiting).
static LOOPS: AtomicU64 = AtomicU64::new(0);
static SLEEPS: AtomicU64 = AtomicU64::new(0);
/// Passes that skipped sleeping because a deadline was already due.
static DUE_NOW: AtomicU64 = AtomicU64::new(0);

/// When each boot phase finished, in microseconds since reset (0: did not happen).
#[derive(Default)]
struct BootTimeline {
    mmu: u64,
    sd: u64,
    /// The site's index read from the card and verified (bodies come later, on demand).
    table: u64,
    usb: u64,
    address: u64,
    /// Serving: the address is up and the loop runs.
    ready: u64,
    /// The first response started going out.
    first_request: u64,
}

impl BootTimeline {
    fn print(&self) {
        log::info!(
            "boot phases: MMU {} us, SD {} us, table verified {} us, USB NIC {} us, address {} \
             us, ready {} us since reset{}",
            self.mmu,
            self.sd,
            self.table,
            self.usb,
            self.address,
            self.ready,
            FirstRequest(self.first_request)
        );
    }
}

/// The first-request stamp of the boot phases line, once there is one.
struct FirstRequest(u64);

impl core::fmt::Display for FirstRequest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            0 => Ok(()),
            at => write!(f, ", first request served {at} us"),
        }
    }
}

/// Called by the boot stub once the MMU and caches are on.
#[unsafe(no_mangle)]
fn kernel_main() -> ! {
    let mut timeline = BootTimeline {
        mmu: TIMER.micros(),
        ..BootTimeline::default()
    };
    let mut platform = platform::init();
    console::init_logger();
    print_banner(&platform, timeline.mmu);
    health::read_reset_reason();

    TIMER.clear_alarm();
    INTERRUPTS.register(timer::ALARM_IRQ, on_alarm);
    // From here on, hardware delays (USB resets, the card's power-up) sleep in WFI.
    TIMER.allow_sleeping_delays();
    platform::CONSOLE.enable_receive_interrupt();
    INTERRUPTS.register(uart::IRQ, console::on_uart_interrupt);
    health::start_watchdogs(platform::is_real_hardware(&platform.board));
    if !platform::is_real_hardware(&platform.board) {
        log::info!("platform: QEMU (board serial 0): PM watchdog off, RNDIS transfers padded");
    }
    // SAFETY: the dispatcher (`__bramble_irq`) and every registered handler are ready.
    unsafe { cpu::enable_irq() };
    // Before anything draws a key: the network's secrets, TLS and ACME all come from it.
    entropy::seed_at_boot();

    // 0 when the mailbox could not say: the EMMC driver then assumes the fastest base clock a
    // Pi 1 reports (250 MHz), so every card clock it sets errs slow.
    let emmc_clock = platform
        .board
        .as_ref()
        .map(|info| info.emmc_clock_hz)
        .unwrap_or(0);
    // The USB core needs 100 ms to settle after its reset: let that pass while the card is
    // read.
    let usb_controller = network::power_up(&mut platform.dma, platform.mailbox_buffer);
    let mut arena = arena::Arena::new(platform::free_memory(&platform.board));
    let card = storage::load(emmc_clock, &mut arena, &mut platform.dma);
    timeline.sd = storage::card_ready_at();
    timeline.table = storage::index_verified_at();
    health::feed();
    log::set_max_level(match card.settings.log_level {
        bramble_settings::LogLevel::Error => log::LevelFilter::Error,
        bramble_settings::LogLevel::Warn => log::LevelFilter::Warn,
        bramble_settings::LogLevel::Info => log::LevelFilter::Info,
        bramble_settings::LogLevel::Debug => log::LevelFilter::Debug,
        bramble_settings::LogLevel::Trace => log::LevelFilter::Trace,
    });
    let active_low = matches!(
        platform.board.as_ref().ok().and_then(|board| revision::decode(board.board_revision)),
        Some(decoded) if decoded.model.starts_with("Raspberry Pi Zero")
    );
    let mut led = Led::new(card.settings.led, active_low);
    platform::apply_power_settings(platform.mailbox_buffer, &card.settings);

    let site_ok = card.site.is_ok();
    let card_ok = !matches!(card.site, Err(storage::StorageError::Card(_)));
    let https_wanted = card.settings.https != bramble_settings::HttpsMode::Off;
    let clock_needed = https_wanted || card.settings.acme;
    let mut store = None;
    let mut sides = None;
    let site = match card.site {
        Ok(site) => {
            store = Some(site.store);
            sides = Some(site.sides);
            // Side 0's source, not the store's own: a response keeps reading the side it
            // started with when a publish switches the live site to the other.
            bramble_http::SiteSource::Store(site.index, &site.sides[0])
        }
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
    let board_mac = platform.board.as_ref().ok().map(|info| info.mac_address);
    let board_serial = platform.board.as_ref().map_or(0, |info| info.serial);
    let mut net = network::start(
        usb_controller,
        board_mac,
        board_serial,
        &card.settings,
        network::Content { site, card: store },
        &mut arena,
        !platform::is_real_hardware(&platform.board),
    );
    // The cache takes the RAM the connection pool left.
    if let Some(store) = store {
        storage::attach_cache(store, &mut arena);
    }
    let nic_present = net.as_ref().is_some_and(|n| n.device().is_present());
    timeline.usb = if nic_present { TIMER.micros() } else { 0 };
    health::set_budget(health::RUNNING_BUDGET_MICROS);
    log::info!(
        "{}",
        bramble_status::Stack {
            peak_bytes: bramble_boot::stack::peak_full(),
            size_bytes: bramble_boot::stack::size(),
        }
    );
    log::info!("ready: idle in WFI; type 'help' on this console for commands");

    let mut lines = console::LineReader::new();
    let mut commands = commands::Commands::new();
    // The USB interrupt count when the network was last polled.
    let mut polled_at_interrupt = None;
    // Whether the certificate was checked against the clock (once, when it is first set).
    let mut certificate_checked = false;
    // When the status page's figures were last refreshed.
    let mut status_refreshed: Option<u64> = None;
    // The site a live switch replaced, while its last responses are sent.
    let mut retiring: Option<live_switch::Retiring> = None;
    loop {
        LOOPS.fetch_add(1, Ordering::Relaxed);
        health::feed();
        // An overflow overwrites the exception stacks below and whatever an interrupt pushes
        // there: reset with the reason rather than run on with corrupted state.
        if bramble_boot::stack::overflowed() {
            panic!(
                "stack: the kernel's {} byte stack overflowed (deepest use seen: {} bytes)",
                bramble_boot::stack::size(),
                bramble_boot::stack::peak_full()
            );
        }
        let mut status_asked = false;
        let mut board_check_asked = false;
        let mut router_asked = None;
        let mut reboot_asked = false;
        lines.poll(|line| match commands.run(line) {
            Some(commands::Request::Status) => status_asked = true,
            Some(commands::Request::Router { again }) => router_asked = Some(again),
            Some(commands::Request::Reboot) => reboot_asked = true,
            Some(commands::Request::SelftestBoard) => board_check_asked = true,
            Some(commands::Request::ClearCache) => {
                if let Some(store) = store {
                    store.clear();
                    log::info!("cache: cleared; warm-up off until the next boot");
                }
            }
            None => {}
        });
        if let Some(again) = router_asked {
            status::router_command(net.as_deref_mut(), again);
        }
        if reboot_asked {
            // A clean shutdown: the router's mappings are deleted first.
            if let Some(appliance) = net.as_deref_mut() {
                status::stop_router(appliance);
            }
            commands::reboot();
        }
        let now = TIMER.micros();
        commands.poll(now);
        // Remember the USB interrupt count before polling: a completion that lands during
        // or after the poll changes it, and then we poll again instead of sleeping.
        let usb_interrupts = dwc2::interrupts_taken();
        let mut deadline = commands.next_deadline();
        let mut progress = health::Progress {
            card: card_ok,
            site: site_ok,
            usb: nic_present,
            clock_needed,
            https_wanted,
            ..health::Progress::default()
        };
        // Card reads first: a segment that arrived lets its responses go on in this pass.
        if let Some(store) = store {
            store.poll(Instant::from_micros(TIMER.micros()));
        }
        if let Some(appliance) = net.as_deref_mut() {
            let now = Instant::from_micros(TIMER.micros());
            // No USB interrupt since the last poll: only a timer woke us, and the appliance
            // may look at the NIC's timed work alone (under QEMU, the quiet receive path
            // polled every 10 ms) without walking the network stack.
            let next = if polled_at_interrupt == Some(usb_interrupts) {
                appliance.poll_timers(now)
            } else {
                appliance.poll(now)
            };
            polled_at_interrupt = Some(usb_interrupts);
            if let Some(record) = appliance.take_published() {
                match live_switch::switch_live(appliance, store, sides, &mut arena, &record) {
                    Ok(switched) => retiring = Some(switched),
                    Err(why) => {
                        // Boot serves the slot the record now names.
                        let live = record.slots[usize::from(record.live)];
                        log::warn!(
                            "publish: restarting to serve version {} from slot {}: no live \
                             switch ({why})",
                            live.version,
                            site_slots::slot_name(record.live)
                        );
                        status::stop_router(appliance);
                        commands::reboot();
                    }
                }
            }
            if let (Some(switch), Some(store)) = (retiring.as_ref(), store) {
                let left = appliance.retiring_responses().unwrap_or(0);
                let now = TIMER.micros();
                if left == 0 || now >= switch.deadline {
                    let _ = appliance.retire_site();
                    store.retire(switch.side);
                    log::info!(
                        "publish: slot {} retired {} ms after the switch, {left} responses \
                         still reading it (cut at the deadline); its blocks may be written again",
                        site_slots::slot_name(switch.slot),
                        now.saturating_sub(switch.at) / 1000,
                    );
                    retiring = None;
                }
            }
            // The idle slot is the retiring site's until it retires: no publish may write it.
            appliance.hold_publish(retiring.is_some());
            if status_refreshed
                .is_none_or(|at| TIMER.micros().saturating_sub(at) >= STATUS_REFRESH_MICROS)
            {
                status_refreshed = Some(TIMER.micros());
                let clock = appliance.unix_seconds(now);
                appliance.set_status_snapshot(status_snapshot(store, arena.remaining(), clock));
                // Each day's visitor salt comes from the CSPRNG (seeded at boot).
                let mut salt = [0u8; 16];
                if appliance.wants_visitor_salt()
                    && bramble_tls::random::RANDOM.fill_bytes(&mut salt).is_ok()
                {
                    appliance.offer_visitor_salt(salt);
                }
            }
            progress.link = appliance.link() == bramble_hal::LinkState::Up;
            progress.clock = appliance.unix_seconds(now).is_some();
            progress.https = appliance.tls_counters().is_some();
            if !certificate_checked && let Some(unix) = appliance.unix_seconds(now) {
                certificate_checked = true;
                tls::check_certificate(unix);
                appliance.set_notice(&tls::notice(Some(unix)));
            }
            if timeline.first_request == 0 && appliance.server().counters().bytes_sent > 0 {
                timeline.first_request = TIMER.micros();
                timeline.print();
            }
            if let Some([a, b, c, d]) = appliance.ipv4_address() {
                progress.address = true;
                if timeline.address == 0 {
                    timeline.address = TIMER.micros();
                    timeline.ready = TIMER.micros();
                    log::info!(
                        "serving: http://{a}.{b}.{c}.{d}/ at {} us since reset",
                        timeline.address
                    );
                    timeline.print();
                }
            }
            deadline = earliest(deadline, next.map(|next| next.as_micros()));
        }
        led.show(LedState::for_progress(progress));
        deadline = earliest(deadline, led.poll(now));
        deadline = earliest(deadline, entropy::poll(TIMER.micros()));
        if let Some(store) = store {
            deadline = earliest(deadline, store.next_deadline().map(|at| at.as_micros()));
        }
        if status_asked {
            print_status(net.as_deref_mut(), store, arena.remaining());
        }
        if board_check_asked {
            selftest::board(net.as_deref(), store);
        }
        sleep_until(deadline, usb_interrupts);
    }
}

/// Sleeps in WFI until `deadline` (µs) or an interrupt; returns at once if the deadline has
/// passed or the console or the USB controller (interrupt count no longer `usb_interrupts`)
/// already has news.
fn sleep_until(deadline: Option<u64>, usb_interrupts: u32) {
    if let Some(deadline) = deadline
        && !TIMER.set_alarm(Instant::from_micros(deadline))
    {
        DUE_NOW.fetch_add(1, Ordering::Relaxed);
        return; // already due: run the loop again instead of sleeping
    }
    // Mask, re-check, sleep: an interrupt arriving between the check and WFI still wakes
    // us, because WFI returns on a pending interrupt even while IRQs are masked.
    cpu::disable_irq();
    if !console::LineReader::pending() && dwc2::interrupts_taken() == usb_interrupts {
        let asleep = TIMER.micros();
        SLEEPS.fetch_add(1, Ordering::Relaxed);
        cpu::wait_for_interrupt();
        IDLE_MICROS.fetch_add(TIMER.micros() - asleep, Ordering::Relaxed);
    }
    // SAFETY: as above; unmasking lets the pending interrupt's handler run now.
    unsafe { cpu::enable_irq() };
}

fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// One line for the operator and the benchmark harness: uptime, busy time (outside WFI),
/// interrupts, resets, memory, and the server's counters.
/// How often the status page's and metrics' figures are refreshed.
const STATUS_REFRESH_MICROS: u64 = 1_000_000;

/// The board's figures for the status page and metrics (the appliance adds its own).
fn status_snapshot(
    store: Option<&storage::Store>,
    free_bytes: usize,
    unix_seconds: Option<u64>,
) -> bramble_http::status::StatusSnapshot {
    let (resets, _) = health::reset_counts();
    let used = bramble_boot::cpu::layout::heap_start() - bramble_boot::cpu::layout::kernel_start()
        + network::used_bytes()
        + storage::site_bytes();
    let cache = store.map(|store| store.counters());
    bramble_http::status::StatusSnapshot {
        uptime_micros: TIMER.micros(),
        reset_reason: health::last_reset_reason(),
        resets,
        memory_used: used as u64,
        memory_free: (free_bytes + storage::cache_bytes()) as u64,
        cache_hits: cache.as_ref().map_or(0, |c| c.hits),
        cache_misses: cache.as_ref().map_or(0, |c| c.misses),
        card_bytes_read: cache.as_ref().map_or(0, |c| c.bytes_read),
        clock_source: if unix_seconds.is_some() {
            "SNTP"
        } else {
            "not set"
        },
        unix_seconds,
        // A certificate from the card (ACME's, the appliance fills in).
        certificate_not_after: crate::tls::certificate()
            .map(|identity| identity.validity().not_after),
        ..Default::default()
    }
}

fn print_status(
    net: Option<&mut appliance::Network>,
    store: Option<&storage::Store>,
    free_bytes: usize,
) {
    let up = TIMER.micros();
    let idle = IDLE_MICROS.load(Ordering::Relaxed);
    let (resets, watchdog_resets) = health::reset_counts();
    let used_kib = (bramble_boot::cpu::layout::heap_start()
        - bramble_boot::cpu::layout::kernel_start())
        / 1024
        + network::used_bytes() / 1024
        + storage::site_bytes() / 1024;
    let line = bramble_status::Up {
        up_us: up,
        busy_us: up.saturating_sub(idle),
        idle_us: idle,
        timer_interrupts: ALARMS.load(Ordering::Relaxed),
        watchdog_ticks: health::ticks(),
        resets,
        watchdog_resets,
        memory_used_kib: used_kib,
        free_kib: (free_bytes + storage::cache_bytes()) / 1024,
        card_cache_kib: storage::cache_bytes() / 1024,
        loop_passes: LOOPS.load(Ordering::Relaxed),
        slept: SLEEPS.load(Ordering::Relaxed),
        deadline_due: DUE_NOW.load(Ordering::Relaxed),
        quiet_receive_wakes: net
            .as_ref()
            .map_or(0, |appliance| appliance.counters().quiet_polls),
    };
    log::info!("{line}");
    log::info!(
        "{}",
        bramble_status::Stack {
            peak_bytes: bramble_boot::stack::peak_full(),
            size_bytes: bramble_boot::stack::size(),
        }
    );
    if let Some(store) = store {
        let cache = store.counters();
        let lookups = cache.hits + cache.misses;
        let line = bramble_status::Cache {
            kib: cache.pages * cache.page_len / 1024,
            segments: cache.pages,
            used: cache.pages_used,
            hits: cache.hits,
            misses: cache.misses,
            hit_percent: (cache.hits * 100).checked_div(lookups).unwrap_or(0),
            card_bytes: cache.bytes_read,
            card_segments: cache.segments_read,
            warmed: cache.warmed,
            card_kb_per_s: cache.card_kilobytes_per_second(),
            read_errors: cache.read_errors,
            checksum_failures: cache.checksum_failures,
            body_failures: cache.body_failures,
            evictions: cache.evictions,
            longest_card_call_us: storage::longest_card_call_micros(),
        };
        log::info!("{line}");
        acme::print_card_writes(store);
    }
    entropy::print_status();
    if let Some(appliance) = net {
        let http = appliance.server().counters().clone();
        let phy = appliance.phy_counters();
        let pool = appliance.pool_counters();
        let line = bramble_status::Http {
            requests: http.requests,
            bytes: http.bytes_sent,
            open_connections: pool.open,
            accepted: pool.accepted,
            timeouts: pool.timeouts(),
            errors: http.errors(),
            frames_rx: phy.rx_frames,
            frames_tx: phy.tx_frames,
            rx_errors: phy.rx_errors,
            tx_dropped: phy.tx_dropped,
        };
        log::info!("{line}");
        let counters = appliance.counters();
        let addresses = appliance.addresses();
        let router = Router(appliance.ipv6_router());
        let line = bramble_status::Addresses {
            addresses: Text::Shown(&addresses),
            ipv6_router: Text::Shown(&router),
            over_ipv4: counters.connections_opened - counters.ipv6_connections_opened,
            over_ipv6: counters.ipv6_connections_opened,
        };
        log::info!("{line}");
        let line = bramble_status::Connections {
            pool: Text::Shown(&pool),
        };
        log::info!("{line}");
        if let Some(syslog) = appliance.syslog_counters() {
            let line = bramble_status::Syslog {
                sent: syslog.sent,
                dropped: syslog.dropped,
            };
            log::info!("{line}");
        }
        if let Some(pull) = appliance.pull_status(bramble_hal::Instant::from_micros(TIMER.micros()))
        {
            let line = bramble_status::Publish {
                checks: pull.checks,
                up_to_date: pull.up_to_date,
                published: pull.published,
                rolled_back: pull.rolled_back,
                refused: pull.refused,
                failed: pull.failed,
                live_version: pull.live_version,
                blocks: pull.blocks,
                last_blocks: pull.last_blocks,
                next_in: pull.next_in,
            };
            log::info!("{line}");
        }
        if let Some(uploads) = appliance.upload_counters() {
            let line = bramble_status::Uploads {
                heads: uploads.attempts,
                published: uploads.published,
                refused: uploads.refused,
                resumed: uploads.resumed,
                abandoned: uploads.abandoned,
                rolled_back: uploads.rolled_back,
                nudged: uploads.nudged,
            };
            log::info!("{line}");
        }
        if let Some(heartbeat) =
            appliance.heartbeat_status(bramble_hal::Instant::from_micros(TIMER.micros()))
        {
            let line = bramble_status::Heartbeat {
                sent: heartbeat.sent,
                answered: heartbeat.answered,
                failed: heartbeat.failed,
                next_in: heartbeat.next_in,
            };
            log::info!("{line}");
        }
        status::print_https(appliance);
        status::print_acme(appliance);
        ddns::print_status(appliance);
        reach::print_status(appliance);
        status::print_router(appliance);
        let nic = appliance.device_mut();
        let usb = nic.counters();
        let kind = nic.kind();
        let quiet_attempts = nic.host_mut().quiet_attempts();
        let waits = nic.host_mut().receive_waits();
        let line = bramble_status::Usb {
            kind: Text::Debugged(&kind),
            losses: usb.losses,
            reprobes: usb.reprobes_attempted,
            reprobes_found: usb.reprobes_succeeded,
            last_probe_error: Text::Debugged(&usb.last_probe_error),
            quiet_receive_attempts: quiet_attempts,
            receive_transfers: waits.completed,
            waited: waits.waited,
            wait_us: waits.wait_micros,
            wait_histogram: Text::Debugged(&waits.wait_histogram),
        };
        log::info!("{line}");
        if let Some(stats) = nic.nic().map(|device| device.stats()) {
            // Since the device was last probed.
            let line = bramble_status::Nic {
                rx_frames: stats.rx_frames,
                rx_dropped: stats.rx_errors,
                rx_transfer_errors: stats.rx_transfer_errors,
                tx_frames: stats.tx_frames,
                tx_transfer_errors: stats.tx_errors,
            };
            log::info!("{line}");
        }
    }
}

/// The IPv6 default router for the status line, or "none".
struct Router(Option<[u8; 16]>);

impl core::fmt::Display for Router {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(address) => write!(f, "{}", core::net::Ipv6Addr::from(address)),
            None => f.write_str("none"),
        }
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
    log::info!("{KERNEL_ID}: a web server with no operating system");
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
