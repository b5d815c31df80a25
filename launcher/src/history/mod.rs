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
pub use vets::{NewVet, VetFacts, VetSummary};

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

/// Creates the folder that will hold `path`, if any is named, one folder at a time and
/// never through another user's symbolic link (security review T9: root's `--db` under a
/// user's link made root's folders, and a history, wherever the link pointed).
pub(crate) fn create_parent(path: &Path) -> Result<(), HistoryError> {
    create_parent_as(path, nix::unistd::geteuid().as_raw())
}

/// [`create_parent`] for the user `me`: a link owned by root or `me` is followed (a home
/// folder under a linked `/home`), another's is not, when folders are to be made beyond it.
fn create_parent_as(path: &Path, me: u32) -> Result<(), HistoryError> {
    use std::os::unix::fs::MetadataExt;
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    let fail = |at: &Path, source| HistoryError::CreateDir {
        path: at.to_path_buf(),
        source,
    };
    if dir.is_dir() {
        return Ok(());
    }
    let mut so_far = PathBuf::new();
    for part in dir.components() {
        so_far.push(part);
        match std::fs::symlink_metadata(&so_far) {
            Ok(meta) if meta.file_type().is_symlink() && meta.uid() != 0 && meta.uid() != me => {
                return Err(fail(
                    &so_far,
                    std::io::Error::other(format!(
                        "it is a symbolic link of uid {}, and no folder is made through another user's link",
                        meta.uid()
                    )),
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // One folder, not a path: an entry that appears meanwhile is looked at again.
                match std::fs::create_dir(&so_far) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        let meta =
                            std::fs::symlink_metadata(&so_far).map_err(|e| fail(&so_far, e))?;
                        if !meta.is_dir() {
                            return Err(fail(
                                &so_far,
                                std::io::Error::other("it appeared meanwhile, and is not a folder"),
                            ));
                        }
                    }
                    Err(e) => return Err(fail(&so_far, e)),
                }
            }
            Err(e) => return Err(fail(&so_far, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_folder_is_never_made_through_another_users_link() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let db = link.join("a/b/history.sqlite");
        // Root trusts its own links: as root the link is made another uid's; otherwise it
        // is this test's user's, and is seen from another user.
        let me = nix::unistd::geteuid().as_raw();
        let (owner, other) = if me == 0 {
            std::os::unix::fs::lchown(&link, Some(65534), None).unwrap();
            (65534, 0)
        } else {
            (me, me + 1)
        };
        let err = create_parent_as(&db, other).unwrap_err().to_string();
        assert!(err.contains(&link.display().to_string()), "{err}");
        assert!(err.contains("symbolic link of uid"), "{err}");
        assert!(
            !target.join("a").exists(),
            "a folder was made through the link"
        );
        // Its owner's own link is followed, and every missing folder is made.
        create_parent_as(&db, owner).unwrap();
        assert!(target.join("a/b").is_dir());
        // A folder there already needs nothing made, whoever's link leads to it.
        create_parent_as(&db, other).unwrap();
    }

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
