//! Tests of IPv6 address configuration: DAD, router solicitation, prefixes and their
//! lifetimes (RFC 4862 §5.5.3), renumbering, routers and name servers, stable identifiers.

use super::*;
use crate::ndp::{NeighborAdvert, RouterAdvert};
use std::vec::Vec;

const MAC: [u8; 6] = [0xb8, 0x27, 0xeb, 0x12, 0x34, 0x56];
const SECRET: [u8; 16] = [7; 16];
const ROUTER: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const PREFIX_A: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
const PREFIX_B: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0xb, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
const DNS: [u8; 16] = [
    0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x53,
];

fn s(seconds: u64) -> Instant {
    Instant::from_micros(seconds * 1_000_000)
}

/// A Router Advertisement: router lifetime, prefixes (prefix, len, valid, preferred) with the
/// L and A flags, and name servers with one lifetime.
fn advert(
    lifetime: u16,
    prefixes: &[([u8; 16], u8, u32, u32)],
    dns: Option<(u32, &[[u8; 16]])>,
) -> Vec<u8> {
    let mut m = std::vec![134, 0, 0, 0, 64, 0];
    m.extend_from_slice(&lifetime.to_be_bytes());
    m.extend_from_slice(&[0; 8]);
    for (prefix, len, valid, preferred) in prefixes {
        m.extend_from_slice(&[3, 4, *len, 0xc0]);
        m.extend_from_slice(&valid.to_be_bytes());
        m.extend_from_slice(&preferred.to_be_bytes());
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(prefix);
    }
    if let Some((lifetime, servers)) = dns {
        m.extend_from_slice(&[25, 1 + 2 * servers.len() as u8, 0, 0]);
        m.extend_from_slice(&lifetime.to_be_bytes());
        for server in servers {
            m.extend_from_slice(server);
        }
    }
    m
}

fn receive(config: &mut Ipv6Autoconfig, message: &[u8], now: Instant) {
    let ra = RouterAdvert::parse(message).unwrap();
    config.on_router_advert(ROUTER, &ra, now);
}

/// Polls until nothing is due at `now`; returns what was to be sent.
fn drain(config: &mut Ipv6Autoconfig, now: Instant) -> Vec<Solicitation> {
    let mut out = Vec::new();
    while let Some(solicitation) = config.poll(now) {
        out.push(solicitation);
        assert!(out.len() < 20, "poll keeps sending");
    }
    out
}

/// Runs the clock forward by deadlines to `until`, collecting every solicitation.
fn run(config: &mut Ipv6Autoconfig, from: Instant, until: Instant) -> Vec<(Instant, Solicitation)> {
    let mut out = Vec::new();
    let mut now = from;
    loop {
        for solicitation in drain(config, now) {
            out.push((now, solicitation));
        }
        match config.next_deadline() {
            Some(next) if next <= until => now = next.max(now),
            _ => return out,
        }
    }
}

fn assigned(config: &Ipv6Autoconfig) -> Vec<([u8; 16], AddressState)> {
    config.assigned().map(|e| (e.address, e.state)).collect()
}

/// A configuration whose link-local address is assigned and routers asked once, at 2 s.
fn started() -> Ipv6Autoconfig {
    let mut config = Ipv6Autoconfig::new(MAC, SECRET, None, None, 99, s(0));
    run(&mut config, s(0), s(2));
    assert!(config.link_local().is_some());
    config
}

#[test]
fn siphash_matches_the_reference_vector() {
    // The SipHash paper's appendix: key 00..0f, message 00..0e.
    let key: [u8; 16] = core::array::from_fn(|i| i as u8);
    let message: Vec<u8> = (0..15).collect();
    assert_eq!(siphash24(&key, &message), 0xa129_ca61_49be_45e5);
    assert_eq!(siphash24(&key, &[]), 0x726f_db47_dd0e_0e31);
}

#[test]
fn link_local_after_dad_then_three_router_solicitations() {
    let mut config = Ipv6Autoconfig::new(MAC, SECRET, None, None, 99, s(0));
    assert_eq!(config.link_local(), None);
    let sent = run(&mut config, s(0), s(30));
    let link_local = config.link_local().expect("assigned after DAD");
    assert_eq!(link_local[..8], [0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
    // The identifier is RFC 7217's, not the MAC's (no ff:fe in the middle).
    assert_ne!(link_local[11..13], [0xff, 0xfe]);
    assert_eq!(
        u64::from_be_bytes(link_local[8..].try_into().unwrap()),
        stable_interface_id(&SECRET, [0xfe, 0x80, 0, 0, 0, 0, 0, 0], MAC, 0)
    );
    let (t_ns, first) = sent[0];
    assert_eq!(first, Solicitation::Neighbor { target: link_local });
    assert!(t_ns < s(1), "random delay under a second");
    let routers: Vec<_> = sent[1..]
        .iter()
        .map(|(t, x)| (t.micros_since(t_ns), *x))
        .collect();
    let rs = Solicitation::Router { source: link_local };
    assert_eq!(
        routers,
        [(1_000_000, rs), (5_000_000, rs), (9_000_000, rs)],
        "RS after the 1 s DAD wait, then 4 s apart, three in all"
    );
    assert_eq!(config.next_deadline(), None, "quiet afterwards");
    // The same secret, MAC and prefix give the same address at every boot; another MAC not.
    let again = started();
    assert_eq!(again.link_local(), Some(link_local));
    let other = Ipv6Autoconfig::new([2, 0, 0, 0, 0, 1], SECRET, None, None, 99, s(0));
    assert_ne!(other.entries()[0].address, link_local);
}

#[test]
fn an_advertisement_stops_solicitation() {
    let mut config = started();
    assert!(config.next_deadline().is_some());
    receive(&mut config, &advert(0, &[], None), s(2));
    assert_eq!(config.next_deadline(), None);
    // A link that comes back asks again.
    config.restart(s(100));
    let sent = run(&mut config, s(100), s(200));
    assert_eq!(sent.len(), 3);
}

#[test]
fn a_prefix_gives_an_address_after_dad_and_its_lifetimes_are_honoured() {
    let mut config = started();
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_A, 64, 100, 50)], None),
        s(10),
    );
    assert_eq!(config.default_router(), Some(ROUTER));
    assert_eq!(assigned(&config).len(), 1, "tentative: not assigned yet");
    let changes = config.changes();
    let sent = drain(&mut config, s(10));
    let AddressEntry { address, .. } = config.entries()[1];
    assert_eq!(sent, [Solicitation::Neighbor { target: address }]);
    assert_eq!(address[..8], PREFIX_A[..8]);
    assert_eq!(drain(&mut config, s(11)), []);
    assert_ne!(config.changes(), changes);
    assert!(assigned(&config).contains(&(address, AddressState::Preferred)));
    // Preferred for 50 s, valid for 100 s from the advertisement.
    assert_eq!(config.next_deadline(), Some(s(60)));
    drain(&mut config, s(60));
    assert!(assigned(&config).contains(&(address, AddressState::Deprecated)));
    assert_eq!(config.next_deadline(), Some(s(110)));
    drain(&mut config, s(110));
    assert!(!config.entries().iter().any(|e| e.address == address));
    assert_eq!(
        assigned(&config).len(),
        1,
        "only the link-local address is left"
    );
}

#[test]
fn a_zero_lifetime_deprecates_at_once_but_cuts_validity_only_to_two_hours() {
    let mut config = started();
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_A, 64, 86_400, 86_400)], None),
        s(10),
    );
    run(&mut config, s(10), s(12));
    let old = config.entries()[1].address;
    // Renumbering: the old prefix with lifetimes 0, a new one.
    receive(
        &mut config,
        &advert(
            1800,
            &[(PREFIX_A, 64, 0, 0), (PREFIX_B, 64, 86_400, 86_400)],
            None,
        ),
        s(20),
    );
    let sent = drain(&mut config, s(20));
    let new = config.entries()[2].address;
    assert_eq!(new[..8], PREFIX_B[..8]);
    assert_eq!(sent, [Solicitation::Neighbor { target: new }]);
    drain(&mut config, s(21));
    assert_eq!(
        assigned(&config)[1..],
        [
            (new, AddressState::Preferred),
            (old, AddressState::Deprecated)
        ],
        "preferred first, the old one deprecated at once"
    );
    // RFC 4862 §5.5.3 (e): a valid lifetime over two hours is cut to two hours, not to 0.
    assert_eq!(config.entries()[1].valid_until, Some(s(20 + 7200)));
    // With two hours or less left, a shorter advertised lifetime is ignored...
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_A, 64, 5, 0)], None),
        s(100),
    );
    assert_eq!(config.entries()[1].valid_until, Some(s(20 + 7200)));
    // ...and a longer one taken.
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_A, 64, 9000, 0)], None),
        s(100),
    );
    assert_eq!(config.entries()[1].valid_until, Some(s(9100)));
    // A preferred lifetime again makes it preferred again.
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_A, 64, 9000, 60)], None),
        s(200),
    );
    assert!(assigned(&config).contains(&(old, AddressState::Preferred)));
    // A short lifetime for an address with a day left cuts it to two hours, not to 30 s.
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_B, 64, 30, 30)], None),
        s(300),
    );
    assert_eq!(config.entries()[2].valid_until, Some(s(300 + 7200)));
}

#[test]
fn short_lived_prefixes_expire_and_the_address_goes() {
    let mut config = started();
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_A, 64, 30, 20)], None),
        s(10),
    );
    run(&mut config, s(10), s(12));
    let address = config.entries()[1].address;
    // Lifetime 0 with 28 s left: ignored for validity (less than two hours left).
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_A, 64, 0, 0)], None),
        s(12),
    );
    assert!(assigned(&config).contains(&(address, AddressState::Deprecated)));
    run(&mut config, s(12), s(40));
    assert!(!config.entries().iter().any(|e| e.address == address));
}

#[test]
fn unusable_prefixes_are_skipped() {
    let mut config = started();
    let link_local_prefix = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let mut m = advert(
        0,
        &[
            (PREFIX_A, 48, 100, 100),
            (link_local_prefix, 64, 100, 100),
            (PREFIX_B, 64, 10, 100), // preferred > valid
        ],
        None,
    );
    receive(&mut config, &m, s(5));
    assert_eq!(config.entries().len(), 1);
    assert_eq!(config.prefixes_ignored(), 1, "the /48 is counted");
    // Without the A flag.
    m = advert(0, &[(PREFIX_A, 64, 100, 100)], None);
    m[19] = 0x80;
    receive(&mut config, &m, s(5));
    assert_eq!(config.entries().len(), 1);
    // A new prefix with valid lifetime 0 forms nothing.
    receive(&mut config, &advert(0, &[(PREFIX_A, 64, 0, 0)], None), s(5));
    assert_eq!(config.entries().len(), 1);
    // More prefixes than room: the rest are counted, not stored.
    let prefixes: Vec<_> = (0..6u8)
        .map(|i| {
            let mut p = PREFIX_A;
            p[7] = i;
            (p, 64, 100, 100)
        })
        .collect();
    receive(&mut config, &advert(0, &prefixes, None), s(5));
    assert_eq!(config.entries().len(), MAX_ADDRESSES);
    assert_eq!(config.prefixes_ignored(), 1 + 2);
}

#[test]
fn a_duplicate_gets_a_new_identifier_until_retries_run_out() {
    let mut config = Ipv6Autoconfig::new(MAC, SECRET, None, None, 5, s(0));
    let mut tried = Vec::new();
    for _ in 0..=IDGEN_RETRIES {
        let deadline = config.next_deadline().unwrap();
        let sent = drain(&mut config, deadline);
        let Some(Solicitation::Neighbor { target }) = sent.first().copied() else {
            panic!("expected a DAD probe, got {sent:?}");
        };
        assert!(!tried.contains(&target));
        tried.push(target);
        let defended = NeighborAdvert {
            target,
            solicited: false,
        };
        assert!(config.on_neighbor_advert(&defended, deadline));
    }
    assert_eq!(config.entries()[0].state, AddressState::Duplicate);
    assert_eq!(config.link_local(), None);
    assert_eq!(
        config.next_deadline(),
        None,
        "no router solicitation without an address"
    );
    // An advertisement for an address that is not tentative is no conflict.
    let other = NeighborAdvert {
        target: ROUTER,
        solicited: false,
    };
    assert!(!config.on_neighbor_advert(&other, s(9)));
}

#[test]
fn a_static_address_is_checked_and_kept_without_slaac() {
    let mut fixed = PREFIX_A;
    fixed[15] = 0x50;
    let mut gateway = ROUTER;
    gateway[15] = 0xfe;
    let gateway = Some(gateway);
    let mut config = Ipv6Autoconfig::new(MAC, SECRET, Some((fixed, 64)), gateway, 1, s(0));
    let sent = run(&mut config, s(0), s(2));
    assert!(sent.contains(&(sent[0].0, Solicitation::Neighbor { target: fixed })));
    assert!(assigned(&config).contains(&(fixed, AddressState::Preferred)));
    assert_eq!(config.default_router(), gateway);
    // Prefixes are not used, the router's name servers are.
    receive(
        &mut config,
        &advert(1800, &[(PREFIX_B, 64, 100, 100)], Some((60, &[DNS]))),
        s(5),
    );
    assert_eq!(config.entries().len(), 2);
    assert_eq!(
        config.default_router(),
        gateway,
        "gateway6 wins over the advertised router"
    );
    assert_eq!(config.dns_servers().collect::<Vec<_>>(), [DNS]);
    // A static address that is taken is given up, not renamed.
    let mut config = Ipv6Autoconfig::new(MAC, SECRET, Some((fixed, 64)), None, 1, s(0));
    let deadline = config.next_deadline().unwrap();
    drain(&mut config, deadline);
    let defended = NeighborAdvert {
        target: fixed,
        solicited: false,
    };
    assert!(config.on_neighbor_advert(&defended, deadline));
    assert_eq!(config.entries()[1].state, AddressState::Duplicate);
}

#[test]
fn routers_and_name_servers_follow_their_lifetimes() {
    let mut config = started();
    let mut other_dns = DNS;
    other_dns[15] = 0x54;
    receive(
        &mut config,
        &advert(30, &[], Some((60, &[DNS, other_dns]))),
        s(10),
    );
    assert_eq!(config.default_router(), Some(ROUTER));
    assert_eq!(config.dns_servers().collect::<Vec<_>>(), [DNS, other_dns]);
    assert_eq!(config.next_deadline(), Some(s(40)));
    drain(&mut config, s(40));
    assert_eq!(config.default_router(), None, "the router lifetime ran out");
    // Lifetime 0 withdraws a server at once; infinity keeps it.
    receive(&mut config, &advert(0, &[], Some((0, &[DNS]))), s(41));
    receive(
        &mut config,
        &advert(0, &[], Some((u32::MAX, &[other_dns]))),
        s(41),
    );
    assert_eq!(config.dns_servers().collect::<Vec<_>>(), [other_dns]);
    drain(&mut config, s(1_000_000));
    assert_eq!(config.dns_servers().collect::<Vec<_>>(), [other_dns]);
    // At most three are kept.
    let many: Vec<[u8; 16]> = (0..5u8)
        .map(|i| {
            let mut d = DNS;
            d[14] = i;
            d
        })
        .collect();
    receive(
        &mut config,
        &advert(0, &[], Some((60, &many))),
        s(2_000_000),
    );
    assert_eq!(config.dns_servers().count(), MAX_DNS_SERVERS);
    // A router lifetime of 0 removes the router at once.
    receive(&mut config, &advert(60, &[], None), s(2_000_000));
    assert_eq!(config.default_router(), Some(ROUTER));
    receive(&mut config, &advert(0, &[], None), s(2_000_001));
    assert_eq!(config.default_router(), None);
}

#[test]
fn reserved_identifiers_are_never_used() {
    assert!(is_reserved_interface_id(0));
    assert!(is_reserved_interface_id(0xfdff_ffff_ffff_ff80));
    assert!(is_reserved_interface_id(u64::MAX));
    assert!(is_reserved_interface_id(0x0200_5eff_fe12_3456));
    assert!(!is_reserved_interface_id(0x0200_5eff_ff00_0000));
    assert!(!is_reserved_interface_id(1));
}

#[test]
fn the_global_address_is_a_preferred_global_one_a_static_one_first() {
    let entry = |address: [u8; 16], origin, state| AddressEntry {
        address,
        prefix_len: 64,
        origin,
        state,
        preferred_until: None,
        valid_until: None,
        dad_counter: 0,
    };
    let with_tail = |prefix: [u8; 16], tail: u8| {
        let mut address = prefix;
        address[15] = tail;
        address
    };
    let mut ula = PREFIX_A;
    ula[..2].copy_from_slice(&[0xfd, 0x12]);
    let tentative = AddressState::Tentative {
        sent: 1,
        next: s(1),
    };
    let mut entries = std::vec![
        entry(
            with_tail(ROUTER, 9),
            AddressOrigin::LinkLocal,
            AddressState::Preferred
        ),
        entry(
            with_tail(ula, 9),
            AddressOrigin::Autoconfigured,
            AddressState::Preferred
        ),
        entry(
            with_tail(PREFIX_A, 9),
            AddressOrigin::Autoconfigured,
            tentative
        ),
        entry(
            with_tail(PREFIX_B, 7),
            AddressOrigin::Static,
            AddressState::Deprecated
        ),
    ];
    assert_eq!(global_address(&entries), None, "none preferred and global");
    entries[2].state = AddressState::Preferred;
    assert_eq!(global_address(&entries), Some(with_tail(PREFIX_A, 9)));
    entries[3].state = AddressState::Preferred;
    assert_eq!(
        global_address(&entries),
        Some(with_tail(PREFIX_B, 7)),
        "static first"
    );
    for not_global in [
        [0; 16],
        with_tail([0; 16], 1),
        with_tail([0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 1),
    ] {
        assert!(!is_global_unicast(&not_global));
    }
    assert!(!is_global_unicast(&with_tail(ula, 1)));
    assert!(!is_global_unicast(&with_tail(ROUTER, 1)));
    assert!(is_global_unicast(&with_tail(PREFIX_A, 1)));
}
