//! `gpudirect validate --test rails`: the units are (node, rail). Each rail is validated
//! like nodes are with nccl-tests (screen, recheck, confirm from [`gpudirect::validate::judging`]),
//! on real traffic: every pair is a two-task step of `gpudirect-mpi pair` with the MPI
//! transport bound to the rail's NIC. Rounds of all rails run at the same time, since
//! pairs on different rails share no NIC.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gpudirect::history::{History, LaunchKind, NewRun};
use gpudirect::launch::env_var;
use gpudirect::outln;
use gpudirect::output::emit_json;
use gpudirect::runner::{self, INTERRUPTED};
use gpudirect::units::{nccl_size as format_size, now_unix};
use gpudirect::validate::actions;
use gpudirect::validate::judging::{
    health, median_busbw, Health, Outcome, Report, Round, Threshold, Validation, Verdict,
};
use gpudirect::validate::pairing::Mode;
use gpudirect::validate::rails::{
    combined_health, drain_candidates, failure_reason, locate_mpi_program, pair_job,
    read_measurement, record_of, units_of, worth_a_retry, PairSpec, Unit,
};
use gpudirect_core::config::{Mode as ProfileMode, NicClass};
use gpudirect_core::resolve::resolve_profile;
use gpudirect_core::system::{load_config, Ownership};
use gpudirect_core::template::Placeholder;
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

/// The rails, and the variable that holds NCCL to one NIC (`validate --per-rail`).
pub(super) struct RailPlan {
    /// The NICs, as the nodes name them.
    pub rails: Vec<String>,
    /// `--rail-variable`, else the profile's variable set from `{data_nics}` (e.g.
    /// `NCCL_GPUDIRECTTCPX_SOCKET_IFNAME`), else `NCCL_IB_HCA` for RDMA devices and
    /// `NCCL_SOCKET_IFNAME` for interfaces.
    pub variable: String,
    /// The rails are RDMA devices (`data_nic_class = "infiniband"`).
    pub rdma: bool,
}

/// The rails: `--rails`, else the data NICs of the `--gpudirect` profile for the first node
/// (its node set's real names), from `--config`.
pub(super) fn rail_plan(args: &ValidateArgs, first_node: &str) -> Result<RailPlan> {
    let fallback = |rdma: bool| {
        args.rail_variable.clone().unwrap_or_else(|| {
            if rdma {
                "NCCL_IB_HCA"
            } else {
                "NCCL_SOCKET_IFNAME"
            }
            .to_string()
        })
    };
    if let Some(list) = &args.rails {
        let rails: Vec<String> = list
            .split(',')
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect();
        if rails.is_empty() {
            bail!("--rails {list:?} names no NIC: write e.g. --rails eth1,eth2,eth3,eth4");
        }
        return Ok(RailPlan {
            rails,
            variable: fallback(false),
            rdma: false,
        });
    }
    let Some(mode) = &args.gpudirect else {
        bail!("which NICs are the rails? pass --rails eth1,eth2,... or --gpudirect MODE (its profile's data_nics)");
    };
    let config = load_config(&args.config.path, Ownership::Any).with_context(|| {
        format!(
            "--gpudirect {mode}: the rails come from the profile in {}; or pass --rails",
            args.config.path.display()
        )
    })?;
    let parsed: ProfileMode = config
        .parse_mode(mode)
        .map_err(|e| anyhow::anyhow!("--gpudirect {mode}: {e}"))?;
    let resolved = resolve_profile(&config, first_node, &parsed)
        .map_err(|e| anyhow::anyhow!("--gpudirect {mode}: {e}"))?
        .with_context(|| format!("--gpudirect {mode} sets no profile: pass --rails"))?;
    let profile = resolved.profile;
    let rename = |nic: &String| {
        resolved
            .node_set
            .and_then(|s| s.nic_names.get(nic))
            .cloned()
            .unwrap_or_else(|| nic.clone())
    };
    let rails: Vec<String> = profile.data_nics.iter().map(rename).collect();
    if rails.is_empty() {
        bail!("the profile of --gpudirect {mode} has no data_nics: pass --rails");
    }
    let rdma = profile.data_nic_class == NicClass::Infiniband;
    // The variable the profile fills with its data NICs is the one that restricts NCCL to
    // them; one it forces would replace the rail set per pair, so it cannot be used.
    let from_data_nics = profile.env.iter().find(|v| {
        v.value
            .placeholders()
            .any(|p| matches!(p, Placeholder::DataNics))
    });
    let variable = match (&args.rail_variable, from_data_nics) {
        (Some(v), _) => v.clone(),
        (None, Some(v)) if v.forced => bail!(
            "the profile of --gpudirect {mode} forces {} (its data NICs), so a pair cannot be held to one rail through it: pass --rail-variable",
            v.name
        ),
        (None, Some(v)) => v.name.clone(),
        (None, None) => fallback(rdma),
    };
    Ok(RailPlan {
        rails,
        variable,
        rdma,
    })
}

/// One pair's step, as it ended.
struct PairRun {
    rail: usize,
    pair: [String; 2],
    outcome: Outcome,
    record: NewRun,
    /// What each node sent, GB/s (empty when the pair failed).
    sent: Vec<(String, f64)>,
    /// Whether the step did not connect or hung ([`worth_a_retry`]).
    flaky: bool,
    /// Earlier attempts that were run again ([`worth_a_retry`]); recorded as they were.
    retried: Vec<NewRun>,
}

/// The steps of one rail's round: (rail, the pair's two nodes) per group.
fn pair_jobs(rail: usize, round: &Round, nodes: &[String]) -> Vec<(usize, [String; 2])> {
    round
        .named_groups(nodes)
        .into_iter()
        .map(|g| (rail, [g[0].to_string(), g[1].to_string()]))
        .collect()
}

/// The outcomes of `rail`'s pairs among `runs`, in the order they ran: one per group of
/// the round that planned them.
fn outcomes_on(runs: &[PairRun], rail: usize) -> Vec<Outcome> {
    runs.iter()
        .filter(|p| p.rail == rail)
        .map(|p| p.outcome.clone())
        .collect()
}

/// Runs every (rail, pair) at once, one step each; a pair that did not connect in time
/// (or hung) runs once more, with the others that did, before its outcome counts.
fn run_wave(
    spec: &PairSpec,
    rails: &[String],
    jobs: Vec<(usize, [String; 2])>,
    base: &NewRun,
) -> Result<Vec<PairRun>> {
    let mut runs = run_steps(spec, rails, jobs, base)?;
    let again: Vec<(usize, [String; 2])> = runs
        .iter()
        .filter(|p| p.flaky)
        .map(|p| (p.rail, p.pair.clone()))
        .collect();
    if again.is_empty() || INTERRUPTED.load(Ordering::SeqCst) {
        return Ok(runs);
    }
    noteln!(
        "gpudirect validate: {} pair(s) did not connect or hung: running them once more",
        again.len()
    );
    for second in run_steps(spec, rails, again, base)? {
        if let Some(first) = runs
            .iter_mut()
            .find(|p| p.rail == second.rail && p.pair == second.pair)
        {
            let earlier = std::mem::replace(first, second);
            first.retried.push(earlier.record);
        }
    }
    Ok(runs)
}

/// Runs every (rail, pair) at once, one step each.
fn run_steps(
    spec: &PairSpec,
    rails: &[String],
    jobs: Vec<(usize, [String; 2])>,
    base: &NewRun,
) -> Result<Vec<PairRun>> {
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|(rail, pair)| {
            let job = pair_job(spec, &rails[rail], [&pair[0], &pair[1]]);
            std::thread::spawn(move || {
                let started = now_unix();
                let finished = runner::run(&job, &INTERRUPTED);
                (rail, pair, job, started, finished)
            })
        })
        .collect();
    let mut runs = Vec::new();
    for handle in handles {
        let Ok((rail, pair, job, started, finished)) = handle.join() else {
            bail!("a pair's runner thread panicked");
        };
        let finished = finished?;
        let stdout = String::from_utf8_lossy(&finished.stdout);
        let stderr = String::from_utf8_lossy(&finished.stderr);
        let measured = read_measurement(&stdout).filter(|m| m.gbps().is_finite());
        let outcome = match &measured {
            Some(m) => Outcome::Busbw(m.gbps()),
            None => Outcome::Failed(failure_reason(&stderr, &finished.outcome.to_string())),
        };
        let mut raw = finished.stdout.clone();
        raw.extend_from_slice(&finished.stderr);
        let base = NewRun {
            started_at: Some(started),
            finished_at: Some(now_unix()),
            command_line: Some(job.command_line()),
            exit_code: finished.outcome.exit_code(),
            raw_output: raw,
            ..base.clone()
        };
        let result = match (&measured, &outcome) {
            (Some(m), _) => Ok(m),
            (None, Outcome::Failed(why)) => Err(why.as_str()),
            (None, Outcome::Busbw(_)) => Err("no measurement line"),
        };
        let record = record_of(base, &rails[rail], [&pair[0], &pair[1]], result);
        runs.push(PairRun {
            rail,
            pair,
            outcome,
            record,
            sent: measured
                .as_ref()
                .map(|m| {
                    vec![
                        (m.hosts[0].clone(), m.forward_gbps),
                        (m.hosts[1].clone(), m.backward_gbps),
                    ]
                })
                .unwrap_or_default(),
            flaky: worth_a_retry(&finished.outcome, &stderr),
            retried: Vec::new(),
        });
    }
    Ok(runs)
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
            args.gpudirect.as_deref().unwrap_or_default(),
            plan.rails.join(", "),
            plan.variable
        );
    }
    let rails = plan.rails;
    Ok((mode, rails))
}

/// Stores each pair run of a wave, classed against the threshold, and keeps what each node
/// sent on each rail.
struct Recorder<'a> {
    rails: &'a [String],
    /// What each node sent on each rail, over every pair it was in.
    sent: BTreeMap<(String, usize), Vec<f64>>,
    run_ids: Vec<i64>,
}

impl Recorder<'_> {
    fn record(&mut self, history: &mut History, runs: &[PairRun], threshold: &Threshold) {
        for p in runs {
            for (node, gbps) in &p.sent {
                self.sent
                    .entry((node.clone(), p.rail))
                    .or_default()
                    .push(*gbps);
            }
            let class = threshold.classify(&p.outcome).as_str();
            let mut rec = p.record.clone();
            for r in &mut rec.node_results {
                r.verdict = Some(class.to_string());
            }
            let retried = p.retried.iter().map(|earlier| {
                let mut earlier = earlier.clone();
                for r in &mut earlier.node_results {
                    r.verdict = Some("retried".into());
                }
                earlier
            });
            for rec in retried.chain([rec]) {
                match history.import_run(&rec, true) {
                    Ok(o) => self.run_ids.push(o.run_id()),
                    Err(e) => noteln!(
                        "gpudirect validate: could not record {} {}: {e}",
                        p.pair.join("+"),
                        self.rails[p.rail]
                    ),
                }
            }
            noteln!(
                "gpudirect validate:   {} {}: {}",
                self.rails[p.rail],
                p.pair.join("+"),
                match &p.outcome {
                    Outcome::Busbw(b) => format!("{b:.3} GB/s ({class})"),
                    Outcome::Failed(why) => format!("failed: {why}"),
                }
            );
        }
    }
}

/// The rounds after the screen, every rail's next round in one wave, until no rail has
/// one left; returns the waves run.
#[allow(clippy::too_many_arguments)]
fn run_waves(
    validations: &mut [Validation],
    spec: &PairSpec,
    rails: &[String],
    nodes: &[String],
    base: &NewRun,
    threshold: &Threshold,
    history: &mut History,
    recorder: &mut Recorder<'_>,
) -> Result<usize> {
    let mut rounds = 1;
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted after {rounds} round(s); every pair run so far is recorded");
        }
        let wave: Vec<(usize, Round)> = validations
            .iter_mut()
            .enumerate()
            .filter_map(|(r, v)| v.next_round().map(|round| (r, round)))
            .collect();
        if wave.is_empty() {
            break;
        }
        rounds += 1;
        let jobs: Vec<(usize, [String; 2])> = wave
            .iter()
            .flat_map(|(r, round)| pair_jobs(*r, round, nodes))
            .collect();
        noteln!(
            "gpudirect validate: round {rounds}: {} pair(s) on {} rail(s) at once",
            jobs.len(),
            wave.len()
        );
        let runs = run_wave(spec, rails, jobs, base)?;
        recorder.record(history, &runs, threshold);
        for (r, round) in &wave {
            validations[*r].record(round, outcomes_on(&runs, *r))?;
        }
    }
    Ok(rounds - 1)
}

/// `gpudirect validate --test rails` over the allocation's `nodes`.
pub fn run(args: &ValidateArgs, ctx: &Ctx, nodes: Vec<String>) -> Result<ExitStatus> {
    let (mode, rails) = rails_of(args, &nodes)?;
    let spec = PairSpec {
        program: locate_mpi_program(args.mpi_program.as_deref()).map_err(anyhow::Error::msg)?,
        mpi: args.mpi.clone(),
        size_bytes: args.message_size,
        seconds: 0.5,
        timeout: args.timeout.unwrap_or(PAIR_TIMEOUT),
    };
    let tolerance = args.tolerance.unwrap_or(DEFAULT_TOLERANCE) / 100.0;
    let db = ctx.db_path()?;
    let mut history = History::open(&db)?;
    let base = NewRun {
        cluster: args
            .cluster
            .clone()
            .or_else(|| env_var("SLURM_CLUSTER_NAME")),
        job_id: env_var("SLURM_JOB_ID"),
        gpus_per_node: Some(0),
        launcher: LaunchKind::Srun,
        binary_path: Some(spec.program.display().to_string()),
        ..NewRun::default()
    };
    runner::install_interrupt_handler();
    noteln!(
        "gpudirect validate: rails {} on {} nodes, {} messages, every rail at once",
        rails.join(","),
        nodes.len(),
        format_size(spec.size_bytes)
    );

    // The first round of every rail sets the reference (unless --floor does): the median
    // of all its pairs, so that one slow rail or node cannot move it far.
    let placeholder = Threshold::floor(f64::MIN_POSITIVE)?;
    let first = Validation::new(nodes.clone(), mode, placeholder)?
        .next_round()
        .context("no pairs to run")?;
    let jobs = (0..rails.len())
        .flat_map(|r| pair_jobs(r, &first, &nodes))
        .collect();
    noteln!(
        "gpudirect validate: round 1 (Screen): {} pair(s) on {} rail(s) at once",
        first.groups.len(),
        rails.len()
    );
    let screen = run_wave(&spec, &rails, jobs, &base)?;
    let threshold = match (args.floor, median_busbw(screen.iter().map(|p| &p.outcome))) {
        (Some(floor), _) => Threshold::floor(floor)?,
        (None, Some(m)) if m > 0.0 => Threshold::baseline(m, tolerance)?,
        _ => Threshold::floor(f64::MIN_POSITIVE)?,
    };
    let mut validations: Vec<Validation> = rails
        .iter()
        .map(|_| Validation::new(nodes.clone(), mode, threshold.clone()))
        .collect::<Result<_, _>>()?;
    let mut recorder = Recorder {
        rails: &rails,
        sent: BTreeMap::new(),
        run_ids: Vec::new(),
    };
    recorder.record(&mut history, &screen, &threshold);
    for (r, v) in validations.iter_mut().enumerate() {
        let round = v.next_round().context("no pairs to run")?;
        v.record(&round, outcomes_on(&screen, r))?;
    }
    let rounds = 1 + run_waves(
        &mut validations,
        &spec,
        &rails,
        &nodes,
        &base,
        &threshold,
        &mut history,
        &mut recorder,
    )?;

    conclude(
        args,
        Verdicts {
            test: "rails",
            history: &history,
            db: &db,
            nodes: &nodes,
            rails: &rails,
            validations: &validations,
            sent: &recorder.sent,
            run_ids: &recorder.run_ids,
            size_bytes: spec.size_bytes,
            rounds,
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
    pub run_ids: &'a [i64],
    /// The size the figures are read at.
    pub size_bytes: u64,
    /// Rounds run (rails run theirs at the same time, or one rail after another).
    pub rounds: usize,
}

/// Per (node, rail) verdicts: printed (or JSON), drains, the report, the exit status.
pub(super) fn conclude(args: &ValidateArgs, v: Verdicts) -> Result<ExitStatus> {
    let reports: Vec<Report> = v.validations.iter().map(Validation::report).collect();
    let units = units_of(v.nodes, v.rails, v.validations, &reports, v.sent);
    let status = combined_health(reports.iter().map(health));
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
    if args.drains.drain {
        let source = super::EvidenceSource {
            on_drain: args.drains.on_drain.as_deref(),
            history: v.history,
            cluster: args.cluster.as_deref(),
            collective: None,
            size_bytes: None,
            pairs: &[],
        };
        report.drains = Some(super::drains::apply_drains(
            &drain_candidates(&report.units),
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
