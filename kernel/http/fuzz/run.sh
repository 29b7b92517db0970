#!/bin/sh
# Runs both fuzz targets for a bounded time each (default 60 s; CI), or longer on demand:
#   kernel/http/fuzz/run.sh [SECONDS]
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and the pinned nightly toolchain.
set -eu
seconds="${1:-60}"
cd "$(dirname "$0")"
for target in request_path site_image; do
    cargo fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=1024
done
