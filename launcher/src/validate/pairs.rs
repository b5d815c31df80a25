//! validate's nccl-tests pairs: each round's groups run at once as `cell::exec` cells
//! (one srun step per node pair, or one local process per pair of GPU units), driven by
//! [`session::drive`], and stored with their node results once the round is judged.

use std::collections::BTreeMap;

use super::actions::PairRun;
use super::judging::{
    JudgeError, Outcome as PairOutcome, Reference, Round, RoundRule, Stage, Threshold, Validation,
};
use super::session::{self, Judged, SessionError};
use crate::baseline::Key;
use crate::budget::Budget;
use crate::cell::exec::{self, Executed, Spec};
use crate::cell::Evaluated;
use crate::checks::Expectations;
use crate::history::{History, HistoryError, LaunchKind, NewNodeResult, NewRun, RunId, RunStatus};
use crate::launch::{LaunchError, LaunchOptions, Launcher};
use crate::matrix::{Cell, Matrix, Variant};
use crate::noteln;
use crate::output::line_share;
use crate::record::RunContext;
use crate::runner::StartError;
use gpudirect_core::config::Config;

/// NCCL_ALGO that pair runs get unless told otherwise (`validate --algo`; vet always).
pub const DEFAULT_ALGO: &str = "Ring";

/// The NCCL_ALGO pair runs are given, if any, and the line that says so: `default` sets
/// none; an NCCL_ALGO in the caller's own environment (`from_env`) reaches the runs anyway
/// and is kept. Pure.
pub fn pinned_algorithm(algo: &str, from_env: Option<&str>) -> (Option<String>, String) {
    match (algo, from_env) {
        (_, Some(user)) => (
            None,
            format!("NCCL_ALGO={user} from the environment is kept for every run"),
        ),
        ("default", None) => (
            None,
            "NCCL chooses the algorithm (--algo default): two-node figures may differ by it".into(),
        ),
        (algo, None) => (
            Some(algo.to_string()),
            format!(
                "every run with NCCL_ALGO={algo}, so that pairs are compared on one algorithm \
                 (--algo default lets NCCL choose)"
            ),
        ),
    }
}

/// What pair runs are judged by, asked the same way by `validate` and `vet`.
#[derive(Debug, Clone)]
pub struct ReferenceRequest<'a> {
    /// The collective, e.g. `all_reduce`.
    pub collective: &'a str,
    /// The cluster the runs are recorded under.
    pub cluster: &'a Option<String>,
    /// GPUs in one pair run (two units' worth).
    pub ranks_per_pair: u32,
    /// The variant pair runs are recorded under (`validate:pairs`).
    pub variant: &'a str,
    /// The judged size.
    pub max_bytes: u64,
    /// `--floor GBPS`: a fixed line, no history consulted.
    pub floor: Option<f64>,
    /// How far below the line still passes, as a fraction (0.10).
    pub tolerance: f64,
    /// How many earlier runs make the baseline.
    pub baseline_runs: u32,
}

/// The line pair runs are judged by: the floor, else the history's baseline of 2-unit pair
/// runs with the same key (`baseline::Key`), else the first round's own (a [`RoundRule`]).
/// With the runs a baseline is made of (empty for the other two).
pub fn pair_reference(
    history: &History,
    req: &ReferenceRequest<'_>,
) -> Result<(Reference, Vec<RunId>), ReferenceError> {
    if let Some(floor) = req.floor {
        return Ok((Threshold::floor(floor)?.into(), Vec::new()));
    }
    let key = Key {
        collective: req.collective.to_string(),
        cluster: req.cluster.clone(),
        node_count: Some(2),
        total_ranks: Some(req.ranks_per_pair),
        variant: Some(req.variant.to_string()),
    };
    Ok(
        match history.baseline(&key, req.max_bytes, req.baseline_runs)? {
            Some(b) => (
                Threshold::baseline(b.median_busbw, req.tolerance)?.into(),
                b.samples.iter().map(|(id, _)| *id).collect(),
            ),
            None => (RoundRule::new(req.tolerance).into(), Vec::new()),
        },
    )
}

/// Why [`pair_reference`] gave no line.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// A floor or tolerance out of range.
    #[error(transparent)]
    Judge(#[from] JudgeError),
    /// The history could not be read.
    #[error(transparent)]
    History(#[from] HistoryError),
}

/// Why the pairs stopped.
#[derive(Debug, thiserror::Error)]
pub enum PairsError {
    /// A pair's command could not be built.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// A pair could not be started.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A pair's thread panicked.
    #[error("a pair's runner thread panicked")]
    Panicked,
    /// Ctrl-C: the rounds before were recorded.
    #[error("interrupted: {rounds} round(s) were recorded")]
    Interrupted {
        /// Rounds recorded.
        rounds: usize,
    },
    /// The planner refused the outcomes.
    #[error(transparent)]
    Judge(#[from] super::judging::JudgeError),
}

/// What validate pairs.
pub enum Units {
    /// The allocation's nodes; each group runs as one srun step.
    Nodes,
    /// This host's GPU groups by unit name (CUDA_VISIBLE_DEVICES entries); each group runs
    /// as one local process.
    Gpus(BTreeMap<String, Vec<String>>),
}

/// What every round of an nccl-tests validation shares.
pub struct RoundContext<'a> {
    /// The collective every pair runs.
    pub collective: &'a str,
    /// GPUs per node (`-G`).
    pub gpus_per_node: u32,
    /// GPUs per unit (`--gpus-per-unit`).
    pub gpus_per_unit: u32,
    /// Nodes or this host's GPU units.
    pub units: &'a Units,
    /// How a pair starts (srun; local for GPU units).
    pub launch: &'a LaunchOptions,
    /// The one-cell matrix each pair runs.
    pub matrix: &'a Matrix,
    /// The sizes a pair's output must show.
    pub sizes: &'a [u64],
    /// The cluster recorded.
    pub cluster: &'a Option<String>,
    /// The judged size.
    pub max: u64,
    /// The node's line rate (GB/s) from the --gpudirect profile, recorded with each run.
    pub line_rate_gbps: Option<f64>,
    /// The admin config, when it could be read: a pair with a `--gpudirect` profile is
    /// held to its transport and NICs, as `gpudirect run` holds a cell.
    pub config: Option<&'a Config>,
    /// When the rounds stop (Ctrl-C; vet's deadline).
    pub budget: &'a Budget,
    /// The matrix and sizes of the rounds after the screen, when they differ (vet's
    /// follow-ups run the judged size alone, which is all a re-pairing reads).
    pub followup: Option<(&'a Matrix, &'a [u64])>,
    /// The command the pair runs are recorded as (validate, or vet).
    pub tool: crate::history::Tool,
}

/// One pair run as it ended: its group, its record (node results added once judged) and
/// its busbw at the judged size.
pub type RanPair = (Vec<String>, NewRun, Option<f64>);

/// What the pair runs of a validation left: the history they are in, their ids, each as
/// the evidence lists it, and how many cells started (each -J report gets its own file).
pub struct Recorded {
    /// The history.
    pub history: History,
    /// The runs recorded.
    pub run_ids: Vec<i64>,
    /// Each run as the evidence lists it.
    pub pairs: Vec<PairRun>,
    /// Cells started.
    pub cells_started: usize,
}

/// Runs `validation`'s rounds to the end with `variant` (its environment reaches every
/// pair), recording every pair run in `rec`. The loop is [`session::drive`]'s.
pub fn run_rounds(
    rc: &RoundContext,
    validation: &mut Validation,
    variant: &Variant,
    rec: &mut Recorded,
) -> Result<(), PairsError> {
    let nodes = validation.nodes().to_vec();
    let Recorded {
        history,
        run_ids,
        pairs,
        cells_started,
    } = rec;
    session::drive(
        validation,
        rc.budget,
        |round| run_round(rc, round, &nodes, variant, cells_started),
        |judged, ran| {
            store_round(rc, &judged, ran, history, run_ids, pairs);
            Ok(())
        },
    )
    .map_err(|e| match e {
        SessionError::Interrupted { rounds } => PairsError::Interrupted { rounds },
        SessionError::Judge(e) => PairsError::Judge(e),
        SessionError::Run(e) => e,
    })
}

/// One round's groups, one job step each, all at once; one outcome per group, in order.
fn run_round(
    rc: &RoundContext,
    round: &Round,
    nodes: &[String],
    variant: &Variant,
    cells_started: &mut usize,
) -> Result<Vec<(PairOutcome, RanPair)>, PairsError> {
    let RoundContext {
        collective,
        gpus_per_node,
        gpus_per_unit,
        units,
        launch,
        matrix,
        sizes,
        cluster,
        line_rate_gbps,
        config,
        budget,
        tool,
        ..
    } = *rc;
    let (matrix, sizes) = match (round.stage, rc.followup) {
        (Stage::Screen, _) | (_, None) => (matrix, sizes),
        (_, Some(followup)) => followup,
    };
    let groups = round.named_groups(nodes);
    noteln!(
        "gpudirect validate: round {} ({:?}): {} group(s) at once",
        round.index + 1,
        round.stage,
        groups.len()
    );
    // One job step per group, all at once; each thread runs one and returns its result.
    let jobs = groups
        .iter()
        .map(|group| {
            let group: Vec<String> = group.iter().map(|s| s.to_string()).collect();
            let mut cell = Cell {
                index: {
                    *cells_started += 1;
                    *cells_started
                },
                collective: collective.to_string(),
                nodes: group.len() as u32,
                gpus_per_node,
                variant: variant.clone(),
            };
            let mut opts = LaunchOptions {
                nodes: group.clone(),
                // A pair ends with the budget.
                timeout: budget.limit(launch.timeout),
                ..launch.clone()
            };
            if let Units::Gpus(gpus) = &units {
                // One process here drives every GPU of the group.
                let ids: Vec<String> = group
                    .iter()
                    .flat_map(|unit| gpus.get(unit).into_iter().flatten())
                    .cloned()
                    .collect();
                cell.nodes = 1;
                cell.gpus_per_node = ids.len() as u32;
                cell.variant
                    .env
                    .insert("CUDA_VISIBLE_DEVICES".into(), ids.join(","));
                opts.launcher = Launcher::Local;
                opts.nodes = Vec::new();
            }
            let context = RunContext {
                cluster: cluster.clone(),
                nodes: group.clone(),
                gpus_per_node: Some(match units {
                    Units::Nodes => gpus_per_node,
                    Units::Gpus(_) => gpus_per_unit,
                }),
                launcher: match units {
                    Units::Nodes => LaunchKind::Srun,
                    Units::Gpus(_) => LaunchKind::Local,
                },
                line_rate_gbps,
                tool,
                ..RunContext::for_job(None)
            };
            let choice = crate::profile::of_run(config, cell.variant.gpudirect.as_deref());
            let first = Some(group[0].as_str());
            let spec = Spec {
                cell: &cell,
                matrix,
                launch: &opts,
                json_report: true,
                expect: Expectations {
                    transport: choice.as_ref().and_then(|c| c.transport(first)),
                    nodes: cell.nodes,
                    sizes: sizes.to_vec(),
                    nics: choice.as_ref().map(|c| c.nics(first)).unwrap_or_default(),
                    pasted: false,
                },
                context,
                marks: Default::default(),
            };
            exec::prepare(spec).map(|p| (group, p))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|(group, prepared)| {
            let flag = budget.flag();
            std::thread::spawn(move || (group, prepared.execute_until(flag)))
        })
        .collect();
    let mut ran = Vec::new();
    for handle in handles {
        let Ok((group, executed)) = handle.join() else {
            return Err(PairsError::Panicked);
        };
        let (outcome, record, busbw) = pair_outcome(executed?);
        ran.push((outcome, (group, record, busbw)));
    }
    Ok(ran)
}

/// What a pair's cell gave the planner: its busbw at the judged size when it passed its
/// checks, else why it failed, or why it could not start (a launch that never reached
/// NCCL, tried twice: no evidence about the pair, issue #45). With its record and busbw.
fn pair_outcome(executed: Executed) -> (PairOutcome, NewRun, Option<f64>) {
    let Evaluated {
        parsed,
        verdict,
        record,
    } = executed.evaluated;
    // The pair's figure: the busbw of the run, by the one rule every command uses.
    let busbw = parsed.busbw_at_max_size();
    let outcome = match (executed.starting.could_not_start(), verdict.status, busbw) {
        (Some(why), _, _) => PairOutcome::CouldNotStart(why.to_string()),
        (None, RunStatus::Ok, Some(b)) => PairOutcome::Busbw(b),
        _ => PairOutcome::Failed(
            verdict
                .findings
                .first()
                .map(|f| f.message.clone())
                .unwrap_or_else(|| "no busbw at the largest size".into()),
        ),
    };
    (outcome, record, busbw)
}

/// Stores a judged round's runs: each with its node results (role, partner, class
/// against the threshold the round left), and said on stderr.
fn store_round(
    rc: &RoundContext,
    judged: &Judged<'_>,
    ran: Vec<(PairOutcome, RanPair)>,
    history: &mut History,
    run_ids: &mut Vec<i64>,
    pairs: &mut Vec<PairRun>,
) {
    let RoundContext {
        max,
        line_rate_gbps,
        ..
    } = *rc;
    let round = judged.round;
    let threshold = judged.threshold;
    // Without a baseline, the first round sets the line the runs are judged by (and they
    // are stored with that verdict).
    if let (true, 0, Some(t @ Threshold::RoundMedian { .. })) =
        (judged.recorded, round.index, threshold)
    {
        noteln!(
            "gpudirect validate: threshold {:.2} GB/s ({})",
            t.limit(),
            t.explain()
        );
    }
    let retest = round.stage == Stage::Retest;
    for (outcome, (group, mut record, busbw)) in ran {
        let class = threshold.map(|t| t.classify(&outcome).as_str().to_string());
        let role = match retest {
            true => format!("retest, round {}", round.index + 1),
            false => format!("round {}", round.index + 1),
        };
        for node in &group {
            for partner in group.iter().filter(|p| *p != node) {
                record.node_results.push(NewNodeResult {
                    node: node.clone(),
                    role: Some(role.clone()),
                    partner: Some(partner.clone()),
                    size_bytes: Some(max),
                    busbw,
                    verdict: class.clone(),
                });
            }
        }
        let run_id = match history.import_run(&record, true) {
            Ok(o) => {
                run_ids.push(o.run_id());
                Some(o.run_id())
            }
            Err(e) => {
                noteln!(
                    "gpudirect validate: could not record {}: {e}",
                    group.join(",")
                );
                None
            }
        };
        pairs.push(PairRun {
            round: round.index + 1,
            retest,
            nodes: group.clone(),
            busbw,
            verdict: class.clone(),
            run_id,
        });
        noteln!(
            "gpudirect validate:   {}: {}",
            group.join("+"),
            match (&outcome, &class) {
                (PairOutcome::Busbw(b), class) => format!(
                    "{b:.2} GB/s{} ({})",
                    line_share(Some(*b), line_rate_gbps)
                        .map(|share| format!(", {share} of line rate"))
                        .unwrap_or_default(),
                    class.as_deref().unwrap_or("not judged")
                ),
                (PairOutcome::Failed(why), _) => format!("failed: {why}"),
                (PairOutcome::CouldNotStart(why), _) => {
                    format!("could not start: {why} (tried twice; charged to neither node)")
                }
            }
        );
    }
}
