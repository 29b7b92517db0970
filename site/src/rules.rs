//! Redirect and header rules: the path-pattern language that `_redirects` and `_headers` share,
//! and checked, allocation-free views of their compiled sections in the site index.
//!
//! A *pattern* is a decoded absolute path whose segments are literal text or a `:name`
//! placeholder (one whole segment), optionally ending with a `*` splat that takes the rest of
//! the path (`/blog/*`, `/:year/:slug`, `/files*`). Patterns never end with `/` (except `/`
//! itself): a rule for `/about` answers `/about` and `/about/` alike, as Netlify's and
//! Cloudflare's do. A redirect *target* is a site path or an absolute `http(s)` URL in URL
//! form (percent-encoded, visible ASCII) where `:name` and `:splat` are replaced by what the
//! pattern captured, percent-encoded.
//!
//! The packer ([`check_pattern`], [`check_target`], [`check_header_name`]) and the reader use
//! the same checks, so a rule that packs is a rule the Pi accepts, and a section from a
//! corrupt card is refused at boot rather than misread per request. Matching is a walk over
//! the pattern and the path bytes: no allocation, no recursion, work linear in their length.

use core::fmt;

use crate::bytes::{read_u16, read_u32, reference};

/// Most placeholders one pattern may hold.
pub const MAX_PLACEHOLDERS: usize = 8;
/// Longest pattern or target, in bytes.
pub const MAX_RULE_TEXT_LEN: usize = 1024;
/// Most redirect rules a section may hold (the packer allows 2,000 static and 100 dynamic).
pub const MAX_REDIRECTS: usize = 4096;
/// Most dynamic (placeholder or splat) redirect rules a section may hold: each request may
/// try all of them, so this bounds the work per request.
pub const MAX_DYNAMIC_REDIRECTS: usize = 256;
/// Most header blocks (path patterns) a section may hold: each request tries all of them.
pub const MAX_HEADER_BLOCKS: usize = 256;
/// Most header lines a section may hold, over all blocks (so that a request matching every
/// block still collects them in fixed memory).
pub const MAX_HEADER_ENTRIES: usize = 256;
/// Size of one redirect record in the section.
pub const REDIRECT_RECORD_LEN: usize = 32;
/// Size of one header block record in the section.
pub const HEADER_BLOCK_LEN: usize = 16;
/// Size of one header entry record in the section.
pub const HEADER_ENTRY_LEN: usize = 24;
/// Redirect flag: `!`, applies even when a file exists at the path.
pub const REDIRECT_FORCE: u16 = 1;
/// Redirect flag: the pattern has a placeholder or a splat.
pub const REDIRECT_DYNAMIC: u16 = 2;
/// Header entry flag: `! Name`, drops the header set by earlier matching blocks.
pub const HEADER_REMOVE: u32 = 1;
/// The statuses a redirect rule may have: redirects, a 200 rewrite, 404 and 410 pages.
pub const REDIRECT_STATUSES: [u16; 8] = [200, 301, 302, 303, 307, 308, 404, 410];

/// Header names a `_headers` file may not set: hop-by-hop and framing fields (RFC 9110 §7.6.1,
/// RFC 9112 §6), and the fields the engine computes per response (validators, encodings,
/// ranges, redirects, the date). Lowercase.
pub const FORBIDDEN_HEADERS: [&str; 19] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "content-range",
    "content-encoding",
    "accept-ranges",
    "date",
    "etag",
    "last-modified",
    "location",
    "allow",
    "vary",
    "server",
    "age",
];

/// What a pattern is, once checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternKind {
    /// Literal text only: matched by exact comparison (a binary search in the section).
    Static,
    /// Has a placeholder or a splat.
    Dynamic,
}

/// Why a pattern or target is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleProblem {
    /// A pattern must start with `/`.
    NotAbsolute,
    /// Longer than [`MAX_RULE_TEXT_LEN`].
    TooLong,
    /// `//` or a trailing `/` (the packer removes a trailing one).
    EmptySegment,
    /// A `.` or `..` segment (request paths never have one, so it could never match).
    DotSegment,
    /// A control character.
    ControlCharacter,
    /// `?` or `#` in a pattern (query and fragment conditions are not supported).
    QueryInPattern,
    /// `*` anywhere but at the end of the pattern.
    SplatNotLast,
    /// `:` starting a segment without a valid name after it (letters, digits, `_`, not
    /// starting with a digit), or followed by more text in the segment, or named `splat`.
    BadPlaceholder,
    /// The same placeholder twice.
    DuplicatePlaceholder,
    /// More than [`MAX_PLACEHOLDERS`] placeholders.
    TooManyPlaceholders,
    /// A target holding something other than visible ASCII (percent-encode it).
    TargetNotUrl,
    /// A target that is neither a site path (`/...`) nor an `http://` or `https://` URL.
    TargetNotAbsolute,
    /// `:name` in a target that the pattern does not capture.
    UnknownPlaceholder,
    /// A header name that is not an HTTP token.
    BadHeaderName,
    /// A header name Bramble does not let a site set (see [`FORBIDDEN_HEADERS`]).
    ForbiddenHeader,
    /// A header value with characters outside visible ASCII, space and tab, or empty.
    BadHeaderValue,
}

impl fmt::Display for RuleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleProblem::NotAbsolute => "a path pattern must start with /",
            RuleProblem::TooLong => "longer than 1024 bytes",
            RuleProblem::EmptySegment => "empty path segment (//)",
            RuleProblem::DotSegment => {
                "a . or .. segment never matches (request paths are normalised)"
            }
            RuleProblem::ControlCharacter => "control character",
            RuleProblem::QueryInPattern => {
                "query-string and fragment conditions are not supported in a pattern"
            }
            RuleProblem::SplatNotLast => "a splat (*) may only end the pattern",
            RuleProblem::BadPlaceholder => {
                "a placeholder is a whole segment `:name` (letters, digits, _; not `:splat`)"
            }
            RuleProblem::DuplicatePlaceholder => "the same placeholder twice",
            RuleProblem::TooManyPlaceholders => "more than 8 placeholders",
            RuleProblem::TargetNotUrl => {
                "the target must be visible ASCII (percent-encode spaces and non-ASCII)"
            }
            RuleProblem::TargetNotAbsolute => {
                "the target must be a site path (/...) or an http:// or https:// URL"
            }
            RuleProblem::UnknownPlaceholder => "the pattern does not capture this placeholder",
            RuleProblem::BadHeaderName => "not a valid header name",
            RuleProblem::ForbiddenHeader => {
                "this header is set by the server (hop-by-hop, framing, validators or \
                 encodings) and cannot be set here"
            }
            RuleProblem::BadHeaderValue => {
                "header values must be non-empty visible ASCII (spaces and tabs allowed)"
            }
        })
    }
}

/// A refused pattern, target or header: what, and the byte offset in the text it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// Byte offset of the problem in the checked text.
    pub at: usize,
    /// The problem.
    pub problem: RuleProblem,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.problem)
    }
}

fn error(at: usize, problem: RuleProblem) -> RuleError {
    RuleError { at, problem }
}

/// Is `name` a placeholder name: `[A-Za-z_][A-Za-z0-9_]*`?
fn is_name(name: &[u8]) -> bool {
    match name.split_first() {
        Some((first, rest)) => {
            (first.is_ascii_alphabetic() || *first == b'_')
                && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
        None => false,
    }
}

/// The length of the name starting `text` (letters, digits, `_`, not starting with a digit).
fn name_len(text: &[u8]) -> usize {
    match text.first() {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => text
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
            .unwrap_or(text.len()),
        _ => 0,
    }
}

/// Checks a pattern (see the module documentation) and says whether it is static.
pub fn check_pattern(pattern: &str) -> Result<PatternKind, RuleError> {
    let bytes = pattern.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(error(0, RuleProblem::NotAbsolute));
    }
    if bytes.len() > MAX_RULE_TEXT_LEN {
        return Err(error(MAX_RULE_TEXT_LEN, RuleProblem::TooLong));
    }
    if let Some(at) = bytes.iter().position(|&b| b < 0x20 || b == 0x7f) {
        return Err(error(at, RuleProblem::ControlCharacter));
    }
    if let Some(at) = bytes.iter().position(|&b| b == b'?' || b == b'#') {
        return Err(error(at, RuleProblem::QueryInPattern));
    }
    if let Some(at) = bytes.iter().position(|&b| b == b'*')
        && at + 1 != bytes.len()
    {
        return Err(error(at, RuleProblem::SplatNotLast));
    }
    if bytes == b"/" {
        return Ok(PatternKind::Static);
    }
    let mut kind = if bytes.ends_with(b"*") {
        PatternKind::Dynamic
    } else {
        PatternKind::Static
    };
    let mut names: [&[u8]; MAX_PLACEHOLDERS] = [&[]; MAX_PLACEHOLDERS];
    let mut count = 0;
    let mut start = 1;
    for segment in bytes[1..].split(|&b| b == b'/') {
        let last = start + segment.len() == bytes.len();
        let literal = if last {
            segment.strip_suffix(b"*").unwrap_or(segment)
        } else {
            segment
        };
        if segment.is_empty() {
            return Err(error(start, RuleProblem::EmptySegment));
        }
        if segment == b"." || segment == b".." {
            return Err(error(start, RuleProblem::DotSegment));
        }
        if let Some(name) = segment.strip_prefix(b":") {
            if !is_name(name) || name == b"splat" {
                return Err(error(start, RuleProblem::BadPlaceholder));
            }
            if names[..count].contains(&name) {
                return Err(error(start, RuleProblem::DuplicatePlaceholder));
            }
            if count == MAX_PLACEHOLDERS {
                return Err(error(start, RuleProblem::TooManyPlaceholders));
            }
            names[count] = name;
            count += 1;
            kind = PatternKind::Dynamic;
        } else if literal.first() == Some(&b':') && literal.len() != segment.len() {
            // `:name*` would mix a placeholder and a splat in one segment.
            return Err(error(start, RuleProblem::BadPlaceholder));
        }
        start += segment.len() + 1;
    }
    Ok(kind)
}

/// Does `pattern` capture `name` (`splat` when it ends with `*`)?
fn captures_name(pattern: &[u8], name: &[u8]) -> bool {
    if name == b"splat" {
        return pattern.ends_with(b"*");
    }
    pattern
        .split(|&b| b == b'/')
        .any(|segment| segment.strip_prefix(b":") == Some(name))
}

/// Checks a redirect target for a checked `pattern`: a site path or an `http(s)` URL, visible
/// ASCII, every `:name` captured by the pattern. `site_path_only` refuses URLs (rewrites,
/// 404 and 410 pages are files of the site).
pub fn check_target(target: &str, pattern: &str, site_path_only: bool) -> Result<(), RuleError> {
    let bytes = target.as_bytes();
    if bytes.len() > MAX_RULE_TEXT_LEN {
        return Err(error(MAX_RULE_TEXT_LEN, RuleProblem::TooLong));
    }
    if let Some(at) = bytes.iter().position(|&b| !(0x21..0x7f).contains(&b)) {
        return Err(error(at, RuleProblem::TargetNotUrl));
    }
    let url = ["http://", "https://"].iter().any(|scheme| {
        bytes.len() > scheme.len()
            && bytes[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
            && bytes[scheme.len()] != b'/'
    });
    if !(bytes.first() == Some(&b'/') && bytes.get(1) != Some(&b'/')) && (site_path_only || !url) {
        return Err(error(0, RuleProblem::TargetNotAbsolute));
    }
    let mut at = 0;
    while let Some(colon) = bytes[at..].iter().position(|&b| b == b':') {
        let name_start = at + colon + 1;
        let len = name_len(&bytes[name_start..]);
        let name = &bytes[name_start..name_start + len];
        if len > 0 && !captures_name(pattern.as_bytes(), name) {
            return Err(error(at + colon, RuleProblem::UnknownPlaceholder));
        }
        at = name_start + len;
    }
    Ok(())
}

/// Is `b` an HTTP token character (RFC 9110 §5.6.2)?
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks a header name for `_headers`: a token, not one of [`FORBIDDEN_HEADERS`].
pub fn check_header_name(name: &str) -> Result<(), RuleError> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(error(0, RuleProblem::BadHeaderName));
    }
    if let Some(at) = bytes.iter().position(|&b| !is_tchar(b)) {
        return Err(error(at, RuleProblem::BadHeaderName));
    }
    if FORBIDDEN_HEADERS
        .iter()
        .any(|forbidden| forbidden.as_bytes().eq_ignore_ascii_case(bytes))
    {
        return Err(error(0, RuleProblem::ForbiddenHeader));
    }
    Ok(())
}

/// Checks a header value for `_headers`: non-empty, visible ASCII, spaces and tabs, no
/// leading or trailing whitespace.
pub fn check_header_value(value: &str) -> Result<(), RuleError> {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Err(error(0, RuleProblem::BadHeaderValue));
    }
    if let Some(at) = bytes
        .iter()
        .position(|&b| !((0x20..0x7f).contains(&b) || b == b'\t'))
    {
        return Err(error(at, RuleProblem::BadHeaderValue));
    }
    if bytes[0].is_ascii_whitespace() || bytes[bytes.len() - 1].is_ascii_whitespace() {
        return Err(error(0, RuleProblem::BadHeaderValue));
    }
    Ok(())
}

/// What a pattern captured from a path: byte ranges of the pattern (names) and of the path
/// (values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Captures {
    count: usize,
    /// (name start, name end) in the pattern, (value start, value end) in the path.
    placeholders: [((usize, usize), (usize, usize)); MAX_PLACEHOLDERS],
    /// The splat's range in the path, when the pattern has one.
    splat: Option<(usize, usize)>,
}

impl Captures {
    /// The value `name` captured, if the pattern has it (`splat` for the splat).
    pub fn get<'p>(&self, pattern: &str, path: &'p str, name: &str) -> Option<&'p str> {
        let range = if name == "splat" {
            self.splat?
        } else {
            self.placeholders[..self.count]
                .iter()
                .find(|((start, end), _)| pattern.get(*start..*end) == Some(name))?
                .1
        };
        path.get(range.0..range.1)
    }
}

/// Matches a checked `pattern` against a normalised request `path` (percent-decoded, starting
/// with `/`; a trailing `/` is ignored, except that a splat keeps it). Returns the captures.
pub fn match_pattern(pattern: &str, path: &str) -> Option<Captures> {
    let pattern_bytes = pattern.as_bytes();
    let path_bytes = path.as_bytes();
    if path_bytes.first() != Some(&b'/') || pattern_bytes.first() != Some(&b'/') {
        return None;
    }
    // The path without one trailing slash: `/about/` matches the rule for `/about`.
    let key_len = if path_bytes.len() > 1 && path_bytes.ends_with(b"/") {
        path_bytes.len() - 1
    } else {
        path_bytes.len()
    };
    let key = &path_bytes[..key_len];
    let mut captures = Captures::default();
    if pattern_bytes == b"/" {
        return (key == b"/").then_some(captures);
    }
    // Walk the pattern's segments against the key's segments.
    let mut at = 1; // position in the key, after a '/'
    let mut pattern_at = 1;
    loop {
        let segment_end = pattern_bytes[pattern_at..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(pattern_bytes.len(), |i| pattern_at + i);
        let segment = &pattern_bytes[pattern_at..segment_end];
        let is_last = segment_end == pattern_bytes.len();
        if is_last && segment.ends_with(b"*") {
            let literal = &segment[..segment.len() - 1];
            if literal.is_empty() {
                // `/prefix/*`: the rest, possibly nothing (`/prefix` and `/prefix/` match).
                if at > key.len() {
                    // The key ended just before this segment (`/prefix`).
                    captures.splat = Some((path_bytes.len(), path_bytes.len()));
                } else {
                    captures.splat = Some((at, path_bytes.len()));
                }
                return Some(captures);
            }
            let rest = key.get(at..)?;
            if !rest.starts_with(literal) {
                return None;
            }
            captures.splat = Some((at + literal.len(), path_bytes.len()));
            return Some(captures);
        }
        // This pattern segment needs a key segment.
        if at > key.len() {
            return None;
        }
        let key_end = key[at..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(key.len(), |i| at + i);
        let value = &key[at..key_end];
        if value.is_empty() {
            return None;
        }
        if segment.first() == Some(&b':') {
            if captures.count == MAX_PLACEHOLDERS {
                return None;
            }
            captures.placeholders[captures.count] = ((pattern_at + 1, segment_end), (at, key_end));
            captures.count += 1;
        } else if segment != value {
            return None;
        }
        if is_last {
            return (key_end == key.len()).then_some(captures);
        }
        at = key_end + 1;
        pattern_at = segment_end + 1;
    }
}

/// Writes `value` percent-encoded for a URL path: everything outside RFC 3986's `pchar`
/// set and `/` becomes `%XX`.
pub fn write_url_encoded(out: &mut impl fmt::Write, value: &str) -> fmt::Result {
    for &b in value.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b) {
            out.write_char(char::from(b))?;
        } else {
            write!(out, "%{b:02X}")?;
        }
    }
    Ok(())
}

/// Writes a checked `target` with each `:name` replaced by what `pattern` captured from
/// `path`, percent-encoded.
pub fn write_target(
    out: &mut impl fmt::Write,
    target: &str,
    pattern: &str,
    path: &str,
    captures: &Captures,
) -> fmt::Result {
    let bytes = target.as_bytes();
    let mut at = 0;
    let mut plain_from = 0;
    while let Some(colon) = bytes[at..].iter().position(|&b| b == b':') {
        let colon = at + colon;
        let name_start = colon + 1;
        let len = name_len(&bytes[name_start..]);
        let name = target.get(name_start..name_start + len).unwrap_or("");
        at = name_start + len;
        if let Some(value) = captures.get(pattern, path, name).filter(|_| len > 0) {
            out.write_str(target.get(plain_from..colon).unwrap_or(""))?;
            write_url_encoded(out, value)?;
            plain_from = at;
        }
    }
    out.write_str(target.get(plain_from..).unwrap_or(""))
}

/// Why a rules section was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionError {
    /// The section's length does not fit its counts, or a count is over its limit.
    Malformed,
    /// Rule (or block) number `index` is invalid: a reference out of bounds, text that fails
    /// its check, an unknown status or flag, or an index list out of order.
    BadRule {
        /// Number of the rule, redirect or header block, in the section.
        index: usize,
    },
}

/// A string reference of `record` at `field` as checked text, or `None`.
fn string_at<'a>(record: &[u8], field: usize, strings: &'a [u8]) -> Option<&'a str> {
    let range = reference(record, field, strings.len())?;
    core::str::from_utf8(strings.get(range)?).ok()
}

/// One compiled `_redirects` rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedirectRule<'a> {
    /// The pattern (decoded path).
    pub from: &'a str,
    /// The target (URL form).
    pub to: &'a str,
    /// 301, 302, 303, 307, 308 (redirects), 200 (rewrite), 404 or 410 (the target's content
    /// with that status).
    pub status: u16,
    /// `!`: applies even when a file exists at the path.
    pub force: bool,
    /// Line of `_redirects` it came from, for log lines.
    pub line: u32,
}

/// A rule that matched, with what its pattern captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedirectMatch<'a> {
    /// The rule.
    pub rule: RedirectRule<'a>,
    /// What its pattern captured from the path.
    pub captures: Captures,
}

/// The checked redirect section: rules in file order, an index of the static ones sorted by
/// pattern, and the numbers of the dynamic ones in order.
#[derive(Clone, Copy, Debug)]
pub struct Redirects<'a> {
    records: &'a [u8],
    statics: &'a [u8],
    dynamics: &'a [u8],
    strings: &'a [u8],
}

impl<'a> Redirects<'a> {
    /// No rules.
    pub const EMPTY: Redirects<'static> = Redirects {
        records: &[],
        statics: &[],
        dynamics: &[],
        strings: &[],
    };

    /// Checks a redirect section (layout in FORMAT.md) whose strings are in `strings`.
    pub fn new_checked(section: &'a [u8], strings: &'a [u8]) -> Result<Self, SectionError> {
        let count = read_u32(section, 0) as usize;
        let static_count = read_u32(section, 4) as usize;
        let dynamic_count = read_u32(section, 8) as usize;
        if count > MAX_REDIRECTS
            || dynamic_count > MAX_DYNAMIC_REDIRECTS
            || static_count.checked_add(dynamic_count) != Some(count)
        {
            return Err(SectionError::Malformed);
        }
        let records_len = count * REDIRECT_RECORD_LEN;
        let records_end = 16 + records_len;
        let statics_end = records_end + static_count * 4;
        let dynamics_end = statics_end + dynamic_count * 4;
        if section.len() != dynamics_end.next_multiple_of(8) || read_u32(section, 12) != 0 {
            return Err(SectionError::Malformed);
        }
        let redirects = Redirects {
            records: &section[16..records_end],
            statics: &section[records_end..statics_end],
            dynamics: &section[statics_end..dynamics_end],
            strings,
        };
        for index in 0..count {
            let bad = SectionError::BadRule { index };
            let record = redirects.record(index);
            let from = string_at(record, 0, strings).ok_or(bad)?;
            let to = string_at(record, 8, strings).ok_or(bad)?;
            let status = read_u16(record, 16);
            let flags = read_u16(record, 18);
            let kind = check_pattern(from).map_err(|_| bad)?;
            let site_only = matches!(status, 200 | 404 | 410);
            if !REDIRECT_STATUSES.contains(&status)
                || flags & !(REDIRECT_FORCE | REDIRECT_DYNAMIC) != 0
                || (flags & REDIRECT_DYNAMIC != 0) != (kind == PatternKind::Dynamic)
                || record[24..32].iter().any(|&b| b != 0)
                || check_target(to, from, site_only).is_err()
                || (site_only && to.contains(['?', '#']))
            {
                return Err(bad);
            }
        }
        // The static index: every static rule once, sorted by pattern, ties by rule number.
        let mut previous: Option<(&str, usize)> = None;
        let mut seen_statics = 0usize;
        for slot in 0..static_count {
            let bad = SectionError::BadRule { index: slot };
            let index = read_u32(redirects.statics, slot * 4) as usize;
            if index >= count || redirects.rule(index).status == 0 {
                return Err(bad);
            }
            let flags = read_u16(redirects.record(index), 18);
            if flags & REDIRECT_DYNAMIC != 0 {
                return Err(bad);
            }
            let from = redirects.rule(index).from;
            if let Some((before, before_index)) = previous
                && (before, before_index) >= (from, index)
            {
                return Err(bad);
            }
            previous = Some((from, index));
            seen_statics += 1;
        }
        let mut previous_dynamic: Option<usize> = None;
        for slot in 0..dynamic_count {
            let bad = SectionError::BadRule { index: slot };
            let index = read_u32(redirects.dynamics, slot * 4) as usize;
            if index >= count
                || read_u16(redirects.record(index), 18) & REDIRECT_DYNAMIC == 0
                || previous_dynamic.is_some_and(|before| before >= index)
            {
                return Err(bad);
            }
            previous_dynamic = Some(index);
        }
        // Counts add up and both lists are strictly ordered with the right kind, so together
        // they hold every rule exactly once.
        debug_assert_eq!(seen_statics, static_count);
        Ok(redirects)
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.records.len() / REDIRECT_RECORD_LEN
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    fn record(&self, index: usize) -> &'a [u8] {
        let start = index.saturating_mul(REDIRECT_RECORD_LEN);
        self.records
            .get(start..start.saturating_add(REDIRECT_RECORD_LEN))
            .unwrap_or(&[])
    }

    /// Rule number `index` (file order); an all-empty rule with status 0 if out of range.
    pub fn rule(&self, index: usize) -> RedirectRule<'a> {
        let record = self.record(index);
        RedirectRule {
            from: string_at(record, 0, self.strings).unwrap_or(""),
            to: string_at(record, 8, self.strings).unwrap_or(""),
            status: read_u16(record, 16),
            force: read_u16(record, 18) & REDIRECT_FORCE != 0,
            line: read_u32(record, 20),
        }
    }

    /// The first rule (in file order) matching `path` (normalised, decoded), among the forced
    /// ones only when `forced_only`. O(log static + dynamic), no allocation.
    pub fn find(&self, path: &str, forced_only: bool) -> Option<RedirectMatch<'a>> {
        let key = if path.len() > 1 && path.ends_with('/') {
            &path[..path.len() - 1]
        } else {
            path
        };
        let static_count = self.statics.len() / 4;
        let static_rule = |slot: usize| read_u32(self.statics, slot * 4) as usize;
        // First slot whose pattern is >= key.
        let (mut low, mut high) = (0, static_count);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.rule(static_rule(middle)).from < key {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        let mut best: Option<usize> = None;
        let mut slot = low;
        while slot < static_count {
            let index = static_rule(slot);
            let rule = self.rule(index);
            if rule.from != key {
                break;
            }
            if !forced_only || rule.force {
                best = Some(index);
                break;
            }
            slot += 1;
        }
        for slot in 0..self.dynamics.len() / 4 {
            let index = read_u32(self.dynamics, slot * 4) as usize;
            if best.is_some_and(|best| best < index) {
                break;
            }
            let rule = self.rule(index);
            if forced_only && !rule.force {
                continue;
            }
            if let Some(captures) = match_pattern(rule.from, path) {
                return Some(RedirectMatch { rule, captures });
            }
        }
        best.map(|index| RedirectMatch {
            rule: self.rule(index),
            captures: Captures::default(),
        })
    }
}

/// One header line of a `_headers` block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderEntry<'a> {
    /// Field name as written.
    pub name: &'a str,
    /// Field value (empty for a removal).
    pub value: &'a str,
    /// `! Name`: drops the field set by earlier matching blocks (or the default).
    pub remove: bool,
}

/// The checked header section: blocks (a pattern and its lines) in file order.
#[derive(Clone, Copy, Debug)]
pub struct HeaderRules<'a> {
    blocks: &'a [u8],
    entries: &'a [u8],
    strings: &'a [u8],
}

impl<'a> HeaderRules<'a> {
    /// No rules.
    pub const EMPTY: HeaderRules<'static> = HeaderRules {
        blocks: &[],
        entries: &[],
        strings: &[],
    };

    /// Checks a header section (layout in FORMAT.md) whose strings are in `strings`.
    pub fn new_checked(section: &'a [u8], strings: &'a [u8]) -> Result<Self, SectionError> {
        let block_count = read_u32(section, 0) as usize;
        let entry_count = read_u32(section, 4) as usize;
        if block_count > MAX_HEADER_BLOCKS || entry_count > MAX_HEADER_ENTRIES {
            return Err(SectionError::Malformed);
        }
        let blocks_end = 8 + block_count * HEADER_BLOCK_LEN;
        let entries_end = blocks_end + entry_count * HEADER_ENTRY_LEN;
        if section.len() != entries_end {
            return Err(SectionError::Malformed);
        }
        let rules = HeaderRules {
            blocks: &section[8..blocks_end],
            entries: &section[blocks_end..entries_end],
            strings,
        };
        // Blocks cover the entries in order, back to back.
        let mut next_entry = 0usize;
        for index in 0..block_count {
            let bad = SectionError::BadRule { index };
            let record = &rules.blocks[index * HEADER_BLOCK_LEN..][..HEADER_BLOCK_LEN];
            let pattern = string_at(record, 0, strings).ok_or(bad)?;
            check_pattern(pattern).map_err(|_| bad)?;
            let first = read_u32(record, 8) as usize;
            let count = read_u32(record, 12) as usize;
            if first != next_entry || count == 0 {
                return Err(bad);
            }
            next_entry = first.checked_add(count).ok_or(bad)?;
            if next_entry > entry_count {
                return Err(bad);
            }
            for entry in first..next_entry {
                let record = &rules.entries[entry * HEADER_ENTRY_LEN..][..HEADER_ENTRY_LEN];
                let name = string_at(record, 0, strings).ok_or(bad)?;
                let value = string_at(record, 8, strings).ok_or(bad)?;
                let flags = read_u32(record, 16);
                let value_ok = if flags & HEADER_REMOVE != 0 {
                    value.is_empty()
                } else {
                    check_header_value(value).is_ok()
                };
                if check_header_name(name).is_err()
                    || !value_ok
                    || flags & !HEADER_REMOVE != 0
                    || read_u32(record, 20) != 0
                {
                    return Err(bad);
                }
            }
        }
        if next_entry != entry_count {
            return Err(SectionError::Malformed);
        }
        Ok(rules)
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len() / HEADER_BLOCK_LEN
    }

    /// True when there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Pattern and entry range of block `index`.
    fn block(&self, index: usize) -> (&'a str, usize, usize) {
        let record = self
            .blocks
            .get(index.saturating_mul(HEADER_BLOCK_LEN)..)
            .and_then(|rest| rest.get(..HEADER_BLOCK_LEN))
            .unwrap_or(&[]);
        let first = read_u32(record, 8) as usize;
        (
            string_at(record, 0, self.strings).unwrap_or(""),
            first,
            first.saturating_add(read_u32(record, 12) as usize),
        )
    }

    /// The pattern of block `index` (empty if out of range).
    pub fn pattern(&self, index: usize) -> &'a str {
        self.block(index).0
    }

    /// Header line `index` over all blocks (an empty removal if out of range).
    pub fn entry(&self, index: usize) -> HeaderEntry<'a> {
        let record = self
            .entries
            .get(index.saturating_mul(HEADER_ENTRY_LEN)..)
            .and_then(|rest| rest.get(..HEADER_ENTRY_LEN))
            .unwrap_or(&[]);
        HeaderEntry {
            name: string_at(record, 0, self.strings).unwrap_or(""),
            value: string_at(record, 8, self.strings).unwrap_or(""),
            remove: read_u32(record, 16) & HEADER_REMOVE != 0 || record.is_empty(),
        }
    }

    /// The header lines of every block matching `path`, combined: blocks in file order, a
    /// removal dropping what earlier blocks set under that name.
    pub fn collect(&self, path: &str) -> CollectedHeaders<'a> {
        let mut out = CollectedHeaders {
            rules: *self,
            entries: [0; MAX_HEADER_ENTRIES],
            len: 0,
        };
        for block in 0..self.len() {
            let (pattern, first, end) = self.block(block);
            if match_pattern(pattern, path).is_none() {
                continue;
            }
            for index in first..end {
                let entry = self.entry(index);
                // Drop earlier lines of this name: all of them for a removal, the removal
                // marks for a value (a later block may set it again).
                let mut kept = 0;
                for i in 0..out.len {
                    let earlier = self.entry(usize::from(out.entries[i]));
                    let same = earlier.name.eq_ignore_ascii_case(entry.name);
                    if !(same && (entry.remove || earlier.remove)) {
                        out.entries[kept] = out.entries[i];
                        kept += 1;
                    }
                }
                out.len = kept;
                if out.len < MAX_HEADER_ENTRIES {
                    // Entry numbers fit: the section holds at most MAX_HEADER_ENTRIES.
                    out.entries[out.len] = u16::try_from(index).unwrap_or(u16::MAX);
                    out.len += 1;
                }
            }
        }
        out
    }
}

/// The header lines that apply to one response (see [`HeaderRules::collect`]).
#[derive(Clone, Copy)]
pub struct CollectedHeaders<'a> {
    rules: HeaderRules<'a>,
    entries: [u16; MAX_HEADER_ENTRIES],
    len: usize,
}

impl fmt::Debug for CollectedHeaders<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.lines()).finish()
    }
}

impl<'a> CollectedHeaders<'a> {
    /// Nothing collected.
    pub const fn none() -> CollectedHeaders<'static> {
        CollectedHeaders {
            rules: HeaderRules::EMPTY,
            entries: [0; MAX_HEADER_ENTRIES],
            len: 0,
        }
    }

    /// The collected lines in order (removals included).
    pub fn lines(&self) -> impl Iterator<Item = HeaderEntry<'a>> + '_ {
        self.entries[..self.len]
            .iter()
            .map(|&i| self.rules.entry(usize::from(i)))
    }

    /// Does anything collected set or remove `name`? (The engine then leaves out its own
    /// field of that name: a default security header, Cache-Control or Content-Type.)
    pub fn mentions(&self, name: &str) -> bool {
        self.lines()
            .any(|line| line.name.eq_ignore_ascii_case(name))
    }

    /// Writes the collected fields, one line per name with the values of every block joined
    /// by `, ` (RFC 9110 §5.3), `Set-Cookie` lines kept apart, removals left out, and
    /// `Strict-Transport-Security` only when `secure` (RFC 6797 §7.2).
    pub fn write(&self, out: &mut impl fmt::Write, secure: bool) -> fmt::Result {
        for (position, line) in self.lines().enumerate() {
            if line.remove
                || (!secure && line.name.eq_ignore_ascii_case("strict-transport-security"))
            {
                continue;
            }
            let joined = !line.name.eq_ignore_ascii_case("set-cookie");
            if joined
                && self
                    .lines()
                    .take(position)
                    .any(|earlier| earlier.name.eq_ignore_ascii_case(line.name))
            {
                continue;
            }
            write!(out, "{}: {}", line.name, line.value)?;
            if joined {
                for later in self.lines().skip(position + 1) {
                    if later.name.eq_ignore_ascii_case(line.name) {
                        write!(out, ", {}", later.value)?;
                    }
                }
            }
            out.write_str("\r\n")?;
        }
        Ok(())
    }
}

/// The writer's side: rules as the packer hands them over, encoded into sections.
#[cfg(feature = "std")]
mod encode {
    use std::string::String;
    use std::vec::Vec;

    use super::*;

    /// One redirect rule for the writer (checked again by it).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct RedirectSpec {
        /// Pattern: a decoded path, no trailing `/` (see [`check_pattern`]).
        pub from: String,
        /// Target in URL form (see [`check_target`]).
        pub to: String,
        /// One of [`REDIRECT_STATUSES`].
        pub status: u16,
        /// `!`.
        pub force: bool,
        /// Line in `_redirects`.
        pub line: u32,
    }

    /// One header line for the writer.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct HeaderEntrySpec {
        /// Field name.
        pub name: String,
        /// Field value (empty for a removal).
        pub value: String,
        /// `! Name`.
        pub remove: bool,
    }

    /// One `_headers` block for the writer.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct HeaderBlockSpec {
        /// Pattern (see [`check_pattern`]).
        pub pattern: String,
        /// Its lines, at least one.
        pub entries: Vec<HeaderEntrySpec>,
    }

    /// Checks one redirect rule as the reader will.
    pub(crate) fn check_redirect(rule: &RedirectSpec) -> Result<PatternKind, String> {
        let kind = check_pattern(&rule.from).map_err(|e| std::format!("{}: {e}", rule.from))?;
        if !REDIRECT_STATUSES.contains(&rule.status) {
            return Err(std::format!("{}: status {}", rule.from, rule.status));
        }
        let site_only = matches!(rule.status, 200 | 404 | 410);
        check_target(&rule.to, &rule.from, site_only)
            .map_err(|e| std::format!("{} -> {}: {e}", rule.from, rule.to))?;
        if site_only && rule.to.contains(['?', '#']) {
            return Err(std::format!(
                "{} -> {}: query in a rewrite",
                rule.from,
                rule.to
            ));
        }
        Ok(kind)
    }

    /// Checks one header block as the reader will.
    pub(crate) fn check_block(block: &HeaderBlockSpec) -> Result<(), String> {
        check_pattern(&block.pattern).map_err(|e| std::format!("{}: {e}", block.pattern))?;
        if block.entries.is_empty() {
            return Err(std::format!("{}: a block without headers", block.pattern));
        }
        for entry in &block.entries {
            check_header_name(&entry.name).map_err(|e| std::format!("{}: {e}", entry.name))?;
            if entry.remove {
                if !entry.value.is_empty() {
                    return Err(std::format!("{}: a removal has no value", entry.name));
                }
            } else {
                check_header_value(&entry.value)
                    .map_err(|e| std::format!("{}: {e}", entry.name))?;
            }
        }
        Ok(())
    }

    fn put_u32(out: &mut Vec<u8>, value: u32) {
        out.extend_from_slice(&value.to_le_bytes());
    }

    fn put_reference(out: &mut Vec<u8>, (offset, len): (u32, u32)) {
        put_u32(out, offset);
        put_u32(out, len);
    }

    /// Encodes checked redirect rules; `intern` places a string and returns its reference.
    pub(crate) fn encode_redirects<'r, E>(
        rules: &'r [RedirectSpec],
        mut intern: impl FnMut(&'r str) -> Result<(u32, u32), E>,
    ) -> Result<Vec<u8>, E> {
        let dynamic =
            |rule: &RedirectSpec| check_pattern(&rule.from).ok() == Some(PatternKind::Dynamic);
        let mut statics: Vec<usize> = (0..rules.len()).filter(|&i| !dynamic(&rules[i])).collect();
        statics.sort_by(|&a, &b| (rules[a].from.as_str(), a).cmp(&(rules[b].from.as_str(), b)));
        let dynamics: Vec<usize> = (0..rules.len()).filter(|&i| dynamic(&rules[i])).collect();
        let mut out = Vec::new();
        put_u32(&mut out, rules.len() as u32);
        put_u32(&mut out, statics.len() as u32);
        put_u32(&mut out, dynamics.len() as u32);
        put_u32(&mut out, 0);
        for rule in rules {
            put_reference(&mut out, intern(&rule.from)?);
            put_reference(&mut out, intern(&rule.to)?);
            out.extend_from_slice(&rule.status.to_le_bytes());
            let mut flags = 0u16;
            if rule.force {
                flags |= REDIRECT_FORCE;
            }
            if dynamic(rule) {
                flags |= REDIRECT_DYNAMIC;
            }
            out.extend_from_slice(&flags.to_le_bytes());
            put_u32(&mut out, rule.line);
            out.extend_from_slice(&[0; 8]);
        }
        for index in statics.iter().chain(&dynamics) {
            put_u32(&mut out, *index as u32);
        }
        out.resize(out.len().next_multiple_of(8), 0);
        Ok(out)
    }

    /// Encodes checked header blocks; `intern` places a string and returns its reference.
    pub(crate) fn encode_headers<'r, E>(
        blocks: &'r [HeaderBlockSpec],
        mut intern: impl FnMut(&'r str) -> Result<(u32, u32), E>,
    ) -> Result<Vec<u8>, E> {
        let entry_count: usize = blocks.iter().map(|block| block.entries.len()).sum();
        let mut out = Vec::new();
        put_u32(&mut out, blocks.len() as u32);
        put_u32(&mut out, entry_count as u32);
        let mut first = 0u32;
        for block in blocks {
            put_reference(&mut out, intern(&block.pattern)?);
            put_u32(&mut out, first);
            put_u32(&mut out, block.entries.len() as u32);
            first += block.entries.len() as u32;
        }
        for block in blocks {
            for entry in &block.entries {
                put_reference(&mut out, intern(&entry.name)?);
                put_reference(&mut out, intern(&entry.value)?);
                put_u32(&mut out, if entry.remove { HEADER_REMOVE } else { 0 });
                put_u32(&mut out, 0);
            }
        }
        Ok(out)
    }
}

#[cfg(feature = "std")]
pub use encode::{HeaderBlockSpec, HeaderEntrySpec, RedirectSpec};
#[cfg(feature = "std")]
pub(crate) use encode::{check_block, check_redirect, encode_headers, encode_redirects};

#[cfg(test)]
mod tests {
    use super::*;

    fn captured<'p>(pattern: &str, path: &'p str, name: &str) -> Option<&'p str> {
        match_pattern(pattern, path)?.get(pattern, path, name)
    }

    #[test]
    fn patterns_are_checked() {
        assert_eq!(check_pattern("/"), Ok(PatternKind::Static));
        assert_eq!(check_pattern("/a/b.html"), Ok(PatternKind::Static));
        assert_eq!(check_pattern("/blog/*"), Ok(PatternKind::Dynamic));
        assert_eq!(check_pattern("/*"), Ok(PatternKind::Dynamic));
        assert_eq!(check_pattern("/files*"), Ok(PatternKind::Dynamic));
        assert_eq!(check_pattern("/:year/:slug"), Ok(PatternKind::Dynamic));
        assert_eq!(check_pattern("/a:b"), Ok(PatternKind::Static));
        let problem = |p: &str| check_pattern(p).unwrap_err().problem;
        assert_eq!(problem("a"), RuleProblem::NotAbsolute);
        assert_eq!(problem("/a//b"), RuleProblem::EmptySegment);
        assert_eq!(problem("/a/"), RuleProblem::EmptySegment);
        assert_eq!(problem("/a/../b"), RuleProblem::DotSegment);
        assert_eq!(problem("/a*/b"), RuleProblem::SplatNotLast);
        assert_eq!(problem("/:"), RuleProblem::BadPlaceholder);
        assert_eq!(problem("/:1a"), RuleProblem::BadPlaceholder);
        assert_eq!(problem("/:splat"), RuleProblem::BadPlaceholder);
        assert_eq!(problem("/:a*"), RuleProblem::BadPlaceholder);
        assert_eq!(problem("/:a/:a"), RuleProblem::DuplicatePlaceholder);
        assert_eq!(problem("/a?b=c"), RuleProblem::QueryInPattern);
        assert_eq!(problem("/a\tb"), RuleProblem::ControlCharacter);
        assert_eq!(
            problem("/:a/:b/:c/:d/:e/:f/:g/:h/:i"),
            RuleProblem::TooManyPlaceholders
        );
        assert_eq!(check_pattern("/a/b*c").unwrap_err().at, 4);
    }

    #[test]
    fn static_patterns_ignore_a_trailing_slash() {
        assert!(match_pattern("/about", "/about").is_some());
        assert!(match_pattern("/about", "/about/").is_some());
        assert!(match_pattern("/about", "/about/x").is_none());
        assert!(match_pattern("/about", "/abou").is_none());
        assert!(match_pattern("/", "/").is_some());
        assert!(match_pattern("/", "/a").is_none());
    }

    #[test]
    fn splats_take_the_rest() {
        assert_eq!(
            captured("/blog/*", "/blog/a/b.html", "splat"),
            Some("a/b.html")
        );
        assert_eq!(captured("/blog/*", "/blog/a/", "splat"), Some("a/"));
        assert_eq!(captured("/blog/*", "/blog/", "splat"), Some(""));
        assert_eq!(captured("/blog/*", "/blog", "splat"), Some(""));
        assert_eq!(captured("/blog/*", "/blogs", "splat"), None);
        assert_eq!(captured("/*", "/", "splat"), Some(""));
        assert_eq!(captured("/*", "/x/y", "splat"), Some("x/y"));
        assert_eq!(
            captured("/files*", "/files-2024.zip", "splat"),
            Some("-2024.zip")
        );
        assert_eq!(captured("/files*", "/file", "splat"), None);
        assert_eq!(captured("/a/:b/*", "/a/x/y/z", "splat"), Some("y/z"));
        assert_eq!(captured("/a/:b/*", "/a/x/y/z", "b"), Some("x"));
        assert_eq!(captured("/a/:b/*", "/a/x", "b"), Some("x"));
        assert_eq!(captured("/a/:b/*", "/a", "b"), None);
    }

    #[test]
    fn placeholders_take_one_segment() {
        let pattern = "/:year/:slug";
        assert_eq!(captured(pattern, "/2024/hello", "year"), Some("2024"));
        assert_eq!(captured(pattern, "/2024/hello/", "slug"), Some("hello"));
        assert!(match_pattern(pattern, "/2024").is_none());
        assert!(match_pattern(pattern, "/2024/hello/x").is_none());
        assert_eq!(captured("/n/:id", "/n/caf\u{e9}", "id"), Some("caf\u{e9}"));
    }

    #[test]
    fn targets_are_checked_and_filled_in() {
        assert!(check_target("/posts/:splat", "/blog/*", false).is_ok());
        assert!(check_target("https://example.com/:splat", "/blog/*", false).is_ok());
        assert!(check_target("https://example.com:8443/a", "/a", false).is_ok());
        assert!(check_target("https://example.com/a", "/a", true).is_err());
        let problem = |t: &str, p: &str| check_target(t, p, false).unwrap_err().problem;
        assert_eq!(
            problem("/posts/:splat", "/blog"),
            RuleProblem::UnknownPlaceholder
        );
        assert_eq!(
            problem("/p/:slug", "/:year"),
            RuleProblem::UnknownPlaceholder
        );
        assert_eq!(problem("posts", "/a"), RuleProblem::TargetNotAbsolute);
        assert_eq!(
            problem("//evil.example/", "/a"),
            RuleProblem::TargetNotAbsolute
        );
        assert_eq!(problem("ftp://x/", "/a"), RuleProblem::TargetNotAbsolute);
        assert_eq!(problem("/a b", "/a"), RuleProblem::TargetNotUrl);

        let mut out = std::string::String::new();
        let (pattern, path) = ("/:year/:slug/*", "/2024/caf\u{e9}/a b/c");
        let captures = match_pattern(pattern, path).unwrap();
        write_target(
            &mut out,
            "/posts/:year-:slug.html?from=:splat",
            pattern,
            path,
            &captures,
        )
        .unwrap();
        assert_eq!(out, "/posts/2024-caf%C3%A9.html?from=a%20b/c");
    }

    #[test]
    fn header_names_and_values_are_checked() {
        assert!(check_header_name("Content-Security-Policy").is_ok());
        assert!(check_header_name("X-Custom_1").is_ok());
        for bad in ["", "Bad Name", "Bad:Name", "Caf\u{e9}"] {
            assert_eq!(
                check_header_name(bad).unwrap_err().problem,
                RuleProblem::BadHeaderName,
                "{bad:?}"
            );
        }
        for forbidden in ["Content-Length", "transfer-encoding", "Connection", "ETag"] {
            assert_eq!(
                check_header_name(forbidden).unwrap_err().problem,
                RuleProblem::ForbiddenHeader
            );
        }
        assert!(check_header_value("default-src 'self'").is_ok());
        for bad in ["", " x", "x ", "a\r\nb", "caf\u{e9}"] {
            assert!(check_header_value(bad).is_err(), "{bad:?}");
        }
    }
}
