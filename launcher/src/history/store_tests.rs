//! Tests of [`History`] against real files in a temporary folder, fed with rows read from
//! the recorded nccl-tests outputs in `tests/fixtures/nccl-tests/`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;
use crate::history::{ExportFormat, Verdict};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/nccl-tests");

/// A fresh, empty folder for one test, removed when dropped (also when the test fails).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gpudirect-history-{name}-"))
        .tempdir()
        .unwrap()
}

/// Reads the table of a recorded text output into rows. Test-only: the real parser is
/// another module; this one knows just the 13-column layout of these fixtures.
fn fixture_run(rel: &str) -> NewRun {
    let raw = std::fs::read(Path::new(FIXTURES).join(rel)).unwrap();
    let text = String::from_utf8_lossy(&raw);
    let mut rows = Vec::new();
    let mut avg = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("# Avg bus bandwidth    : ") {
            avg = v.trim().parse().ok();
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with('#') || f.len() != 13 || f[0].parse::<u64>().is_err() {
            continue;
        }
        for (placement, base) in [(Placement::Out, 5), (Placement::In, 9)] {
            rows.push(NewRow {
                size_bytes: f[0].parse().unwrap(),
                count: f[1].parse().unwrap(),
                dtype: f[2].into(),
                redop: f[3].into(),
                root: f[4].parse().ok(),
                placement,
                time_us: f[base].parse().unwrap(),
                algbw: f[base + 1].parse().unwrap(),
                busbw: f[base + 2].parse().unwrap(),
                wrong: f[base + 3].parse().ok(),
                algorithm: None,
                protocol: None,
            });
        }
    }
    assert!(rows.len() > 20, "{rel}: only {} rows", rows.len());
    NewRun {
        collective: "all_reduce".into(),
        cluster: Some("h200x2".into()),
        nodes: vec!["gpu-b".into(), "gpu-a".into()],
        nodelist: Some("gpu-[a-b]".into()),
        gpus_per_node: Some(1),
        total_ranks: Some(2),
        launcher: LaunchKind::Import,
        source_path: Some(format!("/fixtures/{rel}")),
        status: RunStatus::Ok,
        exit_code: Some(0),
        avg_busbw: avg,
        provenance: RunProvenance {
            nccl_tests_version: Some("2.19.6".into()),
            nccl_version: Some("2.28.9".into()),
            env: [("NCCL_DEBUG".to_string(), "INFO".to_string())].into(),
            ..RunProvenance::default()
        },
        parser_version: 1,
        raw_output: raw,
        rows,
        ..NewRun::default()
    }
}

fn nvlink() -> NewRun {
    fixture_run("h200x2-nvlink/all_reduce_g2.txt")
}

fn socket() -> NewRun {
    fixture_run("h200x2-nvlink/all_reduce_g2_socket.txt")
}

#[test]
fn import_and_read_back() {
    let tmp = scratch("roundtrip");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("sub/h.sqlite")).unwrap();
    let mut run = nvlink();
    run.started_at = Some(1_796_000_000);
    run.failures = vec!["first, \"quoted\"".into()];
    run.node_results = vec![NewNodeResult {
        node: "gpu-a".into(),
        role: Some("pair".into()),
        partner: Some("gpu-b".into()),
        size_bytes: Some(1 << 30),
        busbw: Some(321.81),
        verdict: Some("ok".into()),
    }];
    let id = db.import_run(&run, false).unwrap();
    assert!(matches!(id, ImportOutcome::Inserted(_)));
    let d = db.get_run(id.run_id()).unwrap();
    assert_eq!(d.rows.len(), run.rows.len());
    assert_eq!(d.rows[0].size_bytes, 8);
    let last = d.rows.last().unwrap();
    assert_eq!(
        (last.size_bytes, last.placement),
        (8_589_934_592, Placement::In)
    );
    assert_eq!(d.nodes, ["gpu-a", "gpu-b"]);
    assert_eq!(d.summary.node_count, Some(2));
    assert_eq!(
        d.summary.started_at.as_deref(),
        Some("2026-11-30T00:53:20Z")
    );
    assert_eq!(d.summary.at, "2026-11-30T00:53:20Z");
    assert_eq!(
        d.summary.busbw,
        run.rows
            .iter()
            .filter(|r| r.placement == Placement::Out)
            .map(|r| r.busbw)
            .reduce(f64::max)
    );
    assert_eq!(d.summary.avg_busbw, run.avg_busbw);
    assert!(d.summary.avg_busbw.is_some());
    assert_eq!(d.provenance.env["NCCL_DEBUG"], "INFO");
    assert_eq!(d.failures, run.failures);
    assert_eq!(d.node_results[0].busbw, Some(321.81));
    assert_eq!(d.raw_output_bytes, run.raw_output.len() as u64);
    let (raw, pv) = db.raw_output(id.run_id()).unwrap();
    assert_eq!((raw, pv), (run.raw_output.clone(), 1));
    // JSON for --json.
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["status"], "ok");
    assert_eq!(json["rows"][1]["placement"], "in");
    assert!(matches!(
        db.get_run(999),
        Err(HistoryError::NoSuchRun { id: 999, .. })
    ));
}

#[test]
fn same_output_twice_is_recognised() {
    let tmp = scratch("dedupe");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    let run = nvlink();
    let first = db.import_run(&run, false).unwrap();
    let again = db.import_run(&run, false).unwrap();
    assert_eq!(again, ImportOutcome::Duplicate(first.run_id()));
    assert!(again.is_duplicate());
    let forced = db.import_run(&run, true).unwrap();
    assert!(matches!(forced, ImportOutcome::Inserted(id) if id != first.run_id()));
    let mut elsewhere = run.clone();
    elsewhere.source_path = Some("/other/copy.txt".into());
    assert!(!db.import_run(&elsewhere, false).unwrap().is_duplicate());
    // Runs without a source (gpudirect run) are never folded together.
    let mut live = run.clone();
    live.source_path = None;
    live.launcher = LaunchKind::Local;
    assert!(!db.import_run(&live, false).unwrap().is_duplicate());
    assert!(!db.import_run(&live, false).unwrap().is_duplicate());
    assert_eq!(db.list_runs(&RunFilter::default()).unwrap().len(), 5);
}

/// Security review T9: a trigger another user put in the file ran inside root's import (one
/// that never ends held the write lock forever; another forged the run). None runs now.
#[test]
fn a_trigger_stored_in_the_history_never_runs() {
    let tmp = scratch("trigger");
    let path = tmp.path().join("h.sqlite");
    drop(History::open(&path).unwrap());
    let writer = rusqlite::Connection::open(&path).unwrap();
    writer
        .execute_batch(
            "CREATE TRIGGER spin AFTER INSERT ON runs BEGIN
               SELECT max(n) FROM (WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r)
                                   SELECT n FROM r);
             END;
             CREATE TRIGGER forge AFTER INSERT ON runs BEGIN
               UPDATE runs SET label = 'forged' WHERE id = NEW.id;
             END;",
        )
        .unwrap();
    drop(writer);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let result = History::open(&path).and_then(|mut db| {
            db.import_run(&nvlink(), false)?;
            db.list_runs(&RunFilter::default())
        });
        let _ =
            done.send(result.map(|runs| runs.iter().map(|r| r.label.clone()).collect::<Vec<_>>()));
    });
    let labels = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("the import ended (the stored trigger did not run)")
        .unwrap();
    assert_eq!(labels, vec![None], "the forging trigger ran");
}

#[test]
fn a_failed_import_leaves_nothing_behind() {
    let tmp = scratch("atomic");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    // Make the last insert of the import fail, after the run and its rows went in. A
    // history runs no trigger (review T9): this connection's own temporary one is allowed.
    db.conn
        .set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER,
            true,
        )
        .unwrap();
    db.conn
        .execute_batch(
            "CREATE TEMP TRIGGER boom BEFORE INSERT ON node_results
             WHEN NEW.node = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END;",
        )
        .unwrap();
    let mut run = nvlink();
    run.node_results = vec![NewNodeResult {
        node: "boom".into(),
        ..Default::default()
    }];
    let err = db.import_run(&run, false).unwrap_err();
    assert!(err.to_string().contains("per-node"), "{err}");
    let count = |t: &str| -> i64 {
        db.conn
            .query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(
        (count("runs"), count("results"), count("run_nodes")),
        (0, 0, 0)
    );
}

#[test]
fn invalid_runs_are_refused_with_the_field() {
    let tmp = scratch("invalid");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    let err = db.import_run(&NewRun::default(), false).unwrap_err();
    assert!(err.to_string().contains("collective"), "{err}");
    let mut run = nvlink();
    run.rows[3].size_bytes = u64::MAX;
    let err = db.import_run(&run, false).unwrap_err();
    assert!(err.to_string().contains("rows[3].size_bytes"), "{err}");
    // NaN and infinity are stored as "no value", not as an error.
    let mut run = nvlink();
    run.rows[0].busbw = f64::NAN;
    run.rows[1].algbw = f64::INFINITY;
    let id = db.import_run(&run, false).unwrap().run_id();
    let d = db.get_run(id).unwrap();
    assert_eq!((d.rows[0].busbw, d.rows[1].algbw), (None, None));
}

/// Five runs on two clusters, at known times.
fn populated(dir: &Path) -> (History, Vec<RunId>) {
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    let mut ids = Vec::new();
    for (i, (cluster, status, node, variant)) in [
        ("a3", RunStatus::Ok, "gpu1", "tcpx"),
        ("a3", RunStatus::Ok, "gpu2", "tcpx"),
        ("a3", RunStatus::Failed, "gpu1", "socket"),
        ("a4", RunStatus::Ok, "gpu1", "gib"),
        ("a3", RunStatus::Ok, "gpu3", "tcpx"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut run = if status == RunStatus::Ok {
            nvlink()
        } else {
            socket()
        };
        run.cluster = Some(cluster.into());
        run.status = status;
        run.nodes = vec![node.into(), "gpu9".into()];
        run.variant = Some(variant.into());
        run.started_at = Some(1_796_000_000 + 3600 * i as i64);
        run.source_path = Some(format!("/runs/{i}.txt"));
        // Make each ok run's bandwidth differ a little: 100 %, 98 %, -, 110 %, 96 %.
        let scale = [1.0, 0.98, 1.0, 1.10, 0.96][i];
        for r in &mut run.rows {
            r.busbw *= scale;
        }
        ids.push(db.import_run(&run, false).unwrap().run_id());
    }
    (db, ids)
}

/// The key of `populated`'s ok tcpx runs on `cluster` (2 ranks: all_reduce_g2.txt).
fn tcpx_key(cluster: &str, nodes: u32) -> RunKey {
    RunKey {
        collective: "all_reduce".into(),
        cluster: Some(cluster.into()),
        node_count: Some(nodes),
        total_ranks: Some(2),
        variant: Some("tcpx".into()),
    }
}

/// validate's and health's baselines (`History::baseline`) take only runs with the whole
/// key: a faster socket run or a run over more GPUs on the same cluster and node count is
/// not part of a tcpx baseline, and is one of its own.
#[test]
fn a_baseline_ignores_runs_of_other_variants_and_rank_counts() {
    let tmp = scratch("baseline-key");
    let (mut db, ids) = populated(tmp.path());
    let before = db
        .baseline(&tcpx_key("a3", 2), 1 << 30, 10)
        .unwrap()
        .unwrap();
    let mut other_variant = nvlink();
    other_variant.cluster = Some("a3".into());
    other_variant.nodes = vec!["gpu1".into(), "gpu9".into()];
    other_variant.variant = Some("socket".into());
    other_variant.started_at = Some(1_796_000_000 + 3600 * 20);
    for r in &mut other_variant.rows {
        r.busbw *= 3.0;
    }
    let socket = db.import_run(&other_variant, true).unwrap().run_id();
    let mut more_ranks = other_variant.clone();
    more_ranks.variant = Some("tcpx".into());
    more_ranks.total_ranks = Some(16);
    more_ranks.started_at = Some(1_796_000_000 + 3600 * 21);
    let sixteen = db.import_run(&more_ranks, true).unwrap().run_id();
    assert_eq!(db.get_run(sixteen).unwrap().summary.total_ranks, Some(16));

    let after = db
        .baseline(&tcpx_key("a3", 2), 1 << 30, 10)
        .unwrap()
        .unwrap();
    assert_eq!(after, before, "other variants and rank counts stay out");
    assert_eq!(
        after.samples.iter().map(|s| s.0).collect::<Vec<_>>(),
        [ids[4], ids[1], ids[0]]
    );
    let of = |variant: &str, ranks: u32| RunKey {
        variant: Some(variant.into()),
        total_ranks: Some(ranks),
        ..tcpx_key("a3", 2)
    };
    let only = |key: RunKey| {
        db.baseline(&key, 1 << 30, 10)
            .unwrap()
            .map(|b| b.samples.iter().map(|s| s.0).collect::<Vec<_>>())
    };
    assert_eq!(only(of("socket", 2)), Some(vec![socket]));
    assert_eq!(only(of("tcpx", 16)), Some(vec![sixteen]));
    assert_eq!(only(of("tcpx", 8)), None);
}

#[test]
fn list_runs_filters_and_orders() {
    let tmp = scratch("list");
    let dir = tmp.path();
    let (db, ids) = populated(dir);
    let list =
        |f: RunFilter| -> Vec<RunId> { db.list_runs(&f).unwrap().iter().map(|r| r.id).collect() };
    assert_eq!(
        list(RunFilter::default()),
        [ids[4], ids[3], ids[2], ids[1], ids[0]]
    );
    let f = |f: fn(&mut RunFilter)| {
        let mut filter = RunFilter::default();
        f(&mut filter);
        filter
    };
    assert_eq!(list(f(|f| f.cluster = Some("a4".into()))), [ids[3]]);
    assert_eq!(
        list(f(|f| f.node = Some("gpu1".into()))),
        [ids[3], ids[2], ids[0]]
    );
    assert_eq!(list(f(|f| f.status = Some(RunStatus::Failed))), [ids[2]]);
    assert_eq!(
        list(f(|f| f.variant = Some("tcpx".into()))),
        [ids[4], ids[1], ids[0]]
    );
    assert_eq!(
        list(f(|f| f.since = Some(1_796_000_000 + 3 * 3600))),
        [ids[4], ids[3]]
    );
    assert_eq!(list(f(|f| f.limit = Some(2))), [ids[4], ids[3]]);
    assert!(list(f(|f| f.collective = Some("all_gather".into()))).is_empty());
    let summary = &db.list_runs(&RunFilter::default()).unwrap()[0];
    assert_eq!(summary.max_size_bytes, Some(8_589_934_592));
    assert_eq!(summary.row_count, nvlink().rows.len() as u64);
}

#[test]
fn node_history_and_baseline() {
    let tmp = scratch("node");
    let dir = tmp.path();
    let (db, ids) = populated(dir);
    let h = db.node_history("gpu1", None, None).unwrap();
    let runs: Vec<_> = h.runs.iter().map(|p| (p.run_id, p.size_bytes)).collect();
    assert_eq!(
        runs,
        [
            (ids[0], 8_589_934_592),
            (ids[2], 1_073_741_824),
            (ids[3], 8_589_934_592)
        ]
    );
    // 321.81 is the out-of-place busbw at 1 GiB in all_reduce_g2.txt.
    let h = db
        .node_history("gpu1", Some("all_reduce"), Some(1 << 30))
        .unwrap();
    assert_eq!(h.runs[0].busbw, Some(321.81));
    assert_eq!(h.runs.len(), 3);
    assert!(db
        .node_history("nobody", None, None)
        .unwrap()
        .runs
        .is_empty());

    // a3 ok runs at 1 GiB: 321.81 x {1.0, 0.98, 0.96} -> median 0.98 x 321.81.
    let b = db
        .baseline(&tcpx_key("a3", 2), 1 << 30, 10)
        .unwrap()
        .unwrap();
    assert!((b.median_busbw - 321.81 * 0.98).abs() < 1e-9, "{b:?}");
    assert_eq!(
        b.samples.iter().map(|s| s.0).collect::<Vec<_>>(),
        [ids[4], ids[1], ids[0]]
    );
    let b = db
        .baseline(&tcpx_key("a3", 2), 1 << 30, 2)
        .unwrap()
        .unwrap();
    assert!((b.median_busbw - 321.81 * 0.97).abs() < 1e-9);
    assert!(db
        .baseline(&tcpx_key("a3", 2), 12345, 10)
        .unwrap()
        .is_none());
    // Runs over 2 nodes are no baseline for 3.
    assert!(db
        .baseline(&tcpx_key("a3", 3), 1 << 30, 10)
        .unwrap()
        .is_none());
}

#[test]
fn node_results_show_in_node_history() {
    let tmp = scratch("checks");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    let mut run = nvlink();
    run.node_results = vec![
        NewNodeResult {
            node: "gpu-a".into(),
            partner: Some("gpu-b".into()),
            busbw: Some(40.0),
            size_bytes: Some(1 << 30),
            verdict: Some("slow".into()),
            ..Default::default()
        },
        NewNodeResult {
            node: "gpu-b".into(),
            partner: Some("gpu-a".into()),
            busbw: Some(40.0),
            size_bytes: Some(1 << 30),
            verdict: Some("ok".into()),
            ..Default::default()
        },
    ];
    let id = db.import_run(&run, false).unwrap().run_id();
    let h = db.node_history("gpu-a", None, Some(1 << 30)).unwrap();
    assert_eq!(h.checks.len(), 1);
    assert_eq!(
        (h.checks[0].run_id, h.checks[0].result.verdict.as_deref()),
        (id, Some("slow"))
    );
    assert!(db
        .node_history("gpu-a", None, Some(8))
        .unwrap()
        .checks
        .is_empty());
}

#[test]
fn compare_runs_and_baseline() {
    let tmp = scratch("compare");
    let dir = tmp.path();
    let (mut db, ids) = populated(dir);
    // NVLink run against the socket-transport run: every size above the smallest regresses.
    let c = db
        .compare_runs(
            ids[0],
            ids[2],
            CompareOptions {
                tolerance_pct: 5.0,
                min_size_bytes: 1 << 20,
                ..CompareOptions::default()
            },
        )
        .unwrap();
    assert_eq!(c.result.overall, Verdict::Regression);
    // The socket output stops at 1 GiB: 1 MiB..1 GiB regress (11 sizes x 2 placements),
    // 2..8 GiB are missing on the candidate side.
    assert_eq!(
        (
            c.result.counts.regression,
            c.result.counts.missing,
            c.result.counts.ok
        ),
        (22, 6, 0)
    );
    assert_eq!(c.reference, Reference::Run { run_id: ids[0] });
    // Run 4 (96 %) against the median of runs 1 and 0 (98 %, 100 % -> 99 %): within 5 %.
    let c = db
        .compare_to_baseline(ids[4], 5, CompareOptions::default())
        .unwrap();
    assert_eq!(
        c.reference,
        Reference::Baseline {
            run_ids: vec![ids[1], ids[0]]
        }
    );
    assert_eq!(
        c.result.counts.regression,
        0,
        "{:?}",
        c.result
            .rows
            .iter()
            .filter(|r| r.verdict != Verdict::Ok)
            .collect::<Vec<_>>()
    );
    let c = db
        .compare_to_baseline(
            ids[4],
            5,
            CompareOptions {
                tolerance_pct: 1.0,
                min_size_bytes: 1 << 30,
                ..CompareOptions::default()
            },
        )
        .unwrap();
    assert_eq!(c.result.overall, Verdict::Regression);
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["overall"], "regression");
    assert_eq!(json["reference"]["kind"], "baseline");
    // The first run has nothing earlier; nor does a run of another shape.
    let err = db
        .compare_to_baseline(ids[0], 5, CompareOptions::default())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no earlier ok run of all_reduce on cluster a3"),
        "{err}"
    );
    assert!(matches!(
        db.compare_runs(ids[0], 777, CompareOptions::default()),
        Err(HistoryError::NoSuchRun { id: 777, .. })
    ));
    // A socket fallback recorded as ok is caught by the baseline.
    let mut bad = socket();
    bad.cluster = Some("a3".into());
    bad.variant = Some("tcpx".into());
    bad.nodes = vec!["gpu3".into(), "gpu9".into()];
    bad.started_at = Some(1_796_100_000);
    let id = db.import_run(&bad, false).unwrap().run_id();
    let c = db
        .compare_to_baseline(
            id,
            3,
            CompareOptions {
                tolerance_pct: 10.0,
                min_size_bytes: 1 << 20,
                ..CompareOptions::default()
            },
        )
        .unwrap();
    assert_eq!(c.result.overall, Verdict::Regression);
    assert_eq!(
        c.reference,
        Reference::Baseline {
            run_ids: vec![ids[4], ids[1], ids[0]]
        }
    );
}

#[test]
fn export_csv_and_json() {
    let tmp = scratch("export");
    let dir = tmp.path();
    let (mut db, ids) = populated(dir);
    let mut odd = nvlink();
    odd.cluster = Some("lab, \"east\"".into());
    odd.started_at = Some(1_700_000_000);
    db.import_run(&odd, false).unwrap();
    let rows_per_run = nvlink().rows.len();
    // Five NVLink runs (31 sizes) and one socket run (28 sizes), two placements each.
    let total = 5 * rows_per_run + socket().rows.len();
    assert_eq!(total, (5 * 31 + 28) * 2);

    let mut csv = Vec::new();
    let n = db
        .export(&RunFilter::default(), ExportFormat::Csv, &mut csv)
        .unwrap();
    assert_eq!(n as usize, total);
    let text = String::from_utf8(csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + total);
    assert!(lines[0].starts_with("run_id,at,cluster,"));
    assert!(
        lines[1].starts_with(&format!("{},2026-11-30T04:53:20Z,a3,", ids[4])),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains(",8,2,float,sum,-1,out,"), "{}", lines[1]);
    assert!(text.contains(",\"lab, \"\"east\"\"\","));
    // Every record carries its own run's columns, after a change of run as well (the run's
    // part is read from its first row and kept for the rest): as the listing has them.
    let mut all = Vec::new();
    db.export(&RunFilter::default(), ExportFormat::JsonLines, &mut all)
        .unwrap();
    let listed = db.list_runs(&RunFilter::default()).unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for line in String::from_utf8(all).unwrap().lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let run = listed
            .iter()
            .find(|r| record["run_id"] == r.id)
            .expect("a listed run");
        assert_eq!(
            record["cluster"],
            serde_json::json!(run.cluster),
            "{record}"
        );
        assert_eq!(record["at"], run.at.as_str(), "{record}");
        assert_eq!(
            record["variant"],
            serde_json::json!(run.variant),
            "{record}"
        );
        *seen.entry(run.id).or_insert(0usize) += 1;
    }
    assert_eq!(seen.len(), listed.len());
    for run in &listed {
        assert_eq!(seen[&run.id] as u64, run.row_count, "run {}", run.id);
    }

    let mut jsonl = Vec::new();
    let filter = RunFilter {
        cluster: Some("a4".into()),
        ..RunFilter::default()
    };
    let n = db
        .export(&filter, ExportFormat::JsonLines, &mut jsonl)
        .unwrap();
    let records: Vec<serde_json::Value> = String::from_utf8(jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len() as u64, n);
    assert!(records
        .iter()
        .all(|r| r["run_id"] == ids[3] && r["cluster"] == "a4"));

    let mut arr = Vec::new();
    let filter = RunFilter {
        limit: Some(1),
        ..RunFilter::default()
    };
    db.export(&filter, ExportFormat::JsonArray, &mut arr)
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&arr).unwrap();
    assert_eq!(v.as_array().unwrap().len(), rows_per_run);
    let mut empty = Vec::new();
    let filter = RunFilter {
        cluster: Some("none".into()),
        ..RunFilter::default()
    };
    db.export(&filter, ExportFormat::JsonArray, &mut empty)
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&empty).unwrap(),
        serde_json::json!([])
    );
}

#[test]
fn garbage_files_are_refused_and_left_alone() {
    let tmp = scratch("garbage");
    let dir = tmp.path();
    let cases: [(&str, &[u8]); 3] = [
        ("notes.txt", b"these are my notes, not a database\n"),
        ("short.bin", b"SQLite"),
        ("random.bin", &[0x5a; 4096]),
    ];
    for (name, bytes) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = History::open(&path).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, HistoryError::NotAHistory { .. }), "{msg}");
        assert!(
            msg.contains(name) && msg.contains("move it aside or pass --db"),
            "{msg}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name} was modified");
        assert!(!dir.join(format!("{name}-wal")).exists());
    }
    let err = History::open(dir).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let err = History::open_existing(&dir.join("absent.sqlite")).unwrap_err();
    assert!(matches!(err, HistoryError::Missing { .. }), "{err}");
    assert!(!dir.join("absent.sqlite").exists());
}

#[test]
fn foreign_sqlite_database_is_refused_and_left_alone() {
    let tmp = scratch("foreign");
    let dir = tmp.path();
    let path = dir.join("app.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = History::open(&path).unwrap_err();
    assert!(err.to_string().contains("another program"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", 7).unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = History::open(&path).unwrap_err();
    assert!(err.to_string().contains("application_id 0x0"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn newer_schema_is_refused_without_writing() {
    let tmp = scratch("newer");
    let dir = tmp.path();
    let path = dir.join("h.sqlite");
    {
        let mut db = History::open(&path).unwrap();
        db.import_run(&nvlink(), false).unwrap();
    }
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.pragma_update(None, "user_version", schema::latest_version() + 1)
            .unwrap();
        // Back to a rollback journal so the file alone holds everything.
        c.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = History::open(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HistoryError::SchemaTooNew { .. }), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains(&format!("version {}", schema::latest_version() + 1)),
        "{msg}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(!dir.join("h.sqlite-wal").exists());
}

#[test]
fn reopening_is_a_no_op_and_keeps_data() {
    let tmp = scratch("reopen");
    let dir = tmp.path();
    let path = dir.join("h.sqlite");
    let id = History::open(&path)
        .unwrap()
        .import_run(&nvlink(), false)
        .unwrap()
        .run_id();
    let db = History::open(&path).unwrap();
    let v: i64 = db
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, schema::latest_version());
    let mode: String = db
        .conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(db.get_run(id).unwrap().rows.len(), nvlink().rows.len());
}

#[test]
fn truncated_database_errors_or_reads_cleanly() {
    let tmp = scratch("truncated");
    let dir = tmp.path();
    let path = dir.join("h.sqlite");
    {
        let mut db = History::open(&path).unwrap();
        for i in 0..20 {
            let mut run = nvlink();
            run.source_path = Some(format!("/r/{i}"));
            db.import_run(&run, false).unwrap();
        }
    }
    assert!(
        !dir.join("h.sqlite-wal").exists(),
        "closing should checkpoint the WAL"
    );
    let full = std::fs::read(&path).unwrap();
    assert!(full.len() > 64 * 1024);
    let mut outcomes = Vec::new();
    for cut in [100, 4096, 4096 * 3 + 17, full.len() / 2, full.len() - 4096] {
        let p = dir.join(format!("cut-{cut}.sqlite"));
        std::fs::write(&p, &full[..cut]).unwrap();
        // Whatever happens, no panic, and an error names the file.
        let outcome = History::open(&p).and_then(|db| {
            let runs = db.list_runs(&RunFilter::default())?;
            for r in &runs {
                db.get_run(r.id)?;
            }
            Ok(runs.len())
        });
        if let Err(e) = &outcome {
            assert!(e.to_string().contains(&format!("cut-{cut}.sqlite")), "{e}");
            assert_eq!(
                std::fs::read(&p).unwrap(),
                &full[..cut],
                "refused file was modified"
            );
        }
        outcomes.push(outcome.map_err(|e| e.to_string()));
    }
    // Cutting into the runs table must at least once be reported as damage.
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Err(e) if e.contains("not a gpudirect history"))),
        "{outcomes:#?}"
    );
}

#[test]
fn concurrent_writers_and_a_reader() {
    let tmp = scratch("concurrent");
    let dir = tmp.path();
    let path = dir.join("h.sqlite");
    History::open(&path).unwrap();
    let template = nvlink();
    let per_run = template.rows.len();
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (path, template) = (path.clone(), template.clone());
            std::thread::spawn(move || {
                let mut db = History::open(&path).unwrap();
                for i in 0..50 {
                    let mut run = template.clone();
                    run.source_path = Some(format!("/w{w}/{i}"));
                    assert!(!db.import_run(&run, false).unwrap().is_duplicate());
                }
            })
        })
        .collect();
    let reader = {
        let (path, done) = (path.clone(), done.clone());
        std::thread::spawn(move || {
            let db = History::open(&path).unwrap();
            let mut reads = 0;
            while !done.load(Ordering::SeqCst) {
                // Every run seen is complete: imports are atomic.
                for r in db.list_runs(&RunFilter::default()).unwrap() {
                    assert_eq!(r.row_count as usize, per_run);
                }
                reads += 1;
            }
            reads
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    assert!(reader.join().unwrap() > 0);
    let db = History::open(&path).unwrap();
    let runs = db.list_runs(&RunFilter::default()).unwrap();
    assert_eq!(runs.len(), 100);
    let rows: i64 = db
        .conn
        .query_row("SELECT count(*) FROM results", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows as usize, 100 * per_run);
}

#[test]
fn concurrent_first_open_migrates_once() {
    let tmp = scratch("first-open");
    let dir = tmp.path();
    let path = dir.join("h.sqlite");
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || History::open(&path).map(|_| ()).map_err(|e| e.to_string()))
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    let db = History::open(&path).unwrap();
    let tables: i64 = db
        .conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 5, "runs, run_nodes, results, node_results, vets");
}

/// Child side of `concurrent_processes`: imports 50 runs into the file named by
/// `GPUDIRECT_TEST_DB`. Ignored so that it runs only when the parent starts it.
#[test]
#[ignore = "started by concurrent_processes in a child process"]
fn child_process_writer() {
    let (Some(path), Some(tag)) = (
        std::env::var_os("GPUDIRECT_TEST_DB"),
        std::env::var_os("GPUDIRECT_TEST_WRITER"),
    ) else {
        return;
    };
    let mut db = History::open(Path::new(&path)).unwrap();
    let template = nvlink();
    for i in 0..50 {
        let mut run = template.clone();
        run.source_path = Some(format!("/{}/{i}", tag.to_string_lossy()));
        assert!(!db.import_run(&run, false).unwrap().is_duplicate());
    }
}

/// Two processes writing at once (SQLite's cross-process locks, not just its in-process
/// ones) while this one reads: nothing lost, no "database is locked".
#[test]
fn concurrent_processes() {
    let tmp = scratch("processes");
    let dir = tmp.path();
    let path = dir.join("h.sqlite");
    let db = History::open(&path).unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["p1", "p2"]
        .into_iter()
        .map(|tag| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "history::store::tests::child_process_writer",
                    "--ignored",
                    "--quiet",
                ])
                .env("GPUDIRECT_TEST_DB", &path)
                .env("GPUDIRECT_TEST_WRITER", tag)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let per_run = nvlink().rows.len() as u64;
    let mut children = children;
    let mut reads = 0;
    // Read while either child still writes (their output is small: the pipes cannot fill).
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        let runs = db.list_runs(&RunFilter::default()).unwrap();
        assert!(runs.iter().all(|r| r.row_count == per_run));
        reads += 1;
    }
    assert!(reads > 0);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed: {text}");
        assert!(text.contains("1 passed"), "child ran no test: {text}");
    }
    assert_eq!(db.list_runs(&RunFilter::default()).unwrap().len(), 100);
}

#[test]
fn rows_can_be_replaced_after_a_reparse() {
    let tmp = scratch("reparse");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    let old = db.import_run(&nvlink(), false).unwrap().run_id();
    let mut newer = socket();
    newer.parser_version = 2;
    let new = db.import_run(&newer, false).unwrap().run_id();
    assert_eq!(db.runs_parsed_before(2).unwrap(), [old]);
    let (raw, _) = db.raw_output(old).unwrap();
    assert_eq!(raw, nvlink().raw_output);
    let rows = &nvlink().rows[..4];
    db.replace_rows(old, rows, 2).unwrap();
    let d = db.get_run(old).unwrap();
    assert_eq!((d.rows.len(), d.parser_version), (4, 2));
    assert!(db.runs_parsed_before(2).unwrap().is_empty());
    assert_eq!(db.get_run(new).unwrap().rows.len(), socket().rows.len());
    assert!(matches!(
        db.replace_rows(4242, rows, 2),
        Err(HistoryError::NoSuchRun { .. })
    ));
}

#[test]
fn labels_filter_and_name_a_baseline() {
    let tmp = scratch("labels");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    let labelled = |mut run: NewRun, at: i64, label: Option<&str>| {
        run.started_at = Some(at);
        run.label = label.map(str::to_string);
        run
    };
    let a = db
        .import_run(&labelled(nvlink(), 1_000, Some("base")), false)
        .unwrap()
        .run_id();
    let mut failed = labelled(nvlink(), 2_000, Some("base"));
    failed.status = RunStatus::Failed;
    failed.source_path = Some("/elsewhere/failed.txt".into());
    let f = db.import_run(&failed, false).unwrap().run_id();
    let c = db
        .import_run(&labelled(socket(), 3_000, None), false)
        .unwrap()
        .run_id();

    let only = |label: &str| -> Vec<RunId> {
        db.list_runs(&RunFilter {
            label: Some(label.into()),
            ..RunFilter::default()
        })
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect()
    };
    assert_eq!(only("base"), [f, a]);
    assert!(only("bas").is_empty());
    assert_eq!(
        db.get_run(a).unwrap().summary.label.as_deref(),
        Some("base")
    );
    assert_eq!(db.get_run(c).unwrap().summary.label, None);

    // The newest *ok* run with the label: the failed one is skipped.
    assert_eq!(db.newest_labeled("base", Some(c)).unwrap(), Some(a));
    assert_eq!(db.newest_labeled("base", Some(a)).unwrap(), None);
    let cmp = db
        .compare_to_label(c, "base", CompareOptions::default())
        .unwrap();
    assert_eq!(
        cmp.reference,
        Reference::Labeled {
            label: "base".into(),
            run_id: a
        }
    );
    assert_eq!(cmp.result.overall, Verdict::Regression);
    let err = db
        .compare_to_label(a, "base", CompareOptions::default())
        .unwrap_err();
    assert!(matches!(err, HistoryError::NoLabeledRun { .. }), "{err}");
    assert!(err.to_string().contains("--label base"), "{err}");
    assert!(matches!(
        db.compare_to_label(99, "base", CompareOptions::default()),
        Err(HistoryError::NoSuchRun { id: 99, .. })
    ));
}

/// A stand-in replay measured nothing: it never enters a measurement's baseline, nor the
/// baseline validate judges against; replays are compared only with replays.
#[test]
fn baselines_keep_replays_and_measurements_apart() {
    let tmp = scratch("replay-baseline");
    let dir = tmp.path();
    let (mut db, ids) = populated(dir);
    // A fast replay after the a3 tcpx runs, then a measurement after it.
    let mut replay = nvlink();
    replay.cluster = Some("a3".into());
    replay.nodes = vec!["gpu1".into(), "gpu9".into()];
    replay.variant = Some("tcpx".into());
    replay.started_at = Some(1_796_000_000 + 3600 * 10);
    for r in &mut replay.rows {
        r.busbw *= 3.0;
    }
    replay.provenance.env.insert(
        REPLAY_ENV.to_string(),
        "h200x2-nvlink/all_reduce_g2.txt".into(),
    );
    let r = db.import_run(&replay, false).unwrap().run_id();
    let mut later = replay.clone();
    later.provenance.env.remove(REPLAY_ENV);
    later.started_at = Some(1_796_000_000 + 3600 * 11);
    later.source_path = Some("/runs/later.txt".into());
    let m = db.import_run(&later, false).unwrap().run_id();
    let mut second = replay.clone();
    second.started_at = Some(1_796_000_000 + 3600 * 12);
    let r2 = db.import_run(&second, true).unwrap().run_id(); // live: same bytes again

    let b = db
        .baseline(&tcpx_key("a3", 2), 1 << 30, 10)
        .unwrap()
        .unwrap();
    let used: Vec<RunId> = b.samples.iter().map(|s| s.0).collect();
    assert!(
        !used.contains(&r),
        "the replay is in validate's baseline: {used:?}"
    );
    assert!(used.contains(&m));

    let baseline_runs = |id| match db
        .compare_to_baseline(id, 10, CompareOptions::default())
        .map(|c| c.reference)
    {
        Ok(Reference::Baseline { run_ids }) => run_ids,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        baseline_runs(m),
        [ids[4], ids[1], ids[0]],
        "measurements only"
    );
    // The replay's own baseline: no earlier replay of that kind.
    assert!(db
        .compare_to_baseline(r, 10, CompareOptions::default())
        .is_err());
    assert_eq!(baseline_runs(r2), [r], "replays only");
}

#[test]
fn listings_carry_the_replay_marking() {
    let tmp = scratch("replay-summary");
    let dir = tmp.path();
    let mut db = History::open(&dir.join("h.sqlite")).unwrap();
    let mut replay = nvlink();
    replay.provenance.env.insert(
        REPLAY_ENV.to_string(),
        "h200x2-nvlink/all_reduce_g2.txt".into(),
    );
    let r = db.import_run(&replay, false).unwrap().run_id();
    let m = db.import_run(&socket(), false).unwrap().run_id();
    let runs = db.list_runs(&RunFilter::default()).unwrap();
    let marking = |id| runs.iter().find(|s| s.id == id).unwrap().replay_of.clone();
    assert_eq!(
        marking(r).as_deref(),
        Some("h200x2-nvlink/all_reduce_g2.txt")
    );
    assert_eq!(marking(m), None);
    assert_eq!(db.get_run(r).unwrap().summary.replay_of, marking(r));
}

/// Security review S6: root's baseline counts only the runs that root recorded, and never
/// a run dated in the future (an imported output chooses its own date).
#[test]
fn a_baseline_by_recorder_ignores_other_writers_and_future_dates() {
    let tmp = scratch("baseline-recorder");
    let (mut db, ids) = populated(tmp.path());
    let me = nix::unistd::geteuid().as_raw();
    let mine = |db: &History| {
        db.baseline_recorded_by(&tcpx_key("a3", 2), 1 << 30, 10, Some(me))
            .unwrap()
            .map(|b| b.samples.iter().map(|s| s.0).collect::<Vec<_>>())
    };
    assert_eq!(mine(&db), Some(vec![ids[4], ids[1], ids[0]]));

    // Another writer of the file: ten times the busbw, recorded under another uid.
    let mut forged = nvlink();
    forged.cluster = Some("a3".into());
    forged.variant = Some("tcpx".into());
    forged.started_at = Some(1_796_000_000 + 3600 * 30);
    forged.source_path = Some("/runs/forged.txt".into());
    for r in &mut forged.rows {
        r.busbw *= 10.0;
    }
    let other = db.import_run(&forged, false).unwrap().run_id();
    rusqlite::Connection::open(tmp.path().join("h.sqlite"))
        .unwrap()
        .execute(
            "UPDATE runs SET recorded_uid = ?1 WHERE id = ?2",
            params![me.wrapping_add(4242), other],
        )
        .unwrap();
    assert_eq!(mine(&db), Some(vec![ids[4], ids[1], ids[0]]), "another uid");
    let anyone = db
        .baseline(&tcpx_key("a3", 2), 1 << 30, 10)
        .unwrap()
        .unwrap();
    assert_eq!(
        anyone.samples[0].0, other,
        "without a recorder, anyone's runs count"
    );

    // The same forgery dated a year ahead, recorded by us: out of every baseline.
    forged.started_at = Some(now_unix() + 365 * 24 * 3600);
    forged.source_path = Some("/runs/future.txt".into());
    let future = db.import_run(&forged, false).unwrap().run_id();
    for baseline in [
        db.baseline(&tcpx_key("a3", 2), 1 << 30, 10)
            .unwrap()
            .unwrap(),
        db.baseline_recorded_by(&tcpx_key("a3", 2), 1 << 30, 10, Some(me))
            .unwrap()
            .unwrap(),
    ] {
        assert!(
            baseline.samples.iter().all(|s| s.0 != future),
            "{baseline:?}"
        );
    }
    // Each run carries who recorded it (runs from before migration 5 carry NULL).
    let stored: Option<u32> = rusqlite::Connection::open(tmp.path().join("h.sqlite"))
        .unwrap()
        .query_row(
            "SELECT recorded_uid FROM runs WHERE id = ?1",
            [ids[0]],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, Some(me));
}

/// S6: as root, the history must be root's alone. A folder others may write is refused
/// before anything is created in it; a symlink or a FIFO at the path is refused without
/// following or blocking.
#[test]
fn a_trusted_open_refuses_what_others_can_change() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = scratch("trusted");
    let me = nix::unistd::geteuid().as_raw();
    let probe = gpudirect_core::system::SystemProbe::trusting(me, tmp.path());

    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o775)).unwrap();
    let path = shared.join("sub").join("h.sqlite");
    let err = History::open_trusted(&path, &probe).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, HistoryError::Untrusted { .. }), "{msg}");
    assert!(
        msg.contains("writable by group") && msg.contains("root-only folder"),
        "{msg}"
    );
    assert!(!shared.join("sub").exists(), "nothing created");

    // The same file in a folder only its owner can change opens, and is created.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    History::open_trusted(&path, &probe).unwrap();
    assert!(path.is_file());
    // A history file others may write is refused too.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = History::open_trusted(&path, &probe).unwrap_err();
    assert!(
        err.to_string().contains("writable by group and others"),
        "{err}"
    );

    // Untrusted or not, a link is not followed and a FIFO does not block.
    let link = tmp.path().join("link.sqlite");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let err = History::open(&link).unwrap_err();
    assert!(err.to_string().contains("a symbolic link"), "{err}");
    let fifo = tmp.path().join("fifo.sqlite");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let err = History::open(&fifo).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}
