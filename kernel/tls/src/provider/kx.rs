//! Key exchange: X25519 (RFC 7748) and secp256r1 ECDH (RFC 8446 §4.2.8.2), ephemeral keys
//! drawn from the seeded CSPRNG.

use crate::random::RANDOM;
use alloc::boxed::Box;
use rustls::crypto::{ActiveKeyExchange, SharedSecret, SupportedKxGroup};
use rustls::{Error, NamedGroup, PeerMisbehaved};

/// X25519, the group every modern client offers first.
#[derive(Debug)]
pub struct X25519;

/// secp256r1 (P-256), for clients that offer no X25519.
#[derive(Debug)]
pub struct Secp256r1;

fn random_bytes() -> Result<[u8; 32], Error> {
    let mut bytes = [0u8; 32];
    RANDOM
        .fill_bytes(&mut bytes)
        .map_err(|_| rustls::crypto::GetRandomFailed)?;
    Ok(bytes)
}

impl SupportedKxGroup for X25519 {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        let secret = x25519_dalek::StaticSecret::from(random_bytes()?);
        let public = x25519_dalek::PublicKey::from(&secret);
        Ok(Box::new(X25519Exchange { secret, public }))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

struct X25519Exchange {
    secret: x25519_dalek::StaticSecret,
    public: x25519_dalek::PublicKey,
}

impl ActiveKeyExchange for X25519Exchange {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, Error> {
        let peer: [u8; 32] = peer_pub_key
            .try_into()
            .map_err(|_| PeerMisbehaved::InvalidKeyShare)?;
        let shared = self
            .secret
            .diffie_hellman(&x25519_dalek::PublicKey::from(peer));
        // An all-zero result means a small-order peer point: refuse it (RFC 8446 §7.4.2).
        if !shared.was_contributory() {
            return Err(PeerMisbehaved::InvalidKeyShare.into());
        }
        Ok(SharedSecret::from(&shared.as_bytes()[..]))
    }

    fn pub_key(&self) -> &[u8] {
        self.public.as_bytes()
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

impl SupportedKxGroup for Secp256r1 {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        // A uniformly random 32-byte string is a valid scalar except with probability about
        // 2^-32 (zero or not below the group order); draw again in that case.
        for _ in 0..4 {
            if let Ok(secret) = p256::SecretKey::from_slice(&random_bytes()?) {
                use p256::elliptic_curve::sec1::ToSec1Point;
                let point = secret.public_key().to_sec1_point(false);
                let mut public = [0u8; 65];
                public.copy_from_slice(point.as_bytes());
                return Ok(Box::new(Secp256r1Exchange { secret, public }));
            }
        }
        Err(rustls::crypto::GetRandomFailed.into())
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::secp256r1
    }
}

struct Secp256r1Exchange {
    secret: p256::SecretKey,
    /// The uncompressed point, the only form TLS 1.3 allows (RFC 8446 §4.2.8.2).
    public: [u8; 65],
}

impl ActiveKeyExchange for Secp256r1Exchange {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, Error> {
        if peer_pub_key.len() != 65 || peer_pub_key[0] != 4 {
            return Err(PeerMisbehaved::InvalidKeyShare.into());
        }
        // from_sec1_bytes checks that the point is on the curve.
        let peer = p256::PublicKey::from_sec1_bytes(peer_pub_key)
            .map_err(|_| PeerMisbehaved::InvalidKeyShare)?;
        let shared = p256::ecdh::diffie_hellman(self.secret.to_nonzero_scalar(), peer.as_affine());
        Ok(SharedSecret::from(&shared.raw_secret_bytes()[..]))
    }

    fn pub_key(&self) -> &[u8] {
        &self.public
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::secp256r1
    }
}
