//! When to order: renewal at two thirds of a certificate's lifetime (or inside the window
//! the CA suggests through ACME Renewal Information, RFC 9773), and exponential back-off after
//! a failure that never retries faster than the CA's limits allow.
//!
//! Bounded issuance ([`Planner`]): renewal times come from the certificate's dates read
//! against the clock, and both can be wrong. SNTP is unauthenticated (a clock a year ahead
//! makes every certificate look expired), and a CA can issue short, back-dated or expired
//! certificates. Without a bound each of these gives issue, save, issue again: the CA's rate
//! limits and the card's wear. So, whatever the clock and the CA say:
//!
//! - no new order within [`IssuancePolicy::min_seconds_between_issues`] (24 h) of the last
//!   certificate obtained while a certificate for these names is served, even when it looks
//!   invalid by the clock (ordering again cannot fix the clock or the CA's dates). With none
//!   served for these names (a first certificate, or `domain` changed) the order is not held;
//!   a certificate obtained more than a day ago that has expired by the clock renews at once;
//! - at most [`IssuancePolicy::max_saves_per_day`] card saves in any 24 hours (a refused
//!   save is made once the window allows; the certificate is served meanwhile), and no order
//!   starts while the cap is full: its certificate could not be kept;
//! - at most [`IssuancePolicy::max_accounts_per_day`] accounts made in any 24 hours (a CA
//!   answering `accountDoesNotExist` to every request would otherwise have one made, and
//!   saved, per order);
//! - the clock is never taken as earlier than [`CLOCK_FLOOR_UNIX`], the build's date: a
//!   clock reset to 1970 or 2000 does not make a stale certificate look valid.
//!
//! Across reboots ([`History`]): a reboot loop (a brown-out on a solar Pi, a watchdog reset)
//! would otherwise give order, save, reboot, order again. So the times of the last
//! certificate obtained, of the recent saves and of the recent accounts go into every save
//! of the certificate store's record (no write of their own: each event that matters is
//! followed by a save anyway, and a save carries its own time), and the next boot takes them
//! up ([`Planner::restore`]) once the clock is set. They are Unix seconds of the floored
//! clock; a time later than the clock (the clock went back) is taken as now, so a clock that
//! goes back cannot free an order early. What a record cannot say:
//!
//! - an empty store (a new card, `certificate_store = ram`, or a record of an older kernel):
//!   no history, nothing holds the first certificate;
//! - a torn or unreadable slot beside the record (a save cut off: perhaps the one that kept
//!   the last certificate): the cut save counts as a save made when its header says it
//!   started (the header is written first; the boot's time when it cannot be read), and no
//!   order starts within [`LOST_SAVE_HOLD_SECONDS`] (an hour) of it ([`Planner::lost_save`]).
//!   A needed certificate waits at most that hour; a card whose every save is cut off gets at
//!   most one order an hour (with the time unknown, each boot waits its hour, so a reboot
//!   loop shorter than that orders nothing). A save that never reached the card at all
//!   leaves no trace: such a card is bounded per boot only.
//!
//! Times here are seconds: `now` of the board's monotonic uptime, `unix_now` of the wall
//! clock (floored).

/// How failures are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// Wait after the first failure, seconds.
    pub first_seconds: u64,
    /// Longest wait, seconds.
    pub max_seconds: u64,
    /// Shortest wait after a failed validation: Let's Encrypt allows 5 failed
    /// authorizations per name and account an hour, so 15 minutes keeps under it.
    pub validation_floor_seconds: u64,
}

impl BackoffPolicy {
    /// The defaults: 1 minute, doubling, at most a day; 15 minutes after a failed challenge.
    /// Never more than 60 orders a day, far below Let's Encrypt's 300 new orders per 3 hours.
    pub const DEFAULT: Self = Self {
        first_seconds: 60,
        max_seconds: 24 * 60 * 60,
        validation_floor_seconds: 15 * 60,
    };
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Failures in a row, and the wait they call for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    policy: BackoffPolicy,
    failures: u32,
}

impl Backoff {
    /// No failures yet.
    pub const fn new(policy: BackoffPolicy) -> Self {
        Self {
            policy,
            failures: 0,
        }
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Counts a failure and returns the seconds to wait before the next try: the policy's
    /// doubling wait, at least the validation floor when `validation_failed`, and at least
    /// the CA's Retry-After.
    pub fn fail(&mut self, validation_failed: bool, retry_after: Option<u64>) -> u64 {
        let shift = self.failures.min(30);
        self.failures = self.failures.saturating_add(1);
        let mut wait = self
            .policy
            .first_seconds
            .max(1)
            .saturating_mul(1u64 << shift)
            .min(self.policy.max_seconds);
        if validation_failed {
            wait = wait.max(self.policy.validation_floor_seconds);
        }
        // A Retry-After beyond the cap is still honoured, up to a week.
        wait.max(retry_after.unwrap_or(0).min(7 * 24 * 60 * 60))
    }

    /// A success: the next failure starts from the first wait again.
    pub fn succeed(&mut self) {
        self.failures = 0;
    }
}

/// The Unix second at which a certificate valid from `not_before` to `not_after` is renewed:
/// two thirds through its lifetime (day 60 of Let's Encrypt's 90).
pub fn renewal_time(not_before: i64, not_after: i64) -> i64 {
    let lifetime = not_after.saturating_sub(not_before).max(0);
    not_before.saturating_add(lifetime / 3 * 2)
}

/// A time inside the CA's suggested window `[start, end)` (RFC 9773 §4.2: pick uniformly at
/// random), from `random` (any 32 bits); the window's start if it is empty or reversed.
pub fn time_in_window(start: i64, end: i64, random: u32) -> i64 {
    let span = end.saturating_sub(start);
    if span <= 0 {
        return start;
    }
    start.saturating_add(((span as u128 * u128::from(random)) >> 32) as i64)
}

/// The earliest the wall clock is taken to be: this source's date (2026-12-01), or
/// `SOURCE_DATE_EPOCH` when the build sets it (and it is later). No build is older, so no
/// clock reading before it is true.
pub const CLOCK_FLOOR_UNIX: i64 = {
    const SOURCE_DATE: i64 = 1_796_083_200;
    match option_env!("SOURCE_DATE_EPOCH") {
        Some(text) => {
            let epoch = parse_decimal(text.as_bytes());
            if epoch > SOURCE_DATE {
                epoch
            } else {
                SOURCE_DATE
            }
        }
        None => SOURCE_DATE,
    }
};

/// A decimal number, 0 if `text` is not one (at build time).
const fn parse_decimal(text: &[u8]) -> i64 {
    let mut value: i64 = 0;
    let mut at = 0;
    if text.is_empty() || text.len() > 12 {
        return 0;
    }
    while at < text.len() {
        let digit = text[at];
        if !digit.is_ascii_digit() {
            return 0;
        }
        value = value * 10 + (digit - b'0') as i64;
        at += 1;
    }
    value
}

/// The clock's Unix seconds, never earlier than [`CLOCK_FLOOR_UNIX`].
pub fn sane_unix_now(clock: i64) -> i64 {
    clock.max(CLOCK_FLOOR_UNIX)
}

/// Whether a certificate valid from `not_before` to `not_after` is valid at `unix_now`.
pub fn valid_at(not_before: i64, not_after: i64, unix_now: i64) -> bool {
    not_before <= unix_now && unix_now < not_after
}

/// The bounds on orders, saves and accounts (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IssuancePolicy {
    /// Shortest time from a certificate obtained to the next order, seconds.
    pub min_seconds_between_issues: u64,
    /// Most card saves in any 24 hours (at most [`MAX_CAP`]).
    pub max_saves_per_day: usize,
    /// Most accounts made in any 24 hours (at most [`MAX_CAP`]).
    pub max_accounts_per_day: usize,
    /// After a save cut off, the shortest time to the next order, seconds.
    pub lost_save_hold_seconds: u64,
}

/// The largest daily cap a [`Planner`] keeps track of, and the events of each kind a
/// [`History`] keeps.
pub const MAX_CAP: usize = 8;

/// After a save that was cut off, the shortest time to the next order (module docs).
pub const LOST_SAVE_HOLD_SECONDS: u64 = 60 * 60;

const DAY: u64 = 24 * 60 * 60;

impl IssuancePolicy {
    /// A day between certificates; 4 saves a day (an order's account and certificate, twice);
    /// 2 accounts a day.
    pub const DEFAULT: Self = Self {
        min_seconds_between_issues: DAY,
        max_saves_per_day: 4,
        max_accounts_per_day: 2,
        lost_save_hold_seconds: LOST_SAVE_HOLD_SECONDS,
    };

    /// For tests that force renewals one after another (a test's `renew_after_seconds`):
    /// no day between certificates and no hold after a cut-off save, but still the daily
    /// caps at their largest ([`MAX_CAP`] saves, 2 accounts). Never used on the board.
    pub const FORCED_RENEWALS: Self = Self {
        min_seconds_between_issues: 0,
        max_saves_per_day: MAX_CAP,
        max_accounts_per_day: 2,
        lost_save_hold_seconds: 0,
    };
}

impl Default for IssuancePolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// What the bounds remember across boots, in Unix seconds of the floored clock (0: no
/// event); kept in the certificate store's record (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// When the last certificate was obtained.
    pub issued_at: i64,
    /// When the last saves were made, in no particular order.
    pub saves: [i64; MAX_CAP],
    /// When the last accounts were made, in no particular order.
    pub accounts: [i64; MAX_CAP],
}

impl History {
    /// Bytes of [`History::encode`]'s output.
    pub const ENCODED_LEN: usize = 8 * (1 + 2 * MAX_CAP);

    /// The history as little-endian times: the last certificate's, the saves', the accounts'.
    pub fn encode(&self, out: &mut alloc::vec::Vec<u8>) {
        out.extend_from_slice(&self.issued_at.to_le_bytes());
        for time in self.saves.iter().chain(self.accounts.iter()) {
            out.extend_from_slice(&time.to_le_bytes());
        }
    }

    /// Reads [`History::ENCODED_LEN`] bytes as [`History::encode`] wrote them; `None` for
    /// any other length. Any times are accepted: the planner judges them against the clock.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::ENCODED_LEN {
            return None;
        }
        let mut times = bytes
            .chunks_exact(8)
            .map(|chunk| i64::from_le_bytes(chunk.try_into().unwrap_or_default()));
        let mut history = Self {
            issued_at: times.next()?,
            ..Self::default()
        };
        for slot in history.saves.iter_mut().chain(history.accounts.iter_mut()) {
            *slot = times.next()?;
        }
        Some(history)
    }

    /// The latest save it records (0: none).
    pub fn last_save(&self) -> i64 {
        self.saves.iter().copied().max().unwrap_or(0).max(0)
    }

    /// Whether it records nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The times of the last few events (uptime seconds, negative before this boot), to count
/// those of the last 24 hours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DayWindow {
    times: [Option<i64>; MAX_CAP],
}

impl DayWindow {
    /// Events in the 24 hours before `now`.
    fn count(&self, now: i64) -> usize {
        self.times
            .iter()
            .flatten()
            .filter(|&&at| now < at.saturating_add(DAY as i64))
            .count()
    }

    /// When the oldest event of the last 24 hours leaves the window.
    fn frees_at(&self, now: i64) -> i64 {
        self.times
            .iter()
            .flatten()
            .filter(|&&at| now < at.saturating_add(DAY as i64))
            .map(|&at| at.saturating_add(DAY as i64))
            .min()
            .unwrap_or(now)
    }

    /// Records an event, in place of the oldest when full.
    fn record(&mut self, at: i64) {
        if let Some(free) = self.times.iter_mut().find(|time| time.is_none()) {
            *free = Some(at);
            return;
        }
        if let Some(oldest) = self
            .times
            .iter_mut()
            .min_by_key(|time| time.unwrap_or(i64::MIN))
        {
            *oldest = Some(at);
        }
    }
}

/// Where the bounds stand, and what they counted (for the status line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planner {
    policy: IssuancePolicy,
    /// When the last certificate was obtained (uptime seconds; negative: before this boot).
    last_issue: Option<i64>,
    /// No order before this (uptime seconds): the hold after a save cut off.
    hold_until: Option<i64>,
    saves: DayWindow,
    accounts: DayWindow,
    /// Saves made.
    pub saves_made: u32,
    /// Saves refused by the daily cap.
    pub saves_refused: u32,
    /// Accounts made.
    pub accounts_made: u32,
    /// Certificates obtained that were not valid by the clock when they arrived.
    pub issued_invalid: u32,
}

/// Uptime seconds as the planner's signed time.
fn signed(now: u64) -> i64 {
    i64::try_from(now).unwrap_or(i64::MAX)
}

/// A signed uptime back to uptime seconds (0 for times before boot).
fn unsigned(at: i64) -> u64 {
    u64::try_from(at).unwrap_or(0)
}

impl Planner {
    /// Nothing obtained or saved yet.
    pub fn new(policy: IssuancePolicy) -> Self {
        let policy = IssuancePolicy {
            max_saves_per_day: policy.max_saves_per_day.clamp(1, MAX_CAP),
            max_accounts_per_day: policy.max_accounts_per_day.clamp(1, MAX_CAP),
            ..policy
        };
        Self {
            policy,
            last_issue: None,
            hold_until: None,
            saves: DayWindow::default(),
            accounts: DayWindow::default(),
            saves_made: 0,
            saves_refused: 0,
            accounts_made: 0,
            issued_invalid: 0,
        }
    }

    /// The uptime of Unix time `at`, seen at uptime `now` and Unix time `unix_now` (floored):
    /// a time later than the clock is taken as now.
    fn uptime_of(at: i64, now: u64, unix_now: i64) -> i64 {
        let ago = sane_unix_now(unix_now).saturating_sub(at).max(0);
        signed(now).saturating_sub(ago)
    }

    /// The Unix time of uptime `at`, seen at uptime `now` and Unix time `unix_now`.
    fn unix_of(at: i64, now: u64, unix_now: i64) -> i64 {
        let ago = signed(now).saturating_sub(at).max(0);
        sane_unix_now(unix_now).saturating_sub(ago)
    }

    /// Takes up the history a record kept (at boot, once the clock is set: `now` uptime,
    /// `unix_now` Unix seconds). Times at or before 0 are no events.
    pub fn restore(&mut self, history: &History, now: u64, unix_now: i64) {
        if history.issued_at > 0 {
            let at = Self::uptime_of(history.issued_at, now, unix_now);
            self.last_issue = Some(self.last_issue.map_or(at, |last| last.max(at)));
        }
        for (times, window) in [
            (&history.saves, &mut self.saves),
            (&history.accounts, &mut self.accounts),
        ] {
            let mut times = *times;
            times.sort_unstable();
            for &time in times.iter().filter(|&&time| time > 0) {
                window.record(Self::uptime_of(time, now, unix_now));
            }
        }
    }

    /// A save was cut off (a torn or unreadable slot): it counts as a save made at `at` (Unix
    /// seconds its header gives; `None`: now), and no order starts within
    /// [`LOST_SAVE_HOLD_SECONDS`] of it.
    pub fn lost_save(&mut self, at: Option<i64>, now: u64, unix_now: i64) {
        let at = at.map_or(signed(now), |at| Self::uptime_of(at, now, unix_now));
        self.saves.record(at);
        let until = at.saturating_add(signed(self.policy.lost_save_hold_seconds));
        self.hold_until = Some(self.hold_until.map_or(until, |held| held.max(until)));
    }

    /// What to keep across boots, seen at uptime `now` and Unix time `unix_now`.
    pub fn history(&self, now: u64, unix_now: i64) -> History {
        let unix = |at: i64| Self::unix_of(at, now, unix_now);
        let mut history = History {
            issued_at: self.last_issue.map_or(0, unix),
            ..History::default()
        };
        for (window, out) in [
            (&self.saves, &mut history.saves),
            (&self.accounts, &mut history.accounts),
        ] {
            for (slot, time) in out.iter_mut().zip(window.times.iter()) {
                *slot = time.map_or(0, unix);
            }
        }
        history
    }

    /// When (uptime seconds) the next order may start: at `renew_at` (Unix seconds of the
    /// renewal of the certificate served for these names; `None`: none is, so now), but
    /// never within a day of the last certificate obtained while one is served, never
    /// within the hold after a save cut off, never while the daily save cap is full, and,
    /// when the order has to make an account (`needs_account`), not before the daily account
    /// cap allows.
    pub fn next_order(
        &self,
        now: u64,
        unix_now: i64,
        renew_at: Option<i64>,
        needs_account: bool,
    ) -> u64 {
        let at = signed(now);
        let planned = match renew_at {
            Some(renew) => at.saturating_add(renew.saturating_sub(unix_now).max(0)),
            None => at,
        };
        let mut earliest = match (renew_at, self.last_issue) {
            (Some(_), Some(issued)) => {
                issued.saturating_add(signed(self.policy.min_seconds_between_issues))
            }
            _ => i64::MIN,
        };
        earliest = earliest.max(self.hold_until.unwrap_or(i64::MIN));
        if self.saves.count(at) >= self.policy.max_saves_per_day {
            earliest = earliest.max(self.saves.frees_at(at));
        }
        if needs_account && !self.may_make_account(now) {
            earliest = earliest.max(self.accounts.frees_at(at));
        }
        unsigned(planned.max(earliest).max(at))
    }

    /// Whether the daily account cap allows making (or re-making) an account now.
    pub fn may_make_account(&self, now: u64) -> bool {
        self.accounts.count(signed(now)) < self.policy.max_accounts_per_day
    }

    /// The CA made an account.
    pub fn account_made(&mut self, now: u64) {
        self.accounts.record(signed(now));
        self.accounts_made = self.accounts_made.saturating_add(1);
    }

    /// A certificate valid from `not_before` to `not_after` was obtained (and is served):
    /// returns whether it is valid by the clock (`unix_now`, floored).
    pub fn issued(&mut self, now: u64, unix_now: i64, not_before: i64, not_after: i64) -> bool {
        self.last_issue = Some(signed(now));
        let valid = valid_at(not_before, not_after, sane_unix_now(unix_now));
        if !valid {
            self.issued_invalid = self.issued_invalid.saturating_add(1);
        }
        valid
    }

    /// Whether a save may be made now; counts it if so, and the refusal if not.
    pub fn take_save(&mut self, now: u64) -> bool {
        if self.saves.count(signed(now)) >= self.policy.max_saves_per_day {
            self.saves_refused = self.saves_refused.saturating_add(1);
            return false;
        }
        self.saves.record(signed(now));
        self.saves_made = self.saves_made.saturating_add(1);
        true
    }

    /// When (uptime seconds) a refused save may be made.
    pub fn save_allowed_at(&self, now: u64) -> u64 {
        let at = signed(now);
        if self.saves.count(at) < self.policy.max_saves_per_day {
            now
        } else {
            unsigned(self.saves.frees_at(at))
        }
    }

    /// Saves in the 24 hours before `now`, this boot's and those the history kept.
    pub fn saves_in_day(&self, now: u64) -> u32 {
        self.saves.count(signed(now)) as u32
    }

    /// Accounts made in the 24 hours before `now`, this boot's and those the history kept.
    pub fn accounts_in_day(&self, now: u64) -> u32 {
        self.accounts.count(signed(now)) as u32
    }

    /// Seconds since the last certificate was obtained, in this boot or before it.
    pub fn since_last_issue(&self, now: u64) -> Option<u64> {
        self.last_issue
            .map(|at| unsigned(signed(now).saturating_sub(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn doubles_to_a_cap_and_honours_floors() {
        let mut backoff = Backoff::new(BackoffPolicy::DEFAULT);
        let waits: alloc::vec::Vec<u64> = (0..13).map(|_| backoff.fail(false, None)).collect();
        assert_eq!(&waits[..5], &[60, 120, 240, 480, 960]);
        assert_eq!(*waits.last().unwrap(), 24 * 60 * 60);
        backoff.succeed();
        assert_eq!(backoff.fail(true, None), 15 * 60);
        assert_eq!(backoff.fail(false, Some(3600)), 3600);
        let mut backoff = Backoff::new(BackoffPolicy::DEFAULT);
        for _ in 0..200 {
            assert!(backoff.fail(false, None) <= 24 * 60 * 60);
        }
    }

    #[test]
    fn failed_validations_stay_under_five_an_hour() {
        let mut backoff = Backoff::new(BackoffPolicy::DEFAULT);
        let mut at = 0u64;
        let mut tries = alloc::vec![0u64];
        for _ in 0..20 {
            at += backoff.fail(true, None);
            tries.push(at);
        }
        for (i, &start) in tries.iter().enumerate() {
            let in_hour = tries[i..].iter().take_while(|&&t| t < start + 3600).count();
            assert!(in_hour <= 5, "{in_hour} tries within an hour of {start}");
        }
    }

    #[test]
    fn renews_at_two_thirds() {
        let day = 86_400;
        assert_eq!(renewal_time(0, 90 * day), 60 * day);
        assert_eq!(renewal_time(1_000, 1_000), 1_000);
        assert_eq!(renewal_time(1_000, 10), 1_000);
        assert_eq!(time_in_window(10, 20, 0), 10);
        assert_eq!(time_in_window(10, 20, u32::MAX), 19);
        assert_eq!(time_in_window(20, 10, 5), 20);
    }

    const DAY: i64 = 86_400;
    /// The real time of the simulations: 2027-06-01.
    const REAL: i64 = 1_811_808_000;

    /// What a simulated board does over `days` (in 60 s steps) against a CA whose every
    /// certificate `issue(real_now)` gives the dates of, with the board's clock `skew`
    /// seconds off and every order making an account when `lost_account`. Returns the
    /// orders started and the saves made, and checks that no 24 hours held more than the
    /// caps allow.
    fn simulate(
        days: i64,
        skew: i64,
        lost_account: bool,
        issue: impl Fn(i64) -> (i64, i64),
    ) -> (u32, u32, u32) {
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        let mut served: Option<(i64, i64)> = None;
        let mut next: Option<u64> = None;
        let mut orders = 0;
        let mut order_times = alloc::vec::Vec::new();
        let mut save_times = alloc::vec::Vec::new();
        let mut unsaved = false;
        for step in 0..(days * DAY / 60) as u64 {
            let now = step * 60;
            let real = REAL + now as i64;
            let unix_now = sane_unix_now(real + skew);
            if unsaved && planner.save_allowed_at(now) <= now && planner.take_save(now) {
                unsaved = false;
                save_times.push(now);
            }
            let needs_account = lost_account;
            let due = *next.get_or_insert_with(|| {
                planner.next_order(
                    now,
                    unix_now,
                    served.map(|(start, end)| renewal_time(start, end)),
                    needs_account,
                )
            });
            if now < due {
                continue;
            }
            orders += 1;
            order_times.push(now);
            if needs_account {
                assert!(planner.may_make_account(now), "an account beyond the cap");
                planner.account_made(now);
                if planner.take_save(now) {
                    save_times.push(now);
                }
            }
            let (start, end) = issue(real);
            planner.issued(now, unix_now, start, end);
            served = Some((start, end));
            if planner.take_save(now) {
                save_times.push(now);
            } else {
                unsaved = true;
            }
            next = None;
        }
        for times in [&order_times, &save_times] {
            for (i, &start) in times.iter().enumerate() {
                let in_day = times[i..]
                    .iter()
                    .take_while(|&&t| t < start + 86_400)
                    .count();
                assert!(in_day <= 4, "{in_day} within a day of {start}: {times:?}");
            }
        }
        (orders, save_times.len() as u32, planner.accounts_made)
    }

    #[test]
    fn a_clock_a_year_ahead_gives_one_order_a_day() {
        let ninety_days = |real: i64| (real - 3600, real + 90 * DAY);
        // Without the bound: by the clock, every new certificate is due for renewal at once.
        let (start, end) = ninety_days(REAL);
        assert!(renewal_time(start, end) < REAL + 365 * DAY);
        let (orders, saves, _) = simulate(3, 365 * DAY, false, ninety_days);
        assert_eq!((orders, saves), (3, 3));
        // With the right clock: one order in three days.
        assert_eq!(simulate(3, 0, false, ninety_days), (1, 1, 0));
    }

    #[test]
    fn a_ca_issuing_expired_certificates_gets_one_order_a_day() {
        let expired = |real: i64| (real - 100 * DAY, real - 10 * DAY);
        let (orders, saves, _) = simulate(3, 0, false, expired);
        assert_eq!((orders, saves), (3, 3));
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        assert!(!planner.issued(0, REAL, REAL - 100 * DAY, REAL - 10 * DAY));
        assert!(planner.issued(10, REAL, REAL - DAY, REAL + DAY));
        assert_eq!(planner.issued_invalid, 1);
    }

    #[test]
    fn a_ca_that_forgets_the_account_gets_two_accounts_a_day() {
        let ninety_days = |real: i64| (real - 3600, real + 90 * DAY);
        let (orders, saves, accounts) = simulate(3, 365 * DAY, true, ninety_days);
        assert_eq!((orders, accounts), (3, 3));
        assert!(saves <= 6, "{saves}");
        // Orders that each need an account wait for the account cap.
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        planner.account_made(0);
        planner.account_made(100);
        assert!(!planner.may_make_account(200));
        assert_eq!(planner.next_order(200, REAL, None, true), 86_400);
        assert_eq!(planner.next_order(200, REAL, None, false), 200);
    }

    #[test]
    fn saves_beyond_the_daily_cap_are_refused_until_the_window_frees() {
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        for at in 0..4 {
            assert!(planner.take_save(at * 10));
        }
        assert!(!planner.take_save(100));
        assert_eq!(planner.saves_refused, 1);
        assert_eq!(planner.save_allowed_at(100), 86_400);
        assert!(planner.take_save(86_400));
        assert_eq!(planner.saves_made, 5);
    }

    #[test]
    fn no_order_within_a_day_of_a_certificate_but_stored_ones_renew_when_due() {
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        // A stored, expired certificate (nothing obtained in this boot): order at once.
        assert_eq!(planner.next_order(50, REAL, Some(REAL - DAY), false), 50);
        planner.issued(100, REAL, REAL, REAL + 90 * DAY);
        // A renewal time in the past, or a second away, waits for the day to pass.
        assert_eq!(
            planner.next_order(200, REAL, Some(REAL - DAY), false),
            86_500
        );
        assert_eq!(planner.next_order(200, REAL, Some(REAL + 1), false), 86_500);
        // A later renewal time is kept.
        assert_eq!(
            planner.next_order(200, REAL, Some(REAL + 60 * DAY), false),
            200 + 60 * 86_400
        );
    }

    #[test]
    fn the_clock_is_never_taken_as_earlier_than_the_build() {
        assert_eq!(sane_unix_now(0), CLOCK_FLOOR_UNIX);
        assert_eq!(sane_unix_now(CLOCK_FLOOR_UNIX + 5), CLOCK_FLOOR_UNIX + 5);
        // A certificate that ended before the build is expired even to a clock set to 2000.
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        assert!(!planner.issued(0, 946_684_800, 946_000_000, 947_000_000));
        assert_eq!(parse_decimal(b"1796083200"), 1_796_083_200);
        assert_eq!(parse_decimal(b"12x"), 0);
        assert_eq!(parse_decimal(b""), 0);
    }

    /// What the store keeps across boots in [`simulate_reboots`].
    #[derive(Clone, Copy, Default)]
    struct Card {
        history: History,
        certificate: Option<(i64, i64)>,
        /// A save cut off, with the time its header gives.
        torn: Option<Option<i64>>,
    }

    /// A board that boots every `boot_seconds` for `days` (a brown-out or watchdog loop),
    /// each boot with a new planner that takes up what the card kept (when `restore`), the
    /// clock `skew` seconds off, against a CA whose certificates `issue(real_now)` dates;
    /// when `cut_saves`, every certificate save is cut off after its header. Returns the
    /// times (real seconds from the start) of the orders and of the saves that reached the
    /// card.
    fn simulate_reboots(
        days: i64,
        boot_seconds: u64,
        skew: i64,
        restore: bool,
        cut_saves: bool,
        issue: impl Fn(i64) -> (i64, i64),
    ) -> (Vec<i64>, Vec<i64>) {
        let mut card = Card::default();
        let mut orders = Vec::new();
        let mut saves = Vec::new();
        let mut real = 0i64;
        while real < days * DAY {
            let mut planner = Planner::new(IssuancePolicy::DEFAULT);
            let boot_real = real;
            let clock = |real: i64| sane_unix_now(REAL + real + skew);
            if restore {
                planner.restore(&card.history, 0, clock(real));
                if let Some(at) = card.torn {
                    planner.lost_save(at, 0, clock(real));
                }
            }
            let mut served = card.certificate;
            let mut next: Option<u64> = None;
            let mut now = 0u64;
            while now < boot_seconds && real < days * DAY {
                let due = *next.get_or_insert_with(|| {
                    planner.next_order(
                        now,
                        clock(real),
                        served.map(|(start, end)| renewal_time(start, end)),
                        false,
                    )
                });
                if now >= due {
                    orders.push(real);
                    let (start, end) = issue(REAL + real);
                    planner.issued(now, clock(real), start, end);
                    served = Some((start, end));
                    if planner.take_save(now) {
                        let history = planner.history(now, clock(real));
                        if cut_saves {
                            card.torn = Some(Some(history.last_save()));
                        } else {
                            card = Card {
                                history,
                                certificate: served,
                                torn: None,
                            };
                            saves.push(real);
                        }
                    }
                    next = None;
                }
                now += 60;
                real = boot_real + now as i64;
            }
        }
        (orders, saves)
    }

    /// The most events within any 24 hours.
    fn most_in_a_day(times: &[i64]) -> usize {
        (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|&&t| t < times[i] + DAY)
                    .count()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn a_reboot_loop_with_the_clock_a_year_ahead_or_expired_certificates_orders_once_a_day() {
        let ninety_days = |real: i64| (real - 3600, real + 90 * DAY);
        let expired = |real: i64| (real - 100 * DAY, real - 10 * DAY);
        // A reboot every 10 minutes, for three days.
        for (skew, issue) in [
            (365 * DAY, &ninety_days as &dyn Fn(i64) -> (i64, i64)),
            (0, &expired),
        ] {
            let (orders, saves) = simulate_reboots(3, 600, skew, true, false, issue);
            assert_eq!(orders.len(), 3, "{orders:?}");
            assert_eq!(most_in_a_day(&orders), 1, "{orders:?}");
            assert_eq!(saves.len(), 3, "{saves:?}");
            // Without the history, every boot orders and saves again.
            let (orders, saves) = simulate_reboots(3, 600, skew, false, false, issue);
            assert_eq!(orders.len(), 3 * 144, "{orders:?}");
            assert_eq!(saves.len(), 3 * 144);
        }
        // With the right clock and good certificates: one order in three days.
        let (orders, _) = simulate_reboots(3, 600, 0, true, false, ninety_days);
        assert_eq!(orders, [0]);
    }

    #[test]
    fn saves_cut_off_every_time_give_at_most_an_order_an_hour() {
        let expired = |real: i64| (real - 100 * DAY, real - 10 * DAY);
        for boot_seconds in [600, 1800, 2 * 3600] {
            let (orders, saves) = simulate_reboots(2, boot_seconds, 0, true, true, expired);
            assert!(saves.is_empty());
            assert!(orders.len() <= 2 * 24, "{boot_seconds}: {}", orders.len());
            for pair in orders.windows(2) {
                assert!(pair[1] - pair[0] >= 3600, "{boot_seconds}: {orders:?}");
            }
            // Without the cut saves counted, every boot orders.
            let (orders, _) = simulate_reboots(2, boot_seconds, 0, false, true, expired);
            assert_eq!(orders.len() as u64, 2 * DAY as u64 / boot_seconds);
        }
    }

    #[test]
    fn history_times_round_trip_through_the_clock_and_a_later_time_is_taken_as_now() {
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        planner.account_made(100);
        assert!(planner.take_save(100));
        planner.issued(200, REAL, REAL, REAL + 90 * DAY);
        // At uptime 1000, Unix time REAL + 800.
        let history = planner.history(1000, REAL + 800);
        assert_eq!(history.issued_at, REAL);
        assert_eq!(history.saves[0], REAL - 100);
        assert_eq!(history.accounts[0], REAL - 100);
        assert_eq!(
            History::decode(&{
                let mut bytes = Vec::new();
                history.encode(&mut bytes);
                assert_eq!(bytes.len(), History::ENCODED_LEN);
                bytes
            }),
            Some(history)
        );
        assert_eq!(History::decode(&[0; 10]), None);
        // The next boot, an hour later: the same events, an hour and more ago.
        let mut next = Planner::new(IssuancePolicy::DEFAULT);
        next.restore(&history, 5, REAL + 800 + 3600);
        assert_eq!(next.since_last_issue(5), Some(800 + 3600));
        assert_eq!((next.saves_in_day(5), next.accounts_in_day(5)), (1, 1));
        assert_eq!(
            next.next_order(5, REAL + 4400, Some(REAL), false),
            DAY as u64 - 800 - 3600 + 5
        );
        // No certificate served for these names: the day does not hold the order.
        assert_eq!(next.next_order(5, REAL + 4400, None, false), 5);
        // A clock gone back a year: the events are taken as now, never as long ago.
        let mut back = Planner::new(IssuancePolicy::DEFAULT);
        back.restore(&history, 5, REAL - 365 * DAY);
        assert_eq!(back.since_last_issue(5), Some(0));
        assert_eq!(
            back.next_order(5, REAL - 365 * DAY, Some(0), false),
            5 + DAY as u64
        );
        // Times of 0 or before are no events; a full window keeps the newest.
        let mut odd = History {
            issued_at: -5,
            ..History::default()
        };
        for (i, slot) in odd.saves.iter_mut().enumerate() {
            *slot = REAL - 10 * DAY + i as i64;
        }
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        planner.restore(&odd, 0, REAL);
        assert_eq!(planner.since_last_issue(0), None);
        assert_eq!(planner.saves_in_day(0), 0);
        assert!(planner.take_save(0));
        assert_eq!(
            planner
                .history(0, REAL)
                .saves
                .iter()
                .filter(|&&t| t == REAL)
                .count(),
            1
        );
    }

    #[test]
    fn no_order_while_the_save_cap_is_full_nor_within_the_hour_after_a_cut_save() {
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        for at in 0..4 {
            assert!(planner.take_save(at));
        }
        assert_eq!(planner.next_order(10, REAL, None, false), DAY as u64);
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        planner.lost_save(Some(REAL - 600), 100, REAL);
        assert_eq!(planner.next_order(100, REAL, None, false), 100 + 3000);
        assert_eq!(planner.saves_in_day(100), 1);
        let mut planner = Planner::new(IssuancePolicy::DEFAULT);
        planner.lost_save(None, 100, REAL);
        assert_eq!(planner.next_order(100, REAL, None, false), 100 + 3600);
    }
}
