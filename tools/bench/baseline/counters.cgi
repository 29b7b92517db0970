#!/bin/sh
# CGI for `bramble bench`: the guest's clock and idle time (/proc/uptime: seconds since boot and
# seconds spent idle), CPU time by kind (/proc/stat) and memory (/proc/meminfo).
printf 'Content-Type: text/plain\r\n\r\n'
printf 'uptime %s\n' "$(cat /proc/uptime)"
cat /proc/stat /proc/meminfo
