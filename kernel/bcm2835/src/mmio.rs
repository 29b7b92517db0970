//! Volatile access to memory-mapped registers.

/// One 32-bit memory-mapped register.
#[derive(Clone, Copy, Debug)]
pub struct Register {
    address: usize,
}

impl Register {
    /// The register at `base + offset`.
    ///
    /// # Safety
    /// The address must be a valid, mapped device register for the life of the program.
    pub const unsafe fn at(base: usize, offset: usize) -> Self {
        Self {
            address: base + offset,
        }
    }

    /// Reads the register.
    #[inline(always)]
    pub fn read(self) -> u32 {
        // SAFETY: `at`'s contract makes the address a mapped register.
        unsafe { core::ptr::read_volatile(self.address as *const u32) }
    }

    /// Writes the register.
    #[inline(always)]
    pub fn write(self, value: u32) {
        // SAFETY: `at`'s contract makes the address a mapped register.
        unsafe { core::ptr::write_volatile(self.address as *mut u32, value) }
    }

    /// Reads, changes the bits in `mask` to those of `value`, writes back.
    #[inline(always)]
    pub fn modify(self, mask: u32, value: u32) {
        self.write((self.read() & !mask) | (value & mask));
    }
}

/// A block of registers at a fixed base address.
#[derive(Clone, Copy, Debug)]
pub struct RegisterBlock {
    base: usize,
}

impl RegisterBlock {
    /// A block at `base`.
    ///
    /// # Safety
    /// `base` plus every offset later used must be mapped device registers.
    pub const unsafe fn new(base: usize) -> Self {
        Self { base }
    }

    /// The register at `offset` from the base.
    #[inline(always)]
    pub fn register(self, offset: usize) -> Register {
        // SAFETY: `new`'s contract covers every offset the driver uses.
        unsafe { Register::at(self.base, offset) }
    }

    /// The base address.
    pub const fn base(self) -> usize {
        self.base
    }
}
