//! The profiling plugin for real: built from bench/plugin/tbcount.c with the system C compiler,
//! loaded into QEMU's raspi1ap under `-icount shift=0` with a two-instruction loop for a
//! firmware, asked for two snapshots on its FIFO; the loop's block must be there with its two
//! instructions, and the window between the snapshots must hold the loop's instructions and
//! nothing else. `--profile` and `--icount-only` are listed by the real binary's --help.

use bramble_bench::profile::{Profiler, difference};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Stops QEMU by its PID when the test ends, passing or not.
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_plugin_counts_a_loop_between_two_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let profiler = Profiler::new(&bramble::workspace_root(), dir.path()).unwrap();
    // add r0, r0, #1; b .-4 (back to the add): -bios loads it at 0x8000, which the CPU reaches
    // through the zeroed memory below (andeq r0, r0, r0: no-ops).
    let firmware = dir.path().join("loop.img");
    std::fs::write(&firmware, [0x01, 0x00, 0x80, 0xe2, 0xfd, 0xff, 0xff, 0xea]).unwrap();
    let qemu = bramble_qemu::find_qemu().unwrap();
    let _qemu = Stop(
        Command::new(qemu)
            .args(["-M", "raspi1ap", "-display", "none", "-serial", "null"])
            .args(["-monitor", "none", "-icount", "shift=0", "-bios"])
            .arg(&firmware)
            .args(profiler.qemu_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let first = profiler.snapshot("first").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let second = profiler.snapshot("second").unwrap();
    let window = difference(&first, &second).unwrap();
    assert!(first.get(&0x8000).is_some_and(|&n| n > 0), "{first:?}");
    assert_eq!(
        window.keys().copied().collect::<Vec<_>>(),
        [0x8000],
        "only the loop runs between the snapshots"
    );
    assert_eq!(window[&0x8000] % 2, 0, "two instructions per run");
    assert!(window[&0x8000] > 1000, "{window:?}");
    // A name the plugin refuses (a path) gets no snapshot.
    assert!(profiler.snapshot("../escape").is_err());
}

#[test]
fn the_real_binary_lists_profile_and_icount_only() {
    let help = Command::new(env!("CARGO_BIN_EXE_bramble-bench"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--profile"), "{help}");
    assert!(help.contains("TCG plugin"), "{help}");
    assert!(help.contains("--icount-only"), "{help}");
}
