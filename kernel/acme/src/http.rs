//! The HTTP/1.1 client side ACME needs (RFC 9112): `https://` URLs, one request per
//! connection (`Connection: close`), and a bounded reader for the CA's responses, framed by
//! Content-Length, chunked coding, or the end of the connection. The response head is parsed
//! by httparse; every length from the CA is checked against a limit before it is used.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// Most bytes of a response head.
pub const MAX_HEAD_LEN: usize = 8 * 1024;
/// Most bytes of a response body (a certificate chain is 3-6 KB; the directory under 1 KB).
pub const MAX_BODY_LEN: usize = 32 * 1024;
/// Most header fields in a response.
const MAX_HEADERS: usize = 32;
/// Longest URL accepted from the CA or the owner.
pub const MAX_URL_LEN: usize = 512;

/// An `https://` URL split for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpsUrl<'a> {
    /// Host name or IPv4 address.
    pub host: &'a str,
    /// Port (443 unless given).
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: &'a str,
}

/// Splits an `https://host[:port][/path]` URL; `None` for anything else (other schemes,
/// user info, IPv6 literals, bad ports, spaces or control bytes).
pub fn parse_https_url(url: &str) -> Option<HttpsUrl<'_>> {
    if url.len() > MAX_URL_LEN || url.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return None;
    }
    let prefix = url.get(..8)?;
    if !prefix.eq_ignore_ascii_case("https://") {
        return None;
    }
    let rest = &url[8..];
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) if rest.as_bytes()[at] == b'/' => (&rest[..at], &rest[at..]),
        Some(_) => return None,
        None => (rest, "/"),
    };
    if authority.contains('@') || authority.starts_with('[') || path.contains('#') {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => (authority, 443),
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    host_ok.then_some(HttpsUrl { host, port, path })
}

/// Request methods ACME uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET (the directory, ARI).
    Get,
    /// HEAD (newNonce).
    Head,
    /// POST with a JWS body.
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
        }
    }
}

/// The request's bytes: request line, Host, User-Agent, and for POST the JOSE body.
pub fn write_request(method: Method, url: &HttpsUrl<'_>, body: &[u8]) -> Vec<u8> {
    let mut head = String::with_capacity(256);
    let _ = write!(
        head,
        "{} {} HTTP/1.1\r\nHost: {}",
        method.as_str(),
        url.path,
        url.host
    );
    if url.port != 443 {
        let _ = write!(head, ":{}", url.port);
    }
    head.push_str("\r\nUser-Agent: Bramble-ACME/0.1\r\nAccept: */*\r\nConnection: close\r\n");
    if method == Method::Post {
        let _ = write!(
            head,
            "Content-Type: application/jose+json\r\nContent-Length: {}\r\n",
            body.len()
        );
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if method == Method::Post {
        out.extend_from_slice(body);
    }
    out
}

/// A response, with the header fields ACME reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Location.
    pub location: Option<String>,
    /// Replay-Nonce (RFC 8555 §6.5.1).
    pub replay_nonce: Option<String>,
    /// Retry-After in seconds (delta-seconds only; an HTTP-date is ignored).
    pub retry_after: Option<u64>,
    /// Content-Type, without parameters, lower case.
    pub content_type: Option<String>,
    /// The body, decoded from its transfer coding.
    pub body: Vec<u8>,
}

/// Why a response cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseError {
    /// The head is not HTTP/1.x.
    BadHead,
    /// The head is longer than [`MAX_HEAD_LEN`].
    HeadTooLong,
    /// The body is (or says it will be) longer than [`MAX_BODY_LEN`].
    BodyTooLong,
    /// Content-Length is not a number, or repeated with other values.
    BadLength,
    /// A Transfer-Encoding other than chunked, or broken chunked framing.
    BadFraming,
    /// The connection ended before the body did.
    Truncated,
}

impl core::fmt::Display for ResponseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::BadHead => "the response head is not HTTP/1.1",
            Self::HeadTooLong => "the response head is too long",
            Self::BodyTooLong => "the response body is too long",
            Self::BadLength => "the response's Content-Length is invalid",
            Self::BadFraming => "the response's transfer coding is invalid",
            Self::Truncated => "the connection ended inside the response",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// Collects one response from the bytes of a connection.
#[derive(Debug, Default)]
pub struct ResponseReader {
    received: Vec<u8>,
    /// The head, once parsed, and where the body starts.
    head: Option<(Response, Framing, usize)>,
    head_request: bool,
}

impl ResponseReader {
    /// A reader for the answer to a request; `head_request` says it was HEAD (no body).
    pub fn new(head_request: bool) -> Self {
        Self {
            received: Vec::new(),
            head: None,
            head_request,
        }
    }

    /// Takes bytes from the connection. `Ok(Some)` once the response is complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Option<Response>, ResponseError> {
        let limit = MAX_HEAD_LEN + MAX_BODY_LEN + MAX_BODY_LEN / 4;
        if self.received.len().saturating_add(bytes.len()) > limit {
            return Err(ResponseError::BodyTooLong);
        }
        self.received.extend_from_slice(bytes);
        if self.head.is_none() {
            match parse_head(&self.received, self.head_request)? {
                Some(head) => self.head = Some(head),
                None if self.received.len() > MAX_HEAD_LEN => {
                    return Err(ResponseError::HeadTooLong);
                }
                None => return Ok(None),
            }
        }
        self.try_finish(false)
    }

    /// The connection has ended: a close-delimited body is complete now; anything else
    /// unfinished is truncated.
    pub fn finish(&mut self) -> Result<Response, ResponseError> {
        if self.head.is_none() {
            return Err(ResponseError::Truncated);
        }
        self.try_finish(true)?.ok_or(ResponseError::Truncated)
    }

    fn try_finish(&mut self, closed: bool) -> Result<Option<Response>, ResponseError> {
        let Some((_, framing, start)) = &self.head else {
            return Ok(None);
        };
        let body = &self.received[*start..];
        let decoded = match *framing {
            Framing::Length(len) => (body.len() >= len).then(|| body[..len].to_vec()),
            Framing::UntilClose => {
                if body.len() > MAX_BODY_LEN {
                    return Err(ResponseError::BodyTooLong);
                }
                closed.then(|| body.to_vec())
            }
            Framing::Chunked => decode_chunked(body)?,
        };
        let Some(bytes) = decoded else {
            return Ok(None);
        };
        let Some((mut response, _, _)) = self.head.take() else {
            return Ok(None);
        };
        response.body = bytes;
        Ok(Some(response))
    }
}

fn header_text(value: &[u8]) -> Option<String> {
    let text = core::str::from_utf8(value.trim_ascii()).ok()?;
    (text.len() <= MAX_URL_LEN).then(|| String::from(text))
}

fn parse_head(
    bytes: &[u8],
    head_request: bool,
) -> Result<Option<(Response, Framing, usize)>, ResponseError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ResponseError::HeadTooLong),
        Err(_) => return Err(ResponseError::BadHead),
    };
    if head_len > MAX_HEAD_LEN {
        return Err(ResponseError::HeadTooLong);
    }
    let status = parsed.code.ok_or(ResponseError::BadHead)?;
    let mut response = Response {
        status,
        ..Response::default()
    };
    let mut length: Option<usize> = None;
    let mut chunked = false;
    for header in parsed.headers.iter() {
        let name = header.name;
        let value = header.value;
        if name.eq_ignore_ascii_case("content-length") {
            let text =
                core::str::from_utf8(value.trim_ascii()).map_err(|_| ResponseError::BadLength)?;
            if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ResponseError::BadLength);
            }
            let n: usize = text.parse().map_err(|_| ResponseError::BodyTooLong)?;
            if length.is_some_and(|old| old != n) {
                return Err(ResponseError::BadLength);
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value
                .rsplit(|&b| b == b',')
                .next()
                .unwrap_or(b"")
                .trim_ascii();
            if !last.eq_ignore_ascii_case(b"chunked") {
                return Err(ResponseError::BadFraming);
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("location") {
            response.location = header_text(value);
        } else if name.eq_ignore_ascii_case("replay-nonce") {
            response.replay_nonce = header_text(value);
        } else if name.eq_ignore_ascii_case("retry-after") {
            response.retry_after = core::str::from_utf8(value.trim_ascii())
                .ok()
                .and_then(|text| text.parse().ok());
        } else if name.eq_ignore_ascii_case("content-type") {
            response.content_type = header_text(value).map(|text| {
                let bare = text.split(';').next().unwrap_or("").trim();
                bare.to_ascii_lowercase()
            });
        }
    }
    let no_body = head_request || status == 204 || status == 304 || (100..200).contains(&status);
    let framing = if no_body {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked
    } else if let Some(len) = length {
        if len > MAX_BODY_LEN {
            return Err(ResponseError::BodyTooLong);
        }
        Framing::Length(len)
    } else {
        Framing::UntilClose
    };
    Ok(Some((response, framing, head_len)))
}

/// Decodes a whole chunked body; `Ok(None)` while it is incomplete.
fn decode_chunked(mut body: &[u8]) -> Result<Option<Vec<u8>>, ResponseError> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") else {
            if body.len() > 1024 {
                return Err(ResponseError::BadFraming);
            }
            return Ok(None);
        };
        let line = &body[..line_end];
        let size_text = line
            .split(|&b| b == b';')
            .next()
            .unwrap_or(b"")
            .trim_ascii();
        if size_text.is_empty() || size_text.len() > 8 {
            return Err(ResponseError::BadFraming);
        }
        let mut size = 0usize;
        for &digit in size_text {
            let value = (digit as char)
                .to_digit(16)
                .ok_or(ResponseError::BadFraming)?;
            size = size
                .checked_mul(16)
                .and_then(|s| s.checked_add(value as usize))
                .ok_or(ResponseError::BodyTooLong)?;
        }
        body = &body[line_end + 2..];
        if size == 0 {
            // Trailers (ignored) up to the empty line.
            loop {
                let Some(end) = body.windows(2).position(|w| w == b"\r\n") else {
                    return Ok(None);
                };
                body = &body[end + 2..];
                if end == 0 {
                    return Ok(Some(out));
                }
            }
        }
        if out.len().saturating_add(size) > MAX_BODY_LEN {
            return Err(ResponseError::BodyTooLong);
        }
        let Some(end) = size.checked_add(2) else {
            return Err(ResponseError::BodyTooLong);
        };
        if body.len() < end {
            return Ok(None);
        }
        if &body[size..end] != b"\r\n" {
            return Err(ResponseError::BadFraming);
        }
        out.extend_from_slice(&body[..size]);
        body = &body[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let url = parse_https_url("https://acme.test:14000/dir").unwrap();
        assert_eq!((url.host, url.port, url.path), ("acme.test", 14000, "/dir"));
        let url = parse_https_url("https://acme-v02.api.letsencrypt.org/directory").unwrap();
        assert_eq!(url.port, 443);
        assert_eq!(parse_https_url("https://h").unwrap().path, "/");
        for bad in [
            "http://h/",
            "https://",
            "https://u@h/",
            "https://h:0/",
            "https://h:99999/",
            "https://[::1]/",
            "https://h /",
            "https://h?q",
            "https://h_x/",
        ] {
            assert!(parse_https_url(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn request_bytes() {
        let url = parse_https_url("https://ca.test:14000/new-order").unwrap();
        let bytes = write_request(Method::Post, &url, b"{}");
        let text = core::str::from_utf8(&bytes).unwrap();
        assert!(text.starts_with("POST /new-order HTTP/1.1\r\nHost: ca.test:14000\r\n"));
        assert!(text.contains("Content-Type: application/jose+json\r\nContent-Length: 2\r\n"));
        assert!(text.ends_with("\r\n\r\n{}"));
    }

    #[test]
    fn reads_length_chunked_and_close_framed_bodies_in_pieces() {
        let length = b"HTTP/1.1 201 Created\r\nLocation: https://ca/o/1\r\nReplay-Nonce: abc\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 5\r\n\r\nhello";
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nRetry-After: 3\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nTrailer: 1\r\n\r\n";
        for (bytes, close) in [(&length[..], false), (&chunked[..], false)] {
            for split in 1..bytes.len() {
                let mut reader = ResponseReader::new(false);
                assert_eq!(reader.push(&bytes[..split]).unwrap(), None, "split {split}");
                let response = reader.push(&bytes[split..]).unwrap().unwrap();
                assert_eq!(response.body, b"hello");
                let _ = close;
            }
        }
        let mut reader = ResponseReader::new(false);
        let response = reader.push(length).unwrap().unwrap();
        assert_eq!(response.status, 201);
        assert_eq!(response.location.as_deref(), Some("https://ca/o/1"));
        assert_eq!(response.replay_nonce.as_deref(), Some("abc"));
        assert_eq!(response.content_type.as_deref(), Some("application/json"));
        let mut reader = ResponseReader::new(false);
        assert_eq!(reader.push(chunked).unwrap().unwrap().retry_after, Some(3));
        let mut reader = ResponseReader::new(false);
        assert_eq!(
            reader.push(b"HTTP/1.1 200 OK\r\n\r\nuntil close").unwrap(),
            None
        );
        assert_eq!(reader.finish().unwrap().body, b"until close");
        let mut reader = ResponseReader::new(true);
        let head = reader.push(b"HTTP/1.1 200 OK\r\nReplay-Nonce: n\r\nContent-Length: 9\r\n\r\n");
        assert_eq!(head.unwrap().unwrap().replay_nonce.as_deref(), Some("n"));
    }

    #[test]
    fn refuses_bad_and_oversized_responses() {
        let cases: [(&[u8], ResponseError); 5] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
                ResponseError::BodyTooLong,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                ResponseError::BadLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                ResponseError::BadLength,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
                ResponseError::BadFraming,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffff\r\n",
                ResponseError::BadFraming,
            ),
        ];
        for (bytes, error) in cases {
            let mut reader = ResponseReader::new(false);
            assert_eq!(
                reader.push(bytes),
                Err(error),
                "{:?}",
                core::str::from_utf8(bytes)
            );
        }
        let mut reader = ResponseReader::new(false);
        assert_eq!(reader.push(b"SSH-2.0\r\n\r\n"), Err(ResponseError::BadHead));
        let mut reader = ResponseReader::new(false);
        reader
            .push(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
            .unwrap();
        assert_eq!(reader.finish(), Err(ResponseError::Truncated));
    }
}
