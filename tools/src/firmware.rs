//! The Raspberry Pi GPU firmware a real board needs: a pinned release, its SHA-256 sums, and
//! the download behind `bramble image --fetch-firmware`.
//!
//! The BCM2835 boot ROM reads `bootcode.bin` from the card's FAT partition; that loads
//! `start.elf` (the GPU firmware) with `fixup.dat` (its memory-layout companion); the firmware
//! reads `config.txt` and loads `kernel.img`. With `gpu_mem=16` the firmware picks the cut-down
//! pair `start_cd.elf` and `fixup_cd.dat`, which leaves out codecs and 3D that a server never
//! uses, so Bramble ships both pairs. QEMU needs none of these: it loads the kernel itself.
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
    /// Whether a Pi cannot boot without it (`start_cd.elf`/`fixup_cd.dat` are optional: the
    /// firmware falls back to `start.elf`/`fixup.dat` when they are absent).
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
/// there, the optional ones are taken when present. The files are not checked against the pins,
/// so that an owner can use another firmware release on purpose.
pub fn load_dir(dir: &Path) -> Result<Vec<FirmwareBlob>, FirmwareError> {
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
        let blobs = load_dir(dir.path()).unwrap();
        let names: Vec<_> = blobs.iter().map(|b| b.name).collect();
        assert_eq!(names, ["bootcode.bin", "start.elf", "fixup.dat"]);
        assert_eq!(blobs[1].bytes, b"start.elf");

        fs::write(dir.path().join("start_cd.elf"), b"cd").unwrap();
        assert_eq!(load_dir(dir.path()).unwrap().len(), 4);

        fs::remove_file(dir.path().join("fixup.dat")).unwrap();
        let err = load_dir(dir.path()).unwrap_err();
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
