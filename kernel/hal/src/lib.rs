//! Hardware traits: the seam between Bramble's drivers and its portable layers.
//!
//! Everything above these traits (site image, HTTP engine, network loop) is hardware-free and
//! runs on the host in tests; everything below them is a driver. Each trait is small on
//! purpose, and every error a driver can report is a documented enum variant. The error enums
//! are `#[non_exhaustive]`: drivers will learn new failures (card writes, new controllers),
//! so code outside this crate matches them with a fallback arm. [`led`] holds
//! the status LED's patterns, portable so that they are tested here; boards only switch a pin.
//! [`usb`] is the USB host controller seam: the chip crate implements it, the USB protocol
//! crate (`bramble-usb`) drives devices through it.
//! [`calendar`] is the workspace's one UTC calendar (Unix time to dates), here because this is
//! the crate every other one can depend on.
#![no_std]
#![forbid(unsafe_code)]

pub mod block;
pub mod calendar;
pub mod clock;
pub mod ethernet;
pub mod led;
pub mod usb;

pub use block::{BlockDevice, BlockError};
pub use clock::{Clock, Instant};
pub use ethernet::{DeviceError, EthernetDevice, LinkState, MacAddress};
pub use led::{LedPattern, LedState, Progress};
pub use usb::{UsbError, UsbHost};
