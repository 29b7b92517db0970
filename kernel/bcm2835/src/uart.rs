//! The PL011 UART (UART0) on GPIO14/15: the serial console (BCM2835 ARM Peripherals, ch. 13).

use crate::mmio::RegisterBlock;

const DR: usize = 0x00;
const FR: usize = 0x18;
const IBRD: usize = 0x24;
const FBRD: usize = 0x28;
const LCRH: usize = 0x2C;
const CR: usize = 0x30;
const IMSC: usize = 0x38;
const ICR: usize = 0x44;

const FR_TX_FULL: u32 = 1 << 5;
const FR_RX_EMPTY: u32 = 1 << 4;
const FR_BUSY: u32 = 1 << 3;
const LCRH_FIFO_ENABLE: u32 = 1 << 4;
const LCRH_8_BITS: u32 = 0b11 << 5;
const IMSC_RECEIVE: u32 = 1 << 4;
const IMSC_RECEIVE_TIMEOUT: u32 = 1 << 6;
const CR_UART_ENABLE: u32 = 1 << 0;
const CR_TX_ENABLE: u32 = 1 << 8;
const CR_RX_ENABLE: u32 = 1 << 9;

/// Interrupt line of UART0 (GPU IRQ 57).
pub const IRQ: u32 = 57;

/// Integer and fractional baud-rate divisors for `clock_hz` and `baud` (PL011 TRM 3.3.6:
/// divisor = clock / (16 * baud), fraction in 1/64ths, rounded).
pub const fn baud_divisors(clock_hz: u32, baud: u32) -> (u32, u32) {
    // Work in 1/64ths of the divisor, rounded to nearest: 64 * clock / (16 * baud).
    let scaled = (clock_hz as u64 * 4 + baud as u64 / 2) / baud as u64;
    ((scaled / 64) as u32, (scaled % 64) as u32)
}

/// The PL011 UART.
pub struct Pl011 {
    registers: RegisterBlock,
}

impl Pl011 {
    /// The UART at its BCM2835 address.
    ///
    /// # Safety
    /// Only one `Pl011` may exist.
    pub const unsafe fn new() -> Self {
        // SAFETY: memory_map::UART0 is UART0 on every BCM2835.
        Self {
            registers: unsafe { RegisterBlock::new(crate::memory_map::UART0) },
        }
    }

    /// Configures 8N1 with FIFOs at `baud`, given the UART reference clock (from the mailbox:
    /// 3 MHz on old firmware and in QEMU, 48 MHz on current Pi firmware).
    pub fn init(&self, clock_hz: u32, baud: u32) {
        let r = self.registers;
        r.register(CR).write(0);
        while r.register(FR).read() & FR_BUSY != 0 {}
        r.register(LCRH).write(0); // flush the transmit FIFO
        r.register(ICR).write(0x7FF);
        let (integer, fraction) = baud_divisors(clock_hz, baud);
        r.register(IBRD).write(integer);
        r.register(FBRD).write(fraction);
        r.register(LCRH).write(LCRH_8_BITS | LCRH_FIFO_ENABLE);
        r.register(IMSC).write(0);
        r.register(CR)
            .write(CR_UART_ENABLE | CR_TX_ENABLE | CR_RX_ENABLE);
    }

    /// Sends one byte, waiting while the transmit FIFO is full.
    pub fn write_byte(&self, byte: u8) {
        while self.registers.register(FR).read() & FR_TX_FULL != 0 {}
        self.registers.register(DR).write(byte as u32);
    }

    /// Sends `bytes`, turning `\n` into `\r\n` for terminals.
    pub fn write_bytes(&self, bytes: &[u8]) {
        for &byte in bytes {
            if byte == b'\n' {
                self.write_byte(b'\r');
            }
            self.write_byte(byte);
        }
    }

    /// A received byte, if one is waiting.
    pub fn read_byte(&self) -> Option<u8> {
        if self.registers.register(FR).read() & FR_RX_EMPTY != 0 {
            None
        } else {
            Some(self.registers.register(DR).read() as u8)
        }
    }

    /// Raises [`IRQ`] when bytes arrive (receive and receive-timeout interrupts).
    pub fn enable_receive_interrupt(&self) {
        self.registers
            .register(IMSC)
            .write(IMSC_RECEIVE | IMSC_RECEIVE_TIMEOUT);
    }

    /// Acknowledges every pending UART interrupt.
    pub fn clear_interrupts(&self) {
        self.registers.register(ICR).write(0x7FF);
    }

    /// Waits until everything written has left the shift register.
    pub fn flush(&self) {
        while self.registers.register(FR).read() & FR_BUSY != 0 {}
    }
}

impl core::fmt::Write for Pl011 {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.write_bytes(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::baud_divisors;

    #[test]
    fn divisors_match_the_pl011_examples() {
        // 48 MHz / (16 * 115200) = 26.0417 -> 26, 0.0417 * 64 = 2.67 -> 3.
        assert_eq!(baud_divisors(48_000_000, 115_200), (26, 3));
        // 3 MHz / (16 * 115200) = 1.6276 -> 1, 0.6276 * 64 = 40.2 -> 40.
        assert_eq!(baud_divisors(3_000_000, 115_200), (1, 40));
    }
}
