//! Sending: the ready queue's turns and each connection's segments.
//!
//! A connection is on the ready queue while it has something to send (data its window
//! takes, a FIN, an ACK, a window probe). [`StreamPool::poll`] runs the timers, then gives
//! every ready connection one turn of at most [`BURST`] segments, alternating with the
//! control replies (SYN-ACKs and resets). Data is copied straight from the service
//! ([`Service::read_summed`]) into the frame, for a first transmission or a retransmission
//! alike; a connection whose service has no bytes yet waits on the blocked list for the
//! next poll.

use super::tables::{Links, push_back, unlink};
use super::{
    ACK_NOW, BLOCKED, BURST, Cause, Class, FIN_SENT, FIN_WANTED, IN_WHEEL, MAX_RTO_MICROS, NONE,
    PERSIST, READY, State, StreamPool, TIMING,
};
use crate::wire::{Outgoing, flags, seq_le, seq_lt};
use crate::{Service, SessionPhase};
use bramble_hal::Instant;

/// Where frames go out. The appliance implements it over its device adapter; tests over a
/// queue.
pub trait Transmit {
    /// Whether a frame could be sent now.
    fn can_transmit(&mut self) -> bool;
    /// Sends one frame of `len` bytes written by `fill`; false if the device refused it.
    fn transmit<F: FnOnce(&mut [u8])>(&mut self, len: usize, fill: F) -> bool;
}

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    pub(super) fn wants_transmit(&self, i: u32) -> bool {
        let tcb = &self.tcbs[i as usize];
        if tcb.has(ACK_NOW) || tcb.has(PERSIST) {
            return true;
        }
        let unsent = self.send_len(i).saturating_sub(tcb.data_sent());
        if unsent > 0 {
            return true;
        }
        tcb.has(FIN_WANTED) && !(tcb.has(FIN_SENT) && seq_lt(tcb.fin_seq, tcb.snd_nxt))
    }

    pub(super) fn make_ready(&mut self, i: u32) {
        if self.tcbs[i as usize].has(BLOCKED) {
            // It waits for its service's bytes: the next poll gives it a turn anyway.
            return;
        }
        if !self.tcbs[i as usize].has(READY) {
            self.tcbs[i as usize].flags |= READY;
            push_back(&mut self.ready, self.tcbs, i, Links::Ready);
        }
    }

    /// Does what is due at `now` (deadlines, sessions for waiting requests) and sends what
    /// the device takes. Returns when to run again if nothing arrives first.
    pub fn poll<T: Transmit>(&mut self, now: Instant, tx: &mut T) -> Option<Instant> {
        self.expire(now);
        self.transmit(now, tx);
        self.next_deadline(now)
    }

    /// Gives each ready connection its turn, alternating with control replies (so that a
    /// flood of SYNs cannot hold up answers, nor answers hold up handshakes).
    fn transmit<T: Transmit>(&mut self, now: Instant, tx: &mut T) {
        if self.ours.is_empty() {
            self.control.clear();
            return;
        }
        // Those that waited for their service's bytes try again.
        while self.blocked.head != NONE {
            let i = self.blocked.head;
            unlink(&mut self.blocked, self.tcbs, i, Links::Ready);
            self.tcbs[i as usize].flags &= !BLOCKED;
            self.make_ready(i);
        }
        // Each connection ready now gets one turn; those with more to send go to the back.
        let mut turns = self.ready.len;
        loop {
            if !tx.can_transmit() {
                return;
            }
            if let Some(control) = self.control.pop_front() {
                let reply = Outgoing {
                    dst_mac: control.dst_mac,
                    src_mac: self.mac,
                    src_ip: control.src_ip,
                    dst_ip: control.dst_ip,
                    src_port: self.config.port,
                    dst_port: control.dst_port,
                    seq: control.seq,
                    ack: control.ack,
                    flags: control.flags,
                    window: control.window,
                    mss: (control.mss != 0).then_some(control.mss),
                    ip_id: self.next_ip_id(),
                };
                let layout = reply.layout();
                if tx.transmit(layout.headers_len(), |frame| {
                    reply.write_laid_out(&layout, frame, 0)
                }) {
                    self.counters.segments_out += 1;
                }
                if !tx.can_transmit() {
                    return;
                }
            }
            if turns == 0 || self.ready.head == NONE {
                if self.control.is_empty() {
                    return;
                }
                continue;
            }
            turns -= 1;
            let i = self.ready.head;
            unlink(&mut self.ready, self.tcbs, i, Links::Ready);
            self.tcbs[i as usize].flags &= !READY;
            let turn_over = self.send_turn(i, now, tx);
            if self.tcbs[i as usize].state == State::Free {
                continue;
            }
            // More now (its turn ended, not its window), or the device filled up mid-turn.
            let more = turn_over || (!tx.can_transmit() && self.wants_transmit(i));
            if self.lease_phase(i) == Some(SessionPhase::Abort) {
                // The service found it cannot complete what it was sending.
                self.abort(i, Cause::Aborted);
                continue;
            }
            if more || self.tcbs[i as usize].has(ACK_NOW) {
                self.make_ready(i);
            }
        }
    }

    fn next_ip_id(&mut self) -> u16 {
        self.ip_id = self.ip_id.wrapping_add(1);
        self.ip_id
    }

    fn outgoing(&mut self, i: u32, seq: u32, seg_flags: u8) -> Outgoing {
        let window = self.receive_window(i);
        let ip_id = self.next_ip_id();
        let tcb = &mut self.tcbs[i as usize];
        tcb.rcv_wnd = window;
        Outgoing {
            dst_mac: tcb.remote_mac,
            src_mac: self.mac,
            src_ip: tcb.local_ip,
            dst_ip: tcb.remote_ip,
            src_port: self.config.port,
            dst_port: tcb.remote_port,
            seq,
            ack: tcb.rcv_nxt,
            flags: seg_flags,
            window,
            mss: None,
            ip_id,
        }
    }

    /// One turn of connection `i`: up to [`BURST`] data segments, a FIN, or an ACK. Returns
    /// whether it stopped only because its turn was over (it has more it may send now).
    fn send_turn<T: Transmit>(&mut self, i: u32, now: Instant, tx: &mut T) -> bool {
        let idx = i as usize;
        if self.tcbs[idx].has(PERSIST) {
            // A window probe: an old sequence number makes the peer answer with its window.
            self.tcbs[idx].flags &= !PERSIST;
            let seq = self.tcbs[idx].snd_una.wrapping_sub(1);
            let out = self.outgoing(i, seq, flags::ACK);
            let layout = out.layout();
            if tx.transmit(layout.headers_len(), |frame| {
                out.write_laid_out(&layout, frame, 0)
            }) {
                self.counters.segments_out += 1;
            }
            let unsent = self.send_len(i) > self.tcbs[idx].data_sent();
            let tcb = &mut self.tcbs[idx];
            tcb.flags &= !ACK_NOW;
            self.wheel.remove(self.tcbs, i);
            if unsent {
                let tcb = &mut self.tcbs[idx];
                let interval = u64::from(tcb.rto) << tcb.backoff.min(6);
                tcb.rto_at = now.add_micros(interval.min(u64::from(MAX_RTO_MICROS)));
                self.wheel.insert(self.tcbs, i);
            }
            return false;
        }
        let mut sent = 0;
        let mut turn_over = false;
        let lease = self.tcbs[idx].lease;
        loop {
            if sent == BURST {
                turn_over = true;
                break;
            }
            if !tx.can_transmit() {
                break;
            }
            let send_len = self.send_len(i);
            let tcb = &self.tcbs[idx];
            let offset = tcb.data_sent();
            let unsent = send_len.saturating_sub(offset);
            let window = tcb.snd_wnd.min(tcb.cwnd);
            let room = window.saturating_sub(tcb.in_flight()) as usize;
            let want = unsent.min(room).min(usize::from(tcb.mss));
            if want == 0 {
                if unsent > 0 && tcb.snd_wnd == 0 && tcb.snd_una == tcb.snd_max {
                    // Zero window with nothing in flight: probe later.
                    let rto = u64::from(tcb.rto);
                    let tcb = &mut self.tcbs[idx];
                    if !tcb.has(IN_WHEEL) {
                        tcb.rto_at = now.add_micros(rto);
                        self.wheel.insert(self.tcbs, i);
                    }
                }
                break;
            }
            // Sender-side silly window avoidance: no small segment while others fly, unless
            // it ends the data.
            if want < usize::from(tcb.mss) && want < unsent && tcb.in_flight() > 0 {
                break;
            }
            let seq = tcb.snd_nxt;
            // Cut the segment so that the next one's bytes line up with its frame's words
            // (segments are multiples of 4 bytes, so after one cut they all do).
            let want = if want < unsent && want > 8 {
                let session = &self.leases[lease as usize].session;
                match self.service.source_address(session, offset + want) {
                    Some(address) => want - (address + 4 - self.payload_alignment) % 4,
                    None => want,
                }
            } else {
                want
            };
            let session = &mut self.leases[lease as usize].session;
            let len = self.service.readable(session, offset, want, now);
            if len == 0 {
                // Not available yet (a body still on its way from the card): next poll.
                if self.send_len(i) > self.tcbs[idx].data_sent() {
                    self.tcbs[idx].flags |= BLOCKED;
                    push_back(&mut self.blocked, self.tcbs, i, Links::Ready);
                }
                break;
            }
            // `readable` may have replaced the response (a 500 for a body that cannot be
            // had): the length to send is the new one's.
            let unsent = self.send_len(i).saturating_sub(offset);
            let last = len == unsent;
            let seg_flags = flags::ACK | if last { flags::PSH } else { 0 };
            let out = self.outgoing(i, seq, seg_flags);
            let layout = out.layout();
            let header = layout.headers_len();
            let session = &mut self.leases[lease as usize].session;
            let service = &self.service;
            let mut alignment = self.payload_alignment;
            let ok = tx.transmit(header + len, |frame| {
                let payload = &mut frame[header..];
                alignment = payload.as_ptr() as usize % 4;
                let (_, payload_sum) = service.read_summed(session, offset, payload);
                out.write_laid_out(&layout, frame, payload_sum);
            });
            self.payload_alignment = alignment;
            if !ok {
                break;
            }
            self.counters.segments_out += 1;
            sent += 1;
            let tcb = &mut self.tcbs[idx];
            tcb.flags &= !ACK_NOW;
            let end = seq.wrapping_add(len as u32);
            if seq_le(tcb.snd_max, seq) {
                // New data (not a retransmission): time it if nothing is being timed.
                if !tcb.has(TIMING) {
                    tcb.flags |= TIMING;
                    tcb.rtt_seq = end;
                    tcb.rtt_start = now;
                }
            }
            tcb.snd_nxt = end;
            if seq_lt(tcb.snd_max, end) {
                tcb.snd_max = end;
            }
            if !tcb.has(IN_WHEEL) {
                tcb.rto_at = now.add_micros(u64::from(tcb.rto));
                self.wheel.insert(self.tcbs, i);
            }
        }
        // FIN once all data is out.
        let send_len = self.send_len(i);
        let tcb = &self.tcbs[idx];
        let fin_pending = tcb.has(FIN_WANTED)
            && tcb.data_sent() >= send_len
            && !(tcb.has(FIN_SENT) && seq_lt(tcb.fin_seq, tcb.snd_nxt));
        if fin_pending && tx.can_transmit() {
            let seq = tcb.snd_nxt;
            let out = self.outgoing(i, seq, flags::FIN | flags::ACK);
            let layout = out.layout();
            if tx.transmit(layout.headers_len(), |frame| {
                out.write_laid_out(&layout, frame, 0)
            }) {
                self.counters.segments_out += 1;
                let tcb = &mut self.tcbs[idx];
                tcb.flags |= FIN_SENT;
                tcb.flags &= !ACK_NOW;
                tcb.fin_seq = seq;
                tcb.snd_nxt = seq.wrapping_add(1);
                if seq_lt(tcb.snd_max, tcb.snd_nxt) {
                    tcb.snd_max = tcb.snd_nxt;
                }
                match tcb.state {
                    State::Established => tcb.state = State::FinWait1,
                    State::CloseWait => tcb.state = State::LastAck,
                    _ => {}
                }
                if !tcb.has(IN_WHEEL) {
                    tcb.rto_at = now.add_micros(u64::from(tcb.rto));
                    self.wheel.insert(self.tcbs, i);
                }
                if self.tcbs[idx].class != Class::Closing {
                    self.set_class(i, Class::Closing, now);
                }
            }
            return false;
        }
        if self.tcbs[idx].has(ACK_NOW) && tx.can_transmit() {
            let seq = self.tcbs[idx].snd_nxt;
            let out = self.outgoing(i, seq, flags::ACK);
            let layout = out.layout();
            if tx.transmit(layout.headers_len(), |frame| {
                out.write_laid_out(&layout, frame, 0)
            }) {
                self.counters.segments_out += 1;
                self.tcbs[idx].flags &= !ACK_NOW;
            }
        }
        turn_over
    }
}
