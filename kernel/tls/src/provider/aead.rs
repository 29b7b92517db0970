//! The record ciphers: ChaCha20-Poly1305, AES-128-GCM and AES-256-GCM for TLS 1.3 (RFC 8446
//! §5.2) and TLS 1.2 (RFC 5288 for GCM's explicit nonce, RFC 7905 for ChaCha20-Poly1305).

use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::{AeadCore, AeadInPlace, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm};
use alloc::boxed::Box;
use chacha20poly1305::ChaCha20Poly1305;
use rustls::crypto::cipher::{
    AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, KeyBlockShape, MessageDecrypter,
    MessageEncrypter, NONCE_LEN, Nonce, OutboundOpaqueMessage, OutboundPlainMessage,
    PrefixedPayload, Tls12AeadAlgorithm, Tls13AeadAlgorithm, UnsupportedOperationError,
    make_tls12_aad, make_tls13_aad,
};
use rustls::{ConnectionTrafficSecrets, ContentType, Error, ProtocolVersion};

/// Every AEAD here has a 16-byte tag.
const TAG_LEN: usize = 16;
/// TLS 1.2 GCM records carry the last 8 nonce bytes in clear (RFC 5288 §3).
const GCM_EXPLICIT_NONCE_LEN: usize = 8;
/// The largest plaintext a record may carry (RFC 8446 §5.1).
const MAX_FRAGMENT_LEN: usize = 16_384;

/// One of the three record ciphers, named for rustls's secret extraction.
pub trait Cipher: AeadInPlace + KeyInit + Send + Sync + 'static {
    /// Key length in bytes.
    const KEY_LEN: usize;
    /// Nonce bytes a TLS 1.2 record carries in clear: 8 for GCM (RFC 5288 §3), 0 for
    /// ChaCha20-Poly1305 (RFC 7905 §2).
    const TLS12_EXPLICIT_NONCE_LEN: usize;
    /// The extracted-secrets form of a key and IV (kernel TLS offload; never used here).
    fn secrets(key: AeadKey, iv: Iv) -> ConnectionTrafficSecrets;
}

impl Cipher for ChaCha20Poly1305 {
    const KEY_LEN: usize = 32;
    const TLS12_EXPLICIT_NONCE_LEN: usize = 0;
    fn secrets(key: AeadKey, iv: Iv) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv }
    }
}

impl Cipher for Aes128Gcm {
    const KEY_LEN: usize = 16;
    const TLS12_EXPLICIT_NONCE_LEN: usize = GCM_EXPLICIT_NONCE_LEN;
    fn secrets(key: AeadKey, iv: Iv) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
    }
}

impl Cipher for Aes256Gcm {
    const KEY_LEN: usize = 32;
    const TLS12_EXPLICIT_NONCE_LEN: usize = GCM_EXPLICIT_NONCE_LEN;
    fn secrets(key: AeadKey, iv: Iv) -> ConnectionTrafficSecrets {
        ConnectionTrafficSecrets::Aes256Gcm { key, iv }
    }
}

fn cipher<C: Cipher>(key: &AeadKey) -> C {
    // rustls hands over exactly `key_len()` bytes (its key schedule derives them so).
    C::new_from_slice(key.as_ref()).expect("rustls derives keys of the suite's length")
}

/// A record cipher as rustls's TLS 1.3 and TLS 1.2 AEAD algorithms.
pub struct Aead<C>(core::marker::PhantomData<C>);

/// ChaCha20-Poly1305 (preferred where the CPU has no AES instructions: the ARM1176 has none).
pub static CHACHA20_POLY1305: Aead<ChaCha20Poly1305> = Aead(core::marker::PhantomData);
/// AES-128-GCM.
pub static AES_128_GCM: Aead<Aes128Gcm> = Aead(core::marker::PhantomData);
/// AES-256-GCM.
pub static AES_256_GCM: Aead<Aes256Gcm> = Aead(core::marker::PhantomData);

impl<C: Cipher> Tls13AeadAlgorithm for Aead<C> {
    fn encrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageEncrypter> {
        Box::new(Tls13Sealer {
            cipher: cipher::<C>(&key),
            iv,
        })
    }

    fn decrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageDecrypter> {
        Box::new(Tls13Opener {
            cipher: cipher::<C>(&key),
            iv,
        })
    }

    fn key_len(&self) -> usize {
        C::KEY_LEN
    }

    fn extract_keys(
        &self,
        key: AeadKey,
        iv: Iv,
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        Ok(C::secrets(key, iv))
    }
}

struct Tls13Sealer<C> {
    cipher: C,
    iv: Iv,
}

struct Tls13Opener<C> {
    cipher: C,
    iv: Iv,
}

fn nonce_of<C: AeadCore>(nonce: &Nonce) -> &GenericArray<u8, C::NonceSize> {
    GenericArray::from_slice(&nonce.0)
}

impl<C: Cipher> MessageEncrypter for Tls13Sealer<C> {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let total_len = self.encrypted_payload_len(msg.payload.len());
        let mut payload = PrefixedPayload::with_capacity(total_len);
        payload.extend_from_chunks(&msg.payload);
        payload.extend_from_slice(&msg.typ.to_array());
        let nonce = Nonce::new(&self.iv, seq);
        let aad = make_tls13_aad(total_len);
        let tag = self
            .cipher
            .encrypt_in_place_detached(nonce_of::<C>(&nonce), &aad, payload.as_mut())
            .map_err(|_| Error::EncryptError)?;
        payload.extend_from_slice(&tag);
        // Every TLS 1.3 record says TLS 1.2 on the outside (RFC 8446 §5.1).
        Ok(OutboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            payload,
        ))
    }

    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        payload_len + 1 + TAG_LEN
    }
}

impl<C: Cipher> MessageDecrypter for Tls13Opener<C> {
    fn decrypt<'a>(
        &mut self,
        mut msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        let payload = &mut msg.payload;
        let Some(plain_len) = payload.len().checked_sub(TAG_LEN) else {
            return Err(Error::DecryptError);
        };
        let nonce = Nonce::new(&self.iv, seq);
        let aad = make_tls13_aad(payload.len());
        let (text, tag) = payload.split_at_mut(plain_len);
        self.cipher
            .decrypt_in_place_detached(
                nonce_of::<C>(&nonce),
                &aad,
                text,
                GenericArray::from_slice(tag),
            )
            .map_err(|_| Error::DecryptError)?;
        payload.truncate(plain_len);
        msg.into_tls13_unpadded_message()
    }
}

impl<C: Cipher> Tls12AeadAlgorithm for Aead<C> {
    fn encrypter(&self, key: AeadKey, iv: &[u8], extra: &[u8]) -> Box<dyn MessageEncrypter> {
        Box::new(Tls12Sealer {
            cipher: cipher::<C>(&key),
            iv: tls12_iv(self.key_block_shape(), iv, extra),
            explicit_nonce: self.key_block_shape().explicit_nonce_len != 0,
        })
    }

    fn decrypter(&self, key: AeadKey, iv: &[u8]) -> Box<dyn MessageDecrypter> {
        Box::new(Tls12Opener {
            cipher: cipher::<C>(&key),
            iv: tls12_iv(self.key_block_shape(), iv, &[0; GCM_EXPLICIT_NONCE_LEN]),
            explicit_nonce: self.key_block_shape().explicit_nonce_len != 0,
        })
    }

    fn key_block_shape(&self) -> KeyBlockShape {
        KeyBlockShape {
            enc_key_len: C::KEY_LEN,
            fixed_iv_len: NONCE_LEN - C::TLS12_EXPLICIT_NONCE_LEN,
            explicit_nonce_len: C::TLS12_EXPLICIT_NONCE_LEN,
        }
    }

    fn extract_keys(
        &self,
        key: AeadKey,
        iv: &[u8],
        explicit: &[u8],
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        Ok(C::secrets(
            key,
            tls12_iv(self.key_block_shape(), iv, explicit),
        ))
    }
}

/// TLS 1.2's nonce base: for ChaCha20-Poly1305 the whole 12-byte IV from the key block; for
/// GCM the 4-byte salt followed by the 8 explicit bytes (which the sender then counts up).
fn tls12_iv(shape: KeyBlockShape, iv: &[u8], explicit: &[u8]) -> Iv {
    let mut bytes = [0u8; NONCE_LEN];
    if shape.explicit_nonce_len == 0 {
        bytes.copy_from_slice(&iv[..NONCE_LEN]);
    } else {
        bytes[..4].copy_from_slice(&iv[..4]);
        bytes[4..].copy_from_slice(&explicit[..GCM_EXPLICIT_NONCE_LEN]);
    }
    Iv::new(bytes)
}

struct Tls12Sealer<C> {
    cipher: C,
    iv: Iv,
    explicit_nonce: bool,
}

struct Tls12Opener<C> {
    cipher: C,
    iv: Iv,
    explicit_nonce: bool,
}

impl<C: Cipher> MessageEncrypter for Tls12Sealer<C> {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let total_len = self.encrypted_payload_len(msg.payload.len());
        let mut payload = PrefixedPayload::with_capacity(total_len);
        let nonce = Nonce::new(&self.iv, seq);
        let prefix = if self.explicit_nonce {
            payload.extend_from_slice(&nonce.0[4..]);
            GCM_EXPLICIT_NONCE_LEN
        } else {
            0
        };
        payload.extend_from_chunks(&msg.payload);
        let aad = make_tls12_aad(seq, msg.typ, msg.version, msg.payload.len());
        let tag = self
            .cipher
            .encrypt_in_place_detached(nonce_of::<C>(&nonce), &aad, &mut payload.as_mut()[prefix..])
            .map_err(|_| Error::EncryptError)?;
        payload.extend_from_slice(&tag);
        Ok(OutboundOpaqueMessage::new(msg.typ, msg.version, payload))
    }

    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        let explicit = if self.explicit_nonce {
            GCM_EXPLICIT_NONCE_LEN
        } else {
            0
        };
        payload_len + explicit + TAG_LEN
    }
}

impl<C: Cipher> MessageDecrypter for Tls12Opener<C> {
    fn decrypt<'a>(
        &mut self,
        mut msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        let prefix = if self.explicit_nonce {
            GCM_EXPLICIT_NONCE_LEN
        } else {
            0
        };
        let Some(plain_len) = msg.payload.len().checked_sub(prefix + TAG_LEN) else {
            return Err(Error::DecryptError);
        };
        let nonce = if self.explicit_nonce {
            let mut bytes = [0u8; NONCE_LEN];
            bytes[..4].copy_from_slice(&self.iv.as_ref()[..4]);
            bytes[4..].copy_from_slice(&msg.payload[..GCM_EXPLICIT_NONCE_LEN]);
            Nonce(bytes)
        } else {
            Nonce::new(&self.iv, seq)
        };
        let aad = make_tls12_aad(seq, msg.typ, msg.version, plain_len);
        let payload = &mut msg.payload;
        let (text, tag) = payload[prefix..].split_at_mut(plain_len);
        self.cipher
            .decrypt_in_place_detached(
                nonce_of::<C>(&nonce),
                &aad,
                text,
                GenericArray::from_slice(tag),
            )
            .map_err(|_| Error::DecryptError)?;
        if plain_len > MAX_FRAGMENT_LEN {
            return Err(Error::PeerSentOversizedRecord);
        }
        Ok(msg.into_plain_message_range(prefix..prefix + plain_len))
    }
}
