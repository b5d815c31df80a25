//! The size grammar, read by both binaries: the launcher's options (through
//! `gpudirect::units`, which re-exports it beside the other units) and `gpudirect-mpi pair
//! --size`, which the launcher writes. [`UnitError`] is every unit's error, sizes' and the
//! launcher's durations, times and percentages alike.
//!
//! **Sizes** are bytes in powers of 1024, as nccl-tests reads `-b`/`-e`: `8`, `64K`, `8G`,
//! `8GiB`, `8 GiB`, `8589934592`. `GB` is refused: it reads as 10^9.

/// A value that does not read as its unit; the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{input}` is not a {unit}: {reason}")]
pub struct UnitError {
    /// What it should have been: `size`, `duration`, `timestamp` or `percentage`.
    pub unit: &'static str,
    /// What was given.
    pub input: String,
    /// What is wrong and what to write.
    pub reason: String,
}

impl UnitError {
    /// The error for `input`, which is not a `unit` because of `reason`.
    pub fn new(unit: &'static str, input: &str, reason: impl Into<String>) -> UnitError {
        UnitError {
            unit,
            input: input.to_string(),
            reason: reason.into(),
        }
    }
}

/// The hint every size error ends with.
const SIZE_FORMS: &str = "write bytes with an optional K, M, G or T suffix (powers of 1024, as \
                          nccl-tests reads them), e.g. 8, 64K, 1M, 8G, 8GiB or \"8 GiB\"";

/// Reads a size: a whole number of bytes with an optional `K`, `M`, `G` or `T` suffix,
/// each a power of 1024 (`1G` = 1073741824). `KiB`-style suffixes, a trailing `B` and a
/// space before the suffix are accepted (`8B`, `8 GiB`); `GB` is refused because it reads
/// as 10^9. The result fits in an `i64`, which is what the history stores.
pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    let bad = |reason: String| UnitError::new("size", input, reason);
    let s = input.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    if number.is_empty() {
        return Err(bad(SIZE_FORMS.to_string()));
    }
    let shift = match suffix.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        other => return Err(bad(format!("unknown suffix `{other}`: {SIZE_FORMS}"))),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| bad("too large (at most 2^63 - 1 bytes)".into()))?;
    n.checked_mul(1u64 << shift)
        .filter(|v| i64::try_from(*v).is_ok())
        .ok_or_else(|| bad("too large (at most 2^63 - 1 bytes)".into()))
}

/// `parse_size` for clap's `value_parser`.
pub fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_form_reads_the_same() {
        for form in ["8G", "8g", "8GiB", "8 GiB", "8589934592", " 8G "] {
            assert_eq!(parse_size(form), Ok(8 << 30), "{form}");
        }
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("8B"), Ok(8));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("2T"), Ok(1 << 41));
    }

    #[test]
    fn bad_sizes_say_what_to_write() {
        for bad in [
            "",
            "G",
            "1.5G",
            "-1M",
            "1GB",
            "1X",
            "1 G B",
            "99999999999999999999",
            "9T9",
        ] {
            let err = parse_size(bad).unwrap_err().to_string();
            assert!(err.contains("is not a size"), "{bad}: {err}");
        }
        assert!(parse_size("1GB").unwrap_err().to_string().contains("8G"));
        assert!(parse_size("9000000T").is_err(), "over i64");
    }
}
