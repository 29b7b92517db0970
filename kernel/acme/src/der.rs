//! The few DER (X.690) encodings a CSR and a TLS-ALPN-01 certificate need: writing only.
//! Nothing here parses untrusted bytes.

use alloc::vec::Vec;

/// ASN.1 tags used here.
pub mod tag {
    /// BOOLEAN.
    pub const BOOLEAN: u8 = 0x01;
    /// INTEGER.
    pub const INTEGER: u8 = 0x02;
    /// BIT STRING.
    pub const BIT_STRING: u8 = 0x03;
    /// OCTET STRING.
    pub const OCTET_STRING: u8 = 0x04;
    /// OBJECT IDENTIFIER.
    pub const OID: u8 = 0x06;
    /// UTF8String.
    pub const UTF8_STRING: u8 = 0x0c;
    /// UTCTime.
    pub const UTC_TIME: u8 = 0x17;
    /// GeneralizedTime.
    pub const GENERALIZED_TIME: u8 = 0x18;
    /// SEQUENCE.
    pub const SEQUENCE: u8 = 0x30;
    /// SET.
    pub const SET: u8 = 0x31;
}

/// Appends a tag-length-value with `content`.
pub fn tlv(out: &mut Vec<u8>, tag: u8, content: &[u8]) {
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = (len as u64).to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        out.push(0x80 | (8 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
}

/// A tag-length-value as a new vector.
pub fn wrap(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    tlv(&mut out, tag, content);
    out
}

/// A SEQUENCE of the concatenated `parts`.
pub fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    wrap(tag::SEQUENCE, &parts.concat())
}

/// A non-negative INTEGER from big-endian `magnitude` (leading zeros dropped, a zero byte
/// added when the top bit is set).
pub fn unsigned_integer(magnitude: &[u8]) -> Vec<u8> {
    let skip = magnitude.iter().take_while(|&&b| b == 0).count();
    let trimmed = &magnitude[skip..];
    let mut content = Vec::with_capacity(trimmed.len() + 1);
    if trimmed.first().is_none_or(|&b| b & 0x80 != 0) {
        content.push(0);
    }
    content.extend_from_slice(trimmed);
    wrap(tag::INTEGER, &content)
}

/// A BIT STRING with no unused bits.
pub fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(bytes.len() + 1);
    content.push(0);
    content.extend_from_slice(bytes);
    wrap(tag::BIT_STRING, &content)
}

/// Context-specific constructed `[number]` around `content`.
pub fn explicit(number: u8, content: &[u8]) -> Vec<u8> {
    wrap(0xa0 | number, content)
}

/// OIDs used here, DER content bytes (without tag and length).
pub mod oid {
    /// id-ecPublicKey, 1.2.840.10045.2.1.
    pub const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    /// prime256v1 (secp256r1), 1.2.840.10045.3.1.7.
    pub const PRIME256V1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    /// ecdsa-with-SHA256, 1.2.840.10045.4.3.2.
    pub const ECDSA_WITH_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    /// PKCS #9 extensionRequest, 1.2.840.113549.1.9.14.
    pub const EXTENSION_REQUEST: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x0e];
    /// id-ce-subjectAltName, 2.5.29.17.
    pub const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
    /// id-at-commonName, 2.5.4.3.
    pub const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    /// id-pe-acmeIdentifier, 1.3.6.1.5.5.7.1.31 (RFC 8737 §6.1).
    pub const ACME_IDENTIFIER: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_short_and_long() {
        assert_eq!(wrap(tag::OCTET_STRING, &[1, 2]), [4, 2, 1, 2]);
        let long = wrap(tag::OCTET_STRING, &[0; 200]);
        assert_eq!(&long[..3], &[4, 0x81, 200]);
        let longer = wrap(tag::OCTET_STRING, &[0; 300]);
        assert_eq!(&longer[..4], &[4, 0x82, 1, 44]);
    }

    #[test]
    fn integers_are_minimal_and_positive() {
        assert_eq!(unsigned_integer(&[0, 0, 5]), [2, 1, 5]);
        assert_eq!(unsigned_integer(&[0x80]), [2, 2, 0, 0x80]);
        assert_eq!(unsigned_integer(&[0, 0]), [2, 1, 0]);
    }
}
