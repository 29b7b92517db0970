// memcpy, memset and memcmp (and their ARM EABI forms) for the ARM1176, in place of
// compiler_builtins' portable ones, whose symbols are weak for this purpose. Those copy one
// word per five instructions at best and byte by byte below 16 bytes; the -icount profile of a
// page request had them at about a tenth of its instructions. Here a copy whose source and
// destination share their alignment moves eight words per LDM/STM pair, a copy whose
// alignments differ shifts words together, a fill stores two words per STM, and a comparison
// of word-aligned buffers compares words until a pair differs. Strict alignment (no unaligned
// LDR/STR) is assumed throughout: every word access is to a word-aligned address, and a
// source word is only loaded if it holds a byte of the source, so no access strays beyond a
// word that the caller's buffer touches.
//
// AAPCS: arguments in r0-r3, result in r0, r0-r3 and r12 free, r4-r11 saved when used.

.section .text.bramble_mem, "ax"
.arm

// void *memcpy(void *dst, const void *src, size_t n); void __aeabi_memcpy(dst, src, n)
.global memcpy
.global __aeabi_memcpy
.type memcpy, %function
.type __aeabi_memcpy, %function
.balign 4
memcpy:
__aeabi_memcpy:
    mov     r12, r0                     // r12 writes; r0 stays dst (memcpy's result)
    cmp     r2, #8
    blo     .Lcopy_bytes                // short: byte by byte
    eor     r3, r0, r1
    tst     r3, #3
    bne     .Lcopy_shifted              // alignments differ
.Lcopy_align:                           // same alignment: bytes up to a word boundary
    tst     r12, #3                     // (at most 3, and n >= 8)
    beq     .Lcopy_words
    ldrb    r3, [r1], #1
    sub     r2, r2, #1
    strb    r3, [r12], #1
    b       .Lcopy_align

// void __aeabi_memcpy4(dst, src, n), __aeabi_memcpy8: both word-aligned.
.global __aeabi_memcpy4
.global __aeabi_memcpy8
.type __aeabi_memcpy4, %function
.type __aeabi_memcpy8, %function
__aeabi_memcpy4:
__aeabi_memcpy8:
    mov     r12, r0
.Lcopy_words:                           // r1, r12 word-aligned; r2 bytes left
    subs    r2, r2, #32
    blo     .Lcopy_words_left
    push    {r4-r10}
.Lcopy_blocks:                          // r2 = left - 32 >= 0
    ldmia   r1!, {r3-r10}
    subs    r2, r2, #32
    stmia   r12!, {r3-r10}
    bhs     .Lcopy_blocks
    pop     {r4-r10}
.Lcopy_words_left:                      // r2 = left - 32, left < 32
    adds    r2, r2, #28                 // r2 = left - 4 (carry: left >= 4)
    blo     .Lcopy_bytes_left
.Lcopy_word:
    ldr     r3, [r1], #4
    subs    r2, r2, #4
    str     r3, [r12], #4
    bhs     .Lcopy_word
.Lcopy_bytes_left:                      // r2 = left - 4, left < 4
    add     r2, r2, #4
.Lcopy_bytes:                           // r2 bytes from r1 to r12
    subs    r2, r2, #1
    ldrbhs  r3, [r1], #1
    strbhs  r3, [r12], #1
    bhs     .Lcopy_bytes
    bx      lr

.Lcopy_shifted:                         // n >= 8, (dst ^ src) & 3 != 0
    tst     r12, #3                     // bytes up to a word boundary of dst (at most 3)
    beq     1f
    ldrb    r3, [r1], #1
    sub     r2, r2, #1
    strb    r3, [r12], #1
    b       .Lcopy_shifted
1:  cmp     r2, #8                      // at least 5 left; shifting needs 8
    blo     .Lcopy_bytes
    push    {r4-r7}
    and     r3, r1, #3                  // k: the source's offset in its word (1..3)
    lsl     r6, r3, #3                  // 8k: the previous word's bytes, shifted down
    rsb     r7, r6, #32                 // 32 - 8k: the next word's bytes, shifted up
    bic     r1, r1, #3
    ldr     r4, [r1], #4                // the word holding the next source byte
    sub     r2, r2, #4                  // r2 = left - 4 >= 4
2:  ldr     r5, [r1], #4                // the next word: it holds source bytes (the output word's last)
    lsr     r4, r4, r6
    orr     r4, r4, r5, lsl r7
    str     r4, [r12], #4
    mov     r4, r5
    subs    r2, r2, #4
    bhs     2b
    // The next source byte is at offset k of the word last loaded (at r1 - 4).
    sub     r1, r1, #4
    add     r1, r1, r3
    add     r2, r2, #4                  // 0..3 left
    pop     {r4-r7}
    b       .Lcopy_bytes
.size memcpy, . - memcpy

// void *memset(void *dst, int c, size_t n)
.global memset
.type memset, %function
memset:
    mov     r3, r2
    and     r2, r1, #255
    mov     r1, r3
    b       .Lset_pattern

// void __aeabi_memset(void *dst, size_t n, int c), and its word-aligned forms
.global __aeabi_memset
.global __aeabi_memset4
.global __aeabi_memset8
.type __aeabi_memset, %function
.type __aeabi_memset4, %function
.type __aeabi_memset8, %function
__aeabi_memset:
__aeabi_memset4:
__aeabi_memset8:
    and     r2, r2, #255
.Lset_pattern:
    orr     r2, r2, r2, lsl #8
    orr     r2, r2, r2, lsl #16
    b       .Lset

// void __aeabi_memclr(void *dst, size_t n), and its word-aligned forms
.global __aeabi_memclr
.global __aeabi_memclr4
.global __aeabi_memclr8
.type __aeabi_memclr, %function
.type __aeabi_memclr4, %function
.type __aeabi_memclr8, %function
__aeabi_memclr:
__aeabi_memclr4:
__aeabi_memclr8:
    mov     r2, #0
.Lset:                                  // r0 dst (kept: memset's result), r1 n, r2 pattern
    mov     r12, r0
    cmp     r1, #8
    blo     .Lset_bytes
1:  tst     r12, #3                     // bytes up to a word boundary (at most 3)
    beq     2f
    strb    r2, [r12], #1
    sub     r1, r1, #1
    b       1b
2:  mov     r3, r2
    subs    r1, r1, #16
    blo     4f
3:  stmia   r12!, {r2, r3}              // r1 = left - 16 >= 0
    stmia   r12!, {r2, r3}
    subs    r1, r1, #16
    bhs     3b
4:  adds    r1, r1, #12                 // r1 = left - 4 (carry: left >= 4)
    blo     6f
5:  str     r2, [r12], #4
    subs    r1, r1, #4
    bhs     5b
6:  add     r1, r1, #4                  // 0..3 left
.Lset_bytes:
    subs    r1, r1, #1
    strbhs  r2, [r12], #1
    bhs     .Lset_bytes
    bx      lr
.size memset, . - memset

// int memcmp(const void *a, const void *b, size_t n); int bcmp(a, b, n)
.global memcmp
.global bcmp
.type memcmp, %function
.type bcmp, %function
memcmp:
bcmp:
    orr     r3, r0, r1
    tst     r3, #3
    bne     .Lcmp_bytes
1:  subs    r2, r2, #4                  // both word-aligned: words while they agree
    blo     2f
    ldr     r3, [r0]
    ldr     r12, [r1]
    cmp     r3, r12
    bne     2f                          // these four differ: find the byte below
    add     r0, r0, #4
    add     r1, r1, #4
    b       1b
2:  add     r2, r2, #4
.Lcmp_bytes:
    subs    r2, r2, #1
    blo     3f
    ldrb    r3, [r0], #1
    ldrb    r12, [r1], #1
    subs    r3, r3, r12
    beq     .Lcmp_bytes
    mov     r0, r3                      // the first differing bytes, as unsigned
    bx      lr
3:  mov     r0, #0
    bx      lr
.size memcmp, . - memcmp
