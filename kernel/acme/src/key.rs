//! ECDSA P-256 keys made on the device: the ACME account key (JWS ES256, RFC 7518 §3.4) and
//! the certificate's key (CSR and TLS), with the encodings each use needs.

use crate::der::{self, oid, tag};
use alloc::vec::Vec;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};

/// A P-256 private key.
#[derive(Clone)]
pub struct EcKey {
    signing: SigningKey,
}

impl core::fmt::Debug for EcKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EcKey(P-256)")
    }
}

impl PartialEq for EcKey {
    fn eq(&self, other: &Self) -> bool {
        self.secret() == other.secret()
    }
}

impl EcKey {
    /// The key whose secret scalar is `secret` (big-endian); `None` if it is zero or not
    /// below the group order.
    pub fn from_secret(secret: &[u8; 32]) -> Option<Self> {
        SigningKey::from_slice(secret)
            .ok()
            .map(|signing| Self { signing })
    }

    /// A new key from the CSPRNG behind `fill` (which must give uniformly random bytes).
    /// Draws again in the 2^-32 case that 32 bytes are not a valid scalar.
    pub fn generate(fill: &mut dyn FnMut(&mut [u8])) -> Self {
        loop {
            let mut secret = [0u8; 32];
            fill(&mut secret);
            if let Some(key) = Self::from_secret(&secret) {
                return key;
            }
        }
    }

    /// The secret scalar, big-endian (for the store).
    pub fn secret(&self) -> [u8; 32] {
        self.signing.to_bytes().into()
    }

    /// The public point, uncompressed SEC1 (0x04, x, y).
    pub fn public_point(&self) -> [u8; 65] {
        let encoded = self.signing.verifying_key().to_sec1_point(false);
        let bytes = encoded.as_bytes();
        let mut point = [0u8; 65];
        // An uncompressed P-256 point is always 65 bytes.
        if bytes.len() == 65 {
            point.copy_from_slice(bytes);
        }
        point
    }

    /// ES256 signature of `message`: r and s, 32 bytes each (the JWS form, RFC 7518 §3.4).
    pub fn sign_fixed(&self, message: &[u8]) -> [u8; 64] {
        let signature: Signature = self.signing.sign(message);
        signature.to_bytes().into()
    }

    /// ECDSA-with-SHA256 signature of `message` as DER Ecdsa-Sig-Value (X.509, RFC 3279).
    pub fn sign_der(&self, message: &[u8]) -> Vec<u8> {
        let fixed = self.sign_fixed(message);
        der::sequence(&[
            &der::unsigned_integer(&fixed[..32]),
            &der::unsigned_integer(&fixed[32..]),
        ])
    }

    /// SubjectPublicKeyInfo (RFC 5480).
    pub fn subject_public_key_info(&self) -> Vec<u8> {
        let algorithm = der::sequence(&[
            &der::wrap(tag::OID, oid::EC_PUBLIC_KEY),
            &der::wrap(tag::OID, oid::PRIME256V1),
        ]);
        der::sequence(&[&algorithm, &der::bit_string(&self.public_point())])
    }

    /// The private key as SEC1 ECPrivateKey DER (RFC 5915), which the TLS server loads.
    pub fn sec1_der(&self) -> Vec<u8> {
        der::sequence(&[
            &der::wrap(tag::INTEGER, &[1]),
            &der::wrap(tag::OCTET_STRING, &self.secret()),
            &der::explicit(0, &der::wrap(tag::OID, oid::PRIME256V1)),
            &der::explicit(1, &der::bit_string(&self.public_point())),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::VerifyingKey;
    use p256::ecdsa::signature::Verifier;

    #[test]
    fn signatures_verify_and_secrets_round_trip() {
        let mut counter = 1u8;
        let key = EcKey::generate(&mut |out| {
            for b in out.iter_mut() {
                *b = counter;
                counter = counter.wrapping_mul(31).wrapping_add(7);
            }
        });
        let again = EcKey::from_secret(&key.secret()).unwrap();
        assert_eq!(key.public_point(), again.public_point());
        assert_eq!(key.public_point()[0], 4);
        let signature = key.sign_fixed(b"message");
        let verifier = VerifyingKey::from_sec1_bytes(&key.public_point()).unwrap();
        let parsed = Signature::from_slice(&signature).unwrap();
        verifier.verify(b"message", &parsed).unwrap();
        let der = key.sign_der(b"other");
        let parsed = Signature::from_der(&der).unwrap();
        verifier.verify(b"other", &parsed).unwrap();
    }

    #[test]
    fn zero_and_order_are_not_keys() {
        assert!(EcKey::from_secret(&[0; 32]).is_none());
        assert!(EcKey::from_secret(&[0xff; 32]).is_none());
    }
}
