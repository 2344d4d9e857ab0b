//! Calendar arithmetic for the timestamps S3 uses, without a clock.
//!
//! Converts between Unix epoch seconds and the three formats of the protocol: SigV4's
//! ISO-8601 basic form (`20130524T000000Z`), the ISO-8601 extended form with
//! milliseconds used in XML (`2009-10-12T17:50:30.000Z`) and HTTP dates (RFC 7231,
//! via `httpdate`). Parsing is strict (fixed width, range-checked fields) and never
//! panics; formatting saturates at the year 9999.

use std::time::{Duration, UNIX_EPOCH};

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The (year, month, day) of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ => {
            if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 {
                29
            } else {
                28
            }
        }
    }
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u32, |acc, &b| {
        acc.checked_mul(10)?.checked_add(u32::from(b - b'0'))
    })
}

/// Parses a `yyyymmdd` date into days since the epoch.
pub(crate) fn parse_yyyymmdd(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 8 {
        return None;
    }
    let y = digits(b.get(0..4)?)?;
    let m = digits(b.get(4..6)?)?;
    let d = digits(b.get(6..8)?)?;
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(i64::from(y), m) {
        return None;
    }
    Some(days_from_civil(i64::from(y), m, d))
}

/// Parses SigV4's `yyyymmddThhmmssZ` into epoch seconds.
pub(crate) fn parse_amz_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b.get(8) != Some(&b'T') || b.get(15) != Some(&b'Z') {
        return None;
    }
    let days = parse_yyyymmdd(s.get(0..8)?)?;
    let hh = digits(b.get(9..11)?)?;
    let mm = digits(b.get(11..13)?)?;
    let ss = digits(b.get(13..15)?)?;
    if hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(days * 86_400 + i64::from(hh) * 3600 + i64::from(mm) * 60 + i64::from(ss))
}

/// Formats epoch seconds as SigV4's `yyyymmddThhmmssZ`.
pub(crate) fn format_amz_date(epoch_secs: i64) -> String {
    let days = epoch_secs.div_euclid(86_400);
    let sod = epoch_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        y.clamp(0, 9999),
        m,
        d,
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Formats epoch milliseconds as `2009-10-12T17:50:30.000Z`.
pub(crate) fn iso8601_millis(epoch_ms: u64) -> String {
    // 253402300799999 ms is 9999-12-31T23:59:59.999Z.
    let ms = epoch_ms.min(253_402_300_799_999);
    let secs = (ms / 1000) as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60,
        ms % 1000
    )
}

/// Formats epoch seconds as an HTTP date (`Fri, 24 May 2013 00:00:00 GMT`).
pub(crate) fn http_date(epoch_secs: u64) -> String {
    let secs = epoch_secs.min(253_402_300_799);
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Parses an HTTP date (any of the three RFC 7231 forms) into epoch seconds.
pub(crate) fn parse_http_date(s: &str) -> Option<i64> {
    let t = httpdate::parse_http_date(s).ok()?;
    let secs = t.duration_since(UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for days in [-719_468i64, -1, 0, 1, 10_957, 15_849, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(days_from_civil(2013, 5, 24), 15_849);
    }

    #[test]
    fn amz_date() {
        assert_eq!(parse_amz_date("20130524T000000Z"), Some(1_369_353_600));
        assert_eq!(format_amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(parse_amz_date("20130524T000000"), None);
        assert_eq!(parse_amz_date("20130230T000000Z"), None);
        assert_eq!(parse_amz_date("20130524T240000Z"), None);
        assert_eq!(parse_amz_date("2013052+T000000Z"), None);
        assert_eq!(parse_amz_date("２0130524T00000Z"), None);
        assert_eq!(
            parse_yyyymmdd("20240229"),
            Some(days_from_civil(2024, 2, 29))
        );
        assert_eq!(parse_yyyymmdd("20230229"), None);
    }

    #[test]
    fn formats() {
        assert_eq!(
            iso8601_millis(1_255_369_830_000),
            "2009-10-12T17:50:30.000Z"
        );
        assert_eq!(
            iso8601_millis(1_255_369_830_123),
            "2009-10-12T17:50:30.123Z"
        );
        assert_eq!(iso8601_millis(u64::MAX), "9999-12-31T23:59:59.999Z");
        assert_eq!(http_date(1_369_353_600), "Fri, 24 May 2013 00:00:00 GMT");
        assert_eq!(
            parse_http_date("Fri, 24 May 2013 00:00:00 GMT"),
            Some(1_369_353_600)
        );
        assert_eq!(parse_http_date("garbage"), None);
    }
}
