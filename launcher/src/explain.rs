//! `gpudirect profiles explain`: what the plugin would do to one task (its mode, profile,
//! GPU, NIC, CPUs and variables, and where each variable comes from), computed with the
//! plugin's own functions from `gpudirect_core::resolve`, so that what an admin reads is
//! what a task gets.

use std::fmt;
use std::path::PathBuf;

use serde_json::{json, Value};

use gpudirect_core::config::{CheckKind, Config, NicLocality, UnknownMode};
use gpudirect_core::locality::{Locality, LocalityError};
use gpudirect_core::resolve::{
    choose_mode, plan_node_with_locality, plan_task, resolve_profile, vars, AssumeHealthy,
    NodePlan, NodeProbe, ResolveError, StepFacts, TaskFacts, TaskPlan,
};
use gpudirect_core::system::SystemProbe;

/// One task to explain: where it runs and what it asks for (`profiles explain`'s flags).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `--profile NAME`.
    pub profile: Option<String>,
    /// `--mode MODE` (the step's `--gpudirect`).
    pub mode: Option<String>,
    /// `SLURM_GPUDIRECT` of the step.
    pub slurm_gpudirect: Option<String>,
    /// The node.
    pub node: String,
    /// Rank on the node.
    pub local_rank: u32,
    /// Global rank (default: the local rank).
    pub rank: Option<u32>,
    /// Tasks on the node (default: the profile's GPUs, as many as its `gpu_nics`, else 8).
    pub ntasks_per_node: Option<u32>,
    /// Nodes of the step.
    pub nnodes: u32,
    /// Job id.
    pub job_id: u32,
    /// Step id.
    pub step_id: u32,
    /// The task's CUDA_VISIBLE_DEVICES.
    pub cuda_visible_devices: Option<String>,
    /// The user's variables, `NAME=VALUE`.
    pub env: Vec<String>,
    /// Where sysfs is, for `nic_locality = "sysfs"`.
    pub sysfs: Option<PathBuf>,
    /// Run the checks on this machine.
    pub on_node: bool,
}

/// Why a task cannot be explained; each message says what to pass instead.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// A local rank past the tasks of the node.
    #[error("--local-rank {local_rank} is not below --ntasks-per-node {ntasks_per_node}")]
    LocalRank {
        /// `--local-rank`.
        local_rank: u32,
        /// `--ntasks-per-node`.
        ntasks_per_node: u32,
    },
    /// An `--env` that is not `NAME=VALUE`.
    #[error("--env {0}: write NAME=VALUE")]
    BadEnv(String),
    /// A mode that names no profile.
    #[error(transparent)]
    Mode(#[from] UnknownMode),
    /// The profile does not resolve on the node.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The PCI locality could not be read.
    #[error("--sysfs {}: reading PCI locality", root.display())]
    Locality {
        /// The sysfs root.
        root: PathBuf,
        /// Why.
        source: LocalityError,
    },
}

/// What the plugin would do to one task, with where each piece came from.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The node.
    pub node: String,
    /// Its node set.
    pub node_set: Option<String>,
    /// The mode and where it came from; `None`: nothing asked for one.
    pub mode: Option<(String, String)>,
    /// The profile, when one applies.
    pub profile: Option<String>,
    /// The task's facts.
    pub rank: u32,
    /// Rank on the node.
    pub local_rank: u32,
    /// Tasks on the node.
    pub local_size: u32,
    /// The task plan (when a profile applies).
    pub task: Option<TaskPlan>,
    /// Per variable set: "forced", "keepable" or "plugin".
    pub origins: Vec<&'static str>,
    /// Checks the plugin runs on this node.
    pub checks_run: Vec<&'static str>,
    /// Checks the node set skips.
    pub checks_skipped: Vec<&'static str>,
    /// Whether the checks were probed on this machine.
    pub probed: bool,
    /// Check failures (only with --on-node).
    pub failures: Vec<String>,
    /// What `none` removes, when the mode is `none`.
    pub none_removes: bool,
    /// Node-level notes (sysfs locality).
    pub node_notes: Vec<String>,
    /// Job telemetry (`[watch]`) on this node, in a sentence, where the config has it.
    pub telemetry: Option<String>,
}

fn parse_env(pairs: &[String]) -> Result<Vec<(String, String)>, ExplainError> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
            _ => Err(ExplainError::BadEnv(pair.clone())),
        })
        .collect()
}

/// Tasks on a node when neither `--ntasks-per-node` nor the profile's `gpu_nics` say: an
/// 8-GPU node's.
const DEFAULT_TASKS: u32 = 8;

/// Computes the explanation with the plugin's own functions. Pure but for `--sysfs` and
/// `--on-node`, which read this machine.
pub fn explain_task(config: &Config, args: &Request) -> Result<Explanation, ExplainError> {
    let fits = |tasks: u32| {
        if tasks == 0 || args.local_rank >= tasks {
            return Err(ExplainError::LocalRank {
                local_rank: args.local_rank,
                ntasks_per_node: tasks,
            });
        }
        Ok(tasks)
    };
    let given_tasks = args.ntasks_per_node.map(fits).transpose()?;
    let user_env = parse_env(&args.env)?;
    let option = args.profile.as_deref().or(args.mode.as_deref());
    let chosen = choose_mode(config, &args.node, option, args.slurm_gpudirect.as_deref())?;
    let mut out = Explanation {
        node: args.node.clone(),
        node_set: config.node_set_for(&args.node).map(|s| s.name.clone()),
        mode: chosen
            .as_ref()
            .map(|c| (c.mode.to_string(), c.source.to_string())),
        profile: None,
        rank: args.rank.unwrap_or(args.local_rank),
        local_rank: args.local_rank,
        local_size: given_tasks.unwrap_or(DEFAULT_TASKS),
        task: None,
        origins: Vec::new(),
        checks_run: Vec::new(),
        checks_skipped: Vec::new(),
        probed: args.on_node,
        failures: Vec::new(),
        none_removes: false,
        node_notes: Vec::new(),
        telemetry: None,
    };
    let Some(chosen) = chosen else {
        return Ok(out);
    };
    let Some(resolved) = resolve_profile(config, &args.node, &chosen.mode)? else {
        out.none_removes = true;
        return Ok(out);
    };
    let profile = resolved.profile;
    // A node's tasks are its GPUs': as many as the profile maps, unless given.
    let local_size = match given_tasks {
        Some(n) => n,
        None if !profile.gpu_nics.is_empty() => fits(profile.gpu_nics.len() as u32)?,
        None => fits(DEFAULT_TASKS)?,
    };
    out.local_size = local_size;
    let sysfs = args
        .sysfs
        .clone()
        .or_else(|| args.on_node.then(|| PathBuf::from("/sys")));
    let locality = match (&sysfs, profile.nic_locality) {
        (Some(root), NicLocality::Sysfs) => {
            Some(
                Locality::read(root).map_err(|source| ExplainError::Locality {
                    root: root.clone(),
                    source,
                })?,
            )
        }
        _ => None,
    };
    let step = StepFacts {
        job_id: args.job_id,
        step_id: args.step_id,
        node: args.node.clone(),
        nnodes: args.nnodes,
        local_size,
    };
    let probe: &dyn NodeProbe = if args.on_node {
        &SystemProbe::default()
    } else {
        &AssumeHealthy
    };
    let plan: NodePlan<'_> = plan_node_with_locality(resolved, step, probe, locality.as_ref());
    out.profile = Some(profile.name.clone());
    out.checks_skipped = plan.skipped.iter().map(|k| k.name()).collect();
    out.checks_run = profile
        .checks
        .required()
        .into_iter()
        .filter(|k| !plan.skipped.contains(k))
        .map(CheckKind::name)
        .collect();
    out.failures = plan.failures.iter().map(ToString::to_string).collect();
    out.node_notes = plan.notes.clone();
    let facts = TaskFacts {
        rank: out.rank,
        local_rank: args.local_rank,
        cuda_visible_devices: args.cuda_visible_devices.clone(),
        step_gpus: None,
        allowed_cpus: None,
    };
    let env = |name: &str| {
        user_env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let task = plan_task(&plan, &facts, &env);
    out.telemetry = plan.watch.as_ref().map(|w| {
        let who = if w.settings.always {
            "on for every task".to_string()
        } else {
            format!(
                "on for tasks that export {}=1 (this one {})",
                gpudirect_core::config::WatchSettings::ASK,
                if gpudirect_core::config::WatchSettings::asked(&env) {
                    "does"
                } else {
                    "does not: --env GPUDIRECT_WATCH=1 shows its variables"
                }
            )
        };
        let loads = match &w.connections {
            Some(lib) => format!(
                "NCCL loads the connection profiler {lib}, the Inspector {} chained behind it",
                w.settings.inspector
            ),
            None => format!("NCCL loads the Inspector {}", w.settings.inspector),
        };
        let loads = match &w.replaces {
            Some(own) => format!("{loads} instead of the profile's own profiler {own}"),
            None => loads,
        };
        format!(
            "job telemetry ([watch]): {who}; {loads}; dumps in {} every {} ms",
            w.dump_dir, w.settings.interval_ms
        )
    });
    // Telemetry's variables are the plugin's, also where they replace a profile's own
    // (`[watch] replace_profiler`).
    let telemetry = task.set.iter().any(|(n, _)| n == "NCCL_INSPECTOR_ENABLE");
    out.origins = task
        .set
        .iter()
        .map(|(name, _)| {
            if telemetry && gpudirect_core::resolve::WATCH_VARIABLES.contains(&name.as_str()) {
                return "plugin";
            }
            match profile.env.iter().find(|v| &v.name == name) {
                Some(var) if var.forced => "forced",
                Some(_) => "keepable",
                None if name == "NCCL_TOPO_FILE" => "keepable",
                // LD_LIBRARY_PATH (prepended to the user's) and GPUDIRECT_*.
                None => "plugin",
            }
        })
        .collect();
    out.task = Some(task);
    Ok(out)
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = self.node_set.as_deref().unwrap_or("none");
        let Some((mode, source)) = &self.mode else {
            return writeln!(
                f,
                "node {} (node set {set}): no mode applies (no --gpudirect, no {}, no default): the plugin leaves the step untouched",
                self.node,
                vars::MODE_ENV
            );
        };
        if self.none_removes {
            return writeln!(
                f,
                "node {} (node set {set}): mode none (from {source}): the plugin sets nothing, and removes what an enclosing step's profile set (the names in {})",
                self.node,
                vars::SET
            );
        }
        let (Some(profile), Some(task)) = (&self.profile, &self.task) else {
            return Ok(());
        };
        writeln!(
            f,
            "node {} (node set {set}): profile {profile} (mode {mode}, from {source})",
            self.node
        )?;
        writeln!(
            f,
            "task: rank {}, local rank {} of {}, GPU {}, NIC {}, CPUs {}",
            self.rank,
            self.local_rank,
            self.local_size,
            task.gpu,
            task.nic.as_deref().unwrap_or("-"),
            task.cpus
                .as_ref()
                .map_or("- (not pinned)".into(), ToString::to_string)
        )?;
        let list = |v: &[&str]| {
            if v.is_empty() {
                "-".to_string()
            } else {
                v.join(", ")
            }
        };
        if self.probed {
            writeln!(f, "checks run on this node: {}", list(&self.checks_run))?;
        } else {
            writeln!(
                f,
                "checks the plugin runs on the node: {} (not probed here: --on-node probes this machine)",
                list(&self.checks_run)
            )?;
        }
        writeln!(
            f,
            "checks skipped by the node set: {}",
            list(&self.checks_skipped)
        )?;
        for failure in &self.failures {
            writeln!(
                f,
                "check failed: {failure}: the profile would not be applied"
            )?;
        }
        writeln!(
            f,
            "variables (forced: replaces the user's value; keepable: a value the user set is kept; plugin: set by the plugin itself):"
        )?;
        for ((name, value), origin) in task.set.iter().zip(&self.origins) {
            writeln!(f, "  {origin:<9} {name}={value}")?;
        }
        if !task.kept_user.is_empty() {
            writeln!(f, "kept (the user's value): {}", task.kept_user.join(", "))?;
        }
        if !task.unset.is_empty() {
            writeln!(f, "unset: {}", task.unset.join(", "))?;
        }
        if let Some(t) = &self.telemetry {
            writeln!(f, "{t}")?;
        }
        for note in self.node_notes.iter().chain(&task.notes) {
            writeln!(f, "note: {note}")?;
        }
        Ok(())
    }
}

impl Explanation {
    /// The explanation as JSON (`--json`).
    pub fn to_json(&self) -> Value {
        let variables: Vec<Value> = self
            .task
            .iter()
            .flat_map(|t| t.set.iter())
            .zip(&self.origins)
            .map(|((name, value), origin)| json!({"name": name, "value": value, "origin": origin}))
            .collect();
        json!({
            "node": self.node,
            "node_set": self.node_set,
            "mode": self.mode.as_ref().map(|(m, _)| m),
            "mode_source": self.mode.as_ref().map(|(_, s)| s),
            "profile": self.profile,
            "untouched": self.mode.is_none(),
            "none": self.none_removes,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "local_size": self.local_size,
            "gpu": self.task.as_ref().map(|t| &t.gpu),
            "nic": self.task.as_ref().and_then(|t| t.nic.as_ref()),
            "cpus": self.task.as_ref().and_then(|t| t.cpus.as_ref()).map(ToString::to_string),
            "variables": variables,
            "kept_user": self.task.as_ref().map(|t| &t.kept_user),
            "unset": self.task.as_ref().map(|t| &t.unset),
            "checks_run": self.checks_run,
            "checks_skipped": self.checks_skipped,
            "probed": self.probed,
            "check_failures": self.failures,
            "telemetry": self.telemetry,
            "notes": self.node_notes.iter().chain(self.task.iter().flat_map(|t| &t.notes)).collect::<Vec<_>>(),
        })
    }
}
