//! Control transfers: SETUP, data and status stages run synchronously on channel 0, each
//! stage bounded by a deadline and retried a few times on transaction errors.

use bramble_hal::usb::{DeviceTarget, SetupPacket, UsbError};

use super::channel::{FATAL_ERRORS, Transaction};
use super::registers::{self as reg, EndpointType, Hcint, Hctsiz, pid};
use super::{CONTROL_BUFFER_LEN, CONTROL_CHANNEL, CONTROL_DATA_OFFSET, Dwc2Host, dsb};
use crate::mmio::Value;

/// Attempts per control stage.
const CONTROL_STAGE_TRIES: u8 = 3;
/// Deadline of one control stage (QEMU answers in well under a millisecond; real devices
/// may NAK a status stage for a while).
const CONTROL_STAGE_TIMEOUT_US: u64 = 500_000;

impl Dwc2Host {
    /// Runs one control stage on channel 0 and returns the bytes moved.
    pub(super) fn control_stage(
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
            kind: EndpointType::Control,
            max_packet: device.ep0_max_packet,
            pid,
            bus_address,
            len,
            interrupt_on_halt: true,
        };
        for _ in 0..CONTROL_STAGE_TRIES {
            self.start_channel(CONTROL_CHANNEL, &t);
            let deadline = self.micros() + CONTROL_STAGE_TIMEOUT_US;
            let mut status = Value::<Hcint>::from_bits(0);
            while !status.is_set(Hcint::HALTED) {
                status = status.union(self.take_status(CONTROL_CHANNEL));
                if status.is_set(Hcint::HALTED) {
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
            if status.is_set(Hcint::STALL) {
                return Err(UsbError::Stall);
            }
            if status.any(FATAL_ERRORS) {
                log::warn!("dwc2: control stage failed, HCINT {status:#x}");
                return Err(UsbError::Transfer);
            }
            if status.is_set(Hcint::TRANSFER_COMPLETE) {
                let remaining = self
                    .ch(CONTROL_CHANNEL, reg::HCTSIZ)
                    .read()
                    .get(Hctsiz::TRANSFER_SIZE) as usize;
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

    pub(super) fn control_transfer(
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
        self.control_stage(device, false, pid::SETUP, 0, 8)?;
        let mut moved = 0;
        if len > 0 {
            if setup.is_in() {
                // IN stages are programmed in whole packets (§2.5).
                let mps = device.ep0_max_packet.max(8) as usize;
                let request = len.div_ceil(mps) * mps;
                let request = request.min(capacity / mps * mps);
                moved = self
                    .control_stage(device, true, pid::DATA1, CONTROL_DATA_OFFSET, request)?
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
                moved = self.control_stage(device, false, pid::DATA1, CONTROL_DATA_OFFSET, len)?;
            }
        }
        // Status stage: the opposite direction, IN when there was no data stage.
        let status_in = len == 0 || !setup.is_in();
        self.control_stage(device, status_in, pid::DATA1, CONTROL_DATA_OFFSET, 0)?;
        Ok(moved)
    }
}
