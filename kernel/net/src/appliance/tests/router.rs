//! Port mapping against a peer playing the home router: a PCP server on port 5351 over both
//! families (IPv4 mappings at its address 10.0.0.1, IPv6 pinholes at its link-local
//! address, the IPv6 default router its advertisements name). Both are granted, asked for
//! again after the router's ANNOUNCE over IPv4 alone, and a clean shutdown's deletions leave
//! for both families, also once the neighbor entries of the gateway and of the IPv6 router
//! have run out and must be resolved again; an IPv6 router that never answers holds up
//! nothing of IPv4's.

use super::ipv6::{PREFIX_A, ROUTER_LINK_LOCAL, Router};
use super::*;
use crate::appliance::router::{RouterConfig, RouterMemory, SOCKETS};
use bramble_proto::portmap::{PortRequest, pcp};
use smoltcp::socket::udp;
use smoltcp::wire::Ipv6Address;

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

/// The PCP server: takes every MAP request on its socket and, if `answer`, grants it (an
/// IPv4 one at [`PUBLIC`], an IPv6 one at the board's own address), replying from the
/// address the request was sent to.
fn serve(router: &mut Router, handle: SocketHandle, taken: &mut Vec<Taken>, answer: bool) {
    let socket = router.client.sockets.get_mut::<udp::Socket>(handle);
    while let Ok((request, meta)) = socket.recv() {
        if request.len() != pcp::MAP_LEN || request[1] != 1 {
            continue;
        }
        let lifetime = u32::from_be_bytes(request[4..8].try_into().unwrap());
        let port = u16::from_be_bytes([request[40], request[41]]);
        taken.push(Taken {
            from: meta.endpoint.addr,
            port,
            lifetime,
        });
        if !answer {
            continue;
        }
        let mut reply = request.to_vec();
        reply[1] |= 0x80;
        reply[2] = 0;
        reply[3] = 0;
        reply[8..12].copy_from_slice(&1000u32.to_be_bytes());
        reply[12..24].fill(0);
        if matches!(meta.endpoint.addr, IpAddress::Ipv4(_)) {
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

/// The board and the router, the PCP server's socket and what it took, the time (ms).
struct Home {
    appliance: Appliance<'static, WiredDevice>,
    router: Router,
    server: SocketHandle,
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
            serve(&mut self.router, self.server, &mut self.taken, true);
            self.clock += step;
        }
    }

    /// A clean shutdown, the peer running between the appliance's polls (each reading of
    /// the clock is a millisecond later): whether all left, and in how many milliseconds.
    fn stop(&mut self) -> (bool, u64) {
        self.taken.clear();
        let started = self.clock;
        let (router, server, taken, clock) = (
            &mut self.router,
            self.server,
            &mut self.taken,
            &mut self.clock,
        );
        let sent = self.appliance.stop_router(|| {
            router.client.poll(at(*clock));
            serve(router, server, taken, false);
            *clock += 1;
            at(*clock)
        });
        let took = self.clock - started;
        // What the last poll sent reaches the server.
        for _ in 0..5 {
            self.router.client.poll(at(self.clock));
            serve(&mut self.router, self.server, &mut self.taken, false);
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
