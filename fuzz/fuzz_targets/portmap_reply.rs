//! Fuzz target: datagrams from the gateway as answers to the port-mapping client's requests
//! (PCP and NAT-PMP replies and announcements). The parsers and the client must never
//! panic; a mapping may only be recorded for a reply the parsers accept, and the client's
//! report must always format.
#![no_main]

use bramble_hal::Instant;
use bramble_proto::portmap::{PortMapper, PortRequest, natpmp, pcp};
use libfuzzer_sys::fuzz_target;

const GATEWAY: [u8; 4] = [192, 168, 1, 1];

fuzz_target!(|data: &[u8]| {
    let _ = pcp::parse(data);
    let _ = natpmp::parse(data);
    let ports = [
        PortRequest {
            internal: 80,
            external: 80,
        },
        PortRequest {
            internal: 443,
            external: 443,
        },
    ];
    // The first byte picks how far the client is (PCP first request, NAT-PMP after the
    // fallback); the rest are datagrams split at each 0xfe byte, one every 100 ms.
    let Some((&stage, rest)) = data.split_first() else {
        return;
    };
    let mut mapper = PortMapper::new(&ports, 120, [9; 12]);
    let mut now = Instant::from_micros(0);
    mapper.set_network(Some([192, 168, 1, 50]), Some(GATEWAY), now);
    let _ = mapper.poll(now);
    if stage & 1 == 1 {
        mapper.receive(GATEWAY, &[0, 129, 0, 1], now);
        let _ = mapper.poll(now);
    }
    for datagram in rest.split(|&b| b == 0xfe).take(32) {
        now = now.add_micros(100_000);
        let before = mapper.mappings().count();
        let accepted = pcp::parse(datagram).is_ok() || natpmp::parse(datagram).is_ok();
        mapper.receive(GATEWAY, datagram, now);
        if mapper.mappings().count() > before {
            assert!(accepted);
        }
        let _ = mapper.poll(now);
        let _ = std::format!("{}", mapper.report(now));
    }
    let _ = mapper.stop();
});
