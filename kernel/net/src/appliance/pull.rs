//! Pulling a new site (`publish_url`, issue 28 item 3): every `publish_every` minutes the
//! board fetches the signed manifest from the owner's static host over HTTPS and, when it
//! names a newer version, streams the image beside it into the card's idle site slot.
//!
//! One check: the host looked up (A; an address in the URL is used as it is), one TCP
//! connection, the server's certificate checked against the roots given (Let's Encrypt's, or
//! `acme_ca_certificate`) and the clock, `GET` with `Connection: close`. The manifest file
//! (`bramble_publish::pull`) is read whole (192 bytes) and checked: the Ed25519 signature with
//! the owner key on the card, the host name, a version above the accepted one (the same
//! version is "up to date", quietly). Then the writer ([`Publisher::begin`]) marks the idle
//! slot invalid, a second connection fetches `site-VERSION.bin`, and each piece of its body
//! goes to the card as it arrives ([`Publisher::write`]: whole blocks, a 512-byte tail,
//! a running SHA-256), never the whole image in RAM. At the end [`Publisher::finish`] reads
//! the slot back, checks the hash again, and saves the record naming it live; the board then
//! serves it ([`Appliance::take_published`]).
//!
//! A check also starts at once on a signed nudge: the new version's manifest sent to the
//! board with no body (`bramble publish --nudge --to`, [`PublishService::take_nudge`]).
//!
//! Every fault leaves the live site serving and is counted and said on the console: a bad
//! signature, another host, an old version, an image larger than the slot, a wrong status or
//! length, a truncated or corrupted body, a card error, or a server that stalls: no byte for
//! [`STALL_MICROS`] abandons the fetch, and the idle slot stays marked invalid (it was before
//! the first body byte was written).

use super::Appliance;
use alloc::sync::Arc;
use bramble_acme::http::{HttpsUrl, Method, parse_https_url, write_request};
use bramble_fat::site_slots::SlotRecord;
use bramble_hal::{EthernetDevice, Instant};
use bramble_publish::manifest::{Action, Manifest, ManifestError};
use bramble_publish::pull::{ImageResponse, MANIFEST_FILE_LEN, split_manifest_file};
use bramble_publish::upload::PublishService;
use bramble_publish::writer::PublishError;
use bramble_tls::client::{ClientConfig, TlsClient};
use bramble_tls::clock::CLOCK;
use core::cell::RefCell;
use core::fmt::Write as _;
use core::str::FromStr;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::dns::{self, GetQueryResultError};
use smoltcp::socket::tcp;
use smoltcp::wire::{DnsQueryType, IpAddress, IpEndpoint, Ipv4Address};

/// A fetch with no byte for this long is abandoned (the lookup, the handshake or the body).
pub const STALL_MICROS: u64 = 30_000_000;
/// While a fetch is out, the latest the loop looks at it again.
const RECHECK_MICROS: u64 = 50_000;
/// While waiting for an address or the clock, how often to look again.
const WAITING_RECHECK_MICROS: u64 = 1_000_000;
/// TCP buffers: the body arrives through the receive one; requests are small.
const TCP_RX_LEN: usize = 16 * 1024;
const TCP_TX_LEN: usize = 1024;
/// The local port fetches leave from (one at a time).
const LOCAL_PORT: u16 = 50_700;
/// Longest image URL (the manifest's, plus the image's name).
const MAX_URL_LEN: usize = 320;

/// Memory for pulling: TCP buffers and one DNS query slot.
pub type PullMemory = super::https_client::ClientMemory<TCP_RX_LEN, TCP_TX_LEN, 1>;

/// What the owner set, and the card to write.
pub struct PullConfig<'a> {
    /// The manifest's `https://` URL.
    pub url: &'a str,
    /// Minutes between checks.
    pub every_minutes: u32,
    /// The roots the server's certificate must chain to (PEM).
    pub roots_pem: &'a [u8],
    /// Name servers for a static address (DHCP gives its own).
    pub dns_servers: &'a [[u8; 4]],
    /// The board's host name, which a manifest must name.
    pub hostname: &'a str,
    /// The card writer over the slots as boot found them, shared with the HTTPS upload
    /// handler (one publish at a time, whichever way it comes).
    pub service: &'a RefCell<PublishService<'a>>,
}

/// What pulling has done, for the status line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PullStatus {
    /// Checks of the manifest started.
    pub checks: u64,
    /// Checks that found the live version.
    pub up_to_date: u64,
    /// Sites written, verified and made live.
    pub published: u64,
    /// Signed rollbacks that made the other slot live again (not counted as published).
    pub rolled_back: u64,
    /// Manifests or images refused (signature, host, version, size, hash, length).
    pub refused: u64,
    /// Checks that failed otherwise (network, TLS, stall, card).
    pub failed: u64,
    /// Card blocks written by the last publish (body and record).
    pub last_blocks: u64,
    /// Card blocks written since boot.
    pub blocks: u64,
    /// The version live now.
    pub live_version: u64,
    /// Seconds until the next check.
    pub next_in: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Manifest,
    Image,
}

enum Stage {
    Idle,
    Resolving(dns::QueryHandle),
    Exchanging {
        tls: alloc::boxed::Box<TlsClient>,
        connected: bool,
    },
}

/// How a check ended.
enum Outcome {
    UpToDate,
    Published(SlotRecord),
    /// A signed rollback made the other slot live again (one record block).
    RolledBack(SlotRecord),
    Refused(Refusal),
    Failed(&'static str),
}

enum Refusal {
    Manifest(PublishError),
    Image(bramble_publish::pull::ImageResponseError),
}

pub(super) struct PullState<'a> {
    url: &'a str,
    every_minutes: u32,
    dns_servers: &'a [[u8; 4]],
    hostname: &'a str,
    client: Arc<ClientConfig>,
    service: &'a RefCell<PublishService<'a>>,
    tcp: SocketHandle,
    dns: SocketHandle,
    target: Target,
    stage: Stage,
    /// The response being read (the manifest's or the image's).
    response: ImageResponse,
    /// The manifest file as it arrives.
    manifest: [u8; MANIFEST_FILE_LEN],
    manifest_len: usize,
    /// The image's URL once a manifest was accepted.
    image_url: heapless::String<MAX_URL_LEN>,
    /// When the fetch last made progress (a byte, a lookup answer).
    progress_at: Instant,
    next_at: Option<Instant>,
    status: PullStatus,
    published: Option<SlotRecord>,
    logged_clock_wait: bool,
    /// No check starts while set: the idle slot still holds the site before a live switch,
    /// whose last responses are being sent from it ([`Appliance::hold_publish`]).
    held: bool,
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Starts pulling in `memory` and two kept-back socket slots (TCP and DNS).
    pub fn start_pull(
        &mut self,
        config: PullConfig<'a>,
        memory: &'a mut PullMemory,
    ) -> Result<(), &'static str> {
        if self.pull.is_some() {
            return Err("pulling is already running");
        }
        if self.sockets_free() < 2 {
            return Err("no socket slots left for pulling");
        }
        let url = parse_https_url(config.url).ok_or("publish_url is not an https:// URL")?;
        if config.url.len() + 32 > MAX_URL_LEN {
            return Err("publish_url is too long");
        }
        let _ = url;
        let roots = bramble_tls::client::roots_from_pem(config.roots_pem)
            .map_err(|_| "no usable root certificate to check the publish server with")?;
        let client =
            bramble_tls::client::client_config(roots).map_err(|_| "TLS client set-up failed")?;
        let PullMemory {
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
        // A signed manifest PUT with no body now asks for a check at once (a nudge).
        config.service.borrow_mut().set_pulls(true);
        let record = *config.service.borrow().record();
        log::info!(
            "publish: checking {} every {} min; version {} live",
            config.url,
            config.every_minutes,
            record.slots[usize::from(record.live)].version
        );
        self.pull = Some(PullState {
            url: config.url,
            every_minutes: config.every_minutes,
            dns_servers: config.dns_servers,
            hostname: config.hostname,
            client,
            service: config.service,
            tcp,
            dns,
            target: Target::Manifest,
            stage: Stage::Idle,
            response: ImageResponse::new(0),
            manifest: [0; MANIFEST_FILE_LEN],
            manifest_len: 0,
            image_url: heapless::String::new(),
            progress_at: Instant(0),
            next_at: None,
            status: PullStatus {
                live_version: record.slots[usize::from(record.live)].version,
                ..PullStatus::default()
            },
            published: None,
            logged_clock_wait: false,
            held: false,
        });
        Ok(())
    }

    /// What pulling has done, once started.
    pub fn pull_status(&self, now: Instant) -> Option<PullStatus> {
        self.pull.as_ref().map(|state| PullStatus {
            next_in: state
                .next_at
                .map_or(0, |at| at.micros_since(now) / 1_000_000),
            ..state.status
        })
    }

    /// What signed uploads have done, when the board takes them.
    pub fn upload_counters(&self) -> Option<bramble_publish::upload::UploadCounters> {
        self.publish
            .and_then(|service| service.try_borrow().ok().map(|s| s.counters()))
    }

    /// The record of a site just made live (once), pulled or uploaded: the board switches
    /// to it.
    pub fn take_published(&mut self) -> Option<SlotRecord> {
        if let Some(record) = self.pull.as_mut().and_then(|state| state.published.take()) {
            return Some(record);
        }
        self.publish
            .and_then(|service| service.borrow_mut().take_published())
    }

    /// Hands site uploads (`PUT /.well-known/bramble/site` over HTTPS) to `service`, the
    /// card writer the pull (if any) shares.
    pub fn set_publish_service(&mut self, service: &'a RefCell<PublishService<'a>>) {
        self.publish = Some(service);
        self.server.borrow_mut().set_upload(service);
    }

    /// Holds (`true`) or lets go of the next check: while held none starts, so the idle slot
    /// is not written. The board holds it while the site switched away from still sends
    /// responses from that slot. A check under way is not affected (none is, after a
    /// publish: the switch follows its end).
    pub fn hold_publish(&mut self, held: bool) {
        if let Some(state) = self.pull.as_mut() {
            state.held = held;
        }
        if let Some(service) = self.publish {
            service.borrow_mut().hold(held);
        }
    }

    /// Moves the check on, or starts one when it is due.
    pub(super) fn poll_pull(&mut self, now: Instant) {
        let Some(mut state) = self.pull.take() else {
            return;
        };
        if matches!(state.stage, Stage::Idle) && state.service.borrow_mut().take_nudge() {
            log::info!("publish: nudged; checking {} now", state.url);
            state.next_at = Some(now);
        }
        if let Some(outcome) = state.step(self, now) {
            state.finish(self, outcome, now);
        }
        self.pull = Some(state);
    }

    /// When pulling next needs a poll.
    pub(super) fn pull_deadline(&self, now: Instant) -> Option<Instant> {
        let state = self.pull.as_ref()?;
        let nudged = || state.service.borrow().nudged();
        Some(match (&state.stage, state.next_at) {
            (Stage::Idle, _) if nudged() => now,
            (Stage::Idle, _) if state.held => now.add_micros(WAITING_RECHECK_MICROS),
            (Stage::Idle, Some(at)) => at.max(now),
            (Stage::Idle, None) => now.add_micros(WAITING_RECHECK_MICROS),
            _ => now.add_micros(RECHECK_MICROS),
        })
    }
}

impl<'a> PullState<'a> {
    fn current_url(&self) -> &str {
        match self.target {
            Target::Manifest => self.url,
            Target::Image => self.image_url.as_str(),
        }
    }

    /// One step; `Some` once the check has an outcome.
    fn step<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        now: Instant,
    ) -> Option<Outcome> {
        if !matches!(self.stage, Stage::Idle) && now.micros_since(self.progress_at) > STALL_MICROS {
            return Some(Outcome::Failed("the server stalled (no byte for 30 s)"));
        }
        match &mut self.stage {
            Stage::Idle => {
                if self.held || self.next_at.is_some_and(|at| now < at) {
                    return None;
                }
                if CLOCK.unix_seconds().is_none() {
                    if !self.logged_clock_wait {
                        self.logged_clock_wait = true;
                        log::info!(
                            "publish: waiting for the clock to check the server's certificate"
                        );
                    }
                    return None;
                }
                appliance.iface.ipv4_addr()?;
                self.status.checks += 1;
                self.target = Target::Manifest;
                self.manifest_len = 0;
                self.start_fetch(appliance, now)
            }
            Stage::Resolving(query) => {
                let socket = appliance.sockets.get_mut::<dns::Socket>(self.dns);
                let answer = match socket.get_query_result(*query) {
                    Err(GetQueryResultError::Pending) => return None,
                    Err(GetQueryResultError::Failed) => Err("the host's lookup failed"),
                    Ok(addresses) => addresses.first().copied().ok_or("the host has no address"),
                };
                // Idle, the socket lists no server: smoltcp hands each DNS answer to the
                // first socket listing its source, which must be the one that asked.
                socket.update_servers(&[]);
                self.stage = Stage::Idle;
                self.progress_at = now;
                match answer {
                    Ok(address) => self.connect(appliance, address),
                    Err(why) => Some(Outcome::Failed(why)),
                }
            }
            Stage::Exchanging { .. } => self.exchange(appliance, now),
        }
    }

    /// Starts the lookup (or the connection, for an address) of the current target's URL.
    fn start_fetch<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        now: Instant,
    ) -> Option<Outcome> {
        self.progress_at = now;
        let Some(url) = parse_https_url(self.current_url()) else {
            return Some(Outcome::Failed("the URL is not an https:// URL"));
        };
        if let Ok(address) = Ipv4Address::from_str(url.host) {
            return self.connect(appliance, IpAddress::Ipv4(address));
        }
        let advertised = appliance
            .ipv6
            .iter()
            .flat_map(|state| state.config.dns_servers());
        let servers = super::clock::name_servers(
            self.dns_servers,
            &appliance.address.dhcp_dns_servers,
            advertised,
        );
        if servers.is_empty() {
            return Some(Outcome::Failed("no name server known"));
        }
        let socket = appliance.sockets.get_mut::<dns::Socket>(self.dns);
        socket.update_servers(&servers);
        match socket.start_query(appliance.iface.context(), url.host, DnsQueryType::A) {
            Ok(query) => self.stage = Stage::Resolving(query),
            Err(_) => {
                socket.update_servers(&[]);
                return Some(Outcome::Failed("the host cannot be looked up"));
            }
        }
        None
    }

    fn connect<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        address: IpAddress,
    ) -> Option<Outcome> {
        let Some(url): Option<HttpsUrl<'_>> = parse_https_url(self.current_url()) else {
            return Some(Outcome::Failed("the URL is not an https:// URL"));
        };
        let mut tls = match TlsClient::new(self.client.clone(), url.host) {
            Ok(tls) => tls,
            Err(_) => return Some(Outcome::Failed("TLS client set-up failed")),
        };
        tls.write(&write_request(Method::Get, &url, &[]));
        let port = url.port;
        let expected = match self.target {
            Target::Manifest => MANIFEST_FILE_LEN as u32,
            Target::Image => self
                .service
                .borrow()
                .received()
                .map_or(0, |(manifest, _)| manifest.len),
        };
        let socket = appliance.sockets.get_mut::<tcp::Socket>(self.tcp);
        socket.abort();
        if socket
            .connect(
                appliance.iface.context(),
                IpEndpoint::new(address, port),
                LOCAL_PORT,
            )
            .is_err()
        {
            return Some(Outcome::Failed("cannot open a connection"));
        }
        self.response = ImageResponse::new(expected);
        self.stage = Stage::Exchanging {
            tls: alloc::boxed::Box::new(tls),
            connected: false,
        };
        None
    }

    /// Moves bytes between the socket and TLS, and the body to its place.
    fn exchange<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        now: Instant,
    ) -> Option<Outcome> {
        let response = &mut self.response;
        let Stage::Exchanging { tls, connected } = &mut self.stage else {
            return None;
        };
        let socket = appliance.sockets.get_mut::<tcp::Socket>(self.tcp);
        if socket.state() == tcp::State::Established && !*connected {
            *connected = true;
            self.progress_at = now;
        }
        if !socket.is_open() {
            return Some(Outcome::Failed(if *connected {
                "the server closed the connection"
            } else {
                "the server refused the connection"
            }));
        }
        while socket.can_recv() && tls.receive_space() > 0 {
            let taken = socket.recv(|bytes| {
                let taken = tls.receive(bytes);
                (taken, taken)
            });
            match taken {
                Ok(n) if n > 0 => self.progress_at = now,
                _ => break,
            }
        }
        if let Some(error) = tls.error() {
            log::warn!("publish: TLS: {error}");
            return Some(Outcome::Failed("TLS failed"));
        }
        while socket.can_send() && !tls.outgoing().is_empty() {
            match socket.send_slice(tls.outgoing()) {
                Ok(0) | Err(_) => break,
                Ok(sent) => tls.sent(sent),
            }
        }
        let plaintext = tls.take_plaintext();
        let closed = tls.peer_closed() || (*connected && !socket.may_recv());
        if !plaintext.is_empty() {
            let body = match response.push(&plaintext) {
                Ok(body) => body,
                Err(error) => return Some(Outcome::Refused(Refusal::Image(error))),
            };
            match self.target {
                Target::Manifest => {
                    let end = self.manifest_len + body.len(); // bounded by the reader
                    self.manifest[self.manifest_len..end].copy_from_slice(body);
                    self.manifest_len = end;
                }
                Target::Image => {
                    let offset = response.received() - body.len() as u32;
                    if let Err(error) = self.service.borrow_mut().pull_write(offset, body) {
                        return Some(Outcome::Refused(Refusal::Manifest(error)));
                    }
                }
            }
        }
        let complete = response.complete();
        let finished = match (complete, closed) {
            (true, _) => Ok(()),
            (false, true) => response.finish(),
            (false, false) => return None,
        };
        if let Err(error) = finished {
            return Some(Outcome::Refused(Refusal::Image(error)));
        }
        appliance.sockets.get_mut::<tcp::Socket>(self.tcp).abort();
        self.stage = Stage::Idle;
        match self.target {
            Target::Manifest => self.manifest_arrived(appliance, now),
            Target::Image => {
                let finished = self.service.borrow_mut().pull_finish();
                match finished {
                    Ok(record) => Some(Outcome::Published(record)),
                    Err(error) => Some(Outcome::Refused(Refusal::Manifest(error))),
                }
            }
        }
    }

    /// The manifest file is in: check it, and start the image when it is newer.
    fn manifest_arrived<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        now: Instant,
    ) -> Option<Outcome> {
        let Some((bytes, signature)) = split_manifest_file(&self.manifest[..self.manifest_len])
        else {
            return Some(Outcome::Refused(Refusal::Manifest(PublishError::Manifest(
                ManifestError::Malformed,
            ))));
        };
        let key = self.service.borrow().slots().publish_key;
        let manifest = match Manifest::verify(bytes, signature, key.as_ref(), self.hostname) {
            Ok(manifest) => manifest,
            Err(error) => return Some(Outcome::Refused(Refusal::Manifest(error.into()))),
        };
        let record = *self.service.borrow().record();
        if manifest.version == record.accepted
            && record.slots[usize::from(record.live)].sha256 == manifest.sha256
        {
            return Some(Outcome::UpToDate);
        }
        if manifest.action == Action::Rollback {
            // `bramble publish --rollback --out`: the other slot, if it holds the signed
            // site, becomes live again; no image to fetch.
            let rolled = self.service.borrow_mut().rollback(bytes, signature, now);
            return Some(match rolled {
                Ok(record) => Outcome::RolledBack(record),
                Err(error) => Outcome::Refused(Refusal::Manifest(error)),
            });
        }
        let begun = self.service.borrow_mut().pull_begin(bytes, signature, now);
        if let Err(error) = begun {
            return Some(Outcome::Refused(Refusal::Manifest(error)));
        }
        self.image_url.clear();
        if bramble_publish::pull::write_image_url(self.url, manifest.version, &mut self.image_url)
            .is_err()
        {
            return Some(Outcome::Failed("the image's URL is too long"));
        }
        log::info!(
            "publish: version {} ({} bytes) signed for {}; fetching {}",
            manifest.version,
            manifest.len,
            manifest.host(),
            self.image_url
        );
        self.target = Target::Image;
        self.start_fetch(appliance, now)
    }

    /// Ends the check: counts it, says how it went, and plans the next.
    fn finish<D: EthernetDevice>(
        &mut self,
        appliance: &mut Appliance<'a, D>,
        outcome: Outcome,
        now: Instant,
    ) {
        appliance.sockets.get_mut::<tcp::Socket>(self.tcp).abort();
        let dns = appliance.sockets.get_mut::<dns::Socket>(self.dns);
        if let Stage::Resolving(query) = core::mem::replace(&mut self.stage, Stage::Idle) {
            dns.cancel_query(query);
        }
        dns.update_servers(&[]);
        let every = u64::from(self.every_minutes).saturating_mul(60);
        self.next_at = Some(now.add_micros(every.saturating_mul(1_000_000)));
        // An upload cut short stays abandoned: its slot was marked invalid before any body
        // block was written, and the next check starts again from the manifest.
        let mut service = self.service.borrow_mut();
        if !matches!(outcome, Outcome::Published(_) | Outcome::RolledBack(_)) {
            service.pull_abandon();
        }
        let written = service.blocks_written();
        let since_begin = service.blocks_since_begin();
        drop(service);
        self.status.blocks = written;
        let mut why = heapless::String::<160>::new();
        match outcome {
            Outcome::UpToDate => {
                self.status.up_to_date += 1;
                log::info!(
                    "publish: version {} is live and current; the next check in {every} s",
                    self.status.live_version
                );
            }
            Outcome::Published(record) => {
                let live = record.slots[usize::from(record.live)];
                self.status.published += 1;
                self.status.live_version = live.version;
                self.status.last_blocks = since_begin;
                self.published = Some(record);
                log::info!(
                    "publish: version {} ({} bytes) written to slot {}, read back and verified, \
                     now live; {} card blocks written",
                    live.version,
                    live.len,
                    if record.live == 0 { "A" } else { "B" },
                    self.status.last_blocks
                );
            }
            Outcome::RolledBack(record) => {
                let live = record.slots[usize::from(record.live)];
                self.status.rolled_back += 1;
                self.status.live_version = live.version;
                self.status.last_blocks = since_begin;
                self.published = Some(record);
                log::info!(
                    "publish: rollback version {} signed; slot {} (version {}, {} bytes) is \
                     live again; {} card block written",
                    record.accepted,
                    if record.live == 0 { "A" } else { "B" },
                    live.version,
                    live.len,
                    self.status.last_blocks
                );
            }
            Outcome::Refused(refusal) => {
                if matches!(refusal, Refusal::Manifest(PublishError::Card(_))) {
                    self.status.failed += 1;
                } else {
                    self.status.refused += 1;
                }
                let _ = match refusal {
                    Refusal::Manifest(error) => {
                        write!(why, "refused ({}): {error}", error.code())
                    }
                    Refusal::Image(error) => write!(why, "refused: {error}"),
                };
                log::warn!(
                    "publish: {why}; version {} keeps serving; the next check in {every} s",
                    self.status.live_version
                );
            }
            Outcome::Failed(reason) => {
                self.status.failed += 1;
                log::warn!(
                    "publish: {} {reason}; version {} keeps serving; the next check in {every} s",
                    self.current_url(),
                    self.status.live_version
                );
            }
        }
    }
}
