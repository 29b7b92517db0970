//! ACME's lookups of the CA's name: a refused connection makes the next request look the
//! name up again, so a CA that moved is followed, and of several addresses a refusing one
//! gives way to the next at once (a DNS server and the CA's two addresses on the client end
//! of the wire).

use super::pool::{Client, run_until};
use super::*;
use crate::appliance::acme::{AcmeConfig, AcmeMemory, AcmeStatus};
use bramble_acme::{BackoffPolicy, ChallengeKind, MemoryBlocks};
use smoltcp::socket::udp;
use smoltcp::wire::IpListenEndpoint;

/// The CA's address before it moved (the client's own, with nothing listening on 443).
const OLD: [u8; 4] = [10, 0, 0, 1];
/// The CA's address after it moved.
const NEW: [u8; 4] = [10, 0, 0, 3];

/// A DNS answer to `query` giving `addresses` for an A question, and no address for any
/// other (the question echoed, one record per address pointing at it, TTL an hour).
fn answer(query: &[u8], addresses: &[[u8; 4]]) -> Vec<u8> {
    let mut reply = query.to_vec();
    // QR, RD, RA; no error.
    reply[2] = 0x81;
    reply[3] = 0x80;
    let question_type = &query[query.len() - 4..query.len() - 2];
    if question_type == [0, 1] {
        reply[6..8].copy_from_slice(&(addresses.len() as u16).to_be_bytes());
        for address in addresses {
            reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4]);
            reply.extend_from_slice(address);
        }
    }
    reply
}

/// Runs an appliance ordering from `acme.test` against a DNS server whose `n`th A answer
/// (from 0) is `lookup(n)`, and the CA listening at [`NEW`] only, until the CA sees a
/// connection (or 10 s pass). Returns whether it did, the questions (true: A), and ACME's
/// status.
fn reach_the_ca(lookup: impl Fn(usize) -> Vec<[u8; 4]>) -> (bool, Vec<bool>, AcmeStatus) {
    let _ = bramble_tls::random::RANDOM.seed(&[9; 32]);
    if !bramble_tls::clock::CLOCK.is_set() {
        bramble_tls::clock::CLOCK.set(1_800_000_000_000_000, 0);
    }
    let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
    let memory = memory(2 + 2);
    memory.reserved_sockets = 2;
    let mut appliance =
        Appliance::new(guest, static_ipv4_only(false), memory, server(), at(0)).unwrap();
    let names: &'static [&'static str] = &["bramble.test"];
    appliance
        .start_acme(
            AcmeConfig {
                directory_url: "https://acme.test/dir",
                email: None,
                names,
                ca_roots_pem: bramble_acme::LETS_ENCRYPT_ROOTS_PEM,
                https_port: 443,
                challenge: ChallengeKind::Http01,
                redirect_plain_http: false,
                // A second between orders, so the test's clock need not run a minute.
                backoff: BackoffPolicy {
                    first_seconds: 1,
                    max_seconds: 1,
                    validation_floor_seconds: 1,
                },
                dns_servers: &[OLD],
                renew_after_seconds: None,
            },
            Box::leak(Box::new(MemoryBlocks::new(64))),
            Box::leak(Box::new(AcmeMemory::new())),
            None,
            at(0),
        )
        .unwrap();
    let mut client = Client::new(host);
    client.iface.update_ip_addrs(|addresses| {
        addresses
            .push(IpCidr::new(
                IpAddress::v4(NEW[0], NEW[1], NEW[2], NEW[3]),
                24,
            ))
            .unwrap();
    });
    let meta = |n| Box::leak(std::vec![udp::PacketMetadata::EMPTY; n].into_boxed_slice());
    let bytes = |n| Box::leak(std::vec![0u8; n].into_boxed_slice());
    let mut socket = udp::Socket::new(
        udp::PacketBuffer::new(&mut meta(4)[..], &mut bytes(2048)[..]),
        udp::PacketBuffer::new(&mut meta(4)[..], &mut bytes(2048)[..]),
    );
    socket.bind(53).unwrap();
    let dns = client.sockets.add(socket);
    // The CA, once moved: listening on 443 at the new address only, so a connection to the
    // old one is refused (reset).
    let rx = Box::leak(std::vec![0u8; 4096].into_boxed_slice());
    let tx = Box::leak(std::vec![0u8; 4096].into_boxed_slice());
    let mut ca = tcp::Socket::new(tcp::SocketBuffer::new(rx), tcp::SocketBuffer::new(tx));
    ca.listen(IpListenEndpoint {
        addr: Some(IpAddress::v4(NEW[0], NEW[1], NEW[2], NEW[3])),
        port: 443,
    })
    .unwrap();
    let ca = client.sockets.add(ca);
    let mut clock = 0;
    let mut queries = Vec::new();
    let reached = run_until(&mut appliance, &mut client, &mut clock, 10_000, |c| {
        let socket = c.sockets.get_mut::<udp::Socket>(dns);
        while let Ok((query, meta)) = socket.recv() {
            let query = query.to_vec();
            let a_queries = queries.iter().filter(|&&a| a).count();
            let is_a = query.len() > 16 && query[query.len() - 4..query.len() - 2] == [0, 1];
            queries.push(is_a);
            socket
                .send_slice(&answer(&query, &lookup(a_queries)), meta.endpoint)
                .unwrap();
        }
        c.sockets.get_mut::<tcp::Socket>(ca).state() != tcp::State::Listen
    });
    let status = appliance.acme_status(at(clock)).unwrap();
    (reached, queries, status)
}

#[test]
fn a_refused_connection_makes_the_next_request_look_the_ca_up_again_and_follow_it() {
    // The first lookup finds the old address; the CA then moves.
    let (reached, queries, status) = reach_the_ca(|n| {
        if n == 0 {
            std::vec![OLD]
        } else {
            std::vec![NEW]
        }
    });
    let lookups = queries.iter().filter(|&&a| a).count();
    assert!(reached, "the moved CA was not reached ({lookups} lookups)");
    assert_eq!(lookups, 2, "one lookup, and one more after the refusal");
    // Without IPv6 on the board, no AAAA question.
    assert_eq!(queries.len(), 2, "{queries:?}");
    assert_eq!(status.failures, 1, "{status:?}");
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|error| error.contains("refused")),
        "{status:?}"
    );
}

#[test]
fn of_two_addresses_a_refusing_one_gives_way_to_the_next_without_a_failure() {
    let (reached, queries, status) = reach_the_ca(|_| std::vec![OLD, NEW]);
    assert!(reached, "the second address was not tried");
    assert_eq!(queries, [true], "one lookup");
    assert_eq!(status.failures, 0, "{status:?}");
}
