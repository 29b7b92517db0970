//! Finds the network device: resets the root port, enumerates what is there, walks one hub
//! level down if it is a hub, and starts the driver that fits (SMSC95xx by vendor/product,
//! RNDIS or CDC-ECM by interface class, RNDIS preferred unless told otherwise).

use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};

use crate::cdc_ecm::{CdcEcm, EcmBinding};
use crate::descriptor::{DeviceDescriptor, class};
use crate::device::{UsbDevice, enumerate, read_configuration, set_configuration};
use crate::hub::Hub;
use crate::nic::NicStats;
use crate::rndis::{Rndis, RndisBinding};
use crate::smsc95xx::{self, Smsc95xx, SmscBinding, SmscOptions};
use bramble_hal::usb::{UsbError, UsbHost};

/// Which class protocol to use when a device offers both (QEMU usb-net does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CdcPreference {
    /// RNDIS: about 7 times faster than ECM on QEMU (fewer paced small transfers).
    #[default]
    Rndis,
    /// CDC-ECM.
    CdcEcm,
}

/// Probe settings from the board.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeOptions {
    /// RNDIS or ECM when both are offered.
    pub prefer: CdcPreference,
    /// The board's MAC address (mailbox tag 0x00010003), programmed into an SMSC95xx.
    pub board_mac: Option<MacAddress>,
    /// SMSC95xx: several frames per bulk-IN transfer.
    pub smsc_multiple_frames: bool,
    /// RNDIS: pad transmitted messages to at least this many bytes (0: none). Only for
    /// QEMU's DWC2 model; see [`Rndis::pad_transfers_to`].
    pub rndis_min_transfer: usize,
}

/// Which driver runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NicKind {
    /// SMSC LAN95xx.
    Smsc95xx,
    /// CDC Ethernet Control Model.
    CdcEcm,
    /// Remote NDIS.
    Rndis,
}

/// The network device found by [`probe`], driving the host it owns.
pub enum UsbNic<H: UsbHost> {
    /// LAN95xx (Pi B+).
    Smsc95xx(Smsc95xx<H>),
    /// CDC-ECM (usb-net configuration 1, most adapters).
    CdcEcm(CdcEcm<H>),
    /// RNDIS (usb-net configuration 2).
    Rndis(Rndis<H>),
}

impl<H: UsbHost> UsbNic<H> {
    /// Which driver this is.
    pub fn kind(&self) -> NicKind {
        match self {
            UsbNic::Smsc95xx(_) => NicKind::Smsc95xx,
            UsbNic::CdcEcm(_) => NicKind::CdcEcm,
            UsbNic::Rndis(_) => NicKind::Rndis,
        }
    }

    /// Counters since start.
    pub fn stats(&self) -> NicStats {
        match self {
            UsbNic::Smsc95xx(d) => d.stats(),
            UsbNic::CdcEcm(d) => d.stats(),
            UsbNic::Rndis(d) => d.stats(),
        }
    }

    /// The USB device driven.
    pub fn device(&self) -> &UsbDevice {
        match self {
            UsbNic::Smsc95xx(d) => d.device(),
            UsbNic::CdcEcm(d) => d.device(),
            UsbNic::Rndis(d) => d.device(),
        }
    }

    /// The host controller (for controller-specific calls such as interrupt handling).
    pub fn host_mut(&mut self) -> &mut H {
        match self {
            UsbNic::Smsc95xx(d) => d.host_mut(),
            UsbNic::CdcEcm(d) => d.host_mut(),
            UsbNic::Rndis(d) => d.host_mut(),
        }
    }

    /// Gives the host back, e.g. to [`probe`] again after [`DeviceError::Gone`].
    pub fn into_host(self) -> H {
        match self {
            UsbNic::Smsc95xx(d) => d.into_host(),
            UsbNic::CdcEcm(d) => d.into_host(),
            UsbNic::Rndis(d) => d.into_host(),
        }
    }
}

impl<H: UsbHost> EthernetDevice for UsbNic<H> {
    fn mac_address(&self) -> MacAddress {
        match self {
            UsbNic::Smsc95xx(d) => d.mac_address(),
            UsbNic::CdcEcm(d) => d.mac_address(),
            UsbNic::Rndis(d) => d.mac_address(),
        }
    }
    fn link_state(&mut self) -> LinkState {
        match self {
            UsbNic::Smsc95xx(d) => d.link_state(),
            UsbNic::CdcEcm(d) => d.link_state(),
            UsbNic::Rndis(d) => d.link_state(),
        }
    }
    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        match self {
            UsbNic::Smsc95xx(d) => d.receive(f),
            UsbNic::CdcEcm(d) => d.receive(f),
            UsbNic::Rndis(d) => d.receive(f),
        }
    }
    fn can_transmit(&mut self) -> bool {
        match self {
            UsbNic::Smsc95xx(d) => d.can_transmit(),
            UsbNic::CdcEcm(d) => d.can_transmit(),
            UsbNic::Rndis(d) => d.can_transmit(),
        }
    }
    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        match self {
            UsbNic::Smsc95xx(d) => d.transmit(len, f),
            UsbNic::CdcEcm(d) => d.transmit(len, f),
            UsbNic::Rndis(d) => d.transmit(len, f),
        }
    }
    fn poll_at(&mut self) -> Option<Instant> {
        match self {
            UsbNic::Smsc95xx(d) => d.poll_at(),
            UsbNic::CdcEcm(d) => d.poll_at(),
            UsbNic::Rndis(d) => d.poll_at(),
        }
    }
    fn poll_timers(&mut self) -> bool {
        match self {
            UsbNic::Smsc95xx(d) => d.poll_timers(),
            UsbNic::CdcEcm(d) => d.poll_timers(),
            UsbNic::Rndis(d) => d.poll_timers(),
        }
    }
}

/// The driver chosen for a device, with what it needs from the descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// SMSC95xx endpoints.
    Smsc95xx(SmscBinding),
    /// CDC-ECM interfaces and endpoints.
    CdcEcm(EcmBinding),
    /// RNDIS interfaces and endpoints.
    Rndis(RndisBinding),
}

/// Configuration descriptors longer than this are not read (network functions are < 200).
const CONFIG_BUFFER_LEN: usize = 512;
/// Configurations examined per device.
const MAX_CONFIGURATIONS: u8 = 4;

/// Reads `device`'s configurations and picks a driver, or `None` if none fits.
pub fn choose_driver<H: UsbHost + ?Sized>(
    host: &mut H,
    device: &UsbDevice,
    prefer: CdcPreference,
) -> Result<Option<Binding>, UsbError> {
    let d = &device.descriptor;
    let mut buf = [0u8; CONFIG_BUFFER_LEN];
    if smsc95xx::matches(d.vendor_id, d.product_id) {
        let config = read_configuration(host, &device.target, 0, &mut buf)?;
        return Ok(SmscBinding::find(&config).map(Binding::Smsc95xx));
    }
    let mut ecm = None;
    let mut rndis = None;
    for index in 0..d.num_configurations.min(MAX_CONFIGURATIONS) {
        let config = match read_configuration(host, &device.target, index, &mut buf) {
            Ok(c) => c,
            Err(UsbError::Stall) => continue,
            Err(e) => return Err(e),
        };
        if ecm.is_none() {
            ecm = EcmBinding::find(&config);
        }
        if rndis.is_none() {
            rndis = RndisBinding::find(&config);
        }
    }
    Ok(match (prefer, rndis, ecm) {
        (CdcPreference::Rndis, Some(r), _) => Some(Binding::Rndis(r)),
        (CdcPreference::CdcEcm, _, Some(e)) => Some(Binding::CdcEcm(e)),
        (_, _, Some(e)) => Some(Binding::CdcEcm(e)),
        (_, Some(r), None) => Some(Binding::Rndis(r)),
        (_, None, None) => None,
    })
}

fn is_hub(d: &DeviceDescriptor) -> bool {
    d.class == class::HUB
}

/// Starts the driver for `binding` on `device`, taking over the host.
pub fn start_driver<H: UsbHost>(
    host: H,
    device: UsbDevice,
    binding: Binding,
    options: &ProbeOptions,
) -> Result<UsbNic<H>, (UsbError, H)> {
    match binding {
        Binding::Smsc95xx(b) => Smsc95xx::new(
            host,
            device,
            b,
            SmscOptions {
                mac: options.board_mac,
                multiple_frames: options.smsc_multiple_frames,
            },
        )
        .map(UsbNic::Smsc95xx),
        Binding::CdcEcm(b) => CdcEcm::new(host, device, b).map(UsbNic::CdcEcm),
        Binding::Rndis(b) => Rndis::new(host, device, b).map(|mut rndis| {
            rndis.pad_transfers_to(options.rndis_min_transfer);
            UsbNic::Rndis(rndis)
        }),
    }
}

/// Finds a network device on the root port or one hub level below it and starts its
/// driver. On failure the host comes back with the error so the caller can retry later.
pub fn probe<H: UsbHost>(mut host: H, options: ProbeOptions) -> Result<UsbNic<H>, (UsbError, H)> {
    match find_network_device(&mut host, options.prefer) {
        Ok((device, binding)) => start_driver(host, device, binding, &options),
        Err(e) => Err((e, host)),
    }
}

/// The enumeration half of [`probe`]: returns the device and the driver to start.
pub fn find_network_device<H: UsbHost + ?Sized>(
    host: &mut H,
    prefer: CdcPreference,
) -> Result<(UsbDevice, Binding), UsbError> {
    let speed = host.reset_root_port()?;
    let root = enumerate(host, speed, None, None, 1)?;
    if !is_hub(&root.descriptor) {
        return match choose_driver(host, &root, prefer)? {
            Some(binding) => Ok((root, binding)),
            None => {
                log::warn!(
                    "usb: {:04x}:{:04x} on the root port is not a network device",
                    root.descriptor.vendor_id,
                    root.descriptor.product_id
                );
                Err(UsbError::Unsupported)
            }
        };
    }

    let mut buf = [0u8; CONFIG_BUFFER_LEN];
    let config_value = read_configuration(host, &root.target, 0, &mut buf)?.value();
    set_configuration(host, &root.target, config_value)?;
    let hub = Hub::start(host, root)?;
    let mut next_address = 2;
    let mut found_any = false;
    for port in 1..=hub.descriptor.num_ports {
        let status = hub.port_status(host, port)?;
        if !status.connected() {
            continue;
        }
        found_any = true;
        hub.clear_changes(host, port, status)?;
        let speed = match hub.reset_port(host, port) {
            Ok(speed) => speed,
            Err(e) => {
                log::warn!("usb: hub port {port}: reset failed: {e}");
                continue;
            }
        };
        let translator = hub.translator_for(port, speed);
        let device = match enumerate(host, speed, translator, Some(port), next_address) {
            Ok(d) => d,
            Err(e) => {
                log::warn!("usb: hub port {port}: enumeration failed: {e}");
                continue;
            }
        };
        next_address += 1;
        if is_hub(&device.descriptor) {
            log::warn!("usb: hub port {port}: nested hubs are not supported");
            continue;
        }
        if let Some(binding) = choose_driver(host, &device, prefer)? {
            return Ok((device, binding));
        }
    }
    Err(if found_any {
        UsbError::Unsupported
    } else {
        UsbError::NoDevice
    })
}
