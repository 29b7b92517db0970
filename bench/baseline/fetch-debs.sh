#!/bin/bash
# Download Debian bookworm's armel Raspberry Pi 0/1 kernel, busybox-static, and nginx with
# OpenSSL and the shared libraries they need, with apt (no `dpkg --add-architecture`: a
# temporary armel source is added and removed again) and extract them into OUT/rootfs-src.
# usage: fetch-debs.sh OUT
set -euo pipefail
OUT=${1:?usage: fetch-debs.sh OUT}
mkdir -p "$OUT/debs"
OUT=$(cd "$OUT" && pwd)
KPKG=${KPKG:-linux-image-rpi}   # metapackage; resolved to linux-image-<abi>-rpi
# nginx (bookworm's `nginx` holds the binary, with the http_v2 and ssl modules built in)
# and the libraries it links: OpenSSL 3 (libssl3: libssl and libcrypto, with OpenSSL's ARM
# assembly for AES, SHA and the P-256 field arithmetic; libcrypto needs libatomic on armel),
# glibc, libcrypt, PCRE2 and zlib.
NGINX_PKGS="nginx libssl3 libatomic1 libc6 libcrypt1 libpcre2-8-0 zlib1g"
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
PKGS="$KREAL:armel busybox-static:armel"
for p in $NGINX_PKGS; do PKGS="$PKGS $p:armel"; done
( cd "$OUT/debs" && rm -f ./*.deb && apt-get download $PKGS )
rm -rf "$OUT/rootfs-src" && mkdir "$OUT/rootfs-src"
for deb in "$OUT"/debs/*_armel.deb; do
  echo "extract $deb"; dpkg-deb -x "$deb" "$OUT/rootfs-src"
done
