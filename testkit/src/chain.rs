//! Test certificate chains shaped like the public CAs' (made with openssl): a root, an
//! intermediate where the real CA has one, and a leaf for the names and addresses given.
//!
//! The servers Bramble's outbound clients meet (an ACME CA's API, a dyndns2 provider, an object
//! store holding published sites, a health-check service) present Let's Encrypt-like chains:
//! an RSA-4096 or P-384 root, kept by the client, over an intermediate and a leaf the server
//! sends. Fixtures that give the client a root that signs the leaf directly test the friendly
//! case only, so every test server takes its chain from here.
//!
//! Files written in the directory given: `ca.pem` and `ca.key` (the root, what the appliance
//! is told to trust), `intermediate.pem` and `intermediate.key` (when the shape has one), and
//! for a leaf named `NAME`: `NAME.pem` (the leaf alone), `NAME.key`, and `NAME-chain.pem` (the
//! leaf, then the intermediate: what a server presents).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::netns::run_ok;

/// The shape of a chain.
#[derive(Clone, Copy, Debug)]
pub enum ChainShape {
    /// A P-256 root over a P-256 leaf, ecdsa-with-SHA256, no intermediate.
    P256,
    /// Like ISRG Root X1 over an R-series intermediate: an RSA-4096 root over an RSA-2048
    /// intermediate and leaf, sha256WithRSAEncryption (TLS 1.3 handshake signed with PSS).
    Rsa,
    /// Like ISRG Root X2 over an E-series intermediate: a P-384 root and intermediate over a
    /// P-256 leaf, ecdsa-with-SHA384.
    P384,
}

/// What [`make_chain`] wrote.
#[derive(Clone, Debug)]
pub struct Chain {
    /// The root certificate (`ca.pem`): what the client trusts.
    pub root: PathBuf,
    /// The leaf alone (`NAME.pem`).
    pub leaf: PathBuf,
    /// The leaf's private key (`NAME.key`).
    pub key: PathBuf,
    /// The intermediate (`intermediate.pem`), when the shape has one.
    pub intermediate: Option<PathBuf>,
    /// The leaf, then the intermediate (`NAME-chain.pem`): what a server presents.
    pub presented: PathBuf,
}

impl Chain {
    /// The arguments that make `openssl s_server` present this chain.
    pub fn s_server_args(&self) -> Vec<String> {
        let mut args = vec![
            "-cert".to_string(),
            self.leaf.display().to_string(),
            "-key".to_string(),
            self.key.display().to_string(),
        ];
        if let Some(intermediate) = &self.intermediate {
            args.push("-cert_chain".to_string());
            args.push(intermediate.display().to_string());
        }
        args
    }
}

/// Writes a chain of `shape` into `dir` for a leaf named `name` (file names), with subject
/// `CN=common_name` and the subjectAltName entries `san` (openssl's syntax:
/// `DNS:pub.test,IP:192.0.2.1`). Panics (with openssl's output) when openssl fails.
pub fn make_chain(
    dir: &Path,
    shape: ChainShape,
    name: &str,
    common_name: &str,
    san: &str,
) -> Chain {
    let openssl = |args: &[&str]| {
        run_ok(Command::new("openssl").current_dir(dir).args(args));
    };
    // (root key, intermediate key if any, leaf key, digest)
    let (root_key, intermediate_key, leaf_key, digest) = match shape {
        ChainShape::P256 => (
            "ec_paramgen_curve:P-256",
            None,
            "ec_paramgen_curve:P-256",
            "-sha256",
        ),
        ChainShape::Rsa => (
            "rsa_keygen_bits:4096",
            Some("rsa_keygen_bits:2048"),
            "rsa_keygen_bits:2048",
            "-sha256",
        ),
        ChainShape::P384 => (
            "ec_paramgen_curve:P-384",
            Some("ec_paramgen_curve:P-384"),
            "ec_paramgen_curve:P-256",
            "-sha384",
        ),
    };
    let key = |file: &str, option: &str| {
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
            file,
        ]);
    };
    let extensions = format!("{name}-ext.txt");
    std::fs::write(
        dir.join(&extensions),
        format!(
            "[intermediate]\nbasicConstraints=critical,CA:TRUE\n\
             keyUsage=critical,keyCertSign,cRLSign\n\
             [leaf]\nsubjectAltName={san}\n\
             extendedKeyUsage=serverAuth\n"
        ),
    )
    .expect("writing the extensions file");
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
    // The intermediate (if any), signed by the root; the leaf, signed by the last CA.
    let mut issuer = ("ca.pem", "ca.key");
    let mut steps = Vec::new();
    if let Some(option) = intermediate_key {
        steps.push((
            "intermediate".to_string(),
            "/CN=Bramble test intermediate".to_string(),
            "intermediate",
            option,
        ));
    }
    steps.push((
        name.to_string(),
        format!("/CN={common_name}"),
        "leaf",
        leaf_key,
    ));
    for (stem, subject, section, option) in steps {
        let key_file = format!("{stem}.key");
        let csr = format!("{stem}.csr");
        let cert = format!("{stem}.pem");
        key(&key_file, option);
        openssl(&[
            "req", "-new", "-key", &key_file, "-subj", &subject, "-out", &csr,
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
            &extensions,
            "-extensions",
            section,
            "-out",
            &cert,
        ]);
        if section == "intermediate" {
            issuer = ("intermediate.pem", "intermediate.key");
        }
    }
    let leaf = dir.join(format!("{name}.pem"));
    let mut presented = std::fs::read(&leaf).expect("the leaf certificate");
    let intermediate = intermediate_key.map(|_| dir.join("intermediate.pem"));
    if let Some(path) = &intermediate {
        presented.extend(std::fs::read(path).expect("intermediate.pem"));
    }
    let presented_path = dir.join(format!("{name}-chain.pem"));
    std::fs::write(&presented_path, presented).expect("writing the presented chain");
    Chain {
        root: dir.join("ca.pem"),
        leaf,
        key: dir.join(format!("{name}.key")),
        intermediate,
        presented: presented_path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// openssl's text for one certificate.
    fn text(cert: &Path) -> String {
        let out = Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in"])
            .arg(cert)
            .output()
            .expect("openssl x509");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Each shape verifies from its root alone through what the server presents, and has the
    /// key types and signature algorithms of the public CA it imitates.
    #[test]
    fn every_shape_verifies_from_its_root_with_the_cas_key_types() {
        for (shape, root_key, leaf_key, signature) in [
            (
                ChainShape::P256,
                "prime256v1",
                "prime256v1",
                "ecdsa-with-SHA256",
            ),
            (
                ChainShape::Rsa,
                "(4096 bit)",
                "(2048 bit)",
                "sha256WithRSAEncryption",
            ),
            (
                ChainShape::P384,
                "secp384r1",
                "prime256v1",
                "ecdsa-with-SHA384",
            ),
        ] {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let chain = make_chain(dir.path(), shape, "site", "site.test", "DNS:site.test");
            let mut verify = Command::new("openssl");
            verify.arg("verify").arg("-CAfile").arg(&chain.root);
            if let Some(intermediate) = &chain.intermediate {
                verify.arg("-untrusted").arg(intermediate);
            }
            let out = verify.arg(&chain.leaf).output().expect("openssl verify");
            assert!(out.status.success(), "{shape:?}: {out:?}");
            // The root does not sign the leaf itself where the real CA has an intermediate.
            let direct = Command::new("openssl")
                .arg("verify")
                .arg("-CAfile")
                .arg(&chain.root)
                .arg(&chain.leaf)
                .output()
                .expect("openssl verify");
            assert_eq!(
                direct.status.success(),
                chain.intermediate.is_none(),
                "{shape:?}"
            );
            assert!(text(&chain.root).contains(root_key), "{shape:?} root");
            let leaf = text(&chain.leaf);
            assert!(leaf.contains(leaf_key), "{shape:?} leaf");
            assert!(leaf.contains(signature), "{shape:?} leaf signature");
            assert!(leaf.contains("DNS:site.test"), "{shape:?} leaf names");
            let presented = std::fs::read_to_string(&chain.presented).expect("presented");
            let certificates = presented.matches("BEGIN CERTIFICATE").count();
            assert_eq!(certificates, 1 + usize::from(chain.intermediate.is_some()));
        }
    }
}
