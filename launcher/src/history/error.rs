//! [`HistoryError`], and [`classify`]: the one reading of a SQLite error as a history error.
//!
//! A leaf of `history/`: [`super::store`] and [`super::schema`] both depend on it, and it on
//! neither, so `store -> schema -> error` runs one way (cargo's `util/sqlite.rs` has the same
//! shape: it knows only its crate's error type).

use std::path::{Path, PathBuf};

use rusqlite::ErrorCode;

use super::model::RunId;

/// Everything that can go wrong with the history. Messages name the file and say what
/// to do, because the CLI prints them as they are.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// Neither `--db`, `GPUDIRECT_DB`, `XDG_DATA_HOME` nor `HOME` gave a location.
    #[error(
        "cannot tell where the history lives: none of --db, GPUDIRECT_DB, XDG_DATA_HOME, \
         HOME is set; pass --db PATH or set GPUDIRECT_DB"
    )]
    NoLocation,
    /// The folder that should hold the file could not be created.
    #[error("cannot create the folder {} for the history: {source}; pass --db PATH to keep it elsewhere", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `open_existing` found no file.
    #[error("no history at {}: nothing was run or imported yet (or pass --db PATH)", path.display())]
    Missing {
        /// The file that is not there.
        path: PathBuf,
    },
    /// The file exists but is not a gpudirect history (or is damaged); it is left as is.
    #[error("{} is not a gpudirect history ({reason}); move it aside or pass --db", path.display())]
    NotAHistory {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// Root was to record in a file, or a folder, that someone else can change (S6).
    #[error(
        "the history {}: {problem}; as root, gpudirect records only in a history that root \
         alone can change: pass --db with a file in a root-only folder (for example \
         /var/lib/gpudirect/history.sqlite)",
        path.display()
    )]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Who else can change it, and where.
        problem: String,
    },
    /// The file was written by a newer gpudirect; nothing was written to it.
    #[error(
        "{} has history schema version {found}, newer than the {supported} this gpudirect \
         knows; it was left untouched: upgrade gpudirect, or pass --db to use another file",
        path.display()
    )]
    SchemaTooNew {
        /// The file.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// The newest version this binary knows.
        supported: i64,
    },
    /// Any other SQLite failure, with what was being done.
    #[error("history {}: {action}: {source}", path.display())]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What the history was doing.
        action: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// No run has that id.
    #[error("no run {id} in the history at {}; `gpudirect history` lists the ids", path.display())]
    NoSuchRun {
        /// The file.
        path: PathBuf,
        /// The id asked for.
        id: i64,
    },
    /// `compare_to_baseline` found no earlier good run measuring the same thing.
    #[error(
        "no earlier ok run of {what} to build a baseline for run {run_id}; compare it with \
         a run id instead, or record more runs of that kind"
    )]
    NoBaseline {
        /// The candidate run.
        run_id: i64,
        /// What was looked for.
        what: String,
    },
    /// `compare_to_label` found no ok run with that label other than the candidate.
    #[error(
        "no ok run labelled `{label}` other than run {candidate} in the history at {}; \
         `gpudirect history --label {label}` lists them, and `gpudirect import --label \
         {label} FILE` records one",
        path.display()
    )]
    NoLabeledRun {
        /// The file.
        path: PathBuf,
        /// The label asked for.
        label: String,
        /// The candidate run.
        candidate: RunId,
    },
    /// A run handed to `import_run` is not storable as given.
    #[error("run not recorded: {field}: {reason}")]
    InvalidRun {
        /// The field at fault, e.g. `rows[3].size_bytes`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A comparison option is out of range.
    #[error("invalid comparison option {option}: {reason}")]
    InvalidOption {
        /// The option, e.g. `tolerance`.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// Writing an export failed.
    #[error("writing the export failed: {0}")]
    Write(#[from] std::io::Error),
    /// Encoding JSON failed (a stored value that JSON cannot hold).
    #[error("encoding JSON failed: {0}")]
    Json(#[from] serde_json::Error),
}

/// Turns a SQLite error into a [`HistoryError`], recognising a file that is not a
/// database or is damaged so that the message says so and suggests moving it aside.
pub(crate) fn classify(path: &Path, action: String, source: rusqlite::Error) -> HistoryError {
    match source.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => HistoryError::NotAHistory {
            path: path.to_path_buf(),
            reason: "not a SQLite database".into(),
        },
        Some(ErrorCode::DatabaseCorrupt) => HistoryError::NotAHistory {
            path: path.to_path_buf(),
            reason: format!("damaged or truncated: {source}, while {action}"),
        },
        _ => HistoryError::Sqlite {
            path: path.to_path_buf(),
            action,
            source,
        },
    }
}
