//! The text of `_redirects` and `_headers` (feature `std`), in the Netlify / Cloudflare Pages
//! formats: parsed and checked for the packer, every problem an error naming the file, line
//! and column; the rules are then compiled into the site image (see [`crate::rules`]), where
//! the engine looks them up per request.
//!
//! `_redirects`: one rule a line, `from to [status][!]`; `#` starts a comment. Statuses 301,
//! 302, 303, 307, 308 (redirects, 301 when none is given, as on Netlify), 200 (a rewrite:
//! the target's content at the requested URL), 404 and 410 (the target's content with that
//! status). `!` forces the rule even when a file exists at the path. Splats (`/blog/*` ->
//! `/posts/:splat`) and placeholders (`/:year/:slug`). At most 2,000 static and 100 dynamic
//! rules (Cloudflare's limits).
//!
//! `_headers`: a path pattern on a line of its own, then indented `Name: value` lines or
//! `! Name` lines that drop a header set by an earlier matching block (or a default security
//! header). Every block whose pattern matches applies, in file order.

use std::format;
use std::path::{Path, PathBuf};
use std::string::{String, ToString};
use std::vec::Vec;

use crate::rules::{
    HeaderBlockSpec, HeaderEntrySpec, PatternKind, RedirectSpec, RuleError, check_header_name,
    check_header_value, check_pattern, check_target,
};

/// Most static redirect rules (Cloudflare Pages' limit).
pub const MAX_STATIC_REDIRECTS: usize = 2000;
/// Most dynamic redirect rules, with a splat or placeholder (Cloudflare Pages' limit).
pub const MAX_DYNAMIC_REDIRECTS: usize = 100;
/// Most `_headers` blocks (Cloudflare Pages' limit).
pub const MAX_HEADER_BLOCKS: usize = 100;
/// Longest line in either file (Cloudflare Pages' limit).
pub const MAX_LINE_LEN: usize = 1000;
/// The status of a rule that gives none (Netlify's default; Cloudflare's is 302).
pub const DEFAULT_REDIRECT_STATUS: u16 = 301;

/// A problem in `_redirects` or `_headers`: `file:line:column: message` when printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulesError {
    /// The file.
    pub file: PathBuf,
    /// Line, from 1.
    pub line: usize,
    /// Column (characters), from 1.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for RulesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

impl std::error::Error for RulesError {}

/// A token of a line: its text and its byte offset in the line.
type Token<'l> = (&'l str, usize);

/// Splits `line` at whitespace, dropping a `#` comment token and what follows it.
fn tokens(line: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices().chain([(line.len(), ' ')]) {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                out.push((&line[s..i], s));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(comment) = out.iter().position(|(text, _)| text.starts_with('#')) {
        out.truncate(comment);
    }
    out
}

/// Percent-decodes a pattern (request paths are matched decoded) and drops one trailing
/// `/`. The error is the byte offset of a bad escape.
fn decode_pattern(text: &str) -> Result<String, usize> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(b) => out.push(b),
                None => return Err(i),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let mut decoded = String::from_utf8(out).map_err(|_| 0usize)?;
    if decoded.len() > 1 && decoded.ends_with('/') {
        decoded.pop();
    }
    Ok(decoded)
}

/// Parses rule text; `file` names it in errors.
struct Parser<'f> {
    file: &'f Path,
}

impl Parser<'_> {
    fn error(
        &self,
        line: usize,
        text: &str,
        byte: usize,
        message: impl Into<String>,
    ) -> RulesError {
        let column = text
            .get(..byte.min(text.len()))
            .map_or(1, |before| before.chars().count() + 1);
        RulesError {
            file: self.file.to_path_buf(),
            line,
            column,
            message: message.into(),
        }
    }

    /// A pattern token as a checked, decoded pattern.
    fn pattern(
        &self,
        number: usize,
        line: &str,
        (text, at): Token<'_>,
    ) -> Result<(String, PatternKind), RulesError> {
        let lower = text.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return Err(self.error(
                number,
                line,
                at,
                "domain-level rules (a pattern with a scheme and host) are not supported: \
                 Bramble serves one site; start the pattern with /",
            ));
        }
        let decoded = decode_pattern(text)
            .map_err(|offset| self.error(number, line, at + offset, "bad %-escape or not UTF-8"))?;
        let kind = check_pattern(&decoded).map_err(
            |RuleError {
                 at: offset,
                 problem,
             }| {
                // Offsets in the decoded text: exact unless %-escapes come before the problem.
                self.error(
                    number,
                    line,
                    at + offset.min(text.len()),
                    problem.to_string(),
                )
            },
        )?;
        Ok((decoded, kind))
    }

    fn redirects(&self, text: &str) -> Result<Vec<RedirectSpec>, RulesError> {
        let mut rules = Vec::new();
        let (mut statics, mut dynamics) = (0usize, 0usize);
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if line.chars().count() > MAX_LINE_LEN {
                return Err(self.error(number, line, 0, "line longer than 1000 characters"));
            }
            let tokens = tokens(line);
            if tokens.is_empty() {
                continue;
            }
            let Some(&to) = tokens.get(1) else {
                return Err(self.error(
                    number,
                    line,
                    line.len(),
                    "a rule needs a target: `from to [status]`",
                ));
            };
            if to.0.contains('=') {
                return Err(self.error(
                    number,
                    line,
                    to.1,
                    "query-parameter conditions (`key=:value`) are not supported",
                ));
            }
            let (from, kind) = self.pattern(number, line, tokens[0])?;
            let (status, force) = match tokens.get(2) {
                None => (DEFAULT_REDIRECT_STATUS, false),
                Some(&(status_text, at)) => {
                    let (digits, force) = match status_text.strip_suffix('!') {
                        Some(digits) => (digits, true),
                        None => (status_text, false),
                    };
                    let status = digits
                        .parse::<u16>()
                        .ok()
                        .filter(|s| crate::rules::REDIRECT_STATUSES.contains(s));
                    match status {
                        Some(status) => (status, force),
                        None => {
                            return Err(self.error(
                                number,
                                line,
                                at,
                                format!(
                                    "status {status_text:?}: expected 301, 302, 303, 307, 308 \
                                     (redirects), 200 (rewrite), 404 or 410, optionally with ! \
                                     (force)"
                                ),
                            ));
                        }
                    }
                }
            };
            if let Some(&(extra, at)) = tokens.get(3) {
                let message = if extra.contains('=') {
                    format!(
                        "conditions such as {extra:?} (country, language, role, cookie) are \
                         not supported"
                    )
                } else {
                    format!("unexpected {extra:?} after the status")
                };
                return Err(self.error(number, line, at, message));
            }
            let site_only = matches!(status, 200 | 404 | 410);
            let lower = to.0.to_ascii_lowercase();
            if site_only && (lower.starts_with("http://") || lower.starts_with("https://")) {
                return Err(self.error(
                    number,
                    line,
                    to.1,
                    format!(
                        "a {status} rule serves a file of this site; proxying to another site \
                         is not supported"
                    ),
                ));
            }
            if site_only && to.0.contains(['?', '#']) {
                return Err(self.error(
                    number,
                    line,
                    to.1,
                    format!("a {status} rule serves a file: its target has no query or fragment"),
                ));
            }
            check_target(to.0, &from, site_only).map_err(|RuleError { at, problem }| {
                self.error(number, line, to.1 + at, problem.to_string())
            })?;
            if kind == PatternKind::Static
                && !site_only
                && !to.0.contains(['?', '#'])
                && decode_pattern(to.0).as_deref() == Ok(from.as_str())
            {
                return Err(self.error(
                    number,
                    line,
                    to.1,
                    "this rule redirects to itself (an endless loop)",
                ));
            }
            match kind {
                PatternKind::Static => statics += 1,
                PatternKind::Dynamic => dynamics += 1,
            }
            if statics > MAX_STATIC_REDIRECTS {
                return Err(self.error(
                    number,
                    line,
                    0,
                    format!("more than {MAX_STATIC_REDIRECTS} static rules"),
                ));
            }
            if dynamics > MAX_DYNAMIC_REDIRECTS {
                return Err(self.error(
                    number,
                    line,
                    0,
                    format!(
                        "more than {MAX_DYNAMIC_REDIRECTS} dynamic rules (with a splat or \
                         placeholder)"
                    ),
                ));
            }
            rules.push(RedirectSpec {
                from,
                to: to.0.to_string(),
                status,
                force,
                line: u32::try_from(number).unwrap_or(u32::MAX),
            });
        }
        Ok(rules)
    }

    fn headers(&self, text: &str) -> Result<Vec<HeaderBlockSpec>, RulesError> {
        let mut blocks: Vec<(HeaderBlockSpec, usize, String)> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            if line.chars().count() > MAX_LINE_LEN {
                return Err(self.error(number, line, 0, "line longer than 1000 characters"));
            }
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = line.len() - line.trim_start().len();
            if indent == 0 {
                let tokens = tokens(line);
                if tokens.len() > 1 {
                    return Err(self.error(
                        number,
                        line,
                        tokens[1].1,
                        "a path pattern is alone on its line; its headers follow, indented",
                    ));
                }
                let (pattern, _) = self.pattern(number, line, tokens[0])?;
                if let Some((block, start, text)) = blocks.last()
                    && block.entries.is_empty()
                {
                    return Err(self.error(*start, text, 0, "a path pattern without headers"));
                }
                if blocks.len() == MAX_HEADER_BLOCKS {
                    return Err(self.error(
                        number,
                        line,
                        0,
                        format!("more than {MAX_HEADER_BLOCKS} path patterns"),
                    ));
                }
                blocks.push((
                    HeaderBlockSpec {
                        pattern,
                        entries: Vec::new(),
                    },
                    number,
                    line.to_string(),
                ));
                continue;
            }
            let Some((block, ..)) = blocks.last_mut() else {
                return Err(self.error(
                    number,
                    line,
                    indent,
                    "a header line before any path pattern (patterns start in column 1)",
                ));
            };
            let entry = if let Some(rest) = trimmed.strip_prefix('!') {
                let name = rest.trim();
                let at = indent + (trimmed.len() - rest.trim_start().len());
                check_header_name(name).map_err(
                    |RuleError {
                         at: offset,
                         problem,
                     }| {
                        self.error(number, line, at + offset, problem.to_string())
                    },
                )?;
                HeaderEntrySpec {
                    name: name.to_string(),
                    value: String::new(),
                    remove: true,
                }
            } else {
                let Some((name, value)) = trimmed.split_once(':') else {
                    return Err(self.error(
                        number,
                        line,
                        indent,
                        "expected `Name: value` or `! Name`",
                    ));
                };
                let name_trimmed = name.trim_end();
                check_header_name(name_trimmed).map_err(
                    |RuleError {
                         at: offset,
                         problem,
                     }| {
                        self.error(number, line, indent + offset, problem.to_string())
                    },
                )?;
                let value_trimmed = value.trim();
                let value_at = indent + name.len() + 1 + (value.len() - value.trim_start().len());
                check_header_value(value_trimmed).map_err(
                    |RuleError {
                         at: offset,
                         problem,
                     }| {
                        self.error(number, line, value_at + offset, problem.to_string())
                    },
                )?;
                HeaderEntrySpec {
                    name: name_trimmed.to_string(),
                    value: value_trimmed.to_string(),
                    remove: false,
                }
            };
            block.entries.push(entry);
        }
        if let Some((block, start, text)) = blocks.last()
            && block.entries.is_empty()
        {
            return Err(self.error(*start, text, 0, "a path pattern without headers"));
        }
        let total: usize = blocks.iter().map(|(block, ..)| block.entries.len()).sum();
        if total > crate::rules::MAX_HEADER_ENTRIES {
            return Err(RulesError {
                file: self.file.to_path_buf(),
                line: 1,
                column: 1,
                message: format!(
                    "more than {} header lines in all",
                    crate::rules::MAX_HEADER_ENTRIES
                ),
            });
        }
        Ok(blocks.into_iter().map(|(block, ..)| block).collect())
    }
}

/// Parses `_redirects` text; `file` names it in errors.
pub fn parse_redirects(text: &str, file: &Path) -> Result<Vec<RedirectSpec>, RulesError> {
    Parser { file }.redirects(text)
}

/// Parses `_headers` text; `file` names it in errors.
pub fn parse_headers(text: &str, file: &Path) -> Result<Vec<HeaderBlockSpec>, RulesError> {
    Parser { file }.headers(text)
}

/// Checks that every static 200, 404 and 410 target names a file the site has (`exists`
/// answers for a decoded, normalised path as the engine resolves it).
pub fn check_rewrite_targets(
    rules: &[RedirectSpec],
    text: &str,
    file: &Path,
    exists: impl Fn(&str) -> bool,
) -> Result<(), RulesError> {
    for rule in rules {
        if !matches!(rule.status, 200 | 404 | 410) || rule.to.contains(':') {
            continue;
        }
        let Ok(target) = decode_pattern(&rule.to) else {
            continue;
        };
        let target = if rule.to.ends_with('/') && target != "/" {
            format!("{target}/")
        } else {
            target
        };
        if !exists(&target) {
            let number = rule.line as usize;
            let line = text.lines().nth(number.saturating_sub(1)).unwrap_or("");
            let at = line.find(&rule.to).unwrap_or(0);
            return Err(Parser { file }.error(
                number,
                line,
                at,
                format!("{} is not a file of this site", rule.to),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redirects(text: &str) -> Result<Vec<RedirectSpec>, RulesError> {
        parse_redirects(text, Path::new("site/_redirects"))
    }

    fn headers(text: &str) -> Result<Vec<HeaderBlockSpec>, RulesError> {
        parse_headers(text, Path::new("site/_headers"))
    }

    fn error_at(result: Result<impl std::fmt::Debug, RulesError>) -> (usize, usize, String) {
        let error = result.unwrap_err();
        (error.line, error.column, error.message)
    }

    #[test]
    fn every_rule_form_parses() {
        let rules = redirects(
            "# moved pages\n\
             /old /new\n\
             /blog/* /posts/:splat 302\n\
             \n\
             /:year/:slug /posts/:year-:slug.html 301   # dated\n\
             /app/* /app/index.html 200\n\
             /gone /gone.html 410\n\
             /secret /404.html 404!\n\
             /about/ https://example.com/about 308\n\
             /caf%C3%A9 /cafe 307\n",
        )
        .unwrap();
        let summary: Vec<(&str, &str, u16, bool)> = rules
            .iter()
            .map(|r| (r.from.as_str(), r.to.as_str(), r.status, r.force))
            .collect();
        assert_eq!(
            summary,
            [
                ("/old", "/new", 301, false),
                ("/blog/*", "/posts/:splat", 302, false),
                ("/:year/:slug", "/posts/:year-:slug.html", 301, false),
                ("/app/*", "/app/index.html", 200, false),
                ("/gone", "/gone.html", 410, false),
                ("/secret", "/404.html", 404, true),
                ("/about", "https://example.com/about", 308, false),
                ("/caf\u{e9}", "/cafe", 307, false),
            ]
        );
        assert_eq!(rules[2].line, 5);
    }

    #[test]
    fn malformed_redirects_name_line_and_column() {
        assert_eq!(error_at(redirects("/a /b\n/lonely\n")).0, 2);
        let (line, column, message) = error_at(redirects("/a /b 299\n"));
        assert_eq!((line, column), (1, 7));
        assert!(message.contains("status \"299\""), "{message}");
        let (_, column, message) = error_at(redirects("/a/*/b /c\n"));
        assert_eq!(column, 4);
        assert!(message.contains("splat"), "{message}");
        let (_, column, message) = error_at(redirects("/blog /posts/:splat\n"));
        assert_eq!(column, 14);
        assert!(message.contains("does not capture"), "{message}");
        let (_, _, message) = error_at(redirects("/store id=:id /blog/:id 301\n"));
        assert!(message.contains("query-parameter"), "{message}");
        let (_, _, message) = error_at(redirects("/ /anz 302 Country=au,nz\n"));
        assert!(message.contains("not supported"), "{message}");
        let (_, _, message) = error_at(redirects("https://x.example/* /:splat\n"));
        assert!(message.contains("domain-level"), "{message}");
        let (_, _, message) = error_at(redirects("/api/* https://api.example/:splat 200\n"));
        assert!(message.contains("proxying"), "{message}");
        let (_, _, message) = error_at(redirects("/loop /loop/ 301\n"));
        assert!(message.contains("itself"), "{message}");
        let (_, column, _) = error_at(redirects("/a relative\n"));
        assert_eq!(column, 4);
        let (_, column, _) = error_at(redirects("/%zz /b\n"));
        assert_eq!(column, 2);
        let (_, _, message) = error_at(redirects("/:a/:a /b\n"));
        assert!(message.contains("twice"), "{message}");
        let long = format!("/{} /b\n", "a".repeat(1000));
        assert!(error_at(redirects(&long)).2.contains("1000"));
    }

    #[test]
    fn limits_follow_cloudflare() {
        let statics: String = (0..=MAX_STATIC_REDIRECTS)
            .map(|i| format!("/s{i} /t\n"))
            .collect();
        let (line, _, message) = error_at(redirects(&statics));
        assert_eq!(line, MAX_STATIC_REDIRECTS + 1);
        assert!(message.contains("static"), "{message}");
        let dynamics: String = (0..=MAX_DYNAMIC_REDIRECTS)
            .map(|i| format!("/d{i}/* /t\n"))
            .collect();
        let (line, _, message) = error_at(redirects(&dynamics));
        assert_eq!(line, MAX_DYNAMIC_REDIRECTS + 1);
        assert!(message.contains("dynamic"), "{message}");
    }

    #[test]
    fn header_blocks_parse() {
        let blocks = headers(
            "# security\n\
             /*\n  X-Robots-Tag: noindex\n\
             /api/*\n\
             \tAccess-Control-Allow-Origin: *\n\
             \x20 Content-Security-Policy: default-src 'self'; img-src https:\n\
             /public/:name\n  ! X-Robots-Tag\n",
        )
        .unwrap();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[1].pattern, "/api/*");
        assert_eq!(blocks[1].entries[1].name, "Content-Security-Policy");
        assert_eq!(
            blocks[1].entries[1].value,
            "default-src 'self'; img-src https:"
        );
        assert!(blocks[2].entries[0].remove);
        assert_eq!(blocks[2].entries[0].name, "X-Robots-Tag");
    }

    #[test]
    fn malformed_headers_name_line_and_column() {
        let (line, column, _) = error_at(headers("  X-A: b\n"));
        assert_eq!((line, column), (1, 3));
        let (line, column, message) = error_at(headers("/a\n  Content-Length: 5\n"));
        assert_eq!((line, column), (2, 3));
        assert!(message.contains("set by the server"), "{message}");
        let (_, _, message) = error_at(headers("/a\n  Transfer-Encoding: chunked\n"));
        assert!(message.contains("set by the server"), "{message}");
        let (line, column, _) = error_at(headers("/a\n  Bad Name: x\n"));
        assert_eq!((line, column), (2, 6));
        let (line, _, message) = error_at(headers("/a\n  X-A:\n"));
        assert_eq!(line, 2);
        assert!(message.contains("non-empty"), "{message}");
        let (line, _, message) = error_at(headers("/a\n/b\n  X-A: 1\n"));
        assert_eq!(line, 1);
        assert!(message.contains("without headers"), "{message}");
        let (_, _, message) = error_at(headers("/a\n  no colon here\n"));
        assert!(message.contains("Name: value"), "{message}");
        let (line, column, _) = error_at(headers("/a extra\n  X: y\n"));
        assert_eq!((line, column), (1, 4));
        let (_, _, message) = error_at(headers("/a\n  ! Connection\n"));
        assert!(message.contains("set by the server"), "{message}");
    }

    #[test]
    fn static_rewrite_targets_must_exist() {
        let text = "/a /here.html 200\n/b /missing.html 200\n/c /x/:splat 200\n";
        let rules = redirects("/a /here.html 200\n/b /missing.html 200\n").unwrap();
        let error =
            check_rewrite_targets(&rules, text, Path::new("_redirects"), |p| p == "/here.html")
                .unwrap_err();
        assert_eq!((error.line, error.column), (2, 4));
        assert!(error.message.contains("/missing.html"));
    }
}
