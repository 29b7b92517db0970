//! Skipping a chunked request body (RFC 9112 §7.1) without storing it, so a connection stays
//! in step after a request whose body the server does not need.

/// Longest chunk extension or trailer line accepted, in bytes.
const MAX_LINE: u16 = 1024;

/// Where the skipper is in the chunked framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkedState {
    /// Reading the hex chunk size; `digits` read so far.
    Size {
        /// Size so far.
        value: u64,
        /// Hex digits so far.
        digits: u8,
    },
    /// Skipping a chunk extension up to CR.
    Extension {
        /// Size of the chunk the extension belongs to.
        value: u64,
        /// Extension bytes so far.
        len: u16,
    },
    /// CR seen after the size line; LF expected.
    SizeLf {
        /// Size of the chunk announced.
        value: u64,
    },
    /// Inside chunk data.
    Data {
        /// Bytes of the chunk still to skip.
        remaining: u64,
    },
    /// Chunk data done; CR expected.
    DataCr,
    /// CR seen after chunk data; LF expected.
    DataLf,
    /// Reading a trailer line (or the final empty line).
    Trailer {
        /// Bytes of the current line so far.
        len: u16,
    },
    /// CR seen in the trailer section; LF expected.
    TrailerLf {
        /// The line that ends here was empty: the body ends.
        empty: bool,
    },
}

impl ChunkedState {
    /// The state at the start of a chunked body.
    pub const START: ChunkedState = ChunkedState::Size {
        value: 0,
        digits: 0,
    };
}

/// What skipping some bytes led to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkedProgress {
    /// All given bytes belonged to the body; more is needed.
    More(ChunkedState),
    /// The body ended after this many of the given bytes.
    Done(usize),
    /// The framing is broken: the stream cannot be trusted.
    Invalid,
}

fn hex(b: u8) -> Option<u64> {
    (b as char).to_digit(16).map(u64::from)
}

/// Skips the chunked framing and data in `data`, starting in `state`. `budget` is how many
/// more body bytes (framing included) may be skipped before the body counts as too large
/// (Invalid); it is reduced by what is consumed.
pub fn skip_chunked(mut state: ChunkedState, data: &[u8], budget: &mut u64) -> ChunkedProgress {
    use ChunkedState::*;
    let mut i = 0;
    while i < data.len() {
        if let Data { remaining } = state {
            let n = usize::try_from(remaining)
                .unwrap_or(usize::MAX)
                .min(data.len() - i);
            if n as u64 > *budget {
                return ChunkedProgress::Invalid;
            }
            *budget -= n as u64;
            i += n;
            let remaining = remaining - n as u64;
            state = if remaining == 0 {
                DataCr
            } else {
                Data { remaining }
            };
            continue;
        }
        if *budget == 0 {
            return ChunkedProgress::Invalid;
        }
        *budget -= 1;
        let b = data[i];
        i += 1;
        state = match (state, b) {
            (Size { value, digits }, b) if hex(b).is_some() => {
                if digits >= 15 {
                    return ChunkedProgress::Invalid;
                }
                Size {
                    value: value << 4 | hex(b).unwrap_or(0),
                    digits: digits + 1,
                }
            }
            (Size { value, digits }, b';') if digits > 0 => Extension { value, len: 0 },
            (Size { value, digits }, b'\r') if digits > 0 => SizeLf { value },
            (Extension { value, .. }, b'\r') => SizeLf { value },
            (Extension { value, len }, b) if len < MAX_LINE && b != b'\n' && b != 0 => Extension {
                value,
                len: len + 1,
            },
            (SizeLf { value: 0 }, b'\n') => Trailer { len: 0 },
            (SizeLf { value }, b'\n') => Data { remaining: value },
            (DataCr, b'\r') => DataLf,
            (DataLf, b'\n') => Size {
                value: 0,
                digits: 0,
            },
            (Trailer { len }, b'\r') => TrailerLf { empty: len == 0 },
            (Trailer { len }, b) if len < MAX_LINE && b != b'\n' && b != 0 => {
                Trailer { len: len + 1 }
            }
            (TrailerLf { empty: true }, b'\n') => return ChunkedProgress::Done(i),
            (TrailerLf { empty: false }, b'\n') => Trailer { len: 0 },
            _ => return ChunkedProgress::Invalid,
        };
    }
    ChunkedProgress::More(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip_all(body: &[u8]) -> ChunkedProgress {
        skip_chunked(ChunkedState::START, body, &mut 1_000_000)
    }

    #[test]
    fn skips_well_formed_bodies() {
        let body = b"5\r\nhello\r\n1a;name=value\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\nGET";
        assert_eq!(skip_all(body), ChunkedProgress::Done(body.len() - 3));
        let with_trailer = b"3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n";
        assert_eq!(
            skip_all(with_trailer),
            ChunkedProgress::Done(with_trailer.len())
        );
        assert_eq!(skip_all(b"0\r\n\r\n"), ChunkedProgress::Done(5));
    }

    #[test]
    fn resumes_across_pieces() {
        let body = b"A\r\n0123456789\r\n0\r\n\r\n";
        for split in 0..body.len() {
            let mut budget = 100;
            let first = skip_chunked(ChunkedState::START, &body[..split], &mut budget);
            let ChunkedProgress::More(state) = first else {
                panic!("split {split}: {first:?}");
            };
            assert_eq!(
                skip_chunked(state, &body[split..], &mut budget),
                ChunkedProgress::Done(body.len() - split),
                "split {split}"
            );
        }
    }

    #[test]
    fn rejects_broken_framing_and_oversize_bodies() {
        for bad in [
            &b"\r\n"[..],
            b"g\r\n",
            b"5\nhello\r\n",
            b"5\r\nhelloX",
            b"1234567890abcdef0\r\n",
            b"-1\r\n",
            b" 5\r\n",
            b"0\r\nX\n",
        ] {
            assert_eq!(
                skip_all(bad),
                ChunkedProgress::Invalid,
                "{:?}",
                core::str::from_utf8(bad)
            );
        }
        let mut budget = 10;
        assert_eq!(
            skip_chunked(ChunkedState::START, b"ff\r\n0123456789abcdef", &mut budget),
            ChunkedProgress::Invalid
        );
    }
}
