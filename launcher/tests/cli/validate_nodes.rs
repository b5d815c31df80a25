//! `gpudirect validate` over an allocation's nodes without a cluster: `srun` on PATH is a
//! script that drops its own options and runs the rest here, so each pair is the nccl-tests
//! stand-in (a real 2xH200 recording); what is tested is what validate makes of the flags.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// An `srun` that runs its program here, without its options.
const SRUN: &str = "#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\nexec \"$@\"\n";

/// A config whose profile `tcpx` has two data NICs at 200 Gbit/s (50 GB/s a node) and is
/// the node set's of node[1-4].
const CONFIG: &str = "[profiles.tcpx]\ndata_nics = [\"eth1\", \"eth2\"]\nline_rate_gbit = 200\n\n\
                      [[node_set]]\nname = \"a\"\nhosts = \"node[1-4]\"\nprofile = \"tcpx\"\n";

/// `validate --json --gpudirect MODE` over node[1-4]; its report.
fn validate(dir: &Path, mode: &str) -> serde_json::Value {
    let mut cmd = gpudirect_without(&[
        "GPUDIRECT_CONFIG",
        "GPUDIRECT_CLUSTER",
        "SLURM_CLUSTER_NAME",
    ]);
    cmd.env(
        "PATH",
        format!("{}:/usr/bin:/bin", dir.join("bin").display()),
    )
    .env("SLURM_JOB_NODELIST", "node[1-4]")
    .env("SLURM_JOB_ID", "7")
    .env("GPUDIRECT_DB", dir.join("history.sqlite"))
    .args([
        "validate",
        "--json",
        "--floor",
        "10",
        "-e",
        "4G",
        "--gpudirect",
        mode,
    ])
    .arg("--config")
    .arg(dir.join("gpudirect.toml"))
    .arg("--nccl-tests-dir")
    .arg(dir);
    let out = run(&mut cmd);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// P1 of the 2026-12-04 design review: `--gpudirect auto` got no line rate while the
/// profile's own name did; both mean profile tcpx on these nodes.
#[test]
fn auto_and_the_profiles_name_judge_against_the_same_line_rate() {
    let dir = scratch("validate-nodes", "line-rate");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("srun"), SRUN).unwrap();
    std::fs::set_permissions(bin.join("srun"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_nccl-tests-standin"),
        dir.path().join("all_reduce_perf"),
    )
    .unwrap();
    std::fs::write(dir.path().join("gpudirect.toml"), CONFIG).unwrap();
    let named = validate(dir.path(), "tcpx");
    let auto = validate(dir.path(), "auto");
    assert_eq!(named["line_rate_gbps"], serde_json::json!(50.0), "{named}");
    assert_eq!(auto["line_rate_gbps"], named["line_rate_gbps"], "{auto}");
    // Without a mode there is no profile to say it.
    let none = validate(dir.path(), "none");
    assert!(none["line_rate_gbps"].is_null(), "{none}");
}
