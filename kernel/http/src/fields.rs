//! Parsers for the request header fields the engine acts on: entity-tag lists, Range,
//! Accept-Encoding, Connection, Content-Length.

/// Iterates over the comma-separated elements of a list-valued field, trimmed, skipping empty
/// elements (RFC 9110 §5.6.1).
fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|e| !e.is_empty())
}

/// True if the comma-separated `value` contains `token` (ASCII case-insensitive), as the
/// Connection field is read.
pub fn has_token(value: &[u8], token: &str) -> bool {
    list_elements(value).any(|e| e.eq_ignore_ascii_case(token.as_bytes()))
}

/// Strips a weakness prefix: `W/"x"` -> (`"x"`, true).
fn opaque_tag(tag: &[u8]) -> (&[u8], bool) {
    match tag.strip_prefix(b"W/") {
        Some(rest) => (rest, true),
        None => (tag, false),
    }
}

/// How two entity tags are compared (RFC 9110 §8.8.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// Both must be strong and identical (If-Match, If-Range).
    Strong,
    /// Opaque tags identical, weakness ignored (If-None-Match).
    Weak,
}

/// Does an If-Match / If-None-Match field value match `etag`? `*` matches any current
/// representation; entity tags are read as `W/"..."` or `"..."`, so a comma inside quotes is
/// part of the tag. A malformed list matches nothing from the malformed element on.
pub fn etag_list_matches(value: &[u8], etag: &str, comparison: Comparison) -> bool {
    let (ours, ours_weak) = opaque_tag(etag.as_bytes());
    let mut rest = value;
    loop {
        rest = rest.trim_ascii_start();
        while let Some(after) = rest.strip_prefix(b",") {
            rest = after.trim_ascii_start();
        }
        if rest.is_empty() {
            return false;
        }
        if rest[0] == b'*' {
            return true;
        }
        let (tag_start, weak) = opaque_tag(rest);
        if tag_start.first() != Some(&b'"') {
            return false;
        }
        let Some(close) = tag_start[1..].iter().position(|&b| b == b'"') else {
            return false;
        };
        let tag = &tag_start[..close + 2];
        let matched = match comparison {
            Comparison::Weak => tag == ours,
            Comparison::Strong => !weak && !ours_weak && tag == ours,
        };
        if matched {
            return true;
        }
        rest = &tag_start[close + 2..];
        let trimmed = rest.trim_ascii_start();
        if !trimmed.is_empty() && trimmed[0] != b',' {
            return false;
        }
    }
}

/// Is `value` a single entity tag (rather than an HTTP-date), as If-Range may carry either?
pub fn is_entity_tag(value: &[u8]) -> bool {
    let (tag, _) = opaque_tag(value.trim_ascii());
    tag.len() >= 2 && tag[0] == b'"' && tag[tag.len() - 1] == b'"'
}

/// What a Range field asks of a representation `len` bytes long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeRequest {
    /// Ignore the field and send the whole representation: an unknown unit, a syntax error,
    /// or several ranges (which this server answers with the full body rather than
    /// multipart/byteranges, as RFC 9110 §14.2 permits).
    Full,
    /// Bytes `first..=last`, both within the representation.
    Part {
        /// First byte offset.
        first: u64,
        /// Last byte offset, inclusive.
        last: u64,
    },
    /// A single well-formed range that selects no byte: 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Parses decimal digits, saturating at u64::MAX; `None` if empty or not all digits.
fn decimal(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(bytes.iter().fold(0u64, |acc, &b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

/// Evaluates a Range field value against a representation of `len` bytes (RFC 9110 §14.1).
pub fn parse_range(value: &[u8], len: u64) -> RangeRequest {
    let value = value.trim_ascii();
    let Some(unit_end) = value.iter().position(|&b| b == b'=') else {
        return RangeRequest::Full;
    };
    if !value[..unit_end].eq_ignore_ascii_case(b"bytes") {
        return RangeRequest::Full;
    }
    let mut specs = list_elements(&value[unit_end + 1..]);
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return RangeRequest::Full;
    };
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return RangeRequest::Full;
    };
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);
    if first.is_empty() {
        // Suffix range: the last N bytes; a suffix longer than the file selects all of it.
        return match decimal(last) {
            None => RangeRequest::Full,
            Some(0) => RangeRequest::Unsatisfiable,
            Some(_) if len == 0 => RangeRequest::Unsatisfiable,
            Some(n) => RangeRequest::Part {
                first: len.saturating_sub(n),
                last: len - 1,
            },
        };
    }
    let Some(first) = decimal(first) else {
        return RangeRequest::Full;
    };
    let last = if last.is_empty() {
        u64::MAX
    } else {
        match decimal(last) {
            Some(last) if last >= first => last,
            _ => return RangeRequest::Full,
        }
    };
    if first >= len {
        RangeRequest::Unsatisfiable
    } else {
        RangeRequest::Part {
            first,
            last: last.min(len - 1),
        }
    }
}

/// A content coding the packer may have precomputed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// The file as written.
    Identity,
    /// The packer's gzip variant.
    Gzip,
    /// The packer's brotli variant.
    Brotli,
}

/// Parses a qvalue ("0", "0.5", "1", "1.000") into thousandths.
fn qvalue(bytes: &[u8]) -> Option<u16> {
    let (whole, fraction) = match bytes.iter().position(|&b| b == b'.') {
        Some(dot) => (&bytes[..dot], &bytes[dot + 1..]),
        None => (bytes, &b""[..]),
    };
    if whole.len() != 1 || fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + fraction.get(i).map_or(0, |&b| u16::from(b - b'0'));
    }
    match whole[0] {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Chooses the coding to send from the Accept-Encoding field values (each header line one
/// item of `values`) and the variants the file has. Highest q wins; ties prefer the smaller
/// variant (br, then gzip, then identity). Identity stays acceptable unless refused with
/// `identity;q=0` or `*;q=0`; if nothing acceptable exists, identity is sent anyway.
pub fn negotiate_coding<'v>(
    values: impl Iterator<Item = &'v [u8]>,
    has_gzip: bool,
    has_brotli: bool,
) -> Coding {
    let (mut br, mut gzip, mut identity, mut star) = (None, None, None, None);
    let mut any_header = false;
    for value in values {
        any_header = true;
        for element in list_elements(value) {
            let mut params = element.split(|&b| b == b';');
            let name = params.next().unwrap_or(b"").trim_ascii();
            let mut q = Some(1000);
            for param in params {
                let param = param.trim_ascii();
                let split = param.iter().position(|&b| b == b'=');
                if let Some(i) = split
                    && param[..i].trim_ascii().eq_ignore_ascii_case(b"q")
                {
                    q = qvalue(param[i + 1..].trim_ascii());
                }
            }
            let Some(q) = q else { continue };
            let slot = if name.eq_ignore_ascii_case(b"br") {
                &mut br
            } else if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
                &mut gzip
            } else if name.eq_ignore_ascii_case(b"identity") {
                &mut identity
            } else if name == b"*" {
                &mut star
            } else {
                continue;
            };
            *slot = Some(q);
        }
    }
    if !any_header {
        return Coding::Identity;
    }
    let br = if has_brotli {
        br.or(star).unwrap_or(0)
    } else {
        0
    };
    let gzip = if has_gzip {
        gzip.or(star).unwrap_or(0)
    } else {
        0
    };
    // Identity not mentioned: acceptable (at the lowest preference) unless `*;q=0`.
    let identity = identity.unwrap_or(match star {
        Some(0) => 0,
        _ => 1,
    });
    let best = br.max(gzip).max(identity);
    if best == 0 {
        Coding::Identity
    } else if br == best {
        Coding::Brotli
    } else if gzip == best {
        Coding::Gzip
    } else {
        Coding::Identity
    }
}

/// Parses a Content-Length value: one or more digits, nothing else (no sign, no list).
pub fn content_length(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    if value.len() > 19 {
        return None;
    }
    decimal(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_lists() {
        let tag = "\"abc-br\"";
        assert!(etag_list_matches(b"\"abc-br\"", tag, Comparison::Weak));
        assert!(etag_list_matches(b"W/\"abc-br\"", tag, Comparison::Weak));
        assert!(!etag_list_matches(b"W/\"abc-br\"", tag, Comparison::Strong));
        assert!(etag_list_matches(b"\"abc-br\"", tag, Comparison::Strong));
        assert!(etag_list_matches(
            b"\"x\", \"y\" ,W/\"abc-br\"",
            tag,
            Comparison::Weak
        ));
        assert!(etag_list_matches(
            b"\"a,b\", \"abc-br\"",
            tag,
            Comparison::Weak
        ));
        assert!(etag_list_matches(b"*", tag, Comparison::Weak));
        assert!(etag_list_matches(b" * ", tag, Comparison::Strong));
        assert!(!etag_list_matches(b"\"abc\"", tag, Comparison::Weak));
        assert!(!etag_list_matches(b"abc-br", tag, Comparison::Weak));
        assert!(!etag_list_matches(b"", tag, Comparison::Weak));
        assert!(!etag_list_matches(b"\"abc-br", tag, Comparison::Weak));
        assert!(!etag_list_matches(
            b"\"x\" junk \"abc-br\"",
            tag,
            Comparison::Weak
        ));
        assert!(is_entity_tag(b"\"x\""));
        assert!(is_entity_tag(b"W/\"x\""));
        assert!(!is_entity_tag(b"Sun, 06 Nov 1994 08:49:37 GMT"));
    }

    #[test]
    fn ranges() {
        use RangeRequest::*;
        assert_eq!(parse_range(b"bytes=0-9", 100), Part { first: 0, last: 9 });
        assert_eq!(
            parse_range(b"bytes=90-", 100),
            Part {
                first: 90,
                last: 99
            }
        );
        assert_eq!(
            parse_range(b"bytes=90-1000", 100),
            Part {
                first: 90,
                last: 99
            }
        );
        assert_eq!(
            parse_range(b"bytes=-10", 100),
            Part {
                first: 90,
                last: 99
            }
        );
        assert_eq!(
            parse_range(b"bytes=-1000", 100),
            Part { first: 0, last: 99 }
        );
        assert_eq!(parse_range(b"Bytes = 5-5", 100), Full);
        assert_eq!(parse_range(b"BYTES=5-5", 100), Part { first: 5, last: 5 });
        assert_eq!(parse_range(b"bytes=100-", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=100-200", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-0", 0), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-5", 0), Unsatisfiable);
        assert_eq!(
            parse_range(b"bytes=99999999999999999999999-", 100),
            Unsatisfiable
        );
        assert_eq!(
            parse_range(b"bytes=0-99999999999999999999999", 100),
            Part { first: 0, last: 99 }
        );
        assert_eq!(parse_range(b"bytes=9-5", 100), Full);
        assert_eq!(parse_range(b"bytes=0-1,5-6", 100), Full);
        assert_eq!(parse_range(b"items=0-1", 100), Full);
        assert_eq!(parse_range(b"bytes=a-b", 100), Full);
        assert_eq!(parse_range(b"bytes=-", 100), Full);
        assert_eq!(parse_range(b"bytes=+1-2", 100), Full);
        assert_eq!(parse_range(b"bytes", 100), Full);
    }

    fn pick(value: Option<&str>, gzip: bool, br: bool) -> Coding {
        negotiate_coding(value.map(str::as_bytes).into_iter(), gzip, br)
    }

    #[test]
    fn accept_encoding() {
        use Coding::*;
        assert_eq!(pick(None, true, true), Identity);
        assert_eq!(pick(Some(""), true, true), Identity);
        assert_eq!(pick(Some("gzip, deflate, br"), true, true), Brotli);
        assert_eq!(pick(Some("gzip, deflate, br"), true, false), Gzip);
        assert_eq!(pick(Some("gzip, deflate, br"), false, false), Identity);
        assert_eq!(pick(Some("gzip;q=1.0, br;q=0.5"), true, true), Gzip);
        assert_eq!(pick(Some("br;q=0, gzip"), true, true), Gzip);
        assert_eq!(pick(Some("gzip;q=0"), true, false), Identity);
        assert_eq!(pick(Some("gzip; q=0.000"), true, false), Identity);
        assert_eq!(pick(Some("*"), true, true), Brotli);
        assert_eq!(pick(Some("*;q=0.5, identity"), true, true), Identity);
        assert_eq!(pick(Some("*;q=0"), true, true), Identity);
        assert_eq!(pick(Some("*;q=0, gzip;q=0.1"), true, true), Gzip);
        assert_eq!(pick(Some("identity;q=0, gzip;q=0.2"), true, true), Gzip);
        assert_eq!(pick(Some("x-gzip"), true, true), Gzip);
        assert_eq!(pick(Some("GZIP;Q=0.9"), true, true), Gzip);
        assert_eq!(pick(Some("gzip;q=2"), true, true), Identity);
        assert_eq!(pick(Some("gzip;q=0.5;foo=bar, br;q=0.4"), true, true), Gzip);
        assert_eq!(pick(Some("identity"), true, true), Identity);
        // Several header lines are one list.
        assert_eq!(
            negotiate_coding([&b"gzip;q=0.5"[..], b"br;q=0.6"].into_iter(), true, true),
            Brotli
        );
    }

    #[test]
    fn tokens_and_lengths() {
        assert!(has_token(b"keep-alive, Close", "close"));
        assert!(!has_token(b"closed", "close"));
        assert_eq!(content_length(b"42"), Some(42));
        assert_eq!(content_length(b" 0 "), Some(0));
        assert_eq!(content_length(b"-1"), None);
        assert_eq!(content_length(b"+1"), None);
        assert_eq!(content_length(b"1,1"), None);
        assert_eq!(content_length(b""), None);
        assert_eq!(content_length(b"99999999999999999999"), None);
    }
}
