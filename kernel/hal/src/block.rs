//! Read-only block storage (the SD card). Bramble never writes to its card.

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
    /// Something asked to write. Bramble never writes to its card, so no driver can.
    ReadOnly,
}

impl core::fmt::Display for BlockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            BlockError::NoCard => "no SD card answered",
            BlockError::Timeout => "the card did not answer in time",
            BlockError::Transfer => "a transfer failed its CRC or end-bit check",
            BlockError::OutOfRange => "read past the end of the card",
            BlockError::BadBuffer => "buffer is not a whole number of blocks",
            BlockError::ReadOnly => "writing is not allowed",
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
