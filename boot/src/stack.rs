//! How deep the SVC stack (the kernel's only stack outside exceptions) has been used, and
//! whether it overflowed.
//!
//! `start.s` paints every word of the stack with [`STACK_PAINT`] before any Rust runs. A word
//! still holding the paint has never been written (a frame that writes the same value back is
//! as unlikely as it is harmless: it would only under-report). The stack grows down from
//! `__stack_svc_top`, so the lowest word that is not paint marks the deepest use.
//!
//! Below the stack lie the IRQ stack and the other exception stacks: an overflow does not
//! fault, it silently overwrites what an interrupt pushes there and the other way round (a
//! 262 KiB main-loop frame on a 256 KiB stack once cleared the network's socket table that
//! way). [`overflowed`] reads the lowest [`GUARD_WORDS`] words: the kernel checks it on every
//! main-loop pass and resets with a clear message instead of running on with corrupted state.

/// The word `start.s` writes over the whole stack ("!STK" in little-endian ASCII).
pub const STACK_PAINT: u32 = 0x4B54_5321;
/// Words at the bottom of the stack that must never be written (1 KiB).
pub const GUARD_WORDS: usize = 256;

unsafe extern "C" {
    static __stack_svc_bottom: u32;
    static __stack_svc_top: u32;
}

/// The stack's bottom (lowest address) and its size in words.
fn bounds() -> (*const u32, usize) {
    let bottom = core::ptr::addr_of!(__stack_svc_bottom);
    let top = core::ptr::addr_of!(__stack_svc_top);
    let words = (top as usize - bottom as usize) / 4;
    (bottom, words)
}

/// Reads stack word `index` (0 is the lowest).
fn word(index: usize) -> u32 {
    let (bottom, words) = bounds();
    debug_assert!(index < words);
    // SAFETY: `index` is inside the stack section that link.ld reserves between the two
    // symbols; the read is volatile because the compiler cannot know that other frames write
    // these words; any bit pattern is a valid u32.
    unsafe { core::ptr::read_volatile(bottom.add(index.min(words - 1))) }
}

/// The stack's size in bytes.
pub fn size() -> usize {
    bounds().1 * 4
}

/// Whether anything wrote into the lowest [`GUARD_WORDS`] words of the stack: it came within
/// 1 KiB of its end, or past it. Reads 9 words spread over the guard (the top one first: a
/// stack growing down reaches it first), cheap enough for every main-loop pass; a frame that
/// jumps over all of them and writes none shows in [`peak_full`] at the next status.
pub fn overflowed() -> bool {
    let guard = GUARD_WORDS.min(bounds().1);
    (0..=8)
        .map(|step| (guard - 1) * (8 - step) / 8)
        .any(|index| word(index) != STACK_PAINT)
}

/// The deepest use in bytes, scanning the whole stack from its bottom (64 K reads for 256 KiB).
pub fn peak_full() -> usize {
    let (_, words) = bounds();
    let lowest = (0..words)
        .find(|&index| word(index) != STACK_PAINT)
        .unwrap_or(words);
    (words - lowest) * 4
}
