//! The Internet checksum's copy-and-sum word loop in assembly (boot/src/checksum.s) as the
//! stream pool's [`CopyWords`]: every response byte goes into its frame through it. Checked
//! against the portable routine by `selftest memory` (the QEMU tests run it).

#[cfg(doc)]
use bramble_stream::wire::CopyWords;

unsafe extern "C" {
    fn bramble_copy_sum_words(dst: *mut u32, src: *const u8, words: usize) -> u32;
}

/// Copies the whole words of `source` into `out` and returns their sum, as [`CopyWords`]
/// asks.
pub fn copy_sum_words(out: &mut [u32], source: &[u8]) -> u32 {
    let words = out.len().min(source.len() / 4);
    // SAFETY: `out` is a word-aligned buffer of at least `words` words and `source` holds at
    // least `4 * words` bytes; the routine writes only those words and reads only the aligned
    // words that hold a byte of those bytes (all inside the words `source`'s memory spans), and
    // the two do not overlap (one is borrowed mutably).
    unsafe { bramble_copy_sum_words(out.as_mut_ptr(), source.as_ptr(), words) }
}
