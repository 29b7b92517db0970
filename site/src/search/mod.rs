//! Full-text search over the site's pages: a compact inverted index built by the packer
//! (`bramble pack --search`), and the bounded, allocation-free query evaluation the Pi runs.
//!
//! The index is split the way the card store wants it: the *dictionary* (sorted terms, each
//! with its document frequency and where its postings start) and the *document table* (the
//! page, its title, where its text is) are a section of the site index, read and verified at
//! boot; the *postings* and the pages' *plain text* (for snippets) are two internal bodies in
//! the body region, read through the same [`BodySource`] as every response body, from the RAM
//! cache or the card. A query reads only the postings of its terms.
//!
//! Ranking is BM25 (k1 = 1.2, b = 0.75) with the title counting 8 times and headings 3 times a
//! body word, computed by the packer and stored per posting as a one-byte *impact*; a query
//! adds the impacts of its terms. Pages holding every query term rank first (and alone, when
//! there are any); then by score; then by site order. Each posting also holds where the term
//! first occurs in the page's text, so a snippet is cut without scanning the page.
//!
//! Work per query is bounded whatever the query: at most [`MAX_QUERY_TERMS`] distinct terms
//! (more are ignored and the page says so), at most [`MAX_POSTINGS_BYTES`] of postings read,
//! at most [`MAX_PAGES`] pages of [`PAGE_SIZE`] results, and fixed memory.

pub mod stem;
pub mod text;

#[cfg(feature = "std")]
pub mod build;

use crate::body::{Body, BodyRequest, BodySource, BodyStatus};
use crate::bytes::{read_u32, reference};
use text::{Language, MAX_TERM_LEN, Term};

/// Most distinct terms a query is searched for.
pub const MAX_QUERY_TERMS: usize = 8;
/// Results per page.
pub const PAGE_SIZE: usize = 10;
/// Most result pages a query can ask for (`page=` 1 to this).
pub const MAX_PAGES: u32 = 10;
/// Most postings bytes one query reads (very common words are cut short beyond it).
pub const MAX_POSTINGS_BYTES: u32 = 1 << 20;
/// Size of the section's fixed header.
pub const SEARCH_HEADER_LEN: usize = 32;
/// Size of one document record.
pub const DOC_RECORD_LEN: usize = 24;
/// Size of one dictionary record.
pub const TERM_RECORD_LEN: usize = 16;
/// Size of one template piece record.
pub const PIECE_RECORD_LEN: usize = 16;
/// Section flag: the site's words are English and stemmed.
pub const SEARCH_ENGLISH: u32 = 1;
/// Most documents an index may hold.
pub const MAX_DOCS: usize = 1 << 20;
/// Most template pieces.
pub const MAX_PIECES: usize = 64;

/// One piece of the results page template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text of the template, written as it is.
    Literal(&'a str),
    /// `{{query}}`: the query as typed, HTML-escaped.
    Query,
    /// `{{results}}`: the results block.
    Results,
}

/// Why a search section was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchError {
    /// Counts, lengths or the header do not add up.
    Malformed,
    /// Document `index` refers to no page, or its title or text is out of bounds.
    BadDocument {
        /// The document.
        index: usize,
    },
    /// Term `index` is not a normalised term, out of order, or its postings are out of bounds.
    BadTerm {
        /// The term.
        index: usize,
    },
    /// Template piece `index` is invalid.
    BadPiece {
        /// The piece.
        index: usize,
    },
}

/// One indexed page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Document<'a> {
    /// Position of the page in the file table.
    pub file: u32,
    /// Its title.
    pub title: &'a str,
    /// Where its plain text lies in the text body.
    pub text_offset: u32,
    /// Length of its plain text.
    pub text_len: u32,
}

/// The checked search section.
#[derive(Clone, Copy, Debug)]
pub struct SearchIndex<'a> {
    docs: &'a [u8],
    terms: &'a [u8],
    pieces: &'a [u8],
    strings: &'a [u8],
    language: Language,
    postings: Body,
    text: Body,
}

/// A query, cut into at most [`MAX_QUERY_TERMS`] distinct terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Query {
    terms: [Term; MAX_QUERY_TERMS],
    count: usize,
    /// Words beyond the first [`MAX_QUERY_TERMS`] distinct terms (not searched).
    pub ignored: usize,
}

impl Query {
    /// No terms.
    pub const EMPTY: Query = Query {
        terms: [Term::EMPTY; MAX_QUERY_TERMS],
        count: 0,
        ignored: 0,
    };

    /// Cuts `text` into terms the way the index was built (`language`): the first
    /// [`MAX_QUERY_TERMS`] distinct ones are kept.
    pub fn parse(text: &str, language: Language) -> Query {
        let mut query = Query::EMPTY;
        for (start, end) in text::words(text) {
            let Some(term) = text::term(&text[start..end], language) else {
                continue;
            };
            if query.terms[..query.count].contains(&term) {
                continue;
            }
            if query.count == MAX_QUERY_TERMS {
                query.ignored += 1;
                continue;
            }
            query.terms[query.count] = term;
            query.count += 1;
        }
        query
    }

    /// The terms searched for.
    pub fn terms(&self) -> &[Term] {
        &self.terms[..self.count]
    }

    /// Is `term` one of the query's terms?
    pub fn has(&self, term: &Term) -> bool {
        self.terms().contains(term)
    }
}

/// One result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hit {
    /// Document number.
    pub doc: u32,
    /// Sum of the impacts of the terms it holds.
    pub score: u32,
    /// How many of the query's terms it holds.
    pub matched: u32,
    /// Where the rarest of them first occurs in its text, plus one (0: only in the title).
    pub first_at: u32,
}

impl Hit {
    /// Better hits sort first: more terms, then a higher score, then site order.
    fn key(&self) -> (core::cmp::Reverse<u32>, core::cmp::Reverse<u32>, u32) {
        (
            core::cmp::Reverse(self.matched),
            core::cmp::Reverse(self.score),
            self.doc,
        )
    }
}

/// What a query found: one page of hits and the totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Results {
    /// The page's hits, best first.
    hits: [Hit; PAGE_SIZE],
    count: usize,
    /// Pages holding every term.
    pub total_all: u32,
    /// Pages holding at least one term.
    pub total_any: u32,
    /// The results shown hold every term (otherwise: some of them, as none holds all).
    pub all_terms: bool,
    /// The page of results (from 1).
    pub page: u32,
    /// Some postings were not read (the query's terms are very common): totals are lower
    /// bounds.
    pub truncated: bool,
}

impl Results {
    /// Nothing found.
    pub const EMPTY: Results = Results {
        hits: [Hit {
            doc: 0,
            score: 0,
            matched: 0,
            first_at: 0,
        }; PAGE_SIZE],
        count: 0,
        total_all: 0,
        total_any: 0,
        all_terms: true,
        page: 1,
        truncated: false,
    };

    /// The page's hits.
    pub fn hits(&self) -> &[Hit] {
        &self.hits[..self.count]
    }

    /// The number of results the query has (on every page).
    pub fn total(&self) -> u32 {
        if self.all_terms {
            self.total_all
        } else {
            self.total_any
        }
    }

    /// The number of result pages (at most [`MAX_PAGES`]).
    pub fn pages(&self) -> u32 {
        (self.total().div_ceil(PAGE_SIZE as u32)).min(MAX_PAGES)
    }
}

/// Why a query could not be answered now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchWait {
    /// Postings are being read from the card: ask again later.
    Pending,
    /// Postings could not be read intact.
    Failed,
}

/// Reads one LEB128 `u32` from `bytes` at `*at`.
fn varint(bytes: &[u8], at: &mut usize) -> Option<u32> {
    let mut value = 0u32;
    for shift in [0u32, 7, 14, 21, 28] {
        let byte = *bytes.get(*at)?;
        *at += 1;
        let part = u32::from(byte & 0x7f);
        if shift == 28 && part > 0x0f {
            return None;
        }
        value |= part << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Longest posting entry: two varints and the impact byte.
const MAX_ENTRY: usize = 11;
/// Bytes a cursor reads from the body source at once.
const CURSOR_BUFFER: usize = 96;

/// A reader over one term's postings.
struct Cursor {
    buffer: [u8; CURSOR_BUFFER],
    len: usize,
    at: usize,
    /// Offset in the postings body of the next byte to read into the buffer.
    next: u32,
    /// Offset in the postings body where this term's postings end.
    end: u32,
    /// The entry under the cursor (doc, impact, first offset + 1), or `None` at the end.
    current: Option<(u32, u32, u32)>,
    last_doc: Option<u32>,
    /// The term's document frequency: the snippet shows the rarest matched term.
    df: u32,
}

impl<'a> SearchIndex<'a> {
    /// Checks a search section (layout in FORMAT.md) whose strings are in `strings`;
    /// `internal_body` gives the body of an internal file (the postings and the text), `page`
    /// says whether a file may be a result.
    pub fn new_checked(
        section: &'a [u8],
        strings: &'a [u8],
        internal_body: impl Fn(u32) -> Option<Body>,
        page: impl Fn(u32) -> bool,
    ) -> Result<Self, SearchError> {
        let doc_count = read_u32(section, 0) as usize;
        let term_count = read_u32(section, 4) as usize;
        let flags = read_u32(section, 8);
        let piece_count = read_u32(section, 20) as usize;
        if doc_count > MAX_DOCS
            || piece_count > MAX_PIECES
            || flags & !SEARCH_ENGLISH != 0
            || read_u32(section, 24) != 0
            || read_u32(section, 28) != 0
        {
            return Err(SearchError::Malformed);
        }
        let docs_end = doc_count
            .checked_mul(DOC_RECORD_LEN)
            .and_then(|len| len.checked_add(SEARCH_HEADER_LEN))
            .ok_or(SearchError::Malformed)?;
        let terms_end = term_count
            .checked_mul(TERM_RECORD_LEN)
            .and_then(|len| len.checked_add(docs_end))
            .ok_or(SearchError::Malformed)?;
        let pieces_end = piece_count
            .checked_mul(PIECE_RECORD_LEN)
            .and_then(|len| len.checked_add(terms_end))
            .ok_or(SearchError::Malformed)?;
        if section.len() != pieces_end {
            return Err(SearchError::Malformed);
        }
        let postings = internal_body(read_u32(section, 12)).ok_or(SearchError::Malformed)?;
        let text = internal_body(read_u32(section, 16)).ok_or(SearchError::Malformed)?;
        let index = SearchIndex {
            docs: &section[SEARCH_HEADER_LEN..docs_end],
            terms: &section[docs_end..terms_end],
            pieces: &section[terms_end..pieces_end],
            strings,
            language: if flags & SEARCH_ENGLISH != 0 {
                Language::English
            } else {
                Language::Other
            },
            postings,
            text,
        };
        for i in 0..doc_count {
            let bad = SearchError::BadDocument { index: i };
            let record = &index.docs[i * DOC_RECORD_LEN..][..DOC_RECORD_LEN];
            let file = read_u32(record, 0);
            let title = reference(record, 4, strings.len()).ok_or(bad)?;
            core::str::from_utf8(&strings[title]).map_err(|_| bad)?;
            let text_end = read_u32(record, 12).checked_add(read_u32(record, 16));
            if !page(file) || text_end.is_none_or(|end| end > text.len) || read_u32(record, 20) != 0
            {
                return Err(bad);
            }
        }
        let mut previous: Option<&[u8]> = None;
        let mut previous_offset = 0u32;
        for i in 0..term_count {
            let bad = SearchError::BadTerm { index: i };
            let record = &index.terms[i * TERM_RECORD_LEN..][..TERM_RECORD_LEN];
            let range = reference(record, 0, strings.len()).ok_or(bad)?;
            let term = &strings[range];
            core::str::from_utf8(term).map_err(|_| bad)?;
            let offset = read_u32(record, 8);
            let df = read_u32(record, 12) as usize;
            if term.is_empty()
                || term.len() > MAX_TERM_LEN
                || previous.is_some_and(|before| before >= term)
                || offset < previous_offset
                || offset > postings.len
                || df == 0
                || df > doc_count
            {
                return Err(bad);
            }
            previous = Some(term);
            previous_offset = offset;
        }
        let mut results_pieces = 0;
        for i in 0..piece_count {
            let bad = SearchError::BadPiece { index: i };
            let record = &index.pieces[i * PIECE_RECORD_LEN..][..PIECE_RECORD_LEN];
            let kind = read_u32(record, 0);
            let range = reference(record, 8, strings.len()).ok_or(bad)?;
            core::str::from_utf8(&strings[range.clone()]).map_err(|_| bad)?;
            let literal_ok = kind == 0 || range.is_empty();
            if kind > 2 || read_u32(record, 4) != 0 || !literal_ok {
                return Err(bad);
            }
            results_pieces += usize::from(kind == 2);
        }
        if piece_count > 0 && results_pieces != 1 {
            return Err(SearchError::Malformed);
        }
        Ok(index)
    }

    /// Number of indexed pages.
    pub fn doc_count(&self) -> usize {
        self.docs.len() / DOC_RECORD_LEN
    }

    /// Number of distinct terms.
    pub fn term_count(&self) -> usize {
        self.terms.len() / TERM_RECORD_LEN
    }

    /// How the site's words are stemmed.
    pub fn language(&self) -> Language {
        self.language
    }

    /// The body holding the pages' plain text.
    pub fn text_body(&self) -> Body {
        self.text
    }

    /// The body holding the postings.
    pub fn postings_body(&self) -> Body {
        self.postings
    }

    /// Document `index` (all zero if out of range).
    pub fn document(&self, index: u32) -> Document<'a> {
        let record = usize::try_from(index)
            .ok()
            .and_then(|i| i.checked_mul(DOC_RECORD_LEN))
            .and_then(|at| self.docs.get(at..at.checked_add(DOC_RECORD_LEN)?))
            .unwrap_or(&[]);
        Document {
            file: read_u32(record, 0),
            title: reference(record, 4, self.strings.len())
                .and_then(|range| core::str::from_utf8(self.strings.get(range)?).ok())
                .unwrap_or(""),
            text_offset: read_u32(record, 12),
            text_len: read_u32(record, 16),
        }
    }

    /// The template pieces (empty: the engine's built-in page).
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'a>> + '_ {
        self.pieces
            .chunks_exact(PIECE_RECORD_LEN)
            .map(|record| match read_u32(record, 0) {
                1 => Piece::Query,
                2 => Piece::Results,
                _ => Piece::Literal(
                    reference(record, 8, self.strings.len())
                        .and_then(|range| core::str::from_utf8(self.strings.get(range)?).ok())
                        .unwrap_or(""),
                ),
            })
    }

    fn term_bytes(&self, index: usize) -> &'a [u8] {
        let record = self
            .terms
            .get(index * TERM_RECORD_LEN..(index + 1) * TERM_RECORD_LEN)
            .unwrap_or(&[]);
        reference(record, 0, self.strings.len())
            .and_then(|range| self.strings.get(range))
            .unwrap_or(&[])
    }

    /// The postings range and document frequency of `term`, if the site has it.
    pub fn lookup(&self, term: &Term) -> Option<(u32, u32, u32)> {
        let (mut low, mut high) = (0, self.term_count());
        while low < high {
            let middle = low + (high - low) / 2;
            match self.term_bytes(middle).cmp(term.as_bytes()) {
                core::cmp::Ordering::Less => low = middle + 1,
                core::cmp::Ordering::Greater => high = middle,
                core::cmp::Ordering::Equal => {
                    let record = &self.terms[middle * TERM_RECORD_LEN..][..TERM_RECORD_LEN];
                    let start = read_u32(record, 8);
                    let end = self
                        .terms
                        .get((middle + 1) * TERM_RECORD_LEN..)
                        .map_or(self.postings.len, |next| read_u32(next, 8));
                    return Some((start, end, read_u32(record, 12)));
                }
            }
        }
        None
    }

    /// Runs `query` and fills `results` with page `page` (1 to [`MAX_PAGES`]) of its hits.
    /// Reads postings through `source`; when they are not all there yet, returns
    /// [`SearchWait::Pending`] (the reads have been started: ask again, and the same query
    /// gives the same answer).
    pub fn run(
        &self,
        query: &Query,
        page: u32,
        source: &dyn BodySource,
        results: &mut Results,
    ) -> Result<(), SearchWait> {
        *results = Results::EMPTY;
        let page = page.clamp(1, MAX_PAGES);
        results.page = page;
        let keep = (page as usize) * PAGE_SIZE;
        let mut cursors: [Option<Cursor>; MAX_QUERY_TERMS] = [const { None }; MAX_QUERY_TERMS];
        let mut budget = MAX_POSTINGS_BYTES;
        for (slot, term) in cursors.iter_mut().zip(query.terms()) {
            let Some((start, end, df)) = self.lookup(term) else {
                continue;
            };
            let len = (end - start).min(budget);
            if len < end - start {
                results.truncated = true;
            }
            budget -= len;
            let mut cursor = Cursor {
                buffer: [0; CURSOR_BUFFER],
                len: 0,
                at: 0,
                next: start,
                end: start + len,
                current: None,
                last_doc: None,
                df,
            };
            cursor.advance(self.postings, self.doc_count() as u32, source)?;
            *slot = Some(cursor);
        }
        let terms = query.terms().len() as u32;
        // The best `keep` hits so far, sorted best first.
        let mut best = [Hit::default(); (MAX_PAGES as usize) * PAGE_SIZE];
        let mut best_len = 0usize;
        while let Some(doc) = cursors
            .iter()
            .flatten()
            .filter_map(|c| c.current.map(|(doc, ..)| doc))
            .min()
        {
            let mut hit = Hit {
                doc,
                ..Hit::default()
            };
            let mut rarest = u32::MAX;
            for cursor in cursors.iter_mut().flatten() {
                if let Some((d, impact, first_at)) = cursor.current
                    && d == doc
                {
                    hit.matched += 1;
                    hit.score += impact;
                    // The snippet shows the rarest of the terms the page holds in its text.
                    if first_at != 0 && cursor.df < rarest {
                        rarest = cursor.df;
                        hit.first_at = first_at;
                    }
                    cursor.advance(self.postings, self.doc_count() as u32, source)?;
                }
            }
            results.total_any += 1;
            if hit.matched == terms {
                results.total_all += 1;
            }
            // Insert into the sorted best list if it belongs there.
            if best_len < keep || hit.key() < best[best_len - 1].key() {
                let mut at = best_len.min(keep - 1);
                if best_len < keep {
                    best_len += 1;
                }
                while at > 0 && hit.key() < best[at - 1].key() {
                    best[at] = best[at - 1];
                    at -= 1;
                }
                best[at] = hit;
            }
        }
        results.all_terms = results.total_all > 0 || terms == 0;
        let shown = if results.all_terms {
            best[..best_len]
                .iter()
                .filter(|hit| hit.matched == terms)
                .count()
        } else {
            best_len
        };
        let from = (page as usize - 1) * PAGE_SIZE;
        for (slot, hit) in results.hits.iter_mut().zip(best[..shown].iter().skip(from)) {
            *slot = *hit;
            results.count += 1;
        }
        Ok(())
    }
}

impl Cursor {
    /// Moves to the next entry (or the end), reading more postings when the buffer runs low.
    fn advance(
        &mut self,
        postings: Body,
        doc_count: u32,
        source: &dyn BodySource,
    ) -> Result<(), SearchWait> {
        if self.len - self.at < MAX_ENTRY && self.next < self.end {
            self.buffer.copy_within(self.at..self.len, 0);
            self.len -= self.at;
            self.at = 0;
            while self.len < CURSOR_BUFFER && self.next < self.end {
                let want = ((self.end - self.next) as usize).min(CURSOR_BUFFER - self.len);
                let request = BodyRequest {
                    body: postings,
                    offset: self.next,
                    lookup: true,
                };
                match source.read(request, &mut self.buffer[self.len..self.len + want]) {
                    BodyStatus::Ready(n) if n > 0 && n <= want => {
                        self.len += n;
                        self.next += n as u32;
                    }
                    BodyStatus::Pending => return Err(SearchWait::Pending),
                    BodyStatus::Ready(_) | BodyStatus::Failed => return Err(SearchWait::Failed),
                }
            }
        }
        let bytes = &self.buffer[..self.len];
        let mut at = self.at;
        let entry = (|| {
            let delta = varint(bytes, &mut at)?;
            let impact = u32::from(*bytes.get(at)?);
            at += 1;
            let first_at = varint(bytes, &mut at)?;
            let doc = match self.last_doc {
                None => delta,
                Some(last) => last.checked_add(delta).filter(|_| delta > 0)?,
            };
            (doc < doc_count).then_some((doc, impact, first_at))
        })();
        // A malformed entry ends this term's postings (the bytes passed their checksum, so
        // only a packer bug gets here; nothing is read out of bounds either way).
        self.current = entry;
        if let Some((doc, ..)) = entry {
            self.at = at;
            self.last_doc = Some(doc);
        }
        Ok(())
    }
}
