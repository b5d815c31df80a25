//! Helpers shared by the CLI test modules.

use std::path::PathBuf;
use std::process::{Command, Output};

use tempfile::TempDir;

// The output helpers are the cluster tests' own, so that both suites fail alike.
#[path = "../../../tests/cluster/output.rs"]
mod output;
pub use output::{assert_stderr_contains, assert_stdout_contains, stderr, stdout};

/// The `gpudirect` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_gpudirect");

/// The binary, without the given variables of the test runner's environment (so a
/// `GPUDIRECT_DB` or `SLURM_*` of the person running the tests cannot change a result).
pub fn gpudirect_without(vars: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    for var in vars {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs a command to its end.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("start gpudirect")
}

/// Runs a command that must succeed; returns its stdout.
pub fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(out.status.success(), "failed: {}", stderr(&out));
    stdout(&out)
}

/// A fresh empty directory in the system temp folder for one test of one module, named
/// `gpudirect-{module}-{name}-XXXXXX`. It is removed when dropped, so also when the test
/// fails (the panic unwinds through it): keep it alive as long as its paths are used.
pub fn scratch(module: &str, name: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gpudirect-{module}-{name}-"))
        .tempdir()
        .expect("create a scratch directory")
}

/// A recorded nccl-tests output, by its path under `tests/fixtures/nccl-tests/` (in the
/// cluster-tests crate).
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/nccl-tests")
        .join(rel)
}
