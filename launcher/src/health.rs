//! The node checks of `gpudirect health` that are functions of what was read: a NIC's
//! speed against the profile's line rate, the driver's GPUs against Slurm's gres, and the
//! quick all_reduce against the history's median. Each gives a [`Failed`] that says what
//! was found and what to do. [`check_once`] runs every check of a profile on this node
//! ([`NodeFacts`] read once, sysfs and the driver's GPUs read at each pass, from
//! [`Paths`]); `commands/health.rs` retries, runs the quick all_reduce, drains and prints.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpudirect_core::config::{CheckKind, NicClass, NicLocality};
use gpudirect_core::locality::Locality;
use gpudirect_core::resolve::{plan_node_with_locality, Resolved, StepFacts};
use gpudirect_core::system::SystemProbe;

use crate::baseline::Key;
use crate::cell::exec::{self, CellError, Spec};
use crate::cell::Evaluated;
use crate::checks::Expectations;
use crate::history::{History, LaunchKind, RunStatus};
use crate::launch::{LaunchOptions, Launcher};
use crate::matrix::{Cell, Matrix, Variant};
use crate::record::RunContext;
use crate::units::human_size;
use serde::Serialize;

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

/// `nccl` (`--quick-nccl`): what the run found, against the baseline (`None`: no earlier
/// run of its kind). Pure.
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
    // Over one GPU an all_reduce has no peer and its busbw is 0 by definition (found on
    // the one-GPU bed: every run was "0.00 GB/s" against a median of 0.00).
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

/// Where the checks read the machine (tests point both at copies).
#[derive(Debug, Clone)]
pub struct Paths {
    /// sysfs (`/sys`).
    pub sysfs: PathBuf,
    /// Where the NVIDIA driver lists its GPUs (`/proc/driver/nvidia/gpus`).
    pub nvidia_gpus: PathBuf,
}

/// Reads a NIC's speed from sysfs.
pub fn read_speed(sysfs: &Path, nic: &str, class: NicClass) -> Option<String> {
    let path = match class {
        NicClass::Net => sysfs.join("class/net").join(nic).join("speed"),
        NicClass::Infiniband => sysfs
            .join("class/infiniband")
            .join(nic)
            .join("ports/1/rate"),
    };
    std::fs::read_to_string(path).ok()
}

/// How many GPUs the NVIDIA driver lists in `dir` ([`gpudirect_core::derive::driver_gpus`]);
/// `None` without the driver.
pub fn driver_gpu_count(dir: &Path) -> Option<u32> {
    u32::try_from(gpudirect_core::derive::driver_gpus(dir)?.len()).ok()
}

/// What the checks use besides the node's files, read once however often they run: the
/// node set's skips, the PCIe locality, and the GPUs Slurm gives the node (`None` when the
/// `gpus` check is skipped, the node has no GPU gres, or Slurm could not say:
/// `gres_unknown` then says why).
pub struct NodeFacts<'c> {
    /// The profile and node set that apply.
    pub resolved: Resolved<'c>,
    /// The checks the node set skips.
    pub skipped_by_set: Vec<CheckKind>,
    /// The PCIe locality (`nic_locality = "sysfs"`).
    pub locality: Option<Locality>,
    /// The GPUs Slurm gives the node.
    pub slurm_gpus: Option<u32>,
    /// Why the `gpus` check could not run, when Slurm could not be asked (no scontrol on
    /// PATH, no answer): the check is then "could not check", exit 3, never a pass
    /// (security review S10).
    pub gres_unknown: Option<String>,
}

impl<'c> NodeFacts<'c> {
    /// Reads them: the locality from `where_.sysfs`, the gres from Slurm (`gres_unknown`
    /// says why when Slurm could not).
    pub fn read(where_: &Paths, resolved: Resolved<'c>, node: &str) -> Self {
        let skipped_by_set: Vec<CheckKind> = resolved
            .node_set
            .map(|s| s.skip_checks.clone())
            .unwrap_or_default();
        let locality = match resolved.profile.nic_locality {
            NicLocality::Sysfs => Locality::read(&where_.sysfs).ok(),
            NicLocality::Config => None,
        };
        let mut gres_unknown = None;
        let slurm_gpus = if skipped_by_set.contains(&CheckKind::Gpus) {
            None
        } else {
            match crate::slurm::node_state(node) {
                Ok(state) => state.gpus,
                Err(e) => {
                    let why = format!(
                        "gpus: Slurm did not say the node's gres ({}); give the check a PATH with scontrol and SLURM_CONF (the wrapper), or skip it (skip_checks = [\"gpus\"])",
                        e.to_string()
                            .lines()
                            .map(str::trim)
                            .collect::<Vec<_>>()
                            .join("; ")
                    );
                    gres_unknown = Some(why);
                    None
                }
            }
        };
        NodeFacts {
            resolved,
            skipped_by_set,
            locality,
            slurm_gpus,
            gres_unknown,
        }
    }
}

impl NodeFacts<'_> {
    /// The profile's data NICs by their real names on this node (the node set's
    /// `nic_names`), as the checks read them.
    pub fn real_data_nics(&self) -> Vec<String> {
        let names = self.resolved.node_set.map(|s| &s.nic_names);
        self.resolved
            .profile
            .data_nics
            .iter()
            .map(|logical| {
                names
                    .and_then(|n| n.get(logical))
                    .unwrap_or(logical)
                    .clone()
            })
            .collect()
    }
}

/// One pass of every check. Returns the failures, the checks run and the checks skipped.
pub fn check_once(
    where_: &Paths,
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
            let speed = read_speed(&where_.sysfs, real, profile.data_nic_class);
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
        failures.extend(gpu_failure(expected, driver_gpu_count(&where_.nvidia_gpus)));
    }
    skipped.sort_unstable();
    skipped.dedup();
    (failures, checked, skipped)
}

/// The variant the quick test's runs are recorded (and their baseline found) under.
pub const HEALTH_VARIANT: &str = "health";

/// How long the quick all_reduce may run at most (within `health --deadline`).
pub const QUICK_NCCL_TIMEOUT: Duration = Duration::from_secs(120);

/// `health --deadline` by default: the whole check, its all_reduce, its scontrol calls and
/// `--on-drain` included, ends within it, inside slurmd's 60 s kill of a health check (S2).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(50);

/// Earlier single-node runs the quick test's baseline is the median of.
pub const QUICK_NCCL_BASELINE_RUNS: u32 = 10;

/// What the quick all_reduce of `health --quick-nccl` needs.
#[derive(Debug, Clone)]
pub struct QuickNccl {
    /// The folder with all_reduce_perf.
    pub nccl_tests_dir: PathBuf,
    /// This node.
    pub node: String,
    /// GPUs to run over.
    pub gpus: u32,
    /// The profile's `library_dirs`: first on the run's `LD_LIBRARY_PATH`, as the plugin
    /// puts them (slurmd gives a health check no library path of its own).
    pub library_dirs: Vec<String>,
    /// Smallest size.
    pub min_bytes: u64,
    /// Largest size, the one judged.
    pub max_bytes: u64,
    /// How far below the baseline still passes, percent.
    pub tolerance_pct: f64,
    /// `--cluster` (else `$SLURM_CLUSTER_NAME`).
    pub cluster: Option<String>,
    /// The history file.
    pub db: PathBuf,
    /// As root: the rule every program and library folder it runs, and the history it
    /// judges by, must pass (root alone can change them, security review S1 and S6);
    /// `None` runs what it finds.
    pub trust: Option<SystemProbe>,
    /// The all_reduce's time limit (capped by `health --deadline`).
    pub timeout: Duration,
}

/// Why the quick all_reduce could not run or be recorded.
#[derive(Debug, thiserror::Error)]
pub enum QuickNcclError {
    /// No folder for the `-J` report.
    #[error("cannot create a folder for the -J report: {0}")]
    WorkDir(std::io::Error),
    /// As root, a program or library it would run is not root's alone.
    #[error("refusing to run it as root: {0} (make it and every folder above it root's, not writable by group or others)")]
    Untrusted(String),
    /// The run could not be built, started or recorded.
    #[error(transparent)]
    Cell(#[from] CellError),
}

/// `--quick-nccl`: one all_reduce over the node's GPUs, recorded, and judged against the
/// median of up to [`QUICK_NCCL_BASELINE_RUNS`] earlier quick tests of its kind
/// (`baseline::Key`: variant `health`, one node, as many GPUs), measured before this one
/// is recorded. Returns the failure, if any, and a note saying what was measured.
pub fn quick_nccl(q: &QuickNccl) -> Result<(Option<Failed>, String), QuickNcclError> {
    if let Some(probe) = &q.trust {
        let bin =
            crate::launch::find_binary(&q.nccl_tests_dir, "all_reduce").map_err(CellError::from)?;
        let preload = crate::slurm::env_var("LD_PRELOAD");
        let library_path = crate::slurm::env_var("LD_LIBRARY_PATH");
        if let Some(problem) = untrusted_to_run(
            probe,
            &bin,
            q.library_dirs
                .iter()
                .map(String::as_str)
                .chain(library_path.as_deref().unwrap_or_default().split(':')),
            preload.as_deref().unwrap_or_default(),
        ) {
            return Err(QuickNcclError::Untrusted(problem));
        }
    }
    let gpus = q.gpus;
    let library_dirs = &q.library_dirs;
    let run_context = RunContext {
        nodes: vec![q.node.clone()],
        gpus_per_node: Some(gpus),
        launcher: LaunchKind::Local,
        tool: crate::history::Tool::Health,
        ..RunContext::for_job(q.cluster.as_deref())
    };
    let cluster = run_context.cluster.clone();
    let collective = "all_reduce".to_string();
    let mut env = std::collections::BTreeMap::new();
    if !library_dirs.is_empty() {
        let mut path = library_dirs.join(":");
        if let Some(old) = crate::slurm::env_var("LD_LIBRARY_PATH") {
            path = format!("{path}:{old}");
        }
        env.insert("LD_LIBRARY_PATH".to_string(), path);
    }
    let variant = Variant {
        name: HEALTH_VARIANT.into(),
        gpudirect: None,
        env,
    };
    let matrix = Matrix {
        collectives: vec![collective.clone()],
        nodes: vec![1],
        gpus_per_node: vec![gpus],
        min_bytes: q.min_bytes,
        max_bytes: q.max_bytes,
        factor: 2,
        timeout: q.timeout,
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
    // Opened before the all_reduce runs, so that a history it cannot use costs no GPU
    // time. As root (q.trust), the history must be root's alone and the baseline root's own
    // runs: another writer of a shared file could otherwise drain every node with a few
    // forged fast runs, or keep a slow one in service with slow ones (S6).
    let mut history = match &q.trust {
        Some(probe) => History::open_trusted(&q.db, probe),
        None => History::open(&q.db),
    }
    .map_err(CellError::from)?;
    let recorded_by = q.trust.is_some().then(|| nix::unistd::geteuid().as_raw());
    let work = tempfile::Builder::new()
        .prefix("gpudirect-health-")
        .tempdir()
        .map_err(QuickNcclError::WorkDir)?;
    let opts = LaunchOptions {
        launcher: Launcher::Local,
        nccl_tests_dir: q.nccl_tests_dir.clone(),
        mpi: None,
        nodes: Vec::new(),
        work_dir: Some(work.path().to_path_buf()),
        timeout: q.timeout,
        grace: Duration::from_secs(5),
        // SAFETY: geteuid has no preconditions.
        as_root: nix::unistd::geteuid().is_root(),
        gpus_per_process: gpus,
        exact: false,
        // The quick all_reduce is one local process: no launch to hang before NCCL.
        startup_timeout: None,
    };
    let expect = Expectations {
        transport: None,
        nodes: 1,
        sizes: vec![q.max_bytes],
        nics: Vec::new(),
        pasted: false,
    };
    let executed = exec::prepare(Spec {
        cell: &cell,
        matrix: &matrix,
        launch: &opts,
        json_report: true,
        expect,
        context: run_context,
        marks: Default::default(),
    })
    .map_err(CellError::from)?
    .execute()
    .map_err(CellError::from)?;
    // Earlier quick tests of this node's kind: one node, as many GPUs, variant `health`.
    let key = Key {
        collective: collective.clone(),
        cluster,
        node_count: Some(1),
        total_ranks: Some(gpus),
        variant: Some(HEALTH_VARIANT.into()),
    };
    let baseline = history
        .baseline_recorded_by(&key, q.max_bytes, QUICK_NCCL_BASELINE_RUNS, recorded_by)
        .map_err(CellError::from)?;
    let id = executed.record(&mut history).map_err(CellError::from)?;
    let Evaluated {
        parsed, verdict, ..
    } = executed.evaluated;
    // The busbw of a run, by the one rule every command uses (out-of-place at its largest
    // size, in-place where it has none).
    let busbw = parsed.busbw_at_max_size();
    let problems: Vec<String> = if verdict.status == RunStatus::Ok {
        Vec::new()
    } else {
        verdict.findings.iter().map(|f| f.message.clone()).collect()
    };
    let size = human_size(q.max_bytes);
    let reference = baseline.as_ref().map(|b| (b.median_busbw, b.samples.len()));
    let failure = nccl_failure(gpus, &size, busbw, &problems, reference, q.tolerance_pct);
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

/// What is wrong, if anything, with running `bin` as root with the library folders
/// `library_dirs` (empty entries skipped) and the files of `preload` (`LD_PRELOAD`, split
/// on `:` and spaces): each must be root's alone, and every folder above it (S1). Each must
/// exist too: a library folder or preload file not there yet is one whoever can create it
/// fills between this check and the loader's search (security review T5).
pub fn untrusted_to_run<'a>(
    probe: &impl gpudirect_core::resolve::NodeProbe,
    bin: &std::path::Path,
    library_dirs: impl IntoIterator<Item = &'a str>,
    preload: &str,
) -> Option<String> {
    use gpudirect_core::resolve::PathKind;
    let bin_text = bin.display().to_string();
    if !bin.is_file() {
        return Some(format!("{bin_text} is not a file"));
    }
    if let Some(p) = probe.untrusted(&bin_text, PathKind::File) {
        return Some(p);
    }
    for dir in library_dirs.into_iter().filter(|d| !d.is_empty()) {
        if !std::path::Path::new(dir).is_absolute() {
            return Some(format!(
                "the library folder {dir:?} is not an absolute path"
            ));
        }
        if !std::path::Path::new(dir).is_dir() {
            return Some(format!(
                "the library folder {dir} does not exist (or is not a folder), and whoever creates it before the loader looks decides what it loads: take it off LD_LIBRARY_PATH or the profile's library_dirs, or create it"
            ));
        }
        if let Some(p) = probe.untrusted(dir, PathKind::Directory) {
            return Some(p);
        }
    }
    for file in preload.split([':', ' ']).filter(|f| !f.is_empty()) {
        if !std::path::Path::new(file).is_absolute() {
            return Some(format!("LD_PRELOAD names {file:?}, not an absolute path"));
        }
        if !std::path::Path::new(file).is_file() {
            return Some(format!(
                "LD_PRELOAD names {file}, which is not there (or not a file), and whoever creates it before the loader looks decides what it loads: take it off LD_PRELOAD"
            ));
        }
        if let Some(p) = probe.untrusted(file, PathKind::File) {
            return Some(p);
        }
    }
    None
}

/// Whether the quick all_reduce may run on a node in Slurm state `states`: only on an idle
/// one, since it takes the GPUs from outside every job (security review S2). `None` (no
/// answer from Slurm: run by hand off a cluster) lets it run. Pure.
pub fn quick_nccl_allowed(states: Option<&[String]>) -> Result<(), String> {
    let Some(states) = states else { return Ok(()) };
    let busy = states
        .iter()
        .find(|s| matches!(s.as_str(), "ALLOCATED" | "MIXED" | "COMPLETING"));
    match busy {
        Some(s) => Err(format!(
            "nccl: not run: the node is {s} (jobs hold it); the quick all_reduce runs only on an idle node"
        )),
        None => Ok(()),
    }
}

/// What Slurm answered when asked for the node's state, for [`quick_nccl_may_run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdleAnswer {
    /// The node's states (`IDLE`, `MIXED+DRAIN` split).
    States(Vec<String>),
    /// No `scontrol` to ask: no Slurm on this machine.
    NoSlurm,
    /// Slurm was asked and did not answer (no configuration, slurmctld down or slow).
    Unanswered(String),
}

/// Why the quick all_reduce does not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotRun {
    /// What to print.
    pub why: String,
    /// Whether the check could not be made (exit 3, nothing drained) rather than a note.
    pub could_not_check: bool,
}

/// Whether the quick all_reduce may run (pure): on a node Slurm calls idle
/// ([`quick_nccl_allowed`]), or by hand where there is no Slurm at all. When Slurm cannot
/// say, or under slurmd (`under_slurmd`: `SLURMD_NODENAME` set) with no `scontrol` to ask,
/// it does not run: the node may hold jobs (security review T6).
pub fn quick_nccl_may_run(answer: &IdleAnswer, under_slurmd: bool) -> Result<(), NotRun> {
    let cannot_say = |what: &str| {
        NotRun {
        why: format!(
            "nccl: not run: Slurm could not say whether the node is idle ({what}), and the quick all_reduce runs only on a node Slurm calls idle"
        ),
        could_not_check: true,
    }
    };
    match answer {
        IdleAnswer::States(states) => quick_nccl_allowed(Some(states)).map_err(|why| NotRun {
            why,
            could_not_check: false,
        }),
        IdleAnswer::NoSlurm if under_slurmd => Err(cannot_say(
            "SLURMD_NODENAME is set, but there is no scontrol on PATH",
        )),
        IdleAnswer::NoSlurm => quick_nccl_allowed(None).map_err(|why| NotRun {
            why,
            could_not_check: false,
        }),
        IdleAnswer::Unanswered(error) => Err(cannot_say(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_all_reduce_does_not_run_when_slurm_cannot_say_the_node_is_idle() {
        let unanswered = IdleAnswer::Unanswered(
            "`scontrol show node hx --oneliner` failed: Could not establish a configuration source"
                .into(),
        );
        for under_slurmd in [true, false] {
            let not_run = quick_nccl_may_run(&unanswered, under_slurmd).unwrap_err();
            assert!(not_run.could_not_check);
            assert!(
                not_run
                    .why
                    .starts_with("nccl: not run: Slurm could not say whether the node is idle")
                    && not_run.why.contains("configuration source"),
                "{}",
                not_run.why
            );
        }
        assert!(quick_nccl_may_run(&IdleAnswer::NoSlurm, true).is_err());
        assert_eq!(quick_nccl_may_run(&IdleAnswer::NoSlurm, false), Ok(()));
        assert_eq!(
            quick_nccl_may_run(&IdleAnswer::States(vec!["IDLE".into()]), true),
            Ok(())
        );
        let busy = quick_nccl_may_run(&IdleAnswer::States(vec!["MIXED".into()]), true).unwrap_err();
        assert!(!busy.could_not_check, "a busy node is a note, as before");
    }

    #[test]
    fn the_quick_all_reduce_runs_only_on_an_idle_node() {
        let states = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(quick_nccl_allowed(Some(&states(&["IDLE"]))), Ok(()));
        assert_eq!(
            quick_nccl_allowed(Some(&states(&["IDLE", "DRAIN"]))),
            Ok(())
        );
        assert_eq!(quick_nccl_allowed(None), Ok(()), "no Slurm: by hand");
        let busy = quick_nccl_allowed(Some(&states(&["MIXED"]))).unwrap_err();
        assert!(busy.contains("the node is MIXED (jobs hold it)"), "{busy}");
        assert!(quick_nccl_allowed(Some(&states(&["ALLOCATED", "DRAIN"]))).is_err());
    }

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

    #[test]
    fn speeds_and_gpus_are_read_from_the_given_folders() {
        let root = tempfile::tempdir().unwrap();
        let net = root.path().join("class/net/eth1");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(net.join("speed"), "200000\n").unwrap();
        let ib = root.path().join("class/infiniband/mlx5_0/ports/1");
        std::fs::create_dir_all(&ib).unwrap();
        std::fs::write(ib.join("rate"), "400 Gb/sec (4X NDR)\n").unwrap();
        let speed = read_speed(root.path(), "eth1", NicClass::Net);
        assert_eq!(speed.as_deref(), Some("200000\n"));
        assert_eq!(
            speed_failure("eth1", NicClass::Net, 200, speed.as_deref()),
            None
        );
        let rate = read_speed(root.path(), "mlx5_0", NicClass::Infiniband);
        assert_eq!(
            speed_failure("mlx5_0", NicClass::Infiniband, 400, rate.as_deref()),
            None
        );
        assert_eq!(read_speed(root.path(), "eth9", NicClass::Net), None);
        let gpus = root.path().join("gpus");
        for bus in ["0000:01:00.0", "0000:02:00.0"] {
            std::fs::create_dir_all(gpus.join(bus)).unwrap();
        }
        assert_eq!(driver_gpu_count(&gpus), Some(2));
        assert_eq!(driver_gpu_count(&root.path().join("no-driver")), None);
    }
}
