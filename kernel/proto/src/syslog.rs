//! The owner's log from afar: a RAM ring of the last log lines (read on the console with
//! `log`), RFC 5424 syslog messages built from them, and the token bucket that limits how
//! many leave the board.
//!
//! The kernel's logger puts every line it prints into a [`LogRing`] (a fixed array of
//! [`RING_LINES`] lines of at most [`LINE_LEN`] bytes, the oldest overwritten); the
//! appliance's syslog sender (`bramble_net::appliance::syslog`) reads the ring behind a cursor of
//! its own, formats each line with [`format_message`] and sends it as one UDP datagram
//! (RFC 5426). It never waits: a line the sender cannot send yet (no address, the socket's
//! queue full) stays in the ring until it can, and a line that the ring overwrote first, or
//! that found the [`TokenBucket`] empty, is counted as dropped and never sent. So a flood of
//! requests (one access-log line each) sends at most [`BUCKET_LINES`] datagrams at once and
//! [`LINES_PER_SECOND`] a second after that: the board cannot be made an amplifier.
//!
//! Message layout (RFC 5424 §6):
//! `<PRI>1 TIMESTAMP HOSTNAME bramble - MSGID [meta sequenceId="N" sysUpTime="T"] MSG`
//! with facility local0 (16), the severity from the log level, TIMESTAMP `-` until the clock
//! is set (then UTC to the second), MSGID `access` for access-log lines and `event` for the
//! rest, and the `meta` element's sequence number (RFC 5424 §7.3.1) so that a collector sees
//! the gaps drops leave. MSG is the line as the console shows it, without the console's own
//! time prefix; it is ASCII text with no BOM, as RFC 5424 allows.

use bramble_hal::calendar::UtcDateTime;
use core::fmt::{self, Write};

/// Lines the RAM ring keeps (the `log` console command prints them).
pub const RING_LINES: usize = 256;
/// Bytes kept of each line (longer ones are cut at a character boundary).
pub const LINE_LEN: usize = 200;
/// Datagrams the bucket lets out at once, after a quiet spell.
pub const BUCKET_LINES: u32 = 100;
/// Datagrams a second the bucket lets out under a steady stream.
pub const LINES_PER_SECOND: u32 = 20;
/// The syslog port (RFC 5426).
pub const SYSLOG_PORT: u16 = 514;
/// Facility local0 (RFC 5424 §6.2.1).
const FACILITY_LOCAL0: u8 = 16;
/// The longest datagram [`format_message`] builds: the header's fields at their longest
/// (hostname 63 bytes) and a whole line.
pub const MAX_MESSAGE_LEN: usize = 160 + LINE_LEN;

/// What a line is about: the MSGID of its syslog message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Anything else: boot, reset reason, link, address, clock, certificate, card.
    Event,
    /// One request's access-log line.
    Access,
}

/// One logged line as the ring keeps it.
#[derive(Clone, Copy)]
pub struct Line {
    /// Its number since boot (the first line is 0).
    pub sequence: u64,
    /// Microseconds since reset when it was logged.
    pub micros: u64,
    /// Unix seconds when it was logged, once the clock was set.
    pub unix_seconds: Option<u64>,
    /// Syslog severity (RFC 5424 §6.2.1): 3 error, 4 warning, 6 informational, 7 debug.
    pub severity: u8,
    /// Access-log line or event.
    pub kind: Kind,
    len: u8,
    text: [u8; LINE_LEN],
}

impl Line {
    /// An empty line (the ring's slots before they are used): all zero bytes, so that the
    /// kernel's ring lies in .bss, not in kernel.img.
    pub const EMPTY: Line = Line {
        sequence: 0,
        micros: 0,
        unix_seconds: None,
        severity: 0,
        kind: Kind::Event,
        len: 0,
        text: [0; LINE_LEN],
    };

    /// The line's text (cut to [`LINE_LEN`] bytes).
    pub fn text(&self) -> &str {
        // Only whole characters are ever stored (see `Cut`).
        core::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or("")
    }
}

/// The syslog severity of a `log` level.
pub fn severity(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// Writes into a line's text, keeping what fits and cutting at a character boundary.
struct Cut<'l> {
    text: &'l mut [u8; LINE_LEN],
    len: usize,
}

impl Write for Cut<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = LINE_LEN - self.len;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.text[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

/// The last [`RING_LINES`] lines, oldest overwritten.
pub struct LogRing {
    lines: [Line; RING_LINES],
    /// The sequence number the next line gets (also: lines logged since boot).
    next: u64,
}

impl LogRing {
    /// An empty ring.
    pub const fn new() -> Self {
        Self {
            lines: [Line::EMPTY; RING_LINES],
            next: 0,
        }
    }

    /// Keeps one line: `args` formatted, cut to [`LINE_LEN`] bytes.
    pub fn push(
        &mut self,
        micros: u64,
        unix_seconds: Option<u64>,
        severity: u8,
        kind: Kind,
        args: fmt::Arguments<'_>,
    ) {
        let sequence = self.next;
        self.next += 1;
        let slot = &mut self.lines[(sequence % RING_LINES as u64) as usize];
        slot.sequence = sequence;
        slot.micros = micros;
        slot.unix_seconds = unix_seconds;
        slot.severity = severity;
        slot.kind = kind;
        let mut cut = Cut {
            text: &mut slot.text,
            len: 0,
        };
        let _ = cut.write_fmt(args);
        // LINE_LEN is under 256.
        slot.len = cut.len as u8;
    }

    /// The sequence number the next line will get.
    pub fn next_sequence(&self) -> u64 {
        self.next
    }

    /// The oldest line still kept.
    pub fn oldest_sequence(&self) -> u64 {
        self.next.saturating_sub(RING_LINES as u64)
    }

    /// Line `sequence`, if the ring still has it.
    pub fn get(&self, sequence: u64) -> Option<&Line> {
        if sequence < self.oldest_sequence() || sequence >= self.next {
            return None;
        }
        Some(&self.lines[(sequence % RING_LINES as u64) as usize])
    }
}

impl Default for LogRing {
    fn default() -> Self {
        Self::new()
    }
}

/// Where the sender reads lines: the kernel's ring behind whatever lock it needs.
pub trait LineSource {
    /// The sequence number the next line will get.
    fn next_sequence(&self) -> u64;
    /// A copy of line `sequence`, or the oldest sequence number still kept when it is gone
    /// (overwritten) or not yet written.
    fn copy_line(&self, sequence: u64) -> Result<Line, u64>;
}

/// A token bucket: up to [`BUCKET_LINES`] tokens, one more every
/// 1 / [`LINES_PER_SECOND`] s.
#[derive(Clone, Copy, Debug)]
pub struct TokenBucket {
    tokens: u32,
    /// When the last token was added (or the bucket was last full).
    refilled: u64,
}

/// Microseconds between two tokens.
const TOKEN_MICROS: u64 = 1_000_000 / LINES_PER_SECOND as u64;

impl TokenBucket {
    /// A full bucket at `now` (microseconds).
    pub const fn new(now: u64) -> Self {
        Self {
            tokens: BUCKET_LINES,
            refilled: now,
        }
    }

    fn refill(&mut self, now: u64) {
        let earned = now.saturating_sub(self.refilled) / TOKEN_MICROS;
        if earned == 0 {
            return;
        }
        let tokens = u64::from(self.tokens).saturating_add(earned);
        if tokens >= u64::from(BUCKET_LINES) {
            self.tokens = BUCKET_LINES;
            self.refilled = now;
        } else {
            self.tokens = tokens as u32;
            self.refilled += earned * TOKEN_MICROS;
        }
    }

    /// Takes one token at `now`; `false` when the bucket is empty.
    pub fn take(&mut self, now: u64) -> bool {
        self.refill(now);
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    /// When the next token comes, if the bucket is empty.
    pub fn next_token(&self) -> Option<u64> {
        (self.tokens == 0).then_some(self.refilled + TOKEN_MICROS)
    }
}

/// Collects a message in a fixed buffer; `write_str` fails when it is full.
pub struct MessageBuffer {
    bytes: [u8; MAX_MESSAGE_LEN],
    len: usize,
}

impl MessageBuffer {
    /// An empty buffer.
    pub const fn new() -> Self {
        Self {
            bytes: [0; MAX_MESSAGE_LEN],
            len: 0,
        }
    }

    /// The bytes written.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl Default for MessageBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for MessageBuffer {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        let slot = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Formats `line` as one RFC 5424 message from `hostname` into `out` (emptied first).
pub fn format_message(line: &Line, hostname: &str, out: &mut MessageBuffer) {
    out.len = 0;
    let priority = FACILITY_LOCAL0 * 8 + line.severity.min(7);
    let _ = write!(out, "<{priority}>1 ");
    // RFC 5424's FULL-DATE has a four-digit year; a clock beyond that says nothing.
    let time = line
        .unix_seconds
        .map(UtcDateTime::from_unix_seconds)
        .filter(|time| (0..=9999).contains(&time.date.year));
    match time {
        Some(time) => {
            let _ = write!(
                out,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                time.date.year, time.date.month, time.date.day, time.hour, time.minute, time.second
            );
        }
        None => {
            let _ = out.write_str("-");
        }
    }
    // A hostname is 1-63 printable ASCII characters (the settings parser checks it); an
    // empty one would break the header.
    let hostname = if hostname.is_empty() { "-" } else { hostname };
    let msgid = match line.kind {
        Kind::Access => "access",
        Kind::Event => "event",
    };
    // sequenceId runs 1 to 2147483647 and wraps to 1 (RFC 5424 §7.3.1); sysUpTime is in
    // hundredths of a second.
    let sequence = line.sequence % 2_147_483_647 + 1;
    let _ = write!(
        out,
        " {hostname} bramble - {msgid} [meta sequenceId=\"{sequence}\" sysUpTime=\"{}\"] {}",
        line.micros / 10_000,
        line.text()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;

    fn text(out: &MessageBuffer) -> String {
        String::from_utf8(out.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn ring_keeps_the_last_lines_and_cuts_long_ones_at_a_character() {
        let mut ring = LogRing::new();
        for i in 0..(RING_LINES as u64 + 10) {
            ring.push(i, None, 6, Kind::Event, format_args!("line {i}"));
        }
        assert_eq!(ring.oldest_sequence(), 10);
        assert!(ring.get(9).is_none());
        assert_eq!(ring.get(10).unwrap().text(), "line 10");
        assert!(ring.get(RING_LINES as u64 + 10).is_none());
        let long = "é".repeat(LINE_LEN);
        ring.push(0, None, 6, Kind::Event, format_args!("{long}"));
        let kept = ring.get(RING_LINES as u64 + 10).unwrap().text();
        assert_eq!(kept.len(), LINE_LEN);
        assert!(kept.chars().all(|c| c == 'é'));
    }

    #[test]
    fn bucket_lets_a_burst_out_then_a_steady_rate() {
        let mut bucket = TokenBucket::new(0);
        let burst = (0..1000).take_while(|_| bucket.take(0)).count();
        assert_eq!(burst, BUCKET_LINES as usize);
        assert_eq!(bucket.next_token(), Some(TOKEN_MICROS));
        // One second later: LINES_PER_SECOND more.
        let later = (0..1000).take_while(|_| bucket.take(1_000_000)).count();
        assert_eq!(later, LINES_PER_SECOND as usize);
        // Long quiet: full again, never more.
        let refilled = (0..1000).take_while(|_| bucket.take(100_000_000)).count();
        assert_eq!(refilled, BUCKET_LINES as usize);
    }

    #[test]
    fn messages_follow_rfc_5424() {
        let mut ring = LogRing::new();
        ring.push(
            1_500_000,
            None,
            severity(log::Level::Warn),
            Kind::Event,
            format_args!("net: link down"),
        );
        ring.push(
            2_000_000,
            Some(1_764_650_000),
            severity(log::Level::Info),
            Kind::Access,
            format_args!("GET / 200 512 0.100ms 192.168.77.1"),
        );
        let mut out = MessageBuffer::new();
        format_message(ring.get(0).unwrap(), "sill", &mut out);
        assert_eq!(
            text(&out),
            "<132>1 - sill bramble - event [meta sequenceId=\"1\" sysUpTime=\"150\"] net: link down"
        );
        format_message(ring.get(1).unwrap(), "sill", &mut out);
        assert_eq!(
            text(&out),
            "<134>1 2025-12-02T04:33:20Z sill bramble - access [meta sequenceId=\"2\" \
             sysUpTime=\"200\"] GET / 200 512 0.100ms 192.168.77.1"
        );
        // The longest line and hostname fit.
        let long = "x".repeat(LINE_LEN);
        ring.push(
            u64::MAX,
            Some(u64::MAX / 2_000_000),
            7,
            Kind::Event,
            format_args!("{long}"),
        );
        format_message(ring.get(2).unwrap(), &"h".repeat(63), &mut out);
        assert!(text(&out).ends_with(&long), "{}", text(&out));
        assert!(text(&out).starts_with("<135>1 - "), "{}", text(&out));
    }
}
