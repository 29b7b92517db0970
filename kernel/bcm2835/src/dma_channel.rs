//! One channel of the BCM2835 DMA controller (BCM2835 ARM Peripherals, ch. 4), moving a
//! peripheral's data register into memory paced by the peripheral's data request (DREQ) line.
//!
//! A transfer is described by a 32-byte control block in memory the controller reads
//! (BCM2835 ARM Peripherals §4.2.1.1); the block lives in the non-cacheable DMA region, so it
//! needs no cache maintenance. Destination memory is the caller's business: it must stay
//! untouched while the transfer runs and its cache lines must be cleaned before and
//! invalidated after (see the board's card reader).

use crate::mmio::{Field, Offset, RegisterBlock};

// Registers (§4.2.1.2) of one channel, from the channel's base.

/// CS: control and status.
const CS: Offset<Cs> = Offset::new(0x00);
/// CONBLK_AD: bus address of the control block to load.
const CONBLK_AD: Offset<crate::mmio::Word> = Offset::new(0x04);
/// TXFR_LEN: bytes left of the current transfer (loaded from the control block).
const TXFR_LEN: Offset<crate::mmio::Word> = Offset::new(0x14);
/// DEBUG: error flags.
const DEBUG: Offset<Debug> = Offset::new(0x20);

/// Offset of the global enable register (ENABLE, §4.2.1.3) from the controller's base.
const ENABLE: usize = 0xFF0;
/// Most reads of CS [`DmaChannel::abort`] waits through for outstanding writes.
pub const ABORT_WAIT_READS: u32 = 10_000;
/// Bytes between two channels' register blocks.
const CHANNEL_STRIDE: usize = 0x100;

/// CS fields.
enum Cs {}
impl Cs {
    /// ACTIVE: the channel runs (set to start, from the control block in CONBLK_AD).
    const ACTIVE: Field<Self> = Field::bit(0);
    /// END: the transfer completed (write 1 to clear).
    const END: Field<Self> = Field::bit(1);
    /// INT: the control block asked for an interrupt (write 1 to clear).
    const INTERRUPT: Field<Self> = Field::bit(2);
    /// WAITING_FOR_OUTSTANDING_WRITES: writes of the channel are still on their way.
    const WRITES_OUTSTANDING: Field<Self> = Field::bit(6);
    /// ERROR: the DEBUG register has an error flag set.
    const ERROR: Field<Self> = Field::bit(8);
    /// PRIORITY: AXI priority of normal transfers.
    const PRIORITY: Field<Self> = Field::bits(19, 16);
    /// PANIC_PRIORITY: AXI priority of panicking transfers.
    const PANIC_PRIORITY: Field<Self> = Field::bits(23, 20);
    /// WAIT_FOR_OUTSTANDING_WRITES: the channel ends only once its writes landed.
    const WAIT_FOR_WRITES: Field<Self> = Field::bit(28);
    /// ABORT: abandon the current control block.
    const ABORT: Field<Self> = Field::bit(30);
    /// RESET: reset the channel.
    const RESET: Field<Self> = Field::bit(31);
}

/// DEBUG fields (write 1 to clear the error flags).
enum Debug {}
impl Debug {
    /// READ_LAST_NOT_SET_ERROR, FIFO_ERROR, READ_ERROR.
    const ERRORS: Field<Self> = Field::bits(2, 0);
}

/// Transfer information word of a control block (TI, §4.2.1.2).
pub enum TransferInformation {}
impl TransferInformation {
    /// WAIT_RESP: wait for each write's response before the next.
    pub const WAIT_RESPONSE: Field<Self> = Field::bit(3);
    /// DEST_INC: the destination address increases after each write.
    pub const DESTINATION_INCREMENT: Field<Self> = Field::bit(4);
    /// SRC_DREQ: the peripheral's DREQ paces the reads.
    pub const SOURCE_DREQ: Field<Self> = Field::bit(10);
    /// PERMAP: the peripheral whose DREQ paces the transfer.
    pub const PERIPHERAL: Field<Self> = Field::bits(20, 16);
}

/// DREQ line of the EMMC controller (BCM2835 ARM Peripherals §4.2.1.3, table of DREQ
/// peripherals: 11 = EMMC).
pub const DREQ_EMMC: u32 = 11;

/// One DMA control block (§4.2.1.1): 32 bytes, 32-byte aligned, in memory the controller
/// reads by its bus address.
#[repr(C, align(32))]
#[derive(Debug, Default)]
pub struct ControlBlock {
    transfer_information: u32,
    source: u32,
    destination: u32,
    length: u32,
    stride: u32,
    next: u32,
    reserved: [u32; 2],
}

/// How a transfer is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferState {
    /// Still moving data.
    Running,
    /// Completed.
    Done,
    /// The controller reported an error (the DEBUG register's flags).
    Failed(u32),
}

/// One DMA channel with its control block.
pub struct DmaChannel {
    registers: RegisterBlock,
    control_block: &'static mut ControlBlock,
}

impl DmaChannel {
    /// Channel `channel` of the controller, enabled and reset, using `control_block`.
    ///
    /// # Safety
    /// Only one `DmaChannel` may exist per channel, the GPU firmware must not use that
    /// channel (on the Pi 1 the ARM may use channels 0, 2, 4, 5 and 8-14: the firmware's
    /// `dma-channel-mask` 0x7f35), and `control_block` must be in memory the DMA controller
    /// sees uncached (the `.dma` section).
    pub unsafe fn new(channel: usize, control_block: &'static mut ControlBlock) -> Self {
        let base = crate::memory_map::DMA + channel * CHANNEL_STRIDE;
        // SAFETY: the caller guarantees the channel is ours; its registers and the global
        // ENABLE register are in the DMA controller's block.
        let (registers, controller) = unsafe {
            (
                RegisterBlock::new(base),
                RegisterBlock::new(crate::memory_map::DMA),
            )
        };
        let enable = controller.register(ENABLE);
        enable.write(enable.read() | (1 << channel));
        registers.at(CS).write(Cs::RESET.set());
        registers.at(DEBUG).write(Debug::ERRORS.set());
        Self {
            registers,
            control_block,
        }
    }

    /// Starts moving `len` bytes from the peripheral register at bus address `source` (the
    /// same address every read) into memory from bus address `destination` on, paced by
    /// DREQ line `dreq`.
    ///
    /// # Safety
    /// `destination .. destination + len` must be memory nothing else uses until
    /// [`DmaChannel::state`] stops reporting [`TransferState::Running`] (or the transfer is
    /// aborted), with its cache lines cleaned and invalidated beforehand.
    pub unsafe fn start_from_peripheral(
        &mut self,
        source: u32,
        dreq: u32,
        destination: u32,
        len: u32,
    ) {
        let information = TransferInformation::WAIT_RESPONSE.set()
            + TransferInformation::DESTINATION_INCREMENT.set()
            + TransferInformation::SOURCE_DREQ.set()
            + TransferInformation::PERIPHERAL.val(dreq);
        let block = &mut *self.control_block;
        // SAFETY: plain writes to our own control block; volatile so that they are not
        // reordered past the register write below or elided.
        unsafe {
            core::ptr::write_volatile(&mut block.transfer_information, information.bits());
            core::ptr::write_volatile(&mut block.source, source);
            core::ptr::write_volatile(&mut block.destination, destination);
            core::ptr::write_volatile(&mut block.length, len);
            core::ptr::write_volatile(&mut block.stride, 0);
            core::ptr::write_volatile(&mut block.next, 0);
        }
        // The control block must be in memory before the controller is told to load it.
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
        let address = crate::bus_address(block as *const ControlBlock as usize);
        self.registers.at(DEBUG).write(Debug::ERRORS.set());
        self.registers
            .at(CS)
            .write(Cs::END.set() + Cs::INTERRUPT.set());
        self.registers
            .at(CONBLK_AD)
            .write(crate::mmio::Word::ALL.val(address));
        self.registers.at(CS).write(
            Cs::ACTIVE.set()
                + Cs::PRIORITY.val(8)
                + Cs::PANIC_PRIORITY.val(15)
                + Cs::WAIT_FOR_WRITES.set(),
        );
    }

    /// How the transfer started last is doing.
    pub fn state(&self) -> TransferState {
        let status = self.registers.at(CS).read();
        if status.is_set(Cs::ERROR) {
            return TransferState::Failed(self.registers.at(DEBUG).read().get(Debug::ERRORS));
        }
        if status.is_set(Cs::END) || !status.is_set(Cs::ACTIVE) {
            // Ended, or never started: nothing is moving.
            TransferState::Done
        } else {
            TransferState::Running
        }
    }

    /// Bytes the current transfer has left.
    pub fn remaining(&self) -> u32 {
        self.registers.at(TXFR_LEN).read().bits()
    }

    /// Stops the channel and resets it (after an error or a timeout): pauses it (ACTIVE
    /// cleared), waits for the writes it still has on the AXI bus to land, as Linux's
    /// bcm2835-dma does before an abort, so that none lands in memory after the caller took
    /// it back; then abandons the control block and resets the channel. The wait is bounded by
    /// [`ABORT_WAIT_READS`] reads of CS (Linux's bound).
    pub fn abort(&mut self) {
        self.registers.at(CS).write(Cs::ACTIVE.clear());
        for _ in 0..ABORT_WAIT_READS {
            if !self.registers.at(CS).read().is_set(Cs::WRITES_OUTSTANDING) {
                break;
            }
        }
        self.registers.at(CS).write(Cs::ABORT.set());
        self.registers.at(CS).write(Cs::RESET.set());
        self.registers.at(DEBUG).write(Debug::ERRORS.set());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_information_matches_the_datasheet_layout() {
        let information = TransferInformation::WAIT_RESPONSE.set()
            + TransferInformation::DESTINATION_INCREMENT.set()
            + TransferInformation::SOURCE_DREQ.set()
            + TransferInformation::PERIPHERAL.val(DREQ_EMMC);
        // WAIT_RESP (bit 3), DEST_INC (bit 4), SRC_DREQ (bit 10), PERMAP 11 (bits 20:16).
        assert_eq!(information.bits(), 0x000B_0418);
        assert_eq!(core::mem::size_of::<ControlBlock>(), 32);
        assert_eq!(core::mem::align_of::<ControlBlock>(), 32);
    }

    /// A channel whose writes stay outstanding for a few reads of CS after it is paused.
    struct Channel(std::rc::Rc<std::cell::RefCell<(u32, std::vec::Vec<u32>, bool)>>);

    impl crate::mmio::mock::Bus for Channel {
        fn read(&mut self, _address: usize) -> u32 {
            let mut state = self.0.borrow_mut();
            state.0 = state.0.saturating_sub(1);
            u32::from(state.0 > 0) << 6
        }
        fn write(&mut self, address: usize, value: u32) {
            let mut state = self.0.borrow_mut();
            if address & 0xFF == 0
                && value & (Cs::ABORT.mask() | Cs::RESET.mask()) != 0
                && state.0 > 0
            {
                state.2 = true; // aborted with writes in flight
            }
            state.1.push(value);
        }
    }

    #[test]
    fn an_abort_waits_for_outstanding_writes() {
        let state = std::rc::Rc::new(std::cell::RefCell::new((5, std::vec::Vec::new(), false)));
        let _bus = crate::mmio::mock::install(Channel(state.clone()));
        let mut channel = DmaChannel {
            // SAFETY: the registers are the mock's.
            registers: unsafe { RegisterBlock::new(crate::memory_map::DMA) },
            control_block: std::boxed::Box::leak(std::boxed::Box::default()),
        };
        channel.abort();
        let state = state.borrow();
        assert!(!state.2, "the channel was aborted with writes outstanding");
        assert_eq!(state.1[0], 0, "paused first");
        assert!(state.1.contains(&Cs::RESET.mask()));
    }
}
