//! `selftest memory` on the console: the kernel's own memcpy, memset and memcmp (boot/src/mem.s,
//! assembly that replaces compiler_builtins' versions) checked on the real CPU against
//! byte-by-byte references, for every pair of source and destination alignments within 8
//! bytes, lengths 0-100 (memcmp: 0-24, a difference at each position) and both ends of the destination guarded against overruns,
//! and the checksum's copy-and-sum words (boot/src/checksum.s) against the portable routine. Host tests
//! cannot reach this code (it is ARM assembly), so the QEMU test suite runs it
//! (tests/tests/boot.rs); on a board it is a field check.
//!
//! `selftest board`, for a first board (doc/first-boot.md): the hardware RNG's warm-up time (as
//! the CSPRNG's seeding measured it) and a health check of 256 fresh words, the card's clock,
//! bus width and real read speed over all of SITE.BIN with its SHA-256 (to compare with the
//! packed site's), the VFP's FPSCR (RunFast: flush-to-zero and default NaN, set by start.s),
//! and the link and address.

use core::ptr::{read_volatile, write_volatile};

unsafe extern "C" {
    fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8;
    fn __aeabi_memcpy(dst: *mut u8, src: *const u8, n: usize);
    fn __aeabi_memcpy4(dst: *mut u8, src: *const u8, n: usize);
    fn __aeabi_memcpy8(dst: *mut u8, src: *const u8, n: usize);
    fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8;
    fn __aeabi_memset(dst: *mut u8, n: usize, c: i32);
    fn __aeabi_memclr(dst: *mut u8, n: usize);
    fn __aeabi_memclr4(dst: *mut u8, n: usize);
    fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32;
}

/// Longest length tried: two turns of the 8-words-a-turn loops and more, with every remainder.
const MAX_LEN: usize = 100;
/// Longest length memcmp is tried with (each with a difference at every position).
const MAX_COMPARE_LEN: usize = 24;
/// Alignments tried (offsets within an 8-byte-aligned buffer).
const ALIGNMENTS: usize = 8;
/// Bytes around the destination that must stay untouched.
const GUARD: usize = 16;
const BUFFER: usize = GUARD + ALIGNMENTS + MAX_LEN + GUARD;
const GUARD_BYTE: u8 = 0xA5;

#[repr(C, align(8))]
struct Buffer([u8; BUFFER]);

/// What a failed case was.
#[derive(Debug)]
pub struct Failure {
    /// The routine under test.
    pub routine: &'static str,
    /// Destination (or first operand) offset from an 8-byte boundary.
    pub dst_align: usize,
    /// Source (or second operand) offset.
    pub src_align: usize,
    /// Length.
    pub len: usize,
}

/// Source bytes: different in every position and every case, never the guard byte.
fn source_byte(i: usize, case: usize) -> u8 {
    let b = (i.wrapping_mul(31) ^ case.wrapping_mul(7)) as u8;
    if b == GUARD_BYTE { 0x5A } else { b }
}

/// Reads byte `i` of `buffer` so that the compiler cannot turn the reference loops into calls
/// of the routines under test.
fn byte(buffer: &Buffer, i: usize) -> u8 {
    // SAFETY: `i` < BUFFER (callers index inside the array); a volatile read of an
    // initialised u8 in a live array.
    unsafe { read_volatile(buffer.0.as_ptr().add(i)) }
}

/// Writes `f(i)` into the first `end` bytes (those a case with its length can touch, and its
/// guards).
fn fill(buffer: &mut Buffer, end: usize, f: impl Fn(usize) -> u8) {
    for i in 0..end.min(BUFFER) {
        // SAFETY: i < BUFFER; a volatile write into the array we own.
        unsafe { write_volatile(buffer.0.as_mut_ptr().add(i), f(i)) };
    }
}

/// Checks `dst` after a routine wrote `len` bytes at `start`: `expected(i)` inside, the guard
/// byte everywhere else up to a guard's length past the end (every byte [`fill`] set).
fn check(dst: &Buffer, start: usize, len: usize, expected: impl Fn(usize) -> u8) -> bool {
    (0..(start + len + GUARD).min(BUFFER)).all(|i| {
        let inside = i >= start && i < start + len;
        byte(dst, i)
            == if inside {
                expected(i - start)
            } else {
                GUARD_BYTE
            }
    })
}

/// Runs every case; returns how many passed, or the first failure.
pub fn memory() -> Result<u32, Failure> {
    let mut src = Buffer([0; BUFFER]);
    let mut dst = Buffer([0; BUFFER]);
    let mut passed = 0u32;
    let mut case = 0usize;
    type Copy = unsafe extern "C" fn(*mut u8, *const u8, usize);
    unsafe extern "C" fn memcpy_void(dst: *mut u8, src: *const u8, n: usize) {
        // SAFETY: forwarded as given by the caller.
        unsafe { memcpy(dst, src, n) };
    }
    let copies: [(&'static str, Copy, usize); 4] = [
        ("memcpy", memcpy_void, 1),
        ("__aeabi_memcpy", __aeabi_memcpy, 1),
        ("__aeabi_memcpy4", __aeabi_memcpy4, 4),
        ("__aeabi_memcpy8", __aeabi_memcpy8, 8),
    ];
    for (routine, copy, step) in copies {
        for dst_align in (0..ALIGNMENTS).step_by(step) {
            for src_align in (0..ALIGNMENTS).step_by(step) {
                for len in 0..=MAX_LEN {
                    case += 1;
                    let from = GUARD + src_align;
                    let to = GUARD + dst_align;
                    fill(&mut src, from + len, |i| source_byte(i, case));
                    fill(&mut dst, to + len + GUARD, |_| GUARD_BYTE);
                    // SAFETY: both ranges lie inside their buffers (GUARD + 8 + MAX_LEN +
                    // GUARD bytes), do not overlap (two arrays), and meet the routine's
                    // alignment (`step`).
                    unsafe { copy(dst.0.as_mut_ptr().add(to), src.0.as_ptr().add(from), len) };
                    if !check(&dst, to, len, |i| source_byte(from + i, case)) {
                        return Err(Failure {
                            routine,
                            dst_align,
                            src_align,
                            len,
                        });
                    }
                    passed += 1;
                }
            }
        }
    }
    let sets: [(&'static str, bool); 4] = [
        ("memset", false),
        ("__aeabi_memset", false),
        ("__aeabi_memclr", true),
        ("__aeabi_memclr4", true),
    ];
    for (routine, clears) in sets {
        let step = if routine == "__aeabi_memclr4" { 4 } else { 1 };
        for dst_align in (0..ALIGNMENTS).step_by(step) {
            for len in 0..=MAX_LEN {
                case += 1;
                let value = if clears { 0 } else { source_byte(0, case) };
                let to = GUARD + dst_align;
                fill(&mut dst, to + len + GUARD, |_| GUARD_BYTE);
                let start = dst.0[to..].as_mut_ptr();
                // SAFETY: `len` bytes from `start` lie inside `dst`, aligned as each routine
                // needs (4 for __aeabi_memclr4: `step`).
                unsafe {
                    match routine {
                        "memset" => _ = memset(start, i32::from(value) | 0x100, len),
                        "__aeabi_memset" => __aeabi_memset(start, len, i32::from(value)),
                        "__aeabi_memclr" => __aeabi_memclr(start, len),
                        _ => __aeabi_memclr4(start, len),
                    }
                }
                if !check(&dst, to, len, |_| value) {
                    return Err(Failure {
                        routine,
                        dst_align,
                        src_align: 0,
                        len,
                    });
                }
                passed += 1;
            }
        }
    }
    // memcmp: equal ranges give 0; a difference at `at` gives the sign of the bytes there
    // (as unsigned), whatever follows it.
    for a_align in 0..ALIGNMENTS {
        for b_align in 0..ALIGNMENTS {
            for len in 0..=MAX_COMPARE_LEN {
                for at in (0..len).chain(core::iter::once(len)) {
                    case += 1;
                    let a = GUARD + a_align;
                    let b = GUARD + b_align;
                    fill(&mut src, a + len, |i| source_byte(i, case));
                    fill(&mut dst, b + len, |i| {
                        if i >= b && i < b + len {
                            let same = source_byte(a + i - b, case);
                            if i - b == at {
                                same ^ 0x80
                            } else if i - b > at {
                                !same
                            } else {
                                same
                            }
                        } else {
                            0
                        }
                    });
                    // SAFETY: both ranges lie inside their buffers; memcmp only reads.
                    let got = unsafe { memcmp(src.0.as_ptr().add(a), dst.0.as_ptr().add(b), len) };
                    let want = if at == len {
                        0
                    } else {
                        i32::from(byte(&src, a + at)) - i32::from(byte(&dst, b + at))
                    };
                    if got.signum() != want.signum() {
                        return Err(Failure {
                            routine: "memcmp",
                            dst_align: a_align,
                            src_align: b_align,
                            len,
                        });
                    }
                    passed += 1;
                }
            }
        }
    }
    // The checksum's copy-and-sum words (boot/src/checksum.s): word-aligned destinations,
    // every source alignment, 0-25 words (three turns of its eight-word loop and every
    // remainder), bytes that vary and bytes that are all ones (a carry from every word), the
    // sum against the portable routine's (the same modulo 2^32 - 1).
    let mut reference = [0u32; MAX_LEN / 4];
    for saturated in [false, true] {
        for dst_align in (0..ALIGNMENTS).step_by(4) {
            for src_align in 0..ALIGNMENTS {
                for words in 0..=MAX_LEN / 4 {
                    case += 1;
                    let len = 4 * words;
                    let from = GUARD + src_align;
                    let to = GUARD + dst_align;
                    let value = |i: usize| {
                        if saturated {
                            0xff
                        } else {
                            source_byte(i, case)
                        }
                    };
                    fill(&mut src, from + len, value);
                    fill(&mut dst, to + len + GUARD, |_| GUARD_BYTE);
                    let source = &src.0[from..from + len];
                    let want = bramble_stream::wire::copy_words(&mut reference[..words], source);
                    // SAFETY: `to` is a multiple of 4 in an 8-aligned buffer, and `words` words
                    // from it lie inside `dst` (GUARD + 8 + MAX_LEN + GUARD bytes), initialised,
                    // borrowed by nothing else while `out` lives.
                    let out = unsafe {
                        core::slice::from_raw_parts_mut(
                            dst.0.as_mut_ptr().add(to).cast::<u32>(),
                            words,
                        )
                    };
                    let got = crate::checksum::copy_sum_words(out, source);
                    let same_sum = u64::from(got) % 0xffff_ffff == u64::from(want) % 0xffff_ffff;
                    if !same_sum || !check(&dst, to, len, |i| value(from + i)) {
                        return Err(Failure {
                            routine: "bramble_copy_sum_words",
                            dst_align,
                            src_align,
                            len,
                        });
                    }
                    passed += 1;
                }
            }
        }
    }
    Ok(passed)
}

/// Words of RNG output `selftest board` checks.
const RNG_WORDS: usize = 256;

/// `selftest board`: one line each for the RNG, the card and the network.
pub fn board(net: Option<&crate::appliance::Network>, store: Option<&crate::storage::Store>) {
    use bramble_bcm2835::rng::RngHealth;
    let mut bytes = [0u8; RNG_WORDS * 4];
    let started = crate::platform::micros();
    match crate::entropy::sample_for_selftest(&mut bytes) {
        Ok(seeded) => {
            let took = crate::platform::micros() - started;
            let words: heapless::Vec<u32, RNG_WORDS> = bytes
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            let health = RngHealth::of(&words);
            log::info!(
                "selftest: rng seeded at boot in {seeded} us (warm-up included); {} words in \
                 {took} us: {} of {} bits set, {} repeats: {}",
                health.words,
                health.ones,
                health.words * 32,
                health.repeats,
                if health.healthy() { "ok" } else { "SUSPECT" }
            );
        }
        Err(problem) => log::error!("selftest: rng FAILED: {problem}"),
    }
    match store.map(crate::storage::check_card) {
        None => log::warn!("selftest: card: no site store (no card, or no SITE.BIN)"),
        Some(None) => log::warn!("selftest: card busy with a read; try again"),
        Some(Some(Err(error))) => log::error!("selftest: card read FAILED: {error:?}"),
        Some(Some(Ok(check))) => {
            let mut hex = heapless::String::<64>::new();
            for byte in check.sha256 {
                let _ = core::fmt::Write::write_fmt(&mut hex, format_args!("{byte:02x}"));
            }
            let info = check.info;
            log::info!(
                "selftest: card {}, {} MiB, {}-bit bus at {} Hz{}; SITE.BIN {} bytes read in {} us \
                 ({} KB/s), SHA-256 {hex}",
                if info.high_capacity {
                    "SDHC/SDXC"
                } else {
                    "SDSC"
                },
                info.blocks / 2048,
                info.bus_width,
                info.clock_hz,
                if info.high_speed { " (High Speed)" } else { "" },
                check.bytes,
                check.micros,
                (u64::from(check.bytes) * 1000)
                    .checked_div(check.micros)
                    .unwrap_or(0),
            );
        }
    }
    let fpscr = bramble_boot::cpu::fpscr();
    log::info!(
        "selftest: cpu FPSCR {fpscr:#010x}: {}",
        if fpscr & bramble_boot::cpu::FPSCR_RUN_FAST == bramble_boot::cpu::FPSCR_RUN_FAST {
            "flush-to-zero and default NaN (RunFast)"
        } else {
            "NOT RunFast: a subnormal operand would trap"
        }
    );
    match net {
        None => log::warn!("selftest: network: no USB network adapter"),
        Some(appliance) if !appliance.device().is_present() => {
            log::warn!("selftest: network: no USB network adapter (still looking)")
        }
        Some(appliance) => {
            let link = appliance.link();
            match appliance.ipv4_address() {
                Some([a, b, c, d]) => {
                    log::info!("selftest: link {link:?}, address {a}.{b}.{c}.{d}")
                }
                None => log::info!("selftest: link {link:?}, no address yet"),
            }
        }
    }
}
