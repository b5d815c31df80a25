//! `nccl-output`: one parser for every form of nccl-tests output.
//!
//! The `gpudirect` launcher parses what each nccl-tests run printed to judge the run and
//! record it in its history (it re-exports this crate as `gpudirect::nccl_output`). The
//! parser is its own crate, depending on serde and serde_json only, so that the fuzz
//! target (`fuzz/fuzz_targets/nccl_output.rs`) and the throughput bench (`benches/parse.rs`)
//! build it without the launcher's SQLite, clap and tracing: several minutes less on two
//! cores. Its tests run on the recorded outputs in the workspace's `tests/fixtures/`.
//!
//! nccl-tests (`all_reduce_perf` and friends) reports in two forms: a `#`-commented text
//! table on stdout, and since late 2025 a JSON file (`-J file.json`). Both change with
//! versions and flags, and under MPI or with `NCCL_DEBUG=INFO` the text interleaves with
//! NCCL's own log lines and the launcher's banners. [`parse`] takes any of them as bytes
//! and returns one [`ParsedOutput`]:
//!
//! ```text
//! # nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809   -> versions
//! # Collective test starting: all_reduce_perf                          -> collective
//! # nThread 1 nGpus 2 minBytes 8 ... step: 2(factor) ...               -> RunParams
//! #  Rank  0 Group  0 Pid 1355 on vm device  0 [0000:00:06] NVIDIA H200 -> RankInfo
//! #        out-of-place                in-place                        -> placement groups
//! #  size  count  type  redop  root  time  algbw  busbw  #wrong  ...    -> column names
//!      8      2  float    sum    -1  19.05  0.00   0.00       0  ...    -> Row
//! vm:1518:1529 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM -> NcclDebugInfo
//! # Out of bounds values : 0 OK                                         -> OutOfBounds
//! # Avg bus bandwidth    : 109.175                                      -> AvgBusBw
//!  .. vm pid 3473: Test failure common.cu:1454                          -> Failure
//! ```
//!
//! Principles:
//! - **Columns are read by the header's names, never by position.** A row is matched to
//!   the header by token order when the counts agree, and otherwise by where each value
//!   ends (nccl-tests right-aligns values under their names), which copes with an empty
//!   `redop` (hypercube), a blank out-of-place block, or a timestamp containing a space.
//! - **Nothing panics and nothing is fatal.** Input is bytes (invalid UTF-8 is replaced),
//!   numbers are parsed with checked conversions, and a line that cannot be understood
//!   becomes a [`Diagnostic`] with its line number. The caller decides what is an error.
//! - **Transport evidence comes from channel lines.** `Using network X` names the network
//!   plugin NCCL loaded; the path traffic took is in `Channel .. via NET/<name>/..` lines
//!   (see [`NcclDebugInfo::network_transport`]).
//!
//! Bus bandwidth arithmetic (the factor per collective and a re-check of the printed
//! numbers) lives in [`busbw`].

// No function over 150 lines outside tests (clippy.toml's threshold counts code lines),
// as in the binary's commands (issue #42); a test's table of cases may run longer.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod busbw;
mod failure;
mod infer;
pub mod inspector;
pub mod joblog;
mod json;
mod other;
pub mod ras;
pub mod start;
mod text;
pub mod topo;
pub mod transport;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use busbw::{busbw_factor, BusBwMismatch};
pub use failure::{Failure, FailureKind};
pub use infer::{Inference, InferredFact};
pub use other::other_program;
pub use start::{line_shows_start, start_seen, StartSeen};
pub use transport::{
    NcclDebugInfo, NetworkUse, PluginVersion, TransportClass, TransportMatch, TransportUse,
    TuningChoice,
};

/// Which form of nccl-tests output a [`ParsedOutput`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceFormat {
    /// The `#`-commented text table printed on stdout.
    Text,
    /// The `-J file.json` report.
    Json,
}

/// Options for [`parse_with`].
#[derive(Debug, Clone, Default)]
pub struct ParseOptions {
    /// The collective the caller ran (e.g. `all_reduce`, or a binary name such as
    /// `all_reduce_perf_mpi`). Used when the output does not name one: text output of
    /// nccl-tests before 2.17 has no `Collective test starting` line.
    pub collective: Option<String>,
}

/// Everything read from one nccl-tests output.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ParsedOutput {
    /// Text or JSON; `None` only for empty input.
    pub format: Option<SourceFormat>,
    /// `2.19.6` from `# nccl-tests version 2.19.6 ...` (absent before nccl-tests 2.17).
    pub nccl_tests_version: Option<String>,
    /// NCCL version code nccl-tests was compiled against (`nccl-headers=22809`).
    pub nccl_headers_version: Option<u32>,
    /// NCCL version code of the library loaded at run time (`nccl-library=22809`, or the
    /// JSON `nccl_version`).
    pub nccl_library_version: Option<u32>,
    /// `RCCL` for rccl-tests (AMD's fork, the same table), `None` for nccl-tests.
    #[serde(default)]
    pub library: Option<String>,
    /// `2.28.3` of rccl-tests' `RCCL version : 2.28.3-gfx942-rccl:a188cf2`.
    #[serde(default)]
    pub rccl_version: Option<String>,
    /// rccl-tests' `HIP version  : 7.12.60430-713bdeef5b`.
    #[serde(default)]
    pub hip_version: Option<String>,
    /// rccl-tests' `ROCm version : 7.12.0.2-9999-713bdeef5b`.
    #[serde(default)]
    pub rocm_version: Option<String>,
    /// The program as it named itself, e.g. `all_reduce_perf_mpi`.
    pub program: Option<String>,
    /// The collective, normalised: `all_reduce`, `all_gather`, `alltoallv`, ...
    pub collective: Option<String>,
    /// The `# nThread ...` line (or the JSON `config`).
    pub params: Option<RunParams>,
    /// One entry per `#  Rank` line (JSON: per process, see [`ParsedOutput::nranks`]).
    pub ranks: Vec<RankInfo>,
    /// Every table header seen; a second header starts a second table.
    pub tables: Vec<TableHeader>,
    /// Every result row, in output order (`-N` cycles and `-d/-o/-r all` give many rows
    /// per size).
    pub rows: Vec<Row>,
    /// `# Out of bounds values : N OK|FAILED`.
    pub out_of_bounds: Option<OutOfBounds>,
    /// `# Avg bus bandwidth : X [OK|FAILED]`.
    pub avg_busbw: Option<AvgBusBw>,
    /// Failure lines: test failures, timeouts, invalid arguments, launcher aborts.
    pub failures: Vec<Failure>,
    /// Errors nccl-tests reported itself (`# error: ...`, the JSON `errors` list).
    pub reported_errors: Vec<String>,
    /// Other `#` lines worth keeping (`# Blocking Enabled ...`, `# GPU memory usage ...`).
    pub notes: Vec<String>,
    /// `# Writing JSON output to PATH`.
    pub json_output_path: Option<String>,
    /// Fields only the JSON report has.
    pub json_meta: Option<JsonMeta>,
    /// What the `NCCL_DEBUG` lines said (empty when there were none).
    pub debug: NcclDebugInfo,
    /// Lines that could not be understood, with the reason.
    pub diagnostics: Vec<Diagnostic>,
    /// How many times the run's parameter line (`# nThread ...`) was printed. nccl-tests
    /// prints it once per MPI job, from rank 0; more than once means several processes ran
    /// the test each on its own, every rank in a world of one ([`ParsedOutput::ranks_ran_alone`]).
    #[serde(default)]
    pub parameter_lines: u32,
    /// The rank count the caller named for an output that does not show it (a bare table
    /// imported with `--ranks`, see [`parse_headerless`]); [`ParsedOutput::nranks`] uses it
    /// last.
    pub given_ranks: Option<u32>,
    /// `# Reducing maxBytes to N due to memory limitation`: nccl-tests lowered the
    /// largest size to what fits in GPU memory, so sizes above `N` were never run.
    #[serde(default)]
    pub reduced_max_bytes: Option<u64>,
    /// Lines where the output says it was cut (`...`, `[...]`, `<snip>`, `(truncated)`:
    /// what documents and chat messages put in place of omitted lines). Rows may be
    /// missing there.
    #[serde(default)]
    pub cut_at_lines: Vec<usize>,
    /// The rank count the rows' busbw/algbw give when the output's rank lines list fewer
    /// (a paste of some of them); [`ParsedOutput::nranks`] takes it over the listed count.
    #[serde(default)]
    pub ranks_beyond_listed: Option<u32>,
    /// The rank count inferred from the rows' busbw/algbw where neither the output nor
    /// the caller gave one ([`parse_headerless`]); [`ParsedOutput::nranks`] uses it last.
    #[serde(default)]
    pub inferred_ranks: Option<u32>,
    /// What [`parse_headerless`] inferred (or could not) about a collective or rank count
    /// the output does not state, with the basis: shown to the user as inferred.
    #[serde(default)]
    pub inferences: Vec<Inference>,
}

/// The run parameters from `# nThread 1 nGpus 2 minBytes 8 maxBytes ... step: 2(factor) ...`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunParams {
    /// Threads per process (`-t`).
    pub n_threads: Option<u32>,
    /// GPUs per thread (`-g`).
    pub n_gpus: Option<u32>,
    /// Smallest size in bytes (`-b`).
    pub min_bytes: Option<u64>,
    /// Largest size in bytes (`-e`).
    pub max_bytes: Option<u64>,
    /// Size step (`-f` factor or `-i` increment).
    pub step: Option<Step>,
    /// Warm-up iterations (`-w`).
    pub warmup_iters: Option<u32>,
    /// Timed iterations (`-n`).
    pub iters: Option<u32>,
    /// Aggregated operations per iteration (`-m`).
    pub agg_iters: Option<u32>,
    /// Data check (`-c`): 0 means `#wrong` prints `N/A`.
    pub validation: Option<u32>,
    /// CUDA graph launches (`-G`).
    pub graph: Option<u32>,
    /// Forced misalignment (`-u`).
    pub unalign: Option<u32>,
    /// Every key/value not named above, as printed (JSON: as the JSON text of the value).
    pub other: BTreeMap<String, String>,
}

/// How sizes grow from `min_bytes` to `max_bytes`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Multiply by the value (`-f`, printed `step: 2(factor)`).
    Factor,
    /// Add the value in bytes (`-i`, printed `step: 1024(bytes)`).
    Increment,
    /// Something else in the parentheses.
    Other(String),
}

/// The `step:` parameter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The number before the parentheses.
    pub value: u64,
    /// What the number means.
    pub kind: StepKind,
}

/// One `#  Rank  0 Group  0 Pid 1355 on vm device  0 [0000:00:06] NVIDIA H200` line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RankInfo {
    /// Global rank.
    pub rank: u32,
    /// `NCCL_TESTS_SPLIT` group (colour); absent before nccl-tests 2.13.
    pub group: Option<u32>,
    /// Process id.
    pub pid: Option<u32>,
    /// Host name as the process saw it.
    pub host: Option<String>,
    /// CUDA device index within the process.
    pub device: Option<u32>,
    /// PCI id as printed: `0000:00:06` (2025+) or `0x00` (older).
    pub bus_id: Option<String>,
    /// GPU model name.
    pub gpu_name: Option<String>,
    /// 1-based line number (0 for JSON).
    pub line: usize,
}

/// Which buffer placement a block of columns measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementKind {
    /// Separate send and receive buffers.
    OutOfPlace,
    /// The receive buffer is the send buffer.
    InPlace,
}

/// What the time column measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeKind {
    /// GPU latency per operation (`time`), the default.
    Latency,
    /// CPU time per operation (`cputime`, `-C 1`).
    CpuTime,
}

/// One table header: the column names as printed, and where the table starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableHeader {
    /// 1-based line number of the names line (0 for JSON).
    pub line: usize,
    /// Column names in order, e.g. `size`, `count`, ..., `#wrong`, `timestamp`.
    pub columns: Vec<String>,
    /// Whether the time columns are latency or CPU time.
    pub time_kind: TimeKind,
}

/// One placement's measurements in a row.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Placement {
    /// Time per operation in microseconds (latency or CPU time, see [`TableHeader`]).
    pub time_us: Option<f64>,
    /// Algorithm bandwidth in GB/s (1 GB = 1e9 bytes).
    pub algbw_gbps: Option<f64>,
    /// Bus bandwidth in GB/s.
    pub busbw_gbps: Option<f64>,
    /// Wrong elements; `None` when printed `N/A` (`-c 0`) or not reported.
    pub wrong: Option<u64>,
    /// Maximum error, printed instead of `#wrong` by nccl-tests before 2.13 (`0e+00`).
    pub max_error: Option<f64>,
    /// Any other column of this placement by name (`i_min`, `i_p99`, JSON per-iteration
    /// objects, ...): numbers as JSON numbers, anything else as strings.
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// One result row: one size (and type, op, root) measured out-of-place and in-place.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Row {
    /// 1-based line number (for JSON: 0).
    pub line: usize,
    /// Index into [`ParsedOutput::tables`] of the header this row belongs to.
    pub table: usize,
    /// Message size in bytes.
    pub size_bytes: u64,
    /// Element count.
    pub count: Option<u64>,
    /// Data type (`float`, `int8`, `bfloat16`, ...).
    pub dtype: Option<String>,
    /// Reduction op (`sum`, `none`, ...); `None` when blank (hypercube) or absent.
    pub redop: Option<String>,
    /// Root rank; `-1` where the collective has none; `None` before nccl-tests 2.13.
    pub root: Option<i64>,
    /// Out-of-place measurements; `None` when that block is absent or blank.
    pub out_of_place: Option<Placement>,
    /// In-place measurements.
    pub in_place: Option<Placement>,
    /// Row-level columns not named above (`timestamp`, unknown ones), as in
    /// [`Placement::extra`].
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Row {
    /// The placement of the given kind, if measured.
    pub fn placement(&self, kind: PlacementKind) -> Option<&Placement> {
        match kind {
            PlacementKind::OutOfPlace => self.out_of_place.as_ref(),
            PlacementKind::InPlace => self.in_place.as_ref(),
        }
    }

    /// The larger of the two placements' bus bandwidths.
    pub fn best_busbw(&self) -> Option<f64> {
        let a = self.out_of_place.as_ref().and_then(|p| p.busbw_gbps);
        let b = self.in_place.as_ref().and_then(|p| p.busbw_gbps);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// Total wrong elements over both placements (`None` if neither reported a count).
    pub fn wrong_total(&self) -> Option<u64> {
        let a = self.out_of_place.as_ref().and_then(|p| p.wrong);
        let b = self.in_place.as_ref().and_then(|p| p.wrong);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `# Out of bounds values : N OK|FAILED`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutOfBounds {
    /// Number of values out of bounds (wrong results summed over ranks).
    pub count: u64,
    /// `OK` printed (or JSON `okay`).
    pub ok: bool,
    /// 1-based line number (0 for JSON).
    pub line: usize,
}

/// Verdict of the `NCCL_TESTS_MIN_BW` check on the average bus bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MinBwCheck {
    /// `NCCL_TESTS_MIN_BW` was not set.
    Unchecked,
    /// At least 0.9 x the minimum: `OK`.
    Passed,
    /// Below: `FAILED` (the run exits with 7).
    Failed,
}

/// `# Avg bus bandwidth : X [OK|FAILED]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AvgBusBw {
    /// The average in GB/s.
    pub value: Option<f64>,
    /// The `NCCL_TESTS_MIN_BW` verdict.
    pub min_bw_check: MinBwCheck,
    /// 1-based line number (0 for JSON).
    pub line: usize,
}

/// Fields only the JSON report has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct JsonMeta {
    /// The report's `version`.
    pub version: Option<i64>,
    /// `start_time` as written.
    pub start_time: Option<String>,
    /// `end_time` as written (absent when the run died).
    pub end_time: Option<String>,
    /// The program's command line.
    pub args: Vec<String>,
    /// The recorded environment (`NAME=value`).
    pub env: Vec<String>,
    /// True when the JSON was cut short and only a prefix could be read.
    pub truncated: bool,
}

/// A line (or JSON value) that could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnostic {
    /// 1-based line number; 0 when not tied to a line.
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

impl ParsedOutput {
    /// Whether the output shows processes that each ran the test alone instead of as one
    /// MPI job: the run's parameter line printed more than once (nccl-tests built without
    /// `MPI=1` and started as several tasks, or an MPI build under `srun` without the
    /// matching `--mpi` plugin).
    pub fn ranks_ran_alone(&self) -> bool {
        self.ran_alone_evidence().is_some()
    }

    /// (runs, ranks per run) when several separate runs, each a world of several
    /// processes, wrote this output (two jobs appending to one log). nccl-tests prints its
    /// header once per world: more processes (host and pid of the `# Rank` lines) than
    /// headers means worlds of several processes, whose rows interleave so that no one run
    /// can be read. One process a header is [`Self::ran_alone_evidence`]'s case, even with
    /// several GPUs each (`-g 2`).
    pub fn separate_worlds(&self) -> Option<(usize, usize)> {
        let runs = self.parameter_lines as usize;
        let mut processes: Vec<(Option<&str>, u32)> = self
            .ranks
            .iter()
            .filter_map(|r| Some((r.host.as_deref(), r.pid?)))
            .collect();
        processes.sort_unstable();
        processes.dedup();
        (runs > 1 && processes.len() > runs).then(|| (runs, self.ranks.len() / runs))
    }

    /// What shows that several processes ran the test each in a world of one rank, said
    /// for the user; `None` when nothing does. Two signs, either enough:
    /// - the parameter line (`# nThread ...`) printed more than once: every process
    ///   printed its own header;
    /// - where headers were lost (a pasted table, a log collector that drops repeats): the
    ///   sizes go back before the sweep reached its largest (`8, 8, 16, 16, ...` from two
    ///   processes printing at once) and busbw is 0.00 in every row that moved data, as
    ///   it is on one rank for every collective whose busbw factor is `(n-1)/n`-shaped.
    ///   A single sweep, or several whole sweeps (`-N`, `-d all`), never goes back early.
    pub fn ran_alone_evidence(&self) -> Option<String> {
        if self.separate_worlds().is_some() {
            return None;
        }
        if self.parameter_lines > 1 {
            return Some(format!(
                "the test's header was printed {} times",
                self.parameter_lines
            ));
        }
        let largest = self.rows.iter().map(|r| r.size_bytes).max()?;
        let moved: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| {
                [&r.out_of_place, &r.in_place].iter().any(|p| {
                    p.as_ref()
                        .and_then(|p| p.algbw_gbps)
                        .is_some_and(|a| a > 0.0)
                })
            })
            .collect();
        let all_zero = moved.len() >= 2
            && moved.iter().all(|r| {
                [&r.out_of_place, &r.in_place]
                    .iter()
                    .filter_map(|p| p.as_ref().and_then(|p| p.busbw_gbps))
                    .all(|b| b == 0.0)
            });
        let zero_on_one_rank = self
            .collective
            .as_deref()
            .is_none_or(|c| busbw_factor(c, 1) == Some(0.0));
        if !all_zero || !zero_on_one_rank {
            return None;
        }
        let back = self.rows.windows(2).find(|w| {
            w[0].size_bytes != largest
                && w[1].size_bytes <= w[0].size_bytes
                && (&w[0].dtype, &w[0].redop) == (&w[1].dtype, &w[1].redop)
        })?;
        Some(format!(
            "the sizes go back before reaching the largest (line {}: {} B after {} B) and \
             busbw is 0.00 in every row",
            back[1].line, back[1].size_bytes, back[0].size_bytes
        ))
    }

    /// Number of ranks whose communicator produced the table, which is what bus bandwidth
    /// is computed for: the ranks in rank 0's `NCCL_TESTS_SPLIT` group when the text lists
    /// ranks; for JSON (which lists one device line per process) processes x threads x GPUs;
    /// else `nRanks` from the NCCL debug lines.
    pub fn nranks(&self) -> Option<u32> {
        if self.format == Some(SourceFormat::Text) && !self.ranks.is_empty() {
            if let Some(n) = self.ranks_beyond_listed {
                return Some(n);
            }
            let group0 = self.ranks.first().and_then(|r| r.group);
            let n = self.ranks.iter().filter(|r| r.group == group0).count();
            return u32::try_from(n).ok();
        }
        if self.format == Some(SourceFormat::Json) && !self.ranks.is_empty() {
            let procs = u32::try_from(self.ranks.len()).ok()?;
            let per = self
                .params
                .as_ref()
                .map(|p| {
                    p.n_threads
                        .unwrap_or(1)
                        .saturating_mul(p.n_gpus.unwrap_or(1))
                })
                .unwrap_or(1);
            return Some(procs.saturating_mul(per.max(1)));
        }
        self.debug
            .n_ranks
            .or(self.given_ranks)
            .or(self.inferred_ranks)
    }

    /// Whether the output has any of nccl-tests' preamble: the version line, the
    /// `Collective test starting` line, the `# nThread` line or rank lines. A table pasted
    /// from a log or a web page has none, so what they would say (the collective, the
    /// rank count) must come from the caller. Always true for JSON.
    pub fn has_preamble(&self) -> bool {
        self.format == Some(SourceFormat::Json)
            || self.nccl_tests_version.is_some()
            || self.program.is_some()
            || self.params.is_some()
            || !self.ranks.is_empty()
    }

    /// The network transport seen in the channel lines (`Socket`, `IB`, `GPUDirectTCPX`,
    /// `gIB`, ...); see [`NcclDebugInfo::network_transport`].
    pub fn network_transport(&self) -> Option<&str> {
        self.debug.network_transport()
    }

    /// Whether the expected transport was used; see [`NcclDebugInfo::transport_match`].
    pub fn transport_match(&self, expected: &str) -> TransportMatch {
        self.debug.transport_match(expected)
    }

    /// Rows whose printed bus bandwidth disagrees with algbw x the collective's factor by
    /// more than the printing could explain; see [`busbw::check_rows`].
    pub fn busbw_mismatches(&self) -> Vec<BusBwMismatch> {
        busbw::check_rows(self)
    }

    /// Rows with wrong elements in either placement.
    pub fn wrong_rows(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| r.wrong_total().unwrap_or(0) > 0)
    }

    /// The busbw of the run: out-of-place at the largest size (in-place where that size has
    /// no out-of-place figure; the last such row). Every command reports this one figure.
    pub fn busbw_at_max_size(&self) -> Option<f64> {
        let max = self.rows.iter().map(|r| r.size_bytes).max()?;
        let last = self.rows.iter().rev().find(|r| r.size_bytes == max)?;
        last.out_of_place
            .as_ref()
            .and_then(|p| p.busbw_gbps)
            .or_else(|| last.in_place.as_ref().and_then(|p| p.busbw_gbps))
    }

    /// The algbw at the largest size, by the same rule as [`busbw_at_max_size`]
    /// (out-of-place, else in-place): what a run of one rank, whose busbw is 0, measured.
    ///
    /// [`busbw_at_max_size`]: ParsedOutput::busbw_at_max_size
    pub fn algbw_at_max_size(&self) -> Option<f64> {
        let max = self.rows.iter().map(|r| r.size_bytes).max()?;
        let last = self.rows.iter().rev().find(|r| r.size_bytes == max)?;
        last.out_of_place
            .as_ref()
            .and_then(|p| p.algbw_gbps)
            .or_else(|| last.in_place.as_ref().and_then(|p| p.algbw_gbps))
    }

    /// True when the output shows the run completed: a footer with the average bus
    /// bandwidth and no failure line.
    /// The algorithm and protocol NCCL chose for operations of a row's size, from its
    /// per-operation lines ([`NcclDebugInfo::tuning`]): `("RING", "SIMPLE")`, or several
    /// joined with `+` when not every operation of that size made the same choice. Lines
    /// whose operation, where they name one, is not the output's collective are left out.
    /// `None` without such lines.
    ///
    /// Sizes: NCCL names the whole buffer for most collectives, but for all_gather and
    /// reduce_scatter some versions name one rank's part (`count` per rank) where
    /// nccl-tests prints the whole. Which one an output uses is read from its largest
    /// sizes: when NCCL's largest is the table's largest divided by the rank count, every
    /// row is looked up divided by it.
    pub fn tuning_for(&self, size_bytes: u64) -> Option<(String, String)> {
        let op = self.collective.as_deref().and_then(nccl_op_name);
        let of_op = |t: &&TuningChoice| match (&t.op, op) {
            (Some(seen), Some(expected)) => seen.eq_ignore_ascii_case(expected),
            _ => true,
        };
        let per_rank_sizes = matches!(op, Some("AllGather" | "ReduceScatter"));
        let divisor = match self.nranks().map(u64::from) {
            Some(n) if n > 1 && per_rank_sizes => {
                let largest_line = self
                    .debug
                    .tuning
                    .iter()
                    .filter(of_op)
                    .map(|t| t.bytes)
                    .max();
                let largest_row = self.rows.iter().map(|r| r.size_bytes).max();
                match (largest_line, largest_row) {
                    (Some(line), Some(row)) if line.checked_mul(n) == Some(row) => n,
                    _ => 1,
                }
            }
            _ => 1,
        };
        if !size_bytes.is_multiple_of(divisor) {
            return None;
        }
        let wanted = size_bytes / divisor;
        let found: Vec<&TuningChoice> = self
            .debug
            .tuning
            .iter()
            .filter(of_op)
            .filter(|t| t.bytes == wanted)
            .collect();
        let joined = |pick: fn(&TuningChoice) -> &str| {
            let mut names: Vec<&str> = Vec::new();
            for t in &found {
                if !names.contains(&pick(t)) {
                    names.push(pick(t));
                }
            }
            names.join("+")
        };
        (!found.is_empty()).then(|| (joined(|t| &t.algorithm), joined(|t| &t.protocol)))
    }

    pub fn completed(&self) -> bool {
        self.avg_busbw.is_some() && self.failures.is_empty()
    }
}

/// Parse any nccl-tests output: JSON when the first non-blank byte is `{`, else text.
pub fn parse(input: &[u8]) -> ParsedOutput {
    parse_with(input, &ParseOptions::default())
}

/// [`parse`] with a collective supplied by the caller for outputs that do not name one.
pub fn parse_with(input: &[u8], opts: &ParseOptions) -> ParsedOutput {
    let text = String::from_utf8_lossy(input);
    // A byte-order mark is not whitespace to `trim_start`; drop it before sniffing.
    let text = text.trim_start_matches('\u{feff}');
    let mut out = if text.trim_start().starts_with('{') {
        json::parse_json_str(text)
    } else if text.trim().is_empty() {
        ParsedOutput::default()
    } else {
        text::parse_text_str(text)
    };
    apply_options(&mut out, opts);
    out
}

/// The note [`parse_headerless`] adds when it read rows with the assumed standard layout.
pub const ASSUMED_LAYOUT_NOTE: &str = "no column header before the first row: rows read with \
    the standard layout of nccl-tests 2.13 and later (size count type redop root, then time \
    algbw busbw #wrong out-of-place and in-place)";

/// Like [`parse_with`], for output that may be a bare table: rows pasted from a log or a
/// web page, with or without the two column-header lines, without the rest of nccl-tests'
/// header. Rows before any column header are read with the standard current layout
/// (13 columns; a row with fewer values is aligned by where its values end) and
/// [`ASSUMED_LAYOUT_NOTE`] is added to `notes`. `ranks` is the rank count the caller
/// knows; it is used when the output does not show one ([`ParsedOutput::given_ranks`]),
/// and a diagnostic is added when the output shows another. The busbw re-check
/// ([`ParsedOutput::busbw_mismatches`]) then tells whether the given collective and rank
/// count fit the printed numbers. A collective or rank count that neither the output nor
/// the caller gives is inferred from the rows where only one fits, and each inference, or
/// why none could be made, is kept in [`ParsedOutput::inferences`] (module `infer`).
pub fn parse_headerless(input: &[u8], opts: &ParseOptions, ranks: Option<u32>) -> ParsedOutput {
    let text = String::from_utf8_lossy(input);
    let text = text.trim_start_matches('\u{feff}');
    let mut out = if text.trim_start().starts_with('{') {
        json::parse_json_str(text)
    } else if text.trim().is_empty() {
        ParsedOutput::default()
    } else {
        text::parse_text_assuming_layout(text)
    };
    apply_options(&mut out, opts);
    if let Some(given) = ranks {
        match out.nranks() {
            Some(seen) if seen != given => out.diagnostics.push(Diagnostic {
                line: 0,
                reason: format!(
                    "{given} ranks were given but the output shows {seen}; {seen} is used"
                ),
            }),
            Some(_) => {}
            None => out.given_ranks = Some(given),
        }
    }
    infer::infer_missing(&mut out);
    out
}

fn apply_options(out: &mut ParsedOutput, opts: &ParseOptions) {
    let Some(given) = opts.collective.as_deref() else {
        return;
    };
    let given_norm = normalize_collective(given);
    match &out.collective {
        None => out.collective = Some(given_norm),
        Some(found) if *found != given_norm => out.diagnostics.push(Diagnostic {
            line: 0,
            reason: format!(
                "the output names collective `{found}` but the caller said `{given}`; \
                 keeping `{found}`"
            ),
        }),
        Some(_) => {}
    }
}

/// Turn a program name (`./build/all_reduce_perf_mpi`, `alltoall_perf`) or a collective
/// name into the collective (`all_reduce`, `alltoall`).
/// NCCL's name of a collective in its per-operation lines (`AllReduce` for `all_reduce`);
/// `None` for those NCCL runs as sends and receives (alltoall, sendrecv, ...).
fn nccl_op_name(collective: &str) -> Option<&'static str> {
    match collective {
        "all_reduce" => Some("AllReduce"),
        "all_gather" => Some("AllGather"),
        "reduce_scatter" => Some("ReduceScatter"),
        "broadcast" => Some("Broadcast"),
        "reduce" => Some("Reduce"),
        _ => None,
    }
}

pub fn normalize_collective(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name).trim();
    let base = match base.find("_perf") {
        Some(i) => &base[..i],
        None => base,
    };
    base.to_ascii_lowercase()
}

/// Format an NCCL version code (`22809`) as `2.28.9`. Codes from NCCL 2.9 on are
/// `major*10000 + minor*100 + patch`; older ones `major*1000 + minor*100 + patch`.
pub fn nccl_version_string(code: u32) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code / 100) % 10, code % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(rel: &str) -> String {
        let path = format!(
            "{}/../tests/fixtures/nccl-tests/{rel}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(path).unwrap()
    }

    /// The lines of a recorded output that start with a number: its rows, as pasted.
    fn rows_only(text: &str) -> String {
        text.lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u64>().is_ok())
            })
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn the_standard_header_is_the_one_nccl_tests_prints() {
        let text = fixture("h200x2-nvlink/all_reduce_g2.txt");
        let printed = text
            .lines()
            .find(|l| l.contains("size") && l.contains("busbw"))
            .unwrap();
        assert_eq!(printed.trim_end(), text::STANDARD_HEADER);
    }

    #[test]
    fn a_bare_table_reads_like_the_full_output() {
        for rel in [
            "h200x2-nvlink/all_reduce_g2.txt",
            "h200x2-nvlink/all_gather_g2.txt",
            "h200x2-twohost/all_reduce_2host_socket.txt",
        ] {
            let full_text = fixture(rel);
            let full = parse(full_text.as_bytes());
            let bare_text = rows_only(&full_text);
            // Without the fallback the rows are only diagnosed.
            let plain = parse(bare_text.as_bytes());
            assert!(plain.rows.is_empty() && !plain.has_preamble(), "{rel}");
            let collective = full.collective.clone().unwrap();
            let opts = ParseOptions {
                collective: Some(collective.clone()),
            };
            let bare = parse_headerless(bare_text.as_bytes(), &opts, Some(2));
            assert!(!bare.has_preamble());
            assert!(full.has_preamble());
            assert_eq!(bare.notes, [ASSUMED_LAYOUT_NOTE], "{rel}");
            assert_eq!(bare.given_ranks, Some(2));
            assert_eq!(bare.nranks(), Some(2));
            assert_eq!(bare.rows.len(), full.rows.len(), "{rel}");
            for (b, f) in bare.rows.iter().zip(&full.rows) {
                assert_eq!(
                    (b.size_bytes, b.count, &b.dtype, &b.redop, b.root),
                    (f.size_bytes, f.count, &f.dtype, &f.redop, f.root),
                    "{rel}"
                );
                assert_eq!(b.out_of_place, f.out_of_place, "{rel}");
                assert_eq!(b.in_place, f.in_place, "{rel}");
            }
            // The right rank count fits every row; a wrong one is caught by the re-check.
            assert!(bare.busbw_mismatches().is_empty(), "{rel}");
            let wrong = parse_headerless(bare_text.as_bytes(), &opts, Some(16));
            assert!(!wrong.busbw_mismatches().is_empty(), "{rel}");
        }
    }

    #[test]
    fn given_ranks_do_not_override_the_output() {
        let text = fixture("h200x2-nvlink/all_reduce_g2.txt");
        let out = parse_headerless(text.as_bytes(), &ParseOptions::default(), Some(8));
        assert!(out.notes.iter().all(|n| n != ASSUMED_LAYOUT_NOTE));
        assert_eq!(out.nranks(), Some(2));
        assert_eq!(out.given_ranks, None);
        assert!(out
            .diagnostics
            .iter()
            .any(|d| d.reason == "8 ranks were given but the output shows 2; 2 is used"));
    }

    #[test]
    fn normalizes_program_names() {
        assert_eq!(
            normalize_collective("./build/all_reduce_perf"),
            "all_reduce"
        );
        assert_eq!(normalize_collective("all_reduce_perf_mpi"), "all_reduce");
        assert_eq!(normalize_collective("alltoallv"), "alltoallv");
    }

    #[test]
    fn formats_version_codes() {
        assert_eq!(nccl_version_string(22809), "2.28.9");
        assert_eq!(nccl_version_string(2708), "2.7.8");
    }

    #[test]
    fn byte_order_mark_does_not_hide_json() {
        let out = parse("\u{feff}{\"results\": [{\"size\": 8}]}".as_bytes());
        assert_eq!(out.format, Some(SourceFormat::Json));
        assert_eq!(out.rows.len(), 1);
    }

    #[test]
    fn empty_and_blank_input_give_empty_output() {
        assert_eq!(parse(b""), ParsedOutput::default());
        assert_eq!(parse(b"  \n\n"), ParsedOutput::default());
    }

    #[test]
    fn caller_collective_fills_a_gap_and_disagreement_is_diagnosed() {
        let text = b"# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n";
        let opts = ParseOptions {
            collective: Some("all_gather_perf".into()),
        };
        let out = parse_with(text, &opts);
        assert_eq!(out.collective.as_deref(), Some("all_gather"));

        let text = b"# Collective test starting: all_reduce_perf\n";
        let out = parse_with(text, &opts);
        assert_eq!(out.collective.as_deref(), Some("all_reduce"));
        assert_eq!(out.diagnostics.len(), 1);
    }
}
