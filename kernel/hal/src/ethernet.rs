//! An Ethernet interface: whatever sits below it (SMSC95xx, CDC-ECM, RNDIS, a Linux TAP device),
//! the network stack sees frames in and frames out.

use crate::Instant;

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MacAddress(pub [u8; 6]);

impl core::fmt::Display for MacAddress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// Whether the physical link is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// No carrier, or not yet negotiated.
    Down,
    /// Carrier present; frames can flow.
    Up,
}

/// Why a device operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The device went away (USB unplug, reset); the owner should re-probe it.
    Gone,
    /// A transfer failed; the device is still present and the next call may succeed.
    Transfer,
    /// The frame is larger than the device can send.
    FrameTooLarge,
    /// The transmit path is busy; try again after the next poll.
    Busy,
}

/// Largest Ethernet frame (without FCS) any Bramble driver sends or accepts.
pub const MAX_FRAME_LEN: usize = 1514;

/// A frame-level network interface.
///
/// Frames are Ethernet II frames without the trailing FCS. Drivers own their DMA buffers; the
/// closures let the stack read and write frames in place instead of copying through a
/// caller buffer.
pub trait EthernetDevice {
    /// The address frames are sent from.
    fn mac_address(&self) -> MacAddress;

    /// Current link state, as last reported by the hardware.
    fn link_state(&mut self) -> LinkState;

    /// If a received frame is waiting, calls `f` with it and returns its result.
    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError>;

    /// Whether [`EthernetDevice::transmit`] would accept a frame now.
    fn can_transmit(&mut self) -> bool;

    /// Lets `f` fill a `len`-byte frame in the device's transmit buffer, then sends it.
    fn transmit<R>(&mut self, len: usize, f: impl FnOnce(&mut [u8]) -> R)
    -> Result<R, DeviceError>;

    /// When the device next needs to be called although no interrupt will say so: timed
    /// work of its own, such as issuing again a receive that the hardware ended empty, or
    /// probing again for a device that went away. The caller wakes by then and calls
    /// [`EthernetDevice::poll_timers`] (or any of the methods above). `None`: interrupts
    /// and the network stack's own calls bring the device all its work.
    fn poll_at(&mut self) -> Option<Instant>;

    /// Does the timed work that [`EthernetDevice::poll_at`] announced, if it is due,
    /// without handing anything to the network stack, and says whether the stack now has
    /// something to collect: `true` when a frame, a completion or a state change waits for
    /// the next [`receive`](EthernetDevice::receive), [`can_transmit`](EthernetDevice::can_transmit)
    /// or [`link_state`](EthernetDevice::link_state) call; `false` when everything is still
    /// waiting, so that a wake-up for timers alone can skip the stack and sleep again.
    fn poll_timers(&mut self) -> bool;
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn mac_displays_as_colon_hex() {
        let mac = MacAddress([0xb8, 0x27, 0xeb, 0x01, 0x02, 0xff]);
        assert_eq!(format!("{mac}"), "b8:27:eb:01:02:ff");
    }
}
