//! Fuzz target: arbitrary bytes as a sequence of datagrams reaching the mDNS responder, from
//! IPv4 and IPv6 sources on and off the link, to the group or straight to us, with time
//! passing, the IPv6 address set changing, and the responder probing and announcing in
//! between. Each chunk is `[length][origin][bytes]`. Nothing may panic; replies must fit the
//! buffer; unicast answers go only on the link; the name must stay a valid label.
#![no_main]

use bramble_hal::Instant;
use bramble_proto::mdns::{Destination, Ipv6LinkAddress, LinkAddress, MdnsResponder, Origin};
use std::net::IpAddr;
use libfuzzer_sys::fuzz_target;

const LINK: LinkAddress = LinkAddress {
    address: [192, 168, 77, 2],
    prefix_len: 24,
};
const LINK6: [Ipv6LinkAddress; 2] = [
    Ipv6LinkAddress {
        address: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        prefix_len: 64,
    },
    Ipv6LinkAddress {
        address: [0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        prefix_len: 64,
    },
];

fuzz_target!(|data: &[u8]| {
    let Some((&seed, mut rest)) = data.split_first() else {
        return;
    };
    let mut responder = MdnsResponder::new("bramble", u32::from(seed) * 997).unwrap();
    let mut now = Instant::from_micros(1_000_000);
    responder.set_address(Some(LINK), now);
    if seed & 2 == 0 {
        responder.set_ipv6_addresses(&LINK6, now);
    }
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
        let address: IpAddr = match how & 7 {
            0 => [192, 168, 77, 1].into(),
            1 => [169, 254, 1, 1].into(),
            2 => [203, 0, 113, 5].into(),
            3 => LINK.address.into(),
            4 => [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9].into(),
            5 => [0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9].into(),
            6 => [0x20, 0x01, 0x0d, 0xb8, 0, 0xf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9].into(),
            _ => LINK6[0].address.into(),
        };
        let origin = Origin {
            address,
            port: if how & 8 == 0 { 5353 } else { 40000 },
            to_group: how & 16 == 0,
        };
        if let Ok(Some((reply, destination))) = responder.handle(datagram, origin, now, &mut out) {
            assert!(reply <= out.len());
            if let Destination::Unicast(address, _) = destination {
                let on_link = match address {
                    IpAddr::V4(a) => LINK.is_on_link(a.octets()),
                    IpAddr::V6(a) => {
                        let a = a.octets();
                        a[..2] == [0xfe, 0x80] || LINK6.iter().any(|l| l.contains(a))
                    }
                };
                assert!(on_link, "unicast answer off the link: {address}");
            }
        }
        // Now and then the IPv6 addresses change (renumbering, a deprecated address).
        if how & 0xe0 == 0xe0 {
            let count = usize::from(how & 1) + usize::from(seed & 4 == 0);
            responder.set_ipv6_addresses(&LINK6[..count], now);
        }
        // Time passes by 1 ms times 2^(how >> 5) between datagrams.
        now = now.add_micros(1_000 << (how >> 5));
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
