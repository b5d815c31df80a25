//! [`History`]: the open history file and every query on it.
//!
//! SQL lives here and only here; the comparison logic it feeds is in [`super::compare`].
//! Each write is one `BEGIN IMMEDIATE` transaction, so a run is recorded whole or not at
//! all, and a writer that finds another one busy waits (busy timeout) rather than failing.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use rusqlite::types::{Type, Value};
use rusqlite::{
    params, params_from_iter, Connection, ErrorCode, OpenFlags, Row, TransactionBehavior,
};
use serde::Serialize;

use super::compare::{collapse, compare_series, median, CompareOptions, RowKey, SeriesComparison};
use super::error::classify;
use super::hash::sha256_hex;
use super::model::*;
use super::{schema, HistoryError};
use crate::units::{format_rfc3339, now_unix};

/// How long a writer waits for another writer before giving up. Imports take
/// milliseconds; ten seconds covers a burst of concurrent `gpudirect run` cells.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How far ahead of now a run's date may be and still count in a baseline: clocks of
/// nodes differ by seconds, an output dated a day ahead was dated by hand.
pub const FUTURE_SKEW: Duration = Duration::from_secs(3600);

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Looks at the file's first bytes before SQLite does: SQLite itself would only notice a
/// foreign file at the first query, and an empty or missing file is a new history.
///
/// The file is opened once, without following a symlink and without blocking, and what
/// is checked is that descriptor: a FIFO or a link swapped in after a first look can
/// neither hang the command nor be what is read (security review S6).
fn check_header(path: &Path) -> Result<(), HistoryError> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_ours = |reason: String| HistoryError::NotAHistory {
        path: path.to_path_buf(),
        reason,
    };
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => {
            return Err(not_ours(
                "a symbolic link: give --db the file it points at".into(),
            ))
        }
        Err(e) => return Err(not_ours(format!("cannot read it: {e}"))),
    };
    let meta = file
        .metadata()
        .map_err(|e| not_ours(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(not_ours("not a regular file".into()));
    }
    if meta.len() == 0 {
        return Ok(());
    }
    let mut head = Vec::with_capacity(16);
    file.take(16)
        .read_to_end(&mut head)
        .map_err(|e| not_ours(format!("cannot read it: {e}")))?;
    if head.as_slice() != SQLITE_MAGIC {
        return Err(not_ours(
            "not a SQLite database: its first bytes are not the SQLite header".into(),
        ));
    }
    Ok(())
}

fn to_i64(value: u64, field: impl FnOnce() -> String) -> Result<i64, HistoryError> {
    i64::try_from(value).map_err(|_| HistoryError::InvalidRun {
        field: field(),
        reason: format!("{value} is larger than the history can store (2^63 - 1)"),
    })
}

/// SQLite turns NaN into NULL anyway; doing it here makes infinities NULL too.
fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

fn get_u64(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let v: i64 = row.get(idx)?;
    u64::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, v))
}

fn get_opt_u64(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<u64>> {
    let v: Option<i64> = row.get(idx)?;
    v.map(|v| u64::try_from(v).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, v)))
        .transpose()
}

fn get_enum<T: FromStr<Err = String>>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    text.parse()
        .map_err(|e: String| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, e.into()))
}

fn get_time(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    Ok(row.get::<_, Option<i64>>(idx)?.map(format_rfc3339))
}

fn get_json<T: serde::de::DeserializeOwned>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
}

/// A row read one column after another, in the order its `SELECT` lists them: a reader
/// names no column number, so a column added to a list is read at the same place in its
/// reader and nothing after it is renumbered, and a query that selects more columns after
/// a shared list ([`summary_columns`], [`RESULT_COLUMNS`]) reads on where the list's reader
/// stopped. Struct literals evaluate their fields in the order written, so a reader writes
/// its fields in the list's order.
pub(super) struct Columns<'a, 'stmt> {
    row: &'a Row<'stmt>,
    next: usize,
}

impl<'a, 'stmt> Columns<'a, 'stmt> {
    /// The row, from its first column.
    pub(super) fn new(row: &'a Row<'stmt>) -> Self {
        Columns { row, next: 0 }
    }

    /// The row, from column `first` (where a reader of an earlier row of the same query
    /// stopped: [`Columns::position`]).
    pub(super) fn starting_at(row: &'a Row<'stmt>, first: usize) -> Self {
        Columns { row, next: first }
    }

    /// The column the next read takes.
    pub(super) fn position(&self) -> usize {
        self.next
    }

    fn take(&mut self) -> usize {
        self.next += 1;
        self.next - 1
    }

    /// The next column as it is stored.
    pub(super) fn get<T: rusqlite::types::FromSql>(&mut self) -> rusqlite::Result<T> {
        let i = self.take();
        self.row.get(i)
    }

    /// The next column, an integer that must not be negative.
    pub(super) fn u64(&mut self) -> rusqlite::Result<u64> {
        let i = self.take();
        get_u64(self.row, i)
    }

    /// The next column, [`Columns::u64`] or NULL.
    pub(super) fn opt_u64(&mut self) -> rusqlite::Result<Option<u64>> {
        let i = self.take();
        get_opt_u64(self.row, i)
    }

    /// The next column, text naming a value of `T` (a status, a launcher).
    pub(super) fn parsed<T: FromStr<Err = String>>(&mut self) -> rusqlite::Result<T> {
        let i = self.take();
        get_enum(self.row, i)
    }

    /// The next column, unix seconds, as RFC 3339.
    pub(super) fn rfc3339(&mut self) -> rusqlite::Result<String> {
        Ok(format_rfc3339(self.get()?))
    }

    /// The next column, [`Columns::rfc3339`] or NULL.
    pub(super) fn time(&mut self) -> rusqlite::Result<Option<String>> {
        let i = self.take();
        get_time(self.row, i)
    }

    /// The next column, JSON text of a `T`.
    pub(super) fn json<T: serde::de::DeserializeOwned>(&mut self) -> rusqlite::Result<T> {
        let i = self.take();
        get_json(self.row, i)
    }
}

/// Columns of a [`RunSummary`], in the order [`summary_from_row`] reads them. One of them
/// is the recording a run replayed ([`replay_of_sql`]), read in SQL (JSON1) so that a
/// listing needs no query per run.
pub(super) fn summary_columns() -> String {
    format!(
        "runs.id, runs.at, runs.started_at, runs.finished_at, \
    runs.imported_at, runs.cluster, runs.job_id, runs.step_id, runs.nodelist, runs.node_count, \
    runs.gpus_per_node, runs.total_ranks, runs.collective, runs.variant, runs.launcher, \
    runs.status, runs.exit_code, runs.transport, runs.avg_busbw, \
    (SELECT x.busbw FROM results x WHERE x.run_id = runs.id AND x.busbw IS NOT NULL \
        ORDER BY x.size_bytes DESC, x.placement = 'out' DESC, x.seq DESC LIMIT 1), \
    (SELECT max(x.size_bytes) FROM results x WHERE x.run_id = runs.id), \
    (SELECT count(*) FROM results x WHERE x.run_id = runs.id), \
    runs.source_path, runs.output_sha256, runs.label, {}, runs.line_rate_gbps, runs.tool",
        replay_of_sql("runs")
    )
}

/// The `env` key that marks a run recorded from the nccl-tests stand-in (see
/// `crate::record`); [`RunSummary::replay_of`] is its value.
pub const REPLAY_ENV: &str = "GPUDIRECT_STANDIN_REPLAY";

/// The recording a run replayed, if its environment says it came from the nccl-tests
/// stand-in.
pub fn replay_of(env: &BTreeMap<String, String>) -> Option<&str> {
    env.get(REPLAY_ENV).map(String::as_str)
}

/// Columns of a [`ResultRow`] of the `results` table aliased `x`, in the order
/// [`result_row_from`] reads them.
pub(super) const RESULT_COLUMNS: &str = "x.size_bytes, x.count, x.dtype, x.redop, x.root, \
    x.placement, x.time_us, x.algbw, x.busbw, x.wrong, x.algorithm, x.protocol";

/// The [`ResultRow`] of a query's [`RESULT_COLUMNS`], read from where `c` stands.
pub(super) fn result_row_from(c: &mut Columns<'_, '_>) -> rusqlite::Result<ResultRow> {
    Ok(ResultRow {
        size_bytes: c.u64()?,
        count: c.u64()?,
        dtype: c.get()?,
        redop: c.get()?,
        root: c.get()?,
        placement: c.parsed()?,
        time_us: c.get()?,
        algbw: c.get()?,
        busbw: c.get()?,
        wrong: c.opt_u64()?,
        algorithm: c.get()?,
        protocol: c.get()?,
    })
}

/// SQL giving the recording the run `alias` replayed ([`REPLAY_ENV`]'s value in its stored
/// env), NULL for a measurement: the listing's [`RunSummary::replay_of`] and the export's
/// last column (the cheap `instr` first, so most rows parse no JSON).
fn replay_of_sql(alias: &str) -> String {
    format!(
        "CASE WHEN instr({alias}.env_json, '\"{REPLAY_ENV}\"') > 0 AND json_valid({alias}.env_json) \
         THEN json_extract({alias}.env_json, '$.{REPLAY_ENV}') END"
    )
}

/// SQL that is 1 when the run `alias` is a stand-in replay, else 0: the listing's
/// [`replay_of_sql`] column, tested.
fn is_replay_sql(alias: &str) -> String {
    format!("(({}) IS NOT NULL)", replay_of_sql(alias))
}

/// The [`RunSummary`] of a query's [`summary_columns`], read from where `c` stands.
pub(super) fn summary_from_row(c: &mut Columns<'_, '_>) -> rusqlite::Result<RunSummary> {
    Ok(RunSummary {
        id: c.get()?,
        at: c.rfc3339()?,
        started_at: c.time()?,
        finished_at: c.time()?,
        imported_at: c.rfc3339()?,
        cluster: c.get()?,
        job_id: c.get()?,
        step_id: c.get()?,
        nodelist: c.get()?,
        node_count: c.get()?,
        gpus_per_node: c.get()?,
        total_ranks: c.get()?,
        collective: c.get()?,
        variant: c.get()?,
        launcher: c.parsed()?,
        status: c.parsed()?,
        exit_code: c.get()?,
        transport: c.get()?,
        avg_busbw: c.get()?,
        busbw: c.get()?,
        max_size_bytes: c.opt_u64()?,
        row_count: c.u64()?,
        source_path: c.get()?,
        output_sha256: c.get()?,
        label: c.get()?,
        replay_of: c.get()?,
        line_rate_gbps: c.get()?,
        tool: c.parsed()?,
    })
}

/// SQL `WHERE` text and parameters for a [`RunFilter`] on `runs`.
pub(crate) fn filter_sql(filter: &RunFilter) -> (String, Vec<Value>) {
    let mut clauses: Vec<&str> = Vec::new();
    let mut values = Vec::new();
    let mut text = |clause, value: &Option<String>| {
        if let Some(v) = value {
            clauses.push(clause);
            values.push(Value::Text(v.clone()));
        }
    };
    text("runs.collective = ?", &filter.collective);
    text("runs.cluster = ?", &filter.cluster);
    text("runs.variant = ?", &filter.variant);
    text("runs.label = ?", &filter.label);
    text(
        "runs.id IN (SELECT run_id FROM run_nodes WHERE node = ?)",
        &filter.node,
    );
    text(
        "runs.status = ?",
        &filter.status.map(|s| s.as_str().to_string()),
    );
    if let Some(since) = filter.since {
        clauses.push("runs.at >= ?");
        values.push(Value::Integer(since));
    }
    let sql = if clauses.is_empty() {
        "1".to_string()
    } else {
        clauses.join(" AND ")
    };
    (sql, values)
}

/// What a comparison was made against.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Reference {
    /// Another run.
    Run {
        /// Its id.
        run_id: RunId,
    },
    /// The per-key median of these earlier good runs, newest first.
    Baseline {
        /// Their ids.
        run_ids: Vec<RunId>,
    },
    /// The newest ok run carrying a label (a named baseline).
    Labeled {
        /// The label asked for.
        label: String,
        /// The run it named.
        run_id: RunId,
    },
}

/// `compare`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// What the candidate was compared with.
    pub reference: Reference,
    /// The run judged.
    pub candidate: RunId,
    /// Rows, counts and verdict.
    #[serde(flatten)]
    pub result: SeriesComparison,
}

/// An open history file. One per thread; open another for another thread or process.
pub struct History {
    pub(crate) conn: Connection,
    pub(crate) path: PathBuf,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").field("path", &self.path).finish()
    }
}

impl History {
    /// Opens the history at `path`, creating the file (and its folder) if missing and
    /// upgrading its schema if older. Refuses, before writing anything, a file that is not
    /// a gpudirect history or was written by a newer gpudirect.
    pub fn open(path: &Path) -> Result<Self, HistoryError> {
        super::create_parent(path)?;
        Self::open_inner(path)
    }

    /// [`History::open`] for root reading figures that decide drains: the file, or while
    /// it does not exist the nearest folder above it, and every folder above, must pass
    /// `probe`'s ownership rule (root's alone, or a test's widened one). Checked before
    /// anything is created (security review S6).
    pub fn open_trusted(
        path: &Path,
        probe: &impl gpudirect_core::resolve::NodeProbe,
    ) -> Result<Self, HistoryError> {
        use gpudirect_core::resolve::PathKind;
        let text = path.display().to_string();
        if let Some(problem) = probe.untrusted(&text, PathKind::Code) {
            return Err(HistoryError::Untrusted {
                path: path.to_path_buf(),
                problem,
            });
        }
        Self::open(path)
    }

    /// Like [`History::open`], but a missing file is an error ([`HistoryError::Missing`]):
    /// for read commands, which should not leave an empty history behind a typo in `--db`.
    pub fn open_existing(path: &Path) -> Result<Self, HistoryError> {
        if !path.exists() {
            return Err(HistoryError::Missing {
                path: path.to_path_buf(),
            });
        }
        Self::open_inner(path)
    }

    fn open_inner(path: &Path) -> Result<Self, HistoryError> {
        check_header(path)?;
        let err = |action: &str| {
            let action = action.to_string();
            move |e| classify(path, action, e)
        };
        // No SQLITE_OPEN_URI: a path is a path, `file:` names included.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags).map_err(err("opening"))?;
        // Connection settings only: nothing here writes to the file.
        Self::harden(&conn).map_err(err("setting SQLite's defensive options"))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(err("setting the busy timeout"))?;
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(err("enabling foreign keys"))?;
        // Refuse foreign, damaged or newer files before the first write (the journal mode
        // change below writes the header).
        let (version, app) = schema::read_versions(&conn, path)?;
        schema::check_versions(path, version, app)?;
        schema::migrate(&mut conn, path)?;
        Self::enable_wal(&conn, path)?;
        // In WAL mode NORMAL is safe from corruption; a power cut may lose the last commits.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err("setting synchronous mode"))?;
        Ok(History {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// A history may be another user's file, opened by root (`import`, `history`, `vet
    /// --drain` with a user's `--db`): nothing its writer stored runs inside our statements
    /// (security review T9: a trigger in the file hung root's import). Our schema has no
    /// trigger and no view, so none is ever run; functions in the schema must be safe ones
    /// (`trusted_schema` off); and the defensive mode forbids writing the schema or pages
    /// by hand.
    fn harden(conn: &Connection) -> rusqlite::Result<()> {
        use rusqlite::config::DbConfig;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_VIEW, false)?;
        Ok(())
    }

    /// WAL lets readers run while a writer writes. Switching needs a moment with no other
    /// connection, so a busy answer is retried; a file system without shared memory (some
    /// network file systems) keeps its mode, with a warning.
    fn enable_wal(conn: &Connection, path: &Path) -> Result<(), HistoryError> {
        let mut last = None;
        for _ in 0..100 {
            let current: rusqlite::Result<String> =
                conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0));
            match current {
                Ok(mode) => {
                    if !mode.eq_ignore_ascii_case("wal") {
                        tracing::warn!(path = %path.display(), %mode, "history not in WAL mode; concurrent writers will wait longer");
                    }
                    return Ok(());
                }
                Err(e) if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(classify(path, "switching to WAL mode".into(), e)),
            }
        }
        match last {
            Some(e) => Err(classify(
                path,
                "switching to WAL mode (busy for 10 s)".into(),
                e,
            )),
            None => Ok(()),
        }
    }

    /// The file this history lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn err(
        &self,
        action: impl Into<String>,
    ) -> impl FnOnce(rusqlite::Error) -> HistoryError + '_ {
        let action = action.into();
        move |e| classify(&self.path, action, e)
    }

    /// Records a run with its rows and per-node results, all in one transaction.
    ///
    /// When the run has a `source_path`, the same raw output (by SHA-256) from the same
    /// source is recorded once: a second import returns [`ImportOutcome::Duplicate`] with
    /// the existing id and writes nothing, unless `force` is set. Runs without a source
    /// (from `gpudirect run`) are always inserted: a replayed output may repeat bytes.
    pub fn import_run(&mut self, run: &NewRun, force: bool) -> Result<ImportOutcome, HistoryError> {
        self.record_run(run, force, None)
    }

    /// Records `run` in place of the run `placeholder` (deleted in the same transaction):
    /// `gpudirect run` writes an `interrupted` placeholder before each cell, so a launcher
    /// killed mid-cell leaves the cell marked, and replaces it when the cell ends.
    pub fn replace_run(&mut self, placeholder: RunId, run: &NewRun) -> Result<RunId, HistoryError> {
        self.record_run(run, true, Some(placeholder))
            .map(ImportOutcome::run_id)
    }

    fn record_run(
        &mut self,
        run: &NewRun,
        force: bool,
        replacing: Option<RunId>,
    ) -> Result<ImportOutcome, HistoryError> {
        validate(run)?;
        let sha = sha256_hex(&run.raw_output);
        let imported_at = now_unix();
        let at = run.started_at.or(run.finished_at).unwrap_or(imported_at);
        let node_count = run.node_count.or_else(|| {
            (!run.nodes.is_empty()).then(|| u32::try_from(run.nodes.len()).unwrap_or(u32::MAX))
        });
        let env_json = serde_json::to_string(&run.provenance.env)?;
        let failures_json = serde_json::to_string(&run.failures)?;
        let notes_json = serde_json::to_string(&run.provenance.notes)?;
        let path = self.path.clone();
        let err = |action: &str| {
            let action = action.to_string();
            let path = path.clone();
            move |e| classify(&path, action, e)
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err("starting the import"))?;
        if let Some(old) = replacing {
            tx.execute("DELETE FROM runs WHERE id = ?1", params![old])
                .map_err(err("replacing the cell's placeholder"))?;
        }
        if let (Some(source), false) = (&run.source_path, force) {
            let existing: Option<RunId> = tx
                .query_row(
                    "SELECT id FROM runs WHERE output_sha256 = ?1 AND source_path = ?2 ORDER BY id LIMIT 1",
                    params![sha, source],
                    |r| r.get(0),
                )
                .map(Some)
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(e),
                })
                .map_err(err("looking for an earlier import of the same output"))?;
            if let Some(id) = existing {
                return Ok(ImportOutcome::Duplicate(id));
            }
        }
        tx.execute(
            "INSERT INTO runs (at, started_at, finished_at, imported_at, cluster, job_id, step_id,
                nodelist, node_count, gpus_per_node, total_ranks, collective, command_line,
                binary_path, variant, env_json, nccl_tests_version, nccl_version, cuda_version,
                launcher, source_path, output_sha256, exit_code, status, transport, avg_busbw,
                failures_json, raw_output, parser_version, label, net_plugin, cuda_driver,
                notes_json, line_rate_gbps, recorded_uid, tool)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33,
                ?34, ?35, ?36)",
            params![
                at,
                run.started_at,
                run.finished_at,
                imported_at,
                run.cluster,
                run.job_id,
                run.step_id,
                run.nodelist,
                node_count,
                run.gpus_per_node,
                run.total_ranks,
                run.collective,
                run.provenance.command_line,
                run.provenance.binary_path,
                run.variant,
                env_json,
                run.provenance.nccl_tests_version,
                run.provenance.nccl_version,
                run.provenance.cuda_version,
                run.launcher.as_str(),
                run.source_path,
                sha,
                run.exit_code,
                run.status.as_str(),
                run.transport,
                run.avg_busbw.and_then(finite),
                failures_json,
                run.raw_output,
                run.parser_version,
                run.label,
                run.provenance.net_plugin,
                run.provenance.cuda_driver,
                notes_json,
                run.line_rate_gbps.and_then(finite),
                nix::unistd::geteuid().as_raw(),
                run.tool.as_str(),
            ],
        )
        .map_err(err("recording the run"))?;
        let id = tx.last_insert_rowid();
        {
            let mut st = tx
                .prepare_cached("INSERT OR IGNORE INTO run_nodes (run_id, node) VALUES (?1, ?2)")
                .map_err(err("recording the run's nodes"))?;
            for node in &run.nodes {
                st.execute(params![id, node])
                    .map_err(err("recording the run's nodes"))?;
            }
            insert_rows(&tx, id, &run.rows).map_err(err("recording the results"))?;
            let mut st = tx
                .prepare_cached(
                    "INSERT INTO node_results (run_id, seq, node, role, partner, size_bytes, busbw, verdict)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(err("recording per-node results"))?;
            for (seq, n) in run.node_results.iter().enumerate() {
                st.execute(params![
                    id,
                    seq as i64,
                    n.node,
                    n.role,
                    n.partner,
                    n.size_bytes.map(|s| s as i64),
                    n.busbw.and_then(finite),
                    n.verdict,
                ])
                .map_err(err("recording per-node results"))?;
            }
        }
        tx.commit().map_err(err("committing the import"))?;
        Ok(ImportOutcome::Inserted(id))
    }

    /// The median wall time in seconds of the runs matching `filter` that ran on
    /// `node_count` nodes (runs without both times left out); `None` when there are none.
    /// What `run --dry-run` and `tune` expect a run like them to take.
    pub fn median_seconds(
        &self,
        filter: &RunFilter,
        node_count: u32,
    ) -> Result<Option<f64>, HistoryError> {
        let seconds: Vec<f64> = self
            .list_runs(filter)?
            .iter()
            .filter(|r| r.node_count == Some(node_count))
            .filter_map(|r| {
                let start = crate::units::parse_rfc3339(r.started_at.as_deref()?).ok()?;
                let end = crate::units::parse_rfc3339(r.finished_at.as_deref()?).ok()?;
                Some((end - start).max(0) as f64)
            })
            .collect();
        Ok(median(&seconds))
    }

    /// Runs matching `filter`, newest first (by run time, then id).
    pub fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunSummary>, HistoryError> {
        let (clause, mut values) = filter_sql(filter);
        values.push(Value::Integer(filter.limit.map_or(-1, i64::from)));
        let columns = summary_columns();
        let sql = format!(
            "SELECT {columns} FROM runs WHERE {clause} ORDER BY runs.at DESC, runs.id DESC LIMIT ?"
        );
        let mut st = self.conn.prepare(&sql).map_err(self.err("listing runs"))?;
        let rows = st
            .query_map(params_from_iter(values), |row| {
                summary_from_row(&mut Columns::new(row))
            })
            .map_err(self.err("listing runs"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("listing runs"))
    }

    /// One run with its table, nodes and per-node results.
    pub fn get_run(&self, id: RunId) -> Result<RunDetail, HistoryError> {
        let action = format!("reading run {id}");
        let columns = summary_columns();
        let sql = format!(
            "SELECT {columns}, runs.command_line, runs.binary_path, runs.env_json,
                runs.nccl_tests_version, runs.nccl_version, runs.cuda_version, runs.cuda_driver,
                runs.net_plugin, runs.notes_json, runs.failures_json, runs.parser_version,
                length(runs.raw_output)
             FROM runs WHERE runs.id = ?1"
        );
        let found = self.conn.query_row(&sql, [id], |row| {
            let c = &mut Columns::new(row);
            Ok(RunDetail {
                summary: summary_from_row(c)?,
                nodes: Vec::new(),
                provenance: RunProvenance {
                    command_line: c.get()?,
                    binary_path: c.get()?,
                    env: c.json::<BTreeMap<String, String>>()?,
                    nccl_tests_version: c.get()?,
                    nccl_version: c.get()?,
                    cuda_version: c.get()?,
                    cuda_driver: c.get()?,
                    net_plugin: c.get()?,
                    notes: c.json()?,
                },
                failures: c.json()?,
                parser_version: c.get()?,
                raw_output_bytes: c.u64()?,
                rows: Vec::new(),
                node_results: Vec::new(),
            })
        });
        let mut detail = match found {
            Ok(d) => d,
            Err(rusqlite::Error::QueryReturnedNoRows) => {
                return Err(HistoryError::NoSuchRun {
                    path: self.path.clone(),
                    id,
                })
            }
            Err(e) => return Err(classify(&self.path, action, e)),
        };
        let mut st = self
            .conn
            .prepare_cached("SELECT node FROM run_nodes WHERE run_id = ?1 ORDER BY node")
            .map_err(self.err(action.clone()))?;
        detail.nodes = st
            .query_map([id], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(self.err(action.clone()))?;
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT {RESULT_COLUMNS} FROM results x WHERE x.run_id = ?1 ORDER BY x.seq"
            ))
            .map_err(self.err(action.clone()))?;
        detail.rows = st
            .query_map([id], |r| result_row_from(&mut Columns::new(r)))
            .and_then(|rows| rows.collect())
            .map_err(self.err(action.clone()))?;
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT node, role, partner, size_bytes, busbw, verdict
                 FROM node_results WHERE run_id = ?1 ORDER BY seq",
            )
            .map_err(self.err(action.clone()))?;
        detail.node_results = st
            .query_map([id], node_result_from_row)
            .and_then(|rows| rows.collect())
            .map_err(self.err(action))?;
        Ok(detail)
    }

    /// The raw output of a run exactly as recorded, and the parser version of its rows.
    pub fn raw_output(&self, id: RunId) -> Result<(Vec<u8>, u32), HistoryError> {
        match self.conn.query_row(
            "SELECT raw_output, parser_version FROM runs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        ) {
            Ok(v) => Ok(v),
            Err(rusqlite::Error::QueryReturnedNoRows) => Err(HistoryError::NoSuchRun {
                path: self.path.clone(),
                id,
            }),
            Err(e) => Err(classify(
                &self.path,
                format!("reading run {id}'s output"),
                e,
            )),
        }
    }

    /// Runs whose rows came from a parser older than `current`: the ones a re-parse of
    /// the stored raw output ([`History::raw_output`]) would improve. Oldest first.
    pub fn runs_parsed_before(&self, current: u32) -> Result<Vec<RunId>, HistoryError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT id FROM runs WHERE parser_version < ?1 ORDER BY id")
            .map_err(self.err("finding runs to re-parse"))?;
        st.query_map([current], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(self.err("finding runs to re-parse"))
    }

    /// Replaces a run's table with rows re-parsed from its raw output, in one transaction,
    /// and records the parser version that produced them.
    pub fn replace_rows(
        &mut self,
        id: RunId,
        rows: &[NewRow],
        parser_version: u32,
    ) -> Result<(), HistoryError> {
        let probe = NewRun {
            collective: "-".into(),
            rows: rows.to_vec(),
            ..NewRun::default()
        };
        validate(&probe)?;
        let path = self.path.clone();
        let err = move |e| classify(&path, format!("replacing run {id}'s rows"), e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err.clone())?;
        let changed = tx
            .execute(
                "UPDATE runs SET parser_version = ?2 WHERE id = ?1",
                params![id, parser_version],
            )
            .map_err(err.clone())?;
        if changed == 0 {
            return Err(HistoryError::NoSuchRun {
                path: self.path.clone(),
                id,
            });
        }
        tx.execute("DELETE FROM results WHERE run_id = ?1", [id])
            .map_err(err.clone())?;
        insert_rows(&tx, id, rows).map_err(err.clone())?;
        tx.commit().map_err(err)
    }

    /// A node's numbers over time, oldest first: for every run that included it, the
    /// out-of-place busbw at `size_bytes` (else the run's largest size; the first such row
    /// in output order when `-d all` gives several), plus its validation results.
    pub fn node_history(
        &self,
        node: &str,
        collective: Option<&str>,
        size_bytes: Option<u64>,
    ) -> Result<NodeHistory, HistoryError> {
        let action = format!("reading the history of node {node}");
        let size = size_bytes
            .map(|s| to_i64(s, || "size".into()))
            .transpose()?;
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT r.id, r.at, r.collective, r.cluster, r.variant, r.status, r.node_count,
                        x.size_bytes, x.dtype, x.busbw
                 FROM run_nodes n
                 JOIN runs r ON r.id = n.run_id
                 JOIN results x ON x.run_id = r.id AND x.seq = (
                     SELECT y.seq FROM results y
                     WHERE y.run_id = r.id AND y.placement = 'out'
                       AND y.size_bytes = coalesce(?3,
                           (SELECT max(z.size_bytes) FROM results z WHERE z.run_id = r.id))
                     ORDER BY y.seq LIMIT 1)
                 WHERE n.node = ?1 AND (?2 IS NULL OR r.collective = ?2)
                 ORDER BY r.at, r.id",
            )
            .map_err(self.err(action.clone()))?;
        let runs = st
            .query_map(params![node, collective, size], |r| {
                Ok(NodeRunPoint {
                    run_id: r.get(0)?,
                    at: format_rfc3339(r.get(1)?),
                    collective: r.get(2)?,
                    cluster: r.get(3)?,
                    variant: r.get(4)?,
                    status: get_enum(r, 5)?,
                    node_count: r.get(6)?,
                    size_bytes: get_u64(r, 7)?,
                    dtype: r.get(8)?,
                    busbw: r.get(9)?,
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(self.err(action.clone()))?;
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT nr.node, nr.role, nr.partner, nr.size_bytes, nr.busbw, nr.verdict,
                        r.id, r.at, r.collective
                 FROM node_results nr JOIN runs r ON r.id = nr.run_id
                 WHERE nr.node = ?1 AND (?2 IS NULL OR r.collective = ?2)
                   AND (?3 IS NULL OR nr.size_bytes = ?3)
                 ORDER BY r.at, r.id, nr.seq",
            )
            .map_err(self.err(action.clone()))?;
        let checks = st
            .query_map(params![node, collective, size], |r| {
                Ok(NodeCheckPoint {
                    result: node_result_from_row(r)?,
                    run_id: r.get(6)?,
                    at: format_rfc3339(r.get(7)?),
                    collective: r.get(8)?,
                })
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(self.err(action))?;
        Ok(NodeHistory {
            node: node.to_string(),
            runs,
            checks,
        })
    }

    /// Median out-of-place busbw at `size_bytes` of the last `last_n` runs with status
    /// `ok` and `key` (collective, cluster, node count, total ranks, variant; a `None`
    /// field matches runs recorded without it), stand-in replays left out: they measured
    /// nothing. `None` when there is no such run.
    ///
    /// A run dated more than [`FUTURE_SKEW`] ahead of now is left out too: an imported
    /// output chooses its own date, and one set in the future would stay "the last runs"
    /// for ever (security review S6).
    pub fn baseline(
        &self,
        key: &RunKey,
        size_bytes: u64,
        last_n: u32,
    ) -> Result<Option<Baseline>, HistoryError> {
        self.baseline_recorded_by(key, size_bytes, last_n, None)
    }

    /// [`History::baseline`] over the runs that `uid` recorded (`None`: anyone's). Root's
    /// health check passes 0, so that what another writer of a shared file recorded
    /// cannot drain the cluster or keep a slow node in service (S6).
    pub fn baseline_recorded_by(
        &self,
        key: &RunKey,
        size_bytes: u64,
        last_n: u32,
        uid: Option<u32>,
    ) -> Result<Option<Baseline>, HistoryError> {
        let size = to_i64(size_bytes, || "size".into())?;
        let latest = now_unix().saturating_add(FUTURE_SKEW.as_secs() as i64);
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT r.id, x.busbw FROM runs r
                 JOIN results x ON x.run_id = r.id AND x.seq = (
                     SELECT y.seq FROM results y
                     WHERE y.run_id = r.id AND y.placement = 'out' AND y.size_bytes = ?3
                       AND y.busbw IS NOT NULL
                     ORDER BY y.seq LIMIT 1)
                 WHERE r.status = 'ok' AND r.cluster IS ?1 AND r.collective = ?2
                   AND r.node_count IS ?5 AND r.total_ranks IS ?6 AND r.variant IS ?7
                   AND r.at <= ?8 AND (?9 IS NULL OR r.recorded_uid IS ?9)
                   AND {} = 0
                 ORDER BY r.at DESC, r.id DESC LIMIT ?4",
                is_replay_sql("r")
            ))
            .map_err(self.err("computing a baseline"))?;
        let samples: Vec<(RunId, f64)> = st
            .query_map(
                params![
                    key.cluster,
                    key.collective,
                    size,
                    last_n,
                    key.node_count,
                    key.total_ranks,
                    key.variant,
                    latest,
                    uid,
                ],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .and_then(|rows| rows.collect())
            .map_err(self.err("computing a baseline"))?;
        let values: Vec<f64> = samples.iter().map(|s| s.1).collect();
        Ok(median(&values).map(|median_busbw| Baseline {
            median_busbw,
            samples,
        }))
    }

    /// A run's table as a series of `(key, busbw)` points.
    pub fn series(&self, id: RunId) -> Result<Vec<(RowKey, Option<f64>)>, HistoryError> {
        self.ensure_run(id)?;
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT size_bytes, placement, dtype, redop, root, busbw FROM results
                 WHERE run_id = ?1 ORDER BY seq",
            )
            .map_err(self.err(format!("reading run {id}'s results")))?;
        let points = st
            .query_map([id], |r| {
                Ok((
                    RowKey {
                        size_bytes: get_u64(r, 0)?,
                        placement: get_enum(r, 1)?,
                        dtype: r.get(2)?,
                        redop: r.get(3)?,
                        root: r.get(4)?,
                    },
                    r.get(5)?,
                ))
            })
            .and_then(|rows| rows.collect())
            .map_err(self.err(format!("reading run {id}'s results")))?;
        Ok(points)
    }

    fn ensure_run(&self, id: RunId) -> Result<(), HistoryError> {
        let found: bool = self
            .conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)",
                [id],
                |r| r.get(0),
            )
            .map_err(self.err(format!("looking up run {id}")))?;
        if found {
            Ok(())
        } else {
            Err(HistoryError::NoSuchRun {
                path: self.path.clone(),
                id,
            })
        }
    }

    /// Compares run `candidate` with run `reference`, key by key.
    pub fn compare_runs(
        &self,
        reference: RunId,
        candidate: RunId,
        options: CompareOptions,
    ) -> Result<Comparison, HistoryError> {
        options.validate()?;
        let result = compare_series(&self.series(reference)?, &self.series(candidate)?, options)?;
        Ok(Comparison {
            reference: Reference::Run { run_id: reference },
            candidate,
            result,
        })
    }

    /// The newest run with status `ok` carrying `label`, other than `except`: "newest" by
    /// run time, then id. `None` when there is none.
    pub fn newest_labeled(
        &self,
        label: &str,
        except: Option<RunId>,
    ) -> Result<Option<RunId>, HistoryError> {
        let found = self.conn.query_row(
            "SELECT id FROM runs WHERE label = ?1 AND status = 'ok' AND id IS NOT ?2
             ORDER BY at DESC, id DESC LIMIT 1",
            params![label, except],
            |r| r.get(0),
        );
        match found {
            Ok(id) => Ok(Some(id)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(classify(
                &self.path,
                format!("looking for runs labelled `{label}`"),
                e,
            )),
        }
    }

    /// Compares run `candidate` with the named baseline `label`: the newest run with
    /// status `ok` that carries it ([`History::newest_labeled`]), other than the
    /// candidate. One run rather than a median of several, so that a label names exactly
    /// the numbers it was given to; record several and use `--baseline N` for a median.
    pub fn compare_to_label(
        &self,
        candidate: RunId,
        label: &str,
        options: CompareOptions,
    ) -> Result<Comparison, HistoryError> {
        options.validate()?;
        self.ensure_run(candidate)?;
        let Some(reference) = self.newest_labeled(label, Some(candidate))? else {
            return Err(HistoryError::NoLabeledRun {
                path: self.path.clone(),
                label: label.to_string(),
                candidate,
            });
        };
        let result = compare_series(&self.series(reference)?, &self.series(candidate)?, options)?;
        Ok(Comparison {
            reference: Reference::Labeled {
                label: label.to_string(),
                run_id: reference,
            },
            candidate,
            result,
        })
    }

    /// Compares run `candidate` with the per-key median of up to `last_n` earlier runs
    /// with status `ok` that measured the same thing: same collective, cluster, node
    /// count, total ranks and variant (missing values match missing values), and of the
    /// same kind: measurements for a measurement, stand-in replays for a replay (as the
    /// report's baselines). "Earlier" is by run time, then id.
    pub fn compare_to_baseline(
        &self,
        candidate: RunId,
        last_n: u32,
        options: CompareOptions,
    ) -> Result<Comparison, HistoryError> {
        options.validate()?;
        let cand = self.series(candidate)?;
        let mut st = self
            .conn
            .prepare_cached(&format!(
                "SELECT r.id FROM runs c JOIN runs r
                   ON r.collective = c.collective AND r.cluster IS c.cluster
                  AND r.node_count IS c.node_count AND r.total_ranks IS c.total_ranks
                  AND r.variant IS c.variant
                 WHERE c.id = ?1 AND r.status = 'ok' AND (r.at, r.id) < (c.at, c.id)
                   AND {} = {}
                 ORDER BY r.at DESC, r.id DESC LIMIT ?2",
                is_replay_sql("r"),
                is_replay_sql("c")
            ))
            .map_err(self.err("choosing baseline runs"))?;
        let run_ids: Vec<RunId> = st
            .query_map(params![candidate, last_n], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(self.err("choosing baseline runs"))?;
        if run_ids.is_empty() {
            let d = self.get_run(candidate)?.summary;
            return Err(HistoryError::NoBaseline {
                run_id: candidate,
                what: format!(
                    "{} on cluster {}, {} nodes, {} ranks, variant {}",
                    d.collective,
                    d.cluster.as_deref().unwrap_or("(none)"),
                    d.node_count.map_or("?".into(), |n| n.to_string()),
                    d.total_ranks.map_or("?".into(), |n| n.to_string()),
                    d.variant.as_deref().unwrap_or("(none)"),
                ),
            });
        }
        // Collapse each run first so that a run with a repeated table (-N) counts once.
        let mut reference = Vec::new();
        for id in &run_ids {
            reference.extend(collapse(&self.series(*id)?));
        }
        let result = compare_series(&reference, &cand, options)?;
        Ok(Comparison {
            reference: Reference::Baseline { run_ids },
            candidate,
            result,
        })
    }
}

/// Inserts a run's table rows, numbered in output order.
fn insert_rows(conn: &Connection, id: RunId, rows: &[NewRow]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(
        "INSERT INTO results (run_id, seq, size_bytes, count, dtype, redop, root,
            placement, time_us, algbw, busbw, wrong, algorithm, protocol)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?;
    for (seq, r) in rows.iter().enumerate() {
        // Sizes and counts were checked to fit in i64 by `validate`.
        st.execute(params![
            id,
            seq as i64,
            r.size_bytes as i64,
            r.count as i64,
            r.dtype,
            r.redop,
            r.root,
            r.placement.as_str(),
            finite(r.time_us),
            finite(r.algbw),
            finite(r.busbw),
            r.wrong.map(|w| w as i64),
            r.algorithm,
            r.protocol,
        ])?;
    }
    Ok(())
}

fn node_result_from_row(r: &Row<'_>) -> rusqlite::Result<NodeResult> {
    Ok(NodeResult {
        node: r.get(0)?,
        role: r.get(1)?,
        partner: r.get(2)?,
        size_bytes: get_opt_u64(r, 3)?,
        busbw: r.get(4)?,
        verdict: r.get(5)?,
    })
}

/// Checks what SQLite's types cannot hold or what would make a useless record.
fn validate(run: &NewRun) -> Result<(), HistoryError> {
    let invalid = |field: String, reason: &str| HistoryError::InvalidRun {
        field,
        reason: reason.to_string(),
    };
    if run.collective.trim().is_empty() {
        return Err(invalid(
            "collective".into(),
            "empty; name the collective, e.g. all_reduce",
        ));
    }
    if let Some(i) = run.nodes.iter().position(|n| n.trim().is_empty()) {
        return Err(invalid(format!("nodes[{i}]"), "empty node name"));
    }
    for (i, r) in run.rows.iter().enumerate() {
        to_i64(r.size_bytes, || format!("rows[{i}].size_bytes"))?;
        to_i64(r.count, || format!("rows[{i}].count"))?;
        if let Some(w) = r.wrong {
            to_i64(w, || format!("rows[{i}].wrong"))?;
        }
    }
    for (i, n) in run.node_results.iter().enumerate() {
        if n.node.trim().is_empty() {
            return Err(invalid(
                format!("node_results[{i}].node"),
                "empty node name",
            ));
        }
        if let Some(s) = n.size_bytes {
            to_i64(s, || format!("node_results[{i}].size_bytes"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
