//! Fuzz target: arbitrary bytes as a completed bulk-IN transfer of a USB NIC, walked record
//! by record as the shared receive path does. The first byte picks the driver's record
//! parser (RNDIS packet messages or SMSC95xx status words). Every record must lie inside the
//! transfer, every frame must fit an Ethernet frame, and each record must move forward, or
//! the receive path would slice out of bounds or spin.
#![no_main]

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_usb::nic::RxRecord;
use libfuzzer_sys::fuzz_target;

type Parse = fn(&[u8], usize) -> Option<RxRecord>;

fuzz_target!(|data: &[u8]| {
    let Some((&first, transfer)) = data.split_first() else {
        return;
    };
    let parse: Parse = match first % 2 {
        0 => bramble_usb::rndis::parse_rx_record,
        _ => bramble_usb::smsc95xx::parse_rx_record,
    };
    let mut offset = 0;
    // A transfer of n bytes holds at most n records (each takes at least one byte).
    for _ in 0..=transfer.len() {
        let next = match parse(transfer, offset) {
            None | Some(RxRecord::Truncated) => return,
            Some(RxRecord::Skip { next }) => next,
            Some(RxRecord::Frame { start, len, next }) => {
                assert!(len <= MAX_FRAME_LEN, "frame of {len} bytes");
                let end = start.checked_add(len).expect("frame end overflows");
                assert!(
                    end <= transfer.len(),
                    "frame {start}..{end} of {}",
                    transfer.len()
                );
                let _ = &transfer[start..end];
                next
            }
        };
        assert!(
            next > offset,
            "record at {offset} does not move on ({next})"
        );
        if next >= transfer.len() {
            return;
        }
        offset = next;
    }
    panic!("more records than bytes");
});
