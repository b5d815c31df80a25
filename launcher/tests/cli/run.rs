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

/// A config that exists but is invalid stops a run whose variants ask for a profile: the
/// plugin reads the same file on every node and refuses it, so the cells would run with
/// nothing applied and still pass (seen on the GPU bed, docs/results/gpu-box-runs.md). A
/// config that is not on this host at all only warns, since a login node may lack it.
#[test]
fn a_config_the_plugin_would_refuse_stops_a_run_with_profile_variants() {
    let dir = scratch("run", "bad-config");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_nccl-tests-standin"),
        dir.path().join("all_reduce_perf"),
    )
    .expect("link the stand-in");
    let config = dir.path().join("gpudirect.toml");
    std::fs::write(
        &config,
        "[profiles.a]\ntransport = \"Socket\"\n\n[profiles.b]\nextends = \"a\"\n\n\
         [profiles.c]\nextends = \"b\"\n",
    )
    .unwrap();
    let db = dir.path().join("history.sqlite");
    let base = |config: &std::path::Path| {
        let mut cmd = gpudirect_without(&["GPUDIRECT_DB", "SLURM_JOB_ID", "SLURM_JOB_NODELIST"]);
        cmd.arg("--db")
            .arg(&db)
            .args(["run", "--launcher", "local", "-N", "1", "-c", "all_reduce"])
            .args(["--variants", "c", "--config"])
            .arg(config)
            .arg("--nccl-tests-dir")
            .arg(dir.path());
        cmd
    };
    let out = run(&mut base(&config));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_stderr_contains(&out, "a profile extends one level only");
    assert_stderr_contains(&out, "--gpudirect c would apply nothing");
    assert!(!db.exists(), "nothing may be recorded");

    let out = run(&mut base(&dir.path().join("absent.toml")));
    assert_stderr_contains(&out, "transports of --gpudirect variants are not checked");
}

/// Issue #45: a cell whose launch never reaches NCCL (the stand-in's hook
/// `STANDIN_NO_START_NODES`, here this host) is cut at `--startup-timeout`, run once more,
/// and reported "could not start": the word in the table and `--json`, its first finding in
/// the record, never the whole 10 min timeout.
#[test]
fn a_cell_that_never_reaches_nccl_could_not_start_after_one_more_try() {
    let dir = scratch("run", "no-start");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_nccl-tests-standin"),
        dir.path().join("all_reduce_perf"),
    )
    .expect("link the stand-in");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let db = dir.path().join("history.sqlite");
    let started = std::time::Instant::now();
    let out = run(gpudirect_without(&[
        "GPUDIRECT_DB",
        "SLURM_JOB_ID",
        "SLURM_JOB_NODELIST",
        "SLURM_STEP_NODELIST",
        "SLURMD_NODENAME",
    ])
    .env("STANDIN_NO_START_NODES", &host)
    .arg("--db")
    .arg(&db)
    .args(["run", "--launcher", "local", "-N", "1", "-c", "all_reduce"])
    .args(["--startup-timeout", "1s", "--json", "--nccl-tests-dir"])
    .arg(dir.path()));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_stderr_contains(&out, "running it once more as a step of its own");
    let cells: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cell = &cells[0];
    assert_eq!(cell["could_not_start"], true, "{cells}");
    assert_eq!(cell["status"], "timeout", "{cells}");
    let first = cell["findings"][0].as_str().unwrap();
    assert!(
        first.starts_with("could not start: no NCCL line within its 1 s start-up deadline"),
        "{first}"
    );
    let history = gpudirect::history::History::open_existing(&db).unwrap();
    let runs = history.list_runs(&Default::default()).unwrap();
    assert_eq!(runs.len(), 1);
    let detail = history.get_run(runs[0].id).unwrap();
    assert_eq!(detail.failures[0], first);
}
