//! The `gpudirect` launcher against the real local cluster.

use std::sync::{Mutex, MutexGuard};

use cluster_tests::*;

static CLUSTER: Mutex<()> = Mutex::new(());

fn cluster() -> MutexGuard<'static, ()> {
    CLUSTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn hostfile_inside_a_real_allocation() {
    let _guard = cluster();
    let gpudirect = workspace_bin("gpudirect");
    let mut cmd = slurm_command("salloc");
    cmd.args(["-N3", "--ntasks-per-node=2", "--quiet"])
        .arg(&gpudirect)
        .args(["hostfile", "--format", "openmpi"]);
    let output = run(&mut cmd);
    assert_ok(&output, "salloc gpudirect hostfile");
    assert_eq!(
        stdout(&output),
        "node1 slots=2\nnode2 slots=2\nnode3 slots=2\n"
    );
}

#[test]
fn hostfile_via_the_real_scontrol() {
    let _guard = cluster();
    let gpudirect = workspace_bin("gpudirect");
    let mut cmd = slurm_command(gpudirect.to_str().unwrap());
    cmd.args([
        "hostfile",
        "--nodelist",
        "node[1-3],gpu[08-10]",
        "--via-scontrol",
        "--format",
        "hosts",
    ]);
    let output = run(&mut cmd);
    assert_ok(&output, "gpudirect hostfile --via-scontrol");
    assert_eq!(
        stdout(&output),
        "node1\nnode2\nnode3\ngpu08\ngpu09\ngpu10\n"
    );
    let mut bad = slurm_command(gpudirect.to_str().unwrap());
    bad.args(["hostfile", "--nodelist", "node[3-", "--via-scontrol"]);
    let output = run(&mut bad);
    assert!(!output.status.success(), "a bad hostlist was accepted");
    assert!(
        stderr(&output).contains("invalid node list")
            && stderr(&output).contains("not passed to scontrol"),
        "{}",
        stderr(&output)
    );
}
