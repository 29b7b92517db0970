//! Reachability over HTTPS on the board (`public_ip_url`, `ddns = dyndns2 | desec |
//! duckdns`, `reach_check_url`): the settings turned into the appliance's agent (URLs,
//! credentials, its socket memory and TLS heap cut from the arena), and its status lines.

use crate::appliance::Network;
use crate::arena::Arena;
use crate::status::Maybe;
use bramble_net::appliance::ddns::Ipv4Source;
use bramble_net::appliance::reach::{Dyndns2Config, ReachConfig, ReachMemory, UpdateState};
use bramble_proto::dyndns::Dialect;
use bramble_settings::{DdnsProtocol, Settings};
use bramble_status::Text;

/// Socket slots the agent keeps back from the HTTP pool: TCP and DNS.
pub const SOCKETS: usize = 2;

/// Heap for the agent's TLS client, one request at a time: as the heartbeat's.
const HEAP_BYTES: usize = 48 * 1024;

/// The agent's configuration and memory (`None`: nothing asks for it, or logged why not).
pub fn prepare(
    settings: &Settings,
    arena: &mut Arena,
) -> Option<(ReachConfig<'static>, &'static mut ReachMemory)> {
    if !settings.wants_reach_agent() {
        return None;
    }
    let roots_pem = crate::clients::client_roots(settings, "reach")?;
    crate::clients::claim_client_heap(arena, HEAP_BYTES, "reach")?;
    let ddns = &settings.ddns;
    let update = match (
        ddns.protocol,
        &ddns.name,
        ddns.update_url(),
        ddns.update_user(),
        &ddns.password,
    ) {
        (protocol, Some(name), Some(url), user, Some(password)) if protocol.is_https() => {
            Some(Dyndns2Config {
                dialect: match protocol {
                    DdnsProtocol::Desec => Dialect::Desec,
                    DdnsProtocol::DuckDns => Dialect::DuckDns,
                    _ => Dialect::Dyndns2,
                },
                url: text(arena, url)?,
                name: text(arena, name.as_str())?,
                user: text(arena, user.unwrap_or(""))?,
                password: text(arena, password.0.as_str())?,
                ipv4: match ddns.ipv4 {
                    bramble_settings::Ipv4Source::Public => Ipv4Source::Public,
                    bramble_settings::Ipv4Source::Interface => Ipv4Source::Interface,
                    bramble_settings::Ipv4Source::Off => Ipv4Source::Off,
                },
                ipv6: ddns.ipv6,
            })
        }
        _ => None,
    };
    let dns_servers = crate::clients::client_dns_servers(settings, arena)?;
    let echo_url = match &settings.public_ip_url {
        Some(url) => Some(text(arena, url)?),
        None => None,
    };
    let check_url = match &settings.reach_check_url {
        Some(url) => Some(text(arena, url)?),
        None => None,
    };
    let config = ReachConfig {
        echo_url,
        echo_every_minutes: u32::from(settings.public_ip_every),
        update,
        check_url,
        roots_pem,
        dns_servers,
    };
    Some((config, arena.value(ReachMemory::new())?))
}

/// `text` copied into the arena.
fn text(arena: &mut Arena, text: &str) -> Option<&'static str> {
    let bytes = arena.slice(text.len(), || 0u8)?;
    bytes.copy_from_slice(text.as_bytes());
    core::str::from_utf8(bytes).ok()
}

/// The status lines: dyndns2's (with it on), and the public address and outside check.
pub fn print_status(appliance: &Network) {
    let now = bramble_hal::Instant::from_micros(crate::platform::micros());
    let Some(status) = appliance.reach_status(now) else {
        return;
    };
    if let Some(update) = status.update {
        let ipv4 = Maybe(status.published.ipv4.map(core::net::Ipv4Addr::from));
        let ipv6 = Maybe(status.published.ipv6.map(core::net::Ipv6Addr::from));
        let answer = status.last_answer.map_or("none", |answer| answer.word());
        let line = bramble_status::Dyndns {
            ipv4: Text::Shown(&ipv4),
            ipv6: Text::Shown(&ipv6),
            updates: status.updates,
            requests: status.requests,
            failures: status.failures,
            last_answer: Text::Read(answer),
            state: Text::Shown(&update),
        };
        log::info!("{line}");
        if let UpdateState::Stopped(_) = update {
            log::warn!("dyndns: fix ddns_user, ddns_password or ddns_name, then restart");
        }
    }
    let public = appliance.public_address();
    let address = Maybe(public.ipv4.map(core::net::Ipv4Addr::from));
    let line = bramble_status::Reach {
        public: Text::Shown(&address),
        source: Text::Read(public.source.map_or("-", |source| source.name())),
        echoes: status.echoes,
        echoes_answered: status.echoes_answered,
        check: Text::Read(status.check.word()),
    };
    log::info!("{line}");
}
