//! Bramble's site-image format: a `no_std` reader of the index and bodies, and (feature `std`) a
//! writer.
//!
//! A site image is one byte string holding every file of a static site with everything the
//! server needs precomputed: URL path, content type, cache policy, Last-Modified, strong ETags
//! and the identity, gzip and brotli bodies. It starts with its *index* (header, file table,
//! segment checksums, strings: the small part, read and verified at boot) and ends with the
//! *body region*, cut into fixed-size segments that each carry a CRC-32, so that a body read
//! from the card on demand is verified as it is read. The layout is documented in `FORMAT.md`.
//!
//! [`SiteIndex::new_checked`] validates an index once (magic, version, checksum, every offset,
//! every string, path order); after that every accessor is infallible, allocation-free and never
//! panics. [`SiteImage::new_checked`] does the same for a whole image in RAM and also verifies
//! every segment. Response bodies reach the HTTP engine through a [`BodySource`]: the image in
//! RAM is one, and the card-backed store (`bramble-store`) is another.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "std")]
extern crate std;

mod body;
mod bytes;
mod crc32;
mod reader;
pub mod rules;
#[cfg(feature = "std")]
pub mod rules_text;
pub mod search;
#[cfg(feature = "std")]
mod writer;

pub use body::{Body, BodyCopy, BodyRequest, BodySource, BodyStatus};
pub use crc32::{Crc32, crc32};
pub use reader::{FileEntry, FormatError, Resolved, SiteFlags, SiteImage, SiteIndex, Variant};
#[cfg(feature = "std")]
pub use rules::{HeaderBlockSpec, HeaderEntrySpec, RedirectSpec};
#[cfg(feature = "std")]
pub use writer::{
    FileSpec, SEARCH_POSTINGS_PATH, SEARCH_TEXT_PATH, SiteImageWriter, VariantSpec, WriteError,
    http_date,
};

/// The eight bytes every site image starts with.
pub const MAGIC: [u8; 8] = *b"BRMSITE\0";
/// The format version this crate reads and writes.
pub const VERSION: u32 = 4;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 128;
/// Size of one record of the file table in bytes.
pub const ENTRY_LEN: usize = 112;
/// Alignment (bytes) of the file table, the segment table and the string region.
pub const ALIGN: usize = 8;
/// Alignment (bytes) of the body region and of every body: one SD card block, so that a body
/// is a whole number of blocks away from the start of the file.
pub const BODY_ALIGN: usize = 512;
/// Byte offset of the index checksum in the header (the checksum covers the index with these
/// four bytes read as zero).
pub const CHECKSUM_OFFSET: usize = 20;
/// Segment length the writer uses unless told otherwise: 64 KiB, 128 card blocks (one
/// multi-block read of about 3 ms on a card at 20 MB/s).
pub const DEFAULT_SEGMENT_LEN: u32 = 64 * 1024;
/// Shortest segment length a reader accepts.
pub const MIN_SEGMENT_LEN: u32 = 4 * 1024;
/// Longest segment length a reader accepts.
pub const MAX_SEGMENT_LEN: u32 = 1024 * 1024;

/// Entry flag: the record has a gzip variant.
pub(crate) const FLAG_GZIP: u32 = 1;
/// Entry flag: the record has a brotli variant.
pub(crate) const FLAG_BROTLI: u32 = 2;
/// Entry flag: the record is internal to the server (the search index's postings and text),
/// never served at its path.
pub(crate) const FLAG_INTERNAL: u32 = 4;

/// The path of the page served for misses, when the site has one.
pub const NOT_FOUND_PATH: &str = "/404.html";
/// The file name that answers a request for its directory (`/dir/` -> `/dir/index.html`).
pub const INDEX_NAME: &str = "index.html";

/// Header field offsets (bytes from the start of the image); see FORMAT.md.
pub(crate) mod header {
    pub const VERSION: usize = 8;
    pub const HEADER_LEN: usize = 12;
    pub const INDEX_LEN: usize = 16;
    pub const CHECKSUM: usize = super::CHECKSUM_OFFSET;
    pub const FILE_COUNT: usize = 24;
    pub const ENTRY_LEN: usize = 28;
    pub const TABLE_OFFSET: usize = 32;
    pub const SEGMENTS_OFFSET: usize = 36;
    pub const STRINGS_OFFSET: usize = 40;
    pub const STRINGS_LEN: usize = 44;
    pub const BODIES_OFFSET: usize = 48;
    pub const BODIES_LEN: usize = 52;
    pub const SEGMENT_LEN: usize = 56;
    pub const IMAGE_LEN: usize = 60;
    pub const SITE_FLAGS: usize = 64;
    pub const RESERVED: usize = 68;
    pub const REDIRECTS: usize = 72;
    pub const HEADERS: usize = 80;
    pub const SEARCH: usize = 88;
    /// Bytes 96..128 are reserved and must be zero.
    pub const RESERVED_TAIL: usize = 96;
}

/// Field offsets inside one 112-byte table record; see FORMAT.md.
pub(crate) mod entry {
    pub const PATH: usize = 0;
    pub const CONTENT_TYPE: usize = 8;
    pub const CACHE_CONTROL: usize = 16;
    pub const LAST_MODIFIED_HTTP: usize = 24;
    pub const LAST_MODIFIED: usize = 32;
    pub const FLAGS: usize = 40;
    pub const RESERVED: usize = 44;
    pub const IDENTITY_BODY: usize = 48;
    pub const IDENTITY_ETAG: usize = 56;
    pub const GZIP_BODY: usize = 64;
    pub const GZIP_ETAG: usize = 72;
    pub const BROTLI_BODY: usize = 80;
    pub const BROTLI_ETAG: usize = 88;
    pub const IDENTITY_CRC: usize = 96;
    pub const GZIP_CRC: usize = 100;
    pub const BROTLI_CRC: usize = 104;
    /// Bytes 108..112 are reserved and must be zero.
    pub const RESERVED_END: usize = 108;
}
