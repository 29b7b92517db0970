//! IPv6 over the wire: a smoltcp peer plays the router (Router Advertisements from its raw
//! socket) and the client; the appliance takes a link-local and a SLAAC address after DAD,
//! answers echo requests, serves HTTP over IPv6 through the same pool, follows renumbering,
//! answers an echo request and a SYN behind a destination-options header (and not a
//! fragment), and with IPv6 off sends nothing IPv6 at all.

use super::pool::Client;
use super::*;
use bramble_proto::slaac::{AddressOrigin, AddressState};
use smoltcp::socket::raw;
use smoltcp::wire::{Icmpv6Packet, IpVersion, Ipv6Address, Ipv6Packet, Ipv6Repr};

pub(super) const ROUTER_LINK_LOCAL: Ipv6Address = Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const ALL_NODES: Ipv6Address = Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
pub(super) const PREFIX_A: [u8; 8] = [0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0];
const PREFIX_B: [u8; 8] = [0x20, 0x01, 0x0d, 0xb8, 0, 0xb, 0, 0];

/// The peer: [`Client`] with IPv6 addresses in both prefixes and a raw ICMPv6 socket.
pub(super) struct Router {
    pub(super) client: Client,
    raw: SocketHandle,
}

impl Router {
    pub(super) fn new(device: WiredDevice) -> Self {
        let mut client = Client::new(device);
        client.iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::Ipv6(ROUTER_LINK_LOCAL), 64))
                .unwrap();
            for prefix in [PREFIX_A, PREFIX_B] {
                let mut address = [0u8; 16];
                address[..8].copy_from_slice(&prefix);
                address[15] = 1;
                a.push(IpCidr::new(IpAddress::Ipv6(address.into()), 64))
                    .unwrap();
            }
        });
        let buffer = || {
            raw::PacketBuffer::new(
                Box::leak(std::vec![raw::PacketMetadata::EMPTY; 8].into_boxed_slice()),
                Box::leak(std::vec![0u8; 4096].into_boxed_slice()),
            )
        };
        let socket = raw::Socket::new(
            Some(IpVersion::Ipv6),
            Some(IpProtocol::Icmpv6),
            buffer(),
            buffer(),
        );
        let raw = client.sockets.add(socket);
        // A router listens to all-routers, where solicitations go.
        client
            .iface
            .join_multicast_group(Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 2))
            .unwrap();
        Self { client, raw }
    }

    /// Sends an ICMPv6 `message` from `source` to `destination` with hop limit 255.
    fn send_icmp(&mut self, source: Ipv6Address, destination: Ipv6Address, message: &[u8]) {
        let repr = Ipv6Repr {
            src_addr: source,
            dst_addr: destination,
            next_header: IpProtocol::Icmpv6,
            payload_len: message.len(),
            hop_limit: 255,
        };
        let mut packet = std::vec![0u8; repr.buffer_len() + message.len()];
        let mut ip = Ipv6Packet::new_unchecked(&mut packet[..]);
        repr.emit(&mut ip);
        ip.payload_mut().copy_from_slice(message);
        let mut icmp = Icmpv6Packet::new_unchecked(ip.payload_mut());
        icmp.fill_checksum(&source, &destination);
        let socket = self.client.sockets.get_mut::<raw::Socket>(self.raw);
        socket.send_slice(&packet).unwrap();
    }

    /// Advertises `prefixes` as (prefix, valid, preferred) with router lifetime 1800 s.
    pub(super) fn advertise(&mut self, prefixes: &[([u8; 8], u32, u32)]) {
        self.advertise_from(ROUTER_LINK_LOCAL, prefixes);
    }

    /// The same from `source` (a router this peer does not answer for).
    pub(super) fn advertise_from(&mut self, source: Ipv6Address, prefixes: &[([u8; 8], u32, u32)]) {
        let mut m = std::vec![134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0];
        for (prefix, valid, preferred) in prefixes {
            m.extend_from_slice(&[3, 4, 64, 0xc0]);
            m.extend_from_slice(&valid.to_be_bytes());
            m.extend_from_slice(&preferred.to_be_bytes());
            m.extend_from_slice(&[0; 4]);
            m.extend_from_slice(prefix);
            m.extend_from_slice(&[0; 8]);
        }
        self.send_icmp(source, ALL_NODES, &m);
    }

    /// ICMPv6 messages received as (source, type, payload).
    fn received(&mut self) -> Vec<(Ipv6Address, u8, Vec<u8>)> {
        let socket = self.client.sockets.get_mut::<raw::Socket>(self.raw);
        let mut out = Vec::new();
        while let Ok(packet) = socket.recv() {
            let ip = Ipv6Packet::new_checked(packet).unwrap();
            out.push((ip.src_addr(), ip.payload()[0], ip.payload().to_vec()));
        }
        out
    }
}

/// Runs both ends for `millis` milliseconds, one step per millisecond.
fn run(
    appliance: &mut Appliance<'static, WiredDevice>,
    router: &mut Router,
    clock: &mut u64,
    millis: u64,
) {
    for _ in 0..millis {
        appliance.poll(at(*clock));
        router.client.poll(at(*clock));
        *clock += 1;
    }
}

fn assigned(
    appliance: &Appliance<'static, WiredDevice>,
    origin: AddressOrigin,
) -> Vec<(Ipv6Address, AddressState)> {
    appliance
        .ipv6_addresses()
        .iter()
        .filter(|e| e.origin == origin && e.is_assigned())
        .map(|e| (Ipv6Address::from(e.address), e.state))
        .collect()
}

#[test]
fn slaac_then_ping6_and_http_over_ipv6_then_renumbering() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let mut appliance =
        Appliance::new(guest, static_config(true), memory(2), server(), at(0)).unwrap();
    let mut router = Router::new(host);
    let mut clock = 0;
    run(&mut appliance, &mut router, &mut clock, 2_500);
    // DAD for the link-local address (from ::), then a router solicitation from it.
    let link_local = assigned(&appliance, AddressOrigin::LinkLocal);
    assert_eq!(link_local.len(), 1, "{:?}", appliance.ipv6_addresses());
    let link_local = link_local[0].0;
    let heard = router.received();
    assert!(
        heard
            .iter()
            .any(|(src, kind, _)| *kind == 133 && *src == link_local),
        "no router solicitation from {link_local}: {heard:?}"
    );
    // The advertisement: an address in the prefix after DAD, and a default route.
    router.advertise(&[(PREFIX_A, 3600, 1800)]);
    run(&mut appliance, &mut router, &mut clock, 1_500);
    let slaac = assigned(&appliance, AddressOrigin::Autoconfigured);
    assert_eq!(slaac.len(), 1, "{:?}", appliance.ipv6_addresses());
    let (address, state) = slaac[0];
    assert_eq!(state, AddressState::Preferred);
    assert_eq!(address.octets()[..8], PREFIX_A);
    assert_eq!(appliance.ipv6_router(), Some(ROUTER_LINK_LOCAL.octets()));
    // Echo over IPv6, answered by smoltcp.
    let mut router_a = [0u8; 16];
    router_a[..8].copy_from_slice(&PREFIX_A);
    router_a[15] = 1;
    let echo = [128, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g'];
    router.send_icmp(router_a.into(), address, &echo);
    run(&mut appliance, &mut router, &mut clock, 50);
    let replies: Vec<_> = router
        .received()
        .into_iter()
        .filter(|(src, kind, _)| *src == address && *kind == 129)
        .collect();
    assert_eq!(replies.len(), 1, "one echo reply from the SLAAC address");
    assert_eq!(replies[0].2[8..], *b"ping");
    // HTTP over IPv6 through the pool.
    let rx = Box::leak(std::vec![0u8; 65536].into_boxed_slice());
    let tx = Box::leak(std::vec![0u8; 4096].into_boxed_slice());
    let mut socket = tcp::Socket::new(tcp::SocketBuffer::new(rx), tcp::SocketBuffer::new(tx));
    socket
        .connect(router.client.iface.context(), (address, 80), 40066)
        .unwrap();
    let handle = router.client.sockets.add(socket);
    let mut steps = 0;
    while !router.client.socket(handle).may_send() && steps < 2_000 {
        run(&mut appliance, &mut router, &mut clock, 1);
        steps += 1;
    }
    router
        .client
        .socket(handle)
        .send_slice(b"GET /index.html HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = Vec::new();
    for _ in 0..2_000 {
        run(&mut appliance, &mut router, &mut clock, 1);
        super::pool::read_all(&mut router.client, handle, &mut response);
        if !router.client.socket(handle).may_recv() {
            break;
        }
    }
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(response.ends_with(BODY));
    assert_eq!(appliance.counters().connections_opened, 1);
    // mDNS over IPv6: an AAAA question to ff02::fb is answered to the group with the
    // link-local and the SLAAC address.
    let answer = mdns_aaaa(&mut appliance, &mut router, &mut clock);
    assert!(
        answer.contains(&address) && answer.contains(&link_local),
        "{answer:?}"
    );
    // Renumbering: the old prefix's lifetimes 0 and a new prefix.
    router.advertise(&[(PREFIX_A, 0, 0), (PREFIX_B, 3600, 1800)]);
    run(&mut appliance, &mut router, &mut clock, 1_500);
    let slaac = assigned(&appliance, AddressOrigin::Autoconfigured);
    assert_eq!(slaac.len(), 2, "{slaac:?}");
    assert!(slaac.contains(&(address, AddressState::Deprecated)));
    assert!(
        slaac
            .iter()
            .any(|(a, s)| a.octets()[..8] == PREFIX_B && *s == AddressState::Preferred)
    );
    // Both are on the interface: the deprecated one still accepts connections.
    let on_interface = appliance
        .iface
        .ip_addrs()
        .iter()
        .filter(|c| matches!(c, IpCidr::Ipv6(_)))
        .count();
    assert_eq!(on_interface, 3);
    // mDNS now offers the new address, not the deprecated one.
    clock += 3_000;
    let answer = mdns_aaaa(&mut appliance, &mut router, &mut clock);
    assert!(!answer.contains(&address), "{answer:?}");
    assert!(
        answer.iter().any(|a| a.octets()[..8] == PREFIX_B),
        "{answer:?}"
    );
}

/// Asks for bramble.local's AAAA records over IPv6 (a full querier on port 5353, to
/// ff02::fb) and returns the addresses in the answer section of the reply.
fn mdns_aaaa(
    appliance: &mut Appliance<'static, WiredDevice>,
    router: &mut Router,
    clock: &mut u64,
) -> Vec<Ipv6Address> {
    use smoltcp::socket::udp;
    let group = Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 0xfb);
    let buffer = || {
        udp::PacketBuffer::new(
            Box::leak(std::vec![udp::PacketMetadata::EMPTY; 8].into_boxed_slice()),
            Box::leak(std::vec![0u8; 4096].into_boxed_slice()),
        )
    };
    let mut socket = udp::Socket::new(buffer(), buffer());
    socket.bind(5353).unwrap();
    let handle = router.client.sockets.add(socket);
    let _ = router.client.iface.join_multicast_group(group);
    let mut query = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    query.extend_from_slice(b"\x07bramble\x05local\x00\x00\x1c\x00\x01");
    let meta = udp::UdpMetadata {
        local_address: Some(IpAddress::Ipv6(ROUTER_LINK_LOCAL)),
        ..udp::UdpMetadata::from(smoltcp::wire::IpEndpoint::new(group.into(), 5353))
    };
    router
        .client
        .sockets
        .get_mut::<udp::Socket>(handle)
        .send_slice(&query, meta)
        .unwrap();
    run(appliance, router, clock, 100);
    let socket = router.client.sockets.get_mut::<udp::Socket>(handle);
    let mut addresses = Vec::new();
    while let Ok((reply, meta)) = socket.recv() {
        if reply.get(2) != Some(&0x84) {
            continue; // our own query
        }
        assert_eq!(
            meta.local_address,
            Some(IpAddress::Ipv6(group)),
            "answered to the group"
        );
        let answers = u16::from_be_bytes([reply[6], reply[7]]);
        let mut at = 12;
        for _ in 0..answers {
            // The name: labels up to a zero, or a compression pointer.
            while reply[at] != 0 && reply[at] & 0xc0 != 0xc0 {
                at += 1 + usize::from(reply[at]);
            }
            at += if reply[at] == 0 { 1 } else { 2 };
            let rtype = u16::from_be_bytes([reply[at], reply[at + 1]]);
            let len = usize::from(u16::from_be_bytes([reply[at + 8], reply[at + 9]]));
            if rtype == 28 {
                let data: [u8; 16] = reply[at + 10..at + 26].try_into().unwrap();
                addresses.push(Ipv6Address::from(data));
            }
            at += 10 + len;
        }
    }
    router.client.sockets.remove(handle);
    addresses
}

#[test]
fn a_defended_link_local_address_is_replaced_by_a_new_identifier() {
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_config(false),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    // The first DAD probe: a neighbour solicitation from :: for the tentative address.
    let mut now = at(0);
    let mut target = None;
    for _ in 0..10 {
        now = appliance.poll(now).unwrap_or(now);
        target = appliance.device().tx.iter().find_map(|f| dad_target(f));
        if target.is_some() {
            break;
        }
    }
    let target = target.expect("a DAD probe");
    // Another host defends it.
    appliance
        .device_mut()
        .rx
        .push_back(Ok(neighbor_advert(target)));
    appliance.device_mut().tx.clear();
    appliance.poll(now.add_micros(10));
    let entry = appliance.ipv6_addresses()[0];
    assert_ne!(entry.address, target.octets());
    assert!(matches!(
        entry.state,
        AddressState::Tentative { sent: 0, .. }
    ));
    // The new one is probed and taken.
    for _ in 0..10 {
        match appliance.poll(now) {
            Some(next) if next > now => now = next,
            _ => now = now.add_micros(1_000),
        }
    }
    let probed: Vec<_> = appliance
        .device()
        .tx
        .iter()
        .filter_map(|f| dad_target(f))
        .collect();
    assert_eq!(probed, [Ipv6Address::from(entry.address)]);
    assert_eq!(appliance.ipv6_addresses()[0].state, AddressState::Preferred);
}

/// The target of a DAD neighbour solicitation (from ::), if `frame` is one.
fn dad_target(frame: &[u8]) -> Option<Ipv6Address> {
    let ethernet = EthernetFrame::new_checked(frame).ok()?;
    if ethernet.ethertype() != EthernetProtocol::Ipv6 {
        return None;
    }
    let ip = Ipv6Packet::new_checked(ethernet.payload()).ok()?;
    let icmp = ip.payload();
    if !ip.src_addr().is_unspecified() || icmp.first() != Some(&135) {
        return None;
    }
    let target: [u8; 16] = icmp.get(8..24)?.try_into().ok()?;
    Some(Ipv6Address::from(target))
}

/// A neighbour advertisement for `target` from another host, to all nodes.
fn neighbor_advert(target: Ipv6Address) -> Vec<u8> {
    let source = Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99);
    let mut icmp = std::vec![136, 0, 0, 0, 0x20, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[2, 1, 2, 0, 0, 0, 0, 0x99]);
    let repr = Ipv6Repr {
        src_addr: source,
        dst_addr: ALL_NODES,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.len(),
        hop_limit: 255,
    };
    let mut frame = std::vec![0u8; 14 + 40 + icmp.len()];
    frame[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    frame[12..14].copy_from_slice(&[0x86, 0xdd]);
    let mut ip = Ipv6Packet::new_unchecked(&mut frame[14..]);
    repr.emit(&mut ip);
    ip.payload_mut().copy_from_slice(&icmp);
    Icmpv6Packet::new_unchecked(ip.payload_mut()).fill_checksum(&source, &ALL_NODES);
    frame
}

#[test]
fn with_ipv6_off_no_ipv6_frame_is_sent_or_answered() {
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_ipv4_only(true),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    // Echo requests and solicitations to all nodes, which smoltcp would answer.
    let mut echo = neighbor_advert(Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 5));
    echo[54] = 128;
    echo[55] = 0;
    let source = Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99);
    Icmpv6Packet::new_unchecked(&mut echo[54..]).fill_checksum(&source, &ALL_NODES);
    let mut now = at(0);
    for _ in 0..200 {
        appliance.device_mut().rx.push_back(Ok(echo.clone()));
        now = now.add_micros(100_000);
        appliance.poll(now);
    }
    let ipv6 = appliance
        .device()
        .tx
        .iter()
        .filter(|f| f[12..14] == [0x86, 0xdd])
        .count();
    assert_eq!(ipv6, 0, "no IPv6 frame in 20 s");
    assert!(
        !appliance.device().tx.is_empty(),
        "IPv4 still speaks (mDNS)"
    );
    assert_eq!(appliance.phy_counters().ipv6_filtered, 200);
    assert!(appliance.ipv6_addresses().is_empty());
}

/// An IPv6 packet from `source` to `destination` whose payload is `headers` (extension
/// headers, the first named by `first`) and then `upper` (its checksum already filled in).
fn packet_behind(
    source: Ipv6Address,
    destination: Ipv6Address,
    first: IpProtocol,
    headers: &[u8],
    upper: &[u8],
) -> Vec<u8> {
    let repr = Ipv6Repr {
        src_addr: source,
        dst_addr: destination,
        next_header: first,
        payload_len: headers.len() + upper.len(),
        hop_limit: 64,
    };
    let mut packet = std::vec![0u8; repr.buffer_len() + headers.len() + upper.len()];
    let mut ip = Ipv6Packet::new_unchecked(&mut packet[..]);
    repr.emit(&mut ip);
    ip.payload_mut()[..headers.len()].copy_from_slice(headers);
    ip.payload_mut()[headers.len()..].copy_from_slice(upper);
    packet
}

#[test]
fn an_echo_request_and_a_syn_behind_a_destination_options_header_are_answered() {
    use smoltcp::wire::TcpPacket;
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let mut appliance =
        Appliance::new(guest, static_config(true), memory(2), server(), at(0)).unwrap();
    let mut router = Router::new(host);
    let mut clock = 0;
    run(&mut appliance, &mut router, &mut clock, 2_500);
    router.advertise(&[(PREFIX_A, 3600, 1800)]);
    run(&mut appliance, &mut router, &mut clock, 1_500);
    let slaac = assigned(&appliance, AddressOrigin::Autoconfigured);
    assert_eq!(slaac.len(), 1, "{:?}", appliance.ipv6_addresses());
    let address = slaac[0].0;
    let mut source = [0u8; 16];
    source[..8].copy_from_slice(&PREFIX_A);
    source[15] = 1;
    let source = Ipv6Address::from(source);
    // A raw socket for packets of any protocol (to send), and one for TCP (to hear the
    // SYN-ACK; smoltcp then leaves the segment to it and sends no reset of its own).
    let buffer = || {
        raw::PacketBuffer::new(
            Box::leak(std::vec![raw::PacketMetadata::EMPTY; 8].into_boxed_slice()),
            Box::leak(std::vec![0u8; 4096].into_boxed_slice()),
        )
    };
    let any = router.client.sockets.add(raw::Socket::new(
        Some(IpVersion::Ipv6),
        None,
        buffer(),
        buffer(),
    ));
    let tcp_raw = router.client.sockets.add(raw::Socket::new(
        Some(IpVersion::Ipv6),
        Some(IpProtocol::Tcp),
        buffer(),
        buffer(),
    ));
    // Destination options: next header, length 0 (8 bytes), an unknown option whose type
    // says "skip" (0x1e) with four bytes of data.
    let options = |next: u8| [next, 0, 0x1e, 4, 1, 2, 3, 4];
    let mut echo = std::vec![128, 0, 0, 0, 0x43, 0x21, 0, 7, b'e', b'x', b't'];
    Icmpv6Packet::new_unchecked(&mut echo[..]).fill_checksum(&source, &address);
    let packet = packet_behind(source, address, IpProtocol::Ipv6Opts, &options(58), &echo);
    router
        .client
        .sockets
        .get_mut::<raw::Socket>(any)
        .send_slice(&packet)
        .unwrap();
    run(&mut appliance, &mut router, &mut clock, 50);
    let replies: Vec<_> = router
        .received()
        .into_iter()
        .filter(|(src, kind, _)| *src == address && *kind == 129)
        .collect();
    assert_eq!(replies.len(), 1, "one echo reply: {:?}", replies);
    assert_eq!(
        replies[0].2[4..],
        echo[4..],
        "identifier, sequence and data echoed"
    );
    // A SYN to port 80 behind the same header: the pool answers with its cookie.
    let mut syn = std::vec![0u8; 24];
    syn[0..2].copy_from_slice(&40_123u16.to_be_bytes());
    syn[2..4].copy_from_slice(&80u16.to_be_bytes());
    syn[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
    syn[12] = 6 << 4;
    syn[13] = 0x02;
    syn[14..16].copy_from_slice(&65_535u16.to_be_bytes());
    syn[20..24].copy_from_slice(&[2, 4, 0x05, 0xa0]);
    TcpPacket::new_unchecked(&mut syn[..])
        .fill_checksum(&IpAddress::Ipv6(source), &IpAddress::Ipv6(address));
    let packet = packet_behind(source, address, IpProtocol::Ipv6Opts, &options(6), &syn);
    router
        .client
        .sockets
        .get_mut::<raw::Socket>(any)
        .send_slice(&packet)
        .unwrap();
    run(&mut appliance, &mut router, &mut clock, 50);
    let mut syn_acks = 0;
    let socket = router.client.sockets.get_mut::<raw::Socket>(tcp_raw);
    while let Ok(packet) = socket.recv() {
        let ip = Ipv6Packet::new_checked(packet).unwrap();
        let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
        if ip.src_addr() == address && tcp.dst_port() == 40_123 && tcp.syn() && tcp.ack() {
            assert_eq!(tcp.ack_number().0 as u32, 0x0102_0305);
            assert!(tcp.verify_checksum(&IpAddress::Ipv6(address), &IpAddress::Ipv6(source)));
            syn_acks += 1;
        }
    }
    assert_eq!(syn_acks, 1, "one SYN-ACK from the pool");
    assert_eq!(appliance.phy_counters().ipv6_extensions_removed, 2);
    // A first fragment (more to come) of an echo request is not reassembled: no answer,
    // and no Parameter Problem either.
    let fragment = [58, 0, 0, 1, 0, 0, 0, 9];
    let packet = packet_behind(source, address, IpProtocol::Ipv6Frag, &fragment, &echo);
    router
        .client
        .sockets
        .get_mut::<raw::Socket>(any)
        .send_slice(&packet)
        .unwrap();
    run(&mut appliance, &mut router, &mut clock, 50);
    let answers: Vec<_> = router
        .received()
        .into_iter()
        .filter(|(src, kind, _)| *src == address && matches!(kind, 1..=4 | 129))
        .collect();
    assert!(answers.is_empty(), "{answers:?}");
    assert_eq!(appliance.phy_counters().ipv6_extensions_dropped, 1);
}
