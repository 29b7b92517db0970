//! BCM2835 peripheral drivers: PL011, system timer, interrupt controller, mailbox, PM
//! watchdog and GPIO, plus the portable pieces (mailbox message encoding, board revision
//! decoding) that are unit-tested on the host.
//!
//! Addresses are ARM physical addresses with the MMU's identity map (bus 0x7Exx_xxxx =
//! ARM 0x20xx_xxxx); every peripheral base is in [`memory_map`], and nowhere else. Register
//! offsets and fields cite the "BCM2835 ARM Peripherals" datasheet; [`mmio`] gives registers
//! named, typed fields.
#![no_std]
// The drivers reach the SoC through memory-mapped registers and DMA buffers, which only raw
// pointers can do. Every unsafe block says why it is sound (`// SAFETY:`).
#![allow(unsafe_code)]

#[cfg(test)]
extern crate std;

pub mod dma;
pub mod dma_channel;
pub mod dwc2;
pub mod emmc;
pub mod gpio;
pub mod interrupts;
pub mod mailbox;
pub mod memory_map;
pub mod mmio;
pub mod power;
pub mod revision;
pub mod rng;
pub mod timer;
pub mod uart;

/// Turns an ARM physical RAM address into the bus address a DMA master (the GPU mailbox, the
/// USB controller, the EMMC DMA) must be given. On the Pi 1 the firmware routes the ARM's RAM
/// through the GPU L2 cache, the 0x4000_0000 alias (see the usb-ethernet reference, §2.6).
pub const fn bus_address(physical: usize) -> u32 {
    ((physical as u32) & !0xC000_0000) | 0x4000_0000
}

#[cfg(test)]
mod tests {
    #[test]
    fn bus_address_uses_the_l2_alias() {
        assert_eq!(super::bus_address(0x0010_0000), 0x4010_0000);
        assert_eq!(super::bus_address(0xC010_0000), 0x4010_0000);
    }
}
