//! Response bodies by reference: where a body lies in the image, and the trait through which the
//! HTTP engine asks for its bytes (the image in RAM, or a store reading them from the card).

/// Where one body (one encoding of one file) lies in the body region of its image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Body {
    /// Position of the file in the path-sorted table (for log lines that name the file).
    pub file: u32,
    /// Offset of the body from the start of the body region.
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
    /// CRC-32 of the body's bytes (checked where the segment holding the body failed its
    /// own check, so that its intact neighbours can still be served).
    pub crc: u32,
}

impl Body {
    /// Length in bytes, as the `u64` that HTTP lengths use.
    pub const fn len(&self) -> u64 {
        self.len as u64
    }

    /// True for an empty body.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One request for body bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyRequest {
    /// The body.
    pub body: Body,
    /// Offset inside the body of the first byte wanted.
    pub offset: u32,
    /// True for the first request a response makes for the piece of the body that holds
    /// `offset` (so that a store counts one cache hit or miss per response and piece, not one
    /// per call).
    pub lookup: bool,
}

/// What a [`BodySource`] answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyStatus {
    /// This many bytes, verified, were copied to the start of the output (0 when the output
    /// was empty: the bytes at the offset are available now).
    Ready(usize),
    /// Not available yet (being read from the card): ask again later. The source makes sure
    /// the network loop runs again when it has them.
    Pending,
    /// The bytes cannot be had: the card failed to read them or they failed their checksum.
    /// They must not be sent. A later request reads them again.
    Failed,
}

/// The copy a caller of [`BodySource::read_with`] does: `copy(out, Some(bytes))` copies
/// `bytes` (as long as `out`) into `out`; `copy(out, None)` finds the bytes in `out` already.
pub type BodyCopy<'a> = dyn FnMut(&mut [u8], Option<&[u8]>) + 'a;

/// Where the HTTP engine gets response bodies from.
///
/// Implementations never block: a body that is not in RAM yet is [`BodyStatus::Pending`]
/// while the source reads it in the background. They must not panic for any request (an
/// out-of-range one is [`BodyStatus::Failed`]).
pub trait BodySource {
    /// Copies verified bytes of `request.body`, from `request.offset` on, into `out` (as many
    /// as are available in one piece, at most `out.len()`). Called with an empty `out` it only
    /// asks whether the bytes at the offset are available (and starts reading them if not).
    fn read(&self, request: BodyRequest, out: &mut [u8]) -> BodyStatus;

    /// The verified bytes of `request.body` from `request.offset` on as they lie in RAM (as
    /// many as are available in one piece), for a caller that copies them itself: the
    /// network stack copies and checksums a frame's payload in one pass. `None` when the
    /// source does not offer this, or the bytes are not there yet: [`BodySource::read`]
    /// then says which, and copies.
    fn peek(&self, request: BodyRequest) -> Option<&[u8]> {
        let _ = request;
        None
    }

    /// [`BodySource::read`] with the copy left to `copy`: a source that holds the bytes in RAM
    /// calls `copy(out, Some(bytes))` with `bytes` as long as `out`, for the caller to copy
    /// (the network stack copies and checksums a frame's payload in one pass). The default
    /// reads into `out` and calls `copy(out, None)`: the bytes are in place already. `copy` is
    /// called at most once, only for [`BodyStatus::Ready`] with its length.
    fn read_with(
        &self,
        request: BodyRequest,
        out: &mut [u8],
        copy: &mut BodyCopy<'_>,
    ) -> BodyStatus {
        let status = self.read(request, out);
        if let BodyStatus::Ready(n) = status
            && let Some(out) = out.get_mut(..n)
        {
            copy(out, None);
        }
        status
    }

    /// Where the byte at `request.offset` of the body lies in RAM, if the source holds it
    /// there now ([`BodySource::peek`]'s address by default): the network stack cuts its
    /// segments so that its copies run word by word. A hint only: it changes nothing.
    fn address(&self, request: BodyRequest) -> Option<usize> {
        self.peek(request).map(|bytes| bytes.as_ptr() as usize)
    }
}
