//! Driver for the SMSC LAN95xx USB Ethernet function (the Pi B+'s LAN9514, `0424:ec00`):
//! vendor register access over EP0, PHY through MII_ADDR/MII_DATA, bulk framing with TX
//! command words and RX status words. Register map and init order from the reference §3
//! (Linux `smsc95xx.{c,h}`, U-Boot `smsc95xx.c`, Circle `smsc951x.cpp`).
//!
//! Checked against an independent model of the chip that Linux's driver accepts
//! (`usbredir/`, see the crate docs): the register sequence differs from Linux 6.1's only
//! where `usbredir/tests/register_sequence.rs` says why (MAC from the board instead of the
//! EEPROM, no RX data offset, no checksum offload, all multicast instead of the hash table,
//! the BMSR polled once a second instead of the PHY interrupt on the interrupt endpoint).

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};

use crate::descriptor::{ConfigurationDescriptor, Endpoint, EndpointKind};
use crate::device::{UsbDevice, set_configuration};
use crate::nic::{BulkPipes, DataPath, NicStats, RX_BUFFER_LEN, RxRecord, open_bulk_pipes};
use bramble_hal::usb::{SetupPacket, Speed, UsbError, UsbHost};

/// Vendor request: write a 32-bit register (`bmRequestType` 0x40).
pub const REQUEST_WRITE_REGISTER: u8 = 0xA0;
/// Vendor request: read a 32-bit register (`bmRequestType` 0xC0).
pub const REQUEST_READ_REGISTER: u8 = 0xA1;

/// Register offsets (reference §3.2).
pub mod reg {
    /// Chip ID and revision; upper half 0xEC00 on the LAN9512/9514.
    pub const ID_REV: u16 = 0x00;
    /// Interrupt status (write 1 to clear).
    pub const INT_STS: u16 = 0x08;
    /// Receive configuration.
    pub const RX_CFG: u16 = 0x0C;
    /// Transmit configuration.
    pub const TX_CFG: u16 = 0x10;
    /// Hardware configuration.
    pub const HW_CFG: u16 = 0x14;
    /// Power management control.
    pub const PM_CTRL: u16 = 0x20;
    /// LED and GPIO configuration.
    pub const LED_GPIO_CFG: u16 = 0x24;
    /// Automatic flow control configuration.
    pub const AFC_CFG: u16 = 0x2C;
    /// Bulk-IN burst cap, in max-packet units.
    pub const BURST_CAP: u16 = 0x38;
    /// Interrupt endpoint control.
    pub const INT_EP_CTL: u16 = 0x68;
    /// Bulk-IN delay, in 16.667 ns units.
    pub const BULK_IN_DLY: u16 = 0x6C;
    /// MAC control.
    pub const MAC_CR: u16 = 0x100;
    /// MAC address bytes 4-5.
    pub const ADDRH: u16 = 0x104;
    /// MAC address bytes 0-3.
    pub const ADDRL: u16 = 0x108;
    /// MII management address/command.
    pub const MII_ADDR: u16 = 0x114;
    /// MII management data.
    pub const MII_DATA: u16 = 0x118;
    /// Flow control.
    pub const FLOW: u16 = 0x11C;
    /// VLAN1 tag.
    pub const VLAN1: u16 = 0x120;
    /// Checksum offload control.
    pub const COE_CR: u16 = 0x130;
}

/// HW_CFG bits.
pub mod hw_cfg {
    /// Bulk-IN empty response (set: NAK when the RX FIFO is empty).
    pub const BIR: u32 = 0x1000;
    /// RX data offset (bits 10:9).
    pub const RXDOFF: u32 = 0x600;
    /// Multiple Ethernet frames per bulk-IN transfer.
    pub const MEF: u32 = 0x20;
    /// Lite reset (self-clearing).
    pub const LRST: u32 = 0x8;
    /// Burst cap enable.
    pub const BCE: u32 = 0x2;
}

/// PM_CTRL: PHY reset (self-clearing).
pub const PM_CTRL_PHY_RST: u32 = 0x10;
/// TX_CFG: transmitter on.
pub const TX_CFG_ON: u32 = 0x4;
/// INT_EP_CTL: report PHY interrupts on the interrupt endpoint.
pub const INT_EP_CTL_PHY: u32 = 0x8000;
/// AFC_CFG default from Linux (`AFC_CFG_DEFAULT`).
pub const AFC_CFG_DEFAULT: u32 = 0x00F8_30A1;
/// Bulk-IN delay: 0x2000 × 16.667 ns ≈ 136 µs (Linux `DEFAULT_BULK_IN_DELAY`).
pub const BULK_IN_DELAY: u32 = 0x2000;
/// LED_GPIO_CFG: speed, link and full-duplex LEDs (Circle).
pub const LED_GPIO_CFG_LEDS: u32 = 0x0111_0000;

/// MAC_CR bits.
pub mod mac_cr {
    /// Disable receive own (half duplex).
    pub const RCVOWN: u32 = 0x0080_0000;
    /// Full duplex.
    pub const FDPX: u32 = 0x0010_0000;
    /// Pass all multicast.
    pub const MCPAS: u32 = 0x0008_0000;
    /// Transmitter enable.
    pub const TXEN: u32 = 0x8;
    /// Receiver enable.
    pub const RXEN: u32 = 0x4;
}

/// MII_ADDR bits and fields.
pub mod mii {
    /// Operation in progress.
    pub const BUSY: u32 = 0x1;
    /// Write (clear: read).
    pub const WRITE: u32 = 0x2;
    /// The internal PHY's address.
    pub const PHY_ADDRESS: u32 = 1;
    /// MII_ADDR value for an access to `reg`.
    pub const fn address(reg: u8) -> u32 {
        (PHY_ADDRESS << 11) | ((reg as u32) << 6)
    }
}

/// PHY registers and bits (IEEE 802.3 clause 22 plus the SMSC vendor registers).
pub mod phy {
    /// Basic control.
    pub const BMCR: u8 = 0;
    /// Basic status.
    pub const BMSR: u8 = 1;
    /// Auto-negotiation advertisement.
    pub const ADVERTISE: u8 = 4;
    /// Link partner ability.
    pub const LPA: u8 = 5;
    /// SMSC: interrupt source (read clears).
    pub const INT_SRC: u8 = 29;
    /// SMSC: interrupt mask.
    pub const INT_MASK: u8 = 30;
    /// BMCR: reset (self-clearing).
    pub const BMCR_RESET: u16 = 0x8000;
    /// BMCR: auto-negotiation enable.
    pub const BMCR_ANENABLE: u16 = 0x1000;
    /// BMCR: restart auto-negotiation.
    pub const BMCR_ANRESTART: u16 = 0x0200;
    /// BMSR: link up (latches low).
    pub const BMSR_LINK: u16 = 0x0004;
    /// ADVERTISE: 802.3 selector.
    pub const ADVERTISE_CSMA: u16 = 0x0001;
    /// ADVERTISE: 10 half.
    pub const ADVERTISE_10HALF: u16 = 0x0020;
    /// ADVERTISE: 10 full.
    pub const ADVERTISE_10FULL: u16 = 0x0040;
    /// ADVERTISE: 100 half.
    pub const ADVERTISE_100HALF: u16 = 0x0080;
    /// ADVERTISE: 100 full.
    pub const ADVERTISE_100FULL: u16 = 0x0100;
    /// ADVERTISE: symmetric pause.
    pub const ADVERTISE_PAUSE: u16 = 0x0400;
    /// ADVERTISE: asymmetric pause.
    pub const ADVERTISE_PAUSE_ASYM: u16 = 0x0800;
    /// INT_MASK: auto-negotiation complete.
    pub const INT_ANEG_COMPLETE: u16 = 0x0040;
    /// INT_MASK: link down.
    pub const INT_LINK_DOWN: u16 = 0x0010;
}

/// TX command word A bits (reference §3.4).
pub mod tx_cmd {
    /// First segment of a frame.
    pub const A_FIRST_SEG: u32 = 0x2000;
    /// Last segment of a frame.
    pub const A_LAST_SEG: u32 = 0x1000;
    /// Buffer size field (bits 10:0).
    pub const A_BUF_SIZE: u32 = 0x7FF;
    /// Frame length field of word B (bits 10:0).
    pub const B_FRAME_LENGTH: u32 = 0x7FF;
}

/// RX status word bits (reference §3.5).
pub mod rx_sts {
    /// Filtering fail.
    pub const FF: u32 = 0x4000_0000;
    /// Frame length including CRC (bits 29:16).
    pub const FL_SHIFT: u32 = 16;
    /// Frame length mask after the shift.
    pub const FL_MASK: u32 = 0x3FFF;
    /// Error summary.
    pub const ES: u32 = 0x8000;
    /// Length error.
    pub const LE: u32 = 0x1000;
    /// Frame too long.
    pub const TL: u32 = 0x0080;
    /// Collision seen.
    pub const CS: u32 = 0x0040;
    /// Receive watchdog timeout.
    pub const RW: u32 = 0x0010;
    /// MII error.
    pub const ME: u32 = 0x0008;
    /// Dribbling bit.
    pub const DB: u32 = 0x0004;
    /// CRC error.
    pub const CRC: u32 = 0x0002;
    /// Every bit that makes Bramble drop the frame (Circle's set).
    pub const DROP: u32 = FF | ES | LE | TL | CS | RW | ME | DB | CRC;
}

/// Bytes of the TX command words in front of each frame.
pub const TX_HEADER_LEN: usize = 8;
/// Bytes of the RX status word in front of each frame.
pub const RX_STATUS_LEN: usize = 4;
/// Length of the FCS the chip leaves at the end of received frames.
pub const FCS_LEN: usize = 4;
/// Register polls before a self-clearing bit counts as stuck.
const RESET_POLLS: u32 = 100;
/// Link state is read from the PHY at most this often (each read is 3+ control transfers).
pub const LINK_POLL_INTERVAL_US: u64 = 1_000_000;

/// High-speed burst cap in 512-byte packets: (16 KiB + 5 × 512) / 512, Linux's turbo mode.
pub const HS_BURST_CAP_PACKETS: u32 = 37;
/// Full-speed burst cap in 64-byte packets: (6 KiB + 33 × 64) / 64 (Linux).
pub const FS_BURST_CAP_PACKETS: u32 = 129;

/// The endpoints the driver uses, found in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmscBinding {
    /// `bConfigurationValue`.
    pub config_value: u8,
    /// Bulk-IN (frames from the wire).
    pub bulk_in: Endpoint,
    /// Bulk-OUT (frames to the wire).
    pub bulk_out: Endpoint,
}

impl SmscBinding {
    /// Finds the bulk pair in interface 0 of the (only) configuration.
    pub fn find(config: &ConfigurationDescriptor<'_>) -> Option<Self> {
        let interface = config.interface(0, 0)?;
        Some(Self {
            config_value: config.value(),
            bulk_in: interface.find_endpoint(EndpointKind::Bulk, true)?,
            bulk_out: interface.find_endpoint(EndpointKind::Bulk, false)?,
        })
    }
}

/// Whether the device is one this driver handles (LAN9500/9512/9514 family).
pub fn matches(vendor_id: u16, product_id: u16) -> bool {
    vendor_id == 0x0424 && matches!(product_id, 0xec00 | 0x9500 | 0x9e00)
}

/// Driver options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmscOptions {
    /// The MAC address to program (on a Pi: from the mailbox, the chip has no EEPROM).
    /// `None` keeps what the chip holds.
    pub mac: Option<MacAddress>,
    /// Let the chip pack several frames per bulk-IN transfer (MEF with burst cap and bulk-in
    /// delay, Linux's "turbo mode"). Avoids the RX FIFO overruns of one frame per transfer.
    pub multiple_frames: bool,
}

impl Default for SmscOptions {
    fn default() -> Self {
        Self {
            mac: None,
            multiple_frames: true,
        }
    }
}

/// Decodes the record at `offset` of a bulk-IN transfer; `None` at the end.
pub fn parse_rx_record(data: &[u8], offset: usize) -> Option<RxRecord> {
    if offset >= data.len() {
        return None;
    }
    if offset + RX_STATUS_LEN > data.len() {
        return Some(RxRecord::Truncated);
    }
    let status = u32::from_le_bytes([
        data[offset],
        data[offset + 1],
        data[offset + 2],
        data[offset + 3],
    ]);
    let frame_len = ((status >> rx_sts::FL_SHIFT) & rx_sts::FL_MASK) as usize;
    let start = offset + RX_STATUS_LEN;
    if start + frame_len > data.len() {
        return Some(RxRecord::Truncated);
    }
    let next = (start + frame_len + 3) & !3;
    if frame_len == 0 {
        return Some(RxRecord::Truncated);
    }
    if status & rx_sts::DROP != 0 || !(FCS_LEN + 14..=MAX_FRAME_LEN + FCS_LEN).contains(&frame_len)
    {
        return Some(RxRecord::Skip { next });
    }
    Some(RxRecord::Frame {
        start,
        len: frame_len - FCS_LEN,
        next,
    })
}

/// Writes the two TX command words for a `len`-byte frame sent as one segment.
pub fn write_tx_header(buf: &mut [u8], len: usize) {
    let len = len as u32;
    let a = (len & tx_cmd::A_BUF_SIZE) | tx_cmd::A_FIRST_SEG | tx_cmd::A_LAST_SEG;
    let b = len & tx_cmd::B_FRAME_LENGTH;
    buf[0..4].copy_from_slice(&a.to_le_bytes());
    buf[4..8].copy_from_slice(&b.to_le_bytes());
}

/// Register and PHY access over EP0.
struct Registers<'a, H: UsbHost + ?Sized> {
    host: &'a mut H,
    device: &'a UsbDevice,
}

impl<H: UsbHost + ?Sized> Registers<'_, H> {
    fn read(&mut self, reg: u16) -> Result<u32, UsbError> {
        let mut buf = [0u8; 4];
        let n = self.host.control_in(
            &self.device.target,
            SetupPacket {
                request_type: 0xC0,
                request: REQUEST_READ_REGISTER,
                value: 0,
                index: reg,
                length: 4,
            },
            &mut buf,
        )?;
        if n != 4 {
            return Err(UsbError::Protocol);
        }
        Ok(u32::from_le_bytes(buf))
    }

    fn write(&mut self, reg: u16, value: u32) -> Result<(), UsbError> {
        self.host.control_out(
            &self.device.target,
            SetupPacket {
                request_type: 0x40,
                request: REQUEST_WRITE_REGISTER,
                value: 0,
                index: reg,
                length: 4,
            },
            &value.to_le_bytes(),
        )
    }

    /// Sets `bits` and waits (bounded) for the chip to clear them.
    fn self_clearing(&mut self, reg: u16, bits: u32) -> Result<(), UsbError> {
        let value = self.read(reg)?;
        self.write(reg, value | bits)?;
        for _ in 0..RESET_POLLS {
            if self.read(reg)? & bits == 0 {
                return Ok(());
            }
            self.host.delay_ms(10);
        }
        log::error!("smsc95xx: register {reg:#x} bits {bits:#x} did not clear");
        Err(UsbError::Timeout)
    }

    fn mii_wait(&mut self) -> Result<(), UsbError> {
        for i in 0..RESET_POLLS {
            if self.read(reg::MII_ADDR)? & mii::BUSY == 0 {
                return Ok(());
            }
            if i > 2 {
                self.host.delay_ms(1);
            }
        }
        log::error!("smsc95xx: MII stays busy");
        Err(UsbError::Timeout)
    }

    fn phy_read(&mut self, phy_reg: u8) -> Result<u16, UsbError> {
        self.mii_wait()?;
        self.write(reg::MII_ADDR, mii::address(phy_reg) | mii::BUSY)?;
        self.mii_wait()?;
        Ok(self.read(reg::MII_DATA)? as u16)
    }

    fn phy_write(&mut self, phy_reg: u8, value: u16) -> Result<(), UsbError> {
        self.mii_wait()?;
        self.write(reg::MII_DATA, value as u32)?;
        self.write(
            reg::MII_ADDR,
            mii::address(phy_reg) | mii::WRITE | mii::BUSY,
        )?;
        self.mii_wait()
    }
}

/// A running LAN95xx.
pub struct Smsc95xx<H: UsbHost> {
    path: DataPath<H>,
    mac: MacAddress,
    link: LinkState,
    full_duplex: bool,
    last_link_poll: Option<Instant>,
}

impl<H: UsbHost> Smsc95xx<H> {
    /// Configures the device and runs the full init sequence (reference §3.3, "full"); on
    /// failure the host is handed back for a re-probe.
    pub fn new(
        mut host: H,
        device: UsbDevice,
        binding: SmscBinding,
        options: SmscOptions,
    ) -> Result<Self, (UsbError, H)> {
        match Self::init(&mut host, &device, binding, options) {
            Ok((pipes, mac, rx_len)) => Ok(Self {
                path: DataPath::new(host, device, pipes, rx_len),
                mac,
                link: LinkState::Down,
                full_duplex: false,
                last_link_poll: None,
            }),
            Err(e) => Err((e, host)),
        }
    }

    fn init(
        host: &mut H,
        device: &UsbDevice,
        binding: SmscBinding,
        options: SmscOptions,
    ) -> Result<(BulkPipes, MacAddress, usize), UsbError> {
        set_configuration(host, &device.target, binding.config_value)?;
        let mut regs = Registers {
            host: &mut *host,
            device,
        };
        regs.self_clearing(reg::HW_CFG, hw_cfg::LRST)?;
        regs.self_clearing(reg::PM_CTRL, PM_CTRL_PHY_RST)?;

        let mac = match options.mac {
            Some(mac) => {
                let m = mac.0;
                regs.write(reg::ADDRL, u32::from_le_bytes([m[0], m[1], m[2], m[3]]))?;
                regs.write(reg::ADDRH, u32::from_le_bytes([m[4], m[5], 0, 0]))?;
                mac
            }
            None => {
                let lo = regs.read(reg::ADDRL)?.to_le_bytes();
                let hi = regs.read(reg::ADDRH)?.to_le_bytes();
                MacAddress([lo[0], lo[1], lo[2], lo[3], hi[0], hi[1]])
            }
        };
        let id = regs.read(reg::ID_REV)?;
        log::info!(
            "smsc95xx: chip id {:#06x} rev {:#06x}, mac {mac}",
            id >> 16,
            id & 0xFFFF
        );

        let mut hw = regs.read(reg::HW_CFG)? | hw_cfg::BIR;
        regs.write(reg::HW_CFG, hw)?;

        let packet = binding.bulk_in.max_packet_size.max(8) as usize;
        let (burst_cap, rx_len) = if options.multiple_frames {
            let packets = if device.target.speed == Speed::High {
                HS_BURST_CAP_PACKETS
            } else {
                FS_BURST_CAP_PACKETS
            };
            (packets, packets as usize * packet)
        } else {
            (0, RX_BUFFER_LEN.div_ceil(packet) * packet)
        };
        regs.write(reg::BURST_CAP, burst_cap)?;
        regs.write(reg::BULK_IN_DLY, BULK_IN_DELAY)?;

        hw = regs.read(reg::HW_CFG)?;
        if options.multiple_frames {
            hw |= hw_cfg::MEF | hw_cfg::BCE;
        }
        hw &= !hw_cfg::RXDOFF;
        regs.write(reg::HW_CFG, hw)?;

        regs.write(reg::INT_STS, 0xFFFF_FFFF)?;
        regs.write(reg::LED_GPIO_CFG, LED_GPIO_CFG_LEDS)?;
        regs.write(reg::FLOW, 0)?;
        regs.write(reg::AFC_CFG, AFC_CFG_DEFAULT)?;
        regs.write(reg::VLAN1, 0x8100)?;
        regs.write(reg::COE_CR, 0)?;

        // PHY: reset, advertise 10/100 in both duplexes, interrupts for link changes,
        // auto-negotiate. No PAUSE: the driver does not program FLOW/AFC_CFG from the
        // negotiated result, so advertising flow control would promise what the MAC does not
        // do (Linux 6.1 advertises none either: "flow control off").
        regs.phy_write(phy::BMCR, phy::BMCR_RESET)?;
        let mut reset_done = false;
        for _ in 0..RESET_POLLS {
            if regs.phy_read(phy::BMCR)? & phy::BMCR_RESET == 0 {
                reset_done = true;
                break;
            }
            regs.host.delay_ms(10);
        }
        if !reset_done {
            log::error!("smsc95xx: PHY reset did not complete");
            return Err(UsbError::Timeout);
        }
        regs.phy_write(
            phy::ADVERTISE,
            phy::ADVERTISE_CSMA
                | phy::ADVERTISE_10HALF
                | phy::ADVERTISE_10FULL
                | phy::ADVERTISE_100HALF
                | phy::ADVERTISE_100FULL,
        )?;
        regs.phy_read(phy::INT_SRC)?;
        regs.phy_write(phy::INT_MASK, phy::INT_ANEG_COMPLETE | phy::INT_LINK_DOWN)?;
        regs.phy_write(phy::BMCR, phy::BMCR_ANENABLE | phy::BMCR_ANRESTART)?;

        let int_ep = regs.read(reg::INT_EP_CTL)?;
        regs.write(reg::INT_EP_CTL, int_ep | INT_EP_CTL_PHY)?;

        let mut mac_cr = regs.read(reg::MAC_CR)? | mac_cr::TXEN | mac_cr::MCPAS;
        regs.write(reg::MAC_CR, mac_cr)?;
        regs.write(reg::TX_CFG, TX_CFG_ON)?;
        mac_cr |= mac_cr::RXEN;
        regs.write(reg::MAC_CR, mac_cr)?;

        let pipes = open_bulk_pipes(
            host,
            device,
            binding.bulk_in,
            binding.bulk_out,
            rx_len,
            RX_BUFFER_LEN,
            true,
        )?;
        log::info!(
            "smsc95xx: up, {} frames per transfer, rx buffer {rx_len} bytes",
            if options.multiple_frames {
                "several"
            } else {
                "one"
            }
        );
        Ok((pipes, mac, rx_len))
    }

    /// Counters since start.
    pub fn stats(&self) -> NicStats {
        self.path.stats()
    }

    /// Whether the MAC runs in full duplex (from the last auto-negotiation result).
    pub fn full_duplex(&self) -> bool {
        self.full_duplex
    }

    /// The USB device.
    pub fn device(&self) -> &UsbDevice {
        self.path.device()
    }

    /// Gives the host back (after [`DeviceError::Gone`], to re-probe).
    pub fn into_host(self) -> H {
        self.path.into_host()
    }

    /// The host controller (for controller-specific calls such as interrupt handling).
    pub fn host_mut(&mut self) -> &mut H {
        self.path.host_mut()
    }

    /// Reads link and duplex from the PHY now and programs MAC_CR's duplex bits to match.
    pub fn refresh_link(&mut self) -> Result<LinkState, UsbError> {
        let (host, device) = self.path.host_and_device();
        let mut regs = Registers { host, device };
        // BMSR latches link-down: the first read reports a past drop, the second the present.
        regs.phy_read(phy::BMSR)?;
        let bmsr = regs.phy_read(phy::BMSR)?;
        let link = if bmsr & phy::BMSR_LINK != 0 {
            LinkState::Up
        } else {
            LinkState::Down
        };
        if link == LinkState::Up && self.link == LinkState::Down {
            regs.phy_read(phy::INT_SRC)?; // acknowledge the PHY interrupt
            let common = regs.phy_read(phy::ADVERTISE)? & regs.phy_read(phy::LPA)?;
            let full = if common & phy::ADVERTISE_100FULL != 0 {
                true
            } else if common & phy::ADVERTISE_100HALF != 0 {
                false
            } else {
                common & phy::ADVERTISE_10FULL != 0
            };
            let old = regs.read(reg::MAC_CR)?;
            let new = if full {
                (old | mac_cr::FDPX) & !mac_cr::RCVOWN
            } else {
                (old | mac_cr::RCVOWN) & !mac_cr::FDPX
            };
            if new != old {
                regs.write(reg::MAC_CR, new)?;
            }
            self.full_duplex = full;
            log::info!(
                "smsc95xx: link up, {} duplex",
                if full { "full" } else { "half" }
            );
        } else if link == LinkState::Down && self.link == LinkState::Up {
            log::warn!("smsc95xx: link down");
        }
        self.link = link;
        Ok(link)
    }
}

impl<H: UsbHost> EthernetDevice for Smsc95xx<H> {
    fn mac_address(&self) -> MacAddress {
        self.mac
    }

    fn link_state(&mut self) -> LinkState {
        let now = self.path.host_mut().now();
        let due = match self.last_link_poll {
            None => true,
            Some(t) => now.micros_since(t) >= LINK_POLL_INTERVAL_US,
        };
        if due {
            self.last_link_poll = Some(now);
            if let Err(e) = self.refresh_link() {
                log::warn!("smsc95xx: link poll failed: {e}");
                self.link = LinkState::Down;
            }
        }
        self.link
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        self.path.receive(parse_rx_record, f)
    }

    fn can_transmit(&mut self) -> bool {
        self.path.can_transmit()
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        // Saturating: an impossible `len` is refused by `transmit` before `fill` runs.
        // A transfer of whole packets ends with a ZLP (the pipe is opened with zero-length
        // termination), never with a pad byte: the URX passes every byte to the FCT, which
        // does not see transfer boundaries, so a pad byte would be read as the next TX
        // command A (LAN950x datasheet §5.3.1.2, Figure 5-5). Linux does the same
        // (smsc95xx sets FLAG_SEND_ZLP, so usbnet sends URB_ZERO_PACKET instead of padding).
        let total = TX_HEADER_LEN.saturating_add(len);
        self.path.transmit(len, total, |buf| {
            write_tx_header(buf, len);
            let result = f(&mut buf[TX_HEADER_LEN..total]);
            (total, result)
        })
    }

    /// The host's timed work (see [`UsbHost::poll_at`]); the driver has none of its own.
    fn poll_at(&mut self) -> Option<Instant> {
        self.path.poll_at()
    }

    fn poll_timers(&mut self) -> bool {
        self.path.poll_timers()
    }
}
