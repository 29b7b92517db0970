//! Base64 (RFC 4648): the URL-safe alphabet without padding that JOSE uses (§5), and the
//! standard alphabet with padding for PEM (RFC 7468).

use alloc::string::String;
use alloc::vec::Vec;

const URL_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const STANDARD_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn encode_with(bytes: &[u8], alphabet: &[u8; 64], pad: bool, out: &mut String) {
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let symbols = chunk.len() + 1;
        for i in 0..4 {
            if i < symbols {
                out.push(char::from(alphabet[((n >> (18 - 6 * i)) & 63) as usize]));
            } else if pad {
                out.push('=');
            }
        }
    }
}

/// `bytes` in base64url without padding (JOSE's "base64url", RFC 7515 §2).
pub fn url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    encode_with(bytes, URL_ALPHABET, false, &mut out);
    out
}

/// `bytes` in standard base64 with padding.
pub fn standard_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    encode_with(bytes, STANDARD_ALPHABET, true, &mut out);
    out
}

fn symbol_value(symbol: u8, url: bool) -> Option<u32> {
    Some(match symbol {
        b'A'..=b'Z' => symbol - b'A',
        b'a'..=b'z' => symbol - b'a' + 26,
        b'0'..=b'9' => symbol - b'0' + 52,
        b'-' if url => 62,
        b'_' if url => 63,
        b'+' if !url => 62,
        b'/' if !url => 63,
        _ => return None,
    } as u32)
}

fn decode_with(text: &[u8], url: bool) -> Option<Vec<u8>> {
    let text = if url {
        text
    } else {
        // Padding only at the end, at most two.
        let trimmed = text.strip_suffix(b"==").or_else(|| text.strip_suffix(b"="));
        match trimmed {
            Some(rest) if text.len().is_multiple_of(4) => rest,
            Some(_) => return None,
            None => text,
        }
    };
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    for chunk in text.chunks(4) {
        let mut n = 0u32;
        for (i, &symbol) in chunk.iter().enumerate() {
            n |= symbol_value(symbol, url)? << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = chunk.len() - 1;
        // Bits below the last whole byte must be zero (a canonical encoding).
        let unused = (n >> (8 * (3 - keep))) << (8 * (3 - keep));
        if unused != n {
            return None;
        }
        out.extend_from_slice(&bytes[..keep]);
    }
    Some(out)
}

/// Decodes base64url without padding; `None` for any other symbol or a non-canonical tail.
pub fn url_decode(text: &[u8]) -> Option<Vec<u8>> {
    decode_with(text, true)
}

/// Decodes standard base64 (padding optional at the end); `None` on anything else.
pub fn standard_decode(text: &[u8]) -> Option<Vec<u8>> {
    decode_with(text, false)
}

/// `der` as a PEM block with `label` (RFC 7468: 64 symbols a line).
pub fn pem(label: &str, der: &[u8]) -> String {
    let body = standard_encode(der);
    let mut out = String::with_capacity(body.len() + body.len() / 64 + 64);
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    for line in body.as_bytes().chunks(64) {
        // The encoder writes ASCII only.
        out.push_str(core::str::from_utf8(line).unwrap_or(""));
        out.push('\n');
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        let cases: [(&[u8], &str); 7] = [
            (b"", ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(standard_encode(plain), encoded);
            assert_eq!(standard_decode(encoded.as_bytes()).unwrap(), plain);
            let url = encoded.trim_end_matches('=');
            assert_eq!(url_encode(plain), url);
            assert_eq!(url_decode(url.as_bytes()).unwrap(), plain);
        }
    }

    #[test]
    fn url_alphabet_and_rejections() {
        assert_eq!(url_encode(&[0xfb, 0xff]), "-_8");
        assert_eq!(url_decode(b"-_8").unwrap(), [0xfb, 0xff]);
        assert!(url_decode(b"+/8").is_none());
        assert!(url_decode(b"Zg=").is_none());
        assert!(url_decode(b"Z").is_none());
        assert!(url_decode(b"Zh").is_none(), "non-canonical trailing bits");
        assert!(standard_decode(b"Zg=a").is_none());
    }

    #[test]
    fn round_trips_every_length() {
        for len in 0..70 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(url_decode(url_encode(&bytes).as_bytes()).unwrap(), bytes);
            assert_eq!(
                standard_decode(standard_encode(&bytes).as_bytes()).unwrap(),
                bytes
            );
        }
    }
}
