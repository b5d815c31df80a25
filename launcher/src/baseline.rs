//! "As fast as before?", one rule for every command that asks it.
//!
//! - **Comparable runs** (the key): same collective, cluster, node count, total ranks and
//!   variant, and the same kind (measurements with measurements, stand-in replays with
//!   replays). The SQL that selects them is `History::compare_to_baseline`.
//! - **The baseline** of a run: the per-key median of up to N earlier ok runs with that key.
//! - **The verdict**: `history::compare`'s size bands: the large (bandwidth-bound) band
//!   decides; a band regresses when any of its sizes is slower than the tolerance allows.
//!
//! `gpudirect compare RUN --baseline` and `gpudirect report` both judge a run through
//! [`judge_against_baseline`], so they cannot disagree about it (before, the report had
//! its own key, took the baseline from the other runs of the report, and judged only the
//! largest size, so a healthy pair could be an "improvement" over a baseline made of slow
//! pairs).

use serde::Serialize;

pub use crate::history::compare::{median, CompareOptions, SeriesComparison, Verdict as Change};
use crate::history::{CompareRow, History, HistoryError, Placement, RunId, RunStatus};

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
}
