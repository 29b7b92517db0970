//! Bramble's site-image format: a zero-copy `no_std` reader and (feature `std`) a writer.
//!
//! A site image is one byte string holding every file of a static site with everything the
//! server needs precomputed: URL path, content type, cache policy, Last-Modified, strong ETags
//! and the identity, gzip and brotli bodies. The layout is documented in `FORMAT.md`.
//!
//! [`SiteImage::new_checked`] validates the whole image once (magic, version, checksum, every
//! offset, every string, path order); after that every accessor is infallible, allocation-free
//! and never panics.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

mod crc32;
mod reader;
#[cfg(feature = "std")]
mod writer;

pub use crc32::crc32;
pub use reader::{FileEntry, FormatError, Resolved, SiteImage, Variant};
#[cfg(feature = "std")]
pub use writer::{FileSpec, SiteImageWriter, VariantSpec, WriteError, http_date};

/// The eight bytes every site image starts with.
pub const MAGIC: [u8; 8] = *b"BRMSITE\0";
/// The format version this crate reads and writes.
pub const VERSION: u32 = 1;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 64;
/// Size of one record of the file table in bytes.
pub const ENTRY_LEN: usize = 96;
/// Alignment (bytes) of the table, the string region, the body region and every body.
pub const ALIGN: usize = 8;
/// Byte offset of the checksum field in the header (the checksum covers the whole image with
/// these four bytes read as zero).
pub const CHECKSUM_OFFSET: usize = 20;

/// Entry flag: the record has a gzip variant.
pub(crate) const FLAG_GZIP: u32 = 1;
/// Entry flag: the record has a brotli variant.
pub(crate) const FLAG_BROTLI: u32 = 2;

/// The path of the page served for misses, when the site has one.
pub const NOT_FOUND_PATH: &str = "/404.html";
/// The file name that answers a request for its directory (`/dir/` -> `/dir/index.html`).
pub const INDEX_NAME: &str = "index.html";

/// Header field offsets (bytes from the start of the image); see FORMAT.md.
pub(crate) mod header {
    pub const VERSION: usize = 8;
    pub const HEADER_LEN: usize = 12;
    pub const IMAGE_LEN: usize = 16;
    pub const CHECKSUM: usize = super::CHECKSUM_OFFSET;
    pub const FILE_COUNT: usize = 24;
    pub const ENTRY_LEN: usize = 28;
    pub const TABLE_OFFSET: usize = 32;
    pub const STRINGS_OFFSET: usize = 36;
    pub const STRINGS_LEN: usize = 40;
    pub const BODIES_OFFSET: usize = 44;
    pub const BODIES_LEN: usize = 48;
    /// Bytes 52..64 are reserved and must be zero.
    pub const RESERVED: usize = 52;
}

/// Field offsets inside one 96-byte table record; see FORMAT.md.
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
}
