//! HTTP-date parsing (all three RFC 9110 §5.6.7 formats) and IMF-fixdate formatting.

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

/// Days since 1970-01-01 of a proleptic Gregorian date (`month` 1..=12).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The (year, month 1..=12, day 1..=31) of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn digits(bytes: &[u8]) -> Option<u32> {
    if bytes.is_empty() || bytes.len() > 4 {
        return None;
    }
    let mut value = 0u32;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(b - b'0');
    }
    Some(value)
}

fn month_number(name: &[u8]) -> Option<u32> {
    MONTHS
        .iter()
        .position(|m| m.as_slice() == name)
        .map(|i| i as u32 + 1)
}

/// "hh:mm:ss" as seconds since midnight.
fn time_of_day(bytes: &[u8]) -> Option<u64> {
    if bytes.len() != 8 || bytes[2] != b':' || bytes[5] != b':' {
        return None;
    }
    let (h, m, s) = (
        digits(&bytes[0..2])?,
        digits(&bytes[3..5])?,
        digits(&bytes[6..8])?,
    );
    // 60 allows a leap second, which RFC 9110 permits in the grammar.
    if h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(u64::from(h * 3600 + m * 60 + s))
}

fn to_unix(year: i64, month: u32, day: u32, seconds: u64) -> Option<u64> {
    if !(1..=31).contains(&day) || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    // Reject dates such as Feb 30 that roll over into the next month.
    if civil_from_days(days) != (year, month, day) {
        return None;
    }
    u64::try_from(days)
        .ok()?
        .checked_mul(86_400)?
        .checked_add(seconds)
}

/// Parses an HTTP-date in any of the three formats RFC 9110 §5.6.7 requires recipients to
/// accept, returning Unix seconds; `None` for anything else (such a header is then ignored).
pub fn parse_http_date(value: &[u8]) -> Option<u64> {
    let value = value.trim_ascii();
    let mut parts = value.split(|&b| b == b' ').filter(|p| !p.is_empty());
    let first = parts.next()?;
    if first.len() == 4 && first[3] == b',' {
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
        let day = parts.next().filter(|d| d.len() == 2)?;
        let month = month_number(parts.next()?)?;
        let year = parts.next().filter(|y| y.len() == 4)?;
        let time = time_of_day(parts.next()?)?;
        if parts.next()? != b"GMT" || parts.next().is_some() {
            return None;
        }
        to_unix(i64::from(digits(year)?), month, digits(day)?, time)
    } else if first.last() == Some(&b',') {
        // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
        let date = parts.next().filter(|d| d.len() == 9)?;
        let time = time_of_day(parts.next()?)?;
        if parts.next()? != b"GMT" || parts.next().is_some() || date[2] != b'-' || date[6] != b'-' {
            return None;
        }
        let short_year = i64::from(digits(&date[7..9])?);
        let year = if short_year < 70 {
            2000 + short_year
        } else {
            1900 + short_year
        };
        to_unix(year, month_number(&date[3..6])?, digits(&date[0..2])?, time)
    } else if first.len() == 3 {
        // asctime: "Sun Nov  6 08:49:37 1994"
        let month = month_number(parts.next()?)?;
        let day = parts.next().filter(|d| d.len() <= 2)?;
        let time = time_of_day(parts.next()?)?;
        let year = parts.next().filter(|y| y.len() == 4)?;
        if parts.next().is_some() {
            return None;
        }
        to_unix(i64::from(digits(year)?), month, digits(day)?, time)
    } else {
        None
    }
}

/// Formats Unix seconds as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") into `out`.
pub fn write_imf_fixdate(out: &mut impl core::fmt::Write, unix_seconds: u64) -> core::fmt::Result {
    let days = (unix_seconds / 86_400) as i64;
    let seconds = unix_seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    let weekday = WEEKDAYS[((days + 4) % 7) as usize];
    let month_name = core::str::from_utf8(MONTHS[month as usize - 1]).unwrap_or("Jan");
    write!(
        out,
        "{weekday}, {day:02} {month_name} {year:04} {:02}:{:02}:{:02} GMT",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: u64 = 784_111_777; // Sun, 06 Nov 1994 08:49:37 GMT (RFC 9110's example)

    #[test]
    fn parses_all_three_formats() {
        assert_eq!(
            parse_http_date(b"Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(EXAMPLE)
        );
        assert_eq!(
            parse_http_date(b"Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(EXAMPLE)
        );
        assert_eq!(parse_http_date(b"Sun Nov  6 08:49:37 1994"), Some(EXAMPLE));
        assert_eq!(parse_http_date(b"Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            parse_http_date(b"Tue, 29 Feb 2028 23:59:59 GMT"),
            Some(1_835_481_599)
        );
    }

    #[test]
    fn rejects_malformed_dates() {
        for bad in [
            &b""[..],
            b"yesterday",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"Sun, 06 Nov 1994 08:49 GMT",
            b"Sun, 31 Feb 1994 08:49:37 GMT",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 24:00:00 GMT",
            b"Sun, 06 Nov 1994 08:49:37 GMT extra",
            b"Sun, 6 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1969 08:49:37 GMT",
            b"Sun, -6 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(
                parse_http_date(bad),
                None,
                "{:?}",
                core::str::from_utf8(bad)
            );
        }
    }

    #[test]
    fn formats_and_round_trips() {
        let mut s = heapless::String::<40>::new();
        write_imf_fixdate(&mut s, EXAMPLE).unwrap();
        assert_eq!(s.as_str(), "Sun, 06 Nov 1994 08:49:37 GMT");
        let mut seed = 12_345u64;
        for _ in 0..2000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let t = (seed >> 33) % 8_000_000_000;
            let mut s = heapless::String::<40>::new();
            write_imf_fixdate(&mut s, t).unwrap();
            assert_eq!(parse_http_date(s.as_bytes()), Some(t), "{s}");
        }
    }
}
