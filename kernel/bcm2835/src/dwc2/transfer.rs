//! Transfer scheduling on pipes: a transfer is split into segments that fit the channel,
//! retried from where it stopped on transaction errors, re-issued after an interrupt
//! endpoint's NAK, and (under QEMU) polled instead of parked while a bulk-IN is quiet.

use bramble_hal::usb::{PipeConfig, PipeId, TransferStatus, TransferType, UsbError, UsbHost};

use super::channel::{FATAL_ERRORS, HALT_INTERRUPTS, Transaction, packets};
use super::registers::{self as reg, EndpointType, Hcint, Hctsiz, pid};
use super::{Dwc2Host, MAX_PIPES, MAX_TRANSFER_TRIES, dsb};
use crate::mmio::Value;

/// Deadline of a bulk-OUT transfer before it is abandoned.
const OUT_TRANSFER_TIMEOUT_US: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Active {
    /// Bytes asked for (IN) or to send (OUT).
    pub(super) requested: usize,
    /// Bytes moved by earlier segments (after retries).
    pub(super) done: usize,
    /// Length and packet count of the segment now on the channel.
    pub(super) segment_len: usize,
    pub(super) segment_packets: u32,
    /// HCINT bits collected so far.
    pub(super) status: Value<Hcint>,
    pub(super) tries: u8,
    /// OUT: a zero-length packet still has to follow.
    pub(super) zlp_pending: bool,
    /// Interrupt pipes after a NAK: re-issue at this time (µs).
    pub(super) restart_at: Option<u64>,
    /// OUT: give up at this time (µs).
    pub(super) deadline: Option<u64>,
    /// Bulk IN: bytes the current segment had received at the previous poll.
    pub(super) seen_progress: usize,
    /// Bulk IN under [`Dwc2Host::quiet_receive`]: the segment on the channel is a single
    /// attempt that a NAK ends (the pipe was quiet when it started).
    pub(super) quiet: bool,
    /// Bulk IN under [`Dwc2Host::quiet_receive`], parked: when to look at its progress
    /// again (µs), since no interrupt marks a message that ends without a short packet.
    pub(super) check_at: Option<u64>,
    /// When the transfer was started (µs).
    pub(super) started_at: u64,
    /// A poll found it still under way at least once.
    pub(super) waited: bool,
}

/// How bulk-IN transfers with data completed: at once (the device had data when the
/// transfer was started) or after waiting, and how long (see [`Dwc2Host::receive_waits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveWaits {
    /// Bulk-IN transfers that completed with data.
    pub completed: u32,
    /// Of those, how many a poll found still under way.
    pub waited: u32,
    /// Time from start to completion of those that waited (µs).
    pub wait_micros: u64,
    /// The waits by length: under 50, 100, 150, 250, 500 and 1,000 µs, under 10 ms, longer.
    pub wait_histogram: [u32; 8],
}

/// Upper bounds (µs) of the first seven [`ReceiveWaits::wait_histogram`] buckets.
const WAIT_BUCKETS: [u64; 7] = [50, 100, 150, 250, 500, 1_000, 10_000];

impl ReceiveWaits {
    /// Counts a completed transfer that waited `wait` µs (`None`: it completed at once).
    fn count(&mut self, wait: Option<u64>) {
        self.completed = self.completed.wrapping_add(1);
        let Some(wait) = wait else {
            return;
        };
        self.waited = self.waited.wrapping_add(1);
        self.wait_micros = self.wait_micros.saturating_add(wait);
        let bucket = WAIT_BUCKETS
            .iter()
            .position(|&limit| wait < limit)
            .unwrap_or(WAIT_BUCKETS.len());
        self.wait_histogram[bucket] = self.wait_histogram[bucket].wrapping_add(1);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PipeState {
    Idle,
    Active(Active),
    Done(usize),
    /// A transfer that failed while [`Dwc2Host::poll_restarts`] serviced it; the next
    /// [`UsbHost::poll`] reports the error.
    Failed(UsbError),
}

pub(super) struct Pipe {
    pub(super) config: PipeConfig,
    pub(super) channel: usize,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) pid: u32,
    pub(super) state: PipeState,
    /// When an IN transfer on this pipe last received data (or when it was opened), µs: a
    /// parked bulk-IN stays parked while data comes (see [`Dwc2Host::quiet_receive`]).
    pub(super) last_data_at: u64,
}

/// How a quiet bulk-IN is polled instead of parked; see [`Dwc2Host::quiet_receive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuietReceive {
    /// A bulk-IN pipe that has received nothing for this long is quiet.
    pub after_micros: u64,
    /// A quiet pipe's single attempts are at least this far apart: the interval right after
    /// the pipe turns quiet, and again after anything is sent (an answer may be on its way).
    pub interval_micros: u64,
    /// The interval grows with the silence (since data last came or anything was last
    /// sent): it is at most this share of it (1/`silence_share`), so the first frame after
    /// a silence of T waits at most T/`silence_share` more than it would have...
    pub silence_share: u64,
    /// ...and never more than this.
    pub longest_interval_micros: u64,
    /// While a bulk-IN is parked (it received data within `after_micros`), how often its
    /// progress is looked at: a message of 64n bytes that QEMU's usb-net sends without a
    /// zero-length packet raises no interrupt, and is only found complete by looking (see
    /// [`Dwc2Host::end_bulk_in_on_idle_nak`]).
    pub parked_check_micros: u64,
}

impl QuietReceive {
    /// The wait before the next single attempt on a pipe that has been silent for
    /// `silence` µs: `silence / silence_share`, within `interval_micros` and
    /// `longest_interval_micros`.
    pub fn interval_after(&self, silence: u64) -> u64 {
        (silence / self.silence_share.max(1))
            .min(self.longest_interval_micros)
            .max(self.interval_micros)
    }
}

/// What to do with a quiet bulk-IN segment that the controller halted without completing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuietHalt {
    /// NAK with nothing received: try again after the interval.
    TryAgainAt(u64),
    /// NAK after whole packets: the device has nothing more, the message is complete (QEMU's
    /// usb-net sends no zero-length packet after a message of 64n bytes).
    Complete,
    /// Not a NAK: an error, handled like any other halt.
    NotQuiet,
}

/// The earlier of two optional times.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Decides the outcome of a halted quiet segment from its HCINT bits, the bytes the whole
/// transfer has received so far and the time of the last activity (anything sent, or a pipe
/// opened: a frame received without an answer does not shorten the interval).
fn quiet_halt(
    status: Value<Hcint>,
    received: usize,
    now: u64,
    silent_since: u64,
    quiet: QuietReceive,
) -> QuietHalt {
    if !status.is_set(Hcint::NAK) || status.is_set(Hcint::TRANSFER_COMPLETE) {
        QuietHalt::NotQuiet
    } else if received > 0 {
        QuietHalt::Complete
    } else {
        QuietHalt::TryAgainAt(now + quiet.interval_after(now.saturating_sub(silent_since)))
    }
}

/// Whether a bulk-IN segment started now goes out as a single quiet attempt: nothing has
/// happened for `after_micros` since `since` (the last activity; see
/// [`Dwc2Host::quiet_receive`]).
fn starts_quiet(quiet: Option<QuietReceive>, since: u64, now: u64) -> bool {
    quiet.is_some_and(|q| now.saturating_sub(since) >= q.after_micros)
}

/// Makes every quiet bulk-IN's pending single attempt due at `now` (something was just sent,
/// and its answer should not wait out a long interval); returns how many there were.
fn pull_quiet_restarts(pipes: &mut [Option<Pipe>], now: u64) -> usize {
    let mut pulled = 0;
    for pipe in pipes.iter_mut().flatten() {
        if let PipeState::Active(a) = &mut pipe.state
            && a.quiet
            && a.restart_at.is_some_and(|at| at > now)
        {
            a.restart_at = Some(now);
            pulled += 1;
        }
    }
    pulled
}

impl Dwc2Host {
    /// Ends a bulk-IN transfer that has received whole packets and is then NAKed with no
    /// further progress, as if a zero-length packet had come. QEMU's usb-net sends no ZLP
    /// after an RNDIS message that is a multiple of 64 bytes, and QEMU's DWC2 model then
    /// keeps the transfer open until the next message arrives behind it (a request of such a
    /// size waited seconds for its answer). Only for QEMU: a real device terminates its
    /// transfers, and may NAK briefly in the middle of one.
    pub fn end_bulk_in_on_idle_nak(&mut self, on: bool) {
        self.end_bulk_in_on_idle_nak = on;
    }

    /// Polls a quiet bulk-IN instead of parking it: once nothing has been sent for
    /// `after_micros` (and a parked pipe has also received nothing for that long), each of
    /// its segments is a single attempt (programmed as an interrupt transfer, which QEMU's
    /// model ends on the first NAK) repeated after [`QuietReceive::interval_after`] the time
    /// since anything was last sent; the next send makes a waiting attempt due at once, and
    /// the pipe is parked again from then on. A frame that comes in and gets no answer
    /// leaves the pipe quiet and the interval as it was. QEMU's DWC2
    /// model retries a parked NAK every 250 µs on the host's CPU for as long as the transfer
    /// stays open, which is most of an idle QEMU's CPU use. The cost is up to one interval
    /// of extra latency for the first frame after a quiet spell. Only for QEMU: a real
    /// controller retries NAKs in hardware and a bulk endpoint must not be addressed as an
    /// interrupt endpoint. [`UsbHost::poll_at`] says when the loop must poll again.
    pub fn quiet_receive(&mut self, quiet: Option<QuietReceive>) {
        self.quiet_receive = quiet;
    }

    /// How bulk-IN transfers with data have completed so far: at once or after waiting, and
    /// how long the waits were (under QEMU: how often, and for how long, the guest had to
    /// wait for usb-net's next frame).
    pub fn receive_waits(&self) -> ReceiveWaits {
        self.receive_waits
    }

    /// Single attempts made on quiet bulk-IN pipes so far (see [`Dwc2Host::quiet_receive`]).
    pub fn quiet_attempts(&self) -> u32 {
        self.quiet_attempts
    }

    /// The earliest time (µs) at which a pipe waits to issue its transfer again (interrupt
    /// pipes after a NAK, quiet bulk-IN pipes) or to look at a parked transfer's progress:
    /// the idle loop must poll by then, because no interrupt will come ([`UsbHost::poll_at`]).
    pub(super) fn next_restart(&self) -> Option<u64> {
        self.pipes
            .iter()
            .flatten()
            .filter_map(|pipe| match pipe.state {
                PipeState::Active(active) => earliest(active.restart_at, active.check_at),
                _ => None,
            })
            .min()
    }

    /// Services every pipe whose restart or progress check is due (see
    /// [`Dwc2Host::next_restart`]) and reports whether none of them has news (`true`: each
    /// is still waiting, so the layers above have nothing new and the idle loop can go back
    /// to sleep). `false` when one completed or failed: the next [`UsbHost::poll`] of that
    /// pipe reports it. [`UsbHost::poll_timers`] is its negation.
    pub(super) fn poll_restarts(&mut self) -> bool {
        let now = self.micros();
        let mut all_quiet = true;
        for index in 0..MAX_PIPES {
            let due = match self.pipes[index].as_ref().map(|p| p.state) {
                Some(PipeState::Active(active)) => {
                    earliest(active.restart_at, active.check_at).is_some_and(|at| at <= now)
                }
                _ => false,
            };
            if !due {
                continue;
            }
            match self.service(index) {
                // Still waiting (an attempt in flight raises its halt interrupt later).
                Ok(TransferStatus::Pending) => {}
                Ok(_) => all_quiet = false,
                Err(error) => {
                    if let Some(pipe) = self.pipes[index].as_mut() {
                        pipe.state = PipeState::Failed(error);
                    }
                    all_quiet = false;
                }
            }
        }
        all_quiet
    }

    pub(super) fn pipe_mut(&mut self, pipe: PipeId) -> Result<&mut Pipe, UsbError> {
        self.pipes
            .get_mut(pipe.0 as usize)
            .and_then(|p| p.as_mut())
            .ok_or(UsbError::InvalidRequest)
    }

    /// Programs the next segment of the pipe's active transfer; `now` is the caller's clock
    /// reading (µs), taken once per operation: each reading costs two or three register reads.
    pub(super) fn start_segment(&mut self, index: usize, now: u64) {
        let Some(pipe) = self.pipes[index].as_ref() else {
            return;
        };
        let PipeState::Active(active) = pipe.state else {
            return;
        };
        let config = pipe.config;
        let len = active.requested - active.done;
        let offset = pipe.offset + active.done;
        let quiet = config.is_in()
            && config.transfer_type == TransferType::Bulk
            && starts_quiet(self.quiet_receive, self.last_activity_at, now);
        if quiet {
            self.quiet_attempts = self.quiet_attempts.wrapping_add(1);
        }
        let t = Transaction {
            device: config.device,
            endpoint: config.endpoint,
            direction_in: config.is_in(),
            kind: match config.transfer_type {
                TransferType::Bulk if quiet => EndpointType::Interrupt,
                TransferType::Bulk => EndpointType::Bulk,
                TransferType::Interrupt => EndpointType::Interrupt,
            },
            max_packet: config.max_packet,
            pid: pipe.pid,
            bus_address: self.bus_address(&self.arena[offset..]),
            len,
            interrupt_on_halt: false,
        };
        let channel = pipe.channel;
        let packets = self.start_channel(channel, &t);
        // QEMU's model answers most segments while the enabling write runs. One already
        // halted raises no interrupt (that cost the handler's half-dozen register accesses
        // and an exception, about ten times per request): it is left for the next poll,
        // and `check_at` makes the idle loop poll before it sleeps. Otherwise the halt
        // interrupt is enabled now; a halt in between raises it as soon as it is unmasked.
        let halted = self.ch(channel, reg::HCINT).read().is_set(Hcint::HALTED);
        if !halted {
            self.ch(channel, reg::HCINTMSK).write(HALT_INTERRUPTS);
        }
        if let Some(pipe) = self.pipes[index].as_mut()
            && let PipeState::Active(a) = &mut pipe.state
        {
            a.segment_len = len;
            a.segment_packets = packets;
            a.status = Value::from_bits(0);
            a.quiet = quiet;
            // A new segment: a parked one is looked at again from its first poll on (a
            // halted one at once).
            a.check_at = halted.then_some(now);
        }
    }

    pub(super) fn start_transfer(
        &mut self,
        pipe: PipeId,
        len: usize,
        direction_in: bool,
    ) -> Result<(), UsbError> {
        if !self.port_enabled() {
            return Err(UsbError::Disconnected);
        }
        let now = self.micros();
        if !direction_in {
            self.last_activity_at = now;
            if self.quiet_restart_waiting {
                self.quiet_restart_waiting = false;
                pull_quiet_restarts(&mut self.pipes, now);
            }
        }
        let p = self.pipe_mut(pipe)?;
        if p.config.is_in() != direction_in || len > p.len {
            return Err(UsbError::InvalidRequest);
        }
        if matches!(p.state, PipeState::Active(_)) {
            return Err(UsbError::InvalidRequest);
        }
        let whole_packets = packets(len, p.config.max_packet).1 == 0;
        if direction_in && !whole_packets {
            return Err(UsbError::InvalidRequest);
        }
        if p.config.device.translator.is_some() {
            return Err(UsbError::InvalidRequest);
        }
        p.state = PipeState::Active(Active {
            requested: len,
            done: 0,
            segment_len: 0,
            segment_packets: 0,
            status: Value::from_bits(0),
            tries: 0,
            zlp_pending: !direction_in
                && p.config.zero_length_termination
                && len > 0
                && whole_packets,
            restart_at: None,
            deadline: (!direction_in).then_some(now + OUT_TRANSFER_TIMEOUT_US),
            seen_progress: 0,
            quiet: false,
            check_at: None,
            started_at: now,
            waited: false,
        });
        self.start_segment(pipe.0 as usize, now);
        Ok(())
    }

    /// Advances the pipe's transfer from the channel's state.
    pub(super) fn service(&mut self, index: usize) -> Result<TransferStatus, UsbError> {
        let now = self.micros();
        let port_ok = self.port_enabled();
        let Some(pipe) = self.pipes[index].as_ref() else {
            return Err(UsbError::InvalidRequest);
        };
        let channel = pipe.channel;
        let config = pipe.config;
        let last_data_at = pipe.last_data_at;
        let PipeState::Active(mut a) = pipe.state else {
            unreachable!("service is only called on active pipes");
        };
        let fail = |host: &mut Self, e: UsbError| {
            host.halt_channel(channel);
            if let Some(p) = host.pipes[index].as_mut() {
                p.state = PipeState::Idle;
                if e == UsbError::Stall {
                    p.pid = pid::DATA0;
                }
            }
            Err(e)
        };
        if !port_ok {
            return fail(self, UsbError::Disconnected);
        }
        if let Some(at) = a.restart_at {
            if now < at {
                return Ok(TransferStatus::Pending);
            }
            a.restart_at = None;
            self.set_active(index, a);
            self.start_segment(index, now);
            return self.settle_quiet_attempt(index);
        }
        let fresh = self.take_status(channel);
        // Looked at now: a `check_at` left by `start_segment` (halted at once) or by the
        // parked-progress check below is used up (the latter is set again if still due).
        a.check_at = None;
        a.status = a.status.union(fresh);
        if !a.status.is_set(Hcint::HALTED)
            && !a.quiet
            && config.is_in()
            && config.transfer_type == TransferType::Bulk
            && a.done == 0
            && a.status.is_set(Hcint::NAK)
            && starts_quiet(
                self.quiet_receive,
                last_data_at.max(self.last_activity_at),
                now,
            )
        {
            // Only when the device NAKs (HCINT.NAK seen): that is QEMU retrying a synchronous
            // device such as usb-net every 250 us. A device behind usb-redir answers
            // asynchronously; QEMU's model then keeps the packet in flight without NAKs or
            // retries, and aborts (usb_packet_setup: "!usb_packet_is_inflight") if the
            // channel is re-programmed before the device answered.
            // Parked with nothing received for the whole quiet period: take the transfer off
            // the channel and poll instead. Re-programming the channel also replaces the
            // packet QEMU's model keeps retrying (a halt alone does not stop it).
            self.halt_channel(channel);
            dsb();
            let remaining = self
                .ch(channel, reg::HCTSIZ)
                .read()
                .get(Hctsiz::TRANSFER_SIZE) as usize;
            let got = a.segment_len.saturating_sub(remaining);
            if got > 0 {
                // Data landed while the channel was being halted: hand it over as it is.
                return Ok(self.finish(index, got, now));
            }
            self.set_active(index, a);
            self.start_segment(index, now);
            return self.settle_quiet_attempt(index);
        }
        if !a.status.is_set(Hcint::HALTED)
            && self.end_bulk_in_on_idle_nak
            && config.is_in()
            && config.transfer_type == TransferType::Bulk
        {
            let remaining = self
                .ch(channel, reg::HCTSIZ)
                .read()
                .get(Hctsiz::TRANSFER_SIZE) as usize;
            let got = a.segment_len.saturating_sub(remaining);
            if got > 0
                && packets(got, config.max_packet).1 == 0
                && got == a.seen_progress
                && fresh.is_set(Hcint::NAK)
            {
                // Whole packets, then a NAK with nothing new since the last poll: the message
                // is complete. Halting and later re-arming replaces QEMU's pending packet.
                self.halt_channel(channel);
                dsb();
                let pid = self.ch(channel, reg::HCTSIZ).read().get(Hctsiz::PID);
                if let Some(p) = self.pipes[index].as_mut() {
                    p.pid = pid;
                }
                return Ok(self.finish(index, a.done + got, now));
            }
            a.seen_progress = got;
            a.check_at = self.quiet_receive.map(|q| now + q.parked_check_micros);
        }
        if !a.status.is_set(Hcint::HALTED) {
            a.waited = true;
            self.set_active(index, a);
            if a.deadline.is_some_and(|d| now > d) {
                log::warn!(
                    "dwc2: bulk-OUT to endpoint {:#x} timed out",
                    config.endpoint
                );
                return fail(self, UsbError::Timeout);
            }
            return Ok(TransferStatus::Pending);
        }
        dsb();
        let status = a.status;
        a.status = Value::from_bits(0);
        let size = self.ch(channel, reg::HCTSIZ).read();
        let remaining_bytes = size.get(Hctsiz::TRANSFER_SIZE) as usize;
        let remaining_packets = size.get(Hctsiz::PACKET_COUNT);
        let pid = size.get(Hctsiz::PID);
        let mps = config.max_packet.max(1) as usize;
        // Progress: IN from the byte count; OUT from the packet count (Xinu: XferSize is not
        // reliable for OUT).
        let moved = if config.is_in() {
            a.segment_len.saturating_sub(remaining_bytes)
        } else if status.is_set(Hcint::TRANSFER_COMPLETE) {
            // Without split transactions XferCompl is reliable; QEMU leaves PktCnt at 1
            // after a zero-length packet.
            a.segment_len
        } else {
            (((a.segment_packets.saturating_sub(remaining_packets)) as usize) * mps)
                .min(a.segment_len)
        };
        a.done += moved;
        if let Some(p) = self.pipes[index].as_mut() {
            p.pid = pid;
        }

        if status.is_set(Hcint::STALL) {
            return fail(self, UsbError::Stall);
        }
        if status.any(FATAL_ERRORS) {
            log::warn!("dwc2: endpoint {:#x}: HCINT {status:#x}", config.endpoint);
            return fail(self, UsbError::Transfer);
        }
        if status.is_set(Hcint::TRANSFER_COMPLETE) {
            if a.zlp_pending {
                a.zlp_pending = false;
                a.requested = a.done;
                self.set_active(index, a);
                // A zero-length segment: requested == done gives len 0.
                self.start_segment(index, now);
                return Ok(TransferStatus::Pending);
            }
            let total = if config.is_in() { a.done } else { a.requested };
            return Ok(self.finish(index, total, now));
        }
        if a.quiet
            && let Some(quiet) = self.quiet_receive
        {
            match quiet_halt(status, a.done, now, self.last_activity_at, quiet) {
                QuietHalt::TryAgainAt(at) => {
                    a.restart_at = Some(at);
                    self.quiet_restart_waiting = true;
                    a.waited = true;
                    self.set_active(index, a);
                    return Ok(TransferStatus::Pending);
                }
                QuietHalt::Complete => return Ok(self.finish(index, a.done, now)),
                QuietHalt::NotQuiet => {}
            }
        }
        if status.is_set(Hcint::NAK) && config.transfer_type == TransferType::Interrupt {
            // Nothing new; ask again after the endpoint's interval.
            a.restart_at = Some(now + config.interval_ms.max(1) as u64 * 1000);
            self.set_active(index, a);
            return Ok(TransferStatus::Pending);
        }
        // Transaction error, frame overrun, toggle error, or an unexplained halt: retry from
        // where the transfer stopped, a bounded number of times.
        a.tries += 1;
        if a.tries >= MAX_TRANSFER_TRIES {
            log::warn!(
                "dwc2: endpoint {:#x}: giving up after {} tries, HCINT {status:#x}",
                config.endpoint,
                a.tries
            );
            return fail(self, UsbError::Transfer);
        }
        self.set_active(index, a);
        self.start_segment(index, now);
        Ok(TransferStatus::Pending)
    }

    /// Right after a segment was started: if it is a quiet single attempt that QEMU has
    /// answered already (a NAK, or a short message; [`Dwc2Host::start_segment`] found it
    /// halted), it is handled now rather than on another pass of the idle loop. A segment
    /// still under way raises its halt interrupt ([`Dwc2Host::start_segment`] enabled it).
    pub(super) fn settle_quiet_attempt(
        &mut self,
        index: usize,
    ) -> Result<TransferStatus, UsbError> {
        let halted_quiet = matches!(
            self.pipes[index].as_ref().map(|p| p.state),
            Some(PipeState::Active(Active {
                quiet: true,
                check_at: Some(_),
                ..
            }))
        );
        if halted_quiet {
            return self.service(index);
        }
        Ok(TransferStatus::Pending)
    }

    /// Marks the pipe's transfer complete with `total` bytes; an IN that received data
    /// makes the pipe busy again (see [`Dwc2Host::quiet_receive`]).
    pub(super) fn finish(&mut self, index: usize, total: usize, now: u64) -> TransferStatus {
        if let Some(p) = self.pipes[index].as_mut() {
            if let PipeState::Active(a) = p.state
                && p.config.is_in()
                && p.config.transfer_type == TransferType::Bulk
                && total > 0
            {
                let wait = a.waited.then(|| now.saturating_sub(a.started_at));
                self.receive_waits.count(wait);
            }
            p.state = PipeState::Done(total);
            if p.config.is_in() && total > 0 {
                p.last_data_at = now;
            }
        }
        TransferStatus::Complete(total)
    }

    pub(super) fn set_active(&mut self, index: usize, a: Active) {
        if let Some(p) = self.pipes[index].as_mut() {
            p.state = PipeState::Active(a);
        }
    }

    pub(super) fn close_all_pipes(&mut self) {
        for index in 0..MAX_PIPES {
            if self.pipes[index].is_some() {
                self.close_pipe(PipeId(index as u8));
            }
        }
        self.arena_used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmio::Field;

    /// HCINT of a channel that halted with `reason`.
    fn halted_with(reason: Field<Hcint>) -> Value<Hcint> {
        Value::of(Hcint::HALTED.set() + reason.set())
    }

    const QUIET: QuietReceive = QuietReceive {
        after_micros: 2_000_000,
        interval_micros: 10_000,
        silence_share: 100,
        longest_interval_micros: 200_000,
        parked_check_micros: 5_000,
    };

    /// A bulk-IN pipe whose transfer is a quiet single attempt waiting until `restart_at`
    /// (`quiet = false`: a parked one).
    fn waiting_pipe(quiet: bool, restart_at: Option<u64>) -> Option<Pipe> {
        Some(Pipe {
            config: PipeConfig {
                device: bramble_hal::usb::DeviceTarget {
                    address: 3,
                    speed: bramble_hal::usb::Speed::Full,
                    ep0_max_packet: 64,
                    translator: None,
                },
                endpoint: 0x81,
                transfer_type: TransferType::Bulk,
                max_packet: 64,
                interval_ms: 0,
                buffer_len: 1600,
                zero_length_termination: false,
            },
            channel: 1,
            offset: 0,
            len: 1600,
            pid: pid::DATA0,
            state: PipeState::Active(Active {
                requested: 1600,
                done: 0,
                segment_len: 1600,
                segment_packets: 25,
                status: Value::from_bits(0),
                tries: 0,
                zlp_pending: false,
                restart_at,
                deadline: None,
                seen_progress: 0,
                quiet,
                check_at: None,
                started_at: 0,
                waited: true,
            }),
            last_data_at: 0,
        })
    }

    fn restart_of(pipe: &Option<Pipe>) -> Option<u64> {
        match pipe.as_ref().map(|p| p.state) {
            Some(PipeState::Active(a)) => a.restart_at,
            _ => None,
        }
    }

    #[test]
    fn a_send_makes_a_waiting_quiet_attempt_due_at_once() {
        // A quiet pipe waiting a long interval, a parked pipe, an interrupt-style restart
        // already due, and an empty slot.
        let mut pipes = [
            waiting_pipe(true, Some(60_900_000)),
            waiting_pipe(false, None),
            waiting_pipe(true, Some(59_000_000)),
            None,
        ];
        assert_eq!(pull_quiet_restarts(&mut pipes, 60_000_000), 1);
        assert_eq!(restart_of(&pipes[0]), Some(60_000_000));
        assert_eq!(restart_of(&pipes[1]), None, "a parked pipe is left alone");
        assert_eq!(
            restart_of(&pipes[2]),
            Some(59_000_000),
            "one already due keeps its time"
        );
        assert_eq!(
            pull_quiet_restarts(&mut pipes, 60_000_000),
            0,
            "nothing left to pull"
        );
    }

    #[test]
    fn a_received_frame_alone_neither_parks_the_pipe_nor_shortens_the_interval() {
        // Last sent at 0; a stray frame came at 59 s. The decisions take the last activity
        // (0), not the frame: the next segment is still a quiet attempt, and its interval is
        // the one for a minute of silence.
        let last_activity = 0;
        assert!(starts_quiet(Some(QUIET), last_activity, 59_000_001));
        assert_eq!(
            quiet_halt(halted_with(Hcint::NAK), 0, 60_000_000, last_activity, QUIET),
            QuietHalt::TryAgainAt(60_200_000)
        );
        // After a send at 59.5 s the pipe parks and polls at the shortest interval.
        assert!(!starts_quiet(Some(QUIET), 59_500_000, 60_000_000));
        assert_eq!(
            quiet_halt(halted_with(Hcint::NAK), 0, 60_000_000, 59_995_000, QUIET),
            QuietHalt::TryAgainAt(60_010_000)
        );
    }

    #[test]
    fn packets_agree_with_division_for_every_size() {
        for max_packet in [0u16, 1, 3, 8, 16, 32, 63, 64, 100, 512, 1023, 1024] {
            let mps = usize::from(max_packet.max(1));
            for len in (0..2100).chain([usize::MAX - 1, usize::MAX]) {
                assert_eq!(
                    packets(len, max_packet),
                    (len / mps, len % mps),
                    "len {len} max_packet {max_packet}"
                );
            }
        }
    }

    #[test]
    fn receive_waits_are_counted_in_their_buckets() {
        let mut waits = ReceiveWaits::default();
        waits.count(None);
        waits.count(Some(0));
        waits.count(Some(149));
        waits.count(Some(150));
        waits.count(Some(10_000));
        assert_eq!(waits.completed, 5);
        assert_eq!(waits.waited, 4);
        assert_eq!(waits.wait_micros, 10_299);
        assert_eq!(waits.wait_histogram, [1, 0, 1, 1, 0, 0, 0, 1]);
    }

    #[test]
    fn a_pipe_turns_quiet_only_after_the_silence_and_only_when_enabled() {
        assert!(!starts_quiet(None, 0, 60_000_000));
        assert!(!starts_quiet(Some(QUIET), 5_000_000, 6_999_999));
        assert!(starts_quiet(Some(QUIET), 5_000_000, 7_000_000));
        // A clock that reads earlier than the last data (never expected) is not quiet.
        assert!(!starts_quiet(Some(QUIET), 5_000_000, 4_000_000));
    }

    #[test]
    fn a_nak_with_nothing_received_waits_one_interval() {
        let halted_on_nak = halted_with(Hcint::NAK);
        assert_eq!(
            quiet_halt(halted_on_nak, 0, 1_000, 0, QUIET),
            QuietHalt::TryAgainAt(11_000)
        );
    }

    #[test]
    fn the_interval_grows_with_the_silence_up_to_its_longest() {
        let halted_on_nak = halted_with(Hcint::NAK);
        // Under 1 s of silence: the shortest interval; then a hundredth of the silence.
        assert_eq!(QUIET.interval_after(500_000), 10_000);
        assert_eq!(QUIET.interval_after(2_000_000), 20_000);
        assert_eq!(QUIET.interval_after(10_000_000), 100_000);
        assert_eq!(QUIET.interval_after(60_000_000), 200_000);
        assert_eq!(QUIET.interval_after(u64::MAX), 200_000);
        assert_eq!(
            quiet_halt(halted_on_nak, 0, 30_000_000, 20_000_000, QUIET),
            QuietHalt::TryAgainAt(30_100_000)
        );
        // Something sent just now: back to the shortest interval.
        assert_eq!(
            quiet_halt(halted_on_nak, 0, 30_000_000, 29_999_000, QUIET),
            QuietHalt::TryAgainAt(30_010_000)
        );
        // A clock that reads earlier than the last news (never expected): the shortest.
        assert_eq!(
            quiet_halt(halted_on_nak, 0, 1_000, 5_000, QUIET),
            QuietHalt::TryAgainAt(11_000)
        );
    }

    #[test]
    fn a_nak_after_whole_packets_completes_the_message() {
        assert_eq!(
            quiet_halt(halted_with(Hcint::NAK), 128, 1_000, 0, QUIET),
            QuietHalt::Complete
        );
    }

    #[test]
    fn errors_and_completions_are_not_quiet_outcomes() {
        assert_eq!(
            quiet_halt(halted_with(Hcint::TRANSFER_COMPLETE), 64, 0, 0, QUIET),
            QuietHalt::NotQuiet
        );
        assert_eq!(
            quiet_halt(halted_with(Hcint::TRANSACTION_ERROR), 0, 0, 0, QUIET),
            QuietHalt::NotQuiet
        );
    }
}
