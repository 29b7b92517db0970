//! The test certificate on a card, and curl trusting the test CA: what the HTTPS tests share.
//!
//! The fixtures are kernel/tls's test data: `ca.pem` (the test CA), `p256.pem` and
//! `p256.key` (a certificate for `bramble.test` that it signed), and the broken variants the
//! problem tests use.

use bramble::image::{TlsFiles, check_tls_files};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A file of kernel/tls's test data.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../kernel/tls/tests/data")
        .join(name)
}

/// The p256 certificate and key, checked as `bramble image --tls-cert --tls-key` does, as
/// CERT.PEM and KEY.PEM on the card.
pub fn tls_files() -> TlsFiles {
    let (certificate, key, check) =
        check_tls_files(&fixture("p256.pem"), &fixture("p256.key"), 1_800_000_000).unwrap();
    assert!(check.warning.is_none());
    TlsFiles {
        certificate_name: "CERT.PEM".into(),
        certificate,
        key_name: "KEY.PEM".into(),
        key,
    }
}

/// curl over HTTPS to the guest, as `bramble.test`, trusting only the test CA.
pub fn curl(https_port: u16) -> Command {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "60", "--cacert"])
        .arg(fixture("ca.pem"))
        .arg("--resolve")
        .arg(format!("bramble.test:{https_port}:127.0.0.1"));
    command
}
