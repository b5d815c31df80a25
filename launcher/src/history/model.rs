//! The history's data: what goes in (`New*`, filled by an importer or the runner) and
//! what comes out of queries (serialisable for `--json`).
//!
//! The storage types are deliberately independent of the nccl-tests parser: an importer
//! maps the parser's output onto [`NewRun`], so either side can change without the other.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A run's id in the history (SQLite rowid).
pub type RunId = i64;

/// How a run ended, as the checks judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Exit 0, no wrong values, transport as expected.
    #[default]
    Ok,
    /// Results were checked and some were wrong (`#wrong` > 0, out-of-bounds FAILED, exit 7).
    Wrong,
    /// The per-cell timeout (or nccl-tests' `-T`) ended it.
    Timeout,
    /// Any other failure: non-zero exit, wrong transport, crash.
    Failed,
    /// Stopped by the user (Ctrl-C) or the job's end.
    Interrupted,
}

/// The command that recorded a run (the `tool` column, migration 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// `gpudirect run`.
    #[default]
    Run,
    /// `gpudirect tune`.
    Tune,
    /// `gpudirect import`.
    Import,
    /// `gpudirect validate` (nccl pairs, rails, per rail).
    Validate,
    /// `gpudirect vet` (its pairs and rails).
    Vet,
    /// `gpudirect health --quick-nccl`.
    Health,
}

impl Tool {
    /// The tool of a run recorded before the column, from its variant (what migration 6
    /// fills in, and the rule export used to guess with): `health`, `validate:*` and a rail
    /// run's `rail:*` are validate's, `vet:*` vet's, anything else `run`'s.
    pub fn of_variant(variant: Option<&str>) -> Tool {
        match variant {
            Some("health") => Tool::Health,
            Some(v) if v.starts_with("validate:") || v.starts_with("rail:") => Tool::Validate,
            Some(v) if v.starts_with("vet:") => Tool::Vet,
            _ => Tool::Run,
        }
    }
}

/// Where a run's processes were started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LaunchKind {
    /// `srun` inside a Slurm allocation.
    Srun,
    /// `mpirun`.
    Mpirun,
    /// The binary run directly on this host (`-g N`).
    Local,
    /// Recorded elsewhere and brought in by `gpudirect import`.
    #[default]
    Import,
}

/// nccl-tests' two timing columns per row: out-of-place and in-place.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum Placement {
    /// Out-of-place (separate send and receive buffers); stored as `out`.
    #[default]
    #[serde(rename = "out")]
    Out,
    /// In-place; stored as `in`.
    #[serde(rename = "in")]
    In,
}

macro_rules! text_enum {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// The word stored in the database and shown to users.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),+ }
            }
            /// Every value, in declaration order (for help texts and CLI value lists).
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    _ => Err(format!(
                        "unknown {} `{s}`: expected one of {}",
                        stringify!($ty),
                        [$($text),+].join(", ")
                    )),
                }
            }
        }
    };
}

text_enum!(RunStatus { Ok => "ok", Wrong => "wrong", Timeout => "timeout", Failed => "failed", Interrupted => "interrupted" });
text_enum!(LaunchKind { Srun => "srun", Mpirun => "mpirun", Local => "local", Import => "import" });
text_enum!(Placement { Out => "out", In => "in" });
text_enum!(Tool { Run => "run", Tune => "tune", Import => "import", Validate => "validate", Vet => "vet", Health => "health" });

/// One row of an nccl-tests table, for one placement (a text row gives two of these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRow {
    /// Message size in bytes (`size` column).
    pub size_bytes: u64,
    /// Element count (`count` column).
    pub count: u64,
    /// Data type as printed, e.g. `float`, `bfloat16`.
    pub dtype: String,
    /// Reduction op as printed, e.g. `sum`; `none` for collectives without one.
    pub redop: String,
    /// Root rank; `None` where the collective has none (nccl-tests prints -1 or nothing).
    pub root: Option<i64>,
    /// Out-of-place or in-place.
    pub placement: Placement,
    /// Time in microseconds. Non-finite values are stored as NULL.
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s (1e9 bytes). Non-finite values are stored as NULL.
    pub algbw: f64,
    /// Bus bandwidth, GB/s (1e9 bytes). Non-finite values are stored as NULL.
    pub busbw: f64,
    /// `#wrong`; `None` when not checked (`-c 0` prints `N/A`).
    pub wrong: Option<u64>,
    /// The algorithm NCCL chose for this size (`RING`, `TREE`, ...; `RING+TREE` when it
    /// varied), from its per-operation lines; `None` without them.
    #[serde(default)]
    pub algorithm: Option<String>,
    /// The protocol NCCL chose for this size (`SIMPLE`, `LL`, `LL128`), likewise.
    #[serde(default)]
    pub protocol: Option<String>,
}

/// A per-node (or per-pair) number recorded by validation, kept with its run. The same
/// fields go in ([`NewNodeResult`]) and come back out of the history.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeResult {
    /// The node the number is about.
    pub node: String,
    /// Its part in the measurement, e.g. `pair`, `single`, `recheck` (free text).
    pub role: Option<String>,
    /// The other node of a pair, if any.
    pub partner: Option<String>,
    /// Message size the number was read at.
    pub size_bytes: Option<u64>,
    /// Bus bandwidth, GB/s.
    pub busbw: Option<f64>,
    /// What validation concluded, e.g. `ok`, `slow`, `suspect` (free text).
    pub verdict: Option<String>,
}

/// What ran and on what software, as the launch and the output said, and what the parser
/// noted: recorded with a run ([`NewRun::provenance`]) and shown back as it was
/// ([`RunDetail::provenance`]), declared once for both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunProvenance {
    /// The command line as run.
    pub command_line: Option<String>,
    /// Path of the nccl-tests binary.
    pub binary_path: Option<String>,
    /// Environment variables that mattered (NCCL_*, FI_*, LD_LIBRARY_PATH ...).
    pub env: BTreeMap<String, String>,
    /// nccl-tests version, e.g. `2.19.6`.
    pub nccl_tests_version: Option<String>,
    /// NCCL version, e.g. `2.28.9`.
    pub nccl_version: Option<String>,
    /// CUDA version, e.g. `13.0`.
    pub cuda_version: Option<String>,
    /// The CUDA driver's version code NCCL logged (`cudaDriverVersion 13000`).
    pub cuda_driver: Option<u32>,
    /// The network plugin NCCL loaded, with the plugin's own version where it logged one:
    /// `FasTrak 1.0.17`, `aws-ofi-nccl 1.7.4-aws`, `GPUDirectTCPX_v7`.
    pub net_plugin: Option<String>,
    /// What the parser noted about the output, e.g. a rank count it inferred.
    pub notes: Vec<String>,
}

/// A complete run to record: where and when, what ran, how it ended, its table, and the
/// raw output it came from. `Default` gives an empty `ok` import, convenient with
/// struct-update syntax; set at least `collective`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// Start, unix seconds UTC (see [`crate::units::parse_rfc3339`] for text).
    pub started_at: Option<i64>,
    /// End, unix seconds UTC.
    pub finished_at: Option<i64>,
    /// Slurm cluster name (`SLURM_CLUSTER_NAME`) or a name the user chose.
    pub cluster: Option<String>,
    /// Slurm job id.
    pub job_id: Option<String>,
    /// Slurm step id.
    pub step_id: Option<String>,
    /// The node list in Slurm's compressed form, e.g. `gpu[01-04]`.
    pub nodelist: Option<String>,
    /// Every node that took part, expanded (what `--node` queries match).
    pub nodes: Vec<String>,
    /// Node count; `None` means `nodes.len()` when `nodes` is not empty.
    pub node_count: Option<u32>,
    /// GPUs per node.
    pub gpus_per_node: Option<u32>,
    /// Total ranks (GPUs) in the communicator.
    pub total_ranks: Option<u32>,
    /// Collective, e.g. `all_reduce` (no `_perf` suffix). Required.
    pub collective: String,
    /// Name of the environment variant of the matrix, e.g. `tcpx`, `socket`.
    pub variant: Option<String>,
    /// A name the user gave the run (`import --label`), e.g. `baseline-2026-11` or
    /// `after-fw-upgrade`; `compare --baseline-label` finds runs by it. Free text, not
    /// unique: several runs may carry one label.
    pub label: Option<String>,
    /// What the node's data NICs carry together, GB/s (the profile's `line_rate_gbit`
    /// summed, over 8): busbw is also shown as a share of it. `None` when not declared.
    pub line_rate_gbps: Option<f64>,
    /// How it was launched.
    pub launcher: LaunchKind,
    /// The command that recorded it.
    pub tool: Tool,
    /// The file an import read, as the importer names it (make it absolute so that the
    /// same file imported from another folder is still recognised).
    pub source_path: Option<String>,
    /// Process exit code, if it exited.
    pub exit_code: Option<i32>,
    /// Outcome.
    pub status: RunStatus,
    /// Transport NCCL used between nodes, as detected, e.g. `NET/Socket`, `P2P/CUMEM`.
    pub transport: Option<String>,
    /// `# Avg bus bandwidth`.
    pub avg_busbw: Option<f64>,
    /// Why it failed, one message per problem (empty when ok).
    pub failures: Vec<String>,
    /// The output exactly as captured, kept so that a newer parser can re-read it.
    #[serde(skip)]
    pub raw_output: Vec<u8>,
    /// Version of the parser that produced `rows` from `raw_output`.
    pub parser_version: u32,
    /// What ran and on what software, and what the parser noted.
    #[serde(flatten)]
    pub provenance: RunProvenance,
    /// The table.
    pub rows: Vec<NewRow>,
    /// Per-node numbers from validation (often empty).
    pub node_results: Vec<NewNodeResult>,
}

/// What makes two runs comparable (re-exported as `gpudirect::baseline::Key`, the one
/// key of every baseline): the same collective, cluster, node count, total ranks and
/// variant. `None` fields match runs recorded without that field. Replays and
/// measurements are kept apart besides (a replay is never a measurement's baseline).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RunKey {
    /// The collective, e.g. `all_reduce`.
    pub collective: String,
    /// The cluster name.
    pub cluster: Option<String>,
    /// Nodes in the run.
    pub node_count: Option<u32>,
    /// Ranks (GPUs) in the run.
    pub total_ranks: Option<u32>,
    /// The environment variant (`tcpx`, `validate:pairs`, `health`).
    pub variant: Option<String>,
}

impl RunKey {
    /// A listed run's key.
    pub fn of(run: &RunSummary) -> RunKey {
        RunKey {
            collective: run.collective.clone(),
            cluster: run.cluster.clone(),
            node_count: run.node_count,
            total_ranks: run.total_ranks,
            variant: run.variant.clone(),
        }
    }

    /// The key refined for the report's baseline band: a band is drawn per data type, and
    /// from replays for a replay only.
    pub fn band(self, dtype: &str, replay: bool) -> BandKey {
        BandKey {
            run: self,
            dtype: dtype.to_string(),
            replay,
        }
    }

    /// The key refined for `history --versions`: a version set meets the baseline of its
    /// runs with the same transport and largest size too.
    pub fn versions(self, transport: Option<&str>, max_size_bytes: Option<u64>) -> VersionsKey {
        VersionsKey {
            run: self,
            transport: transport.map(str::to_string),
            max_size_bytes,
        }
    }
}

/// A [`RunKey`] with the data type and the replay marking: what the report's baseline
/// band is the band of ([`RunKey::band`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct BandKey {
    /// The runs' key.
    #[serde(flatten)]
    pub run: RunKey,
    /// Data type.
    pub dtype: String,
    /// Built from replays (for replayed runs) or from measurements.
    pub replay: bool,
}

/// A [`RunKey`] with the transport and the largest size: the runs whose baseline a version
/// set's run must meet in `history --versions` ([`RunKey::versions`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct VersionsKey {
    /// The runs' key.
    pub run: RunKey,
    /// Detected transport.
    pub transport: Option<String>,
    /// Largest size measured, bytes.
    pub max_size_bytes: Option<u64>,
}

/// What [`super::History::import_run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "run_id", rename_all = "lowercase")]
pub enum ImportOutcome {
    /// Recorded as a new run.
    Inserted(RunId),
    /// The same output from the same source was already recorded as this run; nothing
    /// was written.
    Duplicate(RunId),
}

impl ImportOutcome {
    /// The run's id, new or existing.
    pub fn run_id(self) -> RunId {
        match self {
            ImportOutcome::Inserted(id) | ImportOutcome::Duplicate(id) => id,
        }
    }
    /// True when nothing was written because the run was already there.
    pub fn is_duplicate(self) -> bool {
        matches!(self, ImportOutcome::Duplicate(_))
    }
}

/// Which runs a listing or export covers. Every set field must match; `None` matches all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFilter {
    /// Collective, e.g. `all_reduce`.
    pub collective: Option<String>,
    /// Cluster name.
    pub cluster: Option<String>,
    /// Runs that included this node.
    pub node: Option<String>,
    /// Variant name.
    pub variant: Option<String>,
    /// Label (exact match).
    pub label: Option<String>,
    /// Outcome.
    pub status: Option<RunStatus>,
    /// Runs at or after this time (unix seconds UTC).
    pub since: Option<i64>,
    /// At most this many runs (the newest).
    pub limit: Option<u32>,
}

/// One line of `gpudirect history`: a run without its table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// Run id.
    pub id: RunId,
    /// The run's time: start, else end, else import; RFC 3339 UTC. Listings sort on it.
    pub at: String,
    /// Start, RFC 3339 UTC.
    pub started_at: Option<String>,
    /// End, RFC 3339 UTC.
    pub finished_at: Option<String>,
    /// When it entered the history, RFC 3339 UTC.
    pub imported_at: String,
    /// Cluster.
    pub cluster: Option<String>,
    /// Slurm job id.
    pub job_id: Option<String>,
    /// Slurm step id.
    pub step_id: Option<String>,
    /// Compressed node list.
    pub nodelist: Option<String>,
    /// Node count.
    pub node_count: Option<u32>,
    /// GPUs per node.
    pub gpus_per_node: Option<u32>,
    /// Total ranks.
    pub total_ranks: Option<u32>,
    /// Collective.
    pub collective: String,
    /// Variant.
    pub variant: Option<String>,
    /// The label the user gave the run, if any.
    pub label: Option<String>,
    /// Launcher.
    pub launcher: LaunchKind,
    /// The command that recorded it.
    pub tool: Tool,
    /// Outcome.
    pub status: RunStatus,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Detected transport.
    pub transport: Option<String>,
    /// `# Avg bus bandwidth`, GB/s.
    pub avg_busbw: Option<f64>,
    /// The run's busbw, GB/s: out-of-place at its largest size (in-place where that size
    /// has no out-of-place figure), the same rule as [`crate::nccl_output::ParsedOutput::busbw_at_max_size`].
    pub busbw: Option<f64>,
    /// Largest size in the table, bytes.
    pub max_size_bytes: Option<u64>,
    /// Rows in the table.
    pub row_count: u64,
    /// Imported file.
    pub source_path: Option<String>,
    /// SHA-256 of the raw output.
    pub output_sha256: String,
    /// The recording replayed, when the run came from the nccl-tests stand-in (its
    /// `GPUDIRECT_STANDIN_REPLAY` variable): such a run is not a measurement. Read by the
    /// listing query itself, so that a listing needs no second query per run.
    pub replay_of: Option<String>,
    /// The node's line rate in GB/s recorded with the run, when its profile declared one.
    pub line_rate_gbps: Option<f64>,
}

/// A stored table row.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResultRow {
    /// Size in bytes.
    pub size_bytes: u64,
    /// Element count.
    pub count: u64,
    /// Data type.
    pub dtype: String,
    /// Reduction op.
    pub redop: String,
    /// Root rank.
    pub root: Option<i64>,
    /// Placement.
    pub placement: Placement,
    /// Microseconds (None if it was not a finite number).
    pub time_us: Option<f64>,
    /// GB/s.
    pub algbw: Option<f64>,
    /// GB/s.
    pub busbw: Option<f64>,
    /// `#wrong`, None when unchecked.
    pub wrong: Option<u64>,
    /// NCCL's algorithm for this size, when its per-operation lines were in the output.
    pub algorithm: Option<String>,
    /// NCCL's protocol for this size, likewise.
    pub protocol: Option<String>,
}

/// A per-node result to record: a stored one has the same fields.
pub type NewNodeResult = NodeResult;

/// Everything about one run (`gpudirect show`), except the raw output, which
/// [`super::History::raw_output`] returns.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDetail {
    /// The summary fields.
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Nodes, sorted.
    pub nodes: Vec<String>,
    /// What ran and on what software, as recorded.
    #[serde(flatten)]
    pub provenance: RunProvenance,
    /// Failure messages.
    pub failures: Vec<String>,
    /// Parser version that produced `rows`.
    pub parser_version: u32,
    /// Length of the stored raw output, bytes.
    pub raw_output_bytes: u64,
    /// The table, in output order.
    pub rows: Vec<ResultRow>,
    /// Per-node results.
    pub node_results: Vec<NodeResult>,
}

/// One point of a node's history: one run that included the node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRunPoint {
    /// Run id.
    pub run_id: RunId,
    /// Run time, RFC 3339 UTC.
    pub at: String,
    /// Collective.
    pub collective: String,
    /// Cluster.
    pub cluster: Option<String>,
    /// Variant.
    pub variant: Option<String>,
    /// Outcome.
    pub status: RunStatus,
    /// Nodes in that run.
    pub node_count: Option<u32>,
    /// Size read (the one asked for, else the run's largest).
    pub size_bytes: u64,
    /// Data type of the row read.
    pub dtype: String,
    /// Out-of-place busbw at that size, GB/s.
    pub busbw: Option<f64>,
}

/// One per-node validation number for the node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeCheckPoint {
    /// Run id.
    pub run_id: RunId,
    /// Run time, RFC 3339 UTC.
    pub at: String,
    /// Collective.
    pub collective: String,
    /// The stored result.
    #[serde(flatten)]
    pub result: NodeResult,
}

/// `node_history`'s answer: the node's numbers over time, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeHistory {
    /// The node.
    pub node: String,
    /// Runs that included it.
    pub runs: Vec<NodeRunPoint>,
    /// Validation numbers recorded for it.
    pub checks: Vec<NodeCheckPoint>,
}

/// `baseline`'s answer: the median of recent good runs at one size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// Median out-of-place busbw, GB/s.
    pub median_busbw: f64,
    /// The runs it is made of, newest first, with their busbw.
    pub samples: Vec<(RunId, f64)>,
}
