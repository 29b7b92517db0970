//! Dynamic DNS in the appliance: keeps one name's A and AAAA records on the home's addresses
//! with DNS UPDATE (RFC 2136) signed with TSIG ([`bramble_proto::dns_update`]), over one UDP socket
//! to the owner's name server. It never allocates (it runs without a TLS heap).
//!
//! What is published: A from the public IPv4 address the router reported
//! ([`crate::public`]; only a global one), or the interface's own address when the owner
//! says so; AAAA from the board's global IPv6 address
//! ([`bramble_proto::slaac::global_address`]: preferred, not link-local or unique-local;
//! SLAAC or static, a static one first). A family with nothing to publish is left alone, never
//! deleted: a board whose IPv6 is off does not wipe the owner's AAAA.
//!
//! When: only on a change. The addresses wanted are compared with those last confirmed by
//! the server; a difference waits [`SETTLE_MICROS`] of quiet (so that the IPv4 address and
//! the IPv6 one that follows it seconds later at boot go in one update, and a renumbering's
//! steps in one), then goes out as one signed message replacing each known family's RRset.
//! Nothing is ever sent again for the same addresses. After a restart the first update is
//! sent once (the board keeps no state on the card).
//!
//! Answers are checked by [`bramble_proto::dns_update::check_reply`]: only a NOERROR signed with the
//! key over our request confirms. A lost datagram is sent again after
//! [`RESEND_MICROS`] (the same message: the server applies an update once either way), up to
//! [`SENDS_PER_TRY`] times; a failed try is retried with exponential back-off from
//! [`FIRST_RETRY_MICROS`] to [`LONGEST_RETRY_MICROS`]; a refused signature (BADKEY, BADSIG:
//! the key is wrong) or a REFUSED/NOTAUTH/NOTZONE (the server will not take updates for this
//! name with this key) waits the longest at once. The clock must be set first: TSIG signs
//! the time.
//!
//! ACME's DNS-01 answers ([`crate::acme`]) go the same way: [`DdnsState::add_txt`] queues a
//! TXT record at `_acme-challenge.NAME` (added beside any other, since a name and its
//! wildcard share the owner name), [`DdnsState::txt_progress`] says when the server has
//! confirmed it, and [`DdnsState::remove_txt`] deletes each one when the order ends. TXT changes go before address
//! updates and are not held back by the address back-off; a failed one is reported, not
//! retried (the order fails, and is retried as a whole).

use crate::net::Net;
use bramble_hal::Instant;
use bramble_proto::dns_update::{
    BuildError, Change, MAC_LEN, Rcode, Rdata, ReplyError, TsigKey, build_update, check_reply,
};
use bramble_proto::slaac;
use bramble_tls::clock::CLOCK;
use bramble_tls::random::RANDOM;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::udp;
use smoltcp::wire::{IpAddress, IpCidr, IpEndpoint};

/// Quiet time after the addresses change before the update goes out.
pub const SETTLE_MICROS: u64 = 5_000_000;
/// How long to wait for the server's answer before sending the request again.
pub const RESEND_MICROS: u64 = 3_000_000;
/// Sends of one request before the try counts as failed.
pub const SENDS_PER_TRY: u32 = 3;
/// The first wait after a failed try.
pub const FIRST_RETRY_MICROS: u64 = 30_000_000;
/// The longest wait after failed tries (and the wait after a refused key).
pub const LONGEST_RETRY_MICROS: u64 = 3_600_000_000;
/// While waiting for the clock or an address, how often to look again.
const WAITING_RECHECK_MICROS: u64 = 1_000_000;
/// TTL of the records published: short, so that a change reaches resolvers soon.
pub const RECORD_TTL: u32 = 60;
/// TXT records (DNS-01 answers) kept at once: one per name of a certificate.
const MAX_TXT: usize = 4;
/// The longest TXT owner name: `_acme-challenge.` and a name.
const TXT_OWNER_LEN: usize = 16 + 253;
/// Largest DNS message sent or taken.
const MESSAGE_LEN: usize = 768;
/// The local port updates leave from.
const LOCAL_PORT: u16 = 50_053;

/// Where the A record's address comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ipv4Source {
    /// The public address learned ([`crate::public`]), when it is global.
    Public,
    /// The interface's own address.
    Interface,
    /// No A record.
    Off,
}

/// What the owner set.
#[derive(Clone, Copy, Debug)]
pub struct DdnsConfig<'a> {
    /// The name whose records follow the addresses.
    pub name: &'a str,
    /// The zone it is in.
    pub zone: &'a str,
    /// The name server's address and port.
    pub server: (core::net::IpAddr, u16),
    /// The TSIG key.
    pub key: TsigKey<'a>,
    /// Where the A record's address comes from.
    pub ipv4: Ipv4Source,
    /// Whether the AAAA record follows the global IPv6 address.
    pub ipv6: bool,
}

/// Memory for the update socket: one datagram each way.
pub struct DdnsMemory {
    rx_meta: [udp::PacketMetadata; 2],
    tx_meta: [udp::PacketMetadata; 1],
    rx: [u8; 2 * MESSAGE_LEN],
    tx: [u8; MESSAGE_LEN],
    message: [u8; MESSAGE_LEN],
    /// The DNS-01 TXT records (here, not in the appliance, so that a board without dynamic
    /// DNS does not carry their room).
    txt: heapless::Vec<TxtRecord, MAX_TXT>,
}

impl DdnsMemory {
    /// Empty buffers.
    pub const fn new() -> Self {
        Self {
            rx_meta: [udp::PacketMetadata::EMPTY; 2],
            tx_meta: [udp::PacketMetadata::EMPTY; 1],
            rx: [0; 2 * MESSAGE_LEN],
            tx: [0; MESSAGE_LEN],
            message: [0; MESSAGE_LEN],
            txt: heapless::Vec::new(),
        }
    }
}

impl Default for DdnsMemory {
    fn default() -> Self {
        Self::new()
    }
}

/// The addresses a name carries (or should): `None` for a family left alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// The A record's address.
    pub ipv4: Option<[u8; 4]>,
    /// The AAAA record's address.
    pub ipv6: Option<[u8; 16]>,
}

/// The last failure, for the status line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DdnsFailure {
    /// No answer after [`SENDS_PER_TRY`] sends.
    NoAnswer,
    /// The answer did not confirm the update.
    Reply(ReplyError),
    /// The message could not be built (a name too long).
    Build(BuildError),
    /// The socket would not take it.
    Send,
}

impl core::fmt::Display for DdnsFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DdnsFailure::NoAnswer => write!(f, "no answer after {SENDS_PER_TRY} sends"),
            DdnsFailure::Reply(error) => write!(f, "{error}"),
            DdnsFailure::Build(error) => write!(f, "the update cannot be built ({error:?})"),
            DdnsFailure::Send => f.write_str("the update could not be sent"),
        }
    }
}

/// Dynamic DNS's state, for the status line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdnsStatus {
    /// What the server last confirmed.
    pub published: Published,
    /// Updates confirmed since boot.
    pub updates: u32,
    /// Requests sent since boot (resends included).
    pub sends: u32,
    /// Failed tries in a row.
    pub failures: u32,
    /// The last failure.
    pub last_failure: Option<DdnsFailure>,
}

/// Where a DNS-01 TXT record stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TxtState {
    ToAdd,
    Adding,
    Added,
    Failed,
    ToRemove,
    Removing,
}

struct TxtRecord {
    owner: heapless::String<TXT_OWNER_LEN>,
    value: heapless::String<64>,
    state: TxtState,
}

/// How the TXT records asked for stand, for ACME.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxtProgress {
    /// Not all confirmed yet.
    Waiting,
    /// Every one asked for is confirmed by the server.
    Published,
    /// The server did not take one (the log says why).
    Failed,
}

/// What an update under way changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Job {
    Addresses(Published),
    /// The TXT records in state Adding or Removing.
    Txt,
}

/// An update under way.
struct InFlight {
    id: u16,
    mac: [u8; MAC_LEN],
    len: usize,
    signed_at: u64,
    job: Job,
    sends: u32,
    sent_at: Instant,
}

/// Dynamic DNS: the update socket, what the server confirmed, the update under way.
pub struct DdnsState<'a> {
    config: DdnsConfig<'a>,
    socket: SocketHandle,
    server: IpEndpoint,
    message: &'a mut [u8; MESSAGE_LEN],
    /// What the server confirmed; `None` for a family until then.
    published: Published,
    /// The addresses wanted as last seen, and since when.
    wanted: Published,
    wanted_since: Instant,
    in_flight: Option<InFlight>,
    /// No try before this (back-off).
    retry_at: Option<Instant>,
    /// The addresses the last failed try wanted: a change of them ends the back-off.
    failed_for: Option<Published>,
    next_id: u16,
    txt: &'a mut heapless::Vec<TxtRecord, MAX_TXT>,
    status: DdnsStatus,
    logged_clock_wait: bool,
}

/// The addresses to publish now on `net`: A as `ipv4` says, AAAA the global IPv6 address
/// when `ipv6` (RFC 2136 dynamic DNS and dyndns2 publish the same).
pub fn wanted_addresses(net: &Net<'_, '_>, ipv4: Ipv4Source, ipv6: bool) -> Published {
    let ipv4 = match ipv4 {
        Ipv4Source::Public => net.public.publishable(),
        Ipv4Source::Interface => net.iface.ipv4_addr().map(|a| a.octets()),
        Ipv4Source::Off => None,
    };
    let ipv6 = if ipv6 {
        slaac::global_address(net.ipv6_addresses())
    } else {
        None
    };
    Published { ipv4, ipv6 }
}

impl<'a> DdnsState<'a> {
    /// Starts keeping `config.name`'s records on the addresses, in `memory` and one socket
    /// added to `sockets`.
    pub fn new(
        config: DdnsConfig<'a>,
        memory: &'a mut DdnsMemory,
        sockets: &mut SocketSet<'a>,
        now: Instant,
    ) -> Self {
        let DdnsMemory {
            rx_meta,
            tx_meta,
            rx,
            tx,
            message,
            txt,
        } = memory;
        let mut socket = udp::Socket::new(
            udp::PacketBuffer::new(&mut rx_meta[..], &mut rx[..]),
            udp::PacketBuffer::new(&mut tx_meta[..], &mut tx[..]),
        );
        // Cannot fail: the port is not zero and the socket is new.
        let _ = socket.bind(LOCAL_PORT);
        let socket = sockets.add(socket);
        let mut id = [0u8; 2];
        let _ = RANDOM.fill_bytes(&mut id);
        let (address, port) = config.server;
        log::info!(
            "ddns: keeping {} up to date by DNS UPDATE to {address} port {port} (zone {}, key \
             {})",
            config.name,
            config.zone,
            config.key.name
        );
        DdnsState {
            config,
            socket,
            server: IpEndpoint::new(IpAddress::from(address), port),
            message,
            published: Published::default(),
            wanted: Published::default(),
            wanted_since: now,
            in_flight: None,
            retry_at: None,
            failed_for: None,
            next_id: u16::from_le_bytes(id),
            txt,
            status: DdnsStatus {
                published: Published::default(),
                updates: 0,
                sends: 0,
                failures: 0,
                last_failure: None,
            },
            logged_clock_wait: false,
        }
    }

    /// Dynamic DNS's state.
    pub fn status(&self) -> DdnsStatus {
        DdnsStatus {
            published: self.published,
            ..self.status
        }
    }

    /// Queues the TXT record `_acme-challenge.NAME` = `value` (a DNS-01 answer; `name`
    /// without a wildcard's `*.`).
    pub fn add_txt(&mut self, name: &str, value: &str) -> Result<(), &'static str> {
        let mut owner = heapless::String::new();
        owner
            .push_str("_acme-challenge.")
            .and_then(|()| owner.push_str(name))
            .map_err(|_| "the name is too long")?;
        let value = heapless::String::try_from(value).map_err(|_| "the TXT value is too long")?;
        self.txt
            .push(TxtRecord {
                owner,
                value,
                state: TxtState::ToAdd,
            })
            .map_err(|_| "too many TXT records at once")
    }

    /// How the TXT records asked for stand.
    pub fn txt_progress(&self) -> TxtProgress {
        let states = self.txt.iter().map(|record| record.state);
        if states.clone().any(|s| s == TxtState::Failed) {
            TxtProgress::Failed
        } else if states
            .clone()
            .any(|s| matches!(s, TxtState::ToAdd | TxtState::Adding))
        {
            TxtProgress::Waiting
        } else {
            TxtProgress::Published
        }
    }

    /// Deletes every TXT record added (the order is over).
    pub fn remove_txt(&mut self) {
        // Never sent: nothing to delete.
        self.txt.retain(|record| record.state != TxtState::ToAdd);
        for record in self.txt.iter_mut() {
            if matches!(record.state, TxtState::Added | TxtState::Failed) {
                record.state = TxtState::ToRemove;
            }
        }
    }

    /// Moves dynamic DNS on (called with the other sockets' work).
    pub fn poll(&mut self, net: &mut Net<'_, '_>, now: Instant) {
        let wanted = wanted_addresses(net, self.config.ipv4, self.config.ipv6);
        let has_source = net.iface.ip_addrs().iter().any(|cidr| {
            matches!(
                (cidr, self.server.addr),
                (IpCidr::Ipv4(_), IpAddress::Ipv4(_)) | (IpCidr::Ipv6(_), IpAddress::Ipv6(_))
            )
        });
        let socket = net.sockets.get_mut::<udp::Socket>(self.socket);
        self.step(wanted, has_source, socket, now);
    }

    /// When dynamic DNS next needs a poll.
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        if let Some(flight) = &self.in_flight {
            return Some(flight.sent_at.add_micros(RESEND_MICROS).max(now));
        }
        if self
            .txt
            .iter()
            .any(|record| matches!(record.state, TxtState::ToAdd | TxtState::ToRemove))
        {
            return Some(now.add_micros(WAITING_RECHECK_MICROS));
        }
        // Address changes come with polls of their own (DHCP, SLAAC, the router's report):
        // only the end of the settle time or of a back-off needs a wake-up.
        if !self.needs_update(&self.wanted) {
            return None;
        }
        let mut at = self.wanted_since.add_micros(SETTLE_MICROS);
        if let Some(retry) = self.retry_at {
            at = at.max(retry);
        }
        // Due, yet the poll just run did not send: it waits for the clock or an address.
        Some(if at <= now {
            now.add_micros(WAITING_RECHECK_MICROS)
        } else {
            at
        })
    }
}

impl DdnsState<'_> {
    /// Updates the server confirmed since boot.
    pub fn updates(&self) -> u32 {
        self.status.updates
    }

    /// Whether `wanted` needs an update: a family it knows differs from what the server has.
    fn needs_update(&self, wanted: &Published) -> bool {
        (wanted.ipv4.is_some() && wanted.ipv4 != self.published.ipv4)
            || (wanted.ipv6.is_some() && wanted.ipv6 != self.published.ipv6)
    }

    fn step(
        &mut self,
        wanted: Published,
        has_source: bool,
        socket: &mut udp::Socket<'_>,
        now: Instant,
    ) {
        if wanted != self.wanted {
            self.wanted = wanted;
            self.wanted_since = now;
            if self.failed_for.is_some_and(|failed| failed != wanted) {
                // New addresses: the back-off was for the old ones.
                self.retry_at = None;
                self.failed_for = None;
            }
        }
        if self.in_flight.is_some() {
            self.receive(socket, now);
        }
        if let Some(flight) = &mut self.in_flight {
            if now.micros_since(flight.sent_at) < RESEND_MICROS {
                return;
            }
            if flight.sends >= SENDS_PER_TRY {
                let job = flight.job;
                self.in_flight = None;
                self.settle_failure(job, DdnsFailure::NoAnswer, false, now);
                return;
            }
            // The same message again: an update the server already made is made once.
            flight.sends += 1;
            flight.sent_at = now;
            self.status.sends += 1;
            let (len, job) = (flight.len, flight.job);
            if socket
                .send_slice(&self.message[..len], self.server)
                .is_err()
            {
                self.in_flight = None;
                self.settle_failure(job, DdnsFailure::Send, false, now);
            }
            return;
        }
        if has_source
            && self
                .txt
                .iter()
                .any(|record| matches!(record.state, TxtState::ToAdd | TxtState::ToRemove))
        {
            if let Some(unix_now) = CLOCK.unix_seconds() {
                self.send_txt(unix_now, socket, now);
            }
            return;
        }
        if !self.needs_update(&wanted)
            || now.micros_since(self.wanted_since) < SETTLE_MICROS
            || self.retry_at.is_some_and(|at| now < at)
            || !has_source
        {
            return;
        }
        let Some(unix_now) = CLOCK.unix_seconds() else {
            if !self.logged_clock_wait {
                self.logged_clock_wait = true;
                log::info!("ddns: waiting for the clock (SNTP): TSIG signs the time");
            }
            return;
        };
        self.send(wanted, unix_now, socket, now);
    }

    /// Sends the TXT changes waiting: the additions, or else the removals.
    fn send_txt(&mut self, unix_now: u64, socket: &mut udp::Socket<'_>, now: Instant) {
        let adding = self
            .txt
            .iter()
            .any(|record| record.state == TxtState::ToAdd);
        let (from, to) = if adding {
            (TxtState::ToAdd, TxtState::Adding)
        } else {
            (TxtState::ToRemove, TxtState::Removing)
        };
        let mut changes: heapless::Vec<Change<'_>, MAX_TXT> = heapless::Vec::new();
        for record in self.txt.iter().filter(|record| record.state == from) {
            let rdata = Rdata::Txt(&record.value);
            let change = if adding {
                Change::Add {
                    name: &record.owner,
                    rdata,
                    ttl: RECORD_TTL,
                }
            } else {
                Change::Delete {
                    name: &record.owner,
                    rdata,
                }
            };
            let _ = changes.push(change);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let built = build_update(
            &mut self.message[..],
            id,
            self.config.zone,
            &changes,
            &self.config.key,
            unix_now,
        );
        let count = changes.len();
        drop(changes);
        for record in self.txt.iter_mut().filter(|record| record.state == from) {
            record.state = to;
        }
        match built {
            Ok(signed) => {
                log::info!(
                    "ddns: {} {count} TXT record(s) for ACME dns-01",
                    if adding { "adding" } else { "removing" }
                );
                self.transmit(id, signed, unix_now, Job::Txt, socket, now);
            }
            Err(error) => self.finish_txt(Some(DdnsFailure::Build(error))),
        }
    }

    /// Settles the TXT records under way: confirmed (`None`) or failed.
    fn finish_txt(&mut self, failure: Option<DdnsFailure>) {
        if let Some(failure) = failure {
            log::error!("ddns: the TXT records for ACME dns-01 were not changed: {failure}");
            self.status.last_failure = Some(failure);
        }
        for record in self.txt.iter_mut() {
            record.state = match (record.state, failure) {
                (TxtState::Adding, None) => TxtState::Added,
                (TxtState::Adding, Some(_)) => TxtState::Failed,
                (other, _) => other,
            };
        }
        // Removed (or given up on: a failed removal is not retried).
        self.txt.retain(|record| record.state != TxtState::Removing);
    }

    /// Sends a built message and keeps it for resending and for checking the answer.
    fn transmit(
        &mut self,
        id: u16,
        signed: bramble_proto::dns_update::Signed,
        unix_now: u64,
        job: Job,
        socket: &mut udp::Socket<'_>,
        now: Instant,
    ) {
        // A stale answer of an earlier try must not be read as this one's.
        while socket.recv().is_ok() {}
        self.status.sends += 1;
        if socket
            .send_slice(&self.message[..signed.len], self.server)
            .is_err()
        {
            self.settle_failure(job, DdnsFailure::Send, false, now);
            return;
        }
        self.in_flight = Some(InFlight {
            id,
            mac: signed.mac,
            len: signed.len,
            signed_at: unix_now,
            job,
            sends: 1,
            sent_at: now,
        });
    }

    /// A try of `job` failed: TXT changes are settled as failed, address updates back off.
    fn settle_failure(&mut self, job: Job, failure: DdnsFailure, hopeless: bool, now: Instant) {
        match job {
            Job::Txt => self.finish_txt(Some(failure)),
            Job::Addresses(_) => self.fail(failure, hopeless, now),
        }
    }

    fn send(
        &mut self,
        wanted: Published,
        unix_now: u64,
        socket: &mut udp::Socket<'_>,
        now: Instant,
    ) {
        let name = self.config.name;
        let mut changes: heapless::Vec<Change<'_>, 2> = heapless::Vec::new();
        if let Some(address) = wanted.ipv4 {
            let _ = changes.push(Change::Replace {
                name,
                rdata: Rdata::A(address),
                ttl: RECORD_TTL,
            });
        }
        if let Some(address) = wanted.ipv6 {
            let _ = changes.push(Change::Replace {
                name,
                rdata: Rdata::Aaaa(address),
                ttl: RECORD_TTL,
            });
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let signed = match build_update(
            &mut self.message[..],
            id,
            self.config.zone,
            &changes,
            &self.config.key,
            unix_now,
        ) {
            Ok(signed) => signed,
            Err(error) => {
                self.fail(DdnsFailure::Build(error), true, now);
                return;
            }
        };
        log::info!("ddns: updating {name}: {}", Shown(&wanted));
        self.transmit(id, signed, unix_now, Job::Addresses(wanted), socket, now);
    }

    /// Takes the server's answers: the first that is ours settles the try.
    fn receive(&mut self, socket: &mut udp::Socket<'_>, now: Instant) {
        let Some(flight) = &self.in_flight else {
            return;
        };
        let (id, mac, job) = (flight.id, flight.mac, flight.job);
        // The answer is checked against our clock (its time within the fudge of ours).
        let unix_now = CLOCK.unix_seconds().unwrap_or(flight.signed_at);
        while let Ok((datagram, meta)) = socket.recv() {
            if meta.endpoint.addr != self.server.addr || meta.endpoint.port != self.server.port {
                continue;
            }
            match check_reply(datagram, id, &mac, &self.config.key, unix_now) {
                Err(ReplyError::NotOurs) => continue,
                Ok(()) => {
                    self.in_flight = None;
                    let Job::Addresses(wanted) = job else {
                        log::info!("ddns: the TXT records for ACME dns-01 are changed");
                        self.finish_txt(None);
                        return;
                    };
                    if wanted.ipv4.is_some() {
                        self.published.ipv4 = wanted.ipv4;
                    }
                    if wanted.ipv6.is_some() {
                        self.published.ipv6 = wanted.ipv6;
                    }
                    self.status.updates += 1;
                    self.status.failures = 0;
                    self.status.last_failure = None;
                    self.retry_at = None;
                    self.failed_for = None;
                    log::info!("ddns: {} updated: {}", self.config.name, Shown(&wanted));
                    return;
                }
                Err(error) => {
                    self.in_flight = None;
                    let hopeless = matches!(
                        error,
                        ReplyError::Refused(..)
                            | ReplyError::BadSignature
                            | ReplyError::Failed(Rcode(5 | 9 | 10))
                    );
                    self.settle_failure(job, DdnsFailure::Reply(error), hopeless, now);
                    return;
                }
            }
        }
    }

    /// Counts a failed try and sets the back-off (the longest at once when `hopeless`).
    fn fail(&mut self, failure: DdnsFailure, hopeless: bool, now: Instant) {
        self.status.failures = self.status.failures.saturating_add(1);
        self.status.last_failure = Some(failure);
        let wait = if hopeless {
            LONGEST_RETRY_MICROS
        } else {
            let doublings = self.status.failures.saturating_sub(1).min(16);
            FIRST_RETRY_MICROS
                .saturating_mul(1 << doublings)
                .min(LONGEST_RETRY_MICROS)
        };
        self.retry_at = Some(now.add_micros(wait));
        self.failed_for = Some(self.wanted);
        log::error!(
            "ddns: {} not updated: {failure}; trying again in {} s",
            self.config.name,
            wait / 1_000_000
        );
    }
}

/// The addresses for a log line: `A 203.0.113.7, AAAA 2001:db8::1`.
pub(crate) struct Shown<'p>(pub(crate) &'p Published);

impl core::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut first = true;
        if let Some(v4) = self.0.ipv4 {
            write!(f, "A {}", core::net::Ipv4Addr::from(v4))?;
            first = false;
        }
        if let Some(v6) = self.0.ipv6 {
            if !first {
                f.write_str(", ")?;
            }
            write!(f, "AAAA {}", core::net::Ipv6Addr::from(v6))?;
        }
        Ok(())
    }
}
