//! Status LED patterns: what the ACT LED shows for each state of the appliance, as a
//! sequence of on/off steps driven by the main loop's clock. The board only switches the pin.
//!
//! Each stage that can fail on a first boot has its own number of short flashes every two
//! seconds, so that a board without a serial adapter still says where it stopped (the table
//! is in doc/first-boot.md): 1 serving, 2 no address yet, 3 no site, 4 no card, 5 no USB
//! network adapter, 6 no link, 7 no clock (HTTPS or ACME needs the time), 8 HTTPS not
//! running. [`LedState::for_progress`] picks the first stage not reached.

/// What the LED says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedState {
    /// Serving: one short flash every two seconds.
    Serving,
    /// The link is up but there is no address yet (no DHCP answer): two flashes.
    NoNetwork,
    /// The card was read but has no valid site: three flashes.
    NoSite,
    /// No card, or the card did not initialise: four flashes.
    NoCard,
    /// No USB network adapter was found (or the USB controller failed): five flashes.
    NoUsb,
    /// The network adapter is there but its link is down (no cable, no switch): six flashes.
    NoLink,
    /// Serving, but the clock is not set and HTTPS or ACME needs it: seven flashes.
    NoClock,
    /// Serving plain HTTP, but HTTPS was asked for and does not run: eight flashes.
    NoHttps,
}

/// What the appliance has reached, for [`LedState::for_progress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The card initialised.
    pub card: bool,
    /// SITE.BIN is on it and its index verified.
    pub site: bool,
    /// A USB network adapter is there.
    pub usb: bool,
    /// Its link is up.
    pub link: bool,
    /// The appliance has an IPv4 address.
    pub address: bool,
    /// HTTPS or ACME is configured, so the time matters.
    pub clock_needed: bool,
    /// The clock is set.
    pub clock: bool,
    /// HTTPS is configured.
    pub https_wanted: bool,
    /// HTTPS runs.
    pub https: bool,
}

impl LedState {
    /// Short flashes per period.
    pub const fn flashes(self) -> u32 {
        match self {
            LedState::Serving => 1,
            LedState::NoNetwork => 2,
            LedState::NoSite => 3,
            LedState::NoCard => 4,
            LedState::NoUsb => 5,
            LedState::NoLink => 6,
            LedState::NoClock => 7,
            LedState::NoHttps => 8,
        }
    }

    /// The time from one group of flashes to the next, in milliseconds: [`PERIOD_MILLIS`],
    /// or longer for the states with many flashes.
    pub const fn period_millis(self) -> u64 {
        let flashes = self.flashes() as u64;
        let group = flashes * FLASH_MILLIS + (flashes - 1) * GAP_MILLIS;
        if group + DARK_MILLIS > PERIOD_MILLIS {
            group + DARK_MILLIS
        } else {
            PERIOD_MILLIS
        }
    }

    /// Every state, in flash order.
    pub const ALL: [LedState; 8] = [
        LedState::Serving,
        LedState::NoNetwork,
        LedState::NoSite,
        LedState::NoCard,
        LedState::NoUsb,
        LedState::NoLink,
        LedState::NoClock,
        LedState::NoHttps,
    ];

    /// The first stage of a boot not reached, in boot order (card, site, USB, link, address,
    /// clock, HTTPS), or [`LedState::Serving`].
    pub const fn for_progress(progress: Progress) -> LedState {
        if !progress.card {
            LedState::NoCard
        } else if !progress.site {
            LedState::NoSite
        } else if !progress.usb {
            LedState::NoUsb
        } else if !progress.link {
            LedState::NoLink
        } else if !progress.address {
            LedState::NoNetwork
        } else if progress.clock_needed && !progress.clock {
            LedState::NoClock
        } else if progress.https_wanted && !progress.https {
            LedState::NoHttps
        } else {
            LedState::Serving
        }
    }
}

/// Length of one flash, in milliseconds.
pub const FLASH_MILLIS: u64 = 60;
/// Dark time between the flashes of one group, in milliseconds.
pub const GAP_MILLIS: u64 = 200;
/// Every pattern repeats after this long, in milliseconds, unless its flashes need a longer
/// period to leave [`DARK_MILLIS`] after them.
pub const PERIOD_MILLIS: u64 = 2_000;
/// The least dark time between two groups of flashes, in milliseconds: clearly longer than
/// the gaps inside a group, so that the flashes can be counted.
pub const DARK_MILLIS: u64 = 1_000;

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
            self.state.period_millis()
                - flashes as u64 * FLASH_MILLIS
                - (flashes as u64 - 1) * GAP_MILLIS
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
        let changes = run(&mut pattern, 0, 3 * state.period_millis());
        let ons = changes
            .iter()
            .filter(|(at, on)| *on && *at < state.period_millis() * 1000)
            .count();
        (ons, changes)
    }

    #[test]
    fn each_state_has_its_own_number_of_flashes() {
        for (index, state) in LedState::ALL.iter().enumerate() {
            assert_eq!(flashes_per_period(*state).0, index + 1, "{state:?}");
        }
    }

    #[test]
    fn the_first_stage_not_reached_is_shown() {
        let all = Progress {
            card: true,
            site: true,
            usb: true,
            link: true,
            address: true,
            clock_needed: true,
            clock: true,
            https_wanted: true,
            https: true,
        };
        assert_eq!(LedState::for_progress(all), LedState::Serving);
        assert_eq!(
            LedState::for_progress(Progress::default()),
            LedState::NoCard
        );
        let without = |change: fn(&mut Progress)| {
            let mut progress = all;
            change(&mut progress);
            LedState::for_progress(progress)
        };
        assert_eq!(without(|p| p.site = false), LedState::NoSite);
        assert_eq!(without(|p| p.usb = false), LedState::NoUsb);
        assert_eq!(without(|p| p.link = false), LedState::NoLink);
        assert_eq!(without(|p| p.address = false), LedState::NoNetwork);
        assert_eq!(without(|p| p.clock = false), LedState::NoClock);
        assert_eq!(without(|p| p.https = false), LedState::NoHttps);
        // Without HTTPS or ACME configured, neither the clock nor HTTPS matters.
        let plain = Progress {
            clock_needed: false,
            clock: false,
            https_wanted: false,
            https: false,
            ..all
        };
        assert_eq!(LedState::for_progress(plain), LedState::Serving);
        // An earlier stage wins: no link and no address shows the link.
        assert_eq!(
            without(|p| {
                p.link = false;
                p.address = false
            }),
            LedState::NoLink
        );
    }

    #[test]
    fn patterns_repeat_every_period_with_short_flashes() {
        for state in LedState::ALL {
            let (_, changes) = flashes_per_period(state);
            let starts: Vec<u64> = changes
                .iter()
                .filter(|(_, on)| *on)
                .map(|(at, _)| *at)
                .collect();
            let per = state.flashes() as usize;
            assert_eq!(starts.len(), 3 * per, "{state:?}: {changes:?}");
            for (i, start) in starts.iter().enumerate().skip(per) {
                assert_eq!(
                    start - starts[i - per],
                    state.period_millis() * 1000,
                    "{state:?}"
                );
            }
            // The dark time between groups is at least DARK_MILLIS, and longer than a gap.
            for group in starts.chunks(per).collect::<Vec<_>>().windows(2) {
                let last_flash_ends = group[0][per - 1] + FLASH_MILLIS * 1000;
                assert!(
                    group[1][0] - last_flash_ends >= DARK_MILLIS * 1000,
                    "{state:?}"
                );
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
