//! One host channel: programming it for a transaction sequence, halting it, and collecting
//! its HCINT bits (from the register and from what the interrupt handler took).

use core::sync::atomic::Ordering;

use bramble_hal::usb::{DeviceTarget, Speed};

use super::registers::{self as reg, EndpointType, Haint, Hcchar, Hcint, Hctsiz, Hfnum};
use super::{CHANNEL_STATUS, Dwc2Host, dsb};
use crate::mmio::{FieldValue, Offset, RegisterBlock, TypedRegister, Value, Word};

/// `len` bytes in packets of `max_packet` bytes: the whole packets and the bytes left over.
/// Bulk and control endpoints' sizes are powers of two (8 to 512), and for them this is a shift
/// and a mask: the ARM1176 has no divide instruction, and the division routine it calls
/// instead cost about 80 instructions per USB transfer (twice per transfer, ten transfers per
/// page request). Other sizes (interrupt endpoints may have any) are divided.
pub(super) fn packets(len: usize, max_packet: u16) -> (usize, usize) {
    let mps = usize::from(max_packet.max(1));
    if mps.is_power_of_two() {
        (len >> mps.trailing_zeros(), len & (mps - 1))
    } else {
        (len / mps, len % mps)
    }
}

/// Deadline for a channel to halt after a disable request.
const HALT_TIMEOUT_US: u64 = 10_000;
/// HCINT bits that raise the controller interrupt for a channel (every halt, and bus errors).
pub(super) const HALT_INTERRUPTS: FieldValue<Hcint> =
    Hcint::HALTED.set().and(Hcint::AHB_ERROR.set());
/// HCINT bits that end a transfer at once: no retry cures a DMA error or babble.
pub(super) const FATAL_ERRORS: FieldValue<Hcint> = Hcint::AHB_ERROR.set().and(Hcint::BABBLE.set());

/// A data-stage direction and PID for one channel programming.
#[derive(Clone, Copy)]
pub(super) struct Transaction {
    pub(super) device: DeviceTarget,
    pub(super) endpoint: u8,
    pub(super) direction_in: bool,
    pub(super) kind: EndpointType,
    pub(super) max_packet: u16,
    pub(super) pid: u32,
    pub(super) bus_address: u32,
    pub(super) len: usize,
    /// Raise the controller interrupt when the channel halts. Quiet single attempts start
    /// without it: QEMU answers them while the enabling register write runs, so the driver
    /// looks at once and asks for the interrupt only if the attempt is still going.
    pub(super) interrupt_on_halt: bool,
}

/// Register `offset` of host channel `channel`'s block (`channel` below [`super::CHANNELS`]).
pub(super) fn channel_register<R>(
    registers: RegisterBlock,
    channel: usize,
    offset: Offset<R>,
) -> TypedRegister<R> {
    debug_assert!(channel < super::CHANNELS);
    // SAFETY: the DWC2 has a register block for each of its CHANNELS host channels.
    unsafe { registers.sub_block(reg::channel(channel)) }.at(offset)
}

impl Dwc2Host {
    pub(super) fn bus_address(&self, slice: &[u8]) -> u32 {
        crate::bus_address(slice.as_ptr() as usize)
    }

    /// Collects (and acknowledges) the channel's HCINT bits, including those the interrupt
    /// handler already took.
    pub(super) fn take_status(&self, channel: usize) -> Value<Hcint> {
        let register = self.ch(channel, reg::HCINT);
        let bits = register.read();
        if bits.bits() != 0 {
            register.write_value(bits);
        }
        bits.union(Value::from_bits(
            CHANNEL_STATUS[channel].swap(0, Ordering::AcqRel),
        ))
    }

    /// Stops a channel if it is enabled (bounded wait for the halt).
    pub(super) fn halt_channel(&self, channel: usize) {
        let chars = self.ch(channel, reg::HCCHAR);
        if chars.is_set(Hcchar::ENABLE) {
            chars.modify(Hcchar::DISABLE.set() + Hcchar::ENABLE.set());
            let deadline = self.micros() + HALT_TIMEOUT_US;
            while !self.ch(channel, reg::HCINT).is_set(Hcint::HALTED) && self.micros() < deadline {}
        }
        // Its HAINTMSK bit stays set: with HCINTMSK clear the channel raises nothing.
        self.ch(channel, reg::HCINTMSK).write(FieldValue::NONE);
        self.take_status(channel);
    }

    /// Programs and enables `channel` for one transaction sequence (§2.5 start sequence).
    pub(super) fn start_channel(&self, channel: usize, t: &Transaction) -> u32 {
        let (whole, rest) = packets(t.len, t.max_packet);
        // A zero-length packet is one packet.
        let packets = if t.len == 0 {
            1
        } else {
            whole + usize::from(rest != 0)
        } as u32;
        if self.ch(channel, reg::HCCHAR).is_set(Hcchar::ENABLE) {
            self.halt_channel(channel);
        }
        self.take_status(channel);
        self.ch(channel, reg::HCTSIZ).write(
            Hctsiz::TRANSFER_SIZE.val(t.len as u32)
                + Hctsiz::PACKET_COUNT.val(packets)
                + Hctsiz::PID.val(t.pid),
        );
        self.ch(channel, reg::HCDMA)
            .write(Word::ALL.val(t.bus_address));
        // No split transactions (the driver refuses devices behind a transaction
        // translator): HCSPLT is cleared once per channel and stays clear.
        let bit = 1u32 << channel;
        if self.hcsplt_cleared.get() & bit == 0 {
            self.ch(channel, reg::HCSPLT).write(FieldValue::NONE);
            self.hcsplt_cleared.set(self.hcsplt_cleared.get() | bit);
        }
        self.ch(channel, reg::HCINTMSK)
            .write(if t.interrupt_on_halt {
                HALT_INTERRUPTS
            } else {
                FieldValue::NONE
            });
        // Set once per channel (HCINTMSK decides what each transfer raises): a read and a
        // write fewer per transfer, each an exit from the emulated CPU under QEMU.
        if self.haintmsk.get() & bit == 0 {
            self.r(reg::HAINTMSK).modify(Haint::channel(channel).set());
            self.haintmsk.set(self.haintmsk.get() | bit);
        }
        let mut chars = Hcchar::MAX_PACKET.val(t.max_packet as u32)
            + Hcchar::ENDPOINT.val(t.endpoint as u32)
            + Hcchar::ENDPOINT_TYPE.val(t.kind as u32)
            + Hcchar::MULTI_COUNT.val(1)
            + Hcchar::DEVICE_ADDRESS.val(t.device.address as u32);
        if t.direction_in {
            chars = chars + Hcchar::DIRECTION_IN.set();
        }
        if t.device.speed == Speed::Low {
            chars = chars + Hcchar::LOW_SPEED.set();
        }
        if t.kind == EndpointType::Interrupt && !self.r(reg::HFNUM).is_set(Hfnum::ODD_FRAME) {
            // Periodic transfers go out in the next (odd) frame; read once, never spun on.
            chars = chars + Hcchar::ODD_FRAME.set();
        }
        dsb();
        self.ch(channel, reg::HCCHAR).write(chars);
        self.ch(channel, reg::HCCHAR)
            .write(chars + Hcchar::ENABLE.set());
        packets
    }
}
