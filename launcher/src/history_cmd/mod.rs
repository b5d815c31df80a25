//! The read side of the history on the command line: `gpudirect history`, `show`,
//! `compare` and `export`, one module each, plus what they share here: the run filters,
//! opening the history without creating it, sizes as people write them (`1G`, `8 GiB`),
//! the stand-in replay marking, and a plain aligned text table.
//!
//! Every read command takes `--json` (except `export`, whose formats are machine-readable
//! already), prints its data on stdout and its notes on stderr, so that a pipe gets only
//! the data.
//!
//! # Replays are never measurements
//! A run recorded from the nccl-tests stand-in carries `GPUDIRECT_STANDIN_REPLAY` (the
//! recording it replayed) in its `env` (see `gpudirect::record`). Every command here shows
//! such a run as a replay: `(replay)` after its launcher plus a footnote in tables, a
//! banner in `show`, a `replay_of` field in JSON and exports, a note in `compare`, and it is
//! left out of a node's trend.

pub mod compare;
pub mod export;
pub mod list;
pub mod show;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::history::time::{now_unix, parse_since};
use gpudirect::history::{resolve_db_path, History, HistoryError, RunFilter, RunId, RunStatus};

use crate::cli::Globals;

/// The `env` key that marks a run recorded from the nccl-tests stand-in; its value names
/// the recording that was replayed (one definition, in the history).
pub use gpudirect::history::store::REPLAY_ENV;

/// The footnote under any table that shows replayed runs: what `(replay)` means and which
/// recording each of them replayed. Empty when there are none. Pure.
pub fn replay_footnote<'a>(replays: impl IntoIterator<Item = (RunId, &'a str)>) -> String {
    let mut runs: Vec<(RunId, &str)> = replays.into_iter().collect();
    if runs.is_empty() {
        return String::new();
    }
    runs.sort_unstable();
    let which: Vec<String> = runs
        .iter()
        .map(|(id, recording)| format!("run {id} replays {recording}"))
        .collect();
    format!(
        "(replay) = output of the nccl-tests stand-in, recorded elsewhere: not a measurement \
         of the nodes named ({})\n",
        which.join("; ")
    )
}

/// The recording a run replayed, if it came from the nccl-tests stand-in.
pub fn replay_of(env: &BTreeMap<String, String>) -> Option<&str> {
    env.get(REPLAY_ENV).map(String::as_str)
}

/// Which runs a listing or an export covers (the same flags on both).
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only runs of this collective, e.g. `all_reduce` (no `_perf` suffix).
    #[arg(long, value_name = "NAME")]
    pub collective: Option<String>,

    /// Only runs recorded with this cluster name.
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,

    /// Only runs that included this node (for `history`: also switches to that node's
    /// busbw over time).
    #[arg(long, value_name = "HOST")]
    pub node: Option<String>,

    /// Only runs of this environment variant, e.g. `tcpx` or `socket`.
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,

    /// Only runs recorded with this label (`gpudirect import --label NAME`), exactly.
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,

    /// Only runs that ended so: ok, wrong, timeout, failed or interrupted.
    #[arg(long, value_name = "STATUS")]
    pub status: Option<RunStatus>,

    /// Only runs at or after this time: an age (`90m`, `36h`, `7d`, `2w`) or an RFC 3339
    /// time or date (`2026-11-29`, `2026-11-29T22:10:07Z`).
    #[arg(long, value_name = "WHEN", value_parser = parse_since_arg)]
    pub since: Option<i64>,

    /// At most this many runs, the newest; 0 means all.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
}

impl FilterArgs {
    /// The history's filter; `default_limit` applies when `--limit` was not given.
    pub fn to_filter(&self, default_limit: Option<u32>) -> RunFilter {
        RunFilter {
            collective: self.collective.clone(),
            cluster: self.cluster.clone(),
            node: self.node.clone(),
            variant: self.variant.clone(),
            label: self.label.clone(),
            status: self.status,
            since: self.since,
            limit: match self.limit {
                Some(0) => None,
                Some(n) => Some(n),
                None => default_limit,
            },
        }
    }
}

fn parse_since_arg(s: &str) -> Result<i64, String> {
    parse_since(s, now_unix()).map_err(|e| e.to_string())
}

/// Writes `text` to stdout. Unlike `print!`, which panics, a reader that went away
/// (`gpudirect history | head`) comes back as an error that `main` recognises and ends on
/// quietly.
pub fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

/// Opens the history for reading. Unlike `import`, nothing is created: a missing file
/// (often a typo in `--db`) is an error that says how a history comes to exist.
pub fn open_for_reading(globals: &Globals) -> Result<History> {
    let var = std::env::var_os;
    let path: PathBuf = resolve_db_path(
        globals.db.as_deref(),
        var("GPUDIRECT_DB").as_deref(),
        var("XDG_DATA_HOME").as_deref(),
        var("HOME").as_deref(),
    )?;
    match History::open_existing(&path) {
        Ok(h) => Ok(h),
        Err(HistoryError::Missing { path }) => anyhow::bail!(
            "no history at {}: nothing was recorded there yet; record runs with \
             `gpudirect import FILE...` (existing nccl-tests outputs) or `gpudirect run`, \
             or point --db / GPUDIRECT_DB at an existing history",
            path.display()
        ),
        Err(e) => Err(e).context("opening the history"),
    }
}

/// Reads a size as nccl-tests' `-b`/`-e` do: a whole number of bytes with an optional
/// `K`, `M`, `G` or `T` suffix, each a power of 1024 (`1G` = 1073741824). `KiB`-style
/// suffixes and a trailing `B` are accepted too (`8B`, `1 GiB`); `GB` is refused because
/// it reads as 10^9.
pub fn parse_size(input: &str) -> Result<u64, String> {
    let s = input.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    if number.is_empty() {
        return Err(format!(
            "`{input}` is not a size: write a whole number of bytes with an optional K, M, G \
             or T suffix (powers of 1024), e.g. 8, 64K, 1M, 8G"
        ));
    }
    let shift = match suffix.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        other => {
            return Err(format!(
                "`{input}`: unknown size suffix `{other}`: use K, M, G or T (powers of 1024, \
                 as nccl-tests reads them), e.g. 1M"
            ))
        }
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{input}` is too large a size"))?;
    n.checked_mul(1u64 << shift)
        .filter(|v| i64::try_from(*v).is_ok())
        .ok_or_else(|| format!("`{input}` is too large a size (at most 2^63 - 1 bytes)"))
}

/// A size for people: `8 B`, `1 KiB`, `256 MiB`, `8 GiB`; sizes that are not a whole
/// number of the largest unit keep two decimals (`1.50 KiB`).
pub fn format_size(bytes: u64) -> String {
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

/// A bandwidth in GB/s with two decimals, as nccl-tests prints it; `-` when unknown.
pub fn gbps(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// An optional text, `-` when missing.
pub fn or_dash(value: Option<&str>) -> String {
    value.map_or_else(|| "-".into(), str::to_string)
}

/// `2026-11-29T22:10:07Z` as `2026-11-29 22:10`, for narrow tables (JSON keeps RFC 3339).
pub fn short_time(rfc3339: &str) -> String {
    match rfc3339.get(..16) {
        Some(head) if rfc3339.len() == 20 => head.replacen('T', " ", 1),
        _ => rfc3339.to_string(),
    }
}

/// How a column lines up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A plain text table: a header line, then one line per row, columns separated by two
/// spaces, no trailing spaces. Widths count characters, not bytes.
pub fn render_table(columns: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, (cell, ((_, align), width))) in cells.zip(columns.iter().zip(&widths)).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let pad = width.saturating_sub(cell.chars().count());
            match align {
                Align::Left => {
                    out.push_str(cell);
                    out.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(cell);
                }
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(&mut columns.iter().map(|(h, _)| *h));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_nccl_tests_reads_them() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("8B"), Ok(8));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("256M"), Ok(268_435_456));
        assert_eq!(parse_size("1G"), Ok(1_073_741_824));
        assert_eq!(parse_size("8G"), Ok(8_589_934_592));
        assert_eq!(parse_size("8 GiB"), Ok(8_589_934_592));
        assert_eq!(parse_size(" 2T "), Ok(1 << 41));
    }

    #[test]
    fn bad_sizes_say_what_to_write() {
        for bad in ["", "G", "1.5G", "-1M", "1GB", "1X", "1 G B"] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains('`'), "{bad}: {err}");
        }
        assert!(parse_size("1GB").unwrap_err().contains("suffix `gb`"));
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("8388608T").unwrap_err().contains("too large"));
    }

    #[test]
    fn sizes_format_for_people() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(8), "8 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1024), "1 KiB");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(268_435_456), "256 MiB");
        assert_eq!(format_size(8_589_934_592), "8 GiB");
        // Round trip over every size an `-b 8 -e 8G -f 2` sweep prints.
        for shift in 3..=33 {
            let size = 1u64 << shift;
            assert_eq!(parse_size(&format_size(size)), Ok(size), "{size}");
        }
    }

    #[test]
    fn table_aligns_and_trims() {
        let t = render_table(
            &[
                ("ID", Align::Right),
                ("NAME", Align::Left),
                ("X", Align::Left),
            ],
            &[
                vec!["1".into(), "all_reduce".into(), "".into()],
                vec!["12".into(), "bc".into(), "é".into()],
            ],
        );
        assert_eq!(t, "ID  NAME        X\n 1  all_reduce\n12  bc          é\n");
    }

    #[test]
    fn filters_map_limits() {
        let f = FilterArgs {
            collective: Some("all_reduce".into()),
            ..FilterArgs::default()
        };
        assert_eq!(f.to_filter(Some(20)).limit, Some(20));
        assert_eq!(
            f.to_filter(Some(20)).collective.as_deref(),
            Some("all_reduce")
        );
        let all = FilterArgs {
            limit: Some(0),
            ..FilterArgs::default()
        };
        assert_eq!(all.to_filter(Some(20)).limit, None);
        let three = FilterArgs {
            limit: Some(3),
            ..FilterArgs::default()
        };
        assert_eq!(three.to_filter(None).limit, Some(3));
    }

    #[test]
    fn short_times_and_replays() {
        assert_eq!(short_time("2026-11-29T22:10:07Z"), "2026-11-29 22:10");
        assert_eq!(short_time("odd"), "odd");
        let mut env = BTreeMap::new();
        assert_eq!(replay_of(&env), None);
        env.insert(
            REPLAY_ENV.to_string(),
            "h200x2-nvlink/all_reduce_g2.txt".into(),
        );
        assert_eq!(replay_of(&env), Some("h200x2-nvlink/all_reduce_g2.txt"));
        assert_eq!(replay_footnote([]), "");
        let note = replay_footnote([(9, "b.txt"), (4, "a.txt")]);
        assert!(note.starts_with("(replay) = "), "{note}");
        assert!(note.contains("not a measurement"), "{note}");
        assert!(
            note.ends_with("(run 4 replays a.txt; run 9 replays b.txt)\n"),
            "{note}"
        );
    }
}
