//! The test CA for pebble's own HTTPS API (`acme.test`), made with openssl, and pebble's
//! configuration: the one the hosted ACME tests and the QEMU ACME tests both use.
//!
//! `ca.pem` (the root only) is what the appliance is told to trust (`--acme-ca`, or the card's
//! `acme_ca`); `wfe-chain.pem` (the leaf, then any intermediate) and `wfe.key` are what
//! pebble presents; `pebble.json` points pebble at them, listening on the given address
//! (API on 14000, management on 15000, challenges on 80 and 443).

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use crate::netns::run_ok;

/// The shape of the chain pebble's API presents.
#[derive(Clone, Copy, Debug)]
pub enum ApiChain {
    /// A P-256 root over a P-256 leaf, ecdsa-with-SHA256, no intermediate.
    P256,
    /// Like ISRG Root X1 over an R-series intermediate: an RSA-4096 root over an RSA-2048
    /// intermediate and leaf, sha256WithRSAEncryption (TLS 1.3 handshake signed with PSS).
    Rsa,
    /// Like ISRG Root X2 over an E-series intermediate: a P-384 root and intermediate over a
    /// P-256 leaf, ecdsa-with-SHA384.
    P384,
}

/// Writes the CA, pebble's chain and key, and `pebble.json` into `dir`, for an API at
/// `acme.test` and `address`. Panics (with openssl's output) when openssl fails.
pub fn make_ca(dir: &Path, chain: ApiChain, address: Ipv4Addr) {
    let openssl = |args: &[&str]| {
        run_ok(Command::new("openssl").current_dir(dir).args(args));
    };
    // (root key, intermediate key if any, leaf key, digest)
    let (root_key, intermediate_key, leaf_key, digest) = match chain {
        ApiChain::P256 => (
            "ec_paramgen_curve:P-256",
            None,
            "ec_paramgen_curve:P-256",
            "-sha256",
        ),
        ApiChain::Rsa => (
            "rsa_keygen_bits:4096",
            Some("rsa_keygen_bits:2048"),
            "rsa_keygen_bits:2048",
            "-sha256",
        ),
        ApiChain::P384 => (
            "ec_paramgen_curve:P-384",
            Some("ec_paramgen_curve:P-384"),
            "ec_paramgen_curve:P-256",
            "-sha384",
        ),
    };
    let key = |name: &str, option: &str| {
        let algorithm = if option.starts_with("rsa") {
            "RSA"
        } else {
            "EC"
        };
        openssl(&[
            "genpkey",
            "-algorithm",
            algorithm,
            "-pkeyopt",
            option,
            "-out",
            name,
        ]);
    };
    std::fs::write(
        dir.join("ext.txt"),
        format!(
            "[intermediate]\nbasicConstraints=critical,CA:TRUE\n\
             keyUsage=critical,keyCertSign,cRLSign\n\
             [leaf]\nsubjectAltName=DNS:acme.test,IP:{address}\n\
             extendedKeyUsage=serverAuth\n"
        ),
    )
    .expect("writing ext.txt");
    key("ca.key", root_key);
    openssl(&[
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        digest,
        "-days",
        "3650",
        "-subj",
        "/CN=Bramble test CA",
        "-out",
        "ca.pem",
    ]);
    // The intermediate (if any), signed by the root; pebble's leaf, signed by the last CA.
    let mut issuer = ("ca.pem", "ca.key");
    let mut steps = Vec::new();
    if let Some(option) = intermediate_key {
        steps.push((
            "intermediate",
            "/CN=Bramble test intermediate",
            "intermediate",
            option,
        ));
    }
    steps.push(("wfe", "/CN=acme.test", "leaf", leaf_key));
    for (name, subject, section, option) in steps {
        let key_file = format!("{name}.key");
        let csr = format!("{name}.csr");
        let cert = format!("{name}.pem");
        key(&key_file, option);
        openssl(&[
            "req", "-new", "-key", &key_file, "-subj", subject, "-out", &csr,
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            issuer.0,
            "-CAkey",
            issuer.1,
            digest,
            "-CAcreateserial",
            "-days",
            "3650",
            "-extfile",
            "ext.txt",
            "-extensions",
            section,
            "-out",
            &cert,
        ]);
        if section == "intermediate" {
            issuer = ("intermediate.pem", "intermediate.key");
        }
    }
    // pebble (Go) presents every certificate in its certificate file: leaf, intermediate.
    let mut presented = std::fs::read(dir.join("wfe.pem")).expect("wfe.pem");
    if intermediate_key.is_some() {
        presented.extend(std::fs::read(dir.join("intermediate.pem")).expect("intermediate.pem"));
    }
    std::fs::write(dir.join("wfe-chain.pem"), presented).expect("writing wfe-chain.pem");
    std::fs::write(
        dir.join("pebble.json"),
        format!(
            r#"{{"pebble":{{"listenAddress":"{address}:14000","managementListenAddress":"{address}:15000","certificate":"{}","privateKey":"{}","httpPort":80,"tlsPort":443,"ocspResponderURL":"","externalAccountBindingRequired":false}}}}"#,
            dir.join("wfe-chain.pem").display(),
            dir.join("wfe.key").display()
        ),
    )
    .expect("writing pebble.json");
}
