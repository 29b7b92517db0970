//! HTTPS on the board: entropy from the hardware RNG, the TLS-only heap, the certificate
//! from the card, and the HTTPS pool's memory.
//!
//! The HTTPS pool is a stream pool of its own (`bramble_stream::services::tls`): a control block
//! per connection, a TLS session slot (record buffers) per connection served at once, and
//! per idle connection only its suspended TLS state. The heap is talc over a region cut from
//! the arena once, sized by `bramble_tls::heap` for every slot's active session and every
//! connection's suspended one, so it cannot run out (an allocation failure would panic, and
//! the panic handler resets the board). Nothing else in the kernel allocates, but for the
//! heartbeat's TLS client, which claims a region of its own ([`claim_heap`]) after the pool's.

use crate::arena::Arena;
use crate::storage::TlsFiles;
use alloc::sync::Arc;
use bramble_net::appliance::{HttpsMemory, PoolSizes};
use bramble_settings::{HttpsMode, Settings, SniPolicy};
use bramble_stream::services::tls::{Carried, FLIGHT_OVERHEAD, QUEUE_LEN, SCRATCH_LEN, TlsSlot};
use bramble_stream::{Cell, Lease, PoolMemory, Source, Tcb};
use bramble_tls::session::MAX_RECORD_LEN;
use bramble_tls::{Identity, ServerConfig};
use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

/// The HTTPS pool at full size: 4,096 connections open at once (a control block, a hash
/// bucket and a suspended session each: about 2.6 KiB with its heap), 32 served at once (a
/// session slot of about 51 KiB and 40 KiB of heap each), 1,024 cells of 2 KiB for
/// ClientHellos: about 15.5 MiB. A smaller arena share gets a proportionally smaller pool.
/// (With 256 cells, 1,000 visitors arriving at once over TAP left 744 hellos unacknowledged
/// until their connections met the first-byte limit: 286 of 1,000 were served.)
const FULL_HTTPS: PoolSizes = PoolSizes {
    connections: 4 * 1024,
    sessions: 32,
    cells: 1024,
    sources: 0,
};
/// The smallest HTTPS pool worth starting.
const MIN_HTTPS_SESSIONS: usize = 2;
/// Share of the arena the HTTPS pool may take.
const HTTPS_SHARE_DIVISOR: usize = 8;

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
    let per_address = settings.connections_per_address.is_some();
    let sizes = https_sizes(arena.remaining() / HTTPS_SHARE_DIVISOR, per_address);
    let heap_bytes = heap_bytes(&sizes);
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
    if identity.chain_len() + FLIGHT_OVERHEAD > QUEUE_LEN {
        return not_started(format_args!(
            "the certificate chain ({} bytes) does not fit the {QUEUE_LEN}-byte \
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
    let Some(memory) = pool_memory(&sizes, arena) else {
        return not_started(format_args!(
            "no memory left for {} HTTPS connections",
            sizes.connections
        ));
    };
    log_sizes(&sizes);
    CERTIFICATE.call_once(|| identity.clone());
    Some(Https {
        config,
        key: identity.certificate_key(),
        memory,
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

/// [`FULL_HTTPS`], or a pool scaled down so that it and its heap fit `budget` bytes; with
/// `per_address`, a count table for the per-address cap too.
fn https_sizes(budget: usize, per_address: bool) -> PoolSizes {
    let mut sizes = FULL_HTTPS;
    if per_address {
        sizes.sources = 2 * sizes.connections;
    }
    while https_bytes(&sizes) > budget && sizes.sessions > MIN_HTTPS_SESSIONS {
        sizes.connections /= 2;
        sizes.cells /= 2;
        sizes.sessions /= 2;
        sizes.sources /= 2;
    }
    sizes
}

/// The TLS heap for `sizes`: every slot's active session and every connection's suspended
/// one at once, and an HTTP/2 session per slot.
fn heap_bytes(sizes: &PoolSizes) -> usize {
    // An HTTP/2 connection's session lives on the heap while it holds a slot; idle, it
    // gives the slot and the session back and keeps a compact state, bounded together by
    // the TLS service to PARKED_BYTES_PER_CONNECTION a connection (plus the allocator's
    // overhead for each, counted at 16 bytes).
    bramble_tls::heap::heap_bytes(sizes.sessions)
        + sizes.sessions * bramble_h2::HEAP_BYTES_PER_CONNECTION
        + sizes.connections * bramble_tls::heap::PER_IDLE_BYTES
        + sizes.connections * (bramble_h2::PARKED_BYTES_PER_CONNECTION + 16)
        + bramble_h2::MAX_PARKED_LEN
}

/// Says what the HTTPS pool holds and what a connection costs it: idle (a control block, a
/// hash bucket, a suspended-session entry, and the heap such a session may hold) and while
/// bytes flow (a session slot with its buffers and its heap share, on top).
fn log_sizes(sizes: &PoolSizes) {
    let idle = core::mem::size_of::<Tcb>()
        + core::mem::size_of::<u32>()
        + core::mem::size_of::<Carried>()
        + bramble_tls::heap::PER_IDLE_BYTES;
    let active = core::mem::size_of::<Lease<TlsSlot<'static>>>()
        + MAX_RECORD_LEN
        + QUEUE_LEN
        + bramble_tls::heap::PER_CONNECTION_BYTES;
    log::info!(
        "tls: {} HTTPS connections ({idle} B each while idle), {} served at once ({active} B \
         more each), {} KiB with the heap",
        sizes.connections,
        sizes.sessions,
        https_bytes(sizes) / 1024
    );
}

/// RAM an HTTPS pool of `sizes` takes, its heap included.
fn https_bytes(sizes: &PoolSizes) -> usize {
    let slot = core::mem::size_of::<Lease<TlsSlot<'static>>>() + MAX_RECORD_LEN + QUEUE_LEN;
    sizes.connections
        * (core::mem::size_of::<Tcb>()
            + core::mem::size_of::<u32>()
            + core::mem::size_of::<Carried>())
        + sizes.sessions * slot
        + sizes.cells
            * core::mem::size_of::<Cell<{ bramble_stream::services::tls::TLS_CELL_LEN }>>()
        + sizes.sources * core::mem::size_of::<Source>()
        + SCRATCH_LEN
        + heap_bytes(sizes)
}

/// The HTTPS pool's memory for `sizes`, cut from `arena`.
fn pool_memory(sizes: &PoolSizes, arena: &mut Arena) -> Option<&'static mut HttpsMemory<'static>> {
    let leases = arena.slice(sizes.sessions, || {
        // Filled in below: a slot needs its two buffers.
        Lease::new(TlsSlot::new(&mut [], &mut []))
    })?;
    for lease in leases.iter_mut() {
        let incoming = arena.zeroed_bytes(MAX_RECORD_LEN)?;
        let outgoing = arena.zeroed_bytes(QUEUE_LEN)?;
        *lease = Lease::new(TlsSlot::new(incoming, outgoing));
    }
    let pool = PoolMemory {
        tcbs: arena.slice(sizes.connections, || Tcb::EMPTY)?,
        buckets: arena.slice(sizes.buckets(), || 0u32)?,
        leases,
        cells: arena.slice(sizes.cells, Cell::new)?,
        sources: arena.slice(sizes.sources, || Source::EMPTY)?,
    };
    let carried = arena.slice(sizes.connections, Carried::new)?;
    let scratch = arena.zeroed_bytes(SCRATCH_LEN)?;
    arena.value(HttpsMemory {
        pool,
        carried,
        scratch,
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

/// For ACME (`acme = on`): checks the entropy seeded at boot, claims the heap (the HTTPS
/// pool's share and `extra_heap` more) and cuts the HTTPS pool's memory from `arena`, for the
/// certificate that ACME obtains. Returns the memory; `None` (logged) if entropy or memory is
/// missing.
pub fn prepare_pool(
    arena: &mut Arena,
    extra_heap: usize,
    per_address: bool,
) -> Option<&'static mut HttpsMemory<'static>> {
    if let Some(problem) = crate::entropy::problem() {
        log::error!("acme: {problem}; ACME is not started (keys need the hardware RNG)");
        return None;
    }
    let sizes = https_sizes(
        arena.remaining().saturating_sub(extra_heap) / HTTPS_SHARE_DIVISOR,
        per_address,
    );
    let heap_bytes = heap_bytes(&sizes) + extra_heap;
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
    log_sizes(&sizes);
    pool_memory(&sizes, arena)
}
