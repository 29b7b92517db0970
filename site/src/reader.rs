//! The zero-copy site-image reader: `SiteIndex::new_checked` validates an index once (and
//! `SiteImage::new_checked` a whole image in RAM), accessors never fail.

use core::cmp::Ordering;
use core::fmt;

use crate::body::{Body, BodyRequest, BodySource, BodyStatus};
use crate::bytes::{read_u32, read_u64, reference};
use crate::rules::{HeaderRules, Redirects, SectionError};
use crate::search::{SearchError, SearchIndex};
use crate::{
    ALIGN, BODY_ALIGN, ENTRY_LEN, FLAG_BROTLI, FLAG_GZIP, FLAG_INTERNAL, HEADER_LEN, MAGIC,
    MAX_SEGMENT_LEN, MIN_SEGMENT_LEN, VERSION, entry, header,
};

/// Every way a byte string can fail to be a valid site image (or index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// Shorter than the fixed 64-byte header.
    TooShort {
        /// The length of the bytes given.
        len: usize,
    },
    /// The first eight bytes are not [`MAGIC`](crate::MAGIC): not a site image at all.
    BadMagic,
    /// A site image of a format version this reader does not know.
    UnsupportedVersion {
        /// The version found in the header.
        found: u32,
    },
    /// Header length, record length, segment length or the index and image lengths are not
    /// what this version allows.
    BadHeader,
    /// Fewer bytes than the header says the index (or, for a whole image, the image) has:
    /// typically a truncated file.
    LengthMismatch {
        /// The length recorded in the header.
        declared: u32,
        /// The number of bytes given.
        actual: usize,
    },
    /// The CRC-32 of the index does not match the one stored in the header (corruption).
    ChecksumMismatch {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum computed over the bytes.
        computed: u32,
    },
    /// A body segment's CRC-32 does not match the one stored in the index (corruption in the
    /// body region).
    SegmentChecksumMismatch {
        /// Number of the segment, from the start of the body region.
        segment: u32,
        /// The checksum stored in the index.
        stored: u32,
        /// The checksum computed over the segment.
        computed: u32,
    },
    /// The bytes between the index and the body region (padding to a block boundary) are not
    /// all zero.
    NonZeroPadding,
    /// A body of the record at `index` does not match the CRC-32 its record gives.
    BodyChecksumMismatch {
        /// Index of the record in the file table.
        index: usize,
    },
    /// The file table, segment table, string region or body region lies outside the index or
    /// image, overlaps another region, is out of order or is misaligned.
    RegionOutOfBounds,
    /// A string or body reference of the record at `index` points outside its region.
    EntryOutOfBounds {
        /// Index of the record in the file table.
        index: usize,
    },
    /// A body of the record at `index` does not start on a 512-byte boundary.
    MisalignedBody {
        /// Index of the record in the file table.
        index: usize,
    },
    /// A string of the record at `index` is not valid UTF-8.
    InvalidUtf8 {
        /// Index of the record in the file table.
        index: usize,
    },
    /// The path of the record at `index` is not a normalised absolute file path (it must
    /// start with `/`, have no empty, `.` or `..` segments, no trailing `/` and no control
    /// characters).
    BadPath {
        /// Index of the record in the file table.
        index: usize,
    },
    /// The path of the record at `index` is not strictly greater than the one before it
    /// (the table must be sorted by path bytes with no duplicates).
    UnsortedPaths {
        /// Index of the record in the file table.
        index: usize,
    },
    /// A header value of the record at `index` (content type, cache control, Last-Modified
    /// text or an ETag) holds characters that are not allowed in an HTTP header, or an ETag
    /// is not a quoted strong entity tag.
    BadHeaderValue {
        /// Index of the record in the file table.
        index: usize,
    },
    /// The record at `index` has unknown flag bits, non-zero reserved bytes, or references
    /// for a variant its flags say is absent.
    BadFlags {
        /// Index of the record in the file table.
        index: usize,
    },
    /// The site flags have unknown bits, or reserved header bytes are not zero.
    BadSiteFlags,
    /// A rules section (`"redirects"` or `"headers"`) lies outside the index, overlaps
    /// another region, or is misaligned.
    SectionOutOfBounds {
        /// Which section.
        section: &'static str,
    },
    /// A rules section is malformed: counts, lengths, or rule `index` (see
    /// [`SectionError`](crate::rules::SectionError)).
    BadSection {
        /// Which section.
        section: &'static str,
        /// The rule or block at fault, if one is.
        index: Option<usize>,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FormatError::TooShort { len } => {
                write!(
                    f,
                    "site image too short: {len} bytes, the header alone is {HEADER_LEN}"
                )
            }
            FormatError::BadMagic => f.write_str("not a site image (bad magic)"),
            FormatError::UnsupportedVersion { found } => write!(
                f,
                "site image format version {found}, this build reads version {VERSION} \
                 (pack the site again with this version's bramble)"
            ),
            FormatError::BadHeader => f.write_str("site image header malformed"),
            FormatError::LengthMismatch { declared, actual } => write!(
                f,
                "site image is {actual} bytes but its header says {declared} (truncated?)"
            ),
            FormatError::ChecksumMismatch { stored, computed } => write!(
                f,
                "site image checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            ),
            FormatError::SegmentChecksumMismatch {
                segment,
                stored,
                computed,
            } => write!(
                f,
                "site image body segment {segment} checksum mismatch: stored {stored:#010x}, \
                 computed {computed:#010x}"
            ),
            FormatError::BodyChecksumMismatch { index } => {
                write!(f, "site image file #{index}: body checksum mismatch")
            }
            FormatError::NonZeroPadding => {
                f.write_str("site image padding before the bodies is not zero")
            }
            FormatError::RegionOutOfBounds => f.write_str("site image region out of bounds"),
            FormatError::EntryOutOfBounds { index } => {
                write!(f, "site image file #{index}: reference out of bounds")
            }
            FormatError::MisalignedBody { index } => {
                write!(
                    f,
                    "site image file #{index}: body not on a {BODY_ALIGN}-byte boundary"
                )
            }
            FormatError::InvalidUtf8 { index } => {
                write!(f, "site image file #{index}: string is not UTF-8")
            }
            FormatError::BadPath { index } => write!(f, "site image file #{index}: bad path"),
            FormatError::UnsortedPaths { index } => {
                write!(
                    f,
                    "site image file #{index}: paths not sorted or duplicated"
                )
            }
            FormatError::BadHeaderValue { index } => {
                write!(f, "site image file #{index}: invalid HTTP header value")
            }
            FormatError::BadFlags { index } => {
                write!(f, "site image file #{index}: bad flags or reserved bytes")
            }
            FormatError::BadSiteFlags => {
                f.write_str("site image header: unknown site flags or reserved bytes")
            }
            FormatError::SectionOutOfBounds { section } => {
                write!(f, "site image {section} section out of bounds")
            }
            FormatError::BadSection {
                section,
                index: Some(index),
            } => write!(f, "site image {section} section: rule #{index} is invalid"),
            FormatError::BadSection {
                section,
                index: None,
            } => write!(f, "site image {section} section is malformed"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FormatError {}

/// A validated, zero-copy view over the index of a site image: the header, the file table,
/// the segment checksums and the strings. The bodies are not part of it; a [`Body`] says
/// where each lies.
#[derive(Clone, Copy, Debug)]
pub struct SiteIndex<'a> {
    /// The index bytes (the first `index_len` bytes of the image).
    bytes: &'a [u8],
    /// The file table: `file_count` records of [`ENTRY_LEN`] bytes.
    table: &'a [u8],
    /// The segment table: one little-endian CRC-32 per body segment.
    segments: &'a [u8],
    /// The string region.
    strings: &'a [u8],
    /// Number of records in `table`.
    file_count: usize,
    /// The index checksum stored in (and verified against) the header.
    checksum: u32,
    /// Image offset of the body region.
    bodies_offset: u32,
    /// Length of the body region.
    bodies_len: u32,
    /// Length of every body segment but possibly the last.
    segment_len: u32,
    /// Length of the whole image.
    image_len: u32,
    /// Index of `/404.html`, if the site has one.
    not_found: Option<usize>,
    /// Site-wide behaviour chosen at pack time.
    flags: SiteFlags,
    /// The compiled `_redirects` rules.
    redirects: Redirects<'a>,
    /// The compiled `_headers` blocks.
    headers: HeaderRules<'a>,
    /// The search index, when the site was packed with `--search`.
    search: Option<SearchIndex<'a>>,
    /// Most `/` in the path of any `404.html` of the site (0: none), so that looking for the
    /// nearest one up the tree tries at most this many folders.
    not_found_depth: usize,
}

/// Site-wide behaviour chosen at pack time (the header's site flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteFlags(pub u32);

impl SiteFlags {
    /// `--clean-urls`: `/about.html` answers 308 to `/about` (and `/dir/index.html` to
    /// `/dir/`) wherever the short form serves the same file.
    pub const CLEAN_URLS: u32 = 1;
    /// `--spa-fallback`: a miss with no rule and no nearer 404.html serves `/index.html`
    /// with 200.
    pub const SPA_FALLBACK: u32 = 2;
    /// `--no-security-headers`: the engine's default security headers are not sent.
    pub const NO_SECURITY_HEADERS: u32 = 4;
    /// Every flag this version knows.
    pub const ALL: u32 = Self::CLEAN_URLS | Self::SPA_FALLBACK | Self::NO_SECURITY_HEADERS;

    /// Is `flag` set?
    pub fn has(&self, flag: u32) -> bool {
        self.0 & flag != 0
    }
}

/// What a request path resolves to.
#[derive(Clone, Copy, Debug)]
pub enum Resolved<'a> {
    /// A file to serve (for `/dir/`, the directory's `index.html`).
    File(FileEntry<'a>),
    /// The path names a directory without its trailing slash (`/dir` where `/dir/index.html`
    /// exists): redirect to the path with `/` appended.
    AddSlash,
    /// Nothing at this path; serve [`SiteIndex::not_found_page`] with status 404 if present.
    NotFound,
}

/// One file of the site with everything needed to answer a request for it.
#[derive(Clone, Copy, Debug)]
pub struct FileEntry<'a> {
    /// Position of the file in the path-sorted table.
    pub index: u32,
    /// URL path of the file, e.g. `/dir/index.html`.
    pub path: &'a str,
    /// Value for `Content-Type`, e.g. `text/html; charset=utf-8`.
    pub content_type: &'a str,
    /// Value for `Cache-Control`, chosen by the packer's cache policy.
    pub cache_control: &'a str,
    /// Last modification time, Unix seconds.
    pub last_modified: u64,
    /// The same time as an IMF-fixdate for `Last-Modified`, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    pub last_modified_http: &'a str,
    /// The uncompressed body.
    pub identity: Variant<'a>,
    /// The gzip-encoded body, present only where smaller than the identity body.
    pub gzip: Option<Variant<'a>>,
    /// The brotli-encoded body, present only where smaller than the identity body.
    pub brotli: Option<Variant<'a>>,
}

/// One encoding of a file's body.
#[derive(Clone, Copy, Debug)]
pub struct Variant<'a> {
    /// Where the bytes to send lie in the body region.
    pub body: Body,
    /// The complete quoted strong ETag of this encoding, e.g. `"9f2c1a0b4d5e6f70-br"`.
    pub etag: &'a str,
}

/// Is `value` safe to put in an HTTP header: visible ASCII and spaces only, not empty.
pub(crate) fn is_header_value(value: &[u8]) -> bool {
    !value.is_empty() && value.iter().all(|&b| (0x20..0x7F).contains(&b))
}

/// Is `value` a quoted strong entity tag (`"..."`, no `W/`, no inner quotes)?
pub(crate) fn is_strong_etag(value: &[u8]) -> bool {
    match value {
        [b'"', inner @ .., b'"'] => inner
            .iter()
            .all(|&b| b == 0x21 || (0x23..0x7F).contains(&b)),
        _ => false,
    }
}

/// Is `path` a normalised absolute file path as FORMAT.md defines it?
pub(crate) fn is_file_path(path: &[u8]) -> bool {
    let Some((b'/', rest)) = path.split_first() else {
        return false;
    };
    if path.iter().any(|&b| b < 0x20 || b == 0x7F) {
        return false;
    }
    rest.split(|&b| b == b'/')
        .all(|segment| !segment.is_empty() && segment != b"." && segment != b"..")
}

/// Compares `stored` with the concatenation `first ++ second` without building it.
fn compare_concat(stored: &[u8], first: &[u8], second: &[u8]) -> Ordering {
    let split = first.len().min(stored.len());
    let (head, tail) = stored.split_at(split);
    let (first_head, _) = first.split_at(split);
    match head.cmp(first_head) {
        Ordering::Equal => {}
        other => return other,
    }
    if stored.len() < first.len() {
        return Ordering::Less;
    }
    tail.cmp(second)
}

/// The header fields a reader needs before it has the rest of the index.
struct Header {
    index_len: u32,
    image_len: u32,
}

/// Checks magic, version and the fixed header constants of `bytes` (at least the header).
fn check_header(bytes: &[u8]) -> Result<Header, FormatError> {
    if bytes.len() < HEADER_LEN {
        return Err(FormatError::TooShort { len: bytes.len() });
    }
    if bytes[..MAGIC.len()] != MAGIC {
        return Err(FormatError::BadMagic);
    }
    let version = read_u32(bytes, header::VERSION);
    if version != VERSION {
        return Err(FormatError::UnsupportedVersion { found: version });
    }
    let segment_len = read_u32(bytes, header::SEGMENT_LEN);
    let index_len = read_u32(bytes, header::INDEX_LEN);
    let image_len = read_u32(bytes, header::IMAGE_LEN);
    if read_u32(bytes, header::HEADER_LEN) as usize != HEADER_LEN
        || read_u32(bytes, header::ENTRY_LEN) as usize != ENTRY_LEN
        || !segment_len.is_power_of_two()
        || !(MIN_SEGMENT_LEN..=MAX_SEGMENT_LEN).contains(&segment_len)
        || (index_len as usize) < HEADER_LEN
        || image_len < index_len
    {
        return Err(FormatError::BadHeader);
    }
    Ok(Header {
        index_len,
        image_len,
    })
}

impl<'a> SiteIndex<'a> {
    /// How many bytes from the start of the image the index takes, read from the header
    /// (`header` holds at least the first [`HEADER_LEN`] bytes). Checks the magic, version and
    /// header constants, so a foreign or truncated file gets a precise error before more of it
    /// is read.
    pub fn index_len(header: &[u8]) -> Result<usize, FormatError> {
        let header = check_header(header)?;
        usize::try_from(header.index_len).map_err(|_| FormatError::BadHeader)
    }

    /// Validates magic, version, the index checksum, every region, every table offset, length
    /// and UTF-8 string, header-value safety and the path order, once. `bytes` starts with the
    /// index; anything after it (bodies, for a whole image) is ignored.
    pub fn new_checked(bytes: &'a [u8]) -> Result<SiteIndex<'a>, FormatError> {
        let header = check_header(bytes)?;
        let index_len = header.index_len as usize;
        let Some(bytes) = bytes.get(..index_len) else {
            return Err(FormatError::LengthMismatch {
                declared: header.index_len,
                actual: bytes.len(),
            });
        };
        let stored = read_u32(bytes, header::CHECKSUM);
        let computed = crate::crc32::index_checksum(bytes);
        if stored != computed {
            return Err(FormatError::ChecksumMismatch { stored, computed });
        }

        let file_count = read_u32(bytes, header::FILE_COUNT) as usize;
        let table_len = file_count
            .checked_mul(ENTRY_LEN)
            .ok_or(FormatError::RegionOutOfBounds)?;
        let bodies_offset = read_u32(bytes, header::BODIES_OFFSET);
        let bodies_len = read_u32(bytes, header::BODIES_LEN);
        let segment_len = read_u32(bytes, header::SEGMENT_LEN);
        let segment_count = bodies_len.div_ceil(segment_len) as usize;
        let segments_len = segment_count
            .checked_mul(4)
            .ok_or(FormatError::RegionOutOfBounds)?;
        let region = |field: usize, len: usize, not_before: usize| -> Option<(usize, usize)> {
            let offset = read_u32(bytes, field) as usize;
            let end = offset.checked_add(len)?;
            (offset >= not_before && offset.is_multiple_of(ALIGN) && end <= index_len)
                .then_some((offset, end))
        };
        let (table_start, table_end) = region(header::TABLE_OFFSET, table_len, HEADER_LEN)
            .ok_or(FormatError::RegionOutOfBounds)?;
        let (segments_start, segments_end) =
            region(header::SEGMENTS_OFFSET, segments_len, table_end)
                .ok_or(FormatError::RegionOutOfBounds)?;
        let strings_len = read_u32(bytes, header::STRINGS_LEN) as usize;
        let (strings_start, strings_end) =
            region(header::STRINGS_OFFSET, strings_len, segments_end)
                .ok_or(FormatError::RegionOutOfBounds)?;
        // The body region follows the index, on a block boundary, and ends the image.
        if (bodies_offset as usize) < index_len
            || !(bodies_offset as usize).is_multiple_of(BODY_ALIGN)
            || bodies_offset.checked_add(bodies_len) != Some(header.image_len)
        {
            return Err(FormatError::RegionOutOfBounds);
        }

        let index = SiteIndex {
            bytes,
            table: &bytes[table_start..table_end],
            segments: &bytes[segments_start..segments_end],
            strings: &bytes[strings_start..strings_end],
            file_count,
            checksum: stored,
            bodies_offset,
            bodies_len,
            segment_len,
            image_len: header.image_len,
            not_found: None,
            flags: SiteFlags(read_u32(bytes, header::SITE_FLAGS)),
            redirects: Redirects::EMPTY,
            headers: HeaderRules::EMPTY,
            search: None,
            not_found_depth: 0,
        };
        if index.flags.0 & !SiteFlags::ALL != 0
            || read_u32(bytes, header::RESERVED) != 0
            || bytes[header::RESERVED_TAIL..HEADER_LEN]
                .iter()
                .any(|&b| b != 0)
        {
            return Err(FormatError::BadSiteFlags);
        }
        // The rules sections follow the string region, in this order, each 8-aligned.
        let mut not_before = strings_end;
        let mut section = |field: usize, name: &'static str| -> Result<&'a [u8], FormatError> {
            let offset = read_u32(bytes, field) as usize;
            let len = read_u32(bytes, field + 4) as usize;
            if offset == 0 && len == 0 {
                return Ok(&[]);
            }
            let end = offset.checked_add(len);
            match end {
                Some(end)
                    if offset >= not_before && offset.is_multiple_of(ALIGN) && end <= index_len =>
                {
                    not_before = end;
                    Ok(&bytes[offset..end])
                }
                _ => Err(FormatError::SectionOutOfBounds { section: name }),
            }
        };
        let redirects_bytes = section(header::REDIRECTS, "redirects")?;
        let headers_bytes = section(header::HEADERS, "headers")?;
        let search_bytes = section(header::SEARCH, "search")?;
        let strings = index.strings;
        let section_error = |section: &'static str| {
            move |error: SectionError| FormatError::BadSection {
                section,
                index: match error {
                    SectionError::Malformed => None,
                    SectionError::BadRule { index } => Some(index),
                },
            }
        };
        let redirects = if redirects_bytes.is_empty() {
            Redirects::EMPTY
        } else {
            Redirects::new_checked(redirects_bytes, strings).map_err(section_error("redirects"))?
        };
        let headers = if headers_bytes.is_empty() {
            HeaderRules::EMPTY
        } else {
            HeaderRules::new_checked(headers_bytes, strings).map_err(section_error("headers"))?
        };
        let index = SiteIndex {
            redirects,
            headers,
            ..index
        };
        // The file records are checked before the search section, which names them.
        let mut previous_path: &[u8] = &[];
        let mut not_found_depth = 0;
        for (index_in_table, record) in index.table.chunks_exact(ENTRY_LEN).enumerate() {
            let path = index.check_record(index_in_table, record)?;
            if index_in_table > 0 && path <= previous_path {
                return Err(FormatError::UnsortedPaths {
                    index: index_in_table,
                });
            }
            if path.ends_with(b"/404.html") {
                let depth = path.iter().filter(|&&b| b == b'/').count();
                not_found_depth = not_found_depth.max(depth);
            }
            previous_path = path;
        }
        let search = if search_bytes.is_empty() {
            None
        } else {
            let internal_body = |file: u32| {
                let entry = index.entry(usize::try_from(file).ok()?)?;
                let flags = read_u32(index.record(entry.index as usize), entry::FLAGS);
                (flags & FLAG_INTERNAL != 0).then_some(entry.identity.body)
            };
            let page = |file: u32| {
                usize::try_from(file).is_ok_and(|i| {
                    i < index.file_count
                        && read_u32(index.record(i), entry::FLAGS) & FLAG_INTERNAL == 0
                })
            };
            let search = SearchIndex::new_checked(search_bytes, strings, internal_body, page)
                .map_err(|error| FormatError::BadSection {
                    section: "search",
                    index: match error {
                        SearchError::Malformed => None,
                        SearchError::BadDocument { index }
                        | SearchError::BadTerm { index }
                        | SearchError::BadPiece { index } => Some(index),
                    },
                })?;
            Some(search)
        };
        Ok(SiteIndex {
            not_found: index.find_index(crate::NOT_FOUND_PATH.as_bytes(), b""),
            not_found_depth,
            search,
            ..index
        })
    }

    /// Validates one table record and returns its path bytes.
    fn check_record(&self, index: usize, record: &'a [u8]) -> Result<&'a [u8], FormatError> {
        let out_of_bounds = FormatError::EntryOutOfBounds { index };
        let string = |field: usize| -> Result<&'a [u8], FormatError> {
            let range = reference(record, field, self.strings.len()).ok_or(out_of_bounds)?;
            let bytes = &self.strings[range];
            core::str::from_utf8(bytes).map_err(|_| FormatError::InvalidUtf8 { index })?;
            Ok(bytes)
        };
        let header_value = |field: usize| -> Result<(), FormatError> {
            if is_header_value(string(field)?) {
                Ok(())
            } else {
                Err(FormatError::BadHeaderValue { index })
            }
        };
        let path = string(entry::PATH)?;
        if !is_file_path(path) {
            return Err(FormatError::BadPath { index });
        }
        header_value(entry::CONTENT_TYPE)?;
        header_value(entry::CACHE_CONTROL)?;
        header_value(entry::LAST_MODIFIED_HTTP)?;

        let flags = read_u32(record, entry::FLAGS);
        if flags & !(FLAG_GZIP | FLAG_BROTLI | FLAG_INTERNAL) != 0
            || read_u32(record, entry::RESERVED) != 0
            || read_u32(record, entry::RESERVED_END) != 0
        {
            return Err(FormatError::BadFlags { index });
        }
        let variants = [
            (
                true,
                entry::IDENTITY_BODY,
                entry::IDENTITY_ETAG,
                entry::IDENTITY_CRC,
            ),
            (
                flags & FLAG_GZIP != 0,
                entry::GZIP_BODY,
                entry::GZIP_ETAG,
                entry::GZIP_CRC,
            ),
            (
                flags & FLAG_BROTLI != 0,
                entry::BROTLI_BODY,
                entry::BROTLI_ETAG,
                entry::BROTLI_CRC,
            ),
        ];
        for (present, body, etag, crc) in variants {
            if present {
                let range =
                    reference(record, body, self.bodies_len as usize).ok_or(out_of_bounds)?;
                if !range.start.is_multiple_of(BODY_ALIGN) {
                    return Err(FormatError::MisalignedBody { index });
                }
                if !is_strong_etag(string(etag)?) {
                    return Err(FormatError::BadHeaderValue { index });
                }
            } else if record[body..etag + 8].iter().any(|&b| b != 0) || read_u32(record, crc) != 0 {
                return Err(FormatError::BadFlags { index });
            }
        }
        Ok(path)
    }

    /// Number of files in the image.
    pub fn file_count(&self) -> usize {
        self.file_count
    }

    /// The index checksum (verified by [`SiteIndex::new_checked`]); the packer prints the same
    /// number.
    pub fn checksum(&self) -> u32 {
        self.checksum
    }

    /// Length of the index in bytes (what is read at boot).
    pub fn index_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Length of the whole image in bytes.
    pub fn image_len(&self) -> u32 {
        self.image_len
    }

    /// Image offset of the body region (a multiple of [`BODY_ALIGN`]).
    pub fn bodies_offset(&self) -> u32 {
        self.bodies_offset
    }

    /// Length of the body region in bytes.
    pub fn bodies_len(&self) -> u32 {
        self.bodies_len
    }

    /// Length of every body segment except possibly the last (a power of two).
    pub fn segment_len(&self) -> u32 {
        self.segment_len
    }

    /// Number of body segments.
    pub fn segment_count(&self) -> u32 {
        if self.segment_len.is_power_of_two() {
            // A shift and a mask (always, for a checked index): the Pi has no divider, and
            // the store asks this for every piece of every body it serves.
            let rest = self.bodies_len & (self.segment_len - 1);
            (self.bodies_len >> self.segment_len.trailing_zeros()) + u32::from(rest != 0)
        } else {
            self.bodies_len.div_ceil(self.segment_len.max(1))
        }
    }

    /// The segment that holds body-region offset `offset` (whether or not it exists): a
    /// shift for the power-of-two lengths a checked index has.
    pub fn segment_of(&self, offset: u32) -> u32 {
        if self.segment_len.is_power_of_two() {
            offset >> self.segment_len.trailing_zeros()
        } else {
            offset / self.segment_len.max(1)
        }
    }

    /// Body-region offset and length of segment `segment`, if it exists.
    pub fn segment(&self, segment: u32) -> Option<(u32, u32)> {
        if segment >= self.segment_count() {
            return None;
        }
        let start = segment.checked_mul(self.segment_len)?;
        let len = (self.bodies_len - start).min(self.segment_len);
        Some((start, len))
    }

    /// The stored CRC-32 of segment `segment`, if it exists.
    pub fn segment_checksum(&self, segment: u32) -> Option<u32> {
        let at = usize::try_from(segment).ok()?.checked_mul(4)?;
        self.segments
            .get(at..at.checked_add(4)?)
            .map(|bytes| read_u32(bytes, 0))
    }

    /// The raw bytes of the index.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Resolves a request path. `path` is already percent-decoded and dot-normalised by the
    /// HTTP engine and starts with `/`. `/dir/` answers with `/dir/index.html`; `/dir` where
    /// `/dir/index.html` exists (and no file `/dir` does) gives [`Resolved::AddSlash`].
    /// No allocation, O(log n).
    pub fn resolve(&self, path: &str) -> Resolved<'a> {
        let path = path.as_bytes();
        if path.first() != Some(&b'/') {
            return Resolved::NotFound;
        }
        let index = crate::INDEX_NAME.as_bytes();
        if path.ends_with(b"/") {
            return match self.find_index(path, index) {
                Some(i) => Resolved::File(self.entry_at(i)),
                None => Resolved::NotFound,
            };
        }
        if let Some(i) = self.find_index(path, b"") {
            return Resolved::File(self.entry_at(i));
        }
        if self.find_index(path, b"/index.html").is_some() {
            return Resolved::AddSlash;
        }
        Resolved::NotFound
    }

    /// The file at exactly `path` followed by `suffix` (`/about` and `.html`), without
    /// building the joined path.
    pub fn get_with_suffix(&self, path: &str, suffix: &str) -> Option<FileEntry<'a>> {
        self.find_index(path.as_bytes(), suffix.as_bytes())
            .map(|i| self.entry_at(i))
    }

    /// The file at exactly `path` (no directory-index resolution), if any.
    pub fn get(&self, path: &str) -> Option<FileEntry<'a>> {
        self.find_index(path.as_bytes(), b"")
            .map(|i| self.entry_at(i))
    }

    /// The site's `/404.html`, if present, to serve with status 404 for misses.
    pub fn not_found_page(&self) -> Option<FileEntry<'a>> {
        self.not_found.map(|i| self.entry_at(i))
    }

    /// The nearest `404.html` up the tree from `path` (a normalised request path): for
    /// `/a/b/c` the first of `/a/b/404.html`, `/a/404.html` and `/404.html` that exists.
    /// Tries no folder deeper than the deepest 404.html of the site.
    pub fn nearest_not_found_page(&self, path: &str) -> Option<FileEntry<'a>> {
        if self.not_found_depth == 0 {
            return None;
        }
        let bytes = path.as_bytes();
        // The folder of the path: up to its last '/'.
        let mut end = bytes.iter().rposition(|&b| b == b'/')?;
        let mut depth = bytes[..end].iter().filter(|&&b| b == b'/').count() + 1;
        loop {
            if depth <= self.not_found_depth
                && let Some(i) = self.find_index(&bytes[..end], b"/404.html")
            {
                return Some(self.entry_at(i));
            }
            if end == 0 {
                return None;
            }
            end = bytes[..end].iter().rposition(|&b| b == b'/')?;
            depth -= 1;
        }
    }

    /// Site-wide behaviour chosen at pack time.
    pub fn flags(&self) -> SiteFlags {
        self.flags
    }

    /// The compiled `_redirects` rules (empty when the site has none).
    pub fn redirects(&self) -> Redirects<'a> {
        self.redirects
    }

    /// The compiled `_headers` blocks (empty when the site has none).
    pub fn header_rules(&self) -> HeaderRules<'a> {
        self.headers
    }

    /// The search index, when the site was packed with `--search`.
    pub fn search(&self) -> Option<SearchIndex<'a>> {
        self.search
    }

    /// All files served at their paths, in path order (internal ones, such as the search
    /// index's bodies, left out).
    pub fn files(&self) -> impl Iterator<Item = FileEntry<'a>> + 'a {
        let index = *self;
        (0..self.file_count)
            .filter(move |&i| !index.is_internal(i))
            .map(move |i| index.entry_at(i))
    }

    /// Is record `index` internal (never served at its path)?
    fn is_internal(&self, index: usize) -> bool {
        read_u32(self.record(index), entry::FLAGS) & FLAG_INTERNAL != 0
    }

    /// The file at position `index` of the path-sorted table, if `index < file_count()`.
    pub fn entry(&self, index: usize) -> Option<FileEntry<'a>> {
        (index < self.file_count).then(|| self.entry_at(index))
    }

    /// The path of the file at position `index` (empty if there is none), for log lines.
    pub fn path(&self, index: u32) -> &'a str {
        match usize::try_from(index) {
            Ok(i) if i < self.file_count => self.string(self.record(i), entry::PATH),
            _ => "",
        }
    }

    /// Binary search for the record whose path equals `first ++ second` (internal records
    /// are never found).
    fn find_index(&self, first: &[u8], second: &[u8]) -> Option<usize> {
        let (mut low, mut high) = (0, self.file_count);
        while low < high {
            let middle = low + (high - low) / 2;
            match compare_concat(self.path_bytes(middle), first, second) {
                Ordering::Less => low = middle + 1,
                Ordering::Greater => high = middle,
                Ordering::Equal => return (!self.is_internal(middle)).then_some(middle),
            }
        }
        None
    }

    /// The record at `index` (all zeroes if out of range, which validation rules out).
    fn record(&self, index: usize) -> &'a [u8] {
        let start = index.wrapping_mul(ENTRY_LEN);
        self.table
            .get(start..start.wrapping_add(ENTRY_LEN))
            .unwrap_or(&[0; ENTRY_LEN])
    }

    /// The bytes of a string reference (empty if invalid, which validation rules out).
    fn string_bytes(&self, record: &[u8], field: usize) -> &'a [u8] {
        reference(record, field, self.strings.len())
            .and_then(|range| self.strings.get(range))
            .unwrap_or(&[])
    }

    /// A string reference as `&str` (validated UTF-8; empty if not, which cannot happen).
    fn string(&self, record: &[u8], field: usize) -> &'a str {
        core::str::from_utf8(self.string_bytes(record, field)).unwrap_or("")
    }

    /// The path bytes of the record at `index`.
    fn path_bytes(&self, index: usize) -> &'a [u8] {
        self.string_bytes(self.record(index), entry::PATH)
    }

    /// Builds the [`FileEntry`] of the record at `index`.
    fn entry_at(&self, index: usize) -> FileEntry<'a> {
        let record = self.record(index);
        let flags = read_u32(record, entry::FLAGS);
        // Validation bounds the table by a u32 count.
        let file = u32::try_from(index).unwrap_or(u32::MAX);
        let body = |field: usize, crc: usize| Body {
            file,
            offset: read_u32(record, field),
            len: read_u32(record, field + 4),
            crc: read_u32(record, crc),
        };
        let variant = |present: bool, field: usize, etag: usize, crc: usize| {
            present.then(|| Variant {
                body: body(field, crc),
                etag: self.string(record, etag),
            })
        };
        FileEntry {
            index: file,
            path: self.string(record, entry::PATH),
            content_type: self.string(record, entry::CONTENT_TYPE),
            cache_control: self.string(record, entry::CACHE_CONTROL),
            last_modified: read_u64(record, entry::LAST_MODIFIED),
            last_modified_http: self.string(record, entry::LAST_MODIFIED_HTTP),
            identity: Variant {
                body: body(entry::IDENTITY_BODY, entry::IDENTITY_CRC),
                etag: self.string(record, entry::IDENTITY_ETAG),
            },
            gzip: variant(
                flags & FLAG_GZIP != 0,
                entry::GZIP_BODY,
                entry::GZIP_ETAG,
                entry::GZIP_CRC,
            ),
            brotli: variant(
                flags & FLAG_BROTLI != 0,
                entry::BROTLI_BODY,
                entry::BROTLI_ETAG,
                entry::BROTLI_CRC,
            ),
        }
    }
}

/// A whole site image in RAM, index and bodies, with every segment verified: what the packer's
/// tests, `bramble serve` and the hosted build use. It is a [`BodySource`] that never waits.
#[derive(Clone, Copy, Debug)]
pub struct SiteImage<'a> {
    /// The whole image.
    bytes: &'a [u8],
    /// Its validated index.
    index: SiteIndex<'a>,
    /// The body region.
    bodies: &'a [u8],
}

impl<'a> SiteImage<'a> {
    /// Validates the index (see [`SiteIndex::new_checked`]), that `bytes` is exactly as long
    /// as the header says, and the checksum of every body segment.
    pub fn new_checked(bytes: &'a [u8]) -> Result<SiteImage<'a>, FormatError> {
        let index = SiteIndex::new_checked(bytes)?;
        if bytes.len() != index.image_len as usize {
            return Err(FormatError::LengthMismatch {
                declared: index.image_len,
                actual: bytes.len(),
            });
        }
        let start = index.bodies_offset as usize;
        let padding = bytes.get(index.index_bytes()..start).unwrap_or(&[]);
        if padding.iter().any(|&b| b != 0) {
            return Err(FormatError::NonZeroPadding);
        }
        let bodies = bytes
            .get(start..start.saturating_add(index.bodies_len as usize))
            .ok_or(FormatError::RegionOutOfBounds)?;
        for (segment, chunk) in bodies.chunks(index.segment_len as usize).enumerate() {
            let segment = u32::try_from(segment).unwrap_or(u32::MAX);
            let stored = index.segment_checksum(segment).unwrap_or(0);
            let computed = crate::crc32(chunk);
            if stored != computed {
                return Err(FormatError::SegmentChecksumMismatch {
                    segment,
                    stored,
                    computed,
                });
            }
        }
        let image = SiteImage {
            bytes,
            index,
            bodies,
        };
        for file in index.files() {
            for variant in [Some(file.identity), file.gzip, file.brotli]
                .into_iter()
                .flatten()
            {
                if crate::crc32(image.body(variant.body)) != variant.body.crc {
                    return Err(FormatError::BodyChecksumMismatch {
                        index: file.index as usize,
                    });
                }
            }
        }
        Ok(image)
    }

    /// The validated index.
    pub fn index(&self) -> SiteIndex<'a> {
        self.index
    }

    /// The bytes of `body` (empty if it does not lie in this image's body region).
    pub fn body(&self, body: Body) -> &'a [u8] {
        let start = body.offset as usize;
        self.bodies
            .get(start..start.saturating_add(body.len as usize))
            .unwrap_or(&[])
    }

    /// Number of files in the image.
    pub fn file_count(&self) -> usize {
        self.index.file_count()
    }

    /// The index checksum, as the packer prints it.
    pub fn checksum(&self) -> u32 {
        self.index.checksum()
    }

    /// Image size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a valid image has at least its header. Present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The raw bytes of the whole image.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// See [`SiteIndex::resolve`].
    pub fn resolve(&self, path: &str) -> Resolved<'a> {
        self.index.resolve(path)
    }

    /// See [`SiteIndex::get`].
    pub fn get(&self, path: &str) -> Option<FileEntry<'a>> {
        self.index.get(path)
    }

    /// See [`SiteIndex::not_found_page`].
    pub fn not_found_page(&self) -> Option<FileEntry<'a>> {
        self.index.not_found_page()
    }

    /// See [`SiteIndex::files`].
    pub fn files(&self) -> impl Iterator<Item = FileEntry<'a>> + 'a {
        self.index.files()
    }

    /// See [`SiteIndex::entry`].
    pub fn entry(&self, index: usize) -> Option<FileEntry<'a>> {
        self.index.entry(index)
    }
}

impl BodySource for SiteImage<'_> {
    fn read(&self, request: BodyRequest, out: &mut [u8]) -> BodyStatus {
        let body = self.body(request.body);
        if body.len() != request.body.len as usize {
            return BodyStatus::Failed;
        }
        match body.get(request.offset as usize..) {
            Some(rest) => {
                let n = rest.len().min(out.len());
                out[..n].copy_from_slice(&rest[..n]);
                BodyStatus::Ready(n)
            }
            None => BodyStatus::Failed,
        }
    }

    fn peek(&self, request: BodyRequest) -> Option<&[u8]> {
        let body = self.body(request.body);
        if body.len() != request.body.len as usize {
            return None;
        }
        body.get(request.offset as usize..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_comparison_matches_concatenated_bytes() {
        let words: [&[u8]; 7] = [b"", b"/", b"/a", b"/a/", b"/a/index.html", b"/ab", b"/b"];
        for stored in words {
            for first in words {
                for second in words {
                    let mut joined = [0u8; 64];
                    let n = first.len() + second.len();
                    joined[..first.len()].copy_from_slice(first);
                    joined[first.len()..n].copy_from_slice(second);
                    assert_eq!(
                        compare_concat(stored, first, second),
                        stored.cmp(&joined[..n]),
                        "{stored:?} vs {first:?}+{second:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn path_rules() {
        for good in [
            "/a",
            "/index.html",
            "/a/b.css",
            "/.well-known/x",
            "/caf\u{e9}",
        ] {
            assert!(is_file_path(good.as_bytes()), "{good}");
        }
        for bad in [
            "", "/", "a", "/a/", "//a", "/a//b", "/./a", "/a/..", "/a\nb", "/a\x7f",
        ] {
            assert!(!is_file_path(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn etag_rules() {
        assert!(is_strong_etag(b"\"abc-br\""));
        assert!(is_strong_etag(b"\"\""));
        for bad in [&b"abc"[..], b"W/\"abc\"", b"\"a\"b\"", b"\"", b"\"a\r\n\""] {
            assert!(!is_strong_etag(bad));
        }
    }

    #[test]
    fn short_and_foreign_inputs_are_rejected() {
        assert_eq!(
            SiteImage::new_checked(&[]).unwrap_err(),
            FormatError::TooShort { len: 0 }
        );
        assert_eq!(
            SiteImage::new_checked(&[0; HEADER_LEN]).unwrap_err(),
            FormatError::BadMagic
        );
    }
}
