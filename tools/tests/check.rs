//! `bramble check` through the real binary: a site with a broken link, a missing image, an
//! oversized page and a broken symlink fails (exit 1) naming each with its page and line, in
//! QEMU and hosted alike, in the table, the JSON and the JUnit XML; a clean site (and a
//! SITE.BIN, and a card made by `bramble image`) passes with valid JUnit XML.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

fn bramble(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .expect("run bramble")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A site with every kind of problem the check finds, each on a known line.
fn broken_site(root: &Path) -> std::path::PathBuf {
    let site = root.join("broken");
    std::fs::create_dir_all(site.join("img")).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<!doctype html>\n<title>home</title>\n<link rel=\"stylesheet\" href=\"style.css\">\n\
         <a href=\"about.html\">about</a>\n<a href=\"nope.html\">nope</a>\n\
         <img src=\"img/cat.png\" srcset=\"img/dog.png 2x\" alt=\"\">\n<a href=\"big.html\">big</a>\n",
    )
    .unwrap();
    std::fs::write(site.join("about.html"), "<a href=\"/\">home</a>\n").unwrap();
    std::fs::write(site.join("img/dog.png"), [0x89, b'P', b'N', b'G']).unwrap();
    std::fs::write(
        site.join("style.css"),
        "\n\nbody { background: url(img/bg.png) }\n",
    )
    .unwrap();
    // 64 KiB of incompressible bytes embedded by a small page: over a 32 KiB budget.
    let noise: Vec<u8> = (0u32..65_536)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(site.join("img/photo.jpg"), noise).unwrap();
    std::fs::write(site.join("big.html"), "<img src=\"img/photo.jpg\">\n").unwrap();
    symlink("gone.html", site.join("dead.html")).unwrap();
    std::fs::write(site.join(".env"), "SECRET=1\n").unwrap();
    site
}

fn assert_names_every_problem(output: &Output, json: &Path, junit: &Path) {
    let table = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{table}\n{}",
        text(&output.stderr)
    );
    for (problem, path, place) in [
        ("broken link", "/nope.html", "/index.html:5"),
        ("missing image", "/img/cat.png", "/index.html:6"),
        ("missing CSS url()", "/img/bg.png", "/style.css:3"),
        ("page over budget", "/big.html", "/big.html"),
        ("broken symlink", "/dead.html", ""),
    ] {
        assert!(
            table.lines().any(|line| line.contains("FAIL")
                && line.contains(problem)
                && line.contains(path)
                && line.contains(place)),
            "{problem} {path} {place} missing from:\n{table}"
        );
    }
    for warning in ["no 404.html", "/.env"] {
        assert!(
            table
                .lines()
                .any(|l| l.contains("warn") && l.contains(warning)),
            "{warning}:\n{table}"
        );
    }
    assert!(
        !table.contains("/img/dog.png"),
        "the srcset image exists:\n{table}"
    );
    assert!(!table.contains("about.html"), "about.html exists:\n{table}");
    assert!(
        text(&output.stderr).contains("error: the check of")
            && text(&output.stderr).contains("5 problems"),
        "{}",
        text(&output.stderr)
    );

    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    assert_eq!(report["passed"], false);
    assert_eq!(report["errors"], 5);
    let findings = report["findings"].as_array().unwrap();
    assert!(findings.iter().any(|f| f["kind"] == "missing image"
        && f["path"] == "/img/cat.png"
        && f["page"] == "/index.html"
        && f["line"] == 6));

    let xml = std::fs::read_to_string(junit).unwrap();
    let document = roxmltree::Document::parse(&xml).expect("valid XML");
    let root = document.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("failures"), Some("4"), "{xml}");
    let failed: Vec<&str> = document
        .descendants()
        .filter(|n| n.has_tag_name("testcase") && n.children().any(|c| c.has_tag_name("failure")))
        .filter_map(|n| n.attribute("name"))
        .collect();
    for name in ["/index.html", "/style.css", "/big.html", "/dead.html"] {
        assert!(failed.contains(&name), "{name} not failed in JUnit:\n{xml}");
    }
}

#[test]
fn a_broken_site_fails_naming_each_problem_with_its_page_in_qemu_and_hosted() {
    let dir = tempfile::tempdir().unwrap();
    let site = broken_site(dir.path());
    let cache = dir.path().join("cache");
    let (json, junit) = (dir.path().join("r.json"), dir.path().join("r.xml"));
    let common = [
        "check",
        site.to_str().unwrap(),
        "--page-budget",
        "32",
        "--json",
        json.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ];
    let hosted = bramble(&[&common[..], &["--hosted"]].concat(), &cache);
    assert!(text(&hosted.stdout).contains("served by the hosted engine"));
    assert_names_every_problem(&hosted, &json, &junit);

    if bramble_qemu::find_qemu().is_err() {
        eprintln!("skipped the QEMU half: qemu-system-arm is not installed");
        return;
    }
    let kernel = bramble::kernel::build_kernel().expect("kernel build");
    let in_qemu = bramble(
        &[&common[..], &["--kernel", kernel.raw.to_str().unwrap()]].concat(),
        &cache,
    );
    assert!(
        text(&in_qemu.stdout).contains("served by QEMU raspi1ap"),
        "{}{}",
        text(&in_qemu.stdout),
        text(&in_qemu.stderr)
    );
    assert_names_every_problem(&in_qemu, &json, &junit);
}

#[test]
fn a_clean_site_passes_as_a_folder_a_site_image_and_a_card() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let site = dir.path().join("clean");
    std::fs::create_dir_all(site.join("docs")).unwrap();
    std::fs::write(
        site.join("index.html"),
        "<a href=\"docs/\">docs</a> <a href=\"docs\">docs</a> <a href=\"https://example.org/\">x</a>\
         <a href=\"#top\">top</a> <a href=\"caf%C3%A9.html\">café</a>",
    )
    .unwrap();
    std::fs::write(site.join("café.html"), "<a href=\"index.html\">home</a>").unwrap();
    std::fs::write(
        site.join("docs/index.html"),
        "<a href=\"../\">up</a>".repeat(200),
    )
    .unwrap();
    std::fs::write(site.join("404.html"), "<h1>not here</h1>").unwrap();
    let junit = dir.path().join("clean.xml");
    let folder = bramble(
        &[
            "check",
            site.to_str().unwrap(),
            "--hosted",
            "--junit",
            junit.to_str().unwrap(),
        ],
        &cache,
    );
    assert!(
        folder.status.success(),
        "{}{}",
        text(&folder.stdout),
        text(&folder.stderr)
    );
    assert!(
        text(&folder.stdout).contains("passed: 0 errors, 0 warnings"),
        "{}",
        text(&folder.stdout)
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    let document = roxmltree::Document::parse(&xml).expect("valid JUnit XML");
    assert_eq!(document.root_element().attribute("failures"), Some("0"));
    let cases = document
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .count();
    assert_eq!(
        cases,
        4 + 4 + 4,
        "a case per file, per page's links, per page's budget:\n{xml}"
    );

    // The same site as a SITE.BIN and on a card image.
    let site_bin = dir.path().join("site.bin");
    let packed = bramble(
        &[
            "pack",
            site.to_str().unwrap(),
            "-o",
            site_bin.to_str().unwrap(),
        ],
        &cache,
    );
    assert!(packed.status.success());
    let from_image = bramble(&["check", site_bin.to_str().unwrap(), "--hosted"], &cache);
    assert!(from_image.status.success(), "{}", text(&from_image.stdout));
    let kernel = dir.path().join("kernel.img");
    std::fs::write(&kernel, [0u8; 64]).unwrap();
    let card = dir.path().join("card.img");
    let made = bramble(
        &[
            "image",
            "--site-image",
            site_bin.to_str().unwrap(),
            "--kernel",
            kernel.to_str().unwrap(),
            "-o",
            card.to_str().unwrap(),
        ],
        &cache,
    );
    assert!(made.status.success(), "{}", text(&made.stderr));
    let from_card = bramble(&["check", card.to_str().unwrap(), "--hosted"], &cache);
    assert!(
        from_card.status.success(),
        "{}{}",
        text(&from_card.stdout),
        text(&from_card.stderr)
    );
    assert!(text(&from_card.stdout).contains("4 files"));

    // Not a site at all: one error line saying what check takes.
    let nonsense = dir.path().join("notes.txt");
    std::fs::write(&nonsense, "hello").unwrap();
    let refused = bramble(&["check", nonsense.to_str().unwrap(), "--hosted"], &cache);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("takes a site folder, a SITE.BIN or a card image"));
}
