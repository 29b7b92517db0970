#!/bin/sh
# Runs every fuzz target for a bounded time each (default 60 s), or a list of them:
#   fuzz/run.sh [SECONDS [TARGET...]]
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and the pinned nightly toolchain. The
# committed seeds (fuzz/seeds/TARGET) start each run; new corpus entries and crash artifacts
# stay under fuzz/corpus and fuzz/artifacts (not committed). Prints one `target: NAME` line
# before each target's output, so libFuzzer's `Done N runs` lines can be told apart.
#
# Every target is built first (cargo-fuzz's build, its sanitizer flags), then the targets run
# FUZZ_JOBS at a time (default: the CPUs, `nproc`), each a single-threaded libFuzzer for the
# whole bound: on an otherwise idle machine each gets a core of its own, so running them side
# by side divides the wall time and not the fuzzing any target gets. Set FUZZ_JOBS=1 on a
# busy machine. The output is printed per target, in order, once all have run; the exit
# status is non-zero if any target failed or found a crash.
set -eu
seconds="${1:-60}"
[ "$#" -gt 0 ] && shift
cd "$(dirname "$0")/.."
# Every [[bin]] of fuzz/Cargo.toml, unless targets are named (then only they are built).
if [ "$#" -gt 0 ]; then
    targets="$*"
    for target in $targets; do
        (cd fuzz && cargo fuzz build -O "$target")
    done
else
    targets="$(cd fuzz && cargo fuzz list)"
    (cd fuzz && cargo fuzz build -O)
fi
jobs="${FUZZ_JOBS:-$(nproc)}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
bin="fuzz/target/$triple/release"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
run_one() {
    mkdir -p "fuzz/corpus/$1" "fuzz/artifacts/$1"
    if "$bin/$1" -artifact_prefix="fuzz/artifacts/$1/" "fuzz/corpus/$1" "fuzz/seeds/$1" \
        -max_total_time="$seconds" -rss_limit_mb=1024 -print_final_stats=1 \
        > "$logs/$1.log" 2>&1; then
        : > "$logs/$1.ok"
    fi
}
set -- $targets
while [ "$#" -gt 0 ]; do
    running=0
    while [ "$#" -gt 0 ] && [ "$running" -lt "$jobs" ]; do
        run_one "$1" &
        shift
        running=$((running + 1))
    done
    wait
done
status=0
for target in $targets; do
    echo "target: $target"
    cat "$logs/$target.log"
    if [ ! -e "$logs/$target.ok" ]; then
        echo "fuzz target $target failed (inputs: fuzz/artifacts/$target)"
        status=1
    fi
done
exit "$status"
