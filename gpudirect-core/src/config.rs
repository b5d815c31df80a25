//! The admin's TOML config: profiles and node sets, read once into checked types.
//!
//! ```toml
//! default_mode = "auto"               # optional; steps without --gpudirect use it
//!
//! [profiles.tcpx]
//! description = "GCP a3-highgpu-8g, GPUDirect-TCPX"
//! transport = "GPUDirectTCPX"         # the NET/<name> NCCL must use between nodes
//! control_nic = "eth0"
//! data_nics = ["eth1", "eth2", "eth3", "eth4"]
//! gpu_nics = ["eth1", "eth1", "eth2", "eth2", "eth3", "eth3", "eth4", "eth4"]
//! library_dirs = ["/var/lib/tcpx/lib64"]
//! pin_cpus = true
//! line_rate_gbit = 200                # each data NIC's line rate (or { eth1 = 200, ... }):
//!                                     # busbw is also shown as a share of their sum
//! forced = ["NCCL_NET"]               # set even where the user set it
//! [profiles.tcpx.nic_cpus]
//! eth1 = "8-21,112-125"
//! [profiles.tcpx.env]
//! NCCL_NET = "GPUDirectTCPX_v7"
//! NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX = "/run/tcpx-{job_id}"
//! [profiles.tcpx.checks]
//! nics = true
//! libraries = ["libnccl-net.so"]
//! rxdm_socket_dir = "/run/tcpx-{job_id}"
//!
//! [[node_set]]
//! name = "a3-high"
//! hosts = "a3h-[0001-0512]"
//! profile = "tcpx"                    # what `--gpudirect=auto` picks here
//! skip_checks = []                    # e.g. ["libraries", "rxdm_socket_dir"] on staging;
//!                                     # "nic_speed" and "gpus" are gpudirect health's
//! nic_names = { eth0 = "enp0s12", eth1 = "enp6s0" }   # the image's real NIC names
//! ```
//!
//! Two keys change where per-GPU NICs come from and what a NIC name means:
//!
//! ```toml
//! [profiles.ib]
//! data_nic_class = "infiniband"       # data_nics are RDMA devices (/sys/class/infiniband),
//!                                     # as NCCL_IB_HCA names them; default "net" (netdevs)
//! data_nics = ["mlx5_0", "mlx5_1"]
//! nic_locality = "sysfs"              # each GPU's NIC and CPUs from the PCIe layout;
//!                                     # default "config" (gpu_nics and nic_cpus)
//! gpu_nics = ["mlx5_0", "mlx5_1"]     # with "sysfs": the fallback where sysfs is unreadable
//! ```
//!
//! A profile can extend another: it inherits every key of the base that it does not write
//! itself. `gpudirect tune --write` makes such profiles for the settings it found:
//!
//! ```toml
//! [profiles.tcpx-tuned]
//! extends = "tcpx"                    # a profile that extends none itself
//! description = "tcpx with NCCL_MIN_NCHANNELS=32"
//! [profiles.tcpx-tuned.env]           # merged with tcpx's [env]: these values win
//! NCCL_MIN_NCHANNELS = "32"
//! ```
//!
//! A key the profile writes replaces the base's whole (`data_nics`, `nic_cpus`, `checks`,
//! ...), except `env`, merged by variable name, and `forced`, the union of both lists. The
//! base may be written anywhere in the file. The merge is made before any check, so every
//! check holds for the merged profile, and a message about an inherited key points at the
//! base's line.
//!
//! Every key is checked: an unknown key, a template with an unknown placeholder, a NIC
//! that the profile does not declare, a relative path, each is an error that names the
//! file, line and key. The checked types keep the lines that later messages need (each
//! profile, node set and variable, and the keys [`crate::lint`] points at), taken from the
//! parser's spans: right however the TOML is written (tables, dotted keys, inline tables).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::cpulist::CpuList;
use crate::hostlist::HostlistPattern;
use crate::template::{is_nic_name, Placeholder, Template};

/// Modes that are not profile names.
pub const RESERVED_MODES: [&str; 2] = ["none", "auto"];

/// What `--gpudirect=MODE` (or a default) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Touch nothing.
    None,
    /// The profile of the node set this node belongs to.
    Auto,
    /// A named profile.
    Profile(String),
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::None => f.write_str("none"),
            Mode::Auto => f.write_str("auto"),
            Mode::Profile(name) => f.write_str(name),
        }
    }
}

/// What the names in a profile's `data_nics` are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum NicClass {
    /// Network interfaces (`/sys/class/net`: `eth1`, `enp6s0`), as
    /// `NCCL_SOCKET_IFNAME` and the TCPX/FasTrak plugins take them.
    #[default]
    Net,
    /// RDMA devices (`/sys/class/infiniband`: `mlx5_0`, EFA's `rdmap79s0`), as
    /// `NCCL_IB_HCA` takes them. They are not interface names: `mlx5_0` has no netdev
    /// of that name.
    Infiniband,
}

impl NicClass {
    /// The name used in the config.
    pub fn name(self) -> &'static str {
        match self {
            NicClass::Net => "net",
            NicClass::Infiniband => "infiniband",
        }
    }
}

/// Where a task's NIC and CPUs come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum NicLocality {
    /// From the profile's `gpu_nics` and `nic_cpus`.
    #[default]
    Config,
    /// From the node's PCIe layout in sysfs ([`crate::locality`]): the NIC under the
    /// GPU's switch and its NUMA node's CPUs; `gpu_nics`/`nic_cpus` are the fallback.
    Sysfs,
}

impl NicLocality {
    /// The name used in the config.
    pub fn name(self) -> &'static str {
        match self {
            NicLocality::Config => "config",
            NicLocality::Sysfs => "sysfs",
        }
    }
}

/// A check a profile can require on a node before it is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CheckKind {
    /// The control and data NICs exist and are up.
    Nics,
    /// The transport library files exist in the library directories.
    Libraries,
    /// The topology file is readable.
    TopologyFile,
    /// The TCPX receive daemon's socket directory exists.
    RxdmSocketDir,
    /// Only root can change the files and directories the profile exports (`library_dirs`,
    /// `topology_file`, path values of `[env]`). Always run; a node set cannot skip it.
    Ownership,
    /// `gpudirect health` only: every data NIC at least at the profile's `line_rate_gbit`.
    NicSpeed,
    /// `gpudirect health` only: the NVIDIA driver sees as many GPUs as Slurm's gres says
    /// the node has (`/proc/driver/nvidia/gpus`).
    Gpus,
}

impl CheckKind {
    /// Every check a profile can ask for and a node set can skip, in the order they run
    /// ([`CheckKind::Ownership`] always runs, after them).
    pub const ALL: [CheckKind; 6] = [
        CheckKind::Nics,
        CheckKind::Libraries,
        CheckKind::TopologyFile,
        CheckKind::RxdmSocketDir,
        CheckKind::NicSpeed,
        CheckKind::Gpus,
    ];

    /// The name used in the config (`skip_checks`) and in messages.
    pub fn name(self) -> &'static str {
        match self {
            CheckKind::Nics => "nics",
            CheckKind::Libraries => "libraries",
            CheckKind::TopologyFile => "topology_file",
            CheckKind::RxdmSocketDir => "rxdm_socket_dir",
            CheckKind::Ownership => "ownership",
            CheckKind::NicSpeed => "nic_speed",
            CheckKind::Gpus => "gpus",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// The checks a profile requires.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Checks {
    /// Control and data NICs present and up.
    pub nics: bool,
    /// File names that must exist in one of the library directories.
    pub libraries: Vec<String>,
    /// The topology file must be readable.
    pub topology_file: bool,
    /// A directory that must exist (the RxDM socket directory), as a template.
    pub rxdm_socket_dir: Option<Template>,
}

impl Checks {
    /// The checks this profile requires, by kind.
    pub fn required(&self) -> Vec<CheckKind> {
        let mut kinds = Vec::new();
        if self.nics {
            kinds.push(CheckKind::Nics);
        }
        if !self.libraries.is_empty() {
            kinds.push(CheckKind::Libraries);
        }
        if self.topology_file {
            kinds.push(CheckKind::TopologyFile);
        }
        if self.rxdm_socket_dir.is_some() {
            kinds.push(CheckKind::RxdmSocketDir);
        }
        kinds
    }
}

/// One variable a profile sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable's name.
    pub name: String,
    /// Its value, as a template.
    pub value: Template,
    /// Set even when the task already has it (the user's value is replaced).
    pub forced: bool,
    /// The 1-based line of its name in the config text.
    pub line: usize,
}

/// Where a profile is written in the config text (1-based lines), for messages about its
/// checked values. A key's line is where its value starts: the key's own line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProfileLines {
    /// Where the profile's name is written: its `[profiles.NAME]` header, else the first
    /// table or key that names it.
    pub name: usize,
    /// `data_nics`, if written.
    pub data_nics: Option<usize>,
    /// `library_dirs`, if written.
    pub library_dirs: Option<usize>,
    /// `topology_file`, if written.
    pub topology_file: Option<usize>,
    /// `checks.libraries`, if written.
    pub check_libraries: Option<usize>,
}

/// A checked profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The profile's name (`--gpudirect=NAME`).
    pub name: String,
    /// The profile it `extends`, whose keys it inherits (already merged into this one).
    pub extends: Option<String>,
    /// What it is for, shown by `gpudirect profiles list`.
    pub description: String,
    /// A failed check fails the step (instead of running it without the profile).
    pub strict: bool,
    /// The network transport NCCL should use between nodes (`NET/<name>`), if any.
    pub transport: Option<String>,
    /// The control NIC (logical name; a node set may rename it).
    pub control_nic: Option<String>,
    /// The data NICs (logical names).
    pub data_nics: Vec<String>,
    /// What the data NIC names are: netdevs or RDMA devices.
    pub data_nic_class: NicClass,
    /// Where each task's NIC and CPUs come from.
    pub nic_locality: NicLocality,
    /// The data NIC of each GPU index (with `nic_locality = "sysfs"`, the fallback).
    pub gpu_nics: Vec<String>,
    /// CPUs close to each data NIC.
    pub nic_cpus: BTreeMap<String, CpuList>,
    /// Pin each task to the CPUs of its NIC.
    pub pin_cpus: bool,
    /// Each data NIC's line rate in Gbit/s (`line_rate_gbit`); empty when not declared.
    pub line_rate_gbit: BTreeMap<String, u32>,
    /// Directories prepended to `LD_LIBRARY_PATH`.
    pub library_dirs: Vec<String>,
    /// Exported as `NCCL_TOPO_FILE`.
    pub topology_file: Option<String>,
    /// The variables, in name order.
    pub env: Vec<EnvVar>,
    /// What must hold on a node before the profile is applied.
    pub checks: Checks,
    /// Where it is written.
    pub lines: ProfileLines,
}

/// A set of nodes and what applies to them.
#[derive(Debug, Clone)]
pub struct NodeSet {
    /// The set's name, for messages.
    pub name: String,
    /// The hostlist expression as written.
    pub hosts_expr: String,
    /// The compiled expression.
    pub hosts: HostlistPattern,
    /// The profile `auto` picks on these nodes.
    pub profile: Option<String>,
    /// The mode of steps that ask for none.
    pub default_mode: Option<Mode>,
    /// Checks not run on these nodes (hardware they do not have).
    pub skip_checks: Vec<CheckKind>,
    /// Real NIC names on these nodes, by the profiles' logical names.
    pub nic_names: BTreeMap<String, String>,
    /// The 1-based line of its `[[node_set]]` header (or inline table).
    pub line: usize,
}

/// The whole checked config.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it was read from, for messages.
    pub source: String,
    /// The mode of steps that ask for none, where no node set says.
    pub default_mode: Option<Mode>,
    /// Profiles by name.
    pub profiles: BTreeMap<String, Profile>,
    /// Node sets, first match wins.
    pub node_sets: Vec<NodeSet>,
}

impl Profile {
    /// What a node's data NICs can carry together, in GB/s (1e9 bytes, as nccl-tests'
    /// busbw): the sum of `line_rate_gbit` over the data NICs, divided by 8. `None` when
    /// the profile does not declare line rates.
    pub fn node_line_rate_gbps(&self) -> Option<f64> {
        (!self.line_rate_gbit.is_empty()).then(|| {
            self.line_rate_gbit
                .values()
                .map(|&g| f64::from(g))
                .sum::<f64>()
                / 8.0
        })
    }
}

impl Config {
    /// The profile names, sorted, for messages ("profiles that exist: ...").
    pub fn profile_names(&self) -> Vec<&str> {
        self.profiles.keys().map(String::as_str).collect()
    }

    /// The first node set whose hosts include `node`.
    pub fn node_set_for(&self, node: &str) -> Option<&NodeSet> {
        self.node_sets.iter().find(|set| set.hosts.matches(node))
    }

    /// Parses a mode as a user wrote it, checking it names something that exists.
    pub fn parse_mode(&self, text: &str) -> Result<Mode, UnknownMode> {
        match text {
            "none" => Ok(Mode::None),
            "auto" => Ok(Mode::Auto),
            name if self.profiles.contains_key(name) => Ok(Mode::Profile(name.to_string())),
            _ => Err(UnknownMode {
                mode: sanitize_for_message(text),
                known: self.profile_names().join(", "),
            }),
        }
    }
}

/// Whether the config's text, unparsed, declares profile `name` with a table header at the
/// start of a line: `[profiles.NAME]` or `[profiles.NAME.env]` and the like. srun only needs
/// to know that a mode names a profile before it submits, and this costs a scan instead of a
/// parse (0.4 ms of every step that asks for a mode). `false` says nothing (a quoted name, a
/// profile made with dotted keys): the caller parses to be sure. `true` is wrong only where
/// a header's text sits inside a multi-line string, or the config does not parse; the step
/// reads the config itself and reports either.
pub fn declares_profile(text: &str, name: &str) -> bool {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return false;
    }
    text.lines().any(|line| {
        line.trim_start()
            .strip_prefix('[')
            .map(str::trim_start)
            .and_then(|l| l.strip_prefix("profiles."))
            .and_then(|l| l.strip_prefix(name))
            .is_some_and(|rest| rest.trim_start().starts_with([']', '.']))
    })
}

/// A mode that names no profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown --gpudirect mode `{mode}`: use `auto`, `none` or a profile ({known})")]
pub struct UnknownMode {
    /// The mode as written (shortened and made printable).
    pub mode: String,
    /// The profiles that exist.
    pub known: String,
}

/// Makes user text safe to print in one log line: printable ASCII, at most 64 chars.
pub fn sanitize_for_message(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if text.chars().count() > 64 {
        out.push_str("...");
    }
    out
}

/// A config error, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The key (dotted path), when known.
    pub key: Option<String>,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": {key}")?;
        }
        write!(f, ": {}", self.message)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    default_mode: Option<Spanned<String>>,
    #[serde(default)]
    profiles: BTreeMap<Spanned<String>, RawProfile>,
    #[serde(default)]
    node_set: Vec<Spanned<RawNodeSet>>,
}

/// A profile as written. Keys that a profile extending another inherits when it leaves
/// them out are `Option`s, so that "written" can be told from "left out" ([`inherit`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    #[serde(default)]
    extends: Option<Spanned<String>>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default)]
    transport: Option<Spanned<String>>,
    #[serde(default)]
    control_nic: Option<Spanned<String>>,
    #[serde(default)]
    data_nics: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    data_nic_class: Option<Spanned<String>>,
    #[serde(default)]
    nic_locality: Option<Spanned<String>>,
    #[serde(default)]
    gpu_nics: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    nic_cpus: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
    #[serde(default)]
    pin_cpus: Option<Spanned<bool>>,
    #[serde(default)]
    line_rate_gbit: Option<Spanned<toml::Value>>,
    #[serde(default)]
    library_dirs: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    topology_file: Option<Spanned<String>>,
    #[serde(default)]
    env: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    forced: Vec<Spanned<String>>,
    #[serde(default)]
    checks: Option<RawChecks>,
}

#[derive(Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
struct RawChecks {
    #[serde(default)]
    nics: bool,
    #[serde(default)]
    libraries: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    topology_file: Option<Spanned<bool>>,
    #[serde(default)]
    rxdm_socket_dir: Option<Spanned<String>>,
}

/// `child` on top of `base`, the profile it `extends`: each key `child` writes replaces
/// `base`'s, but `env` merges by variable name (`child`'s values win) and `forced` is the
/// union. Values keep their spans, so a message about an inherited key points at `base`'s
/// line. Also returns the keys inherited (`transport`, `env.NCCL_NET`, ...), to say so in
/// messages about them.
fn inherit(child: &RawProfile, base: &RawProfile) -> (RawProfile, Vec<String>) {
    let mut inherited = Vec::new();
    let mut merged = RawProfile {
        extends: child.extends.clone(),
        // A struct literal, not `..`: a new key has to say here how it is inherited.
        description: or_base(
            &child.description,
            &base.description,
            "description",
            &mut inherited,
        ),
        strict: or_base(&child.strict, &base.strict, "strict", &mut inherited),
        transport: or_base(
            &child.transport,
            &base.transport,
            "transport",
            &mut inherited,
        ),
        control_nic: or_base(
            &child.control_nic,
            &base.control_nic,
            "control_nic",
            &mut inherited,
        ),
        data_nics: or_base(
            &child.data_nics,
            &base.data_nics,
            "data_nics",
            &mut inherited,
        ),
        data_nic_class: or_base(
            &child.data_nic_class,
            &base.data_nic_class,
            "data_nic_class",
            &mut inherited,
        ),
        nic_locality: or_base(
            &child.nic_locality,
            &base.nic_locality,
            "nic_locality",
            &mut inherited,
        ),
        gpu_nics: or_base(&child.gpu_nics, &base.gpu_nics, "gpu_nics", &mut inherited),
        nic_cpus: or_base(&child.nic_cpus, &base.nic_cpus, "nic_cpus", &mut inherited),
        pin_cpus: or_base(&child.pin_cpus, &base.pin_cpus, "pin_cpus", &mut inherited),
        line_rate_gbit: or_base(
            &child.line_rate_gbit,
            &base.line_rate_gbit,
            "line_rate_gbit",
            &mut inherited,
        ),
        library_dirs: or_base(
            &child.library_dirs,
            &base.library_dirs,
            "library_dirs",
            &mut inherited,
        ),
        topology_file: or_base(
            &child.topology_file,
            &base.topology_file,
            "topology_file",
            &mut inherited,
        ),
        checks: or_base(&child.checks, &base.checks, "checks", &mut inherited),
        env: BTreeMap::new(),
        forced: Vec::new(),
    };
    merged.env = base.env.clone();
    for (name, value) in &child.env {
        // Remove first: `insert` would keep the base's key, and with it the base's line.
        merged.env.remove(name.get_ref().as_str());
        merged.env.insert(name.clone(), value.clone());
    }
    inherited.extend(
        base.env
            .keys()
            .filter(|name| !child.env.contains_key(name.get_ref().as_str()))
            .map(|name| format!("env.{}", name.get_ref())),
    );
    merged.forced = base.forced.iter().chain(&child.forced).cloned().collect();
    (merged, inherited)
}

/// The child's value of a key where it writes one, else the base's (noting `key` as
/// inherited when the base writes it).
fn or_base<T: Clone>(
    own: &Option<T>,
    base: &Option<T>,
    key: &str,
    inherited: &mut Vec<String>,
) -> Option<T> {
    if own.is_none() && base.is_some() {
        inherited.push(key.to_string());
    }
    own.as_ref().or(base.as_ref()).cloned()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNodeSet {
    name: String,
    hosts: Spanned<String>,
    #[serde(default)]
    profile: Option<Spanned<String>>,
    #[serde(default)]
    default_mode: Option<Spanned<String>>,
    #[serde(default)]
    skip_checks: Vec<Spanned<String>>,
    #[serde(default)]
    nic_names: BTreeMap<Spanned<String>, Spanned<String>>,
}

/// Reads a config from its text; `source` names the file in errors.
pub fn parse_config(text: &str, source: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
        file: source.to_string(),
        line: e.span().map(|s| line_of(text, s.start)),
        key: None,
        // The toml crate's messages can span lines ("invalid table header\nexpected ...").
        message: one_line(e.message()),
    })?;
    Checker {
        source,
        newlines: newline_offsets(text),
    }
    .check(raw)
}

/// The byte offset of every `\n` in `text`, in order: what [`Checker`] finds lines with.
fn newline_offsets(text: &str) -> Vec<usize> {
    text.bytes()
        .enumerate()
        .filter_map(|(i, b)| (b == b'\n').then_some(i))
        .collect()
}

/// Makes a message one log line: its lines joined with `; `, control characters (from
/// keys or values the admin wrote, e.g. `"a\nb"`) shown escaped. The plugin logs each
/// error as one line, and a line break would let text in the config forge log lines.
pub(crate) fn one_line(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    escape_controls(&joined)
}

/// Whether `text` holds a control character (line break, tab, escape, ...): such text in a
/// path, file or node set name would break the one-line messages that show it.
fn has_control(text: &str) -> bool {
    text.chars().any(char::is_control)
}

/// Control characters written as escapes (`\n`, `\u{1b}`), everything else as is.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The items of a list key, or none where the key is left out. (A list is kept whole in
/// a [`Spanned`] for its line.)
fn items<T>(list: &Option<Spanned<Vec<T>>>) -> &[T] {
    list.as_ref().map_or(&[], |l| l.get_ref().as_slice())
}

/// The 1-based line of byte `offset` in `text` (for a TOML error's span).
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Turns raw values into checked ones, building errors that point into the text.
struct Checker<'a> {
    source: &'a str,
    /// [`newline_offsets`] of the text: every value's line is looked up in it (counting the
    /// newlines before each of some hundred values made parsing the shipped config take
    /// 0.9 ms instead of 0.15 ms).
    newlines: Vec<usize>,
}

type Checked<T> = Result<T, ConfigError>;

impl Checker<'_> {
    /// The line where a value (or key) starts.
    fn line<T>(&self, value: &Spanned<T>) -> usize {
        self.line_at(value.span().start)
    }

    /// The line (from 1) that byte `offset` is on.
    fn line_at(&self, offset: usize) -> usize {
        self.newlines.partition_point(|&nl| nl < offset) + 1
    }

    fn error(
        &self,
        span: Range<usize>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: self.source.to_string(),
            line: Some(self.line_at(span.start)),
            key: Some(escape_controls(&key.into())),
            message: escape_controls(&message.into()),
        }
    }

    fn check(&self, raw: RawConfig) -> Checked<Config> {
        let mut profiles = BTreeMap::new();
        for (name, raw_profile) in &raw.profiles {
            let key = format!("profiles.{}", name.get_ref());
            if !is_profile_name(name.get_ref()) {
                return Err(self.error(
                    name.span(),
                    key,
                    "a profile name is lowercase letters, digits, `-` and `_`, at most 32 characters",
                ));
            }
            if RESERVED_MODES.contains(&name.get_ref().as_str()) {
                return Err(self.error(
                    name.span(),
                    key,
                    "`none` and `auto` are built-in modes; give this profile another name",
                ));
            }
            let profile = match &raw_profile.extends {
                None => self.check_profile(name.get_ref(), name.span(), &key, raw_profile)?,
                Some(base_name) => {
                    let base = self.base_of(&raw.profiles, name.get_ref(), &key, base_name)?;
                    let (merged, inherited) = inherit(raw_profile, base);
                    self.check_profile(name.get_ref(), name.span(), &key, &merged)
                        .map_err(|e| say_inherited(e, &key, &inherited, base_name.get_ref()))?
                }
            };
            profiles.insert(name.get_ref().clone(), profile);
        }
        let mut config = Config {
            source: self.source.to_string(),
            default_mode: None,
            profiles,
            node_sets: Vec::new(),
        };
        if let Some(mode) = &raw.default_mode {
            config.default_mode = Some(self.check_mode(&config, mode, "default_mode")?);
        }
        for (index, raw_set) in raw.node_set.into_iter().enumerate() {
            let set = self.check_node_set(&config, index, raw_set)?;
            config.node_sets.push(set);
        }
        Ok(config)
    }

    /// The profile that `extends` names, which must exist, be another, and extend none
    /// itself (one level keeps what a profile is readable from two places in the file).
    fn base_of<'r>(
        &self,
        profiles: &'r BTreeMap<Spanned<String>, RawProfile>,
        name: &str,
        key: &str,
        base: &Spanned<String>,
    ) -> Checked<&'r RawProfile> {
        let key = format!("{key}.extends");
        let shown = sanitize_for_message(base.get_ref());
        let others = || {
            let names: Vec<&str> = profiles
                .keys()
                .map(|n| n.get_ref().as_str())
                .filter(|n| *n != name)
                .collect();
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        };
        if RESERVED_MODES.contains(&base.get_ref().as_str()) {
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "`{shown}` is a built-in mode, not a profile: extend a profile (profiles: {})",
                    others()
                ),
            ));
        }
        if base.get_ref() == name {
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "a profile cannot extend itself: remove `extends` or name another profile (profiles: {})",
                    others()
                ),
            ));
        }
        let Some(found) = profiles.get(base.get_ref().as_str()) else {
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "no profile `{shown}` to extend (profiles: {}): fix the name or add [profiles.{shown}]",
                    others()
                ),
            ));
        };
        if let Some(grand) = &found.extends {
            let grand = sanitize_for_message(grand.get_ref());
            return Err(self.error(
                base.span(),
                key,
                format!(
                    "`{shown}` itself extends `{grand}`, and a profile extends one level only: extend `{grand}` directly (extends = \"{grand}\") and copy what `{shown}` adds"
                ),
            ));
        }
        Ok(found)
    }

    fn check_mode(&self, config: &Config, mode: &Spanned<String>, key: &str) -> Checked<Mode> {
        config
            .parse_mode(mode.get_ref())
            .map_err(|e| self.error(mode.span(), key, e.to_string()))
    }

    fn check_nic(&self, nic: &Spanned<String>, key: &str) -> Checked<String> {
        if is_nic_name(nic.get_ref()) {
            Ok(nic.get_ref().clone())
        } else {
            Err(self.error(
                nic.span(),
                key,
                format!(
                    "`{}` is not an interface name (letters, digits, `-_.`, at most 15)",
                    sanitize_for_message(nic.get_ref())
                ),
            ))
        }
    }

    fn check_absolute_path(&self, path: &Spanned<String>, key: &str) -> Checked<String> {
        let p = path.get_ref();
        let clean = p.starts_with('/')
            && !p.split('/').any(|c| c == "..")
            && !p.contains(['{', '}'])
            && !has_control(p);
        if clean {
            Ok(p.clone())
        } else {
            Err(self.error(
                path.span(),
                key,
                "must be an absolute path without `..`, placeholders or control characters",
            ))
        }
    }

    fn check_profile(
        &self,
        name: &str,
        name_span: Range<usize>,
        key: &str,
        raw: &RawProfile,
    ) -> Checked<Profile> {
        let control_nic = raw
            .control_nic
            .as_ref()
            .map(|n| self.check_nic(n, &format!("{key}.control_nic")))
            .transpose()?;
        let mut data_nics = Vec::new();
        for nic in items(&raw.data_nics) {
            let nic_name = self.check_nic(nic, &format!("{key}.data_nics"))?;
            if data_nics.contains(&nic_name) {
                return Err(self.error(nic.span(), format!("{key}.data_nics"), "listed twice"));
            }
            data_nics.push(nic_name);
        }
        let declared: BTreeSet<&str> = control_nic
            .iter()
            .chain(data_nics.iter())
            .map(String::as_str)
            .collect();
        let mut gpu_nics = Vec::new();
        for nic in raw.gpu_nics.iter().flatten() {
            if !data_nics.contains(nic.get_ref()) {
                return Err(self.error(
                    nic.span(),
                    format!("{key}.gpu_nics"),
                    format!(
                        "`{}` is not one of data_nics ({})",
                        sanitize_for_message(nic.get_ref()),
                        data_nics.join(", ")
                    ),
                ));
            }
            gpu_nics.push(nic.get_ref().clone());
        }
        let mut nic_cpus = BTreeMap::new();
        for (nic, cpus) in raw.nic_cpus.iter().flatten() {
            let nic_key = format!("{key}.nic_cpus.{}", nic.get_ref());
            if !data_nics.contains(nic.get_ref()) {
                return Err(self.error(
                    nic.span(),
                    nic_key,
                    "CPU lists are given for data NICs only; add it to data_nics or remove it",
                ));
            }
            let list = CpuList::parse(cpus.get_ref())
                .map_err(|e| self.error(cpus.span(), nic_key, e.to_string()))?;
            nic_cpus.insert(nic.get_ref().clone(), list);
        }
        let data_nic_class = match &raw.data_nic_class {
            None => NicClass::Net,
            Some(c) => match c.get_ref().as_str() {
                "net" => NicClass::Net,
                "infiniband" => NicClass::Infiniband,
                other => {
                    return Err(self.error(
                        c.span(),
                        format!("{key}.data_nic_class"),
                        format!(
                            "`{}` is not a NIC class: use \"net\" (interfaces, /sys/class/net) or \"infiniband\" (RDMA devices, /sys/class/infiniband)",
                            sanitize_for_message(other)
                        ),
                    ))
                }
            },
        };
        let nic_locality = match &raw.nic_locality {
            None => NicLocality::Config,
            Some(l) => match l.get_ref().as_str() {
                "config" => NicLocality::Config,
                "sysfs" => NicLocality::Sysfs,
                other => {
                    return Err(self.error(
                        l.span(),
                        format!("{key}.nic_locality"),
                        format!(
                            "`{}` is not a locality source: use \"config\" (gpu_nics, nic_cpus) or \"sysfs\" (the node's PCIe layout)",
                            sanitize_for_message(other)
                        ),
                    ))
                }
            },
        };
        let pin_cpus = match &raw.pin_cpus {
            Some(pin)
                if *pin.get_ref()
                    && nic_locality == NicLocality::Config
                    && (nic_cpus.is_empty() || gpu_nics.is_empty()) =>
            {
                return Err(self.error(
                    pin.span(),
                    format!("{key}.pin_cpus"),
                    "pinning needs gpu_nics and nic_cpus (a task's CPUs are its NIC's CPUs), or nic_locality = \"sysfs\"",
                ))
            }
            Some(pin) => *pin.get_ref(),
            None => false,
        };
        let line_rate_gbit = match &raw.line_rate_gbit {
            Some(rate) => {
                self.check_line_rate(rate, &format!("{key}.line_rate_gbit"), &data_nics)?
            }
            None => BTreeMap::new(),
        };
        let library_dirs = items(&raw.library_dirs)
            .iter()
            .map(|d| self.check_absolute_path(d, &format!("{key}.library_dirs")))
            .collect::<Checked<Vec<_>>>()?;
        let topology_file = raw
            .topology_file
            .as_ref()
            .map(|f| self.check_absolute_path(f, &format!("{key}.topology_file")))
            .transpose()?;

        let forced: BTreeSet<&str> = raw.forced.iter().map(|f| f.get_ref().as_str()).collect();
        for f in &raw.forced {
            if !raw.env.keys().any(|k| k.get_ref() == f.get_ref()) {
                return Err(self.error(
                    f.span(),
                    format!("{key}.forced"),
                    format!(
                        "`{}` is not a variable of this profile's [env]",
                        sanitize_for_message(f.get_ref())
                    ),
                ));
            }
        }
        let mut env = Vec::new();
        for (var, value) in &raw.env {
            let var_key = format!("{key}.env.{}", var.get_ref());
            if let Some(problem) = env_name_problem(var.get_ref(), topology_file.is_some()) {
                return Err(self.error(var.span(), var_key, problem));
            }
            let template = self.check_template(value, &var_key, &declared)?;
            env.push(EnvVar {
                name: var.get_ref().clone(),
                value: template,
                forced: forced.contains(var.get_ref().as_str()),
                line: self.line(var),
            });
        }

        let no_checks = RawChecks::default();
        let raw_checks = raw.checks.as_ref().unwrap_or(&no_checks);
        let checks =
            self.check_checks(key, raw_checks, &declared, &library_dirs, &topology_file)?;
        if checks.nics && declared.is_empty() {
            return Err(self.error(
                name_span,
                format!("{key}.checks.nics"),
                "the profile declares no NICs to check (set control_nic/data_nics)",
            ));
        }
        let lines = ProfileLines {
            name: self.line_at(name_span.start),
            data_nics: raw.data_nics.as_ref().map(|v| self.line(v)),
            library_dirs: raw.library_dirs.as_ref().map(|v| self.line(v)),
            topology_file: raw.topology_file.as_ref().map(|v| self.line(v)),
            check_libraries: raw_checks.libraries.as_ref().map(|v| self.line(v)),
        };
        Ok(Profile {
            name: name.to_string(),
            extends: raw.extends.as_ref().map(|b| b.get_ref().clone()),
            description: raw.description.clone().unwrap_or_default(),
            strict: raw.strict.unwrap_or(false),
            transport: raw.transport.as_ref().map(|t| t.get_ref().clone()),
            control_nic,
            data_nics,
            data_nic_class,
            nic_locality,
            gpu_nics,
            nic_cpus,
            pin_cpus,
            line_rate_gbit,
            library_dirs,
            topology_file,
            env,
            checks,
            lines,
        })
    }

    /// `line_rate_gbit`: one number for every data NIC (`200`), or a table with each data
    /// NIC's (`{ eth1 = 200, eth2 = 100 }`); whole Gbit/s, as NICs are sold. Every data NIC
    /// gets a rate, above zero.
    fn check_line_rate(
        &self,
        rate: &Spanned<toml::Value>,
        key: &str,
        data_nics: &[String],
    ) -> Checked<BTreeMap<String, u32>> {
        let positive = |v: &toml::Value, what: &str| -> Checked<u32> {
            v.as_integer()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    self.error(
                        rate.span(),
                        key,
                        format!("{what} must be a whole number of Gbit/s above 0, e.g. 200"),
                    )
                })
        };
        if data_nics.is_empty() {
            return Err(self.error(
                rate.span(),
                key,
                "the profile declares no data_nics to give a line rate to",
            ));
        }
        match rate.get_ref() {
            toml::Value::Table(per_nic) => {
                let mut rates = BTreeMap::new();
                for (nic, value) in per_nic {
                    if !data_nics.contains(nic) {
                        return Err(self.error(
                            rate.span(),
                            key,
                            format!(
                                "`{}` is not one of data_nics ({})",
                                sanitize_for_message(nic),
                                data_nics.join(", ")
                            ),
                        ));
                    }
                    rates.insert(nic.clone(), positive(value, &format!("the rate of {nic}"))?);
                }
                if let Some(missing) = data_nics.iter().find(|n| !rates.contains_key(*n)) {
                    return Err(self.error(
                        rate.span(),
                        key,
                        format!("no rate for {missing}: give every data NIC its rate, or one number for all"),
                    ));
                }
                Ok(rates)
            }
            value => {
                let each = positive(value, "the line rate")?;
                Ok(data_nics.iter().map(|n| (n.clone(), each)).collect())
            }
        }
    }

    fn check_template(
        &self,
        value: &Spanned<String>,
        key: &str,
        declared_nics: &BTreeSet<&str>,
    ) -> Checked<Template> {
        let template = Template::parse(value.get_ref())
            .map_err(|e| self.error(value.span(), key, e.to_string()))?;
        for placeholder in template.placeholders() {
            if let Placeholder::NicNamed(nic) = placeholder {
                if !declared_nics.contains(nic.as_str()) {
                    return Err(self.error(
                        value.span(),
                        key,
                        format!("`{{nic:{nic}}}` names a NIC the profile does not declare"),
                    ));
                }
            }
        }
        Ok(template)
    }

    fn check_checks(
        &self,
        key: &str,
        raw: &RawChecks,
        declared: &BTreeSet<&str>,
        library_dirs: &[String],
        topology_file: &Option<String>,
    ) -> Checked<Checks> {
        let mut libraries = Vec::new();
        for lib in items(&raw.libraries) {
            let l = lib.get_ref();
            if l.is_empty() || l.contains('/') || l == "." || l == ".." || has_control(l) {
                return Err(self.error(
                    lib.span(),
                    format!("{key}.checks.libraries"),
                    "a library is a file name (no `/`, no control characters), looked up in library_dirs",
                ));
            }
            if library_dirs.is_empty() {
                return Err(self.error(
                    lib.span(),
                    format!("{key}.checks.libraries"),
                    "libraries are looked up in library_dirs, which is empty",
                ));
            }
            libraries.push(l.clone());
        }
        let topology = match &raw.topology_file {
            Some(t) if *t.get_ref() && topology_file.is_none() => {
                return Err(self.error(
                    t.span(),
                    format!("{key}.checks.topology_file"),
                    "the profile has no topology_file to check",
                ))
            }
            Some(t) => *t.get_ref(),
            None => false,
        };
        let rxdm_socket_dir = match &raw.rxdm_socket_dir {
            Some(dir) => {
                let dir_key = format!("{key}.checks.rxdm_socket_dir");
                if !dir.get_ref().starts_with('/')
                    || dir.get_ref().split('/').any(|c| c == "..")
                    || has_control(dir.get_ref())
                {
                    return Err(self.error(
                        dir.span(),
                        dir_key,
                        "must be an absolute path without `..` or control characters",
                    ));
                }
                Some(self.check_template(dir, &dir_key, declared)?)
            }
            None => None,
        };
        Ok(Checks {
            nics: raw.nics,
            libraries,
            topology_file: topology,
            rxdm_socket_dir,
        })
    }

    fn check_node_set(
        &self,
        config: &Config,
        index: usize,
        raw: Spanned<RawNodeSet>,
    ) -> Checked<NodeSet> {
        let span = raw.span();
        let raw = raw.into_inner();
        let key = format!("node_set[{index}] ({})", sanitize_for_message(&raw.name));
        // The name is shown in users' error messages and logs, which are one line each.
        if raw.name.trim().is_empty() || has_control(&raw.name) {
            return Err(self.error(
                span,
                format!("{key}.name"),
                "a node set name is shown in messages: write it on one line, without control characters",
            ));
        }
        let hosts = HostlistPattern::new(raw.hosts.get_ref())
            .map_err(|e| self.error(raw.hosts.span(), format!("{key}.hosts"), e.to_string()))?;
        let profile = match &raw.profile {
            Some(p) if !config.profiles.contains_key(p.get_ref()) => {
                return Err(self.error(
                    p.span(),
                    format!("{key}.profile"),
                    format!(
                        "no profile `{}` (profiles: {})",
                        sanitize_for_message(p.get_ref()),
                        config.profile_names().join(", ")
                    ),
                ))
            }
            Some(p) => Some(p.get_ref().clone()),
            None => None,
        };
        let default_mode = raw
            .default_mode
            .as_ref()
            .map(|m| self.check_mode(config, m, &format!("{key}.default_mode")))
            .transpose()?;
        if default_mode == Some(Mode::Auto) && profile.is_none() {
            return Err(self.error(
                span.clone(),
                format!("{key}.default_mode"),
                "`auto` needs this node set's `profile`",
            ));
        }
        let mut skip_checks = Vec::new();
        for check in &raw.skip_checks {
            let kind = CheckKind::from_name(check.get_ref()).ok_or_else(|| {
                self.error(
                    check.span(),
                    format!("{key}.skip_checks"),
                    format!(
                        "unknown check `{}` (checks: nics, libraries, topology_file, rxdm_socket_dir)",
                        sanitize_for_message(check.get_ref())
                    ),
                )
            })?;
            skip_checks.push(kind);
        }
        let mut nic_names = BTreeMap::new();
        for (logical, real) in &raw.nic_names {
            let nic_key = format!("{key}.nic_names");
            let logical = self.check_nic(logical, &nic_key)?;
            let real = self.check_nic(real, &nic_key)?;
            nic_names.insert(logical, real);
        }
        Ok(NodeSet {
            name: raw.name,
            hosts_expr: raw.hosts.into_inner(),
            hosts,
            profile,
            default_mode,
            skip_checks,
            nic_names,
            line: self.line_at(span.start),
        })
    }
}

/// Adds to an error about a key that a profile inherited where the key comes from: its
/// line is the base's, and the fix may be to override it in the extending profile.
fn say_inherited(
    mut error: ConfigError,
    key: &str,
    inherited: &[String],
    base: &str,
) -> ConfigError {
    let Some(rest) = error
        .key
        .as_deref()
        .and_then(|k| k.strip_prefix(key))
        .and_then(|k| k.strip_prefix('.'))
    else {
        return error;
    };
    let from_base = inherited.iter().any(|i| {
        rest == i
            || rest
                .strip_prefix(i.as_str())
                .is_some_and(|r| r.starts_with('.'))
    });
    if from_base {
        error.message.push_str(&format!(
            " (inherited from profiles.{}: write the key in {key} to override it)",
            escape_controls(base)
        ));
    }
    error
}

fn is_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Why a variable name may not appear in a profile's `[env]`, if it may not.
fn env_name_problem(name: &str, has_topology_file: bool) -> Option<String> {
    let valid = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if !valid {
        return Some("a variable name is uppercase letters, digits and `_`".into());
    }
    if name == "LD_LIBRARY_PATH" {
        return Some("use library_dirs: the plugin prepends them to LD_LIBRARY_PATH".into());
    }
    if name.starts_with("GPUDIRECT_") {
        return Some("GPUDIRECT_* variables are set by the plugin itself".into());
    }
    if name == "NCCL_TOPO_FILE" && has_topology_file {
        return Some("set either topology_file or NCCL_TOPO_FILE in [env], not both".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_header_is_found_without_parsing() {
        let text = "# [profiles.commented]\n[profiles.tcpx]\nnet = \"x\"\n  [ profiles.gib.env ]\n[profiles.tcpxo_v2]\n";
        for name in ["tcpx", "gib", "tcpxo_v2"] {
            assert!(declares_profile(text, name), "{name}");
        }
        for name in ["tcp", "commented", "tcpxo", "", "a]", "profiles"] {
            assert!(!declares_profile(text, name), "{name}");
        }
        // Whatever the scan says, a parsed config agrees where the scan says yes.
        let shipped = include_str!("../../slurm-conf/gpudirect.toml");
        let config = parse_config(shipped, "shipped").unwrap();
        for name in config.profile_names() {
            assert!(declares_profile(shipped, name), "{name}");
        }
    }

    #[test]
    fn lines_from_the_newline_index_match_counting_newlines() {
        let text = "a = 1\n\n[profiles.x]\nb = \"\u{e9}\"\nc = 2";
        let checker = Checker {
            source: "t",
            newlines: newline_offsets(text),
        };
        for offset in 0..=text.len() + 2 {
            assert_eq!(checker.line_at(offset), line_of(text, offset), "{offset}");
        }
    }

    pub(crate) const SAMPLE: &str = r#"
[profiles.tcpx]
description = "test"
transport = "GPUDirectTCPX"
control_nic = "eth0"
data_nics = ["eth1", "eth2"]
gpu_nics = ["eth1", "eth1", "eth2", "eth2"]
library_dirs = ["/var/lib/tcpx/lib64"]
pin_cpus = true
forced = ["NCCL_NET"]
[profiles.tcpx.nic_cpus]
eth1 = "0-3"
eth2 = "4-7"
[profiles.tcpx.env]
NCCL_NET = "GPUDirectTCPX_v7"
NCCL_SOCKET_IFNAME = "{control_nic}"
PREFIX = "/run/tcpx-{job_id}"
[profiles.tcpx.checks]
nics = true
libraries = ["libnccl-net.so"]
rxdm_socket_dir = "/run/tcpx-{job_id}"

[[node_set]]
name = "a3"
hosts = "a3h-[001-008]"
profile = "tcpx"
nic_names = { eth0 = "enp0s12" }
"#;

    fn err(text: &str) -> ConfigError {
        match parse_config(text, "/etc/slurm/gpudirect.toml") {
            Err(e) => e,
            Ok(_) => panic!("config was accepted:\n{text}"),
        }
    }

    #[test]
    fn reads_a_full_profile() {
        let config = parse_config(SAMPLE, "t.toml").unwrap();
        let tcpx = &config.profiles["tcpx"];
        assert_eq!(tcpx.data_nics, ["eth1", "eth2"]);
        assert!(tcpx.pin_cpus);
        assert_eq!(tcpx.nic_cpus["eth2"].to_string(), "4-7");
        let net = tcpx.env.iter().find(|v| v.name == "NCCL_NET").unwrap();
        assert!(net.forced);
        assert_eq!(net.line, 15);
        assert_eq!(
            tcpx.lines,
            ProfileLines {
                name: 2,
                data_nics: Some(6),
                library_dirs: Some(8),
                topology_file: None,
                check_libraries: Some(20),
            }
        );
        assert_eq!(config.node_sets[0].line, 23);
        assert_eq!(
            tcpx.checks.required(),
            vec![
                CheckKind::Nics,
                CheckKind::Libraries,
                CheckKind::RxdmSocketDir
            ]
        );
        let set = config.node_set_for("a3h-005").unwrap();
        assert_eq!(set.profile.as_deref(), Some("tcpx"));
        assert!(config.node_set_for("a3h-009").is_none());
    }

    /// `line_rate_gbit` (issue #18): one number for every data NIC or a table per NIC;
    /// a node's line rate is their sum in GB/s. Bad values name the key and the fix.
    #[test]
    fn line_rates_are_read_and_checked() {
        let with = |rate: &str| {
            SAMPLE.replace(
                "pin_cpus = true\n",
                &format!("pin_cpus = true\nline_rate_gbit = {rate}\n"),
            )
        };
        let config = parse_config(&with("200"), "t.toml").unwrap();
        assert_eq!(config.profiles["tcpx"].node_line_rate_gbps(), Some(50.0));
        let config = parse_config(&with("{ eth1 = 400, eth2 = 100 }"), "t.toml").unwrap();
        assert_eq!(config.profiles["tcpx"].line_rate_gbit["eth2"], 100);
        assert_eq!(config.profiles["tcpx"].node_line_rate_gbps(), Some(62.5));
        let plain = parse_config(SAMPLE, "t.toml").unwrap();
        assert_eq!(plain.profiles["tcpx"].node_line_rate_gbps(), None);
        for (rate, problem) in [
            ("0", "must be a whole number of Gbit/s above 0"),
            ("\"fast\"", "must be a whole number of Gbit/s above 0"),
            ("12.5", "must be a whole number of Gbit/s above 0"),
            (
                "{ eth1 = 200 }",
                "no rate for eth2: give every data NIC its rate",
            ),
            (
                "{ eth1 = 200, eth2 = 200, eth9 = 1 }",
                "`eth9` is not one of data_nics",
            ),
            ("{ eth1 = 200, eth2 = -5 }", "the rate of eth2 must be"),
        ] {
            let e = err(&with(rate));
            assert_eq!(
                e.key.as_deref(),
                Some("profiles.tcpx.line_rate_gbit"),
                "{rate}"
            );
            assert!(e.message.contains(problem), "{rate}: {}", e.message);
            assert_eq!(e.line, Some(10), "{rate}");
        }
    }

    #[test]
    fn parses_modes() {
        let config = parse_config(SAMPLE, "t.toml").unwrap();
        assert_eq!(config.parse_mode("none"), Ok(Mode::None));
        assert_eq!(config.parse_mode("auto"), Ok(Mode::Auto));
        assert_eq!(config.parse_mode("tcpx"), Ok(Mode::Profile("tcpx".into())));
        let e = config.parse_mode("tcpxo").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown --gpudirect mode `tcpxo`: use `auto`, `none` or a profile (tcpx)"
        );
        let long = "x".repeat(10_000);
        assert!(config.parse_mode(&long).unwrap_err().mode.len() < 80);
        assert_eq!(config.parse_mode("a;$(id)\n").unwrap_err().mode, "a;$(id)?");
    }

    #[test]
    fn syntax_errors_name_file_and_line() {
        let e = err("[profiles.x]\nstrict = tru\n");
        assert_eq!(e.file, "/etc/slurm/gpudirect.toml");
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = err("[profiles.x]\nstrictt = true\n");
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("strictt"), "{e}");
        let e = err("defaults_mode = \"auto\"\n");
        assert!(e.message.contains("defaults_mode"), "{e}");
    }

    #[test]
    fn semantic_errors_name_line_and_key() {
        let cases: &[(&str, usize, &str, &str)] = &[
            (
                "[profiles.x.env]\nA = \"{jobid}\"\n",
                2,
                "profiles.x.env.A",
                "unknown placeholder",
            ),
            (
                "[profiles.x]\ngpu_nics = [\"eth9\"]\n",
                2,
                "profiles.x.gpu_nics",
                "not one of data_nics",
            ),
            (
                "[profiles.x]\nlibrary_dirs = [\"lib\"]\n",
                2,
                "profiles.x.library_dirs",
                "absolute",
            ),
            (
                "[profiles.x]\nlibrary_dirs = [\"/a/../b\"]\n",
                2,
                "profiles.x.library_dirs",
                "absolute",
            ),
            (
                "[profiles.x]\nforced = [\"B\"]\n",
                2,
                "profiles.x.forced",
                "not a variable",
            ),
            (
                "[profiles.x.env]\nLD_LIBRARY_PATH = \"/x\"\n",
                2,
                "profiles.x.env.LD_LIBRARY_PATH",
                "library_dirs",
            ),
            (
                "[profiles.x.env]\nGPUDIRECT_NIC = \"x\"\n",
                2,
                "profiles.x.env.GPUDIRECT_NIC",
                "plugin itself",
            ),
            (
                "[profiles.x.env]\nlower = \"x\"\n",
                2,
                "profiles.x.env.lower",
                "uppercase",
            ),
            ("[profiles.none]\n", 1, "profiles.none", "built-in"),
            ("[profiles.X]\n", 1, "profiles.X", "lowercase"),
            (
                "\n[profiles.x.checks]\nnics = true\n",
                2,
                "profiles.x.checks.nics",
                "no NICs",
            ),
            (
                "[profiles.x]\npin_cpus = true\n",
                2,
                "profiles.x.pin_cpus",
                "needs gpu_nics",
            ),
            (
                "[profiles.x]\ndata_nics = [\"eth1\"]\n[profiles.x.nic_cpus]\neth1 = \"3-1\"\n",
                4,
                "profiles.x.nic_cpus.eth1",
                "backwards",
            ),
            (
                "[profiles.x]\ncontrol_nic = \"eth0;rm\"\n",
                2,
                "profiles.x.control_nic",
                "interface name",
            ),
            (
                "[profiles.x.checks]\nlibraries = [\"../x.so\"]\n",
                2,
                "profiles.x.checks.libraries",
                "file name",
            ),
            (
                "[profiles.x.checks]\nlibraries = [\"x.so\"]\n",
                2,
                "profiles.x.checks.libraries",
                "library_dirs",
            ),
            (
                "[profiles.x.checks]\ntopology_file = true\n",
                2,
                "profiles.x.checks.topology_file",
                "no topology_file",
            ),
            (
                "[profiles.x.checks]\nrxdm_socket_dir = \"run/x\"\n",
                2,
                "profiles.x.checks.rxdm_socket_dir",
                "absolute",
            ),
            (
                "[profiles.x.env]\nA = \"{nic:eth1}\"\n",
                2,
                "profiles.x.env.A",
                "does not declare",
            ),
            (
                "default_mode = \"tcpx\"\n",
                1,
                "default_mode",
                "unknown --gpudirect mode",
            ),
            (
                "[[node_set]]\nname = \"a\"\nhosts = \"n[1-\"\n",
                3,
                "node_set[0] (a).hosts",
                "",
            ),
            (
                "[[node_set]]\nname = \"a\"\nhosts = \"n1\"\nprofile = \"zz\"\n",
                4,
                "node_set[0] (a).profile",
                "no profile",
            ),
            (
                "[[node_set]]\nname = \"a\"\nhosts = \"n1\"\nskip_checks = [\"nic\"]\n",
                4,
                "node_set[0] (a).skip_checks",
                "unknown check",
            ),
        ];
        for (text, line, key, needle) in cases {
            let e = err(text);
            assert_eq!(e.line, Some(*line), "{text}: {e}");
            assert_eq!(e.key.as_deref(), Some(*key), "{text}: {e}");
            assert!(e.message.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn error_display_is_one_line_with_location() {
        let e = err("[profiles.x]\ngpu_nics = [\"eth9\"]\n");
        let shown = e.to_string();
        assert!(
            shown.starts_with("/etc/slurm/gpudirect.toml:2: profiles.x.gpu_nics: "),
            "{shown}"
        );
        assert!(!shown.contains('\n'));
    }

    /// Found by `scripts/fuzz config`: the toml crate's (0.8) message for a bad table
    /// header was two lines ("invalid table header\nexpected `.`, `]`"), so the error, which
    /// the plugin logs as one line, was not. toml 1 words it on one line; `one_line` still
    /// joins whatever a parser version says.
    #[test]
    fn regression_fuzz_config_multiline_toml_error() {
        let e = parse_config("[a b]\n", "fuzz.toml").unwrap_err();
        let shown = e.to_string();
        assert!(!shown.contains('\n'), "{shown:?}");
        assert!(shown.starts_with("fuzz.toml:1: "), "{shown}");
        assert!(shown.contains("expected `]`"), "{shown}");
        assert_eq!(
            one_line("invalid table header\nexpected `.`, `]`\n"),
            "invalid table header; expected `.`, `]`"
        );
    }

    /// A key the admin wrote with an escaped line break (`"a\nb"`) reaches the error's key
    /// and message: it is shown escaped, so the error stays one line.
    #[test]
    fn regression_fuzz_config_control_char_in_key() {
        let e = parse_config("[profiles.\"a\\nb\"]\n", "fuzz.toml").unwrap_err();
        let shown = e.to_string();
        assert!(!shown.contains('\n'), "{shown:?}");
        assert_eq!(e.key.as_deref(), Some("profiles.a\\nb"), "{shown}");
    }

    /// Found by `scripts/fuzz config`: a node set named `"cp\nu"` was accepted, and its
    /// name reached users' one-line messages (`--gpudirect=auto: node set cp` / `u ...`).
    #[test]
    fn regression_fuzz_config_control_char_in_node_set_name() {
        let text = "[[node_set]]\nname = \"cp\\nu\"\nhosts = \"login[3-4]\"\n";
        let e = parse_config(text, "fuzz.toml").unwrap_err();
        let shown = e.to_string();
        assert!(!shown.contains('\n'), "{shown:?}");
        assert_eq!(e.line, Some(1), "{shown}");
        assert_eq!(e.key.as_deref(), Some("node_set[0] (cp?u).name"), "{shown}");
        let blank = parse_config("[[node_set]]\nname = \" \"\nhosts = \"n1\"\n", "t.toml");
        assert!(blank.is_err());
    }

    /// Found with the `config` target's failing-probe check: names of libraries and paths
    /// are printed in check failures, one line per node; control characters are refused.
    #[test]
    fn regression_fuzz_config_control_char_in_paths() {
        let base = "[profiles.p]\ncontrol_nic = \"eth0\"\nlibrary_dirs = [\"/lib\"]\n";
        for (extra, key) in [
            (
                "[profiles.p.checks]\nlibraries = [\"a\\rb.so\"]\n",
                "profiles.p.checks.libraries",
            ),
            (
                "topology_file = \"/t\\u001b[2Jx\"\n",
                "profiles.p.topology_file",
            ),
            (
                "[profiles.p.checks]\nrxdm_socket_dir = \"/run/\\tx\"\n",
                "profiles.p.checks.rxdm_socket_dir",
            ),
        ] {
            let e = parse_config(&format!("{base}{extra}"), "t.toml").unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{extra}: {e}");
            assert!(!e.to_string().contains(['\n', '\r', '\u{1b}']), "{e}");
        }
        let lib_dir = "[profiles.p]\ncontrol_nic = \"eth0\"\nlibrary_dirs = [\"/l\\tib\"]\n";
        let e = parse_config(lib_dir, "t.toml").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("profiles.p.library_dirs"), "{e}");
    }

    #[test]
    fn shipped_configs_parse() {
        let shipped = include_str!("../../slurm-conf/gpudirect.toml");
        let local = include_str!("../../slurm-conf/local-cluster.toml");
        let config = parse_config(&format!("{shipped}{local}"), "shipped").unwrap();
        let tcpx = &config.profiles["tcpx"];
        assert_eq!(tcpx.transport.as_deref(), Some("GPUDirectTCPX"));
        assert_eq!(tcpx.env.len(), 20);
        assert_eq!(
            config.node_set_for("a3h-0007").unwrap().nic_names["eth1"],
            "enp6s0"
        );
        assert_eq!(
            config.node_set_for("cpu-042").unwrap().default_mode,
            Some(Mode::None)
        );
        let local_set = config.node_set_for("node2").unwrap();
        assert_eq!(
            local_set.skip_checks,
            [
                CheckKind::Libraries,
                CheckKind::RxdmSocketDir,
                CheckKind::NicSpeed,
                CheckKind::Gpus
            ]
        );
        assert_eq!(tcpx.node_line_rate_gbps(), Some(100.0));
        assert_eq!(
            config.profile_names(),
            [
                "azure-ndv5",
                "efa",
                "gib",
                "gib-a4",
                "ib",
                "socket",
                "tcpx",
                "tcpxo"
            ]
        );
        let tcpxo = &config.profiles["tcpxo"];
        assert_eq!(tcpxo.transport.as_deref(), Some("FasTrak"));
        assert_eq!(tcpxo.data_nics.len(), 8);
        assert_eq!(tcpxo.env.len(), 22);
        assert_eq!(tcpxo.nic_locality, NicLocality::Sysfs);
        assert_eq!(tcpxo.library_dirs, ["/var/lib/tcpxo/lib64"]);
        let mega = config.node_set_for("a3m-0042").unwrap();
        assert_eq!(mega.profile.as_deref(), Some("tcpxo"));
        assert_eq!(mega.nic_names["eth8"], "enp142s0");
        assert_eq!(
            config.node_set_for("a3m-cos-0042").unwrap().name,
            "a3-mega-cos"
        );
        for name in ["gib", "gib-a4"] {
            let gib = &config.profiles[name];
            assert_eq!(gib.transport.as_deref(), Some("gIB"));
            assert_eq!(gib.data_nic_class, NicClass::Infiniband);
            assert_eq!(gib.library_dirs, ["/usr/local/gib/lib64"]);
        }
        let efa = &config.profiles["efa"];
        assert_eq!(efa.transport.as_deref(), Some("Libfabric"));
        assert!(efa.env.iter().any(|v| v.name == "FI_PROVIDER"));
        let ib = &config.profiles["ib"];
        assert_eq!(ib.data_nic_class, NicClass::Infiniband);
        assert_eq!(ib.data_nics[0], "mlx5_0");
        let azure = &config.profiles["azure-ndv5"];
        assert_eq!(
            azure.topology_file.as_deref(),
            Some("/opt/microsoft/ndv5-topo.xml")
        );
        assert!(azure.checks.topology_file);
        // The local cluster's node set still comes last and still parses.
        assert_eq!(config.node_sets.last().unwrap().name, "local");
    }

    #[test]
    fn nic_class_and_locality_are_checked() {
        let config = parse_config(
            "[profiles.ib]\ndata_nic_class = \"infiniband\"\ndata_nics = [\"mlx5_0\"]\nnic_locality = \"sysfs\"\npin_cpus = true\n",
            "t.toml",
        )
        .unwrap();
        let ib = &config.profiles["ib"];
        assert_eq!(ib.data_nic_class, NicClass::Infiniband);
        assert_eq!(ib.nic_locality, NicLocality::Sysfs);
        assert!(ib.pin_cpus, "sysfs gives the CPUs: no nic_cpus needed");
        let defaults = parse_config("[profiles.p]\n", "t.toml").unwrap();
        assert_eq!(defaults.profiles["p"].data_nic_class, NicClass::Net);
        assert_eq!(defaults.profiles["p"].nic_locality, NicLocality::Config);
        let e = err("[profiles.x]\n\ndata_nic_class = \"rdma\"\n");
        assert_eq!(e.line, Some(3));
        assert_eq!(e.key.as_deref(), Some("profiles.x.data_nic_class"));
        assert!(e.message.contains("\"infiniband\""), "{e}");
        let e = err("[profiles.x]\nnic_locality = \"pci\"\n");
        assert_eq!(e.line, Some(2));
        assert_eq!(e.key.as_deref(), Some("profiles.x.nic_locality"));
        assert!(e.message.contains("\"sysfs\""), "{e}");
    }

    /// A base with every key `SAMPLE`'s tcpx leaves out.
    const OTHER_KEYS: &str = r#"
[profiles.rdma]
strict = true
data_nic_class = "infiniband"
nic_locality = "sysfs"
data_nics = ["mlx5_0", "mlx5_1"]
line_rate_gbit = 400
topology_file = "/etc/topo.xml"
[profiles.rdma.checks]
topology_file = true
"#;

    /// `extends` alone: the profile is its base but for its name and where that is written.
    #[test]
    fn extends_inherits_every_key_it_does_not_write() {
        let text = format!(
            "{SAMPLE}{OTHER_KEYS}\n[profiles.tcpx-copy]\nextends = \"tcpx\"\n[profiles.rdma-copy]\nextends = \"rdma\"\n"
        );
        let config = parse_config(&text, "t.toml").unwrap();
        for (base, copy, line) in [("tcpx", "tcpx-copy", 39), ("rdma", "rdma-copy", 41)] {
            let base = &config.profiles[base];
            let copy = &config.profiles[copy];
            assert_eq!(copy.extends.as_deref(), Some(base.name.as_str()));
            assert_eq!(copy.lines.name, line);
            let mut as_base = copy.clone();
            as_base.name = base.name.clone();
            as_base.extends = None;
            as_base.lines.name = base.lines.name;
            assert_eq!(&as_base, base, "{copy:#?}");
        }
        assert!(config.profiles["rdma-copy"].strict);
        assert_eq!(
            config.profiles["tcpx-copy"].lines.data_nics,
            Some(6),
            "an inherited key's line is the base's"
        );
    }

    #[test]
    fn a_key_the_profile_writes_replaces_the_bases() {
        let text = format!(
            "{SAMPLE}\n[profiles.one-nic]\nextends = \"tcpx\"\ndescription = \"one NIC\"\nstrict = true\ntransport = \"Socket\"\ndata_nics = [\"eth1\"]\ngpu_nics = [\"eth1\"]\nnic_cpus = {{ eth1 = \"0-1\" }}\n[profiles.one-nic.checks]\nnics = true\n"
        );
        let config = parse_config(&text, "t.toml").unwrap();
        let tcpx = &config.profiles["tcpx"];
        let one = &config.profiles["one-nic"];
        assert_eq!(one.description, "one NIC");
        assert!(one.strict);
        assert_eq!(one.transport.as_deref(), Some("Socket"));
        assert_eq!(one.data_nics, ["eth1"]);
        assert_eq!(one.gpu_nics, ["eth1"]);
        assert_eq!(one.nic_cpus.len(), 1);
        assert_eq!(one.nic_cpus["eth1"].to_string(), "0-1");
        // `checks` is one key: written, it replaces the base's table whole.
        assert_eq!(one.checks.required(), [CheckKind::Nics]);
        assert_eq!(one.lines.data_nics, Some(34));
        assert_eq!(one.lines.check_libraries, None);
        // What it does not write is tcpx's.
        assert_eq!(one.control_nic, tcpx.control_nic);
        assert_eq!(one.library_dirs, tcpx.library_dirs);
        assert!(one.pin_cpus);
        assert_eq!(one.env, tcpx.env);
        // `false` written is written: it is not "left out".
        let text = format!("{SAMPLE}\n[profiles.loose]\nextends = \"tcpx\"\npin_cpus = false\n");
        let config = parse_config(&text, "t.toml").unwrap();
        assert!(!config.profiles["loose"].pin_cpus);
    }

    #[test]
    fn env_merges_by_name_and_the_extending_profiles_values_win() {
        let text = format!(
            "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\n[profiles.tuned.env]\nNCCL_NET = \"GPUDirectTCPX_v8\"\nNCCL_MIN_NCHANNELS = \"32\"\n"
        );
        let config = parse_config(&text, "t.toml").unwrap();
        let tuned = &config.profiles["tuned"];
        let var = |name: &str| tuned.env.iter().find(|v| v.name == name).unwrap();
        let names: Vec<&str> = tuned.env.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "NCCL_MIN_NCHANNELS",
                "NCCL_NET",
                "NCCL_SOCKET_IFNAME",
                "PREFIX"
            ]
        );
        assert_eq!(
            var("NCCL_NET").value,
            Template::parse("GPUDirectTCPX_v8").unwrap()
        );
        assert_eq!(
            var("NCCL_NET").line,
            32,
            "the override's line, not the base's"
        );
        assert!(
            var("NCCL_NET").forced,
            "tcpx forces it; the override stays forced"
        );
        assert_eq!(
            var("NCCL_MIN_NCHANNELS").value,
            Template::parse("32").unwrap()
        );
        assert_eq!(var("NCCL_MIN_NCHANNELS").line, 33);
        assert!(!var("NCCL_MIN_NCHANNELS").forced);
        assert_eq!(var("PREFIX").line, 17, "inherited: the base's line");
        assert_eq!(
            config.profiles["tcpx"].env.len(),
            3,
            "the base is left as it was"
        );
    }

    #[test]
    fn forced_is_the_union_of_both_lists() {
        let text = format!(
            "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\nforced = [\"PREFIX\", \"NEW\"]\n[profiles.tuned.env]\nNEW = \"1\"\n"
        );
        let config = parse_config(&text, "t.toml").unwrap();
        let forced: Vec<&str> = config.profiles["tuned"]
            .env
            .iter()
            .filter(|v| v.forced)
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(forced, ["NCCL_NET", "NEW", "PREFIX"]);
        // A forced name is checked against the merged [env].
        let e = err(&format!(
            "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\nforced = [\"NOPE\"]\n"
        ));
        assert_eq!(e.key.as_deref(), Some("profiles.tuned.forced"));
        assert_eq!(e.line, Some(31));
    }

    #[test]
    fn extends_errors_name_the_key_and_the_fix() {
        let base = "[profiles.base]\ntransport = \"X\"\n";
        let cases: &[(&str, &str)] = &[
            (
                "[profiles.tuned]\nextends = \"bsae\"\n",
                "no profile `bsae` to extend (profiles: base): fix the name or add [profiles.bsae]",
            ),
            (
                "[profiles.tuned]\nextends = \"tuned\"\n",
                "a profile cannot extend itself",
            ),
            (
                "[profiles.tuned]\nextends = \"mid\"\n[profiles.mid]\nextends = \"base\"\n",
                "`mid` itself extends `base`, and a profile extends one level only: extend `base` directly",
            ),
            (
                "[profiles.tuned]\nextends = \"none\"\n",
                "`none` is a built-in mode, not a profile",
            ),
            (
                "[profiles.tuned]\nextends = \"auto\"\n",
                "`auto` is a built-in mode, not a profile",
            ),
        ];
        for (child, needle) in cases {
            let e = err(&format!("{base}{child}"));
            assert_eq!(e.file, "/etc/slurm/gpudirect.toml");
            assert_eq!(e.line, Some(4), "{child}: {e}");
            assert_eq!(
                e.key.as_deref(),
                Some("profiles.tuned.extends"),
                "{child}: {e}"
            );
            assert!(e.message.contains(needle), "{child}: {e}");
        }
    }

    /// The file's order does not matter: the base may come after the profile that extends
    /// it, whichever name sorts first.
    #[test]
    fn the_base_may_be_written_after_the_extending_profile() {
        for (child, base) in [("a-tuned", "zz"), ("zz-tuned", "a")] {
            let text = format!(
                "[profiles.{child}]\nextends = \"{base}\"\n[profiles.{child}.env]\nB = \"2\"\n\n[profiles.{base}]\ntransport = \"X\"\n[profiles.{base}.env]\nA = \"1\"\n"
            );
            let config = parse_config(&text, "t.toml").unwrap();
            let tuned = &config.profiles[child];
            assert_eq!(tuned.transport.as_deref(), Some("X"), "{text}");
            let env: Vec<(&str, usize)> = tuned
                .env
                .iter()
                .map(|v| (v.name.as_str(), v.line))
                .collect();
            assert_eq!(env, [("A", 9), ("B", 4)], "{text}");
            assert_eq!(tuned.lines.name, 1);
        }
    }

    /// A check that fails on the merged profile because of an inherited key points at the
    /// base's line and says where the key comes from.
    #[test]
    fn an_error_in_an_inherited_key_points_at_the_base() {
        let text =
            format!("{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\ndata_nics = [\"eth3\"]\n");
        let e = err(&text);
        assert_eq!(e.key.as_deref(), Some("profiles.tuned.gpu_nics"), "{e}");
        assert_eq!(e.line, Some(7), "tcpx's gpu_nics: {e}");
        assert!(
            e.message.contains("`eth1` is not one of data_nics (eth3) (inherited from profiles.tcpx: write the key in profiles.tuned to override it)"),
            "{e}"
        );
        // The profile's own key: no such note.
        let e = err(&format!(
            "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\ngpu_nics = [\"eth9\"]\n"
        ));
        assert_eq!(e.line, Some(31));
        assert!(!e.message.contains("inherited"), "{e}");
        // An unknown key in an extending profile is still an error.
        let e = err(&format!(
            "{SAMPLE}\n[profiles.tuned]\nextends = \"tcpx\"\nextend = \"x\"\n"
        ));
        assert_eq!(e.line, Some(31));
        assert!(e.message.contains("extend"), "{e}");
    }

    /// What `gpudirect tune --write` makes without a base: a profile of a description and
    /// variables only, accepted as it always was.
    #[test]
    fn a_standalone_tuned_profile_is_accepted() {
        let shipped = include_str!("../../slurm-conf/gpudirect.toml");
        let overlay = "# Written by `gpudirect tune` (run t1).\n\n[profiles.tuned]\ndescription = \"NCCL_MIN_NCHANNELS=32 (gpudirect tune t1)\"\n\n[profiles.tuned.env]\nNCCL_MIN_NCHANNELS = \"32\"\n";
        let config = parse_config(&format!("{shipped}{overlay}"), "shipped").unwrap();
        let tuned = &config.profiles["tuned"];
        assert_eq!(tuned.extends, None);
        assert_eq!(tuned.transport, None);
        assert!(tuned.data_nics.is_empty());
        assert_eq!(tuned.env.len(), 1);
        assert_eq!(tuned.env[0].name, "NCCL_MIN_NCHANNELS");
        assert!(declares_profile(&format!("{shipped}{overlay}"), "tuned"));
    }

    /// The shipped config with the overlay `gpudirect tune --write` makes for `tcpx`
    /// appended, as the admin installs it.
    #[test]
    fn the_shipped_config_with_a_tuned_overlay_parses() {
        let shipped = include_str!("../../slurm-conf/gpudirect.toml");
        let overlay = "# Written by `gpudirect tune` (run t1234) at 2026-11-30T22:00:00Z.\n# Measured: all_reduce.\n\n[profiles.tcpx-tuned]\nextends = \"tcpx\"\ndescription = \"tcpx with NCCL_MIN_NCHANNELS=32 (gpudirect tune t1234, all_reduce ...)\"\n\n[profiles.tcpx-tuned.env]\nNCCL_MIN_NCHANNELS = \"32\"\n";
        let text = format!("{shipped}{overlay}");
        let config = parse_config(&text, "shipped").unwrap();
        let tcpx = &config.profiles["tcpx"];
        let tuned = &config.profiles["tcpx-tuned"];
        assert_eq!(tuned.extends.as_deref(), Some("tcpx"));
        assert!(tuned
            .description
            .starts_with("tcpx with NCCL_MIN_NCHANNELS=32"));
        assert_eq!(tuned.transport.as_deref(), Some("GPUDirectTCPX"));
        assert_eq!(tuned.control_nic, tcpx.control_nic);
        assert_eq!(tuned.data_nics, tcpx.data_nics);
        assert_eq!(tuned.gpu_nics, tcpx.gpu_nics);
        assert_eq!(tuned.nic_cpus, tcpx.nic_cpus);
        assert_eq!(tuned.checks, tcpx.checks);
        assert_eq!(tuned.env.len(), tcpx.env.len() + 1);
        for var in &tcpx.env {
            assert!(tuned.env.contains(var), "{}", var.name);
        }
        let new = tuned
            .env
            .iter()
            .find(|v| v.name == "NCCL_MIN_NCHANNELS")
            .unwrap();
        assert_eq!(new.value, Template::parse("32").unwrap());
        assert_eq!(new.line, shipped.lines().count() + 9);
        assert!(!new.forced);
        // srun's scan before submission finds it.
        assert!(declares_profile(&text, "tcpx-tuned"));
    }

    #[test]
    fn empty_config_is_valid() {
        let config = parse_config("", "t.toml").unwrap();
        assert!(config.profiles.is_empty());
        assert!(config.default_mode.is_none());
    }
}
