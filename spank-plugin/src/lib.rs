//! `spank_gpudirect.so`: adds `--gpudirect=MODE` to srun, sbatch and salloc, and gives each
//! task of a step the environment and pinning of a fabric profile from the admin's config.
//!
//! plugstack.conf:
//! ```text
//! optional /usr/lib/slurm/spank_gpudirect.so config=/etc/slurm/gpudirect.toml
//! ```
//!
//! What happens where (SPANK contexts):
//! - srun / sbatch / salloc (`local`, `allocator`): the config is read to validate the mode;
//!   an unknown mode is refused before anything is submitted, naming the profiles.
//! - slurmstepd (`remote`), once per node in `init_post_opt`, still as root: a step that
//!   asks for no mode is left untouched when a root-owned mark (or, without one, the
//!   config) says this very config leaves such steps on this node untouched
//!   ([`gpudirect_core::marks`]).
//! - slurmstepd, once per node in `user_init`, with the job user's effective uid, gid and
//!   groups (Slurm drops them before calling it): the config is read (unless
//!   `init_post_opt` read it for a plain step on a node with a default mode), the mode chosen by
//!   precedence, the profile resolved for this node and its checks run
//!   ([`gpudirect_core::resolve`]), all with the user's rights.
//! - slurmstepd, per task in `task_init` (in the task's own process, just before exec):
//!   the task's variables are set and its CPU affinity pinned.
//!
//! All the rules live in the shared `gpudirect-core` crate; this crate is only the glue to
//! Slurm, in three parts:
//! - `ffi.rs`: every `extern "C"` and `unsafe` item, the exported symbols, and the only
//!   use of slurm-spank's hidden API;
//! - `state.rs`: the process's state (config path, config, option value) as one struct,
//!   and the plugstack.conf arguments;
//! - this file: the policy of each callback and what a node decides for its tasks.
//!
//! Privileges (docs/security.md): as root it only parses plugstack.conf, registers the
//! option, keeps the option's value, and looks up or writes marks from the admin's
//! root-owned config; everything a user can influence is read as that user, and the task
//! callback runs in the task, which already is the user. It reads one root-owned config
//! named by the admin, runs no shell, starts no thread, and never lets a panic cross into
//! Slurm (the callbacks are guarded in `ffi.rs`;
//! `panic = "unwind"` is required).

// No function over 150 lines outside tests (clippy.toml's threshold counts code lines),
// as in the binary's commands (issue #42); a test's table of cases may run longer.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

mod ffi;
mod state;

use std::error::Error;
use std::panic::AssertUnwindSafe;
use std::path::Path;

use gpudirect_core::config::{sanitize_for_message, NicLocality};
use gpudirect_core::locality::Locality;
use gpudirect_core::marks::{UntouchedMarks, MARKS_DIR};
use gpudirect_core::resolve::{
    choose_mode, plan_job_level, plan_node_with_locality, plan_none, plan_task, resolve_profile,
    settle_ras_addr, vars, NodePlan, StepFacts, TaskFacts,
};
use gpudirect_core::system::{
    check_config_file, current_affinity, load_config_stamped, ras_port_free, set_affinity,
    slurm_node_name, Ownership, SystemProbe,
};
use slurm_spank::{spank_log, Context, LogLevel, Plugin, SpankHandle};

use crate::state::{config_path_from_args, STATE};

/// Every message starts with this, so users and admins know who speaks.
const NAME: &str = "gpudirect";

/// A mode longer than this cannot be a profile name: it is refused unread.
const MAX_MODE_LEN: usize = 64;

/// The most of CUDA_VISIBLE_DEVICES or SLURM_STEP_GPUS a task reads.
const MAX_GPU_LIST_LEN: usize = 4096;

fn log_error(message: &str) {
    spank_log(LogLevel::Error, &format!("{NAME}: {message}"));
}

fn log_verbose(message: &str) {
    spank_log(LogLevel::Verbose, &format!("{NAME}: {message}"));
}

/// What this node decided for the step, in `user_init`, for every task to apply.
#[derive(Default)]
enum NodeDecision {
    /// No mode asked for: touch nothing.
    #[default]
    Untouched,
    /// `--gpudirect=none`: remove what an enclosing step's profile set.
    NoneMode,
    /// Apply this plan.
    Apply(NodePlan<'static>),
    /// The profile cannot be applied here; `strict` fails the step. Otherwise the tasks run
    /// without it, keeping only the job's own RAS address (`ras_addr`, where the node's
    /// plan was made and gives one), which the job's tasks on other nodes get too.
    Unusable {
        message: String,
        strict: bool,
        ras_addr: Option<String>,
    },
}

/// The plugin as slurm-spank keeps it between callbacks of one process: what this node
/// decided in `user_init`, for `task_init`. The rest of the process's state, which the
/// option callback needs too, is [`state::State`].
#[derive(Default)]
struct GpuDirect {
    node: NodeDecision,
    /// Whether the chosen profile is strict, once `user_init` knows: what a panic after
    /// that point decides by.
    strict: std::cell::Cell<Option<bool>>,
    /// The device and inode of `/` in slurmstepd at `user_init`; a task whose `/` differs
    /// at `task_init` has been moved into a container by a plugin before this one (pyxis
    /// joins the container's mount namespace in its own `task_init`).
    root_at_user_init: Option<(u64, u64)>,
}

/// The device and inode of this process's `/`.
fn root_identity() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/").ok().map(|m| (m.dev(), m.ino()))
}

/// `slurm_spank_init` in srun, sbatch, salloc and slurmstepd: keeps the config path from
/// plugstack.conf and registers `--gpudirect` (through `register_option`). Other contexts
/// (slurmd, the job script) do nothing.
fn init(
    spank: &SpankHandle,
    register_option: impl FnOnce() -> Result<(), String>,
) -> Result<(), Box<dyn Error>> {
    let context = spank.context()?;
    if !matches!(
        context,
        Context::Local | Context::Allocator | Context::Remote
    ) {
        return Ok(());
    }
    let path = spank
        .plugin_argv()
        .map_err(|e| e.to_string())
        .and_then(|args| config_path_from_args(&args));
    STATE.set_config_path(path);
    register_option()?;
    match context {
        // slurmstepd reads the config, and reports every error, in user_init: from there
        // a broken config reaches the user and, under `required`, fails the tasks. (A
        // failed init would fail the launch with nothing but "Plugin initialization
        // failed", and srun 22.05 would still exit 0.)
        Context::Remote => Ok(()),
        // srun/sbatch/salloc read the config only when a mode is asked for (the
        // option callback, init_post_opt). A bad plugstack line fails init, which
        // stops them only under `required`.
        _ => match STATE.config_path() {
            Some(Err(e)) => Err(e.clone().into()),
            _ => Ok(()),
        },
    }
}

/// The option callback's policy, for `--gpudirect=MODE` as Slurm hands it over (`None`:
/// no value); `remote` is true in slurmstepd. Returns whether the value is taken: a
/// refusal makes srun/sbatch/salloc refuse the command line before submitting.
fn accept_option(value: Option<&[u8]>, remote: bool) -> bool {
    let Some(bytes) = value else {
        log_error("--gpudirect needs a value: a profile name, `auto` or `none`");
        return false;
    };
    let value = String::from_utf8_lossy(bytes).into_owned();
    if bytes.len() > MAX_MODE_LEN {
        log_error(&format!(
            "--gpudirect value of {} bytes refused: a mode is a profile name, `auto` or `none`",
            bytes.len()
        ));
        if !remote {
            return false;
        }
        // In slurmstepd a refusal makes Slurm log the raw value into slurmd's log, where a
        // newline in it would forge log lines (security review F2). Keep a mode that names
        // nothing instead: user_init then refuses it with a sanitized message.
        return STATE.set_option(unusable_mode(bytes));
    }
    if !remote && !STATE.mode_declared(&value) {
        // In srun/sbatch/salloc: refuse unknown modes now. A mode the config declares is
        // taken without parsing the file (the step parses it, and reports what is wrong);
        // anything else is looked up in the parsed config, for the exact message. A broken
        // config cannot validate anything; the step will say so.
        if let Ok(config) = STATE.config() {
            if let Err(e) = config.parse_mode(&value) {
                log_error(&e.to_string());
                return false;
            }
        }
    }
    STATE.set_option(value)
}

/// What slurmstepd keeps of an over-long `--gpudirect` value: its start, printable only,
/// marked as cut. No profile can have that name (it holds characters names cannot), so
/// the step is told its mode names nothing.
fn unusable_mode(bytes: &[u8]) -> String {
    let start = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_MODE_LEN)]).into_owned();
    format!("{}... (cut)", sanitize_for_message(&start))
}

/// The Slurm whose headers the plugin was built against (spank-plugin/build.rs); Slurm
/// itself refuses a plugin built for another major version.
const BUILT_FOR_SLURM: &str = match option_env!("GPUDIRECT_SLURM_VERSION") {
    Some(version) => version,
    None => "(unknown: slurm_version.h was not found at build time)",
};

/// The first Slurm (23.02) whose slurmstepd writes an OCI container's config.json after
/// task_init. Before it, the job's environment went into the container's config when the
/// step was set up, before any task existed, so what task_init sets never reaches a
/// `srun --container` task (Slurm's src/slurmd/slurmstepd/container.c, setup_container).
const CONTAINER_SEES_TASK_ENV: u32 = (23 << 16) | (2 << 8);

/// The longest bundle path read from SLURM_CONTAINER (review F6: bounded reads).
const MAX_BUNDLE_LEN: usize = 4096;

/// The OCI bundle of a step that runs in Slurm's own container (`srun --container`, which
/// sets SLURM_CONTAINER), read bounded; `(unreadable)` for a value that cannot be read.
fn step_container() -> Option<String> {
    ffi::job_env("SLURM_CONTAINER", MAX_BUNDLE_LEN)
        .unwrap_or_else(|_| Some("(unreadable)".into()))
        .filter(|bundle| !bundle.trim().is_empty())
}

/// [`step_container`] on a Slurm whose containers never see what task_init sets; `None`
/// elsewhere.
fn container_without_task_env() -> Option<String> {
    if slurm_spank::spank_sys::SLURM_VERSION_NUMBER >= CONTAINER_SEES_TASK_ENV {
        return None;
    }
    step_container()
}

/// This build's id (spank-plugin/build.rs): marks written by another build never count.
const BUILD_ID: &str = env!("GPUDIRECT_BUILD_ID");

/// Whether the step asks for a mode itself: `--gpudirect` or SLURM_GPUDIRECT. A value
/// that cannot be read (not UTF-8) counts as asking: the full read then reports it.
fn step_asks_for_mode() -> bool {
    let asked = |m: &String| !m.trim().is_empty();
    STATE.option().is_some_and(|m| asked(&m))
        || ffi::job_env(vars::MODE_ENV, MAX_MODE_LEN)
            .unwrap_or_else(|_| Some("unreadable".into()))
            .is_some_and(|m| asked(&m))
}

/// SLURM_GPUDIRECT from the job's environment, read into a buffer of [`MAX_MODE_LEN`]
/// bytes (review F6); the error names the variable and the fix.
fn mode_from_job_env(node: &str) -> Result<Option<String>, String> {
    ffi::job_env(vars::MODE_ENV, MAX_MODE_LEN).map_err(|e| {
        let what = match e {
            ffi::JobEnvError::TooLong { max } => format!("is longer than {max} bytes"),
            ffi::JobEnvError::NotUtf8 => "is not valid UTF-8".into(),
            ffi::JobEnvError::Unavailable(code) => format!("cannot be read (spank error {code})"),
        };
        format!(
            "node {node}: {} {what}: set it to a profile name, `auto` or `none`",
            vars::MODE_ENV
        )
    })
}

/// The text of a caught panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// Test builds only (`--features fault-injection`): panics in the callback that the job's
/// GPUDIRECT_TEST_PANIC names, so that the cluster tests can show what a panic does.
#[cfg(feature = "fault-injection")]
fn inject_fault(callback: &str) {
    if ffi::job_env("GPUDIRECT_TEST_PANIC", 64)
        .ok()
        .flatten()
        .as_deref()
        == Some(callback)
    {
        panic!("fault injected in {callback}");
    }
}

#[cfg(not(feature = "fault-injection"))]
fn inject_fault(_callback: &str) {}

impl GpuDirect {
    /// slurmstepd, in the remote `init_post_opt`, where it still runs as root (`user_init`
    /// runs with the job user's rights, where marks can be neither trusted nor written:
    /// security review F1). A step that asks for no mode is left untouched when a
    /// root-owned mark names this config version, plugin build and node. Without a mark the
    /// admin's config is parsed here, with the same ownership checks as in `user_init`, and
    /// when it leaves the node untouched the step is, and a mark is written for the next;
    /// when the node's default mode applies instead, `user_init` works from this read. A
    /// step that asks for a mode, or a config that cannot be read, is left to `user_init`,
    /// which reads the config with the user's credentials and reports what is wrong.
    fn consult_marks() {
        inject_fault("init_post_opt");
        if step_asks_for_mode() {
            return;
        }
        let Some(Ok(path)) = STATE.config_path() else {
            return;
        };
        let Some(marks) = UntouchedMarks::open(Path::new(MARKS_DIR)) else {
            return;
        };
        let path = Path::new(path);
        // slurmstepd's own SLURMD_NODENAME, never the step's: that is the user's
        // environment, and srun inside a batch script carries the batch host's name to
        // every node of the step.
        let node = slurm_node_name();
        // The ownership checks run at every step, marked or not: a config made writable by
        // others since it was marked is refused as before.
        let Ok(stamp) = check_config_file(path, Ownership::RootOnly) else {
            return;
        };
        if marks.contains(&node, &stamp, BUILD_ID) {
            STATE.set_untouched_by_mark();
            return;
        }
        let Ok((config, read)) = load_config_stamped(path, Ownership::RootOnly) else {
            return;
        };
        if matches!(choose_mode(&config, &node, None, None), Ok(None)) {
            if let Err(e) = marks.record(&node, &read, BUILD_ID) {
                log_verbose(&format!("node {node}: no mark in {MARKS_DIR}: {e}"));
            }
            STATE.set_untouched_by_mark();
        } else {
            // The node's default mode applies to this step: user_init decides from this
            // very read rather than parsing the file a second time (nodes with a default
            // never get a mark, so this is every plain step there).
            STATE.keep_config(config);
        }
    }

    /// Runs in slurmstepd once per node: decides what every task of the step gets.
    fn decide(&self, spank: &SpankHandle, node: String) -> Result<NodeDecision, String> {
        let config = STATE.config().map_err(|e| format!("node {node}: {e}"))?;
        let option = STATE.option();
        let env_mode = mode_from_job_env(&node)?;
        let chosen = choose_mode(config, &node, option.as_deref(), env_mode.as_deref())
            .map_err(|e| format!("node {node}: {e}"))?;
        let Some(chosen) = chosen else {
            return Ok(NodeDecision::Untouched);
        };
        let resolved = resolve_profile(config, &node, &chosen.mode).map_err(|e| e.to_string())?;
        let Some(resolved) = resolved else {
            return Ok(NodeDecision::NoneMode);
        };
        // Known before the checks and the planning: a panic after this point still fails a
        // strict profile's step (review F7).
        self.strict.set(Some(resolved.profile.strict));
        inject_fault("user_init");
        let step = StepFacts {
            job_id: spank.job_id().unwrap_or(0),
            step_id: spank.job_stepid().unwrap_or(0),
            node,
            nnodes: spank.job_nnodes().unwrap_or(1),
            local_size: spank.job_local_task_count().unwrap_or(1),
        };
        // Read once per node, and only for profiles that ask: tasks get it as data.
        let locality = if resolved.profile.nic_locality == NicLocality::Sysfs {
            Locality::read(Path::new("/sys"))
                .map_err(|e| log_error(&format!("node {}: {e}; using gpu_nics", step.node)))
                .ok()
        } else {
            None
        };
        let mut plan =
            plan_node_with_locality(resolved, step, &SystemProbe::default(), locality.as_ref());
        // As the job's user, in the node's own network: whether the job's RAS port is free
        // for it here, or another user took it first (security review T1).
        settle_ras_addr(&mut plan, &config.ras, &ras_port_free);
        for note in &plan.notes {
            log_verbose(&format!("node {}: {note}", plan.step.node));
        }
        if let Some(summary) = plan.failure_summary() {
            return Ok(NodeDecision::Unusable {
                message: summary,
                strict: plan.profile.strict,
                ras_addr: plan.job_ras_addr().map(str::to_string),
            });
        }
        log_verbose(&format!(
            "node {}: profile {} from {} (node set {}; spank_gpudirect {} for Slurm {})",
            plan.step.node,
            plan.profile.name,
            chosen.source,
            plan.node_set.as_deref().unwrap_or("-"),
            env!("CARGO_PKG_VERSION"),
            BUILT_FOR_SLURM
        ));
        Ok(NodeDecision::Apply(plan))
    }

    fn apply_to_task(
        plan: &NodePlan<'static>,
        spank: &SpankHandle,
        root_at_user_init: Option<(u64, u64)>,
    ) -> Result<(), Box<dyn Error>> {
        // GPU lists: a few bytes per GPU; a longer value is no list of this node's GPUs.
        let gpu_list = |name: &str| ffi::job_env(name, MAX_GPU_LIST_LEN).ok().flatten();
        let facts = TaskFacts {
            rank: spank.task_global_id()?,
            local_rank: u32::try_from(spank.task_id()?).unwrap_or(0),
            cuda_visible_devices: gpu_list("CUDA_VISIBLE_DEVICES"),
            step_gpus: ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS"]
                .iter()
                .find_map(|name| gpu_list(name)),
            allowed_cpus: current_affinity(),
        };
        inject_fault("task_init");
        let env = |name: &str| spank.getenv(name).ok().flatten();
        let mut task = plan_task(plan, &facts, &env);
        if let Some(dir) = task.watch_dir.take() {
            // As the job's user (task_init): the folder is the user's, and never another's.
            if let Err(why) = gpudirect_core::system::ensure_private_dir(std::path::Path::new(&dir))
            {
                task.set.retain(|(name, _)| {
                    !gpudirect_core::resolve::WATCH_VARIABLES.contains(&name.as_str())
                });
                let message = format!("job telemetry off for this task: {why}");
                log_error(&format!("rank {}: {message}", facts.rank));
                if facts.local_rank == 0 {
                    tell_user(&message);
                }
            }
        }
        for name in &task.unset {
            // A variable that was not there is not an error.
            let _ = spank.unsetenv(name);
        }
        for (name, value) in &task.set {
            spank.setenv(name, value, true)?;
        }
        if let Some(cpus) = &task.cpus {
            if let Err(e) = set_affinity(cpus) {
                log_error(&format!(
                    "rank {}: could not pin to CPUs {cpus}: {e}",
                    facts.rank
                ));
            }
        }
        for note in &task.notes {
            log_verbose(&format!("rank {}: {note}", facts.rank));
        }
        let in_container = step_container().is_some()
            || root_at_user_init.is_some_and(|before| root_identity() != Some(before));
        if facts.local_rank == 0 && in_container {
            warn_of_container_values(plan, &task.kept_user);
        }
        Ok(())
    }
}

/// In a container (Slurm's `srun --container`, or pyxis listed before this plugin), the
/// environment the plugin keeps over the profile's (a variable the profile sets but does
/// not force) may be the image's rather than the user's: one line per kept variable that
/// chooses the transport, on the node's first task, so that nobody runs on the wrong
/// network unknowingly.
fn warn_of_container_values(plan: &NodePlan<'static>, kept: &[String]) {
    for name in kept
        .iter()
        .filter(|n| gpudirect_core::resolve::TRANSPORT_VARIABLES.contains(&n.as_str()))
    {
        // Bounded, as every read of the job's environment (review F6); the message shows
        // the start of the value only.
        let value = ffi::job_env(name, MAX_BUNDLE_LEN)
            .ok()
            .flatten()
            .unwrap_or_else(|| "(too long or unreadable)".into());
        tell_user(&format!(
            "the container keeps {name}={} over profile {}'s value (the image or your job set it, and the profile does not force it): it can change the transport; unset it in the image or the job, or add it to the profile's `forced`",
            sanitize_for_message(&value),
            plan.profile.name
        ));
    }
}

/// Writes one line to the task's stderr, which srun shows the user.
fn tell_user(message: &str) {
    eprintln!("{NAME}: {message}");
}

// SAFETY: the plugin starts no threads and touches no state outside its own (this
// struct and `state::STATE`).
unsafe impl Plugin for GpuDirect {
    /// The crate's default installs a tracing subscriber on first call; this plugin logs
    /// through the SPANK log only, and srun should pay nothing for it.
    fn setup(&mut self, _spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        Ok(())
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        match spank.context()? {
            Context::Remote => {
                // Caught here, as user_init catches its own: slurm-spank's guard would
                // catch it too, but poison its lock, and every later callback of this
                // slurmstepd would fail, a strict default profile then running without its
                // transport (security review S11). Nothing is marked after a panic, so
                // user_init decides the step from the config as for any unmarked one.
                let consulted =
                    std::panic::catch_unwind(AssertUnwindSafe(GpuDirect::consult_marks));
                if let Err(panic) = consulted {
                    log_error(&format!(
                        "node {}: internal error while consulting the marks ({}): the step is decided from the config; please report it with this node's slurmd log",
                        slurm_node_name(),
                        panic_text(&*panic)
                    ));
                }
                return Ok(());
            }
            Context::Local | Context::Allocator => {}
            _ => return Ok(()),
        }
        let option = STATE.option();
        let env_mode = std::env::var(vars::MODE_ENV)
            .ok()
            .filter(|m| !m.trim().is_empty());
        let Some(requested) = option.clone().or_else(|| env_mode.clone()) else {
            // No mode asked for: nothing to check, and no config to read.
            return Ok(());
        };
        if STATE.mode_declared(&requested) {
            // The config declares the mode: the step parses the file and reports the rest.
            return Ok(());
        }
        match STATE.config() {
            Ok(config) => {
                if option.is_none() {
                    if let Some(mode) = &env_mode {
                        if let Err(e) = config.parse_mode(mode) {
                            log_error(&format!("{}: {e}", vars::MODE_ENV));
                            // Slurm ignores an optional plugin's errors here, but a mode
                            // that names nothing must stop srun/sbatch as `--gpudirect=typo`
                            // does. Nothing is allocated yet: exiting is clean.
                            std::process::exit(1);
                        }
                    }
                }
            }
            Err(e) => {
                log_error(&format!(
                    "cannot apply --gpudirect={}: {e}; the step runs without a profile",
                    sanitize_for_message(&requested)
                ));
            }
        }
        Ok(())
    }

    fn user_init(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        self.root_at_user_init = root_identity();
        if STATE.untouched_by_mark() {
            self.node = NodeDecision::Untouched;
            return Ok(());
        }
        // As in consult_marks: slurmstepd's own name for the node.
        let node = slurm_node_name();
        let decided =
            std::panic::catch_unwind(AssertUnwindSafe(|| self.decide(spank, node.clone())));
        self.node = match decided {
            Ok(Ok(NodeDecision::Apply(plan))) => match container_without_task_env() {
                // Applied in task_init, the profile would silently miss the container.
                Some(bundle) => {
                    let message = format!(
                        "node {node}: profile {} cannot reach this step's container (srun --container={}): Slurm {BUILT_FOR_SLURM} writes a container's environment before task_init; use Slurm 23.02 or later, or pyxis (--container-image)",
                        plan.profile.name,
                        sanitize_for_message(&bundle)
                    );
                    log_error(&message);
                    // Nothing set in task_init reaches this container: no RAS address either.
                    NodeDecision::Unusable {
                        message,
                        strict: plan.profile.strict,
                        ras_addr: None,
                    }
                }
                None => NodeDecision::Apply(plan),
            },
            Ok(Ok(decision)) => decision,
            Ok(Err(message)) => {
                log_error(&message);
                NodeDecision::Unusable {
                    message,
                    strict: false,
                    ras_addr: None,
                }
            }
            // Caught here rather than by slurm-spank's guard, whose lock a panic would
            // poison: every later callback of this slurmstepd, task_init included, would
            // then return -1, which Slurm ignores for an optional plugin, and a strict
            // profile would run without its transport (review F7).
            Err(panic) => {
                let message = format!(
                    "node {node}: internal error while deciding the profile ({}): please report it with this node's slurmd log",
                    panic_text(&*panic)
                );
                log_error(&message);
                // A strict profile fails closed; before the profile was known, a step that
                // asked for a mode is treated as strict.
                let strict = self.strict.get().unwrap_or_else(step_asks_for_mode);
                NodeDecision::Unusable {
                    message,
                    strict,
                    ras_addr: None,
                }
            }
        };
        Ok(())
    }

    fn task_init(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        match &self.node {
            NodeDecision::Untouched => Ok(()),
            NodeDecision::NoneMode => {
                let env = |name: &str| spank.getenv(name).ok().flatten();
                for name in plan_none(&env) {
                    let _ = spank.unsetenv(&name);
                }
                Ok(())
            }
            NodeDecision::Apply(plan) => {
                match std::panic::catch_unwind(AssertUnwindSafe(|| {
                    GpuDirect::apply_to_task(plan, spank, self.root_at_user_init)
                })) {
                    Ok(applied) => applied,
                    Err(panic) => {
                        let message = format!(
                            "internal error while applying profile {} ({}): please report it with this node's slurmd log",
                            plan.profile.name,
                            panic_text(&*panic)
                        );
                        log_error(&message);
                        tell_user(&message);
                        if plan.profile.strict {
                            // Half applied, the task must not run (review F7).
                            ffi::exit_task(1);
                        }
                        Err(message.into())
                    }
                }
            }
            NodeDecision::Unusable {
                message,
                strict,
                ras_addr,
            } => {
                let first_task = spank.task_id().map(|id| id == 0).unwrap_or(true);
                if *strict {
                    if first_task {
                        tell_user(&format!("{message}; the profile is strict: the step fails"));
                    }
                    log_error(message);
                    // An optional plugin's error is ignored by Slurm; a strict profile
                    // must still stop the task before it runs without its transport.
                    ffi::exit_task(1);
                }
                // The job's RAS address is the job's, not the fabric's: kept, so that the
                // job's ranks on this node answer at the address its other nodes use.
                let mut kept = String::new();
                if let Some(addr) = ras_addr {
                    let env = |name: &str| spank.getenv(name).ok().flatten();
                    for (name, value) in plan_job_level(addr, &env) {
                        if spank.setenv(&name, &value, true).is_ok() && name == vars::RAS_ADDR {
                            kept = format!(" (the job's RAS address, {value}, is kept)");
                        }
                    }
                }
                if first_task {
                    tell_user(&format!(
                        "{message}; the step runs without the profile{kept} (or fails, where plugstack.conf says `required`)"
                    ));
                }
                // An error here fails the step when plugstack.conf says `required`.
                Err(message.clone().into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_over_long_remote_value_keeps_no_newline_and_names_no_profile() {
        let mut forged = b"tcpx\n[2026-11-30T00:00:00.000] error: forged".to_vec();
        forged.resize(200, b'x');
        let kept = unusable_mode(&forged);
        assert!(!kept.contains('\n'), "{kept}");
        assert!(kept.ends_with("... (cut)"), "{kept}");
        assert!(kept.len() < 2 * MAX_MODE_LEN, "{kept}");
    }
}
