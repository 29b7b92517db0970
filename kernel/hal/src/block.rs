//! Block storage (the SD card), read in place or in the background, and written only inside
//! the one window its driver is given: the certificate store's region (see [`BlockWrite`]).
//! The site, the kernel and the settings are never written.

/// Size of one block in bytes. SD cards address 512-byte blocks (SDHC/SDXC always; SDSC
/// cards are set to 512 with CMD16).
pub const BLOCK_SIZE: usize = 512;

/// Why a block read failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockError {
    /// No card is inserted, or it did not answer initialisation.
    NoCard,
    /// The card did not answer a command within its deadline.
    Timeout,
    /// A command or data transfer reported a CRC, end-bit or index error.
    Transfer,
    /// The request reaches past the end of the card.
    OutOfRange,
    /// The caller's buffer is not a whole number of blocks.
    BadBuffer,
    /// A write outside the blocks the driver may write (the certificate store's region), or
    /// with no such region: refused before anything reached the card.
    ReadOnly,
    /// The card took the write command but reported an error in its status (write
    /// protected, address, ECC or internal error), or it stayed busy programming too long.
    WriteFailed,
    /// A background read is already in flight.
    Busy,
}

impl core::fmt::Display for BlockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            BlockError::NoCard => "no SD card answered",
            BlockError::Timeout => "the card did not answer in time",
            BlockError::Transfer => "a transfer failed its CRC or end-bit check",
            BlockError::OutOfRange => "read past the end of the card",
            BlockError::BadBuffer => "buffer is not a whole number of blocks",
            BlockError::ReadOnly => "writing there is not allowed",
            BlockError::WriteFailed => "the card reported an error for a write",
            BlockError::Busy => "another read is in flight",
        })
    }
}

impl core::error::Error for BlockError {}

/// A device that reads fixed-size blocks.
pub trait BlockDevice {
    /// Number of blocks on the device.
    fn block_count(&self) -> u64;

    /// Reads `buffer.len() / BLOCK_SIZE` consecutive blocks starting at `first_block`.
    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError>;
}

/// A block device that also writes, but only inside a window of blocks set by its owner (on
/// the Pi: the certificate store's region of the card); a write that reaches outside it fails
/// with [`BlockError::ReadOnly`] before anything is sent to the card.
pub trait BlockWrite: BlockDevice {
    /// Writes `data.len() / BLOCK_SIZE` consecutive blocks from `first_block`; when it returns
    /// `Ok` the card has programmed them.
    fn write_blocks(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError>;
}

impl<T: BlockDevice + ?Sized> BlockDevice for &mut T {
    fn block_count(&self) -> u64 {
        (**self).block_count()
    }
    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        (**self).read_blocks(first_block, buffer)
    }
}

impl<T: BlockWrite + ?Sized> BlockWrite for &mut T {
    fn write_blocks(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError> {
        (**self).write_blocks(first_block, data)
    }
}

/// A contiguous run of blocks: `blocks` blocks from `first_block` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRun {
    /// The first block.
    pub first_block: u64,
    /// How many blocks.
    pub blocks: u32,
}

/// Most runs one background read may be made of (a piece of a file that crosses a few
/// fragments of the filesystem).
pub const MAX_RUNS_PER_READ: usize = 8;

/// How a background read is doing.
#[derive(Debug)]
pub enum ReadPoll<'b> {
    /// No read is in flight.
    Idle,
    /// The read is still going.
    Busy,
    /// The read ended: the buffer is handed back with how it went (after an error its
    /// contents are unspecified).
    Done(&'b mut [u8], Result<(), BlockError>),
}

/// A block device that reads in the background (by DMA on the Pi) while its caller goes on
/// with other work: a read is started, then polled until it hands its buffer back.
///
/// The device holds the buffer for the whole read, so nothing else can touch memory that the
/// hardware may still be writing. Nothing here blocks; a read that takes too long ends with
/// [`BlockError::Timeout`] at a poll.
pub trait BackgroundRead<'b>: BlockDevice {
    /// Starts reading `runs`, one after the other, into consecutive parts of `buffer` (which
    /// must hold at least all their blocks; the rest is left as it is). Refused, with the
    /// buffer handed back, while another read is in flight ([`BlockError::Busy`]), for more
    /// than [`MAX_RUNS_PER_READ`] runs or a buffer that is too short
    /// ([`BlockError::BadBuffer`]), or for blocks past the end ([`BlockError::OutOfRange`]).
    fn start_read(
        &mut self,
        runs: &[BlockRun],
        buffer: &'b mut [u8],
    ) -> Result<(), (BlockError, &'b mut [u8])>;

    /// Moves the read on (a driver may have to start its next command) and says whether it
    /// ended.
    fn poll_read(&mut self) -> ReadPoll<'b>;
}
