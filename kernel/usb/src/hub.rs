//! Hub class driver (USB 2.0 §11.24): hub descriptor, port power, port reset, port status
//! and speed. Sequence and delays after Circle `usbstandardhub.cpp`.

use crate::descriptor::{HubDescriptor, kind};
use crate::device::{UsbDevice, request};
use bramble_hal::usb::{
    DeviceTarget, SetupPacket, Speed, TransactionTranslator, UsbError, UsbHost,
};

/// Port features for SET_FEATURE / CLEAR_FEATURE (USB 2.0 table 11-17).
pub mod feature {
    /// PORT_ENABLE.
    pub const PORT_ENABLE: u16 = 1;
    /// PORT_RESET.
    pub const PORT_RESET: u16 = 4;
    /// PORT_POWER.
    pub const PORT_POWER: u16 = 8;
    /// C_PORT_CONNECTION.
    pub const C_PORT_CONNECTION: u16 = 16;
    /// C_PORT_ENABLE.
    pub const C_PORT_ENABLE: u16 = 17;
    /// C_PORT_OVER_CURRENT.
    pub const C_PORT_OVER_CURRENT: u16 = 19;
    /// C_PORT_RESET.
    pub const C_PORT_RESET: u16 = 20;
}

/// `wPortStatus` bits (USB 2.0 table 11-21).
pub mod status {
    /// A device is present.
    pub const CONNECTION: u16 = 0x0001;
    /// The port is enabled.
    pub const ENABLE: u16 = 0x0002;
    /// Over-current condition.
    pub const OVER_CURRENT: u16 = 0x0008;
    /// Reset signalling in progress.
    pub const RESET: u16 = 0x0010;
    /// Port power on.
    pub const POWER: u16 = 0x0100;
    /// Low-speed device attached.
    pub const LOW_SPEED: u16 = 0x0200;
    /// High-speed device attached.
    pub const HIGH_SPEED: u16 = 0x0400;
}

/// `wPortChange` bits (USB 2.0 table 11-22).
pub mod change {
    /// C_PORT_CONNECTION.
    pub const CONNECTION: u16 = 0x0001;
    /// C_PORT_ENABLE.
    pub const ENABLE: u16 = 0x0002;
    /// C_PORT_OVER_CURRENT.
    pub const OVER_CURRENT: u16 = 0x0008;
    /// C_PORT_RESET.
    pub const RESET: u16 = 0x0010;
}

/// Longest wait after powering ports for a device to show up: Circle's "bPwrOn2PwrGood delay
/// seems to be not enough for some devices" margin. The wait ends as soon as a port reports
/// a connection, so a prompt device costs only its hub's bPwrOn2PwrGood.
pub const POWER_ON_SETTLE_MS: u32 = 510;
/// Spacing of port-status polls while waiting for a device after power-on.
const POWER_ON_POLL_MS: u32 = 10;
/// Reset status polls and their spacing (Circle waits 100 ms in total).
const RESET_POLLS: u32 = 20;
const RESET_POLL_MS: u32 = 10;
/// Reset recovery time before the device must answer (USB 2.0 TRSTRCY).
pub const RESET_RECOVERY_MS: u32 = 10;

/// GET_STATUS(port) result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortStatus {
    /// `wPortStatus`.
    pub status: u16,
    /// `wPortChange`.
    pub change: u16,
}

impl PortStatus {
    /// Whether a device is attached.
    pub fn connected(&self) -> bool {
        self.status & status::CONNECTION != 0
    }
    /// Whether the port is enabled (reset done).
    pub fn enabled(&self) -> bool {
        self.status & status::ENABLE != 0
    }
    /// Speed of the attached device.
    pub fn speed(&self) -> Speed {
        if self.status & status::LOW_SPEED != 0 {
            Speed::Low
        } else if self.status & status::HIGH_SPEED != 0 {
            Speed::High
        } else {
            Speed::Full
        }
    }
}

/// A configured hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hub {
    /// The hub as a USB device.
    pub device: UsbDevice,
    /// Its hub descriptor.
    pub descriptor: HubDescriptor,
}

const PORT_OUT: u8 = 0x23; // host-to-device, class, other (port)
const PORT_IN: u8 = 0xA3;
const HUB_IN: u8 = 0xA0;

impl Hub {
    /// Reads the hub descriptor of an already configured hub, powers every port and waits
    /// for power to be good.
    pub fn start<H: UsbHost + ?Sized>(host: &mut H, device: UsbDevice) -> Result<Self, UsbError> {
        let mut buf = [0u8; 16];
        let n = host.control_in(
            &device.target,
            SetupPacket {
                request_type: HUB_IN,
                request: request::GET_DESCRIPTOR,
                value: (kind::HUB as u16) << 8,
                index: 0,
                length: buf.len() as u16,
            },
            &mut buf,
        )?;
        let descriptor = HubDescriptor::parse(&buf[..n])?;
        log::info!(
            "usb: hub {:04x}:{:04x} with {} ports",
            device.descriptor.vendor_id,
            device.descriptor.product_id,
            descriptor.num_ports
        );
        let hub = Hub { device, descriptor };
        for port in 1..=descriptor.num_ports {
            hub.set_port_feature(host, port, feature::PORT_POWER)?;
        }
        // Power is good after bPwrOn2PwrGood; then poll until a device connects (the
        // network device is built in, or already plugged in) or the margin runs out.
        let power_good = descriptor.power_on_to_good_ms as u32;
        host.delay_ms(power_good);
        let mut waited = power_good;
        while waited < POWER_ON_SETTLE_MS && !hub.any_port_connected(host)? {
            host.delay_ms(POWER_ON_POLL_MS);
            waited += POWER_ON_POLL_MS;
        }
        log::debug!("usb: hub ports settled after {waited} ms");
        Ok(hub)
    }

    fn any_port_connected<H: UsbHost + ?Sized>(&self, host: &mut H) -> Result<bool, UsbError> {
        for port in 1..=self.descriptor.num_ports {
            if self.port_status(host, port)?.connected() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn target(&self) -> &DeviceTarget {
        &self.device.target
    }

    /// SET_FEATURE(`feature`) on `port`.
    pub fn set_port_feature<H: UsbHost + ?Sized>(
        &self,
        host: &mut H,
        port: u8,
        feature: u16,
    ) -> Result<(), UsbError> {
        host.control_out(
            self.target(),
            SetupPacket {
                request_type: PORT_OUT,
                request: request::SET_FEATURE,
                value: feature,
                index: port as u16,
                length: 0,
            },
            &[],
        )
    }

    /// CLEAR_FEATURE(`feature`) on `port`.
    pub fn clear_port_feature<H: UsbHost + ?Sized>(
        &self,
        host: &mut H,
        port: u8,
        feature: u16,
    ) -> Result<(), UsbError> {
        host.control_out(
            self.target(),
            SetupPacket {
                request_type: PORT_OUT,
                request: request::CLEAR_FEATURE,
                value: feature,
                index: port as u16,
                length: 0,
            },
            &[],
        )
    }

    /// GET_STATUS(`port`).
    pub fn port_status<H: UsbHost + ?Sized>(
        &self,
        host: &mut H,
        port: u8,
    ) -> Result<PortStatus, UsbError> {
        let mut buf = [0u8; 4];
        let n = host.control_in(
            self.target(),
            SetupPacket {
                request_type: PORT_IN,
                request: request::GET_STATUS,
                value: 0,
                index: port as u16,
                length: 4,
            },
            &mut buf,
        )?;
        if n < 4 {
            return Err(UsbError::Protocol);
        }
        Ok(PortStatus {
            status: u16::from_le_bytes([buf[0], buf[1]]),
            change: u16::from_le_bytes([buf[2], buf[3]]),
        })
    }

    /// Acknowledges every change bit reported in `status` on `port`.
    pub fn clear_changes<H: UsbHost + ?Sized>(
        &self,
        host: &mut H,
        port: u8,
        status: PortStatus,
    ) -> Result<(), UsbError> {
        let pairs = [
            (change::CONNECTION, feature::C_PORT_CONNECTION),
            (change::ENABLE, feature::C_PORT_ENABLE),
            (change::OVER_CURRENT, feature::C_PORT_OVER_CURRENT),
            (change::RESET, feature::C_PORT_RESET),
        ];
        for (bit, feat) in pairs {
            if status.change & bit != 0 {
                self.clear_port_feature(host, port, feat)?;
            }
        }
        Ok(())
    }

    /// Resets `port`, waits for it to be enabled, acknowledges the changes and returns the
    /// speed of the device now at address 0.
    pub fn reset_port<H: UsbHost + ?Sized>(
        &self,
        host: &mut H,
        port: u8,
    ) -> Result<Speed, UsbError> {
        self.set_port_feature(host, port, feature::PORT_RESET)?;
        for _ in 0..RESET_POLLS {
            host.delay_ms(RESET_POLL_MS);
            let st = self.port_status(host, port)?;
            if !st.connected() {
                self.clear_changes(host, port, st)?;
                return Err(UsbError::NoDevice);
            }
            if st.status & status::RESET == 0 && st.enabled() {
                self.clear_changes(host, port, st)?;
                host.delay_ms(RESET_RECOVERY_MS);
                return Ok(st.speed());
            }
        }
        Err(UsbError::Timeout)
    }

    /// The transaction translator a device of `speed` on `port` is reached through.
    pub fn translator_for(&self, port: u8, speed: Speed) -> Option<TransactionTranslator> {
        if self.device.target.speed == Speed::High && speed != Speed::High {
            Some(TransactionTranslator {
                hub_address: self.device.target.address,
                port,
            })
        } else {
            self.device.target.translator
        }
    }
}
