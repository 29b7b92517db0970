//! Per-source accounting: how many connections each IPv4 address or IPv6 /64 holds, for
//! `PoolConfig::max_per_source`.
//!
//! An open-addressed table keyed like the hash table; a count that falls to zero is
//! removed by backward shifting, so that no tombstone is left.

use super::tables::fold_address;
use super::{Source, StreamPool};
use crate::Service;
use crate::wire::{self, Address};
use bramble_http::status::Prefix;
use core::net::{IpAddr, Ipv6Addr};

/// What the per-source cap counts `address` as: an IPv4 address itself, an IPv6 address
/// by its /64 (one host or one household's network: a host may use any address of it).
pub fn source_key(address: &Address) -> Address {
    let mut key = *address;
    if wire::as_v4(address).is_none() {
        key[8..].fill(0);
    }
    key
}

/// Most prefixes exempt from the per-source cap ([`StreamPool::set_uncapped`]).
pub const MAX_UNCAPPED: usize = 4;

/// Whether `prefix` holds `ip`, an address in the pool's 16-byte form (IPv4 as IPv4-mapped).
pub(crate) fn holds(prefix: &Prefix, ip: &Address) -> bool {
    prefix.contains(IpAddr::V6(Ipv6Addr::from(*ip)))
}

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Exempts connections from these prefixes from `PoolConfig::max_per_source`: the owner's
    /// own caches (`proxy_from`), whose connections carry many clients each. Call before
    /// serving; a later change leaves counts of earlier connections behind harmlessly (a
    /// decrement of a source never counted is ignored). Prefixes past [`MAX_UNCAPPED`] are
    /// dropped.
    pub fn set_uncapped(&mut self, prefixes: &[Prefix]) {
        self.uncapped.clear();
        for prefix in prefixes.iter().take(MAX_UNCAPPED) {
            let _ = self.uncapped.push(*prefix);
        }
    }

    /// Whether the per-source cap applies to a connection from `ip`.
    /// The prefixes are the same `proxy_from` list the HTTP engine trusts `Forwarded` from,
    /// matched by the same [`Prefix::contains`] (an IPv4-mapped address counts as IPv4).
    pub(super) fn capped(&self, ip: &Address) -> bool {
        self.config.max_per_source > 0 && !self.uncapped.iter().any(|prefix| holds(prefix, ip))
    }

    fn source_home(&self, ip: &Address) -> usize {
        (fold_address(ip).wrapping_mul(0x9e37_79b1) ^ self.hash_key) as usize % self.sources.len()
    }

    fn source_slot(&self, ip: &Address) -> Option<usize> {
        let len = self.sources.len();
        if len == 0 {
            return None;
        }
        let start = self.source_home(ip);
        (0..len)
            .map(|k| (start + k) % len)
            .find(|&slot| self.sources[slot].count == 0 || self.sources[slot].ip == *ip)
    }

    pub(super) fn source_count(&self, ip: &Address) -> u32 {
        self.source_slot(ip)
            .map_or(0, |slot| self.sources[slot].count)
    }

    pub(super) fn source_add(&mut self, ip: &Address, delta: i32) {
        let Some(slot) = self.source_slot(ip) else {
            return;
        };
        let entry = &mut self.sources[slot];
        if delta > 0 {
            entry.ip = *ip;
            entry.count += 1;
            return;
        }
        if entry.count == 0 || entry.ip != *ip {
            return;
        }
        entry.count -= 1;
        if entry.count == 0 {
            // Backward-shift deletion keeps every probe sequence unbroken.
            let len = self.sources.len();
            let mut hole = slot;
            let mut k = (slot + 1) % len;
            while self.sources[k].count != 0 {
                let home = self.source_home(&self.sources[k].ip);
                let distance_home = (k + len - home) % len;
                let distance_hole = (k + len - hole) % len;
                if distance_home >= distance_hole {
                    self.sources[hole] = self.sources[k];
                    self.sources[k] = Source::EMPTY;
                    hole = k;
                }
                k = (k + 1) % len;
                if k == slot {
                    break;
                }
            }
        }
    }
}
