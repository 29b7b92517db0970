//! Addresses: the DHCP exchange against a scripted server (lease, renewal, expiry), the
//! link-local fallback, and DHCP restarting when the link returns.

use super::*;

#[test]
fn dhcp_discover_carries_the_hostname() {
    let config = NetworkConfig::dhcp("pi-on-the-shelf", 99);
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        config,
        memory(2),
        server(),
        at(0),
    )
    .unwrap();
    appliance.poll(at(0));
    let (kind, options) = appliance
        .device()
        .tx
        .iter()
        .find_map(|f| dhcp_options(f))
        .expect("a DHCP message was sent");
    assert_eq!(kind, DhcpMessageType::Discover);
    let hostname = options.iter().find(|(k, _)| *k == 12).expect("option 12");
    assert_eq!(hostname.1, b"pi-on-the-shelf");
    assert_eq!(appliance.ipv4_address(), None);
}

#[test]
fn link_loss_is_noticed_and_dhcp_restarts_when_it_returns() {
    let config = NetworkConfig::dhcp("bramble", 1);
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        config,
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    appliance.poll(at(0));
    assert_eq!(discovers(appliance.device()), 1);
    appliance.device_mut().tx.clear();
    appliance.device_mut().link = LinkState::Down;
    appliance.poll(at(500));
    assert_eq!(appliance.counters().link_losses, 1);
    appliance.device_mut().tx.clear();
    appliance.device_mut().link = LinkState::Up;
    appliance.poll(at(1000));
    // Well before the DHCP client's own retry (10 s), a fresh DISCOVER goes out.
    assert_eq!(discovers(appliance.device()), 1);
}

#[test]
fn without_a_dhcp_answer_a_link_local_address_is_taken() {
    let config = NetworkConfig::dhcp("bramble", 3);
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        config,
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    let wake = appliance.poll(at(0)).unwrap();
    assert!(wake <= at(10_000));
    appliance.poll(at(9_999));
    assert_eq!(appliance.ipv4_address(), None);
    appliance.poll(at(10_000));
    let [a, b, c, _] = appliance.ipv4_address().expect("link-local address");
    assert_eq!([a, b], [169, 254]);
    assert!(
        (1..=254).contains(&c),
        "RFC 3927 excludes 169.254.0.x and 169.254.255.x"
    );
    assert!(appliance.is_link_local());
    // The same device picks the same address every time.
    let mut again = Appliance::new(
        MockDevice::new(GUEST_MAC),
        NetworkConfig::dhcp("bramble", 4),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    again.poll(at(10_000));
    assert_eq!(again.ipv4_address(), appliance.ipv4_address());
    // mDNS now probes for the name with that address.
    appliance.device_mut().tx.clear();
    let wake = appliance.poll(at(10_001)).unwrap();
    appliance.poll(wake);
    let probe = appliance
        .device()
        .tx
        .iter()
        .find(|f| f[..6] == [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb])
        .expect("an mDNS probe");
    assert_eq!(
        &probe[26..30],
        &[169, 254, c, appliance.ipv4_address().unwrap()[3]]
    );
}

const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x67];
const SERVER_ADDRESS: [u8; 4] = [10, 0, 0, 1];
const LEASED_ADDRESS: [u8; 4] = [10, 0, 0, 50];

/// The transaction ID and client address of the last DHCP message of `kind` sent.
fn last_dhcp(device: &MockDevice, kind: DhcpMessageType) -> Option<(u32, [u8; 4])> {
    device.tx.iter().rev().find_map(|frame| {
        if dhcp_options(frame)?.0 != kind {
            return None;
        }
        let ip = Ipv4Packet::new_checked(&frame[14..]).ok()?;
        let udp = UdpPacket::new_checked(ip.payload()).ok()?;
        let dhcp = DhcpPacket::new_checked(udp.payload()).ok()?;
        Some((dhcp.transaction_id(), dhcp.client_ip().octets()))
    })
}

/// A broadcast reply of `kind` from the test's DHCP server, offering [`LEASED_ADDRESS`]
/// for `lease_seconds`.
fn server_reply(kind: DhcpMessageType, transaction_id: u32, lease_seconds: u32) -> Vec<u8> {
    let server = Ipv4Address::from_octets(SERVER_ADDRESS);
    let dhcp = DhcpRepr {
        message_type: kind,
        transaction_id,
        secs: 0,
        client_hardware_address: EthernetAddress(GUEST_MAC),
        client_ip: Ipv4Address::UNSPECIFIED,
        your_ip: Ipv4Address::from_octets(LEASED_ADDRESS),
        server_ip: server,
        router: None,
        subnet_mask: Some(Ipv4Address::new(255, 255, 255, 0)),
        relay_agent_ip: Ipv4Address::UNSPECIFIED,
        broadcast: false,
        requested_ip: None,
        client_identifier: None,
        server_identifier: Some(server),
        parameter_request_list: None,
        max_size: None,
        lease_duration: Some(lease_seconds),
        renew_duration: None,
        rebind_duration: None,
        dns_servers: None,
        additional_options: &[],
    };
    let dhcp_len = dhcp.buffer_len();
    let udp = UdpRepr {
        src_port: 67,
        dst_port: 68,
    };
    let ip = Ipv4Repr {
        src_addr: server,
        dst_addr: Ipv4Address::BROADCAST,
        next_header: IpProtocol::Udp,
        payload_len: 8 + dhcp_len,
        hop_limit: 64,
    };
    let ethernet = EthernetRepr {
        src_addr: EthernetAddress(SERVER_MAC),
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EthernetProtocol::Ipv4,
    };
    let checksums = ChecksumCapabilities::default();
    let mut frame = std::vec![0u8; 14 + 20 + 8 + dhcp_len];
    ethernet.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]), &checksums);
    udp.emit(
        &mut UdpPacket::new_unchecked(&mut frame[34..]),
        &server.into(),
        &Ipv4Address::BROADCAST.into(),
        dhcp_len,
        |payload| dhcp.emit(&mut DhcpPacket::new_unchecked(payload)).unwrap(),
        &checksums,
    );
    frame
}

/// Runs DISCOVER, OFFER, REQUEST, ACK from time 0; returns the instant the lease began.
fn take_lease(appliance: &mut Appliance<'_, MockDevice>, lease_seconds: u32) -> Instant {
    appliance.poll(at(0));
    let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Discover).unwrap();
    let offer = server_reply(DhcpMessageType::Offer, xid, lease_seconds);
    appliance.device_mut().rx.push_back(Ok(offer));
    appliance.poll(at(10));
    let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Request).unwrap();
    let ack = server_reply(DhcpMessageType::Ack, xid, lease_seconds);
    appliance.device_mut().rx.push_back(Ok(ack));
    appliance.poll(at(20));
    assert_eq!(appliance.ipv4_address(), Some(LEASED_ADDRESS));
    at(20)
}

#[test]
fn an_ack_received_in_any_pass_of_a_poll_is_applied_by_that_poll() {
    // Receive errors end a pass's receiving, so the ACK lands in pass 1, 2, 3, ... .
    for errors_first in 0..5 {
        let config = NetworkConfig::dhcp("bramble", 8);
        let mut appliance = Appliance::new(
            MockDevice::new(GUEST_MAC),
            config,
            memory(1),
            server(),
            at(0),
        )
        .unwrap();
        appliance.poll(at(0));
        let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Discover).unwrap();
        let offer = server_reply(DhcpMessageType::Offer, xid, 20);
        appliance.device_mut().rx.push_back(Ok(offer));
        appliance.poll(at(10));
        let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Request).unwrap();
        for _ in 0..errors_first {
            appliance
                .device_mut()
                .rx
                .push_back(Err(bramble_hal::DeviceError::Transfer));
        }
        let ack = server_reply(DhcpMessageType::Ack, xid, 20);
        appliance.device_mut().rx.push_back(Ok(ack));
        let mut now = at(20);
        while !appliance.device().rx.is_empty() {
            appliance.poll(now);
            now = now.add_micros(1_000);
        }
        let taken = now.as_micros() - 1_000;
        assert_eq!(
            appliance.ipv4_address(),
            Some(LEASED_ADDRESS),
            "ACK after {errors_first} receive errors: received but not applied"
        );
        // The expiry is counted from the same instant as smoltcp's.
        assert_eq!(
            appliance.address.lease_expires_at,
            Some(Instant::from_micros(taken + 20_000_000)),
            "ACK after {errors_first} receive errors"
        );
    }
}

#[test]
fn a_lease_that_runs_out_unrenewed_is_replaced_by_link_local_at_once() {
    let config = NetworkConfig::dhcp("bramble", 5);
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        config,
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    let began = take_lease(&mut appliance, 20);
    let expires = began.add_micros(20_000_000);
    appliance.device_mut().tx.clear();
    // The server is gone. Follow the loop's own wake-ups until the address changes.
    let mut now = began;
    for _ in 0..10_000 {
        now = appliance.poll(now).expect("DHCP always has a deadline");
        appliance.poll(now);
        if appliance.ipv4_address() != Some(LEASED_ADDRESS) {
            break;
        }
    }
    assert!(now >= expires, "the lease was dropped early, at {now:?}");
    // It asked to keep the lease before giving it up (the unicast renewal at T1 waits
    // for the vanished server's ARP answer; the broadcast rebinding at T2 goes out).
    assert_eq!(
        last_dhcp(appliance.device(), DhcpMessageType::Request).map(|(_, ciaddr)| ciaddr),
        Some(LEASED_ADDRESS),
        "no REQUEST from the leased address before the lease ran out"
    );
    // No moment without an address: the server has been silent since T1, far longer
    // than the link-local wait, so the fallback comes with the expiry.
    let [a, b, ..] = appliance
        .ipv4_address()
        .expect("an address right after the lease ran out");
    assert_eq!([a, b], [169, 254]);
    assert!(appliance.is_link_local());
    // DHCP keeps asking, and a server that answers again replaces the fallback.
    let before = discovers(appliance.device());
    let later = now.add_micros(LINK_LOCAL_AFTER_MICROS);
    appliance.poll(later);
    assert!(
        discovers(appliance.device()) > before,
        "no DISCOVER after expiry"
    );
    let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Discover).unwrap();
    let offer = server_reply(DhcpMessageType::Offer, xid, 20);
    appliance.device_mut().rx.push_back(Ok(offer));
    appliance.poll(later.add_micros(10_000));
    let (xid, _) = last_dhcp(appliance.device(), DhcpMessageType::Request).unwrap();
    let ack = server_reply(DhcpMessageType::Ack, xid, 20);
    appliance.device_mut().rx.push_back(Ok(ack));
    appliance.poll(later.add_micros(20_000));
    assert_eq!(appliance.ipv4_address(), Some(LEASED_ADDRESS));
    assert!(!appliance.is_link_local());
}

/// A frame from the test's DHCP server to the guest (or broadcast), of `ethertype`.
fn server_frame(ethertype: EthernetProtocol, to: EthernetAddress, payload_len: usize) -> Vec<u8> {
    let ethernet = EthernetRepr {
        src_addr: EthernetAddress(SERVER_MAC),
        dst_addr: to,
        ethertype,
    };
    let mut frame = std::vec![0u8; 14 + payload_len];
    ethernet.emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
    frame
}

/// The server asks who has [`LEASED_ADDRESS`] (which puts it in the guest's ARP cache).
fn server_arp_request() -> Vec<u8> {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: EthernetAddress(SERVER_MAC),
        source_protocol_addr: Ipv4Address::from_octets(SERVER_ADDRESS),
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: Ipv4Address::from_octets(LEASED_ADDRESS),
    };
    let mut frame = server_frame(
        EthernetProtocol::Arp,
        EthernetAddress::BROADCAST,
        arp.buffer_len(),
    );
    arp.emit(&mut ArpPacket::new_unchecked(&mut frame[14..]));
    frame
}

/// The server pings [`LEASED_ADDRESS`].
fn server_ping(sequence: u16) -> Vec<u8> {
    let icmp = Icmpv4Repr::EchoRequest {
        ident: 0x4242,
        seq_no: sequence,
        data: b"still there?",
    };
    let ip = Ipv4Repr {
        src_addr: Ipv4Address::from_octets(SERVER_ADDRESS),
        dst_addr: Ipv4Address::from_octets(LEASED_ADDRESS),
        next_header: IpProtocol::Icmp,
        payload_len: icmp.buffer_len(),
        hop_limit: 64,
    };
    let checksums = ChecksumCapabilities::default();
    let mut frame = server_frame(
        EthernetProtocol::Ipv4,
        EthernetAddress(GUEST_MAC),
        20 + icmp.buffer_len(),
    );
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut frame[14..]), &checksums);
    icmp.emit(
        &mut Icmpv4Packet::new_unchecked(&mut frame[34..]),
        &checksums,
    );
    frame
}

#[test]
fn a_renewal_that_keeps_the_address_keeps_the_neighbour_cache() {
    // IPv6 is on: its link-local address, put on the interface before the first frame,
    // flushes nothing that was learned.
    let config = NetworkConfig::dhcp("bramble", 6);
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        config,
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    let began = take_lease(&mut appliance, 20);
    appliance
        .device_mut()
        .rx
        .push_back(Ok(server_arp_request()));
    appliance.poll(began.add_micros(1_000));
    appliance.device_mut().tx.clear();
    // Follow the loop's wake-ups to T1, when the renewal REQUEST goes to the server.
    let mut now = began.add_micros(1_000);
    let mut renewal = None;
    for _ in 0..10_000 {
        now = appliance.poll(now).expect("DHCP always has a deadline");
        appliance.poll(now);
        renewal = last_dhcp(appliance.device(), DhcpMessageType::Request);
        if renewal.is_some() {
            break;
        }
    }
    let (xid, ciaddr) = renewal.expect("no renewal REQUEST");
    assert_eq!(ciaddr, LEASED_ADDRESS);
    let ack = server_reply(DhcpMessageType::Ack, xid, 20);
    appliance.device_mut().rx.push_back(Ok(ack));
    appliance.poll(now.add_micros(1_000));
    assert_eq!(appliance.ipv4_address(), Some(LEASED_ADDRESS));
    assert_eq!(
        appliance.address.lease_expires_at,
        Some(now.add_micros(1_000 + 20_000_000))
    );
    // The server is still known: its ping is answered at once, with no ARP first.
    appliance.device_mut().tx.clear();
    appliance.device_mut().rx.push_back(Ok(server_ping(1)));
    appliance.poll(now.add_micros(2_000));
    let sent = &appliance.device().tx;
    let arp = sent
        .iter()
        .filter(|f| {
            EthernetFrame::new_checked(&f[..]).unwrap().ethertype() == EthernetProtocol::Arp
        })
        .count();
    let replies = sent
        .iter()
        .filter(|f| {
            f[..6] == SERVER_MAC
                && f.len() > 34
                && f[23] == 1 // IPv4 protocol: ICMP
                && f[34] == 0 // ICMP type: echo reply
        })
        .count();
    assert_eq!(
        (arp, replies),
        (0, 1),
        "ARP requests and echo replies after a renewal"
    );
}
