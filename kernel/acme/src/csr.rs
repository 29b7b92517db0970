//! The certificate signing request for the owner's names (PKCS #10, RFC 2986, with the names
//! in a subjectAltName extension request, RFC 8555 §7.4), and the self-signed certificate that
//! answers a TLS-ALPN-01 challenge (RFC 8737 §3).

use crate::der::{self, oid, tag};
use crate::key::EcKey;
use alloc::vec::Vec;
use sha2::{Digest, Sha256};

/// Longest name put in the subject's commonName (X.520 ub-common-name).
const MAX_COMMON_NAME: usize = 64;

fn subject_alt_name(names: &[&str]) -> Vec<u8> {
    let mut general_names = Vec::new();
    for name in names {
        // dNSName, [2] IMPLICIT IA5String.
        der::tlv(&mut general_names, 0x82, name.as_bytes());
    }
    der::sequence(&[
        &der::wrap(tag::OID, oid::SUBJECT_ALT_NAME),
        &der::wrap(tag::OCTET_STRING, &der::wrap(tag::SEQUENCE, &general_names)),
    ])
}

fn name_with_common_name(common_name: Option<&str>) -> Vec<u8> {
    match common_name {
        Some(name) if name.len() <= MAX_COMMON_NAME => {
            let attribute = der::sequence(&[
                &der::wrap(tag::OID, oid::COMMON_NAME),
                &der::wrap(tag::UTF8_STRING, name.as_bytes()),
            ]);
            der::sequence(&[&der::wrap(tag::SET, &attribute)])
        }
        _ => der::sequence(&[]),
    }
}

fn ecdsa_sha256() -> Vec<u8> {
    der::sequence(&[&der::wrap(tag::OID, oid::ECDSA_WITH_SHA256)])
}

/// A DER CSR for `names` (the first also as the subject's commonName when it fits), signed
/// by `key`.
pub fn certificate_request(names: &[&str], key: &EcKey) -> Vec<u8> {
    let extensions = der::sequence(&[&subject_alt_name(names)]);
    let attribute = der::sequence(&[
        &der::wrap(tag::OID, oid::EXTENSION_REQUEST),
        &der::wrap(tag::SET, &extensions),
    ]);
    let info = der::sequence(&[
        &der::wrap(tag::INTEGER, &[0]),
        &name_with_common_name(names.first().copied()),
        &key.subject_public_key_info(),
        // attributes [0] IMPLICIT SET OF Attribute.
        &der::wrap(0xa0, &attribute),
    ]);
    let signature = key.sign_der(&info);
    der::sequence(&[&info, &ecdsa_sha256(), &der::bit_string(&signature)])
}

/// The TLS-ALPN-01 certificate for `name`: self-signed by `key`, the name as its only
/// subjectAltName, and the critical acmeIdentifier extension holding SHA-256 of
/// `key_authorization` (RFC 8737 §3). Valid from 2000 to 9999: the validator does not check
/// dates, and the device may not have a clock yet.
pub fn tls_alpn_certificate(name: &str, key_authorization: &str, key: &EcKey) -> Vec<u8> {
    let digest = Sha256::digest(key_authorization.as_bytes());
    let acme_identifier = der::sequence(&[
        &der::wrap(tag::OID, oid::ACME_IDENTIFIER),
        &der::wrap(tag::BOOLEAN, &[0xff]),
        &der::wrap(tag::OCTET_STRING, &der::wrap(tag::OCTET_STRING, &digest)),
    ]);
    let extensions = der::sequence(&[&subject_alt_name(&[name]), &acme_identifier]);
    let validity = der::sequence(&[
        &der::wrap(tag::UTC_TIME, b"000101000000Z"),
        &der::wrap(tag::GENERALIZED_TIME, b"99991231235959Z"),
    ]);
    let subject = name_with_common_name(Some(name));
    // A serial from the key authorization: unique per challenge, positive, 16 bytes.
    let mut serial = [0u8; 16];
    serial.copy_from_slice(&digest[..16]);
    serial[0] &= 0x7f;
    serial[0] |= 0x01;
    let tbs = der::sequence(&[
        &der::explicit(0, &der::wrap(tag::INTEGER, &[2])),
        &der::unsigned_integer(&serial),
        &ecdsa_sha256(),
        &subject,
        &validity,
        &subject,
        &key.subject_public_key_info(),
        &der::explicit(3, &extensions),
    ]);
    let signature = key.sign_der(&tbs);
    der::sequence(&[&tbs, &ecdsa_sha256(), &der::bit_string(&signature)])
}
