//! Keeps the network device alive across a USB loss: [`ReprobingNic`] wraps the running
//! [`UsbNic`] and, when it reports [`DeviceError::Gone`] (or no device was found at all),
//! holds the bare host and probes again with a bounded, doubling back-off, bringing the link
//! back up when a device answers.
//!
//! ```text
//!   Running(UsbNic) ──receive/transmit: Gone──► Missing(host, next attempt)
//!         ▲                                         │ link_state() once due:
//!         └───────────── probe() succeeded ◄────────┘ probe(); failed → wait 1, 2, 4 … 30 s
//! ```
//!
//! Seen from the network stack, a lost device is a link that went down and came back: while
//! the device is missing `link_state` is [`LinkState::Down`], nothing is received and nothing
//! can be sent; after a successful re-probe the link is up again, so the appliance restarts
//! DHCP. [`DeviceError::Gone`] never reaches the caller: it is this type's job to act on it.

use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};

use crate::probe::{NicKind, ProbeOptions, UsbNic, probe};
use bramble_hal::usb::{UsbError, UsbHost};

/// Wait before the first probe after a loss (or after a failed probe at start).
pub const FIRST_RETRY_MICROS: u64 = 1_000_000;
/// Longest wait between two probes; the wait doubles after each failure up to this.
pub const MAX_RETRY_MICROS: u64 = 30_000_000;

/// What [`ReprobingNic`] counted since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryCounters {
    /// Times the running device reported itself gone.
    pub losses: u32,
    /// Probes run to find the device again (not counting the one in [`ReprobingNic::new`]).
    pub reprobes_attempted: u32,
    /// Of those, the probes that found a device and started its driver.
    pub reprobes_succeeded: u32,
    /// The error of the last failed probe, if any.
    pub last_probe_error: Option<UsbError>,
}

/// The device is missing: the host waits for the next probe.
struct Missing<H> {
    host: H,
    /// When the next probe may run.
    next_attempt: Instant,
    /// The wait after the next failure (doubles, capped at [`MAX_RETRY_MICROS`]).
    next_backoff_micros: u64,
    /// Whether `link_state` has said [`LinkState::Down`] since the loss. A probe runs only
    /// after that, so the caller always sees the link go down before it comes back up (and
    /// the appliance renews its address on the new link).
    down_reported: bool,
}

/// Every method that takes the state puts it back before returning (nothing between can
/// fail), so it is never absent when a method starts.
const RESTORED: &str = "the device state is put back after every transition";

enum State<H: UsbHost> {
    Running(UsbNic<H>),
    Missing(Missing<H>),
}

/// A USB network device that survives being unplugged, reset or lost behind a hub: an
/// [`EthernetDevice`] over [`probe`] that probes again with the same [`ProbeOptions`] when
/// the device goes away. Retries run inside [`EthernetDevice::link_state`] (which the
/// appliance calls at the start of every poll) once the time [`EthernetDevice::poll_at`]
/// reports has passed; each takes the bounded time of one probe.
pub struct ReprobingNic<H: UsbHost> {
    /// Always `Some` between calls; taken only while a transition moves the host.
    state: Option<State<H>>,
    options: ProbeOptions,
    /// The last MAC address a driver reported (kept while the device is missing).
    mac: MacAddress,
    counters: RecoveryCounters,
}

impl<H: UsbHost> ReprobingNic<H> {
    /// Probes for the network device now. If none is found, the result starts out missing
    /// (link down) and probes again [`FIRST_RETRY_MICROS`] later, then with back-off.
    pub fn new(host: H, options: ProbeOptions) -> Self {
        match probe(host, options) {
            Ok(nic) => Self::from_nic(nic, options),
            Err((error, host)) => {
                log::warn!(
                    "usb: no network device yet ({error}); probing again in {} s",
                    FIRST_RETRY_MICROS / 1_000_000
                );
                let counters = RecoveryCounters {
                    last_probe_error: Some(error),
                    ..RecoveryCounters::default()
                };
                let next_attempt = host.now().add_micros(FIRST_RETRY_MICROS);
                Self {
                    state: Some(State::Missing(Missing {
                        host,
                        next_attempt,
                        next_backoff_micros: 2 * FIRST_RETRY_MICROS,
                        down_reported: false,
                    })),
                    options,
                    mac: options.board_mac.unwrap_or_default(),
                    counters,
                }
            }
        }
    }

    /// Wraps a device already probed with `options`.
    pub fn from_nic(nic: UsbNic<H>, options: ProbeOptions) -> Self {
        let mac = nic.mac_address();
        Self {
            mac,
            state: Some(State::Running(nic)),
            options: keep_mac(options, mac),
            counters: RecoveryCounters::default(),
        }
    }

    /// The running driver, or `None` while the device is missing.
    pub fn nic(&self) -> Option<&UsbNic<H>> {
        match &self.state {
            Some(State::Running(nic)) => Some(nic),
            _ => None,
        }
    }

    /// The running driver, mutably, or `None` while the device is missing.
    pub fn nic_mut(&mut self) -> Option<&mut UsbNic<H>> {
        match &mut self.state {
            Some(State::Running(nic)) => Some(nic),
            _ => None,
        }
    }

    /// Whether a driver is running (the device is present).
    pub fn is_present(&self) -> bool {
        self.nic().is_some()
    }

    /// Which driver runs, or `None` while the device is missing.
    pub fn kind(&self) -> Option<NicKind> {
        self.nic().map(UsbNic::kind)
    }

    /// Loss and re-probe counts.
    pub fn counters(&self) -> RecoveryCounters {
        self.counters
    }

    /// The options every probe uses: those given, with `board_mac` set to the first
    /// device's address if none was given.
    pub fn options(&self) -> ProbeOptions {
        self.options
    }

    /// The host controller, whichever state the device is in.
    pub fn host_mut(&mut self) -> &mut H {
        match self.state.as_mut().expect(RESTORED) {
            State::Running(nic) => nic.host_mut(),
            State::Missing(missing) => &mut missing.host,
        }
    }

    /// Gives the host back, stopping the driver if one runs.
    pub fn into_host(self) -> H {
        match self.state.expect(RESTORED) {
            State::Running(nic) => nic.into_host(),
            State::Missing(missing) => missing.host,
        }
    }

    /// The running driver said the device is gone: take the host back and schedule a probe.
    fn lose_device(&mut self) {
        let Some(State::Running(nic)) = self.state.take() else {
            return;
        };
        let kind = nic.kind();
        let host = nic.into_host();
        self.counters.losses += 1;
        log::warn!(
            "usb: {kind:?} network device lost (loss {}); probing again in {} s",
            self.counters.losses,
            FIRST_RETRY_MICROS / 1_000_000
        );
        self.state = Some(State::Missing(Missing {
            next_attempt: host.now().add_micros(FIRST_RETRY_MICROS),
            host,
            next_backoff_micros: 2 * FIRST_RETRY_MICROS,
            down_reported: false,
        }));
    }

    /// Runs one probe if it is due; on success the driver runs again.
    fn retry_if_due(&mut self) {
        let due = match &self.state {
            Some(State::Missing(m)) => m.down_reported && m.host.now() >= m.next_attempt,
            _ => false,
        };
        if !due {
            return;
        }
        let Some(State::Missing(missing)) = self.state.take() else {
            return;
        };
        self.counters.reprobes_attempted += 1;
        let attempt = self.counters.reprobes_attempted;
        log::info!("usb: probing for the network device (attempt {attempt})");
        match probe(missing.host, self.options) {
            Ok(nic) => {
                let mac = nic.mac_address();
                self.counters.reprobes_succeeded += 1;
                self.counters.last_probe_error = None;
                log::info!(
                    "usb: {:?} network device back after {attempt} attempt(s), MAC {mac}",
                    nic.kind()
                );
                if mac != self.mac {
                    log::warn!("usb: the network device's MAC changed from {}", self.mac);
                }
                self.mac = mac;
                self.options = keep_mac(self.options, mac);
                self.state = Some(State::Running(nic));
            }
            Err((error, host)) => {
                let wait = missing.next_backoff_micros;
                log::warn!(
                    "usb: probe failed ({error}); probing again in {} s",
                    wait / 1_000_000
                );
                self.counters.last_probe_error = Some(error);
                self.state = Some(State::Missing(Missing {
                    next_attempt: host.now().add_micros(wait),
                    host,
                    next_backoff_micros: (wait * 2).min(MAX_RETRY_MICROS),
                    down_reported: true,
                }));
            }
        }
    }
}

/// Probes after the first pass the first device's MAC as `board_mac` (if the board gave
/// none), so that an SMSC95xx, which takes its address from the driver, keeps the one the
/// network knows, whatever its registers hold after a reset. ECM and RNDIS devices report
/// their own address and ignore it.
fn keep_mac(options: ProbeOptions, mac: MacAddress) -> ProbeOptions {
    ProbeOptions {
        board_mac: options.board_mac.or(Some(mac)),
        ..options
    }
}

impl<H: UsbHost> EthernetDevice for ReprobingNic<H> {
    /// The running driver's address; while the device is missing, the last one it had (or
    /// the board MAC if none was ever found). A re-probed device may report another one.
    fn mac_address(&self) -> MacAddress {
        self.nic().map_or(self.mac, UsbNic::mac_address)
    }

    /// The driver's link state, or [`LinkState::Down`] while the device is missing. Also
    /// runs the next probe when it is due.
    fn link_state(&mut self) -> LinkState {
        self.retry_if_due();
        match &mut self.state {
            Some(State::Running(nic)) => nic.link_state(),
            Some(State::Missing(missing)) => {
                missing.down_reported = true;
                LinkState::Down
            }
            None => LinkState::Down,
        }
    }

    /// Nothing (`Ok(None)`) while the device is missing; a [`DeviceError::Gone`] from the
    /// driver starts recovery and is reported as `Ok(None)` too.
    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        let Some(nic) = self.nic_mut() else {
            return Ok(None);
        };
        match nic.receive(f) {
            Err(DeviceError::Gone) => {
                self.lose_device();
                Ok(None)
            }
            other => other,
        }
    }

    /// `false` while the device is missing.
    fn can_transmit(&mut self) -> bool {
        self.nic_mut().is_some_and(|nic| nic.can_transmit())
    }

    /// [`DeviceError::Busy`] while the device is missing (the network stack drops the frame
    /// as it would any refused one and does not treat it as a device fault); a
    /// [`DeviceError::Gone`] from the driver starts recovery and is reported as `Busy` too.
    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        let Some(nic) = self.nic_mut() else {
            return Err(DeviceError::Busy);
        };
        match nic.transmit(len, f) {
            Err(DeviceError::Gone) => {
                self.lose_device();
                Err(DeviceError::Busy)
            }
            other => other,
        }
    }

    /// While the device is missing, when the next probe is due (the caller then calls
    /// [`EthernetDevice::link_state`], which runs it); while a driver runs, the driver's.
    fn poll_at(&mut self) -> Option<Instant> {
        match self.state.as_mut().expect(RESTORED) {
            State::Running(nic) => nic.poll_at(),
            State::Missing(missing) => Some(missing.next_attempt),
        }
    }

    /// While the device is missing, whether the next probe is due (it runs in the next
    /// [`EthernetDevice::link_state`]); while a driver runs, the driver's timed work.
    fn poll_timers(&mut self) -> bool {
        match self.state.as_mut().expect(RESTORED) {
            State::Running(nic) => nic.poll_timers(),
            State::Missing(missing) => missing.host.now() >= missing.next_attempt,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::boxed::Box;
    use std::vec::Vec;

    use super::*;
    use crate::model::MockHost;
    use crate::model::hub::HubModel;
    use crate::model::smsc::{Partner, SmscModel};
    use crate::model::usbnet::{MAC, UsbNetModel};
    use crate::probe::CdcPreference;
    use crate::smsc95xx::reg;

    const BOARD_MAC: MacAddress = MacAddress([0xb8, 0x27, 0xeb, 0x12, 0x34, 0x56]);
    const SECOND: u64 = 1_000_000;

    fn frame(len: usize, seed: u8) -> Vec<u8> {
        let mut f: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
        f[..6].copy_from_slice(&[0xff; 6]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f
    }

    /// Polls `receive` a bounded number of times until a frame arrives.
    fn receive_eventually(nic: &mut ReprobingNic<MockHost>) -> Option<Vec<u8>> {
        (0..8).find_map(|_| nic.receive(|f| f.to_vec()).unwrap())
    }

    /// Sends `data` and polls until the transfer is done (bounded).
    fn send(nic: &mut ReprobingNic<MockHost>, data: &[u8]) -> Result<(), DeviceError> {
        nic.transmit(data.len(), |buf| buf.copy_from_slice(data))?;
        assert!(
            (0..8).any(|_| nic.can_transmit()),
            "transmit never completed"
        );
        Ok(())
    }

    fn now(nic: &mut ReprobingNic<MockHost>) -> Instant {
        nic.host_mut().now()
    }

    /// Moves the mock clock to `when`.
    fn advance_to(nic: &mut ReprobingNic<MockHost>, when: Instant) {
        let host = nic.host_mut();
        host.clock_us = host.clock_us.max(when.as_micros());
    }

    /// Lets the next probe run: the clock to the deadline, then one link check.
    fn run_next_probe(nic: &mut ReprobingNic<MockHost>) -> LinkState {
        let deadline = nic.poll_at().expect("a probe is scheduled");
        advance_to(nic, deadline);
        nic.link_state()
    }

    /// Runs `n` probes that find nothing and returns the waits scheduled after each.
    fn failing_probes(nic: &mut ReprobingNic<MockHost>, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let before = nic.counters().reprobes_attempted;
                assert_eq!(run_next_probe(nic), LinkState::Down);
                assert_eq!(nic.counters().reprobes_attempted, before + 1);
                assert_eq!(nic.counters().last_probe_error, Some(UsbError::NoDevice));
                let deadline = nic.poll_at().unwrap();
                deadline.micros_since(now(nic)) / SECOND
            })
            .collect()
    }

    #[test]
    fn a_device_lost_behind_the_hub_is_probed_again_with_bounded_back_off_and_comes_back() {
        for (prefer, kind) in [
            (CdcPreference::Rndis, NicKind::Rndis),
            (CdcPreference::CdcEcm, NicKind::CdcEcm),
        ] {
            let (net, state) = UsbNetModel::new();
            let host = MockHost::new(Some(Box::new(HubModel::qemu().attach(1, Box::new(net)))));
            let options = ProbeOptions {
                prefer,
                ..ProbeOptions::default()
            };
            let mut nic = ReprobingNic::new(host, options);
            assert_eq!(nic.kind(), Some(kind));
            assert_eq!(nic.link_state(), LinkState::Up);
            assert_eq!(nic.poll_at(), None);
            let mac = nic.mac_address();
            state.borrow_mut().rx.push_back(frame(60, 1));
            assert_eq!(receive_eventually(&mut nic), Some(frame(60, 1)));
            assert_eq!(nic.receive(|_| ()), Ok(None)); // idle: the first liveness check passes

            // Pulled out behind the hub: the driver notices within a second, and the
            // wrapper turns its Gone into a link that is down.
            let device = nic.host_mut().root_hub().unwrap().unplug(1).unwrap();
            assert_eq!(nic.receive(|_| ()), Ok(None));
            assert!(nic.is_present()); // the next liveness check is not due yet
            nic.host_mut().delay_ms(1000);
            assert_eq!(nic.receive(|_| ()), Ok(None));
            assert!(!nic.is_present());
            assert_eq!(nic.kind(), None);
            assert_eq!(nic.counters().losses, 1);
            assert_eq!(nic.link_state(), LinkState::Down);
            assert!(!nic.can_transmit());
            assert_eq!(send(&mut nic, &frame(60, 2)), Err(DeviceError::Busy));
            assert_eq!(nic.mac_address(), mac);

            // No probe before the deadline, however often the link is checked.
            let deadline = nic.poll_at().unwrap();
            assert_eq!(deadline.micros_since(now(&mut nic)), FIRST_RETRY_MICROS);
            let transfers = nic.host_mut().control_log.len();
            for _ in 0..5 {
                assert_eq!(nic.link_state(), LinkState::Down);
            }
            assert_eq!(nic.host_mut().control_log.len(), transfers);
            assert_eq!(nic.counters().reprobes_attempted, 0);

            // Probes while it is away find nothing; the wait doubles up to the cap.
            assert_eq!(failing_probes(&mut nic, 8), [2, 4, 8, 16, 30, 30, 30, 30]);
            assert_eq!(nic.receive(|_| ()), Ok(None));

            // Plugged back in: the next probe finds it and frames move both ways.
            nic.host_mut().root_hub().unwrap().plug(1, device);
            assert_eq!(run_next_probe(&mut nic), LinkState::Up);
            let counters = nic.counters();
            assert_eq!(
                (counters.reprobes_attempted, counters.reprobes_succeeded),
                (9, 1)
            );
            assert_eq!(counters.last_probe_error, None);
            assert_eq!(nic.kind(), Some(kind));
            assert_eq!(nic.mac_address(), mac);
            assert_eq!(nic.poll_at(), None);
            state.borrow_mut().rx.push_back(frame(70, 5));
            assert_eq!(receive_eventually(&mut nic), Some(frame(70, 5)));
            send(&mut nic, &frame(80, 6)).unwrap();
            assert_eq!(state.borrow().tx.last(), Some(&frame(80, 6)));
            assert!(state.borrow().violations.is_empty());
        }
    }

    #[test]
    fn a_failed_probe_at_start_is_retried_until_the_device_appears() {
        let host = MockHost::new(Some(Box::new(HubModel::lan9514())));
        let options = ProbeOptions {
            board_mac: Some(BOARD_MAC),
            smsc_multiple_frames: true,
            ..ProbeOptions::default()
        };
        let mut nic = ReprobingNic::new(host, options);
        assert!(!nic.is_present());
        assert_eq!(nic.counters().last_probe_error, Some(UsbError::NoDevice));
        assert_eq!(nic.link_state(), LinkState::Down);
        assert_eq!(nic.receive(|_| ()), Ok(None));
        assert!(!nic.can_transmit());
        assert_eq!(nic.mac_address(), BOARD_MAC);
        assert_eq!(
            nic.poll_at().unwrap().micros_since(now(&mut nic)),
            FIRST_RETRY_MICROS
        );
        assert_eq!(failing_probes(&mut nic, 3), [2, 4, 8]);

        let (smsc, state) = SmscModel::new(Partner::FullDuplex);
        nic.host_mut().root_hub().unwrap().plug(1, Box::new(smsc));
        assert_eq!(run_next_probe(&mut nic), LinkState::Up);
        assert_eq!(nic.kind(), Some(NicKind::Smsc95xx));
        assert_eq!(nic.mac_address(), BOARD_MAC);
        assert_eq!(nic.counters().reprobes_succeeded, 1);
        assert_eq!(nic.counters().losses, 0);
        state.borrow_mut().push_rx(&frame(60, 3));
        assert_eq!(receive_eventually(&mut nic), Some(frame(60, 3)));
        send(&mut nic, &frame(100, 4)).unwrap();
        assert_eq!(state.borrow().tx.last(), Some(&frame(100, 4)));
        assert!(state.borrow().violations.is_empty());
    }

    #[test]
    fn an_smsc95xx_without_a_board_mac_keeps_its_first_address_across_a_reprobe() {
        let (smsc, state) = SmscModel::new(Partner::FullDuplex);
        state.borrow_mut().regs.insert(reg::ADDRL, 0x0000_0002);
        state.borrow_mut().regs.insert(reg::ADDRH, 0x0000_0100);
        let first = MacAddress([0x02, 0, 0, 0, 0, 0x01]);
        let hub = HubModel::lan9514().attach(1, Box::new(smsc));
        let mut nic =
            ReprobingNic::new(MockHost::new(Some(Box::new(hub))), ProbeOptions::default());
        assert_eq!(nic.mac_address(), first);
        assert_eq!(nic.options().board_mac, Some(first));

        // Lost, and back with other bytes in its address registers (as after a reset
        // without an EEPROM).
        let device = nic.host_mut().root_hub().unwrap().unplug(1).unwrap();
        state.borrow_mut().regs.insert(reg::ADDRL, 0x0000_0002);
        state.borrow_mut().regs.insert(reg::ADDRH, 0x0000_0200);
        nic.host_mut().delay_ms(1000);
        assert_eq!(nic.receive(|_| ()), Ok(None));
        assert!(!nic.is_present());
        nic.host_mut().root_hub().unwrap().plug(1, device);
        assert_eq!(nic.link_state(), LinkState::Down);
        assert_eq!(run_next_probe(&mut nic), LinkState::Up);
        assert_eq!(nic.mac_address(), first);
        assert_eq!(state.borrow().reg(reg::ADDRH), 0x0000_0100);
    }

    #[test]
    fn the_link_is_reported_down_before_a_probe_brings_it_back() {
        // The loss is noticed while sending; the device is back before anyone looked at
        // the link. The first link check must still say Down (so the appliance renews its
        // address), the next one probes and says Up.
        let (net, state) = UsbNetModel::new();
        let mut nic =
            ReprobingNic::new(MockHost::new(Some(Box::new(net))), ProbeOptions::default());
        assert_eq!(nic.link_state(), LinkState::Up);
        nic.host_mut().unplugged = true;
        assert_eq!(send(&mut nic, &frame(60, 1)), Err(DeviceError::Busy));
        assert_eq!(nic.counters().losses, 1);
        nic.host_mut().unplugged = false;
        let deadline = nic.poll_at().unwrap();
        advance_to(&mut nic, deadline.add_micros(5 * SECOND));
        assert_eq!(nic.link_state(), LinkState::Down);
        assert_eq!(nic.counters().reprobes_attempted, 0);
        assert_eq!(nic.link_state(), LinkState::Up);
        assert_eq!(nic.counters().reprobes_succeeded, 1);
        assert_eq!(nic.mac_address(), MacAddress(MAC));
        send(&mut nic, &frame(60, 2)).unwrap();
        assert_eq!(state.borrow().tx.last(), Some(&frame(60, 2)));
    }

    #[test]
    fn a_device_that_answers_is_never_reprobed() {
        let (net, state) = UsbNetModel::new();
        let hub = HubModel::qemu().attach(1, Box::new(net));
        let mut nic =
            ReprobingNic::new(MockHost::new(Some(Box::new(hub))), ProbeOptions::default());
        for i in 0..40u8 {
            assert_eq!(nic.link_state(), LinkState::Up);
            state.borrow_mut().rx.push_back(frame(60, i));
            assert_eq!(receive_eventually(&mut nic), Some(frame(60, i)));
            nic.host_mut().delay_ms(1000);
        }
        assert_eq!(nic.counters(), RecoveryCounters::default());
        assert_eq!(nic.poll_at(), None);
        // One root port reset: the probe in `new`.
        assert_eq!(nic.host_mut().root_hub().unwrap().resets, [1]);
    }

    #[test]
    fn the_next_probe_and_the_running_hosts_timed_work_are_reported() {
        // Missing: the next probe is the deadline, and it is news for the stack once due
        // (the appliance's next link check runs it).
        let mut nic = ReprobingNic::new(MockHost::new(None), ProbeOptions::default());
        let probe_at = nic.poll_at().expect("a probe is scheduled");
        assert!(!nic.poll_timers(), "the probe is not due yet");
        advance_to(&mut nic, probe_at);
        assert!(nic.poll_timers(), "the probe is due");
        assert_eq!(
            nic.counters().reprobes_attempted,
            0,
            "poll_timers does not probe"
        );

        // Running: the host's own timed work, passed through both ways.
        let (net, _state) = UsbNetModel::new();
        let mut nic =
            ReprobingNic::new(MockHost::new(Some(Box::new(net))), ProbeOptions::default());
        assert_eq!(nic.poll_at(), None);
        let at = now(&mut nic).add_micros(10_000);
        nic.host_mut().timer_at = Some(at);
        assert_eq!(nic.poll_at(), Some(at));
        assert!(!nic.poll_timers());
        assert_eq!(nic.host_mut().timers_serviced, 0, "not due yet");
        advance_to(&mut nic, at);
        assert!(!nic.poll_timers(), "serviced, and nothing came of it");
        assert_eq!(nic.host_mut().timers_serviced, 1);
        assert_eq!(nic.poll_at(), None);
        nic.host_mut().timer_at = Some(at);
        nic.host_mut().timer_news = true;
        assert!(nic.poll_timers(), "serviced, and a transfer completed");
    }

    /// Whether `frame` is a DHCP client message (IPv4, UDP to port 67).
    fn is_dhcp_request(frame: &[u8]) -> bool {
        frame.len() > 14 + 20 + 8
            && frame[12..14] == [0x08, 0x00]
            && frame[14 + 9] == 17
            && frame[14 + 20 + 2..14 + 20 + 4] == [0, 67]
    }

    #[test]
    fn the_appliance_sees_a_lost_device_as_a_link_loss_and_asks_dhcp_again_after_the_reprobe() {
        use bramble_http::{Server, ServerConfig, SiteSource};
        use bramble_net::appliance::{Appliance, ApplianceMemory, NetworkConfig, PoolSizes};

        let memory = ApplianceMemory::leaked(PoolSizes {
            connections: 1,
            sessions: 1,
            cells: 1,
            sources: 0,
        });
        let server = Server::new(SiteSource::Unavailable("test"), ServerConfig::default());

        let (net, state) = UsbNetModel::new();
        let hub = HubModel::qemu().attach(1, Box::new(net));
        let mut nic =
            ReprobingNic::new(MockHost::new(Some(Box::new(hub))), ProbeOptions::default());
        let now = nic.host_mut().now();
        let mut appliance =
            Appliance::new(nic, NetworkConfig::dhcp("bramble", 7), memory, server, now).unwrap();
        // Runs the appliance for `millis` of model time, 10 ms a step.
        let run = |appliance: &mut Appliance<'_, ReprobingNic<MockHost>>, millis: u64| {
            for _ in 0..millis / 10 {
                let host = appliance.device_mut().host_mut();
                host.delay_ms(10);
                let now = host.now();
                appliance.poll(now);
                // The model delivers a bulk OUT when its pipe is polled next: let the last
                // frame of this step reach the wire as the hardware would.
                appliance.device_mut().can_transmit();
            }
        };
        let dhcp_requests =
            |state: &std::rc::Rc<std::cell::RefCell<crate::model::usbnet::UsbNetState>>| {
                state
                    .borrow()
                    .tx
                    .iter()
                    .filter(|f| is_dhcp_request(f))
                    .count()
            };

        run(&mut appliance, 500);
        let before_loss = dhcp_requests(&state);
        let first_discover = appliance.device_mut().host_mut().now();
        assert!(
            before_loss >= 1,
            "the appliance asks for an address at start"
        );

        // Lost behind the hub: within a second or two the appliance sees the link go down,
        // and no device fault (nothing for the board to do).
        let device = appliance
            .device_mut()
            .host_mut()
            .root_hub()
            .unwrap()
            .unplug(1)
            .unwrap();
        run(&mut appliance, 2500);
        assert_eq!(appliance.counters().link_losses, 1);
        assert_eq!(appliance.device_fault(), None);
        assert!(!appliance.device().is_present());
        assert!(appliance.device().counters().reprobes_attempted >= 1);

        // Back: the next probe finds it, the link comes up and DHCP starts again at once
        // (not at its ten-second retransmission).
        appliance
            .device_mut()
            .host_mut()
            .root_hub()
            .unwrap()
            .plug(1, device);
        let sent_while_away = dhcp_requests(&state);
        let mut waited = 0;
        while !appliance.device().is_present() && waited < 40_000 {
            run(&mut appliance, 100);
            waited += 100;
        }
        assert!(appliance.device().is_present());
        assert_eq!(appliance.device().counters().reprobes_succeeded, 1);
        run(&mut appliance, 200);
        assert!(dhcp_requests(&state) > sent_while_away);
        // All within smoltcp's 10 s DISCOVER retransmission: this one is the restart.
        let elapsed = appliance
            .device_mut()
            .host_mut()
            .now()
            .micros_since(first_discover);
        assert!(elapsed < 9 * SECOND, "{elapsed} us");
        assert_eq!(appliance.counters().link_losses, 1);
        assert_eq!(appliance.device_fault(), None);
    }
}
