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
//! gdr = false                         # whether links between nodes must use GPUDirect
//!                                     # RDMA (`gpudirect log` judges it); left out: not judged
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
//! `gpudirect health` can also watch the data NICs' error counters between its runs (check
//! `nic_counters`, on when this table is there):
//!
//! ```toml
//! [nic_counters]
//! state_dir = "/var/lib/gpudirect"    # each node's last readings (nic-counters-NODE.json),
//!                                     # a folder root alone can change
//! [nic_counters.per_minute]           # how much each class may rise per minute (defaults)
//! link = 0                            # link_downed, link_error_recovery, carrier_changes
//! physical = 0                        # symbol_error, local_link_integrity_errors, rx_crc_errors
//! errors = 10                         # port_rcv_errors, rx_errors, tx_errors, ...
//! drops = 100                         # port_xmit_discards, rx_dropped, tx_dropped, ...
//! retransmits = 100                   # RoCE's local_ack_timeout_err, packet_seq_err, ...
//! ```
//!
//! Suspect nodes can be quarantined instead of drained (`--quarantine` on `health`,
//! `validate` and `vet`): put into one Slurm reservation that users' jobs do not land in
//! but the tool's own checks (`gpudirect sweep`) still can (every key optional):
//!
//! ```toml
//! [quarantine]
//! reservation = "gpudirect-quarantine" # the one reservation the tool owns
//! users = ["root"]                    # who may run jobs in it (the admin running sweep)
//! instead_of_drain = false            # true: --drain quarantines instead
//! passes_to_return = 2                # sweeps passed in a row that return a node
//! failures_to_drain = 3               # sweeps failed in a row that drain it
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

mod check;
mod raw;
#[cfg(test)]
mod tests;

use check::{newline_offsets, Checker};
use raw::RawConfig;

use crate::cpulist::CpuList;
use crate::hostlist::HostlistPattern;
use crate::template::{is_nic_name, Placeholder, Template};
pub use crate::text::{escape_controls, line_of, one_line, sanitize_for_message};

/// Modes that are not profile names.
pub const RESERVED_MODES: [&str; 2] = ["none", "auto"];

/// Whether a variable names code a task loads (Python's search paths and startup file,
/// NCCL's and others' plugins, library folders): its path values are
/// `resolve::PathKind::Code`, and a task placeholder in them is refused (security
/// review S5; the config check refuses it, resolve checks the paths). Every other name not
/// on `resolve::DATA_PATH_VARIABLES` has its paths checked as code too.
pub fn loads_code(name: &str) -> bool {
    name.starts_with("PYTHON")
        || name.contains("PLUGIN")
        || name.contains("LIBRARY")
        || name.ends_with("_LIB")
        || name.ends_with("_LIBS")
}

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

impl Mode {
    /// A mode as written, before a config says whether a name is one of its profiles:
    /// `none` and `auto` are the words of their own, anything else names a profile
    /// ([`Config::parse_mode`] also checks that it exists).
    pub fn from_word(text: &str) -> Mode {
        match text {
            "none" => Mode::None,
            "auto" => Mode::Auto,
            name => Mode::Profile(name.to_string()),
        }
    }

    /// The profile's name, when the mode names one.
    pub fn profile_name(&self) -> Option<&str> {
        match self {
            Mode::Profile(name) => Some(name),
            Mode::None | Mode::Auto => None,
        }
    }
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
    /// `gpudirect health` only, where the config has `[nic_counters]` (or health is given
    /// `--counters-state`): no data NIC's error counters rose faster than the limits since
    /// the previous run.
    NicCounters,
}

impl CheckKind {
    /// Every check a profile can ask for and a node set can skip, in the order they run
    /// ([`CheckKind::Ownership`] always runs, after them).
    pub const ALL: [CheckKind; 7] = [
        CheckKind::Nics,
        CheckKind::Libraries,
        CheckKind::TopologyFile,
        CheckKind::RxdmSocketDir,
        CheckKind::NicSpeed,
        CheckKind::Gpus,
        CheckKind::NicCounters,
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
            CheckKind::NicCounters => "nic_counters",
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
    /// Whether the fabric's links between nodes must use GPUDirect RDMA (`gdr`): `gpudirect
    /// log` finds a network link without `/GDRDMA` when true; `None` (the key left out)
    /// judges nothing about it.
    pub gdr: Option<bool>,
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

/// Each job's own NCCL RAS address (`[ras]`): a task the plugin applies a profile to gets
/// `NCCL_RAS_ADDR=127.0.0.1:PORT`, PORT = `port_base` + job id mod `port_span`, unless its
/// user set one. NCCL binds its RAS port with `SO_REUSEPORT`, so without this two jobs of one
/// user on a node answer each other's queries and a second user's job gets no RAS at all.
/// Jobs whose ids differ by a multiple of `port_span` share a port when they share a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RasSettings {
    /// `false`: NCCL_RAS_ADDR is left alone (NCCL's default is localhost:28028).
    pub enabled: bool,
    /// The first port (default 28100, above NCCL's own 28028).
    pub port_base: u16,
    /// How many ports, from `port_base` (default 900: 28100-28999).
    pub port_span: u16,
}

impl Default for RasSettings {
    fn default() -> Self {
        RasSettings {
            enabled: true,
            port_base: 28100,
            port_span: 900,
        }
    }
}

impl RasSettings {
    /// Job `job_id`'s RAS address, when enabled.
    pub fn addr(&self, job_id: u32) -> Option<String> {
        self.candidates(job_id, 1).into_iter().next()
    }

    /// The addresses a node tries for job `job_id`, at most `tries`: the job's own port
    /// first, then the next ones of the range, wrapping around (none when disabled). A node
    /// takes the first it can listen on: another user may hold the job's own port (security
    /// review T1).
    pub fn candidates(&self, job_id: u32, tries: u32) -> Vec<String> {
        if !self.enabled {
            return Vec::new();
        }
        let span = u32::from(self.port_span.max(1));
        // port_base + port_span - 1 <= 65535 is checked when the config is read.
        (0..tries.min(span))
            .map(|k| {
                let port = u32::from(self.port_base) + (job_id % span + k) % span;
                format!("127.0.0.1:{port}")
            })
            .collect()
    }
}

/// Job telemetry (`[watch]`): NCCL's Inspector profiler plugin turned on for the tasks of a
/// job that asks (`GPUDIRECT_WATCH=1` in its environment) or for every job (`always`), its
/// dumps in a folder per job on the node, `<dump_root>/gpudirect-watch-<job id>`, which the
/// plugin makes as the job's user (mode 0700) before the task starts: NCCL's Inspector
/// makes each dump file mode 0666, so the folder alone keeps other users out, and ranks that
/// race to make the folder themselves lose their dumps (docs/results/watch-feasibility.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSettings {
    /// The Inspector library (`scripts/build-inspector`), an absolute path.
    pub inspector: String,
    /// The connection profiler (`libgpudirect_watch_profiler.so`, built from
    /// `watch-profiler/`), an absolute path: where set, it is the profiler NCCL loads, with
    /// the Inspector chained behind it, and `watch` can name the slow connection's node and
    /// NIC, not only a slow communicator.
    pub connections: Option<String>,
    /// Node-local folder under which each job's dump folder is made (default `/tmp`).
    pub dump_root: String,
    /// How often each rank writes its dumps, milliseconds (default 1000).
    pub interval_ms: u32,
    /// Whether dumps carry each collective's start time (default true: names how late a
    /// late rank is).
    pub verbose: bool,
    /// Every job with a profile gets it, not only those that ask.
    pub always: bool,
    /// Whether job telemetry replaces a profiler the profile loads itself (its `[env]`
    /// `NCCL_PROFILER_PLUGIN`, or a `libnccl-profiler.so` in its `library_dirs`, which NCCL
    /// loads when that variable is unset; GCP's gIB images ship CoMMA so). NCCL loads one
    /// profiler: false (default) leaves such a profile's jobs without telemetry, true gives
    /// them telemetry instead of their profiler. Either way the step's notes say which.
    pub replace_profiler: bool,
}

impl WatchSettings {
    /// The variable a job sets to `1` to ask for telemetry.
    pub const ASK: &'static str = "GPUDIRECT_WATCH";

    /// Whether a task with this environment asked for telemetry ([`Self::ASK`] is `1`).
    pub fn asked(env: &dyn Fn(&str) -> Option<String>) -> bool {
        env(Self::ASK).as_deref() == Some("1")
    }

    /// Job `job_id`'s dump folder on a node.
    pub fn dump_dir(&self, job_id: u32) -> String {
        format!(
            "{}/gpudirect-watch-{job_id}",
            self.dump_root.trim_end_matches('/')
        )
    }
}

/// Quarantine (`[quarantine]`): a suspect node goes into one Slurm reservation
/// (`flags=maint,ignore_jobs,flex`) that users' jobs do not land in, but whose users (the
/// admin's sweep) can still test it, with partners outside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineSettings {
    /// The reservation's name (letters, digits, `-`, `_`, `.`).
    pub reservation: String,
    /// The users allowed to run jobs in it (at least one).
    pub users: Vec<String>,
    /// `--drain` quarantines instead of draining.
    pub instead_of_drain: bool,
    /// Sweeps passed in a row that return a quarantined node to service.
    pub passes_to_return: u32,
    /// Sweeps failed in a row that turn a quarantine into a drain.
    pub failures_to_drain: u32,
}

impl QuarantineSettings {
    /// The reservation's name when the config does not write one.
    pub const DEFAULT_RESERVATION: &'static str = "gpudirect-quarantine";
}

impl Default for QuarantineSettings {
    fn default() -> Self {
        QuarantineSettings {
            reservation: Self::DEFAULT_RESERVATION.to_string(),
            users: vec!["root".to_string()],
            instead_of_drain: false,
            passes_to_return: 2,
            failures_to_drain: 3,
        }
    }
}

/// A class of NIC error counters, each with its own limit in `[nic_counters.per_minute]`
/// (`gpudirect health`'s `nic_counters` check says which counter is in which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CounterClass {
    /// The link went down or retrained: `link_downed`, `link_error_recovery`,
    /// `carrier_changes`.
    Link,
    /// Bit errors on the wire: `symbol_error`, `local_link_integrity_errors`,
    /// `rx_crc_errors`, ...
    Physical,
    /// Packets received or sent in error: `port_rcv_errors`, `rx_errors`, `tx_errors`, ...
    Errors,
    /// Packets dropped: `port_xmit_discards`, `rx_dropped`, `tx_dropped`,
    /// `rx_missed_errors`, ...
    Drops,
    /// RDMA transport retries (an RoCE NIC's `hw_counters`): `local_ack_timeout_err`,
    /// `packet_seq_err`, `out_of_sequence`, ...
    Retransmits,
}

impl CounterClass {
    /// Every class, in the order findings are listed.
    pub const ALL: [CounterClass; 5] = [
        CounterClass::Link,
        CounterClass::Physical,
        CounterClass::Errors,
        CounterClass::Drops,
        CounterClass::Retransmits,
    ];

    /// The key in `[nic_counters.per_minute]`, and the word in messages.
    pub fn name(self) -> &'static str {
        match self {
            CounterClass::Link => "link",
            CounterClass::Physical => "physical",
            CounterClass::Errors => "errors",
            CounterClass::Drops => "drops",
            CounterClass::Retransmits => "retransmits",
        }
    }

    /// How much a counter of this class may rise per minute when the config does not say:
    /// a link that went down or a bit error on the wire is a finding at once; a few
    /// damaged packets, drops and retries a minute are a busy fabric's normal.
    pub fn default_per_minute(self) -> u64 {
        match self {
            CounterClass::Link | CounterClass::Physical => 0,
            CounterClass::Errors => 10,
            CounterClass::Drops | CounterClass::Retransmits => 100,
        }
    }
}

/// `gpudirect health`'s NIC error counters (`[nic_counters]`): where it keeps each node's
/// last readings, and how fast each class of counter may rise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicCounterSettings {
    /// The folder of the state files, one per node (`nic-counters-<node>.json`): root's
    /// alone when health runs as root. Default [`NicCounterSettings::DEFAULT_STATE_DIR`].
    pub state_dir: String,
    /// The rise each class may make per minute, by class; a class not written has its
    /// [`CounterClass::default_per_minute`].
    pub per_minute: BTreeMap<CounterClass, u64>,
}

impl NicCounterSettings {
    /// Where the state files go when `state_dir` is not written.
    pub const DEFAULT_STATE_DIR: &'static str = "/var/lib/gpudirect";

    /// The limit of `class`, per minute.
    pub fn limit(&self, class: CounterClass) -> u64 {
        self.per_minute
            .get(&class)
            .copied()
            .unwrap_or_else(|| class.default_per_minute())
    }
}

impl Default for NicCounterSettings {
    fn default() -> Self {
        NicCounterSettings {
            state_dir: Self::DEFAULT_STATE_DIR.to_string(),
            per_minute: CounterClass::ALL
                .into_iter()
                .map(|c| (c, c.default_per_minute()))
                .collect(),
        }
    }
}

/// The whole checked config.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it was read from, for messages.
    pub source: String,
    /// The mode of steps that ask for none, where no node set says.
    pub default_mode: Option<Mode>,
    /// Each job's own RAS address.
    pub ras: RasSettings,
    /// Job telemetry, when the config has a `[watch]` table.
    pub watch: Option<WatchSettings>,
    /// `gpudirect health`'s NIC error counters, when the config has a `[nic_counters]`
    /// table.
    pub nic_counters: Option<NicCounterSettings>,
    /// Where suspect nodes are quarantined (`[quarantine]`, defaults without it).
    pub quarantine: QuarantineSettings,
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
        match Mode::from_word(text) {
            Mode::Profile(name) if !self.profiles.contains_key(&name) => Err(UnknownMode {
                mode: sanitize_for_message(text),
                known: self.profile_names().join(", "),
            }),
            mode => Ok(mode),
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

/// Reads a config from its text; `source` names the file in errors. The first error
/// only: all the plugin and the commands need to refuse a config ([`config_errors`]
/// finds every one, for `gpudirect profiles check`).
pub fn parse_config(text: &str, source: &str) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(text, source, &e))?;
    Checker {
        source,
        newlines: newline_offsets(text),
    }
    .check(raw, &BTreeSet::new())
    .map_err(|found| {
        // `check` never fails without an error; a message all the same.
        found.into_iter().next().unwrap_or_else(|| ConfigError {
            file: source.to_string(),
            line: None,
            key: None,
            message: "the config is not valid".into(),
        })
    })
}

/// Every error of a config, as a linter reports them, each with its line, key and fix;
/// the first is the one [`parse_config`] gives. A TOML syntax error stops the reading
/// (it is the only one); a key serde refuses (unknown, or of the wrong type) is reported
/// and left out, and the reading goes on without it; then every check runs, except those
/// about a table (a profile, a node set, `[ras]`, ...) that already has such an error:
/// their errors could be the left-out key's consequence, not mistakes of their own.
pub fn config_errors(text: &str, source: &str) -> Result<Config, Vec<ConfigError>> {
    let first = match parse_config(text, source) {
        Ok(config) => return Ok(config),
        Err(first) => first,
    };
    let mut all = every_error(text, source);
    all.retain(|e| *e != first);
    all.insert(0, first);
    Err(all)
}

/// [`config_errors`]' search, in reading order (its caller puts the first one first).
fn every_error(text: &str, source: &str) -> Vec<ConfigError> {
    let Ok(mut table) = toml::de::DeTable::parse(text) else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    let mut refused: Vec<Vec<String>> = Vec::new();
    let raw = loop {
        let read = RawConfig::deserialize(toml::de::Deserializer::from(table.clone()));
        let error = match read {
            Ok(raw) => break Some(raw),
            Err(e) => e,
        };
        errors.push(toml_error(text, source, &error));
        let removed = error
            .span()
            .and_then(|span| raw::remove_entry_at(table.get_mut(), span.start));
        match removed {
            // A config has fewer keys than this; past it, something is wrong here.
            Some(path) if refused.len() < MAX_REFUSED_KEYS => refused.push(path),
            _ => break None,
        }
    };
    let Some(raw) = raw else {
        return errors;
    };
    // A profile refused whole is reported: naming it elsewhere is no error of its own.
    let gone: BTreeSet<String> = refused
        .iter()
        .filter_map(|path| match path.as_slice() {
            [profiles, name] if profiles == "profiles" => Some(name.clone()),
            _ => None,
        })
        .collect();
    let checker = Checker {
        source,
        newlines: newline_offsets(text),
    };
    if let Err(found) = checker.check(raw, &gone) {
        errors.extend(found.into_iter().filter(|e| {
            !refused
                .iter()
                .any(|path| raw::same_table(path, e.key.as_deref()))
        }));
    }
    errors
}

/// How many refused keys [`every_error`] reads past.
const MAX_REFUSED_KEYS: usize = 200;

/// A TOML or serde error of `text` as a config error.
fn toml_error(text: &str, source: &str, e: &toml::de::Error) -> ConfigError {
    ConfigError {
        file: source.to_string(),
        line: e.span().map(|s| line_of(text, s.start)),
        key: None,
        // The toml crate's messages can span lines ("invalid table header\nexpected ...").
        message: one_line(e.message()),
    }
}
