//! `gpudirect health`: the node checks of the node's profile, fit to be Slurm's
//! `HealthCheckProgram` (slurmd runs it as root every `HealthCheckInterval` and when the
//! node registers) or to be called from NHC.
//!
//! What it checks, on the node it runs on:
//! - the checks the plugin makes before applying the profile (`gpudirect_core::resolve`):
//!   NICs present and up, libraries, topology file, ownership of what the profile exports
//!   (the RxDM socket directory is per job: the prolog's business, not checked here);
//! - `nic_speed`: each data NIC at least at the profile's `line_rate_gbit`
//!   (`/sys/class/net/NIC/speed`, or the RDMA port's `rate`);
//! - `gpus`: as many GPUs in `/proc/driver/nvidia/gpus` as Slurm's gres gives the node;
//! - `nic_counters`, where the config has `[nic_counters]` (or `--counters-state` names a
//!   folder): no data NIC's error counters rose faster than their class's limit since the
//!   previous run ([`gpudirect::nic_counters`]; not in `gpudirect agent health`).
//!
//! A node set skips any of them with `skip_checks`. Output follows NHC: nothing but one
//! summary line when healthy (exit 0); one `ERROR: gpudirect: Health check failed: ...`
//! line per failed check, with the fix (exit 1); a check that cannot run at all (no config)
//! exits 3 and drains nothing. With `--drain`, a failure drains the node with a reason
//! tagged `gpudirect health:` and a pass returns it to service only when it is drained with
//! that tag ([`gpudirect::drain`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::drain::{self, Drained, HistoryPoint, Resumed, Sanction};
use gpudirect::health::{
    check_once, driver_gpu_count, quick_nccl as run_quick_nccl, Failed, NodeFacts, Paths, QuickNccl,
};
use gpudirect::nic_counters::{Check as CounterCheck, Judgement, Measured};
use gpudirect::outln;
use gpudirect::output::{emit_json, with_sources};
use gpudirect::profile::{Choice, ProfileError};
use gpudirect::quarantine;
use gpudirect::slurm;
use gpudirect::units::{duration_arg, now_unix, percent_arg, size_arg};
use gpudirect_core::config::{CheckKind, Config, Mode, NicCounterSettings};
use gpudirect_core::system::{load_config, slurm_node_name, Ownership, SystemProbe};
use serde::Serialize;

use super::args::{ConfigArg, DrainArgs};
use super::{Ctx, ExitStatus};
use gpudirect::noteln;

/// Arguments of `gpudirect health`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect health                               # check this node; exit 0 healthy, 1 not\n  \
    gpudirect health --drain                       # and drain it (or return it) in Slurm\n  \
    gpudirect health --drain --retries 2 --on-drain '/usr/local/sbin/file-repair --zone z'\n\n\
    As Slurm's health check (slurm.conf; HealthCheckProgram takes no arguments, so the\n\
    package's wrapper calls this with the arguments in /etc/default/gpudirect-health):\n  \
    HealthCheckProgram=/usr/lib/gpudirect-slurm/health-check\n  \
    HealthCheckInterval=300\n  \
    HealthCheckNodeState=ANY\n\n\
    Output follows NHC: `ERROR: gpudirect: Health check failed: CHECK: PROBLEM (FIX)` per\n\
    failed check. Exit status: 0 healthy (or no profile applies here), 1 a check failed,\n\
    3 could not check (no config, bad options, a quick all_reduce that could not run: nothing\n\
    is drained or resumed then). --drain drains with the reason\n\
    `gpudirect health: PROBLEM` and returns a passing node to service only when it carries\n\
    that tag: an admin's drain, or one `gpudirect validate` set, is left alone.")]
pub struct HealthArgs {
    /// The admin config.
    #[command(flatten)]
    pub config: ConfigArg,

    /// The Slurm node this is: default $SLURMD_NODENAME, else the host name.
    #[arg(long)]
    pub node: Option<String>,

    /// Check this profile instead of the node set's.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// What --drain does in Slurm.
    #[command(flatten)]
    pub drains: DrainArgs,

    /// Where sysfs is (tests point it at a copy).
    #[arg(long, value_name = "DIR", default_value = "/sys", hide = true)]
    pub sysfs: PathBuf,

    /// Where the NVIDIA driver lists its GPUs (tests point it at a copy).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/proc/driver/nvidia/gpus",
        hide = true
    )]
    pub nvidia_gpus: PathBuf,

    /// Also run a short all_reduce over this node's GPUs (nccl-tests, one process) and
    /// judge its busbw against the history's earlier quick tests of this cluster with as
    /// many GPUs: a node more than --tolerance below their median fails check `nccl`.
    /// Every run is recorded. It runs only on an idle node (Slurm says no job holds it):
    /// it takes the GPUs from outside every job; when Slurm cannot say, it does not run
    /// (exit 3). One that cannot run is exit 3, no failure.
    #[arg(long)]
    pub quick_nccl: bool,

    /// With --quick-nccl: the folder with all_reduce_perf.
    #[arg(long, env = "NCCL_TESTS_DIR", value_name = "DIR")]
    pub nccl_tests_dir: Option<PathBuf>,

    /// With --quick-nccl: how many GPUs (default: the driver's count, else the node's gres).
    #[arg(long, value_name = "N", requires = "quick_nccl",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: Option<u32>,

    /// With --quick-nccl: smallest size (K/M/G are powers of 1024).
    #[arg(short = 'b', long, value_name = "SIZE", default_value = "1G", value_parser = size_arg)]
    pub min_bytes: u64,

    /// With --quick-nccl: largest size, the one judged.
    #[arg(short = 'e', long, value_name = "SIZE", default_value = "1G", value_parser = size_arg)]
    pub max_bytes: u64,

    /// With --quick-nccl: how far below the history's median (percent) still passes.
    #[arg(long, value_name = "PCT", default_value = "10", value_parser = percent_arg)]
    pub tolerance: f64,

    /// With --quick-nccl: the cluster name runs are recorded and compared under (default
    /// $SLURM_CLUSTER_NAME).
    #[arg(long, env = "GPUDIRECT_CLUSTER")]
    pub cluster: Option<String>,

    /// The whole check's time limit (90, 50s, 2m): the quick all_reduce gets what is left
    /// less a reserve for the drain, and a check still running at the deadline stops with
    /// exit 3, nothing drained. Keep it under slurmd's 60 s kill of a health check.
    #[arg(long, value_name = "DURATION", default_value = "50s", value_parser = duration_arg)]
    pub deadline: Duration,

    /// Tests only: trust files owned by the owner of DIR (besides root) and check no folder
    /// above DIR, where health as root otherwise trusts only what root alone can change
    /// (the config, the quick test's programs and libraries).
    #[arg(long, value_name = "DIR", hide = true)]
    pub insecure_trust_below: Option<PathBuf>,

    /// Also write the result as metrics for node_exporter's textfile collector:
    /// DIR/gpudirect_health.prom, replaced whole each run (docs/admin-guide.md, "Dashboards").
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,

    /// Also put the verdict in the node's Extra in Slurm (`gpudirect_health_ok`,
    /// `gpudirect_ok`, `gpudirect_at`; the admin's own keys are kept), so that jobs can
    /// avoid a bad node with `sbatch --extra "gpudirect_ok=1"`. Needs
    /// SchedulerParameters=extra_constraints (not in Slurm 22.05). A changed verdict is
    /// written at once, the same one again at most every 10 minutes (docs/admin-guide.md,
    /// "Letting jobs choose healthy nodes").
    #[arg(long)]
    pub extra: bool,

    /// Keep the data NICs' error counters between runs in DIR (nic-counters-NODE.json) and
    /// fail check `nic_counters` where one rose faster than the config's
    /// [nic_counters.per_minute] allows. Turns the check on where the config has no
    /// [nic_counters] table; default: the table's state_dir (/var/lib/gpudirect). As root,
    /// DIR must be root's alone, with every folder above it.
    #[arg(long, value_name = "DIR")]
    pub counters_state: Option<PathBuf>,

    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What health trusts: as root, only what root alone can change (the plugin's rule,
/// security review S1 and S9); as anyone else, anything (it runs with their rights).
/// `--insecure-trust-below` widens root's rule for tests.
fn trust(args: &HealthArgs) -> Result<(Ownership, Option<SystemProbe>)> {
    if let Some(dir) = &args.insecure_trust_below {
        let (owner, below) = super::args::trusting_below(dir)?;
        return Ok((
            Ownership::TrustingBelow { owner, below },
            Some(SystemProbe::trusting(owner, below)),
        ));
    }
    let ownership = Ownership::for_caller();
    Ok((
        ownership,
        (ownership == Ownership::RootOnly).then(SystemProbe::default),
    ))
}

/// The deadline's backstop: a check still running when it passes (a hung scontrol, a
/// slow drain) stops with exit 3. The quick all_reduce is bounded before it, by its own
/// time limit, and killed with its whole process group by the runner.
fn stop_at(deadline: Instant, json: bool) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        let why = "the check ran past its --deadline: could not check, nothing drained or resumed";
        if json {
            let _ = emit_json(&serde_json::json!({ "could_not_check": why }));
        } else {
            noteln!("gpudirect health: {why}");
        }
        std::process::exit(i32::from(ExitStatus::CouldNotRun.code()));
    });
}

/// What `gpudirect health` found.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// The node.
    pub node: String,
    /// The profile checked, if one applies here.
    pub profile: Option<String>,
    /// The checks that ran.
    pub checked: Vec<&'static str>,
    /// The checks the node set skips here.
    pub skipped: Vec<&'static str>,
    /// The failures of the last attempt.
    pub failures: Vec<Failed>,
    /// How many times the checks ran.
    pub attempts: u32,
    /// What --drain did, if it ran.
    pub slurm: Option<SlurmAction>,
    /// Notes (a check that could not read what it needs, ...).
    pub notes: Vec<String>,
    /// A check that could not run at all (the quick all_reduce could not start, its
    /// history could not be opened): exit 3, and nothing is drained or resumed for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub could_not_check: Option<String>,
    /// What --extra did: one line per node, or why nothing was written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<String>,
    /// The node's GPU-to-NIC map and NIC subnets (`gpudirect agent health`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wiring: Option<gpudirect::validate::wiring::NodeWiring>,
    /// What `nic_counters` measured, when it ran: each NIC's rise per class of counter
    /// since the previous run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_counters: Option<Measured>,
    /// Wall time, milliseconds.
    pub elapsed_ms: u64,
}

/// What `--drain` did to the node in Slurm.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case", tag = "action")]
pub enum SlurmAction {
    /// A check failed.
    Drain {
        /// The outcome.
        drained: Drained,
        /// The evidence file given to --on-drain.
        evidence: Option<PathBuf>,
    },
    /// All passed.
    Resume {
        /// The outcome.
        resumed: Resumed,
    },
    /// A check failed, with `--quarantine`: what [`quarantine::apply`] did.
    Quarantine {
        /// The outcome, in words.
        quarantined: gpudirect::drain::NodeAction,
    },
    /// All passed, with `--quarantine`: health's own quarantine ended.
    Release {
        /// The outcome.
        released: quarantine::Released,
    },
    /// Slurm could not be asked; nothing changed.
    Error {
        /// Why.
        message: String,
    },
}

/// The node's name: `--node`, else `$SLURMD_NODENAME` (slurmd's), else the host name.
fn node_name(args: &HealthArgs) -> String {
    args.node.clone().unwrap_or_else(slurm_node_name)
}

/// `gpudirect health`.
pub fn run(args: &HealthArgs, ctx: &Ctx) -> Result<ExitStatus> {
    check(args, ctx, false)
}

/// The checks; with `wiring` (`gpudirect agent health`, vet's node checks) the report also
/// holds the node's GPU-to-NIC map and NIC subnets, what `validate --test wiring` compares.
pub fn check(args: &HealthArgs, ctx: &Ctx, wiring: bool) -> Result<ExitStatus> {
    let start = Instant::now();
    stop_at(start + args.deadline, args.json);
    let node = node_name(args);
    let (ownership, probe) = trust(args)?;
    // The config loader wants an absolute path (what slurm.conf names); by hand a
    // relative one is as good.
    let config_path = std::path::absolute(&args.config.path)
        .with_context(|| format!("--config {}", args.config.path.display()))?;
    let config = load_config(&config_path, ownership).with_context(|| match ownership {
        Ownership::Any => format!("gpudirect health: cannot check {node}"),
        _ => format!(
            "gpudirect health: cannot check {node}: as root it trusts only a config that root alone can change, as the plugin does"
        ),
    })?;
    // Without --profile, the node set's (auto).
    let auto = Mode::Auto.to_string();
    let choice =
        Choice::with(&config, args.profile.as_deref().unwrap_or(&auto)).map_err(|e| match e {
            ProfileError::Mode { source, .. } => anyhow::anyhow!("--profile: {source}"),
            e => e.into(),
        })?;
    let resolved = match choice.on(&node) {
        Ok(r) => r,
        // No node set or no profile for this node: nothing of ours to check.
        Err(ProfileError::Resolve { source, .. }) => {
            return nothing_to_check(args, &node, &format!("nothing to check ({source})"), start)
        }
        Err(e) => return Err(e.into()),
    };
    let Some(resolved) = resolved else {
        return nothing_to_check(args, &node, "mode none, nothing to check", start);
    };
    let profile = resolved.profile;
    let mut notes = Vec::new();
    let paths = Paths {
        sysfs: args.sysfs.clone(),
        nvidia_gpus: args.nvidia_gpus.clone(),
    };
    let facts = NodeFacts::read(&paths, resolved, &node);
    let mut attempts = 0;
    let (mut failures, mut checked, skipped) = loop {
        attempts += 1;
        let result = check_once(&paths, &facts, &node);
        if result.0.is_empty() || attempts > args.drains.retries {
            break result;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    // A check that could not ask Slurm is no pass (S10).
    let mut could_not_check = facts.gres_unknown.clone();
    let idle = if args.quick_nccl {
        quick_nccl_allowed(&node)
    } else {
        Ok(())
    };
    if let (true, true, Err(not_run)) = (args.quick_nccl, failures.is_empty(), &idle) {
        match not_run.could_not_check {
            true => could_not_check = could_not_check.or(Some(not_run.why.clone())),
            false => notes.push(not_run.why.clone()),
        }
    } else if args.quick_nccl && failures.is_empty() {
        // Only on an otherwise healthy node: a missing NIC or GPU already says enough.
        checked.push("nccl");
        let left = (start + args.deadline).saturating_duration_since(Instant::now());
        let quick = QuickLimits {
            timeout: quick_timeout(left),
            trust: probe.clone(),
        };
        match quick_nccl(
            args,
            &node,
            facts.slurm_gpus,
            &profile.library_dirs,
            quick,
            ctx,
        ) {
            Ok((failure, note)) => {
                failures.extend(failure);
                notes.push(note);
            }
            // Its own error is no finding about the node: nothing is drained for it.
            Err(e) => could_not_check = Some(format!("nccl: could not run the all_reduce: {e:#}")),
        }
    }
    let mut report = Health {
        node: node.clone(),
        profile: Some(profile.name.clone()),
        checked,
        skipped,
        failures,
        attempts,
        slurm: None,
        notes,
        could_not_check,
        extra: Vec::new(),
        wiring: None,
        nic_counters: None,
        elapsed_ms: 0,
    };
    // Not in vet's node checks (the agent): a job's user keeps no readings of the node's.
    let counters = (!wiring)
        .then(|| nic_counters(args, &config, &facts, &node, probe.as_ref()))
        .flatten();
    if let Some(judged) = counters {
        add_counters(&mut report, judged, ctx.verbose > 0);
    }
    if wiring {
        report.wiring = Some(gpudirect::validate::wiring::collect(
            Ok(&config),
            args.profile.as_deref(),
            &node,
            gpudirect::validate::wiring::Roots {
                sysfs: &args.sysfs,
                proc_root: std::path::Path::new("/proc"),
            },
        ));
    }
    // A check that could not finish neither drains nor resumes.
    if args.drains.acts() && (report.could_not_check.is_none() || !report.failures.is_empty()) {
        report.slurm = Some(
            match Sanction::chosen(
                args.drains.drain,
                args.drains.quarantine,
                &config.quarantine,
            ) {
                Some(Sanction::Quarantine(settings)) => {
                    quarantine_in_slurm(args, &report, ctx, &settings)
                }
                _ => act_in_slurm(args, &report, ctx),
            },
        );
    }
    // A check that could not finish has no verdict to publish either.
    if args.extra && (report.could_not_check.is_none() || !report.failures.is_empty()) {
        report.extra = publish_extra(&node, &report);
    }
    report.elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Some(dir) = &args.textfile {
        write_textfile(dir, &report, probe.as_ref());
    }
    if args.json {
        emit_json(&report)?;
    } else {
        print_text(&report)?;
    }
    Ok(if !report.failures.is_empty() {
        ExitStatus::Problem
    } else if report.could_not_check.is_some() {
        ExitStatus::CouldNotRun
    } else {
        ExitStatus::Ok
    })
}

/// `nic_counters`: on where the config has `[nic_counters]` or `--counters-state` names a
/// folder, unless the node set skips it; `None` when it does not run.
fn nic_counters(
    args: &HealthArgs,
    config: &Config,
    facts: &NodeFacts<'_>,
    node: &str,
    trust: Option<&SystemProbe>,
) -> Option<Judgement> {
    if facts.skipped_by_set.contains(&CheckKind::NicCounters) {
        return None;
    }
    let settings = match (&config.nic_counters, &args.counters_state) {
        (Some(settings), _) => settings.clone(),
        (None, Some(_)) => NicCounterSettings::default(),
        (None, None) => return None,
    };
    let state_dir = args
        .counters_state
        .clone()
        .unwrap_or_else(|| PathBuf::from(&settings.state_dir));
    let nics = facts.real_data_nics();
    Some(gpudirect::nic_counters::check(&CounterCheck {
        sysfs: &args.sysfs,
        node,
        nics: &nics,
        class: facts.resolved.profile.data_nic_class,
        settings: &settings,
        state_dir: &state_dir,
        trust,
        now_ms: gpudirect::units::now_unix_ms(),
    }))
}

/// Puts what `nic_counters` found into the report: its failures and notes (what it did
/// that is no problem, a first reading or a reset, with `-v`) and its figures.
fn add_counters(report: &mut Health, judged: Judgement, verbose: bool) {
    report.checked.push(CheckKind::NicCounters.name());
    report.nic_counters = Some(judged.measured());
    report.failures.extend(judged.failures);
    report.notes.extend(judged.notes);
    if verbose {
        report.notes.extend(judged.details);
    }
}

/// Whether `--quick-nccl` may run on `node` now: Slurm's word that the node is idle (or
/// no Slurm at all), and under slurmd, as its HealthCheckProgram.
fn quick_nccl_allowed(node: &str) -> Result<(), gpudirect::health::NotRun> {
    use gpudirect::health::IdleAnswer;
    let answer = match gpudirect::slurm::node_state(node) {
        Ok(state) => IdleAnswer::States(state.states),
        Err(gpudirect::slurm::SlurmError::Start { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            IdleAnswer::NoSlurm
        }
        Err(e) => IdleAnswer::Unanswered(e.to_string()),
    };
    let under_slurmd = std::env::var_os("SLURMD_NODENAME").is_some();
    gpudirect::health::quick_nccl_may_run(&answer, under_slurmd)
}

/// `--extra`: the node's verdict written into its Slurm Extra; the lines that say so.
fn publish_extra(node: &str, report: &Health) -> Vec<String> {
    let verdict = gpudirect::node_extra::Verdict {
        tool: drain::Tool::Health,
        ok: report.failures.is_empty(),
        busbw_gbps: None,
        at: gpudirect::units::now_unix(),
    };
    gpudirect::node_extra::apply_all(&[(node.to_string(), verdict)]).0
}

/// `--textfile DIR`: the report as metrics, for node_exporter. A folder it cannot write
/// is said on stderr; the verdict stands. As root (`trust`: the probe of root's rule), the
/// folder must be root's alone, as every other path root's health uses: a user's symlink or
/// folder is not written through (security review T10).
fn write_textfile(dir: &Path, report: &Health, trust: Option<&SystemProbe>) {
    use gpudirect_core::resolve::{NodeProbe, PathKind};
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let problem =
        trust.and_then(|p| p.untrusted(&absolute.display().to_string(), PathKind::Directory));
    if let Some(problem) = problem {
        noteln!(
            "gpudirect health: --textfile {}: not written: {problem} (make the folder and every folder above it root's, not writable by group or others)",
            dir.display()
        );
        return;
    }
    let failed: Vec<&str> = report.failures.iter().map(|f| f.check).collect();
    let run = gpudirect::metrics::HealthRun {
        node: &report.node,
        profile: report.profile.as_deref(),
        checks: report
            .checked
            .iter()
            .map(|c| (*c, !failed.contains(c)))
            .collect(),
        at: now_unix(),
        seconds: report.elapsed_ms as f64 / 1000.0,
        busbw: None,
        could_not_check: report.could_not_check.is_some(),
        nic_counters: report.nic_counters.as_ref(),
    };
    let text = gpudirect::metrics::health_metrics(&run).render();
    if let Err(e) = gpudirect::metrics::write_textfile(dir, "gpudirect_health.prom", &text) {
        noteln!(
            "gpudirect health: --textfile {}: cannot write gpudirect_health.prom: {e}",
            dir.display()
        );
    }
}

/// A node no profile applies to: healthy, said in text or (`--json`) as a report with
/// no check, as every answer of `--json` is.
fn nothing_to_check(
    args: &HealthArgs,
    node: &str,
    why: &str,
    start: Instant,
) -> Result<ExitStatus> {
    if args.json {
        emit_json(&Health {
            node: node.to_string(),
            profile: None,
            checked: Vec::new(),
            skipped: Vec::new(),
            failures: Vec::new(),
            attempts: 0,
            slurm: None,
            notes: vec![why.to_string()],
            could_not_check: None,
            extra: Vec::new(),
            wiring: None,
            nic_counters: None,
            elapsed_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        })?;
    } else {
        outln!("gpudirect health: {node}: {why}")?;
    }
    Ok(ExitStatus::Ok)
}

/// `--quick-nccl`: one all_reduce over the node's GPUs, recorded, and judged against the
/// median of up to `QUICK_NCCL_BASELINE_RUNS` earlier ok single-node runs of this
/// cluster at the same size (measured before this one is recorded). Returns the failure,
/// if any, and a note saying what was measured. The test finds NCCL where the node's jobs
/// do: the profile's `library_dirs` go first on its `LD_LIBRARY_PATH`, as the plugin puts
/// them (slurmd gives a health check no library path of its own).
fn quick_nccl(
    args: &HealthArgs,
    node: &str,
    slurm_gpus: Option<u32>,
    library_dirs: &[String],
    limits: QuickLimits,
    ctx: &Ctx,
) -> Result<(Option<Failed>, String)> {
    let Some(dir) = args.nccl_tests_dir.clone() else {
        anyhow::bail!("--quick-nccl needs the nccl-tests binaries: pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR");
    };
    let gpus = match args.gpus.or_else(|| driver_gpu_count(&args.nvidia_gpus)) {
        Some(n) if n > 0 => n,
        // The gres count the gpus check read, else (that check skipped) Slurm's answer now.
        _ => slurm_gpus
            .or_else(|| slurm::node_state(node).ok().and_then(|s| s.gpus))
            .context(
            "no GPUs to test: the driver lists none and Slurm gives the node none; pass --gpus N",
        )?,
    };
    let quick = QuickNccl {
        nccl_tests_dir: dir,
        node: node.to_string(),
        gpus,
        library_dirs: library_dirs.to_vec(),
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        tolerance_pct: args.tolerance,
        cluster: args.cluster.clone(),
        // Located only: the folder is created after the ownership check (S6).
        db: gpudirect::history::locate_db(ctx.db.as_deref())?,
        trust: limits.trust,
        timeout: limits.timeout,
    };
    Ok(run_quick_nccl(&quick)?)
}

/// The quick all_reduce's bounds: its time limit within the deadline, and what it trusts.
struct QuickLimits {
    timeout: Duration,
    trust: Option<SystemProbe>,
}

/// The quick all_reduce's time limit when `left` of the deadline remains: all of it but a
/// reserve for the drain and `--on-drain` (a quarter, at most 15 s), and never more than
/// [`QUICK_NCCL_TIMEOUT`]; one that runs out is a hung all_reduce, a finding. Pure.
fn quick_timeout(left: Duration) -> Duration {
    let reserve = (left / 4).min(Duration::from_secs(15));
    left.saturating_sub(reserve)
        .min(gpudirect::health::QUICK_NCCL_TIMEOUT)
        .max(Duration::from_secs(1))
}

/// What health adds to the evidence file: the profile, the failed checks, the checks run.
#[derive(Debug, Serialize)]
struct HealthEvidence<'a> {
    profile: &'a Option<String>,
    failures: &'a [Failed],
    checked: &'a [&'static str],
}

/// What `--on-drain` gets ([`drain::EvidenceFile`], validate's shape): the node, the
/// reason, each failed check, the node's last runs in the history (when there is one),
/// the cluster, the tool and the time, then this check's profile, failures and checks.
fn evidence<'a>(
    args: &HealthArgs,
    report: &'a Health,
    reason: &str,
    ctx: &Ctx,
) -> drain::EvidenceFile<HealthEvidence<'a>> {
    let history = ctx
        .open_history()
        .ok()
        .and_then(|h| h.node_history(&report.node, None, None).ok())
        .map(|h| HistoryPoint::last_of(h.runs))
        .unwrap_or_default();
    drain::EvidenceFile {
        node: report.node.clone(),
        reason: reason.to_string(),
        verdict: "failed".into(),
        evidence: report
            .failures
            .iter()
            .map(|f| format!("{}: {}", f.check, f.problem))
            .collect(),
        history,
        cluster: gpudirect::slurm::cluster_name(args.cluster.as_deref()),
        tool: "gpudirect health",
        at: gpudirect::units::format_rfc3339(now_unix()),
        details: HealthEvidence {
            profile: &report.profile,
            failures: &report.failures,
            checked: &report.checked,
        },
    }
}

/// `--drain`: drain on a failure (then `--on-drain`), return our own drain on a pass.
fn act_in_slurm(args: &HealthArgs, report: &Health, ctx: &Ctx) -> SlurmAction {
    let outcome = match report.failures.first() {
        Some(first) => {
            let reason = drain::drain_reason(drain::Tool::Health, &first.problem);
            drain::drain_node(
                drain::Tool::Health,
                &report.node,
                &reason,
                args.drains.on_drain.as_deref(),
                || evidence(args, report, &reason, ctx),
            )
            .map(|(drained, ran)| {
                let evidence = ran.and_then(|ran| {
                    ran.inspect_err(|e| noteln!("gpudirect health: {}", with_sources(e)))
                        .ok()
                });
                SlurmAction::Drain { drained, evidence }
            })
        }
        None => drain::resume_if_ours(drain::Tool::Health, &report.node)
            .map(|resumed| SlurmAction::Resume { resumed }),
    };
    outcome.unwrap_or_else(|e| SlurmAction::Error {
        message: with_sources(&e),
    })
}

/// `--quarantine`: quarantine on a failure of the node or a NIC (then `--on-drain`), none
/// for a config fault (said), and end health's own quarantine on a pass.
fn quarantine_in_slurm(
    args: &HealthArgs,
    report: &Health,
    ctx: &Ctx,
    settings: &quarantine::Settings,
) -> SlurmAction {
    if report.failures.is_empty() {
        return match quarantine::release(settings, &report.node, Some(drain::Tool::Health)) {
            Ok(released) => SlurmAction::Release { released },
            Err(e) => SlurmAction::Error {
                message: with_sources(&e),
            },
        };
    }
    // The node's or a NIC's fault first: a config fault beside it does not spare the node.
    let first = report
        .failures
        .iter()
        .find(|f| quarantine::cause_of_check(f.check) != quarantine::Cause::Config)
        .unwrap_or(&report.failures[0]);
    let candidate = drain::Candidate {
        node: report.node.clone(),
        verdict: first.check.to_string(),
        evidence: vec![first.problem.clone()],
        cause: quarantine::cause_of_check(first.check),
        plan: drain::DrainPlan::Drain {
            reason: drain::drain_reason(drain::Tool::Health, &first.problem),
        },
    };
    let mut actions = quarantine::apply(
        drain::Tool::Health,
        settings,
        std::slice::from_ref(&candidate),
        args.drains.on_drain.as_deref(),
        |_, entry| evidence(args, report, entry, ctx),
    );
    match actions.pop() {
        Some(quarantined) => SlurmAction::Quarantine { quarantined },
        None => SlurmAction::Error {
            message: "nothing was quarantined".into(),
        },
    }
}

fn print_text(report: &Health) -> Result<()> {
    let profile = report.profile.as_deref().unwrap_or("-");
    for f in &report.failures {
        // NHC's form: what its log readers and admins grep for.
        outln!(
            "ERROR: gpudirect: Health check failed: {}: {} ({})",
            f.check,
            f.problem,
            f.fix
        )?;
    }
    if let (true, Some(why)) = (report.failures.is_empty(), &report.could_not_check) {
        outln!(
            "gpudirect health: {} could not be checked: {why} (exit 3; nothing drained or resumed)",
            report.node
        )?;
    } else if report.failures.is_empty() {
        outln!(
            "gpudirect health: {} healthy: profile {profile}, checked {}{} in {} ms",
            report.node,
            report.checked.join(", "),
            if report.skipped.is_empty() {
                String::new()
            } else {
                format!(" (skipped here: {})", report.skipped.join(", "))
            },
            report.elapsed_ms
        )?;
    }
    for note in &report.notes {
        outln!("gpudirect health: note: {note}")?;
    }
    match &report.slurm {
        Some(SlurmAction::Drain { drained, evidence }) => {
            let what = match drained {
                Drained::Drained { state } => format!("drained {} (now {state})", report.node),
                Drained::AlreadyOurs { reason } => {
                    format!("{} already drained: {reason}", report.node)
                }
                Drained::AdminDrain { reason } => format!(
                    "{} is drained by an admin or gpudirect validate ({}): left as it is",
                    report.node,
                    reason.as_deref().unwrap_or("no reason")
                ),
            };
            outln!("gpudirect health: {what}")?;
            if let Some(path) = evidence {
                outln!(
                    "gpudirect health: evidence for --on-drain: {}",
                    path.display()
                )?;
            }
        }
        Some(SlurmAction::Resume { resumed }) => match resumed {
            Resumed::Resumed { reason } => outln!(
                "gpudirect health: returned {} to service (was: {reason})",
                report.node
            )?,
            Resumed::AdminDrain { reason } => outln!(
                "gpudirect health: {} stays drained: not health's own drain, but an admin's or gpudirect validate's ({})",
                report.node,
                reason.as_deref().unwrap_or("no reason")
            )?,
            Resumed::NotDrained => {}
        },
        Some(SlurmAction::Quarantine { quarantined }) => {
            outln!("gpudirect health: {}", quarantined.message)?;
            if let Some(path) = &quarantined.evidence_file {
                outln!(
                    "gpudirect health: evidence for --on-drain: {}",
                    path.display()
                )?;
            }
        }
        Some(SlurmAction::Release { released }) => match released {
            quarantine::Released::Released { entry } => outln!(
                "gpudirect health: returned {} from the quarantine (was: {entry})",
                report.node
            )?,
            quarantine::Released::OtherTool { entry } => outln!(
                "gpudirect health: {} stays quarantined: not health's own ({entry}); `gpudirect sweep` returns it",
                report.node
            )?,
            quarantine::Released::NotQuarantined => {}
        },
        Some(SlurmAction::Error { message }) => {
            outln!("gpudirect health: could not drain, quarantine or return in Slurm: {message}")?
        }
        None => {}
    }
    for line in &report.extra {
        outln!("gpudirect health: --extra: {line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// health's `--on-drain` file has validate's fields (node, reason, verdict, evidence,
    /// history, cluster, tool, at), then its own.
    #[test]
    fn the_evidence_file_has_validates_shape() {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            args: HealthArgs,
        }
        let wrap = Wrap::try_parse_from(["health", "--cluster", "c1"]).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let ctx = Ctx {
            db: Some(scratch.path().join("none.sqlite")),
            ..Ctx::default()
        };
        let report = Health {
            node: "node2".into(),
            profile: Some("tcpx".into()),
            checked: vec!["nics"],
            skipped: Vec::new(),
            failures: vec![Failed {
                check: "nics",
                problem: "eth3 is down".into(),
                fix: "check the cable".into(),
            }],
            attempts: 1,
            slurm: None,
            notes: Vec::new(),
            could_not_check: None,
            extra: Vec::new(),
            wiring: None,
            nic_counters: None,
            elapsed_ms: 0,
        };
        let json = serde_json::to_value(evidence(
            &wrap.args,
            &report,
            "gpudirect health: eth3 is down",
            &ctx,
        ))
        .unwrap();
        for key in [
            "node", "reason", "verdict", "evidence", "history", "cluster", "tool", "at",
        ] {
            assert!(json.get(key).is_some(), "{key} in {json}");
        }
        assert_eq!(json["tool"], "gpudirect health");
        assert_eq!(json["cluster"], "c1");
        assert_eq!(json["evidence"][0], "nics: eth3 is down");
        assert_eq!(json["failures"][0]["check"], "nics");
        assert!(json["history"].as_array().unwrap().is_empty());
    }
}
