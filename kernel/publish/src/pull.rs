//! Pull (`publish_url`): what the board fetches from a static host, and the image's response
//! read as a stream.
//!
//! The owner's CI puts two files on any HTTPS static host or object store (`bramble publish
//! --out DIR` writes both):
//!
//! - `manifest` at `publish_url`: the 128-byte manifest followed by its 64-byte Ed25519
//!   signature ([`MANIFEST_FILE_LEN`] bytes, nothing else);
//! - `site-VERSION.bin` beside it (the manifest URL up to its last `/`, then the name with
//!   the manifest's version in decimal): the image. A versioned name means a manifest is
//!   never paired with another upload's image while the CI replaces the files, and the host
//!   may keep old ones.
//!
//! The manifest's response is small and read whole. The image's is not: [`ImageResponse`]
//! reads its head (bounded, checked: status 200, no transfer coding, a Content-Length equal
//! to the signed length when there is one) and then hands the body bytes on as they arrive,
//! never more than the signed length, so that they go to the card's idle slot block by block
//! and the image never sits in RAM.

use crate::manifest::{MANIFEST_LEN, SIGNATURE_LEN};
use core::fmt;

/// Bytes of the `manifest` file: the manifest, then its signature.
pub const MANIFEST_FILE_LEN: usize = MANIFEST_LEN + SIGNATURE_LEN;
/// Longest image response head read.
pub const MAX_HEAD_LEN: usize = 2048;
/// Most header fields in the head.
const MAX_HEADERS: usize = 32;

/// The manifest and its signature from a `manifest` file; `None` unless it is exactly
/// [`MANIFEST_FILE_LEN`] bytes.
pub fn split_manifest_file(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    (bytes.len() == MANIFEST_FILE_LEN).then(|| bytes.split_at(MANIFEST_LEN))
}

/// Writes the image's URL for `version` beside the manifest at `manifest_url`: everything up
/// to the last `/` of its path, then `site-VERSION.bin`. A query or fragment is not carried.
pub fn write_image_url(manifest_url: &str, version: u64, out: &mut impl fmt::Write) -> fmt::Result {
    let without_query = manifest_url
        .split(['?', '#'])
        .next()
        .unwrap_or(manifest_url);
    // The path starts at the first `/` after the scheme's `//`.
    let after_scheme = without_query.find("//").map_or(0, |at| at + 2);
    let base = match without_query[after_scheme..].rfind('/') {
        Some(at) => &without_query[..after_scheme + at + 1],
        None => {
            out.write_str(without_query)?;
            "/"
        }
    };
    write!(out, "{base}site-{version}.bin")
}

/// Why an image response is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageResponseError {
    /// The head is not HTTP/1.x or is longer than [`MAX_HEAD_LEN`].
    BadHead,
    /// A status other than 200.
    Status(u16),
    /// A transfer coding (chunked or other): static hosts send files with a length.
    Coded,
    /// Content-Length unreadable, repeated differently, or not the signed length.
    WrongLength {
        /// The length the server named (`u64::MAX`: unreadable).
        length: u64,
    },
    /// More body bytes than the signed length.
    TooLong,
    /// The connection ended before the signed length.
    Truncated {
        /// Body bytes received.
        received: u32,
    },
}

impl fmt::Display for ImageResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BadHead => f.write_str("the image's response head is not HTTP/1.x"),
            Self::Status(status) => write!(f, "the image's URL answered {status}"),
            Self::Coded => f.write_str("the image came with a transfer coding (send a length)"),
            Self::WrongLength { length: u64::MAX } => {
                f.write_str("the image's Content-Length is unreadable")
            }
            Self::WrongLength { length } => {
                write!(
                    f,
                    "the image's Content-Length is {length}, not the signed length"
                )
            }
            Self::TooLong => f.write_str("the image is longer than the signed length"),
            Self::Truncated { received } => {
                write!(f, "the image ended after {received} bytes")
            }
        }
    }
}

/// The response to the image's GET, read as it arrives.
pub struct ImageResponse {
    expected: u32,
    head: [u8; MAX_HEAD_LEN],
    head_len: usize,
    /// Body bytes handed on (`None`: still in the head).
    received: Option<u32>,
}

impl ImageResponse {
    /// A reader for an image of `expected` bytes (the signed length).
    pub fn new(expected: u32) -> Self {
        Self {
            expected,
            head: [0; MAX_HEAD_LEN],
            head_len: 0,
            received: None,
        }
    }

    /// Body bytes handed on so far.
    pub fn received(&self) -> u32 {
        self.received.unwrap_or(0)
    }

    /// Whether the whole signed length has arrived.
    pub fn complete(&self) -> bool {
        self.received == Some(self.expected)
    }

    /// Takes `bytes` from the connection; returns the body bytes among them (empty while the
    /// head is still arriving).
    pub fn push<'b>(&mut self, bytes: &'b [u8]) -> Result<&'b [u8], ImageResponseError> {
        let mut rest = bytes;
        if self.received.is_none() {
            let mut taken = 0;
            for &byte in bytes {
                let slot = self
                    .head
                    .get_mut(self.head_len)
                    .ok_or(ImageResponseError::BadHead)?;
                *slot = byte;
                self.head_len += 1;
                taken += 1;
                if self.head[..self.head_len].ends_with(b"\r\n\r\n") {
                    self.check_head()?;
                    self.received = Some(0);
                    break;
                }
            }
            rest = &bytes[taken..];
            if self.received.is_none() {
                return Ok(&[]);
            }
        }
        let received = self.received.unwrap_or(0);
        let left = self.expected - received; // received never passes expected
        if rest.len() as u64 > u64::from(left) {
            return Err(ImageResponseError::TooLong);
        }
        self.received = Some(received + rest.len() as u32);
        Ok(rest)
    }

    /// The connection has ended: `Ok` only with the whole signed length in.
    pub fn finish(&self) -> Result<(), ImageResponseError> {
        if self.complete() {
            Ok(())
        } else {
            Err(ImageResponseError::Truncated {
                received: self.received(),
            })
        }
    }

    fn check_head(&self) -> Result<(), ImageResponseError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&self.head[..self.head_len]) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Err(ImageResponseError::BadHead),
        }
        let status = response.code.ok_or(ImageResponseError::BadHead)?;
        if status != 200 {
            return Err(ImageResponseError::Status(status));
        }
        for header in response.headers.iter() {
            if header.name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(ImageResponseError::Coded);
            }
            if header.name.eq_ignore_ascii_case("content-length") {
                let length = core::str::from_utf8(header.value)
                    .ok()
                    .map(str::trim)
                    .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|text| text.parse::<u64>().ok())
                    .unwrap_or(u64::MAX);
                if length != u64::from(self.expected) {
                    return Err(ImageResponseError::WrongLength { length });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Text {
        bytes: [u8; 200],
        len: usize,
    }

    impl fmt::Write for Text {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.len + s.len();
            self.bytes
                .get_mut(self.len..end)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }

    fn image_url(manifest: &str, version: u64) -> Text {
        let mut text = Text {
            bytes: [0; 200],
            len: 0,
        };
        write_image_url(manifest, version, &mut text).unwrap();
        text
    }

    fn text(url: &Text) -> &str {
        core::str::from_utf8(&url.bytes[..url.len]).unwrap()
    }

    #[test]
    fn the_image_sits_beside_the_manifest_with_its_version() {
        for (manifest, image) in [
            (
                "https://static.example/garden/manifest",
                "https://static.example/garden/site-42.bin",
            ),
            (
                "https://static.example:8443/manifest?x=/y#z",
                "https://static.example:8443/site-42.bin",
            ),
            (
                "https://static.example",
                "https://static.example/site-42.bin",
            ),
            (
                "https://static.example/a/b/",
                "https://static.example/a/b/site-42.bin",
            ),
        ] {
            assert_eq!(text(&image_url(manifest, 42)), image, "{manifest}");
        }
    }

    #[test]
    fn a_manifest_file_is_the_manifest_then_the_signature() {
        let bytes = [7u8; MANIFEST_FILE_LEN];
        let (manifest, signature) = split_manifest_file(&bytes).unwrap();
        assert_eq!((manifest.len(), signature.len()), (128, 64));
        assert!(split_manifest_file(&bytes[..191]).is_none());
        assert!(split_manifest_file(&[0; 193]).is_none());
    }

    #[test]
    fn a_body_is_handed_on_in_pieces_up_to_the_signed_length() {
        let mut reader = ImageResponse::new(10);
        assert_eq!(reader.push(b"HTTP/1.0 200 ok\r\nContent-"), Ok(&b""[..]));
        assert_eq!(reader.push(b"Length: 10\r\n\r\n0123"), Ok(&b"0123"[..]));
        assert_eq!(
            reader.finish(),
            Err(ImageResponseError::Truncated { received: 4 })
        );
        assert_eq!(reader.push(b"456789"), Ok(&b"456789"[..]));
        assert!(reader.complete());
        assert_eq!(reader.finish(), Ok(()));
        assert_eq!(reader.push(b"!"), Err(ImageResponseError::TooLong));
        // Byte by byte, no length (a close-delimited body, as `openssl s_server -WWW` sends).
        let mut reader = ImageResponse::new(3);
        let mut body = [0u8; 3];
        let mut at = 0;
        let sent = b"HTTP/1.0 200 ok\r\nContent-type: text/plain\r\n\r\nabc";
        for byte in sent.chunks(1) {
            let piece = reader.push(byte).unwrap();
            body[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        assert_eq!(&body, b"abc");
        assert!(reader.complete());
    }

    #[test]
    fn bad_heads_are_refused() {
        let cases: [(&[u8], ImageResponseError); 6] = [
            (
                b"HTTP/1.1 404 Not Found\r\n\r\n",
                ImageResponseError::Status(404),
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                ImageResponseError::Coded,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n",
                ImageResponseError::WrongLength { length: 11 },
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: +10\r\n\r\n",
                ImageResponseError::WrongLength { length: u64::MAX },
            ),
            (b"SSH-2.0-x\r\n\r\n", ImageResponseError::BadHead),
            (
                b"HTTP/1.1 200 OK\r\nX: \x01\r\n\r\n",
                ImageResponseError::BadHead,
            ),
        ];
        for (head, error) in cases {
            assert_eq!(ImageResponse::new(10).push(head), Err(error));
        }
        let mut reader = ImageResponse::new(10);
        let long = [b'a'; MAX_HEAD_LEN + 1];
        assert_eq!(reader.push(&long), Err(ImageResponseError::BadHead));
    }
}
