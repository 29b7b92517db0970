//! The wall clock rustls asks for: real time once SNTP has set it, otherwise seconds since
//! boot (enough for ticket ages, which is all a server without client certificates needs).

use pki_types::UnixTime;
use rustls::time_provider::TimeProvider;

#[derive(Clone, Copy)]
struct State {
    /// Microseconds since boot at the last [`WallClock::advance`].
    uptime_micros: u64,
    /// Unix time in microseconds at uptime zero, once known.
    boot_unix_micros: Option<u64>,
}

/// Uptime, plus the Unix time it corresponds to once the clock is set.
#[derive(Debug)]
pub struct WallClock {
    state: spin::Mutex<State>,
}

impl core::fmt::Debug for State {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "uptime {} us, boot at {:?}",
            self.uptime_micros, self.boot_unix_micros
        )
    }
}

impl WallClock {
    /// A clock at uptime zero, not set.
    pub const fn new() -> Self {
        Self {
            state: spin::Mutex::new(State {
                uptime_micros: 0,
                boot_unix_micros: None,
            }),
        }
    }

    /// Moves the clock to `uptime_micros` (the main loop calls this every pass).
    pub fn advance(&self, uptime_micros: u64) {
        let mut state = self.state.lock();
        state.uptime_micros = state.uptime_micros.max(uptime_micros);
    }

    /// Sets the wall clock: at `uptime_micros` it was `unix_micros`.
    pub fn set(&self, unix_micros: u64, uptime_micros: u64) {
        let mut state = self.state.lock();
        state.uptime_micros = state.uptime_micros.max(uptime_micros);
        state.boot_unix_micros = Some(unix_micros.saturating_sub(uptime_micros));
    }

    /// Unix seconds now, if the clock is set.
    pub fn unix_seconds(&self) -> Option<u64> {
        let state = *self.state.lock();
        state
            .boot_unix_micros
            .map(|boot| boot.saturating_add(state.uptime_micros) / 1_000_000)
    }

    /// Unix seconds now, if the clock is set and not being changed this instant: for callers
    /// that may run in an interrupt handler (the console logger), which must not wait on a
    /// lock the interrupted code holds.
    pub fn try_unix_seconds(&self) -> Option<u64> {
        let state = *self.state.try_lock()?;
        state
            .boot_unix_micros
            .map(|boot| boot.saturating_add(state.uptime_micros) / 1_000_000)
    }

    /// Whether the wall clock has been set.
    pub fn is_set(&self) -> bool {
        self.state.lock().boot_unix_micros.is_some()
    }

    /// Seconds since boot.
    pub fn uptime_seconds(&self) -> u64 {
        self.state.lock().uptime_micros / 1_000_000
    }
}

impl Default for WallClock {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeProvider for WallClock {
    fn current_time(&self) -> Option<UnixTime> {
        let seconds = self.unix_seconds().unwrap_or_else(|| self.uptime_seconds());
        Some(UnixTime::since_unix_epoch(core::time::Duration::from_secs(
            seconds,
        )))
    }
}

/// The clock the TLS server reads (the board and hosted loop advance and set it).
pub static CLOCK: WallClock = WallClock::new();

/// A `'static` clock as rustls's time provider.
#[derive(Debug)]
pub struct ClockRef(pub &'static WallClock);

impl TimeProvider for ClockRef {
    fn current_time(&self) -> Option<UnixTime> {
        self.0.current_time()
    }
}
