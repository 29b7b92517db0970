//! A model of QEMU 7.2's usb-net (`hw/usb/dev-network.c`) for host tests: both
//! configurations with QEMU's descriptors, the MAC string, CDC-ECM data-path framing (an OUT
//! frame ends with a short packet or a ZLP; frames of 64·n bytes without a ZLP merge with the
//! next), and RNDIS (INITIALIZE/QUERY/SET over encapsulated commands, a single zero byte
//! when no response is queued, data only after a non-zero packet filter, 44-byte
//! RNDIS_PACKET_MSG framing, OUT messages reassembled by MessageLength).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::format;
use std::rc::Rc;
use std::string::{String, ToString};
use std::vec::Vec;

use super::{DeviceModel, StandardState};
use crate::rndis::{msg, oid};
use bramble_hal::usb::{SetupPacket, Speed, UsbError};

/// QEMU's default NIC MAC.
pub const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// Device state shared with the test.
#[derive(Default)]
pub struct UsbNetState {
    /// Frames waiting to go to the guest.
    pub rx: VecDeque<Vec<u8>>,
    /// Frames the guest sent.
    pub tx: Vec<Vec<u8>>,
    /// RNDIS: the MessageLength of every packet message the guest sent (padding included).
    pub tx_message_lens: Vec<usize>,
    /// Protocol violations.
    pub violations: Vec<String>,
    /// RNDIS packet filter.
    pub filter: u32,
    /// RNDIS initialized.
    pub rndis_initialized: bool,
    /// Queued RNDIS responses.
    pub responses: VecDeque<Vec<u8>>,
    /// Stall SET_ETHERNET_PACKET_FILTER like QEMU before 7.2.
    pub stall_packet_filter: bool,
    /// RNDIS: pack every queued frame into one bulk-IN transfer (real RNDIS devices do).
    pub rndis_batch: bool,
    /// RNDIS: messages (type) received via SEND_ENCAPSULATED_COMMAND.
    pub commands: Vec<u32>,
    /// Raw bulk-IN transfers to deliver first.
    pub raw_in: VecDeque<Vec<u8>>,
    out_buf: Vec<u8>,
}

/// usb-net on the bus.
pub struct UsbNetModel {
    std: StandardState,
    /// Shared state.
    pub state: Rc<RefCell<UsbNetState>>,
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

impl UsbNetModel {
    /// usb-net at full speed, like QEMU.
    pub fn new() -> (Self, Rc<RefCell<UsbNetState>>) {
        let state = Rc::new(RefCell::new(UsbNetState::default()));
        let mut std = StandardState::new(
            &crate::fixtures::USB_NET_DEVICE,
            &[
                &crate::fixtures::USB_NET_CONFIG_RNDIS,
                &crate::fixtures::USB_NET_CONFIG_ECM,
            ],
            Speed::Full,
        );
        let strings = [
            (1, "QEMU".to_string()),
            (2, "RNDIS/QEMU USB Network Device".to_string()),
            (
                3,
                format!(
                    "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
                    0x40, MAC[1], MAC[2], MAC[3], MAC[4], MAC[5]
                ),
            ),
            (4, "QEMU USB Net Data Interface".to_string()),
            (10, "1".to_string()),
        ];
        std.strings.extend(strings);
        (
            Self {
                std,
                state: state.clone(),
            },
            state,
        )
    }

    fn is_rndis(&self) -> bool {
        self.std.configuration == 2
    }
}

impl UsbNetState {
    fn rndis_command(&mut self, data: &[u8]) -> Result<(), UsbError> {
        if data.len() < 12 || le32(data, 4) as usize != data.len() {
            self.violations.push("bad RNDIS message length".to_string());
            return Err(UsbError::Stall);
        }
        let kind = le32(data, 0);
        let id = le32(data, 8);
        self.commands.push(kind);
        match kind {
            msg::INITIALIZE => {
                self.rndis_initialized = true;
                self.responses.push_back(words(&[
                    msg::INITIALIZE | msg::COMPLETION,
                    52,
                    id,
                    0,
                    1,
                    0,
                    1,
                    0,
                    1,
                    1514 + 44 + 22,
                    0,
                    0,
                    0,
                ]));
            }
            msg::QUERY => {
                let offset = le32(data, 20) as usize + 8;
                let len = le32(data, 16) as usize;
                if offset + len > data.len() && len != 0 {
                    return Err(UsbError::Stall);
                }
                let value: Option<Vec<u8>> = match le32(data, 12) {
                    oid::PERMANENT_ADDRESS_802_3 => Some(MAC.to_vec()),
                    oid::GEN_MEDIA_CONNECT_STATUS => Some(words(&[0])),
                    _ => None,
                };
                let mut r = match &value {
                    Some(v) => words(&[
                        msg::QUERY | msg::COMPLETION,
                        (24 + v.len()) as u32,
                        id,
                        0,
                        v.len() as u32,
                        16,
                    ]),
                    None => words(&[msg::QUERY | msg::COMPLETION, 24, id, 0xC000_00BB, 0, 0]),
                };
                if let Some(v) = value {
                    r.extend_from_slice(&v);
                }
                self.responses.push_back(r);
            }
            msg::SET => {
                let offset = le32(data, 20) as usize + 8;
                let len = le32(data, 16) as usize;
                if offset + len > data.len() {
                    self.violations
                        .push("SET buffer outside message".to_string());
                    return Err(UsbError::Stall);
                }
                let status = if le32(data, 12) == oid::GEN_CURRENT_PACKET_FILTER && len == 4 {
                    self.filter = le32(data, offset);
                    0
                } else {
                    0xC000_00BB
                };
                self.responses
                    .push_back(words(&[msg::SET | msg::COMPLETION, 16, id, status]));
            }
            _ => return Err(UsbError::Stall),
        }
        Ok(())
    }

    fn rndis_out(&mut self) {
        while self.out_buf.len() >= 8 {
            let len = le32(&self.out_buf, 4) as usize;
            if !(8..=2048).contains(&len) {
                self.violations
                    .push(format!("RNDIS OUT MessageLength {len}"));
                self.out_buf.clear();
                return;
            }
            if self.out_buf.len() < len {
                return;
            }
            let m: Vec<u8> = self.out_buf.drain(..len).collect();
            if le32(&m, 0) != msg::PACKET {
                self.violations
                    .push(format!("RNDIS OUT message type {:#x}", le32(&m, 0)));
                continue;
            }
            let offset = 8 + le32(&m, 8) as usize;
            let size = le32(&m, 12) as usize;
            if offset + size > len || offset < 44 {
                self.violations
                    .push(format!("RNDIS packet offsets {offset}+{size} > {len}"));
                continue;
            }
            self.tx.push(m[offset..offset + size].to_vec());
            self.tx_message_lens.push(len);
        }
    }
}

impl DeviceModel for UsbNetModel {
    fn standard(&mut self) -> &mut StandardState {
        &mut self.std
    }

    fn class_control(&mut self, setup: SetupPacket, data_out: &[u8]) -> Result<Vec<u8>, UsbError> {
        let rndis = self.is_rndis();
        let mut s = self.state.borrow_mut();
        match (setup.request_type, setup.request) {
            (0x21, 0x43) if self.std.configuration == 1 && !s.stall_packet_filter => Ok(Vec::new()),
            (0x21, 0x00) if rndis && setup.value == 0 && setup.index == 0 => {
                s.rndis_command(data_out).map(|_| Vec::new())
            }
            (0xA1, 0x01) if rndis && setup.value == 0 && setup.index == 0 => {
                Ok(s.responses.pop_front().unwrap_or_else(|| std::vec![0]))
            }
            _ => Err(UsbError::Stall),
        }
    }

    fn bulk_in(&mut self, endpoint: u8, max_len: usize) -> Result<Option<Vec<u8>>, UsbError> {
        if self.std.configuration == 0 {
            return Ok(None);
        }
        if endpoint == 1 {
            return Ok(None);
        }
        if endpoint != 2 {
            return Err(UsbError::Stall);
        }
        let rndis = self.is_rndis();
        if !rndis && self.std.alternates.get(&1) != Some(&1) {
            return Err(UsbError::Stall); // alt 0 has no endpoints
        }
        let mut s = self.state.borrow_mut();
        if let Some(raw) = s.raw_in.pop_front() {
            return Ok(Some(raw));
        }
        if rndis && s.filter == 0 {
            s.rx.clear(); // QEMU drops frames until the filter is set
            return Ok(None);
        }
        let Some(frame) = s.rx.pop_front() else {
            return Ok(None);
        };
        if !rndis {
            return Ok(Some(frame));
        }
        let wrap = |f: &[u8]| {
            let mut m = words(&[msg::PACKET, (44 + f.len()) as u32, 36, f.len() as u32]);
            m.resize(44, 0);
            m.extend_from_slice(f);
            m
        };
        let mut out = wrap(&frame);
        while s.rndis_batch {
            let Some(next) = s.rx.front() else { break };
            if out.len() + 44 + next.len() > max_len {
                break;
            }
            let next = s.rx.pop_front().unwrap();
            out.extend_from_slice(&wrap(&next));
        }
        Ok(Some(out))
    }

    fn bulk_out_packet(&mut self, endpoint: u8, packet: &[u8]) -> Result<(), UsbError> {
        if self.std.configuration == 0 || endpoint != 2 {
            return Err(UsbError::Stall);
        }
        let rndis = self.is_rndis();
        let mut s = self.state.borrow_mut();
        s.out_buf.extend_from_slice(packet);
        if rndis {
            s.rndis_out();
            return Ok(());
        }
        if packet.len() < 64 {
            let frame = std::mem::take(&mut s.out_buf);
            if frame.is_empty() {
                return Ok(()); // a ZLP after a frame that already ended is harmless
            }
            if frame.len() > 1514 {
                s.violations
                    .push(format!("ECM frames merged: {} bytes", frame.len()));
            }
            s.tx.push(frame);
        }
        Ok(())
    }
}
