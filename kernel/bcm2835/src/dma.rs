//! Allocation of buffers that DMA masters (mailbox, USB, EMMC) share with the ARM.
//!
//! The board hands this allocator the linker's `.dma` section, which the MMU maps as normal
//! non-cacheable memory, so buffers from here need no cache maintenance. Allocations live for
//! the rest of the program; nothing is ever freed.

use core::ops::Range;

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaError {
    /// The region has no room left for the request.
    Exhausted {
        /// Bytes asked for.
        requested: usize,
        /// Bytes left (before alignment).
        remaining: usize,
    },
}

/// A bump allocator over the DMA region.
pub struct DmaAllocator {
    next: usize,
    end: usize,
}

/// Alignment of every DMA allocation: one L1 cache line (32 bytes), which also satisfies the
/// mailbox's 16 bytes and DWC2's 4.
pub const DMA_ALIGN: usize = 32;

impl DmaAllocator {
    /// An allocator over `region`.
    ///
    /// # Safety
    /// `region` must be memory nothing else uses, mapped for the life of the program, and only
    /// one allocator may exist for it.
    pub const unsafe fn new(region: Range<usize>) -> Self {
        Self {
            next: region.start,
            end: region.end,
        }
    }

    /// Bytes not yet handed out.
    pub fn remaining(&self) -> usize {
        self.end - self.next
    }

    fn reserve(&mut self, size: usize, align: usize) -> Result<usize, DmaError> {
        let align = align.max(DMA_ALIGN);
        let start = self.next.next_multiple_of(align);
        let end = start
            .checked_add(size.next_multiple_of(DMA_ALIGN))
            .filter(|&end| end <= self.end)
            .ok_or(DmaError::Exhausted {
                requested: size,
                remaining: self.remaining(),
            })?;
        self.next = end;
        Ok(start)
    }

    /// Moves `value` into the region and returns it, with at least its own alignment.
    pub fn allocate<T>(&mut self, value: T) -> Result<&'static mut T, DmaError> {
        let address = self.reserve(core::mem::size_of::<T>(), core::mem::align_of::<T>())?;
        let pointer = address as *mut T;
        // SAFETY: `reserve` returned a fresh, aligned, exclusively owned range of the region
        // (the constructor's contract), large enough for a T.
        unsafe {
            pointer.write(value);
            Ok(&mut *pointer)
        }
    }

    /// A zeroed byte buffer of `len` bytes.
    pub fn allocate_bytes(&mut self, len: usize) -> Result<&'static mut [u8], DmaError> {
        let address = self.reserve(len, DMA_ALIGN)?;
        // SAFETY: as in `allocate`; the bytes are zeroed before the slice is made.
        unsafe {
            core::ptr::write_bytes(address as *mut u8, 0, len);
            Ok(core::slice::from_raw_parts_mut(address as *mut u8, len))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn allocations_are_aligned_disjoint_and_bounded() {
        let mut backing = vec![0u64; 64]; // 512 bytes
        let start = backing.as_mut_ptr() as usize;
        // SAFETY: the vector outlives the allocator's uses in this test and is not touched.
        let mut dma = unsafe { DmaAllocator::new(start..start + 512) };
        let a = dma.allocate_bytes(10).unwrap().as_ptr() as usize;
        let b = dma.allocate([7u32; 4]).unwrap() as *mut _ as usize;
        assert_eq!(a % DMA_ALIGN, 0);
        assert_eq!(b % DMA_ALIGN, 0);
        assert!(b >= a + 10);
        assert!(matches!(
            dma.allocate_bytes(1024),
            Err(DmaError::Exhausted {
                requested: 1024,
                ..
            })
        ));
    }
}
