//! Closing: resetting a connection (counted by its cause), the last ACK, a graceful FIN,
//! and freeing a block of everything it holds.

use super::sources::source_key;
use super::tables::{Links, unlink};
use super::{BLOCKED, Cause, Class, Control, FIN_WANTED, NONE, READY, State, StreamPool, Tcb};
use crate::wire::flags;
use crate::{Ending, Service};
use bramble_hal::Instant;

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Resets connection `i` (counted by `cause`) and frees it.
    pub(super) fn abort(&mut self, i: u32, cause: Cause) {
        let counter = match cause {
            Cause::EvictClosing => &mut self.counters.evicted_closing,
            Cause::EvictIdle => &mut self.counters.evicted_idle,
            Cause::EvictIncomplete => &mut self.counters.evicted_incomplete,
            Cause::EvictStalled => &mut self.counters.evicted_stalled,
            Cause::HeaderTimeout => &mut self.counters.timeout_header,
            Cause::SendTimeout => &mut self.counters.timeout_send,
            Cause::CloseTimeout => &mut self.counters.timeout_close,
            Cause::Aborted => &mut self.counters.aborted,
            Cause::Abandoned => &mut self.counters.abandoned,
        };
        *counter += 1;
        let tcb = &self.tcbs[i as usize];
        let reply = Control {
            dst_mac: tcb.remote_mac,
            src_ip: tcb.local_ip,
            dst_ip: tcb.remote_ip,
            dst_port: tcb.remote_port,
            seq: tcb.snd_nxt,
            ack: tcb.rcv_nxt,
            flags: flags::RST | flags::ACK,
            mss: 0,
            window: 0,
        };
        self.queue_control(reply);
        self.free(i, Ending::Reset);
    }

    /// Queues the ACK of the peer's FIN for a connection about to be freed.
    pub(super) fn final_ack(&mut self, i: u32) {
        let tcb = &self.tcbs[i as usize];
        let reply = Control {
            dst_mac: tcb.remote_mac,
            src_ip: tcb.local_ip,
            dst_ip: tcb.remote_ip,
            dst_port: tcb.remote_port,
            seq: tcb.snd_nxt,
            ack: tcb.rcv_nxt,
            flags: flags::ACK,
            mss: 0,
            window: 0,
        };
        self.queue_control(reply);
    }

    /// Releases everything connection `i` holds and returns its block to the free list.
    pub(super) fn free(&mut self, i: u32, ending: Ending) {
        let idx = i as usize;
        if self.tcbs[idx].state == State::Free {
            return;
        }
        let lease = self.tcbs[idx].lease;
        if lease == NONE && self.tcbs[idx].carry != 0 {
            // What the service kept of it between leases goes too.
            self.service.forget(self.tcbs[idx].carry);
        }
        if lease != NONE {
            let session = &mut self.leases[lease as usize].session;
            self.service.close(session, ending);
            self.leases[lease as usize].owner = NONE;
            self.leases[lease as usize].next = self.free_lease;
            self.free_lease = lease;
            self.counters.leased -= 1;
        }
        let cell = self.tcbs[idx].cell;
        if cell != NONE {
            self.cells[cell as usize].len = 0;
            self.cells[cell as usize].next = self.free_cell;
            self.free_cell = cell;
        }
        self.set_class(i, Class::None, Instant(0));
        if self.tcbs[idx].has(READY) {
            unlink(&mut self.ready, self.tcbs, i, Links::Ready);
        }
        if self.tcbs[idx].has(BLOCKED) {
            unlink(&mut self.blocked, self.tcbs, i, Links::Ready);
        }
        self.wheel.remove(self.tcbs, i);
        // Out of the hash chain.
        let (ip, port) = (self.tcbs[idx].remote_ip, self.tcbs[idx].remote_port);
        let bucket = self.bucket(&ip, port);
        let mut link = self.buckets[bucket];
        let mut prev = NONE;
        while link != NONE && link != i {
            prev = link;
            link = self.tcbs[link as usize].hash_next;
        }
        if link == i {
            let next = self.tcbs[idx].hash_next;
            if prev == NONE {
                self.buckets[bucket] = next;
            } else {
                self.tcbs[prev as usize].hash_next = next;
            }
        }
        if self.capped(&ip) {
            self.source_add(&source_key(&ip), -1);
        }
        self.tcbs[idx] = Tcb::EMPTY;
        self.tcbs[idx].next = self.free_tcb;
        self.free_tcb = i;
        self.counters.open -= 1;
    }

    /// Closes connection `i` with a FIN (a quiet deadline: nothing was lost).
    pub(super) fn close_gracefully(&mut self, i: u32, now: Instant) {
        self.tcbs[i as usize].flags |= FIN_WANTED;
        self.set_class(i, Class::Closing, now);
        self.make_ready(i);
    }
}
