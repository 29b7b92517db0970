//! Status LED patterns: what the ACT LED shows for each state of the appliance, as a
//! sequence of on/off steps driven by the main loop's clock. The board only switches the pin.

/// What the LED says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedState {
    /// Serving: one short flash every two seconds.
    Serving,
    /// Site loaded but no address yet or no NIC: two flashes every two seconds.
    NoNetwork,
    /// No valid site on the card: three flashes every two seconds.
    NoSite,
}

impl LedState {
    /// Short flashes per period.
    pub const fn flashes(self) -> u32 {
        match self {
            LedState::Serving => 1,
            LedState::NoNetwork => 2,
            LedState::NoSite => 3,
        }
    }
}

/// Length of one flash, in milliseconds.
pub const FLASH_MILLIS: u64 = 60;
/// Dark time between the flashes of one group, in milliseconds.
pub const GAP_MILLIS: u64 = 200;
/// Every pattern repeats after this long, in milliseconds.
pub const PERIOD_MILLIS: u64 = 2_000;

/// One change of the LED asked for by [`LedPattern::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedStep {
    /// Drive the LED on (`true`) or off now.
    pub on: bool,
    /// When the next change is due, in microseconds on the caller's clock.
    pub next_change: u64,
}

/// The pattern sequencer: a state, the position in its pattern and when it changes next.
#[derive(Clone, Debug)]
pub struct LedPattern {
    enabled: bool,
    state: LedState,
    step: u32,
    next_change: u64,
}

impl LedPattern {
    /// A pattern starting in [`LedState::NoNetwork`]; `enabled = false` keeps the LED dark
    /// (BRAMBLE.TXT `led = off`).
    pub const fn new(enabled: bool) -> Self {
        LedPattern {
            enabled,
            state: LedState::NoNetwork,
            step: 0,
            next_change: 0,
        }
    }

    /// The state shown.
    pub const fn state(&self) -> LedState {
        self.state
    }

    /// Switches to `state`, restarting its pattern at the next poll if it changed.
    pub fn show(&mut self, state: LedState) {
        if state != self.state {
            self.state = state;
            self.step = 0;
            self.next_change = 0;
        }
    }

    /// When the pattern next needs [`LedPattern::poll`] (µs), or `None` when disabled.
    pub const fn next_change(&self) -> Option<u64> {
        if self.enabled {
            Some(self.next_change)
        } else {
            None
        }
    }

    /// Advances the pattern at `now` (µs): the LED change to make now, if one is due.
    pub fn poll(&mut self, now: u64) -> Option<LedStep> {
        if !self.enabled || now < self.next_change {
            return None;
        }
        let flashes = self.state.flashes();
        let last_step = 2 * flashes - 1;
        // Steps: on, off, on, off, ... the last off step is the long dark gap.
        let on = self.step.is_multiple_of(2);
        let millis = if on {
            FLASH_MILLIS
        } else if self.step < last_step {
            GAP_MILLIS
        } else {
            PERIOD_MILLIS - flashes as u64 * FLASH_MILLIS - (flashes as u64 - 1) * GAP_MILLIS
        };
        self.step = if self.step >= last_step {
            0
        } else {
            self.step + 1
        };
        self.next_change = now + millis * 1000;
        Some(LedStep {
            on,
            next_change: self.next_change,
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// Runs the pattern for `millis` from `start` and returns every change: (time µs, on).
    fn run(pattern: &mut LedPattern, start: u64, millis: u64) -> Vec<(u64, bool)> {
        let mut changes = Vec::new();
        let mut now = start;
        while now < start + millis * 1000 {
            if let Some(step) = pattern.poll(now) {
                changes.push((now, step.on));
                now = step.next_change;
            } else {
                now = pattern.next_change().expect("enabled");
            }
        }
        changes
    }

    fn flashes_per_period(state: LedState) -> (usize, Vec<(u64, bool)>) {
        let mut pattern = LedPattern::new(true);
        pattern.show(state);
        let changes = run(&mut pattern, 0, 3 * PERIOD_MILLIS);
        let ons = changes
            .iter()
            .filter(|(at, on)| *on && *at < PERIOD_MILLIS * 1000)
            .count();
        (ons, changes)
    }

    #[test]
    fn each_state_has_its_own_number_of_flashes() {
        assert_eq!(flashes_per_period(LedState::Serving).0, 1);
        assert_eq!(flashes_per_period(LedState::NoNetwork).0, 2);
        assert_eq!(flashes_per_period(LedState::NoSite).0, 3);
    }

    #[test]
    fn patterns_repeat_every_period_with_short_flashes() {
        for state in [LedState::Serving, LedState::NoNetwork, LedState::NoSite] {
            let (_, changes) = flashes_per_period(state);
            let starts: Vec<u64> = changes
                .iter()
                .filter(|(_, on)| *on)
                .map(|(at, _)| *at)
                .collect();
            let per = state.flashes() as usize;
            assert_eq!(starts.len(), 3 * per, "{state:?}: {changes:?}");
            for (i, start) in starts.iter().enumerate().skip(per) {
                assert_eq!(start - starts[i - per], PERIOD_MILLIS * 1000, "{state:?}");
            }
            for pair in changes.windows(2) {
                if pair[0].1 {
                    assert!(!pair[1].1, "on is followed by off");
                    assert_eq!(pair[1].0 - pair[0].0, FLASH_MILLIS * 1000, "{state:?}");
                }
            }
        }
    }

    #[test]
    fn a_disabled_led_never_lights_and_asks_for_no_wake_ups() {
        let mut pattern = LedPattern::new(false);
        pattern.show(LedState::NoSite);
        assert_eq!(pattern.poll(0), None);
        assert_eq!(pattern.poll(10_000_000), None);
        assert_eq!(pattern.next_change(), None);
    }

    #[test]
    fn a_new_state_starts_its_pattern_at_once() {
        let mut pattern = LedPattern::new(true);
        pattern.show(LedState::Serving);
        let first = pattern.poll(0).unwrap();
        assert!(first.on);
        assert_eq!(pattern.poll(1_000), None, "nothing due mid-flash");
        pattern.show(LedState::NoSite);
        let restarted = pattern.poll(1_000).unwrap();
        assert!(restarted.on, "the new pattern begins with a flash");
        assert_eq!(restarted.next_change, 1_000 + FLASH_MILLIS * 1000);
        pattern.show(LedState::NoSite);
        assert_eq!(
            pattern.poll(2_000),
            None,
            "showing the same state changes nothing"
        );
    }
}
