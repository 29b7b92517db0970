//! When to order: renewal at two thirds of a certificate's lifetime (or inside the window
//! the CA suggests through ACME Renewal Information, RFC 9773), and exponential back-off after
//! a failure that never retries faster than the CA's limits allow.

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
}
