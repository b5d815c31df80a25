//! Issue #45: a pair whose launch hangs before NCCL starts is a launch failure. Without a
//! cluster: `srun` on PATH is a script that runs its program here with the step's nodes in
//! `SLURM_STEP_NODELIST`, the program is the nccl-tests stand-in (a real 2xH200 recording),
//! and the stand-in's hook `STANDIN_NO_START_NODES=node3` makes every step on node3 hang
//! before printing anything, as a PMIx wire-up or MPI_Init that never ends does.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// An `srun` that runs its program here, without its options, with `--nodelist` as the
/// step's nodes (what srun gives a step's tasks).
const SRUN: &str = "#!/bin/sh\n\
    while [ $# -gt 0 ]; do case \"$1\" in\n\
    --nodelist=*) SLURM_STEP_NODELIST=\"${1#--nodelist=}\"; export SLURM_STEP_NODELIST; shift;;\n\
    -*) shift;;\n\
    *) break;;\n\
    esac; done\n\
    exec \"$@\"\n";

fn setup(dir: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("srun"), SRUN).unwrap();
    std::fs::set_permissions(bin.join("srun"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_nccl-tests-standin"),
        dir.join("all_reduce_perf"),
    )
    .unwrap();
}

/// node3's steps never reach NCCL: each is cut at the 1 s start-up deadline, run once more
/// as a step of its own, and reported "could not start"; node3 is neither slow nor failed,
/// its partners are judged on their other pairs, and nothing waits for the 10 min timeout.
#[test]
fn a_node_whose_steps_never_reach_nccl_could_not_start_and_is_charged_with_nothing() {
    let dir = scratch("validate-start", "no-start");
    setup(dir.path());
    let mut cmd = gpudirect_without(&[
        "GPUDIRECT_CONFIG",
        "GPUDIRECT_CLUSTER",
        "SLURM_CLUSTER_NAME",
        "STANDIN_SLOW_NODES",
        "STANDIN_HANG_RANKS",
        "STANDIN_HANG_COLLECTIVES",
        "STANDIN_SECONDS",
    ]);
    cmd.env(
        "PATH",
        format!("{}:/usr/bin:/bin", dir.path().join("bin").display()),
    )
    .env("SLURM_JOB_NODELIST", "node[1-4]")
    .env("SLURM_JOB_ID", "7")
    .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
    .env("STANDIN_NO_START_NODES", "node3")
    .args([
        "validate",
        "--json",
        "--floor",
        "10",
        "-e",
        "4G",
        "--startup-timeout",
        "1s",
    ])
    .arg("--nccl-tests-dir")
    .arg(dir.path());
    let started = Instant::now();
    let out = run(&mut cmd);
    let took = started.elapsed();
    let (text, err) = (stdout(&out), stderr(&out));
    // Degraded: one node could not be checked; nothing failed.
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    assert!(took < Duration::from_secs(60), "{took:?}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let verdict = |node: &str| {
        report["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == node)
            .unwrap_or_else(|| panic!("{node} in {report}"))
            .clone()
    };
    let node3 = verdict("node3");
    assert_eq!(node3["verdict"]["kind"], "could_not_start", "{node3}");
    let evidence = node3["evidence"].to_string();
    assert!(
        evidence.contains("could not start in")
            && evidence.contains("no NCCL line within its 1 s start-up deadline"),
        "{evidence}"
    );
    for node in ["node1", "node2", "node4"] {
        assert_eq!(verdict(node)["verdict"]["kind"], "healthy", "{report}");
    }
    // Each of node3's cells was tried twice, and said so.
    let retries = err
        .matches("running it once more as a step of its own")
        .count();
    let gave_up = err.matches("could not start (no NCCL line").count();
    assert!(retries >= 2 && retries == gave_up, "{err}");
    assert!(!err.contains("ran past its timeout"), "{err}");
}
