//! Each line as the board and hosted printed it before this crate (their format strings,
//! copied here), written by the declaration, and read back.

use bramble_status::*;

/// The text as the line's declaration writes it equals `expected`, and reading that text
/// gives the same line again.
fn check<T: std::fmt::Display>(line: T, expected: &str, read: impl Fn(&str) -> Option<String>) {
    assert_eq!(line.to_string(), expected);
    let console = format!("[    12.345678] INFO  bramble: {expected}\r");
    assert_eq!(read(&console).as_deref(), Some(expected), "read back");
}

#[test]
fn up() {
    let (up, idle, resets, watchdog_resets, used_kib) = (9_000_000u64, 8_000_000u64, 2, 1, 300);
    let expected = format!(
        "status: up {up} us, busy {} us, idle {idle} us, {} timer interrupts, {} watchdog ticks, \
         resets {resets} (watchdog {watchdog_resets}), memory used {used_kib} KiB, free {} KiB \
         (card cache {} KiB of it), loop passes {}, slept {}, deadline already due {}, quiet \
         receive wakes {}",
        1_000_000, 77, 9, 1024, 512, 5000, 4000, 3, 12
    );
    let line = Up {
        up_us: up,
        busy_us: 1_000_000,
        idle_us: idle,
        timer_interrupts: 77,
        watchdog_ticks: 9,
        resets,
        watchdog_resets,
        memory_used_kib: used_kib,
        free_kib: 1024,
        card_cache_kib: 512,
        loop_passes: 5000,
        slept: 4000,
        deadline_due: 3,
        quiet_receive_wakes: 12,
    };
    check(line, &expected, |l| Up::parse(l).map(|u| u.to_string()));
    let read = Up::parse(&expected).unwrap();
    assert_eq!(
        (read.busy_us, read.resets, read.watchdog_resets),
        (1_000_000, 2, 1)
    );
}

#[test]
fn cache() {
    let expected = format!(
        "status: cache KiB {}, segments {}, used {}, hits {}, misses {}, hit percent {}, \
         card bytes {}, card segments {}, warmed {}, card kB/s {}, read errors {}, \
         checksum failures {}, body failures {}, evictions {}, longest card call us {}",
        2048, 64, 10, 30, 10, 75, 40960, 10, 8, 9812, 1, 2, 3, 4, 1500
    );
    let line = Cache {
        kib: 2048,
        segments: 64,
        used: 10,
        hits: 30,
        misses: 10,
        hit_percent: 75,
        card_bytes: 40960,
        card_segments: 10,
        warmed: 8,
        card_kb_per_s: 9812,
        read_errors: 1,
        checksum_failures: 2,
        body_failures: 3,
        evictions: 4,
        longest_card_call_us: 1500,
    };
    check(line, &expected, |l| Cache::parse(l).map(|c| c.to_string()));
    assert_eq!(Cache::parse(&expected).unwrap().checksum_failures, 2);
}

#[test]
fn card_writes_and_entropy() {
    let expected = format!(
        "status: card writes {} commands, {} blocks, {} bytes, refused {}, failed {}; window {}",
        3, 24, 12288, 0, 0, "64 blocks from block 1025"
    );
    let window = "64 blocks from block 1025";
    let line = CardWrites {
        commands: 3,
        blocks: 24,
        bytes: 12288,
        refused: 0,
        failed: 0,
        window: Text::Shown(&window),
    };
    check(line, &expected, |l| {
        CardWrites::parse(l).map(|c| c.to_string())
    });
    assert_eq!(
        CardWrites::parse(&expected).unwrap().window.as_str(),
        window
    );

    let (tested, seeding, reseeds) = (1024, 5123, 0);
    let expected = format!(
        "status: entropy ok, hardware RNG bytes tested {tested}, boot seeding {} us, \
         reseeds {}",
        seeding, reseeds
    );
    let line = EntropyOk {
        tested,
        boot_seeding_us: seeding,
        reseeds,
    };
    check(line, &expected, |l| {
        EntropyOk::parse(l).map(|c| c.to_string())
    });
    let problem = "repetition count: 6 in a row";
    let expected = format!("status: entropy failed: {problem}; bytes tested {tested}; HTTPS off");
    let line = EntropyFailed {
        problem: Text::Shown(&problem),
        tested,
    };
    check(line, &expected, |l| {
        EntropyFailed::parse(l).map(|c| c.to_string())
    });
    assert!(EntropyOk::parse(&expected).is_none());
}

#[test]
fn http_addresses_connections_syslog() {
    let expected = format!(
        "status: http requests {}, bytes {}, open connections {}, accepted {}, timeouts {}, \
         errors {}; frames rx {} tx {}, rx errors {}, tx dropped {}",
        10, 5000, 2, 4, 1, 3, 100, 90, 0, 0
    );
    let line = Http {
        requests: 10,
        bytes: 5000,
        open_connections: 2,
        accepted: 4,
        timeouts: 1,
        errors: 3,
        frames_rx: 100,
        frames_tx: 90,
        rx_errors: 0,
        tx_dropped: 0,
    };
    check(line, &expected, |l| Http::parse(l).map(|c| c.to_string()));
    let read = Http::parse(&expected).unwrap();
    assert_eq!((read.open_connections, read.frames_tx), (2, 90));
    assert!(Https::parse(&expected).is_none());

    let expected = format!(
        "status: addresses {}; IPv6 router {}; connections over IPv4 {}, over IPv6 {}",
        "10.0.2.15, fe80::1", "fe80::2", 5, 1
    );
    let line = Addresses {
        addresses: Text::Read("10.0.2.15, fe80::1"),
        ipv6_router: Text::Read("fe80::2"),
        over_ipv4: 5,
        over_ipv6: 1,
    };
    check(line, &expected, |l| {
        Addresses::parse(l).map(|c| c.to_string())
    });

    let pool = "64 slots, 3 in use, peak 9";
    let expected = format!("status: connections {pool}");
    check(
        Connections {
            pool: Text::Shown(&pool),
        },
        &expected,
        |l| Connections::parse(l).map(|c| c.to_string()),
    );
    let report = "PCP, ports 80 443 for 7200 s, outside 203.0.113.7";
    let expected =
        format!("status: router {report}; rounds 3, router restarts 1, protocol changes 1");
    check(
        Router {
            report: Text::Shown(&report),
            rounds: 3,
            restarts: 1,
            protocol_changes: 1,
        },
        &expected,
        |l| Router::parse(l).map(|c| c.to_string()),
    );
    let expected = format!("status: syslog sent {}, dropped {}", 7, 1);
    check(
        Syslog {
            sent: 7,
            dropped: 1,
        },
        &expected,
        |l| Syslog::parse(l).map(|c| c.to_string()),
    );
}

#[test]
fn uploads() {
    let expected = "status: uploads heads 5, published 1, refused 2, resumed 1, abandoned 0, \
                    rolled back 1, nudged 1";
    check(
        Uploads {
            heads: 5,
            published: 1,
            refused: 2,
            resumed: 1,
            abandoned: 0,
            rolled_back: 1,
            nudged: 1,
        },
        expected,
        |l| Uploads::parse(l).map(|c| c.to_string()),
    );
    assert!(Uploads::parse("status: uploads heads 5, published 1").is_none());
}

#[test]
fn ddns() {
    let expected = "status: ddns A 203.0.113.7, AAAA -; updates 1, sends 2, failures in a row 0; \
                    last failure: -";
    check(
        Ddns {
            ipv4: Text::Read("203.0.113.7"),
            ipv6: Text::Read("-"),
            updates: 1,
            sends: 2,
            failures: 0,
            last_failure: Text::Read("-"),
        },
        expected,
        |l| Ddns::parse(l).map(|c| c.to_string()),
    );
    let read = Ddns::parse(
        "12 s  status: ddns A -, AAAA 2001:db8::1; updates 0, sends 3, failures in a row 1; \
         last failure: no answer after 3 sends",
    )
    .unwrap();
    assert_eq!(read.ipv6.as_str(), "2001:db8::1");
    assert_eq!(read.last_failure.as_str(), "no answer after 3 sends");
}

#[test]
fn dyndns_and_reach() {
    let expected = "status: dyndns A 203.0.113.7, AAAA -; updates 1, requests 2, failures in a \
                    row 0; last answer: nochg; up to date";
    check(
        Dyndns {
            ipv4: Text::Read("203.0.113.7"),
            ipv6: Text::Read("-"),
            updates: 1,
            requests: 2,
            failures: 0,
            last_answer: Text::Read("nochg"),
            state: Text::Read("up to date"),
        },
        expected,
        |l| Dyndns::parse(l).map(|c| c.to_string()),
    );
    // Not taken for the RFC 2136 line, nor it for this one.
    assert!(Ddns::parse(expected).is_none());
    let read = Dyndns::parse(
        "9 s  status: dyndns A -, AAAA -; updates 0, requests 1, failures in a row 0; last \
         answer: badauth; stopped by badauth until the settings change",
    )
    .unwrap();
    assert_eq!(read.last_answer.as_str(), "badauth");
    assert_eq!(
        read.state.as_str(),
        "stopped by badauth until the settings change"
    );
    let expected = "status: reach public IPv4 203.0.113.7 from echo; echo asked 3, answered 2; \
                    outside check: unchecked";
    check(
        Reach {
            public: Text::Read("203.0.113.7"),
            source: Text::Read("echo"),
            echoes: 3,
            echoes_answered: 2,
            check: Text::Read("unchecked"),
        },
        expected,
        |l| Reach::parse(l).map(|c| c.to_string()),
    );
}

#[test]
fn clock() {
    let (unix, stratum, ago) = (1_764_000_000u64, 2u8, 30u64);
    let expected =
        format!("status: clock set, Unix time {unix}, from a stratum {stratum} server {ago} s ago");
    check(ClockSet { unix, stratum, ago }, &expected, |l| {
        ClockSet::parse(l).map(|c| c.to_string())
    });
    let expected = format!(
        "status: clock not set yet ({} time servers known); no Date on responses",
        2
    );
    check(ClockUnset { servers: 2 }, &expected, |l| {
        ClockUnset::parse(l).map(|c| c.to_string())
    });
    check(ClockOff {}, "status: clock off", |l| {
        ClockOff::parse(l).map(|c| c.to_string())
    });
    assert!(ClockSet::parse("status: clock off").is_none());
}

#[test]
fn https() {
    let reason = "no certificate";
    let expected = format!("status: https not started: {reason}; plain HTTP is served");
    check(
        HttpsNotStarted {
            reason: Text::Shown(&reason),
        },
        &expected,
        |l| HttpsNotStarted::parse(l).map(|c| c.to_string()),
    );

    let heap = "40000 B in use, 90000 B at most, of 200000 B";
    let certificate = "valid, expires 2027-01-01 (in 30 days), does not cover www.example.org";
    let expected = format!(
        "status: https open {}, handshakes full {} resumed {}, h2 {}, failures {}, deferred {}, \
         heap {heap}; certificate {certificate}; closed for memory {}; refused not TLS {}; \
         priced P-256 {}, handshake work {} M instructions; idle sessions suspended {} now {}; \
         h2 idle suspensions {}, resumptions {}, closed for room {}, parked state {} B",
        1, 17, 3, 11, 2, 1, 0, 7, 8, 900, 40, 6, 25, 19, 1, 630
    );
    let line = Https {
        open: 1,
        full: 17,
        resumed: 3,
        h2: 11,
        failures: 2,
        deferred: 1,
        heap: Text::Shown(&heap),
        certificate: Text::Shown(&certificate),
        closed_for_memory: 0,
        refused_not_tls: 7,
        priced_p256: 8,
        work_millions: 900,
        suspended: 40,
        suspended_now: 6,
        h2_suspended: 25,
        h2_resumed: 19,
        h2_closed_for_room: 1,
        h2_parked_bytes: 630,
    };
    check(line, &expected, |l| Https::parse(l).map(|c| c.to_string()));
    let read = Https::parse(&expected).unwrap();
    assert_eq!(
        (read.resumed, read.h2, read.certificate.as_str()),
        (3, 11, certificate)
    );
}

#[test]
fn acme() {
    let expected = format!(
        "status: acme {:?}, certificate ends at Unix time {}, next order in {}, orders {}, \
         issued {} ({} not valid by the clock), saves {} ({} refused by the daily cap), \
         accounts made {}; over boots: last certificate {}, saves in 24 h {}, accounts in \
         24 h {}, history {}, failures in a row {}, last error: {}",
        Some(3),
        "(none yet)",
        "120 s",
        1,
        0,
        0,
        0,
        0,
        1,
        "3600 s ago",
        2,
        1,
        "a save cut off",
        1,
        "order: the CA said: rejectedIdentifier, (a comma) and more"
    );
    let phase = Some(3);
    let line = Acme {
        phase: Text::Debugged(&phase),
        not_after: Text::Read("(none yet)"),
        next_order_in: Text::Read("120 s"),
        orders: 1,
        issued: 0,
        issued_invalid: 0,
        saves: 0,
        saves_refused: 0,
        accounts: 1,
        since_last_issue: Text::Read("3600 s ago"),
        saves_in_day: 2,
        accounts_in_day: 1,
        history: Text::Read("a save cut off"),
        failures: 1,
        last_error: Text::Read("order: the CA said: rejectedIdentifier, (a comma) and more"),
    };
    check(line, &expected, |l| Acme::parse(l).map(|c| c.to_string()));
    let read = Acme::parse(&expected).unwrap();
    assert_eq!((read.orders, read.failures), (1, 1));
    assert_eq!((read.saves_in_day, read.accounts_in_day), (2, 1));
    assert_eq!(read.history.as_str(), "a save cut off");
    assert_eq!(read.phase.as_str(), "Some(3)");
}

#[test]
fn usb_and_nic() {
    let (kind, error, histogram) = (Some("Smsc95xx"), None::<u8>, [1u64, 2, 3, 4, 5, 6, 7, 8]);
    let expected = format!(
        "status: usb {kind:?}, losses {}, re-probes {} ({} found it), last probe error {:?}, \
         quiet receive attempts {}, receive transfers {} (waited {}, {} us; \
         waits under 50/100/150/250/500/1000/10000 us, longer: {:?})",
        0, 1, 1, error, 55, 1000, 30, 4000, histogram
    );
    let line = Usb {
        kind: Text::Debugged(&kind),
        losses: 0,
        reprobes: 1,
        reprobes_found: 1,
        last_probe_error: Text::Debugged(&error),
        quiet_receive_attempts: 55,
        receive_transfers: 1000,
        waited: 30,
        wait_us: 4000,
        wait_histogram: Text::Debugged(&histogram),
    };
    check(line, &expected, |l| Usb::parse(l).map(|c| c.to_string()));
    assert_eq!(
        Usb::parse(&expected).unwrap().wait_histogram.as_str(),
        "[1, 2, 3, 4, 5, 6, 7, 8]"
    );

    let expected = format!(
        "status: nic rx frames {}, rx dropped {} (flagged bad or malformed), rx transfer \
         errors {}, tx frames {}, tx transfer errors {}",
        100, 3, 0, 90, 0
    );
    let line = Nic {
        rx_frames: 100,
        rx_dropped: 3,
        rx_transfer_errors: 0,
        tx_frames: 90,
        tx_transfer_errors: 0,
    };
    check(line, &expected, |l| Nic::parse(l).map(|c| c.to_string()));
}

#[test]
fn other_lines_and_bad_values_read_as_none() {
    assert!(Http::parse("GET / 200").is_none());
    assert!(Http::parse("status: http requests x, bytes 1").is_none());
    assert!(Syslog::parse("status: syslog sent 18446744073709551616, dropped 0").is_none());
    assert!(Syslog::parse("status: syslog sent 1").is_none());
    assert!(Nic::parse("status: nic rx frames 1, rx dropped").is_none());
}

#[test]
fn fields_name_every_counter() {
    let line = Syslog {
        sent: 7,
        dropped: 1,
    };
    let fields: Vec<_> = line.fields().collect();
    assert_eq!(fields, [("sent", Some(7)), ("dropped", Some(1))]);
    let line = HttpsNotStarted {
        reason: Text::Read("gone"),
    };
    assert_eq!(line.fields().collect::<Vec<_>>(), [("reason", None)]);
    assert_eq!(ClockOff {}.fields().count(), 0);
}

/// Every cut and every one-character change of a line reads as some line or none, never a
/// panic (the reader slices only with `get`), and whatever reads writes back to text that
/// reads the same.
#[test]
fn cut_and_changed_lines_never_panic() {
    let heap = "1 B in use, 2 B at most, of 3 B";
    let line = Https {
        open: 1,
        full: 2,
        resumed: 3,
        h2: 9,
        failures: 4,
        deferred: 5,
        heap: Text::Read(heap),
        certificate: Text::Read("valid, expires é (in 3 days)"),
        closed_for_memory: 7,
        refused_not_tls: 10,
        priced_p256: 11,
        work_millions: 12,
        suspended: 13,
        suspended_now: 14,
        h2_suspended: 15,
        h2_resumed: 16,
        h2_closed_for_room: 17,
        h2_parked_bytes: 18,
    }
    .to_string();
    let chars: Vec<char> = line.chars().collect();
    let mut variants = Vec::new();
    for cut in 0..=chars.len() {
        variants.push(chars[..cut].iter().collect::<String>());
        variants.push(chars[cut..].iter().collect::<String>());
    }
    for at in 0..chars.len() {
        for replacement in [',', ';', ' ', '9', 'x', 'é', '(', ')'] {
            let mut changed = chars.clone();
            changed[at] = replacement;
            variants.push(changed.into_iter().collect());
        }
    }
    for text in &variants {
        if let Some(read) = Https::parse(text) {
            let again = read.to_string();
            assert_eq!(Https::parse(&again).map(|l| l.to_string()), Some(again));
        }
        let _ = (
            Up::parse(text),
            Acme::parse(text),
            Usb::parse(text),
            ClockOff::parse(text),
            Uploads::parse(text),
        );
    }
}
