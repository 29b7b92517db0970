//! Fault injection between the appliance and a device: drops and corrupts a share of frames
//! in each direction, as smoltcp's `FaultInjector` does, to test recovery over a bad wire.

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};

/// How often to misbehave, in percent of frames (each 0-100), and the random seed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Share of frames silently lost.
    pub drop_percent: u8,
    /// Share of frames delivered with one byte changed.
    pub corrupt_percent: u8,
    /// Seed of the pseudo-random choices, so that a failing run can be repeated.
    pub seed: u64,
}

/// Frames dropped and corrupted so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Frames dropped.
    pub dropped: u64,
    /// Frames corrupted.
    pub corrupted: u64,
}

/// An [`EthernetDevice`] that passes frames through a faulty wire.
pub struct FaultyDevice<D> {
    inner: D,
    config: FaultConfig,
    state: u64,
    counters: FaultCounters,
    scratch: [u8; MAX_FRAME_LEN],
}

impl<D: EthernetDevice> FaultyDevice<D> {
    /// Wraps `inner`.
    pub fn new(inner: D, config: FaultConfig) -> Self {
        Self {
            inner,
            config,
            // xorshift must not start at zero.
            state: config.seed | 1,
            counters: FaultCounters::default(),
            scratch: [0; MAX_FRAME_LEN],
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Counts so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64 (Marsaglia 2003).
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }

    fn chance(&mut self, percent: u8) -> bool {
        percent > 0 && self.next_random() % 100 < u64::from(percent)
    }

    /// Flips some bits of one byte of `frame` (never to the same value).
    fn corrupt(&mut self, frame: &mut [u8]) {
        if frame.is_empty() {
            return;
        }
        let r = self.next_random();
        let index = (r >> 8) as usize % frame.len();
        frame[index] ^= ((r & 0xff) as u8) | 1;
        self.counters.corrupted += 1;
    }
}

impl<D: EthernetDevice> EthernetDevice for FaultyDevice<D> {
    fn mac_address(&self) -> MacAddress {
        self.inner.mac_address()
    }

    fn link_state(&mut self) -> LinkState {
        self.inner.link_state()
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        // Skip dropped frames so the caller sees the next good one now, not at its next poll.
        loop {
            let drop = self.chance(self.config.drop_percent);
            let corrupt = !drop && self.chance(self.config.corrupt_percent);
            let mut copy = self.scratch;
            let len = self.inner.receive(|frame| {
                let len = frame.len().min(copy.len());
                copy[..len].copy_from_slice(&frame[..len]);
                len
            })?;
            let Some(len) = len else {
                return Ok(None);
            };
            if drop {
                self.counters.dropped += 1;
                continue;
            }
            if corrupt {
                self.corrupt(&mut copy[..len]);
            }
            return Ok(Some(f(&copy[..len])));
        }
    }

    fn can_transmit(&mut self) -> bool {
        self.inner.can_transmit()
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        if self.chance(self.config.drop_percent) {
            self.counters.dropped += 1;
            let len = len.min(self.scratch.len());
            let mut scratch = self.scratch;
            return Ok(f(&mut scratch[..len]));
        }
        if self.chance(self.config.corrupt_percent) {
            let r = self.next_random();
            self.counters.corrupted += 1;
            return self.inner.transmit(len, |frame| {
                let result = f(frame);
                if !frame.is_empty() {
                    let index = (r >> 8) as usize % frame.len();
                    frame[index] ^= ((r & 0xff) as u8) | 1;
                }
                result
            });
        }
        self.inner.transmit(len, f)
    }

    fn poll_at(&mut self) -> Option<Instant> {
        self.inner.poll_at()
    }

    fn poll_timers(&mut self) -> bool {
        self.inner.poll_timers()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A device with a queue of frames to receive and a log of frames sent.
    #[derive(Default)]
    struct QueueDevice {
        rx: VecDeque<Vec<u8>>,
        tx: Vec<Vec<u8>>,
    }

    impl EthernetDevice for QueueDevice {
        fn mac_address(&self) -> MacAddress {
            MacAddress([2, 0, 0, 0, 0, 1])
        }
        fn link_state(&mut self) -> LinkState {
            LinkState::Up
        }
        fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
            Ok(self.rx.pop_front().map(|frame| f(&frame)))
        }
        fn can_transmit(&mut self) -> bool {
            true
        }
        fn transmit<R>(
            &mut self,
            len: usize,
            f: impl FnOnce(&mut [u8]) -> R,
        ) -> Result<R, DeviceError> {
            let mut frame = vec![0; len];
            let result = f(&mut frame);
            self.tx.push(frame);
            Ok(result)
        }
        fn poll_at(&mut self) -> Option<Instant> {
            None
        }
        fn poll_timers(&mut self) -> bool {
            false
        }
    }

    fn frames(n: usize) -> VecDeque<Vec<u8>> {
        (0..n).map(|i| vec![i as u8; 64]).collect()
    }

    fn faulty(drop_percent: u8, corrupt_percent: u8, rx: usize) -> FaultyDevice<QueueDevice> {
        let inner = QueueDevice {
            rx: frames(rx),
            tx: Vec::new(),
        };
        FaultyDevice::new(
            inner,
            FaultConfig {
                drop_percent,
                corrupt_percent,
                seed: 99,
            },
        )
    }

    fn receive_all<D: EthernetDevice>(device: &mut D) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(frame) = device.receive(|f| f.to_vec()).unwrap() {
            out.push(frame);
        }
        out
    }

    #[test]
    fn no_faults_passes_everything_through() {
        let mut device = faulty(0, 0, 50);
        assert_eq!(receive_all(&mut device), Vec::from(frames(50)));
        for frame in frames(50) {
            device
                .transmit(frame.len(), |b| b.copy_from_slice(&frame))
                .unwrap();
        }
        assert_eq!(device.inner().tx, Vec::from(frames(50)));
        assert_eq!(device.counters(), FaultCounters::default());
    }

    #[test]
    fn drops_all_at_100_percent_and_about_the_share_asked() {
        let mut device = faulty(100, 0, 20);
        assert!(receive_all(&mut device).is_empty());
        assert_eq!(device.counters().dropped, 20);
        let mut device = faulty(30, 0, 1000);
        let received = receive_all(&mut device).len();
        assert!(
            (600..800).contains(&received),
            "{received} of 1000 kept at 30% drop"
        );
        assert_eq!(device.counters().dropped as usize + received, 1000);
    }

    #[test]
    fn corruption_changes_exactly_one_byte() {
        let mut device = faulty(0, 100, 100);
        let received = receive_all(&mut device);
        assert_eq!(received.len(), 100);
        for (i, frame) in received.iter().enumerate() {
            let changed = frame.iter().filter(|&&b| b != i as u8).count();
            assert_eq!(changed, 1, "frame {i}");
        }
        device.transmit(64, |b| b.fill(0xaa)).unwrap();
        let sent = &device.inner().tx[0];
        assert_eq!(sent.iter().filter(|&&b| b != 0xaa).count(), 1);
        assert_eq!(device.counters().corrupted, 101);
    }
}
