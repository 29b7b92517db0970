//! The std site-image writer: lays out already-compressed files into image bytes (feature `std`).

use std::collections::HashMap;
use std::fmt;
use std::string::String;
use std::vec;
use std::vec::Vec;

use bramble_hal::calendar::UtcDateTime;

use crate::reader::SiteFlags;
use crate::rules::{self, HeaderBlockSpec, PatternKind, RedirectSpec};
use crate::search::build::BuiltSearch;
use crate::{
    ALIGN, BODY_ALIGN, DEFAULT_SEGMENT_LEN, ENTRY_LEN, FLAG_BROTLI, FLAG_GZIP, HEADER_LEN, MAGIC,
    MAX_SEGMENT_LEN, MIN_SEGMENT_LEN, VERSION, entry, header,
};

/// One encoding of a file given to the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VariantSpec {
    /// The encoded body.
    pub body: Vec<u8>,
    /// The complete quoted strong ETag, e.g. `"9f2c1a0b4d5e6f70-gz"`.
    pub etag: String,
}

/// One file given to the writer, with everything the reader will hand out for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    /// URL path, e.g. `/dir/index.html` (see FORMAT.md for the rules).
    pub path: String,
    /// `Content-Type` value.
    pub content_type: String,
    /// `Cache-Control` value.
    pub cache_control: String,
    /// Last modification, Unix seconds.
    pub last_modified: u64,
    /// `last_modified` as an IMF-fixdate (see [`http_date`]).
    pub last_modified_http: String,
    /// The uncompressed body.
    pub identity: VariantSpec,
    /// The gzip body, if kept.
    pub gzip: Option<VariantSpec>,
    /// The brotli body, if kept.
    pub brotli: Option<VariantSpec>,
}

/// Why the writer refused its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// The path breaks the rules in FORMAT.md (must start with `/`, no empty, `.` or `..`
    /// segments, no trailing `/`, no control characters).
    InvalidPath(String),
    /// A header value (content type, cache control, Last-Modified) is empty or has characters
    /// outside visible ASCII and space.
    InvalidHeaderValue {
        /// The file's path.
        path: String,
        /// Which field.
        field: &'static str,
    },
    /// An ETag is not a quoted strong entity tag.
    InvalidEtag {
        /// The file's path.
        path: String,
    },
    /// Two files have the same path.
    DuplicatePath(String),
    /// The image would exceed the format's 4 GiB limit (32-bit offsets).
    TooLarge {
        /// The size the image would have had.
        bytes: u64,
    },
    /// The segment length asked for is not a power of two from 4 KiB to 1 MiB.
    BadSegmentLength(u32),
    /// A redirect rule or header block the reader would refuse (see [`crate::rules`]).
    InvalidRule(String),
    /// More rules than a section may hold (see [`crate::rules`]).
    TooManyRules(&'static str),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::InvalidPath(path) => write!(f, "invalid site path {path:?}"),
            WriteError::InvalidHeaderValue { path, field } => {
                write!(f, "{path}: invalid {field} value")
            }
            WriteError::InvalidEtag { path } => write!(f, "{path}: invalid ETag"),
            WriteError::DuplicatePath(path) => write!(f, "two files with the path {path}"),
            WriteError::TooLarge { bytes } => {
                write!(
                    f,
                    "site image would be {bytes} bytes, over the format's 4 GiB limit"
                )
            }
            WriteError::InvalidRule(problem) => write!(f, "invalid rule: {problem}"),
            WriteError::TooManyRules(what) => write!(f, "too many {what}"),
            WriteError::BadSegmentLength(len) => write!(
                f,
                "segment length {len}: must be a power of two from {MIN_SEGMENT_LEN} to \
                 {MAX_SEGMENT_LEN}"
            ),
        }
    }
}

impl std::error::Error for WriteError {}

/// Builds a site image from files whose variants are already compressed.
#[derive(Debug)]
pub struct SiteImageWriter {
    /// Files added so far, in insertion order.
    files: Vec<FileSpec>,
    /// Length of the body segments (see FORMAT.md).
    segment_len: u32,
    /// Site flags (see [`SiteFlags`]).
    flags: SiteFlags,
    /// `_redirects`, in file order.
    redirects: Vec<RedirectSpec>,
    /// `_headers`, in file order.
    header_blocks: Vec<HeaderBlockSpec>,
    /// The search index, with `--search`.
    search: Option<BuiltSearch>,
}

/// Where the search index's postings are kept (an internal file, never served).
pub const SEARCH_POSTINGS_PATH: &str = "/.bramble/search/postings";
/// Where the search index's page text is kept (an internal file, never served).
pub const SEARCH_TEXT_PATH: &str = "/.bramble/search/text";

impl Default for SiteImageWriter {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            segment_len: DEFAULT_SEGMENT_LEN,
            flags: SiteFlags::default(),
            redirects: Vec::new(),
            header_blocks: Vec::new(),
            search: None,
        }
    }
}

/// A `(offset, length)` reference into a region.
type Reference = (u32, u32);

/// Interns strings into the string region, deduplicating identical ones.
#[derive(Default)]
struct Strings<'f> {
    bytes: Vec<u8>,
    index: HashMap<&'f str, Reference>,
}

impl<'f> Strings<'f> {
    fn intern(&mut self, value: &'f str) -> Result<Reference, WriteError> {
        if let Some(&found) = self.index.get(value) {
            return Ok(found);
        }
        let reference = (to_u32(self.bytes.len())?, to_u32(value.len())?);
        self.bytes.extend_from_slice(value.as_bytes());
        self.index.insert(value, reference);
        Ok(reference)
    }
}

/// The distinct bodies of the site: identical bodies (the same file under two names, or a
/// variant equal to another file) are stored once.
#[derive(Default)]
struct Bodies<'f> {
    /// Each distinct non-empty body, in first-seen order, with its place once laid out.
    distinct: Vec<(&'f [u8], Option<u32>)>,
    /// Distinct bodies by length: identical bodies have equal lengths, and comparing the few
    /// candidates is much cheaper than hashing every byte of a large site.
    by_len: HashMap<usize, Vec<usize>>,
}

impl<'f> Bodies<'f> {
    /// The id of `value` (a new one if no equal body was seen), or `None` for an empty body.
    fn id(&mut self, value: &'f [u8]) -> Option<usize> {
        if value.is_empty() {
            return None;
        }
        let candidates = self.by_len.entry(value.len()).or_default();
        if let Some(&id) = candidates.iter().find(|&&id| self.distinct[id].0 == value) {
            return Some(id);
        }
        let id = self.distinct.len();
        self.distinct.push((value, None));
        candidates.push(id);
        Some(id)
    }
}

/// Where the next body goes in the body region.
struct Cursor {
    at: u64,
    segment_len: u64,
}

impl Cursor {
    /// Places a body of `len` bytes at the cursor (block-aligned) and returns its offset.
    fn place(&mut self, len: usize) -> u64 {
        let start = self.at;
        self.at = start + (len as u64).next_multiple_of(BODY_ALIGN as u64);
        start
    }

    /// Moves to the next segment boundary unless `footprint` bytes fit in the current segment.
    fn keep_within_segment(&mut self, footprint: u64) {
        let used = self.at % self.segment_len;
        if used != 0 && used + footprint > self.segment_len {
            self.at = self.at.next_multiple_of(self.segment_len);
        }
    }
}

fn to_u32(value: usize) -> Result<u32, WriteError> {
    u32::try_from(value).map_err(|_| WriteError::TooLarge {
        bytes: value as u64,
    })
}

fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_reference(bytes: &mut [u8], offset: usize, (start, len): Reference) {
    put_u32(bytes, offset, start);
    put_u32(bytes, offset + 4, len);
}

/// Where one variant goes in a record: its flag bit and its body, ETag and CRC fields.
struct VariantFields {
    flag: u32,
    body: usize,
    etag: usize,
    crc: usize,
}

/// The variants of a file with their record fields, present ones only.
fn variants(file: &FileSpec) -> impl Iterator<Item = (&VariantSpec, VariantFields)> {
    [
        (
            Some(&file.identity),
            VariantFields {
                flag: 0,
                body: entry::IDENTITY_BODY,
                etag: entry::IDENTITY_ETAG,
                crc: entry::IDENTITY_CRC,
            },
        ),
        (
            file.gzip.as_ref(),
            VariantFields {
                flag: FLAG_GZIP,
                body: entry::GZIP_BODY,
                etag: entry::GZIP_ETAG,
                crc: entry::GZIP_CRC,
            },
        ),
        (
            file.brotli.as_ref(),
            VariantFields {
                flag: FLAG_BROTLI,
                body: entry::BROTLI_BODY,
                etag: entry::BROTLI_ETAG,
                crc: entry::BROTLI_CRC,
            },
        ),
    ]
    .into_iter()
    .filter_map(|(variant, fields)| variant.map(|v| (v, fields)))
}

impl SiteImageWriter {
    /// An empty writer with the default segment length.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer whose image cuts its body region into segments of `segment_len` bytes
    /// (a power of two from [`MIN_SEGMENT_LEN`] to [`MAX_SEGMENT_LEN`]).
    pub fn with_segment_len(segment_len: u32) -> Result<Self, WriteError> {
        if !segment_len.is_power_of_two()
            || !(MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&segment_len)
        {
            return Err(WriteError::BadSegmentLength(segment_len));
        }
        Ok(Self {
            segment_len,
            ..Self::default()
        })
    }

    /// Sets the site flags (see [`SiteFlags`]; unknown bits are refused by the reader).
    pub fn set_flags(&mut self, flags: SiteFlags) {
        self.flags = SiteFlags(flags.0 & SiteFlags::ALL);
    }

    /// Sets the redirect rules, in `_redirects` order, after checking each as the reader will.
    pub fn set_redirects(&mut self, rules: Vec<RedirectSpec>) -> Result<(), WriteError> {
        let mut dynamic = 0;
        for rule in &rules {
            if crate::rules::check_redirect(rule).map_err(WriteError::InvalidRule)?
                == PatternKind::Dynamic
            {
                dynamic += 1;
            }
        }
        if rules.len() > rules::MAX_REDIRECTS {
            return Err(WriteError::TooManyRules("redirect rules"));
        }
        if dynamic > rules::MAX_DYNAMIC_REDIRECTS {
            return Err(WriteError::TooManyRules("dynamic redirect rules"));
        }
        self.redirects = rules;
        Ok(())
    }

    /// Sets the search index (see [`crate::search::build`]); its pages must be files added.
    pub fn set_search(&mut self, search: BuiltSearch) -> Result<(), WriteError> {
        if search.docs.len() > crate::search::MAX_DOCS {
            return Err(WriteError::TooManyRules("pages in the search index"));
        }
        if search.pieces.len() > crate::search::MAX_PIECES {
            return Err(WriteError::TooManyRules("search template pieces"));
        }
        self.search = Some(search);
        Ok(())
    }

    /// Sets the header blocks, in `_headers` order, after checking each as the reader will.
    pub fn set_header_blocks(&mut self, blocks: Vec<HeaderBlockSpec>) -> Result<(), WriteError> {
        for block in &blocks {
            crate::rules::check_block(block).map_err(WriteError::InvalidRule)?;
        }
        if blocks.len() > rules::MAX_HEADER_BLOCKS {
            return Err(WriteError::TooManyRules("header blocks"));
        }
        if blocks.iter().map(|b| b.entries.len()).sum::<usize>() > rules::MAX_HEADER_ENTRIES {
            return Err(WriteError::TooManyRules("header lines"));
        }
        self.header_blocks = blocks;
        Ok(())
    }

    /// Number of files added.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when no file has been added.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Adds a file after checking its path, header values and ETags (duplicates are found by
    /// [`SiteImageWriter::finish`]).
    pub fn add(&mut self, file: FileSpec) -> Result<(), WriteError> {
        if !crate::reader::is_file_path(file.path.as_bytes()) {
            return Err(WriteError::InvalidPath(file.path));
        }
        for (field, value) in [
            ("Content-Type", &file.content_type),
            ("Cache-Control", &file.cache_control),
            ("Last-Modified", &file.last_modified_http),
        ] {
            if !crate::reader::is_header_value(value.as_bytes()) {
                return Err(WriteError::InvalidHeaderValue {
                    path: file.path,
                    field,
                });
            }
        }
        if variants(&file).any(|(v, _)| !crate::reader::is_strong_etag(v.etag.as_bytes())) {
            return Err(WriteError::InvalidEtag { path: file.path });
        }
        self.files.push(file);
        Ok(())
    }

    /// Sorts the files by path, lays out the image and returns its bytes (checksums included).
    ///
    /// The index (header, table, segment checksums, strings) comes first, so that a reader
    /// needs only its first bytes to start serving. Bodies follow on 512-byte boundaries:
    /// first the small files in path order, each file's variants side by side and never split
    /// across a segment boundary when they fit in one (so one segment read brings a page with
    /// all its encodings, and its neighbours), then the large files.
    pub fn finish(mut self) -> Result<Vec<u8>, WriteError> {
        if let Some(search) = &self.search {
            for (path, body) in [
                (SEARCH_POSTINGS_PATH, &search.postings),
                (SEARCH_TEXT_PATH, &search.text),
            ] {
                self.files.push(FileSpec {
                    path: path.into(),
                    content_type: "application/octet-stream".into(),
                    cache_control: "no-store".into(),
                    last_modified: 0,
                    last_modified_http: http_date(0),
                    identity: VariantSpec {
                        body: body.clone(),
                        etag: std::format!("\"{:08x}\"", crc32fast::hash(body)),
                    },
                    gzip: None,
                    brotli: None,
                });
            }
        }
        self.files.sort_by(|a, b| a.path.cmp(&b.path));
        if let Some(pair) = self
            .files
            .windows(2)
            .find(|pair| pair[0].path == pair[1].path)
        {
            return Err(WriteError::DuplicatePath(pair[0].path.clone()));
        }
        let segment_len = u64::from(self.segment_len);

        // Distinct bodies per file, then their places.
        let mut bodies = Bodies::default();
        let file_bodies: Vec<Vec<Option<usize>>> = self
            .files
            .iter()
            .map(|file| variants(file).map(|(v, _)| bodies.id(&v.body)).collect())
            .collect();
        let mut cursor = Cursor { at: 0, segment_len };
        let unplaced = |bodies: &Bodies, ids: &[Option<usize>]| -> Vec<usize> {
            let mut out: Vec<usize> = Vec::new();
            for id in ids.iter().flatten() {
                if bodies.distinct[*id].1.is_none() && !out.contains(id) {
                    out.push(*id);
                }
            }
            out
        };
        for small_pass in [true, false] {
            for ids in &file_bodies {
                let group = unplaced(&bodies, ids);
                let footprint: u64 = group
                    .iter()
                    .map(|&id| (bodies.distinct[id].0.len() as u64).next_multiple_of(512))
                    .sum();
                if group.is_empty() || (small_pass && footprint > segment_len) {
                    continue;
                }
                if small_pass {
                    cursor.keep_within_segment(footprint);
                }
                for id in group {
                    let start = cursor.place(bodies.distinct[id].0.len());
                    let start = u32::try_from(start)
                        .map_err(|_| WriteError::TooLarge { bytes: cursor.at })?;
                    bodies.distinct[id].1 = Some(start);
                }
            }
        }
        let bodies_len = bodies
            .distinct
            .iter()
            .map(|(body, at)| at.map_or(0, |at| u64::from(at) + body.len() as u64))
            .max()
            .unwrap_or(0);

        // The index: table, segment table, strings.
        let mut strings = Strings::default();
        let mut table = vec![0u8; self.files.len() * ENTRY_LEN];
        for ((file, ids), record) in self
            .files
            .iter()
            .zip(&file_bodies)
            .zip(table.chunks_exact_mut(ENTRY_LEN))
        {
            put_reference(record, entry::PATH, strings.intern(&file.path)?);
            put_reference(
                record,
                entry::CONTENT_TYPE,
                strings.intern(&file.content_type)?,
            );
            put_reference(
                record,
                entry::CACHE_CONTROL,
                strings.intern(&file.cache_control)?,
            );
            put_reference(
                record,
                entry::LAST_MODIFIED_HTTP,
                strings.intern(&file.last_modified_http)?,
            );
            record[entry::LAST_MODIFIED..entry::LAST_MODIFIED + 8]
                .copy_from_slice(&file.last_modified.to_le_bytes());
            let mut flags = 0;
            for ((variant, fields), id) in variants(file).zip(ids) {
                flags |= fields.flag;
                let reference = match id {
                    Some(id) => (
                        bodies.distinct[*id].1.unwrap_or(0),
                        to_u32(variant.body.len())?,
                    ),
                    None => (0, 0),
                };
                put_reference(record, fields.body, reference);
                put_reference(record, fields.etag, strings.intern(&variant.etag)?);
                put_u32(record, fields.crc, crc32fast::hash(&variant.body));
            }
            if self.search.is_some()
                && (file.path == SEARCH_POSTINGS_PATH || file.path == SEARCH_TEXT_PATH)
            {
                flags |= crate::FLAG_INTERNAL;
            }
            put_u32(record, entry::FLAGS, flags);
        }
        let redirects = rules::encode_redirects(&self.redirects, |s| strings.intern(s))?;
        let headers = rules::encode_headers(&self.header_blocks, |s| strings.intern(s))?;
        let headers = if self.header_blocks.is_empty() {
            Vec::new()
        } else {
            headers
        };
        let redirects = if self.redirects.is_empty() {
            Vec::new()
        } else {
            redirects
        };
        let search = match &self.search {
            Some(search) => {
                let position = |path: &str| {
                    self.files
                        .binary_search_by(|file| file.path.as_str().cmp(path))
                        .map(|i| i as u32)
                        .map_err(|_| {
                            WriteError::InvalidRule(std::format!(
                                "search page {path} is not a file of the site"
                            ))
                        })
                };
                encode_search(
                    search,
                    position(SEARCH_POSTINGS_PATH)?,
                    position(SEARCH_TEXT_PATH)?,
                    |path| position(path),
                    |s| strings.intern(s),
                )?
            }
            None => Vec::new(),
        };
        strings
            .bytes
            .resize(strings.bytes.len().next_multiple_of(ALIGN), 0);
        let segment_count = bodies_len.div_ceil(segment_len) as usize;
        let table_offset = HEADER_LEN;
        let segments_offset = table_offset + table.len();
        let strings_offset = (segments_offset + segment_count * 4).next_multiple_of(ALIGN);
        let redirects_offset = strings_offset + strings.bytes.len();
        let headers_offset = (redirects_offset + redirects.len()).next_multiple_of(ALIGN);
        let search_offset = (headers_offset + headers.len()).next_multiple_of(ALIGN);
        let index_len = search_offset + search.len();
        let bodies_offset = index_len.next_multiple_of(BODY_ALIGN);
        let total = bodies_offset as u64 + bodies_len;
        if total > u64::from(u32::MAX) {
            return Err(WriteError::TooLarge { bytes: total });
        }

        let mut image = vec![0u8; total as usize];
        for (body, at) in &bodies.distinct {
            if let Some(at) = at {
                let start = bodies_offset + *at as usize;
                image[start..start + body.len()].copy_from_slice(body);
            }
        }
        // Segment checksums with crc32fast (the same CRC-32 as the reader's, with carry-less
        // multiply on the host: a large image is checksummed in milliseconds).
        let mut segment_table = Vec::with_capacity(segment_count * 4);
        for segment in image[bodies_offset..].chunks(self.segment_len as usize) {
            segment_table.extend_from_slice(&crc32fast::hash(segment).to_le_bytes());
        }
        image[..MAGIC.len()].copy_from_slice(&MAGIC);
        put_u32(&mut image, header::VERSION, VERSION);
        put_u32(&mut image, header::HEADER_LEN, HEADER_LEN as u32);
        put_u32(&mut image, header::INDEX_LEN, index_len as u32);
        put_u32(&mut image, header::FILE_COUNT, to_u32(self.files.len())?);
        put_u32(&mut image, header::ENTRY_LEN, ENTRY_LEN as u32);
        put_u32(&mut image, header::TABLE_OFFSET, table_offset as u32);
        put_u32(&mut image, header::SEGMENTS_OFFSET, segments_offset as u32);
        put_u32(&mut image, header::STRINGS_OFFSET, strings_offset as u32);
        put_u32(&mut image, header::STRINGS_LEN, strings.bytes.len() as u32);
        put_u32(&mut image, header::BODIES_OFFSET, bodies_offset as u32);
        put_u32(&mut image, header::BODIES_LEN, bodies_len as u32);
        put_u32(&mut image, header::SEGMENT_LEN, self.segment_len);
        put_u32(&mut image, header::IMAGE_LEN, total as u32);
        image[table_offset..segments_offset].copy_from_slice(&table);
        image[segments_offset..segments_offset + segment_table.len()]
            .copy_from_slice(&segment_table);
        image[strings_offset..redirects_offset].copy_from_slice(&strings.bytes);
        put_u32(&mut image, header::SITE_FLAGS, self.flags.0);
        for (field, offset, section) in [
            (header::REDIRECTS, redirects_offset, &redirects),
            (header::HEADERS, headers_offset, &headers),
            (header::SEARCH, search_offset, &search),
        ] {
            if !section.is_empty() {
                put_u32(&mut image, field, offset as u32);
                put_u32(&mut image, field + 4, to_u32(section.len())?);
                image[offset..offset + section.len()].copy_from_slice(section);
            }
        }
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&image[..header::CHECKSUM]);
        hasher.update(&[0; 4]);
        hasher.update(&image[header::CHECKSUM + 4..index_len]);
        put_u32(&mut image, header::CHECKSUM, hasher.finalize());
        Ok(image)
    }
}

/// Encodes the search section (layout in FORMAT.md).
fn encode_search<'s>(
    search: &'s BuiltSearch,
    postings_file: u32,
    text_file: u32,
    position: impl Fn(&str) -> Result<u32, WriteError>,
    mut intern: impl FnMut(&'s str) -> Result<Reference, WriteError>,
) -> Result<Vec<u8>, WriteError> {
    use crate::search::SEARCH_ENGLISH;
    let mut out = Vec::new();
    let push = |out: &mut Vec<u8>, value: u32| out.extend_from_slice(&value.to_le_bytes());
    push(&mut out, to_u32(search.docs.len())?);
    push(&mut out, to_u32(search.terms.len())?);
    push(&mut out, if search.english { SEARCH_ENGLISH } else { 0 });
    push(&mut out, postings_file);
    push(&mut out, text_file);
    push(&mut out, to_u32(search.pieces.len())?);
    push(&mut out, 0);
    push(&mut out, 0);
    for (path, title, text_offset, text_len) in &search.docs {
        push(&mut out, position(path)?);
        let (offset, len) = intern(title)?;
        push(&mut out, offset);
        push(&mut out, len);
        push(&mut out, *text_offset);
        push(&mut out, *text_len);
        push(&mut out, 0);
    }
    for (term, offset, df) in &search.terms {
        let (at, len) = intern(term)?;
        push(&mut out, at);
        push(&mut out, len);
        push(&mut out, *offset);
        push(&mut out, *df);
    }
    for (kind, text) in &search.pieces {
        push(&mut out, *kind);
        push(&mut out, 0);
        let (offset, len) = if *kind == 0 { intern(text)? } else { (0, 0) };
        push(&mut out, offset);
        push(&mut out, len);
    }
    Ok(out)
}

/// Formats Unix seconds as an IMF-fixdate (RFC 9110 section 5.6.7), e.g.
/// `Sun, 06 Nov 1994 08:49:37 GMT`. Years past 9999 are clamped to the last second of 9999.
pub fn http_date(unix_seconds: u64) -> String {
    const MAX: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let time = UtcDateTime::from_unix_seconds(unix_seconds.min(MAX));
    std::format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        time.weekday_abbreviation(),
        time.date.day,
        time.month_abbreviation(),
        time.date.year,
        time.hour,
        time.minute,
        time.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates() {
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(http_date(1_709_251_199), "Thu, 29 Feb 2024 23:59:59 GMT");
        assert_eq!(http_date(4_102_444_800), "Fri, 01 Jan 2100 00:00:00 GMT");
        assert_eq!(http_date(u64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
    }
}
