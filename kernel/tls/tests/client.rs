//! The ACME side's TLS client against rustls's own server, in memory: a handshake to a
//! server whose certificate chains to the given root, a request and its answer; a server
//! name the certificate does not cover, an untrusted root, and an unset clock all fail.

use bramble_tls::client::{ClientError, TlsClient, client_config, roots_from_pem};
use bramble_tls::clock::CLOCK;
use bramble_tls::provider;
use bramble_tls::random::RANDOM;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};
use std::io::{Read, Write};
use std::sync::Arc;

const CA: &[u8] = include_bytes!("data/ca.pem");
const P256_CERT: &[u8] = include_bytes!("data/p256.pem");
const P256_SEC1: &[u8] = include_bytes!("data/p256.key");
const OTHER_CA_AS_ROOT: &[u8] = include_bytes!("data/expired.pem");
// A chain shaped like Let's Encrypt's E-series: P-384 root and intermediate, P-256 leaf
// (data/chains/make.sh).
const EC_ROOT: &[u8] = include_bytes!("data/chains/ec-root.pem");
const EC_INT: &[u8] = include_bytes!("data/chains/ec-int.pem");
const EC_LEAF: &[u8] = include_bytes!("data/chains/ec-leaf.pem");
const EC_LEAF_KEY: &[u8] = include_bytes!("data/chains/ec-leaf.key");

fn new_server() -> ServerConnection {
    server_with(&[P256_CERT], P256_SEC1, rustls::DEFAULT_VERSIONS)
}

/// A server presenting the certificates in `pems` (leaf first) with `key`.
fn server_with(
    pems: &[&[u8]],
    key: &[u8],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> ServerConnection {
    let chain: Vec<_> = pems
        .iter()
        .flat_map(|pem| CertificateDer::pem_slice_iter(pem).map(Result::unwrap))
        .collect();
    let key = PrivateKeyDer::from_pem_slice(key).unwrap();
    let config = ServerConfig::builder_with_provider(Arc::new(provider::provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    ServerConnection::new(Arc::new(config)).unwrap()
}

/// Moves bytes both ways until neither side has anything to say.
fn pump(client: &mut TlsClient, server: &mut ServerConnection) {
    for _ in 0..50 {
        let mut moved = false;
        if !client.outgoing().is_empty() {
            let bytes = client.outgoing().to_vec();
            let mut reader = &bytes[..];
            while !reader.is_empty() {
                server.read_tls(&mut reader).unwrap();
            }
            client.sent(bytes.len());
            if server.process_new_packets().is_err() {
                // The alert the server wants to send still goes out below.
            }
            moved = true;
        }
        let mut out = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut out).unwrap();
        }
        if !out.is_empty() {
            let mut at = 0;
            while at < out.len() {
                at += client.receive(&out[at..]);
            }
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

fn setup() {
    RANDOM.seed(&[9; 32]).unwrap();
    // 2027-06-01, inside the test certificates' validity.
    CLOCK.set(1_811_808_000_000_000, 0);
}

#[test]
fn talks_to_a_server_chaining_to_the_given_root() {
    setup();
    let config = client_config(roots_from_pem(CA).unwrap()).unwrap();
    let mut client = TlsClient::new(config, "bramble.test").unwrap();
    let mut server = new_server();
    client.write(b"GET / HTTP/1.1\r\n\r\n");
    pump(&mut client, &mut server);
    assert!(client.is_open(), "{:?}", client.error());
    let mut request = vec![0u8; 64];
    let n = server.reader().read(&mut request).unwrap();
    assert_eq!(&request[..n], b"GET / HTTP/1.1\r\n\r\n");
    server
        .writer()
        .write_all(b"HTTP/1.1 200 OK\r\n\r\nhi")
        .unwrap();
    server.send_close_notify();
    pump(&mut client, &mut server);
    assert_eq!(client.take_plaintext(), b"HTTP/1.1 200 OK\r\n\r\nhi");
    assert!(client.peer_closed());
}

#[test]
fn refuses_wrong_names_and_untrusted_roots() {
    setup();
    let config = client_config(roots_from_pem(CA).unwrap()).unwrap();
    let mut client = TlsClient::new(config, "elsewhere.example").unwrap();
    let mut server = new_server();
    pump(&mut client, &mut server);
    assert!(!client.is_open());
    assert!(matches!(client.error(), Some(ClientError::Protocol(_))));

    let config = client_config(roots_from_pem(OTHER_CA_AS_ROOT).unwrap()).unwrap();
    let mut client = TlsClient::new(config, "bramble.test").unwrap();
    let mut server = new_server();
    pump(&mut client, &mut server);
    assert!(!client.is_open());
    assert!(client.error().is_some());

    assert_eq!(
        roots_from_pem(b"no pem here").err(),
        Some(ClientError::NoRoots)
    );
}

#[test]
fn talks_to_a_server_whose_chain_is_signed_with_p384() {
    setup();
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let config = client_config(roots_from_pem(EC_ROOT).unwrap()).unwrap();
        let mut client = TlsClient::new(config, "bramble.test").unwrap();
        let mut server = server_with(&[EC_LEAF, EC_INT], EC_LEAF_KEY, &[version]);
        client.write(b"ping");
        pump(&mut client, &mut server);
        assert!(client.is_open(), "{version:?}: {:?}", client.error());
        let mut request = vec![0u8; 8];
        let n = server.reader().read(&mut request).unwrap();
        assert_eq!(&request[..n], b"ping");
    }
}
