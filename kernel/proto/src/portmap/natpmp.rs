//! NAT-PMP (RFC 6886) messages: the requests the client sends and a checked view of the
//! gateway's replies (and of its unsolicited address announcements).

use super::WireError;

/// The gateway's port for requests (NAT-PMP and PCP share it).
pub const SERVER_PORT: u16 = 5351;
/// The port announcements are multicast to (224.0.0.1), and the one the client sends from.
pub const CLIENT_PORT: u16 = 5350;
/// NAT-PMP's version number.
pub const VERSION: u8 = 0;
/// Opcode of the external address request.
pub const OP_ADDRESS: u8 = 0;
/// Opcode of a TCP mapping request.
pub const OP_MAP_TCP: u8 = 2;
/// Set in every reply's opcode.
pub const REPLY: u8 = 128;

/// Result code 1: unsupported version (also how a PCP-only or NAT-PMP-only gateway answers
/// the other protocol, RFC 6887 §9).
pub const RESULT_UNSUPPORTED_VERSION: u16 = 1;
/// Result code 2: not authorized (mapping turned off on the gateway).
pub const RESULT_NOT_AUTHORIZED: u16 = 2;
/// Result code 3: network failure (the gateway has no external address, say behind
/// another NAT).
pub const RESULT_NETWORK_FAILURE: u16 = 3;
/// Result code 4: out of resources.
pub const RESULT_OUT_OF_RESOURCES: u16 = 4;

/// The external address request (RFC 6886 §3.2).
pub fn address_request() -> [u8; 2] {
    [VERSION, OP_ADDRESS]
}

/// A TCP mapping request (RFC 6886 §3.3): `internal` port, the `external` one wished for,
/// for `lifetime` seconds (0 with external 0: delete).
pub fn map_request(internal: u16, external: u16, lifetime: u32) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[0] = VERSION;
    out[1] = OP_MAP_TCP;
    out[4..6].copy_from_slice(&internal.to_be_bytes());
    out[6..8].copy_from_slice(&external.to_be_bytes());
    out[8..12].copy_from_slice(&lifetime.to_be_bytes());
    out
}

/// A checked NAT-PMP reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The external address (a reply, or an unsolicited announcement).
    Address {
        /// Seconds since the gateway's mappings were last lost (its start).
        epoch: u32,
        /// The external IPv4 address.
        address: [u8; 4],
    },
    /// A TCP mapping granted.
    Map {
        /// See [`Reply::Address`].
        epoch: u32,
        /// The internal port.
        internal: u16,
        /// The external port the gateway chose.
        external: u16,
        /// Seconds the mapping lasts.
        lifetime: u32,
    },
    /// A request refused.
    Error {
        /// The request's opcode.
        opcode: u8,
        /// The result code (not 0).
        result: u16,
    },
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    let field = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([field[0], field[1]]))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([field[0], field[1], field[2], field[3]]))
}

/// Checks `bytes` as a NAT-PMP reply. An error reply may be as short as its result code
/// (gateways that answer a PCP request this way send only the header).
pub fn parse(bytes: &[u8]) -> Result<Reply, WireError> {
    if bytes.len() < 4 {
        return Err(WireError::Truncated);
    }
    if bytes[0] != VERSION {
        return Err(WireError::Version);
    }
    let opcode = bytes[1];
    if opcode & REPLY == 0 {
        return Err(WireError::NotAReply);
    }
    let request = opcode & !REPLY;
    let result = u16_at(bytes, 2).ok_or(WireError::Truncated)?;
    if result != 0 {
        return Ok(Reply::Error {
            opcode: request,
            result,
        });
    }
    let epoch = u32_at(bytes, 4).ok_or(WireError::Truncated)?;
    match request {
        OP_ADDRESS => {
            let field = bytes.get(8..12).ok_or(WireError::Truncated)?;
            Ok(Reply::Address {
                epoch,
                address: [field[0], field[1], field[2], field[3]],
            })
        }
        OP_MAP_TCP => Ok(Reply::Map {
            epoch,
            internal: u16_at(bytes, 8).ok_or(WireError::Truncated)?,
            external: u16_at(bytes, 10).ok_or(WireError::Truncated)?,
            lifetime: u32_at(bytes, 12).ok_or(WireError::Truncated)?,
        }),
        _ => Err(WireError::Opcode),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_laid_out_as_rfc_6886_says() {
        assert_eq!(address_request(), [0, 0]);
        assert_eq!(
            map_request(80, 8080, 7200),
            [0, 2, 0, 0, 0, 80, 0x1f, 0x90, 0, 0, 0x1c, 0x20]
        );
    }

    #[test]
    fn replies_are_checked() {
        let address = [0, 128, 0, 0, 0, 0, 0, 9, 203, 0, 113, 7];
        assert_eq!(
            parse(&address),
            Ok(Reply::Address {
                epoch: 9,
                address: [203, 0, 113, 7]
            })
        );
        let map = [0, 130, 0, 0, 0, 0, 1, 0, 0, 80, 0, 81, 0, 0, 0, 120];
        assert_eq!(
            parse(&map),
            Ok(Reply::Map {
                epoch: 256,
                internal: 80,
                external: 81,
                lifetime: 120
            })
        );
        assert_eq!(
            parse(&[0, 130, 0, 3]),
            Ok(Reply::Error {
                opcode: 2,
                result: 3
            })
        );
        assert_eq!(parse(&map[..15]), Err(WireError::Truncated));
        assert_eq!(parse(&address[..11]), Err(WireError::Truncated));
        assert_eq!(parse(&[0, 2, 0, 0]), Err(WireError::NotAReply));
        assert_eq!(parse(&[2, 130, 0, 0]), Err(WireError::Version));
        assert_eq!(parse(&[0, 129, 0, 0, 0, 0, 0, 0]), Err(WireError::Opcode));
        assert_eq!(parse(&[0]), Err(WireError::Truncated));
    }
}
