//! Boots the kernel in QEMU (raspi1ap and raspi0) and checks what it says on the serial console.

use bramble_qemu::{Kernel, Machine, QemuConfig};
use bramble_tests::{BOOT_TIMEOUT, Guest, kernel, up_status};
use std::time::Duration;

fn boot(machine: Machine) -> Guest {
    let config = QemuConfig::new(machine, Kernel::Raw(kernel().raw.clone()));
    Guest::start(&config)
}

/// The number right after `label` in `line`.
fn number_after(line: &str, label: &str) -> u64 {
    let rest = &line[line
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} in {line:?}"))
        + label.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("a number after {label:?} in {line:?}"))
}

fn check_banner(machine: Machine) {
    let mut guest = boot(machine);
    let version = guest.expect_line("Bramble ", BOOT_TIMEOUT);
    assert!(
        version.contains(env!("CARGO_PKG_VERSION")),
        "version in {version:?}"
    );

    let board = guest.expect_line("board: ", Duration::from_secs(5));
    assert!(
        board.contains(&format!("board: {} rev", machine.board_model())),
        "model decoded for {machine}: {board:?}"
    );
    assert!(board.contains("BCM2835"), "{board:?}");

    // QEMU gives the ARM 512 MiB minus the default 64 MiB of video memory.
    let memory = guest.expect_line("memory: ", Duration::from_secs(5));
    assert_eq!(number_after(&memory, "ARM has"), 448, "{memory:?}");

    let mac = guest.expect_line("mac: ", Duration::from_secs(5));
    let address = mac
        .split("mac: ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let octets: Vec<_> = address.split(':').collect();
    assert_eq!(octets.len(), 6, "MAC in {mac:?}");
    assert!(
        octets
            .iter()
            .all(|o| o.len() == 2 && u8::from_str_radix(o, 16).is_ok()),
        "{mac:?}"
    );
    assert_ne!(address, "00:00:00:00:00:00");

    let boot_line = guest.expect_line("boot: ", Duration::from_secs(5));
    let mmu = number_after(&boot_line, "caches on at");
    let banner = number_after(&boot_line, "banner at");
    assert!(
        mmu > 0 && banner > mmu,
        "boot microseconds in {boot_line:?}"
    );
    // The CSPRNG is seeded from the health-tested hardware RNG at every boot, with no card
    // and HTTPS off: the network's secrets come from it.
    guest.expect_line(
        "entropy: CSPRNG seeded from 1024 health-tested bytes of the hardware RNG",
        Duration::from_secs(5),
    );
    guest.expect_line("ready: idle in WFI", Duration::from_secs(5));
    guest.send_line("status");
    let entropy = guest.expect_line("status: entropy", Duration::from_secs(10));
    assert!(
        entropy.contains("status: entropy ok, hardware RNG bytes tested 1024,"),
        "{entropy:?}"
    );
}

#[test]
fn raspi1ap_banner_reports_board_memory_mac_and_boot_time() {
    check_banner(Machine::Raspi1ap);
}

#[test]
fn raspi0_banner_reports_board_memory_mac_and_boot_time() {
    check_banner(Machine::Raspi0);
}

#[test]
fn timer_interrupt_wakes_the_idle_loop() {
    let mut guest = boot(Machine::Raspi1ap);
    guest.expect_line("ready:", BOOT_TIMEOUT);
    guest.send_line("sleep 250");
    let woke = guest.expect_line("sleep: woke after", Duration::from_secs(10));
    assert!(number_after(&woke, "woke after") >= 250_000, "{woke:?}");
    assert!(
        number_after(&woke, "us,") >= 1,
        "an alarm interrupt was taken: {woke:?}"
    );
}

fn crash_reports_and_resets(kind: &str, expected: &[&str]) {
    let mut guest = boot(Machine::Raspi1ap);
    guest.expect_line("ready:", BOOT_TIMEOUT);
    guest.send_line(&format!("crash {kind}"));
    guest.expect_line("!!! ", Duration::from_secs(10));
    guest.expect_line("resetting in", Duration::from_secs(10));
    let all = guest.transcript.join("\n");
    for needle in expected {
        assert!(
            all.contains(needle),
            "{needle:?} missing from the {kind} report:\n{all}"
        );
    }
    // The watchdog reset reboots the board, which prints its banner again.
    guest.expect_line("Bramble ", Duration::from_secs(20));
    guest.expect_line("ready:", BOOT_TIMEOUT);
}

#[test]
fn data_abort_prints_registers_and_fault_address_then_resets() {
    crash_reports_and_resets(
        "data",
        &[
            "DataAbort at pc",
            "fault address 0x30000000",
            "(DFSR)",
            "r0 ",
            "r12",
            "lr ",
        ],
    );
}

#[test]
fn prefetch_abort_prints_fault_address_then_resets() {
    crash_reports_and_resets("prefetch", &["PrefetchAbort at pc 0x30000000", "(IFSR)"]);
}

#[test]
fn undefined_instruction_is_reported_then_resets() {
    crash_reports_and_resets("undefined", &["UndefinedInstruction at pc", "r0 "]);
}

#[test]
fn panic_prints_message_and_location_then_resets() {
    crash_reports_and_resets(
        "panic",
        &["PANIC at kernel/board/src/commands.rs", "panic requested"],
    );
}

/// (busy, up) microseconds from a `status` line.
fn busy_and_uptime(guest: &mut Guest) -> (u64, u64) {
    let status = up_status(guest);
    (status.busy_us, status.up_us)
}

#[test]
fn idle_loop_sleeps_without_card_or_network() {
    // No card, no NIC: the loop still has work (USB probes with back-off, the watchdog tick,
    // the LED), and must sleep in WFI between it rather than spin.
    let mut guest = boot(Machine::Raspi1ap);
    guest.expect_line("ready:", BOOT_TIMEOUT);
    let (busy_before, up_before) = busy_and_uptime(&mut guest);
    guest.send_line("sleep 3000");
    guest.expect_line("sleep: woke after", Duration::from_secs(30));
    let (busy_after, up_after) = busy_and_uptime(&mut guest);
    let busy = busy_after - busy_before;
    let elapsed = up_after - up_before;
    assert!(
        busy * 2 < elapsed,
        "busy {busy} us of {elapsed} us: the idle loop is not sleeping"
    );
}

#[test]
fn the_kernels_memory_routines_match_byte_by_byte_references() {
    // boot/src/mem.s (memcpy, memset, memcmp and their EABI forms) is ARM assembly that only
    // runs in the guest: the kernel checks it against references on the console.
    let mut guest = boot(Machine::Raspi1ap);
    guest.expect_line("ready:", BOOT_TIMEOUT);
    guest.send_line("selftest memory");
    let line = guest.expect_line("selftest: memory", Duration::from_secs(120));
    eprintln!("{line}");
    assert!(line.contains("selftest: memory ok"), "{line}");
    assert!(number_after(&line, "ok,") > 20_000, "{line}");
}
