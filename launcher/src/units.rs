//! One grammar per unit, for every option and every output: sizes, durations, times and
//! percentages.
//!
//! Before this module each command read its own sizes and durations, and the copies had
//! drifted (`history --size "8 GiB"` worked where `run -e 8GiB` did not; `--tolerance` was a
//! fraction in `validate` and a percentage elsewhere). The rules, as `docs/cli.md` states them:
//!
//! - **Sizes** are bytes in powers of 1024, as nccl-tests reads `-b`/`-e`: `8`, `64K`,
//!   `8G`, `8GiB`, `8 GiB`, `8589934592`. `GB` is refused: it reads as 10^9.
//! - **Durations** are a whole number of seconds (`90`) or a number with a unit, as
//!   `humantime` reads them: `90s`, `10m`, `1h30m`, `7d`, `2w`.
//! - **Times** are RFC 3339 (`2026-11-29T22:10:07Z`, any offset) or a bare date meaning
//!   midnight UTC; `--since` also takes a duration meaning "that long ago".
//! - **Percentages** (`--tolerance`) are percent everywhere: `5` or `5%`.
//!
//! The size reader and [`UnitError`] are `gpudirect-wire`'s (`gpudirect-mpi pair --size`
//! reads sizes too), re-exported here so that every unit is read from this one module.

use std::time::Duration;

pub use gpudirect_wire::units::{parse_size, size_arg, UnitError};

/// A size the way nccl-tests takes it back on its command line: `8G`, `512M`, `1000`.
pub fn nccl_size(bytes: u64) -> String {
    for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// A size for people: `8 B`, `1 KiB`, `256 MiB`, `8 GiB`; one that is not a whole number
/// of its largest unit keeps two decimals (`1.50 KiB`).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut unit = None;
    for (i, name) in UNITS.iter().enumerate() {
        if bytes >= 1u64 << (10 * (i + 1)) {
            unit = Some((i + 1, *name));
        }
    }
    match unit {
        None => format!("{bytes} B"),
        Some((power, name)) => {
            let scale = 1u64 << (10 * power);
            if bytes.is_multiple_of(scale) {
                format!("{} {name}", bytes / scale)
            } else {
                format!("{:.2} {name}", bytes as f64 / scale as f64)
            }
        }
    }
}

/// Reads a duration longer than zero: a whole number of seconds (`90`) or a number with a
/// unit (`90s`, `10m`, `1h30m`, `7d`, `2w`).
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let bad = |reason: &str| UnitError::new("duration", input, reason);
    let s = input.trim();
    let duration = if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) {
        s.parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| bad("too long"))?
    } else {
        humantime::parse_duration(s)
            .map_err(|_| bad("write seconds (90) or a number with a unit: 90s, 10m, 1h, 7d, 2w"))?
    };
    if duration.is_zero() {
        return Err(bad("must be longer than zero"));
    }
    Ok(duration)
}

/// Formats unix seconds as RFC 3339 UTC, e.g. `2026-11-29T22:10:07Z`. A value outside
/// years -9999..=9999 (only a damaged history holds one) prints as `@SECONDS`.
pub fn format_rfc3339(unix: i64) -> String {
    match jiff::Timestamp::from_second(unix) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Err(_) => format!("@{unix}"),
    }
}

/// Parses an RFC 3339 timestamp into unix seconds (fractions of a second are dropped).
///
/// Accepts `YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)` (a space in place of `T` too), and
/// a bare date `YYYY-MM-DD` meaning midnight UTC (handy for `--since`). A time without a
/// zone is refused: it would mean a different instant on every machine.
pub fn parse_rfc3339(input: &str) -> Result<i64, UnitError> {
    let bad = |reason: String| UnitError::new("timestamp", input, reason);
    let s = input.trim();
    if s.len() == 10 {
        let date: jiff::civil::Date = s
            .parse()
            .map_err(|e| bad(format!("{e}; write a date as YYYY-MM-DD")))?;
        return date
            .to_zoned(jiff::tz::TimeZone::UTC)
            .map(|z| z.timestamp().as_second())
            .map_err(|e| bad(e.to_string()));
    }
    // `get`, not indexing: byte 19 may fall inside a multi-byte character.
    if s.get(19..)
        .is_some_and(|zone| !zone.contains(['Z', 'z', '+', '-']))
    {
        return Err(bad("missing time zone: end with Z or +HH:MM".into()));
    }
    s.parse::<jiff::Timestamp>()
        .map(jiff::Timestamp::as_second)
        .map_err(|e| {
            bad(format!(
                "{e}; write YYYY-MM-DDTHH:MM:SSZ, an offset such as +01:00, or a date"
            ))
        })
}

/// Reads a `--since` value: an RFC 3339 time or date (see [`parse_rfc3339`]), or a
/// duration before `now` (see [`parse_duration`]: `90m`, `36h`, `7d`, `2w`).
pub fn parse_since(input: &str, now: i64) -> Result<i64, UnitError> {
    let s = input.trim();
    // A date starts with four digits and a dash; anything else is an age.
    if s.as_bytes().get(4) == Some(&b'-') {
        return parse_rfc3339(s);
    }
    let age = parse_duration(s).map_err(|_| {
        UnitError::new(
            "timestamp",
            input,
            "write an age (90m, 36h, 7d, 2w) or an RFC 3339 time or date \
             (2026-11-29, 2026-11-29T22:10:07Z)",
        )
    })?;
    i64::try_from(age.as_secs())
        .ok()
        .and_then(|age| now.checked_sub(age))
        .ok_or_else(|| UnitError::new("timestamp", input, "age too large"))
}

/// Now, in unix seconds (0 if the clock is before 1970, which no real host is).
pub fn now_unix() -> i64 {
    jiff::Timestamp::now().as_second().max(0)
}

/// Now, in unix milliseconds (0 if the clock is before 1970).
pub fn now_unix_ms() -> u64 {
    u64::try_from(jiff::Timestamp::now().as_millisecond()).unwrap_or(0)
}

/// A span of time in words for a message, to its two largest units: `800 ms`, `12 s`,
/// `5 min 3 s`, `2 h 10 min`, `3 d 4 h`.
pub fn human_duration(span: Duration) -> String {
    let secs = span.as_secs();
    match secs {
        0 => format!("{} ms", span.as_millis()),
        1..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min {} s", secs / 60, secs % 60),
        3600..=86_399 => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
        _ => format!("{} d {} h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// `2026-11-29T22:10:07Z` as `2026-11-29 22:10`, for narrow tables (JSON keeps RFC 3339);
/// anything else is returned as it is.
pub fn short_time(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(10..11), rfc3339.get(11..16)) {
        (Some(date), Some("T"), Some(time)) => format!("{date} {time}"),
        _ => rfc3339.to_string(),
    }
}

/// Reads a percentage: `5`, `5%`, `2.5 %`. A value between 0 and 1 without a `%` is
/// refused: it is almost always a fraction written for the old `validate --tolerance`
/// (`0.1` meant 10 %), and taking it as 0.1 % would call every healthy run slow.
pub fn parse_percent(input: &str) -> Result<f64, UnitError> {
    let bad = |reason: &str| UnitError::new("percentage", input, reason);
    let s = input.trim();
    let (number, has_sign) = match s.strip_suffix('%') {
        Some(n) => (n.trim_end(), true),
        None => (s, false),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| bad("write a number of percent, e.g. 5 or 5%"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(bad("write a number of percent >= 0, e.g. 5 or 5%"));
    }
    if value > 0.0 && value < 1.0 && !has_sign {
        // Rounded so that 0.07 reads as 7, not as 7.000000000000001.
        let pct = (value * 100.0 * 1e6).round() / 1e6;
        return Err(bad(&format!(
            "tolerances are percentages: write {pct} for {pct} %, or {value}% if you mean a \
             fraction of one percent"
        )));
    }
    Ok(value)
}

/// `parse_duration` for clap's `value_parser`.
pub fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// `parse_percent` for clap's `value_parser`.
pub fn percent_arg(text: &str) -> Result<f64, String> {
    parse_percent(text).map_err(|e| e.to_string())
}

/// `parse_since` (against now) for clap's `value_parser`.
pub fn since_arg(text: &str) -> Result<i64, String> {
    parse_since(text, now_unix()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_of_time_read_to_their_two_largest_units() {
        let cases = [
            (Duration::from_millis(800), "800 ms"),
            (Duration::from_secs(12), "12 s"),
            (Duration::from_secs(303), "5 min 3 s"),
            (Duration::from_secs(7800), "2 h 10 min"),
            (Duration::from_secs(273_600), "3 d 4 h"),
        ];
        for (span, text) in cases {
            assert_eq!(human_duration(span), text);
        }
    }

    #[test]
    fn sizes_format_for_nccl_tests_and_for_people() {
        assert_eq!(nccl_size(8 << 30), "8G");
        assert_eq!(nccl_size(512 << 20), "512M");
        assert_eq!(nccl_size(1000), "1000");
        assert_eq!(nccl_size(0), "0");
        for bytes in [8u64, 1024, 3 << 20, 8 << 30] {
            assert_eq!(parse_size(&nccl_size(bytes)), Ok(bytes));
        }
        assert_eq!(human_size(8), "8 B");
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(4096), "4 KiB");
        assert_eq!(human_size(1536), "1.50 KiB");
        assert_eq!(human_size(8 << 30), "8 GiB");
        assert!(human_size(u64::MAX).ends_with("PiB"));
        assert_eq!(parse_size(&human_size(8 << 30)), Ok(8 << 30));
    }

    #[test]
    fn durations_take_seconds_or_units() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        for bad in ["", "0", "0s", "-1", "ten", "1x", "99999999999999999999"] {
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(err.contains("is not a duration"), "{bad}: {err}");
        }
    }

    #[test]
    fn times_format_and_round_trip() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(1_796_076_607), "2026-11-30T22:10:07Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(format_rfc3339(i64::MAX), format!("@{}", i64::MAX));
        assert_eq!(format_rfc3339(i64::MIN), format!("@{}", i64::MIN));
        for t in [0, 951_782_400, 1_796_076_607, 4_102_444_799] {
            assert_eq!(parse_rfc3339(&format_rfc3339(t)), Ok(t));
        }
        assert_eq!(parse_rfc3339("2026-11-30"), Ok(1_795_996_800));
        assert_eq!(
            parse_rfc3339("2026-11-30T23:10:07.123+01:00"),
            Ok(1_796_076_607)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30 17:10:07-05:00"),
            Ok(1_796_076_607)
        );
    }

    #[test]
    fn bad_times_are_refused_with_a_reason() {
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
            "2026-11-29T10:00:0é",
            "2026-11-29T10:00:00é",
        ] {
            let err = parse_rfc3339(bad).unwrap_err().to_string();
            assert!(err.contains("is not a timestamp"), "{bad}: {err}");
        }
        assert!(parse_rfc3339("2026-11-29T10:00:00")
            .unwrap_err()
            .to_string()
            .contains("time zone"));
    }

    #[test]
    fn since_takes_ages_or_times() {
        let now = 1_796_076_607;
        assert_eq!(parse_since("7d", now), Ok(now - 7 * 86_400));
        assert_eq!(parse_since("36h", now), Ok(now - 36 * 3600));
        assert_eq!(parse_since("90m", now), Ok(now - 5400));
        assert_eq!(parse_since("2w", now), Ok(now - 14 * 86_400));
        assert_eq!(parse_since("2026-11-30", now), Ok(1_795_996_800));
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
    fn short_times_for_tables() {
        assert_eq!(short_time("2026-11-29T22:10:07Z"), "2026-11-29 22:10");
        assert_eq!(short_time("yesterday"), "yesterday");
        assert_eq!(short_time("2026-11-29T2"), "2026-11-29T2");
    }

    #[test]
    fn percentages_are_percent_everywhere() {
        assert_eq!(parse_percent("5"), Ok(5.0));
        assert_eq!(parse_percent("5%"), Ok(5.0));
        assert_eq!(parse_percent("2.5 %"), Ok(2.5));
        assert_eq!(parse_percent("0"), Ok(0.0));
        assert_eq!(parse_percent("0.5%"), Ok(0.5));
        let fraction = parse_percent("0.1").unwrap_err().to_string();
        assert!(fraction.contains("write 10 for 10 %"), "{fraction}");
        let fraction = parse_percent("0.07").unwrap_err().to_string();
        assert!(fraction.contains("write 7 for 7 %"), "{fraction}");
        for bad in ["", "-1", "x", "inf", "NaN", "5%%"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
    }
}
