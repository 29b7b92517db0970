//! Round-trip and corruption tests: images built by the writer, read back by the reader.

use bramble_site::{
    BODY_ALIGN, BodyRequest, BodySource, BodyStatus, CHECKSUM_OFFSET, ENTRY_LEN, FileSpec,
    FormatError, HEADER_LEN, Resolved, SiteImage, SiteImageWriter, SiteIndex, VariantSpec,
    WriteError, crc32, http_date,
};

/// A small deterministic pseudo-random generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn spec(path: &str, body: &[u8], rng: &mut Rng) -> FileSpec {
    let hash = format!("{:016x}", rng.next());
    let compressible = path.ends_with(".html") || path.ends_with(".css") || path.ends_with(".js");
    let variant = |suffix: &str, len: usize| VariantSpec {
        body: body.iter().take(len).map(|b| b ^ 0x5A).collect(),
        etag: format!("\"{hash}-{suffix}\""),
    };
    let content_type = match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    };
    let modified = 1_700_000_000 + rng.below(10_000_000) as u64;
    FileSpec {
        path: path.to_string(),
        content_type: content_type.to_string(),
        cache_control: if path.ends_with(".html") {
            "no-cache"
        } else {
            "public, max-age=3600"
        }
        .to_string(),
        last_modified: modified,
        last_modified_http: http_date(modified),
        identity: VariantSpec {
            body: body.to_vec(),
            etag: format!("\"{hash}\""),
        },
        gzip: (compressible && body.len() > 4).then(|| variant("gz", body.len() / 2)),
        brotli: (compressible && body.len() > 4).then(|| variant("br", body.len() / 3)),
    }
}

/// A realistic tree: a blog with posts, tags, assets, a 404 page, .well-known and some
/// duplicate bodies, added in a shuffled order.
fn realistic_specs(seed: u64) -> Vec<FileSpec> {
    let mut rng = Rng(seed);
    let mut paths = vec![
        "/index.html".to_string(),
        "/404.html".to_string(),
        "/about/index.html".to_string(),
        "/blog/index.html".to_string(),
        "/css/site.3f2a9c1e.css".to_string(),
        "/js/app.js".to_string(),
        "/favicon.ico".to_string(),
        "/robots.txt".to_string(),
        "/.well-known/security.txt".to_string(),
        "/caf\u{e9}/men\u{fc}.html".to_string(),
        "/empty.txt".to_string(),
        "/a".to_string(),
        "/a-b/index.html".to_string(),
        "/a/index.html".to_string(),
    ];
    for post in 0..60 {
        paths.push(format!("/blog/post-{post:03}/index.html"));
        paths.push(format!("/blog/post-{post:03}/cover.png"));
    }
    for tag in ["rust", "pi", "web"] {
        paths.push(format!("/tags/{tag}/index.html"));
    }
    // Shuffle so the writer has to sort.
    for i in (1..paths.len()).rev() {
        let j = rng.below(i + 1);
        paths.swap(i, j);
    }
    paths
        .iter()
        .map(|path| {
            let len = if path == "/empty.txt" {
                0
            } else {
                rng.below(3000) + 1
            };
            let mut body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if path.ends_with("cover.png") && rng.below(4) == 0 {
                body = b"same image bytes".to_vec(); // deduplicated by the writer
            }
            spec(path, &body, &mut rng)
        })
        .collect()
}

fn build(specs: &[FileSpec]) -> Vec<u8> {
    let mut writer = SiteImageWriter::new();
    for spec in specs {
        writer.add(spec.clone()).expect("valid spec");
    }
    writer.finish().expect("image builds")
}

fn small_image() -> Vec<u8> {
    let mut rng = Rng(7);
    build(&[
        spec("/index.html", b"<h1>hello hello hello</h1>", &mut rng),
        spec("/404.html", b"<h1>gone</h1>", &mut rng),
        spec("/d/index.html", b"<p>dir</p>", &mut rng),
    ])
}

fn get_u32(image: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(image[offset..offset + 4].try_into().unwrap())
}

/// Recomputes the index checksum (over the first index-length bytes, as the header says).
fn rewrite_checksum(image: &mut [u8]) {
    let index_len = (get_u32(image, 16) as usize).min(image.len());
    image[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].fill(0);
    let sum = crc32(&image[..index_len]);
    image[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&sum.to_le_bytes());
}

fn put_u32(image: &mut [u8], offset: usize, value: u32) {
    image[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// Touches every accessor of every file, as a server would.
fn exercise(image: &SiteImage<'_>) -> usize {
    let mut total = image.len() + image.file_count() + image.checksum() as usize;
    for file in image.files() {
        total += file.path.len() + file.content_type.len() + file.cache_control.len();
        total += file.last_modified_http.len()
            + image.body(file.identity.body).len()
            + file.identity.etag.len();
        total += file.gzip.map_or(0, |v| image.body(v.body).len())
            + file.brotli.map_or(0, |v| image.body(v.body).len());
        if let Resolved::File(found) = image.resolve(file.path) {
            total += found.path.len();
        }
    }
    total + image.not_found_page().map_or(0, |f| f.path.len())
}

#[test]
fn realistic_tree_round_trips_every_field() {
    let specs = realistic_specs(1);
    let bytes = build(&specs);
    let image = SiteImage::new_checked(&bytes).expect("valid image");
    assert_eq!(image.file_count(), specs.len());
    assert_eq!(image.len(), bytes.len());
    let stored = u32::from_le_bytes(
        bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4]
            .try_into()
            .unwrap(),
    );
    assert_eq!(image.checksum(), stored);

    for spec in &specs {
        let Resolved::File(file) = image.resolve(&spec.path) else {
            panic!("{} not found", spec.path);
        };
        assert_eq!(file.path, spec.path);
        assert_eq!(file.content_type, spec.content_type);
        assert_eq!(file.cache_control, spec.cache_control);
        assert_eq!(file.last_modified, spec.last_modified);
        assert_eq!(file.last_modified_http, spec.last_modified_http);
        assert_eq!(image.body(file.identity.body), &spec.identity.body[..]);
        assert_eq!(file.identity.etag, spec.identity.etag);
        for (got, want) in [(file.gzip, &spec.gzip), (file.brotli, &spec.brotli)] {
            match (got, want) {
                (None, None) => {}
                (Some(got), Some(want)) => {
                    assert_eq!(image.body(got.body), &want.body[..]);
                    assert_eq!(got.etag, want.etag);
                }
                _ => panic!("{}: variant presence differs", spec.path),
            }
        }
        assert_eq!(
            image.get(&spec.path).map(|f| f.path),
            Some(spec.path.as_str())
        );
    }
}

#[test]
fn files_iterate_in_sorted_order_with_bodies_aligned() {
    let specs = realistic_specs(2);
    let bytes = build(&specs);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let paths: Vec<&str> = image.files().map(|f| f.path).collect();
    let mut expected: Vec<&str> = specs.iter().map(|s| s.path.as_str()).collect();
    expected.sort();
    assert_eq!(paths, expected);
    for file in image.files() {
        for variant in [Some(file.identity), file.gzip, file.brotli]
            .into_iter()
            .flatten()
        {
            assert_eq!(
                variant.body.offset as usize % BODY_ALIGN,
                0,
                "{}",
                file.path
            );
        }
    }
    assert!(image.entry(specs.len()).is_none());
    assert_eq!(image.entry(0).unwrap().path, expected[0]);
}

#[test]
fn identical_bodies_are_stored_once() {
    let mut rng = Rng(3);
    let body = vec![42u8; 10_000];
    let one = build(&[spec("/a.png", &body, &mut rng)]);
    let two = build(&[
        spec("/a.png", &body, &mut rng),
        spec("/b.png", &body, &mut rng),
    ]);
    assert!(
        two.len() < one.len() + 1000,
        "{} vs {}",
        two.len(),
        one.len()
    );
}

#[test]
fn directory_index_add_slash_and_misses() {
    let bytes = build(&realistic_specs(4));
    let image = SiteImage::new_checked(&bytes).unwrap();
    let file = |path: &str| match image.resolve(path) {
        Resolved::File(file) => Some(file.path),
        _ => None,
    };
    assert_eq!(file("/"), Some("/index.html"));
    assert_eq!(file("/about/"), Some("/about/index.html"));
    assert_eq!(file("/blog/post-007/"), Some("/blog/post-007/index.html"));
    assert_eq!(
        file("/caf\u{e9}/men\u{fc}.html"),
        Some("/caf\u{e9}/men\u{fc}.html")
    );
    assert!(matches!(image.resolve("/about"), Resolved::AddSlash));
    assert!(matches!(
        image.resolve("/blog/post-007"),
        Resolved::AddSlash
    ));
    assert!(matches!(image.resolve("/a-b"), Resolved::AddSlash));
    // A file named like a directory wins over the slash redirect.
    assert_eq!(file("/a"), Some("/a"));
    assert_eq!(file("/a/"), Some("/a/index.html"));
    for miss in [
        "",
        "nope",
        "/nope",
        "/nope/",
        "/about/index",
        "/blog/post-007/cover",
        "/css/",
        "/tags",
        "/index.htm",
        "/index.html/",
        "/index.html/index.html",
        "/zzz",
        "/\u{0}",
    ] {
        let resolved = image.resolve(miss);
        // "/tags" has no /tags/index.html, so no redirect either.
        assert!(
            matches!(resolved, Resolved::NotFound),
            "{miss:?}: {resolved:?}"
        );
    }
    assert_eq!(image.not_found_page().map(|f| f.path), Some("/404.html"));
}

#[test]
fn image_without_404_page_has_none() {
    let mut rng = Rng(5);
    let bytes = build(&[spec("/index.html", b"x", &mut rng)]);
    let image = SiteImage::new_checked(&bytes).unwrap();
    assert!(image.not_found_page().is_none());
    let empty = SiteImageWriter::new().finish().unwrap();
    let image = SiteImage::new_checked(&empty).unwrap();
    assert_eq!(image.file_count(), 0);
    assert!(matches!(image.resolve("/"), Resolved::NotFound));
    assert_eq!(image.files().count(), 0);
}

#[test]
fn every_truncation_is_rejected() {
    let bytes = small_image();
    for len in 0..bytes.len() {
        let result = SiteImage::new_checked(&bytes[..len]);
        assert!(result.is_err(), "truncated to {len} accepted");
    }
    assert!(SiteImage::new_checked(&bytes).is_ok());
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        SiteImage::new_checked(&longer),
        Err(FormatError::LengthMismatch { .. })
    ));
}

#[test]
fn every_flipped_byte_is_rejected() {
    let bytes = small_image();
    for position in 0..bytes.len() {
        for mask in [0x01u8, 0x80, 0xFF] {
            let mut corrupt = bytes.clone();
            corrupt[position] ^= mask;
            assert!(
                SiteImage::new_checked(&corrupt).is_err(),
                "flip {mask:#x} at {position} accepted"
            );
        }
    }
}

#[test]
fn wrong_version_is_rejected_even_with_a_good_checksum() {
    // 1: the whole-image format; 2: records without each body's CRC-32 (96 bytes); 3: a
    // 64-byte header without the site flags and the rules, redirect and search sections.
    for old in [1, 2, 3] {
        let mut bytes = small_image();
        put_u32(&mut bytes, 8, old);
        rewrite_checksum(&mut bytes);
        let error = SiteImage::new_checked(&bytes).unwrap_err();
        assert_eq!(error, FormatError::UnsupportedVersion { found: old });
        let index = &bytes[..get_u32(&bytes, 16) as usize];
        assert_eq!(SiteIndex::new_checked(index).unwrap_err(), error);
        assert_eq!(
            error.to_string(),
            format!(
                "site image format version {old}, this build reads version 4 \
                 (pack the site again with this version's bramble)"
            )
        );
    }
}

#[test]
fn absurd_header_offsets_are_rejected() {
    let original = small_image();
    let index_len = get_u32(&original, 16);
    // (field offset, value, expected error)
    let cases = [
        (12, 65, FormatError::BadHeader),                   // header length
        (28, 95, FormatError::BadHeader),                   // entry length
        (56, 3000, FormatError::BadHeader),                 // segment length not a power of 2
        (56, 2048, FormatError::BadHeader),                 // segment length too short
        (56, 2 << 20, FormatError::BadHeader),              // segment length too long
        (16, 63, FormatError::BadHeader),                   // index shorter than the header
        (60, index_len - 1, FormatError::BadHeader),        // image shorter than its index
        (24, u32::MAX, FormatError::RegionOutOfBounds),     // file count
        (24, 1_000_000, FormatError::RegionOutOfBounds),    // file count
        (32, u32::MAX - 7, FormatError::RegionOutOfBounds), // table offset
        (32, 0, FormatError::RegionOutOfBounds),            // table over the header
        (32, 68, FormatError::RegionOutOfBounds),           // misaligned table
        (36, u32::MAX - 7, FormatError::RegionOutOfBounds), // segment table offset
        (36, 64, FormatError::RegionOutOfBounds),           // segment table over the file table
        (40, u32::MAX - 7, FormatError::RegionOutOfBounds), // strings offset
        (44, u32::MAX, FormatError::RegionOutOfBounds),     // strings length
        (48, u32::MAX - 511, FormatError::RegionOutOfBounds), // bodies offset
        (48, 512 + 8, FormatError::RegionOutOfBounds),      // bodies offset not a block
        (48, 0, FormatError::RegionOutOfBounds),            // bodies over the index
        (52, u32::MAX, FormatError::RegionOutOfBounds),     // bodies length
    ];
    for (field, value, expected) in cases {
        let mut bytes = original.clone();
        put_u32(&mut bytes, field, value);
        rewrite_checksum(&mut bytes);
        assert_eq!(
            SiteImage::new_checked(&bytes).unwrap_err(),
            expected,
            "field {field} = {value}"
        );
    }
    // An index length past the bytes given: a truncated file, named with both lengths.
    let mut bytes = original.clone();
    put_u32(&mut bytes, 16, u32::MAX);
    put_u32(&mut bytes, 60, u32::MAX);
    rewrite_checksum(&mut bytes);
    assert!(matches!(
        SiteImage::new_checked(&bytes),
        Err(FormatError::LengthMismatch {
            declared: u32::MAX,
            ..
        })
    ));
}

#[test]
fn absurd_record_references_are_rejected() {
    let original = small_image();
    let record = HEADER_LEN; // first record
    for field in [0, 8, 16, 24, 48, 56] {
        for (offset, len) in [
            (u32::MAX, 1),
            (0, u32::MAX),
            (u32::MAX, u32::MAX),
            (1 << 20, 4),
        ] {
            let mut bytes = original.clone();
            put_u32(&mut bytes, record + field, offset);
            put_u32(&mut bytes, record + field + 4, len);
            rewrite_checksum(&mut bytes);
            assert_eq!(
                SiteImage::new_checked(&bytes).unwrap_err(),
                FormatError::EntryOutOfBounds { index: 0 },
                "field {field} = ({offset}, {len})"
            );
        }
    }
}

#[test]
fn structural_errors_are_named() {
    let original = small_image();
    let image = SiteImage::new_checked(&original).unwrap();
    let strings_offset = get_u32(&original, 40) as usize;

    // Swap the first two records: paths no longer sorted.
    let mut bytes = original.clone();
    let (first, second) = (HEADER_LEN, HEADER_LEN + ENTRY_LEN);
    let record: Vec<u8> = bytes[first..second].to_vec();
    bytes.copy_within(second..second + ENTRY_LEN, first);
    bytes[second..second + ENTRY_LEN].copy_from_slice(&record);
    rewrite_checksum(&mut bytes);
    assert_eq!(
        SiteImage::new_checked(&bytes).unwrap_err(),
        FormatError::UnsortedPaths { index: 1 }
    );

    // Point the second record's path at the first's: a duplicate.
    let mut bytes = original.clone();
    bytes.copy_within(first..first + 8, second);
    rewrite_checksum(&mut bytes);
    assert_eq!(
        SiteImage::new_checked(&bytes).unwrap_err(),
        FormatError::UnsortedPaths { index: 1 }
    );

    // The first string in the region is the first record's path ("/404.html").
    assert_eq!(image.entry(0).unwrap().path, "/404.html");
    let mut bytes = original.clone();
    bytes[strings_offset + 1] = 0xFF;
    rewrite_checksum(&mut bytes);
    assert_eq!(
        SiteImage::new_checked(&bytes).unwrap_err(),
        FormatError::InvalidUtf8 { index: 0 }
    );

    let mut bytes = original.clone();
    bytes[strings_offset] = b'x';
    rewrite_checksum(&mut bytes);
    assert_eq!(
        SiteImage::new_checked(&bytes).unwrap_err(),
        FormatError::BadPath { index: 0 }
    );

    // Content type of record 0 gets a line break: header injection refused.
    let ct_offset =
        u32::from_le_bytes(original[first + 8..first + 12].try_into().unwrap()) as usize;
    let mut bytes = original.clone();
    bytes[strings_offset + ct_offset] = b'\n';
    rewrite_checksum(&mut bytes);
    assert_eq!(
        SiteImage::new_checked(&bytes).unwrap_err(),
        FormatError::BadHeaderValue { index: 0 }
    );

    // Unknown flag bit, and reserved bytes.
    for (field, value) in [(40, 4), (44, 1)] {
        let mut bytes = original.clone();
        put_u32(&mut bytes, first + field, value);
        rewrite_checksum(&mut bytes);
        assert_eq!(
            SiteImage::new_checked(&bytes).unwrap_err(),
            FormatError::BadFlags { index: 0 }
        );
    }
    // Flags cleared while the variant references stay: not canonical.
    let mut bytes = original.clone();
    assert_ne!(image.entry(0).unwrap().gzip.is_some() as u32, 0);
    put_u32(&mut bytes, first + 40, 0);
    rewrite_checksum(&mut bytes);
    assert_eq!(
        SiteImage::new_checked(&bytes).unwrap_err(),
        FormatError::BadFlags { index: 0 }
    );
}

#[test]
fn random_mutations_with_valid_checksums_never_panic() {
    let original = small_image();
    let mut rng = Rng(0x5EED);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut bytes = original.clone();
        for _ in 0..=rng.below(4) {
            let position = rng.below(bytes.len());
            bytes[position] = match rng.below(3) {
                0 => rng.next() as u8,
                1 => bytes[position].wrapping_add(1),
                _ => 0xFF,
            };
        }
        rewrite_checksum(&mut bytes);
        if let Ok(image) = SiteImage::new_checked(&bytes) {
            accepted += 1;
            exercise(&image);
            for path in ["/", "/d", "/d/", "/index.html", "/404.html", "/x"] {
                let _ = image.resolve(path);
            }
        }
    }
    // Some mutations (e.g. in bodies or timestamps) keep the image valid; most do not.
    assert!(accepted > 0 && accepted < 20_000, "{accepted}");
}

#[test]
fn writer_refuses_bad_input() {
    let mut rng = Rng(9);
    let mut writer = SiteImageWriter::new();
    for bad in ["", "/", "x", "/a/", "/a//b", "/../a", "/a\r\nb"] {
        assert_eq!(
            writer.add(spec(bad, b"x", &mut rng)).unwrap_err(),
            WriteError::InvalidPath(bad.to_string())
        );
    }
    let mut bad = spec("/a", b"x", &mut rng);
    bad.content_type = "text/html\r\nX-Evil: 1".into();
    assert!(matches!(
        writer.add(bad),
        Err(WriteError::InvalidHeaderValue { .. })
    ));
    let mut bad = spec("/a", b"x", &mut rng);
    bad.identity.etag = "W/\"weak\"".into();
    assert!(matches!(
        writer.add(bad),
        Err(WriteError::InvalidEtag { .. })
    ));

    writer.add(spec("/same", b"1", &mut rng)).unwrap();
    writer.add(spec("/same", b"2", &mut rng)).unwrap();
    assert_eq!(
        writer.finish().unwrap_err(),
        WriteError::DuplicatePath("/same".into())
    );
}

#[test]
fn format_errors_print_their_numbers() {
    let error = FormatError::ChecksumMismatch {
        stored: 0x1234_abcd,
        computed: 1,
    };
    assert_eq!(
        error.to_string(),
        "site image checksum mismatch: stored 0x1234abcd, computed 0x00000001"
    );
}

/// A site with pages small enough to share segments and files spanning several, in 4 KiB
/// segments so that a few kilobytes exercise the segment rules.
fn segmented_image() -> (Vec<FileSpec>, Vec<u8>) {
    let mut rng = Rng(11);
    let mut specs = Vec::new();
    for page in 0..40 {
        let len = 200 + rng.below(1500);
        let body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        specs.push(spec(&format!("/docs/page-{page:02}.html"), &body, &mut rng));
    }
    for big in 0..3 {
        let body: Vec<u8> = (0..9000 + big * 5000).map(|_| rng.next() as u8).collect();
        specs.push(spec(&format!("/media/big-{big}.bin"), &body, &mut rng));
    }
    let mut writer = SiteImageWriter::with_segment_len(4096).unwrap();
    for spec in &specs {
        writer.add(spec.clone()).unwrap();
    }
    (specs, writer.finish().unwrap())
}

#[test]
fn the_index_alone_is_enough_to_resolve_and_locate_bodies() {
    let (specs, bytes) = segmented_image();
    let index_len = SiteIndex::index_len(&bytes[..HEADER_LEN]).unwrap();
    assert!(
        index_len < bytes.len() / 10,
        "{index_len} of {}",
        bytes.len()
    );
    let index = SiteIndex::new_checked(&bytes[..index_len]).unwrap();
    let image = SiteImage::new_checked(&bytes).unwrap();
    assert_eq!(index.checksum(), image.checksum());
    assert_eq!(index.image_len() as usize, bytes.len());
    assert_eq!(index.bodies_offset() as usize % BODY_ALIGN, 0);
    assert!(index.bodies_offset() as usize >= index_len);
    for spec in &specs {
        let file = index.get(&spec.path).unwrap();
        assert_eq!(image.body(file.identity.body), &spec.identity.body[..]);
        assert_eq!(index.path(file.index), spec.path);
    }
    assert_eq!(index.path(u32::MAX), "");
    // One byte short of the index: a truncated file, named as such.
    assert_eq!(
        SiteIndex::new_checked(&bytes[..index_len - 1]).unwrap_err(),
        FormatError::LengthMismatch {
            declared: index_len as u32,
            actual: index_len - 1
        }
    );
    assert_eq!(
        SiteIndex::index_len(&bytes[..HEADER_LEN - 1]).unwrap_err(),
        FormatError::TooShort {
            len: HEADER_LEN - 1
        }
    );
}

#[test]
fn segment_arithmetic_agrees_with_division() {
    let (_, bytes) = segmented_image();
    let index_len = SiteIndex::index_len(&bytes[..HEADER_LEN]).unwrap();
    let index = SiteIndex::new_checked(&bytes[..index_len]).unwrap();
    let len = index.segment_len();
    assert_eq!(len, 4096);
    assert_eq!(index.segment_count(), index.bodies_len().div_ceil(len));
    for offset in [
        0,
        1,
        len - 1,
        len,
        len + 1,
        3 * len - 1,
        index.bodies_len(),
        u32::MAX,
    ] {
        assert_eq!(index.segment_of(offset), offset / len, "offset {offset}");
    }
    let last = index.segment_count() - 1;
    let (start, last_len) = index.segment(last).unwrap();
    assert_eq!(start + last_len, index.bodies_len());
    assert_eq!(index.segment(last + 1), None);
}

#[test]
fn a_corrupt_body_fails_only_its_segment() {
    let (specs, bytes) = segmented_image();
    let index = SiteIndex::new_checked(&bytes).unwrap();
    let victim = index.get(&specs[7].path).unwrap().identity.body;
    let mut corrupt = bytes.clone();
    corrupt[(index.bodies_offset() + victim.offset + 3) as usize] ^= 0x10;
    // The index is untouched, so an index-first reader still starts...
    assert!(SiteIndex::new_checked(&corrupt).is_ok());
    // ...and a whole-image check names the segment.
    let segment = victim.offset / index.segment_len();
    match SiteImage::new_checked(&corrupt).unwrap_err() {
        FormatError::SegmentChecksumMismatch {
            segment: found,
            stored,
            ..
        } => {
            assert_eq!(found, segment);
            assert_eq!(Some(stored), index.segment_checksum(segment));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn small_files_keep_their_variants_in_one_segment_and_come_first() {
    let (specs, bytes) = segmented_image();
    let index = SiteIndex::new_checked(&bytes).unwrap();
    let segment_len = index.segment_len();
    assert_eq!(segment_len, 4096);
    let mut last_small_end = 0;
    let mut first_large_start = u32::MAX;
    for spec in &specs {
        let file = index.get(&spec.path).unwrap();
        let variants: Vec<_> = [Some(file.identity), file.gzip, file.brotli]
            .into_iter()
            .flatten()
            .map(|v| v.body)
            .filter(|b| !b.is_empty())
            .collect();
        let start = variants.iter().map(|b| b.offset).min().unwrap();
        let end = variants.iter().map(|b| b.offset + b.len).max().unwrap();
        let footprint: u32 = variants.iter().map(|b| b.len.next_multiple_of(512)).sum();
        if footprint <= segment_len {
            assert_eq!(
                start / segment_len,
                (end - 1) / segment_len,
                "{}: variants split across segments",
                spec.path
            );
            // Side by side: nothing else between a file's variants.
            assert!(end - start <= footprint, "{}", spec.path);
            last_small_end = last_small_end.max(end);
        } else {
            first_large_start = first_large_start.min(start);
        }
    }
    assert!(last_small_end <= first_large_start);
    assert!(index.segment_count() > 5);
    let (offset, len) = index.segment(index.segment_count() - 1).unwrap();
    assert_eq!(offset + len, index.bodies_len());
    assert!(index.segment(index.segment_count()).is_none());
    assert!(index.segment_checksum(index.segment_count()).is_none());
}

#[test]
fn the_image_in_ram_is_a_body_source() {
    let (specs, bytes) = segmented_image();
    let image = SiteImage::new_checked(&bytes).unwrap();
    let spec = specs.last().unwrap();
    let body = image.get(&spec.path).unwrap().identity.body;
    let mut out = vec![0u8; 1000];
    let request = |offset| BodyRequest {
        body,
        offset,
        lookup: true,
    };
    assert_eq!(image.read(request(0), &mut []), BodyStatus::Ready(0));
    assert_eq!(image.read(request(10), &mut out), BodyStatus::Ready(1000));
    assert_eq!(out[..], spec.identity.body[10..1010]);
    let tail = body.len - 5;
    assert_eq!(image.read(request(tail), &mut out), BodyStatus::Ready(5));
    assert_eq!(
        image.read(request(body.len + 1), &mut out),
        BodyStatus::Failed
    );
    let outside = bramble_site::Body {
        offset: u32::MAX - 2,
        ..body
    };
    let request = BodyRequest {
        body: outside,
        offset: 0,
        lookup: false,
    };
    assert_eq!(image.read(request, &mut out), BodyStatus::Failed);
}

#[test]
fn writer_refuses_bad_segment_lengths() {
    for bad in [0, 1000, 2048, 4097, 2 << 20] {
        assert_eq!(
            SiteImageWriter::with_segment_len(bad).unwrap_err(),
            WriteError::BadSegmentLength(bad)
        );
    }
}

#[test]
fn every_body_carries_its_crc_and_a_whole_image_checks_it() {
    let (specs, bytes) = segmented_image();
    let image = SiteImage::new_checked(&bytes).unwrap();
    for spec in &specs {
        let file = image.get(&spec.path).unwrap();
        assert_eq!(file.identity.body.crc, crc32(&spec.identity.body));
        if let (Some(got), Some(want)) = (file.gzip, &spec.gzip) {
            assert_eq!(got.body.crc, crc32(&want.body));
        }
    }
    // A record whose identity CRC is wrong: the index still reads (its checksum resealed),
    // a whole-image check names the file.
    let mut bytes = bytes.clone();
    let first = HEADER_LEN;
    let crc_at = first + 96;
    let value = get_u32(&bytes, crc_at) ^ 1;
    put_u32(&mut bytes, crc_at, value);
    rewrite_checksum(&mut bytes);
    assert!(SiteIndex::new_checked(&bytes).is_ok());
    assert_eq!(
        SiteImage::new_checked(&bytes).unwrap_err(),
        FormatError::BodyChecksumMismatch { index: 0 }
    );
    // The CRCs of absent variants, and the last reserved word, must be zero.
    let mut rng = Rng(12);
    let original = build(&[spec("/a.png", b"an image", &mut rng)]);
    for field in [100, 104, 108] {
        let mut bytes = original.clone();
        put_u32(&mut bytes, HEADER_LEN + field, 7);
        rewrite_checksum(&mut bytes);
        let error = SiteIndex::new_checked(&bytes).unwrap_err();
        assert!(
            matches!(error, FormatError::BadFlags { .. }),
            "field {field}: {error:?}"
        );
    }
}
