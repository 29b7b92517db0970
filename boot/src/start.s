// Entry point and exception vectors for the ARM1176JZF-S (BCM2835).
//
// The GPU firmware (or QEMU's -bios / -kernel ELF loader) jumps to _start at 0x8000 in SVC mode
// with the MMU and caches off. We give every exception mode its own stack, clear .bss, enable
// VFP (the target is hard-float, so compiled Rust may touch VFP registers anywhere) and call
// into Rust. Nothing here depends on r0-r2 (ATAGs/DTB from the firmware): we do not use them.

.fpu vfpv2

.equ MODE_FIQ, 0x11
.equ MODE_IRQ, 0x12
.equ MODE_SVC, 0x13
.equ MODE_ABT, 0x17
.equ MODE_UND, 0x1B
.equ MODE_SYS, 0x1F

.section .text.boot, "ax"
.arm
.global _start
_start:
    cpsid   if                          // no interrupts until the kernel asks for them
    cps     #MODE_FIQ
    ldr     sp, =__stack_fiq_top
    cps     #MODE_IRQ
    ldr     sp, =__stack_irq_top
    cps     #MODE_ABT
    ldr     sp, =__stack_abt_top
    cps     #MODE_UND
    ldr     sp, =__stack_und_top
    cps     #MODE_SYS
    ldr     sp, =__stack_svc_top        // SYS shares the SVC stack: it is only used in faults
    cps     #MODE_SVC
    ldr     sp, =__stack_svc_top

    // Zero .bss (the linker script keeps it word aligned).
    ldr     r0, =__bss_start
    ldr     r1, =__bss_end
    mov     r2, #0
1:  cmp     r0, r1
    strlo   r2, [r0], #4
    blo     1b

    // Paint the SVC stack (nothing is on it yet) so that its deepest use can be read back and
    // an overflow noticed: see stack.rs.
    ldr     r0, =__stack_svc_bottom
    ldr     r1, =__stack_svc_top
    ldr     r2, =0x4B545321             // STACK_PAINT in stack.rs ("!STK")
3:  cmp     r0, r1
    strlo   r2, [r0], #4
    blo     3b

    // VFP: full access to cp10/cp11 in CPACR, then FPEXC.EN (ARM1176 TRM 3.2.16, VFP11 TRM 2.3).
    mrc     p15, 0, r0, c1, c0, 2
    orr     r0, r0, #(0xF << 20)
    mcr     p15, 0, r0, c1, c0, 2
    mov     r0, #0
    mcr     p15, 0, r0, c7, c5, 4       // flush prefetch buffer (ISB on ARMv6)
    mov     r0, #0x40000000
    vmsr    fpexc, r0
    // FPSCR: flush-to-zero (bit 24) and default NaN (bit 25), every trap off, round to
    // nearest: the VFP11's RunFast mode, in which it handles every operand in hardware. Without
    // it a subnormal operand bounces to a support-code handler (VFP11 TRM 2.3.1), which Bramble
    // does not have: the bounce would arrive as an undefined-instruction fault and reset.
    mov     r0, #0x03000000
    vmsr    fpscr, r0

    bl      __bramble_boot_rust         // never returns
2:  mcr     p15, 0, r0, c7, c0, 4       // wait for interrupt, forever
    b       2b

// The vector table, installed through VBAR (ARM1176 has the Security Extensions' VBAR).
.section .text.vectors, "ax"
.balign 32
.global __bramble_vectors
__bramble_vectors:
    b       _start                      // reset
    b       undefined_entry
    b       svc_entry
    b       prefetch_abort_entry
    b       data_abort_entry
    b       unused_entry
    b       irq_entry
    b       fiq_entry

// Faults: build an ExceptionFrame {kind, spsr, r0-r12, lr_of_mode} on the mode's stack and hand
// it to the kernel, which reports it and resets the board. They never return.
.macro FAULT_ENTRY name, kind
\name:
    stmfd   sp!, {r0-r12, lr}
    mrs     r0, spsr
    mov     r1, #\kind
    stmfd   sp!, {r0, r1}
    mov     r0, sp
    bl      __bramble_exception
    b       .
.endm

FAULT_ENTRY undefined_entry, 1
FAULT_ENTRY svc_entry, 2
FAULT_ENTRY prefetch_abort_entry, 3
FAULT_ENTRY data_abort_entry, 4
FAULT_ENTRY unused_entry, 5
FAULT_ENTRY fiq_entry, 6

// IRQ: save what AAPCS lets a called function clobber (r0-r3, r12, lr, d0-d7, FPSCR), call the
// kernel's dispatcher, restore, and return to the interrupted instruction (lr - 4).
irq_entry:
    sub     lr, lr, #4
    stmfd   sp!, {r0-r3, r12, lr}       // 24 bytes: sp stays 8-byte aligned
    vpush   {d0-d7}
    vmrs    r0, fpscr
    stmfd   sp!, {r0, r1}               // FPSCR plus a pad word for alignment
    bl      __bramble_irq
    // A barrier between the handler's last peripheral access and the interrupted code's next
    // one (BCM2835 ARM Peripherals §1.3): every register access is preceded by one
    // (bramble_bcm2835::mmio), but the interrupted code may have passed its own already.
    mov     r0, #0
    mcr     p15, 0, r0, c7, c10, 5      // DMB
    ldmfd   sp!, {r0, r1}
    vmsr    fpscr, r0
    vpop    {d0-d7}
    ldmfd   sp!, {r0-r3, r12, pc}^      // ^ with pc: restores CPSR from SPSR
