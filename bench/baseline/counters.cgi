#!/bin/sh
# CGI for `bramble-bench`: the guest's clock and idle time (/proc/uptime: seconds since boot and
# seconds spent idle), CPU time by kind (/proc/stat), memory (/proc/meminfo) and TCP counters
# (/proc/net/snmp, /proc/net/netstat). Kernels with NO_HZ print the idle time in nanoseconds
# in /proc/timer_list (idle_sleeptime, with its clock "now at"); Debian's rpi kernel does not,
# so the harness then uses /proc/uptime (10 ms steps).
printf 'Content-Type: text/plain\r\n\r\n'
printf 'uptime %s\n' "$(cat /proc/uptime)"
cat /proc/stat /proc/meminfo /proc/net/snmp /proc/net/netstat
grep -m1 '^now at' /proc/timer_list
grep -m1 'idle_sleeptime' /proc/timer_list
