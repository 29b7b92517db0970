//! The `status:` lines, declared once: each is written and read by the same declaration.
//!
//! The `status` console command prints one line per part of the appliance (uptime, card
//! cache, HTTP, HTTPS, ACME, USB, ...). The board and the hosted appliance write them; the
//! bench and the tests read them. Each line is one struct below, declared by
//! [`status_line!`] as its literal text with the fields in between:
//!
//! - writing is [`core::fmt::Display`]: `log::info!("{}", Http { requests, .. })`;
//! - reading is `Http::parse(line)`, which finds [`Http::PREFIX`] anywhere in `line` (the
//!   console's time stamp and log target come first) and reads each field back up to the
//!   literal that follows it. It is `None` for another line or a value that does not read.
//!
//! A new counter is one field in one declaration: its writers fill it in (the compiler
//! lists them) and every reader has it. Numbers are read with [`str::parse`]; a text field
//! ([`Text`]) is whatever stands up to the next literal, so it must not contain that literal.
//! Nothing here allocates or panics: the board prints these lines without a heap.

#![no_std]
#![forbid(unsafe_code)]

use core::fmt;

/// A value of a status line: written with `Display`, read back from its text.
pub trait Value<'a>: Sized {
    /// Reads the value from exactly `text` (the line between two literals).
    fn read(text: &'a str) -> Option<Self>;

    /// The value as a counter, if it is a number.
    fn number(&self) -> Option<u64> {
        None
    }
}

macro_rules! number_values {
    ($($ty:ty),*) => {$(
        impl Value<'_> for $ty {
            fn read(text: &str) -> Option<Self> {
                text.parse().ok()
            }

            fn number(&self) -> Option<u64> {
                u64::try_from(*self).ok()
            }
        }
    )*};
}
number_values!(u8, u16, u32, u64, usize, i64);

/// A text field: a value written with its `Display` (or `Debug`) form, or the text read
/// back from a line.
#[derive(Clone, Copy)]
pub enum Text<'a> {
    /// Written with `Display`.
    Shown(&'a dyn fmt::Display),
    /// Written with `Debug` (an enum's name, an `Option`, an array).
    Debugged(&'a dyn fmt::Debug),
    /// Read from a line (or a plain string to write).
    Read(&'a str),
}

impl<'a> Text<'a> {
    /// The text read from a line (empty for a value given to be written with
    /// `Display` or `Debug`: format it with `to_string` instead).
    pub fn as_str(&self) -> &'a str {
        match self {
            Text::Read(text) => text,
            Text::Shown(_) | Text::Debugged(_) => "",
        }
    }
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Shown(value) => value.fmt(f),
            Text::Debugged(value) => value.fmt(f),
            Text::Read(text) => f.write_str(text),
        }
    }
}

impl fmt::Debug for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", format_args!("{self}"))
    }
}

impl<'a> Value<'a> for Text<'a> {
    fn read(text: &'a str) -> Option<Self> {
        Some(Text::Read(text))
    }
}

/// Declares one status line: its first literal (the prefix a reader looks for), then each
/// field as `name: Type, "literal that follows"`. The last literal may be empty (the field
/// runs to the end of the line); no other may be, or two fields could not be told apart.
#[macro_export]
macro_rules! status_line {
    (
        $(#[$meta:meta])*
        $name:ident $(<$lt:lifetime>)? = $first:literal {
            $( $(#[$field_meta:meta])* $field:ident : $ty:ty, $after:literal )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name $(<$lt>)? {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl $(<$lt>)? $name $(<$lt>)? {
            /// The line's first literal: what a reader waits for.
            pub const PREFIX: &'static str = $first;

            /// Reads the line from `line`, or `None` if it is not this line or a value does
            /// not read.
            #[allow(unused_assignments)] // the last field's rest
            pub fn parse(line: & $($lt)? str) -> Option<Self> {
                let start = line.find($first)? + $first.len();
                #[allow(unused_mut, unused_variables)] // a line without fields
                let mut rest = line.get(start..)?;
                $(
                    let $field = {
                        let (text, after) = if $after.is_empty() {
                            (rest.trim_end(), "")
                        } else {
                            let end = rest.find($after)?;
                            (rest.get(..end)?, rest.get(end + $after.len()..)?)
                        };
                        rest = after;
                        <$ty as $crate::Value>::read(text)?
                    };
                )*
                Some(Self { $($field),* })
            }

            /// Each field's name and, for a number, its value: what a reader that keeps
            /// every counter of a line (the bench) iterates.
            pub fn fields(&self) -> impl Iterator<Item = (&'static str, Option<u64>)> {
                [$( (stringify!($field), $crate::Value::number(&self.$field)) ),*].into_iter()
            }
        }

        impl $(<$lt>)? core::fmt::Display for $name $(<$lt>)? {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str($first)?;
                $(
                    core::fmt::Display::fmt(&self.$field, f)?;
                    f.write_str($after)?;
                )*
                Ok(())
            }
        }
    };
}

status_line! {
    /// Time, memory and the main loop (the board).
    Up = "status: up " {
        /// Microseconds since boot.
        up_us: u64, " us, busy "
        /// Microseconds outside the idle loop.
        busy_us: u64, " us, idle "
        /// Microseconds in the idle loop.
        idle_us: u64, " us, "
        /// Timer interrupts taken.
        timer_interrupts: u32, " timer interrupts, "
        /// Watchdog ticks given.
        watchdog_ticks: u32, " watchdog ticks, resets "
        /// Resets since power-on.
        resets: u32, " (watchdog "
        /// Of them, by the watchdog.
        watchdog_resets: u32, "), memory used "
        /// RAM in use, KiB.
        memory_used_kib: usize, " KiB, free "
        /// RAM free, KiB (the card cache counts as free).
        free_kib: usize, " KiB (card cache "
        /// The card cache's part of the free RAM, KiB.
        card_cache_kib: usize, " KiB of it), loop passes "
        /// Passes of the main loop.
        loop_passes: u64, ", slept "
        /// Passes that slept.
        slept: u64, ", deadline already due "
        /// Passes whose deadline had passed when they would have slept.
        deadline_due: u64, ", quiet receive wakes "
        /// Wake-ups that found nothing received.
        quiet_receive_wakes: u64, ""
    }
}

status_line! {
    /// The kernel's stack: the deepest use since boot (the stack is painted at boot; see
    /// boot/src/stack.rs) against its size (the board).
    Stack = "status: stack peak " {
        /// Deepest use since boot, bytes.
        peak_bytes: usize, " of "
        /// The stack's size, bytes.
        size_bytes: usize, " bytes"
    }
}

status_line! {
    /// The card cache and the card's reads (the board).
    Cache = "status: cache KiB " {
        /// Cache size, KiB.
        kib: usize, ", segments "
        /// Cache pages.
        segments: usize, ", used "
        /// Pages in use.
        used: usize, ", hits "
        /// Lookups that hit.
        hits: u64, ", misses "
        /// Lookups that missed.
        misses: u64, ", hit percent "
        /// Hits in percent of lookups.
        hit_percent: u64, ", card bytes "
        /// Bytes read from the card.
        card_bytes: u64, ", card segments "
        /// Segments read from the card.
        card_segments: u64, ", warmed "
        /// Segments read ahead to warm the cache.
        warmed: u64, ", card kB/s "
        /// The card's read speed since boot.
        card_kb_per_s: u64, ", read errors "
        /// Card reads that failed.
        read_errors: u64, ", checksum failures "
        /// Segments whose checksum failed.
        checksum_failures: u64, ", body failures "
        /// Bodies that could not be served.
        body_failures: u64, ", evictions "
        /// Pages evicted.
        evictions: u64, ", longest card call us "
        /// The longest single card call.
        longest_card_call_us: u64, ""
    }
}

status_line! {
    /// What was written to the card (the board, with a certificate store).
    CardWrites<'a> = "status: card writes " {
        /// Write commands sent.
        commands: u32, " commands, "
        /// Blocks written.
        blocks: u64, " blocks, "
        /// Bytes written.
        bytes: u64, " bytes, refused "
        /// Writes refused (outside the window).
        refused: u32, ", failed "
        /// Writes that failed.
        failed: u32, "; window "
        /// The blocks that may be written, or `none (...)`.
        window: Text<'a>, ""
    }
}

status_line! {
    /// The hardware RNG passed its health tests (the board).
    EntropyOk = "status: entropy ok, hardware RNG bytes tested " {
        /// Bytes tested.
        tested: u64, ", boot seeding "
        /// Time the boot seeding took.
        boot_seeding_us: u64, " us, reseeds "
        /// Hourly reseeds since.
        reseeds: u64, ""
    }
}

status_line! {
    /// The hardware RNG failed its health tests: HTTPS and ACME are off (the board).
    EntropyFailed<'a> = "status: entropy failed: " {
        /// What failed.
        problem: Text<'a>, "; bytes tested "
        /// Bytes tested.
        tested: u64, "; HTTPS off"
    }
}

status_line! {
    /// The HTTP server's and the PHY's counters (board and hosted).
    Http = "status: http requests " {
        /// Requests answered.
        requests: u64, ", bytes "
        /// Bytes sent.
        bytes: u64, ", open connections "
        /// Connections open now.
        open_connections: u32, ", accepted "
        /// Connections accepted.
        accepted: u64, ", timeouts "
        /// Connections cut off by a deadline.
        timeouts: u64, ", errors "
        /// Error responses (4xx and 5xx).
        errors: u64, "; frames rx "
        /// Frames received.
        frames_rx: u64, " tx "
        /// Frames sent.
        frames_tx: u64, ", rx errors "
        /// Frames received in error.
        rx_errors: u64, ", tx dropped "
        /// Frames dropped on sending.
        tx_dropped: u64, ""
    }
}

status_line! {
    /// The addresses and the connections per family (the board).
    Addresses<'a> = "status: addresses " {
        /// The addresses, as the appliance lists them.
        addresses: Text<'a>, "; IPv6 router "
        /// The IPv6 default router, or `none`.
        ipv6_router: Text<'a>, "; connections over IPv4 "
        /// Connections opened over IPv4.
        over_ipv4: u64, ", over IPv6 "
        /// Connections opened over IPv6.
        over_ipv6: u64, ""
    }
}

status_line! {
    /// The connection pool's counters, as the pool writes them (board and hosted).
    Connections<'a> = "status: connections " {
        /// The pool's own summary.
        pool: Text<'a>, ""
    }
}

status_line! {
    /// The syslog sender (the board, when `syslog` is set).
    Syslog = "status: syslog sent " {
        /// Lines sent.
        sent: u64, ", dropped "
        /// Lines dropped by the rate limit.
        dropped: u64, ""
    }
}

status_line! {
    /// The heartbeat (the board, with `heartbeat` set).
    Heartbeat = "status: heartbeat sent " {
        /// Pings started.
        sent: u64, ", answered "
        /// Pings answered with a 2xx status.
        answered: u64, ", failed "
        /// Pings that failed.
        failed: u64, ", next in "
        /// Seconds to the next ping.
        next_in: u64, " s"
    }
}

status_line! {
    /// Pulling new sites (the board, with `publish_url` set and a publish key on the card).
    Publish = "status: publish checks " {
        /// Checks of the manifest started.
        checks: u64, ", up to date "
        /// Checks that found the live version.
        up_to_date: u64, ", published "
        /// Sites written, verified and made live.
        published: u64, ", rolled back "
        /// Signed rollbacks that made the other slot live again.
        rolled_back: u64, ", refused "
        /// Manifests or images refused (signature, host, version, size, hash, length).
        refused: u64, ", failed "
        /// Checks that failed otherwise (network, TLS, stall, card).
        failed: u64, "; live version "
        /// The version served.
        live_version: u64, "; card blocks written "
        /// Blocks written since boot.
        blocks: u64, ", by the last publish "
        /// Blocks the last publish wrote.
        last_blocks: u64, "; next in "
        /// Seconds to the next check.
        next_in: u64, " s"
    }
}

status_line! {
    /// Signed site uploads (`PUT /.well-known/bramble/site` over HTTPS; the board, with a
    /// publish key on the card and HTTPS on).
    Uploads = "status: uploads heads " {
        /// Upload heads answered (uploads, rollbacks and nudges).
        heads: u64, ", published "
        /// Sites uploaded, verified and made live.
        published: u64, ", refused "
        /// Heads or bodies refused (signature, host, version, size, busy, hash, rate).
        refused: u64, ", resumed "
        /// Uploads resumed after a dropped connection.
        resumed: u64, ", abandoned "
        /// Uploads left unfinished past the resume allowance.
        abandoned: u64, ", rolled back "
        /// Signed rollbacks sent as uploads.
        rolled_back: u64, ", nudged "
        /// Signed nudges that started a pull's check.
        nudged: u64, ""
    }
}

status_line! {
    /// Dynamic DNS (the board, with `ddns` set): what the server last confirmed.
    Ddns<'a> = "status: ddns A " {
        /// The A record's address, or `-`.
        ipv4: Text<'a>, ", AAAA "
        /// The AAAA record's address, or `-`.
        ipv6: Text<'a>, "; updates "
        /// Updates confirmed since boot.
        updates: u32, ", sends "
        /// Requests sent since boot (resends included).
        sends: u32, ", failures in a row "
        /// Failed tries in a row.
        failures: u32, "; last failure: "
        /// The last failure, or `none`.
        last_failure: Text<'a>, ""
    }
}

status_line! {
    /// Dynamic DNS by dyndns2 over HTTPS (the board, with `ddns = dyndns2`, `desec` or
    /// `duckdns`): what the provider last confirmed and where the updates stand.
    Dyndns<'a> = "status: dyndns A " {
        /// The A record's address the provider confirmed, or `-`.
        ipv4: Text<'a>, ", AAAA "
        /// The AAAA record's address the provider confirmed, or `-`.
        ipv6: Text<'a>, "; updates "
        /// Updates the provider confirmed since boot.
        updates: u32, ", requests "
        /// Requests sent since boot.
        requests: u32, ", failures in a row "
        /// Failed tries in a row.
        failures: u32, "; last answer: "
        /// The provider's last answer (`good`, `nochg`, `badauth`, ...), or `none`.
        last_answer: Text<'a>, "; "
        /// `up to date`, `update pending`, `next try in N s` or `stopped by WORD until the
        /// settings change`.
        state: Text<'a>, ""
    }
}

status_line! {
    /// The public IPv4 address and the outside check (the board, with `public_ip_url`,
    /// `reach_check_url` or dyndns2 set).
    Reach<'a> = "status: reach public IPv4 " {
        /// The public address as last learned, or `-`.
        public: Text<'a>, " from "
        /// Who said so (`echo`, `PCP`, `NAT-PMP`, `UPnP IGD`), or `-`.
        source: Text<'a>, "; echo asked "
        /// Echo requests sent.
        echoes: u32, ", answered "
        /// Echo requests answered with a public address.
        echoes_answered: u32, "; outside check: "
        /// `unchecked`, `reachable` or `failed`.
        check: Text<'a>, ""
    }
}

status_line! {
    /// The clock is set (the board).
    ClockSet = "status: clock set, Unix time " {
        /// Seconds since 1970.
        unix: u64, ", from a stratum "
        /// The stratum of the server it came from.
        stratum: u8, " server "
        /// Seconds since that answer.
        ago: u64, " s ago"
    }
}

status_line! {
    /// The clock is not set yet (the board).
    ClockUnset = "status: clock not set yet (" {
        /// Time servers known.
        servers: usize, " time servers known); no Date on responses"
    }
}

status_line! {
    /// No clock is kept (the board).
    ClockOff = "status: clock off" {}
}

status_line! {
    /// HTTPS was asked for and is not served (the board).
    HttpsNotStarted<'a> = "status: https not started: " {
        /// Why.
        reason: Text<'a>, "; plain HTTP is served"
    }
}

status_line! {
    /// HTTPS handshakes and their costs (board and hosted).
    Https<'a> = "status: https open " {
        /// HTTPS connections open now.
        open: usize, ", handshakes full "
        /// Full handshakes completed.
        full: u64, " resumed "
        /// Resumed handshakes completed.
        resumed: u64, ", h2 "
        /// Connections that negotiated HTTP/2 (ALPN `h2`).
        h2: u64, ", failures "
        /// Handshakes that failed.
        failures: u64, ", deferred "
        /// Handshakes deferred for the budget.
        deferred: u64, ", heap "
        /// The TLS heap's use (`N B in use, N B at most, of N B`), or why it is not known.
        heap: Text<'a>, "; certificate "
        /// The certificate's state against the clock.
        certificate: Text<'a>, "; closed for memory "
        /// Sessions closed because their buffers could not grow.
        closed_for_memory: u64, "; refused not TLS "
        /// Connections reset for bytes that are not TLS.
        refused_not_tls: u64, "; priced P-256 "
        /// Handshakes priced at P-256's cost.
        priced_p256: u64, ", handshake work "
        /// Handshake work charged, millions of instructions.
        work_millions: u64, " M instructions; idle sessions suspended "
        /// Idle sessions suspended (their slot given back), so far.
        suspended: u64, " now "
        /// Idle sessions suspended now.
        suspended_now: u32, "; h2 idle suspensions "
        /// Of the suspensions, idle HTTP/2 connections' (a compact state kept).
        h2_suspended: u64, ", resumptions "
        /// Suspended HTTP/2 connections carried on.
        h2_resumed: u64, ", closed for room "
        /// Idle HTTP/2 connections ended because their state would pass its bound.
        h2_closed_for_room: u64, ", parked state "
        /// Heap the suspended HTTP/2 connections' compact states hold now.
        h2_parked_bytes: usize, " B"
    }
}

status_line! {
    /// The HTTPS connection pool's counters, as the pool writes them (board and hosted,
    /// with HTTPS running).
    HttpsConnections<'a> = "status: https connections " {
        /// The pool's own summary.
        pool: Text<'a>, ""
    }
}

status_line! {
    /// The port mapping on the home router, as the mapper reports it (the board, unless
    /// `router_ports = off`).
    Router<'a> = "status: router " {
        /// The mapper's own report: mapping, protocol, lifetime, outside address, warning
        /// (then the IPv6 pinholes').
        report: Text<'a>, "; rounds "
        /// Rounds of mapping completed (the first and each renewal).
        rounds: u32, ", router restarts "
        /// Times the router was seen to have lost the mappings (announced, or found by a
        /// reply's epoch, a renewal's included).
        restarts: u32, ", protocol changes "
        /// Rounds completed by another protocol than the round before.
        protocol_changes: u32, ""
    }
}

status_line! {
    /// The ACME client (the board, with `acme` set).
    Acme<'a> = "status: acme " {
        /// Where the client stands.
        phase: Text<'a>, ", certificate ends at Unix time "
        /// The certificate's end, or `(none yet)`.
        not_after: Text<'a>, ", next order in "
        /// The time to the next order (`N s`), or `-`.
        next_order_in: Text<'a>, ", orders "
        /// Orders placed.
        orders: u32, ", issued "
        /// Certificates issued.
        issued: u32, " ("
        /// Of them, not valid by the clock.
        issued_invalid: u32, " not valid by the clock), saves "
        /// Certificates saved to the card.
        saves: u32, " ("
        /// Saves the daily cap refused.
        saves_refused: u32, " refused by the daily cap), accounts made "
        /// Accounts made.
        accounts: u32, "; over boots: last certificate "
        /// Time since the last certificate was obtained, this boot or before (`N s ago`),
        /// or `-`.
        since_last_issue: Text<'a>, ", saves in 24 h "
        /// Card saves in the last 24 hours, this boot's and earlier boots'.
        saves_in_day: u32, ", accounts in 24 h "
        /// Accounts made in the last 24 hours, this boot's and earlier boots'.
        accounts_in_day: u32, ", history "
        /// What the store kept of earlier boots: `none`, `kept`, `a save cut off`, or
        /// `waiting for the clock`.
        history: Text<'a>, ", failures in a row "
        /// Failures since the last success.
        failures: u32, ", last error: "
        /// The last error, or `none`.
        last_error: Text<'a>, ""
    }
}

status_line! {
    /// The USB network device and its receive transfers (the board).
    Usb<'a> = "status: usb " {
        /// The device's kind.
        kind: Text<'a>, ", losses "
        /// Times the device was lost.
        losses: u32, ", re-probes "
        /// Re-probes tried.
        reprobes: u32, " ("
        /// Re-probes that found it.
        reprobes_found: u32, " found it), last probe error "
        /// The last probe's error.
        last_probe_error: Text<'a>, ", quiet receive attempts "
        /// Receive attempts that found nothing.
        quiet_receive_attempts: u32, ", receive transfers "
        /// Receive transfers completed.
        receive_transfers: u32, " (waited "
        /// Of them, waited for.
        waited: u32, ", "
        /// Time waited.
        wait_us: u64, " us; waits under 50/100/150/250/500/1000/10000 us, longer: "
        /// The waits' histogram.
        wait_histogram: Text<'a>, ")"
    }
}

status_line! {
    /// The network chip's own counters since it was last probed (the board).
    Nic = "status: nic rx frames " {
        /// Frames received.
        rx_frames: u32, ", rx dropped "
        /// Frames the chip flagged bad, or malformed.
        rx_dropped: u32, " (flagged bad or malformed), rx transfer errors "
        /// Receive transfers that failed.
        rx_transfer_errors: u32, ", tx frames "
        /// Frames sent.
        tx_frames: u32, ", tx transfer errors "
        /// Send transfers that failed.
        tx_transfer_errors: u32, ""
    }
}
