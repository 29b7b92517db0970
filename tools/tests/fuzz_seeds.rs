//! The fuzz targets' committed site-image seeds (`fuzz/seeds/site_image`, `site_index`,
//! `site_rules`) must be images of the current site format, or fuzzing starts from inputs the
//! reader refuses at the version check and never reaches the tables, rules or search index.
//! The seeds are packed here by the real packer from two small sites (one with `_redirects`,
//! `_headers`, nested 404 pages and clean URLs; one with `--search` and a listing).
//!
//! After a format change: `BRAMBLE_WRITE_FUZZ_SEEDS=1 cargo test -p bramble --test fuzz_seeds`
//! writes them again (and the test then checks what it wrote).

use std::path::{Path, PathBuf};

use bramble::pack::{PackOptions, SiteOptions, pack_site};
use bramble_site::rules::{HeaderRules, Redirects};
use bramble_site::{SiteImage, VERSION};

/// The seeds' first byte for the image targets: bit 0 asks the target to fix the length and
/// checksum fields after mutating (so mutations get past the checksum), bit 1 clear means
/// "a SITE.BIN", not a whole card (`site_index`).
const RESEAL_SITE_BIN: u8 = 0x01;

fn write(dir: &Path, path: &str, text: &str) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn seeds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds")
}

/// A site with every kind of rule, a compressible stylesheet (so gzip and brotli variants
/// exist) and nested 404 pages, packed with clean URLs.
fn small_site(dir: &Path) -> Vec<u8> {
    write(
        dir,
        "index.html",
        "<!DOCTYPE html><title>Home</title><p>home</p>\n",
    );
    write(
        dir,
        "about.html",
        "<!DOCTYPE html><title>About</title><p>about</p>\n",
    );
    write(dir, "404.html", "<p>site 404</p>\n");
    write(dir, "docs/index.html", "<p>docs</p>\n");
    write(dir, "docs/404.html", "<p>docs 404</p>\n");
    write(dir, "app/index.html", "<p>app</p>\n");
    write(
        dir,
        "css/site.css",
        &"body { margin: 0 auto; max-width: 40em; font-family: sans-serif; }\n".repeat(12),
    );
    write(
        dir,
        "_redirects",
        "# moved\n/old /about 301\n/blog/* /posts/:splat 302\n\
         /archive/:year/:slug /posts/:year-:slug 301\n/app/* /app/index.html 200\n\
         /removed /about 410\n/about.html /elsewhere 302!\n/go https://example.com/x 307\n",
    );
    write(
        dir,
        "_headers",
        "/*\n  X-Robots-Tag: noindex\n/docs/*\n  Content-Security-Policy: default-src 'self'\n  \
         Access-Control-Allow-Origin: *\n  ! X-Frame-Options\n",
    );
    pack(
        dir,
        SiteOptions {
            clean_urls: true,
            ..SiteOptions::default()
        },
    )
}

/// A site packed with `--search` and a listed folder.
fn search_site(dir: &Path) -> Vec<u8> {
    write(
        dir,
        "index.html",
        "<!DOCTYPE html><html lang=\"en\"><title>Home</title><h1>Welcome</h1>\
         <p>Welcome to the café: servers, solar panels and running.</p>\n",
    );
    write(
        dir,
        "docs/install.html",
        "<!DOCTYPE html><html lang=\"en\"><title>Installing</title><h1>Installation</h1>\
         <p>To install, write the card. Installation is quick.</p><h2>Networking</h2>\
         <p>The server takes its address by DHCP.</p>\n",
    );
    write(
        dir,
        "blog/index.html",
        "<!DOCTYPE html><html lang=\"en\"><title>Blog</title>\
         <p>We installed a server; it runs all day. 東京 ok.</p>\n",
    );
    write(dir, "downloads/a.tar.gz", "x");
    write(dir, "downloads/notes.txt", "notes\n");
    pack(
        dir,
        SiteOptions {
            search: true,
            listing: vec!["downloads/".into()],
            ..SiteOptions::default()
        },
    )
}

fn pack(dir: &Path, site: SiteOptions) -> Vec<u8> {
    let options = PackOptions {
        source_date_epoch: Some(1_700_000_000),
        cache_dir: None,
        site,
        ..PackOptions::default()
    };
    pack_site(dir, &options).expect("pack the seed site").image
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
}

/// A `site_rules` input (see `bramble_http::exercise::exercise_rules`): the section's length
/// in units of 8, the strings' length (u16), the strings, then a request path.
fn rules_seed(image: &[u8], section_field: usize, path: &str) -> Vec<u8> {
    let (offset, len) = (
        u32_at(image, section_field),
        u32_at(image, section_field + 4),
    );
    assert!(
        len > 0 && len % 8 == 0 && len / 8 <= 255,
        "section of {len} bytes"
    );
    let (strings_offset, strings_len) = (u32_at(image, 40), u32_at(image, 44));
    let mut seed = vec![(len / 8) as u8];
    seed.extend_from_slice(&image[offset..offset + len]);
    seed.extend_from_slice(&u16::try_from(strings_len).unwrap().to_le_bytes());
    seed.extend_from_slice(&image[strings_offset..strings_offset + strings_len]);
    seed.extend_from_slice(path.as_bytes());
    seed
}

/// The seeds the packer makes today, by target and file name.
fn generated() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let temp = tempfile::tempdir().unwrap();
    let small = small_site(&temp.path().join("small"));
    let search = search_site(&temp.path().join("search"));
    let prefixed = |image: &[u8]| [&[RESEAL_SITE_BIN][..], image].concat();
    vec![
        ("site_image", "small-site", prefixed(&small)),
        ("site_image", "search-site", prefixed(&search)),
        ("site_index", "small-site", prefixed(&small)),
        ("site_index", "search-site", prefixed(&search)),
        (
            "site_rules",
            "redirects",
            rules_seed(&small, 72, "/archive/2024/hello"),
        ),
        ("site_rules", "headers", rules_seed(&small, 80, "/docs/a")),
    ]
}

/// Checks one committed seed of `target` as that target reads it.
fn check_seed(target: &str, name: &str, bytes: &[u8]) -> Result<(), String> {
    match target {
        "site_image" | "site_index" => {
            let (&first, image) = bytes.split_first().ok_or("empty seed")?;
            if first & 2 != 0 {
                return Ok(()); // a whole card (site_index), not a SITE.BIN
            }
            if image.len() < 12 || u32_at(image, 8) != VERSION as usize {
                return Err(format!(
                    "{target}/{name}: not site format {VERSION} (version field {:?})",
                    image.get(8..12)
                ));
            }
            SiteImage::new_checked(image).map_err(|error| format!("{target}/{name}: {error}"))?;
            // What the fuzz target itself does with the seed, unmutated: it must get past the
            // checks and serve every file.
            let served = if target == "site_image" {
                bramble_http::exercise::exercise_image(image)
            } else {
                bramble_store::exercise::exercise_site_bin(image)
            };
            if served {
                Ok(())
            } else {
                Err(format!("{target}/{name}: the target's driver refused it"))
            }
        }
        "site_rules" => {
            let (&split, rest) = bytes.split_first().ok_or("empty seed")?;
            let (section, rest) = rest.split_at((usize::from(split) * 8).min(rest.len()));
            let strings_len = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
            let strings = &rest[2..2 + strings_len.min(rest.len() - 2)];
            let redirects = Redirects::new_checked(section, strings);
            let headers = HeaderRules::new_checked(section, strings);
            if redirects.as_ref().is_ok_and(|r| !r.is_empty())
                || headers.as_ref().is_ok_and(|h| !h.is_empty())
            {
                Ok(())
            } else {
                Err(format!(
                    "{target}/{name}: neither section reads ({:?}, {:?})",
                    redirects.err(),
                    headers.err()
                ))
            }
        }
        _ => Ok(()),
    }
}

#[test]
fn committed_site_seeds_are_the_current_format() {
    let write_seeds = std::env::var_os("BRAMBLE_WRITE_FUZZ_SEEDS").is_some();
    let generated = generated();
    for (target, name, bytes) in &generated {
        check_seed(target, name, bytes).unwrap_or_else(|problem| panic!("generated: {problem}"));
        if write_seeds {
            let dir = seeds_dir().join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
    let mut problems = Vec::new();
    for target in ["site_image", "site_index", "site_rules"] {
        let dir = seeds_dir().join(target);
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        names.sort();
        assert!(!names.is_empty(), "{} holds no seeds", dir.display());
        for path in names {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if let Err(problem) = check_seed(target, &name, &std::fs::read(&path).unwrap()) {
                problems.push(problem);
            }
        }
    }
    assert!(
        problems.is_empty(),
        "stale fuzz seeds (regenerate: BRAMBLE_WRITE_FUZZ_SEEDS=1 cargo test -p bramble --test \
         fuzz_seeds):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_seeds_cover_rules_and_search() {
    let generated = generated();
    let image_of = |name: &str| {
        let (_, _, bytes) = generated
            .iter()
            .find(|(target, n, _)| *target == "site_image" && *n == name)
            .unwrap();
        bytes[1..].to_vec()
    };
    let small = image_of("small-site");
    let image = SiteImage::new_checked(&small).unwrap();
    assert_eq!(image.index().redirects().len(), 7);
    assert_eq!(image.index().header_rules().len(), 2);
    assert!(image.get("/css/site.css").unwrap().gzip.is_some());
    let search = image_of("search-site");
    let image = SiteImage::new_checked(&search).unwrap();
    assert!(image.index().search().is_some());
    assert!(image.get("/downloads/index.json").is_some());
}
