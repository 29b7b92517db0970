//! Standard requests and enumeration of one device: address 0, device descriptor (8 then 18
//! bytes), SET_ADDRESS, configuration descriptors, SET_CONFIGURATION, SET_INTERFACE
//! (USB 2.0 §9.1.2 and §9.4; timings from Circle `usbdevice.cpp` and USPi).

use crate::descriptor::{ConfigurationDescriptor, DeviceDescriptor, StringDescriptor, kind};
use bramble_hal::usb::{
    DeviceTarget, SetupPacket, Speed, TransactionTranslator, UsbError, UsbHost,
};

/// Standard request codes (USB 2.0 table 9-4).
pub mod request {
    /// GET_STATUS.
    pub const GET_STATUS: u8 = 0;
    /// CLEAR_FEATURE.
    pub const CLEAR_FEATURE: u8 = 1;
    /// SET_FEATURE.
    pub const SET_FEATURE: u8 = 3;
    /// SET_ADDRESS.
    pub const SET_ADDRESS: u8 = 5;
    /// GET_DESCRIPTOR.
    pub const GET_DESCRIPTOR: u8 = 6;
    /// SET_CONFIGURATION.
    pub const SET_CONFIGURATION: u8 = 9;
    /// SET_INTERFACE.
    pub const SET_INTERFACE: u8 = 11;
}

/// Milliseconds a device may take to accept requests at its new address: USB 2.0 §9.2.6.3
/// allows 2; 10 is the margin Linux uses (USPi waits 50).
pub const SET_ADDRESS_SETTLE_MS: u32 = 10;
/// Milliseconds to wait after SET_CONFIGURATION (no spec minimum; a small margin for slow
/// firmware, where USPi waits 50).
pub const SET_CONFIGURATION_SETTLE_MS: u32 = 10;

/// A standard GET_DESCRIPTOR request.
pub const fn get_descriptor(
    descriptor_type: u8,
    index: u8,
    language: u16,
    length: u16,
) -> SetupPacket {
    SetupPacket {
        request_type: 0x80,
        request: request::GET_DESCRIPTOR,
        value: ((descriptor_type as u16) << 8) | index as u16,
        index: language,
        length,
    }
}

/// CLEAR_FEATURE(ENDPOINT_HALT) for `endpoint` (bEndpointAddress).
pub const fn clear_endpoint_halt(endpoint: u8) -> SetupPacket {
    SetupPacket {
        request_type: 0x02,
        request: request::CLEAR_FEATURE,
        value: 0,
        index: endpoint as u16,
        length: 0,
    }
}

/// An addressed device, its descriptor and where it hangs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsbDevice {
    /// How to reach its endpoint 0.
    pub target: DeviceTarget,
    /// Its device descriptor.
    pub descriptor: DeviceDescriptor,
    /// The hub port it is plugged into (`None`: the root port).
    pub hub_port: Option<u8>,
}

/// Enumerates the device that is in the default state (address 0) after a port reset and
/// gives it `address`.
pub fn enumerate<H: UsbHost + ?Sized>(
    host: &mut H,
    speed: Speed,
    translator: Option<TransactionTranslator>,
    hub_port: Option<u8>,
    address: u8,
) -> Result<UsbDevice, UsbError> {
    if address == 0 || address > 127 {
        return Err(UsbError::InvalidRequest);
    }
    let mut target = DeviceTarget {
        address: 0,
        speed,
        ep0_max_packet: 8,
        translator,
    };
    let mut buf = [0u8; DeviceDescriptor::LEN];
    // First 8 bytes at the default address: enough for bMaxPacketSize0.
    let n = host.control_in(
        &target,
        get_descriptor(kind::DEVICE, 0, 0, 8),
        &mut buf[..8],
    )?;
    target.ep0_max_packet = DeviceDescriptor::max_packet_size0_from_prefix(&buf[..n])? as u16;

    host.control_out(
        &target,
        SetupPacket {
            request_type: 0x00,
            request: request::SET_ADDRESS,
            value: address as u16,
            index: 0,
            length: 0,
        },
        &[],
    )?;
    host.delay_ms(SET_ADDRESS_SETTLE_MS);
    target.address = address;

    let n = host.control_in(
        &target,
        get_descriptor(kind::DEVICE, 0, 0, DeviceDescriptor::LEN as u16),
        &mut buf,
    )?;
    let descriptor = DeviceDescriptor::parse(&buf[..n])?;
    log::info!(
        "usb: device {:04x}:{:04x} class {:02x} at address {} ({:?} speed{})",
        descriptor.vendor_id,
        descriptor.product_id,
        descriptor.class,
        address,
        speed,
        match hub_port {
            Some(_) => ", behind hub",
            None => ", root port",
        }
    );
    Ok(UsbDevice {
        target,
        descriptor,
        hub_port,
    })
}

/// Reads configuration descriptor number `index` (not its value) into `buf`: the 9-byte
/// header first, then all `wTotalLength` bytes.
pub fn read_configuration<'b, H: UsbHost + ?Sized>(
    host: &mut H,
    device: &DeviceTarget,
    index: u8,
    buf: &'b mut [u8],
) -> Result<ConfigurationDescriptor<'b>, UsbError> {
    let header_len = ConfigurationDescriptor::HEADER_LEN;
    if buf.len() < header_len {
        return Err(UsbError::InvalidRequest);
    }
    let n = host.control_in(
        device,
        get_descriptor(kind::CONFIGURATION, index, 0, header_len as u16),
        &mut buf[..header_len],
    )?;
    let total = ConfigurationDescriptor::total_length_from_header(&buf[..n])? as usize;
    if total > buf.len() {
        return Err(UsbError::InvalidRequest);
    }
    let n = host.control_in(
        device,
        get_descriptor(kind::CONFIGURATION, index, 0, total as u16),
        &mut buf[..total],
    )?;
    Ok(ConfigurationDescriptor::new_checked(&buf[..n])?)
}

/// Reads string descriptor `index` in `language` (0x0409 unless string 0 says otherwise).
pub fn read_string<'b, H: UsbHost + ?Sized>(
    host: &mut H,
    device: &DeviceTarget,
    index: u8,
    language: u16,
    buf: &'b mut [u8],
) -> Result<StringDescriptor<'b>, UsbError> {
    let len = buf.len().min(255);
    let n = host.control_in(
        device,
        get_descriptor(kind::STRING, index, language, len as u16),
        &mut buf[..len],
    )?;
    Ok(StringDescriptor::new_checked(&buf[..n])?)
}

/// The first language ID from string descriptor 0, or US English if the device has none.
pub fn default_language<H: UsbHost + ?Sized>(host: &mut H, device: &DeviceTarget) -> u16 {
    let mut buf = [0u8; 16];
    match read_string(host, device, 0, 0, &mut buf) {
        Ok(s) => s.first_language().unwrap_or(0x0409),
        Err(_) => 0x0409,
    }
}

/// SET_CONFIGURATION(`value`), then the settle delay.
pub fn set_configuration<H: UsbHost + ?Sized>(
    host: &mut H,
    device: &DeviceTarget,
    value: u8,
) -> Result<(), UsbError> {
    host.control_out(
        device,
        SetupPacket {
            request_type: 0x00,
            request: request::SET_CONFIGURATION,
            value: value as u16,
            index: 0,
            length: 0,
        },
        &[],
    )?;
    host.delay_ms(SET_CONFIGURATION_SETTLE_MS);
    Ok(())
}

/// SET_INTERFACE(`interface`, `alternate`).
pub fn set_interface<H: UsbHost + ?Sized>(
    host: &mut H,
    device: &DeviceTarget,
    interface: u8,
    alternate: u8,
) -> Result<(), UsbError> {
    host.control_out(
        device,
        SetupPacket {
            request_type: 0x01,
            request: request::SET_INTERFACE,
            value: alternate as u16,
            index: interface as u16,
            length: 0,
        },
        &[],
    )
}
