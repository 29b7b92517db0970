#!/usr/bin/env bash
# Installs what Bramble needs on a fresh Debian/Ubuntu machine, or says exactly what is missing:
# the pinned Rust toolchain (rust-toolchain.toml, with rust-src for the kernel's build-std) and
# the Debian packages for QEMU and the tests. Safe to run again: it only installs what is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: QEMU for the Pi machines; mtools to read SD images back independently;
# iproute2, iputils-ping, curl and dnsmasq-base for the network-namespace tests; chromium to
# render the default site from a guest; nginx (with brotli_static) as the conformance
# reference; wrk and cpio for the benchmark (`bramble-bench`); busybox for the hosted
# benchmark's busybox httpd (`bramble-bench --hosted`); git for the version string;
# gcc-i686-linux-gnu and libc6-dev-i386-cross to link the 32-bit test run (`cargo test32`);
# openssl (s_client) and testssl.sh for the HTTPS tests; python3-venv for REDbot's own
# environment (below); pebble (the ACME test server) for the ACME tests; radvd (router
# advertisements), avahi-daemon, avahi-utils and dbus-daemon (a private Avahi judging mDNS
# over IPv6) and tcpdump for the IPv6 tests; python3-doc for a real 1,063-file documentation
# site (tests/tests/card_boot.rs, serving from the card); gcc builds the QEMU TCG plugins
# (the benchmark's profiler and the tests' board-rules judge, qemu/plugin/boardrules.c);
# prometheus for promtool, which checks the guest's /metrics, and varnish, put in front of
# the guest as a caching proxy (tests/tests/owner_view.rs);
# knot (knotd takes the guest's signed DNS UPDATEs) and knot-dnsutils (kdig) for
# tests/tests/ddns.rs and reachability.rs; miniupnpd-nftables (NAT-PMP, PCP, UPnP IGD) and
# nftables, the home router of tests/tests/reachability.rs; nghttp2-client (nghttp) and
# python3-h2 (hostile HTTP/2 clients) for tests/tests/http2.rs, and nghttp2-client's h2load for
# the 1,000 HTTPS connections at once of tests/tests/attacks_https.rs and for `bramble-bench
# --tap --https` (HTTPS and h2 levels; openssl s_time for its handshake rates); hping3 (the SYN
# flood) and slowhttptest (slowloris, slow read) for the attack suite (tests/tests/attacks.rs,
# attacks_https.rs and the `attack` tool); python3 (its standard library's HTTPS server) plays
# the dyndns2 provider, the address echo and the outside checker of tests/tests/dyndns.rs.
packages=(qemu-system-arm mtools iproute2 iputils-ping curl dnsmasq-base chromium nginx wrk cpio
          libnginx-mod-http-brotli-static busybox git gcc-i686-linux-gnu libc6-dev-i386-cross
          openssl testssl.sh python3-venv pebble radvd avahi-daemon avahi-utils dbus-daemon
          tcpdump python3-doc gcc prometheus knot knot-dnsutils
          miniupnpd-nftables nftables varnish nghttp2-client python3-h2 hping3 slowhttptest
          python3)

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
        # The tests start nginx themselves, on 127.0.0.1 with their own configuration.
        # The IPv6 tests run Avahi and radvd themselves, inside their namespaces.
        if command -v systemctl >/dev/null 2>&1; then
            for unit in nginx avahi-daemon.socket avahi-daemon radvd knot; do
                systemctl disable --now "$unit" >/dev/null 2>&1 || true
            done
        fi
    else
        echo "setup: missing Debian packages: ${missing[*]}" >&2
        echo "setup: install them with: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

# REDbot (the conformance test's HTTP linter) is on PyPI only: exactly the versions pinned in
# tools/redbot-requirements.txt go into a virtual environment of their own, outside the
# system's Python, at ${XDG_CACHE_HOME:-~/.cache}/bramble/redbot (where the test looks). The
# copy of the pins written last marks it complete: a run cut short, or new pins, rebuild it.
# A lock keeps two worktrees' setups from building it at once.
redbot_venv="${XDG_CACHE_HOME:-$HOME/.cache}/bramble/redbot"
redbot_pins=tools/redbot-requirements.txt
mkdir -p "$(dirname "$redbot_venv")"
(
    flock 9
    if ! cmp -s "$redbot_pins" "$redbot_venv/requirements.txt"; then
        echo "setup: installing REDbot ($(grep '^redbot==' "$redbot_pins")) into $redbot_venv"
        rm -rf "$redbot_venv"
        python3 -m venv "$redbot_venv"
        "$redbot_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
            -r "$redbot_pins"
        cp "$redbot_pins" "$redbot_venv/requirements.txt"
    fi
) 9> "$redbot_venv.lock"

if ! command -v rustup >/dev/null 2>&1; then
    echo "setup: rustup is missing. Install it from https://rustup.rs, then run this again." >&2
    exit 1
fi
# Reads rust-toolchain.toml: the dated nightly with rust-src, rustfmt and clippy.
# (RUSTUP_AUTO_INSTALL=0 may be set, so cargo would not fetch it by itself.)
rustup toolchain install >/dev/null
echo "setup: $(rustc --version), $(qemu-system-arm --version | head -1)"
