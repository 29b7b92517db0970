//! DWC2 ("DesignWare Hi-Speed USB 2.0 On-The-Go") registers used in host mode, with their
//! fields. Register names are the databook's as Linux's `drivers/usb/dwc2/hw.h` spells them;
//! each field's documentation gives that name too (`HPRT0_ENA`), so the Linux driver, USPi
//! and the usb-ethernet reference §2.1 can be read side by side with this file. Field names
//! here say what the field is. The base address is [`crate::memory_map::USB`].

use crate::mmio::{Field, Offset, Word};

/// Interrupt line of the controller (GPU IRQ 9).
pub const IRQ: u32 = 9;

/// GSNPSID of the BCM2835's core (2.80a).
pub const SNPSID_BCM2835: u32 = 0x4F54_280A;
/// GSNPSID QEMU's model reports (2.94a).
pub const SNPSID_QEMU: u32 = 0x4F54_294A;

/// AHB configuration.
pub const GAHBCFG: Offset<Gahbcfg> = Offset::new(0x008);
/// USB configuration.
pub const GUSBCFG: Offset<Gusbcfg> = Offset::new(0x00C);
/// Reset control.
pub const GRSTCTL: Offset<Grstctl> = Offset::new(0x010);
/// Core interrupt status (write 1 to clear).
pub const GINTSTS: Offset<Gintsts> = Offset::new(0x014);
/// Core interrupt mask (the bits of [`GINTSTS`]).
pub const GINTMSK: Offset<Gintsts> = Offset::new(0x018);
/// Receive FIFO size.
pub const GRXFSIZ: Offset<Grxfsiz> = Offset::new(0x024);
/// Non-periodic transmit FIFO size.
pub const GNPTXFSIZ: Offset<FifoSize> = Offset::new(0x028);
/// Synopsys ID: product and release of the core.
pub const GSNPSID: Offset<Gsnpsid> = Offset::new(0x040);
/// Hardware configuration 2: what the core was synthesised with.
pub const GHWCFG2: Offset<Ghwcfg2> = Offset::new(0x048);
/// Host periodic transmit FIFO size.
pub const HPTXFSIZ: Offset<FifoSize> = Offset::new(0x100);
/// Host configuration.
pub const HCFG: Offset<Hcfg> = Offset::new(0x400);
/// Host frame number.
pub const HFNUM: Offset<Hfnum> = Offset::new(0x408);
/// Host all-channels interrupt: one bit per channel with an unmasked HCINT bit set.
pub const HAINT: Offset<Haint> = Offset::new(0x414);
/// Host all-channels interrupt mask (the bits of [`HAINT`]).
pub const HAINTMSK: Offset<Haint> = Offset::new(0x418);
/// Host port control and status.
pub const HPRT0: Offset<Hprt0> = Offset::new(0x440);
/// Power and clock gating control (Linux `PCGCTL`); written 0: clocks on.
pub const PCGCCTL: Offset<Word> = Offset::new(0xE00);

/// Offset of host channel `n`'s register block (Linux `HCCHAR(n)` and its neighbours).
pub const fn channel(n: usize) -> usize {
    0x500 + n * 0x20
}
/// Channel characteristics (in a channel block).
pub const HCCHAR: Offset<Hcchar> = Offset::new(0x00);
/// Channel split control (in a channel block); written 0: no split transactions.
pub const HCSPLT: Offset<Word> = Offset::new(0x04);
/// Channel interrupt (in a channel block; write 1 to clear).
pub const HCINT: Offset<Hcint> = Offset::new(0x08);
/// Channel interrupt mask (in a channel block; the bits of [`HCINT`]).
pub const HCINTMSK: Offset<Hcint> = Offset::new(0x0C);
/// Channel transfer size (in a channel block).
pub const HCTSIZ: Offset<Hctsiz> = Offset::new(0x10);
/// Channel DMA address: the bus address of the transfer's buffer (in a channel block).
pub const HCDMA: Offset<Word> = Offset::new(0x14);

/// GAHBCFG fields.
pub enum Gahbcfg {}
impl Gahbcfg {
    /// `GAHBCFG_GLBL_INTR_EN`: the core's interrupt output.
    pub const GLOBAL_INTERRUPT_ENABLE: Field<Self> = Field::bit(0);
    /// Broadcom: maximum AXI burst length (bits 2:1, where the databook has `HBSTLEN`).
    pub const AXI_BURST: Field<Self> = Field::bits(2, 1);
    /// Broadcom: wait for AXI writes to complete before reporting a transfer done.
    pub const WAIT_AXI_WRITES: Field<Self> = Field::bit(4);
    /// `GAHBCFG_DMA_EN`: the core moves data by DMA (buffer DMA here).
    pub const DMA_ENABLE: Field<Self> = Field::bit(5);
}

/// GUSBCFG fields.
pub enum Gusbcfg {}
impl Gusbcfg {
    /// `GUSBCFG_PHYIF16`: 16-bit UTMI+ interface (0: 8 bit).
    pub const PHY_16_BIT: Field<Self> = Field::bit(3);
    /// `GUSBCFG_ULPI_UTMI_SEL`: ULPI PHY (0: UTMI+, the BCM2835's).
    pub const ULPI_SELECT: Field<Self> = Field::bit(4);
    /// `GUSBCFG_SRPCAP`: session request protocol capable.
    pub const SRP_CAPABLE: Field<Self> = Field::bit(8);
    /// `GUSBCFG_HNPCAP`: host negotiation protocol capable.
    pub const HNP_CAPABLE: Field<Self> = Field::bit(9);
    /// `GUSBCFG_ULPI_FS_LS`: ULPI full/low-speed only.
    pub const ULPI_FULL_SPEED_ONLY: Field<Self> = Field::bit(17);
    /// `GUSBCFG_ULPI_CLK_SUSP_M`: ULPI clock suspend mode.
    pub const ULPI_CLOCK_SUSPEND: Field<Self> = Field::bit(19);
    /// `GUSBCFG_ULPI_EXT_VBUS_DRV`: the ULPI PHY drives VBUS from an external supply.
    pub const ULPI_EXTERNAL_VBUS: Field<Self> = Field::bit(20);
    /// `GUSBCFG_TERMSELDLPULSE`: data-line pulsing uses TermSel.
    pub const TERMSEL_DATA_LINE_PULSING: Field<Self> = Field::bit(22);
}

/// GRSTCTL fields.
pub enum Grstctl {}
impl Grstctl {
    /// `GRSTCTL_CSFTRST`: core soft reset (self-clearing).
    pub const CORE_SOFT_RESET: Field<Self> = Field::bit(0);
    /// `GRSTCTL_RXFFLSH`: flush the receive FIFO (self-clearing).
    pub const RX_FIFO_FLUSH: Field<Self> = Field::bit(4);
    /// `GRSTCTL_TXFFLSH`: flush the transmit FIFO(s) named by [`Grstctl::TX_FIFO_NUMBER`]
    /// (self-clearing).
    pub const TX_FIFO_FLUSH: Field<Self> = Field::bit(5);
    /// `GRSTCTL_TXFNUM`: which transmit FIFO to flush; [`Grstctl::ALL_TX_FIFOS`] is all.
    pub const TX_FIFO_NUMBER: Field<Self> = Field::bits(10, 6);
    /// [`Grstctl::TX_FIFO_NUMBER`] value: every transmit FIFO.
    pub const ALL_TX_FIFOS: u32 = 0x10;
    /// `GRSTCTL_AHBIDLE`: the AHB master is idle (safe to reset).
    pub const AHB_IDLE: Field<Self> = Field::bit(31);
}

/// GINTSTS and GINTMSK fields.
pub enum Gintsts {}
impl Gintsts {
    /// `GINTSTS_PRTINT`: the host port changed (details in HPRT0).
    pub const PORT: Field<Self> = Field::bit(24);
    /// `GINTSTS_HCHINT`: a host channel interrupted (details in HAINT).
    pub const HOST_CHANNELS: Field<Self> = Field::bit(25);
    /// Every bit: written to clear them all, or to mask them all.
    pub const ALL: Field<Self> = Field::bits(31, 0);
}

/// GRXFSIZ fields.
pub enum Grxfsiz {}
impl Grxfsiz {
    /// `GRXFSIZ_DEPTH`: receive FIFO depth in 32-bit words.
    pub const DEPTH: Field<Self> = Field::bits(15, 0);
}

/// Fields of the transmit FIFO size registers GNPTXFSIZ and HPTXFSIZ.
pub enum FifoSize {}
impl FifoSize {
    /// `FIFOSIZE_STARTADDR`: where the FIFO starts in FIFO RAM, in words.
    pub const START_ADDRESS: Field<Self> = Field::bits(15, 0);
    /// `FIFOSIZE_DEPTH`: FIFO depth in words.
    pub const DEPTH: Field<Self> = Field::bits(31, 16);
}

/// GSNPSID fields.
pub enum Gsnpsid {}
impl Gsnpsid {
    /// The product: 0x4F54 ("OT") for the OTG core.
    pub const PRODUCT: Field<Self> = Field::bits(31, 16);
    /// Major release digit (2 in 2.80a).
    pub const MAJOR: Field<Self> = Field::bits(15, 12);
    /// Minor release digits and letter, in hex (0x80A in 2.80a).
    pub const MINOR: Field<Self> = Field::bits(11, 0);
}

/// GHWCFG2 fields.
pub enum Ghwcfg2 {}
impl Ghwcfg2 {
    /// `GHWCFG2_ARCHITECTURE`: how data moves; [`Ghwcfg2::INTERNAL_DMA`] is needed here.
    pub const ARCHITECTURE: Field<Self> = Field::bits(4, 3);
    /// [`Ghwcfg2::ARCHITECTURE`] value `GHWCFG2_INT_DMA_ARCH`: internal (buffer) DMA.
    pub const INTERNAL_DMA: u32 = 2;
    /// `GHWCFG2_NUM_HOST_CHAN`: host channels minus one.
    pub const HOST_CHANNELS_MINUS_ONE: Field<Self> = Field::bits(17, 14);
}

/// HCFG fields.
pub enum Hcfg {}
impl Hcfg {
    /// `HCFG_FSLSPCLKSEL`: full/low-speed PHY clock; 0 is 30/60 MHz (UTMI+).
    pub const FULL_LOW_SPEED_CLOCK: Field<Self> = Field::bits(1, 0);
}

/// HFNUM fields.
pub enum Hfnum {}
impl Hfnum {
    /// `HFNUM_FRNUM`: the current (micro)frame number.
    pub const FRAME_NUMBER: Field<Self> = Field::bits(15, 0);
    /// Bit 0 of `HFNUM_FRNUM`: the current (micro)frame is odd.
    pub const ODD_FRAME: Field<Self> = Field::bit(0);
}

/// HAINT and HAINTMSK fields: one bit per channel.
pub enum Haint {}
impl Haint {
    /// Channel `n`'s bit.
    pub const fn channel(n: usize) -> Field<Self> {
        Field::bit(n as u32)
    }
}

/// HPRT0 fields. Four of them are write-1-to-clear ([`Hprt0::WRITE_1_TO_CLEAR`]), and one
/// of those is the enable bit: writing back what was read would disable the port.
pub enum Hprt0 {}
impl Hprt0 {
    /// `HPRT0_CONNSTS`: a device is connected.
    pub const CONNECT_STATUS: Field<Self> = Field::bit(0);
    /// `HPRT0_CONNDET`: a connection was detected (write 1 to clear).
    pub const CONNECT_DETECTED: Field<Self> = Field::bit(1);
    /// `HPRT0_ENA`: the port is enabled (write 1 to clear: writing 1 DISABLES the port).
    pub const ENABLE: Field<Self> = Field::bit(2);
    /// `HPRT0_ENACHG`: the enable bit changed (write 1 to clear).
    pub const ENABLE_CHANGED: Field<Self> = Field::bit(3);
    /// `HPRT0_OVRCURRCHG`: the over-current state changed (write 1 to clear).
    pub const OVERCURRENT_CHANGED: Field<Self> = Field::bit(5);
    /// `HPRT0_RST`: drive reset signalling on the port while set.
    pub const RESET: Field<Self> = Field::bit(8);
    /// `HPRT0_PWR`: port power.
    pub const POWER: Field<Self> = Field::bit(12);
    /// `HPRT0_SPD`: the attached device's speed, one of the `SPEED_*` values.
    pub const SPEED: Field<Self> = Field::bits(18, 17);
    /// [`Hprt0::SPEED`] value `HPRT0_SPD_HIGH_SPEED`.
    pub const SPEED_HIGH: u32 = 0;
    /// [`Hprt0::SPEED`] value `HPRT0_SPD_FULL_SPEED`.
    pub const SPEED_FULL: u32 = 1;
    /// The bits that must be written as 0 in every read-modify-write of HPRT0.
    pub const WRITE_1_TO_CLEAR: crate::mmio::FieldValue<Self> = Self::CONNECT_DETECTED
        .set()
        .and(Self::ENABLE.set())
        .and(Self::ENABLE_CHANGED.set())
        .and(Self::OVERCURRENT_CHANGED.set());
}

/// The endpoint types of [`Hcchar::ENDPOINT_TYPE`] (`HCCHAR_EPTYPE`; isochronous, 1, is not
/// used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointType {
    /// Control.
    Control = 0,
    /// Bulk.
    Bulk = 2,
    /// Interrupt.
    Interrupt = 3,
}

/// HCCHAR fields.
pub enum Hcchar {}
impl Hcchar {
    /// `HCCHAR_MPS`: maximum packet size.
    pub const MAX_PACKET: Field<Self> = Field::bits(10, 0);
    /// `HCCHAR_EPNUM`: endpoint number.
    pub const ENDPOINT: Field<Self> = Field::bits(14, 11);
    /// `HCCHAR_EPDIR`: IN (device to host).
    pub const DIRECTION_IN: Field<Self> = Field::bit(15);
    /// `HCCHAR_LSPDDEV`: the device is low speed.
    pub const LOW_SPEED: Field<Self> = Field::bit(17);
    /// `HCCHAR_EPTYPE`: an [`EndpointType`].
    pub const ENDPOINT_TYPE: Field<Self> = Field::bits(19, 18);
    /// `HCCHAR_MULTICNT`: transactions per (micro)frame for periodic endpoints.
    pub const MULTI_COUNT: Field<Self> = Field::bits(21, 20);
    /// `HCCHAR_DEVADDR`: device address.
    pub const DEVICE_ADDRESS: Field<Self> = Field::bits(28, 22);
    /// `HCCHAR_ODDFRM`: a periodic transfer goes out in an odd (micro)frame.
    pub const ODD_FRAME: Field<Self> = Field::bit(29);
    /// `HCCHAR_CHDIS`: ask the channel to halt (with [`Hcchar::ENABLE`] set).
    pub const DISABLE: Field<Self> = Field::bit(30);
    /// `HCCHAR_CHENA`: the channel is running; setting it starts the programmed transfer.
    pub const ENABLE: Field<Self> = Field::bit(31);
}

/// HCINT and HCINTMSK fields.
pub enum Hcint {}
impl Hcint {
    /// `HCINTMSK_XFERCOMPL`: transfer completed.
    pub const TRANSFER_COMPLETE: Field<Self> = Field::bit(0);
    /// `HCINTMSK_CHHLTD`: the channel halted (after completion, an error or a disable).
    pub const HALTED: Field<Self> = Field::bit(1);
    /// `HCINTMSK_AHBERR`: AHB (DMA) error.
    pub const AHB_ERROR: Field<Self> = Field::bit(2);
    /// `HCINTMSK_STALL`: STALL received.
    pub const STALL: Field<Self> = Field::bit(3);
    /// `HCINTMSK_NAK`: NAK received.
    pub const NAK: Field<Self> = Field::bit(4);
    /// `HCINTMSK_ACK`: ACK received.
    pub const ACK: Field<Self> = Field::bit(5);
    /// `HCINTMSK_NYET`: NYET received.
    pub const NYET: Field<Self> = Field::bit(6);
    /// `HCINTMSK_XACTERR`: transaction error (CRC, timeout, bit stuff, false EOP).
    pub const TRANSACTION_ERROR: Field<Self> = Field::bit(7);
    /// `HCINTMSK_BBLERR`: babble.
    pub const BABBLE: Field<Self> = Field::bit(8);
    /// `HCINTMSK_FRMOVRUN`: frame overrun.
    pub const FRAME_OVERRUN: Field<Self> = Field::bit(9);
    /// `HCINTMSK_DATATGLERR`: data toggle error.
    pub const DATA_TOGGLE_ERROR: Field<Self> = Field::bit(10);
    /// Every bit: written to clear them all.
    pub const ALL: Field<Self> = Field::bits(31, 0);
}

/// HCTSIZ fields.
pub enum Hctsiz {}
impl Hctsiz {
    /// `TSIZ_XFERSIZE`: bytes to move; counts down as they move (IN).
    pub const TRANSFER_SIZE: Field<Self> = Field::bits(18, 0);
    /// `TSIZ_PKTCNT`: packets to move; counts down.
    pub const PACKET_COUNT: Field<Self> = Field::bits(28, 19);
    /// `TSIZ_SC_MC_PID`: the PID of the next packet, one of the [`pid`] values; the core
    /// advances it, so it is the data toggle to start the next transfer with.
    pub const PID: Field<Self> = Field::bits(30, 29);
}

/// Values of [`Hctsiz::PID`] (`TSIZ_SC_MC_PID_*`).
pub mod pid {
    /// DATA0.
    pub const DATA0: u32 = 0;
    /// DATA1.
    pub const DATA1: u32 = 2;
    /// SETUP (MDATA for periodic high-bandwidth endpoints).
    pub const SETUP: u32 = 3;
}
