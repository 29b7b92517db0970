//! One host channel: programming it for a transaction sequence, halting it, and collecting
//! its HCINT bits (from the register and from what the interrupt handler took).

use core::sync::atomic::Ordering;

use bramble_hal::usb::{DeviceTarget, Speed};

use super::registers::{self as reg, hcchar, hcint, hctsiz};
use super::{CHANNEL_STATUS, Dwc2Host, dsb};
use crate::mmio::{Register, RegisterBlock};

/// Deadline for a channel to halt after a disable request.
const HALT_TIMEOUT_US: u64 = 10_000;
/// HCINT bits that raise the controller interrupt for a channel (every halt, and bus errors).
pub(super) const HALT_INTERRUPTS: u32 = hcint::HALTED | hcint::AHB_ERROR;

/// A data-stage direction and PID for one channel programming.
#[derive(Clone, Copy)]
pub(super) struct Transaction {
    pub(super) device: DeviceTarget,
    pub(super) endpoint: u8,
    pub(super) direction_in: bool,
    pub(super) kind: u32,
    pub(super) max_packet: u16,
    pub(super) pid: u32,
    pub(super) bus_address: u32,
    pub(super) len: usize,
    /// Raise the controller interrupt when the channel halts. Quiet single attempts start
    /// without it: QEMU answers them while the enabling register write runs, so the driver
    /// looks at once and asks for the interrupt only if the attempt is still going.
    pub(super) interrupt_on_halt: bool,
}

pub(super) fn channel_register(
    registers: RegisterBlock,
    channel: usize,
    offset: usize,
) -> Register {
    registers.register(reg::channel(channel) + offset)
}

impl Dwc2Host {
    pub(super) fn bus_address(&self, slice: &[u8]) -> u32 {
        crate::bus_address(slice.as_ptr() as usize)
    }

    /// Collects (and acknowledges) the channel's HCINT bits, including those the interrupt
    /// handler already took.
    pub(super) fn take_status(&self, channel: usize) -> u32 {
        let register = self.ch(channel, reg::HCINT);
        let bits = register.read();
        if bits != 0 {
            register.write(bits);
        }
        bits | CHANNEL_STATUS[channel].swap(0, Ordering::AcqRel)
    }

    /// Stops a channel if it is enabled (bounded wait for the halt).
    pub(super) fn halt_channel(&self, channel: usize) {
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
    pub(super) fn start_channel(&self, channel: usize, t: &Transaction) -> u32 {
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
}
