//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, the fixed-layout payloads read through
//! checked views, and writers for the frames the server sends.
//!
//! Nothing here buffers: the connection ([`crate::conn`]) feeds payload bytes as they arrive
//! and calls these readers once a frame's fixed part is whole.

/// Length of a frame header.
pub const HEADER_LEN: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE's initial (and the server's only) value: the largest payload
/// accepted, and the largest sent.
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// Initial flow-control window of a connection and of each stream (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// Largest flow-control window (2^31 - 1).
pub const MAX_WINDOW: u32 = 0x7fff_ffff;
/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
pub mod kind {
    /// DATA.
    pub const DATA: u8 = 0x0;
    /// HEADERS.
    pub const HEADERS: u8 = 0x1;
    /// PRIORITY (deprecated; parsed and ignored).
    pub const PRIORITY: u8 = 0x2;
    /// RST_STREAM.
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS.
    pub const SETTINGS: u8 = 0x4;
    /// PUSH_PROMISE (a client must never send one).
    pub const PUSH_PROMISE: u8 = 0x5;
    /// PING.
    pub const PING: u8 = 0x6;
    /// GOAWAY.
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE.
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION.
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    /// END_STREAM (DATA, HEADERS).
    pub const END_STREAM: u8 = 0x1;
    /// ACK (SETTINGS, PING).
    pub const ACK: u8 = 0x1;
    /// END_HEADERS (HEADERS, CONTINUATION).
    pub const END_HEADERS: u8 = 0x4;
    /// PADDED (DATA, HEADERS).
    pub const PADDED: u8 = 0x8;
    /// PRIORITY (HEADERS).
    pub const PRIORITY: u8 = 0x20;
}

/// Error codes (RFC 9113 §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    /// Graceful shutdown.
    NoError = 0x0,
    /// A protocol error.
    ProtocolError = 0x1,
    /// An internal error.
    InternalError = 0x2,
    /// Flow-control limits were broken.
    FlowControlError = 0x3,
    /// SETTINGS not acknowledged in time.
    SettingsTimeout = 0x4,
    /// A frame on a half-closed stream.
    StreamClosed = 0x5,
    /// A frame of the wrong size.
    FrameSizeError = 0x6,
    /// The stream was refused before any processing.
    RefusedStream = 0x7,
    /// The stream is no longer needed.
    Cancel = 0x8,
    /// The HPACK state cannot be kept.
    CompressionError = 0x9,
    /// CONNECT failed.
    ConnectError = 0xa,
    /// The peer is generating excessive load.
    EnhanceYourCalm = 0xb,
    /// Transport security is inadequate.
    InadequateSecurity = 0xc,
    /// HTTP/1.1 is required.
    Http11Required = 0xd,
}

/// SETTINGS identifiers (RFC 9113 §6.5.2).
pub mod setting {
    /// SETTINGS_HEADER_TABLE_SIZE.
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    /// SETTINGS_ENABLE_PUSH.
    pub const ENABLE_PUSH: u16 = 0x2;
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    /// SETTINGS_MAX_FRAME_SIZE.
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    /// SETTINGS_MAX_HEADER_LIST_SIZE.
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// A frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length (24 bits).
    pub len: u32,
    /// Frame type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream identifier (the reserved bit cleared).
    pub stream: u32,
}

impl FrameHeader {
    /// Reads a header from its 9 bytes.
    pub fn parse(bytes: &[u8; HEADER_LEN]) -> Self {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *bytes;
        Self {
            len: u32::from_be_bytes([0, l0, l1, l2]),
            kind,
            flags,
            stream: u32::from_be_bytes([s0 & 0x7f, s1, s2, s3]),
        }
    }

    /// The header's 9 bytes. `len` must fit 24 bits (callers never exceed the frame size).
    pub fn to_bytes(self) -> [u8; HEADER_LEN] {
        let [_, l0, l1, l2] = self.len.min(0x00ff_ffff).to_be_bytes();
        let [s0, s1, s2, s3] = (self.stream & MAX_WINDOW).to_be_bytes();
        [l0, l1, l2, self.kind, self.flags, s0, s1, s2, s3]
    }

    /// Whether `flag` is set.
    pub fn has(self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Writes a frame (header then payload) at the start of `out`; `None` if it does not fit.
pub fn write_frame(out: &mut [u8], header: FrameHeader, payload: &[u8]) -> Option<usize> {
    let total = HEADER_LEN.checked_add(payload.len())?;
    let dest = out.get_mut(..total)?;
    let (head, body) = dest.split_at_mut(HEADER_LEN);
    head.copy_from_slice(&header.to_bytes());
    body.copy_from_slice(payload);
    Some(total)
}

/// A 31-bit big-endian value at `at` (the reserved bit dropped), if four bytes are there.
pub fn read_u31(bytes: &[u8], at: usize) -> Option<u32> {
    let four: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(four) & MAX_WINDOW)
}

/// A 32-bit big-endian value at `at`.
pub fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let four: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(four))
}

/// One SETTINGS entry (6 bytes): identifier and value.
pub fn read_setting(bytes: &[u8]) -> Option<(u16, u32)> {
    let two: [u8; 2] = bytes.get(..2)?.try_into().ok()?;
    Some((u16::from_be_bytes(two), read_u32(bytes, 2)?))
}

/// The priority fields of a HEADERS or PRIORITY frame (5 bytes): the stream depended on.
/// Priority signalling is deprecated (RFC 9113 §5.3.2); only a self-dependency matters.
pub fn read_dependency(bytes: &[u8]) -> Option<u32> {
    read_u31(bytes, 0)
}

/// Where the header block fragment lies in a HEADERS payload: strips the pad length, the
/// priority fields and the padding. `None`: the padding is longer than the payload
/// (a connection error, RFC 9113 §6.2) or the fields do not fit.
pub fn headers_fragment(
    header: FrameHeader,
    payload: &[u8],
) -> Option<(core::ops::Range<usize>, Option<u32>)> {
    let mut start = 0usize;
    let mut pad = 0usize;
    if header.has(flag::PADDED) {
        pad = usize::from(*payload.first()?);
        start = 1;
    }
    let mut dependency = None;
    if header.has(flag::PRIORITY) {
        dependency = Some(read_dependency(payload.get(start..)?)?);
        start = start.checked_add(5)?;
    }
    let end = payload.len().checked_sub(pad)?;
    if start > end {
        return None;
    }
    Some((start..end, dependency))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_what_was_written_and_drops_the_reserved_bit() {
        let header = FrameHeader {
            len: 0x01_0203,
            kind: kind::HEADERS,
            flags: flag::END_HEADERS | flag::END_STREAM,
            stream: 7,
        };
        let bytes = header.to_bytes();
        assert_eq!(bytes, [1, 2, 3, 1, 5, 0, 0, 0, 7]);
        assert_eq!(FrameHeader::parse(&bytes), header);
        let reserved = [0, 0, 0, 0, 0, 0x80, 0, 0, 1];
        assert_eq!(FrameHeader::parse(&reserved).stream, 1);
    }

    #[test]
    fn headers_padding_and_priority_are_stripped_or_refused() {
        let header = FrameHeader {
            len: 0,
            kind: kind::HEADERS,
            flags: flag::PADDED | flag::PRIORITY,
            stream: 1,
        };
        let payload = [2, 0, 0, 0, 3, 16, b'a', b'b', 0, 0];
        assert_eq!(headers_fragment(header, &payload), Some((6..8, Some(3))));
        // Padding longer than what follows the pad length.
        assert_eq!(headers_fragment(header, &[9, 0, 0, 0, 3, 16]), None);
        assert_eq!(headers_fragment(header, &[]), None);
        let plain = FrameHeader { flags: 0, ..header };
        assert_eq!(headers_fragment(plain, b"xyz"), Some((0..3, None)));
    }

    #[test]
    fn writers_refuse_a_short_buffer() {
        let header = FrameHeader {
            len: 8,
            kind: kind::PING,
            flags: flag::ACK,
            stream: 0,
        };
        let mut out = [0u8; 16];
        assert_eq!(write_frame(&mut out, header, &[1; 8]), None);
        let mut out = [0u8; 17];
        assert_eq!(write_frame(&mut out, header, &[1; 8]), Some(17));
        assert_eq!(read_u31(&[0xff; 4], 0), Some(MAX_WINDOW));
        assert_eq!(read_u31(&[0xff; 3], 0), None);
        assert_eq!(read_setting(&[0, 4, 0, 0, 1, 0]), Some((4, 256)));
    }
}
