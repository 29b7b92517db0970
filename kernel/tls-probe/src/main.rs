//! Measures the TLS server on the target: boots like the kernel, runs rustls's client and
//! Bramble's TLS session against each other in memory, and prints the guest time each server
//! step took. Under QEMU `-icount shift=0` one guest nanosecond is one instruction, so the
//! figures are instruction counts. Only the server's calls are timed.
//!
//! Run: `cargo tls-probe` builds it; `qemu-system-arm -M raspi1ap -nographic -icount shift=0
//! -kernel target/kernel/armv6-none-eabihf/release/bramble-tls-probe`.
#![no_std]
#![no_main]
// A bare-metal binary like the kernel: driver statics at the SoC's fixed addresses, the
// entry points the boot stub calls, its heap and the critical section (IRQs masked). Every
// unsafe block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

extern crate alloc;

mod client;
mod heap;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use bramble_bcm2835::timer::SystemTimer;
use bramble_bcm2835::uart::Pl011;
use bramble_boot::ExceptionFrame;
use bramble_tls::random::RANDOM;
use bramble_tls::session::{MAX_RECORD_LEN, TlsSession};
use bramble_tls::{Application, Identity, SniPolicy};
use core::fmt::Write;

// SAFETY: the probe is the only code touching these peripherals.
static CONSOLE: Pl011 = unsafe { Pl011::new() };
// SAFETY: as above.
static TIMER: SystemTimer = unsafe { SystemTimer::new() };

struct Console;

impl Write for Console {
    fn write_str(&mut self, text: &str) -> core::fmt::Result {
        for byte in text.bytes() {
            if byte == b'\n' {
                CONSOLE.write_byte(b'\r');
            }
            CONSOLE.write_byte(byte);
        }
        Ok(())
    }
}

macro_rules! say {
    ($($arg:tt)*) => {{ let _ = writeln!(Console, $($arg)*); }};
}

const CA: &[u8] = include_bytes!("../../tls/tests/data/ca.pem");
const P256_CERT: &[u8] = include_bytes!("../../tls/tests/data/p256.pem");
const P256_KEY: &[u8] = include_bytes!("../../tls/tests/data/p256.key");
const ED25519_CERT: &[u8] = include_bytes!("../../tls/tests/data/ed25519.pem");
const ED25519_KEY: &[u8] = include_bytes!("../../tls/tests/data/ed25519.key");
// Chains shaped like Let's Encrypt's (kernel/tls/tests/data/chains/make.sh), and signatures
// made by openssl over message.bin.
const RSA_ROOT: &[u8] = include_bytes!("../../tls/tests/data/chains/rsa-root.pem");
const RSA_INT: &[u8] = include_bytes!("../../tls/tests/data/chains/rsa-int.pem");
const RSA_LEAF: &[u8] = include_bytes!("../../tls/tests/data/chains/rsa-leaf.pem");
const EC_ROOT: &[u8] = include_bytes!("../../tls/tests/data/chains/ec-root.pem");
const EC_INT: &[u8] = include_bytes!("../../tls/tests/data/chains/ec-int.pem");
const EC_LEAF: &[u8] = include_bytes!("../../tls/tests/data/chains/ec-leaf.pem");
const MESSAGE: &[u8] = include_bytes!("../../tls/tests/data/chains/message.bin");
const RSA2048: &[u8] = include_bytes!("../../tls/tests/data/chains/rsa2048.pub.der");
const RSA4096: &[u8] = include_bytes!("../../tls/tests/data/chains/rsa4096.pub.der");
const P384: &[u8] = include_bytes!("../../tls/tests/data/chains/p384.pub.der");
const SIG_RSA2048_PSS: &[u8] =
    include_bytes!("../../tls/tests/data/chains/sig-rsa2048-pss-sha256.bin");
const SIG_RSA2048_PKCS1: &[u8] =
    include_bytes!("../../tls/tests/data/chains/sig-rsa2048-pkcs1-sha256.bin");
const SIG_RSA4096_PKCS1: &[u8] =
    include_bytes!("../../tls/tests/data/chains/sig-rsa4096-pkcs1-sha256.bin");
const SIG_P384: &[u8] = include_bytes!("../../tls/tests/data/chains/sig-p384-sha384.bin");

/// Guest nanoseconds (instructions under -icount shift=0) of `f`, a server step: its heap
/// use is counted as the server's.
fn measure<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let start = TIMER.micros();
    let result = heap::as_server(f);
    (result, (TIMER.micros() - start) * 1000)
}

/// Answers every request with a fixed page, as the HTTP engine would after its lookup.
struct Page {
    body: Vec<u8>,
    sent: usize,
    requests: usize,
}

impl Application for Page {
    fn receive(&mut self, data: &[u8]) -> usize {
        self.requests += data.windows(4).filter(|w| w == b"\r\n\r\n").count();
        data.len()
    }

    fn transmit(&mut self, out: &mut [u8]) -> usize {
        if self.requests == 0 {
            return 0;
        }
        let count = out.len().min(self.body.len() - self.sent);
        out[..count].copy_from_slice(&self.body[self.sent..self.sent + count]);
        self.sent += count;
        if self.sent == self.body.len() {
            self.sent = 0;
            self.requests -= 1;
        }
        count
    }
}

/// Server-side cost of one connection's stages.
#[derive(Default)]
struct Costs {
    handshake: u64,
    page: u64,
    /// Most heap the server session held at once, and what it held at the end (open,
    /// between requests).
    server_heap_peak: usize,
    server_heap_open: usize,
}

fn connect(
    server: &Arc<rustls::ServerConfig>,
    client: &mut client::Client,
    page: &mut Page,
    pages: usize,
) -> Costs {
    let mut incoming = vec![0u8; MAX_RECORD_LEN];
    let mut outgoing = vec![0u8; 8192];
    let mut wire = vec![0u8; 16 * 1024];
    let mut costs = Costs::default();
    heap::reset_server();
    let (session, _) =
        measure(|| TlsSession::new(server.clone(), &mut incoming, &mut outgoing).unwrap());
    let mut session = session;
    // Handshake: until the client can send.
    for _ in 0..50 {
        client.step();
        let to_server = client.take_outgoing();
        let (written, cost) = measure(|| {
            if !to_server.is_empty() {
                session.receive(page, &to_server).unwrap();
            }
            session.transmit(page, &mut wire)
        });
        costs.handshake += cost;
        client.deliver(&wire[..written]);
        if client.is_open() && written == 0 && to_server.is_empty() {
            break;
        }
    }
    for _ in 0..pages {
        client.send(b"GET / HTTP/1.1\r\nHost: bramble.test\r\nAccept-Encoding: gzip\r\n\r\n");
        let to_server = client.take_outgoing();
        let before = client.received.len();
        let ((), cost) = measure(|| {
            session.receive(page, &to_server).unwrap();
        });
        costs.page += cost;
        loop {
            let (written, cost) = measure(|| session.transmit(page, &mut wire));
            costs.page += cost;
            if written == 0 {
                break;
            }
            client.deliver(&wire[..written]);
        }
        client.step();
        assert_eq!(client.received.len() - before, page.body.len());
    }
    costs.server_heap_peak = heap::server_peak();
    costs.server_heap_open = heap::server_in_use();
    costs
}

fn report_handshakes(name: &str, identity: Identity, client_config: Arc<rustls::ClientConfig>) {
    let server = bramble_tls::server_config(identity, SniPolicy::AnyName).unwrap();
    let mut page = Page {
        body: vec![b'x'; 6 * 1024],
        sent: 0,
        requests: 0,
    };
    let mut client = client::Client::new(client_config.clone());
    let full = connect(&server, &mut client, &mut page, 10);
    let client_full = client.handshake_kind();
    drop(client);
    let mut client = client::Client::new(client_config.clone());
    let resumed = connect(&server, &mut client, &mut page, 0);
    say!(
        "{name}: full handshake {} ({:?}), resumed {} ({:?}), 6 KiB page {} per request; \
         server heap: peak {} B (resumed {} B), {} B while open",
        full.handshake,
        client_full,
        resumed.handshake,
        client.handshake_kind(),
        full.page / 10,
        full.server_heap_peak,
        resumed.server_heap_peak,
        full.server_heap_open
    );
}

fn primitives() {
    use p256::ecdsa::signature::Signer;
    let mut bytes = [0u8; 32];
    RANDOM.fill_bytes(&mut bytes).unwrap();
    let (secret, keygen) = measure(|| {
        let secret = x25519_dalek::StaticSecret::from(bytes);
        let public = x25519_dalek::PublicKey::from(&secret);
        (secret, public)
    });
    let (_, dh) = measure(|| secret.0.diffie_hellman(&secret.1));
    say!("x25519: keygen {keygen}, shared secret {dh}");
    let key = p256::ecdsa::SigningKey::from_slice(&bytes).unwrap();
    let (_, sign) = measure(|| {
        let signature: p256::ecdsa::Signature = key.sign(b"message");
        signature
    });
    let p_secret = p256::SecretKey::from_slice(&bytes).unwrap();
    let (public, p_keygen) = measure(|| p_secret.public_key());
    let (_, p_dh) =
        measure(|| p256::ecdh::diffie_hellman(p_secret.to_nonzero_scalar(), public.as_affine()));
    say!("p256: ecdsa sign {sign}, keygen {p_keygen}, shared secret {p_dh}");
    let ed = ed25519_dalek::SigningKey::from_bytes(&bytes);
    let (_, ed_sign) = measure(|| {
        use ed25519_dalek::Signer as _;
        ed.sign(b"message")
    });
    say!("ed25519: sign {ed_sign}");
    let mut buffer = vec![0u8; 16 * 1024];
    {
        use chacha20poly1305::aead::{AeadInPlace, KeyInit};
        let cipher = chacha20poly1305::ChaCha20Poly1305::new(&[7u8; 32].into());
        let (_, cost) = measure(|| {
            cipher
                .encrypt_in_place_detached(&[0u8; 12].into(), b"", &mut buffer)
                .unwrap()
        });
        say!(
            "chacha20-poly1305: 16 KiB {cost} ({} per byte)",
            cost / 16384
        );
    }
    {
        use aes_gcm::aead::{AeadInPlace, KeyInit};
        let cipher = aes_gcm::Aes128Gcm::new(&[7u8; 16].into());
        let (_, cost) = measure(|| {
            cipher
                .encrypt_in_place_detached(&[0u8; 12].into(), b"", &mut buffer)
                .unwrap()
        });
        say!("aes-128-gcm: 16 KiB {cost} ({} per byte)", cost / 16384);
    }
    {
        use sha2::Digest;
        let (_, cost) = measure(|| sha2::Sha256::digest(&buffer));
        say!("sha-256: 16 KiB {cost} ({} per byte)", cost / 16384);
    }
}

/// The ACME client's certificate checks: one signature of each kind, and each chain shape
/// as the client verifies it (webpki with the client provider's algorithms: parsing, path
/// building, the signatures, the name and the dates).
fn chain_verification() {
    use alloc::string::String;
    use rustls::SignatureScheme;
    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let algorithms = bramble_tls::provider::verify::CLIENT_ALGORITHMS;
    let check = |scheme: SignatureScheme| {
        algorithms
            .mapping
            .iter()
            .find(|(mapped, _)| *mapped == scheme)
            .map(|(_, algorithms)| algorithms[0])
            .unwrap()
    };
    for (name, scheme, key, signature) in [
        (
            "RSA-2048 PSS SHA-256",
            SignatureScheme::RSA_PSS_SHA256,
            RSA2048,
            SIG_RSA2048_PSS,
        ),
        (
            "RSA-2048 PKCS#1 SHA-256",
            SignatureScheme::RSA_PKCS1_SHA256,
            RSA2048,
            SIG_RSA2048_PKCS1,
        ),
        (
            "RSA-4096 PKCS#1 SHA-256",
            SignatureScheme::RSA_PKCS1_SHA256,
            RSA4096,
            SIG_RSA4096_PKCS1,
        ),
        (
            "P-384 SHA-384",
            SignatureScheme::ECDSA_NISTP384_SHA384,
            P384,
            SIG_P384,
        ),
    ] {
        let (result, cost) = measure(|| check(scheme).verify_signature(key, MESSAGE, signature));
        say!(
            "verify {name}: {cost} ({})",
            if result.is_ok() { "ok" } else { "FAILED" }
        );
    }
    let now = UnixTime::since_unix_epoch(core::time::Duration::from_secs(1_811_808_000));
    let name = ServerName::try_from("bramble.test").unwrap();
    for (label, root, chain) in [
        (
            "P-256 root over P-256 leaf (the test CA)",
            CA,
            &[P256_CERT][..],
        ),
        (
            "RSA-4096 root, RSA-2048 intermediate and leaf (ISRG X1, R-series)",
            RSA_ROOT,
            &[RSA_LEAF, RSA_INT][..],
        ),
        (
            "P-384 root and intermediate, P-256 leaf (ISRG X2, E-series)",
            EC_ROOT,
            &[EC_LEAF, EC_INT][..],
        ),
    ] {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(root).unwrap())
            .unwrap();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(bramble_tls::provider::client_provider()),
        )
        .build()
        .unwrap();
        let certificates: Vec<CertificateDer<'static>> = chain
            .iter()
            .flat_map(|pem| CertificateDer::pem_slice_iter(pem).map(Result::unwrap))
            .collect();
        let mut costs = String::new();
        for _ in 0..3 {
            let (result, cost) = measure(|| {
                verifier.verify_server_cert(&certificates[0], &certificates[1..], &name, &[], now)
            });
            let _ = write!(
                costs,
                " {cost}{}",
                if result.is_ok() { "" } else { " FAILED" }
            );
        }
        say!("chain verification, {label}:{costs}");
    }
}

/// Called by the boot stub once the MMU and caches are on.
#[unsafe(no_mangle)]
fn kernel_main() -> ! {
    CONSOLE.init(3_000_000, 115_200);
    heap::init();
    client::set_time();
    say!("tls-probe: instructions (guest ns under -icount shift=0)");
    // SAFETY: the probe's only RNG instance.
    let rng = unsafe { bramble_bcm2835::rng::HardwareRng::new() };
    rng.enable();
    let mut seed = [0u8; 64];
    let ((), cost) = measure(|| rng.fill(&mut seed, || TIMER.micros()).unwrap());
    say!(
        "hardware rng: 64 bytes in {cost}, first words {:02x?}",
        &seed[..8]
    );
    RANDOM.seed(&seed).unwrap();
    primitives();
    chain_verification();
    let roots = client::roots(CA);
    for (name, suites) in [
        ("TLS 1.3 ChaCha20-Poly1305", client::Suites::Chacha13),
        ("TLS 1.3 AES-128-GCM", client::Suites::Aes13),
        (
            "TLS 1.2 ECDHE-ECDSA ChaCha20-Poly1305",
            client::Suites::Chacha12,
        ),
    ] {
        let identity = Identity::from_pem(P256_CERT, P256_KEY).unwrap();
        report_handshakes(
            &alloc::format!("P-256 certificate, X25519, {name}"),
            identity,
            client::config(&roots, suites, false),
        );
    }
    let identity = Identity::from_pem(P256_CERT, P256_KEY).unwrap();
    report_handshakes(
        "P-256 certificate, P-256 key exchange, TLS 1.3 ChaCha20-Poly1305",
        identity,
        client::config(&roots, client::Suites::Chacha13, true),
    );
    let identity = Identity::from_pem(ED25519_CERT, ED25519_KEY).unwrap();
    report_handshakes(
        "Ed25519 certificate, X25519, TLS 1.3 ChaCha20-Poly1305",
        identity,
        client::config(&roots, client::Suites::Chacha13, false),
    );
    say!(
        "heap: {} B in use at the end, {} B at most (clients, servers and buffers together)",
        heap::in_use(),
        heap::peak()
    );
    say!("tls-probe: done");
    loop {
        bramble_boot::cpu::wait_for_interrupt();
    }
}

#[unsafe(no_mangle)]
extern "C" fn __bramble_exception(frame: &ExceptionFrame) -> ! {
    say!(
        "tls-probe: exception {:?} at {:#x}",
        frame.kind,
        frame.fault_pc()
    );
    loop {
        bramble_boot::cpu::wait_for_interrupt();
    }
}

#[unsafe(no_mangle)]
extern "C" fn __bramble_irq() {}

struct IrqMask;
critical_section::set_impl!(IrqMask);

// SAFETY: one core; masking IRQs makes the section exclusive.
unsafe impl critical_section::Impl for IrqMask {
    unsafe fn acquire() -> critical_section::RawRestoreState {
        let was_enabled = bramble_boot::cpu::irq_enabled();
        bramble_boot::cpu::disable_irq();
        u32::from(was_enabled)
    }

    unsafe fn release(state: critical_section::RawRestoreState) {
        if state != 0 {
            // SAFETY: IRQs were enabled when the section began.
            unsafe { bramble_boot::cpu::enable_irq() };
        }
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    say!("tls-probe: panic: {info}");
    loop {
        bramble_boot::cpu::wait_for_interrupt();
    }
}
