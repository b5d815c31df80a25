//! The contract between the `gpudirect` launcher and `gpudirect-mpi`, the MPI program it
//! starts inside job steps: what the program checks before MPI starts, the lines it prints,
//! the exit statuses and words it ends with, and the arguments it reads. Both binaries link
//! this crate; `gpudirect-mpi` links nothing else of the launcher.
//!
//! - [`rails`]: `gpudirect-mpi pair`: the launch and world checks ([`rails::StepEnv`],
//!   [`rails::check_launch`], [`rails::check_world`]), the rail's state
//!   ([`rails::rail_state`]), the exit statuses, and the measurement line
//!   ([`rails::RailMeasurement`], read back by [`rails::read_measurement`]).
//! - [`task_report`]: what one task sees ([`task_report::TaskReport`], collected in the
//!   task), printed by `gpudirect agent probe` and `gpudirect-mpi facts`.
//! - [`provenance`]: where each NCCL variable a task runs with comes from (profile,
//!   environment, NCCL's config files), part of each task's report.
//! - [`units`]: the size grammar (`gpudirect-mpi pair --size`, and every size the launcher
//!   reads) and the error every unit's reader returns.
//!
//! The launcher's side of each (the steps it builds, the records, the verdicts) stays in
//! the launcher: `gpudirect::validate::rails`, `gpudirect::probe`.

// No function over 150 lines outside tests (clippy.toml's threshold counts code lines),
// as in the other library crates (issue #42).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]
// Only the binaries print: a print! panics on a closed pipe.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod provenance;
pub mod rails;
pub mod task_report;
pub mod units;
