//! The UTC calendar: Unix time to a proleptic Gregorian date and time of day, and back.
//!
//! The one copy of this arithmetic in the workspace. The HTTP engine (Date, Last-Modified and
//! the conditional headers), the site-image writer, the SD image writer (FAT timestamps) and
//! the benchmark (results folder names) all use it; it lives here, in the lowest crate, so
//! that each of them can depend on it without a dependency pointing upwards.
//!
//! The date conversions are H. Hinnant's days-from-civil and civil-from-days algorithms
//! ("chrono-Compatible Low-Level Date Algorithms"): eras of 400 years (146,097 days) counted
//! from 0000-03-01, so that the leap day falls at the end of each computational year.

/// Seconds in a day (UTC has no leap seconds in Unix time).
pub const SECONDS_PER_DAY: u64 = 86_400;

/// English three-letter month names, January first, as HTTP dates (RFC 9110 section 5.6.7)
/// spell them.
pub const MONTH_ABBREVIATIONS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// English three-letter weekday names, Sunday first (index = [`UtcDateTime::weekday`]).
pub const WEEKDAY_ABBREVIATIONS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// Days from 0000-03-01 to 1970-01-01.
const EPOCH_SHIFT_DAYS: i64 = 719_468;
/// Days in a 400-year era of the Gregorian calendar.
const DAYS_PER_ERA: i64 = 146_097;

/// A date of the proleptic Gregorian calendar.
///
/// The conversions are exact for every year between -10^14 and 10^14 (beyond what a `u64` of
/// Unix seconds reaches). The fields are public and not checked: [`CivilDate::is_valid`] tells
/// a real date from one such as February 30.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CivilDate {
    /// The year, astronomical numbering (1 BC is year 0).
    pub year: i64,
    /// The month, 1 (January) to 12.
    pub month: u32,
    /// The day of the month, 1 to 31.
    pub day: u32,
}

impl CivilDate {
    /// The date `days` days after 1970-01-01 (before it, if negative).
    pub const fn from_days_since_epoch(days: i64) -> Self {
        let shifted = days + EPOCH_SHIFT_DAYS;
        let era = shifted.div_euclid(DAYS_PER_ERA);
        let day_of_era = shifted - era * DAYS_PER_ERA; // 0..=146_096
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_from_march = (5 * day_of_year + 2) / 153; // 0 = March .. 11 = February
        let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
        let month = if month_from_march < 10 {
            month_from_march + 3
        } else {
            month_from_march - 9
        };
        let year = year_of_era + era * 400 + if month <= 2 { 1 } else { 0 };
        // In range by construction: month 1..=12, day 1..=31.
        CivilDate {
            year,
            month: month as u32,
            day: day as u32,
        }
    }

    /// Days from 1970-01-01 to this date (negative before it). A day past the end of its
    /// month counts on into the next (February 30 is March 1 or 2); a month outside 1..=12
    /// gives a count that means nothing (and no panic).
    pub const fn days_since_epoch(self) -> i64 {
        let month = self.month as i64;
        let year = self.year - if month <= 2 { 1 } else { 0 };
        let era = year.div_euclid(400);
        let year_of_era = year - era * 400; // 0..=399
        let month_from_march = if month > 2 { month - 3 } else { month + 9 };
        let day_of_year = (153 * month_from_march + 2) / 5 + self.day as i64 - 1;
        let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
        era * DAYS_PER_ERA + day_of_era - EPOCH_SHIFT_DAYS
    }

    /// Whether this is a real calendar date: month 1..=12 and a day that its month has.
    pub const fn is_valid(self) -> bool {
        if self.month < 1 || self.month > 12 || self.day < 1 {
            return false;
        }
        let back = CivilDate::from_days_since_epoch(self.days_since_epoch());
        back.year == self.year && back.month == self.month && back.day == self.day
    }
}

/// A UTC date and time of day, to the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDateTime {
    /// The calendar date.
    pub date: CivilDate,
    /// The hour, 0 to 23.
    pub hour: u32,
    /// The minute, 0 to 59.
    pub minute: u32,
    /// The second, 0 to 59.
    pub second: u32,
    /// The day of the week, 0 (Sunday) to 6 (Saturday): an index into
    /// [`WEEKDAY_ABBREVIATIONS`].
    pub weekday: u32,
}

impl UtcDateTime {
    /// The date and time `unix_seconds` seconds after 1970-01-01T00:00:00Z.
    pub const fn from_unix_seconds(unix_seconds: u64) -> Self {
        // At most u64::MAX / 86_400 (about 2.1e14): fits an i64.
        let days = (unix_seconds / SECONDS_PER_DAY) as i64;
        let second_of_day = (unix_seconds % SECONDS_PER_DAY) as u32;
        UtcDateTime {
            date: CivilDate::from_days_since_epoch(days),
            hour: second_of_day / 3600,
            minute: second_of_day / 60 % 60,
            second: second_of_day % 60,
            // 1970-01-01 was a Thursday.
            weekday: (days + 4).rem_euclid(7) as u32,
        }
    }

    /// The English three-letter name of the weekday ("Sun" to "Sat"). Never panics: a weekday
    /// past 6, possible only in a value built by hand, wraps around.
    pub const fn weekday_abbreviation(&self) -> &'static str {
        WEEKDAY_ABBREVIATIONS[(self.weekday % 7) as usize]
    }

    /// The English three-letter name of the month ("Jan" to "Dec"). Never panics: a month
    /// outside 1..=12, possible only in a value built by hand, wraps around.
    pub const fn month_abbreviation(&self) -> &'static str {
        MONTH_ABBREVIATIONS[(self.date.month.wrapping_sub(1) % 12) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(year: i64, month: u32, day: u32) -> CivilDate {
        CivilDate { year, month, day }
    }

    #[test]
    fn known_dates() {
        for (days, expected) in [
            (0, date(1970, 1, 1)),
            (-1, date(1969, 12, 31)),
            (11_016, date(2000, 2, 29)),
            (11_017, date(2000, 3, 1)),
            (47_540, date(2100, 2, 28)),
            (47_541, date(2100, 3, 1)), // 2100 is not a leap year
            (20_818, date(2026, 12, 31)),
            (-719_468, date(0, 3, 1)),
            (2_932_896, date(9999, 12, 31)),
        ] {
            assert_eq!(CivilDate::from_days_since_epoch(days), expected, "{days}");
            assert_eq!(expected.days_since_epoch(), days, "{expected:?}");
        }
    }

    #[test]
    fn every_day_round_trips_and_follows_the_previous() {
        // 1600-01-01 to 2397-02-10: every leap rule (400, 100, 4), both ways.
        let mut previous = CivilDate::from_days_since_epoch(-135_141);
        assert_eq!(previous, date(1599, 12, 31));
        for days in -135_140..156_000 {
            let today = CivilDate::from_days_since_epoch(days);
            assert_eq!(today.days_since_epoch(), days);
            assert!(today.is_valid(), "{today:?}");
            let next_day = today.day == previous.day + 1 && today.month == previous.month;
            let next_month = today.day == 1
                && (today.month == previous.month + 1 && today.year == previous.year
                    || today.month == 1 && previous.month == 12 && today.year == previous.year + 1);
            assert!(next_day || next_month, "{previous:?} -> {today:?}");
            previous = today;
        }
    }

    #[test]
    fn days_past_the_month_roll_over_and_are_not_valid() {
        assert_eq!(
            date(1994, 2, 31).days_since_epoch(),
            date(1994, 3, 3).days_since_epoch()
        );
        for bad in [
            date(1994, 2, 29),
            date(2100, 2, 29),
            date(2024, 4, 31),
            date(2024, 0, 1),
            date(2024, 13, 1),
            date(2024, 1, 0),
            date(2024, 1, 32),
        ] {
            assert!(!bad.is_valid(), "{bad:?}");
        }
        assert!(date(2000, 2, 29).is_valid());
        assert!(date(2024, 2, 29).is_valid());
    }

    #[test]
    fn date_and_time_of_unix_seconds() {
        // RFC 9110's example: Sun, 06 Nov 1994 08:49:37 GMT.
        let t = UtcDateTime::from_unix_seconds(784_111_777);
        assert_eq!(t.date, date(1994, 11, 6));
        assert_eq!((t.hour, t.minute, t.second), (8, 49, 37));
        assert_eq!(t.weekday_abbreviation(), "Sun");
        assert_eq!(t.month_abbreviation(), "Nov");
        let epoch = UtcDateTime::from_unix_seconds(0);
        assert_eq!(epoch.date, date(1970, 1, 1));
        assert_eq!(epoch.weekday_abbreviation(), "Thu");
        let last = UtcDateTime::from_unix_seconds(1_709_251_199);
        assert_eq!(last.date, date(2024, 2, 29));
        assert_eq!((last.hour, last.minute, last.second), (23, 59, 59));
        assert_eq!(last.weekday_abbreviation(), "Thu");
        let far = UtcDateTime::from_unix_seconds(u64::MAX);
        assert_eq!(far.date.year, 584_554_051_223);
        assert!(far.date.is_valid());
    }
}
