//! `gpudirect`: runs, checks and records nccl-tests on Slurm allocations.
//!
//! The binary (`src/main.rs`) parses arguments and dispatches; the logic lives in this
//! library so that it can be tested without a GPU, a cluster or a terminal:
//!
//! - [`nccl_output`]: the `nccl-output` crate, re-exported: one parser for every form of
//!   nccl-tests output (text tables of every version, `-J` JSON, interleaved `NCCL_DEBUG`
//!   lines and launcher banners), the transport evidence in the debug lines, and the
//!   bus-bandwidth arithmetic.
//! - [`history`]: the SQLite history of runs (schema migrations, import with dedupe,
//!   queries, comparison against runs and baselines, export).
//! - [`runner`]: runs srun/mpirun/nccl-tests in a process group with timeouts and Ctrl-C.
//! - [`matrix`]: the nccl-tests matrix (flags or TOML) and its plan of cells.
//! - [`launch`]: the srun/mpirun/local command line of one cell.
//! - [`probe`]: what each task sees, and where tasks and nodes differ.
//! - [`checks`]: the verdict on a run (exit code, `#wrong`, rows, transport used).
//! - [`record`]: a parsed output plus how it ran, as a history record.
//! - [`pairing`], [`judging`], [`simulate`]: `gpudirect validate`'s rounds of pairs, its
//!   verdicts on nodes and links, and the simulator that proves them.
//! - [`report`]: the HTML report with its plots (busbw by size, pair heat map, nodes over time).

pub mod checks;
pub mod history;
pub mod judging;
pub mod launch;
pub mod matrix;
pub mod pairing;
pub mod probe;
pub mod record;
pub mod report;
pub mod runner;
pub mod simulate;

// Its own crate so that fuzz/ and its bench build without SQLite and clap; re-exported so
// that `gpudirect::nccl_output::...` paths stay as they were.
pub use nccl_output;
