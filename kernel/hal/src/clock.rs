//! A monotonic microsecond clock.

/// Microseconds since an arbitrary, fixed origin (on the Pi: since the SoC came out of reset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The instant `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Self(micros)
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Milliseconds since the origin, rounded down.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1000
    }

    /// Microseconds from `earlier` to `self`, zero if `earlier` is later.
    pub const fn micros_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// This instant plus `micros` microseconds.
    pub const fn add_micros(self, micros: u64) -> Self {
        Self(self.0.saturating_add(micros))
    }
}

/// A source of monotonic time. Never goes backwards.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let a = Instant::from_micros(5_000);
        let b = a.add_micros(1_500);
        assert_eq!(b.micros_since(a), 1_500);
        assert_eq!(a.micros_since(b), 0);
        assert_eq!(b.as_millis(), 6);
        assert_eq!(Instant(u64::MAX).add_micros(1), Instant(u64::MAX));
    }
}
