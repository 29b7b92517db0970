//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B).
//!
//! The code is canonical: codes of one length are consecutive, in symbol order, and each
//! length's first code follows the previous length's last. So the table is only the 257 code
//! lengths (the RFC's data); the codes, and the decoder's per-length first code, count and
//! offset, are derived from them at compile time. Decoding goes a bit at a time: at most 30
//! steps a symbol, no tree in RAM.

/// Code length of each symbol, 0 to 255 and EOS (256), from RFC 7541 Appendix B.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5,
    5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6,
    6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22,
    23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22,
    21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20,
    22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19,
    21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22,
    22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30,
];

/// The end-of-string symbol; never valid inside a string.
const EOS: u16 = 256;
/// The longest code.
const MAX_LEN: usize = 30;

struct Tables {
    /// Symbols sorted by (code length, symbol).
    sorted: [u16; 257],
    /// For each length, the first code of that length.
    first: [u32; MAX_LEN + 1],
    /// For each length, how many codes have it.
    count: [u16; MAX_LEN + 1],
    /// For each length, where its symbols start in `sorted`.
    offset: [u16; MAX_LEN + 1],
    /// Each symbol's code.
    codes: [u32; 257],
}

const fn build() -> Tables {
    let mut count = [0u16; MAX_LEN + 1];
    let mut i = 0;
    while i < 257 {
        count[LENGTHS[i] as usize] += 1;
        i += 1;
    }
    let mut offset = [0u16; MAX_LEN + 1];
    let mut first = [0u32; MAX_LEN + 1];
    let mut len = 1;
    let mut next_offset = 0u16;
    let mut code = 0u32;
    while len <= MAX_LEN {
        offset[len] = next_offset;
        first[len] = code;
        next_offset += count[len];
        code = (code + count[len] as u32) << 1;
        len += 1;
    }
    let mut sorted = [0u16; 257];
    let mut codes = [0u32; 257];
    let mut filled = [0u16; MAX_LEN + 1];
    let mut symbol = 0;
    while symbol < 257 {
        let len = LENGTHS[symbol] as usize;
        let at = offset[len] + filled[len];
        sorted[at as usize] = symbol as u16;
        codes[symbol] = first[len] + filled[len] as u32;
        filled[len] += 1;
        symbol += 1;
    }
    Tables {
        sorted,
        first,
        count,
        offset,
        codes,
    }
}

static TABLES: Tables = build();

/// Why a Huffman string cannot be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HuffmanError {
    /// A code longer than any symbol's, EOS inside the string, or padding that is longer
    /// than 7 bits or not all ones (RFC 7541 §5.2): a decoding error.
    Invalid,
    /// The decoded string does not fit the output.
    TooLong,
}

/// Decodes `input` into `out`; returns the decoded length.
pub fn decode(input: &[u8], out: &mut [u8]) -> Result<usize, HuffmanError> {
    let mut written = 0usize;
    decode_with(input, |byte| {
        let slot = out.get_mut(written).ok_or(HuffmanError::TooLong)?;
        *slot = byte;
        written += 1;
        Ok(())
    })?;
    Ok(written)
}

/// Checks that `input` is a valid Huffman string, keeping nothing.
pub fn check(input: &[u8]) -> Result<(), HuffmanError> {
    decode_with(input, |_| Ok(()))
}

/// Decodes `input`, handing each byte to `emit`.
pub fn decode_with(
    input: &[u8],
    mut emit: impl FnMut(u8) -> Result<(), HuffmanError>,
) -> Result<(), HuffmanError> {
    let tables = &TABLES;
    let mut code = 0u32;
    let mut len = 0usize;
    for &byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len > MAX_LEN {
                return Err(HuffmanError::Invalid);
            }
            let (Some(&first), Some(&count), Some(&offset)) = (
                tables.first.get(len),
                tables.count.get(len),
                tables.offset.get(len),
            ) else {
                return Err(HuffmanError::Invalid);
            };
            let Some(index) = code.checked_sub(first).filter(|&i| i < u32::from(count)) else {
                continue;
            };
            let symbol = tables
                .sorted
                .get(usize::from(offset) + index as usize)
                .copied()
                .ok_or(HuffmanError::Invalid)?;
            if symbol == EOS {
                return Err(HuffmanError::Invalid);
            }
            // Symbols below EOS are bytes.
            emit(symbol as u8)?;
            code = 0;
            len = 0;
        }
    }
    // Padding: the most significant bits of EOS (all ones), fewer than 8.
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::Invalid);
    }
    Ok(())
}

/// Length in bytes of `input` Huffman-encoded.
pub fn encoded_len(input: &[u8]) -> usize {
    let bits: usize = input
        .iter()
        .map(|&b| usize::from(LENGTHS[usize::from(b)]))
        .sum();
    bits.div_ceil(8)
}

/// Encodes `input` into `out` (at least [`encoded_len`] bytes); returns the length written,
/// or `None` if `out` is too short.
pub fn encode(input: &[u8], out: &mut [u8]) -> Option<usize> {
    let mut written = 0usize;
    let mut acc = 0u64;
    let mut bits = 0u32;
    for &byte in input {
        let symbol = usize::from(byte);
        acc = (acc << LENGTHS[symbol]) | u64::from(TABLES.codes[symbol]);
        bits += u32::from(LENGTHS[symbol]);
        while bits >= 8 {
            bits -= 8;
            *out.get_mut(written)? = (acc >> bits) as u8;
            written += 1;
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        let pad = 8 - bits;
        *out.get_mut(written)? = ((acc << pad) | ((1u64 << pad) - 1)) as u8;
        written += 1;
    }
    Some(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_rfc_samples() {
        // A few codes from RFC 7541 Appendix B.
        assert_eq!(TABLES.codes[usize::from(b'0')], 0x0);
        assert_eq!(TABLES.codes[usize::from(b'a')], 0x3);
        assert_eq!(TABLES.codes[usize::from(b' ')], 0x14);
        assert_eq!(TABLES.codes[0], 0x1ff8);
        assert_eq!(TABLES.codes[255], 0x3ff_ffee);
        assert_eq!(TABLES.codes[256], 0x3fff_ffff);
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let mut encoded = vec![0u8; encoded_len(&all)];
        assert_eq!(encode(&all, &mut encoded), Some(encoded.len()));
        let mut decoded = vec![0u8; all.len()];
        assert_eq!(decode(&encoded, &mut decoded), Ok(all.len()));
        assert_eq!(decoded, all);
        assert_eq!(
            decode(&encoded, &mut decoded[..10]),
            Err(HuffmanError::TooLong)
        );
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        let mut out = [0u8; 8];
        // "a" is 00011, padded with 111: 0x1f. Padded with zeros instead: invalid.
        assert_eq!(decode(&[0x1f], &mut out), Ok(1));
        assert_eq!(decode(&[0x18], &mut out), Err(HuffmanError::Invalid));
        // A whole byte of padding (8 ones) is too long.
        assert_eq!(decode(&[0x1f, 0xff], &mut out), Err(HuffmanError::Invalid));
        // EOS (30 ones) inside the string.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xfc], &mut out),
            Err(HuffmanError::Invalid)
        );
        assert_eq!(decode(&[], &mut out), Ok(0));
    }
}
