//! Switching the served site to the slot a publish made live, between requests.
//!
//! How (doc/publish.md, "Switching"): once a publish has written, read back and verified the
//! idle slot and saved the record naming it, the board reads the new slot's index (into RAM taken from the arena: it stays taken until the next restart),
//! checks it against the record, and puts it on the store's free side
//! ([`bramble_store::CardStore::switch`]); the server then serves it from the next request
//! on, on every pool ([`bramble_http::Server::switch_site`]). Responses already started keep
//! reading the old side, whose slot is not written while they do: the board holds the next
//! publish ([`bramble_net::appliance::Appliance::hold_publish`]) until the old side
//! retires, when its last response is through or, at the latest, when every response
//! could have met its deadline. What cannot switch live (no RAM for the index, another
//! segment length, a table too small) restarts into the new slot instead, as before.

use crate::appliance::Network;
use crate::arena::Arena;
use crate::site_slots::slot_name;
use crate::storage::{Store, StoreSide};
use bramble_fat::site_slots::SlotRecord;

/// A site switched away from, while its last responses are sent.
pub struct Retiring {
    /// The store side it is on.
    pub side: usize,
    /// Its slot.
    pub slot: u8,
    /// When the switch was made, in microseconds since reset.
    pub at: u64,
    /// When it retires even if responses still read it (each has met its own deadline by
    /// then), in microseconds since reset.
    pub deadline: u64,
}

/// Why a site made live by a publish is not served without a restart.
pub enum NoSwitch {
    /// The board serves no site from the card.
    NoStore,
    /// The store or its index could not take it.
    Storage(crate::storage::SwitchProblem),
    /// The server still retires an earlier switch's site.
    Busy,
}

impl core::fmt::Display for NoSwitch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NoSwitch::NoStore => f.write_str("no site is served from the card"),
            NoSwitch::Storage(problem) => write!(f, "{problem}"),
            NoSwitch::Busy => f.write_str("the site before is still retiring"),
        }
    }
}

/// Switches the served site to the slot `record` names live, between requests, on every
/// pool of `appliance`; returns the old site's side, to retire once its responses are done.
pub fn switch_live(
    appliance: &mut Network,
    store: Option<&'static Store>,
    sides: Option<&'static [StoreSide; 2]>,
    arena: &mut Arena,
    record: &SlotRecord,
) -> Result<Retiring, NoSwitch> {
    let (Some(store), Some(sides)) = (store, sides) else {
        return Err(NoSwitch::NoStore);
    };
    if appliance.retiring_responses().is_some() {
        return Err(NoSwitch::Busy);
    }
    let started = crate::platform::micros();
    let old_side = store.live_side();
    let old_slot = record.live ^ 1;
    let switched = crate::storage::switch_live(store, arena, record).map_err(NoSwitch::Storage)?;
    let site = bramble_http::SiteSource::Store(switched.index, &sides[switched.side & 1]);
    if !appliance.switch_site(site) {
        // Cannot happen (checked above). The store took the new site and the server did
        // not: the caller restarts, which serves the record's slot.
        return Err(NoSwitch::Busy);
    }
    let at = crate::platform::micros();
    let live = record.slots[usize::from(record.live & 1)];
    let limits = appliance.server().config().limits;
    // The longest a response of the old site may take: the response deadline, plus the
    // allowance for the largest body at the slowest rate, plus the close.
    let largest = u64::from(record.slots[usize::from(old_slot & 1)].len);
    let allowance = largest
        .saturating_mul(1_000_000)
        .checked_div(limits.min_send_bytes_per_second)
        .unwrap_or(0);
    let deadline = at
        .saturating_add(limits.response_micros)
        .saturating_add(allowance)
        .saturating_add(limits.close_micros);
    log::info!(
        "publish: serving version {} from slot {} without a restart (index of {} bytes read and \
         switched in {} us); slot {} retires when its last response is sent",
        live.version,
        slot_name(record.live),
        switched.index_bytes,
        at.saturating_sub(started),
        slot_name(old_slot)
    );
    Ok(Retiring {
        side: old_side,
        slot: old_slot,
        at,
        deadline,
    })
}
