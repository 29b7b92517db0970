//! Where a request goes. [`dispatch`] checks its framing and Host, then answers in turn: the
//! redirect to HTTPS, ACME's challenge answers, the status page, the 503 page when there is
//! no site, the methods other than GET and HEAD, and search; anything else is a site path.
//!
//! A site path goes where Netlify documents: forced (`!`) rules,
//! then the file (with `/dir` -> `/dir/` and, with `--clean-urls`, `/about.html` ->
//! `/about`), then `/about` -> `about.html`, then the other `_redirects` rules, then the
//! nearest `404.html` up the tree or the single-page-app fallback. Everything is a lookup in
//! the index: binary searches and a bounded walk over the dynamic rules.

use core::fmt::Write;

use bramble_site::rules::{RedirectMatch, write_target};
use bramble_site::{FileEntry, Resolved, SiteFlags, SiteIndex};

use crate::chunked::ChunkedState;
use crate::fields::{content_length, has_token};
use crate::path::{
    MAX_TARGET_LEN, NormalPath, PathError, normalize_path, split_query, write_encoded_path,
};
use crate::request::{BodySkip, RequestView, host_without_port, origin_form, valid_host};
use crate::respond::{
    Outcome, RESPONSE_HEAD_LEN, Response, UploadRoute, serve_error_page, serve_file,
};
use crate::response::{Head, write_error_page};
use crate::search::{SEARCH_JSON_PATH, SEARCH_PATH, SearchState};
use crate::server::{Server, SiteSource};
use crate::upload::{Answer, UPLOAD_PATH};

/// Longest Location a rule or a clean URL produces (the response head must hold it).
const LOCATION_LEN: usize = 1536;
/// Longest built-in page body of a redirect.
const PAGE_LEN: usize = 512;

/// The diagnostic page's first paragraph at most: the site's problem and the addresses.
const DIAGNOSTIC_DETAIL_LEN: usize = 768;

/// Where ACME's HTTP-01 challenge answers live (RFC 8555 §8.3): served over plain HTTP even
/// when every other request is redirected to HTTPS.
const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// Whether `target` (origin-form) asks for an HTTP-01 challenge answer, the one thing plain
/// HTTP serves under `https = only`: the prefix, then a token of base64url characters and
/// nothing else (a query aside). Dot segments or percent-encoding after the prefix
/// (`/.well-known/acme-challenge/../page.html`) are not a token, so they are redirected.
fn is_acme_challenge(target: &str) -> bool {
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    path.strip_prefix(ACME_CHALLENGE_PREFIX)
        .is_some_and(|token| {
            !token.is_empty()
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// A request for the site upload's path (`PUT` or `GET`), its framing checked: refused here
/// over plain HTTP and without a `Content-Length`, otherwise handed to the connection
/// ([`UploadRoute`]), which asks the server's upload handler.
#[allow(clippy::too_many_arguments)] // dispatch's findings, passed on
fn upload_route(
    view: &RequestView<'_>,
    server: &Server<'_>,
    mut response: Response<'_, '_>,
    secure: bool,
    length_count: u32,
    transfer_encoding: Option<&[u8]>,
    length: u64,
    expects_continue: bool,
) -> Outcome {
    let limits = &server.config.limits;
    let put = view.method == "PUT";
    // A refusal keeps the connection only for a body it can read and discard within the
    // usual bound; a client waiting for 100 Continue sends none.
    let keep = transfer_encoding.is_none()
        && length <= limits.max_body_bytes
        && !expects_continue
        && response_keeps(view);
    let request_body = if length > 0 && keep {
        BodySkip::Length(length)
    } else {
        BodySkip::None
    };
    response.secure = secure;
    response.hsts_seconds = if secure {
        server.config.hsts_seconds
    } else {
        None
    };
    let mut refuse = |answer: Answer| {
        response.close = !keep;
        response.request_body = request_body;
        response.json(&answer)
    };
    if !secure {
        return refuse(Answer::error(
            403,
            "https-only",
            format_args!("a site is published over HTTPS only, never plain HTTP"),
        ));
    }
    if server.upload.0.is_none() {
        return refuse(Answer::error(
            403,
            "publishing-off",
            format_args!(
                "publishing is off: the card has no publish key (bramble image --publish-key)"
            ),
        ));
    }
    if put && (transfer_encoding.is_some() || length_count == 0 || view.version == 0) {
        return refuse(Answer::error(
            411,
            "length-required",
            format_args!("an upload is an HTTP/1.1 PUT with a Content-Length"),
        ));
    }
    Outcome {
        status: 0,
        close: !response_keeps(view),
        body: None,
        deferred: false,
        request_body: BodySkip::None,
        upload: Some(if put {
            UploadRoute::Put { length }
        } else {
            UploadRoute::State
        }),
    }
}

/// Whether the client lets the connection stay open after this request (HTTP/1.1 without
/// `Connection: close`).
fn response_keeps(view: &RequestView<'_>) -> bool {
    view.version == 1
        && !view
            .all("connection")
            .any(|value| has_token(value, "close"))
}

/// Decides the response to one parsed request and writes its head.
#[allow(clippy::too_many_arguments)] // the connection's parts, each borrowed separately
pub(crate) fn dispatch(
    view: &RequestView<'_>,
    server: &Server<'_>,
    date: Option<u64>,
    served_before: u32,
    secure: bool,
    head: &mut heapless::Vec<u8, RESPONSE_HEAD_LEN>,
    search: &mut SearchState,
    peer: Option<core::net::IpAddr>,
) -> Outcome {
    let limits = &server.config.limits;
    let hsts_seconds = if secure {
        server.config.hsts_seconds
    } else {
        None
    };
    let mut host = "";
    let is_head = view.method == "HEAD";
    let (mut length_count, mut length, mut length_bad) = (0u32, 0u64, false);
    let (mut transfer_encoding, mut host_count, mut host_bad) = (None, 0u32, false);
    let (mut wants_close, mut wants_keep_alive, mut expects_continue) = (false, false, false);
    for header in view.headers {
        let name = header.name;
        let value = header.value;
        if name.eq_ignore_ascii_case("content-length") {
            length_count += 1;
            match content_length(value) {
                Some(n) => length = n,
                None => length_bad = true,
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = Some(value);
        } else if name.eq_ignore_ascii_case("host") {
            host_count += 1;
            host_bad |= !valid_host(value.trim_ascii());
            // Valid hosts are ASCII, so this only fails for a bad one (answered 400 below).
            host = core::str::from_utf8(value.trim_ascii()).unwrap_or("");
        } else if name.eq_ignore_ascii_case("connection") {
            wants_close |= has_token(value, "close");
            wants_keep_alive |= has_token(value, "keep-alive");
        } else if name.eq_ignore_ascii_case("expect") {
            expects_continue |= has_token(value, "100-continue");
        }
    }

    // Framing errors: the stream cannot be trusted any more, so answer and close.
    let mut closing = Response::new(head, is_head, date, true, BodySkip::None, view.version);
    closing.hsts_seconds = hsts_seconds;
    if view.target.len() > MAX_TARGET_LEN {
        return closing.page(414, "", false, None);
    }
    if length_bad || length_count > 1 {
        return closing.page(400, "Invalid or repeated Content-Length.", false, None);
    }
    if let Some(coding) = transfer_encoding {
        if length_count > 0 {
            return closing.page(
                400,
                "Both Content-Length and Transfer-Encoding.",
                false,
                None,
            );
        }
        if view.version == 0 {
            return closing.page(
                400,
                "Transfer-Encoding in an HTTP/1.0 request.",
                false,
                None,
            );
        }
        let last = coding
            .rsplit(|&b| b == b',')
            .next()
            .unwrap_or(b"")
            .trim_ascii();
        if !last.eq_ignore_ascii_case(b"chunked") {
            return closing.page(501, "Unsupported Transfer-Encoding.", false, None);
        }
    }
    if view.version == 1 && host_count == 0 {
        return closing.page(400, "Missing Host header.", false, None);
    }
    if host_count > 1 || host_bad {
        return closing.page(400, "Invalid Host header.", false, None);
    }
    // The site upload: its body is bounded by the card's slot, which the handler checks.
    let upload = origin_form(view.target) == UPLOAD_PATH && matches!(view.method, "PUT" | "GET");
    if upload {
        return upload_route(
            view,
            server,
            closing,
            secure,
            length_count,
            transfer_encoding,
            length,
            expects_continue,
        );
    }
    if length > limits.max_body_bytes {
        return closing.page(413, "", false, None);
    }

    let reached_limit = limits.max_requests_per_connection != 0
        && served_before.saturating_add(1) >= limits.max_requests_per_connection;
    let close = wants_close
        || (view.version == 0 && !wants_keep_alive)
        // A client waiting for 100 Continue never sends its body, which leaves the stream
        // at no known request boundary.
        || (expects_continue && (length > 0 || transfer_encoding.is_some()))
        || reached_limit;
    let request_body = if transfer_encoding.is_some() {
        BodySkip::Chunked(ChunkedState::START)
    } else if length > 0 {
        BodySkip::Length(length)
    } else {
        BodySkip::None
    };
    let mut response = Response::new(
        closing.head,
        is_head,
        date,
        close,
        request_body,
        view.version,
    );
    response.hsts_seconds = hsts_seconds;
    response.secure = secure;
    if let Some(port) = server.config.redirect_to_https_port
        && !secure
        && !host.is_empty()
    {
        let target = origin_form(view.target);
        if !is_acme_challenge(target) {
            // A Location is built only from an origin-form path: `GET @evil/` would
            // otherwise become `https://host@evil/`.
            if !target.starts_with('/') {
                return response.page(400, "Malformed request target.", false, None);
            }
            let host = match &server.config.redirect_host {
                Some(name) => name.as_str(),
                None => host_without_port(host),
            };
            return response.redirect_to_https(host, port, target);
        }
    }

    if matches!(view.method, "GET" | "HEAD")
        && let Some(token) = origin_form(view.target).strip_prefix(ACME_CHALLENGE_PREFIX)
        && let Some(key_authorization) = server.acme_answer(token)
    {
        let head = Head {
            content_type: Some("application/octet-stream"),
            content_length: Some(key_authorization.len() as u64),
            cache_control: Some("no-store"),
            ..Head::new(200)
        };
        return response.finish(head, Some(key_authorization), None);
    }

    if matches!(view.method, "GET" | "HEAD")
        && let Some(outcome) = crate::status::respond(
            &mut response,
            origin_form(view.target),
            view.all("authorization").next(),
            server,
            peer,
        )
    {
        return outcome;
    }

    let image = match server.site {
        SiteSource::Ready(image) => image.index(),
        SiteSource::Store(index, _) => index,
        SiteSource::Unavailable(problem) => {
            let mut detail = heapless::String::<DIAGNOSTIC_DETAIL_LEN>::new();
            let shown = if server.addresses.is_empty() {
                Ok(())
            } else {
                core::fmt::Write::write_fmt(
                    &mut detail,
                    format_args!("{problem} (This server: {}.)", server.addresses),
                )
            };
            let detail = if shown.is_ok() && !detail.is_empty() {
                detail.as_str()
            } else {
                problem
            };
            return response.diagnostic_page(detail, &server.notice);
        }
    };
    response.security_defaults = !image.flags().has(SiteFlags::NO_SECURITY_HEADERS);
    match view.method {
        "GET" | "HEAD" => {}
        "OPTIONS" => {
            let head = Head {
                allow: true,
                ..Head::new(204)
            };
            return response.finish(head, None, None);
        }
        "POST" | "PUT" | "DELETE" | "PATCH" | "CONNECT" | "TRACE" => {
            return response.page(405, "", true, None);
        }
        _ => return response.page(501, "Unknown method.", true, None),
    }

    let (path, query) = split_query(origin_form(view.target));
    let mut normal = NormalPath::new();
    match normalize_path(path, &mut normal) {
        Ok(()) => {}
        Err(PathError::Malformed) => {
            return response.page(400, "Malformed request target.", false, None);
        }
        Err(PathError::Traversal) => {
            return response.page(400, "Path escapes the site root.", false, None);
        }
        Err(PathError::TooLong) => return response.page(414, "", false, None),
        Err(PathError::NotUtf8) => {
            let custom = image.header_rules().collect("/");
            response.custom = Some(&custom);
            return not_found(&mut response, view, image, "/");
        }
    }
    if image.search().is_some() && (*normal == *SEARCH_PATH || *normal == *SEARCH_JSON_PATH) {
        // The page is written once the query has run and the page is measured (transmit).
        search.start(&normal, query, image);
        search.is_head = is_head;
        search.close = response.close;
        search.version = view.version;
        search.secure = secure;
        return Outcome {
            status: 200,
            close: response.close,
            body: None,
            deferred: true,
            request_body: if response.close {
                BodySkip::None
            } else {
                response.request_body
            },
            upload: None,
        };
    }
    let custom = image.header_rules().collect(&normal);
    response.custom = Some(&custom);
    route(&mut response, view, image, &normal, query)
}

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
