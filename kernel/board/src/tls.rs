//! HTTPS on the board: entropy from the hardware RNG, the TLS-only heap, the certificate
//! from the card, and the HTTPS pool's memory.
//!
//! The heap is talc over a region cut from the arena once, sized by `bramble_tls::heap` for
//! the HTTPS pool, so it cannot run out (an allocation failure would panic, and the panic
//! handler resets the board). Nothing else in the kernel allocates, but for the heartbeat's
//! TLS client, which claims a region of its own ([`claim_heap`]) after the pool's.

use crate::arena::Arena;
use crate::storage::TlsFiles;
use alloc::sync::Arc;
use bramble_net::appliance::HttpsMemory;
use bramble_net::appliance::secure::TlsConnection;
use bramble_settings::{HttpsMode, Settings, SniPolicy};
use bramble_tls::session::MAX_RECORD_LEN;
use bramble_tls::{Identity, ServerConfig};
use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

/// HTTPS connections at most (each about 90 KiB with its TCP buffers and heap share).
pub const MAX_HTTPS_CONNECTIONS: usize = 64;
/// Share of the arena the HTTPS pool may take.
const HTTPS_SHARE_DIVISOR: usize = 8;
/// TCP receive and transmit buffers per HTTPS connection (as for plain HTTP).
const TCP_RX_LEN: usize = 4 * 1024;
const TCP_TX_LEN: usize = 32 * 1024;

/// The TLS heap: talc, with what is in use and the most ever in use counted.
struct TlsHeap {
    talc: talc::Talck<spin::Mutex<()>, talc::ErrOnOom>,
    in_use: AtomicUsize,
    peak: AtomicUsize,
    size: AtomicUsize,
}

#[global_allocator]
static HEAP: TlsHeap = TlsHeap {
    talc: talc::Talc::new(talc::ErrOnOom).lock(),
    in_use: AtomicUsize::new(0),
    peak: AtomicUsize::new(0),
    size: AtomicUsize::new(0),
};

// SAFETY: forwards to talc, which upholds GlobalAlloc's contract; the counters are plain
// statistics.
unsafe impl GlobalAlloc for TlsHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        let pointer = unsafe { self.talc.alloc(layout) };
        if !pointer.is_null() {
            let now = self.in_use.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            self.peak.fetch_max(now, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { self.talc.dealloc(pointer, layout) };
        self.in_use.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

/// Adds `bytes` cut from `arena` to the TLS heap (a region of its own beside any the HTTPS
/// pool claimed): for the heartbeat's TLS client. `false` (logged by the caller) when the
/// arena has no room or the region is refused.
pub fn claim_heap(arena: &mut Arena, bytes: usize) -> bool {
    let Some(heap) = arena.zeroed_bytes(bytes) else {
        return false;
    };
    // SAFETY: the region was just cut from the arena for the heap alone and lives forever;
    // talc takes further disjoint regions at any time, beside one claimed before.
    let claimed = unsafe {
        let span = talc::Span::from_base_size(heap.as_mut_ptr(), heap.len());
        HEAP.talc.lock().claim(span).is_ok()
    };
    if claimed {
        HEAP.size.fetch_add(bytes, Ordering::Relaxed);
    }
    claimed
}

/// Heap bytes: in use now, the most in use at once, and the heap's size.
pub fn heap_usage() -> (usize, usize, usize) {
    (
        HEAP.in_use.load(Ordering::Relaxed),
        HEAP.peak.load(Ordering::Relaxed),
        HEAP.size.load(Ordering::Relaxed),
    )
}

struct IrqMask;
critical_section::set_impl!(IrqMask);

// SAFETY: one core; with IRQs masked nothing else runs, so the section is exclusive.
unsafe impl critical_section::Impl for IrqMask {
    unsafe fn acquire() -> critical_section::RawRestoreState {
        let was_enabled = bramble_boot::cpu::irq_enabled();
        bramble_boot::cpu::disable_irq();
        u32::from(was_enabled)
    }

    unsafe fn release(state: critical_section::RawRestoreState) {
        if state != 0 {
            // SAFETY: IRQs were enabled when the section began, and its end restores that.
            unsafe { bramble_boot::cpu::enable_irq() };
        }
    }
}

/// Everything the HTTPS pool needs, ready for `Appliance::start_https`.
pub struct Https {
    /// The rustls configuration (certificate, key, tickets).
    pub config: Arc<ServerConfig>,
    /// The certificate's key (what the handshake budget charges for its signatures).
    pub key: bramble_tls::hello::CertificateKey,
    /// The pool's connections and buffers.
    pub memory: &'static mut HttpsMemory<'static>,
    /// Sockets to keep back from the HTTP pool.
    pub sockets: usize,
    /// The port.
    pub port: u16,
}

static CERTIFICATE: spin::Once<Identity> = spin::Once::new();

/// The certificate being served, once HTTPS runs.
pub fn certificate() -> Option<&'static Identity> {
    CERTIFICATE.get()
}

/// Longest reason kept for the status line.
const REASON_LEN: usize = 240;

/// Why HTTPS is not running although the settings ask for it, for the status line.
static NOT_STARTED: spin::Once<heapless::String<REASON_LEN>> = spin::Once::new();

/// The `domain` names of BRAMBLE.TXT that the card's certificate does not cover (browsers
/// asking for them refuse HTTPS), for the status line and the diagnostic page.
static UNCOVERED: spin::Once<heapless::String<REASON_LEN>> = spin::Once::new();

/// Why HTTPS is not running although the settings ask for it, if it is not.
pub fn not_started_reason() -> Option<&'static str> {
    NOT_STARTED.get().map(|reason| reason.as_str())
}

/// The `domain` names the certificate does not cover, if any.
pub fn uncovered_names() -> Option<&'static str> {
    UNCOVERED.get().map(|names| names.as_str())
}

/// Reports on the console that HTTPS is not started and why, keeps the reason for the
/// status line, and returns `None` (plain HTTP goes on serving).
pub fn not_started(reason: core::fmt::Arguments<'_>) -> Option<Https> {
    let mut kept = heapless::String::<REASON_LEN>::new();
    // A reason longer than the buffer is cut short; the console line below is whole.
    let _ = core::fmt::write(&mut kept, reason);
    log::error!("tls: {reason}; HTTPS is not started, plain HTTP is served");
    NOT_STARTED.call_once(|| kept);
    None
}

/// Prepares HTTPS when the settings ask for it: seeds entropy, checks the certificate and
/// key, and cuts the heap and the pool's memory from `arena`. Every problem is reported on
/// the console and kept for the status line, and leaves plain HTTP serving (`None`).
pub fn prepare(settings: &Settings, files: Option<&TlsFiles>, arena: &mut Arena) -> Option<Https> {
    if settings.https == HttpsMode::Off {
        return None;
    }
    let Some(files) = files else {
        return not_started(format_args!("the card could not be read"));
    };
    let (certificate, key) = match (&files.certificate, &files.key) {
        (Ok(certificate), Ok(key)) => (*certificate, *key),
        (Err(problem), Ok(_)) => {
            return not_started(format_args!(
                "tls_certificate {}: {problem}",
                settings.tls_certificate
            ));
        }
        (Ok(_), Err(problem)) => {
            return not_started(format_args!("tls_key {}: {problem}", settings.tls_key));
        }
        (Err(certificate), Err(key)) => {
            return not_started(format_args!(
                "tls_certificate {}: {certificate}, tls_key {}: {key}",
                settings.tls_certificate, settings.tls_key
            ));
        }
    };
    // Seeded at boot from the health-tested hardware RNG (crate::entropy); never any
    // other source for keys.
    if let Some(problem) = crate::entropy::problem() {
        return not_started(format_args!("{problem}"));
    }
    if !bramble_tls::random::RANDOM.is_seeded() {
        return not_started(format_args!("the CSPRNG has no seed from the hardware RNG"));
    }
    // The certificate is parsed with the heap in place: rustls keeps it there.
    let per_connection = MAX_RECORD_LEN
        + TLS_TRANSMIT_LEN
        + TCP_RX_LEN
        + TCP_TX_LEN
        + core::mem::size_of::<TlsConnection<'static>>()
        + bramble_tls::heap::PER_CONNECTION_BYTES
        + bramble_h2::HEAP_BYTES_PER_CONNECTION;
    let pool =
        (arena.remaining() / HTTPS_SHARE_DIVISOR / per_connection).clamp(1, MAX_HTTPS_CONNECTIONS);
    // rustls's state, and an HTTP/2 session for each connection that may negotiate h2.
    let heap_bytes =
        bramble_tls::heap::heap_bytes(pool) + pool * bramble_h2::HEAP_BYTES_PER_CONNECTION;
    let Some(heap) = arena.zeroed_bytes(heap_bytes) else {
        return not_started(format_args!(
            "no memory left for the {heap_bytes}-byte TLS heap"
        ));
    };
    // SAFETY: the region was just cut from the arena for the heap alone, lives forever, and
    // is claimed once, before the first allocation (nothing allocates before HTTPS starts).
    unsafe {
        let span = talc::Span::from_base_size(heap.as_mut_ptr(), heap.len());
        if HEAP.talc.lock().claim(span).is_err() {
            return not_started(format_args!("the heap region was refused"));
        }
    }
    HEAP.size.store(heap_bytes, Ordering::Relaxed);
    let identity = match Identity::from_pem(certificate, key) {
        Ok(identity) => identity,
        Err(problem) => {
            return not_started(format_args!(
                "tls_certificate {} with tls_key {}: {problem}",
                settings.tls_certificate, settings.tls_key
            ));
        }
    };
    if identity.chain_len() + FLIGHT_OVERHEAD > TLS_TRANSMIT_LEN {
        return not_started(format_args!(
            "the certificate chain ({} bytes) does not fit the {TLS_TRANSMIT_LEN}-byte \
             handshake buffer",
            identity.chain_len()
        ));
    }
    let policy = match settings.sni {
        SniPolicy::Any => bramble_tls::SniPolicy::AnyName,
        SniPolicy::Certificate => bramble_tls::SniPolicy::CertificateNames,
    };
    let config = match bramble_tls::server_config(identity.clone(), policy) {
        Ok(config) => config,
        Err(error) => return not_started(format_args!("{error}")),
    };
    check_names(&identity, settings);
    let validity = identity.validity();
    log::info!(
        "tls: certificate valid from {} to {} (checked once the clock is set), {} bytes of \
         chain",
        Date(validity.not_before),
        Date(validity.not_after),
        identity.chain_len()
    );
    let Some(memory) = pool_memory(pool, arena) else {
        return not_started(format_args!("no memory left for {pool} HTTPS connections"));
    };
    CERTIFICATE.call_once(|| identity.clone());
    Some(Https {
        config,
        key: identity.certificate_key(),
        memory,
        sockets: pool,
        port: settings.https_port,
    })
}

/// Says on the console which of the `domain` names in the settings the certificate does not
/// cover, and keeps them for the status line and the diagnostic page. HTTPS is served anyway:
/// the certificate may cover the names that clients use, and a client decides.
fn check_names(identity: &Identity, settings: &Settings) {
    let mut uncovered = heapless::String::<REASON_LEN>::new();
    for name in settings
        .domains
        .iter()
        .filter(|name| !identity.covers(name.as_str()))
    {
        let separator = if uncovered.is_empty() { "" } else { ", " };
        // A list longer than the buffer is cut short; the console line below is whole.
        let _ = core::fmt::write(&mut uncovered, format_args!("{separator}{}", name.as_str()));
        log::error!(
            "tls: the certificate does not cover {} (domain in BRAMBLE.TXT): browsers asking              for it refuse HTTPS",
            name.as_str()
        );
    }
    if !uncovered.is_empty() {
        UNCOVERED.call_once(|| uncovered);
    }
}

/// What the 503 diagnostic page says about HTTPS, when something is wrong: why it is not
/// running, the `domain` names that the certificate does not cover, and, once the clock is
/// set (`unix_seconds`), that the certificate expired or is not valid yet. Empty when all is
/// well (or HTTPS is off).
pub fn notice(unix_seconds: Option<u64>) -> heapless::String<{ bramble_http::NOTICE_LEN }> {
    use core::fmt::Write;
    let mut text = heapless::String::new();
    // Cut short where it does not fit: the console has every line whole.
    if let Some(reason) = NOT_STARTED.get() {
        let _ = write!(
            text,
            "HTTPS is not running: {reason}; plain HTTP is served."
        );
    }
    if let Some(names) = UNCOVERED.get() {
        let separator = if text.is_empty() { "" } else { " " };
        let _ = write!(
            text,
            "{separator}The HTTPS certificate does not cover {names} (domain in BRAMBLE.TXT): \
             browsers asking for it refuse HTTPS."
        );
    }
    let validity = certificate().map(|identity| identity.validity());
    if let (Some(validity), Some(unix)) = (validity, unix_seconds) {
        let now = i64::try_from(unix).unwrap_or(i64::MAX);
        let separator = if text.is_empty() { "" } else { " " };
        if now > validity.not_after {
            let _ = write!(
                text,
                "{separator}The HTTPS certificate EXPIRED on {}: browsers refuse HTTPS until a \
                 new one is on the card; plain HTTP is served.",
                Date(validity.not_after)
            );
        } else if now < validity.not_before {
            let _ = write!(
                text,
                "{separator}The HTTPS certificate is NOT VALID YET (from {}): browsers refuse \
                 HTTPS until then; plain HTTP is served.",
                Date(validity.not_before)
            );
        }
    }
    text
}

/// The HTTPS pool's connections and buffers, cut from `arena`.
fn pool_memory(pool: usize, arena: &mut Arena) -> Option<&'static mut HttpsMemory<'static>> {
    let connections = arena.slice(pool, || {
        // Filled in below: a slot needs its two buffers.
        TlsConnection::new(&mut [], &mut [])
    })?;
    for connection in connections.iter_mut() {
        let incoming = arena.zeroed_bytes(MAX_RECORD_LEN)?;
        let outgoing = arena.zeroed_bytes(TLS_TRANSMIT_LEN)?;
        *connection = TlsConnection::new(incoming, outgoing);
    }
    let tcp_buffers = arena.zeroed_bytes(pool * (TCP_RX_LEN + TCP_TX_LEN))?;
    arena.value(HttpsMemory {
        connections,
        tcp_buffers,
        tcp_rx_len: TCP_RX_LEN,
        tcp_tx_len: TCP_TX_LEN,
    })
}

/// A Unix time (seconds) as an IMF-fixdate, or as the number where it is before 1970.
pub struct Date(pub i64);

impl core::fmt::Display for Date {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match u64::try_from(self.0) {
            Ok(seconds) => bramble_http::date::write_imf_fixdate(f, seconds),
            Err(_) => write!(f, "Unix time {}", self.0),
        }
    }
}

/// Checks the certificate being served against the clock, once it is first set, and says
/// on the console whether browsers will accept it.
pub fn check_certificate(unix_seconds: u64) {
    let Some(validity) = certificate().map(|identity| identity.validity()) else {
        return;
    };
    let now = i64::try_from(unix_seconds).unwrap_or(i64::MAX);
    if now > validity.not_after {
        log::error!(
            "tls: the certificate EXPIRED on {} ({} days ago): browsers will refuse HTTPS until \
             a new one is on the card; plain HTTP is served",
            Date(validity.not_after),
            (now - validity.not_after) / 86_400
        );
    } else if now < validity.not_before {
        log::error!(
            "tls: the certificate is NOT VALID YET (from {}, in {} days): browsers will refuse \
             HTTPS until then; plain HTTP is served",
            Date(validity.not_before),
            (validity.not_before - now) / 86_400
        );
    } else {
        log::info!(
            "tls: the certificate is valid until {} ({} days from now)",
            Date(validity.not_after),
            (validity.not_after - now) / 86_400
        );
    }
}

/// For ACME (`acme = on`): checks the entropy seeded at boot, claims the heap (the HTTPS pool's share and
/// `extra_heap` more) and cuts the HTTPS pool's memory from `arena`, for the certificate that
/// ACME obtains. Returns the memory and the pool's size; `None` (logged) if entropy or memory
/// is missing.
pub fn prepare_pool(
    arena: &mut Arena,
    extra_heap: usize,
) -> Option<(&'static mut HttpsMemory<'static>, usize)> {
    if let Some(problem) = crate::entropy::problem() {
        log::error!("acme: {problem}; ACME is not started (keys need the hardware RNG)");
        return None;
    }
    let per_connection = MAX_RECORD_LEN
        + TLS_TRANSMIT_LEN
        + TCP_RX_LEN
        + TCP_TX_LEN
        + core::mem::size_of::<TlsConnection<'static>>()
        + bramble_tls::heap::PER_CONNECTION_BYTES;
    let pool =
        (arena.remaining().saturating_sub(extra_heap) / HTTPS_SHARE_DIVISOR / per_connection)
            .clamp(1, MAX_HTTPS_CONNECTIONS);
    let heap_bytes = bramble_tls::heap::heap_bytes(pool) + extra_heap;
    let heap = arena.zeroed_bytes(heap_bytes)?;
    // SAFETY: the region was just cut from the arena for the heap alone, lives forever, and
    // is claimed once, before the first allocation (nothing allocates before ACME starts).
    unsafe {
        let span = talc::Span::from_base_size(heap.as_mut_ptr(), heap.len());
        if HEAP.talc.lock().claim(span).is_err() {
            log::error!("acme: the heap region was refused; ACME is not started");
            return None;
        }
    }
    HEAP.size.store(heap_bytes, Ordering::Relaxed);
    let memory = pool_memory(pool, arena)?;
    Some((memory, pool))
}

/// The handshake flight buffer per connection: the certificate chain plus the rest of the
/// server's first flight.
const TLS_TRANSMIT_LEN: usize = 12 * 1024;
/// The server's first flight besides the chain: ServerHello, EncryptedExtensions,
/// CertificateVerify, Finished, record framing, a ticket.
const FLIGHT_OVERHEAD: usize = 2 * 1024;
