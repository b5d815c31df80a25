//! The launcher's integration tests, one binary (as ripgrep does): the built `gpudirect`
//! run end to end, one module per command, sharing `common`. One binary links SQLite and
//! plotters once instead of once per file.
//!
//! The parser's tests on the recorded outputs are their own binary
//! (`tests/nccl_output_fixtures.rs`).

mod common;

mod concurrency;
mod escapes;
mod fixture_answers;
mod hang;
mod health;
mod history;
mod hostfile;
mod log;
mod metrics;
mod profiles;
mod published;
mod report;
mod run;
mod tune;
mod validate_gpus;
mod validate_nodes;
mod validate_rails;
mod validate_start;
mod validate_wiring;
mod vet;
mod watch;
