//! The default site in site/default: small, no JavaScript, light and dark, phone-ready, every
//! link resolves, and it packs into a site image that answers `/` and has a 404 page.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

fn default_site() -> std::path::PathBuf {
    bramble::workspace_root().join("site").join("default")
}

/// Every file of the default site by its URL path.
fn files() -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for entry in fs::read_dir(default_site()).unwrap() {
        let entry = entry.unwrap();
        assert!(
            entry.file_type().unwrap().is_file(),
            "the default site is one flat folder"
        );
        let name = entry.file_name().into_string().unwrap();
        files.insert(
            format!("/{name}"),
            fs::read_to_string(entry.path()).unwrap(),
        );
    }
    files
}

/// The values of `attribute="..."` in `html`.
fn attribute_values<'a>(html: &'a str, attribute: &str) -> Vec<&'a str> {
    let needle = format!("{attribute}=\"");
    html.match_indices(&needle)
        .map(|(at, _)| {
            let rest = &html[at + needle.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

#[test]
fn has_the_expected_files_and_stays_small() {
    let files = files();
    for needed in [
        "/index.html",
        "/404.html",
        "/style.css",
        "/favicon.svg",
        "/robots.txt",
    ] {
        assert!(files.contains_key(needed), "missing {needed}");
    }
    let total: usize = files.values().map(String::len).sum();
    assert!(total < 50 * 1024, "the default site is {total} bytes");
}

#[test]
fn pages_need_no_javascript_and_suit_phones_and_dark_mode() {
    let files = files();
    let css = &files["/style.css"];
    assert!(css.contains("prefers-color-scheme: dark"));
    assert!(css.contains("clamp("), "fluid type");
    for (path, text) in files.iter().filter(|(p, _)| p.ends_with(".html")) {
        let lower = text.to_lowercase();
        assert!(!lower.contains("<script"), "{path} has a script");
        let handler = lower.match_indices(" on").any(|(at, _)| {
            let name: String = lower[at + 3..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase())
                .collect();
            !name.is_empty() && lower[at + 3 + name.len()..].starts_with('=')
        });
        assert!(!handler, "{path} has an event handler attribute");
        assert!(
            lower.contains("name=\"viewport\""),
            "{path} has no viewport meta"
        );
        assert!(
            lower.contains("href=\"/style.css\""),
            "{path} does not use the stylesheet"
        );
        assert!(lower.contains("<html lang="), "{path} has no language");
        assert!(
            text.contains("Bramble") && text.contains("Raspberry Pi"),
            "{path} footer"
        );
    }
}

#[test]
fn every_local_link_resolves() {
    let files = files();
    for (path, text) in files.iter().filter(|(p, _)| p.ends_with(".html")) {
        let links = attribute_values(text, "href")
            .into_iter()
            .chain(attribute_values(text, "src"));
        for link in links.filter(|l| l.starts_with('/')) {
            let target = if link.ends_with('/') {
                format!("{link}index.html")
            } else {
                link.into()
            };
            assert!(
                files.contains_key(&target),
                "{path} links to missing {link}"
            );
        }
    }
}

#[test]
fn packs_into_a_site_image_that_serves_it() {
    let packed =
        bramble::pack::pack_site(Path::new(&default_site()), &Default::default()).expect("packs");
    let image = bramble_site::SiteImage::new_checked(&packed.image).unwrap();
    assert_eq!(image.file_count(), files().len());
    assert!(
        matches!(image.resolve("/"), bramble_site::Resolved::File(_)),
        "/ has an index"
    );
    assert!(
        image.not_found_page().is_some(),
        "404.html is used for misses"
    );
}
