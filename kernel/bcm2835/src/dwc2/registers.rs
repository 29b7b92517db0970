//! DWC2 ("DesignWare Hi-Speed USB 2.0 On-The-Go") register offsets and fields used in host
//! mode, from the usb-ethernet reference §2.1 (USPi `dwhci.h`, Linux `drivers/usb/dwc2`).

/// Interrupt line of the controller (GPU IRQ 9).
pub const IRQ: u32 = 9;

/// AHB configuration.
pub const GAHBCFG: usize = 0x008;
/// USB configuration.
pub const GUSBCFG: usize = 0x00C;
/// Reset control.
pub const GRSTCTL: usize = 0x010;
/// Core interrupt status.
pub const GINTSTS: usize = 0x014;
/// Core interrupt mask.
pub const GINTMSK: usize = 0x018;
/// Receive FIFO size (words).
pub const GRXFSIZ: usize = 0x024;
/// Non-periodic transmit FIFO size: depth [31:16], start [15:0].
pub const GNPTXFSIZ: usize = 0x028;
/// Synopsys ID.
pub const GSNPSID: usize = 0x040;
/// Hardware configuration 2.
pub const GHWCFG2: usize = 0x048;
/// Host periodic transmit FIFO size.
pub const HPTXFSIZ: usize = 0x100;
/// Host configuration.
pub const HCFG: usize = 0x400;
/// Host frame number.
pub const HFNUM: usize = 0x408;
/// Host all-channels interrupt.
pub const HAINT: usize = 0x414;
/// Host all-channels interrupt mask.
pub const HAINTMSK: usize = 0x418;
/// Host port control and status.
pub const HPRT0: usize = 0x440;
/// Power and clock gating control.
pub const PCGCCTL: usize = 0xE00;

/// Offset of channel `n`'s register block.
pub const fn channel(n: usize) -> usize {
    0x500 + n * 0x20
}
/// Channel characteristics (in a channel block).
pub const HCCHAR: usize = 0x00;
/// Channel split control.
pub const HCSPLT: usize = 0x04;
/// Channel interrupt.
pub const HCINT: usize = 0x08;
/// Channel interrupt mask.
pub const HCINTMSK: usize = 0x0C;
/// Channel transfer size.
pub const HCTSIZ: usize = 0x10;
/// Channel DMA address.
pub const HCDMA: usize = 0x14;

/// GSNPSID of the BCM2835's core (2.80a).
pub const SNPSID_BCM2835: u32 = 0x4F54_280A;
/// GSNPSID QEMU's model reports (2.94a).
pub const SNPSID_QEMU: u32 = 0x4F54_294A;

/// GAHBCFG bits.
pub mod ahbcfg {
    /// Global interrupt enable.
    pub const GLOBAL_INTERRUPT_ENABLE: u32 = 1 << 0;
    /// Broadcom: maximum AXI burst length (bits 2:1).
    pub const AXI_BURST_MASK: u32 = 3 << 1;
    /// Broadcom: wait for AXI writes to complete.
    pub const WAIT_AXI_WRITES: u32 = 1 << 4;
    /// DMA enable.
    pub const DMA_ENABLE: u32 = 1 << 5;
}

/// GUSBCFG bits.
pub mod usbcfg {
    /// PHY interface width (0 = 8 bit).
    pub const PHY_IF: u32 = 1 << 3;
    /// ULPI (1) or UTMI+ (0).
    pub const ULPI_UTMI_SEL: u32 = 1 << 4;
    /// SRP capable.
    pub const SRP_CAP: u32 = 1 << 8;
    /// HNP capable.
    pub const HNP_CAP: u32 = 1 << 9;
    /// ULPI FS/LS select.
    pub const ULPI_FSLS: u32 = 1 << 17;
    /// ULPI clock suspend.
    pub const ULPI_CLK_SUS_M: u32 = 1 << 19;
    /// ULPI external VBUS drive.
    pub const ULPI_EXT_VBUS_DRV: u32 = 1 << 20;
    /// TermSel DLine pulsing.
    pub const TERM_SEL_DL_PULSE: u32 = 1 << 22;
}

/// GRSTCTL bits.
pub mod rstctl {
    /// Core soft reset.
    pub const CORE_SOFT_RESET: u32 = 1 << 0;
    /// RX FIFO flush.
    pub const RX_FIFO_FLUSH: u32 = 1 << 4;
    /// TX FIFO flush.
    pub const TX_FIFO_FLUSH: u32 = 1 << 5;
    /// TX FIFO number field: 0x10 = all FIFOs.
    pub const TX_FIFO_ALL: u32 = 0x10 << 6;
    /// AHB master idle.
    pub const AHB_IDLE: u32 = 1 << 31;
}

/// GINTSTS / GINTMSK bits.
pub mod gint {
    /// Host port interrupt.
    pub const PORT: u32 = 1 << 24;
    /// Host channels interrupt.
    pub const HOST_CHANNELS: u32 = 1 << 25;
    /// Disconnect detected.
    pub const DISCONNECT: u32 = 1 << 29;
}

/// HPRT0 bits.
pub mod hprt {
    /// A device is connected.
    pub const CONNECT_STATUS: u32 = 1 << 0;
    /// Connect detected (write 1 to clear).
    pub const CONNECT_DETECTED: u32 = 1 << 1;
    /// Port enabled (write 1 to clear: writing 1 DISABLES the port).
    pub const ENABLE: u32 = 1 << 2;
    /// Enable changed (write 1 to clear).
    pub const ENABLE_CHANGED: u32 = 1 << 3;
    /// Over-current changed (write 1 to clear).
    pub const OVERCURRENT_CHANGED: u32 = 1 << 5;
    /// Reset signalling.
    pub const RESET: u32 = 1 << 8;
    /// Port power.
    pub const POWER: u32 = 1 << 12;
    /// Speed field shift (bits 18:17: 0 high, 1 full, 2 low).
    pub const SPEED_SHIFT: u32 = 17;
    /// Bits that must be written as 0 in every read-modify-write.
    pub const WRITE_CLEAR_MASK: u32 =
        CONNECT_DETECTED | ENABLE | ENABLE_CHANGED | OVERCURRENT_CHANGED;
}

/// HCCHAR fields.
pub mod hcchar {
    /// Max packet size (bits 10:0).
    pub const MPS_MASK: u32 = 0x7FF;
    /// Endpoint number shift (bits 14:11).
    pub const EP_SHIFT: u32 = 11;
    /// Direction IN.
    pub const EP_DIR_IN: u32 = 1 << 15;
    /// Low-speed device.
    pub const LOW_SPEED: u32 = 1 << 17;
    /// Endpoint type shift (bits 19:18).
    pub const TYPE_SHIFT: u32 = 18;
    /// Multi count shift (bits 21:20).
    pub const MC_SHIFT: u32 = 20;
    /// Device address shift (bits 28:22).
    pub const ADDRESS_SHIFT: u32 = 22;
    /// Odd frame (periodic transfers).
    pub const ODD_FRAME: u32 = 1 << 29;
    /// Channel disable.
    pub const DISABLE: u32 = 1 << 30;
    /// Channel enable.
    pub const ENABLE: u32 = 1 << 31;
    /// Endpoint type: control.
    pub const TYPE_CONTROL: u32 = 0;
    /// Endpoint type: bulk.
    pub const TYPE_BULK: u32 = 2;
    /// Endpoint type: interrupt.
    pub const TYPE_INTERRUPT: u32 = 3;
}

/// HCINT / HCINTMSK bits.
pub mod hcint {
    /// Transfer completed.
    pub const TRANSFER_COMPLETE: u32 = 1 << 0;
    /// Channel halted.
    pub const HALTED: u32 = 1 << 1;
    /// AHB (DMA) error.
    pub const AHB_ERROR: u32 = 1 << 2;
    /// STALL received.
    pub const STALL: u32 = 1 << 3;
    /// NAK received.
    pub const NAK: u32 = 1 << 4;
    /// ACK received.
    pub const ACK: u32 = 1 << 5;
    /// NYET received.
    pub const NYET: u32 = 1 << 6;
    /// Transaction error (CRC, timeout, bit stuff, false EOP).
    pub const TRANSACTION_ERROR: u32 = 1 << 7;
    /// Babble.
    pub const BABBLE: u32 = 1 << 8;
    /// Frame overrun.
    pub const FRAME_OVERRUN: u32 = 1 << 9;
    /// Data toggle error.
    pub const DATA_TOGGLE_ERROR: u32 = 1 << 10;
    /// Errors that a retry may cure.
    pub const RETRYABLE: u32 = TRANSACTION_ERROR | FRAME_OVERRUN | DATA_TOGGLE_ERROR;
}

/// HCTSIZ fields.
pub mod hctsiz {
    /// Transfer size (bits 18:0).
    pub const SIZE_MASK: u32 = 0x7_FFFF;
    /// Packet count shift (bits 28:19).
    pub const PACKETS_SHIFT: u32 = 19;
    /// Packet count mask after the shift.
    pub const PACKETS_MASK: u32 = 0x3FF;
    /// PID shift (bits 30:29).
    pub const PID_SHIFT: u32 = 29;
    /// PID DATA0.
    pub const PID_DATA0: u32 = 0;
    /// PID DATA2.
    pub const PID_DATA2: u32 = 1;
    /// PID DATA1.
    pub const PID_DATA1: u32 = 2;
    /// PID MDATA / SETUP.
    pub const PID_SETUP: u32 = 3;
}
