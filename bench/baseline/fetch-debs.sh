#!/bin/bash
# Download Debian bookworm's armel Raspberry Pi 0/1 kernel and busybox-static with apt (no
# `dpkg --add-architecture`: a temporary armel source is added and removed again) and extract
# them into OUT/rootfs-src.  usage: fetch-debs.sh OUT
set -euo pipefail
OUT=${1:?usage: fetch-debs.sh OUT}
mkdir -p "$OUT/debs"
OUT=$(cd "$OUT" && pwd)
KPKG=${KPKG:-linux-image-rpi}   # metapackage; resolved to linux-image-<abi>-rpi
SRC=/etc/apt/sources.list.d/zz-bramble-bench-armel.sources
cleanup() { rm -f "$SRC"; apt-get update -qq 2>/dev/null || true; }
trap cleanup EXIT
cat > "$SRC" <<'EOS'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Architectures: armel
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
apt-get update -qq
KREAL=$(apt-cache depends "$KPKG:armel" 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
KREAL=${KREAL%:armel}
[ -n "$KREAL" ] || { echo "could not resolve $KPKG:armel" >&2; exit 1; }
echo "kernel package: $KREAL"
( cd "$OUT/debs" && apt-get download "$KREAL:armel" busybox-static:armel )
rm -rf "$OUT/rootfs-src" && mkdir "$OUT/rootfs-src"
for deb in "$OUT"/debs/"${KREAL}"_*_armel.deb "$OUT"/debs/busybox-static_*_armel.deb; do
  echo "extract $deb"; dpkg-deb -x "$deb" "$OUT/rootfs-src"
done
