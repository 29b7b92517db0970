//! The BCM2835's physical memory map as the ARM sees it: the RAM window, the peripheral
//! window and the base of every peripheral Bramble drives. The one place these addresses are
//! written; the drivers and the boot stub's MMU map (`boot/src/mmu.rs`) use these constants.
//!
//! The datasheet ("BCM2835 ARM Peripherals", §1.2.3) gives peripheral addresses as VideoCore
//! bus addresses (0x7Exx_xxxx); the ARM reaches the same registers at 0x20xx_xxxx. Each base
//! below is written with its bus address from the datasheet, through [`peripheral`].
//! This module holds constants only, so that the boot stub can depend on it without pulling
//! in driver code.

/// End of the ARM's RAM window (512 MiB on every BCM2835 board; how much of it the ARM owns
/// and how much the GPU keeps is the firmware's split, read through the mailbox).
pub const RAM_END: usize = 0x2000_0000;

/// ARM physical base of the peripheral window (bus address [`PERIPHERAL_BUS_BASE`]).
pub const PERIPHERAL_BASE: usize = 0x2000_0000;
/// Size of the peripheral window.
pub const PERIPHERAL_SIZE: usize = 0x0100_0000;
/// Bus address of the peripheral window, as the datasheet writes peripheral addresses.
pub const PERIPHERAL_BUS_BASE: u32 = 0x7E00_0000;

/// The ARM physical address of the peripheral register at `bus_address` (0x7Exx_xxxx).
pub const fn peripheral(bus_address: u32) -> usize {
    assert!(
        bus_address >= PERIPHERAL_BUS_BASE
            && bus_address - PERIPHERAL_BUS_BASE < PERIPHERAL_SIZE as u32
    );
    PERIPHERAL_BASE + (bus_address - PERIPHERAL_BUS_BASE) as usize
}

/// System timer (datasheet ch. 12).
pub const SYSTEM_TIMER: usize = peripheral(0x7E00_3000);
/// ARM interrupt controller registers (ch. 7).
pub const INTERRUPT_CONTROLLER: usize = peripheral(0x7E00_B200);
/// VideoCore mailbox 0 (not in the datasheet; the firmware wiki's "Mailboxes" page).
pub const MAILBOX: usize = peripheral(0x7E00_B880);
/// Power management: reset control and the watchdog (not in the datasheet; Linux's
/// bcm2835_wdt driver).
pub const POWER_MANAGEMENT: usize = peripheral(0x7E10_0000);
/// Hardware random number generator (not in the datasheet; Linux's bcm2835-rng driver).
pub const RNG: usize = peripheral(0x7E10_4000);
/// DMA controller, channels 0 to 14 at 0x100 apart (ch. 4).
pub const DMA: usize = peripheral(0x7E00_7000);
/// GPIO (ch. 6).
pub const GPIO: usize = peripheral(0x7E20_0000);
/// PL011 UART0 (ch. 13).
pub const UART0: usize = peripheral(0x7E20_1000);
/// EMMC (SDHCI) controller (ch. 5).
pub const EMMC: usize = peripheral(0x7E30_0000);
/// Synopsys DWC2 USB controller (ch. 15 gives only the base; the registers are the
/// DWC2 databook's).
pub const USB: usize = peripheral(0x7E98_0000);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_addresses_map_into_the_arm_peripheral_window() {
        assert_eq!(UART0, 0x2020_1000);
        assert_eq!(USB, 0x2098_0000);
        assert_eq!(SYSTEM_TIMER, 0x2000_3000);
        for base in [
            SYSTEM_TIMER,
            INTERRUPT_CONTROLLER,
            MAILBOX,
            POWER_MANAGEMENT,
            RNG,
            DMA,
            GPIO,
            UART0,
            EMMC,
            USB,
        ] {
            assert!((PERIPHERAL_BASE..PERIPHERAL_BASE + PERIPHERAL_SIZE).contains(&base));
        }
    }
}
