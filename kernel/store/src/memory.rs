//! A card in RAM: a block device over a byte string, with an optional delay and read errors,
//! for the host tests, the fuzz targets and the hosted build (which serves a SITE.BIN file
//! through the same store as the Pi). It is never written: it only holds a shared slice.

use core::ops::Range;

use bramble_hal::block::{
    BLOCK_SIZE, BackgroundRead, BlockDevice, BlockError, BlockRun, MAX_RUNS_PER_READ, ReadPoll,
};

/// A read in flight.
#[derive(Debug)]
struct Pending<'b> {
    runs: heapless::Vec<BlockRun, MAX_RUNS_PER_READ>,
    buffer: &'b mut [u8],
    polls_left: u32,
}

/// A block device over `data` (its blocks are the bytes in order; a short last block reads
/// as if padded with zeros).
#[derive(Debug)]
pub struct MemoryCard<'d, 'b> {
    data: &'d [u8],
    /// Polls a background read stays busy before it completes.
    busy_polls: u32,
    /// Blocks whose reads fail with a transfer error.
    failing: Option<Range<u64>>,
    pending: Option<Pending<'b>>,
    /// Read commands completed (one per run).
    commands: u64,
}

impl<'d, 'b> MemoryCard<'d, 'b> {
    /// A card over `data` whose background reads complete at the first poll.
    pub fn new(data: &'d [u8]) -> Self {
        Self {
            data,
            busy_polls: 0,
            failing: None,
            pending: None,
            commands: 0,
        }
    }

    /// Background reads stay busy for `polls` polls before completing (a slow card).
    pub fn with_delay(mut self, polls: u32) -> Self {
        self.busy_polls = polls;
        self
    }

    /// Reads touching `blocks` fail with [`BlockError::Transfer`] (a failing card).
    pub fn with_failing_blocks(mut self, blocks: Range<u64>) -> Self {
        self.failing = Some(blocks);
        self
    }

    /// Read commands completed so far (one per contiguous run).
    pub fn commands(&self) -> u64 {
        self.commands
    }

    fn copy_run(&mut self, run: BlockRun, out: &mut [u8]) -> Result<(), BlockError> {
        let end = run
            .first_block
            .checked_add(u64::from(run.blocks))
            .ok_or(BlockError::OutOfRange)?;
        if end > self.block_count() {
            return Err(BlockError::OutOfRange);
        }
        if let Some(failing) = &self.failing
            && run.first_block < failing.end
            && failing.start < end
        {
            return Err(BlockError::Transfer);
        }
        self.commands += 1;
        let start = usize::try_from(run.first_block)
            .ok()
            .and_then(|block| block.checked_mul(BLOCK_SIZE))
            .ok_or(BlockError::OutOfRange)?;
        out.fill(0);
        let available = self.data.get(start..).unwrap_or(&[]);
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        Ok(())
    }
}

impl BlockDevice for MemoryCard<'_, '_> {
    fn block_count(&self) -> u64 {
        self.data.len().div_ceil(BLOCK_SIZE) as u64
    }

    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        if !buffer.len().is_multiple_of(BLOCK_SIZE) {
            return Err(BlockError::BadBuffer);
        }
        let blocks = u32::try_from(buffer.len() / BLOCK_SIZE).map_err(|_| BlockError::BadBuffer)?;
        self.copy_run(
            BlockRun {
                first_block,
                blocks,
            },
            buffer,
        )
    }
}

impl<'b> BackgroundRead<'b> for MemoryCard<'_, 'b> {
    fn start_read(
        &mut self,
        runs: &[BlockRun],
        buffer: &'b mut [u8],
    ) -> Result<(), (BlockError, &'b mut [u8])> {
        if self.pending.is_some() {
            return Err((BlockError::Busy, buffer));
        }
        let blocks: u64 = runs.iter().map(|run| u64::from(run.blocks)).sum();
        let Ok(runs) = heapless::Vec::from_slice(runs) else {
            return Err((BlockError::BadBuffer, buffer));
        };
        if blocks.saturating_mul(BLOCK_SIZE as u64) > buffer.len() as u64 {
            return Err((BlockError::BadBuffer, buffer));
        }
        self.pending = Some(Pending {
            runs,
            buffer,
            polls_left: self.busy_polls,
        });
        Ok(())
    }

    fn poll_read(&mut self) -> ReadPoll<'b> {
        let Some(mut pending) = self.pending.take() else {
            return ReadPoll::Idle;
        };
        if pending.polls_left > 0 {
            pending.polls_left -= 1;
            self.pending = Some(pending);
            return ReadPoll::Busy;
        }
        let mut at = 0;
        let mut result = Ok(());
        for run in pending.runs.iter().copied() {
            let len = run.blocks as usize * BLOCK_SIZE;
            let out = &mut pending.buffer[at..at + len];
            if let Err(error) = self.copy_run(run, out) {
                result = Err(error);
                break;
            }
            at += len;
        }
        ReadPoll::Done(pending.buffer, result)
    }
}
