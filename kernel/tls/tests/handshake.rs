//! The server session against rustls's own client, in memory: full and resumed handshakes in
//! TLS 1.3 and 1.2, ALPN, the SNI policy, both key types, every suite, back-pressure, and
//! large transfers through small buffers.

use bramble_tls::provider::{self, verify};
use bramble_tls::random::RANDOM;
use bramble_tls::session::MAX_RECORD_LEN;
use bramble_tls::{Application, Identity, IdentityError, Phase, SniPolicy, TlsSession};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use rustls::{CipherSuite, ClientConfig, ClientConnection, HandshakeKind, ProtocolVersion};
use std::io::{Read, Write};
use std::sync::Arc;

const CA: &[u8] = include_bytes!("data/ca.pem");
const P256_CERT: &[u8] = include_bytes!("data/p256.pem");
const P256_SEC1: &[u8] = include_bytes!("data/p256.key");
const P256_PKCS8: &[u8] = include_bytes!("data/p256.pk8");
const ED25519_CERT: &[u8] = include_bytes!("data/ed25519.pem");
const ED25519_KEY: &[u8] = include_bytes!("data/ed25519.key");
const EXPIRED_CERT: &[u8] = include_bytes!("data/expired.pem");
const OTHER_KEY: &[u8] = include_bytes!("data/other.key");

fn seed() {
    RANDOM.seed(&[0x42; 32]).unwrap();
}

/// Echoes what it receives, upper-cased, and can be told to send a large body; optionally
/// takes at most `take` bytes per call.
#[derive(Default)]
struct Echo {
    received: Vec<u8>,
    to_send: Vec<u8>,
    take: Option<usize>,
}

impl Application for Echo {
    fn receive(&mut self, data: &[u8]) -> usize {
        let count = self.take.map_or(data.len(), |take| take.min(data.len()));
        self.received.extend_from_slice(&data[..count]);
        self.to_send
            .extend(data[..count].iter().map(|byte| byte.to_ascii_uppercase()));
        count
    }

    fn transmit(&mut self, out: &mut [u8]) -> usize {
        let count = out.len().min(self.to_send.len());
        out[..count].copy_from_slice(&self.to_send[..count]);
        self.to_send.drain(..count);
        count
    }
}

fn client_config(versions: &[&'static rustls::SupportedProtocolVersion]) -> ClientConfig {
    seed();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(CA) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider::provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let _ = verify::ALGORITHMS;
    config
}

fn tls13() -> ClientConfig {
    client_config(&[&rustls::version::TLS13])
}

fn tls12() -> ClientConfig {
    client_config(&[&rustls::version::TLS12])
}

struct Pair {
    client: ClientConnection,
    incoming: Vec<u8>,
    outgoing: Vec<u8>,
    out_chunk: usize,
    /// Client bytes the session has not taken yet.
    wire: Vec<u8>,
}

impl Pair {
    fn new(client: &Arc<ClientConfig>, name: &str) -> Self {
        Self {
            client: ClientConnection::new(
                client.clone(),
                ServerName::try_from(name.to_string()).unwrap(),
            )
            .unwrap(),
            incoming: vec![0; MAX_RECORD_LEN],
            outgoing: vec![0; 8192],
            out_chunk: 4096,
            wire: Vec::new(),
        }
    }
}

/// Moves bytes both ways until neither side has anything to say; returns the client's error.
fn pump(
    pair: &mut Pair,
    session: &mut TlsSession<'_>,
    app: &mut Echo,
    client_received: &mut Vec<u8>,
) -> Result<(), rustls::Error> {
    for _ in 0..10_000 {
        let mut progress = false;
        while pair.client.wants_write() {
            pair.client.write_tls(&mut pair.wire).unwrap();
        }
        while !pair.wire.is_empty() {
            match session.receive(app, &pair.wire) {
                Ok(0) => break,
                Ok(taken) => {
                    pair.wire.drain(..taken);
                    progress = true;
                }
                Err(_) => {
                    pair.wire.clear();
                    break;
                }
            }
        }
        let _ = session.poll(app);
        let mut chunk = vec![0u8; pair.out_chunk];
        loop {
            let written = session.transmit(app, &mut chunk);
            if written == 0 {
                break;
            }
            progress = true;
            let mut reader = &chunk[..written];
            while !reader.is_empty() {
                pair.client.read_tls(&mut reader).unwrap();
                pair.client.process_new_packets()?;
                drain_client(pair, client_received);
            }
        }
        if !progress && !pair.client.wants_write() {
            return Ok(());
        }
    }
    panic!("the exchange did not settle");
}

/// Reads whatever plaintext the client has.
fn drain_client(pair: &mut Pair, client_received: &mut Vec<u8>) {
    let mut plain = [0u8; 4096];
    while let Ok(count) = pair.client.reader().read(&mut plain) {
        if count == 0 {
            break;
        }
        client_received.extend_from_slice(&plain[..count]);
    }
}

struct Outcome {
    version: Option<ProtocolVersion>,
    suite: Option<CipherSuite>,
    kind: Option<HandshakeKind>,
    alpn: Option<Vec<u8>>,
    echoed: Vec<u8>,
    server_received: Vec<u8>,
    server_resumed: bool,
}

fn exchange(
    client: &Arc<ClientConfig>,
    server: Arc<rustls::ServerConfig>,
    name: &str,
    message: &[u8],
) -> Result<Outcome, rustls::Error> {
    let mut pair = Pair::new(client, name);
    let (mut incoming, mut outgoing) = (
        std::mem::take(&mut pair.incoming),
        std::mem::take(&mut pair.outgoing),
    );
    let mut session = TlsSession::new(server, &mut incoming, &mut outgoing).unwrap();
    let mut app = Echo::default();
    let mut echoed = Vec::new();
    pump(&mut pair, &mut session, &mut app, &mut echoed)?;
    assert_eq!(session.phase(), Phase::Open);
    pair.client.writer().write_all(message).unwrap();
    pump(&mut pair, &mut session, &mut app, &mut echoed)?;
    Ok(Outcome {
        version: pair.client.protocol_version(),
        suite: pair
            .client
            .negotiated_cipher_suite()
            .map(|suite| suite.suite()),
        kind: pair.client.handshake_kind(),
        alpn: pair.client.alpn_protocol().map(<[u8]>::to_vec),
        echoed,
        server_received: app.received,
        server_resumed: session.is_resumed(),
    })
}

fn p256_server(policy: SniPolicy) -> Arc<rustls::ServerConfig> {
    seed();
    let identity = Identity::from_pem(P256_CERT, P256_SEC1).unwrap();
    bramble_tls::server_config(identity, policy).unwrap()
}

#[test]
fn full_tls13_handshake_negotiates_http11_and_chacha() {
    let client = Arc::new(tls13());
    let outcome = exchange(
        &client,
        p256_server(SniPolicy::AnyName),
        "bramble.test",
        b"get / please",
    )
    .unwrap();
    assert_eq!(outcome.version, Some(ProtocolVersion::TLSv1_3));
    assert_eq!(
        outcome.suite,
        Some(CipherSuite::TLS13_CHACHA20_POLY1305_SHA256)
    );
    assert_eq!(outcome.kind, Some(HandshakeKind::Full));
    // The server prefers HTTP/2 (SITE_ALPN_PROTOCOLS) when the client offers it.
    assert_eq!(outcome.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(outcome.server_received, b"get / please");
    assert_eq!(outcome.echoed, b"GET / PLEASE");
}

#[test]
fn tls13_resumes_with_a_ticket() {
    let client = Arc::new(tls13());
    let server = p256_server(SniPolicy::AnyName);
    let first = exchange(&client, server.clone(), "bramble.test", b"one").unwrap();
    assert_eq!(first.kind, Some(HandshakeKind::Full));
    let second = exchange(&client, server, "bramble.test", b"two").unwrap();
    assert_eq!(second.kind, Some(HandshakeKind::Resumed));
    assert!(second.server_resumed);
    assert_eq!(second.echoed, b"TWO");
}

#[test]
fn a_ticket_from_another_server_key_is_a_full_handshake() {
    let client = Arc::new(tls13());
    exchange(
        &client,
        p256_server(SniPolicy::AnyName),
        "bramble.test",
        b"one",
    )
    .unwrap();
    // A new configuration has a new ticket key (as after a reboot).
    let second = exchange(
        &client,
        p256_server(SniPolicy::AnyName),
        "bramble.test",
        b"two",
    )
    .unwrap();
    assert_eq!(second.kind, Some(HandshakeKind::Full));
}

#[test]
fn tls12_full_and_resumed() {
    let client = Arc::new(tls12());
    let server = p256_server(SniPolicy::AnyName);
    let first = exchange(&client, server.clone(), "bramble.test", b"twelve").unwrap();
    assert_eq!(first.version, Some(ProtocolVersion::TLSv1_2));
    assert_eq!(
        first.suite,
        Some(CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
    );
    assert_eq!(first.echoed, b"TWELVE");
    let second = exchange(&client, server, "bramble.test", b"again").unwrap();
    assert_eq!(second.kind, Some(HandshakeKind::Resumed));
    assert_eq!(second.echoed, b"AGAIN");
}

#[test]
fn every_suite_and_group_works() {
    let server = p256_server(SniPolicy::AnyName);
    let all = provider::provider();
    for suite in &all.cipher_suites {
        for group in &all.kx_groups {
            let mut provider = provider::provider();
            provider.cipher_suites = vec![*suite];
            provider.kx_groups = vec![*group];
            let version = match suite {
                rustls::SupportedCipherSuite::Tls13(_) => &rustls::version::TLS13,
                rustls::SupportedCipherSuite::Tls12(_) => &rustls::version::TLS12,
            };
            let base = client_config(&[version]);
            let client = ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(root_store())
                .with_no_client_auth();
            let _ = base;
            let outcome = exchange(
                &Arc::new(client),
                server.clone(),
                "www.bramble.test",
                b"abc",
            )
            .unwrap_or_else(|error| panic!("{:?} {:?}: {error}", suite.suite(), group.name()));
            assert_eq!(outcome.suite, Some(suite.suite()));
            assert_eq!(outcome.echoed, b"ABC");
        }
    }
}

fn root_store() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(CA) {
        roots.add(cert.unwrap()).unwrap();
    }
    roots
}

#[test]
fn ed25519_certificates_work_in_both_versions() {
    seed();
    let identity = Identity::from_pem(ED25519_CERT, ED25519_KEY).unwrap();
    let server = bramble_tls::server_config(identity, SniPolicy::AnyName).unwrap();
    for client in [tls13(), tls12()] {
        let outcome = exchange(&Arc::new(client), server.clone(), "bramble.test", b"ed").unwrap();
        assert_eq!(outcome.echoed, b"ED");
    }
}

#[test]
fn pkcs8_and_sec1_keys_both_load() {
    Identity::from_pem(P256_CERT, P256_SEC1).unwrap();
    Identity::from_pem(P256_CERT, P256_PKCS8).unwrap();
}

#[test]
fn bad_identities_are_named() {
    assert_eq!(
        Identity::from_pem(b"", P256_SEC1).unwrap_err(),
        IdentityError::NoCertificate
    );
    assert_eq!(
        Identity::from_pem(P256_CERT, b"").unwrap_err(),
        IdentityError::NoKey
    );
    assert_eq!(
        Identity::from_pem(P256_CERT, OTHER_KEY).unwrap_err(),
        IdentityError::KeyMismatch
    );
    assert_eq!(
        Identity::from_pem(P256_CERT, ED25519_KEY).unwrap_err(),
        IdentityError::KeyMismatch
    );
    let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert_eq!(
        Identity::from_pem(garbage, P256_SEC1).unwrap_err(),
        IdentityError::BadCertificate
    );
}

#[test]
fn validity_and_names_are_read_from_the_leaf() {
    let expired = Identity::from_pem(EXPIRED_CERT, P256_SEC1).unwrap();
    assert_eq!(expired.validity().not_before, 946_684_800);
    assert_eq!(expired.validity().not_after, 978_307_200);
    assert!(!expired.validity().contains(1_800_000_000));
    let current = Identity::from_pem(P256_CERT, P256_SEC1).unwrap();
    assert!(current.validity().contains(1_800_000_000));
    assert!(current.covers("bramble.test"));
    assert!(current.covers("www.bramble.test"));
    assert!(!current.covers("example.org"));
    assert!(!current.covers("a.b.bramble.test"));
}

#[test]
fn sni_policy_refuses_names_the_certificate_does_not_cover() {
    let client = Arc::new(tls13());
    let strict = p256_server(SniPolicy::CertificateNames);
    assert!(exchange(&client, strict.clone(), "www.bramble.test", b"ok").is_ok());
    let refused = exchange(&client, strict, "example.org", b"no")
        .err()
        .unwrap();
    assert!(
        matches!(refused, rustls::Error::AlertReceived(_)),
        "strict policy: the server refuses ({refused:?})"
    );
    // Any name: the server answers, and the client rejects the certificate itself.
    let lenient = exchange(
        &client,
        p256_server(SniPolicy::AnyName),
        "example.org",
        b"no",
    )
    .err()
    .unwrap();
    assert!(
        matches!(lenient, rustls::Error::InvalidCertificate(_)),
        "{lenient:?}"
    );
}

#[test]
fn a_slow_application_gets_every_byte() {
    let client = Arc::new(tls13());
    let mut pair = Pair::new(&client, "bramble.test");
    let (mut incoming, mut outgoing) = (vec![0; MAX_RECORD_LEN], vec![0; 8192]);
    let mut session = TlsSession::new(
        p256_server(SniPolicy::AnyName),
        &mut incoming,
        &mut outgoing,
    )
    .unwrap();
    let mut app = Echo {
        take: Some(7),
        ..Echo::default()
    };
    let mut echoed = Vec::new();
    pump(&mut pair, &mut session, &mut app, &mut echoed).unwrap();
    let message: Vec<u8> = (0..50_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    pair.client.writer().write_all(&message).unwrap();
    pump(&mut pair, &mut session, &mut app, &mut echoed).unwrap();
    // The application takes 7 bytes per call and so holds the session back; each poll
    // offers the rest again.
    for _ in 0..20_000 {
        if app.received.len() == message.len() {
            break;
        }
        session.poll(&mut app).unwrap();
        pump(&mut pair, &mut session, &mut app, &mut echoed).unwrap();
    }
    assert!(
        app.received == message,
        "received {} of {} bytes",
        app.received.len(),
        message.len()
    );
    assert!(
        echoed == message.to_ascii_uppercase(),
        "echoed {} bytes",
        echoed.len()
    );
}

#[test]
fn a_large_body_crosses_small_transmit_chunks() {
    let client = Arc::new(tls13());
    let mut pair = Pair::new(&client, "bramble.test");
    pair.out_chunk = 700;
    let (mut incoming, mut outgoing) = (vec![0; MAX_RECORD_LEN], vec![0; 8192]);
    let mut session = TlsSession::new(
        p256_server(SniPolicy::AnyName),
        &mut incoming,
        &mut outgoing,
    )
    .unwrap();
    let mut app = Echo::default();
    let mut received = Vec::new();
    pump(&mut pair, &mut session, &mut app, &mut received).unwrap();
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    app.to_send = body.clone();
    pump(&mut pair, &mut session, &mut app, &mut received).unwrap();
    assert!(
        received == body,
        "received {} of {} bytes",
        received.len(),
        body.len()
    );
}

#[test]
fn close_notify_reaches_the_client() {
    let client = Arc::new(tls13());
    let mut pair = Pair::new(&client, "bramble.test");
    let (mut incoming, mut outgoing) = (vec![0; MAX_RECORD_LEN], vec![0; 8192]);
    let mut session = TlsSession::new(
        p256_server(SniPolicy::AnyName),
        &mut incoming,
        &mut outgoing,
    )
    .unwrap();
    let mut app = Echo::default();
    let mut received = Vec::new();
    pump(&mut pair, &mut session, &mut app, &mut received).unwrap();
    session.close();
    pump(&mut pair, &mut session, &mut app, &mut received).unwrap();
    let mut rest = [0u8; 16];
    assert_eq!(
        pair.client.reader().read(&mut rest).unwrap(),
        0,
        "clean EOF after close_notify"
    );
    // And the other way: the client's close_notify moves the server to PeerClosed.
    pair.client.send_close_notify();
    pump(&mut pair, &mut session, &mut app, &mut received).unwrap();
    assert!(matches!(session.phase(), Phase::PeerClosed | Phase::Closed));
}

#[test]
fn garbage_ends_the_session_with_an_alert() {
    let (mut incoming, mut outgoing) = (vec![0; MAX_RECORD_LEN], vec![0; 8192]);
    let mut session = TlsSession::new(
        p256_server(SniPolicy::AnyName),
        &mut incoming,
        &mut outgoing,
    )
    .unwrap();
    let mut app = Echo::default();
    let result = session.receive(&mut app, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(result.is_err());
    assert_eq!(session.phase(), Phase::Closed);
    let mut out = [0u8; 64];
    let written = session.transmit(&mut app, &mut out);
    assert_eq!(
        &out[..1],
        &[21],
        "an alert record goes back ({written} bytes)"
    );
}

#[test]
fn an_error_after_half_a_handshake_message_ends_the_session_without_a_panic() {
    // Found by the tls_input fuzz target: rustls keeps the place of a handshake message it is
    // joining inside the receive buffer, and asking it for the alert with an empty buffer
    // then made it index past the end. A record with the first bytes of a ClientHello (its
    // header promises 100 bytes), then a record of an unknown type.
    let mut incoming = vec![0u8; MAX_RECORD_LEN];
    let mut outgoing = vec![0u8; 8192];
    let mut session = TlsSession::new(
        p256_server(SniPolicy::AnyName),
        &mut incoming,
        &mut outgoing,
    )
    .unwrap();
    let mut app = Echo::default();
    let mut bytes = vec![22, 3, 1, 0, 4, 1, 0, 0, 100];
    bytes.extend_from_slice(&[99, 3, 3, 0, 1, 0]);
    assert!(session.receive(&mut app, &bytes).is_err());
    let mut out = [0u8; 64];
    let _ = session.transmit(&mut app, &mut out);
    session.close();
    assert_eq!(session.phase(), Phase::Closed);
}
