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
//! - no new order within [`IssuancePolicy::min_seconds_between_issues`] (24 h) of a
//!   certificate obtained in this boot, even when that certificate looks invalid by the
//!   clock (ordering again cannot fix the clock or the CA's dates; a certificate from the
//!   store that is invalid for the names or the dates is not bound by it, so a card whose
//!   certificate expired while it was off orders at once);
//! - at most [`IssuancePolicy::max_saves_per_day`] card saves in any 24 hours (a refused
//!   save is made once the window allows; the certificate is served meanwhile);
//! - at most [`IssuancePolicy::max_accounts_per_day`] accounts made in any 24 hours (a CA
//!   answering `accountDoesNotExist` to every request would otherwise have one made, and
//!   saved, per order);
//! - the clock is never taken as earlier than [`CLOCK_FLOOR_UNIX`], the build's date: a
//!   clock reset to 1970 or 2000 does not make a stale certificate look valid.
//!
//! Times here are seconds: `now` of the board's monotonic uptime, `unix_now` of the wall
//! clock.

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
}

/// The largest daily cap a [`Planner`] keeps track of.
pub const MAX_CAP: usize = 8;

const DAY: u64 = 24 * 60 * 60;

impl IssuancePolicy {
    /// A day between certificates; 4 saves a day (an order's account and certificate, twice);
    /// 2 accounts a day.
    pub const DEFAULT: Self = Self {
        min_seconds_between_issues: DAY,
        max_saves_per_day: 4,
        max_accounts_per_day: 2,
    };
}

impl Default for IssuancePolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The times of the last few events, to count those of the last 24 hours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DayWindow {
    times: [Option<u64>; MAX_CAP],
    next: usize,
}

impl DayWindow {
    /// Events in the 24 hours before `now`.
    fn count(&self, now: u64) -> usize {
        self.times
            .iter()
            .flatten()
            .filter(|&&at| now < at.saturating_add(DAY))
            .count()
    }

    /// When the oldest event of the last 24 hours leaves the window.
    fn frees_at(&self, now: u64) -> u64 {
        self.times
            .iter()
            .flatten()
            .filter(|&&at| now < at.saturating_add(DAY))
            .map(|&at| at.saturating_add(DAY))
            .min()
            .unwrap_or(now)
    }

    fn record(&mut self, now: u64) {
        self.times[self.next] = Some(now);
        self.next = (self.next + 1) % MAX_CAP;
    }
}

/// Where the bounds stand, and what they counted (for the status line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planner {
    policy: IssuancePolicy,
    last_issue: Option<u64>,
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

impl Planner {
    /// Nothing obtained or saved yet in this boot.
    pub fn new(policy: IssuancePolicy) -> Self {
        let policy = IssuancePolicy {
            max_saves_per_day: policy.max_saves_per_day.clamp(1, MAX_CAP),
            max_accounts_per_day: policy.max_accounts_per_day.clamp(1, MAX_CAP),
            ..policy
        };
        Self {
            policy,
            last_issue: None,
            saves: DayWindow::default(),
            accounts: DayWindow::default(),
            saves_made: 0,
            saves_refused: 0,
            accounts_made: 0,
            issued_invalid: 0,
        }
    }

    /// When (uptime seconds) the next order may start: at `renew_at` (Unix seconds; `None`:
    /// no certificate served, so now), but never within a day of a certificate obtained in
    /// this boot, and, when the order has to make an account (`needs_account`), not before
    /// the daily account cap allows.
    pub fn next_order(
        &self,
        now: u64,
        unix_now: i64,
        renew_at: Option<i64>,
        needs_account: bool,
    ) -> u64 {
        let planned = match renew_at {
            Some(at) => now.saturating_add(at.saturating_sub(unix_now).max(0) as u64),
            None => now,
        };
        let mut earliest = self.last_issue.map_or(0, |at| {
            at.saturating_add(self.policy.min_seconds_between_issues)
        });
        if needs_account && !self.may_make_account(now) {
            earliest = earliest.max(self.accounts.frees_at(now));
        }
        planned.max(earliest)
    }

    /// Whether the daily account cap allows making (or re-making) an account now.
    pub fn may_make_account(&self, now: u64) -> bool {
        self.accounts.count(now) < self.policy.max_accounts_per_day
    }

    /// The CA made an account.
    pub fn account_made(&mut self, now: u64) {
        self.accounts.record(now);
        self.accounts_made = self.accounts_made.saturating_add(1);
    }

    /// A certificate valid from `not_before` to `not_after` was obtained (and is served):
    /// returns whether it is valid by the clock (`unix_now`, floored).
    pub fn issued(&mut self, now: u64, unix_now: i64, not_before: i64, not_after: i64) -> bool {
        self.last_issue = Some(now);
        let valid = valid_at(not_before, not_after, sane_unix_now(unix_now));
        if !valid {
            self.issued_invalid = self.issued_invalid.saturating_add(1);
        }
        valid
    }

    /// Whether a save may be made now; counts it if so, and the refusal if not.
    pub fn take_save(&mut self, now: u64) -> bool {
        if self.saves.count(now) >= self.policy.max_saves_per_day {
            self.saves_refused = self.saves_refused.saturating_add(1);
            return false;
        }
        self.saves.record(now);
        self.saves_made = self.saves_made.saturating_add(1);
        true
    }

    /// When (uptime seconds) a refused save may be made.
    pub fn save_allowed_at(&self, now: u64) -> u64 {
        if self.saves.count(now) < self.policy.max_saves_per_day {
            now
        } else {
            self.saves.frees_at(now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
