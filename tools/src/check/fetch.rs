//! Asking a server for a path: over TCP (the QEMU guest, through its 127.0.0.1 port
//! forward) or in memory (the same HTTP engine run on the host, `--hosted`). Both keep one
//! connection alive between requests and read answers with the tests' response parser.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bramble_hal::Instant;
use bramble_http::{Connection, ConnectionAction, Server, ServerConfig, SiteSource};
use bramble_site::SiteImage;
use bramble_testkit::{Parsed, Response, parse_response};

/// A server to ask.
pub trait Fetch {
    /// Sends `method target` with `Accept-Encoding: accept_encoding` and returns the answer,
    /// or why there is none.
    fn fetch(
        &mut self,
        method: &str,
        target: &str,
        accept_encoding: &str,
    ) -> Result<Response, String>;
}

fn request(method: &str, target: &str, accept_encoding: &str) -> Vec<u8> {
    format!(
        "{method} {target} HTTP/1.1\r\nHost: bramble.check\r\nUser-Agent: bramble-check\r\n\
         Accept-Encoding: {accept_encoding}\r\n\r\n"
    )
    .into_bytes()
}

/// The engine the Pi runs, on this machine, answering in memory.
pub struct Hosted<'a> {
    server: Server<'a>,
    connection: Connection,
    origin: std::time::Instant,
    buffer: Vec<u8>,
}

impl<'a> Hosted<'a> {
    /// Serves `image`.
    pub fn new(image: SiteImage<'a>) -> Self {
        let config = ServerConfig {
            access_log: false,
            ..ServerConfig::default()
        };
        Hosted {
            server: Server::new(SiteSource::Ready(image), config),
            connection: Connection::new(),
            origin: std::time::Instant::now(),
            buffer: vec![0u8; 64 * 1024],
        }
    }

    fn now(&self) -> Instant {
        Instant::from_micros(u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX))
    }
}

impl Fetch for Hosted<'_> {
    fn fetch(
        &mut self,
        method: &str,
        target: &str,
        accept_encoding: &str,
    ) -> Result<Response, String> {
        if !self.connection.is_open() {
            let now = self.now();
            self.connection.open(&mut self.server, now);
        }
        let bytes = request(method, target, accept_encoding);
        let head = method == "HEAD";
        let mut offered = 0;
        let mut received = Vec::new();
        // Bounded: an engine that stops making progress is an error, not a hang.
        for _ in 0..10_000_000 {
            let now = self.now();
            let consumed = self
                .connection
                .receive(&mut self.server, &bytes[offered..], now);
            offered += consumed;
            let sent = self
                .connection
                .transmit(&mut self.server, &mut self.buffer, now);
            received.extend_from_slice(&self.buffer[..sent]);
            let closing = self.connection.action(now) != ConnectionAction::KeepOpen;
            let stalled = consumed == 0 && sent == 0;
            match parse_response(&received, head, closing && stalled) {
                Parsed::Complete(response, _) => {
                    if closing {
                        self.connection.close(&mut self.server);
                    }
                    return Ok(response);
                }
                Parsed::Invalid(why) => {
                    self.connection.close(&mut self.server);
                    return Err(why);
                }
                Parsed::Partial if stalled => {
                    self.connection.close(&mut self.server);
                    return Err("the engine stopped before the response was whole".into());
                }
                Parsed::Partial => {}
            }
        }
        Err("the engine did not finish the response".into())
    }
}

/// A server at a TCP address (the QEMU guest's port forward).
pub struct Tcp {
    address: SocketAddr,
    stream: Option<TcpStream>,
    timeout: Duration,
}

impl Tcp {
    /// Talks to `address`, giving each answer `timeout`.
    pub fn new(address: SocketAddr, timeout: Duration) -> Self {
        Tcp {
            address,
            stream: None,
            timeout,
        }
    }

    fn exchange(&mut self, bytes: &[u8], head: bool) -> Result<Response, String> {
        if self.stream.is_none() {
            let stream = TcpStream::connect_timeout(&self.address, self.timeout)
                .map_err(|e| format!("cannot connect to {}: {e}", self.address))?;
            let _ = stream.set_nodelay(true);
            stream
                .set_read_timeout(Some(self.timeout))
                .map_err(|e| e.to_string())?;
            self.stream = Some(stream);
        }
        let stream = self.stream.as_mut().expect("connected above");
        stream
            .write_all(bytes)
            .map_err(|e| format!("sending the request: {e}"))?;
        let mut received = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = stream
                .read(&mut chunk)
                .map_err(|e| format!("reading the response: {e}"))?;
            received.extend_from_slice(&chunk[..n]);
            match parse_response(&received, head, n == 0) {
                Parsed::Complete(response, _) => {
                    if response.lists("connection", "close") {
                        self.stream = None;
                    }
                    return Ok(response);
                }
                Parsed::Invalid(why) => {
                    self.stream = None;
                    return Err(why);
                }
                Parsed::Partial if n == 0 => {
                    self.stream = None;
                    return Err(if received.is_empty() {
                        "the connection closed without an answer".into()
                    } else {
                        "the connection closed in the middle of the response".into()
                    });
                }
                Parsed::Partial => {}
            }
        }
    }
}

impl Fetch for Tcp {
    fn fetch(
        &mut self,
        method: &str,
        target: &str,
        accept_encoding: &str,
    ) -> Result<Response, String> {
        let bytes = request(method, target, accept_encoding);
        let reused = self.stream.is_some();
        match self.exchange(&bytes, method == "HEAD") {
            // A kept-alive connection the server closed meanwhile: once more on a new one.
            Err(_) if reused => {
                self.stream = None;
                self.exchange(&bytes, method == "HEAD")
            }
            other => other,
        }
    }
}
