//! The server's signing keys: ECDSA P-256 with SHA-256 (PKCS#8 or SEC1) and Ed25519 (PKCS#8).

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};
use rustls::crypto::KeyProvider;
use rustls::sign::{Signer, SigningKey};
use rustls::{Error, SignatureAlgorithm, SignatureScheme};

/// DER of a SubjectPublicKeyInfo for an uncompressed P-256 point, up to the point itself
/// (RFC 5480 §2: id-ecPublicKey, secp256r1, BIT STRING of 66 bytes).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// DER of a SubjectPublicKeyInfo for an Ed25519 key, up to the key (RFC 8410 §4).
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// Loads the key kinds this provider can sign with.
#[derive(Debug)]
pub struct Keys;

impl KeyProvider for Keys {
    fn load_private_key(
        &self,
        key_der: PrivateKeyDer<'static>,
    ) -> Result<Arc<dyn SigningKey>, Error> {
        let unsupported = || Error::General("the key is neither ECDSA P-256 nor Ed25519".into());
        match &key_der {
            PrivateKeyDer::Pkcs8(der) => {
                use ed25519_dalek::pkcs8::DecodePrivateKey as _;
                use p256::pkcs8::DecodePrivateKey as _;
                if let Ok(key) = p256::ecdsa::SigningKey::from_pkcs8_der(der.secret_pkcs8_der()) {
                    return Ok(Arc::new(EcdsaP256Key::new(key)));
                }
                if let Ok(key) = ed25519_dalek::SigningKey::from_pkcs8_der(der.secret_pkcs8_der()) {
                    return Ok(Arc::new(Ed25519Key::new(key)));
                }
                Err(unsupported())
            }
            PrivateKeyDer::Sec1(der) => p256::SecretKey::from_sec1_der(der.secret_sec1_der())
                .map(|secret| Arc::new(EcdsaP256Key::new(secret.into())) as Arc<dyn SigningKey>)
                .map_err(|_| unsupported()),
            _ => Err(unsupported()),
        }
    }
}

/// An ECDSA P-256 key (RFC 8446 §4.2.3 ecdsa_secp256r1_sha256; deterministic nonces, RFC 6979).
pub struct EcdsaP256Key {
    key: Arc<p256::ecdsa::SigningKey>,
    spki: Vec<u8>,
}

impl EcdsaP256Key {
    fn new(key: p256::ecdsa::SigningKey) -> Self {
        let point = key.verifying_key().to_sec1_point(false);
        let mut spki = Vec::with_capacity(P256_SPKI_PREFIX.len() + point.len());
        spki.extend_from_slice(&P256_SPKI_PREFIX);
        spki.extend_from_slice(point.as_bytes());
        Self {
            key: Arc::new(key),
            spki,
        }
    }
}

impl core::fmt::Debug for EcdsaP256Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EcdsaP256Key")
    }
}

impl SigningKey for EcdsaP256Key {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        offered
            .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
            .then(|| Box::new(EcdsaP256Signer(self.key.clone())) as Box<dyn Signer>)
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        Some(SubjectPublicKeyInfoDer::from(&self.spki[..]))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::ECDSA
    }
}

struct EcdsaP256Signer(Arc<p256::ecdsa::SigningKey>);

impl core::fmt::Debug for EcdsaP256Signer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EcdsaP256Signer")
    }
}

impl Signer for EcdsaP256Signer {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        use p256::ecdsa::signature::Signer as _;
        let signature: p256::ecdsa::Signature = self
            .0
            .try_sign(message)
            .map_err(|_| Error::General("ECDSA signing failed".into()))?;
        Ok(signature.to_der().as_bytes().to_vec())
    }

    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::ECDSA_NISTP256_SHA256
    }
}

/// An Ed25519 key (RFC 8446 §4.2.3 ed25519).
pub struct Ed25519Key {
    key: Arc<ed25519_dalek::SigningKey>,
    spki: Vec<u8>,
}

impl Ed25519Key {
    fn new(key: ed25519_dalek::SigningKey) -> Self {
        let mut spki = Vec::with_capacity(ED25519_SPKI_PREFIX.len() + 32);
        spki.extend_from_slice(&ED25519_SPKI_PREFIX);
        spki.extend_from_slice(key.verifying_key().as_bytes());
        Self {
            key: Arc::new(key),
            spki,
        }
    }
}

impl core::fmt::Debug for Ed25519Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Ed25519Key")
    }
}

impl SigningKey for Ed25519Key {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        offered
            .contains(&SignatureScheme::ED25519)
            .then(|| Box::new(Ed25519Signer(self.key.clone())) as Box<dyn Signer>)
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        Some(SubjectPublicKeyInfoDer::from(&self.spki[..]))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::ED25519
    }
}

struct Ed25519Signer(Arc<ed25519_dalek::SigningKey>);

impl core::fmt::Debug for Ed25519Signer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Ed25519Signer")
    }
}

impl Signer for Ed25519Signer {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        use ed25519_dalek::Signer as _;
        Ok(self.0.sign(message).to_bytes().to_vec())
    }

    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::ED25519
    }
}
