//! Fuzz target: arbitrary bytes as completed bulk-IN transfers of a USB NIC. The first byte
//! picks the driver's record parser (RNDIS packet messages or SMSC95xx status words); the
//! rest is a sequence of transfers, each `[length: u16 LE][bytes]`.
//!
//! Each transfer is first walked record by record with the parser alone: every record must
//! lie inside the transfer, every frame must fit an Ethernet frame, and each record must move
//! forward, or the receive path would slice out of bounds or spin. Then the transfers go
//! through the shared receive path, `DataPath::receive`, over a host controller stand-in that
//! completes one transfer per `start_in`: every frame handed up must be one of the frames of
//! the transfer, and the path must drain them all in a bounded number of calls.
#![no_main]

use std::collections::VecDeque;

use bramble_hal::Instant;
use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::usb::{
    DeviceTarget, PipeConfig, PipeId, SetupPacket, Speed, TransferStatus, UsbError, UsbHost,
};
use bramble_usb::descriptor::DeviceDescriptor;
use bramble_usb::device::UsbDevice;
use bramble_usb::nic::{BulkPipes, DataPath, RxRecord};
use libfuzzer_sys::fuzz_target;

type Parse = fn(&[u8], usize) -> Option<RxRecord>;

/// Largest transfer the stand-in delivers (the drivers' receive buffers are 2 KiB to 16 KiB).
const RX_LEN: usize = 16 * 1024;

/// Walks `transfer` with `parse`; returns the frames found, checking the invariants.
fn walk(parse: Parse, transfer: &[u8]) -> Vec<(usize, usize)> {
    let mut frames = Vec::new();
    let mut offset = 0;
    // A transfer of n bytes holds at most n records (each takes at least one byte).
    for _ in 0..=transfer.len() {
        let next = match parse(transfer, offset) {
            None | Some(RxRecord::Truncated) => return frames,
            Some(RxRecord::Skip { next }) => next,
            Some(RxRecord::Frame { start, len, next }) => {
                assert!(len <= MAX_FRAME_LEN, "frame of {len} bytes");
                let end = start.checked_add(len).expect("frame end overflows");
                assert!(
                    end <= transfer.len(),
                    "frame {start}..{end} of {}",
                    transfer.len()
                );
                frames.push((start, end));
                next
            }
        };
        assert!(
            next > offset,
            "record at {offset} does not move on ({next})"
        );
        if next >= transfer.len() {
            return frames;
        }
        offset = next;
    }
    panic!("more records than bytes");
}

/// A host controller that completes each started IN transfer with the next queued one.
struct Host {
    queued: VecDeque<Vec<u8>>,
    current: Option<Vec<u8>>,
    now: Instant,
}

impl UsbHost for Host {
    fn now(&self) -> Instant {
        self.now
    }
    fn delay_ms(&mut self, ms: u32) {
        self.now = self.now.add_micros(u64::from(ms) * 1000);
    }
    fn reset_root_port(&mut self) -> Result<Speed, UsbError> {
        Ok(Speed::Full)
    }
    fn control_in(
        &mut self,
        _: &DeviceTarget,
        _: SetupPacket,
        _: &mut [u8],
    ) -> Result<usize, UsbError> {
        Ok(0)
    }
    fn control_out(&mut self, _: &DeviceTarget, _: SetupPacket, _: &[u8]) -> Result<(), UsbError> {
        Ok(())
    }
    fn open_pipe(&mut self, _: PipeConfig) -> Result<PipeId, UsbError> {
        Ok(PipeId(0))
    }
    fn close_pipe(&mut self, _: PipeId) {}
    fn reset_data_toggle(&mut self, _: PipeId) {}
    fn start_in(&mut self, _: PipeId, len: usize) -> Result<(), UsbError> {
        assert!(len <= RX_LEN);
        self.current = self.queued.pop_front();
        Ok(())
    }
    fn received(&self, _: PipeId) -> &[u8] {
        self.current.as_deref().unwrap_or(&[])
    }
    fn out_buffer(&mut self, _: PipeId) -> &mut [u8] {
        &mut []
    }
    fn start_out(&mut self, _: PipeId, _: usize) -> Result<(), UsbError> {
        Ok(())
    }
    fn poll(&mut self, _: PipeId) -> Result<TransferStatus, UsbError> {
        Ok(match &self.current {
            Some(transfer) => TransferStatus::Complete(transfer.len()),
            None => TransferStatus::Pending,
        })
    }
    fn poll_at(&self) -> Option<Instant> {
        None
    }
    fn poll_timers(&mut self) -> bool {
        false
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let parse: Parse = match first % 2 {
        0 => bramble_usb::rndis::parse_rx_record,
        _ => bramble_usb::smsc95xx::parse_rx_record,
    };
    let mut transfers = VecDeque::new();
    while let [low, high, tail @ ..] = rest {
        let len = usize::from(u16::from_le_bytes([*low, *high]))
            .min(tail.len())
            .min(RX_LEN);
        transfers.push_back(tail[..len].to_vec());
        rest = &tail[len..];
    }
    let expected: Vec<Vec<u8>> = transfers
        .iter()
        .flat_map(|t| walk(parse, t).into_iter().map(|(s, e)| t[s..e].to_vec()))
        .collect();

    let device = UsbDevice {
        target: DeviceTarget {
            address: 1,
            speed: Speed::Full,
            ep0_max_packet: 64,
            translator: None,
        },
        descriptor: DeviceDescriptor::parse(&[
            18, 1, 0, 2, 0, 0, 0, 64, 0x25, 5, 0xa2, 0xa4, 0, 0, 1, 2, 3, 1,
        ])
        .unwrap(),
        hub_port: None,
    };
    let pipes = BulkPipes {
        rx: PipeId(0),
        tx: PipeId(1),
        rx_endpoint: 0x82,
        tx_endpoint: 0x02,
        tx_max_packet: 64,
    };
    let count = transfers.len();
    let host = Host {
        queued: transfers,
        current: None,
        now: Instant::from_micros(1),
    };
    let mut path = DataPath::new(host, device, pipes, RX_LEN);
    let mut received = Vec::new();
    // Each call hands up one frame or finishes one transfer.
    for _ in 0..expected.len() + count + 2 {
        let frame = path
            .receive(parse, |frame| frame.to_vec())
            .expect("the stand-in never fails");
        if let Some(frame) = frame {
            received.push(frame);
        }
    }
    assert_eq!(
        received, expected,
        "frames handed up differ from the records"
    );
    assert_eq!(path.stats().rx_frames as usize, expected.len());
});
