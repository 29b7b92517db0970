//! rustls's unbuffered client, driven in memory against the server under test.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use rustls::client::{ClientSessionStore, Resumption, UnbufferedClientConnection};
use rustls::client::{Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::unbuffered::ConnectionState;
use rustls::{ClientConfig, HandshakeKind, NamedGroup, RootCertStore};

/// Which suites the client offers.
#[derive(Clone, Copy)]
pub enum Suites {
    Chacha13,
    Aes13,
    Chacha12,
}

/// The test CA as the only root.
pub fn roots(ca_pem: &[u8]) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert.unwrap()).unwrap();
    }
    roots
}

/// One resumption ticket, kept for the next connection.
#[derive(Debug, Default)]
struct OneTicket {
    tls13: spin::Mutex<Option<Tls13ClientSessionValue>>,
    tls12: spin::Mutex<Option<Tls12ClientSessionValue>>,
}

impl ClientSessionStore for OneTicket {
    fn set_kx_hint(&self, _: ServerName<'static>, _: NamedGroup) {}
    fn kx_hint(&self, _: &ServerName<'_>) -> Option<NamedGroup> {
        None
    }
    fn set_tls12_session(&self, _: ServerName<'static>, value: Tls12ClientSessionValue) {
        *self.tls12.lock() = Some(value);
    }
    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.tls12.lock().clone()
    }
    fn remove_tls12_session(&self, _: &ServerName<'static>) {
        *self.tls12.lock() = None;
    }
    fn insert_tls13_ticket(&self, _: ServerName<'static>, value: Tls13ClientSessionValue) {
        *self.tls13.lock() = Some(value);
    }
    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        self.tls13.lock().take()
    }
}

/// A client configuration offering `suites`, with X25519 (or P-256 only).
pub fn config(roots: &RootCertStore, suites: Suites, p256_only: bool) -> Arc<ClientConfig> {
    let mut provider = bramble_tls::provider::provider();
    let (suite, version) = match suites {
        Suites::Chacha13 => (
            bramble_tls::provider::TLS13_CHACHA20_POLY1305_SHA256,
            &rustls::version::TLS13,
        ),
        Suites::Aes13 => (
            bramble_tls::provider::TLS13_AES_128_GCM_SHA256,
            &rustls::version::TLS13,
        ),
        Suites::Chacha12 => (
            bramble_tls::provider::TLS12_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            &rustls::version::TLS12,
        ),
    };
    provider.cipher_suites = vec![suite];
    if p256_only {
        provider.kx_groups.remove(0);
    }
    let mut config = ClientConfig::builder_with_details(
        Arc::new(provider),
        Arc::new(bramble_tls::clock::ClockRef(&FIXED_TIME)),
    )
    .with_protocol_versions(&[version])
    .unwrap()
    .with_root_certificates(roots.clone())
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = Resumption::store(Arc::new(OneTicket::default()));
    Arc::new(config)
}

/// The client checks certificates against a fixed date inside their validity (2027-06-01).
static FIXED_TIME: bramble_tls::clock::WallClock = bramble_tls::clock::WallClock::new();

/// Sets the client's clock (call once at start).
pub fn set_time() {
    FIXED_TIME.set(1_811_808_000_000_000, 0);
}

/// One client connection and its buffers.
pub struct Client {
    connection: UnbufferedClientConnection,
    incoming: Vec<u8>,
    incoming_len: usize,
    outgoing: Vec<u8>,
    /// Plaintext received from the server.
    pub received: Vec<u8>,
    open: bool,
}

impl Client {
    /// A client for `bramble.test`.
    pub fn new(config: Arc<ClientConfig>) -> Self {
        Self {
            connection: UnbufferedClientConnection::new(
                config,
                ServerName::try_from("bramble.test").unwrap(),
            )
            .unwrap(),
            incoming: vec![0; 64 * 1024],
            incoming_len: 0,
            outgoing: Vec::new(),
            received: Vec::new(),
            open: false,
        }
    }

    /// Whether the handshake is done.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Full or resumed.
    pub fn handshake_kind(&self) -> Option<HandshakeKind> {
        self.connection.handshake_kind()
    }

    /// Bytes for the server.
    pub fn take_outgoing(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.outgoing)
    }

    /// Bytes from the server; processes them.
    pub fn deliver(&mut self, bytes: &[u8]) {
        self.incoming[self.incoming_len..self.incoming_len + bytes.len()].copy_from_slice(bytes);
        self.incoming_len += bytes.len();
        self.step();
    }

    /// Runs the client until it waits for the server.
    pub fn step(&mut self) {
        let mut buffer = vec![0u8; 16 * 1024];
        for _ in 0..100 {
            let status = self
                .connection
                .process_tls_records(&mut self.incoming[..self.incoming_len]);
            let discard = status.discard;
            let go_on = match status.state.expect("the client accepts the server") {
                ConnectionState::ReadTraffic(mut traffic) => {
                    while let Some(record) = traffic.next_record() {
                        self.received.extend_from_slice(record.unwrap().payload);
                    }
                    true
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    let written = encode.encode(&mut buffer).unwrap();
                    self.outgoing.extend_from_slice(&buffer[..written]);
                    true
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    true
                }
                ConnectionState::WriteTraffic(_) => {
                    self.open = true;
                    false
                }
                _ => false,
            };
            self.incoming.copy_within(discard..self.incoming_len, 0);
            self.incoming_len -= discard;
            if !go_on {
                return;
            }
        }
    }

    /// Sends application data.
    pub fn send(&mut self, data: &[u8]) {
        let mut buffer = vec![0u8; data.len() + 64];
        let status = self
            .connection
            .process_tls_records(&mut self.incoming[..self.incoming_len]);
        let discard = status.discard;
        if let Ok(ConnectionState::WriteTraffic(mut traffic)) = status.state {
            let written = traffic.encrypt(data, &mut buffer).unwrap();
            self.outgoing.extend_from_slice(&buffer[..written]);
        }
        self.incoming.copy_within(discard..self.incoming_len, 0);
        self.incoming_len -= discard;
    }
}
