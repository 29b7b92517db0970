//! The Bramble appliance as a Linux process: the same network loop, HTTP engine and card store
//! as the Pi kernel (SITE.BIN's bytes standing in for the card), over a TAP device, with
//! optional fault injection and pcap capture.
//!
//! `unsafe` appears only in [`tap`] (the TUNSETIFF and SIOCGIFFLAGS ioctls) and in the
//! `poll(2)` call of [`run`].

pub mod fault;
pub mod pcap;
// The TAP device needs ioctls (TUNSETIFF, SIOCGIFFLAGS) that std does not wrap: libc calls.
#[allow(unsafe_code)]
pub mod tap;

use bramble_hal::{Clock, EthernetDevice, Instant, MacAddress};
use bramble_http::{Server, ServerConfig, SiteSource};
use bramble_net::SocketStorage;
use bramble_net::appliance::acme::{AcmeConfig, AcmeMemory};
use bramble_net::appliance::{
    AddressConfig, Appliance, ApplianceMemory, ClockConfig, ClockMemory, EXTRA_SOCKETS,
    HttpsMemory, Ipv6Config, NetworkConfig, PoolSizes,
};
use bramble_site::SiteIndex;
use bramble_status::Text;
use bramble_store::{CardStore, FileExtents, MemoryCard, Page};
use bramble_stream::PoolLimits;
use std::fmt;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Longest sleep between polls: link changes (the host taking the TAP down) raise no event
/// on the descriptor, so they are noticed within this time.
const LINK_CHECK_MICROS: u64 = 500_000;

/// Why the hosted appliance could not start.
#[derive(Debug)]
pub enum HostedError {
    /// The TAP device could not be opened (missing `/dev/net/tun`, no `CAP_NET_ADMIN`).
    Tap(std::io::Error),
    /// The pcap file could not be created.
    Pcap(std::io::Error),
    /// The appliance refused its configuration.
    Net(bramble_net::appliance::NetError),
    /// `poll(2)` failed.
    Poll(std::io::Error),
    /// HTTPS could not be set up (files, certificate, entropy).
    Tls(String),
}

impl fmt::Display for HostedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostedError::Tap(e) => write!(f, "cannot open TAP device: {e}"),
            HostedError::Pcap(e) => write!(f, "cannot create pcap file: {e}"),
            HostedError::Net(e) => write!(f, "network setup: {e}"),
            HostedError::Poll(e) => write!(f, "poll(2) failed: {e}"),
            HostedError::Tls(e) => write!(f, "HTTPS: {e}"),
        }
    }
}

impl std::error::Error for HostedError {}

/// Everything the command line sets.
#[derive(Clone, Debug)]
pub struct HostedConfig {
    /// TAP interface name.
    pub tap: String,
    /// Site image file.
    pub site: PathBuf,
    /// DHCP (`None`) or a static address with prefix length.
    pub static_address: Option<(Ipv4Addr, u8)>,
    /// Default gateway for a static address.
    pub gateway: Option<Ipv4Addr>,
    /// Speak IPv6.
    pub ipv6: bool,
    /// A static IPv6 address with prefix length (`None`: SLAAC).
    pub static_address6: Option<(Ipv6Addr, u8)>,
    /// A fixed IPv6 default router.
    pub gateway6: Option<Ipv6Addr>,
    /// Host name for DHCP and mDNS.
    pub hostname: String,
    /// The guest's MAC address.
    pub mac: MacAddress,
    /// Capture file.
    pub pcap: Option<PathBuf>,
    /// Fault injection.
    pub faults: fault::FaultConfig,
    /// TCP connections open at once.
    pub connections: usize,
    /// Connections served at once (HTTP sessions).
    pub sessions: usize,
    /// Requests that may wait for a session at once (parking cells).
    pub cells: usize,
    /// Most connections from one address at once (0: no cap).
    pub max_per_source: u32,
    /// Answer mDNS queries.
    pub mdns: bool,
    /// Write the access log.
    pub access_log: bool,
    /// HTTPS on port 443: the PEM certificate chain and key files.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Plain HTTP redirects to HTTPS (308), as `https = only`.
    pub https_only: bool,
    /// Strict-Transport-Security max-age on HTTPS responses.
    pub hsts_seconds: Option<u32>,
    /// HTTPS connections served at once (TLS session slots of the HTTPS pool, which holds
    /// as many connections as the HTTP pool).
    pub https_sessions: usize,
    /// SNTP servers; empty: the host's clock sets the HTTP engine's.
    pub ntp: Vec<String>,
    /// Obtain the certificate by ACME.
    pub acme: Option<HostedAcme>,
    /// Answer `status` typed on stdin with the Pi's status lines (on stdout).
    pub console: bool,
}

/// Let's Encrypt's production directory, the default CA.
pub const LETS_ENCRYPT_DIRECTORY: &str = bramble_acme::LETS_ENCRYPT_DIRECTORY;

/// ACME settings, as BRAMBLE.TXT's `acme`, `domain`, `acme_*` and `certificate_store` give
/// them on the Pi.
#[derive(Clone, Debug)]
pub struct HostedAcme {
    /// The names.
    pub names: Vec<String>,
    /// The directory URL.
    pub directory: String,
    /// The PEM roots the CA's server chains to; `None`: the embedded Let's Encrypt roots.
    pub ca: Option<PathBuf>,
    /// Contact address.
    pub email: Option<String>,
    /// The store file; `None`: RAM.
    pub store: Option<PathBuf>,
    /// Where the store region starts in the file, in 512-byte blocks.
    pub store_offset_blocks: u64,
    /// Test knob: pause this long before each store block write.
    pub store_write_delay_ms: u64,
    /// First back-off wait, seconds.
    pub first_retry_seconds: u64,
    /// Test knob: renew this long after a certificate's start.
    pub renew_after_seconds: Option<u64>,
}

/// A certificate store region in a file: preallocated to the region's size, written in
/// place block by block (`pwrite`), made durable by `fsync`, as the card's reserved file is.
pub struct FileBlocks {
    file: std::fs::File,
    blocks: u32,
    /// Where the region starts in the file, in blocks (a whole card image around it).
    first: u64,
    /// Test knob: a pause before each block write, so a kill lands inside a save.
    pub write_delay: std::time::Duration,
}

impl FileBlocks {
    /// Opens `path`, creating it zero-filled at `blocks` blocks if it is missing or shorter;
    /// the region starts `first` blocks into the file.
    pub fn open(path: &std::path::Path, first: u64, blocks: u32) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = (first + u64::from(blocks)) * bramble_acme::store::BLOCK_LEN as u64;
        if file.metadata()?.len() < len {
            file.set_len(len)?;
            file.sync_all()?;
        }
        Ok(Self {
            file,
            blocks,
            first,
            write_delay: std::time::Duration::ZERO,
        })
    }

    fn offset(&self, index: u32) -> u64 {
        (self.first + u64::from(index)) * bramble_acme::store::BLOCK_LEN as u64
    }
}

impl bramble_acme::BlockStore for FileBlocks {
    fn block_count(&self) -> u32 {
        self.blocks
    }

    fn read_block(
        &mut self,
        index: u32,
        out: &mut [u8; bramble_acme::store::BLOCK_LEN],
    ) -> Result<(), bramble_acme::StoreError> {
        use std::os::unix::fs::FileExt;
        if index >= self.blocks {
            return Err(bramble_acme::StoreError::Device);
        }
        self.file
            .read_exact_at(out, self.offset(index))
            .map_err(|_| bramble_acme::StoreError::Device)
    }

    fn write_block(
        &mut self,
        index: u32,
        data: &[u8; bramble_acme::store::BLOCK_LEN],
    ) -> Result<(), bramble_acme::StoreError> {
        use std::os::unix::fs::FileExt;
        if index >= self.blocks {
            return Err(bramble_acme::StoreError::Device);
        }
        if !self.write_delay.is_zero() {
            std::thread::sleep(self.write_delay);
        }
        self.file
            .write_all_at(data, self.offset(index))
            .map_err(|_| bramble_acme::StoreError::Device)
    }

    fn flush(&mut self) -> Result<(), bramble_acme::StoreError> {
        self.file
            .sync_data()
            .map_err(|_| bramble_acme::StoreError::Device)
    }
}

/// Seeds the TLS CSPRNG from the host's.
fn seed_random() -> Result<(), HostedError> {
    let mut seed = [0u8; 64];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut seed))
        .map_err(|error| HostedError::Tls(format!("no entropy from /dev/urandom: {error}")))?;
    bramble_tls::random::RANDOM
        .seed(&seed)
        .map_err(|_| HostedError::Tls("the CSPRNG refused its seed".into()))
}

/// The HTTPS pool's memory (leaked: it lives as long as the process): as many connections
/// as the HTTP pool, `https_sessions` served at once.
fn https_memory(config: &HostedConfig) -> &'static mut HttpsMemory<'static> {
    let connections = config.connections.max(1);
    HttpsMemory::leaked(PoolSizes {
        connections,
        sessions: config.https_sessions.max(1),
        cells: config.cells.min(connections).max(1),
        sources: if config.max_per_source > 0 {
            2 * connections
        } else {
            0
        },
    })
}

/// Starts ACME on `appliance` as `acme` says.
fn start_acme<D: EthernetDevice>(
    appliance: &mut Appliance<'static, D>,
    config: &HostedConfig,
    acme: &HostedAcme,
    now: Instant,
) -> Result<(), HostedError> {
    seed_random()?;
    let roots: &'static [u8] = match &acme.ca {
        Some(path) => Box::leak(
            std::fs::read(path)
                .map_err(|error| HostedError::Tls(format!("{}: {error}", path.display())))?
                .into_boxed_slice(),
        ),
        None => bramble_acme::LETS_ENCRYPT_ROOTS_PEM,
    };
    let store: &'static mut dyn bramble_acme::BlockStore = match &acme.store {
        Some(path) => {
            let mut blocks = FileBlocks::open(
                path,
                acme.store_offset_blocks,
                bramble_acme::store::DEFAULT_REGION_BLOCKS,
            )
            .map_err(|error| HostedError::Tls(format!("{}: {error}", path.display())))?;
            blocks.write_delay = std::time::Duration::from_millis(acme.store_write_delay_ms);
            Box::leak(Box::new(blocks))
        }
        None => {
            log::warn!("acme: the certificate is kept in RAM only: every start orders a new one");
            Box::leak(Box::new(bramble_acme::MemoryBlocks::new(
                bramble_acme::store::DEFAULT_REGION_BLOCKS,
            )))
        }
    };
    let names: Vec<&'static str> = acme
        .names
        .iter()
        .map(|name| &*Box::leak(name.clone().into_boxed_str()))
        .collect();
    let leak = |text: &str| -> &'static str { Box::leak(text.to_string().into_boxed_str()) };
    let acme_config = AcmeConfig {
        directory_url: leak(&acme.directory),
        email: acme.email.as_deref().map(leak),
        names: Box::leak(names.into_boxed_slice()),
        ca_roots_pem: roots,
        https_port: 443,
        challenge: bramble_acme::ChallengeKind::Http01,
        redirect_plain_http: config.https_only,
        backoff: bramble_acme::BackoffPolicy {
            first_seconds: acme.first_retry_seconds.max(1),
            ..bramble_acme::BackoffPolicy::DEFAULT
        },
        dns_servers: &[],
        renew_after_seconds: acme.renew_after_seconds,
    };
    appliance
        .start_acme(
            acme_config,
            store,
            Box::leak(Box::new(AcmeMemory::new())),
            Some(https_memory(config)),
            now,
        )
        .map_err(|problem| HostedError::Tls(format!("ACME: {problem}")))
}

/// What HTTPS needs: the rustls configuration, its certificate's key type and the pool's
/// memory.
type PreparedHttps = (
    std::sync::Arc<bramble_tls::ServerConfig>,
    bramble_tls::hello::CertificateKey,
    &'static mut HttpsMemory<'static>,
);

/// What HTTPS needs, made from the certificate files: the rustls configuration and the
/// pool's memory (leaked: it lives as long as the process).
fn prepare_https(config: &HostedConfig) -> Result<Option<PreparedHttps>, HostedError> {
    let Some((certificate, key)) = &config.tls else {
        return Ok(None);
    };
    let read = |path: &PathBuf| {
        std::fs::read(path)
            .map_err(|error| HostedError::Tls(format!("{}: {error}", path.display())))
    };
    let (certificate_pem, key_pem) = (read(certificate)?, read(key)?);
    seed_random()?;
    let identity =
        bramble_tls::Identity::from_pem(&certificate_pem, &key_pem).map_err(|problem| {
            HostedError::Tls(format!(
                "{} and {}: {problem}",
                certificate.display(),
                key.display()
            ))
        })?;
    let key = identity.certificate_key();
    let tls = bramble_tls::server_config(identity, bramble_tls::SniPolicy::AnyName)
        .map_err(|error| HostedError::Tls(error.to_string()))?;
    let memory = https_memory(config);
    Ok(Some((tls, key, memory)))
}

/// Monotonic time since the process started.
pub struct HostClock(std::time::Instant);

impl HostClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self(std::time::Instant::now())
    }
}

impl Default for HostClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for HostClock {
    fn now(&self) -> Instant {
        Instant::from_micros(self.0.elapsed().as_micros() as u64)
    }
}

/// The card store the hosted build serves from: SITE.BIN's bytes as a card in RAM.
pub type HostedStore = CardStore<'static, 'static, MemoryCard<'static, 'static>>;

/// Most cache pages the hosted store takes (64 MiB of 64 KiB segments).
const MAX_HOSTED_PAGES: usize = 1024;

/// Loads the site image and serves it the way the Pi does: the index read and verified
/// first, the bodies through the card store, over the file's bytes as a card in RAM. A missing
/// or corrupt index becomes the 503 diagnostic page, as on the Pi.
pub fn load_site(path: &std::path::Path) -> (SiteSource<'static>, Option<&'static HostedStore>) {
    let reason = match std::fs::read(path) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            match open_store(bytes) {
                Ok((index, store)) => {
                    log::info!(
                        "site: {} files, {} bytes, checksum {:08x}; bodies from the card store",
                        index.file_count(),
                        index.image_len(),
                        index.checksum()
                    );
                    return (SiteSource::Store(index, store), Some(store));
                }
                Err(e) => format!("{}: {e}", path.display()),
            }
        }
        Err(e) => format!("{}: {e}", path.display()),
    };
    log::error!("site: {reason}; serving the diagnostic page");
    (
        SiteSource::Unavailable(Box::leak(reason.into_boxed_str())),
        None,
    )
}

/// The index and a store over `bytes` (a bare SITE.BIN as a card).
fn open_store(
    bytes: &'static [u8],
) -> Result<(SiteIndex<'static>, &'static HostedStore), bramble_store::IndexError> {
    let len = u32::try_from(bytes.len()).map_err(|_| bramble_store::IndexError::Truncated {
        file: u32::MAX,
        image: u32::MAX,
    })?;
    let extents = FileExtents::contiguous(0, len);
    let mut card = MemoryCard::new(bytes);
    let needed = bramble_store::index_memory_len(&mut card, &extents)?;
    let memory: &'static mut [u8] = Box::leak(vec![0u8; needed].into_boxed_slice());
    let (index, _) = bramble_store::read_index(&mut card, &extents, memory)?;
    let table: &'static mut [u32] =
        Box::leak(vec![0u32; HostedStore::table_len(&index)].into_boxed_slice());
    let store: &'static HostedStore =
        Box::leak(Box::new(CardStore::new(card, index, extents, table)));
    let segment_len = index.segment_len() as usize;
    let pages = (index.segment_count() as usize).clamp(1, MAX_HOSTED_PAGES);
    let page_memory: &'static mut [u8] =
        Box::leak(vec![0u8; pages * segment_len].into_boxed_slice());
    let slots: &'static mut [Page<'static>] = Box::leak(
        page_memory
            .chunks_exact_mut(segment_len)
            .map(Page::new)
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    store.attach_pages(slots);
    Ok((index, store))
}

/// Opens the TAP device and runs the appliance until the process is killed.
pub fn run(config: &HostedConfig) -> Result<(), HostedError> {
    run_until(config, &AtomicBool::new(false))
}

/// Opens the TAP device and runs the appliance until `stop` is set (noticed within
/// [`LINK_CHECK_MICROS`]); for tests that run it on a thread of their own.
pub fn run_until(config: &HostedConfig, stop: &AtomicBool) -> Result<(), HostedError> {
    let tap = tap::TapDevice::open(&config.tap, config.mac).map_err(HostedError::Tap)?;
    let fd = tap.raw_fd();
    log::info!("hosted: TAP {} open, MAC {}", config.tap, config.mac);
    let device = fault::FaultyDevice::new(tap, config.faults);
    if config.faults.drop_percent > 0 || config.faults.corrupt_percent > 0 {
        log::warn!(
            "hosted: injecting faults: drop {}%, corrupt {}% (seed {})",
            config.faults.drop_percent,
            config.faults.corrupt_percent,
            config.faults.seed
        );
    }
    match &config.pcap {
        Some(path) => {
            let file = std::fs::File::create(path).map_err(HostedError::Pcap)?;
            let writer =
                pcap::PcapWriter::new(std::io::BufWriter::new(file)).map_err(HostedError::Pcap)?;
            log::info!("hosted: capturing frames to {}", path.display());
            serve(pcap::CapturingDevice::new(device, writer), fd, config, stop)
        }
        None => serve(device, fd, config, stop),
    }
}

fn serve<D: EthernetDevice>(
    device: D,
    fd: RawFd,
    config: &HostedConfig,
    stop: &AtomicBool,
) -> Result<(), HostedError> {
    let clock = HostClock::new();
    let (site, store) = load_site(&config.site);
    let https = prepare_https(config)?;
    let mut server = Server::new(
        site,
        ServerConfig {
            access_log: config.access_log,
            redirect_to_https_port: (config.https_only && https.is_some()).then_some(443),
            hsts_seconds: config.hsts_seconds,
            redirect_host: config
                .acme
                .as_ref()
                .and_then(|acme| acme.names.first())
                .and_then(|name| bramble_http::RedirectHost::new(name)),
            ..ServerConfig::default()
        },
    );
    if config.ntp.is_empty() {
        // This machine has a clock: responses carry Date from the start, and TLS checks
        // certificate dates (the CA's, for ACME) against it.
        if let Ok(since_epoch) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
        {
            server.set_wall_clock(since_epoch.as_secs(), clock.now());
            bramble_tls::clock::CLOCK.set(since_epoch.as_micros() as u64, clock.now().as_micros());
        }
    }
    let connections = config.connections.max(1);
    let memory = ApplianceMemory::leaked(PoolSizes {
        connections,
        sessions: config.sessions.max(1),
        cells: config.cells,
        sources: if config.max_per_source > 0 {
            2 * connections
        } else {
            0
        },
    });
    // Socket slots kept back: ACME's and the clock's two.
    let clock_sockets = if config.ntp.is_empty() { 0 } else { 2 };
    let acme_sockets = if config.acme.is_some() { 2 } else { 0 };
    memory.sockets = Box::leak(
        (0..clock_sockets + acme_sockets + EXTRA_SOCKETS)
            .map(|_| SocketStorage::EMPTY)
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    memory.reserved_sockets = clock_sockets + acme_sockets;
    let hostname: &'static str = Box::leak(config.hostname.clone().into_boxed_str());
    let address = match config.static_address {
        None => AddressConfig::Dhcp,
        Some((address, prefix_len)) => AddressConfig::Static {
            address: address.octets(),
            prefix_len,
            gateway: config.gateway.map(|g| g.octets()),
        },
    };
    // The network's secrets from the host's generator, as the Pi draws them from its CSPRNG.
    let mut secrets = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut secrets))
        .map_err(|error| HostedError::Tls(format!("no entropy from /dev/urandom: {error}")))?;
    let word = |i: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&secrets[i * 8..i * 8 + 8]);
        u64::from_le_bytes(bytes)
    };
    let seed = word(0);
    let secret_key = [word(1), word(2)];
    let ipv6 = if config.ipv6 {
        // Stable identifiers keyed with the MAC and host name: the same at every run of the
        // same configuration (a hosted run has no serial number to keep secret).
        let mut secret = [0u8; 16];
        secret[..6].copy_from_slice(&config.mac.0);
        for (i, byte) in config.hostname.bytes().enumerate() {
            secret[6 + i % 10] ^= byte;
        }
        Ipv6Config {
            enabled: true,
            static_address: config.static_address6.map(|(a, len)| (a.octets(), len)),
            gateway: config.gateway6.map(|g| g.octets()),
            secret,
        }
    } else {
        Ipv6Config::OFF
    };
    let net_config = NetworkConfig {
        hostname,
        address,
        ipv6,
        http_port: 80,
        mdns: config.mdns,
        random_seed: seed,
        secret_key,
        limits: PoolLimits::DEFAULT,
        max_per_source: config.max_per_source,
    };
    let mut appliance = Appliance::new(device, net_config, memory, server, clock.now())
        .map_err(HostedError::Net)?;
    if !config.ntp.is_empty() {
        let names: Vec<&'static str> = config
            .ntp
            .iter()
            .map(|name| &*Box::leak(name.clone().into_boxed_str()))
            .collect();
        appliance.start_clock(
            ClockConfig {
                servers: Box::leak(names.into_boxed_slice()),
                dns_servers: &[],
                seed,
            },
            Box::leak(Box::new(ClockMemory::new())),
            clock.now(),
        );
    }
    if let Some((tls, key, memory)) = https {
        appliance
            .start_https(tls, key, memory, 443, clock.now())
            .map_err(HostedError::Net)?;
    }
    if let Some(acme) = &config.acme {
        start_acme(&mut appliance, config, acme, clock.now())?;
    }
    let status_asked = Arc::new(AtomicBool::new(false));
    if config.console {
        let asked = Arc::clone(&status_asked);
        std::thread::spawn(move || {
            for line in std::io::stdin().lines() {
                let Ok(line) = line else { break };
                if line.trim() == "status" {
                    asked.store(true, Ordering::Relaxed);
                }
            }
        });
    }
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        if let Some(store) = store {
            store.poll(now);
        }
        let next = appliance.poll(now);
        let next = match (next, store.and_then(|store| store.next_deadline())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if status_asked.swap(false, Ordering::Relaxed) {
            print_status(&appliance);
        }
        let wait = next
            .map(|t| t.micros_since(now))
            .unwrap_or(LINK_CHECK_MICROS)
            .min(LINK_CHECK_MICROS);
        // Round up so a deadline 300 us away does not become a 0 ms spin.
        let timeout_ms = wait.div_ceil(1000) as libc::c_int;
        let mut poll_fd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        #[allow(unsafe_code)] // poll(2) on the TAP descriptor, the loop's one sleep
        // SAFETY: `poll_fd` is one valid, initialised pollfd that lives across the call, and
        // the count passed is 1.
        let ready = unsafe { libc::poll(&mut poll_fd, 1, timeout_ms) };
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(HostedError::Poll(error));
            }
        }
    }
    Ok(())
}

/// The Pi's `status` lines for the HTTP server and the connection pool, on stdout.
fn print_status<D: EthernetDevice>(appliance: &Appliance<'_, D>) {
    let http = appliance.server().counters().clone();
    let phy = appliance.phy_counters();
    let pool = appliance.pool_counters();
    let mut out = std::io::stdout().lock();
    let line = bramble_status::Http {
        requests: http.requests,
        bytes: http.bytes_sent,
        open_connections: pool.open,
        accepted: pool.accepted,
        timeouts: pool.timeouts(),
        errors: http.errors(),
        frames_rx: phy.rx_frames,
        frames_tx: phy.tx_frames,
        rx_errors: phy.rx_errors,
        tx_dropped: phy.tx_dropped,
    };
    let _ = writeln!(out, "{line}");
    let line = bramble_status::Connections {
        pool: Text::Shown(&pool),
    };
    let _ = writeln!(out, "{line}");
    if let Some(tls) = appliance.tls_counters() {
        let line = bramble_status::Https {
            open: appliance.open_https_connections(),
            full: tls.full_handshakes,
            resumed: tls.resumed_handshakes,
            h2: tls.h2_connections,
            failures: tls.failures,
            deferred: tls.deferred,
            // rustls allocates from the process's heap here: there is no TLS heap to report.
            heap: Text::Read("not measured (the host's allocator)"),
            certificate: Text::Read("not checked (hosted)"),
            closed_for_memory: tls.memory_closed,
            refused_not_tls: tls.refused_not_tls,
            priced_p256: tls.priced_p256,
            work_millions: tls.charged_millions,
            suspended: tls.suspended,
            suspended_now: tls.suspended_now,
            h2_suspended: tls.h2_suspended,
            h2_resumed: tls.h2_resumed,
            h2_closed_for_room: tls.h2_closed_for_room,
            h2_parked_bytes: tls.h2_parked_bytes,
        };
        let _ = writeln!(out, "{line}");
    }
    if let Some(pool) = appliance.https_pool_counters() {
        let line = bramble_status::HttpsConnections {
            pool: Text::Shown(&pool),
        };
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// A `log` backend that writes `[seconds.micros] LEVEL target: message` lines to stderr.
pub struct StderrLogger {
    clock: HostClock,
    level: log::LevelFilter,
}

impl StderrLogger {
    /// Installs the logger at `level`.
    pub fn install(level: log::LevelFilter) {
        let logger = Box::leak(Box::new(StderrLogger {
            clock: HostClock::new(),
            level,
        }));
        if log::set_logger(logger).is_ok() {
            log::set_max_level(level);
        }
    }
}

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let micros = self.clock.now().as_micros();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "[{:4}.{:06}] {:5} {}",
            micros / 1_000_000,
            micros % 1_000_000,
            record.level(),
            record.args()
        );
    }

    fn flush(&self) {}
}
