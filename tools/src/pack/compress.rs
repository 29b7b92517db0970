//! gzip and brotli, how hard to try ([`Effort`], per file by its size), which variants are
//! worth keeping, and the on-disk cache of their output by content hash.
//!
//! Brotli is by far the slowest step of a pack. Measured with the brotli crate on the Python
//! 3.11 documentation (Debian's python3-doc: 1,050 compressible files, 66 MB; CPU time of
//! each compression on its own thread, against flate2's gzip -9 over the same files;
//! `pack-bench --curve`, bench/README.md), total brotli bytes against quality 11's:
//!
//! | quality | 5 | 6 | 7 | 8 | 9 | 10 | 11 |
//! |---|---:|---:|---:|---:|---:|---:|---:|
//! | bytes vs 11 | +16.5% | +15.1% | +14.1% | +13.5% | +12.9% | +2.5% | 0 |
//! | CPU x gzip -9 | 0.9 | 0.9 | 1.3 | 1.7 | 7.5 | 18.3 | 42.9 |
//!
//! Only qualities 10 and 11 (optimal parsing) come within 3% of quality 11, at 12-25 times
//! gzip -9 in every size class; 9 and below are 12-17% larger. So no policy meets both of
//! issue 18's bounds (within 4 times gzip -9 on 2 cores, i.e. about 8 times its CPU time,
//! and within 3% of quality 11), and the two efforts each meet one:
//!
//! - [`Effort::Thorough`] (the default: the card is served for months, and the cache makes
//!   later packs cheap) is quality 10 for every body (+2.5%), with the window fitted to the
//!   body (same bytes, about 4% less time, less memory than a 16 MiB window);
//! - [`Effort::Fast`] (`--fast`, previews and CI) chooses the quality by size, each class
//!   within a few times gzip -9 so that any mix of sizes is: quality 6 below 16 KiB (7, 8 and
//!   9 spend most of their time setting up their hash tables on a small body: 9 costs 30
//!   times gzip -9 there, more than 10), 8 up to 256 KiB, 9 above (where it costs 2-4 times).
//!   On the documentation that is +13.2% at 2.2 times gzip -9 (quality 5 everywhere, the
//!   previous `--fast`, was +16.5% at 0.9 times); gzip at level 6.
//!
//! Each file's output is kept in a cache directory keyed by the SHA-256 of the identity body
//! and named by the settings: re-packing after editing one page compresses one page, and any
//! pack takes the smallest cached body there is for a file (a quality-11 body from an earlier
//! version of the tool, a thorough body in a fast pack). Cache entries are written atomically
//! (temporary file, then rename) and carry a CRC-32 trailer that is checked on every read, so
//! a torn or damaged entry is recomputed rather than served.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::Compression;
use flate2::write::GzEncoder;

/// How hard the packer compresses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Effort {
    /// Small bodies at a bearable cost: brotli quality 10 with the window fitted to the body
    /// (2.5% larger than quality 11, under half its time), gzip level 9.
    #[default]
    Thorough,
    /// Within a few times gzip -9: brotli quality 6, 8 or 9 by the body's size (13% larger
    /// than quality 11's on documentation), gzip level 6. For previews and CI runs with a
    /// cold cache.
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

const fn brotli_setting(level: u32, window: u32) -> Setting {
    Setting {
        encoding: Encoding::Brotli,
        level,
        window,
    }
}

/// brotli quality 11: what the tool made before [`Effort::Thorough`] existed; only ever read
/// from the cache.
const LEGACY_BROTLI: Setting = brotli_setting(11, 24);
/// Quality 10 with the largest window: the thorough setting before windows were fitted; only
/// ever read from the cache.
const WIDE_THOROUGH_BROTLI: Setting = brotli_setting(10, 24);
/// The largest standard window (browsers do not support brotli's "large window" extension).
const MAX_WINDOW: u32 = 24;
/// The fast settings' window: 4 MiB. Below 17, the brotli crate's qualities 5-8 switch to hash
/// tables that cost more to set up than they save.
const FAST_WINDOW: u32 = 22;
/// Below this, [`Effort::Fast`] uses brotli quality 6.
pub const FAST_SMALL_BYTES: usize = 16 << 10;
/// From [`FAST_SMALL_BYTES`] to below this, [`Effort::Fast`] uses quality 8; from here on 9.
pub const FAST_LARGE_BYTES: usize = 256 << 10;
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

/// The smallest window (log2, 10 to 24) that holds `len` bytes: brotli's window is its size
/// less 16 bytes. A body the window holds whole compresses to the same size as with a wider
/// one, and quality 10's match finder sets up a table twice the window's size.
pub fn fitted_window(len: usize) -> u32 {
    (10..MAX_WINDOW)
        .find(|&window| (1usize << window) - 16 >= len)
        .unwrap_or(MAX_WINDOW)
}

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
    /// The setting this effort compresses a body of `len` bytes with in `encoding`.
    pub fn setting(self, encoding: Encoding, len: usize) -> Setting {
        match (self, encoding) {
            (Effort::Thorough, Encoding::Gzip) => THOROUGH_GZIP,
            (Effort::Thorough, Encoding::Brotli) => brotli_setting(10, fitted_window(len)),
            (Effort::Fast, Encoding::Gzip) => FAST_GZIP,
            (Effort::Fast, Encoding::Brotli) if len < FAST_SMALL_BYTES => {
                brotli_setting(6, FAST_WINDOW)
            }
            (Effort::Fast, Encoding::Brotli) if len < FAST_LARGE_BYTES => {
                brotli_setting(8, FAST_WINDOW)
            }
            (Effort::Fast, Encoding::Brotli) => brotli_setting(9, FAST_WINDOW),
        }
    }

    /// The cached settings this effort accepts for a body of `len` bytes in `encoding`,
    /// smallest output first: its own and every more thorough one.
    fn accepted(self, encoding: Encoding, len: usize) -> Vec<Setting> {
        match encoding {
            Encoding::Gzip => match self {
                Effort::Thorough => vec![THOROUGH_GZIP],
                Effort::Fast => vec![THOROUGH_GZIP, FAST_GZIP],
            },
            Encoding::Brotli => {
                let mut accepted = vec![
                    LEGACY_BROTLI,
                    Effort::Thorough.setting(encoding, len),
                    WIDE_THOROUGH_BROTLI,
                ];
                accepted.dedup();
                if self == Effort::Fast {
                    accepted.push(self.setting(encoding, len));
                }
                accepted
            }
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
        effort.setting(self, data.len()).compress(data)
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
    LEGACY_BROTLI.compress(data)
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
        for setting in effort.accepted(encoding, data.len()) {
            if let Some(cached) = self.get(hash_hex, setting) {
                return (cached, true);
            }
        }
        let setting = effort.setting(encoding, data.len());
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
        // A quality-10 body with the full window (what the tool made before windows were
        // fitted) serves both efforts for a body that has no fitted one yet.
        let wide = WIDE_THOROUGH_BROTLI.compress(&data);
        let third = "12".repeat(32);
        cache.put(&third, WIDE_THOROUGH_BROTLI, &wide);
        for effort in [Effort::Thorough, Effort::Fast] {
            let got = cache.get_or_compress(&third, Encoding::Brotli, effort, &data);
            assert_eq!(got, (wide.clone(), true));
        }
        // gzip likewise: a fast pack stores level 6, which a thorough one ignores.
        let other = "ef".repeat(32);
        cache.get_or_compress(&other, Encoding::Gzip, Effort::Fast, &data);
        assert!(cache.get(&other, THOROUGH_GZIP).is_none());
        assert_eq!(cache.get(&other, FAST_GZIP), Some(gzip_level(&data, 6)));
    }

    #[test]
    fn fast_quality_goes_by_size_and_thorough_fits_the_window() {
        let brotli = |effort: Effort, len| effort.setting(Encoding::Brotli, len);
        assert_eq!(brotli(Effort::Fast, 300), brotli_setting(6, FAST_WINDOW));
        assert_eq!(
            brotli(Effort::Fast, FAST_SMALL_BYTES - 1),
            brotli_setting(6, 22)
        );
        assert_eq!(
            brotli(Effort::Fast, FAST_SMALL_BYTES),
            brotli_setting(8, 22)
        );
        assert_eq!(
            brotli(Effort::Fast, FAST_LARGE_BYTES),
            brotli_setting(9, 22)
        );
        assert_eq!(brotli(Effort::Fast, 40 << 20), brotli_setting(9, 22));
        assert_eq!(fitted_window(0), 10);
        assert_eq!(fitted_window(1008), 10);
        assert_eq!(fitted_window(1009), 11);
        assert_eq!(fitted_window((1 << 20) - 16), 20);
        assert_eq!(fitted_window(1 << 20), 21);
        assert_eq!(fitted_window(usize::MAX), 24);
        assert_eq!(brotli(Effort::Thorough, 5000), brotli_setting(10, 13));
        // The fitted window loses nothing: the body is inside it either way.
        let data = text();
        let fitted = Encoding::Brotli.compress_with(&data, Effort::Thorough);
        let wide = WIDE_THOROUGH_BROTLI.compress(&data);
        assert!(
            fitted.len() <= wide.len() + 4,
            "{} {}",
            fitted.len(),
            wide.len()
        );
        let mut unpacked = Vec::new();
        brotli::Decompressor::new(&fitted[..], 4096)
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, data);
        // Each size class round-trips (quality 6, 8 and 9 bodies).
        for len in [1000, FAST_SMALL_BYTES + 10, FAST_LARGE_BYTES + 10] {
            let body: Vec<u8> = data.iter().copied().cycle().take(len).collect();
            let packed = Encoding::Brotli.compress_with(&body, Effort::Fast);
            let mut unpacked = Vec::new();
            brotli::Decompressor::new(&packed[..], 4096)
                .read_to_end(&mut unpacked)
                .unwrap();
            assert_eq!(unpacked, body, "{len}");
        }
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
        let gzip9 = Effort::Thorough.setting(Encoding::Gzip, text().len());
        assert!(cache.get(&hash, gzip9).is_none());
        let compress = || cache.get_or_compress(&hash, Encoding::Gzip, Effort::Thorough, &text());
        let (first, hit) = compress();
        assert!(!hit);
        let (second, hit) = compress();
        assert!(hit);
        assert_eq!(first, second);
        assert!(
            cache
                .get(
                    &hash,
                    Effort::Thorough.setting(Encoding::Brotli, text().len())
                )
                .is_none(),
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
