//! The guests' own counters: busy time (time outside the idle loop) and RAM in use, from
//! Bramble's `status` console command and from Linux's /proc/stat and /proc/meminfo.

use serde::{Deserialize, Serialize};

/// A snapshot of a guest's counters. Times are in guest microseconds; under `-icount
/// shift=0` one guest nanosecond is one instruction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestCounters {
    /// Time since boot.
    pub up_us: Option<u64>,
    /// Time the CPU spent outside its idle state (WFI / the idle task).
    pub busy_us: Option<u64>,
    /// RAM in use, in bytes.
    pub ram_used_bytes: Option<u64>,
}

/// Parses Bramble's first `status` line. Shape (each part optional, any order):
/// `status: up 12345 us, busy 2345 us, idle 10000 us, ..., memory used 1234 KiB, free ...`
pub fn parse_bramble_status(line: &str) -> Option<GuestCounters> {
    let rest = &line[line.find("status:")? + "status:".len()..];
    let words: Vec<&str> = rest
        .split(|c: char| c.is_whitespace() || c == ',' || c == ';')
        .filter(|word| !word.is_empty())
        .collect();
    let after = |key: &str| {
        words
            .windows(2)
            .find(|pair| pair[0] == key)
            .and_then(|pair| pair[1].parse::<u64>().ok())
    };
    let memory = words.windows(4).find_map(|w| {
        let scale = match w[3] {
            "bytes" | "B" => 1,
            "KiB" => 1024,
            "MiB" => 1024 * 1024,
            _ => return None,
        };
        (w[0] == "memory" && w[1] == "used")
            .then(|| w[2].parse::<u64>().ok())
            .flatten()
            .map(|n| n * scale)
    });
    Some(GuestCounters {
        up_us: after("up"),
        busy_us: after("busy"),
        ram_used_bytes: memory,
    })
}

/// Parses the Linux baseline's counters CGI: a line `uptime UP IDLE` (/proc/uptime, seconds),
/// then /proc/stat and /proc/meminfo. Busy time is uptime minus idle time: the idle time is
/// measured on every idle entry and exit (NO_HZ), while /proc/stat's user and system times
/// are sampled at timer ticks, which in QEMU tend to land in idle periods and undercount.
/// Without the uptime line, /proc/stat's tick counts are used.
pub fn parse_linux_counters(text: &str) -> Option<GuestCounters> {
    let ticks_per_second = 100; // USER_HZ on ARM Linux
    let kib = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
    };
    let ram = match (kib("MemTotal:"), kib("MemAvailable:")) {
        (Some(total), Some(available)) => Some((total - available.min(total)) * 1024),
        _ => None,
    };
    let uptime: Option<Vec<f64>> = text
        .lines()
        .find_map(|line| line.strip_prefix("uptime "))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        });
    if let Some([up, idle]) = uptime.as_deref() {
        let up_us = (up * 1e6).round() as u64;
        let idle_us = (idle * 1e6).round() as u64;
        return Some(GuestCounters {
            up_us: Some(up_us),
            busy_us: Some(up_us.saturating_sub(idle_us)),
            ram_used_bytes: ram,
        });
    }
    let cpu: Vec<u64> = text
        .lines()
        .find(|line| line.starts_with("cpu "))?
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user already)
    let field = |index: usize| cpu.get(index).copied().unwrap_or(0);
    let busy = field(0) + field(1) + field(2) + field(5) + field(6) + field(7);
    let total = busy + field(3) + field(4);
    let to_us = |ticks: u64| ticks * 1_000_000 / ticks_per_second;
    Some(GuestCounters {
        up_us: Some(to_us(total)),
        busy_us: Some(to_us(busy)),
        ram_used_bytes: ram,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bramble_status_with_and_without_the_benchmark_counters() {
        let full = parse_bramble_status(
            "[  12.345] INFO status: up 12345678 us, busy 2345678 us, idle 10000000 us, 42 \
             timer interrupts, 3 watchdog ticks, resets 0 (watchdog 0), memory used 1280 KiB, \
             free 500000 KiB",
        )
        .unwrap();
        assert_eq!(full.up_us, Some(12_345_678));
        assert_eq!(full.busy_us, Some(2_345_678));
        assert_eq!(full.ram_used_bytes, Some(1280 * 1024));
        let today = parse_bramble_status("status: up 99 us, 3 timer interrupts").unwrap();
        assert_eq!(
            today,
            GuestCounters {
                up_us: Some(99),
                busy_us: None,
                ram_used_bytes: None
            }
        );
        assert_eq!(parse_bramble_status("serving: http://10.0.2.15/"), None);
    }

    #[test]
    fn linux_uptime_stat_and_meminfo() {
        let text = "cpu  100 5 50 1000 10 3 2 0 0 0\ncpu0 100 5 50 1000 10 3 2 0 0 0\n\
                    intr 1 2 3\nMemTotal:         449000 kB\nMemFree:          400000 kB\n\
                    MemAvailable:     420000 kB\n";
        let counters = parse_linux_counters(text).unwrap();
        assert_eq!(counters.busy_us, Some(160 * 10_000));
        assert_eq!(counters.up_us, Some(1170 * 10_000));
        assert_eq!(counters.ram_used_bytes, Some(29_000 * 1024));
        assert_eq!(parse_linux_counters("MemTotal: 1 kB\n"), None);
        let with_uptime = format!("uptime 61.25 50.75\n{text}");
        let counters = parse_linux_counters(&with_uptime).unwrap();
        assert_eq!(counters.up_us, Some(61_250_000));
        assert_eq!(counters.busy_us, Some(10_500_000));
        assert_eq!(counters.ram_used_bytes, Some(29_000 * 1024));
    }
}
