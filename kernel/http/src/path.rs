//! Request-target handling: percent-decoding, dot-segment normalisation, Location encoding.

use core::fmt::Write;

/// Longest request target accepted, in bytes; longer ones get 414.
pub const MAX_TARGET_LEN: usize = 2048;

/// A decoded, normalised path: starts with '/', no "." or ".." segments, no empty segments.
pub type NormalPath = heapless::String<MAX_TARGET_LEN>;

/// Why a request target could not be turned into a site path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathError {
    /// A '%' not followed by two hex digits, a decoded NUL or control byte, or a target that is
    /// not origin-form (e.g. empty or relative). Answered with 400.
    Malformed,
    /// ".." segments that climb above the site root. Answered with 400.
    Traversal,
    /// The decoded path is not UTF-8, so it names no file in the image. Answered with 404.
    NotUtf8,
    /// Longer than [`MAX_TARGET_LEN`]. Answered with 414.
    TooLong,
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits an origin-form target into its path and query (the query without its '?').
pub fn split_query(target: &str) -> (&str, Option<&str>) {
    let target = target.split('#').next().unwrap_or("");
    match target.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (target, None),
    }
}

/// Percent-decodes `path` (the part of an origin-form target before '?') and removes dot
/// segments and repeated slashes (RFC 3986 §5.2.4), writing a path that starts with '/'.
pub fn normalize_path(path: &str, out: &mut NormalPath) -> Result<(), PathError> {
    out.clear();
    let raw = path.as_bytes();
    if raw.first() != Some(&b'/') {
        return Err(PathError::Malformed);
    }
    if raw.len() > MAX_TARGET_LEN {
        return Err(PathError::TooLong);
    }
    let mut decoded = heapless::Vec::<u8, MAX_TARGET_LEN>::new();
    let mut i = 0;
    while i < raw.len() {
        let mut b = raw[i];
        if b == b'%' {
            let hi = raw.get(i + 1).copied().and_then(hex_value);
            let lo = raw.get(i + 2).copied().and_then(hex_value);
            match (hi, lo) {
                (Some(hi), Some(lo)) => b = hi << 4 | lo,
                _ => return Err(PathError::Malformed),
            }
            i += 3;
        } else {
            i += 1;
        }
        if b < 0x20 || b == 0x7f {
            return Err(PathError::Malformed);
        }
        decoded.push(b).map_err(|_| PathError::TooLong)?;
    }
    let decoded = core::str::from_utf8(&decoded).map_err(|_| PathError::NotUtf8)?;

    // Each kept segment is appended as "/segment"; ".." truncates back to the previous '/'.
    let mut ends_in_directory = false;
    for segment in decoded.split('/').skip(1) {
        ends_in_directory = true;
        match segment {
            "" | "." => {}
            ".." => {
                if out.is_empty() {
                    return Err(PathError::Traversal);
                }
                let cut = out.rfind('/').unwrap_or(0);
                out.truncate(cut);
            }
            _ => {
                ends_in_directory = false;
                out.push('/').map_err(|_| PathError::TooLong)?;
                out.push_str(segment).map_err(|_| PathError::TooLong)?;
            }
        }
    }
    if out.is_empty() || ends_in_directory {
        out.push('/').map_err(|_| PathError::TooLong)?;
    }
    Ok(())
}

/// Writes `path` percent-encoded for a Location header: everything outside RFC 3986's
/// `pchar` set and '/' is escaped, so the result can never read as a scheme or authority.
pub fn write_encoded_path(out: &mut impl Write, path: &str) -> core::fmt::Result {
    for &b in path.as_bytes() {
        let plain = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
        if plain {
            out.write_char(char::from(b))?;
        } else {
            write!(out, "%{b:02X}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(path: &str) -> Result<NormalPath, PathError> {
        let mut out = NormalPath::new();
        normalize_path(path, &mut out).map(|()| out)
    }

    #[test]
    fn decodes_and_normalises() {
        let cases = [
            ("/", "/"),
            ("/index.html", "/index.html"),
            ("/a%20b.txt", "/a b.txt"),
            ("/caf%C3%A9", "/café"),
            ("/a/./b", "/a/b"),
            ("/a/b/../c", "/a/c"),
            ("/a//b", "/a/b"),
            ("/dir/", "/dir/"),
            ("/dir/.", "/dir/"),
            ("/dir/sub/..", "/dir/"),
            ("/a/..", "/"),
            ("//", "/"),
            ("/x/%2e%2e/y", "/y"),
            ("/a%2Fb", "/a/b"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                norm(input).as_deref().map(|s| s as &str),
                Ok(expected),
                "{input}"
            );
        }
    }

    #[test]
    fn rejects_traversal_and_malformed_targets() {
        assert_eq!(norm("/.."), Err(PathError::Traversal));
        assert_eq!(norm("/../etc/passwd"), Err(PathError::Traversal));
        assert_eq!(norm("/a/../../etc"), Err(PathError::Traversal));
        assert_eq!(norm("/%2e%2e/etc"), Err(PathError::Traversal));
        assert_eq!(norm("/..%2f..%2fetc"), Err(PathError::Traversal));
        assert_eq!(norm("/a%zz"), Err(PathError::Malformed));
        assert_eq!(norm("/a%2"), Err(PathError::Malformed));
        assert_eq!(norm("/a%00b"), Err(PathError::Malformed));
        assert_eq!(norm("/a%0Ab"), Err(PathError::Malformed));
        assert_eq!(norm("relative"), Err(PathError::Malformed));
        assert_eq!(norm(""), Err(PathError::Malformed));
        assert_eq!(norm("/%ff"), Err(PathError::NotUtf8));
    }

    #[test]
    fn splits_query_and_fragment() {
        assert_eq!(split_query("/a?b=c"), ("/a", Some("b=c")));
        assert_eq!(split_query("/a"), ("/a", None));
        assert_eq!(split_query("/a#frag"), ("/a", None));
    }

    #[test]
    fn encodes_locations() {
        let mut s = heapless::String::<64>::new();
        write_encoded_path(&mut s, "/a b/café/%/").unwrap();
        assert_eq!(s.as_str(), "/a%20b/caf%C3%A9/%25/");
    }
}
