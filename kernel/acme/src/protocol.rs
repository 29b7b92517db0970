//! The CA's objects (RFC 8555 §7.1) read from its JSON: directory, order, authorization,
//! challenge, problem document. Every field is checked for kind and length; URLs must be
//! `https://` URLs the client can follow.

use crate::http::{MAX_URL_LEN, parse_https_url};
use crate::json::Value;
use alloc::string::String;
use alloc::vec::Vec;

/// Most authorizations in one order (one per name; Let's Encrypt allows 100 names).
pub const MAX_AUTHORIZATIONS: usize = 100;
/// Most challenges offered in one authorization.
const MAX_CHALLENGES: usize = 8;
/// Longest token accepted (RFC 8555 §8.3: at least 128 bits of entropy, base64url).
pub const MAX_TOKEN_LEN: usize = 128;
/// Longest problem detail kept.
const MAX_DETAIL_LEN: usize = 300;

/// What a CA object did not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl core::fmt::Display for Malformed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "the CA's answer lacks a valid {}", self.0)
    }
}

fn url_field(value: &Value, name: &'static str) -> Result<String, Malformed> {
    let url = value.str_field(name).ok_or(Malformed(name))?;
    parse_https_url(url).ok_or(Malformed(name))?;
    Ok(String::from(url))
}

fn optional_url(value: &Value, name: &'static str) -> Option<String> {
    url_field(value, name).ok()
}

/// The directory (§7.1.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directory {
    /// newNonce.
    pub new_nonce: String,
    /// newAccount.
    pub new_account: String,
    /// newOrder.
    pub new_order: String,
    /// renewalInfo (RFC 9773), when the CA offers it.
    pub renewal_info: Option<String>,
}

impl Directory {
    /// Reads a directory object.
    pub fn from_json(value: &Value) -> Result<Self, Malformed> {
        Ok(Self {
            new_nonce: url_field(value, "newNonce")?,
            new_account: url_field(value, "newAccount")?,
            new_order: url_field(value, "newOrder")?,
            renewal_info: optional_url(value, "renewalInfo"),
        })
    }
}

/// Status of an order, authorization or challenge (§7.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// pending.
    Pending,
    /// ready (orders).
    Ready,
    /// processing.
    Processing,
    /// valid.
    Valid,
    /// invalid.
    Invalid,
    /// expired, deactivated, revoked: over.
    Ended,
}

fn status_field(value: &Value) -> Result<Status, Malformed> {
    Ok(
        match value.str_field("status").ok_or(Malformed("status"))? {
            "pending" => Status::Pending,
            "ready" => Status::Ready,
            "processing" => Status::Processing,
            "valid" => Status::Valid,
            "invalid" => Status::Invalid,
            "expired" | "deactivated" | "revoked" => Status::Ended,
            _ => return Err(Malformed("status")),
        },
    )
}

/// An order (§7.1.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// Its status.
    pub status: Status,
    /// Authorization URLs.
    pub authorizations: Vec<String>,
    /// Where to send the CSR.
    pub finalize: String,
    /// The certificate, once valid.
    pub certificate: Option<String>,
    /// Why it failed, when the CA says.
    pub error: Option<Problem>,
}

impl Order {
    /// Reads an order object.
    pub fn from_json(value: &Value) -> Result<Self, Malformed> {
        let list = value
            .get("authorizations")
            .and_then(Value::as_array)
            .ok_or(Malformed("authorizations"))?;
        if list.len() > MAX_AUTHORIZATIONS {
            return Err(Malformed("authorizations"));
        }
        let mut authorizations = Vec::with_capacity(list.len());
        for item in list {
            let url = item.as_str().ok_or(Malformed("authorizations"))?;
            parse_https_url(url).ok_or(Malformed("authorizations"))?;
            authorizations.push(String::from(url));
        }
        Ok(Self {
            status: status_field(value)?,
            authorizations,
            finalize: url_field(value, "finalize")?,
            certificate: optional_url(value, "certificate"),
            error: value.get("error").and_then(Problem::from_json),
        })
    }
}

/// The challenge types this client answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeKind {
    /// http-01 (§8.3), on port 80.
    Http01,
    /// tls-alpn-01 (RFC 8737), on port 443.
    TlsAlpn01,
    /// dns-01 (§8.4): a TXT record at `_acme-challenge.NAME`, the only one for wildcard
    /// names.
    Dns01,
}

impl ChallengeKind {
    /// The type's name in ACME.
    pub fn name(self) -> &'static str {
        match self {
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
            ChallengeKind::Dns01 => "dns-01",
        }
    }
}

/// One challenge of an authorization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// Its type.
    pub kind: ChallengeKind,
    /// Where to say it is ready.
    pub url: String,
    /// The token (base64url).
    pub token: String,
    /// Its status.
    pub status: Status,
    /// Why it failed, when it did.
    pub error: Option<Problem>,
}

/// An authorization (§7.1.4), with the challenges this client can answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorization {
    /// The DNS name it is for.
    pub name: String,
    /// Its status.
    pub status: Status,
    /// The challenges of known types, in the CA's order.
    pub challenges: Vec<Challenge>,
}

impl Authorization {
    /// Reads an authorization object.
    pub fn from_json(value: &Value) -> Result<Self, Malformed> {
        let identifier = value.get("identifier").ok_or(Malformed("identifier"))?;
        let name = identifier
            .str_field("value")
            .ok_or(Malformed("identifier"))?;
        if name.len() > 253 {
            return Err(Malformed("identifier"));
        }
        let list = value
            .get("challenges")
            .and_then(Value::as_array)
            .ok_or(Malformed("challenges"))?;
        let mut challenges = Vec::new();
        for item in list.iter().take(MAX_CHALLENGES) {
            let kind = match item.str_field("type") {
                Some("http-01") => ChallengeKind::Http01,
                Some("tls-alpn-01") => ChallengeKind::TlsAlpn01,
                Some("dns-01") => ChallengeKind::Dns01,
                _ => continue,
            };
            let token = item.str_field("token").ok_or(Malformed("token"))?;
            let token_ok = !token.is_empty()
                && token.len() <= MAX_TOKEN_LEN
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !token_ok {
                return Err(Malformed("token"));
            }
            challenges.push(Challenge {
                kind,
                url: url_field(item, "url")?,
                token: String::from(token),
                status: status_field(item)?,
                error: item.get("error").and_then(Problem::from_json),
            });
        }
        Ok(Self {
            name: String::from(name),
            status: status_field(value)?,
            challenges,
        })
    }
}

/// A problem document (RFC 7807, RFC 8555 §6.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The type, without the `urn:ietf:params:acme:error:` prefix when it has it.
    pub kind: String,
    /// The detail, cut to a few hundred bytes.
    pub detail: String,
}

/// The renewal window a CA suggests for a certificate (RFC 9773 §4.2), Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RenewalWindow {
    /// The window's start.
    pub start: i64,
    /// The window's end.
    pub end: i64,
}

impl RenewalWindow {
    /// Reads a RenewalInfo object: `suggestedWindow` with RFC 3339 `start` and `end`, the
    /// start before the end.
    pub fn from_json(value: &Value) -> Result<Self, Malformed> {
        let window = value
            .get("suggestedWindow")
            .ok_or(Malformed("suggestedWindow"))?;
        let time = |name: &'static str| {
            window
                .str_field(name)
                .and_then(|text| rfc3339(text.as_bytes()))
                .ok_or(Malformed(name))
        };
        let (start, end) = (time("start")?, time("end")?);
        if end <= start {
            return Err(Malformed("suggestedWindow"));
        }
        Ok(Self { start, end })
    }
}

/// An RFC 3339 date-time (`2025-01-02T04:00:00Z`, fractions of a second dropped, `Z` or a
/// `+hh:mm`/`-hh:mm` offset) as Unix seconds, if it is one.
pub fn rfc3339(text: &[u8]) -> Option<i64> {
    let number = |range: core::ops::Range<usize>| -> Option<i64> {
        let digits = text.get(range)?;
        digits.iter().try_fold(0i64, |value, &byte| {
            byte.is_ascii_digit()
                .then(|| value * 10 + i64::from(byte - b'0'))
        })
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators
        .iter()
        .any(|&(at, byte)| text.get(at) != Some(&byte))
        || !matches!(text.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    let date = bramble_hal::calendar::CivilDate {
        year: number(0..4)?,
        month: u32::try_from(number(5..7)?).ok()?,
        day: u32::try_from(number(8..10)?).ok()?,
    };
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !date.is_valid() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = text.get(19..)?;
    if rest.first() == Some(&b'.') {
        let digits = rest[1..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        rest = &rest[1 + digits..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = [*h1, *h2];
            let minutes = [*m1, *m2];
            if !hours.iter().chain(&minutes).all(u8::is_ascii_digit) {
                return None;
            }
            let hours = i64::from((h1 - b'0') * 10 + (h2 - b'0'));
            let minutes = i64::from((m1 - b'0') * 10 + (m2 - b'0'));
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = hours * 3600 + minutes * 60;
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    Some(date.days_since_epoch() * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

/// A certificate's ARI identifier (RFC 9773 §4.1): its Authority Key Identifier's
/// keyIdentifier and its serial number's bytes, each base64url without padding, joined by a
/// dot.
pub fn cert_id(key_identifier: &[u8], serial: &[u8]) -> String {
    let mut id = crate::base64::url_encode(key_identifier);
    id.push('.');
    id.push_str(&crate::base64::url_encode(serial));
    id
}

/// The ACME error namespace.
const ERROR_PREFIX: &str = "urn:ietf:params:acme:error:";

fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    String::from(&text[..end])
}

impl Problem {
    /// Reads a problem document; `None` if it has no type.
    pub fn from_json(value: &Value) -> Option<Self> {
        let kind = value.str_field("type")?;
        let kind = kind.strip_prefix(ERROR_PREFIX).unwrap_or(kind);
        Some(Self {
            kind: cut(kind, MAX_URL_LEN.min(100)),
            detail: cut(value.str_field("detail").unwrap_or(""), MAX_DETAIL_LEN),
        })
    }

    /// Whether this is `badNonce` (retry with the new nonce, §6.5).
    pub fn is_bad_nonce(&self) -> bool {
        self.kind == "badNonce"
    }

    /// Whether the CA says a rate limit was hit.
    pub fn is_rate_limited(&self) -> bool {
        self.kind == "rateLimited"
    }
}

impl core::fmt::Display for Problem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.detail.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}: {}", self.kind, self.detail)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse;
    use alloc::string::ToString;

    #[test]
    fn reads_pebbles_objects() {
        let directory = parse(br#"{"keyChange":"https://ca:14000/rollover-account-key","meta":{"externalAccountRequired":false,"termsOfService":"data:text/plain,Do%20what%20thou%20wilt"},"newAccount":"https://ca:14000/sign-me-up","newNonce":"https://ca:14000/nonce-plz","newOrder":"https://ca:14000/order-plz","revokeCert":"https://ca:14000/revoke-cert"}"#).unwrap();
        let directory = Directory::from_json(&directory).unwrap();
        assert_eq!(directory.new_order, "https://ca:14000/order-plz");
        assert_eq!(directory.renewal_info, None);
        let authz = parse(br#"{"status":"pending","identifier":{"type":"dns","value":"bramble.test"},"challenges":[{"type":"dns-01","url":"https://ca/c/1","token":"a","status":"pending"},{"type":"http-01","url":"https://ca/c/2","token":"tok_-9","status":"pending"},{"type":"tls-alpn-01","url":"https://ca/c/3","token":"t3","status":"pending"}],"expires":"x"}"#).unwrap();
        let authz = Authorization::from_json(&authz).unwrap();
        assert_eq!(authz.name, "bramble.test");
        assert_eq!(authz.challenges.len(), 3);
        assert_eq!(authz.challenges[0].kind, ChallengeKind::Dns01);
        assert_eq!(authz.challenges[1].kind, ChallengeKind::Http01);
        assert_eq!(authz.challenges[1].token, "tok_-9");
        let order = parse(br#"{"status":"invalid","authorizations":["https://ca/a/1"],"finalize":"https://ca/f","error":{"type":"urn:ietf:params:acme:error:unauthorized","detail":"no"}}"#).unwrap();
        let order = Order::from_json(&order).unwrap();
        assert_eq!(order.status, Status::Invalid);
        assert_eq!(order.error.unwrap().to_string(), "unauthorized: no");
    }

    #[test]
    fn refuses_bad_urls_and_tokens() {
        let order = parse(
            br#"{"status":"pending","authorizations":["http://ca/a"],"finalize":"https://ca/f"}"#,
        )
        .unwrap();
        assert_eq!(Order::from_json(&order), Err(Malformed("authorizations")));
        let authz = parse(br#"{"status":"pending","identifier":{"value":"x"},"challenges":[{"type":"http-01","url":"https://ca/c","token":"../etc","status":"pending"}]}"#).unwrap();
        assert_eq!(Authorization::from_json(&authz), Err(Malformed("token")));
    }

    #[test]
    fn reads_renewal_windows_and_names_certificates_as_rfc_9773_does() {
        // RFC 9773 §4.1's example.
        let key_id = [
            0x69, 0x88, 0x5b, 0x6b, 0x87, 0x46, 0x40, 0x41, 0xe1, 0xb3, 0x7b, 0x84, 0x7b, 0xa0,
            0xae, 0x2c, 0xde, 0x01, 0xc8, 0xd4,
        ];
        assert_eq!(
            cert_id(&key_id, &[0x00, 0x87, 0x65, 0x43, 0x21]),
            "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE"
        );
        let info = parse(br#"{"suggestedWindow":{"start":"2025-01-02T04:00:00Z","end":"2025-01-03T04:00:00Z"},"explanationURL":"https://acme.example.com/docs/ari"}"#).unwrap();
        let window = RenewalWindow::from_json(&info).unwrap();
        assert_eq!(window.start, 1_735_790_400);
        assert_eq!(window.end, 1_735_790_400 + 86_400);
        let reversed = parse(
            br#"{"suggestedWindow":{"start":"2025-01-03T04:00:00Z","end":"2025-01-02T04:00:00Z"}}"#,
        )
        .unwrap();
        assert!(RenewalWindow::from_json(&reversed).is_err());
        assert!(RenewalWindow::from_json(&parse(br#"{"suggestedWindow":{}}"#).unwrap()).is_err());
        assert_eq!(rfc3339(b"2025-01-02T04:00:00.123456Z"), Some(1_735_790_400));
        assert_eq!(rfc3339(b"2025-01-02T06:30:00+02:30"), Some(1_735_790_400));
        assert_eq!(rfc3339(b"2025-01-02T01:00:00-03:00"), Some(1_735_790_400));
        for bad in [
            &b"2025-01-02T04:00:00"[..],
            b"2025-13-02T04:00:00Z",
            b"2025-01-02T24:00:00Z",
            b"2025-01-02T04:00:00.Z",
            b"2025-01-02T04:00:00+2:00",
            b"",
            b"2025-01-02",
        ] {
            assert_eq!(rfc3339(bad), None, "{bad:?}");
        }
    }
}
