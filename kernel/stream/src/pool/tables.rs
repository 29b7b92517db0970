//! The pool's indexes: the hash table a segment finds its block by, the lists linked
//! through the blocks (class lists, ready queue), and the retransmission timer wheel.
//!
//! None allocates: every link is a `u32` index in the control blocks ([`NONE`] for none).

use super::{IN_WHEEL, NONE, StreamPool, Tcb, WHEEL_SLOTS, WHEEL_TICK_SHIFT};
use crate::Service;
use crate::wire::Address;
use bramble_hal::Instant;

/// The 16 bytes of `address` folded to 32 bits (for the hash tables; the keyed mixing is
/// theirs).
pub(super) fn fold_address(address: &Address) -> u32 {
    address.chunks_exact(4).fold(0, |acc, word| {
        acc.rotate_left(5) ^ u32::from_be_bytes([word[0], word[1], word[2], word[3]])
    })
}

#[derive(Clone, Copy, Debug)]
pub(super) struct List {
    pub(super) head: u32,
    tail: u32,
    pub(super) len: u32,
}

impl List {
    pub(super) const EMPTY: List = List {
        head: NONE,
        tail: NONE,
        len: 0,
    };
}

/// Which pair of links a list uses.
#[derive(Clone, Copy)]
pub(super) enum Links {
    Class,
    Ready,
}

fn links(tcb: &mut Tcb, which: Links) -> (&mut u32, &mut u32) {
    match which {
        Links::Class => (&mut tcb.prev, &mut tcb.next),
        Links::Ready => (&mut tcb.ready_prev, &mut tcb.ready_next),
    }
}

pub(super) fn push_back(list: &mut List, tcbs: &mut [Tcb], i: u32, which: Links) {
    {
        let (prev, next) = links(&mut tcbs[i as usize], which);
        *prev = list.tail;
        *next = NONE;
    }
    if list.tail == NONE {
        list.head = i;
    } else {
        *links(&mut tcbs[list.tail as usize], which).1 = i;
    }
    list.tail = i;
    list.len += 1;
}

pub(super) fn unlink(list: &mut List, tcbs: &mut [Tcb], i: u32, which: Links) {
    let (prev, next) = {
        let (prev, next) = links(&mut tcbs[i as usize], which);
        let pair = (*prev, *next);
        *prev = NONE;
        *next = NONE;
        pair
    };
    if prev == NONE {
        list.head = next;
    } else {
        *links(&mut tcbs[prev as usize], which).1 = next;
    }
    if next == NONE {
        list.tail = prev;
    } else {
        *links(&mut tcbs[next as usize], which).0 = prev;
    }
    list.len -= 1;
}

/// The retransmission timers: a wheel of 1 ms slots (each the head of a list linked
/// through the blocks) with a bitmap of the slots in use.
pub(super) struct Wheel {
    pub(super) slots: [u32; WHEEL_SLOTS],
    pub(super) used: [u32; WHEEL_SLOTS / 32],
    /// The last tick processed.
    pub(super) cursor: u64,
}

impl Wheel {
    pub(super) fn tick_of(at: Instant) -> u64 {
        at.as_micros() >> WHEEL_TICK_SHIFT
    }

    pub(super) fn insert(&mut self, tcbs: &mut [Tcb], i: u32) {
        let tick = Self::tick_of(tcbs[i as usize].rto_at)
            .max(self.cursor + 1)
            .min(self.cursor + WHEEL_SLOTS as u64 - 1);
        let slot = (tick % WHEEL_SLOTS as u64) as usize;
        let head = self.slots[slot];
        let tcb = &mut tcbs[i as usize];
        tcb.wheel_slot = slot as u16;
        tcb.flags |= IN_WHEEL;
        tcb.wheel_prev = NONE;
        tcb.wheel_next = head;
        if head != NONE {
            tcbs[head as usize].wheel_prev = i;
        }
        self.slots[slot] = i;
        self.used[slot / 32] |= 1 << (slot % 32);
    }

    pub(super) fn remove(&mut self, tcbs: &mut [Tcb], i: u32) {
        let tcb = &mut tcbs[i as usize];
        if !tcb.has(IN_WHEEL) {
            return;
        }
        let slot = usize::from(tcb.wheel_slot);
        let (prev, next) = (tcb.wheel_prev, tcb.wheel_next);
        tcb.wheel_prev = NONE;
        tcb.wheel_next = NONE;
        tcb.flags &= !IN_WHEEL;
        if prev == NONE {
            self.slots[slot] = next;
        } else {
            tcbs[prev as usize].wheel_next = next;
        }
        if next != NONE {
            tcbs[next as usize].wheel_prev = prev;
        }
        if self.slots[slot] == NONE {
            self.used[slot / 32] &= !(1 << (slot % 32));
        }
    }

    /// The tick of the next slot in use after the cursor, if any.
    pub(super) fn next_tick(&self) -> Option<u64> {
        let start = ((self.cursor + 1) % WHEEL_SLOTS as u64) as usize;
        let words = WHEEL_SLOTS / 32;
        for step in 0..=words {
            let word_index = (start / 32 + step) % words;
            let mut word = self.used[word_index];
            if step == 0 {
                word &= !0u32 << (start % 32);
            }
            if step == words {
                word &= !(!0u32 << (start % 32));
            }
            if word != 0 {
                let slot = word_index * 32 + word.trailing_zeros() as usize;
                let distance = (slot + WHEEL_SLOTS - start) % WHEEL_SLOTS;
                return Some(self.cursor + 1 + distance as u64);
            }
        }
        None
    }
}

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    pub(super) fn bucket(&self, ip: &Address, port: u16) -> usize {
        let x = fold_address(ip) ^ self.hash_key;
        let y = (x.wrapping_mul(0x9e37_79b1) ^ u32::from(port)).wrapping_mul(self.hash_key);
        ((y ^ (y >> 15)) & self.bucket_mask) as usize
    }

    pub(super) fn lookup(&self, ip: &Address, port: u16) -> u32 {
        if self.buckets.is_empty() {
            return NONE;
        }
        let mut i = self.buckets[self.bucket(ip, port)];
        while i != NONE {
            let tcb = &self.tcbs[i as usize];
            if tcb.remote_port == port && tcb.remote_ip == *ip {
                return i;
            }
            i = tcb.hash_next;
        }
        NONE
    }
}
