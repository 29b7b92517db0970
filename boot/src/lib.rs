//! The Pi boot stub: entry at 0x8000, exception stacks, BSS, VFP, vectors, MMU and caches.
//!
//! `mem.s` holds the kernel's memcpy, memset and memcmp, `checksum.s` the copy-and-sum loop
//! of the Internet checksum (see there). `start.s` runs first
//! (stacks, BSS, VFP), then [`__bramble_boot_rust`] installs the vector
//! table, builds the identity map, turns on the MMU, caches and branch prediction, and calls
//! the kernel. The kernel crate links this crate and must define three symbols:
//!
//! - `fn kernel_main() -> !` (Rust ABI, `#[unsafe(no_mangle)]`): the kernel proper;
//! - `extern "C" fn __bramble_exception(frame: &ExceptionFrame) -> !`: reports a fault;
//! - `extern "C" fn __bramble_irq()`: dispatches one IRQ.
//!
//! The linker script is `link.ld` beside this crate; the kernel's build script passes it.
#![no_std]
// The boot stub is where the CPU is set up: system registers, the vector table, the MMU's
// translation table and the caches are reached through assembly and raw pointers. Every
// unsafe block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

pub mod cpu;
pub mod mmu;
pub mod stack;

core::arch::global_asm!(include_str!("start.s"), options(raw));
// memcpy, memset, memcmp and their EABI forms, word- and block-wise: they replace
// compiler_builtins' portable ones (weak symbols) in every binary that links this crate.
core::arch::global_asm!(include_str!("mem.s"), options(raw));
// The Internet checksum's copy-and-sum word loop, for the stream pool (kernel/board's
// checksum.rs).
core::arch::global_asm!(include_str!("checksum.s"), options(raw));

/// What the assembly fault entries save on the faulting mode's stack.
#[repr(C)]
#[derive(Debug)]
pub struct ExceptionFrame {
    /// CPSR of the interrupted code (the SPSR of the exception mode).
    pub spsr: u32,
    /// Which vector was taken.
    pub kind: ExceptionKind,
    /// r0 to r12 of the interrupted code.
    pub registers: [u32; 13],
    /// The exception mode's link register (the faulting pc plus an offset that depends on
    /// the kind; see [`ExceptionFrame::fault_pc`]).
    pub link_register: u32,
}

/// The exception vector that was taken.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExceptionKind {
    /// An undefined instruction.
    UndefinedInstruction = 1,
    /// A supervisor call (the kernel makes none, so this is a fault too).
    SupervisorCall = 2,
    /// An instruction fetch from an address the MMU does not allow.
    PrefetchAbort = 3,
    /// A load or store to an address the MMU does not allow, or an external abort.
    DataAbort = 4,
    /// The reserved vector.
    Unused = 5,
    /// A fast interrupt (the kernel enables none).
    FastInterrupt = 6,
}

impl ExceptionFrame {
    /// The address of the instruction that faulted (ARM state; ARMv6 ARM B1.6.10).
    pub fn fault_pc(&self) -> u32 {
        match self.kind {
            ExceptionKind::DataAbort => self.link_register.wrapping_sub(8),
            ExceptionKind::UndefinedInstruction
            | ExceptionKind::SupervisorCall
            | ExceptionKind::PrefetchAbort => self.link_register.wrapping_sub(4),
            ExceptionKind::Unused | ExceptionKind::FastInterrupt => {
                self.link_register.wrapping_sub(4)
            }
        }
    }
}

unsafe extern "Rust" {
    fn kernel_main() -> !;
}

unsafe extern "C" {
    static __bramble_vectors: u8;
}

/// Called by `_start` with stacks, BSS and VFP ready; turns on the MMU and enters the kernel.
#[unsafe(no_mangle)]
extern "C" fn __bramble_boot_rust() -> ! {
    // SAFETY: we are the only code running, once, with the MMU off; the vector table symbol is
    // defined in start.s and 32-byte aligned (checked by link.ld).
    unsafe {
        cpu::set_vector_base(core::ptr::addr_of!(__bramble_vectors) as u32);
        mmu::enable_identity_map();
        kernel_main()
    }
}
