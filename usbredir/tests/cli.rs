//! The `bramble-usbredir` binary: its --help lists every option and the fault commands, and a
//! wire it cannot open is a clear error, not a server without a wire.

use std::process::Command;

#[test]
fn help_lists_the_options_and_commands() {
    let output = Command::new(env!("CARGO_BIN_EXE_bramble-usbredir"))
        .arg("--help")
        .output()
        .expect("--help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "--socket <SOCKET>",
        "--tap <IFNAME>",
        "--full-speed",
        "--log <FILE>",
        "--control <SOCKET>",
        "--eeprom-mac <MAC>",
        "--aneg-ms",
        "--no-stdin",
        "link down|up",
        "replug MS",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[test]
fn a_tap_device_it_cannot_open_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_bramble-usbredir"))
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .args(["--tap", "a-name-longer-than-ifnamsiz", "--no-stdin"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("TAP device a-name-longer-than-ifnamsiz"),
        "{stderr}"
    );
    let bad_mac = Command::new(env!("CARGO_BIN_EXE_bramble-usbredir"))
        .args(["--socket", "/tmp/x", "--eeprom-mac", "02:00:00"])
        .output()
        .expect("run");
    assert!(!bad_mac.status.success());
    assert!(String::from_utf8_lossy(&bad_mac.stderr).contains("not a MAC address"));
}
