//! TLS-ALPN-01 (RFC 8737) on the server: a validator's hello (ALPN `acme-tls/1` alone) gets
//! the challenge certificate for the name it asks for, with the acmeIdentifier extension
//! holding SHA-256 of the key authorization, and `acme-tls/1` negotiated; any other hello
//! gets the site's certificate and `h2` or `http/1.1`; a validator asking for another name, or a
//! server with no challenge up, gets a handshake failure; a server still without a site
//! certificate answers validators only.

use bramble_acme::EcKey;
use bramble_acme::csr::tls_alpn_certificate;
use bramble_tls::provider;
use bramble_tls::random::RANDOM;
use bramble_tls::{AlpnChallenge, Identity, SniPolicy, server_config_with_challenges};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, ServerConnection};
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex};

const P256_CERT: &[u8] = include_bytes!("data/p256.pem");
const P256_SEC1: &[u8] = include_bytes!("data/p256.key");
const NAME: &str = "bramble.test";
const KEY_AUTHORIZATION: &str = "token-0123.thumbprint-abcd";

/// Accepts any certificate and keeps the leaf it was shown (a validator checks the
/// extension itself, not a chain).
#[derive(Debug, Default)]
struct Keep(Mutex<Option<Vec<u8>>>);

impl ServerCertVerifier for Keep {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        provider::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A handshake in memory from a client offering `alpn` for `name`: the leaf it was shown and
/// the protocol negotiated, or the error.
fn handshake(
    server: Arc<rustls::ServerConfig>,
    name: &str,
    alpn: &[&[u8]],
) -> Result<(Vec<u8>, Option<Vec<u8>>), rustls::Error> {
    let keep = Arc::new(Keep::default());
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider::provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(keep.clone())
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let mut client = ClientConnection::new(
        Arc::new(config),
        ServerName::try_from(name.to_string()).unwrap(),
    )
    .unwrap();
    let mut server = ServerConnection::new(server).unwrap();
    for _ in 0..20 {
        let mut wire = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut wire).unwrap();
        }
        if !wire.is_empty() {
            server.read_tls(&mut &wire[..]).unwrap();
            if let Err(error) = server.process_new_packets() {
                // The alert the server sends on its way out reaches the client.
                let mut alert = Vec::new();
                let _ = server.write_tls(&mut alert);
                let _ = client.read_tls(&mut &alert[..]);
                return Err(client.process_new_packets().err().unwrap_or(error));
            }
        }
        let mut wire = Vec::new();
        while server.wants_write() {
            server.write_tls(&mut wire).unwrap();
        }
        if !wire.is_empty() {
            client.read_tls(&mut &wire[..]).unwrap();
            client.process_new_packets()?;
        }
        if !client.is_handshaking() && !server.is_handshaking() {
            let leaf = keep.0.lock().unwrap().clone().expect("a certificate");
            return Ok((leaf, client.alpn_protocol().map(<[u8]>::to_vec)));
        }
    }
    panic!("the handshake did not finish");
}

fn challenge() -> (AlpnChallenge, Vec<u8>) {
    RANDOM.seed(&[0x42; 32]).unwrap();
    let mut counter = 7u8;
    let key = EcKey::generate(&mut |out: &mut [u8]| {
        for byte in out {
            counter = counter.wrapping_mul(31).wrapping_add(11);
            *byte = counter;
        }
    });
    let certificate = tls_alpn_certificate(NAME, KEY_AUTHORIZATION, &key);
    let answer = AlpnChallenge::new(NAME, certificate.clone(), key.sec1_der()).unwrap();
    (answer, certificate)
}

fn site() -> Identity {
    Identity::from_pem(P256_CERT, P256_SEC1).unwrap()
}

const ACME: &[u8] = b"acme-tls/1";
const HTTP11: &[u8] = b"http/1.1";

#[test]
fn a_validator_gets_the_challenge_certificate_and_browsers_the_sites() {
    let (answer, certificate) = challenge();
    let site_leaf = site();
    let server =
        server_config_with_challenges(Some(site_leaf), SniPolicy::AnyName, vec![answer]).unwrap();

    let (leaf, alpn) = handshake(server.clone(), NAME, &[ACME]).unwrap();
    assert_eq!(leaf, certificate);
    assert_eq!(alpn.as_deref(), Some(ACME));
    // The critical acmeIdentifier extension (1.3.6.1.5.5.7.1.31) with the digest (§3).
    let mut extension = vec![0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];
    extension.extend([0x01, 0x01, 0xff, 0x04, 0x22, 0x04, 0x20]);
    extension.extend(Sha256::digest(KEY_AUTHORIZATION.as_bytes()));
    assert!(
        leaf.windows(extension.len()).any(|w| w == extension),
        "no acmeIdentifier extension with the key authorization's digest"
    );
    // The name is matched without regard to case, as DNS names are.
    assert!(handshake(server.clone(), "Bramble.TEST", &[ACME]).is_ok());

    // A browser, or a client offering acme-tls/1 among others: the site's certificate.
    let site_der = rustls::pki_types::pem::PemObject::pem_slice_iter(P256_CERT)
        .next()
        .map(|cert: Result<CertificateDer<'static>, _>| cert.unwrap().to_vec())
        .unwrap();
    // The site's protocols are h2 first, then http/1.1 (SITE_ALPN_PROTOCOLS).
    let h2: &[u8] = b"h2";
    for (offered, chosen) in [
        (&[h2, HTTP11][..], Some(h2)),
        (&[HTTP11, ACME], Some(HTTP11)),
        (&[], None),
    ] {
        let (leaf, alpn) = handshake(server.clone(), NAME, offered).unwrap();
        assert_eq!(leaf, site_der, "offering {offered:?}");
        assert_eq!(alpn.as_deref(), chosen, "offering {offered:?}");
    }

    // A validator asking for a name with no challenge up: refused.
    assert!(handshake(server, "other.test", &[ACME]).is_err());
}

#[test]
fn without_a_challenge_up_validators_are_refused_and_before_a_certificate_browsers_are() {
    let plain =
        server_config_with_challenges(Some(site()), SniPolicy::AnyName, Vec::new()).unwrap();
    assert!(handshake(plain.clone(), NAME, &[ACME]).is_err());
    assert!(handshake(plain, NAME, &[HTTP11]).is_ok());

    let (answer, certificate) = challenge();
    let first = server_config_with_challenges(None, SniPolicy::AnyName, vec![answer]).unwrap();
    assert_eq!(
        handshake(first.clone(), NAME, &[ACME]).unwrap().0,
        certificate
    );
    assert!(handshake(first, NAME, &[HTTP11]).is_err());
}
