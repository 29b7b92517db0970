//! Turns a register log into the sequence of operations a driver performed, so that two
//! drivers' sequences can be compared: MII_ADDR/MII_DATA traffic becomes PHY reads and
//! writes, a polling loop becomes one read, EEPROM byte reads become one `eeprom command`, and
//! values that differ by nature between runs (the MAC address, the multicast hash table that
//! follows from it) are masked.

/// One step of a normalized sequence, as text (`write HW_CFG 0x00001000`).
pub type Step = String;

fn parse(line: &str) -> Option<(&str, &str, &str)> {
    let mut words = line.split_whitespace();
    let _time = words.next()?;
    let op = words.next()?;
    let name = words.next()?;
    let value = words.next().unwrap_or("");
    Some((op, name, value))
}

/// The normalized steps of a register log (the lines of [`crate::smsc::LogEntry::line`]).
pub fn normalize(log: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in log.lines() {
        let Some((op, name, value)) = parse(line) else {
            continue;
        };
        let step = match (op, name) {
            // The mechanics of PHY and EEPROM access are summarized by their effect.
            ("R" | "W", "MII_ADDR" | "MII_DATA") => continue,
            ("R", "E2P_CMD") | ("R", "E2P_DATA") | ("W", "E2P_DATA") => continue,
            ("W", "E2P_CMD") => "eeprom command".to_string(),
            ("W", "ADDRL" | "ADDRH") => format!("write {name} <mac>"),
            // The multicast hash follows the groups joined, which follow the MAC address.
            ("W", "HASHH" | "HASHL") => format!("write {name} <hash>"),
            ("R", _) => format!("read {name}"),
            ("W", _) => format!("write {name} {value}"),
            ("PR", _) => format!("phy read {name}"),
            ("PW", _) => format!("phy write {name} {value}"),
            ("SET_CONFIGURATION", _) => format!("set configuration {name}"),
            ("CLEAR_HALT", _) => format!("clear halt {name}"),
            ("BUS_RESET", _) => "bus reset".to_string(),
            ("CTL", _) => format!("control {name} {value}"),
            _ => continue, // notes
        };
        // A repeated read is a poll: one step however often it went round (that depends on
        // timing: a reset may be over by the first read or the fifth).
        if (step.starts_with("read ") || step.starts_with("phy read ") || step == "eeprom command")
            && steps.last() == Some(&step)
        {
            continue;
        }
        steps.push(step);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn polls_collapse_and_mii_traffic_is_summarized() {
        let log = "\
     0.100 W HW_CFG 0x00000008
     0.200 R HW_CFG 0x00000008
     0.300 R HW_CFG 0x00000000
     0.400 R MII_ADDR 0x00000000
     0.410 W MII_ADDR 0x00000841
     0.410 PR BMSR 0x7809
     0.500 R MII_DATA 0x00007809
     0.600 W ADDRL 0x12345678
     0.700 NOTE cable out
";
        assert_eq!(
            normalize(log),
            vec![
                "write HW_CFG 0x00000008",
                "read HW_CFG",
                "phy read BMSR",
                "write ADDRL <mac>",
            ]
        );
    }
}

/// Key of a written register in [`final_writes`]: `HW_CFG`, or `phy ANAR`.
fn write_target(step: &str) -> Option<(String, String)> {
    let mut words = step.split_whitespace();
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some("write"), Some(name), Some(value), None) => {
            Some((name.to_string(), value.to_string()))
        }
        (Some("phy"), Some("write"), Some(name), Some(value)) => {
            Some((format!("phy {name}"), value.to_string()))
        }
        _ => None,
    }
}

/// The last value each register (and PHY register) was written with.
pub fn final_writes(steps: &[Step]) -> std::collections::BTreeMap<String, String> {
    steps.iter().filter_map(|s| write_target(s)).collect()
}

/// The kinds of operation in a sequence: the step without its value
/// (`write HW_CFG`, `phy read BMSR`, `eeprom command`).
pub fn operations(steps: &[Step]) -> std::collections::BTreeSet<String> {
    steps
        .iter()
        .map(|s| match write_target(s) {
            Some((name, _)) if name.starts_with("phy ") => format!("phy write {}", &name[4..]),
            Some((name, _)) => format!("write {name}"),
            None => s.to_string(),
        })
        .collect()
}

/// The value of a `write NAME VALUE` step, if it is one.
pub fn written(step: &str, name: &str) -> Option<u32> {
    let (target, value) = write_target(step)?;
    if target != name {
        return None;
    }
    u32::from_str_radix(value.trim_start_matches("0x"), 16).ok()
}

#[cfg(test)]
mod compare_tests {
    use super::*;

    #[test]
    fn final_writes_and_operations() {
        let steps: Vec<Step> = [
            "write HW_CFG 0x00000008",
            "phy write ANAR 0x01e1",
            "write HW_CFG 0x00001000",
            "phy read BMSR",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let finals = final_writes(&steps);
        assert_eq!(finals["HW_CFG"], "0x00001000");
        assert_eq!(finals["phy ANAR"], "0x01e1");
        let ops = operations(&steps);
        assert!(
            ops.contains("write HW_CFG")
                && ops.contains("phy write ANAR")
                && ops.contains("phy read BMSR")
        );
        assert_eq!(written("write HW_CFG 0x00001000", "HW_CFG"), Some(0x1000));
        assert_eq!(written("write HW_CFG 0x00001000", "MAC_CR"), None);
    }
}
