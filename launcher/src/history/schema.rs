//! The history's schema, as an append-only list of migrations.
//!
//! `PRAGMA user_version` holds how many migrations a file has had. Opening applies the
//! missing ones in one exclusive transaction, so a crash leaves the file at the old
//! version, never half-migrated, and two processes opening a fresh file at once migrate it
//! once. **Never edit or remove a migration that has shipped**: a file in the field has
//! already run it; append a new one instead (cargo's `util/sqlite.rs` habit).
//!
//! `PRAGMA application_id` marks the file as ours, so that another program's SQLite
//! database given by mistake to `--db` is refused rather than gaining our tables.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::HistoryError;

/// `application_id` of a gpudirect history: ASCII "GPDH".
pub const APPLICATION_ID: i64 = 0x4750_4448;

/// The migrations, in order. Index `i` takes a file from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: runs, their nodes, their table rows, and per-node validation numbers.
    r#"
    CREATE TABLE runs (
        id                 INTEGER PRIMARY KEY,
        -- The run's time: started_at, else finished_at, else imported_at. Listings sort
        -- on it and --since filters on it; unix seconds UTC like every time here.
        at                 INTEGER NOT NULL,
        started_at         INTEGER,
        finished_at        INTEGER,
        imported_at        INTEGER NOT NULL,
        cluster            TEXT,
        job_id             TEXT,
        step_id            TEXT,
        nodelist           TEXT,
        node_count         INTEGER,
        gpus_per_node      INTEGER,
        total_ranks        INTEGER,
        collective         TEXT NOT NULL,
        command_line       TEXT,
        binary_path        TEXT,
        variant            TEXT,
        env_json           TEXT NOT NULL DEFAULT '{}',
        nccl_tests_version TEXT,
        nccl_version       TEXT,
        cuda_version       TEXT,
        launcher           TEXT NOT NULL
                           CHECK (launcher IN ('srun', 'mpirun', 'local', 'import')),
        source_path        TEXT,
        output_sha256      TEXT NOT NULL,
        exit_code          INTEGER,
        status             TEXT NOT NULL
                           CHECK (status IN ('ok', 'wrong', 'timeout', 'failed', 'interrupted')),
        transport          TEXT,
        avg_busbw          REAL,
        failures_json      TEXT NOT NULL DEFAULT '[]',
        raw_output         BLOB NOT NULL,
        parser_version     INTEGER NOT NULL
    );
    CREATE INDEX runs_at ON runs (at, id);
    CREATE INDEX runs_collective ON runs (collective, cluster, at);
    CREATE INDEX runs_output ON runs (output_sha256);

    CREATE TABLE run_nodes (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        node   TEXT NOT NULL,
        PRIMARY KEY (run_id, node)
    ) WITHOUT ROWID;
    CREATE INDEX run_nodes_node ON run_nodes (node, run_id);

    CREATE TABLE results (
        run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        seq        INTEGER NOT NULL,  -- order in the output
        size_bytes INTEGER NOT NULL,
        count      INTEGER NOT NULL,
        dtype      TEXT NOT NULL,
        redop      TEXT NOT NULL,
        root       INTEGER,
        placement  TEXT NOT NULL CHECK (placement IN ('out', 'in')),
        time_us    REAL,
        algbw      REAL,
        busbw      REAL,
        wrong      INTEGER,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;

    CREATE TABLE node_results (
        run_id     INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        seq        INTEGER NOT NULL,
        node       TEXT NOT NULL,
        role       TEXT,
        partner    TEXT,
        size_bytes INTEGER,
        busbw      REAL,
        verdict    TEXT,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX node_results_node ON node_results (node, run_id);
    "#,
    // 2: a free-text label per run (`import --label`, a named baseline for `compare
    // --baseline-label`). Existing runs get NULL: they had none.
    r#"
    ALTER TABLE runs ADD COLUMN label TEXT;
    CREATE INDEX runs_label ON runs (label, at, id);
    "#,
    // 3: what NCCL chose and ran with (issue #18): the algorithm and protocol per row
    // (from NCCL's per-operation lines, NULL without them), the network plugin with its
    // own version and the CUDA driver, the parser's notes on the run (what it inferred),
    // and the node's line rate (GB/s, from the profile's line_rate_gbit) that busbw is
    // shown as a share of. Existing runs get NULL and no notes: their outputs were read
    // without.
    r#"
    ALTER TABLE results ADD COLUMN algorithm TEXT;
    ALTER TABLE results ADD COLUMN protocol TEXT;
    ALTER TABLE runs ADD COLUMN net_plugin TEXT;
    ALTER TABLE runs ADD COLUMN cuda_driver INTEGER;
    ALTER TABLE runs ADD COLUMN notes_json TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE runs ADD COLUMN line_rate_gbps REAL;
    "#,
    // 4: `gpudirect vet`'s verdicts on a job's nodes (issue #29): one row per vet, with the
    // counts, what it decided, and its whole report as JSON (each node's standing and why,
    // the pair runs it recorded in `runs`).
    r#"
    CREATE TABLE vets (
        id          INTEGER PRIMARY KEY,
        at          INTEGER NOT NULL,
        cluster     TEXT,
        job_id      TEXT,
        test        TEXT NOT NULL,
        allocated   INTEGER NOT NULL,
        good        INTEGER NOT NULL,
        bad         INTEGER NOT NULL,
        unchecked   INTEGER NOT NULL,
        need        INTEGER NOT NULL,
        decision    TEXT NOT NULL,
        good_nodes  TEXT NOT NULL,
        bad_nodes   TEXT NOT NULL,
        report_json TEXT NOT NULL
    );
    CREATE INDEX vets_at ON vets (at, id);
    "#,
    // 5: who recorded each run (security review S6): the effective uid of the gpudirect
    // that wrote it, so that root's health check builds its baseline from root's runs
    // alone. NULL for runs recorded before this migration.
    r#"
    ALTER TABLE runs ADD COLUMN recorded_uid INTEGER;
    "#,
    // 6: the command that recorded each run (design review 2026-12-04, P5), which export
    // guessed from the variant and got wrong for vet (its pairs are `validate:pairs` and
    // `rail:*`). Existing runs get the old guess (`Tool::of_variant`).
    r#"
    ALTER TABLE runs ADD COLUMN tool TEXT NOT NULL DEFAULT 'run';
    UPDATE runs SET tool = CASE
        WHEN variant = 'health' THEN 'health'
        WHEN substr(variant, 1, 9) = 'validate:' OR substr(variant, 1, 5) = 'rail:' THEN 'validate'
        WHEN substr(variant, 1, 4) = 'vet:' THEN 'vet'
        ELSE 'run' END;
    "#,
];

/// The schema version this binary writes: the number of migrations.
pub fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

fn sql_err(path: &Path, action: &str) -> impl FnOnce(rusqlite::Error) -> HistoryError {
    let path = path.to_path_buf();
    let action = action.to_string();
    move |source| super::error::classify(&path, action, source)
}

/// Reads `(user_version, application_id)` without writing anything.
pub fn read_versions(conn: &Connection, path: &Path) -> Result<(i64, i64), HistoryError> {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(sql_err(path, "reading the schema version"))?;
    let app: i64 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(sql_err(path, "reading the application id"))?;
    Ok((version, app))
}

/// Refuses a file that is not ours or is too new. Writes nothing.
pub fn check_versions(path: &Path, version: i64, app: i64) -> Result<(), HistoryError> {
    if version > 0 && app != APPLICATION_ID {
        return Err(HistoryError::NotAHistory {
            path: path.to_path_buf(),
            reason: format!(
                "a SQLite database of another program: application_id {app:#x}, \
                 user_version {version}"
            ),
        });
    }
    if version > latest_version() {
        return Err(HistoryError::SchemaTooNew {
            path: path.to_path_buf(),
            found: version,
            supported: latest_version(),
        });
    }
    Ok(())
}

/// Brings the file to [`latest_version`]; a no-op when it is there already.
///
/// Everything happens in one `BEGIN EXCLUSIVE` transaction, and the checks are repeated
/// inside it: another process may have migrated the file between our first look and now.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<(), HistoryError> {
    let (version, app) = read_versions(conn, path)?;
    check_versions(path, version, app)?;
    if version == latest_version() {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Exclusive)
        .map_err(sql_err(path, "locking the file to upgrade its schema"))?;
    let (version, app) = read_versions(&tx, path)?;
    check_versions(path, version, app)?;
    if version == 0 {
        // Version 0 is also what any SQLite file that is not ours says: only an empty one
        // may become a history.
        let objects: i64 = tx
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )
            .map_err(sql_err(path, "reading the schema"))?;
        if objects > 0 {
            return Err(HistoryError::NotAHistory {
                path: path.to_path_buf(),
                reason: format!(
                    "a SQLite database of another program, with {objects} tables or indexes"
                ),
            });
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(sql_err(path, "marking the file as a gpudirect history"))?;
    }
    let start = usize::try_from(version).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        tx.execute_batch(sql).map_err(sql_err(
            path,
            &format!("applying schema migration {}", i + 1),
        ))?;
    }
    tx.pragma_update(None, "user_version", latest_version())
        .map_err(sql_err(path, "recording the schema version"))?;
    tx.commit()
        .map_err(sql_err(path, "committing the schema upgrade"))?;
    tracing::info!(path = %path.display(), from = version, to = latest_version(), "history schema upgraded");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_dump(conn: &Connection) -> Vec<String> {
        let mut st = conn
            .prepare("SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_schema ORDER BY name")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn migrating_twice_is_a_no_op() {
        let mut conn = Connection::open_in_memory().unwrap();
        let p = Path::new(":memory:");
        migrate(&mut conn, p).unwrap();
        let first = schema_dump(&conn);
        assert!(first.iter().any(|s| s.starts_with("table runs ")));
        assert_eq!(
            read_versions(&conn, p).unwrap(),
            (latest_version(), APPLICATION_ID)
        );
        migrate(&mut conn, p).unwrap();
        assert_eq!(schema_dump(&conn), first);
        assert_eq!(read_versions(&conn, p).unwrap().0, latest_version());
    }

    /// Migration 6 gives every earlier run the tool its variant names (what export guessed
    /// before the column): `health`, `validate:*` and `rail:*`, `vet:*`, else `run`.
    #[test]
    fn runs_before_the_tool_column_get_their_variants_tool() {
        let mut conn = Connection::open_in_memory().unwrap();
        let tx = conn.transaction().unwrap();
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        for sql in &MIGRATIONS[..5] {
            tx.execute_batch(sql).unwrap();
        }
        for (id, variant) in [
            (1, "'health'"),
            (2, "'validate:pairs'"),
            (3, "'rail:eth1'"),
            (4, "'vet:pairs'"),
            (5, "'tcpx'"),
            (6, "NULL"),
        ] {
            tx.execute_batch(&format!(
                "INSERT INTO runs (id, at, imported_at, collective, launcher, output_sha256,
                     status, raw_output, parser_version, env_json, variant)
                 VALUES ({id}, 1796000000, 1796000100, 'all_reduce', 'srun', 'h{id}', 'ok',
                     x'2320', 1, '{{}}', {variant});"
            ))
            .unwrap();
        }
        tx.pragma_update(None, "user_version", 5).unwrap();
        tx.commit().unwrap();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        let tools: Vec<String> = conn
            .prepare("SELECT tool FROM runs ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            tools,
            ["health", "validate", "validate", "vet", "run", "run"]
        );
        // The same rule as the one the launcher keeps for them.
        for (variant, tool) in [
            ("health", "health"),
            ("rail:eth1", "validate"),
            ("vet:x", "vet"),
        ] {
            assert_eq!(
                crate::history::Tool::of_variant(Some(variant)).as_str(),
                tool
            );
        }
    }

    #[test]
    fn an_old_database_upgrades_with_its_runs_intact() {
        // A version-1 file, as gpudirect before labels wrote it: the first migration only.
        let dir = tempfile::Builder::new()
            .prefix("gpudirect-schema-v1-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("history.sqlite");
        {
            let mut conn = Connection::open(&path).unwrap();
            let tx = conn.transaction().unwrap();
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .unwrap();
            tx.execute_batch(MIGRATIONS[0]).unwrap();
            tx.pragma_update(None, "user_version", 1).unwrap();
            tx.execute_batch(
                "INSERT INTO runs (id, at, imported_at, collective, launcher, output_sha256,
                     status, raw_output, parser_version, env_json)
                 VALUES (7, 1796000000, 1796000100, 'all_reduce', 'import', 'abc', 'ok',
                     x'2320', 1, '{\"GPUDIRECT_STANDIN_REPLAY\":\"h200x2-nvlink/all_reduce_g2.txt\"}');
                 INSERT INTO results (run_id, seq, size_bytes, count, dtype, redop, placement,
                     busbw) VALUES (7, 0, 1073741824, 268435456, 'float', 'sum', 'out', 321.81);
                 INSERT INTO run_nodes (run_id, node) VALUES (7, 'vm');",
            )
            .unwrap();
            tx.commit().unwrap();
        }
        let mut conn = Connection::open(&path).unwrap();
        assert_eq!(read_versions(&conn, &path).unwrap(), (1, APPLICATION_ID));
        migrate(&mut conn, &path).unwrap();
        assert_eq!(read_versions(&conn, &path).unwrap().0, latest_version());
        let after = schema_dump(&conn);
        assert!(
            after.iter().any(|s| s.starts_with("index runs_label ")),
            "{after:?}"
        );
        let (collective, label, busbw): (String, Option<String>, f64) = conn
            .query_row(
                "SELECT r.collective, r.label, x.busbw FROM runs r JOIN results x ON x.run_id = r.id
                 WHERE r.id = 7",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (collective.as_str(), label, busbw),
            ("all_reduce", None, 321.81)
        );
        // Twice is a no-op here too.
        migrate(&mut conn, &path).unwrap();
        assert_eq!(schema_dump(&conn), after);
        drop(conn);
        // And the store reads the upgraded run, its replay marking included.
        let history = crate::history::History::open_existing(&path).unwrap();
        let runs = history
            .list_runs(&crate::history::RunFilter::default())
            .unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].id, 7);
        assert_eq!(runs[0].label, None);
        assert_eq!(
            runs[0].replay_of.as_deref(),
            Some("h200x2-nvlink/all_reduce_g2.txt")
        );
        assert_eq!(runs[0].busbw, Some(321.81));
    }

    #[test]
    fn foreign_database_is_refused_untouched() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE accounts (id INTEGER)")
            .unwrap();
        let err = migrate(&mut conn, Path::new("other.db")).unwrap_err();
        assert!(matches!(err, HistoryError::NotAHistory { .. }), "{err}");
        assert_eq!(read_versions(&conn, Path::new("x")).unwrap(), (0, 0));
        assert_eq!(schema_dump(&conn).len(), 1);
    }

    #[test]
    fn newer_or_foreign_versions_are_refused() {
        let p = Path::new("h.sqlite");
        let err = check_versions(p, latest_version() + 1, APPLICATION_ID).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("h.sqlite") && msg.contains(&(latest_version() + 1).to_string()));
        assert!(
            msg.contains(&format!("the {} this gpudirect", latest_version())),
            "{msg}"
        );
        assert!(check_versions(p, 3, 0x1234).is_err());
        assert!(check_versions(p, 0, 0).is_ok());
        assert!(check_versions(p, latest_version(), APPLICATION_ID).is_ok());
    }
}
