//! The text of an HTML page for the search index: its title, its headings and its visible
//! body text, read by a small tolerant tokenizer (tags, comments, character references, raw
//! text elements). Left out: `<head>` (but the title), scripts, styles, `<noscript>`,
//! `<template>`, SVG, forms' controls, and the site chrome in `<nav>` and `<footer>`; a page
//! with `<meta name="robots" content="noindex">` is not indexed at all.

/// What a page gives the index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageText {
    /// `<title>`, or the first `<h1>` when there is none.
    pub title: String,
    /// The headings' text, one after another.
    pub headings: String,
    /// The visible text, whitespace collapsed.
    pub text: String,
    /// `<html lang="...">`, lowercased.
    pub language: Option<String>,
    /// The page asks not to be indexed.
    pub noindex: bool,
}

/// Elements whose content is never text.
const RAW: [&str; 6] = ["script", "style", "noscript", "template", "svg", "math"];
/// Elements whose content is site chrome or controls, left out.
const SKIPPED: [&str; 7] = [
    "nav", "footer", "head", "select", "button", "iframe", "object",
];
/// Elements that do not separate words.
const INLINE: [&str; 21] = [
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "i", "kbd", "mark", "q",
    "s", "samp", "small", "span", "strong", "sub", "sup",
];

/// Decodes one character reference at the start of `text` (after `&`): the characters and
/// how many bytes it took, or `None` to keep the `&` as it is.
fn reference(text: &str) -> Option<(String, usize)> {
    let end = text.find(';').filter(|&end| end <= 32)?;
    let name = &text[..end];
    let decoded = if let Some(number) = name.strip_prefix('#') {
        let value = match number.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => number.parse().ok()?,
        };
        char::from_u32(value).filter(|c| *c != '\0')?.to_string()
    } else {
        let c = match name {
            "amp" => "&",
            "lt" => "<",
            "gt" => ">",
            "quot" => "\"",
            "apos" => "'",
            "nbsp" | "ensp" | "emsp" | "thinsp" => " ",
            "copy" => "©",
            "reg" => "®",
            "trade" => "™",
            "hellip" => "…",
            "mdash" => "—",
            "ndash" => "–",
            "lsquo" => "‘",
            "rsquo" => "’",
            "ldquo" => "“",
            "rdquo" => "”",
            "laquo" => "«",
            "raquo" => "»",
            "middot" => "·",
            "bull" => "•",
            "deg" => "°",
            "times" => "×",
            "rarr" => "→",
            "larr" => "←",
            "para" => "¶",
            "sect" => "§",
            "shy" | "zwj" | "zwnj" => "",
            "eacute" => "é",
            "egrave" => "è",
            "agrave" => "à",
            "aacute" => "á",
            "ouml" => "ö",
            "uuml" => "ü",
            "auml" => "ä",
            "szlig" => "ß",
            "ccedil" => "ç",
            "ntilde" => "ñ",
            _ => return None,
        };
        c.to_string()
    };
    Some((decoded, end + 1))
}

/// Appends `text` to `out` with character references decoded and whitespace collapsed.
fn push_text(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let mut taken = c.len_utf8();
        if c == '&'
            && let Some((decoded, len)) = reference(&rest[1..])
        {
            push_collapsed(out, &decoded);
            taken = len + 1;
        } else {
            let mut buffer = [0u8; 4];
            push_collapsed(out, c.encode_utf8(&mut buffer));
        }
        rest = &rest[taken..];
    }
}

fn push_collapsed(out: &mut String, text: &str) {
    for c in text.chars() {
        if c.is_whitespace() {
            if !out.is_empty() && !out.ends_with(' ') {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
    }
}

fn separate(out: &mut String) {
    if !out.is_empty() && !out.ends_with(' ') {
        out.push(' ');
    }
}

/// The value of attribute `name` in a start tag's attribute text.
fn attribute<'t>(attributes: &'t str, name: &str) -> Option<&'t str> {
    let lower = attributes.to_ascii_lowercase();
    let mut search = 0;
    while let Some(found) = lower[search..].find(name) {
        let at = search + found;
        search = at + name.len();
        let before_ok = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let rest = attributes[at + name.len()..].trim_start();
        if !before_ok || !rest.starts_with('=') {
            continue;
        }
        let value = rest[1..].trim_start();
        return Some(match value.chars().next() {
            Some(quote @ ('"' | '\'')) => value[1..].split(quote).next().unwrap_or(""),
            _ => value
                .split(|c: char| c.is_whitespace() || c == '>')
                .next()
                .unwrap_or(""),
        });
    }
    None
}

/// Reads the text of one HTML page.
pub fn page_text(html: &str) -> PageText {
    let mut page = PageText::default();
    let mut first_h1 = String::new();
    let mut skip_depth = 0usize;
    let mut heading: Option<String> = None;
    let mut in_title = false;
    let mut in_h1 = false;
    let mut rest = html;
    while !rest.is_empty() {
        let Some(open) = rest.find('<') else {
            if skip_depth == 0 {
                push_text(&mut page.text, rest);
            }
            break;
        };
        let before = &rest[..open];
        if in_title {
            push_text(&mut page.title, before);
        } else if skip_depth == 0 {
            push_text(&mut page.text, before);
            if let Some(heading) = heading.as_mut() {
                push_text(heading, before);
            }
            if in_h1 {
                push_text(&mut first_h1, before);
            }
        }
        rest = &rest[open..];
        if let Some(comment) = rest.strip_prefix("<!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
            continue;
        }
        if rest.starts_with("<!") || rest.starts_with("<?") {
            rest = rest.find('>').map_or("", |end| &rest[end + 1..]);
            continue;
        }
        // A tag: find its end, outside quoted attribute values.
        let mut end = None;
        let mut quote = None;
        for (i, c) in rest.char_indices().skip(1) {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '>') => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            break;
        };
        let inside = &rest[1..end];
        rest = &rest[end + 1..];
        let closing = inside.starts_with('/');
        let inside = inside.trim_start_matches('/');
        let name_end = inside
            .find(|c: char| c.is_whitespace() || c == '/')
            .unwrap_or(inside.len());
        let name = inside[..name_end].to_ascii_lowercase();
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            // `<` that starts no tag (`a < b`): text.
            if skip_depth == 0 {
                push_text(&mut page.text, "<");
            }
            continue;
        }
        let attributes = &inside[name_end..];
        if !closing && RAW.contains(&name.as_str()) {
            // Skip to the matching end tag.
            let lower = rest.to_ascii_lowercase();
            let close = format!("</{name}");
            rest = lower.find(&close).map_or("", |at| {
                let tail = &rest[at..];
                tail.find('>').map_or("", |gt| &tail[gt + 1..])
            });
            separate(&mut page.text);
            continue;
        }
        match (name.as_str(), closing) {
            ("html", false) => {
                page.language = attribute(attributes, "lang").map(str::to_ascii_lowercase);
            }
            ("meta", false) => {
                let robots =
                    attribute(attributes, "name").is_some_and(|n| n.eq_ignore_ascii_case("robots"));
                let noindex = attribute(attributes, "content")
                    .is_some_and(|c| c.to_ascii_lowercase().contains("noindex"));
                page.noindex |= robots && noindex;
            }
            // The body starts: a head left open ends here.
            ("body", false) => skip_depth = 0,
            ("title", false) => in_title = true,
            ("title", true) => in_title = false,
            _ => {}
        }
        if SKIPPED.contains(&name.as_str()) {
            if closing {
                skip_depth = skip_depth.saturating_sub(1);
            } else {
                skip_depth += 1;
            }
            continue;
        }
        if let [b'h', level] = name.as_bytes()
            && (b'1'..=b'6').contains(level)
        {
            if closing {
                if let Some(text) = heading.take() {
                    separate(&mut page.headings);
                    page.headings.push_str(text.trim());
                }
                in_h1 = false;
            } else {
                heading = Some(String::new());
                in_h1 = *level == b'1' && first_h1.is_empty();
            }
        }
        if !INLINE.contains(&name.as_str()) {
            separate(&mut page.text);
        }
    }
    page.title = page.title.trim().to_string();
    if page.title.is_empty() {
        page.title = first_h1.trim().to_string();
    }
    page.text = page.text.trim().to_string();
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_title_headings_and_text() {
        let page = page_text(
            "<!DOCTYPE html><html lang=\"en-GB\"><head><title>Install &amp; run</title>\
             <style>body{color:red}</style><script>var x = '<p>no</p>';</script></head>\
             <body><nav><a href=/>Home</a> <a href=/x>Other</a></nav>\
             <h1>Getting <em>started</em></h1><p>First, <b>install</b> the caf&eacute;&#x2019;s \
             tool: a&lt;b &amp;&amp; c.</p><!-- hidden --><h2 class=\"x\">Next steps</h2>\
             <p>Then<br>run it.</p><svg><text>drawn</text></svg><footer>© me</footer></body></html>",
        );
        assert_eq!(page.title, "Install & run");
        assert_eq!(page.language.as_deref(), Some("en-gb"));
        assert_eq!(page.headings, "Getting started Next steps");
        assert_eq!(
            page.text,
            "Getting started First, install the café’s tool: a<b && c. Next steps Then run it."
        );
        assert!(!page.noindex);
    }

    #[test]
    fn falls_back_and_honours_noindex() {
        let page = page_text("<h1>Only a heading</h1><p>x</p>");
        assert_eq!(page.title, "Only a heading");
        let page = page_text("<meta name=\"robots\" content=\"noindex, nofollow\"><p>x</p>");
        assert!(page.noindex);
        // Broken markup ends without panicking.
        for broken in [
            "<p",
            "<a href=\"x>",
            "&#xZZ;",
            "<script>never closed",
            "<<<>>>",
            "&",
        ] {
            let _ = page_text(broken);
        }
    }
}
