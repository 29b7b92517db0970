//! GPIO function selection, pulls and outputs (BCM2835 ARM Peripherals, chapter 6).

use crate::mmio::RegisterBlock;

const GPFSEL0: usize = 0x00;
const GPSET0: usize = 0x1C;
const GPCLR0: usize = 0x28;
const GPPUD: usize = 0x94;
const GPPUDCLK0: usize = 0x98;

/// What a pin does (GPFSELn, 3 bits per pin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Function {
    /// Input.
    Input = 0b000,
    /// Output.
    Output = 0b001,
    /// Alternate function 0 (for GPIO14/15: the PL011's TXD0/RXD0).
    Alt0 = 0b100,
    /// Alternate function 3 (for GPIO48-53: the EMMC controller's SD card signals).
    Alt3 = 0b111,
}

/// Pull-up/down control (GPPUD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Pull {
    /// No pull.
    None = 0,
    /// Pull down.
    Down = 1,
    /// Pull up.
    Up = 2,
}

/// The GPIO block.
pub struct Gpio {
    registers: RegisterBlock,
}

impl Gpio {
    /// The GPIO block at its BCM2835 address.
    ///
    /// # Safety
    /// Only one `Gpio` may change a given pin at a time.
    pub const unsafe fn new() -> Self {
        Self {
            // SAFETY: memory_map::GPIO is the GPIO block on every BCM2835.
            registers: unsafe { RegisterBlock::new(crate::memory_map::GPIO) },
        }
    }

    /// Selects the function of `pin` (0..=53).
    pub fn set_function(&self, pin: u32, function: Function) {
        let register = self.registers.register(GPFSEL0 + (pin as usize / 10) * 4);
        let shift = (pin % 10) * 3;
        register.modify(0b111 << shift, (function as u32) << shift);
    }

    /// Sets the pull of `pin`, with the clocked sequence the datasheet requires (page 101):
    /// the control signal must be held for 150 cycles before and after clocking it in.
    pub fn set_pull(&self, pin: u32, pull: Pull, delay_cycles: impl Fn(u32)) {
        let clock = self.registers.register(GPPUDCLK0 + (pin as usize / 32) * 4);
        self.registers.register(GPPUD).write(pull as u32);
        delay_cycles(150);
        clock.write(1 << (pin % 32));
        delay_cycles(150);
        self.registers.register(GPPUD).write(0);
        clock.write(0);
    }

    /// Drives output `pin` high or low.
    pub fn write(&self, pin: u32, high: bool) {
        let offset = if high { GPSET0 } else { GPCLR0 };
        self.registers
            .register(offset + (pin as usize / 32) * 4)
            .write(1 << (pin % 32));
    }
}
