//! A small rustls `CryptoProvider` over RustCrypto crates: only what a TLS server with an
//! ECDSA P-256 or Ed25519 certificate needs (and the matching verifiers for a client).
//!
//! The ACME client uses [`client_provider`]: the same, plus the RSA and P-384 verifiers and
//! ECDHE-RSA suites a public CA's server needs (see [`verify`]).
//!
//! TLS 1.3: ChaCha20-Poly1305, AES-128-GCM, AES-256-GCM. TLS 1.2: ECDHE-ECDSA with the same
//! three AEADs. Key exchange: X25519, then P-256. ChaCha20-Poly1305 comes first and the
//! server's order wins: the ARM1176 has no AES instructions, and software ChaCha20 costs it
//! less than constant-time software AES-GCM.

pub mod aead;
pub mod hash;
pub mod hmac;
pub mod kx;
pub mod sign;
pub mod verify;

use crate::random::RANDOM;
use alloc::vec;
use rustls::crypto::tls12::PrfUsingHmac;
use rustls::crypto::tls13::HkdfUsingHmac;
use rustls::crypto::{CipherSuiteCommon, CryptoProvider, KeyExchangeAlgorithm};
use rustls::{
    CipherSuite, SignatureScheme, SupportedCipherSuite, Tls12CipherSuite, Tls13CipherSuite,
};

/// TLS_CHACHA20_POLY1305_SHA256.
pub static TLS13_CHACHA20_POLY1305_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            hash_provider: &hash::SHA256,
            confidentiality_limit: u64::MAX,
        },
        hkdf_provider: &HkdfUsingHmac(&hmac::HMAC_SHA256),
        aead_alg: &aead::CHACHA20_POLY1305,
        quic: None,
    });

/// TLS_AES_128_GCM_SHA256.
pub static TLS13_AES_128_GCM_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS13_AES_128_GCM_SHA256,
            hash_provider: &hash::SHA256,
            // RFC 8446 §5.5, draft-irtf-cfrg-aead-limits: 2^24.5 records; rustls rekeys before.
            confidentiality_limit: 1 << 24,
        },
        hkdf_provider: &HkdfUsingHmac(&hmac::HMAC_SHA256),
        aead_alg: &aead::AES_128_GCM,
        quic: None,
    });

/// TLS_AES_256_GCM_SHA384.
pub static TLS13_AES_256_GCM_SHA384: SupportedCipherSuite =
    SupportedCipherSuite::Tls13(&Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS13_AES_256_GCM_SHA384,
            hash_provider: &hash::SHA384,
            confidentiality_limit: 1 << 24,
        },
        hkdf_provider: &HkdfUsingHmac(&hmac::HMAC_SHA384),
        aead_alg: &aead::AES_256_GCM,
        quic: None,
    });

/// The schemes the ECDHE-ECDSA suites sign with (RFC 8422 §5.1.1 allows Ed25519 there).
static TLS12_ECDSA_SCHEMES: &[SignatureScheme] = &[
    SignatureScheme::ED25519,
    SignatureScheme::ECDSA_NISTP256_SHA256,
];

/// TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256.
pub static TLS12_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            hash_provider: &hash::SHA256,
            confidentiality_limit: u64::MAX,
        },
        prf_provider: &PrfUsingHmac(&hmac::HMAC_SHA256),
        kx: KeyExchangeAlgorithm::ECDHE,
        sign: TLS12_ECDSA_SCHEMES,
        aead_alg: &aead::CHACHA20_POLY1305,
    });

/// TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256.
pub static TLS12_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            hash_provider: &hash::SHA256,
            confidentiality_limit: 1 << 24,
        },
        prf_provider: &PrfUsingHmac(&hmac::HMAC_SHA256),
        kx: KeyExchangeAlgorithm::ECDHE,
        sign: TLS12_ECDSA_SCHEMES,
        aead_alg: &aead::AES_128_GCM,
    });

/// TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384.
pub static TLS12_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            hash_provider: &hash::SHA384,
            confidentiality_limit: 1 << 24,
        },
        prf_provider: &PrfUsingHmac(&hmac::HMAC_SHA384),
        kx: KeyExchangeAlgorithm::ECDHE,
        sign: TLS12_ECDSA_SCHEMES,
        aead_alg: &aead::AES_256_GCM,
    });

/// The schemes an ECDHE-RSA server signs its key exchange with (RFC 5246 §7.4.1.4.1, RFC 8446
/// §4.2.3's PSS schemes, which TLS 1.2 also uses).
static TLS12_RSA_SCHEMES: &[SignatureScheme] = &[
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
];

/// TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 (client only: a TLS 1.2 CA server with an RSA
/// certificate).
pub static TLS12_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            hash_provider: &hash::SHA256,
            confidentiality_limit: u64::MAX,
        },
        prf_provider: &PrfUsingHmac(&hmac::HMAC_SHA256),
        kx: KeyExchangeAlgorithm::ECDHE,
        sign: TLS12_RSA_SCHEMES,
        aead_alg: &aead::CHACHA20_POLY1305,
    });

/// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (client only).
pub static TLS12_ECDHE_RSA_WITH_AES_128_GCM_SHA256: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            hash_provider: &hash::SHA256,
            confidentiality_limit: 1 << 24,
        },
        prf_provider: &PrfUsingHmac(&hmac::HMAC_SHA256),
        kx: KeyExchangeAlgorithm::ECDHE,
        sign: TLS12_RSA_SCHEMES,
        aead_alg: &aead::AES_128_GCM,
    });

/// TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 (client only).
pub static TLS12_ECDHE_RSA_WITH_AES_256_GCM_SHA384: SupportedCipherSuite =
    SupportedCipherSuite::Tls12(&Tls12CipherSuite {
        common: CipherSuiteCommon {
            suite: CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            hash_provider: &hash::SHA384,
            confidentiality_limit: 1 << 24,
        },
        prf_provider: &PrfUsingHmac(&hmac::HMAC_SHA384),
        kx: KeyExchangeAlgorithm::ECDHE,
        sign: TLS12_RSA_SCHEMES,
        aead_alg: &aead::AES_256_GCM,
    });

static X25519: kx::X25519 = kx::X25519;
static SECP256R1: kx::Secp256r1 = kx::Secp256r1;
static KEYS: sign::Keys = sign::Keys;

/// The provider: every suite above, in the server's order of preference.
pub fn provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: vec![
            TLS13_CHACHA20_POLY1305_SHA256,
            TLS13_AES_128_GCM_SHA256,
            TLS13_AES_256_GCM_SHA384,
            TLS12_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            TLS12_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            TLS12_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        ],
        kx_groups: vec![&X25519, &SECP256R1],
        signature_verification_algorithms: verify::ALGORITHMS,
        secure_random: &RANDOM,
        key_provider: &KEYS,
    }
}

/// The ACME client's provider: the server's suites and groups, plus ECDHE-RSA for TLS 1.2,
/// verifying with [`verify::CLIENT_ALGORITHMS`] (RSA and P-384 besides the server's set) so
/// that it can check the chains and handshakes public CAs present. The server's own
/// [`provider`] is unchanged.
pub fn client_provider() -> CryptoProvider {
    let mut provider = provider();
    provider.cipher_suites.extend([
        TLS12_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        TLS12_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        TLS12_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ]);
    provider.signature_verification_algorithms = verify::CLIENT_ALGORITHMS;
    provider
}
