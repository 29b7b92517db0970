//! What a modelled USB device offers to the usbredir server: its identity, the endpoints of
//! its active configuration, and answers to control, bulk and interrupt transfers. Time is
//! passed in explicitly (microseconds since the server started), so models are testable
//! without sleeping.

use crate::proto::{ConnectInfo, ControlHeader, EndpointInfo, InterfaceInfo};

/// Microseconds since the server started.
pub type Micros = u64;

/// How a transfer ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Completed; the IN data (empty for OUT transfers and zero-length packets).
    Data(Vec<u8>),
    /// The endpoint answered STALL.
    Stall,
    /// No data yet (the device NAKs): ask again after [`UsbFunction::poll`] or new input.
    Pending,
}

/// A USB device behind the usbredir server.
pub trait UsbFunction {
    /// What device_connect announces.
    fn connect_info(&self) -> ConnectInfo;
    /// Endpoints of the active configuration, EP0 included.
    fn endpoints(&self) -> Vec<EndpointInfo>;
    /// Interfaces of the active configuration.
    fn interfaces(&self) -> Vec<InterfaceInfo>;
    /// A control transfer other than SET_ADDRESS, SET/GET_CONFIGURATION and
    /// SET/GET_INTERFACE (QEMU handles or forwards those separately).
    fn control(&mut self, now: Micros, setup: &ControlHeader, data_out: &[u8]) -> Answer;
    /// SET_CONFIGURATION; `false` = STALL.
    fn set_configuration(&mut self, now: Micros, value: u8) -> bool;
    /// The active configuration value.
    fn configuration(&self) -> u8;
    /// SET_INTERFACE; `false` = STALL.
    fn set_alt_setting(&mut self, interface: u8, alt: u8) -> bool;
    /// A bulk OUT transfer (QEMU may split one into max-packet pieces).
    fn bulk_out(&mut self, now: Micros, endpoint: u8, data: &[u8]) -> Answer;
    /// A bulk IN transfer of at most `max_len` bytes.
    fn bulk_in(&mut self, now: Micros, endpoint: u8, max_len: usize) -> Answer;
    /// The interrupt IN endpoint is polled; data to report, if any.
    fn interrupt_in(&mut self, now: Micros, endpoint: u8) -> Option<Vec<u8>>;
    /// A USB bus reset.
    fn bus_reset(&mut self, now: Micros);
    /// Advances internal timers; returns when it next needs a call.
    fn poll(&mut self, now: Micros) -> Option<Micros>;
}
