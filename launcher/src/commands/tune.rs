//! `gpudirect tune`: sweeps NCCL settings on the allocation (or this host's GPUs), judges
//! each against the default per size band with the noise rule of [`gpudirect::tune`],
//! records every run, and can write the winner as a profile overlay.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use gpudirect::history::{History, LaunchKind, RunFilter, RunStatus};
use gpudirect::launch::{find_binary, prepare, LaunchOptions, Launcher};
use gpudirect::matrix::{Cell, Matrix, Variant};
use gpudirect::outln;
use gpudirect::output::{emit, emit_json};
use gpudirect::profile::{Choice, ProfileError};
use gpudirect::runner;
use gpudirect::slurm::{env_set, env_var, Allocation};
use gpudirect::tune::knobs::{self, Knob, Preset};
use gpudirect::tune::overlay::{self, Provenance};
use gpudirect::tune::plan::{self, Setting};
use gpudirect::tune::session::{recorded_steps, seconds_text, Recorded, Setup, Tuner};
use gpudirect::tune::text::{result_text, TuneResult};
use gpudirect::tune::verdict::{self, PhaseResult, Rule};
use gpudirect::units::{duration_arg, format_rfc3339, human_size, now_unix, percent_arg, size_arg};
use gpudirect_core::config::Profile;

use super::args::NcclTestsArgs;
use super::{Ctx, ExitStatus};
use gpudirect::noteln;
use gpudirect::validate::gpus::{gpu_device, parse_gpu_list, visible_gpus};

/// Arguments of `gpudirect tune`.
#[derive(Debug, Args, Clone)]
#[command(after_help = "Examples:\n  \
    salloc -N2 --ntasks-per-node=8 gpudirect tune --gpudirect tcpx -G 8 --write tcpx-tuned.toml\n  \
    gpudirect tune --gpus 0-7 -c all_reduce,all_gather          # this host's GPUs, no Slurm\n  \
    gpudirect tune --gpus 0,1 --knob NCCL_ALGO=Ring,Tree --knob NCCL_MIN_NCHANNELS=16,32\n  \
    gpudirect tune --sweep knobs.toml --dry-run                 # the plan and its time\n  \
    gpudirect tune --resume t1764540000-812 --gpus 0,1          # finish an interrupted tune\n\n\
How it searches: phase 1 runs each knob value alone against the default; phase 2 runs\n\
combinations of the phase-1 winners. Every phase runs in rounds (--rounds, at least 3)\n\
that each run every setting once, the default included, in an order rotated each round\n\
(by a third of the settings with three rounds: early in one round, late in another).\n\
Without --knob or --sweep the knobs are built in: NCCL_ALGO (all_reduce), NCCL_PROTO,\n\
NCCL_MIN_NCHANNELS, NCCL_BUFFSIZE, plus NCCL_NSOCKS_PERTHREAD/NCCL_SOCKET_NTHREADS on\n\
socket transports and NCCL_IB_QPS_PER_CONNECTION on IB/gIB; a value the profile already\n\
sets is the default, and a variable it forces is not tuned. A sweep file is\n\
`[knobs]` with lists: NCCL_ALGO = [\"Ring\", \"Tree\"].\n\n\
The noise rule, per size band (--bands): a setting wins when its median busbw beats the\n\
default's by more than the spreads (largest - smallest) of both together and by at least\n\
--min-gain. --write keeps one setting that wins somewhere and loses nowhere: variables\n\
apply at every size. Every run is in the history (variant = its setting, label = the\n\
tune id). Ctrl-C keeps every finished run; --resume ID with the same flags continues.\n\
Exit status: 0 done (also when the budget ended it), 2 the default itself failed to run,\n\
3 bad option, 130 interrupted.")]
pub struct TuneArgs {
    /// Collectives, comma-separated; each is tuned on its own.
    #[arg(short = 'c', long, value_delimiter = ',', default_value = "all_reduce")]
    pub collectives: Vec<String>,

    /// Nodes each run uses. Default: every node of the allocation.
    #[arg(short = 'N', long, conflicts_with = "gpus")]
    pub nodes: Option<u32>,

    /// GPUs (ranks) per node. Default: SLURM_NTASKS_PER_NODE, else 1.
    #[arg(short = 'G', long, conflicts_with = "gpus")]
    pub gpus_per_node: Option<u32>,

    /// This host's GPUs instead of an allocation: `0-7` or `0,1`; one local process drives
    /// them all (nccl-tests -g). No Slurm needed.
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,

    /// GPUs each srun process drives (nccl-tests -g); ranks per node = G / this.
    #[arg(long, default_value_t = 1, conflicts_with = "gpus")]
    pub gpus_per_process: u32,

    /// Smallest message size (bytes, or K/M/G/T).
    #[arg(short = 'b', long, value_name = "SIZE", default_value = "1M", value_parser = size_arg)]
    pub min_bytes: u64,

    /// Largest message size.
    #[arg(short = 'e', long, value_name = "SIZE", default_value = "8G", value_parser = size_arg)]
    pub max_bytes: u64,

    /// Size factor between steps.
    #[arg(short = 'f', long, default_value_t = 4)]
    pub factor: u64,

    /// The --gpudirect mode every run applies (a profile, or auto); its variables are the
    /// default the knobs are tried against.
    #[arg(long, value_name = "MODE", conflicts_with = "gpus")]
    pub gpudirect: Option<String>,

    /// A knob to try, repeatable: `NAME=VALUE,VALUE` (replaces the built-in knobs).
    #[arg(long = "knob", value_name = "NAME=VALUES", conflicts_with = "sweep")]
    pub knobs: Vec<String>,

    /// A sweep file (TOML, `[knobs]` with a list of values per variable) instead of the
    /// built-in knobs.
    #[arg(long, value_name = "FILE")]
    pub sweep: Option<PathBuf>,

    /// Rounds per phase: every setting runs this often, interleaved with the others.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(3..=50))]
    pub rounds: u32,

    /// Size band boundaries, comma-separated (`1M,64M`: below 1 MiB, 1-64 MiB, from 64 MiB).
    #[arg(long, value_name = "SIZES", value_delimiter = ',', default_value = "1M,64M", value_parser = size_arg)]
    pub bands: Vec<u64>,

    /// A win must gain at least this much over the default's median, besides beating the
    /// noise (`1%`, `0.5`).
    #[arg(long, value_name = "PCT", default_value = "1%", value_parser = percent_arg)]
    pub min_gain: f64,

    /// Time for the whole tune (`20m`, `1h`): no round starts that would end past it, and
    /// no run starts after it.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration_arg)]
    pub budget: Duration,

    /// Write the winning size-independent setting as a profile overlay (TOML to append to
    /// the plugin's config; `gpudirect profiles check --overlay FILE` checks it).
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,

    /// The overlay profile's name. Default: MODE-tuned, or `tuned` without --gpudirect.
    #[arg(long, value_name = "NAME", requires = "write")]
    pub name: Option<String>,

    /// Print the plan (settings, rounds, runs, estimated time against the budget) and run
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Name this tune (default: generated and printed); its runs carry it as their label.
    #[arg(long, value_name = "ID")]
    pub tune_id: Option<String>,

    /// Continue tune ID: its finished runs count, the rest run. Give the same flags.
    #[arg(long, value_name = "ID", conflicts_with = "tune_id")]
    pub resume: Option<String>,

    /// Where nccl-tests is and how its runs are limited and recorded.
    #[command(flatten)]
    pub nccl: NcclTestsArgs,

    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,

    /// Extra nccl-tests arguments for every run, after `--` (e.g. `-- -n 50 -w 10`).
    #[arg(last = true, value_name = "NCCL_TESTS_ARGS")]
    pub extra: Vec<String>,
}

fn setup(args: &TuneArgs) -> Result<Setup> {
    let nccl_tests_dir = args.nccl.nccl_tests_dir.clone().context(
        "where are the nccl-tests binaries? pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR",
    )?;
    for collective in &args.collectives {
        find_binary(&nccl_tests_dir, collective)?;
    }
    let as_root = nix::unistd::geteuid().is_root();
    let mut launch = LaunchOptions {
        launcher: Launcher::Local,
        nccl_tests_dir,
        mpi: None,
        nodes: Vec::new(),
        work_dir: None,
        timeout: args.nccl.timeout,
        grace: args.nccl.grace,
        as_root,
        gpus_per_process: args.gpus_per_process,
        exact: false,
        startup_timeout: Some(args.nccl.startup.startup_timeout),
    };
    if let Some(list) = &args.gpus {
        let visible = visible_gpus();
        let devices = parse_gpu_list(list)?
            .into_iter()
            .map(|id| gpu_device(list, id, visible.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let host = gpudirect_core::system::short_hostname();
        return Ok(Setup {
            described: format!(
                "{host}, GPUs {list} ({} GPU(s), one process)",
                devices.len()
            ),
            launch,
            nodes: 1,
            gpus_per_node: devices.len() as u32,
            devices: Some(devices.join(",")),
            mode: None,
            profile: None,
            run_nodes: vec![host],
            launch_kind: LaunchKind::Local,
            launch_env: BTreeMap::new(),
        });
    }
    let allocation = Allocation::from_env()?;
    let nodes = args.nodes.unwrap_or(1).max(1);
    let all = allocation.require_nodes(
        nodes as usize,
        &format!("gpudirect tune runs on {nodes} node(s) of an allocation"),
        Some("pass --gpus to tune this host's GPUs"),
    )?;
    let nodes = args
        .nodes
        .unwrap_or(u32::try_from(all.len()).unwrap_or(1))
        .max(1);
    let gpus_per_node = args
        .gpus_per_node
        .unwrap_or(allocation.tasks_per_node.unwrap_or(1));
    let run_nodes: Vec<String> = all[..nodes as usize].to_vec();
    let mut launch_env = BTreeMap::new();
    let profile = match args.gpudirect.as_deref() {
        None => None,
        Some(mode) => {
            let choice = Choice::load(&args.nccl.config.path, mode).map_err(|e| match e {
                ProfileError::Config { .. } => anyhow::anyhow!(
                    "{e}; tune reads the profile to know what the default sets: pass --config FILE"
                ),
                e => e.into(),
            })?;
            let control = choice.control_nic(&run_nodes);
            gpudirect::launch::pin_launch(&mut launch_env, control.as_deref(), "tune", env_set);
            choice.on(&run_nodes[0])?.map(|r| r.profile.clone())
        }
    };
    launch.launcher = Launcher::Srun;
    launch.mpi = Some(args.nccl.mpi.clone());
    launch.nodes = run_nodes.clone();
    Ok(Setup {
        described: format!(
            "{} node(s) x {gpus_per_node} GPU(s) ({}){}",
            nodes,
            gpudirect_core::hostlist::compress(&run_nodes),
            args.gpudirect
                .as_deref()
                .map(|m| format!(", --gpudirect={m}"))
                .unwrap_or_default()
        ),
        launch,
        nodes,
        gpus_per_node,
        devices: None,
        mode: args.gpudirect.clone(),
        profile,
        run_nodes,
        launch_kind: LaunchKind::Srun,
        launch_env,
    })
}

/// What the default already has for each variable: the profile's (forced or not), then
/// the user's environment where the profile leaves a variable alone.
fn presets(profile: Option<&Profile>, names: &[String]) -> BTreeMap<String, Preset> {
    let mut presets = BTreeMap::new();
    if let Some(profile) = profile {
        for var in &profile.env {
            let value = var.value.expand(|_| "{per task}".to_string());
            presets.insert(
                var.name.clone(),
                if var.forced {
                    Preset::Forced(value)
                } else {
                    Preset::Profile(value)
                },
            );
        }
    }
    for name in names {
        if let Some(value) = env_var(name) {
            presets
                .entry(name.clone())
                .and_modify(|p| {
                    // The user's value wins over the profile's unless it is forced.
                    if matches!(p, Preset::Profile(_)) {
                        *p = Preset::User(value.clone());
                    }
                })
                .or_insert(Preset::User(value));
        }
    }
    presets
}

/// The knobs for one collective, fitted to the default, and notes on what changed.
fn knobs_for(
    given: &Option<Vec<Knob>>,
    collective: &str,
    profile: Option<&Profile>,
) -> (Vec<Knob>, Vec<String>) {
    let knobs = given.clone().unwrap_or_else(|| {
        knobs::builtin(collective, profile.and_then(|p| p.transport.as_deref()))
    });
    let names: Vec<String> = knobs.iter().map(|k| k.name.clone()).collect();
    knobs::fit(knobs, &presets(profile, &names))
}

/// A tune id names runs in the history and is quoted in the overlay's comments: letters,
/// digits, `.`, `_` and `-`, at most 64.
fn check_tune_id(id: &str) -> Result<()> {
    let valid = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !valid {
        bail!(
            "tune id `{}`: use letters, digits, `.`, `_` and `-`, at most 64 (e.g. tcpx-2026-11-30)",
            gpudirect_core::config::sanitize_for_message(id)
        );
    }
    Ok(())
}

/// `gpudirect tune`.
pub fn run(args: &TuneArgs, ctx: &Ctx) -> Result<ExitStatus> {
    if args.min_bytes > args.max_bytes {
        bail!("-b {} is larger than -e {}", args.min_bytes, args.max_bytes);
    }
    if args.factor < 2 {
        bail!("-f {}: the size factor is 2 or more", args.factor);
    }
    let given = given_knobs(args)?;
    let setup = setup(args)?;
    one_rank_refused(&setup)?;
    let overlay_name = match &args.write {
        Some(_) => Some(
            overlay::profile_name(args.name.as_deref(), base_profile_name(&setup))
                .map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let bands = verdict::bands(&args.bands);
    let rule = Rule {
        min_rounds: 3,
        min_gain_pct: args.min_gain,
    };
    let (phase_one, notes) = phase_one_plan(args, &given, &setup)?;
    for note in &notes {
        noteln!("gpudirect tune: {note}");
    }
    let plan_print = plan::fingerprint(&plan_words(args, &setup, &phase_one));
    let db = ctx.db_path()?;
    if args.dry_run {
        return dry_run(args, &setup, &phase_one, &db);
    }
    let history = History::open(&db)?;
    let (tune_id, (done, placeholders)) = start_tune(args, &history, &db, &plan_print)?;
    // Until a run of this tune has finished, the history's runs of the same shape tell how
    // long one takes, so that the first round is held to the budget too.
    let seed_estimate = args
        .collectives
        .first()
        .and_then(|c| history_estimate(&history, c, setup.nodes));
    // Removed when `work` drops.
    let work = gpudirect::launch::work_dir("gpudirect-tune-")
        .context("cannot create a work folder in $TMPDIR (set TMPDIR to a folder of yours)")?;
    let work_dir = work.path().to_path_buf();
    let mut launch = setup.launch.clone();
    launch.work_dir = Some(work_dir.clone());
    let setup = Setup { launch, ..setup };
    runner::install_interrupt_handler();
    let mut tuner = Tuner {
        setup: &setup,
        budget: args.budget,
        json_report: !args.nccl.no_json,
        cluster: args.nccl.cluster.clone(),
        matrix: matrix_of(args),
        tune_id: tune_id.clone(),
        plan_print,
        history,
        done,
        placeholders,
        started: Instant::now(),
        durations: seed_estimate.into_iter().collect(),
        runs_started: 0,
        budget_note: None,
        failures: Vec::new(),
        default_failed: false,
    };
    let phases = run_phases(&mut tuner, args, &phase_one, &bands, &rule)?;
    let _ = std::fs::remove_dir_all(&work_dir);
    let interrupted = tuner.interrupted();
    let (choice, left_out) = verdict::size_independent_choice(&phases, &args.collectives);
    let measured = format!(
        "{} on {}, {} - {} by {}, {} rounds",
        args.collectives.join(", "),
        setup.described,
        human_size(args.min_bytes),
        human_size(args.max_bytes),
        args.factor,
        args.rounds
    );
    let mut result = TuneResult {
        tune_id: tune_id.clone(),
        measured,
        rule,
        budget_seconds: args.budget.as_secs_f64(),
        elapsed_seconds: tuner.started.elapsed().as_secs_f64(),
        runs: tuner.done.len(),
        budget_note: tuner.budget_note.clone(),
        notes,
        phases,
        choice,
        left_out,
        failures: tuner.failures.clone(),
        overlay: None,
    };
    if !interrupted {
        write_overlay(args, &setup, overlay_name.as_deref(), &mut result)?;
    }
    print_result(&result, args.json)?;
    if interrupted {
        noteln!("gpudirect tune: interrupted: {} run(s) recorded; continue with --resume {tune_id} and the same flags", result.runs);
        return Ok(ExitStatus::Interrupted);
    }
    Ok(if tuner.default_failed {
        ExitStatus::Failed
    } else {
        ExitStatus::Ok
    })
}

/// Each collective with its phase-1 settings.
type PhaseOne = Vec<(String, Vec<Setting>)>;

/// Phase 1's settings per collective (phase 2 follows from its results), and the notes on
/// the knobs fitted to each.
fn phase_one_plan(
    args: &TuneArgs,
    given: &Option<Vec<Knob>>,
    setup: &Setup,
) -> Result<(PhaseOne, Vec<String>)> {
    let mut phase_one: Vec<(String, Vec<Setting>)> = Vec::new();
    let mut notes = Vec::new();
    for collective in &args.collectives {
        let (knobs, fitted) = knobs_for(given, collective, setup.profile.as_ref());
        notes.extend(fitted.into_iter().map(|n| format!("{collective}: {n}")));
        if knobs.is_empty() {
            bail!("{collective}: no knob is left to try (see the notes above): give --knob NAME=VALUES");
        }
        phase_one.push((collective.clone(), plan::single_settings(&knobs)));
    }
    Ok((phase_one, notes))
}

/// Runs phase 1 of each collective, then phase 2 (the winners combined) where phase 1
/// found winners to combine; stops early when interrupted or out of budget.
fn run_phases(
    tuner: &mut Tuner<'_>,
    args: &TuneArgs,
    phase_one: &[(String, Vec<Setting>)],
    bands: &[verdict::Band],
    rule: &Rule,
) -> Result<Vec<PhaseResult>> {
    let mut phases = Vec::new();
    for (collective, settings) in phase_one {
        if tuner.interrupted() || tuner.budget_note.is_some() {
            break;
        }
        let steps = plan::interleaved(collective, 1, settings, args.rounds);
        noteln!(
            "gpudirect tune: {collective} phase 1: {} setting(s) x {} rounds = {} runs",
            settings.len(),
            args.rounds,
            steps.len()
        );
        let samples = tuner.run_phase(&steps, &format!("{collective} phase 1"))?;
        let first = PhaseResult {
            collective: collective.clone(),
            phase: 1,
            bands: verdict::judge(&samples, settings, bands, rule),
        };
        let combined = plan::combined_settings(&verdict::winners_to_combine(&first));
        phases.push(first);
        if combined.is_empty() || tuner.interrupted() || tuner.budget_note.is_some() {
            continue;
        }
        let steps = plan::interleaved(collective, 2, &combined, args.rounds);
        noteln!(
            "gpudirect tune: {collective} phase 2: {} combination(s) of the winners x {} rounds = {} runs",
            combined.len() - 1,
            args.rounds,
            steps.len()
        );
        let samples = tuner.run_phase(&steps, &format!("{collective} phase 2"))?;
        phases.push(PhaseResult {
            collective: collective.clone(),
            phase: 2,
            bands: verdict::judge(&samples, &combined, bands, rule),
        });
    }
    Ok(phases)
}

/// The knobs `--sweep FILE` or `--knob` give (`None`: the built-in presets).
fn given_knobs(args: &TuneArgs) -> Result<Option<Vec<Knob>>> {
    Ok(if let Some(file) = &args.sweep {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read the sweep file `{}`", file.display()))?;
        Some(knobs::from_sweep_file(&text, &file.display().to_string())?)
    } else if args.knobs.is_empty() {
        None
    } else {
        Some(knobs::from_flags(&args.knobs)?)
    })
}

/// The tune's id (`--resume ID`, `--tune-id`, else a new one, said), with the steps it
/// already recorded and the placeholders of steps that were running when it stopped. A
/// new id that already has runs is refused.
fn start_tune(
    args: &TuneArgs,
    history: &History,
    db: &std::path::Path,
    plan_print: &str,
) -> Result<(String, Recorded)> {
    let tune_id = args
        .resume
        .clone()
        .or_else(|| args.tune_id.clone())
        .unwrap_or_else(|| format!("t{}-{}", now_unix(), std::process::id()));
    check_tune_id(&tune_id)?;
    let (done, placeholders) = match &args.resume {
        Some(id) => {
            let (done, placeholders) = recorded_steps(history, id, plan_print)?;
            if done.is_empty() && placeholders.is_empty() {
                bail!("no run of tune `{id}` is in {}: check the id (gpudirect history --label ID lists its runs)", db.display());
            }
            noteln!(
                "gpudirect tune: resuming {id}: {} run(s) already recorded",
                done.len()
            );
            (done, placeholders)
        }
        None => {
            let taken = history.list_runs(&RunFilter {
                label: Some(tune_id.clone()),
                limit: Some(1),
                ..RunFilter::default()
            })?;
            if !taken.is_empty() {
                bail!("tune `{tune_id}` already has runs in {}: continue it with --resume {tune_id}, or choose another --tune-id", db.display());
            }
            noteln!("gpudirect tune: tune {tune_id} (continue it later with --resume {tune_id} and the same flags)");
            (BTreeMap::new(), BTreeMap::new())
        }
    };
    Ok((tune_id, (done, placeholders)))
}

/// `--write FILE`: the chosen setting as a profile overlay, or a note that none won.
fn write_overlay(
    args: &TuneArgs,
    setup: &Setup,
    overlay_name: Option<&str>,
    result: &mut TuneResult,
) -> Result<()> {
    let (Some(file), Some(name)) = (&args.write, overlay_name) else {
        return Ok(());
    };
    match &result.choice {
        Some(choice) => {
            let written_at = format_rfc3339(now_unix());
            let text = overlay::overlay_text(
                name,
                base_profile_name(setup),
                choice,
                &Provenance {
                    tune_id: &result.tune_id,
                    written_at: &written_at,
                    measured: &result.measured,
                    left_out: &result.left_out,
                    file: &file.display().to_string(),
                },
            );
            std::fs::write(file, text)
                .with_context(|| format!("cannot write the overlay `{}`", file.display()))?;
            result.overlay = Some(file.display().to_string());
        }
        None => noteln!(
            "gpudirect tune: nothing written to {}: no setting beat the default by more than the noise without losing somewhere",
            file.display()
        ),
    }
    Ok(())
}

/// The profile the overlay extends: the one the runs applied, by its name.
fn base_profile_name(setup: &Setup) -> Option<&str> {
    setup.profile.as_ref().map(|p| p.name.as_str())
}

fn matrix_of(args: &TuneArgs) -> Matrix {
    Matrix {
        collectives: args.collectives.clone(),
        nodes: vec![1],
        gpus_per_node: vec![1],
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        factor: args.factor,
        timeout: args.nccl.timeout,
        extra_args: args.extra.clone(),
        variants: Vec::new(),
    }
}

/// What the fingerprint covers: everything that changes what a step measures or which
/// steps phase 2 gets.
fn plan_words(args: &TuneArgs, setup: &Setup, phase_one: &[(String, Vec<Setting>)]) -> Vec<String> {
    let mut words = vec![
        format!(
            "{}x{} by {}",
            setup.nodes, setup.gpus_per_node, args.gpus_per_process
        ),
        setup.launch.nccl_tests_dir.display().to_string(),
        // What the default applies: a profile changed between runs is another default.
        format!("{:?}", setup.profile.as_ref().map(|p| &p.env)),
        setup.devices.clone().unwrap_or_default(),
        setup.mode.clone().unwrap_or_default(),
        format!("{} {} {}", args.min_bytes, args.max_bytes, args.factor),
        format!("rounds {}", args.rounds),
        format!("bands {:?} gain {}", args.bands, args.min_gain),
        args.extra.join(" "),
    ];
    for (collective, settings) in phase_one {
        words.push(collective.clone());
        words.extend(settings.iter().map(ToString::to_string));
    }
    words
}

fn dry_run(
    args: &TuneArgs,
    setup: &Setup,
    phase_one: &[(String, Vec<Setting>)],
    db: &std::path::Path,
) -> Result<ExitStatus> {
    let history = History::open_existing(db).ok();
    let matrix = matrix_of(args);
    let mut total_runs = 0;
    let mut total_seconds = 0.0;
    let mut unknown = false;
    outln!("tune plan on {}:", setup.described)?;
    for (collective, settings) in phase_one {
        let runs = settings.len() * args.rounds as usize;
        total_runs += runs;
        let estimate = history
            .as_ref()
            .and_then(|h| history_estimate(h, collective, setup.nodes));
        match estimate {
            Some(s) => total_seconds += s * runs as f64,
            None => unknown = true,
        }
        outln!(
            "  {collective}: phase 1: {} setting(s) x {} rounds = {runs} runs, interleaved; ~{} per run{}",
            settings.len(),
            args.rounds,
            estimate.map(seconds_text).unwrap_or_else(|| "?".into()),
            if estimate.is_some() { " (history)" } else { " (no history)" }
        )?;
        for setting in settings {
            outln!("      {setting}")?;
        }
        outln!(
            "    phase 2: up to {} combination(s) of the phase-1 winners (+ the default) x {} rounds, if two or more variables win",
            plan::MAX_COMBINATIONS,
            args.rounds
        )?;
        let cell = Cell {
            index: 1,
            collective: collective.clone(),
            nodes: setup.nodes,
            gpus_per_node: setup.gpus_per_node,
            variant: Variant {
                name: "default".into(),
                gpudirect: setup.mode.clone(),
                env: setup.step_env(&BTreeMap::new()),
            },
        };
        outln!(
            "    one run: {}",
            prepare(&cell, &matrix, &setup.launch, false)?
                .job
                .command_line()
        )?;
    }
    let budget = args.budget.as_secs_f64();
    if unknown {
        outln!(
            "phase 1: {total_runs} runs; time unknown without history (budget {}: no round starts that would end past it)",
            seconds_text(budget)
        )?;
    } else {
        outln!(
            "phase 1: {total_runs} runs, ~{} (budget {}{})",
            seconds_text(total_seconds),
            seconds_text(budget),
            if total_seconds > budget {
                ": it does NOT fit; raise --budget or try fewer knobs"
            } else {
                ""
            }
        )?;
    }
    Ok(ExitStatus::Ok)
}

/// Median seconds of the newest finished runs of this collective on this many nodes.
fn history_estimate(history: &History, collective: &str, nodes: u32) -> Option<f64> {
    let filter = RunFilter {
        collective: Some(collective.to_string()),
        status: Some(RunStatus::Ok),
        limit: Some(50),
        ..RunFilter::default()
    };
    history.median_seconds(&filter, nodes).ok()?
}

/// Tune judges busbw, which a world of one rank does not have (it moves nothing between
/// GPUs: busbw is 0 by definition): refused before anything runs, with what it needs.
fn one_rank_refused(setup: &Setup) -> Result<()> {
    // Every GPU is a rank, however many a process drives (`--gpus-per-process`).
    if setup.nodes * setup.gpus_per_node <= 1 {
        bail!(
            "tune compares busbw, and {} node(s) x {} GPU(s) make one rank, whose busbw is 0 \
             whatever the settings: give it 2 GPUs or more (--gpus 0,1, or -G 2), or 2 nodes",
            setup.nodes,
            setup.gpus_per_node
        );
    }
    Ok(())
}

/// The result, as JSON or as `tune::text::result_text`'s tables.
fn print_result(result: &TuneResult, json: bool) -> Result<()> {
    if json {
        emit_json(result)?;
    } else {
        emit(&result_text(result))?;
    }
    Ok(())
}
