//! The usbredir wire protocol (usbredir's `usb-redirection-protocol.md`, version 0.7), as seen
//! from the usb-host side: QEMU's `usb-redir` device is the usb-guest and sends requests; this
//! program plays the USB device and answers.
//!
//! Every packet is a header (type, length, id) followed by a type-specific header and data,
//! little-endian and packed. The id is 32 bits until both sides' hello packets announced the
//! `64bits_ids` capability, 64 bits after. Decoding is checked: a length that does not match
//! the packet type is an error, never a panic or an out-of-bounds read.

use std::fmt;

/// Packet types (`usbredirproto.h`).
pub mod kind {
    /// First packet of each side: version string and capabilities.
    pub const HELLO: u32 = 0;
    /// usb-host → guest: a device is available.
    pub const DEVICE_CONNECT: u32 = 1;
    /// usb-host → guest: the device went away.
    pub const DEVICE_DISCONNECT: u32 = 2;
    /// guest → usb-host: reset the device.
    pub const RESET: u32 = 3;
    /// usb-host → guest: interfaces of the active configuration.
    pub const INTERFACE_INFO: u32 = 4;
    /// usb-host → guest: endpoints of the active configuration.
    pub const EP_INFO: u32 = 5;
    /// guest → usb-host: SET_CONFIGURATION.
    pub const SET_CONFIGURATION: u32 = 6;
    /// guest → usb-host: GET_CONFIGURATION.
    pub const GET_CONFIGURATION: u32 = 7;
    /// usb-host → guest: answer to either.
    pub const CONFIGURATION_STATUS: u32 = 8;
    /// guest → usb-host: SET_INTERFACE.
    pub const SET_ALT_SETTING: u32 = 9;
    /// guest → usb-host: GET_INTERFACE.
    pub const GET_ALT_SETTING: u32 = 10;
    /// usb-host → guest: answer to either.
    pub const ALT_SETTING_STATUS: u32 = 11;
    /// guest → usb-host: start an isochronous stream.
    pub const START_ISO_STREAM: u32 = 12;
    /// guest → usb-host: stop it.
    pub const STOP_ISO_STREAM: u32 = 13;
    /// usb-host → guest: answer to either.
    pub const ISO_STREAM_STATUS: u32 = 14;
    /// guest → usb-host: poll an interrupt IN endpoint from now on.
    pub const START_INTERRUPT_RECEIVING: u32 = 15;
    /// guest → usb-host: stop polling it.
    pub const STOP_INTERRUPT_RECEIVING: u32 = 16;
    /// usb-host → guest: answer to either.
    pub const INTERRUPT_RECEIVING_STATUS: u32 = 17;
    /// guest → usb-host: USB 3 bulk streams.
    pub const ALLOC_BULK_STREAMS: u32 = 18;
    /// guest → usb-host: USB 3 bulk streams.
    pub const FREE_BULK_STREAMS: u32 = 19;
    /// usb-host → guest: answer to either.
    pub const BULK_STREAMS_STATUS: u32 = 20;
    /// guest → usb-host: cancel the data packet with this id.
    pub const CANCEL_DATA_PACKET: u32 = 21;
    /// guest → usb-host: the guest's filter rejected the device.
    pub const FILTER_REJECT: u32 = 22;
    /// either way: a device filter string.
    pub const FILTER_FILTER: u32 = 23;
    /// guest → usb-host: the disconnect was seen.
    pub const DEVICE_DISCONNECT_ACK: u32 = 24;
    /// guest → usb-host: buffered bulk input.
    pub const START_BULK_RECEIVING: u32 = 25;
    /// guest → usb-host: stop it.
    pub const STOP_BULK_RECEIVING: u32 = 26;
    /// usb-host → guest: answer to either.
    pub const BULK_RECEIVING_STATUS: u32 = 27;
    /// A control transfer (both ways, same id).
    pub const CONTROL_PACKET: u32 = 100;
    /// A bulk transfer (both ways, same id).
    pub const BULK_PACKET: u32 = 101;
    /// An isochronous packet.
    pub const ISO_PACKET: u32 = 102;
    /// An interrupt transfer (IN: usb-host → guest, unsolicited, ids counting from 0).
    pub const INTERRUPT_PACKET: u32 = 103;
    /// Buffered bulk input.
    pub const BUFFERED_BULK_PACKET: u32 = 104;
}

/// Capability bits of the hello packet.
pub mod cap {
    /// USB 3 bulk streams.
    pub const BULK_STREAMS: u32 = 0;
    /// device_connect carries `device_version_bcd`.
    pub const CONNECT_DEVICE_VERSION: u32 = 1;
    /// Filter packets.
    pub const FILTER: u32 = 2;
    /// device_disconnect_ack.
    pub const DEVICE_DISCONNECT_ACK: u32 = 3;
    /// ep_info carries `max_packet_size`.
    pub const EP_INFO_MAX_PACKET_SIZE: u32 = 4;
    /// 64-bit packet ids.
    pub const IDS_64BIT: u32 = 5;
    /// 32-bit bulk lengths.
    pub const BULK_LENGTH_32BIT: u32 = 6;
    /// Buffered bulk input.
    pub const BULK_RECEIVING: u32 = 7;
}

/// Status codes of answers.
pub mod status {
    /// Done.
    pub const SUCCESS: u8 = 0;
    /// Cancelled by a cancel_data_packet.
    pub const CANCELLED: u8 = 1;
    /// Invalid request.
    pub const INVAL: u8 = 2;
    /// I/O error.
    pub const IOERROR: u8 = 3;
    /// The endpoint is halted (STALL handshake).
    pub const STALL: u8 = 4;
    /// Timed out.
    pub const TIMEOUT: u8 = 5;
    /// The device sent more than asked for.
    pub const BABBLE: u8 = 6;
}

/// Bus speeds of device_connect.
pub mod speed {
    /// 1.5 Mbit/s.
    pub const LOW: u8 = 0;
    /// 12 Mbit/s.
    pub const FULL: u8 = 1;
    /// 480 Mbit/s.
    pub const HIGH: u8 = 2;
}

/// Endpoint types of ep_info (the USB descriptor's values; 255 = no such endpoint).
pub mod ep_type {
    /// Control.
    pub const CONTROL: u8 = 0;
    /// Bulk.
    pub const BULK: u8 = 2;
    /// Interrupt.
    pub const INTERRUPT: u8 = 3;
    /// No endpoint at this address.
    pub const INVALID: u8 = 255;
}

/// Length of the version string field of hello.
pub const VERSION_LEN: usize = 64;
/// Largest packet accepted (a 64 KiB bulk transfer plus headers, with room to spare).
pub const MAX_PACKET_LEN: u32 = 1 << 20;

/// A decoding failure: the peer broke the protocol (the connection is dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// The length field exceeds [`MAX_PACKET_LEN`].
    TooLong(u32),
    /// A packet of this type has the wrong length for its type-specific header.
    BadLength {
        /// Packet type.
        kind: u32,
        /// Length received.
        length: usize,
    },
    /// The first packet was not hello.
    HelloExpected(u32),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::TooLong(n) => write!(f, "packet length {n} is over the limit"),
            ProtoError::BadLength { kind, length } => {
                write!(f, "packet type {kind} with a bad length {length}")
            }
            ProtoError::HelloExpected(kind) => write!(f, "first packet is type {kind}, not hello"),
        }
    }
}

impl std::error::Error for ProtoError {}

/// The capability words of one side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps(pub u32);

impl Caps {
    /// Whether capability `bit` is set.
    pub fn has(self, bit: u32) -> bool {
        bit < 32 && self.0 & (1 << bit) != 0
    }

    /// The set of both sides (what may be used on the wire).
    pub fn common(self, other: Caps) -> Caps {
        Caps(self.0 & other.0)
    }
}

/// The header of a control packet (both directions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlHeader {
    /// 0x00 or 0x80 (direction of the data stage).
    pub endpoint: u8,
    /// `bRequest`.
    pub request: u8,
    /// `bmRequestType`.
    pub request_type: u8,
    /// Answer status.
    pub status: u8,
    /// `wValue`.
    pub value: u16,
    /// `wIndex`.
    pub index: u16,
    /// `wLength` (request) or the length transferred (answer).
    pub length: u16,
}

/// The header of a bulk packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkHeader {
    /// Endpoint address (bit 7 = IN).
    pub endpoint: u8,
    /// Answer status.
    pub status: u8,
    /// Length requested (IN), sent (OUT) or transferred (answer).
    pub length: u32,
    /// USB 3 stream id (0).
    pub stream_id: u32,
}

/// A packet from the usb-guest (QEMU), decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestPacket {
    /// Version and capabilities.
    Hello {
        /// The guest's version string (for logs only).
        version: String,
        /// Its capabilities.
        caps: Caps,
    },
    /// Reset the device (USB bus reset).
    Reset,
    /// SET_CONFIGURATION.
    SetConfiguration(u8),
    /// GET_CONFIGURATION.
    GetConfiguration,
    /// SET_INTERFACE.
    SetAltSetting {
        /// Interface number.
        interface: u8,
        /// Alternate setting.
        alt: u8,
    },
    /// GET_INTERFACE.
    GetAltSetting(u8),
    /// Start polling an interrupt IN endpoint.
    StartInterruptReceiving(u8),
    /// Stop polling it.
    StopInterruptReceiving(u8),
    /// Cancel the data packet whose id is the header's.
    CancelDataPacket,
    /// A control transfer; `data` is the OUT data stage.
    Control(ControlHeader, Vec<u8>),
    /// A bulk transfer; `data` is the OUT data.
    Bulk(BulkHeader, Vec<u8>),
    /// An interrupt OUT transfer (this device has none).
    Interrupt {
        /// Endpoint address.
        endpoint: u8,
        /// Data.
        data: Vec<u8>,
    },
    /// Anything this device does not support (iso, streams, buffered bulk, filters).
    Unsupported(u32),
}

/// A complete packet: its id and content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// Packet id (answers carry it back).
    pub id: u64,
    /// The packet.
    pub packet: GuestPacket,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reassembles packets from the byte stream of one connection.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    peer_caps: Option<Caps>,
    our_caps: Caps,
}

impl Decoder {
    /// A decoder for a connection where we announce `our_caps`.
    pub fn new(our_caps: Caps) -> Self {
        Self {
            buf: Vec::new(),
            peer_caps: None,
            our_caps,
        }
    }

    /// Appends bytes read from the connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The capabilities both sides have, once the peer's hello was decoded.
    pub fn common_caps(&self) -> Option<Caps> {
        self.peer_caps.map(|c| c.common(self.our_caps))
    }

    fn id_len(&self) -> usize {
        match self.common_caps() {
            Some(caps) if caps.has(cap::IDS_64BIT) => 8,
            _ => 4,
        }
    }

    /// The next complete packet, `Ok(None)` if more bytes are needed.
    pub fn next_packet(&mut self) -> Result<Option<Incoming>, ProtoError> {
        let id_len = self.id_len();
        let header_len = 8 + id_len;
        if self.buf.len() < header_len {
            return Ok(None);
        }
        let kind = le32(&self.buf, 0);
        let length = le32(&self.buf, 4);
        if length > MAX_PACKET_LEN {
            return Err(ProtoError::TooLong(length));
        }
        let id = if id_len == 8 {
            u64::from_le_bytes(self.buf[8..16].try_into().expect("8 bytes"))
        } else {
            u64::from(le32(&self.buf, 8))
        };
        let total = header_len + length as usize;
        if self.buf.len() < total {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf[header_len..total].to_vec();
        self.buf.drain(..total);
        if self.peer_caps.is_none() && kind != kind::HELLO {
            return Err(ProtoError::HelloExpected(kind));
        }
        let packet = self.decode(kind, &body)?;
        if let GuestPacket::Hello { caps, .. } = &packet {
            self.peer_caps = Some(*caps);
        }
        Ok(Some(Incoming { id, packet }))
    }

    fn decode(&self, kind: u32, body: &[u8]) -> Result<GuestPacket, ProtoError> {
        let bad = || ProtoError::BadLength {
            kind,
            length: body.len(),
        };
        let exact = |n: usize| if body.len() == n { Ok(()) } else { Err(bad()) };
        let caps = self.common_caps().unwrap_or_default();
        Ok(match kind {
            kind::HELLO => {
                if body.len() < VERSION_LEN {
                    return Err(bad());
                }
                let text = &body[..VERSION_LEN];
                let end = text.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
                let version = String::from_utf8_lossy(&text[..end]).into_owned();
                // Only the first capability word is defined; later words are ignored.
                let caps = if body.len() >= VERSION_LEN + 4 {
                    Caps(le32(body, VERSION_LEN))
                } else {
                    Caps(0)
                };
                GuestPacket::Hello { version, caps }
            }
            kind::RESET => {
                exact(0)?;
                GuestPacket::Reset
            }
            kind::SET_CONFIGURATION => {
                exact(1)?;
                GuestPacket::SetConfiguration(body[0])
            }
            kind::GET_CONFIGURATION => {
                exact(0)?;
                GuestPacket::GetConfiguration
            }
            kind::SET_ALT_SETTING => {
                exact(2)?;
                GuestPacket::SetAltSetting {
                    interface: body[0],
                    alt: body[1],
                }
            }
            kind::GET_ALT_SETTING => {
                exact(1)?;
                GuestPacket::GetAltSetting(body[0])
            }
            kind::START_INTERRUPT_RECEIVING => {
                exact(1)?;
                GuestPacket::StartInterruptReceiving(body[0])
            }
            kind::STOP_INTERRUPT_RECEIVING => {
                exact(1)?;
                GuestPacket::StopInterruptReceiving(body[0])
            }
            kind::CANCEL_DATA_PACKET => {
                exact(0)?;
                GuestPacket::CancelDataPacket
            }
            kind::CONTROL_PACKET => {
                if body.len() < 10 {
                    return Err(bad());
                }
                let header = ControlHeader {
                    endpoint: body[0],
                    request: body[1],
                    request_type: body[2],
                    status: body[3],
                    value: le16(body, 4),
                    index: le16(body, 6),
                    length: le16(body, 8),
                };
                GuestPacket::Control(header, body[10..].to_vec())
            }
            kind::BULK_PACKET => {
                let long = caps.has(cap::BULK_LENGTH_32BIT);
                let header_len = if long { 10 } else { 8 };
                if body.len() < header_len {
                    return Err(bad());
                }
                let high = if long { u32::from(le16(body, 8)) } else { 0 };
                let header = BulkHeader {
                    endpoint: body[0],
                    status: body[1],
                    length: (high << 16) | u32::from(le16(body, 2)),
                    stream_id: le32(body, 4),
                };
                GuestPacket::Bulk(header, body[header_len..].to_vec())
            }
            kind::INTERRUPT_PACKET => {
                if body.len() < 4 {
                    return Err(bad());
                }
                GuestPacket::Interrupt {
                    endpoint: body[0],
                    data: body[4..].to_vec(),
                }
            }
            other => GuestPacket::Unsupported(other),
        })
    }
}

/// One endpoint of ep_info.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    /// Endpoint address (bit 7 = IN).
    pub address: u8,
    /// One of [`ep_type`].
    pub kind: u8,
    /// `bInterval`.
    pub interval: u8,
    /// Interface number it belongs to.
    pub interface: u8,
    /// Maximum packet size in bytes.
    pub max_packet_size: u16,
}

/// One interface of interface_info.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// `bInterfaceNumber`.
    pub number: u8,
    /// `bInterfaceClass`.
    pub class: u8,
    /// `bInterfaceSubClass`.
    pub subclass: u8,
    /// `bInterfaceProtocol`.
    pub protocol: u8,
}

/// What device_connect announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectInfo {
    /// One of [`speed`].
    pub speed: u8,
    /// `bDeviceClass`.
    pub class: u8,
    /// `bDeviceSubClass`.
    pub subclass: u8,
    /// `bDeviceProtocol`.
    pub protocol: u8,
    /// `idVendor`.
    pub vendor_id: u16,
    /// `idProduct`.
    pub product_id: u16,
    /// `bcdDevice`.
    pub device_version_bcd: u16,
}

/// Builds the packets this side sends, with the header layout both sides agreed on.
#[derive(Clone, Copy, Debug)]
pub struct Encoder {
    caps: Caps,
}

impl Encoder {
    /// Before the peer's hello: 32-bit ids, no optional fields.
    pub fn before_hello() -> Self {
        Self { caps: Caps(0) }
    }

    /// With the capabilities both sides announced.
    pub fn new(common: Caps) -> Self {
        Self { caps: common }
    }

    fn packet(&self, kind: u32, id: u64, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + body.len());
        out.extend_from_slice(&kind.to_le_bytes());
        let length = u32::try_from(body.len()).expect("packets are far below 4 GiB");
        out.extend_from_slice(&length.to_le_bytes());
        if self.caps.has(cap::IDS_64BIT) {
            out.extend_from_slice(&id.to_le_bytes());
        } else {
            // Ids are whatever the guest sent; with 32-bit ids they fit.
            out.extend_from_slice(&(id as u32).to_le_bytes());
        }
        out.extend_from_slice(body);
        out
    }

    /// hello: version string and our capabilities (always with a 32-bit id).
    pub fn hello(version: &str, caps: Caps) -> Vec<u8> {
        let mut body = vec![0u8; VERSION_LEN];
        let bytes = version.as_bytes();
        let n = bytes.len().min(VERSION_LEN - 1);
        body[..n].copy_from_slice(&bytes[..n]);
        body.extend_from_slice(&caps.0.to_le_bytes());
        Encoder::before_hello().packet(kind::HELLO, 0, &body)
    }

    /// device_connect.
    pub fn device_connect(&self, info: &ConnectInfo) -> Vec<u8> {
        let mut body = vec![info.speed, info.class, info.subclass, info.protocol];
        body.extend_from_slice(&info.vendor_id.to_le_bytes());
        body.extend_from_slice(&info.product_id.to_le_bytes());
        if self.caps.has(cap::CONNECT_DEVICE_VERSION) {
            body.extend_from_slice(&info.device_version_bcd.to_le_bytes());
        }
        self.packet(kind::DEVICE_CONNECT, 0, &body)
    }

    /// device_disconnect.
    pub fn device_disconnect(&self) -> Vec<u8> {
        self.packet(kind::DEVICE_DISCONNECT, 0, &[])
    }

    /// interface_info for up to 32 interfaces.
    pub fn interface_info(&self, interfaces: &[InterfaceInfo]) -> Vec<u8> {
        let count = interfaces.len().min(32);
        let mut body = vec![0u8; 4 + 4 * 32];
        body[..4].copy_from_slice(&(count as u32).to_le_bytes());
        for (i, interface) in interfaces.iter().take(count).enumerate() {
            body[4 + i] = interface.number;
            body[4 + 32 + i] = interface.class;
            body[4 + 64 + i] = interface.subclass;
            body[4 + 96 + i] = interface.protocol;
        }
        self.packet(kind::INTERFACE_INFO, 0, &body)
    }

    /// ep_info: slots 0-15 are OUT endpoints 0-15, slots 16-31 IN endpoints 0-15.
    pub fn ep_info(&self, endpoints: &[EndpointInfo]) -> Vec<u8> {
        let mut kinds = [ep_type::INVALID; 32];
        let mut intervals = [0u8; 32];
        let mut interfaces = [0u8; 32];
        let mut sizes = [0u16; 32];
        for ep in endpoints {
            let slot = usize::from((ep.address & 0x80) >> 3 | (ep.address & 0x0F));
            kinds[slot] = ep.kind;
            intervals[slot] = ep.interval;
            interfaces[slot] = ep.interface;
            sizes[slot] = ep.max_packet_size;
        }
        let mut body = Vec::with_capacity(160);
        body.extend_from_slice(&kinds);
        body.extend_from_slice(&intervals);
        body.extend_from_slice(&interfaces);
        if self.caps.has(cap::EP_INFO_MAX_PACKET_SIZE) {
            for size in sizes {
                body.extend_from_slice(&size.to_le_bytes());
            }
        }
        self.packet(kind::EP_INFO, 0, &body)
    }

    /// configuration_status.
    pub fn configuration_status(&self, id: u64, status: u8, configuration: u8) -> Vec<u8> {
        self.packet(kind::CONFIGURATION_STATUS, id, &[status, configuration])
    }

    /// alt_setting_status.
    pub fn alt_setting_status(&self, id: u64, status: u8, interface: u8, alt: u8) -> Vec<u8> {
        self.packet(kind::ALT_SETTING_STATUS, id, &[status, interface, alt])
    }

    /// interrupt_receiving_status.
    pub fn interrupt_receiving_status(&self, id: u64, status: u8, endpoint: u8) -> Vec<u8> {
        self.packet(kind::INTERRUPT_RECEIVING_STATUS, id, &[status, endpoint])
    }

    /// The answer to a control packet: the request's header with status and the length
    /// transferred, plus the IN data stage.
    pub fn control(
        &self,
        id: u64,
        request: &ControlHeader,
        status: u8,
        data_in: &[u8],
        length: u16,
    ) -> Vec<u8> {
        let mut body = vec![
            request.endpoint,
            request.request,
            request.request_type,
            status,
        ];
        body.extend_from_slice(&request.value.to_le_bytes());
        body.extend_from_slice(&request.index.to_le_bytes());
        body.extend_from_slice(&length.to_le_bytes());
        body.extend_from_slice(data_in);
        self.packet(kind::CONTROL_PACKET, id, &body)
    }

    /// The answer to a bulk packet: status, length transferred, and IN data.
    pub fn bulk(&self, id: u64, endpoint: u8, status: u8, length: u32, data_in: &[u8]) -> Vec<u8> {
        let mut body = vec![endpoint, status];
        body.extend_from_slice(&((length & 0xFFFF) as u16).to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        if self.caps.has(cap::BULK_LENGTH_32BIT) {
            body.extend_from_slice(&((length >> 16) as u16).to_le_bytes());
        }
        body.extend_from_slice(data_in);
        self.packet(kind::BULK_PACKET, id, &body)
    }

    /// An interrupt IN packet (unsolicited; ids count up from 0 per the protocol).
    pub fn interrupt(&self, id: u64, endpoint: u8, status: u8, data: &[u8]) -> Vec<u8> {
        let mut body = vec![endpoint, status];
        let length = u16::try_from(data.len()).expect("interrupt packets are short");
        body.extend_from_slice(&length.to_le_bytes());
        body.extend_from_slice(data);
        self.packet(kind::INTERRUPT_PACKET, id, &body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: Caps = Caps(
        1 << cap::CONNECT_DEVICE_VERSION | 1 << cap::EP_INFO_MAX_PACKET_SIZE | 1 << cap::IDS_64BIT,
    );

    fn guest_hello(caps: u32) -> Vec<u8> {
        Encoder::hello("qemu usb-redir guest 7.2.22", Caps(caps))
    }

    #[test]
    fn hello_then_64bit_ids_when_both_have_them() {
        let mut decoder = Decoder::new(OURS);
        // QEMU 7.2 announces these (hw/usb/redirect.c usbredir_create_parser).
        let qemu = 1 << cap::CONNECT_DEVICE_VERSION
            | 1 << cap::FILTER
            | 1 << cap::EP_INFO_MAX_PACKET_SIZE
            | 1 << cap::IDS_64BIT
            | 1 << cap::BULK_LENGTH_32BIT
            | 1 << cap::BULK_RECEIVING;
        decoder.push(&guest_hello(qemu));
        let hello = decoder.next_packet().unwrap().unwrap();
        assert!(
            matches!(hello.packet, GuestPacket::Hello { ref version, .. } if version.starts_with("qemu"))
        );
        let common = decoder.common_caps().unwrap();
        assert!(common.has(cap::IDS_64BIT));
        assert!(
            !common.has(cap::BULK_LENGTH_32BIT),
            "we do not announce 32-bit bulk lengths"
        );
        // A bulk IN request with a 64-bit id, split across two reads.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&kind::BULK_PACKET.to_le_bytes());
        bytes.extend_from_slice(&8u32.to_le_bytes());
        bytes.extend_from_slice(&0x1_0000_0002u64.to_le_bytes());
        bytes.extend_from_slice(&[0x81, 0, 0x00, 0x4A, 0, 0, 0, 0]);
        decoder.push(&bytes[..10]);
        assert_eq!(decoder.next_packet().unwrap(), None);
        decoder.push(&bytes[10..]);
        let packet = decoder.next_packet().unwrap().unwrap();
        assert_eq!(packet.id, 0x1_0000_0002);
        assert_eq!(
            packet.packet,
            GuestPacket::Bulk(
                BulkHeader {
                    endpoint: 0x81,
                    status: 0,
                    length: 0x4A00,
                    stream_id: 0
                },
                Vec::new()
            )
        );
    }

    #[test]
    fn without_64bit_ids_the_header_is_12_bytes() {
        let mut decoder = Decoder::new(OURS);
        decoder.push(&guest_hello(1 << cap::EP_INFO_MAX_PACKET_SIZE));
        decoder.next_packet().unwrap().unwrap();
        let encoder = Encoder::new(decoder.common_caps().unwrap());
        let packet = encoder.configuration_status(7, status::SUCCESS, 1);
        assert_eq!(packet.len(), 12 + 2);
        assert_eq!(&packet[8..12], &7u32.to_le_bytes());
    }

    #[test]
    fn control_packets_round_trip_their_fields() {
        let mut decoder = Decoder::new(OURS);
        decoder.push(&guest_hello(1 << cap::IDS_64BIT));
        decoder.next_packet().unwrap();
        let encoder = Encoder::new(decoder.common_caps().unwrap());
        let request = ControlHeader {
            endpoint: 0,
            request: 0xA0,
            request_type: 0x40,
            status: 0,
            value: 0,
            index: 0x14,
            length: 4,
        };
        // What QEMU sends for a vendor register write (usbredir_handle_control).
        let mut body = vec![0, 0xA0, 0x40, 0, 0, 0, 0x14, 0, 4, 0];
        body.extend_from_slice(&[8, 0, 0, 0]);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&kind::CONTROL_PACKET.to_le_bytes());
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&5u64.to_le_bytes());
        bytes.extend_from_slice(&body);
        decoder.push(&bytes);
        let packet = decoder.next_packet().unwrap().unwrap();
        assert_eq!(
            packet.packet,
            GuestPacket::Control(request, vec![8, 0, 0, 0])
        );
        let answer = encoder.control(5, &request, status::SUCCESS, &[], 4);
        assert_eq!(&answer[16..], &[0, 0xA0, 0x40, 0, 0, 0, 0x14, 0, 4, 0]);
    }

    #[test]
    fn ep_info_places_in_endpoints_in_the_upper_half() {
        let encoder = Encoder::new(OURS);
        let packet = encoder.ep_info(&[EndpointInfo {
            address: 0x83,
            kind: ep_type::INTERRUPT,
            interval: 4,
            interface: 0,
            max_packet_size: 16,
        }]);
        let body = &packet[16..];
        assert_eq!(body.len(), 32 * 3 + 64);
        assert_eq!(body[16 + 3], ep_type::INTERRUPT);
        assert_eq!(body[32 + 16 + 3], 4);
        assert_eq!(
            u16::from_le_bytes([body[96 + 2 * 19], body[96 + 2 * 19 + 1]]),
            16
        );
        assert_eq!(body[0], ep_type::INVALID);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let mut decoder = Decoder::new(OURS);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&kind::RESET.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        decoder.push(&bytes);
        assert_eq!(
            decoder.next_packet(),
            Err(ProtoError::HelloExpected(kind::RESET))
        );

        let mut decoder = Decoder::new(OURS);
        decoder.push(&guest_hello(0));
        decoder.next_packet().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&kind::SET_CONFIGURATION.to_le_bytes());
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&[1, 2, 3]);
        decoder.push(&bytes);
        assert_eq!(
            decoder.next_packet(),
            Err(ProtoError::BadLength {
                kind: kind::SET_CONFIGURATION,
                length: 3
            })
        );

        let mut decoder = Decoder::new(OURS);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&kind::HELLO.to_le_bytes());
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        decoder.push(&bytes);
        assert_eq!(decoder.next_packet(), Err(ProtoError::TooLong(u32::MAX)));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic sweep (the fuzz target goes further).
        let mut seed = 0x1234_5678u32;
        for _ in 0..2000 {
            let mut decoder = Decoder::new(OURS);
            decoder.push(&guest_hello(
                1 << cap::IDS_64BIT | 1 << cap::BULK_LENGTH_32BIT,
            ));
            decoder.next_packet().unwrap();
            let mut bytes = Vec::new();
            for _ in 0..64 {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                bytes.push((seed >> 16) as u8);
            }
            // Small kinds and lengths, so that decoding paths are reached.
            bytes[0] = bytes[0] % 30
                + if bytes[1] & 1 == 0 {
                    0
                } else {
                    100 - bytes[0] % 30
                };
            bytes[1..4].fill(0);
            bytes[4] %= 48;
            bytes[5..8].fill(0);
            decoder.push(&bytes);
            while let Ok(Some(_)) = decoder.next_packet() {}
        }
    }
}
