//! The client against a scripted gateway: the replies are built by hand from the RFCs'
//! layouts, so a misread field shows.

use super::*;
use bramble_hal::Instant;
use std::format;
use std::string::ToString;

const GATEWAY: [u8; 4] = [192, 168, 1, 1];
const CLIENT: [u8; 4] = [192, 168, 1, 50];
const PUBLIC: [u8; 4] = [198, 51, 100, 20];
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

fn at(seconds_tenths: u64) -> Instant {
    Instant::from_micros(seconds_tenths * 100_000)
}

fn mapper() -> PortMapper {
    let mut mapper = PortMapper::new(&PORTS, 120, [3; 12]);
    mapper.set_network(Some(CLIENT), Some(GATEWAY), at(0));
    mapper
}

/// A PCP server's answer to `request`: success with `epoch`, `lifetime`, `address`.
fn pcp_answer(request: &[u8], result: u8, epoch: u32, lifetime: u32) -> std::vec::Vec<u8> {
    let mut out = request.to_vec();
    out[1] |= 0x80;
    out[2] = 0;
    out[3] = result;
    out[4..8].copy_from_slice(&lifetime.to_be_bytes());
    out[8..12].copy_from_slice(&epoch.to_be_bytes());
    out[12..24].fill(0);
    out[44..60].copy_from_slice(&pcp::mapped(PUBLIC));
    out
}

fn natpmp_map_answer(request: &[u8], epoch: u32, lifetime: u32) -> std::vec::Vec<u8> {
    let mut out = std::vec![0, request[1] | 128, 0, 0];
    out.extend_from_slice(&epoch.to_be_bytes());
    out.extend_from_slice(&request[4..6]);
    out.extend_from_slice(&request[6..8]);
    out.extend_from_slice(&lifetime.to_be_bytes());
    out
}

fn natpmp_address(epoch: u32) -> std::vec::Vec<u8> {
    let mut out = std::vec![0, 128, 0, 0];
    out.extend_from_slice(&epoch.to_be_bytes());
    out.extend_from_slice(&PUBLIC);
    out
}

/// Maps both ports by PCP from `now`, the gateway at `epoch`.
fn map_by_pcp(mapper: &mut PortMapper, now: Instant, epoch: u32) {
    for _ in 0..2 {
        let request = mapper.poll(now).expect("a MAP request");
        assert_eq!(request[0], 2, "PCP");
        mapper.receive(GATEWAY, &pcp_answer(&request, 0, epoch, 120), now);
    }
}

#[test]
fn pcp_maps_both_ports_and_renews_at_half_the_lifetime() {
    let mut mapper = mapper();
    map_by_pcp(&mut mapper, at(0), 1000);
    assert_eq!(mapper.mappings().count(), 2);
    assert_eq!(mapper.external(), Some((PUBLIC, Protocol::Pcp)));
    assert_eq!(mapper.poll(at(1)), None);
    assert_eq!(mapper.next_deadline(), Some(at(600)));
    let report = mapper.report(at(100)).to_string();
    assert_eq!(
        report,
        "PCP via 192.168.1.1: 198.51.100.20:80->80,:443->443, 110 s left, renewal in 50 s"
    );
    // The renewal asks for the same mapping (same nonce, external port and address).
    let renewal = mapper.poll(at(600)).expect("renewal");
    assert_eq!(&renewal[24..36], &[3; 12]);
    assert_eq!(&renewal[42..44], &80u16.to_be_bytes());
    assert_eq!(
        pcp::unmapped(renewal[44..60].try_into().unwrap()),
        Some(PUBLIC)
    );
    mapper.receive(GATEWAY, &pcp_answer(&renewal, 0, 1060, 120), at(600));
    let second = mapper.poll(at(600)).unwrap();
    mapper.receive(GATEWAY, &pcp_answer(&second, 0, 1060, 120), at(600));
    assert_eq!(mapper.counters().rounds, 2);
    assert_eq!(mapper.counters().gateway_restarts, 0);
}

#[test]
fn a_restarted_gateway_is_mapped_again_at_once() {
    let mut mapper = mapper();
    map_by_pcp(&mut mapper, at(0), 1000);
    // An ANNOUNCE with a fresh epoch, multicast by the restarted gateway.
    let mut announce = [0u8; 24];
    announce[0] = 2;
    announce[1] = 0x80;
    mapper.receive(GATEWAY, &announce, at(100));
    assert_eq!(mapper.counters().gateway_restarts, 1);
    assert_eq!(mapper.mappings().count(), 0);
    map_by_pcp(&mut mapper, at(100), 0);
    assert_eq!(mapper.mappings().count(), 2);

    // Without an announcement: a renewal's reply whose epoch went back.
    let mut mapper = self::mapper();
    map_by_pcp(&mut mapper, at(0), 5000);
    let renewal = mapper.poll(at(600)).unwrap();
    mapper.receive(GATEWAY, &pcp_answer(&renewal, 0, 5060, 120), at(600));
    let second = mapper.poll(at(600)).unwrap();
    mapper.receive(GATEWAY, &pcp_answer(&second, 0, 3, 120), at(600));
    assert_eq!(mapper.counters().gateway_restarts, 1);
    map_by_pcp(&mut mapper, at(601), 3);
    assert_eq!(mapper.mappings().count(), 2);
}

#[test]
fn a_restart_whose_announcement_is_lost_is_counted_at_the_renewal() {
    // The renewal's first reply shows the epoch gone back: the round goes on (it maps
    // every port again), and the restart counts as an announced one does.
    let mut mapper = mapper();
    map_by_pcp(&mut mapper, at(0), 5000);
    map_by_pcp(&mut mapper, at(600), 2);
    assert_eq!(mapper.counters().gateway_restarts, 1);
    assert_eq!(mapper.counters().rounds, 2);
    assert_eq!(mapper.mappings().count(), 2);
    assert_eq!(mapper.next_deadline(), Some(at(1200)));
    // A renewal at the pace the epoch allows is no restart.
    map_by_pcp(&mut mapper, at(1200), 62);
    assert_eq!(mapper.counters().gateway_restarts, 1);

    // NAT-PMP: the renewal's address reply carries the epoch.
    let mut mapper = self::mapper();
    let natpmp_round = |mapper: &mut PortMapper, now: Instant, epoch: u32| {
        if mapper.poll(now).unwrap()[0] == 2 {
            mapper.receive(GATEWAY, &[0, 129, 0, 1, 0, 0, 0, 7], now);
            mapper.poll(now).unwrap();
        }
        mapper.receive(GATEWAY, &natpmp_address(epoch), now);
        for _ in 0..2 {
            let request = mapper.poll(now).unwrap();
            mapper.receive(GATEWAY, &natpmp_map_answer(&request, epoch, 120), now);
        }
    };
    natpmp_round(&mut mapper, at(0), 5000);
    assert_eq!(mapper.counters().gateway_restarts, 0);
    natpmp_round(&mut mapper, at(600), 3);
    assert_eq!(mapper.counters().gateway_restarts, 1);
    assert_eq!(mapper.counters().rounds, 2);
    assert_eq!(mapper.external(), Some((PUBLIC, Protocol::NatPmp)));
    assert_eq!(mapper.mappings().count(), 2);
}

#[test]
fn a_round_by_another_protocol_is_a_counted_change() {
    let mut mapper = mapper();
    map_by_pcp(&mut mapper, at(0), 1000);
    // At the renewal PCP is silent (turned off in the router): NAT-PMP maps.
    let mut now = at(600);
    let mut natpmp = None;
    for _ in 0..10 {
        if let Some(request) = mapper.poll(now)
            && request[0] == 0
        {
            natpmp = Some(request);
            break;
        }
        now = mapper.next_deadline().unwrap();
    }
    assert_eq!(
        natpmp.as_deref(),
        Some(&[0u8, 0][..]),
        "NAT-PMP's address request"
    );
    mapper.receive(GATEWAY, &natpmp_address(1060), now);
    for _ in 0..2 {
        let request = mapper.poll(now).unwrap();
        mapper.receive(GATEWAY, &natpmp_map_answer(&request, 1060, 120), now);
    }
    let counters = mapper.counters();
    assert_eq!(
        (
            counters.rounds,
            counters.protocol_changes,
            counters.gateway_restarts
        ),
        (2, 1, 0)
    );
    assert_eq!(mapper.external(), Some((PUBLIC, Protocol::NatPmp)));
    // Its renewal is no change; a new gateway's first round is none either.
    let renew_at = mapper.next_deadline().unwrap();
    mapper.poll(renew_at).unwrap();
    mapper.receive(GATEWAY, &natpmp_address(1120), renew_at);
    for _ in 0..2 {
        let request = mapper.poll(renew_at).unwrap();
        mapper.receive(GATEWAY, &natpmp_map_answer(&request, 1120, 120), renew_at);
    }
    assert_eq!(mapper.counters().protocol_changes, 1);
    let other = [192, 168, 1, 254];
    mapper.set_network(Some(CLIENT), Some(other), renew_at);
    for _ in 0..2 {
        let request = mapper.poll(renew_at).unwrap();
        mapper.receive(other, &pcp_answer(&request, 0, 7, 120), renew_at);
    }
    assert_eq!(mapper.mappings().count(), 2);
    assert_eq!(mapper.counters().protocol_changes, 1);
}

#[test]
fn a_nat_pmp_gateway_is_used_after_its_unsupported_version_answer() {
    let mut mapper = mapper();
    let pcp_request = mapper.poll(at(0)).unwrap();
    assert_eq!(pcp_request[0], 2);
    // RFC 6887 §9: version 0, result 1.
    mapper.receive(GATEWAY, &[0, 129, 0, 1, 0, 0, 0, 7], at(0));
    let address = mapper.poll(at(0)).unwrap();
    assert_eq!(&address[..], &[0, 0]);
    mapper.receive(GATEWAY, &natpmp_address(7), at(0));
    for internal in [80u16, 443] {
        let request = mapper.poll(at(0)).unwrap();
        assert_eq!(&request[..2], &[0, 2]);
        assert_eq!(&request[4..6], &internal.to_be_bytes());
        mapper.receive(GATEWAY, &natpmp_map_answer(&request, 7, 3600), at(0));
    }
    assert_eq!(mapper.external(), Some((PUBLIC, Protocol::NatPmp)));
    assert_eq!(mapper.mappings().count(), 2);
    assert_eq!(mapper.next_deadline(), Some(at(18_000)));
    // Shutdown deletes both: lifetime 0, external port 0.
    let deletions = mapper.stop(at(20_000));
    assert_eq!(deletions.len(), 2);
    assert_eq!(&deletions[1][..], &natpmp::map_request(443, 0, 0));
    assert_eq!(mapper.poll(at(20_000)), None);
}

#[test]
fn silence_to_every_protocol_is_said_plainly_and_retried() {
    let mut mapper = mapper();
    let mut sent = std::vec::Vec::new();
    let mut now = at(0);
    while now < at(400) {
        if let Some(request) = mapper.poll(now) {
            sent.push((now, request[0]));
        }
        if let Some(action) = mapper.poll_upnp(now) {
            assert_eq!(action, UpnpAction::Search);
            sent.push((now, b'S'));
        }
        now = mapper.next_deadline().unwrap().max(now);
        if mapper.trouble().is_some() {
            break;
        }
    }
    // PCP four times (250 ms doubling), NAT-PMP four times, two SSDP searches, then a wait
    // of 30 s.
    let versions: std::vec::Vec<u8> = sent.iter().map(|(_, v)| *v).collect();
    assert_eq!(versions, [2, 2, 2, 2, 0, 0, 0, 0, b'S', b'S']);
    assert_eq!(mapper.trouble(), Some(Trouble::NoAnswer));
    assert!(
        mapper
            .report(now)
            .to_string()
            .contains("answers neither PCP, NAT-PMP nor UPnP IGD")
    );
    let retry = mapper.next_deadline().unwrap();
    assert_eq!(retry.micros_since(sent[9].0), 2_500_000 + 30_000_000);
    // The owner's `router again` starts over at once.
    mapper.again(now);
    assert_eq!(mapper.poll(now).map(|r| r[0]), Some(2));
}

/// Runs PCP and NAT-PMP into silence, so that the UPnP fallback's first search is due.
fn into_upnp(mapper: &mut PortMapper) -> Instant {
    let mut now = at(0);
    for _ in 0..20 {
        let _ = mapper.poll(now);
        now = mapper.next_deadline().unwrap().max(now);
    }
    assert_eq!(mapper.poll_upnp(now), Some(UpnpAction::Search));
    now
}

fn exchange(action: Option<UpnpAction>) -> std::string::String {
    match action {
        Some(UpnpAction::Exchange { to, request }) => {
            assert_eq!(to, (GATEWAY, 5000));
            std::string::String::from_utf8(request.to_vec()).unwrap()
        }
        other => panic!("not an exchange: {other:?}"),
    }
}

/// The gateway's answer to the SSDP search.
const SSDP_ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\nST: urn:schemas-upnp-org:device:InternetGatewayDevice:1\r\n\
    LOCATION: http://192.168.1.1:5000/rootDesc.xml\r\n\r\n";
/// Its device description, naming the WANIPConnection control URL.
const IGD_DESCRIPTION: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n<root><service><serviceType>\
    urn:schemas-upnp-org:service:WANIPConnection:1</serviceType>\
    <controlURL>/ctl/IPConn</controlURL></service></root>";

#[test]
fn upnp_igd_maps_when_pcp_and_nat_pmp_are_silent() {
    let mut mapper = mapper();
    let now = into_upnp(&mut mapper);
    mapper.receive(GATEWAY, SSDP_ANSWER, now);
    let get = exchange(mapper.poll_upnp(now));
    assert!(get.starts_with("GET /rootDesc.xml HTTP/1.1\r\n"), "{get}");
    assert_eq!(mapper.poll_upnp(now), None, "one exchange at a time");
    mapper.upnp_answer(IGD_DESCRIPTION, now);
    let add = exchange(mapper.poll_upnp(now));
    assert!(add.contains("#AddPortMapping"), "{add}");
    assert!(
        add.contains("<NewInternalClient>192.168.1.50</NewInternalClient>"),
        "{add}"
    );
    assert!(
        add.contains("<NewLeaseDuration>120</NewLeaseDuration>"),
        "{add}"
    );
    // An IGD that keeps only permanent mappings is asked again without a lease.
    mapper.upnp_answer(
        b"HTTP/1.1 500 Internal Server Error\r\n\r\n<errorCode>725</errorCode>",
        now,
    );
    let again = exchange(mapper.poll_upnp(now));
    assert!(
        again.contains("<NewLeaseDuration>0</NewLeaseDuration>"),
        "{again}"
    );
    mapper.upnp_answer(b"HTTP/1.1 200 OK\r\n\r\n<ok/>", now);
    let second = exchange(mapper.poll_upnp(now));
    assert!(
        second.contains("<NewExternalPort>443</NewExternalPort>"),
        "{second}"
    );
    mapper.upnp_answer(b"HTTP/1.1 200 OK\r\n\r\n<ok/>", now);
    let external = exchange(mapper.poll_upnp(now));
    assert!(external.contains("#GetExternalIPAddress"), "{external}");
    mapper.upnp_answer(
        b"HTTP/1.1 200 OK\r\n\r\n<NewExternalIPAddress>198.51.100.20</NewExternalIPAddress>",
        now,
    );
    assert_eq!(mapper.external(), Some((PUBLIC, Protocol::Upnp)));
    assert_eq!(mapper.mappings().count(), 2);
    assert!(
        mapper
            .report(now)
            .to_string()
            .starts_with("UPnP IGD via 192.168.1.1: 198.51.100.20:80->80,:443->443")
    );
    // The renewal goes straight to the control URL, without a search.
    let renew_at = mapper.next_deadline().unwrap();
    assert_eq!(mapper.poll(renew_at), None);
    assert!(exchange(mapper.poll_upnp(renew_at)).contains("#AddPortMapping"));
    // A failed exchange forgets the IGD and waits.
    mapper.upnp_failed(renew_at);
    assert_eq!(mapper.trouble(), Some(Trouble::IgdBroken));
}

#[test]
fn a_clean_shutdown_deletes_upnp_mappings_by_soap() {
    let mut mapper = mapper();
    let now = into_upnp(&mut mapper);
    mapper.receive(GATEWAY, SSDP_ANSWER, now);
    let _ = exchange(mapper.poll_upnp(now));
    mapper.upnp_answer(IGD_DESCRIPTION, now);
    for _ in 0..2 {
        assert!(exchange(mapper.poll_upnp(now)).contains("#AddPortMapping"));
        mapper.upnp_answer(b"HTTP/1.1 200 OK\r\n\r\n<ok/>", now);
    }
    let _ = exchange(mapper.poll_upnp(now));
    mapper.upnp_answer(
        b"HTTP/1.1 200 OK\r\n\r\n<NewExternalIPAddress>198.51.100.20</NewExternalIPAddress>",
        now,
    );
    assert_eq!(mapper.mappings().count(), 2);
    // A renewal is out when the shutdown comes: it is abandoned, and no datagram goes (the
    // deletions are SOAP calls, one at a time).
    let renew_at = mapper.next_deadline().unwrap();
    assert_eq!(mapper.poll(renew_at), None);
    assert!(exchange(mapper.poll_upnp(renew_at)).contains("#AddPortMapping"));
    assert!(mapper.stop(renew_at).is_empty());
    assert_eq!(mapper.upnp_deletions_left(), 2);
    let delete = exchange(mapper.poll_upnp(renew_at));
    assert!(delete.contains("#DeletePortMapping"), "{delete}");
    assert!(
        delete.contains("<NewExternalPort>80</NewExternalPort>"),
        "{delete}"
    );
    assert_eq!(mapper.poll_upnp(renew_at), None, "one exchange at a time");
    // The network is not looked at again while it deletes.
    mapper.set_network(Some([192, 168, 1, 51]), Some(GATEWAY), renew_at);
    mapper.again(renew_at);
    mapper.upnp_answer(b"HTTP/1.1 200 OK\r\n\r\n<ok/>", renew_at);
    assert_eq!(mapper.upnp_deletions_left(), 1);
    let second = exchange(mapper.poll_upnp(renew_at));
    assert!(
        second.contains("<NewExternalPort>443</NewExternalPort>"),
        "{second}"
    );
    // Refused or failed, the last one ends the deletions all the same: quiet from then on.
    mapper.upnp_failed(renew_at);
    assert_eq!(mapper.upnp_deletions_left(), 0);
    assert_eq!(mapper.poll_upnp(renew_at), None);
    assert_eq!(mapper.poll(renew_at), None);
    assert_eq!(mapper.next_deadline(), None);
    assert_eq!(mapper.mappings().count(), 0);
}

#[test]
fn a_gateway_behind_another_nat_is_reported() {
    let mut mapper = mapper();
    let request = mapper.poll(at(0)).unwrap();
    let mut failure = pcp_answer(&request, pcp::RESULT_NETWORK_FAILURE, 1, 0);
    failure.truncate(24);
    mapper.receive(GATEWAY, &failure, at(0));
    assert_eq!(
        mapper.trouble(),
        Some(Trouble::NoPublicAddress(Protocol::Pcp))
    );
    let text = format!("{}", mapper.report(at(0)));
    assert!(text.contains("double NAT"), "{text}");
    assert_eq!(mapper.mappings().count(), 0);
}

#[test]
fn strangers_and_mismatches_are_ignored() {
    let mut mapper = mapper();
    let request = mapper.poll(at(0)).unwrap();
    let answer = pcp_answer(&request, 0, 1, 120);
    mapper.receive([192, 168, 1, 66], &answer, at(0));
    let mut wrong_nonce = answer.clone();
    wrong_nonce[30] ^= 1;
    mapper.receive(GATEWAY, &wrong_nonce, at(0));
    mapper.receive(GATEWAY, &answer[..40], at(0));
    mapper.receive(GATEWAY, &[], at(0));
    assert_eq!(mapper.counters().ignored, 4);
    assert_eq!(mapper.mappings().count(), 0);
    mapper.receive(GATEWAY, &answer, at(0));
    assert_eq!(mapper.mappings().count(), 1);
}

#[test]
fn a_new_address_starts_over() {
    let mut mapper = mapper();
    map_by_pcp(&mut mapper, at(0), 10);
    mapper.set_network(Some([192, 168, 1, 51]), Some(GATEWAY), at(5));
    assert_eq!(mapper.mappings().count(), 0);
    let request = mapper.poll(at(5)).unwrap();
    assert_eq!(&request[20..24], &[192, 168, 1, 51]);
    mapper.set_network(None, None, at(6));
    assert_eq!(mapper.poll(at(7)), None);
    assert_eq!(
        mapper.report(at(7)).to_string(),
        "waiting for an address and a gateway"
    );
}

#[test]
fn a_refusal_naming_a_shared_address_is_carrier_grade_nat() {
    // miniupnpd 2.3.1 on a 100.64.0.1 uplink answers MAP with NO_RESOURCES (8), a lifetime
    // of 30 s and its address (as captured from Debian's package).
    let mut mapper = mapper();
    let request = mapper.poll(at(0)).unwrap();
    let mut answer = pcp_answer(&request, pcp::RESULT_NO_RESOURCES, 2, 30);
    answer[44..60].copy_from_slice(&pcp::mapped([100, 64, 0, 1]));
    mapper.receive(GATEWAY, &answer, at(0));
    assert_eq!(
        mapper.trouble(),
        Some(Trouble::NoPublicAddress(Protocol::Pcp))
    );
    assert_eq!(mapper.external(), Some(([100, 64, 0, 1], Protocol::Pcp)));
    let text = mapper.report(at(0)).to_string();
    assert!(
        text.contains("outside address 100.64.0.1: carrier-grade NAT"),
        "{text}"
    );
    assert!(text.contains("no public address"), "{text}");
}
