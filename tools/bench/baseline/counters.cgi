#!/bin/sh
# CGI for `bramble bench`: the guest's CPU time (/proc/stat) and memory (/proc/meminfo).
printf 'Content-Type: text/plain\r\n\r\n'
cat /proc/stat /proc/meminfo
