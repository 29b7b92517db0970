//! The port-mapping client: one request out at a time, to the gateway's port 5351.

use super::{natpmp, pcp, upnp};
use crate::address_kind::AddressKind;
use bramble_hal::Instant;
use core::fmt;
use core::net::Ipv4Addr;

/// Ports mapped at most (HTTP and HTTPS).
pub const MAX_PORTS: usize = 2;
/// First wait for a reply; doubled for each of the [`ATTEMPTS`].
const FIRST_WAIT_MICROS: u64 = 250_000;
/// Requests sent for one step before the protocol counts as silent.
const ATTEMPTS: u32 = 4;
/// First wait after a failure; doubled per failure in a row up to [`LONGEST_RETRY_MICROS`].
const FIRST_RETRY_MICROS: u64 = 30_000_000;
/// Longest wait between tries after failures.
const LONGEST_RETRY_MICROS: u64 = 600_000_000;
/// Shortest lifetime renewals are spaced by (a gateway granting less is renewed every
/// 30 s, not in a loop).
const SHORTEST_LIFETIME: u32 = 60;

/// Which protocol the gateway answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// RFC 6887.
    Pcp,
    /// RFC 6886.
    NatPmp,
    /// UPnP IGD (WANIPConnection or WANPPPConnection), the fallback.
    Upnp,
}

impl Protocol {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Pcp => "PCP",
            Protocol::NatPmp => "NAT-PMP",
            Protocol::Upnp => "UPnP IGD",
        }
    }
}

/// One port to forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRequest {
    /// The port served here.
    pub internal: u16,
    /// The port wished for outside.
    pub external: u16,
}

/// A mapping the gateway granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The port served here.
    pub internal: u16,
    /// The port outside (the gateway may pick another than the one asked for).
    pub external: u16,
    /// Seconds granted.
    pub lifetime: u32,
    /// When.
    pub granted_at: Instant,
}

impl Mapping {
    /// Seconds left at `now`.
    pub fn remaining(&self, now: Instant) -> u64 {
        u64::from(self.lifetime).saturating_sub(now.micros_since(self.granted_at) / 1_000_000)
    }
}

/// Why the ports are not mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trouble {
    /// Neither PCP, NAT-PMP nor UPnP IGD answered.
    NoAnswer,
    /// A UPnP IGD answered the search, but its description or control requests failed.
    IgdBroken,
    /// The gateway refused: port mapping is turned off in its settings.
    NotAuthorized(Protocol),
    /// The gateway has no external address to map on: it sits behind another NAT (double
    /// NAT or the provider's carrier-grade NAT), or its uplink is down.
    NoPublicAddress(Protocol),
    /// The gateway has no room for another mapping.
    NoResources(Protocol),
    /// Another refusal, with its result code.
    Refused(Protocol, u16),
}

impl Trouble {
    /// A few words, for the status page.
    pub fn short(self) -> &'static str {
        match self {
            Trouble::NoAnswer => "no PCP, NAT-PMP or UPnP answer",
            Trouble::IgdBroken => "the router's UPnP IGD fails",
            Trouble::NotAuthorized(_) => "refused: mapping is off in the router",
            Trouble::NoPublicAddress(_) => "no public address: double NAT or carrier-grade NAT",
            Trouble::NoResources(_) => "the router is out of room",
            Trouble::Refused(..) => "refused by the router",
        }
    }
}

impl fmt::Display for Trouble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trouble::NoAnswer => f.write_str(
                "the router answers neither PCP, NAT-PMP nor UPnP IGD: turn one of them on \
                 in the router, or forward the ports by hand",
            ),
            Trouble::IgdBroken => f.write_str(
                "the router's UPnP IGD answered the search but not its description or \
                 mapping requests (or offers no WANIPConnection service)",
            ),
            Trouble::NotAuthorized(p) => write!(
                f,
                "the router refuses {} mappings: port mapping is off in its settings",
                p.name()
            ),
            Trouble::NoPublicAddress(p) => write!(
                f,
                "the router has no public address ({} refused): it sits behind another \
                 NAT (double NAT or carrier-grade NAT) or its uplink is down",
                p.name()
            ),
            Trouble::NoResources(p) => {
                write!(f, "the router has no room for more {} mappings", p.name())
            }
            Trouble::Refused(p, code) => {
                write!(
                    f,
                    "the router refused the mapping ({} result {code})",
                    p.name()
                )
            }
        }
    }
}

/// What the client has done, for the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapperCounters {
    /// Requests sent (retries included).
    pub requests: u64,
    /// Replies taken.
    pub replies: u64,
    /// Datagrams ignored: not from the gateway, malformed, or not matching the request out.
    pub ignored: u64,
    /// Times the gateway was seen to have lost its mappings (a restart: announced, or its
    /// epoch gone back in a reply, the renewal's included).
    pub gateway_restarts: u32,
    /// Rounds completed by another protocol than the round before (PCP, then NAT-PMP: the
    /// router's settings changed, or PCP fell silent).
    pub protocol_changes: u32,
    /// Rounds of mapping completed (the first and each renewal).
    pub rounds: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No address or no gateway.
    Idle,
    /// A request out: `step` of the round (PCP: one per port; NAT-PMP: the address, then
    /// one per port), sent `attempt` times, the next due at `due`.
    Asking {
        protocol: Protocol,
        step: usize,
        attempt: u32,
        due: Instant,
    },
    /// Every port mapped; renew then.
    Holding { renew_at: Instant },
    /// After a failure; try again then.
    Waiting { until: Instant },
    /// Mappings deleted (shutdown).
    Stopped,
    /// UPnP IGD: `step` due at `due` (or under way, while an exchange is out).
    Upnp { step: UpnpStep, due: Instant },
}

/// Where a UPnP IGD round stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UpnpStep {
    /// SSDP search sent `attempt` times.
    Search { attempt: u32 },
    /// The device description to fetch.
    Describe,
    /// AddPortMapping for port `index`.
    Map { index: usize },
    /// GetExternalIPAddress.
    External,
    /// DeletePortMapping for port `index` (a clean shutdown), then the next marked in
    /// `PortMapper::upnp_delete`.
    Delete { index: usize },
}

/// What the UPnP IGD fallback wants done (see [`PortMapper::poll_upnp`]).
// Returned by value once per poll and sent at once: boxing the request would only add a
// heap allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpnpAction {
    /// Send [`upnp::search_request`] to 239.255.255.250:1900 from the client's socket (the
    /// answers come back to it, and go to [`PortMapper::receive`]).
    Search,
    /// Open a TCP connection to `to`, send `request`, read the answer until the server
    /// closes, and give it to [`PortMapper::upnp_answer`] ([`PortMapper::upnp_failed`] when
    /// it cannot).
    Exchange {
        /// Address and port.
        to: ([u8; 4], u16),
        /// The HTTP request.
        request: heapless::Vec<u8, { upnp::REQUEST_LEN }>,
    },
}

/// Searches sent before UPnP IGD counts as absent.
const UPNP_SEARCHES: u32 = 2;
/// Wait for SSDP answers (MX is 2 s).
const UPNP_SEARCH_WAIT_MICROS: u64 = 2_500_000;

/// A datagram for the gateway's port [`natpmp::SERVER_PORT`].
pub type Datagram = heapless::Vec<u8, { pcp::MAP_LEN }>;

/// Keeps [`PortRequest`]s mapped on the gateway (see the module's documentation).
pub struct PortMapper {
    requests: heapless::Vec<PortRequest, MAX_PORTS>,
    lifetime: u32,
    nonce: [u8; 12],
    gateway: Option<[u8; 4]>,
    client: Option<[u8; 4]>,
    phase: Phase,
    /// The protocol that last answered.
    protocol: Option<Protocol>,
    /// The protocol of the last round completed (on this gateway): a round by another is a
    /// change of protocol, and its mappings are new ones.
    mapped_by: Option<Protocol>,
    mappings: [Option<Mapping>; MAX_PORTS],
    external: Option<[u8; 4]>,
    /// The gateway's last epoch and when it was seen.
    epoch: Option<(u32, Instant)>,
    trouble: Option<Trouble>,
    failures: u32,
    counters: MapperCounters,
    /// UPnP IGD: the description's URL (from SSDP), the control URL and service type, whether
    /// the IGD takes only permanent mappings, and whether an exchange is out.
    igd_location: Option<upnp::HttpUrl>,
    igd_control: Option<(upnp::HttpUrl, &'static str)>,
    igd_permanent: bool,
    igd_waiting: bool,
    /// The UPnP mappings a clean shutdown still has to delete, by port index.
    upnp_delete: [bool; MAX_PORTS],
}

/// Notes a server's `epoch` in `seen` (the last one and when); true when it shows the server
/// lost its state since (RFC 6887 §8.5: it went back by more than the time passed allows).
pub(super) fn epoch_lost(seen: &mut Option<(u32, Instant)>, epoch: u32, now: Instant) -> bool {
    let lost = seen.is_some_and(|(old, at)| {
        let elapsed = now.micros_since(at) / 1_000_000;
        u64::from(epoch) + 2 < u64::from(old) + elapsed * 7 / 8
            || u64::from(epoch) + 1 < u64::from(old)
    });
    *seen = Some((epoch, now));
    lost
}

fn datagram(bytes: &[u8]) -> Datagram {
    // Cannot fail: every request is at most pcp::MAP_LEN bytes.
    Datagram::from_slice(bytes).unwrap_or_default()
}

impl PortMapper {
    /// A client for `requests` (the first [`MAX_PORTS`]), asking `lifetime` seconds for each;
    /// `nonce` keys PCP's mapping nonces (random: an off-path host must not guess them).
    pub fn new(requests: &[PortRequest], lifetime: u32, nonce: [u8; 12]) -> Self {
        Self {
            requests: requests.iter().copied().take(MAX_PORTS).collect(),
            lifetime: lifetime.max(SHORTEST_LIFETIME),
            nonce,
            gateway: None,
            client: None,
            phase: Phase::Idle,
            protocol: None,
            mapped_by: None,
            mappings: [None; MAX_PORTS],
            external: None,
            epoch: None,
            trouble: None,
            failures: 0,
            counters: MapperCounters::default(),
            igd_location: None,
            igd_control: None,
            igd_permanent: false,
            igd_waiting: false,
            upnp_delete: [false; MAX_PORTS],
        }
    }

    /// Tells the client its own address and the gateway's (`None` while unknown). A change
    /// voids the mappings and starts over.
    pub fn set_network(&mut self, client: Option<[u8; 4]>, gateway: Option<[u8; 4]>, now: Instant) {
        if (client, gateway) == (self.client, self.gateway) || self.stopped() {
            return;
        }
        self.client = client;
        self.gateway = gateway;
        self.mappings = [None; MAX_PORTS];
        self.mapped_by = None;
        self.epoch = None;
        self.failures = 0;
        self.igd_location = None;
        self.igd_control = None;
        self.igd_waiting = false;
        self.phase = if client.is_some() && gateway.is_some() {
            self.start(Protocol::Pcp, now)
        } else {
            Phase::Idle
        };
    }

    /// Asks again now (the owner changed the router's settings): a new round from PCP.
    pub fn again(&mut self, now: Instant) {
        if self.client.is_some() && self.gateway.is_some() && !self.stopped() {
            self.failures = 0;
            self.phase = self.start(Protocol::Pcp, now);
        }
    }

    fn start(&self, protocol: Protocol, now: Instant) -> Phase {
        if protocol == Protocol::Upnp {
            let step = match self.igd_control {
                Some(_) => UpnpStep::Map { index: 0 },
                None => UpnpStep::Search { attempt: 0 },
            };
            return Phase::Upnp { step, due: now };
        }
        Phase::Asking {
            protocol,
            step: 0,
            attempt: 0,
            due: now,
        }
    }

    fn steps(&self, protocol: Protocol) -> usize {
        match protocol {
            Protocol::Pcp => self.requests.len(),
            Protocol::NatPmp | Protocol::Upnp => self.requests.len() + 1,
        }
    }

    /// The nonce of port `index`'s PCP mapping: the same for its renewals and deletion.
    fn nonce_for(&self, index: usize) -> [u8; 12] {
        let mut nonce = self.nonce;
        nonce[11] ^= index as u8;
        nonce
    }

    fn pcp_request(&self, index: usize, lifetime: u32) -> Datagram {
        let request = self.requests[index];
        // Renewals and deletions name the external port and address already held.
        let held = self.mappings[index];
        let request = pcp::MapRequest {
            nonce: self.nonce_for(index),
            client: pcp::mapped(self.client.unwrap_or_default()),
            internal: request.internal,
            external: held.map_or(request.external, |m| m.external),
            external_address: pcp::mapped(match (held, self.external) {
                (Some(_), Some(address)) => address,
                _ => [0; 4],
            }),
            lifetime,
        };
        datagram(&request.encode())
    }

    fn request(&self, protocol: Protocol, step: usize) -> Datagram {
        match protocol {
            Protocol::Upnp => Datagram::new(),
            Protocol::Pcp => self.pcp_request(step, self.lifetime),
            Protocol::NatPmp if step == 0 => datagram(&natpmp::address_request()),
            Protocol::NatPmp => {
                let index = step - 1;
                let request = self.requests[index];
                let external = self.mappings[index].map_or(request.external, |m| m.external);
                datagram(&natpmp::map_request(
                    request.internal,
                    external,
                    self.lifetime,
                ))
            }
        }
    }

    /// The gateway to send to, while there is one.
    pub fn gateway(&self) -> Option<[u8; 4]> {
        self.gateway
    }

    /// What is due at `now`: a request for the gateway, if one is to go out.
    pub fn poll(&mut self, now: Instant) -> Option<Datagram> {
        // At most: a renewal starts, PCP falls silent, NAT-PMP's first request goes.
        for _ in 0..3 {
            match self.phase {
                Phase::Idle | Phase::Stopped | Phase::Upnp { .. } => return None,
                Phase::Holding { renew_at } | Phase::Waiting { until: renew_at } => {
                    if now < renew_at {
                        return None;
                    }
                    let protocol = match self.phase {
                        Phase::Holding { .. } => self.protocol.unwrap_or(Protocol::Pcp),
                        _ => Protocol::Pcp,
                    };
                    self.phase = self.start(protocol, now);
                }
                Phase::Asking {
                    protocol,
                    step,
                    attempt,
                    due,
                } => {
                    if now < due {
                        return None;
                    }
                    if attempt < ATTEMPTS {
                        self.phase = Phase::Asking {
                            protocol,
                            step,
                            attempt: attempt + 1,
                            due: now.add_micros(FIRST_WAIT_MICROS << attempt),
                        };
                        self.counters.requests += 1;
                        return Some(self.request(protocol, step));
                    }
                    match protocol {
                        Protocol::Pcp => {
                            log::info!("router: no PCP answer; trying NAT-PMP");
                            self.phase = self.start(Protocol::NatPmp, now);
                        }
                        Protocol::NatPmp | Protocol::Upnp => {
                            log::info!("router: no NAT-PMP answer; searching for a UPnP IGD");
                            self.phase = self.start(Protocol::Upnp, now);
                            return None;
                        }
                    }
                }
            }
        }
        None
    }

    /// The gateway answered, and refused: it holds none of our mappings now.
    fn refused(&mut self, trouble: Trouble, now: Instant) {
        self.mappings = [None; MAX_PORTS];
        self.fail(trouble, now);
    }

    fn fail(&mut self, trouble: Trouble, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        let wait = FIRST_RETRY_MICROS
            .saturating_mul(1 << (self.failures - 1).min(8))
            .min(LONGEST_RETRY_MICROS);
        if self.trouble != Some(trouble) {
            let gateway = Ipv4Addr::from(self.gateway.unwrap_or_default());
            log::warn!(
                "router: ports not mapped on {gateway}: {trouble}; trying again in {} s",
                wait / 1_000_000
            );
        }
        self.trouble = Some(trouble);
        // The mappings held run out unrenewed.
        for slot in &mut self.mappings {
            if slot.is_some_and(|m| m.remaining(now) == 0) {
                *slot = None;
            }
        }
        self.phase = Phase::Waiting {
            until: now.add_micros(wait),
        };
    }

    /// Notes the gateway's `epoch`; true when it shows the gateway lost its state since the
    /// last one (RFC 6887 §8.5: it went back by more than the time passed allows).
    fn epoch_went_back(&mut self, epoch: u32, now: Instant) -> bool {
        epoch_lost(&mut self.epoch, epoch, now)
    }

    /// The gateway lost its mappings (restart, or an announcement says its address
    /// changed): map everything again now.
    fn remap(&mut self, why: &str, now: Instant) {
        if self.phase == Phase::Stopped || self.client.is_none() {
            return;
        }
        self.lost_mappings(why);
        self.failures = 0;
        self.phase = self.start(self.protocol.unwrap_or(Protocol::Pcp), now);
    }

    /// The gateway lost the mappings held: counted, said, and forgotten (each one made
    /// again is logged as new).
    fn lost_mappings(&mut self, why: &str) {
        self.counters.gateway_restarts += 1;
        log::warn!("router: {why}; mapping the ports again");
        self.mappings = [None; MAX_PORTS];
    }

    /// The first reply of a round (a renewal, a retry) shows the gateway restarted since
    /// the last round, its announcement lost: the round under way makes every mapping
    /// again, so it goes on, but the restart is counted and said as an announced one is.
    fn restarted_unannounced(&mut self, why: &str) {
        if self.mappings.iter().any(Option::is_some) {
            self.lost_mappings(why);
        }
    }

    /// Takes a datagram from `from` (only the gateway's are read: unicast replies, and the
    /// announcements it multicasts).
    pub fn receive(&mut self, from: [u8; 4], bytes: &[u8], now: Instant) {
        if Some(from) != self.gateway || self.phase == Phase::Stopped {
            self.counters.ignored += 1;
            return;
        }
        if let Phase::Upnp {
            step: UpnpStep::Search { .. },
            ..
        } = self.phase
            && let Some(location) = upnp::parse_search_answer(bytes)
        {
            self.igd_location = Some(location);
            self.igd_control = None;
            self.phase = Phase::Upnp {
                step: UpnpStep::Describe,
                due: now,
            };
            self.counters.replies += 1;
            return;
        }
        let taken = match bytes.first() {
            Some(&pcp::VERSION) => pcp::parse(bytes).map(|r| self.take_pcp(r, now)),
            Some(&natpmp::VERSION) => natpmp::parse(bytes).map(|r| self.take_natpmp(r, now)),
            _ => Ok(false),
        };
        if taken == Ok(true) {
            self.counters.replies += 1;
        } else {
            self.counters.ignored += 1;
        }
    }

    /// The step out now, if a request of `protocol` is.
    fn asking(&self, protocol: Protocol) -> Option<usize> {
        match self.phase {
            Phase::Asking {
                protocol: p, step, ..
            } if p == protocol => Some(step),
            _ => None,
        }
    }

    fn take_pcp(&mut self, response: pcp::Response, now: Instant) -> bool {
        if response.opcode == pcp::OP_ANNOUNCE {
            let lost = self.epoch_went_back(response.epoch, now);
            if lost || self.mappings.iter().any(Option::is_some) {
                self.remap("the router announced a restart (PCP ANNOUNCE)", now);
            }
            return true;
        }
        let Some(step) = self.asking(Protocol::Pcp) else {
            return false;
        };
        if response.opcode != pcp::OP_MAP {
            return false;
        }
        // An error answer may come without the MAP data (then it is taken as the answer to
        // the request out); with it, it must be that request's.
        if let Some(map) = response.map
            && (map.nonce != self.nonce_for(step)
                || map.internal != self.requests[step].internal
                || map.protocol != pcp::PROTOCOL_TCP)
        {
            return false;
        }
        let trouble = match response.result {
            pcp::RESULT_SUCCESS => None,
            pcp::RESULT_UNSUPP_VERSION => {
                log::info!("router: the router does not speak PCP; trying NAT-PMP");
                self.phase = self.start(Protocol::NatPmp, now);
                return true;
            }
            pcp::RESULT_NOT_AUTHORIZED => Some(Trouble::NotAuthorized(Protocol::Pcp)),
            pcp::RESULT_NETWORK_FAILURE => Some(Trouble::NoPublicAddress(Protocol::Pcp)),
            pcp::RESULT_NO_RESOURCES => Some(Trouble::NoResources(Protocol::Pcp)),
            code => Some(Trouble::Refused(Protocol::Pcp, u16::from(code))),
        };
        if let Some(mut trouble) = trouble {
            // A refusal may still name the external address the server has: a private or
            // shared one (miniupnpd answers NO_RESOURCES so) says why it cannot map.
            if let Some(address) = response
                .map
                .and_then(|map| pcp::unmapped(map.external_address))
                .filter(|address| *address != [0; 4])
            {
                self.external = Some(address);
                if AddressKind::of(address) != AddressKind::Public {
                    trouble = Trouble::NoPublicAddress(Protocol::Pcp);
                }
            }
            self.protocol = Some(Protocol::Pcp);
            self.refused(trouble, now);
            return true;
        }
        let Some(map) = response.map else {
            return false;
        };
        if self.epoch_went_back(response.epoch, now) {
            let why = "the router restarted (its PCP epoch went back)";
            if step > 0 {
                // Since this round's first mapping: that one is gone too.
                self.remap(why, now);
                return true;
            }
            self.restarted_unannounced(why);
        }
        if let Some(address) = pcp::unmapped(map.external_address) {
            self.external = Some(address);
        }
        self.granted(Protocol::Pcp, step, map.external, response.lifetime, now);
        true
    }

    fn take_natpmp(&mut self, reply: natpmp::Reply, now: Instant) -> bool {
        let step = self.asking(Protocol::NatPmp);
        match reply {
            natpmp::Reply::Error { result, .. } => {
                if result == natpmp::RESULT_UNSUPPORTED_VERSION
                    && self.asking(Protocol::Pcp).is_some()
                {
                    // A NAT-PMP-only gateway's answer to PCP (RFC 6887 §9).
                    log::info!("router: the router speaks NAT-PMP, not PCP");
                    self.phase = self.start(Protocol::NatPmp, now);
                    return true;
                }
                if step.is_none() {
                    return false;
                }
                let p = Protocol::NatPmp;
                let trouble = match result {
                    natpmp::RESULT_NOT_AUTHORIZED => Trouble::NotAuthorized(p),
                    natpmp::RESULT_NETWORK_FAILURE => Trouble::NoPublicAddress(p),
                    natpmp::RESULT_OUT_OF_RESOURCES => Trouble::NoResources(p),
                    code => Trouble::Refused(p, code),
                };
                self.protocol = Some(p);
                self.refused(trouble, now);
                true
            }
            natpmp::Reply::Address { epoch, address } => {
                let lost = self.epoch_went_back(epoch, now);
                self.external = Some(address);
                if step == Some(0) {
                    if lost {
                        self.restarted_unannounced(
                            "the router restarted (its NAT-PMP epoch went back)",
                        );
                    }
                    self.next_step(Protocol::NatPmp, 0, now);
                } else if lost || self.mappings.iter().any(Option::is_some) {
                    // Unsolicited: the gateway restarted or its address changed.
                    self.remap("the router announced its address (NAT-PMP)", now);
                }
                true
            }
            natpmp::Reply::Map {
                epoch,
                internal,
                external,
                lifetime,
            } => {
                let Some(step) = step.filter(|&s| s > 0) else {
                    return false;
                };
                if internal != self.requests[step - 1].internal {
                    return false;
                }
                if self.epoch_went_back(epoch, now) {
                    self.remap("the router restarted (its NAT-PMP epoch went back)", now);
                    return true;
                }
                self.granted(Protocol::NatPmp, step, external, lifetime, now);
                true
            }
        }
    }

    /// Port `step`'s mapping (NAT-PMP: `step - 1`'s) granted: recorded, and the next step.
    fn granted(
        &mut self,
        protocol: Protocol,
        step: usize,
        external: u16,
        lifetime: u32,
        now: Instant,
    ) {
        let index = match protocol {
            Protocol::Pcp | Protocol::Upnp => step,
            Protocol::NatPmp => step - 1,
        };
        let request = self.requests[index];
        let renewed = self.mapped_by == Some(protocol)
            && self.mappings[index].is_some_and(|m| m.external == external);
        self.mappings[index] = Some(Mapping {
            internal: request.internal,
            external,
            lifetime,
            granted_at: now,
        });
        if !renewed {
            let address = Ipv4Addr::from(self.external.unwrap_or_default());
            log::info!(
                "router: {}: TCP {address}:{external} -> port {} for {lifetime} s",
                protocol.name(),
                request.internal
            );
            if external != request.external {
                log::warn!(
                    "router: port {} outside was taken; the router gave {external}",
                    request.external
                );
            }
        }
        self.next_step(protocol, step, now);
    }

    fn next_step(&mut self, protocol: Protocol, step: usize, now: Instant) {
        if step + 1 < self.steps(protocol) {
            self.phase = Phase::Asking {
                protocol,
                step: step + 1,
                attempt: 0,
                due: now,
            };
            return;
        }
        self.finish_round(protocol, now);
    }

    /// Every port mapped by `protocol`: renew at half the shortest lifetime granted.
    fn finish_round(&mut self, protocol: Protocol, now: Instant) {
        if let Some(before) = self.mapped_by.replace(protocol)
            && before != protocol
        {
            self.counters.protocol_changes += 1;
            log::warn!(
                "router: the ports are mapped by {} now, by {} before",
                protocol.name(),
                before.name()
            );
        }
        self.protocol = Some(protocol);
        self.trouble = None;
        self.failures = 0;
        self.counters.rounds += 1;
        let shortest = self
            .mappings
            .iter()
            .flatten()
            .map(|m| m.lifetime)
            .min()
            .unwrap_or(self.lifetime)
            .max(SHORTEST_LIFETIME);
        self.phase = Phase::Holding {
            renew_at: now.add_micros(u64::from(shortest) * 1_000_000 / 2),
        };
    }

    /// The UPnP IGD fallback's next action, when one is due (call beside
    /// [`PortMapper::poll`]).
    pub fn poll_upnp(&mut self, now: Instant) -> Option<UpnpAction> {
        let Phase::Upnp { step, due } = self.phase else {
            return None;
        };
        if now < due || self.igd_waiting {
            return None;
        }
        let exchange = |to: &upnp::HttpUrl, request| {
            Some(UpnpAction::Exchange {
                to: (to.address, to.port),
                request,
            })
        };
        match step {
            UpnpStep::Search { attempt } => {
                if attempt >= UPNP_SEARCHES {
                    self.fail(Trouble::NoAnswer, now);
                    return None;
                }
                self.phase = Phase::Upnp {
                    step: UpnpStep::Search {
                        attempt: attempt + 1,
                    },
                    due: now.add_micros(UPNP_SEARCH_WAIT_MICROS),
                };
                self.counters.requests += 1;
                Some(UpnpAction::Search)
            }
            UpnpStep::Describe => {
                let url = self.igd_location.clone()?;
                self.igd_waiting = true;
                self.counters.requests += 1;
                exchange(&url, upnp::get_request(&url)?)
            }
            UpnpStep::Map { index } => {
                let (url, service) = self.igd_control.clone()?;
                let request = self.requests[index];
                let client = Ipv4Addr::from(self.client?);
                let lease = if self.igd_permanent { 0 } else { self.lifetime };
                let soap = upnp::soap_request(
                    &url,
                    service,
                    "AddPortMapping",
                    &[
                        ("NewRemoteHost", &""),
                        ("NewExternalPort", &request.external),
                        ("NewProtocol", &"TCP"),
                        ("NewInternalPort", &request.internal),
                        ("NewInternalClient", &client),
                        ("NewEnabled", &1),
                        ("NewPortMappingDescription", &"Bramble"),
                        ("NewLeaseDuration", &lease),
                    ],
                )?;
                self.igd_waiting = true;
                self.counters.requests += 1;
                exchange(&url, soap)
            }
            UpnpStep::External => {
                let (url, service) = self.igd_control.clone()?;
                let soap = upnp::soap_request(&url, service, "GetExternalIPAddress", &[])?;
                self.igd_waiting = true;
                self.counters.requests += 1;
                exchange(&url, soap)
            }
            UpnpStep::Delete { index } => {
                let Some((url, service)) = self.igd_control.clone() else {
                    self.upnp_delete = [false; MAX_PORTS];
                    self.phase = Phase::Stopped;
                    return None;
                };
                let soap = upnp::soap_request(
                    &url,
                    service,
                    "DeletePortMapping",
                    &[
                        ("NewRemoteHost", &""),
                        ("NewExternalPort", &self.requests[index].external),
                        ("NewProtocol", &"TCP"),
                    ],
                )?;
                self.igd_waiting = true;
                self.counters.requests += 1;
                exchange(&url, soap)
            }
        }
    }

    /// The UPnP deletion of port `index` is over (answered, refused or failed): on to the
    /// next one, or quiet.
    fn deleted(&mut self, index: usize, now: Instant) {
        if let Some(done) = self.upnp_delete.get_mut(index) {
            *done = false;
        }
        self.phase = match self.upnp_delete.iter().position(|&left| left) {
            Some(next) => Phase::Upnp {
                step: UpnpStep::Delete { index: next },
                due: now,
            },
            None => Phase::Stopped,
        };
    }

    /// UPnP deletions a clean shutdown still has to make (0 once they are all answered or
    /// failed).
    pub fn upnp_deletions_left(&self) -> usize {
        match self.phase {
            Phase::Upnp {
                step: UpnpStep::Delete { .. },
                ..
            } => self.upnp_delete.iter().filter(|&&left| left).count(),
            _ => 0,
        }
    }

    /// Stopped, or deleting its mappings before it stops.
    fn stopped(&self) -> bool {
        self.phase == Phase::Stopped || self.upnp_deletions_left() > 0
    }

    /// The whole answer to the exchange [`PortMapper::poll_upnp`] asked for.
    pub fn upnp_answer(&mut self, bytes: &[u8], now: Instant) {
        let Phase::Upnp { step, .. } = self.phase else {
            return;
        };
        if !self.igd_waiting {
            return;
        }
        self.igd_waiting = false;
        self.counters.replies += 1;
        let next = |step| Phase::Upnp { step, due: now };
        match step {
            UpnpStep::Delete { index } => {
                let port = self.requests[index].external;
                match upnp::parse_soap(bytes) {
                    Some(upnp::SoapAnswer::Ok(_)) => {
                        log::info!("router: UPnP IGD: TCP port {port} deleted");
                    }
                    Some(upnp::SoapAnswer::Error(code)) => {
                        log::info!("router: UPnP IGD: TCP port {port} not deleted (error {code})");
                    }
                    None => log::info!("router: UPnP IGD: TCP port {port}: no SOAP answer"),
                }
                self.deleted(index, now);
            }
            UpnpStep::Search { .. } => {}
            UpnpStep::Describe => {
                let found = match (upnp::http_response(bytes), &self.igd_location) {
                    (Some((200, body)), Some(base)) => upnp::find_control_url(body, base),
                    _ => None,
                };
                match found {
                    Some(control) => {
                        self.igd_control = Some(control);
                        self.phase = next(UpnpStep::Map { index: 0 });
                    }
                    None => self.fail(Trouble::IgdBroken, now),
                }
            }
            UpnpStep::Map { index } => match upnp::parse_soap(bytes) {
                Some(upnp::SoapAnswer::Ok(_)) => {
                    let request = self.requests[index];
                    // A permanent mapping is still checked at each renewal.
                    let lifetime = self.lifetime;
                    let renewed =
                        self.mapped_by == Some(Protocol::Upnp) && self.mappings[index].is_some();
                    self.mappings[index] = Some(Mapping {
                        internal: request.internal,
                        external: request.external,
                        lifetime,
                        granted_at: now,
                    });
                    if !renewed {
                        log::info!(
                            "router: UPnP IGD: TCP port {} outside -> port {} {}",
                            request.external,
                            request.internal,
                            if self.igd_permanent {
                                "(permanent: the router takes no lease time)"
                            } else {
                                "with a lease"
                            }
                        );
                    }
                    self.phase = if index + 1 < self.requests.len() {
                        next(UpnpStep::Map { index: index + 1 })
                    } else {
                        next(UpnpStep::External)
                    };
                }
                Some(upnp::SoapAnswer::Error(upnp::ERROR_ONLY_PERMANENT_LEASES))
                    if !self.igd_permanent =>
                {
                    // Asked again without a lease time; renewals still check it is there.
                    self.igd_permanent = true;
                    self.phase = next(UpnpStep::Map { index });
                }
                Some(upnp::SoapAnswer::Error(code)) => {
                    self.protocol = Some(Protocol::Upnp);
                    let trouble = match code {
                        401 | 606 => Trouble::NotAuthorized(Protocol::Upnp),
                        728 => Trouble::NoResources(Protocol::Upnp),
                        code => Trouble::Refused(Protocol::Upnp, code),
                    };
                    self.refused(trouble, now);
                }
                None => self.upnp_failed(now),
            },
            UpnpStep::External => {
                if let Some(upnp::SoapAnswer::Ok(body)) = upnp::parse_soap(bytes)
                    && let Some(address) = upnp::external_address(body)
                {
                    self.external = Some(address);
                }
                self.finish_round(Protocol::Upnp, now);
            }
        }
    }

    /// The exchange [`PortMapper::poll_upnp`] asked for failed (no connection, a timeout):
    /// the IGD is searched for again after the usual wait.
    pub fn upnp_failed(&mut self, now: Instant) {
        if !self.igd_waiting {
            return;
        }
        self.igd_waiting = false;
        if let Phase::Upnp {
            step: UpnpStep::Delete { index },
            ..
        } = self.phase
        {
            // No retry at a shutdown: it runs out with its lease.
            log::info!(
                "router: UPnP IGD: TCP port {} not deleted (the exchange failed)",
                self.requests[index].external
            );
            self.deleted(index, now);
            return;
        }
        self.igd_control = None;
        self.fail(Trouble::IgdBroken, now);
    }

    /// When [`PortMapper::poll`] next has work.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Upnp { .. } if self.igd_waiting => None,
            Phase::Upnp { due, .. } => Some(due),
            Phase::Idle | Phase::Stopped => None,
            Phase::Asking { due, .. } => Some(due),
            Phase::Holding { renew_at } => Some(renew_at),
            Phase::Waiting { until } => Some(until),
        }
    }

    /// Deletes every mapping (a clean shutdown): the requests to send, one each, after which
    /// the client stays quiet. Mappings made by UPnP IGD are deleted by SOAP exchanges
    /// instead, one at a time through [`PortMapper::poll_upnp`] as usual, while
    /// [`PortMapper::upnp_deletions_left`] says some are left (an exchange under way is
    /// abandoned: the caller drops its connection).
    pub fn stop(&mut self, now: Instant) -> heapless::Vec<Datagram, MAX_PORTS> {
        let mut out = heapless::Vec::new();
        let protocol = self.protocol.unwrap_or(Protocol::Pcp);
        self.igd_waiting = false;
        self.upnp_delete = [false; MAX_PORTS];
        for index in 0..self.requests.len() {
            if self.mappings[index].is_none() {
                continue;
            }
            let bytes = match protocol {
                Protocol::Upnp => {
                    self.upnp_delete[index] = self.igd_control.is_some();
                    continue;
                }
                Protocol::Pcp => self.pcp_request(index, 0),
                Protocol::NatPmp => {
                    datagram(&natpmp::map_request(self.requests[index].internal, 0, 0))
                }
            };
            let _ = out.push(bytes);
        }
        self.mappings = [None; MAX_PORTS];
        self.phase = Phase::Stopped;
        if let Some(first) = self.upnp_delete.iter().position(|&left| left) {
            self.phase = Phase::Upnp {
                step: UpnpStep::Delete { index: first },
                due: now,
            };
        }
        out
    }

    /// The public address the gateway reported, and by which protocol.
    pub fn external(&self) -> Option<([u8; 4], Protocol)> {
        Some((self.external?, self.protocol?))
    }

    /// The mappings held.
    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.mappings.iter().flatten()
    }

    /// What went wrong last, until a round succeeds.
    pub fn trouble(&self) -> Option<Trouble> {
        self.trouble
    }

    /// The counts.
    pub fn counters(&self) -> MapperCounters {
        self.counters
    }

    /// A one-line account for the console, the status line and the status page.
    pub fn report(&self, now: Instant) -> MapperReport<'_> {
        MapperReport { mapper: self, now }
    }
}

/// [`PortMapper::report`]: `PCP via 192.168.1.1: 203.0.113.7:80->80, :443->443, 3550 s
/// left, renewal in 3500 s`, or what is wrong.
pub struct MapperReport<'m> {
    mapper: &'m PortMapper,
    now: Instant,
}

impl fmt::Display for MapperReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.mapper;
        let Some(gateway) = m.gateway else {
            return f.write_str("waiting for an address and a gateway");
        };
        let gateway = Ipv4Addr::from(gateway);
        if m.phase == Phase::Stopped {
            return write!(f, "mappings on {gateway} deleted");
        }
        let mut first = true;
        let mut shortest = None::<u64>;
        for mapping in m.mappings() {
            if first {
                let protocol = m.protocol.map_or("?", Protocol::name);
                let external = Ipv4Addr::from(m.external.unwrap_or_default());
                write!(f, "{protocol} via {gateway}: {external}")?;
            } else {
                f.write_str(",")?;
            }
            first = false;
            write!(f, ":{}->{}", mapping.external, mapping.internal)?;
            let left = mapping.remaining(self.now);
            shortest = Some(shortest.map_or(left, |s| s.min(left)));
        }
        if let Some(left) = shortest {
            write!(f, ", {left} s left")?;
        }
        let warning = m
            .external
            .and_then(|address| AddressKind::of(address).warning());
        if let (Some(address), Some(warning)) = (m.external, warning) {
            let sep = if first { "" } else { "; " };
            write!(
                f,
                "{sep}outside address {}: {warning}",
                Ipv4Addr::from(address)
            )?;
            first = false;
        }
        if let Some(trouble) = m.trouble {
            if !first {
                f.write_str("; ")?;
            }
            write!(f, "{trouble}")?;
        }
        let seconds = |at: Instant| at.micros_since(self.now) / 1_000_000;
        match m.phase {
            Phase::Asking { protocol, .. } => {
                let sep = if first && m.trouble.is_none() {
                    ""
                } else {
                    "; "
                };
                write!(f, "{sep}asking {gateway} by {}", protocol.name())
            }
            Phase::Holding { renew_at } => write!(f, ", renewal in {} s", seconds(renew_at)),
            Phase::Upnp { .. } => {
                let sep = if first && m.trouble.is_none() {
                    ""
                } else {
                    "; "
                };
                write!(f, "{sep}asking {gateway} by UPnP IGD")
            }
            Phase::Waiting { until } => write!(f, "; next try in {} s", seconds(until)),
            Phase::Idle | Phase::Stopped => Ok(()),
        }
    }
}
