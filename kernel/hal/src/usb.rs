//! The `UsbHost` trait: what a host controller driver (DWC2 on the Pi, a model in tests) offers
//! to enumeration, the hub driver and the class drivers (`bramble-usb`). It lives here, beside
//! the other hardware seams, so that the chip crate and the protocol crate both depend on this
//! crate and not on each other.
//!
//! Control transfers are synchronous (they are rare: enumeration, register access, RNDIS
//! messages). Bulk and interrupt transfers go through *pipes*: a pipe is one endpoint of one
//! device with a DMA buffer and a data toggle, both owned by the host driver. A transfer on a
//! pipe is started once and then polled for completion; it is never cancelled. This is what
//! the DWC2 needs for Ethernet receive (a bulk-IN that the controller keeps retrying on NAK
//! until a frame arrives, see reference §0.4 and §2.7) and it lets the idle loop sleep in WFI:
//! completion is recorded by the host driver's interrupt handler, and [`UsbHost::poll`] only
//! reads that record.

use crate::Instant;

/// Bus speed of a device or port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speed {
    /// 1.5 Mbit/s.
    Low,
    /// 12 Mbit/s (everything in QEMU).
    Full,
    /// 480 Mbit/s (the LAN9514 and its hub on a B+).
    High,
}

/// The transaction translator a full/low-speed device behind a high-speed hub is reached
/// through (split transactions, reference §2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransactionTranslator {
    /// USB address of the high-speed hub.
    pub hub_address: u8,
    /// Hub port (1-based) the device is plugged into.
    pub port: u8,
}

/// Everything a host controller needs to reach a device's default control endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceTarget {
    /// USB address, 0 while the device is in the default state.
    pub address: u8,
    /// Bus speed of the device.
    pub speed: Speed,
    /// `bMaxPacketSize0` of the device (8 until the device descriptor has been read).
    pub ep0_max_packet: u16,
    /// Set when split transactions are needed to reach the device.
    pub translator: Option<TransactionTranslator>,
}

/// Direction bit of `bmRequestType` and of endpoint addresses.
pub const DIRECTION_IN: u8 = 0x80;

/// The 8-byte SETUP packet of a control transfer (USB 2.0 §9.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetupPacket {
    /// `bmRequestType`: direction, type (standard/class/vendor) and recipient.
    pub request_type: u8,
    /// `bRequest`.
    pub request: u8,
    /// `wValue`.
    pub value: u16,
    /// `wIndex`.
    pub index: u16,
    /// `wLength`: bytes in the data stage.
    pub length: u16,
}

impl SetupPacket {
    /// Whether the data stage (if any) goes from device to host.
    pub const fn is_in(&self) -> bool {
        self.request_type & DIRECTION_IN != 0
    }

    /// The packet as sent on the wire (little-endian fields).
    pub fn to_bytes(&self) -> [u8; 8] {
        let v = self.value.to_le_bytes();
        let i = self.index.to_le_bytes();
        let l = self.length.to_le_bytes();
        [
            self.request_type,
            self.request,
            v[0],
            v[1],
            i[0],
            i[1],
            l[0],
            l[1],
        ]
    }

    /// Parses a packet from its 8 wire bytes.
    pub fn from_bytes(b: [u8; 8]) -> Self {
        Self {
            request_type: b[0],
            request: b[1],
            value: u16::from_le_bytes([b[2], b[3]]),
            index: u16::from_le_bytes([b[4], b[5]]),
            length: u16::from_le_bytes([b[6], b[7]]),
        }
    }
}

/// Transfer type of a pipe. Isochronous transfers are not supported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferType {
    /// Bulk: retried on NAK until data moves.
    Bulk,
    /// Interrupt: polled every `interval_ms`; a NAK means "nothing new".
    Interrupt,
}

/// What a pipe connects to and how large its DMA buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeConfig {
    /// The device the endpoint belongs to.
    pub device: DeviceTarget,
    /// `bEndpointAddress`: number in bits 3:0, [`DIRECTION_IN`] for IN endpoints.
    pub endpoint: u8,
    /// Bulk or interrupt.
    pub transfer_type: TransferType,
    /// `wMaxPacketSize` (bits 10:0).
    pub max_packet: u16,
    /// Polling interval for interrupt pipes, in milliseconds (ignored for bulk).
    pub interval_ms: u16,
    /// Size of the DMA buffer the host allocates for this pipe: the largest transfer. For IN
    /// pipes it must be a multiple of `max_packet` (the DWC2 programs whole packets).
    pub buffer_len: usize,
    /// OUT pipes only: end every transfer whose length is a multiple of `max_packet` (including
    /// an empty one) with a zero-length packet, as CDC-ECM requires to delimit frames.
    pub zero_length_termination: bool,
}

impl PipeConfig {
    /// Whether this pipe moves data from the device to the host.
    pub const fn is_in(&self) -> bool {
        self.endpoint & DIRECTION_IN != 0
    }
}

/// Handle of an open pipe, valid until [`UsbHost::close_pipe`] or a new root port reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PipeId(pub u8);

/// State of the current transfer on a pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferStatus {
    /// No transfer started since the pipe was opened or the last error was reported.
    Idle,
    /// Started and not finished (for IN: the device keeps answering NAK).
    Pending,
    /// Finished; the value is the number of bytes moved. For IN pipes the bytes are in
    /// [`UsbHost::received`] until the next [`UsbHost::start_in`].
    Complete(usize),
}

/// Why a USB operation failed. One enum for the host controller, enumeration, the hub driver
/// and the class drivers' USB traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UsbError {
    /// The endpoint answered STALL: request not supported, or endpoint halted.
    Stall,
    /// No answer in time: the device kept answering NAK, or the controller never reported
    /// completion (every wait has a deadline).
    Timeout,
    /// Transaction errors (CRC, bit stuffing, babble, data toggle mismatch, DMA error) and
    /// the host's bounded retries are exhausted.
    Transfer,
    /// The device (or the root port) is gone; re-enumerate.
    Disconnected,
    /// No free channel, pipe slot or DMA memory for another pipe.
    NoResources,
    /// The caller's buffer or request does not fit (e.g. larger than the pipe's buffer).
    InvalidRequest,
    /// A descriptor or a class-protocol message from the device is malformed.
    Protocol,
    /// No device is attached where one was expected.
    NoDevice,
    /// Devices were found, but none a Bramble network driver can drive.
    Unsupported,
}

impl core::fmt::Display for UsbError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let text = match self {
            UsbError::Stall => "endpoint stalled",
            UsbError::Timeout => "timed out",
            UsbError::Transfer => "transaction errors, retries exhausted",
            UsbError::Disconnected => "device disconnected",
            UsbError::NoResources => "no free host channel or buffer",
            UsbError::InvalidRequest => "invalid request or buffer size",
            UsbError::Protocol => "malformed descriptor or protocol message",
            UsbError::NoDevice => "no device attached",
            UsbError::Unsupported => "no supported network device",
        };
        f.write_str(text)
    }
}

/// A USB host controller with one root port.
///
/// Contract for implementations:
/// - Every operation that waits has a deadline and returns [`UsbError::Timeout`] instead of
///   hanging (QEMU ignores channel enables while the port is disabled).
/// - `poll`, `received` and `out_buffer` never block and never touch the bus: the idle loop
///   may call them after every interrupt and otherwise sleep in WFI.
/// - Data toggles of pipes belong to the implementation: it starts them at DATA0 when a pipe
///   opens and on [`UsbHost::reset_data_toggle`], and advances them as packets move.
/// - A started transfer is never cancelled by the implementation; a failed one is reported
///   once by `poll` as `Err`, after which the pipe is `Idle`.
pub trait UsbHost {
    /// Monotonic time, for rate-limiting link polls and protocol deadlines.
    fn now(&self) -> Instant;

    /// Waits `ms` milliseconds (enumeration settle times). May sleep in WFI.
    fn delay_ms(&mut self, ms: u32);

    /// Powers the root port, waits for a connection, resets the port and returns the speed
    /// of the device now in the default state at address 0. Closes every open pipe.
    fn reset_root_port(&mut self) -> Result<Speed, UsbError>;

    /// A control transfer with an IN data stage (or none) on `device`'s endpoint 0; returns
    /// the bytes received into `data` (at most `setup.length` and `data.len()`).
    fn control_in(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &mut [u8],
    ) -> Result<usize, UsbError>;

    /// A control transfer with an OUT data stage of `data` (`setup.length` must equal
    /// `data.len()`), or none when `data` is empty.
    fn control_out(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &[u8],
    ) -> Result<(), UsbError>;

    /// Opens a bulk or interrupt pipe: reserves a channel/slot and a DMA buffer of
    /// `config.buffer_len` bytes, with the data toggle at DATA0.
    fn open_pipe(&mut self, config: PipeConfig) -> Result<PipeId, UsbError>;

    /// Releases a pipe (only after its device is gone or was reconfigured; a pending
    /// transfer is abandoned, not cancelled on the bus).
    fn close_pipe(&mut self, pipe: PipeId);

    /// Sets the pipe's next data toggle to DATA0 (after SET_CONFIGURATION, SET_INTERFACE or
    /// CLEAR_FEATURE(ENDPOINT_HALT)).
    fn reset_data_toggle(&mut self, pipe: PipeId);

    /// Starts an IN transfer of up to `len` bytes (a multiple of the max packet size, at most
    /// the buffer length). The pipe must not have a transfer pending.
    fn start_in(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError>;

    /// The data of the last completed IN transfer (empty if none).
    fn received(&self, pipe: PipeId) -> &[u8];

    /// The OUT pipe's DMA buffer, to be filled before [`UsbHost::start_out`]. Empty for an
    /// unknown pipe. Must not be written while a transfer is pending.
    fn out_buffer(&mut self, pipe: PipeId) -> &mut [u8];

    /// Starts an OUT transfer of the first `len` bytes of the pipe's buffer.
    fn start_out(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError>;

    /// State of the pipe's current transfer; a failure is returned once as `Err`.
    fn poll(&mut self, pipe: PipeId) -> Result<TransferStatus, UsbError>;

    /// When a pipe next needs the host's attention although no interrupt will come (for
    /// example a transfer to issue again after a NAK, or a parked one whose progress must be
    /// looked at): the caller wakes by then and calls [`UsbHost::poll_timers`] or `poll`.
    /// `None`: interrupts announce everything.
    fn poll_at(&self) -> Option<Instant>;

    /// Services every pipe whose [`UsbHost::poll_at`] time has come and says whether that
    /// brought news: `true` when a transfer completed or failed (the next `poll` of its pipe
    /// reports it), `false` when each one is still waiting.
    fn poll_timers(&mut self) -> bool;
}

impl<T: UsbHost + ?Sized> UsbHost for &mut T {
    fn now(&self) -> Instant {
        (**self).now()
    }
    fn delay_ms(&mut self, ms: u32) {
        (**self).delay_ms(ms)
    }
    fn reset_root_port(&mut self) -> Result<Speed, UsbError> {
        (**self).reset_root_port()
    }
    fn control_in(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &mut [u8],
    ) -> Result<usize, UsbError> {
        (**self).control_in(device, setup, data)
    }
    fn control_out(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &[u8],
    ) -> Result<(), UsbError> {
        (**self).control_out(device, setup, data)
    }
    fn open_pipe(&mut self, config: PipeConfig) -> Result<PipeId, UsbError> {
        (**self).open_pipe(config)
    }
    fn close_pipe(&mut self, pipe: PipeId) {
        (**self).close_pipe(pipe)
    }
    fn reset_data_toggle(&mut self, pipe: PipeId) {
        (**self).reset_data_toggle(pipe)
    }
    fn start_in(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError> {
        (**self).start_in(pipe, len)
    }
    fn received(&self, pipe: PipeId) -> &[u8] {
        (**self).received(pipe)
    }
    fn out_buffer(&mut self, pipe: PipeId) -> &mut [u8] {
        (**self).out_buffer(pipe)
    }
    fn start_out(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError> {
        (**self).start_out(pipe, len)
    }
    fn poll(&mut self, pipe: PipeId) -> Result<TransferStatus, UsbError> {
        (**self).poll(pipe)
    }
    fn poll_at(&self) -> Option<Instant> {
        (**self).poll_at()
    }
    fn poll_timers(&mut self) -> bool {
        (**self).poll_timers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_packet_round_trips_little_endian() {
        let s = SetupPacket {
            request_type: 0x80,
            request: 6,
            value: 0x0100,
            index: 0x0409,
            length: 18,
        };
        let b = s.to_bytes();
        assert_eq!(b, [0x80, 6, 0x00, 0x01, 0x09, 0x04, 18, 0]);
        assert_eq!(SetupPacket::from_bytes(b), s);
        assert!(s.is_in());
    }
}
