//! A minimal mDNS resolver for the tests (RFC 6762): asks for the A record of a `.local` name
//! as a legacy unicast querier (ephemeral source port, §6.7) or as a full querier on port 5353
//! that listens to the multicast answer, and reads the A records out of the replies.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// The mDNS group and port.
pub const GROUP: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 251);
/// The mDNS port.
pub const PORT: u16 = 5353;

const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
const FLAG_RESPONSE: u16 = 0x8000;

/// How the query is sent and the answer received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryMode {
    /// From an ephemeral port: the responder must answer by unicast, echoing the query ID.
    LegacyUnicast,
    /// From port 5353 to the group: the responder answers to the group.
    Multicast,
}

impl QueryMode {
    /// The name used on the helper's command line.
    pub fn name(self) -> &'static str {
        match self {
            QueryMode::LegacyUnicast => "legacy",
            QueryMode::Multicast => "multicast",
        }
    }

    /// Parses [`QueryMode::name`].
    pub fn from_name(name: &str) -> Option<QueryMode> {
        match name {
            "legacy" => Some(QueryMode::LegacyUnicast),
            "multicast" => Some(QueryMode::Multicast),
            _ => None,
        }
    }
}

/// A DNS query for the A record of `name` (dotted, without a trailing dot).
pub fn encode_query(id: u16, name: &str) -> Vec<u8> {
    let mut packet = Vec::new();
    for field in [id, 0, 1, 0, 0, 0] {
        packet.extend_from_slice(&field.to_be_bytes());
    }
    for label in name.split('.') {
        assert!(
            !label.is_empty() && label.len() <= 63,
            "bad label in {name}"
        );
        packet.push(label.len() as u8);
        packet.extend_from_slice(label.as_bytes());
    }
    packet.push(0);
    packet.extend_from_slice(&TYPE_A.to_be_bytes());
    packet.extend_from_slice(&CLASS_IN.to_be_bytes());
    packet
}

fn u16_at(packet: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(packet.get(at..at + 2)?.try_into().ok()?))
}

/// Reads the (possibly compressed) name at `at`; returns it lower-cased and dotted, and the
/// offset just after it in the record.
fn read_name(packet: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    let mut end = None;
    for _ in 0..32 {
        let length = *packet.get(at)? as usize;
        if length & 0xC0 == 0xC0 {
            let target = (u16_at(packet, at)? & 0x3FFF) as usize;
            end.get_or_insert(at + 2);
            at = target;
            continue;
        }
        if length == 0 {
            return Some((labels.join("."), end.unwrap_or(at + 1)));
        }
        let label = packet.get(at + 1..at + 1 + length)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += 1 + length;
    }
    None
}

/// A DNS response, as far as the tests need it.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    /// The message ID.
    pub id: u16,
    /// The A records for the asked name in the answer section, with their TTLs.
    pub addresses: Vec<(Ipv4Addr, u32)>,
}

/// Parses `packet` as a response; `None` for queries and malformed packets. Only A records
/// (class IN, with or without the cache-flush bit) named `name` are kept.
pub fn parse_response(packet: &[u8], name: &str) -> Option<Response> {
    let id = u16_at(packet, 0)?;
    if u16_at(packet, 2)? & FLAG_RESPONSE == 0 {
        return None;
    }
    let questions = u16_at(packet, 4)?;
    let answers = u16_at(packet, 6)?;
    let mut at = 12;
    for _ in 0..questions {
        at = read_name(packet, at)?.1 + 4;
    }
    let mut addresses = Vec::new();
    for _ in 0..answers {
        let (owner, after) = read_name(packet, at)?;
        let kind = u16_at(packet, after)?;
        let class = u16_at(packet, after + 2)? & 0x7FFF;
        let ttl = u32::from_be_bytes(packet.get(after + 4..after + 8)?.try_into().ok()?);
        let length = u16_at(packet, after + 8)? as usize;
        let data = packet.get(after + 10..after + 10 + length)?;
        if kind == TYPE_A && class == CLASS_IN && length == 4 && owner == name.to_lowercase() {
            addresses.push((Ipv4Addr::new(data[0], data[1], data[2], data[3]), ttl));
        }
        at = after + 10 + length;
    }
    Some(Response { id, addresses })
}

/// Asks for `name` from `source` (an address on the link) until an answer comes or `timeout`
/// passes, repeating the query every second. Returns the addresses of the first answer
/// (empty if none came).
pub fn resolve(
    name: &str,
    source: Ipv4Addr,
    mode: QueryMode,
    timeout: Duration,
) -> std::io::Result<Vec<Ipv4Addr>> {
    let socket = match mode {
        QueryMode::LegacyUnicast => UdpSocket::bind(SocketAddrV4::new(source, 0))?,
        QueryMode::Multicast => {
            let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, PORT))?;
            socket.join_multicast_v4(&GROUP, &source)?;
            socket.set_multicast_loop_v4(false)?;
            socket
        }
    };
    socket.set_multicast_ttl_v4(255)?;
    let id = match mode {
        // §18.1: multicast queries carry ID 0; a legacy querier picks its own.
        QueryMode::LegacyUnicast => 0x4242,
        QueryMode::Multicast => 0,
    };
    let query = encode_query(id, name);
    let deadline = Instant::now() + timeout;
    let mut buffer = [0u8; 1500];
    while Instant::now() < deadline {
        socket.send_to(&query, SocketAddrV4::new(GROUP, PORT))?;
        let resend = (Instant::now() + Duration::from_secs(1)).min(deadline);
        loop {
            let left = resend.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            socket.set_read_timeout(Some(left))?;
            let Ok((length, _)) = socket.recv_from(&mut buffer) else {
                break;
            };
            if let Some(response) = parse_response(&buffer[..length], name)
                && response.id == id
                && !response.addresses.is_empty()
            {
                return Ok(response.addresses.iter().map(|(a, _)| *a).collect());
            }
        }
    }
    Ok(Vec::new())
}

/// Runs this test binary inside `netns` as its ignored `mdns_query_in_namespace` helper test,
/// with `env` telling it what to ask, and collects the `mdns-answer: A.B.C.D` lines it prints.
/// Returns the addresses and the subprocess's output (for failure messages); panics if the
/// subprocess fails.
pub fn resolve_in_subprocess(
    netns: &super::Netns,
    env: &[(&str, String)],
) -> (Vec<Ipv4Addr>, String) {
    let binary = std::env::current_exe().expect("path of this test binary");
    let output = netns
        .command(binary)
        .args([
            "--exact",
            "mdns_query_in_namespace",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running the mDNS resolver subprocess");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let log = format!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "resolver subprocess failed:\n{log}"
    );
    let addresses = stdout
        .lines()
        // The harness prints "test NAME ... " without a newline before the helper's output.
        .filter_map(|line| line.split_once("mdns-answer: ").map(|(_, rest)| rest))
        .filter_map(|address| address.trim().parse().ok())
        .collect();
    (addresses, log)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_is_a_one_question_a_in_query() {
        let query = encode_query(7, "bramble.local");
        assert_eq!(
            query,
            b"\x00\x07\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\
              \x07bramble\x05local\x00\x00\x01\x00\x01"
        );
    }

    #[test]
    fn reads_a_record_behind_a_compression_pointer() {
        // Legacy unicast answer: ID 7, response + authoritative, question echoed, answer name
        // compressed to the question's (offset 12), class IN with cache-flush, TTL 10.
        let mut packet = b"\x00\x07\x84\x00\x00\x01\x00\x01\x00\x00\x00\x00".to_vec();
        packet.extend_from_slice(b"\x07Bramble\x05local\x00\x00\x01\x00\x01");
        packet
            .extend_from_slice(b"\xC0\x0C\x00\x01\x80\x01\x00\x00\x00\x0A\x00\x04\xC0\xA8\x4D\x02");
        let response = parse_response(&packet, "bramble.local").unwrap();
        assert_eq!(response.id, 7);
        assert_eq!(
            response.addresses,
            vec![(Ipv4Addr::new(192, 168, 77, 2), 10)]
        );
        assert_eq!(
            parse_response(&packet, "windowsill.local")
                .unwrap()
                .addresses,
            vec![]
        );
        // A query (QR clear) is not an answer; a truncated record is rejected.
        assert_eq!(
            parse_response(&encode_query(7, "bramble.local"), "bramble.local"),
            None
        );
        assert_eq!(
            parse_response(&packet[..packet.len() - 2], "bramble.local"),
            None
        );
    }
}
