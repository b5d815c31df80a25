//! The run history: one SQLite file that keeps every nccl-tests run the launcher ran or
//! imported, so that "is this cluster as fast as last week, and which node is slow?" is a
//! query rather than a hunt through old logs.
//!
//! # Layout
//! - [`model`]: what an importer or runner hands in ([`NewRun`], [`NewRow`],
//!   [`NewNodeResult`]) and what queries hand back ([`RunSummary`], [`RunDetail`], ...).
//!   Query results derive `Serialize`, so `--json` is one `serde_json` call.
//! - [`error`]: [`HistoryError`], and the one reading of a SQLite error as one (a leaf:
//!   `store` -> `schema` -> `error` runs one way).
//! - [`schema`]: the append-only migration list, tracked by `PRAGMA user_version`.
//! - [`store`]: [`History`], the open database: import, list, show, node history,
//!   baselines, comparisons, export.
//! - [`compare`]: the pure comparison of two bandwidth series (no SQL; unit tested on data).
//! - [`export`]: CSV and JSON writers for result rows with their run's metadata.
//! - [`hash`]: SHA-256 of raw outputs (times and durations are [`crate::units`]).
//!
//! # Where the file lives (contract)
//! `--db PATH` > `GPUDIRECT_DB` > `$XDG_DATA_HOME/gpudirect/history.sqlite` >
//! `$HOME/.local/share/gpudirect/history.sqlite`: see [`resolve_db_path`] (pure) and
//! [`db_path_from_env`] (reads the environment, creates the parent folder).
//!
//! # Safety of the file
//! [`History::open`] never overwrites or deletes a file it does not recognise: a file that
//! is not SQLite, a SQLite database of another program, a corrupt one or one written by a
//! newer gpudirect is refused with an error naming the file, before anything is written.
//! Concurrent writers (several `gpudirect run` or `import` at once) wait for each other
//! through WAL mode and a busy timeout instead of failing with "database is locked".
//!
//! # Example
//! ```no_run
//! use gpudirect::history::{History, NewRun, NewRow, Placement, RunFilter, RunStatus};
//! # fn main() -> Result<(), gpudirect::history::HistoryError> {
//! let mut db = History::open(std::path::Path::new("/tmp/history.sqlite"))?;
//! let run = NewRun {
//!     collective: "all_reduce".into(),
//!     status: RunStatus::Ok,
//!     nodes: vec!["gpu1".into(), "gpu2".into()],
//!     rows: vec![NewRow {
//!         size_bytes: 8 << 30, count: 2 << 30, dtype: "float".into(), redop: "sum".into(),
//!         root: None, placement: Placement::Out, time_us: 49_000.0, algbw: 175.3,
//!         busbw: 175.3, wrong: Some(0), algorithm: None, protocol: None,
//!     }],
//!     ..NewRun::default()
//! };
//! let id = db.import_run(&run, false)?.run_id();
//! let newest = db.list_runs(&RunFilter { limit: Some(10), ..RunFilter::default() })?;
//! assert_eq!(newest[0].id, id);
//! # Ok(()) }
//! ```

pub mod compare;
pub mod error;
pub mod export;
pub mod hash;
pub mod model;
pub mod schema;
pub mod store;
pub mod vets;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

pub use compare::{
    compare_series, Band, BandResult, CompareOptions, CompareRow, Counts, RowKey, SeriesComparison,
    Verdict, DEFAULT_BAND_SPLIT_BYTES,
};
pub use error::HistoryError;
pub use export::ExportFormat;
pub use model::*;
pub use store::{replay_of, Comparison, History, Reference, REPLAY_ENV};
pub use vets::{NewVet, VetSummary};

/// Where the history file is, from the contract's sources in priority order (pure).
///
/// `explicit` is `--db`; the others are the values of `GPUDIRECT_DB`, `XDG_DATA_HOME` and
/// `HOME`. Empty values count as unset, and a relative `XDG_DATA_HOME` is ignored as the
/// XDG base directory spec requires.
pub fn resolve_db_path(
    explicit: Option<&Path>,
    gpudirect_db: Option<&OsStr>,
    xdg_data_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> Result<PathBuf, HistoryError> {
    fn set(v: Option<&OsStr>) -> Option<&OsStr> {
        v.filter(|s| !s.is_empty())
    }
    if let Some(p) = explicit.filter(|p| !p.as_os_str().is_empty()) {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = set(gpudirect_db) {
        return Ok(PathBuf::from(p));
    }
    let tail = Path::new("gpudirect").join("history.sqlite");
    if let Some(x) = set(xdg_data_home)
        .map(Path::new)
        .filter(|p| p.is_absolute())
    {
        return Ok(x.join(tail));
    }
    if let Some(h) = set(home) {
        return Ok(Path::new(h).join(".local").join("share").join(tail));
    }
    Err(HistoryError::NoLocation)
}

/// [`resolve_db_path`] with the real environment; creates nothing (for reading).
pub fn locate_db(explicit: Option<&Path>) -> Result<PathBuf, HistoryError> {
    let var = std::env::var_os;
    resolve_db_path(
        explicit,
        var("GPUDIRECT_DB").as_deref(),
        var("XDG_DATA_HOME").as_deref(),
        var("HOME").as_deref(),
    )
}

/// [`locate_db`], then creates the parent folder (for recording).
pub fn db_path_from_env(explicit: Option<&Path>) -> Result<PathBuf, HistoryError> {
    let path = locate_db(explicit)?;
    create_parent(&path)?;
    Ok(path)
}

/// Creates the folder that will hold `path`, if any is named.
pub(crate) fn create_parent(path: &Path) -> Result<(), HistoryError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            std::fs::create_dir_all(dir).map_err(|source| HistoryError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn db_path_priority() {
        let r = |e: Option<&str>, g, x, h| resolve_db_path(e.map(Path::new), g, x, h).unwrap();
        let local_share = "/home/u/.local/share/gpudirect/history.sqlite";
        // (--db, GPUDIRECT_DB, XDG_DATA_HOME, HOME) and the path they give.
        for (db, db_env, xdg, home, expected) in [
            (Some("/a.sqlite"), os("/b"), os("/x"), os("/h"), "/a.sqlite"),
            (None, os("/b.sqlite"), os("/x"), os("/h"), "/b.sqlite"),
            (
                None,
                None,
                os("/x"),
                os("/h"),
                "/x/gpudirect/history.sqlite",
            ),
            (None, os(""), os(""), os("/home/u"), local_share),
            // A relative XDG_DATA_HOME is invalid per the spec and skipped.
            (None, None, os("rel/data"), os("/home/u"), local_share),
        ] {
            let path = r(db, db_env, xdg, home);
            assert_eq!(path, PathBuf::from(expected), "{db:?} {db_env:?} {xdg:?}");
        }
        let err = resolve_db_path(None, None, None, None).unwrap_err();
        assert!(err.to_string().contains("--db"), "{err}");
    }
}
