//! HTTP-date parsing (all three RFC 9110 §5.6.7 formats) and IMF-fixdate formatting.

use bramble_hal::calendar::{CivilDate, MONTH_ABBREVIATIONS, SECONDS_PER_DAY, UtcDateTime};

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
    MONTH_ABBREVIATIONS
        .iter()
        .position(|m| m.as_bytes() == name)
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
    let date = CivilDate { year, month, day };
    // Reject dates such as Feb 30 that would roll over into the next month.
    if year < 1970 || !date.is_valid() {
        return None;
    }
    u64::try_from(date.days_since_epoch())
        .ok()?
        .checked_mul(SECONDS_PER_DAY)?
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
    let time = UtcDateTime::from_unix_seconds(unix_seconds);
    write!(
        out,
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        time.weekday_abbreviation(),
        time.date.day,
        time.month_abbreviation(),
        time.date.year,
        time.hour,
        time.minute,
        time.second
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
