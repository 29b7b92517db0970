//! Per-source accounting: how many connections each IPv4 address or IPv6 /64 holds, for
//! `PoolConfig::max_per_source`.
//!
//! An open-addressed table keyed like the hash table; a count that falls to zero is
//! removed by backward shifting, so that no tombstone is left.

use super::tables::fold_address;
use super::{Source, StreamPool};
use crate::stream::Service;
use crate::stream::wire::{self, Address};

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

/// An address prefix, in the pool's 16-byte form (IPv4 as IPv4-mapped, its length plus 96).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourcePrefix {
    /// The network address.
    pub address: Address,
    /// Leading bits that count (0 to 128).
    pub len: u8,
}

impl SourcePrefix {
    /// An IPv4 prefix (`len` at most 32).
    pub fn v4(address: [u8; 4], len: u8) -> Self {
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&address);
        Self {
            address: mapped,
            len: 96 + len.min(32),
        }
    }

    /// An IPv6 prefix (`len` at most 128).
    pub fn v6(address: [u8; 16], len: u8) -> Self {
        Self {
            address,
            len: len.min(128),
        }
    }

    /// Whether `address` lies in the prefix.
    pub fn contains(&self, address: &Address) -> bool {
        let bits = usize::from(self.len.min(128));
        let whole = bits / 8;
        if self.address[..whole] != address[..whole] {
            return false;
        }
        let rest = bits % 8;
        rest == 0 || {
            let mask = 0xffu8 << (8 - rest);
            self.address[whole] & mask == address[whole] & mask
        }
    }
}

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Exempts connections from these prefixes from `PoolConfig::max_per_source`: the owner's
    /// own caches (`proxy_from`), whose connections carry many clients each. Call before
    /// serving; a later change leaves counts of earlier connections behind harmlessly (a
    /// decrement of a source never counted is ignored). Prefixes past [`MAX_UNCAPPED`] are
    /// dropped.
    pub fn set_uncapped(&mut self, prefixes: &[SourcePrefix]) {
        self.uncapped.clear();
        for prefix in prefixes.iter().take(MAX_UNCAPPED) {
            let _ = self.uncapped.push(*prefix);
        }
    }

    /// Whether the per-source cap applies to a connection from `ip`.
    pub(super) fn capped(&self, ip: &Address) -> bool {
        self.config.max_per_source > 0 && !self.uncapped.iter().any(|prefix| prefix.contains(ip))
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
