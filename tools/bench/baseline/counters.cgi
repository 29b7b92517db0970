#!/bin/sh
# CGI for `bramble bench`: the guest's clock and idle time (/proc/uptime: seconds since boot and
# seconds spent idle), CPU time by kind (/proc/stat), memory (/proc/meminfo) and TCP counters
# (/proc/net/snmp, /proc/net/netstat).
printf 'Content-Type: text/plain\r\n\r\n'
printf 'uptime %s\n' "$(cat /proc/uptime)"
cat /proc/stat /proc/meminfo /proc/net/snmp /proc/net/netstat
