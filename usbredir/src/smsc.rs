//! A model of the SMSC LAN9512/LAN9514 Ethernet function (`0424:ec00`), written from the
//! LAN950x datasheet (DS00001875, same MAC/FCT/UTX/URX blocks as the LAN9514's Ethernet
//! function), the LAN8700-family internal PHY's register set, and what Linux's
//! `drivers/net/usb/smsc95xx.c` (6.1) does with it.
//!
//! It is an independent judge of Bramble's driver: it shares no code and no constants with
//! `kernel/usb` (a host test cross-checks the register numbers both use, so that a
//! disagreement shows). Datasheet facts it relies on, with the section they come from:
//!
//! - Registers are read and written with vendor requests 0xA1 / 0xA0 (wIndex = offset,
//!   wLength = 4, little-endian). `INT_STS.PHY_INT` is read-only: it follows the PHY's
//!   interrupt output and clears only when the PHY's source register is read (§7.3.2; Linux
//!   commit "usbnet: smsc95xx: Don't clear read-only PHY interrupt").
//! - `HW_CFG.LRST` and `PM_CTRL.PHY_RST` self-clear once the reset is done.
//! - FCT (§5.4): a 20 KB RX FIFO and an 8 KB TX FIFO. Frames that do not fit are dropped
//!   and counted (RX FIFO Dropped Frames; `INT_STS.RXDF`).
//! - UTX (§5.3.1.1): each frame is preceded by an RX status word (frame length including
//!   the FCS in bits 29:16, error summary in bit 15), then `HW_CFG.RXDOFF` bytes of offset,
//!   then the frame with its FCS (and, with RX COE, a 16-bit checksum after it). In SEF mode
//!   a transfer holds one frame and ends on its last byte; in MEF mode frames are packed
//!   DWORD-aligned until `BURST_CAP` packets (with `HW_CFG.BCE`), and the end of a burst is
//!   delayed by `BULK_IN_DLY` so that more frames can join. A transfer that ends on a packet
//!   boundary is terminated by a zero-length packet. With the FIFO empty the UTX answers a
//!   bulk-IN token with a ZLP, unless `HW_CFG.BIR` is set: then it NAKs.
//! - URX/FCT (§5.4.2): bulk-OUT data is a stream of buffers, each led by TX command A
//!   (first/last segment, data start offset, buffer size) and B (frame length, checksum
//!   enable); buffers are DWORD-aligned. A command that does not describe the data is a loss
//!   of sync: the TX error flag is set and the bulk-OUT pipe stalls (unless `HW_CFG.SBP`).
//! - The interrupt endpoint returns `INT_STS` (4 bytes) while any source enabled in
//!   `INT_EP_CTL` is active, and NAKs otherwise.
//! - The EEPROM controller (`E2P_CMD`/`E2P_DATA`): with no EEPROM fitted (as on a Pi B+,
//!   whose MAC comes from the firmware) a command times out and sets `EPC_TIMEOUT`.
//!
//! Every register and PHY access is recorded ([`Access`]) with its time, for the register
//! sequence fixtures.

use std::collections::VecDeque;
use std::fmt::Write as _;

use crate::device::{Answer, Micros, UsbFunction};
use crate::proto::{ConnectInfo, ControlHeader, EndpointInfo, InterfaceInfo, ep_type, speed};

/// Register offsets (datasheet §7.3, "System Control and Status Registers").
pub mod reg {
    /// Chip ID (31:16) and revision (15:0).
    pub const ID_REV: u16 = 0x00;
    /// Interrupt status.
    pub const INT_STS: u16 = 0x08;
    /// Receive configuration.
    pub const RX_CFG: u16 = 0x0C;
    /// Transmit configuration.
    pub const TX_CFG: u16 = 0x10;
    /// Hardware configuration.
    pub const HW_CFG: u16 = 0x14;
    /// RX FIFO information.
    pub const RX_FIFO_INF: u16 = 0x18;
    /// TX FIFO information.
    pub const TX_FIFO_INF: u16 = 0x1C;
    /// Power management control.
    pub const PM_CTRL: u16 = 0x20;
    /// LED and GPIO configuration.
    pub const LED_GPIO_CFG: u16 = 0x24;
    /// GPIO configuration.
    pub const GPIO_CFG: u16 = 0x28;
    /// Automatic flow control configuration.
    pub const AFC_CFG: u16 = 0x2C;
    /// EEPROM command.
    pub const E2P_CMD: u16 = 0x30;
    /// EEPROM data.
    pub const E2P_DATA: u16 = 0x34;
    /// Burst cap (in max-packet units).
    pub const BURST_CAP: u16 = 0x38;
    /// GPIO wake enables.
    pub const GPIO_WAKE: u16 = 0x64;
    /// Interrupt endpoint control.
    pub const INT_EP_CTL: u16 = 0x68;
    /// Bulk-IN delay (16.667 ns units).
    pub const BULK_IN_DLY: u16 = 0x6C;
    /// MAC control.
    pub const MAC_CR: u16 = 0x100;
    /// MAC address high (bytes 4-5).
    pub const ADDRH: u16 = 0x104;
    /// MAC address low (bytes 0-3).
    pub const ADDRL: u16 = 0x108;
    /// Multicast hash high.
    pub const HASHH: u16 = 0x10C;
    /// Multicast hash low.
    pub const HASHL: u16 = 0x110;
    /// MII access (PHY address, register, direction, busy).
    pub const MII_ADDR: u16 = 0x114;
    /// MII data.
    pub const MII_DATA: u16 = 0x118;
    /// Flow control.
    pub const FLOW: u16 = 0x11C;
    /// VLAN1 tag.
    pub const VLAN1: u16 = 0x120;
    /// VLAN2 tag.
    pub const VLAN2: u16 = 0x124;
    /// Wake-up frame filter.
    pub const WUFF: u16 = 0x128;
    /// Wake-up control and status.
    pub const WUCSR: u16 = 0x12C;
    /// Checksum offload engine control.
    pub const COE_CR: u16 = 0x130;

    /// A register's name for logs.
    pub fn name(offset: u16) -> &'static str {
        match offset {
            ID_REV => "ID_REV",
            INT_STS => "INT_STS",
            RX_CFG => "RX_CFG",
            TX_CFG => "TX_CFG",
            HW_CFG => "HW_CFG",
            RX_FIFO_INF => "RX_FIFO_INF",
            TX_FIFO_INF => "TX_FIFO_INF",
            PM_CTRL => "PM_CTRL",
            LED_GPIO_CFG => "LED_GPIO_CFG",
            GPIO_CFG => "GPIO_CFG",
            AFC_CFG => "AFC_CFG",
            E2P_CMD => "E2P_CMD",
            E2P_DATA => "E2P_DATA",
            BURST_CAP => "BURST_CAP",
            GPIO_WAKE => "GPIO_WAKE",
            INT_EP_CTL => "INT_EP_CTL",
            BULK_IN_DLY => "BULK_IN_DLY",
            MAC_CR => "MAC_CR",
            ADDRH => "ADDRH",
            ADDRL => "ADDRL",
            HASHH => "HASHH",
            HASHL => "HASHL",
            MII_ADDR => "MII_ADDR",
            MII_DATA => "MII_DATA",
            FLOW => "FLOW",
            VLAN1 => "VLAN1",
            VLAN2 => "VLAN2",
            WUFF => "WUFF",
            WUCSR => "WUCSR",
            COE_CR => "COE_CR",
            _ => "reserved",
        }
    }
}

/// `INT_STS` and `INT_EP_CTL` bits.
pub mod int {
    /// PHY interrupt (read-only in INT_STS: follows the PHY).
    pub const PHY: u32 = 0x8000;
    /// Transmitter error.
    pub const TXE: u32 = 0x4000;
    /// RX dropped frame.
    pub const RXDF: u32 = 0x0800;
}

/// `HW_CFG` bits.
pub mod hw_cfg {
    /// Bulk-IN empty response: set = NAK, clear = ZLP.
    pub const BIR: u32 = 0x1000;
    /// Stall bulk-out pipe disable.
    pub const SBP: u32 = 0x0800;
    /// RX data offset, bits 10:9 (0-3 bytes between status word and frame).
    pub const RXDOFF: u32 = 0x0600;
    /// Multiple Ethernet frames per bulk-IN transfer.
    pub const MEF: u32 = 0x0020;
    /// Lite reset (self-clearing).
    pub const LRST: u32 = 0x0008;
    /// PHY select: set = external PHY.
    pub const PSEL: u32 = 0x0004;
    /// Burst cap enable.
    pub const BCE: u32 = 0x0002;
}

/// `MAC_CR` bits.
pub mod mac_cr {
    /// Receive all.
    pub const RXALL: u32 = 0x8000_0000;
    /// Disable receive own (half duplex).
    pub const RCVOWN: u32 = 0x0080_0000;
    /// Full duplex.
    pub const FDPX: u32 = 0x0010_0000;
    /// Pass all multicast.
    pub const MCPAS: u32 = 0x0008_0000;
    /// Promiscuous.
    pub const PRMS: u32 = 0x0004_0000;
    /// Hash/perfect filtering (multicast through the hash table).
    pub const HPFILT: u32 = 0x0000_2000;
    /// Disable broadcast frames.
    pub const BCAST: u32 = 0x0000_0800;
    /// Transmitter enable.
    pub const TXEN: u32 = 0x0000_0008;
    /// Receiver enable.
    pub const RXEN: u32 = 0x0000_0004;
}

/// `E2P_CMD` fields.
pub mod e2p {
    /// Busy (set by software to start, cleared when done).
    pub const BUSY: u32 = 0x8000_0000;
    /// Command, bits 30:28.
    pub const CMD_MASK: u32 = 0x7000_0000;
    /// Read a byte.
    pub const READ: u32 = 0x0000_0000;
    /// Disable writes.
    pub const EWDS: u32 = 0x1000_0000;
    /// Enable writes.
    pub const EWEN: u32 = 0x2000_0000;
    /// Write a byte.
    pub const WRITE: u32 = 0x3000_0000;
    /// Write all.
    pub const WRAL: u32 = 0x4000_0000;
    /// Erase a byte.
    pub const ERASE: u32 = 0x5000_0000;
    /// Erase all.
    pub const ERAL: u32 = 0x6000_0000;
    /// Reload the configuration from the EEPROM.
    pub const RELOAD: u32 = 0x7000_0000;
    /// The last command timed out (no EEPROM answered).
    pub const TIMEOUT: u32 = 0x0000_0400;
    /// Configuration was loaded from an EEPROM.
    pub const LOADED: u32 = 0x0000_0200;
    /// Byte address, bits 8:0.
    pub const ADDR_MASK: u32 = 0x0000_01FF;
}

/// MII_ADDR fields.
pub mod mii {
    /// Busy.
    pub const BUSY: u32 = 0x1;
    /// Write (clear = read).
    pub const WRITE: u32 = 0x2;
}

/// PHY register numbers (IEEE 802.3 clause 22 plus the SMSC vendor registers).
pub mod phy {
    /// Basic control.
    pub const BMCR: u8 = 0;
    /// Basic status.
    pub const BMSR: u8 = 1;
    /// PHY identifier 1.
    pub const ID1: u8 = 2;
    /// PHY identifier 2.
    pub const ID2: u8 = 3;
    /// Auto-negotiation advertisement.
    pub const ANAR: u8 = 4;
    /// Link partner ability.
    pub const ANLPAR: u8 = 5;
    /// Auto-negotiation expansion.
    pub const ANER: u8 = 6;
    /// Mode control/status (EDPWRDOWN bit 13, ENERGYON bit 1).
    pub const MODE_CTRL_STS: u8 = 17;
    /// Special modes (MODE 7:5, PHYAD 4:0).
    pub const SPECIAL_MODES: u8 = 18;
    /// Special control/status indications.
    pub const SPECIAL_CTRL_IND: u8 = 27;
    /// Interrupt source flags (read clears).
    pub const INT_SRC: u8 = 29;
    /// Interrupt mask.
    pub const INT_MASK: u8 = 30;
    /// PHY special control/status (auto-negotiation done, speed indication).
    pub const SPECIAL_CTRL_STS: u8 = 31;

    /// A PHY register's name for logs.
    pub fn name(reg: u8) -> &'static str {
        match reg {
            BMCR => "BMCR",
            BMSR => "BMSR",
            ID1 => "PHYID1",
            ID2 => "PHYID2",
            ANAR => "ANAR",
            ANLPAR => "ANLPAR",
            ANER => "ANER",
            MODE_CTRL_STS => "MODE_CTRL_STS",
            SPECIAL_MODES => "SPECIAL_MODES",
            SPECIAL_CTRL_IND => "SPECIAL_CTRL_IND",
            INT_SRC => "INT_SRC",
            INT_MASK => "INT_MASK",
            SPECIAL_CTRL_STS => "SPECIAL_CTRL_STS",
            _ => "PHY_RESERVED",
        }
    }

    /// BMCR: reset (self-clearing).
    pub const BMCR_RESET: u16 = 0x8000;
    /// BMCR: 100 Mbit/s when auto-negotiation is off.
    pub const BMCR_SPEED100: u16 = 0x2000;
    /// BMCR: auto-negotiation enable.
    pub const BMCR_ANENABLE: u16 = 0x1000;
    /// BMCR: power down.
    pub const BMCR_PDOWN: u16 = 0x0800;
    /// BMCR: restart auto-negotiation (self-clearing).
    pub const BMCR_ANRESTART: u16 = 0x0200;
    /// BMCR: full duplex when auto-negotiation is off.
    pub const BMCR_FULLDPLX: u16 = 0x0100;
    /// BMSR: link up (latches low).
    pub const BMSR_LINK: u16 = 0x0004;
    /// BMSR: auto-negotiation complete.
    pub const BMSR_ANEGCOMPLETE: u16 = 0x0020;
    /// INT_SRC/INT_MASK: link down.
    pub const INT_LINK_DOWN: u16 = 0x0010;
    /// INT_SRC/INT_MASK: auto-negotiation complete.
    pub const INT_ANEG_COMPLETE: u16 = 0x0040;
    /// INT_SRC/INT_MASK: energy on.
    pub const INT_ENERGYON: u16 = 0x0080;
    /// MODE_CTRL_STS: energy detected on the line.
    pub const ENERGYON: u16 = 0x0002;
}

/// RX status word bits (datasheet Table 5-40).
pub mod rx_sts {
    /// Filtering fail.
    pub const FF: u32 = 0x4000_0000;
    /// Frame length shift (bits 29:16, including the FCS).
    pub const FL_SHIFT: u32 = 16;
    /// Error summary.
    pub const ES: u32 = 0x0000_8000;
    /// Broadcast frame.
    pub const BF: u32 = 0x0000_2000;
    /// Length error.
    pub const LE: u32 = 0x0000_1000;
    /// Runt frame.
    pub const RF: u32 = 0x0000_0800;
    /// Multicast frame.
    pub const MF: u32 = 0x0000_0400;
    /// Frame too long.
    pub const TL: u32 = 0x0000_0080;
    /// Collision seen.
    pub const CS: u32 = 0x0000_0040;
    /// Frame type (Ethernet II).
    pub const FT: u32 = 0x0000_0020;
    /// MII error.
    pub const ME: u32 = 0x0000_0008;
    /// Dribbling bit.
    pub const DB: u32 = 0x0000_0004;
    /// CRC error.
    pub const CRC: u32 = 0x0000_0002;
}

/// TX command words (datasheet Tables 5-41 and 5-42).
pub mod tx_cmd {
    /// A: data start offset, bits 17:16.
    pub const A_OFFSET_SHIFT: u32 = 16;
    /// A: first segment.
    pub const A_FIRST_SEG: u32 = 0x2000;
    /// A: last segment.
    pub const A_LAST_SEG: u32 = 0x1000;
    /// A: buffer size, bits 10:0.
    pub const A_BUF_SIZE: u32 = 0x07FF;
    /// B: checksum enable.
    pub const B_CSUM: u32 = 0x4000;
    /// B: frame length, bits 10:0.
    pub const B_FRAME_LEN: u32 = 0x07FF;
}

/// Chip ID and revision a Pi B+'s LAN9514 reports (ethtool register dumps).
pub const ID_REV_LAN9514: u32 = 0xEC00_0002;
/// RX FIFO size (§5.4).
pub const RX_FIFO_BYTES: usize = 20 * 1024;
/// TX FIFO size (§5.4).
pub const TX_FIFO_BYTES: usize = 8 * 1024;
/// `BULK_IN_DLY` after reset: 0x800 × 16.667 ns ≈ 34 µs (§5.3.1.1).
pub const BULK_IN_DLY_DEFAULT: u32 = 0x800;
/// The internal PHY's MII address.
pub const PHY_ADDRESS: u32 = 1;
/// PHY ID of the internal PHY: OUI 0x0007 / model 0x0C (LAN8700 family, which Linux's
/// `smsc` PHY driver binds as "SMSC LAN8700").
pub const PHY_ID: (u16, u16) = (0x0007, 0xC0C3);
/// BMSR capabilities: 100BASE-TX FD/HD, 10BASE-T FD/HD, auto-negotiation, extended regs.
const BMSR_CAPS: u16 = 0x7809;
/// ANAR after reset: 10/100 full and half duplex, 802.3 selector.
const ANAR_DEFAULT: u16 = 0x01E1;
/// An MII management frame takes 64 bits at 2.5 MHz.
const MII_BUSY_US: Micros = 26;
/// Lite reset duration (the datasheet gives none; well below one control transfer on a
/// real bus would be unrealistic, so a couple of milliseconds).
const LRST_US: Micros = 2_000;
/// PHY reset duration (PM_CTRL.PHY_RST and BMCR reset).
const PHY_RESET_US: Micros = 5_000;
/// Auto-negotiation time from restart to link up (real PHYs take 1.5-3 s; shorter here so
/// tests stay quick, still longer than any register sequence).
pub const DEFAULT_ANEG_US: Micros = 400_000;
/// EEPROM command time with an EEPROM fitted, and the timeout without one.
const E2P_CMD_US: Micros = 200;
const E2P_TIMEOUT_US: Micros = 30_000;
/// EEPROM size (93C46-class part, 512 bytes addressable).
const EEPROM_BYTES: usize = 512;
/// Minimum Ethernet frame without FCS (shorter ones are padded on the wire).
const MIN_FRAME: usize = 60;

/// The link partner at the other end of the cable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partner {
    /// No cable (no energy, no link).
    None,
    /// A switch port advertising 10/100 full and half duplex with pause.
    Switch,
    /// An old hub: 10/100 half duplex only.
    HalfDuplexHub,
}

impl Partner {
    fn abilities(self) -> u16 {
        match self {
            Partner::None => 0,
            Partner::Switch => 0x05E1,
            Partner::HalfDuplexHub => 0x00A1,
        }
    }
}

/// One recorded access to the chip.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Vendor register read and the value returned.
    Read(u16, u32),
    /// Vendor register write.
    Write(u16, u32),
    /// PHY register read (through MII_ADDR), value returned.
    PhyRead(u8, u16),
    /// PHY register write.
    PhyWrite(u8, u16),
    /// A standard or unknown control request (bmRequestType, bRequest, wValue, wIndex).
    Control(u8, u8, u16, u16),
    /// SET_CONFIGURATION.
    SetConfiguration(u8),
    /// A bus reset.
    BusReset,
    /// CLEAR_FEATURE(ENDPOINT_HALT).
    ClearHalt(u8),
    /// A note from the test or the fault injector.
    Note(String),
}

/// A timestamped access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Microseconds since the server started.
    pub at: Micros,
    /// What happened.
    pub access: Access,
}

impl LogEntry {
    /// One line of the register log: `time_ms op name value`.
    pub fn line(&self) -> String {
        let ms = self.at as f64 / 1000.0;
        let mut out = format!("{ms:10.3} ");
        let _ = match &self.access {
            Access::Read(r, v) => write!(out, "R {} {v:#010x}", reg::name(*r)),
            Access::Write(r, v) => write!(out, "W {} {v:#010x}", reg::name(*r)),
            Access::PhyRead(r, v) => write!(out, "PR {} {v:#06x}", phy::name(*r)),
            Access::PhyWrite(r, v) => write!(out, "PW {} {v:#06x}", phy::name(*r)),
            Access::Control(t, r, v, i) => {
                write!(
                    out,
                    "CTL type={t:#04x} req={r:#04x} value={v:#06x} index={i:#06x}"
                )
            }
            Access::SetConfiguration(v) => write!(out, "SET_CONFIGURATION {v}"),
            Access::BusReset => write!(out, "BUS_RESET"),
            Access::ClearHalt(ep) => write!(out, "CLEAR_HALT {ep:#04x}"),
            Access::Note(text) => write!(out, "NOTE {text}"),
        };
        out
    }
}

/// Counters the tests read (each fault injected and what became of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames taken from the wire into the RX FIFO.
    pub rx_frames: u64,
    /// Frames dropped by the address filter.
    pub rx_filtered: u64,
    /// Frames dropped because the RX FIFO was full.
    pub rx_fifo_dropped: u64,
    /// Frames dropped because the receiver was off (MAC_CR.RXEN clear).
    pub rx_while_off: u64,
    /// Frames delivered to the host with error flags (injected).
    pub rx_error_frames: u64,
    /// Bulk-IN transfers with data.
    pub in_transfers: u64,
    /// Bulk-IN transfers that carried more than one frame.
    pub multi_frame_transfers: u64,
    /// Most frames in one bulk-IN transfer.
    pub max_frames_per_transfer: u64,
    /// Zero-length bulk-IN answers.
    pub in_zlps: u64,
    /// Frames sent to the wire.
    pub tx_frames: u64,
    /// TX frames whose checksum the TX COE inserted.
    pub tx_csum_offloaded: u64,
    /// TX command errors (loss of sync).
    pub tx_errors: u64,
    /// Frames the host sent while the transmitter was off.
    pub tx_while_off: u64,
    /// Transfers answered with STALL because of an injected halt.
    pub stalls_answered: u64,
    /// CLEAR_FEATURE(ENDPOINT_HALT) received.
    pub halts_cleared: u64,
    /// Interrupt-endpoint reports sent.
    pub interrupts_sent: u64,
    /// Link changes injected (down and up).
    pub link_changes: u64,
    /// Register accesses.
    pub register_accesses: u64,
    /// Lite resets.
    pub lite_resets: u64,
}

impl Stats {
    /// `key=value` pairs on one line.
    pub fn line(&self) -> String {
        format!(
            "rx_frames={} rx_filtered={} rx_fifo_dropped={} rx_while_off={} rx_error_frames={} \
             in_transfers={} multi_frame_transfers={} max_frames_per_transfer={} in_zlps={} \
             tx_frames={} tx_csum_offloaded={} tx_errors={} tx_while_off={} stalls_answered={} \
             halts_cleared={} interrupts_sent={} link_changes={} register_accesses={} lite_resets={}",
            self.rx_frames,
            self.rx_filtered,
            self.rx_fifo_dropped,
            self.rx_while_off,
            self.rx_error_frames,
            self.in_transfers,
            self.multi_frame_transfers,
            self.max_frames_per_transfer,
            self.in_zlps,
            self.tx_frames,
            self.tx_csum_offloaded,
            self.tx_errors,
            self.tx_while_off,
            self.stalls_answered,
            self.halts_cleared,
            self.interrupts_sent,
            self.link_changes,
            self.register_accesses,
            self.lite_resets,
        )
    }
}

/// A frame in the RX FIFO.
#[derive(Clone, Debug)]
struct RxFrame {
    /// Frame bytes without FCS, padded to 60.
    data: Vec<u8>,
    /// Extra status bits (injected errors).
    errors: u32,
    /// When it arrived.
    arrived: Micros,
}

/// The bulk-IN transfer the UTX is sending.
#[derive(Debug, Default)]
struct InTransfer {
    data: Vec<u8>,
    sent: usize,
    /// A ZLP must follow (the data ended on a packet boundary).
    zlp_due: bool,
}

/// The PHY's state.
#[derive(Clone, Debug)]
struct Phy {
    regs: [u16; 32],
    link_latched_low: bool,
    reset_until: Option<Micros>,
    aneg_done_at: Option<Micros>,
}

impl Phy {
    fn new() -> Self {
        let mut regs = [0u16; 32];
        regs[phy::BMCR as usize] = phy::BMCR_SPEED100 | phy::BMCR_ANENABLE | phy::BMCR_FULLDPLX;
        regs[phy::BMSR as usize] = BMSR_CAPS;
        regs[phy::ID1 as usize] = PHY_ID.0;
        regs[phy::ID2 as usize] = PHY_ID.1;
        regs[phy::ANAR as usize] = ANAR_DEFAULT;
        // MODE 111 (all capable, auto-negotiation), PHYAD 1.
        regs[phy::SPECIAL_MODES as usize] = 0x00E0 | PHY_ADDRESS as u16;
        Self {
            regs,
            link_latched_low: false,
            reset_until: None,
            aneg_done_at: None,
        }
    }
}

/// Bulk endpoints.
const EP_BULK_IN: u8 = 0x81;
const EP_BULK_OUT: u8 = 0x02;
const EP_INTERRUPT: u8 = 0x83;

/// The LAN9514's Ethernet function.
pub struct Smsc95xx {
    high_speed: bool,
    configuration: u8,
    regs: std::collections::BTreeMap<u16, u32>,
    phy: Phy,
    partner: Partner,
    aneg_us: Micros,
    eeprom: Option<Vec<u8>>,
    eeprom_write_enabled: bool,
    e2p_done_at: Option<Micros>,
    mii_done_at: Option<Micros>,
    lrst_done_at: Option<Micros>,
    phy_rst_done_at: Option<Micros>,
    rx_fifo: VecDeque<RxFrame>,
    in_transfer: Option<InTransfer>,
    out_buf: Vec<u8>,
    tx_pending_frame: Option<(u32, Vec<u8>)>,
    /// Frames the MAC sent, for the wire.
    tx_wire: Vec<Vec<u8>>,
    halted_in: bool,
    halted_out: bool,
    rx_errors_to_inject: u32,
    /// Every access, in order.
    pub log: Vec<LogEntry>,
    /// Counters.
    pub stats: Stats,
}

/// Ethernet CRC-32 (reflected 0x04C11DB7), `init` and no final inversion (the raw register).
fn crc32_raw(init: u32, data: &[u8]) -> u32 {
    let mut crc = init;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// The frame check sequence as it goes on the wire (little-endian bytes of the inverted CRC).
pub fn fcs(frame: &[u8]) -> [u8; 4] {
    (!crc32_raw(0xFFFF_FFFF, frame)).to_le_bytes()
}

/// The multicast hash bit of `mac` (0-63): the top six bits of the bit-reversed CRC register
/// (datasheet §5.x "Hash filtering"; Linux `smsc95xx_hash`).
pub fn hash_bit(mac: &[u8; 6]) -> u32 {
    crc32_raw(0xFFFF_FFFF, mac).reverse_bits() >> 26
}

/// Ones'-complement sum of `data` as big-endian 16-bit words, folded to 16 bits.
fn ones_sum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for pair in &mut chunks {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

impl Smsc95xx {
    /// A LAN9514 Ethernet function as it powers up, cable to `partner`, no EEPROM.
    pub fn new(high_speed: bool, partner: Partner) -> Self {
        let mut chip = Self {
            high_speed,
            configuration: 0,
            regs: Default::default(),
            phy: Phy::new(),
            partner,
            aneg_us: DEFAULT_ANEG_US,
            eeprom: None,
            eeprom_write_enabled: false,
            e2p_done_at: None,
            mii_done_at: None,
            lrst_done_at: None,
            phy_rst_done_at: None,
            rx_fifo: VecDeque::new(),
            in_transfer: None,
            out_buf: Vec::new(),
            tx_pending_frame: None,
            tx_wire: Vec::new(),
            halted_in: false,
            halted_out: false,
            rx_errors_to_inject: 0,
            log: Vec::new(),
            stats: Stats::default(),
        };
        chip.reset_registers();
        chip.start_aneg(0);
        chip
    }

    /// Fits a 93C46-class EEPROM holding `mac` (signature 0xA5 at offset 0, MAC at 1-6), as
    /// on USB dongles; the MAC is loaded into ADDRH/ADDRL at reset.
    pub fn with_eeprom_mac(mut self, mac: [u8; 6]) -> Self {
        let mut image = vec![0xFFu8; EEPROM_BYTES];
        image[0] = 0xA5;
        image[1..7].copy_from_slice(&mac);
        self.eeprom = Some(image);
        self.reset_registers();
        self
    }

    /// Sets the auto-negotiation time.
    pub fn with_aneg_time(mut self, micros: Micros) -> Self {
        self.aneg_us = micros;
        self
    }

    fn reg(&self, r: u16) -> u32 {
        self.regs.get(&r).copied().unwrap_or(0)
    }

    fn set(&mut self, r: u16, v: u32) {
        self.regs.insert(r, v);
    }

    /// Power-on / lite-reset values of the system registers (datasheet register tables).
    fn reset_registers(&mut self) {
        let mac_cr = 0;
        self.regs.clear();
        self.set(reg::ID_REV, ID_REV_LAN9514);
        self.set(reg::BULK_IN_DLY, BULK_IN_DLY_DEFAULT);
        self.set(reg::MAC_CR, mac_cr);
        self.set(reg::ADDRH, 0x0000_FFFF);
        self.set(reg::ADDRL, 0xFFFF_FFFF);
        self.set(reg::VLAN1, 0);
        self.set(reg::TX_FIFO_INF, TX_FIFO_BYTES as u32);
        let mut e2p = 0;
        if let Some(image) = &self.eeprom
            && image[0] == 0xA5
        {
            e2p |= e2p::LOADED;
            let m = &image[1..7];
            self.regs
                .insert(reg::ADDRL, u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
            self.regs
                .insert(reg::ADDRH, u32::from(u16::from_le_bytes([m[4], m[5]])));
        }
        self.set(reg::E2P_CMD, e2p);
        self.rx_fifo.clear();
        self.in_transfer = None;
        self.out_buf.clear();
        self.tx_pending_frame = None;
    }

    fn note(&mut self, now: Micros, access: Access) {
        self.log.push(LogEntry { at: now, access });
    }

    /// Records a note in the register log.
    pub fn log_note(&mut self, now: Micros, text: &str) {
        self.note(now, Access::Note(text.to_string()));
    }

    fn our_mac(&self) -> [u8; 6] {
        let lo = self.reg(reg::ADDRL).to_le_bytes();
        let hi = self.reg(reg::ADDRH).to_le_bytes();
        [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1]]
    }

    // ---- PHY ----

    fn phy_interrupt_active(&self) -> bool {
        self.phy.regs[phy::INT_SRC as usize] & self.phy.regs[phy::INT_MASK as usize] != 0
    }

    fn link_up(&self) -> bool {
        self.phy.regs[phy::BMSR as usize] & phy::BMSR_LINK != 0
    }

    fn start_aneg(&mut self, now: Micros) {
        let bmcr = self.phy.regs[phy::BMCR as usize];
        if self.partner == Partner::None || bmcr & phy::BMCR_PDOWN != 0 {
            self.phy.aneg_done_at = None;
            return;
        }
        if bmcr & phy::BMCR_ANENABLE != 0 {
            self.phy.aneg_done_at = Some(now + self.aneg_us);
        } else {
            // Forced speed/duplex: the link comes up after the parallel-detect time.
            self.phy.aneg_done_at = Some(now + self.aneg_us / 2);
        }
        self.phy.regs[phy::MODE_CTRL_STS as usize] |= phy::ENERGYON;
    }

    fn link_goes_down(&mut self) {
        let p = &mut self.phy.regs;
        let was_up = p[phy::BMSR as usize] & phy::BMSR_LINK != 0;
        p[phy::BMSR as usize] &= !(phy::BMSR_LINK | phy::BMSR_ANEGCOMPLETE);
        p[phy::ANLPAR as usize] = 0;
        p[phy::ANER as usize] = 0;
        p[phy::SPECIAL_CTRL_STS as usize] &= !0x1000;
        if was_up {
            self.phy.link_latched_low = true;
            p[phy::INT_SRC as usize] |= phy::INT_LINK_DOWN;
        }
        self.phy.aneg_done_at = None;
    }

    fn finish_aneg(&mut self) {
        let p = &mut self.phy.regs;
        let bmcr = p[phy::BMCR as usize];
        let (speed100, full) = if bmcr & phy::BMCR_ANENABLE != 0 {
            let common = p[phy::ANAR as usize] & self.partner.abilities();
            p[phy::ANLPAR as usize] = self.partner.abilities() | 0x4000;
            p[phy::ANER as usize] = 0x0001;
            p[phy::BMSR as usize] |= phy::BMSR_ANEGCOMPLETE;
            p[phy::INT_SRC as usize] |= phy::INT_ANEG_COMPLETE;
            if common & 0x0100 != 0 {
                (true, true)
            } else if common & 0x0080 != 0 {
                (true, false)
            } else if common & 0x0040 != 0 {
                (false, true)
            } else if common & 0x0020 != 0 {
                (false, false)
            } else {
                return; // nothing in common: no link
            }
        } else {
            (
                bmcr & phy::BMCR_SPEED100 != 0,
                bmcr & phy::BMCR_FULLDPLX != 0,
            )
        };
        p[phy::BMSR as usize] |= phy::BMSR_LINK;
        p[phy::INT_SRC as usize] |= phy::INT_ENERGYON;
        let indication = match (speed100, full) {
            (false, false) => 0b001,
            (false, true) => 0b101,
            (true, false) => 0b010,
            (true, true) => 0b110,
        };
        p[phy::SPECIAL_CTRL_STS as usize] = 0x1000 | (indication << 2) | 0x0040;
    }

    fn reset_phy(&mut self, now: Micros) {
        let latched = self.phy.link_latched_low;
        self.phy = Phy::new();
        self.phy.link_latched_low = latched;
        self.start_aneg(now);
    }

    fn phy_read(&mut self, now: Micros, r: u8) -> u16 {
        let index = usize::from(r & 0x1F);
        let mut value = self.phy.regs[index];
        match r {
            phy::BMCR => {
                if self.phy.reset_until.is_some() {
                    value |= phy::BMCR_RESET;
                }
            }
            phy::BMSR => {
                if self.phy.link_latched_low {
                    value &= !phy::BMSR_LINK;
                    self.phy.link_latched_low = false;
                }
            }
            phy::INT_SRC => {
                self.phy.regs[index] = 0;
            }
            _ => {}
        }
        self.note(now, Access::PhyRead(r, value));
        value
    }

    fn phy_write(&mut self, now: Micros, r: u8, value: u16) {
        self.note(now, Access::PhyWrite(r, value));
        let index = usize::from(r & 0x1F);
        match r {
            phy::BMCR => {
                if value & phy::BMCR_RESET != 0 {
                    self.link_goes_down();
                    self.phy.reset_until = Some(now + PHY_RESET_US);
                    return;
                }
                let old = self.phy.regs[index];
                self.phy.regs[index] = value & !phy::BMCR_ANRESTART;
                let restart = value & phy::BMCR_ANRESTART != 0
                    || (old ^ value) & (phy::BMCR_ANENABLE | phy::BMCR_PDOWN) != 0;
                if restart {
                    if self.link_up() {
                        self.link_goes_down();
                    }
                    self.start_aneg(now);
                }
            }
            phy::BMSR
            | phy::ID1
            | phy::ID2
            | phy::ANLPAR
            | phy::ANER
            | phy::INT_SRC
            | phy::SPECIAL_CTRL_STS => {} // read-only
            phy::MODE_CTRL_STS => {
                let energy = self.phy.regs[index] & phy::ENERGYON;
                self.phy.regs[index] = (value & !phy::ENERGYON) | energy;
            }
            _ => self.phy.regs[index] = value,
        }
    }

    // ---- register file ----

    fn read_register(&mut self, now: Micros, r: u16) -> u32 {
        self.advance(now);
        let value = match r {
            reg::INT_STS => {
                let mut v = self.reg(reg::INT_STS) & !int::PHY;
                if self.phy_interrupt_active() {
                    v |= int::PHY;
                }
                v
            }
            reg::RX_FIFO_INF => {
                let used: usize = self.rx_fifo.iter().map(|f| f.data.len() + 8).sum();
                used.min(0xFFFF) as u32
            }
            reg::MII_ADDR => {
                let mut v = self.reg(r);
                if self.mii_done_at.is_some() {
                    v |= mii::BUSY;
                }
                v
            }
            reg::E2P_CMD => {
                let mut v = self.reg(r);
                if self.e2p_done_at.is_some() {
                    v |= e2p::BUSY;
                }
                v
            }
            reg::HW_CFG => {
                let mut v = self.reg(r);
                if self.lrst_done_at.is_some() {
                    v |= hw_cfg::LRST;
                }
                v
            }
            reg::PM_CTRL => {
                let mut v = self.reg(r);
                if self.phy_rst_done_at.is_some() {
                    v |= 0x10;
                }
                v
            }
            _ => self.reg(r),
        };
        self.note(now, Access::Read(r, value));
        value
    }

    fn write_register(&mut self, now: Micros, r: u16, value: u32) {
        self.advance(now);
        self.note(now, Access::Write(r, value));
        match r {
            reg::ID_REV | reg::RX_FIFO_INF | reg::TX_FIFO_INF => {} // read-only
            reg::INT_STS => {
                // Write one to clear; PHY_INT is read-only (it follows the PHY).
                let old = self.reg(r);
                self.set(r, old & !(value & !int::PHY));
            }
            reg::HW_CFG => {
                if value & hw_cfg::LRST != 0 {
                    self.stats.lite_resets += 1;
                    self.reset_registers();
                    self.lrst_done_at = Some(now + LRST_US);
                    return;
                }
                self.set(r, value & !hw_cfg::LRST);
            }
            reg::PM_CTRL => {
                if value & 0x10 != 0 {
                    self.phy_rst_done_at = Some(now + PHY_RESET_US);
                    self.link_goes_down();
                }
                self.set(r, value & !0x10);
            }
            reg::RX_CFG => {
                if value & 0x1 != 0 {
                    self.rx_fifo.clear(); // RX FIFO flush, self-clearing
                }
                self.set(r, value & !0x1);
            }
            reg::MII_ADDR => {
                self.set(r, value & !mii::BUSY);
                if value & mii::BUSY == 0 {
                    return;
                }
                let address = (value >> 11) & 0x1F;
                let phy_reg = ((value >> 6) & 0x1F) as u8;
                if address != PHY_ADDRESS || self.reg(reg::HW_CFG) & hw_cfg::PSEL != 0 {
                    // Nothing answers at other addresses: the MDIO line floats high.
                    if value & mii::WRITE == 0 {
                        self.set(reg::MII_DATA, 0xFFFF);
                    }
                } else if value & mii::WRITE != 0 {
                    let data = self.reg(reg::MII_DATA) as u16;
                    self.phy_write(now, phy_reg, data);
                } else {
                    let data = self.phy_read(now, phy_reg);
                    self.set(reg::MII_DATA, u32::from(data));
                }
                self.mii_done_at = Some(now + MII_BUSY_US);
            }
            reg::MII_DATA => self.set(r, value & 0xFFFF),
            reg::E2P_CMD => {
                self.set(
                    r,
                    value & !(e2p::BUSY | e2p::TIMEOUT) & !e2p::LOADED
                        | (self.reg(r) & e2p::LOADED),
                );
                if value & e2p::BUSY != 0 {
                    self.eeprom_command(now, value);
                }
            }
            reg::E2P_DATA => self.set(r, value & 0xFF),
            _ => self.set(r, value),
        }
    }

    fn eeprom_command(&mut self, now: Micros, value: u32) {
        let address = (value & e2p::ADDR_MASK) as usize;
        let Some(image) = self.eeprom.as_mut() else {
            // No EEPROM: the controller waits for a ready bit that never comes.
            self.e2p_done_at = Some(now + E2P_TIMEOUT_US);
            let v = self.reg(reg::E2P_CMD) | e2p::TIMEOUT;
            self.set(reg::E2P_CMD, v);
            return;
        };
        match value & e2p::CMD_MASK {
            e2p::READ => {
                let byte = image[address % EEPROM_BYTES];
                self.regs.insert(reg::E2P_DATA, u32::from(byte));
            }
            e2p::EWEN => self.eeprom_write_enabled = true,
            e2p::EWDS => self.eeprom_write_enabled = false,
            e2p::WRITE | e2p::ERASE if self.eeprom_write_enabled => {
                image[address % EEPROM_BYTES] = if value & e2p::CMD_MASK == e2p::WRITE {
                    self.regs.get(&reg::E2P_DATA).copied().unwrap_or(0) as u8
                } else {
                    0xFF
                };
            }
            e2p::WRAL | e2p::ERAL if self.eeprom_write_enabled => {
                let fill = if value & e2p::CMD_MASK == e2p::WRAL {
                    self.regs.get(&reg::E2P_DATA).copied().unwrap_or(0) as u8
                } else {
                    0xFF
                };
                image.fill(fill);
            }
            e2p::RELOAD => {
                let mac_cr = self.reg(reg::MAC_CR);
                self.reset_registers();
                self.set(reg::MAC_CR, mac_cr);
            }
            _ => {}
        }
        self.e2p_done_at = Some(now + E2P_CMD_US);
    }

    /// Moves timers forward: self-clearing bits, auto-negotiation.
    fn advance(&mut self, now: Micros) {
        for slot in [
            &mut self.mii_done_at,
            &mut self.e2p_done_at,
            &mut self.lrst_done_at,
        ] {
            if slot.is_some_and(|t| now >= t) {
                *slot = None;
            }
        }
        if self.phy_rst_done_at.is_some_and(|t| now >= t) {
            self.phy_rst_done_at = None;
            self.reset_phy(now);
        }
        if self.phy.reset_until.is_some_and(|t| now >= t) {
            self.phy.reset_until = None;
            self.reset_phy(now);
        }
        if self.phy.aneg_done_at.is_some_and(|t| now >= t) {
            self.phy.aneg_done_at = None;
            self.finish_aneg();
        }
    }

    // ---- wire side ----

    /// A frame arrives from the wire (the TAP device). Returns whether it entered the FIFO.
    pub fn receive_from_wire(&mut self, now: Micros, frame: &[u8]) -> bool {
        self.advance(now);
        if frame.len() < 14 || frame.len() > 1518 {
            return false;
        }
        if !self.link_up() {
            return false; // no link, nothing reaches the MAC
        }
        let mac_cr = self.reg(reg::MAC_CR);
        if mac_cr & mac_cr::RXEN == 0 {
            self.stats.rx_while_off += 1;
            return false;
        }
        let dest: [u8; 6] = frame[..6].try_into().expect("6 bytes");
        let broadcast = dest == [0xFF; 6];
        let multicast = dest[0] & 1 != 0 && !broadcast;
        let accept = mac_cr & (mac_cr::PRMS | mac_cr::RXALL) != 0
            || dest == self.our_mac()
            || (broadcast && mac_cr & mac_cr::BCAST == 0)
            || (multicast && mac_cr & mac_cr::MCPAS != 0)
            || (multicast && mac_cr & mac_cr::HPFILT != 0 && {
                let bit = hash_bit(&dest);
                let table = if bit >= 32 {
                    self.reg(reg::HASHH)
                } else {
                    self.reg(reg::HASHL)
                };
                table & (1 << (bit & 31)) != 0
            });
        if !accept {
            self.stats.rx_filtered += 1;
            return false;
        }
        let mut data = frame.to_vec();
        if data.len() < MIN_FRAME {
            data.resize(MIN_FRAME, 0);
        }
        let mut frames = Vec::new();
        if self.rx_errors_to_inject > 0 {
            // A corrupted copy first, flagged the way the MAC flags a CRC error.
            self.rx_errors_to_inject -= 1;
            let mut bad = data.clone();
            let last = bad.len() - 1;
            bad[last] ^= 0x5A;
            frames.push(RxFrame {
                data: bad,
                errors: rx_sts::ES | rx_sts::CRC,
                arrived: now,
            });
            self.stats.rx_error_frames += 1;
        }
        frames.push(RxFrame {
            data,
            errors: 0,
            arrived: now,
        });
        let mut accepted = false;
        for frame in frames {
            let used: usize = self.rx_fifo.iter().map(|f| f.data.len() + 12).sum();
            if used + frame.data.len() + 12 > RX_FIFO_BYTES {
                self.stats.rx_fifo_dropped += 1;
                let v = self.reg(reg::INT_STS) | int::RXDF;
                self.set(reg::INT_STS, v);
                continue;
            }
            self.rx_fifo.push_back(frame);
            self.stats.rx_frames += 1;
            accepted = true;
        }
        accepted
    }

    /// Frames the MAC transmitted since the last call.
    pub fn take_wire_frames(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.tx_wire)
    }

    /// Fault: pulls the cable (`false`) or plugs it back in (`true`).
    pub fn set_cable(&mut self, now: Micros, connected: bool) {
        self.advance(now);
        self.stats.link_changes += 1;
        self.note(
            now,
            Access::Note(format!("cable {}", if connected { "in" } else { "out" })),
        );
        if connected {
            self.partner = Partner::Switch;
            self.start_aneg(now);
        } else {
            self.partner = Partner::None;
            self.link_goes_down();
            self.phy.regs[phy::MODE_CTRL_STS as usize] &= !phy::ENERGYON;
        }
    }

    /// Fault: halts the bulk-IN (`true`) or bulk-OUT endpoint until the host clears it.
    pub fn halt_endpoint(&mut self, now: Micros, bulk_in: bool) {
        self.note(
            now,
            Access::Note(format!(
                "halt {}",
                if bulk_in { "bulk-in" } else { "bulk-out" }
            )),
        );
        if bulk_in {
            self.halted_in = true;
        } else {
            self.halted_out = true;
        }
    }

    /// Fault: the next `count` frames from the wire are each preceded by a corrupted copy
    /// that the MAC flags with a CRC error.
    pub fn inject_rx_errors(&mut self, count: u32) {
        self.rx_errors_to_inject += count;
    }

    /// Whether the link is up (for status lines).
    pub fn link_is_up(&self) -> bool {
        self.link_up()
    }

    /// Frames waiting in the RX FIFO.
    pub fn rx_fifo_frames(&self) -> usize {
        self.rx_fifo.len()
    }

    fn max_packet(&self) -> usize {
        if self.high_speed { 512 } else { 64 }
    }

    /// One record of a bulk-IN transfer: status word, offset, frame, FCS, RX COE word.
    fn rx_record(&self, frame: &RxFrame) -> (Vec<u8>, usize) {
        let hw = self.reg(reg::HW_CFG);
        let offset = ((hw & hw_cfg::RXDOFF) >> 9) as usize;
        let rx_coe = self.reg(reg::COE_CR) & 0x1 != 0;
        let mut payload = frame.data.clone();
        payload.extend_from_slice(&fcs(&frame.data));
        if frame.errors & rx_sts::CRC != 0 {
            let n = payload.len();
            payload[n - 1] ^= 0xFF;
        }
        if rx_coe {
            // The RX COE sums the frame after the 14-byte Ethernet header (up to the FCS)
            // and appends the 16-bit result; Linux reads it as CHECKSUM_COMPLETE.
            let sum = ones_sum(&frame.data[14..]);
            payload.extend_from_slice(&sum.to_be_bytes());
        }
        let fl = payload.len() as u32;
        let dest = &frame.data[..6];
        let mut status = (fl << rx_sts::FL_SHIFT) | frame.errors;
        if dest == [0xFF; 6] {
            status |= rx_sts::BF;
        } else if dest[0] & 1 != 0 {
            status |= rx_sts::MF;
        }
        if u16::from_be_bytes([frame.data[12], frame.data[13]]) >= 0x0600 {
            status |= rx_sts::FT;
        }
        let mut record = status.to_le_bytes().to_vec();
        record.resize(4 + offset, 0);
        record.extend_from_slice(&payload);
        (record, offset)
    }

    /// Builds the next bulk-IN transfer from the FIFO, if it is due.
    fn build_in_transfer(&mut self, now: Micros) -> Option<InTransfer> {
        let first = self.rx_fifo.front()?;
        let hw = self.reg(reg::HW_CFG);
        if hw & hw_cfg::MEF == 0 {
            let frame = self.rx_fifo.pop_front().expect("checked");
            let (data, _) = self.rx_record(&frame);
            self.note_transfer(1);
            return Some(self.finish_transfer(data));
        }
        let cap = if hw & hw_cfg::BCE != 0 && self.reg(reg::BURST_CAP) != 0 {
            self.reg(reg::BURST_CAP) as usize * self.max_packet()
        } else {
            RX_FIFO_BYTES + 4096
        };
        // Bulk-in delay: wait for more frames unless a full burst is already there.
        let delay = Micros::from(self.reg(reg::BULK_IN_DLY) & 0xFFFF) * 16_667 / 1_000_000;
        let queued: usize = self
            .rx_fifo
            .iter()
            .map(|f| self.rx_record(f).0.len() + 3)
            .sum();
        if now < first.arrived + delay && queued < cap {
            return None;
        }
        let mut data = Vec::new();
        let mut frames = 0;
        while let Some(frame) = self.rx_fifo.front() {
            let (record, _) = self.rx_record(frame);
            let padded = (data.len() + 3) & !3;
            if frames > 0 && padded + record.len() > cap {
                break;
            }
            data.resize(padded, 0);
            data.extend_from_slice(&record);
            self.rx_fifo.pop_front();
            frames += 1;
        }
        // MEF: the last frame is DWORD-padded like the others.
        let padded = (data.len() + 3) & !3;
        data.resize(padded, 0);
        self.note_transfer(frames);
        Some(self.finish_transfer(data))
    }

    fn note_transfer(&mut self, frames: u64) {
        self.stats.in_transfers += 1;
        if frames > 1 {
            self.stats.multi_frame_transfers += 1;
        }
        self.stats.max_frames_per_transfer = self.stats.max_frames_per_transfer.max(frames);
    }

    fn finish_transfer(&self, data: Vec<u8>) -> InTransfer {
        let zlp_due = !data.is_empty() && data.len().is_multiple_of(self.max_packet());
        InTransfer {
            data,
            sent: 0,
            zlp_due,
        }
    }

    /// Bulk-OUT data goes into the TX FIFO packet by packet: each USB packet starts on a
    /// DWORD boundary and the unused bytes of a short packet's last DWORD are marked unused
    /// (datasheet Figure 5-5). The URX does not look at transfer boundaries ("it views all
    /// received packets as purely USB data", §5.3.1.2); the FCT reads TX commands out of the
    /// FIFO. So a stray byte after a frame (a pad byte instead of a ZLP) is where the FCT
    /// expects the next TX command A.
    fn bulk_out_data(&mut self, now: Micros, data: &[u8]) -> Answer {
        let mps = self.max_packet();
        for packet in data.chunks(mps) {
            self.out_buf.extend_from_slice(packet);
            let padded = (self.out_buf.len() + 3) & !3;
            self.out_buf.resize(padded, 0);
        }
        let fifo = std::mem::take(&mut self.out_buf);
        let (answer, consumed) = self.parse_tx_fifo(now, &fifo);
        if matches!(answer, Answer::Data(_)) {
            // A buffer still arriving stays in the FIFO for the next transfer.
            self.out_buf = fifo[consumed..].to_vec();
        }
        answer
    }

    /// Parses whole buffers from the FIFO; returns the answer and the bytes consumed.
    fn parse_tx_fifo(&mut self, now: Micros, fifo: &[u8]) -> (Answer, usize) {
        let mut at = 0usize;
        while fifo.len().saturating_sub(at) >= 4 {
            let a = u32::from_le_bytes(fifo[at..at + 4].try_into().expect("4"));
            if a & tx_cmd::A_FIRST_SEG == 0 && self.tx_pending_frame.is_none() {
                // The FCT acts on command A as soon as its DWORD is in the FIFO.
                return (
                    self.loss_of_sync(
                        now,
                        &format!("TX command A {a:#010x} is not a first segment"),
                    ),
                    at,
                );
            }
            if fifo.len() - at < 8 {
                break;
            }
            let b = u32::from_le_bytes(fifo[at + 4..at + 8].try_into().expect("4"));
            let offset = ((a >> tx_cmd::A_OFFSET_SHIFT) & 3) as usize;
            let size = (a & tx_cmd::A_BUF_SIZE) as usize;
            let frame_len = (b & tx_cmd::B_FRAME_LEN) as usize;
            let first = a & tx_cmd::A_FIRST_SEG != 0;
            let last = a & tx_cmd::A_LAST_SEG != 0;
            if size == 0 || frame_len == 0 {
                return (
                    self.loss_of_sync(now, &format!("empty TX buffer (A {a:#010x}, B {b:#010x})")),
                    at,
                );
            }
            let start = at + 8 + offset;
            let end = start + size;
            if end > fifo.len() {
                if end - at > TX_FIFO_BYTES {
                    return (
                        self.loss_of_sync(now, &format!("buffer of {size} bytes")),
                        at,
                    );
                }
                break; // the rest of the buffer is still to come
            }
            let buffer = &fifo[start..end];
            match (&mut self.tx_pending_frame, first) {
                (Some(_), true) => {
                    return (
                        self.loss_of_sync(now, "first segment while a frame is open"),
                        at,
                    );
                }
                (slot @ None, true) => *slot = Some((b, buffer.to_vec())),
                (Some((b0, frame)), false) => {
                    if (*b0 ^ b) & !tx_cmd::B_CSUM != 0 {
                        return (
                            self.loss_of_sync(now, "TX command B differs between segments"),
                            at,
                        );
                    }
                    frame.extend_from_slice(buffer);
                }
                (None, false) => unreachable!("checked above"),
            }
            if last {
                let (b0, frame) = self.tx_pending_frame.take().expect("set above");
                if frame.len() != frame_len {
                    return (
                        self.loss_of_sync(
                            now,
                            &format!(
                                "frame length {frame_len} but {} bytes in its buffers",
                                frame.len()
                            ),
                        ),
                        at,
                    );
                }
                self.transmit(now, b0, frame);
            }
            at = (end + 3) & !3;
        }
        (Answer::Data(Vec::new()), at)
    }

    fn loss_of_sync(&mut self, now: Micros, why: &str) -> Answer {
        self.stats.tx_errors += 1;
        self.out_buf.clear();
        self.note(now, Access::Note(format!("TX loss of sync: {why}")));
        self.tx_pending_frame = None;
        let v = self.reg(reg::INT_STS) | int::TXE;
        self.set(reg::INT_STS, v);
        if self.reg(reg::HW_CFG) & hw_cfg::SBP == 0 {
            self.halted_out = true;
            Answer::Stall
        } else {
            Answer::Data(Vec::new())
        }
    }

    fn transmit(&mut self, now: Micros, b: u32, mut frame: Vec<u8>) {
        let tx_on = self.reg(reg::TX_CFG) & 0x4 != 0 && self.reg(reg::MAC_CR) & mac_cr::TXEN != 0;
        if !tx_on {
            self.stats.tx_while_off += 1;
            self.note(
                now,
                Access::Note("frame sent while the transmitter is off".into()),
            );
            return;
        }
        if b & tx_cmd::B_CSUM != 0 && self.reg(reg::COE_CR) & 0x1_0000 != 0 {
            // The 4-byte preamble: checksum start (15:0) and insert position (31:16).
            if frame.len() < 4 {
                self.stats.tx_errors += 1;
                return;
            }
            let pre = u32::from_le_bytes(frame[..4].try_into().expect("4"));
            frame.drain(..4);
            let start = (pre & 0xFFFF) as usize;
            let place = (pre >> 16) as usize;
            if start < frame.len() && place + 2 <= frame.len() {
                let sum = !ones_sum(&frame[start..]);
                frame[place..place + 2].copy_from_slice(&sum.to_be_bytes());
                self.stats.tx_csum_offloaded += 1;
            } else {
                self.stats.tx_errors += 1;
                return;
            }
        }
        if !(14..=1514).contains(&frame.len()) {
            self.stats.tx_errors += 1;
            self.note(
                now,
                Access::Note(format!("TX frame of {} bytes", frame.len())),
            );
            return;
        }
        if !self.link_up() {
            return; // the MAC sends into a dead cable
        }
        if frame.len() < MIN_FRAME {
            frame.resize(MIN_FRAME, 0);
        }
        self.stats.tx_frames += 1;
        self.tx_wire.push(frame);
    }

    /// Answers the vendor requests (register access) and the standard requests QEMU forwards.
    fn control_request(&mut self, now: Micros, setup: &ControlHeader, data_out: &[u8]) -> Answer {
        match (setup.request_type, setup.request) {
            (0x40, 0xA0) if setup.length == 4 && data_out.len() == 4 => {
                self.stats.register_accesses += 1;
                let value = u32::from_le_bytes(data_out.try_into().expect("4"));
                self.write_register(now, setup.index, value);
                Answer::Data(Vec::new())
            }
            (0xC0, 0xA1) if setup.length == 4 => {
                self.stats.register_accesses += 1;
                Answer::Data(self.read_register(now, setup.index).to_le_bytes().to_vec())
            }
            (0x80, 0x06) => self.get_descriptor(setup),
            (0x80, 0x00) => Answer::Data(vec![0x01, 0x00]), // self-powered
            (0x81, 0x00) => Answer::Data(vec![0, 0]),
            (0x82, 0x00) => {
                let halted = match setup.index as u8 {
                    EP_BULK_IN => self.halted_in,
                    EP_BULK_OUT => self.halted_out,
                    _ => false,
                };
                Answer::Data(vec![u8::from(halted), 0])
            }
            (0x02, 0x01) if setup.value == 0 => {
                // CLEAR_FEATURE(ENDPOINT_HALT): the endpoint works again, toggle DATA0.
                let ep = setup.index as u8;
                self.note(now, Access::ClearHalt(ep));
                match ep {
                    EP_BULK_IN => self.halted_in = false,
                    EP_BULK_OUT => {
                        self.halted_out = false;
                        self.out_buf.clear();
                    }
                    _ => {}
                }
                self.stats.halts_cleared += 1;
                Answer::Data(Vec::new())
            }
            (0x00, 0x01) | (0x00, 0x03) => Answer::Data(Vec::new()), // remote wakeup feature
            _ => {
                self.note(
                    now,
                    Access::Control(setup.request_type, setup.request, setup.value, setup.index),
                );
                Answer::Stall
            }
        }
    }

    fn get_descriptor(&self, setup: &ControlHeader) -> Answer {
        let [index, kind] = setup.value.to_le_bytes();
        let mut data = match kind {
            1 => DEVICE_DESCRIPTOR.to_vec(),
            2 if index == 0 => self.config_descriptor(self.high_speed, 2),
            6 => DEVICE_QUALIFIER.to_vec(),
            7 if index == 0 => self.config_descriptor(!self.high_speed, 7),
            // No EEPROM, no strings (Pi B+ `lsusb -v`: iManufacturer 0, iProduct 0).
            _ => return Answer::Stall,
        };
        data.truncate(usize::from(setup.length));
        Answer::Data(data)
    }

    fn config_descriptor(&self, high_speed: bool, kind: u8) -> Vec<u8> {
        let bulk = if high_speed { 512u16 } else { 64 };
        let interval = if high_speed { 4 } else { 1 };
        let mut d = vec![
            0x09, kind, 0x27, 0x00, 0x01, 0x01, 0x00, 0xE0, 0x01, // configuration
            0x09, 0x04, 0x00, 0x00, 0x03, 0xFF, 0x00, 0xFF, 0x00, // interface 0: vendor
        ];
        for (address, attributes, size, interval) in [
            (EP_BULK_IN, 0x02, bulk, 0),
            (EP_BULK_OUT, 0x02, bulk, 0),
            (EP_INTERRUPT, 0x03, 16, interval),
        ] {
            let [lo, hi] = size.to_le_bytes();
            d.extend_from_slice(&[0x07, 0x05, address, attributes, lo, hi, interval]);
        }
        d
    }
}

/// Device descriptor of the Pi B+'s LAN9514 Ethernet function (`lsusb -v` in
/// raspberrypi/linux issues #149 and #746): USB 2.0, vendor class, protocol 1, EP0 64
/// bytes, 0424:ec00 release 2.00, no strings, one configuration.
pub const DEVICE_DESCRIPTOR: [u8; 18] = [
    0x12, 0x01, 0x00, 0x02, 0xFF, 0x00, 0x01, 0x40, 0x24, 0x04, 0x00, 0xEC, 0x00, 0x02, 0x00, 0x00,
    0x00, 0x01,
];

/// Device qualifier (a high-speed capable device must have one).
pub const DEVICE_QUALIFIER: [u8; 10] = [0x0A, 0x06, 0x00, 0x02, 0xFF, 0x00, 0x01, 0x40, 0x01, 0x00];

impl UsbFunction for Smsc95xx {
    fn connect_info(&self) -> ConnectInfo {
        ConnectInfo {
            speed: if self.high_speed {
                speed::HIGH
            } else {
                speed::FULL
            },
            class: 0xFF,
            subclass: 0x00,
            protocol: 0x01,
            vendor_id: 0x0424,
            product_id: 0xEC00,
            device_version_bcd: 0x0200,
        }
    }

    fn endpoints(&self) -> Vec<EndpointInfo> {
        let mut eps = vec![
            EndpointInfo {
                address: 0x00,
                kind: ep_type::CONTROL,
                interval: 0,
                interface: 0,
                max_packet_size: 64,
            },
            EndpointInfo {
                address: 0x80,
                kind: ep_type::CONTROL,
                interval: 0,
                interface: 0,
                max_packet_size: 64,
            },
        ];
        if self.configuration == 1 {
            let bulk = self.max_packet() as u16;
            eps.push(EndpointInfo {
                address: EP_BULK_IN,
                kind: ep_type::BULK,
                interval: 0,
                interface: 0,
                max_packet_size: bulk,
            });
            eps.push(EndpointInfo {
                address: EP_BULK_OUT,
                kind: ep_type::BULK,
                interval: 0,
                interface: 0,
                max_packet_size: bulk,
            });
            eps.push(EndpointInfo {
                address: EP_INTERRUPT,
                kind: ep_type::INTERRUPT,
                interval: if self.high_speed { 4 } else { 1 },
                interface: 0,
                max_packet_size: 16,
            });
        }
        eps
    }

    fn interfaces(&self) -> Vec<InterfaceInfo> {
        if self.configuration == 1 {
            vec![InterfaceInfo {
                number: 0,
                class: 0xFF,
                subclass: 0x00,
                protocol: 0xFF,
            }]
        } else {
            Vec::new()
        }
    }

    fn control(&mut self, now: Micros, setup: &ControlHeader, data_out: &[u8]) -> Answer {
        self.control_request(now, setup, data_out)
    }

    fn set_configuration(&mut self, now: Micros, value: u8) -> bool {
        self.note(now, Access::SetConfiguration(value));
        if value > 1 {
            return false;
        }
        self.configuration = value;
        self.halted_in = false;
        self.halted_out = false;
        true
    }

    fn configuration(&self) -> u8 {
        self.configuration
    }

    fn set_alt_setting(&mut self, interface: u8, alt: u8) -> bool {
        self.configuration == 1 && interface == 0 && alt == 0
    }

    fn bulk_out(&mut self, now: Micros, endpoint: u8, data: &[u8]) -> Answer {
        self.advance(now);
        if self.configuration != 1 || endpoint != EP_BULK_OUT {
            return Answer::Stall;
        }
        if self.halted_out {
            self.stats.stalls_answered += 1;
            return Answer::Stall;
        }
        self.bulk_out_data(now, data)
    }

    fn bulk_in(&mut self, now: Micros, endpoint: u8, max_len: usize) -> Answer {
        self.advance(now);
        if self.configuration != 1 || endpoint != EP_BULK_IN {
            return Answer::Stall;
        }
        if self.halted_in {
            self.stats.stalls_answered += 1;
            return Answer::Stall;
        }
        if self.in_transfer.is_none() {
            self.in_transfer = self.build_in_transfer(now);
        }
        let Some(transfer) = self.in_transfer.as_mut() else {
            if !self.rx_fifo.is_empty() || self.reg(reg::HW_CFG) & hw_cfg::BIR != 0 {
                return Answer::Pending; // data coming after the bulk-in delay, or NAK
            }
            self.stats.in_zlps += 1;
            return Answer::Data(Vec::new());
        };
        let left = transfer.data.len() - transfer.sent;
        if left == 0 {
            // Only the terminating ZLP is due.
            self.in_transfer = None;
            self.stats.in_zlps += 1;
            return Answer::Data(Vec::new());
        }
        let n = left.min(max_len);
        let chunk = transfer.data[transfer.sent..transfer.sent + n].to_vec();
        transfer.sent += n;
        // Data that ends on a packet boundary is terminated by a ZLP, which the next IN
        // token (the host's continuation, or its next transfer) gets.
        if transfer.sent == transfer.data.len() && !transfer.zlp_due {
            self.in_transfer = None;
        }
        Answer::Data(chunk)
    }

    fn interrupt_in(&mut self, now: Micros, endpoint: u8) -> Option<Vec<u8>> {
        self.advance(now);
        if self.configuration != 1 || endpoint != EP_INTERRUPT {
            return None;
        }
        let mut status = self.reg(reg::INT_STS);
        if self.phy_interrupt_active() {
            status |= int::PHY;
        }
        if status & self.reg(reg::INT_EP_CTL) == 0 {
            return None;
        }
        self.stats.interrupts_sent += 1;
        Some(status.to_le_bytes().to_vec())
    }

    fn bus_reset(&mut self, now: Micros) {
        // A USB reset resets the USB side (configuration, toggles, halts), not the MAC.
        self.note(now, Access::BusReset);
        self.configuration = 0;
        self.halted_in = false;
        self.halted_out = false;
        self.in_transfer = None;
        self.out_buf.clear();
    }

    fn poll(&mut self, now: Micros) -> Option<Micros> {
        self.advance(now);
        let mut next: Option<Micros> = None;
        let mut consider = |t: Option<Micros>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Micros| n.min(t)));
            }
        };
        consider(self.mii_done_at);
        consider(self.e2p_done_at);
        consider(self.lrst_done_at);
        consider(self.phy_rst_done_at);
        consider(self.phy.reset_until);
        consider(self.phy.aneg_done_at);
        if let Some(first) = self.rx_fifo.front() {
            let delay = Micros::from(self.reg(reg::BULK_IN_DLY) & 0xFFFF) * 16_667 / 1_000_000;
            consider(Some((first.arrived + delay).max(now)));
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(chip: &mut Smsc95xx, now: Micros, r: u16, v: u32) {
        let setup = ControlHeader {
            endpoint: 0,
            request: 0xA0,
            request_type: 0x40,
            status: 0,
            value: 0,
            index: r,
            length: 4,
        };
        assert_eq!(
            chip.control(now, &setup, &v.to_le_bytes()),
            Answer::Data(Vec::new())
        );
    }

    fn read(chip: &mut Smsc95xx, now: Micros, r: u16) -> u32 {
        let setup = ControlHeader {
            endpoint: 0x80,
            request: 0xA1,
            request_type: 0xC0,
            status: 0,
            value: 0,
            index: r,
            length: 4,
        };
        match chip.control(now, &setup, &[]) {
            Answer::Data(d) => u32::from_le_bytes(d.try_into().unwrap()),
            other => panic!("{other:?}"),
        }
    }

    fn phy_read(chip: &mut Smsc95xx, now: Micros, r: u8) -> u16 {
        write(
            chip,
            now,
            reg::MII_ADDR,
            PHY_ADDRESS << 11 | u32::from(r) << 6 | mii::BUSY,
        );
        assert_eq!(read(chip, now + 100, reg::MII_ADDR) & mii::BUSY, 0);
        read(chip, now + 100, reg::MII_DATA) as u16
    }

    fn frame(dest: [u8; 6], len: usize) -> Vec<u8> {
        let mut f = dest.to_vec();
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 9, 0x08, 0x00]);
        f.resize(len, 0xAB);
        f
    }

    fn up(chip: &mut Smsc95xx) -> Micros {
        assert!(chip.set_configuration(0, 1));
        let t = DEFAULT_ANEG_US + 1;
        chip.advance(t);
        write(chip, t, reg::MAC_CR, mac_cr::RXEN | mac_cr::TXEN);
        write(chip, t, reg::TX_CFG, 0x4);
        write(chip, t, reg::HW_CFG, hw_cfg::BIR);
        t
    }

    #[test]
    fn fcs_and_hash_match_known_values() {
        // The FCS of "123456789" is the CRC-32 check value 0xCBF43926.
        assert_eq!(u32::from_le_bytes(fcs(b"123456789")), 0xCBF4_3926);
        // Linux's comment in smsc95xx_hash: 01:00:5E:00:00:01 -> bit 31.
        assert_eq!(hash_bit(&[0x01, 0x00, 0x5E, 0x00, 0x00, 0x01]), 31);
    }

    #[test]
    fn lite_reset_self_clears_and_restores_defaults() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        write(&mut chip, 0, reg::BULK_IN_DLY, 0x2000);
        write(&mut chip, 10, reg::HW_CFG, hw_cfg::LRST);
        assert_ne!(read(&mut chip, 20, reg::HW_CFG) & hw_cfg::LRST, 0);
        assert_eq!(read(&mut chip, 20 + LRST_US, reg::HW_CFG) & hw_cfg::LRST, 0);
        assert_eq!(
            read(&mut chip, 30 + LRST_US, reg::BULK_IN_DLY),
            BULK_IN_DLY_DEFAULT
        );
        assert_eq!(read(&mut chip, 30 + LRST_US, reg::ID_REV), ID_REV_LAN9514);
    }

    #[test]
    fn phy_link_latches_low_and_interrupt_is_read_only_in_int_sts() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        assert_eq!(phy_read(&mut chip, t, phy::ID1), 0x0007);
        assert_ne!(phy_read(&mut chip, t, phy::BMSR) & phy::BMSR_LINK, 0);
        // Enable the link-down interrupt, pull the cable.
        write(
            &mut chip,
            t,
            reg::MII_DATA,
            u32::from(phy::INT_LINK_DOWN | phy::INT_ANEG_COMPLETE),
        );
        write(
            &mut chip,
            t,
            reg::MII_ADDR,
            PHY_ADDRESS << 11 | u32::from(phy::INT_MASK) << 6 | mii::WRITE | mii::BUSY,
        );
        phy_read(&mut chip, t + 200, phy::INT_SRC); // clear the old sources
        write(&mut chip, t, reg::INT_EP_CTL, int::PHY);
        assert_eq!(chip.interrupt_in(t + 300, EP_INTERRUPT), None);
        chip.set_cable(t + 400, false);
        let report = chip
            .interrupt_in(t + 500, EP_INTERRUPT)
            .expect("PHY interrupt");
        assert_eq!(
            u32::from_le_bytes(report.try_into().unwrap()) & int::PHY,
            int::PHY
        );
        // Writing INT_STS does not clear it; reading the PHY's source does.
        write(&mut chip, t + 600, reg::INT_STS, 0xFFFF_FFFF);
        assert_ne!(read(&mut chip, t + 600, reg::INT_STS) & int::PHY, 0);
        assert_eq!(
            phy_read(&mut chip, t + 700, phy::INT_SRC),
            phy::INT_LINK_DOWN
        );
        assert_eq!(read(&mut chip, t + 800, reg::INT_STS) & int::PHY, 0);
        // Cable back: link comes up only after auto-negotiation; BMSR latched the drop.
        chip.set_cable(t + 900, true);
        assert_eq!(phy_read(&mut chip, t + 1000, phy::BMSR) & phy::BMSR_LINK, 0);
        let later = t + 1000 + DEFAULT_ANEG_US;
        assert_ne!(phy_read(&mut chip, later, phy::BMSR) & phy::BMSR_LINK, 0);
        assert_ne!(
            phy_read(&mut chip, later, phy::INT_SRC) & phy::INT_ANEG_COMPLETE,
            0
        );
    }

    #[test]
    fn sef_transfer_holds_one_frame_with_offset_and_fcs() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        write(&mut chip, t, reg::HW_CFG, hw_cfg::BIR | 2 << 9); // RXDOFF 2, as Linux sets it
        let f = frame([0xFF; 6], 42);
        assert!(chip.receive_from_wire(t, &f));
        assert!(chip.receive_from_wire(t, &f));
        let Answer::Data(data) = chip.bulk_in(t, EP_BULK_IN, 18944) else {
            panic!()
        };
        let status = u32::from_le_bytes(data[..4].try_into().unwrap());
        assert_eq!((status >> 16) as usize, 64, "padded to 60 plus FCS");
        assert_eq!(data.len(), 4 + 2 + 64, "SEF: no trailing padding");
        assert_eq!(&data[6..6 + 42], &f[..]);
        assert_eq!(&data[6 + 60..], &fcs(&data[6..6 + 60]));
        // The second frame is the next transfer; then the FIFO is empty and BIR NAKs.
        assert!(matches!(chip.bulk_in(t, EP_BULK_IN, 18944), Answer::Data(d) if d.len() == 70));
        assert_eq!(chip.bulk_in(t, EP_BULK_IN, 18944), Answer::Pending);
        write(&mut chip, t, reg::HW_CFG, 0);
        assert_eq!(chip.bulk_in(t, EP_BULK_IN, 18944), Answer::Data(Vec::new()));
    }

    #[test]
    fn mef_packs_frames_within_the_burst_cap_after_the_bulk_in_delay() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        write(
            &mut chip,
            t,
            reg::HW_CFG,
            hw_cfg::BIR | hw_cfg::MEF | hw_cfg::BCE,
        );
        write(&mut chip, t, reg::BURST_CAP, 4); // 2048 bytes
        write(&mut chip, t, reg::BULK_IN_DLY, 0x2000); // ~136 µs
        for len in [100, 101, 700] {
            assert!(chip.receive_from_wire(t, &frame([0xFF; 6], len)));
        }
        assert_eq!(
            chip.bulk_in(t + 10, EP_BULK_IN, 2048),
            Answer::Pending,
            "bulk-in delay"
        );
        let Answer::Data(data) = chip.bulk_in(t + 200, EP_BULK_IN, 2048) else {
            panic!()
        };
        let mut offset = 0;
        let mut lens = Vec::new();
        while offset < data.len() {
            let status = u32::from_le_bytes(data[offset..offset + 4].try_into().unwrap());
            let fl = (status >> 16) as usize;
            lens.push(fl - 4);
            offset = (offset + 4 + fl + 3) & !3;
        }
        assert_eq!(lens, vec![100, 101, 700]);
        assert_eq!(chip.stats.multi_frame_transfers, 1);
        // More than the burst cap already queued: the burst goes at once, without the frame
        // that does not fit, which follows in the next transfer.
        for len in [1514, 1514] {
            assert!(chip.receive_from_wire(t + 300, &frame([0xFF; 6], len)));
        }
        let Answer::Data(one) = chip.bulk_in(t + 301, EP_BULK_IN, 2048) else {
            panic!()
        };
        assert_eq!(one.len(), (4 + 1518 + 3) & !3);
        let Answer::Data(rest) = chip.bulk_in(t + 500, EP_BULK_IN, 2048) else {
            panic!()
        };
        assert_eq!(rest.len(), (4 + 1518 + 3) & !3);
    }

    #[test]
    fn a_transfer_ending_on_a_packet_boundary_is_followed_by_a_zlp() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        // 4 + 504 + 4 = 512 bytes: one full packet.
        assert!(chip.receive_from_wire(t, &frame([0xFF; 6], 504)));
        assert!(chip.receive_from_wire(t, &frame([0xFF; 6], 60)));
        let Answer::Data(first) = chip.bulk_in(t, EP_BULK_IN, 2048) else {
            panic!()
        };
        assert_eq!(first.len(), 512);
        assert_eq!(
            chip.bulk_in(t, EP_BULK_IN, 1536),
            Answer::Data(Vec::new()),
            "ZLP"
        );
        let Answer::Data(second) = chip.bulk_in(t, EP_BULK_IN, 2048) else {
            panic!()
        };
        assert_eq!(second.len(), 68);
    }

    #[test]
    fn tx_commands_are_checked_and_a_bad_one_stalls_bulk_out() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        let f = frame([0x02, 1, 2, 3, 4, 5], 98);
        let mut transfer = Vec::new();
        transfer
            .extend_from_slice(&(98u32 | tx_cmd::A_FIRST_SEG | tx_cmd::A_LAST_SEG).to_le_bytes());
        transfer.extend_from_slice(&98u32.to_le_bytes());
        transfer.extend_from_slice(&f);
        assert_eq!(
            chip.bulk_out(t, EP_BULK_OUT, &transfer),
            Answer::Data(Vec::new())
        );
        assert_eq!(chip.take_wire_frames(), vec![f.clone()]);
        // Frame length that does not match: loss of sync, STALL until CLEAR_FEATURE.
        let mut bad = transfer.clone();
        bad[4] = 97;
        assert_eq!(chip.bulk_out(t, EP_BULK_OUT, &bad), Answer::Stall);
        assert_eq!(chip.bulk_out(t, EP_BULK_OUT, &transfer), Answer::Stall);
        let clear = ControlHeader {
            endpoint: 0,
            request: 1,
            request_type: 0x02,
            status: 0,
            value: 0,
            index: 0x02,
            length: 0,
        };
        assert_eq!(chip.control(t, &clear, &[]), Answer::Data(Vec::new()));
        assert_eq!(
            chip.bulk_out(t, EP_BULK_OUT, &transfer),
            Answer::Data(Vec::new())
        );
        assert_eq!(chip.stats.tx_errors, 1);
        assert_eq!(chip.stats.tx_frames, 2);
    }

    #[test]
    fn a_pad_byte_after_a_frame_ending_on_a_packet_boundary_is_a_loss_of_sync() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        let f = frame([0x02, 1, 2, 3, 4, 5], 504);
        let mut transfer = Vec::new();
        transfer
            .extend_from_slice(&(504u32 | tx_cmd::A_FIRST_SEG | tx_cmd::A_LAST_SEG).to_le_bytes());
        transfer.extend_from_slice(&504u32.to_le_bytes());
        transfer.extend_from_slice(&f);
        // With a ZLP after the 512 bytes (Linux: FLAG_SEND_ZLP) all is well.
        assert_eq!(
            chip.bulk_out(t, EP_BULK_OUT, &transfer),
            Answer::Data(Vec::new())
        );
        assert_eq!(chip.bulk_out(t, EP_BULK_OUT, &[]), Answer::Data(Vec::new()));
        assert_eq!(chip.take_wire_frames(), vec![f.clone()]);
        // With one pad byte instead, the frame goes out but the byte is read as a command.
        transfer.push(0);
        assert_eq!(chip.bulk_out(t, EP_BULK_OUT, &transfer), Answer::Stall);
        assert_eq!(chip.take_wire_frames(), vec![f]);
        assert_eq!(chip.stats.tx_errors, 1);
    }

    #[test]
    fn packets_of_a_split_transfer_are_reassembled() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        let f = frame([0x02, 1, 2, 3, 4, 5], 1000);
        let mut transfer = Vec::new();
        transfer
            .extend_from_slice(&(1000u32 | tx_cmd::A_FIRST_SEG | tx_cmd::A_LAST_SEG).to_le_bytes());
        transfer.extend_from_slice(&1000u32.to_le_bytes());
        transfer.extend_from_slice(&f);
        // QEMU's DWC2 moves transfers of up to 1536 bytes one max packet at a time.
        assert_eq!(
            chip.bulk_out(t, EP_BULK_OUT, &transfer[..512]),
            Answer::Data(Vec::new())
        );
        assert!(chip.take_wire_frames().is_empty());
        assert_eq!(
            chip.bulk_out(t, EP_BULK_OUT, &transfer[512..]),
            Answer::Data(Vec::new())
        );
        assert_eq!(chip.take_wire_frames(), vec![f]);
    }

    #[test]
    fn tx_checksum_offload_inserts_the_folded_complement() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        write(&mut chip, t, reg::COE_CR, 0x1_0000);
        let mut f = frame([0x02, 1, 2, 3, 4, 5], 80);
        f[40] = 0; // checksum field at 40..42, pseudo-header sum 0 for the test
        f[41] = 0;
        let (start, place) = (34u32, 40u32);
        let mut transfer = Vec::new();
        let len = 4 + f.len() as u32;
        transfer.extend_from_slice(&(len | tx_cmd::A_FIRST_SEG | tx_cmd::A_LAST_SEG).to_le_bytes());
        transfer.extend_from_slice(&(len | tx_cmd::B_CSUM).to_le_bytes());
        transfer.extend_from_slice(&(start | place << 16).to_le_bytes());
        transfer.extend_from_slice(&f);
        chip.bulk_out(t, EP_BULK_OUT, &transfer);
        let sent = chip.take_wire_frames().pop().unwrap();
        assert_eq!(
            ones_sum(&sent[34..]),
            0xFFFF,
            "a correct checksum sums to all ones"
        );
        assert_eq!(chip.stats.tx_csum_offloaded, 1);
    }

    #[test]
    fn the_address_filter_follows_mac_cr() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        write(&mut chip, t, reg::ADDRL, 0x0300_0002);
        write(&mut chip, t, reg::ADDRH, 0x0504);
        let ours = [0x02, 0x00, 0x00, 0x03, 0x04, 0x05];
        let mdns = [0x01, 0x00, 0x5E, 0x00, 0x00, 0xFB];
        assert!(chip.receive_from_wire(t, &frame(ours, 60)));
        assert!(!chip.receive_from_wire(t, &frame([0x02, 9, 9, 9, 9, 9], 60)));
        assert!(!chip.receive_from_wire(t, &frame(mdns, 60)));
        write(
            &mut chip,
            t,
            reg::MAC_CR,
            mac_cr::RXEN | mac_cr::TXEN | mac_cr::MCPAS,
        );
        assert!(chip.receive_from_wire(t, &frame(mdns, 60)));
        assert_eq!(chip.stats.rx_filtered, 2);
    }

    #[test]
    fn without_an_eeprom_commands_time_out() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        assert_eq!(read(&mut chip, 0, reg::E2P_CMD) & e2p::LOADED, 0);
        write(&mut chip, 0, reg::E2P_CMD, e2p::BUSY | e2p::READ | 1);
        assert_ne!(read(&mut chip, 10, reg::E2P_CMD) & e2p::BUSY, 0);
        let done = read(&mut chip, E2P_TIMEOUT_US, reg::E2P_CMD);
        assert_eq!(done & (e2p::BUSY | e2p::TIMEOUT), e2p::TIMEOUT);
        let mut with =
            Smsc95xx::new(true, Partner::Switch).with_eeprom_mac([2, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(read(&mut with, 0, reg::ADDRL), 0x3322_1102);
        write(&mut with, 0, reg::E2P_CMD, e2p::BUSY | e2p::READ | 2);
        assert_eq!(read(&mut with, E2P_CMD_US, reg::E2P_DATA), 0x11);
    }

    #[test]
    fn injected_rx_errors_come_as_flagged_copies() {
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let t = up(&mut chip);
        chip.inject_rx_errors(1);
        assert!(chip.receive_from_wire(t, &frame([0xFF; 6], 60)));
        let Answer::Data(bad) = chip.bulk_in(t, EP_BULK_IN, 2048) else {
            panic!()
        };
        let status = u32::from_le_bytes(bad[..4].try_into().unwrap());
        assert_eq!(
            status & (rx_sts::ES | rx_sts::CRC),
            rx_sts::ES | rx_sts::CRC
        );
        let Answer::Data(good) = chip.bulk_in(t, EP_BULK_IN, 2048) else {
            panic!()
        };
        assert_eq!(
            u32::from_le_bytes(good[..4].try_into().unwrap()) & rx_sts::ES,
            0
        );
    }
}
