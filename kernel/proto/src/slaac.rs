//! IPv6 address configuration for a host (RFC 4862): a link-local address, addresses from
//! the prefixes that routers advertise (SLAAC) with their lifetimes, an optional static
//! address, duplicate address detection for each, the default routers, and the routers'
//! name servers (RFC 8106).
//!
//! Interface identifiers are the stable, semantically opaque ones of RFC 7217 (as RFC 8064
//! recommends), not the MAC (modified EUI-64): the same address on the same network at every
//! boot, another on every other network, and the MAC not shown to the whole internet. The
//! pseudo-random function is SipHash-2-4 keyed with a per-device secret, over the prefix, the
//! MAC (the interface) and the DAD counter; a duplicate found by DAD gives the next counter
//! and a new identifier (RFC 7217 §6), up to [`IDGEN_RETRIES`] times.
//!
//! Lifetimes are honoured as RFC 4862 §5.5.3 says: a prefix's preferred lifetime is taken as
//! advertised (0 deprecates its address at once: renumbering), the valid lifetime too, except
//! that an advertisement cannot cut a valid lifetime below two hours (rule (e), against
//! forged advertisements), unless the address has less than that left. A deprecated address
//! still accepts connections until it expires; it is no longer announced over mDNS.
//!
//! Socket-free like the mDNS responder: [`Ipv6Autoconfig::poll`] says which solicitation to
//! send, [`Ipv6Autoconfig::on_router_advert`] and [`Ipv6Autoconfig::on_neighbor_advert`]
//! take what arrived, and [`Ipv6Autoconfig::changes`] tells the caller when to copy the
//! assigned addresses and the default router into the interface. Not done: DHCPv6 (the M and
//! O flags are only logged), the RA's MTU, hop limit and timers (the defaults are kept),
//! answering another host's DAD probe for one of our addresses (smoltcp drops solicitations
//! from the unspecified address before they reach us).

use crate::ndp::{INFINITE_LIFETIME, NeighborAdvert, RouterAdvert};
use bramble_hal::Instant;

/// Most addresses held: the link-local one, a static one, and three from prefixes (one
/// being renumbered away, its successor, one more).
pub const MAX_ADDRESSES: usize = 5;
/// Most default routers remembered.
pub const MAX_ROUTERS: usize = 2;
/// Most name servers remembered (RFC 8106 §5.3.1 suggests three).
pub const MAX_DNS_SERVERS: usize = 3;
/// New identifiers tried after duplicates, per address (RFC 7217 §6: IDGEN_RETRIES).
pub const IDGEN_RETRIES: u8 = 3;
/// Neighbor Solicitations sent per address before it is taken (RFC 4862 §5.1:
/// DupAddrDetectTransmits).
const DAD_TRANSMITS: u8 = 1;
/// How long DAD waits after its solicitation (RFC 4861 §10: RETRANS_TIMER).
const RETRANS_TIMER_US: u64 = 1_000_000;
/// Random delay before the first solicitation after start-up (RFC 4861 §10:
/// MAX_RTR_SOLICITATION_DELAY; RFC 4862 §5.4.2).
const MAX_SOLICITATION_DELAY_US: u64 = 1_000_000;
/// Router Solicitations sent (RFC 4861 §10: MAX_RTR_SOLICITATIONS).
const MAX_ROUTER_SOLICITATIONS: u8 = 3;
/// Time between them (RFC 4861 §10: RTR_SOLICITATION_INTERVAL).
const SOLICITATION_INTERVAL_US: u64 = 4_000_000;
/// RFC 4862 §5.5.3 (e): the valid lifetime an unauthenticated advertisement cannot cut below.
const TWO_HOURS_S: u64 = 2 * 60 * 60;

/// Where an address came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressOrigin {
    /// fe80::/64 with a stable identifier.
    LinkLocal,
    /// `address6` in BRAMBLE.TXT.
    Static,
    /// A prefix from a Router Advertisement (SLAAC).
    Autoconfigured,
}

/// Where an address is in its life (RFC 4862 §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressState {
    /// Duplicate address detection runs: `sent` solicitations so far, next step at `next`.
    /// Not on the interface yet.
    Tentative {
        /// Solicitations sent.
        sent: u8,
        /// When the next one goes out, or detection ends.
        next: Instant,
    },
    /// On the interface and used.
    Preferred,
    /// On the interface, still accepting connections, no longer announced; expires at the
    /// end of its valid lifetime.
    Deprecated,
    /// Another host has it (and no new identifier is left to try): not used.
    Duplicate,
}

/// One address and what is known about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressEntry {
    /// The address.
    pub address: [u8; 16],
    /// Its prefix length (64 for link-local and SLAAC addresses).
    pub prefix_len: u8,
    /// Where it came from.
    pub origin: AddressOrigin,
    /// Where it is in its life.
    pub state: AddressState,
    /// When it becomes deprecated (`None`: never).
    pub preferred_until: Option<Instant>,
    /// When it is removed (`None`: never).
    pub valid_until: Option<Instant>,
    /// The RFC 7217 DAD counter its identifier was made with.
    dad_counter: u8,
}

impl AddressEntry {
    /// Whether the address is on the interface (preferred or deprecated).
    pub fn is_assigned(&self) -> bool {
        matches!(
            self.state,
            AddressState::Preferred | AddressState::Deprecated
        )
    }

    fn prefix(&self) -> [u8; 8] {
        let mut prefix = [0; 8];
        prefix.copy_from_slice(&self.address[..8]);
        prefix
    }
}

/// The address the internet reaches the board at: the one dynamic DNS publishes as AAAA
/// and the router's IPv6 pinholes open. Of `entries`, a preferred one that is global unicast
/// ([`is_global_unicast`]), a static one first (the owner chose it).
pub fn global_address(entries: &[AddressEntry]) -> Option<[u8; 16]> {
    entries
        .iter()
        .filter(|entry| {
            entry.state == AddressState::Preferred
                && entry.origin != AddressOrigin::LinkLocal
                && is_global_unicast(&entry.address)
        })
        .min_by_key(|entry| entry.origin != AddressOrigin::Static)
        .map(|entry| entry.address)
}

/// Whether `address` is global unicast: not link-local (fe80::/10), unique-local
/// (fc00::/7), loopback, multicast or unspecified.
pub fn is_global_unicast(address: &[u8; 16]) -> bool {
    let ip = core::net::Ipv6Addr::from(*address);
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local())
}

/// A solicitation to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Solicitation {
    /// Duplicate address detection: a Neighbor Solicitation from the unspecified address to
    /// `target`'s solicited-node group (RFC 4862 §5.4.2).
    Neighbor {
        /// The tentative address.
        target: [u8; 16],
    },
    /// A Router Solicitation to all routers (ff02::2) from `source`, our link-local address.
    Router {
        /// Our link-local address.
        source: [u8; 16],
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Router {
    address: [u8; 16],
    until: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DnsServer {
    address: [u8; 16],
    until: Option<Instant>,
}

/// A host's IPv6 addresses, default routers and name servers, and the solicitations that
/// configure them.
#[derive(Debug)]
pub struct Ipv6Autoconfig {
    mac: [u8; 6],
    secret: [u8; 16],
    /// Addresses are formed from advertised prefixes (false with a static address).
    autoconfigure: bool,
    /// A fixed default router (`gateway6`): advertised ones are then not used as default.
    gateway: Option<[u8; 16]>,
    entries: heapless::Vec<AddressEntry, MAX_ADDRESSES>,
    routers: heapless::Vec<Router, MAX_ROUTERS>,
    dns: heapless::Vec<DnsServer, MAX_DNS_SERVERS>,
    solicitations_sent: u8,
    next_solicitation: Option<Instant>,
    changes: u32,
    random: u32,
    /// The M or O flag was seen (logged once).
    dhcpv6_noted: bool,
    /// Prefixes that could not be used (wrong length, no room), counted for the status line.
    prefixes_ignored: u32,
}

impl Ipv6Autoconfig {
    /// Starts configuration for the interface with `mac`: a link-local address, and
    /// `static_address` (address, prefix length) if given, each first checked by DAD after
    /// a random delay of up to a second. `secret` keys the interface identifiers (it must be
    /// the same at every boot and unknown off the link); `seed` varies the delays.
    pub fn new(
        mac: [u8; 6],
        secret: [u8; 16],
        static_address: Option<([u8; 16], u8)>,
        gateway: Option<[u8; 16]>,
        seed: u32,
        now: Instant,
    ) -> Self {
        let mut this = Self {
            mac,
            secret,
            autoconfigure: static_address.is_none(),
            gateway,
            entries: heapless::Vec::new(),
            routers: heapless::Vec::new(),
            dns: heapless::Vec::new(),
            solicitations_sent: 0,
            next_solicitation: None,
            changes: 0,
            random: seed | 1,
            dhcpv6_noted: false,
            prefixes_ignored: 0,
        };
        let start = now.add_micros(this.random_below(MAX_SOLICITATION_DELAY_US));
        let mut link_local = [0; 8];
        link_local[..2].copy_from_slice(&[0xfe, 0x80]);
        let (address, dad_counter) = this.stable_address(link_local, 0);
        // Cannot fail: the list is empty and holds at least two.
        let _ = this.entries.push(AddressEntry {
            address,
            prefix_len: 64,
            origin: AddressOrigin::LinkLocal,
            state: AddressState::Tentative {
                sent: 0,
                next: start,
            },
            preferred_until: None,
            valid_until: None,
            dad_counter,
        });
        if let Some((address, prefix_len)) = static_address {
            let _ = this.entries.push(AddressEntry {
                address,
                prefix_len,
                origin: AddressOrigin::Static,
                state: AddressState::Tentative {
                    sent: 0,
                    next: start,
                },
                preferred_until: None,
                valid_until: None,
                dad_counter: 0,
            });
        }
        this
    }

    /// A number in `0..bound` from the seed (xorshift32: for spreading delays only).
    fn random_below(&mut self, bound: u64) -> u64 {
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.random = x;
        u64::from(x) % bound.max(1)
    }

    /// The RFC 7217 address for `prefix` with the first DAD counter from `counter` on whose
    /// identifier is not reserved (RFC 5453), and that counter.
    fn stable_address(&self, prefix: [u8; 8], mut counter: u8) -> ([u8; 16], u8) {
        loop {
            let iid = stable_interface_id(&self.secret, prefix, self.mac, counter);
            if !is_reserved_interface_id(iid) || counter == u8::MAX {
                let mut address = [0; 16];
                address[..8].copy_from_slice(&prefix);
                address[8..].copy_from_slice(&iid.to_be_bytes());
                return (address, counter);
            }
            counter += 1;
        }
    }

    /// Bumped whenever the assigned addresses (or their states), the default router or the
    /// name servers change: the caller copies them into the interface when it differs from
    /// the value it last saw.
    pub fn changes(&self) -> u32 {
        self.changes
    }

    fn changed(&mut self) {
        self.changes = self.changes.wrapping_add(1);
    }

    /// Every address, tentative and duplicate ones included.
    pub fn entries(&self) -> &[AddressEntry] {
        &self.entries
    }

    /// The assigned addresses (preferred first, then deprecated), each with its prefix
    /// length: what the interface should hold.
    pub fn assigned(&self) -> impl Iterator<Item = &AddressEntry> {
        let preferred = self
            .entries
            .iter()
            .filter(|e| e.state == AddressState::Preferred);
        let deprecated = self
            .entries
            .iter()
            .filter(|e| e.state == AddressState::Deprecated);
        preferred.chain(deprecated)
    }

    /// The assigned link-local address, once DAD has passed.
    pub fn link_local(&self) -> Option<[u8; 16]> {
        self.entries
            .iter()
            .find(|e| e.origin == AddressOrigin::LinkLocal && e.is_assigned())
            .map(|e| e.address)
    }

    /// The default router: `gateway6` if set, else the first advertised one still valid.
    pub fn default_router(&self) -> Option<[u8; 16]> {
        self.gateway
            .or_else(|| self.routers.first().map(|r| r.address))
    }

    /// The name servers the routers advertise (RFC 8106), in their order of preference, for
    /// the DNS client.
    pub fn dns_servers(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.dns.iter().map(|server| server.address)
    }

    /// Advertised prefixes that could not be used (not /64, or no room for another address).
    pub fn prefixes_ignored(&self) -> u32 {
        self.prefixes_ignored
    }

    /// The network may be another one after the link returns: ask the routers again.
    /// Addresses are kept until their lifetimes say otherwise (an advertisement on a new
    /// network brings its own prefix; the old one runs out).
    pub fn restart(&mut self, now: Instant) {
        self.solicitations_sent = 0;
        let delay = self.random_below(MAX_SOLICITATION_DELAY_US);
        self.next_solicitation = Some(now.add_micros(delay));
    }

    /// When [`Ipv6Autoconfig::poll`] next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut next = self
            .next_solicitation
            .filter(|_| self.link_local().is_some());
        let mut consider = |at: Option<Instant>| {
            next = match (next, at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        };
        for entry in &self.entries {
            match entry.state {
                AddressState::Tentative { next, .. } => consider(Some(next)),
                AddressState::Preferred => {
                    consider(entry.preferred_until);
                    consider(entry.valid_until);
                }
                AddressState::Deprecated => consider(entry.valid_until),
                AddressState::Duplicate => {}
            }
        }
        for router in &self.routers {
            consider(Some(router.until));
        }
        for server in &self.dns {
            consider(server.until);
        }
        next
    }

    /// Runs what is due at `now`: lifetimes, duplicate address detection, router
    /// solicitation. Returns a solicitation to send, if one is due; call again until `None`.
    pub fn poll(&mut self, now: Instant) -> Option<Solicitation> {
        self.expire(now);
        for index in 0..self.entries.len() {
            let entry = &mut self.entries[index];
            let AddressState::Tentative { sent, next } = entry.state else {
                continue;
            };
            if now < next {
                continue;
            }
            if sent < DAD_TRANSMITS {
                entry.state = AddressState::Tentative {
                    sent: sent + 1,
                    next: now.add_micros(RETRANS_TIMER_US),
                };
                return Some(Solicitation::Neighbor {
                    target: entry.address,
                });
            }
            let deprecated = entry.preferred_until.is_some_and(|until| until <= now);
            entry.state = if deprecated {
                AddressState::Deprecated
            } else {
                AddressState::Preferred
            };
            log::info!(
                "ipv6: address {} ({})",
                core::net::Ipv6Addr::from(entry.address),
                match entry.origin {
                    AddressOrigin::LinkLocal => "link-local",
                    AddressOrigin::Static => "static",
                    AddressOrigin::Autoconfigured => "from the router's prefix",
                }
            );
            if entry.origin == AddressOrigin::LinkLocal {
                // Routers are asked once there is an address to ask from (RFC 4861 §6.3.7);
                // the random delay has been spent before DAD.
                self.next_solicitation = Some(now);
            }
            self.changed();
        }
        if let Some(source) = self.link_local()
            && self.next_solicitation.is_some_and(|at| at <= now)
        {
            self.solicitations_sent = self.solicitations_sent.saturating_add(1);
            self.next_solicitation = (self.solicitations_sent < MAX_ROUTER_SOLICITATIONS)
                .then(|| now.add_micros(SOLICITATION_INTERVAL_US));
            return Some(Solicitation::Router { source });
        }
        None
    }

    /// Removes what has run out and deprecates what is no longer preferred.
    fn expire(&mut self, now: Instant) {
        let before = self.entries.len();
        self.entries.retain(|entry| {
            let expired = entry.valid_until.is_some_and(|until| until <= now);
            if expired && entry.is_assigned() {
                log::info!(
                    "ipv6: address {} expired",
                    core::net::Ipv6Addr::from(entry.address)
                );
            }
            !expired
        });
        let mut changed = self.entries.len() != before;
        for entry in self.entries.iter_mut() {
            if entry.state == AddressState::Preferred
                && entry.preferred_until.is_some_and(|until| until <= now)
            {
                entry.state = AddressState::Deprecated;
                log::info!(
                    "ipv6: address {} deprecated",
                    core::net::Ipv6Addr::from(entry.address)
                );
                changed = true;
            }
        }
        let routers = self.routers.len();
        self.routers.retain(|router| router.until > now);
        let servers = self.dns.len();
        self.dns
            .retain(|server| server.until.is_none_or(|until| until > now));
        changed |= routers != self.routers.len() || servers != self.dns.len();
        if changed {
            self.changed();
        }
    }

    /// Takes a Router Advertisement from `source` (the caller has checked that it came from
    /// a link-local address with hop limit 255 and a valid checksum, RFC 4861 §6.1.2).
    pub fn on_router_advert(&mut self, source: [u8; 16], advert: &RouterAdvert<'_>, now: Instant) {
        // Routers are there: no more solicitations until the link comes back.
        self.solicitations_sent = MAX_ROUTER_SOLICITATIONS;
        self.next_solicitation = None;
        if (advert.managed || advert.other) && !self.dhcpv6_noted {
            self.dhcpv6_noted = true;
            log::info!("ipv6: the router offers DHCPv6, which Bramble does not use (SLAAC only)");
        }
        self.update_router(source, advert.router_lifetime, now);
        if self.autoconfigure {
            for prefix in advert.prefixes() {
                self.update_prefix(&prefix, now);
            }
        }
        for servers in advert.dns_servers() {
            for address in servers.addresses() {
                self.update_dns_server(address, servers.lifetime, now);
            }
        }
    }

    fn update_router(&mut self, address: [u8; 16], lifetime: u16, now: Instant) {
        let known = self.routers.iter().position(|r| r.address == address);
        match (known, lifetime) {
            (Some(index), 0) => {
                self.routers.remove(index);
                self.changed();
            }
            (Some(index), seconds) => {
                self.routers[index].until = now.add_micros(u64::from(seconds) * 1_000_000)
            }
            (None, 0) => {}
            (None, seconds) => {
                let router = Router {
                    address,
                    until: now.add_micros(u64::from(seconds) * 1_000_000),
                };
                if self.routers.push(router).is_ok() {
                    log::info!("ipv6: router {}", core::net::Ipv6Addr::from(address));
                    self.changed();
                }
            }
        }
    }

    fn update_dns_server(&mut self, address: [u8; 16], lifetime: u32, now: Instant) {
        let until = lifetime_end(lifetime, now);
        let known = self.dns.iter().position(|s| s.address == address);
        match (known, lifetime) {
            (Some(index), 0) => {
                self.dns.remove(index);
                self.changed();
            }
            (Some(index), _) => self.dns[index].until = until,
            (None, 0) => {}
            (None, _) => {
                if self.dns.push(DnsServer { address, until }).is_ok() {
                    log::info!("ipv6: name server {}", core::net::Ipv6Addr::from(address));
                    self.changed();
                }
            }
        }
    }

    /// RFC 4862 §5.5.3 for one Prefix Information option.
    fn update_prefix(&mut self, info: &crate::ndp::PrefixInfo, now: Instant) {
        let link_local = info.prefix[0] == 0xfe && info.prefix[1] & 0xc0 == 0x80;
        if !info.autonomous || link_local || info.preferred_lifetime > info.valid_lifetime {
            // (a), (b), (c): not for SLAAC.
            return;
        }
        let mut prefix = [0; 8];
        prefix.copy_from_slice(&info.prefix[..8]);
        let known = self.entries.iter().position(|e| {
            e.origin == AddressOrigin::Autoconfigured
                && e.prefix() == prefix
                && e.state != AddressState::Duplicate
        });
        let preferred_until = lifetime_end(info.preferred_lifetime, now);
        let Some(index) = known else {
            // (d): a new prefix.
            if info.valid_lifetime == 0 {
                return;
            }
            if info.prefix_len != 64 {
                // Our identifiers are 64 bits: only a /64 leaves room for them (§5.5.3 (d)).
                self.prefixes_ignored = self.prefixes_ignored.saturating_add(1);
                log::warn!(
                    "ipv6: prefix {}/{} ignored: only /64 prefixes can form addresses",
                    core::net::Ipv6Addr::from(info.prefix),
                    info.prefix_len
                );
                return;
            }
            let (address, dad_counter) = self.stable_address(prefix, 0);
            let entry = AddressEntry {
                address,
                prefix_len: 64,
                origin: AddressOrigin::Autoconfigured,
                state: AddressState::Tentative { sent: 0, next: now },
                preferred_until,
                valid_until: lifetime_end(info.valid_lifetime, now),
                dad_counter,
            };
            if self.entries.push(entry).is_err() {
                self.prefixes_ignored = self.prefixes_ignored.saturating_add(1);
                log::warn!(
                    "ipv6: prefix {}/64 ignored: no room for another address",
                    core::net::Ipv6Addr::from(info.prefix)
                );
            }
            return;
        };
        // (e): a known prefix.
        let entry = &mut self.entries[index];
        entry.preferred_until = preferred_until;
        let received = u64::from(info.valid_lifetime);
        let remaining = entry
            .valid_until
            .map(|until| until.micros_since(now) / 1_000_000);
        let infinite = info.valid_lifetime == INFINITE_LIFETIME;
        if infinite || received > TWO_HOURS_S || remaining.is_some_and(|left| received > left) {
            entry.valid_until = lifetime_end(info.valid_lifetime, now);
        } else if remaining.is_none_or(|left| left > TWO_HOURS_S) {
            entry.valid_until = Some(now.add_micros(TWO_HOURS_S * 1_000_000));
        }
        // Otherwise (two hours or less left): the valid lifetime is not cut.
        let preferred_now = preferred_until.is_none_or(|until| until > now);
        let state = match entry.state {
            AddressState::Preferred if !preferred_now => AddressState::Deprecated,
            AddressState::Deprecated if preferred_now => AddressState::Preferred,
            state => state,
        };
        if state != entry.state {
            entry.state = state;
            log::info!(
                "ipv6: address {} {}",
                core::net::Ipv6Addr::from(entry.address),
                if preferred_now {
                    "preferred again"
                } else {
                    "deprecated by the router"
                }
            );
            self.changed();
        }
    }

    /// Takes a Neighbor Advertisement: one for a tentative address means another host has
    /// it (RFC 4862 §5.4.4). A link-local or autoconfigured address then gets the next
    /// identifier (RFC 7217 §6) and DAD starts again; a static one, or one out of retries,
    /// is given up. Returns whether the advertisement was such a conflict.
    pub fn on_neighbor_advert(&mut self, advert: &NeighborAdvert, now: Instant) -> bool {
        let Some(index) = self.entries.iter().position(|e| {
            e.address == advert.target && matches!(e.state, AddressState::Tentative { .. })
        }) else {
            return false;
        };
        let entry = self.entries[index];
        log::warn!(
            "ipv6: address {} is in use by another host",
            core::net::Ipv6Addr::from(entry.address)
        );
        let retry = entry.origin != AddressOrigin::Static && entry.dad_counter < IDGEN_RETRIES;
        if !retry {
            self.entries[index].state = AddressState::Duplicate;
            log::error!(
                "ipv6: giving up on {}",
                core::net::Ipv6Addr::from(entry.address)
            );
            return true;
        }
        let (address, dad_counter) = self.stable_address(entry.prefix(), entry.dad_counter + 1);
        let delay = self.random_below(MAX_SOLICITATION_DELAY_US);
        let entry = &mut self.entries[index];
        entry.address = address;
        entry.dad_counter = dad_counter;
        entry.state = AddressState::Tentative {
            sent: 0,
            next: now.add_micros(delay),
        };
        true
    }
}

/// When a lifetime of `seconds` counted from `now` ends (`None`: infinite).
fn lifetime_end(seconds: u32, now: Instant) -> Option<Instant> {
    (seconds != INFINITE_LIFETIME).then(|| now.add_micros(u64::from(seconds) * 1_000_000))
}

/// RFC 7217 §5: the identifier for `prefix` on the interface `mac`, the `dad_counter`-th try,
/// keyed with `secret`: SipHash-2-4 over the prefix, the MAC and the counter.
pub fn stable_interface_id(secret: &[u8; 16], prefix: [u8; 8], mac: [u8; 6], counter: u8) -> u64 {
    let mut message = [0u8; 15];
    message[..8].copy_from_slice(&prefix);
    message[8..14].copy_from_slice(&mac);
    message[14] = counter;
    siphash24(secret, &message)
}

/// Identifiers that must not be used (RFC 5453): the subnet-router anycast (all zeros), the
/// reserved subnet anycast range, and the proxy mobile IPv6 range.
pub fn is_reserved_interface_id(iid: u64) -> bool {
    iid == 0
        || iid >= 0xfdff_ffff_ffff_ff80
        || (0x0200_5eff_fe00_0000..=0x0200_5eff_feff_ffff).contains(&iid)
}

/// SipHash-2-4 of `message` under the 128-bit `key` (its bytes, little-endian words).
fn siphash24(key: &[u8; 16], message: &[u8]) -> u64 {
    let word = |at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&key[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    crate::siphash::siphash24([word(0), word(8)], message)
}

#[cfg(test)]
mod tests;
