//! config.txt: what the Pi's GPU firmware reads before it starts Bramble's kernel.

/// The config.txt that `bramble image` writes, for a Raspberry Pi B+ (and the other BCM2835
/// boards: A+, Zero, Zero W). Every line is commented for the owner who opens the card.
pub const CONFIG_TXT: &str = "\
# config.txt - read by the Raspberry Pi's firmware (start.elf) before Bramble starts.
# Written by `bramble image`. Bramble's own settings are in BRAMBLE.TXT, not here.

# The program to start: Bramble's kernel, loaded at address 0x8000.
kernel=kernel.img

# Give the graphics processor the least memory it accepts (16 MB), leaving the rest
# for Bramble and the site it serves from RAM. With 16 the firmware also picks the
# cut-down start_cd.elf/fixup_cd.dat when they are on the card.
gpu_mem=16

# Keep the serial console (GPIO 14/15, 115200 baud) on and its clock steady.
enable_uart=1

# Start at once: no rainbow splash screen, no pause before loading the kernel.
disable_splash=1
boot_delay=0

# To see the firmware's own boot messages on the serial console, uncomment:
#uart_2ndstage=1
";

#[cfg(test)]
mod tests {
    use super::CONFIG_TXT;

    /// The settings the boot path depends on, as `key=value` lines the firmware parses.
    #[test]
    fn has_the_settings_bramble_needs() {
        let settings: Vec<&str> = CONFIG_TXT
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .collect();
        for needed in [
            "kernel=kernel.img",
            "gpu_mem=16",
            "enable_uart=1",
            "disable_splash=1",
            "boot_delay=0",
        ] {
            assert!(settings.contains(&needed), "config.txt lacks {needed}");
        }
        assert!(settings.iter().all(|line| line.contains('=')));
    }
}
