// The Internet checksum's copy-and-sum word loop for the ARM1176: copies whole words into a
// word-aligned frame and sums them with a chain of ADCS (one instruction a word, the carries
// added back at the end). The stream pool copies every response byte into its frame this way
// (bramble_net::stream::wire::copy_and_sum_with, which copies and sums the bytes before and
// after the whole words itself); the portable Rust loop it replaces spends four instructions a
// word when source and frame line up and nine when they do not, and was a sixth of the
// -icount profile of a page request. Here a source that lines up moves eight words per LDM/STM
// pair (12 instructions for 8 words), one that does not four words per LDM/STM, shifted
// together (17 for 4). Only aligned words that hold a source byte are loaded (strict
// alignment: no unaligned LDR/STR).
//
// AAPCS: arguments in r0-r3, result in r0, r0-r3 and r12 free, r4-r11 saved when used.
// The carry flag carries the sum's carries through the loops: only ADCS touches it there
// (TEQ with a register operand, LDM/STM and the shifts without S leave it as it is).

.section .text.bramble_checksum, "ax"
.arm

// u32 bramble_copy_sum_words(u32 *dst, const u8 *src, size_t words)
// dst word-aligned; src any alignment; copies 4 * words bytes; returns the ones' complement
// sum (end-around carry) of the words stored, as the machine reads them: 0 only if every
// word is 0.
.global bramble_copy_sum_words
.type bramble_copy_sum_words, %function
.balign 4
bramble_copy_sum_words:
    cmp     r2, #0
    moveq   r0, #0
    bxeq    lr
    push    {r4-r11}
    ands    r3, r1, #3
    mov     r12, #0                     // the sum
    bne     .Lsum_shifted
    adds    r12, r12, #0                // carry clear
    bic     r11, r2, #7                 // words in whole blocks of eight
    add     r11, r1, r11, lsl #2        // where the blocks end
    teq     r1, r11
    beq     .Lsum_words
.Lsum_blocks:
    ldmia   r1!, {r3-r10}
    stmia   r0!, {r3-r10}
    adcs    r12, r12, r3
    adcs    r12, r12, r4
    adcs    r12, r12, r5
    adcs    r12, r12, r6
    adcs    r12, r12, r7
    adcs    r12, r12, r8
    adcs    r12, r12, r9
    adcs    r12, r12, r10
    teq     r1, r11
    bne     .Lsum_blocks
.Lsum_words:                            // 0-7 words left
    and     r2, r2, #7
    add     r11, r1, r2, lsl #2
    teq     r1, r11
    beq     .Lsum_done
.Lsum_word:
    ldr     r3, [r1], #4
    str     r3, [r0], #4
    adcs    r12, r12, r3
    teq     r1, r11
    bne     .Lsum_word
.Lsum_done:                             // add the last carry, and the carry of that
    adcs    r12, r12, #0
    adc     r0, r12, #0
    pop     {r4-r11}
    bx      lr

.Lsum_shifted:                          // r3 = k, the source's offset in its word (1..3)
    lsl     r5, r3, #3                  // 8k: each aligned word's bytes, shifted down
    rsb     r6, r5, #32                 // 32 - 8k: the next one's, shifted up
    bic     r1, r1, #3
    // Output word i is the last 4 - k bytes of aligned word i and the first k of word i + 1:
    // words + 1 aligned words, each holding a source byte (the last one the source's last).
    ldr     r3, [r1], #4                // aligned word 0
    adds    r12, r12, #0                // carry clear
    bic     r11, r2, #3                 // words in whole turns of four
    add     r11, r1, r11, lsl #2        // where those turns' loads end
    teq     r1, r11
    beq     .Lsum_shifted_words
.Lsum_quads:
    ldmia   r1!, {r7-r10}
    lsr     r3, r3, r5
    orr     r3, r3, r7, lsl r6
    lsr     r7, r7, r5
    orr     r7, r7, r8, lsl r6
    lsr     r8, r8, r5
    orr     r8, r8, r9, lsl r6
    lsr     r9, r9, r5
    orr     r9, r9, r10, lsl r6
    stmia   r0!, {r3, r7-r9}
    adcs    r12, r12, r3
    adcs    r12, r12, r7
    adcs    r12, r12, r8
    adcs    r12, r12, r9
    mov     r3, r10
    teq     r1, r11
    bne     .Lsum_quads
.Lsum_shifted_words:                    // 0-3 words left
    and     r2, r2, #3
    add     r11, r1, r2, lsl #2
    teq     r1, r11
    beq     .Lsum_done
.Lsum_shifted_word:
    ldr     r7, [r1], #4
    lsr     r3, r3, r5
    orr     r3, r3, r7, lsl r6
    str     r3, [r0], #4
    adcs    r12, r12, r3
    mov     r3, r7
    teq     r1, r11
    bne     .Lsum_shifted_word
    b       .Lsum_done
.size bramble_copy_sum_words, . - bramble_copy_sum_words
