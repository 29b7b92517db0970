//! The heartbeat (`heartbeat = https://...`, issue 31 item 4): a GET to the owner's URL every
//! `heartbeat_every` minutes, healthchecks-style, so that a monitoring service notices when the
//! pings stop and tells the owner the page went quiet.
//!
//! Each ping looks the host up (A; an address in the URL is used as it is), opens one TCP
//! connection, checks the server's certificate against the roots given (Let's Encrypt's, or
//! `acme_ca_certificate`) and the clock, sends `GET PATH` with `Connection: close` and reads
//! the status line; the body is not kept. Nothing waits: the state moves on in the poll,
//! and a ping that has no answer within [`PING_TIMEOUT_MICROS`] counts as failed. The first
//! ping goes once the board has an address and the clock is set (a certificate cannot be
//! checked without it), then one every interval, whatever the outcome.
//!
//! The request goes through the appliance's HTTPS client ([`super::https_client`]), as
//! ACME's and dynamic DNS's do.

use super::Appliance;
use super::https_client::{FetchError, FetchSockets, HttpsFetch};
use alloc::sync::Arc;
use bramble_acme::http::{Method, parse_https_url, write_request};
use bramble_hal::{EthernetDevice, Instant};
use bramble_jobs::Host;
use bramble_tls::client::ClientConfig;
use bramble_tls::clock::CLOCK;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::dns;
use smoltcp::socket::tcp;

/// Longest a ping may take, lookup, connection and TLS handshake included.
pub const PING_TIMEOUT_MICROS: u64 = 30_000_000;
/// While a ping is out, the latest the loop looks at it again (socket events usually wake it
/// sooner).
const PING_RECHECK_MICROS: u64 = 50_000;
/// While waiting for an address or the clock, how often to look again.
const WAITING_RECHECK_MICROS: u64 = 1_000_000;
/// TCP buffers: the request is a few hundred bytes; the answer is read as it comes.
const TCP_RX_LEN: usize = 4096;
const TCP_TX_LEN: usize = 1024;
/// The local port pings leave from (one at a time).
const LOCAL_PORT: u16 = 50_600;

/// Memory for the heartbeat: its TCP buffers and one DNS query slot.
pub type HeartbeatMemory = super::https_client::ClientMemory<TCP_RX_LEN, TCP_TX_LEN, 1>;

/// What the owner set.
#[derive(Clone, Copy)]
pub struct HeartbeatConfig<'a> {
    /// The `https://` URL pinged.
    pub url: &'a str,
    /// Minutes between pings.
    pub every_minutes: u32,
    /// The roots the server's certificate must chain to (PEM).
    pub roots_pem: &'a [u8],
    /// Name servers for a static address (DHCP gives its own).
    pub dns_servers: &'a [[u8; 4]],
}

/// What the heartbeat has done, for the status line and the status page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatStatus {
    /// Pings started.
    pub sent: u64,
    /// Pings the server answered with a 2xx status.
    pub answered: u64,
    /// Pings that failed (no answer, TLS, another status).
    pub failed: u64,
    /// The last answer's status (0: none yet, or the last ping got none).
    pub last_status: u16,
    /// Seconds until the next ping.
    pub next_in: u64,
}

pub(super) struct HeartbeatState<'a> {
    config: HeartbeatConfig<'a>,
    client: Arc<ClientConfig>,
    tcp: SocketHandle,
    dns: SocketHandle,
    /// The ping under way.
    fetch: Option<HttpsFetch>,
    next_at: Option<Instant>,
    status: HeartbeatStatus,
    logged_clock_wait: bool,
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Starts the heartbeat in `memory` and two kept-back socket slots (TCP and DNS).
    pub fn start_heartbeat(
        &mut self,
        config: HeartbeatConfig<'a>,
        memory: &'a mut HeartbeatMemory,
    ) -> Result<(), &'static str> {
        if self.heartbeat.is_some() {
            return Err("the heartbeat is already running");
        }
        if self.sockets_free() < 2 {
            return Err("no socket slots left for the heartbeat");
        }
        parse_https_url(config.url).ok_or("the heartbeat URL is not an https:// URL")?;
        let roots = bramble_tls::client::roots_from_pem(config.roots_pem)
            .map_err(|_| "no usable root certificate to check the heartbeat's server with")?;
        let client =
            bramble_tls::client::client_config(roots).map_err(|_| "TLS client set-up failed")?;
        let HeartbeatMemory {
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
        log::info!(
            "heartbeat: a GET to {} every {} min",
            config.url,
            config.every_minutes
        );
        self.heartbeat = Some(HeartbeatState {
            config,
            client,
            tcp,
            dns,
            fetch: None,
            next_at: None,
            status: HeartbeatStatus::default(),
            logged_clock_wait: false,
        });
        Ok(())
    }

    /// The heartbeat's counts, once started.
    pub fn heartbeat_status(&self, now: Instant) -> Option<HeartbeatStatus> {
        self.heartbeat.as_ref().map(|state| HeartbeatStatus {
            next_in: state
                .next_at
                .map_or(0, |at| at.micros_since(now) / 1_000_000),
            ..state.status
        })
    }

    /// Moves the ping on, or starts one when it is due.
    pub(super) fn poll_heartbeat(&mut self, now: Instant) {
        let Some(mut state) = self.heartbeat.take() else {
            return;
        };
        if let Some(outcome) = state.step(self, now) {
            state.finish(self, outcome, now);
        }
        self.heartbeat = Some(state);
    }

    /// When the heartbeat next needs a poll.
    pub(super) fn heartbeat_deadline(&self, now: Instant) -> Option<Instant> {
        let state = self.heartbeat.as_ref()?;
        Some(match (&state.fetch, state.next_at) {
            (None, Some(at)) => at.max(now),
            (None, None) => now.add_micros(WAITING_RECHECK_MICROS),
            _ => now.add_micros(PING_RECHECK_MICROS),
        })
    }
}

impl<'a> HeartbeatState<'a> {
    fn sockets(&self) -> FetchSockets<'a> {
        FetchSockets {
            tcp: self.tcp,
            dns: self.dns,
            local_port: LOCAL_PORT,
            dns_servers: self.config.dns_servers,
        }
    }

    /// One step; `Some` once the ping has an outcome (the status, or why it failed).
    fn step<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        now: Instant,
    ) -> Option<Result<u16, FetchError>> {
        let sockets = self.sockets();
        if let Some(fetch) = &mut self.fetch {
            return fetch
                .poll(&mut appliance.net(), sockets, now)
                .map(|outcome| outcome.map(|response| response.status));
        }
        if self.next_at.is_some_and(|at| now < at) {
            return None;
        }
        if CLOCK.unix_seconds().is_none() {
            if !self.logged_clock_wait {
                self.logged_clock_wait = true;
                log::info!("heartbeat: waiting for the clock to check the server's certificate");
            }
            return None;
        }
        // An address first.
        appliance.iface.ipv4_addr()?;
        // Checked when the heartbeat started.
        let url = parse_https_url(self.config.url)?;
        self.status.sent += 1;
        let request = write_request(Method::Get, &url, &[]);
        match HttpsFetch::start(
            &mut appliance.net(),
            self.sockets(),
            self.client.clone(),
            &url,
            request,
            PING_TIMEOUT_MICROS,
            now,
        ) {
            Ok(fetch) => {
                self.fetch = Some(fetch);
                None
            }
            Err(error) => Some(Err(error)),
        }
    }

    /// Ends the ping: counts it, says so when it failed, and plans the next.
    fn finish<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        outcome: Result<u16, FetchError>,
        now: Instant,
    ) {
        if let Some(fetch) = self.fetch.take() {
            fetch.end(&mut appliance.net(), self.sockets());
        }
        let every = u64::from(self.config.every_minutes).saturating_mul(60);
        self.next_at = Some(now.add_micros(every.saturating_mul(1_000_000)));
        match outcome {
            Ok(status) if (200..300).contains(&status) => {
                self.status.answered += 1;
                self.status.last_status = status;
                log::info!("heartbeat: answered {status}; the next ping in {every} s");
            }
            Ok(status) => {
                self.status.failed += 1;
                self.status.last_status = status;
                log::warn!("heartbeat: the server answered {status}; the next ping in {every} s");
            }
            Err(why) => {
                self.status.failed += 1;
                self.status.last_status = 0;
                log::warn!("heartbeat: {why}; the next ping in {every} s");
            }
        }
    }
}
