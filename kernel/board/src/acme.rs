//! ACME on the board (`acme = on`): the settings turned into the appliance's ACME
//! configuration, the CA's roots (built in, or `acme_ca_certificate` from the card), the
//! HTTPS pool that starts once a certificate is in hand, and the certificate store.
//!
//! The store is kept in RAM on the board for now (`certificate_store = ram`, and `card`
//! falls back to it, saying so): the EMMC driver has no write path yet, so every boot orders
//! a new certificate. The power-cut-safe store itself (two slots, sequence numbers,
//! checksums) is the same code the hosted build writes to a file.

use crate::arena::Arena;
use bramble_acme::store::{BLOCK_LEN, BlockStore, DEFAULT_REGION_BLOCKS, SliceBlocks};
use bramble_net::appliance::HttpsMemory;
use bramble_net::appliance::acme::{AcmeConfig, AcmeMemory};
use bramble_settings::{CertificateStore, HttpsMode, Settings};

/// Heap for ACME on top of the HTTPS pool's: the TLS client to the CA (its handshake, the
/// CA's chain, records both ways), the order's JSON and the downloaded chain. An issuance
/// from pebble peaked at 18 KiB of heap (the QEMU test's status line); Let's Encrypt's longer
/// chains and bigger answers get five times that.
pub const ACME_HEAP_BYTES: usize = 96 * 1024;

/// Everything `Appliance::start_acme` takes, cut from the arena.
pub struct Acme {
    /// The owner's settings as the appliance takes them.
    pub config: AcmeConfig<'static>,
    /// The certificate store.
    pub store: &'static mut dyn BlockStore,
    /// The CA connection's buffers.
    pub memory: &'static mut AcmeMemory,
    /// The HTTPS pool, started once a certificate is in hand.
    pub https: &'static mut HttpsMemory<'static>,
    /// Sockets to keep back from the HTTP pool: the HTTPS pool's and ACME's two.
    pub sockets: usize,
}

/// Prepares ACME when the settings ask for it; every problem is reported on the console and
/// leaves plain HTTP serving (`None`).
pub fn prepare(settings: &Settings, arena: &mut Arena) -> Option<Acme> {
    if !settings.acme {
        return None;
    }
    if settings.https == HttpsMode::Off {
        log::error!("acme: acme = on needs https = on (or only); ACME is not started");
        return None;
    }
    let roots: &'static [u8] = match &settings.acme_ca_certificate {
        None => bramble_acme::LETS_ENCRYPT_ROOTS_PEM,
        Some(name) => match crate::storage::acme_ca_file() {
            Some(Ok(bytes)) => bytes,
            Some(Err(problem)) => {
                log::error!("acme: {name}: {problem}; ACME is not started");
                return None;
            }
            None => {
                log::error!("acme: the card could not be read; ACME is not started");
                return None;
            }
        },
    };
    let names = arena.slice(settings.domains.len(), || "")?;
    for (slot, name) in names.iter_mut().zip(settings.domains.iter()) {
        *slot = arena.value(name.clone())?.as_str();
    }
    let directory_url = arena.value(settings.acme_directory.clone())?.as_str();
    let email = match &settings.acme_email {
        Some(email) => Some(arena.value(email.clone())?.as_str()),
        None => None,
    };
    let dns_servers = arena.slice(settings.dns.len(), || [0u8; 4])?;
    for (slot, server) in dns_servers.iter_mut().zip(settings.dns.iter()) {
        *slot = server.octets();
    }
    let (https, pool) = crate::tls::prepare_pool(arena, ACME_HEAP_BYTES)?;
    if settings.certificate_store == CertificateStore::Card {
        log::warn!(
            "acme: certificate_store = card is not written by this kernel yet (the card driver \
             has no write path): the certificate is kept in RAM, and every boot orders a new \
             one"
        );
    }
    let region = arena.zeroed_bytes(DEFAULT_REGION_BLOCKS as usize * BLOCK_LEN)?;
    let store: &'static mut dyn BlockStore = arena.value(SliceBlocks::new(region))?;
    let memory = arena.value(AcmeMemory::new())?;
    Some(Acme {
        config: AcmeConfig {
            directory_url,
            email,
            names,
            ca_roots_pem: roots,
            https_port: settings.https_port,
            redirect_plain_http: settings.https == HttpsMode::Only,
            backoff: bramble_acme::BackoffPolicy::DEFAULT,
            dns_servers,
            renew_after_seconds: None,
        },
        store,
        memory,
        https,
        sockets: pool + 2,
    })
}

/// The status line's ACME part: where it stands, the certificate's end, the next order,
/// failures and the last error.
pub fn print_status(appliance: &crate::network::Network) {
    let now = bramble_hal::Instant::from_micros(crate::platform::micros());
    let Some(status) = appliance.acme_status(now) else {
        return;
    };
    log::info!(
        "status: acme {:?}, certificate ends at Unix time {}, next order in {}, orders {}, \
         issued {}, failures in a row {}, last error: {}",
        status.phase,
        status.not_after.map_or_else(
            || alloc::string::String::from("(none yet)"),
            |end| alloc::format!("{end}")
        ),
        status.next_order_in.map_or_else(
            || alloc::string::String::from("-"),
            |s| alloc::format!("{s} s")
        ),
        status.orders,
        status.issued,
        status.failures,
        status.last_error.as_deref().unwrap_or("none")
    );
}
