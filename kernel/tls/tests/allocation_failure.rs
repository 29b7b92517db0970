//! Memory pressure in the TLS path closes a connection, never the board: with the heap
//! refusing allocations larger than a record, a client whose plaintext the application does
//! not take yet gets its session failed with `OutOfMemory` (the pool then closes it), where
//! `Vec::extend` would have called `handle_alloc_error`, a panic and so a reset on the Pi.
//! Also: however the peer sends, the plaintext waiting in a session stays under
//! `MAX_PENDING_LEN`.
//!
//! What stays infallible is rustls's own allocation of each record's plaintext (at most one
//! record, 16 KiB): the heap budget (`bramble_tls::heap`, checked by `tests/heap.rs`)
//! covers it for every connection at once.

use bramble_tls::random::RANDOM;
use bramble_tls::session::{MAX_PENDING_LEN, MAX_RECORD_LEN, Phase, SessionError};
use bramble_tls::{Application, Identity, SniPolicy, TlsSession};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, ClientConnection};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, refusing any allocation larger than a record's plaintext (and a
/// margin) while `SCARCE` is set on the allocating thread (the test harness runs tests on
/// threads of their own, so one test's scarcity never reaches another).
struct Scarce;

const LARGEST_GRANTED: usize = 20_000;
thread_local! {
    static SCARCE: Cell<bool> = const { Cell::new(false) };
}
static REFUSED: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code)] // a test global allocator: GlobalAlloc is an unsafe trait
// SAFETY: forwards to the system allocator, or returns null (allowed: allocation failure).
unsafe impl GlobalAlloc for Scarce {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LARGEST_GRANTED && SCARCE.with(Cell::get) {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > LARGEST_GRANTED && SCARCE.with(Cell::get) {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        // SAFETY: as above.
        unsafe { System.realloc(pointer, layout, new_size) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Scarce = Scarce;

/// Takes no plaintext at all.
struct Deaf;

impl Application for Deaf {
    fn receive(&mut self, _: &[u8]) -> usize {
        0
    }
    fn transmit(&mut self, _: &mut [u8]) -> usize {
        0
    }
}

/// Takes no plaintext, but always has a response to send (so sealing drains records).
struct Talker;

impl Application for Talker {
    fn receive(&mut self, _: &[u8]) -> usize {
        0
    }
    fn transmit(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(100);
        out[..n].fill(b'r');
        n
    }
}

const CA: &[u8] = include_bytes!("data/ca.pem");

fn client() -> ClientConnection {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(CA) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(bramble_tls::provider::provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    ClientConnection::new(
        Arc::new(config),
        ServerName::try_from("bramble.test").unwrap(),
    )
    .unwrap()
}

fn leak(len: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; len].into_boxed_slice())
}

/// A server session and a client, with the handshake done.
fn open_pair() -> (TlsSession<'static>, ClientConnection) {
    RANDOM.seed(&[5; 32]).unwrap();
    let identity = Identity::from_pem(
        include_bytes!("data/p256.pem"),
        include_bytes!("data/p256.key"),
    )
    .unwrap();
    let server = bramble_tls::server_config(identity, SniPolicy::AnyName).unwrap();
    let mut session = TlsSession::new(server, leak(MAX_RECORD_LEN), leak(8192)).unwrap();
    let mut client = client();
    for _ in 0..10 {
        let mut wire = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut wire).unwrap();
        }
        let mut at = 0;
        while at < wire.len() {
            let taken = session.receive(&mut Deaf, &wire[at..]).unwrap();
            assert!(taken > 0, "the handshake fits the receive buffer");
            at += taken;
        }
        let mut out = vec![0u8; 16 * 1024];
        let written = session.transmit(&mut Deaf, &mut out);
        let mut reader = &out[..written];
        while !reader.is_empty() {
            client.read_tls(&mut reader).unwrap();
            client.process_new_packets().unwrap();
        }
        if !client.is_handshaking() && session.phase() == Phase::Open {
            return (session, client);
        }
    }
    panic!("the handshake did not complete");
}

/// The client's records for `plaintext`, one buffer.
fn records(client: &mut ClientConnection, plaintext: &[u8]) -> Vec<u8> {
    client.writer().write_all(plaintext).unwrap();
    let mut wire = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut wire).unwrap();
    }
    wire
}

#[test]
fn a_refused_allocation_fails_the_session_instead_of_resetting() {
    let (mut session, mut client) = open_pair();
    // Two full records; the application takes nothing but has a response to seal, and
    // sealing must first drain the second record into the waiting plaintext (32 KB).
    let first = records(&mut client, &[b'x'; 16_000]);
    let second = records(&mut client, &[b'z'; 16_000]);
    assert_eq!(session.receive(&mut Talker, &first), Ok(first.len()));
    assert_eq!(session.receive(&mut Talker, &second), Ok(second.len()));
    SCARCE.with(|scarce| scarce.set(true));
    let mut out = vec![0u8; 4096];
    let _ = session.transmit(&mut Talker, &mut out);
    SCARCE.with(|scarce| scarce.set(false));
    assert!(REFUSED.load(Ordering::Relaxed) > 0, "the heap said no");
    assert_eq!(session.error(), Some(&SessionError::OutOfMemory));
    assert_eq!(session.phase(), Phase::Closed);
    assert_eq!(
        session.receive(&mut Talker, b"more"),
        Err(SessionError::OutOfMemory),
        "the session stays failed, for the pool to close"
    );
}

#[test]
fn waiting_plaintext_stays_bounded_however_the_peer_sends() {
    let (mut session, mut client) = open_pair();
    // Many full records while the application takes nothing and keeps sealing responses.
    let wire = records(&mut client, &vec![b'y'; 60_000]);
    let mut at = 0;
    let mut most = 0;
    for _ in 0..200 {
        match session.receive(&mut Talker, &wire[at..]) {
            Ok(taken) => at += taken,
            Err(error) => panic!("the session failed: {error}"),
        }
        let mut out = vec![0u8; 4096];
        let _ = session.transmit(&mut Talker, &mut out);
        most = most.max(session.pending_len());
        assert!(session.pending_len() <= MAX_PENDING_LEN);
    }
    assert!(most >= 16_000, "plaintext did wait ({most} bytes)");
    assert!(at < wire.len(), "the peer was held back by flow control");
}
