//! config.txt: what the Pi's GPU firmware reads before it starts Bramble's kernel.

/// The config.txt that `bramble image` writes on a card with the cut-down firmware pair, for a
/// Raspberry Pi B+ (and the other BCM2835 boards: A+, Zero, Zero W). Every line is commented
/// for the owner who opens the card. [`config_txt`] leaves out `gpu_mem=16` on a card without
/// the pair.
pub const CONFIG_TXT: &str = "\
# config.txt - read by the Raspberry Pi's firmware (start.elf) before Bramble starts.
# Written by `bramble image`. Bramble's own settings are in BRAMBLE.TXT, not here.

# The program to start: Bramble's kernel, loaded at address 0x8000.
kernel=kernel.img

# Give the graphics processor the least memory it accepts (16 MB), leaving the rest
# for Bramble and the site it serves from RAM. With 16 the firmware picks the
# cut-down start_cd.elf/fixup_cd.dat, which are on this card.
gpu_mem=16

# Keep the serial console (GPIO 14/15, 115200 baud) on and its clock steady.
enable_uart=1

# Start at once: no rainbow splash screen, no pause before loading the kernel.
disable_splash=1
boot_delay=0

# To see the firmware's own boot messages on the serial console, uncomment:
#uart_2ndstage=1
";

/// The `gpu_mem` paragraph of [`CONFIG_TXT`].
const GPU_MEM: &str = "\
# Give the graphics processor the least memory it accepts (16 MB), leaving the rest
# for Bramble and the site it serves from RAM. With 16 the firmware picks the
# cut-down start_cd.elf/fixup_cd.dat, which are on this card.
gpu_mem=16
";

/// What a card without the cut-down pair says instead.
const NO_GPU_MEM: &str = "\
# No gpu_mem line: this card has no start_cd.elf/fixup_cd.dat, which gpu_mem=16
# needs, so the graphics processor keeps the firmware's default share of memory.
";

/// config.txt for a card with (`cut_down_firmware`) or without the cut-down firmware pair.
pub fn config_txt(cut_down_firmware: bool) -> String {
    if cut_down_firmware {
        CONFIG_TXT.to_string()
    } else {
        CONFIG_TXT.replace(GPU_MEM, NO_GPU_MEM)
    }
}

#[cfg(test)]
mod tests {
    use super::{CONFIG_TXT, config_txt};

    #[test]
    fn gpu_mem_only_with_the_cut_down_pair() {
        assert_eq!(config_txt(true), CONFIG_TXT);
        let without = config_txt(false);
        assert!(
            !without.lines().any(|line| line.starts_with("gpu_mem")),
            "{without}"
        );
        assert!(without.contains("kernel=kernel.img"));
        assert!(without.contains("No gpu_mem line"));
    }

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
