//! Receiving: a frame to its connection, RFC 9293 segment processing, and in-order
//! delivery to the session or to a parking cell.
//!
//! The ACK field drives the sender (RTT samples, RFC 5681 congestion window, RFC 6582
//! recovery, the peer's window); payload is taken only in order. A connection without a
//! session gets one if one is free and nobody waits, else its bytes park in a cell.

use super::timers::update_rtt;
use super::{
    ACK_NOW, CELL_COMPLETE, Cause, Class, FIN_RECEIVED, FIN_SENT, FIN_WANTED, MAX_RECEIVE_WINDOW,
    MAX_USEFUL_CWND, NONE, PERSIST, RECOVERY, State, StreamPool, TIMING,
};
use crate::wire::{self, Segment, flags, seq_le, seq_lt};
use crate::{Ending, Service, SessionPhase};
use bramble_hal::Instant;

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Handles one received frame (one that [`StreamPool::wants`]).
    pub fn receive(&mut self, frame: &[u8], now: Instant) {
        if self.ours.is_empty() {
            return;
        }
        let segment = match wire::parse(frame, self.mac, &self.ours) {
            Ok(segment) if segment.dst_port == self.config.port => segment,
            Ok(_) => return,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        self.counters.segments_in += 1;
        let mut i = self.lookup(&segment.src_ip, segment.src_port);
        if i == NONE {
            if segment.has(flags::RST) {
                return;
            }
            if segment.has(flags::SYN) {
                if !segment.has(flags::ACK) && !segment.has(flags::FIN) {
                    self.answer_syn(&segment, now);
                } else {
                    self.reset_for(&segment);
                }
                return;
            }
            if !segment.has(flags::ACK) {
                return;
            }
            i = self.admit(&segment, now);
            if i == NONE {
                return;
            }
        }
        self.process(i, &segment, now);
        if self.tcbs[i as usize].state != State::Free {
            self.settle(i, now);
        }
    }

    /// The receive window to offer now.
    pub(super) fn receive_window(&self, i: u32) -> u16 {
        let tcb = &self.tcbs[i as usize];
        let window = if tcb.lease != NONE {
            self.service
                .receive_window(&self.leases[tcb.lease as usize].session)
                .min(MAX_RECEIVE_WINDOW)
        } else if tcb.cell != NONE {
            N - usize::from(self.cells[tcb.cell as usize].len)
        } else if self.free_cell != NONE || self.free_lease != NONE {
            N
        } else {
            0
        };
        window as u16
    }

    /// RFC 9293 §3.10.7.4 for a segment of a synchronized connection.
    fn process(&mut self, i: u32, segment: &Segment<'_>, now: Instant) {
        let idx = i as usize;
        // The peer's MAC is the one it was admitted with. No checksum covers the Ethernet
        // header (a real NIC's FCS does): a frame damaged there must not send the rest of
        // the connection astray. A different one is taken only once the connection is
        // retransmitting (the old one no longer works: a router's failover, a new card).
        if segment.src_mac != self.tcbs[idx].remote_mac && self.tcbs[idx].backoff >= 2 {
            self.tcbs[idx].remote_mac = segment.src_mac;
        }
        let rcv_nxt = self.tcbs[idx].rcv_nxt;
        let window = u32::from(self.tcbs[idx].rcv_wnd).max(1);
        let seg_len = segment.seq_len();
        // First: is the segment in the window?
        let acceptable = if seg_len == 0 {
            seq_le(rcv_nxt, segment.seq) && seq_lt(segment.seq, rcv_nxt.wrapping_add(window))
                || segment.seq == rcv_nxt
        } else {
            let last = segment.seq.wrapping_add(seg_len - 1);
            (seq_le(rcv_nxt, segment.seq) && seq_lt(segment.seq, rcv_nxt.wrapping_add(window)))
                || (seq_le(rcv_nxt, last) && seq_lt(last, rcv_nxt.wrapping_add(window)))
        };
        if !acceptable {
            if !segment.has(flags::RST) {
                self.tcbs[idx].flags |= ACK_NOW;
            }
            return;
        }
        if segment.has(flags::RST) {
            if segment.seq == rcv_nxt {
                self.counters.peer_resets += 1;
                self.free(i, Ending::Reset);
            } else {
                // RFC 5961 §3.2: a challenge ACK for an in-window reset.
                self.tcbs[idx].flags |= ACK_NOW;
            }
            return;
        }
        if segment.has(flags::SYN) {
            // RFC 5961 §4.2: a challenge ACK for a SYN on a synchronized connection.
            self.tcbs[idx].flags |= ACK_NOW;
            return;
        }
        if !segment.has(flags::ACK) {
            return;
        }
        if !self.process_ack(i, segment, now) {
            return;
        }
        let state = self.tcbs[idx].state;
        // Text: only in order; a segment starting before rcv_nxt is trimmed.
        let mut consumed_all = true;
        if !segment.payload.is_empty() {
            let skip = self.tcbs[idx].rcv_nxt.wrapping_sub(segment.seq) as usize;
            if seq_lt(self.tcbs[idx].rcv_nxt, segment.seq) {
                // Out of order: ask for what is missing.
                self.tcbs[idx].flags |= ACK_NOW;
                return;
            }
            let fresh = segment.payload.get(skip..).unwrap_or(&[]);
            if !fresh.is_empty() {
                if !matches!(
                    state,
                    State::Established | State::FinWait1 | State::FinWait2
                ) || self.tcbs[idx].has(FIN_RECEIVED)
                {
                    // Data after the peer's FIN cannot be: ignore it.
                } else if self.tcbs[idx].lease == NONE && self.tcbs[idx].has(FIN_WANTED) {
                    // We closed (a deadline) and the client sent a request anyway: reset,
                    // as a socket closed with data unread does, so it retries elsewhere.
                    self.abort(i, Cause::Aborted);
                    return;
                } else {
                    let taken = self.deliver(i, fresh, now);
                    if self.tcbs[idx].state == State::Free {
                        return;
                    }
                    self.tcbs[idx].rcv_nxt = self.tcbs[idx].rcv_nxt.wrapping_add(taken as u32);
                    consumed_all = taken == fresh.len();
                }
                self.tcbs[idx].flags |= ACK_NOW;
            }
        }
        if segment.has(flags::FIN) && consumed_all && !self.tcbs[idx].has(FIN_RECEIVED) {
            let fin_at = segment.seq.wrapping_add(segment.payload.len() as u32);
            if fin_at == self.tcbs[idx].rcv_nxt {
                let tcb = &mut self.tcbs[idx];
                tcb.rcv_nxt = tcb.rcv_nxt.wrapping_add(1);
                tcb.flags |= FIN_RECEIVED | ACK_NOW;
                match tcb.state {
                    State::Established => tcb.state = State::CloseWait,
                    State::FinWait1 => tcb.state = State::Closing,
                    State::FinWait2 => {
                        // Both sides done: acknowledge the FIN and forget the connection.
                        self.final_ack(i);
                        self.free(i, Ending::Closed);
                    }
                    _ => {}
                }
            }
        }
    }

    /// The ACK field; false if processing should stop.
    fn process_ack(&mut self, i: u32, segment: &Segment<'_>, now: Instant) -> bool {
        let idx = i as usize;
        let ack = segment.ack;
        let (una, max) = (self.tcbs[idx].snd_una, self.tcbs[idx].snd_max);
        if seq_lt(max, ack) {
            // Acknowledges what was never sent.
            self.tcbs[idx].flags |= ACK_NOW;
            return false;
        }
        if seq_lt(una, ack) {
            let mut acked = ack.wrapping_sub(una);
            let tcb = &mut self.tcbs[idx];
            let fin_acked = tcb.has(FIN_SENT) && seq_lt(tcb.fin_seq, ack);
            if fin_acked {
                acked -= 1;
            }
            // RTT sample (Karn: only for a segment not retransmitted).
            if tcb.has(TIMING) && seq_le(tcb.rtt_seq, ack) {
                tcb.flags &= !TIMING;
                let sample = now.micros_since(tcb.rtt_start).min(u64::from(u32::MAX)) as u32;
                update_rtt(tcb, sample);
            }
            // Congestion window (RFC 5681 §3.1; RFC 6582 for partial ACKs in recovery).
            if tcb.has(RECOVERY) {
                if seq_le(tcb.recover, ack) {
                    tcb.flags &= !RECOVERY;
                    tcb.cwnd = tcb.ssthresh;
                } else {
                    // A partial ACK: the next hole is lost too; send it again.
                    tcb.snd_nxt = ack;
                }
            } else if tcb.cwnd >= MAX_USEFUL_CWND {
                // No peer offers more without window scaling: nothing to grow (and no
                // division per ACK on a CPU without a divider).
            } else if tcb.cwnd < tcb.ssthresh {
                tcb.cwnd += acked.min(u32::from(tcb.mss));
            } else {
                let mss = u32::from(tcb.mss);
                tcb.cwnd += (mss * mss / tcb.cwnd.max(1)).max(1);
            }
            tcb.cwnd = tcb.cwnd.min(MAX_USEFUL_CWND);
            tcb.snd_una = ack;
            if seq_lt(tcb.snd_nxt, ack) {
                tcb.snd_nxt = ack;
            }
            tcb.dupacks = 0;
            tcb.backoff = 0;
            tcb.flags &= !PERSIST;
            let outstanding = tcb.snd_una != tcb.snd_max;
            let lease = tcb.lease;
            let state = tcb.state;
            if outstanding {
                tcb.rto_at = now.add_micros(u64::from(tcb.rto));
            }
            if outstanding {
                self.wheel.remove(self.tcbs, i);
                self.wheel.insert(self.tcbs, i);
            } else {
                self.wheel.remove(self.tcbs, i);
            }
            if acked > 0 && lease != NONE {
                let session = &mut self.leases[lease as usize].session;
                self.service.acknowledge(session, acked as usize, now);
            }
            if matches!(self.tcbs[idx].class, Class::Busy | Class::Closing) {
                // Progress: the stall (or close) deadline starts again.
                self.touch(i, now);
            }
            if fin_acked {
                match state {
                    State::FinWait1 => self.tcbs[idx].state = State::FinWait2,
                    State::Closing | State::LastAck => {
                        self.free(i, Ending::Closed);
                        return false;
                    }
                    _ => {}
                }
            }
        } else if ack == una
            && segment.payload.is_empty()
            && !segment.has(flags::FIN)
            && una != max
            && u32::from(segment.window) == self.tcbs[idx].snd_wnd
        {
            let tcb = &mut self.tcbs[idx];
            tcb.dupacks = tcb.dupacks.saturating_add(1);
            if tcb.dupacks == 3 && !tcb.has(RECOVERY) {
                // RFC 5681 §3.2 fast retransmit, RFC 6582 recovery point.
                let flight = tcb.in_flight();
                let mss = u32::from(tcb.mss);
                tcb.ssthresh = (flight / 2).max(2 * mss);
                tcb.cwnd = tcb.ssthresh + 3 * mss;
                tcb.recover = tcb.snd_max;
                tcb.flags |= RECOVERY;
                tcb.flags &= !TIMING;
                tcb.snd_nxt = tcb.snd_una;
                self.counters.fast_retransmits += 1;
            } else if tcb.has(RECOVERY) {
                tcb.cwnd += u32::from(tcb.mss);
            }
        }
        // Window update (RFC 9293 §3.10.7.4, SND.WL1/WL2).
        let tcb = &mut self.tcbs[idx];
        if seq_lt(tcb.snd_wl1, segment.seq)
            || (tcb.snd_wl1 == segment.seq && seq_le(tcb.snd_wl2, ack))
        {
            tcb.snd_wnd = u32::from(segment.window);
            tcb.snd_wl1 = segment.seq;
            tcb.snd_wl2 = ack;
        }
        true
    }

    /// Hands in-order payload to the connection's session, or parks it; returns how many
    /// bytes were taken.
    fn deliver(&mut self, i: u32, data: &[u8], now: Instant) -> usize {
        let idx = i as usize;
        // A keep-alive client that sends its next request in the segment that acknowledges
        // the end of its last answer (as Linux's delayed ACK does) reaches this point still
        // holding that answer's session, now idle: settling after the segment would be too
        // late to give it back. While others wait, it gives it back here and its request
        // parks at the tail of the queue, so that it takes turns with them instead of
        // keeping the session for as long as it asks. (A request too large for a cell keeps
        // the session: parking would drop what does not fit.)
        if self.tcbs[idx].lease != NONE
            && self.waiting_len() > 0
            && data.len() <= N
            && self.tcbs[idx].state == State::Established
            && !self.tcbs[idx].has(FIN_RECEIVED)
            && self.lease_phase(i) == Some(SessionPhase::Idle)
        {
            self.release(i);
            self.counters.yielded += 1;
        }
        if self.tcbs[idx].lease == NONE
            && self.tcbs[idx].cell == NONE
            && self.free_lease != NONE
            && self.waiting_len() == 0
            && !self.service.must_park(self.tcbs[idx].carry)
        {
            let lease = self.free_lease;
            self.grant(i, lease, now);
        }
        let lease = self.tcbs[idx].lease;
        if lease != NONE {
            let session = &mut self.leases[lease as usize].session;
            return self.service.receive(session, data, now);
        }
        // Park.
        if self.tcbs[idx].cell == NONE {
            if self.free_cell == NONE {
                return 0;
            }
            let cell = self.free_cell;
            self.free_cell = self.cells[cell as usize].next;
            self.cells[cell as usize].len = 0;
            self.tcbs[idx].cell = cell;
            self.tcbs[idx].request_start = now;
            self.tcbs[idx].flags &= !CELL_COMPLETE;
            self.counters.parked += 1;
        }
        let cell = &mut self.cells[self.tcbs[idx].cell as usize];
        let start = usize::from(cell.len);
        let n = data.len().min(N - start);
        cell.bytes[start..start + n].copy_from_slice(&data[..n]);
        cell.len = (start + n) as u16;
        let carry = self.tcbs[idx].carry;
        let complete = self.service.parked_ready(&cell.bytes[..start + n], carry);
        if complete || usize::from(cell.len) == N {
            self.tcbs[idx].flags |= CELL_COMPLETE;
        }
        n
    }
}
