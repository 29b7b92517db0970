//! One-shot HTTP/1.1 requests to the server under test (127.0.0.1, or an address inside the
//! hosted benchmark's network namespace): boot polling, body checks,
//! validator discovery for the 304 case, and the Linux baseline's counters CGI.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub use bramble_testkit::Response;
use bramble_testkit::{Parsed, parse_response};

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
    // The request asks for `Connection: close`: the stream's end is the response's end.
    match parse_response(&raw, false, true) {
        Parsed::Complete(response, _) => Some(response),
        Parsed::Partial | Parsed::Invalid(_) => None,
    }
}
