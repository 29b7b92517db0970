//! PCP (RFC 6887) messages: the MAP request the client sends and a checked view of the
//! server's responses (MAP, and the unsolicited ANNOUNCE a restarted server multicasts).

use super::WireError;

/// PCP's version number.
pub const VERSION: u8 = 2;
/// The ANNOUNCE opcode.
pub const OP_ANNOUNCE: u8 = 0;
/// The MAP opcode.
pub const OP_MAP: u8 = 1;
/// The response bit of the opcode byte.
const RESPONSE: u8 = 0x80;
/// IANA protocol number of TCP.
pub const PROTOCOL_TCP: u8 = 6;
/// Common header length.
const HEADER_LEN: usize = 24;
/// A MAP request's or response's length (header and MAP data, no options).
pub const MAP_LEN: usize = HEADER_LEN + 36;
/// Longest PCP message (RFC 6887 §7).
const MAX_LEN: usize = 1100;

/// Result codes (RFC 6887 §7.4) the client tells apart.
pub const RESULT_SUCCESS: u8 = 0;
/// The server speaks another version (a NAT-PMP-only gateway answers so).
pub const RESULT_UNSUPP_VERSION: u8 = 1;
/// Mapping is turned off, or this client may not map.
pub const RESULT_NOT_AUTHORIZED: u8 = 2;
/// The server has no external address to map on (it sits behind another NAT, or its
/// uplink is down).
pub const RESULT_NETWORK_FAILURE: u8 = 7;
/// No room for another mapping.
pub const RESULT_NO_RESOURCES: u8 = 8;
/// The suggested external port is taken and the server would not pick another (with
/// PREFER_FAILURE, which is not sent; some servers say it anyway).
pub const RESULT_CANNOT_PROVIDE_EXTERNAL: u8 = 11;
/// The client address in the request is not the packet's source (another NAT between).
pub const RESULT_ADDRESS_MISMATCH: u8 = 12;

/// `address` as an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), PCP's form for IPv4.
pub fn mapped(address: [u8; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[10] = 0xff;
    out[11] = 0xff;
    out[12..].copy_from_slice(&address);
    out
}

/// The IPv4 address inside an IPv4-mapped one, if it is one.
pub fn unmapped(address: [u8; 16]) -> Option<[u8; 4]> {
    (address[..10] == [0; 10] && address[10..12] == [0xff, 0xff])
        .then(|| [address[12], address[13], address[14], address[15]])
}

/// What a MAP request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapRequest {
    /// Identifies the mapping: the same for its renewals and deletion (RFC 6887 §11.1).
    pub nonce: [u8; 12],
    /// The client's own address (IPv4-mapped for IPv4).
    pub client: [u8; 16],
    /// The internal port.
    pub internal: u16,
    /// The external port wished for.
    pub external: u16,
    /// The external address wished for (`::ffff:0.0.0.0` for any IPv4 one; `::` for any
    /// IPv6 one).
    pub external_address: [u8; 16],
    /// Seconds asked for; 0 deletes.
    pub lifetime: u32,
}

impl MapRequest {
    /// The request for TCP, without options.
    pub fn encode(&self) -> [u8; MAP_LEN] {
        let mut out = [0u8; MAP_LEN];
        out[0] = VERSION;
        out[1] = OP_MAP;
        out[4..8].copy_from_slice(&self.lifetime.to_be_bytes());
        out[8..24].copy_from_slice(&self.client);
        out[24..36].copy_from_slice(&self.nonce);
        out[36] = PROTOCOL_TCP;
        out[40..42].copy_from_slice(&self.internal.to_be_bytes());
        out[42..44].copy_from_slice(&self.external.to_be_bytes());
        out[44..60].copy_from_slice(&self.external_address);
        out
    }
}

/// A MAP response's opcode data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapData {
    /// The request's nonce, echoed.
    pub nonce: [u8; 12],
    /// The protocol (6: TCP).
    pub protocol: u8,
    /// The internal port.
    pub internal: u16,
    /// The external port assigned.
    pub external: u16,
    /// The external address assigned (IPv4-mapped for IPv4).
    pub external_address: [u8; 16],
}

/// A checked PCP response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    /// The opcode answered ([`OP_MAP`], [`OP_ANNOUNCE`], or another).
    pub opcode: u8,
    /// The result code.
    pub result: u8,
    /// Seconds the mapping lasts (on success), or until retrying makes sense (on error).
    pub lifetime: u32,
    /// Seconds since the server's state was last lost.
    pub epoch: u32,
    /// The MAP data, for a MAP response that carries it (error responses may not).
    pub map: Option<MapData>,
}

fn array<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], WireError> {
    let end = at.checked_add(N).ok_or(WireError::Truncated)?;
    let field = bytes.get(at..end).ok_or(WireError::Truncated)?;
    let mut out = [0u8; N];
    out.copy_from_slice(field);
    Ok(out)
}

/// Checks `bytes` as a PCP response (RFC 6887 §7.2, §8.3): version 2, the response bit, a
/// length that is a multiple of 4 and at most 1,100 bytes. Options after the MAP data are
/// not read.
pub fn parse(bytes: &[u8]) -> Result<Response, WireError> {
    if bytes.len() < HEADER_LEN {
        return Err(WireError::Truncated);
    }
    if bytes[0] != VERSION {
        return Err(WireError::Version);
    }
    if bytes[1] & RESPONSE == 0 {
        return Err(WireError::NotAReply);
    }
    if bytes.len() > MAX_LEN || !bytes.len().is_multiple_of(4) {
        return Err(WireError::Length);
    }
    let opcode = bytes[1] & !RESPONSE;
    let result = bytes[3];
    let lifetime = u32::from_be_bytes(array(bytes, 4)?);
    let epoch = u32::from_be_bytes(array(bytes, 8)?);
    let map = if opcode == OP_MAP && bytes.len() >= MAP_LEN {
        Some(MapData {
            nonce: array(bytes, 24)?,
            protocol: bytes[36],
            internal: u16::from_be_bytes(array(bytes, 40)?),
            external: u16::from_be_bytes(array(bytes, 42)?),
            external_address: array(bytes, 44)?,
        })
    } else if opcode == OP_MAP && result == RESULT_SUCCESS {
        // A success must say what was mapped.
        return Err(WireError::Truncated);
    } else {
        None
    };
    Ok(Response {
        opcode,
        result,
        lifetime,
        epoch,
        map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> MapRequest {
        MapRequest {
            nonce: [7; 12],
            client: mapped([192, 168, 1, 50]),
            internal: 443,
            external: 443,
            external_address: mapped([0; 4]),
            lifetime: 7200,
        }
    }

    #[test]
    fn map_request_layout() {
        let bytes = request().encode();
        assert_eq!(&bytes[..4], &[2, 1, 0, 0]);
        assert_eq!(&bytes[4..8], &7200u32.to_be_bytes());
        assert_eq!(&bytes[18..24], &[0xff, 0xff, 192, 168, 1, 50]);
        assert_eq!(&bytes[24..36], &[7; 12]);
        assert_eq!(bytes[36], 6);
        assert_eq!(&bytes[40..44], &[1, 187, 1, 187]);
        assert_eq!(unmapped(mapped([1, 2, 3, 4])), Some([1, 2, 3, 4]));
        assert_eq!(unmapped([0; 16]), None);
    }

    #[test]
    fn responses_are_checked() {
        let mut response = request().encode();
        response[1] |= 0x80;
        response[3] = 0;
        response[8..12].copy_from_slice(&42u32.to_be_bytes());
        response[44..60].copy_from_slice(&mapped([203, 0, 113, 9]));
        let parsed = parse(&response).unwrap();
        assert_eq!(parsed.opcode, OP_MAP);
        assert_eq!(parsed.epoch, 42);
        assert_eq!(parsed.lifetime, 7200);
        let map = parsed.map.unwrap();
        assert_eq!((map.internal, map.external, map.protocol), (443, 443, 6));
        assert_eq!(unmapped(map.external_address), Some([203, 0, 113, 9]));

        // An error with only the header, an announce, and what must be refused.
        let mut header = [0u8; 24];
        header[0] = 2;
        header[1] = 0x81;
        header[3] = RESULT_NETWORK_FAILURE;
        assert_eq!(parse(&header).unwrap().map, None);
        header[3] = 0;
        assert_eq!(parse(&header), Err(WireError::Truncated));
        header[1] = 0x80;
        assert_eq!(parse(&header).unwrap().opcode, OP_ANNOUNCE);
        assert_eq!(parse(&response[..23]), Err(WireError::Truncated));
        assert_eq!(parse(&response[..58]), Err(WireError::Length));
        response[1] = 1;
        assert_eq!(parse(&response), Err(WireError::NotAReply));
        response[0] = 0;
        assert_eq!(parse(&response), Err(WireError::Version));
        assert_eq!(parse(&[0u8; 1104]), Err(WireError::Version));
    }
}
