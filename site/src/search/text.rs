//! Words and terms: how text is cut into words and how a word becomes the term the index
//! holds. The packer (indexing pages) and the Pi (reading a query, marking a snippet) run this
//! same code, so both sides agree byte for byte.
//!
//! A word is a run of letters and digits (Unicode `is_alphanumeric`, with combining marks and
//! an apostrophe between letters kept inside); each Han, Hiragana or Katakana character is a
//! word of its own (those scripts do not separate words with spaces). A term is the word
//! lowercased, with the accents of Latin letters folded (`é` -> `e`, `ß` -> `ss`, `Æ` -> `ae`),
//! apostrophes and a trailing `'s` dropped, cut to [`MAX_TERM_LEN`] bytes, and, for English,
//! stemmed ([`super::stem`]).

use super::stem::stem_english;

/// Longest term, in bytes (a longer word is cut at a character boundary).
pub const MAX_TERM_LEN: usize = 32;

/// How a site's words are stemmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// Case and accent folding only.
    Other,
    /// Folding, then the English (Porter2) stemmer.
    English,
}

/// A term: at most [`MAX_TERM_LEN`] bytes of UTF-8.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Term {
    bytes: [u8; MAX_TERM_LEN],
    len: u8,
}

impl core::fmt::Debug for Term {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Term {
    /// An empty term (a placeholder in fixed arrays).
    pub const EMPTY: Term = Term {
        bytes: [0; MAX_TERM_LEN],
        len: 0,
    };

    /// The term's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The term as text (always valid UTF-8).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// A term from bytes already normalised (a dictionary entry), if they fit.
    pub fn from_normalised(bytes: &[u8]) -> Option<Term> {
        if bytes.is_empty() || bytes.len() > MAX_TERM_LEN {
            return None;
        }
        let mut term = Term {
            bytes: [0; MAX_TERM_LEN],
            len: bytes.len() as u8,
        };
        term.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(term)
    }
}

/// Is `c` a combining mark (kept inside a word, dropped from its term)?
fn combining(c: char) -> bool {
    matches!(c as u32, 0x300..=0x36F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF)
}

/// Is `c` a character that is a word by itself (Han, Hiragana, Katakana)?
fn ideograph(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF)
}

fn apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

fn word_char(c: char) -> bool {
    (c.is_alphanumeric() || combining(c)) && !ideograph(c)
}

/// The words of a text, as byte ranges.
#[derive(Clone, Debug)]
pub struct Words<'t> {
    text: &'t str,
    at: usize,
}

/// The words of `text`, as `(start, end)` byte ranges.
pub fn words(text: &str) -> Words<'_> {
    Words { text, at: 0 }
}

impl Iterator for Words<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let rest = self.text.get(self.at..)?;
        let mut chars = rest.char_indices().peekable();
        // Skip to the first character of a word.
        let start = loop {
            let (i, c) = chars.next()?;
            if ideograph(c) {
                let end = self.at + i + c.len_utf8();
                let start = self.at + i;
                self.at = end;
                return Some((start, end));
            }
            if word_char(c) {
                break i;
            }
        };
        let mut end = start + rest[start..].chars().next().map_or(1, char::len_utf8);
        while let Some(&(i, c)) = chars.peek() {
            if word_char(c) {
                end = i + c.len_utf8();
                chars.next();
                continue;
            }
            if apostrophe(c) {
                // Inside the word only when a letter follows.
                let mut ahead = chars.clone();
                ahead.next();
                if ahead.peek().is_some_and(|&(_, next)| word_char(next)) {
                    chars.next();
                    continue;
                }
            }
            break;
        }
        let (start, end) = (self.at + start, self.at + end);
        self.at = end;
        Some((start, end))
    }
}

/// The ASCII letters a lowercase Latin letter with an accent folds to (`None`: keep it).
fn fold_latin(c: char) -> Option<&'static str> {
    Some(match c {
        'à'..='å' | 'ā' | 'ă' | 'ą' | 'ǎ' => "a",
        'æ' => "ae",
        'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => "c",
        'ď' | 'đ' | 'ð' => "d",
        'è'..='ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => "e",
        'ĝ' | 'ğ' | 'ġ' | 'ģ' => "g",
        'ĥ' | 'ħ' => "h",
        'ì'..='ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' | 'ı' | 'ǐ' => "i",
        'ĳ' => "ij",
        'ĵ' => "j",
        'ķ' | 'ĸ' => "k",
        'ĺ' | 'ļ' | 'ľ' | 'ŀ' | 'ł' => "l",
        'ñ' | 'ń' | 'ņ' | 'ň' | 'ŉ' | 'ŋ' => "n",
        'ò'..='ö' | 'ø' | 'ō' | 'ŏ' | 'ő' | 'ǒ' => "o",
        'œ' => "oe",
        'ŕ' | 'ŗ' | 'ř' => "r",
        'ś' | 'ŝ' | 'ş' | 'š' | 'ſ' | 'ș' => "s",
        'ß' => "ss",
        'ţ' | 'ť' | 'ŧ' | 'ț' => "t",
        'þ' => "th",
        'ù'..='ü' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' | 'ǔ' => "u",
        'ŵ' => "w",
        'ý' | 'ÿ' | 'ŷ' => "y",
        'ź' | 'ż' | 'ž' => "z",
        _ => return None,
    })
}

/// The term of `word` (one range from [`words`]), or `None` if nothing is left of it.
pub fn term(word: &str, language: Language) -> Option<Term> {
    let mut out = [0u8; MAX_TERM_LEN];
    let mut len = 0;
    let mut full = false;
    let mut push = |piece: &str, len: &mut usize| {
        if full || *len + piece.len() > MAX_TERM_LEN {
            full = true;
            return;
        }
        out[*len..*len + piece.len()].copy_from_slice(piece.as_bytes());
        *len += piece.len();
    };
    // A possessive 's ends nothing but the word's term.
    let word = word
        .strip_suffix("'s")
        .or_else(|| word.strip_suffix("\u{2019}s"))
        .unwrap_or(word);
    for c in word.chars() {
        if combining(c) || apostrophe(c) {
            continue;
        }
        for lower in c.to_lowercase() {
            let mut utf8 = [0u8; 4];
            match fold_latin(lower) {
                Some(ascii) => push(ascii, &mut len),
                None => push(lower.encode_utf8(&mut utf8), &mut len),
            }
        }
    }
    if len == 0 {
        return None;
    }
    if language == Language::English {
        len = stem_english(&mut out, len);
    }
    Term::from_normalised(&out[..len])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn terms(text: &str, language: Language) -> Vec<std::string::String> {
        words(text)
            .filter_map(|(start, end)| term(&text[start..end], language))
            .map(|t| t.as_str().into())
            .collect()
    }

    #[test]
    fn words_are_cut_at_punctuation() {
        let text = "Hello, wörld! It's x86_64 (3.14) — don’t stop... O'Brien";
        let found: Vec<&str> = words(text).map(|(s, e)| &text[s..e]).collect();
        assert_eq!(
            found,
            [
                "Hello", "wörld", "It's", "x86", "64", "3", "14", "don’t", "stop", "O'Brien"
            ]
        );
        assert_eq!(words("'''").count(), 0);
        assert_eq!(words("...,;!?").count(), 0);
        let cjk: Vec<&str> = words("東京タワー ok")
            .map(|(s, e)| &"東京タワー ok"[s..e])
            .collect();
        assert_eq!(cjk, ["東", "京", "タ", "ワ", "ー", "ok"]);
    }

    #[test]
    fn terms_fold_case_accents_and_stem() {
        assert_eq!(
            terms("Café CRÈME Straße Æsir naïve", Language::Other),
            ["cafe", "creme", "strasse", "aesir", "naive"]
        );
        // Decomposed accents (e + combining acute) fold the same way.
        assert_eq!(terms("Cafe\u{301}", Language::Other), ["cafe"]);
        assert_eq!(
            terms(
                "Running servers' configurations, the server's",
                Language::English
            ),
            ["run", "server", "configur", "the", "server"]
        );
        assert_eq!(
            terms("Ελληνικά Русский", Language::Other),
            ["ελληνικά", "русский"]
        );
        let long = "a".repeat(100);
        assert_eq!(terms(&long, Language::Other)[0].len(), MAX_TERM_LEN);
        assert_eq!(terms("don’t", Language::Other), ["dont"]);
    }
}
