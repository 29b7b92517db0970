//! One-shot HTTP/1.1 requests to the server under test (127.0.0.1, or an address inside the
//! hosted benchmark's network namespace): boot polling, body checks,
//! validator discovery for the 304 case, and the Linux baseline's counters CGI.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A parsed response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (everything after the header block; the request asks for `Connection: close`).
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// GET `path` from 127.0.0.1:`port` with extra header lines; `None` on any failure or timeout.
pub fn get(port: u16, path: &str, extra: &[(&str, &str)], timeout: Duration) -> Option<Response> {
    get_at(
        SocketAddr::from(([127, 0, 0, 1], port)),
        path,
        extra,
        timeout,
    )
}

/// GET `path` from `address` (a loopback address, or one inside a network namespace the
/// benchmark created and the calling thread has entered); `None` on any failure or timeout.
pub fn get_at(
    address: SocketAddr,
    path: &str,
    extra: &[(&str, &str)],
    timeout: Duration,
) -> Option<Response> {
    let mut stream = TcpStream::connect_timeout(&address, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (name, value) in extra {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    parse_response(&raw)
}

/// Parses a complete HTTP/1.x response (head and body).
pub fn parse_response(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|window| window == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next()?;
    if !status_line.starts_with("HTTP/1.") {
        return None;
    }
    let status = status_line.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    Some(Response {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_headers_and_body() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nETag: \"abc\"\r\n\r\nhi";
        let response = parse_response(raw).unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.header("etag"), Some("\"abc\""));
        assert_eq!(response.header("content-length"), Some("2"));
        assert_eq!(response.body, b"hi");
    }

    #[test]
    fn rejects_incomplete_or_foreign_responses() {
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"),
            None
        );
        assert_eq!(parse_response(b"SSH-2.0-OpenSSH\r\n\r\n"), None);
    }
}
