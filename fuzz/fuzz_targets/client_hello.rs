//! Fuzz target: the ClientHello view the handshake budget prices by
//! (`bramble_tls::hello::peek`). No input may panic; every prefix of a readable record is
//! `Incomplete` or its own verdict, and a read hello's price stays within the dearest one.
#![no_main]

use bramble_tls::hello::{CertificateKey, HandshakeCost, Peek, peek};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let verdict = peek(data);
    for key in [CertificateKey::EcdsaP256, CertificateKey::Ed25519] {
        let dearest = HandshakeCost::dearest(key);
        let price = match verdict {
            Peek::Hello(summary) => HandshakeCost::of(Some(summary), key),
            _ => dearest,
        };
        assert!(price.charged <= dearest.charged);
        assert!(price.signature <= price.charged);
    }
    if let Peek::Hello(_) | Peek::Unreadable = verdict {
        // A shorter prefix never reads as a different whole record.
        let half = data.len() / 2;
        assert!(!matches!(peek(&data[..half]), Peek::NotTls));
    }
});
