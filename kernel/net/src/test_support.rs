//! In-memory Ethernet devices for the unit tests: a scripted mock and a wired pair.

use bramble_hal::ethernet::MAX_FRAME_LEN;
use bramble_hal::{DeviceError, EthernetDevice, Instant, LinkState, MacAddress};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::vec::Vec;

/// A device whose receive queue and transmit log the test controls.
pub struct MockDevice {
    pub mac: MacAddress,
    pub link: LinkState,
    pub rx: VecDeque<Result<Vec<u8>, DeviceError>>,
    pub tx: Vec<Vec<u8>>,
    /// Errors returned by the next transmit calls, before the closure runs.
    pub tx_errors: VecDeque<DeviceError>,
    /// Whether `can_transmit` says yes.
    pub tx_ready: bool,
    /// What `poll_at` reports: timed work of the device's own.
    pub timer_at: Option<Instant>,
    /// What `poll_timers` says (whether the stack has something to collect).
    pub timer_news: bool,
    /// Calls of `poll_timers`.
    pub timer_polls: usize,
    /// Calls of `link_state` (the appliance makes one at the start of every full poll).
    pub link_checks: usize,
}

impl MockDevice {
    pub fn new(mac: [u8; 6]) -> Self {
        Self {
            mac: MacAddress(mac),
            link: LinkState::Up,
            rx: VecDeque::new(),
            tx: Vec::new(),
            tx_errors: VecDeque::new(),
            tx_ready: true,
            timer_at: None,
            timer_news: false,
            timer_polls: 0,
            link_checks: 0,
        }
    }
}

impl EthernetDevice for MockDevice {
    fn mac_address(&self) -> MacAddress {
        self.mac
    }

    fn link_state(&mut self) -> LinkState {
        self.link_checks += 1;
        self.link
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        match self.rx.pop_front() {
            None => Ok(None),
            Some(Ok(frame)) => Ok(Some(f(&frame))),
            Some(Err(error)) => Err(error),
        }
    }

    fn can_transmit(&mut self) -> bool {
        self.tx_ready
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        if let Some(error) = self.tx_errors.pop_front() {
            return Err(error);
        }
        if len > MAX_FRAME_LEN {
            return Err(DeviceError::FrameTooLarge);
        }
        let mut frame = std::vec![0; len];
        let result = f(&mut frame);
        self.tx.push(frame);
        Ok(result)
    }

    fn poll_at(&mut self) -> Option<Instant> {
        self.timer_at
    }

    fn poll_timers(&mut self) -> bool {
        self.timer_polls += 1;
        self.timer_news
    }
}

type Wire = Rc<RefCell<VecDeque<Vec<u8>>>>;

/// One end of a wired pair: what one end transmits, the other receives.
pub struct WiredDevice {
    mac: MacAddress,
    inbox: Wire,
    outbox: Wire,
    /// Shared link state of the cable.
    pub link: Rc<RefCell<LinkState>>,
}

/// Two devices joined by a cable.
pub fn wired_pair(a: [u8; 6], b: [u8; 6]) -> (WiredDevice, WiredDevice) {
    let ab: Wire = Rc::default();
    let ba: Wire = Rc::default();
    let link = Rc::new(RefCell::new(LinkState::Up));
    (
        WiredDevice {
            mac: MacAddress(a),
            inbox: ba.clone(),
            outbox: ab.clone(),
            link: link.clone(),
        },
        WiredDevice {
            mac: MacAddress(b),
            inbox: ab,
            outbox: ba,
            link,
        },
    )
}

impl WiredDevice {
    /// Whether frames sent by the other end wait to be received.
    pub fn has_frames_waiting(&self) -> bool {
        !self.inbox.borrow().is_empty()
    }
}

impl EthernetDevice for WiredDevice {
    fn mac_address(&self) -> MacAddress {
        self.mac
    }

    fn link_state(&mut self) -> LinkState {
        *self.link.borrow()
    }

    fn receive<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, DeviceError> {
        if *self.link.borrow() == LinkState::Down {
            self.inbox.borrow_mut().clear();
            return Ok(None);
        }
        let frame = self.inbox.borrow_mut().pop_front();
        Ok(frame.map(|frame| f(&frame)))
    }

    fn can_transmit(&mut self) -> bool {
        true
    }

    fn transmit<R>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        let mut frame = std::vec![0; len];
        let result = f(&mut frame);
        if *self.link.borrow() == LinkState::Up {
            self.outbox.borrow_mut().push_back(frame);
        }
        Ok(result)
    }

    /// A cable has no timed work.
    fn poll_at(&mut self) -> Option<Instant> {
        None
    }

    fn poll_timers(&mut self) -> bool {
        false
    }
}
