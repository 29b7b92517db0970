//! A byte-script driver for fuzzing the stream pool: turns arbitrary bytes into raw frames,
//! handshakes completed with the cookie the pool sent, segments of those connections (any
//! flags, sequence numbers near the expected ones, any payload), time passing and a busy
//! device, and checks the pool's invariants after each step.
//!
//! Shared by the cargo-fuzz target (`fuzz/fuzz_targets/stream_segments.rs`) and the
//! pseudo-random `#[test]` that runs in CI without cargo-fuzz.

use super::wire::{self, Outgoing, flags};
use super::{Service, StreamPool, Transmit};
use bramble_hal::Instant;

/// The pool's address in a script.
pub const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The pool's IPv4 address in a script.
pub const SERVER_IP: [u8; 4] = [10, 0, 0, 1];
/// The pool's IPv6 address in a script.
pub const SERVER_IP6: wire::Address = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const CLIENT_IP: [u8; 4] = [10, 0, 0, 2];
const CLIENT_IP6: wire::Address = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// Client ports a script uses (each a connection the script may open): the even ones over
/// IPv4, the odd ones over IPv6.
const CLIENTS: usize = 8;

/// What the script's client knows of one connection.
#[derive(Clone, Copy, Default)]
struct Client {
    /// A SYN-ACK arrived: its sequence number + 1 is what we acknowledge from.
    server_next: Option<u32>,
    /// Our next sequence number.
    our_next: u32,
}

/// Collects what the pool sends and lets the script learn from it.
struct Capture<'c> {
    clients: &'c mut [Client; CLIENTS],
    busy: bool,
    sent: usize,
}

impl Transmit for Capture<'_> {
    fn can_transmit(&mut self) -> bool {
        !self.busy
    }

    fn transmit<F: FnOnce(&mut [u8])>(&mut self, len: usize, fill: F) -> bool {
        assert!(len <= wire::MAX_FRAME, "a frame of {len} bytes");
        let mut frame = [0u8; wire::MAX_FRAME];
        fill(&mut frame[..len]);
        self.sent += 1;
        // Every frame the pool sends must parse as ours (checksums and all).
        let ours = [wire::v4_mapped(CLIENT_IP), CLIENT_IP6];
        let segment = wire::parse(&frame[..len], CLIENT_MAC, &ours)
            .expect("the pool sent a frame that does not parse");
        let port = usize::from(segment.dst_port.wrapping_sub(40_000));
        let family = if port.is_multiple_of(2) {
            wire::v4_mapped(CLIENT_IP)
        } else {
            CLIENT_IP6
        };
        assert_eq!(segment.dst_ip, family, "an answer to the wrong address");
        assert!(
            segment.payload.len() <= usize::from(wire::max_mss(&segment.dst_ip)),
            "a segment of {} bytes to {:?}",
            segment.payload.len(),
            segment.dst_ip
        );
        if let Some(client) = self.clients.get_mut(port) {
            if segment.has(flags::SYN | flags::ACK) {
                client.server_next = Some(segment.seq.wrapping_add(1));
            } else if let Some(next) = client.server_next.as_mut()
                && segment.seq == *next
            {
                *next = next.wrapping_add(segment.seq_len());
            }
        }
        true
    }
}

fn frame(
    port: u16,
    client: usize,
    seq: u32,
    ack: u32,
    seg_flags: u8,
    window: u16,
    payload: &[u8],
) -> ([u8; wire::MAX_FRAME], usize) {
    let out = Outgoing {
        dst_mac: SERVER_MAC,
        src_mac: CLIENT_MAC,
        src_ip: if client.is_multiple_of(2) {
            wire::v4_mapped(CLIENT_IP)
        } else {
            CLIENT_IP6
        },
        dst_ip: if client.is_multiple_of(2) {
            wire::v4_mapped(SERVER_IP)
        } else {
            SERVER_IP6
        },
        src_port: 40_000 + client as u16,
        dst_port: port,
        seq,
        ack,
        flags: seg_flags,
        window,
        mss: (seg_flags & flags::SYN != 0).then_some(1460),
        ip_id: 7,
    };
    let header = out.headers_len();
    let len = (header + payload.len()).min(wire::MAX_FRAME);
    let mut bytes = [0u8; wire::MAX_FRAME];
    let payload_len = len - header;
    let payload_sum = wire::copy_and_sum(&mut bytes[header..len], &payload[..payload_len]);
    out.write(&mut bytes[..len], payload_sum);
    (bytes, len)
}

/// Request fragments a script can splice in, so that inputs reach answers quickly.
const FRAGMENTS: [&[u8]; 6] = [
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    b"GET / HTTP/1.1\r\n",
    b"\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd",
];

/// Runs `script` against `pool` (not yet given an address), with HTTP request fragments.
/// Panics if an invariant breaks: a frame the pool sends that does not parse, more
/// connections or sessions in use than it has, or a poll that sleeps while it has something
/// due.
pub fn run_script<S: Service>(pool: &mut StreamPool<'_, S>, script: &[u8]) {
    run_script_with(pool, script, &FRAGMENTS);
}

/// [`run_script`] with `fragments` (the service's protocol: a TLS ClientHello, say) for the
/// script to splice into its segments.
pub fn run_script_with<S: Service, const N: usize>(
    pool: &mut StreamPool<'_, S, N>,
    script: &[u8],
    fragments: &[&[u8]],
) {
    let port = pool.port();
    let mut now = Instant::from_micros(1_000_000);
    pool.set_address(SERVER_MAC, Some(SERVER_IP), now);
    pool.set_ipv6_addresses(&[SERVER_IP6], now);
    let mut clients = [Client::default(); CLIENTS];
    let mut busy = false;
    let mut i = 0;
    while i + 2 < script.len() {
        let (op, a, b) = (script[i], script[i + 1], script[i + 2]);
        i += 3;
        let client = usize::from(a) % CLIENTS;
        match op % 6 {
            0 => {
                // Raw bytes as a frame.
                let len = usize::from(b).min(script.len() - i);
                pool.receive(&script[i..i + len], now);
                i += len;
            }
            1 => {
                // A SYN (a new connection, or a repeated one).
                clients[client].our_next = u32::from_le_bytes([a, b, 3, 9]);
                let (bytes, len) = frame(
                    port,
                    client,
                    clients[client].our_next,
                    0,
                    flags::SYN,
                    65_535,
                    &[],
                );
                clients[client].our_next = clients[client].our_next.wrapping_add(1);
                pool.receive(&bytes[..len], now);
            }
            2 | 3 => {
                // A segment of the connection: ACK of what arrived, flags and payload from
                // the script, sequence number shifted by a little now and then.
                let Some(server_next) = clients[client].server_next else {
                    continue;
                };
                let payload_len = usize::from(b >> 2).min(script.len() - i);
                let payload: &[u8] = if b & 2 != 0 && !fragments.is_empty() {
                    fragments[usize::from(b) % fragments.len()]
                } else {
                    &script[i..i + payload_len]
                };
                if b & 2 == 0 || fragments.is_empty() {
                    i += payload_len;
                }
                let seg_flags = if op % 6 == 2 {
                    flags::ACK
                } else {
                    (a & (flags::FIN | flags::RST | flags::SYN | flags::PSH)) | flags::ACK
                };
                let shift = if a & 0x80 != 0 {
                    u32::from(a & 0x0f)
                } else {
                    0
                };
                let seq = clients[client].our_next.wrapping_sub(shift);
                let window = if b & 1 == 0 { 65_535 } else { u16::from(a) };
                let (bytes, len) =
                    frame(port, client, seq, server_next, seg_flags, window, payload);
                pool.receive(&bytes[..len], now);
                if shift == 0 {
                    clients[client].our_next = clients[client]
                        .our_next
                        .wrapping_add(payload.len() as u32)
                        .wrapping_add(u32::from(seg_flags & flags::FIN != 0));
                }
            }
            4 => now = now.add_micros(u64::from(a) * 1000 * u64::from(b % 64 + 1)),
            _ => busy = a & 1 == 1,
        }
        let mut capture = Capture {
            clients: &mut clients,
            busy,
            sent: 0,
        };
        let next = pool.poll(now, &mut capture);
        let counters = pool.counters();
        assert!(counters.open as usize <= pool.capacity(), "{counters}");
        assert!(counters.leased as usize <= pool.sessions(), "{counters}");
        if let Some(next) = next
            && next < now
        {
            panic!("the pool asked to be woken in the past");
        }
    }
    // Time passes until every deadline has run: the pool ends up empty.
    for _ in 0..200 {
        let mut capture = Capture {
            clients: &mut clients,
            busy: false,
            sent: 0,
        };
        let Some(next) = pool.poll(now, &mut capture) else {
            break;
        };
        now = next.max(now.add_micros(1000));
    }
    assert_eq!(
        pool.open(),
        0,
        "connections left after every deadline: {} (by class {:?})",
        pool.counters(),
        pool.class_counts()
    );
}
