//! The guests' own counters: busy time (time outside the idle loop) and RAM in use, from
//! Bramble's `status` console command and from Linux's /proc/stat and /proc/meminfo.

use bramble_status::{Cache, Http, Https, Up};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A snapshot of a guest's counters. Times are in guest microseconds; under `-icount
/// shift=0` one guest nanosecond is one instruction.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestCounters {
    /// Time since boot.
    pub up_us: Option<u64>,
    /// Time the CPU spent outside its idle state (WFI / the idle task).
    pub busy_us: Option<u64>,
    /// RAM in use, in bytes.
    pub ram_used_bytes: Option<u64>,
    /// Network and server event counters, by name (Bramble: its second status line; Linux:
    /// TCP counters from /proc/net/snmp and /proc/net/netstat).
    pub events: BTreeMap<String, u64>,
}

impl GuestCounters {
    /// How much each event counter grew from `before` to `self`.
    pub fn event_deltas(&self, before: &GuestCounters) -> BTreeMap<String, u64> {
        self.events
            .iter()
            .filter_map(|(name, after)| {
                let before = before.events.get(name)?;
                Some((name.clone(), after.saturating_sub(*before)))
            })
            .collect()
    }
}

/// Adds the counters of Bramble's [`Http`] status line to `counters`, each named by its
/// field (`requests`, `open connections`, `frames rx`, ...).
pub fn add_bramble_events(counters: &mut GuestCounters, line: &str) {
    let Some(http) = Http::parse(line) else {
        return;
    };
    for (name, value) in http.fields() {
        if let Some(value) = value {
            counters.events.insert(name.replace('_', " "), value);
        }
    }
}

/// Adds the handshake counters of Bramble's [`Https`] status line to `counters`, as `tls
/// full handshakes`, `tls resumed handshakes`, `tls h2 connections`, `tls failures`, `tls
/// deferred` and `tls closed for memory`.
pub fn add_bramble_tls_events(counters: &mut GuestCounters, line: &str) {
    let Some(https) = Https::parse(line) else {
        return;
    };
    for (name, value) in [
        ("tls full handshakes", https.full),
        ("tls resumed handshakes", https.resumed),
        ("tls h2 connections", https.h2),
        ("tls failures", https.failures),
        ("tls deferred", https.deferred),
        ("tls closed for memory", https.closed_for_memory),
        ("tls h2 idle suspensions", https.h2_suspended),
        ("tls h2 resumptions", https.h2_resumed),
        ("tls h2 closed for room", https.h2_closed_for_room),
    ] {
        counters.events.insert(name.to_string(), value);
    }
}

/// Reads Bramble's [`Up`] status line: time since boot, busy time and RAM in use.
pub fn parse_bramble_status(line: &str) -> Option<GuestCounters> {
    let up = Up::parse(line)?;
    Some(GuestCounters {
        up_us: Some(up.up_us),
        busy_us: Some(up.busy_us),
        ram_used_bytes: Some(up.memory_used_kib as u64 * 1024),
        events: BTreeMap::new(),
    })
}

/// Parses the Linux baseline's counters CGI: a line `uptime UP IDLE` (/proc/uptime, seconds),
/// /proc/stat, /proc/meminfo, TCP counters and two lines of /proc/timer_list (`now at N nsecs`,
/// `.idle_sleeptime : N nsecs`), which give busy time in nanoseconds; without those, /proc/uptime
/// (10 ms steps), and without that, /proc/stat. Busy time is uptime minus idle time: the idle time is
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
    let events = linux_tcp_events(text);
    // /proc/timer_list: "now at N nsecs" and ".idle_sleeptime : N nsecs" (nanoseconds).
    let nanoseconds = |key: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(key))
            .and_then(|rest| {
                rest.trim_start_matches([' ', ':'])
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
    };
    if let (Some(now), Some(idle)) = (nanoseconds("now at"), nanoseconds(".idle_sleeptime")) {
        return Some(GuestCounters {
            up_us: Some(now / 1000),
            busy_us: Some(now.saturating_sub(idle) / 1000),
            ram_used_bytes: ram,
            events,
        });
    }
    if let Some([up, idle]) = uptime.as_deref() {
        let up_us = (up * 1e6).round() as u64;
        let idle_us = (idle * 1e6).round() as u64;
        return Some(GuestCounters {
            up_us: Some(up_us),
            busy_us: Some(up_us.saturating_sub(idle_us)),
            ram_used_bytes: ram,
            events,
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
        events,
    })
}

/// TCP counters that explain failures and tails: connections accepted, listen queue overflows
/// and drops, retransmitted segments, resets sent. /proc/net/snmp and /proc/net/netstat print
/// a line of names and then a line of values, both starting with the same `Group:`.
fn linux_tcp_events(text: &str) -> BTreeMap<String, u64> {
    const WANTED: [(&str, &str); 6] = [
        ("Tcp:", "PassiveOpens"),
        ("Tcp:", "RetransSegs"),
        ("Tcp:", "OutRsts"),
        ("Tcp:", "AttemptFails"),
        ("TcpExt:", "ListenOverflows"),
        ("TcpExt:", "ListenDrops"),
    ];
    let mut events = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.windows(2) {
        let (names, values) = (pair[0], pair[1]);
        let Some(group) = names.split_whitespace().next() else {
            continue;
        };
        let is_header = names
            .split_whitespace()
            .nth(1)
            .is_some_and(|word| word.parse::<i64>().is_err());
        if !is_header || !values.starts_with(group) {
            continue;
        }
        for (name, value) in names
            .split_whitespace()
            .zip(values.split_whitespace())
            .skip(1)
        {
            if WANTED.contains(&(group, name))
                && let Ok(value) = value.parse::<u64>()
            {
                events.insert(name.to_string(), value);
            }
        }
    }
    events
}

/// The numbers of Bramble's [`Cache`] status line by field name (`hits`, `card bytes`,
/// `card kb per s`, ...).
pub fn parse_cache_status(line: &str) -> Option<BTreeMap<String, u64>> {
    let cache = Cache::parse(line)?;
    Some(
        cache
            .fields()
            .filter_map(|(name, value)| Some((name.replace('_', " "), value?)))
            .collect(),
    )
}

/// The counters of Bramble's [`Cache`] status line that only grow, as events: `cache hits`,
/// `cache misses`, `card bytes` (read from the card), `card segments`, `cache warmed`, `card
/// read errors`, `cache checksum failures`, `cache evictions`. Their growth over a load run
/// is that run's hit rate and card traffic; the line's sizes and rates (KiB, used, hit
/// percent, kB/s) are left out, a difference of them means nothing.
pub fn add_bramble_cache_events(counters: &mut GuestCounters, line: &str) {
    let Some(cache) = Cache::parse(line) else {
        return;
    };
    for (event, value) in [
        ("cache hits", cache.hits),
        ("cache misses", cache.misses),
        ("card bytes", cache.card_bytes),
        ("card segments", cache.card_segments),
        ("cache warmed", cache.warmed),
        ("card read errors", cache.read_errors),
        ("cache checksum failures", cache.checksum_failures),
        ("cache evictions", cache.evictions),
    ] {
        counters.events.insert(event.to_string(), value);
    }
}

/// The stamps of Bramble's `boot phases:` line (`MMU 4612 us, SD 63308 us, table verified
/// 210459 us, ..., ready 969095 us since reset, first request served 1036969 us`), by phase
/// name, in guest microseconds since reset; `None` for any other line.
pub fn parse_boot_phases(line: &str) -> Option<BTreeMap<String, u64>> {
    let text = line.split("boot phases: ").nth(1)?;
    let phases: BTreeMap<String, u64> = text
        .split(", ")
        .filter_map(|part| {
            let part = part.trim().trim_end_matches(" since reset");
            let (name, value) = part.strip_suffix(" us")?.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect();
    (!phases.is_empty()).then_some(phases)
}

/// The card's read speed between two `status: cache` snapshots, in MB/s: the bytes read in
/// between over the time reads were in flight in between. The line gives bytes and the speed
/// since boot (kB/s, bytes per millisecond); the time in flight since boot is their quotient,
/// so the figure is for the reads between the snapshots alone (the `cold` rounds, not the
/// walk or warm-up before them). `None` without reads in between.
pub fn card_speed_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> Option<f64> {
    let bytes = |map: &BTreeMap<String, u64>| map.get("card bytes").copied().unwrap_or(0);
    let micros = |map: &BTreeMap<String, u64>| {
        let rate = map.get("card kb per s").copied().unwrap_or(0);
        (bytes(map) as f64 * 1000.0 / rate as f64).max(0.0)
    };
    let micros_of = |map: &BTreeMap<String, u64>| {
        if bytes(map) == 0 { 0.0 } else { micros(map) }
    };
    let read = bytes(after).checked_sub(bytes(before)).filter(|&b| b > 0)?;
    let time = micros_of(after) - micros_of(before);
    (time > 0.0 && time.is_finite()).then(|| read as f64 / time)
}

/// Hits and misses of the card cache over one load run (from its `guest_events`), and the
/// hits' share of the lookups in percent; `None` when the run has no cache counters or made
/// no lookup.
pub fn cache_hit_rate(events: &BTreeMap<String, u64>) -> Option<(u64, u64, f64)> {
    let hits = *events.get("cache hits")?;
    let misses = *events.get("cache misses")?;
    let lookups = hits + misses;
    (lookups > 0).then(|| (hits, misses, 100.0 * hits as f64 / lookups as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_speed_of_the_reads_between_two_snapshots() {
        let snapshot = |bytes: u64, rate: u64| -> BTreeMap<String, u64> {
            [("card bytes", bytes), ("card kb per s", rate)]
                .into_iter()
                .map(|(name, value)| (name.to_string(), value))
                .collect()
        };
        // 20 MB in 2 s since boot (10 MB/s), then 10 MB more in 0.5 s: the last reads went at
        // 20 MB/s although the speed since boot says 12.
        let before = snapshot(20_000_000, 10_000);
        let after = snapshot(30_000_000, 12_000);
        let speed = card_speed_between(&before, &after).unwrap();
        assert!((speed - 20.0).abs() < 0.01, "{speed}");
        // From boot, with nothing read before.
        let speed = card_speed_between(&snapshot(0, 0), &before).unwrap();
        assert!((speed - 10.0).abs() < 0.01, "{speed}");
        // No reads in between, or no counters: no speed.
        assert!(card_speed_between(&after, &after).is_none());
        assert!(card_speed_between(&BTreeMap::new(), &BTreeMap::new()).is_none());
    }

    #[test]
    fn boot_phase_stamps_by_name() {
        let phases = parse_boot_phases(
            "[    1.036977] INFO  boot phases: MMU 4612 us, SD 63308 us, table verified 210459 \
             us, USB NIC 879755 us, address 969088 us, ready 969095 us since reset, first \
             request served 1036969 us",
        )
        .unwrap();
        assert_eq!(phases["MMU"], 4612);
        assert_eq!(phases["table verified"], 210_459);
        assert_eq!(phases["USB NIC"], 879_755);
        assert_eq!(phases["ready"], 969_095);
        assert_eq!(phases["first request served"], 1_036_969);
        assert_eq!(phases.len(), 7);
        assert!(parse_boot_phases("status: up 5 us").is_none());
        assert!(parse_boot_phases("boot phases: nothing here").is_none());
    }

    #[test]
    fn cache_line_gives_its_growing_counters_and_a_run_its_hit_rate() {
        let line = |hits: u64, misses: u64, card: u64| {
            format!(
                "[ 9.1] INFO  status: cache KiB 440000, segments 6875, used 12, hits {hits}, \
                 misses {misses}, hit percent 88, card bytes {card}, card segments 12, warmed \
                 3, card kB/s 10182, read errors 1, checksum failures 0, body failures 0, \
                 evictions 5, longest card call us 2100"
            )
        };
        let mut before = GuestCounters::default();
        add_bramble_cache_events(&mut before, &line(30, 4, 786_432));
        assert_eq!(before.events["cache hits"], 30);
        assert_eq!(before.events["card read errors"], 1);
        assert_eq!(before.events["cache evictions"], 5);
        assert_eq!(before.events["cache warmed"], 3);
        assert!(
            !before.events.contains_key("card kb per s"),
            "a rate is no event"
        );
        assert!(!before.events.contains_key("hit percent"));
        let mut after = GuestCounters::default();
        add_bramble_cache_events(&mut after, &line(120, 14, 1_048_576));
        let run = after.event_deltas(&before);
        assert_eq!(run["card bytes"], 262_144);
        let (hits, misses, percent) = cache_hit_rate(&run).unwrap();
        assert_eq!((hits, misses), (90, 10));
        assert!((percent - 90.0).abs() < 1e-9, "{percent}");
        // No lookups, or no cache line at all: no rate.
        assert!(cache_hit_rate(&before.event_deltas(&before)).is_none());
        let mut none = GuestCounters::default();
        add_bramble_cache_events(&mut none, "status: up 5 us");
        assert!(none.events.is_empty());
        assert!(cache_hit_rate(&none.events).is_none());
    }

    #[test]
    fn bramble_tls_line_gives_the_handshake_counters() {
        let mut counters = GuestCounters::default();
        add_bramble_tls_events(
            &mut counters,
            "[    9.1] INFO  status: https open 2, handshakes full 17 resumed 3, h2 5, failures 1, \
             deferred 4, heap 1226 B in use, 5029 B at most, of 3400985 B; certificate valid, \
             expires Sun, 07 Nov 2126 09:37:56 GMT (in 36500 days); closed for memory 5; \
             refused not TLS 0; priced P-256 0, handshake work 120 M instructions; idle \
             sessions suspended 9 now 1; h2 idle suspensions 4, resumptions 2, closed for room 0, \
             parked state 300 B",
        );
        let expected: BTreeMap<String, u64> = [
            ("tls full handshakes", 17),
            ("tls resumed handshakes", 3),
            ("tls h2 connections", 5),
            ("tls failures", 1),
            ("tls deferred", 4),
            ("tls closed for memory", 5),
            ("tls h2 idle suspensions", 4),
            ("tls h2 resumptions", 2),
            ("tls h2 closed for room", 0),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value))
        .collect();
        assert_eq!(counters.events, expected);
        let mut none = GuestCounters::default();
        add_bramble_tls_events(
            &mut none,
            "status: https not started: tls_key KEY.PEM: gone; plain HTTP is served",
        );
        assert!(none.events.is_empty());
    }

    #[test]
    fn cache_status_numbers_by_name() {
        let line = "[ 9.1] INFO  status: cache KiB 440000, segments 6875, used 12, hits 30, \
                    misses 4, hit percent 88, card bytes 786432, card segments 12, warmed 0, \
                    card kB/s 10182, read errors 0, checksum failures 0, body failures 0, \
                    evictions 0, longest card call us 900";
        let numbers = parse_cache_status(line).unwrap();
        assert_eq!(numbers["hits"], 30);
        assert_eq!(numbers["hit percent"], 88);
        assert_eq!(numbers["card kb per s"], 10182);
        assert_eq!(numbers["longest card call us"], 900);
        assert_eq!(numbers["checksum failures"], 0);
        assert!(parse_cache_status("status: up 5 us").is_none());
    }

    #[test]
    fn bramble_status_gives_time_and_memory() {
        let full = parse_bramble_status(
            "[  12.345] INFO status: up 12345678 us, busy 2345678 us, idle 10000000 us, 42 \
             timer interrupts, 3 watchdog ticks, resets 0 (watchdog 0), memory used 1280 KiB, \
             free 500000 KiB (card cache 440000 KiB of it), loop passes 900, slept 800, \
             deadline already due 2, quiet receive wakes 7",
        )
        .unwrap();
        assert_eq!(full.up_us, Some(12_345_678));
        assert_eq!(full.busy_us, Some(2_345_678));
        assert_eq!(full.ram_used_bytes, Some(1280 * 1024));
        assert!(full.events.is_empty());
        assert_eq!(
            parse_bramble_status("status: up 99 us, 3 timer interrupts"),
            None
        );
        assert_eq!(parse_bramble_status("serving: http://10.0.2.15/"), None);
    }

    #[test]
    fn bramble_event_counters_and_deltas() {
        let mut before = GuestCounters::default();
        add_bramble_events(
            &mut before,
            "[ 1.0] INFO  status: http requests 10, bytes 5000, open connections 2, accepted \
             12, timeouts 1, errors 0; frames rx 100 tx 90, rx errors 0, tx dropped 3",
        );
        assert_eq!(before.events["requests"], 10);
        assert_eq!(before.events["open connections"], 2);
        assert_eq!(before.events["frames rx"], 100);
        assert_eq!(before.events["frames tx"], 90);
        assert_eq!(before.events["tx dropped"], 3);
        let mut after = before.clone();
        after.events.insert("requests".into(), 25);
        assert_eq!(after.event_deltas(&before)["requests"], 15);
        assert_eq!(after.event_deltas(&before)["tx dropped"], 0);
    }

    #[test]
    fn linux_tcp_counters() {
        let text = "Tcp: RtoAlgorithm RtoMin PassiveOpens AttemptFails RetransSegs OutRsts\n\
                    Tcp: 1 200 42 1 7 3\n\
                    TcpExt: SyncookiesSent ListenOverflows ListenDrops\n\
                    TcpExt: 0 5 6\n";
        let events = linux_tcp_events(text);
        assert_eq!(events["PassiveOpens"], 42);
        assert_eq!(events["RetransSegs"], 7);
        assert_eq!(events["ListenOverflows"], 5);
        assert_eq!(events["ListenDrops"], 6);
        assert!(!events.contains_key("RtoMin"));
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
        let precise = format!(
            "uptime 61.25 50.75\n{text}now at 61250123456 nsecs\n  .idle_sleeptime : \
             50750000000 nsecs\n"
        );
        let counters = parse_linux_counters(&precise).unwrap();
        assert_eq!(counters.up_us, Some(61_250_123));
        assert_eq!(counters.busy_us, Some(10_500_123));
        let with_uptime = format!("uptime 61.25 50.75\n{text}");
        let counters = parse_linux_counters(&with_uptime).unwrap();
        assert_eq!(counters.up_us, Some(61_250_000));
        assert_eq!(counters.busy_us, Some(10_500_000));
        assert_eq!(counters.ram_used_bytes, Some(29_000 * 1024));
    }
}
