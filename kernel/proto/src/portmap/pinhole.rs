//! IPv6 pinholes by PCP (RFC 6887 §11): a home router's IPv6 firewall drops what comes in
//! unasked; a PCP MAP request whose client address is the board's global IPv6 address asks
//! it to let TCP to that address and port through. Nothing is translated: the "external"
//! address and port the server answers are the board's own (a pinhole cannot move port 80 to
//! 8080, so the served ports are asked for as they are).
//!
//! The requests go to the IPv6 default router's port 5351 from the global address (the
//! server checks that the client address in the request is the packet's source, §8.1);
//! only PCP speaks IPv6 (NAT-PMP is IPv4-only, UPnP's WANIPv6FirewallControl is not done).
//! The same rhythm as [`super::PortMapper`]'s PCP: each port in turn, 4 sends 250 ms apart
//! and doubling, renewal at half the granted lifetime, again at once after an ANNOUNCE or an
//! epoch gone back (over IPv6, or the IPv4 gateway's: [`Pinholes::gateway_restarted`]),
//! and after silence or a refusal a wait of 30 s doubling up to 10 minutes
//! (most routers do not offer PCP over IPv6: 4 small datagrams per 10 minutes then).

use super::client::{Datagram, epoch_lost};
use super::{MAX_PORTS, pcp};
use bramble_hal::Instant;
use core::fmt;
use core::net::Ipv6Addr;

/// First wait for a reply; doubled for each of the [`ATTEMPTS`].
const FIRST_WAIT_MICROS: u64 = 250_000;
/// Requests sent for one port before PCP over IPv6 counts as silent.
const ATTEMPTS: u32 = 4;
/// First wait after a failure; doubled per failure in a row up to [`LONGEST_RETRY_MICROS`].
const FIRST_RETRY_MICROS: u64 = 30_000_000;
/// Longest wait between tries after failures.
const LONGEST_RETRY_MICROS: u64 = 600_000_000;
/// Shortest lifetime renewals are spaced by.
const SHORTEST_LIFETIME: u32 = 60;

/// A pinhole the router opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pinhole {
    /// The port let through to the board.
    pub port: u16,
    /// Seconds granted.
    pub lifetime: u32,
    /// When.
    pub granted_at: Instant,
}

impl Pinhole {
    /// Seconds left at `now`.
    pub fn remaining(&self, now: Instant) -> u64 {
        u64::from(self.lifetime).saturating_sub(now.micros_since(self.granted_at) / 1_000_000)
    }
}

/// Why no pinhole is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinholeTrouble {
    /// No PCP answer over IPv6 (or a NAT-PMP-only server's "unsupported version").
    NoAnswer,
    /// NOT_AUTHORIZED: the router does not let clients open its IPv6 firewall.
    NotAuthorized,
    /// NO_RESOURCES.
    NoResources,
    /// Another result code.
    Refused(u8),
}

impl fmt::Display for PinholeTrouble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinholeTrouble::NoAnswer => f.write_str(
                "the router does not answer PCP over IPv6: visitors reach the IPv6 address \
                 only if its firewall lets them (open the ports for this address by hand)",
            ),
            PinholeTrouble::NotAuthorized => {
                f.write_str("the router refuses PCP pinholes: allow them in its settings")
            }
            PinholeTrouble::NoResources => f.write_str("the router has no room for more pinholes"),
            PinholeTrouble::Refused(code) => {
                write!(f, "the router refused the pinhole (PCP result {code})")
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No global address or no IPv6 router.
    Idle,
    /// The request for port `step` out, sent `attempt` times, the next due at `due`.
    Asking {
        step: usize,
        attempt: u32,
        due: Instant,
    },
    /// Every port open; renew then.
    Holding { renew_at: Instant },
    /// After a failure; try again then.
    Waiting { until: Instant },
    /// Pinholes deleted (shutdown).
    Stopped,
}

/// Keeps the served ports open in the IPv6 router's firewall by PCP.
pub struct Pinholes {
    ports: heapless::Vec<u16, MAX_PORTS>,
    lifetime: u32,
    nonce: [u8; 12],
    client: Option<[u8; 16]>,
    server: Option<[u8; 16]>,
    phase: Phase,
    held: [Option<Pinhole>; MAX_PORTS],
    epoch: Option<(u32, Instant)>,
    trouble: Option<PinholeTrouble>,
    failures: u32,
    /// Requests sent, replies taken, datagrams ignored.
    counts: (u64, u64, u64),
}

impl Pinholes {
    /// A client for the served `ports` (the first [`MAX_PORTS`]), asking `lifetime` seconds
    /// for each; `nonce` keys the mapping nonces (random).
    pub fn new(ports: &[u16], lifetime: u32, nonce: [u8; 12]) -> Self {
        Self {
            ports: ports.iter().copied().take(MAX_PORTS).collect(),
            lifetime: lifetime.max(SHORTEST_LIFETIME),
            nonce,
            client: None,
            server: None,
            phase: Phase::Idle,
            held: [None; MAX_PORTS],
            epoch: None,
            trouble: None,
            failures: 0,
            counts: (0, 0, 0),
        }
    }

    /// Tells the client its global IPv6 address and the IPv6 default router (`None` while
    /// unknown). A change voids the pinholes and starts over (a new address needs its own).
    pub fn set_network(
        &mut self,
        client: Option<[u8; 16]>,
        server: Option<[u8; 16]>,
        now: Instant,
    ) {
        if (client, server) == (self.client, self.server) || self.phase == Phase::Stopped {
            return;
        }
        self.client = client;
        self.server = server;
        self.held = [None; MAX_PORTS];
        self.epoch = None;
        self.failures = 0;
        self.trouble = None;
        self.phase = if client.is_some() && server.is_some() && !self.ports.is_empty() {
            Self::ask(0, now)
        } else {
            Phase::Idle
        };
    }

    /// Asks again now (`router again`).
    pub fn again(&mut self, now: Instant) {
        if self.client.is_some() && self.server.is_some() && self.phase != Phase::Stopped {
            self.failures = 0;
            self.phase = Self::ask(0, now);
        }
    }

    fn ask(step: usize, now: Instant) -> Phase {
        Phase::Asking {
            step,
            attempt: 0,
            due: now,
        }
    }

    /// The server to send to and the address to send from, while both are known.
    pub fn route(&self) -> Option<([u8; 16], [u8; 16])> {
        Some((self.server?, self.client?))
    }

    fn nonce_for(&self, index: usize) -> [u8; 12] {
        let mut nonce = self.nonce;
        // Apart from the IPv4 mappings' nonces (which change only the last byte).
        nonce[10] ^= 0x66;
        nonce[11] ^= index as u8;
        nonce
    }

    /// The MAP request for port `index` (RFC 6887 §11.1): the client address and the
    /// suggested external address are the board's own, the suggested external port the
    /// served one.
    fn request(&self, index: usize, lifetime: u32) -> Datagram {
        let client = self.client.unwrap_or_default();
        let port = self.ports[index];
        let request = pcp::MapRequest {
            nonce: self.nonce_for(index),
            client,
            internal: port,
            external: port,
            external_address: client,
            lifetime,
        };
        // Cannot fail: a MAP request is pcp::MAP_LEN bytes.
        Datagram::from_slice(&request.encode()).unwrap_or_default()
    }

    /// What is due at `now`: a request for the server, if one is to go out.
    pub fn poll(&mut self, now: Instant) -> Option<Datagram> {
        // At most: a renewal or retry starts, then its first request goes.
        for _ in 0..2 {
            match self.phase {
                Phase::Idle | Phase::Stopped => return None,
                Phase::Holding { renew_at: at } | Phase::Waiting { until: at } => {
                    if now < at {
                        return None;
                    }
                    self.phase = Self::ask(0, now);
                }
                Phase::Asking { step, attempt, due } => {
                    if now < due {
                        return None;
                    }
                    if attempt >= ATTEMPTS {
                        self.fail(PinholeTrouble::NoAnswer, now);
                        return None;
                    }
                    self.phase = Phase::Asking {
                        step,
                        attempt: attempt + 1,
                        due: now.add_micros(FIRST_WAIT_MICROS << attempt),
                    };
                    self.counts.0 += 1;
                    return Some(self.request(step, self.lifetime));
                }
            }
        }
        None
    }

    fn fail(&mut self, trouble: PinholeTrouble, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        let wait = FIRST_RETRY_MICROS
            .saturating_mul(1 << (self.failures - 1).min(8))
            .min(LONGEST_RETRY_MICROS);
        if self.trouble != Some(trouble) {
            let server = Ipv6Addr::from(self.server.unwrap_or_default());
            log::info!(
                "router: no IPv6 pinholes on {server}: {trouble}; trying again in {} s",
                wait / 1_000_000
            );
        }
        self.trouble = Some(trouble);
        for slot in &mut self.held {
            if slot.is_some_and(|p| p.remaining(now) == 0) {
                *slot = None;
            }
        }
        self.phase = Phase::Waiting {
            until: now.add_micros(wait),
        };
    }

    /// The IPv4 gateway restarted or its outside address changed, as
    /// [`super::PortMapper`] saw (an announcement, an epoch gone back): asks again now. The
    /// IPv6 router is most often the same box, and its IPv6 ANNOUNCE may never come
    /// (miniupnpd 2.3 sends it to ff02::1 without naming the LAN interface, so it can leave
    /// by the WAN one); if it is another box, the cost is a request per port.
    pub fn gateway_restarted(&mut self, now: Instant) {
        self.reopen("the IPv4 gateway restarted", now);
    }

    fn reopen(&mut self, why: &str, now: Instant) {
        if self.phase == Phase::Stopped || self.client.is_none() || self.server.is_none() {
            return;
        }
        log::warn!("router: {why}; asking for the IPv6 pinholes again");
        self.held = [None; MAX_PORTS];
        self.failures = 0;
        self.phase = Self::ask(0, now);
    }

    /// Takes a datagram from `from` (only the IPv6 router's: replies and announcements).
    pub fn receive(&mut self, from: [u8; 16], bytes: &[u8], now: Instant) {
        let taken = Some(from) == self.server
            && self.phase != Phase::Stopped
            && pcp::parse(bytes).is_ok_and(|response| self.take(response, now));
        if taken {
            self.counts.1 += 1;
        } else {
            self.counts.2 += 1;
        }
    }

    fn take(&mut self, response: pcp::Response, now: Instant) -> bool {
        if response.opcode == pcp::OP_ANNOUNCE {
            let lost = epoch_lost(&mut self.epoch, response.epoch, now);
            if lost || self.held.iter().any(Option::is_some) {
                self.reopen(
                    "the router announced a restart over IPv6 (PCP ANNOUNCE)",
                    now,
                );
            }
            return true;
        }
        let Phase::Asking { step, .. } = self.phase else {
            return false;
        };
        if response.opcode != pcp::OP_MAP {
            return false;
        }
        if let Some(map) = response.map
            && (map.nonce != self.nonce_for(step)
                || map.internal != self.ports[step]
                || map.protocol != pcp::PROTOCOL_TCP)
        {
            return false;
        }
        let trouble = match response.result {
            pcp::RESULT_SUCCESS => None,
            pcp::RESULT_UNSUPP_VERSION => Some(PinholeTrouble::NoAnswer),
            pcp::RESULT_NOT_AUTHORIZED => Some(PinholeTrouble::NotAuthorized),
            pcp::RESULT_NO_RESOURCES => Some(PinholeTrouble::NoResources),
            code => Some(PinholeTrouble::Refused(code)),
        };
        if let Some(trouble) = trouble {
            self.held = [None; MAX_PORTS];
            self.fail(trouble, now);
            return true;
        }
        let Some(map) = response.map else {
            return false;
        };
        if epoch_lost(&mut self.epoch, response.epoch, now) {
            let why = "the router restarted (its PCP epoch went back)";
            if step > 0 {
                // Since this round's first pinhole: that one is gone too.
                self.reopen(why, now);
                return true;
            }
            if self.held.iter().any(Option::is_some) {
                // The first reply of a renewal, the restart's announcement lost: the round
                // under way opens every pinhole again; the restart is said all the same.
                log::warn!("router: {why}; asking for the IPv6 pinholes again");
                self.held = [None; MAX_PORTS];
            }
        }
        let port = self.ports[step];
        let renewed = self.held[step].is_some();
        self.held[step] = Some(Pinhole {
            port,
            lifetime: response.lifetime,
            granted_at: now,
        });
        if !renewed {
            let address = Ipv6Addr::from(map.external_address);
            log::info!(
                "router: PCP: IPv6 pinhole to [{address}]:{} for {} s",
                map.external,
                response.lifetime
            );
        }
        if step + 1 < self.ports.len() {
            self.phase = Self::ask(step + 1, now);
        } else {
            self.trouble = None;
            self.failures = 0;
            let shortest = self
                .held
                .iter()
                .flatten()
                .map(|p| p.lifetime)
                .min()
                .unwrap_or(self.lifetime)
                .max(SHORTEST_LIFETIME);
            self.phase = Phase::Holding {
                renew_at: now.add_micros(u64::from(shortest) * 1_000_000 / 2),
            };
        }
        true
    }

    /// When [`Pinholes::poll`] next has work.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Idle | Phase::Stopped => None,
            Phase::Asking { due, .. } => Some(due),
            Phase::Holding { renew_at } => Some(renew_at),
            Phase::Waiting { until } => Some(until),
        }
    }

    /// Deletes the pinholes held (a clean shutdown): one request each (lifetime 0), after
    /// which the client stays quiet.
    pub fn stop(&mut self) -> heapless::Vec<Datagram, MAX_PORTS> {
        let mut out = heapless::Vec::new();
        for index in 0..self.ports.len() {
            if self.held[index].is_some() {
                let _ = out.push(self.request(index, 0));
            }
        }
        self.held = [None; MAX_PORTS];
        self.phase = Phase::Stopped;
        out
    }

    /// The pinholes open.
    pub fn held(&self) -> impl Iterator<Item = &Pinhole> {
        self.held.iter().flatten()
    }

    /// What went wrong last, until a round succeeds.
    pub fn trouble(&self) -> Option<PinholeTrouble> {
        self.trouble
    }

    /// Requests sent, replies taken, datagrams ignored.
    pub fn counts(&self) -> (u64, u64, u64) {
        self.counts
    }

    /// For the `router` status line: `IPv6 pinholes [ADDR]:80,443, 3550 s left`, what is
    /// wrong, or nothing while there is no global address or IPv6 router.
    pub fn report(&self, now: Instant) -> PinholeReport<'_> {
        PinholeReport {
            pinholes: self,
            now,
        }
    }
}

/// [`Pinholes::report`].
pub struct PinholeReport<'p> {
    pinholes: &'p Pinholes,
    now: Instant,
}

impl fmt::Display for PinholeReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.pinholes;
        let Some(client) = p.client.filter(|_| p.server.is_some()) else {
            return Ok(());
        };
        if p.phase == Phase::Stopped {
            return f.write_str("; IPv6 pinholes deleted");
        }
        let mut first = true;
        let mut shortest = None::<u64>;
        for pinhole in p.held() {
            if first {
                write!(f, "; IPv6 pinholes [{}]:", Ipv6Addr::from(client))?;
            } else {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}", pinhole.port)?;
            let left = pinhole.remaining(self.now);
            shortest = Some(shortest.map_or(left, |s| s.min(left)));
        }
        if let Some(left) = shortest {
            write!(f, ", {left} s left")?;
        }
        match (p.trouble, p.phase) {
            (Some(trouble), _) => write!(f, "; IPv6 pinholes: {trouble}"),
            (None, Phase::Asking { .. }) if first => f.write_str("; IPv6 pinholes: asking by PCP"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    const ROUTER: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const CLIENT: [u8; 16] = [
        0x20, 0x01, 0x0d, 0xb8, 0, 0x77, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x50,
    ];

    fn at(tenths: u64) -> Instant {
        Instant::from_micros(tenths * 100_000)
    }

    /// A PCP server's answer to `request`, echoing its MAP data as a firewall does.
    fn answer(request: &[u8], result: u8, epoch: u32, lifetime: u32) -> std::vec::Vec<u8> {
        let mut out = request.to_vec();
        out[1] |= 0x80;
        out[3] = result;
        out[4..8].copy_from_slice(&lifetime.to_be_bytes());
        out[8..12].copy_from_slice(&epoch.to_be_bytes());
        out[12..24].fill(0);
        out
    }

    fn open_both(pinholes: &mut Pinholes, now: Instant, epoch: u32) {
        for _ in 0..2 {
            let request = pinholes.poll(now).expect("a MAP request");
            pinholes.receive(ROUTER, &answer(&request, 0, epoch, 120), now);
        }
    }

    #[test]
    fn the_request_names_the_global_address_and_the_served_port() {
        let mut pinholes = Pinholes::new(&[80, 443], 7200, [5; 12]);
        assert_eq!(pinholes.poll(at(0)), None, "idle without an address");
        pinholes.set_network(Some(CLIENT), Some(ROUTER), at(0));
        assert_eq!(pinholes.route(), Some((ROUTER, CLIENT)));
        let request = pinholes.poll(at(0)).unwrap();
        assert_eq!(request.len(), 60);
        assert_eq!(&request[..4], &[2, 1, 0, 0]);
        assert_eq!(&request[4..8], &7200u32.to_be_bytes());
        assert_eq!(&request[8..24], &CLIENT, "client address: the global one");
        assert_eq!(request[36], 6, "TCP");
        assert_eq!(
            &request[40..44],
            &[0, 80, 0, 80],
            "internal and suggested port"
        );
        assert_eq!(
            &request[44..60],
            &CLIENT,
            "suggested external address: the same"
        );
        assert_ne!(&request[24..36], &[5; 12], "a nonce apart from IPv4's");
    }

    #[test]
    fn both_ports_open_renew_at_half_and_reopen_after_an_announce() {
        let mut pinholes = Pinholes::new(&[80, 443], 120, [5; 12]);
        pinholes.set_network(Some(CLIENT), Some(ROUTER), at(0));
        open_both(&mut pinholes, at(0), 500);
        assert_eq!(pinholes.held().count(), 2);
        assert_eq!(pinholes.next_deadline(), Some(at(600)));
        assert_eq!(
            pinholes.report(at(100)).to_string(),
            "; IPv6 pinholes [2001:db8:77:1::50]:80,443, 110 s left"
        );
        // Renewal: the same requests again at half the lifetime.
        assert_eq!(pinholes.poll(at(599)), None);
        open_both(&mut pinholes, at(600), 560);
        assert_eq!(pinholes.held().count(), 2);
        assert_eq!(pinholes.next_deadline(), Some(at(1200)));
        // A restarted router's ANNOUNCE (epoch back to 0) has both asked for at once.
        let mut announce = [0u8; 24];
        announce[0] = 2;
        announce[1] = 0x80;
        pinholes.receive(ROUTER, &announce, at(700));
        assert_eq!(pinholes.held().count(), 0);
        open_both(&mut pinholes, at(700), 1);
        assert_eq!(pinholes.held().count(), 2);
        // The IPv4 gateway's restart has both asked for again too.
        pinholes.gateway_restarted(at(800));
        assert_eq!(pinholes.held().count(), 0);
        assert_eq!(pinholes.next_deadline(), Some(at(800)));
        open_both(&mut pinholes, at(800), 2);
        assert_eq!(pinholes.held().count(), 2);
        // Shutdown: a deletion (lifetime 0) per pinhole, then quiet.
        let deletions = pinholes.stop();
        assert_eq!(deletions.len(), 2);
        assert!(deletions.iter().all(|d| d[4..8] == [0; 4]));
        assert_eq!(pinholes.poll(at(5000)), None);
        pinholes.gateway_restarted(at(5000));
        assert_eq!(pinholes.poll(at(5000)), None, "quiet once stopped");
    }

    #[test]
    fn silence_strangers_and_refusals_are_told_apart() {
        let mut pinholes = Pinholes::new(&[80], 120, [5; 12]);
        pinholes.set_network(Some(CLIENT), Some(ROUTER), at(0));
        let request = pinholes.poll(at(0)).unwrap();
        // Another host's answer, and one for another nonce, are not taken.
        pinholes.receive(CLIENT, &answer(&request, 0, 1, 120), at(1));
        let mut wrong = answer(&request, 0, 1, 120);
        wrong[30] ^= 1;
        pinholes.receive(ROUTER, &wrong, at(1));
        assert_eq!(pinholes.held().count(), 0);
        assert_eq!(pinholes.counts(), (1, 0, 2));
        // Silence: 4 sends 250 ms apart and doubling, then a wait of 30 s.
        let mut now = 0;
        let mut sent = 1;
        while pinholes.trouble().is_none() {
            now += 1;
            assert!(now < 100, "no end to the retries");
            sent += usize::from(pinholes.poll(at(now)).is_some());
        }
        assert_eq!(sent, 4);
        assert_eq!(pinholes.trouble(), Some(PinholeTrouble::NoAnswer));
        assert_eq!(pinholes.next_deadline(), Some(at(now + 300)));
        assert!(
            pinholes
                .report(at(now))
                .to_string()
                .contains("does not answer PCP over IPv6")
        );
        // The next round: NOT_AUTHORIZED says the router keeps its firewall closed.
        let request = pinholes.poll(at(now + 300)).unwrap();
        pinholes.receive(ROUTER, &answer(&request, 2, 1, 0), at(now + 301));
        assert_eq!(pinholes.trouble(), Some(PinholeTrouble::NotAuthorized));
        assert_eq!(pinholes.next_deadline(), Some(at(now + 301 + 600)));
    }
}
