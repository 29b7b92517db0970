#!/usr/bin/env bash
# The test command: sets up what is missing, checks formatting and lints (host crates and the
# kernel), then runs every test tier (`cargo test-all`, .cargo/config.toml): host unit tests,
# the hosted network tests in namespaces, the QEMU and attack tests, and the portable crates'
# tests once more on a 32-bit target. A plain `cargo test` is the quick host tier alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# Every QEMU boot of this run goes under the board-rules judge (qemu/plugin/boardrules.c): the
# integration tests' guests always, and with this the tool's own boots too (`bramble check`,
# `bramble qemu`, in the tools' tests and below).
export BRAMBLE_BOARD_RULES=on

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== clippy (host crates, every tier's tests)"
cargo clippy-all -- -D warnings
echo "== clippy (kernel, armv6-none-eabihf)"
cargo kernel-clippy -- -D warnings
echo "== bramble check site/default (the default site as the appliance serves it, in QEMU)"
cargo run -q -p bramble -- check site/default --junit target/check-default.xml
echo "== fuzz (bounded: every parser of untrusted bytes, 15 s per target, one per CPU at a time)"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
mkdir -p target
if ! sh fuzz/run.sh 15 > target/fuzz.log 2>&1; then
    tail -40 target/fuzz.log
    echo "fuzzing failed or found a crash (log: target/fuzz.log, inputs: fuzz/artifacts)"
    exit 1
fi
grep -E '^(target: |Done [0-9]+ runs)' target/fuzz.log || true
echo "== tests (every tier)"
set +e +o pipefail
cargo test-all --no-fail-fast 2>&1 | tee target/test-output.txt
status=${PIPESTATUS[0]}
# The portable crates again on a 32-bit target (the Pi's usize is 32 bits): host tests only,
# a few seconds once std is built (about a minute the first time).
echo "== tests (32-bit: portable crates on i686-unknown-linux-gnu)"
cargo test32 --no-fail-fast 2>&1 | tee target/test32-output.txt
status32=${PIPESTATUS[0]}
set -e
# One closing line for the whole run (cargo prints one per test binary), the 32-bit binaries
# included; their share is printed just before it.
# Only cargo's own "test result:" lines count: a test's output may say "N failed" too (h2load's
# summary does).
count() { cat "${@:2}" | grep -E '^test result:' | grep -Eo "[0-9]+ $1" | awk '{s+=$1} END {print s+0}'; }
# A test binary that could not run or died before its summary (a signal, a missing file) has no
# "N failed" line: cargo's per-target error line without a FAILED result counts as one failure.
unreported() {
    local errors results
    errors=$(grep -c '^error: test failed, to rerun pass' "$1" || true)
    results=$(grep -c '^test result: FAILED' "$1" || true)
    echo $((errors > results ? errors - results : 0))
}
failed32=$(($(count failed target/test32-output.txt) + $(unreported target/test32-output.txt)))
echo "32-bit: $(count passed target/test32-output.txt) passed, $failed32 failed, $(count ignored target/test32-output.txt) skipped"
passed=$(count passed target/test-output.txt target/test32-output.txt)
failed=$(($(count failed target/test-output.txt target/test32-output.txt) + $(unreported target/test-output.txt) + $(unreported target/test32-output.txt)))
ignored=$(count ignored target/test-output.txt target/test32-output.txt)
if { [ "$status" -ne 0 ] || [ "$status32" -ne 0 ]; } && [ "$failed" -eq 0 ]; then
    echo "cargo test failed with no test failing (a build error?): counted as one failure"
    failed=1
fi
echo "tests: $passed passed, $failed failed, $ignored skipped"
if [ "$status" -ne 0 ]; then exit "$status"; fi
exit "$status32"
