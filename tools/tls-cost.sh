#!/usr/bin/env bash
# Guest instructions per HTTPS connection (full and resumed handshake, each with one 6 KB page),
# per 6 KB page on an open TLS connection, and per plain page the same way: boots the kernel
# with the test certificate under QEMU -icount shift=0 (one guest ns per instruction) and reads
# the status line's busy time around each phase, less the idle cost per wall second measured
# first (QEMU-only receive polling). Clients run one at a time (curl, openssl s_client).
# Traffic only to 127.0.0.1 (QEMU's forwarded ports); bounded counts. About 2 minutes.
#   tools/tls-cost.sh [CONNECTIONS [PAGES]]
set -euo pipefail
cd "$(dirname "$0")/.."
connections="${1:-20}"
pages="${2:-200}"
data=kernel/tls/tests/data
work=$(mktemp -d)
trap 'kill "$qemu" 2>/dev/null || true; rm -rf "$work"' EXIT
cargo build -q -p bramble
target/debug/bramble image --site bench/site -o "$work/card.img" \
  --tls-cert "$data/p256.pem" --tls-key "$data/p256.key" > /dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(free_port); https=$(free_port)
mkfifo "$work/console"
qemu-system-arm -M raspi1ap -display none -serial stdio -monitor none \
  -bios target/kernel/armv6-none-eabihf/release/kernel.img \
  -drive "if=sd,format=raw,file=$work/card.img" \
  -netdev "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:$http-:80,hostfwd=tcp:127.0.0.1:$https-:443" \
  -device usb-net,netdev=net0 -icount shift=0 < "$work/console" > "$work/serial.log" 2>&1 &
qemu=$!
exec 3> "$work/console"
for _ in $(seq 1 60); do grep -q "serving:" "$work/serial.log" && break; sleep 1; done
busy() {
  echo status >&3; sleep 1
  grep "status: up" "$work/serial.log" | tail -1 | sed 's/.*busy \([0-9]*\) us.*/\1/'
}
now() { date +%s%N; }
b0=$(busy); t0=$(now); sleep 10; b1=$(busy); t1=$(now)  # idle cost, for the subtraction below
idle=$(( (b1 - b0) * 1000 * 1000000000 / (t1 - t0) ))
net() { echo $(( ($2 - $1) * 1000 - idle * ($4 - $3) / 1000000000 )); }
curl_tls=(curl -s -o /dev/null --max-time 60 --cacert "$data/ca.pem" --resolve "bramble.test:$https:127.0.0.1")
"${curl_tls[@]}" "https://bramble.test:$https/"
curl -s -o /dev/null --max-time 60 "http://127.0.0.1:$http/"
b0=$(busy); t0=$(now)
for _ in $(seq 1 "$connections"); do "${curl_tls[@]}" -H "Connection: close" "https://bramble.test:$https/"; done
b1=$(busy); t1=$(now)
echo "full handshake and one page: $(( $(net "$b0" "$b1" "$t0" "$t1") / connections )) instructions"
printf 'GET / HTTP/1.1\r\nHost: bramble.test\r\nConnection: close\r\n\r\n' > "$work/request"
s_client=(openssl s_client -connect "127.0.0.1:$https" -servername bramble.test -CAfile "$data/ca.pem" -quiet)
(cat "$work/request"; sleep 1) | "${s_client[@]}" -sess_out "$work/session" > /dev/null 2>&1
b0=$(busy); t0=$(now)
for _ in $(seq 1 "$connections"); do
  (cat "$work/request"; sleep 0.5) | "${s_client[@]}" -sess_in "$work/session" > /dev/null 2>&1
done
b1=$(busy); t1=$(now)
echo "resumed handshake and one page: $(( $(net "$b0" "$b1" "$t0" "$t1") / connections )) instructions"
urls=(); for _ in $(seq 1 "$pages"); do urls+=("https://bramble.test:$https/"); done
b0=$(busy); t0=$(now); "${curl_tls[@]}" "${urls[@]}" > /dev/null; b1=$(busy); t1=$(now)
echo "one full handshake and $pages pages on one TLS connection: $(net "$b0" "$b1" "$t0" "$t1") instructions"
urls=(); for _ in $(seq 1 "$pages"); do urls+=("http://127.0.0.1:$http/"); done
b0=$(busy); t0=$(now); curl -s --max-time 120 "${urls[@]}" > /dev/null; b1=$(busy); t1=$(now)
echo "plain page on one connection: $(( $(net "$b0" "$b1" "$t0" "$t1") / pages )) instructions"
echo status >&3; sleep 1
grep "status: https" "$work/serial.log" | tail -1
