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
//! - `gpus`: as many GPUs in `/proc/driver/nvidia/gpus` as Slurm's gres gives the node.
//!
//! A node set skips any of them with `skip_checks`. Output follows NHC: nothing but one
//! summary line when healthy (exit 0); one `ERROR: gpudirect: Health check failed: ...`
//! line per failed check, with the fix (exit 1); a check that cannot run at all (no config)
//! exits 3 and drains nothing. With `--drain`, a failure drains the node with a reason
//! tagged `gpudirect:` and a pass returns it to service only when it is drained with that
//! tag ([`gpudirect::drain`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use gpudirect::cell::{self, Evaluated};
use gpudirect::checks::Expectations;
use gpudirect::drain::{self, Drained, Resumed};
use gpudirect::history::{History, LaunchKind, RunStatus};
use gpudirect::launch::{env_var, prepare, LaunchOptions, Launcher};
use gpudirect::matrix::{Cell, Matrix, Variant};
use gpudirect::outln;
use gpudirect::output::emit_json;
use gpudirect::record::RunContext;
use gpudirect::runner::{self, INTERRUPTED};
use gpudirect::slurm;
use gpudirect::units::{human_size, now_unix, percent_arg, size_arg};
use gpudirect_core::config::{CheckKind, Mode, NicClass, NicLocality};
use gpudirect_core::locality::Locality;
use gpudirect_core::resolve::{plan_node_with_locality, resolve_profile, Resolved, StepFacts};
use gpudirect_core::system::{load_config, slurm_node_name, Ownership, SystemProbe};
use serde::Serialize;

use super::{Ctx, ExitStatus};

/// Arguments of `gpudirect health`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    gpudirect health                               # check this node; exit 0 healthy, 1 not\n  \
    gpudirect health --drain                       # and drain it (or return it) in Slurm\n  \
    gpudirect health --drain --retries 2 --on-drain '/usr/local/sbin/file-repair --zone z'\n\n\
    As Slurm's health check (slurm.conf; HealthCheckProgram takes no arguments, so a\n\
    two-line wrapper script calls this):\n  \
    HealthCheckProgram=/usr/local/sbin/gpudirect-health\n  \
    HealthCheckInterval=300\n  \
    HealthCheckNodeState=ANY\n\n\
    Output follows NHC: `ERROR: gpudirect: Health check failed: CHECK: PROBLEM (FIX)` per\n\
    failed check. Exit status: 0 healthy (or no profile applies here), 1 a check failed,\n\
    3 could not check (no config, bad options). --drain drains with the reason\n\
    `gpudirect: PROBLEM` and returns a passing node to service only when it carries that\n\
    tag: a drain with any other reason is an admin's, and is left alone.")]
pub struct HealthArgs {
    /// The admin config: --config, else $GPUDIRECT_CONFIG, else /etc/slurm/gpudirect.toml.
    #[arg(
        long,
        env = "GPUDIRECT_CONFIG",
        default_value = super::profiles::DEFAULT_CONFIG
    )]
    pub config: PathBuf,

    /// The Slurm node this is: default $SLURMD_NODENAME, else the host name.
    #[arg(long)]
    pub node: Option<String>,

    /// Check this profile instead of the node set's.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,

    /// Drain the node in Slurm when a check fails; return it to service when all pass and
    /// it is drained by gpudirect (never another drain).
    #[arg(long)]
    pub drain: bool,

    /// Check this many more times (a second apart) before calling a check failed: a
    /// flapping link drains nothing until it stays down.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retries: u32,

    /// With --drain: after draining, run this command (split on spaces, no shell) with a
    /// JSON file of the evidence as its last argument and in $GPUDIRECT_EVIDENCE, e.g. to
    /// file a repair request with the cloud (docs/admin-guide.md).
    #[arg(long, value_name = "CMD", requires = "drain")]
    pub on_drain: Option<String>,

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
    /// judge its busbw against the history's single-node runs of this cluster: a node
    /// more than --tolerance below their median fails check `nccl`. Every run is recorded.
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

    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How long the quick all_reduce may run.
const QUICK_NCCL_TIMEOUT: Duration = Duration::from_secs(120);

/// Earlier single-node runs the quick test's baseline is the median of.
const QUICK_NCCL_BASELINE_RUNS: u32 = 10;

/// `nccl` (`--quick-nccl`): what the run found, against the baseline (`None`: no earlier
/// run of its kind). Over one GPU an all_reduce has no peer and its busbw is 0 by
/// definition, so only a failed run fails there (found on the one-GPU bed: every run was
/// "0.00 GB/s" against a median of 0.00). Pure.
pub fn nccl_failure(
    gpus: u32,
    size: &str,
    busbw: Option<f64>,
    run_problems: &[String],
    baseline: Option<(f64, usize)>,
    tolerance_pct: f64,
) -> Option<Failed> {
    let check = "nccl";
    if !run_problems.is_empty() {
        return Some(Failed {
            check,
            problem: format!("all_reduce over {gpus} GPUs failed: {}", run_problems.join("; ")),
            fix: "run it by hand with NCCL_DEBUG=INFO and read the first error; `nvidia-smi` for a lost GPU".into(),
        });
    }
    if gpus <= 1 {
        return None;
    }
    let Some(busbw) = busbw else {
        return Some(Failed {
            check,
            problem: format!("all_reduce over {gpus} GPUs printed no busbw at {size}"),
            fix: "check the nccl-tests build and the --nccl-tests-dir".into(),
        });
    };
    let (median, runs) = baseline?;
    (busbw < median * (1.0 - tolerance_pct / 100.0)).then(|| Failed {
        check,
        problem: format!(
            "all_reduce over {gpus} GPUs: {busbw:.2} GB/s at {size}, {:.0}% of the median of {runs} earlier runs ({median:.2})",
            busbw / median * 100.0
        ),
        fix: "a slow GPU or NVLink: `nvidia-smi topo -m`, `nvidia-smi -q -d CLOCK,PERFORMANCE`, and the kernel log for Xid errors".into(),
    })
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failed {
    /// The check's name (`nics`, `nic_speed`, `gpus`, ...).
    pub check: &'static str,
    /// What was found.
    pub problem: String,
    /// What to do.
    pub fix: String,
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

/// `nic_speed` for one data NIC: `speed` is what sysfs says (Mbit/s for a netdev, the RDMA
/// port's `rate` text such as `400 Gb/sec (4X NDR)`). Pure.
pub fn speed_failure(
    nic: &str,
    class: NicClass,
    declared_gbit: u32,
    speed: Option<&str>,
) -> Option<Failed> {
    let gbit = speed.and_then(|text| {
        let text = text.trim();
        match class {
            // Mbit/s; -1 (or nothing) when the link is down or unknown.
            NicClass::Net => text
                .parse::<i64>()
                .ok()
                .filter(|m| *m > 0)
                .map(|m| m as f64 / 1000.0),
            NicClass::Infiniband => text.split_whitespace().next()?.parse::<f64>().ok(),
        }
    });
    match gbit {
        Some(g) if g + 1e-9 >= f64::from(declared_gbit) => None,
        Some(g) => Some(Failed {
            check: CheckKind::NicSpeed.name(),
            problem: format!("{nic} at {g} Gbit/s, the profile declares {declared_gbit}"),
            fix: format!(
                "check the cable and the link partner (`ethtool {nic}`), or fix line_rate_gbit"
            ),
        }),
        None => Some(Failed {
            check: CheckKind::NicSpeed.name(),
            problem: format!("{nic} reports no link speed"),
            fix: format!("check that the link is up (`ethtool {nic}`)"),
        }),
    }
}

/// `gpus`: the driver's GPUs against Slurm's gres count. Pure.
pub fn gpu_failure(expected: u32, seen: Option<u32>) -> Option<Failed> {
    match seen {
        Some(n) if n >= expected => None,
        Some(n) => Some(Failed {
            check: CheckKind::Gpus.name(),
            problem: format!("{n} of {expected} GPUs seen by the NVIDIA driver"),
            fix: "a GPU fell off the bus: check `nvidia-smi` and the kernel log (Xid), then reboot or repair the node".into(),
        }),
        None => Some(Failed {
            check: CheckKind::Gpus.name(),
            problem: format!("no NVIDIA driver (Slurm gives the node {expected} GPUs)"),
            fix: "load the driver (`nvidia-smi`), or skip_checks = [\"gpus\"] for nodes without one".into(),
        }),
    }
}

/// Reads a NIC's speed from sysfs.
fn read_speed(sysfs: &Path, nic: &str, class: NicClass) -> Option<String> {
    let path = match class {
        NicClass::Net => sysfs.join("class/net").join(nic).join("speed"),
        NicClass::Infiniband => sysfs
            .join("class/infiniband")
            .join(nic)
            .join("ports/1/rate"),
    };
    std::fs::read_to_string(path).ok()
}

/// The GPUs the NVIDIA driver lists (one directory per GPU); `None` without the driver.
fn driver_gpus(dir: &Path) -> Option<u32> {
    let entries = std::fs::read_dir(dir).ok()?;
    u32::try_from(entries.filter_map(|e| e.ok()).count()).ok()
}

/// What the checks use besides the node's files, read once however often they run: the
/// node set's skips, the PCIe locality, and the GPUs Slurm gives the node (`None` when the
/// `gpus` check is skipped, the node has no GPU gres, or Slurm could not say: a note then
/// says why).
struct NodeFacts<'c> {
    resolved: Resolved<'c>,
    skipped_by_set: Vec<CheckKind>,
    locality: Option<Locality>,
    slurm_gpus: Option<u32>,
}

impl<'c> NodeFacts<'c> {
    fn read(
        args: &HealthArgs,
        resolved: Resolved<'c>,
        node: &str,
        notes: &mut Vec<String>,
    ) -> Self {
        let skipped_by_set: Vec<CheckKind> = resolved
            .node_set
            .map(|s| s.skip_checks.clone())
            .unwrap_or_default();
        let locality = match resolved.profile.nic_locality {
            NicLocality::Sysfs => Locality::read(&args.sysfs).ok(),
            NicLocality::Config => None,
        };
        let slurm_gpus = if skipped_by_set.contains(&CheckKind::Gpus) {
            None
        } else {
            match slurm::node_state(node) {
                Ok(state) => state.gpus,
                Err(e) => {
                    notes.push(format!(
                        "gpus: not checked, Slurm did not say the node's gres: {}",
                        e.to_string()
                            .lines()
                            .map(str::trim)
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                    None
                }
            }
        };
        NodeFacts {
            resolved,
            skipped_by_set,
            locality,
            slurm_gpus,
        }
    }
}

/// One pass of every check. Returns the failures, the checks run and the checks skipped.
fn check_once(
    args: &HealthArgs,
    facts: &NodeFacts<'_>,
    node: &str,
) -> (Vec<Failed>, Vec<&'static str>, Vec<&'static str>) {
    let profile = facts.resolved.profile;
    let step = StepFacts {
        node: node.to_string(),
        nnodes: 1,
        local_size: 1,
        ..StepFacts::default()
    };
    let plan = plan_node_with_locality(
        facts.resolved,
        step,
        &SystemProbe::default(),
        facts.locality.as_ref(),
    );
    let mut failures: Vec<Failed> = plan
        .failures
        .iter()
        // The receive daemon runs per job: the prolog makes it, no health check can.
        .filter(|f| f.kind != CheckKind::RxdmSocketDir)
        .map(|f| Failed {
            check: f.kind.name(),
            problem: f.problem.clone(),
            fix: f.fix.clone(),
        })
        .collect();
    let mut checked: Vec<&'static str> = profile
        .checks
        .required()
        .into_iter()
        .filter(|k| *k != CheckKind::RxdmSocketDir && !plan.skipped.contains(k))
        .map(CheckKind::name)
        .collect();
    checked.push(CheckKind::Ownership.name());
    let mut skipped: Vec<&'static str> = facts.skipped_by_set.iter().map(|k| k.name()).collect();

    if !profile.line_rate_gbit.is_empty() && !facts.skipped_by_set.contains(&CheckKind::NicSpeed) {
        checked.push(CheckKind::NicSpeed.name());
        for (logical, gbit) in &profile.line_rate_gbit {
            let real = plan.real_nic(logical);
            let speed = read_speed(&args.sysfs, real, profile.data_nic_class);
            failures.extend(speed_failure(
                real,
                profile.data_nic_class,
                *gbit,
                speed.as_deref(),
            ));
        }
    }
    if let Some(expected) = facts.slurm_gpus {
        checked.push(CheckKind::Gpus.name());
        failures.extend(gpu_failure(expected, driver_gpus(&args.nvidia_gpus)));
    }
    skipped.sort_unstable();
    skipped.dedup();
    (failures, checked, skipped)
}

/// `gpudirect health`.
pub fn run(args: &HealthArgs, ctx: &Ctx) -> Result<ExitStatus> {
    let start = Instant::now();
    let node = node_name(args);
    // The config loader wants an absolute path (what slurm.conf names); by hand a
    // relative one is as good.
    let config_path = std::path::absolute(&args.config)
        .with_context(|| format!("--config {}", args.config.display()))?;
    let config = load_config(&config_path, Ownership::Any)
        .with_context(|| format!("gpudirect health: cannot check {node}"))?;
    let mode = match &args.profile {
        Some(name) => config
            .parse_mode(name)
            .map_err(|e| anyhow::anyhow!("--profile: {e}"))?,
        None => Mode::Auto,
    };
    let resolved = match resolve_profile(&config, &node, &mode) {
        Ok(r) => r,
        // No node set or no profile for this node: nothing of ours to check.
        Err(e) => {
            outln!("gpudirect health: {node}: nothing to check ({e})")?;
            return Ok(ExitStatus::Ok);
        }
    };
    let Some(resolved) = resolved else {
        outln!("gpudirect health: {node}: mode none, nothing to check")?;
        return Ok(ExitStatus::Ok);
    };
    let profile = resolved.profile;
    let mut notes = Vec::new();
    let facts = NodeFacts::read(args, resolved, &node, &mut notes);
    let mut attempts = 0;
    let (mut failures, mut checked, skipped) = loop {
        attempts += 1;
        let result = check_once(args, &facts, &node);
        if result.0.is_empty() || attempts > args.retries {
            break result;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    if args.quick_nccl && failures.is_empty() {
        // Only on an otherwise healthy node: a missing NIC or GPU already says enough.
        checked.push("nccl");
        match quick_nccl(args, &node, facts.slurm_gpus, &profile.library_dirs, ctx) {
            Ok((failure, note)) => {
                failures.extend(failure);
                notes.push(note);
            }
            Err(e) => failures.push(Failed {
                check: "nccl",
                problem: format!("could not run the all_reduce: {e:#}"),
                fix: "check --nccl-tests-dir and the GPUs".into(),
            }),
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
        elapsed_ms: 0,
    };
    if args.drain {
        report.slurm = Some(act_in_slurm(args, &report, ctx));
    }
    report.elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    if args.json {
        emit_json(&report)?;
    } else {
        print_text(&report)?;
    }
    Ok(if report.failures.is_empty() {
        ExitStatus::Ok
    } else {
        ExitStatus::Problem
    })
}

/// `--quick-nccl`: one all_reduce over the node's GPUs, recorded, and judged against the
/// median of up to [`QUICK_NCCL_BASELINE_RUNS`] earlier ok single-node runs of this
/// cluster at the same size (measured before this one is recorded). Returns the failure,
/// if any, and a note saying what was measured. The test finds NCCL where the node's jobs
/// do: the profile's `library_dirs` go first on its `LD_LIBRARY_PATH`, as the plugin puts
/// them (slurmd gives a health check no library path of its own).
fn quick_nccl(
    args: &HealthArgs,
    node: &str,
    slurm_gpus: Option<u32>,
    library_dirs: &[String],
    ctx: &Ctx,
) -> Result<(Option<Failed>, String)> {
    let Some(dir) = args.nccl_tests_dir.clone() else {
        anyhow::bail!("--quick-nccl needs the nccl-tests binaries: pass --nccl-tests-dir DIR or set NCCL_TESTS_DIR");
    };
    let gpus = match args.gpus.or_else(|| driver_gpus(&args.nvidia_gpus)) {
        Some(n) if n > 0 => n,
        // The gres count the gpus check read, else (that check skipped) Slurm's answer now.
        _ => slurm_gpus
            .or_else(|| slurm::node_state(node).ok().and_then(|s| s.gpus))
            .context(
            "no GPUs to test: the driver lists none and Slurm gives the node none; pass --gpus N",
        )?,
    };
    let cluster = args
        .cluster
        .clone()
        .or_else(|| env_var("SLURM_CLUSTER_NAME"));
    let collective = "all_reduce".to_string();
    let mut env = std::collections::BTreeMap::new();
    if !library_dirs.is_empty() {
        let mut path = library_dirs.join(":");
        if let Some(old) = env_var("LD_LIBRARY_PATH") {
            path = format!("{path}:{old}");
        }
        env.insert("LD_LIBRARY_PATH".to_string(), path);
    }
    let variant = Variant {
        name: "health".into(),
        gpudirect: None,
        env,
    };
    let matrix = Matrix {
        collectives: vec![collective.clone()],
        nodes: vec![1],
        gpus_per_node: vec![gpus],
        min_bytes: args.min_bytes,
        max_bytes: args.max_bytes,
        factor: 2,
        timeout: QUICK_NCCL_TIMEOUT,
        extra_args: Vec::new(),
        variants: vec![variant.clone()],
    };
    let cell = Cell {
        index: 1,
        collective: collective.clone(),
        nodes: 1,
        gpus_per_node: gpus,
        variant,
    };
    let work = tempfile::Builder::new()
        .prefix("gpudirect-health-")
        .tempdir()
        .context("cannot create a folder for the -J report")?;
    let opts = LaunchOptions {
        launcher: Launcher::Local,
        nccl_tests_dir: dir,
        mpi: None,
        nodes: Vec::new(),
        work_dir: Some(work.path().to_path_buf()),
        timeout: QUICK_NCCL_TIMEOUT,
        grace: Duration::from_secs(5),
        // SAFETY: geteuid has no preconditions.
        as_root: nix::unistd::geteuid().is_root(),
        gpus_per_process: gpus,
        exact: false,
    };
    let prepared = prepare(&cell, &matrix, &opts, true)?;
    let started = now_unix();
    let finished = runner::run(&prepared.job, &INTERRUPTED)?;
    let context = RunContext {
        started_at: Some(started),
        finished_at: Some(now_unix()),
        cluster: cluster.clone(),
        nodes: vec![node.to_string()],
        gpus_per_node: Some(gpus),
        launcher: LaunchKind::Local,
        command_line: Some(prepared.job.command_line()),
        binary_path: Some(prepared.binary.display().to_string()),
        variant: Some("health".into()),
        ..RunContext::default()
    };
    let expect = Expectations {
        transport: None,
        nodes: 1,
        sizes: vec![args.max_bytes],
        nics: Vec::new(),
    };
    let Evaluated {
        parsed,
        verdict,
        record,
    } = cell::evaluate_finished(
        &finished,
        prepared.json_path.as_deref(),
        &collective,
        expect,
        context,
    );
    let mut history = History::open(&ctx.db_path()?)?;
    let baseline = history.baseline(
        cluster.as_deref(),
        &collective,
        1,
        args.max_bytes,
        QUICK_NCCL_BASELINE_RUNS,
    )?;
    let id = history.import_run(&record, true)?.run_id();
    let busbw = parsed
        .rows
        .iter()
        .rev()
        .find(|r| r.size_bytes == args.max_bytes)
        .and_then(|r| r.out_of_place.as_ref()?.busbw_gbps);
    let problems: Vec<String> = if verdict.status == RunStatus::Ok {
        Vec::new()
    } else {
        verdict.findings.iter().map(|f| f.message.clone()).collect()
    };
    let size = human_size(args.max_bytes);
    let reference = baseline.as_ref().map(|b| (b.median_busbw, b.samples.len()));
    let failure = nccl_failure(gpus, &size, busbw, &problems, reference, args.tolerance);
    let note = match (busbw, reference) {
        _ if gpus <= 1 && problems.is_empty() => format!(
            "nccl: all_reduce over 1 GPU ran (run {id}); one GPU has no peer, so its busbw is 0 by definition and no speed is judged: run on a node with 2 or more GPUs (or pass --gpus N) to measure it"
        ),
        (Some(b), Some((median, runs))) => format!(
            "nccl: all_reduce over {gpus} GPUs {b:.2} GB/s at {size}, median of {runs} earlier runs {median:.2} (run {id})"
        ),
        (Some(b), None) => format!(
            "nccl: all_reduce over {gpus} GPUs {b:.2} GB/s at {size}; no earlier run to judge it by, it starts the baseline (run {id})"
        ),
        (None, _) => format!("nccl: no busbw at {size} (run {id})"),
    };
    Ok((failure, note))
}

/// What `--on-drain` gets: this check's report, the tool, the time, and the node's last
/// runs in the history (busbw and status of each), when there is a history.
fn evidence(report: &Health, ctx: &Ctx) -> serde_json::Value {
    let runs = ctx
        .open_history()
        .ok()
        .and_then(|h| h.node_history(&report.node, None, None).ok())
        .map(|h| {
            let skip = h.runs.len().saturating_sub(EVIDENCE_RUNS);
            h.runs.into_iter().skip(skip).collect::<Vec<_>>()
        })
        .unwrap_or_default();
    serde_json::json!({
        "tool": "gpudirect health",
        "at": gpudirect::units::format_rfc3339(now_unix()),
        "node": report.node,
        "reason": report.failures.first().map(|f| drain::drain_reason(&f.problem)),
        "profile": report.profile,
        "failures": report.failures,
        "checked": report.checked,
        "history": runs,
    })
}

/// The node's most recent runs an `--on-drain` evidence file lists.
const EVIDENCE_RUNS: usize = 10;

/// `--drain`: drain on a failure (then `--on-drain`), return our own drain on a pass.
fn act_in_slurm(args: &HealthArgs, report: &Health, ctx: &Ctx) -> SlurmAction {
    let outcome = match report.failures.first() {
        Some(first) => {
            let reason = drain::drain_reason(&first.problem);
            drain::drain_confirmed(&report.node, &reason).map(|drained| {
                let evidence = match (&drained, &args.on_drain) {
                    (Drained::Drained { .. }, Some(command)) => {
                        match drain::run_on_drain(command, &evidence(report, ctx)) {
                            Ok(path) => Some(path),
                            Err(e) => {
                                eprintln!("gpudirect health: {e:#}");
                                None
                            }
                        }
                    }
                    _ => None,
                };
                SlurmAction::Drain { drained, evidence }
            })
        }
        None => drain::resume_if_ours(&report.node).map(|resumed| SlurmAction::Resume { resumed }),
    };
    outcome.unwrap_or_else(|e| SlurmAction::Error {
        message: format!("{e:#}"),
    })
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
    if report.failures.is_empty() {
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
                    "{} is drained by an admin ({}): left as it is",
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
                "gpudirect health: {} stays drained: an admin's drain ({})",
                report.node,
                reason.as_deref().unwrap_or("no reason")
            )?,
            Resumed::NotDrained => {}
        },
        Some(SlurmAction::Error { message }) => {
            outln!("gpudirect health: could not drain or resume in Slurm: {message}")?
        }
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_below_the_line_rate_fail_and_name_the_nic() {
        assert_eq!(
            speed_failure("eth1", NicClass::Net, 200, Some("200000\n")),
            None
        );
        let slow = speed_failure("eth3", NicClass::Net, 200, Some("100000")).unwrap();
        assert_eq!(slow.check, "nic_speed");
        assert_eq!(slow.problem, "eth3 at 100 Gbit/s, the profile declares 200");
        let down = speed_failure("eth3", NicClass::Net, 200, Some("-1")).unwrap();
        assert!(down.problem.contains("no link speed"), "{}", down.problem);
        assert!(speed_failure("eth3", NicClass::Net, 10, None).is_some());
        assert_eq!(
            speed_failure(
                "mlx5_0",
                NicClass::Infiniband,
                400,
                Some("400 Gb/sec (4X NDR)")
            ),
            None
        );
        let ib = speed_failure(
            "mlx5_0",
            NicClass::Infiniband,
            400,
            Some("200 Gb/sec (4X HDR)"),
        );
        assert!(ib.unwrap().problem.starts_with("mlx5_0 at 200 Gbit/s"));
    }

    #[test]
    fn the_quick_all_reduce_fails_only_below_the_tolerance() {
        let base = Some((345.0, 5));
        assert_eq!(nccl_failure(8, "1 GiB", Some(320.0), &[], base, 10.0), None);
        let slow = nccl_failure(8, "1 GiB", Some(160.0), &[], base, 10.0).unwrap();
        assert_eq!(
            slow.problem,
            "all_reduce over 8 GPUs: 160.00 GB/s at 1 GiB, 46% of the median of 5 earlier runs (345.00)"
        );
        // No baseline: nothing to judge by, not a failure.
        assert_eq!(nccl_failure(8, "1 GiB", Some(1.0), &[], None, 10.0), None);
        let failed = nccl_failure(8, "1 GiB", None, &["exit code 3".into()], base, 10.0);
        assert!(failed.unwrap().problem.contains("failed: exit code 3"));
        assert!(nccl_failure(8, "1 GiB", None, &[], base, 10.0).is_some());
        // One GPU: busbw is 0 by definition; a run that went through is no failure, whatever
        // the baseline, and one that failed still is.
        assert_eq!(nccl_failure(1, "1 GiB", Some(0.0), &[], base, 10.0), None);
        assert_eq!(nccl_failure(1, "1 GiB", None, &[], base, 10.0), None);
        assert!(nccl_failure(1, "1 GiB", None, &["exit code 3".into()], None, 10.0).is_some());
    }

    #[test]
    fn missing_gpus_fail_with_the_count() {
        assert_eq!(gpu_failure(8, Some(8)), None);
        assert_eq!(
            gpu_failure(8, Some(7)).unwrap().problem,
            "7 of 8 GPUs seen by the NVIDIA driver"
        );
        assert!(gpu_failure(8, None).unwrap().fix.contains("skip_checks"));
    }
}
