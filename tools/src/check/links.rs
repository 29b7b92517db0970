//! The references a page makes, with the line that holds each: `href`, `src`, `srcset`,
//! `poster`, `data` and CSS `url()`/`@import` (in `<style>`, `style=""` and stylesheets), and
//! how they resolve to a path of the same site.
//!
//! A small scanner of our own rather than an HTML parser: it needs tags, attributes and their
//! positions, not a tree, and it must never fail on the malformed markup real sites hold
//! (it skips what it cannot read). Comments and script bodies are skipped.

/// What a reference loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferenceKind {
    /// A link the reader follows (`<a href>`, `<area href>`, `<link rel=next>`...).
    Link,
    /// An image (`<img src/srcset>`, `<source srcset>`, `<link rel=icon>`, `poster`).
    Image,
    /// A script (`<script src>`).
    Script,
    /// A stylesheet (`<link rel=stylesheet>`, `@import`).
    Stylesheet,
    /// Audio, video, a text track or an embedded object.
    Media,
    /// A page shown inside this one (`<iframe src>`).
    Frame,
    /// A CSS `url()` (a background, a font).
    CssUrl,
    /// A preload (`<link rel=preload|modulepreload|prefetch>`).
    Preload,
}

impl ReferenceKind {
    /// Loaded with the page (counts toward its weight), rather than followed by the reader.
    pub fn is_embedded(self) -> bool {
        !matches!(self, ReferenceKind::Link | ReferenceKind::Frame)
    }

    /// How a report names a reference of this kind that does not resolve.
    pub fn missing(self) -> &'static str {
        match self {
            ReferenceKind::Link => "broken link",
            ReferenceKind::Image => "missing image",
            ReferenceKind::Script => "missing script",
            ReferenceKind::Stylesheet => "missing stylesheet",
            ReferenceKind::Media => "missing media",
            ReferenceKind::Frame => "missing frame",
            ReferenceKind::CssUrl => "missing CSS url()",
            ReferenceKind::Preload => "missing preload",
        }
    }
}

/// One reference as written in the page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The URL as written (entities decoded).
    pub url: String,
    /// 1-based line of the page that holds it.
    pub line: u32,
    /// What it loads.
    pub kind: ReferenceKind,
}

/// Line numbers from byte offsets.
struct Lines {
    /// Offsets of every `\n`.
    newlines: Vec<usize>,
}

impl Lines {
    fn new(text: &str) -> Self {
        Lines {
            newlines: text
                .bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        }
    }

    fn line(&self, offset: usize) -> u32 {
        let before = self.newlines.partition_point(|&at| at < offset);
        u32::try_from(before + 1).unwrap_or(u32::MAX)
    }
}

/// Finds `needle` (ASCII, lowercase) in `haystack` from `from`, ignoring ASCII case.
fn find_ignore_case(haystack: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from > haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|window| window.eq_ignore_ascii_case(needle))
        .map(|at| from + at)
}

fn find(haystack: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from > haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|at| from + at)
}

/// Decodes the character references attribute values use most (`&amp;`, `&quot;`, `&#39;`,
/// `&lt;`, `&gt;`, `&apos;`, numeric); anything else is left as written.
pub fn decode_entities(value: &str) -> String {
    if !value.contains('&') {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest[1..].find(';').map(|e| e + 1).filter(|&e| e <= 10) else {
            out.push('&');
            rest = &rest[1..];
            continue;
        };
        let name = &rest[1..end];
        let decoded = match name {
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "lt" => Some('<'),
            "gt" => Some('>'),
            _ => name
                .strip_prefix("#x")
                .or_else(|| name.strip_prefix("#X"))
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| name.strip_prefix('#').and_then(|dec| dec.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// One attribute of a tag: lowercase name, raw value, offset of the value in the page.
struct Attribute<'a> {
    name: String,
    value: &'a str,
    offset: usize,
}

/// Parses the attributes of the tag whose name ends at `at`; returns them and the offset
/// just past the tag's `>` (or the end of the text).
fn attributes(text: &str, mut at: usize) -> (Vec<Attribute<'_>>, usize) {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    loop {
        while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b'/') {
            at += 1;
        }
        if at >= bytes.len() {
            return (found, at);
        }
        if bytes[at] == b'>' {
            return (found, at + 1);
        }
        let name_start = at;
        while at < bytes.len()
            && !bytes[at].is_ascii_whitespace()
            && !matches!(bytes[at], b'=' | b'>' | b'/')
        {
            at += 1;
        }
        let name = text[name_start..at].to_ascii_lowercase();
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        if at >= bytes.len() || bytes[at] != b'=' {
            if at == name_start {
                at += 1; // a stray byte: step over it
            }
            continue;
        }
        at += 1;
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let (value_start, value_end, next) = match bytes.get(at) {
            Some(&quote @ (b'"' | b'\'')) => {
                let end = find(bytes, at + 1, &[quote]).unwrap_or(bytes.len());
                (at + 1, end, (end + 1).min(bytes.len()))
            }
            _ => {
                let mut end = at;
                while end < bytes.len() && !bytes[end].is_ascii_whitespace() && bytes[end] != b'>' {
                    end += 1;
                }
                (at, end, end)
            }
        };
        found.push(Attribute {
            name,
            value: &text[value_start..value_end],
            offset: value_start,
        });
        at = next;
    }
}

/// The URLs of a `srcset` value (`a.png 1x, b.png 2x`), with their offsets in it.
fn srcset_urls(value: &str) -> Vec<(usize, &str)> {
    let bytes = value.as_bytes();
    let mut urls = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        while at < bytes.len() && (bytes[at].is_ascii_whitespace() || bytes[at] == b',') {
            at += 1;
        }
        let start = at;
        while at < bytes.len() && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let url = value[start..at].trim_end_matches(',');
        let ended_with_comma = value[start..at].ends_with(',');
        if !url.is_empty() {
            urls.push((start, url));
        }
        if !ended_with_comma {
            // Descriptors run to the next comma.
            while at < bytes.len() && bytes[at] != b',' {
                at += 1;
            }
        }
    }
    urls
}

/// The references in a stylesheet (`url()` and `@import "..."`); `base` is the offset of
/// `css` in the file that `lines` numbers.
fn css_into(css: &str, base: usize, lines: &Lines, out: &mut Vec<Reference>) {
    let bytes = css.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at..].starts_with(b"/*") {
            at = find(bytes, at + 2, b"*/").map_or(bytes.len(), |end| end + 2);
            continue;
        }
        if bytes[at..].len() >= 4 && bytes[at..at + 4].eq_ignore_ascii_case(b"url(") {
            let mut start = at + 4;
            while start < bytes.len() && bytes[start].is_ascii_whitespace() {
                start += 1;
            }
            let (value_start, value_end, next) = match bytes.get(start) {
                Some(&quote @ (b'"' | b'\'')) => {
                    let end = find(bytes, start + 1, &[quote]).unwrap_or(bytes.len());
                    let close = find(bytes, end, b")").unwrap_or(bytes.len());
                    (start + 1, end, close + 1)
                }
                _ => {
                    let end = find(bytes, start, b")").unwrap_or(bytes.len());
                    (start, end, end + 1)
                }
            };
            let url = css[value_start..value_end].trim();
            if !url.is_empty() {
                out.push(Reference {
                    url: url.to_string(),
                    line: lines.line(base + value_start),
                    kind: ReferenceKind::CssUrl,
                });
            }
            at = next;
            continue;
        }
        if bytes[at..].len() >= 7 && bytes[at..at + 7].eq_ignore_ascii_case(b"@import") {
            let mut start = at + 7;
            while start < bytes.len() && bytes[start].is_ascii_whitespace() {
                start += 1;
            }
            if let Some(&quote @ (b'"' | b'\'')) = bytes.get(start) {
                let end = find(bytes, start + 1, &[quote]).unwrap_or(bytes.len());
                out.push(Reference {
                    url: css[start + 1..end].to_string(),
                    line: lines.line(base + start + 1),
                    kind: ReferenceKind::Stylesheet,
                });
                at = end;
                continue;
            }
            at = start;
            continue;
        }
        at += 1;
    }
}

/// The references in a stylesheet file.
pub fn css_references(css: &str) -> Vec<Reference> {
    let lines = Lines::new(css);
    let mut out = Vec::new();
    css_into(css, 0, &lines, &mut out);
    out
}

/// The references in an HTML page, in the order they appear.
pub fn html_references(html: &str) -> Vec<Reference> {
    let lines = Lines::new(html);
    let bytes = html.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(open) = find(bytes, at, b"<") {
        at = open + 1;
        if bytes[open..].starts_with(b"<!--") {
            at = find(bytes, open + 4, b"-->").map_or(bytes.len(), |end| end + 3);
            continue;
        }
        if matches!(bytes.get(at), Some(b'!' | b'?' | b'/')) {
            at = find(bytes, at, b">").map_or(bytes.len(), |end| end + 1);
            continue;
        }
        let name_start = at;
        while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'-') {
            at += 1;
        }
        if at == name_start || !bytes[name_start].is_ascii_alphabetic() {
            continue;
        }
        let tag = html[name_start..at].to_ascii_lowercase();
        let (attributes, after) = attributes(html, at);
        at = after;
        let value_of = |name: &str| attributes.iter().find(|a| a.name == name);
        let rel = value_of("rel").map(|a| a.value.to_ascii_lowercase());
        for attribute in &attributes {
            let kind = match (tag.as_str(), attribute.name.as_str()) {
                ("a" | "area", "href") => Some(ReferenceKind::Link),
                ("link", "href") => Some(match rel.as_deref() {
                    Some(rel) if rel.split_whitespace().any(|r| r == "stylesheet") => {
                        ReferenceKind::Stylesheet
                    }
                    Some(rel) if rel.split_whitespace().any(|r| r.contains("icon")) => {
                        ReferenceKind::Image
                    }
                    Some(rel)
                        if rel
                            .split_whitespace()
                            .any(|r| matches!(r, "preload" | "modulepreload" | "prefetch")) =>
                    {
                        ReferenceKind::Preload
                    }
                    _ => ReferenceKind::Link,
                }),
                ("img" | "input", "src") => Some(ReferenceKind::Image),
                ("script", "src") => Some(ReferenceKind::Script),
                ("iframe" | "frame", "src") => Some(ReferenceKind::Frame),
                ("video", "poster") => Some(ReferenceKind::Image),
                ("source", "src") | ("video" | "audio" | "track" | "embed", "src") => {
                    Some(ReferenceKind::Media)
                }
                ("object", "data") => Some(ReferenceKind::Media),
                _ => None,
            };
            if let Some(kind) = kind {
                let url = decode_entities(attribute.value.trim());
                if !url.is_empty() {
                    out.push(Reference {
                        url,
                        line: lines.line(attribute.offset),
                        kind,
                    });
                }
            }
            if attribute.name == "srcset" && matches!(tag.as_str(), "img" | "source") {
                let decoded = decode_entities(attribute.value);
                let base = attribute.offset;
                for (offset, url) in srcset_urls(&decoded) {
                    out.push(Reference {
                        url: url.to_string(),
                        line: lines.line(base + offset.min(attribute.value.len())),
                        kind: ReferenceKind::Image,
                    });
                }
            }
            if attribute.name == "style" {
                css_into(attribute.value, attribute.offset, &lines, &mut out);
            }
        }
        match tag.as_str() {
            "script" => {
                at = find_ignore_case(bytes, at, b"</script").unwrap_or(bytes.len());
            }
            "style" => {
                let end = find_ignore_case(bytes, at, b"</style").unwrap_or(bytes.len());
                css_into(&html[at..end], at, &lines, &mut out);
                at = end;
            }
            _ => {}
        }
    }
    out
}

/// Resolves `reference` (as written in the page at `page_path`) to a path of the same site,
/// dot segments removed and percent-escapes decoded. `None` for what is not the site's to
/// answer: another origin (`https://`, `//host`), another scheme (`mailto:`, `data:`), or
/// only a fragment or query of the page itself.
pub fn resolve(page_path: &str, reference: &str) -> Option<String> {
    let reference = reference.trim();
    let end = reference.find(['#', '?']).unwrap_or(reference.len());
    let path = &reference[..end];
    if path.is_empty() || path.starts_with("//") {
        return None;
    }
    let scheme_end = path.find(':');
    let first_slash = path.find('/').unwrap_or(path.len());
    if let Some(colon) = scheme_end
        && colon < first_slash
        && colon > 0
        && path[..colon]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return None;
    }
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        let directory = match page_path.rfind('/') {
            Some(at) => &page_path[..=at],
            None => "/",
        };
        format!("{directory}{path}")
    };
    let mut segments: Vec<&str> = Vec::new();
    let parts: Vec<&str> = joined.split('/').skip(1).collect();
    for (index, segment) in parts.iter().enumerate() {
        let last = index + 1 == parts.len();
        match *segment {
            "." => {
                if last {
                    segments.push("");
                }
            }
            ".." => {
                segments.pop();
                if last {
                    segments.push("");
                }
            }
            other => segments.push(other),
        }
    }
    let normalised = format!("/{}", segments.join("/"));
    Some(percent_decode(&normalised))
}

/// Decodes `%XX` escapes (to UTF-8; invalid sequences are kept as written).
pub fn percent_decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%'
            && let Some(hex) = path.get(at + 1..at + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            at += 3;
            continue;
        }
        out.push(bytes[at]);
        at += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| path.to_string())
}

/// `path` as a request target: bytes outside the URL path characters are `%XX`-escaped.
pub fn percent_encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(references: &[Reference]) -> Vec<(&str, u32, ReferenceKind)> {
        references
            .iter()
            .map(|r| (r.url.as_str(), r.line, r.kind))
            .collect()
    }

    #[test]
    fn every_kind_of_reference_is_found_with_its_line() {
        let html = "<!doctype html>\n<html><head>\n\
            <link rel=\"stylesheet\" href=\"style.css\">\n\
            <link rel=icon href=/favicon.svg><link rel=canonical href=\"https://example.org/\">\n\
            <style>body { background: url('bg.png') }</style>\n\
            </head><body>\n\
            <!-- <a href=\"commented.html\"> -->\n\
            <a href='about.html?x=1&amp;y=2#top'>About</a> <A HREF=docs/>Docs</A>\n\
            <img src=\"cat.png\" srcset=\"cat-1x.png 1x,\n cat-2x.png 2x\" alt=\"\">\n\
            <script src=\"app.js\">if (a < b) { document.write('<a href=\"no.html\">') }</script>\n\
            <div style=\"background:url(tile.gif)\"></div><video poster=p.jpg src=v.mp4></video>\n\
            </body></html>\n";
        let found = html_references(html);
        assert_eq!(
            urls(&found),
            vec![
                ("style.css", 3, ReferenceKind::Stylesheet),
                ("/favicon.svg", 4, ReferenceKind::Image),
                ("https://example.org/", 4, ReferenceKind::Link),
                ("bg.png", 5, ReferenceKind::CssUrl),
                ("about.html?x=1&y=2#top", 8, ReferenceKind::Link),
                ("docs/", 8, ReferenceKind::Link),
                ("cat.png", 9, ReferenceKind::Image),
                ("cat-1x.png", 9, ReferenceKind::Image),
                ("cat-2x.png", 10, ReferenceKind::Image),
                ("app.js", 11, ReferenceKind::Script),
                ("tile.gif", 12, ReferenceKind::CssUrl),
                ("p.jpg", 12, ReferenceKind::Image),
                ("v.mp4", 12, ReferenceKind::Media),
            ]
        );
    }

    #[test]
    fn stylesheets_give_urls_and_imports() {
        let css = "/* url(no.png) */\n@import \"base.css\";\n.a { src: url( \"f.woff2\" ) }\n\
                   .b{background:URL(i.png)}";
        assert_eq!(
            urls(&css_references(css)),
            vec![
                ("base.css", 2, ReferenceKind::Stylesheet),
                ("f.woff2", 3, ReferenceKind::CssUrl),
                ("i.png", 4, ReferenceKind::CssUrl),
            ]
        );
    }

    #[test]
    fn malformed_markup_never_panics() {
        for html in [
            "<",
            "<a",
            "<a href",
            "<a href=",
            "<a href=\"",
            "<!--",
            "<script>",
            "<style>url(",
            "<img srcset=\",,, ,\">",
            "<a href=&#xZZ;>",
            "&#99999999;",
            "<a\u{e9} href=x>",
        ] {
            let _ = html_references(html);
            let _ = css_references(html);
        }
    }

    #[test]
    fn references_resolve_to_site_paths() {
        let page = "/docs/guide/index.html";
        assert_eq!(
            resolve(page, "intro.html").as_deref(),
            Some("/docs/guide/intro.html")
        );
        assert_eq!(resolve(page, "../api/").as_deref(), Some("/docs/api/"));
        assert_eq!(resolve(page, "/").as_deref(), Some("/"));
        assert_eq!(resolve(page, "./").as_deref(), Some("/docs/guide/"));
        assert_eq!(resolve(page, "..").as_deref(), Some("/docs/"));
        assert_eq!(
            resolve(page, "../../../../x.css").as_deref(),
            Some("/x.css")
        );
        assert_eq!(
            resolve(page, "a%20b.html#s").as_deref(),
            Some("/docs/guide/a b.html")
        );
        assert_eq!(
            resolve(page, "caf%C3%A9.html").as_deref(),
            Some("/docs/guide/café.html")
        );
        assert_eq!(
            resolve("/index.html", "img/cat.png?v=2").as_deref(),
            Some("/img/cat.png")
        );
        for other in [
            "#top",
            "?q=1",
            "",
            "https://example.org/",
            "//cdn.example/x.js",
            "mailto:a@b",
            "data:image/png;base64,xx",
            "javascript:void(0)",
            "tel:+1",
        ] {
            assert_eq!(resolve(page, other), None, "{other}");
        }
        assert_eq!(resolve(page, "a:b/c").as_deref(), None, "a scheme");
        assert_eq!(resolve(page, "a/b:c").as_deref(), Some("/docs/guide/a/b:c"));
    }

    #[test]
    fn entities_and_escapes() {
        assert_eq!(
            decode_entities("a&amp;b&#x41;&#66;&lt;&bogus;&"),
            "a&bAB<&bogus;&"
        );
        assert_eq!(percent_encode("/a b/café.html"), "/a%20b/caf%C3%A9.html");
        assert_eq!(percent_decode("/a%20b/%zz"), "/a b/%zz");
    }
}
