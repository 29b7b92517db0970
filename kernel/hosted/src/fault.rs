//! Fault injection between the appliance and a device: drops and corrupts a share of frames
//! in each direction, as smoltcp's `FaultInjector` does, to test recovery over a bad wire.

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, LinkState, MacAddress};

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
}
