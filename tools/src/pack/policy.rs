//! The packer's cache policy: which `Cache-Control` each file gets.
//!
//! - `no-cache` (browsers revalidate each time; the ETag makes that a cheap 304) for pages and
//!   the files a person or a crawler expects to see fresh the moment the site changes: HTML,
//!   feeds and sitemaps (`.xml`, `.rss`, `.atom`), web app manifests, `robots.txt`, service
//!   workers (`sw.js`, `service-worker.js`) and everything under `/.well-known/`;
//! - `public, max-age=31536000, immutable` for fingerprinted asset names, whose content can
//!   never change under the same name: a part of the name (between `.` or `-`, other than the
//!   first part and the extension) that is a content hash, i.e. 8 to 64 hex digits with at
//!   least one digit and one letter (`app.3f2a9c1e.css`, `main-9f86d081884c7d65.js`), or 8 to
//!   32 base64url characters with a digit, an upper- and a lower-case letter
//!   (`index-D8sRLhUd.js`, as Vite writes them);
//! - `public, max-age=3600` for every other file (images, fonts and scripts with plain names:
//!   an edit reaches returning visitors within an hour).

/// Revalidate every time.
pub const NO_CACHE: &str = "no-cache";
/// Cache forever: the name changes when the content does.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Cache for an hour.
pub const ONE_HOUR: &str = "public, max-age=3600";

/// The `Cache-Control` value for a file at `path` with `content_type`.
pub fn cache_control(path: &str, content_type: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    let fresh_type = [
        "text/html",
        "application/xhtml+xml",
        "application/manifest+json",
    ]
    .iter()
    .chain(&[
        "application/xml",
        "application/rss+xml",
        "application/atom+xml",
    ])
    .any(|fresh| content_type.starts_with(fresh));
    let fresh_name = ["robots.txt", "sw.js", "service-worker.js"]
        .iter()
        .any(|fresh| name.eq_ignore_ascii_case(fresh));
    if fresh_type || fresh_name || path.starts_with("/.well-known/") {
        NO_CACHE
    } else if is_fingerprinted(name) {
        IMMUTABLE
    } else {
        ONE_HOUR
    }
}

/// Does the file name carry a content hash (see the module documentation)?
pub fn is_fingerprinted(name: &str) -> bool {
    let Some((stem, _extension)) = name.rsplit_once('.') else {
        return false;
    };
    let mut parts = stem.split(['.', '-']);
    parts.next(); // the name itself
    parts.any(|part| is_hex_hash(part) || is_base64_hash(part))
        || (stem.len() >= 8 && is_hex_hash(stem))
}

fn is_hex_hash(part: &str) -> bool {
    (8..=64).contains(&part.len())
        && part.bytes().all(|b| b.is_ascii_hexdigit())
        && part.bytes().any(|b| b.is_ascii_digit())
        && part.bytes().any(|b| b.is_ascii_alphabetic())
}

fn is_base64_hash(part: &str) -> bool {
    (8..=32).contains(&part.len())
        && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && part.bytes().any(|b| b.is_ascii_digit())
        && part.bytes().any(|b| b.is_ascii_uppercase())
        && part.bytes().any(|b| b.is_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprinted_names_are_recognised() {
        for name in [
            "app.3f2a9c1e.css",
            "main-9f86d081884c7d65.js",
            "chunk.4e5f6a7b8c9d0e1f2a3b.js",
            "index-D8sRLhUd.js",
            "3f2a9c1e4b.js",
            "font.a1b2c3d4.woff2",
            "app.min.3f2a9c1e.js",
        ] {
            assert!(is_fingerprinted(name), "{name}");
        }
        for name in [
            "app.css",
            "report-20240101.pdf", // a date: digits only
            "deadbeefcafe.png",    // letters only... and it is the stem: no digit
            "jquery-3.7.1.min.js",
            "background-image.png",
            "photo-of-me.jpg",
            "DSC01234.jpg", // the name itself, not a hash part
            "README",
            "app.3f2a9c.css", // too short
        ] {
            assert!(!is_fingerprinted(name), "{name}");
        }
    }

    #[test]
    fn policy_by_kind_of_file() {
        let html = "text/html; charset=utf-8";
        let css = "text/css; charset=utf-8";
        assert_eq!(cache_control("/index.html", html), NO_CACHE);
        // HTML stays revalidated even with a hash-like name.
        assert_eq!(cache_control("/page.3f2a9c1e.html", html), NO_CACHE);
        assert_eq!(
            cache_control("/feed.xml", "application/xml; charset=utf-8"),
            NO_CACHE
        );
        assert_eq!(
            cache_control("/robots.txt", "text/plain; charset=utf-8"),
            NO_CACHE
        );
        assert_eq!(
            cache_control("/sw.js", "text/javascript; charset=utf-8"),
            NO_CACHE
        );
        assert_eq!(
            cache_control("/.well-known/security.txt", "text/plain"),
            NO_CACHE
        );
        assert_eq!(cache_control("/css/app.3f2a9c1e.css", css), IMMUTABLE);
        assert_eq!(cache_control("/css/app.css", css), ONE_HOUR);
        assert_eq!(cache_control("/img/me.jpg", "image/jpeg"), ONE_HOUR);
    }
}
