//! gzip and brotli at maximum settings, and the on-disk cache of their output by content hash.
//!
//! Brotli at quality 11 is by far the slowest step of a pack (around 1 MB/s per core), so its
//! output, and gzip's, is kept in a cache directory keyed by the SHA-256 of the identity body:
//! re-packing after editing one page compresses one page. Cache entries are written atomically
//! (temporary file, then rename) and carry a CRC-32 trailer that is checked on every read, so a
//! torn or damaged entry is recomputed rather than served.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::Compression;
use flate2::write::GzEncoder;

/// The encodings the packer produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// gzip, DEFLATE level 9 (flate2's best), header without name or time (reproducible).
    Gzip,
    /// brotli, quality 11, window 2^24 (the largest a standard decoder accepts: browsers do
    /// not support the "large window" extension).
    Brotli,
}

impl Encoding {
    /// File-name suffix of cache entries; names the settings, so changing them misses the cache.
    fn cache_suffix(self) -> &'static str {
        match self {
            Encoding::Gzip => "gz9",
            Encoding::Brotli => "br11w24",
        }
    }

    /// Compresses `data`.
    pub fn compress(self, data: &[u8]) -> Vec<u8> {
        match self {
            Encoding::Gzip => gzip(data),
            Encoding::Brotli => brotli(data),
        }
    }
}

/// gzip at the highest DEFLATE level.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(data.len() / 3 + 64), Compression::best());
    // Writing into a Vec cannot fail.
    encoder.write_all(data).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

/// brotli at quality 11 with the largest standard window.
pub fn brotli(data: &[u8]) -> Vec<u8> {
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 24,
        size_hint: data.len(),
        ..Default::default()
    };
    let mut output = Vec::with_capacity(data.len() / 3 + 64);
    brotli::BrotliCompress(&mut &data[..], &mut output, &params).expect("compressing in memory");
    output
}

/// A directory of compressed bodies named by content hash and settings.
#[derive(Debug)]
pub struct CompressionCache {
    /// `<cache dir>/v1`.
    root: PathBuf,
    /// Counter for unique temporary names.
    temporary: AtomicU64,
}

impl CompressionCache {
    /// Opens (creating it if needed) the cache under `dir`; `None` if it cannot be created,
    /// in which case packing simply compresses everything.
    pub fn open(dir: &Path) -> Option<Self> {
        let root = dir.join("v1");
        fs::create_dir_all(&root).ok()?;
        Some(CompressionCache {
            root,
            temporary: AtomicU64::new(0),
        })
    }

    fn entry_path(&self, hash_hex: &str, encoding: Encoding) -> PathBuf {
        self.root
            .join(&hash_hex[..2])
            .join(format!("{hash_hex}.{}", encoding.cache_suffix()))
    }

    /// The cached output for a body with SHA-256 `hash_hex`, if present and intact.
    pub fn get(&self, hash_hex: &str, encoding: Encoding) -> Option<Vec<u8>> {
        let mut bytes = fs::read(self.entry_path(hash_hex, encoding)).ok()?;
        let split = bytes.len().checked_sub(4)?;
        let stored = u32::from_le_bytes(bytes[split..].try_into().ok()?);
        bytes.truncate(split);
        (bramble_site::crc32(&bytes) == stored).then_some(bytes)
    }

    /// Stores output; failures are ignored (the cache is an optimisation only).
    pub fn put(&self, hash_hex: &str, encoding: Encoding, compressed: &[u8]) {
        let path = self.entry_path(hash_hex, encoding);
        let Some(parent) = path.parent() else { return };
        if fs::create_dir_all(parent).is_err() {
            return;
        }
        let unique = self.temporary.fetch_add(1, Ordering::Relaxed);
        let temporary = parent.join(format!(".tmp-{}-{unique}", std::process::id()));
        let written = fs::File::create(&temporary).and_then(|mut file| {
            file.write_all(compressed)?;
            file.write_all(&bramble_site::crc32(compressed).to_le_bytes())
        });
        if written.is_err() || fs::rename(&temporary, &path).is_err() {
            let _ = fs::remove_file(&temporary);
        }
    }

    /// Cached output, or compress now and store it. The flag says whether it came from the cache.
    pub fn get_or_compress(
        &self,
        hash_hex: &str,
        encoding: Encoding,
        data: &[u8],
    ) -> (Vec<u8>, bool) {
        if let Some(cached) = self.get(hash_hex, encoding) {
            return (cached, true);
        }
        let compressed = encoding.compress(data);
        self.put(hash_hex, encoding, &compressed);
        (compressed, false)
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/bramble/pack`, else `~/.cache/bramble/pack`.
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })?;
    Some(base.join("bramble").join("pack"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn text() -> Vec<u8> {
        (0..2000)
            .flat_map(|i| format!("<p>paragraph {i} of the page</p>\n").into_bytes())
            .collect()
    }

    #[test]
    fn both_encodings_round_trip_and_shrink_text() {
        let data = text();
        let gz = gzip(&data);
        let mut unpacked = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, data);
        let br = brotli(&data);
        let mut unpacked = Vec::new();
        brotli::Decompressor::new(&br[..], 4096)
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, data);
        assert!(
            gz.len() < data.len() / 4 && br.len() < gz.len(),
            "{} {}",
            gz.len(),
            br.len()
        );
        // Reproducible: same input, same bytes.
        assert_eq!(gzip(&data), gz);
    }

    #[test]
    fn cache_returns_what_was_stored_and_rejects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompressionCache::open(dir.path()).unwrap();
        let hash = "ab".repeat(32);
        assert!(cache.get(&hash, Encoding::Gzip).is_none());
        let (first, hit) = cache.get_or_compress(&hash, Encoding::Gzip, &text());
        assert!(!hit);
        let (second, hit) = cache.get_or_compress(&hash, Encoding::Gzip, &text());
        assert!(hit);
        assert_eq!(first, second);
        assert!(
            cache.get(&hash, Encoding::Brotli).is_none(),
            "encodings are kept apart"
        );

        let path = cache.entry_path(&hash, Encoding::Gzip);
        let mut bytes = fs::read(&path).unwrap();
        bytes[3] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(cache.get(&hash, Encoding::Gzip).is_none());
        fs::write(&path, [1, 2]).unwrap();
        assert!(cache.get(&hash, Encoding::Gzip).is_none());
        let (third, hit) = cache.get_or_compress(&hash, Encoding::Gzip, &text());
        assert!(!hit);
        assert_eq!(third, first);
    }
}
