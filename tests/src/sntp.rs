//! The server's half of SNTP (RFC 4330) for the tests' own time servers: one reply to one
//! request, carrying a time the test chooses, so that a guest's clock shows where it came from.

use std::time::Duration;

/// Seconds from the NTP era (1900) to the Unix epoch.
pub const NTP_TO_UNIX: u64 = 2_208_988_800;

/// The 48-byte reply to `request` (at least 48 bytes: a client's packet) saying that it is
/// `unix_time` after the Unix epoch: version 4, server mode, stratum 2, the client's
/// transmit timestamp echoed as the originate timestamp, receive = transmit = that time.
pub fn reply(request: &[u8], unix_time: Duration) -> [u8; 48] {
    let seconds = unix_time.as_secs() + NTP_TO_UNIX;
    let fraction = (u64::from(unix_time.subsec_nanos()) << 32) / 1_000_000_000;
    let timestamp = ((seconds << 32) | fraction).to_be_bytes();
    let mut reply = [0u8; 48];
    reply[0] = (4 << 3) | 4; // no leap warning, version 4, server
    reply[1] = 2; // stratum
    reply[24..32].copy_from_slice(&request[40..48]); // originate = their transmit
    reply[32..40].copy_from_slice(&timestamp);
    reply[40..48].copy_from_slice(&timestamp);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_echoes_the_transmit_time_and_says_the_given_time() {
        let mut request = [0u8; 48];
        request[40..48].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let answer = reply(&request, Duration::from_millis(1_500));
        assert_eq!(answer[0], 0x24);
        assert_eq!(answer[24..32], [1, 2, 3, 4, 5, 6, 7, 8]);
        let seconds = u32::from_be_bytes(answer[40..44].try_into().unwrap());
        assert_eq!(u64::from(seconds), NTP_TO_UNIX + 1);
        let fraction = u32::from_be_bytes(answer[44..48].try_into().unwrap());
        assert_eq!(fraction, 1 << 31);
        assert_eq!(answer[32..40], answer[40..48]);
    }
}
