//! What the engine has done so far: responses, bytes, connections and statuses, counted.
//!
//! The server keeps one [`Counters`]; the status page and the `status:` lines read it.

/// Every status code the engine can send, in the order of [`Counters::by_status`].
pub const STATUSES: [u16; 30] = [
    200, 202, 204, 206, 301, 302, 303, 304, 307, 308, 400, 403, 404, 405, 408, 409, 410, 411, 412,
    413, 414, 416, 421, 422, 429, 431, 500, 501, 503, 505,
];

/// What the server has done so far; read by the network loop and printed periodically.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests answered (a response was queued).
    pub requests: u64,
    /// Response bytes handed to sockets (headers and bodies).
    pub bytes_sent: u64,
    /// Connections accepted since start.
    pub connections_accepted: u64,
    /// Connections currently open.
    pub open_connections: u32,
    /// Connections ended because a deadline passed: first byte, header, idle keep-alive or
    /// whole response.
    pub timeouts: u64,
    /// Responses per status code, indexed like [`STATUSES`].
    pub by_status: [u64; STATUSES.len()],
    /// Times a buffered header section was run through the parser, complete or not: the
    /// parsing work clients caused. A connection re-parses only when a line ends (or its
    /// buffer fills, or a line grows past any valid request line), so one byte per segment
    /// costs no more parses than the same header sent at once.
    pub header_parses: u64,
    /// Responses whose body the body source could not deliver (a card read error or a body
    /// failing its checksum): answered 500 if nothing had been sent, otherwise reset.
    pub body_failures: u64,
}

impl Counters {
    /// Responses sent with `status` so far.
    pub fn status(&self, status: u16) -> u64 {
        STATUSES
            .iter()
            .position(|&s| s == status)
            .map_or(0, |i| self.by_status[i])
    }

    /// Responses with a 4xx or 5xx status.
    pub fn errors(&self) -> u64 {
        STATUSES
            .iter()
            .zip(self.by_status.iter())
            .filter(|(status, _)| **status >= 400)
            .map(|(_, count)| count)
            .sum()
    }

    pub(crate) fn count_status(&mut self, status: u16) {
        if let Some(i) = STATUSES.iter().position(|&s| s == status) {
            self.by_status[i] += 1;
        }
    }

    /// Takes back one response counted with `status` (it was replaced before being sent).
    pub(crate) fn uncount_status(&mut self, status: u16) {
        if let Some(i) = STATUSES.iter().position(|&s| s == status) {
            self.by_status[i] = self.by_status[i].saturating_sub(1);
        }
    }
}

impl core::fmt::Display for Counters {
    /// One line: `requests=12 bytes=3456 open=2 accepted=9 timeouts=0 body_failures=0 200=10
    /// 404=2`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "requests={} bytes={} open={} accepted={} timeouts={} body_failures={}",
            self.requests,
            self.bytes_sent,
            self.open_connections,
            self.connections_accepted,
            self.timeouts,
            self.body_failures
        )?;
        for (status, count) in STATUSES.iter().zip(self.by_status.iter()) {
            if *count > 0 {
                write!(f, " {status}={count}")?;
            }
        }
        Ok(())
    }
}
