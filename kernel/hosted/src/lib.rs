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
use bramble_net::appliance::{
    AddressConfig, Appliance, ApplianceMemory, EXTRA_SOCKETS, NetworkConfig,
};
use bramble_site::SiteImage;
use smoltcp::iface::SocketStorage;
use std::fmt;
use std::io::Write;
use std::net::Ipv4Addr;
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
}

impl fmt::Display for HostedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostedError::Tap(e) => write!(f, "cannot open TAP device: {e}"),
            HostedError::Pcap(e) => write!(f, "cannot create pcap file: {e}"),
            HostedError::Net(e) => write!(f, "network setup: {e}"),
            HostedError::Poll(e) => write!(f, "poll(2) failed: {e}"),
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
    let server = Server::new(
        site,
        ServerConfig {
            access_log: config.access_log,
            ..ServerConfig::default()
        },
    );
    let pool = config.connections.max(1);
    let sockets: &'static mut [SocketStorage<'static>] = Box::leak(
        (0..pool + EXTRA_SOCKETS)
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
    let net_config = NetworkConfig {
        hostname,
        address,
        http_port: 80,
        mdns: config.mdns,
        random_seed: seed,
    };
    let mut appliance = Appliance::new(device, net_config, memory, server, clock.now())
        .map_err(HostedError::Net)?;
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
