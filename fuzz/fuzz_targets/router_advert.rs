//! Fuzz target: arbitrary bytes as a sequence of ICMPv6 messages reaching IPv6 address
//! configuration: each chunk `[length][how][bytes]` is parsed as a Router Advertisement (or,
//! with `how & 1`, a Neighbor Advertisement) and, if it parses, taken by the configuration,
//! with time passing by 2^(how >> 3) seconds and the configuration polled in between.
//! Nothing may panic; the address table stays within its bounds; every assigned address is
//! a /64 or the link-local one; polling always ends.
#![no_main]

use bramble_hal::Instant;
use bramble_proto::ndp::{NeighborAdvert, RouterAdvert};
use bramble_proto::slaac::{AddressOrigin, Ipv6Autoconfig, MAX_ADDRESSES, MAX_DNS_SERVERS};
use libfuzzer_sys::fuzz_target;

const MAC: [u8; 6] = [0xb8, 0x27, 0xeb, 1, 2, 3];
const ROUTER: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

fuzz_target!(|data: &[u8]| {
    let Some((&seed, mut rest)) = data.split_first() else {
        return;
    };
    let mut now = Instant::from_micros(0);
    let mut config = Ipv6Autoconfig::new(MAC, [seed; 16], None, None, u32::from(seed), now);
    while let [len, how, tail @ ..] = rest {
        let (len, how) = (usize::from(*len).min(tail.len()), *how);
        let (message, after) = tail.split_at(len);
        rest = after;
        if how & 1 == 0 {
            if let Ok(advert) = RouterAdvert::parse(message) {
                let _ = advert.mtu();
                for servers in advert.dns_servers() {
                    assert!(servers.addresses().count() <= message.len() / 16);
                }
                let mut source = ROUTER;
                source[15] = how >> 1 & 3;
                config.on_router_advert(source, &advert, now);
            }
        } else if let Ok(advert) = NeighborAdvert::parse(message) {
            config.on_neighbor_advert(&advert, now);
        }
        now = now.add_micros(1_000_000u64 << (how >> 3));
        let mut polls = 0;
        while config.poll(now).is_some() {
            polls += 1;
            assert!(polls < 64, "poll keeps sending");
        }
        assert!(config.entries().len() <= MAX_ADDRESSES);
        assert!(config.dns_servers().count() <= MAX_DNS_SERVERS);
        for entry in config.assigned() {
            assert!(entry.prefix_len == 64, "{entry:?}");
            if entry.origin == AddressOrigin::Autoconfigured {
                assert_ne!(entry.address[..2], [0xfe, 0x80]);
            }
        }
        if let Some(next) = config.next_deadline() {
            // Everything due has been done: a deadline not after now would make the loop spin.
            assert!(next > now, "deadline {next:?} at {now:?}");
        }
    }
});
