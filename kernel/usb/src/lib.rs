//! Bramble's USB host stack: enumeration, the hub class driver and the USB Ethernet drivers
//! (SMSC95xx, CDC-ECM, RNDIS), all portable and written against the [`UsbHost`] trait that a
//! host controller driver (DWC2 on the Pi) implements.
//!
//! ```text
//! board ──► probe(host, options) ──► root port reset, enumerate, hub (one level), choose
//!                                      │
//!                     UsbNic<H>: Smsc95xx | CdcEcm | Rndis   (bramble_hal::EthernetDevice)
//! ```
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

pub mod cdc_ecm;
pub mod descriptor;
pub mod device;
pub mod host;
pub mod hub;
pub mod nic;
pub mod probe;
pub mod rndis;
pub mod smsc95xx;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod model;

pub use host::{
    DeviceTarget, PipeConfig, PipeId, SetupPacket, Speed, TransactionTranslator, TransferStatus,
    TransferType, UsbError, UsbHost,
};
pub use probe::{CdcPreference, NicKind, ProbeOptions, UsbNic, probe};
