#!/bin/sh
# Runs every fuzz target for a bounded time each (default 60 s), or a list of them:
#   fuzz/run.sh [SECONDS [TARGET...]]
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and the pinned nightly toolchain. The
# committed seeds (fuzz/seeds/TARGET) start each run; new corpus entries and crash artifacts
# stay under fuzz/corpus and fuzz/artifacts (not committed). Prints one `target: NAME` line
# before each run, so libFuzzer's `Done N runs` lines can be told apart.
set -eu
seconds="${1:-60}"
[ "$#" -gt 0 ] && shift
cd "$(dirname "$0")/.."
targets="${*:-request_path site_image site_index usb_descriptors nic_receive mdns_handle settings boot_sector tls_input client_hello sntp_reply usbredir_packets router_advert acme_json acme_response acme_store store_region stream_segments site_rules rules_text search_query ipv6_extensions status_access dns_update_reply dyndns_answer h2_frames hpack_block site_slots publish_manifest portmap_reply forwarded}"
for target in $targets; do
    echo "target: $target"
    mkdir -p "fuzz/corpus/$target"
    cargo fuzz run -O "$target" "fuzz/corpus/$target" "fuzz/seeds/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=1024 -print_final_stats=1
done
