//! Bramble's smsc95xx register sequence against Linux's, both recorded by the LAN9514 model:
//! `fixtures/linux-smsc95xx.seq` (Debian's 6.1 kernel, `tests/linux_judge.rs`) and
//! `fixtures/bramble-smsc95xx.seq` (`tests/tests/smsc95xx_model.rs`, which also checks that
//! the fixture is what the driver does today). Both run from the USB connect until the link is
//! up and an address is set.
//!
//! The comparison is in three parts, and every difference has to be listed here with the
//! reason it is intended (a difference that is not listed fails, and so does a listed one
//! that no longer exists):
//!
//! 1. orderings the datasheet and Linux rely on, which both sequences must keep;
//! 2. the value each register is left with;
//! 3. operations only one driver performs.

use bramble_usbredir::sequence::{Step, final_writes, operations, written};
use std::collections::BTreeSet;

fn load(name: &str) -> Vec<Step> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(String::from)
        .collect()
}

/// Index of the first step at or after `from` that `matches`.
fn find(steps: &[Step], from: usize, matches: impl Fn(&str) -> bool) -> Option<usize> {
    steps
        .iter()
        .enumerate()
        .skip(from)
        .find(|(_, s)| matches(s))
        .map(|(i, _)| i)
}

fn reg_with(name: &'static str, bits: u32) -> impl Fn(&str) -> bool {
    move |s| written(s, name).is_some_and(|v| v & bits == bits)
}

/// The orderings both drivers must keep; returns the violations.
fn ordering_violations(who: &str, steps: &[Step]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            bad.push(format!("{who}: {what}"));
        }
    };
    // The last lite reset (Linux resets at bind and again at interface up).
    let lrst = (0..steps.len())
        .rev()
        .find(|&i| written(&steps[i], "HW_CFG") == Some(0x8));
    check(lrst.is_some(), "HW_CFG.LRST is written");
    let Some(lrst) = lrst else { return bad };
    let after = |matches: &dyn Fn(&str) -> bool| find(steps, lrst, matches);
    check(
        steps[lrst + 1].starts_with("read HW_CFG"),
        "the lite reset is waited for (HW_CFG read back) before anything else",
    );
    let mac = after(&|s| s.starts_with("write ADDRL"));
    check(
        mac.is_some(),
        "the MAC address is written after the lite reset (LRST restores the default)",
    );
    let bir = after(&reg_with("HW_CFG", 0x1000));
    let mef = after(&reg_with("HW_CFG", 0x22));
    let cap = after(&|s| written(s, "BURST_CAP").is_some_and(|v| v > 0));
    let delay = after(&|s| written(s, "BULK_IN_DLY").is_some());
    let rxen = after(&reg_with("MAC_CR", 0x4));
    let txen = after(&reg_with("MAC_CR", 0x8));
    let tx_on = after(&|s| written(s, "TX_CFG") == Some(0x4));
    let int_ep = after(&reg_with("INT_EP_CTL", 0x8000));
    let before = |a: Option<usize>, b: Option<usize>| matches!((a, b), (Some(a), Some(b)) if a < b);
    check(
        before(bir, rxen),
        "BIR (NAK on an empty FIFO) is set before the receiver is on",
    );
    check(
        before(cap, mef) && before(delay, mef),
        "BURST_CAP and BULK_IN_DLY are set before MEF|BCE (MEF alone holds a lone frame back)",
    );
    check(
        before(mef, rxen),
        "MEF|BCE are set before the receiver is on",
    );
    check(
        before(txen, tx_on) && before(tx_on, rxen),
        "MAC_CR.TXEN, then TX_CFG.TX_ON, then MAC_CR.RXEN (Linux's start_tx_path/start_rx_path)",
    );
    check(
        before(int_ep, rxen),
        "the PHY interrupt is routed to the interrupt endpoint before the receiver is on",
    );
    let lpa = find(steps, 0, |s| s == "phy read ANLPAR");
    let fdpx = find(steps, 0, reg_with("MAC_CR", 0x0010_0000));
    check(
        before(lpa, fdpx),
        "full duplex is set in MAC_CR only after the link partner's abilities were read",
    );
    check(
        find(steps, 0, |s| {
            s.starts_with("phy write BMCR 0x8") || s.starts_with("phy write BMCR 0xb")
        })
        .is_some(),
        "the PHY is reset through BMCR",
    );
    bad
}

/// Registers whose final values differ, and why that is intended:
/// (register, Linux's value, Bramble's value, reason). `-` = never written.
const VALUE_DIFFERENCES: &[(&str, &str, &str, &str)] = &[
    (
        "HW_CFG",
        "0x00001422",
        "0x00001022",
        "RXDOFF: Linux shifts each frame by NET_IP_ALIGN (2) so the IP header lands \
         4-byte aligned in its skb; Bramble copies frames into smoltcp's buffers, offset 0",
    ),
    (
        "COE_CR",
        "0x00010001",
        "0x00000000",
        "Linux uses TX and RX checksum offload; smoltcp computes checksums itself (TX COE \
         would save ARM1176 time: a possible optimisation, not a defect)",
    ),
    (
        "MAC_CR",
        "0x0010200c",
        "0x0018000c",
        "multicast: Linux filters with the hash table (HPFILT) for the groups it joined; \
         Bramble passes all multicast (MCPAS) for mDNS and IPv6; FDPX/TXEN/RXEN agree",
    ),
    (
        "HASHH",
        "<hash>",
        "-",
        "the hash table goes with HPFILT (see MAC_CR)",
    ),
    (
        "HASHL",
        "<hash>",
        "-",
        "the hash table goes with HPFILT (see MAC_CR)",
    ),
    (
        "AFC_CFG",
        "0x00f830a0",
        "0x00f830a1",
        "after link up Linux recomputes flow control (smsc95xx_phy_update_flowcontrol) and \
         clears the half-duplex back-pressure bits for a full-duplex link without pause; \
         Bramble keeps Linux's own reset default (FCANY), which acts only in half duplex",
    ),
    (
        "PM_CTRL",
        "-",
        "0x00000010",
        "Bramble also resets the PHY through PM_CTRL.PHY_RST (Linux before phylib did; 6.1 \
         leaves it to the BMCR soft reset); both are datasheet resets, the second is redundant",
    ),
    (
        "phy ANAR",
        "-",
        "0x01e1",
        "Bramble writes the advertisement Linux leaves at its reset value 0x01e1 (10/100 \
         half and full, no pause: neither driver programs flow control from the result)",
    ),
    (
        "phy BMCR",
        "0xb300",
        "0x1200",
        "Linux's last write is the soft reset (read-modify-write of 0x3100, which also \
         restarts auto-negotiation); Bramble resets with 0x8000 and then restarts \
         auto-negotiation explicitly",
    ),
    (
        "phy INT_MASK",
        "0x00d0",
        "0x0050",
        "Linux's LAN8700 driver also enables ENERGYON; Bramble needs only link down and \
         auto-negotiation complete",
    ),
];

/// Operations only one driver performs: (operation, "linux" or "bramble", reason).
const ONLY_ONE: &[(&str, &str, &str)] = &[
    (
        "eeprom command",
        "linux",
        "Linux looks for a MAC in the EEPROM (a B+ has none: the read times out) when the \
         device tree gives none; Bramble takes the MAC from the firmware's mailbox",
    ),
    (
        "phy read PHYID1",
        "linux",
        "phylib identifies the PHY to pick a PHY driver",
    ),
    (
        "phy read PHYID2",
        "linux",
        "phylib identifies the PHY to pick a PHY driver",
    ),
    (
        "phy read SPECIAL_MODES",
        "linux",
        "the LAN8700 driver checks the PHY is not strapped to power-down",
    ),
    (
        "read BURST_CAP",
        "linux",
        "Linux reads registers back for its debug messages",
    ),
    (
        "read BULK_IN_DLY",
        "linux",
        "Linux reads registers back for its debug messages",
    ),
    (
        "read COE_CR",
        "linux",
        "read-modify-write of the checksum offload bits",
    ),
    (
        "read LED_GPIO_CFG",
        "linux",
        "read-modify-write (6.1); Bramble writes the LED configuration outright",
    ),
    (
        "read AFC_CFG",
        "linux",
        "flow control recomputed after link up (see AFC_CFG)",
    ),
    ("write HASHH", "linux", "hash filtering (see MAC_CR)"),
    ("write HASHL", "linux", "hash filtering (see MAC_CR)"),
    (
        "read PM_CTRL",
        "bramble",
        "PHY reset through PM_CTRL (see PM_CTRL)",
    ),
    (
        "write PM_CTRL",
        "bramble",
        "PHY reset through PM_CTRL (see PM_CTRL)",
    ),
    ("phy write ANAR", "bramble", "see phy ANAR"),
];

#[test]
fn bramble_and_linux_keep_the_orderings_the_chip_needs() {
    let linux = load("linux-smsc95xx.seq");
    let bramble = load("bramble-smsc95xx.seq");
    let mut bad = ordering_violations("linux", &linux);
    bad.extend(ordering_violations("bramble", &bramble));
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_difference_in_final_register_values_is_explained() {
    let linux = final_writes(&load("linux-smsc95xx.seq"));
    let bramble = final_writes(&load("bramble-smsc95xx.seq"));
    let keys: BTreeSet<&String> = linux.keys().chain(bramble.keys()).collect();
    let mut unexplained = Vec::new();
    let mut seen = BTreeSet::new();
    for key in keys {
        let l = linux.get(key).map_or("-", String::as_str);
        let b = bramble.get(key).map_or("-", String::as_str);
        if l == b {
            continue;
        }
        match VALUE_DIFFERENCES.iter().find(|d| d.0 == key) {
            Some(d) if d.1 == l && d.2 == b => {
                seen.insert(d.0);
            }
            Some(d) => unexplained.push(format!(
                "{key}: Linux {l}, Bramble {b}, but the explanation is for {} / {}",
                d.1, d.2
            )),
            None => unexplained.push(format!("{key}: Linux {l}, Bramble {b}")),
        }
    }
    for d in VALUE_DIFFERENCES {
        if !seen.contains(d.0) && !unexplained.iter().any(|u| u.starts_with(d.0)) {
            unexplained.push(format!("{}: explained but no longer different", d.0));
        }
    }
    assert!(
        unexplained.is_empty(),
        "unexplained register differences:\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn every_operation_only_one_driver_performs_is_explained() {
    let linux = operations(&load("linux-smsc95xx.seq"));
    let bramble = operations(&load("bramble-smsc95xx.seq"));
    let mut unexplained = Vec::new();
    for (side, mine, other) in [("linux", &linux, &bramble), ("bramble", &bramble, &linux)] {
        for op in mine.difference(other) {
            if !ONLY_ONE.iter().any(|(o, s, _)| o == op && *s == side) {
                unexplained.push(format!("only {side}: {op}"));
            }
        }
    }
    for (op, side, _) in ONLY_ONE {
        let (mine, other) = if *side == "linux" {
            (&linux, &bramble)
        } else {
            (&bramble, &linux)
        };
        if !(mine.contains(*op) && !other.contains(*op)) {
            unexplained.push(format!("{op}: explained as only {side}, but it is not"));
        }
    }
    assert!(
        unexplained.is_empty(),
        "unexplained operations:\n{}",
        unexplained.join("\n")
    );
}

#[test]
fn the_essentials_agree() {
    // What both drivers must do the same way, register by register.
    let linux = final_writes(&load("linux-smsc95xx.seq"));
    let bramble = final_writes(&load("bramble-smsc95xx.seq"));
    for key in [
        "BURST_CAP",
        "BULK_IN_DLY",
        "INT_EP_CTL",
        "TX_CFG",
        "VLAN1",
        "FLOW",
        "LED_GPIO_CFG",
        "INT_STS",
    ] {
        assert_eq!(linux.get(key), bramble.get(key), "{key}");
    }
    let hw = |m: &std::collections::BTreeMap<String, String>| {
        u32::from_str_radix(m["HW_CFG"].trim_start_matches("0x"), 16).unwrap()
    };
    // BIR, MEF and BCE in both (NAK when empty, several frames per transfer, burst cap).
    assert_eq!(hw(&linux) & 0x1022, 0x1022);
    assert_eq!(hw(&bramble) & 0x1022, 0x1022);
    let mac = |m: &std::collections::BTreeMap<String, String>| {
        u32::from_str_radix(m["MAC_CR"].trim_start_matches("0x"), 16).unwrap()
    };
    // Full duplex, no receive-own suppression, transmitter and receiver on.
    assert_eq!(mac(&linux) & 0x0090_000c, 0x0010_000c);
    assert_eq!(mac(&bramble) & 0x0090_000c, 0x0010_000c);
}
