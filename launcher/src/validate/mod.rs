//! The validation domain: `gpudirect validate`'s method, its simulator and its decisions, in
//! one place so that the simulator proves what the command runs.
//!
//! - [`pairing`]: the rounds of disjoint pairs (or groups) each pairing mode runs.
//! - [`judging`]: the planner [`judging::Validation`] the caller drives round by round, and
//!   its verdicts on nodes and links (the method is drawn in its docs).
//! - [`simulate`]: the same planner over a simulated cluster with slow nodes and bad links,
//!   for the miss and false-alarm rates in `docs/validation.md`.
//! - [`rails`]: `--test rails`: one pair's MPI step bound to one rail, and its record (the
//!   measurement line and the MPI program's checks are `gpudirect-wire`'s
//!   [`gpudirect_wire::rails`]).
//! - [`rail_plan`]: which NICs are the rails, and the variable that holds NCCL to one.
//! - [`rail_units`]: the verdicts per (node, rail), the run's health over its rails, and the
//!   nodes to drain naming their rails.
//! - [`rail_states`]: each node's rails seen up or down before any traffic.
//! - [`pairs`]: the nccl-tests pairs of `validate`, each round's cells at once through
//!   `cell::exec`, stored once judged.
//! - [`rail_runs`]: `--test rails`' waves of MPI pair steps and how they are stored.
//! - [`session`]: the loop that drives a validation round by round ([`session::drive`]),
//!   the command's I/O in its closures.
//! - [`gpus`]: this host's GPUs as `--gpus` names them, and the units they split into.
//! - [`wiring`]: `--test wiring`: each node's GPU-to-NIC map and NIC subnets, and the nodes
//!   where GPU i is not on the rail the others have it on.
//! - [`actions`]: what `--drain`, `--resume` and `--on-drain` decide from a report (drain
//!   and resume plans, the evidence file).
//!
//! The command (`commands/validate.rs`) keeps the flags, the Slurm actions and the printing.

pub mod actions;
pub mod gpus;
pub mod judging;
pub mod pairing;
pub mod pairs;
pub mod rail_plan;
pub mod rail_runs;
pub mod rail_states;
pub mod rail_units;
pub mod rails;
pub mod session;
pub mod simulate;
pub mod wiring;
