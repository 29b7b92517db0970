//! Turns a register log into the sequence of operations a driver performed, so that two
//! drivers' sequences can be compared: MII_ADDR/MII_DATA traffic becomes PHY reads and
//! writes, polling loops become one `poll`, EEPROM byte reads become one `eeprom read`, and
//! values that differ by nature between runs (the MAC address) are masked.

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
        // A repeated read is a poll.
        if step.starts_with("read ") || step.starts_with("phy read ") || step == "eeprom command" {
            let poll = format!("{step} (repeated)");
            if let Some(last) = steps.last_mut() {
                if *last == step || *last == poll {
                    *last = poll;
                    continue;
                }
            }
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
                "read HW_CFG (repeated)",
                "phy read BMSR",
                "write ADDRL <mac>",
            ]
        );
    }
}
