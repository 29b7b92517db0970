//! The board's `status:` lines for HTTPS, the clock and ACME, gathered from the network,
//! TLS and ACME parts of the board.
//!
//! They live here rather than beside the code they report on so that the tls and acme
//! modules, which the network module calls to prepare, do not reach back up to the network
//! module for its counters: the dependency runs one way, network -> acme -> tls, and this
//! module reads all three.

use crate::appliance::Network;
use crate::platform::micros;
use crate::tls;
use bramble_status::Text;

/// The status line's clock and HTTPS parts: clock state, handshakes, failures, deferrals,
/// heap, and the certificate's validity against the clock.
pub fn print_https(appliance: &Network) {
    let now = bramble_hal::Instant::from_micros(micros());
    match appliance.clock_status(now) {
        Some(clock) => match (clock.unix_seconds, clock.last_sync) {
            (Some(unix), Some((stratum, ago))) => {
                let line = bramble_status::ClockSet { unix, stratum, ago };
                log::info!("{line}");
            }
            _ => {
                let line = bramble_status::ClockUnset {
                    servers: clock.servers,
                };
                log::info!("{line}");
            }
        },
        None => log::info!("{}", bramble_status::ClockOff {}),
    }
    let Some(counters) = appliance.tls_counters() else {
        if let Some(reason) = tls::not_started_reason() {
            let line = bramble_status::HttpsNotStarted {
                reason: Text::Shown(&reason),
            };
            log::info!("{line}");
        }
        return;
    };
    let (in_use, peak, size) = tls::heap_usage();
    let certificate = tls::certificate().map(|identity| identity.validity());
    let unix = appliance
        .unix_seconds(now)
        .map(|unix| i64::try_from(unix).unwrap_or(i64::MAX));
    let state = match (certificate, unix) {
        (None, _) => match appliance.acme_status(now).and_then(|acme| acme.not_after) {
            Some(end) => alloc::format!("from ACME, expires {}", tls::Date(end)),
            None if appliance.acme_status(now).is_some() => {
                alloc::string::String::from("from ACME, none yet")
            }
            None => alloc::string::String::from("none"),
        },
        (Some(validity), None) => alloc::format!(
            "not checked (no clock), expires {}",
            tls::Date(validity.not_after)
        ),
        (Some(validity), Some(unix)) if unix > validity.not_after => {
            alloc::format!("EXPIRED on {}", tls::Date(validity.not_after))
        }
        (Some(validity), Some(unix)) if unix < validity.not_before => {
            alloc::format!("NOT YET VALID, from {}", tls::Date(validity.not_before))
        }
        (Some(validity), Some(unix)) => alloc::format!(
            "valid, expires {} (in {} days)",
            tls::Date(validity.not_after),
            (validity.not_after - unix) / 86_400
        ),
    };
    let certificate = match tls::uncovered_names() {
        Some(names) => alloc::format!("{state}, does not cover {names}"),
        None => state,
    };
    let heap = alloc::format!("{in_use} B in use, {peak} B at most, of {size} B");
    let line = bramble_status::Https {
        open: appliance.open_https_connections(),
        full: counters.full_handshakes,
        resumed: counters.resumed_handshakes,
        h2: counters.h2_connections,
        failures: counters.failures,
        deferred: counters.deferred,
        heap: Text::Read(&heap),
        certificate: Text::Read(&certificate),
        closed_for_memory: counters.memory_closed,
        refused_not_tls: counters.refused_not_tls,
        priced_p256: counters.priced_p256,
        work_millions: counters.charged_millions,
        suspended: counters.suspended,
        suspended_now: counters.suspended_now,
        h2_suspended: counters.h2_suspended,
        h2_resumed: counters.h2_resumed,
        h2_closed_for_room: counters.h2_closed_for_room,
        h2_parked_bytes: counters.h2_parked_bytes,
    };
    log::info!("{line}");
    if let Some(pool) = appliance.https_pool_counters() {
        let line = bramble_status::HttpsConnections {
            pool: Text::Shown(&pool),
        };
        log::info!("{line}");
    }
}

/// The status line's ACME part: where it stands, the certificate's end, the next order,
/// orders and certificates, the issuance bounds' counts (certificates not valid by the
/// clock, card saves and those the daily cap refused, accounts made; over boots, from the
/// store's history: the last certificate, saves and accounts in 24 h), failures and the last
/// error.
pub fn print_acme(appliance: &Network) {
    let now = bramble_hal::Instant::from_micros(micros());
    let Some(status) = appliance.acme_status(now) else {
        return;
    };
    let phase = status.phase;
    let not_after = status.not_after.map_or_else(
        || alloc::string::String::from("(none yet)"),
        |end| alloc::format!("{end}"),
    );
    let next_order_in = status.next_order_in.map_or_else(
        || alloc::string::String::from("-"),
        |s| alloc::format!("{s} s"),
    );
    let since_last_issue = status.since_last_issue.map_or_else(
        || alloc::string::String::from("-"),
        |s| alloc::format!("{s} s ago"),
    );
    let line = bramble_status::Acme {
        phase: Text::Debugged(&phase),
        not_after: Text::Read(&not_after),
        next_order_in: Text::Read(&next_order_in),
        orders: status.orders,
        issued: status.issued,
        issued_invalid: status.issued_invalid,
        saves: status.saves,
        saves_refused: status.saves_refused,
        accounts: status.accounts,
        since_last_issue: Text::Read(&since_last_issue),
        saves_in_day: status.saves_in_day,
        accounts_in_day: status.accounts_in_day,
        history: Text::Shown(&status.history),
        failures: status.failures,
        last_error: Text::Read(status.last_error.as_deref().unwrap_or("none")),
    };
    log::info!("{line}");
}

/// The status line's router part: the mapping, its protocol and lifetime, the outside
/// address and any NAT warning (nothing with `router_ports = off`).
pub fn print_router(appliance: &Network) {
    let now = bramble_hal::Instant::from_micros(micros());
    if let (Some(mapper), Some(pinholes)) = (appliance.port_mapper(), appliance.ipv6_pinholes()) {
        let report = Both(mapper.report(now), pinholes.report(now));
        let counters = mapper.counters();
        let line = bramble_status::Router {
            report: Text::Shown(&report),
            rounds: counters.rounds,
            restarts: counters.gateway_restarts,
            protocol_changes: counters.protocol_changes,
        };
        log::info!("{line}");
    }
}

/// A value in a status line, or `-` while there is none.
pub struct Maybe<T>(pub Option<T>);

impl<T: core::fmt::Display> core::fmt::Display for Maybe<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.0 {
            Some(value) => write!(f, "{value}"),
            None => f.write_str("-"),
        }
    }
}

/// Two reports one after the other (the IPv4 mapping's, then the IPv6 pinholes', which
/// starts with its own `; `).
struct Both<A, B>(A, B);

impl<A: core::fmt::Display, B: core::fmt::Display> core::fmt::Display for Both<A, B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}{}", self.0, self.1)
    }
}

/// A clean shutdown's deletions of the router's mappings and pinholes: queued, then the
/// interface polled until they have left the board (see
/// [`bramble_net::appliance::router::STOP_WAIT_MICROS`] for how long at most).
pub fn stop_router(appliance: &mut Network) {
    appliance.stop_router(|| bramble_hal::Instant::from_micros(micros()));
}

/// The `router` console command: the mapping as the status line gives it, and with `again`,
/// a new round of requests now.
pub fn router_command(appliance: Option<&mut Network>, again: bool) {
    let Some(appliance) = appliance else {
        log::warn!("router: no network");
        return;
    };
    if appliance.port_mapper().is_none() {
        log::info!("router: router_ports = off; nothing is asked of the router");
        return;
    }
    if again {
        appliance.router_again(bramble_hal::Instant::from_micros(micros()));
    } else {
        print_router(appliance);
    }
}
