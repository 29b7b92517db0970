//! Floods the server with handshakes (many at once, all mid-handshake together, with large
//! padded ClientHellos, in both versions, resumed and not, with applications that hold back
//! plaintext) under a counting allocator, and checks that the heap's high-water mark stays
//! under the budget `bramble_tls::heap` gives the board.

use bramble_tls::random::RANDOM;
use bramble_tls::session::MAX_RECORD_LEN;
use bramble_tls::{Application, Identity, SniPolicy, TlsSession};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, ClientConnection};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

/// Counts what the server side allocates: only while this thread is inside a server call.
struct Counting;

static SERVER_BYTES: AtomicIsize = AtomicIsize::new(0);
static SERVER_PEAK: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    static IN_SERVER: Cell<bool> = const { Cell::new(false) };
}

#[allow(unsafe_code)] // a counting global allocator: GlobalAlloc is an unsafe trait
// SAFETY: forwards to the system allocator; the counters are statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() && IN_SERVER.with(Cell::get) {
            let size = layout.size() as isize;
            let now = SERVER_BYTES.fetch_add(size, Ordering::Relaxed) + size;
            SERVER_PEAK.fetch_max(now, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        if IN_SERVER.with(Cell::get) {
            SERVER_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn as_server<R>(f: impl FnOnce() -> R) -> R {
    IN_SERVER.with(|flag| flag.set(true));
    let result = f();
    IN_SERVER.with(|flag| flag.set(false));
    result
}

/// Takes nothing until told to, then everything.
struct Stingy {
    open: bool,
}

impl Application for Stingy {
    fn receive(&mut self, data: &[u8]) -> usize {
        if self.open { data.len() } else { 0 }
    }
    fn transmit(&mut self, _: &mut [u8]) -> usize {
        0
    }
}

const CA: &[u8] = include_bytes!("data/ca.pem");

fn client(version: &'static rustls::SupportedProtocolVersion) -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(CA) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(bramble_tls::provider::provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Grows a ClientHello record by a padding extension (RFC 7685) of `extra` bytes, fixing
/// the record, handshake and extensions lengths; the record stays one record.
fn pad_client_hello(record: &[u8], extra: usize) -> Vec<u8> {
    assert_eq!(record[0], 22, "a handshake record");
    let body = &record[5..];
    assert_eq!(body[0], 1, "a ClientHello");
    let mut at = 4 + 2 + 32; // header, version, random
    at += 1 + body[at] as usize; // session id
    at += 2 + u16::from_be_bytes([body[at], body[at + 1]]) as usize; // suites
    at += 1 + body[at] as usize; // compression
    let extensions_at = at;
    let extensions_len = u16::from_be_bytes([body[at], body[at + 1]]) as usize;
    let mut hello = body.to_vec();
    // Insert the padding before the last extension if it is pre_shared_key (which must stay
    // last); otherwise append it. Our clients here send no PSK on the padded connection.
    hello.extend_from_slice(&21u16.to_be_bytes());
    hello.extend_from_slice(&(extra as u16).to_be_bytes());
    hello.extend(std::iter::repeat_n(0u8, extra));
    let added = 4 + extra;
    let new_ext = (extensions_len + added) as u16;
    hello[extensions_at..extensions_at + 2].copy_from_slice(&new_ext.to_be_bytes());
    let hs_len = (hello.len() - 4) as u32;
    hello[1..4].copy_from_slice(&hs_len.to_be_bytes()[1..]);
    let mut out = vec![22, record[1], record[2]];
    out.extend_from_slice(&(hello.len() as u16).to_be_bytes());
    out.extend_from_slice(&hello);
    out
}

struct Flight {
    client: ClientConnection,
    session: TlsSession<'static>,
    app: Stingy,
    wire: Vec<u8>,
    /// Pad this connection's ClientHello: the client's transcript then differs from the
    /// server's, so its handshake fails after the server has done all of its work.
    pad: bool,
    padded: bool,
}

fn leak(len: usize) -> &'static mut [u8] {
    Box::leak(vec![0u8; len].into_boxed_slice())
}

/// The tests of this file one at a time: they share the allocator's counts.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_handshake_flood_stays_under_the_heap_budget() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    RANDOM.seed(&[9; 32]).unwrap();
    let identity = Identity::from_pem(
        include_bytes!("data/p256.pem"),
        include_bytes!("data/p256.key"),
    )
    .unwrap();
    let server = bramble_tls::server_config(identity, SniPolicy::AnyName).unwrap();
    let configs = [
        client(&rustls::version::TLS13),
        client(&rustls::version::TLS12),
    ];
    const AT_ONCE: usize = 48;
    const ROUNDS: usize = 3;
    let mut peak_per_round = Vec::new();
    for round in 0..ROUNDS {
        SERVER_BYTES.store(0, Ordering::Relaxed);
        SERVER_PEAK.store(0, Ordering::Relaxed);
        let mut flights: Vec<Flight> = (0..AT_ONCE)
            .map(|index| {
                let config = &configs[index % 2];
                // The buffers come from the pool, not the heap.
                let (incoming, outgoing) = (leak(MAX_RECORD_LEN), leak(8192));
                let session =
                    as_server(|| TlsSession::new(server.clone(), incoming, outgoing).unwrap());
                Flight {
                    client: ClientConnection::new(
                        config.clone(),
                        ServerName::try_from("bramble.test").unwrap(),
                    )
                    .unwrap(),
                    session,
                    app: Stingy { open: false },
                    wire: Vec::new(),
                    pad: index % 3 == 0 && round == 0,
                    padded: false,
                }
            })
            .collect();
        // Step every connection once per pass, so all of them are mid-handshake together.
        for _ in 0..12 {
            for flight in &mut flights {
                while flight.client.wants_write() {
                    flight.client.write_tls(&mut flight.wire).unwrap();
                }
                if flight.pad && !flight.padded && !flight.wire.is_empty() {
                    let len = 5 + u16::from_be_bytes([flight.wire[3], flight.wire[4]]) as usize;
                    let padded = pad_client_hello(&flight.wire[..len], 12_000);
                    flight.wire.splice(..len, padded);
                    flight.padded = true;
                }
                let Flight {
                    client,
                    session,
                    app,
                    wire,
                    pad,
                    ..
                } = flight;
                as_server(|| {
                    if !wire.is_empty()
                        && let Ok(taken) = session.receive(app, wire)
                    {
                        wire.drain(..taken);
                    }
                });
                let mut out = vec![0u8; 16 * 1024];
                let written = as_server(|| session.transmit(app, &mut out));
                let mut reader = &out[..written];
                while !reader.is_empty() {
                    client.read_tls(&mut reader).unwrap();
                    let accepted = client.process_new_packets();
                    if !*pad {
                        accepted.expect("the client accepts the server");
                    } else if accepted.is_err() {
                        break;
                    }
                }
            }
        }
        println!(
            "round {round}: after the handshakes {} B held, peak {} B",
            SERVER_BYTES.load(Ordering::Relaxed),
            SERVER_PEAK.load(Ordering::Relaxed)
        );
        // Every connection is open; now each client sends a full record the application
        // will not take yet (plaintext waits inside the session).
        for flight in flights.iter_mut().filter(|flight| !flight.pad) {
            assert!(
                !flight.client.is_handshaking(),
                "round {round}: handshake completed"
            );
            flight
                .client
                .writer()
                .write_all(&vec![b'x'; 16_000])
                .unwrap();
            flight.wire.clear();
            while flight.client.wants_write() {
                flight.client.write_tls(&mut flight.wire).unwrap();
            }
            let Flight {
                session, app, wire, ..
            } = flight;
            as_server(|| {
                while !wire.is_empty() {
                    match session.receive(app, wire) {
                        Ok(0) | Err(_) => break,
                        Ok(taken) => drop(wire.drain(..taken)),
                    }
                }
            });
        }
        println!(
            "round {round}: with a record waiting in each {} B held, peak {} B",
            SERVER_BYTES.load(Ordering::Relaxed),
            SERVER_PEAK.load(Ordering::Relaxed)
        );
        for flight in flights.iter_mut().filter(|flight| !flight.pad) {
            flight.app.open = true;
            let Flight { session, app, .. } = flight;
            as_server(|| session.poll(app).unwrap());
            let mut sink = [0u8; 64];
            let _ = flight.client.reader().read(&mut sink);
        }
        peak_per_round.push(SERVER_PEAK.load(Ordering::Relaxed).max(0) as usize);
        as_server(|| drop(flights));
    }
    let peak = *peak_per_round.iter().max().unwrap();
    let budget = bramble_tls::heap::heap_bytes(AT_ONCE);
    println!(
        "heap high-water for {AT_ONCE} connections: {peak_per_round:?} B (per connection {} B), \
         budget {budget} B",
        peak / AT_ONCE
    );
    assert!(
        peak < budget,
        "high-water {peak} B over the budget {budget} B"
    );
    assert!(
        peak / AT_ONCE < bramble_tls::heap::PER_CONNECTION_BYTES,
        "per-connection figure under its constant"
    );
}

/// Echoes what it receives, once.
#[derive(Default)]
struct Echo {
    waiting: Vec<u8>,
}

impl Application for Echo {
    fn receive(&mut self, data: &[u8]) -> usize {
        self.waiting.extend_from_slice(data);
        data.len()
    }
    fn transmit(&mut self, out: &mut [u8]) -> usize {
        let n = self.waiting.len().min(out.len());
        out[..n].copy_from_slice(&self.waiting[..n]);
        self.waiting.drain(..n);
        n
    }
}

/// Moves the queued ciphertext of `session` to `client`, acknowledging it.
fn deliver(session: &mut TlsSession<'_>, client: &mut ClientConnection) {
    let mut out = vec![0u8; session.queued()];
    let n = session.read_queued(0, &mut out);
    as_server(|| session.acknowledge(n));
    let mut reader = &out[..n];
    while !reader.is_empty() {
        client.read_tls(&mut reader).unwrap();
        client.process_new_packets().unwrap();
    }
}

#[test]
fn a_suspended_session_keeps_only_its_keys() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    RANDOM.seed(&[7; 32]).unwrap();
    let identity = Identity::from_pem(
        include_bytes!("data/p256.pem"),
        include_bytes!("data/p256.key"),
    )
    .unwrap();
    let server = bramble_tls::server_config(identity, SniPolicy::AnyName).unwrap();
    let configs = [
        client(&rustls::version::TLS13),
        client(&rustls::version::TLS12),
    ];
    const SESSIONS: usize = 32;
    SERVER_BYTES.store(0, Ordering::Relaxed);
    let mut scratch = vec![0u8; 16 * 1024];
    // One pair of buffers, lent to one session at a time, as the pool's slots are.
    let mut buffers = Some((leak(MAX_RECORD_LEN), leak(24 * 1024)));
    let mut kept = Vec::new();
    for index in 0..SESSIONS {
        let mut client = ClientConnection::new(
            configs[index % 2].clone(),
            ServerName::try_from("bramble.test").unwrap(),
        )
        .unwrap();
        let (incoming, outgoing) = buffers.take().unwrap();
        let mut session =
            as_server(|| TlsSession::new(server.clone(), incoming, outgoing).unwrap());
        let mut app = Echo::default();
        client.writer().write_all(b"ping").unwrap();
        for _ in 0..8 {
            let mut wire = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut wire).unwrap();
            }
            if !wire.is_empty() {
                let taken = as_server(|| session.receive(&mut app, &wire).unwrap());
                assert_eq!(taken, wire.len());
            }
            as_server(|| session.fill(&mut app, &mut scratch, 1024));
            deliver(&mut session, &mut client);
        }
        let mut echoed = [0u8; 4];
        client.reader().read_exact(&mut echoed).unwrap();
        assert_eq!(
            &echoed, b"ping",
            "session {index}: answered through the queue"
        );
        assert!(session.is_quiet(), "session {index}: nothing left");
        let (suspended, incoming, outgoing) = as_server(|| session.suspend().ok()).unwrap();
        buffers = Some((incoming, outgoing));
        kept.push((suspended, client));
    }
    let held = SERVER_BYTES.load(Ordering::Relaxed).max(0) as usize;
    println!(
        "{SESSIONS} suspended sessions: {held} B of heap ({} B each), {} B of state each",
        held / SESSIONS,
        std::mem::size_of::<bramble_tls::session::Suspended>()
    );
    assert!(
        held / SESSIONS <= bramble_tls::heap::PER_IDLE_BYTES,
        "a suspended session holds {} B of heap",
        held / SESSIONS
    );
    // Each resumes where it stopped, in a slot's buffers again.
    for (index, (suspended, mut client)) in kept.into_iter().enumerate() {
        let (incoming, outgoing) = buffers.take().unwrap();
        let mut session = TlsSession::resume(suspended, incoming, outgoing);
        let mut app = Echo::default();
        client.writer().write_all(b"again").unwrap();
        let mut wire = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut wire).unwrap();
        }
        as_server(|| session.receive(&mut app, &wire).unwrap());
        as_server(|| session.fill(&mut app, &mut scratch, 1024));
        deliver(&mut session, &mut client);
        let mut echoed = [0u8; 5];
        client.reader().read_exact(&mut echoed).unwrap();
        assert_eq!(&echoed, b"again", "session {index} resumed");
        let (_, incoming, outgoing) = as_server(|| session.suspend().ok()).unwrap();
        buffers = Some((incoming, outgoing));
    }
}
