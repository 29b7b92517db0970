//! The README stays a front page: under 15 KB, and every path it (or CONTRIBUTING.md) names
//! exists.
//!
//! "Names" means a Markdown link target (`[text](target)`, web links and anchors aside), a
//! back-quoted span that reads as a repository path (`kernel/stream/src/lib.rs`,
//! `doc/`), and the first word of each line of the layout block when it holds a `/`. The
//! same link check runs over every `doc/*.md` and `usbredir/README.md`, whose links are
//! relative to their own folder.

use std::fs;
use std::path::{Path, PathBuf};

/// The README's budget in bytes.
const README_LIMIT: usize = 15_000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits one level below the workspace root")
        .to_path_buf()
}

/// Markdown link targets that point into the tree (no scheme, no bare anchor).
fn link_targets(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("").trim();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            found.push(target.to_string());
        }
        rest = &rest[end..];
    }
    found
}

/// Whether a back-quoted span reads as a path in the repository: words of path characters
/// joined by `/`, at least one `/`, not absolute, not in a home folder, no `..`.
fn looks_like_path(span: &str) -> bool {
    let path_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    span.contains('/')
        && span.chars().all(path_char)
        && !span.starts_with('/')
        && !span.contains("..")
        && span
            .trim_end_matches('/')
            .split('/')
            .all(|part| !part.is_empty())
}

/// Back-quoted spans (outside fenced blocks) that read as paths, and the first word of each
/// line of fenced blocks without a language (the layout block) when it reads as one.
fn named_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fence: Option<bool> = None; // Some(true): a plain fence, whose lines list paths
    for line in text.lines() {
        if let Some(info) = line.strip_prefix("```") {
            fence = match fence {
                None => Some(info.trim().is_empty()),
                Some(_) => None,
            };
            continue;
        }
        match fence {
            Some(true) => {
                if let Some(word) = line.split_whitespace().next()
                    && looks_like_path(word)
                {
                    found.push(word.to_string());
                }
            }
            Some(false) => {}
            None => {
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 1 && looks_like_path(span) {
                        found.push(span.to_string());
                    }
                }
            }
        }
    }
    found
}

/// Every name in `names` that does not exist relative to `base`.
fn missing(base: &Path, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|name| !base.join(name.trim_end_matches('/')).exists())
        .cloned()
        .collect()
}

#[test]
fn the_readme_is_under_its_budget() {
    let size = fs::metadata(root().join("README.md")).unwrap().len() as usize;
    assert!(
        size < README_LIMIT,
        "README.md is {size} bytes, over {README_LIMIT}: move the detail into doc/"
    );
}

#[test]
fn every_path_the_readme_and_contributing_name_exists() {
    let root = root();
    for page in ["README.md", "CONTRIBUTING.md"] {
        let text = fs::read_to_string(root.join(page)).unwrap();
        let mut names = link_targets(&text);
        names.extend(named_paths(&text));
        assert!(
            names.len() > 10,
            "{page} names only {} paths: the extractor has stopped finding them",
            names.len()
        );
        let gone = missing(&root, &names);
        assert!(
            gone.is_empty(),
            "{page} names paths that do not exist: {gone:?}"
        );
    }
}

#[test]
fn every_link_in_doc_and_the_judge_readme_exists() {
    let root = root();
    let mut pages: Vec<PathBuf> = fs::read_dir(root.join("doc"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.push(root.join("usbredir/README.md"));
    assert!(pages.len() > 3, "doc/ has lost its pages");
    for page in pages {
        let text = fs::read_to_string(&page).unwrap();
        let gone = missing(page.parent().unwrap(), &link_targets(&text));
        assert!(
            gone.is_empty(),
            "{} links to missing files: {gone:?}",
            page.display()
        );
    }
}

#[test]
fn the_checks_find_a_missing_path() {
    let text = "See [the guide](doc/nowhere.md), `kernel/none/src/lib.rs` and \
                `tools/`.\n\n```\nghost/      a folder that is not there\n```\n\
                ```sh\nnot/a/path --flag\n```\n";
    let mut names = link_targets(text);
    names.extend(named_paths(text));
    assert_eq!(
        names,
        [
            "doc/nowhere.md",
            "kernel/none/src/lib.rs",
            "tools/",
            "ghost/"
        ]
    );
    assert_eq!(
        missing(&root(), &names),
        ["doc/nowhere.md", "kernel/none/src/lib.rs", "ghost/"]
    );
    assert!(!looks_like_path("~/.cache/bramble"));
    assert!(!looks_like_path("/dev/sdX"));
    assert!(!looks_like_path("tests: N passed"));
}
