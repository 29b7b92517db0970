//! Stack tests against the models: probe in both QEMU topologies and the B+ shape, and the
//! three drivers' init sequences, framing and error paths.

use std::boxed::Box;
use std::vec::Vec;

use bramble_hal::{DeviceError, EthernetDevice, LinkState, MacAddress};

use super::MockHost;
use super::hub::HubModel;
use super::smsc::{Partner, SmscModel};
use super::usbnet::{MAC, UsbNetModel};
use crate::probe::{CdcPreference, NicKind, ProbeOptions, UsbNic, probe};
use crate::smsc95xx::{hw_cfg, mac_cr, phy, reg, rx_sts};
use bramble_hal::usb::{UsbError, UsbHost};

const BOARD_MAC: MacAddress = MacAddress([0xb8, 0x27, 0xeb, 0x12, 0x34, 0x56]);

fn frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
    f[..6].copy_from_slice(&[0xff; 6]);
    f[12] = 0x08;
    f[13] = 0x00;
    f
}

fn send(nic: &mut impl EthernetDevice, data: &[u8]) -> Result<(), DeviceError> {
    nic.transmit(data.len(), |buf| buf.copy_from_slice(data))
}

fn recv(nic: &mut impl EthernetDevice) -> Option<Vec<u8>> {
    nic.receive(|f| f.to_vec()).unwrap()
}

/// Polls `receive` a bounded number of times until a frame arrives.
fn recv_eventually(nic: &mut impl EthernetDevice) -> Option<Vec<u8>> {
    (0..8).find_map(|_| recv(nic))
}

fn flush_tx(nic: &mut impl EthernetDevice) {
    for _ in 0..8 {
        if nic.can_transmit() {
            return;
        }
    }
    panic!("transmit never completed");
}

fn usb_net_behind_hub(
    prefer: CdcPreference,
) -> (
    UsbNic<MockHost>,
    std::rc::Rc<std::cell::RefCell<super::usbnet::UsbNetState>>,
) {
    let (net, state) = UsbNetModel::new();
    let hub = HubModel::qemu().attach(1, Box::new(net));
    let host = MockHost::new(Some(Box::new(hub)));
    let options = ProbeOptions {
        prefer,
        ..ProbeOptions::default()
    };
    let nic = probe(host, options).map_err(|(e, _)| e).unwrap();
    (nic, state)
}

#[test]
fn probe_finds_usb_net_behind_qemu_hub_and_prefers_rndis() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::Rndis);
    assert_eq!(nic.kind(), NicKind::Rndis);
    assert_eq!(nic.mac_address(), MacAddress(MAC));
    assert_eq!(nic.link_state(), LinkState::Up);
    // Hub got address 1, the NIC behind it address 2 on hub port 1.
    assert_eq!(nic.device().target.address, 2);
    assert_eq!(nic.device().hub_port, Some(1));
    assert_eq!(nic.device().target.ep0_max_packet, 64);
    let s = state.borrow();
    assert_eq!(s.commands, [2, 4, 4, 5]); // INITIALIZE, QUERY mac, QUERY media, SET filter
    assert_ne!(s.filter, 0);
    assert!(s.violations.is_empty(), "{:?}", s.violations);
}

#[test]
fn probe_selects_cdc_ecm_when_asked_and_reads_mac_string() {
    let (nic, state) = usb_net_behind_hub(CdcPreference::CdcEcm);
    assert_eq!(nic.kind(), NicKind::CdcEcm);
    // QEMU's iMACAddress string is "40" followed by bytes 1..5 of the netdev MAC.
    assert_eq!(
        nic.mac_address(),
        MacAddress([0x40, 0x54, 0x00, 0x12, 0x34, 0x56])
    );
    let host = nic.into_host();
    // SET_CONFIGURATION(1) then SET_INTERFACE(1, 1) on the NIC.
    assert!(
        host.control_log
            .iter()
            .any(|r| r.address == 2 && r.setup.request == 9 && r.setup.value == 1)
    );
    assert!(host.control_log.iter().any(|r| r.address == 2
        && r.setup.request_type == 0x01
        && r.setup.request == 11
        && (r.setup.value, r.setup.index) == (1, 1)));
    assert!(state.borrow().violations.is_empty());
}

#[test]
fn probe_finds_usb_net_on_root_port() {
    let (net, _state) = UsbNetModel::new();
    let host = MockHost::new(Some(Box::new(net)));
    let nic = probe(host, ProbeOptions::default())
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(nic.kind(), NicKind::Rndis);
    assert_eq!(nic.device().target.address, 1);
    assert_eq!(nic.device().hub_port, None);
}

#[test]
fn probe_finds_lan9514_behind_its_hub_and_programs_board_mac() {
    let (smsc, state) = SmscModel::new(Partner::FullDuplex);
    let hub = HubModel::lan9514().attach(1, Box::new(smsc));
    let host = MockHost::new(Some(Box::new(hub)));
    let options = ProbeOptions {
        board_mac: Some(BOARD_MAC),
        smsc_multiple_frames: true,
        ..ProbeOptions::default()
    };
    let mut nic = probe(host, options).map_err(|(e, _)| e).unwrap();
    assert_eq!(nic.kind(), NicKind::Smsc95xx);
    assert_eq!(nic.mac_address(), BOARD_MAC);
    // High speed behind a high-speed hub: no transaction translator.
    assert_eq!(nic.device().target.translator, None);
    let s = state.borrow();
    assert_eq!(s.reg(reg::ADDRL), 0x12eb27b8);
    assert_eq!(s.reg(reg::ADDRH), 0x5634);
    drop(s);
    assert_eq!(nic.link_state(), LinkState::Up);
}

#[test]
fn probe_reports_missing_and_unsupported_devices_and_returns_the_host() {
    let host = MockHost::new(None);
    let (e, host) = probe(host, ProbeOptions::default()).err().unwrap();
    assert_eq!(e, UsbError::NoDevice);
    assert_eq!(host.open_pipes(), 0);

    // An empty hub: nothing connected.
    let host = MockHost::new(Some(Box::new(HubModel::qemu())));
    let (e, _) = probe(host, ProbeOptions::default()).err().unwrap();
    assert_eq!(e, UsbError::NoDevice);

    // A hub with a hub behind it (nested hubs are not walked).
    let inner = HubModel::qemu().attach(1, Box::new(UsbNetModel::new().0));
    let host = MockHost::new(Some(Box::new(HubModel::qemu().attach(3, Box::new(inner)))));
    let (e, _) = probe(host, ProbeOptions::default()).err().unwrap();
    assert_eq!(e, UsbError::Unsupported);
}

#[test]
fn lan9514_hub_ports_are_powered_before_devices_appear() {
    let (smsc, _state) = SmscModel::new(Partner::FullDuplex);
    let hub = HubModel::lan9514().attach(1, Box::new(smsc));
    let host = MockHost::new(Some(Box::new(hub)));
    let nic = probe(host, ProbeOptions::default())
        .map_err(|(e, _)| e)
        .unwrap();
    let host = nic.into_host();
    // PORT_POWER on each of the 5 ports, then exactly one port reset (port 1).
    let powers = host
        .control_log
        .iter()
        .filter(|r| {
            r.address == 1
                && r.setup.request_type == 0x23
                && r.setup.request == 3
                && r.setup.value == 8
        })
        .count();
    assert_eq!(powers, 5);
    let resets: Vec<u16> = host
        .control_log
        .iter()
        .filter(|r| r.address == 1 && r.setup.request == 3 && r.setup.value == 4)
        .map(|r| r.setup.index)
        .collect();
    assert_eq!(resets, [1]);
    // The hub's bPwrOn2PwrGood (100 ms for the LAN9514) was honoured on the virtual clock,
    // but not the whole 510 ms margin: the built-in Ethernet device was there at once.
    assert!(host.clock_us >= 100_000, "power-good wait skipped");
    assert!(
        host.clock_us < 510_000,
        "waited the full margin for a device already present"
    );
}

// ---------------------------------------------------------------- CDC-ECM

#[test]
fn ecm_moves_frames_both_ways() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::CdcEcm);
    assert_eq!(recv(&mut nic), None);
    let f = frame(60, 1);
    state.borrow_mut().rx.push_back(f.clone());
    state.borrow_mut().rx.push_back(frame(1514, 7));
    assert_eq!(recv_eventually(&mut nic), Some(f));
    assert_eq!(recv_eventually(&mut nic), Some(frame(1514, 7)));
    send(&mut nic, &frame(100, 3)).unwrap();
    flush_tx(&mut nic);
    send(&mut nic, &frame(1514, 4)).unwrap();
    flush_tx(&mut nic);
    let s = state.borrow();
    assert_eq!(s.tx, [frame(100, 3), frame(1514, 4)]);
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    drop(s);
    assert_eq!(nic.stats().rx_frames, 2);
    assert_eq!(nic.stats().tx_frames, 2);
}

#[test]
fn ecm_ends_frames_of_64n_bytes_with_a_zero_length_packet() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::CdcEcm);
    // Without the ZLP, usb-net would merge the 128-byte frame with the next one.
    for (len, seed) in [(128, 1), (60, 2), (1472, 3), (64, 4), (65, 5)] {
        send(&mut nic, &frame(len, seed)).unwrap();
        flush_tx(&mut nic);
    }
    let s = state.borrow();
    let lens: Vec<usize> = s.tx.iter().map(|f| f.len()).collect();
    assert_eq!(lens, [128, 60, 1472, 64, 65]);
    assert!(s.violations.is_empty(), "{:?}", s.violations);
}

#[test]
fn ecm_tolerates_a_stalled_packet_filter_request() {
    let (net, state) = UsbNetModel::new();
    state.borrow_mut().stall_packet_filter = true;
    let host = MockHost::new(Some(Box::new(net)));
    let options = ProbeOptions {
        prefer: CdcPreference::CdcEcm,
        ..ProbeOptions::default()
    };
    let mut nic = probe(host, options).map_err(|(e, _)| e).unwrap();
    state.borrow_mut().rx.push_back(frame(42, 9));
    assert_eq!(recv_eventually(&mut nic), Some(frame(42, 9)));
}

#[test]
fn transmit_reports_busy_while_the_previous_frame_is_in_flight() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::CdcEcm);
    nic.host_mut().out_latency_polls = 2;
    send(&mut nic, &frame(60, 1)).unwrap();
    assert!(!nic.can_transmit());
    assert_eq!(send(&mut nic, &frame(60, 2)), Err(DeviceError::Busy));
    assert!(nic.can_transmit());
    send(&mut nic, &frame(60, 3)).unwrap();
    flush_tx(&mut nic);
    assert_eq!(state.borrow().tx, [frame(60, 1), frame(60, 3)]);
    assert_eq!(nic.transmit(1515, |_| ()), Err(DeviceError::FrameTooLarge));
}

#[test]
fn unplugged_device_reports_gone_and_can_be_reprobed() {
    for prefer in [CdcPreference::Rndis, CdcPreference::CdcEcm] {
        let (mut nic, state) = usb_net_behind_hub(prefer);
        state.borrow_mut().rx.push_back(frame(60, 1));
        assert!(recv_eventually(&mut nic).is_some());
        assert_eq!(recv(&mut nic), None); // the next bulk-IN is parked
        nic.host_mut().unplugged = true;
        assert_eq!(nic.receive(|_| ()), Err(DeviceError::Gone));
        assert_eq!(send(&mut nic, &frame(60, 2)), Err(DeviceError::Gone));
        let host = nic.into_host();
        let (e, mut host) = probe(host, ProbeOptions::default()).err().unwrap();
        assert_eq!(e, UsbError::NoDevice);
        host.unplugged = false; // plugged back in
        let mut nic = probe(
            host,
            ProbeOptions {
                prefer,
                ..ProbeOptions::default()
            },
        )
        .map_err(|(e, _)| e)
        .unwrap();
        state.borrow_mut().rx.push_back(frame(70, 5));
        assert_eq!(recv_eventually(&mut nic), Some(frame(70, 5)));
    }
}

#[test]
fn a_stalled_bulk_in_is_cleared_and_rearmed() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::CdcEcm);
    // Switch the data interface back to alt 0 behind the driver's back: bulk-IN stalls.
    let target = nic.device().target;
    crate::device::set_interface(nic.host_mut(), &target, 1, 0).unwrap();
    assert_eq!(nic.receive(|_| ()), Err(DeviceError::Transfer));
    assert_eq!(nic.stats().rx_transfer_errors, 1);
    let host = nic.host_mut();
    assert_eq!(host.count_requests(2, 0x02, 1), 1); // CLEAR_FEATURE(ENDPOINT_HALT)
    crate::device::set_interface(nic.host_mut(), &target, 1, 1).unwrap();
    state.borrow_mut().rx.push_back(frame(60, 8));
    assert_eq!(recv_eventually(&mut nic), Some(frame(60, 8)));
}

// ---------------------------------------------------------------- RNDIS

#[test]
fn rndis_moves_frames_with_44_byte_headers() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::Rndis);
    for (len, seed) in [(60, 1), (1514, 2), (84, 3)] {
        state.borrow_mut().rx.push_back(frame(len, seed));
        assert_eq!(recv_eventually(&mut nic), Some(frame(len, seed)));
    }
    // 1514 + 44 = 1558 bytes; 20 + 44 = 64 bytes is a whole packet.
    for (len, seed) in [(1514, 4), (20, 5), (60, 6)] {
        send(&mut nic, &frame(len.max(14), seed)).unwrap();
        flush_tx(&mut nic);
    }
    let s = state.borrow();
    let lens: Vec<usize> = s.tx.iter().map(|f| f.len()).collect();
    assert_eq!(lens, [1514, 20, 60]);
    assert!(s.violations.is_empty(), "{:?}", s.violations);
}

#[test]
fn rndis_pads_short_messages_when_asked_and_the_device_gets_exact_frames() {
    let (net, state) = UsbNetModel::new();
    let hub = HubModel::qemu().attach(1, Box::new(net));
    let options = ProbeOptions {
        prefer: CdcPreference::Rndis,
        rndis_min_transfer: 1540,
        ..ProbeOptions::default()
    };
    let mut nic = probe(MockHost::new(Some(Box::new(hub))), options)
        .map_err(|(e, _)| e)
        .unwrap();
    for (len, seed) in [(60, 1), (1514, 2), (600, 3)] {
        send(&mut nic, &frame(len, seed)).unwrap();
        flush_tx(&mut nic);
    }
    let s = state.borrow();
    let lens: Vec<usize> = s.tx.iter().map(|f| f.len()).collect();
    assert_eq!(lens, [60, 1514, 600], "the padding never reaches the wire");
    assert_eq!(s.tx[2], frame(600, 3));
    // Short messages padded to 1,540 bytes; a full frame needs no padding (44 + 1514).
    assert_eq!(s.tx_message_lens, [1540, 1558, 1540]);
    assert!(s.violations.is_empty(), "{:?}", s.violations);
}

#[test]
fn rndis_sends_unpadded_messages_by_default() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::Rndis);
    send(&mut nic, &frame(60, 1)).unwrap();
    flush_tx(&mut nic);
    assert_eq!(state.borrow().tx_message_lens, [104]);
}

#[test]
fn rndis_accepts_several_packets_per_transfer() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::Rndis);
    {
        let mut s = state.borrow_mut();
        s.rndis_batch = true;
        for seed in 0..4 {
            s.rx.push_back(frame(300 + seed as usize, seed));
        }
    }
    let got: Vec<Vec<u8>> = (0..12).filter_map(|_| recv(&mut nic)).collect();
    assert_eq!(got.len(), 4);
    for (seed, f) in got.iter().enumerate() {
        assert_eq!(*f, frame(300 + seed, seed as u8));
    }
    assert_eq!(nic.stats().rx_frames, 4);
}

#[test]
fn rndis_drops_malformed_messages_and_keeps_receiving() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::Rndis);
    let header = |kind: u32, len: u32, off: u32, dlen: u32| {
        let mut m: Vec<u8> = [kind, len, off, dlen]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        m.resize(44, 0);
        m
    };
    {
        let mut s = state.borrow_mut();
        // MessageLength beyond the transfer.
        let mut a = header(1, 500, 36, 60);
        a.extend_from_slice(&frame(60, 1));
        s.raw_in.push_back(a);
        // DataOffset + DataLength beyond MessageLength, then a good packet.
        let mut b = header(1, 104, 36, 100);
        b.extend_from_slice(&frame(60, 2));
        let mut good = header(1, 104, 36, 60);
        good.extend_from_slice(&frame(60, 3));
        b.extend_from_slice(&good);
        s.raw_in.push_back(b);
        // An INDICATE_STATUS message in the data stream is skipped.
        let mut c = std::vec![7, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0];
        c.extend_from_slice(&good);
        s.raw_in.push_back(c);
    }
    let got: Vec<Vec<u8>> = (0..12).filter_map(|_| recv(&mut nic)).collect();
    assert_eq!(got, [frame(60, 3), frame(60, 3)]);
    assert_eq!(nic.stats().rx_errors, 3);
}

// ---------------------------------------------------------------- SMSC95xx

fn smsc(
    partner: Partner,
    multiple_frames: bool,
) -> (
    UsbNic<MockHost>,
    std::rc::Rc<std::cell::RefCell<super::smsc::SmscState>>,
) {
    let (model, state) = SmscModel::new(partner);
    let hub = HubModel::lan9514().attach(1, Box::new(model));
    let host = MockHost::new(Some(Box::new(hub)));
    let options = ProbeOptions {
        board_mac: Some(BOARD_MAC),
        smsc_multiple_frames: multiple_frames,
        ..ProbeOptions::default()
    };
    let nic = probe(host, options).map_err(|(e, _)| e).unwrap();
    (nic, state)
}

#[test]
fn smsc_init_sequence_leaves_the_chip_configured() {
    let (_nic, state) = smsc(Partner::FullDuplex, true);
    let s = state.borrow();
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    let hw = s.reg(reg::HW_CFG);
    assert_eq!(
        hw & (hw_cfg::BIR | hw_cfg::MEF | hw_cfg::BCE),
        hw_cfg::BIR | hw_cfg::MEF | hw_cfg::BCE
    );
    assert_eq!(hw & (hw_cfg::RXDOFF | hw_cfg::LRST), 0);
    assert_eq!(s.reg(reg::BURST_CAP), 37);
    assert_eq!(s.reg(reg::BULK_IN_DLY), 0x2000);
    assert_eq!(s.reg(reg::TX_CFG), 0x4);
    let cr = s.reg(reg::MAC_CR);
    assert_eq!(
        cr & (mac_cr::TXEN | mac_cr::RXEN | mac_cr::MCPAS),
        mac_cr::TXEN | mac_cr::RXEN | mac_cr::MCPAS
    );
    assert_eq!(s.reg(reg::AFC_CFG), 0x00F8_30A1);
    assert_eq!(s.reg(reg::INT_EP_CTL) & 0x8000, 0x8000);
    assert_eq!(s.phy[phy::ADVERTISE as usize] & 0x01E1, 0x01E1);
    assert_eq!(s.phy[phy::INT_MASK as usize], 0x50);
    // Auto-negotiation ran against the partner.
    assert_ne!(s.phy[phy::LPA as usize], 0);
}

#[test]
fn smsc_link_and_duplex_follow_the_negotiation() {
    let (mut nic, state) = smsc(Partner::FullDuplex, true);
    assert_eq!(nic.link_state(), LinkState::Up);
    let UsbNic::Smsc95xx(d) = &nic else { panic!() };
    assert!(d.full_duplex());
    let cr = state.borrow().reg(reg::MAC_CR);
    assert_eq!(cr & (mac_cr::FDPX | mac_cr::RCVOWN), mac_cr::FDPX);

    // Polled at most once a second: a second call now costs no control transfer.
    let before = state.borrow().register_accesses;
    assert_eq!(nic.link_state(), LinkState::Up);
    assert_eq!(state.borrow().register_accesses, before);

    // Cable pulled, then a half-duplex hub plugged in.
    state.borrow_mut().set_partner(Partner::None);
    nic.host_mut().delay_ms(1000);
    assert_eq!(nic.link_state(), LinkState::Down);
    state.borrow_mut().set_partner(Partner::HalfDuplexOnly);
    nic.host_mut().delay_ms(1000);
    assert_eq!(nic.link_state(), LinkState::Up);
    let cr = state.borrow().reg(reg::MAC_CR);
    assert_eq!(cr & (mac_cr::FDPX | mac_cr::RCVOWN), mac_cr::RCVOWN);
    assert!(state.borrow().violations.is_empty());
}

#[test]
fn smsc_link_stays_down_without_a_partner() {
    let (mut nic, _state) = smsc(Partner::None, true);
    assert_eq!(nic.link_state(), LinkState::Down);
}

#[test]
fn smsc_receives_several_frames_per_transfer_with_padding() {
    let (mut nic, state) = smsc(Partner::FullDuplex, true);
    let lens = [60usize, 61, 62, 63, 1514, 99];
    for (i, len) in lens.iter().enumerate() {
        state.borrow_mut().push_rx(&frame(*len, i as u8));
    }
    let got: Vec<Vec<u8>> = (0..20).filter_map(|_| recv(&mut nic)).collect();
    assert_eq!(got.len(), lens.len());
    for (i, f) in got.iter().enumerate() {
        assert_eq!(*f, frame(lens[i], i as u8), "frame {i}");
    }
    // All six came in one transfer (MEF).
    assert_eq!(state.borrow().in_transfers, 1);
}

#[test]
fn smsc_one_frame_per_transfer_without_mef() {
    let (mut nic, state) = smsc(Partner::FullDuplex, false);
    assert_eq!(state.borrow().reg(reg::HW_CFG) & hw_cfg::MEF, 0);
    for i in 0..3 {
        state.borrow_mut().push_rx(&frame(100, i));
    }
    let got: Vec<Vec<u8>> = (0..10).filter_map(|_| recv(&mut nic)).collect();
    assert_eq!(got, [frame(100, 0), frame(100, 1), frame(100, 2)]);
    assert_eq!(state.borrow().in_transfers, 3);
}

#[test]
fn smsc_skips_frames_with_bad_status_and_keeps_the_rest() {
    let (mut nic, state) = smsc(Partner::FullDuplex, true);
    {
        let mut s = state.borrow_mut();
        s.push_rx(&frame(60, 1));
        s.push_rx_bad(&frame(77, 2), rx_sts::CRC);
        s.push_rx_bad(&frame(90, 3), rx_sts::RW);
        s.push_rx(&frame(61, 4));
    }
    let got: Vec<Vec<u8>> = (0..10).filter_map(|_| recv(&mut nic)).collect();
    assert_eq!(got, [frame(60, 1), frame(61, 4)]);
    assert_eq!(nic.stats().rx_errors, 2);
}

#[test]
fn smsc_drops_truncated_transfers_and_tolerates_empty_ones() {
    let (mut nic, state) = smsc(Partner::FullDuplex, true);
    let good = frame(60, 1);
    let status = |fl: u32| (fl << 16).to_le_bytes();
    {
        let mut s = state.borrow_mut();
        // A status word claiming 200 bytes with only 64 present.
        let mut t = status(204).to_vec();
        t.extend_from_slice(&frame(64, 9));
        s.raw_in.push_back(t);
        // Two bytes: not even a status word.
        s.raw_in.push_back(std::vec![1, 2]);
        // A zero-length transfer (BIR clear on an idle link): no frame, no error.
        s.raw_in.push_back(Vec::new());
        // A good frame followed by a status word with length 0.
        let mut g = status(64).to_vec();
        g.extend_from_slice(&good);
        g.extend_from_slice(&[0; 4]);
        g.extend_from_slice(&[0; 4]);
        s.raw_in.push_back(g);
    }
    let got: Vec<Vec<u8>> = (0..12).filter_map(|_| recv(&mut nic)).collect();
    assert_eq!(got, [good]);
    assert_eq!(nic.stats().rx_errors, 3);
    assert_eq!(nic.stats().rx_frames, 1);
}

#[test]
fn smsc_transmits_with_command_words_and_ends_whole_packets_with_a_zlp() {
    let (mut nic, state) = smsc(Partner::FullDuplex, true);
    // 504 + 8 = 512 and 1016 + 8 = 1024: whole packets, so a ZLP ends the transfer (a pad
    // byte would be read by the chip as the next command).
    for (len, seed) in [(60, 1), (504, 2), (1514, 3), (1016, 4), (14, 5)] {
        send(&mut nic, &frame(len, seed)).unwrap();
        flush_tx(&mut nic);
    }
    let s = state.borrow();
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    let lens: Vec<usize> = s.tx.iter().map(|f| f.len()).collect();
    assert_eq!(lens, [60, 504, 1514, 1016, 14]);
    assert_eq!(s.tx[2], frame(1514, 3));
}

#[test]
fn smsc_clears_a_stalled_bulk_out_and_sends_again() {
    let (mut nic, state) = smsc(Partner::FullDuplex, true);
    let address = nic.device().target.address;
    state.borrow_mut().halt_out = true;
    send(&mut nic, &frame(60, 1)).unwrap();
    // The failed frame is counted when the pipe is next looked at, and the halt cleared.
    assert!(nic.can_transmit());
    assert_eq!(nic.stats().tx_errors, 1);
    let clears: Vec<_> = nic
        .host_mut()
        .control_log
        .iter()
        .filter(|r| r.address == address && r.setup.request_type == 0x02 && r.setup.request == 1)
        .map(|r| r.setup.index)
        .collect();
    assert_eq!(
        clears,
        [0x02],
        "CLEAR_FEATURE(ENDPOINT_HALT) on bulk-OUT endpoint 2"
    );
    state.borrow_mut().halt_out = false;
    send(&mut nic, &frame(60, 2)).unwrap();
    flush_tx(&mut nic);
    assert_eq!(state.borrow().tx, [frame(60, 2)]);
}

#[test]
fn smsc_init_fails_cleanly_when_lite_reset_never_completes() {
    let (model, state) = SmscModel::new(Partner::FullDuplex);
    state.borrow_mut().lrst_reads = u32::MAX;
    let hub = HubModel::lan9514().attach(1, Box::new(model));
    let host = MockHost::new(Some(Box::new(hub)));
    let (e, host) = probe(host, ProbeOptions::default()).err().unwrap();
    assert_eq!(e, UsbError::Timeout);
    // Bounded: 100 polls 10 ms apart, plus enumeration delays.
    assert!(host.clock_us < 5_000_000);
    assert_eq!(host.open_pipes(), 0);
}

#[test]
fn smsc_device_gone_reports_gone() {
    let (mut nic, _state) = smsc(Partner::FullDuplex, true);
    assert_eq!(recv(&mut nic), None);
    assert_eq!(nic.link_state(), LinkState::Up);
    nic.host_mut().unplugged = true;
    assert_eq!(nic.receive(|_| ()), Err(DeviceError::Gone));
    assert_eq!(nic.link_state(), LinkState::Up); // cached until the next poll is due
    nic.host_mut().delay_ms(1000);
    assert_eq!(nic.link_state(), LinkState::Down);
}

#[test]
fn a_device_that_vanishes_behind_the_hub_is_reported_gone_within_a_second() {
    for prefer in [CdcPreference::Rndis, CdcPreference::CdcEcm] {
        let (mut nic, _state) = usb_net_behind_hub(prefer);
        assert_eq!(recv(&mut nic), None); // bulk-IN parked, first liveness check passes
        nic.host_mut().vanished.push(2);
        // The parked transfer just stays pending; the next check is not due yet.
        assert_eq!(nic.receive(|_| ()), Ok(None));
        nic.host_mut().delay_ms(1000);
        assert_eq!(nic.receive(|_| ()), Err(DeviceError::Gone));
    }
    let (mut nic, _state) = smsc(Partner::FullDuplex, true);
    assert_eq!(recv(&mut nic), None);
    nic.host_mut().vanished.push(2);
    nic.host_mut().delay_ms(1000);
    assert_eq!(nic.receive(|_| ()), Err(DeviceError::Gone));
}

#[test]
fn an_idle_device_that_still_answers_is_not_reported_gone() {
    let (mut nic, state) = usb_net_behind_hub(CdcPreference::Rndis);
    for _ in 0..5 {
        assert_eq!(nic.receive(|_| ()), Ok(None));
        nic.host_mut().delay_ms(1000);
    }
    // One GET_STATUS per second at most.
    assert!(nic.host_mut().count_requests(2, 0x80, 0) <= 6);
    state.borrow_mut().rx.push_back(frame(60, 1));
    assert_eq!(recv_eventually(&mut nic), Some(frame(60, 1)));
}
