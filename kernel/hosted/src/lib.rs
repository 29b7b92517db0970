//! The Bramble appliance as a Linux process: the same network loop and HTTP engine as the Pi
//! kernel, over a TAP device, with optional fault injection and pcap capture.
//!
//! `unsafe` appears only in [`tap`] (the TUNSETIFF and SIOCGIFFLAGS ioctls) and in the
//! `poll(2)` call of [`run`].

pub mod fault;
pub mod pcap;
// The TAP device needs ioctls (TUNSETIFF, SIOCGIFFLAGS) that std does not wrap: libc calls.
#[allow(unsafe_code)]
pub mod tap;

use bramble_hal::{Clock, EthernetDevice, Instant, MacAddress};
use bramble_http::{Connection, Server, ServerConfig, SiteSource};
use bramble_net::appliance::secure::TlsConnection;
use bramble_net::appliance::{
    AddressConfig, Appliance, ApplianceMemory, ClockConfig, ClockMemory, EXTRA_SOCKETS,
    HttpsMemory, Ipv6Config, NetworkConfig,
};
use bramble_site::SiteImage;
use smoltcp::iface::SocketStorage;
use std::fmt;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::RawFd;
use std::path::PathBuf;

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
    /// TCP connections in the pool.
    pub connections: usize,
    /// Receive buffer per connection.
    pub tcp_rx_len: usize,
    /// Transmit buffer per connection.
    pub tcp_tx_len: usize,
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
    /// HTTPS connections in the pool.
    pub https_connections: usize,
    /// SNTP servers; empty: the host's clock sets the HTTP engine's.
    pub ntp: Vec<String>,
}

/// What HTTPS needs, made from the certificate files: the rustls configuration and the
/// pool's memory (leaked: it lives as long as the process).
fn prepare_https(
    config: &HostedConfig,
) -> Result<
    Option<(
        std::sync::Arc<bramble_tls::ServerConfig>,
        &'static mut HttpsMemory<'static>,
    )>,
    HostedError,
> {
    let Some((certificate, key)) = &config.tls else {
        return Ok(None);
    };
    let read = |path: &PathBuf| {
        std::fs::read(path)
            .map_err(|error| HostedError::Tls(format!("{}: {error}", path.display())))
    };
    let (certificate_pem, key_pem) = (read(certificate)?, read(key)?);
    let mut seed = [0u8; 64];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut seed))
        .map_err(|error| HostedError::Tls(format!("no entropy from /dev/urandom: {error}")))?;
    bramble_tls::random::RANDOM
        .seed(&seed)
        .map_err(|_| HostedError::Tls("the CSPRNG refused its seed".into()))?;
    let identity =
        bramble_tls::Identity::from_pem(&certificate_pem, &key_pem).map_err(|problem| {
            HostedError::Tls(format!(
                "{} and {}: {problem}",
                certificate.display(),
                key.display()
            ))
        })?;
    let tls = bramble_tls::server_config(identity, bramble_tls::SniPolicy::AnyName)
        .map_err(|error| HostedError::Tls(error.to_string()))?;
    let pool = config.https_connections.max(1);
    let connections: Vec<TlsConnection<'static>> = (0..pool)
        .map(|_| {
            TlsConnection::new(
                Box::leak(vec![0u8; bramble_tls::session::MAX_RECORD_LEN].into_boxed_slice()),
                Box::leak(vec![0u8; 12 * 1024].into_boxed_slice()),
            )
        })
        .collect();
    let memory = Box::leak(Box::new(HttpsMemory {
        connections: Box::leak(connections.into_boxed_slice()),
        tcp_buffers: Box::leak(
            vec![0u8; pool * (config.tcp_rx_len + config.tcp_tx_len)].into_boxed_slice(),
        ),
        tcp_rx_len: config.tcp_rx_len,
        tcp_tx_len: config.tcp_tx_len,
    }));
    Ok(Some((tls, memory)))
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

/// Loads the site image; a missing or corrupt one becomes the 503 diagnostic page, as on
/// the Pi.
pub fn load_site(path: &std::path::Path) -> SiteSource<'static> {
    let reason = match std::fs::read(path) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            match SiteImage::new_checked(bytes) {
                Ok(image) => {
                    log::info!(
                        "site: {} files, {} bytes, checksum {:08x}",
                        image.file_count(),
                        image.len(),
                        image.checksum()
                    );
                    return SiteSource::Ready(image);
                }
                Err(e) => format!("{}: {e}", path.display()),
            }
        }
        Err(e) => format!("{}: {e}", path.display()),
    };
    log::error!("site: {reason}; serving the diagnostic page");
    SiteSource::Unavailable(Box::leak(reason.into_boxed_str()))
}

/// Opens the TAP device and runs the appliance until the process is killed.
pub fn run(config: &HostedConfig) -> Result<(), HostedError> {
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
            serve(pcap::CapturingDevice::new(device, writer), fd, config)
        }
        None => serve(device, fd, config),
    }
}

fn serve<D: EthernetDevice>(
    device: D,
    fd: RawFd,
    config: &HostedConfig,
) -> Result<(), HostedError> {
    let clock = HostClock::new();
    let site = load_site(&config.site);
    let https = prepare_https(config)?;
    let mut server = Server::new(
        site,
        ServerConfig {
            access_log: config.access_log,
            redirect_to_https_port: (config.https_only && https.is_some()).then_some(443),
            hsts_seconds: config.hsts_seconds,
            ..ServerConfig::default()
        },
    );
    if config.ntp.is_empty() {
        // This machine has a clock: responses carry Date from the start.
        if let Ok(since_epoch) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
        {
            server.set_wall_clock(since_epoch.as_secs(), clock.now());
        }
    }
    let pool = config.connections.max(1);
    let https_sockets = https
        .as_ref()
        .map_or(0, |_| config.https_connections.max(1));
    let clock_sockets = if config.ntp.is_empty() { 0 } else { 2 };
    let sockets: &'static mut [SocketStorage<'static>] = Box::leak(
        (0..pool + https_sockets + clock_sockets + EXTRA_SOCKETS)
            .map(|_| SocketStorage::EMPTY)
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let connections: &'static mut [Connection] = Box::leak(
        (0..pool)
            .map(|_| Connection::new())
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let buffers: &'static mut [u8] =
        Box::leak(vec![0u8; pool * (config.tcp_rx_len + config.tcp_tx_len)].into_boxed_slice());
    let memory = Box::leak(Box::new(ApplianceMemory::new(
        sockets,
        connections,
        buffers,
        config.tcp_rx_len,
        config.tcp_tx_len,
    )));
    memory.reserved_sockets = https_sockets + clock_sockets;
    let hostname: &'static str = Box::leak(config.hostname.clone().into_boxed_str());
    let address = match config.static_address {
        None => AddressConfig::Dhcp,
        Some((address, prefix_len)) => AddressConfig::Static {
            address: address.octets(),
            prefix_len,
            gateway: config.gateway.map(|g| g.octets()),
        },
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id());
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
    if let Some((tls, memory)) = https {
        appliance
            .start_https(tls, memory, 443, clock.now())
            .map_err(HostedError::Net)?;
    }
    loop {
        let now = clock.now();
        let next = appliance.poll(now);
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
