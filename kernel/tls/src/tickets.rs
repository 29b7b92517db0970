//! Session tickets (RFC 8446 §4.6.1, RFC 5077): the resumption state sealed with
//! ChaCha20-Poly1305 under a key drawn from the CSPRNG. Keys rotate every ticket lifetime and
//! the previous key still opens tickets, so a ticket lives between one and two lifetimes at
//! most, and a reboot forgets them all.

use crate::clock::CLOCK;
use crate::random::RANDOM;
use alloc::vec::Vec;
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce, Tag};
use rustls::server::ProducesTickets;

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

struct Keys {
    current: ChaCha20Poly1305,
    previous: Option<ChaCha20Poly1305>,
    /// Uptime second at which `current` was made.
    made_at: u64,
}

/// Seals and opens tickets; [`Ticketer::new`] fails until the CSPRNG is seeded.
pub struct Ticketer {
    keys: spin::Mutex<Keys>,
    lifetime: u32,
}

impl core::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Ticketer (lifetime {} s)", self.lifetime)
    }
}

fn fresh_key() -> Option<ChaCha20Poly1305> {
    let mut key = [0u8; 32];
    RANDOM.fill_bytes(&mut key).ok()?;
    Some(ChaCha20Poly1305::new(Key::from_slice(&key)))
}

impl Ticketer {
    /// A ticketer whose tickets are announced with `lifetime_seconds` (rustls caps it at
    /// 7 days); `None` while the CSPRNG has no seed.
    pub fn new(lifetime_seconds: u32) -> Option<Self> {
        Some(Self {
            keys: spin::Mutex::new(Keys {
                current: fresh_key()?,
                previous: None,
                made_at: CLOCK.uptime_seconds(),
            }),
            lifetime: lifetime_seconds,
        })
    }

    fn rotate_if_due(&self, keys: &mut Keys) {
        let now = CLOCK.uptime_seconds();
        if now.saturating_sub(keys.made_at) >= u64::from(self.lifetime)
            && let Some(key) = fresh_key()
        {
            keys.previous = Some(core::mem::replace(&mut keys.current, key));
            keys.made_at = now;
        }
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.lifetime
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut keys = self.keys.lock();
        self.rotate_if_due(&mut keys);
        let mut ticket = Vec::with_capacity(NONCE_LEN + plain.len() + TAG_LEN);
        let mut nonce = [0u8; NONCE_LEN];
        RANDOM.fill_bytes(&mut nonce).ok()?;
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(plain);
        let tag = keys
            .current
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), b"", &mut ticket[NONCE_LEN..])
            .ok()?;
        ticket.extend_from_slice(&tag);
        Some(ticket)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let body_len = cipher.len().checked_sub(NONCE_LEN + TAG_LEN)?;
        let (nonce, rest) = cipher.split_at(NONCE_LEN);
        let (body, tag) = rest.split_at(body_len);
        let mut keys = self.keys.lock();
        self.rotate_if_due(&mut keys);
        let Keys {
            current, previous, ..
        } = &*keys;
        for key in core::iter::once(current).chain(previous.iter()) {
            let mut plain = body.to_vec();
            if key
                .decrypt_in_place_detached(
                    Nonce::from_slice(nonce),
                    b"",
                    &mut plain,
                    Tag::from_slice(tag),
                )
                .is_ok()
            {
                return Some(plain);
            }
        }
        None
    }
}
