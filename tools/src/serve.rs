//! `bramble serve`: authors' preview of a site folder through Bramble's own HTTP engine.
//!
//! The folder is packed in memory with the same packer as `bramble pack` (at `--fast`
//! effort: a preview does not need the smallest bodies), then served by `bramble-http` (the
//! engine the Pi runs) over ordinary std TCP sockets, one thread per connection driving a
//! [`Connection`]. With `--watch`, the OS tells a thread (inotify, through the notify crate)
//! when a file in the folder changes; it lets a burst of writes settle, re-packs, says what
//! changed and how long the re-pack took, and publishes the new image; each connection
//! switches to it between responses, so no response ever mixes two images. The watcher starts
//! before the first pack, so an edit made while it runs is not lost. If a re-pack fails, the
//! error is served as the engine's 503 diagnostic page until the folder is fixed.
//!
//! In this preview only (`--watch`), every HTML page gets a small script that listens on
//! [`EVENTS_PATH`] (Server-Sent Events) and reloads the page when a new image is published.

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bramble_hal::Instant;
use bramble_http::{Connection, Server, ServerConfig, SiteSource};
use bramble_site::SiteImage;
use bramble_stream::services::http::HttpService;
use bramble_stream::services::tls::{
    Carried, QUEUE_LEN, SCRATCH_LEN, TLS_CELL_LEN, TlsService, TlsSlot,
};
use bramble_stream::{Admission, Ending, PoolLimits, Service, SessionPhase, wire};
use bramble_tls::hello::CertificateKey;
use std::cell::RefCell;

use crate::pack::{PackOptions, SiteOptions, pack_site};

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
    /// Re-pack and serve the new image whenever a file in the folder changes, and reload
    /// the pages open in a browser (a script injected into HTML, in this preview only).
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
    /// Send Strict-Transport-Security with this max-age (seconds) on HTTPS answers, as
    /// BRAMBLE.TXT's `hsts` does on the Pi (never over plain HTTP).
    #[arg(
        long,
        value_name = "SECONDS",
        requires = "tls_cert",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(bramble_settings::MAX_HSTS_SECONDS))
    )]
    pub hsts: Option<u32>,
    /// How the site answers (the same options as `bramble pack`).
    #[command(flatten)]
    pub site: SiteOptions,
}

/// After a change, `--watch` waits until the folder has been quiet this long...
const SETTLE: Duration = Duration::from_millis(150);
/// ...but no longer than this after the first change (a generator writing for minutes).
const MAX_SETTLE: Duration = Duration::from_secs(2);
/// Where the injected script listens for new images (Server-Sent Events). No site serves
/// this path: it exists only in `bramble serve --watch`.
pub const EVENTS_PATH: &str = "/__bramble/events";
/// The script `--watch` puts before `</body>` of every HTML page: on the first event it notes
/// the image's generation, on a later one with another generation it reloads the page
/// (EventSource reconnects by itself when the server restarts).
pub const LIVE_RELOAD_SCRIPT: &str = "<script>/* bramble serve --watch: reload after a \
re-pack */(function(){var seen;new EventSource(\"/__bramble/events\").onmessage=function(e)\
{if(seen===undefined){seen=e.data}else if(e.data!==seen){location.reload()}}})();</script>";
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
fn pack(
    dir: &Path,
    skip_broken_links: bool,
    live_reload: bool,
    site: &SiteOptions,
    progress: bool,
) -> Result<(Vec<u8>, String), String> {
    let mut opts = PackOptions::from_env().map_err(|e| e.to_string())?;
    opts.progress = progress;
    opts.skip_broken_links = skip_broken_links;
    opts.effort = crate::pack::compress::Effort::Fast;
    if live_reload {
        opts.inject_html = Some(LIVE_RELOAD_SCRIPT.to_string());
    }
    opts.site = site.clone();
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
    // The watcher starts before the first pack: a change made while it runs (or between it
    // and the serving line) is queued, not missed.
    let watcher = if args.watch {
        Some(start_watcher(&args.site_dir)?)
    } else {
        None
    };
    let first = match pack(
        &args.site_dir,
        args.skip_broken_links,
        args.watch,
        &args.site,
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

    if let Some((watcher, events)) = watcher {
        let site = Arc::clone(&site);
        let dir = args.site_dir.clone();
        let skip_broken_links = args.skip_broken_links;
        let options = args.site.clone();
        std::thread::Builder::new()
            .name("watch".into())
            .spawn(move || {
                // Dropping the watcher would stop the notifications.
                let _watcher = watcher;
                watch(&dir, &events, skip_broken_links, &options, &site);
            })?;
    }

    let config = ServerConfig {
        access_log: !args.quiet,
        hsts_seconds: args.hsts,
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
            .spawn(move || accept(https, &site, config, &active, Some(tls), false))?;
    }
    accept(listener, &site, config, &active, None, args.watch);
    Ok(())
}

/// The TLS configuration for `bramble serve` and its certificate's key type.
type TlsSetup = (Arc<bramble_tls::ServerConfig>, CertificateKey);

/// The TLS configuration for `bramble serve`, checked as `bramble image` checks it.
fn tls_config(certificate: &Path, key: &Path) -> anyhow::Result<TlsSetup> {
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
    let key = identity.certificate_key();
    Ok((
        bramble_tls::server_config(identity, bramble_tls::SniPolicy::AnyName)?,
        key,
    ))
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
    tls: Option<TlsSetup>,
    live_reload: bool,
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
                    None if live_reload && asks_for_events(&stream) => serve_events(stream, &site),
                    tls => serve_connection(stream, &site, config, tls),
                }
                active.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(error) = spawned {
            eprintln!("cannot start a connection thread: {error}");
        }
    }
}

/// Events from the OS about the folder.
type FolderEvents = mpsc::Receiver<notify::Result<notify::Event>>;

/// Asks the OS to report every change under `dir` (recursively).
fn start_watcher(dir: &Path) -> anyhow::Result<(notify::RecommendedWatcher, FolderEvents)> {
    use notify::Watcher;
    let (send, events) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = send.send(event);
    })
    .context("cannot start the file watcher")?;
    watcher
        .watch(dir, notify::RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;
    Ok((watcher, events))
}

/// The paths an event names, relative to `dir` (access events name none: nothing changed).
fn changed_paths(dir: &Path, event: &notify::Event, into: &mut BTreeSet<String>) {
    if matches!(event.kind, notify::EventKind::Access(_)) {
        return;
    }
    let canonical = dir.canonicalize().ok();
    for path in &event.paths {
        let relative = path
            .strip_prefix(dir)
            .ok()
            .or_else(|| {
                canonical
                    .as_deref()
                    .and_then(|root| path.strip_prefix(root).ok())
            })
            .unwrap_or(path);
        into.insert(relative.display().to_string());
    }
}

/// `a.html, css/site.css and 3 more`.
fn describe(changed: &BTreeSet<String>) -> String {
    const SHOWN: usize = 4;
    let mut names: Vec<&str> = changed.iter().map(String::as_str).take(SHOWN).collect();
    if names.is_empty() {
        names.push("the folder");
    }
    let mut text = names.join(", ");
    if changed.len() > SHOWN {
        text.push_str(&format!(" and {} more", changed.len() - SHOWN));
    }
    text
}

/// Re-packs whenever the OS reports a change, once the folder has settled.
fn watch(
    dir: &Path,
    events: &FolderEvents,
    skip_broken_links: bool,
    options: &SiteOptions,
    site: &Site,
) {
    loop {
        let mut changed = BTreeSet::new();
        match events.recv() {
            Ok(Ok(event)) => changed_paths(dir, &event, &mut changed),
            Ok(Err(error)) => eprintln!("watching {}: {error}", dir.display()),
            Err(_) => return,
        }
        if changed.is_empty() {
            continue;
        }
        // Let a burst of writes (an editor save, a generator run) settle first.
        let first = std::time::Instant::now();
        while first.elapsed() < MAX_SETTLE {
            match events.recv_timeout(SETTLE) {
                Ok(Ok(event)) => changed_paths(dir, &event, &mut changed),
                Ok(Err(_)) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            }
        }
        let started = std::time::Instant::now();
        match pack(dir, skip_broken_links, true, options, false) {
            // Published before the terminal says so: whoever reads the line and then asks
            // gets the new site.
            Ok((image, summary)) => {
                let took = started.elapsed().as_secs_f64();
                site.publish(Published::Image(Arc::new(image)));
                eprintln!(
                    "re-packed {} after changes to {} in {took:.2} s: {summary}",
                    dir.display(),
                    describe(&changed),
                );
            }
            Err(error) => {
                let took = started.elapsed().as_secs_f64();
                let message = format!(
                    "re-packing after changes to {} failed ({took:.2} s): {error}",
                    describe(&changed),
                );
                site.publish(Published::Error(Arc::new(error)));
                eprintln!("{message}");
            }
        }
    }
}

/// Is the first request on `stream` a GET of [`EVENTS_PATH`]? Waits up to a second for its
/// request line; anything else goes to the engine.
fn asks_for_events(stream: &TcpStream) -> bool {
    let wanted = format!("GET {EVENTS_PATH}");
    let mut buffer = vec![0u8; wanted.len()];
    let _ = stream.set_read_timeout(Some(READ_SLICE));
    for _ in 0..10 {
        match stream.peek(&mut buffer) {
            Ok(0) => return false,
            Ok(n) if n >= wanted.len() => return buffer == wanted.as_bytes(),
            Ok(n) if !wanted.as_bytes().starts_with(&buffer[..n]) => return false,
            Ok(_) => std::thread::sleep(Duration::from_millis(10)),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return false,
        }
    }
    false
}

/// Serves the event stream: the current generation at once, then each new one, with a
/// comment every 15 s so proxies keep the connection; ends when the browser goes.
fn serve_events(mut stream: TcpStream, site: &Site) {
    // The request head (a GET has no body): read up to its blank line.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            Ok(_) => return,
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
    let start = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
                 Connection: keep-alive\r\n\r\nretry: 500\n\n";
    if stream.write_all(start.as_bytes()).is_err() {
        return;
    }
    let mut sent = None;
    let mut quiet_since = std::time::Instant::now();
    loop {
        let generation = site.generation();
        let message = if sent != Some(generation) {
            sent = Some(generation);
            Some(format!("data: {generation}\n\n"))
        } else if quiet_since.elapsed() >= Duration::from_secs(15) {
            Some(": still here\n\n".to_string())
        } else {
            None
        };
        if let Some(message) = message {
            if stream.write_all(message.as_bytes()).is_err() || stream.flush().is_err() {
                return;
            }
            quiet_since = std::time::Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Microseconds since the thread's clock origin, as the engine's `Instant`.
fn instant(origin: std::time::Instant) -> Instant {
    Instant::from_micros(u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX))
}

/// Serves one TCP connection until it closes, re-reading the published image between
/// responses when it changes: through the Pi's own stream services (plain HTTP's, or the
/// TLS one around it), over a blocking socket instead of the stream pool.
fn serve_connection(
    mut stream: TcpStream,
    site: &Site,
    config: ServerConfig,
    tls: Option<TlsSetup>,
) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(READ_SLICE));
    let _ = stream.set_write_timeout(Some(Duration::from_micros(config.limits.response_micros)));
    let origin = std::time::Instant::now();
    let peer = match stream.peer_addr().map(|address| address.ip()) {
        Ok(IpAddr::V4(v4)) => wire::v4_mapped(v4.octets()),
        Ok(IpAddr::V6(v6)) => v6.octets(),
        Err(_) => return,
    };
    let port = stream.local_addr().map_or(0, |address| address.port());
    let ends = Ends { peer, port, origin };
    // What outlives an image: the engine's session, and what it carries between images.
    let mut connection = Connection::new();
    let mut incoming = vec![0u8; bramble_tls::session::MAX_RECORD_LEN];
    let mut outgoing = vec![0u8; QUEUE_LEN];
    let mut scratch = vec![0u8; SCRATCH_LEN];
    let mut carried = [Carried::new()];
    let mut carry = 0;
    let mut pending: Vec<u8> = Vec::new();
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
        let server = RefCell::new(server);
        let image = Image { site, generation };
        let outcome = match &tls {
            None => {
                let mut service = HttpService::new(&server);
                drive(
                    &mut stream,
                    &mut service,
                    &mut connection,
                    carry,
                    &ends,
                    image,
                    &mut pending,
                )
            }
            Some((tls, key)) => {
                // A budget per thread: a preview has one author.
                let mut service = TlsService::new(
                    &server,
                    tls.clone(),
                    *key,
                    &mut carried,
                    &mut scratch,
                    instant(origin),
                );
                let mut slot = TlsSlot::new(&mut incoming, &mut outgoing);
                drive(
                    &mut stream,
                    &mut service,
                    &mut slot,
                    carry,
                    &ends,
                    image,
                    &mut pending,
                )
            }
        };
        match outcome {
            Some(next) => carry = next,
            None => return,
        }
    }
}

/// Who a connection is between: the peer (IPv4-mapped for IPv4), our port, and the
/// thread's clock origin.
struct Ends {
    peer: wire::Address,
    port: u16,
    origin: std::time::Instant,
}

/// The image a connection is being served.
#[derive(Clone, Copy)]
struct Image<'s> {
    site: &'s Site,
    generation: u64,
}

/// Drives the connection with `service` (serving one image) from `carry` (0: new). Returns
/// `None` when the connection is over, or the carry to go on with once a newer image
/// should be picked up (between responses).
fn drive<S: Service>(
    stream: &mut TcpStream,
    service: &mut S,
    session: &mut S::Session,
    carry: u32,
    ends: &Ends,
    image: Image<'_>,
    pending: &mut Vec<u8>,
) -> Option<u32> {
    let now = || instant(ends.origin);
    let limits = PoolLimits::DEFAULT;
    if carry == 0 && service.must_park(carry) {
        // The first bytes wait until the service may take them (a ClientHello, priced).
        let mut first = true;
        loop {
            if service.parked_ready(pending, carry) || pending.len() >= TLS_CELL_LEN {
                match service.admit(pending, carry, first, now()) {
                    Admission::Now => break,
                    Admission::Refuse => return None,
                    Admission::Later(at) => {
                        first = false;
                        let wait = at.micros_since(now()).min(10_000);
                        std::thread::sleep(Duration::from_micros(wait));
                        continue;
                    }
                }
            }
            if now().as_micros() > limits.header_max_micros {
                return None;
            }
            read_more(stream, pending)?;
        }
    }
    service.open(session, &ends.peer, ends.port, carry, now());
    let mut out = vec![0u8; WRITE_CHUNK];
    let mut input = vec![0u8; 16 * 1024];
    let mut progress = now();
    loop {
        // Hand pending input to the engine, sending what it produces.
        while !pending.is_empty() {
            let taken = service.receive(session, pending, now());
            pending.drain(..taken.min(pending.len()));
            if taken == 0 {
                break;
            }
            progress = now();
        }
        loop {
            if service.send_len(session) == 0 {
                break;
            }
            let n = service.readable(session, 0, out.len(), now());
            if n == 0 {
                break;
            }
            let copied = service.read_at(session, 0, &mut out[..n]);
            if stream.write_all(&out[..copied]).is_err() {
                service.close(session, Ending::Reset);
                return None;
            }
            service.acknowledge(session, copied, now());
            progress = now();
        }
        let waited = now().micros_since(progress);
        let phase = service.phase(session);
        let over = match phase {
            SessionPhase::Abort => Some(Ending::Reset),
            SessionPhase::Closing if service.send_len(session) == 0 => Some(Ending::Closed),
            SessionPhase::Idle if image.site.generation() != image.generation => {
                return Some(service.release(session));
            }
            SessionPhase::Idle if waited > limits.idle_micros => Some(Ending::Closed),
            SessionPhase::Receiving { .. } if waited > limits.header_max_micros => {
                Some(Ending::Reset)
            }
            SessionPhase::Sending if waited > limits.send_stall_micros => Some(Ending::Reset),
            _ => None,
        };
        if let Some(ending) = over {
            service.close(session, ending);
            let how = match ending {
                Ending::Closed => Shutdown::Write,
                Ending::Reset => Shutdown::Both,
            };
            let _ = stream.flush();
            let _ = stream.shutdown(how);
            return None;
        }
        if pending.len() >= MAX_PENDING {
            // The engine holds input back until a response drains; do not read more.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        if read_into(stream, &mut input, pending).is_none() {
            service.close(session, Ending::Closed);
            return None;
        }
    }
}

/// Reads what the peer sent into `pending`; `None` once it closed (or the socket failed).
fn read_more(stream: &mut TcpStream, pending: &mut Vec<u8>) -> Option<()> {
    let mut input = [0u8; 4096];
    read_into(stream, &mut input, pending)
}

/// [`read_more`] through `input`.
fn read_into(stream: &mut TcpStream, input: &mut [u8], pending: &mut Vec<u8>) -> Option<()> {
    match stream.read(input) {
        Ok(0) => None,
        Ok(n) => {
            pending.extend_from_slice(&input[..n]);
            Some(())
        }
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
            ) =>
        {
            Some(())
        }
        Err(_) => None,
    }
}
