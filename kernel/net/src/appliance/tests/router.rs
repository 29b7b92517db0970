//! Port mapping against a peer playing the home router: a PCP server on port 5351 over both
//! families (IPv4 mappings at its address 10.0.0.1, IPv6 pinholes at its link-local
//! address, the IPv6 default router its advertisements name). Both are granted, asked for
//! again after the router's ANNOUNCE over IPv4 alone, and a clean shutdown's deletions leave
//! for both families, also once the neighbor entries of the gateway and of the IPv6 router
//! have run out and must be resolved again; an IPv6 router that never answers holds up
//! nothing of IPv4's. A restart whose ANNOUNCE is lost is found and counted by the renewal,
//! and a router that turns PCP off and answers NAT-PMP is a counted change of protocol.

use super::ipv6::{PREFIX_A, ROUTER_LINK_LOCAL, Router};
use super::*;
use crate::appliance::router::{RouterConfig, RouterMemory, SOCKETS};
use bramble_proto::portmap::{PortRequest, Protocol, natpmp, pcp};
use smoltcp::socket::udp;
use smoltcp::wire::Ipv6Address;
use std::string::ToString;

const PORTS: [PortRequest; 2] = [
    PortRequest {
        internal: 80,
        external: 80,
    },
    PortRequest {
        internal: 443,
        external: 443,
    },
];

/// The router's public IPv4 address, as its PCP answers give it.
const PUBLIC: [u8; 4] = [11, 0, 0, 1];

/// A request the PCP server took: from whom, and its lifetime (0: a deletion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Taken {
    from: IpAddress,
    port: u16,
    lifetime: u32,
}

/// How the router's server answers.
#[derive(Clone, Copy, Debug)]
struct Server {
    /// Answers at all (no: a shutdown's deletions are only counted).
    answer: bool,
    /// When it last restarted (the clock, ms), if since the board started; before, it had
    /// been up for 1000 s. Its epoch is the seconds since.
    restarted: Option<u64>,
    /// PCP over IPv4 is off and NAT-PMP answers instead (IPv6 pinholes stay PCP).
    natpmp: bool,
}

/// NAT-PMP's answer to `request` (RFC 6886: the address, or a TCP mapping granted as
/// asked for 1000 s).
fn natpmp_answer(request: &[u8], epoch: u32) -> Option<Vec<u8>> {
    let mut reply = std::vec![natpmp::VERSION, request.get(1)? | natpmp::REPLY, 0, 0];
    reply.extend_from_slice(&epoch.to_be_bytes());
    match (request.len(), request[1]) {
        (2, natpmp::OP_ADDRESS) => reply.extend_from_slice(&PUBLIC),
        (12, natpmp::OP_MAP_TCP) => {
            reply.extend_from_slice(&request[4..8]);
            reply.extend_from_slice(&1000u32.to_be_bytes());
        }
        _ => return None,
    }
    Some(reply)
}

/// The PCP server: takes every MAP request on its socket and, if it answers, grants it (an
/// IPv4 one at [`PUBLIC`], an IPv6 one at the board's own address), replying from the
/// address the request was sent to; the same for NAT-PMP requests when `server.natpmp`.
fn serve(
    router: &mut Router,
    handle: SocketHandle,
    taken: &mut Vec<Taken>,
    server: Server,
    clock: u64,
) {
    let epoch = match server.restarted {
        Some(at) => clock.saturating_sub(at) / 1000,
        None => 1000 + clock / 1000,
    };
    let epoch = u32::try_from(epoch).unwrap();
    let socket = router.client.sockets.get_mut::<udp::Socket>(handle);
    while let Ok((request, meta)) = socket.recv() {
        let ipv4 = matches!(meta.endpoint.addr, IpAddress::Ipv4(_));
        if request.first() == Some(&natpmp::VERSION) && server.natpmp && server.answer {
            if let Some(reply) = natpmp_answer(request, epoch) {
                socket.send_slice(&reply, meta.endpoint).unwrap();
            }
            continue;
        }
        if request.len() != pcp::MAP_LEN || request[1] != 1 || (ipv4 && server.natpmp) {
            continue;
        }
        let lifetime = u32::from_be_bytes(request[4..8].try_into().unwrap());
        let port = u16::from_be_bytes([request[40], request[41]]);
        taken.push(Taken {
            from: meta.endpoint.addr,
            port,
            lifetime,
        });
        if !server.answer {
            continue;
        }
        let mut reply = request.to_vec();
        reply[1] |= 0x80;
        reply[2] = 0;
        reply[3] = 0;
        reply[8..12].copy_from_slice(&epoch.to_be_bytes());
        reply[12..24].fill(0);
        if ipv4 {
            reply[44..60].copy_from_slice(&pcp::mapped(PUBLIC));
        }
        let to = udp::UdpMetadata {
            endpoint: meta.endpoint,
            local_address: meta.local_address,
            meta: Default::default(),
        };
        socket.send_slice(&reply, to).unwrap();
    }
}

/// The board and the router, the PCP server's socket, how it answers and what it took,
/// the time (ms).
struct Home {
    appliance: Appliance<'static, WiredDevice>,
    router: Router,
    server: SocketHandle,
    serving: Server,
    taken: Vec<Taken>,
    clock: u64,
}

impl Home {
    /// A board asking for `lifetime`-second mappings, on a link with the router; SLAAC (DAD
    /// first), then the router's advertisement from `ipv6_router` names the IPv6 router.
    fn new(lifetime: u32, ipv6_router: Ipv6Address) -> Home {
        let (guest, host) = wired_pair(GUEST_MAC, CLIENT_MAC);
        let memory = memory(2 + SOCKETS);
        memory.reserved_sockets = SOCKETS;
        let mut appliance =
            Appliance::new(guest, static_config(false), memory, server(), at(0)).unwrap();
        appliance.start_router(
            RouterConfig {
                ports: &PORTS,
                lifetime,
                nonce: [9; 12],
            },
            Box::leak(Box::new(RouterMemory::new())),
            at(0),
        );
        let mut router = Router::new(host);
        let meta = |n| Box::leak(std::vec![udp::PacketMetadata::EMPTY; n].into_boxed_slice());
        let bytes = |n| Box::leak(std::vec![0u8; n].into_boxed_slice());
        let mut socket = udp::Socket::new(
            udp::PacketBuffer::new(&mut meta(8)[..], &mut bytes(4096)[..]),
            udp::PacketBuffer::new(&mut meta(8)[..], &mut bytes(4096)[..]),
        );
        socket.bind(5351).unwrap();
        let server = router.client.sockets.add(socket);
        let mut home = Home {
            appliance,
            router,
            server,
            serving: Server {
                answer: true,
                restarted: None,
                natpmp: false,
            },
            taken: Vec::new(),
            clock: 0,
        };
        home.run(2_500, 1);
        home.router
            .advertise_from(ipv6_router, &[(PREFIX_A, 3600, 1800)]);
        home.run(3_000, 1);
        assert_eq!(
            home.appliance.ipv6_router(),
            Some(ipv6_router.octets()),
            "the IPv6 router"
        );
        home
    }

    /// Runs both ends for `millis` milliseconds in steps of `step`, the server answering.
    fn run(&mut self, millis: u64, step: u64) {
        for _ in 0..millis / step {
            self.appliance.poll(at(self.clock));
            self.router.client.poll(at(self.clock));
            serve(
                &mut self.router,
                self.server,
                &mut self.taken,
                self.serving,
                self.clock,
            );
            self.clock += step;
        }
    }

    /// A clean shutdown, the peer running between the appliance's polls (each reading of
    /// the clock is a millisecond later): whether all left, and in how many milliseconds.
    fn stop(&mut self) -> (bool, u64) {
        self.taken.clear();
        let started = self.clock;
        let quiet = Server {
            answer: false,
            ..self.serving
        };
        let (router, server, taken, clock) = (
            &mut self.router,
            self.server,
            &mut self.taken,
            &mut self.clock,
        );
        let sent = self.appliance.stop_router(|| {
            router.client.poll(at(*clock));
            serve(router, server, taken, quiet, *clock);
            *clock += 1;
            at(*clock)
        });
        let took = self.clock - started;
        // What the last poll sent reaches the server.
        for _ in 0..5 {
            self.router.client.poll(at(self.clock));
            serve(
                &mut self.router,
                self.server,
                &mut self.taken,
                quiet,
                self.clock,
            );
            self.clock += 1;
        }
        (sent, took)
    }

    /// The ports of the deletions (lifetime 0) the server took from one family.
    fn deletions(&self, ipv6: bool) -> Vec<u16> {
        self.taken
            .iter()
            .filter(|t| t.lifetime == 0 && matches!(t.from, IpAddress::Ipv6(_)) == ipv6)
            .map(|t| t.port)
            .collect()
    }
}

#[test]
fn mappings_and_pinholes_granted_then_both_families_deleted_at_shutdown() {
    let mut home = Home::new(3600, ROUTER_LINK_LOCAL);
    let taken = &home.taken;
    assert_eq!(
        home.appliance.port_mapper().unwrap().mappings().count(),
        2,
        "{taken:?}"
    );
    assert_eq!(
        home.appliance.ipv6_pinholes().unwrap().held().count(),
        2,
        "{taken:?}"
    );
    assert!(
        taken
            .iter()
            .any(|t| t.from == IpAddress::v4(10, 0, 0, 2) && t.lifetime == 3600),
        "{taken:?}"
    );
    assert!(
        taken
            .iter()
            .any(|t| matches!(t.from, IpAddress::Ipv6(a) if a.octets()[..8] == PREFIX_A)),
        "pinholes asked from the SLAAC address: {taken:?}"
    );
    // The router restarts and multicasts a PCP ANNOUNCE over IPv4 only (epoch 0): the
    // mappings and the pinholes are asked for again.
    home.taken.clear();
    let mut announce = [0u8; 24];
    announce[0] = 2;
    announce[1] = 0x80;
    home.router
        .client
        .sockets
        .get_mut::<udp::Socket>(home.server)
        .send_slice(&announce, (IpAddress::v4(224, 0, 0, 1), 5350))
        .unwrap();
    home.run(1_000, 1);
    let asked = |ipv6: bool| {
        home.taken
            .iter()
            .filter(|t| t.lifetime == 3600 && matches!(t.from, IpAddress::Ipv6(_)) == ipv6)
            .count()
    };
    assert_eq!((asked(false), asked(true)), (2, 2), "{:?}", home.taken);
    assert_eq!(home.appliance.ipv6_pinholes().unwrap().held().count(), 2);
    // A minute later (no renewal within 3600 s), the neighbor entries of both routers have
    // run out (60 s after their last packet): the shutdown's deletions need an ARP request
    // and a neighbor solicitation, and smoltcp allows one per second.
    home.run(65_000, 10);
    let (sent, took) = home.stop();
    assert!(sent, "{:?}", home.taken);
    assert!((1_000..1_500).contains(&took), "{took} ms");
    assert_eq!(home.deletions(false), [80, 443], "IPv4: {:?}", home.taken);
    assert_eq!(home.deletions(true), [80, 443], "IPv6: {:?}", home.taken);
}

#[test]
fn an_ipv6_router_that_never_answers_holds_up_nothing_of_ipv4() {
    // The advertisements name an IPv6 router that nobody answers neighbor solicitations
    // for: the pinhole requests wait for their next hop, and are dropped after 2 s.
    let mut home = Home::new(120, Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99));
    home.taken.clear();
    // Two renewals of the IPv4 mappings (every 60 s) meanwhile, and the pinholes' rounds.
    home.run(130_000, 10);
    let renewals = home
        .taken
        .iter()
        .filter(|t| matches!(t.from, IpAddress::Ipv4(_)) && t.lifetime == 120)
        .count();
    assert!(renewals >= 2 * 2, "{:?}", home.taken);
    assert!(
        home.taken
            .iter()
            .all(|t| matches!(t.from, IpAddress::Ipv4(_)))
    );
    assert_eq!(home.appliance.port_mapper().unwrap().mappings().count(), 2);
    assert_eq!(home.appliance.ipv6_pinholes().unwrap().held().count(), 0);
    // The shutdown: IPv4's deletions leave at once (none for pinholes never granted).
    let (sent, took) = home.stop();
    assert!(sent);
    assert!(took < 100, "{took} ms");
    assert_eq!(home.deletions(false), [80, 443], "IPv4: {:?}", home.taken);
    assert_eq!(home.deletions(true), [0u16; 0]);
}

#[test]
fn a_restart_without_its_announcement_is_found_and_counted_by_the_renewal() {
    let mut home = Home::new(120, ROUTER_LINK_LOCAL);
    let mapper = home.appliance.port_mapper().unwrap();
    assert_eq!(mapper.mappings().count(), 2);
    assert_eq!(mapper.counters().gateway_restarts, 0);
    // The router restarts 20 s later, its mappings and pinholes lost, and no ANNOUNCE: its
    // epoch starts again from 0. The renewal (60 s after the mappings) finds it.
    home.run(20_000, 10);
    home.serving.restarted = Some(home.clock);
    home.taken.clear();
    home.run(50_000, 10);
    let mapper = home.appliance.port_mapper().unwrap();
    let counters = mapper.counters();
    assert_eq!(
        (counters.rounds, counters.gateway_restarts),
        (2, 1),
        "{:?}",
        home.taken
    );
    assert_eq!(mapper.mappings().count(), 2);
    // The pinholes are asked for again with it (their own renewal is also due).
    assert_eq!(home.appliance.ipv6_pinholes().unwrap().held().count(), 2);
    assert!(
        home.taken
            .iter()
            .any(|t| matches!(t.from, IpAddress::Ipv6(_)) && t.lifetime == 120),
        "{:?}",
        home.taken
    );
    // The next renewal, at the epoch's pace, is no restart.
    home.run(60_000, 10);
    let counters = home.appliance.port_mapper().unwrap().counters();
    assert_eq!((counters.rounds, counters.gateway_restarts), (3, 1));
}

#[test]
fn a_router_that_turns_pcp_off_is_mapped_by_nat_pmp_and_the_change_counted() {
    let mut home = Home::new(120, ROUTER_LINK_LOCAL);
    assert_eq!(
        home.appliance.port_mapper().unwrap().external(),
        Some((PUBLIC, Protocol::Pcp))
    );
    // PCP over IPv4 turned off, NAT-PMP on: the renewal falls back to NAT-PMP.
    home.serving.natpmp = true;
    home.run(65_000, 10);
    let mapper = home.appliance.port_mapper().unwrap();
    let counters = mapper.counters();
    assert_eq!(
        (
            counters.rounds,
            counters.protocol_changes,
            counters.gateway_restarts
        ),
        (2, 1, 0),
    );
    assert_eq!(mapper.external(), Some((PUBLIC, Protocol::NatPmp)));
    assert_eq!(mapper.mappings().count(), 2);
    let report = mapper.report(at(home.clock)).to_string();
    assert!(
        report.starts_with("NAT-PMP via 10.0.0.1: 11.0.0.1:80->80,:443->443"),
        "{report}"
    );
    // Its own renewal is no change.
    home.run(60_000, 10);
    assert_eq!(
        home.appliance
            .port_mapper()
            .unwrap()
            .counters()
            .protocol_changes,
        1
    );
}
