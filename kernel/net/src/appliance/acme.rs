//! ACME in the appliance: obtains and renews the HTTPS certificate by itself
//! (bramble-acme's order state machine over a TCP socket, a DNS socket and a TLS client),
//! answers HTTP-01 through the HTTP engine, keeps the certificate in the power-cut-safe store,
//! and starts HTTPS, or swaps in the renewed certificate, once one is in hand.
//!
//! Faults (no address yet, DNS failing, the CA down or answering errors, a failed challenge,
//! the clock not set, a corrupt store slot) are logged, counted in [`AcmeStatus`], and retried
//! with exponential back-off; none of them touches plain HTTP or a certificate being served.

use super::Appliance;
use super::memory::HttpsMemory;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use bramble_acme::http::{Method, ResponseReader, parse_https_url, write_request};
use bramble_acme::schedule::renewal_time;
use bramble_acme::store::{BlockStore, CertificateStore, Record, SlotState};
use bramble_acme::{Action, Backoff, BackoffPolicy, ChallengeKind, EcKey, OrderRun, OrderSettings};
use bramble_hal::{EthernetDevice, Instant};
use bramble_tls::clock::CLOCK;
use bramble_tls::random::RANDOM;
use core::str::FromStr;
use smoltcp::iface::SocketHandle;
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
    /// `https = only`: once HTTPS runs with the certificate obtained, plain HTTP answers 308
    /// to https (the HTTP-01 path excepted); until then it serves as usual.
    pub redirect_plain_http: bool,
    /// How failures are spaced.
    pub backoff: BackoffPolicy,
    /// Name servers for a static address (DHCP gives its own).
    pub dns_servers: &'a [[u8; 4]],
    /// For tests: the first renewal comes this many seconds after the certificate's start
    /// instead of at two thirds of its lifetime (pebble's certificates last five years);
    /// later ones keep to two thirds.
    pub renew_after_seconds: Option<u64>,
}

/// Memory for the CA connection: one TCP socket's buffers and one DNS query slot.
pub struct AcmeMemory {
    tcp_rx: [u8; ACME_TCP_RX_LEN],
    tcp_tx: [u8; ACME_TCP_TX_LEN],
    dns_queries: [Option<dns::DnsQuery>; 1],
}

impl AcmeMemory {
    /// Empty buffers.
    pub const fn new() -> Self {
        Self {
            tcp_rx: [0; ACME_TCP_RX_LEN],
            tcp_tx: [0; ACME_TCP_TX_LEN],
            dns_queries: [None],
        }
    }
}

impl Default for AcmeMemory {
    fn default() -> Self {
        Self::new()
    }
}

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
}

enum Stage {
    Resolve(Option<dns::QueryHandle>),
    Exchange,
}

struct Transfer {
    method: Method,
    host: String,
    port: u16,
    request: Vec<u8>,
    stage: Stage,
    started: Instant,
    tls: Option<bramble_tls::client::TlsClient>,
    reader: ResponseReader,
    connected: bool,
}

/// The agent: the store, the schedule and the order in progress.
pub(super) struct AcmeAgent<'a> {
    config: AcmeConfig<'a>,
    store: CertificateStore<&'a mut dyn BlockStore>,
    record: Record,
    https_memory: Option<&'a mut HttpsMemory<'a>>,
    tcp: SocketHandle,
    dns: SocketHandle,
    client_config: Option<Arc<bramble_tls::client::ClientConfig>>,
    run: Option<OrderRun>,
    run_started: Instant,
    transfer: Option<Transfer>,
    wait_until: Option<Instant>,
    /// When the next order starts; `None`: when the clock says (no certificate yet, or the
    /// renewal time not yet turned into an instant).
    next_order: Option<Instant>,
    validity: Option<(i64, i64)>,
    backoff: Backoff,
    resolved: Option<(String, IpAddress)>,
    local_port: u16,
    phase: AcmePhase,
    orders: u32,
    issued: u32,
    last_error: Option<String>,
    logged_clock_wait: bool,
}

fn names_text(names: &[&str]) -> String {
    names.join(",")
}

fn fill_random(out: &mut [u8]) {
    // The agent starts only with a seeded CSPRNG (start_acme checks).
    let _ = RANDOM.fill_bytes(out);
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Starts ACME: loads the store (serving its certificate at once if it is for these
    /// names), and orders one when there is none or it is due. `https_memory` is what HTTPS
    /// starts in once a certificate is in hand (unless HTTPS already runs). Needs two free
    /// socket slots and a seeded CSPRNG.
    pub fn start_acme(
        &mut self,
        config: AcmeConfig<'a>,
        store: &'a mut dyn BlockStore,
        memory: &'a mut AcmeMemory,
        https_memory: Option<&'a mut HttpsMemory<'a>>,
        now: Instant,
    ) -> Result<(), &'static str> {
        if self.acme.is_some() {
            return Err("ACME is already running");
        }
        if self.sockets_free() < 2 {
            return Err("no socket slots left for ACME");
        }
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
        let tcp = self.sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(&mut tcp_rx[..]),
            tcp::SocketBuffer::new(&mut tcp_tx[..]),
        ));
        let dns = self
            .sockets
            .add(dns::Socket::new(&[], &mut dns_queries[..]));
        let mut record = loaded.record.unwrap_or_default();
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
            https_memory,
            tcp,
            dns,
            client_config: Some(client_config),
            run: None,
            run_started: now,
            transfer: None,
            wait_until: None,
            next_order: None,
            validity: None,
            backoff: Backoff::new(config.backoff),
            resolved: None,
            local_port: FIRST_LOCAL_PORT + (self.mac[5] as u16) * 16,
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
                    Some(key) => match agent.install(self, &chain, &key, now) {
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
        self.acme = Some(agent);
        Ok(())
    }

    /// ACME's state, once started.
    pub fn acme_status(&self, now: Instant) -> Option<AcmeStatus> {
        self.acme.as_ref().map(|agent| AcmeStatus {
            phase: agent.phase,
            not_after: agent.validity.map(|(_, end)| end),
            next_order_in: agent.next_order.map(|at| at.micros_since(now) / 1_000_000),
            failures: agent.backoff.failures(),
            orders: agent.orders,
            issued: agent.issued,
            last_error: agent.last_error.clone(),
            last_save_blocks: agent.store.last_save_blocks,
        })
    }

    /// Moves ACME on (called with the other sockets' work).
    pub(super) fn poll_acme(&mut self, now: Instant) {
        let Some(mut agent) = self.acme.take() else {
            return;
        };
        agent.poll(self, now);
        self.acme = Some(agent);
    }

    /// When ACME next needs a poll.
    pub(super) fn acme_deadline(&self, now: Instant) -> Option<Instant> {
        let agent = self.acme.as_ref()?;
        if agent.transfer.is_some() {
            return Some(now.add_micros(TRANSFER_RECHECK_MICROS));
        }
        if agent.run.is_some() {
            return Some(agent.wait_until.unwrap_or(now).max(now));
        }
        match agent.phase {
            AcmePhase::WaitingForClock | AcmePhase::WaitingForNetwork => {
                Some(now.add_micros(WAITING_RECHECK_MICROS))
            }
            _ => agent.next_order.map(|at| at.max(now)),
        }
    }
}

impl<'a> AcmeAgent<'a> {
    fn poll<D: EthernetDevice>(&mut self, appliance: &mut Appliance<'a, D>, now: Instant) {
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
        if self.run.is_none() {
            if appliance.iface.ipv4_addr().is_none() {
                self.phase = AcmePhase::WaitingForNetwork;
                return;
            }
            let due = match self.next_order {
                Some(at) => at,
                None => {
                    let at = self.planned_order(unix_now as i64, now);
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
        self.phase = AcmePhase::Ordering;
        for _ in 0..32 {
            if self.transfer.is_some() {
                match self.drive_transfer(appliance, now) {
                    Some(answer) => {
                        self.transfer = None;
                        if let Some(run) = &mut self.run {
                            run.receive(answer);
                        }
                    }
                    None => return,
                }
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
                        if appliance
                            .pool
                            .service_mut()
                            .server
                            .add_acme_answer(&answer.token, &answer.key_authorization)
                        {
                            log::info!("acme: HTTP-01 answer up for {}", answer.name);
                        } else {
                            log::warn!("acme: the CA's token for {} is too long", answer.name);
                        }
                    }
                    ChallengeKind::TlsAlpn01 => {
                        log::warn!("acme: TLS-ALPN-01 is not answered by this build");
                    }
                },
                Action::AccountReady(url) => {
                    log::info!("acme: account {url}");
                    self.record.account_url = url;
                    self.save();
                }
                Action::Issued(issued) => {
                    appliance.pool.service_mut().server.clear_acme_answers();
                    self.run = None;
                    self.finish_issued(appliance, issued, now);
                    return;
                }
                Action::Failed(error, retry_after) => {
                    appliance.pool.service_mut().server.clear_acme_answers();
                    if let Some(transfer) = self.transfer.take() {
                        drop(transfer);
                    }
                    appliance.sockets.get_mut::<tcp::Socket>(self.tcp).abort();
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

    /// When to order, from the certificate's dates (now if there is none).
    fn planned_order(&self, unix_now: i64, now: Instant) -> Instant {
        let Some((not_before, not_after)) = self.validity else {
            return now;
        };
        let renew_at = match self.config.renew_after_seconds {
            Some(after) => not_before.saturating_add(after as i64),
            None => renewal_time(not_before, not_after),
        };
        let wait = renew_at.saturating_sub(unix_now).max(0) as u64;
        log::info!(
            "acme: the certificate is valid for {} more days; renewal in {} s",
            (not_after - unix_now).max(0) / 86_400,
            wait
        );
        now.add_micros(wait.saturating_mul(1_000_000))
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
            challenges: alloc::vec![ChallengeKind::Http01],
        };
        let account_url =
            (!self.record.account_url.is_empty()).then(|| self.record.account_url.clone());
        log::info!(
            "acme: ordering a certificate for {} from {}",
            names_text(self.config.names),
            self.config.directory_url
        );
        self.orders += 1;
        self.run_started = now;
        self.run = Some(OrderRun::new(
            settings,
            account_key,
            account_url,
            certificate_key,
        ));
        self.wait_until = None;
    }

    fn finish_issued<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        issued: bramble_acme::Issued,
        now: Instant,
    ) {
        let elapsed_ms = now.micros_since(self.run_started) / 1000;
        match self.install(appliance, &issued.chain_pem, &issued.key, now) {
            Ok(()) => {
                self.issued += 1;
                self.backoff.succeed();
                self.last_error = None;
                log::info!(
                    "acme: certificate issued for {} in {elapsed_ms} ms; serving it",
                    names_text(self.config.names)
                );
                self.config.renew_after_seconds = None;
                self.record.names = names_text(self.config.names);
                self.record.certificate_key = issued.key.secret();
                self.record.chain_pem = issued.chain_pem;
                self.save();
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

    /// Saves the record; a failure is logged (the certificate is still served, and the next
    /// boot orders again).
    fn save(&mut self) {
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
    fn install<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        chain_pem: &str,
        key: &EcKey,
        now: Instant,
    ) -> Result<(), String> {
        let key_pem = bramble_acme::base64::pem("EC PRIVATE KEY", &key.sec1_der());
        let identity = bramble_tls::Identity::from_pem(chain_pem.as_bytes(), key_pem.as_bytes())
            .map_err(|problem| format!("{problem}"))?;
        let validity = identity.validity();
        let config = bramble_tls::server_config(identity, bramble_tls::SniPolicy::AnyName)
            .map_err(|problem| format!("{problem}"))?;
        if let Some(https) = &mut appliance.https {
            https.shared_mut().replace_config(config);
        } else {
            let memory = self
                .https_memory
                .take()
                .ok_or_else(|| String::from("no memory for HTTPS"))?;
            appliance
                .start_https(config, memory, self.config.https_port, now)
                .map_err(|problem| format!("{problem}"))?;
            if self.config.redirect_plain_http {
                appliance
                    .pool
                    .service_mut()
                    .server
                    .set_redirect_to_https_port(Some(self.config.https_port));
            }
        }
        self.validity = Some((validity.not_before, validity.not_after));
        Ok(())
    }

    fn begin_transfer(&mut self, request: bramble_acme::Request, now: Instant) {
        let Some(url) = parse_https_url(&request.url) else {
            self.transfer = None;
            if let Some(run) = &mut self.run {
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
            stage: Stage::Resolve(None),
            started: now,
            tls: None,
            reader: ResponseReader::new(request.method == Method::Head),
            connected: false,
        });
    }

    /// Moves the request on; `Some` once it has an answer (or failed).
    fn drive_transfer<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        now: Instant,
    ) -> Option<Result<bramble_acme::http::Response, &'static str>> {
        let result = self.step_transfer(appliance, now);
        if result.is_some() {
            appliance.sockets.get_mut::<tcp::Socket>(self.tcp).abort();
        }
        result
    }

    fn step_transfer<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        now: Instant,
    ) -> Option<Result<bramble_acme::http::Response, &'static str>> {
        let transfer = self.transfer.as_mut()?;
        if now.micros_since(transfer.started) > REQUEST_TIMEOUT_MICROS {
            return Some(Err("the CA did not answer within 30 s"));
        }
        if let Stage::Resolve(query) = &mut transfer.stage {
            let address = if let Ok(address) = Ipv4Address::from_str(&transfer.host) {
                IpAddress::Ipv4(address)
            } else if let Some((host, address)) = &self.resolved
                && *host == transfer.host
            {
                *address
            } else {
                let socket = appliance.sockets.get_mut::<dns::Socket>(self.dns);
                match query {
                    None => {
                        // DHCP's (else the configured) name servers, then the IPv6
                        // routers' (RFC 8106), as the clock's lookups use them.
                        let advertised = appliance
                            .ipv6
                            .iter()
                            .flat_map(|state| state.config.dns_servers());
                        let servers = super::clock::name_servers(
                            self.config.dns_servers,
                            &appliance.address.dhcp_dns_servers,
                            advertised,
                        );
                        if servers.is_empty() {
                            return Some(Err("no name server known to look up the CA"));
                        }
                        socket.update_servers(&servers);
                        match socket.start_query(
                            appliance.iface.context(),
                            &transfer.host,
                            DnsQueryType::A,
                        ) {
                            Ok(handle) => *query = Some(handle),
                            Err(_) => return Some(Err("the CA's name cannot be looked up")),
                        }
                        return None;
                    }
                    Some(handle) => match socket.get_query_result(*handle) {
                        Ok(addresses) => match addresses.first() {
                            Some(address) => {
                                log::info!("acme: {} is {address}", transfer.host);
                                self.resolved = Some((transfer.host.clone(), *address));
                                *address
                            }
                            None => return Some(Err("the CA's name has no address")),
                        },
                        Err(GetQueryResultError::Pending) => return None,
                        Err(GetQueryResultError::Failed) => {
                            return Some(Err("DNS lookup of the CA's name failed"));
                        }
                    },
                }
            };
            let Some(config) = self.client_config.clone() else {
                return Some(Err("no TLS client"));
            };
            let mut tls = match bramble_tls::client::TlsClient::new(config, &transfer.host) {
                Ok(tls) => tls,
                Err(_) => return Some(Err("TLS client set-up failed")),
            };
            tls.write(&transfer.request);
            transfer.tls = Some(tls);
            self.local_port = if self.local_port >= 65_000 {
                FIRST_LOCAL_PORT
            } else {
                self.local_port + 1
            };
            let socket = appliance.sockets.get_mut::<tcp::Socket>(self.tcp);
            socket.abort();
            if socket
                .connect(
                    appliance.iface.context(),
                    IpEndpoint::new(address, transfer.port),
                    self.local_port,
                )
                .is_err()
            {
                return Some(Err("cannot open a connection to the CA"));
            }
            transfer.stage = Stage::Exchange;
        }
        let socket = appliance.sockets.get_mut::<tcp::Socket>(self.tcp);
        let tls = transfer.tls.as_mut()?;
        if socket.state() == tcp::State::Established {
            transfer.connected = true;
        }
        if !socket.is_open() {
            return Some(Err(if transfer.connected {
                "the CA closed the connection"
            } else {
                "the CA refused the connection (or it was reset)"
            }));
        }
        while socket.can_recv() && tls.receive_space() > 0 {
            let taken = socket.recv(|bytes| {
                let taken = tls.receive(bytes);
                (taken, taken)
            });
            if !matches!(taken, Ok(n) if n > 0) {
                break;
            }
        }
        if let Some(error) = tls.error() {
            log::warn!("acme: TLS with {}: {error}", transfer.host);
            return Some(Err(
                "TLS with the CA failed (is acme_ca_certificate the CA's root, and the clock right?)",
            ));
        }
        while socket.can_send() && !tls.outgoing().is_empty() {
            match socket.send_slice(tls.outgoing()) {
                Ok(0) | Err(_) => break,
                Ok(sent) => tls.sent(sent),
            }
        }
        let plaintext = tls.take_plaintext();
        if !plaintext.is_empty() {
            match transfer.reader.push(&plaintext) {
                Ok(Some(response)) => return Some(Ok(response)),
                Ok(None) => {}
                Err(error) => {
                    log::warn!("acme: the CA's response: {error}");
                    return Some(Err("the CA's response is not valid HTTP"));
                }
            }
        }
        if tls.peer_closed() || (transfer.connected && !socket.may_recv()) {
            return Some(
                transfer
                    .reader
                    .finish()
                    .map_err(|_| "the CA closed the connection inside its response"),
            );
        }
        let _ = transfer.method;
        None
    }
}
