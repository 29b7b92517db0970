//! CDC Ethernet Control Model driver (CDC ECM 1.2): QEMU usb-net's configuration 1 and what
//! many USB Ethernet adapters speak. Raw Ethernet frames on a bulk pair; a short packet (or a
//! zero-length packet) ends each frame.

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};

use crate::descriptor::{CdcFunctional, ConfigurationDescriptor, Endpoint, EndpointKind, class};
use crate::device::{UsbDevice, default_language, read_string, set_configuration, set_interface};
use crate::nic::{BulkPipes, DataPath, NicStats, RX_BUFFER_LEN, RxRecord, open_bulk_pipes};
use bramble_hal::usb::{SetupPacket, UsbError, UsbHost};

/// Class request SET_ETHERNET_PACKET_FILTER (CDC ECM 1.2 §6.2.4).
pub const SET_ETHERNET_PACKET_FILTER: u8 = 0x43;
/// Packet filter bits: all multicast, directed, broadcast.
pub const PACKET_FILTER: u16 = 0x02 | 0x04 | 0x08;

/// Where the ECM function lives in a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EcmBinding {
    /// `bConfigurationValue`.
    pub config_value: u8,
    /// Communications (control) interface number.
    pub control_interface: u8,
    /// Data interface number.
    pub data_interface: u8,
    /// The data interface's alternate setting that has the bulk pair (1 on usb-net).
    pub data_alternate: u8,
    /// Bulk-IN endpoint.
    pub bulk_in: Endpoint,
    /// Bulk-OUT endpoint.
    pub bulk_out: Endpoint,
    /// `iMACAddress` string index.
    pub mac_string: u8,
    /// `wMaxSegmentSize`.
    pub max_segment_size: u16,
}

impl EcmBinding {
    /// Finds an ECM control interface (class 2, subclass 6) with its Ethernet functional
    /// descriptor, and the data interface alternate setting that carries a bulk pair.
    pub fn find(config: &ConfigurationDescriptor<'_>) -> Option<Self> {
        let control = config.interfaces().find(|i| {
            i.class() == class::COMMUNICATIONS && i.subclass() == class::CDC_SUBCLASS_ETHERNET
        })?;
        let ethernet = control.ethernet_functional()?;
        let data_number = control
            .functional_descriptors()
            .find_map(|f| match f {
                CdcFunctional::Union { data_interface, .. } => Some(data_interface),
                _ => None,
            })
            .unwrap_or(control.number() + 1);
        let data = config.interfaces().find(|i| {
            i.number() == data_number
                && i.class() == class::CDC_DATA
                && i.find_endpoint(EndpointKind::Bulk, true).is_some()
                && i.find_endpoint(EndpointKind::Bulk, false).is_some()
        })?;
        Some(Self {
            config_value: config.value(),
            control_interface: control.number(),
            data_interface: data_number,
            data_alternate: data.alternate_setting(),
            bulk_in: data.find_endpoint(EndpointKind::Bulk, true)?,
            bulk_out: data.find_endpoint(EndpointKind::Bulk, false)?,
            mac_string: ethernet.mac_string_index,
            max_segment_size: ethernet.max_segment_size,
        })
    }
}

/// A running CDC-ECM function.
pub struct CdcEcm<H: UsbHost> {
    path: DataPath<H>,
    mac: MacAddress,
}

impl<H: UsbHost> CdcEcm<H> {
    /// SET_CONFIGURATION, MAC from the `iMACAddress` string, SET_INTERFACE to the data
    /// alternate setting, packet filter; on failure the host is handed back.
    pub fn new(mut host: H, device: UsbDevice, binding: EcmBinding) -> Result<Self, (UsbError, H)> {
        match Self::init(&mut host, &device, binding) {
            Ok((pipes, mac, rx_len)) => Ok(Self {
                path: DataPath::new(host, device, pipes, rx_len),
                mac,
            }),
            Err(e) => Err((e, host)),
        }
    }

    fn init(
        host: &mut H,
        device: &UsbDevice,
        binding: EcmBinding,
    ) -> Result<(BulkPipes, MacAddress, usize), UsbError> {
        set_configuration(host, &device.target, binding.config_value)?;
        let language = default_language(host, &device.target);
        let mut buf = [0u8; 64];
        let mac = read_string(host, &device.target, binding.mac_string, language, &mut buf)?
            .to_mac_address()
            .ok_or(UsbError::Protocol)?;
        if binding.data_alternate != 0 {
            set_interface(
                host,
                &device.target,
                binding.data_interface,
                binding.data_alternate,
            )?;
        }
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
        // Mandatory in the spec, but older QEMU STALLs it: never fatal (reference §4.3).
        let filter = host.control_out(
            &device.target,
            SetupPacket {
                request_type: 0x21,
                request: SET_ETHERNET_PACKET_FILTER,
                value: PACKET_FILTER,
                index: binding.control_interface as u16,
                length: 0,
            },
            &[],
        );
        if let Err(e) = filter {
            if e == UsbError::Disconnected {
                return Err(e);
            }
            log::warn!("cdc-ecm: packet filter request refused ({e}), continuing");
        }
        log::info!("cdc-ecm: up, mac {mac}");
        Ok((pipes, mac, rx_len))
    }

    /// Counters since start.
    pub fn stats(&self) -> NicStats {
        self.path.stats()
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

/// CDC-ECM carries one frame per transfer; an empty transfer (a lone ZLP) carries nothing.
fn whole_transfer_frame(data: &[u8], offset: usize) -> Option<RxRecord> {
    let len = data.len();
    if offset >= len {
        None
    } else if (14..=MAX_FRAME_LEN).contains(&len) {
        Some(RxRecord::Frame {
            start: 0,
            len,
            next: len,
        })
    } else {
        Some(RxRecord::Skip { next: len })
    }
}

impl<H: UsbHost> EthernetDevice for CdcEcm<H> {
    fn mac_address(&self) -> MacAddress {
        self.mac
    }

    /// ECM reports link changes on its interrupt endpoint; QEMU's answers every poll with
    /// "connected", so Bramble does not poll it and reports the link up while configured.
    fn link_state(&mut self) -> LinkState {
        LinkState::Up
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        self.path.receive(whole_transfer_frame, f)
    }

    fn can_transmit(&mut self) -> bool {
        self.path.can_transmit()
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        // The frame alone; the pipe was opened with zero-length termination, so frames of
        // 64·n bytes get a ZLP.
        self.path
            .transmit(len, len, |buf| (len, f(&mut buf[..len])))
    }

    /// The host's timed work (see [`UsbHost::poll_at`]); the driver has none of its own.
    fn poll_at(&mut self) -> Option<Instant> {
        self.path.poll_at()
    }

    fn poll_timers(&mut self) -> bool {
        self.path.poll_timers()
    }
}
