//! Sessions and turns: leasing a session to a connection and taking it back, the class
//! lists that order connections by deadline and value, and the turns of the waiting
//! queues.
//!
//! After anything happens to a connection, `settle` asks its session where it is and puts
//! it on the list of its class. Waiting requests get free sessions first come first
//! served, the narrow-window queue one turn in [`NARROW_TURN`](super::NARROW_TURN) while the other has
//! requests.

use super::tables::{Links, push_back, unlink};
use super::{
    ACK_NOW, CELL_COMPLETE, COMMON_LANE, Cause, Class, DEFERRED, FIN_RECEIVED, FIN_WANTED,
    NARROW_WINDOW_SEGMENTS, NONE, SERVED, State, StreamPool,
};
use super::{RECENT_SOURCES, source_key};
use crate::{Admission, Service, SessionPhase};
use bramble_hal::Instant;

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Leases session slot `lease` to connection `i` and feeds it any parked bytes.
    pub(super) fn grant(&mut self, i: u32, lease: u32, now: Instant) {
        let idx = i as usize;
        debug_assert_eq!(self.free_lease, lease);
        self.free_lease = self.leases[lease as usize].next;
        self.leases[lease as usize].owner = i;
        self.tcbs[idx].lease = lease;
        self.counters.leased += 1;
        let carry = self.tcbs[idx].carry;
        let port = self.config.port;
        let peer = self.tcbs[idx].remote_ip;
        let session = &mut self.leases[lease as usize].session;
        self.service.open(session, &peer, port, carry, now);
        let cell = self.tcbs[idx].cell;
        if cell != NONE {
            let len = usize::from(self.cells[cell as usize].len);
            let session = &mut self.leases[lease as usize].session;
            let _ = self
                .service
                .receive(session, &self.cells[cell as usize].bytes[..len], now);
            self.cells[cell as usize].len = 0;
            self.cells[cell as usize].next = self.free_cell;
            self.free_cell = cell;
            self.tcbs[idx].cell = NONE;
            self.tcbs[idx].flags &= !CELL_COMPLETE;
            // The window was the cell's: offer the session's now.
            self.tcbs[idx].flags |= ACK_NOW;
        }
    }

    pub(super) fn release(&mut self, i: u32) {
        let idx = i as usize;
        let lease = self.tcbs[idx].lease;
        if lease == NONE {
            return;
        }
        let session = &mut self.leases[lease as usize].session;
        self.tcbs[idx].carry = self.service.release(session);
        self.tcbs[idx].lease = NONE;
        self.tcbs[idx].flags |= SERVED;
        self.leases[lease as usize].owner = NONE;
        self.leases[lease as usize].next = self.free_lease;
        self.free_lease = lease;
        self.counters.leased -= 1;
    }

    /// Moves connection `i` to `class`'s list (at the tail, with `since`).
    pub(super) fn set_class(&mut self, i: u32, class: Class, since: Instant) {
        let idx = i as usize;
        let old = self.tcbs[idx].class;
        if old == class {
            return;
        }
        if old != Class::None {
            unlink(&mut self.lists[old as usize], self.tcbs, i, Links::Class);
        }
        self.tcbs[idx].class = class;
        self.tcbs[idx].since = since;
        if matches!(
            class,
            Class::Waiting
                | Class::WaitingNarrow
                | Class::WaitingHeavy
                | Class::WaitingLight
                | Class::WaitingKeyed
        ) {
            // A newcomer may come before the request that was put off: look again.
            self.admit_at = None;
        }
        if class != Class::None {
            push_back(&mut self.lists[class as usize], self.tcbs, i, Links::Class);
        }
    }

    /// Records acknowledgment progress of a busy connection: to the tail of its list.
    pub(super) fn touch(&mut self, i: u32, now: Instant) {
        let class = self.tcbs[i as usize].class;
        unlink(&mut self.lists[class as usize], self.tcbs, i, Links::Class);
        self.tcbs[i as usize].since = now;
        push_back(&mut self.lists[class as usize], self.tcbs, i, Links::Class);
    }

    /// After anything happened to connection `i`: its session's phase, its class, whether
    /// it has something to send.
    pub(super) fn settle(&mut self, i: u32, now: Instant) {
        let idx = i as usize;
        if self.tcbs[idx].state == State::Free {
            return;
        }
        let mut phase = None;
        let lease = self.tcbs[idx].lease;
        if lease != NONE {
            let session = &self.leases[lease as usize].session;
            let current = self.service.phase(session);
            match current {
                SessionPhase::Abort => {
                    self.abort(i, Cause::Aborted);
                    return;
                }
                SessionPhase::Closing => self.tcbs[idx].flags |= FIN_WANTED,
                SessionPhase::Idle => {
                    if self.tcbs[idx].has(FIN_RECEIVED) {
                        self.tcbs[idx].flags |= FIN_WANTED;
                    } else if self.tcbs[idx].state == State::Established {
                        self.release(i);
                    }
                }
                SessionPhase::Receiving { .. } => {
                    if self.tcbs[idx].has(FIN_RECEIVED) {
                        // The request can never complete.
                        self.tcbs[idx].flags |= FIN_WANTED;
                    }
                }
                SessionPhase::Sending => {}
            }
            phase = Some(current);
        } else if self.tcbs[idx].has(FIN_RECEIVED)
            && self.tcbs[idx].cell != NONE
            && self.tcbs[idx].has(CELL_COMPLETE)
            && !self.service.answerable_after_fin(self.tcbs[idx].carry)
        {
            // The client left before its request's turn, and it cannot be answered now (a
            // ClientHello whose handshake needs the client's Finished): no work for it.
            self.abort(i, Cause::Abandoned);
            return;
        } else if self.tcbs[idx].has(FIN_RECEIVED)
            && !(self.tcbs[idx].cell != NONE && self.tcbs[idx].has(CELL_COMPLETE))
        {
            // The client is done and nothing of it waits for an answer.
            self.tcbs[idx].flags |= FIN_WANTED;
        }
        let tcb = &self.tcbs[idx];
        let class = if matches!(
            tcb.state,
            State::FinWait1 | State::FinWait2 | State::Closing | State::LastAck
        ) || (tcb.has(FIN_WANTED) && tcb.lease == NONE)
        {
            Class::Closing
        } else if tcb.lease != NONE {
            match phase {
                Some(SessionPhase::Receiving { .. }) => Class::Partial,
                _ => Class::Busy,
            }
        } else if tcb.cell != NONE {
            if !tcb.has(CELL_COMPLETE) {
                Class::Partial
            } else {
                self.waiting_class(i)
            }
        } else if tcb.has(SERVED) {
            Class::Idle
        } else {
            Class::Fresh
        };
        let since = match (class, phase) {
            (Class::Partial, Some(SessionPhase::Receiving { since, .. })) => since,
            (Class::Partial, _) => tcb.request_start,
            (Class::Fresh, _) => tcb.since,
            _ => now,
        };
        if class == Class::Partial && tcb.class == Class::Partial && since > tcb.since {
            // A request whose service says it progressed (a signed upload's body: its
            // deadline runs from the last byte): to the tail of the list, the new start.
            self.touch(i, since);
        } else {
            self.set_class(i, class, since);
        }
        if self.wants_transmit(i) {
            self.make_ready(i);
        }
    }

    pub(super) fn lease_phase(&self, i: u32) -> Option<SessionPhase> {
        let lease = self.tcbs[i as usize].lease;
        (lease != NONE).then(|| self.service.phase(&self.leases[lease as usize].session))
    }

    pub(super) fn send_len(&self, i: u32) -> usize {
        let lease = self.tcbs[i as usize].lease;
        if lease == NONE {
            0
        } else {
            self.service.send_len(&self.leases[lease as usize].session)
        }
    }

    /// Gives free sessions to the connections waiting for one, each queue in order (the
    /// narrow-window queue one turn in [`NARROW_TURN`](super::NARROW_TURN) while the other has requests); when
    /// none is free, takes them back from slow headers and stalled responses.
    pub(super) fn grant_waiting(&mut self, now: Instant) {
        // The service put the request whose turn it is off until then, and nothing joined a
        // queue since: nothing to look at before (every poll of a flood would price the same
        // hello and walk the lanes again for nothing) but the requests that need no
        // admission, which a session given back since may serve.
        if self.admit_at.is_some_and(|at| now < at) {
            self.grant_keyed(now);
            return;
        }
        while self.waiting_len() > 0 {
            if self.free_lease == NONE && !self.reclaim_lease(now) {
                break;
            }
            let Some((i, lane)) = self.next_waiting() else {
                break;
            };
            // The service may price the request first (a TLS handshake's cost) and put it off:
            // then it stays at the head of its queue and its lane keeps the turn: nothing
            // passes it (a dear handshake is not starved by cheaper ones), and a request in
            // another lane waits for at most this one; but requests that need no admission
            // ([`Lane::Keyed`](crate::Lane::Keyed)) go meanwhile, since they take nothing of
            // what it waits for.
            match self.ask_admission(i, now) {
                Ok(price) => {
                    self.admit_at = None;
                    if !self.grant_turn(i, lane, price, now) {
                        break;
                    }
                }
                Err(Some(at)) => {
                    self.admit_at = Some(at);
                    self.grant_keyed(now);
                    break;
                }
                Err(None) => {}
            }
        }
    }

    /// Asks the service whether waiting connection `i`'s request may have a session now:
    /// `Ok` with its price, or `Err` with when to ask again (it was put off), or `Err(None)`
    /// when it was refused (the connection is reset).
    fn ask_admission(&mut self, i: u32, now: Instant) -> Result<u32, Option<Instant>> {
        let cell = self.tcbs[i as usize].cell;
        if cell == NONE {
            return Ok(1);
        }
        let parked = &self.cells[cell as usize];
        let carry = self.tcbs[i as usize].carry;
        let price = self
            .service
            .price(&parked.bytes[..usize::from(parked.len)], carry);
        let first = !self.tcbs[i as usize].has(DEFERRED);
        match self
            .service
            .admit(&parked.bytes[..usize::from(parked.len)], carry, first, now)
        {
            Admission::Now => Ok(price),
            Admission::Later(at) => {
                if first {
                    self.tcbs[i as usize].flags |= DEFERRED;
                    self.counters.deferred += 1;
                }
                Err(Some(at))
            }
            Admission::Refuse => {
                self.counters.refused_service += 1;
                self.abort(i, Cause::Aborted);
                Err(None)
            }
        }
    }

    /// Gives waiting connection `i` (the head of lane `lane`, admitted at `price`) a
    /// session; false if it did not leave its queue (which should not happen).
    fn grant_turn(&mut self, i: u32, lane: usize, price: u32, now: Instant) -> bool {
        self.lane_work[lane] = self.lane_work[lane].saturating_add(u64::from(price.max(1)));
        self.recent_sources[self.recent_next] = source_key(&self.tcbs[i as usize].remote_ip);
        self.recent_next = (self.recent_next + 1) % RECENT_SOURCES;
        let class = self.tcbs[i as usize].class;
        let lease = self.free_lease;
        self.grant(i, lease, now);
        self.settle(i, now);
        // Never spin on a connection that stayed where it was.
        self.tcbs[i as usize].class != class
    }

    /// While the request whose turn it is waits for its admission: sessions for the
    /// requests that need none ([`Class::WaitingKeyed`]), in their order, as the common
    /// lane's turns.
    fn grant_keyed(&mut self, now: Instant) {
        while self.lists[Class::WaitingKeyed as usize].len > 0 {
            if self.free_lease == NONE && !self.reclaim_lease(now) {
                break;
            }
            let i = self.first_of(Class::WaitingKeyed);
            if i == NONE {
                break;
            }
            match self.ask_admission(i, now) {
                Ok(price) => {
                    if !self.grant_turn(i, COMMON_LANE, price, now) {
                        break;
                    }
                }
                // Not what this queue is for; it waits its turn in the lane.
                Err(Some(_)) => break,
                Err(None) => {}
            }
        }
    }

    /// Whether connection `i`'s client offers a window narrower than
    /// [`NARROW_WINDOW_SEGMENTS`] segments.
    pub(super) fn narrow(&self, i: u32) -> bool {
        let tcb = &self.tcbs[i as usize];
        tcb.snd_wnd < NARROW_WINDOW_SEGMENTS * u32::from(tcb.mss)
    }
}
