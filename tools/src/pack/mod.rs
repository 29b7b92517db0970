//! `bramble pack`: turns a site folder into one site image (SITE.BIN), everything precomputed.
//!
//! For each file: the URL path (`dir/index.html` also answers `/dir/`), the content type
//! ([`mime`]), the cache policy ([`policy`]), Last-Modified (the file's mtime, or
//! `SOURCE_DATE_EPOCH` for reproducible builds), a strong ETag from the SHA-256 of the body
//! (`"<16 hex digits>"`, `-gz` / `-br` suffixed for the encoded variants), and gzip and brotli
//! variants at maximum settings, kept only when smaller. Compression runs on all cores (rayon)
//! and is cached by content hash ([`compress`]), so a re-pack after one edit compresses one file.
//! The image layout is in `site/FORMAT.md`.

pub mod compress;
pub mod html_text;
pub mod listing;
pub mod mime;
pub mod policy;
pub mod walk;

use bramble_site::rules_text as rules;

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bramble_site::{FileSpec, SiteFlags, SiteImageWriter, VariantSpec, http_date};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use compress::{CompressionCache, Encoding};
use walk::SourceFile;

/// The largest image the packer makes: 4 GiB less one byte, the most a FAT32 file can hold
/// (and the most the format's 32-bit offsets reach). The kernel reads only the image's index
/// at boot and bodies on demand, so the card, not the Pi's RAM, bounds the site.
pub const MAX_IMAGE_BYTES: u64 = u32::MAX as u64;

/// Everything `bramble pack` can be told.
#[derive(Clone, Debug)]
pub struct PackOptions {
    /// Include dotfiles and dot-directories (`/.well-known/` is always included).
    pub include_dotfiles: bool,
    /// Leave out symlinks that point at nothing (listed in [`PackOutput::left_out`]) instead
    /// of failing.
    pub skip_broken_links: bool,
    /// Where to cache compressed bodies; `None` compresses everything every time.
    pub cache_dir: Option<PathBuf>,
    /// Refuse images larger than this many bytes.
    pub max_image_bytes: u64,
    /// Last-Modified for every file (Unix seconds) instead of each file's mtime.
    pub source_date_epoch: Option<u64>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// How hard to compress.
    pub effort: compress::Effort,
    /// Put this text before `</body>` of every HTML page (or at its end): `bramble serve
    /// --watch` puts its live-reload script there. Never in an image for a card.
    pub inject_html: Option<String>,
    /// How the site answers: clean URLs, SPA fallback, security headers.
    pub site: SiteOptions,
}

/// What the packed site does beyond serving its files (the flags `pack` and `serve` share).
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct SiteOptions {
    /// Answer `/about.html` with 308 to `/about` (and `/dir/index.html` to `/dir/`) where the
    /// short URL serves the same file. (`/about` serves about.html either way.)
    #[arg(long)]
    pub clean_urls: bool,
    /// Serve /index.html with 200 for paths that match no file, rule or nested 404.html
    /// (single-page apps).
    #[arg(long)]
    pub spa_fallback: bool,
    /// Do not send the default security headers (X-Content-Type-Options: nosniff,
    /// Referrer-Policy: strict-origin-when-cross-origin, X-Frame-Options: SAMEORIGIN).
    #[arg(long)]
    pub no_security_headers: bool,
    /// Write a listing (HTML index.html and index.json: name, size, date) for this folder
    /// and the folders below it, where they have no index.html; repeatable. A folder holding
    /// a `.bramble-listing` file is listed too.
    #[arg(long, value_name = "FOLDER")]
    pub listing: Vec<String>,
    /// Build a search index of the HTML pages: /search?q= answers with ranked results (an
    /// HTML page, styled by the site's search.html if it has one, with {{query}} and
    /// {{results}} placeholders) and /search.json?q= with the same as JSON.
    #[arg(long)]
    pub search: bool,
}

impl SiteOptions {
    /// The site-image flags these options ask for.
    pub fn flags(&self) -> SiteFlags {
        let mut flags = 0;
        if self.clean_urls {
            flags |= SiteFlags::CLEAN_URLS;
        }
        if self.spa_fallback {
            flags |= SiteFlags::SPA_FALLBACK;
        }
        if self.no_security_headers {
            flags |= SiteFlags::NO_SECURITY_HEADERS;
        }
        SiteFlags(flags)
    }
}

impl Default for PackOptions {
    /// Pure defaults, no environment: no dotfiles, no cache, mtimes, 4 GiB, no progress bar.
    fn default() -> Self {
        PackOptions {
            include_dotfiles: false,
            skip_broken_links: false,
            cache_dir: None,
            max_image_bytes: MAX_IMAGE_BYTES,
            source_date_epoch: None,
            progress: false,
            effort: compress::Effort::Thorough,
            inject_html: None,
            site: SiteOptions::default(),
        }
    }
}

impl PackOptions {
    /// What the command line uses: the cache in `$XDG_CACHE_HOME/bramble/pack` (or
    /// `~/.cache/bramble/pack`), `SOURCE_DATE_EPOCH` when set (an invalid value is an error),
    /// and a progress bar when stderr is a terminal.
    pub fn from_env() -> Result<Self, PackError> {
        let source_date_epoch = match std::env::var("SOURCE_DATE_EPOCH") {
            Ok(value) if !value.is_empty() => Some(
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| PackError::BadSourceDateEpoch(value))?,
            ),
            _ => None,
        };
        Ok(PackOptions {
            cache_dir: compress::default_cache_dir(),
            source_date_epoch,
            progress: std::io::stderr().is_terminal(),
            ..PackOptions::default()
        })
    }
}

/// What a pack produced.
#[derive(Clone, Debug)]
pub struct PackOutput {
    /// The site image bytes (write them to SITE.BIN).
    pub image: Vec<u8>,
    /// The numbers for the closing line.
    pub summary: PackSummary,
    /// What the folder holds that the image does not (dotfiles, skipped broken links).
    pub left_out: Vec<walk::LeftOut>,
}

impl PackOutput {
    /// Warns on stderr about each broken symlink that was left out (`--skip-broken-links`).
    pub fn warn_left_out(&self) {
        for entry in &self.left_out {
            if let walk::LeftOutReason::BrokenLink { target } = &entry.reason {
                eprintln!(
                    "warning: left out {} ({}): a broken symlink to {}",
                    entry.url_path,
                    entry.fs_path.display(),
                    target.display()
                );
            }
        }
    }
}

/// The numbers of one pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackSummary {
    /// Files in the image.
    pub files: usize,
    /// Sum of the identity bodies.
    pub raw_bytes: u64,
    /// Files that kept a gzip variant.
    pub gzip_files: usize,
    /// Sum of the kept gzip variants.
    pub gzip_bytes: u64,
    /// Files that kept a brotli variant.
    pub brotli_files: usize,
    /// Sum of the kept brotli variants.
    pub brotli_bytes: u64,
    /// Non-empty files of a compressible type (both encodings were tried).
    pub compressible_files: usize,
    /// Compressible files whose both encodings came from the cache.
    pub cached_files: usize,
    /// Size of the image.
    pub image_bytes: u64,
    /// The image's CRC-32, as the kernel prints it at boot.
    pub checksum: u32,
    /// Wall time of the pack.
    pub elapsed: Duration,
    /// The search index, with `--search`.
    pub search: Option<SearchSummary>,
}

/// The numbers of a search index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchSummary {
    /// Pages indexed.
    pub pages: usize,
    /// Distinct terms.
    pub terms: usize,
    /// Bytes of the pages' text (what was indexed).
    pub text_bytes: u64,
    /// Bytes of the dictionary and document table (in the index, read at boot).
    pub dictionary_bytes: u64,
    /// Bytes of the postings (read on demand).
    pub postings_bytes: u64,
    /// Bytes of snippet text kept (read on demand).
    pub snippet_bytes: u64,
    /// Time spent reading the pages' text and building the index.
    pub elapsed: Duration,
}

/// `bytes` for people: `512 B`, `17.2 KiB`, `55.7 MiB`.
fn human(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / KIB),
        _ => format!("{:.1} MiB", bytes as f64 / (KIB * KIB)),
    }
}

impl fmt::Display for PackSummary {
    /// One line, stable enough to parse: `packed N files` and `checksum 0x%08x` always appear.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "packed {} files: raw {}, gzip {} ({} files), brotli {} ({} files); image {} bytes, \
             checksum 0x{:08x}; {:.2} s, {}/{} compressed from cache",
            self.files,
            human(self.raw_bytes),
            human(self.gzip_bytes),
            self.gzip_files,
            human(self.brotli_bytes),
            self.brotli_files,
            self.image_bytes,
            self.checksum,
            self.elapsed.as_secs_f64(),
            self.cached_files,
            self.compressible_files
        )?;
        if let Some(search) = &self.search {
            write!(
                f,
                "; search: {} pages, {} terms, index {} (dictionary {}, postings {}) for {} of \
                 text, snippets {}, {:.2} s",
                search.pages,
                search.terms,
                human(search.dictionary_bytes + search.postings_bytes),
                human(search.dictionary_bytes),
                human(search.postings_bytes),
                human(search.text_bytes),
                human(search.snippet_bytes),
                search.elapsed.as_secs_f64()
            )?;
        }
        Ok(())
    }
}

/// Every way a pack can fail.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The site path does not exist.
    #[error(
        "the site folder {} does not exist: give the folder your site generator writes \
         (Hugo's public/, Jekyll's _site/, MkDocs' site/)",
        .0.display()
    )]
    NoSuchSite(PathBuf),
    /// The site path is not a directory.
    #[error(
        "{} is a file, not a folder: give the site's folder (a packed SITE.BIN goes on a card \
         with `bramble image --site-image`)",
        .0.display()
    )]
    NotADirectory(PathBuf),
    /// Reading a file or directory failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// What was being read.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A symlink points at nothing.
    #[error(
        "broken symlink {} -> {} (it points at nothing): fix or remove the link, or pass \
         --skip-broken-links to leave it out",
        path.display(),
        target.display()
    )]
    BrokenSymlink {
        /// The link.
        path: PathBuf,
        /// What it points at.
        target: PathBuf,
    },
    /// A symlink leads back into one of its own ancestors (or to itself).
    #[error("symlink loop at {path}: it leads back into a folder that contains it")]
    SymlinkLoop {
        /// The link that closes the loop.
        path: PathBuf,
    },
    /// A file or folder name is not valid UTF-8 (URLs need UTF-8).
    #[error("{} has a name that is not valid UTF-8; rename it", path.display())]
    NonUtf8Name {
        /// The entry (shown lossily).
        path: PathBuf,
    },
    /// A name that cannot be served.
    #[error("{} cannot be served: {reason}", path.display())]
    InvalidName {
        /// The entry.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
    /// Two paths that are the same after Unicode normalisation.
    #[error("{first:?} and {second:?} collide: they are the same name in different Unicode forms")]
    Collision {
        /// The first path (URL form).
        first: String,
        /// The second path (URL form).
        second: String,
    },
    /// Something other than a file, folder or symlink (a socket, a device, a FIFO).
    #[error("{} is not a regular file or folder", path.display())]
    UnsupportedFileType {
        /// The entry.
        path: PathBuf,
    },
    /// Nothing to pack.
    #[error("{} holds no files to pack (dotfiles are left out unless --include-dotfiles)", dir.display())]
    EmptySite {
        /// The site folder.
        dir: PathBuf,
    },
    /// The site does not fit in one SITE.BIN.
    #[error(
        "the site is too big: {what} is {bytes} bytes ({}), the limit is {limit} bytes ({}), \
         the most one FAT32 file holds; remove at least {} of files",
        human(*bytes), human(*limit), human(bytes.saturating_sub(*limit))
    )]
    TooLarge {
        /// What was measured ("the files" before compression, "the image" after).
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// `SOURCE_DATE_EPOCH` is set but is not a number of seconds.
    #[error("SOURCE_DATE_EPOCH={0:?} is not a non-negative integer number of seconds")]
    BadSourceDateEpoch(String),
    /// The search template or the site's paths do not fit `--search`.
    #[error("{0}")]
    Search(String),
    /// `_redirects` or `_headers` has a problem.
    #[error("{0}")]
    Rules(#[from] bramble_site::rules_text::RulesError),
    /// The image writer refused a file.
    #[error("cannot build the image: {0}")]
    Image(#[from] bramble_site::WriteError),
    /// Writing the output failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The output file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One file, ready for the writer, with what the summary needs.
struct PackedFile {
    spec: FileSpec,
    compressible: bool,
    from_cache: bool,
    /// Made by the packer (a listing), not read from the folder.
    generated: bool,
}

/// A rule file or template that is not UTF-8 text, as an error at the line and column (in
/// characters, from 1) of its first byte that is not.
fn not_utf8(
    file: &Path,
    bytes: &[u8],
    error: std::str::Utf8Error,
) -> bramble_site::rules_text::RulesError {
    let valid = &bytes[..error.valid_up_to()];
    let line_start = valid
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |at| at + 1);
    // `valid` is UTF-8 up to here, so this never falls back.
    let column =
        std::str::from_utf8(&valid[line_start..]).map_or(1, |before| before.chars().count() + 1);
    bramble_site::rules_text::RulesError {
        file: file.to_path_buf(),
        line: valid.iter().filter(|&&b| b == b'\n').count() + 1,
        column,
        message: "not UTF-8 text".to_string(),
    }
}

/// Packs the site folder `dir` into an image.
pub fn pack_site(dir: &Path, opts: &PackOptions) -> Result<PackOutput, PackError> {
    let started = Instant::now();
    let walk::Walked {
        files: mut sources,
        left_out,
    } = walk::walk_with(
        dir,
        &walk::WalkOptions {
            include_dotfiles: opts.include_dotfiles,
            skip_broken_links: opts.skip_broken_links,
        },
    )?;
    // The rule files configure the site; they are not served (as on Netlify and Cloudflare).
    let rule_file = |name: &str| -> Result<Option<(PathBuf, String)>, PackError> {
        let Some(at) = sources
            .iter()
            .position(|f| f.url_path == format!("/{name}"))
        else {
            return Ok(None);
        };
        let path = sources[at].fs_path.clone();
        let bytes = std::fs::read(&path).map_err(|source| PackError::Io {
            path: path.clone(),
            source,
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|error| not_utf8(&dir.join(name), error.as_bytes(), error.utf8_error()))?;
        Ok(Some((dir.join(name), text)))
    };
    let redirects_file = rule_file("_redirects")?;
    let headers_file = rule_file("_headers")?;
    // A search.html with a {{results}} placeholder is the results template; any other
    // search.html (Sphinx writes a script-driven one) stays an ordinary page.
    let template_file = if opts.site.search {
        rule_file("search.html")?
            .filter(|(_, text)| text.contains("{{results}}") || text.contains("{{ results }}"))
    } else {
        None
    };
    sources.retain(|f| {
        f.url_path != "/_redirects"
            && f.url_path != "/_headers"
            && !(template_file.is_some() && f.url_path == "/search.html")
            && !f.url_path.ends_with(&format!("/{}", listing::MARKER))
    });
    if opts.site.search {
        for reserved in ["/search", "/search.json", "/search/index.html"] {
            if sources.iter().any(|f| f.url_path == reserved) {
                return Err(PackError::Search(format!(
                    "the site has {reserved}, but with --search /search and /search.json \
                     answer searches; rename it"
                )));
            }
        }
    }
    let template = match &template_file {
        Some((path, text)) => {
            bramble_site::search::build::template_pieces(text).map_err(|why| {
                PackError::Search(format!(
                    "{} cannot be the search template: {why}",
                    path.display()
                ))
            })?
        }
        None => Vec::new(),
    };
    let asked: Vec<String> = opts
        .site
        .listing
        .iter()
        .map(|f| listing::folder_path(f))
        .collect();
    let generated = listing::listings(dir, &sources, &asked, opts.source_date_epoch)?;
    let redirects = match &redirects_file {
        Some((path, text)) => {
            let parsed = rules::parse_redirects(text, path)?;
            let paths: std::collections::HashSet<&str> = sources
                .iter()
                .map(|f| f.url_path.as_str())
                .chain(generated.iter().map(|g| g.url_path.as_str()))
                .collect();
            rules::check_rewrite_targets(&parsed, text, path, |target| {
                site_serves(&paths, target)
            })?;
            parsed
        }
        None => Vec::new(),
    };
    let header_blocks = match &headers_file {
        Some((path, text)) => rules::parse_headers(text, path)?,
        None => Vec::new(),
    };
    if sources.is_empty() {
        return Err(PackError::EmptySite {
            dir: dir.to_path_buf(),
        });
    }
    let raw: u64 = sources.iter().map(|file| file.len).sum();
    if raw > opts.max_image_bytes {
        return Err(PackError::TooLarge {
            what: "the files",
            bytes: raw,
            limit: opts.max_image_bytes,
        });
    }
    let cache = opts.cache_dir.as_deref().and_then(CompressionCache::open);

    let progress = if opts.progress {
        let bar = ProgressBar::new(sources.len() as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "packing [{bar:30}] {pos}/{len} files, {elapsed} elapsed, {eta} left",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    // Largest first, so that one big file does not start last and hold up the end.
    let mut order: Vec<&SourceFile> = sources.iter().collect();
    order.sort_by_key(|file| std::cmp::Reverse(file.len));
    let packed = order
        .par_iter()
        .map(|source| {
            let result = pack_file(source, cache.as_ref(), opts);
            progress.inc(1);
            result
        })
        .collect::<Result<Vec<_>, _>>();
    progress.finish_and_clear();
    let mut packed = packed?;
    let listings: Vec<PackedFile> = generated
        .into_par_iter()
        .map(|g| pack_body(&g.url_path, g.body, g.modified, cache.as_ref(), opts.effort))
        .collect();
    packed.extend(listings);
    let search = if opts.site.search {
        Some(search_index(&mut packed, template)?)
    } else {
        None
    };

    let mut summary = PackSummary {
        files: packed.len(),
        raw_bytes: 0,
        gzip_files: 0,
        gzip_bytes: 0,
        brotli_files: 0,
        brotli_bytes: 0,
        compressible_files: 0,
        cached_files: 0,
        image_bytes: 0,
        checksum: 0,
        elapsed: Duration::ZERO,
        search: search.as_ref().map(|(_, summary)| summary.clone()),
    };
    let mut writer = SiteImageWriter::new();
    writer.set_flags(opts.site.flags());
    writer.set_redirects(redirects)?;
    writer.set_header_blocks(header_blocks)?;
    if let Some((built, _)) = search {
        writer.set_search(built)?;
    }
    for file in packed {
        summary.raw_bytes += file.spec.identity.body.len() as u64;
        if let Some(gzip) = &file.spec.gzip {
            summary.gzip_files += 1;
            summary.gzip_bytes += gzip.body.len() as u64;
        }
        if let Some(brotli) = &file.spec.brotli {
            summary.brotli_files += 1;
            summary.brotli_bytes += brotli.body.len() as u64;
        }
        summary.compressible_files += usize::from(file.compressible);
        summary.cached_files += usize::from(file.from_cache);
        writer.add(file.spec)?;
    }
    let image = writer.finish()?;
    if image.len() as u64 > opts.max_image_bytes {
        return Err(PackError::TooLarge {
            what: "the image",
            bytes: image.len() as u64,
            limit: opts.max_image_bytes,
        });
    }
    // The writer's checksum; the tests read every image back with the kernel's reader.
    let at = bramble_site::CHECKSUM_OFFSET;
    summary.checksum = u32::from_le_bytes([image[at], image[at + 1], image[at + 2], image[at + 3]]);
    summary.image_bytes = image.len() as u64;
    summary.elapsed = started.elapsed();
    Ok(PackOutput {
        image,
        summary,
        left_out,
    })
}

/// Does a request for `path` (decoded, normalised) find a file, as the engine resolves it:
/// `/dir/` its index.html, `/about` about.html when there is no such file or folder.
fn site_serves(paths: &std::collections::HashSet<&str>, path: &str) -> bool {
    if path.ends_with('/') {
        return paths.contains(format!("{path}index.html").as_str());
    }
    paths.contains(path)
        || paths.contains(format!("{path}/index.html").as_str())
        || paths.contains(format!("{path}.html").as_str())
}

/// The search index of the HTML pages among `packed` (404 pages and listings left out).
fn search_index(
    packed: &mut [PackedFile],
    template: Vec<(u32, String)>,
) -> Result<(bramble_site::search::build::BuiltSearch, SearchSummary), PackError> {
    use bramble_site::search::build::{SearchDocument, build};
    let started = Instant::now();
    packed.sort_by(|a, b| a.spec.path.cmp(&b.spec.path));
    let pages: Vec<&PackedFile> = packed
        .iter()
        .filter(|file| {
            file.spec.content_type.starts_with("text/html")
                && !file.spec.path.ends_with("/404.html")
                && !file.generated
        })
        .collect();
    let texts: Vec<(String, html_text::PageText)> = pages
        .par_iter()
        .map(|file| {
            let html = String::from_utf8_lossy(&file.spec.identity.body);
            (file.spec.path.clone(), html_text::page_text(&html))
        })
        .collect();
    // The site's language: the home page's, else the first page that says.
    let language = texts
        .iter()
        .find(|(path, _)| path == "/index.html")
        .and_then(|(_, page)| page.language.clone())
        .or_else(|| texts.iter().find_map(|(_, page)| page.language.clone()));
    let english = language
        .as_deref()
        .is_none_or(|lang| lang.starts_with("en"));
    let docs: Vec<SearchDocument> = texts
        .into_iter()
        .filter(|(_, page)| !page.noindex)
        .map(|(path, page)| {
            let title = if page.title.is_empty() {
                path.rsplit('/').next().unwrap_or(&path).to_string()
            } else {
                page.title
            };
            SearchDocument {
                path,
                title,
                headings: page.headings,
                text: page.text,
            }
        })
        .collect();
    let text_bytes = docs
        .iter()
        .map(|d| (d.title.len() + d.text.len()) as u64)
        .sum();
    let built = build(&docs, english, template);
    let summary = SearchSummary {
        pages: built.docs.len(),
        terms: built.terms.len(),
        text_bytes,
        dictionary_bytes: built.dictionary_bytes() as u64,
        postings_bytes: built.postings.len() as u64,
        snippet_bytes: built.text.len() as u64,
        elapsed: started.elapsed(),
    };
    Ok((built, summary))
}

/// Reads, hashes and compresses one file.
fn pack_file(
    source: &SourceFile,
    cache: Option<&CompressionCache>,
    opts: &PackOptions,
) -> Result<PackedFile, PackError> {
    let source_date_epoch = opts.source_date_epoch;
    let mut body = std::fs::read(&source.fs_path).map_err(|error| PackError::Io {
        path: source.fs_path.clone(),
        source: error,
    })?;
    if let Some(text) = &opts.inject_html
        && mime::content_type(&source.url_path)
            .0
            .starts_with("text/html")
    {
        body = inject_before_body_end(body, text.as_bytes());
    }
    let modified = source_date_epoch.unwrap_or(source.modified);
    let mut file = pack_body(&source.url_path, body, modified, cache, opts.effort);
    file.generated = false;
    Ok(file)
}

/// Hashes and compresses one body (a file's, or a generated listing's).
fn pack_body(
    url_path: &str,
    body: Vec<u8>,
    modified: u64,
    cache: Option<&CompressionCache>,
    effort: compress::Effort,
) -> PackedFile {
    let digest = Sha256::digest(&body);
    let hash_hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    let tag = &hash_hex[..16];
    let (content_type, compressible_type) = mime::content_type(url_path);
    // Tiny bodies get no variants: they could save less than a header line.
    let compressible = compressible_type && body.len() >= compress::MIN_COMPRESS_BYTES;
    let mut from_cache = compressible;
    let mut variant = |encoding: Encoding, suffix: &str| -> Option<VariantSpec> {
        let (compressed, hit) = match cache {
            Some(cache) => cache.get_or_compress(&hash_hex, encoding, effort, &body),
            None => (encoding.compress_with(&body, effort), false),
        };
        from_cache &= hit;
        compress::worth_keeping(body.len(), compressed.len()).then(|| VariantSpec {
            body: compressed,
            etag: format!("\"{tag}-{suffix}\""),
        })
    };
    let (gzip, brotli) = if compressible {
        // gzip first (cheap): a body that gzip cannot shrink enough does not compress (a
        // font or an archive under a text name), and brotli's far costlier attempt is skipped.
        let gzip = variant(Encoding::Gzip, "gz");
        let brotli = match gzip {
            Some(_) => variant(Encoding::Brotli, "br"),
            None => None,
        };
        (gzip, brotli)
    } else {
        (None, None)
    };
    PackedFile {
        spec: FileSpec {
            path: url_path.to_string(),
            content_type: content_type.to_string(),
            cache_control: policy::cache_control(url_path, content_type).to_string(),
            last_modified: modified,
            last_modified_http: http_date(modified),
            identity: VariantSpec {
                body,
                etag: format!("\"{tag}\""),
            },
            gzip,
            brotli,
        },
        compressible,
        from_cache: compressible && from_cache,
        generated: true,
    }
}

/// `body` with `text` inserted before its last `</body>` (any case), or appended.
fn inject_before_body_end(mut body: Vec<u8>, text: &[u8]) -> Vec<u8> {
    let at = body
        .windows(7)
        .rposition(|window| window.eq_ignore_ascii_case(b"</body>"))
        .unwrap_or(body.len());
    body.splice(at..at, text.iter().copied());
    body
}

/// Arguments of `bramble pack`.
#[derive(clap::Args, Debug)]
pub struct PackArgs {
    /// The site folder (e.g. Hugo's public/, Jekyll's _site/).
    pub site_dir: PathBuf,
    /// Where to write the site image.
    #[arg(short, long, default_value = "site.bin")]
    pub output: PathBuf,
    /// Include dotfiles and dot-folders (/.well-known/ is always included).
    #[arg(long)]
    pub include_dotfiles: bool,
    /// Leave out symlinks that point at nothing, with a warning, instead of failing.
    #[arg(long)]
    pub skip_broken_links: bool,
    /// Compress for speed (brotli quality 6, 8 or 9 by file size, gzip 6: a few times gzip -9
    /// alone, brotli bodies about 13% larger) instead of size (brotli 10, gzip 9: 15-20
    /// times gzip -9's CPU time, 2.5% larger than brotli 11); for previews and CI. Bodies already in the
    /// cache from a slower pack are used as they are.
    #[arg(long)]
    pub fast: bool,
    /// Compress everything again instead of using the compression cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Compression cache folder [default: $XDG_CACHE_HOME/bramble/pack or ~/.cache/bramble/pack].
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    pub cache_dir: Option<PathBuf>,
    /// How the site answers.
    #[command(flatten)]
    pub site: SiteOptions,
}

/// Writes `bytes` to `path` through a temporary file beside it, so a failed or interrupted
/// write never leaves a half image under the final name.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), PackError> {
    let error = |source| PackError::Write {
        path: path.to_path_buf(),
        source,
    };
    let file_name = path.file_name().ok_or_else(|| {
        error(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(file_name);
    temporary_name.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary_name);
    let result = std::fs::write(&temporary, bytes).and_then(|()| std::fs::rename(&temporary, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(error)
}

/// Would `output` land inside `site_dir` (through any symlinks)?
fn output_inside(site_dir: &Path, output: &Path) -> bool {
    let parent = match output.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match (site_dir.canonicalize(), parent.canonicalize()) {
        (Ok(site), Ok(parent)) => parent.starts_with(site),
        _ => false,
    }
}

/// Runs `bramble pack`.
pub fn run(args: PackArgs) -> anyhow::Result<()> {
    let mut opts = PackOptions::from_env()?;
    opts.include_dotfiles = args.include_dotfiles;
    opts.skip_broken_links = args.skip_broken_links;
    if args.fast {
        opts.effort = compress::Effort::Fast;
    }
    opts.site = args.site.clone();
    if args.no_cache {
        opts.cache_dir = None;
    } else if let Some(dir) = args.cache_dir {
        opts.cache_dir = Some(dir);
    }
    if output_inside(&args.site_dir, &args.output) {
        anyhow::bail!(
            "the output {} is inside the site folder {}: the next pack would include it; \
             write it somewhere else",
            args.output.display(),
            args.site_dir.display()
        );
    }
    let output = pack_site(&args.site_dir, &opts)?;
    output.warn_left_out();
    write_atomically(&args.output, &output.image)?;
    println!("{} -> {}", output.summary, args.output.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn the_script_goes_before_the_last_body_end_tag() {
        let page = b"<body><p>a</p></BODY>\n".to_vec();
        assert_eq!(
            super::inject_before_body_end(page, b"<s>"),
            b"<body><p>a</p><s></BODY>\n"
        );
        assert_eq!(
            super::inject_before_body_end(b"<p>".to_vec(), b"<s>"),
            b"<p><s>"
        );
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(17_653), "17.2 KiB");
        assert_eq!(human(58_405_683), "55.7 MiB");
        assert_eq!(human(419_430_400), "400.0 MiB");
    }
}
