//! The ACME client's verifiers against real signatures and chains made by openssl
//! (data/chains/make.sh): RSA PKCS#1 v1.5 and PSS with SHA-256/384/512 for 2048- and 4096-bit
//! keys, ECDSA P-384/SHA-384, both of Let's Encrypt's chain shapes; tampered signatures,
//! other paddings, keys outside 2048..=4096 bits, wrong names and missing intermediates fail;
//! the server's own set stays P-256 and Ed25519.

use bramble_tls::provider::{self, verify};
use rustls::SignatureScheme;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn data(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/chains")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// `scheme`'s verifier in `set`, if the set maps it.
fn verifier(
    set: &WebPkiSupportedAlgorithms,
    scheme: SignatureScheme,
) -> Option<&'static dyn rustls::pki_types::SignatureVerificationAlgorithm> {
    set.mapping
        .iter()
        .find(|(mapped, _)| *mapped == scheme)
        .map(|(_, algorithms)| algorithms[0])
}

fn rsa_scheme(padding: &str, digest: &str) -> SignatureScheme {
    match (padding, digest) {
        ("pkcs1", "sha256") => SignatureScheme::RSA_PKCS1_SHA256,
        ("pkcs1", "sha384") => SignatureScheme::RSA_PKCS1_SHA384,
        ("pkcs1", "sha512") => SignatureScheme::RSA_PKCS1_SHA512,
        ("pss", "sha256") => SignatureScheme::RSA_PSS_SHA256,
        ("pss", "sha384") => SignatureScheme::RSA_PSS_SHA384,
        ("pss", "sha512") => SignatureScheme::RSA_PSS_SHA512,
        _ => unreachable!(),
    }
}

#[test]
fn rsa_signatures_by_openssl_verify_and_tampered_ones_do_not() {
    let message = data("message.bin");
    for key in ["rsa2048", "rsa4096"] {
        let public = data(&format!("{key}.pub.der"));
        for padding in ["pkcs1", "pss"] {
            for digest in ["sha256", "sha384", "sha512"] {
                let signature = data(&format!("sig-{key}-{padding}-{digest}.bin"));
                let check =
                    verifier(&verify::CLIENT_ALGORITHMS, rsa_scheme(padding, digest)).unwrap();
                let what = format!("{key} {padding} {digest}");
                assert!(
                    check
                        .verify_signature(&public, &message, &signature)
                        .is_ok(),
                    "{what}"
                );
                let mut flipped = signature.clone();
                *flipped.last_mut().unwrap() ^= 1;
                assert!(
                    check.verify_signature(&public, &message, &flipped).is_err(),
                    "{what}"
                );
                assert!(
                    check
                        .verify_signature(&public, b"other", &signature)
                        .is_err(),
                    "{what}"
                );
                // The same signature under the other padding or another hash fails.
                let other = if padding == "pss" { "pkcs1" } else { "pss" };
                let check =
                    verifier(&verify::CLIENT_ALGORITHMS, rsa_scheme(other, digest)).unwrap();
                assert!(
                    check
                        .verify_signature(&public, &message, &signature)
                        .is_err(),
                    "{what}"
                );
                let other = if digest == "sha256" {
                    "sha384"
                } else {
                    "sha256"
                };
                let check =
                    verifier(&verify::CLIENT_ALGORITHMS, rsa_scheme(padding, other)).unwrap();
                assert!(
                    check
                        .verify_signature(&public, &message, &signature)
                        .is_err(),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn rsa_keys_outside_2048_to_4096_bits_are_refused() {
    let message = data("message.bin");
    for key in ["rsa1024", "rsa4608"] {
        let public = data(&format!("{key}.pub.der"));
        for padding in ["pkcs1", "pss"] {
            let signature = data(&format!("sig-{key}-{padding}-sha256.bin"));
            let check =
                verifier(&verify::CLIENT_ALGORITHMS, rsa_scheme(padding, "sha256")).unwrap();
            assert!(
                check
                    .verify_signature(&public, &message, &signature)
                    .is_err(),
                "{key} {padding}"
            );
        }
    }
    let check = verifier(
        &verify::CLIENT_ALGORITHMS,
        SignatureScheme::RSA_PKCS1_SHA256,
    )
    .unwrap();
    assert!(
        check
            .verify_signature(b"\x30\x00", b"m", &[0; 256])
            .is_err()
    );
}

#[test]
fn p384_signature_by_openssl_verifies_and_a_tampered_one_does_not() {
    let message = data("message.bin");
    let public = data("p384.pub.der");
    let signature = data("sig-p384-sha384.bin");
    let check = verifier(
        &verify::CLIENT_ALGORITHMS,
        SignatureScheme::ECDSA_NISTP384_SHA384,
    )
    .unwrap();
    assert!(
        check
            .verify_signature(&public, &message, &signature)
            .is_ok()
    );
    assert!(
        check
            .verify_signature(&public, b"other", &signature)
            .is_err()
    );
    let mut flipped = signature.clone();
    let at = flipped.len() - 3;
    flipped[at] ^= 1;
    assert!(check.verify_signature(&public, &message, &flipped).is_err());
    // A P-384 key is not a P-256 key.
    let p256 = verifier(
        &verify::CLIENT_ALGORITHMS,
        SignatureScheme::ECDSA_NISTP256_SHA256,
    );
    assert!(
        p256.unwrap()
            .verify_signature(&public, &message, &signature)
            .is_err()
    );
}

#[test]
fn the_server_keeps_its_own_set() {
    let schemes: Vec<_> = verify::ALGORITHMS.mapping.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        schemes,
        [
            SignatureScheme::ECDSA_NISTP256_SHA256,
            SignatureScheme::ED25519
        ]
    );
    assert_eq!(
        provider::provider()
            .signature_verification_algorithms
            .mapping
            .len(),
        2
    );
}

fn certificate(name: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(&data(name)).unwrap()
}

fn chain_verifier(
    root: &str,
    provider: rustls::crypto::CryptoProvider,
) -> Arc<WebPkiServerVerifier> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certificate(root)).unwrap();
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider))
        .build()
        .unwrap()
}

/// 2027-06-01, inside the fixtures' validity.
fn now() -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(1_811_808_000))
}

#[test]
fn both_lets_encrypt_chain_shapes_verify_with_the_client_provider_only() {
    for prefix in ["rsa", "ec"] {
        let leaf = certificate(&format!("{prefix}-leaf.pem"));
        let intermediate = certificate(&format!("{prefix}-int.pem"));
        let root = format!("{prefix}-root.pem");
        let name = ServerName::try_from("bramble.test").unwrap();
        let client = chain_verifier(&root, provider::client_provider());
        client
            .verify_server_cert(
                &leaf,
                std::slice::from_ref(&intermediate),
                &name,
                &[],
                now(),
            )
            .unwrap_or_else(|error| panic!("{prefix}: {error}"));
        // Without the intermediate, or for another name, it fails.
        assert!(
            client
                .verify_server_cert(&leaf, &[], &name, &[], now())
                .is_err()
        );
        let other = ServerName::try_from("other.test").unwrap();
        assert!(
            client
                .verify_server_cert(
                    &leaf,
                    std::slice::from_ref(&intermediate),
                    &other,
                    &[],
                    now()
                )
                .is_err()
        );
        // The server's set (what the client had before) cannot check these chains.
        let server = chain_verifier(&root, provider::provider());
        assert!(
            server
                .verify_server_cert(&leaf, &[intermediate], &name, &[], now())
                .is_err(),
            "{prefix}"
        );
    }
}

#[test]
fn the_client_offers_rsa_and_p384_schemes_in_its_hello() {
    let schemes = verify::CLIENT_ALGORITHMS.supported_schemes();
    for scheme in [
        SignatureScheme::RSA_PSS_SHA256,
        SignatureScheme::RSA_PKCS1_SHA256,
        SignatureScheme::ECDSA_NISTP384_SHA384,
        SignatureScheme::ECDSA_NISTP256_SHA256,
    ] {
        assert!(schemes.contains(&scheme), "{scheme:?}");
    }
}

#[test]
fn renewal_information_names_a_certificate_by_its_issuer_key_and_serial() {
    // openssl x509 -in rsa-leaf.pem -noout -serial -ext authorityKeyIdentifier
    let leaf = certificate("rsa-leaf.pem");
    let (key_id, serial) = bramble_tls::certificate::renewal_parts(&leaf).unwrap();
    assert_eq!(
        key_id,
        [
            0xdf, 0x0f, 0xe3, 0x3d, 0x44, 0xfb, 0xf9, 0xde, 0x86, 0x75, 0x7c, 0x37, 0x2a, 0x05,
            0xe6, 0x88, 0xa7, 0x88, 0xda, 0x35
        ]
    );
    assert_eq!(serial, [0x03]);
    assert!(bramble_tls::certificate::renewal_parts(b"\x30\x03\x02\x01\x01").is_none());
}
