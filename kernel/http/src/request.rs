//! What a request is: the parsed view the engine acts on, its body's framing, and the
//! checks on the request line and target that come before any answer.

use crate::chunked::ChunkedState;

/// The request body still to read and throw away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodySkip {
    /// No body (or none left).
    None,
    /// This many more bytes (Content-Length framing).
    Length(u64),
    /// A chunked body, at this point of its framing.
    Chunked(ChunkedState),
}

/// The fields of a parsed request the engine acts on.
pub(crate) struct RequestView<'r> {
    pub(crate) method: &'r str,
    pub(crate) target: &'r str,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) version: u8,
    pub(crate) headers: &'r [httparse::Header<'r>],
}

impl<'r> RequestView<'r> {
    /// Values of every header line named `name`.
    pub(crate) fn all(&self, name: &'static str) -> impl Iterator<Item = &'r [u8]> + '_ {
        self.headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// The value of the first header line named `name`.
    pub(crate) fn first(&self, name: &'static str) -> Option<&'r [u8]> {
        self.all(name).next()
    }
}

/// Is `value` a plausible Host field value (reg-name or IP literal, optional port)?
pub(crate) fn valid_host(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]%".contains(&b))
}

/// The byte range of the request line (after any leading blank lines), without its CRLF.
fn request_line(request: &[u8]) -> (usize, usize) {
    let start = request
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(request.len());
    let end = request[start..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(request.len(), |i| start + i);
    let end = if end > start && request[end - 1] == b'\r' {
        end - 1
    } else {
        end
    };
    (start, end)
}

/// What to do with a request line httparse rejected at the version.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum VersionError {
    /// `HTTP/1.x` with x > 1: read it as HTTP/1.1 (RFC 9112 §2.3) by rewriting the minor
    /// digit at this index.
    HigherMinor(usize),
    /// Answer with this status: 505 for `METHOD SP TARGET SP HTTP/x.y` with another major
    /// version, 400 for garbage.
    Status(u16),
}

pub(crate) fn classify_version_error(request: &[u8]) -> VersionError {
    let (start, end) = request_line(request);
    let line = &request[start..end];
    let mut parts = line.split(|&b| b == b' ');
    let (Some(_), Some(_), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return VersionError::Status(400);
    };
    match version.strip_prefix(b"HTTP/") {
        Some([b'1', b'.', b'2'..=b'9']) => VersionError::HigherMinor(end - 1),
        Some([major, b'.', minor]) if major.is_ascii_digit() && minor.is_ascii_digit() => {
            VersionError::Status(505)
        }
        Some([major]) if major.is_ascii_digit() => VersionError::Status(505),
        _ => VersionError::Status(400),
    }
}

/// The origin-form of a request target: the target itself, or the path and query of an
/// absolute-form one (which servers must accept, RFC 9112 §3.2.2).
pub(crate) fn origin_form(target: &str) -> &str {
    let mut target = target;
    for scheme in ["http://", "https://"] {
        let prefix = target.get(..scheme.len());
        if prefix.is_some_and(|p| p.eq_ignore_ascii_case(scheme)) {
            let rest = target.get(scheme.len()..).unwrap_or("");
            target = rest.find('/').map_or("/", |slash| &rest[slash..]);
        }
    }
    target
}

/// A Host value without its port: `example.org:80` and `[::1]:80` give `example.org` and
/// `[::1]`.
pub(crate) fn host_without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.split(':').next().unwrap_or(host)
}
