//! Frame capture to a pcap file (the classic libpcap format, link type Ethernet), readable
//! by Wireshark and tcpdump, for debugging what the appliance saw and sent.

use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};
use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

/// The pcap magic for microsecond timestamps.
const PCAP_MAGIC: u32 = 0xa1b2_c3d4;
/// `LINKTYPE_ETHERNET`.
const LINKTYPE_ETHERNET: u32 = 1;
/// Largest frame recorded whole.
const SNAPLEN: u32 = 65_535;

/// Writes pcap records to `out`.
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header and returns the writer.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&PCAP_MAGIC.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?; // this zone
        out.write_all(&0u32.to_le_bytes())?; // sigfigs
        out.write_all(&SNAPLEN.to_le_bytes())?;
        out.write_all(&LINKTYPE_ETHERNET.to_le_bytes())?;
        out.flush()?;
        Ok(Self { out })
    }

    /// Records one frame, stamped with the current wall-clock time.
    pub fn record(&mut self, frame: &[u8]) -> io::Result<()> {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        self.out
            .write_all(&(since_epoch.as_secs() as u32).to_le_bytes())?;
        self.out
            .write_all(&since_epoch.subsec_micros().to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(frame)?;
        // Flushed per frame: the capture is for debugging a process that may be killed.
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// An [`EthernetDevice`] that records every frame in and out.
pub struct CapturingDevice<D, W: Write> {
    inner: D,
    writer: PcapWriter<W>,
    failed: bool,
}

impl<D: EthernetDevice, W: Write> CapturingDevice<D, W> {
    /// Wraps `inner`, recording to `writer`.
    pub fn new(inner: D, writer: PcapWriter<W>) -> Self {
        Self {
            inner,
            writer,
            failed: false,
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn record(&mut self, frame: &[u8]) {
        if self.failed {
            return;
        }
        if let Err(e) = self.writer.record(frame) {
            log::error!("pcap: cannot write capture, stopping it: {e}");
            self.failed = true;
        }
    }
}

impl<D: EthernetDevice, W: Write> EthernetDevice for CapturingDevice<D, W> {
    fn mac_address(&self) -> MacAddress {
        self.inner.mac_address()
    }

    fn link_state(&mut self) -> LinkState {
        self.inner.link_state()
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        let writer = &mut self.writer;
        let failed = &mut self.failed;
        self.inner.receive(|frame| {
            if !*failed && writer.record(frame).is_err() {
                log::error!("pcap: cannot write capture, stopping it");
                *failed = true;
            }
            f(frame)
        })
    }

    fn can_transmit(&mut self) -> bool {
        self.inner.can_transmit()
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        let mut copy = Vec::new();
        let result = self.inner.transmit(len, |frame| {
            let result = f(frame);
            copy.extend_from_slice(frame);
            result
        });
        if !copy.is_empty() {
            self.record(&copy);
        }
        result
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

    #[test]
    fn writes_a_libpcap_header_and_records() {
        let mut writer = PcapWriter::new(Vec::new()).unwrap();
        writer.record(&[1, 2, 3, 4, 5]).unwrap();
        writer.record(&[9; 60]).unwrap();
        let bytes = writer.into_inner();
        assert_eq!(bytes.len(), 24 + 16 + 5 + 16 + 60);
        assert_eq!(&bytes[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(&bytes[4..8], &[2, 0, 4, 0], "version 2.4");
        assert_eq!(&bytes[16..20], &65_535u32.to_le_bytes());
        assert_eq!(&bytes[20..24], &1u32.to_le_bytes(), "Ethernet");
        assert_eq!(&bytes[24 + 8..24 + 16], &[5, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(&bytes[24 + 16..24 + 21], &[1, 2, 3, 4, 5]);
        let second = 24 + 21;
        assert_eq!(&bytes[second + 8..second + 12], &60u32.to_le_bytes());
        assert!(bytes[second + 16..].iter().all(|&b| b == 9));
    }
}
