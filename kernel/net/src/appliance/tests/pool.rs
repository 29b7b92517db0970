//! HTTP through the stream pool, with a real smoltcp client over a wired pair: pipelining,
//! handshakes that never complete, deadlines with resets, closes that never complete, more
//! clients than sessions, and a full pool making room.

use super::*;

#[test]
fn refuses_memory_without_room_for_a_connection() {
    let mem = memory(0);
    assert_eq!(mem.pool_size(), 0);
    let result = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_config(false),
        mem,
        server(),
        at(0),
    );
    assert_eq!(result.err(), Some(NetError::NoSocketMemory));
    let no_sessions = memory_for(PoolSizes {
        connections: 4,
        sessions: 0,
        cells: 4,
        sources: 0,
    });
    assert_eq!(no_sessions.pool_size(), 0);
    assert_eq!(memory(4).pool_size(), 4);
}

/// A plain smoltcp client on the other end of the wire.
pub(super) struct Client {
    phy: EthernetPhy<WiredDevice>,
    pub(super) iface: Interface,
    pub(super) sockets: SocketSet<'static>,
}

impl Client {
    pub(super) fn new(device: WiredDevice) -> Self {
        let mut phy = EthernetPhy::new(device);
        let config = Config::new(HardwareAddress::Ethernet(EthernetAddress(CLIENT_MAC)));
        let mut iface = Interface::new(config, &mut phy, smol(at(0)));
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::v4(10, 0, 0, 1), 24)).unwrap();
        });
        let storage = Box::leak(Box::new([SocketStorage::EMPTY; 16]));
        Self {
            phy,
            iface,
            sockets: SocketSet::new(&mut storage[..]),
        }
    }

    fn connect(&mut self, local_port: u16) -> SocketHandle {
        self.connect_to(local_port, 80)
    }

    pub(super) fn connect_to(&mut self, local_port: u16, remote_port: u16) -> SocketHandle {
        let rx = Box::leak(std::vec![0u8; 65536].into_boxed_slice());
        let tx = Box::leak(std::vec![0u8; 4096].into_boxed_slice());
        let mut socket = tcp::Socket::new(tcp::SocketBuffer::new(rx), tcp::SocketBuffer::new(tx));
        socket
            .connect(
                self.iface.context(),
                (Ipv4Address::new(10, 0, 0, 2), remote_port),
                local_port,
            )
            .unwrap();
        self.sockets.add(socket)
    }

    pub(super) fn socket(&mut self, handle: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(handle)
    }

    pub(super) fn poll(&mut self, now: Instant) {
        self.iface.poll(smol(now), &mut self.phy, &mut self.sockets);
    }
}

/// Runs both ends for up to `steps` milliseconds or until `done` says so.
pub(super) fn run_until(
    appliance: &mut Appliance<'static, WiredDevice>,
    client: &mut Client,
    clock: &mut u64,
    steps: u64,
    mut done: impl FnMut(&mut Client) -> bool,
) -> bool {
    for _ in 0..steps {
        appliance.poll(at(*clock));
        client.poll(at(*clock));
        if done(client) {
            return true;
        }
        *clock += 1;
    }
    false
}

pub(super) fn read_all(client: &mut Client, handle: SocketHandle, into: &mut Vec<u8>) {
    let socket = client.socket(handle);
    while socket.can_recv() {
        socket
            .recv(|d| {
                into.extend_from_slice(d);
                (d.len(), ())
            })
            .unwrap();
    }
}

#[test]
fn serves_http_to_a_tcp_client_over_the_wire() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let mut appliance =
        Appliance::new(guest, static_config(false), memory(2), server(), at(0)).unwrap();
    let mut client = Client::new(host);
    let handle = client.connect(40000);
    let mut clock = 0;
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        1000,
        |c| c.socket(handle).may_send()
    ));
    let request = b"GET / HTTP/1.1\r\nHost: bramble\r\n\r\nGET /nothing HTTP/1.0\r\n\r\n";
    client.socket(handle).send_slice(request).unwrap();
    let mut response = Vec::new();
    let closed = run_until(&mut appliance, &mut client, &mut clock, 5000, |c| {
        read_all(c, handle, &mut response);
        !c.socket(handle).may_recv()
    });
    let text = String::from_utf8_lossy(&response);
    assert!(
        closed,
        "the HTTP/1.0 request should close the connection:\n{text}"
    );
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(response.windows(BODY.len()).any(|w| w == BODY));
    let second = text
        .find("HTTP/1.1 404")
        .expect("pipelined 404 after the 200");
    assert!(second > text.find(core::str::from_utf8(BODY).unwrap()).unwrap());
    assert_eq!(appliance.pool_counters().accepted, 1);
    client.socket(handle).close();
    run_until(&mut appliance, &mut client, &mut clock, 2000, |_| false);
    assert_eq!(appliance.open_connections(), 0, "the slot is free again");
}

/// The guest's end of the wire with the client running at the same time: whenever the
/// appliance finds no frame waiting, the client takes a turn first and answers what the
/// appliance has sent so far. ACKs then arrive in the middle of the appliance's poll,
/// including its last pass, as they do from a fast client on a real network.
struct ConcurrentDevice {
    wire: WiredDevice,
    client: std::rc::Rc<core::cell::RefCell<Client>>,
    clock: std::rc::Rc<core::cell::Cell<u64>>,
}

impl EthernetDevice for ConcurrentDevice {
    fn mac_address(&self) -> bramble_hal::MacAddress {
        self.wire.mac_address()
    }

    fn link_state(&mut self) -> LinkState {
        self.wire.link_state()
    }

    fn receive<R>(
        &mut self,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, bramble_hal::DeviceError> {
        if !self.wire.has_frames_waiting() {
            self.client.borrow_mut().poll(at(self.clock.get()));
        }
        self.wire.receive(f)
    }

    fn can_transmit(&mut self) -> bool {
        self.wire.can_transmit()
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, bramble_hal::DeviceError> {
        self.wire.transmit(len, f)
    }

    fn poll_at(&mut self) -> Option<Instant> {
        self.wire.poll_at()
    }

    fn poll_timers(&mut self) -> bool {
        self.wire.poll_timers()
    }
}

#[test]
fn acks_taken_in_the_last_pass_of_a_poll_are_used_in_that_poll() {
    // A 20 KB answer through a 4 KiB send buffer to a client that acknowledges at once.
    // The appliance runs only when a frame waits for it or its own wake-up time comes.
    // If the ACKs of its last pass freed send space that nothing refills, nothing
    // arrives any more (the client waits for data) and the answer stalls until a timer.
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let clock = std::rc::Rc::new(core::cell::Cell::new(0u64));
    let client = std::rc::Rc::new(core::cell::RefCell::new(Client::new(host)));
    let device = ConcurrentDevice {
        wire: guest,
        client: client.clone(),
        clock: clock.clone(),
    };
    let mut appliance =
        Appliance::new(device, static_config(false), memory(1), server(), at(0)).unwrap();
    let handle = client.borrow_mut().connect(40002);
    let mut wake = Some(at(0));
    let mut response = Vec::new();
    let body = big_body();
    let mut requested = false;
    let mut done_at = None;
    for millis in 0..5_000u64 {
        clock.set(millis);
        for _ in 0..64 {
            let waiting = appliance.device().wire.has_frames_waiting();
            if !waiting && wake.is_none_or(|w| w.as_micros() > at(millis).as_micros()) {
                break;
            }
            wake = appliance.poll(at(millis));
        }
        let mut client = client.borrow_mut();
        client.poll(at(millis));
        if !requested && client.socket(handle).may_send() {
            client
                .socket(handle)
                .send_slice(b"GET /big.bin HTTP/1.1\r\nHost: b\r\n\r\n")
                .unwrap();
            client.poll(at(millis));
            requested = true;
            done_at = Some(millis);
        }
        read_all(&mut client, handle, &mut response);
        if response.ends_with(&body) {
            let took = millis - done_at.unwrap();
            assert!(
                took < 10,
                "the answer stalled: {took} ms of simulated time for 20 KB"
            );
            return;
        }
    }
    panic!(
        "the whole body within 5 s simulated ({} of {} bytes)",
        response.len(),
        body.len()
    );
}

#[test]
fn answers_many_pipelined_requests_in_order() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let mut appliance =
        Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
    let mut client = Client::new(host);
    let handle = client.connect(40010);
    let mut clock = 0;
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        1000,
        |c| c.socket(handle).may_send()
    ));
    let mut requests = Vec::new();
    for i in 0..30 {
        let path = if i % 3 == 2 { "/missing" } else { "/" };
        requests
            .extend_from_slice(std::format!("GET {path} HTTP/1.1\r\nHost: b\r\n\r\n").as_bytes());
    }
    requests.extend_from_slice(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n");
    let mut sent = 0;
    let mut response = Vec::new();
    let closed = run_until(&mut appliance, &mut client, &mut clock, 20_000, |c| {
        let socket = c.socket(handle);
        if sent < requests.len() && socket.can_send() {
            sent += socket.send_slice(&requests[sent..]).unwrap();
        }
        read_all(c, handle, &mut response);
        !c.socket(handle).may_recv()
    });
    let text = String::from_utf8_lossy(&response);
    assert!(closed, "not closed after the last request");
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &text[i + 9..i + 12])
        .collect();
    let mut expected: Vec<&str> = (0..30)
        .map(|i| if i % 3 == 2 { "404" } else { "200" })
        .collect();
    expected.push("200");
    assert_eq!(statuses, expected);
}

#[test]
fn an_unfinished_handshake_holds_nothing() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let link = host.link.clone();
    let mut appliance =
        Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
    let mut client = Client::new(host);
    client.connect(40020);
    // Run until the guest has answered the SYN (with a cookie), then cut the wire: the
    // final ACK of the handshake never arrives.
    let mut clock = 0;
    while appliance.pool_counters().syns == 0 {
        assert!(clock < 1000, "no SYN arrived");
        client.poll(at(clock));
        appliance.poll(at(clock));
        clock += 1;
    }
    *link.borrow_mut() = LinkState::Down;
    appliance.poll(at(clock));
    assert_eq!(
        appliance.open_connections(),
        0,
        "a half-open connection costs nothing"
    );
    // The one connection the pool holds serves the next client at once.
    *link.borrow_mut() = LinkState::Up;
    let next = client.connect(40021);
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        3000,
        |c| c.socket(next).may_send()
    ));
}

#[test]
fn an_aborted_connection_sends_its_peer_a_reset() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let mut appliance =
        Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
    let mut client = Client::new(host);
    let handle = client.connect(40040);
    let mut clock = 0;
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        1000,
        |c| c.socket(handle).may_send()
    ));
    // Half a header, then silence: the pool resets it at its header deadline (20 s, plus
    // nothing for 33 bytes).
    client
        .socket(handle)
        .send_slice(b"GET / HTTP/1.1\r\nHost: b\r\nX-Slow: ")
        .unwrap();
    for _ in 0..44 {
        clock += 500;
        client.poll(at(clock));
        appliance.poll(at(clock));
        client.poll(at(clock));
    }
    assert_eq!(appliance.pool_counters().timeout_header, 1);
    assert_eq!(
        client.socket(handle).state(),
        tcp::State::Closed,
        "the client was never told (no RST), so it would wait for ever"
    );
}

#[test]
fn a_client_that_vanishes_during_close_frees_its_slot() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let link = host.link.clone();
    let mut appliance =
        Appliance::new(guest, static_config(false), memory(1), server(), at(0)).unwrap();
    let mut client = Client::new(host);
    let handle = client.connect(40030);
    let mut clock = 0;
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        1000,
        |c| c.socket(handle).may_send()
    ));
    client
        .socket(handle)
        .send_slice(b"GET / HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n")
        .unwrap();
    // Our FIN arrives and is acknowledged; then the client disappears without its own.
    let mut response = Vec::new();
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        5000,
        |c| {
            read_all(c, handle, &mut response);
            !c.socket(handle).may_recv()
        }
    ));
    run_until(&mut appliance, &mut client, &mut clock, 50, |_| false);
    *link.borrow_mut() = LinkState::Down;
    let limit = appliance.pool_limits().close_micros;
    for step in 0..=limit / 500_000 + 1 {
        appliance.poll(at(clock).add_micros(step * 500_000));
    }
    assert_eq!(appliance.pool_counters().timeout_close, 1);
    assert_eq!(appliance.open_connections(), 0);
}

#[test]
fn clients_beyond_the_sessions_wait_their_turn_and_a_full_pool_makes_room() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let memory = memory_for(PoolSizes {
        connections: 3,
        sessions: 1,
        cells: 3,
        sources: 0,
    });
    let mut appliance =
        Appliance::new(guest, static_config(false), memory, server(), at(0)).unwrap();
    let mut client = Client::new(host);
    let handles: Vec<_> = (0..3).map(|k| client.connect(40100 + k)).collect();
    let mut clock = 0;
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        1000,
        |c| handles.iter().all(|&h| c.socket(h).may_send())
    ));
    // Three requests at once, one session: each is answered in turn.
    for &handle in &handles {
        client
            .socket(handle)
            .send_slice(b"GET /big.bin HTTP/1.1\r\nHost: b\r\n\r\n")
            .unwrap();
    }
    let body = big_body();
    let mut responses = std::vec![Vec::new(); 3];
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        10_000,
        |c| {
            for (k, &handle) in handles.iter().enumerate() {
                read_all(c, handle, &mut responses[k]);
            }
            responses.iter().all(|r| r.ends_with(&body))
        }
    ));
    assert!(appliance.pool_counters().parked >= 2);
    // The pool is full of idle keep-alive connections: a newcomer takes the place of the
    // one idle longest, which is reset.
    run_until(&mut appliance, &mut client, &mut clock, 100, |_| false);
    let newcomer = client.connect(40200);
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        1000,
        |c| c.socket(newcomer).may_send()
    ));
    run_until(&mut appliance, &mut client, &mut clock, 100, |_| false);
    assert_eq!(appliance.pool_counters().evicted_idle, 1);
    assert_eq!(appliance.open_connections(), 3);
}

/// A raw SYN to the guest's port 80 from `port` of 10.0.0.1.
fn syn_to_guest(port: u16) -> Vec<u8> {
    use bramble_stream::wire::{self, Outgoing, flags};
    let out = Outgoing {
        dst_mac: GUEST_MAC,
        src_mac: CLIENT_MAC,
        src_ip: wire::v4_mapped([10, 0, 0, 1]),
        dst_ip: wire::v4_mapped([10, 0, 0, 2]),
        src_port: port,
        dst_port: 80,
        seq: u32::from(port).wrapping_mul(2_654_435_761),
        ack: 0,
        flags: flags::SYN,
        window: 65535,
        mss: Some(1460),
        ip_id: 1,
    };
    let mut frame = std::vec![0u8; out.headers_len()];
    out.write(&mut frame, 0);
    frame
}

#[test]
fn syns_beyond_the_room_for_their_answers_are_held_in_the_device_not_dropped() {
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_ipv4_only(false),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    appliance.poll(at(0));
    // The transmit path is busy while a burst of SYNs arrives, more than the pool's
    // control queue holds answers for.
    let burst = 600u16;
    appliance.device_mut().tx_ready = false;
    appliance.device_mut().tx.clear();
    for k in 0..burst {
        appliance
            .device_mut()
            .rx
            .push_back(Ok(syn_to_guest(20_000 + k)));
    }
    appliance.poll(at(1_000));
    assert!(
        !appliance.device().rx.is_empty(),
        "the rest wait in the device"
    );
    assert_eq!(appliance.pool_counters().control_dropped, 0);
    assert!(appliance.counters().receive_held > 0);
    // Once frames can go out, every SYN is answered.
    appliance.device_mut().tx_ready = true;
    for step in 0..20u64 {
        appliance.poll(at(2_000 + step * 1_000));
    }
    assert!(appliance.device().rx.is_empty());
    let counters = appliance.pool_counters();
    assert_eq!(counters.syns, u64::from(burst), "{counters}");
    assert_eq!(counters.control_dropped, 0, "{counters}");
    let syn_acks = appliance
        .device()
        .tx
        .iter()
        .filter(|frame| frame.len() > 47 && frame[47] == 0x12)
        .count();
    assert_eq!(syn_acks, usize::from(burst));
}
