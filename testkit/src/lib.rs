//! Bramble's host-side test kit: the one HTTP/1.x response parser, the epoll client loop's
//! shared steps ([`epoll`]), network namespaces with a TAP device ([`netns`]), test certificate
//! chains shaped like the public CAs' ([`chain`]) and pebble's CA and configuration ([`pebble`]).
//!
//! Host only; nothing of it goes into the kernel. `bramble check` reads answers with it too.
//!
//! The engine tests (kernel/http), the QEMU and hosted integration tests (tests/) and the
//! benchmark's probes (bench/) all read servers' answers through [`parse_response`]: one
//! response from the front of a byte buffer, with its framing (HEAD, 1xx, 204 and 304 without
//! a body, Content-Length, chunked, or the end of the stream), or a reason why the bytes are
//! not a response. The status line and the header fields are parsed by httparse, and a head
//! must end its lines with CRLF, so that a test notices a server that sends bare LFs.
#![forbid(unsafe_code)]

pub mod chain;
pub mod epoll;
pub mod netns;
pub mod pebble;

/// Header fields a response may carry before it is refused as malformed.
const MAX_HEADERS: usize = 64;

/// One parsed HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// The status line and header lines, as received, without the blank line that ends them
    /// (for failure messages).
    pub head: String,
    /// Header fields in order, names as sent, values without surrounding whitespace.
    pub headers: Vec<(String, String)>,
    /// The body, chunked coding removed (empty for HEAD, 1xx, 204 and 304).
    pub body: Vec<u8>,
}

impl Response {
    /// The first field named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.all(name).into_iter().next()
    }

    /// Every field named `name` (case-insensitive), in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Does the comma-separated field `name` list `token` (case-insensitive)?
    pub fn lists(&self, name: &str, token: &str) -> bool {
        self.all(name).iter().any(|value| {
            value
                .split(',')
                .any(|item| item.trim().eq_ignore_ascii_case(token))
        })
    }
}

/// The outcome of parsing one response from the front of a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete response and how many bytes of the buffer it took.
    Complete(Response, usize),
    /// More bytes are needed.
    Partial,
    /// The bytes are not an HTTP/1.x response; why, for the failure message.
    Invalid(String),
}

/// Parses one response from the front of `bytes`. `head_request`: the request was HEAD (no
/// body whatever Content-Length says). `at_eof`: no more bytes will come, so a body without
/// Content-Length or chunked coding ends here.
pub fn parse_response(bytes: &[u8], head_request: bool, at_eof: bool) -> Parsed {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut fields);
    let head_len = match parsed.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(error) => {
            let end = bytes.len().min(200);
            return Parsed::Invalid(format!(
                "not an HTTP/1.x response ({error}): {:?}",
                String::from_utf8_lossy(&bytes[..end])
            ));
        }
    };
    let raw_head = &bytes[..head_len];
    let bare_lf = raw_head
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || raw_head[i - 1] != b'\r'));
    let head = String::from_utf8_lossy(raw_head.strip_suffix(b"\r\n\r\n").unwrap_or(raw_head))
        .into_owned();
    if bare_lf {
        return Parsed::Invalid(format!("a line of the head ends in a bare LF:\n{head}"));
    }
    let Some(status) = parsed.code else {
        return Parsed::Invalid(format!("no status code in\n{head}"));
    };
    let headers = parsed
        .headers
        .iter()
        .map(|field| {
            (
                field.name.to_string(),
                String::from_utf8_lossy(field.value).trim().to_string(),
            )
        })
        .collect();
    let mut response = Response {
        status,
        head,
        headers,
        body: Vec::new(),
    };
    let no_body = head_request || status == 204 || status == 304 || (100..200).contains(&status);
    if no_body {
        return Parsed::Complete(response, head_len);
    }
    if response
        .header("transfer-encoding")
        .is_some_and(|coding| coding.to_ascii_lowercase().contains("chunked"))
    {
        return parse_chunked(bytes, head_len, response);
    }
    match response.header("content-length").map(str::parse::<usize>) {
        Some(Ok(length)) => {
            let Some(end) = head_len.checked_add(length) else {
                return Parsed::Invalid(format!("Content-Length too large in\n{}", response.head));
            };
            if bytes.len() < end {
                return Parsed::Partial;
            }
            response.body = bytes[head_len..end].to_vec();
            Parsed::Complete(response, end)
        }
        Some(Err(_)) => Parsed::Invalid(format!("bad Content-Length in\n{}", response.head)),
        None if at_eof => {
            response.body = bytes[head_len..].to_vec();
            Parsed::Complete(response, bytes.len())
        }
        None => Parsed::Partial,
    }
}

/// A chunked body starting at `at`: chunk sizes in hex (extensions ignored), no trailers.
fn parse_chunked(bytes: &[u8], mut at: usize, mut response: Response) -> Parsed {
    loop {
        let Some(line_end) = bytes[at..].windows(2).position(|w| w == b"\r\n") else {
            return Parsed::Partial;
        };
        let line = String::from_utf8_lossy(&bytes[at..at + line_end]).into_owned();
        let size_text = line.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            return Parsed::Invalid(format!("bad chunk size {size_text:?}"));
        };
        at += line_end + 2;
        if size == 0 {
            // No trailers expected from the servers under test.
            if bytes.len() < at + 2 {
                return Parsed::Partial;
            }
            return Parsed::Complete(response, at + 2);
        }
        let Some(end) = at.checked_add(size).and_then(|end| end.checked_add(2)) else {
            return Parsed::Invalid(format!("chunk size {size_text:?} too large"));
        };
        if bytes.len() < end {
            return Parsed::Partial;
        }
        response.body.extend_from_slice(&bytes[at..end - 2]);
        at = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(bytes: &[u8], head_request: bool, at_eof: bool) -> (Response, usize) {
        match parse_response(bytes, head_request, at_eof) {
            Parsed::Complete(response, used) => (response, used),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn status_headers_and_a_content_length_body() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nETag: \"abc\"\r\n\r\nhiHTTP/1.1";
        let (response, used) = complete(raw, false, false);
        assert_eq!(response.status, 200);
        assert_eq!(
            response.head,
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nETag: \"abc\""
        );
        assert_eq!(response.header("etag"), Some("\"abc\""));
        assert_eq!(response.header("CONTENT-LENGTH"), Some("2"));
        assert_eq!(response.headers[1].0, "ETag", "names as sent");
        assert_eq!(response.body, b"hi");
        assert_eq!(
            used,
            raw.len() - "HTTP/1.1".len(),
            "stops at the next response"
        );
    }

    #[test]
    fn responses_without_a_body() {
        let raw = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(complete(raw, false, false).1, raw.len());
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        let (response, used) = complete(raw, true, false);
        assert!(response.body.is_empty());
        assert_eq!(used, raw.len());
        assert_eq!(
            complete(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200", false, false).1,
            25
        );
        // Without HEAD, the same bytes wait for the body.
        assert_eq!(parse_response(raw, false, false), Parsed::Partial);
    }

    #[test]
    fn chunked_and_until_the_end_of_the_stream() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let (response, used) = complete(raw, false, false);
        assert_eq!(response.body, b"abcde");
        assert_eq!(used, raw.len());
        assert_eq!(
            parse_response(&raw[..raw.len() - 1], false, false),
            Parsed::Partial
        );
        let raw = b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nuntil close";
        assert_eq!(parse_response(raw, false, false), Parsed::Partial);
        assert_eq!(complete(raw, false, true).0.body, b"until close");
    }

    #[test]
    fn lists_and_repeated_fields() {
        let raw = b"HTTP/1.1 200 OK\r\nVary: Accept-Encoding\r\nvary: origin, Range\r\nContent-Length: 0\r\n\r\n";
        let (response, _) = complete(raw, false, false);
        assert_eq!(response.all("Vary"), ["Accept-Encoding", "origin, Range"]);
        assert!(response.lists("vary", "range"));
        assert!(!response.lists("vary", "cookie"));
    }

    #[test]
    fn incomplete_or_foreign_bytes() {
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", false, true),
            Parsed::Partial
        );
        for foreign in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/2 200\r\n\r\n",
            b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ] {
            assert!(
                matches!(parse_response(foreign, false, true), Parsed::Invalid(_)),
                "{:?}",
                String::from_utf8_lossy(foreign)
            );
        }
    }
}
