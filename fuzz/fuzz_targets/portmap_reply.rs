//! Fuzz target: datagrams from the gateway as answers to the port-mapping client's requests
//! (PCP and NAT-PMP replies and announcements), and the same datagrams as answers to the
//! IPv6 pinhole client's PCP requests. The parsers and the clients must never panic; a
//! mapping or pinhole may only be recorded for a reply the PCP/NAT-PMP parsers accept, and
//! the reports must always format.
#![no_main]

use bramble_hal::Instant;
use bramble_proto::portmap::{Pinholes, PortMapper, PortRequest, natpmp, pcp};
use libfuzzer_sys::fuzz_target;

const GATEWAY: [u8; 4] = [192, 168, 1, 1];
const ROUTER6: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const GLOBAL6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0x77, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x50];

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
    let mut pinholes = Pinholes::new(&[80, 443], 120, [9; 12]);
    pinholes.set_network(Some(GLOBAL6), Some(ROUTER6), now);
    let _ = pinholes.poll(now);
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
        let before = pinholes.held().count();
        pinholes.receive(ROUTER6, datagram, now);
        if pinholes.held().count() > before {
            assert!(pcp::parse(datagram).is_ok());
        }
        let _ = pinholes.poll(now);
        let _ = std::format!("{}", pinholes.report(now));
    }
    let _ = mapper.stop(now);
    let _ = mapper.poll_upnp(now);
    mapper.upnp_answer(rest, now);
    let _ = pinholes.stop();
});
