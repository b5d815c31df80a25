//! Everything the launcher prints on stdout goes through here, so that a reader that went
//! away (`gpudirect history | head -1`) ends a command quietly instead of panicking the way
//! `println!` does, and so that every table lines up by one rule.
//!
//! Notes, progress and warnings go to stderr (through `tracing` or [`note`]); stdout
//! carries only what a pipe wants: tables, hostfiles, JSON. A file a command writes for
//! others to read goes through [`replace_file`], so that no reader sees half of it. Text
//! from outside goes to the terminal through [`shown`] (tables' cells always do).

pub mod compare;
mod progress;
pub mod shown;
mod table;

use std::io::{self, Write};

use serde::Serialize;

use crate::history::{NodeResult, RunId};
use crate::units::human_size;

pub use progress::Progress;
pub use shown::{shown, shown_text};
pub use table::{render_table, Align};

/// Writes `text` to stdout and flushes. Unlike `print!`, which panics, a reader that went
/// away comes back as an `io::Error` of kind `BrokenPipe`, which `main` ends on quietly.
pub fn emit(text: &str) -> io::Result<()> {
    emit_bytes(text.as_bytes())
}

/// [`emit`] for bytes that need not be UTF-8 (a run's raw output, as recorded).
pub fn emit_bytes(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// `println!` through [`emit`]: `outln!("{} runs", n)?`.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::emit("\n")
    };
    ($($arg:tt)*) => {
        $crate::output::emit(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` through [`note`]: `noteln!("gpudirect run: {n} cells")`. Unlike
/// `eprintln!`, a closed stderr does not panic.
#[macro_export]
macro_rules! noteln {
    ($($arg:tt)*) => {
        $crate::output::note(&format!($($arg)*))
    };
}

/// A value as pretty JSON on stdout, with a final newline.
pub fn emit_json<T: Serialize + ?Sized>(value: &T) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    emit(&(text + "\n"))
}

/// A line for the person at the terminal, on stderr; a closed stderr is ignored (the
/// command's result is on stdout and its exit status).
pub fn note(text: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

/// A bandwidth in GB/s with two decimals, as nccl-tests prints it; `-` when unknown.
pub fn gbps(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2}"))
}

/// busbw as a share of a node's line rate (GB/s, from the profile's `line_rate_gbit`):
/// `43%`; `None` when either is unknown. busbw between nodes is bounded by what each
/// node's NICs carry, so this says how much of the fabric a run used.
pub fn line_share(busbw: Option<f64>, line_rate_gbps: Option<f64>) -> Option<String> {
    let (busbw, rate) = (busbw?, line_rate_gbps?);
    (busbw.is_finite() && rate.is_finite() && rate > 0.0)
        .then(|| format!("{:.0}%", busbw / rate * 100.0))
}

/// An optional text, `-` when missing.
pub fn or_dash(value: Option<&str>) -> String {
    value.map_or_else(|| "-".into(), str::to_string)
}

/// The columns of a per-node validation result, after the columns saying whose it is
/// (`gpudirect show`'s node, `gpudirect history --node`'s run).
pub const NODE_RESULT_COLUMNS: [(&str, Align); 5] = [
    ("ROLE", Align::Left),
    ("PARTNER", Align::Left),
    ("SIZE", Align::Right),
    ("BUSBW", Align::Right),
    ("VERDICT", Align::Left),
];

/// A per-node validation result's cells under [`NODE_RESULT_COLUMNS`].
pub fn node_result_cells(result: &NodeResult) -> [String; 5] {
    [
        or_dash(result.role.as_deref()),
        or_dash(result.partner.as_deref()),
        result.size_bytes.map_or("-".into(), human_size),
        gbps(result.busbw),
        or_dash(result.verdict.as_deref()),
    ]
}

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

/// `path` replaced whole by `bytes`: written beside it, synced, then renamed over it, so a
/// reader sees the old file or the new one, never part of either.
pub fn replace_file(path: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// An error and each of its sources, joined by `: ` (the form the binary's `{:#}` gives an
/// error chain): what a library's typed error says in full.
pub fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_footnote_names_each_recording() {
        assert_eq!(replay_footnote([]), "");
        let note = replay_footnote([(9, "b.txt"), (4, "a.txt")]);
        assert!(note.starts_with("(replay) = "), "{note}");
        assert!(note.contains("not a measurement"), "{note}");
        assert!(
            note.ends_with("(run 4 replays a.txt; run 9 replays b.txt)\n"),
            "{note}"
        );
    }

    #[test]
    fn dashes_for_missing_values() {
        assert_eq!(gbps(None), "-");
        assert_eq!(gbps(Some(346.938)), "346.94");
        assert_eq!(or_dash(None), "-");
        assert_eq!(or_dash(Some("x")), "x");
    }
}
