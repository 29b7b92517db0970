//! Hands out the free RAM after the kernel as typed, 'static allocations: the site index, the
//! network pool, the segment cache. Nothing is ever freed: each is sized once, at boot, from
//! what is left.

/// A bump allocator over one region of RAM.
pub struct Arena {
    memory: &'static mut [u8],
}

impl Arena {
    /// An arena over `memory`.
    pub fn new(memory: &'static mut [u8]) -> Self {
        Self { memory }
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.memory.len()
    }

    /// `count` values made by `init`, or `None` if they do not fit.
    pub fn slice<T>(
        &mut self,
        count: usize,
        mut init: impl FnMut() -> T,
    ) -> Option<&'static mut [T]> {
        let start = self.memory.as_ptr() as usize;
        let padding = start.next_multiple_of(core::mem::align_of::<T>()) - start;
        let bytes = padding.checked_add(core::mem::size_of::<T>().checked_mul(count)?)?;
        if bytes > self.memory.len() {
            return None;
        }
        let (chunk, rest) = core::mem::take(&mut self.memory).split_at_mut(bytes);
        self.memory = rest;
        let first = chunk[padding..].as_mut_ptr() as *mut T;
        for index in 0..count {
            // SAFETY: `first` is aligned for T and the chunk holds `count` of them; the chunk
            // was split off the arena, so nothing else refers to it.
            unsafe { first.add(index).write(init()) };
        }
        // SAFETY: all `count` elements were just initialised; the memory lives forever.
        Some(unsafe { core::slice::from_raw_parts_mut(first, count) })
    }

    /// `len` zeroed bytes (one memset, where [`Arena::slice`] writes element by element).
    pub fn zeroed_bytes(&mut self, len: usize) -> Option<&'static mut [u8]> {
        if len > self.memory.len() {
            return None;
        }
        let (chunk, rest) = core::mem::take(&mut self.memory).split_at_mut(len);
        self.memory = rest;
        chunk.fill(0);
        Some(chunk)
    }

    /// `len` bytes starting on a multiple of `align` (a power of two), as RAM left them: for
    /// buffers that are filled before they are read (the card's DMA destinations), where
    /// zeroing hundreds of megabytes would only cost boot time.
    pub fn bytes(&mut self, len: usize, align: usize) -> Option<&'static mut [u8]> {
        let start = self.memory.as_ptr() as usize;
        let padding = start.checked_next_multiple_of(align)? - start;
        let total = padding.checked_add(len)?;
        if total > self.memory.len() {
            return None;
        }
        let (chunk, rest) = core::mem::take(&mut self.memory).split_at_mut(total);
        self.memory = rest;
        Some(&mut chunk[padding..])
    }

    /// One value moved into the arena.
    pub fn value<T>(&mut self, value: T) -> Option<&'static mut T> {
        let mut value = Some(value);
        self.slice(1, || value.take().expect("called once"))
            .map(|slice| &mut slice[0])
    }
}
