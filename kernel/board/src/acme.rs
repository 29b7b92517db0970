//! ACME on the board (`acme = on`): the settings turned into the appliance's ACME
//! configuration, the CA's roots (built in, or `acme_ca_certificate` from the card), the
//! HTTPS pool that starts once a certificate is in hand, and the certificate store.
//!
//! With `certificate_store = card` (the default) the store is the card's certificate store
//! region (the partition `bramble image` reserves), reached through the site store's card
//! reader and checked twice: [`CardRegion`] refuses any block outside the region and reads
//! every write back, and the EMMC driver refuses any write outside the same window. A card
//! without the region (made by an older `bramble image`), or `certificate_store = ram`, keeps
//! the store in RAM, saying so: then every boot orders a new certificate. The power-cut-safe
//! store itself (two slots, sequence numbers, checksums) is the same code the hosted build
//! writes to a file.

use crate::arena::Arena;
use crate::storage::{Store, StoreCard};
use bramble_acme::store::{BLOCK_LEN, BlockStore, CardRegion, DEFAULT_REGION_BLOCKS, SliceBlocks};
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
    /// Sockets to keep back for ACME: its two.
    pub sockets: usize,
}

/// Prepares ACME when the settings ask for it; every problem is reported on the console and
/// leaves plain HTTP serving (`None`). `card` is the site store, whose card reader the
/// certificate store shares (`None` when the site could not be opened).
pub fn prepare(
    settings: &Settings,
    arena: &mut Arena,
    card: Option<&'static Store>,
) -> Option<Acme> {
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
    let dns_servers = crate::clients::client_dns_servers(settings, arena)?;
    let https = crate::tls::prepare_pool(
        arena,
        ACME_HEAP_BYTES,
        settings.connections_per_address.is_some(),
    )?;
    let store = match card_store(settings, card) {
        Some(region) => arena.value(region)? as &'static mut dyn BlockStore,
        None => {
            let region = arena.zeroed_bytes(DEFAULT_REGION_BLOCKS as usize * BLOCK_LEN)?;
            arena.value(SliceBlocks::new(region))? as &'static mut dyn BlockStore
        }
    };
    let memory = arena.value(AcmeMemory::new())?;
    Some(Acme {
        config: AcmeConfig {
            directory_url,
            email,
            names,
            ca_roots_pem: roots,
            https_port: settings.https_port,
            challenge: match settings.acme_challenge {
                bramble_settings::AcmeChallenge::Http01 => bramble_acme::ChallengeKind::Http01,
                bramble_settings::AcmeChallenge::TlsAlpn01 => {
                    bramble_acme::ChallengeKind::TlsAlpn01
                }
                bramble_settings::AcmeChallenge::Dns01 => bramble_acme::ChallengeKind::Dns01,
            },
            redirect_plain_http: settings.https == HttpsMode::Only,
            backoff: bramble_acme::BackoffPolicy::DEFAULT,
            dns_servers,
            renew_after_seconds: None,
        },
        store,
        memory,
        https,
        sockets: 2,
    })
}

/// The card's certificate store region, when the settings allow writing it and the card has
/// one; otherwise says why the store is kept in RAM.
fn card_store(settings: &Settings, card: Option<&'static Store>) -> Option<CardRegion<StoreCard>> {
    const IN_RAM: &str = "the certificate is kept in RAM, and every boot orders a new one";
    if settings.certificate_store == CertificateStore::Ram {
        log::info!("acme: certificate_store = ram: nothing is written to the card; {IN_RAM}");
        return None;
    }
    let Some(card) = card else {
        log::warn!("acme: the card's site could not be opened, so neither can its store; {IN_RAM}");
        return None;
    };
    match crate::storage::store_region() {
        Some(Ok(region)) => {
            let store = CardRegion::new(StoreCard(card), region.first_block, region.blocks);
            match &store {
                Some(_) => log::info!(
                    "acme: certificate store on the card: {} blocks from block {}",
                    region.blocks,
                    region.first_block
                ),
                None => {
                    log::error!("acme: the certificate store region is not on the card; {IN_RAM}")
                }
            }
            store
        }
        Some(Err(problem)) => {
            log::warn!(
                "acme: {problem}; {IN_RAM} (make the card again with `bramble image` to keep it)"
            );
            None
        }
        None => {
            log::warn!("acme: the card was not read; {IN_RAM}");
            None
        }
    }
}

/// The status line's card-writes part: what the driver wrote since boot (commands, blocks,
/// bytes), what it refused, and its windows.
pub fn print_card_writes(store: &Store) {
    let Some((writes, window)) = crate::storage::write_counters(store) else {
        return;
    };
    let line = bramble_status::CardWrites {
        commands: writes.commands,
        blocks: writes.blocks,
        bytes: writes.bytes(),
        refused: writes.refused,
        failed: writes.failed,
        window: bramble_status::Text::Shown(&window),
    };
    log::info!("{line}");
}
