//! HMAC-SHA-256 and HMAC-SHA-384 for rustls (HKDF in TLS 1.3, the PRF in TLS 1.2).

use alloc::boxed::Box;
use hmac::{Mac, SimpleHmac};
use rustls::crypto::hmac::{Hmac, Key, Tag};
use sha2::Digest;

/// A rustls HMAC over one RustCrypto digest type.
pub struct HmacSha<D>(core::marker::PhantomData<D>);

/// HMAC-SHA-256.
pub static HMAC_SHA256: HmacSha<sha2::Sha256> = HmacSha(core::marker::PhantomData);
/// HMAC-SHA-384.
pub static HMAC_SHA384: HmacSha<sha2::Sha384> = HmacSha(core::marker::PhantomData);

impl<D> Hmac for HmacSha<D>
where
    D: Digest + hmac::digest::core_api::BlockSizeUser + Clone + Send + Sync + 'static,
{
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        // HMAC takes a key of any length (RFC 2104 §3), so this cannot fail.
        Box::new(KeyedHmac(
            <SimpleHmac<D> as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC accepts keys of any length"),
        ))
    }

    fn hash_output_len(&self) -> usize {
        <D as Digest>::output_size()
    }
}

struct KeyedHmac<D: Digest + hmac::digest::core_api::BlockSizeUser>(SimpleHmac<D>);

impl<D> Key for KeyedHmac<D>
where
    D: Digest + hmac::digest::core_api::BlockSizeUser + Clone + Send + Sync + 'static,
{
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut mac = self.0.clone();
        mac.update(first);
        for part in middle {
            mac.update(part);
        }
        mac.update(last);
        Tag::new(&mac.finalize().into_bytes())
    }

    fn tag_len(&self) -> usize {
        <D as Digest>::output_size()
    }
}
