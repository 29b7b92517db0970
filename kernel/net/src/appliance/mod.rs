//! The appliance loop: one smoltcp interface (IPv4 by DHCP with a link-local fallback, or
//! static; IPv6 by SLAAC or static, with a link-local address; ARP, neighbour discovery, ICMP
//! and ICMPv6 echo), the stream pools serving HTTP on port 80 and HTTPS on port 443 over
//! either family ([`bramble_stream`], [`bramble_stream::services::tls`]), and the mDNS responder.
//!
//! The caller owns time and sleeping: it calls [`Appliance::poll`] with the current instant
//! whenever something may have happened (a frame arrived, an interrupt came), or
//! [`Appliance::poll_timers`] when it knows that only the clock moved, and sleeps until the
//! instant either returns (the earliest of the network stack's deadlines and the device's,
//! [`EthernetDevice::poll_at`]), or until the next interrupt. Nothing here waits or spins.
//!
//! Where the parts live: this file holds the loop itself ([`Appliance::new`],
//! [`Appliance::poll`] and its wake-up time); `config` what the caller tells it, `memory` the
//! memory it lends, `address` DHCP and the link-local fallback, `address6` IPv6
//! configuration ([`bramble_proto::slaac`]) over its raw ICMPv6 socket, `mdns_socket` the
//! responder's UDP socket, `jobs` the appliance's side of the outbound jobs of
//! `bramble-jobs` (ACME, dynamic DNS, the echo and outside check: the crate's `Host`, and
//! `start_acme` and the rest), and `tests` the host tests. The HTTP and HTTPS connections are
//! the stream pools' ([`bramble_stream`]): frames for their ports go to them, not to smoltcp.
//! Both pools serve one [`Server`] (the site, its configuration and counters), which the
//! appliance keeps in a `RefCell` lent to both services.

mod address;
mod address6;
pub mod clock;
mod config;
pub mod heartbeat;
mod jobs;
mod mdns_socket;
mod memory;
pub mod pull;
pub mod router;
pub mod syslog;
#[cfg(test)]
mod tests;

pub use address::LINK_LOCAL_AFTER_MICROS;
/// The outbound jobs (`bramble-jobs`), under the paths they had when they lived here.
pub use bramble_jobs::{acme, ddns, https_client, public, reach};
pub use clock::{ClockConfig, ClockStatus};
pub use config::{AddressConfig, Ipv6Config, NetworkConfig};
pub use memory::{
    ApplianceMemory, ClockMemory, DHCP_PACKET_BUFFER_LEN, EXTRA_SOCKETS, HttpsMemory,
    MDNS_BUFFER_LEN, MDNS_PACKETS, PoolSizes,
};
pub use public::{AddressKind, PublicAddress, PublicSource};

use crate::phy::{EthernetPhy, Held, PhyCounters};
use address::AddressState;
use address6::Ipv6State;
use alloc::sync::Arc;
use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState};
use bramble_http::{Server, SiteSource};
use bramble_proto::mdns::MdnsResponder;
use bramble_stream::services::http::HttpService;
use bramble_stream::services::tls::{TLS_CELL_LEN, TlsCounters, TlsService};
use bramble_stream::{MAX_UNCAPPED, PoolConfig, PoolCounters, PoolLimits, StreamPool};
use core::cell::{Ref, RefCell};
use mdns_socket::start_mdns;
use smoltcp::iface::{Config, Interface, PollResult, SocketHandle, SocketSet};
use smoltcp::time::Instant as SmolInstant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr};

/// When smoltcp still has frames to send after a poll (the device's transmit path is busy),
/// the latest the loop wakes to try again; the device's completion interrupt usually wakes
/// it sooner.
pub const TRANSMIT_BUSY_RECHECK_MICROS: u64 = 2_000;
/// While the link is down, how often the loop wakes to look for it coming back.
pub const LINK_DOWN_CHECK_MICROS: u64 = 1_000_000;
/// Most frames taken from the device in one poll (the rest wait for the next, so that a
/// flood cannot keep the loop from sending).
const FRAMES_PER_POLL: usize = 256;
/// Received frames between two turns of the pool's transmissions within a poll (so that
/// answers go out while requests keep arriving).
const FRAMES_PER_SEND: usize = 16;

/// Why the appliance could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetError {
    /// The memory given holds no connection (no control block, session or hash bucket, or
    /// too few socket slots for DHCP and mDNS).
    NoSocketMemory,
    /// A static address's prefix length is over 32 (IPv4) or 128 (IPv6).
    BadPrefix,
}

impl core::fmt::Display for NetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NetError::NoSocketMemory => {
                f.write_str("not enough memory given for even one TCP connection")
            }
            NetError::BadPrefix => {
                f.write_str("static address prefix length is over 32 (IPv4) or 128 (IPv6)")
            }
        }
    }
}

/// Every address in use: the IPv4 one, then the assigned IPv6 ones, each with its prefix
/// length and a note (link-local, static, deprecated), comma-separated.
pub struct AddressList<'x> {
    ipv4: Option<(smoltcp::wire::Ipv4Cidr, bool)>,
    ipv6: &'x [bramble_proto::slaac::AddressEntry],
}

impl core::fmt::Display for AddressList<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use bramble_proto::slaac::{AddressOrigin, AddressState};
        let mut first = true;
        let mut separator = |f: &mut core::fmt::Formatter<'_>| {
            let text = if first { "" } else { ", " };
            first = false;
            f.write_str(text)
        };
        if let Some((cidr, link_local)) = self.ipv4 {
            separator(f)?;
            write!(f, "{cidr}")?;
            if link_local {
                f.write_str(" (link-local)")?;
            }
        }
        for entry in self.ipv6.iter().filter(|e| e.is_assigned()) {
            separator(f)?;
            let address = core::net::Ipv6Addr::from(entry.address);
            write!(f, "{address}/{}", entry.prefix_len)?;
            let note = match (entry.origin, entry.state) {
                (_, AddressState::Deprecated) => " (deprecated)",
                (AddressOrigin::LinkLocal, _) => " (link-local)",
                (AddressOrigin::Static, _) => " (static)",
                (AddressOrigin::Autoconfigured, _) => "",
            };
            f.write_str(note)?;
        }
        Ok(())
    }
}

/// Counts the appliance keeps (the connections' in detail are the stream pools':
/// [`Appliance::pool_counters`], [`Appliance::https_pool_counters`]; the first two here
/// count both pools).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplianceCounters {
    /// Connections admitted (as [`Appliance::counters`] reports them: both pools').
    pub connections_opened: u64,
    /// Of those, the ones over IPv6.
    pub ipv6_connections_opened: u64,
    /// Times the link went down.
    pub link_losses: u64,
    /// mDNS datagrams that could not be parsed.
    pub mdns_malformed: u64,
    /// Calls of [`Appliance::poll_timers`] that only ran the device's timed work and left
    /// the network stack alone.
    pub quiet_polls: u64,
    /// Times the appliance stopped taking received frames because the stream pool's
    /// control replies had no room (a SYN is then held where it waits, never dropped).
    pub receive_held: u64,
}

/// The network appliance: interface, sockets, HTTP connections, mDNS.
pub struct Appliance<'a, D: EthernetDevice> {
    phy: EthernetPhy<D>,
    iface: Interface,
    sockets: SocketSet<'a>,
    /// Socket slots the caller gave (the set does not say).
    sockets_capacity: usize,
    pool: StreamPool<'a, HttpService<'a>>,
    /// The HTTPS pool, once [`Appliance::start_https`] has run.
    https: Option<StreamPool<'a, TlsService<'a>, TLS_CELL_LEN>>,
    /// The site's server, shared by both pools' services.
    server: &'a RefCell<Server<'a>>,
    /// The secret keying both pools' SYN cookies and connection tables.
    secret_key: [u64; 2],
    /// Both pools' deadlines and per-source cap.
    limits: (PoolLimits, u32),
    /// Sources the per-source cap exempts (the owner's caches), for both pools.
    uncapped: heapless::Vec<bramble_http::status::Prefix, MAX_UNCAPPED>,
    /// SNTP and DNS, once [`Appliance::start_clock`] has run.
    clock: Option<clock::ClockState<'a>>,
    /// The ACME agent, once [`Appliance::start_acme`] has run.
    acme: Option<acme::AcmeAgent<'a>>,
    /// What HTTPS starts in once ACME has a certificate (unless HTTPS already runs).
    acme_https_memory: Option<&'a mut HttpsMemory<'a>>,
    /// The syslog sender, once [`Appliance::start_syslog`] has run.
    syslog: Option<syslog::SyslogState<'a>>,
    /// The heartbeat, once [`Appliance::start_heartbeat`] has run.
    heartbeat: Option<heartbeat::HeartbeatState<'a>>,
    /// Pulling new sites, once [`Appliance::start_pull`] has run.
    pull: Option<pull::PullState<'a>>,
    /// The card writer site uploads and the pull share, once
    /// [`Appliance::set_publish_service`] has run.
    publish: Option<&'a RefCell<bramble_publish::upload::PublishService<'a>>>,
    /// Dynamic DNS, once [`Appliance::start_ddns`] has run.
    ddns: Option<ddns::DdnsState<'a>>,
    /// The port-mapping client, once [`Appliance::start_router`] has run.
    router: Option<router::RouterState<'a>>,
    /// The echo, dyndns2 and the outside check, once [`Appliance::start_reach`] has run.
    reach: Option<reach::ReachState<'a>>,
    /// The public IPv4 address as last learned ([`public`]).
    public: public::PublicAddress,
    /// The IPv4 address the pool was last told.
    pool_address: Option<[u8; 4]>,
    address: AddressState,
    /// IPv6 configuration (`None`: IPv6 is off).
    ipv6: Option<Ipv6State>,
    /// The MAC address the interface uses (the device's, adopted when it changes).
    mac: [u8; 6],
    mdns: Option<(SocketHandle, MdnsResponder)>,
    link: LinkState,
    /// A "device gone" error seen, kept until the device is replaced.
    device_fault: Option<DeviceError>,
    /// When the network stack itself next needs a full poll, as the last one found (the
    /// device's own deadline not included).
    stack_due: Option<Instant>,
    /// [`Appliance::addresses_version`] when the addresses were last logged and shown.
    addresses_shown: Option<u64>,
    /// The global IPv6 addresses (static or autoconfigured, preferred) last announced with
    /// a `serving:` line, so that each new one is announced once.
    serving6: heapless::Vec<[u8; 16], { bramble_proto::slaac::MAX_ADDRESSES }>,
    /// The HTTP port, for the `serving:` lines.
    http_port: u16,
    counters: ApplianceCounters,
}

fn smol(now: Instant) -> SmolInstant {
    // Microseconds since boot fit an i64 for 292,000 years.
    SmolInstant::from_micros(now.as_micros() as i64)
}

fn ours(instant: SmolInstant) -> Instant {
    Instant::from_micros(instant.total_micros().max(0) as u64)
}

/// The earlier of two optional deadlines (`None`: no deadline).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl<'a, D: EthernetDevice> Appliance<'a, D> {
    /// Builds the interface and sockets over `device`, serving `server`'s site on
    /// `config.http_port`, in `memory`.
    // Called once, at start-up. Inlined into the board's kernel_main, the set-up steps made
    // LLVM's inliner grow the kernel image by ~1 KB (kernel.img, measured); out of line they
    // cost nothing at run time.
    #[inline(never)]
    pub fn new(
        device: D,
        config: NetworkConfig<'a>,
        memory: &'a mut ApplianceMemory<'a>,
        server: Server<'a>,
        now: Instant,
    ) -> Result<Self, NetError> {
        let pool_size = memory.pool_size();
        if pool_size == 0 {
            return Err(NetError::NoSocketMemory);
        }
        let mac = device.mac_address();
        let mut phy = EthernetPhy::new(device);
        let mut iface_config = Config::new(HardwareAddress::Ethernet(EthernetAddress(mac.0)));
        iface_config.random_seed = config.random_seed;
        let mut iface = Interface::new(iface_config, &mut phy, smol(now));

        let ApplianceMemory {
            sockets: socket_storage,
            pool: pool_memory,
            server: server_slot,
            reserved_sockets: _,
            dhcp: dhcp_memory,
            mdns: mdns_memory,
            neighbor_discovery: nd_memory,
        } = memory;
        let sessions = pool_memory.leases.len();
        let sockets_capacity = socket_storage.len();
        let mut sockets = SocketSet::new(&mut socket_storage[..]);
        let pool_memory = bramble_stream::PoolMemory {
            tcbs: &mut *pool_memory.tcbs,
            buckets: &mut *pool_memory.buckets,
            leases: &mut *pool_memory.leases,
            cells: &mut *pool_memory.cells,
            sources: &mut *pool_memory.sources,
        };
        let server: &'a RefCell<Server<'a>> = server_slot.insert(RefCell::new(server));
        let mut pool = StreamPool::new(
            pool_memory,
            HttpService::new(server),
            PoolConfig {
                port: config.http_port,
                limits: config.limits,
                max_per_source: config.max_per_source,
                seed: config.secret_key,
            },
        );
        phy.divert_tcp_ports([Some(config.http_port), None]);
        pool.set_address(mac.0, None, now);
        let address = AddressState::configure(&config, &mut iface, &mut sockets, dhcp_memory, now)?;
        let ipv6 = if config.ipv6.enabled {
            if config.ipv6.static_address.is_some_and(|(_, len)| len > 128) {
                return Err(NetError::BadPrefix);
            }
            let autoconfig = bramble_proto::slaac::Ipv6Autoconfig::new(
                mac.0,
                config.ipv6.secret,
                config.ipv6.static_address,
                config.ipv6.gateway,
                (config.random_seed >> 32) as u32,
                now,
            );
            Some(Ipv6State::start(
                autoconfig,
                &mut sockets,
                nd_memory,
                &mut iface,
                &mut phy,
            ))
        } else {
            phy.set_ipv6_filter(crate::phy::Ipv6Filter::Drop);
            None
        };
        let mdns = if config.mdns {
            let seed = (config.random_seed as u32) ^ u32::from(mac.0[5]);
            start_mdns(
                config.hostname,
                seed,
                config.ipv6.enabled,
                &mut iface,
                &mut sockets,
                mdns_memory,
                now,
            )
        } else {
            None
        };

        log::info!(
            "net: {} HTTP connections on port {} ({} served at once), MAC {}",
            pool_size,
            config.http_port,
            sessions,
            mac
        );
        let link = phy.link_state();
        if link == LinkState::Down {
            log::warn!("net: link down");
        }
        Ok(Self {
            phy,
            iface,
            sockets,
            sockets_capacity,
            pool,
            https: None,
            server,
            secret_key: config.secret_key,
            limits: (config.limits, config.max_per_source),
            uncapped: heapless::Vec::new(),
            clock: None,
            acme: None,
            acme_https_memory: None,
            syslog: None,
            heartbeat: None,
            pull: None,
            publish: None,
            ddns: None,
            router: None,
            reach: None,
            public: public::PublicAddress::default(),
            pool_address: None,
            address,
            ipv6,
            mac: mac.0,
            mdns,
            link,
            device_fault: None,
            stack_due: Some(now),
            addresses_shown: None,
            serving6: heapless::Vec::new(),
            http_port: config.http_port,
            counters: ApplianceCounters::default(),
        })
    }

    /// Does all the work that is due at `now`: link check, frames in and out, DHCP events,
    /// HTTP connections, mDNS. Returns when it next needs to run if nothing arrives first:
    /// the earliest of the network stack's deadlines and the device's own
    /// ([`EthernetDevice::poll_at`]); `None`: only a received frame or a link change can
    /// give it work.
    pub fn poll(&mut self, now: Instant) -> Option<Instant> {
        self.check_link(now);
        // Frames in: the stream pools' to them, the rest through smoltcp.
        self.receive_frames(now);
        // The smoltcp sockets' work (DHCP, mDNS, the clock), then what it produced goes out.
        self.poll_sockets(now);
        self.poll_interface(now);
        // That pass may have received a DHCP ACK: apply it now, at the instant smoltcp
        // counts the lease from, not whenever the loop next happens to wake.
        self.poll_dhcp(now);
        self.sync_pool_address(now);
        // The stream pools' deadlines and transmissions, after whatever arrived meanwhile.
        self.receive_frames(now);
        self.poll_pools(now);
        self.note_device_fault();
        self.show_addresses();
        self.stack_due = self.next_wake(now);
        earliest(self.stack_due, self.phy.device_mut().poll_at())
    }

    /// The poll for a wake-up that only the clock caused: the caller knows that the device
    /// raised no interrupt since the last poll. If none of the network stack's deadlines has
    /// come but the device's has, only the device's timed work runs
    /// ([`EthernetDevice::poll_timers`]), and unless that brought something the stack is
    /// not walked (a full poll visits every socket: under QEMU, where the USB receive path is
    /// polled every 10 ms while quiet, that was most of the idle CPU). Otherwise, the same
    /// as [`Appliance::poll`]. Returns the same deadline as `poll`.
    pub fn poll_timers(&mut self, now: Instant) -> Option<Instant> {
        let stack_waits = self.stack_due.is_none_or(|due| due > now);
        let device = self.phy.device_mut();
        let device_due = device.poll_at().is_some_and(|at| at <= now);
        if stack_waits && device_due && !device.poll_timers() {
            self.counters.quiet_polls += 1;
            return earliest(self.stack_due, device.poll_at());
        }
        self.poll(now)
    }

    /// One pass of the interface: frames in, timers, frames out.
    fn poll_interface(&mut self, now: Instant) -> PollResult {
        self.iface.poll(smol(now), &mut self.phy, &mut self.sockets)
    }

    /// Both stream pools' deadlines and transmissions.
    fn poll_pools(&mut self, now: Instant) {
        self.pool.poll(now, &mut self.phy);
        if let Some(https) = &mut self.https {
            https.poll(now, &mut self.phy);
        }
    }

    /// Whether both stream pools could queue a control reply (a SYN-ACK, a reset) now.
    fn pools_have_control_room(&self) -> bool {
        self.pool.has_control_room()
            && self
                .https
                .as_ref()
                .is_none_or(|https| https.has_control_room())
    }

    /// The smoltcp sockets' work after an interface pass: DHCP events, IPv6 configuration,
    /// mDNS, the clock, ACME, syslog.
    fn poll_sockets(&mut self, now: Instant) {
        self.poll_dhcp(now);
        self.poll_ipv6(now);
        self.sync_pool_address(now);
        self.poll_mdns(now);
        self.poll_clock(now);
        self.poll_acme(now);
        self.poll_syslog(now);
        self.poll_heartbeat(now);
        self.poll_pull(now);
        self.poll_ddns(now);
        self.poll_router(now);
        self.poll_reach(now);
    }

    /// Starts serving HTTPS on `port` with `config` (whose certificate has `key`), in
    /// `memory`: a stream pool of its own, with the HTTP pool's deadlines, per-source cap and
    /// secret. Returns the most HTTPS connections it holds at once. Can be called once, at
    /// start-up or later (once a certificate is at hand).
    pub fn start_https(
        &mut self,
        config: Arc<bramble_tls::ServerConfig>,
        key: bramble_tls::hello::CertificateKey,
        memory: &'a mut HttpsMemory<'a>,
        port: u16,
        now: Instant,
    ) -> Result<usize, NetError> {
        let size = memory.pool_size();
        if size == 0 || self.https.is_some() {
            return Err(NetError::NoSocketMemory);
        }
        let HttpsMemory {
            pool,
            carried,
            scratch,
        } = memory;
        let sessions = pool.leases.len();
        let pool_memory = bramble_stream::PoolMemory {
            tcbs: &mut *pool.tcbs,
            buckets: &mut *pool.buckets,
            leases: &mut *pool.leases,
            cells: &mut *pool.cells,
            sources: &mut *pool.sources,
        };
        let service = TlsService::new(self.server, config, key, carried, scratch, now);
        let (limits, max_per_source) = self.limits;
        let mut https = StreamPool::new(
            pool_memory,
            service,
            PoolConfig {
                port,
                limits,
                max_per_source,
                seed: self.secret_key,
            },
        );
        https.set_address(self.mac, self.pool_address, now);
        https.set_ipv6_addresses(self.pool.addresses(), now);
        https.set_uncapped(&self.uncapped);
        self.https = Some(https);
        self.phy
            .divert_tcp_ports([Some(self.http_port), Some(port)]);
        log::info!("net: {size} HTTPS connections on port {port} ({sessions} served at once)");
        Ok(size)
    }

    /// Has the HTTP responses copied into frames (and summed) with `copy_words`, a faster
    /// routine of the platform's than the portable [`bramble_stream::wire::copy_words`].
    pub fn set_copy_words(&mut self, copy_words: bramble_stream::wire::CopyWords) {
        self.pool.service_mut().copy_words = copy_words;
    }

    /// Socket slots not yet used.
    pub(super) fn sockets_free(&self) -> usize {
        self.sockets_capacity - self.sockets.iter().count()
    }

    /// Exempts these prefixes (the owner's caches: `proxy_from`) from the per-source
    /// connection cap on HTTP and HTTPS: a cache's connections carry many clients each, and
    /// the cap counts connections, before any header names the client. Call before serving.
    pub fn set_uncapped_sources(&mut self, prefixes: &[bramble_http::status::Prefix]) {
        self.uncapped.clear();
        for prefix in prefixes.iter().take(MAX_UNCAPPED) {
            let _ = self.uncapped.push(*prefix);
        }
        self.pool.set_uncapped(&self.uncapped);
        if let Some(https) = &mut self.https {
            https.set_uncapped(&self.uncapped);
        }
    }

    /// The link as last polled.
    pub fn link(&self) -> LinkState {
        self.link
    }

    /// Measures the HTTPS handshakes' work with `clock` (the time now), holding it to its
    /// share of the time as well as of the priced instructions
    /// ([`TlsService::set_cpu_clock`]); once HTTPS runs.
    pub fn set_https_cpu_clock(&mut self, clock: fn() -> Instant) {
        if let Some(https) = &mut self.https {
            https.service_mut().set_cpu_clock(clock);
        }
    }

    /// The HTTPS service's counts (handshakes, their budget), once it runs.
    pub fn tls_counters(&self) -> Option<TlsCounters> {
        self.https.as_ref().map(|pool| pool.service().counters())
    }

    /// The HTTPS pool's connection counts (admissions, evictions, deadlines), once it runs.
    pub fn https_pool_counters(&self) -> Option<PoolCounters> {
        self.https.as_ref().map(StreamPool::counters)
    }

    /// Number of HTTPS connections open now (0 without HTTPS).
    pub fn open_https_connections(&self) -> usize {
        self.https.as_ref().map_or(0, StreamPool::open)
    }

    /// Serves `config` (a renewed certificate, with `key`) to HTTPS connections from now on.
    pub(super) fn replace_https_config(
        &mut self,
        config: Arc<bramble_tls::ServerConfig>,
        key: bramble_tls::hello::CertificateKey,
    ) -> bool {
        match &mut self.https {
            Some(https) => {
                https.service_mut().replace_config(config, key);
                true
            }
            None => false,
        }
    }

    /// Takes in what the device has received (at most [`FRAMES_PER_POLL`] frames): the
    /// pools' frames go to the pools, the rest through smoltcp. Every [`FRAMES_PER_SEND`]
    /// frames the pools send what they asked for.
    fn receive_frames(&mut self, now: Instant) {
        for taken in 1..=FRAMES_PER_POLL {
            if !self.pools_have_control_room() {
                // A frame may need a control reply (a SYN its SYN-ACK): send what the device
                // takes, and if there is still no room, leave the frames where they wait
                // (in the device, on the link) until the next poll: held, not dropped.
                self.poll_pools(now);
                if !self.pools_have_control_room() {
                    self.counters.receive_held += 1;
                    break;
                }
            }
            let (pool, https) = (&mut self.pool, &mut self.https);
            let mut to_pools = |frame: &[u8]| match https {
                Some(https) if https.wants(frame) => https.receive(frame, now),
                _ => pool.receive(frame, now),
            };
            match self.phy.pull_into_pool(&mut to_pools) {
                Held::Nothing => break,
                Held::ForPool => {
                    // Taken where it lay; one held from an earlier pull is taken now.
                    self.phy.take_held(&mut to_pools);
                }
                Held::ForStack => {
                    // smoltcp takes this frame and any others for it that follow.
                    self.poll_interface(now);
                    self.poll_sockets(now);
                    if self.phy.pull() == Held::ForStack {
                        // It could not take it (no transmit space for a reply): later.
                        break;
                    }
                }
            }
            if taken % FRAMES_PER_SEND == 0 {
                self.poll_pools(now);
            }
        }
    }

    /// Tells the pool the interface's current addresses: the IPv4 one (after DHCP or the
    /// link-local fallback changed it) and the assigned IPv6 ones (preferred or deprecated,
    /// never tentative), so that one pool with one set of admission rules serves both
    /// families.
    fn sync_pool_address(&mut self, now: Instant) {
        let address = self.iface.ipv4_addr().map(|a| a.octets());
        if address != self.pool_address {
            self.pool_address = address;
            self.pool.set_address(self.mac, address, now);
            if let Some(https) = &mut self.https {
                https.set_address(self.mac, address, now);
            }
        }
        let mut ipv6 = heapless::Vec::<[u8; 16], { bramble_stream::MAX_IPV6_ADDRESSES }>::new();
        for entry in self.ipv6_addresses().iter().filter(|e| e.is_assigned()) {
            let _ = ipv6.push(entry.address);
        }
        self.pool.set_ipv6_addresses(&ipv6, now);
        if let Some(https) = &mut self.https {
            https.set_ipv6_addresses(&ipv6, now);
        }
    }

    /// Keeps the first "device gone" error the adapter saw, for [`Appliance::device_fault`].
    fn note_device_fault(&mut self) {
        if let Some(fault) = self.phy.take_fault()
            && self.device_fault.is_none()
        {
            log::error!("net: network device reports {fault:?}; it needs to be probed again");
            self.device_fault = Some(fault);
        }
    }

    fn next_wake(&mut self, now: Instant) -> Option<Instant> {
        // With the link down nothing can be sent, so smoltcp's transmit timers (a DHCP
        // DISCOVER that could not go out) stay due forever: following them would spin. Wake
        // for the next link check instead; the sockets' own deadlines below still count.
        let mut next = if self.link == LinkState::Down {
            Some(now.add_micros(LINK_DOWN_CHECK_MICROS))
        } else {
            // Right after a full poll, smoltcp is only still due if it has frames it could
            // not hand to the device: the transmit path is busy (a USB transfer in flight).
            // The device's completion interrupt wakes the loop; spinning on "now" would burn
            // the CPU the emulated or real USB transfer needs. This is only the fallback.
            self.iface.poll_at(smol(now), &self.sockets).map(|due| {
                let due = ours(due);
                if due <= now {
                    now.add_micros(TRANSMIT_BUSY_RECHECK_MICROS)
                } else {
                    due
                }
            })
        };
        // The pool is due now only when the device could not take what it has to send; the
        // device's completion interrupt wakes the loop for that.
        next = earliest(
            next,
            self.pool.next_deadline(now).map(|due| {
                if due <= now {
                    now.add_micros(TRANSMIT_BUSY_RECHECK_MICROS)
                } else {
                    due
                }
            }),
        );
        if let Some(https) = &self.https {
            next = earliest(
                next,
                https.next_deadline(now).map(|due| {
                    if due <= now {
                        now.add_micros(TRANSMIT_BUSY_RECHECK_MICROS)
                    } else {
                        due
                    }
                }),
            );
        }
        if let Some(clock) = &self.clock {
            next = earliest(
                next,
                clock.next_deadline(self.iface.ipv4_addr().is_some(), now),
            );
        }
        if let Some((_, responder)) = &self.mdns {
            next = earliest(next, responder.next_deadline());
        }
        next = earliest(next, self.acme_deadline(now));
        next = earliest(next, self.syslog_deadline(now));
        next = earliest(next, self.heartbeat_deadline(now));
        next = earliest(next, self.pull_deadline(now));
        next = earliest(next, self.ddns_deadline(now));
        next = earliest(next, self.router_deadline(now));
        next = earliest(next, self.reach_deadline(now));
        next = earliest(next, self.address.link_local_deadline(self.link));
        if self.link == LinkState::Up {
            next = earliest(next, self.ipv6_deadline());
        }
        if self.phy.has_held_frame() {
            // A frame waits for transmit space: try again soon.
            next = earliest(next, Some(now.add_micros(1_000)));
        }
        next
    }

    /// Notices the link going down (counted; a held frame is dropped) or coming back.
    fn check_link(&mut self, now: Instant) {
        let link = self.phy.link_state();
        if link == self.link {
            return;
        }
        self.link = link;
        match link {
            LinkState::Down => {
                self.counters.link_losses += 1;
                self.phy.discard_held_frame();
                log::warn!("net: link down");
            }
            LinkState::Up => {
                log::info!("net: link up");
                self.adopt_device_mac();
                self.restart_dhcp(now);
                self.restart_ipv6(now);
                self.reprobe_mdns(now);
            }
        }
    }

    /// A device that recovers itself (a USB re-probe) may come back as another adapter with
    /// another address: adopt it, or every frame we send carries the old source MAC and
    /// replies go nowhere.
    fn adopt_device_mac(&mut self) {
        let mac = self.phy.device().mac_address();
        if mac.0 != self.mac {
            self.iface
                .set_hardware_addr(HardwareAddress::Ethernet(EthernetAddress(mac.0)));
            self.mac = mac.0;
            self.pool.set_address(mac.0, self.pool_address, Instant(0));
            if let Some(https) = &mut self.https {
                https.set_address(mac.0, self.pool_address, Instant(0));
            }
            log::warn!("net: the network device's MAC is now {mac}");
        }
    }

    /// The error that says the device went away (USB unplug or reset), if one was seen: the
    /// owner should probe again and hand the new device to [`Appliance::replace_device`].
    pub fn device_fault(&self) -> Option<DeviceError> {
        self.device_fault
    }

    /// Swaps in a freshly probed device and returns the old one. Sockets, connections and
    /// the address are kept; the link is treated as having just come up, so DHCP asks again
    /// and mDNS probes again. A changed MAC address is adopted.
    pub fn replace_device(&mut self, device: D) -> D {
        let mac = device.mac_address();
        let old = self.phy.replace_device(device);
        self.iface
            .set_hardware_addr(HardwareAddress::Ethernet(EthernetAddress(mac.0)));
        self.mac = mac.0;
        self.pool.set_address(mac.0, self.pool_address, Instant(0));
        if let Some(https) = &mut self.https {
            https.set_address(mac.0, self.pool_address, Instant(0));
        }
        self.device_fault = None;
        self.link = LinkState::Down;
        // The next poll must be a full one, whatever wakes it.
        self.stack_due = Some(Instant::from_micros(0));
        log::info!("net: network device replaced, MAC {mac}");
        old
    }

    /// Whether the address in use is a link-local fallback (no DHCP server answered).
    pub fn is_link_local(&self) -> bool {
        self.address.link_local
    }

    /// The IPv4 address in use, if any.
    pub fn ipv4_address(&self) -> Option<[u8; 4]> {
        self.iface.ipv4_addr().map(|a| a.octets())
    }

    /// Every address in use, for the console and the diagnostic page.
    pub fn addresses(&self) -> AddressList<'_> {
        let ipv4 = self.iface.ip_addrs().iter().find_map(|cidr| match cidr {
            IpCidr::Ipv4(cidr) => Some(*cidr),
            IpCidr::Ipv6(_) => None,
        });
        AddressList {
            ipv4: ipv4.map(|cidr| (cidr, self.address.link_local)),
            ipv6: self.ipv6_addresses(),
        }
    }

    /// A number that changes whenever the addresses in use do.
    pub fn addresses_version(&self) -> u64 {
        let ipv4 = self
            .iface
            .ipv4_addr()
            .map_or(0, |a| u64::from(a.to_bits()) + 1);
        let ipv6 = self
            .ipv6
            .as_ref()
            .map_or(0, |state| u64::from(state.config.changes()));
        ipv4 << 32 ^ ipv6
    }

    /// Logs the addresses and gives them to the diagnostic page when they changed.
    fn show_addresses(&mut self) {
        let version = self.addresses_version();
        if self.addresses_shown == Some(version) {
            return;
        }
        self.addresses_shown = Some(version);
        self.announce_serving6();
        let mut text = heapless::String::<{ bramble_http::ADDRESSES_LEN }>::new();
        // Cut short if it does not fit; the log line below is whole either way.
        let _ = core::fmt::write(&mut text, format_args!("{}", self.addresses()));
        // A router or name server change alone moves the version, not the list.
        let changed = text.as_str() != self.server().addresses();
        if changed {
            self.server.borrow_mut().set_addresses(&text);
            if !text.is_empty() {
                log::info!("net: addresses {}", self.addresses());
            }
        }
    }

    /// Logs `serving: http://[ADDR]/` for each global IPv6 address that became preferred
    /// since the last call (the board logs IPv4's own `serving:` line), so that the console
    /// shows every address a browser can use. Link-local and deprecated addresses are not
    /// announced: new connections should not use them.
    fn announce_serving6(&mut self) {
        use bramble_proto::slaac::{AddressOrigin, AddressState};
        let serving: heapless::Vec<[u8; 16], { bramble_proto::slaac::MAX_ADDRESSES }> = self
            .ipv6_addresses()
            .iter()
            .filter(|e| e.state == AddressState::Preferred && e.origin != AddressOrigin::LinkLocal)
            .map(|e| e.address)
            .collect();
        for address in serving.iter().filter(|a| !self.serving6.contains(a)) {
            let address = core::net::Ipv6Addr::from(*address);
            match self.http_port {
                80 => log::info!("serving: http://[{address}]/"),
                port => log::info!("serving: http://[{address}]:{port}/"),
            }
        }
        self.serving6 = serving;
    }

    /// The IPv6 addresses and what is known of each (tentative, preferred, deprecated,
    /// duplicate; where it came from); empty with IPv6 off.
    pub fn ipv6_addresses(&self) -> &[bramble_proto::slaac::AddressEntry] {
        self.ipv6
            .as_ref()
            .map_or(&[], |state| state.config.entries())
    }

    /// The IPv6 default router in use, if any.
    pub fn ipv6_router(&self) -> Option<[u8; 16]> {
        self.ipv6
            .as_ref()
            .and_then(|state| state.config.default_router())
    }

    /// The name servers the IPv6 routers advertise (RFC 8106), in their order of preference:
    /// for the DNS client, beside DHCP's.
    pub fn ipv6_dns_servers(&self) -> impl Iterator<Item = [u8; 16]> + '_ {
        self.ipv6
            .iter()
            .flat_map(|state| state.config.dns_servers())
    }

    /// The name claimed over mDNS (the hostname, or it with a `-N` suffix after a conflict).
    pub fn mdns_name(&self) -> Option<&str> {
        self.mdns.as_ref().map(|(_, responder)| responder.name())
    }

    /// Most TCP connections open at once.
    pub fn pool_size(&self) -> usize {
        self.pool.capacity()
    }

    /// Number of HTTP connections open now.
    pub fn open_connections(&self) -> usize {
        self.pool.open()
    }

    /// The connection pool's counts: admissions, evictions, deadlines, segments.
    pub fn pool_counters(&self) -> PoolCounters {
        self.pool.counters()
    }

    /// The pool's deadlines.
    pub fn pool_limits(&self) -> PoolLimits {
        self.pool.limits()
    }

    /// The appliance's counts (connections opened: both pools').
    pub fn counters(&self) -> ApplianceCounters {
        let mut counters = self.counters;
        for pool in [Some(self.pool.counters()), self.https_pool_counters()]
            .into_iter()
            .flatten()
        {
            counters.connections_opened += pool.accepted;
            counters.ipv6_connections_opened += pool.accepted_ipv6;
        }
        counters
    }

    /// The device adapter's counts.
    pub fn phy_counters(&self) -> PhyCounters {
        self.phy.counters()
    }

    /// The HTTP server (for its counters). Borrowed until the value is dropped: nothing
    /// else of the appliance may be called meanwhile.
    pub fn server(&self) -> Ref<'_, Server<'a>> {
        self.server.borrow()
    }

    /// Serves `site` from the next request on, on every pool (HTTP, HTTPS, HTTP/2); the
    /// responses already started finish from the site they started with (see
    /// [`Server::switch_site`]). False while an earlier switch still retires.
    #[must_use]
    pub fn switch_site(&mut self, site: SiteSource<'a>) -> bool {
        self.server.borrow_mut().switch_site(site)
    }

    /// Responses still being sent from the site before the last switch (`None`: none
    /// retiring).
    pub fn retiring_responses(&self) -> Option<u32> {
        self.server.borrow().retiring_responses()
    }

    /// Stops serving the site before the last switch (see [`Server::retire_site`]).
    pub fn retire_site(&mut self) -> bool {
        self.server.borrow_mut().retire_site()
    }

    /// Sets what the 503 diagnostic page says beside the site's problem (see
    /// [`Server::set_notice`]), such as why HTTPS is not running.
    pub fn set_notice(&mut self, text: &str) {
        self.server.borrow_mut().set_notice(text);
    }

    /// The network device.
    pub fn device(&self) -> &D {
        self.phy.device()
    }

    /// The network device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        self.phy.device_mut()
    }
}
