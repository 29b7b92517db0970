//! The probe's heap: talc over a static region, counted so the peak can be reported.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};

const HEAP_BYTES: usize = 8 << 20;
static mut HEAP: [u8; HEAP_BYTES] = [0; HEAP_BYTES];

struct Counting {
    inner: talc::Talck<spin::Mutex<()>, talc::ErrOnOom>,
    in_use: AtomicUsize,
    peak: AtomicUsize,
    /// Set while a server step runs: what it allocates and frees is the server's.
    serving: AtomicBool,
    server_in_use: AtomicIsize,
    server_peak: AtomicIsize,
}

#[global_allocator]
static ALLOCATOR: Counting = Counting {
    inner: talc::Talc::new(talc::ErrOnOom).lock(),
    in_use: AtomicUsize::new(0),
    peak: AtomicUsize::new(0),
    serving: AtomicBool::new(false),
    server_in_use: AtomicIsize::new(0),
    server_peak: AtomicIsize::new(0),
};

// SAFETY: forwards to talc, which upholds GlobalAlloc's contract; the counters are plain
// statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        let pointer = unsafe { self.inner.alloc(layout) };
        if !pointer.is_null() {
            let now = self.in_use.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            self.peak.fetch_max(now, Ordering::Relaxed);
            if self.serving.load(Ordering::Relaxed) {
                let size = layout.size() as isize;
                let now = self.server_in_use.fetch_add(size, Ordering::Relaxed) + size;
                self.server_peak.fetch_max(now, Ordering::Relaxed);
            }
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { self.inner.dealloc(pointer, layout) };
        self.in_use.fetch_sub(layout.size(), Ordering::Relaxed);
        if self.serving.load(Ordering::Relaxed) {
            self.server_in_use
                .fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }
}

/// Gives talc the static region. Called once, before any allocation.
pub fn init() {
    // SAFETY: HEAP is used by nothing else, and init runs once before any allocation.
    unsafe {
        let span = talc::Span::from_array(core::ptr::addr_of_mut!(HEAP));
        ALLOCATOR
            .inner
            .lock()
            .claim(span)
            .expect("the heap region is large enough");
    }
}

/// Bytes allocated now.
pub fn in_use() -> usize {
    ALLOCATOR.in_use.load(Ordering::Relaxed)
}

/// Most bytes allocated at once since the last reset.
pub fn peak() -> usize {
    ALLOCATOR.peak.load(Ordering::Relaxed)
}

/// Runs `f` as a server step: its allocations count as the server's.
pub fn as_server<R>(f: impl FnOnce() -> R) -> R {
    ALLOCATOR.serving.store(true, Ordering::Relaxed);
    let result = f();
    ALLOCATOR.serving.store(false, Ordering::Relaxed);
    result
}

/// Starts counting a new server connection's heap from zero.
pub fn reset_server() {
    ALLOCATOR.server_in_use.store(0, Ordering::Relaxed);
    ALLOCATOR.server_peak.store(0, Ordering::Relaxed);
}

/// Most heap the server held at once since [`reset_server`].
pub fn server_peak() -> usize {
    ALLOCATOR.server_peak.load(Ordering::Relaxed).max(0) as usize
}

/// Heap the server holds now.
pub fn server_in_use() -> usize {
    ALLOCATOR.server_in_use.load(Ordering::Relaxed).max(0) as usize
}
