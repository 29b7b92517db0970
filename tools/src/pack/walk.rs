//! Walks a site folder: which files go in, under which URL paths, and which trees are errors.

use std::collections::HashMap;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use unicode_normalization::UnicodeNormalization;

use super::PackError;

/// One regular file to pack.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// URL path, e.g. `/blog/index.html`.
    pub url_path: String,
    /// Where it is on disk (possibly through symlinks).
    pub fs_path: PathBuf,
    /// Size in bytes when walked.
    pub len: u64,
    /// Modification time, Unix seconds (0 for times before 1970).
    pub modified: u64,
}

/// What the walk takes in and what it leaves out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkOptions {
    /// Include dotfiles and dot-directories (`/.well-known/` always is).
    pub include_dotfiles: bool,
    /// Leave out a symlink that points at nothing (reported in [`Walked::left_out`]) instead
    /// of failing.
    pub skip_broken_links: bool,
}

/// An entry of the folder that is not in the image, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOut {
    /// Where it is on disk.
    pub fs_path: PathBuf,
    /// The URL path it would have had (`/.git`, `/docs/old.html`).
    pub url_path: String,
    /// Why it is not in the image.
    pub reason: LeftOutReason,
}

/// Why an entry is not in the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeftOutReason {
    /// A dotfile or dot-directory (without `--include-dotfiles`); a directory counts once.
    Dotfile,
    /// A symlink that points at nothing (with `--skip-broken-links`).
    BrokenLink {
        /// What the link points at.
        target: PathBuf,
    },
}

/// The files to pack, in URL-path order, and what was left out, in walk order.
#[derive(Clone, Debug, Default)]
pub struct Walked {
    /// The files to pack.
    pub files: Vec<SourceFile>,
    /// What the folder holds that the image will not.
    pub left_out: Vec<LeftOut>,
}

/// Lists the files under `root` in URL-path order (see [`walk_with`]).
pub fn walk(root: &Path, include_dotfiles: bool) -> Result<Vec<SourceFile>, PackError> {
    let options = WalkOptions {
        include_dotfiles,
        ..WalkOptions::default()
    };
    Ok(walk_with(root, &options)?.files)
}

/// Lists the files under `root` in URL-path order, and what it leaves out.
///
/// Dotfiles and dot-directories are left out unless `include_dotfiles`, except `/.well-known/`
/// (RFC 8615). Symlinks are followed; a link to one of its own ancestors is a loop; a dangling
/// link is an error naming it (left out, with `skip_broken_links`). Names must be UTF-8
/// without control characters, and no two URL paths may be equal after Unicode NFC
/// normalisation (clients send either form).
pub fn walk_with(root: &Path, options: &WalkOptions) -> Result<Walked, PackError> {
    let metadata = fs::metadata(root).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            PackError::NoSuchSite(root.to_path_buf())
        } else {
            PackError::Io {
                path: root.to_path_buf(),
                source,
            }
        }
    })?;
    if !metadata.is_dir() {
        return Err(PackError::NotADirectory(root.to_path_buf()));
    }
    let mut walker = Walker {
        options: *options,
        ancestors: vec![(metadata.dev(), metadata.ino())],
        walked: Walked::default(),
    };
    walker.directory(root, "")?;
    let mut walked = walker.walked;
    walked.files.sort_by(|a, b| a.url_path.cmp(&b.url_path));
    check_collisions(&walked.files)?;
    Ok(walked)
}

struct Walker {
    options: WalkOptions,
    /// (device, inode) of every directory from the root down to the current one.
    ancestors: Vec<(u64, u64)>,
    walked: Walked,
}

impl Walker {
    fn directory(&mut self, dir: &Path, url: &str) -> Result<(), PackError> {
        let io = |source| PackError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut entries = fs::read_dir(dir)
            .map_err(io)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(io)?;
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            let path = entry.path();
            let raw_name = entry.file_name();
            let is_well_known = url.is_empty() && raw_name == ".well-known";
            if raw_name.as_bytes().starts_with(b".")
                && !self.options.include_dotfiles
                && !is_well_known
            {
                self.walked.left_out.push(LeftOut {
                    url_path: format!("{url}/{}", raw_name.to_string_lossy()),
                    fs_path: path,
                    reason: LeftOutReason::Dotfile,
                });
                continue;
            }
            let Some(name) = raw_name.to_str() else {
                return Err(PackError::NonUtf8Name { path });
            };
            if name.chars().any(char::is_control) {
                return Err(PackError::InvalidName {
                    path,
                    reason: "it contains a control character",
                });
            }
            let file_type = entry.file_type().map_err(|source| PackError::Io {
                path: path.clone(),
                source,
            })?;
            let metadata = if file_type.is_symlink() {
                match fs::metadata(&path) {
                    Ok(metadata) => metadata,
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        let target = fs::read_link(&path).unwrap_or_default();
                        if self.options.skip_broken_links {
                            self.walked.left_out.push(LeftOut {
                                url_path: format!("{url}/{name}"),
                                fs_path: path,
                                reason: LeftOutReason::BrokenLink { target },
                            });
                            continue;
                        }
                        return Err(PackError::BrokenSymlink { path, target });
                    }
                    Err(error) if error.raw_os_error() == Some(libc::ELOOP) => {
                        return Err(PackError::SymlinkLoop { path });
                    }
                    Err(source) => return Err(PackError::Io { path, source }),
                }
            } else {
                entry.metadata().map_err(|source| PackError::Io {
                    path: path.clone(),
                    source,
                })?
            };
            let child_url = format!("{url}/{name}");
            if metadata.is_dir() {
                let id = (metadata.dev(), metadata.ino());
                if self.ancestors.contains(&id) {
                    return Err(PackError::SymlinkLoop { path });
                }
                self.ancestors.push(id);
                self.directory(&path, &child_url)?;
                self.ancestors.pop();
            } else if metadata.is_file() {
                let modified = metadata
                    .modified()
                    .ok()
                    .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |since| since.as_secs());
                self.walked.files.push(SourceFile {
                    url_path: child_url,
                    fs_path: path,
                    len: metadata.len(),
                    modified,
                });
            } else {
                return Err(PackError::UnsupportedFileType { path });
            }
        }
        Ok(())
    }
}

/// Refuses two paths that are the same text in different Unicode normal forms (`café` written
/// with a precomposed `é` and with `e` + combining accent): a client could not pick one.
fn check_collisions(files: &[SourceFile]) -> Result<(), PackError> {
    let mut seen: HashMap<String, &str> = HashMap::with_capacity(files.len());
    for file in files {
        // ASCII paths go in too: some characters normalise to ASCII (KELVIN SIGN to `K`).
        let normalised: String = if file.url_path.is_ascii() {
            file.url_path.clone()
        } else {
            file.url_path.nfc().collect()
        };
        if let Some(first) = seen.insert(normalised, &file.url_path) {
            return Err(PackError::Collision {
                first: first.to_string(),
                second: file.url_path.clone(),
            });
        }
    }
    Ok(())
}
