//! What the board's outbound clients (ACME, the heartbeat, the pull, the reach agent) share
//! when they are set up: the configured name servers, a TLS heap cut from the arena, and the
//! roots they check their servers against.

use crate::arena::Arena;
use bramble_settings::Settings;

/// The configured name servers (`dns`, for a static address; DHCP gives its own), copied
/// into the arena for an outbound client (ACME, the heartbeat, pulling, the reach agent).
pub fn client_dns_servers(settings: &Settings, arena: &mut Arena) -> Option<&'static [[u8; 4]]> {
    let dns_servers = arena.slice(settings.dns.len(), || [0u8; 4])?;
    for (slot, server) in dns_servers.iter_mut().zip(settings.dns.iter()) {
        *slot = server.octets();
    }
    Some(dns_servers)
}

/// Claims `bytes` of the arena as the TLS heap of the client `what` (logged when there is
/// no room: the client is not started).
pub fn claim_client_heap(arena: &mut Arena, bytes: usize, what: &str) -> Option<()> {
    if !crate::tls::claim_heap(arena, bytes) {
        log::error!("{what}: no memory for its {bytes}-byte heap; not started");
        return None;
    }
    Some(())
}

/// The roots the board's HTTPS clients (heartbeat, pulling, echo, dyndns2, outside check)
/// check their servers against: `acme_ca_certificate`, else Let's Encrypt's. `None` (logged, naming
/// `what`) when the named file could not be read.
pub fn client_roots(settings: &Settings, what: &str) -> Option<&'static [u8]> {
    match &settings.acme_ca_certificate {
        None => Some(bramble_acme::LETS_ENCRYPT_ROOTS_PEM),
        Some(name) => match crate::storage::acme_ca_file() {
            Some(Ok(bytes)) => Some(bytes),
            Some(Err(problem)) => {
                log::error!("{what}: {name}: {problem}; not started");
                None
            }
            None => {
                log::error!("{what}: the card could not be read; not started");
                None
            }
        },
    }
}
