//! `gpudirect`: runs, checks and records nccl-tests on Slurm allocations.
//!
//! The binary (`src/main.rs` and `src/commands/`, one file per subcommand) parses
//! arguments and orchestrates; the logic lives in this library so that it can be tested
//! without a GPU, a cluster or a terminal. `ARCHITECTURE.md` draws the data flows.
//!
//! - [`nccl_output`]: the `nccl-output` crate, re-exported: one parser for every form of
//!   nccl-tests output, the transport evidence in the debug lines, the busbw arithmetic.
//! - [`cell`]: one output from the bytes printed to the record: parse, judge, record; the
//!   one pipeline of `run`, `validate` and `import`.
//! - [`checks`]: the verdict on a run (exit code, `#wrong`, rows, transport used).
//! - [`record`]: a parsed output plus how it ran, as a history record.
//! - [`explain`]: `profiles explain`: what the plugin would do to one task, and why.
//! - [`health`]: `gpudirect health`'s checks on what was read (NIC speed, GPUs, the quick
//!   all_reduce against the history); [`nic_counters`]: its check of the data NICs' error
//!   counters between runs.
//! - [`hostfile`]: `gpudirect hostfile`'s request, entries and four formats (pure).
//! - [`job_log`]: `gpudirect log`'s inputs (files, stdin, gzip), its verdict on a job's NCCL
//!   log against the profile (the reading is `nccl_output::joblog`), and its text.
//! - [`history`]: the SQLite history of runs (schema migrations, import with dedupe,
//!   queries, comparison of series, export).
//! - [`baseline`]: "as fast as before?": the comparability key, the baseline, the verdict.
//! - [`listing`]: `gpudirect history`'s table of runs and a node's busbw over time (pure).
//! - [`metrics`]: the history and a node's health as OpenMetrics text (`export`,
//!   `health --textfile`).
//! - [`setup`]: what NCCL ran with (versions, algorithm and protocol per size), and where
//!   two runs differ there.
//! - [`runner`]: runs srun/mpirun/nccl-tests in a process group with timeouts and Ctrl-C.
//! - [`slurm`]: the allocation from `SLURM_*` ([`slurm::Allocation`]), every
//!   `scontrol`/`salloc` call, and the one srun step that asks every node
//!   ([`slurm::AgentStep`], [`slurm::ask_nodes`]; the node's side is `gpudirect agent`).
//! - [`drain`]: draining and returning nodes without fighting an admin or another tool.
//! - [`quarantine`]: the quarantine reservation: suspect nodes kept from users' jobs, still
//!   open to the tool's own checks, with the evidence in each node's comment.
//! - [`node_extra`]: each tool's last verdict on a node in Slurm's node `Extra`.
//! - [`profile`]: what `--gpudirect MODE` means on a node: the config read once, the mode
//!   parsed once, the profile, transport, NICs and line rate it gives.
//! - [`profiles`]: `gpudirect profiles`' views of the config and its lint.
//! - [`matrix`]: the nccl-tests matrix (flags or TOML) and its plan of cells.
//! - [`matrix_run`]: `gpudirect run`'s cells, one after another, with `--resume`'s marks.
//! - [`launch`]: the srun/mpirun/local command line of one cell.
//! - [`probe`]: where the tasks and nodes of a step differ (each task's report, and where
//!   each NCCL variable in effect comes from, are `gpudirect-wire`'s:
//!   [`gpudirect_wire::task_report`], [`gpudirect_wire::provenance`]).
//! - [`validate`]: `gpudirect validate`'s domain: its rounds of pairs ([`validate::pairing`]),
//!   its verdicts on nodes and links ([`validate::judging`]), the simulator that proves them
//!   ([`validate::simulate`]) and the rail pairs of `--test rails` ([`validate::rails`];
//!   what `gpudirect-mpi` prints and checks is [`gpudirect_wire::rails`]).
//! - [`vet`]: `gpudirect vet`, a job's own nodes checked before it trains: the node checks
//!   on every node, validation pairs within a [`budget`], the good nodes handed on.
//! - [`hang`]: `gpudirect hang`: the agent on each node of a hung job and the assembly of
//!   its answers; [`ras`]: NCCL's RAS client and what its snapshots say about a hang.
//! - [`report`]: the HTML report with its plots (busbw by size, pair heat map, node x rail
//!   map, nodes over time).
//! - [`tune`]: `gpudirect tune`'s search: knobs, interleaved rounds, the noise rule per
//!   size band, and the profile overlay it writes.
//! - [`watch`]: `gpudirect watch`: a running job's NCCL Inspector dumps read and judged
//!   (a late rank, a collective slower than its baseline, a rank that wrote nothing).
//! - [`units`]: one grammar for sizes, durations, times and percentages (sizes' reader is
//!   [`gpudirect_wire::units`], re-exported there).
//! - [`output`]: the only code that writes to stdout or stderr (safe when the reader goes
//!   away): `outln!`, `emit`, `emit_json`, and `noteln!` for stderr.

// Only output/ writes, and it uses no print macro: a print! anywhere panics on a closed
// pipe, so none is allowed (the lint shows it).
#![deny(clippy::print_stdout, clippy::print_stderr)]
// No function over 150 lines outside tests (clippy.toml's threshold counts code lines),
// as in the binary's commands (issue #42); a test's table of cases may run longer.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod baseline;
pub mod budget;
pub mod cell;
pub mod checks;
pub mod drain;
pub mod explain;
pub mod hang;
pub mod health;
pub mod history;
pub mod hostfile;
pub mod job_log;
pub mod launch;
pub mod listing;
pub mod matrix;
pub mod matrix_run;
pub mod metrics;
pub mod nic_counters;
pub mod node_extra;
pub mod output;
pub mod probe;
pub mod profile;
pub mod profiles;
pub mod quarantine;
pub mod ras;
pub mod record;
pub mod report;
pub mod runner;
pub mod setup;
pub mod slurm;
pub mod tune;
pub mod units;
pub mod validate;
pub mod vet;
pub mod watch;

// Its own crate so that fuzz/ and its bench build without SQLite and clap; re-exported so
// that `gpudirect::nccl_output::...` paths stay as they were.
pub use nccl_output;
