//! Host-mode driver for the BCM2835's Synopsys DWC2 USB controller in buffer-DMA mode,
//! implementing [`bramble_hal::usb::UsbHost`].
//!
//! Bring-up follows the usb-ethernet reference §2.3 (USPi/Circle, hardware-proven): vendor
//! check (hardware 0x4F54280A, QEMU 0x4F54294A), core reset with the 100 ms settle, UTMI+
//! PHY, DMA on, FIFO sizes programmed (mandatory even with DMA, §2.10), root port powered.
//!
//! Channels: channel 0 runs control transfers synchronously (every stage bounded by a
//! deadline). Every pipe owns one of channels 1..=7 for its lifetime, so a bulk-IN can stay
//! parked on its channel: the controller (or QEMU, every 250 µs) retries NAKs by itself and
//! the transfer is never cancelled (§0.4, §2.7). Interrupt endpoints, whose NAK halts the
//! channel, are re-issued after their interval. Transaction errors are retried up to
//! [`MAX_TRANSFER_TRIES`] times from where the transfer stopped. Data toggles are read back
//! from HCTSIZ after every transfer and kept per pipe.
//!
//! DMA buffers come from the board's `.dma` section (normal, non-cacheable memory, so the L1
//! data cache never holds stale copies and needs no maintenance), 32-byte aligned, handed to
//! the controller through the 0x4000_0000 bus alias ([`crate::bus_address`], §2.6); a DSB
//! orders buffer writes before a channel is enabled.
//!
//! Under QEMU only ([`Dwc2Host::quiet_receive`]), a bulk-IN that has received nothing for a
//! while stops being parked: QEMU's model retries a parked NAK every 250 µs on the host's
//! CPU, for ever, so instead the transfer is issued as a single attempt (typed as an
//! interrupt transfer, whose NAK halts the channel in QEMU's model) and issued again after a
//! short interval until data comes; then the pipe is parked again.
//!
//! Completion is visible by polling HCINT, so the driver works with interrupts off. With
//! [`Dwc2Host::enable_interrupts`] and [`handle_interrupt`] registered on [`IRQ`], a channel
//! halt wakes the core from WFI; the handler only records and acknowledges the channel's
//! HCINT bits, which the next [`UsbHost::poll`] collects.

pub mod registers;

use core::sync::atomic::{AtomicU32, Ordering};

use bramble_hal::usb::{
    DeviceTarget, PipeConfig, PipeId, SetupPacket, Speed, TransferStatus, TransferType, UsbError,
    UsbHost,
};
use bramble_hal::{Clock, Instant};

use crate::dma::{DmaAllocator, DmaError};
use crate::mmio::{Register, RegisterBlock};
use crate::timer::SystemTimer;
use registers as reg;
use registers::{ahbcfg, gint, hcchar, hcint, hctsiz, hprt, rstctl, usbcfg};

pub use registers::IRQ;

/// Host channels the driver uses (the BCM2835 and QEMU both have 8).
pub const CHANNELS: usize = 8;
/// Channel reserved for control transfers.
const CONTROL_CHANNEL: usize = 0;
/// Pipes that can be open at once (one channel each).
pub const MAX_PIPES: usize = CHANNELS - 1;
/// DMA buffer for control transfers: the SETUP packet and up to 1 KiB of data stage.
const CONTROL_BUFFER_LEN: usize = 1024 + 32;
/// Offset of the data stage in the control buffer (cache-line aligned).
const CONTROL_DATA_OFFSET: usize = 32;
/// DMA memory shared by all pipes' buffers (SMSC95xx in burst mode needs about 21 KiB).
pub const PIPE_ARENA_LEN: usize = 48 * 1024;
/// Attempts per transfer on transaction errors (Circle's `MAX_BULK_TRIES`).
pub const MAX_TRANSFER_TRIES: u8 = 8;
/// Attempts per control stage.
const CONTROL_STAGE_TRIES: u8 = 3;
/// Deadline of one control stage (QEMU answers in well under a millisecond; real devices
/// may NAK a status stage for a while).
const CONTROL_STAGE_TIMEOUT_US: u64 = 500_000;
/// Deadline of a bulk-OUT transfer before it is abandoned.
const OUT_TRANSFER_TIMEOUT_US: u64 = 1_000_000;
/// Deadline for a channel to halt after a disable request.
const HALT_TIMEOUT_US: u64 = 10_000;
/// HCINT bits that raise the controller interrupt for a channel (every halt, and bus errors).
const HALT_INTERRUPTS: u32 = hcint::HALTED | hcint::AHB_ERROR;
/// Settle time after the core soft reset before the core is configured (U-Boot: "This
/// long sleep is very important, otherwise the core will not stay in host mode").
pub const CORE_SETTLE_US: u64 = 100_000;
/// Time to wait for a device to connect to the root port.
const CONNECT_TIMEOUT_MS: u32 = 500;

/// HCINT bits the interrupt handler collected per channel; [`UsbHost::poll`] takes them.
static CHANNEL_STATUS: [AtomicU32; CHANNELS] = [const { AtomicU32::new(0) }; CHANNELS];
/// Interrupts taken by the handler (a generation counter for the idle loop).
static INTERRUPTS_TAKEN: AtomicU32 = AtomicU32::new(0);

/// How many controller interrupts [`handle_interrupt`] has taken. The idle loop remembers
/// the value when it polls the NIC and, with IRQs masked, sleeps in WFI only if it is
/// unchanged: a completion whose interrupt ran between the poll and the WFI is not lost.
pub fn interrupts_taken() -> u32 {
    INTERRUPTS_TAKEN.load(Ordering::Acquire)
}

/// Why the controller could not be brought up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dwc2Error {
    /// GSNPSID is neither the BCM2835's nor QEMU's DWC2 (powered off, or not a DWC2).
    UnknownCore(u32),
    /// The core is not configured for internal DMA (GHWCFG2 arch != 2).
    NoInternalDma(u32),
    /// Soft reset or a FIFO flush did not complete.
    ResetTimeout,
    /// No DMA memory for the control buffer or the pipe arena.
    Dma(DmaError),
}

impl From<DmaError> for Dwc2Error {
    fn from(e: DmaError) -> Self {
        Dwc2Error::Dma(e)
    }
}

/// A data-stage direction and PID for one channel programming.
#[derive(Clone, Copy)]
struct Transaction {
    device: DeviceTarget,
    endpoint: u8,
    direction_in: bool,
    kind: u32,
    max_packet: u16,
    pid: u32,
    bus_address: u32,
    len: usize,
    /// Raise the controller interrupt when the channel halts. Quiet single attempts start
    /// without it: QEMU answers them while the enabling register write runs, so the driver
    /// looks at once and asks for the interrupt only if the attempt is still going.
    interrupt_on_halt: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Active {
    /// Bytes asked for (IN) or to send (OUT).
    requested: usize,
    /// Bytes moved by earlier segments (after retries).
    done: usize,
    /// Length and packet count of the segment now on the channel.
    segment_len: usize,
    segment_packets: u32,
    /// HCINT bits collected so far.
    status: u32,
    tries: u8,
    /// OUT: a zero-length packet still has to follow.
    zlp_pending: bool,
    /// Interrupt pipes after a NAK: re-issue at this time (µs).
    restart_at: Option<u64>,
    /// OUT: give up at this time (µs).
    deadline: Option<u64>,
    /// Bulk IN: bytes the current segment had received at the previous poll.
    seen_progress: usize,
    /// Bulk IN under [`Dwc2Host::quiet_receive`]: the segment on the channel is a single
    /// attempt that a NAK ends (the pipe was quiet when it started).
    quiet: bool,
    /// Bulk IN under [`Dwc2Host::quiet_receive`], parked: when to look at its progress
    /// again (µs), since no interrupt marks a message that ends without a short packet.
    check_at: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PipeState {
    Idle,
    Active(Active),
    Done(usize),
    /// A transfer that failed while [`Dwc2Host::poll_restarts`] serviced it; the next
    /// [`UsbHost::poll`] reports the error.
    Failed(UsbError),
}

struct Pipe {
    config: PipeConfig,
    channel: usize,
    offset: usize,
    len: usize,
    pid: u32,
    state: PipeState,
    /// When an IN transfer on this pipe last received data (or when it was opened), µs.
    last_data_at: u64,
}

/// How a quiet bulk-IN is polled instead of parked; see [`Dwc2Host::quiet_receive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuietReceive {
    /// A bulk-IN pipe that has received nothing for this long is quiet.
    pub after_micros: u64,
    /// A quiet pipe's single attempts are this far apart.
    pub interval_micros: u64,
    /// While a bulk-IN is parked (it received data within `after_micros`), how often its
    /// progress is looked at: a message of 64n bytes that QEMU's usb-net sends without a
    /// zero-length packet raises no interrupt, and is only found complete by looking (see
    /// [`Dwc2Host::end_bulk_in_on_idle_nak`]).
    pub parked_check_micros: u64,
}

/// What to do with a quiet bulk-IN segment that the controller halted without completing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuietHalt {
    /// NAK with nothing received: try again after the interval.
    TryAgainAt(u64),
    /// NAK after whole packets: the device has nothing more, the message is complete (QEMU's
    /// usb-net sends no zero-length packet after a message of 64n bytes).
    Complete,
    /// Not a NAK: an error, handled like any other halt.
    NotQuiet,
}

/// The earlier of two optional times.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Decides the outcome of a halted quiet segment from its HCINT bits and the bytes the whole
/// transfer has received so far.
fn quiet_halt(status: u32, received: usize, now: u64, quiet: QuietReceive) -> QuietHalt {
    if status & hcint::NAK == 0 || status & hcint::TRANSFER_COMPLETE != 0 {
        QuietHalt::NotQuiet
    } else if received > 0 {
        QuietHalt::Complete
    } else {
        QuietHalt::TryAgainAt(now + quiet.interval_micros)
    }
}

/// Whether a bulk-IN segment started now goes out as a single quiet attempt.
fn starts_quiet(quiet: Option<QuietReceive>, last_data_at: u64, now: u64) -> bool {
    quiet.is_some_and(|q| now.saturating_sub(last_data_at) >= q.after_micros)
}

/// The DWC2 host controller.
pub struct Dwc2Host {
    registers: RegisterBlock,
    timer: SystemTimer,
    control: &'static mut [u8],
    arena: &'static mut [u8],
    arena_used: usize,
    pipes: [Option<Pipe>; MAX_PIPES],
    channels: usize,
    /// See [`Dwc2Host::end_bulk_in_on_idle_nak`].
    end_bulk_in_on_idle_nak: bool,
    /// See [`Dwc2Host::quiet_receive`].
    quiet_receive: Option<QuietReceive>,
    /// Single attempts made on quiet bulk-IN pipes.
    quiet_attempts: u32,
}

fn channel_register(registers: RegisterBlock, channel: usize, offset: usize) -> Register {
    registers.register(reg::channel(channel) + offset)
}

/// Orders normal-memory writes (DMA buffers) before the device register write that starts
/// the DMA, and device reads before the CPU reads the buffer.
#[inline(always)]
fn dsb() {
    #[cfg(target_arch = "arm")]
    // SAFETY: "drain write buffer" (ARMv6 DSB) has no effect on memory safety.
    unsafe {
        core::arch::asm!("mcr p15, 0, {0}, c7, c10, 4", in(reg) 0u32, options(nostack))
    }
    #[cfg(not(target_arch = "arm"))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// The controller's interrupt handler: records and acknowledges every halted channel's HCINT
/// bits and root port changes. Register it on [`IRQ`] after [`Dwc2Host::enable_interrupts`].
pub fn handle_interrupt() {
    // SAFETY: BASE is the DWC2 register block; the handler only reads status registers and
    // writes their write-1-to-clear bits, which the driver's own accesses tolerate.
    let registers = unsafe { RegisterBlock::new(reg::BASE) };
    INTERRUPTS_TAKEN.fetch_add(1, Ordering::AcqRel);
    let pending = registers.register(reg::HAINT).read();
    for (channel, status) in CHANNEL_STATUS.iter().enumerate() {
        if pending & (1 << channel) != 0 {
            let hcint_register = channel_register(registers, channel, reg::HCINT);
            let bits = hcint_register.read();
            hcint_register.write(bits);
            status.fetch_or(bits, Ordering::AcqRel);
        }
    }
    if registers.register(reg::GINTSTS).read() & gint::PORT != 0 {
        let port = registers.register(reg::HPRT0).read();
        // Write the change bits back to clear them, never the enable bit (that disables);
        // power and a reset in progress are written back unchanged.
        registers.register(reg::HPRT0).write(port & !hprt::ENABLE);
    }
}

/// A controller whose core was reset and is settling into host mode: the first half of
/// bring-up, from [`Dwc2Host::start`]. Do other work meanwhile (the board reads the SD
/// card), then [`Dwc2Starting::finish`].
pub struct Dwc2Starting {
    host: Dwc2Host,
    /// When the core has settled (µs).
    settled_at: u64,
}

impl Dwc2Starting {
    /// Waits for whatever is left of the settle time, then configures the core (DMA, FIFOs)
    /// and powers the root port.
    pub fn finish(mut self) -> Result<Dwc2Host, Dwc2Error> {
        let now = self.host.micros();
        if now < self.settled_at {
            self.host.timer.delay_micros(self.settled_at - now);
        }
        self.host.configure_core()?;
        Ok(self.host)
    }
}

impl Dwc2Host {
    /// Brings the core up in host mode with DMA and powers the root port, waiting out the
    /// settle time after the core reset: [`Dwc2Host::start`] and [`Dwc2Starting::finish`]
    /// in one go.
    pub fn new(timer: SystemTimer, dma: &mut DmaAllocator) -> Result<Self, Dwc2Error> {
        Self::start(timer, dma)?.finish()
    }

    /// Checks the core and resets it; it then needs [`CORE_SETTLE_US`] to stay in host mode
    /// (U-Boot: "This long sleep is very important"), which the caller can spend on other
    /// work before [`Dwc2Starting::finish`]. The board must have powered the controller
    /// through the mailbox first (SET_POWER_STATE, device 3, reference §2.2). Takes its DMA
    /// buffers from `dma`.
    pub fn start(timer: SystemTimer, dma: &mut DmaAllocator) -> Result<Dwc2Starting, Dwc2Error> {
        // SAFETY: BASE is the DWC2 register block on every BCM2835 (and in QEMU).
        let registers = unsafe { RegisterBlock::new(reg::BASE) };
        let mut host = Self {
            registers,
            timer,
            control: dma.allocate_bytes(CONTROL_BUFFER_LEN)?,
            arena: dma.allocate_bytes(PIPE_ARENA_LEN)?,
            arena_used: 0,
            pipes: [const { None }; MAX_PIPES],
            channels: CHANNELS,
            end_bulk_in_on_idle_nak: false,
            quiet_receive: None,
            quiet_attempts: 0,
        };
        host.reset_core()?;
        Ok(Dwc2Starting {
            settled_at: host.micros() + CORE_SETTLE_US,
            host,
        })
    }

    fn r(&self, offset: usize) -> Register {
        self.registers.register(offset)
    }

    fn ch(&self, channel: usize, offset: usize) -> Register {
        channel_register(self.registers, channel, offset)
    }

    fn micros(&self) -> u64 {
        self.timer.micros()
    }

    /// Polls `register` until `(value & mask) == expected`, at most `timeout_us`.
    fn wait_for(&self, register: Register, mask: u32, expected: u32, timeout_us: u64) -> bool {
        let deadline = self.micros() + timeout_us;
        loop {
            if register.read() & mask == expected {
                return true;
            }
            if self.micros() > deadline {
                return false;
            }
        }
    }

    /// Vendor check and core soft reset (§2.3 steps 1-5).
    fn reset_core(&mut self) -> Result<(), Dwc2Error> {
        let id = self.r(reg::GSNPSID).read();
        if id != reg::SNPSID_BCM2835 && id != reg::SNPSID_QEMU {
            log::error!("dwc2: unknown core id {id:#010x}");
            return Err(Dwc2Error::UnknownCore(id));
        }
        self.r(reg::GAHBCFG)
            .modify(ahbcfg::GLOBAL_INTERRUPT_ENABLE, 0);
        self.r(reg::GUSBCFG)
            .modify(usbcfg::ULPI_EXT_VBUS_DRV | usbcfg::TERM_SEL_DL_PULSE, 0);

        // Core soft reset (§2.3 step 5).
        if !self.wait_for(
            self.r(reg::GRSTCTL),
            rstctl::AHB_IDLE,
            rstctl::AHB_IDLE,
            100_000,
        ) {
            return Err(Dwc2Error::ResetTimeout);
        }
        self.r(reg::GRSTCTL).write(rstctl::CORE_SOFT_RESET);
        if !self.wait_for(self.r(reg::GRSTCTL), rstctl::CORE_SOFT_RESET, 0, 10_000) {
            return Err(Dwc2Error::ResetTimeout);
        }
        Ok(())
    }

    /// Host-mode configuration after the settle time: PHY, DMA, FIFO sizes, interrupts off,
    /// root port powered.
    fn configure_core(&mut self) -> Result<(), Dwc2Error> {
        let id = self.r(reg::GSNPSID).read();
        self.r(reg::GUSBCFG).modify(
            usbcfg::ULPI_UTMI_SEL | usbcfg::PHY_IF | usbcfg::ULPI_FSLS | usbcfg::ULPI_CLK_SUS_M,
            0,
        );
        let hw2 = self.r(reg::GHWCFG2).read();
        if (hw2 >> 3) & 3 != 2 {
            return Err(Dwc2Error::NoInternalDma(hw2));
        }
        self.channels = ((((hw2 >> 14) & 0xF) + 1) as usize).min(CHANNELS);
        self.r(reg::GAHBCFG).modify(
            ahbcfg::AXI_BURST_MASK | ahbcfg::DMA_ENABLE | ahbcfg::WAIT_AXI_WRITES,
            ahbcfg::DMA_ENABLE | ahbcfg::WAIT_AXI_WRITES,
        );
        self.r(reg::GUSBCFG)
            .modify(usbcfg::HNP_CAP | usbcfg::SRP_CAP, 0);
        self.r(reg::GINTSTS).write(0xFFFF_FFFF);
        self.r(reg::PCGCCTL).write(0);
        self.r(reg::HCFG).modify(3, 0);

        // FIFO sizes in words (USPi/Circle values), mandatory even in DMA mode (§2.10).
        self.r(reg::GRXFSIZ).write(1024);
        self.r(reg::GNPTXFSIZ).write((1024 << 16) | 1024);
        self.r(reg::HPTXFSIZ).write((1024 << 16) | 2048);
        self.r(reg::GRSTCTL)
            .write(rstctl::TX_FIFO_FLUSH | rstctl::TX_FIFO_ALL);
        if !self.wait_for(self.r(reg::GRSTCTL), rstctl::TX_FIFO_FLUSH, 0, 10_000) {
            return Err(Dwc2Error::ResetTimeout);
        }
        self.r(reg::GRSTCTL).write(rstctl::RX_FIFO_FLUSH);
        if !self.wait_for(self.r(reg::GRSTCTL), rstctl::RX_FIFO_FLUSH, 0, 10_000) {
            return Err(Dwc2Error::ResetTimeout);
        }
        self.timer.delay_micros(1);

        self.r(reg::GINTMSK).write(0);
        self.r(reg::HAINTMSK).write(0);
        for channel in 0..self.channels {
            self.ch(channel, reg::HCINTMSK).write(0);
            self.ch(channel, reg::HCINT).write(0xFFFF_FFFF);
        }
        self.power_port();
        log::info!(
            "dwc2: core {}.{:03x} ({}), {} channels, buffer DMA",
            (id >> 12) & 0xF,
            id & 0xFFF,
            if id == reg::SNPSID_QEMU {
                "QEMU"
            } else {
                "BCM2835"
            },
            self.channels
        );
        Ok(())
    }

    /// Ends a bulk-IN transfer that has received whole packets and is then NAKed with no
    /// further progress, as if a zero-length packet had come. QEMU's usb-net sends no ZLP
    /// after an RNDIS message that is a multiple of 64 bytes, and QEMU's DWC2 model then
    /// keeps the transfer open until the next message arrives behind it (a request of such a
    /// size waited seconds for its answer). Only for QEMU: a real device terminates its
    /// transfers, and may NAK briefly in the middle of one.
    pub fn end_bulk_in_on_idle_nak(&mut self, on: bool) {
        self.end_bulk_in_on_idle_nak = on;
    }

    /// Polls a quiet bulk-IN instead of parking it: once a bulk-IN pipe has received nothing
    /// for `after_micros`, each of its segments is a single attempt (programmed as an
    /// interrupt transfer, which QEMU's model ends on the first NAK) repeated every
    /// `interval_micros` until data arrives; after that the pipe is parked again. QEMU's DWC2
    /// model retries a parked NAK every 250 µs on the host's CPU for as long as the transfer
    /// stays open, which is most of an idle QEMU's CPU use. The cost is up to one interval
    /// of extra latency for the first frame after a quiet spell. Only for QEMU: a real
    /// controller retries NAKs in hardware and a bulk endpoint must not be addressed as an
    /// interrupt endpoint. [`Dwc2Host::next_restart`] says when the loop must poll again.
    pub fn quiet_receive(&mut self, quiet: Option<QuietReceive>) {
        self.quiet_receive = quiet;
    }

    /// Single attempts made on quiet bulk-IN pipes so far (see [`Dwc2Host::quiet_receive`]).
    pub fn quiet_attempts(&self) -> u32 {
        self.quiet_attempts
    }

    /// The earliest time (µs) at which a pipe waits to issue its transfer again (interrupt
    /// pipes after a NAK, quiet bulk-IN pipes) or to look at a parked transfer's progress:
    /// the idle loop must poll by then, because no interrupt will come.
    pub fn next_restart(&self) -> Option<u64> {
        self.pipes
            .iter()
            .flatten()
            .filter_map(|pipe| match pipe.state {
                PipeState::Active(active) => earliest(active.restart_at, active.check_at),
                _ => None,
            })
            .min()
    }

    /// Services every pipe whose restart or progress check is due (see
    /// [`Dwc2Host::next_restart`]) and reports whether none of them has news (`true`: each
    /// is still waiting, so the layers above have nothing new and the idle loop can go back
    /// to sleep). `false` when one completed or failed: the next [`UsbHost::poll`] of that
    /// pipe reports it.
    pub fn poll_restarts(&mut self) -> bool {
        let now = self.micros();
        let mut all_quiet = true;
        for index in 0..MAX_PIPES {
            let due = match self.pipes[index].as_ref().map(|p| p.state) {
                Some(PipeState::Active(active)) => {
                    earliest(active.restart_at, active.check_at).is_some_and(|at| at <= now)
                }
                _ => false,
            };
            if !due {
                continue;
            }
            match self.service(index) {
                // Still waiting (an attempt in flight raises its halt interrupt later).
                Ok(TransferStatus::Pending) => {}
                Ok(_) => all_quiet = false,
                Err(error) => {
                    if let Some(pipe) = self.pipes[index].as_mut() {
                        pipe.state = PipeState::Failed(error);
                    }
                    all_quiet = false;
                }
            }
        }
        all_quiet
    }

    /// Enables the controller's interrupt output for channel halts and root port changes.
    /// Register [`handle_interrupt`] on [`IRQ`] first.
    pub fn enable_interrupts(&mut self) {
        self.r(reg::GINTSTS).write(0xFFFF_FFFF);
        self.r(reg::GINTMSK).write(gint::HOST_CHANNELS | gint::PORT);
        self.r(reg::GAHBCFG).modify(
            ahbcfg::GLOBAL_INTERRUPT_ENABLE,
            ahbcfg::GLOBAL_INTERRUPT_ENABLE,
        );
    }

    /// Whether a device is attached and the port enabled.
    pub fn port_enabled(&self) -> bool {
        let port = self.r(reg::HPRT0).read();
        port & (hprt::CONNECT_STATUS | hprt::ENABLE) == hprt::CONNECT_STATUS | hprt::ENABLE
    }

    /// Writes HPRT0 with `set` added, never writing 1 to a write-1-to-clear bit.
    fn write_port(&self, set: u32, clear: u32) {
        let port = self.r(reg::HPRT0).read() & !hprt::WRITE_CLEAR_MASK;
        self.r(reg::HPRT0).write((port | set) & !clear);
    }

    fn power_port(&self) {
        if self.r(reg::HPRT0).read() & hprt::POWER == 0 {
            self.write_port(hprt::POWER, 0);
        }
    }

    fn bus_address(&self, slice: &[u8]) -> u32 {
        crate::bus_address(slice.as_ptr() as usize)
    }

    /// Collects (and acknowledges) the channel's HCINT bits, including those the interrupt
    /// handler already took.
    fn take_status(&self, channel: usize) -> u32 {
        let register = self.ch(channel, reg::HCINT);
        let bits = register.read();
        if bits != 0 {
            register.write(bits);
        }
        bits | CHANNEL_STATUS[channel].swap(0, Ordering::AcqRel)
    }

    /// Stops a channel if it is enabled (bounded wait for the halt).
    fn halt_channel(&self, channel: usize) {
        let chars = self.ch(channel, reg::HCCHAR);
        if chars.read() & hcchar::ENABLE != 0 {
            chars.write(chars.read() | hcchar::DISABLE | hcchar::ENABLE);
            let deadline = self.micros() + HALT_TIMEOUT_US;
            while self.ch(channel, reg::HCINT).read() & hcint::HALTED == 0
                && self.micros() < deadline
            {}
        }
        self.ch(channel, reg::HCINTMSK).write(0);
        self.r(reg::HAINTMSK).modify(1 << channel, 0);
        self.take_status(channel);
    }

    /// Programs and enables `channel` for one transaction sequence (§2.5 start sequence).
    fn start_channel(&self, channel: usize, t: &Transaction) -> u32 {
        let mps = t.max_packet.max(1) as usize;
        let packets = if t.len == 0 { 1 } else { t.len.div_ceil(mps) } as u32;
        if self.ch(channel, reg::HCCHAR).read() & hcchar::ENABLE != 0 {
            self.halt_channel(channel);
        }
        self.take_status(channel);
        self.ch(channel, reg::HCTSIZ).write(
            (t.len as u32 & hctsiz::SIZE_MASK)
                | ((packets & hctsiz::PACKETS_MASK) << hctsiz::PACKETS_SHIFT)
                | (t.pid << hctsiz::PID_SHIFT),
        );
        self.ch(channel, reg::HCDMA).write(t.bus_address);
        self.ch(channel, reg::HCSPLT).write(0);
        self.ch(channel, reg::HCINTMSK)
            .write(if t.interrupt_on_halt {
                HALT_INTERRUPTS
            } else {
                0
            });
        self.r(reg::HAINTMSK).modify(1 << channel, 1 << channel);
        let mut chars = (t.max_packet as u32 & hcchar::MPS_MASK)
            | (((t.endpoint & 0x0F) as u32) << hcchar::EP_SHIFT)
            | (t.kind << hcchar::TYPE_SHIFT)
            | (1 << hcchar::MC_SHIFT)
            | (((t.device.address & 0x7F) as u32) << hcchar::ADDRESS_SHIFT);
        if t.direction_in {
            chars |= hcchar::EP_DIR_IN;
        }
        if t.device.speed == Speed::Low {
            chars |= hcchar::LOW_SPEED;
        }
        if t.kind == hcchar::TYPE_INTERRUPT && self.r(reg::HFNUM).read() & 1 == 0 {
            // Periodic transfers go out in the next (odd) frame; read once, never spun on.
            chars |= hcchar::ODD_FRAME;
        }
        dsb();
        self.ch(channel, reg::HCCHAR).write(chars);
        self.ch(channel, reg::HCCHAR).write(chars | hcchar::ENABLE);
        packets
    }

    /// Runs one control stage on channel 0 and returns the bytes moved.
    fn control_stage(
        &mut self,
        device: &DeviceTarget,
        direction_in: bool,
        pid: u32,
        offset: usize,
        len: usize,
    ) -> Result<usize, UsbError> {
        let bus_address = self.bus_address(&self.control[offset..]);
        let t = Transaction {
            device: *device,
            endpoint: 0,
            direction_in,
            kind: hcchar::TYPE_CONTROL,
            max_packet: device.ep0_max_packet,
            pid,
            bus_address,
            len,
            interrupt_on_halt: true,
        };
        for _ in 0..CONTROL_STAGE_TRIES {
            self.start_channel(CONTROL_CHANNEL, &t);
            let deadline = self.micros() + CONTROL_STAGE_TIMEOUT_US;
            let mut status = 0;
            while status & hcint::HALTED == 0 {
                status |= self.take_status(CONTROL_CHANNEL);
                if status & hcint::HALTED != 0 {
                    break;
                }
                if !self.port_enabled() {
                    self.halt_channel(CONTROL_CHANNEL);
                    return Err(UsbError::Disconnected);
                }
                if self.micros() > deadline {
                    self.halt_channel(CONTROL_CHANNEL);
                    return Err(UsbError::Timeout);
                }
            }
            dsb();
            if status & hcint::STALL != 0 {
                return Err(UsbError::Stall);
            }
            if status & (hcint::AHB_ERROR | hcint::BABBLE) != 0 {
                log::warn!("dwc2: control stage failed, HCINT {status:#x}");
                return Err(UsbError::Transfer);
            }
            if status & hcint::TRANSFER_COMPLETE != 0 {
                let remaining =
                    (self.ch(CONTROL_CHANNEL, reg::HCTSIZ).read() & hctsiz::SIZE_MASK) as usize;
                return Ok(if direction_in {
                    len.saturating_sub(remaining)
                } else {
                    len
                });
            }
            // Transaction error, toggle error or an unexplained halt: try the stage again.
        }
        Err(UsbError::Transfer)
    }

    fn control_transfer(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data_in: Option<&mut [u8]>,
        data_out: &[u8],
    ) -> Result<usize, UsbError> {
        if !self.port_enabled() {
            return Err(UsbError::Disconnected);
        }
        if device.translator.is_some() {
            log::warn!("dwc2: split transactions (FS/LS behind a HS hub) are not supported");
            return Err(UsbError::InvalidRequest);
        }
        let len = setup.length as usize;
        let capacity = CONTROL_BUFFER_LEN - CONTROL_DATA_OFFSET;
        if len > capacity {
            return Err(UsbError::InvalidRequest);
        }
        self.control[..8].copy_from_slice(&setup.to_bytes());
        self.control_stage(device, false, hctsiz::PID_SETUP, 0, 8)?;
        let mut moved = 0;
        if len > 0 {
            if setup.is_in() {
                // IN stages are programmed in whole packets (§2.5).
                let mps = device.ep0_max_packet.max(8) as usize;
                let request = len.div_ceil(mps) * mps;
                let request = request.min(capacity / mps * mps);
                moved = self
                    .control_stage(
                        device,
                        true,
                        hctsiz::PID_DATA1,
                        CONTROL_DATA_OFFSET,
                        request,
                    )?
                    .min(len);
                if let Some(out) = data_in {
                    let n = moved.min(out.len());
                    out[..n].copy_from_slice(
                        &self.control[CONTROL_DATA_OFFSET..CONTROL_DATA_OFFSET + n],
                    );
                    moved = n;
                }
            } else {
                self.control[CONTROL_DATA_OFFSET..CONTROL_DATA_OFFSET + len]
                    .copy_from_slice(data_out);
                moved =
                    self.control_stage(device, false, hctsiz::PID_DATA1, CONTROL_DATA_OFFSET, len)?;
            }
        }
        // Status stage: the opposite direction, IN when there was no data stage.
        let status_in = len == 0 || !setup.is_in();
        self.control_stage(device, status_in, hctsiz::PID_DATA1, CONTROL_DATA_OFFSET, 0)?;
        Ok(moved)
    }

    fn pipe_mut(&mut self, pipe: PipeId) -> Result<&mut Pipe, UsbError> {
        self.pipes
            .get_mut(pipe.0 as usize)
            .and_then(|p| p.as_mut())
            .ok_or(UsbError::InvalidRequest)
    }

    /// Programs the next segment of the pipe's active transfer.
    fn start_segment(&mut self, index: usize) {
        let Some(pipe) = self.pipes[index].as_ref() else {
            return;
        };
        let PipeState::Active(active) = pipe.state else {
            return;
        };
        let config = pipe.config;
        let len = active.requested - active.done;
        let offset = pipe.offset + active.done;
        let quiet = config.is_in()
            && config.transfer_type == TransferType::Bulk
            && starts_quiet(self.quiet_receive, pipe.last_data_at, self.micros());
        if quiet {
            self.quiet_attempts = self.quiet_attempts.wrapping_add(1);
        }
        let t = Transaction {
            device: config.device,
            endpoint: config.endpoint,
            direction_in: config.is_in(),
            kind: match config.transfer_type {
                TransferType::Bulk if quiet => hcchar::TYPE_INTERRUPT,
                TransferType::Bulk => hcchar::TYPE_BULK,
                TransferType::Interrupt => hcchar::TYPE_INTERRUPT,
            },
            max_packet: config.max_packet,
            pid: pipe.pid,
            bus_address: self.bus_address(&self.arena[offset..]),
            len,
            interrupt_on_halt: !quiet,
        };
        let packets = self.start_channel(pipe.channel, &t);
        if let Some(pipe) = self.pipes[index].as_mut()
            && let PipeState::Active(a) = &mut pipe.state
        {
            a.segment_len = len;
            a.segment_packets = packets;
            a.status = 0;
            a.quiet = quiet;
            // A new segment: a parked one is looked at again from its first poll on.
            a.check_at = None;
        }
    }

    fn start_transfer(
        &mut self,
        pipe: PipeId,
        len: usize,
        direction_in: bool,
    ) -> Result<(), UsbError> {
        if !self.port_enabled() {
            return Err(UsbError::Disconnected);
        }
        let now = self.micros();
        let p = self.pipe_mut(pipe)?;
        if p.config.is_in() != direction_in || len > p.len {
            return Err(UsbError::InvalidRequest);
        }
        if matches!(p.state, PipeState::Active(_)) {
            return Err(UsbError::InvalidRequest);
        }
        let mps = p.config.max_packet.max(1) as usize;
        if direction_in && !len.is_multiple_of(mps) {
            return Err(UsbError::InvalidRequest);
        }
        if p.config.device.translator.is_some() {
            return Err(UsbError::InvalidRequest);
        }
        p.state = PipeState::Active(Active {
            requested: len,
            done: 0,
            segment_len: 0,
            segment_packets: 0,
            status: 0,
            tries: 0,
            zlp_pending: !direction_in
                && p.config.zero_length_termination
                && len > 0
                && len.is_multiple_of(mps),
            restart_at: None,
            deadline: (!direction_in).then_some(now + OUT_TRANSFER_TIMEOUT_US),
            seen_progress: 0,
            quiet: false,
            check_at: None,
        });
        self.start_segment(pipe.0 as usize);
        Ok(())
    }

    /// Advances the pipe's transfer from the channel's state.
    fn service(&mut self, index: usize) -> Result<TransferStatus, UsbError> {
        let now = self.micros();
        let port_ok = self.port_enabled();
        let Some(pipe) = self.pipes[index].as_ref() else {
            return Err(UsbError::InvalidRequest);
        };
        let channel = pipe.channel;
        let config = pipe.config;
        let last_data_at = pipe.last_data_at;
        let PipeState::Active(mut a) = pipe.state else {
            unreachable!("service is only called on active pipes");
        };
        let fail = |host: &mut Self, e: UsbError| {
            host.halt_channel(channel);
            if let Some(p) = host.pipes[index].as_mut() {
                p.state = PipeState::Idle;
                if e == UsbError::Stall {
                    p.pid = hctsiz::PID_DATA0;
                }
            }
            Err(e)
        };
        if !port_ok {
            return fail(self, UsbError::Disconnected);
        }
        if let Some(at) = a.restart_at {
            if now < at {
                return Ok(TransferStatus::Pending);
            }
            a.restart_at = None;
            self.set_active(index, a);
            self.start_segment(index);
            return self.settle_quiet_attempt(index, channel);
        }
        let fresh = self.take_status(channel);
        a.status |= fresh;
        if a.status & hcint::HALTED == 0
            && !a.quiet
            && config.is_in()
            && config.transfer_type == TransferType::Bulk
            && a.done == 0
            && starts_quiet(self.quiet_receive, last_data_at, now)
        {
            // Parked with nothing received for the whole quiet period: take the transfer off
            // the channel and poll instead. Re-programming the channel also replaces the
            // packet QEMU's model keeps retrying (a halt alone does not stop it).
            self.halt_channel(channel);
            dsb();
            let remaining = (self.ch(channel, reg::HCTSIZ).read() & hctsiz::SIZE_MASK) as usize;
            let got = a.segment_len.saturating_sub(remaining);
            if got > 0 {
                // Data landed while the channel was being halted: hand it over as it is.
                return Ok(self.finish(index, got, now));
            }
            self.set_active(index, a);
            self.start_segment(index);
            return self.settle_quiet_attempt(index, channel);
        }
        if a.status & hcint::HALTED == 0
            && self.end_bulk_in_on_idle_nak
            && config.is_in()
            && config.transfer_type == TransferType::Bulk
        {
            let remaining = (self.ch(channel, reg::HCTSIZ).read() & hctsiz::SIZE_MASK) as usize;
            let got = a.segment_len.saturating_sub(remaining);
            let mps = config.max_packet.max(1) as usize;
            if got > 0
                && got.is_multiple_of(mps)
                && got == a.seen_progress
                && fresh & hcint::NAK != 0
            {
                // Whole packets, then a NAK with nothing new since the last poll: the message
                // is complete. Halting and later re-arming replaces QEMU's pending packet.
                self.halt_channel(channel);
                dsb();
                let pid = (self.ch(channel, reg::HCTSIZ).read() >> hctsiz::PID_SHIFT) & 3;
                if let Some(p) = self.pipes[index].as_mut() {
                    p.pid = pid;
                }
                return Ok(self.finish(index, a.done + got, now));
            }
            a.seen_progress = got;
            a.check_at = self.quiet_receive.map(|q| now + q.parked_check_micros);
        }
        if a.status & hcint::HALTED == 0 {
            self.set_active(index, a);
            if a.deadline.is_some_and(|d| now > d) {
                log::warn!(
                    "dwc2: bulk-OUT to endpoint {:#x} timed out",
                    config.endpoint
                );
                return fail(self, UsbError::Timeout);
            }
            return Ok(TransferStatus::Pending);
        }
        dsb();
        let status = a.status;
        a.status = 0;
        let size = self.ch(channel, reg::HCTSIZ).read();
        let remaining_bytes = (size & hctsiz::SIZE_MASK) as usize;
        let remaining_packets = (size >> hctsiz::PACKETS_SHIFT) & hctsiz::PACKETS_MASK;
        let pid = (size >> hctsiz::PID_SHIFT) & 3;
        let mps = config.max_packet.max(1) as usize;
        // Progress: IN from the byte count; OUT from the packet count (Xinu: XferSize is not
        // reliable for OUT).
        let moved = if config.is_in() {
            a.segment_len.saturating_sub(remaining_bytes)
        } else if status & hcint::TRANSFER_COMPLETE != 0 {
            // Without split transactions XferCompl is reliable; QEMU leaves PktCnt at 1
            // after a zero-length packet.
            a.segment_len
        } else {
            (((a.segment_packets.saturating_sub(remaining_packets)) as usize) * mps)
                .min(a.segment_len)
        };
        a.done += moved;
        if let Some(p) = self.pipes[index].as_mut() {
            p.pid = pid;
        }

        if status & hcint::STALL != 0 {
            return fail(self, UsbError::Stall);
        }
        if status & (hcint::AHB_ERROR | hcint::BABBLE) != 0 {
            log::warn!("dwc2: endpoint {:#x}: HCINT {status:#x}", config.endpoint);
            return fail(self, UsbError::Transfer);
        }
        if status & hcint::TRANSFER_COMPLETE != 0 {
            if a.zlp_pending {
                a.zlp_pending = false;
                a.requested = a.done;
                self.set_active(index, a);
                // A zero-length segment: requested == done gives len 0.
                self.start_segment(index);
                return Ok(TransferStatus::Pending);
            }
            let total = if config.is_in() { a.done } else { a.requested };
            return Ok(self.finish(index, total, now));
        }
        if a.quiet
            && let Some(quiet) = self.quiet_receive
        {
            match quiet_halt(status, a.done, now, quiet) {
                QuietHalt::TryAgainAt(at) => {
                    a.restart_at = Some(at);
                    self.set_active(index, a);
                    return Ok(TransferStatus::Pending);
                }
                QuietHalt::Complete => return Ok(self.finish(index, a.done, now)),
                QuietHalt::NotQuiet => {}
            }
        }
        if status & hcint::NAK != 0 && config.transfer_type == TransferType::Interrupt {
            // Nothing new; ask again after the endpoint's interval.
            a.restart_at = Some(now + config.interval_ms.max(1) as u64 * 1000);
            self.set_active(index, a);
            return Ok(TransferStatus::Pending);
        }
        // Transaction error, frame overrun, toggle error, or an unexplained halt: retry from
        // where the transfer stopped, a bounded number of times.
        a.tries += 1;
        if a.tries >= MAX_TRANSFER_TRIES {
            log::warn!(
                "dwc2: endpoint {:#x}: giving up after {} tries, HCINT {status:#x}",
                config.endpoint,
                a.tries
            );
            return fail(self, UsbError::Transfer);
        }
        self.set_active(index, a);
        self.start_segment(index);
        Ok(TransferStatus::Pending)
    }

    /// Right after a segment was started: if it is a quiet single attempt, QEMU has usually
    /// answered it already (a NAK, or a short message), and it is handled now rather than
    /// after an interrupt and another pass of the idle loop. Otherwise the halt interrupt is
    /// enabled; a halt that came in between raises it as soon as it is unmasked.
    fn settle_quiet_attempt(
        &mut self,
        index: usize,
        channel: usize,
    ) -> Result<TransferStatus, UsbError> {
        let quiet = matches!(
            self.pipes[index].as_ref().map(|p| p.state),
            Some(PipeState::Active(Active { quiet: true, .. }))
        );
        if !quiet {
            return Ok(TransferStatus::Pending);
        }
        if self.ch(channel, reg::HCINT).read() & hcint::HALTED != 0 {
            return self.service(index);
        }
        self.ch(channel, reg::HCINTMSK).write(HALT_INTERRUPTS);
        Ok(TransferStatus::Pending)
    }

    /// Marks the pipe's transfer complete with `total` bytes; an IN that received data
    /// makes the pipe busy again (see [`Dwc2Host::quiet_receive`]).
    fn finish(&mut self, index: usize, total: usize, now: u64) -> TransferStatus {
        if let Some(p) = self.pipes[index].as_mut() {
            p.state = PipeState::Done(total);
            if p.config.is_in() && total > 0 {
                p.last_data_at = now;
            }
        }
        TransferStatus::Complete(total)
    }

    fn set_active(&mut self, index: usize, a: Active) {
        if let Some(p) = self.pipes[index].as_mut() {
            p.state = PipeState::Active(a);
        }
    }

    fn close_all_pipes(&mut self) {
        for index in 0..MAX_PIPES {
            if self.pipes[index].is_some() {
                self.close_pipe(PipeId(index as u8));
            }
        }
        self.arena_used = 0;
    }
}

impl UsbHost for Dwc2Host {
    fn now(&self) -> Instant {
        self.timer.now()
    }

    fn delay_ms(&mut self, ms: u32) {
        self.timer.delay_micros(ms as u64 * 1000);
    }

    fn reset_root_port(&mut self) -> Result<Speed, UsbError> {
        self.close_all_pipes();
        self.halt_channel(CONTROL_CHANNEL);
        self.power_port();
        let mut connected = false;
        for _ in 0..CONNECT_TIMEOUT_MS {
            if self.r(reg::HPRT0).read() & hprt::CONNECT_STATUS != 0 {
                connected = true;
                break;
            }
            self.delay_ms(1);
        }
        if !connected {
            log::warn!("dwc2: nothing connected to the root port");
            return Err(UsbError::NoDevice);
        }
        self.delay_ms(100);
        self.write_port(hprt::RESET, 0);
        self.delay_ms(50);
        self.write_port(0, hprt::RESET);
        self.delay_ms(20);
        let port = self.r(reg::HPRT0).read();
        // Acknowledge connect/enable changes (write them back; never write ENABLE).
        self.r(reg::HPRT0)
            .write(port & !hprt::ENABLE & !hprt::RESET);
        if port & hprt::ENABLE == 0 {
            log::warn!("dwc2: root port did not enable after reset (HPRT0 {port:#x})");
            return Err(UsbError::NoDevice);
        }
        let speed = match (port >> hprt::SPEED_SHIFT) & 3 {
            0 => Speed::High,
            1 => Speed::Full,
            _ => Speed::Low,
        };
        log::info!("dwc2: root port enabled, {speed:?} speed device");
        Ok(speed)
    }

    fn control_in(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &mut [u8],
    ) -> Result<usize, UsbError> {
        if !setup.is_in() || data.len() < setup.length as usize {
            return Err(UsbError::InvalidRequest);
        }
        self.control_transfer(device, setup, Some(data), &[])
    }

    fn control_out(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &[u8],
    ) -> Result<(), UsbError> {
        if setup.is_in() || data.len() != setup.length as usize {
            return Err(UsbError::InvalidRequest);
        }
        self.control_transfer(device, setup, None, data).map(|_| ())
    }

    fn open_pipe(&mut self, config: PipeConfig) -> Result<PipeId, UsbError> {
        if config.is_in()
            && !config
                .buffer_len
                .is_multiple_of(config.max_packet.max(1) as usize)
        {
            return Err(UsbError::InvalidRequest);
        }
        let index = self
            .pipes
            .iter()
            .take(self.channels - 1)
            .position(|p| p.is_none())
            .ok_or(UsbError::NoResources)?;
        let len = config.buffer_len.next_multiple_of(32);
        if self.arena_used + len > self.arena.len() {
            return Err(UsbError::NoResources);
        }
        let offset = self.arena_used;
        self.arena_used += len;
        self.pipes[index] = Some(Pipe {
            config,
            channel: index + 1,
            offset,
            len: config.buffer_len,
            pid: hctsiz::PID_DATA0,
            state: PipeState::Idle,
            last_data_at: self.micros(),
        });
        Ok(PipeId(index as u8))
    }

    fn close_pipe(&mut self, pipe: PipeId) {
        let Some(p) = self.pipes.get_mut(pipe.0 as usize).and_then(|p| p.take()) else {
            return;
        };
        self.halt_channel(p.channel);
        if self.pipes.iter().all(|p| p.is_none()) {
            self.arena_used = 0;
        }
    }

    fn reset_data_toggle(&mut self, pipe: PipeId) {
        if let Ok(p) = self.pipe_mut(pipe) {
            p.pid = hctsiz::PID_DATA0;
        }
    }

    fn start_in(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError> {
        self.start_transfer(pipe, len, true)
    }

    fn received(&self, pipe: PipeId) -> &[u8] {
        match self.pipes.get(pipe.0 as usize).and_then(|p| p.as_ref()) {
            Some(p) if p.config.is_in() => match p.state {
                PipeState::Done(n) => &self.arena[p.offset..p.offset + n.min(p.len)],
                _ => &[],
            },
            _ => &[],
        }
    }

    fn out_buffer(&mut self, pipe: PipeId) -> &mut [u8] {
        match self.pipes.get(pipe.0 as usize).and_then(|p| p.as_ref()) {
            Some(p) if !p.config.is_in() && !matches!(p.state, PipeState::Active(_)) => {
                let (offset, len) = (p.offset, p.len);
                &mut self.arena[offset..offset + len]
            }
            _ => &mut [],
        }
    }

    fn start_out(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError> {
        self.start_transfer(pipe, len, false)
    }

    fn poll(&mut self, pipe: PipeId) -> Result<TransferStatus, UsbError> {
        let index = pipe.0 as usize;
        let state = self
            .pipes
            .get(index)
            .and_then(|p| p.as_ref())
            .map(|p| p.state)
            .ok_or(UsbError::InvalidRequest)?;
        match state {
            PipeState::Idle => Ok(TransferStatus::Idle),
            PipeState::Done(n) => Ok(TransferStatus::Complete(n)),
            PipeState::Active(_) => self.service(index),
            PipeState::Failed(error) => {
                if let Some(pipe) = self.pipes[index].as_mut() {
                    pipe.state = PipeState::Idle;
                }
                Err(error)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUIET: QuietReceive = QuietReceive {
        after_micros: 2_000_000,
        interval_micros: 10_000,
        parked_check_micros: 5_000,
    };

    #[test]
    fn a_pipe_turns_quiet_only_after_the_silence_and_only_when_enabled() {
        assert!(!starts_quiet(None, 0, 60_000_000));
        assert!(!starts_quiet(Some(QUIET), 5_000_000, 6_999_999));
        assert!(starts_quiet(Some(QUIET), 5_000_000, 7_000_000));
        // A clock that reads earlier than the last data (never expected) is not quiet.
        assert!(!starts_quiet(Some(QUIET), 5_000_000, 4_000_000));
    }

    #[test]
    fn a_nak_with_nothing_received_waits_one_interval() {
        let halted_on_nak = hcint::HALTED | hcint::NAK;
        assert_eq!(
            quiet_halt(halted_on_nak, 0, 1_000, QUIET),
            QuietHalt::TryAgainAt(11_000)
        );
    }

    #[test]
    fn a_nak_after_whole_packets_completes_the_message() {
        assert_eq!(
            quiet_halt(hcint::HALTED | hcint::NAK, 128, 1_000, QUIET),
            QuietHalt::Complete
        );
    }

    #[test]
    fn errors_and_completions_are_not_quiet_outcomes() {
        assert_eq!(
            quiet_halt(hcint::HALTED | hcint::TRANSFER_COMPLETE, 64, 0, QUIET),
            QuietHalt::NotQuiet
        );
        assert_eq!(
            quiet_halt(hcint::HALTED | hcint::TRANSACTION_ERROR, 0, 0, QUIET),
            QuietHalt::NotQuiet
        );
    }
}
