//! "As fast as before?", one rule for every command that asks it.
//!
//! - **Comparable runs** (the key, [`Key`]): same collective, cluster, node count, total
//!   ranks and variant, and the same kind (measurements with measurements, stand-in
//!   replays with replays). The SQL that selects them is `History::compare_to_baseline`
//!   for `compare` and `report`, and `History::baseline` (a [`Key`]) for `validate`'s and
//!   `health`'s line at one size.
//! - **The baseline** of a run: the per-key median of up to N earlier ok runs with that key.
//! - **The verdict**: `history::compare`'s size bands: the large (bandwidth-bound) band
//!   decides; a band regresses when any of its sizes is slower than the tolerance allows.
//!
//! - **A node over time**, two questions with one home here: [`trend`] (`history --node`:
//!   are the last [`TREND_RECENT`] points all below the median of the earlier ones?) and
//!   [`flag_drops`] (the report's plot: which single points fell below the median of the
//!   [`DROP_WINDOW`] before them?). A trend needs several low points in a row; a marked
//!   drop is one point, so the report can mark a drop where `history` sees no trend yet.
//! - **A version set that met its baseline** (`history --versions`):
//!   [`last_good_per_fabric`].
//!
//! `gpudirect compare RUN --baseline` and `gpudirect report` both judge a run through
//! [`judge_against_baseline`], so they cannot disagree about it (before, the report had
//! its own key, took the baseline from the other runs of the report, and judged only the
//! largest size, so a healthy pair could be an "improvement" over a baseline made of slow
//! pairs).

use std::collections::HashSet;

use serde::Serialize;

pub use crate::history::compare::{median, CompareOptions, SeriesComparison, Verdict as Change};
/// The comparability key: what a run must share with another to be its baseline, and its
/// two refinements ([`Key::band`], [`Key::versions`]).
pub use crate::history::RunKey as Key;
pub use crate::history::{BandKey, VersionsKey};
use crate::history::{CompareRow, History, HistoryError, Placement, RunId, RunStatus, RunSummary};

/// A run's verdict against its baseline, with the figures that decided it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunVerdict {
    /// Run id.
    pub run_id: RunId,
    /// The size shown: the largest out-of-place size both sides have (else the run's own
    /// largest size).
    pub size_bytes: Option<u64>,
    /// The run's busbw there, GB/s.
    pub busbw: Option<f64>,
    /// The baseline there, GB/s.
    pub baseline: Option<f64>,
    /// `(busbw - baseline) / baseline`, percent.
    pub delta_pct: Option<f64>,
    /// `ok`, `regression`, `improvement`, `no baseline`, `no data`, or the run's own
    /// failure status (`failed`, `wrong`, `timeout`, `interrupted`).
    pub verdict: String,
    /// The baseline's runs (empty without a baseline).
    pub baseline_runs: Vec<RunId>,
}

/// The verdict on a run from what its comparison found (pure). The run's own failure
/// comes first; a run with no busbw is `no data`; no comparison, or one where nothing
/// could be compared, is `no baseline`; otherwise the comparison's overall verdict.
/// `largest` is the run's own busbw at its largest size, shown when there is no baseline.
pub fn run_verdict(
    run_id: RunId,
    status: RunStatus,
    largest: Option<(u64, f64)>,
    comparison: Option<(&SeriesComparison, &[RunId])>,
) -> RunVerdict {
    let shown: Option<&CompareRow> = comparison.and_then(|(c, _)| {
        c.rows.iter().rev().find(|r| {
            r.key.placement == Placement::Out
                && r.reference_busbw.is_some()
                && r.candidate_busbw.is_some()
        })
    });
    let mut v = RunVerdict {
        run_id,
        size_bytes: largest.map(|(s, _)| s),
        busbw: largest.map(|(_, b)| b),
        baseline: None,
        delta_pct: None,
        verdict: String::new(),
        baseline_runs: comparison.map(|(_, ids)| ids.to_vec()).unwrap_or_default(),
    };
    if let Some(row) = shown {
        v.size_bytes = Some(row.key.size_bytes);
        v.busbw = row.candidate_busbw;
        v.baseline = row.reference_busbw;
        v.delta_pct = row.delta_pct;
    }
    v.verdict = if status != RunStatus::Ok {
        status.to_string()
    } else if v.busbw.is_none() {
        "no data".into()
    } else {
        match comparison.map(|(c, _)| c.overall) {
            None | Some(Change::Missing) => "no baseline".into(),
            Some(change) => change.as_str().into(),
        }
    };
    v
}

/// Judges run `id` against its baseline in the history: the median of up to `last_n`
/// earlier ok runs with its key (see the module docs). `largest` as in [`run_verdict`].
pub fn judge_against_baseline(
    history: &History,
    id: RunId,
    status: RunStatus,
    largest: Option<(u64, f64)>,
    last_n: u32,
    options: CompareOptions,
) -> Result<RunVerdict, HistoryError> {
    match history.compare_to_baseline(id, last_n, options) {
        Ok(c) => {
            let ids = match &c.reference {
                crate::history::Reference::Baseline { run_ids } => run_ids.clone(),
                crate::history::Reference::Run { run_id }
                | crate::history::Reference::Labeled { run_id, .. } => vec![*run_id],
            };
            Ok(run_verdict(id, status, largest, Some((&c.result, &ids))))
        }
        Err(HistoryError::NoBaseline { .. }) => Ok(run_verdict(id, status, largest, None)),
        Err(e) => Err(e),
    }
}

// `history --versions`: the last version set that met its baseline, per fabric.

/// Earlier runs a `--versions` baseline is the median of.
pub const VERSIONS_BASELINE_RUNS: usize = 5;

/// A run's group in `history --versions`: its cluster and its fabric (the transport NCCL
/// used, else the variant), `-` where unknown.
pub fn cluster_and_fabric(run: &RunSummary) -> (String, String) {
    (
        crate::output::or_dash(run.cluster.as_deref()),
        crate::output::or_dash(run.transport.as_deref().or(run.variant.as_deref())),
    )
}

/// For each (cluster, fabric), the newest run that met its baseline ([`met_baseline`]),
/// newest group first. `runs` newest first, as `list_runs` gives them. Pure.
pub fn last_good_per_fabric(runs: &[RunSummary], tolerance_pct: f64) -> Vec<(&RunSummary, String)> {
    let usable: Vec<&RunSummary> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Ok && r.replay_of.is_none())
        .collect();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut found = Vec::new();
    for (i, run) in usable.iter().enumerate() {
        let key = cluster_and_fabric(run);
        if seen.contains(&key) {
            continue;
        }
        if let Some(basis) = met_baseline(run, &usable[i + 1..], tolerance_pct) {
            seen.insert(key);
            found.push((*run, basis));
        }
    }
    found
}

/// Whether `run` met its baseline: the median busbw at the largest size of up to
/// [`VERSIONS_BASELINE_RUNS`] of `earlier` (newest first) of the same kind (collective,
/// cluster, node and rank count, variant, transport, largest size). `Some(basis)` when it did, said
/// for the user; a run with no earlier one of its kind is its own baseline.
fn met_baseline(run: &RunSummary, earlier: &[&RunSummary], tolerance_pct: f64) -> Option<String> {
    let kind = |r: &RunSummary| Key::of(r).versions(r.transport.as_deref(), r.max_size_bytes);
    let values: Vec<f64> = earlier
        .iter()
        .filter(|r| kind(r) == kind(run))
        .filter_map(|r| r.busbw)
        .take(VERSIONS_BASELINE_RUNS)
        .collect();
    let Some(reference) = median(&values) else {
        return Some("first run of its kind".into());
    };
    let busbw = run.busbw?;
    (busbw >= reference * (1.0 - tolerance_pct / 100.0)).then(|| {
        format!(
            "{busbw:.2} GB/s, baseline {reference:.2} (median of {} earlier)",
            values.len()
        )
    })
}

// `history --node`: a node's downward trend.

/// `history --node` and `--versions`' `--tolerance` when not given, percent.
pub const TREND_DEFAULT_TOLERANCE_PCT: f64 = 5.0;

/// How many latest points must all be low for a downward trend.
pub const TREND_RECENT: usize = 3;

/// How many earlier points the median needs before a trend is judged.
pub const TREND_MIN_EARLIER: usize = 3;

/// A node's trend in one group of comparable points.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "trend", rename_all = "snake_case")]
pub enum Trend {
    /// Not enough points to judge.
    TooFew {
        /// Points in the group.
        points: usize,
        /// Points needed.
        needed: usize,
    },
    /// The last points are not all below the earlier median by more than the tolerance.
    Steady {
        /// Median of the earlier points, GB/s.
        earlier_median: f64,
    },
    /// Each of the last points is below the earlier median by more than the tolerance.
    Downward {
        /// Median of the earlier points, GB/s.
        earlier_median: f64,
        /// How far below it each of the last points is, percent, oldest first.
        drops_pct: Vec<f64>,
    },
}

/// Judges a series of busbw values, oldest first: downward when each of the last
/// [`TREND_RECENT`] is below the median of the (at least [`TREND_MIN_EARLIER`]) earlier ones
/// by more than `tolerance_pct`. Pure.
pub fn trend(values: &[f64], tolerance_pct: f64) -> Trend {
    let needed = TREND_RECENT + TREND_MIN_EARLIER;
    if values.len() < needed {
        return Trend::TooFew {
            points: values.len(),
            needed,
        };
    }
    let (earlier, recent) = values.split_at(values.len() - TREND_RECENT);
    let Some(m) = median(earlier).filter(|m| *m > 0.0) else {
        return Trend::TooFew {
            points: values.len(),
            needed,
        };
    };
    let drops: Vec<f64> = recent.iter().map(|v| (m - v) / m * 100.0).collect();
    if drops.iter().all(|d| *d > tolerance_pct) {
        Trend::Downward {
            earlier_median: m,
            drops_pct: drops,
        }
    } else {
        Trend::Steady { earlier_median: m }
    }
}

// The report's nodes over time: the points that dropped.

/// How many earlier points a new point is compared with.
pub const DROP_WINDOW: usize = 5;

/// Marks the points that fell below the median of the up to `window` points before
/// them by more than `tolerance_pct` (pure). A point needs at least two earlier finite
/// points to be judged, so one noisy first run does not flag the second.
pub fn flag_drops(values: &[f64], window: usize, tolerance_pct: f64) -> Vec<bool> {
    (0..values.len())
        .map(|i| {
            let earlier: Vec<f64> = values[i.saturating_sub(window)..i]
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .collect();
            let v = values[i];
            earlier.len() >= 2
                && v.is_finite()
                && median(&earlier).is_some_and(|m| v < m * (1.0 - tolerance_pct / 100.0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{self, CellOutput, Reading};
    use crate::history::LaunchKind;
    use crate::record::RunContext;
    use crate::report::{gather, ReportOptions, Selection};

    fn fixture(rel: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/nccl-tests")
                .join(rel),
        )
        .unwrap()
    }

    /// Records a fixture as a 2-node run of cluster `c` at `at` (unix seconds).
    fn record(history: &mut History, rel: &str, at: i64) -> RunId {
        let run = cell::evaluate(
            CellOutput::from_file(fixture(rel)),
            &Reading::default(),
            cell::Run {
                exit_code: Some(0),
                context: RunContext {
                    started_at: Some(at),
                    cluster: Some("c".into()),
                    nodes: vec!["n1".into(), "n2".into()],
                    launcher: LaunchKind::Import,
                    ..RunContext::default()
                },
                ..cell::Run::default()
            },
        );
        history.import_run(&run.record, true).unwrap().run_id()
    }

    /// `compare RUN --baseline` and `report` judge the same runs alike: the loaded run is a
    /// regression against the clean ones in both, the clean run is ok in both, and the
    /// first run has no baseline in either.
    #[test]
    fn compare_and_report_give_the_same_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let mut history = History::open(&dir.path().join("h.sqlite")).unwrap();
        let clean = "h200x2-degraded/all_reduce_g2_clean.txt";
        let loaded = "h200x2-degraded/all_reduce_g2_load_copy_gpu1.txt";
        let first = record(&mut history, clean, 1_000);
        let second = record(&mut history, "h200x2-nvlink/all_reduce_g2.txt", 2_000);
        let slow = record(&mut history, loaded, 3_000);
        let again = record(&mut history, clean, 4_000);
        let options = CompareOptions::default();
        let report = gather(
            &history,
            &ReportOptions {
                selection: Selection::Runs(vec![first, second, slow, again]),
                ..ReportOptions::default()
            },
        )
        .unwrap();
        let mut seen = Vec::new();
        for (run, from_report) in report.runs.iter().zip(&report.verdicts) {
            let from_compare = match history.compare_to_baseline(run.run_id, 10, options) {
                Ok(c) => c.result.overall.as_str().to_string(),
                Err(HistoryError::NoBaseline { .. }) => "no baseline".into(),
                Err(e) => panic!("{e}"),
            };
            assert_eq!(from_report.verdict, from_compare, "run {}", run.run_id);
            seen.push((run.run_id, from_compare));
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                (first, "no baseline".to_string()),
                (second, "ok".into()),
                (slow, "regression".into()),
                (again, "ok".into()),
            ]
        );
    }

    #[test]
    fn failures_and_missing_data_come_first() {
        let v = run_verdict(1, RunStatus::Failed, Some((8, 1.0)), None);
        assert_eq!(v.verdict, "failed");
        assert_eq!(run_verdict(1, RunStatus::Ok, None, None).verdict, "no data");
        let v = run_verdict(1, RunStatus::Ok, Some((8 << 30, 340.0)), None);
        assert_eq!(
            (v.verdict.as_str(), v.size_bytes, v.busbw),
            ("no baseline", Some(8 << 30), Some(340.0))
        );
    }

    // Out-of-place busbw at 8 GiB, tests/fixtures/nccl-tests/: healthy runs are
    // h200x2-nvlink/all_reduce_g2.txt (343.64) and h200x2-degraded/all_reduce_g2_clean.txt
    // (346.51); the degraded ones ran beside a load on GPU 1 (matmul at 30 % duty, 4 GiB
    // copies, matmul).
    const HEALTHY: [f64; 5] = [343.64, 346.51, 343.64, 346.51, 343.64];
    const DEGRADED: [f64; 3] = [290.45, 164.07, 162.91];

    fn summary(
        id: RunId,
        cluster: &str,
        transport: &str,
        busbw: f64,
        status: RunStatus,
    ) -> RunSummary {
        RunSummary {
            id,
            at: format!("2026-11-{:02}T10:00:00Z", id),
            started_at: None,
            finished_at: None,
            imported_at: String::new(),
            cluster: Some(cluster.into()),
            job_id: None,
            step_id: None,
            nodelist: None,
            node_count: Some(2),
            gpus_per_node: Some(8),
            total_ranks: Some(16),
            collective: "all_reduce".into(),
            variant: None,
            label: None,
            launcher: crate::history::LaunchKind::Srun,
            tool: crate::history::Tool::Run,
            status,
            exit_code: Some(0),
            transport: Some(transport.into()),
            avg_busbw: None,
            busbw: Some(busbw),
            max_size_bytes: Some(8 << 30),
            row_count: 62,
            source_path: None,
            output_sha256: String::new(),
            replay_of: None,
            line_rate_gbps: None,
        }
    }

    /// `history --versions` (issue #18): per cluster and fabric, the newest run that met
    /// its baseline; a slow or failed newer run is passed over, and a fabric's first run
    /// is its own baseline.
    #[test]
    fn the_last_good_version_set_is_found_per_cluster_and_fabric() {
        // Newest first, as list_runs gives them.
        let runs = vec![
            summary(9, "a3", "GPUDirectTCPX", 120.0, RunStatus::Ok), // 40% under its baseline
            summary(8, "a3", "GPUDirectTCPX", 200.0, RunStatus::Failed),
            summary(7, "a3", "Socket", 20.0, RunStatus::Ok), // the only Socket run
            summary(6, "a3", "GPUDirectTCPX", 196.0, RunStatus::Ok), // 2% under: meets it
            summary(5, "a3", "GPUDirectTCPX", 200.0, RunStatus::Ok),
            summary(4, "a3", "GPUDirectTCPX", 200.0, RunStatus::Ok),
            summary(3, "a4", "gIB", 350.0, RunStatus::Ok),
        ];
        let found: Vec<(RunId, String)> = last_good_per_fabric(&runs, 5.0)
            .into_iter()
            .map(|(r, basis)| (r.id, basis))
            .collect();
        assert_eq!(
            found,
            [
                (7, "first run of its kind".to_string()),
                (
                    6,
                    "196.00 GB/s, baseline 200.00 (median of 2 earlier)".to_string()
                ),
                (3, "first run of its kind".to_string()),
            ]
        );
        // At a 50% tolerance the slow newest run meets its baseline.
        assert_eq!(last_good_per_fabric(&runs, 50.0)[0].0.id, 9);
    }

    #[test]
    fn three_low_points_after_a_healthy_history_trend_down() {
        let mut v = HEALTHY.to_vec();
        v.extend(DEGRADED);
        match trend(&v, 5.0) {
            Trend::Downward {
                earlier_median,
                drops_pct,
            } => {
                assert_eq!(earlier_median, 343.64);
                assert_eq!(drops_pct.len(), 3);
                assert!((drops_pct[0] - (343.64 - 290.45) / 343.64 * 100.0).abs() < 1e-9);
            }
            other => panic!("expected downward, got {other:?}"),
        }
        // A drop of 15.5 % is not one at a 20 % tolerance.
        assert!(matches!(trend(&v, 20.0), Trend::Steady { .. }));
    }

    #[test]
    fn one_recovered_point_or_noise_is_steady() {
        let mut v = HEALTHY.to_vec();
        v.extend([290.45, 346.51, 162.91]);
        assert!(matches!(trend(&v, 5.0), Trend::Steady { .. }));
        // Within the tolerance: 4.3 % lower is noise at 5 %.
        let mut v = HEALTHY.to_vec();
        v.extend([329.0, 329.0, 329.0]);
        assert!(matches!(trend(&v, 5.0), Trend::Steady { .. }));
        assert!(matches!(trend(&v, 3.0), Trend::Downward { .. }));
    }

    #[test]
    fn short_histories_are_not_judged() {
        assert_eq!(
            trend(&[343.0, 100.0, 90.0, 80.0, 70.0], 5.0),
            Trend::TooFew {
                points: 5,
                needed: 6
            }
        );
        assert_eq!(
            trend(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 5.0),
            Trend::TooFew {
                points: 6,
                needed: 6
            }
        );
    }

    #[test]
    fn drops_are_judged_against_earlier_runs() {
        let v = [100.0, 101.0, 99.0, 100.0, 80.0, f64::NAN, 100.0, 93.0];
        let d = flag_drops(&v, 5, 5.0);
        assert_eq!(d, [false, false, false, false, true, false, false, true]);
        // Too little history to judge: nothing flagged.
        assert_eq!(flag_drops(&[100.0, 10.0], 5, 5.0), [false, false]);
        assert!(flag_drops(&[], 5, 5.0).is_empty());
    }
}
