//! A small mDNS responder (RFC 6762) for one name, `<hostname>.local`, and one IPv4 address.
//!
//! It answers A (and ANY) questions for its name, probes for the name before using it
//! (three probes 250 ms apart, §8.1), announces the address twice a second apart (§8.3),
//! and on a conflict (another host answering for the name with a different address, during
//! probing or after) picks the next name, `<hostname>-2`, `-3`, ..., and probes again (§9).
//! Simultaneous probes are tie-broken (§8.2) on the one A record: the numerically later
//! address keeps the name. Kept simple on purpose: no known-answer suppression, no
//! duplicate-answer suppression, no IPv6. Legacy unicast queries (source port not 5353, §6.7) get a unicast
//! reply with the query's ID, the question echoed and a 10 s TTL.
//!
//! This module is socket-free: it reads datagrams and writes datagrams into caller buffers,
//! so it is tested with byte fixtures. The appliance wires it to a UDP socket on port 5353
//! joined to 224.0.0.251.

use bramble_hal::Instant;
use heapless::String;

/// The mDNS UDP port.
pub const MDNS_PORT: u16 = 5353;
/// The mDNS IPv4 multicast group.
pub const MDNS_GROUP: [u8; 4] = [224, 0, 0, 251];
/// Longest DNS label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;
/// TTL of the A record in multicast answers, seconds (RFC 6762 §10: 120 for host records).
pub const RECORD_TTL: u32 = 120;
/// TTL in legacy unicast answers (RFC 6762 §6.7: no more than 10 s).
pub const LEGACY_TTL: u32 = 10;

const TYPE_A: u16 = 1;
const TYPE_ANY: u16 = 255;
const CLASS_IN: u16 = 1;
const CLASS_ANY: u16 = 255;
const CACHE_FLUSH: u16 = 0x8000;
const UNICAST_RESPONSE: u16 = 0x8000;
const FLAG_RESPONSE: u16 = 0x8000;
const FLAG_AUTHORITATIVE: u16 = 0x0400;
const HEADER_LEN: usize = 12;
/// Most compression pointers followed in one name before it is judged a loop.
const MAX_POINTER_HOPS: usize = 16;

const PROBE_INTERVAL_US: u64 = 250_000;
const PROBE_COUNT: u8 = 3;
const ANNOUNCE_INTERVAL_US: u64 = 1_000_000;
const ANNOUNCE_COUNT: u8 = 2;
/// Conflicts handled within this window before the responder backs off (RFC 6762 §8.1:
/// after 15 conflicts in 10 s, wait 5 s before probing again).
const CONFLICT_BACKOFF_US: u64 = 5_000_000;

/// Why a name could not be used, or a datagram could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MdnsError {
    /// The hostname is empty, longer than 63 bytes (with its `-N` suffix), or holds a byte
    /// other than a letter, a digit or `-`.
    InvalidHostname,
    /// A datagram ended early or holds a malformed name (bad label, pointer loop).
    Malformed,
}

/// Where a datagram produced by the responder goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// To 224.0.0.251:5353.
    Multicast,
    /// Back to the querier's address and port (legacy unicast).
    Unicast([u8; 4], u16),
}

/// What the responder is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponderState {
    /// No address yet: silent.
    Idle,
    /// Probing for the name: `sent` probes so far, next step at `next`.
    Probing {
        /// Probes sent so far.
        sent: u8,
        /// When the next probe goes out (or probing ends).
        next: Instant,
    },
    /// Announcing the name: `sent` announcements so far, next at `next`.
    Announcing {
        /// Announcements sent so far.
        sent: u8,
        /// When the next announcement goes out.
        next: Instant,
    },
    /// The name is ours and answered.
    Ready,
}

/// The responder for one host name.
#[derive(Debug)]
pub struct MdnsResponder {
    base: String<MAX_LABEL_LEN>,
    name: String<MAX_LABEL_LEN>,
    /// Number appended after conflicts (1 = no suffix).
    attempt: u32,
    address: Option<[u8; 4]>,
    state: ResponderState,
    /// First-probe delay (RFC 6762 §8.1: a random 0-250 ms), fixed per device.
    jitter_us: u64,
    conflicts: u32,
}

fn valid_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= MAX_LABEL_LEN
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl MdnsResponder {
    /// A responder for `<hostname>.local`. `seed` (for example the low MAC bytes) spreads the
    /// first probe over 0-250 ms so that devices powered on together do not probe in step.
    pub fn new(hostname: &str, seed: u32) -> Result<Self, MdnsError> {
        if !valid_label(hostname) {
            return Err(MdnsError::InvalidHostname);
        }
        let mut base = String::new();
        base.push_str(hostname)
            .map_err(|_| MdnsError::InvalidHostname)?;
        Ok(Self {
            name: base.clone(),
            base,
            attempt: 1,
            address: None,
            state: ResponderState::Idle,
            jitter_us: u64::from(seed) % PROBE_INTERVAL_US,
            conflicts: 0,
        })
    }

    /// The label being claimed or owned now (the hostname, or it with a `-N` suffix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Current state.
    pub fn state(&self) -> ResponderState {
        self.state
    }

    /// Sets the address to answer with (`None` when the interface has none) and starts
    /// probing afresh when it changed.
    pub fn set_address(&mut self, address: Option<[u8; 4]>, now: Instant) {
        if self.address == address {
            return;
        }
        self.address = address;
        self.state = match address {
            None => ResponderState::Idle,
            Some(_) => ResponderState::Probing {
                sent: 0,
                next: now.add_micros(self.jitter_us),
            },
        };
    }

    /// When [`MdnsResponder::poll`] next has something to send.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            ResponderState::Probing { next, .. } | ResponderState::Announcing { next, .. } => {
                Some(next)
            }
            ResponderState::Idle | ResponderState::Ready => None,
        }
    }

    /// Advances probing and announcing; returns the length of a datagram written into `out`
    /// for the multicast group, if one is due. `out` should hold at least 512 bytes.
    pub fn poll(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        let address = self.address?;
        match self.state {
            ResponderState::Probing { sent, next } if now >= next => {
                if sent < PROBE_COUNT {
                    self.state = ResponderState::Probing {
                        sent: sent + 1,
                        next: now.add_micros(PROBE_INTERVAL_US),
                    };
                    // The first probe asks for a unicast reply (§8.1), later ones do not.
                    write_probe(&self.name, address, sent == 0, out)
                } else {
                    log::info!("mdns: {}.local is ours", self.name);
                    self.state = ResponderState::Announcing { sent: 0, next: now };
                    self.poll(now, out)
                }
            }
            ResponderState::Announcing { sent, next } if now >= next => {
                self.state = if sent + 1 >= ANNOUNCE_COUNT {
                    ResponderState::Ready
                } else {
                    ResponderState::Announcing {
                        sent: sent + 1,
                        next: now.add_micros(ANNOUNCE_INTERVAL_US),
                    }
                };
                write_answer(&self.name, address, None, out)
            }
            _ => None,
        }
    }

    /// Handles one received datagram from `source` (address, port). Returns the length and
    /// destination of a reply written into `out`, if one is owed. Malformed datagrams are
    /// ignored (returned as an error for the caller to count).
    pub fn handle(
        &mut self,
        datagram: &[u8],
        source: ([u8; 4], u16),
        now: Instant,
        out: &mut [u8],
    ) -> Result<Option<(usize, Destination)>, MdnsError> {
        let Some(address) = self.address else {
            return Ok(None);
        };
        let message = Message::parse(datagram)?;
        let labels = [self.name.as_bytes(), b"local".as_slice()];
        if message.flags & FLAG_RESPONSE != 0 {
            // A response: does someone else claim our name with another address?
            let mut offset = message.records_start;
            for _ in 0..message.record_count {
                let (record, next) = read_record(datagram, offset)?;
                offset = next;
                if record.rtype == TYPE_A
                    && name_matches(datagram, record.name_offset, &labels)?
                    && record.data != address
                {
                    self.on_conflict(now);
                    return Ok(None);
                }
            }
            return Ok(None);
        }
        if let ResponderState::Probing { .. } = self.state {
            // Simultaneous probe tie-break (§8.2), for our one A record: another host
            // probing for the same name proposes its address in the authority section; the
            // lexicographically later address wins, and the loser picks another name.
            let mut offset = message.records_start;
            for _ in 0..message.record_count {
                let (record, next) = read_record(datagram, offset)?;
                offset = next;
                if record.rtype == TYPE_A
                    && name_matches(datagram, record.name_offset, &labels)?
                    && record.data > address.as_slice()
                {
                    self.on_conflict(now);
                    return Ok(None);
                }
            }
            // Not ours yet: nothing to answer with.
            return Ok(None);
        }
        if self.state == ResponderState::Idle {
            return Ok(None);
        }
        let mut offset = HEADER_LEN;
        let mut asked = None;
        for _ in 0..message.questions {
            let name_offset = offset;
            offset = skip_name(datagram, offset)?;
            let qtype = read_u16(datagram, offset)?;
            let qclass = read_u16(datagram, offset + 2)? & !UNICAST_RESPONSE;
            offset += 4;
            if (qtype == TYPE_A || qtype == TYPE_ANY)
                && (qclass == CLASS_IN || qclass == CLASS_ANY)
                && name_matches(datagram, name_offset, &labels)?
            {
                asked = Some(name_offset);
                break;
            }
        }
        if asked.is_none() {
            return Ok(None);
        }
        let (ip, port) = source;
        if port != MDNS_PORT {
            // Legacy unicast resolver (§6.7): same ID, question echoed, short TTL.
            let len = write_answer(&self.name, address, Some(message.id), out);
            Ok(len.map(|len| (len, Destination::Unicast(ip, port))))
        } else {
            Ok(write_answer(&self.name, address, None, out)
                .map(|len| (len, Destination::Multicast)))
        }
    }

    fn on_conflict(&mut self, now: Instant) {
        self.conflicts += 1;
        self.attempt += 1;
        let mut name: String<MAX_LABEL_LEN> = String::new();
        let mut suffix: String<12> = String::new();
        // Cannot fail: "-" and a u32 fit in 12 bytes.
        let _ = core::fmt::write(&mut suffix, format_args!("-{}", self.attempt));
        let keep = self.base.len().min(MAX_LABEL_LEN - suffix.len());
        // The base is ASCII (checked in `new`), so any byte index is a char boundary.
        let _ = name.push_str(&self.base[..keep]);
        let _ = name.push_str(&suffix);
        log::warn!(
            "mdns: {}.local is taken by another host; trying {}.local",
            self.name,
            name
        );
        self.name = name;
        let delay = if self.conflicts >= 15 {
            CONFLICT_BACKOFF_US
        } else {
            self.jitter_us
        };
        self.state = ResponderState::Probing {
            sent: 0,
            next: now.add_micros(delay),
        };
    }
}

/// The parts of a DNS message header the responder needs.
struct Message {
    id: u16,
    flags: u16,
    questions: u16,
    /// Answer, authority and additional records together.
    record_count: u32,
    /// Offset of the first record after the questions.
    records_start: usize,
}

impl Message {
    fn parse(data: &[u8]) -> Result<Self, MdnsError> {
        if data.len() < HEADER_LEN {
            return Err(MdnsError::Malformed);
        }
        let questions = read_u16(data, 4)?;
        let mut offset = HEADER_LEN;
        for _ in 0..questions {
            offset = skip_name(data, offset)? + 4;
            if offset > data.len() {
                return Err(MdnsError::Malformed);
            }
        }
        Ok(Self {
            id: read_u16(data, 0)?,
            flags: read_u16(data, 2)?,
            questions,
            record_count: u32::from(read_u16(data, 6)?)
                + u32::from(read_u16(data, 8)?)
                + u32::from(read_u16(data, 10)?),
            records_start: offset,
        })
    }
}

/// One resource record, as much as the responder reads of it.
struct Record<'a> {
    name_offset: usize,
    rtype: u16,
    data: &'a [u8],
}

fn read_record(data: &[u8], offset: usize) -> Result<(Record<'_>, usize), MdnsError> {
    let name_offset = offset;
    let offset = skip_name(data, offset)?;
    let rtype = read_u16(data, offset)?;
    let len = usize::from(read_u16(data, offset + 8)?);
    let start = offset + 10;
    let rdata = data.get(start..start + len).ok_or(MdnsError::Malformed)?;
    Ok((
        Record {
            name_offset,
            rtype,
            data: rdata,
        },
        start + len,
    ))
}

fn read_u16(data: &[u8], offset: usize) -> Result<u16, MdnsError> {
    match data.get(offset..offset + 2) {
        Some(b) => Ok(u16::from_be_bytes([b[0], b[1]])),
        None => Err(MdnsError::Malformed),
    }
}

/// Returns the offset just past the name at `offset` (past its first pointer, if any).
fn skip_name(data: &[u8], mut offset: usize) -> Result<usize, MdnsError> {
    loop {
        let len = *data.get(offset).ok_or(MdnsError::Malformed)?;
        match len {
            0 => return Ok(offset + 1),
            l if l & 0xc0 == 0xc0 => {
                data.get(offset + 1).ok_or(MdnsError::Malformed)?;
                return Ok(offset + 2);
            }
            l if l & 0xc0 != 0 => return Err(MdnsError::Malformed),
            l => offset += 1 + usize::from(l),
        }
    }
}

/// Whether the (possibly compressed) name at `offset` is exactly `labels`, ignoring ASCII
/// case (RFC 6762 §16).
fn name_matches(data: &[u8], mut offset: usize, labels: &[&[u8]]) -> Result<bool, MdnsError> {
    let mut index = 0;
    let mut hops = 0;
    let mut matches = true;
    loop {
        let len = *data.get(offset).ok_or(MdnsError::Malformed)?;
        if len & 0xc0 == 0xc0 {
            hops += 1;
            if hops > MAX_POINTER_HOPS {
                return Err(MdnsError::Malformed);
            }
            let low = *data.get(offset + 1).ok_or(MdnsError::Malformed)?;
            offset = (usize::from(len & 0x3f) << 8) | usize::from(low);
            continue;
        }
        if len & 0xc0 != 0 {
            return Err(MdnsError::Malformed);
        }
        if len == 0 {
            return Ok(matches && index == labels.len());
        }
        let label = data
            .get(offset + 1..offset + 1 + usize::from(len))
            .ok_or(MdnsError::Malformed)?;
        matches &= labels
            .get(index)
            .is_some_and(|want| want.eq_ignore_ascii_case(label));
        index += 1;
        offset += 1 + usize::from(len);
    }
}

/// Appends bytes to a buffer, failing once it is full.
struct Writer<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.len + bytes.len();
        self.out.get_mut(self.len..end)?.copy_from_slice(bytes);
        self.len = end;
        Some(())
    }

    fn u16(&mut self, value: u16) -> Option<()> {
        self.bytes(&value.to_be_bytes())
    }

    fn u32(&mut self, value: u32) -> Option<()> {
        self.bytes(&value.to_be_bytes())
    }

    fn name(&mut self, label: &str) -> Option<()> {
        // A label is at most 63 bytes (checked when the name is made), so it fits a u8.
        self.bytes(&[label.len() as u8])?;
        self.bytes(label.as_bytes())?;
        self.bytes(b"\x05local\x00")
    }
}

/// Writes a response carrying our A record. With `legacy_id`, it is a legacy unicast reply:
/// that ID, the question echoed, no cache-flush bit, a short TTL.
fn write_answer(
    name: &str,
    address: [u8; 4],
    legacy_id: Option<u16>,
    out: &mut [u8],
) -> Option<usize> {
    let mut w = Writer { out, len: 0 };
    w.u16(legacy_id.unwrap_or(0))?;
    w.u16(FLAG_RESPONSE | FLAG_AUTHORITATIVE)?;
    w.u16(u16::from(legacy_id.is_some()))?;
    w.u16(1)?;
    w.u16(0)?;
    w.u16(0)?;
    let (class, ttl) = if legacy_id.is_some() {
        w.name(name)?;
        w.u16(TYPE_A)?;
        w.u16(CLASS_IN)?;
        // Pointer to the question's name at offset 12.
        w.u16(0xc000 | HEADER_LEN as u16)?;
        (CLASS_IN, LEGACY_TTL)
    } else {
        w.name(name)?;
        (CLASS_IN | CACHE_FLUSH, RECORD_TTL)
    };
    w.u16(TYPE_A)?;
    w.u16(class)?;
    w.u32(ttl)?;
    w.u16(4)?;
    w.bytes(&address)?;
    Some(w.len)
}

/// Writes a probe (RFC 6762 §8.1): a question of type ANY for the name, and our proposed A
/// record in the authority section.
fn write_probe(name: &str, address: [u8; 4], unicast: bool, out: &mut [u8]) -> Option<usize> {
    let mut w = Writer { out, len: 0 };
    w.u16(0)?;
    w.u16(0)?;
    w.u16(1)?;
    w.u16(0)?;
    w.u16(1)?;
    w.u16(0)?;
    w.name(name)?;
    w.u16(TYPE_ANY)?;
    w.u16(CLASS_IN | if unicast { UNICAST_RESPONSE } else { 0 })?;
    w.u16(0xc000 | HEADER_LEN as u16)?;
    w.u16(TYPE_A)?;
    w.u16(CLASS_IN)?;
    w.u32(RECORD_TTL)?;
    w.u16(4)?;
    w.bytes(&address)?;
    Some(w.len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    const ADDR: [u8; 4] = [192, 168, 77, 2];
    const LAPTOP: ([u8; 4], u16) = ([192, 168, 77, 1], MDNS_PORT);

    /// A query as `avahi-resolve -4 -n bramble.local` sends it: ID 0, one question, QM.
    fn query(name: &[&str], qtype: u16, id: u16) -> Vec<u8> {
        let mut q = Vec::new();
        q.extend_from_slice(&id.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        q
    }

    /// A response from another host claiming `name` with `address`, compressed name.
    fn foreign_answer(name: &str, address: [u8; 4]) -> Vec<u8> {
        let mut r = std::vec![0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        r.push(name.len() as u8);
        r.extend_from_slice(name.as_bytes());
        r.extend_from_slice(b"\x05local\x00");
        r.extend_from_slice(&[0, 1, 0x80, 1, 0, 0, 0, 120, 0, 4]);
        r.extend_from_slice(&address);
        r
    }

    fn ready_responder() -> (MdnsResponder, Instant) {
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        let mut now = Instant::from_micros(1_000_000);
        r.set_address(Some(ADDR), now);
        let mut out = [0u8; 512];
        for _ in 0..20 {
            r.poll(now, &mut out);
            if r.state() == ResponderState::Ready {
                break;
            }
            now = r.next_deadline().unwrap_or(now);
        }
        assert_eq!(r.state(), ResponderState::Ready);
        (r, now)
    }

    #[test]
    fn rejects_bad_hostnames() {
        assert_eq!(
            MdnsResponder::new("", 0).unwrap_err(),
            MdnsError::InvalidHostname
        );
        assert_eq!(
            MdnsResponder::new("a.b", 0).unwrap_err(),
            MdnsError::InvalidHostname
        );
        let long = "x".repeat(64);
        assert_eq!(
            MdnsResponder::new(&long, 0).unwrap_err(),
            MdnsError::InvalidHostname
        );
        assert!(MdnsResponder::new("my-pi-2", 0).is_ok());
    }

    #[test]
    fn probes_three_times_then_announces_twice() {
        let mut r = MdnsResponder::new("bramble", 100_000).unwrap();
        let mut out = [0u8; 512];
        let start = Instant::from_micros(5_000_000);
        assert_eq!(r.poll(start, &mut out), None, "silent without an address");
        r.set_address(Some(ADDR), start);
        assert_eq!(r.next_deadline(), Some(start.add_micros(100_000)));
        assert_eq!(r.poll(start, &mut out), None, "waits for its jitter");

        let mut now = start.add_micros(100_000);
        let mut probes = Vec::new();
        for _ in 0..3 {
            let len = r.poll(now, &mut out).expect("probe due");
            probes.push(out[..len].to_vec());
            now = r.next_deadline().unwrap();
        }
        // Probe: a question for bramble.local type ANY, our A record in authority.
        let p = &probes[0];
        assert_eq!(&p[..12], &[0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0]);
        assert_eq!(&p[12..27], b"\x07bramble\x05local\x00");
        assert_eq!(
            &p[27..31],
            &[0, 255, 0x80, 1],
            "type ANY, QU bit on the first probe"
        );
        assert_eq!(&p[31..33], &[0xc0, 12]);
        assert_eq!(&p[33..43], &[0, 1, 0, 1, 0, 0, 0, 120, 0, 4]);
        assert_eq!(&p[43..], &ADDR);
        assert_eq!(
            &probes[1][27..31],
            &[0, 255, 0, 1],
            "later probes ask for multicast"
        );
        assert_eq!(now, start.add_micros(100_000 + 3 * 250_000));

        // After the third probe's wait, the first announcement; a second one 1 s later.
        let len = r.poll(now, &mut out).expect("first announcement");
        let a = out[..len].to_vec();
        assert_eq!(&a[..12], &[0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(&a[12..27], b"\x07bramble\x05local\x00");
        assert_eq!(&a[27..37], &[0, 1, 0x80, 1, 0, 0, 0, 120, 0, 4]);
        assert_eq!(&a[37..], &ADDR);
        let next = r.next_deadline().unwrap();
        assert_eq!(next, now.add_micros(1_000_000));
        assert_eq!(r.poll(now, &mut out), None);
        assert!(r.poll(next, &mut out).is_some());
        assert_eq!(r.state(), ResponderState::Ready);
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn answers_a_and_any_queries_for_its_name_any_case() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        for (name, qtype) in [
            (["bramble", "local"], TYPE_A),
            (["BRAMBLE", "Local"], TYPE_A),
            (["bramble", "local"], TYPE_ANY),
        ] {
            let (len, dest) = r
                .handle(&query(&name, qtype, 0), LAPTOP, now, &mut out)
                .unwrap()
                .expect("answered");
            assert_eq!(dest, Destination::Multicast);
            assert_eq!(&out[2..8], &[0x84, 0, 0, 0, 0, 1]);
            assert_eq!(&out[len - 4..len], &ADDR);
        }
    }

    #[test]
    fn ignores_other_names_types_and_responses() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        for q in [
            query(&["other", "local"], TYPE_A, 0),
            query(&["bramble", "local"], 28, 0), // AAAA
            query(&["bramble", "local", "x"], TYPE_A, 0),
            query(&["bramble"], TYPE_A, 0),
            foreign_answer("bramble", ADDR), // our own announcement echoed back
        ] {
            assert_eq!(r.handle(&q, LAPTOP, now, &mut out), Ok(None));
        }
        assert_eq!(r.name(), "bramble");
    }

    #[test]
    fn follows_compression_pointers_in_questions() {
        let (mut r, now) = ready_responder();
        // Two questions: "local" then "bramble" + pointer to "local" at offset 12.
        let mut q = std::vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0];
        q.extend_from_slice(b"\x05local\x00\x00\x01\x00\x01");
        q.extend_from_slice(b"\x07bramble\xc0\x0c\x00\x01\x00\x01");
        let mut out = [0u8; 512];
        assert!(r.handle(&q, LAPTOP, now, &mut out).unwrap().is_some());
    }

    #[test]
    fn legacy_unicast_query_gets_unicast_reply_with_its_id() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        let q = query(&["bramble", "local"], TYPE_A, 0xbeef);
        let (len, dest) = r
            .handle(&q, ([192, 168, 77, 1], 40000), now, &mut out)
            .unwrap()
            .unwrap();
        assert_eq!(dest, Destination::Unicast([192, 168, 77, 1], 40000));
        let a = &out[..len];
        assert_eq!(&a[..12], &[0xbe, 0xef, 0x84, 0, 0, 1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(&a[12..31], &q[12..31], "question echoed");
        assert_eq!(&a[31..43], &[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 10, 0, 4]);
        assert_eq!(&a[43..], &ADDR);
    }

    #[test]
    fn conflict_while_probing_renames_and_probes_again() {
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        let now = Instant::from_micros(1_000);
        r.set_address(Some(ADDR), now);
        let mut out = [0u8; 512];
        assert!(r.poll(now, &mut out).is_some());
        let claim = foreign_answer("bramble", [192, 168, 77, 9]);
        assert_eq!(r.handle(&claim, LAPTOP, now, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble-2");
        assert_eq!(r.state(), ResponderState::Probing { sent: 0, next: now });
        let len = r.poll(now, &mut out).unwrap();
        assert_eq!(&out[12..23], b"\x09bramble-2\x05");
        assert!(len > 24);
        // A query for the old name is not ours any more once we are ready.
        let mut t = now;
        while r.state() != ResponderState::Ready {
            t = r.next_deadline().unwrap();
            r.poll(t, &mut out);
        }
        assert_eq!(
            r.handle(&query(&["bramble", "local"], 1, 0), LAPTOP, t, &mut out),
            Ok(None)
        );
        assert!(
            r.handle(&query(&["bramble-2", "local"], 1, 0), LAPTOP, t, &mut out)
                .unwrap()
                .is_some()
        );
    }

    /// A probe from another host for `name` proposing `address` (type ANY question, A record
    /// in the authority section with a compressed name).
    fn foreign_probe(name: &str, address: [u8; 4]) -> Vec<u8> {
        let mut p = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0];
        p.push(name.len() as u8);
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(b"\x05local\x00\x00\xff\x00\x01");
        p.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 120, 0, 4]);
        p.extend_from_slice(&address);
        p
    }

    #[test]
    fn simultaneous_probe_tie_break_by_address() {
        let mut out = [0u8; 512];
        let now = Instant::from_micros(0);
        // A lower address probing for our name loses to us: we keep probing for it.
        let mut r = MdnsResponder::new("bramble", 0).unwrap();
        r.set_address(Some(ADDR), now);
        r.poll(now, &mut out);
        let lower = foreign_probe("bramble", [192, 168, 77, 1]);
        assert_eq!(r.handle(&lower, LAPTOP, now, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble");
        // Our own probe echoed back is no conflict either.
        assert_eq!(
            r.handle(&foreign_probe("bramble", ADDR), LAPTOP, now, &mut out),
            Ok(None)
        );
        assert_eq!(r.name(), "bramble");
        // A higher address wins: we rename and probe again.
        let higher = foreign_probe("BRAMBLE", [192, 168, 77, 200]);
        assert_eq!(r.handle(&higher, LAPTOP, now, &mut out), Ok(None));
        assert_eq!(r.name(), "bramble-2");
        // Once the name is ours, another host's probe is answered (defended).
        let (mut r, t) = ready_responder();
        let reply = r.handle(
            &foreign_probe("bramble", [192, 168, 77, 200]),
            LAPTOP,
            t,
            &mut out,
        );
        assert!(matches!(reply, Ok(Some((_, Destination::Multicast)))));
        assert_eq!(r.name(), "bramble");
    }

    #[test]
    fn conflict_after_ready_reprobes_and_long_names_are_trimmed() {
        let long = "a".repeat(63);
        let mut r = MdnsResponder::new(&long, 0).unwrap();
        let now = Instant::from_micros(0);
        r.set_address(Some(ADDR), now);
        let mut out = [0u8; 512];
        let mut t = now;
        while r.state() != ResponderState::Ready {
            r.poll(t, &mut out);
            t = r.next_deadline().unwrap_or(t);
        }
        r.handle(&foreign_answer(&long, [10, 0, 0, 1]), LAPTOP, t, &mut out)
            .unwrap();
        assert_eq!(r.name().len(), 63);
        assert!(r.name().ends_with("a-2"));
        assert!(matches!(r.state(), ResponderState::Probing { sent: 0, .. }));
    }

    #[test]
    fn address_change_restarts_probing_and_none_silences() {
        let (mut r, now) = ready_responder();
        r.set_address(Some([10, 0, 0, 5]), now);
        assert!(matches!(r.state(), ResponderState::Probing { .. }));
        r.set_address(None, now);
        assert_eq!(r.state(), ResponderState::Idle);
        let mut out = [0u8; 512];
        assert_eq!(
            r.handle(&query(&["bramble", "local"], 1, 0), LAPTOP, now, &mut out),
            Ok(None)
        );
    }

    #[test]
    fn malformed_datagrams_are_errors_not_panics() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 512];
        let good = query(&["bramble", "local"], TYPE_A, 0);
        for cut in 0..good.len() - 4 {
            let result = r.handle(&good[..cut], LAPTOP, now, &mut out);
            assert_eq!(result, Err(MdnsError::Malformed), "cut at {cut}");
        }
        // A name that points at itself.
        let mut looped = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        assert_eq!(
            r.handle(&looped, LAPTOP, now, &mut out),
            Err(MdnsError::Malformed)
        );
        // Reserved label type bits.
        let mut reserved = std::vec![0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        reserved.extend_from_slice(&[0x40, 0, 0, 1, 0, 1]);
        assert_eq!(
            r.handle(&reserved, LAPTOP, now, &mut out),
            Err(MdnsError::Malformed)
        );
        // Pseudo-random garbage, bounded: never panics.
        let mut seed = 0x1234_5678u32;
        for _ in 0..20_000 {
            let mut d = good.clone();
            for _ in 0..3 {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let i = (seed >> 8) as usize % d.len();
                d[i] = (seed >> 24) as u8;
            }
            let _ = r.handle(&d, LAPTOP, now, &mut out);
        }
    }

    #[test]
    fn answer_does_not_overrun_a_small_buffer() {
        let (mut r, now) = ready_responder();
        let mut out = [0u8; 20];
        assert_eq!(
            r.handle(&query(&["bramble", "local"], 1, 0), LAPTOP, now, &mut out),
            Ok(None)
        );
    }
}
