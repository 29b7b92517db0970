//! Fuzz target: the TLS server's untrusted inputs. The first byte picks one: a certificate's
//! DER (the validity and renewal-information readers), a PEM chain and key split at the second byte (what the card
//! holds), or bytes from a client fed to a session in pieces (what the network sends). None
//! may panic; a session must either go on or end with an error, never both.
#![no_main]

use bramble_tls::random::RANDOM;
use bramble_tls::session::{MAX_RECORD_LEN, TlsSession};
use bramble_tls::{Application, Identity, SniPolicy};
use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};

const CERT: &[u8] = include_bytes!("../../kernel/tls/tests/data/p256.pem");
const KEY: &[u8] = include_bytes!("../../kernel/tls/tests/data/p256.key");

struct Sink;

impl Application for Sink {
    fn receive(&mut self, data: &[u8]) -> usize {
        data.len()
    }
    fn transmit(&mut self, out: &mut [u8]) -> usize {
        out.fill(b'x');
        out.len().min(100)
    }
}

fn config() -> Arc<bramble_tls::ServerConfig> {
    static CONFIG: OnceLock<Arc<bramble_tls::ServerConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            RANDOM.seed(&[1; 32]).unwrap();
            let identity = Identity::from_pem(CERT, KEY).unwrap();
            bramble_tls::server_config(identity, SniPolicy::CertificateNames).unwrap()
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => {
            if let Some(validity) = bramble_tls::certificate::validity(rest) {
                let _ = validity.contains(0);
            }
            let _ = bramble_tls::certificate::renewal_parts(rest);
        }
        1 => {
            let split = rest.first().map_or(0, |&b| usize::from(b)).min(rest.len());
            let (certificate, key) = rest.split_at(split);
            let _ = Identity::from_pem(certificate, key);
        }
        _ => {
            let mut incoming = vec![0u8; MAX_RECORD_LEN];
            let mut outgoing = vec![0u8; 8192];
            let mut session = TlsSession::new(config(), &mut incoming, &mut outgoing).unwrap();
            let mut out = [0u8; 2048];
            for chunk in rest.chunks(97) {
                let result = session.receive(&mut Sink, chunk);
                let _ = session.transmit(&mut Sink, &mut out);
                if result.is_err() {
                    assert!(session.error().is_some());
                    break;
                }
            }
        }
    }
});
