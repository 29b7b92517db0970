//! The zero-copy site-image reader: `SiteImage::new_checked` validates once, accessors never fail.

use core::cmp::Ordering;
use core::fmt;

use crate::{ALIGN, ENTRY_LEN, FLAG_BROTLI, FLAG_GZIP, HEADER_LEN, MAGIC, VERSION, entry, header};

/// Every way a byte string can fail to be a valid site image.
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
    /// Header length, record length or reserved header bytes differ from what this version
    /// defines.
    BadHeader,
    /// The image length recorded in the header differs from the number of bytes given
    /// (typically a truncated or padded file).
    LengthMismatch {
        /// The length recorded in the header.
        declared: u32,
        /// The number of bytes given.
        actual: usize,
    },
    /// The CRC-32 of the image does not match the one stored in the header (corruption).
    ChecksumMismatch {
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum computed over the bytes.
        computed: u32,
    },
    /// The file table, string region or body region lies outside the image, overlaps another
    /// region, is out of order or is misaligned.
    RegionOutOfBounds,
    /// A string or body reference of the record at `index` points outside its region.
    EntryOutOfBounds {
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
                "site image format version {found}, this build reads version {VERSION}"
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
            FormatError::RegionOutOfBounds => f.write_str("site image region out of bounds"),
            FormatError::EntryOutOfBounds { index } => {
                write!(f, "site image file #{index}: reference out of bounds")
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
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FormatError {}

/// A validated, zero-copy view over the bytes of a site image.
#[derive(Clone, Copy, Debug)]
pub struct SiteImage<'a> {
    /// The whole image.
    bytes: &'a [u8],
    /// The file table: `file_count` records of [`ENTRY_LEN`] bytes.
    table: &'a [u8],
    /// The string region.
    strings: &'a [u8],
    /// The body region.
    bodies: &'a [u8],
    /// Number of records in `table`.
    file_count: usize,
    /// The checksum stored in (and verified against) the header.
    checksum: u32,
    /// Index of `/404.html`, if the site has one.
    not_found: Option<usize>,
}

/// What a request path resolves to.
#[derive(Clone, Copy, Debug)]
pub enum Resolved<'a> {
    /// A file to serve (for `/dir/`, the directory's `index.html`).
    File(FileEntry<'a>),
    /// The path names a directory without its trailing slash (`/dir` where `/dir/index.html`
    /// exists): redirect to the path with `/` appended.
    AddSlash,
    /// Nothing at this path; serve [`SiteImage::not_found_page`] with status 404 if present.
    NotFound,
}

/// One file of the site with everything needed to answer a request for it.
#[derive(Clone, Copy, Debug)]
pub struct FileEntry<'a> {
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
    /// The bytes to send.
    pub body: &'a [u8],
    /// The complete quoted strong ETag of this encoding, e.g. `"9f2c1a0b4d5e6f70-br"`.
    pub etag: &'a str,
}

/// Reads a little-endian `u32` at `offset`, or 0 if out of range (never after validation).
fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    match bytes.get(offset..offset.wrapping_add(4)) {
        Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// Reads a little-endian `u64` at `offset`, or 0 if out of range (never after validation).
fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from(read_u32(bytes, offset)) | (u64::from(read_u32(bytes, offset.wrapping_add(4))) << 32)
}

/// Reads a `(u32 offset, u32 length)` reference at `field` and returns the range it names,
/// if it lies inside a region of `region_len` bytes.
fn reference(record: &[u8], field: usize, region_len: usize) -> Option<core::ops::Range<usize>> {
    let start = read_u32(record, field) as usize;
    let len = read_u32(record, field + 4) as usize;
    let end = start.checked_add(len)?;
    (end <= region_len).then_some(start..end)
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

impl<'a> SiteImage<'a> {
    /// Validates magic, version, length, checksum, every region, every table
    /// offset/length/UTF-8 string, header-value safety and the path order, once.
    pub fn new_checked(bytes: &'a [u8]) -> Result<SiteImage<'a>, FormatError> {
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
        if read_u32(bytes, header::HEADER_LEN) as usize != HEADER_LEN
            || read_u32(bytes, header::ENTRY_LEN) as usize != ENTRY_LEN
            || bytes[header::RESERVED..HEADER_LEN].iter().any(|&b| b != 0)
        {
            return Err(FormatError::BadHeader);
        }
        let declared = read_u32(bytes, header::IMAGE_LEN);
        if declared as usize != bytes.len() || u32::try_from(bytes.len()).is_err() {
            return Err(FormatError::LengthMismatch {
                declared,
                actual: bytes.len(),
            });
        }
        let stored = read_u32(bytes, header::CHECKSUM);
        let computed = crate::crc32::image_checksum(bytes);
        if stored != computed {
            return Err(FormatError::ChecksumMismatch { stored, computed });
        }

        let file_count = read_u32(bytes, header::FILE_COUNT) as usize;
        let table_offset = read_u32(bytes, header::TABLE_OFFSET) as usize;
        let table_len = file_count
            .checked_mul(ENTRY_LEN)
            .ok_or(FormatError::RegionOutOfBounds)?;
        let strings_offset = read_u32(bytes, header::STRINGS_OFFSET) as usize;
        let strings_len = read_u32(bytes, header::STRINGS_LEN) as usize;
        let bodies_offset = read_u32(bytes, header::BODIES_OFFSET) as usize;
        let bodies_len = read_u32(bytes, header::BODIES_LEN) as usize;
        let region = |offset: usize, len: usize, not_before: usize| -> Option<(usize, usize)> {
            let end = offset.checked_add(len)?;
            (offset >= not_before && offset.is_multiple_of(ALIGN) && end <= bytes.len())
                .then_some((offset, end))
        };
        let (table_start, table_end) =
            region(table_offset, table_len, HEADER_LEN).ok_or(FormatError::RegionOutOfBounds)?;
        let (strings_start, strings_end) =
            region(strings_offset, strings_len, table_end).ok_or(FormatError::RegionOutOfBounds)?;
        let (bodies_start, bodies_end) =
            region(bodies_offset, bodies_len, strings_end).ok_or(FormatError::RegionOutOfBounds)?;

        let image = SiteImage {
            bytes,
            table: &bytes[table_start..table_end],
            strings: &bytes[strings_start..strings_end],
            bodies: &bytes[bodies_start..bodies_end],
            file_count,
            checksum: stored,
            not_found: None,
        };
        let mut previous_path: &[u8] = &[];
        for (index, record) in image.table.chunks_exact(ENTRY_LEN).enumerate() {
            let path = image.check_record(index, record)?;
            if index > 0 && path <= previous_path {
                return Err(FormatError::UnsortedPaths { index });
            }
            previous_path = path;
        }
        Ok(SiteImage {
            not_found: image.find_index(crate::NOT_FOUND_PATH.as_bytes(), b""),
            ..image
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
        if flags & !(FLAG_GZIP | FLAG_BROTLI) != 0 || read_u32(record, entry::RESERVED) != 0 {
            return Err(FormatError::BadFlags { index });
        }
        let variants = [
            (true, entry::IDENTITY_BODY, entry::IDENTITY_ETAG),
            (flags & FLAG_GZIP != 0, entry::GZIP_BODY, entry::GZIP_ETAG),
            (
                flags & FLAG_BROTLI != 0,
                entry::BROTLI_BODY,
                entry::BROTLI_ETAG,
            ),
        ];
        for (present, body, etag) in variants {
            if present {
                reference(record, body, self.bodies.len()).ok_or(out_of_bounds)?;
                if !is_strong_etag(string(etag)?) {
                    return Err(FormatError::BadHeaderValue { index });
                }
            } else if record[body..etag + 8].iter().any(|&b| b != 0) {
                return Err(FormatError::BadFlags { index });
            }
        }
        Ok(path)
    }

    /// Number of files in the image.
    pub fn file_count(&self) -> usize {
        self.file_count
    }

    /// The image's CRC-32 checksum (verified by [`SiteImage::new_checked`]); the packer prints
    /// the same number.
    pub fn checksum(&self) -> u32 {
        self.checksum
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

    /// The file at exactly `path` (no directory-index resolution), if any.
    pub fn get(&self, path: &str) -> Option<FileEntry<'a>> {
        self.find_index(path.as_bytes(), b"")
            .map(|i| self.entry_at(i))
    }

    /// The site's `/404.html`, if present, to serve with status 404 for misses.
    pub fn not_found_page(&self) -> Option<FileEntry<'a>> {
        self.not_found.map(|i| self.entry_at(i))
    }

    /// All files, in path order.
    pub fn files(&self) -> impl Iterator<Item = FileEntry<'a>> + 'a {
        let image = *self;
        (0..self.file_count).map(move |i| image.entry_at(i))
    }

    /// The file at position `index` of the path-sorted table, if `index < file_count()`.
    pub fn entry(&self, index: usize) -> Option<FileEntry<'a>> {
        (index < self.file_count).then(|| self.entry_at(index))
    }

    /// Binary search for the record whose path equals `first ++ second`.
    fn find_index(&self, first: &[u8], second: &[u8]) -> Option<usize> {
        let (mut low, mut high) = (0, self.file_count);
        while low < high {
            let middle = low + (high - low) / 2;
            match compare_concat(self.path_bytes(middle), first, second) {
                Ordering::Less => low = middle + 1,
                Ordering::Greater => high = middle,
                Ordering::Equal => return Some(middle),
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

    /// A body reference.
    fn body(&self, record: &[u8], field: usize) -> &'a [u8] {
        reference(record, field, self.bodies.len())
            .and_then(|range| self.bodies.get(range))
            .unwrap_or(&[])
    }

    /// Builds the [`FileEntry`] of the record at `index`.
    fn entry_at(&self, index: usize) -> FileEntry<'a> {
        let record = self.record(index);
        let flags = read_u32(record, entry::FLAGS);
        let variant = |present: bool, body: usize, etag: usize| {
            present.then(|| Variant {
                body: self.body(record, body),
                etag: self.string(record, etag),
            })
        };
        FileEntry {
            path: self.string(record, entry::PATH),
            content_type: self.string(record, entry::CONTENT_TYPE),
            cache_control: self.string(record, entry::CACHE_CONTROL),
            last_modified: read_u64(record, entry::LAST_MODIFIED),
            last_modified_http: self.string(record, entry::LAST_MODIFIED_HTTP),
            identity: Variant {
                body: self.body(record, entry::IDENTITY_BODY),
                etag: self.string(record, entry::IDENTITY_ETAG),
            },
            gzip: variant(flags & FLAG_GZIP != 0, entry::GZIP_BODY, entry::GZIP_ETAG),
            brotli: variant(
                flags & FLAG_BROTLI != 0,
                entry::BROTLI_BODY,
                entry::BROTLI_ETAG,
            ),
        }
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
            SiteImage::new_checked(&[0; 64]).unwrap_err(),
            FormatError::BadMagic
        );
    }
}
