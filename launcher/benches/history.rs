//! Times the history at the size issue 3 asks for: 10,000 runs of 32 rows each (16 sizes,
//! 1 MiB .. 32 GiB, x two placements), each with a ~4.6 KB raw output (a recorded one),
//! imported one transaction per run as `gpudirect run` and `import` do; then the read
//! queries on that history, `compare` in its three forms among them. Every 100th run is
//! labelled `weekly` (a named baseline) and every 50th is marked as a stand-in replay.
//!
//! `cargo bench -p gpudirect --bench history`; `HISTORY_BENCH_RUNS=N` changes the count.
//! The file goes to a temporary folder, removed at the end (also on an error), unless
//! `HISTORY_BENCH_DB=PATH` names where to write it (kept, e.g. to time `gpudirect history
//! --limit 0` on it). The runs are drawn from the simulator's seeded generator, so they are
//! the same on every machine.

use std::time::{Duration, Instant};

use gpudirect::history::{
    CompareOptions, ExportFormat, History, LaunchKind, NewRow, NewRun, Placement, RunFilter,
    RunProvenance, RunStatus,
};
use gpudirect::validate::simulate::Rng;

const RAW: &[u8] =
    include_bytes!("../../tests/fixtures/nccl-tests/h200x2-nvlink/all_reduce_g2.txt");

/// Rows per run: 16 sizes, out-of-place and in-place.
const ROWS_PER_RUN: usize = 32;

fn make_run(i: usize, rng: &mut Rng) -> NewRun {
    let nodes_in_run = 2 + rng.below(4) * 2;
    let first = rng.below(60);
    let nodes: Vec<String> = (0..nodes_in_run)
        .map(|k| format!("gpu{:03}", first + k))
        .collect();
    let speed = 0.9 + 0.2 * rng.uniform();
    let mut rows = Vec::with_capacity(ROWS_PER_RUN);
    for s in 0..(ROWS_PER_RUN as u32 / 2) {
        let size = 1u64 << (20 + s);
        for placement in [Placement::Out, Placement::In] {
            let busbw = 300.0 * speed * (1.0 - 0.5f64.powi(s as i32 + 1));
            rows.push(NewRow {
                size_bytes: size,
                count: size / 4,
                dtype: "float".into(),
                redop: "sum".into(),
                root: Some(-1),
                placement,
                time_us: size as f64 / (busbw * 1e3),
                algbw: busbw,
                busbw,
                wrong: Some(0),
                algorithm: None,
                protocol: None,
            });
        }
    }
    let mut raw = RAW.to_vec();
    raw.extend_from_slice(format!("# bench run {i}\n").as_bytes());
    NewRun {
        started_at: Some(1_796_000_000 + 60 * i as i64),
        cluster: Some(["a3", "a4"][i % 2].into()),
        job_id: Some((100_000 + i).to_string()),
        nodelist: Some(format!("gpu[{:03}-{:03}]", first, first + nodes_in_run - 1)),
        node_count: Some(nodes_in_run as u32),
        nodes,
        gpus_per_node: Some(8),
        total_ranks: Some(8 * nodes_in_run as u32),
        collective: ["all_reduce", "all_gather", "reduce_scatter"][i % 3].into(),
        variant: Some("default".into()),
        label: i.is_multiple_of(100).then(|| "weekly".into()),
        provenance: RunProvenance {
            env: if i.is_multiple_of(50) {
                [(
                    "GPUDIRECT_STANDIN_REPLAY".to_string(),
                    "h200x2-nvlink/all_reduce_g2.txt".to_string(),
                )]
                .into()
            } else {
                Default::default()
            },
            ..RunProvenance::default()
        },
        launcher: LaunchKind::Srun,
        source_path: Some(format!("/runs/{i}.txt")),
        status: if rng.below(20) == 0 {
            RunStatus::Failed
        } else {
            RunStatus::Ok
        },
        exit_code: Some(0),
        avg_busbw: Some(150.0 * speed),
        raw_output: raw,
        parser_version: 1,
        rows,
        ..NewRun::default()
    }
}

/// Runs `f` once, and adds its wall time and a note on its result to `table`.
fn time<T>(
    label: &str,
    table: &mut Vec<(String, Duration, String)>,
    f: impl FnOnce() -> T,
    note: impl Fn(&T) -> String,
) {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    table.push((label.to_string(), took, note(&out)));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::var("HISTORY_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let keep = std::env::var_os("HISTORY_BENCH_DB").map(std::path::PathBuf::from);
    let dir = tempfile::Builder::new()
        .prefix("gpudirect-history-bench-")
        .tempdir()?;
    let path = match &keep {
        Some(p) => {
            let _ = std::fs::remove_file(p);
            p.clone()
        }
        None => dir.path().join("history.sqlite"),
    };
    let mut db = History::open(&path)?;
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let prepared: Vec<NewRun> = (0..runs).map(|i| make_run(i, &mut rng)).collect();
    let mut table = Vec::new();

    let start = Instant::now();
    let mut last = 0;
    for run in &prepared {
        last = db.import_run(run, false)?.run_id();
    }
    let took = start.elapsed();
    table.push((
        format!("import {runs} runs x {ROWS_PER_RUN} rows"),
        took,
        format!(
            "{:.0} runs/s, {:.2} ms/run",
            runs as f64 / took.as_secs_f64(),
            took.as_secs_f64() * 1e3 / runs as f64
        ),
    ));
    time(
        "re-import one (duplicate)",
        &mut table,
        || db.import_run(&prepared[runs / 2], false),
        |r| format!("{:?}", r.as_ref().map(|o| o.is_duplicate())),
    );
    time(
        "list_runs newest 50",
        &mut table,
        || {
            db.list_runs(&RunFilter {
                limit: Some(50),
                ..RunFilter::default()
            })
        },
        |r| format!("{} runs", r.as_ref().map_or(0, Vec::len)),
    );
    time(
        "list_runs all (history --limit 0)",
        &mut table,
        || db.list_runs(&RunFilter::default()),
        |r| format!("{} runs", r.as_ref().map_or(0, Vec::len)),
    );
    time(
        "list_runs node=gpu030 all_reduce",
        &mut table,
        || {
            db.list_runs(&RunFilter {
                node: Some("gpu030".into()),
                collective: Some("all_reduce".into()),
                ..RunFilter::default()
            })
        },
        |r| format!("{} runs", r.as_ref().map_or(0, Vec::len)),
    );
    time(
        "get_run",
        &mut table,
        || db.get_run(last),
        |r| format!("{} rows", r.as_ref().map_or(0, |d| d.rows.len())),
    );
    time(
        "compare_runs (two runs)",
        &mut table,
        || db.compare_runs(last - 3, last, CompareOptions::default()),
        |r| format!("{:?}", r.as_ref().map(|c| c.result.overall)),
    );
    time(
        "compare_to_baseline (last 10)",
        &mut table,
        || db.compare_to_baseline(last, 10, CompareOptions::default()),
        |r| format!("{:?}", r.as_ref().map(|c| c.result.overall)),
    );
    time(
        "compare_to_label weekly",
        &mut table,
        || db.compare_to_label(last, "weekly", CompareOptions::default()),
        |r| format!("{:?}", r.as_ref().map(|c| c.result.overall)),
    );
    time(
        "baseline a3 all_reduce 1 GiB (last 20)",
        &mut table,
        || {
            db.baseline(
                &gpudirect::baseline::Key {
                    collective: "all_reduce".into(),
                    cluster: Some("a3".into()),
                    node_count: Some(2),
                    total_ranks: Some(16),
                    variant: Some("default".into()),
                },
                1 << 30,
                20,
            )
        },
        |r| {
            format!(
                "{:?}",
                r.as_ref()
                    .ok()
                    .and_then(Option::as_ref)
                    .map(|b| (b.median_busbw * 10.0).round() / 10.0)
            )
        },
    );
    time(
        "node_history gpu030",
        &mut table,
        || db.node_history("gpu030", None, None),
        |r| format!("{} points", r.as_ref().map_or(0, |h| h.runs.len())),
    );
    let mut sink = std::io::sink();
    time(
        "export all as CSV",
        &mut table,
        || db.export(&RunFilter::default(), ExportFormat::Csv, &mut sink),
        |r| format!("{:?} records", r.as_ref().ok()),
    );
    drop(db);
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);

    println!("{:<40} {:>12}  note", "operation", "time");
    for (label, took, note) in &table {
        println!("{label:<40} {:>10.3}ms  {note}", took.as_secs_f64() * 1e3);
    }
    println!(
        "history file: {:.1} MiB for {runs} runs",
        size as f64 / (1024.0 * 1024.0)
    );
    if let Some(p) = keep {
        println!("kept {}", p.display());
    }
    Ok(())
}
