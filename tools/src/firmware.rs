//! The Raspberry Pi GPU firmware a real board needs: a pinned release, its SHA-256 sums, and
//! the download behind `bramble image --fetch-firmware`.
//!
//! The BCM2835 boot ROM reads `bootcode.bin` from the card's FAT partition; that loads
//! `start.elf` (the GPU firmware) with `fixup.dat` (its memory-layout companion); the firmware
//! reads `config.txt` and loads `kernel.img`. With `gpu_mem=16` the firmware picks the cut-down
//! pair `start_cd.elf` and `fixup_cd.dat`, which leaves out codecs and 3D that a server never
//! uses, so Bramble ships both pairs, and writes `gpu_mem=16` into config.txt only when the
//! pair is on the card (whether the full `start.elf` accepts `gpu_mem=16` is not documented;
//! a card made from a folder without the pair gets the firmware's default split instead).
//! QEMU needs none of these: it loads the kernel itself.
//!
//! `--firmware DIR` takes the files from a folder, and checks them too: every file must have
//! the pinned sum of one known release, all of them the same release ([`KNOWN_RELEASES`]:
//! the fetched release, and Debian 12's `raspi-firmware` 1.20220830+ds-1 from the
//! non-free-firmware component, the offline source, installed in /usr/lib/raspi-firmware).
//! `--firmware-unpinned` skips that check, for a release Bramble does not know.
//!
//! The files come from the `boot/` folder of the Raspberry Pi firmware repository at the
//! release tag [`RELEASE`]. The sums below are those of the files of that tag as repackaged,
//! unmodified, by Debian (`raspi-firmware` 1.20240424+ds-6, which drops only the Linux kernels,
//! device trees and overlays); the `bootcode.bin` sum matches an independent public pin of the
//! same file. Every download is checked against them before it is used or cached, and a
//! mismatch is an error, never a warning.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The pinned firmware release: a tag of github.com/raspberrypi/firmware.
pub const RELEASE: &str = "1.20240424";

/// Where the files of a release are fetched from: `{BASE_URL}/{RELEASE}/boot/{name}`.
pub const BASE_URL: &str = "https://raw.githubusercontent.com/raspberrypi/firmware";

/// The page to send people to for the files by hand.
pub const HOME_PAGE: &str = "https://github.com/raspberrypi/firmware/tree/master/boot";

/// The largest firmware file Bramble accepts from the network (start.elf is about 3 MB).
const MAX_DOWNLOAD_BYTES: u64 = 16 * 1024 * 1024;

/// One firmware file: its name on the card and in the release's `boot/` folder (8.3, lower
/// case as the Raspberry Pi documentation writes it), its size and SHA-256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwareFile {
    /// File name, e.g. `bootcode.bin`.
    pub name: &'static str,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the contents, lower-case hex.
    pub sha256: &'static str,
    /// Whether a Pi cannot boot without it (`start_cd.elf`/`fixup_cd.dat` are optional, as a
    /// pair: without them config.txt leaves out `gpu_mem=16`).
    pub required: bool,
}

/// The files of [`RELEASE`] that Bramble puts on a card, with their pinned sums.
pub const FILES: [FirmwareFile; 5] = [
    FirmwareFile {
        name: "bootcode.bin",
        size: 52_476,
        sha256: "af603ebd97e7b692c30195563f7b25656eb05d57838cf1a715ebb470d1614ce4",
        required: true,
    },
    FirmwareFile {
        name: "start.elf",
        size: 2_981_056,
        sha256: "8637fb847ff62f69fbb8b98b1beff685b47cf4095580e830724f6a27fb20fee0",
        required: true,
    },
    FirmwareFile {
        name: "fixup.dat",
        size: 7_303,
        sha256: "94ae3ff8363a6a2832f173241597b6500cf67044d34155a1251fe58671dd6ce7",
        required: true,
    },
    FirmwareFile {
        name: "start_cd.elf",
        size: 809_468,
        sha256: "6832f57236f6c453cd72eac1f0ab53e265037fb75fc41301448fedb8d505f2b3",
        required: false,
    },
    FirmwareFile {
        name: "fixup_cd.dat",
        size: 3_204,
        sha256: "2d7c19e46780ef29867f8ed200a94bb77a7982f5bc41219afe864d2303ba3084",
        required: false,
    },
];

/// Debian 12's `raspi-firmware` 1.20220830+ds-1 (non-free-firmware), the same five files as
/// its package installs them in /usr/lib/raspi-firmware; sums computed from the package's
/// files (`apt-get download raspi-firmware`, `dpkg-deb -x`).
pub const DEBIAN_12_FILES: [FirmwareFile; 5] = [
    FirmwareFile {
        name: "bootcode.bin",
        size: 52_460,
        sha256: "098d5a2a61c485f757733390244319d4c992807e21ffd4e199b88de42d6e52ff",
        required: true,
    },
    FirmwareFile {
        name: "start.elf",
        size: 2_973_536,
        sha256: "9ab4a7281be2ae3c720b4d80209e3bf73dd5e787438e30d6a6820887d2e1adcc",
        required: true,
    },
    FirmwareFile {
        name: "fixup.dat",
        size: 7_262,
        sha256: "d07e005f90a24f46d0e8094dadd470593d333f028d9d0e5cf6fac7eb83654280",
        required: true,
    },
    FirmwareFile {
        name: "start_cd.elf",
        size: 803_964,
        sha256: "ffc3dd37e697c0a42020865a6ed460fdd09f084c41fa0d8f0697d36ef17304c0",
        required: false,
    },
    FirmwareFile {
        name: "fixup_cd.dat",
        size: 3_170,
        sha256: "b4df5747bfbdb77b1316f714f62aa6223fe918cf27d6b5e2e8f5f3d8335b937c",
        required: false,
    },
];

/// A firmware release whose files Bramble accepts from a folder, by their pinned sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownRelease {
    /// How the release is named in messages.
    pub name: &'static str,
    /// Its files.
    pub files: &'static [FirmwareFile; 5],
}

/// The releases `--firmware DIR` accepts: the one `--fetch-firmware` downloads, and Debian
/// 12's package.
pub const KNOWN_RELEASES: [KnownRelease; 2] = [
    KnownRelease {
        name: "1.20240424 (github.com/raspberrypi/firmware, as --fetch-firmware)",
        files: &FILES,
    },
    KnownRelease {
        name: "1.20220830 (Debian 12 raspi-firmware 1.20220830+ds-1)",
        files: &DEBIAN_12_FILES,
    },
];

/// Whether `--firmware DIR`'s files are checked against the known releases' pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pins {
    /// Every file must match one known release (the default).
    Checked,
    /// `--firmware-unpinned`: the files go on the card as they are.
    Skipped,
}

/// A firmware file's name and contents, ready to go on a card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirmwareBlob {
    /// File name, e.g. `start.elf`.
    pub name: &'static str,
    /// The contents.
    pub bytes: Vec<u8>,
}

/// Everything that can go wrong getting firmware files.
#[derive(Debug, thiserror::Error)]
pub enum FirmwareError {
    /// `--firmware DIR` lacks a file a Pi cannot boot without.
    #[error(
        "{dir} has no {name}; a Raspberry Pi cannot boot without it (get it from the boot/ \
         folder of {HOME_PAGE}, or use --fetch-firmware)"
    )]
    Missing {
        /// The folder searched.
        dir: PathBuf,
        /// The missing file's name.
        name: &'static str,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// Downloaded (or cached) bytes do not have the pinned SHA-256: a corrupted or tampered
    /// download, or a file that is not from the pinned release.
    #[error(
        "{name}: SHA-256 is {actual}, but firmware release {RELEASE} pins {expected}; \
         refusing to use it"
    )]
    ChecksumMismatch {
        /// The file's name.
        name: &'static str,
        /// The pinned sum.
        expected: &'static str,
        /// The sum of the bytes received.
        actual: String,
    },
    /// A file of `--firmware DIR` has no sum of a known release (or of the release its other
    /// files are from).
    #[error(
        "{path}: SHA-256 is {actual}, which is not the file of a firmware release Bramble \
         knows: {release} pins {expected} (a changed or damaged file, or another release; \
         --firmware-unpinned puts the folder's files on the card without this check)"
    )]
    NotPinned {
        /// The file.
        path: PathBuf,
        /// Its sum.
        actual: String,
        /// The known release the folder's other files match best.
        release: &'static str,
        /// That release's sum for the file.
        expected: &'static str,
    },
    /// Only one half of the cut-down pair is in `--firmware DIR`.
    #[error(
        "{dir} has {present} but not {absent}; the firmware needs both files of the \
         cut-down pair, or neither"
    )]
    HalfPair {
        /// The folder.
        dir: PathBuf,
        /// The file that is there.
        present: &'static str,
        /// The one that is not.
        absent: &'static str,
    },
    /// The download failed (no network, HTTP error, too large).
    #[error("downloading {url}: {message}")]
    Download {
        /// The address fetched.
        url: String,
        /// What went wrong.
        message: String,
    },
}

/// The SHA-256 of `bytes` in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Checks `bytes` against `file`'s pinned SHA-256.
pub fn verify(file: &FirmwareFile, bytes: &[u8]) -> Result<(), FirmwareError> {
    let actual = sha256_hex(bytes);
    if actual == file.sha256 {
        Ok(())
    } else {
        Err(FirmwareError::ChecksumMismatch {
            name: file.name,
            expected: file.sha256,
            actual,
        })
    }
}

/// The environment variable that replaces [`BASE_URL`], for a mirror or a local copy of the
/// repository's files (laid out as `{base}/{RELEASE}/boot/{name}`). The pinned sums still
/// apply, so a mirror cannot change what goes on the card.
pub const BASE_URL_VARIABLE: &str = "BRAMBLE_FIRMWARE_BASE_URL";

/// The download address of `file` in the pinned release.
pub fn url_of(file: &FirmwareFile) -> String {
    let base = std::env::var(BASE_URL_VARIABLE)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| BASE_URL.to_string());
    format!(
        "{}/{RELEASE}/boot/{}",
        base.trim_end_matches('/'),
        file.name
    )
}

/// Reads the firmware files from a folder given with `--firmware`: the required files must be
/// there, the cut-down pair is taken when both are present. With [`Pins::Checked`] every file
/// must have the pinned sum of one [`KNOWN_RELEASES`] entry, the same for all; the error names
/// the first file that does not. Returns the files and the release they are from (`None`
/// with [`Pins::Skipped`]).
pub fn load_dir(
    dir: &Path,
    pins: Pins,
) -> Result<(Vec<FirmwareBlob>, Option<&'static str>), FirmwareError> {
    let blobs = read_dir_files(dir)?;
    let has = |name: &str| blobs.iter().any(|blob| blob.name == name);
    match (has("start_cd.elf"), has("fixup_cd.dat")) {
        (true, false) => {
            return Err(FirmwareError::HalfPair {
                dir: dir.to_path_buf(),
                present: "start_cd.elf",
                absent: "fixup_cd.dat",
            });
        }
        (false, true) => {
            return Err(FirmwareError::HalfPair {
                dir: dir.to_path_buf(),
                present: "fixup_cd.dat",
                absent: "start_cd.elf",
            });
        }
        _ => {}
    }
    if pins == Pins::Skipped {
        return Ok((blobs, None));
    }
    let release = identify(dir, &blobs, &KNOWN_RELEASES)?;
    Ok((blobs, Some(release)))
}

/// The release of `releases` all of `blobs` are from, or an error naming the first file
/// that does not match the release the others match best.
fn identify(
    dir: &Path,
    blobs: &[FirmwareBlob],
    releases: &[KnownRelease],
) -> Result<&'static str, FirmwareError> {
    let sums: Vec<String> = blobs.iter().map(|blob| sha256_hex(&blob.bytes)).collect();
    let pinned = |release: &KnownRelease, name: &str| {
        release
            .files
            .iter()
            .find(|file| file.name == name)
            .map(|file| file.sha256)
    };
    let mismatches = |release: &KnownRelease| {
        blobs
            .iter()
            .zip(&sums)
            .filter(|(blob, sum)| pinned(release, blob.name) != Some(sum.as_str()))
            .count()
    };
    let best = releases
        .iter()
        .min_by_key(|release| mismatches(release))
        .expect("at least one known release");
    for (blob, sum) in blobs.iter().zip(&sums) {
        let expected = pinned(best, blob.name).unwrap_or("no such file");
        if expected != sum {
            return Err(FirmwareError::NotPinned {
                path: dir.join(blob.name),
                actual: sum.clone(),
                release: best.name,
                expected,
            });
        }
    }
    Ok(best.name)
}

/// The firmware files in `dir`: the required ones must be there.
fn read_dir_files(dir: &Path) -> Result<Vec<FirmwareBlob>, FirmwareError> {
    let mut blobs = Vec::new();
    for file in &FILES {
        let path = dir.join(file.name);
        match fs::read(&path) {
            Ok(bytes) => blobs.push(FirmwareBlob {
                name: file.name,
                bytes,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !file.required => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(FirmwareError::Missing {
                    dir: dir.to_path_buf(),
                    name: file.name,
                });
            }
            Err(source) => return Err(FirmwareError::Io { path, source }),
        }
    }
    Ok(blobs)
}

/// Where downloaded firmware is kept between runs: `$XDG_CACHE_HOME/bramble/firmware/RELEASE`,
/// else `~/.cache/bramble/firmware/RELEASE`, else a folder in the system's temporary folder.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("bramble").join("firmware").join(RELEASE)
}

/// Fetches the pinned firmware over HTTPS, using and filling the cache in `cache_dir`.
pub fn fetch(cache_dir: &Path) -> Result<Vec<FirmwareBlob>, FirmwareError> {
    fetch_with(&FILES, cache_dir, download)
}

/// Gets each of `files` from `cache_dir` if a copy with the right sum is there, otherwise from
/// `download(url)`; every file's bytes are checked against its pin before they are cached or
/// returned. A bad cached copy is replaced; a bad download is an error and is not cached.
pub fn fetch_with(
    files: &[FirmwareFile],
    cache_dir: &Path,
    mut download: impl FnMut(&str) -> Result<Vec<u8>, FirmwareError>,
) -> Result<Vec<FirmwareBlob>, FirmwareError> {
    let io_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FirmwareError::Io { path, source }
    };
    fs::create_dir_all(cache_dir).map_err(io_error(cache_dir))?;
    let mut blobs = Vec::new();
    for file in files {
        let cached = cache_dir.join(file.name);
        if let Ok(bytes) = fs::read(&cached)
            && verify(file, &bytes).is_ok()
        {
            blobs.push(FirmwareBlob {
                name: file.name,
                bytes,
            });
            continue;
        }
        let url = url_of(file);
        eprintln!("bramble: downloading {url}");
        let bytes = download(&url)?;
        verify(file, &bytes)?;
        // Write then rename, so that an interrupted run never leaves a partial file behind.
        let partial = cache_dir.join(format!("{}.partial", file.name));
        let mut out = fs::File::create(&partial).map_err(io_error(&partial))?;
        out.write_all(&bytes).map_err(io_error(&partial))?;
        out.sync_all().map_err(io_error(&partial))?;
        fs::rename(&partial, &cached).map_err(io_error(&cached))?;
        blobs.push(FirmwareBlob {
            name: file.name,
            bytes,
        });
    }
    Ok(blobs)
}

/// Downloads one file over HTTPS with a size limit.
fn download(url: &str) -> Result<Vec<u8>, FirmwareError> {
    let failed = |message: String| FirmwareError::Download {
        url: url.to_string(),
        message,
    };
    let mut response = ureq::get(url).call().map_err(|e| failed(e.to_string()))?;
    response
        .body_mut()
        .with_config()
        .limit(MAX_DOWNLOAD_BYTES)
        .read_to_vec()
        .map_err(|e| failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SHA-256("abc"), FIPS 180-2 appendix B.1.
    const ABC_SHA256: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn fake(name: &'static str, sha256: &'static str) -> FirmwareFile {
        FirmwareFile {
            name,
            size: 3,
            sha256,
            required: true,
        }
    }

    #[test]
    fn sha256_matches_the_standard_test_vector() {
        assert_eq!(sha256_hex(b"abc"), ABC_SHA256);
    }

    #[test]
    fn pins_are_well_formed() {
        for file in &FILES {
            assert_eq!(file.sha256.len(), 64, "{}", file.name);
            assert!(
                file.sha256
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            );
            let (stem, ext) = file.name.split_once('.').expect("has an extension");
            assert!(
                stem.len() <= 8 && ext.len() <= 3,
                "{} is not 8.3",
                file.name
            );
            assert!(url_of(file).ends_with(&format!("/{RELEASE}/boot/{}", file.name)));
        }
        let required: Vec<_> = FILES
            .iter()
            .filter(|f| f.required)
            .map(|f| f.name)
            .collect();
        assert_eq!(required, ["bootcode.bin", "start.elf", "fixup.dat"]);
    }

    #[test]
    fn verify_accepts_the_pinned_bytes_and_rejects_others() {
        let file = fake("x.bin", ABC_SHA256);
        assert!(verify(&file, b"abc").is_ok());
        match verify(&file, b"abd") {
            Err(FirmwareError::ChecksumMismatch {
                name,
                expected,
                actual,
            }) => {
                assert_eq!((name, expected), ("x.bin", ABC_SHA256));
                assert_eq!(actual, sha256_hex(b"abd"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fetch_checks_downloads_and_caches_only_good_ones() {
        let cache = tempfile::tempdir().unwrap();
        let files = [fake("good.bin", ABC_SHA256)];
        let mut calls = 0;
        let blobs = fetch_with(&files, cache.path(), |_| {
            calls += 1;
            Ok(b"abc".to_vec())
        })
        .unwrap();
        assert_eq!(
            blobs,
            [FirmwareBlob {
                name: "good.bin",
                bytes: b"abc".to_vec()
            }]
        );
        assert_eq!(fs::read(cache.path().join("good.bin")).unwrap(), b"abc");
        assert_eq!(calls, 1);

        // A second run uses the cache and does not download.
        fetch_with(&files, cache.path(), |_| panic!("should use the cache")).unwrap();

        // A corrupted cache entry is downloaded again and replaced.
        fs::write(cache.path().join("good.bin"), b"abX").unwrap();
        fetch_with(&files, cache.path(), |_| Ok(b"abc".to_vec())).unwrap();
        assert_eq!(fs::read(cache.path().join("good.bin")).unwrap(), b"abc");

        // A download with the wrong bytes is an error and is not cached.
        let files = [fake("bad.bin", ABC_SHA256)];
        let err = fetch_with(&files, cache.path(), |_| Ok(b"tampered".to_vec())).unwrap_err();
        assert!(
            matches!(
                err,
                FirmwareError::ChecksumMismatch {
                    name: "bad.bin",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(RELEASE));
        assert!(!cache.path().join("bad.bin").exists());
        assert!(!cache.path().join("bad.bin.partial").exists());
    }

    #[test]
    fn load_dir_needs_the_required_files_only() {
        let dir = tempfile::tempdir().unwrap();
        for file in FILES.iter().filter(|f| f.required) {
            fs::write(dir.path().join(file.name), file.name.as_bytes()).unwrap();
        }
        let (blobs, release) = load_dir(dir.path(), Pins::Skipped).unwrap();
        assert_eq!(release, None);
        let names: Vec<_> = blobs.iter().map(|b| b.name).collect();
        assert_eq!(names, ["bootcode.bin", "start.elf", "fixup.dat"]);
        assert_eq!(blobs[1].bytes, b"start.elf");

        // Half of the cut-down pair is refused; both are taken.
        fs::write(dir.path().join("start_cd.elf"), b"cd").unwrap();
        let err = load_dir(dir.path(), Pins::Skipped).unwrap_err();
        assert!(
            err.to_string()
                .contains("start_cd.elf but not fixup_cd.dat"),
            "{err}"
        );
        fs::write(dir.path().join("fixup_cd.dat"), b"cd").unwrap();
        assert_eq!(load_dir(dir.path(), Pins::Skipped).unwrap().0.len(), 5);

        fs::remove_file(dir.path().join("fixup.dat")).unwrap();
        let err = load_dir(dir.path(), Pins::Skipped).unwrap_err();
        assert!(
            matches!(
                err,
                FirmwareError::Missing {
                    name: "fixup.dat",
                    ..
                }
            ),
            "{err}"
        );
    }

    /// Two made-up releases of the five files: `a` and `b` hold each file's name with the
    /// release letter.
    fn releases() -> ([FirmwareFile; 5], [FirmwareFile; 5]) {
        let names = [
            "bootcode.bin",
            "start.elf",
            "fixup.dat",
            "start_cd.elf",
            "fixup_cd.dat",
        ];
        let release = |letter: &str| {
            names.map(|name| FirmwareFile {
                name,
                size: 0,
                sha256: Box::leak(
                    sha256_hex(format!("{name}{letter}").as_bytes()).into_boxed_str(),
                ),
                required: !name.contains("_cd"),
            })
        };
        (release("a"), release("b"))
    }

    #[test]
    fn a_folder_is_accepted_as_one_known_release_and_a_changed_file_is_named() {
        let (a, b) = releases();
        let (a, b): (&'static _, &'static _) = (Box::leak(Box::new(a)), Box::leak(Box::new(b)));
        let known = [
            KnownRelease {
                name: "A",
                files: a,
            },
            KnownRelease {
                name: "B",
                files: b,
            },
        ];
        let dir = tempfile::tempdir().unwrap();
        for file in b.iter() {
            fs::write(dir.path().join(file.name), format!("{}b", file.name)).unwrap();
        }
        let blobs = read_dir_files(dir.path()).unwrap();
        assert_eq!(identify(dir.path(), &blobs, &known).unwrap(), "B");

        // One changed byte in start.elf: the error names the file and the release.
        fs::write(dir.path().join("start.elf"), "start.elfB").unwrap();
        let blobs = read_dir_files(dir.path()).unwrap();
        let err = identify(dir.path(), &blobs, &known).unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(&err, FirmwareError::NotPinned { path, release: "B", .. }
                if path.ends_with("start.elf")),
            "{message}"
        );
        assert!(message.contains("start.elf: SHA-256 is"), "{message}");
        assert!(message.contains("--firmware-unpinned"), "{message}");

        // Files of two releases mixed are refused too.
        fs::write(dir.path().join("start.elf"), "start.elfb").unwrap();
        fs::write(dir.path().join("fixup.dat"), "fixup.data").unwrap();
        let blobs = read_dir_files(dir.path()).unwrap();
        let err = identify(dir.path(), &blobs, &known).unwrap_err();
        assert!(
            matches!(&err, FirmwareError::NotPinned { path, release: "B", .. }
                if path.ends_with("fixup.dat")),
            "{err}"
        );
    }

    #[test]
    fn the_real_pins_accept_the_fetched_and_the_debian_releases() {
        assert_eq!(KNOWN_RELEASES[0].files, &FILES);
        for release in KNOWN_RELEASES {
            let names: Vec<_> = release.files.iter().map(|f| f.name).collect();
            assert_eq!(
                names,
                [
                    "bootcode.bin",
                    "start.elf",
                    "fixup.dat",
                    "start_cd.elf",
                    "fixup_cd.dat"
                ]
            );
            assert!(release.files.iter().all(|f| f.sha256.len() == 64));
        }
        // No file of one release has the other's sum.
        for (a, b) in FILES.iter().zip(&DEBIAN_12_FILES) {
            assert_ne!(a.sha256, b.sha256, "{}", a.name);
        }
    }

    /// Serves `responses` (whole HTTP responses) to one connection each on 127.0.0.1 and
    /// returns the base URL.
    fn local_server(responses: Vec<Vec<u8>>) -> String {
        use std::io::{BufRead, BufReader};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for response in responses {
                let (stream, _) = listener.accept().unwrap();
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                    .unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                let mut stream = reader.into_inner();
                let _ = stream.write_all(&response);
            }
        });
        format!("http://{address}")
    }

    #[test]
    fn download_reads_the_body_and_reports_http_errors() {
        let base = local_server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc".to_vec(),
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
        ]);
        assert_eq!(download(&format!("{base}/a")).unwrap(), b"abc");
        let err = download(&format!("{base}/b")).unwrap_err();
        assert!(matches!(&err, FirmwareError::Download { .. }), "{err}");
        assert!(err.to_string().contains("404"), "{err}");
    }

    /// Checks real firmware files against the pins when a folder of them is named in
    /// `BRAMBLE_FIRMWARE_DIR` (skipped otherwise: the files are not in the repository).
    #[test]
    fn pins_match_real_files_when_available() {
        let Some(dir) = std::env::var_os("BRAMBLE_FIRMWARE_DIR") else {
            eprintln!("BRAMBLE_FIRMWARE_DIR not set; skipping");
            return;
        };
        for file in &FILES {
            let bytes = fs::read(Path::new(&dir).join(file.name)).unwrap();
            assert_eq!(bytes.len() as u64, file.size, "{}", file.name);
            verify(file, &bytes).unwrap();
        }
    }
}
