//! The EMMC controller (an Arasan SDHCI, BCM2835 ARM Peripherals chapter 5) driving an SD card:
//! initialisation of SDSC and SDHC/SDXC cards on a 4-bit bus at the fastest clock the card
//! offers (High Speed, 50 MHz, where it supports CMD6), and reads of whole runs of blocks with
//! one multi-block command each: by programmed I/O, or by the DMA controller paced by the
//! EMMC's DREQ line while the caller goes on with other work.
//!
//! Writes (CMD24 for one block, CMD25 with auto-CMD12 for more, by programmed I/O) go only
//! to the windows of blocks the board allows with [`Emmc::allow_writes`] (at most two, apart:
//! the certificate store's region and the site slots' record and slots); anything else is
//! refused before a command is sent. Each write is checked:
//! the card's status before (CMD13, in the transfer state), the command's R1 and, once the
//! data is in, CMD13 again until the card has programmed it, with every error bit looked at.
//! Command flow from the SD Physical Layer Simplified Specification v3.01, section 4.2
//! (card identification), 4.3 (data transfer) and 4.3.10 (CMD6, switch function).
//!
//! Why the BCM2835 DMA controller and not the SDHCI's own DMA: the BCM2835's Arasan core has
//! no SDMA or ADMA (CMDTM bit 0, the SDHCI "DMA enable", is reserved in the datasheet; Linux's
//! downstream bcm2835-mmc driver moves the data port with the platform DMA controller on
//! DREQ 11). QEMU 7.2's bcm2835 DMA model ignores DREQ and copies at once, which works as long
//! as the read command is sent first (its SDHCI model then produces every block on demand),
//! so that is the order used: command, then DMA.
//!
//! Rules the silicon enforces and QEMU's model does not (each kept here, each with a unit test
//! against a recording register model below, and the first also checked by the board-rules
//! plugin on every QEMU boot of the test command):
//!
//! - Write spacing. The Arasan core may lose a register write made within two SD clocks of
//!   the previous one (a clock-domain crossing; U-Boot's bcm2835_sdhci.c and Linux's
//!   sdhci-iproc.c space their writes, Circle waits around CONTROL1). Every write other than
//!   to DATA goes through [`Emmc::write_register`], which waits until two card clocks have
//!   passed since the previous one: by the system timer (rounded up to whole microseconds,
//!   plus one for the timer's resolution) and by a count of wait-loop passes that at four
//!   instructions each covers two card clocks at 700 MHz even if the timer were fast, which is
//!   also what the plugin measures. While the clock changes, the slower of the two clocks
//!   sets the gap. The one way to switch it off is [`BRAMBLE_EMMC_WRITE_SPACING`], a byte of the image
//!   that only the board-rules test patches (in a copy of kernel.img), to show that the
//!   plugin catches a kernel without the spacing.
//! - R1b busy. After a command with a busy response (CMD7, CMD12) the card holds DAT0 low
//!   until it is done; the next command waits until the data lines are free (DAT_INHIBIT
//!   clear, or the transfer-complete flag), as Circle and Linux do.
//! - CMD12 is sent as an abort command (CMDTM CMD_TYPE 3), which resets the controller's
//!   data state machine along with the card's.
//! - A base clock of 0 (the mailbox query failed) is replaced by [`FALLBACK_BASE_CLOCK_HZ`],
//!   the fastest a Pi 1 reports: dividers computed from it can only make the card clock
//!   slower than asked, never faster (the identification clock must stay at 400 kHz or
//!   below).

use crate::mmio::{Field, FieldValue, Offset, RegisterBlock, Value, Word};
use bramble_hal::block::{BLOCK_SIZE, BlockDevice, BlockError, BlockWrite};
use core::sync::atomic::{AtomicU8, Ordering};

/// Register-write spacing: 1 (on) in every kernel as built, and nothing in the kernel
/// changes it. The board-rules test (tests/tests/board_rules.rs) sets this byte to 0 in a
/// copy of kernel.img, found by its symbol, to boot a kernel without the spacing under the
/// judge: one build serves both boots. Unmangled so that the test can find it, and so that
/// the optimiser cannot take its value as known.
#[allow(unsafe_code)] // `no_mangle`: the symbol name is unique (the BRAMBLE_ prefix)
#[unsafe(no_mangle)]
static BRAMBLE_EMMC_WRITE_SPACING: AtomicU8 = AtomicU8::new(1);

/// Whether register writes are spaced (see [`BRAMBLE_EMMC_WRITE_SPACING`]).
fn spacing_on() -> bool {
    BRAMBLE_EMMC_WRITE_SPACING.load(Ordering::Relaxed) != 0
}

// Registers (BCM2835 ARM Peripherals §5.4).

/// BLKSIZECNT: block size and count of the next data command.
const BLKSIZECNT: Offset<BlockSizeCount> = Offset::new(0x04);
/// ARG1: the command's argument.
const ARG1: Offset<Word> = Offset::new(0x08);
/// CMDTM: command and transfer mode; writing it sends the command.
const CMDTM: Offset<Word> = Offset::new(0x0C);
/// RESP0: the first word of the response (RESP1..RESP3 follow).
const RESP0: usize = 0x10;
/// DATA: the data port.
const DATA: Offset<Word> = Offset::new(0x20);
/// Bus address of DATA, for the DMA controller.
const DATA_BUS_ADDRESS: u32 = 0x7E30_0020;
/// STATUS: command and data line states.
const STATUS: Offset<Status> = Offset::new(0x24);
/// CONTROL0: bus width and speed.
const CONTROL0: Offset<Control0> = Offset::new(0x28);
/// CONTROL1: clocks, timeout and resets.
const CONTROL1: Offset<Control1> = Offset::new(0x2C);
/// INTERRUPT: status flags (write 1 to clear).
const INTERRUPT: Offset<Interrupt> = Offset::new(0x30);
/// IRPT_MASK: which flags show in INTERRUPT.
const IRPT_MASK: Offset<Word> = Offset::new(0x34);
/// IRPT_EN: which flags raise the interrupt line.
const IRPT_EN: Offset<Word> = Offset::new(0x38);

/// BLKSIZECNT fields.
enum BlockSizeCount {}
impl BlockSizeCount {
    /// BLKSIZE: bytes per block.
    const SIZE: Field<Self> = Field::bits(9, 0);
    /// BLKCNT: blocks to transfer.
    const COUNT: Field<Self> = Field::bits(31, 16);
}

/// STATUS fields.
enum Status {}
impl Status {
    /// CMD_INHIBIT: the command line is busy.
    const COMMAND_INHIBIT: Field<Self> = Field::bit(0);
    /// DAT_INHIBIT: the data lines are busy.
    const DATA_INHIBIT: Field<Self> = Field::bit(1);
}

/// CONTROL0 fields.
enum Control0 {}
impl Control0 {
    /// HCTL_DWIDTH: 4-bit data bus.
    const FOUR_BIT: Field<Self> = Field::bit(1);
}

/// CONTROL1 fields.
enum Control1 {}
impl Control1 {
    /// CLK_INTLEN: internal clock on.
    const CLOCK_INTERNAL: Field<Self> = Field::bit(0);
    /// CLK_STABLE: the internal clock is stable.
    const CLOCK_STABLE: Field<Self> = Field::bit(1);
    /// CLK_EN: clock to the card on.
    const CLOCK_CARD: Field<Self> = Field::bit(2);
    /// CLK_FREQ8 and CLK_FREQ_MS2: the divider (see [`clock_divider_bits`]).
    const DIVIDER: Field<Self> = Field::bits(15, 6);
    /// DATA_TOUNIT: data timeout, TMCLK * 2^(value + 13).
    const DATA_TIMEOUT: Field<Self> = Field::bits(19, 16);
    /// SRST_HC: reset the whole controller.
    const RESET_HOST: Field<Self> = Field::bit(24);
    /// SRST_CMD: reset the command circuit.
    const RESET_COMMAND: Field<Self> = Field::bit(25);
    /// SRST_DATA: reset the data circuit.
    const RESET_DATA: Field<Self> = Field::bit(26);
}

/// INTERRUPT fields.
enum Interrupt {}
impl Interrupt {
    /// CMD_DONE: the command's response arrived.
    const COMMAND_DONE: Field<Self> = Field::bit(0);
    /// DATA_DONE: the data transfer ended.
    const DATA_DONE: Field<Self> = Field::bit(1);
    /// WRITE_RDY: the data port has room for a block.
    const WRITE_READY: Field<Self> = Field::bit(4);
    /// READ_RDY: a block is ready in the data port.
    const READ_READY: Field<Self> = Field::bit(5);
    /// CTO_ERR: the command got no response.
    const COMMAND_TIMEOUT: Field<Self> = Field::bit(16);
    /// ERR and every error flag (CTO_ERR .. ACMD_ERR).
    const ERRORS: Field<Self> = Field::bits(31, 15);
    /// Every flag.
    const ALL: Field<Self> = Field::bits(31, 0);
}
/// The EMMC base clock assumed when the mailbox could not say (a Pi 1 reports 200 to 250 MHz;
/// assuming the highest keeps every card clock at or below its target).
pub const FALLBACK_BASE_CLOCK_HZ: u32 = 250_000_000;

/// The identification clock (SD Physical Layer Specification 4.2: at most 400 kHz).
const IDENTIFICATION_HZ: u32 = 400_000;

/// The CPU clock the write spacing counts instructions at (the B+'s default and maximum
/// without overclocking).
const CPU_HZ: u64 = 700_000_000;

/// Instructions one pass of the spacing wait takes at least (a timer read alone is more).
const INSTRUCTIONS_PER_SPIN: u64 = 4;

/// The least time between two register writes other than to DATA at card clock `clock_hz`:
/// two card clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteGap {
    /// Microseconds by the system timer (two clocks rounded up, plus one for the timer's
    /// resolution: a read just before a tick and one just after differ by one).
    pub micros: u64,
    /// Passes of the wait loop (each at least [`INSTRUCTIONS_PER_SPIN`] instructions), for two
    /// clocks at 700 MHz.
    pub spins: u64,
}

impl WriteGap {
    /// The gap for card clock `clock_hz` (0, an unknown clock, counts as the identification
    /// clock).
    pub const fn for_clock(clock_hz: u32) -> Self {
        let hz = if clock_hz == 0 {
            IDENTIFICATION_HZ as u64
        } else {
            clock_hz as u64
        };
        WriteGap {
            micros: (2_000_000u64).div_ceil(hz) + 1,
            spins: (2 * CPU_HZ).div_ceil(hz * INSTRUCTIONS_PER_SPIN),
        }
    }

    /// The longer of two gaps.
    const fn max(self, other: Self) -> Self {
        WriteGap {
            micros: if self.micros > other.micros {
                self.micros
            } else {
                other.micros
            },
            spins: if self.spins > other.spins {
                self.spins
            } else {
                other.spins
            },
        }
    }
}

/// How a command's response is checked and how long it is (CMDTM bits 16-21).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response {
    /// No response.
    None,
    /// 136-bit response (R2: CID, CSD), CRC checked.
    Long,
    /// 48-bit response with CRC and index checks (R1, R6, R7).
    Short,
    /// 48-bit response with busy signalling (R1b).
    ShortBusy,
    /// 48-bit response without CRC or index (R3: OCR).
    ShortUnchecked,
}

/// The CMDTM word for command `index`; `read_blocks` is the number of blocks to read with it
/// (0 for a command without data).
pub const fn command_word(index: u32, response: Response, read_blocks: u32) -> u32 {
    const RESPONSE_136: u32 = 0b01 << 16;
    const RESPONSE_48: u32 = 0b10 << 16;
    const RESPONSE_48_BUSY: u32 = 0b11 << 16;
    const CRC_CHECK: u32 = 1 << 19;
    const INDEX_CHECK: u32 = 1 << 20;
    const HAS_DATA: u32 = 1 << 21;
    const BLOCK_COUNT_ENABLE: u32 = 1 << 1;
    const AUTO_CMD12: u32 = 0b01 << 2;
    const CARD_TO_HOST: u32 = 1 << 4;
    const MULTI_BLOCK: u32 = 1 << 5;
    let mut word = (index & 0x3F) << 24;
    word |= match response {
        Response::None => 0,
        Response::Long => RESPONSE_136 | CRC_CHECK,
        Response::Short => RESPONSE_48 | CRC_CHECK | INDEX_CHECK,
        Response::ShortBusy => RESPONSE_48_BUSY | CRC_CHECK | INDEX_CHECK,
        Response::ShortUnchecked => RESPONSE_48,
    };
    if read_blocks > 0 {
        word |= HAS_DATA | CARD_TO_HOST;
    }
    if read_blocks > 1 {
        word |= BLOCK_COUNT_ENABLE | MULTI_BLOCK | AUTO_CMD12;
    }
    word
}

/// CMDTM's CMD_TYPE field value for an abort command (bits 23:22 = 3).
const COMMAND_TYPE_ABORT: u32 = 0b11 << 22;

/// The CMDTM word for CMD12 (STOP_TRANSMISSION) sent to end a transfer: R1b, and the abort
/// command type, which also resets the controller's data path once the command completes
/// (SDHCI 2.2.6).
pub const fn stop_command_word() -> u32 {
    command_word(12, Response::ShortBusy, 0) | COMMAND_TYPE_ABORT
}

/// Whether CMDTM `word` asks for a response with busy (R1b).
const fn has_busy(word: u32) -> bool {
    (word >> 16) & 0b11 == 0b11
}

/// The CMDTM word for write command `index` (CMD24 or CMD25) moving `blocks` blocks from host
/// to card: R1 checked, data, and for more than one block the block count, multi-block and
/// auto-CMD12 (which ends the write once the last block is in).
pub const fn write_command_word(index: u32, blocks: u32) -> u32 {
    // The read word with the direction bit (CARD_TO_HOST, bit 4) cleared.
    command_word(index, Response::Short, blocks) & !(1 << 4)
}

/// R1 card status bits that mean a command or write failed (SD Physical Layer Specification
/// 4.10.1, type E and X error bits: OUT_OF_RANGE 31 down to ERROR 19, CSD_OVERWRITE 16,
/// WP_ERASE_SKIP 15).
pub const CARD_STATUS_ERRORS: u32 = 0xFFF9_8000;

/// The card's state in an R1 status (CURRENT_STATE, bits 12:9): 4 is `tran`, the state a
/// data command starts from and a finished write returns to.
pub const fn card_state(status: u32) -> u32 {
    (status >> 9) & 0xF
}

/// Whether an R1 status says the card is idle in the transfer state and ready for data
/// (READY_FOR_DATA, bit 8): a write before it has been programmed.
pub const fn card_ready_for_data(status: u32) -> bool {
    card_state(status) == 4 && status & (1 << 8) != 0
}

/// The blocks of the card that may be written: one contiguous window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteWindow {
    /// The window's first block.
    pub first_block: u64,
    /// Blocks in the window.
    pub blocks: u64,
}

impl WriteWindow {
    /// Whether the `blocks` blocks from `first_block` lie inside the window (none do when
    /// `blocks` is 0 or the end overflows).
    pub fn contains(&self, first_block: u64, blocks: u64) -> bool {
        let Some(end) = first_block.checked_add(blocks) else {
            return false;
        };
        let Some(window_end) = self.first_block.checked_add(self.blocks) else {
            return false;
        };
        blocks > 0 && first_block >= self.first_block && end <= window_end
    }
}

/// The windows writes may go to: at most [`MAX_WRITE_WINDOWS`], none overlapping another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteWindows {
    windows: [Option<WriteWindow>; MAX_WRITE_WINDOWS],
}

/// The most windows a card has: the certificate store's and the site slots'.
pub const MAX_WRITE_WINDOWS: usize = 2;

impl WriteWindows {
    /// Adds `window`; `false` (and nothing changes) when it is empty, overlaps one already
    /// allowed, or every place is taken.
    pub fn add(&mut self, window: WriteWindow) -> bool {
        let Some(end) = window.first_block.checked_add(window.blocks) else {
            return false;
        };
        let overlaps = self.iter().any(|other| {
            other
                .first_block
                .checked_add(other.blocks)
                .is_none_or(|other_end| window.first_block < other_end && other.first_block < end)
        });
        if window.blocks == 0 || overlaps {
            return false;
        }
        match self.windows.iter_mut().find(|place| place.is_none()) {
            Some(place) => {
                *place = Some(window);
                true
            }
            None => false,
        }
    }

    /// Whether the `blocks` blocks from `first_block` lie wholly inside one window.
    pub fn contains(&self, first_block: u64, blocks: u64) -> bool {
        self.iter()
            .any(|window| window.contains(first_block, blocks))
    }

    /// The windows allowed, in the order they were.
    pub fn iter(&self) -> impl Iterator<Item = WriteWindow> + '_ {
        self.windows.iter().flatten().copied()
    }

    /// Whether no window is allowed (nothing may be written).
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

impl core::fmt::Display for WriteWindows {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.is_empty() {
            return f.write_str("none (nothing may be written)");
        }
        for (index, window) in self.iter().enumerate() {
            if index > 0 {
                f.write_str(" and ")?;
            }
            write!(
                f,
                "{} blocks from block {}",
                window.blocks, window.first_block
            )?;
        }
        Ok(())
    }
}

/// What the write path has done since boot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteCounters {
    /// Write commands that completed (CMD24 or CMD25 each).
    pub commands: u32,
    /// Blocks written by them.
    pub blocks: u64,
    /// Writes refused before reaching the card: outside the window, or no window.
    pub refused: u32,
    /// Writes the card failed or reported an error for.
    pub failed: u32,
}

impl WriteCounters {
    /// Bytes written.
    pub fn bytes(&self) -> u64 {
        self.blocks.saturating_mul(BLOCK_SIZE as u64)
    }
}

/// The SDHCI clock divider field for a card clock of at most `target_hz` from `base_hz`
/// (SDHCI 3.0 10-bit divided clock mode: f = base / (2 * divider), divider 0 = base).
pub const fn clock_divider_bits(base_hz: u32, target_hz: u32) -> u32 {
    let divider = if target_hz >= base_hz {
        0
    } else {
        base_hz.div_ceil(2 * target_hz)
    };
    let divider = if divider > 0x3FF { 0x3FF } else { divider };
    ((divider & 0xFF) << 8) | ((divider >> 8) << 6)
}

/// The card's capacity in 512-byte blocks, from its CSD register as the controller reports an
/// R2 response (RESP0..RESP3 hold CSD bits 8..135; the CRC byte is stripped).
pub fn csd_block_count(response: [u32; 4]) -> Option<u64> {
    // Rebuild CSD bits [127:8] as a 128-bit number shifted down by 8.
    let csd = (response[0] as u128)
        | ((response[1] as u128) << 32)
        | ((response[2] as u128) << 64)
        | ((response[3] as u128) << 96);
    let bits = |high: u32, low: u32| -> u64 {
        let width = high - low + 1;
        ((csd >> (low - 8)) & ((1u128 << width) - 1)) as u64
    };
    match bits(127, 126) {
        // CSD version 1.0 (SDSC): capacity = (C_SIZE + 1) * 2^(C_SIZE_MULT + 2) * 2^READ_BL_LEN.
        0 => {
            let c_size = bits(73, 62);
            let multiplier = bits(49, 47);
            let block_length = bits(83, 80);
            let bytes = (c_size + 1) << (multiplier + 2 + block_length);
            Some(bytes / BLOCK_SIZE as u64)
        }
        // CSD version 2.0 (SDHC/SDXC): capacity = (C_SIZE + 1) * 512 KiB.
        1 => Some((bits(69, 48) + 1) * 1024),
        _ => None,
    }
}

/// Bits `high..=low` of a CSD register as the controller reports an R2 response (RESP0..RESP3
/// hold CSD bits 8..135; the CRC byte is stripped).
fn csd_bits(response: [u32; 4], high: u32, low: u32) -> u64 {
    let csd = (response[0] as u128)
        | ((response[1] as u128) << 32)
        | ((response[2] as u128) << 64)
        | ((response[3] as u128) << 96);
    let width = high - low + 1;
    ((csd >> (low - 8)) & ((1u128 << width) - 1)) as u64
}

/// The fastest default-speed clock the card allows, from its CSD's TRAN_SPEED (bits
/// 103:96; SD Physical Layer Specification 5.3.2: rate unit times time value), in Hz.
pub fn csd_max_clock_hz(response: [u32; 4]) -> u32 {
    let speed = csd_bits(response, 103, 96) as u32;
    // Time values in tenths (table 5-6); 0 is reserved.
    const TENTHS: [u32; 16] = [
        0, 10, 12, 13, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 70, 80,
    ];
    let unit_hz: u32 = match speed & 0x7 {
        0 => 100_000,
        1 => 1_000_000,
        2 => 10_000_000,
        3 => 100_000_000,
        _ => 0, // reserved units
    };
    (unit_hz / 10).saturating_mul(TENTHS[((speed >> 3) & 0xF) as usize])
}

/// Whether the card supports CMD6 (command class 10 in the CSD's CCC field, bits 95:84).
pub fn csd_supports_switch(response: [u32; 4]) -> bool {
    csd_bits(response, 95, 84) & (1 << 10) != 0
}

/// What the card's SCR register says (SD Physical Layer Specification 5.6): its physical
/// layer version and whether it has a 4-bit bus. `scr` is the register as read, most
/// significant byte first.
pub fn scr_facts(scr: [u8; 8]) -> (u8, bool) {
    let spec_version = scr[0] & 0x0F;
    let four_bit = scr[1] & 0x04 != 0;
    (spec_version, four_bit)
}

/// From a 64-byte CMD6 status (most significant byte first, SD Physical Layer Specification
/// 4.3.10.4): whether function group 1 (access mode) supports function 1 (High Speed),
/// bit 401.
pub fn switch_supports_high_speed(status: &[u8; 64]) -> bool {
    status[13] & 0x02 != 0
}

/// From a 64-byte CMD6 status after a switch: whether group 1 now runs function 1 (bits
/// 379:376).
pub fn switch_selected_high_speed(status: &[u8; 64]) -> bool {
    status[16] & 0x0F == 1
}

/// Why the card could not be used, with the step that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmmcError {
    /// The controller did not finish its reset or its clock did not stabilise.
    Controller,
    /// Command `index` got no answer: for CMD0/CMD8/ACMD41 this usually means no card.
    CommandTimeout(u32),
    /// Command `index` failed with these INTERRUPT error bits.
    Command(u32, u32),
    /// The data of command `index` (a register read at initialisation) did not arrive.
    Data(u32),
    /// The card stayed busy through ACMD41 for a whole second.
    CardNeverReady,
    /// The CSD register has a version this driver does not know.
    UnknownCsd,
}

impl From<EmmcError> for BlockError {
    fn from(error: EmmcError) -> Self {
        match error {
            EmmcError::CommandTimeout(_) | EmmcError::CardNeverReady => BlockError::Timeout,
            _ => BlockError::Transfer,
        }
    }
}

/// Facts about an initialised card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardInfo {
    /// Block-addressed (SDHC/SDXC) rather than byte-addressed (SDSC).
    pub high_capacity: bool,
    /// Capacity in 512-byte blocks.
    pub blocks: u64,
    /// Relative card address.
    pub rca: u32,
    /// Data bus width in bits (1 or 4).
    pub bus_width: u8,
    /// The card runs in High Speed mode (switched with CMD6).
    pub high_speed: bool,
    /// The card clock now, in Hz (never above what the card allows).
    pub clock_hz: u32,
}

/// How a DMA read is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaReadPoll {
    /// No DMA read is in flight.
    Idle,
    /// Still reading.
    Busy,
    /// Ended: the blocks are in memory, or the read failed (the controller is ready for the
    /// next one either way).
    Done(Result<(), BlockError>),
}

/// A DMA read in flight.
#[derive(Clone, Copy, Debug)]
struct DmaRead {
    /// When to give up on it, in microseconds.
    deadline: u64,
}

/// Longest wait for a command's response or for the data lines to be free, in microseconds.
const COMMAND_MICROS: u64 = 500_000;
/// The same for the commands of a background read and for stopping a failed one: at the
/// transfer clock a card answers within 64 clocks (N_CR, SD spec 4.12.4), microseconds, so
/// this is ample, and it bounds what a card that stopped answering (or a controller that no
/// longer issues commands: QEMU's, once the card is ejected) costs the main loop.
const TRANSFER_COMMAND_MICROS: u64 = 2_000;
/// Fixed part of a data read's time limit, in microseconds; each block adds
/// [`BLOCK_MICROS`] (generous: a card reading at 1 MB/s needs 500 us per block).
const READ_MICROS: u64 = 250_000;
/// Time each block adds to a data read's limit, in microseconds.
const BLOCK_MICROS: u64 = 1_000;
/// Most blocks one command may read (BLKSIZECNT's block count is 16 bits).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 0xFFFF;
/// Longest a written block may keep the card busy programming, in microseconds (the SD
/// specification's write timeout is 250 ms for SDSC and 500 ms for SDHC/SDXC, 4.6.2.2); the
/// whole write gets this per block.
const PROGRAM_MICROS_PER_BLOCK: u64 = 500_000;

/// The EMMC controller with an initialised SD card.
pub struct Emmc<C: Fn() -> u64> {
    registers: RegisterBlock,
    now_micros: C,
    card: CardInfo,
    dma_read: Option<DmaRead>,
    write_windows: WriteWindows,
    writes: WriteCounters,
    /// When the last register write other than to DATA was made, in microseconds.
    last_write: u64,
    /// The least time between two such writes now.
    write_gap: WriteGap,
}

impl<C: Fn() -> u64> Emmc<C> {
    /// Resets the controller and initialises the card in the slot: 4-bit bus, High Speed
    /// where the card supports it. `base_clock_hz` is the EMMC clock from the mailbox;
    /// `now_micros` bounds every wait.
    ///
    /// # Safety
    /// Only one `Emmc` may exist, and GPIO48-53 must be routed to it (function ALT3).
    pub unsafe fn new(base_clock_hz: u32, now_micros: C) -> Result<Self, EmmcError> {
        if !spacing_on() {
            log::warn!("sd: register-write spacing is off in this image (patched for a test)");
        }
        let base_clock_hz = if base_clock_hz == 0 {
            log::warn!(
                "sd: the EMMC base clock is unknown; assuming {} MHz",
                FALLBACK_BASE_CLOCK_HZ / 1_000_000
            );
            FALLBACK_BASE_CLOCK_HZ
        } else {
            base_clock_hz
        };
        let mut emmc = Emmc {
            // SAFETY: memory_map::EMMC is the EMMC controller on every BCM2835.
            registers: unsafe { RegisterBlock::new(crate::memory_map::EMMC) },
            now_micros,
            card: CardInfo {
                high_capacity: false,
                blocks: 0,
                rca: 0,
                bus_width: 1,
                high_speed: false,
                clock_hz: 0,
            },
            dma_read: None,
            write_windows: WriteWindows::default(),
            writes: WriteCounters::default(),
            last_write: 0,
            write_gap: WriteGap::for_clock(0),
        };
        emmc.reset(base_clock_hz)?;
        emmc.identify(base_clock_hz)?;
        Ok(emmc)
    }

    /// What initialisation found.
    pub fn card(&self) -> CardInfo {
        self.card
    }

    /// Allows writes to `window` too: the board calls it at boot with the certificate
    /// store's region and the site slots' record and slots. A window past the card's end,
    /// one overlapping another, or a third is refused and leaves the others as they were.
    pub fn allow_writes(&mut self, window: WriteWindow) -> bool {
        let on_card = window
            .first_block
            .checked_add(window.blocks)
            .is_some_and(|end| end <= self.card.blocks);
        on_card && self.write_windows.add(window)
    }

    /// The windows writes may go to.
    pub fn write_windows(&self) -> WriteWindows {
        self.write_windows
    }

    /// What the write path has done since boot.
    pub fn write_counters(&self) -> WriteCounters {
        self.writes
    }

    fn now(&self) -> u64 {
        (self.now_micros)()
    }

    /// Waits up to `micros` for `done()`.
    fn wait(&self, micros: u64, done: impl Fn(&Self) -> bool) -> bool {
        let deadline = self.now() + micros;
        loop {
            if done(self) {
                return true;
            }
            if self.now() > deadline {
                return false;
            }
        }
    }

    /// Writes `value` to register `offset` (anything but DATA) once two card clocks have
    /// passed since the previous such write (see the module notes), and notes when.
    fn write_register<R>(&mut self, offset: Offset<R>, value: Value<R>) {
        let gap = if !spacing_on() {
            WriteGap {
                micros: 0,
                spins: 0,
            }
        } else {
            self.write_gap
        };
        let mut spins: u64 = 0;
        loop {
            // The timer is read on every pass, so a pass is never shorter than a timer read.
            let elapsed = self.now().saturating_sub(self.last_write);
            if elapsed >= gap.micros && spins >= gap.spins {
                break;
            }
            spins += 1;
        }
        self.registers.at(offset).write_value(value);
        self.last_write = self.now();
    }

    /// Writes the named fields of register `offset` (every other bit 0), spaced.
    fn set<R>(&mut self, offset: Offset<R>, fields: FieldValue<R>) {
        self.write_register(offset, Value::of(fields));
    }

    /// Reads register `offset`, replaces the named fields and writes it back, spaced.
    fn change<R>(&mut self, offset: Offset<R>, fields: FieldValue<R>) {
        let value = self.registers.at(offset).read().with(fields);
        self.write_register(offset, value);
    }

    fn reset(&mut self, base_clock_hz: u32) -> Result<(), EmmcError> {
        self.set(CONTROL0, Control0::FOUR_BIT.clear());
        self.set(CONTROL1, Control1::RESET_HOST.set());
        if !self.wait(100_000, |e| {
            !e.registers.at(CONTROL1).read().is_set(Control1::RESET_HOST)
        }) {
            return Err(EmmcError::Controller);
        }
        self.set_clock(base_clock_hz, IDENTIFICATION_HZ)?;
        // Every status bit visible in INTERRUPT, none routed to the ARM interrupt line.
        self.set(IRPT_EN, Word::ALL.val(0));
        self.set(IRPT_MASK, Word::ALL.set());
        self.set(INTERRUPT, Interrupt::ALL.set());
        Ok(())
    }

    fn set_clock(&mut self, base_clock_hz: u32, target_hz: u32) -> Result<(), EmmcError> {
        let new_hz = clock_hz(base_clock_hz, target_hz);
        // While the divider changes, writes are spaced for the slower of the two clocks.
        self.write_gap = WriteGap::for_clock(self.card.clock_hz).max(WriteGap::for_clock(new_hz));
        self.change(CONTROL1, Control1::CLOCK_CARD.clear());
        let divider = clock_divider_bits(base_clock_hz, target_hz) >> 6;
        let value = Control1::CLOCK_INTERNAL.set()
            + Control1::DATA_TIMEOUT.val(0xE)
            + Control1::DIVIDER.val(divider);
        self.set(CONTROL1, value);
        if !self.wait(100_000, |e| {
            e.registers
                .at(CONTROL1)
                .read()
                .is_set(Control1::CLOCK_STABLE)
        }) {
            return Err(EmmcError::Controller);
        }
        self.set(CONTROL1, value + Control1::CLOCK_CARD.set());
        self.card.clock_hz = new_hz;
        self.write_gap = WriteGap::for_clock(new_hz);
        Ok(())
    }

    /// Sends one command and waits for its response; returns RESP0.
    fn command(&mut self, index: u32, argument: u32, response: Response) -> Result<u32, EmmcError> {
        self.send(
            index,
            argument,
            command_word(index, response, 0),
            COMMAND_MICROS,
        )
    }

    /// Sends one command and waits up to `limit` microseconds for the command line to be
    /// free, and as long again for the response.
    fn send(&mut self, index: u32, argument: u32, word: u32, limit: u64) -> Result<u32, EmmcError> {
        let r = self.registers;
        if !self.wait(limit, |e| {
            !e.registers
                .at(STATUS)
                .read()
                .is_set(Status::COMMAND_INHIBIT)
        }) {
            return Err(EmmcError::CommandTimeout(index));
        }
        self.set(INTERRUPT, Interrupt::ALL.set());
        self.set(ARG1, Word::ALL.val(argument));
        self.set(CMDTM, Word::ALL.val(word));
        let finished = self.wait(limit, |e| {
            let status = e.registers.at(INTERRUPT).read();
            status.is_set(Interrupt::COMMAND_DONE) || status.is_set(Interrupt::ERRORS)
        });
        let status = r.at(INTERRUPT).read();
        if !finished || status.is_set(Interrupt::COMMAND_TIMEOUT) {
            self.recover_lines();
            return Err(EmmcError::CommandTimeout(index));
        }
        if status.is_set(Interrupt::ERRORS) {
            self.recover_lines();
            return Err(EmmcError::Command(
                index,
                status.bits() & Interrupt::ERRORS.mask(),
            ));
        }
        let response = r.register(RESP0).read();
        if has_busy(word) {
            // R1b: the card signals busy on DAT0 until it is done; the controller holds
            // DAT_INHIBIT until then and raises DATA_DONE at the end.
            let free = self.wait(limit, |e| {
                let status = e.registers.at(INTERRUPT).read();
                status.is_set(Interrupt::DATA_DONE)
                    || status.is_set(Interrupt::ERRORS)
                    || !e.registers.at(STATUS).read().is_set(Status::DATA_INHIBIT)
            });
            let status = r.at(INTERRUPT).read();
            if !free || status.is_set(Interrupt::ERRORS) {
                self.recover_lines();
                return Err(EmmcError::Command(
                    index,
                    status.bits() & Interrupt::ERRORS.mask(),
                ));
            }
            self.set(
                INTERRUPT,
                Interrupt::COMMAND_DONE.set() + Interrupt::DATA_DONE.set(),
            );
        } else {
            self.set(INTERRUPT, Interrupt::COMMAND_DONE.set());
        }
        Ok(response)
    }

    /// After a failed command or transfer: reset the command circuit, then the data circuit,
    /// one at a time as Linux's SDHCI driver does after a request error (QEMU's controller
    /// model acts on only one of the two bits per write, and left the data lines busy: the
    /// next read then waited out its whole time limit for them).
    fn recover_lines(&mut self) {
        for reset in [Control1::RESET_COMMAND, Control1::RESET_DATA] {
            self.change(CONTROL1, reset.set());
            self.wait(100_000, |e| !e.registers.at(CONTROL1).read().is_set(reset));
        }
        self.set(INTERRUPT, Interrupt::ALL.set());
    }

    /// After a read or write that went wrong mid-way: reset the lines and tell the card to
    /// stop (CMD12, STOP_TRANSMISSION; an error just means it had stopped already).
    fn abandon_transfer(&mut self) {
        self.recover_lines();
        let _ = self.send(12, 0, stop_command_word(), TRANSFER_COMMAND_MICROS);
        self.recover_lines();
    }

    fn application_command(
        &mut self,
        index: u32,
        argument: u32,
        response: Response,
    ) -> Result<u32, EmmcError> {
        self.command(55, self.card.rca << 16, Response::Short)?;
        self.command(index, argument, response)
    }

    /// Reads the `out.len()` bytes (8 or 64) of a register-like data block that command
    /// `index` (an application command when `application`) sends, by programmed I/O.
    fn read_small(
        &mut self,
        index: u32,
        argument: u32,
        application: bool,
        out: &mut [u8],
    ) -> Result<(), EmmcError> {
        let r = self.registers;
        self.set(
            BLKSIZECNT,
            BlockSizeCount::SIZE.val(out.len() as u32) + BlockSizeCount::COUNT.val(1),
        );
        if application {
            self.command(55, self.card.rca << 16, Response::Short)?;
        }
        self.send(
            index,
            argument,
            command_word(index, Response::Short, 1),
            COMMAND_MICROS,
        )?;
        let ready = self.wait(COMMAND_MICROS, |e| {
            let status = e.registers.at(INTERRUPT).read();
            status.is_set(Interrupt::READ_READY) || status.is_set(Interrupt::ERRORS)
        });
        if !ready || r.at(INTERRUPT).read().is_set(Interrupt::ERRORS) {
            self.recover_lines();
            return Err(EmmcError::Data(index));
        }
        self.set(INTERRUPT, Interrupt::READ_READY.set());
        for word in out.chunks_exact_mut(4) {
            word.copy_from_slice(&r.at(DATA).read().bits().to_le_bytes());
        }
        let done = self.wait(COMMAND_MICROS, |e| {
            let status = e.registers.at(INTERRUPT).read();
            status.is_set(Interrupt::DATA_DONE) || status.is_set(Interrupt::ERRORS)
        });
        let failed = r.at(INTERRUPT).read().is_set(Interrupt::ERRORS);
        self.set(INTERRUPT, Interrupt::ALL.set());
        if !done || failed {
            self.recover_lines();
            return Err(EmmcError::Data(index));
        }
        Ok(())
    }

    fn identify(&mut self, base_clock_hz: u32) -> Result<(), EmmcError> {
        self.command(0, 0, Response::None)?; // GO_IDLE_STATE
        // SEND_IF_COND: 2.7-3.6 V, check pattern 0xAA. Version 1 cards do not answer.
        let version_2 = match self.command(8, 0x1AA, Response::Short) {
            Ok(echo) => echo & 0xFFF == 0x1AA,
            Err(EmmcError::CommandTimeout(_)) => false,
            Err(error) => return Err(error),
        };
        // SD_SEND_OP_COND until the card leaves busy; HCS only for version 2 cards.
        let argument = 0x00FF_8000 | if version_2 { 1 << 30 } else { 0 };
        let deadline = self.now() + 1_000_000;
        let ocr = loop {
            let ocr = self.application_command(41, argument, Response::ShortUnchecked)?;
            if ocr & (1 << 31) != 0 {
                break ocr;
            }
            if self.now() > deadline {
                return Err(EmmcError::CardNeverReady);
            }
        };
        self.card.high_capacity = ocr & (1 << 30) != 0;
        self.command(2, 0, Response::Long)?; // ALL_SEND_CID
        self.card.rca = self.command(3, 0, Response::Short)? >> 16; // SEND_RELATIVE_ADDR
        self.command(9, self.card.rca << 16, Response::Long)?; // SEND_CSD
        let csd = [
            self.registers.register(RESP0).read(),
            self.registers.register(RESP0 + 4).read(),
            self.registers.register(RESP0 + 8).read(),
            self.registers.register(RESP0 + 12).read(),
        ];
        self.card.blocks = csd_block_count(csd).ok_or(EmmcError::UnknownCsd)?;
        self.command(7, self.card.rca << 16, Response::ShortBusy)?; // SELECT_CARD
        if !self.card.high_capacity {
            self.command(16, BLOCK_SIZE as u32, Response::Short)?; // SET_BLOCKLEN
        }
        // The card's default-speed limit (25 MHz on every SD card since version 1.0).
        let default_hz = match csd_max_clock_hz(csd) {
            0 => 25_000_000,
            hz => hz.min(25_000_000),
        };
        // SEND_SCR: the bus widths and the physical layer version (for CMD6).
        let mut scr = [0u8; 8];
        let (spec_version, four_bit) = match self.read_small(51, 0, true, &mut scr) {
            Ok(()) => scr_facts(scr),
            // Every SD card has a 4-bit bus; without an SCR, assume no CMD6.
            Err(_) => (0, true),
        };
        if four_bit {
            // SET_BUS_WIDTH to 4 bits, then match it on the host side.
            self.application_command(6, 2, Response::Short)?;
            self.change(CONTROL0, Control0::FOUR_BIT.set());
            self.card.bus_width = 4;
        }
        self.set_clock(base_clock_hz, default_hz)?;
        if spec_version >= 1 && csd_supports_switch(csd) {
            self.switch_to_high_speed(base_clock_hz);
        }
        Ok(())
    }

    /// Asks the card for High Speed (CMD6 check, then switch) and raises the clock to
    /// 50 MHz if it agreed. Stays at the default speed otherwise. The controller's own
    /// high-speed timing bit is left off, as Linux does for this core
    /// (sdhci-iproc's bcm2835 data: SDHCI_QUIRK_NO_HISPD_BIT).
    fn switch_to_high_speed(&mut self, base_clock_hz: u32) {
        let mut status = [0u8; 64];
        // Mode 0 (check), group 1 function 1, every other group unchanged (0xF).
        if self.read_small(6, 0x00FF_FFF1, false, &mut status).is_err()
            || !switch_supports_high_speed(&status)
        {
            return;
        }
        if self.read_small(6, 0x80FF_FFF1, false, &mut status).is_err()
            || !switch_selected_high_speed(&status)
        {
            return;
        }
        // The card takes the new timing 8 clocks after the status block (spec 4.3.10.5).
        let until = self.now() + 10;
        while self.now() < until {}
        if self.set_clock(base_clock_hz, 50_000_000).is_ok() {
            self.card.high_speed = true;
        }
    }

    /// The card address of block `first_block` (byte addresses on SDSC cards), after checking
    /// the request.
    fn data_address(&self, first_block: u64, blocks: usize) -> Result<u32, BlockError> {
        if blocks == 0 || blocks > MAX_BLOCKS_PER_COMMAND as usize {
            return Err(BlockError::BadBuffer);
        }
        let end = first_block
            .checked_add(blocks as u64)
            .ok_or(BlockError::OutOfRange)?;
        if end > self.card.blocks {
            return Err(BlockError::OutOfRange);
        }
        let address = if self.card.high_capacity {
            first_block
        } else {
            first_block * BLOCK_SIZE as u64
        };
        u32::try_from(address).map_err(|_| BlockError::OutOfRange)
    }

    /// Sends the read command for `blocks` blocks at `address` (CMD17 for one, CMD18 with
    /// auto-CMD12 for more), once the data lines are free: waiting up to `limit`
    /// microseconds for them (then resetting them once), and as long for the response. A
    /// background read passes [`TRANSFER_COMMAND_MICROS`].
    fn start_read_command(
        &mut self,
        address: u32,
        blocks: usize,
        limit: u64,
    ) -> Result<(), BlockError> {
        let index = if blocks == 1 { 17 } else { 18 }; // READ_SINGLE_BLOCK / READ_MULTIPLE_BLOCK
        let word = command_word(index, Response::Short, blocks as u32);
        self.start_data_command(index, word, address, blocks, limit)?;
        Ok(())
    }

    /// Sends data command `index` (CMDTM `word`) for `blocks` blocks at `address` once the
    /// data lines are free (waiting up to `limit` microseconds for them, then resetting them
    /// once), and waits as long for its response; returns the R1 status.
    fn start_data_command(
        &mut self,
        index: u32,
        word: u32,
        address: u32,
        blocks: usize,
        limit: u64,
    ) -> Result<u32, BlockError> {
        let lines_free = |e: &Self| !e.registers.at(STATUS).read().is_set(Status::DATA_INHIBIT);
        if !self.wait(limit, lines_free) {
            self.recover_lines();
            if !lines_free(self) {
                return Err(BlockError::Timeout);
            }
        }
        self.set(
            BLKSIZECNT,
            BlockSizeCount::SIZE.val(BLOCK_SIZE as u32) + BlockSizeCount::COUNT.val(blocks as u32),
        );
        Ok(self.send(index, address, word, limit)?)
    }

    /// The card's status (CMD13, SEND_STATUS; reading it clears its error bits).
    fn card_status(&mut self) -> Result<u32, BlockError> {
        let word = command_word(13, Response::Short, 0);
        Ok(self.send(13, self.card.rca << 16, word, COMMAND_MICROS)?)
    }

    /// Asks for the card's status until it is in the transfer state and ready for data, for
    /// up to `micros` microseconds; returns that status.
    fn wait_until_ready(&mut self, micros: u64) -> Result<u32, BlockError> {
        let deadline = self.now().saturating_add(micros);
        loop {
            let status = self.card_status()?;
            if card_ready_for_data(status) {
                return Ok(status);
            }
            if self.now() > deadline {
                return Err(BlockError::Timeout);
            }
        }
    }

    /// Writes `data` (whole blocks) from `first_block` by programmed I/O, if the blocks lie
    /// inside the window [`Emmc::allow_writes`] set; counted in [`Emmc::write_counters`].
    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError> {
        if !data.len().is_multiple_of(BLOCK_SIZE) {
            return Err(BlockError::BadBuffer);
        }
        let blocks = data.len() / BLOCK_SIZE;
        if !self.write_windows.contains(first_block, blocks as u64) {
            self.writes.refused = self.writes.refused.saturating_add(1);
            log::error!(
                "sd: refused a write of {blocks} blocks at block {first_block}: outside the \
                 windows allowed ({})",
                self.write_windows
            );
            return Err(BlockError::ReadOnly);
        }
        let address = self.data_address(first_block, blocks)?;
        if self.dma_read.is_some() {
            return Err(BlockError::Busy);
        }
        match self.write_checked(address, data) {
            Ok(()) => {
                self.writes.commands = self.writes.commands.saturating_add(1);
                self.writes.blocks = self.writes.blocks.saturating_add(blocks as u64);
                Ok(())
            }
            Err(error) => {
                self.writes.failed = self.writes.failed.saturating_add(1);
                Err(error)
            }
        }
    }

    /// The write itself: the card ready (status read first, which also clears error bits
    /// earlier commands left), CMD24 or CMD25 with its R1 checked, each block into the data
    /// port when it has room, the end of the transfer, and the card's status until it has
    /// programmed the data, every error bit checked (on a multi-block write also in the
    /// auto-CMD12's response, where errors found during the data show).
    fn write_checked(&mut self, address: u32, data: &[u8]) -> Result<(), BlockError> {
        let blocks = data.len() / BLOCK_SIZE;
        let programming = PROGRAM_MICROS_PER_BLOCK.saturating_mul(blocks as u64);
        self.wait_until_ready(PROGRAM_MICROS_PER_BLOCK)?;
        let index = if blocks == 1 { 24 } else { 25 }; // WRITE_BLOCK / WRITE_MULTIPLE_BLOCK
        let word = write_command_word(index, blocks as u32);
        let accepted = self.start_data_command(index, word, address, blocks, COMMAND_MICROS)?;
        if accepted & CARD_STATUS_ERRORS != 0 {
            log::error!("sd: CMD{index} at {address:#x} refused, card status {accepted:#010x}");
            self.abandon_transfer();
            return Err(BlockError::WriteFailed);
        }
        let r = self.registers;
        for block in data.chunks_exact(BLOCK_SIZE) {
            self.await_data_port(Interrupt::WRITE_READY)?;
            for word in block.chunks_exact(4) {
                let value = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                r.at(DATA).write(Word::ALL.val(value));
            }
        }
        self.await_data_done(READ_MICROS.saturating_add(programming))?;
        let stop = if blocks > 1 {
            r.register(RESP0 + 12).read()
        } else {
            0
        };
        let after = self.wait_until_ready(programming)?;
        if (after | stop) & CARD_STATUS_ERRORS != 0 {
            log::error!(
                "sd: the write at {address:#x} failed: card status {after:#010x}, at the stop \
                 {stop:#010x}"
            );
            return Err(BlockError::WriteFailed);
        }
        Ok(())
    }

    /// Waits until the data port can take or give the next block (`ready`: READ_READY or
    /// WRITE_READY), then clears that bit. On an error bit, or after [`READ_MICROS`], abandons
    /// the transfer and says which.
    fn await_data_port(&mut self, ready: Field<Interrupt>) -> Result<(), BlockError> {
        let arrived = self.wait(READ_MICROS, |e| {
            let status = e.registers.at(INTERRUPT).read();
            status.is_set(ready) || status.is_set(Interrupt::ERRORS)
        });
        let status = self.registers.at(INTERRUPT).read();
        if !arrived || status.is_set(Interrupt::ERRORS) {
            self.abandon_transfer();
            return Err(if arrived {
                BlockError::Transfer
            } else {
                BlockError::Timeout
            });
        }
        self.set(INTERRUPT, ready.set());
        Ok(())
    }

    /// Waits up to `micros` for the end of a transfer, then clears every interrupt bit. On an
    /// error bit, or at the timeout, abandons the transfer and says which.
    fn await_data_done(&mut self, micros: u64) -> Result<(), BlockError> {
        let done = self.wait(micros, |e| {
            let status = e.registers.at(INTERRUPT).read();
            status.is_set(Interrupt::DATA_DONE) || status.is_set(Interrupt::ERRORS)
        });
        let status = self.registers.at(INTERRUPT).read();
        self.set(INTERRUPT, Interrupt::ALL.set());
        if !done || status.is_set(Interrupt::ERRORS) {
            self.abandon_transfer();
            return Err(if done {
                BlockError::Transfer
            } else {
                BlockError::Timeout
            });
        }
        Ok(())
    }

    /// Reads by programmed I/O: one command, then every block through the data port.
    fn read(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        if !buffer.len().is_multiple_of(BLOCK_SIZE) {
            return Err(BlockError::BadBuffer);
        }
        let blocks = buffer.len() / BLOCK_SIZE;
        let address = self.data_address(first_block, blocks)?;
        if self.dma_read.is_some() {
            return Err(BlockError::Busy);
        }
        self.start_read_command(address, blocks, COMMAND_MICROS)?;
        let r = self.registers;
        for block in buffer.chunks_exact_mut(BLOCK_SIZE) {
            self.await_data_port(Interrupt::READ_READY)?;
            for word in block.chunks_exact_mut(4) {
                word.copy_from_slice(&r.at(DATA).read().bits().to_le_bytes());
            }
        }
        self.await_data_done(READ_MICROS)?;
        Ok(())
    }

    /// Starts reading `blocks` blocks from `first_block` with one command, the data moved by
    /// `dma` into memory at bus address `destination`; [`Emmc::poll_dma_read`] says when it
    /// ended. The command is sent before the DMA starts (see the module notes).
    ///
    /// # Safety
    /// `destination .. destination + blocks * 512` must be RAM that nothing else reads or
    /// writes until `poll_dma_read` returns [`DmaReadPoll::Done`], with its cache lines
    /// cleaned and invalidated beforehand (and invalidated again before it is read).
    pub unsafe fn start_dma_read(
        &mut self,
        dma: &mut crate::dma_channel::DmaChannel,
        first_block: u64,
        blocks: u32,
        destination: u32,
    ) -> Result<(), BlockError> {
        if self.dma_read.is_some() {
            return Err(BlockError::Busy);
        }
        let address = self.data_address(first_block, blocks as usize)?;
        self.start_read_command(address, blocks as usize, TRANSFER_COMMAND_MICROS)?;
        // SAFETY: the caller guarantees the destination for the transfer's length; the source
        // is the EMMC data port, paced by its DREQ.
        unsafe {
            dma.start_from_peripheral(
                DATA_BUS_ADDRESS,
                crate::dma_channel::DREQ_EMMC,
                destination,
                blocks * BLOCK_SIZE as u32,
            );
        }
        let allowance = READ_MICROS + u64::from(blocks) * BLOCK_MICROS;
        self.dma_read = Some(DmaRead {
            deadline: self.now() + allowance,
        });
        Ok(())
    }

    /// Whether the DMA read started last ended (never waits). On an error or a timeout the
    /// DMA is stopped, the card told to stop sending and the controller made ready again.
    pub fn poll_dma_read(&mut self, dma: &mut crate::dma_channel::DmaChannel) -> DmaReadPoll {
        let Some(read) = self.dma_read else {
            return DmaReadPoll::Idle;
        };
        let status = self.registers.at(INTERRUPT).read();
        let transfer = dma.state();
        let failed = status.is_set(Interrupt::ERRORS)
            || matches!(transfer, crate::dma_channel::TransferState::Failed(_));
        let timed_out = self.now() > read.deadline;
        if !failed && !timed_out {
            if transfer != crate::dma_channel::TransferState::Done
                || !status.is_set(Interrupt::DATA_DONE)
            {
                return DmaReadPoll::Busy;
            }
            self.set(INTERRUPT, Interrupt::ALL.set());
            self.dma_read = None;
            return DmaReadPoll::Done(Ok(()));
        }
        dma.abort();
        self.abandon_transfer();
        self.dma_read = None;
        DmaReadPoll::Done(Err(if failed {
            BlockError::Transfer
        } else {
            BlockError::Timeout
        }))
    }
}

/// The clock [`clock_divider_bits`] makes from `base_hz` for `target_hz`.
fn clock_hz(base_hz: u32, target_hz: u32) -> u32 {
    let bits = clock_divider_bits(base_hz, target_hz);
    let divider = ((bits >> 8) & 0xFF) | (((bits >> 6) & 0x3) << 8);
    match divider {
        0 => base_hz,
        n => base_hz / (2 * n),
    }
}

/// Blocks one programmed-I/O read command moves (keeps each command's wait short).
const PIO_BLOCKS_PER_COMMAND: usize = 128;

impl<C: Fn() -> u64> BlockDevice for Emmc<C> {
    fn block_count(&self) -> u64 {
        self.card.blocks
    }

    /// Reads by programmed I/O with multi-block commands, retrying a failed chunk up to three
    /// times.
    fn read_blocks(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), BlockError> {
        if !buffer.len().is_multiple_of(BLOCK_SIZE) {
            return Err(BlockError::BadBuffer);
        }
        let mut block = first_block;
        for chunk in buffer.chunks_mut(PIO_BLOCKS_PER_COMMAND * BLOCK_SIZE) {
            let mut attempt = 0;
            loop {
                match self.read(block, chunk) {
                    Ok(()) => break,
                    Err(
                        error @ (BlockError::BadBuffer | BlockError::OutOfRange | BlockError::Busy),
                    ) => {
                        return Err(error);
                    }
                    Err(error) if attempt == 2 => return Err(error),
                    Err(error) => {
                        log::warn!("sd: read of block {block} failed ({error:?}), retrying");
                        attempt += 1;
                    }
                }
            }
            block += (chunk.len() / BLOCK_SIZE) as u64;
        }
        Ok(())
    }
}

impl<C: Fn() -> u64> BlockWrite for Emmc<C> {
    /// Writes by programmed I/O, one command per [`PIO_BLOCKS_PER_COMMAND`] blocks, only
    /// inside one window [`Emmc::allow_writes`] set (anything else is refused whole, before a
    /// block is sent). A failed command is not retried: the caller (the certificate store or
    /// the site publisher) decides, and its other copy is whole either way.
    fn write_blocks(&mut self, first_block: u64, data: &[u8]) -> Result<(), BlockError> {
        if !data.len().is_multiple_of(BLOCK_SIZE) {
            return Err(BlockError::BadBuffer);
        }
        let blocks = (data.len() / BLOCK_SIZE) as u64;
        if !self.write_windows.contains(first_block, blocks) {
            // The same refusal the per-command check makes, for the whole request at once.
            return self.write(first_block, data);
        }
        let mut block = first_block;
        for chunk in data.chunks(PIO_BLOCKS_PER_COMMAND * BLOCK_SIZE) {
            self.write(block, chunk)?;
            block += (chunk.len() / BLOCK_SIZE) as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_command_words_send_data_host_to_card() {
        // CMD24: R1, CRC + index checks, data, no direction bit.
        assert_eq!(write_command_word(24, 1), 0x183A_0000);
        // CMD25 adds block count, auto CMD12 and multi-block.
        assert_eq!(write_command_word(25, 17), 0x193A_0026);
    }

    #[test]
    fn the_write_window_holds_only_runs_wholly_inside_it() {
        let window = WriteWindow {
            first_block: 1025,
            blocks: 64,
        };
        assert!(window.contains(1025, 64));
        assert!(window.contains(1025, 1));
        assert!(window.contains(1088, 1));
        assert!(!window.contains(1088, 2), "one block past the end");
        assert!(!window.contains(1024, 1), "the block before");
        assert!(!window.contains(1024, 2), "straddling the start");
        assert!(!window.contains(1030, 0), "nothing");
        assert!(!window.contains(u64::MAX, 2), "an end that overflows");
        assert!(!window.contains(0, u64::MAX));
        let at_the_top = WriteWindow {
            first_block: u64::MAX - 1,
            blocks: 4,
        };
        assert!(
            !at_the_top.contains(u64::MAX - 1, 1),
            "a window whose end overflows"
        );
    }

    #[test]
    fn two_windows_apart_and_never_a_third_or_an_overlap() {
        let mut windows = WriteWindows::default();
        assert!(windows.is_empty());
        assert!(!windows.contains(10, 1));
        let store = WriteWindow {
            first_block: 1025,
            blocks: 64,
        };
        let slots = WriteWindow {
            first_block: 4097,
            blocks: 8000,
        };
        assert!(windows.add(store));
        for overlapping in [
            WriteWindow {
                first_block: 1088,
                blocks: 10,
            },
            WriteWindow {
                first_block: 1000,
                blocks: 26,
            },
            WriteWindow {
                first_block: 0,
                blocks: u64::MAX,
            },
            WriteWindow {
                first_block: 2000,
                blocks: 0,
            },
            WriteWindow {
                first_block: u64::MAX,
                blocks: 2,
            },
        ] {
            assert!(!windows.add(overlapping), "{overlapping:?}");
        }
        assert!(windows.add(slots));
        assert!(!windows.add(WriteWindow {
            first_block: 100_000,
            blocks: 1
        }));
        assert!(windows.contains(1025, 64));
        assert!(windows.contains(4097, 8000));
        assert!(
            !windows.contains(1088, 3000),
            "a run across both is in neither"
        );
        assert!(!windows.contains(4096, 1), "the slots' label block");
        assert_eq!(
            std::format!("{windows}"),
            "64 blocks from block 1025 and 8000 blocks from block 4097"
        );
    }

    #[test]
    fn card_status_fields() {
        // tran, READY_FOR_DATA: ready.
        assert!(card_ready_for_data((4 << 9) | (1 << 8)));
        // prg (7) or rcv (6): still busy with the last write.
        assert!(!card_ready_for_data((7 << 9) | (1 << 8)));
        assert!(!card_ready_for_data(6 << 9));
        assert!(!card_ready_for_data(4 << 9));
        // WP_VIOLATION and ADDRESS_ERROR are errors; APP_CMD (5) and the state are not.
        assert_ne!((1 << 26) & CARD_STATUS_ERRORS, 0);
        assert_ne!((1 << 30) & CARD_STATUS_ERRORS, 0);
        assert_eq!(((4 << 9) | (1 << 8) | (1 << 5)) & CARD_STATUS_ERRORS, 0);
    }

    #[test]
    fn command_words_match_the_datasheet_layout() {
        // CMD17 with R1 and one block: index 17, 48-bit response, CRC + index checks, data,
        // card to host.
        assert_eq!(command_word(17, Response::Short, 1), 0x113A_0010);
        // CMD18 adds block count, auto CMD12 and multi-block.
        assert_eq!(command_word(18, Response::Short, 8), 0x123A_0036);
        assert_eq!(command_word(0, Response::None, 0), 0);
        assert_eq!(command_word(2, Response::Long, 0), 0x0209_0000);
        assert_eq!(command_word(7, Response::ShortBusy, 0), 0x071B_0000);
        assert_eq!(command_word(41, Response::ShortUnchecked, 0), 0x2902_0000);
    }

    #[test]
    fn clock_divider_never_exceeds_the_target() {
        // 50 MHz (QEMU's EMMC clock) to 400 kHz: divider 63 -> 396.8 kHz.
        assert_eq!(clock_divider_bits(50_000_000, 400_000), 63 << 8);
        // 250 MHz (a real Pi's EMMC clock) to 400 kHz: divider 313 = 0x139.
        assert_eq!(
            clock_divider_bits(250_000_000, 400_000),
            (0x39 << 8) | (0x1 << 6)
        );
        assert_eq!(clock_divider_bits(50_000_000, 25_000_000), 1 << 8);
        assert_eq!(clock_divider_bits(25_000_000, 25_000_000), 0);
    }

    /// Places `value` (of `width` bits) at CSD bit position `low` in an R2 response.
    fn set_bits(response: &mut [u32; 4], low: u32, width: u32, value: u64) {
        for bit in 0..width {
            if value >> bit & 1 == 1 {
                let position = low + bit - 8;
                response[(position / 32) as usize] |= 1 << (position % 32);
            }
        }
    }

    #[test]
    fn csd_version_2_capacity() {
        let mut response = [0u32; 4];
        set_bits(&mut response, 126, 2, 1);
        set_bits(&mut response, 48, 22, 15_159); // a "8 GB" SDHC card
        assert_eq!(csd_block_count(response), Some(15_160 * 1024));
    }

    #[test]
    fn csd_version_1_capacity() {
        let mut response = [0u32; 4];
        // The largest SDSC card: (4095 + 1) * 2^(7 + 2) * 2^9 bytes = 1 GiB.
        set_bits(&mut response, 62, 12, 4095);
        set_bits(&mut response, 47, 3, 7);
        set_bits(&mut response, 80, 4, 9);
        assert_eq!(csd_block_count(response), Some((1 << 30) / 512));
        set_bits(&mut response, 126, 2, 3);
        assert_eq!(csd_block_count(response), None);
    }

    #[test]
    fn transfer_speed_and_command_classes_from_the_csd() {
        let mut response = [0u32; 4];
        set_bits(&mut response, 96, 8, 0x32); // every SD card: 25 MHz
        assert_eq!(csd_max_clock_hz(response), 25_000_000);
        let mut response = [0u32; 4];
        set_bits(&mut response, 96, 8, 0x5A); // after a switch to High Speed: 50 MHz
        assert_eq!(csd_max_clock_hz(response), 50_000_000);
        let mut response = [0u32; 4];
        set_bits(&mut response, 96, 8, 0x07); // reserved unit
        assert_eq!(csd_max_clock_hz(response), 0);
        assert!(!csd_supports_switch(response));
        set_bits(&mut response, 84, 12, 0x5B5); // classes 0, 2, 4, 5, 7, 8, 10
        assert!(csd_supports_switch(response));
    }

    #[test]
    fn scr_and_switch_status_fields() {
        // SD 3.0 card (SD_SPEC 2), 1- and 4-bit buses.
        assert_eq!(scr_facts([0x02, 0x35, 0x80, 0, 0, 0, 0, 0]), (2, true));
        assert_eq!(scr_facts([0x00, 0x01, 0, 0, 0, 0, 0, 0]), (0, false));
        let mut status = [0u8; 64];
        assert!(!switch_supports_high_speed(&status));
        status[13] = 0x03; // functions 0 and 1 of group 1
        assert!(switch_supports_high_speed(&status));
        assert!(!switch_selected_high_speed(&status));
        status[16] = 0x01;
        assert!(switch_selected_high_speed(&status));
        status[16] = 0x0F; // "no change possible"
        assert!(!switch_selected_high_speed(&status));
    }

    /// A recording model of the EMMC controller with an SDHC card behind it, on the mock bus
    /// ([`crate::mmio::mock`]). Time is the test's clock, which moves one microsecond each
    /// time the driver reads it. It notes every rule the driver breaks: a register write
    /// (other than DATA) within two card clocks of the previous one, a command sent while the
    /// card is busy after an R1b response, and a command sent at identification faster than
    /// 400 kHz.
    mod card_model {
        use crate::mmio::mock;
        use std::cell::{Cell, RefCell};
        use std::rc::Rc;
        use std::vec::Vec;

        /// How long the card stays busy after CMD7 or CMD12, in microseconds.
        pub const BUSY_MICROS: u64 = 40;

        #[derive(Default)]
        pub struct State {
            /// The controller's real base clock.
            pub base_hz: u32,
            pub control1: u32,
            pub interrupt: u32,
            pub argument: u32,
            pub response: [u32; 4],
            pub data: Vec<u32>,
            pub application: bool,
            pub busy_until: Option<u64>,
            /// The card clock the last CONTROL1 write set (0: none yet).
            pub clock_hz: u32,
            pub last_write: Option<u64>,
            /// Writes other than DATA checked for spacing.
            pub spaced_writes: u32,
            /// (offset, microseconds since the previous write, card clock) of each write
            /// made too soon.
            pub too_close: Vec<(usize, u64, u32)>,
            /// Commands sent while the card was busy.
            pub unwaited_busy: Vec<u32>,
            /// The card clock when each command was sent.
            pub command_clocks: Vec<(u32, u32)>,
            /// Every CMDTM word written.
            pub commands: Vec<u32>,
        }

        pub struct Model {
            pub state: Rc<RefCell<State>>,
            pub now: Rc<Cell<u64>>,
        }

        fn clock_of(base_hz: u32, control1: u32) -> u32 {
            let divider = ((control1 >> 8) & 0xFF) | (((control1 >> 6) & 0x3) << 8);
            match divider {
                0 => base_hz,
                n => base_hz / (2 * n),
            }
        }

        fn csd() -> [u32; 4] {
            let mut response = [0u32; 4];
            let mut set = |low: u32, width: u32, value: u64| {
                for bit in 0..width {
                    if value >> bit & 1 == 1 {
                        let position = low + bit - 8;
                        response[(position / 32) as usize] |= 1 << (position % 32);
                    }
                }
            };
            set(126, 2, 1); // version 2
            set(48, 22, 15_159);
            set(96, 8, 0x32); // 25 MHz
            set(84, 12, 0x5B5); // classes with 10 (switch)
            response
        }

        impl Model {
            fn command(&mut self, word: u32) {
                let now = self.now.get();
                let mut s = self.state.borrow_mut();
                s.commands.push(word);
                let index = word >> 24;
                let clock = s.clock_hz;
                s.command_clocks.push((index, clock));
                if s.busy_until.is_some_and(|until| now < until) {
                    s.unwaited_busy.push(index);
                }
                let application = core::mem::take(&mut s.application);
                let status = (4 << 9) | (1 << 8);
                let mut done = 1; // CMD_DONE
                match (index, application) {
                    (0, _) | (16, _) => {}
                    (8, _) => s.response[0] = s.argument & 0xFFF,
                    (55, _) => {
                        s.application = true;
                        s.response[0] = status | (1 << 5);
                    }
                    (41, true) => s.response[0] = 0x80FF_8000 | (1 << 30),
                    (2, _) => s.response = [1, 2, 3, 4],
                    (3, _) => s.response[0] = 0x1234 << 16,
                    (9, _) => s.response = csd(),
                    (7, _) | (12, _) => {
                        s.response[0] = status;
                        s.busy_until = Some(now + BUSY_MICROS);
                    }
                    (13, _) | (6, true) => s.response[0] = status,
                    (51, true) => {
                        s.response[0] = status;
                        let scr = [0x02u8, 0x35, 0x80, 0, 0, 0, 0, 0];
                        s.data = scr
                            .chunks(4)
                            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                            .collect();
                        done |= 1 << 5; // READ_READY
                    }
                    (6, false) => {
                        s.response[0] = status;
                        let mut block = [0u8; 64];
                        block[13] = 0x03;
                        block[16] = 0x01;
                        s.data = block
                            .chunks(4)
                            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                            .collect();
                        done |= 1 << 5;
                    }
                    (17, _) => {
                        s.response[0] = status;
                        s.data = std::vec![0; 128];
                        done |= 1 << 5;
                    }
                    _ => done = (1 << 16) | (1 << 15), // no response
                }
                s.interrupt |= done;
            }
        }

        impl mock::Bus for Model {
            fn read(&mut self, address: usize) -> u32 {
                let now = self.now.get();
                let mut s = self.state.borrow_mut();
                let busy = s.busy_until.is_some_and(|until| now < until);
                if s.busy_until.is_some() && !busy {
                    s.busy_until = None;
                    s.interrupt |= 1 << 1; // DATA_DONE: the busy ended
                }
                match address - crate::memory_map::EMMC {
                    0x10 => s.response[0],
                    0x14 => s.response[1],
                    0x18 => s.response[2],
                    0x1C => s.response[3],
                    0x20 => {
                        let word = if s.data.is_empty() {
                            0
                        } else {
                            s.data.remove(0)
                        };
                        if s.data.is_empty() {
                            s.interrupt |= 1 << 1;
                        }
                        word
                    }
                    0x24 => u32::from(busy) << 1, // DAT_INHIBIT
                    // Resets end at once; the clock is stable once on.
                    0x2C => (s.control1 & !(0x7 << 24)) | ((s.control1 & 1) << 1),
                    0x30 => s.interrupt,
                    _ => 0,
                }
            }

            fn write(&mut self, address: usize, value: u32) {
                let now = self.now.get();
                let offset = address - crate::memory_map::EMMC;
                {
                    let mut s = self.state.borrow_mut();
                    if offset != 0x20 {
                        // Two clocks of the clock running since the previous write (the
                        // identification clock before any was set).
                        let clock = if s.clock_hz == 0 { 400_000 } else { s.clock_hz };
                        let needed = 2_000_000f64 / f64::from(clock);
                        if let Some(last) = s.last_write {
                            s.spaced_writes += 1;
                            if ((now - last) as f64) < needed {
                                s.too_close.push((offset, now - last, clock));
                            }
                        }
                        s.last_write = Some(now);
                    }
                    match offset {
                        0x08 => s.argument = value,
                        0x2C => {
                            s.control1 = value;
                            if value & 1 != 0 {
                                s.clock_hz = clock_of(s.base_hz, value);
                            }
                        }
                        0x30 => s.interrupt &= !value,
                        _ => {}
                    }
                }
                if offset == 0x0C {
                    self.command(value);
                }
            }
        }

        /// Installs a model with base clock `base_hz`; returns its state, the clock for the
        /// driver and the guard.
        pub fn install(base_hz: u32) -> (Rc<RefCell<State>>, impl Fn() -> u64, mock::Installed) {
            let state = Rc::new(RefCell::new(State {
                base_hz,
                ..State::default()
            }));
            let now = Rc::new(Cell::new(1_000));
            let clock = {
                let now = now.clone();
                move || {
                    now.set(now.get() + 1);
                    now.get()
                }
            };
            let guard = mock::install(Model {
                state: state.clone(),
                now,
            });
            (state, clock, guard)
        }
    }

    #[test]
    fn register_writes_are_two_card_clocks_apart() {
        let (state, clock, _bus) = card_model::install(250_000_000);
        // SAFETY: the registers are the model's.
        let emmc = unsafe { Emmc::new(250_000_000, clock) }.expect("the card initialises");
        assert_eq!(emmc.card().bus_width, 4);
        assert!(emmc.card().high_speed);
        let s = state.borrow();
        assert!(s.spaced_writes > 50, "{} writes", s.spaced_writes);
        assert!(
            s.too_close.is_empty(),
            "writes within two card clocks (offset, us, clock): {:?}",
            s.too_close
        );
    }

    #[test]
    fn the_gap_covers_two_clocks_by_timer_and_by_instructions() {
        // 400 kHz: 5 us, plus one for the timer's resolution; 3,500 cycles at 700 MHz.
        assert_eq!(
            WriteGap::for_clock(400_000),
            WriteGap {
                micros: 6,
                spins: 875
            }
        );
        assert_eq!(WriteGap::for_clock(0), WriteGap::for_clock(400_000));
        // 50 MHz: 40 ns, still one whole timer tick apart; 28 cycles.
        assert_eq!(
            WriteGap::for_clock(50_000_000),
            WriteGap {
                micros: 2,
                spins: 7
            }
        );
    }

    #[test]
    fn the_card_is_not_sent_a_command_while_busy_after_r1b() {
        let (state, clock, _bus) = card_model::install(250_000_000);
        // SAFETY: the registers are the model's.
        let mut emmc = unsafe { Emmc::new(250_000_000, clock) }.expect("the card initialises");
        assert!(
            state.borrow().commands.iter().any(|word| word >> 24 == 7),
            "CMD7 was sent"
        );
        // A failed transfer ends with CMD12, then the next command comes.
        emmc.abandon_transfer();
        emmc.card_status().expect("CMD13 after the stop");
        let s = state.borrow();
        assert!(
            s.unwaited_busy.is_empty(),
            "commands sent while the card was busy: {:?}",
            s.unwaited_busy
        );
        let stop = s
            .commands
            .iter()
            .find(|word| *word >> 24 == 12)
            .expect("CMD12 was sent");
        assert_eq!(*stop, stop_command_word());
        assert_eq!((stop >> 22) & 0b11, 0b11, "CMD12 is an abort command");
        assert!(s.too_close.is_empty(), "{:?}", s.too_close);
    }

    #[test]
    fn an_unknown_base_clock_keeps_identification_at_400_khz() {
        let (state, clock, _bus) = card_model::install(250_000_000);
        // SAFETY: the registers are the model's.
        let emmc = unsafe { Emmc::new(0, clock) }.expect("the card initialises");
        let s = state.borrow();
        let identification: std::vec::Vec<_> = s
            .command_clocks
            .iter()
            .take_while(|(index, _)| *index != 7)
            .collect();
        assert!(!identification.is_empty());
        for (index, hz) in identification {
            assert!(
                (1..=400_000).contains(hz),
                "CMD{index} sent at {hz} Hz during identification"
            );
        }
        assert!(emmc.card().clock_hz <= 50_000_000);
    }

    #[test]
    fn the_clock_reached_never_exceeds_the_target() {
        assert_eq!(clock_hz(50_000_000, 50_000_000), 50_000_000); // QEMU's base clock
        assert_eq!(clock_hz(50_000_000, 25_000_000), 25_000_000);
        assert_eq!(clock_hz(250_000_000, 50_000_000), 41_666_666); // a Pi at 250 MHz
        assert_eq!(clock_hz(200_000_000, 50_000_000), 50_000_000);
        assert!(clock_hz(250_000_000, 400_000) <= 400_000);
    }
}
