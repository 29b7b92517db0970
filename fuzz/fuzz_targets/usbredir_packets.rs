//! Fuzz target (bramble-usbredir): arbitrary bytes from the usb-guest (QEMU) after a valid hello, fed to a
//! session with the LAN9514 model behind it, in chunks whose sizes the input picks. Decoding
//! must reject or accept without panicking, and whatever is accepted (control requests,
//! register writes, bulk transfers, TX command words) must be handled without panicking.
#![no_main]

use bramble_usbredir::proto::{Caps, Encoder, cap};
use bramble_usbredir::session::Session;
use bramble_usbredir::smsc::{Partner, Smsc95xx};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let mut session = Session::new();
    let mut chip = Smsc95xx::new(true, Partner::Switch);
    let caps = Caps(1 << cap::CONNECT_DEVICE_VERSION | 1 << cap::EP_INFO_MAX_PACKET_SIZE | 1 << cap::IDS_64BIT);
    let hello = Encoder::hello("fuzz", caps);
    if session.receive(&mut chip, 0, &hello).is_err() {
        return;
    }
    let chunk = usize::from(split).max(1);
    let mut now = 0;
    for piece in rest.chunks(chunk) {
        now += 1_000;
        if session.receive(&mut chip, now, piece).is_err() {
            return;
        }
        let _ = session.take_output();
        let _ = chip.take_wire_frames();
    }
});
