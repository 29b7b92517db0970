//! Directory listings, opt-in per folder (`--listing downloads/`, or a `.bramble-listing` file
//! in the folder): for each listed folder without an index.html, and every folder below it,
//! the packer writes `index.html` (a table of name, size and date, folders first, sorted by
//! name; light and dark colours from the reader's preference; no JavaScript) and `index.json`
//! (the same entries), so that `/downloads/` is answered like any page: precomputed,
//! compressed, with its own ETag.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

use bramble_hal::calendar::UtcDateTime;

use super::PackError;
use super::walk::SourceFile;

/// The file that marks a folder for listing (a dotfile: never served itself).
pub const MARKER: &str = ".bramble-listing";

/// One generated file: URL path, body, modification time (Unix seconds).
pub struct Generated {
    /// URL path, e.g. `/downloads/index.html`.
    pub url_path: String,
    /// The page or JSON document.
    pub body: Vec<u8>,
    /// The newest modification time of what it lists.
    pub modified: u64,
}

/// One entry of a listing.
struct Entry {
    name: String,
    folder: bool,
    size: u64,
    modified: u64,
}

/// `--listing` arguments as folder URL paths (`downloads/` and `/downloads` give
/// `/downloads`; `/` or `.` the root).
pub fn folder_path(argument: &str) -> String {
    let trimmed = argument.trim_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        String::new()
    } else {
        format!("/{trimmed}")
    }
}

/// The listings to add for `sources` (walked from `root`): `asked` are the `--listing`
/// folders (URL form, `""` for the root); folders holding [`MARKER`] are listed too; each
/// listing covers its folder and the folders below it. `source_date_epoch` replaces every
/// time shown.
pub fn listings(
    root: &Path,
    sources: &[SourceFile],
    asked: &[String],
    source_date_epoch: Option<u64>,
) -> Result<Vec<Generated>, PackError> {
    // Every folder that holds files, directly or below: folder -> its direct entries.
    let mut folders: BTreeMap<String, BTreeMap<String, Entry>> = BTreeMap::new();
    folders.entry(String::new()).or_default();
    for file in sources {
        let mut parent = String::new();
        let segments: Vec<&str> = file.url_path[1..].split('/').collect();
        for (depth, segment) in segments.iter().enumerate() {
            let is_file = depth + 1 == segments.len();
            let modified = source_date_epoch.unwrap_or(file.modified);
            let entries = folders.entry(parent.clone()).or_default();
            let entry = entries.entry(segment.to_string()).or_insert(Entry {
                name: segment.to_string(),
                folder: !is_file,
                size: 0,
                modified: 0,
            });
            entry.size += file.len;
            entry.modified = entry.modified.max(modified);
            parent = format!("{parent}/{segment}");
        }
    }
    for folder in asked {
        if !folders.contains_key(folder) {
            return Err(PackError::InvalidName {
                path: root.join(folder.trim_start_matches('/')),
                reason: "--listing names a folder that holds no files",
            });
        }
    }
    let marked = folders.keys().filter(|folder| {
        root.join(folder.trim_start_matches('/'))
            .join(MARKER)
            .is_file()
    });
    let roots: BTreeSet<String> = asked.iter().cloned().chain(marked.cloned()).collect();
    let listed = |folder: &str| {
        roots
            .iter()
            .any(|root| folder == root || folder.starts_with(&format!("{root}/")))
    };
    let mut out = Vec::new();
    for (folder, entries) in &folders {
        if !listed(folder) || entries.contains_key("index.html") {
            continue;
        }
        if entries.contains_key("index.json") {
            return Err(PackError::InvalidName {
                path: root.join(folder.trim_start_matches('/')).join("index.json"),
                reason: "a listed folder's JSON listing is its index.json; rename this file",
            });
        }
        let mut sorted: Vec<&Entry> = entries.values().collect();
        sorted.sort_by(|a, b| {
            (!a.folder, a.name.to_lowercase(), &a.name).cmp(&(
                !b.folder,
                b.name.to_lowercase(),
                &b.name,
            ))
        });
        let modified = sorted.iter().map(|e| e.modified).max().unwrap_or(0);
        out.push(Generated {
            url_path: format!("{folder}/index.html"),
            body: html(folder, &sorted).into_bytes(),
            modified,
        });
        out.push(Generated {
            url_path: format!("{folder}/index.json"),
            body: json(folder, &sorted).into_bytes(),
            modified,
        });
    }
    Ok(out)
}

/// `2026-12-01 10:31` (UTC).
fn date(unix_seconds: u64) -> String {
    let time = UtcDateTime::from_unix_seconds(unix_seconds);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        time.date.year, time.date.month, time.date.day, time.hour, time.minute
    )
}

/// `2026-12-01T10:31:05Z`.
fn iso_date(unix_seconds: u64) -> String {
    let time = UtcDateTime::from_unix_seconds(unix_seconds);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        time.date.year, time.date.month, time.date.day, time.hour, time.minute, time.second
    )
}

/// `512 B`, `1.2 KiB`, `3.4 MiB`, `5.6 GiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `text` with the HTML-special characters escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `name` percent-encoded as one path segment.
fn encode_segment(name: &str) -> String {
    let mut out = String::new();
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn html(folder: &str, entries: &[&Entry]) -> String {
    let shown = format!("{folder}/");
    let mut page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"color-scheme\" content=\"light dark\">\n<title>Index of {title}</title>\n\
         <style>\n\
         :root{{color-scheme:light dark;--fg:#1d1d1f;--bg:#fff;--muted:#6e6e73;--line:#e5e5ea;--link:#0b57d0}}\n\
         @media (prefers-color-scheme:dark){{:root{{--fg:#f2f2f7;--bg:#1c1c1e;--muted:#a1a1a6;--line:#38383a;--link:#8ab4f8}}}}\n\
         body{{font:16px/1.5 system-ui,sans-serif;color:var(--fg);background:var(--bg);margin:2rem auto;max-width:56rem;padding:0 1rem}}\n\
         h1{{font-size:1.4rem;font-weight:600;word-break:break-all}}\n\
         table{{border-collapse:collapse;width:100%}}\n\
         th,td{{text-align:left;padding:.4rem .6rem;border-bottom:1px solid var(--line)}}\n\
         th{{color:var(--muted);font-weight:500}}\n\
         td.size,th.size{{text-align:right;white-space:nowrap}}\n\
         td.date{{white-space:nowrap;color:var(--muted)}}\n\
         a{{color:var(--link);text-decoration:none}}a:hover{{text-decoration:underline}}\n\
         </style></head>\n<body>\n<h1>Index of {title}</h1>\n<table>\n\
         <thead><tr><th>Name</th><th class=\"size\">Size</th><th>Modified (UTC)</th></tr></thead>\n<tbody>\n",
        title = escape(&shown)
    );
    if !folder.is_empty() {
        page.push_str("<tr><td><a href=\"../\">../</a></td><td class=\"size\"></td><td class=\"date\"></td></tr>\n");
    }
    for entry in entries {
        let (href, label) = if entry.folder {
            (
                format!("{}/", encode_segment(&entry.name)),
                format!("{}/", entry.name),
            )
        } else {
            (encode_segment(&entry.name), entry.name.clone())
        };
        let _ = writeln!(
            page,
            "<tr><td><a href=\"{}\">{}</a></td><td class=\"size\" title=\"{} bytes\">{}</td>\
             <td class=\"date\"><time datetime=\"{}\">{}</time></td></tr>",
            escape(&href),
            escape(&label),
            entry.size,
            if entry.folder {
                "-".to_string()
            } else {
                size(entry.size)
            },
            iso_date(entry.modified),
            date(entry.modified)
        );
    }
    let files = entries.iter().filter(|e| !e.folder).count();
    let folders = entries.len() - files;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let _ = write!(
        page,
        "</tbody>\n</table>\n<p style=\"color:var(--muted)\">{}, {}. \
         Also as <a href=\"index.json\">JSON</a>.</p>\n</body></html>\n",
        plural(folders, "folder"),
        plural(files, "file")
    );
    page
}

fn json(folder: &str, entries: &[&Entry]) -> String {
    let mut out = format!(
        "{{\"path\":{},\"entries\":[",
        json_string(&format!("{folder}/"))
    );
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let url = if entry.folder {
            format!("{folder}/{}/", encode_segment(&entry.name))
        } else {
            format!("{folder}/{}", encode_segment(&entry.name))
        };
        let _ = write!(
            out,
            "{{\"name\":{},\"type\":\"{}\",\"size\":{},\"modified\":\"{}\",\"url\":{}}}",
            json_string(&entry.name),
            if entry.folder { "folder" } else { "file" },
            entry.size,
            iso_date(entry.modified),
            json_string(&url)
        );
    }
    out.push_str("]}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(url_path: &str, len: u64) -> SourceFile {
        SourceFile {
            url_path: url_path.into(),
            fs_path: url_path.trim_start_matches('/').into(),
            len,
            modified: 1_764_585_000,
        }
    }

    #[test]
    fn listed_folders_get_html_and_json() {
        let sources = [
            source("/index.html", 10),
            source("/downloads/b.zip", 2048),
            source("/downloads/A <b>.txt", 5),
            source("/downloads/old/x.tar", 3_000_000),
            source("/docs/index.html", 1),
        ];
        let out = listings(
            Path::new("/nonexistent"),
            &sources,
            &["/downloads".into()],
            None,
        )
        .unwrap();
        let paths: Vec<&str> = out.iter().map(|g| g.url_path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/downloads/index.html",
                "/downloads/index.json",
                "/downloads/old/index.html",
                "/downloads/old/index.json"
            ]
        );
        let html = String::from_utf8(out[0].body.clone()).unwrap();
        let folder = html.find("old/").unwrap();
        let a = html.find("A &lt;b&gt;.txt").unwrap();
        let b = html.find(">b.zip<").unwrap();
        assert!(folder < a && a < b, "folders first, then by name");
        assert!(html.contains("href=\"A%20%3Cb%3E.txt\""));
        assert!(html.contains("2.0 KiB") && html.contains("2025-12-01"));
        assert!(html.contains("prefers-color-scheme:dark"));
        assert!(!html.contains("<script"));
        let json = String::from_utf8(out[1].body.clone()).unwrap();
        assert!(json.starts_with("{\"path\":\"/downloads/\",\"entries\":[{\"name\":\"old\""));
        assert!(json.contains("\"url\":\"/downloads/b.zip\""));
        assert!(json.contains("\"size\":2048"));

        let error = listings(Path::new("/x"), &sources, &["/nothing".into()], None);
        assert!(error.is_err());
        assert_eq!(folder_path("downloads/"), "/downloads");
        assert_eq!(folder_path("/"), "");
    }
}
