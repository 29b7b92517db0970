//! What the caller sets and reads back: the pool's deadlines, its configuration, its
//! counters.

/// Deadlines of the pool (microseconds) and its per-source cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    /// From the handshake to the first request byte.
    pub first_byte_micros: u64,
    /// From the first byte of a request to the end of its header, before extensions.
    pub header_micros: u64,
    /// Bytes per second of header that extend [`PoolLimits::header_micros`] by one second
    /// each (0: no extension).
    pub header_min_rate: u64,
    /// Longest a header may take, extensions included.
    pub header_max_micros: u64,
    /// Longest a keep-alive connection may sit idle between requests while the pool is at
    /// most half full; shorter above that, down to [`PoolLimits::idle_min_micros`].
    pub idle_micros: u64,
    /// Shortest idle allowance (when the pool is full).
    pub idle_min_micros: u64,
    /// Longest a response may go without the client acknowledging anything.
    pub send_stall_micros: u64,
    /// While connections wait for a session, a session whose response has seen no progress
    /// for this long is taken back (the connection is reset).
    pub stall_evict_micros: u64,
    /// From our FIN (or deciding to close) to the close being complete.
    pub close_micros: u64,
}

impl PoolLimits {
    /// 10 s to the first byte; 20 s for a header, plus 1 s per 500 bytes, at most 40 s;
    /// 15 s idle (1 s when full); 30 s without progress for a response (5 s while others
    /// wait for its session); 10 s to close.
    pub const DEFAULT: PoolLimits = PoolLimits {
        first_byte_micros: 10_000_000,
        header_micros: 20_000_000,
        header_min_rate: 500,
        header_max_micros: 40_000_000,
        idle_micros: 15_000_000,
        idle_min_micros: 1_000_000,
        send_stall_micros: 30_000_000,
        stall_evict_micros: 5_000_000,
        close_micros: 10_000_000,
    };
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What the pool serves and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The TCP port served (the HTTP port).
    pub port: u16,
    /// Deadlines.
    pub limits: PoolLimits,
    /// Most connections from one source at once (0: no cap, the default): one IPv4 address,
    /// or one IPv6 /64 (a host picks any address of its /64 at will). Beyond it new
    /// connections from that source are refused with a reset.
    pub max_per_source: u32,
    /// The 128-bit secret keying the SYN cookies and the connection table's hash: drawn from
    /// the CSPRNG at each boot, so that neither can be predicted from what the pool sends.
    pub seed: [u64; 2],
}

/// What the pool has done: every admission decision, eviction and deadline is counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// SYNs answered with a cookie.
    pub syns: u64,
    /// Connections admitted (the cookie came back).
    pub accepted: u64,
    /// Of those, the ones over IPv6.
    pub accepted_ipv6: u64,
    /// ACKs for no connection whose cookie was not ours (answered with a reset).
    pub bad_cookies: u64,
    /// New connections refused because every block held a connection worth keeping.
    pub refused_full: u64,
    /// New connections refused by the per-source cap.
    pub refused_source: u64,
    /// Closing connections reset to make room for a new one.
    pub evicted_closing: u64,
    /// Idle keep-alive connections reset to make room for a new one.
    pub evicted_idle: u64,
    /// Connections without a complete request header reset to make room (for a new
    /// connection, or for a session a waiting request needs).
    pub evicted_incomplete: u64,
    /// Responses without progress reset because others waited for their session.
    pub evicted_stalled: u64,
    /// Of those, responses to a narrow window taken back early for a request from a client
    /// with an open window.
    pub evicted_narrow: u64,
    /// Connections closed for sending no first byte in time.
    pub timeout_first_byte: u64,
    /// Connections reset for a request header too slow.
    pub timeout_header: u64,
    /// Keep-alive connections closed for being idle too long.
    pub timeout_idle: u64,
    /// Connections reset for acknowledging nothing of a response too long.
    pub timeout_send: u64,
    /// Closes that did not complete in time (reset).
    pub timeout_close: u64,
    /// Requests parked in a cell to wait for a session.
    pub parked: u64,
    /// Parked requests the service put off ([`Service::admit`]: a TLS handshake budget).
    ///
    /// [`Service::admit`]: crate::Service::admit
    pub deferred: u64,
    /// Parked requests the service refused (reset): not its protocol.
    pub refused_service: u64,
    /// Waiting requests reset because their client closed before their turn and the service
    /// cannot answer them then ([`Service::answerable_after_fin`]: a TLS ClientHello).
    ///
    /// [`Service::answerable_after_fin`]: crate::Service::answerable_after_fin
    pub abandoned: u64,
    /// Sessions given back by a keep-alive connection whose next request came with the
    /// acknowledgment of its last answer, because others waited (that request parked).
    pub yielded: u64,
    /// Connections reset by the peer.
    pub peer_resets: u64,
    /// Connections reset because the session could not complete (or data came after close).
    pub aborted: u64,
    /// Retransmission timeouts.
    pub retransmit_timeouts: u64,
    /// Fast retransmits (three duplicate ACKs).
    pub fast_retransmits: u64,
    /// Segments received for the pool (valid).
    pub segments_in: u64,
    /// Segments sent.
    pub segments_out: u64,
    /// Frames for the pool's port that failed their checks.
    pub malformed: u64,
    /// Replies without a connection dropped because the control queue was full.
    pub control_dropped: u64,
    /// Connections open now.
    pub open: u32,
    /// Most connections open at once.
    pub peak_open: u32,
    /// Sessions leased now.
    pub leased: u32,
    /// Connections waiting for a session now.
    pub waiting: u32,
}

impl PoolCounters {
    /// Every deadline that ended a connection.
    pub fn timeouts(&self) -> u64 {
        self.timeout_first_byte
            + self.timeout_header
            + self.timeout_idle
            + self.timeout_send
            + self.timeout_close
    }

    /// Every eviction.
    pub fn evictions(&self) -> u64 {
        self.evicted_closing + self.evicted_idle + self.evicted_incomplete + self.evicted_stalled
    }
}

impl core::fmt::Display for PoolCounters {
    /// `open 3 (peak 9), leased 1, waiting 0, accepted 12, refused 0+0, evicted
    /// 0/0/0/0, timeouts 1/0/2/0/0, ...`: the connection decisions in one line.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "open {} (peak {}), leased {}, waiting {}, syn {}, accepted {} ({} IPv6), bad cookies {}, \
             refused full {} per-source {}, evicted closing {} idle {} incomplete {} \
             stalled {} (narrow {}), timeouts first-byte {} header {} idle {} send {} close {}, parked {}, yielded {}, \
             peer resets {}, aborted {}, retransmits {}+{} fast, segments in {} out {}, \
             malformed {}, control dropped {}, deferred {}, refused by service {}, abandoned {}",
            self.open,
            self.peak_open,
            self.leased,
            self.waiting,
            self.syns,
            self.accepted,
            self.accepted_ipv6,
            self.bad_cookies,
            self.refused_full,
            self.refused_source,
            self.evicted_closing,
            self.evicted_idle,
            self.evicted_incomplete,
            self.evicted_stalled,
            self.evicted_narrow,
            self.timeout_first_byte,
            self.timeout_header,
            self.timeout_idle,
            self.timeout_send,
            self.timeout_close,
            self.parked,
            self.yielded,
            self.peer_resets,
            self.aborted,
            self.retransmit_timeouts,
            self.fast_retransmits,
            self.segments_in,
            self.segments_out,
            self.malformed,
            self.control_dropped,
            self.deferred,
            self.refused_service,
            self.abandoned
        )
    }
}
