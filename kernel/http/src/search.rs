//! `GET /search?q=...` (an HTML page) and `GET /search.json?q=...` on a site packed with
//! `--search`: the query is cut into terms, looked up in the index, and the results page is
//! written straight into the socket's transmit space, window by window.
//!
//! Nothing is kept but a small [`SearchState`] per connection (the terms, the query as typed,
//! one page of hits): the page is a pure function of it and the site, so any part of it can be
//! written again at any offset (a network stack may ask for the same bytes twice), and its
//! length is known, for Content-Length, before its head goes out. Postings and snippet text
//! come through the site's body source like any body: when they are not in RAM yet, the
//! response waits without blocking anything else.

use core::fmt::{self, Write};

use bramble_hal::Instant;
use bramble_site::search::text::{self, Language};
use bramble_site::search::{MAX_PAGES, PAGE_SIZE, Piece, Query, Results, SearchIndex, SearchWait};
use bramble_site::{BodyRequest, BodySource, BodyStatus, SiteFlags, SiteIndex};

use crate::path::write_encoded_path;
use crate::response::write_html_escaped;

/// The path of the HTML results page.
pub const SEARCH_PATH: &str = "/search";
/// The path of the JSON results.
pub const SEARCH_JSON_PATH: &str = "/search.json";
/// Longest query kept as typed (for the page; longer ones are cut and the page says so).
pub const QUERY_TEXT_LEN: usize = 256;
/// Bytes of page text a snippet shows at most.
const SNIPPET_LEN: usize = 220;
/// Bytes of text before the first match a snippet starts with.
const SNIPPET_LEAD: usize = 60;

/// Which answer was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Html,
    Json,
}

/// How many searches can be answered at once (each holds a [`SearchState`] until its page
/// is handed out); more get a 503 asking to try again.
pub const SEARCH_SLOTS: usize = 4;

/// The server's search slots.
///
/// A connection holds its slot by a [`SearchTicket`]: the slot's number and the generation it
/// was claimed in. A slot held past `stale_micros` may be handed to a new search (its holder
/// went without giving it back), and that bumps the generation, so the old holder's ticket no
/// longer reads, writes or frees it: a slow reader of an old search gets a failed response,
/// never another visitor's results.
#[derive(Debug)]
pub(crate) struct SearchSlots {
    states: [SearchState; SEARCH_SLOTS],
    /// When each slot was taken (`None`: free).
    taken: [Option<Instant>; SEARCH_SLOTS],
    /// Each slot's generation: bumped at every claim.
    generation: [u32; SEARCH_SLOTS],
}

/// A claim on one search slot: valid while the slot has not been claimed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SearchTicket {
    slot: u8,
    generation: u32,
}

impl SearchSlots {
    pub(crate) const fn new() -> Self {
        Self {
            states: [const { SearchState::new() }; SEARCH_SLOTS],
            taken: [None; SEARCH_SLOTS],
            generation: [0; SEARCH_SLOTS],
        }
    }

    /// Takes a free slot for `state`, or else one held longer than `stale_micros` (its
    /// connection went without giving it back; the old ticket stops working).
    pub(crate) fn claim(
        &mut self,
        state: SearchState,
        now: Instant,
        stale_micros: u64,
    ) -> Option<SearchTicket> {
        let free = self.taken.iter().position(Option::is_none).or_else(|| {
            self.taken
                .iter()
                .position(|taken| taken.is_some_and(|at| now.micros_since(at) > stale_micros))
        })?;
        self.states[free] = state;
        self.taken[free] = Some(now);
        self.generation[free] = self.generation[free].wrapping_add(1);
        Some(SearchTicket {
            slot: u8::try_from(free).ok()?,
            generation: self.generation[free],
        })
    }

    /// The slot index of `ticket`, if the ticket still holds it.
    fn held(&self, ticket: SearchTicket) -> Option<usize> {
        let slot = usize::from(ticket.slot);
        self.taken.get(slot)?.as_ref()?;
        (*self.generation.get(slot)? == ticket.generation).then_some(slot)
    }

    /// Frees the slot of `ticket` (nothing if it was claimed again meanwhile).
    pub(crate) fn release(&mut self, ticket: SearchTicket) {
        if let Some(slot) = self.held(ticket) {
            self.taken[slot] = None;
        }
    }

    pub(crate) fn get(&self, ticket: SearchTicket) -> Option<&SearchState> {
        self.states.get(self.held(ticket)?)
    }

    pub(crate) fn get_mut(&mut self, ticket: SearchTicket) -> Option<&mut SearchState> {
        let slot = self.held(ticket)?;
        self.states.get_mut(slot)
    }
}

/// What the deferred response head needs from a search.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeadParams {
    pub(crate) is_head: bool,
    pub(crate) close: bool,
    pub(crate) version: u8,
    pub(crate) secure: bool,
    content_type: &'static str,
}

impl HeadParams {
    pub(crate) fn content_type(&self) -> &'static str {
        self.content_type
    }
}

/// One search response being answered.
#[derive(Clone, Debug)]
pub(crate) struct SearchState {
    format: Format,
    /// The query as typed (decoded), perhaps cut.
    text: heapless::String<QUERY_TEXT_LEN>,
    /// The query was longer than [`QUERY_TEXT_LEN`].
    cut: bool,
    query: Query,
    results: Results,
    /// `run` has filled `results`.
    evaluated: bool,
    /// Length of the body, once measured.
    length: Option<u32>,
    /// Results URLs drop `.html` (the site has clean URLs).
    clean_urls: bool,
    // What the deferred response head needs.
    pub(crate) is_head: bool,
    pub(crate) close: bool,
    pub(crate) version: u8,
    pub(crate) secure: bool,
}

impl Default for SearchState {
    fn default() -> Self {
        Self::new()
    }
}

/// Is `b` allowed unescaped in a query-string value we write?
fn query_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// Decodes one `application/x-www-form-urlencoded` value into `out` (`+` is a space, `%XX` a
/// byte; bytes that are not UTF-8 become spaces), keeping what fits. True if all of it fit.
fn decode_form_value<const N: usize>(value: &str, out: &mut heapless::String<N>) -> bool {
    let bytes = value.as_bytes();
    let mut decoded = [0u8; 4];
    let mut pending = 0usize;
    let mut i = 0;
    let mut fits = true;
    let mut flush = |pending: &mut usize, decoded: &[u8; 4], fits: &mut bool| {
        let text = core::str::from_utf8(&decoded[..*pending]).unwrap_or(" ");
        if out.push_str(text).is_err() {
            *fits = false;
        }
        *pending = 0;
    };
    while i < bytes.len() {
        let mut b = bytes[i];
        i += 1;
        if b == b'+' {
            b = b' ';
        } else if b == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(hi), Some(lo)) = (
                bytes.get(i).copied().and_then(hex),
                bytes.get(i + 1).copied().and_then(hex),
            ) {
                b = (hi * 16 + lo) as u8;
                i += 2;
            }
        }
        // Gather one UTF-8 sequence, then write it (or a space if it is not one).
        if pending > 0 && b & 0xC0 != 0x80 {
            flush(&mut pending, &decoded, &mut fits);
        }
        if pending == 4 {
            flush(&mut pending, &decoded, &mut fits);
        }
        decoded[pending] = if b < 0x20 || b == 0x7f { b' ' } else { b };
        pending += 1;
        let expected = match decoded[0] {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        if pending == expected {
            flush(&mut pending, &decoded, &mut fits);
        }
        if !fits {
            return false;
        }
    }
    if pending > 0 {
        flush(&mut pending, &decoded, &mut fits);
    }
    fits
}

impl SearchState {
    /// Nothing asked.
    pub(crate) const fn new() -> Self {
        Self {
            format: Format::Html,
            text: heapless::String::new(),
            cut: false,
            query: Query::EMPTY,
            results: Results::EMPTY,
            evaluated: false,
            length: None,
            clean_urls: false,
            is_head: false,
            close: false,
            version: 1,
            secure: false,
        }
    }

    /// Reads a request for `path` (`/search` or `/search.json`) with `query` (the query
    /// string, without `?`).
    pub(crate) fn start(&mut self, path: &str, query: Option<&str>, index: SiteIndex<'_>) {
        let language = index.search().map_or(Language::Other, |s| s.language());
        *self = Self::new();
        self.format = if path == SEARCH_JSON_PATH {
            Format::Json
        } else {
            Format::Html
        };
        self.clean_urls = index.flags().has(SiteFlags::CLEAN_URLS);
        let mut page = 1;
        for pair in query.unwrap_or("").split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "q" if self.text.is_empty() => {
                    self.cut = !decode_form_value(value, &mut self.text);
                }
                "page" => {
                    page = value.parse::<u32>().unwrap_or(1).clamp(1, MAX_PAGES);
                }
                _ => {}
            }
        }
        let trimmed_len = self.text.trim_end().len();
        self.text.truncate(trimmed_len);
        self.query = Query::parse(&self.text, language);
        self.results.page = page;
    }

    /// Runs the query and measures the page: `Ok(length)` once both are done.
    pub(crate) fn prepare(
        &mut self,
        index: SiteIndex<'_>,
        source: &dyn BodySource,
    ) -> Result<u32, SearchWait> {
        let Some(search) = index.search() else {
            return Err(SearchWait::Failed);
        };
        if !self.evaluated {
            // Ask for the start of every term's postings first, so that a card store reads
            // them all in one go instead of one per attempt.
            let mut waiting = false;
            for term in self.query.terms() {
                if let Some((start, end, _)) = search.lookup(term)
                    && start < end
                {
                    waiting |= !ready(source, search.postings_body(), start);
                }
            }
            if waiting {
                return Err(SearchWait::Pending);
            }
            let page = self.results.page;
            let mut results = Results::EMPTY;
            search.run(&self.query, page, source, &mut results)?;
            self.results = results;
            self.evaluated = true;
        }
        if let Some(length) = self.length {
            return Ok(length);
        }
        // Likewise the text of every snippet.
        let mut waiting = false;
        for hit in self.results.hits() {
            let doc = search.document(hit.doc);
            if doc.text_len > 0 {
                let (start, _) = snippet_range(hit.first_at, doc.text_len as usize);
                waiting |= !ready(source, search.text_body(), doc.text_offset + start as u32);
            }
        }
        if waiting {
            return Err(SearchWait::Pending);
        }
        let mut window = Window::new(0, &mut []);
        let written = self.write_page(&mut window, index, search, source);
        match (written, window.wait) {
            (_, Some(wait)) => Err(wait),
            (Err(_), None) => Err(SearchWait::Failed),
            (Ok(()), None) => {
                let length = u32::try_from(window.total).map_err(|_| SearchWait::Failed)?;
                self.length = Some(length);
                Ok(length)
            }
        }
    }

    /// What the response head needs.
    pub(crate) fn clone_head(&self) -> HeadParams {
        HeadParams {
            is_head: self.is_head,
            close: self.close,
            version: self.version,
            secure: self.secure,
            content_type: self.content_type(),
        }
    }

    /// The path asked for (`/search` or `/search.json`).
    pub(crate) fn path(&self) -> &'static str {
        match self.format {
            Format::Html => SEARCH_PATH,
            Format::Json => SEARCH_JSON_PATH,
        }
    }

    /// The content type of the answer.
    pub(crate) fn content_type(&self) -> &'static str {
        match self.format {
            Format::Html => "text/html; charset=utf-8",
            Format::Json => "application/json",
        }
    }

    /// Copies the page's bytes from `offset` into `out` (as many as fit).
    pub(crate) fn read(
        &self,
        index: SiteIndex<'_>,
        source: &dyn BodySource,
        offset: u32,
        out: &mut [u8],
    ) -> BodyStatus {
        let Some(search) = index.search() else {
            return BodyStatus::Failed;
        };
        let mut window = Window::new(u64::from(offset), out);
        let written = self.write_page(&mut window, index, search, source);
        match (written, window.wait) {
            (_, Some(SearchWait::Pending)) => BodyStatus::Pending,
            (_, Some(SearchWait::Failed)) => BodyStatus::Failed,
            // Err without a wait: the window is full.
            _ => BodyStatus::Ready(window.written),
        }
    }

    fn write_page(
        &self,
        out: &mut Window<'_>,
        index: SiteIndex<'_>,
        search: SearchIndex<'_>,
        source: &dyn BodySource,
    ) -> fmt::Result {
        match self.format {
            Format::Json => self.write_json(out, index, search, source),
            Format::Html => {
                let mut pieces = search.pieces().peekable();
                if pieces.peek().is_none() {
                    out.write_str(DEFAULT_HEAD)?;
                    write_html_escaped(out, &self.text)?;
                    out.write_str(DEFAULT_FORM)?;
                    write_html_escaped(out, &self.text)?;
                    out.write_str(DEFAULT_FORM_END)?;
                    self.write_results(out, index, search, source)?;
                    return out.write_str(DEFAULT_TAIL);
                }
                for piece in pieces {
                    match piece {
                        Piece::Literal(text) => out.write_str(text)?,
                        Piece::Query => write_html_escaped(out, &self.text)?,
                        Piece::Results => self.write_results(out, index, search, source)?,
                    }
                }
                Ok(())
            }
        }
    }

    /// The URL a hit links to: the page's path, `/dir/` for `/dir/index.html`, and without
    /// `.html` on a site with clean URLs.
    fn url<'a>(&self, index: SiteIndex<'a>, file: u32) -> &'a str {
        let path = index.path(file);
        if let Some(folder) = path.strip_suffix(bramble_site::INDEX_NAME) {
            return folder;
        }
        if self.clean_urls {
            return path.strip_suffix(".html").unwrap_or(path);
        }
        path
    }

    /// A link to result page `page` of this query.
    fn write_page_link(&self, out: &mut Window<'_>, page: u32, label: &str) -> fmt::Result {
        out.write_str("<a href=\"/search?q=")?;
        for &b in self.text.as_bytes() {
            if query_safe(b) {
                out.write_char(char::from(b))?;
            } else if b == b' ' {
                out.write_char('+')?;
            } else {
                write!(out, "%{b:02X}")?;
            }
        }
        write!(out, "&amp;page={page}\">{label}</a>")
    }

    fn notes(&self) -> impl Iterator<Item = NoteText> + '_ {
        let ignored = self.query.ignored;
        [
            self.cut.then_some(NoteText::Cut),
            (ignored > 0).then_some(NoteText::Ignored(ignored)),
            self.results.truncated.then_some(NoteText::Truncated),
            (!self.results.all_terms && self.results.total() > 0).then_some(NoteText::Some),
        ]
        .into_iter()
        .flatten()
    }

    fn write_results(
        &self,
        out: &mut Window<'_>,
        index: SiteIndex<'_>,
        search: SearchIndex<'_>,
        source: &dyn BodySource,
    ) -> fmt::Result {
        let results = &self.results;
        out.write_str("<section class=\"bramble-search\" aria-label=\"Search results\">\n")?;
        if self.query.terms().is_empty() {
            out.write_str("<p class=\"bramble-search-summary\">")?;
            if self.text.is_empty() {
                out.write_str("Type one or more words to search this site.")?;
            } else {
                out.write_str("That query has no words to search for (letters or digits).")?;
            }
            out.write_str("</p>\n")?;
        } else if results.total() == 0 {
            out.write_str("<p class=\"bramble-search-summary\">No results for <strong>")?;
            write_html_escaped(out, &self.text)?;
            out.write_str("</strong>.</p>\n")?;
        } else {
            let total = results.total();
            write!(
                out,
                "<p class=\"bramble-search-summary\">{total} result{} for <strong>",
                if total == 1 { "" } else { "s" }
            )?;
            write_html_escaped(out, &self.text)?;
            out.write_str("</strong>")?;
            if results.pages() > 1 {
                write!(out, ", page {} of {}", results.page, results.pages())?;
            }
            out.write_str(".</p>\n")?;
            let first = (results.page - 1) as usize * PAGE_SIZE + 1;
            writeln!(
                out,
                "<ol class=\"bramble-search-results\" start=\"{first}\">"
            )?;
            for hit in results.hits() {
                let doc = search.document(hit.doc);
                let url = self.url(index, doc.file);
                out.write_str("<li><a href=\"")?;
                write_encoded_path(out, url)?;
                out.write_str("\">")?;
                write_html_escaped(out, if doc.title.is_empty() { url } else { doc.title })?;
                out.write_str("</a> <span class=\"bramble-search-url\">")?;
                write_html_escaped(out, url)?;
                out.write_str("</span>\n<p>")?;
                self.write_snippet(out, search, source, hit.doc, hit.first_at, true)?;
                out.write_str("</p></li>\n")?;
            }
            out.write_str("</ol>\n")?;
            if results.pages() > 1 {
                out.write_str("<nav class=\"bramble-search-pages\">")?;
                if results.page > 1 {
                    self.write_page_link(out, results.page - 1, "&larr; Previous")?;
                    out.write_str(" ")?;
                }
                if results.page < results.pages() {
                    self.write_page_link(out, results.page + 1, "Next &rarr;")?;
                }
                out.write_str("</nav>\n")?;
            }
        }
        for note in self.notes() {
            out.write_str("<p class=\"bramble-search-note\">")?;
            note.write(out)?;
            out.write_str("</p>\n")?;
        }
        out.write_str("</section>\n")
    }

    fn write_json(
        &self,
        out: &mut Window<'_>,
        index: SiteIndex<'_>,
        search: SearchIndex<'_>,
        source: &dyn BodySource,
    ) -> fmt::Result {
        let results = &self.results;
        out.write_str("{\"query\":")?;
        write_json_string(out, &self.text)?;
        out.write_str(",\"terms\":[")?;
        for (i, term) in self.query.terms().iter().enumerate() {
            if i > 0 {
                out.write_str(",")?;
            }
            write_json_string(out, term.as_str())?;
        }
        write!(
            out,
            "],\"total\":{},\"all_terms\":{},\"page\":{},\"pages\":{},\"results\":[",
            results.total(),
            results.all_terms,
            results.page,
            results.pages()
        )?;
        for (i, hit) in results.hits().iter().enumerate() {
            let doc = search.document(hit.doc);
            if i > 0 {
                out.write_str(",")?;
            }
            out.write_str("{\"url\":")?;
            let mut url = JsonString::start(out)?;
            write_encoded_path(&mut url, self.url(index, doc.file))?;
            url.end()?;
            out.write_str(",\"title\":")?;
            write_json_string(out, doc.title)?;
            write!(out, ",\"score\":{},\"snippet\":", hit.score)?;
            let mut plain = JsonString::start(out)?;
            self.write_snippet(&mut plain, search, source, hit.doc, hit.first_at, false)?;
            plain.end()?;
            out.write_str(",\"snippet_html\":")?;
            let mut html = JsonString::start(out)?;
            self.write_snippet(&mut html, search, source, hit.doc, hit.first_at, true)?;
            html.end()?;
            out.write_str("}")?;
        }
        out.write_str("],\"notes\":[")?;
        for (i, note) in self.notes().enumerate() {
            if i > 0 {
                out.write_str(",")?;
            }
            let mut text = JsonString::start(out)?;
            note.write(&mut text)?;
            text.end()?;
        }
        out.write_str("]}\n")
    }

    /// Writes the snippet of document `doc`: about [`SNIPPET_LEN`] bytes of its text around
    /// `first_at` (offset + 1 of the first match; 0: from the top), cut at spaces, the query's
    /// words marked (`html`: escaped, in `<mark>`).
    fn write_snippet<W: Write + Waits>(
        &self,
        out: &mut W,
        search: SearchIndex<'_>,
        source: &dyn BodySource,
        doc: u32,
        first_at: u32,
        html: bool,
    ) -> fmt::Result {
        let doc = search.document(doc);
        let text_len = doc.text_len as usize;
        let (start, end) = snippet_range(first_at, text_len);
        let mut buffer = [0u8; SNIPPET_LEN];
        let wanted = end - start;
        let mut got = 0;
        while got < wanted {
            let request = BodyRequest {
                body: search.text_body(),
                offset: doc.text_offset + (start + got) as u32,
                // Counted as a cache lookup once per response: in the measuring pass.
                lookup: got == 0 && out.measuring(),
            };
            match source.read(request, &mut buffer[got..wanted]) {
                BodyStatus::Ready(n) if n > 0 => got += n,
                BodyStatus::Pending => return out.wait(SearchWait::Pending),
                BodyStatus::Ready(_) | BodyStatus::Failed => {
                    return out.wait(SearchWait::Failed);
                }
            }
        }
        // Snap both ends to characters, and to spaces when not at the ends of the text.
        let mut from = 0;
        while from < wanted && buffer[from] & 0xC0 == 0x80 {
            from += 1;
        }
        let slice = &buffer[from..wanted];
        let mut window = match core::str::from_utf8(slice) {
            Ok(text) => text,
            Err(error) => core::str::from_utf8(&slice[..error.valid_up_to()]).unwrap_or(""),
        };
        let leading = start + from > 0;
        let trailing = start + from + window.len() < text_len;
        if leading && let Some(space) = window.find(' ') {
            window = &window[space + 1..];
        }
        if trailing && let Some(space) = window.rfind(' ') {
            window = &window[..space];
        }
        if leading {
            out.write_str("\u{2026}")?;
        }
        let language = search.language();
        let mut at = 0;
        let escape = |out: &mut W, text: &str| {
            if html {
                write_html_escaped(out, text)
            } else {
                out.write_str(text)
            }
        };
        for (word_start, word_end) in text::words(window) {
            escape(out, &window[at..word_start])?;
            let word = &window[word_start..word_end];
            let marked = text::term(word, language).is_some_and(|term| self.query.has(&term));
            if marked && html {
                out.write_str("<mark>")?;
                escape(out, word)?;
                out.write_str("</mark>")?;
            } else {
                escape(out, word)?;
            }
            at = word_end;
        }
        escape(out, &window[at..])?;
        if trailing {
            out.write_str("\u{2026}")?;
        }
        Ok(())
    }
}

/// The byte range of a page's text a snippet is cut from: about [`SNIPPET_LEN`] bytes from
/// [`SNIPPET_LEAD`] before the first match (`first_at` is its offset plus one; 0: the top).
fn snippet_range(first_at: u32, text_len: usize) -> (usize, usize) {
    let center = (first_at as usize).saturating_sub(1).min(text_len);
    let start = center.saturating_sub(SNIPPET_LEAD);
    (start, (start + SNIPPET_LEN).min(text_len))
}

/// Does the body source have the bytes of `body` at `offset` now? (Asking starts reading
/// them if not.) A failed read counts as there: the real read reports it.
fn ready(source: &dyn BodySource, body: bramble_site::Body, offset: u32) -> bool {
    let request = BodyRequest {
        body,
        offset,
        lookup: true,
    };
    !matches!(source.read(request, &mut []), BodyStatus::Pending)
}

/// The notes a results page may carry.
enum NoteText {
    Cut,
    Ignored(usize),
    Truncated,
    Some,
}

impl NoteText {
    fn write(&self, out: &mut impl Write) -> fmt::Result {
        match self {
            NoteText::Cut => write!(
                out,
                "The query was long: only its first {QUERY_TEXT_LEN} bytes were read."
            ),
            NoteText::Ignored(n) => write!(
                out,
                "Only the first {} different words were searched for; {n} more were left out.",
                bramble_site::search::MAX_QUERY_TERMS
            ),
            NoteText::Truncated => {
                out.write_str("Some words are very common: not every page holding them was read.")
            }
            NoteText::Some => {
                out.write_str("No page holds all of these words; these pages hold some of them.")
            }
        }
    }
}

/// A writer that can be told a body read has to wait (the page cannot be written yet).
trait Waits {
    fn wait(&mut self, wait: SearchWait) -> fmt::Result;
    /// Is this the pass that measures the page (before its head goes out)?
    fn measuring(&self) -> bool;
}

/// The bytes of the page from `skip` on, into `out`; counts the whole length when `out` is
/// empty.
struct Window<'o> {
    skip: u64,
    out: &'o mut [u8],
    written: usize,
    /// Bytes of the page seen so far.
    total: u64,
    /// A body read had to wait, or failed.
    wait: Option<SearchWait>,
}

impl<'o> Window<'o> {
    fn new(skip: u64, out: &'o mut [u8]) -> Self {
        Self {
            skip,
            out,
            written: 0,
            total: 0,
            wait: None,
        }
    }
}

impl Write for Window<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let bytes = s.as_bytes();
        let start = self.total;
        self.total += bytes.len() as u64;
        if self.out.is_empty() {
            return Ok(());
        }
        if self.total <= self.skip {
            return Ok(());
        }
        let from = self.skip.saturating_sub(start) as usize;
        let space = self.out.len() - self.written;
        let n = (bytes.len() - from).min(space);
        self.out[self.written..self.written + n].copy_from_slice(&bytes[from..from + n]);
        self.written += n;
        if self.written == self.out.len() {
            // Full: nothing more is needed from this pass.
            return Err(fmt::Error);
        }
        Ok(())
    }
}

impl Waits for Window<'_> {
    fn wait(&mut self, wait: SearchWait) -> fmt::Result {
        self.wait = Some(wait);
        Err(fmt::Error)
    }

    fn measuring(&self) -> bool {
        self.out.is_empty()
    }
}

/// A JSON string being written into a window: escapes what goes through it.
struct JsonString<'w, 'o> {
    out: &'w mut Window<'o>,
}

impl<'w, 'o> JsonString<'w, 'o> {
    fn start(out: &'w mut Window<'o>) -> Result<Self, fmt::Error> {
        out.write_str("\"")?;
        Ok(Self { out })
    }

    fn end(self) -> fmt::Result {
        self.out.write_str("\"")
    }
}

impl Write for JsonString<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut plain = 0;
        for (i, c) in s.char_indices() {
            if c != '"' && c != '\\' && (c as u32) >= 0x20 {
                continue;
            }
            self.out.write_str(&s[plain..i])?;
            match c {
                '"' => self.out.write_str("\\\"")?,
                '\\' => self.out.write_str("\\\\")?,
                c => write!(self.out, "\\u{:04x}", c as u32)?,
            }
            plain = i + c.len_utf8();
        }
        self.out.write_str(&s[plain..])
    }
}

impl Waits for JsonString<'_, '_> {
    fn wait(&mut self, wait: SearchWait) -> fmt::Result {
        self.out.wait(wait)
    }

    fn measuring(&self) -> bool {
        self.out.measuring()
    }
}

fn write_json_string(out: &mut Window<'_>, text: &str) -> fmt::Result {
    let mut string = JsonString::start(out)?;
    string.write_str(text)?;
    string.end()
}

/// The built-in results page, before the query (in the title).
const DEFAULT_HEAD: &str = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
<meta name=\"color-scheme\" content=\"light dark\">\n<title>Search: ";
/// After the title, up to the search box's value.
const DEFAULT_FORM: &str = "</title>\n<style>\n\
:root{color-scheme:light dark;--fg:#1d1d1f;--bg:#fff;--muted:#6e6e73;--line:#d2d2d7;--link:#0b57d0;--mark:#fff3a3}\n\
@media (prefers-color-scheme:dark){:root{--fg:#f2f2f7;--bg:#1c1c1e;--muted:#a1a1a6;--line:#48484a;--link:#8ab4f8;--mark:#5c4d00}}\n\
body{font:16px/1.55 system-ui,sans-serif;color:var(--fg);background:var(--bg);margin:2rem auto;max-width:46rem;padding:0 1rem}\n\
form{display:flex;gap:.5rem;margin-bottom:1.5rem}\n\
input{flex:1;font:inherit;padding:.5rem .7rem;border:1px solid var(--line);border-radius:.5rem;background:transparent;color:inherit}\n\
button{font:inherit;padding:.5rem 1rem;border:1px solid var(--line);border-radius:.5rem;background:transparent;color:inherit}\n\
.bramble-search-summary,.bramble-search-note{color:var(--muted)}\n\
ol{padding-left:1.5rem}li{margin-bottom:1.1rem}\n\
li a{color:var(--link);font-size:1.1rem;text-decoration:none}li a:hover{text-decoration:underline}\n\
.bramble-search-url{display:block;color:var(--muted);font-size:.85rem;word-break:break-all}\n\
li p{margin:.2rem 0}mark{background:var(--mark);color:inherit;border-radius:.15rem;padding:0 .1rem}\n\
nav a{color:var(--link);margin-right:1rem}\n\
</style></head>\n<body><main>\n\
<form action=\"/search\" method=\"get\" role=\"search\"><input type=\"search\" name=\"q\" value=\"";
/// After the search box's value, up to the results.
const DEFAULT_FORM_END: &str =
    "\" aria-label=\"Search this site\" autofocus><button type=\"submit\">Search</button></form>\n";
/// After the results.
const DEFAULT_TAIL: &str = "</main></body></html>\n";
