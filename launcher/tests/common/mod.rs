//! Helpers shared by the CLI integration tests: each test file is its own crate and
//! includes this with `mod common;`, using only some of it.
#![allow(dead_code, reason = "each test crate uses a different subset")]

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

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

/// stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs a command that must succeed; returns its stdout.
pub fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(out.status.success(), "failed: {}", stderr(&out));
    stdout(&out)
}

/// A fresh empty directory in the system temp folder, for one test of one suite.
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpudirect-{suite}-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}
