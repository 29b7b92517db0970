//! The handshake without state: SYN cookies, resets for segments of no connection, and
//! admission of an ACK that proves its cookie.
//!
//! A SYN is answered at once with a SYN-ACK whose sequence number is a cookie; the block
//! is made only when the client's ACK returns it, after the per-source cap and, when the
//! pool is full, an eviction (`evict`). Replies sent without a block wait in a small
//! control queue that [`StreamPool::poll`] drains.

use super::sources::source_key;
use super::{Class, Control, INITIAL_WINDOW_SEGMENTS, NONE, State, StreamPool, Tcb};
use crate::Service;
use crate::cookie::CookieInput;
use crate::wire::{self, Segment, flags};
use bramble_hal::Instant;

impl<'a, S: Service, const N: usize> StreamPool<'a, S, N> {
    /// Whether a control reply (a SYN-ACK or a reset) could be queued now. While not, the
    /// appliance leaves received frames where they wait (in the device, on the link) rather
    /// than take a SYN it has no room to answer.
    pub fn has_control_room(&self) -> bool {
        !self.control.is_full()
    }

    pub(super) fn answer_syn(&mut self, segment: &Segment<'_>, now: Instant) {
        let input = CookieInput {
            ip: segment.src_ip,
            local_ip: segment.dst_ip,
            port: segment.src_port,
            local_port: segment.dst_port,
            client_isn: segment.seq,
        };
        let (cookie, mss) = self
            .cookies
            .make(&input, segment.mss, now.as_micros() / 1_000_000);
        // Over IPv6 the header is 20 bytes longer: no more than 1440 per segment.
        let mss = mss.min(wire::max_mss(&segment.src_ip));
        self.counters.syns += 1;
        self.queue_control(Control {
            dst_mac: segment.src_mac,
            src_ip: segment.dst_ip,
            dst_ip: segment.src_ip,
            dst_port: segment.src_port,
            seq: cookie,
            ack: segment.seq.wrapping_add(1),
            flags: flags::SYN | flags::ACK,
            mss,
            window: N as u16,
        });
    }

    /// RFC 9293 §3.10.7.1: a segment for no connection gets a reset (unless it is one).
    pub(super) fn reset_for(&mut self, segment: &Segment<'_>) {
        let (seq, ack, reset_flags) = if segment.has(flags::ACK) {
            (segment.ack, 0, flags::RST)
        } else {
            (
                0,
                segment.seq.wrapping_add(segment.seq_len()),
                flags::RST | flags::ACK,
            )
        };
        self.queue_control(Control {
            dst_mac: segment.src_mac,
            src_ip: segment.dst_ip,
            dst_ip: segment.src_ip,
            dst_port: segment.src_port,
            seq,
            ack,
            flags: reset_flags,
            mss: 0,
            window: 0,
        });
    }

    pub(super) fn queue_control(&mut self, reply: Control) {
        if self.control.push_back(reply).is_err() {
            self.counters.control_dropped += 1;
        }
    }

    /// An ACK for no connection: admit it if it carries our cookie.
    pub(super) fn admit(&mut self, segment: &Segment<'_>, now: Instant) -> u32 {
        let input = CookieInput {
            ip: segment.src_ip,
            local_ip: segment.dst_ip,
            port: segment.src_port,
            local_port: segment.dst_port,
            client_isn: segment.seq.wrapping_sub(1),
        };
        let cookie = segment.ack.wrapping_sub(1);
        let Some(mss) = self
            .cookies
            .check(&input, cookie, now.as_micros() / 1_000_000)
        else {
            self.counters.bad_cookies += 1;
            self.reset_for(segment);
            return NONE;
        };
        let mss = mss.min(wire::max_mss(&segment.src_ip));
        let source = source_key(&segment.src_ip);
        let capped = self.capped(&segment.src_ip);
        if capped && self.source_count(&source) >= self.config.max_per_source {
            self.counters.refused_source += 1;
            self.reset_for(segment);
            return NONE;
        }
        if self.free_tcb == NONE && !self.evict_for_newcomer() {
            self.counters.refused_full += 1;
            self.reset_for(segment);
            return NONE;
        }
        let i = self.free_tcb;
        self.free_tcb = self.tcbs[i as usize].next;
        let tcb = &mut self.tcbs[i as usize];
        *tcb = Tcb::EMPTY;
        tcb.state = State::Established;
        tcb.remote_ip = segment.src_ip;
        tcb.local_ip = segment.dst_ip;
        tcb.remote_port = segment.src_port;
        tcb.remote_mac = segment.src_mac;
        tcb.mss = mss;
        tcb.snd_una = segment.ack;
        tcb.snd_nxt = segment.ack;
        tcb.snd_max = segment.ack;
        tcb.snd_wnd = u32::from(segment.window);
        tcb.snd_wl1 = segment.seq;
        tcb.snd_wl2 = segment.ack;
        tcb.rcv_nxt = segment.seq;
        tcb.rcv_wnd = N as u16;
        tcb.cwnd = INITIAL_WINDOW_SEGMENTS * u32::from(mss);
        tcb.ssthresh = 65_535;
        tcb.since = now;
        let bucket = self.bucket(&segment.src_ip, segment.src_port);
        self.tcbs[i as usize].hash_next = self.buckets[bucket];
        self.buckets[bucket] = i;
        self.set_class(i, Class::Fresh, now);
        if capped {
            self.source_add(&source, 1);
        }
        self.counters.accepted += 1;
        self.counters.accepted_ipv6 += u64::from(wire::as_v4(&segment.src_ip).is_none());
        self.counters.open += 1;
        self.counters.peak_open = self.counters.peak_open.max(self.counters.open);
        i
    }
}
