//! One HTTPS request as a client, the transport ACME, the heartbeat and dynamic DNS share:
//! a TCP connection on a socket the caller owns, TLS checked by bramble-tls's client
//! verifier (the roots the caller gave, and the clock), the request written through it, and
//! the response read by bramble-acme's bounded reader.
//!
//! Two layers. [`HttpsExchange`] is the pump alone: the caller opens the connection
//! ([`open_connection`]) and moves the exchange on from each poll until it has the response.
//! ACME uses it directly, since it looks its CA up itself (A and AAAA, Happy Eyeballs).
//! [`HttpsFetch`] is a whole request to a URL: an A lookup of the host on a DNS socket of the
//! caller's (an address in the URL is used as it is), the connection, the exchange, and a
//! time limit; the heartbeat and dynamic DNS use that. Nothing waits: each step returns
//! `None` until there is an outcome.

use crate::net::Net;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use bramble_acme::http::{HttpsUrl, Response, ResponseError, ResponseReader};
use bramble_hal::Instant;
use bramble_tls::client::{ClientConfig, ClientError, TlsClient};
use core::str::FromStr;
use smoltcp::iface::{Context, SocketHandle};
use smoltcp::socket::dns::{self, GetQueryResultError};
use smoltcp::socket::tcp;
use smoltcp::wire::{DnsQueryType, IpAddress, IpEndpoint, Ipv4Address};

/// Why an exchange ended without a response.
#[derive(Debug)]
pub enum ExchangeError {
    /// The connection was never established (refused, or reset).
    Refused,
    /// The server closed the connection before any answer.
    Closed,
    /// TLS failed: a certificate the roots do not vouch for, an alert, a broken record.
    Tls(ClientError),
    /// The response is not valid HTTP (or exceeds the reader's bounds).
    Http(ResponseError),
    /// The server closed the connection inside its response.
    Truncated,
}

/// One request's TLS session and response reader, over a TCP socket the caller owns.
pub struct HttpsExchange {
    tls: Box<TlsClient>,
    reader: ResponseReader,
    connected: bool,
}

/// Aborts whatever `socket` had and opens a connection to `remote` from `local_port`.
pub fn open_connection(
    socket: &mut tcp::Socket<'_>,
    context: &mut Context,
    remote: IpEndpoint,
    local_port: u16,
) -> Result<(), tcp::ConnectError> {
    socket.abort();
    socket.connect(context, remote, local_port)
}

impl HttpsExchange {
    /// A TLS session for `host` (the name the certificate must carry) with `request`
    /// queued; `head_request`: the response has no body whatever its framing says.
    pub fn new(
        config: Arc<ClientConfig>,
        host: &str,
        request: &[u8],
        head_request: bool,
    ) -> Result<Self, ClientError> {
        let mut tls = TlsClient::new(config, host)?;
        tls.write(request);
        Ok(Self {
            tls: Box::new(tls),
            reader: ResponseReader::new(head_request),
            connected: false,
        })
    }

    /// Whether the connection was established at some point.
    pub fn connected(&self) -> bool {
        self.connected
    }

    /// Moves bytes between `socket` and TLS, and TLS's plaintext into the reader; `Some` once
    /// the response is whole, or the exchange failed.
    pub fn pump(
        &mut self,
        socket: &mut tcp::Socket<'_>,
    ) -> Option<Result<Response, ExchangeError>> {
        let tls = &mut self.tls;
        if socket.state() == tcp::State::Established {
            self.connected = true;
        }
        if !socket.is_open() {
            return Some(Err(if self.connected {
                ExchangeError::Closed
            } else {
                ExchangeError::Refused
            }));
        }
        while socket.can_recv() && tls.receive_space() > 0 {
            let taken = socket.recv(|bytes| {
                let taken = tls.receive(bytes);
                (taken, taken)
            });
            if !matches!(taken, Ok(n) if n > 0) {
                break;
            }
        }
        if let Some(error) = tls.error() {
            return Some(Err(ExchangeError::Tls(error.clone())));
        }
        while socket.can_send() && !tls.outgoing().is_empty() {
            match socket.send_slice(tls.outgoing()) {
                Ok(0) | Err(_) => break,
                Ok(sent) => tls.sent(sent),
            }
        }
        let plaintext = tls.take_plaintext();
        if !plaintext.is_empty() {
            match self.reader.push(&plaintext) {
                Ok(Some(response)) => return Some(Ok(response)),
                Ok(None) => {}
                Err(error) => return Some(Err(ExchangeError::Http(error))),
            }
        }
        if tls.peer_closed() || (self.connected && !socket.may_recv()) {
            return Some(self.reader.finish().map_err(|_| ExchangeError::Truncated));
        }
        None
    }
}

/// Why a fetch failed.
#[derive(Debug)]
pub enum FetchError {
    /// No name server known (none configured, none from DHCP or the IPv6 routers).
    NoNameServer,
    /// The lookup could not be started (a bad name, or no query slot).
    CannotLookUp,
    /// The lookup failed.
    LookupFailed,
    /// The host has no IPv4 address.
    NoAddress,
    /// The TLS client could not be made (the name is not a valid server name).
    Setup,
    /// The socket would not open the connection.
    CannotConnect,
    /// No outcome within the time limit.
    Timeout,
    /// The exchange failed.
    Exchange(ExchangeError),
}

impl core::fmt::Display for FetchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FetchError::NoNameServer => "no name server known",
            FetchError::CannotLookUp => "the host cannot be looked up",
            FetchError::LookupFailed => "the host's lookup failed",
            FetchError::NoAddress => "the host has no address",
            FetchError::Setup => "TLS client set-up failed",
            FetchError::CannotConnect => "cannot open a connection",
            FetchError::Timeout => "no answer in time",
            FetchError::Exchange(ExchangeError::Refused) => "the server refused the connection",
            FetchError::Exchange(ExchangeError::Closed) => "the server closed the connection",
            FetchError::Exchange(ExchangeError::Tls(_)) => "TLS failed",
            FetchError::Exchange(ExchangeError::Http(_)) => "the answer is not valid HTTP",
            FetchError::Exchange(ExchangeError::Truncated) => {
                "the server closed the connection inside its answer"
            }
        })
    }
}

/// The sockets and settings a fetch runs on: the caller's TCP and DNS sockets (one fetch at
/// a time on them), the local port, and the name servers of a static address.
#[derive(Clone, Copy)]
pub struct FetchSockets<'c> {
    /// The TCP socket.
    pub tcp: SocketHandle,
    /// The DNS socket (it lists no server while idle).
    pub dns: SocketHandle,
    /// The local port connections leave from.
    pub local_port: u16,
    /// Name servers for a static address (DHCP gives its own).
    pub dns_servers: &'c [[u8; 4]],
}

enum FetchStage {
    Resolving(dns::QueryHandle),
    Exchanging(HttpsExchange),
}

/// One GET (or other request) to an `https://` URL: lookup, connection, exchange.
pub struct HttpsFetch {
    host: String,
    port: u16,
    request: Vec<u8>,
    client: Arc<ClientConfig>,
    stage: Option<FetchStage>,
    started: Instant,
    timeout_micros: u64,
}

impl HttpsFetch {
    /// The host asked (for logs).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Starts a fetch of `url` sending `request` (written for it, `Connection: close`),
    /// checked against `client`'s roots; it fails when it has no outcome within
    /// `timeout_micros` of `now`. Needs an IPv4 address (the caller checks).
    pub fn start(
        net: &mut Net<'_, '_>,
        sockets: FetchSockets<'_>,
        client: Arc<ClientConfig>,
        url: &HttpsUrl<'_>,
        request: Vec<u8>,
        timeout_micros: u64,
        now: Instant,
    ) -> Result<HttpsFetch, FetchError> {
        let mut fetch = HttpsFetch {
            host: String::from(url.host),
            port: url.port,
            request,
            client,
            stage: None,
            started: now,
            timeout_micros,
        };
        if let Ok(address) = Ipv4Address::from_str(url.host) {
            fetch.connect(net, sockets, IpAddress::Ipv4(address))?;
            return Ok(fetch);
        }
        let servers = net.name_servers(sockets.dns_servers);
        if servers.is_empty() {
            return Err(FetchError::NoNameServer);
        }
        let socket = net.sockets.get_mut::<dns::Socket>(sockets.dns);
        socket.update_servers(&servers);
        match socket.start_query(net.iface.context(), url.host, DnsQueryType::A) {
            Ok(query) => fetch.stage = Some(FetchStage::Resolving(query)),
            Err(_) => {
                socket.update_servers(&[]);
                return Err(FetchError::CannotLookUp);
            }
        }
        Ok(fetch)
    }

    fn connect(
        &mut self,
        net: &mut Net<'_, '_>,
        sockets: FetchSockets<'_>,
        address: IpAddress,
    ) -> Result<(), FetchError> {
        let exchange = HttpsExchange::new(self.client.clone(), &self.host, &self.request, false)
            .map_err(|_| FetchError::Setup)?;
        let socket = net.sockets.get_mut::<tcp::Socket>(sockets.tcp);
        open_connection(
            socket,
            net.iface.context(),
            IpEndpoint::new(address, self.port),
            sockets.local_port,
        )
        .map_err(|_| FetchError::CannotConnect)?;
        self.stage = Some(FetchStage::Exchanging(exchange));
        Ok(())
    }

    /// Moves the fetch on; `Some` once it has the response, or failed. After `Some`, the
    /// caller ends it with [`HttpsFetch::end`].
    pub fn poll(
        &mut self,
        net: &mut Net<'_, '_>,
        sockets: FetchSockets<'_>,
        now: Instant,
    ) -> Option<Result<Response, FetchError>> {
        if now.micros_since(self.started) > self.timeout_micros {
            return Some(Err(FetchError::Timeout));
        }
        match self.stage.as_mut()? {
            FetchStage::Resolving(query) => {
                let socket = net.sockets.get_mut::<dns::Socket>(sockets.dns);
                let answer = match socket.get_query_result(*query) {
                    Err(GetQueryResultError::Pending) => return None,
                    Err(GetQueryResultError::Failed) => Err(FetchError::LookupFailed),
                    Ok(addresses) => addresses.first().copied().ok_or(FetchError::NoAddress),
                };
                // Idle, the socket lists no server: smoltcp hands each DNS answer to the
                // first socket listing its source, which must be the one that asked.
                socket.update_servers(&[]);
                self.stage = None;
                match answer.and_then(|address| self.connect(net, sockets, address)) {
                    Ok(()) => None,
                    Err(error) => Some(Err(error)),
                }
            }
            FetchStage::Exchanging(exchange) => {
                let socket = net.sockets.get_mut::<tcp::Socket>(sockets.tcp);
                let outcome = exchange.pump(socket)?;
                if let Err(ExchangeError::Tls(error)) = &outcome {
                    log::warn!("https: TLS with {}: {error}", self.host);
                }
                Some(outcome.map_err(FetchError::Exchange))
            }
        }
    }

    /// Ends the fetch (done or abandoned): closes the connection, cancels a lookup under way.
    pub fn end(self, net: &mut Net<'_, '_>, sockets: FetchSockets<'_>) {
        net.sockets.get_mut::<tcp::Socket>(sockets.tcp).abort();
        let dns = net.sockets.get_mut::<dns::Socket>(sockets.dns);
        if let Some(FetchStage::Resolving(query)) = self.stage {
            dns.cancel_query(query);
        }
        dns.update_servers(&[]);
    }
}

/// Memory for one outbound client (ACME, the heartbeat, pulling, the reachability agent): its
/// TCP socket's receive and transmit buffers and `DNS` query slots. Each client names its
/// sizes with a type alias; the fields are the client's to split when it makes its sockets.
pub struct ClientMemory<const RX: usize, const TX: usize, const DNS: usize> {
    /// The TCP socket's receive buffer.
    pub tcp_rx: [u8; RX],
    /// The TCP socket's transmit buffer.
    pub tcp_tx: [u8; TX],
    /// The DNS socket's query slots.
    pub dns_queries: [Option<smoltcp::socket::dns::DnsQuery>; DNS],
}

impl<const RX: usize, const TX: usize, const DNS: usize> ClientMemory<RX, TX, DNS> {
    /// Empty buffers.
    pub const fn new() -> Self {
        Self {
            tcp_rx: [0; RX],
            tcp_tx: [0; TX],
            dns_queries: [const { None }; DNS],
        }
    }
}

impl<const RX: usize, const TX: usize, const DNS: usize> Default for ClientMemory<RX, TX, DNS> {
    fn default() -> Self {
        Self::new()
    }
}
