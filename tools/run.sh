#!/usr/bin/env bash
# The main job: set up, build the kernel, pack the default site, make the SD image, boot it in
# QEMU and serve it on http://127.0.0.1:8080 (Ctrl-C stops it). Extra arguments go to
# `bramble qemu` (for example --port 9000 or --machine raspi0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec cargo run --quiet --release -p bramble -- qemu --site site/default "$@"
