//! Timers: each class's deadline, the retransmission timer, and when to run next.
//!
//! Class deadlines are read at the heads of their lists (each ordered by `since`), so a
//! poll never walks the pool; idle and first-byte allowances shrink as the pool fills.
//! Retransmission timers sit in the wheel (`tables`); the estimate is RFC 6298's.

use super::tables::Wheel;
use super::{
    Cause, Class, INCOMPLETE_HOLD_MICROS, MAX_RTO_MICROS, MIN_RTO_MICROS, NARROW_RECHECK_MICROS,
    NARROW_STALL_MICROS, NONE, PARTIAL_SCAN, PERSIST, RECOVERY, StreamPool, TIMING, Tcb,
    WHEEL_SLOTS, WHEEL_TICK_MICROS,
};
use crate::{Service, SessionPhase};
use bramble_hal::Instant;

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Occupancy in thousandths of the capacity.
    fn pressure(&self) -> u64 {
        let capacity = self.tcbs.len().max(1) as u64;
        u64::from(self.counters.open) * 1000 / capacity
    }

    /// `full` while the pool is at most half full, shrinking linearly to `min` when full.
    fn shrunk(&self, full: u64, min: u64) -> u64 {
        if self.counters.open as usize * 2 <= self.tcbs.len() {
            // The common case, without the division.
            return full;
        }
        let pressure = self.pressure();
        if pressure <= 500 {
            return full;
        }
        let left = 1000u64.saturating_sub(pressure);
        (full * left / 500).max(min).min(full)
    }

    /// The oldest connection of `class` (its list is in order of `since`) if it has been there
    /// `allowance` microseconds or more by `now`.
    fn overdue_head(&self, class: Class, allowance: u64, now: Instant) -> Option<u32> {
        let head = self.lists[class as usize].head;
        (head != NONE && now >= self.tcbs[head as usize].since.add_micros(allowance))
            .then_some(head)
    }

    fn idle_allowance(&self) -> u64 {
        let limits = self.config.limits;
        self.shrunk(limits.idle_micros, limits.idle_min_micros)
    }

    fn first_byte_allowance(&self) -> u64 {
        let limits = self.config.limits;
        self.shrunk(limits.first_byte_micros, limits.idle_min_micros)
    }

    fn header_deadline(&self, i: u32) -> Instant {
        let limits = self.config.limits;
        let tcb = &self.tcbs[i as usize];
        let bytes = if tcb.lease != NONE {
            match self.service.phase(&self.leases[tcb.lease as usize].session) {
                SessionPhase::Receiving { bytes, .. } => bytes as u64,
                _ => 0,
            }
        } else if tcb.cell != NONE {
            u64::from(self.cells[tcb.cell as usize].len)
        } else {
            0
        };
        let extension = bytes
            .checked_div(limits.header_min_rate)
            .map_or(0, |seconds| seconds.saturating_mul(1_000_000));
        tcb.since.add_micros(
            limits
                .header_micros
                .saturating_add(extension)
                .min(limits.header_max_micros.max(limits.header_micros)),
        )
    }

    /// Runs every deadline due at `now`: retransmissions, and the class deadlines.
    pub(super) fn expire(&mut self, now: Instant) {
        // Retransmission and window-probe timers.
        // Every tick before the current one is over: all its timers are due. (The current
        // tick waits for the next poll: at most one tick late, never processed twice.)
        let last_tick = Wheel::tick_of(now).saturating_sub(1);
        let mut steps = 0;
        while self.wheel.cursor < last_tick && steps < WHEEL_SLOTS {
            let Some(tick) = self.wheel.next_tick() else {
                self.wheel.cursor = last_tick;
                break;
            };
            if tick > last_tick {
                self.wheel.cursor = last_tick;
                break;
            }
            self.wheel.cursor = tick;
            steps += 1;
            let slot = (tick % WHEEL_SLOTS as u64) as usize;
            while self.wheel.slots[slot] != NONE {
                let i = self.wheel.slots[slot];
                self.wheel.remove(self.tcbs, i);
                if self.tcbs[i as usize].rto_at <= now {
                    self.on_rto(i, now);
                } else {
                    self.wheel.insert(self.tcbs, i);
                }
            }
        }
        let limits = self.config.limits;
        while let Some(i) = self.overdue_head(Class::Closing, limits.close_micros, now) {
            self.abort(i, Cause::CloseTimeout);
        }
        let first_byte = self.first_byte_allowance();
        while let Some(i) = self.overdue_head(Class::Fresh, first_byte, now) {
            self.counters.timeout_first_byte += 1;
            self.close_gracefully(i, now);
        }
        let idle = self.idle_allowance();
        while let Some(i) = self.overdue_head(Class::Idle, idle, now) {
            self.counters.timeout_idle += 1;
            self.close_gracefully(i, now);
        }
        while let Some(i) = self.overdue_head(Class::Busy, limits.send_stall_micros, now) {
            self.abort(i, Cause::SendTimeout);
        }
        // Partial headers: deadlines depend on the bytes received, so look at every one old
        // enough to be due, a bounded number per poll.
        let mut i = self.lists[Class::Partial as usize].head;
        let mut looked = 0;
        while i != NONE && looked < PARTIAL_SCAN {
            let next = self.tcbs[i as usize].next;
            let since = self.tcbs[i as usize].since;
            if now < since.add_micros(limits.header_micros) {
                break;
            }
            if self.header_deadline(i) <= now {
                self.abort(i, Cause::HeaderTimeout);
            } else {
                looked += 1;
            }
            i = next;
        }
        // Sessions for waiting requests.
        self.grant_waiting(now);
    }

    fn on_rto(&mut self, i: u32, now: Instant) {
        let tcb = &mut self.tcbs[i as usize];
        if tcb.has(PERSIST) || (tcb.snd_una == tcb.snd_max && tcb.snd_wnd == 0) {
            // Zero-window probe due.
            tcb.flags |= PERSIST;
            tcb.backoff = tcb.backoff.saturating_add(1);
            self.make_ready(i);
            return;
        }
        if tcb.snd_una == tcb.snd_max {
            return;
        }
        self.counters.retransmit_timeouts += 1;
        let mss = u32::from(tcb.mss);
        tcb.ssthresh = (tcb.in_flight() / 2).max(2 * mss);
        tcb.cwnd = mss;
        tcb.snd_nxt = tcb.snd_una;
        tcb.flags &= !(TIMING | RECOVERY);
        tcb.dupacks = 0;
        tcb.backoff = tcb.backoff.saturating_add(1);
        tcb.rto = tcb.rto.saturating_mul(2).min(MAX_RTO_MICROS);
        tcb.rto_at = now.add_micros(u64::from(tcb.rto));
        self.wheel.insert(self.tcbs, i);
        self.make_ready(i);
    }

    /// When the pool next needs to run if nothing arrives: the earliest retransmission or
    /// class deadline, or now if replies wait to be sent.
    pub fn next_deadline(&self, now: Instant) -> Option<Instant> {
        if !self.control.is_empty() || self.ready.head != NONE {
            return Some(now);
        }
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| {
            next = Some(next.map_or(at, |n| n.min(at)));
        };
        if let Some(tick) = self.wheel.next_tick() {
            // Processed once its tick is over.
            consider(Instant::from_micros((tick + 1) * WHEEL_TICK_MICROS));
        }
        let limits = self.config.limits;
        let head_since = |class: Class| {
            let head = self.lists[class as usize].head;
            (head != NONE).then(|| self.tcbs[head as usize].since)
        };
        if let Some(since) = head_since(Class::Closing) {
            consider(since.add_micros(limits.close_micros));
        }
        if let Some(at) = self.admit_at.filter(|_| self.waiting_len() > 0) {
            consider(at);
        }
        if let Some(since) = head_since(Class::Fresh) {
            consider(since.add_micros(self.first_byte_allowance()));
        }
        if let Some(since) = head_since(Class::Idle) {
            consider(since.add_micros(self.idle_allowance()));
        }
        if let Some(since) = head_since(Class::Busy) {
            consider(since.add_micros(limits.send_stall_micros));
            if self.waiting_len() > 0 {
                consider(since.add_micros(limits.stall_evict_micros));
            }
            if self.open_waiting_len() > 0 {
                // A narrow response may be taken back: from when the least recently
                // progressed one could be, looking again now and then (the one at the
                // head may have an open window).
                consider(
                    since
                        .add_micros(NARROW_STALL_MICROS)
                        .max(now.add_micros(NARROW_RECHECK_MICROS)),
                );
            }
        }
        let partial = self.lists[Class::Partial as usize].head;
        if partial != NONE {
            let since = self.tcbs[partial as usize].since;
            let at = since.add_micros(limits.header_micros);
            // Past its base allowance: its exact deadline (or, if others behind it are due
            // too, the next poll looks at them) no later than a second from now.
            consider(if at <= now {
                self.header_deadline(partial).min(now.add_micros(1_000_000))
            } else {
                at
            });
            if self.waiting_len() > 0 && self.free_lease == NONE {
                // Its session may be taken back for a waiting request from then (looking
                // again now and then: the head may hold none).
                consider(
                    since
                        .add_micros(INCOMPLETE_HOLD_MICROS)
                        .max(now.add_micros(NARROW_RECHECK_MICROS)),
                );
            }
        }
        next
    }
}

/// RFC 6298 §2 round-trip estimate from a sample of `sample` microseconds.
pub(super) fn update_rtt(tcb: &mut Tcb, sample: u32) {
    if tcb.srtt == 0 {
        tcb.srtt = sample.max(1);
        tcb.rttvar = sample / 2;
    } else {
        let delta = tcb.srtt.abs_diff(sample);
        tcb.rttvar = (3 * (tcb.rttvar / 4)).saturating_add(delta / 4);
        tcb.srtt = (7 * (tcb.srtt / 8)).saturating_add(sample / 8).max(1);
    }
    tcb.rto = tcb
        .srtt
        .saturating_add((4 * tcb.rttvar).max(1_000))
        .clamp(MIN_RTO_MICROS, MAX_RTO_MICROS);
}
