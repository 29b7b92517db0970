//! A model of the SMSC LAN9514 Ethernet function for host tests, written from the reference
//! §3 (Linux `smsc95xx.{c,h}`, U-Boot `smsc95xx.c`, Circle `smsc951x.cpp`, LAN9514/LAN950x
//! datasheets): the vendor register file behind requests 0xA0/0xA1, self-clearing reset bits,
//! the internal PHY behind MII_ADDR/MII_DATA (latched link status, auto-negotiation against
//! a configurable link partner), bulk-IN framing with RX status words (one frame per
//! transfer, or several with MEF within the burst cap, 4-byte aligned), the BIR choice
//! between NAK and a zero-length packet on an empty FIFO, and bulk-OUT parsing of TX command
//! words A/B with every inconsistency recorded as a violation.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::format;
use std::rc::Rc;
use std::string::{String, ToString};
use std::vec::Vec;

use super::{DeviceModel, StandardState};
use crate::smsc95xx::{
    PM_CTRL_PHY_RST, REQUEST_READ_REGISTER, REQUEST_WRITE_REGISTER, TX_CFG_ON, hw_cfg, mac_cr, mii,
    phy, reg, rx_sts, tx_cmd,
};
use bramble_hal::usb::{SetupPacket, Speed, UsbError};

/// A frame waiting in the chip's RX FIFO.
#[derive(Clone, Debug)]
pub struct RxEntry {
    /// Frame bytes without FCS.
    pub frame: Vec<u8>,
    /// Status error bits to report with it (0 for a good frame).
    pub errors: u32,
}

/// The link partner on the other end of the cable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partner {
    /// No cable.
    None,
    /// A switch advertising 10/100 full and half duplex.
    FullDuplex,
    /// An old hub advertising half duplex only.
    HalfDuplexOnly,
}

/// Chip state shared between the model on the bus and the test.
pub struct SmscState {
    /// Register file.
    pub regs: BTreeMap<u16, u32>,
    /// PHY registers.
    pub phy: [u16; 32],
    /// Protocol violations the driver committed.
    pub violations: Vec<String>,
    /// RX FIFO.
    pub rx: VecDeque<RxEntry>,
    /// Raw bulk-IN transfers to deliver before the FIFO (for truncation tests).
    pub raw_in: VecDeque<Vec<u8>>,
    /// Frames transmitted on the wire.
    pub tx: Vec<Vec<u8>>,
    /// Partner.
    pub partner: Partner,
    /// Reads of HW_CFG before LRST clears (`u32::MAX`: never).
    pub lrst_reads: u32,
    /// Number of register reads and writes.
    pub register_accesses: u32,
    /// Bulk-IN transfers delivered.
    pub in_transfers: u32,
    /// The bulk-OUT endpoint is halted: every OUT packet is answered STALL (the test clears
    /// it once the driver sent CLEAR_FEATURE(ENDPOINT_HALT)).
    pub halt_out: bool,
    mii_busy_reads: u32,
    phy_reset_reads: u32,
    link_latched_low: bool,
    out_buf: Vec<u8>,
}

/// The Ethernet function on the bus; clone the `state` handle to inspect it.
pub struct SmscModel {
    std: StandardState,
    /// Shared chip state.
    pub state: Rc<RefCell<SmscState>>,
}

const ID_REV_VALUE: u32 = 0xEC00_0002;
const BMSR_DEFAULT: u16 = 0x7849; // 100/10 full/half capable, AN capable, extended regs
const BMSR_ANEG_COMPLETE: u16 = 0x0020;

impl SmscModel {
    /// A LAN9514 Ethernet function at high speed.
    pub fn new(partner: Partner) -> (Self, Rc<RefCell<SmscState>>) {
        let state = Rc::new(RefCell::new(SmscState {
            regs: BTreeMap::new(),
            phy: [0; 32],
            violations: Vec::new(),
            rx: VecDeque::new(),
            raw_in: VecDeque::new(),
            tx: Vec::new(),
            partner,
            lrst_reads: 2,
            register_accesses: 0,
            in_transfers: 0,
            halt_out: false,
            mii_busy_reads: 0,
            phy_reset_reads: 0,
            link_latched_low: false,
            out_buf: Vec::new(),
        }));
        state.borrow_mut().power_on();
        let model = Self {
            std: StandardState::new(
                &crate::fixtures::LAN9514_ETH_DEVICE,
                &[&crate::fixtures::LAN9514_ETH_CONFIG],
                Speed::High,
            ),
            state: state.clone(),
        };
        (model, state)
    }
}

impl SmscState {
    fn power_on(&mut self) {
        self.regs.clear();
        self.regs.insert(reg::ID_REV, ID_REV_VALUE);
        self.regs.insert(reg::ADDRL, 0xFFFF_FFFF);
        self.regs.insert(reg::ADDRH, 0x0000_FFFF);
        self.reset_phy();
    }

    fn reset_phy(&mut self) {
        self.phy = [0; 32];
        self.phy[phy::BMCR as usize] = phy::BMCR_ANENABLE;
        self.phy[phy::BMSR as usize] = BMSR_DEFAULT;
        self.phy[phy::ADVERTISE as usize] = 0x01E1;
        self.link_latched_low = false;
    }

    /// Current value of a register.
    pub fn reg(&self, r: u16) -> u32 {
        self.regs.get(&r).copied().unwrap_or(0)
    }

    /// Queues a good frame.
    pub fn push_rx(&mut self, frame: &[u8]) {
        self.rx.push_back(RxEntry {
            frame: frame.to_vec(),
            errors: 0,
        });
    }

    /// Queues a frame the MAC flags with `errors` (plus the ES summary bit).
    pub fn push_rx_bad(&mut self, frame: &[u8], errors: u32) {
        self.rx.push_back(RxEntry {
            frame: frame.to_vec(),
            errors: errors | rx_sts::ES,
        });
    }

    /// Pulls the cable: link drops, and BMSR latches the drop.
    pub fn set_partner(&mut self, partner: Partner) {
        self.partner = partner;
        if partner == Partner::None {
            self.phy[phy::BMSR as usize] &= !(phy::BMSR_LINK | BMSR_ANEG_COMPLETE);
            self.link_latched_low = true;
            self.phy[phy::LPA as usize] = 0;
        } else {
            self.negotiate();
        }
    }

    fn negotiate(&mut self) {
        let lpa = match self.partner {
            Partner::None => return,
            Partner::FullDuplex => 0x45E1,
            Partner::HalfDuplexOnly => 0x40A1,
        };
        self.phy[phy::LPA as usize] = lpa;
        self.phy[phy::BMSR as usize] |= phy::BMSR_LINK | BMSR_ANEG_COMPLETE;
        self.phy[phy::INT_SRC as usize] |= phy::INT_ANEG_COMPLETE;
    }

    fn read_register(&mut self, r: u16) -> u32 {
        let mut value = self.reg(r);
        match r {
            reg::HW_CFG if value & hw_cfg::LRST != 0 => {
                if self.lrst_reads != u32::MAX {
                    if self.lrst_reads == 0 {
                        value &= !hw_cfg::LRST;
                        self.regs.insert(reg::HW_CFG, value);
                    } else {
                        self.lrst_reads -= 1;
                    }
                }
            }
            reg::PM_CTRL if value & PM_CTRL_PHY_RST != 0 => {
                if self.phy_reset_reads == 0 {
                    value &= !PM_CTRL_PHY_RST;
                    self.regs.insert(reg::PM_CTRL, value);
                    self.reset_phy();
                } else {
                    self.phy_reset_reads -= 1;
                }
            }
            reg::MII_ADDR if value & mii::BUSY != 0 => {
                if self.mii_busy_reads == 0 {
                    value &= !mii::BUSY;
                    self.regs.insert(reg::MII_ADDR, value);
                } else {
                    self.mii_busy_reads -= 1;
                }
            }
            _ => {}
        }
        value
    }

    fn write_register(&mut self, r: u16, value: u32) {
        match r {
            reg::ID_REV => self
                .violations
                .push("write to read-only ID_REV".to_string()),
            reg::INT_STS => {
                // Write one to clear. On the chip INT_STS.PHY_INT is read-only and follows
                // the PHY's interrupt output (LAN950x datasheet §7.3.2; Linux "usbnet:
                // smsc95xx: Don't clear read-only PHY interrupt"): this model leaves the PHY
                // interrupt out because the driver polls BMSR; usbredir/src/smsc.rs has it.
                let old = self.reg(r);
                self.regs.insert(r, old & !value);
            }
            reg::HW_CFG => {
                if value & hw_cfg::LRST != 0 {
                    // Lite reset: MAC and FIFOs back to defaults, the bit clears later.
                    let addrl = self.reg(reg::ADDRL);
                    let addrh = self.reg(reg::ADDRH);
                    self.power_on();
                    self.regs.insert(reg::ADDRL, addrl);
                    self.regs.insert(reg::ADDRH, addrh);
                    self.rx.clear();
                }
                self.regs.insert(r, value);
            }
            reg::PM_CTRL => {
                if value & PM_CTRL_PHY_RST != 0 {
                    self.phy_reset_reads = 1;
                }
                self.regs.insert(r, value);
            }
            reg::MII_ADDR => {
                if self.reg(reg::MII_ADDR) & mii::BUSY != 0 {
                    self.violations
                        .push(format!("MII_ADDR written while busy: {value:#x}"));
                }
                if value & mii::BUSY != 0 {
                    let phy_address = (value >> 11) & 0x1F;
                    let phy_reg = ((value >> 6) & 0x1F) as usize;
                    if phy_address != mii::PHY_ADDRESS {
                        self.regs.insert(reg::MII_DATA, 0xFFFF);
                    } else if value & mii::WRITE != 0 {
                        self.phy_write(phy_reg, self.reg(reg::MII_DATA) as u16);
                    } else {
                        let v = self.phy_read(phy_reg);
                        self.regs.insert(reg::MII_DATA, v as u32);
                    }
                    self.mii_busy_reads = 1;
                }
                self.regs.insert(r, value);
            }
            _ => {
                self.regs.insert(r, value);
            }
        }
    }

    fn phy_read(&mut self, r: usize) -> u16 {
        let mut v = self.phy[r];
        if r == phy::BMSR as usize && self.link_latched_low {
            v &= !phy::BMSR_LINK;
            self.link_latched_low = false;
        }
        if r == phy::INT_SRC as usize {
            self.phy[r] = 0;
        }
        if r == phy::BMCR as usize && v & phy::BMCR_RESET != 0 {
            // Reset completes after one read.
            self.reset_phy();
        }
        v
    }

    fn phy_write(&mut self, r: usize, v: u16) {
        if r == phy::BMCR as usize {
            if v & phy::BMCR_RESET != 0 {
                self.phy[r] = v;
                return;
            }
            self.phy[r] = v & !phy::BMCR_ANRESTART;
            if v & phy::BMCR_ANENABLE != 0 && v & phy::BMCR_ANRESTART != 0 {
                self.negotiate();
            }
            return;
        }
        self.phy[r] = v;
    }

    fn bulk_in(&mut self, max_len: usize) -> Option<Vec<u8>> {
        if let Some(raw) = self.raw_in.pop_front() {
            self.in_transfers += 1;
            return Some(raw);
        }
        if self.reg(reg::MAC_CR) & mac_cr::RXEN == 0 {
            return None;
        }
        if self.rx.is_empty() {
            return if self.reg(reg::HW_CFG) & hw_cfg::BIR != 0 {
                None
            } else {
                self.in_transfers += 1;
                Some(Vec::new())
            };
        }
        let hw = self.reg(reg::HW_CFG);
        let mut limit = max_len;
        if hw & hw_cfg::BCE != 0 && self.reg(reg::BURST_CAP) != 0 {
            limit = limit.min(self.reg(reg::BURST_CAP) as usize * 512);
        }
        let mut out = Vec::new();
        while let Some(entry) = self.rx.front() {
            let record = 4 + entry.frame.len() + 4;
            if !out.is_empty() && (hw & hw_cfg::MEF == 0 || out.len() + record > limit) {
                break;
            }
            if out.len() + record > limit {
                self.violations
                    .push(format!("bulk-IN buffer of {max_len} bytes too small"));
                return None;
            }
            let entry = self.rx.pop_front().unwrap();
            let fl = (entry.frame.len() + 4) as u32;
            let status = (fl << rx_sts::FL_SHIFT) | entry.errors;
            out.extend_from_slice(&status.to_le_bytes());
            out.extend_from_slice(&entry.frame);
            out.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
            // The next status word starts 4-byte aligned (when it fits).
            while out.len() < limit && out.len() % 4 != 0 {
                out.push(0);
            }
        }
        self.in_transfers += 1;
        Some(out)
    }

    fn bulk_out_packet(&mut self, packet: &[u8], max_packet: usize) {
        self.out_buf.extend_from_slice(packet);
        if packet.len() == max_packet {
            return; // the transfer goes on
        }
        // End of transfer: parse command words and frames.
        let data = std::mem::take(&mut self.out_buf);
        if self.reg(reg::TX_CFG) & TX_CFG_ON == 0 || self.reg(reg::MAC_CR) & mac_cr::TXEN == 0 {
            self.violations
                .push("bulk-OUT while transmitter off".to_string());
            return;
        }
        let mut at = 0;
        while data.len().saturating_sub(at) >= 8 {
            let a = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            let b = u32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap());
            let size = (a & tx_cmd::A_BUF_SIZE) as usize;
            let frame_len = (b & tx_cmd::B_FRAME_LENGTH) as usize;
            if a & (tx_cmd::A_FIRST_SEG | tx_cmd::A_LAST_SEG)
                != (tx_cmd::A_FIRST_SEG | tx_cmd::A_LAST_SEG)
            {
                self.violations
                    .push(format!("TX_CMD_A without FIRST|LAST: {a:#x}"));
                return;
            }
            if (a >> 16) & 3 != 0 {
                self.violations
                    .push(format!("TX_CMD_A data offset set: {a:#x}"));
            }
            if size != frame_len {
                self.violations
                    .push(format!("TX buffer size {size} != frame length {frame_len}"));
                return;
            }
            if !(14..=1514).contains(&frame_len) {
                self.violations.push(format!("TX frame length {frame_len}"));
                return;
            }
            if at + 8 + size > data.len() {
                self.violations.push(format!(
                    "TX transfer ends inside a frame ({} of {size} bytes)",
                    data.len() - at - 8
                ));
                return;
            }
            self.tx.push(data[at + 8..at + 8 + size].to_vec());
            at = (at + 8 + size + 3) & !3;
        }
        // The URX hands every byte to the FCT, which does not see transfer boundaries
        // (LAN950x datasheet §5.3.1.2): bytes after the last DWORD-aligned buffer would be
        // read as the next TX command A. A transfer of whole packets must end with a ZLP
        // (Linux: FLAG_SEND_ZLP); an earlier version of this model ignored a pad byte here,
        // which hid a driver that padded.
        if data.len() > at {
            self.violations.push(format!(
                "{} bytes after the last TX buffer (a pad byte instead of a ZLP?)",
                data.len() - at
            ));
        }
    }
}

impl DeviceModel for SmscModel {
    fn standard(&mut self) -> &mut StandardState {
        &mut self.std
    }

    fn class_control(&mut self, setup: SetupPacket, data_out: &[u8]) -> Result<Vec<u8>, UsbError> {
        let mut s = self.state.borrow_mut();
        match (setup.request_type, setup.request) {
            (0x40, REQUEST_WRITE_REGISTER) if setup.length == 4 && setup.value == 0 => {
                s.register_accesses += 1;
                let v = u32::from_le_bytes(data_out.try_into().unwrap());
                s.write_register(setup.index, v);
                Ok(Vec::new())
            }
            (0xC0, REQUEST_READ_REGISTER) if setup.length == 4 && setup.value == 0 => {
                s.register_accesses += 1;
                Ok(s.read_register(setup.index).to_le_bytes().to_vec())
            }
            _ => {
                s.violations
                    .push(format!("unexpected control request {setup:?}"));
                Err(UsbError::Stall)
            }
        }
    }

    fn bulk_in(&mut self, endpoint: u8, max_len: usize) -> Result<Option<Vec<u8>>, UsbError> {
        if self.std.configuration == 0 {
            return Err(UsbError::Stall);
        }
        match endpoint {
            1 => Ok(self.state.borrow_mut().bulk_in(max_len)),
            3 => Ok(None),
            _ => Err(UsbError::Stall),
        }
    }

    fn bulk_out_packet(&mut self, endpoint: u8, packet: &[u8]) -> Result<(), UsbError> {
        if self.std.configuration == 0 || endpoint != 2 || self.state.borrow().halt_out {
            return Err(UsbError::Stall);
        }
        self.state.borrow_mut().bulk_out_packet(packet, 512);
        Ok(())
    }
}
