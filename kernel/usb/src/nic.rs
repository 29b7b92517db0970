//! What the three USB Ethernet drivers share: counters, error mapping, bulk pipe set-up and
//! the [`DataPath`], which does the receive and transmit bookkeeping for all of them.

use bramble_hal::ethernet::MAX_FRAME_LEN;
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
    /// Bulk-OUT endpoint address (for CLEAR_FEATURE(HALT)).
    pub tx_endpoint: u8,
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
        tx_endpoint: bulk_out.address,
        tx_max_packet: bulk_out.max_packet_size,
    })
}

/// The state of a parked receive transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RxCursor {
    /// A transfer is started (pending or complete and not yet consumed).
    armed: bool,
    /// Bytes of the completed transfer already consumed.
    offset: usize,
}

/// What polling the receive pipe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxPoll {
    /// Nothing yet.
    Empty,
    /// A completed transfer of this many bytes waits in `host.received(rx)`.
    Ready(usize),
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

/// How often an idle driver checks that its device still answers on EP0.
pub const LIVENESS_INTERVAL_US: u64 = 1_000_000;

/// The data path every USB Ethernet driver shares: the host, the device, its bulk pipe pair,
/// the parked receive transfer, the traffic counters and the idle liveness check. A driver
/// keeps one and adds only what is its own: how records sit in a bulk-IN transfer (its
/// `parse`) and what goes in front of a frame on the way out (its `fill`).
pub struct DataPath<H: UsbHost> {
    host: H,
    device: UsbDevice,
    pipes: BulkPipes,
    /// Length of every receive transfer (a multiple of the bulk-IN max packet size).
    rx_len: usize,
    cursor: RxCursor,
    stats: NicStats,
    last_liveness_check: Option<Instant>,
}

impl<H: UsbHost> DataPath<H> {
    /// The data path over `pipes`, with receive transfers of `rx_len` bytes.
    pub fn new(host: H, device: UsbDevice, pipes: BulkPipes, rx_len: usize) -> Self {
        Self {
            host,
            device,
            pipes,
            rx_len,
            cursor: RxCursor::default(),
            stats: NicStats::default(),
            last_liveness_check: None,
        }
    }

    /// Counters since start.
    pub fn stats(&self) -> NicStats {
        self.stats
    }

    /// The USB device.
    pub fn device(&self) -> &UsbDevice {
        &self.device
    }

    /// The bulk pipe pair.
    pub fn pipes(&self) -> &BulkPipes {
        &self.pipes
    }

    /// The host controller.
    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    /// The host's timed work, for the driver's
    /// [`EthernetDevice::poll_at`](bramble_hal::EthernetDevice::poll_at).
    pub fn poll_at(&self) -> Option<Instant> {
        self.host.poll_at()
    }

    /// Runs the host's due timed work, for the driver's
    /// [`EthernetDevice::poll_timers`](bramble_hal::EthernetDevice::poll_timers).
    pub fn poll_timers(&mut self) -> bool {
        self.host.poll_timers()
    }

    /// The host controller and the device at once (for a driver's EP0 register access).
    pub fn host_and_device(&mut self) -> (&mut H, &UsbDevice) {
        (&mut self.host, &self.device)
    }

    /// Gives the host back (after [`DeviceError::Gone`], to re-probe).
    pub fn into_host(self) -> H {
        self.host
    }

    /// Keeps a bulk-IN parked, checks that an idle device still answers, walks a completed
    /// transfer with the driver's `parse` (records at increasing offsets; `None` at the
    /// end), hands the next good frame to `f`, and re-arms once the transfer is used up.
    pub fn receive<R>(
        &mut self,
        parse: impl Fn(&[u8], usize) -> Option<RxRecord>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, DeviceError> {
        let n = match self.poll_receive()? {
            RxPoll::Empty => {
                self.check_liveness()?;
                return Ok(None);
            }
            RxPoll::Ready(n) => n,
        };
        let data = &self.host.received(self.pipes.rx)[..n];
        let mut offset = self.cursor.offset;
        let found = loop {
            match parse(data, offset) {
                None => break None,
                Some(RxRecord::Truncated) => {
                    self.stats.rx_errors += 1;
                    break None;
                }
                Some(RxRecord::Skip { next }) => {
                    self.stats.rx_errors += 1;
                    offset = next;
                }
                Some(RxRecord::Frame { start, len, next }) => break Some((start, len, next)),
            }
        };
        // A parser's frame outside the transfer (it cannot happen with the three parsers
        // here, whose offsets are checked; this keeps a future one from turning a bad record
        // into a slice panic) is dropped like a malformed record.
        let frame = found.and_then(|(start, len, next)| {
            let end = start.checked_add(len).filter(|&end| end <= n)?;
            Some((start, end, next))
        });
        if found.is_some() && frame.is_none() {
            self.stats.rx_errors += 1;
        }
        let Some((start, end, next)) = frame else {
            self.rearm_receive()?;
            return Ok(None);
        };
        let result = f(&self.host.received(self.pipes.rx)[start..end]);
        self.stats.rx_frames += 1;
        if next >= n {
            self.rearm_receive()?;
        } else {
            self.cursor.offset = next;
        }
        Ok(Some(result))
    }

    /// Whether a frame could be sent now (an error says so too: `transmit` reports it).
    pub fn can_transmit(&mut self) -> bool {
        self.transmit_ready().unwrap_or(true)
    }

    /// Sends one frame of `frame_len` bytes: fails with [`DeviceError::FrameTooLarge`]
    /// beyond [`MAX_FRAME_LEN`] or when the transmit buffer is shorter than `space`, with
    /// [`DeviceError::Busy`] while the previous transfer is under way. Otherwise `fill`
    /// writes the transfer into the transmit buffer (the driver's header, the frame, any
    /// padding) and returns how many bytes to send and its own result.
    pub fn transmit<R>(
        &mut self,
        frame_len: usize,
        space: usize,
        fill: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, DeviceError> {
        if frame_len > MAX_FRAME_LEN {
            return Err(DeviceError::FrameTooLarge);
        }
        if !self.transmit_ready()? {
            return Err(DeviceError::Busy);
        }
        let buf = self.host.out_buffer(self.pipes.tx);
        if buf.len() < space {
            return Err(DeviceError::FrameTooLarge);
        }
        let (transfer, result) = fill(buf);
        self.host
            .start_out(self.pipes.tx, transfer)
            .map_err(device_error)?;
        self.stats.tx_frames += 1;
        Ok(result)
    }

    /// Makes sure a receive transfer is parked and reports whether one has completed. Failed
    /// transfers are counted and re-armed (a STALL gets CLEAR_FEATURE(HALT) first).
    fn poll_receive(&mut self) -> Result<RxPoll, DeviceError> {
        if !self.cursor.armed {
            self.host
                .start_in(self.pipes.rx, self.rx_len)
                .map_err(device_error)?;
            self.cursor.armed = true;
            self.cursor.offset = 0;
        }
        match self.host.poll(self.pipes.rx) {
            Ok(TransferStatus::Pending) => Ok(RxPoll::Empty),
            Ok(TransferStatus::Idle) => {
                self.cursor.armed = false;
                Ok(RxPoll::Empty)
            }
            Ok(TransferStatus::Complete(n)) => Ok(RxPoll::Ready(n)),
            Err(e) => {
                self.cursor.armed = false;
                self.stats.rx_transfer_errors += 1;
                if e == UsbError::Stall {
                    self.host
                        .control_out(
                            &self.device.target,
                            clear_endpoint_halt(self.pipes.rx_endpoint),
                            &[],
                        )
                        .map_err(device_error)?;
                    self.host.reset_data_toggle(self.pipes.rx);
                }
                log::warn!("usb nic: receive failed: {e}");
                Err(device_error(e))
            }
        }
    }

    /// Re-arms the receive transfer after its data was consumed.
    fn rearm_receive(&mut self) -> Result<(), DeviceError> {
        self.cursor.offset = 0;
        self.cursor.armed = false;
        self.host
            .start_in(self.pipes.rx, self.rx_len)
            .map_err(device_error)?;
        self.cursor.armed = true;
        Ok(())
    }

    /// Whether the transmit pipe is free; a failure of the previous frame is counted (the
    /// frame is lost, as on any Ethernet) unless the device is gone.
    fn transmit_ready(&mut self) -> Result<bool, DeviceError> {
        match self.host.poll(self.pipes.tx) {
            Ok(TransferStatus::Pending) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) if device_error(e) == DeviceError::Gone => Err(DeviceError::Gone),
            Err(e) => {
                self.stats.tx_errors += 1;
                log::warn!("usb nic: transmit failed: {e}");
                if e == UsbError::Stall {
                    // A halted bulk-OUT stays halted until the host clears it (USB 2.0
                    // §9.4.5; Linux usbnet: EVENT_TX_HALT, usb_clear_halt) and restarts at
                    // DATA0. Without this every later frame failed the same way.
                    self.host
                        .control_out(
                            &self.device.target,
                            clear_endpoint_halt(self.pipes.tx_endpoint),
                            &[],
                        )
                        .map_err(device_error)?;
                    self.host.reset_data_toggle(self.pipes.tx);
                }
                Ok(true)
            }
        }
    }

    /// Checks, at most once per [`LIVENESS_INTERVAL_US`], that the device still answers a
    /// GET_STATUS request. A parked bulk-IN cannot notice a device that vanished behind a
    /// hub (QEMU simply never completes transfers to an unknown address, and a real hub
    /// reports the loss only on its own status endpoint), so the idle receive path calls
    /// this and reports [`DeviceError::Gone`] when the device is silent.
    fn check_liveness(&mut self) -> Result<(), DeviceError> {
        let now = self.host.now();
        if self
            .last_liveness_check
            .is_some_and(|t| now.micros_since(t) < LIVENESS_INTERVAL_US)
        {
            return Ok(());
        }
        self.last_liveness_check = Some(now);
        let mut status = [0u8; 2];
        let setup = SetupPacket {
            request_type: 0x80,
            request: request::GET_STATUS,
            value: 0,
            index: 0,
            length: 2,
        };
        match self
            .host
            .control_in(&self.device.target, setup, &mut status)
        {
            Ok(_) | Err(UsbError::Stall) => Ok(()),
            Err(e) => {
                log::warn!(
                    "usb nic: device at address {} stopped answering: {e}",
                    self.device.target.address
                );
                Err(DeviceError::Gone)
            }
        }
    }
}
