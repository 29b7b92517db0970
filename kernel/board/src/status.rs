//! The board's `status:` lines for HTTPS, the clock and ACME, gathered from the network,
//! TLS and ACME parts of the board.
//!
//! They live here rather than beside the code they report on so that the tls and acme
//! modules, which the network module calls to prepare, do not reach back up to the network
//! module for its counters: the dependency runs one way, network -> acme -> tls, and this
//! module reads all three.

use crate::network::Network;
use crate::platform::micros;
use crate::tls;

/// The status line's clock and HTTPS parts: clock state, handshakes, failures, deferrals,
/// heap, and the certificate's validity against the clock.
pub fn print_https(appliance: &Network) {
    let now = bramble_hal::Instant::from_micros(micros());
    match appliance.clock_status(now) {
        Some(clock) => match (clock.unix_seconds, clock.last_sync) {
            (Some(unix), Some((stratum, ago))) => log::info!(
                "status: clock set, Unix time {unix}, from a stratum {stratum} server {ago} s ago"
            ),
            _ => log::info!(
                "status: clock not set yet ({} time servers known); no Date on responses",
                clock.servers
            ),
        },
        None => log::info!("status: clock off"),
    }
    let Some(counters) = appliance.tls_counters() else {
        if let Some(reason) = tls::not_started_reason() {
            log::info!("status: https not started: {reason}; plain HTTP is served");
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
    let uncovered = match tls::uncovered_names() {
        Some(names) => alloc::format!(", does not cover {names}"),
        None => alloc::string::String::new(),
    };
    log::info!(
        "status: https open {}, handshakes full {} resumed {}, failures {}, deferred {}, \
         heap {in_use} B in use, {peak} B at most, of {size} B; certificate {state}{uncovered}; \
         closed for memory {}; refused: budget {} no hello {} not TLS {}; priced P-256 {}, \
         handshake work {} M instructions",
        appliance.open_https_connections(),
        counters.full_handshakes,
        counters.resumed_handshakes,
        counters.failures,
        counters.deferred,
        counters.memory_closed,
        counters.refused_budget,
        counters.refused_no_hello,
        counters.refused_not_tls,
        counters.priced_p256,
        counters.charged_millions,
    );
}

/// The status line's ACME part: where it stands, the certificate's end, the next order,
/// orders and certificates, the issuance bounds' counts (certificates not valid by the
/// clock, card saves and those the daily cap refused, accounts made), failures and the last
/// error.
pub fn print_acme(appliance: &Network) {
    let now = bramble_hal::Instant::from_micros(micros());
    let Some(status) = appliance.acme_status(now) else {
        return;
    };
    log::info!(
        "status: acme {:?}, certificate ends at Unix time {}, next order in {}, orders {}, \
         issued {} ({} not valid by the clock), saves {} ({} refused by the daily cap), \
         accounts made {}, failures in a row {}, last error: {}",
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
        status.issued_invalid,
        status.saves,
        status.saves_refused,
        status.accounts,
        status.failures,
        status.last_error.as_deref().unwrap_or("none")
    );
}
