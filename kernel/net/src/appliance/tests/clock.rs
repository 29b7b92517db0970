//! The clock: an SNTP server on the wire (the client end's UDP socket) sets the appliance's
//! clock, after which HTTP responses carry Date and the TLS clock follows.

use super::pool::{Client, run_until};
use super::*;
use crate::appliance::clock::ClockConfig;
use bramble_proto::sntp::PACKET_LEN;
use smoltcp::socket::udp;

/// Unix time the test server reports.
const SERVER_UNIX: u64 = 1_800_000_000;

fn answer(request: &[u8]) -> [u8; PACKET_LEN] {
    let ntp = (SERVER_UNIX + 2_208_988_800) << 32;
    let mut reply = [0u8; PACKET_LEN];
    reply[0] = (4 << 3) | 4;
    reply[1] = 2;
    reply[24..32].copy_from_slice(&request[40..48]);
    reply[32..40].copy_from_slice(&ntp.to_be_bytes());
    reply[40..48].copy_from_slice(&ntp.to_be_bytes());
    reply
}

#[test]
fn an_sntp_reply_sets_the_clock_and_responses_carry_date() {
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let memory = memory(2 + 2);
    memory.reserved_sockets = 2;
    let mut appliance =
        Appliance::new(guest, static_config(false), memory, server(), at(0)).unwrap();
    let servers: &'static [&'static str] = &["10.0.0.1:1123"];
    appliance.start_clock(
        ClockConfig {
            servers,
            dns_servers: &[],
            seed: 3,
        },
        Box::leak(Box::new(ClockMemory::new())),
        at(0),
    );
    let mut client = Client::new(host);
    let meta = |n| Box::leak(std::vec![udp::PacketMetadata::EMPTY; n].into_boxed_slice());
    let bytes = |n| Box::leak(std::vec![0u8; n].into_boxed_slice());
    let mut socket = udp::Socket::new(
        udp::PacketBuffer::new(&mut meta(4)[..], &mut bytes(1024)[..]),
        udp::PacketBuffer::new(&mut meta(4)[..], &mut bytes(1024)[..]),
    );
    socket.bind(1123).unwrap();
    let sntp = client.sockets.add(socket);
    let mut clock = 0;
    let mut requests = 0;
    let set = run_until(&mut appliance, &mut client, &mut clock, 5_000, |c| {
        let socket = c.sockets.get_mut::<udp::Socket>(sntp);
        while let Ok((request, meta)) = socket.recv() {
            requests += 1;
            let reply = answer(request);
            socket.send_slice(&reply, meta.endpoint).unwrap();
        }
        false
    });
    assert!(!set);
    assert_eq!(
        requests, 1,
        "one request, answered, and no more until the resync"
    );
    let now = at(clock);
    let unix = appliance.unix_seconds(now).expect("the clock is set");
    assert!((SERVER_UNIX..SERVER_UNIX + 10).contains(&unix), "{unix}");
    let status = appliance.clock_status(now).unwrap();
    assert_eq!(status.last_sync.map(|(stratum, _)| stratum), Some(2));
    // The TLS clock is set too. (It is one per process, and the other tests' appliances
    // move its uptime on in parallel, so only a lower bound holds here.)
    let tls_time = bramble_tls::clock::CLOCK.unix_seconds().unwrap();
    assert!(tls_time >= SERVER_UNIX, "the TLS clock follows: {tls_time}");
    // HTTP now has a Date.
    let handle = client.connect_to(40100, 80);
    assert!(run_until(
        &mut appliance,
        &mut client,
        &mut clock,
        1000,
        |c| c.socket(handle).may_send()
    ));
    client
        .socket(handle)
        .send_slice(b"GET / HTTP/1.1\r\nHost: bramble\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = Vec::new();
    run_until(&mut appliance, &mut client, &mut clock, 2000, |c| {
        let socket = c.socket(handle);
        while socket.can_recv() {
            socket
                .recv(|d| {
                    response.extend_from_slice(d);
                    (d.len(), ())
                })
                .unwrap();
        }
        !socket.may_recv()
    });
    let text = String::from_utf8_lossy(&response);
    assert!(
        text.contains("\r\nDate: Fri, 15 Jan 2027 08:00:0"),
        "{text}"
    );
}

#[test]
fn a_clock_with_no_server_to_ask_lets_the_loop_sleep() {
    // No name server: pool.ntp.org cannot be resolved. The appliance must not report a
    // wake-up time that is already past (the loop would spin at full CPU).
    let (guest, _host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let memory = memory(2 + 2);
    memory.reserved_sockets = 2;
    let mut appliance =
        Appliance::new(guest, static_config(false), memory, server(), at(0)).unwrap();
    appliance.start_clock(
        ClockConfig {
            servers: &[],
            dns_servers: &[],
            seed: 5,
        },
        Box::leak(Box::new(ClockMemory::new())),
        at(0),
    );
    // In microseconds: IPv6 address configuration has deadlines between milliseconds.
    let mut now = 0;
    let mut polls = 0;
    while now < 120_000_000 && polls < 1_000 {
        let next = appliance
            .poll(Instant::from_micros(now))
            .map_or(u64::MAX, |next| next.as_micros());
        assert!(
            next > now,
            "at {now} us the next wake-up ({next} us) is not in the future"
        );
        now = next.min(now + 10_000_000);
        polls += 1;
    }
    assert!(polls < 100, "{polls} polls in two minutes of idling");
    assert_eq!(appliance.unix_seconds(Instant::from_micros(now)), None);
}
