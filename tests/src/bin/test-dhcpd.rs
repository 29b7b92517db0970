//! A one-address DHCP server for the QEMU fault tests: hands out short leases (seconds, which
//! dnsmasq refuses) and prints every message it sees, so a test can watch renewals.
//!
//! Run inside a test-made network namespace (`nsenter --net=... test-dhcpd ...`):
//!
//! ```text
//! test-dhcpd --server 192.168.77.1 --offer 192.168.77.50 --lease 16 \
//!     --prefix 24 --broadcast 192.168.77.255 [--lifetime 300] [--silent]
//! ```
//!
//! It answers DISCOVER with an OFFER of `--offer`, and REQUEST with an ACK when the address
//! asked for (option 50, or `ciaddr` when renewing) is `--offer`, a NAK otherwise. Replies
//! to a client that already has an address (`ciaddr` set) are unicast to it; the others go to
//! `--broadcast` (the link's broadcast address: the namespace has no default route, so the
//! limited broadcast 255.255.255.255 has nowhere to go). With `--silent` it answers nothing
//! (a server that is gone, but whose absence the test can watch). One line per event on
//! stdout:
//!
//! ```text
//! test-dhcpd: listening on 0.0.0.0:67
//! test-dhcpd: DISCOVER from 0.0.0.0:68 mac 52:54:00:12:34:56 ciaddr 0.0.0.0 requested - -> OFFER 192.168.77.50
//! test-dhcpd: REQUEST from 192.168.77.50:68 mac 52:54:00:12:34:56 ciaddr 192.168.77.50 requested - -> ACK 192.168.77.50 for 16 s
//! ```
//!
//! It exits when its standard input closes (the test that started it is gone) or after
//! `--lifetime` seconds, so it never outlives a killed test run for long.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

const SERVER_PORT: u16 = 67;
const CLIENT_PORT: u16 = 68;
/// RFC 2131 §3: the options field starts with this magic cookie.
const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
/// Offset of the options in a BOOTP message (RFC 2131 §2, figure 1), after the cookie.
const OPTIONS_OFFSET: usize = 240;
/// Shortest BOOTP message some clients accept (RFC 1542 §2.1).
const MIN_MESSAGE_LEN: usize = 300;

/// DHCP option codes (RFC 2132).
mod option {
    pub const PAD: u8 = 0;
    pub const SUBNET_MASK: u8 = 1;
    pub const REQUESTED_ADDRESS: u8 = 50;
    pub const LEASE_TIME: u8 = 51;
    pub const MESSAGE_TYPE: u8 = 53;
    pub const SERVER_IDENTIFIER: u8 = 54;
    pub const END: u8 = 255;
}

/// DHCP message types (RFC 2132 §9.6).
mod message {
    pub const DISCOVER: u8 = 1;
    pub const OFFER: u8 = 2;
    pub const REQUEST: u8 = 3;
    pub const ACK: u8 = 5;
    pub const NAK: u8 = 6;
}

/// What the server is told on its command line.
struct Settings {
    server: Ipv4Addr,
    offer: Ipv4Addr,
    lease_seconds: u32,
    prefix_len: u8,
    broadcast: Ipv4Addr,
    lifetime: Duration,
    silent: bool,
}

fn parse_args() -> Result<Settings, String> {
    let mut server = None;
    let mut offer = None;
    let mut lease_seconds = None;
    let mut prefix_len = 24;
    let mut broadcast = None;
    let mut lifetime = Duration::from_secs(300);
    let mut silent = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--silent" {
            silent = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |what: &str| format!("{flag} {value}: not {what}");
        match flag.as_str() {
            "--server" => server = Some(value.parse().map_err(|_| bad("an address"))?),
            "--offer" => offer = Some(value.parse().map_err(|_| bad("an address"))?),
            "--lease" => lease_seconds = Some(value.parse().map_err(|_| bad("seconds"))?),
            "--prefix" => prefix_len = value.parse().map_err(|_| bad("0-32"))?,
            "--broadcast" => broadcast = Some(value.parse().map_err(|_| bad("an address"))?),
            "--lifetime" => {
                lifetime = Duration::from_secs(value.parse().map_err(|_| bad("seconds"))?)
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if prefix_len > 32 {
        return Err("--prefix is over 32".into());
    }
    Ok(Settings {
        server: server.ok_or("--server is required")?,
        offer: offer.ok_or("--offer is required")?,
        lease_seconds: lease_seconds.ok_or("--lease is required")?,
        prefix_len,
        broadcast: broadcast.ok_or("--broadcast is required")?,
        lifetime,
        silent,
    })
}

/// The fields of a client message the server acts on.
struct ClientMessage<'a> {
    kind: u8,
    transaction: [u8; 4],
    flags: [u8; 2],
    client_address: Ipv4Addr,
    hardware: [u8; 16],
    requested: Option<Ipv4Addr>,
    server_identifier: Option<Ipv4Addr>,
    raw: &'a [u8],
}

impl<'a> ClientMessage<'a> {
    /// Reads a BOOTREQUEST with a DHCP message type; `None` for anything else.
    fn parse(raw: &'a [u8]) -> Option<Self> {
        if raw.len() < OPTIONS_OFFSET || raw[0] != 1 || raw[236..240] != MAGIC_COOKIE {
            return None;
        }
        let address = |at: usize| Ipv4Addr::new(raw[at], raw[at + 1], raw[at + 2], raw[at + 3]);
        let mut kind = None;
        let mut requested = None;
        let mut server_identifier = None;
        let mut at = OPTIONS_OFFSET;
        while at < raw.len() {
            let code = raw[at];
            if code == option::END {
                break;
            }
            if code == option::PAD {
                at += 1;
                continue;
            }
            let len = usize::from(*raw.get(at + 1)?);
            let data = raw.get(at + 2..at + 2 + len)?;
            match (code, len) {
                (option::MESSAGE_TYPE, 1) => kind = Some(data[0]),
                (option::REQUESTED_ADDRESS, 4) => {
                    requested = Some(Ipv4Addr::new(data[0], data[1], data[2], data[3]))
                }
                (option::SERVER_IDENTIFIER, 4) => {
                    server_identifier = Some(Ipv4Addr::new(data[0], data[1], data[2], data[3]))
                }
                _ => {}
            }
            at += 2 + len;
        }
        let mut hardware = [0; 16];
        hardware.copy_from_slice(&raw[28..44]);
        Some(Self {
            kind: kind?,
            transaction: raw[4..8].try_into().ok()?,
            flags: raw[10..12].try_into().ok()?,
            client_address: address(12),
            hardware,
            requested,
            server_identifier,
            raw,
        })
    }

    fn mac(&self) -> String {
        let length = usize::from(self.raw[2]).min(16);
        self.hardware[..length]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    }
}

/// Writes a BOOTREPLY of `kind` for `request`, offering `your_address`.
fn reply(
    settings: &Settings,
    request: &ClientMessage,
    kind: u8,
    your_address: Ipv4Addr,
) -> Vec<u8> {
    let mut out = vec![0u8; OPTIONS_OFFSET];
    out[0] = 2; // BOOTREPLY
    out[1] = 1; // Ethernet
    out[2] = request.raw[2];
    out[4..8].copy_from_slice(&request.transaction);
    out[10..12].copy_from_slice(&request.flags);
    out[12..16].copy_from_slice(&request.client_address.octets());
    out[16..20].copy_from_slice(&your_address.octets());
    out[20..24].copy_from_slice(&settings.server.octets());
    out[28..44].copy_from_slice(&request.hardware);
    out[236..240].copy_from_slice(&MAGIC_COOKIE);
    out.extend_from_slice(&[option::MESSAGE_TYPE, 1, kind]);
    out.extend_from_slice(&[option::SERVER_IDENTIFIER, 4]);
    out.extend_from_slice(&settings.server.octets());
    if kind != message::NAK {
        out.extend_from_slice(&[option::LEASE_TIME, 4]);
        out.extend_from_slice(&settings.lease_seconds.to_be_bytes());
        let mask = u32::MAX
            .checked_shl(32 - u32::from(settings.prefix_len))
            .unwrap_or(0);
        out.extend_from_slice(&[option::SUBNET_MASK, 4]);
        out.extend_from_slice(&mask.to_be_bytes());
    }
    out.push(option::END);
    if out.len() < MIN_MESSAGE_LEN {
        out.resize(MIN_MESSAGE_LEN, 0);
    }
    out
}

/// Ends the process when standard input closes: the test that started us is gone.
fn exit_when_stdin_closes() {
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        say("standard input closed; exiting");
        std::process::exit(0);
    });
}

fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "test-dhcpd: {text}");
    let _ = out.flush();
}

fn main() {
    let settings = match parse_args() {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("test-dhcpd: {message}");
            std::process::exit(2);
        }
    };
    let socket = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, SERVER_PORT))
        .unwrap_or_else(|error| {
            eprintln!("test-dhcpd: cannot bind port {SERVER_PORT}: {error}");
            std::process::exit(1);
        });
    socket.set_broadcast(true).expect("SO_BROADCAST");
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("socket read timeout");
    exit_when_stdin_closes();
    say(&format!("listening on 0.0.0.0:{SERVER_PORT}"));
    let started = Instant::now();
    let mut buffer = [0u8; 1500];
    while started.elapsed() < settings.lifetime {
        let (len, from) = match socket.recv_from(&mut buffer) {
            Ok(received) => received,
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(error) => {
                say(&format!("receive failed: {error}"));
                std::process::exit(1);
            }
        };
        let Some(request) = ClientMessage::parse(&buffer[..len]) else {
            say(&format!(
                "ignored {len} bytes from {from}: not a DHCP request"
            ));
            continue;
        };
        let asked = request.requested.or_else(|| {
            (!request.client_address.is_unspecified()).then_some(request.client_address)
        });
        let (name, answer) = match request.kind {
            message::DISCOVER => ("DISCOVER", Some((message::OFFER, settings.offer))),
            message::REQUEST => match request.server_identifier {
                Some(other) if other != settings.server => ("REQUEST", None),
                _ if asked == Some(settings.offer) => {
                    ("REQUEST", Some((message::ACK, settings.offer)))
                }
                _ => ("REQUEST", Some((message::NAK, Ipv4Addr::UNSPECIFIED))),
            },
            other => {
                say(&format!("ignored message type {other} from {from}"));
                continue;
            }
        };
        let requested = request
            .requested
            .map_or_else(|| "-".to_string(), |a| a.to_string());
        let what = format!(
            "{name} from {from} mac {} ciaddr {} requested {requested}",
            request.mac(),
            request.client_address
        );
        let Some((kind, address)) = answer else {
            say(&format!("{what} -> ignored (for another server)"));
            continue;
        };
        if settings.silent {
            say(&format!("{what} -> ignored (silent)"));
            continue;
        }
        let destination = if request.client_address.is_unspecified() || kind == message::NAK {
            settings.broadcast
        } else {
            request.client_address
        };
        let packet = reply(&settings, &request, kind, address);
        let outcome = match kind {
            message::OFFER => format!("OFFER {address}"),
            message::ACK => format!("ACK {address} for {} s", settings.lease_seconds),
            _ => "NAK".to_string(),
        };
        match socket.send_to(&packet, SocketAddrV4::new(destination, CLIENT_PORT)) {
            Ok(_) => say(&format!("{what} -> {outcome}")),
            Err(error) => say(&format!(
                "{what} -> {outcome} not sent to {destination}: {error}"
            )),
        }
    }
    say("lifetime over; exiting");
}
