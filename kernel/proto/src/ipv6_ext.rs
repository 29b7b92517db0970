//! IPv6 extension headers on received frames (RFC 8200 §4): the ones a host may pass over
//! are taken out of the frame, in place, so that the upper-layer header follows the fixed
//! header, as smoltcp and the stream pool expect; the ones that ask for more than Bramble
//! does (reassembly, source routing, options it must not ignore) make the frame dropped.
//!
//! smoltcp 0.14 understands a hop-by-hop header and nothing after it: a TCP SYN or an echo
//! request behind a destination-options header got a Parameter Problem, and a fragment one
//! too (it does not reassemble). The stream pool took only TCP straight after the fixed
//! header. With the headers removed here both see an ordinary packet: the upper-layer
//! checksum does not change (its pseudo-header holds the upper-layer length and protocol,
//! not the IPv6 payload length), and the answer goes out without extension headers, as any
//! answer from Bramble does.
//!
//! Taken out: hop-by-hop (only straight after the fixed header, §4.1) and destination
//! options whose every option is padding, a router alert (hop-by-hop), or unknown with the
//! action "skip" (the option type's two high bits 00, §4.2); a routing header with no
//! segments left (§4.4: ignored); an atomic fragment (offset 0, no more fragments: RFC 6946
//! §4, processed as a whole packet). Dropped: any other fragment, a routing header with
//! segments left, an option whose action is to discard, "no next header", more than
//! [`MAX_HEADERS`] headers, and anything that does not parse (lengths are checked against
//! the packet, arithmetic is checked). The frame is read through checked slices only.

/// EtherType of IPv6.
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
/// Ethernet II header.
const ETHERNET_LEN: usize = 14;
/// IPv6 fixed header (RFC 8200 §3).
const FIXED_LEN: usize = 40;
/// Next-header values of the extension headers (IANA "IPv6 Extension Header Types").
const HOP_BY_HOP: u8 = 0;
const ROUTING: u8 = 43;
const FRAGMENT: u8 = 44;
const NO_NEXT_HEADER: u8 = 59;
const DESTINATION_OPTIONS: u8 = 60;
/// Headers that a host must process and Bramble does not (ESP, AH, Mobility, HIP, Shim6,
/// the two experimental values): a packet carrying one is dropped rather than passed on
/// half understood.
const NOT_PROCESSED: [u8; 7] = [50, 51, 135, 139, 140, 253, 254];
/// Most extension headers looked at in one packet; a longer chain is dropped (RFC 8200
/// recommends each appear once: a legitimate chain is short).
pub const MAX_HEADERS: usize = 8;
/// Option types (RFC 8200 §4.2, RFC 2711).
const PAD1: u8 = 0;
const PADN: u8 = 1;
const ROUTER_ALERT: u8 = 5;

/// What [`strip`] did with a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stripped {
    /// Not an IPv6 frame, or one without extension headers: left as it was.
    Unchanged,
    /// Extension headers were taken out; the frame is now this long.
    Removed(usize),
    /// The frame is to be dropped, for this reason.
    Drop(DropReason),
}

/// Why [`strip`] says to drop a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// A header, or the packet, is shorter than its lengths say.
    Truncated,
    /// A fragment of a larger packet: Bramble does not reassemble.
    Fragment,
    /// A routing header with segments left: Bramble does not forward.
    Routing,
    /// An option whose type says "discard the packet" when not understood.
    Option,
    /// A hop-by-hop header anywhere but straight after the fixed header.
    MisplacedHopByHop,
    /// "No next header", a header Bramble does not process (ESP, AH, ...), or a chain
    /// longer than [`MAX_HEADERS`].
    Unsupported,
}

/// Takes the skippable IPv6 extension headers out of the Ethernet `frame` (in place), or
/// says to drop it. Frames that are not IPv6 are [`Stripped::Unchanged`]; so are IPv6
/// frames too short or malformed in their fixed header (the stack's own checks reject
/// those, as before).
pub fn strip(frame: &mut [u8]) -> Stripped {
    if frame.get(12..14) != Some(&ETHERTYPE_IPV6[..]) {
        return Stripped::Unchanged;
    }
    let Some(fixed) = frame.get(ETHERNET_LEN..ETHERNET_LEN + FIXED_LEN) else {
        return Stripped::Unchanged;
    };
    if fixed[0] >> 4 != 6 || !is_extension(fixed[6]) {
        return Stripped::Unchanged;
    }
    let payload_len = usize::from(u16::from_be_bytes([fixed[4], fixed[5]]));
    let Some(payload) = ETHERNET_LEN
        .checked_add(FIXED_LEN)
        .and_then(|start| frame.get(start..start.checked_add(payload_len)?))
    else {
        return Stripped::Drop(DropReason::Truncated);
    };
    let (upper, skipped) = match walk(fixed[6], payload) {
        Ok(found) => found,
        Err(reason) => return Stripped::Drop(reason),
    };
    // The upper-layer header now follows the fixed header.
    let start = ETHERNET_LEN + FIXED_LEN;
    let remaining = payload_len - skipped;
    frame.copy_within(start + skipped..start + payload_len, start);
    frame[ETHERNET_LEN + 6] = upper;
    frame[ETHERNET_LEN + 4..ETHERNET_LEN + 6].copy_from_slice(&(remaining as u16).to_be_bytes());
    Stripped::Removed(start + remaining)
}

/// Whether `next_header` names an extension header (one of those [`walk`] looks at).
fn is_extension(next_header: u8) -> bool {
    matches!(
        next_header,
        HOP_BY_HOP | ROUTING | FRAGMENT | DESTINATION_OPTIONS | NO_NEXT_HEADER
    ) || NOT_PROCESSED.contains(&next_header)
}

/// Follows the chain from `first` through `payload` (the IPv6 payload): the upper-layer
/// protocol and the bytes of extension headers before it, or why to drop the packet.
fn walk(first: u8, payload: &[u8]) -> Result<(u8, usize), DropReason> {
    let mut next = first;
    let mut offset = 0usize;
    for position in 0..MAX_HEADERS {
        let header = payload.get(offset..).ok_or(DropReason::Truncated)?;
        let len = match next {
            HOP_BY_HOP | DESTINATION_OPTIONS => {
                if next == HOP_BY_HOP && position != 0 {
                    return Err(DropReason::MisplacedHopByHop);
                }
                let len = options_header_len(header)?;
                check_options(&header[2..len], next == HOP_BY_HOP)?;
                len
            }
            ROUTING => {
                let len = options_header_len(header)?;
                if header.get(3).copied().ok_or(DropReason::Truncated)? != 0 {
                    return Err(DropReason::Routing);
                }
                len
            }
            FRAGMENT => {
                let fragment = header.get(..8).ok_or(DropReason::Truncated)?;
                let offset_and_more = u16::from_be_bytes([fragment[2], fragment[3]]);
                // Offset in the high 13 bits, M in the lowest: an atomic fragment has
                // neither.
                if offset_and_more & 0xfff9 != 0 {
                    return Err(DropReason::Fragment);
                }
                8
            }
            NO_NEXT_HEADER => return Err(DropReason::Unsupported),
            protocol if NOT_PROCESSED.contains(&protocol) => {
                return Err(DropReason::Unsupported);
            }
            upper => return Ok((upper, offset)),
        };
        next = header[0];
        offset = offset.checked_add(len).ok_or(DropReason::Truncated)?;
    }
    if is_extension(next) {
        return Err(DropReason::Unsupported);
    }
    Ok((next, offset))
}

/// The length of a header whose second byte is its length in 8-byte units beyond the
/// first 8 (hop-by-hop, destination options, routing), checked against `header`.
fn options_header_len(header: &[u8]) -> Result<usize, DropReason> {
    let units = usize::from(*header.get(1).ok_or(DropReason::Truncated)?);
    let len = units
        .checked_add(1)
        .and_then(|n| n.checked_mul(8))
        .ok_or(DropReason::Truncated)?;
    if len > header.len() {
        return Err(DropReason::Truncated);
    }
    Ok(len)
}

/// Checks the type-length-value options of a hop-by-hop (`hop_by_hop`) or destination
/// options header: each must be one a host may pass over.
fn check_options(mut options: &[u8], hop_by_hop: bool) -> Result<(), DropReason> {
    while let Some((&kind, rest)) = options.split_first() {
        if kind == PAD1 {
            options = rest;
            continue;
        }
        let (&len, rest) = rest.split_first().ok_or(DropReason::Truncated)?;
        let data_len = usize::from(len);
        if data_len > rest.len() {
            return Err(DropReason::Truncated);
        }
        let known = kind == PADN || (hop_by_hop && kind == ROUTER_ALERT && data_len == 2);
        // The two high bits of an unknown option's type: 00 skip it, otherwise discard.
        if !known && kind >> 6 != 0 {
            return Err(DropReason::Option);
        }
        options = &rest[data_len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// An Ethernet frame with an IPv6 header whose next header is `first`, then `payload`
    /// (extension headers and the upper layer), then `padding` bytes of Ethernet padding.
    fn frame(first: u8, payload: &[u8], padding: usize) -> Vec<u8> {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&ETHERTYPE_IPV6);
        frame.extend_from_slice(&[0x60, 0, 0, 0]);
        frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        frame.extend_from_slice(&[first, 64]);
        frame.extend_from_slice(&[0xfd; 32]);
        frame.extend_from_slice(payload);
        frame.extend(core::iter::repeat_n(0xee, padding));
        frame
    }

    /// A destination options (or hop-by-hop) header before `next` with `options`, padded
    /// with PadN to a multiple of 8 bytes.
    fn options_header(next: u8, options: &[u8]) -> Vec<u8> {
        let mut header = vec![next, 0];
        header.extend_from_slice(options);
        let pad = (8 - header.len() % 8) % 8;
        match pad {
            0 => {}
            1 => header.push(PAD1),
            n => {
                header.extend_from_slice(&[PADN, (n - 2) as u8]);
                header.extend(core::iter::repeat_n(0, n - 2));
            }
        }
        header[1] = (header.len() / 8 - 1) as u8;
        header
    }

    const UPPER: &[u8] = b"upper-layer bytes";

    fn stripped(mut frame: Vec<u8>) -> (Stripped, Vec<u8>) {
        let result = strip(&mut frame);
        if let Stripped::Removed(len) = result {
            frame.truncate(len);
        }
        (result, frame)
    }

    #[test]
    fn frames_without_extension_headers_are_left_alone() {
        let plain = frame(6, UPPER, 4);
        assert_eq!(
            stripped(plain.clone()),
            (Stripped::Unchanged, plain.clone())
        );
        let mut ipv4 = plain.clone();
        ipv4[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(stripped(ipv4).0, Stripped::Unchanged);
        let short = plain[..30].to_vec();
        assert_eq!(stripped(short).0, Stripped::Unchanged);
    }

    #[test]
    fn destination_options_and_hop_by_hop_are_taken_out() {
        // An unknown option of action "skip" (type 0x1e), as a scanner or a test tool sends.
        let mut payload = options_header(DESTINATION_OPTIONS, &[ROUTER_ALERT, 2, 0, 0]);
        payload.extend(options_header(58, &[0x1e, 3, 1, 2, 3]));
        payload.extend_from_slice(UPPER);
        let (result, out) = stripped(frame(HOP_BY_HOP, &payload, 6));
        assert_eq!(
            result,
            Stripped::Removed(ETHERNET_LEN + FIXED_LEN + UPPER.len())
        );
        assert_eq!(out, frame(58, UPPER, 0));
    }

    #[test]
    fn an_empty_routing_header_and_an_atomic_fragment_are_taken_out() {
        let mut payload = vec![FRAGMENT, 0, 0, 0, 0, 0, 0, 0];
        payload.extend_from_slice(&[6, 0, 0, 0, 0x12, 0x34, 0x56, 0x78]);
        payload.extend_from_slice(UPPER);
        let (result, out) = stripped(frame(ROUTING, &payload, 0));
        assert!(matches!(result, Stripped::Removed(_)));
        assert_eq!(out, frame(6, UPPER, 0));
    }

    #[test]
    fn what_bramble_does_not_do_is_dropped() {
        let drop = |first: u8, payload: &[u8]| stripped(frame(first, payload, 0)).0;
        // Fragments: the first (M set) and a later one (offset 1).
        for bits in [[0, 1], [0, 8]] {
            let mut payload = vec![6, 0, bits[0], bits[1], 0, 0, 0, 1];
            payload.extend_from_slice(UPPER);
            assert_eq!(
                drop(FRAGMENT, &payload),
                Stripped::Drop(DropReason::Fragment)
            );
        }
        // A routing header with a segment left.
        let mut routing = vec![6, 2, 4, 1, 0, 0, 0, 0];
        routing.extend_from_slice(&[0; 16]);
        assert_eq!(drop(ROUTING, &routing), Stripped::Drop(DropReason::Routing));
        // Unknown options whose action is to discard (01, 10, 11).
        for kind in [0x5e, 0x9e, 0xde] {
            let header = options_header(6, &[kind, 0]);
            assert_eq!(
                drop(DESTINATION_OPTIONS, &header),
                Stripped::Drop(DropReason::Option)
            );
        }
        // A router alert means nothing in destination options, but its type says "skip";
        // a jumbo payload option (type 0xc2) is never passed over.
        let header = options_header(6, &[ROUTER_ALERT, 2, 0, 0]);
        assert!(matches!(
            drop(DESTINATION_OPTIONS, &header),
            Stripped::Removed(_)
        ));
        let header = options_header(6, &[0xc2, 4, 0, 1, 0, 0]);
        assert_eq!(
            drop(HOP_BY_HOP, &header),
            Stripped::Drop(DropReason::Option)
        );
        // Hop-by-hop after another header.
        let mut payload = options_header(HOP_BY_HOP, &[]);
        payload.extend(options_header(6, &[]));
        assert_eq!(
            drop(DESTINATION_OPTIONS, &payload),
            Stripped::Drop(DropReason::MisplacedHopByHop)
        );
        // No next header, ESP, and a chain that never ends.
        assert_eq!(
            drop(NO_NEXT_HEADER, &[]),
            Stripped::Drop(DropReason::Unsupported)
        );
        let header = options_header(50, &[]);
        assert_eq!(
            drop(DESTINATION_OPTIONS, &header),
            Stripped::Drop(DropReason::Unsupported)
        );
        let mut chain = Vec::new();
        for _ in 0..MAX_HEADERS + 1 {
            chain.extend(options_header(DESTINATION_OPTIONS, &[]));
        }
        assert_eq!(
            drop(DESTINATION_OPTIONS, &chain),
            Stripped::Drop(DropReason::Unsupported)
        );
    }

    #[test]
    fn lengths_beyond_the_packet_are_truncation_not_a_panic() {
        // A header claiming 255 units, an option longer than its header, a payload length
        // beyond the frame, a fragment header cut short.
        let drop = |first: u8, payload: &[u8]| stripped(frame(first, payload, 0)).0;
        assert_eq!(
            drop(DESTINATION_OPTIONS, &[6, 255, 1, 0, 0, 0, 0, 0]),
            Stripped::Drop(DropReason::Truncated)
        );
        assert_eq!(
            drop(DESTINATION_OPTIONS, &[6, 0, 0x1e, 9, 0, 0, 0, 0]),
            Stripped::Drop(DropReason::Truncated)
        );
        assert_eq!(
            drop(FRAGMENT, &[6, 0, 0]),
            Stripped::Drop(DropReason::Truncated)
        );
        let mut long = frame(DESTINATION_OPTIONS, &options_header(6, &[]), 0);
        long[ETHERNET_LEN + 4..ETHERNET_LEN + 6].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(stripped(long).0, Stripped::Drop(DropReason::Truncated));
        // Every prefix of a good frame, and every byte flipped, is handled.
        let mut payload = options_header(6, &[0x1e, 1, 0]);
        payload.extend_from_slice(UPPER);
        let good = frame(DESTINATION_OPTIONS, &payload, 0);
        for len in 0..good.len() {
            let _ = stripped(good[..len].to_vec());
        }
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[at] ^= 1 << bit;
                if let (Stripped::Removed(len), _) = stripped(bad.clone()) {
                    assert!(len <= bad.len());
                }
            }
        }
    }
}
