#!/usr/bin/env bash
# The test command: sets up what is missing, checks formatting and lints (host crates and the
# kernel), then runs every test: host unit tests, the hosted network tests in namespaces, and
# the QEMU boot tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== clippy (host crates)"
cargo clippy --all-targets -- -D warnings
echo "== clippy (kernel, armv6-none-eabihf)"
cargo kernel-clippy -- -D warnings
echo "== fuzz (bounded: request path and site-image reader, 30 s each)"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
mkdir -p target
if ! sh kernel/http/fuzz/run.sh 30 > target/fuzz.log 2>&1; then
    tail -40 target/fuzz.log
    echo "fuzzing failed or found a crash (log: target/fuzz.log, inputs: kernel/http/fuzz/artifacts)"
    exit 1
fi
grep -E '^Done [0-9]+ runs' target/fuzz.log || true
echo "== tests"
set +e +o pipefail
cargo test --no-fail-fast 2>&1 | tee target/test-output.txt
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run (cargo prints one per test binary).
passed=$(grep -Eo '[0-9]+ passed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test-output.txt | awk '{s+=$1} END {print s+0}')
ignored=$(grep -Eo '[0-9]+ ignored' target/test-output.txt | awk '{s+=$1} END {print s+0}')
echo "tests: $passed passed, $failed failed, $ignored skipped"
exit "$status"
