//! The poll loop: when it sleeps (link down, transmit path busy, mDNS timers) and how it
//! follows a device that vanishes or returns as another adapter.

use super::*;

#[test]
fn with_the_link_down_and_nothing_sendable_the_loop_sleeps_until_the_next_link_check() {
    let config = NetworkConfig::dhcp("bramble", 1);
    let mut device = MockDevice::new(GUEST_MAC);
    device.link = LinkState::Down;
    device.tx_ready = false;
    let mut appliance = Appliance::new(device, config, memory(1), server(), at(0)).unwrap();
    for step in 0..5u64 {
        let now = at(step * 1_000);
        let next = appliance.poll(now).expect("a wake-up time");
        assert!(
            next.micros_since(now) >= LINK_DOWN_CHECK_MICROS / 2,
            "woken again after only {} us: the idle loop would spin",
            next.micros_since(now)
        );
    }
    assert!(appliance.device().tx.is_empty());
}

#[test]
fn with_the_link_down_past_the_link_local_wait_the_loop_still_sleeps() {
    // No device at all (the USB NIC is missing): DHCP has waited longer than the
    // link-local fallback's delay, which is not taken while the link is down.
    let config = NetworkConfig::dhcp("bramble", 1);
    let mut device = MockDevice::new(GUEST_MAC);
    device.link = LinkState::Down;
    let mut appliance = Appliance::new(device, config, memory(1), server(), at(0)).unwrap();
    let after_wait = LINK_LOCAL_AFTER_MICROS / 1_000 + 500;
    for step in 0..5u64 {
        let now = at(after_wait + step);
        let next = appliance.poll(now).expect("a wake-up time");
        assert!(
            next.micros_since(now) >= LINK_DOWN_CHECK_MICROS / 2,
            "woken again after only {} us: the idle loop would spin",
            next.micros_since(now)
        );
    }
    assert_eq!(appliance.ipv4_address(), None);
}

#[test]
fn with_the_transmit_path_busy_the_loop_waits_for_the_device_instead_of_spinning() {
    // Link up, but the device cannot take a frame (a USB transfer in flight): smoltcp
    // still wants to send its DHCP DISCOVER, so its own timer says "now" for ever.
    let config = NetworkConfig::dhcp("bramble", 1);
    let mut device = MockDevice::new(GUEST_MAC);
    device.tx_ready = false;
    let mut appliance = Appliance::new(device, config, memory(1), server(), at(0)).unwrap();
    for step in 0..5u64 {
        let now = at(step);
        let next = appliance.poll(now).expect("a wake-up time");
        assert!(
            next.micros_since(now) >= TRANSMIT_BUSY_RECHECK_MICROS,
            "woken again after only {} us: the idle loop would spin",
            next.micros_since(now)
        );
    }
    // Once the device can send again, the DISCOVER goes out on the next poll.
    appliance.device_mut().tx_ready = true;
    appliance.poll(at(10));
    assert_eq!(discovers(appliance.device()), 1);
}

#[test]
fn a_vanished_device_is_reported_and_can_be_replaced() {
    let config = NetworkConfig::dhcp("bramble", 1);
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        config,
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    appliance.poll(at(0));
    assert_eq!(appliance.device_fault(), None);
    appliance
        .device_mut()
        .rx
        .push_back(Err(bramble_hal::DeviceError::Gone));
    appliance.poll(at(10));
    assert_eq!(
        appliance.device_fault(),
        Some(bramble_hal::DeviceError::Gone)
    );
    let new_mac = [2, 0, 0, 0, 0, 9];
    let old = appliance.replace_device(MockDevice::new(new_mac));
    assert_eq!(old.mac.0, GUEST_MAC);
    assert_eq!(appliance.device_fault(), None);
    appliance.poll(at(20));
    // The new device is used at once: a DISCOVER from the new MAC.
    let device = appliance.device();
    assert_eq!(discovers(device), 1);
    let discover = device
        .tx
        .iter()
        .find(|f| dhcp_options(f).is_some())
        .unwrap();
    assert_eq!(&discover[6..12], &new_mac);
}

#[test]
fn a_device_that_returns_with_another_mac_has_it_adopted() {
    // A self-recovering device (ReprobingNic) goes down and comes back as another
    // adapter, without replace_device.
    let config = NetworkConfig::dhcp("bramble", 1);
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        config,
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    appliance.poll(at(0));
    appliance.device_mut().link = LinkState::Down;
    appliance.poll(at(10));
    let new_mac = [2, 0, 0, 0, 0, 7];
    appliance.device_mut().mac = bramble_hal::MacAddress(new_mac);
    appliance.device_mut().tx.clear();
    appliance.device_mut().link = LinkState::Up;
    appliance.poll(at(20));
    let device = appliance.device();
    let discover = device
        .tx
        .iter()
        .find(|f| dhcp_options(f).is_some())
        .expect("DHCP asks again after the link returns");
    assert_eq!(&discover[6..12], &new_mac, "sent from the new MAC");
}

#[test]
fn idle_poll_sleeps_until_the_mdns_probe_and_sends_it() {
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_config(true),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    let wake = appliance.poll(at(0)).expect("the mDNS probe is pending");
    assert!(wake > at(0) && wake <= at(250), "{wake:?}");
    appliance.device_mut().tx.clear();
    // Polling early sends nothing multicast.
    let early = appliance.poll(Instant::from_micros(wake.as_micros() - 1));
    assert_eq!(early, Some(wake));
    let multicast = |d: &MockDevice| {
        d.tx.iter()
            .filter(|f| f[..6] == [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb])
            .count()
    };
    assert_eq!(multicast(appliance.device()), 0);
    appliance.poll(wake);
    assert_eq!(multicast(appliance.device()), 1, "one probe to 224.0.0.251");
    // With mDNS and IPv6 off and nothing happening, there is nothing to wake for.
    let mut quiet = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_ipv4_only(false),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    assert_eq!(quiet.poll(at(0)), None);
    assert_eq!(quiet.poll(at(60_000)), None);
}

/// An appliance with nothing of its own to wake for (static address, mDNS and IPv6 off),
/// polled once at time 0, over a device whose own timed work is due at 10 ms.
fn quiet_appliance_over_a_device_with_timers() -> Appliance<'static, MockDevice> {
    let mut device = MockDevice::new(GUEST_MAC);
    device.timer_at = Some(at(10));
    let mut appliance =
        Appliance::new(device, static_ipv4_only(false), memory(1), server(), at(0)).unwrap();
    appliance.poll(at(0));
    appliance
}

#[test]
fn the_devices_own_deadline_is_part_of_the_wake_up_time() {
    let mut appliance = quiet_appliance_over_a_device_with_timers();
    assert_eq!(appliance.poll(at(1)), Some(at(10)));
    appliance.device_mut().timer_at = None;
    assert_eq!(appliance.poll(at(2)), None);
}

#[test]
fn a_wake_up_for_the_devices_timers_alone_leaves_the_stack_alone() {
    let mut appliance = quiet_appliance_over_a_device_with_timers();
    let link_checks = appliance.device().link_checks;
    // A frame waits, but the device says its timers brought nothing: the stack, which
    // would take the frame, is not walked.
    appliance.device_mut().rx.push_back(Ok(std::vec![0u8; 60]));
    assert_eq!(appliance.poll_timers(at(10)), Some(at(10)));
    let device = appliance.device();
    assert_eq!(device.timer_polls, 1, "the device's timed work ran");
    assert_eq!(device.link_checks, link_checks, "no full poll");
    assert_eq!(device.rx.len(), 1, "nothing was received");
    assert_eq!(appliance.counters().quiet_polls, 1);
}

#[test]
fn a_timer_wake_up_that_brings_news_polls_the_stack() {
    let mut appliance = quiet_appliance_over_a_device_with_timers();
    let link_checks = appliance.device().link_checks;
    appliance.device_mut().rx.push_back(Ok(std::vec![0u8; 60]));
    appliance.device_mut().timer_news = true;
    appliance.poll_timers(at(10));
    let device = appliance.device();
    assert_eq!(device.timer_polls, 1);
    assert_eq!(device.link_checks, link_checks + 1, "a full poll");
    assert!(device.rx.is_empty(), "the frame was taken");
    assert_eq!(appliance.counters().quiet_polls, 0);
}

#[test]
fn a_timer_wake_up_polls_the_stack_when_its_own_deadline_or_nothing_is_due() {
    // Before the device's deadline (another timer of the caller's woke it): a full poll.
    let mut appliance = quiet_appliance_over_a_device_with_timers();
    let link_checks = appliance.device().link_checks;
    appliance.poll_timers(at(5));
    assert_eq!(appliance.device().link_checks, link_checks + 1);
    assert_eq!(appliance.device().timer_polls, 0);

    // The stack's own deadline (the mDNS probe) has come: a full poll sends the probe,
    // although the device's timers are due too and bring nothing.
    let mut appliance = Appliance::new(
        MockDevice::new(GUEST_MAC),
        static_config(true),
        memory(1),
        server(),
        at(0),
    )
    .unwrap();
    let probe_at = appliance.poll(at(0)).expect("the mDNS probe is pending");
    appliance.device_mut().timer_at = Some(probe_at);
    appliance.device_mut().tx.clear();
    appliance.poll_timers(probe_at);
    let multicast = appliance
        .device()
        .tx
        .iter()
        .filter(|f| f[..6] == [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb])
        .count();
    assert_eq!(multicast, 1, "the probe went out");
    assert_eq!(appliance.counters().quiet_polls, 0);
}

#[test]
fn after_a_device_is_replaced_the_next_poll_is_a_full_one() {
    let mut appliance = quiet_appliance_over_a_device_with_timers();
    let mut device = MockDevice::new([2, 0, 0, 0, 0, 9]);
    device.timer_at = Some(at(10));
    appliance.replace_device(device);
    appliance.poll_timers(at(10));
    assert_eq!(
        appliance.device().link_checks,
        1,
        "the new device's link was checked"
    );
    assert_eq!(appliance.counters().quiet_polls, 0);
}
