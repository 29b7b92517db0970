//! A TLS client for talking to an ACME CA: rustls's unbuffered client over this crate's
//! provider, trusting only the roots it is given (the owner's `acme_ca_certificate`, or the
//! embedded Let's Encrypt roots), checking the server's certificate against the clock.
//!
//! Byte-oriented like [`crate::session`], but with growable buffers: the client runs one
//! connection at a time, a few times a season, and frees everything when it is done.

use crate::clock::{CLOCK, ClockRef};
use crate::provider;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use pki_types::pem::PemObject;
use pki_types::{CertificateDer, ServerName};
use rustls::client::UnbufferedClientConnection;
use rustls::unbuffered::{ConnectionState, EncodeError};
pub use rustls::{ClientConfig, RootCertStore};

/// Most ciphertext held waiting to be processed (a record and a bit).
const MAX_INCOMING: usize = crate::session::MAX_RECORD_LEN + 1024;
/// Most decrypted bytes held for the caller.
const MAX_PLAINTEXT: usize = 64 * 1024;

/// Why a client cannot be made or went wrong.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientError {
    /// The CA certificate file holds no usable certificate.
    NoRoots,
    /// The CSPRNG has no seed.
    Unseeded,
    /// The host name is not a valid DNS name or address.
    BadServerName,
    /// The TLS exchange failed (a bad certificate, an alert, a broken record).
    Protocol(rustls::Error),
    /// The server sent more than the client holds.
    Overflow,
}

impl core::fmt::Display for ClientError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoRoots => f.write_str("no usable CA certificate to trust"),
            Self::Unseeded => f.write_str("no entropy seed: TLS is not started"),
            Self::BadServerName => f.write_str("the server's name is not a valid DNS name"),
            Self::Protocol(error) => write!(f, "TLS: {error}"),
            Self::Overflow => f.write_str("the server sent more than fits"),
        }
    }
}

/// The roots in `pem` (one or more CERTIFICATE blocks); certificates webpki cannot use as
/// trust anchors are skipped. Returns how many were taken.
pub fn roots_from_pem(pem: &[u8]) -> Result<RootCertStore, ClientError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let Ok(cert) = cert else {
            return Err(ClientError::NoRoots);
        };
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(ClientError::NoRoots);
    }
    Ok(roots)
}

/// A client configuration trusting `roots`: TLS 1.3 and 1.2, ALPN http/1.1, the TLS
/// server's clock for certificate dates.
pub fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, ClientError> {
    if !crate::random::RANDOM.is_seeded() {
        return Err(ClientError::Unseeded);
    }
    let mut config = ClientConfig::builder_with_details(
        Arc::new(provider::client_provider()),
        Arc::new(ClockRef(&CLOCK)),
    )
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(ClientError::Protocol)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(config))
}

/// One client connection: feed it the server's bytes, take what to send, read plaintext.
pub struct TlsClient {
    connection: UnbufferedClientConnection,
    incoming: Vec<u8>,
    outgoing: Vec<u8>,
    plaintext: Vec<u8>,
    to_send: Vec<u8>,
    open: bool,
    peer_closed: bool,
    error: Option<ClientError>,
}

impl core::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TlsClient")
            .field("open", &self.open)
            .field("peer_closed", &self.peer_closed)
            .finish()
    }
}

impl TlsClient {
    /// A connection to `server_name` (a DNS name or IP address, checked against the
    /// certificate), its ClientHello ready in [`TlsClient::outgoing`].
    pub fn new(config: Arc<ClientConfig>, server_name: &str) -> Result<Self, ClientError> {
        let name = ServerName::try_from(String::from(server_name))
            .map_err(|_| ClientError::BadServerName)?;
        let connection =
            UnbufferedClientConnection::new(config, name).map_err(ClientError::Protocol)?;
        let mut client = Self {
            connection,
            incoming: Vec::new(),
            outgoing: Vec::new(),
            plaintext: Vec::new(),
            to_send: Vec::new(),
            open: false,
            peer_closed: false,
            error: None,
        };
        client.process();
        client.error.clone().map_or(Ok(client), Err)
    }

    /// Whether the handshake is done.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Whether the server has closed its side (close_notify).
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// The failure, once there is one (the connection is then useless).
    pub fn error(&self) -> Option<&ClientError> {
        self.error.as_ref()
    }

    /// Queues application data; it is encrypted once the handshake is done.
    pub fn write(&mut self, data: &[u8]) {
        self.to_send.extend_from_slice(data);
        self.process();
    }

    /// How many more bytes [`TlsClient::receive`] takes now.
    pub fn receive_space(&self) -> usize {
        MAX_INCOMING.saturating_sub(self.incoming.len())
    }

    /// Takes bytes from the server (up to [`TlsClient::receive_space`]); returns how many.
    pub fn receive(&mut self, bytes: &[u8]) -> usize {
        let take = bytes.len().min(self.receive_space());
        self.incoming.extend_from_slice(&bytes[..take]);
        self.process();
        take
    }

    /// Bytes to send to the server.
    pub fn outgoing(&self) -> &[u8] {
        &self.outgoing
    }

    /// Marks `len` bytes of [`TlsClient::outgoing`] as sent.
    pub fn sent(&mut self, len: usize) {
        self.outgoing.drain(..len.min(self.outgoing.len()));
        if self.outgoing.is_empty() {
            self.outgoing = Vec::new();
        }
    }

    /// Takes the plaintext received so far.
    pub fn take_plaintext(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.plaintext)
    }

    fn fail(&mut self, error: ClientError) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    /// Runs rustls until it waits for the server (or has failed).
    fn process(&mut self) {
        for _ in 0..64 {
            if self.error.is_some() {
                return;
            }
            let status = self.connection.process_tls_records(&mut self.incoming);
            let discard = status.discard;
            let mut failure = None;
            let go_on = match status.state {
                Err(error) => {
                    failure = Some(ClientError::Protocol(error));
                    false
                }
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(record) => {
                                if self.plaintext.len() + record.payload.len() > MAX_PLAINTEXT {
                                    failure = Some(ClientError::Overflow);
                                    break;
                                }
                                self.plaintext.extend_from_slice(record.payload);
                            }
                            Err(error) => {
                                failure = Some(ClientError::Protocol(error));
                                break;
                            }
                        }
                    }
                    failure.is_none()
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    let mut buffer = vec![0u8; 4096];
                    loop {
                        match encode.encode(&mut buffer) {
                            Ok(written) => {
                                self.outgoing.extend_from_slice(&buffer[..written]);
                                break;
                            }
                            Err(EncodeError::InsufficientSize(size)) => {
                                buffer = vec![0u8; size.required_size];
                            }
                            Err(EncodeError::AlreadyEncoded) => break,
                        }
                    }
                    true
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => {
                    transmit.done();
                    true
                }
                Ok(ConnectionState::BlockedHandshake) => false,
                Ok(ConnectionState::WriteTraffic(mut traffic)) => {
                    self.open = true;
                    if self.to_send.is_empty() {
                        false
                    } else {
                        let data = core::mem::take(&mut self.to_send);
                        let mut buffer = vec![0u8; data.len() + data.len() / 8 + 256];
                        match traffic.encrypt(&data, &mut buffer) {
                            Ok(written) => self.outgoing.extend_from_slice(&buffer[..written]),
                            Err(_) => failure = Some(ClientError::Overflow),
                        }
                        failure.is_none()
                    }
                }
                Ok(ConnectionState::PeerClosed) => {
                    self.peer_closed = true;
                    false
                }
                Ok(ConnectionState::Closed) => {
                    self.peer_closed = true;
                    false
                }
                Ok(_) => false,
            };
            self.incoming.drain(..discard.min(self.incoming.len()));
            if let Some(error) = failure {
                self.fail(error);
                return;
            }
            if !go_on {
                return;
            }
        }
    }
}
