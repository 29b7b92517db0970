//! SYN cookies: the pool answers every connection request (SYN) at once with a SYN-ACK whose
//! initial sequence number encodes, under a secret key, who asked, when, and the segment size
//! it can take; it keeps no state. A connection exists only when the client's ACK comes back
//! with that number plus one. A flood of SYNs (spoofed or not) therefore costs one reply each
//! and no memory, and cannot crowd out anyone (RFC 4987 §3.6 describes the technique).
//!
//! Cookie layout (32 bits): 5 bits of a 64-second counter, 3 bits of an MSS class, and 24
//! bits of a keyed hash (SipHash-2-4) of the client's address, port, our port, the client's
//! initial sequence number and the full counter. A cookie is accepted for up to two counter
//! periods (64-128 s).

/// Seconds per cookie counter step.
const PERIOD_SECONDS: u64 = 64;
/// Segment sizes a cookie can carry; the largest not above the client's MSS is chosen.
pub const MSS_CLASSES: [u16; 8] = [536, 1024, 1200, 1360, 1400, 1440, 1452, 1460];

/// The keyed hash of the cookies (and of the pool's table and IP IDs): the crate's one.
pub use bramble_proto::siphash::siphash24;

/// Who a cookie is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CookieInput {
    /// The client's address (IPv4-mapped for IPv4).
    pub ip: super::wire::Address,
    /// Our address it was sent to (IPv4-mapped for IPv4).
    pub local_ip: super::wire::Address,
    /// The client's port.
    pub port: u16,
    /// Our port.
    pub local_port: u16,
    /// The client's initial sequence number (the SYN's sequence number).
    pub client_isn: u32,
}

/// The secret and the arithmetic of SYN cookies.
#[derive(Clone, Copy, Debug)]
pub struct Cookies {
    key: [u64; 2],
}

impl Cookies {
    /// Cookies keyed from `seed`, a 128-bit secret drawn from the CSPRNG at each boot: an
    /// attacker who saw cookies must not be able to search for it offline.
    pub fn new(seed: [u64; 2]) -> Self {
        let k0 = siphash24(seed, b"bramble syn cookie key 0");
        let k1 = siphash24(seed, b"bramble syn cookie key 1");
        Self { key: [k0, k1] }
    }

    fn hash(&self, input: &CookieInput, counter: u64) -> u32 {
        let mut data = [0u8; 44];
        data[0..16].copy_from_slice(&input.ip);
        data[16..32].copy_from_slice(&input.local_ip);
        data[32..34].copy_from_slice(&input.port.to_be_bytes());
        data[34..36].copy_from_slice(&input.local_port.to_be_bytes());
        data[36..40].copy_from_slice(&input.client_isn.to_be_bytes());
        data[40..44].copy_from_slice(&(counter as u32).to_be_bytes());
        (siphash24(self.key, &data) & 0x00ff_ffff) as u32
    }

    /// The cookie (our initial sequence number) for a SYN from `input` at `now_seconds`,
    /// given the client's MSS option; also returns the MSS the cookie carries.
    pub fn make(
        &self,
        input: &CookieInput,
        client_mss: Option<u16>,
        now_seconds: u64,
    ) -> (u32, u16) {
        // RFC 9293 §3.7.1: without the option, 536.
        let limit = client_mss.unwrap_or(536);
        let class = MSS_CLASSES
            .iter()
            .rposition(|&mss| mss <= limit)
            .unwrap_or(0);
        let counter = now_seconds / PERIOD_SECONDS;
        let cookie =
            ((counter as u32 & 0x1f) << 27) | ((class as u32) << 24) | self.hash(input, counter);
        (cookie, MSS_CLASSES[class])
    }

    /// Checks `cookie` (the client's acknowledgment number minus one) against `input` at
    /// `now_seconds`; the MSS it carries if it is ours and recent.
    pub fn check(&self, input: &CookieInput, cookie: u32, now_seconds: u64) -> Option<u16> {
        let counter = now_seconds / PERIOD_SECONDS;
        let stamp = u64::from(cookie >> 27);
        let class = ((cookie >> 24) & 0x7) as usize;
        for age in 0..2u64 {
            let Some(candidate) = counter.checked_sub(age) else {
                break;
            };
            if candidate & 0x1f == stamp && self.hash(input, candidate) == cookie & 0x00ff_ffff {
                return Some(MSS_CLASSES[class]);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> CookieInput {
        CookieInput {
            ip: super::super::wire::v4_mapped([192, 168, 77, 1]),
            local_ip: super::super::wire::v4_mapped([192, 168, 77, 2]),
            port: 51000,
            local_port: 80,
            client_isn: 0xdead_beef,
        }
    }

    #[test]
    fn a_cookie_checks_for_its_client_within_two_periods_only() {
        let cookies = Cookies::new([7, 0]);
        let (cookie, mss) = cookies.make(&input(), Some(1460), 1000);
        assert_eq!(mss, 1460);
        assert_eq!(cookies.check(&input(), cookie, 1000), Some(1460));
        assert_eq!(cookies.check(&input(), cookie, 1000 + 64), Some(1460));
        assert_eq!(cookies.check(&input(), cookie, 1000 + 200), None);
        let other = CookieInput {
            port: 51001,
            ..input()
        };
        assert_eq!(cookies.check(&other, cookie, 1000), None);
        let other = CookieInput {
            client_isn: 1,
            ..input()
        };
        assert_eq!(cookies.check(&other, cookie, 1000), None);
        assert_eq!(cookies.check(&input(), cookie ^ 1, 1000), None);
        // Another boot's key rejects it.
        assert_eq!(Cookies::new([8, 0]).check(&input(), cookie, 1000), None);
    }

    #[test]
    fn the_mss_class_is_the_largest_the_client_takes() {
        let cookies = Cookies::new([1, 0]);
        assert_eq!(cookies.make(&input(), None, 0).1, 536);
        assert_eq!(cookies.make(&input(), Some(1400), 0).1, 1400);
        assert_eq!(cookies.make(&input(), Some(1399), 0).1, 1360);
        assert_eq!(cookies.make(&input(), Some(9000), 0).1, 1460);
        assert_eq!(cookies.make(&input(), Some(100), 0).1, 536);
        let (cookie, _) = cookies.make(&input(), Some(1200), 5);
        assert_eq!(cookies.check(&input(), cookie, 5), Some(1200));
    }
}
