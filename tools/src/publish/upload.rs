//! `bramble publish SITE --to https://HOST[:PORT] --key OWNER.KEY`: the signed site over
//! HTTPS to the board (`PUT /.well-known/bramble/site`, `bramble_http::upload` says the
//! request's form), resumed after a dropped connection.
//!
//! 1. `GET /.well-known/bramble/site`: the board's host name (what the manifest must name,
//!    unless `--host` says it), its live version, and an upload under way: if it is this
//!    very manifest (version and SHA-256), the body continues where the board got to.
//! 2. `PUT` with the manifest and signature in `Bramble-Manifest`/`Bramble-Signature` (hex)
//!    and, for a resume, `Content-Range: bytes FIRST-LAST/TOTAL`. The body goes out in
//!    16 KiB pieces; between pieces the client looks for an early answer (a refusal comes
//!    right after the head) and stops sending if one came.
//! 3. The answer after the last byte (the board reads the slot back and switches first):
//!    200 and `{"published":...}`, or a refusal, `{"error":"CODE","message":"..."}`, printed
//!    as it is, and the command fails.
//!
//! A connection that drops mid-body (a reset, an end, a timeout) is made again, up to
//! [`ATTEMPTS`] times, each asking where to go on from. The board may still see the old
//! connection for a few seconds (until its deadline cuts it): a `busy` then is waited out.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bramble_publish::manifest::{Action, Manifest};
use bramble_testkit::{Parsed, parse_response};
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};

/// Connections tried for one publish (the first and the resumes).
pub const ATTEMPTS: u32 = 6;
/// Body bytes per write, between looks for an early answer.
const PIECE: usize = 16 * 1024;
/// The longest wait for a byte from the board (its read-back of a large site comes before
/// the answer: 60 MiB takes seconds on a Pi).
const READ_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a `busy` after a dropped connection is waited out (the board's own deadline for
/// the old connection is 10 s).
const BUSY_WAIT: Duration = Duration::from_secs(30);
/// The upload's path.
const PATH: &str = "/.well-known/bramble/site";

/// Where to send: `https://HOST[:PORT]` (a path, if any, is ignored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The host name (or address) for the connection and the certificate.
    pub host: String,
    /// The port (443 by default).
    pub port: u16,
}

/// Reads `https://HOST[:PORT][/...]`.
pub fn parse_target(url: &str) -> anyhow::Result<Target> {
    let Some(rest) = url.strip_prefix("https://") else {
        bail!("--to {url:?}: an https:// URL (the board takes sites over HTTPS only)");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .with_context(|| format!("--to {url:?}: an IPv6 address needs its ']'"))?;
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port),
            None if after.is_empty() => None,
            None => bail!("--to {url:?}: not HOST[:PORT]"),
        };
        (host, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() || host.contains('@') {
        bail!("--to {url:?}: no host");
    }
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|&port| port > 0)
            .with_context(|| format!("--to {url:?}: {port:?} is not a port"))?,
        None => 443,
    };
    Ok(Target {
        host: host.to_string(),
        port,
    })
}

/// The TLS client's configuration: the roots in `ca_file` (PEM), else the web's
/// (webpki-roots, Mozilla's list).
pub fn client_config(ca_file: Option<&Path>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let mut count = 0;
            for cert in CertificateDer::pem_file_iter(path)
                .with_context(|| format!("reading {}", path.display()))?
            {
                let cert = cert.with_context(|| format!("{}: not PEM", path.display()))?;
                roots
                    .add(cert)
                    .with_context(|| format!("{}: not a CA certificate", path.display()))?;
                count += 1;
            }
            if count == 0 {
                bail!("{}: no certificate in it", path.display());
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS set-up")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The board answers uploads on HTTP/1.1 only (an HTTP/2 request has no length for it).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// One HTTPS connection to the board.
struct Link {
    tls: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    /// Response bytes read so far.
    inbox: Vec<u8>,
}

/// A response: status and body.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// The body (JSON from the board).
    pub body: String,
}

impl Link {
    fn open(target: &Target, config: &Arc<rustls::ClientConfig>) -> anyhow::Result<Link> {
        let address = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .with_context(|| format!("looking up {}", target.host))?
            .next()
            .with_context(|| format!("{} has no address", target.host))?;
        let socket = TcpStream::connect_timeout(&address, Duration::from_secs(15))
            .with_context(|| format!("connecting to {address}"))?;
        socket.set_read_timeout(Some(READ_TIMEOUT))?;
        socket.set_write_timeout(Some(READ_TIMEOUT))?;
        socket.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(target.host.clone())
            .with_context(|| format!("{} is not a host name for TLS", target.host))?;
        let connection = rustls::ClientConnection::new(config.clone(), name)?;
        let mut tls = rustls::StreamOwned::new(connection, socket);
        // The handshake, so that a certificate problem is said as one.
        while tls.conn.is_handshaking() {
            tls.conn
                .complete_io(&mut tls.sock)
                .with_context(|| format!("TLS with {}:{}", target.host, target.port))?;
        }
        Ok(Link {
            tls,
            inbox: Vec::new(),
        })
    }

    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.tls.write_all(bytes)?;
        self.tls.flush()
    }

    /// Reads what has arrived without waiting; true if an answer has begun (or the board
    /// closed the connection).
    fn answer_started(&mut self) -> io::Result<bool> {
        self.tls.sock.set_nonblocking(true)?;
        let read = self.tls.conn.read_tls(&mut self.tls.sock);
        self.tls.sock.set_nonblocking(false)?;
        match read {
            Ok(0) => return Ok(true),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(error) => return Err(error),
        }
        self.tls
            .conn
            .process_new_packets()
            .map_err(io::Error::other)?;
        let mut buffer = [0u8; 4096];
        loop {
            match self.tls.conn.reader().read(&mut buffer) {
                Ok(0) => return Ok(true),
                Ok(n) => self.inbox.extend_from_slice(&buffer[..n]),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(error),
            }
        }
        Ok(!self.inbox.is_empty())
    }

    /// Reads one whole response.
    fn answer(&mut self) -> anyhow::Result<Answer> {
        let mut buffer = [0u8; 4096];
        loop {
            match parse_response(&self.inbox, false, false) {
                Parsed::Complete(response, used) => {
                    self.inbox.drain(..used);
                    return Ok(Answer {
                        status: response.status,
                        body: String::from_utf8_lossy(&response.body).into_owned(),
                    });
                }
                Parsed::Invalid(why) => bail!("the board's answer: {why}"),
                Parsed::Partial => {}
            }
            let n = self
                .tls
                .read(&mut buffer)
                .context("reading the board's answer")?;
            if n == 0 {
                bail!("the board closed the connection before answering");
            }
            self.inbox.extend_from_slice(&buffer[..n]);
        }
    }
}

/// The board's state (`GET /.well-known/bramble/site`).
#[derive(Debug, Default)]
struct State {
    hostname: Option<String>,
    live_version: u64,
    /// The upload under way: version, SHA-256 (hex), bytes received.
    upload: Option<(u64, String, u64)>,
}

fn read_state(link: &mut Link, target: &Target) -> anyhow::Result<State> {
    link.send(
        format!(
            "GET {PATH} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bramble-publish\r\n\r\n",
            host_field(target)
        )
        .as_bytes(),
    )?;
    let answer = link.answer()?;
    if answer.status != 200 {
        bail!(
            "the board refused ({}): {}",
            answer.status,
            answer.body.trim()
        );
    }
    let json: serde_json::Value = serde_json::from_str(&answer.body)
        .with_context(|| format!("the board's state is not JSON: {}", answer.body))?;
    let upload = json.get("upload").and_then(|upload| {
        Some((
            upload.get("version")?.as_u64()?,
            upload.get("sha256")?.as_str()?.to_string(),
            upload.get("received")?.as_u64()?,
        ))
    });
    Ok(State {
        hostname: json
            .get("hostname")
            .and_then(|name| name.as_str())
            .map(str::to_string),
        live_version: json
            .get("live_version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0),
        upload,
    })
}

/// The Host field: the host (an IPv6 address in brackets) and a port other than 443.
fn host_field(target: &Target) -> String {
    let host = if target.host.contains(':') {
        format!("[{}]", target.host)
    } else {
        target.host.clone()
    };
    if target.port == 443 {
        host
    } else {
        format!("{host}:{}", target.port)
    }
}

/// The host name to sign: `--host`, else the one the board gave.
fn host_to_sign(upload: &Upload<'_>, state: &State) -> anyhow::Result<String> {
    match (upload.host, &state.hostname) {
        (Some(host), _) => Ok(host.to_string()),
        (None, Some(host)) => Ok(host.clone()),
        (None, None) => bail!("the board did not say its host name: give --host"),
    }
}

/// `bramble publish --rollback SITE --to URL`: a signed rollback to SITE (the board's other
/// slot must hold it), a `PUT` with no body; the board switches back and answers.
pub fn rollback(upload: &Upload<'_>) -> anyhow::Result<Answer> {
    send_manifest(upload, Action::Rollback, 0, 200, "rollback")
}

/// `bramble publish SITE --nudge --to URL`: SITE's signed manifest, a `PUT` with no body, to
/// a board that pulls (`publish_url`): it checks its manifest at once instead of at the
/// next scheduled time. The version must be the one written with `--out` (or any above
/// the board's accepted one: the board then fetches whatever the static host holds).
pub fn nudge(upload: &Upload<'_>) -> anyhow::Result<Answer> {
    let len = u32::try_from(upload.image.len()).context("the site image is 4 GiB or more")?;
    send_manifest(upload, Action::Publish, len, 202, "nudge")
}

/// A manifest for SITE (`action`, `len` signed) sent with no body; Ok with the board's
/// answer when its status is `expected`, else the refusal as an error naming `what`.
fn send_manifest(
    upload: &Upload<'_>,
    action: Action,
    len: u32,
    expected: u16,
    what: &str,
) -> anyhow::Result<Answer> {
    let sha256: [u8; 32] = Sha256::digest(upload.image).into();
    let mut link = Link::open(upload.target, &upload.config)?;
    let state = read_state(&mut link, upload.target)?;
    let host = host_to_sign(upload, &state)?;
    let manifest = Manifest::new(action, upload.version, len, sha256, &host)
        .with_context(|| format!("{host:?} cannot be signed as a host name"))?
        .encode();
    let signature = upload.key.sign(&manifest).to_bytes();
    eprintln!(
        "publish: {what} version {} signed for {host}, for the site of {} bytes; {} serves \
         version {}",
        upload.version,
        upload.image.len(),
        upload.target.host,
        state.live_version
    );
    match send_body(&mut link, upload.target, &manifest, &signature, &[], 0) {
        Attempt::Answered(answer) if answer.status == expected => Ok(answer),
        Attempt::Answered(answer) => bail!(
            "the board refused the {what} ({}): {}",
            answer.status,
            answer.body.trim()
        ),
        Attempt::Dropped(error) => Err(error.context(format!("the {what}'s connection dropped"))),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// How one attempt ended.
enum Attempt {
    /// The board answered (a publish or a refusal).
    Answered(Answer),
    /// The connection dropped before the answer: try again.
    Dropped(anyhow::Error),
}

/// What to publish and where.
pub struct Upload<'a> {
    /// The board.
    pub target: &'a Target,
    /// TLS.
    pub config: Arc<rustls::ClientConfig>,
    /// The image.
    pub image: &'a [u8],
    /// The version to sign.
    pub version: u64,
    /// The host name to sign (`None`: the one the board gives).
    pub host: Option<&'a str>,
    /// The owner's key.
    pub key: &'a SigningKey,
}

/// Publishes; `Ok` with the board's success answer, or the refusal as the error.
pub fn publish(upload: &Upload<'_>) -> anyhow::Result<Answer> {
    let started = Instant::now();
    let len = u32::try_from(upload.image.len()).context("the site image is 4 GiB or more")?;
    let sha256: [u8; 32] = Sha256::digest(upload.image).into();
    let mut signed: Option<([u8; 128], [u8; 64])> = None;
    let mut last_drop = None;
    let mut dropped_at: Option<Instant> = None;
    let mut attempt = 0;
    while attempt < ATTEMPTS {
        attempt += 1;
        let mut link = match Link::open(upload.target, &upload.config) {
            Ok(link) => link,
            Err(error) if dropped_at.is_some() => {
                eprintln!("publish: {error:#}; trying again");
                last_drop = Some(error);
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            Err(error) => return Err(error),
        };
        let state = read_state(&mut link, upload.target)?;
        let (manifest, signature) = match signed {
            Some(signed) => signed,
            None => {
                let host = host_to_sign(upload, &state)?;
                let manifest = Manifest::new(Action::Publish, upload.version, len, sha256, &host)
                    .with_context(|| format!("{host:?} cannot be signed as a host name"))?
                    .encode();
                let signature = upload.key.sign(&manifest).to_bytes();
                eprintln!(
                    "publish: version {} ({len} bytes) signed for {host}; {} serves version {}",
                    upload.version, upload.target.host, state.live_version
                );
                signed = Some((manifest, signature));
                (manifest, signature)
            }
        };
        let from = match &state.upload {
            Some((version, sha, received))
                if *version == upload.version
                    && *sha == hex(&sha256)
                    && *received <= u64::from(len) =>
            {
                *received
            }
            _ => 0,
        };
        if from > 0 {
            eprintln!("publish: resuming at byte {from} of {len}");
        }
        match send_body(
            &mut link,
            upload.target,
            &manifest,
            &signature,
            upload.image,
            from,
        ) {
            Attempt::Answered(answer) => {
                let busy = answer.status == 409 && answer.body.contains("\"busy\"");
                if busy && dropped_at.is_some_and(|at| at.elapsed() < BUSY_WAIT) {
                    // The board still holds our dropped connection's upload.
                    std::thread::sleep(Duration::from_secs(2));
                    attempt -= 1;
                    continue;
                }
                if answer.status == 200 {
                    eprintln!(
                        "publish: {} bytes sent in {} ms",
                        upload.image.len(),
                        started.elapsed().as_millis()
                    );
                    return Ok(answer);
                }
                bail!(
                    "the board refused the site ({}): {}",
                    answer.status,
                    answer.body.trim()
                );
            }
            Attempt::Dropped(error) => {
                eprintln!("publish: connection lost ({error:#}); asking where to resume");
                dropped_at = Some(Instant::now());
                last_drop = Some(error);
            }
        }
    }
    Err(last_drop
        .unwrap_or_else(|| anyhow::anyhow!("no connection"))
        .context(format!("giving up after {ATTEMPTS} connections")))
}

fn send_body(
    link: &mut Link,
    target: &Target,
    manifest: &[u8],
    signature: &[u8],
    image: &[u8],
    from: u64,
) -> Attempt {
    let len = image.len() as u64;
    let range = if from > 0 {
        format!("Content-Range: bytes {from}-{}/{len}\r\n", len - 1)
    } else {
        String::new()
    };
    let head = format!(
        "PUT {PATH} HTTP/1.1\r\nHost: {}\r\nUser-Agent: bramble-publish\r\n\
         Content-Type: application/octet-stream\r\nBramble-Manifest: {}\r\n\
         Bramble-Signature: {}\r\nContent-Length: {}\r\n{range}\r\n",
        host_field(target),
        hex(manifest),
        hex(signature),
        len - from
    );
    if let Err(error) = link.send(head.as_bytes()) {
        return Attempt::Dropped(error.into());
    }
    // `from` is at most the image's length (checked by the caller).
    for piece in image[from as usize..].chunks(PIECE) {
        match link.answer_started() {
            Ok(false) => {}
            // An answer before the end of the body is a refusal: read it.
            Ok(true) => break,
            Err(error) => return Attempt::Dropped(error.into()),
        }
        if let Err(error) = link.send(piece) {
            // A refusal may have come and the board stopped reading: try to read it.
            return match link.answer() {
                Ok(answer) => Attempt::Answered(answer),
                Err(_) => Attempt::Dropped(error.into()),
            };
        }
    }
    match link.answer() {
        Ok(answer) => Attempt::Answered(answer),
        Err(error) => Attempt::Dropped(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("https://garden.example").unwrap(),
            Target {
                host: "garden.example".into(),
                port: 443
            }
        );
        assert_eq!(
            parse_target("https://192.168.77.2:8443/x").unwrap(),
            Target {
                host: "192.168.77.2".into(),
                port: 8443
            }
        );
        assert_eq!(
            parse_target("https://[fd00::2]:8443").unwrap(),
            Target {
                host: "fd00::2".into(),
                port: 8443
            }
        );
        for bad in [
            "http://garden",
            "https://",
            "https://garden:0",
            "https://garden:x",
            "https://u@garden",
            "https://[fd00::2",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
