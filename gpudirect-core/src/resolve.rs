//! From a config and the facts of one step, node and task to the exact environment and
//! pinning a task gets. The SPANK plugin and `gpudirect profiles explain` both call this
//! code, so what an admin sees is what a job gets.
//!
//! Three stages, each pure:
//! 1. [`choose_mode`]: which mode applies (precedence: the step's `--gpudirect` option,
//!    which carries sbatch/salloc's when srun has none, then `SLURM_GPUDIRECT`, then the
//!    node set's default, then the config's default);
//! 2. [`plan_node`]: once per node, which profile, the node's real NIC names, and the
//!    profile's checks against a [`NodeProbe`]; [`plan_node_with_locality`] also takes the
//!    node's PCI [`Locality`] map (read once per node by the caller) for profiles with
//!    `nic_locality = "sysfs"`;
//! 3. [`plan_task`]: per task, the variables to set, the NIC and CPUs by local rank.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::config::{
    CheckKind, Config, Mode, NicClass, NicLocality, NodeSet, Profile, RasSettings, UnknownMode,
    WatchSettings,
};
use crate::cpulist::CpuList;
use crate::locality::{GpuLink, Locality};
use crate::template::{Placeholder, Template};

/// Variables the plugin itself sets (contract: a job reads them to see what was applied).
pub mod vars {
    /// The profile applied to the task.
    pub const PROFILE: &str = "GPUDIRECT_PROFILE";
    /// The task's data NIC (real name on this node).
    pub const NIC: &str = "GPUDIRECT_NIC";
    /// The CPUs the task was pinned to.
    pub const CPUS: &str = "GPUDIRECT_CPUS";
    /// Comma-separated names of the variables the plugin set, so that a step inside a
    /// batch step does not take them for the user's.
    pub const SET: &str = "GPUDIRECT_SET";
    /// The checks skipped on this node because its node set says so.
    pub const SKIPPED_CHECKS: &str = "GPUDIRECT_SKIPPED_CHECKS";
    /// The submitting environment's default mode.
    pub const MODE_ENV: &str = "SLURM_GPUDIRECT";
    /// The RAS address NCCL uses in the task: the job's own (`[ras]`), or the user's
    /// `NCCL_RAS_ADDR`, which is kept. `gpudirect hang` reads it.
    pub const RAS_ADDR: &str = "GPUDIRECT_RAS_ADDR";
}

/// NCCL's variable for its RAS service's address.
pub const NCCL_RAS_ADDR: &str = "NCCL_RAS_ADDR";

/// Where the chosen mode came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeSource {
    /// `--gpudirect` on srun, or on the sbatch/salloc that made the allocation.
    Option,
    /// `SLURM_GPUDIRECT` in the submitting environment.
    Environment,
    /// The node set's `default_mode`.
    NodeSet(String),
    /// The config's `default_mode`.
    ConfigDefault,
}

impl fmt::Display for ModeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModeSource::Option => f.write_str("--gpudirect"),
            ModeSource::Environment => f.write_str(vars::MODE_ENV),
            ModeSource::NodeSet(name) => write!(f, "node set {name}"),
            ModeSource::ConfigDefault => f.write_str("the config's default_mode"),
        }
    }
}

/// The mode that applies to a step on a node, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenMode {
    /// The mode.
    pub mode: Mode,
    /// Where it came from.
    pub source: ModeSource,
}

/// Picks the mode by precedence. `None` when nothing asks for one: the step is untouched.
pub fn choose_mode(
    config: &Config,
    node: &str,
    option: Option<&str>,
    env_mode: Option<&str>,
) -> Result<Option<ChosenMode>, UnknownMode> {
    let explicit = [
        (option, ModeSource::Option),
        (env_mode, ModeSource::Environment),
    ];
    for (text, source) in explicit {
        if let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) {
            let mode = config.parse_mode(text)?;
            return Ok(Some(ChosenMode { mode, source }));
        }
    }
    if let Some(set) = config.node_set_for(node) {
        if let Some(mode) = &set.default_mode {
            return Ok(Some(ChosenMode {
                mode: mode.clone(),
                source: ModeSource::NodeSet(set.name.clone()),
            }));
        }
    }
    Ok(config.default_mode.clone().map(|mode| ChosenMode {
        mode,
        source: ModeSource::ConfigDefault,
    }))
}

/// Why a mode could not be turned into a profile on a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// `auto` on a node no node set covers.
    #[error("--gpudirect=auto: node {node} is in no node set of {config}; add it to a [[node_set]] or name a profile")]
    NoNodeSet {
        /// The node.
        node: String,
        /// The config file.
        config: String,
    },
    /// `auto` on a node whose node set names no profile.
    #[error("--gpudirect=auto: node set {set} (node {node}) names no profile; set its `profile` or name a profile")]
    NoProfile {
        /// The node.
        node: String,
        /// The node set.
        set: String,
    },
}

/// The profile that applies on a node, with its node set.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'c> {
    /// The profile.
    pub profile: &'c Profile,
    /// The node's set, if it has one (for NIC names and skipped checks).
    pub node_set: Option<&'c NodeSet>,
    /// The config's `[ras]`: each job's own RAS address.
    pub ras: RasSettings,
    /// The config's `[watch]`: job telemetry, when configured.
    pub watch: Option<&'c WatchSettings>,
}

/// Turns a mode into the profile for `node`; `Ok(None)` for `none`.
pub fn resolve_profile<'c>(
    config: &'c Config,
    node: &str,
    mode: &Mode,
) -> Result<Option<Resolved<'c>>, ResolveError> {
    let node_set = config.node_set_for(node);
    let name = match mode {
        Mode::None => return Ok(None),
        Mode::Profile(name) => name.as_str(),
        Mode::Auto => {
            let set = node_set.ok_or_else(|| ResolveError::NoNodeSet {
                node: node.to_string(),
                config: config.source.clone(),
            })?;
            set.profile
                .as_deref()
                .ok_or_else(|| ResolveError::NoProfile {
                    node: node.to_string(),
                    set: set.name.clone(),
                })?
        }
    };
    // Modes were checked against the config when parsed, and node-set profiles when
    // the config was read; a miss here means the caller mixed two configs.
    Ok(config.profiles.get(name).map(|profile| Resolved {
        profile,
        node_set,
        ras: config.ras,
        watch: config.watch.as_ref(),
    }))
}

/// What a probed path must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A regular file (a library, the topology file).
    File,
    /// A directory (a library directory, the RxDM socket directory).
    Directory,
    /// A path value of a variable on [`DATA_PATH_VARIABLES`]: checked only when it is a
    /// regular file; a directory (`TMPDIR=/tmp`) or a device is left alone.
    Any,
    /// A path value of any other `[env]` variable: a file or a directory there is checked,
    /// and a path that does not exist yet by the nearest folder above it that does
    /// (whoever may write there could put code in later).
    Code,
}

/// The `[env]` variables whose absolute paths are only written to, or are scratch space,
/// each with the reason: their paths are checked only when they name an existing regular
/// file ([`PathKind::Any`]). Every other variable's absolute paths are checked as code
/// ([`PathKind::Code`]), whatever its name: code is loaded through many more names than any
/// pattern lists (`CUDA_INJECTION64_PATH`, `BASH_ENV`, `GCONV_PATH`, `OPENSSL_CONF`,
/// `NCCL_CONF_FILE`, `PERL5LIB`; security review T4).
pub const DATA_PATH_VARIABLES: [(&str, &str); 6] = [
    (
        "TMPDIR",
        "scratch space; a shared /tmp (mode 1777) is the usual value",
    ),
    ("TMP", "scratch space, as TMPDIR"),
    ("TEMP", "scratch space, as TMPDIR"),
    (
        "NCCL_DEBUG_FILE",
        "NCCL writes its log there (per host and process with %h and %p) and reads nothing from it",
    ),
    (
        "NCCL_TOPO_DUMP_FILE",
        "NCCL writes the topology it found there and reads nothing from it",
    ),
    (
        "NCCL_GRAPH_DUMP_FILE",
        "NCCL writes the graphs it chose there and reads nothing from it",
    ),
];

/// How an `[env]` variable's absolute paths are checked: [`PathKind::Any`] for the names
/// on [`DATA_PATH_VARIABLES`], [`PathKind::Code`] for every other name.
pub fn env_path_kind(name: &str) -> PathKind {
    match DATA_PATH_VARIABLES.iter().any(|(data, _)| *data == name) {
        true => PathKind::Any,
        false => PathKind::Code,
    }
}

/// Variables that decide which network NCCL uses (or whether it uses one): a value of these
/// that the profile did not give (from an NCCL config file, a container image) changes the
/// transport. `gpudirect probe` flags them; the plugin warns when a container keeps one.
pub const TRANSPORT_VARIABLES: [&str; 12] = [
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_COLLNET_ENABLE",
    "NCCL_TOPO_FILE",
    "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME",
    "NCCL_FASTRAK_IFNAME",
];

/// The fix for a [`CheckKind::Ownership`] failure.
pub const OWNERSHIP_FIX: &str = "make it and every directory above it root-owned and not group/other-writable (chown root, chmod go-w)";

/// What the plugin can ask a node: one implementation reads sysfs and the filesystem,
/// tests give data.
pub trait NodeProbe {
    /// `None` if the NIC does not exist, else whether it is up.
    fn nic_up(&self, name: &str) -> Option<bool>;
    /// Whether a regular file exists at `path`.
    fn file_exists(&self, path: &str) -> bool;
    /// Whether the file at `path` can be opened for reading.
    fn file_readable(&self, path: &str) -> bool;
    /// Whether a file that a healthy node may or may not have is at `path` (NCCL's default
    /// profiler, `libnccl-profiler.so`, which NCCL loads when it finds it). The default asks
    /// [`Self::file_exists`]; a probe that assumes every file is there says no instead.
    fn optional_file_exists(&self, path: &str) -> bool {
        self.file_exists(path)
    }
    /// Whether a directory exists at `path`.
    fn dir_exists(&self, path: &str) -> bool;
    /// Whether the directory at `path` holds a listening Unix socket (a daemon is there,
    /// not just its leftover directory). The default trusts the directory's presence.
    fn dir_has_socket(&self, path: &str) -> bool {
        self.dir_exists(path)
    }
    /// `None` if the RDMA device (`/sys/class/infiniband/<name>`) does not exist, else
    /// whether one of its ports is active. The default knows no RDMA device: a probe for
    /// nodes with `data_nic_class = "infiniband"` profiles must override it.
    fn rdma_port_active(&self, name: &str) -> Option<bool> {
        let _ = name;
        None
    }
    /// Why the file or directory at `path` cannot be trusted: someone other than root could
    /// change it or a directory above it, or it is not of `kind` (a FIFO where a file is
    /// expected). The answer names the path at fault. `None` when it is trusted or missing
    /// (whether it must exist is another check's business). The default trusts every path.
    fn untrusted(&self, path: &str, kind: PathKind) -> Option<String> {
        let _ = (path, kind);
        None
    }
}

/// A probe that finds everything present and up: the plan of a healthy node, for
/// `gpudirect profiles explain` off the node and for tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct AssumeHealthy;

impl NodeProbe for AssumeHealthy {
    fn nic_up(&self, _: &str) -> Option<bool> {
        Some(true)
    }
    fn file_exists(&self, _: &str) -> bool {
        true
    }
    fn optional_file_exists(&self, _: &str) -> bool {
        false
    }
    fn file_readable(&self, _: &str) -> bool {
        true
    }
    fn dir_exists(&self, _: &str) -> bool {
        true
    }
    fn rdma_port_active(&self, _: &str) -> Option<bool> {
        Some(true)
    }
}

/// Facts of the step on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepFacts {
    /// Slurm job id.
    pub job_id: u32,
    /// Slurm step id.
    pub step_id: u32,
    /// This node's Slurm name.
    pub node: String,
    /// Nodes in the step.
    pub nnodes: u32,
    /// Tasks of the step on this node.
    pub local_size: u32,
}

/// A check that failed on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFailure {
    /// Which check.
    pub kind: CheckKind,
    /// What was found.
    pub problem: String,
    /// What the admin or user can do.
    pub fix: String,
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.problem, self.fix)
    }
}

/// The profile as it applies to one node.
#[derive(Debug, Clone)]
pub struct NodePlan<'c> {
    /// The profile.
    pub profile: &'c Profile,
    /// The node set, if any.
    pub node_set: Option<String>,
    /// Logical NIC name to real name on this node.
    pub nic_names: BTreeMap<String, String>,
    /// Checks the node set skips here.
    pub skipped: Vec<CheckKind>,
    /// Checks that failed here; empty means the profile applies.
    pub failures: Vec<CheckFailure>,
    /// The step's facts.
    pub step: StepFacts,
    /// Each GPU's nearest data NICs (real names) and CPUs from sysfs, when the profile
    /// says `nic_locality = "sysfs"` and the map was given.
    pub links: Option<Vec<GpuLink>>,
    /// Why the sysfs locality is not used, for the log.
    pub notes: Vec<String>,
    /// The job's own RAS address (`[ras]`), `None` when the config turns it off.
    pub ras_addr: Option<String>,
    /// Job telemetry for the tasks that ask (`[watch]`), `None` when not configured or
    /// its Inspector cannot be trusted on this node (a note says why).
    pub watch: Option<Box<WatchPlan>>,
}

/// What a task that asks for telemetry gets on this node (`[watch]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchPlan {
    /// The config's settings.
    pub settings: WatchSettings,
    /// This job's dump folder on the node.
    pub dump_dir: String,
    /// The connection profiler, where the config names one and it is usable on the node.
    pub connections: Option<String>,
    /// The profiler the profile loads itself on this node, which telemetry replaces
    /// (`[watch] replace_profiler`, [`own_profiler`]).
    pub replaces: Option<String>,
}

impl NodePlan<'_> {
    /// The real name on this node of a NIC the profile names.
    pub fn real_nic<'a>(&'a self, logical: &'a str) -> &'a str {
        self.nic_names
            .get(logical)
            .map(String::as_str)
            .unwrap_or(logical)
    }

    /// The job's own RAS address (`[ras]`) as the profile's tasks get it: `None` when the
    /// config turns it off or the profile sets `NCCL_RAS_ADDR` itself.
    pub fn job_ras_addr(&self) -> Option<&str> {
        let profile_ras = self.profile.env.iter().any(|v| v.name == NCCL_RAS_ADDR);
        self.ras_addr.as_deref().filter(|_| !profile_ras)
    }

    /// One line for the user: which node, what failed, how to fix it.
    pub fn failure_summary(&self) -> Option<String> {
        if self.failures.is_empty() {
            return None;
        }
        let problems: Vec<String> = self.failures.iter().map(ToString::to_string).collect();
        Some(format!(
            "node {}: profile {} not usable: {}",
            self.step.node,
            self.profile.name,
            problems.join("; ")
        ))
    }
}

/// Applies a profile to a node: NIC names from the node set, then the checks.
/// The same as [`plan_node_with_locality`] without a locality map.
pub fn plan_node<'c>(
    resolved: Resolved<'c>,
    step: StepFacts,
    probe: &dyn NodeProbe,
) -> NodePlan<'c> {
    plan_node_with_locality(resolved, step, probe, None)
}

/// Applies a profile to a node: NIC names from the node set, each GPU's NIC and CPUs
/// from `locality` when the profile says `nic_locality = "sysfs"`, then the checks.
pub fn plan_node_with_locality<'c>(
    resolved: Resolved<'c>,
    step: StepFacts,
    probe: &dyn NodeProbe,
    locality: Option<&Locality>,
) -> NodePlan<'c> {
    let profile = resolved.profile;
    let set = resolved.node_set;
    let nic_names: BTreeMap<String, String> = profile
        .control_nic
        .iter()
        .chain(profile.data_nics.iter())
        .map(|logical| {
            let real = set
                .and_then(|s| s.nic_names.get(logical))
                .unwrap_or(logical);
            (logical.clone(), real.clone())
        })
        .collect();
    let skipped_by_set: BTreeSet<CheckKind> = set
        .map(|s| s.skip_checks.iter().copied().collect())
        .unwrap_or_default();
    let ras_addr = resolved.ras.addr(step.job_id);
    let mut watch_note = None;
    let watch = resolved.watch.and_then(|w| {
        let replaces = own_profiler(profile, probe);
        // The Inspector is code every asking job loads: trusted as library_dirs are.
        match unusable_code(probe, &w.inspector) {
            Some(why) => {
                watch_note = Some(format!("[watch] off on this node: {why}"));
                None
            }
            None if replaces.is_some() && !w.replace_profiler => {
                watch_note = Some(format!(
                    "[watch] off for profile {}: it loads its own profiler, {} (NCCL loads one); [watch] replace_profiler = true gives its jobs telemetry instead",
                    profile.name,
                    replaces.as_deref().unwrap_or_default()
                ));
                None
            }
            None => {
                // The connection profiler is code too; without it the Inspector alone runs.
                let connections = w.connections.as_ref().and_then(|lib| {
                    let why = unusable_code(probe, lib);
                    if let Some(why) = &why {
                        watch_note = Some(format!(
                            "[watch] connections off on this node (the Inspector alone): {why}"
                        ));
                    }
                    why.is_none().then(|| lib.clone())
                });
                Some(Box::new(WatchPlan {
                    settings: w.clone(),
                    dump_dir: w.dump_dir(step.job_id),
                    connections,
                    replaces,
                }))
            }
        }
    });
    let mut plan = NodePlan {
        profile,
        node_set: set.map(|s| s.name.clone()),
        nic_names,
        skipped: Vec::new(),
        failures: Vec::new(),
        step,
        links: None,
        notes: watch_note.into_iter().collect(),
        ras_addr,
        watch,
    };
    if profile.nic_locality == NicLocality::Sysfs {
        match locality {
            Some(map) => {
                // Declared data NICs restrict the choice (and keep the control NIC out);
                // with none declared, every NIC of the class is a candidate.
                let declared: BTreeSet<&str> =
                    profile.data_nics.iter().map(|l| plan.real_nic(l)).collect();
                let allowed = |name: &str| declared.is_empty() || declared.contains(name);
                let links = map.links(profile.data_nic_class, &allowed);
                if links.is_empty() {
                    plan.notes.push(
                        "nic_locality = sysfs: no GPU found in sysfs; using gpu_nics/nic_cpus"
                            .into(),
                    );
                } else {
                    plan.links = Some(links);
                }
            }
            None => plan
                .notes
                .push("nic_locality = sysfs: no locality map; using gpu_nics/nic_cpus".into()),
        }
    }
    // Who may change the profile's paths first: a path that fails it is never opened by
    // a later check (a user's symlink to a device, opened as root: security review S9).
    let ownership = ownership_failures(&plan, probe);
    let topology_untrusted = ownership
        .iter()
        .any(|f| f.problem.starts_with("topology_file:"));
    for kind in profile.checks.required() {
        if skipped_by_set.contains(&kind) {
            plan.skipped.push(kind);
            continue;
        }
        if kind == CheckKind::TopologyFile && topology_untrusted {
            plan.notes
                .push("topology_file: not opened, it fails the ownership check".into());
            continue;
        }
        let failures = run_check(&plan, kind, probe);
        plan.failures.extend(failures);
    }
    plan.failures.extend(ownership);
    plan
}

/// Why a library jobs would load (`[watch]`'s profilers) cannot be used on this node: one
/// that others can change ([`PathKind::Code`]), or none there.
fn unusable_code(probe: &dyn NodeProbe, path: &str) -> Option<String> {
    probe
        .untrusted(path, PathKind::Code)
        .or_else(|| (!probe.file_exists(path)).then(|| format!("{path}: no such file")))
}

/// The profiler NCCL would load for this profile's tasks without telemetry: its `[env]`
/// `NCCL_PROFILER_PLUGIN` as written, else the first of its `library_dirs` that holds
/// `libnccl-profiler.so` (the name NCCL tries when that variable is unset).
fn own_profiler(profile: &Profile, probe: &dyn NodeProbe) -> Option<String> {
    let named = profile
        .env
        .iter()
        .find(|v| v.name == "NCCL_PROFILER_PLUGIN")
        .map(|v| v.value.expand(|p| p.to_string()));
    named.or_else(|| {
        profile
            .library_dirs
            .iter()
            .map(|dir| format!("{}/libnccl-profiler.so", dir.trim_end_matches('/')))
            .find(|lib| probe.optional_file_exists(lib))
    })
}

/// The variables job telemetry sets (`[watch]`): dropped together when the task's dump
/// folder cannot be made safely.
pub const WATCH_VARIABLES: [&str; 8] = [
    "NCCL_PROFILER_PLUGIN",
    "NCCL_INSPECTOR_ENABLE",
    "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
    "NCCL_INSPECTOR_DUMP_VERBOSE",
    "NCCL_INSPECTOR_DUMP_DIR",
    "GPUDIRECT_WATCH_CHAIN",
    "GPUDIRECT_WATCH_DIR",
    "GPUDIRECT_WATCH_INTERVAL_MS",
];

/// The Inspector's variables for a task that asks (`GPUDIRECT_WATCH=1`) or for every task
/// (`always`). A user's own value of one is kept, as for any profile variable; the folder is
/// made only when the dump folder is ours.
fn plan_watch(
    plan: &mut TaskPlan,
    watch: &WatchPlan,
    env: &dyn Fn(&str) -> Option<String>,
    set: &mut dyn FnMut(&mut TaskPlan, &str, String, bool),
) {
    let w = &watch.settings;
    if !(w.always || WatchSettings::asked(env)) {
        return;
    }
    let interval_us = u64::from(w.interval_ms) * 1000;
    if let Some(own) = &watch.replaces {
        // `replace_profiler`: the profile's own value goes, so that one value is set.
        plan.set.retain(|(name, _)| name != "NCCL_PROFILER_PLUGIN");
        plan.notes.push(format!(
            "job telemetry replaces the profile's own profiler, {own} (NCCL loads one; [watch] replace_profiler)"
        ));
    }
    match &watch.connections {
        // NCCL loads one profiler: the connection profiler, which hands the Inspector its
        // events (watch-profiler/src/lib.rs says which variables it reads).
        Some(lib) => {
            set(plan, "NCCL_PROFILER_PLUGIN", lib.clone(), false);
            set(plan, "GPUDIRECT_WATCH_CHAIN", w.inspector.clone(), false);
            set(plan, "GPUDIRECT_WATCH_DIR", watch.dump_dir.clone(), false);
            set(
                plan,
                "GPUDIRECT_WATCH_INTERVAL_MS",
                w.interval_ms.to_string(),
                false,
            );
        }
        None => set(plan, "NCCL_PROFILER_PLUGIN", w.inspector.clone(), false),
    }
    set(plan, "NCCL_INSPECTOR_ENABLE", "1".into(), false);
    set(
        plan,
        "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
        interval_us.to_string(),
        false,
    );
    set(
        plan,
        "NCCL_INSPECTOR_DUMP_VERBOSE",
        u8::from(w.verbose).to_string(),
        false,
    );
    set(
        plan,
        "NCCL_INSPECTOR_DUMP_DIR",
        watch.dump_dir.clone(),
        false,
    );
    if plan.set.iter().any(|(n, _)| n == "NCCL_INSPECTOR_DUMP_DIR") {
        plan.watch_dir = Some(watch.dump_dir.clone());
    } else {
        plan.notes
            .push("job telemetry: the user's own NCCL_INSPECTOR_DUMP_DIR kept".into());
    }
    if plan.kept_user.iter().any(|n| n == "NCCL_PROFILER_PLUGIN") {
        plan.notes.push(
            "job telemetry: the user's own NCCL_PROFILER_PLUGIN kept (NCCL loads one profiler)"
                .into(),
        );
    }
}

/// Security review F4: what the profile exports (`LD_LIBRARY_PATH`, `NCCL_TOPO_FILE`, path
/// values of `[env]`) runs or is read in every user's job, so only root may change it, as
/// for the config. Run whatever checks the profile asks for. Every absolute path in an
/// `[env]` value is checked, after the node's placeholders are filled in, as
/// [`env_path_kind`] says (values with task placeholders differ per task and are not
/// checked; a variable that [`crate::config::loads_code`] may not hold one).
fn ownership_failures(plan: &NodePlan<'_>, probe: &dyn NodeProbe) -> Vec<CheckFailure> {
    let profile = plan.profile;
    let mut paths: Vec<(String, String, PathKind)> = profile
        .library_dirs
        .iter()
        // Code: a library folder not there yet is judged by the folder that would hold it,
        // since whoever may create it there decides what the loader finds (review T5).
        .map(|dir| ("library_dirs".to_string(), dir.clone(), PathKind::Code))
        .collect();
    if let Some(file) = &profile.topology_file {
        paths.push(("topology_file".into(), file.clone(), PathKind::File));
    }
    for var in &profile.env {
        let per_node = var.value.placeholders().all(|p| {
            matches!(
                p,
                Placeholder::JobId
                    | Placeholder::StepId
                    | Placeholder::Node
                    | Placeholder::NNodes
                    | Placeholder::LocalSize
            )
        });
        let value = expand(&var.value, plan, None);
        if !per_node {
            continue;
        }
        // Every absolute path in the value, however it is listed (`a:b`, `a,b`, ` a`, `a;b`):
        // NCCL and the loaders it feeds split such lists themselves (security review S5).
        let kind = env_path_kind(&var.name);
        for part in value.split([':', ';', ',', ' ', '\t']).map(str::trim) {
            if part.starts_with('/') {
                paths.push((format!("env.{}", var.name), part.to_string(), kind));
            }
        }
    }
    paths
        .into_iter()
        .filter_map(|(key, path, kind)| {
            probe.untrusted(&path, kind).map(|problem| CheckFailure {
                kind: CheckKind::Ownership,
                problem: format!("{key}: {problem}"),
                fix: OWNERSHIP_FIX.into(),
            })
        })
        .collect()
}

fn run_check(plan: &NodePlan<'_>, kind: CheckKind, probe: &dyn NodeProbe) -> Vec<CheckFailure> {
    let profile = plan.profile;
    let mut failures = Vec::new();
    match kind {
        CheckKind::Nics => {
            let control = profile.control_nic.iter().map(|n| (n, NicClass::Net));
            let data = profile
                .data_nics
                .iter()
                .map(|n| (n, profile.data_nic_class));
            for (logical, class) in control.chain(data) {
                let real = plan.real_nic(logical);
                if class == NicClass::Infiniband {
                    match probe.rdma_port_active(real) {
                        Some(true) => {}
                        Some(false) => failures.push(CheckFailure {
                            kind,
                            problem: format!("RDMA device {real} has no active port"),
                            fix: format!("check the link (`ibstat {real}`) or drain the node"),
                        }),
                        None => failures.push(CheckFailure {
                            kind,
                            problem: format!(
                                "RDMA device {real} is missing (/sys/class/infiniband)"
                            ),
                            fix: "load the driver, or map the name with the node set's nic_names"
                                .into(),
                        }),
                    }
                    continue;
                }
                match probe.nic_up(real) {
                    Some(true) => {}
                    Some(false) => failures.push(CheckFailure {
                        kind,
                        problem: format!("NIC {real} is down"),
                        fix: format!("bring it up (`ip link set {real} up`) or drain the node"),
                    }),
                    None => failures.push(CheckFailure {
                        kind,
                        problem: format!("NIC {real} is missing"),
                        fix:
                            "fix the node's network, or map the name with the node set's nic_names"
                                .into(),
                    }),
                }
            }
        }
        CheckKind::Libraries => {
            for lib in &profile.checks.libraries {
                let found = profile
                    .library_dirs
                    .iter()
                    .map(|dir| format!("{dir}/{lib}"))
                    .find(|path| probe.file_exists(path));
                if let Some(path) = &found {
                    // The directories are checked with every profile ([`ownership_failures`]);
                    // the library itself here.
                    if let Some(problem) = probe.untrusted(path, PathKind::File) {
                        failures.push(CheckFailure {
                            kind,
                            problem: format!("checks.libraries: {problem}"),
                            fix: OWNERSHIP_FIX.into(),
                        });
                    }
                } else {
                    failures.push(CheckFailure {
                        kind,
                        problem: format!(
                            "transport library {lib} not found in {}",
                            profile.library_dirs.join(":")
                        ),
                        fix: "install the transport plugin on this node".into(),
                    });
                }
            }
        }
        CheckKind::TopologyFile => {
            if let Some(file) = &profile.topology_file {
                if !probe.file_readable(file) {
                    failures.push(CheckFailure {
                        kind,
                        problem: format!("topology file {file} is not readable"),
                        fix: "install it or fix its permissions".into(),
                    });
                }
            }
        }
        CheckKind::RxdmSocketDir => {
            if let Some(template) = &profile.checks.rxdm_socket_dir {
                let dir = expand(template, plan, None);
                let fix = "the TCPX receive daemon is not running for this job: start it in the prolog (slurm-conf/tcpx-rxdm-prolog.sh)";
                if !probe.dir_exists(&dir) {
                    failures.push(CheckFailure {
                        kind,
                        problem: format!("RxDM socket directory {dir} is missing"),
                        fix: fix.into(),
                    });
                } else if let Some(problem) = probe.untrusted(&dir, PathKind::Directory) {
                    // Another user could have made it, with their own listening socket,
                    // before root's prolog (security review F4).
                    failures.push(CheckFailure {
                        kind,
                        problem: format!("rxdm_socket_dir: {problem}"),
                        fix: format!("{OWNERSHIP_FIX}; the prolog must make it"),
                    });
                } else if !probe.dir_has_socket(&dir) {
                    failures.push(CheckFailure {
                        kind,
                        problem: format!("RxDM socket directory {dir} has no socket"),
                        fix: fix.into(),
                    });
                }
            }
        }
        // Run by [`ownership_failures`], for every profile.
        CheckKind::Ownership => {}
        // Node health, not a step's business: `gpudirect health` runs them.
        CheckKind::NicSpeed | CheckKind::Gpus | CheckKind::NicCounters => {}
    }
    failures
}

/// Facts of one task.
#[derive(Debug, Clone, Default)]
pub struct TaskFacts {
    /// Global rank in the step.
    pub rank: u32,
    /// Rank on this node.
    pub local_rank: u32,
    /// The task's `CUDA_VISIBLE_DEVICES`, if set.
    pub cuda_visible_devices: Option<String>,
    /// The step's GPUs as the node numbers them (`SLURM_STEP_GPUS`, else `SLURM_JOB_GPUS`),
    /// if set. Under `ConstrainDevices=yes` Slurm numbers `CUDA_VISIBLE_DEVICES` from 0 in
    /// every job, so on a node shared by two jobs only this says which GPU, and so which
    /// NIC and CPUs, a task has (security review F3).
    pub step_gpus: Option<String>,
    /// The CPUs the task may run on now (its affinity mask), if known.
    pub allowed_cpus: Option<CpuList>,
}

/// What the plugin does to one task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskPlan {
    /// Variables to set, in order (overwriting).
    pub set: Vec<(String, String)>,
    /// Variables to remove: ones an enclosing step's profile set that this one does not.
    pub unset: Vec<String>,
    /// The profile's variables the user had set and that were kept.
    pub kept_user: Vec<String>,
    /// The task's GPU, as used for `{gpu}`.
    pub gpu: String,
    /// The task's data NIC (real name), if the profile maps one.
    pub nic: Option<String>,
    /// The CPUs to pin the task to, if pinning applies.
    pub cpus: Option<CpuList>,
    /// Why pinning or NIC mapping did not apply, for the log.
    pub notes: Vec<String>,
    /// The dump folder to make (as the task's user, mode 0700) before the task starts,
    /// when the task gets job telemetry (`[watch]`); its variables are in `set`.
    pub watch_dir: Option<String>,
}

/// The task's GPU entry: its `CUDA_VISIBLE_DEVICES` entry, else its local rank.
fn task_gpu(task: &TaskFacts) -> String {
    let entries: Vec<&str> = task
        .cuda_visible_devices
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    match entries.len() {
        0 => task.local_rank.to_string(),
        1 => entries[0].to_string(),
        n => entries[task.local_rank as usize % n].to_string(),
    }
}

/// Which of the node's GPUs a task's `CUDA_VISIBLE_DEVICES` entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GpuIndex {
    /// The node's GPU number.
    Node(usize),
    /// The step's GPUs are unknown, or the entry is no number (a UUID): the entry itself
    /// (else the local rank) is the best there is.
    Unknown,
    /// The entry can be read two ways that name different GPUs: no NIC and no CPUs are
    /// chosen for it (the note says why).
    Ambiguous(String),
}

/// The node's number of the task's GPU `entry`, from the step's GPU list (`step_gpus`):
/// - the lists are as long: the step's GPU at the entry's place (Slurm's local numbering
///   under ConstrainDevices, or the node's own where both lists name the same GPUs);
/// - the task sees fewer GPUs than the step (`--gpu-bind`, `--gpus-per-task`): the entry
///   is either the node's number (a GPU of the step) or an index into the step's list
///   (Slurm's consolidated numbering under ConstrainDevices, security review S8); when
///   only one reading names a GPU of the step, or both name the same, that one; when
///   they name two different GPUs, [`GpuIndex::Ambiguous`], never a guess.
fn physical_gpu(task: &TaskFacts, entry: &str) -> GpuIndex {
    let list = |text: &Option<String>| -> Vec<String> {
        text.as_deref()
            .unwrap_or("")
            .split(',')
            .map(|e| e.trim().to_string())
            .filter(|e| !e.is_empty())
            .collect()
    };
    let visible = list(&task.cuda_visible_devices);
    let step = list(&task.step_gpus);
    let Ok(number) = entry.parse::<usize>() else {
        return GpuIndex::Unknown;
    };
    if step.is_empty() {
        return GpuIndex::Unknown;
    }
    let step_numbers: Vec<Option<usize>> = step.iter().map(|g| g.parse().ok()).collect();
    if step.len() == visible.len() {
        return visible
            .iter()
            .position(|e| e == entry)
            .and_then(|place| step_numbers[place])
            .map_or(GpuIndex::Unknown, GpuIndex::Node);
    }
    let as_node = step_numbers.contains(&Some(number)).then_some(number);
    let as_index = step_numbers.get(number).copied().flatten();
    match (as_node, as_index) {
        (Some(a), Some(b)) if a != b => GpuIndex::Ambiguous(format!(
            "CUDA_VISIBLE_DEVICES entry {entry} of a step on GPUs {} is GPU {a} or GPU {b}: no NIC pinned, no CPUs pinned",
            step.join(",")
        )),
        (Some(g), _) | (None, Some(g)) => GpuIndex::Node(g),
        (None, None) => GpuIndex::Ambiguous(format!(
            "CUDA_VISIBLE_DEVICES entry {entry} names none of the step's GPUs ({}): no NIC pinned, no CPUs pinned",
            step.join(",")
        )),
    }
}

fn names_in(list: Option<String>) -> BTreeSet<String> {
    list.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Plans one task. `env` reads the task's current environment.
pub fn plan_task(
    node: &NodePlan<'_>,
    task: &TaskFacts,
    env: &dyn Fn(&str) -> Option<String>,
) -> TaskPlan {
    let profile = node.profile;
    let mut plan = TaskPlan {
        gpu: task_gpu(task),
        ..TaskPlan::default()
    };
    place_task(node, task, &mut plan);

    let ours_before = names_in(env(vars::SET));
    let mut ours_now = BTreeSet::new();
    let mut set = |plan: &mut TaskPlan, name: &str, value: String, forced: bool| {
        let user_has_it = env(name).is_some() && !ours_before.contains(name);
        if user_has_it && !forced {
            plan.kept_user.push(name.to_string());
        } else {
            ours_now.insert(name.to_string());
            plan.set.push((name.to_string(), value));
        }
    };
    for var in &profile.env {
        let value = expand(&var.value, node, Some((task, &plan)));
        set(&mut plan, &var.name, value, var.forced);
    }
    if let Some(file) = &profile.topology_file {
        set(&mut plan, "NCCL_TOPO_FILE", file.clone(), false);
    }
    // The job's own RAS address, unless the profile or the user gives one.
    if let Some(addr) = node.job_ras_addr() {
        set(&mut plan, NCCL_RAS_ADDR, addr.to_string(), false);
    }
    if let Some(watch) = &node.watch {
        plan_watch(&mut plan, watch, &env, &mut set);
    }
    let ras_in_effect = plan
        .set
        .iter()
        .find(|(n, _)| n == NCCL_RAS_ADDR)
        .map(|(_, v)| v.clone())
        .or_else(|| {
            env(NCCL_RAS_ADDR).filter(|_| plan.kept_user.iter().any(|k| k == NCCL_RAS_ADDR))
        });
    plan.unset = ours_before
        .iter()
        .filter(|name| !ours_now.contains(*name))
        .cloned()
        .collect();

    if !profile.library_dirs.is_empty() {
        let current = env("LD_LIBRARY_PATH").unwrap_or_default();
        let present: BTreeSet<&str> = current.split(':').collect();
        let mut parts: Vec<&str> = profile
            .library_dirs
            .iter()
            .map(String::as_str)
            .filter(|d| !present.contains(d))
            .collect();
        parts.extend(current.split(':').filter(|p| !p.is_empty()));
        plan.set.push(("LD_LIBRARY_PATH".into(), parts.join(":")));
    }
    plan.set.push((vars::PROFILE.into(), profile.name.clone()));
    match &plan.nic {
        Some(nic) => plan.set.push((vars::NIC.into(), nic.clone())),
        None => plan.unset.push(vars::NIC.into()),
    }
    match &plan.cpus {
        Some(cpus) => plan.set.push((vars::CPUS.into(), cpus.to_string())),
        None => plan.unset.push(vars::CPUS.into()),
    }
    match ras_in_effect {
        Some(addr) => plan.set.push((vars::RAS_ADDR.into(), addr)),
        None => plan.unset.push(vars::RAS_ADDR.into()),
    }
    if node.skipped.is_empty() {
        plan.unset.push(vars::SKIPPED_CHECKS.into());
    } else {
        let names: Vec<&str> = node.skipped.iter().map(|k| k.name()).collect();
        plan.set
            .push((vars::SKIPPED_CHECKS.into(), names.join(",")));
    }
    let names: Vec<&str> = ours_now.iter().map(String::as_str).collect();
    plan.set.push((vars::SET.into(), names.join(",")));
    plan
}

/// The task's NIC and CPUs from its GPU: sysfs's NICs under the GPU's PCIe switch, else
/// the profile's `gpu_nics`; CPUs near the NIC when the profile pins them. Each fallback
/// is noted in the plan.
fn place_task(node: &NodePlan<'_>, task: &TaskFacts, plan: &mut TaskPlan) {
    let profile = node.profile;
    // The node's own number of the GPU picks its NIC and CPUs; a UUID or MIG entry has no
    // index into gpu_nics: the local rank stands in.
    let gpu_index = match physical_gpu(task, &plan.gpu) {
        GpuIndex::Node(i) => Some(i),
        GpuIndex::Unknown => Some(
            plan.gpu
                .parse::<usize>()
                .unwrap_or(task.local_rank as usize),
        ),
        GpuIndex::Ambiguous(why) => {
            plan.notes.push(why);
            None
        }
    };
    if let Some(gpu_index) = gpu_index {
        let link = node.links.as_ref().and_then(|links| links.get(gpu_index));
        if node.links.is_some() && link.is_none() {
            plan.notes.push(format!(
                "GPU {gpu_index} is not among the {} GPUs sysfs shows: using gpu_nics",
                node.links.as_ref().map_or(0, Vec::len)
            ));
        }
        let sysfs_nics = link.filter(|l| !l.nics.is_empty());
        let logical_nic = profile.gpu_nics.get(gpu_index);
        if let Some(link) = sysfs_nics {
            plan.nic = Some(link.nics.join(","));
            plan.notes.push(format!(
                "NIC {} and CPUs from sysfs: GPU {} at {}, NUMA node {}",
                link.nics.join(","),
                gpu_index,
                link.pci,
                link.numa_node.map_or("-".to_string(), |n| n.to_string())
            ));
        } else {
            if logical_nic.is_none() && !profile.gpu_nics.is_empty() {
                plan.notes.push(format!(
                    "GPU {gpu_index} is beyond gpu_nics ({} entries): no NIC pinned",
                    profile.gpu_nics.len()
                ));
            }
            if let Some(link) = link {
                plan.notes.push(format!(
                    "no data NIC under the PCIe switch of GPU {gpu_index} ({}): using gpu_nics",
                    link.pci
                ));
            }
            plan.nic = logical_nic.map(|l| node.real_nic(l).to_string());
        }
        if profile.pin_cpus {
            // sysfs CPUs (the NIC's NUMA node, else the GPU's) first, then the config's.
            let near_cpus = link
                .and_then(|l| l.cpus.as_ref())
                .or_else(|| logical_nic.and_then(|l| profile.nic_cpus.get(l)));
            if let Some(cpus) = near_cpus {
                let usable = match &task.allowed_cpus {
                    Some(allowed) => cpus.intersection(allowed),
                    None => cpus.clone(),
                };
                if usable.is_empty() {
                    plan.notes.push(format!(
                        "none of the NIC's CPUs ({cpus}) are available to the task: not pinned"
                    ));
                } else {
                    plan.cpus = Some(usable);
                }
            }
        }
    }
}

/// How many ports of the `[ras]` range a node tries for a job whose own port it cannot
/// listen on.
pub const RAS_PORT_TRIES: u32 = 8;

/// The job's RAS address on this node, settled where the node runs the job: the job's own
/// port when `free` says this node can listen on it, else the next of the range that it can
/// (at most [`RAS_PORT_TRIES`]), with a note. Another user who binds the job's port first
/// would otherwise leave the job's ranks here without RAS, NCCL ignoring the failed bind
/// (security review T1). NCCL_RAS_ADDR is each process's local query socket only (RAS
/// peers meet on ports of their own), so ports may differ between nodes: `gpudirect hang`
/// reads each node's from its tasks. With no port free the job's own is kept (and said);
/// a profile that sets NCCL_RAS_ADDR itself, or `[ras]` off, is left alone.
pub fn settle_ras_addr(plan: &mut NodePlan<'_>, ras: &RasSettings, free: &dyn Fn(&str) -> bool) {
    let Some(own) = plan.job_ras_addr().map(str::to_string) else {
        return;
    };
    let candidates = ras.candidates(plan.step.job_id, RAS_PORT_TRIES);
    match candidates.iter().find(|addr| free(addr)) {
        Some(addr) if *addr == own => {}
        Some(addr) => {
            plan.notes.push(format!(
                "RAS: {own} is held here by a socket that is not this job's user's (another user's, or one that does not share its port): the job's ranks on this node listen on {addr}"
            ));
            plan.ras_addr = Some(addr.clone());
        }
        None => plan.notes.push(format!(
            "RAS: {own} and the next {} ports are held here by sockets that are not this job's user's: kept {own}, where NCCL's RAS will not start",
            candidates.len().saturating_sub(1)
        )),
    }
}

/// What a task still gets on a node where its profile is not applied (a check failed there
/// and the profile is not strict): the job's own RAS address, `ras_addr`, which the job's
/// tasks on the other nodes get with the profile, so that `gpudirect hang` finds every rank
/// of the job at one address. The address is the job's, not the fabric's: nothing else of
/// the profile comes with it. A user's own `NCCL_RAS_ADDR` is kept and named in
/// `GPUDIRECT_RAS_ADDR`, as [`plan_task`] does.
pub fn plan_job_level(
    ras_addr: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let ours_before = names_in(env(vars::SET));
    match env(NCCL_RAS_ADDR).filter(|_| !ours_before.contains(NCCL_RAS_ADDR)) {
        Some(users) => vec![(vars::RAS_ADDR.into(), users)],
        None => vec![
            (NCCL_RAS_ADDR.into(), ras_addr.into()),
            (vars::RAS_ADDR.into(), ras_addr.into()),
        ],
    }
}

/// For `--gpudirect=none` inside a step whose enclosing step had a profile: the
/// variables that profile set, and ours, are removed so that `none` means none.
pub fn plan_none(env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut unset: Vec<String> = names_in(env(vars::SET)).into_iter().collect();
    if unset.is_empty() && env(vars::PROFILE).is_none() {
        return Vec::new();
    }
    unset.extend(
        [
            vars::PROFILE,
            vars::NIC,
            vars::CPUS,
            vars::SET,
            vars::SKIPPED_CHECKS,
            vars::RAS_ADDR,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    unset
}

/// The data NICs on this node: the profile's, renamed; with none declared, every NIC the
/// sysfs map found near a GPU, in GPU order.
fn data_nics<'a>(node: &'a NodePlan<'_>) -> Vec<&'a str> {
    if !node.profile.data_nics.is_empty() || node.links.is_none() {
        return node
            .profile
            .data_nics
            .iter()
            .map(|n| node.real_nic(n))
            .collect();
    }
    let mut seen = BTreeSet::new();
    node.links
        .iter()
        .flatten()
        .flat_map(|l| l.nics.iter().map(String::as_str))
        .filter(|n| seen.insert(*n))
        .collect()
}

fn expand(
    template: &Template,
    node: &NodePlan<'_>,
    task: Option<(&TaskFacts, &TaskPlan)>,
) -> String {
    let profile = node.profile;
    template.expand(|placeholder| match placeholder {
        Placeholder::JobId => node.step.job_id.to_string(),
        Placeholder::StepId => node.step.step_id.to_string(),
        Placeholder::Node => node.step.node.clone(),
        Placeholder::NNodes => node.step.nnodes.to_string(),
        Placeholder::LocalSize => node.step.local_size.to_string(),
        Placeholder::Rank => task.map(|(t, _)| t.rank.to_string()).unwrap_or_default(),
        Placeholder::LocalRank => task
            .map(|(t, _)| t.local_rank.to_string())
            .unwrap_or_default(),
        Placeholder::Gpu => task.map(|(_, p)| p.gpu.clone()).unwrap_or_default(),
        Placeholder::Nic => task.and_then(|(_, p)| p.nic.clone()).unwrap_or_default(),
        Placeholder::Cpus => task
            .and_then(|(_, p)| p.cpus.as_ref().map(ToString::to_string))
            .unwrap_or_default(),
        Placeholder::ControlNic => profile
            .control_nic
            .as_deref()
            .map(|n| node.real_nic(n).to_string())
            .unwrap_or_default(),
        Placeholder::DataNics => data_nics(node).join(","),
        Placeholder::NicNamed(name) => node.real_nic(name).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_config;

    const CONFIG: &str = r#"
[profiles.tcpx]
transport = "GPUDirectTCPX"
control_nic = "eth0"
data_nics = ["eth1", "eth2", "eth3", "eth4"]
gpu_nics = ["eth1", "eth1", "eth2", "eth2", "eth3", "eth3", "eth4", "eth4"]
library_dirs = ["/var/lib/tcpx/lib64"]
pin_cpus = true
forced = ["NCCL_NET"]
[profiles.tcpx.nic_cpus]
eth1 = "0-1"
eth2 = "2-3"
eth3 = "4-5"
eth4 = "6-7"
[profiles.tcpx.env]
NCCL_NET = "GPUDirectTCPX_v7"
NCCL_SOCKET_IFNAME = "{control_nic}"
NCCL_GPUDIRECTTCPX_SOCKET_IFNAME = "{data_nics}"
NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX = "/run/tcpx-{job_id}"
TX_BINDINGS = "{nic:eth1}:8-21;{nic:eth2}:8-21"
MY_RANK = "{node}/{rank}/{local_rank}/{gpu}/{nic}/{cpus}"
[profiles.tcpx.checks]
nics = true
libraries = ["libnccl-net.so"]
rxdm_socket_dir = "/run/tcpx-{job_id}"

[profiles.plain]
[profiles.plain.env]
NCCL_DEBUG = "INFO"

[[node_set]]
name = "slurm-image"
hosts = "a3h-[001-004]"
profile = "tcpx"
nic_names = { eth0 = "enp0s12", eth1 = "enp6s0", eth2 = "enp12s0", eth3 = "enp134s0", eth4 = "enp140s0" }

[[node_set]]
name = "staging"
hosts = "stage[1-2]"
profile = "tcpx"
default_mode = "auto"
skip_checks = ["libraries", "rxdm_socket_dir"]
"#;

    struct Probe {
        nics: Vec<(&'static str, bool)>,
        files: Vec<&'static str>,
        dirs: Vec<&'static str>,
    }

    impl NodeProbe for Probe {
        fn nic_up(&self, name: &str) -> Option<bool> {
            self.nics
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, up)| *up)
        }
        fn file_exists(&self, path: &str) -> bool {
            self.files.contains(&path)
        }
        fn file_readable(&self, path: &str) -> bool {
            self.files.contains(&path)
        }
        fn dir_exists(&self, path: &str) -> bool {
            self.dirs.contains(&path)
        }
    }

    /// Counts the opens of the topology file, and says every path is someone else's.
    struct Spy {
        opened: std::cell::Cell<usize>,
    }

    impl NodeProbe for Spy {
        fn nic_up(&self, _: &str) -> Option<bool> {
            Some(true)
        }
        fn file_exists(&self, _: &str) -> bool {
            true
        }
        fn file_readable(&self, _: &str) -> bool {
            self.opened.set(self.opened.get() + 1);
            true
        }
        fn dir_exists(&self, _: &str) -> bool {
            true
        }
        fn untrusted(&self, path: &str, _: PathKind) -> Option<String> {
            Some(format!("{path} is owned by uid 1000, not root"))
        }
    }

    #[test]
    fn env_paths_are_code_unless_the_name_is_on_the_data_list() {
        for name in [
            "CUDA_INJECTION64_PATH",
            "BASH_ENV",
            "GCONV_PATH",
            "NCCL_NET_PLUGIN",
        ] {
            assert_eq!(env_path_kind(name), PathKind::Code, "{name}");
        }
        for (name, why) in DATA_PATH_VARIABLES {
            assert_eq!(env_path_kind(name), PathKind::Any, "{name}");
            // A name the S5 patterns call code is never exempted.
            assert!(!crate::config::loads_code(name), "{name}");
            assert!(!why.is_empty());
        }
    }

    #[test]
    fn a_topology_file_that_fails_the_ownership_check_is_never_opened() {
        let config = parse_config(
            "[profiles.t]\ntopology_file = \"/home/u/topo.xml\"\n[profiles.t.checks]\ntopology_file = true\n\
             [[node_set]]\nname = \"a\"\nhosts = \"n1\"\nprofile = \"t\"\n",
            "t.toml",
        )
        .unwrap();
        let resolved = resolve_profile(&config, "n1", &Mode::Auto)
            .unwrap()
            .unwrap();
        let spy = Spy {
            opened: std::cell::Cell::new(0),
        };
        let plan = plan_node(resolved, step("n1"), &spy);
        assert_eq!(
            spy.opened.get(),
            0,
            "opened before the ownership check refused it"
        );
        assert!(plan.failures.iter().any(|f| f
            .problem
            .starts_with("topology_file: /home/u/topo.xml is owned by uid 1000")));
    }

    fn eth_probe() -> Probe {
        Probe {
            nics: ["eth0", "eth1", "eth2", "eth3", "eth4"]
                .into_iter()
                .map(|n| (n, true))
                .collect(),
            files: vec![],
            dirs: vec![],
        }
    }

    fn step(node: &str) -> StepFacts {
        StepFacts {
            job_id: 77,
            step_id: 0,
            node: node.into(),
            nnodes: 2,
            local_size: 8,
        }
    }

    fn config() -> Config {
        parse_config(CONFIG, "test.toml").unwrap()
    }

    fn node_plan<'c>(config: &'c Config, node: &str, mode: &str, probe: &Probe) -> NodePlan<'c> {
        let mode = config.parse_mode(mode).unwrap();
        let resolved = resolve_profile(config, node, &mode).unwrap().unwrap();
        plan_node(resolved, step(node), probe)
    }

    fn get<'a>(plan: &'a TaskPlan, name: &str) -> Option<&'a str> {
        plan.set
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn precedence_option_env_nodeset_config() {
        let c = config();
        let pick = |node, opt, env| choose_mode(&c, node, opt, env).unwrap();
        assert_eq!(
            pick("x", Some("plain"), Some("tcpx")).unwrap().mode,
            Mode::Profile("plain".into())
        );
        let env = pick("x", None, Some("tcpx")).unwrap();
        assert_eq!(env.source, ModeSource::Environment);
        let set = pick("stage1", None, None).unwrap();
        assert_eq!(set.mode, Mode::Auto);
        assert_eq!(set.source, ModeSource::NodeSet("staging".into()));
        assert_eq!(
            pick("x", None, None),
            None,
            "no default anywhere: untouched"
        );
        assert_eq!(pick("stage1", Some("none"), None).unwrap().mode, Mode::None);
        assert!(choose_mode(&c, "x", Some("bogus"), None).is_err());
        assert!(choose_mode(&c, "x", None, Some("bogus")).is_err());
        let with_default = parse_config("default_mode = \"none\"\n", "t").unwrap();
        let chosen = choose_mode(&with_default, "x", None, None)
            .unwrap()
            .unwrap();
        assert_eq!(chosen.source, ModeSource::ConfigDefault);
    }

    #[test]
    fn auto_needs_a_node_set() {
        let c = config();
        let r = resolve_profile(&c, "stage2", &Mode::Auto).unwrap().unwrap();
        assert_eq!(r.profile.name, "tcpx");
        let e = resolve_profile(&c, "lonely", &Mode::Auto).unwrap_err();
        assert!(
            e.to_string().contains("node lonely is in no node set"),
            "{e}"
        );
        assert!(resolve_profile(&c, "x", &Mode::None).unwrap().is_none());
    }

    #[test]
    fn tcpx_task_gets_variables_nic_and_cpus_by_local_rank() {
        let c = config();
        let mut probe = eth_probe();
        probe.files.push("/var/lib/tcpx/lib64/libnccl-net.so");
        probe.dirs.push("/run/tcpx-77");
        let node = node_plan(&c, "n1", "tcpx", &probe);
        assert!(node.failures.is_empty(), "{:?}", node.failures);
        let nics: Vec<Option<String>> = (0..8)
            .map(|r| {
                let task = TaskFacts {
                    rank: 8 + r,
                    local_rank: r,
                    ..Default::default()
                };
                plan_task(&node, &task, &|_| None).nic
            })
            .collect();
        assert_eq!(nics[0].as_deref(), Some("eth1"));
        assert_eq!(nics[1].as_deref(), Some("eth1"));
        assert_eq!(nics[2].as_deref(), Some("eth2"));
        assert_eq!(nics[7].as_deref(), Some("eth4"));

        let task = TaskFacts {
            rank: 13,
            local_rank: 5,
            ..Default::default()
        };
        let plan = plan_task(&node, &task, &|_| None);
        assert_eq!(get(&plan, "NCCL_NET"), Some("GPUDirectTCPX_v7"));
        assert_eq!(get(&plan, "NCCL_SOCKET_IFNAME"), Some("eth0"));
        assert_eq!(
            get(&plan, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"),
            Some("eth1,eth2,eth3,eth4")
        );
        assert_eq!(
            get(&plan, "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"),
            Some("/run/tcpx-77")
        );
        assert_eq!(get(&plan, "MY_RANK"), Some("n1/13/5/5/eth3/4-5"));
        assert_eq!(get(&plan, "GPUDIRECT_PROFILE"), Some("tcpx"));
        assert_eq!(get(&plan, "GPUDIRECT_NIC"), Some("eth3"));
        assert_eq!(get(&plan, "GPUDIRECT_CPUS"), Some("4-5"));
        assert_eq!(get(&plan, "LD_LIBRARY_PATH"), Some("/var/lib/tcpx/lib64"));
        assert_eq!(
            plan.cpus.as_ref().map(ToString::to_string).as_deref(),
            Some("4-5")
        );
        let set_list = get(&plan, "GPUDIRECT_SET").unwrap();
        assert!(set_list.contains("NCCL_NET") && !set_list.contains("GPUDIRECT_PROFILE"));
    }

    #[test]
    fn node_set_renames_nics_everywhere() {
        let c = config();
        let probe = Probe {
            nics: ["enp0s12", "enp6s0", "enp12s0", "enp134s0", "enp140s0"]
                .into_iter()
                .map(|n| (n, true))
                .collect(),
            files: vec!["/var/lib/tcpx/lib64/libnccl-net.so"],
            dirs: vec!["/run/tcpx-77"],
        };
        let node = node_plan(&c, "a3h-002", "auto", &probe);
        assert!(node.failures.is_empty(), "{:?}", node.failures);
        let task = TaskFacts {
            local_rank: 2,
            ..Default::default()
        };
        let plan = plan_task(&node, &task, &|_| None);
        assert_eq!(get(&plan, "NCCL_SOCKET_IFNAME"), Some("enp0s12"));
        assert_eq!(get(&plan, "TX_BINDINGS"), Some("enp6s0:8-21;enp12s0:8-21"));
        assert_eq!(get(&plan, "GPUDIRECT_NIC"), Some("enp12s0"));
    }

    #[test]
    fn gpu_comes_from_cuda_visible_devices() {
        let c = config();
        let node = node_plan(&c, "stage1", "tcpx", &eth_probe());
        let nic_of = |cvd: &str, local_rank| {
            let task = TaskFacts {
                local_rank,
                cuda_visible_devices: Some(cvd.into()),
                ..Default::default()
            };
            let plan = plan_task(&node, &task, &|_| None);
            (plan.gpu.clone(), plan.nic.clone())
        };
        assert_eq!(nic_of("6", 0), ("6".into(), Some("eth4".into())));
        assert_eq!(
            nic_of("0,1,2,3,4,5,6,7", 3),
            ("3".into(), Some("eth2".into()))
        );
        assert_eq!(
            nic_of("GPU-3f2a", 4),
            ("GPU-3f2a".into(), Some("eth3".into()))
        );
    }

    #[test]
    fn the_nic_follows_the_nodes_gpu_not_the_jobs_numbering() {
        // Two jobs share a node under ConstrainDevices=yes: each sees its GPUs as 0-3, and
        // only SLURM_STEP_GPUS says the second job's are the node's 4-7.
        let c = config();
        let node = node_plan(&c, "stage1", "tcpx", &eth_probe());
        let nic_of = |cvd: &str, step: Option<&str>, local_rank| {
            let task = TaskFacts {
                local_rank,
                cuda_visible_devices: Some(cvd.into()),
                step_gpus: step.map(str::to_string),
                ..Default::default()
            };
            plan_task(&node, &task, &|_| None).nic
        };
        assert_eq!(nic_of("0,1,2,3", Some("0,1,2,3"), 0), Some("eth1".into()));
        assert_eq!(nic_of("0,1,2,3", Some("4,5,6,7"), 0), Some("eth3".into()));
        assert_eq!(nic_of("0,1,2,3", Some("4,5,6,7"), 3), Some("eth4".into()));
        // Without ConstrainDevices both lists name the node's GPUs.
        assert_eq!(nic_of("4,5,6,7", Some("4,5,6,7"), 0), Some("eth3".into()));
        // The task sees fewer GPUs than the step (security review S8): entry 2 of a step on
        // GPUs 4-7 is no GPU of the step, so it is the step's third, GPU 6 (eth4), never
        // GPU 2's eth2 (another job's); an entry that is a GPU of the step is that GPU.
        assert_eq!(nic_of("2", Some("4,5,6,7"), 0), Some("eth4".into()));
        assert_eq!(nic_of("0,1", Some("4,5,6,7"), 0), Some("eth3".into()));
        assert_eq!(nic_of("5", Some("4,5,6,7"), 0), Some("eth3".into()));
        // Entry 3 of a step on GPUs 1,3,5,7 is GPU 3 or the step's fourth, GPU 7: no NIC.
        assert_eq!(nic_of("3", Some("1,3,5,7"), 0), None);
        // No step list: the entry itself, as before.
        assert_eq!(nic_of("6", None, 0), Some("eth4".into()));
    }

    /// A task's environment that holds exactly `vars`.
    fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(var, _)| *var == name)
                .map(|(_, value)| value.to_string())
        }
    }

    /// The plan of a default task on `stage1` (every NIC up) in `mode`, in `env`.
    fn stage1_task(mode: &str, env: &dyn Fn(&str) -> Option<String>) -> TaskPlan {
        let c = config();
        let node = node_plan(&c, "stage1", mode, &eth_probe());
        plan_task(&node, &TaskFacts::default(), env)
    }

    #[test]
    fn user_values_survive_unless_forced() {
        let plan = stage1_task(
            "tcpx",
            &env_of(&[
                ("NCCL_SOCKET_IFNAME", "=eth9"),
                ("NCCL_NET", "Socket"),
                ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64"),
            ]),
        );
        assert_eq!(get(&plan, "NCCL_SOCKET_IFNAME"), None);
        assert_eq!(plan.kept_user, ["NCCL_SOCKET_IFNAME"]);
        assert_eq!(get(&plan, "NCCL_NET"), Some("GPUDirectTCPX_v7"), "forced");
        assert_eq!(
            get(&plan, "LD_LIBRARY_PATH"),
            Some("/var/lib/tcpx/lib64:/usr/local/cuda/lib64")
        );
    }

    /// Every job its own RAS port (`[ras]`, default 28100 + job id mod 900), a user's own
    /// address kept and reported, and an admin's `enabled = false` leaves it alone.
    #[test]
    fn each_job_gets_its_own_ras_address_unless_the_user_or_the_admin_says_otherwise() {
        let plan = stage1_task("tcpx", &|_| None);
        assert_eq!(
            get(&plan, "NCCL_RAS_ADDR"),
            Some("127.0.0.1:28177"),
            "job 77"
        );
        assert_eq!(get(&plan, vars::RAS_ADDR), Some("127.0.0.1:28177"));
        assert!(get(&plan, vars::SET).unwrap().contains("NCCL_RAS_ADDR"));
        let c = config();
        let node = node_plan(&c, "stage1", "tcpx", &eth_probe());
        let other_job = NodePlan {
            ras_addr: c.ras.addr(977),
            ..node
        };
        let plan = plan_task(&other_job, &TaskFacts::default(), &|_| None);
        assert_eq!(
            get(&plan, "NCCL_RAS_ADDR"),
            Some("127.0.0.1:28177"),
            "977 = 77 mod 900"
        );

        let mine = stage1_task("tcpx", &env_of(&[("NCCL_RAS_ADDR", "127.0.0.1:31000")]));
        assert_eq!(get(&mine, "NCCL_RAS_ADDR"), None);
        assert!(mine.kept_user.contains(&"NCCL_RAS_ADDR".to_string()));
        assert_eq!(get(&mine, vars::RAS_ADDR), Some("127.0.0.1:31000"));

        let off = parse_config(&format!("{CONFIG}\n[ras]\nenabled = false\n"), "t.toml").unwrap();
        let node = node_plan(&off, "stage1", "tcpx", &eth_probe());
        let plan = plan_task(&node, &TaskFacts::default(), &|_| None);
        assert_eq!(get(&plan, "NCCL_RAS_ADDR"), None);
        assert!(plan.unset.contains(&vars::RAS_ADDR.to_string()));
        let custom = parse_config(
            &format!("{CONFIG}\n[ras]\nport_base = 40000\nport_span = 10\n"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(custom.ras.addr(77).as_deref(), Some("127.0.0.1:40007"));
        assert!(plan_none(&env_of(&[("GPUDIRECT_PROFILE", "tcpx")]))
            .contains(&vars::RAS_ADDR.to_string()));
    }

    /// Security review T1: a job's own RAS port held by another user's socket moves the
    /// job's ranks on that node to the next free port of the range; free, it stays; none
    /// free, it stays and a note says NCCL's RAS will not start.
    #[test]
    fn a_held_ras_port_moves_the_jobs_ranks_to_the_next_free_one() {
        let c = config();
        let mut node = node_plan(&c, "stage1", "tcpx", &eth_probe());
        settle_ras_addr(&mut node, &c.ras, &|_| true);
        assert_eq!(node.ras_addr.as_deref(), Some("127.0.0.1:28177"));
        assert!(
            node.notes.iter().all(|n| !n.starts_with("RAS")),
            "{:?}",
            node.notes
        );

        let held = ["127.0.0.1:28177", "127.0.0.1:28178"];
        let mut node = node_plan(&c, "stage1", "tcpx", &eth_probe());
        settle_ras_addr(&mut node, &c.ras, &|a| !held.contains(&a));
        assert_eq!(node.ras_addr.as_deref(), Some("127.0.0.1:28179"));
        assert!(node
            .notes
            .iter()
            .any(|n| n.contains("listen on 127.0.0.1:28179")));
        let task = plan_task(&node, &TaskFacts::default(), &|_| None);
        assert_eq!(get(&task, "NCCL_RAS_ADDR"), Some("127.0.0.1:28179"));
        assert_eq!(get(&task, vars::RAS_ADDR), Some("127.0.0.1:28179"));

        // The last port of the range wraps to the first.
        let wrap = NodePlan {
            step: StepFacts {
                job_id: 899,
                ..step("stage1")
            },
            ras_addr: c.ras.addr(899),
            ..node_plan(&c, "stage1", "tcpx", &eth_probe())
        };
        let mut wrap = wrap;
        settle_ras_addr(&mut wrap, &c.ras, &|a| a != "127.0.0.1:28999");
        assert_eq!(wrap.ras_addr.as_deref(), Some("127.0.0.1:28100"));

        let mut node = node_plan(&c, "stage1", "tcpx", &eth_probe());
        settle_ras_addr(&mut node, &c.ras, &|_| false);
        assert_eq!(node.ras_addr.as_deref(), Some("127.0.0.1:28177"));
        assert!(
            node.notes.iter().any(|n| n.contains("will not start")),
            "{:?}",
            node.notes
        );
    }

    /// Issue #45: on a node whose profile is not applied (a NIC down, a lenient profile),
    /// the tasks still get the job's RAS address, as the job's other nodes do; a user's own
    /// is kept; one an enclosing step's profile set is the job's and is set again.
    #[test]
    fn a_node_without_its_profile_still_gets_the_jobs_ras_address() {
        let c = config();
        let mut probe = eth_probe();
        probe.nics.retain(|(n, _)| *n != "eth3");
        probe.nics.push(("eth3", false));
        let node = node_plan(&c, "stage1", "tcpx", &probe);
        assert!(node.failure_summary().unwrap().contains("NIC eth3 is down"));
        let addr = node.job_ras_addr().expect("[ras] is on by default");
        assert_eq!(addr, "127.0.0.1:28177");
        assert_eq!(
            plan_job_level(addr, &|_| None),
            [
                ("NCCL_RAS_ADDR".to_string(), addr.to_string()),
                (vars::RAS_ADDR.to_string(), addr.to_string())
            ]
        );
        let users = env_of(&[("NCCL_RAS_ADDR", "127.0.0.1:31000")]);
        assert_eq!(
            plan_job_level(addr, &users),
            [(vars::RAS_ADDR.to_string(), "127.0.0.1:31000".to_string())]
        );
        let enclosing = env_of(&[
            ("NCCL_RAS_ADDR", "127.0.0.1:28177"),
            (vars::SET, "NCCL_NET,NCCL_RAS_ADDR"),
        ]);
        assert_eq!(plan_job_level(addr, &enclosing).len(), 2);
    }

    #[test]
    fn variables_set_by_an_enclosing_step_are_ours_not_the_users() {
        let env = env_of(&[
            ("GPUDIRECT_SET", "NCCL_NET,NCCL_DEBUG"),
            ("NCCL_NET", "GPUDirectTCPX_v7"),
            ("NCCL_DEBUG", "WARN"),
        ]);
        let plan = stage1_task("plain", &env);
        assert_eq!(
            get(&plan, "NCCL_DEBUG"),
            Some("INFO"),
            "ours before: replaced"
        );
        assert!(
            plan.unset.contains(&"NCCL_NET".to_string()),
            "not in this profile: removed"
        );
        assert!(plan.kept_user.is_empty());
        let none = plan_none(&env);
        assert!(
            none.contains(&"NCCL_NET".to_string())
                && none.contains(&"GPUDIRECT_PROFILE".to_string())
        );
        assert!(plan_none(&|_| None).is_empty());
    }

    #[test]
    fn checks_fail_with_node_and_fix_and_node_sets_skip_them() {
        let c = config();
        let mut probe = eth_probe();
        probe.nics.retain(|(n, _)| *n != "eth4");
        probe.nics.push(("eth4", false));
        let node = node_plan(&c, "n7", "tcpx", &probe);
        let kinds: Vec<CheckKind> = node.failures.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                CheckKind::Nics,
                CheckKind::Libraries,
                CheckKind::RxdmSocketDir
            ]
        );
        let summary = node.failure_summary().unwrap();
        assert!(
            summary.starts_with("node n7: profile tcpx not usable: NIC eth4 is down"),
            "{summary}"
        );
        assert!(summary.contains("/run/tcpx-77"), "{summary}");

        probe.nics.retain(|(n, _)| *n != "eth4");
        let staging = node_plan(&c, "stage1", "tcpx", &probe);
        assert_eq!(
            staging.skipped,
            [CheckKind::Libraries, CheckKind::RxdmSocketDir]
        );
        assert_eq!(staging.failures.len(), 1);
        assert_eq!(staging.failures[0].problem, "NIC eth4 is missing");
        let plan = plan_task(
            &node_plan(&c, "stage1", "tcpx", &eth_probe()),
            &TaskFacts::default(),
            &|_| None,
        );
        assert_eq!(
            get(&plan, "GPUDIRECT_SKIPPED_CHECKS"),
            Some("libraries,rxdm_socket_dir")
        );
    }

    fn shipped() -> Config {
        let text = include_str!("../../slurm-conf/gpudirect.toml");
        parse_config(text, "gpudirect.toml").unwrap()
    }

    fn sysfs_plan<'c>(
        config: &'c Config,
        node: &str,
        mode: &str,
        probe: &Probe,
        fixture: &str,
    ) -> NodePlan<'c> {
        let map = Locality::read(&crate::locality::fixture(fixture)).unwrap();
        let mode = config.parse_mode(mode).unwrap();
        let resolved = resolve_profile(config, node, &mode).unwrap().unwrap();
        plan_node_with_locality(resolved, step(node), probe, Some(&map))
    }

    fn task(local_rank: u32) -> TaskFacts {
        TaskFacts {
            local_rank,
            ..Default::default()
        }
    }

    #[test]
    fn tcpxo_on_a3_mega_takes_each_gpus_nic_and_numa_cpus_from_sysfs() {
        let c = shipped();
        let node = sysfs_plan(&c, "a3m-0007", "auto", &eth_probe(), "a3-mega");
        let links = node.links.as_ref().unwrap();
        assert_eq!(links.len(), 8);
        let plan = plan_task(&node, &task(3), &|_| None);
        assert_eq!(plan.nic.as_deref(), Some("enp14s0"));
        assert_eq!(get(&plan, "GPUDIRECT_NIC"), Some("enp14s0"));
        assert_eq!(get(&plan, "GPUDIRECT_CPUS"), Some("0-51,104-155"));
        assert_eq!(
            get(&plan, "NCCL_FASTRAK_IFNAME"),
            Some("enp6s0,enp7s0,enp13s0,enp14s0,enp134s0,enp135s0,enp141s0,enp142s0")
        );
        assert_eq!(get(&plan, "NCCL_FASTRAK_CTRL_DEV"), Some("enp0s12"));
        assert!(plan.notes[0].contains("from sysfs"), "{:?}", plan.notes);
        let plan = plan_task(&node, &task(6), &|_| None);
        assert_eq!(plan.nic.as_deref(), Some("enp141s0"));
        assert_eq!(get(&plan, "GPUDIRECT_CPUS"), Some("52-103,156-207"));
    }

    #[test]
    fn sysfs_locality_on_a3_high_matches_the_configured_table() {
        let mut c = config();
        let tcpx = c.profiles.get_mut("tcpx").unwrap();
        tcpx.nic_locality = NicLocality::Sysfs;
        let from_config: Vec<Option<String>> = (0..8)
            .map(|r| {
                plan_task(
                    &node_plan(&config(), "n1", "tcpx", &eth_probe()),
                    &task(r),
                    &|_| None,
                )
                .nic
            })
            .collect();
        let node = sysfs_plan(&c, "n1", "tcpx", &eth_probe(), "a3-high");
        let from_sysfs: Vec<Option<String>> = (0..8)
            .map(|r| plan_task(&node, &task(r), &|_| None).nic)
            .collect();
        assert_eq!(from_sysfs, from_config);
        // The CPUs are the NUMA node's, not the config's narrower test lists.
        let plan = plan_task(&node, &task(5), &|_| None);
        assert_eq!(get(&plan, "GPUDIRECT_CPUS"), Some("52-103,156-207"));
    }

    #[test]
    fn efa_on_p5_names_four_devices_per_gpu_without_declaring_any() {
        let c = shipped();
        let mut probe = eth_probe();
        probe.files.push("/opt/amazon/ofi-nccl/lib/libnccl-net.so");
        let node = sysfs_plan(&c, "p5-001", "efa", &probe, "p5");
        assert!(node.failures.is_empty(), "{:?}", node.failures);
        let plan = plan_task(&node, &task(5), &|_| None);
        assert_eq!(
            plan.nic.as_deref(),
            Some("rdmap164s0,rdmap165s0,rdmap166s0,rdmap167s0")
        );
        assert_eq!(get(&plan, "GPUDIRECT_CPUS"), Some("48-95,144-191"));
        assert_eq!(get(&plan, "FI_PROVIDER"), Some("efa"));
    }

    #[test]
    fn ib_pins_one_hca_per_rank_and_falls_back_without_sysfs() {
        let c = shipped();
        let resolved = resolve_profile(&c, "gpu01", &Mode::Profile("ib".into()))
            .unwrap()
            .unwrap();
        let node = plan_node(resolved, step("gpu01"), &eth_probe());
        assert!(node.links.is_none());
        assert!(
            node.notes[0].contains("no locality map"),
            "{:?}",
            node.notes
        );
        let plan = plan_task(&node, &task(3), &|_| None);
        assert_eq!(get(&plan, "NCCL_IB_HCA"), Some("=mlx5_3"));
        assert_eq!(get(&plan, "NCCL_NET"), Some("IB"));
        assert_eq!(plan.cpus, None, "no sysfs, no nic_cpus: not pinned");
        // The HCAs are RDMA devices: the nics check looks in /sys/class/infiniband.
        let kinds: Vec<&str> = node.failures.iter().map(|f| f.problem.as_str()).collect();
        assert_eq!(kinds.len(), 8, "{kinds:?}");
        assert!(
            kinds[0].starts_with("RDMA device mlx5_0 is missing"),
            "{kinds:?}"
        );
    }

    #[test]
    fn rdma_devices_are_probed_as_such() {
        struct Rdma;
        impl NodeProbe for Rdma {
            fn nic_up(&self, name: &str) -> Option<bool> {
                (name == "eth0").then_some(true)
            }
            fn file_exists(&self, _: &str) -> bool {
                true
            }
            fn file_readable(&self, _: &str) -> bool {
                true
            }
            fn dir_exists(&self, _: &str) -> bool {
                true
            }
            fn rdma_port_active(&self, name: &str) -> Option<bool> {
                name.strip_prefix("mlx5_").map(|n| n != "7")
            }
        }
        let c = shipped();
        let resolved = resolve_profile(&c, "gpu01", &Mode::Profile("ib".into()))
            .unwrap()
            .unwrap();
        let node = plan_node(resolved, step("gpu01"), &Rdma);
        assert_eq!(node.failures.len(), 1, "{:?}", node.failures);
        assert_eq!(
            node.failures[0].problem,
            "RDMA device mlx5_7 has no active port"
        );
    }

    #[test]
    fn gpu_without_a_near_nic_falls_back_to_gpu_nics() {
        let c = shipped();
        // The tcpxo profile's data NICs on the COS node set are eth1..eth8, which the
        // a3-mega tree (Slurm-image names) does not have: nothing is near.
        let node = sysfs_plan(&c, "a3m-cos-0001", "auto", &eth_probe(), "a3-mega");
        let plan = plan_task(&node, &task(2), &|_| None);
        assert_eq!(plan.nic.as_deref(), Some("eth3"));
        assert!(
            plan.notes
                .iter()
                .any(|n| n.contains("no data NIC under the PCIe switch")),
            "{:?}",
            plan.notes
        );
        assert_eq!(get(&plan, "GPUDIRECT_CPUS"), Some("0-51,104-155"));
    }

    #[test]
    fn pinning_skips_cpus_the_node_lacks() {
        let c = config();
        let node = node_plan(&c, "stage1", "tcpx", &eth_probe());
        let task = TaskFacts {
            local_rank: 6,
            allowed_cpus: Some(CpuList::parse("0-1").unwrap()),
            ..Default::default()
        };
        let plan = plan_task(&node, &task, &|_| None);
        assert_eq!(plan.cpus, None);
        assert!(plan.unset.contains(&"GPUDIRECT_CPUS".to_string()));
        assert!(plan.notes[0].contains("not pinned"), "{:?}", plan.notes);
        let task = TaskFacts {
            local_rank: 9,
            ..Default::default()
        };
        let plan = plan_task(&node, &task, &|_| None);
        assert_eq!(plan.nic, None);
        assert!(plan.notes[0].contains("beyond gpu_nics"));
    }

    /// `[watch]`: a task that asks gets the Inspector's variables and its job's folder; one
    /// that does not gets nothing; `always` asks for every task; a user's own profiler is
    /// kept; an Inspector that is not on the node turns it off there, with a note.
    #[test]
    fn job_telemetry_reaches_the_tasks_that_ask() {
        let text = format!(
            "{CONFIG}\n[watch]\ninspector = \"/opt/insp/lib/libnccl-profiler-inspector.so\"\ndump_root = \"/local\"\n"
        );
        let c = parse_config(&text, "t.toml").unwrap();
        let mut probe = eth_probe();
        probe
            .files
            .push("/opt/insp/lib/libnccl-profiler-inspector.so");
        let node = node_plan(&c, "stage1", "tcpx", &probe);
        let asked = plan_task(
            &node,
            &TaskFacts::default(),
            &env_of(&[("GPUDIRECT_WATCH", "1")]),
        );
        assert_eq!(
            get(&asked, "NCCL_PROFILER_PLUGIN"),
            Some("/opt/insp/lib/libnccl-profiler-inspector.so")
        );
        assert_eq!(get(&asked, "NCCL_INSPECTOR_ENABLE"), Some("1"));
        assert_eq!(
            get(&asked, "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"),
            Some("1000000")
        );
        assert_eq!(
            get(&asked, "NCCL_INSPECTOR_DUMP_DIR"),
            Some("/local/gpudirect-watch-77")
        );
        assert_eq!(
            asked.watch_dir.as_deref(),
            Some("/local/gpudirect-watch-77")
        );
        assert!(get(&asked, vars::SET)
            .unwrap()
            .contains("NCCL_INSPECTOR_DUMP_DIR"));

        let quiet = plan_task(&node, &TaskFacts::default(), &|_| None);
        assert_eq!(get(&quiet, "NCCL_PROFILER_PLUGIN"), None);
        assert_eq!(quiet.watch_dir, None);

        let own = plan_task(
            &node,
            &TaskFacts::default(),
            &env_of(&[
                ("GPUDIRECT_WATCH", "1"),
                ("NCCL_PROFILER_PLUGIN", "/home/u/mine.so"),
            ]),
        );
        assert_eq!(get(&own, "NCCL_PROFILER_PLUGIN"), None);
        assert!(own
            .notes
            .iter()
            .any(|n| n.contains("own NCCL_PROFILER_PLUGIN kept")));

        let always = parse_config(
            &format!("{text}always = true\ninterval_ms = 500\n"),
            "t.toml",
        )
        .unwrap();
        let node = node_plan(&always, "stage1", "tcpx", &probe);
        let task = plan_task(&node, &TaskFacts::default(), &|_| None);
        assert_eq!(
            get(&task, "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"),
            Some("500000")
        );

        let missing = node_plan(&c, "stage1", "tcpx", &eth_probe());
        assert!(missing.watch.is_none());
        assert!(missing
            .notes
            .iter()
            .any(|n| n.contains("[watch] off on this node")));
        let task = plan_task(
            &missing,
            &TaskFacts::default(),
            &env_of(&[("GPUDIRECT_WATCH", "1")]),
        );
        assert_eq!(get(&task, "NCCL_PROFILER_PLUGIN"), None);
    }

    /// NCCL loads one profiler: a profile that loads its own (its `[env]`, or NCCL's default
    /// name in its library folder, as GCP's gIB images ship CoMMA) keeps it and its jobs get
    /// no telemetry, said; with `replace_profiler` telemetry replaces it, said, one value set.
    #[test]
    fn a_profiles_own_profiler_is_kept_unless_the_admin_lets_telemetry_replace_it() {
        let watch = "\n[watch]\ninspector = \"/opt/insp/lib/libnccl-profiler-inspector.so\"\n";
        let named = CONFIG.replace(
            "[profiles.tcpx.env]\n",
            "[profiles.tcpx.env]\nNCCL_PROFILER_PLUGIN = \"/opt/comma/libnccl-profiler-comma.so\"\n",
        );
        let mut probe = eth_probe();
        probe
            .files
            .push("/opt/insp/lib/libnccl-profiler-inspector.so");
        let ask = env_of(&[("GPUDIRECT_WATCH", "1")]);

        let kept = parse_config(&format!("{named}{watch}"), "t.toml").unwrap();
        let node = node_plan(&kept, "stage1", "tcpx", &probe);
        assert!(node.watch.is_none());
        assert!(
            node.notes
                .iter()
                .any(|n| n.contains("[watch] off for profile tcpx")
                    && n.contains("/opt/comma/libnccl-profiler-comma.so")
                    && n.contains("replace_profiler = true")),
            "{:?}",
            node.notes
        );
        let task = plan_task(&node, &TaskFacts::default(), &ask);
        assert_eq!(
            get(&task, "NCCL_PROFILER_PLUGIN"),
            Some("/opt/comma/libnccl-profiler-comma.so")
        );
        assert_eq!(get(&task, "NCCL_INSPECTOR_ENABLE"), None);

        let replaced = parse_config(
            &format!("{named}{watch}replace_profiler = true\n"),
            "t.toml",
        )
        .unwrap();
        let node = node_plan(&replaced, "stage1", "tcpx", &probe);
        let task = plan_task(&node, &TaskFacts::default(), &ask);
        let values: Vec<&str> = task
            .set
            .iter()
            .filter(|(n, _)| n == "NCCL_PROFILER_PLUGIN")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(values, ["/opt/insp/lib/libnccl-profiler-inspector.so"]);
        assert!(task.notes.iter().any(|n| n.contains(
            "replaces the profile's own profiler, /opt/comma/libnccl-profiler-comma.so"
        )));
        // A task that does not ask keeps the profile's profiler.
        let quiet = plan_task(&node, &TaskFacts::default(), &|_| None);
        assert_eq!(
            get(&quiet, "NCCL_PROFILER_PLUGIN"),
            Some("/opt/comma/libnccl-profiler-comma.so")
        );

        // NCCL's default name in a library folder is a profiler the profile loads too.
        let plain = parse_config(&format!("{CONFIG}{watch}"), "t.toml").unwrap();
        probe.files.push("/var/lib/tcpx/lib64/libnccl-profiler.so");
        let node = node_plan(&plain, "stage1", "tcpx", &probe);
        assert!(node.watch.is_none());
        assert!(node
            .notes
            .iter()
            .any(|n| n.contains("/var/lib/tcpx/lib64/libnccl-profiler.so")));
    }

    /// `[watch] connections`: the connection profiler is what NCCL loads, the Inspector
    /// chained behind it, both told the job's folder; where the profiler is not on the
    /// node, the Inspector alone, with a note.
    #[test]
    fn the_connection_profiler_is_loaded_with_the_inspector_chained_behind_it() {
        let text = format!(
            "{CONFIG}\n[watch]\ninspector = \"/opt/insp/lib/libnccl-profiler-inspector.so\"\nconnections = \"/opt/gdw/lib/libgpudirect_watch_profiler.so\"\ndump_root = \"/local\"\ninterval_ms = 500\n"
        );
        let c = parse_config(&text, "t.toml").unwrap();
        let mut probe = eth_probe();
        probe
            .files
            .push("/opt/insp/lib/libnccl-profiler-inspector.so");
        let ask = env_of(&[("GPUDIRECT_WATCH", "1")]);
        let inspector_only = node_plan(&c, "stage1", "tcpx", &probe);
        assert!(inspector_only
            .notes
            .iter()
            .any(|n| n.contains("[watch] connections off on this node")
                && n.contains("libgpudirect_watch_profiler.so: no such file")));
        let task = plan_task(&inspector_only, &TaskFacts::default(), &ask);
        assert_eq!(
            get(&task, "NCCL_PROFILER_PLUGIN"),
            Some("/opt/insp/lib/libnccl-profiler-inspector.so")
        );
        assert_eq!(get(&task, "GPUDIRECT_WATCH_CHAIN"), None);

        probe
            .files
            .push("/opt/gdw/lib/libgpudirect_watch_profiler.so");
        let node = node_plan(&c, "stage1", "tcpx", &probe);
        let task = plan_task(&node, &TaskFacts::default(), &ask);
        assert_eq!(
            get(&task, "NCCL_PROFILER_PLUGIN"),
            Some("/opt/gdw/lib/libgpudirect_watch_profiler.so")
        );
        assert_eq!(
            get(&task, "GPUDIRECT_WATCH_CHAIN"),
            Some("/opt/insp/lib/libnccl-profiler-inspector.so")
        );
        assert_eq!(
            get(&task, "GPUDIRECT_WATCH_DIR"),
            Some("/local/gpudirect-watch-77")
        );
        assert_eq!(get(&task, "GPUDIRECT_WATCH_INTERVAL_MS"), Some("500"));
        assert_eq!(
            get(&task, "NCCL_INSPECTOR_DUMP_DIR"),
            Some("/local/gpudirect-watch-77")
        );
        let bad = parse_config(
            &format!("{CONFIG}\n[watch]\ninspector = \"/a.so\"\nconnections = \"b.so\"\n"),
            "t.toml",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(bad.contains("watch.connections"), "{bad}");
    }

    #[test]
    fn a_watch_table_is_checked_key_by_key() {
        let bad = |table: &str| {
            parse_config(&format!("{CONFIG}\n[watch]\n{table}"), "t.toml")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(bad("inspector = \"lib.so\"\n").contains("watch.inspector"));
        assert!(bad("inspector = \"/a.so\"\ninterval_ms = 5\n").contains("from 100 to 3600000"));
        assert!(bad("inspector = \"/a.so\"\ndump_dir = \"/x\"\n").contains("dump_dir"));
        assert!(bad("dump_root = \"/x\"\n").contains("inspector"));
        let ok = parse_config(
            &format!("{CONFIG}\n[watch]\ninspector = \"/a.so\"\n"),
            "t.toml",
        )
        .unwrap();
        let w = ok.watch.unwrap();
        assert_eq!(
            (w.dump_root.as_str(), w.interval_ms, w.verbose, w.always),
            ("/tmp", 1000, true, false)
        );
    }
}
