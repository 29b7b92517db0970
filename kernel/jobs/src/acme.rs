//! ACME in the appliance: obtains and renews the HTTPS certificate by itself
//! (bramble-acme's order state machine over a TCP socket, a DNS socket and a TLS client),
//! answers HTTP-01 through the HTTP engine, keeps the certificate in the power-cut-safe store,
//! and starts HTTPS, or swaps in the renewed certificate, once one is in hand.
//!
//! With `acme_challenge = tls-alpn-01` the names are validated on the HTTPS port instead
//! (RFC 8737): each challenge's self-signed certificate goes into the TLS server's
//! configuration (bramble_tls::config, which answers ALPN `acme-tls/1` with it) for as long
//! as the order runs. Before the first certificate, HTTPS starts for the challenge alone and
//! refuses every other handshake until the certificate is in.
//!
//! The CA's name is looked up (A and AAAA at once) when each order starts and again after
//! any failed request, and an answer is kept at most [`RESOLVED_LIFETIME_MICROS`]; the
//! addresses are tried in RFC 8305's order (IPv6 first when the board has a routable IPv6
//! address, the families interleaved), the next when one refuses or stays silent for
//! [`CONNECT_ATTEMPT_MICROS`].
//!
//! The answers' TTLs are not read (smoltcp's DNS socket does not pass them on), and are not
//! needed: a TTL says how long an address may be kept, and here one is kept only for the
//! requests of one order or renewal-information check, never past a failed request, and
//! never longer than five minutes, shorter than any TTL but a CDN's briefest. A CA that moves
//! costs one failed request (its old address refusing, or silent until the request's
//! timeout); the next finds the new address (the appliance test
//! `kernel/net/src/appliance/tests/acme.rs`). An old address kept a little past its TTL that
//! still answers is harmless: the CA's certificate is checked against its name, not its
//! address.
//!
//! Faults (no address yet, DNS failing, the CA down or answering errors, a failed challenge,
//! the clock not set, a corrupt store slot) are logged, counted in [`AcmeStatus`], and retried
//! with exponential back-off; none of them touches plain HTTP or a certificate being served.

use crate::host::Host;
use crate::https_client::{ExchangeError, HttpsExchange, open_connection};
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use bramble_acme::ari::{AriAction, RenewalInfo, RenewalInfoRun};
use bramble_acme::http::{Method, parse_https_url, write_request};
use bramble_acme::protocol::RenewalWindow;
use bramble_acme::schedule::{
    History, IssuancePolicy, LOST_SAVE_HOLD_SECONDS, Planner, renewal_time, sane_unix_now,
    time_in_window,
};
use bramble_acme::store::{BlockStore, CertificateStore, Record, SlotState};
use bramble_acme::{Action, Backoff, BackoffPolicy, ChallengeKind, EcKey, OrderRun, OrderSettings};
use bramble_hal::Instant;
use bramble_tls::clock::CLOCK;
use bramble_tls::random::RANDOM;
use core::str::FromStr;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::dns::{self, GetQueryResultError};
use smoltcp::socket::tcp;
use smoltcp::wire::{DnsQueryType, IpAddress, IpEndpoint, Ipv4Address};

/// Longest one request to the CA may take, connection and TLS handshake included.
pub const REQUEST_TIMEOUT_MICROS: u64 = 30_000_000;
/// While a request is out, the latest the loop looks at it again (socket events usually
/// wake it sooner).
const TRANSFER_RECHECK_MICROS: u64 = 50_000;
/// While waiting for the clock or an address, how often to look again.
const WAITING_RECHECK_MICROS: u64 = 1_000_000;
/// First local port for connections to the CA (the IANA dynamic range).
const FIRST_LOCAL_PORT: u16 = 49_152;
/// TCP receive and transmit buffer sizes of the CA connection.
pub const ACME_TCP_RX_LEN: usize = 8 * 1024;
/// See [`ACME_TCP_RX_LEN`].
pub const ACME_TCP_TX_LEN: usize = 4 * 1024;

/// What the owner set.
#[derive(Clone, Copy, Debug)]
pub struct AcmeConfig<'a> {
    /// The CA's directory URL (`acme_directory`).
    pub directory_url: &'a str,
    /// Contact address (`acme_email`).
    pub email: Option<&'a str>,
    /// The names (`domain`).
    pub names: &'a [&'a str],
    /// The roots the CA's HTTPS server must chain to (PEM).
    pub ca_roots_pem: &'a [u8],
    /// Port HTTPS is served on.
    pub https_port: u16,
    /// The challenge answered (`acme_challenge`): HTTP-01 on port 80, or TLS-ALPN-01 on
    /// the HTTPS port.
    pub challenge: ChallengeKind,
    /// `https = only`: once HTTPS runs with the certificate obtained, plain HTTP answers 308
    /// to https (the HTTP-01 path excepted); until then it serves as usual.
    pub redirect_plain_http: bool,
    /// How failures are spaced.
    pub backoff: BackoffPolicy,
    /// Name servers for a static address (DHCP gives its own).
    pub dns_servers: &'a [[u8; 4]],
    /// For tests: the first renewal comes this many seconds after the certificate's start
    /// instead of at two thirds of its lifetime (pebble's certificates last five years);
    /// later ones keep to two thirds. It also relaxes the issuance bounds to
    /// `IssuancePolicy::FORCED_RENEWALS` (no day between certificates, no hold after a
    /// cut-off save), or a test could not renew twice in a row.
    pub renew_after_seconds: Option<u64>,
}

/// Memory for the CA connection: one TCP socket's buffers and two DNS query slots (A and
/// AAAA at once).
pub type AcmeMemory = crate::https_client::ClientMemory<ACME_TCP_RX_LEN, ACME_TCP_TX_LEN, 2>;

/// Where ACME stands, for the status line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcmePhase {
    /// The clock is not set yet: the CA's certificate cannot be checked without it.
    WaitingForClock,
    /// No address, or no name server.
    WaitingForNetwork,
    /// An order is under way.
    Ordering,
    /// Waiting: until the renewal time, or backing off after a failure.
    Idle,
}

/// ACME's state, for the status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmeStatus {
    /// Where it stands.
    pub phase: AcmePhase,
    /// The certificate served: its end (Unix seconds).
    pub not_after: Option<i64>,
    /// Seconds until the next order starts (renewal or retry), when one is planned.
    pub next_order_in: Option<u64>,
    /// Failures in a row.
    pub failures: u32,
    /// Orders started and certificates obtained since boot.
    pub orders: u32,
    /// Certificates obtained since boot.
    pub issued: u32,
    /// The last failure.
    pub last_error: Option<String>,
    /// Blocks the last save wrote.
    pub last_save_blocks: u32,
    /// Card saves made since boot.
    pub saves: u32,
    /// Saves refused by the daily cap (bramble_acme::schedule's bounds).
    pub saves_refused: u32,
    /// Accounts the CA made since boot.
    pub accounts: u32,
    /// Certificates obtained that were not valid by the clock when they arrived.
    pub issued_invalid: u32,
    /// Over boots (the store's history and this boot): seconds since the last certificate
    /// was obtained.
    pub since_last_issue: Option<u64>,
    /// Over boots: card saves in the last 24 hours.
    pub saves_in_day: u32,
    /// Over boots: accounts made in the last 24 hours.
    pub accounts_in_day: u32,
    /// What the store said of earlier boots: [`HistoryState`].
    pub history: HistoryState,
}

/// What the certificate store's record said of earlier boots' orders and saves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryState {
    /// Not read yet (it is taken up once the clock is set).
    Waiting,
    /// Nothing: a new card, a store in RAM, or a record of an older kernel.
    None,
    /// The record's history was taken up.
    Kept,
    /// A save was cut off: counted, with an hour's hold on orders.
    CutSave,
}

impl core::fmt::Display for HistoryState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Waiting => "waiting for the clock",
            Self::None => "none",
            Self::Kept => "kept",
            Self::CutSave => "a save cut off",
        })
    }
}

/// The CA's name being looked up: A and AAAA at once, each `None` until started and its
/// answer (empty when it failed) once in.
#[derive(Default)]
struct Lookup {
    started: bool,
    a: Option<dns::QueryHandle>,
    aaaa: Option<dns::QueryHandle>,
    v4: Option<Vec<IpAddress>>,
    v6: Option<Vec<IpAddress>>,
}

enum Stage {
    Resolve(Lookup),
    /// Connecting to `addresses[at]` (tried in turn until one answers).
    Exchange,
}

/// The CA's addresses, as looked up for the current order.
struct Resolved {
    host: String,
    /// In Happy Eyeballs order ([`happy_eyeballs_order`]).
    addresses: Vec<IpAddress>,
    /// The one to try next (the last that answered, or the next after one that failed).
    at: usize,
    when: Instant,
}

/// Longest an answer is kept within an order (module docs: why the TTL is not read): one of
/// the short TTLs CAs give their API names (a CDN's). Each order and every failed request
/// look the name up again anyway.
pub const RESOLVED_LIFETIME_MICROS: u64 = 300_000_000;
/// How long a connection to one of several addresses may take before the next is tried
/// (RFC 8305 §5 staggers parallel attempts by 250 ms; with one socket they go in turn).
pub const CONNECT_ATTEMPT_MICROS: u64 = 5_000_000;

/// RFC 8305 §4: the addresses interleaved by family, starting with IPv6 when the board has
/// a routable IPv6 address (`ipv6_usable`); without one, the IPv4 addresses only.
fn happy_eyeballs_order(v6: &[IpAddress], v4: &[IpAddress], ipv6_usable: bool) -> Vec<IpAddress> {
    let v6: &[IpAddress] = if ipv6_usable { v6 } else { &[] };
    let mut out = Vec::with_capacity(v6.len() + v4.len());
    for i in 0..v6.len().max(v4.len()) {
        out.extend(v6.get(i));
        out.extend(v4.get(i));
    }
    out
}

struct Transfer {
    method: Method,
    host: String,
    port: u16,
    request: Vec<u8>,
    stage: Stage,
    started: Instant,
    /// The TLS session and the response reader, once the CA's address is known.
    exchange: Option<HttpsExchange>,
    /// When the connection to the current address was opened.
    attempt_started: Instant,
}

/// The agent: the store, the schedule and the order in progress.
pub struct AcmeAgent<'a> {
    config: AcmeConfig<'a>,
    store: CertificateStore<&'a mut dyn BlockStore>,
    record: Record,
    tcp: SocketHandle,
    dns: SocketHandle,
    client_config: Option<Arc<bramble_tls::client::ClientConfig>>,
    /// The certificate served (`None` until one is in hand).
    identity: Option<bramble_tls::Identity>,
    /// The TLS-ALPN-01 answers up for the order under way.
    alpn_answers: Vec<bramble_tls::AlpnChallenge>,
    /// A DNS-01 answer is on its way to the name server: the challenge is not answered
    /// before the server confirms it.
    dns_wait: bool,
    run: Option<OrderRun>,
    run_started: Instant,
    transfer: Option<Transfer>,
    wait_until: Option<Instant>,
    /// When the next order starts; `None`: when the clock says (no certificate yet, or the
    /// renewal time not yet turned into an instant).
    next_order: Option<Instant>,
    validity: Option<(i64, i64)>,
    backoff: Backoff,
    /// The bounds on orders, saves and accounts, whatever the clock and the CA say.
    planner: Planner,
    /// The record has changes a refused save did not keep.
    unsaved: bool,
    /// The store's history and any save cut off, until the clock is set to take them up.
    pending_history: Option<(History, Option<Option<i64>>)>,
    history_state: HistoryState,
    /// The renewal-information check under way (RFC 9773), outside any order.
    ari: Option<RenewalInfoRun>,
    /// The served certificate's ARI identifier (`None` without one, or without an AKI).
    cert_id: Option<String>,
    /// The CA's window for the served certificate, and the point in it to renew at.
    ari_window: Option<RenewalWindow>,
    ari_renew_at: Option<i64>,
    /// When to ask for renewal information next (`None`: at once).
    ari_next_check: Option<Instant>,
    /// The CA's directory has no renewalInfo: renew at two thirds of the lifetime.
    ari_not_offered: bool,
    /// The CA's addresses for the current order: cleared when an order starts and after
    /// any failed request, so the name is looked up again (the API can move).
    resolved: Option<Resolved>,
    local_port: u16,
    phase: AcmePhase,
    orders: u32,
    issued: u32,
    last_error: Option<String>,
    logged_clock_wait: bool,
}

/// Seconds of uptime at `now`, the planner's time.
fn seconds(now: Instant) -> u64 {
    now.as_micros() / 1_000_000
}

fn names_text(names: &[&str]) -> String {
    names.join(",")
}

fn fill_random(out: &mut [u8]) {
    // The agent starts only with a seeded CSPRNG (AcmeAgent::start checks).
    let _ = RANDOM.fill_bytes(out);
}

impl<'a> AcmeAgent<'a> {
    /// Starts ACME: loads the store (serving its certificate at once if it is for these
    /// names, through [`Host::serve_https`]), and orders one when there is none or it is
    /// due. Adds two sockets to the host's set (the caller checks there is room); needs a
    /// seeded CSPRNG.
    pub fn start<H: Host<'a>>(
        host: &mut H,
        config: AcmeConfig<'a>,
        store: &'a mut dyn BlockStore,
        memory: &'a mut AcmeMemory,
        now: Instant,
    ) -> Result<Self, &'static str> {
        if !RANDOM.is_seeded() {
            return Err("no entropy seed: the account key cannot be made");
        }
        if config.names.is_empty() {
            return Err("no domain names to order a certificate for");
        }
        let roots = bramble_tls::client::roots_from_pem(config.ca_roots_pem)
            .map_err(|_| "no usable CA certificate to check the CA's server with")?;
        let client_config =
            bramble_tls::client::client_config(roots).map_err(|_| "TLS client set-up failed")?;
        let mut store =
            CertificateStore::new(store).map_err(|_| "the certificate store is too small")?;
        let loaded = store.load();
        for (slot, state) in loaded.slots.iter().enumerate() {
            match state {
                SlotState::Corrupt => log::warn!(
                    "acme: certificate store slot {slot} is not whole (a save was cut off, or \
                     the card is damaged); it will be written next"
                ),
                SlotState::Unreadable => {
                    log::error!("acme: certificate store slot {slot} cannot be read")
                }
                SlotState::Valid(sequence) => {
                    log::info!("acme: certificate store slot {slot} holds record {sequence}")
                }
                SlotState::Empty => {}
            }
        }
        let AcmeMemory {
            tcp_rx,
            tcp_tx,
            dns_queries,
        } = memory;
        let net = host.net();
        let mac = net.mac;
        let sockets: &mut SocketSet<'a> = net.sockets;
        let tcp = sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(&mut tcp_rx[..]),
            tcp::SocketBuffer::new(&mut tcp_tx[..]),
        ));
        let dns = sockets.add(dns::Socket::new(&[], &mut dns_queries[..]));
        let torn = loaded.torn;
        let mut record = loaded.record.unwrap_or_default();
        let pending_history = Some((record.history, torn));
        if record.directory_url != config.directory_url
            || EcKey::from_secret(&record.account_key).is_none()
        {
            if !record.account_url.is_empty() {
                log::info!("acme: the stored account is for another CA; a new one will be made");
            }
            record.directory_url = String::from(config.directory_url);
            record.account_key = EcKey::generate(&mut fill_random).secret();
            record.account_url = String::new();
        }
        let mut agent = AcmeAgent {
            config,
            store,
            record,
            tcp,
            dns,
            client_config: Some(client_config),
            identity: None,
            alpn_answers: Vec::new(),
            dns_wait: false,
            run: None,
            run_started: now,
            transfer: None,
            wait_until: None,
            next_order: None,
            validity: None,
            backoff: Backoff::new(config.backoff),
            planner: Planner::new(if config.renew_after_seconds.is_some() {
                IssuancePolicy::FORCED_RENEWALS
            } else {
                IssuancePolicy::DEFAULT
            }),
            unsaved: false,
            pending_history,
            history_state: HistoryState::Waiting,
            ari: None,
            cert_id: None,
            ari_window: None,
            ari_renew_at: None,
            ari_next_check: None,
            ari_not_offered: false,
            resolved: None,
            local_port: FIRST_LOCAL_PORT + (mac[5] as u16) * 16,
            phase: AcmePhase::Idle,
            orders: 0,
            issued: 0,
            last_error: None,
            logged_clock_wait: false,
        };
        let wanted = names_text(config.names);
        if agent.record.has_certificate() {
            if agent.record.names != wanted {
                log::info!(
                    "acme: the stored certificate is for {}, not {wanted}; ordering a new one",
                    agent.record.names
                );
            } else {
                let chain = agent.record.chain_pem.clone();
                match EcKey::from_secret(&agent.record.certificate_key) {
                    Some(key) => match agent.install(host, &chain, &key, now) {
                        Ok(()) => log::info!("acme: serving the stored certificate for {wanted}"),
                        Err(problem) => log::error!("acme: the stored certificate: {problem}"),
                    },
                    None => log::error!("acme: the stored certificate key is invalid"),
                }
            }
        }
        log::info!(
            "acme: directory {}, names {wanted}, store of {} KiB",
            config.directory_url,
            agent.store.capacity() / 1024
        );
        Ok(agent)
    }

    /// ACME's state.
    pub fn status(&self, now: Instant) -> AcmeStatus {
        let agent = self;
        AcmeStatus {
            phase: agent.phase,
            not_after: agent.validity.map(|(_, end)| end),
            next_order_in: agent.next_order.map(|at| at.micros_since(now) / 1_000_000),
            failures: agent.backoff.failures(),
            orders: agent.orders,
            issued: agent.issued,
            last_error: agent.last_error.clone(),
            last_save_blocks: agent.store.last_save_blocks,
            saves: agent.planner.saves_made,
            saves_refused: agent.planner.saves_refused,
            accounts: agent.planner.accounts_made,
            issued_invalid: agent.planner.issued_invalid,
            since_last_issue: agent.planner.since_last_issue(seconds(now)),
            saves_in_day: agent.planner.saves_in_day(seconds(now)),
            accounts_in_day: agent.planner.accounts_in_day(seconds(now)),
            history: agent.history_state,
        }
    }

    /// When ACME next needs a poll.
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        let agent = self;
        if agent.transfer.is_some() {
            return Some(now.add_micros(TRANSFER_RECHECK_MICROS));
        }
        if agent.dns_wait {
            return Some(now.add_micros(TRANSFER_RECHECK_MICROS));
        }
        if agent.run.is_some() {
            return Some(agent.wait_until.unwrap_or(now).max(now));
        }
        if agent.ari.is_some() {
            return Some(now);
        }
        match agent.phase {
            AcmePhase::WaitingForClock | AcmePhase::WaitingForNetwork => {
                Some(now.add_micros(WAITING_RECHECK_MICROS))
            }
            _ => {
                let mut order = agent.next_order.map(|at| at.max(now));
                if agent.ari_wanted()
                    && let Some(check) = agent.ari_next_check
                {
                    order = Some(order.map_or(check, |order| order.min(check)).max(now));
                }
                if !agent.unsaved {
                    return order;
                }
                let save_in = agent
                    .planner
                    .save_allowed_at(seconds(now))
                    .saturating_sub(seconds(now));
                let save = now.add_micros(save_in.saturating_mul(1_000_000));
                Some(order.map_or(save, |order| order.min(save)))
            }
        }
    }

    /// Moves ACME on (called with the other sockets' work).
    pub fn poll<H: Host<'a>>(&mut self, host: &mut H, now: Instant) {
        let Some(unix_now) = CLOCK.unix_seconds() else {
            if !self.logged_clock_wait {
                self.logged_clock_wait = true;
                log::info!(
                    "acme: waiting for the clock (SNTP) before talking to the CA: its \
                     certificate is checked against it"
                );
            }
            self.phase = AcmePhase::WaitingForClock;
            return;
        };
        let unix_now = sane_unix_now(i64::try_from(unix_now).unwrap_or(i64::MAX));
        if let Some((history, torn)) = self.pending_history.take() {
            self.take_up_history(&history, torn, unix_now, now);
        }
        if self.unsaved && self.planner.save_allowed_at(seconds(now)) <= seconds(now) {
            self.save(now);
        }
        if self.run.is_none() && self.ari.is_none() {
            if host.net().iface.ipv4_addr().is_none() {
                self.phase = AcmePhase::WaitingForNetwork;
                return;
            }
            if let Some(cert_id) = &self.cert_id
                && self.ari_wanted()
                && self.ari_next_check.is_none_or(|at| now >= at)
            {
                self.ari = Some(RenewalInfoRun::new(
                    String::from(self.config.directory_url),
                    cert_id.clone(),
                ));
            }
        }
        if self.run.is_none() && self.ari.is_none() {
            let due = match self.next_order {
                Some(at) => at,
                None => {
                    let at = self.planned_order(unix_now, now);
                    self.next_order = Some(at);
                    at
                }
            };
            self.phase = AcmePhase::Idle;
            if now < due {
                return;
            }
            self.begin_order(now);
        }
        if self.run.is_some() {
            self.phase = AcmePhase::Ordering;
        }
        for _ in 0..32 {
            if self.transfer.is_some() {
                match self.drive_transfer(host, now) {
                    Some(answer) => {
                        self.transfer = None;
                        if answer.is_err() {
                            // The API may have moved: look it up again for the next request.
                            self.resolved = None;
                        }
                        if let Some(ari) = &mut self.ari {
                            ari.receive(answer);
                        } else if let Some(run) = &mut self.run {
                            run.receive(answer);
                        }
                    }
                    None => return,
                }
            }
            if let Some(ari) = &mut self.ari {
                match ari.poll() {
                    AriAction::Send(request) => self.begin_transfer(request, now),
                    AriAction::Waiting => return,
                    AriAction::Done(info) => {
                        self.ari = None;
                        self.finish_ari(info, now);
                        return;
                    }
                }
                continue;
            }
            if self.dns_wait {
                match host.ddns().map(|ddns| ddns.txt_progress()) {
                    Some(crate::ddns::TxtProgress::Waiting) => return,
                    Some(crate::ddns::TxtProgress::Published) => {
                        log::info!("acme: DNS-01 answer up (the name server confirmed it)");
                    }
                    _ => log::warn!("acme: the DNS-01 answer is not up; the CA will not find it"),
                }
                self.dns_wait = false;
            }
            if self.wait_until.is_some_and(|at| now < at) {
                return;
            }
            self.wait_until = None;
            let Some(run) = &mut self.run else {
                return;
            };
            match run.poll() {
                Action::Send(request) => self.begin_transfer(request, now),
                Action::Wait(seconds) => {
                    self.wait_until = Some(now.add_micros(seconds.saturating_mul(1_000_000)));
                }
                Action::Publish(answer) => match answer.kind {
                    ChallengeKind::Http01 => {
                        if host
                            .server()
                            .borrow_mut()
                            .add_acme_answer(&answer.token, &answer.key_authorization)
                        {
                            log::info!("acme: HTTP-01 answer up for {}", answer.name);
                        } else {
                            log::warn!("acme: the CA's token for {} is too long", answer.name);
                        }
                    }
                    ChallengeKind::TlsAlpn01 => self.publish_tls_alpn(host, &answer, now),
                    ChallengeKind::Dns01 => {
                        let value = bramble_acme::jose::dns01_txt(&answer.key_authorization);
                        let added = host.ddns().map_or(
                            Err(
                                "dns-01 needs dynamic DNS (ddns = rfc2136) to publish its TXT \
                                 records",
                            ),
                            |ddns| ddns.add_txt(&answer.name, &value),
                        );
                        match added {
                            Ok(()) => {
                                log::info!(
                                    "acme: DNS-01 answer for {} going up: TXT at \
                                     _acme-challenge.{}",
                                    answer.name,
                                    answer.name
                                );
                                self.dns_wait = true;
                                return;
                            }
                            Err(problem) => log::warn!(
                                "acme: the DNS-01 answer for {} is not up: {problem}",
                                answer.name
                            ),
                        }
                    }
                },
                Action::AccountReady(url) => {
                    log::info!("acme: account {url}");
                    // Saved when new (an existing account changes nothing worth a write).
                    if self.record.account_url != url {
                        self.planner.account_made(seconds(now));
                        self.record.account_url = url;
                        self.save(now);
                    }
                }
                Action::Issued(issued) => {
                    host.server().borrow_mut().clear_acme_answers();
                    if let Some(ddns) = host.ddns() {
                        ddns.remove_txt();
                    }
                    // Taken down by the install below, which builds the configuration anew.
                    self.alpn_answers.clear();
                    self.run = None;
                    self.finish_issued(host, issued, now);
                    return;
                }
                Action::Failed(error, retry_after) => {
                    host.server().borrow_mut().clear_acme_answers();
                    if let Some(ddns) = host.ddns() {
                        ddns.remove_txt();
                    }
                    self.dns_wait = false;
                    if !self.alpn_answers.is_empty() {
                        self.alpn_answers.clear();
                        if let Err(problem) = self.serve_tls(host, now) {
                            log::warn!("acme: taking the TLS-ALPN-01 answers down: {problem}");
                        }
                    }
                    if let Some(transfer) = self.transfer.take() {
                        drop(transfer);
                    }
                    host.net().sockets.get_mut::<tcp::Socket>(self.tcp).abort();
                    self.run = None;
                    let wait = self
                        .backoff
                        .fail(error.is_validation_failure(), retry_after);
                    log::error!(
                        "acme: {error}; trying again in {wait} s (failure {}{})",
                        self.backoff.failures(),
                        if self.validity.is_some() {
                            "; the current certificate is still served"
                        } else {
                            ""
                        }
                    );
                    self.last_error = Some(format!("{error}"));
                    self.next_order = Some(now.add_micros(wait.saturating_mul(1_000_000)));
                    self.phase = AcmePhase::Idle;
                    return;
                }
            }
        }
    }

    /// When to order: from the certificate's dates (now if there is none), within the
    /// planner's bounds (a day after the last certificate obtained, in this boot or an
    /// earlier one; the save cap; an hour after a save cut off; the account cap when the
    /// order must make one).
    fn planned_order(&self, unix_now: i64, now: Instant) -> Instant {
        let renew_at =
            self.validity.map(
                |(not_before, not_after)| match self.config.renew_after_seconds {
                    Some(after) => not_before.saturating_add(after as i64),
                    None => self
                        .ari_renew_at
                        .unwrap_or_else(|| renewal_time(not_before, not_after)),
                },
            );
        let needs_account = self.record.account_url.is_empty();
        let at = self
            .planner
            .next_order(seconds(now), unix_now, renew_at, needs_account);
        let wait = at.saturating_sub(seconds(now));
        if let (Some((_, not_after)), Some(renew_at)) = (self.validity, renew_at) {
            log::info!(
                "acme: the certificate is valid for {} more days; renewal in {} s",
                (not_after - unix_now).max(0) / 86_400,
                wait
            );
            if wait > renew_at.saturating_sub(unix_now).max(0) as u64 {
                log::warn!(
                    "acme: the next order waits {wait} s: at most one certificate a day, {} \
                     saves and {} accounts a day, whatever the clock, the CA and reboots say",
                    IssuancePolicy::DEFAULT.max_saves_per_day,
                    IssuancePolicy::DEFAULT.max_accounts_per_day
                );
            }
        } else if wait > 0 {
            log::warn!(
                "acme: the next order waits {wait} s: the daily save or account cap, or the \
                 hold after a save cut off"
            );
        }
        now.add_micros(wait.saturating_mul(1_000_000))
    }

    /// Takes up what the store kept of earlier boots (once the clock is set): the issuance
    /// history, and a save cut off, which holds orders for an hour (schedule's module docs).
    fn take_up_history(
        &mut self,
        history: &History,
        torn: Option<Option<i64>>,
        unix_now: i64,
        now: Instant,
    ) {
        self.planner.restore(history, seconds(now), unix_now);
        self.history_state = if history.is_empty() {
            HistoryState::None
        } else {
            HistoryState::Kept
        };
        if !history.is_empty() {
            log::info!(
                "acme: earlier boots: {}, {} saves and {} accounts in the last 24 h",
                match self.planner.since_last_issue(seconds(now)) {
                    Some(ago) => format!("last certificate {ago} s ago"),
                    None => String::from("no certificate obtained"),
                },
                self.planner.saves_in_day(seconds(now)),
                self.planner.accounts_in_day(seconds(now))
            );
        }
        if let Some(at) = torn {
            self.planner.lost_save(at, seconds(now), unix_now);
            self.history_state = HistoryState::CutSave;
            log::warn!(
                "acme: a save was cut off ({}): counted as a save, and no order within {} s \
                 of it",
                match at {
                    Some(at) => format!("started at Unix time {at}"),
                    None => String::from("when is not known: taken as now"),
                },
                LOST_SAVE_HOLD_SECONDS
            );
        }
    }

    fn begin_order(&mut self, now: Instant) {
        let Some(account_key) = EcKey::from_secret(&self.record.account_key) else {
            return;
        };
        let certificate_key = EcKey::generate(&mut fill_random);
        let settings = OrderSettings {
            directory_url: String::from(self.config.directory_url),
            email: self.config.email.map(String::from),
            names: self
                .config
                .names
                .iter()
                .map(|name| String::from(*name))
                .collect(),
            challenges: alloc::vec![self.config.challenge],
            replaces: self.validity.and(self.cert_id.clone()),
        };
        let account_url =
            (!self.record.account_url.is_empty()).then(|| self.record.account_url.clone());
        log::info!(
            "acme: ordering a certificate for {} from {}",
            names_text(self.config.names),
            self.config.directory_url
        );
        self.orders += 1;
        self.resolved = None;
        self.run_started = now;
        self.run = Some(OrderRun::new(
            settings,
            account_key,
            account_url,
            certificate_key,
        ));
        self.wait_until = None;
    }

    fn finish_issued<H: Host<'a>>(
        &mut self,
        host: &mut H,
        issued: bramble_acme::Issued,
        now: Instant,
    ) {
        let elapsed_ms = now.micros_since(self.run_started) / 1000;
        match self.install(host, &issued.chain_pem, &issued.key, now) {
            Ok(()) => {
                self.issued += 1;
                self.backoff.succeed();
                self.last_error = None;
                log::info!(
                    "acme: certificate issued for {} in {elapsed_ms} ms; serving it",
                    names_text(self.config.names)
                );
                let unix_now = CLOCK
                    .unix_seconds()
                    .map_or(0, |s| i64::try_from(s).unwrap_or(i64::MAX));
                if let Some((not_before, not_after)) = self.validity
                    && !self
                        .planner
                        .issued(seconds(now), unix_now, not_before, not_after)
                {
                    log::warn!(
                        "acme: the new certificate is not valid by this clock (valid from \
                         Unix time {not_before} to {not_after}, clock {}): the clock or the \
                         CA is wrong; served anyway, and no new order for a day",
                        sane_unix_now(unix_now)
                    );
                    self.last_error = Some(String::from(
                        "the certificate obtained is not valid by this clock",
                    ));
                }
                self.config.renew_after_seconds = None;
                self.record.names = names_text(self.config.names);
                self.record.certificate_key = issued.key.secret();
                self.record.chain_pem = issued.chain_pem;
                self.save(now);
                self.next_order = None;
                self.phase = AcmePhase::Idle;
            }
            Err(problem) => {
                let wait = self.backoff.fail(false, None);
                log::error!(
                    "acme: the issued certificate cannot be served: {problem}; trying again in {wait} s"
                );
                self.last_error = Some(problem);
                self.next_order = Some(now.add_micros(wait.saturating_mul(1_000_000)));
            }
        }
    }

    /// Saves the record, if the daily save cap allows (else once it does); a failure is
    /// logged (the certificate is still served, and the next boot orders again).
    fn save(&mut self, now: Instant) {
        if !self.planner.take_save(seconds(now)) {
            if !self.unsaved {
                log::warn!(
                    "acme: not saved now: {} card saves in the last 24 h already (the card's \
                     wear bound); saved in {} s, served meanwhile",
                    IssuancePolicy::DEFAULT.max_saves_per_day,
                    self.planner
                        .save_allowed_at(seconds(now))
                        .saturating_sub(seconds(now))
                );
            }
            self.unsaved = true;
            return;
        }
        self.unsaved = false;
        let unix_now = CLOCK
            .unix_seconds()
            .map_or(0, |s| i64::try_from(s).unwrap_or(i64::MAX));
        self.record.history = self.planner.history(seconds(now), unix_now);
        match self.store.save(&self.record) {
            Ok(()) => log::info!(
                "acme: saved to the certificate store: {} bytes in {} blocks",
                self.record.encode().len() + 64,
                self.store.last_save_blocks
            ),
            Err(error) => log::error!("acme: {error}; the certificate is served but not kept"),
        }
    }

    /// Serves `chain_pem` with `key`: starts HTTPS, or replaces the certificate it serves.
    fn install<H: Host<'a>>(
        &mut self,
        host: &mut H,
        chain_pem: &str,
        key: &EcKey,
        now: Instant,
    ) -> Result<(), String> {
        let key_pem = bramble_acme::base64::pem("EC PRIVATE KEY", &key.sec1_der());
        let identity = bramble_tls::Identity::from_pem(chain_pem.as_bytes(), key_pem.as_bytes())
            .map_err(|problem| format!("{problem}"))?;
        let validity = identity.validity();
        let previous = self.identity.replace(identity);
        if let Err(problem) = self.serve_tls(host, now) {
            self.identity = previous;
            return Err(problem);
        }
        if self.config.redirect_plain_http {
            host.server()
                .borrow_mut()
                .set_redirect_to_https_port(Some(self.config.https_port));
        }
        self.validity = Some((validity.not_before, validity.not_after));
        self.cert_id = bramble_tls::certificate::leaf_renewal_parts(chain_pem.as_bytes())
            .map(|(key_id, serial)| bramble_acme::protocol::cert_id(&key_id, &serial));
        self.ari_window = None;
        self.ari_renew_at = None;
        self.ari_next_check = None;
        Ok(())
    }

    /// Serves the certificate in hand (if any) with the TLS-ALPN-01 answers up now: replaces
    /// the HTTPS configuration, or starts HTTPS in the memory kept for it.
    fn serve_tls<H: Host<'a>>(&mut self, host: &mut H, now: Instant) -> Result<(), String> {
        let key = self.identity.as_ref().map_or(
            bramble_tls::hello::CertificateKey::EcdsaP256,
            bramble_tls::Identity::certificate_key,
        );
        let config = bramble_tls::server_config_with_challenges(
            self.identity.clone(),
            bramble_tls::SniPolicy::AnyName,
            self.alpn_answers.clone(),
        )
        .map_err(|problem| format!("{problem}"))?;
        host.serve_https(config, key, self.config.https_port, now)
    }

    /// Puts up a TLS-ALPN-01 answer (RFC 8737 §3): a certificate for the name, self-signed
    /// by a key made for it, carrying the key authorization's digest, served to validators.
    fn publish_tls_alpn<H: Host<'a>>(
        &mut self,
        host: &mut H,
        answer: &bramble_acme::ChallengeAnswer,
        now: Instant,
    ) {
        let key = EcKey::generate(&mut fill_random);
        let certificate =
            bramble_acme::csr::tls_alpn_certificate(&answer.name, &answer.key_authorization, &key);
        let served = bramble_tls::AlpnChallenge::new(&answer.name, certificate, key.sec1_der())
            .map_err(|problem| format!("{problem}"))
            .and_then(|challenge| {
                self.alpn_answers.push(challenge);
                self.serve_tls(host, now)
            });
        match served {
            Ok(()) => log::info!(
                "acme: TLS-ALPN-01 answer up for {} on port {}",
                answer.name,
                self.config.https_port
            ),
            Err(problem) => log::warn!(
                "acme: the TLS-ALPN-01 answer for {} is not up: {problem}",
                answer.name
            ),
        }
    }

    /// Whether renewal information is asked for: a certificate is served and the CA has
    /// not said it offers none.
    fn ari_wanted(&self) -> bool {
        self.validity.is_some() && self.cert_id.is_some() && !self.ari_not_offered
    }

    /// Takes a renewal-information check's outcome (RFC 9773): a new window gets a random
    /// renewal point inside it (§4.2); the next check follows the CA's Retry-After, between
    /// an hour and a day (6 h without one); without ARI, two thirds of the lifetime.
    fn finish_ari(&mut self, info: RenewalInfo, now: Instant) {
        const HOUR: u64 = 3600;
        match info {
            RenewalInfo::Window(window, retry_after) => {
                if self.ari_window != Some(window) {
                    let mut random = [0u8; 4];
                    fill_random(&mut random);
                    let at = time_in_window(window.start, window.end, u32::from_le_bytes(random));
                    log::info!(
                        "acme: the CA suggests renewing between Unix time {} and {}; renewal \
                         at {at}",
                        window.start,
                        window.end
                    );
                    self.ari_window = Some(window);
                    self.ari_renew_at = Some(at);
                }
                let wait = retry_after.unwrap_or(6 * HOUR).clamp(HOUR, 24 * HOUR);
                self.ari_next_check = Some(now.add_micros(wait.saturating_mul(1_000_000)));
            }
            RenewalInfo::NotOffered => {
                log::info!(
                    "acme: the CA offers no renewal information (RFC 9773); renewing at two \
                     thirds of the lifetime"
                );
                self.ari_not_offered = true;
            }
            RenewalInfo::Failed(why) => {
                log::warn!("acme: renewal information: {why}; asking again in an hour");
                self.ari_next_check = Some(now.add_micros(HOUR * 1_000_000));
            }
        }
        self.next_order = None;
    }

    fn begin_transfer(&mut self, request: bramble_acme::Request, now: Instant) {
        let Some(url) = parse_https_url(&request.url) else {
            self.transfer = None;
            if let Some(ari) = &mut self.ari {
                ari.receive(Err("the CA gave a URL that is not https://"));
            } else if let Some(run) = &mut self.run {
                run.receive(Err("the CA gave a URL that is not https://"));
            }
            return;
        };
        let bytes = write_request(request.method, &url, &request.body);
        self.transfer = Some(Transfer {
            method: request.method,
            host: String::from(url.host),
            port: url.port,
            request: bytes,
            stage: Stage::Resolve(Lookup::default()),
            started: now,
            exchange: None,
            attempt_started: now,
        });
    }

    /// Moves the request on; `Some` once it has an answer (or failed).
    fn drive_transfer<H: Host<'a>>(
        &mut self,
        host: &mut H,
        now: Instant,
    ) -> Option<Result<bramble_acme::http::Response, &'static str>> {
        let result = self.step_transfer(host, now);
        if result.is_some() {
            host.net().sockets.get_mut::<tcp::Socket>(self.tcp).abort();
        }
        result
    }

    /// Opens the connection to the resolved address in turn for the transfer under way.
    fn connect<H: Host<'a>>(&mut self, host: &mut H, now: Instant) -> Result<(), &'static str> {
        let (Some(transfer), Some(resolved)) = (&mut self.transfer, &self.resolved) else {
            return Err("no address for the CA");
        };
        let address = *resolved
            .addresses
            .get(resolved.at)
            .ok_or("no address for the CA")?;
        self.local_port = if self.local_port >= 65_000 {
            FIRST_LOCAL_PORT
        } else {
            self.local_port + 1
        };
        transfer.attempt_started = now;
        let net = host.net();
        let socket = net.sockets.get_mut::<tcp::Socket>(self.tcp);
        open_connection(
            socket,
            net.iface.context(),
            IpEndpoint::new(address, transfer.port),
            self.local_port,
        )
        .map_err(|_| "cannot open a connection to the CA")
    }

    fn step_transfer<H: Host<'a>>(
        &mut self,
        host: &mut H,
        now: Instant,
    ) -> Option<Result<bramble_acme::http::Response, &'static str>> {
        let transfer = self.transfer.as_mut()?;
        if now.micros_since(transfer.started) > REQUEST_TIMEOUT_MICROS {
            return Some(Err("the CA did not answer within 30 s"));
        }
        if let Stage::Resolve(lookup) = &mut transfer.stage {
            let fresh = self.resolved.as_ref().is_some_and(|resolved| {
                resolved.host == transfer.host
                    && now.micros_since(resolved.when) < RESOLVED_LIFETIME_MICROS
            });
            if let Ok(address) = Ipv4Address::from_str(&transfer.host) {
                self.resolved = Some(Resolved {
                    host: transfer.host.clone(),
                    addresses: alloc::vec![IpAddress::Ipv4(address)],
                    at: 0,
                    when: now,
                });
            } else if !fresh {
                let net = host.net();
                let ipv6_usable = net.ipv6_router().is_some()
                    && net.ipv6_addresses().iter().any(|entry| {
                        entry.is_assigned()
                            && !(entry.address[0] == 0xfe && entry.address[1] & 0xc0 == 0x80)
                    });
                if !lookup.started {
                    // DHCP's (else the configured) name servers, then the IPv6 routers'
                    // (RFC 8106), as the clock's lookups use them.
                    let servers = net.name_servers(self.config.dns_servers);
                    if servers.is_empty() {
                        return Some(Err("no name server known to look up the CA"));
                    }
                    let socket = net.sockets.get_mut::<dns::Socket>(self.dns);
                    socket.update_servers(&servers);
                    lookup.started = true;
                    let context = net.iface.context();
                    match socket.start_query(context, &transfer.host, DnsQueryType::A) {
                        Ok(handle) => lookup.a = Some(handle),
                        Err(_) => lookup.v4 = Some(Vec::new()),
                    }
                    if ipv6_usable {
                        match socket.start_query(context, &transfer.host, DnsQueryType::Aaaa) {
                            Ok(handle) => lookup.aaaa = Some(handle),
                            Err(_) => lookup.v6 = Some(Vec::new()),
                        }
                    } else {
                        lookup.v6 = Some(Vec::new());
                    }
                    if lookup.a.is_none() && lookup.aaaa.is_none() {
                        return Some(Err("the CA's name cannot be looked up"));
                    }
                    return None;
                }
                let socket = net.sockets.get_mut::<dns::Socket>(self.dns);
                for (handle, answer) in [(lookup.a, &mut lookup.v4), (lookup.aaaa, &mut lookup.v6)]
                {
                    if let (Some(handle), None) = (handle, &answer) {
                        match socket.get_query_result(handle) {
                            Ok(addresses) => *answer = Some(addresses.iter().copied().collect()),
                            Err(GetQueryResultError::Pending) => {}
                            Err(GetQueryResultError::Failed) => *answer = Some(Vec::new()),
                        }
                    }
                }
                let (Some(v4), Some(v6)) = (&lookup.v4, &lookup.v6) else {
                    return None;
                };
                // Idle, the socket lists no server: smoltcp hands each DNS answer to the
                // first socket listing its source (the clock's, syslog's and the heartbeat's
                // lookups have sockets of their own).
                net.sockets
                    .get_mut::<dns::Socket>(self.dns)
                    .update_servers(&[]);
                let addresses = happy_eyeballs_order(v6, v4, ipv6_usable);
                if addresses.is_empty() {
                    return Some(Err(
                        "DNS lookup of the CA's name failed, or it has no address",
                    ));
                }
                let listed: Vec<String> = addresses.iter().map(|a| format!("{a}")).collect();
                log::info!("acme: {} is {}", transfer.host, listed.join(", "));
                self.resolved = Some(Resolved {
                    host: transfer.host.clone(),
                    addresses,
                    at: 0,
                    when: now,
                });
            }
            let Some(config) = self.client_config.clone() else {
                return Some(Err("no TLS client"));
            };
            let head = transfer.method == Method::Head;
            match HttpsExchange::new(config, &transfer.host, &transfer.request, head) {
                Ok(exchange) => transfer.exchange = Some(exchange),
                Err(_) => return Some(Err("TLS client set-up failed")),
            }
            transfer.stage = Stage::Exchange;
            if let Err(problem) = self.connect(host, now) {
                return Some(Err(problem));
            }
        }
        let transfer = self.transfer.as_mut()?;
        // Happy Eyeballs, in turn: an address that refuses, or does not answer within
        // CONNECT_ATTEMPT_MICROS while others are left, gives way to the next.
        let net = host.net();
        let socket = net.sockets.get_mut::<tcp::Socket>(self.tcp);
        let connected = transfer
            .exchange
            .as_ref()
            .is_some_and(HttpsExchange::connected);
        if !connected && socket.state() != tcp::State::Established {
            let stalled = now.micros_since(transfer.attempt_started) > CONNECT_ATTEMPT_MICROS;
            if let Some(resolved) = &mut self.resolved
                && (!socket.is_open() || stalled)
                && resolved.at + 1 < resolved.addresses.len()
            {
                log::warn!(
                    "acme: no connection to {}; trying {}",
                    resolved.addresses[resolved.at],
                    resolved.addresses[resolved.at + 1]
                );
                resolved.at += 1;
                if let Err(problem) = self.connect(host, now) {
                    return Some(Err(problem));
                }
                return None;
            }
        }
        let transfer = self.transfer.as_mut()?;
        let net = host.net();
        let socket = net.sockets.get_mut::<tcp::Socket>(self.tcp);
        let exchange = transfer.exchange.as_mut()?;
        match exchange.pump(socket)? {
            Ok(response) => Some(Ok(response)),
            Err(ExchangeError::Refused) => {
                Some(Err("the CA refused the connection (or it was reset)"))
            }
            Err(ExchangeError::Closed) => Some(Err("the CA closed the connection")),
            Err(ExchangeError::Tls(error)) => {
                log::warn!("acme: TLS with {}: {error}", transfer.host);
                Some(Err(
                    "TLS with the CA failed (is acme_ca_certificate the CA's root, and the clock right?)",
                ))
            }
            Err(ExchangeError::Http(error)) => {
                log::warn!("acme: the CA's response: {error}");
                Some(Err("the CA's response is not valid HTTP"))
            }
            Err(ExchangeError::Truncated) => {
                Some(Err("the CA closed the connection inside its response"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::Ipv6Address;

    #[test]
    fn happy_eyeballs_interleaves_the_families_ipv6_first_when_usable() {
        let v4 = |n: u8| IpAddress::Ipv4(Ipv4Address::new(192, 0, 2, n));
        let v6 = |n: u16| IpAddress::Ipv6(Ipv6Address::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n));
        assert_eq!(
            happy_eyeballs_order(&[v6(1), v6(2), v6(3)], &[v4(1)], true),
            [v6(1), v4(1), v6(2), v6(3)]
        );
        assert_eq!(
            happy_eyeballs_order(&[v6(1)], &[v4(1), v4(2)], true),
            [v6(1), v4(1), v4(2)]
        );
        // Without a routable IPv6 address, IPv4 only.
        assert_eq!(
            happy_eyeballs_order(&[v6(1)], &[v4(1), v4(2)], false),
            [v4(1), v4(2)]
        );
        assert!(happy_eyeballs_order(&[], &[], true).is_empty());
    }
}
