//! The identity map: 1 MiB sections, ARMv6 descriptor format (ARM1176 TRM 6.11, XP = 1).
//!
//! | range (ARM physical)       | mapping                                   |
//! |----------------------------|-------------------------------------------|
//! | 0x0000_0000..0x2000_0000   | normal memory, write-back write-allocate  |
//! | the `.dma` section (1 MiB) | normal memory, non-cacheable, never executed |
//! | 0x2000_0000..0x2100_0000   | peripherals: shared device, never executed |
//! | everything else            | unmapped: any access faults               |
//!
//! Buffers in the `.dma` section need no cache maintenance; DMA buffers elsewhere must use
//! [`crate::cpu::clean_dcache`] and [`crate::cpu::invalidate_dcache`].
//!
//! The RAM and peripheral windows are the chip's memory map, `bramble_bcm2835::memory_map`,
//! the one place those addresses are written.

use bramble_bcm2835::memory_map::{PERIPHERAL_BASE, PERIPHERAL_SIZE, RAM_END};
use core::arch::asm;

/// Size of one section mapping.
pub const SECTION_SIZE: usize = 1 << 20;

const SECTION: u32 = 0b10;
const BUFFERABLE: u32 = 1 << 2;
const CACHEABLE: u32 = 1 << 3;
const EXECUTE_NEVER: u32 = 1 << 4;
const ACCESS_FULL: u32 = 0b11 << 10;
const TEX_001: u32 = 0b001 << 12;

/// Outer and inner write-back, write-allocate (TEX=001, C=1, B=1).
pub const NORMAL_CACHED: u32 = SECTION | ACCESS_FULL | TEX_001 | CACHEABLE | BUFFERABLE;
/// Outer and inner non-cacheable (TEX=001, C=0, B=0).
pub const NORMAL_UNCACHED: u32 = SECTION | ACCESS_FULL | TEX_001 | EXECUTE_NEVER;
/// Shared device (TEX=000, C=0, B=1).
pub const DEVICE: u32 = SECTION | ACCESS_FULL | BUFFERABLE | EXECUTE_NEVER;

#[repr(C, align(16384))]
struct TranslationTable([u32; 4096]);

static mut TABLE: TranslationTable = TranslationTable([0; 4096]);

/// The descriptor for the section holding `address`, given the DMA section's address.
pub const fn section_descriptor(address: usize, dma_section: usize) -> u32 {
    let base = (address & !(SECTION_SIZE - 1)) as u32;
    if address >= PERIPHERAL_BASE && address < PERIPHERAL_BASE + PERIPHERAL_SIZE {
        base | DEVICE
    } else if address >= RAM_END {
        0
    } else if address & !(SECTION_SIZE - 1) == dma_section {
        base | NORMAL_UNCACHED
    } else {
        base | NORMAL_CACHED
    }
}

/// Builds the table and turns on the MMU, the L1 caches and branch prediction.
///
/// # Safety
/// Call once, early, with the MMU off and nothing else running.
pub unsafe fn enable_identity_map() {
    let dma_section = crate::cpu::layout::dma_region().start;
    // SAFETY: single-threaded boot; nothing else references the table yet.
    let table = unsafe { &mut *core::ptr::addr_of_mut!(TABLE) };
    for (index, entry) in table.0.iter_mut().enumerate() {
        *entry = section_descriptor(index * SECTION_SIZE, dma_section);
    }
    let table_address = table.0.as_ptr() as u32;
    // SCTLR bits (ARM1176 TRM 3.2.7).
    const MMU: u32 = 1 << 0;
    const ALIGNMENT_FAULTS: u32 = 1 << 1;
    const DCACHE: u32 = 1 << 2;
    const BRANCH_PREDICTION: u32 = 1 << 11;
    const ICACHE: u32 = 1 << 12;
    const HIGH_VECTORS: u32 = 1 << 13;
    const UNALIGNED: u32 = 1 << 22;
    const EXTENDED_PAGE_TABLES: u32 = 1 << 23;
    // SAFETY: the table maps the running code and data at their own addresses, so turning on
    // the MMU does not move anything under our feet.
    unsafe {
        asm!(
            "mcr p15, 0, {zero}, c7, c7, 0",   // invalidate both caches
            "mcr p15, 0, {zero}, c8, c7, 0",   // invalidate TLBs
            "mcr p15, 0, {zero}, c7, c10, 4",  // DSB
            "mcr p15, 0, {zero}, c2, c0, 2",   // TTBCR = 0: TTBR0 translates everything
            "mcr p15, 0, {ttbr}, c2, c0, 0",   // TTBR0
            "mcr p15, 0, {domains}, c3, c0, 0", // every domain: client (check permissions)
            zero = in(reg) 0u32,
            ttbr = in(reg) table_address | 0b01001, // walks: inner cacheable, outer WB-WA
            domains = in(reg) 0x5555_5555u32,
            options(nostack),
        );
        let mut control: u32;
        asm!("mrc p15, 0, {0}, c1, c0, 0", out(reg) control, options(nostack));
        control |= MMU | DCACHE | ICACHE | BRANCH_PREDICTION | UNALIGNED | EXTENDED_PAGE_TABLES;
        control &= !(ALIGNMENT_FAULTS | HIGH_VECTORS);
        asm!(
            "mcr p15, 0, {control}, c1, c0, 0",
            "mcr p15, 0, {zero}, c7, c5, 4",   // flush prefetch buffer
            control = in(reg) control,
            zero = in(reg) 0u32,
            options(nostack),
        );
    }
}
