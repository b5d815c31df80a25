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
//! - slurmstepd (`remote`), once per node in `user_init`: the config is read (skipped for
//!   a step that asks for no mode when a mark says this very config leaves such steps on
//!   this node untouched: [`gpudirect_core::marks`]), the mode chosen by precedence, the
//!   profile resolved for this node and its checks run ([`gpudirect_core::resolve`]).
//! - slurmstepd, per task in `task_init` (in the task's own process, just before exec):
//!   the task's variables are set and its CPU affinity pinned.
//!
//! All the rules live in the shared `gpudirect-core` crate; this file is only the glue to
//! Slurm. It runs as root inside slurmstepd: it reads one root-owned config named by the
//! admin, runs no shell, starts no thread, and never lets a panic cross into Slurm (the
//! slurm-spank crate catches them at each callback; `panic = "unwind"` is required).

use std::error::Error;
use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use gpudirect_core::config::{sanitize_for_message, Config, NicLocality};
use gpudirect_core::locality::Locality;
use gpudirect_core::marks::{UntouchedMarks, MARKS_DIR};
use gpudirect_core::resolve::{
    choose_mode, plan_node_with_locality, plan_none, plan_task, resolve_profile, vars, NodePlan,
    StepFacts, TaskFacts,
};
use gpudirect_core::system::{
    check_config_file, current_affinity, load_config_stamped, set_affinity, short_hostname,
    FileStamp, Ownership, SystemProbe,
};
use slurm_spank::{spank_log, spank_sys, Context, LogLevel, Plugin, SpankHandle};

/// Every message starts with this, so users and admins know who speaks.
const NAME: &str = "gpudirect";

/// The SPANK option, as users write it: `--gpudirect=MODE`.
const OPTION: &CStr = c"gpudirect";

/// A mode longer than this cannot be a profile name: it is refused unread.
const MAX_MODE_LEN: usize = 64;

#[no_mangle]
#[used]
/// Slurm's plugin loader reads these three symbols.
pub static plugin_name: [u8; 10] = *b"gpudirect\0";
#[no_mangle]
#[used]
/// The plugin type Slurm expects of a SPANK plugin.
pub static plugin_type: [u8; 6] = *b"spank\0";
#[no_mangle]
#[used]
/// The Slurm version the plugin was built against.
pub static plugin_version: c_uint = spank_sys::SLURM_VERSION_NUMBER;

/// The config's path from plugstack.conf (or why there is none), set in `init`.
static CONFIG_PATH: OnceLock<Result<String, String>> = OnceLock::new();

/// The config, read at most once per process: in slurmstepd at `init`; in srun, sbatch
/// and salloc only when a mode was asked for, so that a step without `--gpudirect` does
/// not pay for reading it. Kept in a static (not in the plugin struct) because the
/// option callback, a plain C function, needs it too, and per-node plans borrow from it
/// for the process's lifetime.
static CONFIG: OnceLock<Result<Config, String>> = OnceLock::new();

/// The version of the config file that [`CONFIG`] was read from.
static CONFIG_STAMP: OnceLock<FileStamp> = OnceLock::new();

/// The `--gpudirect` value Slurm handed to our option callback, if any.
static OPTION_VALUE: Mutex<Option<String>> = Mutex::new(None);

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
    /// The profile cannot be applied here; `strict` fails the step.
    Unusable { message: String, strict: bool },
}

/// The plugin's state in one process (srun, sbatch, or one slurmstepd).
#[derive(Default)]
struct GpuDirect {
    node: NodeDecision,
}

/// Plugin arguments from plugstack.conf.
fn config_path_from_args(args: &[&str]) -> Result<String, String> {
    let mut path = None;
    for arg in args {
        match arg.split_once('=') {
            Some(("config", value)) if value.starts_with('/') => path = Some(value.to_string()),
            Some(("config", _)) => {
                return Err("plugstack.conf: config= needs an absolute path".into())
            }
            _ => {
                return Err(format!(
                    "plugstack.conf: unknown argument `{}` (the plugin takes config=/etc/slurm/gpudirect.toml)",
                    sanitize_for_message(arg)
                ))
            }
        }
    }
    path.ok_or_else(|| {
        "plugstack.conf: add config=/etc/slurm/gpudirect.toml after spank_gpudirect.so".into()
    })
}

fn config() -> Result<&'static Config, String> {
    let loaded = CONFIG.get_or_init(|| match CONFIG_PATH.get() {
        Some(Ok(path)) => load_config_stamped(Path::new(path), Ownership::RootOnly)
            .map(|(config, stamp)| {
                let _ = CONFIG_STAMP.set(stamp);
                config
            })
            .map_err(|e| e.to_string()),
        Some(Err(e)) => Err(e.clone()),
        None => Err("the config path is unknown (plugin init did not run)".into()),
    });
    loaded.as_ref().map_err(Clone::clone)
}

/// Called by Slurm for `--gpudirect=MODE` in every context where options are processed.
/// Returning -1 makes srun/sbatch/salloc refuse the command line before submitting.
extern "C" fn option_callback(_val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    let outcome = std::panic::catch_unwind(|| {
        if optarg.is_null() {
            log_error("--gpudirect needs a value: a profile name, `auto` or `none`");
            return -1;
        }
        // SAFETY: Slurm passes a NUL-terminated string that lives during the call.
        let bytes = unsafe { CStr::from_ptr(optarg) }.to_bytes();
        let value = String::from_utf8_lossy(bytes).into_owned();
        if bytes.len() > MAX_MODE_LEN {
            log_error(&format!(
                "--gpudirect value of {} bytes refused: a mode is a profile name, `auto` or `none`",
                bytes.len()
            ));
            return -1;
        }
        if remote == 0 {
            // In srun/sbatch/salloc: refuse unknown modes now. A broken config cannot
            // validate anything; init already reported it, and the step will say so.
            if let Ok(config) = config() {
                if let Err(e) = config.parse_mode(&value) {
                    log_error(&e.to_string());
                    return -1;
                }
            }
        }
        match OPTION_VALUE.lock() {
            Ok(mut slot) => *slot = Some(value),
            Err(_) => return -1,
        }
        0
    });
    outcome.unwrap_or(-1)
}

fn option_value() -> Option<String> {
    OPTION_VALUE.lock().ok().and_then(|v| v.clone())
}

/// Registers `--gpudirect` with our own callback, so that a bad value is refused at
/// parse time (slurm-spank's generic callback accepts any value).
fn register_option(spank: spank_sys::spank_t) -> Result<(), String> {
    let usage = "Apply a fabric profile from the admin's config to every task (NCCL/transport \
         variables, library path, NIC and CPU pinning by local rank). MODE: a profile \
         (`gpudirect profiles list`), `auto` (this node's default) or `none`.";
    // Slurm keeps the pointers: the strings must live as long as the process.
    let usage = CString::new(usage)
        .map_err(|_| "usage text has a NUL".to_string())?
        .into_raw();
    let mut option = spank_sys::spank_option {
        name: OPTION.as_ptr(),
        arginfo: c"MODE".as_ptr(),
        usage,
        has_arg: 1,
        val: 0,
        cb: Some(option_callback),
    };
    // SAFETY: `spank` is the handle Slurm gave this init callback; `option` is valid.
    let rc = unsafe { spank_sys::spank_option_register(spank, &mut option) };
    if rc == spank_sys::ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(format!("could not register --gpudirect (spank error {rc})"))
    }
}

/// This build's id (spank-plugin/build.rs): marks written by another build never count.
const BUILD_ID: &str = env!("GPUDIRECT_BUILD_ID");

/// Whether the step asks for a mode itself: `--gpudirect` or SLURM_GPUDIRECT. A value
/// that cannot be read (not UTF-8) counts as asking: the full read then reports it.
fn step_asks_for_mode(spank: &SpankHandle) -> bool {
    let asked = |m: &String| !m.trim().is_empty();
    option_value().is_some_and(|m| asked(&m))
        || spank
            .getenv(vars::MODE_ENV)
            .unwrap_or_else(|_| Some("unreadable".into()))
            .is_some_and(|m| asked(&m))
}

/// This node's Slurm name, as slurmd knows it (slurmstepd's own SLURMD_NODENAME), else the
/// short host name. Never the step's SLURMD_NODENAME: that is the user's environment, and
/// srun inside a batch script carries the batch host's name to every node of the step.
fn node_name() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(short_hostname)
}

impl GpuDirect {
    /// slurmstepd: whether a mark shows that this step, asking for no mode, is left
    /// untouched by this very config on this node, so the config need not be read.
    fn marked_untouched(spank: &SpankHandle, node: &str) -> bool {
        let Some(Ok(path)) = CONFIG_PATH.get() else {
            return false;
        };
        if step_asks_for_mode(spank) {
            return false;
        }
        // The same ownership checks as a full read, without reading: a config made
        // writable by others since it was marked is refused as before.
        let Ok(config) = check_config_file(Path::new(path), Ownership::RootOnly) else {
            return false;
        };
        UntouchedMarks::open(Path::new(MARKS_DIR))
            .is_some_and(|marks| marks.contains(node, &config, BUILD_ID))
    }

    /// slurmstepd, after a full read: marks the config version that was read when it
    /// leaves steps on this node that ask for no mode untouched. Errors are never marked.
    fn mark_if_untouched(node: &str) {
        let (Some(Ok(config)), Some(read)) = (CONFIG.get(), CONFIG_STAMP.get()) else {
            return;
        };
        if !matches!(choose_mode(config, node, None, None), Ok(None)) {
            return;
        }
        if let Some(marks) = UntouchedMarks::open(Path::new(MARKS_DIR)) {
            if let Err(e) = marks.record(node, read, BUILD_ID) {
                log_verbose(&format!("node {node}: no mark in {MARKS_DIR}: {e}"));
            }
        }
    }

    /// Runs in slurmstepd once per node: decides what every task of the step gets.
    fn decide(&self, spank: &SpankHandle, node: String) -> Result<NodeDecision, String> {
        let config = config().map_err(|e| format!("node {node}: {e}"))?;
        let option = option_value();
        let env_mode = spank.getenv(vars::MODE_ENV).map_err(|_| {
            format!(
                "node {node}: {} is not valid UTF-8: set it to a profile name, `auto` or `none`",
                vars::MODE_ENV
            )
        })?;
        let chosen = choose_mode(config, &node, option.as_deref(), env_mode.as_deref())
            .map_err(|e| format!("node {node}: {e}"))?;
        let Some(chosen) = chosen else {
            return Ok(NodeDecision::Untouched);
        };
        let resolved = resolve_profile(config, &node, &chosen.mode).map_err(|e| e.to_string())?;
        let Some(resolved) = resolved else {
            return Ok(NodeDecision::NoneMode);
        };
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
        let plan = plan_node_with_locality(resolved, step, &SystemProbe, locality.as_ref());
        for note in &plan.notes {
            log_verbose(&format!("node {}: {note}", plan.step.node));
        }
        if let Some(summary) = plan.failure_summary() {
            return Ok(NodeDecision::Unusable {
                message: summary,
                strict: plan.profile.strict,
            });
        }
        log_verbose(&format!(
            "node {}: profile {} from {} (node set {})",
            plan.step.node,
            plan.profile.name,
            chosen.source,
            plan.node_set.as_deref().unwrap_or("-")
        ));
        Ok(NodeDecision::Apply(plan))
    }

    fn apply_to_task(plan: &NodePlan<'static>, spank: &SpankHandle) -> Result<(), Box<dyn Error>> {
        let facts = TaskFacts {
            rank: spank.task_global_id()?,
            local_rank: u32::try_from(spank.task_id()?).unwrap_or(0),
            cuda_visible_devices: spank.getenv("CUDA_VISIBLE_DEVICES").ok().flatten(),
            allowed_cpus: current_affinity(),
        };
        let env = |name: &str| spank.getenv(name).ok().flatten();
        let task = plan_task(plan, &facts, &env);
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
        Ok(())
    }
}

/// Writes one line to the task's stderr, which srun shows the user.
fn tell_user(message: &str) {
    eprintln!("{NAME}: {message}");
}

// SAFETY: the plugin starts no threads and touches no state outside its own statics.
unsafe impl Plugin for GpuDirect {
    /// The crate's default installs a tracing subscriber on first call; this plugin logs
    /// through the SPANK log only, and srun should pay nothing for it.
    fn setup(&mut self, _spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        Ok(())
    }

    fn init_post_opt(&mut self, spank: &mut SpankHandle) -> Result<(), Box<dyn Error>> {
        if !matches!(spank.context()?, Context::Local | Context::Allocator) {
            return Ok(());
        }
        let option = option_value();
        let env_mode = std::env::var(vars::MODE_ENV)
            .ok()
            .filter(|m| !m.trim().is_empty());
        let Some(requested) = option.clone().or_else(|| env_mode.clone()) else {
            // No mode asked for: nothing to check, and no config to read.
            return Ok(());
        };
        match config() {
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
        let node = node_name();
        if GpuDirect::marked_untouched(spank, &node) {
            self.node = NodeDecision::Untouched;
            return Ok(());
        }
        match self.decide(spank, node.clone()) {
            Ok(decision) => self.node = decision,
            Err(message) => {
                log_error(&message);
                self.node = NodeDecision::Unusable {
                    message,
                    strict: false,
                };
            }
        }
        GpuDirect::mark_if_untouched(&node);
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
            NodeDecision::Apply(plan) => GpuDirect::apply_to_task(plan, spank),
            NodeDecision::Unusable { message, strict } => {
                let first_task = spank.task_id().map(|id| id == 0).unwrap_or(true);
                if *strict {
                    if first_task {
                        tell_user(&format!("{message}; the profile is strict: the step fails"));
                    }
                    log_error(message);
                    // An optional plugin's error is ignored by Slurm; a strict profile
                    // must still stop the task before it runs without its transport.
                    // SAFETY: we are in the task's forked process, before exec.
                    unsafe { libc::_exit(1) };
                }
                if first_task {
                    tell_user(&format!(
                        "{message}; the step runs without the profile (or fails, where plugstack.conf says `required`)"
                    ));
                }
                // An error here fails the step when plugstack.conf says `required`.
                Err(message.clone().into())
            }
        }
    }
}

/// Exports one SPANK callback, routed through slurm-spank's panic guard.
///
/// slurm-spank's `SPANK_PLUGIN!` exports every callback, including job_prolog/epilog,
/// whose mere presence makes slurmd run an extra pass per job (measured: 43 ms against
/// 30 ms for `srun -N1 true`). Exporting only what we implement keeps the plugin free.
macro_rules! export_callback {
    ($c_name:ident, $method:ident) => {
        #[no_mangle]
        #[doc(hidden)]
        pub extern "C" fn $c_name(
            spank: spank_sys::spank_t,
            ac: c_int,
            argv: *const *const c_char,
        ) -> c_int {
            slurm_spank::spank_callback_with_globals::<GpuDirect, _>(|plugin, options, _setup| {
                let mut handle = slurm_spank::init_spank_handle(spank, ac, argv, options);
                plugin.$method(&mut handle)
            })
        }
    };
}

export_callback!(slurm_spank_init_post_opt, init_post_opt);
export_callback!(slurm_spank_user_init, user_init);
export_callback!(slurm_spank_task_init, task_init);

/// `slurm_spank_init`: reads the config and registers `--gpudirect` (all user contexts).
#[no_mangle]
#[doc(hidden)]
pub extern "C" fn slurm_spank_init(
    spank: spank_sys::spank_t,
    ac: c_int,
    argv: *const *const c_char,
) -> c_int {
    slurm_spank::spank_callback_with_globals::<GpuDirect, _>(|_plugin, options, _setup| {
        let handle = slurm_spank::init_spank_handle(spank, ac, argv, options);
        if !matches!(
            handle.context()?,
            Context::Local | Context::Allocator | Context::Remote
        ) {
            return Ok(());
        }
        let path = handle
            .plugin_argv()
            .map_err(|e| e.to_string())
            .and_then(|args| config_path_from_args(&args));
        let _ = CONFIG_PATH.set(path);
        register_option(spank)?;
        match handle.context()? {
            // slurmstepd reads the config, and reports every error, in user_init: from there
            // a broken config reaches the user and, under `required`, fails the tasks. (A
            // failed init would fail the launch with nothing but "Plugin initialization
            // failed", and srun 22.05 would still exit 0.)
            Context::Remote => Ok(()),
            // srun/sbatch/salloc read the config only when a mode is asked for (the
            // option callback, init_post_opt). A bad plugstack line fails init, which
            // stops them only under `required`.
            _ => match CONFIG_PATH.get() {
                Some(Err(e)) => Err(e.clone().into()),
                _ => Ok(()),
            },
        }
    })
}

/// Slurm 22.05 lacks `spank_prepend_task_argv`, which slurm-spank 0.4 binds; without this
/// definition the plugin would not load. The plugin never calls it.
#[no_mangle]
#[doc(hidden)]
pub extern "C" fn spank_prepend_task_argv(
    _spank: spank_sys::spank_t,
    _argc: c_int,
    _argv: *mut *const c_char,
) -> spank_sys::spank_err_t {
    spank_sys::slurm_err_t_ESPANK_NOT_AVAIL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments() {
        assert_eq!(
            config_path_from_args(&["config=/etc/slurm/gpudirect.toml"]),
            Ok("/etc/slurm/gpudirect.toml".into())
        );
        assert!(config_path_from_args(&[])
            .unwrap_err()
            .contains("add config="));
        assert!(config_path_from_args(&["config=rel.toml"])
            .unwrap_err()
            .contains("absolute"));
        assert!(config_path_from_args(&["conf=/x"])
            .unwrap_err()
            .contains("unknown argument"));
    }

    /// This test binary links the unwinder as the plugin does (build.rs): a panic must
    /// still unwind to the guard, as slurm-spank's does at each callback.
    #[test]
    fn panics_unwind_with_the_static_unwinder() {
        let caught = std::panic::catch_unwind(|| {
            let message = String::from("boom");
            panic!("{message}");
        });
        assert!(caught.is_err());
    }

    #[test]
    fn plugin_symbols_are_nul_terminated() {
        assert_eq!(
            CStr::from_bytes_with_nul(&plugin_name).unwrap(),
            c"gpudirect"
        );
        assert_eq!(CStr::from_bytes_with_nul(&plugin_type).unwrap(), c"spank");
    }
}
