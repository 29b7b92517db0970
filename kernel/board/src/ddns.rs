//! Dynamic DNS on the board (`ddns = rfc2136`): the settings turned into the appliance's
//! configuration (names, key and the socket's memory cut from the arena), and its status line.

use crate::appliance::Network;
use crate::arena::Arena;
use crate::status::Maybe;
use bramble_net::appliance::ddns::{DdnsConfig, DdnsMemory, Ipv4Source};
use bramble_proto::dns_update::TsigKey;
use bramble_settings::{DdnsProtocol, Settings};

/// What `Appliance::start_ddns` takes, cut from the arena.
pub struct Ddns {
    /// The owner's settings as the appliance takes them.
    pub config: DdnsConfig<'static>,
    /// The update socket's buffers.
    pub memory: &'static mut DdnsMemory,
}

/// Socket slots dynamic DNS keeps back from the HTTP pool.
pub const SOCKETS: usize = 1;

/// Prepares dynamic DNS when the settings ask for it (the settings parser has already
/// turned it off when a setting it needs is missing).
pub fn prepare(settings: &Settings, arena: &mut Arena) -> Option<Ddns> {
    let ddns = &settings.ddns;
    if ddns.protocol != DdnsProtocol::Rfc2136 {
        return None;
    }
    let (Some(name), Some(zone), Some(server), Some(key)) =
        (&ddns.name, ddns.zone(), ddns.server, &ddns.key)
    else {
        return None;
    };
    let name: &'static str = arena.value(name.clone())?.as_str();
    let zone: &'static str = arena
        .value(heapless::String::<253>::try_from(zone).ok()?)?
        .as_str();
    let key = arena.value(key.clone())?;
    let memory = arena.value(DdnsMemory::new())?;
    Some(Ddns {
        config: DdnsConfig {
            name,
            zone,
            server,
            key: TsigKey {
                name: key.name.as_str(),
                secret: key.secret.as_slice(),
            },
            ipv4: match ddns.ipv4 {
                bramble_settings::Ipv4Source::Public => Ipv4Source::Public,
                bramble_settings::Ipv4Source::Interface => Ipv4Source::Interface,
                bramble_settings::Ipv4Source::Off => Ipv4Source::Off,
            },
            ipv6: ddns.ipv6,
        },
        memory,
    })
}

/// The status line: what the server confirmed, the counts, the last failure.
pub fn print_status(appliance: &Network) {
    let Some(status) = appliance.ddns_status() else {
        return;
    };
    let ipv4 = Maybe(status.published.ipv4.map(core::net::Ipv4Addr::from));
    let ipv6 = Maybe(status.published.ipv6.map(core::net::Ipv6Addr::from));
    let failure = Maybe(status.last_failure);
    let line = bramble_status::Ddns {
        ipv4: bramble_status::Text::Shown(&ipv4),
        ipv6: bramble_status::Text::Shown(&ipv6),
        updates: status.updates,
        sends: status.sends,
        failures: status.failures,
        last_failure: bramble_status::Text::Shown(&failure),
    };
    log::info!("{line}");
}
