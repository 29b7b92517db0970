#!/bin/bash
# Build the Linux + busybox httpd baseline for `bramble-bench`: OUT/zImage, OUT/board.dtb and
# OUT/initramfs.cpio.gz whose /www is a copy of SITE (the same files Bramble serves) plus a CGI
# script that prints /proc/stat and /proc/meminfo (guest CPU and RAM for the benchmark).
# usage: build-initramfs.sh OUT SITE        (runs fetch-debs.sh OUT first when needed)
# Needs: apt (Debian), dpkg-deb, cpio, gzip.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: build-initramfs.sh OUT SITE}
SITE=${2:?usage: build-initramfs.sh OUT SITE}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[ -d "$OUT/rootfs-src/boot" ] || "$HERE/fetch-debs.sh" "$OUT"
KVER=$(ls "$OUT/rootfs-src/lib/modules" | head -1)
DTB=${DTB:-bcm2835-rpi-a-plus.dtb}
MODDIR=$OUT/rootfs-src/lib/modules/$KVER/kernel/drivers/net
cp "$OUT/rootfs-src/boot/vmlinuz-$KVER" "$OUT/zImage"
cp "$OUT/rootfs-src/usr/lib/linux-image-$KVER/$DTB" "$OUT/board.dtb"
echo "$KVER $DTB busybox $(ls "$OUT"/debs/busybox-static_*_armel.deb | sed -e 's/.*busybox-static_\(.*\)_armel.deb/\1/' -e 's/%3a/:/')" > "$OUT/VERSION"
R=$(mktemp -d); chmod 755 "$R"
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/bin "$R"/proc "$R"/sys "$R"/dev "$R"/tmp "$R"/www/cgi-bin "$R"/lib/modules "$R"/etc
cp "$OUT/rootfs-src/bin/busybox" "$R/bin/busybox"
cp "$HERE/init" "$R/init"
chmod 755 "$R/init"
for m in mii.ko usb/usbnet.ko usb/cdc_ether.ko usb/rndis_host.ko; do
  cp "$MODDIR/$m" "$R/lib/modules/"
done
cp -r "$SITE"/. "$R/www/"
cp "$HERE/counters.cgi" "$R/www/cgi-bin/counters"
chmod 755 "$R/www/cgi-bin/counters"
# /dev/console must exist in the archive so PID 1 has a console before devtmpfs is mounted.
mknod -m 600 "$R/dev/console" c 5 1
mknod -m 666 "$R/dev/null" c 1 3
( cd "$R" && find . -print0 | sort -z | cpio --null -o -H newc --owner 0:0 --quiet ) > "$OUT/initramfs.cpio"
gzip -9 -n -f "$OUT/initramfs.cpio"
ls -la "$OUT"
