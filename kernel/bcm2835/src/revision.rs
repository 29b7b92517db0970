//! Decoding the board revision code the firmware reports (mailbox tag 0x00010002).
//!
//! New-style codes (bit 23 set) pack fields: `NOQuuuWuFMMMCCCCPPPPTTTTTTTTRRRR`, where T is the
//! board type, P the processor, C the manufacturer, M the memory size and R the revision.
//! Old-style codes (Pi 1 before 2014's scheme) are a lookup table. Source: the Raspberry Pi
//! documentation, "Raspberry Pi revision codes".

/// What a revision code says about the board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardRevision {
    /// Marketing name, e.g. "Raspberry Pi B+".
    pub model: &'static str,
    /// PCB revision, e.g. "1.2".
    pub pcb_revision: &'static str,
    /// SoC name.
    pub processor: &'static str,
    /// RAM fitted, in MiB.
    pub memory_mib: u32,
    /// Who made the board.
    pub manufacturer: &'static str,
}

const NEW_STYLE: u32 = 1 << 23;

fn board_type(code: u32) -> &'static str {
    match code {
        0x00 => "Raspberry Pi A",
        0x01 => "Raspberry Pi B",
        0x02 => "Raspberry Pi A+",
        0x03 => "Raspberry Pi B+",
        0x04 => "Raspberry Pi 2 B",
        0x06 => "Raspberry Pi Compute Module 1",
        0x08 => "Raspberry Pi 3 B",
        0x09 => "Raspberry Pi Zero",
        0x0A => "Raspberry Pi Compute Module 3",
        0x0C => "Raspberry Pi Zero W",
        0x0D => "Raspberry Pi 3 B+",
        0x0E => "Raspberry Pi 3 A+",
        0x10 => "Raspberry Pi Compute Module 3+",
        0x11 => "Raspberry Pi 4 B",
        0x12 => "Raspberry Pi Zero 2 W",
        0x13 => "Raspberry Pi 400",
        0x14 => "Raspberry Pi Compute Module 4",
        0x15 => "Raspberry Pi Compute Module 4S",
        0x17 => "Raspberry Pi 5",
        _ => "unknown Raspberry Pi",
    }
}

const PCB_REVISIONS: [&str; 16] = [
    "1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8", "1.9", "1.10", "1.11", "1.12",
    "1.13", "1.14", "1.15",
];

fn processor(code: u32) -> &'static str {
    match code {
        0 => "BCM2835",
        1 => "BCM2836",
        2 => "BCM2837",
        3 => "BCM2711",
        4 => "BCM2712",
        _ => "unknown SoC",
    }
}

fn manufacturer(code: u32) -> &'static str {
    match code {
        0 => "Sony UK",
        1 => "Egoman",
        2 | 4 => "Embest",
        3 => "Sony Japan",
        5 => "Stadium",
        _ => "unknown maker",
    }
}

/// Decodes `code`. Returns `None` for codes that match neither scheme.
pub fn decode(code: u32) -> Option<BoardRevision> {
    if code & NEW_STYLE != 0 {
        let memory_mib = 256u32.checked_shl((code >> 20) & 0b111)?;
        return Some(BoardRevision {
            model: board_type((code >> 4) & 0xFF),
            pcb_revision: PCB_REVISIONS[(code & 0xF) as usize],
            processor: processor((code >> 12) & 0xF),
            memory_mib,
            manufacturer: manufacturer((code >> 16) & 0xF),
        });
    }
    // Old style; bit 24 only records that the board was over-volted.
    let (model, pcb_revision, memory_mib, manufacturer) = match code & 0x00FF_FFFF {
        0x02 | 0x03 => ("Raspberry Pi B", "1.0", 256, "Egoman"),
        0x04 => ("Raspberry Pi B", "2.0", 256, "Sony UK"),
        0x05 => ("Raspberry Pi B", "2.0", 256, "Qisda"),
        0x06 => ("Raspberry Pi B", "2.0", 256, "Egoman"),
        0x07 => ("Raspberry Pi A", "2.0", 256, "Egoman"),
        0x08 => ("Raspberry Pi A", "2.0", 256, "Sony UK"),
        0x09 => ("Raspberry Pi A", "2.0", 256, "Qisda"),
        0x0D => ("Raspberry Pi B", "2.0", 512, "Egoman"),
        0x0E => ("Raspberry Pi B", "2.0", 512, "Sony UK"),
        0x0F => ("Raspberry Pi B", "2.0", 512, "Egoman"),
        0x10 => ("Raspberry Pi B+", "1.2", 512, "Sony UK"),
        0x11 => ("Raspberry Pi Compute Module 1", "1.0", 512, "Sony UK"),
        0x12 => ("Raspberry Pi A+", "1.1", 256, "Sony UK"),
        0x13 => ("Raspberry Pi B+", "1.2", 512, "Embest"),
        0x14 => ("Raspberry Pi Compute Module 1", "1.0", 512, "Embest"),
        0x15 => ("Raspberry Pi A+", "1.1", 256, "Embest"),
        _ => return None,
    };
    Some(BoardRevision {
        model,
        pcb_revision,
        processor: "BCM2835",
        memory_mib,
        manufacturer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_style_codes() {
        // QEMU raspi1ap reports 0x900021; raspi0 0x900092; a current B+ 0x900032 (1.2).
        let a_plus = decode(0x0090_0021).unwrap();
        assert_eq!(a_plus.model, "Raspberry Pi A+");
        assert_eq!(a_plus.pcb_revision, "1.1");
        assert_eq!(a_plus.memory_mib, 512);
        assert_eq!(a_plus.processor, "BCM2835");
        assert_eq!(a_plus.manufacturer, "Sony UK");
        let zero = decode(0x0090_0092).unwrap();
        assert_eq!(zero.model, "Raspberry Pi Zero");
        assert_eq!(zero.pcb_revision, "1.2");
        let b_plus = decode(0x0090_0032).unwrap();
        assert_eq!(b_plus.model, "Raspberry Pi B+");
        let pi4 = decode(0x00c0_3111).unwrap();
        assert_eq!(pi4.model, "Raspberry Pi 4 B");
        assert_eq!(pi4.memory_mib, 4096);
        assert_eq!(pi4.processor, "BCM2711");
    }

    #[test]
    fn old_style_codes_and_the_overvolt_bit() {
        let b_plus = decode(0x10).unwrap();
        assert_eq!((b_plus.model, b_plus.memory_mib), ("Raspberry Pi B+", 512));
        assert_eq!(decode(0x0100_0010), Some(b_plus));
        assert_eq!(decode(0x0e).unwrap().memory_mib, 512);
        assert_eq!(decode(0x12).unwrap().model, "Raspberry Pi A+");
    }

    #[test]
    fn nonsense_codes_are_not_decoded() {
        assert_eq!(decode(0x0000_0001), None);
        assert_eq!(decode(0x0000_00ff), None);
        // Memory field 7 would be 32 GiB: still decodes, no overflow.
        assert_eq!(decode(0x00f0_0032).unwrap().memory_mib, 32768);
    }
}
