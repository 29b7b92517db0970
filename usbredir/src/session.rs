//! One usbredir connection: the hello exchange, announcing the device (ep_info,
//! interface_info, device_connect, in the order the protocol requires), and answering the
//! guest's packets from a [`UsbFunction`]. Bulk-IN requests the device cannot answer yet
//! stay pending (on the wire, the device NAKs and the host retries) until data comes, the
//! guest cancels them, or the device goes away. No I/O here: bytes in, bytes out.

use std::collections::VecDeque;

use crate::device::{Answer, Micros, UsbFunction};
use crate::proto::{Caps, ControlHeader, Decoder, Encoder, GuestPacket, ProtoError, cap, status};

/// What this side announces: the device_connect version field, ep_info max packet sizes
/// and 64-bit ids. Not `32bits_bulk_length`: with it QEMU pipelines bulk-IN packets
/// (`usbredir_set_pipeline`), and QEMU's DWC2 model cannot take the "add to queue" answer
/// that pipelining gives, so every bulk-IN would fail with a transaction error.
pub const OUR_CAPS: Caps = Caps(
    1 << cap::CONNECT_DEVICE_VERSION | 1 << cap::EP_INFO_MAX_PACKET_SIZE | 1 << cap::IDS_64BIT,
);

/// Our version string.
pub const VERSION: &str = concat!("bramble-usbredir ", env!("CARGO_PKG_VERSION"));

/// While an interrupt source stays asserted, it is reported again at most this often: the
/// usb-host polls the endpoint on the guest's behalf and QEMU buffers every report, so a
/// report per bInterval would queue hundreds of identical ones behind a slow guest.
const INTERRUPT_REPEAT_US: Micros = 64_000;

/// A pending bulk-IN request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingIn {
    id: u64,
    endpoint: u8,
    length: u32,
}

/// Counters of the protocol side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Packets received from the guest.
    pub packets_in: u64,
    /// Bulk-IN requests cancelled by the guest.
    pub cancelled: u64,
    /// device_connect packets sent.
    pub connects: u64,
    /// device_disconnect packets sent.
    pub disconnects: u64,
    /// Bus resets.
    pub resets: u64,
}

/// The state of one connection.
pub struct Session {
    decoder: Decoder,
    encoder: Encoder,
    peer_version: Option<String>,
    device_present: bool,
    announced: bool,
    pending_in: VecDeque<PendingIn>,
    interrupt_receiving: Vec<u8>,
    interrupt_id: u64,
    last_interrupt: Option<(Micros, Vec<u8>)>,
    out: Vec<u8>,
    /// Counters.
    pub stats: SessionStats,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    /// A new connection; our hello is queued at once (both sides send hello first).
    pub fn new() -> Self {
        Self {
            decoder: Decoder::new(OUR_CAPS),
            encoder: Encoder::before_hello(),
            peer_version: None,
            device_present: true,
            announced: false,
            pending_in: VecDeque::new(),
            interrupt_receiving: Vec::new(),
            interrupt_id: 0,
            last_interrupt: None,
            out: Encoder::hello(VERSION, OUR_CAPS),
            stats: SessionStats::default(),
        }
    }

    /// The guest's version string, once its hello came.
    pub fn peer_version(&self) -> Option<&str> {
        self.peer_version.as_deref()
    }

    /// Bytes to write to the connection.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Whether the device is announced to the guest.
    pub fn device_announced(&self) -> bool {
        self.announced
    }

    /// Bulk-IN requests waiting for data.
    pub fn pending_in(&self) -> usize {
        self.pending_in.len()
    }

    fn announce(&mut self, device: &dyn UsbFunction) {
        if self.announced || !self.device_present || self.peer_version.is_none() {
            return;
        }
        let ep_info = self.encoder.ep_info(&device.endpoints());
        let interface_info = self.encoder.interface_info(&device.interfaces());
        let connect = self.encoder.device_connect(&device.connect_info());
        self.out.extend(ep_info);
        self.out.extend(interface_info);
        self.out.extend(connect);
        self.announced = true;
        self.stats.connects += 1;
    }

    /// The device is unplugged. As a usb-host does when a device goes away, every pending
    /// transfer is answered "cancelled" first and then the disconnect is sent (QEMU's
    /// `usbredir_handle_status` relies on this order: its host controller model keeps a
    /// packet in flight on its channel until it is answered).
    pub fn unplug(&mut self) {
        self.device_present = false;
        for pending in std::mem::take(&mut self.pending_in) {
            if self.announced {
                self.out.extend(self.encoder.bulk(
                    pending.id,
                    pending.endpoint,
                    status::CANCELLED,
                    0,
                    &[],
                ));
            }
        }
        if self.announced {
            self.out.extend(self.encoder.device_disconnect());
            self.stats.disconnects += 1;
        }
        self.announced = false;
        self.interrupt_receiving.clear();
        self.last_interrupt = None;
    }

    /// The device is plugged in (again): announced as soon as the hello exchange is done.
    pub fn plug(&mut self, device: &dyn UsbFunction) {
        self.device_present = true;
        self.interrupt_id = 0;
        self.announce(device);
    }

    /// Feeds bytes from the guest and answers every complete packet.
    pub fn receive(
        &mut self,
        device: &mut dyn UsbFunction,
        now: Micros,
        bytes: &[u8],
    ) -> Result<(), ProtoError> {
        self.decoder.push(bytes);
        while let Some(incoming) = self.decoder.next_packet()? {
            self.stats.packets_in += 1;
            self.handle(device, now, incoming.id, incoming.packet);
        }
        self.service(device, now);
        Ok(())
    }

    fn handle(&mut self, device: &mut dyn UsbFunction, now: Micros, id: u64, packet: GuestPacket) {
        if !matches!(packet, GuestPacket::Hello { .. }) && !self.announced {
            // Packets for a device the guest has not been told about (or that was unplugged
            // while they were in flight) are dropped; a control packet is answered so that
            // the guest is not left waiting.
            if let GuestPacket::Control(header, _) = &packet {
                self.out
                    .extend(self.encoder.control(id, header, status::IOERROR, &[], 0));
            }
            return;
        }
        match packet {
            GuestPacket::Hello { version, .. } => {
                self.peer_version = Some(version);
                self.encoder = Encoder::new(self.decoder.common_caps().unwrap_or_default());
                self.announce(device);
            }
            GuestPacket::Reset => {
                self.stats.resets += 1;
                for pending in std::mem::take(&mut self.pending_in) {
                    self.out.extend(self.encoder.bulk(
                        pending.id,
                        pending.endpoint,
                        status::CANCELLED,
                        0,
                        &[],
                    ));
                }
                device.bus_reset(now);
            }
            GuestPacket::SetConfiguration(value) => {
                self.pending_in.clear();
                self.interrupt_receiving.clear();
                let ok = device.set_configuration(now, value);
                self.out.extend(self.encoder.ep_info(&device.endpoints()));
                self.out
                    .extend(self.encoder.interface_info(&device.interfaces()));
                let code = if ok { status::SUCCESS } else { status::STALL };
                self.out.extend(self.encoder.configuration_status(
                    id,
                    code,
                    device.configuration(),
                ));
            }
            GuestPacket::GetConfiguration => {
                self.out.extend(self.encoder.configuration_status(
                    id,
                    status::SUCCESS,
                    device.configuration(),
                ));
            }
            GuestPacket::SetAltSetting { interface, alt } => {
                let ok = device.set_alt_setting(interface, alt);
                self.out.extend(self.encoder.ep_info(&device.endpoints()));
                self.out
                    .extend(self.encoder.interface_info(&device.interfaces()));
                let code = if ok { status::SUCCESS } else { status::STALL };
                self.out.extend(self.encoder.alt_setting_status(
                    id,
                    code,
                    interface,
                    if ok { alt } else { 0 },
                ));
            }
            GuestPacket::GetAltSetting(interface) => {
                self.out.extend(
                    self.encoder
                        .alt_setting_status(id, status::SUCCESS, interface, 0),
                );
            }
            GuestPacket::StartInterruptReceiving(endpoint) => {
                let known = device.endpoints().iter().any(|ep| {
                    ep.address == endpoint && ep.kind == crate::proto::ep_type::INTERRUPT
                });
                let code = if known {
                    status::SUCCESS
                } else {
                    status::INVAL
                };
                if known && !self.interrupt_receiving.contains(&endpoint) {
                    self.interrupt_receiving.push(endpoint);
                    self.last_interrupt = None;
                }
                self.out
                    .extend(self.encoder.interrupt_receiving_status(id, code, endpoint));
            }
            GuestPacket::StopInterruptReceiving(endpoint) => {
                self.interrupt_receiving.retain(|&ep| ep != endpoint);
                self.out.extend(self.encoder.interrupt_receiving_status(
                    id,
                    status::SUCCESS,
                    endpoint,
                ));
            }
            GuestPacket::CancelDataPacket => {
                if let Some(at) = self.pending_in.iter().position(|p| p.id == id) {
                    let pending = self.pending_in.remove(at).expect("found");
                    self.stats.cancelled += 1;
                    self.out.extend(self.encoder.bulk(
                        id,
                        pending.endpoint,
                        status::CANCELLED,
                        0,
                        &[],
                    ));
                }
                // Anything else already completed: its answer is on the way.
            }
            GuestPacket::Control(header, data) => self.control(device, now, id, &header, &data),
            GuestPacket::Bulk(header, data) => {
                if header.endpoint & 0x80 != 0 {
                    self.pending_in.push_back(PendingIn {
                        id,
                        endpoint: header.endpoint,
                        length: header.length,
                    });
                } else {
                    let (code, length) = match device.bulk_out(now, header.endpoint, &data) {
                        Answer::Data(_) => (status::SUCCESS, data.len() as u32),
                        Answer::Stall => (status::STALL, 0),
                        Answer::Pending => (status::IOERROR, 0),
                    };
                    self.out
                        .extend(self.encoder.bulk(id, header.endpoint, code, length, &[]));
                }
            }
            GuestPacket::Interrupt { .. } | GuestPacket::Unsupported(_) => {}
        }
    }

    fn control(
        &mut self,
        device: &mut dyn UsbFunction,
        now: Micros,
        id: u64,
        header: &ControlHeader,
        data: &[u8],
    ) {
        let answer = device.control(now, header, data);
        let reply = match answer {
            Answer::Data(mut data_in) => {
                if header.request_type & 0x80 != 0 {
                    data_in.truncate(usize::from(header.length));
                    let length = data_in.len() as u16;
                    self.encoder
                        .control(id, header, status::SUCCESS, &data_in, length)
                } else {
                    self.encoder
                        .control(id, header, status::SUCCESS, &[], data.len() as u16)
                }
            }
            Answer::Stall | Answer::Pending => {
                self.encoder.control(id, header, status::STALL, &[], 0)
            }
        };
        self.out.extend(reply);
    }

    /// Answers what the device can answer now: pending bulk-IN requests in order, and the
    /// interrupt endpoints being received.
    pub fn service(&mut self, device: &mut dyn UsbFunction, now: Micros) {
        if !self.announced {
            return;
        }
        while let Some(&pending) = self.pending_in.front() {
            let answer = device.bulk_in(now, pending.endpoint, pending.length as usize);
            let reply = match answer {
                Answer::Pending => break,
                Answer::Data(data) => {
                    let n = data.len().min(pending.length as usize);
                    self.encoder.bulk(
                        pending.id,
                        pending.endpoint,
                        status::SUCCESS,
                        n as u32,
                        &data[..n],
                    )
                }
                Answer::Stall => {
                    self.encoder
                        .bulk(pending.id, pending.endpoint, status::STALL, 0, &[])
                }
            };
            self.pending_in.pop_front();
            self.out.extend(reply);
        }
        for endpoint in self.interrupt_receiving.clone() {
            let Some(data) = device.interrupt_in(now, endpoint) else {
                self.last_interrupt = None;
                continue;
            };
            let repeat = match &self.last_interrupt {
                Some((at, last)) => *last != data || now >= at + INTERRUPT_REPEAT_US,
                None => true,
            };
            if repeat {
                self.out.extend(self.encoder.interrupt(
                    self.interrupt_id,
                    endpoint,
                    status::SUCCESS,
                    &data,
                ));
                self.interrupt_id += 1;
                self.last_interrupt = Some((now, data));
            }
        }
    }

    /// When [`Session::service`] should run again for repeated interrupt reports.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.last_interrupt
            .as_ref()
            .map(|(at, _)| at + INTERRUPT_REPEAT_US)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{BulkHeader, kind};
    use crate::smsc::{Partner, Smsc95xx};

    /// A minimal guest: encodes requests with QEMU 7.2's capabilities, decodes answers.
    struct Guest {
        caps: Caps,
        next_id: u64,
    }

    const QEMU_CAPS: u32 = 1 << cap::CONNECT_DEVICE_VERSION
        | 1 << cap::FILTER
        | 1 << cap::EP_INFO_MAX_PACKET_SIZE
        | 1 << cap::IDS_64BIT
        | 1 << cap::BULK_LENGTH_32BIT
        | 1 << cap::BULK_RECEIVING;

    impl Guest {
        fn new() -> Self {
            Self {
                caps: Caps(QEMU_CAPS).common(OUR_CAPS),
                next_id: 1,
            }
        }

        fn packet(&mut self, kind: u32, body: &[u8]) -> (u64, Vec<u8>) {
            let id = self.next_id;
            self.next_id += 1;
            let mut out = kind.to_le_bytes().to_vec();
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(body);
            (id, out)
        }

        /// Splits the session's output into (type, id, body).
        fn parse(&self, mut bytes: &[u8]) -> Vec<(u32, u64, Vec<u8>)> {
            let mut out = Vec::new();
            let mut first = true;
            while !bytes.is_empty() {
                let kind = u32::from_le_bytes(bytes[..4].try_into().unwrap());
                let len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
                let id_len = if first && kind == kind::HELLO {
                    4
                } else if self.caps.has(cap::IDS_64BIT) {
                    8
                } else {
                    4
                };
                first = false;
                let id = if id_len == 8 {
                    u64::from_le_bytes(bytes[8..16].try_into().unwrap())
                } else {
                    u64::from(u32::from_le_bytes(bytes[8..12].try_into().unwrap()))
                };
                out.push((kind, id, bytes[8 + id_len..8 + id_len + len].to_vec()));
                bytes = &bytes[8 + id_len + len..];
            }
            out
        }
    }

    fn connected() -> (Session, Smsc95xx, Guest) {
        let mut session = Session::new();
        let mut chip = Smsc95xx::new(true, Partner::Switch);
        let guest = Guest::new();
        let hello = Encoder::hello("qemu usb-redir guest 7.2.22", Caps(QEMU_CAPS));
        session.receive(&mut chip, 0, &hello).unwrap();
        (session, chip, guest)
    }

    #[test]
    fn hello_then_ep_info_interface_info_and_connect_at_high_speed() {
        let (mut session, _chip, guest) = connected();
        let packets = guest.parse(&session.take_output());
        let kinds: Vec<u32> = packets.iter().map(|p| p.0).collect();
        assert_eq!(
            kinds,
            vec![
                kind::HELLO,
                kind::EP_INFO,
                kind::INTERFACE_INFO,
                kind::DEVICE_CONNECT
            ]
        );
        let connect = &packets[3].2;
        assert_eq!(connect.len(), 10, "with device_version_bcd");
        assert_eq!(connect[0], crate::proto::speed::HIGH);
        assert_eq!(u16::from_le_bytes([connect[4], connect[5]]), 0x0424);
        assert_eq!(u16::from_le_bytes([connect[6], connect[7]]), 0xEC00);
        assert_eq!(packets[1].2.len(), 160, "ep_info with max packet sizes");
    }

    #[test]
    fn set_configuration_answers_after_new_ep_info_and_a_bulk_in_waits_for_data() {
        let (mut session, mut chip, mut guest) = connected();
        session.take_output();
        let (id, bytes) = guest.packet(kind::SET_CONFIGURATION, &[1]);
        session.receive(&mut chip, 0, &bytes).unwrap();
        let packets = guest.parse(&session.take_output());
        let kinds: Vec<u32> = packets.iter().map(|p| p.0).collect();
        assert_eq!(
            kinds,
            vec![
                kind::EP_INFO,
                kind::INTERFACE_INFO,
                kind::CONFIGURATION_STATUS
            ]
        );
        assert_eq!(
            packets[2],
            (kind::CONFIGURATION_STATUS, id, vec![status::SUCCESS, 1])
        );
        // ep_info now has bulk IN 1 at slot 17 with 512 bytes.
        let ep = &packets[0].2;
        assert_eq!(ep[17], crate::proto::ep_type::BULK);
        assert_eq!(u16::from_le_bytes([ep[96 + 34], ep[96 + 35]]), 512);

        // Register write: MAC_CR = RXEN (a vendor control packet).
        let mut body = vec![0, 0xA0, 0x40, 0, 0, 0, 0x00, 0x01, 4, 0];
        body.extend_from_slice(&0x4u32.to_le_bytes());
        let (_, bytes) = guest.packet(kind::CONTROL_PACKET, &body);
        session.receive(&mut chip, 0, &bytes).unwrap();
        let _ = session.take_output();

        // A bulk-IN request with BIR set and no frame: no answer until a frame arrives.
        let mut body = vec![0x81, 0];
        body.extend_from_slice(&18944u16.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        let (id, bytes) = guest.packet(kind::BULK_PACKET, &body);
        let hw = {
            let mut b = vec![0, 0xA0, 0x40, 0, 0, 0, 0x14, 0, 4, 0];
            b.extend_from_slice(&0x1000u32.to_le_bytes());
            guest.packet(kind::CONTROL_PACKET, &b).1
        };
        session.receive(&mut chip, 0, &hw).unwrap();
        session.take_output();
        session.receive(&mut chip, 0, &bytes).unwrap();
        assert!(session.take_output().is_empty());
        assert_eq!(session.pending_in(), 1);
        let t = crate::smsc::DEFAULT_ANEG_US + 1;
        let mut frame = vec![0xFF; 6];
        frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        frame.resize(42, 0);
        assert!(chip.receive_from_wire(t, &frame));
        session.service(&mut chip, t);
        let packets = guest.parse(&session.take_output());
        assert_eq!(packets.len(), 1);
        let (kind_, answer_id, body) = &packets[0];
        assert_eq!((*kind_, *answer_id), (kind::BULK_PACKET, id));
        let header = BulkHeader {
            endpoint: body[0],
            status: body[1],
            length: u32::from(u16::from_le_bytes([body[2], body[3]])),
            stream_id: 0,
        };
        assert_eq!(header.status, status::SUCCESS);
        assert_eq!(header.length as usize, body.len() - 8);
        assert_eq!(body.len() - 8, 4 + 64);
    }

    #[test]
    fn cancel_answers_a_pending_bulk_in_with_cancelled() {
        let (mut session, mut chip, mut guest) = connected();
        let (_, bytes) = guest.packet(kind::SET_CONFIGURATION, &[1]);
        session.receive(&mut chip, 0, &bytes).unwrap();
        let hw = {
            let mut b = vec![0, 0xA0, 0x40, 0, 0, 0, 0x14, 0, 4, 0];
            b.extend_from_slice(&0x1000u32.to_le_bytes());
            guest.packet(kind::CONTROL_PACKET, &b).1
        };
        session.receive(&mut chip, 0, &hw).unwrap();
        let mut body = vec![0x81, 0];
        body.extend_from_slice(&2048u16.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        let (id, bytes) = guest.packet(kind::BULK_PACKET, &body);
        session.receive(&mut chip, 0, &bytes).unwrap();
        session.take_output();
        let mut cancel = kind::CANCEL_DATA_PACKET.to_le_bytes().to_vec();
        cancel.extend_from_slice(&0u32.to_le_bytes());
        cancel.extend_from_slice(&id.to_le_bytes());
        session.receive(&mut chip, 0, &cancel).unwrap();
        let packets = guest.parse(&session.take_output());
        assert_eq!(packets.len(), 1);
        assert_eq!(packets[0].1, id);
        assert_eq!(packets[0].2[1], status::CANCELLED);
        assert_eq!(session.stats.cancelled, 1);
    }

    #[test]
    fn unplug_and_plug_send_disconnect_then_a_fresh_announcement() {
        let (mut session, chip, guest) = connected();
        session.take_output();
        session.unplug();
        let packets = guest.parse(&session.take_output());
        assert_eq!(
            packets.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![kind::DEVICE_DISCONNECT]
        );
        session.plug(&chip);
        let packets = guest.parse(&session.take_output());
        assert_eq!(
            packets.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![kind::EP_INFO, kind::INTERFACE_INFO, kind::DEVICE_CONNECT]
        );
        assert_eq!(session.stats.connects, 2);
    }
}
