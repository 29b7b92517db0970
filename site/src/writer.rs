//! The std site-image writer: lays out already-compressed files into image bytes (feature `std`).

use std::collections::HashMap;
use std::fmt;
use std::string::String;
use std::vec;
use std::vec::Vec;

use bramble_hal::calendar::UtcDateTime;

use crate::{ALIGN, ENTRY_LEN, FLAG_BROTLI, FLAG_GZIP, HEADER_LEN, MAGIC, VERSION, entry, header};

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
        }
    }
}

impl std::error::Error for WriteError {}

/// Builds a site image from files whose variants are already compressed.
#[derive(Debug, Default)]
pub struct SiteImageWriter {
    /// Files added so far, in insertion order.
    files: Vec<FileSpec>,
}

/// A `(offset, length)` reference into a region.
type Reference = (u32, u32);

/// Interns strings and bodies into their regions, deduplicating identical ones.
struct Regions<'f> {
    strings: Vec<u8>,
    string_index: HashMap<&'f str, (u32, u32)>,
    /// Bodies in region order with their offsets; copied once, into the finished image.
    bodies: Vec<(usize, &'f [u8])>,
    /// Length of the body region so far.
    bodies_len: usize,
    /// Bodies stored so far, by length: identical bodies have equal lengths, and comparing
    /// the few candidates is much cheaper than hashing every byte of a large site.
    body_index: HashMap<usize, Vec<(&'f [u8], Reference)>>,
}

impl<'f> Regions<'f> {
    fn string(&mut self, value: &'f str) -> Result<(u32, u32), WriteError> {
        if let Some(&found) = self.string_index.get(value) {
            return Ok(found);
        }
        let reference = (to_u32(self.strings.len())?, to_u32(value.len())?);
        self.strings.extend_from_slice(value.as_bytes());
        self.string_index.insert(value, reference);
        Ok(reference)
    }

    fn body(&mut self, value: &'f [u8]) -> Result<(u32, u32), WriteError> {
        let candidates = self.body_index.entry(value.len()).or_default();
        if let Some(&(_, found)) = candidates.iter().find(|(stored, _)| *stored == value) {
            return Ok(found);
        }
        let start = self.bodies_len.next_multiple_of(ALIGN);
        let reference = (to_u32(start)?, to_u32(value.len())?);
        self.bodies.push((start, value));
        self.bodies_len = start + value.len();
        candidates.push((value, reference));
        Ok(reference)
    }
}

fn to_u32(value: usize) -> Result<u32, WriteError> {
    u32::try_from(value).map_err(|_| WriteError::TooLarge {
        bytes: value as u64,
    })
}

/// Pads `bytes` with zeroes to a multiple of [`ALIGN`].
fn pad(bytes: &mut Vec<u8>) {
    bytes.resize(bytes.len().next_multiple_of(ALIGN), 0);
}

fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

fn put_reference(bytes: &mut [u8], offset: usize, (start, len): (u32, u32)) {
    put_u32(bytes, offset, start);
    put_u32(bytes, offset + 4, len);
}

impl SiteImageWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
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
        let etags = [
            Some(&file.identity),
            file.gzip.as_ref(),
            file.brotli.as_ref(),
        ];
        if etags
            .iter()
            .flatten()
            .any(|v| !crate::reader::is_strong_etag(v.etag.as_bytes()))
        {
            return Err(WriteError::InvalidEtag { path: file.path });
        }
        self.files.push(file);
        Ok(())
    }

    /// Sorts the files by path, lays out the image and returns its bytes (checksum included).
    pub fn finish(mut self) -> Result<Vec<u8>, WriteError> {
        self.files.sort_by(|a, b| a.path.cmp(&b.path));
        if let Some(pair) = self
            .files
            .windows(2)
            .find(|pair| pair[0].path == pair[1].path)
        {
            return Err(WriteError::DuplicatePath(pair[0].path.clone()));
        }
        let mut regions = Regions {
            strings: Vec::new(),
            string_index: HashMap::new(),
            bodies: Vec::new(),
            bodies_len: 0,
            body_index: HashMap::new(),
        };
        let mut table = vec![0u8; self.files.len() * ENTRY_LEN];
        for (file, record) in self.files.iter().zip(table.chunks_exact_mut(ENTRY_LEN)) {
            put_reference(record, entry::PATH, regions.string(&file.path)?);
            put_reference(
                record,
                entry::CONTENT_TYPE,
                regions.string(&file.content_type)?,
            );
            put_reference(
                record,
                entry::CACHE_CONTROL,
                regions.string(&file.cache_control)?,
            );
            put_reference(
                record,
                entry::LAST_MODIFIED_HTTP,
                regions.string(&file.last_modified_http)?,
            );
            record[entry::LAST_MODIFIED..entry::LAST_MODIFIED + 8]
                .copy_from_slice(&file.last_modified.to_le_bytes());
            let mut flags = 0;
            let variants = [
                (
                    Some(&file.identity),
                    0,
                    entry::IDENTITY_BODY,
                    entry::IDENTITY_ETAG,
                ),
                (
                    file.gzip.as_ref(),
                    FLAG_GZIP,
                    entry::GZIP_BODY,
                    entry::GZIP_ETAG,
                ),
                (
                    file.brotli.as_ref(),
                    FLAG_BROTLI,
                    entry::BROTLI_BODY,
                    entry::BROTLI_ETAG,
                ),
            ];
            for (variant, flag, body_field, etag_field) in variants {
                if let Some(variant) = variant {
                    flags |= flag;
                    put_reference(record, body_field, regions.body(&variant.body)?);
                    put_reference(record, etag_field, regions.string(&variant.etag)?);
                }
            }
            put_u32(record, entry::FLAGS, flags);
        }
        pad(&mut regions.strings);

        let table_offset = HEADER_LEN;
        let strings_offset = table_offset + table.len();
        let bodies_offset = strings_offset + regions.strings.len();
        let total = bodies_offset as u64 + regions.bodies_len as u64;
        if total > u64::from(u32::MAX) {
            return Err(WriteError::TooLarge { bytes: total });
        }
        let mut image = Vec::with_capacity(total as usize);
        image.resize(HEADER_LEN, 0);
        image[..MAGIC.len()].copy_from_slice(&MAGIC);
        put_u32(&mut image, header::VERSION, VERSION);
        put_u32(&mut image, header::HEADER_LEN, HEADER_LEN as u32);
        put_u32(&mut image, header::IMAGE_LEN, total as u32);
        put_u32(&mut image, header::FILE_COUNT, to_u32(self.files.len())?);
        put_u32(&mut image, header::ENTRY_LEN, ENTRY_LEN as u32);
        put_u32(&mut image, header::TABLE_OFFSET, table_offset as u32);
        put_u32(&mut image, header::STRINGS_OFFSET, strings_offset as u32);
        put_u32(
            &mut image,
            header::STRINGS_LEN,
            regions.strings.len() as u32,
        );
        put_u32(&mut image, header::BODIES_OFFSET, bodies_offset as u32);
        put_u32(&mut image, header::BODIES_LEN, regions.bodies_len as u32);
        image.extend_from_slice(&table);
        image.extend_from_slice(&regions.strings);
        for (start, body) in &regions.bodies {
            image.resize(bodies_offset + start, 0);
            image.extend_from_slice(body);
        }
        // Same CRC-32 as the reader's, computed with crc32fast (carry-less multiply on the
        // host: a large image is checksummed in milliseconds).
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&image[..header::CHECKSUM]);
        hasher.update(&[0; 4]);
        hasher.update(&image[header::CHECKSUM + 4..]);
        let checksum = hasher.finalize();
        put_u32(&mut image, header::CHECKSUM, checksum);
        Ok(image)
    }
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
