//! What the three USB Ethernet drivers share: counters, error mapping, bulk pipe set-up and
//! the transmit path bookkeeping.

use bramble_hal::{DeviceError, Instant};

use crate::descriptor::Endpoint;
use crate::device::{UsbDevice, clear_endpoint_halt, request};
use bramble_hal::usb::{
    PipeConfig, PipeId, SetupPacket, TransferStatus, TransferType, UsbError, UsbHost,
};

/// Receive buffer size for drivers that get one frame per transfer: a multiple of 512 (HS)
/// and 64 (FS), and above QEMU's 1,536-byte "small transfer" threshold so a whole frame
/// moves in one emulated transaction (reference §2.5, §4.2).
pub const RX_BUFFER_LEN: usize = 2048;

/// Traffic and error counters of a USB NIC driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Frames handed to the stack.
    pub rx_frames: u32,
    /// Frames or transfers dropped as malformed or flagged bad by the device.
    pub rx_errors: u32,
    /// Failed receive transfers (USB level).
    pub rx_transfer_errors: u32,
    /// Frames handed to the device.
    pub tx_frames: u32,
    /// Transmit transfers that failed (USB level).
    pub tx_errors: u32,
}

/// Maps a USB failure to what the network stack needs to know.
pub fn device_error(e: UsbError) -> DeviceError {
    match e {
        UsbError::Disconnected | UsbError::NoDevice => DeviceError::Gone,
        _ => DeviceError::Transfer,
    }
}

/// A bulk IN/OUT pipe pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkPipes {
    /// Receive pipe.
    pub rx: PipeId,
    /// Transmit pipe.
    pub tx: PipeId,
    /// Bulk-IN endpoint address (for CLEAR_FEATURE(HALT)).
    pub rx_endpoint: u8,
    /// Bulk-OUT max packet size.
    pub tx_max_packet: u16,
}

/// Opens the bulk pair of `device`.
pub fn open_bulk_pipes<H: UsbHost + ?Sized>(
    host: &mut H,
    device: &UsbDevice,
    bulk_in: Endpoint,
    bulk_out: Endpoint,
    rx_len: usize,
    tx_len: usize,
    zero_length_termination: bool,
) -> Result<BulkPipes, UsbError> {
    let rx = host.open_pipe(PipeConfig {
        device: device.target,
        endpoint: bulk_in.address,
        transfer_type: TransferType::Bulk,
        max_packet: bulk_in.max_packet_size,
        interval_ms: 0,
        buffer_len: rx_len,
        zero_length_termination: false,
    })?;
    let tx = match host.open_pipe(PipeConfig {
        device: device.target,
        endpoint: bulk_out.address,
        transfer_type: TransferType::Bulk,
        max_packet: bulk_out.max_packet_size,
        interval_ms: 0,
        buffer_len: tx_len,
        zero_length_termination,
    }) {
        Ok(tx) => tx,
        Err(e) => {
            host.close_pipe(rx);
            return Err(e);
        }
    };
    Ok(BulkPipes {
        rx,
        tx,
        rx_endpoint: bulk_in.address,
        tx_max_packet: bulk_out.max_packet_size,
    })
}

/// The state of a parked receive transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxCursor {
    /// A transfer is started (pending or complete and not yet consumed).
    pub armed: bool,
    /// Bytes of the completed transfer already consumed.
    pub offset: usize,
}

/// What polling the receive pipe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxPoll {
    /// Nothing yet.
    Empty,
    /// A completed transfer of this many bytes waits in `host.received(rx)`.
    Ready(usize),
}

/// Makes sure a receive transfer is parked and reports whether one has completed. Failed
/// transfers are counted and re-armed (a STALL gets CLEAR_FEATURE(HALT) first).
pub fn poll_receive<H: UsbHost + ?Sized>(
    host: &mut H,
    device: &UsbDevice,
    pipes: &BulkPipes,
    cursor: &mut RxCursor,
    rx_len: usize,
    stats: &mut NicStats,
) -> Result<RxPoll, DeviceError> {
    if !cursor.armed {
        host.start_in(pipes.rx, rx_len).map_err(device_error)?;
        cursor.armed = true;
        cursor.offset = 0;
    }
    match host.poll(pipes.rx) {
        Ok(TransferStatus::Pending) => Ok(RxPoll::Empty),
        Ok(TransferStatus::Idle) => {
            cursor.armed = false;
            Ok(RxPoll::Empty)
        }
        Ok(TransferStatus::Complete(n)) => Ok(RxPoll::Ready(n)),
        Err(e) => {
            cursor.armed = false;
            stats.rx_transfer_errors += 1;
            if e == UsbError::Stall {
                host.control_out(&device.target, clear_endpoint_halt(pipes.rx_endpoint), &[])
                    .map_err(device_error)?;
                host.reset_data_toggle(pipes.rx);
            }
            log::warn!("usb nic: receive failed: {e}");
            Err(device_error(e))
        }
    }
}

/// One record found while walking a completed bulk-IN transfer, as each driver's parser
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxRecord {
    /// A frame at `start..start + len`; the next record starts at `next`.
    Frame {
        /// Offset of the first frame byte.
        start: usize,
        /// Frame length (without FCS).
        len: usize,
        /// Offset of the next record.
        next: usize,
    },
    /// A record that carries no usable frame (flagged bad, another message type, impossible
    /// length): counted as an error and skipped to `next`.
    Skip {
        /// Offset of the next record.
        next: usize,
    },
    /// The transfer ends inside a record: the rest is dropped.
    Truncated,
}

/// The receive path all three drivers share: keeps a bulk-IN parked, checks that an idle
/// device still answers, walks a completed transfer with the driver's `parse` (records at
/// increasing offsets; `None` at the end), hands the next good frame to `f`, and re-arms
/// once the transfer is used up.
#[allow(clippy::too_many_arguments)] // the driver's receive state, borrowed field by field
pub fn receive_frame<H: UsbHost + ?Sized, R>(
    host: &mut H,
    device: &UsbDevice,
    pipes: &BulkPipes,
    cursor: &mut RxCursor,
    rx_len: usize,
    stats: &mut NicStats,
    last_liveness_check: &mut Option<Instant>,
    parse: impl Fn(&[u8], usize) -> Option<RxRecord>,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<Option<R>, DeviceError> {
    let n = match poll_receive(host, device, pipes, cursor, rx_len, stats)? {
        RxPoll::Empty => {
            check_liveness(host, device, last_liveness_check)?;
            return Ok(None);
        }
        RxPoll::Ready(n) => n,
    };
    let data = &host.received(pipes.rx)[..n];
    let mut offset = cursor.offset;
    let found = loop {
        match parse(data, offset) {
            None => break None,
            Some(RxRecord::Truncated) => {
                stats.rx_errors += 1;
                break None;
            }
            Some(RxRecord::Skip { next }) => {
                stats.rx_errors += 1;
                offset = next;
            }
            Some(RxRecord::Frame { start, len, next }) => break Some((start, len, next)),
        }
    };
    let Some((start, len, next)) = found else {
        rearm_receive(host, pipes, cursor, rx_len)?;
        return Ok(None);
    };
    let result = f(&host.received(pipes.rx)[start..start + len]);
    stats.rx_frames += 1;
    if next >= n {
        rearm_receive(host, pipes, cursor, rx_len)?;
    } else {
        cursor.offset = next;
    }
    Ok(Some(result))
}

/// Re-arms the receive transfer after its data was consumed.
pub fn rearm_receive<H: UsbHost + ?Sized>(
    host: &mut H,
    pipes: &BulkPipes,
    cursor: &mut RxCursor,
    rx_len: usize,
) -> Result<(), DeviceError> {
    cursor.offset = 0;
    cursor.armed = false;
    host.start_in(pipes.rx, rx_len).map_err(device_error)?;
    cursor.armed = true;
    Ok(())
}

/// Whether the transmit pipe is free; a failure of the previous frame is counted (the
/// frame is lost, as on any Ethernet) unless the device is gone.
pub fn transmit_ready<H: UsbHost + ?Sized>(
    host: &mut H,
    pipes: &BulkPipes,
    stats: &mut NicStats,
) -> Result<bool, DeviceError> {
    match host.poll(pipes.tx) {
        Ok(TransferStatus::Pending) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) if device_error(e) == DeviceError::Gone => Err(DeviceError::Gone),
        Err(e) => {
            stats.tx_errors += 1;
            log::warn!("usb nic: transmit failed: {e}");
            Ok(true)
        }
    }
}

/// How often an idle driver checks that its device still answers on EP0.
pub const LIVENESS_INTERVAL_US: u64 = 1_000_000;

/// Checks, at most once per [`LIVENESS_INTERVAL_US`], that the device still answers a
/// GET_STATUS request. A parked bulk-IN cannot notice a device that vanished behind a hub
/// (QEMU simply never completes transfers to an unknown address, and a real hub reports the
/// loss only on its own status endpoint), so idle receive paths call this and report
/// [`DeviceError::Gone`] when the device is silent.
pub fn check_liveness<H: UsbHost + ?Sized>(
    host: &mut H,
    device: &UsbDevice,
    last_check: &mut Option<Instant>,
) -> Result<(), DeviceError> {
    let now = host.now();
    if last_check.is_some_and(|t| now.micros_since(t) < LIVENESS_INTERVAL_US) {
        return Ok(());
    }
    *last_check = Some(now);
    let mut status = [0u8; 2];
    let setup = SetupPacket {
        request_type: 0x80,
        request: request::GET_STATUS,
        value: 0,
        index: 0,
        length: 2,
    };
    match host.control_in(&device.target, setup, &mut status) {
        Ok(_) | Err(UsbError::Stall) => Ok(()),
        Err(e) => {
            log::warn!(
                "usb nic: device at address {} stopped answering: {e}",
                device.target.address
            );
            Err(DeviceError::Gone)
        }
    }
}
