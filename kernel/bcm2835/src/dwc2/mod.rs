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
//! interrupt transfer, whose NAK halts the channel in QEMU's model) and issued again after an
//! interval that grows with the silence ([`QuietReceive::interval_after`]) until data comes;
//! then the pipe is parked again.
//!
//! Completion is visible by polling HCINT, so the driver works with interrupts off. With
//! [`Dwc2Host::enable_interrupts`] and [`handle_interrupt`] registered on [`IRQ`], a channel
//! halt wakes the core from WFI; the handler only records and acknowledges the channel's
//! HCINT bits, which the next [`UsbHost::poll`] collects.
//!
//! Where things are: `controller.rs` brings the core up and drives the root port;
//! `channel.rs` programs, halts and reads back one host channel; `control.rs` runs control
//! transfers on channel 0; `transfer.rs` schedules bulk and interrupt transfers on pipes
//! (segments, retries, restarts, quiet receive); [`registers`] names the registers and
//! their fields. This file holds the shared state, the interrupt handler and the
//! [`UsbHost`] implementation, which hands each operation to one of those.

mod channel;
mod control;
mod controller;
pub mod registers;
mod transfer;

use core::sync::atomic::{AtomicU32, Ordering};

use bramble_hal::usb::{
    DeviceTarget, PipeConfig, PipeId, SetupPacket, Speed, TransferStatus, UsbError, UsbHost,
};
use bramble_hal::{Clock, Instant};

use crate::dma::DmaError;
use crate::mmio::{FieldValue, Offset, RegisterBlock, TypedRegister};
use crate::timer::SystemTimer;
use channel::channel_register;
use registers as reg;
use registers::{Gintsts, Haint, Hprt0, pid};
use transfer::{Pipe, PipeState};

pub use controller::Dwc2Starting;
pub use registers::IRQ;
pub use transfer::{QuietReceive, ReceiveWaits};

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
/// Settle time after the core soft reset before the core is configured (U-Boot: "This
/// long sleep is very important, otherwise the core will not stay in host mode").
pub const CORE_SETTLE_US: u64 = 100_000;

/// HCINT bits the interrupt handler collected per channel; [`UsbHost::poll`] takes them.
static CHANNEL_STATUS: [AtomicU32; CHANNELS] = [const { AtomicU32::new(0) }; CHANNELS];
/// Interrupts taken by the handler (a generation counter for the idle loop).
static INTERRUPTS_TAKEN: AtomicU32 = AtomicU32::new(0);
/// Root port interrupts taken by the handler: while interrupts are on, the driver reads
/// HPRT0 again only when this has moved (see [`Dwc2Host::port_enabled`]).
static PORT_EVENTS: AtomicU32 = AtomicU32::new(0);

/// How many controller interrupts [`handle_interrupt`] has taken. The idle loop remembers
/// the value when it polls the NIC and, with IRQs masked, sleeps in WFI only if it is
/// unchanged: a completion whose interrupt ran between the poll and the WFI is not lost.
pub fn interrupts_taken() -> u32 {
    INTERRUPTS_TAKEN.load(Ordering::Acquire)
}

/// Why the controller could not be brought up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Whether [`Dwc2Host::enable_interrupts`] was called (the root port's changes then
    /// raise an interrupt that [`PORT_EVENTS`] counts).
    interrupts_on: bool,
    /// The last HPRT0 reading as (value of [`PORT_EVENTS`] then, port enabled).
    port_seen: core::cell::Cell<Option<(u32, bool)>>,
    /// What the driver last wrote to HAINTMSK (only the driver writes it).
    haintmsk: core::cell::Cell<u32>,
    /// Channels whose HCSPLT was cleared since the core was configured (one bit each).
    hcsplt_cleared: core::cell::Cell<u32>,
    /// See [`Dwc2Host::receive_waits`].
    receive_waits: ReceiveWaits,
    /// When an OUT transfer last started or a pipe was opened, µs: an answer to what was
    /// sent is likely soon, so a bulk-IN parks again, or polls at its shortest interval (see
    /// [`QuietReceive`]). A frame received without anything sent back does not count: on an
    /// idle link such strays (a neighbour's multicast) each held the receive path parked for
    /// 2 s and restarted its polling from 10 ms, most of the idle cost over a TAP link.
    last_activity_at: u64,
    /// A quiet bulk-IN waits for its next single attempt (`restart_at`): the next send makes
    /// it due at once (see [`Dwc2Host::start_transfer`]).
    quiet_restart_waiting: bool,
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
    // SAFETY: memory_map::USB is the DWC2 register block; the handler only reads status
    // registers and writes their write-1-to-clear bits, which the driver's own accesses
    // tolerate.
    let registers = unsafe { RegisterBlock::new(crate::memory_map::USB) };
    INTERRUPTS_TAKEN.fetch_add(1, Ordering::AcqRel);
    let pending = registers.at(reg::HAINT).read();
    for (channel, status) in CHANNEL_STATUS.iter().enumerate() {
        if pending.is_set(Haint::channel(channel)) {
            let hcint_register = channel_register(registers, channel, reg::HCINT);
            let bits = hcint_register.read();
            hcint_register.write_value(bits);
            status.fetch_or(bits.bits(), Ordering::AcqRel);
        }
    }
    if registers.at(reg::GINTSTS).is_set(Gintsts::PORT) {
        PORT_EVENTS.fetch_add(1, Ordering::AcqRel);
        let port = registers.at(reg::HPRT0).read();
        // Write the change bits back to clear them, never the enable bit (that disables);
        // power and a reset in progress are written back unchanged.
        registers
            .at(reg::HPRT0)
            .write_value(port.without(Hprt0::ENABLE.set()));
    }
}

impl Dwc2Host {
    /// Core or host register `offset`.
    fn r<R>(&self, offset: Offset<R>) -> TypedRegister<R> {
        self.registers.at(offset)
    }

    /// Register `offset` of host channel `channel`.
    fn ch<R>(&self, channel: usize, offset: Offset<R>) -> TypedRegister<R> {
        channel_register(self.registers, channel, offset)
    }

    fn micros(&self) -> u64 {
        self.timer.micros()
    }

    /// Polls `register` until the named fields have their values, at most `timeout_us`.
    fn wait_for<R>(
        &self,
        register: TypedRegister<R>,
        fields: FieldValue<R>,
        timeout_us: u64,
    ) -> bool {
        let deadline = self.micros() + timeout_us;
        loop {
            if register.read().matches(fields) {
                return true;
            }
            if self.micros() > deadline {
                return false;
            }
        }
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
        self.reset_port()
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
        let now = self.micros();
        self.pipes[index] = Some(Pipe {
            config,
            channel: index + 1,
            offset,
            len: config.buffer_len,
            pid: pid::DATA0,
            state: PipeState::Idle,
            last_data_at: now,
        });
        // A new pipe starts parked, for `after_micros`, like one that has just sent.
        self.last_activity_at = now;
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
            p.pid = pid::DATA0;
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
    fn poll_at(&self) -> Option<Instant> {
        self.next_restart().map(Instant::from_micros)
    }

    fn poll_timers(&mut self) -> bool {
        !self.poll_restarts()
    }
}
