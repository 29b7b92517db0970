//! Signature verification for certificate chains and handshake signatures.
//!
//! [`ALGORITHMS`], the server provider's set: ECDSA P-256 with SHA-256 and Ed25519. The
//! server never verifies (no client certificates), so this set only shapes what it would
//! accept and stays as small as its own certificates.
//!
//! [`CLIENT_ALGORITHMS`], the ACME client's set: what public CAs use for their own servers
//! and chains. Let's Encrypt's roots are ISRG Root X1 (RSA-4096, PKCS#1 v1.5 with SHA-256)
//! and ISRG Root X2 (ECDSA P-384, SHA-384); its intermediates are RSA-2048 (R-series) or
//! P-384 (E-series), and its API servers answer TLS 1.3 with RSA-PSS or ECDSA P-256
//! handshake signatures. So besides the server's set: RSA PKCS#1 v1.5 and PSS with SHA-256,
//! -384 and -512 for moduli of 2048 to 4096 bits (RustCrypto `rsa`; smaller keys are weak,
//! larger ones cost the ARM1176 seconds per signature and no public CA uses them), and ECDSA
//! P-384 with SHA-384 (RustCrypto `p384`). PSS takes the salt length equal to the hash's, as
//! TLS 1.3 (RFC 8446 §4.2.3) and the RFC 4055 identifiers webpki matches require.

use pki_types::{AlgorithmIdentifier, InvalidSignature, SignatureVerificationAlgorithm, alg_id};
use rustls::SignatureScheme;
use rustls::crypto::WebPkiSupportedAlgorithms;

/// ECDSA P-256 / SHA-256 (the signature is DER, RFC 3279 §2.2.3).
#[derive(Debug)]
struct EcdsaP256Sha256;

impl SignatureVerificationAlgorithm for EcdsaP256Sha256 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        use p256::ecdsa::signature::Verifier;
        let key =
            p256::ecdsa::VerifyingKey::from_sec1_bytes(public_key).map_err(|_| InvalidSignature)?;
        let signature =
            p256::ecdsa::Signature::from_der(signature).map_err(|_| InvalidSignature)?;
        key.verify(message, &signature)
            .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_P256
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_SHA256
    }
}

/// Ed25519 (RFC 8410).
#[derive(Debug)]
struct Ed25519;

impl SignatureVerificationAlgorithm for Ed25519 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        let key: [u8; 32] = public_key.try_into().map_err(|_| InvalidSignature)?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|_| InvalidSignature)?;
        let signature =
            ed25519_dalek::Signature::from_slice(signature).map_err(|_| InvalidSignature)?;
        key.verify_strict(message, &signature)
            .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ED25519
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ED25519
    }
}

/// ECDSA P-384 / SHA-384 (the signature is DER).
#[derive(Debug)]
struct EcdsaP384Sha384;

impl SignatureVerificationAlgorithm for EcdsaP384Sha384 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        use p384::ecdsa::signature::Verifier;
        let key =
            p384::ecdsa::VerifyingKey::from_sec1_bytes(public_key).map_err(|_| InvalidSignature)?;
        let signature =
            p384::ecdsa::Signature::from_der(signature).map_err(|_| InvalidSignature)?;
        key.verify(message, &signature)
            .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_P384
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::ECDSA_SHA384
    }
}

/// Smallest and largest RSA modulus accepted, in bits.
pub const RSA_BITS: core::ops::RangeInclusive<u32> = 2048..=4096;

/// The RSA key in `public_key` (a DER RSAPublicKey, RFC 8017 §A.1.1, as webpki hands it
/// over), if its modulus is within [`RSA_BITS`].
fn rsa_key(public_key: &[u8]) -> Result<rsa::PublicKey, InvalidSignature> {
    use rsa::pkcs1::DecodeRsaPublicKey;
    use rsa::traits::PublicKeyParts;
    let key = rsa::PublicKey::from_pkcs1_der(public_key).map_err(|_| InvalidSignature)?;
    if !RSA_BITS.contains(&key.n().as_ref().bit_width()) {
        return Err(InvalidSignature);
    }
    Ok(key)
}

/// The RSA padding a verifier checks.
#[derive(Debug, Clone, Copy)]
enum Padding {
    Pkcs1,
    Pss,
}

/// RSA with `padding` and the hash `D` (one of SHA-256, -384, -512).
struct Rsa<D> {
    padding: Padding,
    signature_alg: AlgorithmIdentifier,
    hash: core::marker::PhantomData<D>,
}

impl<D> core::fmt::Debug for Rsa<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Rsa")
            .field("padding", &self.padding)
            .field("signature_alg", &self.signature_alg)
            .finish()
    }
}

impl<D> Rsa<D> {
    const fn new(padding: Padding, signature_alg: AlgorithmIdentifier) -> Self {
        Self {
            padding,
            signature_alg,
            hash: core::marker::PhantomData,
        }
    }
}

impl<D> SignatureVerificationAlgorithm for Rsa<D>
where
    D: rsa::sha2::digest::Digest
        + rsa::sha2::digest::FixedOutputReset
        + rsa::pkcs8::der::oid::AssociatedOid
        + Send
        + Sync,
{
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        use rsa::signature::Verifier;
        let key = rsa_key(public_key)?;
        match self.padding {
            Padding::Pkcs1 => {
                let signature =
                    rsa::pkcs1v15::Signature::try_from(signature).map_err(|_| InvalidSignature)?;
                rsa::pkcs1v15::VerifyingKey::<D>::new(key).verify(message, &signature)
            }
            Padding::Pss => {
                let signature =
                    rsa::pss::Signature::try_from(signature).map_err(|_| InvalidSignature)?;
                rsa::pss::VerifyingKey::<D>::new(key).verify(message, &signature)
            }
        }
        .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::RSA_ENCRYPTION
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        self.signature_alg
    }
}

use rsa::sha2::{Sha256, Sha384, Sha512};

static ECDSA_P256_SHA256: EcdsaP256Sha256 = EcdsaP256Sha256;
static ED25519: Ed25519 = Ed25519;
static ECDSA_P384_SHA384: EcdsaP384Sha384 = EcdsaP384Sha384;
static RSA_PKCS1_SHA256: Rsa<Sha256> = Rsa::new(Padding::Pkcs1, alg_id::RSA_PKCS1_SHA256);
static RSA_PKCS1_SHA384: Rsa<Sha384> = Rsa::new(Padding::Pkcs1, alg_id::RSA_PKCS1_SHA384);
static RSA_PKCS1_SHA512: Rsa<Sha512> = Rsa::new(Padding::Pkcs1, alg_id::RSA_PKCS1_SHA512);
static RSA_PSS_SHA256: Rsa<Sha256> = Rsa::new(Padding::Pss, alg_id::RSA_PSS_SHA256);
static RSA_PSS_SHA384: Rsa<Sha384> = Rsa::new(Padding::Pss, alg_id::RSA_PSS_SHA384);
static RSA_PSS_SHA512: Rsa<Sha512> = Rsa::new(Padding::Pss, alg_id::RSA_PSS_SHA512);

/// The algorithms, and which TLS signature scheme each one checks.
pub static ALGORITHMS: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
    all: &[&ECDSA_P256_SHA256, &ED25519],
    mapping: &[
        (
            SignatureScheme::ECDSA_NISTP256_SHA256,
            &[&ECDSA_P256_SHA256],
        ),
        (SignatureScheme::ED25519, &[&ED25519]),
    ],
};

/// The ACME client's algorithms (module docs), preferred first: the ECDSA schemes, cheapest
/// to verify on the ARM1176 per unit of security, then RSA-PSS, then PKCS#1 v1.5.
pub static CLIENT_ALGORITHMS: WebPkiSupportedAlgorithms = WebPkiSupportedAlgorithms {
    all: &[
        &ECDSA_P256_SHA256,
        &ECDSA_P384_SHA384,
        &ED25519,
        &RSA_PSS_SHA256,
        &RSA_PSS_SHA384,
        &RSA_PSS_SHA512,
        &RSA_PKCS1_SHA256,
        &RSA_PKCS1_SHA384,
        &RSA_PKCS1_SHA512,
    ],
    mapping: &[
        (
            SignatureScheme::ECDSA_NISTP256_SHA256,
            &[&ECDSA_P256_SHA256],
        ),
        (
            SignatureScheme::ECDSA_NISTP384_SHA384,
            &[&ECDSA_P384_SHA384],
        ),
        (SignatureScheme::ED25519, &[&ED25519]),
        (SignatureScheme::RSA_PSS_SHA256, &[&RSA_PSS_SHA256]),
        (SignatureScheme::RSA_PSS_SHA384, &[&RSA_PSS_SHA384]),
        (SignatureScheme::RSA_PSS_SHA512, &[&RSA_PSS_SHA512]),
        (SignatureScheme::RSA_PKCS1_SHA256, &[&RSA_PKCS1_SHA256]),
        (SignatureScheme::RSA_PKCS1_SHA384, &[&RSA_PKCS1_SHA384]),
        (SignatureScheme::RSA_PKCS1_SHA512, &[&RSA_PKCS1_SHA512]),
    ],
};
