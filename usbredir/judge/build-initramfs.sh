#!/bin/bash
# Builds the Linux judge: OUT/zImage, OUT/board.dtb and OUT/initramfs.cpio.gz with busybox,
# the smsc95xx driver and its dependencies, and a page for httpd.
# usage: build-initramfs.sh CACHE OUT
#   CACHE: the benchmark baseline's download folder (bench/baseline/fetch-debs.sh
#          fills CACHE/debs and CACHE/rootfs-src the first time; later runs reuse them).
# Needs: apt and dpkg-deb (first run only), cpio, gzip.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${1:?usage: build-initramfs.sh CACHE OUT}
OUT=${2:?usage: build-initramfs.sh CACHE OUT}
mkdir -p "$CACHE" "$OUT"
[ -d "$CACHE/rootfs-src/boot" ] || "$ROOT/bench/baseline/fetch-debs.sh" "$CACHE"
SRC=$CACHE/rootfs-src
KVER=$(ls "$SRC/lib/modules" | head -1)
MODS=$SRC/lib/modules/$KVER/kernel
cp "$SRC/boot/vmlinuz-$KVER" "$OUT/zImage"
cp "$SRC/usr/lib/linux-image-$KVER/bcm2835-rpi-a-plus.dtb" "$OUT/board.dtb"
echo "$KVER" > "$OUT/VERSION"
R=$(mktemp -d); chmod 755 "$R"
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/bin "$R"/proc "$R"/sys "$R"/dev "$R"/tmp "$R"/www "$R"/lib/modules
cp "$SRC/bin/busybox" "$R/bin/busybox"
cp "$HERE/init" "$R/init"
chmod 755 "$R/init"
for m in lib/crc16.ko drivers/net/phy/libphy.ko net/core/selftests.ko drivers/net/mii.ko \
         drivers/net/usb/usbnet.ko drivers/net/phy/smsc.ko drivers/net/usb/smsc95xx.ko; do
  cp "$MODS/$m" "$R/lib/modules/"
done
# The page the judge serves: fixed bytes the test compares.
seq 1 400 | sed 's/^/judge line /' > "$R/www/index.html"
mknod -m 600 "$R/dev/console" c 5 1
mknod -m 666 "$R/dev/null" c 1 3
( cd "$R" && find . -print0 | sort -z | cpio --null -o -H newc --owner 0:0 --quiet ) > "$OUT/initramfs.cpio"
gzip -9 -n -f "$OUT/initramfs.cpio"
