//! Host-test models: a mock [`UsbHost`] that routes transfers to device models by address,
//! with packet-level OUT delivery, babble and short-packet checks, hubs and unplugging.

pub mod hub;
pub mod smsc;
pub mod usbnet;

use std::boxed::Box;
use std::collections::BTreeMap;
use std::string::String;
use std::vec::Vec;

use bramble_hal::Instant;

use bramble_hal::usb::{
    DeviceTarget, PipeConfig, PipeId, SetupPacket, Speed, TransferStatus, UsbError, UsbHost,
};

/// What every device model offers to the mock host.
pub trait DeviceModel {
    /// Standard-request state (descriptors, address, configuration).
    fn standard(&mut self) -> &mut StandardState;
    /// Class and vendor requests; returns the IN data stage.
    fn class_control(&mut self, setup: SetupPacket, data_out: &[u8]) -> Result<Vec<u8>, UsbError>;
    /// A bulk/interrupt IN transfer of at most `max_len` bytes; `None` = NAK.
    fn bulk_in(&mut self, endpoint: u8, max_len: usize) -> Result<Option<Vec<u8>>, UsbError>;
    /// One OUT packet (at most the max packet size; empty = ZLP).
    fn bulk_out_packet(&mut self, endpoint: u8, packet: &[u8]) -> Result<(), UsbError>;
    /// The hub inside, if this is a hub.
    fn hub(&mut self) -> Option<&mut hub::HubModel> {
        None
    }
    /// A bus reset: back to the default state at address 0.
    fn bus_reset(&mut self) {
        self.standard().reset();
    }
}

/// Descriptors and standard-request state of a model device.
pub struct StandardState {
    /// Device descriptor bytes.
    pub device: Vec<u8>,
    /// Configuration descriptors by index.
    pub configs: Vec<Vec<u8>>,
    /// String descriptors by index (index 0 is generated).
    pub strings: BTreeMap<u8, String>,
    /// Current address.
    pub address: u8,
    /// Current configuration value (0 = unconfigured).
    pub configuration: u8,
    /// Alternate settings by interface.
    pub alternates: BTreeMap<u8, u8>,
    /// Bus speed.
    pub speed: Speed,
    /// Every SET_INTERFACE received, in order.
    pub set_interface_log: Vec<(u8, u8)>,
}

impl StandardState {
    /// A device with these descriptors.
    pub fn new(device: &[u8], configs: &[&[u8]], speed: Speed) -> Self {
        Self {
            device: device.to_vec(),
            configs: configs.iter().map(|c| c.to_vec()).collect(),
            strings: BTreeMap::new(),
            address: 0,
            configuration: 0,
            alternates: BTreeMap::new(),
            speed,
            set_interface_log: Vec::new(),
        }
    }

    fn reset(&mut self) {
        self.address = 0;
        self.configuration = 0;
        self.alternates.clear();
    }

    /// `bMaxPacketSize0`.
    pub fn max_packet0(&self) -> usize {
        self.device[7] as usize
    }

    fn current_config(&self) -> Option<&Vec<u8>> {
        self.configs.iter().find(|c| c[5] == self.configuration)
    }

    /// Handles a standard request; `None` if it is not one.
    fn handle(&mut self, setup: SetupPacket) -> Option<Result<Vec<u8>, UsbError>> {
        if setup.request_type & 0x60 != 0 {
            return None;
        }
        Some(match (setup.request_type, setup.request) {
            (0x80, 6) => {
                let index = setup.value as u8;
                match (setup.value >> 8) as u8 {
                    1 => Ok(self.device.clone()),
                    2 => self
                        .configs
                        .get(index as usize)
                        .cloned()
                        .ok_or(UsbError::Stall),
                    3 if index == 0 => Ok(std::vec![4, 3, 0x09, 0x04]),
                    3 => self
                        .strings
                        .get(&index)
                        .map(|s| crate::fixtures::string_descriptor(s))
                        .ok_or(UsbError::Stall),
                    _ => Err(UsbError::Stall),
                }
            }
            (0x00, 5) => {
                if setup.value == 0 || setup.value > 127 || self.configuration != 0 {
                    return Some(Err(UsbError::Stall));
                }
                self.address = setup.value as u8;
                Ok(Vec::new())
            }
            (0x00, 9) => {
                let value = setup.value as u8;
                if self.address == 0 || (value != 0 && !self.configs.iter().any(|c| c[5] == value))
                {
                    return Some(Err(UsbError::Stall));
                }
                self.configuration = value;
                self.alternates.clear();
                Ok(Vec::new())
            }
            (0x01, 11) => {
                let (iface, alt) = (setup.index as u8, setup.value as u8);
                let exists = self.current_config().is_some_and(|c| {
                    crate::descriptor::ConfigurationDescriptor::new_checked(c)
                        .unwrap()
                        .interface(iface, alt)
                        .is_some()
                });
                if !exists {
                    return Some(Err(UsbError::Stall));
                }
                self.alternates.insert(iface, alt);
                self.set_interface_log.push((iface, alt));
                Ok(Vec::new())
            }
            (0x80, 0) => Ok(std::vec![1, 0]),
            (0x02, 1) => Ok(Vec::new()),
            _ => Err(UsbError::Stall),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PipeState {
    Idle,
    In(usize),
    Out(usize),
    Done(usize),
}

struct MockPipe {
    config: PipeConfig,
    buffer: Vec<u8>,
    state: PipeState,
    busy_polls: u32,
}

/// Records of one control transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlRecord {
    /// Device address it went to.
    pub address: u8,
    /// The SETUP packet.
    pub setup: SetupPacket,
}

/// The mock host controller.
pub struct MockHost {
    /// Microseconds since start; advanced by `delay_ms` and by tests.
    pub clock_us: u64,
    root: Option<Box<dyn DeviceModel>>,
    pipes: Vec<Option<MockPipe>>,
    /// Every control transfer, in order.
    pub control_log: Vec<ControlRecord>,
    /// Once set, every transfer fails with `Disconnected`.
    pub unplugged: bool,
    /// Polls an OUT transfer stays pending before it is delivered.
    pub out_latency_polls: u32,
    /// Maximum number of pipes (DWC2: 8 channels minus control).
    pub max_pipes: usize,
    /// Addresses of devices that vanished behind a hub: like QEMU, transfers to them
    /// never complete (bulk stays pending, control times out).
    pub vanished: Vec<u8>,
    /// What [`UsbHost::poll_at`] reports: timed work of the host's own (the tests set it;
    /// the model's transfers need none).
    pub timer_at: Option<Instant>,
    /// What [`UsbHost::poll_timers`] says once `timer_at` is due (and then clears it).
    pub timer_news: bool,
    /// Times `poll_timers` found `timer_at` due.
    pub timers_serviced: u32,
}

impl MockHost {
    /// A host with `root` on its root port (or nothing).
    pub fn new(root: Option<Box<dyn DeviceModel>>) -> Self {
        Self {
            clock_us: 0,
            root,
            pipes: Vec::new(),
            control_log: Vec::new(),
            unplugged: false,
            out_latency_polls: 0,
            max_pipes: 7,
            vanished: Vec::new(),
            timer_at: None,
            timer_news: false,
            timers_serviced: 0,
        }
    }

    fn find(&mut self, address: u8) -> Option<&mut dyn DeviceModel> {
        if self.vanished.contains(&address) {
            return None;
        }
        let root = self.root.as_deref_mut()?;
        find_device(root, address)
    }

    fn pipe(&mut self, pipe: PipeId) -> Result<&mut MockPipe, UsbError> {
        self.pipes
            .get_mut(pipe.0 as usize)
            .and_then(|p| p.as_mut())
            .ok_or(UsbError::InvalidRequest)
    }

    /// The hub on the root port, if the root device is one (to plug devices in and out).
    pub fn root_hub(&mut self) -> Option<&mut hub::HubModel> {
        self.root.as_deref_mut()?.hub()
    }

    /// Number of open pipes.
    pub fn open_pipes(&self) -> usize {
        self.pipes.iter().filter(|p| p.is_some()).count()
    }

    /// Control transfers sent to `address` with this request type and request.
    pub fn count_requests(&self, address: u8, request_type: u8, request: u8) -> usize {
        self.control_log
            .iter()
            .filter(|r| {
                r.address == address
                    && r.setup.request_type == request_type
                    && r.setup.request == request
            })
            .count()
    }

    fn control(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data_out: &[u8],
    ) -> Result<Vec<u8>, UsbError> {
        if self.unplugged {
            return Err(UsbError::Disconnected);
        }
        self.control_log.push(ControlRecord {
            address: device.address,
            setup,
        });
        let dev = self.find(device.address).ok_or(UsbError::Timeout)?;
        let std = dev.standard();
        if std.speed != device.speed {
            return Err(UsbError::Transfer);
        }
        let dev_mps = std.max_packet0();
        let host_mps = device.ep0_max_packet as usize;
        let mut answer = match std.handle(setup) {
            Some(r) => r?,
            None => dev.class_control(setup, data_out)?,
        };
        answer.truncate(setup.length as usize);
        // Packet-size mismatches on EP0 show as on the wire: babble if the device's packets
        // are larger than the host expects, an early short packet if smaller.
        if answer.len() > host_mps && dev_mps > host_mps {
            return Err(UsbError::Transfer);
        }
        if host_mps > dev_mps && answer.len() > dev_mps {
            answer.truncate(dev_mps);
        }
        Ok(answer)
    }
}

fn find_device(dev: &mut dyn DeviceModel, address: u8) -> Option<&mut dyn DeviceModel> {
    if dev.standard().address == address {
        return Some(dev);
    }
    let hub = dev.hub()?;
    for port in hub.ports.iter_mut() {
        if !port.enabled() {
            continue;
        }
        if let Some(child) = port.device.as_deref_mut()
            && let Some(found) = find_device(child, address)
        {
            return Some(found);
        }
    }
    None
}

impl UsbHost for MockHost {
    fn now(&self) -> Instant {
        Instant::from_micros(self.clock_us)
    }

    fn delay_ms(&mut self, ms: u32) {
        self.clock_us += ms as u64 * 1000;
    }

    fn reset_root_port(&mut self) -> Result<Speed, UsbError> {
        self.pipes.clear();
        if self.unplugged {
            return Err(UsbError::NoDevice);
        }
        let root = self.root.as_deref_mut().ok_or(UsbError::NoDevice)?;
        root.bus_reset();
        Ok(root.standard().speed)
    }

    fn control_in(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &mut [u8],
    ) -> Result<usize, UsbError> {
        if !setup.is_in() || data.len() < setup.length as usize {
            return Err(UsbError::InvalidRequest);
        }
        let answer = self.control(device, setup, &[])?;
        data[..answer.len()].copy_from_slice(&answer);
        Ok(answer.len())
    }

    fn control_out(
        &mut self,
        device: &DeviceTarget,
        setup: SetupPacket,
        data: &[u8],
    ) -> Result<(), UsbError> {
        if setup.is_in() || data.len() != setup.length as usize {
            return Err(UsbError::InvalidRequest);
        }
        self.control(device, setup, data).map(|_| ())
    }

    fn open_pipe(&mut self, config: PipeConfig) -> Result<PipeId, UsbError> {
        if self.unplugged {
            return Err(UsbError::Disconnected);
        }
        if config.is_in() && !config.buffer_len.is_multiple_of(config.max_packet as usize) {
            return Err(UsbError::InvalidRequest);
        }
        let pipe = MockPipe {
            config,
            buffer: std::vec![0; config.buffer_len],
            state: PipeState::Idle,
            busy_polls: 0,
        };
        if let Some(i) = self.pipes.iter().position(|p| p.is_none()) {
            self.pipes[i] = Some(pipe);
            return Ok(PipeId(i as u8));
        }
        if self.pipes.len() >= self.max_pipes {
            return Err(UsbError::NoResources);
        }
        self.pipes.push(Some(pipe));
        Ok(PipeId(self.pipes.len() as u8 - 1))
    }

    fn close_pipe(&mut self, pipe: PipeId) {
        if let Some(p) = self.pipes.get_mut(pipe.0 as usize) {
            *p = None;
        }
    }

    fn reset_data_toggle(&mut self, _pipe: PipeId) {}

    fn start_in(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError> {
        if self.unplugged {
            return Err(UsbError::Disconnected);
        }
        let p = self.pipe(pipe)?;
        if !p.config.is_in()
            || len > p.buffer.len()
            || !len.is_multiple_of(p.config.max_packet as usize)
            || matches!(p.state, PipeState::In(_) | PipeState::Out(_))
        {
            return Err(UsbError::InvalidRequest);
        }
        p.state = PipeState::In(len);
        Ok(())
    }

    fn received(&self, pipe: PipeId) -> &[u8] {
        match self.pipes.get(pipe.0 as usize).and_then(|p| p.as_ref()) {
            Some(p) => match p.state {
                PipeState::Done(n) if p.config.is_in() => &p.buffer[..n],
                _ => &[],
            },
            None => &[],
        }
    }

    fn out_buffer(&mut self, pipe: PipeId) -> &mut [u8] {
        match self.pipes.get_mut(pipe.0 as usize).and_then(|p| p.as_mut()) {
            Some(p) if !matches!(p.state, PipeState::Out(_)) => &mut p.buffer,
            _ => &mut [],
        }
    }

    fn start_out(&mut self, pipe: PipeId, len: usize) -> Result<(), UsbError> {
        if self.unplugged {
            return Err(UsbError::Disconnected);
        }
        let latency = self.out_latency_polls;
        let p = self.pipe(pipe)?;
        if p.config.is_in()
            || len > p.buffer.len()
            || matches!(p.state, PipeState::In(_) | PipeState::Out(_))
        {
            return Err(UsbError::InvalidRequest);
        }
        p.state = PipeState::Out(len);
        p.busy_polls = latency;
        Ok(())
    }

    fn poll(&mut self, pipe: PipeId) -> Result<TransferStatus, UsbError> {
        let unplugged = self.unplugged;
        let p = self.pipe(pipe)?;
        let (config, state) = (p.config, p.state);
        if unplugged && matches!(state, PipeState::In(_) | PipeState::Out(_)) {
            p.state = PipeState::Idle;
            return Err(UsbError::Disconnected);
        }
        if p.busy_polls > 0 {
            p.busy_polls -= 1;
            return Ok(TransferStatus::Pending);
        }
        let endpoint = config.endpoint;
        let mps = config.max_packet as usize;
        let result: Result<PipeState, UsbError> = match state {
            PipeState::Idle => return Ok(TransferStatus::Idle),
            PipeState::Done(n) => return Ok(TransferStatus::Complete(n)),
            PipeState::In(len) => {
                let Some(dev) = self.find(config.device.address) else {
                    return Ok(TransferStatus::Pending);
                };
                match dev.bulk_in(endpoint & 0x0F, len) {
                    Ok(None) => return Ok(TransferStatus::Pending),
                    Ok(Some(data)) if data.len() > len => Err(UsbError::Transfer),
                    Ok(Some(data)) => {
                        let p = self.pipe(pipe)?;
                        p.buffer[..data.len()].copy_from_slice(&data);
                        Ok(PipeState::Done(data.len()))
                    }
                    Err(e) => Err(e),
                }
            }
            PipeState::Out(len) => {
                let data = self.pipe(pipe)?.buffer[..len].to_vec();
                let dev = self
                    .find(config.device.address)
                    .ok_or(UsbError::Disconnected)?;
                let mut r = Ok(());
                for chunk in data.chunks(mps) {
                    r = r.and_then(|_| dev.bulk_out_packet(endpoint & 0x0F, chunk));
                }
                if len == 0 || (config.zero_length_termination && len.is_multiple_of(mps)) {
                    r = r.and_then(|_| dev.bulk_out_packet(endpoint & 0x0F, &[]));
                }
                r.map(|_| PipeState::Done(len))
            }
        };
        let p = self.pipe(pipe)?;
        match result {
            Ok(s) => {
                p.state = s;
                match s {
                    PipeState::Done(n) => Ok(TransferStatus::Complete(n)),
                    _ => Ok(TransferStatus::Pending),
                }
            }
            Err(e) => {
                p.state = PipeState::Idle;
                Err(e)
            }
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        self.timer_at
    }

    fn poll_timers(&mut self) -> bool {
        if self
            .timer_at
            .is_some_and(|at| at.as_micros() <= self.clock_us)
        {
            self.timer_at = None;
            self.timers_serviced += 1;
            return self.timer_news;
        }
        false
    }
}

#[cfg(test)]
mod tests;
