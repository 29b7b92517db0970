//! USB descriptors as typed views over the bytes a device sent: checked once on construction,
//! infallible accessors afterwards (USB 2.0 §9.6, CDC 1.2 §5.2.3, CDC ECM 1.2 §5.4).

use bramble_hal::MacAddress;

/// Descriptor type codes (`bDescriptorType`).
pub mod kind {
    /// Device descriptor.
    pub const DEVICE: u8 = 1;
    /// Configuration descriptor.
    pub const CONFIGURATION: u8 = 2;
    /// String descriptor.
    pub const STRING: u8 = 3;
    /// Interface descriptor.
    pub const INTERFACE: u8 = 4;
    /// Endpoint descriptor.
    pub const ENDPOINT: u8 = 5;
    /// Class-specific interface descriptor (CDC functional descriptors).
    pub const CS_INTERFACE: u8 = 0x24;
    /// Hub descriptor (USB 2.0 §11.23.2.1).
    pub const HUB: u8 = 0x29;
}

/// Class codes (`bDeviceClass` / `bInterfaceClass`).
pub mod class {
    /// Communications device class (CDC control interfaces).
    pub const COMMUNICATIONS: u8 = 0x02;
    /// Hub.
    pub const HUB: u8 = 0x09;
    /// CDC data interface.
    pub const CDC_DATA: u8 = 0x0A;
    /// Wireless controller (RNDIS on some phones: 0xE0/1/3).
    pub const WIRELESS: u8 = 0xE0;
    /// Miscellaneous (RNDIS over IAD: 0xEF/4/1).
    pub const MISCELLANEOUS: u8 = 0xEF;
    /// Vendor specific.
    pub const VENDOR: u8 = 0xFF;
    /// CDC subclass: Ethernet Networking Control Model.
    pub const CDC_SUBCLASS_ETHERNET: u8 = 0x06;
    /// CDC subclass: Abstract Control Model (RNDIS uses it with protocol 0xFF).
    pub const CDC_SUBCLASS_ACM: u8 = 0x02;
    /// CDC ACM protocol: vendor specific (RNDIS).
    pub const CDC_PROTOCOL_VENDOR: u8 = 0xFF;
}

/// Why descriptor bytes were rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DescriptorError {
    /// Fewer bytes than the descriptor's fixed part or its declared length.
    Truncated,
    /// `bDescriptorType` is not the expected one.
    WrongType,
    /// A length field is impossible (`bLength` < 2, odd string length, ...).
    BadLength,
}

impl From<DescriptorError> for bramble_hal::usb::UsbError {
    fn from(_: DescriptorError) -> Self {
        bramble_hal::usb::UsbError::Protocol
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The 18-byte device descriptor, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceDescriptor {
    /// `bcdUSB`.
    pub usb_version: u16,
    /// `bDeviceClass`.
    pub class: u8,
    /// `bDeviceSubClass`.
    pub subclass: u8,
    /// `bDeviceProtocol`.
    pub protocol: u8,
    /// `bMaxPacketSize0`.
    pub max_packet_size0: u8,
    /// `idVendor`.
    pub vendor_id: u16,
    /// `idProduct`.
    pub product_id: u16,
    /// `bcdDevice`.
    pub device_version: u16,
    /// `iManufacturer`.
    pub manufacturer_string: u8,
    /// `iProduct`.
    pub product_string: u8,
    /// `iSerialNumber`.
    pub serial_string: u8,
    /// `bNumConfigurations`.
    pub num_configurations: u8,
}

impl DeviceDescriptor {
    /// Length of a device descriptor.
    pub const LEN: usize = 18;

    /// Reads `bMaxPacketSize0` from the first 8 bytes (what enumeration fetches first).
    pub fn max_packet_size0_from_prefix(bytes: &[u8]) -> Result<u8, DescriptorError> {
        if bytes.len() < 8 {
            return Err(DescriptorError::Truncated);
        }
        if bytes[1] != kind::DEVICE {
            return Err(DescriptorError::WrongType);
        }
        match bytes[7] {
            8 | 16 | 32 | 64 => Ok(bytes[7]),
            _ => Err(DescriptorError::BadLength),
        }
    }

    /// Decodes a full device descriptor.
    pub fn parse(bytes: &[u8]) -> Result<Self, DescriptorError> {
        if bytes.len() < Self::LEN || (bytes[0] as usize) < Self::LEN {
            return Err(DescriptorError::Truncated);
        }
        if bytes[1] != kind::DEVICE {
            return Err(DescriptorError::WrongType);
        }
        Ok(Self {
            usb_version: le16(bytes, 2),
            class: bytes[4],
            subclass: bytes[5],
            protocol: bytes[6],
            max_packet_size0: Self::max_packet_size0_from_prefix(bytes)?,
            vendor_id: le16(bytes, 8),
            product_id: le16(bytes, 10),
            device_version: le16(bytes, 12),
            manufacturer_string: bytes[14],
            product_string: bytes[15],
            serial_string: bytes[16],
            num_configurations: bytes[17],
        })
    }
}

/// One raw descriptor inside a configuration: its type and all its bytes (header included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDescriptor<'a> {
    /// `bDescriptorType`.
    pub kind: u8,
    /// The descriptor's `bLength` bytes.
    pub bytes: &'a [u8],
}

/// Iterator over the descriptors of a checked byte run.
#[derive(Clone, Debug)]
pub struct Descriptors<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Descriptors<'a> {
    type Item = RawDescriptor<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        // The run was validated by `ConfigurationDescriptor::new_checked`: every bLength is
        // >= 2 and fits. Stop defensively anyway.
        let len = *self.rest.first()? as usize;
        if len < 2 || len > self.rest.len() {
            self.rest = &[];
            return None;
        }
        let (this, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(RawDescriptor {
            kind: this[1],
            bytes: this,
        })
    }
}

/// A whole configuration (the `wTotalLength` bytes of GET_DESCRIPTOR(CONFIGURATION)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigurationDescriptor<'a> {
    bytes: &'a [u8],
}

impl<'a> ConfigurationDescriptor<'a> {
    /// Length of the configuration descriptor's own header.
    pub const HEADER_LEN: usize = 9;

    /// `wTotalLength` from the 9-byte header (what enumeration reads first), checked to be
    /// at least the header's own `bLength`, which in turn is at least 9.
    pub fn total_length_from_header(bytes: &[u8]) -> Result<u16, DescriptorError> {
        if bytes.len() < Self::HEADER_LEN {
            return Err(DescriptorError::Truncated);
        }
        if bytes[1] != kind::CONFIGURATION {
            return Err(DescriptorError::WrongType);
        }
        let total = le16(bytes, 2);
        let header_len = bytes[0] as usize;
        // The header is part of the run wTotalLength counts, so it cannot be longer than it.
        if (total as usize) < Self::HEADER_LEN
            || header_len < Self::HEADER_LEN
            || header_len > total as usize
        {
            return Err(DescriptorError::BadLength);
        }
        Ok(total)
    }

    /// Checks the header and that every contained descriptor has a sane length that fits,
    /// and that interface and endpoint descriptors are at least their standard size.
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, DescriptorError> {
        let total = Self::total_length_from_header(bytes)? as usize;
        if bytes.len() < total {
            return Err(DescriptorError::Truncated);
        }
        let bytes = &bytes[..total];
        let mut rest = &bytes[bytes[0] as usize..];
        while !rest.is_empty() {
            let len = rest[0] as usize;
            if len < 2 {
                return Err(DescriptorError::BadLength);
            }
            if len > rest.len() {
                return Err(DescriptorError::Truncated);
            }
            let min = match rest[1] {
                kind::INTERFACE => 9,
                kind::ENDPOINT => 7,
                kind::CS_INTERFACE => 3,
                _ => 2,
            };
            if len < min {
                return Err(DescriptorError::BadLength);
            }
            rest = &rest[len..];
        }
        Ok(Self { bytes })
    }

    /// All bytes of the configuration.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// `bNumInterfaces`.
    pub fn num_interfaces(&self) -> u8 {
        self.bytes[4]
    }

    /// `bConfigurationValue`: the argument of SET_CONFIGURATION.
    pub fn value(&self) -> u8 {
        self.bytes[5]
    }

    /// `iConfiguration`.
    pub fn string_index(&self) -> u8 {
        self.bytes[6]
    }

    /// `bmAttributes`.
    pub fn attributes(&self) -> u8 {
        self.bytes[7]
    }

    /// Every descriptor after the configuration header, in order.
    pub fn descriptors(&self) -> Descriptors<'a> {
        Descriptors {
            rest: &self.bytes[self.bytes[0] as usize..],
        }
    }

    /// Every interface descriptor (each alternate setting separately), with the descriptors
    /// that follow it up to the next interface descriptor.
    pub fn interfaces(&self) -> Interfaces<'a> {
        Interfaces {
            inner: self.descriptors(),
            pending: None,
        }
    }

    /// The interface `number` with alternate setting `alternate`, if present.
    pub fn interface(&self, number: u8, alternate: u8) -> Option<Interface<'a>> {
        self.interfaces()
            .find(|i| i.number() == number && i.alternate_setting() == alternate)
    }
}

/// Iterator over the interfaces of a configuration.
#[derive(Clone, Debug)]
pub struct Interfaces<'a> {
    inner: Descriptors<'a>,
    pending: Option<&'a [u8]>,
}

impl<'a> Iterator for Interfaces<'a> {
    type Item = Interface<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        // Find the next interface descriptor (it may already have been read).
        let header = match self.pending.take() {
            Some(h) => h,
            None => loop {
                let d = self.inner.next()?;
                if d.kind == kind::INTERFACE {
                    break d.bytes;
                }
            },
        };
        // The body runs up to the next interface descriptor (or the end).
        let start = self.inner.rest;
        let mut body_len = 0;
        for d in self.inner.by_ref() {
            if d.kind == kind::INTERFACE {
                self.pending = Some(d.bytes);
                break;
            }
            body_len += d.bytes.len();
        }
        Some(Interface {
            header,
            body: &start[..body_len],
        })
    }
}

/// One interface alternate setting and its endpoint and class-specific descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interface<'a> {
    header: &'a [u8],
    body: &'a [u8],
}

impl<'a> Interface<'a> {
    /// `bInterfaceNumber`.
    pub fn number(&self) -> u8 {
        self.header[2]
    }
    /// `bAlternateSetting`.
    pub fn alternate_setting(&self) -> u8 {
        self.header[3]
    }
    /// `bNumEndpoints`.
    pub fn num_endpoints(&self) -> u8 {
        self.header[4]
    }
    /// `bInterfaceClass`.
    pub fn class(&self) -> u8 {
        self.header[5]
    }
    /// `bInterfaceSubClass`.
    pub fn subclass(&self) -> u8 {
        self.header[6]
    }
    /// `bInterfaceProtocol`.
    pub fn protocol(&self) -> u8 {
        self.header[7]
    }
    /// `iInterface`.
    pub fn string_index(&self) -> u8 {
        self.header[8]
    }

    /// The endpoint descriptors of this alternate setting.
    pub fn endpoints(&self) -> impl Iterator<Item = Endpoint> + 'a {
        Descriptors { rest: self.body }
            .filter(|d| d.kind == kind::ENDPOINT)
            .map(|d| Endpoint {
                address: d.bytes[2],
                attributes: d.bytes[3],
                max_packet_size: le16(d.bytes, 4) & 0x7FF,
                interval: d.bytes[6],
            })
    }

    /// The first endpoint with the given transfer type and direction.
    pub fn find_endpoint(&self, kind: EndpointKind, direction_in: bool) -> Option<Endpoint> {
        self.endpoints()
            .find(|e| e.kind() == kind && e.is_in() == direction_in)
    }

    /// The class-specific (CDC functional) descriptors of this interface.
    pub fn functional_descriptors(&self) -> impl Iterator<Item = CdcFunctional> + 'a {
        Descriptors { rest: self.body }
            .filter(|d| d.kind == kind::CS_INTERFACE)
            .map(CdcFunctional::decode)
    }

    /// The CDC Ethernet Networking functional descriptor, if this interface has one.
    pub fn ethernet_functional(&self) -> Option<EthernetFunctional> {
        self.functional_descriptors().find_map(|f| match f {
            CdcFunctional::Ethernet(e) => Some(e),
            _ => None,
        })
    }
}

/// Transfer type of an endpoint (`bmAttributes` bits 1:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointKind {
    /// Control.
    Control,
    /// Isochronous.
    Isochronous,
    /// Bulk.
    Bulk,
    /// Interrupt.
    Interrupt,
}

/// An endpoint descriptor, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `bEndpointAddress` (bit 7 = IN).
    pub address: u8,
    /// `bmAttributes`.
    pub attributes: u8,
    /// `wMaxPacketSize` bits 10:0.
    pub max_packet_size: u16,
    /// `bInterval`.
    pub interval: u8,
}

impl Endpoint {
    /// Whether data flows device to host.
    pub fn is_in(&self) -> bool {
        self.address & 0x80 != 0
    }
    /// The endpoint number (bits 3:0).
    pub fn number(&self) -> u8 {
        self.address & 0x0F
    }
    /// The transfer type.
    pub fn kind(&self) -> EndpointKind {
        match self.attributes & 3 {
            0 => EndpointKind::Control,
            1 => EndpointKind::Isochronous,
            2 => EndpointKind::Bulk,
            _ => EndpointKind::Interrupt,
        }
    }
}

/// CDC functional descriptor subtypes (CDC 1.2 table 13).
pub mod cdc_subtype {
    /// Header functional descriptor.
    pub const HEADER: u8 = 0x00;
    /// Call management functional descriptor.
    pub const CALL_MANAGEMENT: u8 = 0x01;
    /// Abstract control management functional descriptor.
    pub const ACM: u8 = 0x02;
    /// Union functional descriptor.
    pub const UNION: u8 = 0x06;
    /// Ethernet networking functional descriptor.
    pub const ETHERNET: u8 = 0x0F;
}

/// The Ethernet Networking functional descriptor (CDC ECM 1.2 §5.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetFunctional {
    /// `iMACAddress`: string descriptor holding the MAC as 12 hex digits.
    pub mac_string_index: u8,
    /// `bmEthernetStatistics`.
    pub statistics: u32,
    /// `wMaxSegmentSize`: largest frame the device handles (usually 1514).
    pub max_segment_size: u16,
    /// `wNumberMCFilters`.
    pub multicast_filters: u16,
}

/// A CDC functional descriptor, decoded as far as Bramble needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CdcFunctional {
    /// Header: `bcdCDC`.
    Header {
        /// CDC release number.
        cdc_version: u16,
    },
    /// Union: the control (master) and first data (slave) interface.
    Union {
        /// `bControlInterface`.
        control_interface: u8,
        /// `bSubordinateInterface0`.
        data_interface: u8,
    },
    /// Ethernet networking.
    Ethernet(EthernetFunctional),
    /// Any other subtype (or a known one too short to decode).
    Other {
        /// `bDescriptorSubtype`.
        subtype: u8,
    },
}

impl CdcFunctional {
    fn decode(d: RawDescriptor<'_>) -> Self {
        let b = d.bytes;
        match b[2] {
            cdc_subtype::HEADER if b.len() >= 5 => CdcFunctional::Header {
                cdc_version: le16(b, 3),
            },
            cdc_subtype::UNION if b.len() >= 5 => CdcFunctional::Union {
                control_interface: b[3],
                data_interface: b[4],
            },
            cdc_subtype::ETHERNET if b.len() >= 13 => CdcFunctional::Ethernet(EthernetFunctional {
                mac_string_index: b[3],
                statistics: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
                max_segment_size: le16(b, 8),
                multicast_filters: le16(b, 10),
            }),
            subtype => CdcFunctional::Other { subtype },
        }
    }
}

/// A string descriptor: UTF-16LE code units after a 2-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringDescriptor<'a> {
    units: &'a [u8],
}

impl<'a> StringDescriptor<'a> {
    /// Checks type and length (`bLength` even, within `bytes`).
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, DescriptorError> {
        if bytes.len() < 2 {
            return Err(DescriptorError::Truncated);
        }
        if bytes[1] != kind::STRING {
            return Err(DescriptorError::WrongType);
        }
        let len = bytes[0] as usize;
        if len < 2 || !len.is_multiple_of(2) {
            return Err(DescriptorError::BadLength);
        }
        if len > bytes.len() {
            return Err(DescriptorError::Truncated);
        }
        Ok(Self {
            units: &bytes[2..len],
        })
    }

    /// The UTF-16 code units.
    pub fn code_units(&self) -> impl Iterator<Item = u16> + 'a {
        self.units
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
    }

    /// The text, with unpaired surrogates replaced by U+FFFD.
    pub fn chars(&self) -> impl Iterator<Item = char> + 'a {
        char::decode_utf16(self.code_units()).map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER))
    }

    /// String descriptor 0 lists language IDs instead of text; the first one (0x0409 for
    /// US English on nearly every device).
    pub fn first_language(&self) -> Option<u16> {
        self.code_units().next()
    }

    /// Parses the text as a MAC address in 12 hex digits (CDC ECM `iMACAddress`).
    pub fn to_mac_address(&self) -> Option<MacAddress> {
        let mut mac = [0u8; 6];
        let mut count = 0;
        for c in self.chars() {
            let digit = c.to_digit(16)? as u8;
            if count >= 12 {
                return None;
            }
            mac[count / 2] = (mac[count / 2] << 4) | digit;
            count += 1;
        }
        (count == 12).then_some(MacAddress(mac))
    }
}

/// The hub class descriptor (USB 2.0 §11.23.2.1), decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HubDescriptor {
    /// `bNbrPorts`.
    pub num_ports: u8,
    /// `wHubCharacteristics`.
    pub characteristics: u16,
    /// `bPwrOn2PwrGood` in milliseconds (the field counts 2 ms units).
    pub power_on_to_good_ms: u16,
    /// `DeviceRemovable` bits for ports 1..=7 (bit n = port n is non-removable).
    pub non_removable: u8,
}

impl HubDescriptor {
    /// Decodes a hub descriptor (at least 7 bytes plus the variable bitmaps).
    pub fn parse(bytes: &[u8]) -> Result<Self, DescriptorError> {
        if bytes.len() < 7 {
            return Err(DescriptorError::Truncated);
        }
        if bytes[1] != kind::HUB {
            return Err(DescriptorError::WrongType);
        }
        if (bytes[0] as usize) < 7 {
            return Err(DescriptorError::BadLength);
        }
        Ok(Self {
            num_ports: bytes[2],
            characteristics: le16(bytes, 3),
            power_on_to_good_ms: bytes[5] as u16 * 2,
            non_removable: bytes.get(7).copied().unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;

    #[test]
    fn usb_net_device_descriptor_decodes() {
        let d = DeviceDescriptor::parse(&USB_NET_DEVICE).unwrap();
        assert_eq!((d.vendor_id, d.product_id), (0x0525, 0xa4a2));
        assert_eq!(d.class, class::COMMUNICATIONS);
        assert_eq!(d.max_packet_size0, 64);
        assert_eq!(d.num_configurations, 2);
        assert_eq!(d.usb_version, 0x0200);
        assert_eq!(
            DeviceDescriptor::max_packet_size0_from_prefix(&USB_NET_DEVICE[..8]),
            Ok(64)
        );
    }

    #[test]
    fn usb_net_ecm_configuration_has_ethernet_descriptor_and_alternate_data_interface() {
        let c = ConfigurationDescriptor::new_checked(&USB_NET_CONFIG_ECM).unwrap();
        assert_eq!(c.value(), 1);
        assert_eq!(c.num_interfaces(), 2);
        let ifaces: std::vec::Vec<_> = c
            .interfaces()
            .map(|i| {
                (
                    i.number(),
                    i.alternate_setting(),
                    i.class(),
                    i.num_endpoints(),
                )
            })
            .collect();
        assert_eq!(ifaces, [(0, 0, 2, 1), (1, 0, 0x0A, 0), (1, 1, 0x0A, 2)]);
        let control = c.interface(0, 0).unwrap();
        assert_eq!(control.subclass(), class::CDC_SUBCLASS_ETHERNET);
        let functional: std::vec::Vec<_> = control.functional_descriptors().collect();
        assert_eq!(
            functional[0],
            CdcFunctional::Header {
                cdc_version: 0x0110
            }
        );
        assert_eq!(
            functional[1],
            CdcFunctional::Union {
                control_interface: 0,
                data_interface: 1
            }
        );
        let eth = control.ethernet_functional().unwrap();
        assert_eq!(eth.mac_string_index, 3);
        assert_eq!(eth.max_segment_size, 1514);
        let status = control.endpoints().next().unwrap();
        assert_eq!(
            (
                status.address,
                status.kind(),
                status.max_packet_size,
                status.interval
            ),
            (0x81, EndpointKind::Interrupt, 16, 32)
        );
        assert_eq!(c.interface(1, 0).unwrap().endpoints().count(), 0);
        let data = c.interface(1, 1).unwrap();
        let bulk_in = data.find_endpoint(EndpointKind::Bulk, true).unwrap();
        let bulk_out = data.find_endpoint(EndpointKind::Bulk, false).unwrap();
        assert_eq!((bulk_in.address, bulk_in.max_packet_size), (0x82, 64));
        assert_eq!((bulk_out.address, bulk_out.number()), (0x02, 2));
    }

    #[test]
    fn usb_net_rndis_configuration_decodes() {
        let c = ConfigurationDescriptor::new_checked(&USB_NET_CONFIG_RNDIS).unwrap();
        assert_eq!(c.value(), 2);
        let control = c.interface(0, 0).unwrap();
        assert_eq!(
            (control.class(), control.subclass(), control.protocol()),
            (2, 2, 0xFF)
        );
        let subtypes: std::vec::Vec<_> = control
            .functional_descriptors()
            .map(|f| match f {
                CdcFunctional::Other { subtype } => subtype,
                CdcFunctional::Header { .. } => cdc_subtype::HEADER,
                CdcFunctional::Union { .. } => cdc_subtype::UNION,
                CdcFunctional::Ethernet(_) => cdc_subtype::ETHERNET,
            })
            .collect();
        assert_eq!(subtypes, [0x00, 0x01, 0x02, 0x06]);
        assert!(control.ethernet_functional().is_none());
        assert_eq!(c.interface(1, 0).unwrap().endpoints().count(), 2);
    }

    #[test]
    fn lan9514_descriptors_decode() {
        let d = DeviceDescriptor::parse(&LAN9514_ETH_DEVICE).unwrap();
        assert_eq!((d.vendor_id, d.product_id, d.class), (0x0424, 0xec00, 0xFF));
        let c = ConfigurationDescriptor::new_checked(&LAN9514_ETH_CONFIG).unwrap();
        let i = c.interface(0, 0).unwrap();
        let eps: std::vec::Vec<_> = i
            .endpoints()
            .map(|e| (e.address, e.kind(), e.max_packet_size))
            .collect();
        assert_eq!(
            eps,
            [
                (0x81, EndpointKind::Bulk, 512),
                (0x02, EndpointKind::Bulk, 512),
                (0x83, EndpointKind::Interrupt, 16)
            ]
        );

        let hub = DeviceDescriptor::parse(&LAN9514_HUB_DEVICE).unwrap();
        assert_eq!((hub.class, hub.protocol), (class::HUB, 2));
        let hc = ConfigurationDescriptor::new_checked(&LAN9514_HUB_CONFIG).unwrap();
        let alts: std::vec::Vec<_> = hc
            .interfaces()
            .map(|i| (i.alternate_setting(), i.protocol()))
            .collect();
        assert_eq!(alts, [(0, 1), (1, 2)]);
        let hd = HubDescriptor::parse(&LAN9514_HUB_DESCRIPTOR).unwrap();
        assert_eq!(
            (hd.num_ports, hd.power_on_to_good_ms, hd.non_removable),
            (5, 100, 0x02)
        );
        let qd = HubDescriptor::parse(&QEMU_HUB_DESCRIPTOR).unwrap();
        assert_eq!(
            (qd.num_ports, qd.characteristics, qd.power_on_to_good_ms),
            (8, 0x0a, 2)
        );
    }

    #[test]
    fn malformed_configurations_are_rejected() {
        // Truncated: fewer bytes than wTotalLength.
        assert_eq!(
            ConfigurationDescriptor::new_checked(&USB_NET_CONFIG_ECM[..60]),
            Err(DescriptorError::Truncated)
        );
        // A sub-descriptor with bLength 0 would loop forever in a naive parser.
        let mut zero = USB_NET_CONFIG_ECM;
        zero[9] = 0;
        assert_eq!(
            ConfigurationDescriptor::new_checked(&zero),
            Err(DescriptorError::BadLength)
        );
        // A sub-descriptor running past wTotalLength.
        let mut long = USB_NET_CONFIG_ECM;
        long[73] = 9;
        assert_eq!(
            ConfigurationDescriptor::new_checked(&long),
            Err(DescriptorError::Truncated)
        );
        // An endpoint descriptor shorter than 7 bytes.
        let mut short_ep = LAN9514_ETH_CONFIG;
        short_ep[32] = 6;
        short_ep[38] = 0x00;
        assert!(ConfigurationDescriptor::new_checked(&short_ep[..38]).is_err());
        // Not a configuration at all.
        assert_eq!(
            ConfigurationDescriptor::new_checked(&USB_NET_DEVICE),
            Err(DescriptorError::WrongType)
        );
        assert_eq!(
            DeviceDescriptor::parse(&USB_NET_DEVICE[..17]),
            Err(DescriptorError::Truncated)
        );
    }

    #[test]
    fn configuration_header_longer_than_total_length_is_rejected() {
        // bLength 0x40 in a 9-byte configuration (wTotalLength 9): the header would run past
        // the truncated run. Found in review (M2): the slice after truncation panicked.
        let mut config = [0u8; 0x40];
        config[..9].copy_from_slice(&[0x40, 0x02, 0x09, 0x00, 0x01, 0x01, 0x00, 0xc0, 0x32]);
        assert_eq!(
            ConfigurationDescriptor::new_checked(&config),
            Err(DescriptorError::BadLength)
        );
        // The same with the header's bLength just one past wTotalLength.
        let mut one_past = USB_NET_CONFIG_ECM;
        one_past[0] = 0x51;
        let mut padded = [0u8; 0x51];
        padded[..80].copy_from_slice(&one_past);
        assert_eq!(
            ConfigurationDescriptor::new_checked(&padded),
            Err(DescriptorError::BadLength)
        );
        // bLength equal to wTotalLength is a configuration with nothing in it: accepted.
        let mut bare = [0u8; 9];
        bare.copy_from_slice(&[0x09, 0x02, 0x09, 0x00, 0x00, 0x01, 0x00, 0xc0, 0x32]);
        let c = ConfigurationDescriptor::new_checked(&bare).unwrap();
        assert_eq!(c.interfaces().count(), 0);
    }

    #[test]
    fn string_descriptors_decode_utf16_and_macs() {
        let bytes = string_descriptor("405400123456");
        let s = StringDescriptor::new_checked(&bytes).unwrap();
        assert!(s.chars().eq("405400123456".chars()));
        assert_eq!(
            s.to_mac_address(),
            Some(MacAddress([0x40, 0x54, 0x00, 0x12, 0x34, 0x56]))
        );
        let upper = string_descriptor("B827EB0102FF");
        assert_eq!(
            StringDescriptor::new_checked(&upper)
                .unwrap()
                .to_mac_address(),
            Some(MacAddress([0xb8, 0x27, 0xeb, 0x01, 0x02, 0xff]))
        );
        for bad in ["40540012345", "4054001234567", "40540012345g"] {
            let b = string_descriptor(bad);
            assert_eq!(
                StringDescriptor::new_checked(&b).unwrap().to_mac_address(),
                None
            );
        }
        let accented = string_descriptor("Grüße ✓");
        assert!(
            StringDescriptor::new_checked(&accented)
                .unwrap()
                .chars()
                .eq("Grüße ✓".chars())
        );
        let langs = [4u8, 3, 0x09, 0x04];
        assert_eq!(
            StringDescriptor::new_checked(&langs)
                .unwrap()
                .first_language(),
            Some(0x0409)
        );
        assert_eq!(
            StringDescriptor::new_checked(&[5, 3, 0x41, 0, 0x42]),
            Err(DescriptorError::BadLength)
        );
        assert_eq!(
            StringDescriptor::new_checked(&[8, 3, 0x41, 0]),
            Err(DescriptorError::Truncated)
        );
    }
}
