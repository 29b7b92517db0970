//! Where a request for a site path goes, in the order Netlify documents: forced (`!`) rules,
//! then the file (with `/dir` -> `/dir/` and, with `--clean-urls`, `/about.html` ->
//! `/about`), then `/about` -> `about.html`, then the other `_redirects` rules, then the
//! nearest `404.html` up the tree or the single-page-app fallback. Everything is a lookup in
//! the index: binary searches and a bounded walk over the dynamic rules.

use core::fmt::Write;

use bramble_site::rules::{RedirectMatch, write_target};
use bramble_site::{FileEntry, Resolved, SiteFlags, SiteIndex};

use crate::connection::{Outcome, RequestView, Response, serve_error_page, serve_file};
use crate::path::{MAX_TARGET_LEN, NormalPath, normalize_path, write_encoded_path};
use crate::response::{Head, write_error_page};

/// Longest Location a rule or a clean URL produces (the response head must hold it).
const LOCATION_LEN: usize = 1536;
/// Longest built-in page body of a redirect.
const PAGE_LEN: usize = 512;

/// Answers a GET or HEAD for the normalised site path `path`.
pub(crate) fn route(
    response: &mut Response<'_, '_>,
    view: &RequestView<'_>,
    index: SiteIndex<'_>,
    path: &str,
    query: Option<&str>,
) -> Outcome {
    let redirects = index.redirects();
    if let Some(rule) = redirects.find(path, true) {
        return apply_rule(response, view, index, path, query, rule);
    }
    match index.resolve(path) {
        Resolved::File(entry) => {
            if index.flags().has(SiteFlags::CLEAN_URLS)
                && let Some(short) = clean_form(index, path)
            {
                return redirect_to_path(response, 308, short, query);
            }
            return serve_file(response, view, entry);
        }
        Resolved::AddSlash => return response.page(301, "", false, Some((path, query))),
        Resolved::NotFound => {}
    }
    if let Some(entry) = clean_url_file(index, path) {
        return serve_file(response, view, entry);
    }
    if let Some(rule) = redirects.find(path, false) {
        return apply_rule(response, view, index, path, query, rule);
    }
    not_found(response, view, index, path)
}

/// `/about` serves `/about.html` when neither a file nor a folder `/about` exists.
fn clean_url_file<'a>(index: SiteIndex<'a>, path: &str) -> Option<FileEntry<'a>> {
    if path.ends_with('/') {
        return None;
    }
    index.get_with_suffix(path, ".html")
}

/// The shorter URL that serves the same file as `path`, for `--clean-urls`: `/dir/` for
/// `/dir/index.html`, `/about` for `/about.html` when nothing else answers `/about`.
fn clean_form<'p>(index: SiteIndex<'_>, path: &'p str) -> Option<&'p str> {
    if let Some(folder) = path.strip_suffix(bramble_site::INDEX_NAME) {
        return folder.ends_with('/').then_some(folder);
    }
    let short = path.strip_suffix(".html")?;
    if short.is_empty() || short.ends_with('/') {
        return None;
    }
    matches!(index.resolve(short), Resolved::NotFound).then_some(short)
}

/// A redirect with `status` to the site path `path` (decoded), keeping the query.
fn redirect_to_path(
    response: &mut Response<'_, '_>,
    status: u16,
    path: &str,
    query: Option<&str>,
) -> Outcome {
    let mut location = heapless::String::<LOCATION_LEN>::new();
    let written = write_encoded_path(&mut location, path).and_then(|()| match query {
        Some(query) => write!(location, "?{query}"),
        None => Ok(()),
    });
    if written.is_err() {
        return response.page(414, "", false, None);
    }
    redirect(response, status, &location)
}

/// A redirect with `status` to `location` (URL form).
fn redirect(response: &mut Response<'_, '_>, status: u16, location: &str) -> Outcome {
    let mut page = heapless::String::<PAGE_LEN>::new();
    let _ = write_error_page(&mut page, status, "");
    let head = Head {
        content_type: Some("text/html; charset=utf-8"),
        content_length: Some(page.len() as u64),
        cache_control: Some("no-cache"),
        location_url: Some(location),
        ..Head::new(status)
    };
    response.finish(head, Some(&page), None)
}

/// Applies a matched `_redirects` rule.
fn apply_rule(
    response: &mut Response<'_, '_>,
    view: &RequestView<'_>,
    index: SiteIndex<'_>,
    path: &str,
    query: Option<&str>,
    found: RedirectMatch<'_>,
) -> Outcome {
    let rule = found.rule;
    let mut target = heapless::String::<LOCATION_LEN>::new();
    if write_target(&mut target, rule.to, rule.from, path, &found.captures).is_err() {
        return response.page(414, "", false, None);
    }
    match rule.status {
        200 | 404 | 410 => {
            // The target is a file of the site (checked at pack time): decode and look it up.
            let mut normal = NormalPath::new();
            let entry = match normalize_path(&target, &mut normal) {
                Ok(()) => site_file(index, &normal),
                Err(_) => None,
            };
            match (rule.status, entry) {
                (200, Some(entry)) => serve_file(response, view, entry),
                (200, None) => not_found(response, view, index, path),
                (status, Some(entry)) => serve_error_page(response, view, entry, status),
                (status, None) => response.page(status, "", false, None),
            }
        }
        status => {
            // A query the target does not set is passed on, as Netlify does.
            if let Some(query) = query
                && !target.contains('?')
                && write!(target, "?{query}").is_err()
            {
                return response.page(414, "", false, None);
            }
            redirect(response, status, &target)
        }
    }
}

/// The file a request for `path` would get: the file, a folder's index.html, or
/// `path.html`.
fn site_file<'a>(index: SiteIndex<'a>, path: &str) -> Option<FileEntry<'a>> {
    match index.resolve(path) {
        Resolved::File(entry) => Some(entry),
        Resolved::AddSlash => index.get_with_suffix(path, "/index.html"),
        Resolved::NotFound => clean_url_file(index, path),
    }
}

/// A miss: `/index.html` with 200 for a single-page app, else the nearest 404.html up the
/// tree with 404, else the built-in 404 page.
pub(crate) fn not_found(
    response: &mut Response<'_, '_>,
    view: &RequestView<'_>,
    index: SiteIndex<'_>,
    path: &str,
) -> Outcome {
    if index.flags().has(SiteFlags::SPA_FALLBACK)
        && let Some(entry) = index.get("/index.html")
    {
        return serve_file(response, view, entry);
    }
    match index.nearest_not_found_page(path) {
        Some(entry) => serve_error_page(response, view, entry, 404),
        None => response.page(404, "", false, None),
    }
}

const _: () = assert!(LOCATION_LEN <= MAX_TARGET_LEN);
