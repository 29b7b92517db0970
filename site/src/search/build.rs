//! Building the search index (feature `std`): pages' text in, the dictionary, document table,
//! postings and snippet text out, ready for the image writer.

use std::collections::BTreeMap;
use std::string::{String, ToString};
use std::vec::Vec;

use super::text::{self, Language, Term};

/// Plain text kept per page for snippets; terms beyond it are indexed all the same (their
/// snippet then starts at the top of the page).
pub const MAX_TEXT_PER_PAGE: usize = 32 * 1024;
/// Weight of a word in the title against one in the body.
pub const TITLE_WEIGHT: u32 = 8;
/// Weight of a word in a heading against one in the body (headings count once more in the
/// body text too).
pub const HEADING_WEIGHT: u32 = 2;
/// BM25 parameters.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// One page to index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchDocument {
    /// URL path of the page (a file of the site), e.g. `/guide/install.html`.
    pub path: String,
    /// Its title.
    pub title: String,
    /// The text of its headings, one after another.
    pub headings: String,
    /// Its visible text, headings included, whitespace collapsed.
    pub text: String,
}

/// The index, built: what the image writer stores.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuiltSearch {
    /// Stem English words.
    pub english: bool,
    /// Per page: URL path, title, offset and length of its text in `text`.
    pub docs: Vec<(String, String, u32, u32)>,
    /// Sorted terms: term, offset of its postings in `postings`, document frequency.
    pub terms: Vec<(String, u32, u32)>,
    /// Every term's postings, back to back.
    pub postings: Vec<u8>,
    /// Every page's text, back to back.
    pub text: Vec<u8>,
    /// The results template: (kind: 0 text, 1 query, 2 results; the text for kind 0).
    pub pieces: Vec<(u32, String)>,
}

impl BuiltSearch {
    /// Bytes the index adds to the image's index (read at boot): dictionary, documents,
    /// template, and their strings.
    pub fn dictionary_bytes(&self) -> usize {
        super::SEARCH_HEADER_LEN
            + self.docs.len() * super::DOC_RECORD_LEN
            + self.docs.iter().map(|d| d.1.len()).sum::<usize>()
            + self.terms.len() * super::TERM_RECORD_LEN
            + self.terms.iter().map(|t| t.0.len()).sum::<usize>()
            + self.pieces.len() * super::PIECE_RECORD_LEN
            + self.pieces.iter().map(|p| p.1.len()).sum::<usize>()
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u32) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Cuts `text` at a character boundary at most `max` bytes in.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Splits a results template at its `{{query}}` and `{{results}}` placeholders (spaces inside
/// the braces allowed). Exactly one `{{results}}` is required.
pub fn template_pieces(template: &str) -> Result<Vec<(u32, String)>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    let mut results = 0;
    while let Some(open) = rest.find("{{") {
        let Some(close) = rest[open..].find("}}") else {
            break;
        };
        let name = rest[open + 2..open + close].trim();
        let kind = match name {
            "query" => 1,
            "results" => 2,
            _ => {
                pieces.push((0, rest[..open + close + 2].to_string()));
                rest = &rest[open + close + 2..];
                continue;
            }
        };
        if open > 0 {
            pieces.push((0, rest[..open].to_string()));
        }
        pieces.push((kind, String::new()));
        results += usize::from(kind == 2);
        rest = &rest[open + close + 2..];
    }
    if !rest.is_empty() {
        pieces.push((0, rest.to_string()));
    }
    match results {
        1 => {}
        0 => return Err("it has no {{results}} placeholder".into()),
        _ => return Err("it has more than one {{results}} placeholder".into()),
    }
    // Merge neighbouring text pieces, and keep within the section's limit.
    let mut merged: Vec<(u32, String)> = Vec::new();
    for (kind, text) in pieces {
        match merged.last_mut() {
            Some((0, before)) if kind == 0 => before.push_str(&text),
            _ => merged.push((kind, text)),
        }
    }
    if merged.len() > super::MAX_PIECES {
        return Err("it has too many {{query}} placeholders".into());
    }
    Ok(merged)
}

/// Builds the index of `docs` (in the order given: that is the site order that breaks ties),
/// stemming English words when `english`.
pub fn build(docs: &[SearchDocument], english: bool, pieces: Vec<(u32, String)>) -> BuiltSearch {
    let language = if english {
        Language::English
    } else {
        Language::Other
    };
    let mut built = BuiltSearch {
        english,
        pieces,
        ..BuiltSearch::default()
    };
    // term -> per document (weighted frequency, first offset + 1)
    let mut postings: BTreeMap<Term, Vec<(u32, u32, u32)>> = BTreeMap::new();
    let mut lengths = Vec::with_capacity(docs.len());
    for (number, doc) in docs.iter().enumerate() {
        let number = number as u32;
        let kept = cut(&doc.text, MAX_TEXT_PER_PAGE);
        let text_offset = built.text.len() as u32;
        built.text.extend_from_slice(kept.as_bytes());
        built.docs.push((
            doc.path.clone(),
            doc.title.clone(),
            text_offset,
            kept.len() as u32,
        ));
        let mut counts: BTreeMap<Term, (u32, u32)> = BTreeMap::new();
        let mut length = 0u32;
        let mut add =
            |text: &str, weight: u32, offsets: bool, counts: &mut BTreeMap<Term, (u32, u32)>| {
                for (start, end) in text::words(text) {
                    if let Some(term) = text::term(&text[start..end], language) {
                        let entry = counts.entry(term).or_insert((0, 0));
                        entry.0 += weight;
                        if offsets && entry.1 == 0 && start < kept.len() {
                            entry.1 = start as u32 + 1;
                        }
                        length += weight;
                    }
                }
            };
        add(&doc.title, TITLE_WEIGHT, false, &mut counts);
        add(&doc.headings, HEADING_WEIGHT, false, &mut counts);
        add(&doc.text, 1, true, &mut counts);
        lengths.push(length);
        for (term, (tf, first)) in counts {
            postings.entry(term).or_default().push((number, tf, first));
        }
    }
    let n = docs.len() as f64;
    let average = (lengths.iter().map(|&l| f64::from(l)).sum::<f64>() / n.max(1.0)).max(1.0);
    let score = |df: usize, tf: u32, length: u32| {
        let idf = (1.0 + (n - df as f64 + 0.5) / (df as f64 + 0.5)).ln();
        let tf = f64::from(tf);
        idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * f64::from(length) / average))
    };
    let max = postings
        .values()
        .flat_map(|list| {
            list.iter()
                .map(|&(d, tf, _)| score(list.len(), tf, lengths[d as usize]))
        })
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    for (term, list) in &postings {
        built.terms.push((
            term.as_str().to_string(),
            built.postings.len() as u32,
            list.len() as u32,
        ));
        let mut last = None;
        for &(doc, tf, first) in list {
            let impact = (score(list.len(), tf, lengths[doc as usize]) / max * 255.0)
                .round()
                .clamp(1.0, 255.0) as u8;
            put_varint(&mut built.postings, last.map_or(doc, |last| doc - last));
            built.postings.push(impact);
            put_varint(&mut built.postings, first);
            last = Some(doc);
        }
    }
    built
}
