//! Fuzz target: arbitrary bytes as a sequence of datagrams reaching the mDNS responder, from
//! sources on and off the link, to the group or straight to us, with time passing and the
//! responder probing and announcing in between. Each chunk is `[length][origin][bytes]`.
//! Nothing may panic; replies must fit the buffer; the name must stay a valid label.
#![no_main]

use bramble_hal::Instant;
use bramble_net::mdns::{Destination, LinkAddress, MdnsResponder, Origin};
use libfuzzer_sys::fuzz_target;

const LINK: LinkAddress = LinkAddress {
    address: [192, 168, 77, 2],
    prefix_len: 24,
};

fuzz_target!(|data: &[u8]| {
    let Some((&seed, mut rest)) = data.split_first() else {
        return;
    };
    let mut responder = MdnsResponder::new("bramble", u32::from(seed) * 997).unwrap();
    let mut now = Instant::from_micros(1_000_000);
    responder.set_address(Some(LINK), now);
    let mut out = [0u8; 512];
    // Most inputs start from a responder that owns its name.
    if seed & 1 == 0 {
        for _ in 0..10 {
            responder.poll(now, &mut out);
            match responder.next_deadline() {
                Some(next) => now = next,
                None => break,
            }
        }
    }
    while let [len, how, tail @ ..] = rest {
        let (len, how) = (usize::from(*len).min(tail.len()), *how);
        let (datagram, after) = tail.split_at(len);
        rest = after;
        let origin = Origin {
            address: match how & 3 {
                0 => [192, 168, 77, 1],
                1 => [169, 254, 1, 1],
                2 => [203, 0, 113, 5],
                _ => LINK.address,
            },
            port: if how & 4 == 0 { 5353 } else { 40000 },
            to_group: how & 8 == 0,
        };
        if let Ok(Some((reply, destination))) = responder.handle(datagram, origin, now, &mut out) {
            assert!(reply <= out.len());
            if let Destination::Unicast(address, _) = destination {
                assert!(LINK.is_on_link(address), "unicast answer off the link");
            }
        }
        // Time passes by 1 ms times 2^(how >> 4) between datagrams.
        now = now.add_micros(1_000 << (how >> 4));
        for _ in 0..4 {
            if let Some(len) = responder.poll(now, &mut out) {
                assert!(len <= out.len());
            }
        }
        let name = responder.name();
        assert!(!name.is_empty() && name.len() <= 63, "{name:?}");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    }
});
