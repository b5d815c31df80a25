//! `gpudirect run` outside an allocation (`--launcher local`): what it refuses before it
//! runs or records anything. Cells that really run are the cluster tests' (tests/cluster).

use crate::common::{assert_stderr_contains, gpudirect_without, run, scratch, stderr};

/// A wrong --nccl-tests-dir is a bad option, found before the matrix starts: exit 3, the
/// folder and the binaries looked for named, and no history written (it used to record a
/// failed cell and exit 1).
#[test]
fn a_missing_nccl_tests_dir_is_refused_before_anything_runs() {
    let dir = scratch("run", "no-binaries");
    let db = dir.path().join("history.sqlite");
    let out = run(gpudirect_without(&[
        "GPUDIRECT_DB",
        "NCCL_TESTS_DIR",
        "SLURM_JOB_ID",
        "SLURM_JOB_NODELIST",
    ])
    .arg("--db")
    .arg(&db)
    .args([
        "run",
        "--launcher",
        "local",
        "-N",
        "1",
        "-c",
        "all_reduce,all_gather",
    ])
    .args(["--nccl-tests-dir", "/nonexistent/nccl-tests"]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_stderr_contains(&out, "no all_reduce_perf in /nonexistent/nccl-tests");
    assert!(out.stdout.is_empty());
    assert!(!db.exists(), "nothing may be recorded");
}
