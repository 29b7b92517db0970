//! gzip and brotli, how hard to try ([`Effort`]), which variants are worth keeping, and the
//! on-disk cache of their output by content hash.
//!
//! Brotli is by far the slowest step of a pack. Measured with the brotli crate on the Python
//! 3.11 documentation (67 MB, almost all HTML and text; bench/README.md), per byte and
//! against gzip -9: quality 11 costs 33-46 times gzip -9, quality 10 14-16 times with bodies
//! 2.5-2.8% larger than quality 11's (for small pages as for large ones), quality 9 about 4
//! times with bodies 12-14% larger, quality 5 under 1 time with bodies 16-21% larger. So the
//! default ([`Effort::Thorough`]) is quality 10: about a third of the time of quality 11 for
//! under 3% more bytes; `--fast` ([`Effort::Fast`], previews and CI) is quality 5 with gzip
//! level 6, a pack about as fast as gzip -9 alone. Each file's output is kept in a cache
//! directory keyed by the SHA-256 of the identity body and named by the settings: re-packing
//! after editing one page compresses one page, and any pack takes the smallest cached body
//! there is for a file (a quality-11 body from an earlier version of the tool, a thorough
//! body in a fast pack). Cache entries are written atomically (temporary file, then rename)
//! and carry a CRC-32 trailer that is checked on every read, so a torn or damaged entry is
//! recomputed rather than served.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::Compression;
use flate2::write::GzEncoder;

/// How hard the packer compresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Effort {
    /// Small bodies at a bearable cost: brotli quality 10 with a 16 MiB window (under 3%
    /// larger than quality 11, about a third of its time), gzip level 9.
    #[default]
    Thorough,
    /// About as fast as gzip -9 alone: brotli quality 5 (bodies 16-21% larger than quality
    /// 11's), gzip level 6. For previews and CI runs with a cold cache.
    Fast,
}

/// One way of compressing: an encoding and its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The encoding.
    pub encoding: Encoding,
    /// gzip's DEFLATE level (1-9) or brotli's quality (0-11).
    pub level: u32,
    /// brotli's window, log2 of its size in bytes (unused for gzip).
    pub window: u32,
}

/// brotli quality 11 and gzip 9: what the tool made before [`Effort::Thorough`] existed;
/// only ever read from the cache.
const LEGACY_BROTLI: Setting = Setting {
    encoding: Encoding::Brotli,
    level: 11,
    window: 24,
};
const THOROUGH_BROTLI: Setting = Setting {
    encoding: Encoding::Brotli,
    level: 10,
    window: 24,
};
const FAST_BROTLI: Setting = Setting {
    encoding: Encoding::Brotli,
    level: 5,
    window: 22,
};
const THOROUGH_GZIP: Setting = Setting {
    encoding: Encoding::Gzip,
    level: 9,
    window: 15,
};
const FAST_GZIP: Setting = Setting {
    encoding: Encoding::Gzip,
    level: 6,
    window: 15,
};

impl Setting {
    /// File-name suffix of cache entries; names the settings, so changing them misses the
    /// cache.
    fn cache_suffix(self) -> String {
        match self.encoding {
            Encoding::Gzip => format!("gz{}", self.level),
            Encoding::Brotli => format!("br{}w{}", self.level, self.window),
        }
    }

    /// Compresses `data` this way.
    pub fn compress(self, data: &[u8]) -> Vec<u8> {
        match self.encoding {
            Encoding::Gzip => gzip_level(data, self.level),
            Encoding::Brotli => brotli_quality(data, self.level, self.window),
        }
    }
}

impl Effort {
    /// The setting this effort compresses `encoding` with.
    pub fn setting(self, encoding: Encoding) -> Setting {
        match (self, encoding) {
            (Effort::Thorough, Encoding::Gzip) => THOROUGH_GZIP,
            (Effort::Thorough, Encoding::Brotli) => THOROUGH_BROTLI,
            (Effort::Fast, Encoding::Gzip) => FAST_GZIP,
            (Effort::Fast, Encoding::Brotli) => FAST_BROTLI,
        }
    }

    /// The cached settings this effort accepts for `encoding`, smallest output first: its own
    /// and every more thorough one.
    fn accepted(self, encoding: Encoding) -> &'static [Setting] {
        match (self, encoding) {
            (Effort::Thorough, Encoding::Gzip) => &[THOROUGH_GZIP],
            (Effort::Thorough, Encoding::Brotli) => &[LEGACY_BROTLI, THOROUGH_BROTLI],
            (Effort::Fast, Encoding::Gzip) => &[THOROUGH_GZIP, FAST_GZIP],
            (Effort::Fast, Encoding::Brotli) => &[LEGACY_BROTLI, THOROUGH_BROTLI, FAST_BROTLI],
        }
    }
}

/// Bodies shorter than this get no compressed variants: the few bytes they could save are
/// less than one response header line, and each variant costs index space on the card.
pub const MIN_COMPRESS_BYTES: usize = 256;

/// Is a compressed variant of `compressed` bytes worth keeping beside an identity body of
/// `identity` bytes? It must save at least 5% and at least 64 bytes.
pub fn worth_keeping(identity: usize, compressed: usize) -> bool {
    compressed.saturating_add((identity / 20).max(64)) <= identity
}

/// The encodings the packer produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// gzip (DEFLATE), header without name or time (reproducible).
    Gzip,
    /// brotli, window at most 2^24 (the largest a standard decoder accepts: browsers do not
    /// support the "large window" extension).
    Brotli,
}

impl Encoding {
    /// Compresses `data` with `effort`.
    pub fn compress_with(self, data: &[u8], effort: Effort) -> Vec<u8> {
        effort.setting(self).compress(data)
    }
}

/// gzip at the highest DEFLATE level.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    gzip_level(data, 9)
}

fn gzip_level(data: &[u8], level: u32) -> Vec<u8> {
    let mut encoder = GzEncoder::new(
        Vec::with_capacity(data.len() / 3 + 64),
        Compression::new(level),
    );
    // Writing into a Vec cannot fail.
    encoder.write_all(data).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

/// brotli at quality 11 with the largest standard window.
pub fn brotli(data: &[u8]) -> Vec<u8> {
    brotli_quality(data, 11, 24)
}

fn brotli_quality(data: &[u8], quality: u32, window: u32) -> Vec<u8> {
    let params = brotli::enc::BrotliEncoderParams {
        // Both at most 11 and 24 (the constants above).
        quality: quality as i32,
        lgwin: window as i32,
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

    fn entry_path(&self, hash_hex: &str, setting: Setting) -> PathBuf {
        self.root
            .join(&hash_hex[..2])
            .join(format!("{hash_hex}.{}", setting.cache_suffix()))
    }

    /// The cached output of `setting` for a body with SHA-256 `hash_hex`, if present and
    /// intact.
    pub fn get(&self, hash_hex: &str, setting: Setting) -> Option<Vec<u8>> {
        let mut bytes = fs::read(self.entry_path(hash_hex, setting)).ok()?;
        let split = bytes.len().checked_sub(4)?;
        let stored = u32::from_le_bytes(bytes[split..].try_into().ok()?);
        bytes.truncate(split);
        (bramble_site::crc32(&bytes) == stored).then_some(bytes)
    }

    /// Stores the output of `setting`; failures are ignored (the cache is an optimisation
    /// only).
    pub fn put(&self, hash_hex: &str, setting: Setting, compressed: &[u8]) {
        let path = self.entry_path(hash_hex, setting);
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

    /// The smallest cached output `effort` accepts (its own, or a more thorough one), or
    /// compress now with `effort` and store it. The flag says whether it came from the cache.
    pub fn get_or_compress(
        &self,
        hash_hex: &str,
        encoding: Encoding,
        effort: Effort,
        data: &[u8],
    ) -> (Vec<u8>, bool) {
        for &setting in effort.accepted(encoding) {
            if let Some(cached) = self.get(hash_hex, setting) {
                return (cached, true);
            }
        }
        let setting = effort.setting(encoding);
        let compressed = setting.compress(data);
        self.put(hash_hex, setting, &compressed);
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
    fn each_pack_takes_the_smallest_cached_body_it_accepts() {
        let data = text();
        let fast = Encoding::Brotli.compress_with(&data, Effort::Fast);
        let thorough = Encoding::Brotli.compress_with(&data, Effort::Thorough);
        let legacy = brotli(&data);
        for body in [&fast, &thorough] {
            let mut unpacked = Vec::new();
            brotli::Decompressor::new(&body[..], 4096)
                .read_to_end(&mut unpacked)
                .unwrap();
            assert_eq!(unpacked, data);
        }
        assert_ne!(fast, thorough, "the two efforts are different settings");
        assert_ne!(thorough, legacy, "quality 10 is not quality 11");
        let dir = tempfile::tempdir().unwrap();
        let cache = CompressionCache::open(dir.path()).unwrap();
        let hash = "cd".repeat(32);
        let get = |effort| cache.get_or_compress(&hash, Encoding::Brotli, effort, &data);
        assert_eq!(get(Effort::Fast), (fast.clone(), false));
        assert_eq!(get(Effort::Fast), (fast.clone(), true));
        // A thorough pack never takes a fast body; once it has run, fast packs get its
        // (smaller) body.
        assert_eq!(get(Effort::Thorough), (thorough.clone(), false));
        assert_eq!(get(Effort::Fast), (thorough.clone(), true));
        // A quality-11 body an older tool left in the cache beats both.
        cache.put(&hash, LEGACY_BROTLI, &legacy);
        assert_eq!(get(Effort::Thorough), (legacy.clone(), true));
        assert_eq!(get(Effort::Fast), (legacy, true));
        // gzip likewise: a fast pack stores level 6, which a thorough one ignores.
        let other = "ef".repeat(32);
        cache.get_or_compress(&other, Encoding::Gzip, Effort::Fast, &data);
        assert!(cache.get(&other, THOROUGH_GZIP).is_none());
        assert_eq!(cache.get(&other, FAST_GZIP), Some(gzip_level(&data, 6)));
    }

    #[test]
    fn variants_must_save_enough() {
        assert!(!worth_keeping(1000, 990), "1% is too little");
        assert!(worth_keeping(1000, 936));
        assert!(!worth_keeping(1000, 951));
        assert!(!worth_keeping(300, 250), "50 bytes is too little");
        assert!(worth_keeping(300, 200));
        assert!(!worth_keeping(10, 0));
    }

    #[test]
    fn cache_returns_what_was_stored_and_rejects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompressionCache::open(dir.path()).unwrap();
        let hash = "ab".repeat(32);
        let gzip9 = Effort::Thorough.setting(Encoding::Gzip);
        assert!(cache.get(&hash, gzip9).is_none());
        let compress = || cache.get_or_compress(&hash, Encoding::Gzip, Effort::Thorough, &text());
        let (first, hit) = compress();
        assert!(!hit);
        let (second, hit) = compress();
        assert!(hit);
        assert_eq!(first, second);
        assert!(
            cache.get(&hash, THOROUGH_BROTLI).is_none(),
            "encodings are kept apart"
        );

        let path = cache.entry_path(&hash, gzip9);
        let mut bytes = fs::read(&path).unwrap();
        bytes[3] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(cache.get(&hash, gzip9).is_none());
        fs::write(&path, [1, 2]).unwrap();
        assert!(cache.get(&hash, gzip9).is_none());
        let (third, hit) = compress();
        assert!(!hit);
        assert_eq!(third, first);
    }
}
