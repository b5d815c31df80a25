//! `gpudirect sweep`: the admin's periodic look at the fleet (issue #44), run as root from
//! `scrontab` or cron. One sweep:
//! 1. takes a lock (`--lock`): a second sweep at the same time does nothing and says so;
//! 2. with `--black-holes WINDOW`, quarantines the nodes that sacct shows failing the jobs
//!    of several users within seconds ([`black_holes`]);
//! 3. sets the quarantine reservation to exactly the quarantined nodes ([`quarantine::reconcile`]);
//! 4. backs off, submitting nothing, when a pending job waits for nodes
//!    ([`sweep::queue_wants_nodes`]);
//! 5. tests the idle quarantined nodes with healthy idle partners in one allocation inside
//!    the reservation (`salloc --reservation --immediate`), by `gpudirect validate --json
//!    --quarantine` with the arguments after `--` (a healthy node found bad there is
//!    quarantined by validate itself; the runs go to the history as validate's);
//! 6. counts each quarantined node's result in its comment: `passes_to_return` passes in a
//!    row return it, `failures_to_drain` failures in a row drain it with the evidence.
//!
//! Every action is said on stderr with the `gpudirect sweep:` tag (and in `--json`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::drain::{self, Tool};
use gpudirect::output::{emit_json, with_sources};
use gpudirect::quarantine::black_holes::{self, Rule};
use gpudirect::quarantine::sweep::{self, Next, Plan};
use gpudirect::quarantine::{self, Cause, Entry, Put, Settings};
use gpudirect::runner::{self, Job, Outcome};
use gpudirect::units::duration_arg;
use gpudirect::{noteln, outln};
use serde::Serialize;

use super::args::ConfigArg;
use super::{Ctx, ExitStatus};

/// Arguments of `gpudirect sweep`.
#[derive(Debug, Clone, Args)]
#[command(after_long_help = "\
Examples (as root; the arguments after -- are validate's):
  gpudirect sweep -- --floor 60                     # one sweep now
  gpudirect sweep --dry-run                         # what a sweep would test, nothing run
  gpudirect sweep --black-holes 2h -- --floor 60    # also quarantine and test black holes
  # scrontab -e (as root), every 30 minutes:
  */30 * * * * /usr/bin/gpudirect sweep --budget 20m -- --floor 60

The test: validate's pairs with the arguments after --. Where a suspect was quarantined for
one of its NICs (its comment says `nic`) and those arguments choose no --test or --per-rail,
the sweep adds --per-rail (each rail on its own; a pair over every NIC at once can pass while
one NIC is slow), with --gpudirect auto (the nodes' own profile, whose data NICs are the
rails) unless they name a mode or --rails. It says so, and --json lists it as `added`.

Black holes (--black-holes 2h): a node on which the allocations of at least --black-hole-users
users failed (FAILED, NODE_FAIL, BOOT_FAIL) within 60 s of their start, at least
--black-hole-jobs times and in 80% or more of its allocations in the window, read from sacct.
A node that failed only in allocations shared with a worse one is its partner, not named.
It is quarantined (the comment says `validate, node`: validate's runs clear it) and swept.

Exit status: 0 the sweep ran (or backed off, or another sweep held the lock); 1 a quarantined
node failed its sweep (kept, or drained after failures_to_drain in a row), or a black hole was
quarantined; 3 could not run
(no config, Slurm not answering, validate gave no report).")]
pub struct SweepArgs {
    /// The admin config (its `[quarantine]` table: reservation, users, counts).
    #[command(flatten)]
    pub config: ConfigArg,

    /// Most quarantined nodes tested in one sweep.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub max_suspects: usize,

    /// Healthy idle nodes taken as partners (at least enough for 3 nodes in all).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub partners: usize,

    /// Time limit of the sweep's allocation (its validate included).
    #[arg(long, value_name = "DURATION", default_value = "20m", value_parser = duration_arg)]
    pub budget: Duration,

    /// The lock file that keeps two sweeps from running at once.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "/run/lock/gpudirect-sweep.lock"
    )]
    pub lock: PathBuf,

    /// Say what would be tested, and submit nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// The sweep's outcome as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// First look for black holes: nodes on which the allocations of several users failed
    /// within 60 s of their start, in this last window (60m, 2h), read from `sacct`
    /// (Slurm's accounting must be on). Each is quarantined (cause `node`, the evidence in
    /// its comment) and tested by this sweep with the others.
    #[arg(long, value_name = "WINDOW", value_parser = duration_arg)]
    pub black_holes: Option<Duration>,

    /// A black hole's fewest fast failures in the window.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub black_hole_jobs: usize,

    /// A black hole's fewest users among those failures (one user's broken job fails
    /// wherever it lands; a black hole fails everyone's).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub black_hole_users: usize,

    /// Arguments for `gpudirect validate` (after `--`): its floor, sizes, nccl-tests folder.
    #[arg(last = true, value_name = "VALIDATE ARGS")]
    pub validate: Vec<String>,
}

/// What happened to one quarantined node.
#[derive(Debug, Clone, Serialize)]
struct NodeOutcome {
    node: String,
    /// validate's verdict kind, if it gave one.
    verdict: Option<String>,
    /// `returned`, `kept`, `drained`, `unchanged` or `error`.
    action: &'static str,
    /// In words.
    message: String,
}

/// A black hole found (`--black-holes`), and what was done.
#[derive(Debug, Clone, Serialize)]
struct BlackHole {
    node: String,
    /// The evidence, as in its comment.
    problem: String,
    /// `quarantined`, `already_quarantined`, `drained`, `would_quarantine` or `error`.
    action: &'static str,
}

/// The sweep's outcome (`--json`).
#[derive(Debug, Clone, Serialize, Default)]
struct Outcomes {
    /// Why nothing was tested (lock held, the queue wants nodes, too few idle nodes).
    skipped: Option<String>,
    /// `--black-holes`: the nodes sacct showed to be black holes.
    black_holes: Vec<BlackHole>,
    suspects: Vec<String>,
    partners: Vec<String>,
    /// What the sweep added to validate's arguments (`sweep::chosen_test`).
    added: Vec<String>,
    /// validate's exit status.
    validate_exit: Option<i32>,
    nodes: Vec<NodeOutcome>,
}

/// `gpudirect sweep`.
pub fn run(args: &SweepArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let lock = take_lock(&args.lock)?;
    let mut out = Outcomes::default();
    if lock.is_none() {
        out.skipped = Some(format!(
            "another sweep holds {}: nothing done",
            args.lock.display()
        ));
        return finish(args, &out);
    }
    let settings = quarantine::settings_from(&args.config.path)
        .with_context(|| format!("reading [quarantine] of {}", args.config.path.display()))?;
    if let Some(window) = args.black_holes {
        out.black_holes = black_holes(args, &settings, window);
    }
    let entries = quarantine::reconcile(&settings).context("setting the quarantine reservation")?;
    let quarantined: Vec<String> = entries.iter().map(|(node, _)| node.clone()).collect();
    if let Some(job) = sweep::queue_wants_nodes(&quarantine::pending_jobs()?) {
        out.skipped = Some(format!("{job} waits for nodes: the sweep takes none"));
        return finish(args, &out);
    }
    let idle = sweep::idle_nodes(&quarantine::node_states()?);
    let rotation = sweep::rotation(
        &entries,
        &sweep::suspects(&quarantined, &idle, args.max_suspects),
    );
    let plan = match sweep::plan(
        &quarantined,
        &idle,
        args.max_suspects,
        args.partners,
        rotation,
    ) {
        Ok(plan) => plan,
        Err(why) => {
            out.skipped = Some(why);
            return finish(args, &out);
        }
    };
    (out.suspects, out.partners) = (plan.suspects.clone(), plan.partners.clone());
    noteln!(
        "gpudirect sweep: testing {} quarantined node(s) [{}] with {} partner(s) [{}]",
        plan.suspects.len(),
        plan.suspects.join(","),
        plan.partners.len(),
        plan.partners.join(",")
    );
    out.added = sweep::chosen_test(&args.validate, &entries, &plan.suspects);
    if !out.added.is_empty() {
        noteln!(
            "gpudirect sweep: a suspect is quarantined for a NIC: validate {} (each rail on its own; give --test or --per-rail after -- to choose)",
            out.added.join(" ")
        );
    }
    if args.dry_run {
        out.skipped = Some("--dry-run: nothing submitted".into());
        return finish(args, &out);
    }
    let (code, report) = validate_in_reservation(args, ctx, &settings, &plan, &out.added)?;
    out.validate_exit = code;
    let verdicts = sweep::verdicts(&report);
    for node in &plan.suspects {
        out.nodes.push(count(
            &settings,
            node,
            verdicts.get(node).map(String::as_str),
        ));
    }
    finish(args, &out)
}

/// `--black-holes`: the nodes sacct shows to be black holes, quarantined (said, not done,
/// with --dry-run). An unreadable accounting is said and the sweep goes on without it.
fn black_holes(args: &SweepArgs, settings: &Settings, window: Duration) -> Vec<BlackHole> {
    let rule = Rule {
        min_jobs: args.black_hole_jobs.max(1),
        min_users: args.black_hole_users.max(1),
        ..Rule::default()
    };
    let jobs = match black_holes::ended_jobs(window)
        .map_err(|e| with_sources(&e))
        .and_then(|text| black_holes::parse_sacct(&text).map_err(|e| e.to_string()))
    {
        Ok(jobs) => jobs,
        Err(e) => {
            noteln!("gpudirect sweep: warning: --black-holes: cannot read the ended jobs: {e} (is Slurm's accounting, slurmdbd, on?); no black hole looked for");
            return Vec::new();
        }
    };
    let found = black_holes::suspects(&jobs, &rule);
    noteln!(
        "gpudirect sweep: black holes: {} job(s) ended in the last {} s; {} node(s) named",
        jobs.len(),
        window.as_secs(),
        found.len()
    );
    found
        .iter()
        .map(|suspect| {
            let problem = suspect.problem(&rule, window);
            let entry = Entry::new(Tool::Validate, Cause::Node, &problem);
            let action = if args.dry_run {
                "would_quarantine"
            } else {
                match quarantine::put(settings, &suspect.node, &entry) {
                    Ok(Put::Quarantined { .. }) => "quarantined",
                    Ok(Put::AlreadyQuarantined { .. }) => "already_quarantined",
                    Ok(Put::Drained { .. }) => "drained",
                    Ok(Put::NotTheNodes) => "not_the_nodes",
                    Err(e) => {
                        noteln!(
                            "gpudirect sweep: {}: cannot quarantine it: {}",
                            suspect.node,
                            with_sources(&e)
                        );
                        "error"
                    }
                }
            };
            noteln!("gpudirect sweep: {}: {problem}: {action}", suspect.node);
            BlackHole {
                node: suspect.node.clone(),
                problem,
                action,
            }
        })
        .collect()
}

/// Locks `path` (made 0600 if missing); `None` when another sweep holds it.
fn take_lock(path: &std::path::Path) -> Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .with_context(|| format!("--lock {}: cannot open the lock file", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("--lock {}", path.display()))
        }
    }
}

/// Runs `gpudirect validate --json --quarantine ADDED ARGS` in an allocation of the plan's
/// nodes inside the reservation (ADDED: what the sweep chose, [`sweep::chosen_test`]); its
/// exit status and report.
fn validate_in_reservation(
    args: &SweepArgs,
    ctx: &Ctx,
    settings: &Settings,
    plan: &Plan,
    added: &[String],
) -> Result<(Option<i32>, serde_json::Value)> {
    let nodes = plan.nodes();
    let exe = std::env::current_exe().context("finding the gpudirect executable")?;
    let minutes = args.budget.as_secs().div_ceil(60).max(1);
    let mut salloc: Vec<OsString> = vec![
        format!("--reservation={}", settings.reservation).into(),
        format!("-N{}", nodes.len()).into(),
        format!("--nodelist={}", nodes.join(",")).into(),
        "--immediate=60".into(),
        format!("--time={minutes}").into(),
        "--job-name=gpudirect-sweep".into(),
        "--".into(),
        exe.into(),
        "--db".into(),
        ctx.db_path()?.into(),
        "validate".into(),
        "--json".into(),
        "--quarantine".into(),
        "--config".into(),
        args.config.path.clone().into(),
    ];
    salloc.extend(added.iter().chain(&args.validate).map(OsString::from));
    let job = Job {
        program: "salloc".into(),
        args: salloc,
        env: Vec::new(),
        cwd: None,
        timeout: args.budget + Duration::from_secs(90),
        grace: Duration::from_secs(10),
        user: None,
    };
    noteln!("gpudirect sweep: {}", job.command_line());
    let finished = runner::run(&job, &AtomicBool::new(false))
        .map_err(|e| anyhow::anyhow!("cannot start salloc: {}", e.source))?;
    let stderr = String::from_utf8_lossy(&finished.stderr);
    // validate's own notes (quarantines, drains) are the sweep's log too.
    for line in stderr.lines() {
        noteln!("  {line}");
    }
    let code = match finished.outcome {
        Outcome::Exited { code } => Some(code),
        _ => None,
    };
    let stdout = String::from_utf8_lossy(&finished.stdout);
    let Some(start) = stdout.find('{') else {
        bail!(
            "validate gave no report (salloc {:?}): is the allocation refused (a node taken meanwhile), or are validate's arguments wrong?",
            finished.outcome
        );
    };
    let report = serde_json::from_str(&stdout[start..])
        .context("validate's --json report does not parse")?;
    Ok((code, report))
}

/// Counts `node`'s result in its entry and acts on it.
fn count(settings: &Settings, node: &str, verdict: Option<&str>) -> NodeOutcome {
    let outcome = |action, message: String| {
        noteln!("gpudirect sweep: {message}");
        NodeOutcome {
            node: node.to_string(),
            verdict: verdict.map(str::to_string),
            action,
            message,
        }
    };
    let entry =
        match quarantine::node_comment(node).map(|c| quarantine::split_comment(c.as_deref()).1) {
            Ok(Some(entry)) => entry,
            Ok(None) => {
                return outcome(
                    "unchanged",
                    format!("{node} is no longer quarantined: nothing counted"),
                )
            }
            Err(e) => {
                return outcome(
                    "error",
                    format!("{node}: cannot read its comment: {}", with_sources(&e)),
                )
            }
        };
    let (next_entry, next) = sweep::after_sweep(&entry, verdict, settings);
    let said = verdict.unwrap_or("no verdict");
    match next {
        Next::Unchanged => outcome("unchanged", format!("{node}: {said}: nothing counted")),
        Next::Keep => match quarantine::update_entry(node, &next_entry) {
            Ok(()) => outcome(
                "kept",
                format!(
                    "{node}: {said}; stays quarantined (passed {} of {} in a row, failed {} of {})",
                    next_entry.passed,
                    settings.passes_to_return,
                    next_entry.failed,
                    settings.failures_to_drain
                ),
            ),
            Err(e) => outcome(
                "error",
                format!("{node}: cannot write its count: {}", with_sources(&e)),
            ),
        },
        Next::Return => match quarantine::release(settings, node, None) {
            Ok(_) => outcome(
                "returned",
                format!(
                    "{node}: {said}; passed {} sweeps in a row: returned to service",
                    next_entry.passed
                ),
            ),
            Err(e) => outcome(
                "error",
                format!("{node}: cannot return it: {}", with_sources(&e)),
            ),
        },
        Next::Drain => drain_failed(settings, node, &next_entry, outcome),
    }
}

/// A node that failed `failures_to_drain` sweeps: drained with the evidence (validate's
/// tag), then out of the reservation.
fn drain_failed(
    settings: &Settings,
    node: &str,
    entry: &Entry,
    outcome: impl Fn(&'static str, String) -> NodeOutcome,
) -> NodeOutcome {
    let reason = drain::drain_reason(
        Tool::Validate,
        &format!(
            "sweep: failed {} sweeps in a row: {}",
            entry.failed, entry.problem
        ),
    );
    if let Err(e) = drain::drain_confirmed(Tool::Validate, node, &reason) {
        return outcome(
            "error",
            format!("{node}: cannot drain it: {}", with_sources(&e)),
        );
    }
    match quarantine::release(settings, node, None) {
        Ok(_) => outcome(
            "drained",
            format!(
                "{node}: failed {} sweeps in a row: drained ({reason})",
                entry.failed
            ),
        ),
        Err(e) => outcome(
            "error",
            format!(
                "{node}: drained, but cannot take it out of the quarantine: {}",
                with_sources(&e)
            ),
        ),
    }
}

/// Prints the outcome; the exit status.
fn finish(args: &SweepArgs, out: &Outcomes) -> Result<ExitStatus> {
    if args.json {
        emit_json(out)?;
    } else {
        for b in &out.black_holes {
            outln!("gpudirect sweep: {}: {} ({})", b.node, b.problem, b.action)?;
        }
        if let Some(why) = &out.skipped {
            outln!("gpudirect sweep: {why}")?;
        }
        for n in &out.nodes {
            outln!("gpudirect sweep: {}", n.message)?;
        }
    }
    let failed =
        out.nodes.iter().any(|n| {
            matches!(n.action, "kept" | "drained") && n.verdict.as_deref() != Some("healthy")
        }) || out.black_holes.iter().any(|b| b.action == "quarantined");
    let error = out.nodes.iter().any(|n| n.action == "error");
    Ok(match (error, failed) {
        (true, _) => ExitStatus::CouldNotRun,
        (false, true) => ExitStatus::Problem,
        (false, false) => ExitStatus::Ok,
    })
}
