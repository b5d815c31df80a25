//! `gpudirect validate --test rails`: the units are (node, rail). Each rail is validated
//! like nodes are with nccl-tests (screen, recheck, confirm from [`gpudirect::validate::judging`]),
//! on real traffic: every pair is a two-task step of `gpudirect-mpi pair` with the MPI
//! transport bound to the rail's NIC. Rounds of all rails run at the same time, since
//! pairs on different rails share no NIC.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gpudirect::budget::Budget;
use gpudirect::history::{History, NewRun, RunProvenance};
use gpudirect::outln;
use gpudirect::output::emit_json;
use gpudirect::runner;
use gpudirect::units::nccl_size as format_size;
use gpudirect::validate::actions;
use gpudirect::validate::judging::{health, Health, Report, Threshold, Validation, Verdict};
use gpudirect::validate::pairing::Mode;
use gpudirect::validate::rail_plan::{RailPlan, RailRequest};
use gpudirect::validate::rail_runs::{validate_rails, RailsPlan};
use gpudirect::validate::rail_states;
use gpudirect::validate::rail_units::{
    combined_health, drain_candidates, units_of, with_down, Unit,
};
use gpudirect::validate::rails::{locate_mpi_program, PairSpec};
use serde::Serialize;

use super::ValidateArgs;
use crate::commands::{Ctx, ExitStatus};
use gpudirect::noteln;

/// How far below the reference a rail may be before it is slow, by default (percent): a
/// rail test moves host memory through the kernel's TCP stack on CPUs that every pair of
/// the round shares, so it is far noisier than nccl-tests (on the 2-core local cluster a
/// healthy pair measured 0.45x to 1.6x of the round's median); the faults it is for, a NIC
/// at a fraction of its speed or a dead link, land far below a quarter.
pub const DEFAULT_TOLERANCE: f64 = 75.0;

/// A pair's time limit by default: a pair takes seconds, even on a rail slowed to 1% of
/// its speed (the sender sends at least 2 messages, and no more than about 0.5 s allows).
const PAIR_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Serialize)]
struct RailsReport<'a> {
    test: &'static str,
    nodes: &'a [String],
    rails: &'a [String],
    message_size: u64,
    threshold: &'a Threshold,
    rounds: usize,
    health: Health,
    units: Vec<Unit>,
    runs: Vec<i64>,
    /// What `--drain` did, node by node.
    #[serde(skip_serializing_if = "Option::is_none")]
    drains: Option<Vec<actions::NodeAction>>,
}

/// The rails of `validate`'s flags: `--rails`, else the `--gpudirect` profile's data NICs.
pub(super) fn rail_plan(args: &ValidateArgs, first_node: &str) -> Result<RailPlan> {
    Ok(gpudirect::validate::rail_plan::rail_plan(
        &RailRequest {
            rails: args.rails.as_deref(),
            mode: args.profile.gpudirect.as_deref(),
            config: &args.profile.config.path,
            rail_variable: args.rail_variable.as_deref(),
        },
        first_node,
    )?)
}

/// The pairing mode (pairs only) and the rails, refused where `--test rails` cannot
/// measure them (RDMA devices).
fn rails_of(args: &ValidateArgs, nodes: &[String]) -> Result<(Mode, Vec<String>)> {
    let mode: Mode = args
        .mode
        .parse()
        .map_err(|e| anyhow::anyhow!("--mode: {e}"))?;
    if matches!(mode, Mode::Groups(_) | Mode::All) {
        bail!("--test rails measures pairs: use --mode pairs, pairs-across, pairwise or ring");
    }
    let plan = rail_plan(args, &nodes[0])?;
    if plan.rdma {
        bail!(
            "the rails of --gpudirect {} are RDMA devices ({}): --test rails binds Open MPI's TCP transport to an IP interface; pass --rails with the IP interfaces of those ports, or use --per-rail (nccl-tests, {})",
            args.profile.gpudirect.as_deref().unwrap_or_default(),
            plan.rails.join(", "),
            plan.variable
        );
    }
    let rails = plan.rails;
    Ok((mode, rails))
}

/// `gpudirect validate --test rails` over the allocation's `nodes`.
pub fn run(args: &ValidateArgs, ctx: &Ctx, nodes: Vec<String>) -> Result<ExitStatus> {
    let (mode, rails) = rails_of(args, &nodes)?;
    let spec = PairSpec {
        program: locate_mpi_program(args.rail_pairs.mpi_program.as_deref())
            .map_err(anyhow::Error::msg)?,
        launch: args.rail_pairs.launch(&args.mpi),
        size_bytes: args.rail_pairs.message_size,
        seconds: 0.5,
        timeout: args.timeout.unwrap_or(PAIR_TIMEOUT),
        oob_nic: gpudirect::launch::oob_pin(
            args.profile.control_nic(&nodes),
            gpudirect::slurm::env_set,
        ),
    };
    let tolerance = args.tolerance.unwrap_or(DEFAULT_TOLERANCE) / 100.0;
    let db = ctx.db_path()?;
    let mut history = History::open(&db)?;
    let base = NewRun {
        cluster: gpudirect::slurm::cluster_name(args.cluster.as_deref()),
        job_id: gpudirect::slurm::job_id(),
        gpus_per_node: Some(0),
        launcher: spec.launch.kind(),
        provenance: RunProvenance {
            binary_path: Some(spec.program.display().to_string()),
            ..RunProvenance::default()
        },
        tool: gpudirect::history::Tool::Validate,
        ..NewRun::default()
    };
    runner::install_interrupt_handler();
    noteln!(
        "gpudirect validate: rails {} on {} nodes, {} messages, every rail at once, pairs through {}",
        rails.join(","),
        nodes.len(),
        format_size(spec.size_bytes),
        spec.launch.kind()
    );
    let budget = Budget::unlimited();
    // Before any traffic: a NIC down, missing or without an address leaves its rail's pairs.
    let on_rails = rail_states::ask("validate", &nodes, &rails, &budget);
    let run = validate_rails(
        &RailsPlan {
            spec: &spec,
            rails: &rails,
            nodes: &nodes,
            on_rails: &on_rails,
            mode,
            floor: args.floor,
            tolerance,
            base: &base,
            budget: &budget,
            followups: None,
        },
        &mut history,
    )?;
    if run.interrupted {
        noteln!(
            "gpudirect validate: interrupted after {} round(s); every pair run so far is recorded",
            run.rounds
        );
        return Ok(ExitStatus::Interrupted);
    }
    conclude(
        args,
        Verdicts {
            test: "rails",
            history: &history,
            db: &db,
            nodes: &nodes,
            rails: &rails,
            validations: &run.validations,
            sent: &run.sent,
            down: &on_rails.down,
            run_ids: &run.run_ids,
            size_bytes: spec.size_bytes,
            rounds: run.rounds,
        },
    )
}

/// What a rails validation (MPI or nccl-tests per rail) ends with.
pub(super) struct Verdicts<'a> {
    /// `rails` or `nccl-per-rail`.
    pub test: &'static str,
    pub history: &'a History,
    pub db: &'a Path,
    pub nodes: &'a [String],
    pub rails: &'a [String],
    /// One per rail, in `rails` order, all with the same threshold.
    pub validations: &'a [Validation],
    /// What each node sent per rail, when the test knows (MPI pairs).
    pub sent: &'a BTreeMap<(String, usize), Vec<f64>>,
    /// (node, rail index) seen down before any traffic, with why (MPI pairs).
    pub down: &'a BTreeMap<(String, usize), String>,
    pub run_ids: &'a [i64],
    /// The size the figures are read at.
    pub size_bytes: u64,
    /// Rounds run (rails run theirs at the same time, or one rail after another).
    pub rounds: usize,
}

/// Per (node, rail) verdicts: printed (or JSON), drains, the report, the exit status.
pub(super) fn conclude(args: &ValidateArgs, v: Verdicts) -> Result<ExitStatus> {
    let reports: Vec<Report> = v.validations.iter().map(Validation::report).collect();
    let units = units_of(v.nodes, v.rails, v.validations, &reports, v.sent, v.down);
    let status = with_down(combined_health(reports.iter().map(health)), v.down);
    let threshold = v
        .validations
        .first()
        .and_then(|x| x.threshold().cloned())
        .context("no rail was validated")?;
    let mut report = RailsReport {
        test: v.test,
        nodes: v.nodes,
        rails: v.rails,
        message_size: v.size_bytes,
        threshold: &threshold,
        rounds: v.rounds,
        health: status,
        units,
        runs: v.run_ids.to_vec(),
        drains: None,
    };
    if let Some(sanction) = super::drains::sanction(args)? {
        // The cluster as every record has it: --cluster, else $SLURM_CLUSTER_NAME.
        let cluster = gpudirect::slurm::cluster_name(args.cluster.as_deref());
        let source = super::EvidenceSource {
            sanction: &sanction,
            on_drain: args.drains.on_drain.as_deref(),
            history: v.history,
            cluster: cluster.as_deref(),
            collective: None,
            size_bytes: None,
            pairs: &[],
        };
        let judged = report.nodes.len();
        report.drains = Some(super::drains::apply_drains(
            &gpudirect::drain::spare_when_every_node_is_bad(
                drain_candidates(&report.units),
                judged,
            ),
            &source,
        ));
    }
    let actions_failed = report.drains.as_deref().is_some_and(actions::any_error);
    let exit = ExitStatus::of_validation(status, actions_failed);
    if args.json {
        emit_json(&report)?;
    } else {
        print_text(&report, exit, actions_failed, v.db)?;
    }
    if let Some(dir) = &args.report {
        super::write_validation_report(v.history, v.run_ids, dir, &[]);
    }
    Ok(exit)
}

/// The one-line verdict of a unit: `slow, 0.02 GB/s against 1.45 GB/s for that rail`.
fn describe(unit: &Unit) -> String {
    let against = |what: &str| match (unit.send_gbps, unit.rail_gbps) {
        (Some(v), Some(r)) => format!("{what}, {v:.3} GB/s against {r:.3} GB/s for that rail"),
        (Some(v), None) => format!("{what}, {v:.3} GB/s"),
        _ => what.to_string(),
    };
    match &unit.verdict {
        Verdict::SlowNode => against("slow"),
        Verdict::Healthy => against("healthy"),
        other => other.to_string(),
    }
}

/// Up to this many (node, rail) units the text report lists the healthy ones too.
const LIST_ALL_UP_TO: usize = 32;

/// The text report; its verdict line names `exit`, the code the command exits with.
fn print_text(
    report: &RailsReport,
    exit: ExitStatus,
    actions_failed: bool,
    db: &std::path::Path,
) -> Result<()> {
    let limit = report.threshold.limit();
    let what = match report.test {
        "rails" => format!("MPI pairs, {} messages", format_size(report.message_size)),
        _ => format!(
            "nccl-tests per rail, busbw at {}",
            format_size(report.message_size)
        ),
    };
    outln!(
        "rails validation ({what}): {} nodes x {} rails ({}), {} round(s), slow under {limit:.3} GB/s ({})",
        report.nodes.len(),
        report.rails.len(),
        report.rails.join(", "),
        report.rounds,
        match report.threshold {
            Threshold::Baseline { tolerance, .. } if report.test == "rails" =>
                format!("{:.0}% below the first round's median", tolerance * 100.0),
            Threshold::Baseline { tolerance, .. } =>
                format!("{:.0}% below the baseline", tolerance * 100.0),
            Threshold::Floor { .. } => "--floor".to_string(),
            Threshold::RoundMedian { .. } =>
                "no baseline: against the rail's own first round".to_string(),
        }
    )?;
    // Every unit of a small cluster; on a large one the healthy are counted, not listed
    // (--json lists every unit).
    let list_all = report.units.len() <= LIST_ALL_UP_TO;
    for unit in &report.units {
        let healthy = unit.verdict == Verdict::Healthy;
        if healthy && !list_all {
            continue;
        }
        let evidence = if healthy {
            String::new()
        } else {
            format!("  [{}]", unit.evidence.join("; "))
        };
        outln!(
            "  {:<10} {:<8} {}{evidence}",
            unit.node,
            unit.rail,
            describe(unit)
        )?;
    }
    let bad = report
        .units
        .iter()
        .filter(|u| u.verdict != Verdict::Healthy)
        .count();
    outln!(
        "verdict: {:?} (exit {}{}): {} of {} (node, rail) healthy; runs {:?} in {}",
        report.health,
        exit.code(),
        if actions_failed {
            ": a drain, a resume or --on-drain did not work"
        } else {
            ""
        },
        report.units.len() - bad,
        report.units.len(),
        report.runs,
        db.display()
    )?;
    Ok(())
}
