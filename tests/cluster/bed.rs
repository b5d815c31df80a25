//! The GPU bed's scripts (`scripts/local-cluster up --gpus`, `--slurm-prefix`,
//! `scripts/build-slurm`) on a machine without GPUs, as CI is: each refuses what it cannot do
//! with a message that names what it looked for and the fix, before it touches the running
//! cluster. What they do on a GPU host is in docs/results/gpu-box-runs.md.

use std::path::PathBuf;
use std::process::Command;

use cluster_tests::*;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The cluster still answers with every node up (idle, or still completing an earlier
/// test's job): a refused `up` changed nothing.
fn cluster_untouched() {
    let out = run(slurm_command("sinfo").args(["-h", "-o", "%T"]));
    assert_ok(&out, "sinfo after a refused up");
    let states = String::from_utf8_lossy(&out.stdout).into_owned();
    let up = ["idle", "mixed", "allocated", "completing"];
    assert!(
        states
            .lines()
            .all(|s| up.iter().any(|ok| s.starts_with(ok))),
        "{states}"
    );
}

#[test]
fn up_gpus_is_refused_on_a_host_without_gpus() {
    let _guard = cluster();
    let gpus: Vec<_> = std::fs::read_dir("/dev")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("nvidia")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    assert!(
        gpus.is_empty(),
        "this test is about a host without GPUs (CI's); this one has {} /dev/nvidiaN",
        gpus.len()
    );
    let out = local_cluster(&["up", "--gpus", "--nodes", "4"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("--gpus: this host has no NVIDIA GPU (no /dev/nvidia0")
            && err.contains("nvidia-smi -L")
            && err.contains("Without --gpus the nodes get stand-in GPU devices"),
        "{err}"
    );
    cluster_untouched();
}

#[test]
fn a_slurm_prefix_must_be_a_slurm_installation() {
    let _guard = cluster();
    let out = local_cluster(&["up", "--slurm-prefix", "/nonexistent/slurm"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("--slurm-prefix must be the absolute path of a Slurm installation (with sbin/slurmctld and bin/srun), got '/nonexistent/slurm'; scripts/build-slurm makes one"),
        "{}",
        stderr_of(&out)
    );
    let out = local_cluster(&["up", "--slurm", "24.11", "--slurm-prefix", "/opt/slurm"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("--slurm and --slurm-prefix exclude each other"),
        "{}",
        stderr_of(&out)
    );
    let out = local_cluster(&["up", "--tools", "relative/tools"]);
    assert!(
        stderr_of(&out).contains("--tools must be the absolute path of a folder with bin/"),
        "{}",
        stderr_of(&out)
    );
    cluster_untouched();
}

#[test]
fn build_slurm_needs_the_tarball_it_is_handed() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/build-slurm");
    let out = run(Command::new(&script).args(["/nonexistent/slurm.tar.gz", "/tmp/slurm-prefix"]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("no tarball at '/nonexistent/slurm.tar.gz'"),
        "{}",
        stderr_of(&out)
    );
    let out = run(Command::new(&script).arg("only-one-argument"));
    assert!(
        stderr_of(&out).contains("usage: scripts/build-slurm"),
        "{}",
        stderr_of(&out)
    );
}
