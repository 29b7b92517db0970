//! The search index through the writer and the reader: ranking, all-terms-first, stemming and
//! folding, bounded queries, pages, and a corrupt section refused.

use bramble_site::search::build::{SearchDocument, build, template_pieces};
use bramble_site::search::text::Language;
use bramble_site::search::{MAX_QUERY_TERMS, Query, Results};
use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};

fn page(path: &str) -> FileSpec {
    FileSpec {
        path: path.into(),
        content_type: "text/html; charset=utf-8".into(),
        cache_control: "no-cache".into(),
        last_modified: 0,
        last_modified_http: http_date(0),
        identity: VariantSpec {
            body: b"<p>page</p>".to_vec(),
            etag: format!("\"{}\"", path.len()),
        },
        gzip: None,
        brotli: None,
    }
}

fn doc(path: &str, title: &str, text: &str) -> SearchDocument {
    SearchDocument {
        path: path.into(),
        title: title.into(),
        headings: String::new(),
        text: text.into(),
    }
}

fn image(docs: &[SearchDocument], extra_pages: usize) -> Vec<u8> {
    let mut writer = SiteImageWriter::new();
    for d in docs {
        writer.add(page(&d.path)).unwrap();
    }
    for i in 0..extra_pages {
        writer.add(page(&format!("/filler/{i}.html"))).unwrap();
    }
    let pieces = template_pieces("<main>{{ query }}|{{results}}</main>").unwrap();
    writer.set_search(build(docs, true, pieces)).unwrap();
    writer.finish().unwrap()
}

fn run(image: &SiteImage, text: &str, page: u32) -> Results {
    let search = image.index().search().unwrap();
    let query = Query::parse(text, search.language());
    let mut results = Results::EMPTY;
    search.run(&query, page, image, &mut results).unwrap();
    results
}

fn paths(image: &SiteImage, results: &Results) -> Vec<String> {
    let search = image.index().search().unwrap();
    results
        .hits()
        .iter()
        .map(|hit| {
            image
                .index()
                .path(search.document(hit.doc).file)
                .to_string()
        })
        .collect()
}

fn sample() -> Vec<SearchDocument> {
    vec![
        doc(
            "/install.html",
            "Installing the server",
            "To install Bramble, write the card image. Installation takes a minute.",
        ),
        doc(
            "/config.html",
            "Configuration",
            "Settings live in BRAMBLE.TXT: the hostname, the network, and the café's Wi-Fi.",
        ),
        doc(
            "/blog/first.html",
            "A first post",
            "We installed a server on a solar panel. The server runs all day.",
        ),
        doc(
            "/about.html",
            "About",
            "Nothing about servers here, only people.",
        ),
    ]
}

#[test]
fn ranks_titles_and_all_terms_first() {
    let bytes = image(&sample(), 0);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let search = image.index().search().unwrap();
    assert_eq!(search.doc_count(), 4);
    // "install" matches install/installing/installation/installed (stemming).
    let results = run(&image, "Install", 1);
    assert_eq!(
        paths(&image, &results),
        ["/install.html", "/blog/first.html"]
    );
    assert!(results.all_terms);
    // Both words in one page beats one word in many.
    let results = run(&image, "install server", 1);
    assert_eq!(results.total_all, 2);
    assert_eq!(results.hits().len(), 2);
    assert_eq!(paths(&image, &results)[0], "/install.html");
    // No page holds both: pages holding some.
    let results = run(&image, "hostname solar", 1);
    assert!(!results.all_terms);
    assert_eq!(results.total(), 2);
    // Case and accents fold: "CAFE" finds "café's".
    let results = run(&image, "CAFE", 1);
    assert_eq!(paths(&image, &results), ["/config.html"]);
    // Unknown words, punctuation only: nothing, quickly.
    assert_eq!(run(&image, "zebra", 1).total(), 0);
    assert_eq!(run(&image, "?!...,;", 1).total(), 0);
}

#[test]
fn snippets_start_near_the_match() {
    let bytes = image(&sample(), 0);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let results = run(&image, "solar", 1);
    let hit = results.hits()[0];
    let search = image.index().search().unwrap();
    let doc = search.document(hit.doc);
    let text = image.body(search.text_body());
    let start = (doc.text_offset + hit.first_at - 1) as usize;
    assert!(text[start..].starts_with(b"solar"));
}

#[test]
fn queries_are_bounded() {
    let bytes = image(&sample(), 0);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let search = image.index().search().unwrap();
    let many: String = (0..200).map(|i| format!("word{i} ")).collect();
    let query = Query::parse(&many, search.language());
    assert_eq!(query.terms().len(), MAX_QUERY_TERMS);
    assert_eq!(query.ignored, 200 - MAX_QUERY_TERMS);
    let long = "server ".repeat(600);
    let query = Query::parse(&long, search.language());
    assert_eq!(query.terms().len(), 1, "repeats count once");
}

#[test]
fn pages_of_results() {
    let docs: Vec<SearchDocument> = (0..35)
        .map(|i| {
            doc(
                &format!("/p{i:02}.html"),
                &format!("Page {i}"),
                "common words here",
            )
        })
        .collect();
    let bytes = image(&docs, 3);
    let image = SiteImage::new_checked(&bytes).unwrap();
    let first = run(&image, "common", 1);
    assert_eq!(
        (first.total(), first.pages(), first.hits().len()),
        (35, 4, 10)
    );
    let last = run(&image, "common", 4);
    assert_eq!(last.hits().len(), 5);
    assert_eq!(paths(&image, &last)[0], "/p30.html", "ties keep site order");
    let beyond = run(&image, "common", 99);
    assert_eq!(beyond.page, 10);
    assert!(beyond.hits().is_empty());
}

#[test]
fn internal_files_are_not_served_and_corruption_is_refused() {
    let bytes = image(&sample(), 0);
    let image = SiteImage::new_checked(&bytes).unwrap();
    assert!(image.get(bramble_site::SEARCH_POSTINGS_PATH).is_none());
    assert!(image.files().all(|f| !f.path.starts_with("/.bramble/")));
    // Flip bytes across the search section: refused (or harmless), never a panic.
    let at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize;
    let (offset, len) = (at(&bytes, 88), at(&bytes, 92));
    assert!(len > 0);
    let mut refused = 0;
    for i in (offset..offset + len).step_by(7) {
        let mut copy = bytes.clone();
        copy[i] ^= 0xa5;
        let index_len = at(&copy, 16);
        copy[20..24].fill(0);
        let crc = bramble_site::crc32(&copy[..index_len]);
        copy[20..24].copy_from_slice(&crc.to_le_bytes());
        match SiteImage::new_checked(&copy) {
            Err(bramble_site::FormatError::BadSection { section, .. }) => {
                assert_eq!(section, "search");
                refused += 1;
            }
            Err(other) => panic!("{other}"),
            Ok(image) => {
                let _ = run(&image, "install server cafe", 1);
            }
        }
    }
    assert!(refused > 0);
}

#[test]
fn templates_need_one_results_placeholder() {
    assert!(template_pieces("<p>no placeholder</p>").is_err());
    assert!(template_pieces("{{results}}{{results}}").is_err());
    let pieces = template_pieces("a{{query}}b{{ results }}c{{other}}").unwrap();
    assert_eq!(
        pieces,
        [
            (0, "a".to_string()),
            (1, String::new()),
            (0, "b".to_string()),
            (2, String::new()),
            (0, "c{{other}}".to_string())
        ]
    );
    let _ = Language::English;
}
