//! `gpudirect vet`: the first step of a training job. Checks the job's own nodes (the node
//! checks of `health` on every node at once, then validation pairs over those that
//! passed), within a time budget, and hands the good ones to the next step: files to read
//! and source ([`gpudirect::vet::outputs`]), a shrunk job (`--shrink`), or a requeued one
//! with the bad nodes excluded (`--requeue`). The rules are in [`gpudirect::vet`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::budget::Budget;
use gpudirect::drain::{self, Candidate, DrainPlan, Sanction, Tool};
use gpudirect::history::{History, NewVet, VetFacts};
use gpudirect::output::emit_json;
use gpudirect::output::with_sources;
use gpudirect::quarantine::{self, Cause};
use gpudirect::units::{duration_arg, now_unix, percent_arg, size_arg};
use gpudirect::validate::rails::PairLaunch;
use gpudirect::vet::node_checks::{checks_job, run_checks, CHECKS_TIMEOUT};
use gpudirect::vet::pairs::{run_pairs, PairsDone, PairsRequest, Test};
use gpudirect::vet::{
    decide, nodes_that_are, outputs, standings, Checked, Decision, NodeVet, Standing,
};
use gpudirect::{noteln, outln, runner, slurm};
use gpudirect_core::config::Mode;
use gpudirect_core::hostlist::compress;
use serde::Serialize;

use super::args::{ProfileArgs, RailPairArgs, StartupArgs};
use super::{Ctx, ExitStatus};

/// Raised at vet's deadline or on Ctrl-C; every step of the vet watches it.
static VET_STOP: AtomicBool = AtomicBool::new(false);

/// Arguments of `gpudirect vet`.
#[derive(Debug, Args)]
#[command(after_help = "Examples (the first step of a batch script):\n  \
    gpudirect vet --need 60 --out vet/ && source vet/vet.env\n  \
    srun -N \"$GPUDIRECT_GOOD_COUNT\" --nodelist=\"$GPUDIRECT_GOOD_NODES\" python train.py\n\n  \
    gpudirect vet --need 60 --shrink      # shrink the job to its good nodes\n  \
    gpudirect vet --requeue               # all nodes needed: requeue without the bad ones\n  \
    gpudirect vet --test rails --rails eth1,eth2,eth3,eth4   # no GPUs: MPI per rail\n\n\
What it does, within --budget (60s): the node checks of `gpudirect health` on every node\n\
at once, and the nodes' GPU-to-NIC maps compared (check `wiring`, as `validate --test\n\
wiring`: a node whose GPU i is not on the rail most nodes have it on fails); then one round of concurrent disjoint pairs over the nodes that passed, and\n\
re-pairs of suspects with nodes that passed (validate's rounds), judged against the\n\
history's baseline for these pairs, else the round's own median; with --gpudirect the\n\
transport NCCL used is checked as `run` checks it. A node is good when it passed both,\n\
bad when a check or its pairs failed, unchecked when the budget ended first (it is not\n\
handed on, and the output says so).\n\n\
What it writes (--out, default ./gpudirect-vet-JOBID): good.hosts (one good node per\n\
line, also SLURM_HOSTFILE), exclude (the rest, one hostlist), vet.env (GPUDIRECT_GOOD_NODES,\n\
GPUDIRECT_BAD_NODES, GPUDIRECT_UNCHECKED_NODES, their counts, GPUDIRECT_EXCLUDE,\n\
SLURM_HOSTFILE; after --shrink the variables Slurm resets for the resized job), vet.json.\n\
The folder is yours alone: made with mode 0700, or an existing one taken only when you own\n\
it with mode 0700; every folder above it must be one only you and root can rename entries\n\
in (not group- or other-writable, unless sticky as /tmp). Otherwise vet refuses before it\n\
starts (exit 3): another user could swap vet.env before it is sourced.\n\
The history records the vet (`gpudirect history --vets`) and every pair run.\n\n\
Bad nodes are drained (reason `gpudirect vet: ...`) only with --drain and the rights to\n\
(an admin, a prolog); otherwise they are named in the output and the job's comment.\n\n\
Exit status: 0 the job goes on (all good, or at least --need good); 4 too few good nodes\n\
(with --requeue: the job was requeued, its bad nodes excluded); 3 could not vet (no\n\
allocation, bad options, the node checks could not start); 130 interrupted.")]
pub struct VetArgs {
    /// Good nodes the job needs (default: every node it holds).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub need: Option<u32>,

    /// With at least --need good nodes but some bad: shrink the job to the good ones (scontrol update
    /// JobId=... NodeList=...); vet.env then holds the resized job's variables.
    #[arg(long)]
    pub shrink: bool,

    /// With fewer than --need good nodes: requeue the job (a batch job) with the bad nodes
    /// excluded; it starts again on other nodes, or waits, saying which it lacks.
    #[arg(long)]
    pub requeue: bool,

    /// Drain bad nodes (reason `gpudirect vet: ...`): for an admin or a prolog.
    #[arg(long, conflicts_with = "quarantine")]
    pub drain: bool,

    /// Quarantine bad nodes instead of draining them: into the reservation the tool owns
    /// (config `[quarantine]`), the evidence in the node's comment; `gpudirect sweep` tests
    /// and returns them. A config fault quarantines nothing. For an admin or a prolog.
    #[arg(long)]
    pub quarantine: bool,

    /// Put each judged node's standing in its Extra in Slurm (`gpudirect_vet_ok` 1 good, 0
    /// bad, and `gpudirect_ok`; the admin's keys are kept), for jobs that select with
    /// `sbatch --extra "gpudirect_ok=1"`: for an admin or a prolog (SchedulerParameters=
    /// extra_constraints; not in Slurm 22.05).
    #[arg(long)]
    pub extra: bool,

    /// The time the vet may take (90, 60s, 2m); what it has not judged by then is
    /// unchecked.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg)]
    pub budget: Duration,

    /// What the pairs measure: nccl-tests on the GPUs, or MPI traffic over each rail.
    #[arg(long, value_enum, default_value_t = Test::Nccl)]
    pub test: Test,

    /// With --test rails: the NICs, e.g. `eth1,eth2` (default: the --gpudirect profile's
    /// data NICs).
    #[arg(long, value_name = "LIST")]
    pub rails: Option<String>,

    /// How each rail pair runs.
    #[command(flatten)]
    pub rail_pairs: RailPairArgs,

    /// The admin config and the --gpudirect mode.
    #[command(flatten)]
    pub profile: ProfileArgs,

    /// The collective of the nccl-tests pairs.
    #[arg(short = 'c', long, default_value = "all_reduce")]
    pub collective: String,

    /// Smallest message size of the nccl-tests pairs.
    #[arg(short = 'b', long, value_name = "SIZE", default_value = "1M", value_parser = size_arg)]
    pub min_bytes: u64,

    /// Largest message size of the nccl-tests pairs, the one judged.
    #[arg(short = 'e', long, value_name = "SIZE", default_value = "256M", value_parser = size_arg)]
    pub max_bytes: u64,

    /// GPUs per node.
    #[arg(short = 'G', long, default_value_t = 1)]
    pub gpus_per_node: u32,

    /// GPUs each nccl-tests process drives (-g).
    #[arg(long, default_value_t = 1)]
    pub gpus_per_process: u32,

    /// Folder with the nccl-tests binaries.
    #[arg(long, env = "NCCL_TESTS_DIR", value_name = "DIR")]
    pub nccl_tests_dir: Option<PathBuf>,

    /// srun's --mpi plugin for the pairs.
    #[arg(long, default_value = "pmix")]
    pub mpi: String,

    /// How long an nccl-tests pair may take to reach NCCL.
    #[command(flatten)]
    pub startup: StartupArgs,

    /// A fixed busbw floor in GB/s (nccl) or GB/s per rail (rails) instead of the baseline.
    #[arg(long, value_name = "GBPS")]
    pub floor: Option<f64>,

    /// How far below the reference a pair may be, percent (default 10 for nccl, 75 for
    /// rails: see `gpudirect validate --help`).
    #[arg(long, value_name = "PCT", value_parser = percent_arg)]
    pub tolerance: Option<f64>,

    /// The cluster recorded.
    #[arg(long, env = "GPUDIRECT_CLUSTER")]
    pub cluster: Option<String>,

    /// Where the files go (default ./gpudirect-vet-JOBID; yours alone, mode 0700).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The vet's report (vet.json, --json, the history).
#[derive(Debug, Serialize)]
struct Report<'a> {
    job_id: &'a str,
    test: &'static str,
    allocated: usize,
    need: usize,
    good: usize,
    bad: usize,
    unchecked: usize,
    decision: &'static str,
    nodes: &'a [NodeVet],
    /// What stopped the vet before it judged every node, if anything.
    stopped: Option<&'a str>,
    budget_s: f64,
    elapsed_s: f64,
    rounds: usize,
    threshold: Option<String>,
    runs: &'a [i64],
    /// What was done in Slurm (shrink, requeue, drains, the job's comment).
    actions: &'a [String],
}

/// `gpudirect vet`.
pub fn run(args: &VetArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let start = Instant::now();
    let allocation = slurm::Allocation::from_env()?;
    let why = "gpudirect vet vets a job's own nodes";
    let job_id = allocation.require_job(why)?.to_string();
    let nodes = allocation.require_nodes(1, why, None)?.to_vec();
    let need = match args.need {
        Some(n) if n as usize > nodes.len() => bail!(
            "--need {n}: the job holds {} node(s); ask for at most that many, or allocate more",
            nodes.len()
        ),
        Some(n) => n as usize,
        None => nodes.len(),
    };
    if args.test == Test::Nccl && args.nccl_tests_dir.is_none() && nodes.len() > 1 {
        bail!("where are the nccl-tests binaries? pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR (or --test rails: MPI per rail, no GPU)");
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("gpudirect-vet-{job_id}")));
    // Before anything runs: a folder another user made or can swap is refused at once.
    outputs::private_dir(&out).context("--out: where vet writes its files")?;
    let db = ctx.db_path()?;
    let mut history = History::open(&db)?;
    runner::install_interrupt_handler();
    let budget = Budget::until(start + args.budget, &VET_STOP);
    noteln!(
        "gpudirect vet: job {job_id}, {} node(s), {} needed, budget {}s",
        nodes.len(),
        need,
        args.budget.as_secs()
    );

    // 1. The node checks, on every node at once.
    let config = std::path::absolute(&args.profile.config.path)
        .with_context(|| format!("--config {}", args.profile.config.path.display()))?;
    // The checks check the profile --gpudirect names; `auto` and `none` leave each node its
    // node set's.
    let mode = args.profile.gpudirect.as_deref().map(Mode::from_word);
    let profile = mode.as_ref().and_then(Mode::profile_name);
    let job = checks_job(&config, profile, &nodes, budget.limit(CHECKS_TIMEOUT))?;
    noteln!(
        "gpudirect vet: node checks on {} node(s) at once",
        nodes.len()
    );
    let checks = run_checks(&job, &nodes, &budget)
        .with_context(|| format!("the node checks could not start: {}", job.command_line()))?;
    say_checks(&checks);

    // 2. Pairs over the nodes that passed.
    let passed: Vec<String> = nodes
        .iter()
        .filter(|n| checks.get(*n) == Some(&Checked::Passed))
        .cloned()
        .collect();
    let pairs = match passed.len() >= 2 && !budget.stopped() {
        true => Some(run_pairs(
            &pairs_request(args),
            &passed,
            &budget,
            &mut history,
        )?),
        false => None,
    };
    let stopped = match (budget.stopped(), budget.spent()) {
        (true, true) => Some("the budget ended"),
        (true, false) if runner::INTERRUPTED.load(Ordering::SeqCst) => Some("interrupted"),
        (true, false) => Some("the budget would end before the next round"),
        (false, _) => None,
    };
    let paired = pairs.as_ref().map(|p| &p.paired);
    let pairs_possible = passed.len() >= 2;
    let vets = standings(
        &nodes,
        &checks,
        paired.or(pairs_possible.then_some(&BTreeMap::new())),
        stopped,
    );
    let good = nodes_that_are(&vets, Standing::Good);
    let decision = decide(nodes.len(), good.len(), need, args.shrink, args.requeue);
    conclude(
        args,
        Concluded {
            job_id: &job_id,
            nodes: &nodes,
            need,
            vets: &vets,
            decision,
            stopped,
            pairs: pairs.as_ref(),
            start,
            out: &out,
            history: &mut history,
        },
    )
}

/// What the pairs are asked, from the flags.
fn pairs_request(args: &VetArgs) -> PairsRequest {
    PairsRequest {
        test: args.test,
        rails: args.rails.clone(),
        gpudirect: args.profile.gpudirect.clone(),
        config: args.profile.config.path.clone(),
        message_size: args.rail_pairs.message_size,
        mpi_program: args.rail_pairs.mpi_program.clone(),
        mpi: args.mpi.clone(),
        // Resolving `--rails-launcher auto` asks `mpirun --version`: only a rails test
        // starts rail pairs.
        rails_launch: match args.test {
            Test::Rails => args.rail_pairs.launch(&args.mpi),
            Test::Nccl => PairLaunch::Srun {
                mpi: args.mpi.clone(),
            },
        },
        floor: args.floor,
        tolerance: args.tolerance,
        cluster: args.cluster.clone(),
        collective: args.collective.clone(),
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        gpus_per_node: args.gpus_per_node,
        gpus_per_process: args.gpus_per_process,
        nccl_tests_dir: args.nccl_tests_dir.clone(),
        startup_timeout: args.startup.startup_timeout,
    }
}

/// Each node's checks on stderr: only those that did not pass, then a count.
fn say_checks(checks: &BTreeMap<String, Checked>) {
    for (node, c) in checks {
        match c {
            Checked::Passed => {}
            Checked::Failed(f) => noteln!("gpudirect vet:   {node}: failed {}", f.join("; ")),
            Checked::NoAnswer(why) => noteln!("gpudirect vet:   {node}: no answer ({why})"),
            Checked::NotRun => noteln!("gpudirect vet:   {node}: not checked (budget)"),
        }
    }
    let passed = checks.values().filter(|c| **c == Checked::Passed).count();
    noteln!(
        "gpudirect vet: node checks: {passed} of {} passed",
        checks.len()
    );
}

/// What [`conclude`] needs.
struct Concluded<'a> {
    job_id: &'a str,
    nodes: &'a [String],
    need: usize,
    vets: &'a [NodeVet],
    decision: Decision,
    stopped: Option<&'a str>,
    pairs: Option<&'a PairsDone>,
    start: Instant,
    out: &'a Path,
    history: &'a mut History,
}

/// The decision carried out (drains or the job's comment, shrink), the files written, the
/// vet recorded, the report printed; then a requeue, last, since it ends the job's steps.
fn conclude(args: &VetArgs, c: Concluded<'_>) -> Result<ExitStatus> {
    let count = |s: Standing| c.vets.iter().filter(|v| v.standing == s).count();
    let good = nodes_that_are(c.vets, Standing::Good);
    let bad = nodes_that_are(c.vets, Standing::Bad);
    let mut actions = Vec::new();
    name_bad_nodes(args, c.job_id, c.vets, &mut actions);
    if args.extra {
        let at = now_unix();
        let verdicts: Vec<(String, gpudirect::node_extra::Verdict)> = c
            .vets
            .iter()
            .filter(|v| v.standing != Standing::Unchecked)
            .map(|v| {
                let verdict = gpudirect::node_extra::Verdict {
                    tool: Tool::Vet,
                    ok: v.standing == Standing::Good,
                    busbw_gbps: None,
                    at,
                };
                (v.node.clone(), verdict)
            })
            .collect();
        let (lines, _) = gpudirect::node_extra::apply_all(&verdicts);
        actions.extend(lines.into_iter().map(|l| format!("--extra: {l}")));
    }
    let mut resized = Vec::new();
    if c.decision == Decision::Shrink {
        let dir =
            tempfile::tempdir().context("cannot create a folder for scontrol's resize script")?;
        match slurm::shrink_job(c.job_id, &compress(&good), dir.path()) {
            Ok(vars) => {
                actions.push(format!("job {} shrunk to {}", c.job_id, compress(&good)));
                resized = vars;
            }
            Err(e) => actions.push(format!("could not shrink job {}: {e}", c.job_id)),
        }
    }
    let report = Report {
        job_id: c.job_id,
        test: args.test.as_str(),
        allocated: c.nodes.len(),
        need: c.need,
        good: good.len(),
        bad: bad.len(),
        unchecked: count(Standing::Unchecked),
        decision: c.decision.as_str(),
        nodes: c.vets,
        stopped: c.stopped,
        budget_s: args.budget.as_secs_f64(),
        elapsed_s: c.start.elapsed().as_secs_f64(),
        rounds: c.pairs.map_or(0, |p| p.rounds),
        threshold: c.pairs.and_then(|p| p.threshold.clone()),
        runs: c.pairs.map_or(&[], |p| &p.run_ids),
        actions: &actions,
    };
    let value = serde_json::to_value(&report)?;
    let written = outputs::write(c.out, c.vets, &resized, &value)
        .with_context(|| format!("--out {}: cannot write the vet's files", c.out.display()))?;
    let recorded = c.history.record_vet(&NewVet {
        facts: VetFacts {
            at: now_unix(),
            cluster: slurm::cluster_name(args.cluster.as_deref()),
            job_id: Some(c.job_id.to_string()),
            test: args.test.as_str().to_string(),
            allocated: c.nodes.len(),
            good: good.len(),
            bad: bad.len(),
            unchecked: count(Standing::Unchecked),
            need: c.need,
            decision: c.decision.as_str().to_string(),
            good_nodes: compress(&good),
            bad_nodes: compress(&bad),
        },
        report_json: value.to_string(),
    });
    if let Err(e) = &recorded {
        noteln!("gpudirect vet: could not record the vet in the history: {e}");
    }
    match args.json {
        true => emit_json(&value)?,
        false => print_text(&report, &written, recorded.ok())?,
    }
    if c.decision == Decision::Requeue {
        requeue(c.job_id, &bad);
    }
    Ok(match c.decision {
        Decision::AllGood | Decision::GoOn | Decision::Shrink => ExitStatus::Ok,
        Decision::Requeue | Decision::TooFew => ExitStatus::TooFewNodes,
    })
}

/// Bad nodes drained (`--drain`) or named in the job's comment (an admin's AdminComment).
fn name_bad_nodes(args: &VetArgs, job_id: &str, vets: &[NodeVet], actions: &mut Vec<String>) {
    let bad: Vec<&NodeVet> = vets
        .iter()
        .filter(|v| v.standing == Standing::Bad)
        .collect();
    if bad.is_empty() {
        return;
    }
    if args.drain || args.quarantine {
        let candidates: Vec<Candidate> = bad
            .iter()
            .map(|v| Candidate {
                node: v.node.clone(),
                verdict: "bad".into(),
                evidence: v.why.clone(),
                cause: v.why.first().map_or(Cause::Node, |why| {
                    quarantine::cause_of_check(why.split(':').next().unwrap_or_default())
                }),
                plan: DrainPlan::Drain {
                    reason: drain::drain_reason(
                        Tool::Vet,
                        v.why.first().map_or("bad", String::as_str),
                    ),
                },
            })
            .collect();
        let candidates = drain::spare_when_every_node_is_bad(candidates, vets.len());
        let path = &args.profile.config.path;
        let sanction = match quarantine::settings_from(path) {
            Ok(settings) => Sanction::chosen(args.drain, args.quarantine, &settings),
            // Without the settings a plain --drain still drains; --quarantine cannot.
            Err(e) if args.quarantine => {
                actions.push(format!(
                    "nothing quarantined: cannot read [quarantine] of {}: {}",
                    path.display(),
                    with_sources(&e)
                ));
                return;
            }
            Err(_) => Some(Sanction::Drain),
        };
        // vet has no --on-drain: no evidence to hand on.
        let done =
            sanction
                .unwrap_or(Sanction::Drain)
                .apply(Tool::Vet, &candidates, None, |_, _| ());
        actions.extend(done.into_iter().map(|a| a.message));
        return;
    }
    let text = drain::drain_reason(
        Tool::Vet,
        &bad.iter()
            .map(|v| {
                format!(
                    "{} ({})",
                    v.node,
                    v.why.first().map_or("bad", String::as_str)
                )
            })
            .collect::<Vec<_>>()
            .join(", "),
    );
    let admin = nix::unistd::geteuid().is_root();
    actions.push(match slurm::set_job_comment(job_id, admin, &text) {
        Ok(()) => format!(
            "job {job_id}'s {} names the bad nodes",
            if admin { "AdminComment" } else { "Comment" }
        ),
        Err(e) => format!("the job's comment could not name the bad nodes: {e}"),
    });
}

/// `scontrol requeue`, then the bad nodes (and those excluded before) excluded: Slurm takes
/// an exclusion only once the job is pending again, which it is at once; its steps (this
/// one too) get SIGTERM then, which vet waits for (a second at most) and outlives until the
/// exclusion is set.
fn requeue(job_id: &str, bad: &[String]) {
    let mut excluded: Vec<String> = slurm::job_info(job_id.parse().unwrap_or(0))
        .ok()
        .and_then(|j| j.excluded)
        .and_then(|list| gpudirect_core::hostlist::expand(&list).ok())
        .unwrap_or_default();
    for node in bad {
        if !excluded.contains(node) {
            excluded.push(node.clone());
        }
    }
    if let Err(e) = slurm::requeue_job(job_id) {
        noteln!("gpudirect vet: could not requeue job {job_id}: {e}");
        return;
    }
    noteln!("gpudirect vet: job {job_id} requeued");
    let asked = Instant::now();
    while !runner::INTERRUPTED.load(Ordering::SeqCst) && asked.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if excluded.is_empty() {
        return;
    }
    let list = compress(&excluded);
    match slurm::exclude_nodes(job_id, &list) {
        Ok(()) => noteln!("gpudirect vet: job {job_id} will not run on {list} (ExcNodeList)"),
        Err(e) => {
            noteln!("gpudirect vet: job {job_id} requeued, but {list} could not be excluded: {e}")
        }
    }
}

/// The text report: one line per node that is not good (all of them up to 32 nodes), the
/// decision, and where the files are.
fn print_text(r: &Report<'_>, written: &outputs::Written, vet_id: Option<i64>) -> Result<()> {
    outln!(
        "vet: job {}, {} node(s): {} good, {} bad, {} unchecked; {} needed; {} round(s){}",
        r.job_id,
        r.allocated,
        r.good,
        r.bad,
        r.unchecked,
        r.need,
        r.rounds,
        r.threshold
            .as_ref()
            .map(|t| format!(", threshold {t}"))
            .unwrap_or_default()
    )?;
    let list_all = r.nodes.len() <= 32;
    for v in r.nodes {
        if v.standing == Standing::Good && !list_all {
            continue;
        }
        let standing = match v.standing {
            Standing::Good => "good",
            Standing::Bad => "bad",
            Standing::Unchecked => "unchecked",
        };
        outln!("  {:<12} {:<10} {}", v.node, standing, v.why.join("; "))?;
    }
    if let Some(why) = r.stopped {
        outln!("  stopped early: {why}; unchecked nodes are not handed on")?;
    }
    for a in r.actions {
        outln!("  {a}")?;
    }
    outln!(
        "decision: {} (exit {}); {} s of {} s; files: {} (source it), {}{}",
        r.decision,
        match r.decision {
            "requeue" | "too_few" => ExitStatus::TooFewNodes.code(),
            _ => ExitStatus::Ok.code(),
        },
        r.elapsed_s.round(),
        r.budget_s,
        written.env.display(),
        written.hostfile.display(),
        vet_id
            .map(|id| format!("; vet {id} in the history"))
            .unwrap_or_default()
    )?;
    Ok(())
}
