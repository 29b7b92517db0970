//! Core and root port: the vendor check, the core reset and its settle time, host-mode
//! configuration (PHY, DMA, FIFO sizes), the controller's interrupt output, and powering,
//! resetting and watching the root port.

use bramble_hal::usb::{Speed, UsbError, UsbHost};

use super::registers::{
    self as reg, FifoSize, Gahbcfg, Ghwcfg2, Gintsts, Grstctl, Grxfsiz, Gsnpsid, Gusbcfg, Hcfg,
    Hcint, Hprt0,
};
use super::{
    CHANNELS, CONTROL_BUFFER_LEN, CONTROL_CHANNEL, CORE_SETTLE_US, Dwc2Error, Dwc2Host, MAX_PIPES,
    PIPE_ARENA_LEN,
};
use crate::dma::DmaAllocator;
use crate::mmio::{FieldValue, RegisterBlock, Word};
use crate::timer::SystemTimer;

/// Time to wait for a device to connect to the root port.
const CONNECT_TIMEOUT_MS: u32 = 500;

/// A controller whose core was reset and is settling into host mode: the first half of
/// bring-up, from [`Dwc2Host::start`]. Do other work meanwhile (the board reads the SD
/// card), then [`Dwc2Starting::finish`].
pub struct Dwc2Starting {
    host: Dwc2Host,
    /// When the core has settled (µs).
    settled_at: u64,
}

impl Dwc2Starting {
    /// Waits for whatever is left of the settle time, then configures the core (DMA, FIFOs)
    /// and powers the root port.
    pub fn finish(mut self) -> Result<Dwc2Host, Dwc2Error> {
        let now = self.host.micros();
        if now < self.settled_at {
            self.host.timer.delay_micros(self.settled_at - now);
        }
        self.host.configure_core()?;
        Ok(self.host)
    }
}

impl Dwc2Host {
    /// Brings the core up in host mode with DMA and powers the root port, waiting out the
    /// settle time after the core reset: [`Dwc2Host::start`] and [`Dwc2Starting::finish`]
    /// in one go.
    pub fn new(timer: SystemTimer, dma: &mut DmaAllocator) -> Result<Self, Dwc2Error> {
        Self::start(timer, dma)?.finish()
    }

    /// Checks the core and resets it; it then needs [`CORE_SETTLE_US`] to stay in host mode
    /// (U-Boot: "This long sleep is very important"), which the caller can spend on other
    /// work before [`Dwc2Starting::finish`]. The board must have powered the controller
    /// through the mailbox first (SET_POWER_STATE, device 3, reference §2.2). Takes its DMA
    /// buffers from `dma`.
    pub fn start(timer: SystemTimer, dma: &mut DmaAllocator) -> Result<Dwc2Starting, Dwc2Error> {
        // SAFETY: memory_map::USB is the DWC2 register block on every BCM2835 (and in QEMU).
        let registers = unsafe { RegisterBlock::new(crate::memory_map::USB) };
        let mut host = Self {
            registers,
            timer,
            control: dma.allocate_bytes(CONTROL_BUFFER_LEN)?,
            arena: dma.allocate_bytes(PIPE_ARENA_LEN)?,
            arena_used: 0,
            pipes: [const { None }; MAX_PIPES],
            channels: CHANNELS,
            end_bulk_in_on_idle_nak: false,
            quiet_receive: None,
            quiet_attempts: 0,
            interrupts_on: false,
            port_seen: core::cell::Cell::new(None),
            haintmsk: core::cell::Cell::new(0),
            hcsplt_cleared: core::cell::Cell::new(0),
            receive_waits: super::ReceiveWaits::default(),
            last_activity_at: 0,
            quiet_restart_waiting: false,
        };
        host.reset_core()?;
        Ok(Dwc2Starting {
            settled_at: host.micros() + CORE_SETTLE_US,
            host,
        })
    }

    /// Vendor check and core soft reset (§2.3 steps 1-5).
    pub(super) fn reset_core(&mut self) -> Result<(), Dwc2Error> {
        let id = self.r(reg::GSNPSID).read().bits();
        if id != reg::SNPSID_BCM2835 && id != reg::SNPSID_QEMU {
            log::error!("dwc2: unknown core id {id:#010x}");
            return Err(Dwc2Error::UnknownCore(id));
        }
        self.r(reg::GAHBCFG)
            .modify(Gahbcfg::GLOBAL_INTERRUPT_ENABLE.clear());
        self.r(reg::GUSBCFG).modify(
            Gusbcfg::ULPI_EXTERNAL_VBUS.clear() + Gusbcfg::TERMSEL_DATA_LINE_PULSING.clear(),
        );

        // Core soft reset (§2.3 step 5).
        if !self.wait_for(self.r(reg::GRSTCTL), Grstctl::AHB_IDLE.set(), 100_000) {
            return Err(Dwc2Error::ResetTimeout);
        }
        self.r(reg::GRSTCTL).write(Grstctl::CORE_SOFT_RESET.set());
        if !self.wait_for(
            self.r(reg::GRSTCTL),
            Grstctl::CORE_SOFT_RESET.clear(),
            10_000,
        ) {
            return Err(Dwc2Error::ResetTimeout);
        }
        Ok(())
    }

    /// Host-mode configuration after the settle time: PHY, DMA, FIFO sizes, interrupts off,
    /// root port powered.
    pub(super) fn configure_core(&mut self) -> Result<(), Dwc2Error> {
        let id = self.r(reg::GSNPSID).read();
        self.r(reg::GUSBCFG).modify(
            Gusbcfg::ULPI_SELECT.clear()
                + Gusbcfg::PHY_16_BIT.clear()
                + Gusbcfg::ULPI_FULL_SPEED_ONLY.clear()
                + Gusbcfg::ULPI_CLOCK_SUSPEND.clear(),
        );
        let hw2 = self.r(reg::GHWCFG2).read();
        if hw2.get(Ghwcfg2::ARCHITECTURE) != Ghwcfg2::INTERNAL_DMA {
            return Err(Dwc2Error::NoInternalDma(hw2.bits()));
        }
        self.channels = ((hw2.get(Ghwcfg2::HOST_CHANNELS_MINUS_ONE) + 1) as usize).min(CHANNELS);
        self.r(reg::GAHBCFG).modify(
            Gahbcfg::AXI_BURST.clear() + Gahbcfg::DMA_ENABLE.set() + Gahbcfg::WAIT_AXI_WRITES.set(),
        );
        self.r(reg::GUSBCFG)
            .modify(Gusbcfg::HNP_CAPABLE.clear() + Gusbcfg::SRP_CAPABLE.clear());
        self.r(reg::GINTSTS).write(Gintsts::ALL.set());
        self.r(reg::PCGCCTL).write(Word::ALL.clear());
        self.r(reg::HCFG).modify(Hcfg::FULL_LOW_SPEED_CLOCK.clear());

        // FIFO sizes in words (USPi/Circle values), mandatory even in DMA mode (§2.10).
        self.r(reg::GRXFSIZ).write(Grxfsiz::DEPTH.val(1024));
        self.r(reg::GNPTXFSIZ)
            .write(FifoSize::DEPTH.val(1024) + FifoSize::START_ADDRESS.val(1024));
        self.r(reg::HPTXFSIZ)
            .write(FifoSize::DEPTH.val(1024) + FifoSize::START_ADDRESS.val(2048));
        self.r(reg::GRSTCTL).write(
            Grstctl::TX_FIFO_FLUSH.set() + Grstctl::TX_FIFO_NUMBER.val(Grstctl::ALL_TX_FIFOS),
        );
        if !self.wait_for(self.r(reg::GRSTCTL), Grstctl::TX_FIFO_FLUSH.clear(), 10_000) {
            return Err(Dwc2Error::ResetTimeout);
        }
        self.r(reg::GRSTCTL).write(Grstctl::RX_FIFO_FLUSH.set());
        if !self.wait_for(self.r(reg::GRSTCTL), Grstctl::RX_FIFO_FLUSH.clear(), 10_000) {
            return Err(Dwc2Error::ResetTimeout);
        }
        self.timer.delay_micros(1);

        self.r(reg::GINTMSK).write(FieldValue::NONE);
        self.r(reg::HAINTMSK).write(FieldValue::NONE);
        self.haintmsk.set(0);
        self.hcsplt_cleared.set(0);
        for channel in 0..self.channels {
            self.ch(channel, reg::HCINTMSK).write(FieldValue::NONE);
            self.ch(channel, reg::HCINT).write(Hcint::ALL.set());
        }
        self.power_port();
        log::info!(
            "dwc2: core {}.{:03x} ({}), {} channels, buffer DMA",
            id.get(Gsnpsid::MAJOR),
            id.get(Gsnpsid::MINOR),
            if id.bits() == reg::SNPSID_QEMU {
                "QEMU"
            } else {
                "BCM2835"
            },
            self.channels
        );
        Ok(())
    }

    /// Enables the controller's interrupt output for channel halts and root port changes.
    /// Register [`handle_interrupt`](super::handle_interrupt) on [`IRQ`](super::IRQ) first.
    pub fn enable_interrupts(&mut self) {
        self.r(reg::GINTSTS).write(Gintsts::ALL.set());
        self.r(reg::GINTMSK)
            .write(Gintsts::HOST_CHANNELS.set() + Gintsts::PORT.set());
        self.r(reg::GAHBCFG)
            .modify(Gahbcfg::GLOBAL_INTERRUPT_ENABLE.set());
        self.interrupts_on = true;
        self.port_seen.set(None);
    }

    /// Whether a device is attached and the port enabled. With interrupts on, HPRT0 is read
    /// again only after a root port interrupt (every connect, disconnect, enable or
    /// over-current change raises one): it was read on every poll of every transfer, over
    /// 20 register reads per request, each an exit from the emulated CPU under QEMU.
    pub fn port_enabled(&self) -> bool {
        let events = super::PORT_EVENTS.load(core::sync::atomic::Ordering::Acquire);
        if self.interrupts_on
            && let Some((seen_at, enabled)) = self.port_seen.get()
            && seen_at == events
        {
            return enabled;
        }
        let enabled = self
            .r(reg::HPRT0)
            .read()
            .matches(Hprt0::CONNECT_STATUS.set() + Hprt0::ENABLE.set());
        self.port_seen.set(Some((events, enabled)));
        enabled
    }

    /// Writes HPRT0 with the named fields changed, never writing 1 to a write-1-to-clear
    /// bit.
    pub(super) fn write_port(&self, change: FieldValue<Hprt0>) {
        self.port_seen.set(None);
        let port = self.r(reg::HPRT0).read().without(Hprt0::WRITE_1_TO_CLEAR);
        self.r(reg::HPRT0).write_value(port.with(change));
    }

    pub(super) fn power_port(&self) {
        if !self.r(reg::HPRT0).is_set(Hprt0::POWER) {
            self.write_port(Hprt0::POWER.set());
        }
    }

    /// Powers the root port, waits for a device, resets the port and returns the device's
    /// speed: [`UsbHost::reset_root_port`]. Closes every open pipe first.
    pub(super) fn reset_port(&mut self) -> Result<Speed, UsbError> {
        self.close_all_pipes();
        self.halt_channel(CONTROL_CHANNEL);
        self.power_port();
        let mut connected = false;
        for _ in 0..CONNECT_TIMEOUT_MS {
            if self.r(reg::HPRT0).is_set(Hprt0::CONNECT_STATUS) {
                connected = true;
                break;
            }
            self.delay_ms(1);
        }
        if !connected {
            log::warn!("dwc2: nothing connected to the root port");
            return Err(UsbError::NoDevice);
        }
        self.delay_ms(100);
        self.write_port(Hprt0::RESET.set());
        self.delay_ms(50);
        self.write_port(Hprt0::RESET.clear());
        self.delay_ms(20);
        self.port_seen.set(None);
        let port = self.r(reg::HPRT0).read();
        // Acknowledge connect/enable changes (write them back; never write ENABLE).
        self.r(reg::HPRT0)
            .write_value(port.without(Hprt0::ENABLE.set() + Hprt0::RESET.set()));
        if !port.is_set(Hprt0::ENABLE) {
            log::warn!("dwc2: root port did not enable after reset (HPRT0 {port:#x})");
            return Err(UsbError::NoDevice);
        }
        let speed = match port.get(Hprt0::SPEED) {
            Hprt0::SPEED_HIGH => Speed::High,
            Hprt0::SPEED_FULL => Speed::Full,
            _ => Speed::Low,
        };
        log::info!("dwc2: root port enabled, {speed:?} speed device");
        Ok(speed)
    }
}
