//! UTC timestamps: the history stores unix seconds and shows RFC 3339.
//!
//! Seconds are what SQLite compares and sorts cheaply; RFC 3339 (`2026-11-29T22:10:07Z`)
//! is what people and `--json` consumers read. The calendar arithmetic is the proleptic
//! Gregorian "days from civil" algorithm, so no date crate is needed for this.

use super::HistoryError;

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01: (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Formats unix seconds as RFC 3339 UTC, e.g. `2026-11-29T22:10:07Z`.
pub fn format_rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// Parses an RFC 3339 timestamp into unix seconds (fractions of a second are dropped).
///
/// Accepts `YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)`, a space or lowercase `t` in
/// place of `T`, and a bare date `YYYY-MM-DD` meaning midnight UTC (handy for `--since`).
pub fn parse_rfc3339(input: &str) -> Result<i64, HistoryError> {
    let bad = |reason: &str| HistoryError::InvalidTime {
        input: input.to_string(),
        reason: reason.to_string(),
    };
    let s = input.trim();
    let b = s.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Result<i64, HistoryError> {
        let part = s.get(range).ok_or_else(|| bad("too short"))?;
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad("expected digits"));
        }
        part.parse::<i64>().map_err(|_| bad("expected digits"))
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad("expected YYYY-MM-DD at the start"));
    }
    let year = num(0..4)?;
    let month = u32::try_from(num(5..7)?).map_err(|_| bad("month out of range"))?;
    let day = u32::try_from(num(8..10)?).map_err(|_| bad("day out of range"))?;
    if !(1..=12).contains(&month) {
        return Err(bad("month out of range 01-12"));
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err(bad("day out of range for that month"));
    }
    let date = days_from_civil(year, month, day) * 86_400;
    if b.len() == 10 {
        return Ok(date);
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 19 || b[13] != b':' || b[16] != b':' {
        return Err(bad("expected THH:MM:SS after the date"));
    }
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    // 60 allows a leap second; it is folded into the next minute.
    if hh > 23 || mm > 59 || ss > 60 {
        return Err(bad("time of day out of range"));
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("expected digits after '.'"));
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let r = rest.as_bytes();
            if ![r[1], r[2], r[4], r[5]].iter().all(u8::is_ascii_digit) {
                return Err(bad("bad UTC offset: expected +HH:MM"));
            }
            let digit = |i: usize| i64::from(r[i] - b'0');
            let h = digit(1) * 10 + digit(2);
            let m = digit(4) * 10 + digit(5);
            if h > 23 || m > 59 {
                return Err(bad("UTC offset out of range"));
            }
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        "" => return Err(bad("missing time zone: end with Z or +HH:MM")),
        _ => return Err(bad("bad time zone: expected Z or +HH:MM")),
    };
    Ok(date + hh * 3600 + mm * 60 + ss - offset)
}

/// Reads a `--since` value: an RFC 3339 time or date (see [`parse_rfc3339`]), or an age
/// before `now` written as a whole number and a unit: `90m`, `36h`, `7d`, `2w`.
pub fn parse_since(input: &str, now: i64) -> Result<i64, HistoryError> {
    let s = input.trim();
    let unit = match s.as_bytes().last() {
        Some(b'm') => Some(60),
        Some(b'h') => Some(3600),
        Some(b'd') => Some(86_400),
        Some(b'w') => Some(7 * 86_400),
        _ => None,
    };
    match unit {
        Some(unit) if s.len() > 1 && s[..s.len() - 1].bytes().all(|c| c.is_ascii_digit()) => {
            let n: i64 = s[..s.len() - 1]
                .parse()
                .map_err(|_| HistoryError::InvalidTime {
                    input: input.to_string(),
                    reason: "age too large".into(),
                })?;
            n.checked_mul(unit)
                .and_then(|age| now.checked_sub(age))
                .ok_or_else(|| HistoryError::InvalidTime {
                    input: input.to_string(),
                    reason: "age too large".into(),
                })
        }
        _ => parse_rfc3339(s),
    }
}

/// Now, in unix seconds (0 if the clock is before 1970, which no real host is).
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        // `date -u -d @1796076607`
        assert_eq!(format_rfc3339(1_796_076_607), "2026-11-30T22:10:07Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
        // Absurd stored values print oddly but never panic.
        assert!(!format_rfc3339(i64::MAX).is_empty());
        assert!(!format_rfc3339(i64::MIN).is_empty());
    }

    #[test]
    fn parses_and_round_trips() {
        for t in [0, 951_782_400, 1_796_076_607, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&format_rfc3339(t)).unwrap(), t);
        }
        assert_eq!(parse_rfc3339("2026-11-30").unwrap(), 1_795_996_800);
        assert_eq!(
            parse_rfc3339("2026-11-30T23:10:07.123+01:00").unwrap(),
            1_796_076_607
        );
        assert_eq!(
            parse_rfc3339("2026-11-30 17:10:07-05:00").unwrap(),
            1_796_076_607
        );
    }

    #[test]
    fn since_takes_ages_or_times() {
        let now = 1_796_076_607;
        assert_eq!(parse_since("7d", now).unwrap(), now - 7 * 86_400);
        assert_eq!(parse_since("36h", now).unwrap(), now - 36 * 3600);
        assert_eq!(parse_since("90m", now).unwrap(), now - 5400);
        assert_eq!(parse_since("2w", now).unwrap(), now - 14 * 86_400);
        assert_eq!(parse_since("2026-11-30", now).unwrap(), 1_795_996_800);
        for bad in [
            "d",
            "-1d",
            "7x",
            "99999999999999999999d",
            "9999999999999999w",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_bad_input_with_reason() {
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-02-30",
            "2026-11-29T25:00:00Z",
            "2026-11-29T10:00:00",
            "2026-11-29T10:00:00+1",
            "2026-11-29T10:00:00+-1:00",
            "2026-11-29T10:00:00+\u{e9}:00",
            "2026-11-29T10:00:00.Z",
            "２０２６-11-29",
        ] {
            let err = parse_rfc3339(bad).unwrap_err();
            assert!(err.to_string().contains("timestamp"), "{bad}: {err}");
        }
    }
}
