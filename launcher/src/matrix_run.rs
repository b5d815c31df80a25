//! A matrix run (`gpudirect run`): each cell's [`Spec`] (the transport and NICs its profile
//! requires, where it runs, the marks `--resume` finds), the cells run one after another
//! through `cell::exec` ([`run_cells`]), and what `--resume` finds of a stopped run
//! ([`recorded_cells`]). The command builds the matrix, checks it, and prints.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use gpudirect_core::config::Config;
use serde::Serialize;

use crate::cell::exec::{self, CellError, Executed, Spec};
use crate::cell::Evaluated;
use crate::checks::Expectations;
use crate::history::{History, HistoryError, LaunchKind, RunFilter, RunStatus};
use crate::launch::LaunchOptions;
use crate::matrix::{Cell, Matrix};
use crate::noteln;
use crate::output::Progress;
use crate::record::RunContext;
use crate::runner::INTERRUPTED;

/// What stops a matrix run: a cell that could not run or be recorded.
pub type MatrixRunError = CellError;

/// What a matrix run recorded before: the keys of its finished cells, and the
/// placeholders (run ids) of cells that were running when it stopped.
pub type Recorded = (Vec<String>, BTreeMap<String, i64>);

/// The record key of a cell's matrix run, for --resume.
pub const MATRIX_KEY: &str = "GPUDIRECT_MATRIX_ID";
/// The record key of a cell's place in its matrix ([`cell_key`]).
pub const CELL_KEY: &str = "GPUDIRECT_CELL";

/// A cell's identity within its matrix: position and label.
pub fn cell_key(cell: &Cell) -> String {
    format!("{}:{}", cell.index, cell.label())
}

/// For --resume: the cells of matrix `id` already recorded, finished ones and
/// placeholders (interrupted) separately, by cell key.
pub fn recorded_cells(history: &History, id: &str) -> Result<Recorded, HistoryError> {
    let runs = history.list_runs(&RunFilter::default())?;
    let mut done = Vec::new();
    let mut placeholders = BTreeMap::new();
    for summary in runs {
        let detail = history.get_run(summary.id)?;
        if detail.provenance.env.get(MATRIX_KEY).map(String::as_str) != Some(id) {
            continue;
        }
        let Some(cell) = detail.provenance.env.get(CELL_KEY) else {
            continue;
        };
        if summary.status == RunStatus::Interrupted {
            placeholders.insert(cell.clone(), summary.id);
        } else {
            done.push(cell.clone());
        }
    }
    Ok((done, placeholders))
}

/// One finished cell, for the summary.
#[derive(Debug, Serialize)]
pub struct CellResult {
    pub cell: usize,
    /// `all_reduce N=2 G=8 tcpx`.
    pub label: String,
    /// How it ended.
    pub status: RunStatus,
    /// nccl-tests' average busbw.
    pub avg_busbw: Option<f64>,
    /// The busbw of the run (out-of-place at its largest size).
    pub busbw_at_max_size: Option<f64>,
    /// The transport NCCL used.
    pub transport: Option<String>,
    /// Its record, if it could be stored.
    pub run_id: Option<i64>,
    /// The checks' findings, in words.
    pub findings: Vec<String>,
    /// Wall time.
    pub seconds: f64,
    /// A stand-in replay, not a measurement.
    pub replay: bool,
    /// What the figures mean where they mislead: one rank has no bus bandwidth.
    pub note: Option<String>,
    /// It never reached NCCL, twice: a launch failure (issue #45; its status is `timeout`,
    /// the history's word for a stopped run, and its first finding says why).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub could_not_start: bool,
}

impl CellResult {
    /// How it ended, in one word: `could not start`, else its status.
    pub fn status_word(&self) -> &'static str {
        match self.could_not_start {
            true => crate::cell::start::COULD_NOT_START,
            false => self.status.as_str(),
        }
    }
}

/// The line printed when a cell ends: `[3/8] all_reduce N=2 G=8 tcpx: ok, busbw ...`.
pub fn finished_line(result: &CellResult, total: usize) -> String {
    format!(
        "[{}/{}] {}: {}{}{}",
        result.cell,
        total,
        result.label,
        result.status_word(),
        result
            .busbw_at_max_size
            .map(|b| format!(", busbw {b:.2} GB/s at max size"))
            .unwrap_or_default(),
        result
            .findings
            .first()
            .map(|f| format!(" ({f})"))
            .unwrap_or_default()
    ) + &result
        .note
        .as_ref()
        .map(|n| format!("; {n}"))
        .unwrap_or_default()
}

/// The note of a run of one rank: its busbw is 0 by definition (no bus between GPUs to
/// measure), and its algbw is what it measured.
pub fn one_rank_note(parsed: &crate::nccl_output::ParsedOutput) -> Option<String> {
    (parsed.nranks() == Some(1)).then(|| {
        let algbw = parsed.algbw_at_max_size().map_or("no algbw".into(), |a| {
            format!("algbw {a:.2} GB/s at max size")
        });
        format!("one rank has no bus bandwidth (busbw is 0 by definition): {algbw}")
    })
}

/// Median seconds of earlier runs like this cell, for --dry-run.
pub fn estimate_seconds(history: Option<&History>, cell: &Cell) -> Option<f64> {
    let filter = RunFilter {
        collective: Some(cell.collective.clone()),
        variant: Some(cell.variant.name.clone()),
        limit: Some(20),
        ..RunFilter::default()
    };
    history?.median_seconds(&filter, cell.nodes).ok()?
}

/// What every cell of a matrix run shares: how its [`Spec`] is made.
pub struct CellPlan<'a> {
    /// Ask nccl-tests for a `-J` report (not `--no-json`).
    pub json_report: bool,
    /// `--cluster`.
    pub cluster: Option<&'a str>,
    /// The matrix.
    pub matrix: &'a Matrix,
    /// How each cell starts.
    pub opts: &'a LaunchOptions,
    pub config: Option<&'a Config>,
    /// The allocation's nodes.
    pub nodes: &'a [String],
    /// Inside an allocation (else the cell runs here).
    pub in_allocation: bool,
    /// The launcher recorded.
    pub launch_kind: LaunchKind,
    /// The matrix run's id.
    pub matrix_id: &'a str,
}

impl CellPlan<'_> {
    /// The cell's spec: its marks (matrix id, cell key), the transport its profile
    /// requires, the sizes, where it runs and the line rate.
    pub fn spec<'c>(&'c self, cell: &'c Cell) -> Spec<'c> {
        let mut marks = BTreeMap::new();
        marks.insert(MATRIX_KEY.to_string(), self.matrix_id.to_string());
        marks.insert(CELL_KEY.to_string(), cell_key(cell));
        let choice = crate::profile::of_run(self.config, cell.variant.gpudirect.as_deref());
        let first = self.nodes.first().map(String::as_str);
        Spec {
            cell,
            matrix: self.matrix,
            launch: self.opts,
            json_report: self.json_report,
            expect: Expectations {
                transport: choice.as_ref().and_then(|c| c.transport(first)),
                nics: choice.as_ref().map(|c| c.nics(first)).unwrap_or_default(),
                nodes: cell.nodes,
                sizes: self.matrix.expected_sizes(),
                pasted: false,
            },
            context: RunContext {
                nodes: if self.in_allocation {
                    crate::launch::cell_nodes(self.opts, cell)
                        .map(<[String]>::to_vec)
                        .unwrap_or_default()
                } else {
                    vec![gpudirect_core::system::short_hostname()]
                },
                launcher: self.launch_kind,
                line_rate_gbps: choice.as_ref().and_then(|c| c.line_rate(first)),
                tool: crate::history::Tool::Run,
                ..RunContext::for_job(self.cluster)
            },
            marks,
        }
    }
}

impl CellResult {
    /// A cell that could not start (its command could not be built).
    pub fn not_started(cell: &Cell, why: String) -> CellResult {
        CellResult {
            cell: cell.index,
            label: cell.label(),
            status: RunStatus::Failed,
            avg_busbw: None,
            busbw_at_max_size: None,
            transport: None,
            run_id: None,
            findings: vec![why],
            seconds: 0.0,
            replay: false,
            note: None,
            could_not_start: false,
        }
    }
}

/// Runs `cells` in order (Ctrl-C stops before the next), each through `cell::exec` in
/// place of its placeholder (a new one written before it starts, or the one `--resume`
/// found), with a progress line each; `fail_fast` stops at the first cell not ok.
pub fn run_cells(
    plan: &CellPlan<'_>,
    cells: &[Cell],
    history: &mut History,
    placeholders: &mut BTreeMap<String, i64>,
    fail_fast: bool,
) -> Result<Vec<CellResult>, MatrixRunError> {
    let total = cells.len();
    let progress = Progress::new("gpudirect run", total);
    let mut results = Vec::new();
    for cell in cells {
        if INTERRUPTED.load(Ordering::SeqCst) {
            break;
        }
        let spec = plan.spec(cell);
        let prepared = match exec::prepare(spec) {
            Ok(p) => p,
            Err(e) => {
                let result = CellResult::not_started(cell, e.to_string());
                progress.finish(
                    &finished_line(&result, total),
                    result.busbw_at_max_size.or(result.avg_busbw),
                );
                results.push(result);
                if fail_fast {
                    break;
                }
                continue;
            }
        };
        let command = prepared.command_line();
        // Written before the cell starts: if the launcher is killed, the cell stays
        // marked interrupted and --resume runs it again.
        let placeholder = match placeholders.remove(&cell_key(cell)) {
            Some(id) => id,
            None => {
                let mark =
                    prepared.placeholder("started; the launcher stopped before the cell ended");
                history.import_run(&mark, true)?.run_id()
            }
        };
        progress.start(cell.index, &cell.label(), &command);
        let executed = prepared.execute()?;
        let run_id = match executed.replace(history, placeholder) {
            Ok(id) => Some(id),
            Err(e) => {
                noteln!("gpudirect run: could not record cell {}: {e}", cell.index);
                None
            }
        };
        let Executed {
            finished,
            evaluated:
                Evaluated {
                    parsed,
                    verdict,
                    record,
                },
            starting,
        } = executed;
        let replay = crate::history::replay_of(&record.provenance.env).is_some();
        let result = CellResult {
            cell: cell.index,
            label: cell.label(),
            status: verdict.status,
            avg_busbw: record.avg_busbw,
            busbw_at_max_size: parsed.busbw_at_max_size(),
            transport: verdict.transport.clone(),
            run_id,
            findings: verdict.findings.iter().map(|f| f.message.clone()).collect(),
            seconds: finished.elapsed.as_secs_f64(),
            replay,
            note: one_rank_note(&parsed),
            could_not_start: starting.could_not_start().is_some(),
        };
        progress.finish(
            &finished_line(&result, total),
            result.busbw_at_max_size.or(result.avg_busbw),
        );
        let failed = result.status != RunStatus::Ok;
        results.push(result);
        if failed && fail_fast {
            noteln!(
                "gpudirect run: --fail-fast: stopping after cell {}",
                cell.index
            );
            break;
        }
    }
    progress.close();
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #33: a run of one rank (`-G 1` on one node) says why its busbw is 0, with the
    /// algbw it measured; a run of two says nothing.
    #[test]
    fn a_run_of_one_rank_says_it_has_no_bus_bandwidth() {
        let one = "\
# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#  Rank  0 Group  0 Pid   2101 on      node1 device  0 [0000:18:00] NVIDIA H200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1     5.50    0.00    0.00       0     5.20    0.00    0.00       0
     1048576        262144     float     sum      -1     8.97  116.90    0.00       0     8.90  117.82    0.00       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0
#
";
        let parsed = crate::nccl_output::parse(one.as_bytes());
        assert_eq!(parsed.nranks(), Some(1));
        assert_eq!(
            one_rank_note(&parsed).as_deref(),
            Some("one rank has no bus bandwidth (busbw is 0 by definition): algbw 116.90 GB/s at max size")
        );
        let two = std::fs::read(format!(
            "{}/../tests/fixtures/nccl-tests/h200x2-nvlink/all_reduce_g2.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert_eq!(one_rank_note(&crate::nccl_output::parse(&two)), None);
    }
}
