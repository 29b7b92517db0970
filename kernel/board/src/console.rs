//! The serial console: the `log` backend, and a small command line for the operator.
//!
//! Every log line carries seconds.microseconds since reset, and the UTC time once SNTP has
//! set the clock (so the access log shows real times). Lines are written with IRQs masked,
//! so a line from an interrupt handler never lands inside another.
//! Received bytes arrive by interrupt into a ring buffer; the main loop reads whole lines.

use crate::platform::{CONSOLE, TIMER};
use bramble_boot::cpu;
use bramble_proto::syslog::{self, Kind, Line, LineSource, LogRing};
use core::fmt::Write;
use core::sync::atomic::{AtomicUsize, Ordering};

/// The last log lines (about 60 KiB), for the `log` command and the syslog sender.
static mut LOG_RING: LogRing = LogRing::new();

/// The log ring as the syslog sender reads it: copies taken with IRQs masked.
pub struct RingSource;

/// The one [`RingSource`].
pub static RING_SOURCE: RingSource = RingSource;

impl LineSource for RingSource {
    fn next_sequence(&self) -> u64 {
        // SAFETY: read with IRQs masked, so no logger call runs meanwhile (one core).
        cpu::without_interrupts(|| unsafe { &*core::ptr::addr_of!(LOG_RING) }.next_sequence())
    }

    fn copy_line(&self, sequence: u64) -> Result<Line, u64> {
        cpu::without_interrupts(|| {
            // SAFETY: as above.
            let ring = unsafe { &*core::ptr::addr_of!(LOG_RING) };
            ring.get(sequence).copied().ok_or(ring.oldest_sequence())
        })
    }
}

/// The `log` command: prints the lines the ring keeps, oldest first, with the time each
/// was logged (straight to the UART: printing them through the logger would add them again).
pub fn print_ring() {
    let next = RING_SOURCE.next_sequence();
    let mut sequence = next.saturating_sub(syslog::RING_LINES as u64);
    let _ = writeln!(
        ConsoleWriter,
        "--- log: the last {} of {} lines since boot ---",
        next - sequence,
        next
    );
    while sequence < next {
        if let Ok(line) = RING_SOURCE.copy_line(sequence) {
            let _ = writeln!(
                ConsoleWriter,
                "[{:>5}.{:06}] {}",
                line.micros / 1_000_000,
                line.micros % 1_000_000,
                line.text()
            );
        }
        sequence += 1;
    }
    let _ = writeln!(ConsoleWriter, "--- end of log ---");
}

struct SerialLogger;

static LOGGER: SerialLogger = SerialLogger;

impl log::Log for SerialLogger {
    fn enabled(&self, _metadata: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        let micros = TIMER.micros();
        let wall = bramble_tls::clock::CLOCK.try_unix_seconds();
        cpu::without_interrupts(|| {
            let mut console = ConsoleWriter;
            let _ = write!(
                console,
                "[{:>5}.{:06}",
                micros / 1_000_000,
                micros % 1_000_000
            );
            if let Some(unix) = wall {
                let time = bramble_hal::calendar::UtcDateTime::from_unix_seconds(unix);
                let _ = write!(
                    console,
                    " {:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                    time.date.year,
                    time.date.month,
                    time.date.day,
                    time.hour,
                    time.minute,
                    time.second
                );
            }
            let _ = writeln!(console, "] {:<5} {}", record.level(), record.args());
            let kind = if record.target() == "bramble_http::access" {
                Kind::Access
            } else {
                Kind::Event
            };
            // SAFETY: the ring is only touched with IRQs masked, on the one core.
            unsafe { &mut *core::ptr::addr_of_mut!(LOG_RING) }.push(
                micros,
                wall,
                syslog::severity(record.level()),
                kind,
                *record.args(),
            );
        });
    }

    fn flush(&self) {
        CONSOLE.flush();
    }
}

/// Writes straight to the UART; used by the logger and the fault handlers.
pub struct ConsoleWriter;

impl Write for ConsoleWriter {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        CONSOLE.write_bytes(s.as_bytes());
        Ok(())
    }
}

/// Routes the `log` facade to the serial console.
pub fn init_logger() {
    // A second call only fails because a logger is already set, which is fine.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Info);
}

const RING: usize = 256;
static mut RECEIVED: [u8; RING] = [0; RING];
/// Bytes written by the interrupt handler (monotonic, wraps).
static HEAD: AtomicUsize = AtomicUsize::new(0);
/// Bytes consumed by the main loop (monotonic, wraps).
static TAIL: AtomicUsize = AtomicUsize::new(0);

/// UART interrupt: moves received bytes into the ring (dropping them when it is full).
pub fn on_uart_interrupt() {
    CONSOLE.clear_interrupts();
    while let Some(byte) = CONSOLE.read_byte() {
        let head = HEAD.load(Ordering::Relaxed);
        if head.wrapping_sub(TAIL.load(Ordering::Acquire)) < RING {
            // SAFETY: only this handler writes the ring, at slots the reader has released.
            unsafe { (*core::ptr::addr_of_mut!(RECEIVED))[head % RING] = byte };
            HEAD.store(head.wrapping_add(1), Ordering::Release);
        }
    }
}

/// Accumulates received bytes into command lines.
pub struct LineReader {
    line: heapless::Vec<u8, 64>,
}

impl LineReader {
    /// An empty reader.
    pub const fn new() -> Self {
        Self {
            line: heapless::Vec::new(),
        }
    }

    /// Whether received bytes are waiting.
    pub fn pending() -> bool {
        HEAD.load(Ordering::Acquire) != TAIL.load(Ordering::Relaxed)
    }

    /// Consumes waiting bytes; calls `on_line` for every complete line (without its ending).
    pub fn poll(&mut self, mut on_line: impl FnMut(&str)) {
        loop {
            let tail = TAIL.load(Ordering::Relaxed);
            if tail == HEAD.load(Ordering::Acquire) {
                return;
            }
            // SAFETY: the slot at `tail` was published by the handler (HEAD is past it) and
            // is not rewritten until TAIL moves on.
            let byte = unsafe { (*core::ptr::addr_of!(RECEIVED))[tail % RING] };
            TAIL.store(tail.wrapping_add(1), Ordering::Release);
            match byte {
                b'\r' | b'\n' => {
                    if !self.line.is_empty() {
                        on_line(core::str::from_utf8(&self.line).unwrap_or(""));
                        self.line.clear();
                    }
                }
                // A line longer than the buffer is dropped whole rather than misread.
                _ if self.line.push(byte).is_err() => self.line.clear(),
                _ => {}
            }
        }
    }
}
