//! Remote NDIS driver ([MS-RNDIS] 1.0 over USB): QEMU usb-net's configuration 2, Bramble's
//! default in QEMU. Control messages travel as CDC SEND_ENCAPSULATED_COMMAND /
//! GET_ENCAPSULATED_RESPONSE on EP0; each data-path frame carries a 44-byte
//! RNDIS_PACKET_MSG header, and a bulk-IN transfer may hold several of them.

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};

use crate::descriptor::{CdcFunctional, ConfigurationDescriptor, Endpoint, EndpointKind, class};
use crate::device::{UsbDevice, set_configuration};
use crate::nic::{BulkPipes, DataPath, NicStats, RX_BUFFER_LEN, RxRecord, open_bulk_pipes};
use bramble_hal::usb::{SetupPacket, UsbError, UsbHost};

/// RNDIS message types.
pub mod msg {
    /// Data packet.
    pub const PACKET: u32 = 0x0000_0001;
    /// Initialize request.
    pub const INITIALIZE: u32 = 0x0000_0002;
    /// Query request.
    pub const QUERY: u32 = 0x0000_0004;
    /// Set request.
    pub const SET: u32 = 0x0000_0005;
    /// Status indication from the device.
    pub const INDICATE_STATUS: u32 = 0x0000_0007;
    /// Keep-alive request.
    pub const KEEPALIVE: u32 = 0x0000_0008;
    /// Bit set in every completion's type.
    pub const COMPLETION: u32 = 0x8000_0000;
}

/// NDIS object identifiers used by the driver.
pub mod oid {
    /// Packet filter (set).
    pub const GEN_CURRENT_PACKET_FILTER: u32 = 0x0001_010E;
    /// Media connect status (query): 0 connected, 1 disconnected.
    pub const GEN_MEDIA_CONNECT_STATUS: u32 = 0x0001_0114;
    /// Permanent MAC address (query).
    pub const PERMANENT_ADDRESS_802_3: u32 = 0x0101_0101;
}

/// NDIS packet filter: directed, all multicast, broadcast.
pub const PACKET_FILTER: u32 = 0x0001 | 0x0004 | 0x0008;
/// RNDIS status: success.
pub const STATUS_SUCCESS: u32 = 0;
/// Size of the RNDIS_PACKET_MSG header.
pub const PACKET_HEADER_LEN: usize = 44;
/// Largest message Bramble accepts from the device in one transfer.
pub const MAX_TRANSFER: u32 = RX_BUFFER_LEN as u32;
/// GET_ENCAPSULATED_RESPONSE polls before a request times out (1 ms apart).
const RESPONSE_POLLS: u32 = 200;

/// CDC request codes for the encapsulated control channel.
const SEND_ENCAPSULATED_COMMAND: u8 = 0x00;
const GET_ENCAPSULATED_RESPONSE: u8 = 0x01;

/// Where the RNDIS function lives in a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RndisBinding {
    /// `bConfigurationValue`.
    pub config_value: u8,
    /// Control interface number (the encapsulated commands' `wIndex`).
    pub control_interface: u8,
    /// Bulk-IN endpoint.
    pub bulk_in: Endpoint,
    /// Bulk-OUT endpoint.
    pub bulk_out: Endpoint,
}

fn is_rndis_control(class_code: u8, subclass: u8, protocol: u8) -> bool {
    matches!(
        (class_code, subclass, protocol),
        (
            class::COMMUNICATIONS,
            class::CDC_SUBCLASS_ACM,
            class::CDC_PROTOCOL_VENDOR
        ) | (class::WIRELESS, 0x01, 0x03)
            | (class::MISCELLANEOUS, 0x04, 0x01)
    )
}

impl RndisBinding {
    /// Finds an RNDIS control interface (2/2/0xFF, 0xE0/1/3 or 0xEF/4/1) and its data
    /// interface with a bulk pair.
    pub fn find(config: &ConfigurationDescriptor<'_>) -> Option<Self> {
        let control = config
            .interfaces()
            .find(|i| is_rndis_control(i.class(), i.subclass(), i.protocol()))?;
        let data_number = control
            .functional_descriptors()
            .find_map(|f| match f {
                CdcFunctional::Union { data_interface, .. } => Some(data_interface),
                _ => None,
            })
            .unwrap_or(control.number() + 1);
        let data = config.interfaces().find(|i| {
            i.number() == data_number
                && i.find_endpoint(EndpointKind::Bulk, true).is_some()
                && i.find_endpoint(EndpointKind::Bulk, false).is_some()
        })?;
        Some(Self {
            config_value: config.value(),
            control_interface: control.number(),
            bulk_in: data.find_endpoint(EndpointKind::Bulk, true)?,
            bulk_out: data.find_endpoint(EndpointKind::Bulk, false)?,
        })
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Decodes the message at `offset` of a bulk-IN transfer; `None` at the end.
pub fn parse_rx_record(data: &[u8], offset: usize) -> Option<RxRecord> {
    let rest = data.get(offset..).filter(|r| !r.is_empty())?;
    if rest.len() < 8 {
        // Trailing padding (some devices add a zero byte or two) ends the transfer.
        return if rest.iter().all(|&b| b == 0) {
            None
        } else {
            Some(RxRecord::Truncated)
        };
    }
    let kind = le32(rest, 0);
    let length = le32(rest, 4) as usize;
    if length < 8 || length > rest.len() {
        return Some(RxRecord::Truncated);
    }
    let next = offset + length;
    if kind != msg::PACKET {
        return Some(RxRecord::Skip { next });
    }
    if length < PACKET_HEADER_LEN {
        return Some(RxRecord::Skip { next });
    }
    // DataOffset counts from byte 8. Summed in u64: in usize a DataOffset near 4 GiB wraps
    // on the Pi (32 bits) and the frame would start far outside the transfer.
    let data_offset = u64::from(le32(rest, 8)) + 8;
    let data_len = u64::from(le32(rest, 12));
    if data_offset < PACKET_HEADER_LEN as u64
        || data_offset + data_len > length as u64
        || !(14..=MAX_FRAME_LEN as u64).contains(&data_len)
    {
        return Some(RxRecord::Skip { next });
    }
    // Both fit in usize now: the frame lies inside the message, inside `data`.
    Some(RxRecord::Frame {
        start: offset + data_offset as usize,
        len: data_len as usize,
        next,
    })
}

/// Writes an RNDIS_PACKET_MSG header for a `len`-byte frame that follows it directly.
pub fn write_packet_header(buf: &mut [u8], len: usize) {
    buf[..PACKET_HEADER_LEN].fill(0);
    put32(buf, 0, msg::PACKET);
    put32(buf, 4, (PACKET_HEADER_LEN + len) as u32);
    put32(buf, 8, (PACKET_HEADER_LEN - 8) as u32);
    put32(buf, 12, len as u32);
}

/// What INITIALIZE_CMPLT reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// `MaxPacketsPerTransfer`: messages the device accepts in one bulk-OUT transfer.
    pub max_packets_per_transfer: u32,
    /// `MaxTransferSize`: largest bulk-OUT transfer the device accepts.
    pub max_transfer_size: u32,
}

/// A running RNDIS function.
pub struct Rndis<H: UsbHost> {
    path: DataPath<H>,
    mac: MacAddress,
    link: LinkState,
    limits: DeviceLimits,
    /// Shortest bulk-OUT transfer (see [`Rndis::pad_transfers_to`]); 0 pads nothing.
    min_transfer: usize,
}

struct Control<'a, H: UsbHost + ?Sized> {
    host: &'a mut H,
    device: &'a UsbDevice,
    interface: u16,
    next_id: u32,
}

impl<H: UsbHost + ?Sized> Control<'_, H> {
    /// Sends `message` (type and length fields are filled in) and returns the completion
    /// matching its request ID, copied into `response`.
    fn request(&mut self, message: &mut [u8], response: &mut [u8]) -> Result<usize, UsbError> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let kind = le32(message, 0);
        put32(message, 4, message.len() as u32);
        put32(message, 8, id);
        self.host.control_out(
            &self.device.target,
            SetupPacket {
                request_type: 0x21,
                request: SEND_ENCAPSULATED_COMMAND,
                value: 0,
                index: self.interface,
                length: message.len() as u16,
            },
            message,
        )?;
        for _ in 0..RESPONSE_POLLS {
            let n = self.host.control_in(
                &self.device.target,
                SetupPacket {
                    request_type: 0xA1,
                    request: GET_ENCAPSULATED_RESPONSE,
                    value: 0,
                    index: self.interface,
                    length: response.len() as u16,
                },
                response,
            )?;
            // QEMU answers a single zero byte when no response is queued.
            if n >= 16 && le32(response, 0) == kind | msg::COMPLETION && le32(response, 8) == id {
                let status = le32(response, 12);
                if status != STATUS_SUCCESS {
                    log::warn!("rndis: request {kind:#x} failed with status {status:#x}");
                    return Err(UsbError::Protocol);
                }
                return Ok(n.min(le32(response, 4) as usize));
            }
            if n >= 8 && le32(response, 0) == msg::INDICATE_STATUS {
                log::info!("rndis: status indication {:#x}", le32(response, 8));
            }
            self.host.delay_ms(1);
        }
        log::error!("rndis: no completion for request {kind:#x}");
        Err(UsbError::Timeout)
    }

    fn query(&mut self, oid: u32, out: &mut [u8]) -> Result<usize, UsbError> {
        let mut message = [0u8; 28];
        put32(&mut message, 0, msg::QUERY);
        put32(&mut message, 12, oid);
        let mut response = [0u8; 128];
        let n = self.request(&mut message, &mut response)?;
        if n < 24 {
            return Err(UsbError::Protocol);
        }
        let len = le32(&response, 16) as usize;
        let at = le32(&response, 20) as usize + 8;
        let value = response
            .get(at..at + len)
            .filter(|_| at + len <= n)
            .ok_or(UsbError::Protocol)?;
        let copy = value.len().min(out.len());
        out[..copy].copy_from_slice(&value[..copy]);
        Ok(copy)
    }

    fn set(&mut self, oid: u32, value: u32) -> Result<(), UsbError> {
        let mut message = [0u8; 32];
        put32(&mut message, 0, msg::SET);
        put32(&mut message, 12, oid);
        put32(&mut message, 16, 4);
        put32(&mut message, 20, 20); // value right after the 28-byte header (offset from byte 8)
        put32(&mut message, 28, value);
        let mut response = [0u8; 32];
        self.request(&mut message, &mut response).map(|_| ())
    }
}

impl<H: UsbHost> Rndis<H> {
    /// SET_CONFIGURATION, INITIALIZE, query the MAC and link, set the packet filter; on
    /// failure the host is handed back.
    pub fn new(
        mut host: H,
        device: UsbDevice,
        binding: RndisBinding,
    ) -> Result<Self, (UsbError, H)> {
        match Self::init(&mut host, &device, binding) {
            Ok((pipes, mac, rx_len, link, limits)) => Ok(Self {
                path: DataPath::new(host, device, pipes, rx_len),
                mac,
                link,
                limits,
                min_transfer: 0,
            }),
            Err(e) => Err((e, host)),
        }
    }

    /// Pads every transmitted message to at least `bytes` (capped by the device's
    /// MaxTransferSize), as RNDIS allows: the padding sits inside MessageLength, after the
    /// frame, and the device sends only DataLength bytes. QEMU's DWC2 model moves transfers
    /// of 1,536 bytes or less one 64-byte packet per 250 us and longer ones at once, so on
    /// QEMU padding short frames past that threshold is about 7 times faster. A real
    /// controller has no such pacing and would only spend bus time on the padding.
    pub fn pad_transfers_to(&mut self, bytes: usize) {
        self.min_transfer = bytes;
    }

    /// The handshake of [`Rndis::new`]: the pipes, MAC address, receive transfer length, link
    /// state and device limits it found.
    // One tuple, taken apart by `new` right after the call: a struct would only name the
    // five results a second time.
    #[allow(clippy::type_complexity)]
    fn init(
        host: &mut H,
        device: &UsbDevice,
        binding: RndisBinding,
    ) -> Result<(BulkPipes, MacAddress, usize, LinkState, DeviceLimits), UsbError> {
        set_configuration(host, &device.target, binding.config_value)?;
        let mut control = Control {
            host: &mut *host,
            device,
            interface: binding.control_interface as u16,
            next_id: 1,
        };
        let mut init = [0u8; 24];
        put32(&mut init, 0, msg::INITIALIZE);
        put32(&mut init, 12, 1); // major version
        put32(&mut init, 16, 0); // minor version
        put32(&mut init, 20, MAX_TRANSFER);
        let mut response = [0u8; 64];
        let n = control.request(&mut init, &mut response)?;
        if n < 52 {
            return Err(UsbError::Protocol);
        }
        let limits = DeviceLimits {
            max_packets_per_transfer: le32(&response, 32),
            max_transfer_size: le32(&response, 36),
        };
        let mut mac = [0u8; 6];
        if control.query(oid::PERMANENT_ADDRESS_802_3, &mut mac)? != 6 {
            return Err(UsbError::Protocol);
        }
        let mac = MacAddress(mac);
        let mut media = [0u8; 4];
        let link = match control.query(oid::GEN_MEDIA_CONNECT_STATUS, &mut media) {
            Ok(4) if u32::from_le_bytes(media) != 0 => LinkState::Down,
            _ => LinkState::Up,
        };
        control.set(oid::GEN_CURRENT_PACKET_FILTER, PACKET_FILTER)?;

        let packet = binding.bulk_in.max_packet_size.max(8) as usize;
        let rx_len = RX_BUFFER_LEN.div_ceil(packet) * packet;
        let pipes = open_bulk_pipes(
            host,
            device,
            binding.bulk_in,
            binding.bulk_out,
            rx_len,
            RX_BUFFER_LEN,
            true,
        )?;
        log::info!(
            "rndis: up, mac {mac}, device takes {} packet(s) / {} bytes per transfer",
            limits.max_packets_per_transfer,
            limits.max_transfer_size
        );
        Ok((pipes, mac, rx_len, link, limits))
    }

    /// Counters since start.
    pub fn stats(&self) -> NicStats {
        self.path.stats()
    }

    /// What the device reported at INITIALIZE.
    pub fn limits(&self) -> DeviceLimits {
        self.limits
    }

    /// The USB device.
    pub fn device(&self) -> &UsbDevice {
        self.path.device()
    }

    /// Gives the host back (after [`DeviceError::Gone`], to re-probe).
    pub fn into_host(self) -> H {
        self.path.into_host()
    }

    /// The host controller (for controller-specific calls such as interrupt handling).
    pub fn host_mut(&mut self) -> &mut H {
        self.path.host_mut()
    }
}

impl<H: UsbHost> EthernetDevice for Rndis<H> {
    fn mac_address(&self) -> MacAddress {
        self.mac
    }

    fn link_state(&mut self) -> LinkState {
        self.link
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        self.path.receive(parse_rx_record, f)
    }

    fn can_transmit(&mut self) -> bool {
        self.path.can_transmit()
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        // Saturating: an impossible `len` makes an impossible transfer, refused below.
        let total = PACKET_HEADER_LEN.saturating_add(len);
        if total > self.limits.max_transfer_size.max(PACKET_HEADER_LEN as u32) as usize {
            return Err(DeviceError::FrameTooLarge);
        }
        let (min_transfer, max_transfer) =
            (self.min_transfer, self.limits.max_transfer_size as usize);
        self.path.transmit(len, total, |buf| {
            let transfer = total
                .max(min_transfer)
                .min(max_transfer)
                .min(buf.len())
                .max(total);
            write_packet_header(buf, len);
            put32(buf, 4, transfer as u32); // MessageLength covers the padding
            (transfer, f(&mut buf[PACKET_HEADER_LEN..total]))
        })
    }

    /// The host's timed work (see [`UsbHost::poll_at`]); the driver has none of its own.
    fn poll_at(&mut self) -> Option<Instant> {
        self.path.poll_at()
    }

    fn poll_timers(&mut self) -> bool {
        self.path.poll_timers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// An RNDIS_PACKET_MSG of `message_len` bytes whose header says the frame is `data_len`
    /// bytes at DataOffset `data_offset` (counted from byte 8).
    fn packet(message_len: usize, data_offset: u32, data_len: u32) -> Vec<u8> {
        let mut m = std::vec![0u8; message_len];
        put32(&mut m, 0, msg::PACKET);
        put32(&mut m, 4, message_len as u32);
        put32(&mut m, 8, data_offset);
        put32(&mut m, 12, data_len);
        m
    }

    #[test]
    fn a_good_packet_message_gives_its_frame() {
        let m = packet(44 + 60, 36, 60);
        assert_eq!(
            parse_rx_record(&m, 0),
            Some(RxRecord::Frame {
                start: 44,
                len: 60,
                next: 104
            })
        );
        assert_eq!(parse_rx_record(&m, 104), None);
    }

    #[test]
    fn offsets_that_wrap_32_bits_are_skipped_not_followed() {
        // Review M3: DataOffset + 8 + DataLength was summed in usize. On the Pi (32 bits) a
        // DataOffset near 4 GiB wraps the sum below MessageLength, and the frame's start,
        // far outside the transfer, was handed to the receive path's slice: a panic. Run on
        // a 32-bit target (cargo test32) to see it; a 64-bit host cannot.
        let message_len = 44 + 64;
        for (data_offset, data_len) in [
            (u32::MAX - 7, 64),   // + 8 wraps to 0
            (u32::MAX - 40, 60),  // the sum wraps to just below MessageLength
            (u32::MAX, 14),       // DataOffset + 8 itself wraps
            (0xFFFF_FF00, 0x200), // the frame end wraps
        ] {
            let m = packet(message_len, data_offset, data_len);
            assert_eq!(
                parse_rx_record(&m, 0),
                Some(RxRecord::Skip { next: message_len }),
                "DataOffset {data_offset:#x}, DataLength {data_len}"
            );
        }
        // And MessageLength itself cannot run the next offset past the end.
        let mut m = packet(44 + 60, 36, 60);
        put32(&mut m, 4, u32::MAX);
        assert_eq!(parse_rx_record(&m, 0), Some(RxRecord::Truncated));
    }
}
