//! The stream pool's view of the wire: a checked parse of an Ethernet II + IPv4 or IPv6 +
//! TCP frame into a [`Segment`], the in-place writer of outgoing segments, and the Internet
//! checksum.
//!
//! Received bytes are untrusted: every field is read through a length check, lengths come
//! from the IPv4 total length or the IPv6 payload length (never from the frame, which may be
//! padded), and every checksum is verified. Only what a passive-open server needs is
//! understood: IPv4 without fragments, IPv6 with TCP straight after the fixed header (no
//! extension headers, as clients send TCP), TCP with the MSS option (every other option is
//! skipped by its length).
//!
//! Addresses of both families are one type, [`Address`]: 16 bytes, an IPv4 address as its
//! IPv4-mapped IPv6 address (RFC 4291 §2.5.5.2, `::ffff:a.b.c.d`), so that the pool keys,
//! hashes and counts connections the same way whichever family they came over.

/// An IPv6 address, or an IPv4 address mapped into IPv6 ([`v4_mapped`]).
pub type Address = [u8; 16];

/// `ip` as its IPv4-mapped IPv6 address.
pub const fn v4_mapped(ip: [u8; 4]) -> Address {
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3],
    ]
}

/// The IPv4 address inside `address`, if it is IPv4-mapped.
pub fn as_v4(address: &Address) -> Option<[u8; 4]> {
    // Byte by byte: a 12-byte slice comparison is a call to the byte-wise memcmp on the Pi,
    // and the pool asks this several times per segment (the profile had it at 46 calls and
    // about 3,000 instructions per page request).
    let [a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p] = *address;
    let zeros = a | b | c | d | e | f | g | h | i | j;
    (zeros == 0 && k == 0xff && l == 0xff).then_some([m, n, o, p])
}

/// Largest TCP payload per segment to `peer` on a 1500-byte MTU: 1460 over IPv4, 1440 over
/// IPv6 (its header is 20 bytes longer).
pub fn max_mss(peer: &Address) -> u16 {
    if as_v4(peer).is_some() {
        MAX_MSS
    } else {
        MAX_MSS_V6
    }
}

/// Ethernet II header length.
pub const ETHERNET_LEN: usize = 14;
/// IPv4 header length of every segment we send (no options).
pub const IPV4_LEN: usize = 20;
/// IPv6 fixed header length (RFC 8200 §3).
pub const IPV6_LEN: usize = 40;
/// TCP header length of every segment we send without options.
pub const TCP_LEN: usize = 20;
/// Bytes before the payload of every segment we send.
pub const HEADERS_LEN: usize = ETHERNET_LEN + IPV4_LEN + TCP_LEN;
/// Largest frame built or accepted (Ethernet II without FCS, 1500-byte MTU).
pub const MAX_FRAME: usize = ETHERNET_LEN + 1500;
/// Largest TCP payload per IPv4 segment on a 1500-byte MTU.
pub const MAX_MSS: u16 = 1460;
/// Largest TCP payload per IPv6 segment on a 1500-byte MTU.
pub const MAX_MSS_V6: u16 = 1440;
/// EtherType of IPv4.
const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
/// EtherType of IPv6.
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
/// IP protocol / IPv6 next header number of TCP.
const TCP_PROTOCOL: u8 = 6;

/// TCP flag bits (RFC 9293 §3.1).
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
}

/// One received TCP segment, after every check passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment<'a> {
    /// Ethernet source: where replies go.
    pub src_mac: [u8; 6],
    /// Source address (IPv4-mapped for IPv4).
    pub src_ip: Address,
    /// Destination address: one of ours (IPv4-mapped for IPv4).
    pub dst_ip: Address,
    /// TCP source port.
    pub src_port: u16,
    /// TCP destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful with ACK).
    pub ack: u32,
    /// Flag bits ([`flags`]).
    pub flags: u8,
    /// Window (never scaled: the pool does not offer window scaling).
    pub window: u16,
    /// MSS option, if present.
    pub mss: Option<u16>,
    /// Payload bytes.
    pub payload: &'a [u8],
}

impl Segment<'_> {
    /// Whether all bits of `mask` are set.
    pub fn has(&self, mask: u8) -> bool {
        self.flags & mask == mask
    }

    /// Sequence space the segment occupies (payload, plus one each for SYN and FIN).
    pub fn seq_len(&self) -> u32 {
        self.payload.len() as u32
            + u32::from(self.has(flags::SYN))
            + u32::from(self.has(flags::FIN))
    }
}

/// Why a frame was not taken as a segment for us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Too short, or a length field points past the end.
    Truncated,
    /// Not unicast to our MAC.
    NotOurMac,
    /// Not IPv4 or IPv6, a fragment, an IPv6 extension header, or not TCP.
    NotTcp,
    /// Not addressed to one of our addresses (or we have none).
    NotOurAddress,
    /// The source address is not a unicast host (broadcast, multicast, zero, loopback, or
    /// an IPv4-mapped address over IPv6).
    BadSource,
    /// IPv4 header or TCP checksum wrong.
    Checksum,
    /// TCP header length out of range.
    BadHeader,
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A cheap look at `frame` without checksums: is it TCP over IPv4 or IPv6 to one of
/// `ports`? Used to decide which frames go to the pool rather than to smoltcp.
pub fn is_tcp_to(frame: &[u8], ports: &[u16]) -> bool {
    if frame.len() < ETHERNET_LEN + IPV4_LEN + TCP_LEN {
        return false;
    }
    let ip = &frame[ETHERNET_LEN..];
    let port = match [frame[12], frame[13]] {
        ETHERTYPE_IPV4 => {
            let header_len = usize::from(ip[0] & 0x0f) * 4;
            if ip[0] >> 4 != 4 || ip[9] != TCP_PROTOCOL || header_len < IPV4_LEN {
                return false;
            }
            be16(ip, header_len + 2)
        }
        ETHERTYPE_IPV6 => {
            if ip[0] >> 4 != 6 || ip[6] != TCP_PROTOCOL {
                return false;
            }
            be16(ip, IPV6_LEN + 2)
        }
        _ => None,
    };
    port.is_some_and(|port| ports.contains(&port))
}

/// Parses `frame` as a TCP segment sent to `our_mac` and one of `ours` (IPv4 addresses
/// IPv4-mapped).
pub fn parse<'a>(
    frame: &'a [u8],
    our_mac: [u8; 6],
    ours: &[Address],
) -> Result<Segment<'a>, Reject> {
    if frame.len() < ETHERNET_LEN + IPV4_LEN {
        return Err(Reject::Truncated);
    }
    if frame[0..6] != our_mac {
        return Err(Reject::NotOurMac);
    }
    // The pseudo-header's addresses are summed where the family is known (every segment
    // received goes through here).
    let (src_ip, dst_ip, tcp, address_pairs) = match [frame[12], frame[13]] {
        ETHERTYPE_IPV4 => ipv4(&frame[ETHERNET_LEN..])?,
        ETHERTYPE_IPV6 => ipv6(&frame[ETHERNET_LEN..])?,
        _ => return Err(Reject::NotTcp),
    };
    if !ours.contains(&dst_ip) {
        return Err(Reject::NotOurAddress);
    }
    if tcp.len() < TCP_LEN {
        return Err(Reject::Truncated);
    }
    let data_offset = usize::from(tcp[12] >> 4) * 4;
    if data_offset < TCP_LEN || data_offset > tcp.len() {
        return Err(Reject::BadHeader);
    }
    let pseudo = pseudo_sum(address_pairs, tcp.len());
    if fold(sum(pseudo, tcp)) != 0xffff {
        return Err(Reject::Checksum);
    }
    let flags = tcp[13];
    let mss = if flags & flags::SYN != 0 {
        read_mss(&tcp[TCP_LEN..data_offset])
    } else {
        None
    };
    Ok(Segment {
        src_mac: [frame[6], frame[7], frame[8], frame[9], frame[10], frame[11]],
        src_ip,
        dst_ip,
        src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: be32(tcp, 4).ok_or(Reject::Truncated)?,
        ack: be32(tcp, 8).ok_or(Reject::Truncated)?,
        flags,
        window: u16::from_be_bytes([tcp[14], tcp[15]]),
        mss,
        payload: &tcp[data_offset..],
    })
}

/// The addresses, TCP bytes and the addresses' sum for the pseudo-header of an IPv4 packet
/// (`ip`: from its header on).
fn ipv4(ip: &[u8]) -> Result<(Address, Address, &[u8], u32), Reject> {
    if ip.len() < IPV4_LEN {
        return Err(Reject::Truncated);
    }
    let version = ip[0] >> 4;
    let header_len = usize::from(ip[0] & 0x0f) * 4;
    if version != 4 || header_len < IPV4_LEN || ip[9] != TCP_PROTOCOL {
        return Err(Reject::NotTcp);
    }
    let total_len = usize::from(be16(ip, 2).ok_or(Reject::Truncated)?);
    if total_len < header_len || total_len > ip.len() {
        return Err(Reject::Truncated);
    }
    let ip = &ip[..total_len];
    // Fragments (MF set or a non-zero offset) are not reassembled.
    if be16(ip, 6).ok_or(Reject::Truncated)? & 0x3fff != 0 {
        return Err(Reject::NotTcp);
    }
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    if src[0] == 0 || src[0] == 127 || src[0] >= 224 || src == [255; 4] {
        return Err(Reject::BadSource);
    }
    if fold(sum(0, &ip[..header_len])) != 0xffff {
        return Err(Reject::Checksum);
    }
    Ok((
        v4_mapped(src),
        v4_mapped(dst),
        &ip[header_len..],
        v4_address_pairs(src, dst),
    ))
}

/// The addresses, TCP bytes and the addresses' sum for the pseudo-header of an IPv6 packet
/// (`ip`: from its header on). TCP must be the next header of the fixed header: a packet
/// with extension headers is not taken.
fn ipv6(ip: &[u8]) -> Result<(Address, Address, &[u8], u32), Reject> {
    if ip.len() < IPV6_LEN {
        return Err(Reject::Truncated);
    }
    if ip[0] >> 4 != 6 || ip[6] != TCP_PROTOCOL {
        return Err(Reject::NotTcp);
    }
    // A payload length of 0 would announce a jumbogram (RFC 2675): not on Ethernet.
    let payload_len = usize::from(be16(ip, 4).ok_or(Reject::Truncated)?);
    let end = IPV6_LEN.checked_add(payload_len).ok_or(Reject::Truncated)?;
    if payload_len == 0 || end > ip.len() {
        return Err(Reject::Truncated);
    }
    let mut src = [0u8; 16];
    src.copy_from_slice(&ip[8..24]);
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&ip[24..40]);
    // Unicast hosts only: not unspecified, loopback, multicast, nor IPv4-mapped (RFC 4291
    // §2.5.5.2: never on the wire).
    if src == [0; 16] || src == LOOPBACK_V6 || src[0] == 0xff || as_v4(&src).is_some() {
        return Err(Reject::BadSource);
    }
    Ok((src, dst, &ip[IPV6_LEN..end], v6_address_pairs(&src, &dst)))
}

/// `::1`.
const LOOPBACK_V6: Address = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The MSS option (kind 2, length 4) among `options`, if well formed.
fn read_mss(options: &[u8]) -> Option<u16> {
    let mut at = 0;
    while at < options.len() {
        match options[at] {
            0 => return None,
            1 => at += 1,
            kind => {
                let len = usize::from(*options.get(at + 1)?);
                if len < 2 || at + len > options.len() {
                    return None;
                }
                if kind == 2 && len == 4 {
                    return be16(options, at + 2);
                }
                at += len;
            }
        }
    }
    None
}

/// What telling a segment's family takes (two looks at 16-byte addresses, about 80
/// instructions on the Pi), done once per segment: [`Outgoing::layout`] gives it to size the
/// frame, [`Outgoing::write_laid_out`] takes it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Both addresses as IPv4 ones, if the segment goes over IPv4.
    v4: Option<([u8; 4], [u8; 4])>,
    /// Bytes before the payload.
    headers_len: usize,
}

impl Layout {
    /// Bytes before the payload.
    pub fn headers_len(&self) -> usize {
        self.headers_len
    }
}

/// The fields of a segment to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// Ethernet destination.
    pub dst_mac: [u8; 6],
    /// Our MAC.
    pub src_mac: [u8; 6],
    /// Our address (IPv4-mapped for IPv4: then the segment goes over IPv4).
    pub src_ip: Address,
    /// The peer's address, of the same family.
    pub dst_ip: Address,
    /// Our port.
    pub src_port: u16,
    /// The peer's port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (sent with the ACK flag).
    pub ack: u32,
    /// Flag bits.
    pub flags: u8,
    /// Receive window offered.
    pub window: u16,
    /// MSS option to include (SYN-ACK only).
    pub mss: Option<u16>,
    /// IPv4 identification (unused over IPv6).
    pub ip_id: u16,
}

impl Outgoing {
    /// Both addresses as IPv4 ones, if the segment goes over IPv4 (both IPv4-mapped).
    fn v4_addresses(&self) -> Option<([u8; 4], [u8; 4])> {
        Some((as_v4(&self.src_ip)?, as_v4(&self.dst_ip)?))
    }

    /// Bytes of the TCP header (with the MSS option, if any).
    fn tcp_header_len(&self) -> usize {
        TCP_LEN + if self.mss.is_some() { 4 } else { 0 }
    }

    /// The segment's family and header length ([`Layout`]).
    pub fn layout(&self) -> Layout {
        let v4 = self.v4_addresses();
        let ip_len = if v4.is_some() { IPV4_LEN } else { IPV6_LEN };
        Layout {
            v4,
            headers_len: ETHERNET_LEN + ip_len + self.tcp_header_len(),
        }
    }

    /// Bytes before the payload.
    pub fn headers_len(&self) -> usize {
        self.layout().headers_len
    }

    /// Fills in the headers of `frame`, whose payload (`frame[headers_len()..]`) is already in
    /// place, given the payload's partial sum (from [`sum`] starting at 0, or
    /// [`copy_and_sum`]), and the checksums. The headers' own contributions to the checksums
    /// are added from the fields, not read back from the bytes written (this runs for every
    /// segment sent).
    pub fn write(&self, frame: &mut [u8], payload_sum: u32) {
        self.write_laid_out(&self.layout(), frame, payload_sum);
    }

    /// [`Outgoing::write`] with this segment's [`Layout`], found before (to size the frame).
    pub fn write_laid_out(&self, layout: &Layout, frame: &mut [u8], payload_sum: u32) {
        let v4 = layout.v4;
        let ip_len = if v4.is_some() { IPV4_LEN } else { IPV6_LEN };
        let tcp_header_len = self.tcp_header_len();
        let header_len = layout.headers_len;
        let tcp_len = frame.len() - ETHERNET_LEN - ip_len;
        frame[0..6].copy_from_slice(&self.dst_mac);
        frame[6..12].copy_from_slice(&self.src_mac);
        let pseudo = match v4 {
            Some((src, dst)) => {
                frame[12..14].copy_from_slice(&ETHERTYPE_IPV4);
                let ip = &mut frame[ETHERNET_LEN..ETHERNET_LEN + IPV4_LEN];
                let total_len = (IPV4_LEN + tcp_len) as u16;
                ip[0] = 0x45;
                ip[1] = 0;
                ip[2..4].copy_from_slice(&total_len.to_be_bytes());
                ip[4..6].copy_from_slice(&self.ip_id.to_be_bytes());
                // Don't Fragment: our segments fit the MTU.
                ip[6..8].copy_from_slice(&[0x40, 0x00]);
                ip[8] = 64;
                ip[9] = TCP_PROTOCOL;
                ip[12..16].copy_from_slice(&src);
                ip[16..20].copy_from_slice(&dst);
                let addresses = v4_address_pairs(src, dst);
                // The header's 16-bit words as just written, the checksum field as zero.
                let header = 0x4500
                    + u32::from(total_len)
                    + u32::from(self.ip_id)
                    + 0x4000
                    + (64 << 8 | u32::from(TCP_PROTOCOL))
                    + addresses;
                ip[10..12].copy_from_slice(&(!fold(header)).to_be_bytes());
                pseudo_sum(addresses, tcp_len)
            }
            None => {
                frame[12..14].copy_from_slice(&ETHERTYPE_IPV6);
                let ip = &mut frame[ETHERNET_LEN..ETHERNET_LEN + IPV6_LEN];
                // Version 6, traffic class 0, flow label 0.
                ip[0..4].copy_from_slice(&[0x60, 0, 0, 0]);
                ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
                ip[6] = TCP_PROTOCOL;
                ip[7] = 64;
                ip[8..24].copy_from_slice(&self.src_ip);
                ip[24..40].copy_from_slice(&self.dst_ip);
                pseudo_sum(v6_address_pairs(&self.src_ip, &self.dst_ip), tcp_len)
            }
        };
        let tcp_at = ETHERNET_LEN + ip_len;
        let tcp = &mut frame[tcp_at..header_len];
        let offset_flags = u16::from_be_bytes([((tcp_header_len / 4) as u8) << 4, self.flags]);
        tcp[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        tcp[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        tcp[4..8].copy_from_slice(&self.seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&self.ack.to_be_bytes());
        tcp[12..14].copy_from_slice(&offset_flags.to_be_bytes());
        tcp[14..16].copy_from_slice(&self.window.to_be_bytes());
        // Checksum (filled in below) and urgent pointer.
        tcp[16..20].copy_from_slice(&[0, 0, 0, 0]);
        let halves = |word: u32| (word >> 16) + (word & 0xffff);
        // The TCP header's 16-bit words as just written, the checksum field as zero: at most
        // a dozen words and the pseudo-header's (below 2^21), far from overflowing.
        let mut total = pseudo
            + u32::from(self.src_port)
            + u32::from(self.dst_port)
            + halves(self.seq)
            + halves(self.ack)
            + u32::from(offset_flags)
            + u32::from(self.window);
        if let Some(mss) = self.mss {
            tcp[20..22].copy_from_slice(&[2, 4]);
            tcp[22..24].copy_from_slice(&mss.to_be_bytes());
            total += 0x0204 + u32::from(mss);
        }
        // The payload starts at an even offset of the TCP segment (its header is a whole
        // number of 32-bit words), so its sum adds in directly.
        let total = add_sums(total, payload_sum);
        let checksum = !fold(total);
        frame[tcp_at + 16..tcp_at + 18].copy_from_slice(&checksum.to_be_bytes());
    }
}

/// The pseudo-header's contribution to a TCP checksum, given the sum of its addresses' 16-bit
/// words ([`v4_address_pairs`] or [`v6_address_pairs`]): with the protocol and the TCP
/// length, RFC 9293 §3.1 over IPv4, RFC 8200 §8.1 over IPv6 (the length as 32 bits: its high
/// half is 0 below 64 KiB either way).
fn pseudo_sum(address_pairs: u32, tcp_len: usize) -> u32 {
    let len = tcp_len as u32;
    address_pairs + u32::from(TCP_PROTOCOL) + (len >> 16) + (len & 0xffff)
}

/// The 16-bit words of two IPv4 addresses, added.
fn v4_address_pairs(src: [u8; 4], dst: [u8; 4]) -> u32 {
    let pair = |a: u8, b: u8| u32::from(u16::from_be_bytes([a, b]));
    pair(src[0], src[1]) + pair(src[2], src[3]) + pair(dst[0], dst[1]) + pair(dst[2], dst[3])
}

/// The 16-bit words of two IPv6 addresses, added (pairs written out: a closure call per pair
/// was most of the cost).
fn v6_address_pairs(src: &Address, dst: &Address) -> u32 {
    let pair = |address: &Address, at: usize| {
        u32::from(u16::from_be_bytes([address[at], address[at + 1]]))
    };
    let mut total = 0;
    let mut at = 0;
    while at < 16 {
        total += pair(src, at) + pair(dst, at);
        at += 2;
    }
    total
}

/// Adds two partial sums with end-around carry.
pub fn add_sums(a: u32, b: u32) -> u32 {
    let (total, carry) = a.overflowing_add(b);
    total + u32::from(carry)
}

/// Folds a partial sum to 16 bits (ones' complement, RFC 1071), not yet complemented.
pub fn fold(mut total: u32) -> u16 {
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    total as u16
}

/// Adds the big-endian 16-bit words of `bytes` (a trailing odd byte padded with zero) to the
/// partial sum `initial`. The result is a partial sum for [`fold`] or [`add_sums`].
///
/// The bulk is read as aligned 32-bit words (a checked cast: no unsafe code), whatever the
/// slice's alignment: RFC 1071's sum of byte-rotated pairs is the byte swap of the sum, so
/// the words are summed in the machine's order and the result turned round where needed.
/// On the ARM1176 (strict alignment) that is about one instruction per byte fewer than
/// byte-pair loads.
pub fn sum(initial: u32, bytes: &[u8]) -> u32 {
    let split = bytes.as_ptr().align_offset(4).min(bytes.len());
    let (head, rest) = bytes.split_at(split);
    let (middle, tail) = rest.split_at(rest.len() / 4 * 4);
    let Ok(words) = bytemuck::try_cast_slice::<u8, u32>(middle) else {
        // Cannot happen (the split aligned it); the plain loop is always right.
        return add_sums(initial, u32::from(pairs(bytes)));
    };
    // Four words a turn: the loop's own instructions once per 16 bytes, and loads the
    // compiler can merge (about a third fewer instructions per byte on the Pi).
    let mut total: u64 = 0;
    let mut quads = words.chunks_exact(4);
    for quad in &mut quads {
        total += u64::from(quad[0]) + u64::from(quad[1]) + u64::from(quad[2]) + u64::from(quad[3]);
    }
    for &word in quads.remainder() {
        total += u64::from(word);
    }
    // Fold 32-bit words to a 16-bit sum of the machine's halves.
    let total = (total & 0xffff_ffff) + (total >> 32);
    let total = (total & 0xffff_ffff) + (total >> 32);
    let halves = fold(fold32(total as u32));
    // Halves in the machine's order are big-endian pairs on a big-endian machine, swapped
    // pairs on a little-endian one; pairs that begin at an odd offset are swapped too.
    let swapped = cfg!(target_endian = "little") != (head.len() % 2 == 1);
    let middle_sum = if swapped { halves.swap_bytes() } else { halves };
    let odd = head.len() % 2 == 1;
    let head_sum = pairs(head);
    let tail_sum = if odd {
        pairs(tail).swap_bytes()
    } else {
        pairs(tail)
    };
    let total = add_sums(initial, u32::from(head_sum));
    let total = add_sums(total, u32::from(middle_sum));
    add_sums(total, u32::from(tail_sum))
}

/// RFC 1071 over a few bytes, pairs from the first byte on, folded to 16 bits.
fn pairs(bytes: &[u8]) -> u16 {
    // The words' sums call this twice per piece, for the 0-3 bytes before the first aligned
    // word and after the last: those without the loop.
    match *bytes {
        [] => return 0,
        [a] => return u16::from(a) << 8,
        [a, b] => return u16::from_be_bytes([a, b]),
        [a, b, c] => {
            return fold(u32::from(u16::from_be_bytes([a, b])) + (u32::from(c) << 8));
        }
        _ => {}
    }
    let mut total: u32 = 0;
    let mut pairs = bytes.chunks_exact(2);
    for pair in &mut pairs {
        total += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = pairs.remainder() {
        total += u32::from(*last) << 8;
    }
    fold(total)
}

/// Folds a 32-bit sum of 32-bit words into a sum of 16-bit words.
fn fold32(total: u32) -> u32 {
    (total & 0xffff) + (total >> 16)
}

/// Copies `src` into `dst` (at most the shorter length) and returns the partial sum of the
/// bytes copied, as [`sum`] from 0 would: one pass over the data instead of two. Words are
/// stored aligned to `dst`; when `src` is aligned otherwise, each word is put together from
/// two aligned source words by shifts (little-endian machines; others copy, then sum).
pub fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u32 {
    copy_and_sum_with(dst, src, copy_words)
}

/// Copies whole words into a word-aligned buffer and sums them, for [`copy_and_sum_with`]:
/// `out[i]` becomes the source bytes `4i..4i+4` in memory order (`source`, of any alignment,
/// holds `4 * out.len()` bytes; a routine given fewer copies the whole words it has), and the
/// result is the ones' complement sum of the words stored, read in the machine's byte order,
/// with the carries added back in (any 32-bit value that is congruent to that sum modulo
/// 2^32 - 1, 0 only if every word is). [`copy_words`] is the portable one; a platform can
/// give its own (the Pi kernel's is in assembly).
pub type CopyWords = fn(out: &mut [u32], source: &[u8]) -> u32;

/// [`copy_and_sum`] with `copy_words` moving the whole words (the bytes before the first
/// aligned word of `dst` and after its last are copied and summed here).
pub fn copy_and_sum_with(dst: &mut [u8], src: &[u8], copy_words: CopyWords) -> u32 {
    let len = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..len], &src[..len]);
    if cfg!(target_endian = "big") || len < 16 {
        dst.copy_from_slice(src);
        return sum(0, dst);
    }
    let head = dst.as_ptr().align_offset(4).min(len);
    dst[..head].copy_from_slice(&src[..head]);
    let words = (len - head) / 4;
    let (middle, tail) = dst[head..].split_at_mut(words * 4);
    let source = &src[head..head + words * 4];
    let Ok(out) = bytemuck::try_cast_slice_mut::<u8, u32>(middle) else {
        // Cannot happen (the split aligned it).
        dst.copy_from_slice(src);
        return sum(0, dst);
    };
    let total = copy_words(out, source);
    tail.copy_from_slice(&src[head + words * 4..]);
    let halves = fold(fold32(total));
    // Little-endian halves are swapped pairs; pairs from an odd offset are swapped again.
    let odd = head % 2 == 1;
    let middle_sum = if odd { halves } else { halves.swap_bytes() };
    let tail_sum = if odd {
        pairs(tail).swap_bytes()
    } else {
        pairs(tail)
    };
    let total = add_sums(u32::from(pairs(&dst[..head])), u32::from(middle_sum));
    add_sums(total, u32::from(tail_sum))
}

/// The portable [`CopyWords`]: four words a turn when `source` is word-aligned too, words
/// shifted together from two aligned ones when it is not.
pub fn copy_words(out: &mut [u32], source: &[u8]) -> u32 {
    let words = out.len().min(source.len() / 4);
    let (out, source) = (&mut out[..words], &source[..words * 4]);
    let mut total: u64 = 0;
    let lead = source.as_ptr().align_offset(4).min(source.len());
    if lead == 0 {
        let Ok(input) = bytemuck::try_cast_slice::<u8, u32>(source) else {
            // Cannot happen (aligned, a whole number of words).
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
            bytes.copy_from_slice(source);
            return sum_words(out);
        };
        // Four words a turn, as in [`sum`].
        let mut to_quads = out.chunks_exact_mut(4);
        let mut from_quads = input.chunks_exact(4);
        for (to, from) in (&mut to_quads).zip(&mut from_quads) {
            let (a, b, c, d) = (from[0], from[1], from[2], from[3]);
            to[0] = a;
            to[1] = b;
            to[2] = c;
            to[3] = d;
            total += u64::from(a) + u64::from(b) + u64::from(c) + u64::from(d);
        }
        for (to, &word) in to_quads
            .into_remainder()
            .iter_mut()
            .zip(from_quads.remainder())
        {
            *to = word;
            total += u64::from(word);
        }
    } else if words > 0 {
        // Output word i is source bytes 4i..4i+4: the last `lead` bytes of aligned word
        // i-1 and the first 4-lead of aligned word i, where aligned word j starts at
        // source byte lead + 4j. The first and last output words are put together from
        // bytes (their outer aligned words are not in the slice).
        let aligned_len = (source.len() - lead) / 4 * 4;
        let Ok(input) = bytemuck::try_cast_slice::<u8, u32>(&source[lead..lead + aligned_len])
        else {
            // Cannot happen (the split aligned it).
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(out);
            bytes.copy_from_slice(source);
            return sum_words(out);
        };
        let low = (8 * lead) as u32;
        let high = 32 - low;
        let word_at = |at: usize| {
            u32::from_le_bytes([source[at], source[at + 1], source[at + 2], source[at + 3]])
        };
        let first = word_at(0);
        out[0] = first;
        total += u64::from(first);
        if words >= 2 {
            let last = word_at(4 * (words - 1));
            out[words - 1] = last;
            total += u64::from(last);
            if let (Some((&first_word, rest)), Some(inner)) =
                (input.split_first(), out.get_mut(1..words - 1))
            {
                let mut previous = first_word;
                for (to, &next) in inner.iter_mut().zip(rest) {
                    let word = (previous >> high) | (next << low);
                    *to = word;
                    total += u64::from(word);
                    previous = next;
                }
            }
        }
    }
    let total = (total & 0xffff_ffff) + (total >> 32);
    let total = (total & 0xffff_ffff) + (total >> 32);
    total as u32
}

/// The ones' complement sum of `words` in the machine's order, as [`CopyWords`] returns it.
fn sum_words(words: &[u32]) -> u32 {
    let total: u64 = words.iter().map(|&word| u64::from(word)).sum();
    let total = (total & 0xffff_ffff) + (total >> 32);
    let total = (total & 0xffff_ffff) + (total >> 32);
    total as u32
}

/// A partial sum of bytes that begin at an odd offset of the data summed, made fit to add
/// to the sums of the bytes around it (RFC 1071: a rotation of the pairs swaps the bytes).
pub fn at_odd_offset(partial: u32) -> u32 {
    u32::from(fold(partial).swap_bytes())
}

/// `a < b` in sequence space (RFC 9293 §3.4, modulo 2^32).
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a <= b` in sequence space.
pub fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    const OURS: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const THEIRS: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn outgoing(flags: u8, mss: Option<u16>) -> Outgoing {
        Outgoing {
            dst_mac: OURS,
            src_mac: THEIRS,
            src_ip: v4_mapped([10, 0, 0, 2]),
            dst_ip: v4_mapped([10, 0, 0, 1]),
            src_port: 40000,
            dst_port: 80,
            seq: 0xfffffff0,
            ack: 7,
            flags,
            window: 5000,
            mss,
            ip_id: 9,
        }
    }

    fn frame_with(payload: &[u8], out: &Outgoing) -> Vec<u8> {
        let mut frame = vec![0u8; out.headers_len() + payload.len()];
        let header = out.headers_len();
        let payload_sum = copy_and_sum(&mut frame[header..], payload);
        out.write(&mut frame, payload_sum);
        frame
    }

    #[test]
    fn a_written_segment_parses_back_with_valid_checksums() {
        for payload in [&b""[..], b"x", b"GET / HTTP/1.1\r\n\r\n", &[0xff; 1460][..]] {
            let out = outgoing(flags::ACK | flags::PSH, None);
            let frame = frame_with(payload, &out);
            let segment = parse(&frame, OURS, &[v4_mapped([10, 0, 0, 1])]).expect("parses");
            assert_eq!(segment.payload, payload);
            assert_eq!(segment.seq, out.seq);
            assert_eq!(segment.ack, 7);
            assert_eq!(segment.src_port, 40000);
            assert_eq!(segment.flags, flags::ACK | flags::PSH);
            // smoltcp agrees about both checksums.
            let ip = smoltcp::wire::Ipv4Packet::new_checked(&frame[ETHERNET_LEN..]).unwrap();
            assert!(ip.verify_checksum());
            let tcp = smoltcp::wire::TcpPacket::new_checked(ip.payload()).unwrap();
            assert!(tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into()));
        }
    }

    #[test]
    fn the_mss_option_is_written_and_read() {
        let out = outgoing(flags::SYN | flags::ACK, Some(1460));
        let frame = frame_with(b"", &out);
        let segment = parse(&frame, OURS, &[v4_mapped([10, 0, 0, 1])]).unwrap();
        assert_eq!(segment.mss, Some(1460));
        assert!(segment.has(flags::SYN));
        assert_eq!(segment.seq_len(), 1);
    }

    #[test]
    fn damaged_or_foreign_frames_are_rejected() {
        let out = outgoing(flags::ACK, None);
        let good = frame_with(b"hello", &out);
        let ip = &[v4_mapped([10, 0, 0, 1])];
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(parse(&flipped, OURS, ip), Err(Reject::Checksum));
        assert_eq!(parse(&good, THEIRS, ip), Err(Reject::NotOurMac));
        assert_eq!(
            parse(&good, OURS, &[v4_mapped([10, 0, 0, 9])]),
            Err(Reject::NotOurAddress)
        );
        for len in 0..good.len() - 5 {
            assert!(parse(&good[..len], OURS, ip).is_err(), "cut at {len}");
        }
        // Ethernet padding after the IPv4 total length is ignored.
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 7]);
        assert_eq!(parse(&padded, OURS, ip).unwrap().payload, b"hello");
        // A fragment is not taken.
        let mut fragment = good.clone();
        fragment[ETHERNET_LEN + 6] |= 0x20;
        assert_eq!(parse(&fragment, OURS, ip), Err(Reject::NotTcp));
        // A data offset past the end.
        let mut offset = good.clone();
        offset[ETHERNET_LEN + IPV4_LEN + 12] = 0xf0;
        assert!(parse(&offset, OURS, ip).is_err());
        assert!(is_tcp_to(&good, &[80]));
        assert!(!is_tcp_to(&good, &[443]));
        // Our IPv6 address does not take an IPv4 segment.
        assert_eq!(parse(&good, OURS, &[HERE6]), Err(Reject::NotOurAddress));
    }

    const HERE6: Address = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const THERE6: Address = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34];

    fn outgoing6(flags: u8, mss: Option<u16>) -> Outgoing {
        Outgoing {
            src_ip: THERE6,
            dst_ip: HERE6,
            ..outgoing(flags, mss)
        }
    }

    #[test]
    fn an_ipv6_segment_is_written_and_parses_back_with_a_valid_checksum() {
        for payload in [&b""[..], b"x", b"GET / HTTP/1.1\r\n\r\n", &[0xa5; 1440][..]] {
            let out = outgoing6(flags::ACK | flags::PSH, None);
            let frame = frame_with(payload, &out);
            assert_eq!(
                frame.len(),
                ETHERNET_LEN + IPV6_LEN + TCP_LEN + payload.len()
            );
            assert_eq!(frame[12..14], [0x86, 0xdd]);
            let segment = parse(&frame, OURS, &[v4_mapped([10, 0, 0, 1]), HERE6]).unwrap();
            assert_eq!(segment.payload, payload);
            assert_eq!(segment.src_ip, THERE6);
            assert_eq!(segment.dst_ip, HERE6);
            assert_eq!(segment.seq, out.seq);
            assert!(is_tcp_to(&frame, &[80]));
            // smoltcp agrees about the checksum (RFC 8200 §8.1's pseudo-header).
            let ip = smoltcp::wire::Ipv6Packet::new_checked(&frame[ETHERNET_LEN..]).unwrap();
            assert_eq!(ip.hop_limit(), 64);
            let tcp = smoltcp::wire::TcpPacket::new_checked(ip.payload()).unwrap();
            assert!(tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into()));
            assert_eq!(tcp.payload(), payload);
        }
        let syn = frame_with(b"", &outgoing6(flags::SYN, Some(1440)));
        assert_eq!(parse(&syn, OURS, &[HERE6]).unwrap().mss, Some(1440));
        assert_eq!(max_mss(&HERE6), 1440);
        assert_eq!(max_mss(&v4_mapped([10, 0, 0, 1])), 1460);
    }

    #[test]
    fn damaged_or_foreign_ipv6_frames_are_rejected() {
        let good = frame_with(b"hello", &outgoing6(flags::ACK, None));
        let ours = &[HERE6];
        assert!(parse(&good, OURS, ours).is_ok());
        assert_eq!(parse(&good, OURS, &[THERE6]), Err(Reject::NotOurAddress));
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(parse(&flipped, OURS, ours), Err(Reject::Checksum));
        // No checksum covers the IPv6 header: a damaged address fails the TCP checksum.
        let mut moved = good.clone();
        moved[ETHERNET_LEN + 8 + 15] ^= 1;
        assert_eq!(parse(&moved, OURS, ours), Err(Reject::Checksum));
        for len in 0..good.len() - 5 {
            assert!(parse(&good[..len], OURS, ours).is_err(), "cut at {len}");
        }
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 9]);
        assert_eq!(parse(&padded, OURS, ours).unwrap().payload, b"hello");
        // An extension header (hop-by-hop options) before TCP is not read.
        let mut extension = good.clone();
        extension[ETHERNET_LEN + 6] = 0;
        assert_eq!(parse(&extension, OURS, ours), Err(Reject::NotTcp));
        assert!(!is_tcp_to(&extension, &[80]));
        // A jumbogram's zero payload length, and one past the end.
        for len in [0u16, 21 + 5 + 1] {
            let mut bad = good.clone();
            bad[ETHERNET_LEN + 4..ETHERNET_LEN + 6].copy_from_slice(&len.to_be_bytes());
            assert_eq!(parse(&bad, OURS, ours), Err(Reject::Truncated), "{len}");
        }
        // Sources that are no unicast host.
        let mapped = v4_mapped([10, 0, 0, 2]);
        let mut multicast = THERE6;
        multicast[0] = 0xff;
        let mut loopback = [0u8; 16];
        loopback[15] = 1;
        for source in [[0u8; 16], loopback, multicast, mapped] {
            let frame = frame_with(
                b"x",
                &Outgoing {
                    src_ip: source,
                    ..outgoing6(flags::ACK, None)
                },
            );
            assert_eq!(parse(&frame, OURS, ours), Err(Reject::BadSource));
        }
        // Version 4 in an IPv6 EtherType.
        let mut version = good.clone();
        version[ETHERNET_LEN] = 0x40;
        assert_eq!(parse(&version, OURS, ours), Err(Reject::NotTcp));
    }

    /// RFC 1071 word by word, as plainly as it can be written.
    fn naive(bytes: &[u8]) -> u16 {
        let mut total: u32 = 0;
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            total += u32::from(word);
            total = (total & 0xffff) + (total >> 16);
        }
        total as u16
    }

    #[test]
    fn sums_agree_with_rfc_1071_for_every_length_and_alignment() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
        for start in 0..4 {
            for len in [0, 1, 2, 3, 4, 5, 63, 64, 65, 1459, 1460, 2999 - start] {
                let bytes = &data[start..start + len];
                let ours = fold(sum(0, bytes));
                assert_eq!(ours, naive(bytes), "start {start} len {len}");
                let mut copy = vec![0u8; len];
                assert_eq!(fold(copy_and_sum(&mut copy, bytes)), naive(bytes));
            }
        }
    }

    #[test]
    fn word_sums_agree_with_pairs_at_every_offset_and_length() {
        let data: Vec<u8> = (0..700u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect();
        for start in 0..8 {
            for len in 0..200 {
                let bytes = &data[start..start + len];
                assert_eq!(fold(sum(0, bytes)), naive(bytes), "start {start} len {len}");
                assert_eq!(
                    fold(sum(0x1234, bytes)),
                    fold(add_sums(0x1234, u32::from(naive(bytes)))),
                    "start {start} len {len}, with an initial sum"
                );
            }
        }
    }

    #[test]
    fn copying_and_summing_agree_with_a_copy_and_a_sum_at_every_alignment() {
        let data: Vec<u8> = (0..700u32)
            .map(|i| (i.wrapping_mul(2_246_822_519) >> 9) as u8)
            .collect();
        let mut buffer = vec![0u8; 800];
        for from in 0..4 {
            for to in 0..4 {
                for len in [0, 1, 3, 15, 16, 17, 19, 20, 63, 64, 65, 66, 67, 200, 601] {
                    buffer.fill(0xee);
                    let src = &data[from..from + len];
                    let got = copy_and_sum(&mut buffer[to..to + len], src);
                    assert_eq!(&buffer[to..to + len], src, "from {from} to {to} len {len}");
                    assert_eq!(buffer[to + len], 0xee, "wrote past the end");
                    if to > 0 {
                        assert_eq!(buffer[to - 1], 0xee, "wrote before the start");
                    }
                    assert_eq!(fold(got), naive(src), "from {from} to {to} len {len}");
                }
            }
        }
        // A piece at an odd offset of the whole adds in turned round.
        let whole = &data[..101];
        let (a, b) = whole.split_at(51);
        let pieces = add_sums(sum(0, a), at_odd_offset(sum(0, b)));
        assert_eq!(fold(pieces), naive(whole));
    }

    /// The words of `source` in the machine's order, summed with end-around carries: what a
    /// [`CopyWords`] returns, as plainly as it can be written.
    fn naive_words(source: &[u8]) -> u64 {
        let mut total: u64 = 0;
        for word in source.chunks_exact(4) {
            total += u64::from(u32::from_ne_bytes([word[0], word[1], word[2], word[3]]));
            total = (total & 0xffff_ffff) + (total >> 32);
        }
        total % 0xffff_ffff
    }

    #[test]
    fn the_portable_copy_words_copies_and_sums_at_every_alignment() {
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        for from in 0..8 {
            for words in 0..40 {
                for fill in [None, Some(0xffu8)] {
                    let source: Vec<u8> = match fill {
                        Some(byte) => vec![byte; from + 4 * words],
                        None => data[..from + 4 * words].to_vec(),
                    };
                    let source = &source[from..];
                    let mut out = vec![0xeeee_eeeeu32; words + 1];
                    let total = copy_words(&mut out[..words], source);
                    let copied: Vec<u8> =
                        out[..words].iter().flat_map(|w| w.to_ne_bytes()).collect();
                    assert_eq!(copied, source, "from {from} words {words}");
                    assert_eq!(out[words], 0xeeee_eeee, "wrote past the end");
                    assert_eq!(
                        u64::from(total) % 0xffff_ffff,
                        naive_words(source),
                        "from {from} words {words}"
                    );
                    assert_eq!(total == 0, source.iter().all(|&b| b == 0));
                }
            }
        }
        // Given fewer bytes than words: the whole words it has.
        let mut out = [0u32; 4];
        let total = copy_words(&mut out, &data[..9]);
        assert_eq!(out[2..], [0, 0]);
        assert_eq!(u64::from(total), naive_words(&data[..8]));
    }

    #[test]
    fn copy_and_sum_with_another_word_routine_gives_the_same_sums() {
        /// A [`CopyWords`] that sums the plain way, and returns its sum as 0xffff_ffff
        /// rather than 0 when it is a multiple of 2^32 - 1 (both are allowed).
        fn plain(out: &mut [u32], source: &[u8]) -> u32 {
            for (to, word) in out.iter_mut().zip(source.chunks_exact(4)) {
                *to = u32::from_ne_bytes([word[0], word[1], word[2], word[3]]);
            }
            let total = naive_words(&source[..out.len() * 4]) as u32;
            if total == 0 && source.iter().any(|&b| b != 0) {
                u32::MAX
            } else {
                total
            }
        }
        let data: Vec<u8> = (0..700u32)
            .map(|i| (i.wrapping_mul(2_246_822_519) >> 9) as u8)
            .collect();
        let mut buffer = vec![0u8; 800];
        for from in 0..4 {
            for to in 0..4 {
                for len in [0, 1, 15, 16, 17, 19, 64, 65, 66, 67, 601] {
                    buffer.fill(0xee);
                    let src = &data[from..from + len];
                    let got = copy_and_sum_with(&mut buffer[to..to + len], src, plain);
                    assert_eq!(&buffer[to..to + len], src, "from {from} to {to} len {len}");
                    assert_eq!(buffer[to + len], 0xee, "wrote past the end");
                    assert_eq!(fold(got), naive(src), "from {from} to {to} len {len}");
                }
            }
        }
    }

    #[test]
    fn only_the_mapped_prefix_is_ipv4() {
        let mapped = v4_mapped([192, 0, 2, 7]);
        assert_eq!(as_v4(&mapped), Some([192, 0, 2, 7]));
        for at in 0..12 {
            for bit in 0..8 {
                let mut other = mapped;
                other[at] ^= 1 << bit;
                assert_eq!(as_v4(&other), None, "byte {at} bit {bit}");
            }
        }
        assert_eq!(as_v4(&[0; 16]), None);
    }

    #[test]
    fn sequence_comparisons_wrap() {
        assert!(seq_lt(0xffff_fff0, 5));
        assert!(!seq_lt(5, 0xffff_fff0));
        assert!(seq_le(5, 5));
    }

    #[test]
    fn options_parser_survives_garbage() {
        assert_eq!(read_mss(&[1, 1, 2, 4, 5, 180]), Some(1460));
        assert_eq!(read_mss(&[3, 3, 7, 2, 4, 1, 0]), Some(256));
        assert_eq!(read_mss(&[2]), None);
        assert_eq!(read_mss(&[5, 0, 2, 4, 1, 1]), None);
        assert_eq!(read_mss(&[5, 200]), None);
        assert_eq!(read_mss(&[0, 2, 4, 1, 1]), None);
    }
}
