//! The test CA for pebble's own HTTPS API (`acme.test`), made with openssl, and pebble's
//! configuration: the one the hosted ACME tests and the QEMU ACME tests both use.
//!
//! `ca.pem` (the root only) is what the appliance is told to trust (`--acme-ca`, or the card's
//! `acme_ca`); `wfe-chain.pem` (the leaf, then any intermediate) and `wfe.key` are what
//! pebble presents; `pebble.json` points pebble at them, listening on the given address
//! (API on 14000, management on 15000, challenges on 80 and 443).

use std::net::Ipv4Addr;
use std::path::Path;

use crate::chain::make_chain;

/// The shape of the chain pebble's API presents.
pub use crate::chain::ChainShape as ApiChain;

/// Writes the CA, pebble's chain and key, and `pebble.json` into `dir`, for an API at
/// `acme.test` and `address`. Panics (with openssl's output) when openssl fails.
pub fn make_ca(dir: &Path, chain: ApiChain, address: Ipv4Addr) {
    // pebble (Go) presents every certificate in its certificate file: leaf, intermediate.
    make_chain(
        dir,
        chain,
        "wfe",
        "acme.test",
        &format!("DNS:acme.test,IP:{address}"),
    );
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
