//! JOSE for ACME (RFC 8555 §6.2): the account's JWK and its thumbprint (RFC 7638), key
//! authorizations (§8.1), and requests as flattened JWS with ES256 (RFC 7515, 7518).

use crate::base64::url_encode;
use crate::json::write_string;
use crate::key::EcKey;
use alloc::string::String;
use alloc::vec::Vec;
use sha2::{Digest, Sha256};

/// The public JWK of `key`, members in the lexicographic order RFC 7638 §3 hashes.
pub fn jwk(key: &EcKey) -> String {
    let point = key.public_point();
    let mut out = String::with_capacity(128);
    out.push_str("{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"");
    out.push_str(&url_encode(&point[1..33]));
    out.push_str("\",\"y\":\"");
    out.push_str(&url_encode(&point[33..65]));
    out.push_str("\"}");
    out
}

/// The JWK thumbprint (RFC 7638), base64url.
pub fn thumbprint(key: &EcKey) -> String {
    url_encode(&Sha256::digest(jwk(key).as_bytes()))
}

/// The key authorization for a challenge `token` (RFC 8555 §8.1).
pub fn key_authorization(token: &str, key: &EcKey) -> String {
    let mut out = String::with_capacity(token.len() + 44);
    out.push_str(token);
    out.push('.');
    out.push_str(&thumbprint(key));
    out
}

/// The TXT record's value for dns-01 (§8.4): the key authorization's SHA-256, base64url
/// without padding (43 characters).
pub fn dns01_txt(key_authorization: &str) -> String {
    url_encode(&Sha256::digest(key_authorization.as_bytes()))
}

/// How the request names its signer: the whole key (new account) or the account URL.
#[derive(Clone, Copy, Debug)]
pub enum Signer<'a> {
    /// `jwk`: only for newAccount (and revocation by certificate key).
    Jwk,
    /// `kid`: the account URL.
    Kid(&'a str),
}

/// A flattened JWS of `payload` for `url` with `nonce`, signed by `key` (ES256). An empty
/// `payload` is a POST-as-GET (§6.3).
pub fn sign(key: &EcKey, signer: Signer<'_>, nonce: &str, url: &str, payload: &[u8]) -> Vec<u8> {
    let mut protected = String::with_capacity(256);
    protected.push_str("{\"alg\":\"ES256\",");
    match signer {
        Signer::Jwk => {
            protected.push_str("\"jwk\":");
            protected.push_str(&jwk(key));
        }
        Signer::Kid(kid) => {
            protected.push_str("\"kid\":");
            write_string(&mut protected, kid);
        }
    }
    protected.push_str(",\"nonce\":");
    write_string(&mut protected, nonce);
    protected.push_str(",\"url\":");
    write_string(&mut protected, url);
    protected.push('}');
    let protected = url_encode(protected.as_bytes());
    let payload = url_encode(payload);
    let mut signing_input = String::with_capacity(protected.len() + payload.len() + 1);
    signing_input.push_str(&protected);
    signing_input.push('.');
    signing_input.push_str(&payload);
    let signature = url_encode(&key.sign_fixed(signing_input.as_bytes()));
    let mut body = String::with_capacity(signing_input.len() + signature.len() + 48);
    body.push_str("{\"protected\":\"");
    body.push_str(&protected);
    body.push_str("\",\"payload\":\"");
    body.push_str(&payload);
    body.push_str("\",\"signature\":\"");
    body.push_str(&signature);
    body.push_str("\"}");
    body.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base64::url_decode;
    use crate::json;
    use p256::ecdsa::signature::Verifier;

    fn key() -> EcKey {
        EcKey::from_secret(&[7; 32]).unwrap()
    }

    #[test]
    fn the_dns01_value_is_the_key_authorizations_digest() {
        // RFC 8555 §8.1's key authorization; its SHA-256 in base64url (Python's hashlib).
        let key_authorization = "evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.nP1qzpXGymHBrUEepNY9HCsQk7K8KhOypzEt62jcerQ";
        assert_eq!(
            dns01_txt(key_authorization),
            "NGwKoXBgCT8JhEa0bK7AwfSqHyu_ZWeugV07fLGIVq0"
        );
    }

    #[test]
    fn a_jws_verifies_and_carries_its_header() {
        let key = key();
        let body = sign(
            &key,
            Signer::Kid("https://ca/acct/1"),
            "n0nce",
            "https://ca/x",
            b"{}",
        );
        let value = json::parse(&body).unwrap();
        let protected = value.str_field("protected").unwrap();
        let payload = value.str_field("payload").unwrap();
        let header = json::parse(&url_decode(protected.as_bytes()).unwrap()).unwrap();
        assert_eq!(header.str_field("alg"), Some("ES256"));
        assert_eq!(header.str_field("kid"), Some("https://ca/acct/1"));
        assert_eq!(header.str_field("nonce"), Some("n0nce"));
        assert_eq!(header.str_field("url"), Some("https://ca/x"));
        assert_eq!(url_decode(payload.as_bytes()).unwrap(), b"{}");
        let signature = url_decode(value.str_field("signature").unwrap().as_bytes()).unwrap();
        let verifier = p256::ecdsa::VerifyingKey::from_sec1_bytes(&key.public_point()).unwrap();
        let signature = p256::ecdsa::Signature::from_slice(&signature).unwrap();
        let input = alloc::format!("{protected}.{payload}");
        verifier.verify(input.as_bytes(), &signature).unwrap();
    }

    #[test]
    fn new_account_requests_carry_the_jwk_and_post_as_get_is_empty() {
        let key = key();
        let body = sign(&key, Signer::Jwk, "n", "https://ca/new-acct", b"");
        let value = json::parse(&body).unwrap();
        assert_eq!(value.str_field("payload"), Some(""));
        let header = url_decode(value.str_field("protected").unwrap().as_bytes()).unwrap();
        let header = json::parse(&header).unwrap();
        let jwk = header.get("jwk").unwrap();
        assert_eq!(jwk.str_field("kty"), Some("EC"));
        assert_eq!(jwk.str_field("crv"), Some("P-256"));
        assert_eq!(
            url_decode(jwk.str_field("x").unwrap().as_bytes())
                .unwrap()
                .len(),
            32
        );
    }

    #[test]
    fn thumbprint_matches_rfc7638_form() {
        // The thumbprint is SHA-256 over exactly the canonical JWK (no spaces, sorted).
        let key = key();
        let jwk = jwk(&key);
        assert!(jwk.starts_with("{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\""));
        assert!(!jwk.contains(' '));
        assert_eq!(thumbprint(&key).len(), 43);
        let authorization = key_authorization("tok", &key);
        assert_eq!(authorization, alloc::format!("tok.{}", thumbprint(&key)));
    }
}
