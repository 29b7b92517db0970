//! `bramble serve`: authors' preview of a site folder through Bramble's own HTTP engine.
//!
//! The folder is packed in memory with the same packer as `bramble pack`, then served by
//! `bramble-http` (the engine the Pi runs) over ordinary std TCP sockets, one thread per
//! connection driving a [`Connection`]. With `--watch`, a polling thread re-packs the folder
//! when a file changes and publishes the new image; each connection switches to it between
//! responses, so no response ever mixes two images. If a re-pack fails, the error is served
//! as the engine's 503 diagnostic page until the folder is fixed.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bramble_hal::Instant;
use bramble_http::{Connection, ConnectionAction, Server, ServerConfig, SiteSource};
use bramble_net::appliance::PooledConnection;
use bramble_net::appliance::secure::{TlsConnection, TlsShared};
use bramble_site::SiteImage;

use crate::pack::{PackOptions, pack_site};

/// Arguments of `bramble serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The site folder to serve (e.g. Hugo's public/, Jekyll's _site/).
    pub site_dir: PathBuf,
    /// TCP port; 0 picks a free one (the address is printed on stdout).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on. The default keeps the preview on this machine.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,
    /// Re-pack and serve the new image whenever a file in the folder changes.
    #[arg(long)]
    pub watch: bool,
    /// No access log on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Leave out symlinks that point at nothing, with a warning, instead of failing.
    #[arg(long)]
    pub skip_broken_links: bool,
    /// Also serve HTTPS with this PEM certificate chain (leaf first), through the same TLS
    /// code as the Pi.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key (ECDSA P-256 or Ed25519).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// TCP port for HTTPS; 0 picks a free one [default: 8443].
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 8443,
        requires = "tls_cert"
    )]
    pub https_port: u16,
}

/// How often `--watch` looks at the folder.
const WATCH_INTERVAL: Duration = Duration::from_millis(300);
/// How long a connection thread blocks in `read` before checking deadlines and the image.
const READ_SLICE: Duration = Duration::from_millis(100);
/// Most simultaneous connections; more are closed at once (a preview has one author).
const MAX_CONNECTIONS: usize = 256;
/// Received bytes kept waiting for the engine before reading stops.
const MAX_PENDING: usize = 256 * 1024;
/// Transmit chunk handed to the engine per write.
const WRITE_CHUNK: usize = 64 * 1024;

/// What is being served: a packed image, or why there is none.
#[derive(Clone)]
enum Published {
    /// A packed image (validated when packed).
    Image(Arc<Vec<u8>>),
    /// The packer's error, shown as the 503 diagnostic page.
    Error(Arc<String>),
}

/// The current site, swapped atomically by the watcher.
struct Site {
    /// Bumped on every swap; connections compare it between responses.
    generation: AtomicU64,
    current: Mutex<Published>,
}

impl Site {
    fn new(first: Published) -> Self {
        Self {
            generation: AtomicU64::new(0),
            current: Mutex::new(first),
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn snapshot(&self) -> (u64, Published) {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        (self.generation(), current.clone())
    }

    fn publish(&self, next: Published) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *current = next;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Packs `dir` into an image, or the error text to show.
fn pack(dir: &Path, skip_broken_links: bool, progress: bool) -> Result<(Vec<u8>, String), String> {
    let mut opts = PackOptions::from_env().map_err(|e| e.to_string())?;
    opts.progress = progress;
    opts.skip_broken_links = skip_broken_links;
    let output =
        pack_site(dir, &opts).map_err(|e| format!("packing {} failed: {e}", dir.display()))?;
    output.warn_left_out();
    let summary = format!(
        "{} files, {} bytes, checksum {:08x}",
        output.summary.files, output.summary.image_bytes, output.summary.checksum
    );
    Ok((output.image, summary))
}

/// Writes access-log lines (and other engine messages) to stderr.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Info
    }

    fn log(&self, record: &log::Record) {
        if self.enabled(record.metadata()) {
            eprintln!("{}", record.args());
        }
    }

    fn flush(&self) {}
}

static STDERR_LOG: StderrLog = StderrLog;

/// Runs `bramble serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    if !args.site_dir.is_dir() {
        anyhow::bail!("{} is not a folder", args.site_dir.display());
    }
    if log::set_logger(&STDERR_LOG).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let first = match pack(
        &args.site_dir,
        args.skip_broken_links,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    ) {
        Ok((image, summary)) => {
            eprintln!("packed {}: {summary}", args.site_dir.display());
            Published::Image(Arc::new(image))
        }
        Err(error) if args.watch => {
            eprintln!("{error}\nserving the error page until the folder is fixed");
            Published::Error(Arc::new(error))
        }
        Err(error) => anyhow::bail!(error),
    };
    let site = Arc::new(Site::new(first));

    let listener = TcpListener::bind(SocketAddr::new(args.bind, args.port))
        .with_context(|| format!("cannot listen on {}:{}", args.bind, args.port))?;
    let address = listener.local_addr()?;
    println!("bramble serve: http://{address}/  (Ctrl-C stops)");
    std::io::stdout().flush()?;

    if args.watch {
        let site = Arc::clone(&site);
        let dir = args.site_dir.clone();
        let skip_broken_links = args.skip_broken_links;
        std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || watch(&dir, skip_broken_links, &site))?;
    }

    let config = ServerConfig {
        access_log: !args.quiet,
        ..ServerConfig::default()
    };
    let active = Arc::new(AtomicUsize::new(0));
    if let (Some(certificate), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let tls = tls_config(certificate, key)?;
        let https = TcpListener::bind(SocketAddr::new(args.bind, args.https_port))
            .with_context(|| format!("cannot listen on {}:{}", args.bind, args.https_port))?;
        println!("bramble serve: https://{}/", https.local_addr()?);
        std::io::stdout().flush()?;
        let site = Arc::clone(&site);
        let active = Arc::clone(&active);
        std::thread::Builder::new()
            .name("https".into())
            .spawn(move || accept(https, &site, config, &active, Some(tls)))?;
    }
    accept(listener, &site, config, &active, None);
    Ok(())
}

/// The TLS configuration for `bramble serve`, checked as `bramble image` checks it.
fn tls_config(certificate: &Path, key: &Path) -> anyhow::Result<Arc<bramble_tls::ServerConfig>> {
    let (certificate_pem, key_pem, check) =
        crate::image::check_tls_files(certificate, key, unix_now())?;
    if let Some(warning) = check.warning {
        eprintln!("warning: {warning}");
    }
    let mut seed = [0u8; 64];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut seed))
        .context("reading /dev/urandom for the TLS seed")?;
    bramble_tls::random::RANDOM
        .seed(&seed)
        .map_err(|_| anyhow::anyhow!("the CSPRNG refused its seed"))?;
    bramble_tls::clock::CLOCK.set(unix_now() as u64 * 1_000_000, 0);
    let identity = bramble_tls::Identity::from_pem(&certificate_pem, &key_pem)
        .map_err(|problem| anyhow::anyhow!("{}: {problem}", certificate.display()))?;
    Ok(bramble_tls::server_config(
        identity,
        bramble_tls::SniPolicy::AnyName,
    )?)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

/// Serves the connections `listener` accepts, each on a thread of its own, over TLS when
/// `tls` is given.
fn accept(
    listener: TcpListener,
    site: &Arc<Site>,
    config: ServerConfig,
    active: &Arc<AtomicUsize>,
    tls: Option<Arc<bramble_tls::ServerConfig>>,
) {
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            Err(error) => {
                eprintln!("accept failed: {error}");
                continue;
            }
        };
        if active.load(Ordering::Acquire) >= MAX_CONNECTIONS {
            drop(stream);
            continue;
        }
        active.fetch_add(1, Ordering::AcqRel);
        let site = Arc::clone(site);
        let active = Arc::clone(active);
        let tls = tls.clone();
        let spawned = std::thread::Builder::new()
            .name("connection".into())
            .spawn(move || {
                match tls {
                    None => {
                        serve_connection(stream, &site, config, &mut Connection::new(), &mut ())
                    }
                    Some(tls) => {
                        let mut incoming = vec![0u8; bramble_tls::session::MAX_RECORD_LEN];
                        let mut outgoing = vec![0u8; 16 * 1024];
                        let mut connection = TlsConnection::new(&mut incoming, &mut outgoing);
                        let mut shared = TlsShared::new(tls, Instant::from_micros(0));
                        serve_connection(stream, &site, config, &mut connection, &mut shared);
                    }
                }
                active.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(error) = spawned {
            eprintln!("cannot start a connection thread: {error}");
        }
    }
}

/// Polls the folder and re-packs when its fingerprint changes.
fn watch(dir: &Path, skip_broken_links: bool, site: &Site) {
    let mut seen = fingerprint(dir);
    loop {
        std::thread::sleep(WATCH_INTERVAL);
        let now = fingerprint(dir);
        if now == seen {
            continue;
        }
        // Let a burst of writes (an editor save, a generator run) settle first.
        std::thread::sleep(WATCH_INTERVAL);
        seen = fingerprint(dir);
        match pack(dir, skip_broken_links, false) {
            Ok((image, summary)) => {
                eprintln!("re-packed: {summary}");
                site.publish(Published::Image(Arc::new(image)));
            }
            Err(error) => {
                eprintln!("{error}");
                site.publish(Published::Error(Arc::new(error)));
            }
        }
    }
}

/// A cheap summary of the folder: every path with its size and mtime, in a stable order.
fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    fn visit(dir: &Path, depth: usize, out: &mut Vec<(PathBuf, u64, Option<SystemTime>)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(metadata) = std::fs::metadata(&path) else {
                out.push((path, u64::MAX, None));
                continue;
            };
            if metadata.is_dir() {
                if depth < 32 {
                    visit(&path, depth + 1, out);
                }
            } else {
                out.push((path, metadata.len(), metadata.modified().ok()));
            }
        }
    }
    let mut out = Vec::new();
    visit(dir, 0, &mut out);
    out.sort();
    out
}

/// Microseconds since the thread's clock origin, as the engine's `Instant`.
fn instant(origin: std::time::Instant) -> Instant {
    Instant::from_micros(u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX))
}

/// Serves one TCP connection until it closes, re-reading the published image between
/// responses when it changes.
fn serve_connection<C: PooledConnection>(
    mut stream: TcpStream,
    site: &Site,
    config: ServerConfig,
    connection: &mut C,
    shared: &mut C::Shared,
) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(READ_SLICE));
    let _ = stream.set_write_timeout(Some(Duration::from_micros(config.limits.response_micros)));
    let origin = std::time::Instant::now();
    let mut opened = false;
    let mut pending: Vec<u8> = Vec::new();
    let mut out = vec![0u8; WRITE_CHUNK];
    let mut input = vec![0u8; 16 * 1024];
    loop {
        let (generation, published) = site.snapshot();
        let problem;
        let source = match &published {
            Published::Image(bytes) => match SiteImage::new_checked(bytes) {
                Ok(image) => SiteSource::Ready(image),
                Err(error) => {
                    problem = format!("the packed image does not read back: {error}");
                    SiteSource::Unavailable(&problem)
                }
            },
            Published::Error(error) => SiteSource::Unavailable(error.as_str()),
        };
        let mut server = Server::new(source, config);
        // This machine has a real clock, so responses carry Date (the Pi only does once SNTP
        // has set its clock).
        if let Ok(since_epoch) = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
            server.set_wall_clock(since_epoch.as_secs(), instant(origin));
        }
        if !opened {
            // A new TLS connection spends a token of the handshake budget (one per thread
            // here: a preview has one author).
            if !connection.open(shared, &mut server, instant(origin)) {
                return;
            }
            opened = true;
        }
        let finished = drive(
            &mut stream,
            connection,
            shared,
            &mut server,
            site,
            generation,
            origin,
            (&mut pending, &mut input, &mut out),
        );
        if finished {
            connection.close(shared, &mut server);
            return;
        }
        // Otherwise a new image was published and no response is in flight: switch.
    }
}

/// Drives the connection against one image. Returns true when the connection is over,
/// false when a newer image should be picked up.
#[allow(clippy::too_many_arguments)] // one connection's parts, borrowed separately
fn drive<C: PooledConnection>(
    stream: &mut TcpStream,
    connection: &mut C,
    shared: &mut C::Shared,
    server: &mut Server,
    site: &Site,
    generation: u64,
    origin: std::time::Instant,
    (pending, input, out): (&mut Vec<u8>, &mut Vec<u8>, &mut Vec<u8>),
) -> bool {
    loop {
        // Hand pending input to the engine, sending responses as they are produced.
        loop {
            let consumed = connection.receive(shared, server, pending, instant(origin));
            pending.drain(..consumed);
            let mut sent = 0;
            loop {
                let n = connection.transmit(shared, server, out, instant(origin));
                if n == 0 {
                    break;
                }
                if stream.write_all(&out[..n]).is_err() {
                    return true;
                }
                sent += n;
            }
            if pending.is_empty() || (consumed == 0 && sent == 0) {
                break;
            }
        }
        match connection.action(instant(origin)) {
            ConnectionAction::KeepOpen => {}
            ConnectionAction::CloseWhenFlushed => {
                let _ = stream.flush();
                let _ = stream.shutdown(Shutdown::Write);
                return true;
            }
            ConnectionAction::Abort => {
                let _ = stream.shutdown(Shutdown::Both);
                return true;
            }
        }
        if site.generation() != generation && !connection.is_responding() {
            return false;
        }
        if pending.len() >= MAX_PENDING {
            // The engine holds input back until a response drains; do not read more.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        match stream.read(input) {
            Ok(0) => return true,
            Ok(n) => pending.extend_from_slice(&input[..n]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}
