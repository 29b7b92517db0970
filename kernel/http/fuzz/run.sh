#!/bin/sh
# Runs both fuzz targets for a bounded time each (default 60 s, for CI), or longer on demand:
#   kernel/http/fuzz/run.sh [SECONDS]
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and the pinned nightly toolchain. The
# committed seeds (a valid site image, a script of valid request fragments) start each run;
# new corpus entries and crash artifacts stay under fuzz/corpus and fuzz/artifacts.
set -eu
seconds="${1:-60}"
cd "$(dirname "$0")/.."
for target in request_path site_image; do
    mkdir -p "fuzz/corpus/$target"
    cargo fuzz run -O "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=1024
done
