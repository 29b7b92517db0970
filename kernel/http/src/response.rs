//! Response heads: the status line and header fields, written into a fixed buffer.

use core::fmt::{self, Write};

use bramble_site::rules::CollectedHeaders;

use crate::path::write_encoded_path;

/// The security headers sent unless the site was packed with `--no-security-headers` or its
/// `_headers` sets or removes them: name and value.
pub const SECURITY_HEADERS: [(&str, &str); 3] = [
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "strict-origin-when-cross-origin"),
    ("X-Frame-Options", "SAMEORIGIN"),
];

/// The methods this server allows, for `Allow`.
pub const ALLOW: &str = "GET, HEAD, OPTIONS";

/// The reason phrase of each status the engine sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        410 => "Gone",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// Content-Range of a 206 or 416.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes first-last/len`.
    Part {
        /// First byte.
        first: u64,
        /// Last byte, inclusive.
        last: u64,
        /// Length of the whole representation.
        len: u64,
    },
    /// `bytes */len`.
    Unsatisfied {
        /// Length of the whole representation.
        len: u64,
    },
}

/// How the response speaks about the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionField {
    /// Nothing: HTTP/1.1 persistence is the default.
    Omit,
    /// `Connection: keep-alive`, for an HTTP/1.0 client that asked for it.
    KeepAlive,
    /// `Connection: close`: the server closes after this response.
    Close,
}

/// Everything in a response head except the status line's version.
#[derive(Clone, Copy, Debug)]
pub struct Head<'r> {
    /// Status code.
    pub status: u16,
    /// Content-Type, if any (never on 204/304).
    pub content_type: Option<&'r str>,
    /// Content-Length; `None` on 204 and 304.
    pub content_length: Option<u64>,
    /// Content-Encoding of the selected variant.
    pub content_encoding: Option<&'static str>,
    /// Content-Range, on 206 and 416.
    pub content_range: Option<ContentRange>,
    /// ETag of the selected variant.
    pub etag: Option<&'r str>,
    /// Last-Modified as an IMF-fixdate.
    pub last_modified: Option<&'r str>,
    /// Cache-Control.
    pub cache_control: Option<&'r str>,
    /// Whether to send `Vary: Accept-Encoding`.
    pub vary_encoding: bool,
    /// Whether to send `Accept-Ranges: bytes`.
    pub accept_ranges: bool,
    /// Whether to send `Allow`.
    pub allow: bool,
    /// Location: a decoded path (encoded on output) and the original query, if any.
    pub location: Option<(&'r str, Option<&'r str>)>,
    /// Location for the move to HTTPS: the request's host (its port dropped), the HTTPS port
    /// (written when not 443) and the request target as received.
    pub https_location: Option<(&'r str, u16, &'r str)>,
    /// Strict-Transport-Security max-age in seconds (HTTPS responses only, RFC 6797 §7.1).
    pub hsts_seconds: Option<u32>,
    /// Location written as it is (already in URL form): a redirect rule's target.
    pub location_url: Option<&'r str>,
    /// Header lines from the site's `_headers` that apply to this response.
    pub custom: Option<&'r CollectedHeaders<'r>>,
    /// Send the default security headers ([`SECURITY_HEADERS`]) not set by `custom`.
    pub security_defaults: bool,
    /// The response travels over HTTPS (Strict-Transport-Security is sent only then).
    pub secure: bool,
    /// Date, in Unix seconds, when the clock is known.
    pub date: Option<u64>,
    /// The Connection field.
    pub connection: ConnectionField,
}

impl<'r> Head<'r> {
    /// A head with only a status; everything else absent.
    pub const fn new(status: u16) -> Self {
        Self {
            status,
            content_type: None,
            content_length: None,
            content_encoding: None,
            content_range: None,
            etag: None,
            last_modified: None,
            cache_control: None,
            vary_encoding: false,
            accept_ranges: false,
            allow: false,
            location: None,
            https_location: None,
            hsts_seconds: None,
            location_url: None,
            custom: None,
            security_defaults: true,
            secure: false,
            date: None,
            connection: ConnectionField::Omit,
        }
    }

    /// Writes the head, ending with the blank line.
    pub fn write(&self, out: &mut impl Write) -> fmt::Result {
        out.write_str("HTTP/1.1 ")?;
        write_decimal(out, u64::from(self.status))?;
        out.write_str(" ")?;
        out.write_str(reason(self.status))?;
        out.write_str("\r\n")?;
        if let Some(date) = self.date {
            out.write_str("Date: ")?;
            crate::date::write_imf_fixdate(out, date)?;
            out.write_str("\r\n")?;
        }
        out.write_str("Server: bramble\r\n")?;
        if let Some((path, query)) = self.location {
            out.write_str("Location: ")?;
            write_encoded_path(out, path)?;
            out.write_str("/")?;
            if let Some(query) = query {
                write!(out, "?{query}")?;
            }
            out.write_str("\r\n")?;
        }
        if let Some((host, port, target)) = self.https_location {
            write!(out, "Location: https://{host}")?;
            if port != 443 {
                write!(out, ":{port}")?;
            }
            write!(out, "{target}\r\n")?;
        }
        if let Some(url) = self.location_url {
            field(out, "Location", url)?;
        }
        if self.allow {
            field(out, "Allow", ALLOW)?;
        }
        let overridden = |name: &str| self.custom.is_some_and(|custom| custom.mentions(name));
        if let Some(content_type) = self.content_type
            && !overridden("content-type")
        {
            field(out, "Content-Type", content_type)?;
        }
        if let Some(encoding) = self.content_encoding {
            field(out, "Content-Encoding", encoding)?;
        }
        if let Some(len) = self.content_length {
            out.write_str("Content-Length: ")?;
            write_decimal(out, len)?;
            out.write_str("\r\n")?;
        }
        match self.content_range {
            Some(ContentRange::Part { first, last, len }) => {
                write!(out, "Content-Range: bytes {first}-{last}/{len}\r\n")?
            }
            Some(ContentRange::Unsatisfied { len }) => {
                write!(out, "Content-Range: bytes */{len}\r\n")?
            }
            None => {}
        }
        if self.accept_ranges {
            out.write_str("Accept-Ranges: bytes\r\n")?;
        }
        if let Some(etag) = self.etag {
            field(out, "ETag", etag)?;
        }
        if let Some(last_modified) = self.last_modified {
            field(out, "Last-Modified", last_modified)?;
        }
        if let Some(cache_control) = self.cache_control
            && !overridden("cache-control")
        {
            field(out, "Cache-Control", cache_control)?;
        }
        if self.vary_encoding {
            out.write_str("Vary: Accept-Encoding\r\n")?;
        }
        if let Some(custom) = self.custom {
            custom.write(out, self.secure)?;
        }
        if let Some(seconds) = self.hsts_seconds
            && !overridden("strict-transport-security")
        {
            write!(out, "Strict-Transport-Security: max-age={seconds}\r\n")?;
        }
        if self.security_defaults {
            for (name, value) in SECURITY_HEADERS {
                if !overridden(name) {
                    field(out, name, value)?;
                }
            }
        }
        match self.connection {
            ConnectionField::Omit => {}
            ConnectionField::KeepAlive => out.write_str("Connection: keep-alive\r\n")?,
            ConnectionField::Close => out.write_str("Connection: close\r\n")?,
        }
        out.write_str("\r\n")
    }
}

/// Writes `name: value` and the line end. Every response head is written field by field
/// with `write_str`, not with `write!`: the formatting machinery cost about 2,000
/// instructions per response on the Pi (the -icount profile of a page request).
fn field(out: &mut impl Write, name: &str, value: &str) -> fmt::Result {
    out.write_str(name)?;
    out.write_str(": ")?;
    out.write_str(value)?;
    out.write_str("\r\n")
}

/// Writes `n` in decimal. Values that fit 32 bits (every length a site can hold) are
/// divided in 32 bits, a multiplication on the Pi; a 64-bit division there is a library call.
pub fn write_decimal(out: &mut impl Write, n: u64) -> fmt::Result {
    let Ok(mut n) = u32::try_from(n) else {
        return write!(out, "{n}");
    };
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.write_str(core::str::from_utf8(&digits[at..]).map_err(|_| fmt::Error)?)
}

/// `fmt::Write` over a heapless byte vector; fails (leaving a partial write) when full.
pub struct ByteWriter<'b, const N: usize>(pub &'b mut heapless::Vec<u8, N>);

impl<const N: usize> Write for ByteWriter<'_, N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes())
            .map_err(|_| fmt::Error)
    }
}

/// Writes `text` with the five HTML-special characters escaped.
pub fn write_html_escaped(out: &mut impl Write, text: &str) -> fmt::Result {
    for c in text.chars() {
        match c {
            '<' => out.write_str("&lt;")?,
            '>' => out.write_str("&gt;")?,
            '&' => out.write_str("&amp;")?,
            '"' => out.write_str("&quot;")?,
            '\'' => out.write_str("&#39;")?,
            c if c.is_control() => out.write_char(' ')?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

/// Writes the small built-in HTML page for an error `status`, with an optional detail line.
pub fn write_error_page(out: &mut impl Write, status: u16, detail: &str) -> fmt::Result {
    write_error_page_paragraphs(out, status, &[detail])
}

/// Writes the small built-in HTML page for an error `status` with one paragraph (escaped) per
/// non-empty entry of `details`.
pub fn write_error_page_paragraphs(
    out: &mut impl Write,
    status: u16,
    details: &[&str],
) -> fmt::Result {
    let reason = reason(status);
    write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{status} {reason}</title></head>\n<body><h1>{status} {reason}</h1>\n"
    )?;
    for detail in details.iter().filter(|detail| !detail.is_empty()) {
        out.write_str("<p>")?;
        write_html_escaped(out, detail)?;
        out.write_str("</p>\n")?;
    }
    out.write_str("<hr><p>bramble</p></body></html>\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_written_as_the_formatter_writes_them() {
        let values = [
            0u64,
            7,
            9,
            10,
            99,
            100,
            404,
            6271,
            65_535,
            999_999_999,
            1_000_000_000,
        ]
        .into_iter()
        .chain([u64::from(u32::MAX), u64::from(u32::MAX) + 1, u64::MAX]);
        for n in values {
            let mut s = heapless::String::<32>::new();
            write_decimal(&mut s, n).unwrap();
            let mut want = heapless::String::<32>::new();
            write!(want, "{n}").unwrap();
            assert_eq!(s, want);
        }
        // A writer that fills up fails, as `write!` would.
        let mut short = heapless::String::<3>::new();
        assert!(write_decimal(&mut short, 1234).is_err());
    }

    #[test]
    fn writes_a_full_head() {
        let mut s = heapless::String::<1024>::new();
        let head = Head {
            content_type: Some("text/css; charset=utf-8"),
            content_length: Some(10),
            content_encoding: Some("br"),
            content_range: Some(ContentRange::Part {
                first: 0,
                last: 9,
                len: 20,
            }),
            etag: Some("\"e-br\""),
            last_modified: Some("Sun, 06 Nov 1994 08:49:37 GMT"),
            cache_control: Some("no-cache"),
            vary_encoding: true,
            accept_ranges: true,
            date: Some(784_111_777),
            connection: ConnectionField::Close,
            ..Head::new(206)
        };
        head.write(&mut s).unwrap();
        assert_eq!(
            s.as_str(),
            "HTTP/1.1 206 Partial Content\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             Server: bramble\r\nContent-Type: text/css; charset=utf-8\r\n\
             Content-Encoding: br\r\nContent-Length: 10\r\nContent-Range: bytes 0-9/20\r\n\
             Accept-Ranges: bytes\r\nETag: \"e-br\"\r\n\
             Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\nCache-Control: no-cache\r\n\
             Vary: Accept-Encoding\r\nX-Content-Type-Options: nosniff\r\n\
             Referrer-Policy: strict-origin-when-cross-origin\r\n\
             X-Frame-Options: SAMEORIGIN\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn escapes_error_page_details() {
        let mut s = heapless::String::<1024>::new();
        write_error_page(&mut s, 503, "bad <image> & \"more\"").unwrap();
        assert!(s.contains("<h1>503 Service Unavailable</h1>"));
        assert!(s.contains("bad &lt;image&gt; &amp; &quot;more&quot;"));
    }
}
