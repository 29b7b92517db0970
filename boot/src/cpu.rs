//! ARM1176JZF-S CPU operations: barriers, sleep, interrupt masking, caches, fault registers.
//!
//! CP15 encodings are from the ARM1176JZF-S Technical Reference Manual, chapter 3 (c7 for
//! cache operations and barriers, c5/c6 for fault status and address, c12 for VBAR).

use core::arch::asm;

/// L1 data cache line size in bytes (ARM1176 TRM 7.1).
pub const CACHE_LINE: usize = 32;

/// Data synchronisation barrier: all explicit memory accesses before it complete first.
#[inline(always)]
pub fn dsb() {
    // SAFETY: a barrier has no effect on memory safety.
    unsafe { asm!("mcr p15, 0, {0}, c7, c10, 4", in(reg) 0u32, options(nostack, preserves_flags)) }
}

/// Data memory barrier: orders memory accesses before and after it. The BCM2835 needs one
/// between accesses to different peripherals (BCM2835 ARM Peripherals, section 1.3).
#[inline(always)]
pub fn dmb() {
    // SAFETY: a barrier has no effect on memory safety.
    unsafe { asm!("mcr p15, 0, {0}, c7, c10, 5", in(reg) 0u32, options(nostack, preserves_flags)) }
}

/// Flushes the prefetch buffer (the ARMv6 instruction synchronisation barrier).
#[inline(always)]
pub fn isb() {
    // SAFETY: a barrier has no effect on memory safety.
    unsafe { asm!("mcr p15, 0, {0}, c7, c5, 4", in(reg) 0u32, options(nostack, preserves_flags)) }
}

/// Sleeps until an interrupt is pending. Returns even if IRQs are masked in the CPSR, so the
/// caller can mask, check for work, and sleep without a race.
#[inline(always)]
pub fn wait_for_interrupt() {
    // SAFETY: WFI only stops the core until an interrupt is pending.
    unsafe { asm!("mcr p15, 0, {0}, c7, c0, 4", in(reg) 0u32, options(nostack, preserves_flags)) }
}

/// Unmasks IRQs.
///
/// # Safety
/// The kernel's IRQ dispatcher must be ready to run.
#[inline(always)]
pub unsafe fn enable_irq() {
    // SAFETY: the caller guarantees the dispatcher is ready.
    unsafe { asm!("cpsie i", options(nostack)) }
}

/// Masks IRQs.
#[inline(always)]
pub fn disable_irq() {
    // SAFETY: masking interrupts cannot break memory safety.
    unsafe { asm!("cpsid i", options(nostack)) }
}

/// Whether IRQs are currently unmasked.
#[inline(always)]
pub fn irq_enabled() -> bool {
    let cpsr: u32;
    // SAFETY: reading the CPSR has no side effects.
    unsafe { asm!("mrs {0}, cpsr", out(reg) cpsr, options(nomem, nostack, preserves_flags)) };
    cpsr & (1 << 7) == 0
}

/// FPSCR's flush-to-zero bit (24) and default-NaN bit (25): the VFP11's RunFast mode, which
/// start.s sets at entry.
pub const FPSCR_RUN_FAST: u32 = (1 << 24) | (1 << 25);

/// The VFP status and control register.
#[inline(always)]
pub fn fpscr() -> u32 {
    let value: u32;
    // SAFETY: reading FPSCR has no side effects (VFP is enabled by start.s before Rust runs).
    unsafe { asm!("vmrs {0}, fpscr", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// Runs `f` with IRQs masked, restoring the previous mask afterwards.
#[inline]
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    let was_enabled = irq_enabled();
    disable_irq();
    let result = f();
    if was_enabled {
        // SAFETY: they were enabled before, so the dispatcher is ready.
        unsafe { enable_irq() };
    }
    result
}

/// Sets the vector base address register.
///
/// # Safety
/// `address` must point to a valid, 32-byte aligned vector table.
pub unsafe fn set_vector_base(address: u32) {
    // SAFETY: guaranteed by the caller.
    unsafe { asm!("mcr p15, 0, {0}, c12, c0, 0", in(reg) address, options(nostack)) };
    isb();
}

fn for_each_line(start: usize, len: usize, mut op: impl FnMut(usize)) {
    let first = start & !(CACHE_LINE - 1);
    let end = start.saturating_add(len);
    let mut line = first;
    while line < end {
        op(line);
        line += CACHE_LINE;
    }
}

/// Writes dirty data cache lines covering `buffer` back to memory, before a device reads it
/// by DMA.
pub fn clean_dcache(buffer: &[u8]) {
    for_each_line(buffer.as_ptr() as usize, buffer.len(), |line| {
        // SAFETY: cleaning a line by address only writes back data we own.
        unsafe { asm!("mcr p15, 0, {0}, c7, c10, 1", in(reg) line, options(nostack)) }
    });
    dsb();
}

/// Discards data cache lines covering `buffer`, after a device wrote it by DMA.
///
/// The buffer should be cache-line aligned and a whole number of lines long: a partial line at
/// either end would also discard the neighbour's unwritten data.
pub fn invalidate_dcache(buffer: &mut [u8]) {
    for_each_line(buffer.as_ptr() as usize, buffer.len(), |line| {
        // SAFETY: the caller owns the buffer; discarding its lines only loses stale copies.
        unsafe { asm!("mcr p15, 0, {0}, c7, c6, 1", in(reg) line, options(nostack)) }
    });
    dsb();
}

/// Cleans and then invalidates the data cache lines covering `buffer`.
pub fn clean_invalidate_dcache(buffer: &mut [u8]) {
    for_each_line(buffer.as_ptr() as usize, buffer.len(), |line| {
        // SAFETY: write-back then discard of lines the caller owns.
        unsafe { asm!("mcr p15, 0, {0}, c7, c14, 1", in(reg) line, options(nostack)) }
    });
    dsb();
}

/// The fault registers read after an abort.
#[derive(Clone, Copy, Debug)]
pub struct FaultRegisters {
    /// Data fault status register (c5, c0, 0).
    pub data_fault_status: u32,
    /// Data fault address register (c6, c0, 0).
    pub data_fault_address: u32,
    /// Instruction fault status register (c5, c0, 1).
    pub instruction_fault_status: u32,
    /// Instruction fault address register (c6, c0, 2).
    pub instruction_fault_address: u32,
}

/// Reads the fault status and address registers.
pub fn fault_registers() -> FaultRegisters {
    let (dfsr, dfar, ifsr, ifar): (u32, u32, u32, u32);
    // SAFETY: reading CP15 fault registers has no side effects.
    unsafe {
        asm!("mrc p15, 0, {0}, c5, c0, 0", out(reg) dfsr, options(nomem, nostack));
        asm!("mrc p15, 0, {0}, c6, c0, 0", out(reg) dfar, options(nomem, nostack));
        asm!("mrc p15, 0, {0}, c5, c0, 1", out(reg) ifsr, options(nomem, nostack));
        asm!("mrc p15, 0, {0}, c6, c0, 2", out(reg) ifar, options(nomem, nostack));
    }
    FaultRegisters {
        data_fault_status: dfsr,
        data_fault_address: dfar,
        instruction_fault_status: ifsr,
        instruction_fault_address: ifar,
    }
}

/// Bounds of the linker's regions, as addresses.
pub mod layout {
    unsafe extern "C" {
        static __kernel_start: u8;
        static __image_end: u8;
        static __bss_end: u8;
        static __dma_start: u8;
        static __dma_end: u8;
        static __heap_start: u8;
    }

    /// Start of kernel.img in memory (0x8000).
    pub fn kernel_start() -> usize {
        core::ptr::addr_of!(__kernel_start) as usize
    }

    /// End of the loaded image (text, rodata, data): the size of kernel.img.
    pub fn image_end() -> usize {
        core::ptr::addr_of!(__image_end) as usize
    }

    /// End of zero-initialised statics.
    pub fn bss_end() -> usize {
        core::ptr::addr_of!(__bss_end) as usize
    }

    /// The DMA section: mapped normal, non-cacheable (see [`crate::mmu`]).
    pub fn dma_region() -> core::ops::Range<usize> {
        core::ptr::addr_of!(__dma_start) as usize..core::ptr::addr_of!(__dma_end) as usize
    }

    /// First free byte after everything the linker placed (1 MiB aligned).
    pub fn heap_start() -> usize {
        core::ptr::addr_of!(__heap_start) as usize
    }
}
