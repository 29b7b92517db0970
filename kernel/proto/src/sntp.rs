//! SNTP (RFC 4330): the packet (a checked view of the 48-byte NTP header) and a client that
//! asks a list of servers in turn, with back-off, and keeps the time it learns.
//!
//! The client puts a random 64-bit nonce in the request's transmit timestamp (it has no
//! clock to put there) and accepts only a reply that echoes it as the originate timestamp
//! (RFC 4330 §5: this also defeats blind spoofing). The time at the reply's arrival is the
//! server's transmit time plus half the round trip less the server's own processing time.

use bramble_hal::Instant;

/// The NTP port.
pub const NTP_PORT: u16 = 123;
/// Length of an NTP header without extensions or authenticator.
pub const PACKET_LEN: usize = 48;
/// Seconds from the NTP era 0 epoch (1900-01-01) to the Unix epoch.
const NTP_TO_UNIX_SECONDS: u64 = 2_208_988_800;
/// First wait after a failed attempt; doubled up to [`MAX_RETRY_MICROS`].
const FIRST_RETRY_MICROS: u64 = 2_000_000;
/// Longest wait between attempts while the clock is not set (RFC 4330 §10: at most one
/// request per 15 s on average is polite; this is a bound, not an average).
const MAX_RETRY_MICROS: u64 = 64_000_000;
/// How long an answer may take before the server counts as silent.
pub const REPLY_TIMEOUT_MICROS: u64 = 2_000_000;
/// How often the clock is set again once it is (drift of a 50 ppm crystal: 0.2 s an hour).
pub const RESYNC_MICROS: u64 = 3_600_000_000;

/// An NTP timestamp: seconds since 1900 (era 0) and a binary fraction, as 32.32 fixed point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NtpTimestamp(pub u64);

impl NtpTimestamp {
    /// The timestamp as Unix microseconds, for era 0 (until 2036) and era 1 (2036 to 2172,
    /// told apart by the seconds field being below the start of 1970 in era 0, RFC 4330 §3).
    pub fn unix_micros(self) -> u64 {
        let seconds = self.0 >> 32;
        let fraction = self.0 & 0xFFFF_FFFF;
        let seconds = if seconds >= NTP_TO_UNIX_SECONDS {
            seconds - NTP_TO_UNIX_SECONDS
        } else {
            // Era 1: the seconds count wrapped on 2036-02-07.
            seconds + (1 << 32) - NTP_TO_UNIX_SECONDS
        };
        seconds * 1_000_000 + ((fraction * 1_000_000) >> 32)
    }
}

/// A client request (mode 3, version 4) carrying `nonce` as its transmit timestamp.
pub fn request(nonce: u64) -> [u8; PACKET_LEN] {
    let mut packet = [0u8; PACKET_LEN];
    // LI 0, VN 4, Mode 3 (client).
    packet[0] = (4 << 3) | 3;
    packet[40..48].copy_from_slice(&nonce.to_be_bytes());
    packet
}

/// Why a reply was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SntpError {
    /// Shorter than an NTP header.
    Truncated,
    /// Not a server (mode 4) or broadcast (mode 5) reply, or a version before 3.
    NotAReply,
    /// Its originate timestamp is not our request's (stale, or spoofed).
    NotOurs,
    /// The server is not synchronised: leap indicator 3, or stratum 0 (a kiss-o'-death) or
    /// above 15.
    Unsynchronised,
    /// A zero transmit timestamp.
    NoTime,
}

/// A checked SNTP reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// When the server received the request.
    pub receive: NtpTimestamp,
    /// When the server sent the reply.
    pub transmit: NtpTimestamp,
    /// The server's stratum (1 to 15).
    pub stratum: u8,
}

fn timestamp(bytes: &[u8], at: usize) -> NtpTimestamp {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    NtpTimestamp(u64::from_be_bytes(field))
}

/// Checks `bytes` as the reply to the request that carried `nonce`.
pub fn parse_reply(bytes: &[u8], nonce: u64) -> Result<Reply, SntpError> {
    if bytes.len() < PACKET_LEN {
        return Err(SntpError::Truncated);
    }
    let leap = bytes[0] >> 6;
    let version = (bytes[0] >> 3) & 7;
    let mode = bytes[0] & 7;
    if !(3..=4).contains(&version) || !(4..=5).contains(&mode) {
        return Err(SntpError::NotAReply);
    }
    if timestamp(bytes, 24).0 != nonce {
        return Err(SntpError::NotOurs);
    }
    let stratum = bytes[1];
    if leap == 3 || stratum == 0 || stratum > 15 {
        return Err(SntpError::Unsynchronised);
    }
    let transmit = timestamp(bytes, 40);
    if transmit.0 == 0 {
        return Err(SntpError::NoTime);
    }
    Ok(Reply {
        receive: timestamp(bytes, 32),
        transmit,
        stratum,
    })
}

/// Unix microseconds at the local instant `received` of `reply`, to a request sent at
/// `sent`: the server's transmit time plus half the round trip, less the time the server
/// held the request (RFC 4330 §5).
pub fn unix_micros_at_arrival(reply: &Reply, sent: Instant, received: Instant) -> u64 {
    let round_trip = received.micros_since(sent);
    let held = reply
        .transmit
        .unix_micros()
        .saturating_sub(reply.receive.unix_micros())
        .min(round_trip);
    reply.transmit.unix_micros() + (round_trip - held) / 2
}

/// What the client wants done next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SntpAction {
    /// Send [`request`]`(nonce)` to server `server` (an index into the caller's list).
    Send {
        /// Which server.
        server: usize,
        /// The request's nonce.
        nonce: u64,
    },
    /// Nothing until [`SntpClient::next_deadline`] or a reply.
    Wait,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    server: usize,
    nonce: u64,
    sent: Instant,
}

/// The client: asks the servers in turn until one answers, then again every
/// [`RESYNC_MICROS`].
#[derive(Clone, Debug)]
pub struct SntpClient {
    pending: Option<Pending>,
    next_attempt: Instant,
    retry: u64,
    next_server: usize,
    /// Unix microseconds at uptime zero, once a reply has been accepted.
    boot_unix_micros: Option<u64>,
    /// Stratum and uptime of the last accepted reply.
    last_sync: Option<(u8, Instant)>,
    nonce_state: u64,
}

impl SntpClient {
    /// A client that makes its first attempt at `now`; `seed` makes its nonces unguessable
    /// to an off-path attacker (mix in hardware entropy where there is some).
    pub fn new(seed: u64, now: Instant) -> Self {
        Self {
            pending: None,
            next_attempt: now,
            retry: FIRST_RETRY_MICROS,
            next_server: 0,
            boot_unix_micros: None,
            last_sync: None,
            nonce_state: seed | 1,
        }
    }

    fn next_nonce(&mut self) -> u64 {
        // xorshift64*: nonces need to be unpredictable only to someone who cannot see the
        // request (who could see it could answer it anyway).
        let mut x = self.nonce_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.nonce_state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// What to do at `now`, with `servers` servers to ask (0: none known yet).
    pub fn poll(&mut self, servers: usize, now: Instant) -> SntpAction {
        if let Some(pending) = self.pending
            && now.micros_since(pending.sent) >= REPLY_TIMEOUT_MICROS
        {
            self.pending = None;
            self.fail(now);
        }
        if self.pending.is_some() || servers == 0 || now < self.next_attempt {
            return SntpAction::Wait;
        }
        let server = self.next_server % servers;
        self.next_server = server + 1;
        let nonce = self.next_nonce();
        self.pending = Some(Pending {
            server,
            nonce,
            sent: now,
        });
        SntpAction::Send { server, nonce }
    }

    fn fail(&mut self, now: Instant) {
        self.next_attempt = now.add_micros(self.retry);
        self.retry = (self.retry * 2).min(MAX_RETRY_MICROS);
    }

    /// A datagram from server `server`'s address: accepted if it answers the pending
    /// request. Returns the Unix time at `now` when it sets the clock.
    pub fn receive(&mut self, server: usize, bytes: &[u8], now: Instant) -> Option<u64> {
        let pending = self.pending.filter(|pending| pending.server == server)?;
        match parse_reply(bytes, pending.nonce) {
            Ok(reply) => {
                self.pending = None;
                let unix = unix_micros_at_arrival(&reply, pending.sent, now);
                self.boot_unix_micros = Some(unix.saturating_sub(now.as_micros()));
                self.last_sync = Some((reply.stratum, now));
                self.retry = FIRST_RETRY_MICROS;
                self.next_attempt = now.add_micros(RESYNC_MICROS);
                Some(unix)
            }
            // A stray or stale datagram: keep waiting for the real answer.
            Err(SntpError::NotOurs | SntpError::Truncated | SntpError::NotAReply) => None,
            Err(_) => {
                // This server cannot help: ask the next one after the back-off.
                self.pending = None;
                self.fail(now);
                None
            }
        }
    }

    /// Unix microseconds at `now`, once the clock has been set.
    pub fn unix_micros(&self, now: Instant) -> Option<u64> {
        self.boot_unix_micros
            .map(|boot| boot.saturating_add(now.as_micros()))
    }

    /// Stratum of the server and uptime of the last accepted reply.
    pub fn last_sync(&self) -> Option<(u8, Instant)> {
        self.last_sync
    }

    /// When the client next needs to run: the pending request's timeout or the next
    /// attempt.
    pub fn next_deadline(&self) -> Instant {
        match self.pending {
            Some(pending) => pending.sent.add_micros(REPLY_TIMEOUT_MICROS),
            None => self.next_attempt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(micros: u64) -> Instant {
        Instant::from_micros(micros)
    }

    /// A server's reply to `request`, receiving at `t2` and sending at `t3` (Unix micros).
    fn reply_to(request: &[u8], t2: u64, t3: u64, stratum: u8) -> [u8; PACKET_LEN] {
        let ntp = |unix: u64| {
            let seconds = unix / 1_000_000 + NTP_TO_UNIX_SECONDS;
            let fraction = ((unix % 1_000_000) << 32) / 1_000_000;
            ((seconds << 32) | fraction).to_be_bytes()
        };
        let mut packet = [0u8; PACKET_LEN];
        packet[0] = (4 << 3) | 4;
        packet[1] = stratum;
        packet[24..32].copy_from_slice(&request[40..48]);
        packet[32..40].copy_from_slice(&ntp(t2));
        packet[40..48].copy_from_slice(&ntp(t3));
        packet
    }

    #[test]
    fn timestamps_convert_in_both_eras() {
        assert_eq!(NtpTimestamp(NTP_TO_UNIX_SECONDS << 32).unix_micros(), 0);
        assert_eq!(
            NtpTimestamp((NTP_TO_UNIX_SECONDS << 32) | (1 << 31)).unix_micros(),
            500_000
        );
        // 2036-02-07T06:28:16Z is NTP era 1 second 0.
        assert_eq!(NtpTimestamp(0).unix_micros(), 2_085_978_496 * 1_000_000);
    }

    #[test]
    fn a_reply_sets_the_clock_half_a_round_trip_after_the_server_sent_it() {
        let mut client = SntpClient::new(42, at(1_000_000));
        let SntpAction::Send { server: 0, nonce } = client.poll(2, at(1_000_000)) else {
            panic!("the first poll asks the first server");
        };
        let request = request(nonce);
        assert_eq!(request[0], 0x23);
        let unix = 1_800_000_000_000_000;
        // 40 ms round trip, of which the server held the request 10 ms.
        let reply = reply_to(&request, unix, unix + 10_000, 2);
        assert_eq!(
            client.receive(1, &reply, at(1_040_000)),
            None,
            "from the wrong server"
        );
        let set = client.receive(0, &reply, at(1_040_000)).unwrap();
        // Within a microsecond (the 32-bit fractions round down).
        assert!(set.abs_diff(unix + 10_000 + 15_000) <= 1, "{set}");
        assert_eq!(client.unix_micros(at(2_040_000)), Some(set + 1_000_000));
        assert_eq!(client.poll(2, at(2_000_000)), SntpAction::Wait);
        assert_eq!(client.next_deadline(), at(1_040_000 + RESYNC_MICROS));
    }

    #[test]
    fn spoofed_stale_and_unsynchronised_replies_are_refused() {
        let mut client = SntpClient::new(7, at(0));
        let SntpAction::Send { nonce, .. } = client.poll(1, at(0)) else {
            panic!()
        };
        let request = request(nonce);
        let mut spoofed = reply_to(&request, 5_000_000, 5_000_000, 1);
        spoofed[31] ^= 1;
        assert_eq!(parse_reply(&spoofed, nonce), Err(SntpError::NotOurs));
        assert_eq!(client.receive(0, &spoofed, at(10)), None);
        assert_eq!(
            parse_reply(&spoofed[..47], nonce),
            Err(SntpError::Truncated)
        );
        let kiss = reply_to(&request, 5_000_000, 5_000_000, 0);
        assert_eq!(parse_reply(&kiss, nonce), Err(SntpError::Unsynchronised));
        let mut alarm = reply_to(&request, 5_000_000, 5_000_000, 2);
        alarm[0] |= 0xC0;
        assert_eq!(parse_reply(&alarm, nonce), Err(SntpError::Unsynchronised));
        let mut client_mode = reply_to(&request, 5_000_000, 5_000_000, 2);
        client_mode[0] = 0x23;
        assert_eq!(parse_reply(&client_mode, nonce), Err(SntpError::NotAReply));
        assert_eq!(client.receive(0, &kiss, at(20)), None);
        assert_eq!(client.unix_micros(at(30)), None);
        assert_eq!(client.next_deadline(), at(20 + FIRST_RETRY_MICROS));
    }

    #[test]
    fn silent_servers_are_tried_in_turn_with_growing_back_off() {
        let mut client = SntpClient::new(1, at(0));
        let mut now = 0;
        let mut asked = std::vec::Vec::new();
        for _ in 0..200 {
            if let SntpAction::Send { server, .. } = client.poll(3, at(now)) {
                asked.push((server, now));
            }
            now = client.next_deadline().as_micros();
        }
        assert_eq!(asked[0], (0, 0));
        assert_eq!(asked[1].0, 1);
        assert_eq!(asked[2].0, 2);
        assert_eq!(asked[3].0, 0);
        let gaps: std::vec::Vec<u64> = asked.windows(2).map(|w| w[1].1 - w[0].1).collect();
        assert!(
            gaps.windows(2).all(|g| g[1] >= g[0]),
            "back-off never shrinks: {gaps:?}"
        );
        assert_eq!(
            *gaps.last().unwrap(),
            REPLY_TIMEOUT_MICROS + MAX_RETRY_MICROS
        );
        assert_eq!(
            client.poll(0, at(now)),
            SntpAction::Wait,
            "no servers: nothing sent"
        );
    }

    #[test]
    fn nonces_differ() {
        let mut client = SntpClient::new(99, at(0));
        let a = client.next_nonce();
        let b = client.next_nonce();
        assert_ne!(a, b);
    }
}
