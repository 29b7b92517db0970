//! Bramble's card store: a site served from the SD card without loading it.
//!
//! At boot the kernel finds SITE.BIN's runs of blocks once ([`fat::locate`]), reads and
//! verifies only the site index ([`read_index`]), and starts serving. A [`CardStore`] then
//! hands the HTTP engine body bytes through [`bramble_site::BodySource`]: from its RAM cache of
//! segments ([`cache`]) when it has them, otherwise "not yet" while it reads the segment from
//! the card in the background, verifies its checksum and caches it. Nothing blocks: reads are
//! started and polled ([`bramble_hal::block::BackgroundRead`]), one at a time, demand first,
//! then read-ahead for large bodies, then warm-up when idle. A segment that fails its check
//! is counted, logged with the files in it and read again when a new request asks for it;
//! from a segment that keeps failing, only the bodies that lie wholly in it and pass their own
//! checksum are served, so one bad byte costs one file. The card is never written.
//!
//! Everything here is portable and generic over the block device: the Pi's EMMC driver, or
//! [`MemoryCard`] over bytes in RAM for the host tests and the hosted build.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod cache;
#[cfg(feature = "std")]
#[doc(hidden)]
pub mod exercise;
pub mod fat;
mod memory;
mod store;

pub use cache::Page;
pub use fat::{FatError, FileExtents};
pub use memory::MemoryCard;
pub use store::{
    CardStore, IndexError, POLL_INTERVAL_MICROS, StoreCounters, StoreSide, SwitchError,
    WARM_UP_IDLE_MICROS, WARM_UP_PACE_MICROS, index_memory_len, read_index,
};
