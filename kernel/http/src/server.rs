//! The shared side of the engine: the site being served, configuration, limits and counters.

use crate::counters::Counters;
use bramble_hal::Instant;
use bramble_site::{BodySource, SiteImage, SiteIndex};

/// What the server has to serve.
#[derive(Clone, Copy)]
pub enum SiteSource<'a> {
    /// A validated site image, bodies included, in RAM.
    Ready(SiteImage<'a>),
    /// A validated site index whose bodies come from a source that may have to read them first
    /// (the card store): responses wait for their bodies without blocking anything else.
    Store(SiteIndex<'a>, &'a dyn BodySource),
    /// No usable site image; every request gets a 503 diagnostic page naming the problem
    /// (e.g. "SITE.BIN not found on the SD card" or "SITE.BIN: checksum mismatch").
    Unavailable(&'a str),
}

impl core::fmt::Debug for SiteSource<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SiteSource::Ready(image) => f.debug_tuple("Ready").field(image).finish(),
            SiteSource::Store(index, _) => f.debug_tuple("Store").field(index).finish(),
            SiteSource::Unavailable(problem) => {
                f.debug_tuple("Unavailable").field(problem).finish()
            }
        }
    }
}

impl<'a> SiteSource<'a> {
    /// The site's index, when there is a site.
    pub fn index(&self) -> Option<SiteIndex<'a>> {
        match self {
            SiteSource::Ready(image) => Some(image.index()),
            SiteSource::Store(index, _) => Some(*index),
            SiteSource::Unavailable(_) => None,
        }
    }
}

/// Per-connection limits: deadlines and sizes. Times are in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// From accepting a connection to its first byte.
    pub first_byte_micros: u64,
    /// From the first byte of a request to the end of its header section (and its body,
    /// which is read and discarded). Slow-header (slowloris) clients are cut off here.
    pub header_micros: u64,
    /// How long a kept-alive connection may sit idle between requests.
    pub idle_micros: u64,
    /// From queuing a response to handing its last byte to the socket, plus the allowance
    /// below for large bodies; a client that reads slower than this is aborted.
    pub response_micros: u64,
    /// Slowest transfer rate a large response is allowed, in bytes per second: a response
    /// of `n` bytes gets `n / rate` seconds on top of `response_micros`, so big files reach
    /// slow but honest clients while a client reading a trickle is still cut off. 0 gives no
    /// allowance.
    pub min_send_bytes_per_second: u64,
    /// Largest request body read (and discarded); larger ones get 413 and the connection
    /// closes.
    pub max_body_bytes: u64,
    /// Requests served on one connection before it is closed (0: unlimited).
    pub max_requests_per_connection: u32,
    /// From asking for a graceful close (the FIN queued behind the last response bytes) to
    /// giving up on it: a peer that never takes those bytes, or never acknowledges the FIN,
    /// gets a reset instead of holding the socket forever.
    pub close_micros: u64,
}

impl Limits {
    /// The defaults: 10 s to the first byte, 10 s for a header, 15 s idle, 60 s per
    /// response plus one second per 16 KiB of it, 1 MiB of request body, 1000 requests per
    /// connection, 10 s to finish closing.
    pub const DEFAULT: Limits = Limits {
        first_byte_micros: 10_000_000,
        header_micros: 10_000_000,
        idle_micros: 15_000_000,
        response_micros: 60_000_000,
        min_send_bytes_per_second: 16 * 1024,
        max_body_bytes: 1 << 20,
        max_requests_per_connection: 1000,
        close_micros: 10_000_000,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Server configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// Write one access-log line per request through the `log` facade (target
    /// `bramble_http::access`, level info).
    pub access_log: bool,
    /// Deadlines and sizes.
    pub limits: Limits,
    /// `https = only`: the HTTPS port plain-HTTP requests are redirected to (308), except
    /// those under `/.well-known/acme-challenge/` (the ACME HTTP-01 challenge, RFC 8555
    /// §8.3, must answer over plain HTTP). `None`: plain HTTP serves the site.
    pub redirect_to_https_port: Option<u16>,
    /// Strict-Transport-Security max-age sent on HTTPS responses (`None`: not sent).
    pub hsts_seconds: Option<u32>,
    /// The host name the 308 to HTTPS names (the first configured `domain`). `None`: the
    /// request's Host, as it must be on a LAN without a name; never a name the request
    /// target carries.
    pub redirect_host: Option<RedirectHost>,
}

/// A DNS name for the `https = only` redirect's Location: up to 253 bytes of letters,
/// digits, `-` and `.`, kept inline so that [`ServerConfig`] stays `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedirectHost {
    bytes: [u8; 253],
    len: u8,
}

impl RedirectHost {
    /// `name` if it is a plain DNS name (letters, digits, `-`, `.`; 1-253 bytes).
    pub fn new(name: &str) -> Option<Self> {
        let len = u8::try_from(name.len())
            .ok()
            .filter(|&n| n > 0 && n <= 253)?;
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return None;
        }
        let mut bytes = [0; 253];
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        Some(Self { bytes, len })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Only ASCII was accepted in `new`.
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            access_log: true,
            limits: Limits::DEFAULT,
            redirect_to_https_port: None,
            hsts_seconds: None,
            redirect_host: None,
        }
    }
}

/// The server: the site, the configuration and the counters shared by all connections.
#[derive(Debug)]
pub struct Server<'a> {
    pub(crate) site: SiteSource<'a>,
    /// The site's generation: one more at each [`Server::switch_site`]. A response reads the
    /// site of the generation it started with.
    pub(crate) generation: u32,
    /// Responses started with the current site and not yet finished.
    pub(crate) responses_in_flight: u32,
    /// The site served before the last switch, while responses that started with it finish.
    pub(crate) retiring: Option<Retiring<'a>>,
    pub(crate) config: ServerConfig,
    pub(crate) counters: Counters,
    /// Unix seconds at an instant, once the clock has been set from the network; only then
    /// is a Date header sent (RFC 9110 §6.6.1).
    pub(crate) wall_clock: Option<(u64, Instant)>,
    /// The server's addresses, as the network layer last gave them: shown on the 503
    /// diagnostic page.
    pub(crate) addresses: heapless::String<ADDRESSES_LEN>,
    /// What else is wrong beside the site (HTTPS that could not start, a certificate that
    /// expired): shown on the 503 diagnostic page.
    pub(crate) notice: heapless::String<NOTICE_LEN>,
    /// ACME HTTP-01 answers being served: token and key authorization.
    pub(crate) acme_answers: heapless::Vec<AcmeAnswer, MAX_ACME_ANSWERS>,
    /// The searches being answered (a few at once, shared by all connections).
    pub(crate) searches: crate::search::SearchSlots,
    /// Who may see the status page and metrics.
    pub(crate) status_access: crate::status::StatusAccess,
    /// The owner's proxies (`proxy_from`), whose forwarding headers name the client
    /// ([`crate::forwarded`]).
    pub(crate) trusted_proxies:
        heapless::Vec<crate::status::Prefix, { crate::status::MAX_STATUS_PREFIXES }>,
    /// The board's figures for them.
    pub(crate) status_snapshot: crate::status::StatusSnapshot,
    /// Today's visitor counts.
    pub(crate) visitors: crate::visitors::Visitors,
    /// What takes site uploads (`PUT /.well-known/bramble/site`), when publishing is on.
    pub(crate) upload: UploadHandler<'a>,
}

/// The upload handler the server hands upload requests to ([`Server::set_upload`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct UploadHandler<'a>(
    pub(crate) Option<&'a core::cell::RefCell<dyn crate::upload::SiteUpload + 'a>>,
);

impl core::fmt::Debug for UploadHandler<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// A site switched away from whose responses are still being sent.
#[derive(Debug)]
pub(crate) struct Retiring<'a> {
    site: SiteSource<'a>,
    generation: u32,
    responses: u32,
}

/// [`Server::site_of`] over the server's fields (for a caller that borrows others beside).
pub(crate) fn site_of<'s, 'a>(
    site: &'s SiteSource<'a>,
    current: u32,
    retiring: &'s Option<Retiring<'a>>,
    generation: u32,
) -> &'s SiteSource<'a> {
    if generation == current {
        return site;
    }
    match retiring {
        Some(retiring) if retiring.generation == generation => &retiring.site,
        _ => &SiteSource::Unavailable("the site this response started with was retired"),
    }
}

/// HTTP-01 answers served at once (an order's names are validated one at a time; a few more
/// cover a CA that checks several at once).
pub const MAX_ACME_ANSWERS: usize = 8;
/// Longest HTTP-01 token kept (Let's Encrypt's are 43 bytes).
pub const MAX_ACME_TOKEN_LEN: usize = 128;
/// Longest key authorization kept (the token, a dot, a 43-byte thumbprint).
pub const MAX_ACME_KEY_AUTHORIZATION_LEN: usize = MAX_ACME_TOKEN_LEN + 64;

/// One HTTP-01 answer (RFC 8555 §8.3): GET /.well-known/acme-challenge/TOKEN gives the key
/// authorization.
#[derive(Debug, Clone)]
pub(crate) struct AcmeAnswer {
    pub(crate) token: heapless::String<MAX_ACME_TOKEN_LEN>,
    pub(crate) key_authorization: heapless::String<MAX_ACME_KEY_AUTHORIZATION_LEN>,
}

/// Longest list of addresses kept for the diagnostic page (one IPv4 and five IPv6 addresses
/// with their notes fit).
pub const ADDRESSES_LEN: usize = 384;

/// Longest notice kept for the diagnostic page (see [`Server::set_notice`]).
pub const NOTICE_LEN: usize = 384;

impl<'a> Server<'a> {
    /// A server for `site` with `config`.
    pub fn new(site: SiteSource<'a>, config: ServerConfig) -> Self {
        Self {
            site,
            generation: 0,
            responses_in_flight: 0,
            retiring: None,
            config,
            counters: Counters::default(),
            wall_clock: None,
            addresses: heapless::String::new(),
            notice: heapless::String::new(),
            acme_answers: heapless::Vec::new(),
            searches: crate::search::SearchSlots::new(),
            status_access: crate::status::StatusAccess::default(),
            trusted_proxies: heapless::Vec::new(),
            status_snapshot: crate::status::StatusSnapshot::default(),
            visitors: crate::visitors::Visitors::default(),
            upload: UploadHandler(None),
        }
    }

    /// Hands site uploads (`PUT /.well-known/bramble/site` over HTTPS, see
    /// [`crate::upload`]) to `handler` from now on; without one they are refused
    /// (`publishing-off`). The handler is borrowed only while a connection calls it.
    pub fn set_upload(
        &mut self,
        handler: &'a core::cell::RefCell<dyn crate::upload::SiteUpload + 'a>,
    ) {
        self.upload = UploadHandler(Some(handler));
    }

    /// Sets who may see the status page and metrics.
    pub fn set_status_access(&mut self, access: crate::status::StatusAccess) {
        self.status_access = access;
    }

    /// Sets the owner's proxies (`proxy_from`, at most
    /// [`crate::status::MAX_STATUS_PREFIXES`]; the rest are ignored): requests from them are
    /// logged and counted under the client address their forwarding headers give.
    pub fn set_trusted_proxies(&mut self, proxies: &[crate::status::Prefix]) {
        self.trusted_proxies = proxies
            .iter()
            .copied()
            .take(self.trusted_proxies.capacity())
            .collect();
    }

    /// Whether the visitor counts want a fresh salt for the next day (see
    /// [`crate::visitors`]).
    pub fn wants_visitor_salt(&self) -> bool {
        self.visitors.wants_salt()
    }

    /// Gives the visitor counts a fresh salt from the CSPRNG for the next day.
    pub fn offer_visitor_salt(&mut self, salt: [u8; 16]) {
        self.visitors.offer_salt(salt);
    }

    /// Today's visitor counts.
    pub fn visitors(&self) -> &crate::visitors::Visitors {
        &self.visitors
    }

    /// Counts one answered request in the visitor counts (GETs only).
    pub(crate) fn count_visit(&mut self, now: Instant, request: crate::visitors::VisitRequest<'_>) {
        // The owner's own pages are not the site's.
        if crate::status::StatusPage::for_path(request.path).is_some() {
            return;
        }
        // UTC days once the clock is set; before that, days of uptime (numbered apart).
        let day = match self.unix_time(now) {
            Some(unix) => unix / 86_400,
            None => (1 << 40) + now.as_micros() / 86_400_000_000,
        };
        self.visitors.count(day, request);
    }

    /// Gives the status page and metrics the board's current figures.
    pub fn set_status_snapshot(&mut self, snapshot: crate::status::StatusSnapshot) {
        self.status_snapshot = snapshot;
    }

    /// Starts (`Some(port)`) or stops answering plain HTTP with a 308 to https on `port`
    /// (`https = only`), for when HTTPS starts after the server, as with ACME.
    pub fn set_redirect_to_https_port(&mut self, port: Option<u16>) {
        self.config.redirect_to_https_port = port;
    }

    /// The addresses the diagnostic page shows.
    pub fn addresses(&self) -> &str {
        &self.addresses
    }

    /// Sets the addresses the diagnostic page shows (cut at [`ADDRESSES_LEN`] bytes, at a
    /// character boundary).
    pub fn set_addresses(&mut self, text: &str) {
        self.addresses.clear();
        for c in text.chars() {
            if self.addresses.push(c).is_err() {
                break;
            }
        }
    }

    /// What the diagnostic page says beside the site's problem, such as why HTTPS is not
    /// running or that the certificate expired; empty for nothing.
    pub fn notice(&self) -> &str {
        &self.notice
    }

    /// Sets the notice that the diagnostic page shows, as a paragraph of its own (HTML-escaped
    /// there; cut at [`NOTICE_LEN`] bytes, at a character boundary). An empty text removes it.
    pub fn set_notice(&mut self, text: &str) {
        self.notice.clear();
        for c in text.chars() {
            if self.notice.push(c).is_err() {
                break;
            }
        }
    }

    /// Serves `key_authorization` at `/.well-known/acme-challenge/<token>` (plain HTTP and
    /// HTTPS, whatever the site holds there) until [`Server::clear_acme_answers`]. The oldest
    /// answer makes room when [`MAX_ACME_ANSWERS`] are up. Returns false if either is too
    /// long or the token is not base64url.
    pub fn add_acme_answer(&mut self, token: &str, key_authorization: &str) -> bool {
        let token_ok = !token.is_empty()
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let (Ok(token), Ok(key_authorization)) = (
            heapless::String::try_from(token),
            heapless::String::try_from(key_authorization),
        ) else {
            return false;
        };
        if !token_ok {
            return false;
        }
        if self.acme_answers.is_full() {
            self.acme_answers.remove(0);
        }
        let _ = self.acme_answers.push(AcmeAnswer {
            token,
            key_authorization,
        });
        true
    }

    /// Stops serving every HTTP-01 answer.
    pub fn clear_acme_answers(&mut self) {
        self.acme_answers.clear();
    }

    /// The key authorization for `token`, if it is being served.
    pub(crate) fn acme_answer(&self, token: &str) -> Option<&str> {
        self.acme_answers
            .iter()
            .find(|answer| answer.token == token)
            .map(|answer| answer.key_authorization.as_str())
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The configuration in use.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The site being served.
    pub fn site(&self) -> &SiteSource<'a> {
        &self.site
    }

    /// Serves `site` from the next request on, on every connection (HTTP/1.1 and HTTP/2,
    /// plain and TLS, which share this server). Responses already started keep reading the
    /// site they started with, which retires once they are done
    /// ([`Server::retiring_responses`], [`Server::retire_site`]). Refused (false) while an
    /// earlier switch's site is still retiring: the caller must not reuse the retiring
    /// site's storage before it has retired.
    #[must_use]
    pub fn switch_site(&mut self, site: SiteSource<'a>) -> bool {
        if self.retiring.is_some() {
            return false;
        }
        let old = core::mem::replace(&mut self.site, site);
        self.retiring = Some(Retiring {
            site: old,
            generation: self.generation,
            responses: self.responses_in_flight,
        });
        self.generation = self.generation.wrapping_add(1);
        self.responses_in_flight = 0;
        true
    }

    /// Responses still being sent from the site before the last switch (`None`: no switch
    /// is retiring).
    pub fn retiring_responses(&self) -> Option<u32> {
        self.retiring.as_ref().map(|retiring| retiring.responses)
    }

    /// Stops serving the site before the last switch (false: none was retiring); a response still
    /// reading it (which [`Server::retiring_responses`] counts) cannot finish and its
    /// connection is reset, so that no response ever mixes two sites.
    pub fn retire_site(&mut self) -> bool {
        self.retiring.take().is_some()
    }

    /// The site's generation (one more at each switch).
    pub fn site_generation(&self) -> u32 {
        self.generation
    }

    /// The site of `generation`: the current one, the retiring one, or, for one retired, a
    /// site that fails every body read.
    pub(crate) fn site_of(&self, generation: u32) -> &SiteSource<'a> {
        site_of(&self.site, self.generation, &self.retiring, generation)
    }

    /// A response starts with the current site: counted, and its generation returned.
    pub(crate) fn response_started(&mut self) -> u32 {
        self.responses_in_flight = self.responses_in_flight.saturating_add(1);
        self.generation
    }

    /// A response of `generation` ended (sent, cut or abandoned).
    pub(crate) fn response_ended(&mut self, generation: u32) {
        if generation == self.generation {
            self.responses_in_flight = self.responses_in_flight.saturating_sub(1);
        } else if let Some(retiring) = self.retiring.as_mut()
            && retiring.generation == generation
        {
            retiring.responses = retiring.responses.saturating_sub(1);
        }
    }

    /// Records that the wall-clock time was `unix_seconds` at `at` (e.g. from SNTP). From
    /// then on every response carries a Date header.
    pub fn set_wall_clock(&mut self, unix_seconds: u64, at: Instant) {
        self.wall_clock = Some((unix_seconds, at));
    }

    /// Unix seconds at `now`, if the wall clock was set.
    pub(crate) fn unix_time(&self, now: Instant) -> Option<u64> {
        self.wall_clock
            .map(|(seconds, at)| seconds.saturating_add(now.micros_since(at) / 1_000_000))
    }
}
