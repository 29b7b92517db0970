//! The site upload (issue 28): `PUT /.well-known/bramble/site` hands a signed site to an
//! [`SiteUpload`] handler, which the board implements over the card writer
//! (`bramble_publish::upload`); this crate knows nothing of the card, the manifest's format
//! or the signature, only the request's framing.
//!
//! # The request
//!
//! ```text
//! PUT /.well-known/bramble/site HTTP/1.1
//! Host: garden.example
//! Bramble-Manifest: <the 128-byte manifest, hex>
//! Bramble-Signature: <its 64-byte Ed25519 signature, hex>
//! Content-Length: <bytes of the image this request carries>
//! Content-Range: bytes FIRST-LAST/TOTAL        (a resume only)
//!
//! <the image, or its bytes from FIRST>
//! ```
//!
//! The manifest and signature travel in header fields, hex, so that the handler checks
//! them (signature, host, version, size) before a single body byte is taken, and a refusal
//! comes back at once; a body format with the manifest in front would need the handler to
//! buffer a prefix, and a resume would have to repeat it inside the byte range. Hex keeps
//! the fields plain tokens (no padding, no alphabet variants) with a trivial checked
//! decoder ([`decode_hex`]); 384 bytes of header are nothing beside the image. A resume
//! sends the same manifest with `Content-Range: bytes FIRST-(TOTAL-1)/TOTAL` (RFC 9110
//! §14.4, as on a PUT for partial content), FIRST being where the board says the body
//! continues: `GET /.well-known/bramble/site` answers the upload under way, its manifest's
//! version and SHA-256 and the bytes received.
//!
//! # What the engine does
//!
//! Only on a connection that came in over TLS (plain HTTP gets 403 `https-only`, the body
//! discarded), HTTP/1.1 with a `Content-Length` (a chunked body gets 411; HTTP/2 requests
//! reach the engine without their length, so they get it too). The head goes to
//! [`SiteUpload::begin`], which refuses (its answer is sent at once; the body is read and
//! discarded, so the client sees the answer rather than a reset) or takes the body: then
//! every received byte goes to [`SiteUpload::write`] as it arrives (nothing is buffered
//! here beyond the connection's request buffer), and once the last one is in,
//! [`SiteUpload::finish`] makes the answer, which is sent as the response. A connection
//! that goes away mid-body tells the handler ([`SiteUpload::detach`]), which keeps what it
//! received for a resume. A body with no byte for the header deadline (`header_micros`)
//! ends the connection the same way.
//!
//! Answers are JSON, `{"error":"CODE","message":"..."}` for a refusal and whatever the
//! handler writes for a success, with the handler's status ([`Answer`]).

use core::fmt::{self, Write};
use core::net::IpAddr;

use bramble_hal::Instant;

/// The upload's path.
pub const UPLOAD_PATH: &str = "/.well-known/bramble/site";
/// Longest manifest the engine decodes from `Bramble-Manifest` (the handler checks the
/// exact length).
pub const MAX_MANIFEST_LEN: usize = 256;
/// Longest signature the engine decodes from `Bramble-Signature`.
pub const MAX_SIGNATURE_LEN: usize = 128;
/// Longest JSON answer.
pub const ANSWER_LEN: usize = 512;

/// A JSON answer and its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub json: heapless::String<ANSWER_LEN>,
}

impl Answer {
    /// `{"error":"CODE","message":"MESSAGE"}` with `status`; the message is escaped (and cut
    /// if it does not fit).
    pub fn error(status: u16, code: &str, message: fmt::Arguments<'_>) -> Answer {
        let mut json = heapless::String::new();
        let _ = json.push_str("{\"error\":\"");
        let _ = JsonText(&mut json).write_str(code);
        let _ = json.push_str("\",\"message\":\"");
        // Leaves room for the closing `"}`.
        let mut text = Bounded {
            out: &mut json,
            room: ANSWER_LEN - 2,
        };
        let _ = JsonText(&mut text).write_fmt(message);
        let _ = json.push_str("\"}");
        Answer { status, json }
    }

    /// An answer whose JSON the caller writes (a success, a state).
    pub fn json(status: u16, write: impl FnOnce(&mut dyn Write) -> fmt::Result) -> Answer {
        let mut json = heapless::String::new();
        if write(&mut json).is_err() {
            return Answer::error(500, "internal", format_args!("the answer did not fit"));
        }
        Answer { status, json }
    }
}

/// Writes into a string up to `room` bytes, at a character boundary.
struct Bounded<'o, const N: usize> {
    out: &'o mut heapless::String<N>,
    room: usize,
}

impl<const N: usize> Write for Bounded<'_, N> {
    /// All of `s` or nothing (an escape is never cut in two).
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.out.len() + s.len() > self.room.min(N) {
            return Err(fmt::Error);
        }
        self.out.push_str(s).map_err(|_| fmt::Error)
    }
}

/// Text inside a JSON string: `"` and `\` escaped, control characters as `\u00XX`; each
/// character or escape goes to the writer in one `write_str`.
pub struct JsonText<'w, W: Write + ?Sized>(pub &'w mut W);

impl<W: Write + ?Sized> Write for JsonText<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for c in s.chars() {
            match c {
                '"' => self.0.write_str("\\\"")?,
                '\\' => self.0.write_str("\\\\")?,
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let code = c as usize;
                    let escape = [b'\\', b'u', b'0', b'0', HEX[code >> 4], HEX[code & 15]];
                    // ASCII by construction.
                    self.0
                        .write_str(core::str::from_utf8(&escape).map_err(|_| fmt::Error)?)?;
                }
                c => {
                    let mut utf8 = [0u8; 4];
                    self.0.write_str(c.encode_utf8(&mut utf8))?;
                }
            }
        }
        Ok(())
    }
}

/// The head of an upload, as the engine read it.
#[derive(Clone, Copy, Debug)]
pub struct UploadHead<'r> {
    /// The manifest, decoded from `Bramble-Manifest`.
    pub manifest: &'r [u8],
    /// Its signature, decoded from `Bramble-Signature`.
    pub signature: &'r [u8],
    /// Where this request's body starts in the image (`Content-Range`'s first byte, else 0).
    pub offset: u64,
    /// Bytes of the body this request carries (`Content-Length`).
    pub length: u64,
    /// The whole image's length, when a `Content-Range` named it.
    pub total: Option<u64>,
    /// The connection's source.
    pub peer: Option<IpAddr>,
    /// When the head arrived.
    pub now: Instant,
}

/// What takes uploads: the board's card writer. One upload at a time is the handler's
/// rule (a second gets its `busy` answer).
///
/// A refusal is the whole answer (about half a KiB on the stack, once per request; no heap
/// in this crate to box it in).
#[allow(clippy::result_large_err)]
pub trait SiteUpload {
    /// `GET /.well-known/bramble/site`: the upload under way (for a resume) and the live
    /// version.
    fn state(&mut self, now: Instant) -> Answer;
    /// A `PUT`'s head: `Ok` to take its body from `head.offset`, or the answer to send at
    /// once (a refusal, or the result of a request that needs no body, such as a rollback);
    /// the body, if any, is then read and discarded.
    fn begin(&mut self, head: &UploadHead<'_>) -> Result<(), Answer>;
    /// The body's next bytes, at `offset` of the image. An error ends the upload: the
    /// answer is sent, the rest of the body discarded.
    fn write(&mut self, offset: u64, data: &[u8], now: Instant) -> Result<(), Answer>;
    /// Every byte of the body is in: check, switch, and answer.
    fn finish(&mut self, now: Instant) -> Answer;
    /// The connection went away (or stalled) before the body was in: keep what was
    /// received for a resume.
    fn detach(&mut self);
}

/// Why an upload's header fields were refused: status, code, message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The HTTP status.
    pub status: u16,
    /// The error code.
    pub code: &'static str,
    /// What is wrong.
    pub message: &'static str,
}

impl FieldError {
    /// As a JSON answer.
    pub fn answer(&self) -> Answer {
        Answer::error(self.status, self.code, format_args!("{}", self.message))
    }
}

/// An upload's header fields, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadFields {
    /// The manifest bytes.
    pub manifest: heapless::Vec<u8, MAX_MANIFEST_LEN>,
    /// The signature bytes.
    pub signature: heapless::Vec<u8, MAX_SIGNATURE_LEN>,
    /// `Content-Range` first byte (0 without one).
    pub offset: u64,
    /// `Content-Range` total, if given.
    pub total: Option<u64>,
}

/// Decodes hex (either case) into `out`; `None` unless `value` (trimmed) is an even number
/// of hex digits whose bytes fit `out`.
pub fn decode_hex<const N: usize>(value: &[u8]) -> Option<heapless::Vec<u8, N>> {
    let value = value.trim_ascii();
    if !value.len().is_multiple_of(2) || value.len() / 2 > N {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    let mut out = heapless::Vec::new();
    for pair in value.chunks_exact(2) {
        let byte = (digit(pair[0])? << 4) | digit(pair[1])?;
        out.push(byte).ok()?;
    }
    Some(out)
}

/// A decimal of at most 19 digits.
fn decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 19 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        bytes
            .iter()
            .fold(0u64, |acc, &b| acc * 10 + u64::from(b - b'0')),
    )
}

/// `Content-Range: bytes FIRST-LAST/TOTAL` (RFC 9110 §14.4) as (first, last, total), with
/// first <= last < total; anything else (`*`, another unit, a reversed range) is `None`.
pub fn parse_content_range(value: &[u8]) -> Option<(u64, u64, u64)> {
    let value = value.trim_ascii();
    let (unit, rest) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return None;
    }
    let rest = rest.trim_ascii();
    let slash = rest.iter().position(|&b| b == b'/')?;
    let (range, total) = (&rest[..slash], &rest[slash + 1..]);
    let dash = range.iter().position(|&b| b == b'-')?;
    let first = decimal(&range[..dash])?;
    let last = decimal(&range[dash + 1..])?;
    let total = decimal(total)?;
    (first <= last && last < total).then_some((first, last, total))
}

/// Reads an upload's fields from a request's header lines (`name`, `value`) and its
/// `Content-Length` (`length`): the manifest and signature (each exactly once, hex), and an
/// optional `Content-Range` that must cover the body to the image's end.
pub fn parse_upload_fields<'h>(
    headers: impl Iterator<Item = (&'h str, &'h [u8])>,
    length: u64,
) -> Result<UploadFields, FieldError> {
    const BAD: FieldError = FieldError {
        status: 400,
        code: "bad-manifest",
        message: "Bramble-Manifest and Bramble-Signature must each be given once, in hex",
    };
    let mut manifest = None;
    let mut signature = None;
    let mut range = None;
    let (mut manifests, mut signatures, mut ranges) = (0u32, 0u32, 0u32);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("bramble-manifest") {
            manifests += 1;
            manifest = decode_hex::<MAX_MANIFEST_LEN>(value);
        } else if name.eq_ignore_ascii_case("bramble-signature") {
            signatures += 1;
            signature = decode_hex::<MAX_SIGNATURE_LEN>(value);
        } else if name.eq_ignore_ascii_case("content-range") {
            ranges += 1;
            range = Some(value);
        }
    }
    if manifests != 1 || signatures != 1 {
        return Err(BAD);
    }
    let (Some(manifest), Some(signature)) = (manifest, signature) else {
        return Err(BAD);
    };
    let bad_range = FieldError {
        status: 400,
        code: "bad-range",
        message: "Content-Range must be `bytes FIRST-LAST/TOTAL` with LAST = TOTAL - 1 and \
                  Content-Length = TOTAL - FIRST",
    };
    let (offset, total) = match (ranges, range) {
        (0, _) => (0, None),
        (1, Some(value)) => {
            let (first, last, total) = parse_content_range(value).ok_or(bad_range)?;
            if last + 1 != total || total - first != length {
                return Err(bad_range);
            }
            (first, Some(total))
        }
        _ => return Err(bad_range),
    };
    Ok(UploadFields {
        manifest,
        signature,
        offset,
        total,
    })
}

/// The body of an upload being received (kept small: every connection holds one; when its
/// last byte came is the connection's `response_started`, unused until the answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UploadBody {
    /// Offset in the image of the next byte.
    pub(crate) next: u32,
    /// Bytes of this request's body still to come.
    pub(crate) left: u32,
    /// The request's HTTP version (0 or 1).
    pub(crate) version: u8,
    /// Close after the answer.
    pub(crate) close: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex() {
        assert_eq!(
            decode_hex::<4>(b" 00ff7Aa0 ").as_deref(),
            Some(&[0, 255, 0x7a, 0xa0][..])
        );
        assert_eq!(decode_hex::<4>(b""), Some(heapless::Vec::new()));
        assert!(decode_hex::<4>(b"0").is_none());
        assert!(decode_hex::<4>(b"0g").is_none());
        assert!(decode_hex::<2>(b"000000").is_none());
        assert!(decode_hex::<4>("é0".as_bytes()).is_none());
    }

    #[test]
    fn content_range() {
        assert_eq!(parse_content_range(b"bytes 5-9/10"), Some((5, 9, 10)));
        assert_eq!(parse_content_range(b"BYTES  0-0/1"), Some((0, 0, 1)));
        for bad in [
            &b"bytes 5-9/9"[..],
            b"bytes 9-5/10",
            b"bytes */10",
            b"bytes 5-/10",
            b"items 0-1/2",
            b"bytes -1-2/3",
            b"bytes 0-1/99999999999999999999",
            b"bytes",
            b"",
            b"bytes 0-1/2/3",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fields() {
        let manifest = [0xabu8; 3];
        let hex = b"ababab";
        let fields = parse_upload_fields(
            [
                ("Bramble-Manifest", &hex[..]),
                ("bramble-signature", b"01"),
                ("Content-Range", b"bytes 2-9/10"),
            ]
            .into_iter(),
            8,
        )
        .unwrap();
        assert_eq!(&fields.manifest[..], &manifest);
        assert_eq!(&fields.signature[..], &[1]);
        assert_eq!((fields.offset, fields.total), (2, Some(10)));
        // The range must reach the end and match the length.
        for (range, length) in [(&b"bytes 2-8/10"[..], 7), (b"bytes 2-9/10", 9)] {
            let error = parse_upload_fields(
                [
                    ("Bramble-Manifest", &hex[..]),
                    ("bramble-signature", b"01"),
                    ("Content-Range", range),
                ]
                .into_iter(),
                length,
            )
            .unwrap_err();
            assert_eq!(error.code, "bad-range");
        }
        // Twice, missing, or not hex.
        for headers in [
            &[("Bramble-Manifest", &b"ab"[..])][..],
            &[
                ("Bramble-Manifest", b"ab"),
                ("Bramble-Manifest", b"ab"),
                ("Bramble-Signature", b"ab"),
            ],
            &[("Bramble-Manifest", b"xy"), ("Bramble-Signature", b"ab")],
        ] {
            let error = parse_upload_fields(headers.iter().copied(), 0).unwrap_err();
            assert_eq!(error.code, "bad-manifest");
        }
    }

    #[test]
    fn answers() {
        let answer = Answer::error(409, "busy", format_args!("a \"quote\"\\ and\n"));
        assert_eq!(
            answer.json.as_str(),
            "{\"error\":\"busy\",\"message\":\"a \\\"quote\\\"\\\\ and\\u000a\"}"
        );
        let long = [b'x'; 2 * ANSWER_LEN];
        let long = core::str::from_utf8(&long).unwrap();
        let answer = Answer::error(400, "x", format_args!("{long}"));
        assert!(answer.json.ends_with("\"}"));
        assert!(answer.json.len() <= ANSWER_LEN);
    }
}
