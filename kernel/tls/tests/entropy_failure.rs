//! What a hardware RNG that fails its health tests at an hourly reseed does to HTTPS: the
//! board's schedule ([`bramble_tls::reseed::Seeding`]) over the real global CSPRNG, with a
//! source that goes stuck. Its own test binary: it breaks the process's generator for good.

use bramble_tls::random::RANDOM;
use bramble_tls::reseed::{Poll, RESEED_MICROS, SeedProblem, Seeding};
use bramble_tls::session::MAX_RECORD_LEN;
use bramble_tls::{Application, ConfigError, Identity, Phase, SniPolicy, TlsSession};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection};
use std::sync::Arc;

const CA: &[u8] = include_bytes!("data/ca.pem");
const P256_CERT: &[u8] = include_bytes!("data/p256.pem");
const P256_SEC1: &[u8] = include_bytes!("data/p256.key");

/// Echoes nothing; the handshake is what is tested.
struct Quiet;

impl Application for Quiet {
    fn receive(&mut self, data: &[u8]) -> usize {
        data.len()
    }

    fn transmit(&mut self, _: &mut [u8]) -> usize {
        0
    }
}

fn client() -> Arc<ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(CA) {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(
        ClientConfig::builder_with_provider(Arc::new(bramble_tls::provider::provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Runs a handshake between `client` (already made: its hello is drawn) and a fresh server
/// session; returns the server's phase when the exchange settles.
fn handshake(mut client: ClientConnection, server: Arc<rustls::ServerConfig>) -> Phase {
    let (mut incoming, mut outgoing) = (vec![0u8; MAX_RECORD_LEN], vec![0u8; 8192]);
    let mut session = TlsSession::new(server, &mut incoming, &mut outgoing).unwrap();
    let mut wire = Vec::new();
    for _ in 0..100 {
        while client.wants_write() {
            client.write_tls(&mut wire).unwrap();
        }
        let mut progress = false;
        while !wire.is_empty() {
            match session.receive(&mut Quiet, &wire) {
                Ok(0) | Err(_) => break,
                Ok(taken) => {
                    wire.drain(..taken);
                    progress = true;
                }
            }
        }
        let _ = session.poll(&mut Quiet);
        let mut chunk = vec![0u8; 4096];
        loop {
            let written = session.transmit(&mut Quiet, &mut chunk);
            if written == 0 {
                break;
            }
            progress = true;
            let mut reader = &chunk[..written];
            while !reader.is_empty() {
                client.read_tls(&mut reader).unwrap();
                if client.process_new_packets().is_err() {
                    return session.phase();
                }
            }
        }
        if !progress && !client.wants_write() {
            break;
        }
    }
    session.phase()
}

fn good_source(state: &mut u32) -> impl FnMut(&mut [u8]) -> Result<(), usize> + '_ {
    move |out: &mut [u8]| {
        for byte in out.iter_mut() {
            *state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            *byte = (*state >> 24) as u8;
        }
        Ok(())
    }
}

#[test]
fn a_health_failure_at_a_reseed_turns_https_off_without_a_panic() {
    let mut seeding = Seeding::new();
    let mut state = 11;
    seeding
        .seed_at_boot(1, &RANDOM, &mut good_source(&mut state))
        .unwrap();
    bramble_tls::clock::CLOCK.set(1_764_000_000 * 1_000_000, 0);
    let identity = || Identity::from_pem(P256_CERT, P256_SEC1).unwrap();
    let server = bramble_tls::server_config(identity(), SniPolicy::AnyName).unwrap();
    let client = client();
    let name = || ServerName::try_from("bramble.test").unwrap();
    assert_eq!(
        handshake(
            ClientConnection::new(client.clone(), name()).unwrap(),
            server.clone()
        ),
        Phase::Open,
        "before the failure"
    );

    // The next client's hello is already drawn; then an hour passes and the source is stuck.
    let waiting = ClientConnection::new(client.clone(), name()).unwrap();
    let mut stuck = |out: &mut [u8]| {
        out.fill(0);
        Ok(())
    };
    let result = seeding.poll(1 + RESEED_MICROS, &RANDOM, &mut stuck);
    assert!(
        matches!(result, Poll::Failed(SeedProblem::Health(_))),
        "{result:?}"
    );
    assert!(RANDOM.has_failed());

    // A new handshake on the running configuration is refused, cleanly.
    assert_ne!(handshake(waiting, server), Phase::Open);
    // A new configuration (a renewed certificate) is refused too.
    assert!(matches!(
        bramble_tls::server_config(identity(), SniPolicy::AnyName),
        Err(ConfigError::Unseeded)
    ));
    // And a healthy source later does not bring HTTPS back before a reboot.
    assert_eq!(
        seeding.poll(1 + 3 * RESEED_MICROS, &RANDOM, &mut good_source(&mut state)),
        Poll::Stopped
    );
    assert!(!RANDOM.is_seeded());
}
