//! Content types by file extension, and which types are worth compressing.
//!
//! Our own table rather than a crate: it is short, it covers what static site generators emit,
//! and it states the `charset` and compressibility decisions in one place. Extensions match
//! case-insensitively; anything unknown is `application/octet-stream`.

/// The type sent for files whose extension is not in the table.
pub const UNKNOWN: &str = "application/octet-stream";

/// `(extension, content type, compress?)`. Text types carry `; charset=utf-8`: static site
/// generators write UTF-8, and without it browsers guess. Formats that are already compressed
/// (images other than SVG/ICO/BMP, WOFF/WOFF2, audio, video, archives, PDF) are not recompressed.
const TABLE: &[(&str, &str, bool)] = &[
    // Documents
    ("html", "text/html; charset=utf-8", true),
    ("htm", "text/html; charset=utf-8", true),
    ("xhtml", "application/xhtml+xml; charset=utf-8", true),
    ("css", "text/css; charset=utf-8", true),
    ("js", "text/javascript; charset=utf-8", true),
    ("mjs", "text/javascript; charset=utf-8", true),
    ("cjs", "text/javascript; charset=utf-8", true),
    ("json", "application/json; charset=utf-8", true),
    ("jsonld", "application/ld+json; charset=utf-8", true),
    ("map", "application/json; charset=utf-8", true),
    (
        "webmanifest",
        "application/manifest+json; charset=utf-8",
        true,
    ),
    ("xml", "application/xml; charset=utf-8", true),
    ("xsl", "application/xslt+xml; charset=utf-8", true),
    ("rss", "application/rss+xml; charset=utf-8", true),
    ("atom", "application/atom+xml; charset=utf-8", true),
    ("txt", "text/plain; charset=utf-8", true),
    ("md", "text/markdown; charset=utf-8", true),
    ("csv", "text/csv; charset=utf-8", true),
    ("ics", "text/calendar; charset=utf-8", true),
    ("vcf", "text/vcard; charset=utf-8", true),
    ("yaml", "application/yaml; charset=utf-8", true),
    ("yml", "application/yaml; charset=utf-8", true),
    ("toml", "application/toml; charset=utf-8", true),
    ("wasm", "application/wasm", true),
    ("pdf", "application/pdf", false),
    // Images
    ("svg", "image/svg+xml; charset=utf-8", true),
    ("png", "image/png", false),
    ("apng", "image/apng", false),
    ("jpg", "image/jpeg", false),
    ("jpeg", "image/jpeg", false),
    ("gif", "image/gif", false),
    ("webp", "image/webp", false),
    ("avif", "image/avif", false),
    ("jxl", "image/jxl", false),
    ("ico", "image/x-icon", true),
    ("bmp", "image/bmp", true),
    // Fonts
    ("woff", "font/woff", false),
    ("woff2", "font/woff2", false),
    ("ttf", "font/ttf", true),
    ("otf", "font/otf", true),
    ("eot", "application/vnd.ms-fontobject", true),
    // Audio and video
    ("mp3", "audio/mpeg", false),
    ("ogg", "audio/ogg", false),
    ("oga", "audio/ogg", false),
    ("opus", "audio/ogg", false),
    ("wav", "audio/wav", true),
    ("flac", "audio/flac", false),
    ("m4a", "audio/mp4", false),
    ("mp4", "video/mp4", false),
    ("webm", "video/webm", false),
    ("ogv", "video/ogg", false),
    ("vtt", "text/vtt; charset=utf-8", true),
    // Archives and downloads
    ("zip", "application/zip", false),
    ("gz", "application/gzip", false),
    ("tgz", "application/gzip", false),
    ("br", "application/octet-stream", false),
    ("zst", "application/zstd", false),
    ("xz", "application/x-xz", false),
    ("7z", "application/x-7z-compressed", false),
    ("tar", "application/x-tar", true),
    ("epub", "application/epub+zip", false),
];

/// The content type and compressibility for a URL path (by its final extension).
pub fn content_type(path: &str) -> (&'static str, bool) {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((stem, extension)) = name.rsplit_once('.') else {
        return (UNKNOWN, false);
    };
    if stem.is_empty() && !name[1..].contains('.') {
        // ".htaccess" is a dotfile with no extension, not a file of type "htaccess".
        return (UNKNOWN, false);
    }
    TABLE
        .iter()
        .find(|(known, _, _)| known.eq_ignore_ascii_case(extension))
        .map_or((UNKNOWN, false), |&(_, content_type, compress)| {
            (content_type, compress)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_modern_sites_need() {
        let cases = [
            ("/index.html", "text/html; charset=utf-8"),
            ("/a/b.HTM", "text/html; charset=utf-8"),
            ("/s.css", "text/css; charset=utf-8"),
            ("/app.js", "text/javascript; charset=utf-8"),
            ("/mod.mjs", "text/javascript; charset=utf-8"),
            ("/data.json", "application/json; charset=utf-8"),
            ("/sitemap.xml", "application/xml; charset=utf-8"),
            ("/feed.rss", "application/rss+xml; charset=utf-8"),
            ("/feed.atom", "application/atom+xml; charset=utf-8"),
            ("/logo.svg", "image/svg+xml; charset=utf-8"),
            ("/p.png", "image/png"),
            ("/p.jpg", "image/jpeg"),
            ("/p.JPEG", "image/jpeg"),
            ("/p.gif", "image/gif"),
            ("/p.webp", "image/webp"),
            ("/p.avif", "image/avif"),
            ("/favicon.ico", "image/x-icon"),
            ("/f.woff", "font/woff"),
            ("/f.woff2", "font/woff2"),
            ("/f.ttf", "font/ttf"),
            ("/doc.pdf", "application/pdf"),
            ("/robots.txt", "text/plain; charset=utf-8"),
            ("/m.wasm", "application/wasm"),
            (
                "/site.webmanifest",
                "application/manifest+json; charset=utf-8",
            ),
            ("/app.js.map", "application/json; charset=utf-8"),
        ];
        for (path, expected) in cases {
            assert_eq!(content_type(path).0, expected, "{path}");
        }
    }

    #[test]
    fn unknown_and_extensionless_names_are_octet_stream() {
        for path in [
            "/CNAME",
            "/a.unknownext",
            "/.htaccess",
            "/dir.d/file",
            "/x.",
        ] {
            assert_eq!(content_type(path), (UNKNOWN, false), "{path}");
        }
        assert_eq!(
            content_type("/.well-known/x.txt").0,
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            content_type("/.eslintrc.json").0,
            "application/json; charset=utf-8"
        );
    }

    #[test]
    fn text_types_have_a_charset_and_compress_while_compressed_formats_do_not() {
        for &(extension, content_type, compress) in TABLE {
            if content_type.starts_with("text/") {
                assert!(content_type.ends_with("; charset=utf-8"), "{extension}");
                assert!(compress, "{extension}");
            }
        }
        for path in [
            "/a.png", "/a.jpg", "/a.woff2", "/a.mp4", "/a.zip", "/a.webp",
        ] {
            assert!(!content_type(path).1, "{path}");
        }
        for path in [
            "/a.html", "/a.css", "/a.js", "/a.svg", "/a.json", "/a.wasm", "/a.ico",
        ] {
            assert!(content_type(path).1, "{path}");
        }
    }

    #[test]
    fn table_has_no_duplicate_extensions() {
        for (i, (a, _, _)) in TABLE.iter().enumerate() {
            assert!(TABLE[i + 1..].iter().all(|(b, _, _)| a != b), "{a}");
            assert_eq!(a.to_ascii_lowercase(), *a);
        }
    }
}
