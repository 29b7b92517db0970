//! `bramble pack` on real folder trees: what goes in, how it reads back, and every error case.

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use bramble::pack::{MAX_IMAGE_BYTES, PackError, PackOptions, pack_site};
use bramble_site::{Resolved, SiteImage};

fn write(root: &Path, relative: &str, contents: &[u8]) {
    let path = root.join(relative);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

fn page(title: &str) -> Vec<u8> {
    let mut html = format!("<!doctype html><title>{title}</title>\n");
    for i in 0..40 {
        html.push_str(&format!(
            "<p>Paragraph {i} about {title}, repeated so it compresses.</p>\n"
        ));
    }
    html.into_bytes()
}

/// Deterministic incompressible bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// A small blog.
fn blog(root: &Path) {
    write(root, "index.html", &page("home"));
    write(root, "404.html", &page("not found"));
    write(root, "blog/index.html", &page("blog"));
    write(root, "blog/first-post/index.html", &page("first post"));
    write(
        root,
        "css/site.3f2a9c1e.css",
        &b"body { color: #222; background: #fff }\n".repeat(30),
    );
    write(root, "js/app.js", &b"console.log('hello');\n".repeat(30));
    write(root, "img/photo.png", &noise(5000, 1));
    write(
        root,
        "feed.xml",
        &b"<rss><channel><item>x</item></channel></rss>\n".repeat(10),
    );
    write(root, "tiny.txt", b"hi");
    write(root, "empty.txt", b"");
    write(root, "data.unknownext", b"some unknown data");
}

fn options() -> PackOptions {
    PackOptions::default()
}

fn pack(root: &Path) -> bramble::pack::PackOutput {
    pack_site(root, &options()).expect("pack succeeds")
}

fn file_path<'a>(image: &SiteImage<'a>, path: &str) -> Option<&'a str> {
    match image.resolve(path) {
        Resolved::File(file) => Some(file.path),
        _ => None,
    }
}

#[test]
fn every_file_reads_back_with_its_precomputed_headers() {
    let dir = tempfile::tempdir().unwrap();
    blog(dir.path());
    let output = pack(dir.path());
    let image = SiteImage::new_checked(&output.image).unwrap();
    assert_eq!(image.file_count(), 11);
    assert_eq!(output.summary.files, 11);
    assert_eq!(output.summary.checksum, image.checksum());
    assert_eq!(output.summary.image_bytes, output.image.len() as u64);

    for file in image.files() {
        let on_disk = fs::read(dir.path().join(&file.path[1..])).unwrap();
        assert_eq!(
            image.body(file.identity.body),
            &on_disk[..],
            "{}",
            file.path
        );
        let tag = file.identity.etag.trim_matches('"');
        assert_eq!(tag.len(), 16, "{}", file.identity.etag);
        assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()));
        if let Some(gzip) = file.gzip {
            assert!(gzip.body.len() < on_disk.len() as u64);
            assert_eq!(gzip.etag, format!("\"{tag}-gz\""));
            let mut unpacked = Vec::new();
            flate2::read::GzDecoder::new(image.body(gzip.body))
                .read_to_end(&mut unpacked)
                .unwrap();
            assert_eq!(unpacked, on_disk, "{}", file.path);
        }
        if let Some(brotli) = file.brotli {
            assert!(brotli.body.len() < on_disk.len() as u64);
            assert_eq!(brotli.etag, format!("\"{tag}-br\""));
            let mut unpacked = Vec::new();
            brotli::Decompressor::new(image.body(brotli.body), 4096)
                .read_to_end(&mut unpacked)
                .unwrap();
            assert_eq!(unpacked, on_disk, "{}", file.path);
        }
    }
    let get = |path: &str| image.get(path).unwrap();
    // Text compresses; images and tiny or empty files keep only the identity body.
    for path in [
        "/index.html",
        "/css/site.3f2a9c1e.css",
        "/js/app.js",
        "/feed.xml",
    ] {
        assert!(
            get(path).gzip.is_some() && get(path).brotli.is_some(),
            "{path}"
        );
    }
    for path in [
        "/img/photo.png",
        "/tiny.txt",
        "/empty.txt",
        "/data.unknownext",
    ] {
        assert!(
            get(path).gzip.is_none() && get(path).brotli.is_none(),
            "{path}"
        );
    }
    assert_eq!(get("/index.html").content_type, "text/html; charset=utf-8");
    assert_eq!(get("/img/photo.png").content_type, "image/png");
    assert_eq!(
        get("/data.unknownext").content_type,
        "application/octet-stream"
    );
    assert_eq!(get("/index.html").cache_control, "no-cache");
    assert_eq!(get("/feed.xml").cache_control, "no-cache");
    assert_eq!(
        get("/css/site.3f2a9c1e.css").cache_control,
        "public, max-age=31536000, immutable"
    );
    assert_eq!(get("/js/app.js").cache_control, "public, max-age=3600");

    let summary = &output.summary;
    assert_eq!(
        summary.gzip_files,
        image.files().filter(|f| f.gzip.is_some()).count()
    );
    assert_eq!(
        summary.brotli_files,
        image.files().filter(|f| f.brotli.is_some()).count()
    );
    let raw: u64 = image.files().map(|f| f.identity.body.len()).sum();
    assert_eq!(summary.raw_bytes, raw);
    let gzip: u64 = image
        .files()
        .filter_map(|f| f.gzip)
        .map(|v| v.body.len())
        .sum();
    assert_eq!(summary.gzip_bytes, gzip);
}

#[test]
fn directory_index_add_slash_and_custom_404() {
    let dir = tempfile::tempdir().unwrap();
    blog(dir.path());
    let output = pack(dir.path());
    let image = SiteImage::new_checked(&output.image).unwrap();
    assert_eq!(file_path(&image, "/"), Some("/index.html"));
    assert_eq!(file_path(&image, "/blog/"), Some("/blog/index.html"));
    assert_eq!(
        file_path(&image, "/blog/first-post/"),
        Some("/blog/first-post/index.html")
    );
    assert!(matches!(image.resolve("/blog"), Resolved::AddSlash));
    assert!(matches!(image.resolve("/css/"), Resolved::NotFound));
    assert!(matches!(image.resolve("/nothing-here"), Resolved::NotFound));
    let not_found = image.not_found_page().expect("404.html");
    assert_eq!(image.body(not_found.identity.body), &page("not found")[..]);

    let other = tempfile::tempdir().unwrap();
    write(other.path(), "index.html", b"x");
    let output = pack(other.path());
    assert!(
        SiteImage::new_checked(&output.image)
            .unwrap()
            .not_found_page()
            .is_none()
    );
}

#[test]
fn dotfiles_are_left_out_except_well_known_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", b"x");
    write(dir.path(), ".htaccess", b"deny");
    write(dir.path(), ".git/config", b"[core]");
    write(dir.path(), "sub/.secret", b"s");
    write(
        dir.path(),
        ".well-known/security.txt",
        b"Contact: mailto:me@example.org",
    );
    write(
        dir.path(),
        "sub/.well-known/not-root.txt",
        b"only the root one is special",
    );
    let paths = |opts: &PackOptions| -> Vec<String> {
        let output = pack_site(dir.path(), opts).unwrap();
        let image = SiteImage::new_checked(&output.image).unwrap();
        image.files().map(|f| f.path.to_string()).collect()
    };
    assert_eq!(
        paths(&options()),
        ["/.well-known/security.txt", "/index.html"]
    );
    let all = paths(&PackOptions {
        include_dotfiles: true,
        ..options()
    });
    assert_eq!(
        all,
        [
            "/.git/config",
            "/.htaccess",
            "/.well-known/security.txt",
            "/index.html",
            "/sub/.secret",
            "/sub/.well-known/not-root.txt"
        ]
    );
}

#[test]
fn symlinks_to_files_and_folders_are_followed() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "shared/style.css", b"a { color: red }");
    write(outside.path(), "logo.svg", b"<svg/>");
    write(dir.path(), "index.html", b"home");
    symlink(outside.path().join("shared"), dir.path().join("assets")).unwrap();
    symlink(outside.path().join("logo.svg"), dir.path().join("logo.svg")).unwrap();
    symlink("index.html", dir.path().join("home.html")).unwrap();
    let output = pack(dir.path());
    let image = SiteImage::new_checked(&output.image).unwrap();
    let paths: Vec<&str> = image.files().map(|f| f.path).collect();
    assert_eq!(
        paths,
        [
            "/assets/style.css",
            "/home.html",
            "/index.html",
            "/logo.svg"
        ]
    );
    assert_eq!(
        image.body(image.get("/assets/style.css").unwrap().identity.body),
        b"a { color: red }"
    );
    assert_eq!(
        image.body(image.get("/home.html").unwrap().identity.body),
        b"home"
    );
}

#[test]
fn symlink_loops_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", b"x");
    write(dir.path(), "docs/page.html", b"p");
    symlink("..", dir.path().join("docs/up")).unwrap();
    match pack_site(dir.path(), &options()) {
        Err(PackError::SymlinkLoop { path }) => assert_eq!(path, dir.path().join("docs/up")),
        other => panic!("{other:?}"),
    }

    // A link chain that never resolves (a -> b -> a).
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", b"x");
    symlink("b", dir.path().join("a")).unwrap();
    symlink("a", dir.path().join("b")).unwrap();
    let error = pack_site(dir.path(), &options()).unwrap_err();
    assert!(matches!(&error, PackError::SymlinkLoop { path } if path == &dir.path().join("a")));
    assert!(error.to_string().contains("symlink loop"), "{error}");

    // Two links to the same folder are not a loop: the files appear twice.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "real/a.txt", b"a");
    symlink("real", dir.path().join("alias")).unwrap();
    let output = pack(dir.path());
    let image = SiteImage::new_checked(&output.image).unwrap();
    assert_eq!(image.file_count(), 2);
}

#[test]
fn broken_symlink_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", b"x");
    symlink("missing.css", dir.path().join("style.css")).unwrap();
    let error = pack_site(dir.path(), &options()).unwrap_err();
    match &error {
        PackError::BrokenSymlink { path, target } => {
            assert_eq!(path, &dir.path().join("style.css"));
            assert_eq!(target, Path::new("missing.css"));
        }
        other => panic!("{other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("style.css") && message.contains("missing.css"),
        "{message}"
    );
    // A broken link among excluded dotfiles does not matter.
    fs::remove_file(dir.path().join("style.css")).unwrap();
    symlink("missing", dir.path().join(".editor-lock")).unwrap();
    pack(dir.path());
}

#[test]
fn non_utf8_name_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", b"x");
    let name = OsStr::from_bytes(b"caf\xe9.html"); // Latin-1, not UTF-8
    fs::write(dir.path().join(name), b"x").unwrap();
    let error = pack_site(dir.path(), &options()).unwrap_err();
    assert!(matches!(&error, PackError::NonUtf8Name { path } if path == &dir.path().join(name)));
    assert!(error.to_string().contains("not valid UTF-8"), "{error}");
}

#[test]
fn names_that_collide_after_unicode_normalisation_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "caf\u{e9}.html", b"composed");
    write(dir.path(), "cafe\u{301}.html", b"decomposed");
    let error = pack_site(dir.path(), &options()).unwrap_err();
    match &error {
        PackError::Collision { first, second } => {
            let mut both = [first.as_str(), second.as_str()];
            both.sort();
            assert_eq!(both, ["/cafe\u{301}.html", "/caf\u{e9}.html"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(error.to_string().contains("collide"));

    // KELVIN SIGN normalises to ASCII K.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "K.txt", b"1");
    write(dir.path(), "\u{212a}.txt", b"2");
    assert!(matches!(
        pack_site(dir.path(), &options()),
        Err(PackError::Collision { .. })
    ));

    // Same letters, different folders: fine.
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a/caf\u{e9}.html", b"1");
    write(dir.path(), "b/caf\u{e9}.html", b"2");
    pack(dir.path());
}

#[test]
fn control_characters_and_special_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "bad\nname.html", b"x");
    let error = pack_site(dir.path(), &options()).unwrap_err();
    assert!(matches!(error, PackError::InvalidName { .. }), "{error:?}");

    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", b"x");
    let fifo = dir.path().join("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let error = pack_site(dir.path(), &options()).unwrap_err();
    assert!(matches!(&error, PackError::UnsupportedFileType { path } if path == &fifo));
}

#[test]
fn empty_and_missing_sites_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), ".only-a-dotfile", b"x");
    let error = pack_site(dir.path(), &options()).unwrap_err();
    assert!(matches!(error, PackError::EmptySite { .. }), "{error:?}");
    assert!(matches!(
        pack_site(&dir.path().join("missing"), &options()),
        Err(PackError::NoSuchSite(_))
    ));
    assert!(matches!(
        pack_site(&dir.path().join(".only-a-dotfile"), &options()),
        Err(PackError::NotADirectory(_))
    ));
}

#[test]
fn a_site_too_big_for_the_card_is_refused_with_the_numbers() {
    assert_eq!(MAX_IMAGE_BYTES, 4_294_967_295);
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "big.png", &noise(300_000, 2));
    write(dir.path(), "index.html", &page("x"));
    let raw = 300_000 + page("x").len() as u64;

    // Raw files over the limit: refused before any compression.
    let error = pack_site(
        dir.path(),
        &PackOptions {
            max_image_bytes: 200_000,
            ..options()
        },
    )
    .unwrap_err();
    match &error {
        PackError::TooLarge { what, bytes, limit } => {
            assert_eq!((*what, *bytes, *limit), ("the files", raw, 200_000));
        }
        other => panic!("{other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&raw.to_string()) && message.contains("200000"),
        "{message}"
    );

    // Raw files fit, but with headers and variants the image does not.
    let error = pack_site(
        dir.path(),
        &PackOptions {
            max_image_bytes: raw,
            ..options()
        },
    )
    .unwrap_err();
    assert!(
        matches!(error, PackError::TooLarge { what: "the image", bytes, limit } if bytes > limit && limit == raw),
        "{error:?}"
    );
}

#[test]
fn last_modified_comes_from_mtime_or_source_date_epoch() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "index.html", b"x");
    let file = fs::File::options()
        .write(true)
        .open(dir.path().join("index.html"))
        .unwrap();
    file.set_modified(UNIX_EPOCH + Duration::from_secs(784_111_777))
        .unwrap();
    drop(file);

    let output = pack(dir.path());
    let image = SiteImage::new_checked(&output.image).unwrap();
    let entry = image.get("/index.html").unwrap();
    assert_eq!(entry.last_modified, 784_111_777);
    assert_eq!(entry.last_modified_http, "Sun, 06 Nov 1994 08:49:37 GMT");

    let opts = PackOptions {
        source_date_epoch: Some(1_700_000_000),
        ..options()
    };
    let output = pack_site(dir.path(), &opts).unwrap();
    let image = SiteImage::new_checked(&output.image).unwrap();
    let entry = image.get("/index.html").unwrap();
    assert_eq!(entry.last_modified, 1_700_000_000);
    assert_eq!(entry.last_modified_http, "Tue, 14 Nov 2023 22:13:20 GMT");
}

#[test]
fn packs_are_reproducible_and_the_cache_changes_nothing_but_speed() {
    let dir = tempfile::tempdir().unwrap();
    blog(dir.path());
    let cache = tempfile::tempdir().unwrap();
    let cached = PackOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..options()
    };

    let cold = pack_site(dir.path(), &cached).unwrap();
    let compressible = cold.summary.compressible_files;
    assert!(compressible >= 6, "{compressible}");
    assert_eq!(cold.summary.cached_files, 0);
    let warm = pack_site(dir.path(), &cached).unwrap();
    assert_eq!(warm.summary.cached_files, compressible);
    let uncached = pack(dir.path());
    assert_eq!(uncached.summary.cached_files, 0);
    assert_eq!(cold.image, warm.image);
    assert_eq!(cold.image, uncached.image);

    // Edit one page: only it is compressed again, and the image shows the edit.
    write(dir.path(), "blog/index.html", &page("blog, edited"));
    let edited = pack_site(dir.path(), &cached).unwrap();
    assert_eq!(edited.summary.cached_files, compressible - 1);
    let image = SiteImage::new_checked(&edited.image).unwrap();
    assert_eq!(
        image.body(image.get("/blog/index.html").unwrap().identity.body),
        &page("blog, edited")[..]
    );
    assert_ne!(edited.summary.checksum, cold.summary.checksum);

    // A damaged cache entry is recomputed, not served.
    for entry in walk_files(cache.path()) {
        let mut bytes = fs::read(&entry).unwrap();
        bytes[0] ^= 0xFF;
        fs::write(&entry, bytes).unwrap();
    }
    let repaired = pack_site(dir.path(), &cached).unwrap();
    assert_eq!(repaired.summary.cached_files, 0);
    assert_eq!(repaired.image, edited.image);
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk_files(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn identical_files_share_one_body_and_one_etag() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a/index.html", &page("same"));
    write(dir.path(), "b/index.html", &page("same"));
    write(dir.path(), "c/index.html", &page("different"));
    let output = pack(dir.path());
    let image = SiteImage::new_checked(&output.image).unwrap();
    let a = image.get("/a/index.html").unwrap();
    let b = image.get("/b/index.html").unwrap();
    let c = image.get("/c/index.html").unwrap();
    assert_eq!(a.identity.etag, b.identity.etag);
    assert_ne!(a.identity.etag, c.identity.etag);
    assert_eq!(a.identity.body.offset, b.identity.body.offset);
}

#[test]
fn summary_line_is_stable() {
    let dir = tempfile::tempdir().unwrap();
    blog(dir.path());
    let output = pack(dir.path());
    let line = output.summary.to_string();
    assert!(line.starts_with("packed 11 files: raw "), "{line}");
    assert!(
        line.contains(&format!("checksum 0x{:08x};", output.summary.checksum)),
        "{line}"
    );
    assert!(
        line.contains(&format!("image {} bytes", output.image.len())),
        "{line}"
    );
    assert!(line.contains("gzip ") && line.contains("brotli "), "{line}");
}

#[test]
fn command_line_writes_the_image_and_prints_its_checksum() {
    let dir = tempfile::tempdir().unwrap();
    blog(dir.path());
    let out_dir = tempfile::tempdir().unwrap();
    let output_path = out_dir.path().join("SITE.BIN");
    let cache = out_dir.path().join("cache");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_bramble"))
            .arg("pack")
            .arg(dir.path())
            .arg("-o")
            .arg(&output_path)
            .args(extra)
            .env_remove("SOURCE_DATE_EPOCH")
            .output()
            .unwrap()
    };
    let result = run(&["--cache-dir", cache.to_str().unwrap()]);
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let stdout = String::from_utf8(result.stdout).unwrap();
    let bytes = fs::read(&output_path).unwrap();
    let image = SiteImage::new_checked(&bytes).unwrap();
    assert!(
        stdout.contains(&format!("checksum 0x{:08x}", image.checksum())),
        "{stdout}"
    );
    assert!(stdout.contains("packed 11 files"), "{stdout}");
    assert!(cache.join("v1").is_dir());
    // stderr is not a terminal here: no progress bar, nothing at all on success.
    assert!(
        result.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );

    // No temporary files are left beside the output.
    let leftovers: Vec<_> = fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 2, "{leftovers:?}");

    let result = run(&["--no-cache"]);
    let stdout = String::from_utf8(result.stdout).unwrap();
    assert!(stdout.contains("0/"), "{stdout}");

    // Errors go to stderr with the path, and the exit status says so.
    symlink("nowhere", dir.path().join("broken.html")).unwrap();
    let result = run(&["--no-cache"]);
    assert!(!result.status.success());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(stderr.contains("broken.html"), "{stderr}");

    let result = std::process::Command::new(env!("CARGO_BIN_EXE_bramble"))
        .args(["pack", dir.path().to_str().unwrap(), "-o"])
        .arg(&output_path)
        .env("SOURCE_DATE_EPOCH", "yesterday")
        .output()
        .unwrap();
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("SOURCE_DATE_EPOCH"));
}

#[test]
fn command_line_refuses_to_write_the_image_into_the_site() {
    let dir = tempfile::tempdir().unwrap();
    blog(dir.path());
    let inside = dir.path().join("blog/site.bin");
    let result = std::process::Command::new(env!("CARGO_BIN_EXE_bramble"))
        .arg("pack")
        .arg(dir.path())
        .arg("-o")
        .arg(&inside)
        .arg("--no-cache")
        .output()
        .unwrap();
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("inside the site folder"));
    assert!(!inside.exists());
}

#[test]
fn command_line_honours_source_date_epoch_for_reproducible_images() {
    let dir = tempfile::tempdir().unwrap();
    blog(dir.path());
    let out = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let path = out.path().join(name);
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_bramble"))
            .arg("pack")
            .arg(dir.path())
            .arg("-o")
            .arg(&path)
            .arg("--no-cache")
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .status()
            .unwrap();
        assert!(status.success());
        fs::read(path).unwrap()
    };
    let first = run("one.bin");
    let file = fs::File::options()
        .write(true)
        .open(dir.path().join("index.html"))
        .unwrap();
    file.set_modified(UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
    drop(file);
    let second = run("two.bin");
    assert_eq!(first, second);
    let image = SiteImage::new_checked(&first).unwrap();
    assert!(image.files().all(|f| f.last_modified == 1_700_000_000));
}

#[test]
fn writing_the_image_is_atomic_and_errors_name_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("SITE.BIN");
    bramble::pack::write_atomically(&target, b"first").unwrap();
    bramble::pack::write_atomically(&target, b"second").unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"second");
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["SITE.BIN"]);

    let missing = dir.path().join("no/such/folder/SITE.BIN");
    let error = bramble::pack::write_atomically(&missing, b"x").unwrap_err();
    assert!(matches!(&error, PackError::Write { path, .. } if path == &missing));
    assert!(
        error.to_string().contains("no/such/folder/SITE.BIN"),
        "{error}"
    );
}
