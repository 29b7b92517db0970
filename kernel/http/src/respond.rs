//! How a response is written: the [`Response`] builder over the connection's head buffer,
//! built-in pages, and a site file's answer (content negotiation over its variants,
//! conditional requests and byte ranges).

use bramble_site::rules::CollectedHeaders;
use bramble_site::{Body, FileEntry, Variant};

use crate::fields::{
    self, Coding, Comparison, RangeRequest, etag_list_matches, negotiate_coding, parse_range,
};
use crate::request::{BodySkip, RequestView};
use crate::response::{
    ByteWriter, ConnectionField, ContentRange, Head, write_error_page, write_error_page_paragraphs,
};

/// Capacity of the response-head buffer (headers plus any built-in page body).
pub const RESPONSE_HEAD_LEN: usize = 2336;
/// Longest built-in page body (error pages, the 503 diagnostic page).
const PAGE_LEN: usize = 1024;
/// Longest 503 diagnostic page body: the site's problem, the addresses and the notice,
/// escaped. It goes out in the response-head buffer with a head of about 400 bytes.
const DIAGNOSTIC_PAGE_LEN: usize = RESPONSE_HEAD_LEN - 640;

/// What handling one request decided.
pub(crate) struct Outcome {
    /// Response status.
    pub(crate) status: u16,
    /// Close after this response.
    pub(crate) close: bool,
    /// The body and the range of it to send.
    pub(crate) body: Option<(Body, u32, u32)>,
    /// The response is a generated page (search): its head is written once it is measured.
    pub(crate) deferred: bool,
    /// The request body following the header section, to read and discard.
    pub(crate) request_body: BodySkip,
    /// The request is a site upload's or asks for its state: the connection asks the
    /// upload handler, and nothing is written yet ([`crate::upload`]).
    pub(crate) upload: Option<UploadRoute>,
}

/// An upload request the connection hands to the upload handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UploadRoute {
    /// `PUT` with a body of `length` bytes.
    Put {
        /// Content-Length.
        length: u64,
    },
    /// `GET`: the upload under way.
    State,
}

/// Builds one response into the head buffer.
pub(crate) struct Response<'h, 's> {
    pub(crate) head: &'h mut heapless::Vec<u8, RESPONSE_HEAD_LEN>,
    /// The site's `_headers` lines for this request's path.
    pub(crate) custom: Option<&'s CollectedHeaders<'s>>,
    /// Send the default security headers.
    pub(crate) security_defaults: bool,
    /// The connection is over HTTPS.
    pub(crate) secure: bool,
    /// A HEAD request: headers only.
    is_head: bool,
    date: Option<u64>,
    pub(crate) close: bool,
    /// Request body to discard after the header section.
    pub(crate) request_body: BodySkip,
    /// 0 for HTTP/1.0 (keep-alive must be acknowledged), 1 for HTTP/1.1.
    version: u8,
    /// Strict-Transport-Security for every response written (HTTPS with `hsts` set).
    pub(crate) hsts_seconds: Option<u32>,
}

impl<'h, 's> Response<'h, 's> {
    pub(crate) fn new(
        head: &'h mut heapless::Vec<u8, RESPONSE_HEAD_LEN>,
        is_head: bool,
        date: Option<u64>,
        close: bool,
        request_body: BodySkip,
        version: u8,
    ) -> Self {
        Self {
            head,
            custom: None,
            security_defaults: true,
            secure: false,
            is_head,
            date,
            close,
            request_body,
            version,
            hsts_seconds: None,
        }
    }

    fn connection_field(&self) -> ConnectionField {
        if self.close {
            ConnectionField::Close
        } else if self.version == 0 {
            ConnectionField::KeepAlive
        } else {
            ConnectionField::Omit
        }
    }

    /// Writes `head` (date, connection and the site's headers filled in) and an optional
    /// built-in `page` body.
    pub(crate) fn finish<'x>(
        &mut self,
        mut head: Head<'x>,
        page: Option<&str>,
        body: Option<(Body, u32, u32)>,
    ) -> Outcome
    where
        's: 'x,
    {
        head.date = self.date;
        head.connection = self.connection_field();
        head.hsts_seconds = self.hsts_seconds;
        head.custom = self.custom;
        head.security_defaults = self.security_defaults;
        head.secure = self.secure;
        self.head.clear();
        let mut fits = head.write(&mut ByteWriter(self.head)).is_ok();
        if let (true, false, Some(page)) = (fits, self.is_head, page) {
            fits = self.head.extend_from_slice(page.as_bytes()).is_ok();
        }
        if fits {
            return Outcome {
                status: head.status,
                close: self.close,
                deferred: false,
                body: if self.is_head { None } else { body },
                request_body: if self.close {
                    BodySkip::None
                } else {
                    self.request_body
                },
                upload: None,
            };
        }
        // Only a Location built from a very long path (or a site's very long headers) can
        // overflow the buffer.
        self.close = true;
        let status = if head.location.is_some()
            || head.https_location.is_some()
            || head.location_url.is_some()
        {
            414
        } else {
            500
        };
        let fallback = Head {
            content_length: Some(0),
            connection: ConnectionField::Close,
            ..Head::new(status)
        };
        self.head.clear();
        let _ = fallback.write(&mut ByteWriter(self.head));
        Outcome {
            status,
            close: true,
            deferred: false,
            body: None,
            request_body: BodySkip::None,
            upload: None,
        }
    }

    /// A JSON answer (the site upload's, [`crate::upload`]).
    pub(crate) fn json(&mut self, answer: &crate::upload::Answer) -> Outcome {
        let head = Head {
            content_type: Some("application/json"),
            content_length: Some(answer.json.len() as u64),
            cache_control: Some("no-store"),
            ..Head::new(answer.status)
        };
        self.finish(head, Some(&answer.json), None)
    }

    /// 308 to the same target over HTTPS (RFC 9110 §15.4.9: the method and body are kept).
    pub(crate) fn redirect_to_https(&mut self, host: &str, port: u16, target: &str) -> Outcome {
        let mut body = heapless::String::<PAGE_LEN>::new();
        let _ = write_error_page(&mut body, 308, "This site is served over HTTPS.");
        let head = Head {
            content_type: Some("text/html; charset=utf-8"),
            content_length: Some(body.len() as u64),
            cache_control: Some("no-cache"),
            https_location: Some((host, port, target)),
            ..Head::new(308)
        };
        self.finish(head, Some(&body), None)
    }

    /// A built-in HTML page for `status`.
    pub(crate) fn page(
        &mut self,
        status: u16,
        detail: &str,
        allow: bool,
        location: Option<(&str, Option<&str>)>,
    ) -> Outcome {
        let mut body = heapless::String::<PAGE_LEN>::new();
        if write_error_page(&mut body, status, detail).is_err() {
            body.clear();
            let _ = write_error_page(&mut body, status, "");
        }
        let head = Head {
            content_type: Some("text/html; charset=utf-8"),
            content_length: Some(body.len() as u64),
            cache_control: Some("no-cache"),
            allow,
            location,
            ..Head::new(status)
        };
        self.finish(head, Some(&body), None)
    }

    /// The 503 diagnostic page: `detail` (the site's problem and the addresses) and `notice`
    /// (anything else wrong, such as HTTPS), each a paragraph. What does not fit is dropped,
    /// the notice first.
    pub(crate) fn diagnostic_page(&mut self, detail: &str, notice: &str) -> Outcome {
        let mut body = heapless::String::<DIAGNOSTIC_PAGE_LEN>::new();
        let mut written = write_error_page_paragraphs(&mut body, 503, &[detail, notice]);
        for details in [[detail, ""], ["", ""]] {
            if written.is_ok() {
                break;
            }
            body.clear();
            written = write_error_page_paragraphs(&mut body, 503, &details);
        }
        let head = Head {
            content_type: Some("text/html; charset=utf-8"),
            content_length: Some(body.len() as u64),
            cache_control: Some("no-cache"),
            ..Head::new(503)
        };
        self.finish(head, Some(&body), None)
    }
}

/// The part of a variant's body from `first` to `last_inclusive`, `None` when empty.
pub(crate) fn body_range(body: Body, first: u64, last_inclusive: u64) -> Option<(Body, u32, u32)> {
    if body.is_empty() {
        return None;
    }
    let first = u32::try_from(first).ok()?;
    let end = u32::try_from(last_inclusive).ok()?.checked_add(1)?;
    (first < end && end <= body.len).then_some((body, first, end))
}

/// The variant to send for `coding`, and its Content-Encoding.
pub(crate) fn select_variant<'a>(
    entry: &FileEntry<'a>,
    coding: Coding,
) -> (Variant<'a>, Option<&'static str>) {
    match (coding, entry.brotli, entry.gzip) {
        (Coding::Brotli, Some(variant), _) => (variant, Some("br")),
        (Coding::Gzip, _, Some(variant)) => (variant, Some("gzip")),
        _ => (entry.identity, None),
    }
}

/// `status` (404 or 410) with `entry`'s content (negotiated like any file): a site's
/// 404.html, or the page a 404 or 410 rule names.
pub(crate) fn serve_error_page(
    response: &mut Response<'_, '_>,
    view: &RequestView<'_>,
    entry: FileEntry<'_>,
    status: u16,
) -> Outcome {
    let has_variants = entry.gzip.is_some() || entry.brotli.is_some();
    let coding = negotiate_coding(
        view.all("accept-encoding"),
        entry.gzip.is_some(),
        entry.brotli.is_some(),
    );
    let (variant, encoding) = select_variant(&entry, coding);
    let len = variant.body.len();
    let head = Head {
        content_type: Some(entry.content_type),
        content_length: Some(len),
        content_encoding: encoding,
        cache_control: Some("no-cache"),
        vary_encoding: has_variants,
        ..Head::new(status)
    };
    let body = body_range(variant.body, 0, len.saturating_sub(1));
    response.finish(head, None, body)
}

/// 200, 206, 304, 412 or 416 for a file, after content negotiation and the conditional
/// request evaluation order of RFC 9110 §13.2.2.
pub(crate) fn serve_file(
    response: &mut Response<'_, '_>,
    view: &RequestView<'_>,
    entry: FileEntry<'_>,
) -> Outcome {
    let has_variants = entry.gzip.is_some() || entry.brotli.is_some();
    let coding = negotiate_coding(
        view.all("accept-encoding"),
        entry.gzip.is_some(),
        entry.brotli.is_some(),
    );
    let (variant, encoding) = select_variant(&entry, coding);
    let len = variant.body.len();

    // Step 1-2: If-Match, else If-Unmodified-Since.
    let if_match = view.first("if-match").is_some();
    let precondition_failed = if if_match {
        !view
            .all("if-match")
            .any(|v| etag_list_matches(v, variant.etag, Comparison::Strong))
    } else {
        view.first("if-unmodified-since")
            .and_then(crate::date::parse_http_date)
            .is_some_and(|since| entry.last_modified > since)
    };
    if precondition_failed {
        return response.page(412, "", false, None);
    }

    // Step 3-4: If-None-Match, else If-Modified-Since (GET and HEAD only, which these are).
    let not_modified = if view.first("if-none-match").is_some() {
        view.all("if-none-match")
            .any(|v| etag_list_matches(v, variant.etag, Comparison::Weak))
    } else {
        view.first("if-modified-since")
            .and_then(crate::date::parse_http_date)
            .is_some_and(|since| entry.last_modified <= since)
    };
    if not_modified {
        // RFC 9110 §15.4.5: the validators and caching fields of the 200, no content fields.
        let head = Head {
            etag: Some(variant.etag),
            cache_control: Some(entry.cache_control),
            vary_encoding: has_variants,
            ..Head::new(304)
        };
        return response.finish(head, None, None);
    }

    // Step 5: Range, guarded by If-Range, for GET only.
    let mut range = RangeRequest::Full;
    if view.method == "GET" {
        let mut ranges = view.all("range");
        if let (Some(value), None) = (ranges.next(), ranges.next()) {
            let validator_holds = match view.first("if-range") {
                None => true,
                Some(v) if fields::is_entity_tag(v) => {
                    etag_list_matches(v, variant.etag, Comparison::Strong)
                }
                Some(v) => crate::date::parse_http_date(v) == Some(entry.last_modified),
            };
            if validator_holds {
                range = parse_range(value, len);
            }
        }
    }

    let file_head = Head {
        content_type: Some(entry.content_type),
        content_encoding: encoding,
        etag: Some(variant.etag),
        last_modified: Some(entry.last_modified_http),
        cache_control: Some(entry.cache_control),
        vary_encoding: has_variants,
        accept_ranges: true,
        ..Head::new(200)
    };
    match range {
        RangeRequest::Full => {
            let head = Head {
                content_length: Some(len),
                ..file_head
            };
            response.finish(
                head,
                None,
                body_range(variant.body, 0, len.saturating_sub(1)),
            )
        }
        RangeRequest::Part { first, last } => {
            let head = Head {
                status: 206,
                content_length: Some(last - first + 1),
                content_range: Some(ContentRange::Part { first, last, len }),
                ..file_head
            };
            response.finish(head, None, body_range(variant.body, first, last))
        }
        RangeRequest::Unsatisfiable => {
            let head = Head {
                content_length: Some(0),
                content_range: Some(ContentRange::Unsatisfied { len }),
                cache_control: Some("no-cache"),
                vary_encoding: has_variants,
                accept_ranges: true,
                ..Head::new(416)
            };
            response.finish(head, None, None)
        }
    }
}
