//! What the server needs to know about its own certificate: the validity period, read from
//! the leaf's DER (RFC 5280 §4.1) through a checked reader; names are checked by webpki.

use bramble_hal::calendar::CivilDate;

/// A certificate's notBefore and notAfter, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// First second the certificate is valid.
    pub not_before: i64,
    /// Last second the certificate is valid.
    pub not_after: i64,
}

impl Validity {
    /// Whether `unix_seconds` falls inside the period.
    pub fn contains(&self, unix_seconds: i64) -> bool {
        self.not_before <= unix_seconds && unix_seconds <= self.not_after
    }
}

/// One DER TLV: its tag and contents.
struct Element<'a> {
    tag: u8,
    contents: &'a [u8],
}

/// Reads one TLV from the front of `input`; returns it and what follows. Only definite
/// lengths of up to four bytes (DER, X.690 §10.1), low tag numbers.
fn element(input: &[u8]) -> Option<(Element<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(count)?;
        rest = after;
        bytes.iter().try_fold(0usize, |len, &byte| {
            len.checked_mul(256)?.checked_add(usize::from(byte))
        })?
    };
    let (contents, rest) = rest.split_at_checked(len)?;
    Some((Element { tag, contents }, rest))
}

fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (element, rest) = element(input)?;
    (element.tag == tag).then_some((element.contents, rest))
}

const SEQUENCE: u8 = 0x30;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const VERSION: u8 = 0xa0;

/// The validity period of a DER certificate, or `None` if it is not one.
pub fn validity(certificate_der: &[u8]) -> Option<Validity> {
    let (certificate, _) = expect(certificate_der, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.1;
    }
    let rest = element(rest)?.1; // serialNumber
    let rest = expect(rest, SEQUENCE)?.1; // signature
    let rest = expect(rest, SEQUENCE)?.1; // issuer
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (not_before, rest) = element(validity)?;
    let (not_after, _) = element(rest)?;
    Some(Validity {
        not_before: time(&not_before)?,
        not_after: time(&not_after)?,
    })
}

const CONTEXT_3: u8 = 0xa3;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
const INTEGER: u8 = 0x02;
/// id-ce-authorityKeyIdentifier, 2.5.29.35 (RFC 5280 §4.2.1.1).
const AUTHORITY_KEY_IDENTIFIER: &[u8] = &[0x55, 0x1d, 0x23];
/// AuthorityKeyIdentifier's keyIdentifier, `[0] IMPLICIT OCTET STRING`.
const KEY_IDENTIFIER: u8 = 0x80;

/// What ACME Renewal Information (RFC 9773 §4.1) names a certificate by: the keyIdentifier
/// of its Authority Key Identifier extension and the contents of its serialNumber INTEGER
/// (leading zero included), or `None` if the DER is not a certificate or lacks the extension.
pub fn renewal_parts(certificate_der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (certificate, _) = expect(certificate_der, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.1;
    }
    let (serial, mut rest) = expect(rest, INTEGER)?;
    // signature, issuer, validity, subject, subjectPublicKeyInfo, then optional fields up to
    // the extensions ([3]).
    let mut extensions = None;
    while !rest.is_empty() {
        let (field, after) = element(rest)?;
        if field.tag == CONTEXT_3 {
            extensions = Some(field.contents);
        }
        rest = after;
    }
    let (mut list, _) = expect(extensions?, SEQUENCE)?;
    while !list.is_empty() {
        let (extension, after) = expect(list, SEQUENCE)?;
        list = after;
        let (oid, mut fields) = expect(extension, OID)?;
        if oid != AUTHORITY_KEY_IDENTIFIER {
            continue;
        }
        if fields.first() == Some(&BOOLEAN) {
            fields = element(fields)?.1;
        }
        let (value, _) = expect(fields, OCTET_STRING)?;
        let (identifier, _) = expect(value, SEQUENCE)?;
        let (key_id, _) = expect(identifier, KEY_IDENTIFIER)?;
        if key_id.is_empty() || serial.is_empty() {
            return None;
        }
        return Some((key_id, serial));
    }
    None
}

/// [`renewal_parts`] of the first certificate of a PEM chain (the leaf), owned.
pub fn leaf_renewal_parts(chain_pem: &[u8]) -> Option<(alloc::vec::Vec<u8>, alloc::vec::Vec<u8>)> {
    use pki_types::pem::PemObject;
    let leaf = pki_types::CertificateDer::pem_slice_iter(chain_pem)
        .next()?
        .ok()?;
    let (key_id, serial) = renewal_parts(&leaf)?;
    Some((key_id.to_vec(), serial.to_vec()))
}

/// UTCTime `YYMMDDHHMMSSZ` (years 1950-2049, RFC 5280 §4.1.2.5.1) or GeneralizedTime
/// `YYYYMMDDHHMMSSZ` (§4.1.2.5.2) as Unix seconds.
fn time(element: &Element<'_>) -> Option<i64> {
    let text = element.contents;
    let (year, rest) = match (element.tag, text.len()) {
        (UTC_TIME, 13) => {
            let year = digits(&text[..2])?;
            (
                if year >= 50 { 1900 + year } else { 2000 + year },
                &text[2..],
            )
        }
        (GENERALIZED_TIME, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let month = digits(&rest[0..2])?;
    let day = digits(&rest[2..4])?;
    let hour = digits(&rest[4..6])?;
    let minute = digits(&rest[6..8])?;
    let second = digits(&rest[8..10])?;
    let date = CivilDate {
        year,
        month: u32::try_from(month).ok()?,
        day: u32::try_from(day).ok()?,
    };
    if !date.is_valid() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(date.days_since_epoch() * 86_400 + hour * 3_600 + minute * 60 + second)
}

fn digits(text: &[u8]) -> Option<i64> {
    text.iter().try_fold(0i64, |value, &byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + i64::from(byte - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_both_kinds() {
        let utc = Element {
            tag: UTC_TIME,
            contents: b"261201093000Z",
        };
        assert_eq!(time(&utc), Some(20_788 * 86_400 + 9 * 3_600 + 30 * 60));
        let generalized = Element {
            tag: GENERALIZED_TIME,
            contents: b"20501231235959Z",
        };
        assert_eq!(time(&generalized), Some(2_556_143_999));
        let bad = Element {
            tag: UTC_TIME,
            contents: b"261301093000Z",
        };
        assert_eq!(time(&bad), None);
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert_eq!(validity(&[]), None);
        assert_eq!(validity(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(validity(&[0x30, 0x03, 0x30, 0x01]), None);
        for len in 0..64u8 {
            let bytes: alloc::vec::Vec<u8> = (0..len).map(|i| i.wrapping_mul(37)).collect();
            let _ = validity(&bytes);
        }
    }
}
