#!/bin/bash
# Build the Linux + busybox httpd baseline for `bramble-bench`: OUT/zImage, OUT/board.dtb and
# OUT/initramfs.cpio.gz whose /www is a copy of SITE (the same files Bramble serves) plus a CGI
# script that prints /proc/stat and /proc/meminfo (guest CPU and RAM for the benchmark).
# HTTPS and HTTP/2 come from Debian's nginx with OpenSSL (libssl3) on port 443, serving the same
# /www with the certificate Bramble's benchmark uses (kernel/tls's ECDSA P-256 test fixture,
# bramble.test); plain HTTP stays busybox httpd on port 80.
# usage: build-initramfs.sh OUT SITE        (runs fetch-debs.sh OUT first when needed)
# Needs: apt (Debian), dpkg-deb, cpio, gzip.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: build-initramfs.sh OUT SITE}
SITE=${2:?usage: build-initramfs.sh OUT SITE}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# (again when an older download lacks nginx)
[ -d "$OUT/rootfs-src/boot" ] && [ -x "$OUT/rootfs-src/usr/sbin/nginx" ] || "$HERE/fetch-debs.sh" "$OUT"
KVER=$(ls "$OUT/rootfs-src/lib/modules" | head -1)
DTB=${DTB:-bcm2835-rpi-a-plus.dtb}
MODDIR=$OUT/rootfs-src/lib/modules/$KVER/kernel/drivers/net
cp "$OUT/rootfs-src/boot/vmlinuz-$KVER" "$OUT/zImage"
cp "$OUT/rootfs-src/usr/lib/linux-image-$KVER/$DTB" "$OUT/board.dtb"
version() { ls "$OUT"/debs/"$1"_*_armel.deb | sed -e "s/.*$1_\\(.*\\)_armel.deb/\\1/" -e 's/%3a/:/'; }
echo "$KVER $DTB busybox $(version busybox-static) nginx $(version nginx) libssl3 $(version libssl3)" > "$OUT/VERSION"
R=$(mktemp -d); chmod 755 "$R"
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/bin "$R"/proc "$R"/sys "$R"/dev "$R"/tmp "$R"/www/cgi-bin "$R"/lib/modules "$R"/etc
mkdir -p "$R"/usr/sbin "$R"/lib/arm-linux-gnueabi "$R"/usr/lib/arm-linux-gnueabi "$R"/etc/nginx \
  "$R"/var/log/nginx "$R"/var/lib/nginx
cp "$OUT/rootfs-src/bin/busybox" "$R/bin/busybox"
cp "$HERE/init" "$R/init"
chmod 755 "$R/init"
for m in mii.ko usb/usbnet.ko usb/cdc_ether.ko usb/rndis_host.ko; do
  cp "$MODDIR/$m" "$R/lib/modules/"
done
cp -r "$SITE"/. "$R/www/"
# nginx, its dynamic loader and the shared libraries it needs (glibc's, libcrypt, zlib from
# /lib; OpenSSL, libatomic and PCRE2 from /usr/lib), its configuration and the certificate.
cp "$OUT/rootfs-src/usr/sbin/nginx" "$R/usr/sbin/nginx"
cp -a "$OUT/rootfs-src/lib/ld-linux.so.3" "$R/lib/"
for lib in ld-linux.so.3 libc.so.6 libcrypt.so.1 libcrypt.so.1.1.0 libz.so.1 libz.so.1.2.13; do
  cp -a "$OUT/rootfs-src/lib/arm-linux-gnueabi/$lib" "$R/lib/arm-linux-gnueabi/"
done
cp -a "$OUT"/rootfs-src/usr/lib/arm-linux-gnueabi/lib{ssl,crypto}.so.3 \
  "$OUT"/rootfs-src/usr/lib/arm-linux-gnueabi/libpcre2-8.so.0* \
  "$OUT"/rootfs-src/usr/lib/arm-linux-gnueabi/libatomic.so.1* "$R/usr/lib/arm-linux-gnueabi/"
cp "$HERE/nginx.conf" "$R/etc/nginx/nginx.conf"
DATA=$HERE/../../kernel/tls/tests/data
cp "$DATA/p256.pem" "$R/etc/nginx/cert.pem"
cp "$DATA/p256.key" "$R/etc/nginx/key.pem"
printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
cp "$HERE/counters.cgi" "$R/www/cgi-bin/counters"
chmod 755 "$R/www/cgi-bin/counters"
# /dev/console must exist in the archive so PID 1 has a console before devtmpfs is mounted.
mknod -m 600 "$R/dev/console" c 5 1
mknod -m 666 "$R/dev/null" c 1 3
( cd "$R" && find . -print0 | sort -z | cpio --null -o -H newc --owner 0:0 --quiet ) > "$OUT/initramfs.cpio"
gzip -9 -n -f "$OUT/initramfs.cpio"
ls -la "$OUT"
