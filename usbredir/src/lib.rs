//! bramble-usbredir: a USB device server for QEMU's `usb-redir` device, with a model of the
//! SMSC LAN9514's Ethernet function behind it, so that a guest's smsc95xx driver (Linux's
//! or Bramble's) can be run against a chip that neither of them was written with.
//!
//! ```text
//! QEMU (usb-redir, usbredir client) ──unix socket──► Session (proto) ──► Smsc95xx model
//!                                                                       │ wire
//!                                                                       ▼
//!                                                      TAP device in the test's namespace
//! ```
//!
//! QEMU is started with `-chardev socket,id=ID,path=SOCKET -device
//! usb-redir,chardev=ID,port=1` after the server listens on SOCKET; the device connects at
//! high speed to the DWC2's root port (the hub QEMU would insert otherwise is full speed).
//! Faults are injected with commands on stdin or a control socket ([`run::Command`]); every
//! register access goes to a log ([`smsc::LogEntry::line`]), from which
//! [`sequence::normalize`] makes the comparable register sequence.

pub mod device;
pub mod proto;
pub mod run;
pub mod sequence;
pub mod session;
pub mod smsc;
// TUNSETIFF is an ioctl: the one unsafe call of this crate (see its SAFETY comment).
#[allow(unsafe_code)]
pub mod tap;
