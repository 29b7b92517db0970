//! The mDNS socket: how a datagram was addressed reaches the responder, which answers
//! datagrams sent straight to the guest only from sources on the link.

use super::*;

/// An Ethernet frame carrying an mDNS query for `bramble.local` (type A) from
/// `source`:`port` to `destination` (the group, or the guest's own address).
fn mdns_query_frame(source: [u8; 4], port: u16, destination: [u8; 4]) -> Vec<u8> {
    let mut query = std::vec![0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    query.extend_from_slice(b"\x07bramble\x05local\x00\x00\x01\x00\x01");
    let (src, dst) = (
        Ipv4Address::from_octets(source),
        Ipv4Address::from_octets(destination),
    );
    let ethernet = EthernetRepr {
        src_addr: EthernetAddress(CLIENT_MAC),
        dst_addr: if destination == bramble_proto::mdns::MDNS_GROUP {
            EthernetAddress([0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb])
        } else {
            EthernetAddress(GUEST_MAC)
        },
        ethertype: EthernetProtocol::Ipv4,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Udp,
        payload_len: 8 + query.len(),
        hop_limit: 255,
    };
    let udp = UdpRepr {
        src_port: port,
        dst_port: bramble_proto::mdns::MDNS_PORT,
    };
    let checksums = ChecksumCapabilities::default();
    let mut frame = std::vec![0u8; 14 + 20 + 8 + query.len()];
    ethernet.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]), &checksums);
    udp.emit(
        &mut UdpPacket::new_unchecked(&mut frame[34..]),
        &src.into(),
        &dst.into(),
        query.len(),
        |payload| payload.copy_from_slice(&query),
        &checksums,
    );
    frame
}

#[test]
fn mdns_queries_sent_straight_to_the_guest_are_answered_only_from_the_link() {
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_config(true),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    // Probe and announce until the name is ours.
    let mut now = at(0);
    for _ in 0..20 {
        match appliance.poll(now) {
            Some(wake) => now = wake,
            None => break,
        }
    }
    let udp_from_5353 = |d: &MockDevice| {
        d.tx.iter()
            .filter(|f| f.len() > 42 && f[23] == 17 && f[34..36] == [0x14, 0xe9])
            .count()
    };
    let remote = [203, 0, 113, 5];
    let cases = [
        // (source, destination, answered)
        ([10, 0, 0, 1], [10, 0, 0, 2], true),
        (remote, [10, 0, 0, 2], false),
        // To the group: answered to the group, whatever the source says.
        (remote, bramble_proto::mdns::MDNS_GROUP, true),
    ];
    for (source, destination, answered) in cases {
        appliance.device_mut().tx.clear();
        let frame = mdns_query_frame(source, bramble_proto::mdns::MDNS_PORT, destination);
        appliance.device_mut().rx.push_back(Ok(frame));
        now = now.add_micros(1_000);
        appliance.poll(now);
        assert_eq!(
            udp_from_5353(appliance.device()),
            usize::from(answered),
            "{source:?} -> {destination:?}"
        );
    }
}
