//! Reachability over HTTPS: the home's public IPv4 address from an echo service
//! (`public_ip_url`), the name kept on the addresses by the dyndns2 protocol (`ddns =
//! dyndns2`, `desec`, `duckdns`; the request and the answers are [`bramble_proto::dyndns`]'s), and an
//! outside checker's verdict on the page (`reach_check_url`). One TCP socket and one DNS
//! socket, one request at a time, through the appliance's HTTPS client
//! ([`crate::https_client`]); each request waits for an address and the clock (the servers'
//! certificates are checked against it).
//!
//! The echo is asked when the agent starts and every `public_ip_every` minutes (a failure is
//! asked again after [`ECHO_RETRY_MICROS`] until the first answer); a public address it
//! gives goes to the shared [`crate::public::PublicAddress`], which RFC 2136 dynamic DNS reads
//! too. The router's port mapping writes there as well; the echo, which sees the address from
//! outside, is believed over a router behind another NAT.
//!
//! dyndns2 sends only on a change, as RFC 2136 dynamic DNS does ([`crate::ddns`]): the
//! addresses wanted (A from the public address, or the interface's; AAAA from the global
//! IPv6 address) are compared with those the provider confirmed, and a difference goes out
//! after [`crate::ddns::SETTLE_MICROS`] of quiet; after a restart the first update is sent
//! once. The provider's answer is obeyed ([`bramble_proto::dyndns::Answer::verdict`]): `good` and
//! `nochg` confirm; `badauth`, `nohost`, `abuse` and the other account faults stop every
//! further update until the settings change (BRAMBLE.TXT is read at boot: a restart);
//! `911` and `dnserr` hold the next try back 30 minutes, whatever the addresses do; anything
//! else (no answer, an error page) is retried with back-off from [`FIRST_RETRY_MICROS`] to
//! [`LONGEST_RETRY_MICROS`], new addresses starting afresh.
//!
//! The outside check asks `reach_check_url` after each confirmed update (dyndns2 or RFC 2136),
//! at start when there is no dyndns2 update to wait for, and every [`CHECK_EVERY_MICROS`];
//! an answer whose body begins with `OK` says the page was reached, anything else that it
//! was not. Without the setting the status says `unchecked`.
//!
//! The dyndns2 password goes into the Authorization header (DuckDNS: the query) and nowhere
//! else: the log names the host and the addresses, never the request target.

use crate::ddns::{Ipv4Source, Published, SETTLE_MICROS};
use crate::host::Host;
use crate::https_client::{FetchError, FetchSockets, HttpsFetch};
use crate::public::PublicSource;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use bramble_acme::http::{HttpsUrl, Method, parse_https_url, write_request};
use bramble_hal::Instant;
use bramble_proto::dyndns::{Answer, Dialect, Verdict, answer_of, parse_echo, update_target};
use bramble_tls::client::ClientConfig;
use bramble_tls::clock::CLOCK;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::{dns, tcp};

/// Longest one request may take, lookup, connection and TLS handshake included.
pub const REQUEST_TIMEOUT_MICROS: u64 = 30_000_000;
/// Until the echo has answered once, how soon a failed request is repeated.
pub const ECHO_RETRY_MICROS: u64 = 60_000_000;
/// The first wait after a failed update.
pub const FIRST_RETRY_MICROS: u64 = 60_000_000;
/// The longest wait after failed updates.
pub const LONGEST_RETRY_MICROS: u64 = 3_600_000_000;
/// How often the outside check is asked again.
pub const CHECK_EVERY_MICROS: u64 = 3_600_000_000;
/// While a request is out, the latest the loop looks at it again.
const REQUEST_RECHECK_MICROS: u64 = 50_000;
/// While waiting for the clock or an address, how often to look again.
const WAITING_RECHECK_MICROS: u64 = 1_000_000;
/// TCP buffers: the requests are a few hundred bytes; the answers are read as they come.
const TCP_RX_LEN: usize = 4096;
const TCP_TX_LEN: usize = 1024;
/// The local ports requests leave from, in turn (a server's TIME-WAIT of the last one must
/// not meet the next).
const FIRST_LOCAL_PORT: u16 = 50_700;
const LOCAL_PORTS: u16 = 100;
/// The User-Agent of the dyndns2 requests (providers ask for one that names the client).
const USER_AGENT: &str = "Bramble/0.1 dyndns2";

/// Memory for the agent: its TCP buffers and one DNS query slot.
pub type ReachMemory = crate::https_client::ClientMemory<TCP_RX_LEN, TCP_TX_LEN, 1>;

/// The dyndns2 update the owner set.
#[derive(Clone, Copy, Debug)]
pub struct Dyndns2Config<'a> {
    /// Which parameters the provider takes.
    pub dialect: Dialect,
    /// The provider's `https://` update URL.
    pub url: &'a str,
    /// The name whose records follow the addresses.
    pub name: &'a str,
    /// The account's user name (Basic authentication; DuckDNS: unused).
    pub user: &'a str,
    /// The password or token.
    pub password: &'a str,
    /// Where the A record's address comes from.
    pub ipv4: Ipv4Source,
    /// Whether the AAAA record follows the global IPv6 address.
    pub ipv6: bool,
}

/// What the owner set.
#[derive(Clone, Copy)]
pub struct ReachConfig<'a> {
    /// The echo service's `https://` URL, if any.
    pub echo_url: Option<&'a str>,
    /// Minutes between echo requests.
    pub echo_every_minutes: u32,
    /// The dyndns2 update, if any.
    pub update: Option<Dyndns2Config<'a>>,
    /// The outside checker's `https://` URL, if any.
    pub check_url: Option<&'a str>,
    /// The roots the servers' certificates must chain to (PEM).
    pub roots_pem: &'a [u8],
    /// Name servers for a static address (DHCP gives its own).
    pub dns_servers: &'a [[u8; 4]],
}

/// Where dyndns2 stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateState {
    /// The provider holds the addresses wanted (or there is nothing to publish yet).
    UpToDate,
    /// A change waits: to settle, for the clock or an address, or its request is out.
    Pending,
    /// Waiting after a failure (seconds left).
    BackingOff(u64),
    /// The provider refused the account or the name: nothing more is sent until the
    /// settings change.
    Stopped(Answer),
}

impl UpdateState {
    /// In a few words, for the status page.
    pub fn short(self) -> &'static str {
        match self {
            UpdateState::UpToDate => "up to date",
            UpdateState::Pending => "update pending",
            UpdateState::BackingOff(_) => "backing off",
            UpdateState::Stopped(Answer::BadAuth) => "stopped by badauth",
            UpdateState::Stopped(Answer::NoHost) => "stopped by nohost",
            UpdateState::Stopped(Answer::Abuse) => "stopped by abuse",
            UpdateState::Stopped(_) => "stopped by the provider",
        }
    }
}

impl core::fmt::Display for UpdateState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            UpdateState::UpToDate => f.write_str("up to date"),
            UpdateState::Pending => f.write_str("update pending"),
            UpdateState::BackingOff(seconds) => write!(f, "next try in {seconds} s"),
            UpdateState::Stopped(answer) => {
                write!(f, "stopped by {} until the settings change", answer.word())
            }
        }
    }
}

/// What the outside checker last said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckState {
    /// No `reach_check_url`, or not asked yet.
    Unchecked,
    /// It reached the page.
    Reachable,
    /// It did not (or it could not be asked).
    Failed,
}

impl CheckState {
    /// The word for the status line and page.
    pub fn word(self) -> &'static str {
        match self {
            CheckState::Unchecked => "unchecked",
            CheckState::Reachable => "reachable",
            CheckState::Failed => "failed",
        }
    }
}

/// The agent's state, for the status line and the status page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReachStatus {
    /// What the dyndns2 provider last confirmed.
    pub published: Published,
    /// dyndns2 updates the provider confirmed since boot.
    pub updates: u32,
    /// dyndns2 requests sent since boot.
    pub requests: u32,
    /// Failed dyndns2 tries in a row.
    pub failures: u32,
    /// The provider's last answer (`None`: none yet, or the last request got none).
    pub last_answer: Option<Answer>,
    /// Where dyndns2 stands (`None`: no dyndns2 update configured).
    pub update: Option<UpdateState>,
    /// Echo requests sent, and answered with an address.
    pub echoes: u32,
    /// Echo requests answered with a public address.
    pub echoes_answered: u32,
    /// The outside check's last verdict.
    pub check: CheckState,
}

/// What a request under way is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Job {
    Echo,
    Update(Published),
    Check,
}

/// The agent: the request under way and what each of its three jobs waits for.
pub struct ReachState<'a> {
    config: ReachConfig<'a>,
    client: Arc<ClientConfig>,
    tcp: SocketHandle,
    dns: SocketHandle,
    local_port: u16,
    fetch: Option<(Job, HttpsFetch)>,
    /// When the echo is next asked (`None`: no echo, or at once).
    echo_at: Option<Instant>,
    echo_answered: bool,
    /// The addresses wanted as last seen, and since when.
    wanted: Published,
    wanted_since: Instant,
    /// No update before this (back-off or the provider's hold).
    retry_at: Option<Instant>,
    /// The back-off is for these addresses (new ones end it); `None` for the provider's
    /// hold after `911`, which new addresses do not end.
    failed_for: Option<Published>,
    stopped: Option<Answer>,
    /// When the outside check is due (`None`: not planned).
    check_at: Option<Instant>,
    /// RFC 2136 updates seen, so that the check follows each.
    ddns_updates_seen: u32,
    status: ReachStatus,
    logged_clock_wait: bool,
}

/// Standard base64 with padding (RFC 4648 §4), for Basic authentication (RFC 7617).
fn base64(bytes: &[u8]) -> String {
    bramble_acme::base64::standard_encode(bytes)
}

/// The dyndns2 request: `GET target` with Basic authentication (not DuckDNS's, whose token
/// is in the target) and a User-Agent naming the client.
pub fn update_request(url: &HttpsUrl<'_>, target: &str, basic: Option<(&str, &str)>) -> Vec<u8> {
    let mut head = format!("GET {target} HTTP/1.1\r\nHost: {}", url.host);
    if url.port != 443 {
        head.push_str(&format!(":{}", url.port));
    }
    head.push_str(&format!("\r\nUser-Agent: {USER_AGENT}\r\n"));
    if let Some((user, password)) = basic {
        let credentials = format!("{user}:{password}");
        head.push_str(&format!(
            "Authorization: Basic {}\r\n",
            base64(credentials.as_bytes())
        ));
    }
    head.push_str("Accept: */*\r\nConnection: close\r\n\r\n");
    head.into_bytes()
}

impl<'a> ReachState<'a> {
    /// Starts the agent in `memory` and two sockets added to `sockets` (TCP and DNS; the
    /// caller checks there is room).
    pub fn new(
        config: ReachConfig<'a>,
        memory: &'a mut ReachMemory,
        sockets: &mut SocketSet<'a>,
        now: Instant,
    ) -> Result<Self, &'static str> {
        for url in [
            config.echo_url,
            config.check_url,
            config.update.map(|update| update.url),
        ]
        .into_iter()
        .flatten()
        {
            parse_https_url(url).ok_or("a URL is not an https:// URL")?;
        }
        let roots = bramble_tls::client::roots_from_pem(config.roots_pem)
            .map_err(|_| "no usable root certificate to check the servers with")?;
        let client =
            bramble_tls::client::client_config(roots).map_err(|_| "TLS client set-up failed")?;
        let ReachMemory {
            tcp_rx,
            tcp_tx,
            dns_queries,
        } = memory;
        let tcp = sockets.add(tcp::Socket::new(
            tcp::SocketBuffer::new(&mut tcp_rx[..]),
            tcp::SocketBuffer::new(&mut tcp_tx[..]),
        ));
        let dns = sockets.add(dns::Socket::new(&[], &mut dns_queries[..]));
        if let Some(url) = config.echo_url {
            log::info!(
                "public: asking {} for the public address every {} min",
                parse_https_url(url).map_or("", |url| url.host),
                config.echo_every_minutes
            );
        }
        if let Some(update) = &config.update {
            log::info!(
                "dyndns: keeping {} up to date through {} ({:?})",
                update.name,
                parse_https_url(update.url).map_or("", |url| url.host),
                update.dialect
            );
        }
        Ok(ReachState {
            config,
            client,
            tcp,
            dns,
            local_port: FIRST_LOCAL_PORT,
            fetch: None,
            echo_at: None,
            echo_answered: false,
            wanted: Published::default(),
            wanted_since: now,
            retry_at: None,
            failed_for: None,
            stopped: None,
            // Without dyndns2, checked once at start; with it, after its first update.
            check_at: config
                .check_url
                .filter(|_| config.update.is_none())
                .map(|_| now),
            ddns_updates_seen: 0,
            status: ReachStatus {
                published: Published::default(),
                updates: 0,
                requests: 0,
                failures: 0,
                last_answer: None,
                update: config.update.map(|_| UpdateState::UpToDate),
                echoes: 0,
                echoes_answered: 0,
                check: CheckState::Unchecked,
            },
            logged_clock_wait: false,
        })
    }

    /// The agent's state.
    pub fn status(&self, now: Instant) -> ReachStatus {
        let update = self.config.update.map(|_| self.update_state(now));
        ReachStatus {
            update,
            ..self.status
        }
    }

    /// Moves the request under way on, or starts the next one due.
    pub fn poll<H: Host<'a>>(&mut self, host: &mut H, now: Instant) {
        if let Some(update) = &self.config.update {
            let wanted = crate::ddns::wanted_addresses(&host.net(), update.ipv4, update.ipv6);
            self.observe(wanted, now);
        }
        if let Some(updates) = host.ddns().map(|ddns| ddns.updates())
            && updates != self.ddns_updates_seen
        {
            self.ddns_updates_seen = updates;
            if self.config.check_url.is_some() {
                self.check_at = Some(now);
            }
        }
        let sockets = self.sockets();
        if let Some((job, fetch)) = &mut self.fetch {
            if let Some(outcome) = fetch.poll(&mut host.net(), sockets, now) {
                let job = *job;
                if let Some((_, fetch)) = self.fetch.take() {
                    fetch.end(&mut host.net(), sockets);
                }
                self.finish(host, job, outcome, now);
            }
        } else {
            self.start_next(host, now);
        }
    }

    /// When the agent next needs a poll.
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        let state = self;
        if state.fetch.is_some() {
            return Some(now.add_micros(REQUEST_RECHECK_MICROS));
        }
        let due = [state.echo_due(now), state.update_due(), state.check_at]
            .into_iter()
            .flatten()
            .min()?;
        // Due, yet the poll just run started nothing: it waits for the clock or an address.
        Some(if due <= now {
            now.add_micros(WAITING_RECHECK_MICROS)
        } else {
            due
        })
    }

    fn sockets(&self) -> FetchSockets<'a> {
        FetchSockets {
            tcp: self.tcp,
            dns: self.dns,
            local_port: self.local_port,
            dns_servers: self.config.dns_servers,
        }
    }

    /// Notes the addresses wanted: a change restarts the settle time and ends a back-off
    /// that was for the old ones.
    fn observe(&mut self, wanted: Published, now: Instant) {
        if wanted == self.wanted {
            return;
        }
        self.wanted = wanted;
        self.wanted_since = now;
        if self.failed_for.is_some_and(|failed| failed != wanted) {
            self.retry_at = None;
            self.failed_for = None;
        }
    }

    /// Whether the provider lacks an address wanted.
    fn needs_update(&self) -> bool {
        let published = self.status.published;
        (self.wanted.ipv4.is_some() && self.wanted.ipv4 != published.ipv4)
            || (self.wanted.ipv6.is_some() && self.wanted.ipv6 != published.ipv6)
    }

    fn echo_due(&self, now: Instant) -> Option<Instant> {
        self.config.echo_url?;
        Some(self.echo_at.unwrap_or(now))
    }

    /// When the next update may go (`None`: none needed, or stopped).
    fn update_due(&self) -> Option<Instant> {
        self.config.update?;
        if self.stopped.is_some() || !self.needs_update() {
            return None;
        }
        let settled = self.wanted_since.add_micros(SETTLE_MICROS);
        Some(self.retry_at.map_or(settled, |retry| retry.max(settled)))
    }

    fn update_state(&self, now: Instant) -> UpdateState {
        if let Some(answer) = self.stopped {
            return UpdateState::Stopped(answer);
        }
        if !self.needs_update() {
            return UpdateState::UpToDate;
        }
        match self.retry_at {
            Some(at) if at > now && !matches!(self.fetch, Some((Job::Update(_), _))) => {
                UpdateState::BackingOff(at.micros_since(now) / 1_000_000)
            }
            _ => UpdateState::Pending,
        }
    }

    /// Starts the request due first: the echo, then the update, then the check.
    fn start_next<H: Host<'a>>(&mut self, host: &mut H, now: Instant) {
        let echo = self
            .echo_due(now)
            .filter(|at| *at <= now)
            .map(|_| Job::Echo);
        let update = self
            .update_due()
            .filter(|at| *at <= now)
            .map(|_| Job::Update(self.wanted));
        let check = self.check_at.filter(|at| *at <= now).map(|_| Job::Check);
        let Some(job) = echo.or(update).or(check) else {
            return;
        };
        if CLOCK.unix_seconds().is_none() {
            if !self.logged_clock_wait {
                self.logged_clock_wait = true;
                log::info!("reach: waiting for the clock to check the servers' certificates");
            }
            return;
        }
        if host.net().iface.ipv4_addr().is_none() {
            return;
        }
        let (url, request) = match job {
            Job::Echo => {
                let Some(url) = self.config.echo_url.and_then(parse_https_url) else {
                    return;
                };
                self.status.echoes += 1;
                (url, write_request(Method::Get, &url, &[]))
            }
            Job::Check => {
                let Some(url) = self.config.check_url.and_then(parse_https_url) else {
                    return;
                };
                (url, write_request(Method::Get, &url, &[]))
            }
            Job::Update(wanted) => {
                let Some(update) = self.config.update else {
                    return;
                };
                let Some(url) = parse_https_url(update.url) else {
                    return;
                };
                let Some(target) = update_target(
                    update.dialect,
                    url.path,
                    update.name,
                    update.password,
                    wanted.ipv4,
                    wanted.ipv6,
                ) else {
                    log::error!("dyndns: the update request does not fit; no update is sent");
                    self.stopped = Some(Answer::NotFqdn);
                    return;
                };
                let basic =
                    (update.dialect != Dialect::DuckDns).then_some((update.user, update.password));
                self.status.requests = self.status.requests.saturating_add(1);
                log::info!(
                    "dyndns: updating {} at {}: {}",
                    update.name,
                    url.host,
                    crate::ddns::Shown(&wanted)
                );
                (url, update_request(&url, &target, basic))
            }
        };
        self.local_port = FIRST_LOCAL_PORT + (self.local_port + 1 - FIRST_LOCAL_PORT) % LOCAL_PORTS;
        match HttpsFetch::start(
            &mut host.net(),
            self.sockets(),
            self.client.clone(),
            &url,
            request,
            REQUEST_TIMEOUT_MICROS,
            now,
        ) {
            Ok(fetch) => self.fetch = Some((job, fetch)),
            Err(error) => self.finish(host, job, Err(error), now),
        }
    }

    /// Takes a request's outcome.
    fn finish<H: Host<'a>>(
        &mut self,
        host: &mut H,
        job: Job,
        outcome: Result<bramble_acme::http::Response, FetchError>,
        now: Instant,
    ) {
        match job {
            Job::Echo => self.finish_echo(host, outcome, now),
            Job::Update(wanted) => self.finish_update(wanted, outcome, now),
            Job::Check => self.finish_check(outcome, now),
        }
    }

    fn finish_echo<H: Host<'a>>(
        &mut self,
        host: &mut H,
        outcome: Result<bramble_acme::http::Response, FetchError>,
        now: Instant,
    ) {
        let every = u64::from(self.config.echo_every_minutes).saturating_mul(60_000_000);
        let address = match &outcome {
            Ok(response) if (200..300).contains(&response.status) => parse_echo(&response.body),
            _ => None,
        };
        match (address, outcome) {
            (Some(address), _) => {
                self.echo_answered = true;
                self.status.echoes_answered = self.status.echoes_answered.saturating_add(1);
                host.net()
                    .set_public_ipv4(Some(address), PublicSource::Echo, now);
            }
            (None, Ok(response)) => log::warn!(
                "public: the echo answered {} without a public IPv4 address",
                response.status
            ),
            (None, Err(error)) => log::warn!("public: the echo: {error}"),
        }
        let wait = if self.echo_answered {
            every
        } else {
            every.min(ECHO_RETRY_MICROS)
        };
        self.echo_at = Some(now.add_micros(wait));
    }

    fn finish_update(
        &mut self,
        wanted: Published,
        outcome: Result<bramble_acme::http::Response, FetchError>,
        now: Instant,
    ) {
        let Some(update) = self.config.update else {
            return;
        };
        let answer = match outcome {
            Ok(response) => answer_of(response.status, &response.body),
            Err(error) => {
                log::warn!("dyndns: {} not updated: {error}", update.name);
                self.status.last_answer = None;
                self.back_off(Some(wanted), None, now);
                return;
            }
        };
        self.status.last_answer = Some(answer);
        match answer.verdict() {
            Verdict::Done => {
                if wanted.ipv4.is_some() {
                    self.status.published.ipv4 = wanted.ipv4;
                }
                if wanted.ipv6.is_some() {
                    self.status.published.ipv6 = wanted.ipv6;
                }
                self.status.updates = self.status.updates.saturating_add(1);
                self.status.failures = 0;
                self.retry_at = None;
                self.failed_for = None;
                log::info!(
                    "dyndns: {} {}: {}",
                    update.name,
                    if answer == Answer::NoChange {
                        "already held"
                    } else {
                        "updated"
                    },
                    crate::ddns::Shown(&wanted)
                );
                if self.config.check_url.is_some() {
                    self.check_at = Some(now);
                }
            }
            Verdict::Stop => {
                self.stopped = Some(answer);
                log::error!(
                    "dyndns: the provider answered {} for {}: {}; no more updates until the \
                     settings are fixed and the board restarted",
                    answer.word(),
                    update.name,
                    stop_reason(answer)
                );
            }
            Verdict::RetryAfter(seconds) => {
                log::warn!(
                    "dyndns: the provider answered {} (its own trouble); next try in {seconds} s",
                    answer.word()
                );
                self.back_off(None, Some(seconds.saturating_mul(1_000_000)), now);
            }
            Verdict::Retry => {
                log::warn!(
                    "dyndns: the provider answered {}; trying again later",
                    answer.word()
                );
                self.back_off(Some(wanted), None, now);
            }
        }
    }

    /// Counts a failed try and sets the wait: `hold` as given (the provider's, not ended
    /// by new addresses), else the back-off for `wanted`.
    fn back_off(&mut self, wanted: Option<Published>, hold: Option<u64>, now: Instant) {
        self.status.failures = self.status.failures.saturating_add(1);
        let wait = hold.unwrap_or_else(|| {
            let doublings = self.status.failures.saturating_sub(1).min(16);
            FIRST_RETRY_MICROS
                .saturating_mul(1 << doublings)
                .min(LONGEST_RETRY_MICROS)
        });
        self.retry_at = Some(now.add_micros(wait));
        self.failed_for = wanted;
    }

    fn finish_check(
        &mut self,
        outcome: Result<bramble_acme::http::Response, FetchError>,
        now: Instant,
    ) {
        let reached = match &outcome {
            Ok(response) if (200..300).contains(&response.status) => {
                let body = response.body.get(..2).unwrap_or(&[]);
                body.eq_ignore_ascii_case(b"OK")
            }
            _ => false,
        };
        self.status.check = if reached {
            log::info!("reach: the outside check reached the page");
            CheckState::Reachable
        } else {
            match outcome {
                Ok(response) => log::warn!(
                    "reach: the outside check did not reach the page (it answered {})",
                    response.status
                ),
                Err(error) => log::warn!("reach: the outside check could not be asked: {error}"),
            }
            CheckState::Failed
        };
        self.check_at = Some(now.add_micros(CHECK_EVERY_MICROS));
    }
}

/// What a stopping answer asks of the owner.
fn stop_reason(answer: Answer) -> &'static str {
    match answer {
        Answer::BadAuth | Answer::DuckKo => "the user name, password or token is wrong",
        Answer::NoHost => "the account has no such name",
        Answer::NotFqdn => "the name is not a full domain name",
        Answer::Abuse => "the provider blocked the name for abuse",
        Answer::NotDonator => "the request needs a paid account",
        Answer::BadAgent => "the provider refuses this client",
        _ => "the provider refused the request",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_carries_basic_authentication_and_a_user_agent() {
        let url = parse_https_url("https://dyn.test:8443/nic/update").unwrap();
        let request = update_request(
            &url,
            "/nic/update?hostname=home.test&myip=203.0.113.7",
            Some(("owner", "pa:ss")),
        );
        let text = String::from_utf8(request).unwrap();
        assert_eq!(
            text,
            "GET /nic/update?hostname=home.test&myip=203.0.113.7 HTTP/1.1\r\nHost: \
             dyn.test:8443\r\nUser-Agent: Bramble/0.1 dyndns2\r\nAuthorization: Basic \
             b3duZXI6cGE6c3M=\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let url = parse_https_url("https://www.duckdns.org/update").unwrap();
        let text = String::from_utf8(update_request(&url, "/update?domains=x", None)).unwrap();
        assert!(text.contains("Host: www.duckdns.org\r\n") && !text.contains("Authorization"));
    }

    #[test]
    fn a_refusal_without_a_known_word_is_badauth() {
        assert_eq!(answer_of(200, b"good 203.0.113.7"), Answer::Good);
        assert_eq!(answer_of(401, b"badauth"), Answer::BadAuth);
        assert_eq!(answer_of(401, b"<html>Unauthorized"), Answer::BadAuth);
        assert_eq!(answer_of(403, b""), Answer::BadAuth);
        assert_eq!(answer_of(500, b"<html>"), Answer::Unknown);
        assert_eq!(answer_of(200, b"911"), Answer::ServerError);
    }
}
