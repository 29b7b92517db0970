//! `bramble bench` through the real binary: the benchmark harness's help and errors come
//! through it, so its arguments reach the harness unchanged (the harness's own flags are
//! driven by bench/tests). The harness is built with the `dev` profile here
//! (`BRAMBLE_BENCH_PROFILE`), which `cargo test` has already built; users get `release`.

use std::process::Command;

fn bramble_bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bramble"))
        .arg("bench")
        .args(args)
        .env("BRAMBLE_BENCH_PROFILE", "dev")
        .output()
        .expect("bramble runs")
}

#[test]
fn bench_help_is_the_harness_help() {
    let out = bramble_bench(&["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("Usage: bramble-bench"), "{stdout}");
    for flag in ["--tap", "--levels", "--duration", "--systems"] {
        assert!(stdout.contains(flag), "{flag} missing from {stdout}");
    }
}

#[test]
fn bench_passes_a_bad_flag_on_and_fails() {
    let out = bramble_bench(&["--levels", "10", "--no-such-flag"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains("--no-such-flag"),
        "the harness names the flag: {stderr}"
    );
    assert!(stderr.contains("benchmark harness failed"), "{stderr}");
}
