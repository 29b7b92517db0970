//! Model of a USB hub (QEMU usb-hub or the LAN9514's hub): hub descriptor, per-port power,
//! connection, reset and change bits, and children that appear only on enabled ports.

use std::boxed::Box;
use std::vec::Vec;

use super::{DeviceModel, StandardState};
use crate::hub::{change, feature, status};
use bramble_hal::usb::{SetupPacket, Speed, UsbError};

/// One downstream port.
pub struct PortModel {
    /// The attached device.
    pub device: Option<Box<dyn DeviceModel>>,
    /// `wPortStatus`.
    pub status: u16,
    /// `wPortChange`.
    pub change: u16,
}

impl PortModel {
    /// Whether the port passes traffic.
    pub fn enabled(&self) -> bool {
        self.status & status::ENABLE != 0
    }
}

/// A hub.
pub struct HubModel {
    std: StandardState,
    descriptor: Vec<u8>,
    /// Downstream ports (index 0 = port 1).
    pub ports: Vec<PortModel>,
    power_switching: bool,
    /// Port resets requested, in order.
    pub resets: Vec<u8>,
}

impl HubModel {
    /// QEMU's usb-hub (8 ports, always powered, full speed).
    pub fn qemu() -> Self {
        Self::new(
            StandardState::new(
                &crate::fixtures::QEMU_HUB_DEVICE,
                &[&crate::fixtures::QEMU_HUB_CONFIG],
                Speed::Full,
            ),
            &crate::fixtures::QEMU_HUB_DESCRIPTOR,
            false,
        )
    }

    /// The LAN9514's hub (5 ports, per-port power switching, high speed).
    pub fn lan9514() -> Self {
        Self::new(
            StandardState::new(
                &crate::fixtures::LAN9514_HUB_DEVICE,
                &[&crate::fixtures::LAN9514_HUB_CONFIG],
                Speed::High,
            ),
            &crate::fixtures::LAN9514_HUB_DESCRIPTOR,
            true,
        )
    }

    fn new(std: StandardState, descriptor: &[u8], power_switching: bool) -> Self {
        let ports = (0..descriptor[2])
            .map(|_| PortModel {
                device: None,
                status: 0,
                change: 0,
            })
            .collect();
        let mut hub = Self {
            std,
            descriptor: descriptor.to_vec(),
            ports,
            power_switching,
            resets: Vec::new(),
        };
        hub.reset_ports();
        hub
    }

    /// Plugs `device` into `port` (1-based).
    pub fn attach(mut self, port: u8, device: Box<dyn DeviceModel>) -> Self {
        self.ports[port as usize - 1].device = Some(device);
        self.reset_ports();
        self
    }

    /// Pulls the device out of `port` (1-based), as a user would: the port reports the
    /// disconnection, and transfers to the device's address go nowhere.
    pub fn unplug(&mut self, port: u8) -> Option<Box<dyn DeviceModel>> {
        let p = &mut self.ports[port as usize - 1];
        let device = p.device.take()?;
        if p.status & status::CONNECTION != 0 {
            p.change |= change::CONNECTION;
        }
        if p.status & status::ENABLE != 0 {
            p.change |= change::ENABLE;
        }
        p.status &= !(status::CONNECTION | status::ENABLE | status::LOW_SPEED | status::HIGH_SPEED);
        Some(device)
    }

    /// Plugs `device` into `port` (1-based) of a running hub: a powered port reports the
    /// new connection; the device waits for a port reset at address 0.
    pub fn plug(&mut self, port: u8, mut device: Box<dyn DeviceModel>) {
        device.bus_reset();
        let p = &mut self.ports[port as usize - 1];
        p.device = Some(device);
        if p.status & status::POWER != 0 {
            Self::update_connection(p);
        }
    }

    fn reset_ports(&mut self) {
        let powered = !self.power_switching;
        for p in &mut self.ports {
            p.status = 0;
            p.change = 0;
            if powered {
                p.status |= status::POWER;
                Self::update_connection(p);
            }
        }
    }

    fn update_connection(p: &mut PortModel) {
        if let Some(dev) = p.device.as_deref_mut() {
            p.status |= status::CONNECTION;
            p.change |= change::CONNECTION;
            match dev.standard().speed {
                Speed::Low => p.status |= status::LOW_SPEED,
                Speed::High => p.status |= status::HIGH_SPEED,
                Speed::Full => {}
            }
        }
    }

    fn port_mut(&mut self, index: u16) -> Result<&mut PortModel, UsbError> {
        if index == 0 {
            return Err(UsbError::Stall);
        }
        self.ports
            .get_mut(index as usize - 1)
            .ok_or(UsbError::Stall)
    }
}

impl DeviceModel for HubModel {
    fn standard(&mut self) -> &mut StandardState {
        &mut self.std
    }

    fn class_control(&mut self, setup: SetupPacket, _data_out: &[u8]) -> Result<Vec<u8>, UsbError> {
        if self.std.configuration == 0 {
            return Err(UsbError::Stall);
        }
        match (setup.request_type, setup.request) {
            (0xA0, 6) if setup.value >> 8 == 0x29 => Ok(self.descriptor.clone()),
            (0xA0, 0) => Ok(std::vec![0; 4]),
            (0xA3, 0) => {
                let p = self.port_mut(setup.index)?;
                let mut out = p.status.to_le_bytes().to_vec();
                out.extend_from_slice(&p.change.to_le_bytes());
                Ok(out)
            }
            (0x23, 3) => {
                let index = setup.index;
                let p = self.port_mut(index)?;
                match setup.value {
                    feature::PORT_POWER => {
                        if p.status & status::POWER == 0 {
                            p.status |= status::POWER;
                            Self::update_connection(p);
                        }
                    }
                    feature::PORT_RESET => {
                        if p.status & status::POWER == 0 {
                            return Err(UsbError::Stall);
                        }
                        if let Some(dev) = p.device.as_deref_mut() {
                            dev.bus_reset();
                            p.status |= status::ENABLE;
                            p.change |= change::RESET;
                        }
                        self.resets.push(index as u8);
                    }
                    _ => return Err(UsbError::Stall),
                }
                Ok(Vec::new())
            }
            (0x23, 1) => {
                let p = self.port_mut(setup.index)?;
                match setup.value {
                    feature::PORT_ENABLE => p.status &= !status::ENABLE,
                    feature::C_PORT_CONNECTION => p.change &= !change::CONNECTION,
                    feature::C_PORT_ENABLE => p.change &= !change::ENABLE,
                    feature::C_PORT_OVER_CURRENT => p.change &= !change::OVER_CURRENT,
                    feature::C_PORT_RESET => p.change &= !change::RESET,
                    _ => return Err(UsbError::Stall),
                }
                Ok(Vec::new())
            }
            _ => Err(UsbError::Stall),
        }
    }

    fn bulk_in(&mut self, _endpoint: u8, _max_len: usize) -> Result<Option<Vec<u8>>, UsbError> {
        Ok(None)
    }

    fn bulk_out_packet(&mut self, _endpoint: u8, _packet: &[u8]) -> Result<(), UsbError> {
        Err(UsbError::Stall)
    }

    fn hub(&mut self) -> Option<&mut HubModel> {
        Some(self)
    }

    fn bus_reset(&mut self) {
        self.std.reset();
        self.reset_ports();
        for p in &mut self.ports {
            if let Some(d) = p.device.as_deref_mut() {
                d.bus_reset();
            }
        }
    }
}
