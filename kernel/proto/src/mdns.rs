//! A small mDNS responder (RFC 6762) for one name, `<hostname>.local`, with an IPv4 address
//! (A) and a few IPv6 ones (AAAA), over IPv4 (224.0.0.251) and IPv6 (ff02::fb).
//!
//! It answers A, AAAA (and ANY) questions for its name, with the other family's records in
//! the additional section (§6.2), probes for the name before using it (three probes 250 ms
//! apart, §8.1) and announces its records twice a second apart (§8.3); a changed IPv6 address
//! set is announced again without probing (§8.4), a changed IPv4 address probes afresh.
//! Conflicts (§8-9): a response contradicting our record while probing means the name is
//! taken, so the next one is tried, `<hostname>-2`, `-3`, ...; a simultaneous probe is
//! tie-broken on the records proposed (§8.2), and the loser waits a second and probes for
//! the same name again; a contradicting response once the name is ours sends us back to
//! probing for the same name (§9), so only a host that really holds the name (and answers
//! the probes) renames us. A renamed responder tries its own name again after a minute,
//! then at doubling intervals up to an hour, so that one forged or stale response never
//! renames the host for good. After 15 conflicts in 10 s every probe waits 5 s (§8.1).
//!
//! Only the link is listened to (§11, §5.5): a datagram sent straight to our address, or a
//! legacy query that would be answered straight back, is ignored unless its source is on
//! our subnet (or IPv4 link-local, or IPv6 link-local, or in the prefix of one of our IPv6
//! addresses). Legacy unicast queries (source port not 5353, §6.7) get a unicast reply with
//! the query's ID, the question echoed and a 10 s TTL. Kept simple on purpose: no
//! known-answer suppression, no duplicate-answer suppression, no negative (NSEC) answers.
//!
//! This module is socket-free: it reads datagrams and writes datagrams into caller buffers,
//! so it is tested with byte fixtures. The appliance wires it to a UDP socket on port 5353
//! joined to 224.0.0.251 and ff02::fb.

use bramble_hal::Instant;
use core::net::IpAddr;
use heapless::String;

/// The mDNS UDP port.
pub const MDNS_PORT: u16 = 5353;
/// The mDNS IPv4 multicast group.
pub const MDNS_GROUP: [u8; 4] = [224, 0, 0, 251];
/// The mDNS IPv6 multicast group, ff02::fb.
pub const MDNS_GROUP_V6: [u8; 16] = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfb];
/// Most IPv6 addresses answered with (the link-local one and a few global ones).
pub const MAX_IPV6_ADDRESSES: usize = 4;
/// Longest DNS label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;
/// TTL of the A record in multicast answers, seconds (RFC 6762 §10: 120 for host records).
pub const RECORD_TTL: u32 = 120;
/// TTL in legacy unicast answers (RFC 6762 §6.7: no more than 10 s).
pub const LEGACY_TTL: u32 = 10;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;
const CLASS_ANY: u16 = 255;
const CACHE_FLUSH: u16 = 0x8000;
const UNICAST_RESPONSE: u16 = 0x8000;
const FLAG_RESPONSE: u16 = 0x8000;
const FLAG_AUTHORITATIVE: u16 = 0x0400;
const HEADER_LEN: usize = 12;
/// Most compression pointers followed in one name before it is judged a loop.
const MAX_POINTER_HOPS: usize = 16;

const PROBE_INTERVAL_US: u64 = 250_000;
const PROBE_COUNT: u8 = 3;
const ANNOUNCE_INTERVAL_US: u64 = 1_000_000;
const ANNOUNCE_COUNT: u8 = 2;
/// The wait before each probe after a burst of conflicts (RFC 6762 §8.1: after 15
/// conflicts in 10 s, wait 5 s before each further probe attempt).
const CONFLICT_BACKOFF_US: u64 = 5_000_000;

/// Why a name could not be used, or a datagram could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MdnsError {
    /// The hostname is empty, longer than 63 bytes (with its `-N` suffix), or holds a byte
    /// other than a letter, a digit or `-`.
    InvalidHostname,
    /// A datagram ended early or holds a malformed name (bad label, pointer loop).
    Malformed,
}

/// Where a datagram produced by the responder goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// To the group (224.0.0.251 or ff02::fb, the family the query came in on), port 5353.
    Multicast,
    /// Back to the querier's address and port (legacy unicast).
    Unicast(IpAddr, u16),
}

/// What the responder is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponderState {
    /// No address yet: silent.
    Idle,
    /// Probing for the name: `sent` probes so far, next step at `next`.
    Probing {
        /// Probes sent so far.
        sent: u8,
        /// When the next probe goes out (or probing ends).
        next: Instant,
    },
    /// Announcing the name: `sent` announcements so far, next at `next`.
    Announcing {
        /// Announcements sent so far.
        sent: u8,
        /// When the next announcement goes out.
        next: Instant,
    },
    /// The name is ours and answered.
    Ready,
}

/// Our IPv4 address on the link and the length of its subnet prefix: what the responder
/// answers with, and what tells an on-link source from one behind a router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkAddress {
    /// The interface's address.
    pub address: [u8; 4],
    /// Length of the subnet prefix (24 for a /24); values above 32 count as 32.
    pub prefix_len: u8,
}

impl LinkAddress {
    /// Whether `source` is on the local link (RFC 6762 §11): inside our subnet, or an IPv4
    /// link-local address (169.254/16, on-link by definition, RFC 3927 §2.6), as a host that
    /// has not got a lease yet uses.
    pub fn is_on_link(&self, source: [u8; 4]) -> bool {
        let bits = u32::from(self.prefix_len.min(32));
        let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
        let same_subnet =
            u32::from_be_bytes(self.address) & mask == u32::from_be_bytes(source) & mask;
        same_subnet || source[..2] == [169, 254]
    }
}

/// One of our IPv6 addresses and its prefix length: answered with in AAAA records, and (with
/// the prefix) what tells an on-link IPv6 source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ipv6LinkAddress {
    /// The address.
    pub address: [u8; 16],
    /// Length of its prefix (64 for SLAAC); values above 128 count as 128.
    pub prefix_len: u8,
}

impl Ipv6LinkAddress {
    /// Whether `source` shares this address's prefix.
    pub fn contains(&self, source: [u8; 16]) -> bool {
        let bits = u32::from(self.prefix_len.min(128));
        let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
        u128::from_be_bytes(self.address) & mask == u128::from_be_bytes(source) & mask
    }
}

/// Where a received datagram came from, and how it was addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The source address (IPv4 or IPv6).
    pub address: IpAddr,
    /// The source port (5353 for a full mDNS querier, another for a legacy resolver).
    pub port: u16,
    /// Sent to the mDNS group (224.0.0.251 or ff02::fb); false for a datagram sent straight
    /// to our address (or a broadcast), which a router may have forwarded from anywhere.
    pub to_group: bool,
}

/// First wait before a responder that had to take a suffixed name tries its own name again
/// (the conflict may have been a single forged or stale response, or the other host left).
const RECLAIM_FIRST_US: u64 = 60_000_000;
/// Longest wait between two tries for the own name: the wait doubles after each try that
/// found the name still taken.
const RECLAIM_MAX_US: u64 = 3_600_000_000;
/// How long a host that lost a simultaneous-probe tie-break waits before probing for the
/// same name again (RFC 6762 §8.2).
const TIE_BREAK_WAIT_US: u64 = 1_000_000;
/// Conflicts in [`CONFLICT_WINDOW_US`] after which every further probe waits
/// [`CONFLICT_BACKOFF_US`] (RFC 6762 §8.1: 15 conflicts in 10 s, then 5 s).
const CONFLICT_BURST: usize = 15;
/// The window for [`CONFLICT_BURST`].
const CONFLICT_WINDOW_US: u64 = 10_000_000;

/// The responder for one host name.
#[derive(Debug)]
pub struct MdnsResponder {
    base: String<MAX_LABEL_LEN>,
    name: String<MAX_LABEL_LEN>,
    /// Number appended after conflicts (1 = no suffix).
    attempt: u32,
    address: Option<LinkAddress>,
    /// Our IPv6 addresses, sorted (the order of the probe tie-break, §8.2).
    ipv6: heapless::Vec<Ipv6LinkAddress, MAX_IPV6_ADDRESSES>,
    state: ResponderState,
    /// First-probe delay (RFC 6762 §8.1: a random 0-250 ms), fixed per device.
    jitter_us: u64,
    /// When the last [`CONFLICT_BURST`] conflicts happened (a ring, oldest at `conflict_next`).
    recent_conflicts: [Option<Instant>; CONFLICT_BURST],
    conflict_next: usize,
    /// Conflicts seen since start.
    conflicts: u32,
    /// When to try the own name again, while a suffixed one is in use.
    reclaim_at: Option<Instant>,
    /// The wait before the next such try.
    reclaim_wait_us: u64,
    /// Datagrams ignored because they came from off the link.
    off_link: u32,
}

fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= MAX_LABEL_LEN
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// What another host's datagram says about our name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claim {
    /// Nothing against us: not about our name, our own probe echoed, or a simultaneous
    /// probe that loses the tie-break.
    None,
    /// A response with a record for our name that contradicts ours (§9).
    Answered,
    /// A simultaneous probe for our name that wins the tie-break (§8.2).
    ProbeWins,
}

impl MdnsResponder {
    /// A responder for `<hostname>.local`. `seed` (for example the low MAC bytes) spreads the
    /// first probe over 0-250 ms so that devices powered on together do not probe in step.
    pub fn new(hostname: &str, seed: u32) -> Result<Self, MdnsError> {
        if !valid_label(hostname) {
            return Err(MdnsError::InvalidHostname);
        }
        let mut base = String::new();
        base.push_str(hostname)
            .map_err(|_| MdnsError::InvalidHostname)?;
        Ok(Self {
            name: base.clone(),
            base,
            attempt: 1,
            address: None,
            ipv6: heapless::Vec::new(),
            state: ResponderState::Idle,
            jitter_us: u64::from(seed) % PROBE_INTERVAL_US,
            recent_conflicts: [None; CONFLICT_BURST],
            conflict_next: 0,
            conflicts: 0,
            reclaim_at: None,
            reclaim_wait_us: RECLAIM_FIRST_US,
            off_link: 0,
        })
    }

    /// The label being claimed or owned now (the hostname, or it with a `-N` suffix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Current state.
    pub fn state(&self) -> ResponderState {
        self.state
    }

    /// Conflicts seen since start (responses contradicting our record, lost tie-breaks).
    pub fn conflicts(&self) -> u32 {
        self.conflicts
    }

    /// Datagrams ignored since start because they came from off the link (§11).
    pub fn off_link_ignored(&self) -> u32 {
        self.off_link
    }

    /// Sets the IPv4 address to answer with (`None` when the interface has none). A new
    /// address starts probing afresh for the configured hostname: on another network, or
    /// with another address, an old conflict says nothing. Without any address (IPv4 or
    /// IPv6) the responder falls silent.
    pub fn set_address(&mut self, address: Option<LinkAddress>, now: Instant) {
        if self.address == address {
            return;
        }
        self.address = address;
        self.reclaim_at = None;
        self.reclaim_wait_us = RECLAIM_FIRST_US;
        if self.has_records() {
            self.use_base_name();
        }
        self.probe_afresh(now);
    }

    /// Sets the IPv6 addresses to answer with (at most [`MAX_IPV6_ADDRESSES`]; the rest are
    /// left out). Once the name is ours, a changed set is announced again (RFC 6762 §8.4);
    /// while probing, the probes carry the new set; a responder that had no address at all
    /// starts probing.
    pub fn set_ipv6_addresses(&mut self, addresses: &[Ipv6LinkAddress], now: Instant) {
        let mut sorted: heapless::Vec<Ipv6LinkAddress, MAX_IPV6_ADDRESSES> =
            addresses.iter().copied().take(MAX_IPV6_ADDRESSES).collect();
        sorted.sort_unstable();
        if sorted == self.ipv6 {
            return;
        }
        let had_records = self.has_records();
        self.ipv6 = sorted;
        match self.state {
            _ if !self.has_records() => self.state = ResponderState::Idle,
            ResponderState::Idle => {
                if !had_records {
                    self.use_base_name();
                }
                self.probe_afresh(now);
            }
            ResponderState::Ready | ResponderState::Announcing { .. } => {
                self.state = ResponderState::Announcing { sent: 0, next: now };
            }
            ResponderState::Probing { .. } => {}
        }
    }

    /// Whether there is any record to answer with.
    fn has_records(&self) -> bool {
        self.address.is_some() || !self.ipv6.is_empty()
    }

    /// Probing from the start (after the first-probe jitter), or silence without records.
    fn probe_afresh(&mut self, now: Instant) {
        self.state = if self.has_records() {
            ResponderState::Probing {
                sent: 0,
                next: now.add_micros(self.jitter_us),
            }
        } else {
            ResponderState::Idle
        };
    }

    /// Our records, in the order the tie-break sorts them.
    fn records(&self) -> Records<'_> {
        Records {
            ipv4: self.address.map(|link| link.address),
            ipv6: &self.ipv6,
        }
    }

    /// Whether `source` is on the local link (RFC 6762 §11): in our IPv4 subnet or IPv4
    /// link-local; IPv6 link-local (fe80::/10) or in the prefix of one of our IPv6 addresses.
    pub fn is_on_link(&self, source: IpAddr) -> bool {
        match source {
            IpAddr::V4(source) => self
                .address
                .is_some_and(|link| link.is_on_link(source.octets())),
            IpAddr::V6(source) => {
                let source = source.octets();
                (source[0] == 0xfe && source[1] & 0xc0 == 0x80)
                    || self.ipv6.iter().any(|link| link.contains(source))
            }
        }
    }

    /// When [`MdnsResponder::poll`] next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            ResponderState::Probing { next, .. } | ResponderState::Announcing { next, .. } => {
                Some(next)
            }
            ResponderState::Ready => self.reclaim_at,
            ResponderState::Idle => None,
        }
    }

    /// Advances probing and announcing; returns the length of a datagram written into `out`
    /// for the multicast group, if one is due. `out` should hold at least 512 bytes.
    pub fn poll(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        if !self.has_records() {
            return None;
        }
        match self.state {
            ResponderState::Probing { sent, next } if now >= next => {
                if sent < PROBE_COUNT {
                    self.state = ResponderState::Probing {
                        sent: sent + 1,
                        next: now.add_micros(PROBE_INTERVAL_US),
                    };
                    // The first probe asks for a unicast reply (§8.1), later ones do not.
                    write_probe(&self.name, self.records(), sent == 0, out)
                } else {
                    log::info!("mdns: {}.local is ours", self.name);
                    if self.attempt > 1 {
                        // A suffixed name: try the own one again later, less often each time
                        // it is still taken.
                        self.reclaim_at = Some(now.add_micros(self.reclaim_wait_us));
                        self.reclaim_wait_us =
                            self.reclaim_wait_us.saturating_mul(2).min(RECLAIM_MAX_US);
                    } else {
                        self.reclaim_at = None;
                        self.reclaim_wait_us = RECLAIM_FIRST_US;
                    }
                    self.state = ResponderState::Announcing { sent: 0, next: now };
                    self.poll(now, out)
                }
            }
            ResponderState::Announcing { sent, next } if now >= next => {
                self.state = if sent + 1 >= ANNOUNCE_COUNT {
                    ResponderState::Ready
                } else {
                    ResponderState::Announcing {
                        sent: sent + 1,
                        next: now.add_micros(ANNOUNCE_INTERVAL_US),
                    }
                };
                write_answer(&self.name, self.records(), Asked::BOTH, None, out)
            }
            ResponderState::Ready if self.reclaim_at.is_some_and(|at| now >= at) => {
                self.reclaim_at = None;
                log::info!(
                    "mdns: trying {}.local again (in use meanwhile: {}.local)",
                    self.base,
                    self.name
                );
                self.use_base_name();
                self.state = ResponderState::Probing { sent: 0, next: now };
                self.poll(now, out)
            }
            _ => None,
        }
    }

    /// Handles one received datagram. Returns the length and destination of a reply written
    /// into `out`, if one is owed. Malformed datagrams are ignored (returned as an error for
    /// the caller to count); so are datagrams from off the link that were sent straight to us
    /// or would be answered straight back (RFC 6762 §11, §5.5: a router may have forwarded
    /// them from anywhere, and the answer would go back through it).
    pub fn handle(
        &mut self,
        datagram: &[u8],
        origin: Origin,
        now: Instant,
        out: &mut [u8],
    ) -> Result<Option<(usize, Destination)>, MdnsError> {
        if !self.has_records() {
            return Ok(None);
        }
        let message = Message::parse(datagram)?;
        let unicast_reply = origin.port != MDNS_PORT;
        if (!origin.to_group || unicast_reply) && !self.is_on_link(origin.address) {
            self.off_link = self.off_link.saturating_add(1);
            return Ok(None);
        }
        let labels = [self.name.as_bytes(), b"local".as_slice()];
        let records = self.records();
        if message.flags & FLAG_RESPONSE != 0 {
            // A response: does someone else claim our name with an address of theirs (§9)?
            let mut offset = message.records_start;
            for _ in 0..message.record_count() {
                let (record, next) = read_record(datagram, offset)?;
                offset = next;
                let address_record = record.rtype == TYPE_A || record.rtype == TYPE_AAAA;
                if address_record
                    && !records.holds(record.rtype, record.data)
                    && name_matches(datagram, record.name_offset, &labels)?
                {
                    self.on_conflict(now, Claim::Answered);
                    return Ok(None);
                }
            }
            return Ok(None);
        }
        if let ResponderState::Probing { .. } = self.state {
            // A query while probing: another host probing for the same name puts its
            // proposed records in the authority section; the tie-break (§8.2) decides.
            let claim = tie_break(datagram, &message, &labels, records)?;
            if claim != Claim::None {
                self.on_conflict(now, claim);
            }
            // Not ours yet: nothing to answer with.
            return Ok(None);
        }
        if self.state == ResponderState::Idle {
            return Ok(None);
        }
        let mut offset = HEADER_LEN;
        let mut asked = Asked::default();
        let mut first_type = None;
        for _ in 0..message.questions {
            let name_offset = offset;
            offset = skip_name(datagram, offset)?;
            let qtype = read_u16(datagram, offset)?;
            let qclass = read_u16(datagram, offset + 2)? & !UNICAST_RESPONSE;
            offset += 4;
            let wanted = match qtype {
                TYPE_A => Asked {
                    a: true,
                    aaaa: false,
                },
                TYPE_AAAA => Asked {
                    a: false,
                    aaaa: true,
                },
                TYPE_ANY => Asked::BOTH,
                _ => continue,
            };
            if (qclass == CLASS_IN || qclass == CLASS_ANY)
                && name_matches(datagram, name_offset, &labels)?
            {
                asked.a |= wanted.a;
                asked.aaaa |= wanted.aaaa;
                first_type.get_or_insert(qtype);
            }
        }
        // Only what we hold is answered (no negative answers).
        let Some(qtype) = first_type.filter(|_| records.answers(asked) > 0) else {
            return Ok(None);
        };
        if unicast_reply {
            // Legacy unicast resolver (§6.7): same ID, question echoed, short TTL.
            let len = write_answer(&self.name, records, asked, Some((message.id, qtype)), out);
            Ok(len.map(|len| (len, Destination::Unicast(origin.address, origin.port))))
        } else {
            Ok(write_answer(&self.name, records, asked, None, out)
                .map(|len| (len, Destination::Multicast)))
        }
    }

    /// Back to the configured hostname, without a suffix.
    fn use_base_name(&mut self) {
        self.attempt = 1;
        self.name = self.base.clone();
    }

    /// Another host claims the name. While probing, a contradicting response means the name
    /// is taken: pick the next one (§8.1); a lost tie-break means waiting a second and
    /// probing again for the same name (§8.2), which the winner will then answer. Once the
    /// name is ours, a contradicting response sends us back to probing for the same name
    /// (§9): a single forged or stale response does not rename the host, a real owner
    /// answers the probes and does.
    fn on_conflict(&mut self, now: Instant, claim: Claim) {
        self.conflicts = self.conflicts.saturating_add(1);
        self.recent_conflicts[self.conflict_next] = Some(now);
        self.conflict_next = (self.conflict_next + 1) % CONFLICT_BURST;
        // The oldest of the last 15 conflicts (this one included), if there were 15.
        let burst = self.recent_conflicts[self.conflict_next]
            .is_some_and(|oldest| now.micros_since(oldest) < CONFLICT_WINDOW_US);
        let mut delay = if burst {
            CONFLICT_BACKOFF_US
        } else {
            self.jitter_us
        };
        let probing = matches!(self.state, ResponderState::Probing { .. });
        if !probing {
            log::warn!(
                "mdns: another host answers for {}.local; probing for it again",
                self.name
            );
        } else if claim == Claim::ProbeWins {
            log::info!(
                "mdns: lost a simultaneous probe for {}.local; probing again in 1 s",
                self.name
            );
            delay = delay.max(TIE_BREAK_WAIT_US);
        } else {
            self.rename();
        }
        self.state = ResponderState::Probing {
            sent: 0,
            next: now.add_micros(delay),
        };
    }

    /// Picks the next name: the hostname with `-2`, `-3`, ... (trimmed to fit a label).
    fn rename(&mut self) {
        self.attempt = self.attempt.saturating_add(1);
        let mut name: String<MAX_LABEL_LEN> = String::new();
        let mut suffix: String<12> = String::new();
        // Cannot fail: "-" and a u32 fit in 12 bytes.
        let _ = core::fmt::write(&mut suffix, format_args!("-{}", self.attempt));
        let keep = self.base.len().min(MAX_LABEL_LEN - suffix.len());
        // The base is ASCII (checked in `new`), so any byte index is a char boundary.
        let _ = name.push_str(&self.base[..keep]);
        let _ = name.push_str(&suffix);
        log::warn!(
            "mdns: {}.local is taken by another host; trying {}.local",
            self.name,
            name
        );
        self.name = name;
    }
}

/// Our address records: the A record (if any) and the AAAA records, sorted.
#[derive(Clone, Copy)]
struct Records<'a> {
    ipv4: Option<[u8; 4]>,
    ipv6: &'a [Ipv6LinkAddress],
}

/// Which record types a query asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Asked {
    a: bool,
    aaaa: bool,
}

impl Asked {
    const BOTH: Asked = Asked {
        a: true,
        aaaa: true,
    };
}

/// Most records of another host's probe compared in the tie-break; a probe with more wins.
const MAX_PROBE_RECORDS: usize = 16;

impl Records<'_> {
    /// Whether `data` is ours as a record of type `rtype` (A or AAAA).
    fn holds(&self, rtype: u16, data: &[u8]) -> bool {
        match rtype {
            TYPE_A => self.ipv4.is_some_and(|address| address == data),
            _ => self.ipv6.iter().any(|link| link.address == data),
        }
    }

    /// How many records answer `asked`.
    fn answers(&self, asked: Asked) -> usize {
        let a = usize::from(asked.a && self.ipv4.is_some());
        a + if asked.aaaa { self.ipv6.len() } else { 0 }
    }

    /// Our records as (class, type, rdata), in the tie-break's order: A (type 1) first, then
    /// the AAAA records (type 28) by address.
    fn sorted(&self) -> impl Iterator<Item = (u16, u16, &[u8])> {
        let a = self.ipv4.as_ref().map(|a| (CLASS_IN, TYPE_A, a.as_slice()));
        let aaaa = self
            .ipv6
            .iter()
            .map(|link| (CLASS_IN, TYPE_AAAA, link.address.as_slice()));
        a.into_iter().chain(aaaa)
    }
}

/// The simultaneous-probe tie-break (RFC 6762 §8.2) between our records and the ones another
/// host's probe proposes for our name in its authority section. Both sets are sorted (class,
/// then type, then rdata as unsigned bytes) and compared record by record: the first
/// difference decides, the lexicographically later set wins; a set that runs out first loses;
/// identical sets are our own probe echoed (no conflict).
fn tie_break(
    datagram: &[u8],
    message: &Message,
    labels: &[&[u8]],
    ours: Records<'_>,
) -> Result<Claim, MdnsError> {
    let mut offset = message.records_start;
    for _ in 0..message.answers {
        offset = read_record(datagram, offset)?.1;
    }
    let mut theirs: heapless::Vec<(u16, u16, &[u8]), MAX_PROBE_RECORDS> = heapless::Vec::new();
    for _ in 0..message.authorities {
        let (record, next) = read_record(datagram, offset)?;
        offset = next;
        if !name_matches(datagram, record.name_offset, labels)? {
            continue;
        }
        let key = (record.class & !CACHE_FLUSH, record.rtype, record.data);
        if theirs.push(key).is_err() {
            // More records than we keep: theirs is the larger set; let it win (we wait a
            // second and probe again, which is the safe side).
            return Ok(Claim::ProbeWins);
        }
    }
    if theirs.is_empty() {
        return Ok(Claim::None);
    }
    theirs.sort_unstable();
    let mut ours = ours.sorted();
    for their in &theirs {
        let Some(our) = ours.next() else {
            // Ours ran out first: theirs has more, and wins.
            return Ok(Claim::ProbeWins);
        };
        match our.cmp(their) {
            core::cmp::Ordering::Greater => return Ok(Claim::None),
            core::cmp::Ordering::Less => return Ok(Claim::ProbeWins),
            core::cmp::Ordering::Equal => {}
        }
    }
    // Theirs ran out: we win if we have records left; identical sets are no conflict.
    Ok(Claim::None)
}

/// The parts of a DNS message header the responder needs.
struct Message {
    id: u16,
    flags: u16,
    questions: u16,
    answers: u16,
    authorities: u16,
    additionals: u16,
    /// Offset of the first record after the questions.
    records_start: usize,
}

impl Message {
    fn parse(data: &[u8]) -> Result<Self, MdnsError> {
        if data.len() < HEADER_LEN {
            return Err(MdnsError::Malformed);
        }
        let questions = read_u16(data, 4)?;
        let mut offset = HEADER_LEN;
        for _ in 0..questions {
            offset = skip_name(data, offset)? + 4;
            if offset > data.len() {
                return Err(MdnsError::Malformed);
            }
        }
        Ok(Self {
            id: read_u16(data, 0)?,
            flags: read_u16(data, 2)?,
            questions,
            answers: read_u16(data, 6)?,
            authorities: read_u16(data, 8)?,
            additionals: read_u16(data, 10)?,
            records_start: offset,
        })
    }

    /// Answer, authority and additional records together.
    fn record_count(&self) -> u32 {
        u32::from(self.answers) + u32::from(self.authorities) + u32::from(self.additionals)
    }
}

/// One resource record, as much as the responder reads of it.
struct Record<'a> {
    name_offset: usize,
    rtype: u16,
    class: u16,
    data: &'a [u8],
}

fn read_record(data: &[u8], offset: usize) -> Result<(Record<'_>, usize), MdnsError> {
    let name_offset = offset;
    let offset = skip_name(data, offset)?;
    let rtype = read_u16(data, offset)?;
    let class = read_u16(data, offset + 2)?;
    let len = usize::from(read_u16(data, offset + 8)?);
    let start = offset + 10;
    let rdata = data.get(start..start + len).ok_or(MdnsError::Malformed)?;
    Ok((
        Record {
            name_offset,
            rtype,
            class,
            data: rdata,
        },
        start + len,
    ))
}

fn read_u16(data: &[u8], offset: usize) -> Result<u16, MdnsError> {
    match data.get(offset..offset + 2) {
        Some(b) => Ok(u16::from_be_bytes([b[0], b[1]])),
        None => Err(MdnsError::Malformed),
    }
}

/// Returns the offset just past the name at `offset` (past its first pointer, if any).
fn skip_name(data: &[u8], mut offset: usize) -> Result<usize, MdnsError> {
    loop {
        let len = *data.get(offset).ok_or(MdnsError::Malformed)?;
        match len {
            0 => return Ok(offset + 1),
            l if l & 0xc0 == 0xc0 => {
                data.get(offset + 1).ok_or(MdnsError::Malformed)?;
                return Ok(offset + 2);
            }
            l if l & 0xc0 != 0 => return Err(MdnsError::Malformed),
            l => offset += 1 + usize::from(l),
        }
    }
}

/// Whether the (possibly compressed) name at `offset` is exactly `labels`, ignoring ASCII
/// case (RFC 6762 §16).
fn name_matches(data: &[u8], mut offset: usize, labels: &[&[u8]]) -> Result<bool, MdnsError> {
    let mut index = 0;
    let mut hops = 0;
    let mut matches = true;
    loop {
        let len = *data.get(offset).ok_or(MdnsError::Malformed)?;
        if len & 0xc0 == 0xc0 {
            hops += 1;
            if hops > MAX_POINTER_HOPS {
                return Err(MdnsError::Malformed);
            }
            let low = *data.get(offset + 1).ok_or(MdnsError::Malformed)?;
            offset = (usize::from(len & 0x3f) << 8) | usize::from(low);
            continue;
        }
        if len & 0xc0 != 0 {
            return Err(MdnsError::Malformed);
        }
        if len == 0 {
            return Ok(matches && index == labels.len());
        }
        let label = data
            .get(offset + 1..offset + 1 + usize::from(len))
            .ok_or(MdnsError::Malformed)?;
        matches &= labels
            .get(index)
            .is_some_and(|want| want.eq_ignore_ascii_case(label));
        index += 1;
        offset += 1 + usize::from(len);
    }
}

/// Appends bytes to a buffer, failing once it is full.
struct Writer<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.len + bytes.len();
        self.out.get_mut(self.len..end)?.copy_from_slice(bytes);
        self.len = end;
        Some(())
    }

    fn u16(&mut self, value: u16) -> Option<()> {
        self.bytes(&value.to_be_bytes())
    }

    fn u32(&mut self, value: u32) -> Option<()> {
        self.bytes(&value.to_be_bytes())
    }

    fn name(&mut self, label: &str) -> Option<()> {
        // A label is at most 63 bytes (checked when the name is made), so it fits a u8.
        self.bytes(&[label.len() as u8])?;
        self.bytes(label.as_bytes())?;
        self.bytes(b"\x05local\x00")
    }
}

/// Writes a response carrying the records `asked` for in the answer section and our other
/// address records in the additional section (RFC 6762 §6.2). With `legacy` (the query's ID
/// and type), it is a legacy unicast reply: that ID, the question echoed, no cache-flush bit,
/// a short TTL.
fn write_answer(
    name: &str,
    records: Records<'_>,
    asked: Asked,
    legacy: Option<(u16, u16)>,
    out: &mut [u8],
) -> Option<usize> {
    let answers = records.answers(asked);
    let additional = records.answers(Asked::BOTH) - answers;
    let mut w = Writer { out, len: 0 };
    w.u16(legacy.map_or(0, |(id, _)| id))?;
    w.u16(FLAG_RESPONSE | FLAG_AUTHORITATIVE)?;
    w.u16(u16::from(legacy.is_some()))?;
    // At most 1 + MAX_IPV6_ADDRESSES records.
    w.u16(answers as u16)?;
    w.u16(0)?;
    w.u16(additional as u16)?;
    let (class, ttl) = match legacy {
        Some((_, qtype)) => {
            w.name(name)?;
            w.u16(qtype)?;
            w.u16(CLASS_IN)?;
            (CLASS_IN, LEGACY_TTL)
        }
        None => (CLASS_IN | CACHE_FLUSH, RECORD_TTL),
    };
    // Answers first, then the additional records; the first record written spells the name
    // out unless the question did, every later one points at offset 12.
    let mut named = legacy.is_some();
    let a = records
        .ipv4
        .as_ref()
        .map(|address| (TYPE_A, address.as_slice()));
    let aaaa = records
        .ipv6
        .iter()
        .map(|link| (TYPE_AAAA, link.address.as_slice()));
    let all = || a.into_iter().chain(aaaa.clone());
    let wanted = |rtype: u16| if rtype == TYPE_A { asked.a } else { asked.aaaa };
    let in_answers = all().filter(|(rtype, _)| wanted(*rtype));
    let in_additional = all().filter(|(rtype, _)| !wanted(*rtype));
    for (rtype, data) in in_answers.chain(in_additional) {
        if named {
            w.u16(0xc000 | HEADER_LEN as u16)?;
        } else {
            w.name(name)?;
            named = true;
        }
        w.u16(rtype)?;
        w.u16(class)?;
        w.u32(ttl)?;
        // 4 or 16 bytes.
        w.u16(data.len() as u16)?;
        w.bytes(data)?;
    }
    Some(w.len)
}

/// Writes a probe (RFC 6762 §8.1): a question of type ANY for the name, and our proposed
/// address records in the authority section.
fn write_probe(name: &str, records: Records<'_>, unicast: bool, out: &mut [u8]) -> Option<usize> {
    let mut w = Writer { out, len: 0 };
    w.u16(0)?;
    w.u16(0)?;
    w.u16(1)?;
    w.u16(0)?;
    // At most 1 + MAX_IPV6_ADDRESSES records.
    w.u16(records.answers(Asked::BOTH) as u16)?;
    w.u16(0)?;
    w.name(name)?;
    w.u16(TYPE_ANY)?;
    w.u16(CLASS_IN | if unicast { UNICAST_RESPONSE } else { 0 })?;
    for (class, rtype, data) in records.sorted() {
        w.u16(0xc000 | HEADER_LEN as u16)?;
        w.u16(rtype)?;
        w.u16(class)?;
        w.u32(RECORD_TTL)?;
        w.u16(data.len() as u16)?;
        w.bytes(data)?;
    }
    Some(w.len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    const ADDR: [u8; 4] = [192, 168, 77, 2];
    const LINK: LinkAddress = LinkAddress {
        address: ADDR,
        prefix_len: 24,
    };
    /// A full mDNS querier on the link, sending to the group.
    const LAPTOP: Origin = Origin {
        address: IpAddr::V4(core::net::Ipv4Addr::new(192, 168, 77, 1)),
        port: MDNS_PORT,
        to_group: true,
    };

    /// A query as `avahi-resolve -4 -n bramble.local` sends it: ID 0, one question, QM.
    fn query(name: &[&str], qtype: u16, id: u16) -> Vec<u8> {
        let mut q = Vec::new();
        q.extend_from_slice(&id.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        q
    }

    /// A response from another host claiming `name` with `address`, compressed name.
    fn foreign_answer(name: &str, address: [u8; 4]) -> Vec<u8> {
        let mut r = std::vec![0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        r.push(name.len() as u8);
        r.extend_from_slice(name.as_bytes());
        r.extend_from_slice(b"\x05local\x00");
        r.extend_from_slice(&[0, 1, 0x80, 1, 0, 0, 0, 120, 0, 4]);
        r.extend_from_slice(&address);
        r
    }

    fn ready_responder() -> (MdnsResponder, Instant) {
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        let mut now = Instant::from_micros(1_000_000);
        r.set_address(Some(LINK), now);
        let mut out = [0u8; 512];
        for _ in 0..20 {
            r.poll(now, &mut out);
            if r.state() == ResponderState::Ready {
                break;
            }
            now = r.next_deadline().unwrap_or(now);
        }
        assert_eq!(r.state(), ResponderState::Ready);
        (r, now)
    }

    #[test]
    fn rejects_bad_hostnames() {
        assert_eq!(
            MdnsResponder::new("", 0).unwrap_err(),
            MdnsError::InvalidHostname
        );
        assert_eq!(
            MdnsResponder::new("a.b", 0).unwrap_err(),
            MdnsError::InvalidHostname
        );
        let long = "x".repeat(64);
        assert_eq!(
            MdnsResponder::new(&long, 0).unwrap_err(),
            MdnsError::InvalidHostname
        );
        assert!(MdnsResponder::new("my-pi-2", 0).is_ok());
    }

    #[test]
    fn probes_three_times_then_announces_twice() {
        let mut r = MdnsResponder::new("bramble", 100_000).unwrap();
        let mut out = [0u8; 512];
        let start = Instant::from_micros(5_000_000);
        assert_eq!(r.poll(start, &mut out), None, "silent without an address");
        r.set_address(Some(LINK), start);
        assert_eq!(r.next_deadline(), Some(start.add_micros(100_000)));
        assert_eq!(r.poll(start, &mut out), None, "waits for its jitter");

        let mut now = start.add_micros(100_000);
        let mut probes = Vec::new();
        for _ in 0..3 {
            let len = r.poll(now, &mut out).expect("probe due");
            probes.push(out[..len].to_vec());
            now = r.next_deadline().unwrap();
        }
        // Probe: a question for bramble.local type ANY, our A record in authority.
        let p = &probes[0];
        assert_eq!(&p[..12], &[0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0]);
        assert_eq!(&p[12..27], b"\x07bramble\x05local\x00");
        assert_eq!(
            &p[27..31],
            &[0, 255, 0x80, 1],
            "type ANY, QU bit on the first probe"
        );
        assert_eq!(&p[31..33], &[0xc0, 12]);
        assert_eq!(&p[33..43], &[0, 1, 0, 1, 0, 0, 0, 120, 0, 4]);
        assert_eq!(&p[43..], &ADDR);
        assert_eq!(
            &probes[1][27..31],
            &[0, 255, 0, 1],
            "later probes ask for multicast"
        );
        assert_eq!(now, start.add_micros(100_000 + 3 * 250_000));

        // After the third probe's wait, the first announcement; a second one 1 s later.
        let len = r.poll(now, &mut out).expect("first announcement");
        let a = out[..len].to_vec();
        assert_eq!(&a[..12], &[0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(&a[12..27], b"\x07bramble\x05local\x00");
        assert_eq!(&a[27..37], &[0, 1, 0x80, 1, 0, 0, 0, 120, 0, 4]);
        assert_eq!(&a[37..], &ADDR);
        let next = r.next_deadline().unwrap();
        assert_eq!(next, now.add_micros(1_000_000));
        assert_eq!(r.poll(now, &mut out), None);
        assert!(r.poll(next, &mut out).is_some());
        assert_eq!(r.state(), ResponderState::Ready);
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn answers_a_and_any_queries_for_its_name_any_case() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        for (name, qtype) in [
            (["bramble", "local"], TYPE_A),
            (["BRAMBLE", "Local"], TYPE_A),
            (["bramble", "local"], TYPE_ANY),
        ] {
            let (len, dest) = r
                .handle(&query(&name, qtype, 0), LAPTOP, now, &mut out)
                .unwrap()
                .expect("answered");
            assert_eq!(dest, Destination::Multicast);
            assert_eq!(&out[2..8], &[0x84, 0, 0, 0, 0, 1]);
            assert_eq!(&out[len - 4..len], &ADDR);
        }
    }

    #[test]
    fn ignores_other_names_types_and_responses() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        for q in [
            query(&["other", "local"], TYPE_A, 0),
            query(&["bramble", "local"], 28, 0), // AAAA
            query(&["bramble", "local", "x"], TYPE_A, 0),
            query(&["bramble"], TYPE_A, 0),
            foreign_answer("bramble", ADDR), // our own announcement echoed back
        ] {
            assert_eq!(r.handle(&q, LAPTOP, now, &mut out), Ok(None));
        }
        assert_eq!(r.name(), "bramble");
    }

    #[test]
    fn follows_compression_pointers_in_questions() {
        let (mut r, now) = ready_responder();
        // Two questions: "local" then "bramble" + pointer to "local" at offset 12.
        let mut q = std::vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0];
        q.extend_from_slice(b"\x05local\x00\x00\x01\x00\x01");
        q.extend_from_slice(b"\x07bramble\xc0\x0c\x00\x01\x00\x01");
        let mut out = [0u8; 512];
        assert!(r.handle(&q, LAPTOP, now, &mut out).unwrap().is_some());
    }

    #[test]
    fn legacy_unicast_query_gets_unicast_reply_with_its_id() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        let q = query(&["bramble", "local"], TYPE_A, 0xbeef);
        let (len, dest) = r
            .handle(
                &q,
                Origin {
                    port: 40000,
                    ..LAPTOP
                },
                now,
                &mut out,
            )
            .unwrap()
            .unwrap();
        assert_eq!(dest, Destination::Unicast([192, 168, 77, 1].into(), 40000));
        let a = &out[..len];
        assert_eq!(&a[..12], &[0xbe, 0xef, 0x84, 0, 0, 1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(&a[12..31], &q[12..31], "question echoed");
        assert_eq!(&a[31..43], &[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 10, 0, 4]);
        assert_eq!(&a[43..], &ADDR);
    }

    #[test]
    fn conflict_while_probing_renames_and_probes_again() {
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        let now = Instant::from_micros(1_000);
        r.set_address(Some(LINK), now);
        let mut out = [0u8; 512];
        assert!(r.poll(now, &mut out).is_some());
        let claim = foreign_answer("bramble", [192, 168, 77, 9]);
        assert_eq!(r.handle(&claim, LAPTOP, now, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble-2");
        assert_eq!(r.state(), ResponderState::Probing { sent: 0, next: now });
        let len = r.poll(now, &mut out).unwrap();
        assert_eq!(&out[12..23], b"\x09bramble-2\x05");
        assert!(len > 24);
        // A query for the old name is not ours any more once we are ready.
        let mut t = now;
        while r.state() != ResponderState::Ready {
            t = r.next_deadline().unwrap();
            r.poll(t, &mut out);
        }
        assert_eq!(
            r.handle(&query(&["bramble", "local"], 1, 0), LAPTOP, t, &mut out),
            Ok(None)
        );
        assert!(
            r.handle(&query(&["bramble-2", "local"], 1, 0), LAPTOP, t, &mut out)
                .unwrap()
                .is_some()
        );
    }

    /// A probe from another host for `name` proposing `address` (type ANY question, A record
    /// in the authority section with a compressed name).
    fn foreign_probe(name: &str, address: [u8; 4]) -> Vec<u8> {
        let mut p = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0];
        p.push(name.len() as u8);
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(b"\x05local\x00\x00\xff\x00\x01");
        p.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 120, 0, 4]);
        p.extend_from_slice(&address);
        p
    }

    /// Polls `r` until it is ready, from `now`; returns when that was.
    fn run_until_ready(r: &mut MdnsResponder, mut now: Instant) -> Instant {
        let mut out = [0u8; 512];
        for _ in 0..20 {
            r.poll(now, &mut out);
            if r.state() == ResponderState::Ready {
                return now;
            }
            now = r
                .next_deadline()
                .expect("probing or announcing has a deadline");
        }
        panic!("not ready after 20 steps: {:?}", r.state());
    }

    /// The name in a probe or announcement written by the responder.
    fn name_in(datagram: &[u8]) -> String<MAX_LABEL_LEN> {
        let len = usize::from(datagram[12]);
        let mut name = String::new();
        name.push_str(core::str::from_utf8(&datagram[13..13 + len]).unwrap())
            .unwrap();
        name
    }

    #[test]
    fn simultaneous_probe_tie_break_by_address() {
        let mut out = [0u8; 512];
        let now = Instant::from_micros(0);
        // A lower address probing for our name loses to us: we keep probing for it.
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        r.set_address(Some(LINK), now);
        r.poll(now, &mut out);
        let lower = foreign_probe("bramble", [192, 168, 77, 1]);
        assert_eq!(r.handle(&lower, LAPTOP, now, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble");
        assert!(matches!(r.state(), ResponderState::Probing { sent: 1, .. }));
        // Our own probe echoed back is no conflict either.
        assert_eq!(
            r.handle(&foreign_probe("bramble", ADDR), LAPTOP, now, &mut out),
            Ok(None)
        );
        assert_eq!(r.name(), "bramble");
        assert_eq!(r.conflicts(), 0);
        // A higher address wins: we defer, wait a second and probe for the same name again
        // (§8.2); the name is only given up when the winner then answers for it.
        let higher = foreign_probe("BRAMBLE", [192, 168, 77, 200]);
        assert_eq!(r.handle(&higher, LAPTOP, now, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble");
        let again = now.add_micros(TIE_BREAK_WAIT_US);
        assert_eq!(
            r.state(),
            ResponderState::Probing {
                sent: 0,
                next: again
            }
        );
        assert_eq!(r.poll(Instant(again.0 - 1), &mut out), None);
        let len = r.poll(again, &mut out).expect("probe again");
        assert_eq!(name_in(&out[..len]), "bramble");
        let answer = foreign_answer("bramble", [192, 168, 77, 200]);
        assert_eq!(r.handle(&answer, LAPTOP, again, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble-2");
        // Once the name is ours, another host's probe is answered (defended).
        let (mut r, t) = ready_responder();
        let reply = r.handle(
            &foreign_probe("bramble", [192, 168, 77, 200]),
            LAPTOP,
            t,
            &mut out,
        );
        assert!(matches!(reply, Ok(Some((_, Destination::Multicast)))));
        assert_eq!(r.name(), "bramble");
    }

    /// A probe from another host for `name` proposing the records `(class, type, rdata)`.
    fn probe_with(name: &str, records: &[(u16, u16, &[u8])]) -> Vec<u8> {
        let mut p = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, records.len() as u8, 0, 0];
        p.push(name.len() as u8);
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(b"\x05local\x00\x00\xff\x00\x01");
        for (class, rtype, data) in records {
            p.extend_from_slice(&[0xc0, 12]);
            p.extend_from_slice(&rtype.to_be_bytes());
            p.extend_from_slice(&class.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0, 120]);
            p.extend_from_slice(&(data.len() as u16).to_be_bytes());
            p.extend_from_slice(data);
        }
        p
    }

    #[test]
    fn tie_break_compares_class_then_type_then_data_over_the_whole_set() {
        const AAAA: u16 = 28;
        let v6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let lower = [192, 168, 77, 1];
        let cases: [(&str, Vec<u8>, bool); 6] = [
            // An IPv6-only host: AAAA (28) sorts after A (1), so it wins.
            ("aaaa only", probe_with("bramble", &[(1, AAAA, &v6)]), true),
            // Its A record sorts before ours: we win, whatever else it proposes.
            (
                "lower a and aaaa",
                probe_with("bramble", &[(1, AAAA, &v6), (1, TYPE_A, &lower)]),
                false,
            ),
            // The same A record as ours and one more: the longer set wins.
            (
                "ours and more",
                probe_with("bramble", &[(1, TYPE_A, &ADDR), (1, AAAA, &v6)]),
                true,
            ),
            // The cache-flush bit is not part of the class.
            (
                "flush bit",
                probe_with("bramble", &[(CLASS_IN | CACHE_FLUSH, TYPE_A, &lower)]),
                false,
            ),
            // A lower class sorts first, a higher one last.
            ("class 0", probe_with("bramble", &[(0, AAAA, &v6)]), false),
            // Records for another name do not count.
            ("other name", probe_with("other", &[(1, AAAA, &v6)]), false),
        ];
        for (label, probe, they_win) in cases {
            let mut r = MdnsResponder::new("bramble", 0).unwrap();
            let now = Instant::from_micros(0);
            r.set_address(Some(LINK), now);
            let mut out = [0u8; 512];
            r.poll(now, &mut out);
            assert_eq!(r.handle(&probe, LAPTOP, now, &mut out), Ok(None), "{label}");
            assert_eq!(r.conflicts(), u32::from(they_win), "{label}");
            let deferred = r.next_deadline() == Some(now.add_micros(TIE_BREAK_WAIT_US));
            assert_eq!(deferred, they_win, "{label}");
            assert_eq!(r.name(), "bramble", "{label}");
        }
    }

    #[test]
    fn one_forged_response_after_ready_does_not_rename() {
        // Review L5: a single forged response renamed the host for good. Once the name is
        // ours, a contradicting response sends us back to probing for the same name (§9);
        // nobody answers the probes, so the name stays.
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        let forged = foreign_answer("bramble", [192, 168, 77, 66]);
        assert_eq!(r.handle(&forged, LAPTOP, now, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble");
        assert!(matches!(r.state(), ResponderState::Probing { sent: 0, .. }));
        let mut probes = Vec::new();
        let mut t = now;
        while r.state() != ResponderState::Ready {
            if let Some(len) = r.poll(t, &mut out) {
                probes.push(name_in(&out[..len]));
            }
            t = r.next_deadline().unwrap_or(t);
        }
        assert!(probes.iter().all(|name| name == "bramble"), "{probes:?}");
        assert_eq!(r.name(), "bramble");
        assert_eq!(r.next_deadline(), None, "nothing to reclaim");
        assert!(
            r.handle(
                &query(&["bramble", "local"], TYPE_A, 0),
                LAPTOP,
                t,
                &mut out
            )
            .unwrap()
            .is_some()
        );
    }

    #[test]
    fn a_name_taken_while_probing_is_tried_again_with_back_off() {
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        let start = Instant::from_micros(0);
        r.set_address(Some(LINK), start);
        let mut out = [0u8; 512];
        r.poll(start, &mut out);
        let owner = [192, 168, 77, 9];
        r.handle(&foreign_answer("bramble", owner), LAPTOP, start, &mut out)
            .unwrap();
        assert_eq!(r.name(), "bramble-2");
        let ready = run_until_ready(&mut r, start);
        // The own name is tried again after a minute, then at doubling intervals while the
        // owner keeps defending it.
        let announcing = u64::from(ANNOUNCE_COUNT - 1) * ANNOUNCE_INTERVAL_US;
        let mut expected_wait = RECLAIM_FIRST_US;
        let mut at = ready;
        for _ in 0..8 {
            let reclaim = r.next_deadline().expect("a reclaim is scheduled");
            // Counted from the end of probing; the announcements took the rest.
            assert_eq!(reclaim.micros_since(at), expected_wait - announcing);
            assert_eq!(r.poll(Instant(reclaim.0 - 1), &mut out), None);
            let len = r.poll(reclaim, &mut out).expect("a probe for the own name");
            assert_eq!(name_in(&out[..len]), "bramble");
            // The owner answers the probe: back to the suffixed name.
            r.handle(&foreign_answer("bramble", owner), LAPTOP, reclaim, &mut out)
                .unwrap();
            assert_eq!(r.name(), "bramble-2");
            at = run_until_ready(&mut r, reclaim);
            expected_wait = (expected_wait * 2).min(RECLAIM_MAX_US);
        }
        assert_eq!(
            expected_wait, RECLAIM_MAX_US,
            "the wait is capped at an hour"
        );
        // The owner leaves: the next try takes the name back, and nothing more is scheduled.
        let reclaim = r.next_deadline().unwrap();
        r.poll(reclaim, &mut out);
        let back = run_until_ready(&mut r, reclaim);
        assert_eq!(r.name(), "bramble");
        assert_eq!(r.next_deadline(), None);
        assert!(
            r.handle(
                &query(&["bramble", "local"], TYPE_A, 0),
                LAPTOP,
                back,
                &mut out
            )
            .unwrap()
            .is_some()
        );
        // And a later forced rename starts again from a one-minute wait.
        r.set_address(None, back);
        r.set_address(Some(LINK), back);
        r.poll(back, &mut out);
        r.handle(&foreign_answer("bramble", owner), LAPTOP, back, &mut out)
            .unwrap();
        let ready = run_until_ready(&mut r, back);
        assert_eq!(
            r.next_deadline().map(|t| t.micros_since(ready)),
            Some(RECLAIM_FIRST_US - announcing)
        );
    }

    #[test]
    fn long_names_are_trimmed_to_fit_their_suffix() {
        let long = "a".repeat(63);
        let mut r = MdnsResponder::new(&long, 0).unwrap();
        let now = Instant::from_micros(0);
        r.set_address(Some(LINK), now);
        let mut out = [0u8; 512];
        r.poll(now, &mut out);
        r.handle(&foreign_answer(&long, [10, 0, 0, 1]), LAPTOP, now, &mut out)
            .unwrap();
        assert_eq!(r.name().len(), 63);
        assert!(r.name().ends_with("a-2"));
        assert!(matches!(r.state(), ResponderState::Probing { sent: 0, .. }));
    }

    #[test]
    fn a_burst_of_conflicts_slows_probing_to_one_per_five_seconds() {
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        let mut now = Instant::from_micros(0);
        r.set_address(Some(LINK), now);
        let mut out = [0u8; 512];
        // Each probe attempt is answered by a conflicting response at once.
        for i in 0..CONFLICT_BURST - 1 {
            now = r.next_deadline().unwrap();
            r.poll(now, &mut out).expect("probe");
            r.handle(
                &foreign_answer(r.name(), [10, 9, 9, 9]),
                LAPTOP,
                now,
                &mut out,
            )
            .unwrap();
            assert_eq!(r.conflicts(), i as u32 + 1);
            assert_eq!(
                r.next_deadline(),
                Some(now),
                "no wait before {} conflicts",
                i + 2
            );
        }
        // The 15th conflict within 10 s: the next probe waits 5 s.
        now = r.next_deadline().unwrap();
        r.poll(now, &mut out).expect("probe");
        r.handle(
            &foreign_answer(r.name(), [10, 9, 9, 9]),
            LAPTOP,
            now,
            &mut out,
        )
        .unwrap();
        assert_eq!(r.next_deadline(), Some(now.add_micros(CONFLICT_BACKOFF_US)));
        // After a quiet spell the window has moved on: no wait again.
        now = now.add_micros(CONFLICT_WINDOW_US + CONFLICT_BACKOFF_US);
        r.poll(now, &mut out).expect("probe");
        r.handle(
            &foreign_answer(r.name(), [10, 9, 9, 9]),
            LAPTOP,
            now,
            &mut out,
        )
        .unwrap();
        assert_eq!(r.next_deadline(), Some(now));
    }

    #[test]
    fn only_on_link_sources_are_answered_directly() {
        // RFC 6762 §11, §5.5 (review L5): a query sent straight to our address, or one that
        // would be answered straight back (legacy unicast), is answered only when its source
        // is on our subnet or IPv4 link-local; a router may have forwarded it from anywhere.
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        let q = query(&["bramble", "local"], TYPE_A, 7);
        let remote = [203, 0, 113, 5];
        let cases = [
            // (source, port, sent to the group, answered as)
            (
                [192, 168, 77, 1],
                MDNS_PORT,
                false,
                Some(Destination::Multicast),
            ),
            (
                [192, 168, 77, 1],
                40000,
                false,
                Some(Destination::Unicast([192, 168, 77, 1].into(), 40000)),
            ),
            (
                [169, 254, 3, 4],
                40000,
                false,
                Some(Destination::Unicast([169, 254, 3, 4].into(), 40000)),
            ),
            // To the group from an address outside the subnet: a misconfigured host on the
            // link (multicast is not routed); the answer goes to the group too.
            (remote, MDNS_PORT, true, Some(Destination::Multicast)),
            (remote, MDNS_PORT, false, None),
            (remote, 40000, false, None),
            (remote, 40000, true, None),
            ([192, 168, 78, 1], 53, false, None),
        ];
        let mut ignored = 0;
        for (address, port, to_group, answer) in cases {
            let origin = Origin {
                address: address.into(),
                port,
                to_group,
            };
            let reply = r.handle(&q, origin, now, &mut out).unwrap();
            assert_eq!(reply.map(|(_, d)| d), answer, "{origin:?}");
            ignored += u32::from(answer.is_none());
            assert_eq!(r.off_link_ignored(), ignored);
        }
        // A forged response sent straight to us from off the link is no conflict.
        let forged = foreign_answer("bramble", [192, 168, 77, 66]);
        let origin = Origin {
            address: remote.into(),
            port: MDNS_PORT,
            to_group: false,
        };
        assert_eq!(r.handle(&forged, origin, now, &mut out), Ok(None));
        assert_eq!((r.state(), r.conflicts()), (ResponderState::Ready, 0));
    }

    #[test]
    fn on_link_honours_the_prefix() {
        let link = |prefix_len| LinkAddress {
            address: [10, 1, 2, 3],
            prefix_len,
        };
        assert!(link(8).is_on_link([10, 200, 0, 1]));
        assert!(!link(16).is_on_link([10, 200, 0, 1]));
        assert!(link(32).is_on_link([10, 1, 2, 3]));
        assert!(!link(32).is_on_link([10, 1, 2, 4]));
        assert!(link(0).is_on_link([8, 8, 8, 8]));
        assert!(!link(40).is_on_link([10, 1, 2, 4]), "above 32 counts as 32");
        assert!(link(24).is_on_link([169, 254, 9, 9]), "IPv4 link-local");
    }

    #[test]
    fn address_change_restarts_probing_and_none_silences() {
        let (mut r, now) = ready_responder();
        r.set_address(
            Some(LinkAddress {
                address: [10, 0, 0, 5],
                prefix_len: 8,
            }),
            now,
        );
        assert!(matches!(r.state(), ResponderState::Probing { .. }));
        r.set_address(None, now);
        assert_eq!(r.state(), ResponderState::Idle);
        let mut out = [0u8; 512];
        assert_eq!(
            r.handle(&query(&["bramble", "local"], 1, 0), LAPTOP, now, &mut out),
            Ok(None)
        );
    }

    #[test]
    fn malformed_datagrams_are_errors_not_panics() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        let good = query(&["bramble", "local"], TYPE_A, 0);
        for cut in 0..good.len() - 4 {
            let result = r.handle(&good[..cut], LAPTOP, now, &mut out);
            assert_eq!(result, Err(MdnsError::Malformed), "cut at {cut}");
        }
        // A name that points at itself.
        let mut looped = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        assert_eq!(
            r.handle(&looped, LAPTOP, now, &mut out),
            Err(MdnsError::Malformed)
        );
        // Reserved label type bits.
        let mut reserved = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        reserved.extend_from_slice(&[0x40, 0, 0, 1, 0, 1]);
        assert_eq!(
            r.handle(&reserved, LAPTOP, now, &mut out),
            Err(MdnsError::Malformed)
        );
        // Pseudo-random garbage, bounded: never panics.
        let mut seed = 0x1234_5678u32;
        for _ in 0..20_000 {
            let mut d = good.clone();
            for _ in 0..3 {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let i = (seed >> 8) as usize % d.len();
                d[i] = (seed >> 24) as u8;
            }
            let _ = r.handle(&d, LAPTOP, now, &mut out);
        }
    }

    const LL6: Ipv6LinkAddress = Ipv6LinkAddress {
        address: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 2],
        prefix_len: 64,
    };
    const GLOBAL6: Ipv6LinkAddress = Ipv6LinkAddress {
        address: [0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        prefix_len: 64,
    };
    /// A querier on the link, over IPv6 from its link-local address, to ff02::fb.
    const LAPTOP6: Origin = Origin {
        address: IpAddr::V6(core::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x77)),
        port: MDNS_PORT,
        to_group: true,
    };

    /// The address records in `datagram`'s answer and additional sections: (section, type,
    /// rdata), section 0 for answers, 2 for additional.
    fn records_in(datagram: &[u8]) -> Vec<(u8, u16, Vec<u8>)> {
        let message = Message::parse(datagram).unwrap();
        let mut offset = message.records_start;
        let mut out = Vec::new();
        for i in 0..message.record_count() {
            let (record, next) = read_record(datagram, offset).unwrap();
            offset = next;
            let section = if i < u32::from(message.answers) { 0 } else { 2 };
            out.push((section, record.rtype, record.data.to_vec()));
        }
        assert_eq!(offset, datagram.len(), "no bytes after the records");
        out
    }

    fn dual_stack_responder() -> (MdnsResponder, Instant) {
        let (mut r, now) = ready_responder();
        r.set_ipv6_addresses(&[GLOBAL6, LL6], now);
        let t = run_until_ready(&mut r, now);
        (r, t)
    }

    #[test]
    fn answers_aaaa_with_a_as_additional_and_the_reverse() {
        let (mut r, now) = dual_stack_responder();
        let mut out = [0u8; 512];
        let a = (0u8, TYPE_A, ADDR.to_vec());
        let ll = |section| (section, TYPE_AAAA, LL6.address.to_vec());
        let global = |section| (section, TYPE_AAAA, GLOBAL6.address.to_vec());
        for (qtype, expected) in [
            // AAAA records in address order (the probe tie-break's order).
            (
                TYPE_AAAA,
                std::vec![global(0), ll(0), (2, TYPE_A, ADDR.to_vec())],
            ),
            (TYPE_A, std::vec![a.clone(), global(2), ll(2)]),
            (TYPE_ANY, std::vec![a.clone(), global(0), ll(0)]),
        ] {
            for origin in [LAPTOP, LAPTOP6] {
                let q = query(&["bramble", "local"], qtype, 0);
                let (len, dest) = r
                    .handle(&q, origin, now, &mut out)
                    .unwrap()
                    .expect("answer");
                assert_eq!(dest, Destination::Multicast);
                assert_eq!(records_in(&out[..len]), expected, "type {qtype}");
            }
        }
        // A legacy resolver asking for AAAA gets its question echoed.
        let q = query(&["bramble", "local"], TYPE_AAAA, 0x77);
        let legacy = Origin {
            port: 40000,
            ..LAPTOP6
        };
        let (len, dest) = r.handle(&q, legacy, now, &mut out).unwrap().unwrap();
        assert_eq!(dest, Destination::Unicast(LAPTOP6.address, 40000));
        assert_eq!(&out[12..31], &q[12..31]);
        assert_eq!(
            records_in(&out[..len])[0],
            (0, TYPE_AAAA, GLOBAL6.address.to_vec())
        );
    }

    #[test]
    fn an_ipv6_only_responder_probes_announces_and_answers_aaaa() {
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        let now = Instant::from_micros(0);
        r.set_ipv6_addresses(&[LL6], now);
        assert!(matches!(r.state(), ResponderState::Probing { sent: 0, .. }));
        let mut out = [0u8; 512];
        let len = r.poll(now, &mut out).expect("probe");
        // The probe proposes the AAAA record in the authority section.
        assert_eq!(&out[..12], &[0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0]);
        assert_eq!(&out[len - 16..len], &LL6.address);
        let t = run_until_ready(&mut r, now);
        let q = query(&["bramble", "local"], TYPE_AAAA, 0);
        assert!(r.handle(&q, LAPTOP6, t, &mut out).unwrap().is_some());
        // Nothing to say to an A question: no negative answers.
        let q = query(&["bramble", "local"], TYPE_A, 0);
        assert_eq!(r.handle(&q, LAPTOP6, t, &mut out), Ok(None));
        // No addresses at all: silent.
        r.set_ipv6_addresses(&[], t);
        assert_eq!(r.state(), ResponderState::Idle);
    }

    #[test]
    fn a_new_ipv6_address_is_announced_without_probing() {
        let (mut r, now) = ready_responder();
        r.set_ipv6_addresses(&[LL6], now);
        assert_eq!(r.state(), ResponderState::Announcing { sent: 0, next: now });
        let mut out = [0u8; 512];
        let len = r.poll(now, &mut out).expect("announcement");
        assert_eq!(
            records_in(&out[..len]),
            [
                (0, TYPE_A, ADDR.to_vec()),
                (0, TYPE_AAAA, LL6.address.to_vec())
            ]
        );
        let t = run_until_ready(&mut r, now);
        // The same set again changes nothing; a renumbered one is announced again.
        r.set_ipv6_addresses(&[LL6], t);
        assert_eq!(r.state(), ResponderState::Ready);
        r.set_ipv6_addresses(&[LL6, GLOBAL6], t);
        assert!(matches!(r.state(), ResponderState::Announcing { .. }));
        assert_eq!(r.name(), "bramble");
    }

    #[test]
    fn ipv6_sources_are_answered_directly_only_from_the_link() {
        let (mut r, now) = dual_stack_responder();
        let mut out = [0u8; 512];
        let q = query(&["bramble", "local"], TYPE_AAAA, 7);
        let on_prefix =
            IpAddr::from([0x20, 0x01, 0x0d, 0xb8, 0, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        let remote = IpAddr::from([0x20, 0x01, 0x0d, 0xb8, 0, 0xf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
        for (address, answered) in [(LAPTOP6.address, true), (on_prefix, true), (remote, false)] {
            let origin = Origin {
                address,
                port: 40000,
                to_group: false,
            };
            let reply = r.handle(&q, origin, now, &mut out).unwrap();
            assert_eq!(reply.is_some(), answered, "{address}");
        }
        assert_eq!(r.off_link_ignored(), 1);
        assert!(GLOBAL6.contains(GLOBAL6.address));
        assert!(
            !Ipv6LinkAddress {
                prefix_len: 200,
                ..GLOBAL6
            }
            .contains(LL6.address)
        );
        assert!(
            Ipv6LinkAddress {
                prefix_len: 0,
                ..GLOBAL6
            }
            .contains(LL6.address)
        );
    }

    #[test]
    fn a_foreign_aaaa_answer_for_our_name_is_a_conflict_but_our_own_is_not() {
        let (mut r, now) = dual_stack_responder();
        let mut out = [0u8; 512];
        let answer = |address: [u8; 16]| {
            let mut m = std::vec![0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0];
            m.extend_from_slice(b"\x07bramble\x05local\x00");
            m.extend_from_slice(&[0, 28, 0x80, 1, 0, 0, 0, 120, 0, 16]);
            m.extend_from_slice(&address);
            m
        };
        assert_eq!(
            r.handle(&answer(LL6.address), LAPTOP6, now, &mut out),
            Ok(None)
        );
        assert_eq!(r.state(), ResponderState::Ready);
        let mut other = GLOBAL6.address;
        other[15] = 0x66;
        assert_eq!(r.handle(&answer(other), LAPTOP6, now, &mut out), Ok(None));
        assert!(matches!(r.state(), ResponderState::Probing { .. }));
        assert_eq!(r.conflicts(), 1);
    }

    #[test]
    fn the_tie_break_compares_whole_dual_stack_sets() {
        let v6 = LL6.address;
        let mut higher_v6 = v6;
        higher_v6[15] = 9;
        for (label, records, they_win) in [
            // Our exact set echoed back: no conflict.
            (
                "ours",
                std::vec![(1, TYPE_AAAA, &v6[..]), (1, TYPE_A, &ADDR[..])],
                false,
            ),
            // The same A, a later AAAA: theirs sorts later and wins.
            (
                "later aaaa",
                std::vec![(1, TYPE_A, &ADDR[..]), (1, TYPE_AAAA, &higher_v6[..])],
                true,
            ),
            // Only our A: ours has more left and wins.
            ("a only", std::vec![(1, TYPE_A, &ADDR[..])], false),
        ] {
            let mut r = MdnsResponder::new("bramble", 0).unwrap();
            let now = Instant::from_micros(0);
            r.set_address(Some(LINK), now);
            r.set_ipv6_addresses(&[LL6], now);
            let mut out = [0u8; 512];
            r.poll(now, &mut out);
            let probe = probe_with("bramble", &records);
            assert_eq!(r.handle(&probe, LAPTOP, now, &mut out), Ok(None), "{label}");
            assert_eq!(r.conflicts(), u32::from(they_win), "{label}");
        }
    }

    #[test]
    fn answer_does_not_overrun_a_small_buffer() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 20];
        assert_eq!(
            r.handle(&query(&["bramble", "local"], 1, 0), LAPTOP, now, &mut out),
            Ok(None)
        );
    }
}
