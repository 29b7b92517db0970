//! The PL011 UART (UART0) on GPIO14/15: the serial console (BCM2835 ARM Peripherals, ch. 13).

use crate::mmio::{Field, Offset, RegisterBlock};

// Registers and fields as the datasheet names them (BCM2835 ARM Peripherals §13.4; the
// PL011 TRM §3.3 has the same).

/// Data register: a byte to send, or the received byte and its error flags.
const DR: Offset<Dr> = Offset::new(0x00);
/// Flag register.
const FR: Offset<Fr> = Offset::new(0x18);
/// Integer baud rate divisor.
const IBRD: Offset<Ibrd> = Offset::new(0x24);
/// Fractional baud rate divisor.
const FBRD: Offset<Fbrd> = Offset::new(0x28);
/// Line control.
const LCRH: Offset<Lcrh> = Offset::new(0x2C);
/// Control.
const CR: Offset<Cr> = Offset::new(0x30);
/// Interrupt mask set/clear.
const IMSC: Offset<Imsc> = Offset::new(0x38);
/// Interrupt clear.
const ICR: Offset<Icr> = Offset::new(0x44);

/// DR fields.
enum Dr {}
impl Dr {
    /// DATA: the byte.
    const DATA: Field<Self> = Field::bits(7, 0);
}

/// FR fields.
enum Fr {}
impl Fr {
    /// BUSY: a byte is being sent (the transmit FIFO is not empty or the shift register is
    /// busy).
    const BUSY: Field<Self> = Field::bit(3);
    /// RXFE: the receive FIFO is empty.
    const RECEIVE_EMPTY: Field<Self> = Field::bit(4);
    /// TXFF: the transmit FIFO is full.
    const TRANSMIT_FULL: Field<Self> = Field::bit(5);
}

/// IBRD fields.
enum Ibrd {}
impl Ibrd {
    /// BAUDDIVINT: the integer part of the divisor.
    const DIVISOR: Field<Self> = Field::bits(15, 0);
}

/// FBRD fields.
enum Fbrd {}
impl Fbrd {
    /// BAUDDIVFRAC: the fractional part of the divisor, in 1/64ths.
    const FRACTION: Field<Self> = Field::bits(5, 0);
}

/// LCRH fields.
enum Lcrh {}
impl Lcrh {
    /// FEN: FIFOs on (off flushes the transmit FIFO).
    const FIFO_ENABLE: Field<Self> = Field::bit(4);
    /// WLEN: word length minus 5 (3: 8 bits).
    const WORD_LENGTH: Field<Self> = Field::bits(6, 5);
    /// [`Lcrh::WORD_LENGTH`] value: 8 data bits.
    const EIGHT_BITS: u32 = 0b11;
}

/// CR fields.
enum Cr {}
impl Cr {
    /// UARTEN: the UART is on.
    const UART_ENABLE: Field<Self> = Field::bit(0);
    /// TXE: transmit on.
    const TRANSMIT_ENABLE: Field<Self> = Field::bit(8);
    /// RXE: receive on.
    const RECEIVE_ENABLE: Field<Self> = Field::bit(9);
}

/// IMSC fields.
enum Imsc {}
impl Imsc {
    /// RXIM: interrupt when the receive FIFO reaches its trigger level.
    const RECEIVE: Field<Self> = Field::bit(4);
    /// RTIM: interrupt when received bytes wait in the FIFO with the line idle.
    const RECEIVE_TIMEOUT: Field<Self> = Field::bit(6);
}

/// ICR fields.
enum Icr {}
impl Icr {
    /// Every interrupt's clear bit (OEIC, BEIC, PEIC, FEIC, RTIC, TXIC, RXIC and the modem
    /// interrupts).
    const ALL: Field<Self> = Field::bits(10, 0);
}

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
        Self {
            // SAFETY: memory_map::UART0 is UART0 on every BCM2835.
            registers: unsafe { RegisterBlock::new(crate::memory_map::UART0) },
        }
    }

    /// Configures 8N1 with FIFOs at `baud`, given the UART reference clock (from the mailbox:
    /// 3 MHz on old firmware and in QEMU, 48 MHz on current Pi firmware).
    pub fn init(&self, clock_hz: u32, baud: u32) {
        let r = self.registers;
        r.at(CR).write(Cr::UART_ENABLE.clear());
        while r.at(FR).is_set(Fr::BUSY) {}
        r.at(LCRH).write(Lcrh::FIFO_ENABLE.clear()); // flush the transmit FIFO
        r.at(ICR).write(Icr::ALL.set());
        let (integer, fraction) = baud_divisors(clock_hz, baud);
        r.at(IBRD).write(Ibrd::DIVISOR.val(integer));
        r.at(FBRD).write(Fbrd::FRACTION.val(fraction));
        r.at(LCRH)
            .write(Lcrh::WORD_LENGTH.val(Lcrh::EIGHT_BITS) + Lcrh::FIFO_ENABLE.set());
        r.at(IMSC)
            .write(Imsc::RECEIVE.clear() + Imsc::RECEIVE_TIMEOUT.clear());
        r.at(CR)
            .write(Cr::UART_ENABLE.set() + Cr::TRANSMIT_ENABLE.set() + Cr::RECEIVE_ENABLE.set());
    }

    /// Sends one byte, waiting while the transmit FIFO is full.
    pub fn write_byte(&self, byte: u8) {
        while self.registers.at(FR).is_set(Fr::TRANSMIT_FULL) {}
        self.registers.at(DR).write(Dr::DATA.val(byte as u32));
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
        if self.registers.at(FR).is_set(Fr::RECEIVE_EMPTY) {
            None
        } else {
            Some(self.registers.at(DR).read().get(Dr::DATA) as u8)
        }
    }

    /// Raises [`IRQ`] when bytes arrive (receive and receive-timeout interrupts).
    pub fn enable_receive_interrupt(&self) {
        self.registers
            .at(IMSC)
            .write(Imsc::RECEIVE.set() + Imsc::RECEIVE_TIMEOUT.set());
    }

    /// Acknowledges every pending UART interrupt.
    pub fn clear_interrupts(&self) {
        self.registers.at(ICR).write(Icr::ALL.set());
    }

    /// Waits until everything written has left the shift register.
    pub fn flush(&self) {
        while self.registers.at(FR).is_set(Fr::BUSY) {}
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
