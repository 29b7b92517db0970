//! DNS UPDATE (RFC 2136) messages signed with TSIG HMAC-SHA256 (RFC 8945), and the checked
//! reading of the server's answer: what the dynamic DNS sender (`bramble_jobs::ddns`)
//! and ACME's DNS-01 answers put on the wire. Pure code over byte slices: no socket, no
//! allocation (the kernel may run it without a heap).
//!
//! A message is built by [`build_update`]: the header (opcode UPDATE), the zone section (the
//! zone's name, type SOA), no prerequisites, then one or more [`Change`]s (each a delete of
//! the name's RRset of one type, an add, or both: a replace), and the TSIG record over all of
//! it. The MAC it returns is what [`check_reply`] needs: the server's answer is signed over
//! the request's MAC (RFC 8945 §5.3), so an answer forged by anyone without the key, or
//! answering another request, is refused.
//!
//! [`check_reply`] reads the answer with checked views: every length and count is checked
//! against the datagram before it is used, names are skipped label by label (compression
//! pointers end a name), and nothing past the datagram is read. The TSIG record must be the
//! last additional record, with the key's name and algorithm written out in full (RFC 8945
//! §4.2 forbids compressing them); its MAC is checked in constant time and its time against
//! ours within the fudge. A reply without TSIG, or with a TSIG error (BADSIG, BADKEY,
//! BADTIME: the server could not check ours), is never trusted to say the update was made.

use hmac::{Mac, SimpleHmac};
use sha2::Sha256;

/// Seconds the signer's and the checker's clocks may differ (RFC 8945 §10 recommends 300).
pub const TSIG_FUDGE: u16 = 300;
/// HMAC-SHA256's MAC length.
pub const MAC_LEN: usize = 32;
/// The longest name on the wire (RFC 1035 §3.1).
const MAX_NAME_WIRE: usize = 255;
/// The algorithm name of HMAC-SHA256 (RFC 8945 §6).
const HMAC_SHA256: &str = "hmac-sha256";

const TYPE_SOA: u16 = 6;
/// TSIG's record type.
const TYPE_TSIG: u16 = 250;
const CLASS_IN: u16 = 1;
const CLASS_NONE: u16 = 254;
const CLASS_ANY: u16 = 255;
/// The UPDATE opcode (RFC 2136 §1.3).
const OPCODE_UPDATE: u8 = 5;

/// A record's data: an IPv4 address, an IPv6 address, or one character-string of text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rdata<'a> {
    /// An A record.
    A([u8; 4]),
    /// An AAAA record.
    Aaaa([u8; 16]),
    /// A TXT record of one string (at most 255 bytes), as DNS-01 publishes.
    Txt(&'a str),
}

impl Rdata<'_> {
    /// Its record type.
    pub fn record_type(&self) -> u16 {
        match self {
            Rdata::A(_) => 1,
            Rdata::Aaaa(_) => 28,
            Rdata::Txt(_) => 16,
        }
    }
}

/// One change to make (RFC 2136 §2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change<'a> {
    /// Delete `name`'s records of `record_type` (all of them), then add `rdata` with `ttl`:
    /// the name then has exactly this record of the type.
    Replace {
        /// The owner name.
        name: &'a str,
        /// The record.
        rdata: Rdata<'a>,
        /// Its TTL, seconds.
        ttl: u32,
    },
    /// Add `rdata` to `name` (beside what it has).
    Add {
        /// The owner name.
        name: &'a str,
        /// The record.
        rdata: Rdata<'a>,
        /// Its TTL, seconds.
        ttl: u32,
    },
    /// Delete the record `rdata` of `name` (the others of its type stay).
    Delete {
        /// The owner name.
        name: &'a str,
        /// The record.
        rdata: Rdata<'a>,
    },
    /// Delete all of `name`'s records of `record_type`.
    DeleteType {
        /// The owner name.
        name: &'a str,
        /// The record type.
        record_type: u16,
    },
}

/// A TSIG key (HMAC-SHA256 only): its name and its secret.
#[derive(Clone, Copy)]
pub struct TsigKey<'a> {
    /// The key's name, as the server knows it.
    pub name: &'a str,
    /// The shared secret (the bytes the base64 in the server's configuration stands for).
    pub secret: &'a [u8],
}

impl core::fmt::Debug for TsigKey<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the secret: this may end up in a log line.
        write!(f, "TsigKey({})", self.name)
    }
}

/// Why a message could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// A name is not a DNS name (an empty or over-long label, or over 255 bytes on the wire).
    BadName,
    /// A TXT string is over 255 bytes.
    TextTooLong,
    /// The buffer is too small for the message.
    TooLong,
}

/// A signed request as built: its length in the buffer, and its MAC (for [`check_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signed {
    /// Bytes of the buffer the message takes.
    pub len: usize,
    /// The request's TSIG MAC.
    pub mac: [u8; MAC_LEN],
}

/// Writes into a byte buffer, refusing to go past its end.
struct Writer<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, bytes: &[u8]) -> Result<(), BuildError> {
        let end = self
            .len
            .checked_add(bytes.len())
            .ok_or(BuildError::TooLong)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(BuildError::TooLong)?
            .copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    fn u16(&mut self, value: u16) -> Result<(), BuildError> {
        self.bytes(&value.to_be_bytes())
    }

    fn u32(&mut self, value: u32) -> Result<(), BuildError> {
        self.bytes(&value.to_be_bytes())
    }

    fn name(&mut self, name: &str) -> Result<(), BuildError> {
        let mut wire = [0u8; MAX_NAME_WIRE];
        let len = name_wire(name, &mut wire)?;
        self.bytes(&wire[..len])
    }
}

/// `name` in wire form, lower-cased (the canonical form TSIG's MAC covers, RFC 8945 §4.3.3,
/// and harmless elsewhere: DNS names compare case-insensitively); a trailing dot is allowed.
fn name_wire(name: &str, out: &mut [u8; MAX_NAME_WIRE]) -> Result<usize, BuildError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let mut len = 0usize;
    if !name.is_empty() {
        for label in name.split('.') {
            let bytes = label.as_bytes();
            if bytes.is_empty() || bytes.len() > 63 {
                return Err(BuildError::BadName);
            }
            let end = len + 1 + bytes.len();
            // The root's zero byte must fit after it.
            if end >= MAX_NAME_WIRE {
                return Err(BuildError::BadName);
            }
            out[len] = bytes.len() as u8;
            for (slot, byte) in out[len + 1..end].iter_mut().zip(bytes) {
                *slot = byte.to_ascii_lowercase();
            }
            len = end;
        }
    }
    out[len] = 0;
    Ok(len + 1)
}

fn write_rdata(writer: &mut Writer<'_>, rdata: &Rdata<'_>) -> Result<(), BuildError> {
    match rdata {
        Rdata::A(address) => {
            writer.u16(4)?;
            writer.bytes(address)
        }
        Rdata::Aaaa(address) => {
            writer.u16(16)?;
            writer.bytes(address)
        }
        Rdata::Txt(text) => {
            let len = u8::try_from(text.len()).map_err(|_| BuildError::TextTooLong)?;
            writer.u16(u16::from(len) + 1)?;
            writer.bytes(&[len])?;
            writer.bytes(text.as_bytes())
        }
    }
}

/// Writes one RR of the update section: owner, type, class, TTL, then the data (none when
/// `rdata` is `None`).
fn write_rr(
    writer: &mut Writer<'_>,
    name: &str,
    record_type: u16,
    class: u16,
    ttl: u32,
    rdata: Option<&Rdata<'_>>,
) -> Result<(), BuildError> {
    writer.name(name)?;
    writer.u16(record_type)?;
    writer.u16(class)?;
    writer.u32(ttl)?;
    match rdata {
        Some(rdata) => write_rdata(writer, rdata),
        None => writer.u16(0),
    }
}

/// The TSIG variables after the key name and class (RFC 8945 §4.3.3), as the MAC covers them.
fn tsig_variables(
    mac: &mut SimpleHmac<Sha256>,
    key_name: &str,
    time_signed: u64,
    fudge: u16,
    error: u16,
    other: &[u8],
) -> Result<(), BuildError> {
    let mut wire = [0u8; MAX_NAME_WIRE];
    let len = name_wire(key_name, &mut wire)?;
    mac.update(&wire[..len]);
    mac.update(&CLASS_ANY.to_be_bytes());
    mac.update(&0u32.to_be_bytes());
    let len = name_wire(HMAC_SHA256, &mut wire)?;
    mac.update(&wire[..len]);
    mac.update(&time_signed.to_be_bytes()[2..]);
    mac.update(&fudge.to_be_bytes());
    mac.update(&error.to_be_bytes());
    // `other` comes from a checked reply or is empty: under 64 KiB.
    mac.update(&(other.len() as u16).to_be_bytes());
    mac.update(other);
    Ok(())
}

fn keyed(key: &TsigKey<'_>) -> SimpleHmac<Sha256> {
    // HMAC takes a key of any length (RFC 2104 §3): this cannot fail.
    <SimpleHmac<Sha256> as Mac>::new_from_slice(key.secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"))
}

/// Builds the UPDATE for `zone` making `changes`, with message id `id`, signed with `key`
/// at Unix time `now`, into `buf`.
pub fn build_update(
    buf: &mut [u8],
    id: u16,
    zone: &str,
    changes: &[Change<'_>],
    key: &TsigKey<'_>,
    now: u64,
) -> Result<Signed, BuildError> {
    let updates = changes.iter().try_fold(0u16, |count, change| {
        let n = if matches!(change, Change::Replace { .. }) {
            2
        } else {
            1
        };
        count.checked_add(n).ok_or(BuildError::TooLong)
    })?;
    let mut writer = Writer { buf, len: 0 };
    writer.u16(id)?;
    writer.u16(u16::from(OPCODE_UPDATE) << 11)?;
    writer.u16(1)?; // ZOCOUNT
    writer.u16(0)?; // PRCOUNT
    writer.u16(updates)?; // UPCOUNT
    writer.u16(0)?; // ADCOUNT, 1 once signed
    writer.name(zone)?;
    writer.u16(TYPE_SOA)?;
    writer.u16(CLASS_IN)?;
    for change in changes {
        match *change {
            Change::Replace { name, rdata, ttl } => {
                write_rr(&mut writer, name, rdata.record_type(), CLASS_ANY, 0, None)?;
                write_rr(
                    &mut writer,
                    name,
                    rdata.record_type(),
                    CLASS_IN,
                    ttl,
                    Some(&rdata),
                )?;
            }
            Change::Add { name, rdata, ttl } => {
                write_rr(
                    &mut writer,
                    name,
                    rdata.record_type(),
                    CLASS_IN,
                    ttl,
                    Some(&rdata),
                )?;
            }
            Change::Delete { name, rdata } => {
                write_rr(
                    &mut writer,
                    name,
                    rdata.record_type(),
                    CLASS_NONE,
                    0,
                    Some(&rdata),
                )?;
            }
            Change::DeleteType { name, record_type } => {
                write_rr(&mut writer, name, record_type, CLASS_ANY, 0, None)?;
            }
        }
    }
    // The MAC over the message so far and the TSIG variables (RFC 8945 §4.3).
    let mut mac = keyed(key);
    mac.update(&writer.buf[..writer.len]);
    tsig_variables(&mut mac, key.name, now, TSIG_FUDGE, 0, &[])?;
    let mac: [u8; MAC_LEN] = mac.finalize().into_bytes().into();
    // The TSIG record.
    writer.name(key.name)?;
    writer.u16(TYPE_TSIG)?;
    writer.u16(CLASS_ANY)?;
    writer.u32(0)?;
    let mut algorithm = [0u8; MAX_NAME_WIRE];
    let algorithm_len = name_wire(HMAC_SHA256, &mut algorithm)?;
    // Algorithm, time (6), fudge, MAC size, MAC, original id, error, other length.
    writer.u16((algorithm_len + 6 + 2 + 2 + MAC_LEN + 2 + 2 + 2) as u16)?;
    writer.bytes(&algorithm[..algorithm_len])?;
    writer.bytes(&now.to_be_bytes()[2..])?;
    writer.u16(TSIG_FUDGE)?;
    writer.u16(MAC_LEN as u16)?;
    writer.bytes(&mac)?;
    writer.u16(id)?;
    writer.u16(0)?;
    writer.u16(0)?;
    let len = writer.len;
    buf[10..12].copy_from_slice(&1u16.to_be_bytes());
    Ok(Signed { len, mac })
}

/// A response code (RFC 1035 §4.1.1, RFC 2136 §2.2), named where the update path meets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rcode(pub u16);

impl core::fmt::Display for Rcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let name = match self.0 {
            0 => "NOERROR",
            1 => "FORMERR",
            2 => "SERVFAIL",
            3 => "NXDOMAIN",
            4 => "NOTIMP",
            5 => "REFUSED",
            6 => "YXDOMAIN",
            7 => "YXRRSET",
            8 => "NXRRSET",
            9 => "NOTAUTH",
            10 => "NOTZONE",
            16 => "BADSIG",
            17 => "BADKEY",
            18 => "BADTIME",
            22 => "BADTRUNC",
            other => return write!(f, "RCODE {other}"),
        };
        f.write_str(name)
    }
}

/// Why an answer does not confirm the update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// Not an answer to this request (another id, not a response, not UPDATE): ignored,
    /// the request's answer may still come.
    NotOurs,
    /// The datagram is cut short or its counts and lengths do not add up.
    Malformed,
    /// The answer carries no TSIG: it cannot be trusted (RFC 8945 §5.3.1); its RCODE.
    Unsigned(Rcode),
    /// The server could not check our signature: its TSIG error (BADSIG, BADKEY, BADTIME),
    /// with the answer's RCODE (NOTAUTH). The key (name, secret) or the clock is wrong.
    Refused(Rcode, Rcode),
    /// The answer's TSIG is for another key or algorithm, or its MAC is wrong.
    BadSignature,
    /// The answer's signing time is outside the fudge of ours.
    BadTime,
    /// A signed answer with an error RCODE (REFUSED: the key may not update this name;
    /// NOTZONE: the name is not in the zone; SERVFAIL...).
    Failed(Rcode),
}

impl core::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReplyError::NotOurs => f.write_str("an answer to another request"),
            ReplyError::Malformed => f.write_str("a malformed answer"),
            ReplyError::Unsigned(rcode) => write!(f, "an unsigned answer ({rcode}), not trusted"),
            ReplyError::Refused(rcode, error) => write!(
                f,
                "the server refused our signature: {rcode}/{error} (check the key's name and \
                 secret, and the clock)"
            ),
            ReplyError::BadSignature => f.write_str("the answer's signature is wrong"),
            ReplyError::BadTime => f.write_str("the answer's signing time is off by over 300 s"),
            ReplyError::Failed(rcode) => write!(f, "the server answered {rcode}"),
        }
    }
}

/// A checked reader over a datagram.
struct Reader<'d> {
    data: &'d [u8],
    at: usize,
}

impl<'d> Reader<'d> {
    fn take(&mut self, len: usize) -> Result<&'d [u8], ReplyError> {
        let end = self.at.checked_add(len).ok_or(ReplyError::Malformed)?;
        let bytes = self.data.get(self.at..end).ok_or(ReplyError::Malformed)?;
        self.at = end;
        Ok(bytes)
    }

    fn u16(&mut self) -> Result<u16, ReplyError> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, ReplyError> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// Skips a name: labels up to a zero byte or a compression pointer.
    fn skip_name(&mut self) -> Result<(), ReplyError> {
        for _ in 0..128 {
            let len = self.take(1)?[0];
            match len {
                0 => return Ok(()),
                1..=63 => {
                    self.take(usize::from(len))?;
                }
                0xc0..=0xff => {
                    self.take(1)?;
                    return Ok(());
                }
                _ => return Err(ReplyError::Malformed),
            }
        }
        Err(ReplyError::Malformed)
    }

    /// Reads an uncompressed name and says whether it equals `expected` (case-insensitively).
    fn name_is(&mut self, expected: &str) -> Result<bool, ReplyError> {
        let mut wire = [0u8; MAX_NAME_WIRE];
        let want = name_wire(expected, &mut wire).map_err(|_| ReplyError::Malformed)?;
        let start = self.at;
        for _ in 0..128 {
            let len = self.take(1)?[0];
            match len {
                0 => {
                    let got = &self.data[start..self.at];
                    return Ok(got.eq_ignore_ascii_case(&wire[..want]));
                }
                1..=63 => {
                    self.take(usize::from(len))?;
                }
                // Compressed: RFC 8945 §4.2 says the TSIG's names are not.
                _ => return Err(ReplyError::BadSignature),
            }
        }
        Err(ReplyError::Malformed)
    }
}

/// Checks `reply` as the answer to the request with id `id` and MAC `request_mac`, signed
/// with `key`, at Unix time `now`: `Ok` only when it is signed by the key over our request
/// and says NOERROR.
pub fn check_reply(
    reply: &[u8],
    id: u16,
    request_mac: &[u8; MAC_LEN],
    key: &TsigKey<'_>,
    now: u64,
) -> Result<(), ReplyError> {
    let mut reader = Reader { data: reply, at: 0 };
    let reply_id = reader.u16()?;
    let flags = reader.u16()?;
    if reply_id != id || flags & 0x8000 == 0 || (flags >> 11) & 0xf != u16::from(OPCODE_UPDATE) {
        return Err(ReplyError::NotOurs);
    }
    let rcode = Rcode(flags & 0xf);
    let zones = reader.u16()?;
    let prerequisites = reader.u16()?;
    let updates = reader.u16()?;
    let additional = reader.u16()?;
    for _ in 0..zones {
        reader.skip_name()?;
        reader.take(4)?;
    }
    let records = u32::from(prerequisites) + u32::from(updates) + u32::from(additional);
    let mut last_start = None;
    let mut last_type = 0;
    for _ in 0..records {
        last_start = Some(reader.at);
        reader.skip_name()?;
        last_type = reader.u16()?;
        reader.take(6)?;
        let len = reader.u16()?;
        reader.take(usize::from(len))?;
    }
    if reader.at != reply.len() {
        return Err(ReplyError::Malformed);
    }
    let tsig_start = match last_start {
        Some(start) if additional > 0 && last_type == TYPE_TSIG => start,
        _ => return Err(ReplyError::Unsigned(rcode)),
    };
    // The TSIG record.
    let mut tsig = Reader {
        data: reply,
        at: tsig_start,
    };
    if !tsig.name_is(key.name)? {
        return Err(ReplyError::BadSignature);
    }
    let _type = tsig.u16()?;
    if tsig.u16()? != CLASS_ANY || tsig.u32()? != 0 {
        return Err(ReplyError::Malformed);
    }
    let rdata_len = usize::from(tsig.u16()?);
    let rdata_end = tsig
        .at
        .checked_add(rdata_len)
        .ok_or(ReplyError::Malformed)?;
    if !tsig.name_is(HMAC_SHA256)? {
        return Err(ReplyError::BadSignature);
    }
    let time = tsig.take(6)?;
    let time_signed = time
        .iter()
        .fold(0u64, |acc, byte| acc << 8 | u64::from(*byte));
    let fudge = tsig.u16()?;
    let mac_len = usize::from(tsig.u16()?);
    let mac = tsig.take(mac_len)?;
    let original_id = tsig.u16()?;
    let error = tsig.u16()?;
    let other_len = usize::from(tsig.u16()?);
    let other = tsig.take(other_len)?;
    if tsig.at != rdata_end {
        return Err(ReplyError::Malformed);
    }
    if error != 0 {
        // The server could not check ours, so it could not sign its answer (RFC 8945 §5.3.2).
        return Err(ReplyError::Refused(rcode, Rcode(error)));
    }
    if mac_len != MAC_LEN {
        return Err(ReplyError::BadSignature);
    }
    // The MAC: the request's MAC, the answer without its TSIG (ADCOUNT one less, the
    // original id), the TSIG variables (RFC 8945 §4.3.1, §4.3.3).
    let mut check = keyed(key);
    check.update(&(MAC_LEN as u16).to_be_bytes());
    check.update(request_mac);
    check.update(&original_id.to_be_bytes());
    check.update(&reply[2..10]);
    check.update(&(additional - 1).to_be_bytes());
    check.update(&reply[12..tsig_start]);
    tsig_variables(&mut check, key.name, time_signed, fudge, error, other)
        .map_err(|_| ReplyError::Malformed)?;
    check
        .verify_slice(mac)
        .map_err(|_| ReplyError::BadSignature)?;
    if time_signed.abs_diff(now) > u64::from(fudge) {
        return Err(ReplyError::BadTime);
    }
    if rcode.0 != 0 {
        return Err(ReplyError::Failed(rcode));
    }
    Ok(())
}

/// A name server's side, for the tests here and the appliance's (`bramble-net`'s tests turn
/// on the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;
    use std::vec::Vec;

    /// Signs `body` (an answer without TSIG, ADCOUNT not counting it) as a server would.
    pub fn server_sign(body: &[u8], request_mac: &[u8], key: &TsigKey<'_>, time: u64) -> Vec<u8> {
        let mut mac = keyed(key);
        mac.update(&(request_mac.len() as u16).to_be_bytes());
        mac.update(request_mac);
        mac.update(body);
        tsig_variables(&mut mac, key.name, time, TSIG_FUDGE, 0, &[]).unwrap();
        let mac = mac.finalize().into_bytes();
        let mut out = body.to_vec();
        let additional = u16::from_be_bytes([out[10], out[11]]) + 1;
        out[10..12].copy_from_slice(&additional.to_be_bytes());
        let mut wire = [0u8; MAX_NAME_WIRE];
        let len = name_wire(key.name, &mut wire).unwrap();
        out.extend_from_slice(&wire[..len]);
        out.extend_from_slice(&TYPE_TSIG.to_be_bytes());
        out.extend_from_slice(&CLASS_ANY.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        let len_at = out.len();
        out.extend_from_slice(&[0, 0]);
        let len = name_wire(HMAC_SHA256, &mut wire).unwrap();
        out.extend_from_slice(&wire[..len]);
        out.extend_from_slice(&time.to_be_bytes()[2..]);
        out.extend_from_slice(&TSIG_FUDGE.to_be_bytes());
        out.extend_from_slice(&32u16.to_be_bytes());
        out.extend_from_slice(&mac);
        out.extend_from_slice(&body[..2]);
        out.extend_from_slice(&[0, 0, 0, 0]);
        let rdata_len = (out.len() - len_at - 2) as u16;
        out[len_at..len_at + 2].copy_from_slice(&rdata_len.to_be_bytes());
        out
    }

    /// A bare answer: the request's header with QR set and `rcode`, its zone section.
    pub fn answer_body(request: &[u8], rcode: u8) -> Vec<u8> {
        let zone_end = 12 + request[12..].iter().position(|&b| b == 0).unwrap() + 1 + 4;
        let mut body = request[..zone_end].to_vec();
        body[2] |= 0x80;
        body[3] = (body[3] & 0xf0) | rcode;
        body[6..12].copy_from_slice(&[0, 0, 0, 0, 0, 0]);
        body
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{answer_body, server_sign};
    use super::*;

    const KEY: TsigKey<'static> = TsigKey {
        name: "bramble-key",
        secret: b"0123456789abcdef0123456789abcdef",
    };

    fn request(buf: &mut [u8]) -> Signed {
        let changes = [
            Change::Replace {
                name: "home.example.org",
                rdata: Rdata::A([203, 0, 113, 7]),
                ttl: 60,
            },
            Change::Replace {
                name: "home.example.org",
                rdata: Rdata::Aaaa([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
                ttl: 60,
            },
        ];
        build_update(buf, 0x1234, "example.org.", &changes, &KEY, 1_700_000_000).unwrap()
    }

    #[test]
    fn the_update_has_the_zone_the_changes_and_a_tsig_over_them() {
        let mut buf = [0u8; 512];
        let signed = request(&mut buf);
        let message = &buf[..signed.len];
        assert_eq!(
            &message[..12],
            &[0x12, 0x34, 0x28, 0, 0, 1, 0, 0, 0, 4, 0, 1]
        );
        assert_eq!(&message[12..25], b"\x07example\x03org\x00");
        assert_eq!(&message[25..29], &[0, 6, 0, 1]);
        // Delete the A RRset (class ANY, no data), then add the address.
        let home = b"\x04home\x07example\x03org\x00";
        assert_eq!(&message[29..47], home);
        assert_eq!(&message[47..57], &[0, 1, 0, 255, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&message[57..75], home);
        assert_eq!(
            &message[75..89],
            &[0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 203, 0, 113, 7]
        );
        // The MAC recomputed independently over the unsigned message and the variables.
        let tsig_at = signed.len - (13 + 10 + 13 + 6 + 2 + 2 + 32 + 6);
        let mut unsigned = message[..tsig_at].to_vec();
        unsigned[11] = 0;
        let mut mac = keyed(&KEY);
        mac.update(&unsigned);
        mac.update(b"\x0bbramble-key\x00\x00\xff\x00\x00\x00\x00\x0bhmac-sha256\x00");
        mac.update(&1_700_000_000u64.to_be_bytes()[2..]);
        mac.update(&[1, 44, 0, 0, 0, 0]);
        assert_eq!(mac.finalize().into_bytes().as_slice(), signed.mac);
        assert_eq!(&message[signed.len - 38..signed.len - 6], signed.mac);
        assert_eq!(&message[signed.len - 6..], &[0x12, 0x34, 0, 0, 0, 0]);
    }

    #[test]
    fn a_signed_noerror_answer_is_accepted_and_anything_else_is_not() {
        let mut buf = [0u8; 512];
        let signed = request(&mut buf);
        let now = 1_700_000_010;
        let good = server_sign(&answer_body(&buf[..signed.len], 0), &signed.mac, &KEY, now);
        assert_eq!(check_reply(&good, 0x1234, &signed.mac, &KEY, now), Ok(()));
        // Another request's MAC, another id, a flipped byte, a wrong secret, a late clock.
        let other_mac = [7u8; MAC_LEN];
        assert_eq!(
            check_reply(&good, 0x1234, &other_mac, &KEY, now),
            Err(ReplyError::BadSignature)
        );
        assert_eq!(
            check_reply(&good, 0x1235, &signed.mac, &KEY, now),
            Err(ReplyError::NotOurs)
        );
        let mut flipped = good.clone();
        flipped[14] ^= 1;
        assert_eq!(
            check_reply(&flipped, 0x1234, &signed.mac, &KEY, now),
            Err(ReplyError::BadSignature)
        );
        let wrong = TsigKey {
            secret: b"another secret",
            ..KEY
        };
        assert_eq!(
            check_reply(&good, 0x1234, &signed.mac, &wrong, now),
            Err(ReplyError::BadSignature)
        );
        assert_eq!(
            check_reply(&good, 0x1234, &signed.mac, &KEY, now + 400),
            Err(ReplyError::BadTime)
        );
        // A signed REFUSED; an unsigned answer; a cut one.
        let refused = server_sign(&answer_body(&buf[..signed.len], 5), &signed.mac, &KEY, now);
        assert_eq!(
            check_reply(&refused, 0x1234, &signed.mac, &KEY, now),
            Err(ReplyError::Failed(Rcode(5)))
        );
        let unsigned = answer_body(&buf[..signed.len], 0);
        assert_eq!(
            check_reply(&unsigned, 0x1234, &signed.mac, &KEY, now),
            Err(ReplyError::Unsigned(Rcode(0)))
        );
        for cut in 0..good.len() {
            assert!(check_reply(&good[..cut], 0x1234, &signed.mac, &KEY, now).is_err());
        }
        // Every byte changed to a few values: never accepted, never a panic (the fuzz
        // target dns_update_reply goes further, from this answer as its seed).
        for at in 0..good.len() {
            for value in [0u8, 1, 0x3f, 0x40, 0xc0, 0xff] {
                let mut changed = good.clone();
                if changed[at] == value {
                    continue;
                }
                changed[at] = value;
                assert!(check_reply(&changed, 0x1234, &signed.mac, &KEY, now).is_err());
            }
        }
    }

    #[test]
    fn a_tsig_error_says_the_server_refused_our_signature() {
        let mut buf = [0u8; 512];
        let signed = request(&mut buf);
        let mut reply = answer_body(&buf[..signed.len], 9);
        reply[11] = 1;
        reply.extend_from_slice(b"\x0bbramble-key\x00\x00\xfa\x00\xff\x00\x00\x00\x00");
        let mut rdata = b"\x0bhmac-sha256\x00".to_vec();
        rdata.extend_from_slice(&[0, 0, 0x65, 0x53, 0xf1, 0]);
        rdata.extend_from_slice(&[1, 44, 0, 0, 0x12, 0x34, 0, 17, 0, 0]);
        reply.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        reply.extend_from_slice(&rdata);
        assert_eq!(
            check_reply(&reply, 0x1234, &signed.mac, &KEY, 1_700_000_000),
            Err(ReplyError::Refused(Rcode(9), Rcode(17)))
        );
    }

    #[test]
    fn names_are_checked_and_text_is_one_string() {
        let mut buf = [0u8; 512];
        let long = "a".repeat(64);
        for bad in ["", "a..b", long.as_str()] {
            let name = if bad.is_empty() { "." } else { bad };
            let change = Change::DeleteType {
                name,
                record_type: 16,
            };
            let result = build_update(&mut buf, 1, "example.org", &[change], &KEY, 0);
            if bad.is_empty() {
                assert!(result.is_ok());
            } else {
                assert_eq!(result, Err(BuildError::BadName), "{bad}");
            }
        }
        let text = "x".repeat(256);
        let change = Change::Add {
            name: "_acme-challenge.example.org",
            rdata: Rdata::Txt(&text),
            ttl: 60,
        };
        assert_eq!(
            build_update(&mut buf, 1, "example.org", &[change], &KEY, 0),
            Err(BuildError::TextTooLong)
        );
        assert_eq!(
            build_update(&mut buf[..40], 1, "example.org", &[], &KEY, 0),
            Err(BuildError::TooLong)
        );
    }
}
