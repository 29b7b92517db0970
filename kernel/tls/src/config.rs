//! The server's identity (certificate chain and key from PEM) and the rustls configuration
//! built from it: ALPN h2 and http/1.1, tickets, the SNI policy, the server's cipher order.
//!
//! ALPN is chosen here and only here ([`alpn_protocols`]), in the server's order. While an
//! ACME order waits for a TLS-ALPN-01 validation (RFC 8737), the configuration also carries
//! that challenge's self-signed certificate ([`AlpnChallenge`]) and offers `acme-tls/1`: a
//! ClientHello whose ALPN list is `acme-tls/1` alone (what the CA's validator sends, §3)
//! gets the challenge certificate for the name it asks for, or a handshake failure when
//! there is none; every other hello gets the site's certificate as before, and a server
//! still without one (the first certificate is the one being ordered) refuses them.

use crate::certificate::{self, Validity};
use crate::clock::CLOCK;
use crate::provider;
use crate::tickets::Ticketer;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate and key cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityError {
    /// The certificate file holds no PEM `CERTIFICATE` block.
    NoCertificate,
    /// A `CERTIFICATE` block is not valid PEM or base64.
    BadCertificatePem,
    /// The leaf certificate is not DER X.509 that webpki accepts.
    BadCertificate,
    /// The key file holds no PEM private key (PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`).
    NoKey,
    /// The key is neither ECDSA P-256 nor Ed25519.
    UnsupportedKey,
    /// The key is not the certificate's.
    KeyMismatch,
}

impl core::fmt::Display for IdentityError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::NoCertificate => "no PEM CERTIFICATE block in the certificate file",
            Self::BadCertificatePem => "a CERTIFICATE block is not valid PEM",
            Self::BadCertificate => "the certificate is not a valid X.509 certificate",
            Self::NoKey => "no PEM private key (PRIVATE KEY or EC PRIVATE KEY) in the key file",
            Self::UnsupportedKey => "the key is neither ECDSA P-256 nor Ed25519",
            Self::KeyMismatch => "the key does not belong to the certificate",
        })
    }
}

impl core::error::Error for IdentityError {}

/// A certificate chain with its key, checked to parse and to match.
#[derive(Debug, Clone)]
pub struct Identity {
    certified: Arc<CertifiedKey>,
    validity: Validity,
}

impl Identity {
    /// Parses a PEM chain (leaf first) and a PEM key, and checks that the key is the leaf's.
    pub fn from_pem(certificate_pem: &[u8], key_pem: &[u8]) -> Result<Self, IdentityError> {
        let chain = CertificateDer::pem_slice_iter(certificate_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| IdentityError::BadCertificatePem)?;
        let leaf = chain.first().ok_or(IdentityError::NoCertificate)?;
        webpki::EndEntityCert::try_from(leaf).map_err(|_| IdentityError::BadCertificate)?;
        let validity = certificate::validity(leaf).ok_or(IdentityError::BadCertificate)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| IdentityError::NoKey)?;
        let signing_key = rustls::crypto::KeyProvider::load_private_key(&provider::sign::Keys, key)
            .map_err(|_| IdentityError::UnsupportedKey)?;
        let certified = CertifiedKey::new(chain, signing_key);
        certified
            .keys_match()
            .map_err(|_| IdentityError::KeyMismatch)?;
        Ok(Self {
            certified: Arc::new(certified),
            validity,
        })
    }

    /// The leaf's validity period.
    pub fn validity(&self) -> Validity {
        self.validity
    }

    /// Whether the leaf certificate covers `name` (its subjectAltName DNS names, wildcards
    /// included, RFC 6125).
    pub fn covers(&self, name: &str) -> bool {
        let Ok(name) = ServerName::try_from(String::from(name)) else {
            return false;
        };
        let Some(leaf) = self.certified.cert.first() else {
            return false;
        };
        webpki::EndEntityCert::try_from(leaf)
            .map(|leaf| leaf.verify_is_valid_for_subject_name(&name).is_ok())
            .unwrap_or(false)
    }

    /// The key that signs each full handshake (what [`crate::hello::HandshakeCost`] prices).
    pub fn certificate_key(&self) -> crate::hello::CertificateKey {
        match self.certified.key.algorithm() {
            rustls::SignatureAlgorithm::ED25519 => crate::hello::CertificateKey::Ed25519,
            // Identity::from_pem takes only ECDSA P-256 besides.
            _ => crate::hello::CertificateKey::EcdsaP256,
        }
    }

    /// Bytes of the whole chain as sent in the Certificate message (for sizing buffers).
    pub fn chain_len(&self) -> usize {
        self.certified.cert.iter().map(|cert| cert.len() + 3).sum()
    }
}

/// Which server names (SNI) the server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SniPolicy {
    /// Any name, and none: one site.
    AnyName,
    /// Only names the certificate covers (clients that send no name are still answered);
    /// others get a handshake failure instead of a certificate they would reject anyway.
    CertificateNames,
}

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737 §6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The protocols the site is served with, in the server's order of preference (rustls
/// picks the first one the client also offers): HTTP/2, then HTTP/1.1.
pub const SITE_ALPN_PROTOCOLS: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The protocols the server negotiates, in its order of preference: `h2` and `http/1.1`
/// ([`SITE_ALPN_PROTOCOLS`]), then `acme-tls/1` while a TLS-ALPN-01 challenge is up.
pub fn alpn_protocols(acme_challenge: bool) -> Vec<Vec<u8>> {
    let mut protocols: Vec<Vec<u8>> = SITE_ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
    if acme_challenge {
        protocols.push(ACME_TLS_ALPN.to_vec());
    }
    protocols
}

/// A TLS-ALPN-01 answer: the self-signed certificate (with the acmeIdentifier extension)
/// served for one name to validators that ask for `acme-tls/1` only.
#[derive(Debug, Clone)]
pub struct AlpnChallenge {
    name: String,
    certified: Arc<CertifiedKey>,
}

impl AlpnChallenge {
    /// The answer for `name`: `certificate_der` for the SEC1 DER key `key_der` (ECDSA
    /// P-256), which signs the handshake.
    pub fn new(
        name: &str,
        certificate_der: Vec<u8>,
        key_der: Vec<u8>,
    ) -> Result<Self, IdentityError> {
        let key = PrivateKeyDer::Sec1(key_der.into());
        let signing_key = rustls::crypto::KeyProvider::load_private_key(&provider::sign::Keys, key)
            .map_err(|_| IdentityError::UnsupportedKey)?;
        // Not checked with `keys_match`: webpki refuses to parse a certificate with an
        // unknown critical extension, which acmeIdentifier is by design (§3); the caller
        // made both halves together.
        let certified = CertifiedKey::new(alloc::vec![certificate_der.into()], signing_key);
        Ok(Self {
            name: String::from(name),
            certified: Arc::new(certified),
        })
    }
}

/// Whether a ClientHello is a TLS-ALPN-01 validator's: its ALPN list is `acme-tls/1` alone.
fn asks_acme_tls<'h>(alpn: Option<impl Iterator<Item = &'h [u8]>>) -> bool {
    let Some(mut offered) = alpn else {
        return false;
    };
    offered.next() == Some(ACME_TLS_ALPN) && offered.next().is_none()
}

#[derive(Debug)]
struct Resolver {
    /// The site's certificate (`None`: only TLS-ALPN-01 validators are answered).
    identity: Option<Identity>,
    /// TLS-ALPN-01 answers up now.
    challenges: Vec<AlpnChallenge>,
    policy: SniPolicy,
    /// The certificate's dates have been checked against a set clock (and reported).
    checked: core::sync::atomic::AtomicBool,
}

impl Resolver {
    /// Once the clock is set, says on the console whether the certificate is valid now
    /// (it is served either way: plain HTTP never depends on it, and a client decides).
    fn check_dates(&self) {
        use core::sync::atomic::Ordering;
        let Some(now) = CLOCK.unix_seconds() else {
            return;
        };
        let Some(identity) = &self.identity else {
            return;
        };
        if self.checked.swap(true, Ordering::Relaxed) {
            return;
        }
        let validity = identity.validity;
        let now = now as i64;
        if now > validity.not_after {
            log::error!(
                "tls: the certificate expired {} days ago; browsers refuse it (renew it)",
                (now - validity.not_after) / 86_400
            );
        } else if now < validity.not_before {
            log::error!(
                "tls: the certificate is not valid for another {} days; browsers refuse it",
                (validity.not_before - now + 86_399) / 86_400
            );
        } else {
            log::info!(
                "tls: the certificate is valid for {} more days",
                (validity.not_after - now) / 86_400
            );
        }
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if asks_acme_tls(client_hello.alpn()) {
            // RFC 8737 §3: the certificate for the name asked for, or none.
            let name = client_hello.server_name()?;
            return self
                .challenges
                .iter()
                .find(|challenge| challenge.name.eq_ignore_ascii_case(name))
                .map(|challenge| challenge.certified.clone());
        }
        self.check_dates();
        let identity = self.identity.as_ref()?;
        match (self.policy, client_hello.server_name()) {
            (SniPolicy::CertificateNames, Some(name)) if !identity.covers(name) => None,
            _ => Some(identity.certified.clone()),
        }
    }
}

/// How long tickets are announced for: a day (their key rotates at the same pace).
pub const TICKET_LIFETIME_SECONDS: u32 = 24 * 60 * 60;

/// Why a server configuration cannot be made.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigError {
    /// The CSPRNG has no seed: TLS needs one before anything else.
    Unseeded,
    /// rustls refused the configuration (a bug if it ever happens).
    Rustls(rustls::Error),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Unseeded => f.write_str("no entropy seed: TLS is not started"),
            Self::Rustls(error) => write!(f, "TLS configuration: {error}"),
        }
    }
}

impl core::error::Error for ConfigError {}

/// The rustls server configuration for `identity`: TLS 1.3 and 1.2, ALPN `h2` and `http/1.1`, one
/// ticket per full handshake, the server's cipher order.
pub fn server_config(
    identity: Identity,
    policy: SniPolicy,
) -> Result<Arc<ServerConfig>, ConfigError> {
    server_config_with_challenges(Some(identity), policy, Vec::new())
}

/// [`server_config`] that also answers the TLS-ALPN-01 `challenges` (module docs); without
/// an `identity`, it answers only them.
pub fn server_config_with_challenges(
    identity: Option<Identity>,
    policy: SniPolicy,
    challenges: Vec<AlpnChallenge>,
) -> Result<Arc<ServerConfig>, ConfigError> {
    let acme_challenge = !challenges.is_empty();
    if !crate::random::RANDOM.is_seeded() {
        return Err(ConfigError::Unseeded);
    }
    let ticketer = Ticketer::new(TICKET_LIFETIME_SECONDS).ok_or(ConfigError::Unseeded)?;
    let mut config = ServerConfig::builder_with_details(
        Arc::new(provider::provider()),
        Arc::new(crate::clock::ClockRef(&CLOCK)),
    )
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(ConfigError::Rustls)?
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(Resolver {
        identity,
        challenges,
        policy,
        checked: core::sync::atomic::AtomicBool::new(false),
    }));
    config.alpn_protocols = alpn_protocols(acme_challenge);
    config.ignore_client_order = true;
    config.ticketer = Arc::new(ticketer);
    // Each ticket costs a seal and a record; one per handshake is what browsers use.
    config.send_tls13_tickets = 1;
    // Stateful TLS 1.2 resumption would need a session cache; tickets cover both versions.
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    // 0-RTT data can be replayed; a static site gains little from it.
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}
