//! Dynamic DNS against a name server on the wire (the client end's UDP socket on port 53,
//! signing its answers with the key): one update per change of the public address, never a
//! repeat of the same addresses, and a silent server costs three sends and a back-off, not a
//! spinning loop.

use super::pool::{Client, run_until};
use super::*;
use crate::appliance::ddns::{DdnsConfig, DdnsMemory, Ipv4Source, RESEND_MICROS};
use crate::appliance::public::PublicSource;
use bramble_proto::dns_update::testing::{answer_body, server_sign};
use bramble_proto::dns_update::{MAC_LEN, TsigKey};
use smoltcp::socket::udp;

const KEY: TsigKey<'static> = TsigKey {
    name: "bramble-key",
    secret: b"0123456789abcdef0123456789abcdef",
};

/// The A record's address in an UPDATE (the added one: the second RR, after the delete).
fn updated_a(request: &[u8]) -> Option<[u8; 4]> {
    let at = request.windows(6).position(|w| w == [0, 1, 0, 1, 0, 0])?;
    request.get(at + 10..at + 14)?.try_into().ok()
}

#[test]
fn one_update_per_change_and_a_silent_server_backs_off() {
    // TSIG signs the time: the process-wide TLS clock must be set (other tests may set it
    // too; any sane time does).
    if !bramble_tls::clock::CLOCK.is_set() {
        bramble_tls::clock::CLOCK.set(1_800_000_000_000_000, 0);
    }
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let memory = memory(2 + 1);
    memory.reserved_sockets = 1;
    let mut appliance =
        Appliance::new(guest, static_ipv4_only(false), memory, server(), at(0)).unwrap();
    appliance
        .start_ddns(
            DdnsConfig {
                name: "home.example.org",
                zone: "example.org",
                server: (core::net::IpAddr::V4([10, 0, 0, 1].into()), 53),
                key: KEY,
                ipv4: Ipv4Source::Public,
                ipv6: false,
            },
            Box::leak(Box::new(DdnsMemory::new())),
            at(0),
        )
        .unwrap();
    let mut client = Client::new(host);
    let meta = |n| Box::leak(std::vec![udp::PacketMetadata::EMPTY; n].into_boxed_slice());
    let bytes = |n| Box::leak(std::vec![0u8; n].into_boxed_slice());
    let mut socket = udp::Socket::new(
        udp::PacketBuffer::new(&mut meta(4)[..], &mut bytes(4096)[..]),
        udp::PacketBuffer::new(&mut meta(4)[..], &mut bytes(4096)[..]),
    );
    socket.bind(53).unwrap();
    let dns = client.sockets.add(socket);
    let mut clock = 0;
    // Nothing to publish yet: no request.
    let mut requests: Vec<Vec<u8>> = Vec::new();
    let mut answer = true;
    let serve = |c: &mut Client, requests: &mut Vec<Vec<u8>>, answer: bool| {
        let socket = c.sockets.get_mut::<udp::Socket>(dns);
        while let Ok((request, meta)) = socket.recv() {
            requests.push(request.to_vec());
            if answer {
                let mac: [u8; MAC_LEN] = request[request.len() - 38..request.len() - 6]
                    .try_into()
                    .unwrap();
                let now = bramble_tls::clock::CLOCK.unix_seconds().unwrap();
                let reply = server_sign(&answer_body(request, 0), &mac, &KEY, now);
                socket.send_slice(&reply, meta.endpoint).unwrap();
            }
        }
    };
    run_until(&mut appliance, &mut client, &mut clock, 10_000, |c| {
        serve(c, &mut requests, answer);
        false
    });
    assert!(requests.is_empty(), "no address known: nothing sent");
    // The router reports an address: one update, after the settle time, confirmed.
    appliance.set_public_ipv4(Some([203, 0, 113, 7]), PublicSource::NatPmp, at(clock));
    run_until(&mut appliance, &mut client, &mut clock, 30_000, |c| {
        serve(c, &mut requests, answer);
        false
    });
    assert_eq!(requests.len(), 1);
    assert_eq!(updated_a(&requests[0]), Some([203, 0, 113, 7]));
    let status = appliance.ddns_status().unwrap();
    assert_eq!((status.updates, status.sends), (1, 1));
    assert_eq!(status.published.ipv4, Some([203, 0, 113, 7]));
    // The same address reported again: nothing is sent.
    appliance.set_public_ipv4(Some([203, 0, 113, 7]), PublicSource::NatPmp, at(clock));
    run_until(&mut appliance, &mut client, &mut clock, 30_000, |c| {
        serve(c, &mut requests, answer);
        false
    });
    assert_eq!(requests.len(), 1, "no repeat of the same address");
    // A private address (double NAT) is not published.
    appliance.set_public_ipv4(Some([192, 168, 1, 9]), PublicSource::NatPmp, at(clock));
    run_until(&mut appliance, &mut client, &mut clock, 30_000, |c| {
        serve(c, &mut requests, answer);
        false
    });
    assert_eq!(requests.len(), 1, "a private address is never published");
    // A new address with the server silent: three sends of one request, then a back-off
    // during which the loop sleeps.
    answer = false;
    appliance.set_public_ipv4(Some([203, 0, 113, 8]), PublicSource::NatPmp, at(clock));
    let start = clock;
    run_until(&mut appliance, &mut client, &mut clock, 25_000, |c| {
        serve(c, &mut requests, answer);
        false
    });
    assert_eq!(requests.len(), 4, "one request sent three times");
    assert!(requests[1..].iter().all(|r| r == &requests[1]));
    assert!(clock - start >= 5_000 + 2 * RESEND_MICROS / 1000);
    let status = appliance.ddns_status().unwrap();
    assert_eq!((status.updates, status.failures), (1, 1));
    let deadline = appliance.poll(at(clock)).expect("a wake-up planned");
    assert!(
        deadline.micros_since(at(clock)) >= 1_000_000,
        "backing off, the loop sleeps: {deadline:?}"
    );
}
