//! The one adapter from [`bramble_hal::EthernetDevice`] to smoltcp's [`smoltcp::phy::Device`],
//! and the stream pool's way out ([`bramble_stream::Transmit`]).
//!
//! `EthernetDevice` hands a received frame to a closure and offers no way to look at the
//! receive queue without taking the frame, while smoltcp wants a receive token before it
//! decides to read. The adapter therefore copies one received frame into its own buffer
//! (1,514 bytes) and holds it until smoltcp consumes it; a frame is only handed up together
//! with a transmit token, so that a reply (an ARP answer, an ICMP echo reply, a TCP ACK) has
//! somewhere to go. Transmission is in place: smoltcp writes straight into the driver's
//! transmit buffer. When the driver refuses a frame, the frame is built in a scratch buffer
//! and dropped, and the loss is counted: to TCP it is an ordinary lost packet.
//!
//! Frames for the stream pool's port are not shown to smoltcp: [`EthernetPhy::pull`] says
//! which kind the held frame is, and the appliance hands the pool's frames over with
//! [`EthernetPhy::take_held`]. IPv6 extension headers a host may pass over are taken out of
//! a received frame before either sees it ([`bramble_proto::ipv6_ext`]): a TCP segment behind a
//! destination-options header then goes to the pool like any other.

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, LinkState};
use bramble_proto::ipv6_ext::Stripped;
use smoltcp::phy::{self, DeviceCapabilities, Medium};
use smoltcp::time::Instant as SmolInstant;

/// Traffic and error counts kept by [`EthernetPhy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PhyCounters {
    /// Frames handed to the stack.
    pub rx_frames: u64,
    /// Frames given to the driver and accepted by it.
    pub tx_frames: u64,
    /// Received frames that were too large to hold (longer than [`MAX_FRAME_LEN`]).
    pub rx_oversized: u64,
    /// Receive calls that failed with [`DeviceError::Transfer`] or another transient error.
    pub rx_errors: u64,
    /// Frames the driver refused (busy, transfer error, too large): dropped.
    pub tx_dropped: u64,
    /// IPv6 frames dropped by the receive filter ([`Ipv6Filter`]).
    pub ipv6_filtered: u64,
    /// IPv6 frames whose extension headers were taken out before the stack or the pool saw
    /// them ([`bramble_proto::ipv6_ext`]).
    pub ipv6_extensions_removed: u64,
    /// IPv6 frames dropped for their extension headers (fragments, routing, options that
    /// must not be ignored, malformed chains).
    pub ipv6_extensions_dropped: u64,
}

/// Which received IPv6 frames (EtherType 0x86DD) reach the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipv6Filter {
    /// None (`ipv6 = off`): the stack then never has cause to send IPv6 either.
    Drop,
    /// Only Neighbor Discovery (ICMPv6 types 133-137 right after the IPv6 header): while no
    /// IPv6 address is assigned yet, duplicate address detection needs the advertisements,
    /// and nothing else may be answered (there is no address to answer from).
    NeighborDiscoveryOnly,
    /// All of them.
    Pass,
}

/// What [`EthernetPhy::pull`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// No frame: the device has none.
    Nothing,
    /// A frame for the stream pool (TCP to its port).
    ForPool,
    /// A frame for smoltcp (everything else).
    ForStack,
}

/// An [`EthernetDevice`] seen by smoltcp as an Ethernet-medium [`phy::Device`].
pub struct EthernetPhy<D: EthernetDevice> {
    device: D,
    receive_buffer: [u8; MAX_FRAME_LEN],
    /// Length of the frame held in `receive_buffer`, if one is waiting for smoltcp.
    held_frame: Option<usize>,
    scratch: [u8; MAX_FRAME_LEN],
    counters: PhyCounters,
    /// The first error that means the device is gone, kept until [`EthernetPhy::take_fault`].
    fault: Option<DeviceError>,
    /// See [`EthernetPhy::set_ipv6_filter`].
    ipv6_filter: Ipv6Filter,
    /// TCP frames to these ports go to the stream pools, not to smoltcp.
    divert_ports: [Option<u16>; 2],
    /// The held frame is one for the pool.
    held_for_pool: bool,
}

impl<D: EthernetDevice> EthernetPhy<D> {
    /// Wraps `device`. Checksums are computed and verified in software, which is right for
    /// every Bramble driver (none of the USB NICs offloads them usefully, and a TAP device
    /// expects complete frames).
    pub fn new(device: D) -> Self {
        Self {
            device,
            receive_buffer: [0; MAX_FRAME_LEN],
            held_frame: None,
            scratch: [0; MAX_FRAME_LEN],
            counters: PhyCounters::default(),
            fault: None,
            ipv6_filter: Ipv6Filter::Pass,
            divert_ports: [None; 2],
            held_for_pool: false,
        }
    }

    /// The wrapped device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The wrapped device, mutably (for link checks and driver housekeeping).
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Puts `device` in place of the current one (after the owner re-probed a device that
    /// went away) and returns the old one. Held frames and the recorded fault are dropped.
    pub fn replace_device(&mut self, device: D) -> D {
        self.held_frame = None;
        self.fault = None;
        core::mem::replace(&mut self.device, device)
    }

    /// The device's current link state.
    pub fn link_state(&mut self) -> LinkState {
        self.device.link_state()
    }

    /// Counts so far.
    pub fn counters(&self) -> PhyCounters {
        self.counters
    }

    /// Returns and clears the last "device gone" error seen, so the owner can re-probe.
    pub fn take_fault(&mut self) -> Option<DeviceError> {
        self.fault.take()
    }

    /// Whether a received frame is held, waiting for the stack to take it.
    pub fn has_held_frame(&self) -> bool {
        self.held_frame.is_some()
    }

    /// Drops a held frame (used when the link goes down: nothing received before is
    /// worth answering).
    pub fn discard_held_frame(&mut self) {
        self.held_frame = None;
    }

    /// Sets which received IPv6 frames reach the stack (default: all).
    pub fn set_ipv6_filter(&mut self, filter: Ipv6Filter) {
        self.ipv6_filter = filter;
    }

    /// Keeps TCP frames to `ports` (HTTP's and HTTPS's) from smoltcp: they are for the
    /// stream pools, which get them through [`EthernetPhy::pull_into_pool`] and
    /// [`EthernetPhy::take_held`].
    pub fn divert_tcp_ports(&mut self, ports: [Option<u16>; 2]) {
        self.divert_ports = ports;
    }

    /// Whether `frame` is TCP to one of the diverted ports.
    fn diverted(ports: [Option<u16>; 2], frame: &[u8]) -> bool {
        ports
            .into_iter()
            .flatten()
            .any(|port| bramble_stream::wire::is_tcp_to(frame, &[port]))
    }

    /// Takes the next frame from the device into the receive buffer, unless one is held
    /// already, and says whose it is.
    pub fn pull(&mut self) -> Held {
        self.fill_receive_buffer();
        match (self.held_frame, self.held_for_pool) {
            (None, _) => Held::Nothing,
            (Some(_), true) => Held::ForPool,
            (Some(_), false) => Held::ForStack,
        }
    }

    /// Hands the held frame to `f` and drops it (for the pool's frames; counted as
    /// received).
    pub fn take_held<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let len = self.held_frame.take()?;
        self.held_for_pool = false;
        self.counters.rx_frames += 1;
        Some(f(&self.receive_buffer[..len]))
    }

    /// Takes the next frame from the device: one for the stream pool goes to `pool` where it
    /// lies in the driver's buffer (no copy), anything else is copied into the receive
    /// buffer and held for smoltcp. Says which (a frame already held is smoltcp's).
    pub fn pull_into_pool(&mut self, pool: impl FnOnce(&[u8])) -> Held {
        if self.held_frame.is_some() {
            return if self.held_for_pool {
                Held::ForPool
            } else {
                Held::ForStack
            };
        }
        let ports = self.divert_ports;
        if ports == [None; 2] {
            return self.pull();
        }
        let mut pool = Some(pool);
        let filter = self.ipv6_filter;
        for _ in 0..MAX_SKIPPED_PER_CALL {
            let buffer = &mut self.receive_buffer;
            let result = self.device.receive(|frame| {
                // IPv6 ones only as the filter lets through (those it stops are copied, to
                // be counted and dropped below).
                if Self::diverted(ports, frame) && ipv6_passes(frame, filter) {
                    if let Some(pool) = pool.take() {
                        pool(frame);
                    }
                    Some(None)
                } else if frame.len() > buffer.len() {
                    None
                } else {
                    buffer[..frame.len()].copy_from_slice(frame);
                    Some(Some(frame.len()))
                }
            });
            match result {
                Ok(Some(Some(None))) => {
                    self.counters.rx_frames += 1;
                    return Held::ForPool;
                }
                Ok(Some(Some(Some(len)))) => {
                    // One for smoltcp, or one for the pool behind IPv6 extension headers:
                    // through the IPv6 filter and the headers' removal like any other.
                    let Some(len) = self.admit_copied(len) else {
                        continue;
                    };
                    self.held_frame = Some(len);
                    self.held_for_pool = Self::diverted(ports, &self.receive_buffer[..len]);
                    return if self.held_for_pool {
                        Held::ForPool
                    } else {
                        Held::ForStack
                    };
                }
                Ok(Some(None)) => self.counters.rx_oversized += 1,
                Ok(None) => return Held::Nothing,
                Err(DeviceError::Gone) => {
                    self.fault = Some(DeviceError::Gone);
                    return Held::Nothing;
                }
                Err(_) => {
                    self.counters.rx_errors += 1;
                    return Held::Nothing;
                }
            }
        }
        Held::Nothing
    }

    /// The checks of a frame just copied into the receive buffer (`len` bytes): the IPv6
    /// filter, the removal of IPv6 extension headers ([`bramble_proto::ipv6_ext`]) and the SYN
    /// limits. The frame's length after them, or `None` if it is dropped (and counted).
    fn admit_copied(&mut self, len: usize) -> Option<usize> {
        if !ipv6_passes(&self.receive_buffer[..len], self.ipv6_filter) {
            self.counters.ipv6_filtered += 1;
            return None;
        }
        let len = match bramble_proto::ipv6_ext::strip(&mut self.receive_buffer[..len]) {
            Stripped::Unchanged => len,
            Stripped::Removed(shorter) => {
                self.counters.ipv6_extensions_removed += 1;
                shorter
            }
            Stripped::Drop(_) => {
                self.counters.ipv6_extensions_dropped += 1;
                return None;
            }
        };
        Some(len)
    }

    /// Pulls one frame from the device into the receive buffer if none is held, skipping
    /// (a bounded number of) frames that are to be dropped.
    fn fill_receive_buffer(&mut self) {
        for _ in 0..MAX_SKIPPED_PER_CALL {
            if self.held_frame.is_some() {
                return;
            }
            let buffer = &mut self.receive_buffer;
            let result = self.device.receive(|frame| {
                if frame.len() > buffer.len() {
                    None
                } else {
                    buffer[..frame.len()].copy_from_slice(frame);
                    Some(frame.len())
                }
            });
            match result {
                Ok(Some(Some(len))) => {
                    let Some(len) = self.admit_copied(len) else {
                        continue;
                    };
                    self.held_for_pool =
                        Self::diverted(self.divert_ports, &self.receive_buffer[..len]);
                    self.held_frame = Some(len);
                    return;
                }
                Ok(Some(None)) => self.counters.rx_oversized += 1,
                Ok(None) => return,
                Err(DeviceError::Gone) => {
                    self.fault = Some(DeviceError::Gone);
                    return;
                }
                Err(_) => {
                    self.counters.rx_errors += 1;
                    return;
                }
            }
        }
    }
}

impl<D: EthernetDevice> bramble_stream::Transmit for EthernetPhy<D> {
    fn can_transmit(&mut self) -> bool {
        self.device.can_transmit()
    }

    fn transmit<F: FnOnce(&mut [u8])>(&mut self, len: usize, fill: F) -> bool {
        match self.device.transmit(len, fill) {
            Ok(()) => {
                self.counters.tx_frames += 1;
                true
            }
            Err(error) => {
                if error == DeviceError::Gone {
                    self.fault = Some(error);
                }
                self.counters.tx_dropped += 1;
                false
            }
        }
    }
}

/// Frames dropped (oversized, deferred SYNs, filtered IPv6) in one receive call before giving
/// up the turn.
const MAX_SKIPPED_PER_CALL: usize = 64;
/// EtherType of IPv6.
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
/// Length of the fixed IPv6 header (RFC 8200 §3).
const IPV6_HEADER_LEN: usize = 40;

/// Whether `frame` gets past `filter` (frames other than IPv6 always do).
fn ipv6_passes(frame: &[u8], filter: Ipv6Filter) -> bool {
    if frame.get(12..14) != Some(&ETHERTYPE_IPV6[..]) {
        return true;
    }
    match filter {
        Ipv6Filter::Pass => true,
        Ipv6Filter::Drop => false,
        Ipv6Filter::NeighborDiscoveryOnly => {
            // Next header 58 (ICMPv6) straight after the fixed header, type 133-137.
            let next_header = frame.get(14 + 6);
            let icmp_type = frame.get(14 + IPV6_HEADER_LEN);
            next_header == Some(&58) && icmp_type.is_some_and(|t| (133..=137).contains(t))
        }
    }
}

/// A received frame, held in the adapter's buffer.
pub struct EthernetRxToken<'a> {
    frame: &'a [u8],
}

impl phy::RxToken for EthernetRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.frame)
    }
}

/// Permission to send one frame through the device.
pub struct EthernetTxToken<'a, D: EthernetDevice> {
    device: &'a mut D,
    scratch: &'a mut [u8; MAX_FRAME_LEN],
    counters: &'a mut PhyCounters,
    fault: &'a mut Option<DeviceError>,
}

impl<D: EthernetDevice> phy::TxToken for EthernetTxToken<'_, D> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        // The closure must run exactly once whatever the driver does: keep it in an Option,
        // keep its result outside the driver's closure, and fall back to the scratch buffer
        // if the driver refused the frame before calling it.
        let mut f = Some(f);
        let mut result = None;
        let sent = self.device.transmit(len, |frame| {
            if let Some(f) = f.take() {
                result = Some(f(frame));
            }
        });
        match sent {
            Ok(()) => self.counters.tx_frames += 1,
            Err(error) => {
                if error == DeviceError::Gone {
                    *self.fault = Some(error);
                }
                self.counters.tx_dropped += 1;
            }
        }
        match (result, f) {
            (Some(result), _) => result,
            (None, Some(f)) => {
                let len = len.min(self.scratch.len());
                f(&mut self.scratch[..len])
            }
            // The closure is either still in `f` or has produced `result`.
            (None, None) => unreachable!(),
        }
    }
}

impl<D: EthernetDevice> phy::Device for EthernetPhy<D> {
    type RxToken<'a>
        = EthernetRxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = EthernetTxToken<'a, D>
    where
        Self: 'a;

    fn receive(
        &mut self,
        _timestamp: SmolInstant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.fill_receive_buffer();
        let len = self.held_frame?;
        if self.held_for_pool {
            // The pool's: the appliance takes it (see `pull`).
            return None;
        }
        if !self.device.can_transmit() {
            // Keep the frame until a reply could be sent.
            return None;
        }
        self.held_frame = None;
        self.counters.rx_frames += 1;
        Some((
            EthernetRxToken {
                frame: &self.receive_buffer[..len],
            },
            EthernetTxToken {
                device: &mut self.device,
                scratch: &mut self.scratch,
                counters: &mut self.counters,
                fault: &mut self.fault,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: SmolInstant) -> Option<Self::TxToken<'_>> {
        if !self.device.can_transmit() {
            return None;
        }
        Some(EthernetTxToken {
            device: &mut self.device,
            scratch: &mut self.scratch,
            counters: &mut self.counters,
            fault: &mut self.fault,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = MAX_FRAME_LEN;
        caps.max_burst_size = None;
        // caps.checksum stays at its default: smoltcp computes and verifies every checksum.
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{MockDevice, wired_pair};
    use smoltcp::iface::{Config, Interface, SocketSet, SocketStorage};
    use smoltcp::phy::{Device, RxToken, TxToken};
    use smoltcp::socket::tcp;
    use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, Ipv4Address};
    use std::vec;
    use std::vec::Vec;

    fn now() -> SmolInstant {
        SmolInstant::from_micros(0)
    }

    #[test]
    fn reports_ethernet_medium_and_full_frame_mtu() {
        let phy = EthernetPhy::new(MockDevice::new([2, 0, 0, 0, 0, 1]));
        let caps = phy.capabilities();
        assert_eq!(caps.medium, Medium::Ethernet);
        assert_eq!(caps.max_transmission_unit, 1514);
        assert_eq!(caps.ip_mtu(), 1500);
        assert!(caps.checksum.tcp.rx() && caps.checksum.tcp.tx());
        assert!(caps.checksum.ipv4.rx() && caps.checksum.ipv4.tx());
    }

    #[test]
    fn hands_received_frames_up_in_order() {
        let mut device = MockDevice::new([2, 0, 0, 0, 0, 1]);
        device.rx.push_back(Ok(vec![1; 60]));
        device.rx.push_back(Ok(vec![2; 1514]));
        let mut phy = EthernetPhy::new(device);
        let (rx, _tx) = phy.receive(now()).expect("first frame");
        assert_eq!(rx.consume(|f| f.to_vec()), vec![1; 60]);
        let (rx, _tx) = phy.receive(now()).expect("second frame");
        assert_eq!(rx.consume(|f| f.to_vec()), vec![2; 1514]);
        assert!(phy.receive(now()).is_none());
        assert_eq!(phy.counters().rx_frames, 2);
    }

    #[test]
    fn holds_a_frame_until_a_reply_could_be_sent() {
        let mut device = MockDevice::new([2, 0, 0, 0, 0, 1]);
        device.rx.push_back(Ok(vec![7; 64]));
        device.rx.push_back(Ok(vec![8; 64]));
        device.tx_ready = false;
        let mut phy = EthernetPhy::new(device);
        assert!(phy.receive(now()).is_none());
        assert!(phy.has_held_frame());
        // The second frame is still queued in the device, not overwritten into the buffer.
        assert_eq!(phy.device().rx.len(), 1);
        assert!(phy.transmit(now()).is_none());
        phy.device_mut().tx_ready = true;
        let (rx, _tx) = phy.receive(now()).expect("held frame");
        assert_eq!(rx.consume(|f| f.to_vec()), vec![7; 64]);
        let (rx, _tx) = phy.receive(now()).expect("next frame");
        assert_eq!(rx.consume(|f| f.to_vec()), vec![8; 64]);
    }

    #[test]
    fn oversized_frames_and_errors_are_counted_not_delivered() {
        let mut device = MockDevice::new([2, 0, 0, 0, 0, 1]);
        device.rx.push_back(Ok(vec![0; MAX_FRAME_LEN + 1]));
        device.rx.push_back(Err(DeviceError::Transfer));
        device.rx.push_back(Err(DeviceError::Gone));
        device.rx.push_back(Ok(vec![3; 100]));
        let mut phy = EthernetPhy::new(device);
        // The oversized frame is skipped; the transfer error ends the turn.
        assert!(phy.receive(now()).is_none());
        assert_eq!(phy.counters().rx_errors, 1);
        assert!(phy.receive(now()).is_none());
        assert_eq!(phy.take_fault(), Some(DeviceError::Gone));
        assert_eq!(phy.take_fault(), None);
        let (rx, _tx) = phy.receive(now()).expect("good frame after errors");
        assert_eq!(rx.consume(|f| f.len()), 100);
        let counters = phy.counters();
        assert_eq!(counters.rx_oversized, 1);
        assert_eq!(counters.rx_errors, 1);
        assert_eq!(counters.rx_frames, 1);
    }

    /// An Ethernet + IPv4 + TCP frame to `port` with TCP `flags`.
    fn tcp_frame(port: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 6;
        f[34 + 2..34 + 4].copy_from_slice(&port.to_be_bytes());
        f[34 + 12] = 0x50;
        f[34 + 13] = flags;
        f
    }

    fn tcp6_frame(port: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + 20];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[14 + 6] = 6;
        f[54 + 2..54 + 4].copy_from_slice(&port.to_be_bytes());
        f[54 + 12] = 0x50;
        f[54 + 13] = flags;
        f
    }

    fn icmp6_frame(icmp_type: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 40 + 8];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[14 + 6] = 58;
        f[54] = icmp_type;
        f
    }

    #[test]
    fn the_ipv6_filter_drops_all_or_all_but_neighbor_discovery() {
        let frames = || {
            [
                icmp6_frame(135),                // neighbour solicitation
                icmp6_frame(128),                // echo request
                tcp6_frame(80, 0x02),            // a connection request
                icmp6_frame(136),                // neighbour advertisement
                tcp_frame(80, 0x02),             // IPv4: never filtered
                icmp6_frame(136)[..54].to_vec(), // cut before the ICMPv6 type
            ]
        };
        for (filter, expected) in [
            (Ipv6Filter::Pass, 6),
            (Ipv6Filter::NeighborDiscoveryOnly, 3),
            (Ipv6Filter::Drop, 1),
        ] {
            let mut device = MockDevice::new([2, 0, 0, 0, 0, 1]);
            device.rx.extend(frames().into_iter().map(Ok));
            let mut phy = EthernetPhy::new(device);
            phy.set_ipv6_filter(filter);
            let mut delivered = 0;
            while let Some((rx, _tx)) = phy.receive(now()) {
                rx.consume(|_| ());
                delivered += 1;
            }
            assert_eq!(delivered, expected, "{filter:?}");
            assert_eq!(
                phy.counters().ipv6_filtered,
                6 - expected as u64,
                "{filter:?}"
            );
        }
    }

    #[test]
    fn frames_for_the_pool_are_kept_from_smoltcp_and_handed_over() {
        const SYN: u8 = 0x02;
        const ACK: u8 = 0x10;
        let mut device = MockDevice::new([2, 0, 0, 0, 0, 1]);
        for frame in [
            tcp_frame(8080, SYN), // another port: smoltcp's
            tcp_frame(80, SYN),   // the pool's
            tcp_frame(80, ACK),   // the pool's
            tcp_frame(22, ACK),   // smoltcp's
        ] {
            device.rx.push_back(Ok(frame));
        }
        let mut phy = EthernetPhy::new(device);
        phy.divert_tcp_ports([Some(80), None]);
        let port = |f: &[u8]| u16::from_be_bytes([f[36], f[37]]);
        let (rx, _tx) = phy.receive(now()).expect("smoltcp's frame");
        assert_eq!(rx.consume(port), 8080);
        // The next is the pool's: smoltcp sees nothing until it is taken.
        assert!(phy.receive(now()).is_none());
        assert_eq!(phy.pull(), Held::ForPool);
        assert_eq!(phy.take_held(port), Some(80));
        assert_eq!(phy.pull(), Held::ForPool);
        assert_eq!(phy.take_held(|f| f[47]), Some(ACK));
        assert_eq!(phy.pull(), Held::ForStack);
        let (rx, _tx) = phy.receive(now()).expect("smoltcp's frame");
        assert_eq!(rx.consume(port), 22);
        assert_eq!(phy.pull(), Held::Nothing);
        assert_eq!(phy.counters().rx_frames, 4);
        // The pool's frames can also be handed over where they lie.
        for frame in [tcp_frame(80, ACK), tcp_frame(22, ACK)] {
            phy.device_mut().rx.push_back(Ok(frame));
        }
        let mut seen = Vec::new();
        assert_eq!(phy.pull_into_pool(|f| seen.push(port(f))), Held::ForPool);
        assert_eq!(seen, vec![80]);
        assert_eq!(phy.pull_into_pool(|f| seen.push(port(f))), Held::ForStack);
        assert_eq!(
            seen,
            vec![80],
            "smoltcp's frame is held, not handed to the pool"
        );
        let (rx, _tx) = phy.receive(now()).expect("smoltcp's frame");
        assert_eq!(rx.consume(port), 22);
        assert_eq!(phy.pull_into_pool(|_| {}), Held::Nothing);
    }

    #[test]
    fn transmits_in_place_and_drops_refused_frames() {
        let mut device = MockDevice::new([2, 0, 0, 0, 0, 1]);
        device.tx_errors.push_back(DeviceError::Busy);
        device.tx_errors.push_back(DeviceError::Gone);
        let mut phy = EthernetPhy::new(device);
        // Refused: the closure still runs (smoltcp needs its result) but nothing is sent.
        let r = phy.transmit(now()).unwrap().consume(60, |f| {
            f.fill(9);
            f.len()
        });
        assert_eq!(r, 60);
        let r = phy.transmit(now()).unwrap().consume(60, |f| f.len());
        assert_eq!(r, 60);
        assert_eq!(phy.take_fault(), Some(DeviceError::Gone));
        let r = phy.transmit(now()).unwrap().consume(42, |f| {
            f.copy_from_slice(&[5; 42]);
            "sent"
        });
        assert_eq!(r, "sent");
        assert_eq!(phy.device().tx, vec![vec![5u8; 42]]);
        let counters = phy.counters();
        assert_eq!(counters.tx_dropped, 2);
        assert_eq!(counters.tx_frames, 1);
    }

    fn interface<D: EthernetDevice>(
        phy: &mut EthernetPhy<D>,
        mac: [u8; 6],
        ip: [u8; 4],
    ) -> Interface {
        let config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        let mut iface = Interface::new(config, phy, now());
        iface.update_ip_addrs(|addrs| {
            addrs
                .push(IpCidr::new(IpAddress::v4(ip[0], ip[1], ip[2], ip[3]), 24))
                .unwrap();
        });
        iface
    }

    /// Two smoltcp interfaces, each over an `EthernetPhy`, wired back to back: ARP resolves,
    /// a TCP connection opens, 20,000 bytes go each way (more than either window), it closes.
    #[test]
    fn full_tcp_exchange_over_wired_pair() {
        let mac_a = [2, 0, 0, 0, 0, 0xa];
        let mac_b = [2, 0, 0, 0, 0, 0xb];
        let (dev_a, dev_b) = wired_pair(mac_a, mac_b);
        let mut phy_a = EthernetPhy::new(dev_a);
        let mut phy_b = EthernetPhy::new(dev_b);
        let mut iface_a = interface(&mut phy_a, mac_a, [10, 0, 0, 1]);
        let mut iface_b = interface(&mut phy_b, mac_b, [10, 0, 0, 2]);

        let mut storage_a = [SocketStorage::EMPTY];
        let mut storage_b = [SocketStorage::EMPTY];
        let mut sockets_a = SocketSet::new(&mut storage_a[..]);
        let mut sockets_b = SocketSet::new(&mut storage_b[..]);
        let mut buffers = [[0u8; 4096]; 4];
        let [b0, b1, b2, b3] = &mut buffers;
        let server = sockets_a.add(tcp::Socket::new(
            tcp::SocketBuffer::new(&mut b0[..]),
            tcp::SocketBuffer::new(&mut b1[..]),
        ));
        let client = sockets_b.add(tcp::Socket::new(
            tcp::SocketBuffer::new(&mut b2[..]),
            tcp::SocketBuffer::new(&mut b3[..]),
        ));
        sockets_a.get_mut::<tcp::Socket>(server).listen(80).unwrap();
        sockets_b
            .get_mut::<tcp::Socket>(client)
            .connect(
                iface_b.context(),
                (Ipv4Address::new(10, 0, 0, 1), 80),
                49152,
            )
            .unwrap();

        let request: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let response: Vec<u8> = (0..20_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let (mut sent_req, mut sent_resp) = (0, 0);
        let (mut got_req, mut got_resp) = (Vec::new(), Vec::new());
        for clock in 0..10_000i64 {
            let t = SmolInstant::from_millis(clock);
            iface_a.poll(t, &mut phy_a, &mut sockets_a);
            iface_b.poll(t, &mut phy_b, &mut sockets_b);
            let c = sockets_b.get_mut::<tcp::Socket>(client);
            if c.can_send() && sent_req < request.len() {
                sent_req += c.send_slice(&request[sent_req..]).unwrap();
            }
            if c.can_recv() {
                c.recv(|d| {
                    got_resp.extend_from_slice(d);
                    (d.len(), ())
                })
                .unwrap();
            }
            if got_resp.len() == response.len() {
                c.close();
            }
            let s = sockets_a.get_mut::<tcp::Socket>(server);
            if s.can_recv() {
                s.recv(|d| {
                    got_req.extend_from_slice(d);
                    (d.len(), ())
                })
                .unwrap();
            }
            if s.can_send() && sent_resp < response.len() {
                sent_resp += s.send_slice(&response[sent_resp..]).unwrap();
            }
            if got_req.len() == request.len() && sent_resp == response.len() {
                s.close();
            }
            if sockets_b.get::<tcp::Socket>(client).state() == tcp::State::TimeWait
                || sockets_b.get::<tcp::Socket>(client).state() == tcp::State::Closed
                    && got_resp.len() == response.len()
            {
                break;
            }
        }
        assert_eq!(got_req, request);
        assert_eq!(got_resp, response);
        // 20,000 bytes need at least 14 full-size segments, plus the SYN.
        assert!(phy_a.counters().rx_frames >= 15);
        assert_eq!(phy_a.counters().tx_dropped, 0);
    }
}
