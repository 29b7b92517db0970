//! Bramble's USB host stack: enumeration, the hub class driver and the USB Ethernet drivers
//! (SMSC95xx, CDC-ECM, RNDIS), all portable and written against the [`UsbHost`](bramble_hal::usb::UsbHost) trait that a
//! host controller driver (DWC2 on the Pi) implements. The trait and its types live in
//! [`bramble_hal::usb`], beside the other hardware seams.
//!
//! ```text
//! board ──► probe(host, options) ──► root port reset, enumerate, hub (one level), choose
//!                                      │
//!                     UsbNic<H>: Smsc95xx | CdcEcm | Rndis   (bramble_hal::EthernetDevice)
//! ```
//!
//! Wiring on the Pi (see `kernel/board/src/network.rs`): power the controller through the
//! mailbox, `Dwc2Host::new`, `enable_interrupts` and register `dwc2::handle_interrupt` on
//! `dwc2::IRQ`, then [`probe()`] with the board MAC. Drive the returned [`UsbNic`] through
//! `EthernetDevice`; sleep in WFI only if `dwc2::interrupts_taken()` did not change since
//! the last poll. On `DeviceError::Gone` (device unplugged, or silent on EP0 for a second),
//! take the host back with [`UsbNic::into_host`] and [`probe()`] again; a failed probe also
//! returns the host, so the caller can retry later. [`ReprobingNic`] does exactly that
//! behind `EthernetDevice`: a lost device is a link down, re-probed with back-off.
//!
//! Tests run the whole stack on the host against models in `model/`: a mock host controller
//! with hubs, QEMU's usb-net (ECM and RNDIS) and a register-level model of the LAN9514's
//! Ethernet function, using real descriptor bytes (`fixtures.rs`).
//!
//! That SMSC model was written by the same team from the same reading as the driver, so it
//! cannot catch a shared misreading. The independent judge is `usbredir/` at the top of the
//! repository: a second model of the chip, written from the datasheet and checked against
//! Linux's own smsc95xx driver in QEMU, which then runs Bramble's driver in QEMU over
//! usb-redir at high speed (`tests/tests/smsc95xx_model.rs`) and compares its register
//! sequence with Linux's (`usbredir/tests/register_sequence.rs`). usbredir/README.md ("The B+'s
//! Ethernet, judged by Linux") says what that proves, what it does not (the LAN9514's hub, the
//! real DWC2's timing, power sequencing are still only modelled), and which differences
//! between QEMU's DWC2 and the real one the driver relies on.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

pub mod cdc_ecm;
pub mod descriptor;
pub mod device;
pub mod hub;
pub mod nic;
pub mod probe;
pub mod recovery;
pub mod rndis;
pub mod smsc95xx;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod model;

pub use probe::{CdcPreference, NicKind, ProbeOptions, UsbNic, probe};
pub use recovery::{RecoveryCounters, ReprobingNic};
