//! Eviction: which connection gives way when the pool is full.
//!
//! For a newcomer's block: first a spent closing connection, then the one idle longest,
//! then the oldest without a complete request header; never one waiting for or receiving
//! an answer. For a waiting request's session: an incomplete header holding one, a
//! response without progress, or (while an open window's request waits) an answer to a
//! narrow window that stalled.

use super::{
    Cause, Class, INCOMPLETE_HOLD_MICROS, NARROW_STALL_MICROS, NONE, PARTIAL_SCAN, State,
    StreamPool,
};
use crate::Service;
use bramble_hal::Instant;

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Frees the least valuable connection for a newcomer; false if none may go.
    pub(super) fn evict_for_newcomer(&mut self) -> bool {
        for (class, cause) in [
            (Class::Closing, Cause::EvictClosing),
            (Class::Idle, Cause::EvictIdle),
            (Class::Fresh, Cause::EvictIncomplete),
            (Class::Partial, Cause::EvictIncomplete),
        ] {
            let victim = match class {
                Class::Fresh | Class::Partial => self.oldest_incomplete(),
                Class::Closing => self.spent_closing(),
                _ => self.lists[class as usize].head,
            };
            if victim != NONE {
                self.abort(victim, cause);
                return true;
            }
        }
        false
    }

    /// A closing connection with nothing left to deliver (our FIN acknowledged, or a close
    /// decided without a session), looking at the oldest few.
    fn spent_closing(&self) -> u32 {
        let mut i = self.lists[Class::Closing as usize].head;
        for _ in 0..8 {
            if i == NONE {
                break;
            }
            let tcb = &self.tcbs[i as usize];
            if tcb.state == State::FinWait2 || tcb.lease == NONE {
                return i;
            }
            i = tcb.next;
        }
        NONE
    }

    /// The oldest connection without a complete request header: fresh or partial.
    fn oldest_incomplete(&self) -> u32 {
        let fresh = self.lists[Class::Fresh as usize].head;
        let partial = self.lists[Class::Partial as usize].head;
        match (fresh, partial) {
            (NONE, p) => p,
            (f, NONE) => f,
            (f, p) => {
                if self.tcbs[p as usize].since < self.tcbs[f as usize].since {
                    p
                } else {
                    f
                }
            }
        }
    }

    /// Frees a session for a waiting request: the oldest incomplete request holding one
    /// that has made no progress for [`INCOMPLETE_HOLD_MICROS`],
    /// else a response without progress for a while, else, when a request from a client
    /// with an open window waits, a response to a narrow window without progress for
    /// [`NARROW_STALL_MICROS`] (among the least recently progressed few). False if none
    /// may go.
    pub(super) fn reclaim_lease(&mut self, now: Instant) -> bool {
        let mut i = self.lists[Class::Partial as usize].head;
        let mut looked = 0;
        while i != NONE && looked < PARTIAL_SCAN {
            if now
                < self.tcbs[i as usize]
                    .since
                    .add_micros(INCOMPLETE_HOLD_MICROS)
            {
                // Ordered by start: the rest began (or last progressed) more recently.
                break;
            }
            if self.tcbs[i as usize].lease != NONE {
                self.abort(i, Cause::EvictIncomplete);
                return true;
            }
            i = self.tcbs[i as usize].next;
            looked += 1;
        }
        let head = self.lists[Class::Busy as usize].head;
        if head != NONE
            && now
                >= self.tcbs[head as usize]
                    .since
                    .add_micros(self.config.limits.stall_evict_micros)
        {
            self.abort(head, Cause::EvictStalled);
            return true;
        }
        if self.open_waiting_len() > 0 {
            let mut i = head;
            let mut looked = 0;
            while i != NONE && looked < PARTIAL_SCAN {
                if now < self.tcbs[i as usize].since.add_micros(NARROW_STALL_MICROS) {
                    // Ordered by last progress: the rest progressed more recently.
                    break;
                }
                if self.narrow(i) {
                    self.counters.evicted_narrow += 1;
                    self.abort(i, Cause::EvictStalled);
                    return true;
                }
                i = self.tcbs[i as usize].next;
                looked += 1;
            }
        }
        false
    }
}
