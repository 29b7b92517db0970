//! Bramble's ACME client (RFC 8555), without I/O: keys made on the device, JOSE (ES256)
//! requests, the order state machine with HTTP-01 and TLS-ALPN-01 (RFC 8737) answers, the
//! CSR, renewal timing and back-off, and the power-cut-safe certificate store over a small
//! block-device trait. The network side (DNS, TCP, TLS to the CA) is the caller's: the
//! appliance in bramble-net drives [`order::OrderRun`] over its sockets, and the hosted build
//! runs the same against pebble.
//!
//! Everything the CA sends is untrusted: responses are framed by [`http::ResponseReader`]
//! within fixed limits, parsed by the bounded [`json`] parser, and read field by field into
//! checked [`protocol`] types. Both parsers and the store's reader have fuzz targets.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod ari;
pub mod base64;
pub mod csr;
pub mod der;
pub mod http;
pub mod jose;
pub mod json;
pub mod key;
pub mod order;
pub mod protocol;
pub mod schedule;
pub mod store;

pub use key::EcKey;
pub use order::{AcmeError, Action, ChallengeAnswer, Issued, OrderRun, OrderSettings, Request};
pub use protocol::ChallengeKind;
pub use schedule::{Backoff, BackoffPolicy};
pub use store::{BlockStore, CertificateStore, MemoryBlocks, Record, SliceBlocks, StoreError};

/// Let's Encrypt's production directory: `acme_directory`'s default.
pub const LETS_ENCRYPT_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// The roots Let's Encrypt's API server chains to, trusted when the owner names no
/// `acme_ca_certificate`: ISRG Root X1 (RSA 4096, to 2035) and ISRG Root X2 (ECDSA P-384, to
/// 2040), as Debian's ca-certificates ships them; 2.7 KB of PEM in the kernel image.
pub const LETS_ENCRYPT_ROOTS_PEM: &[u8] = include_bytes!("../roots/lets-encrypt.pem");
