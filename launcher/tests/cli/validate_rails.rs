//! `gpudirect validate --test rails` without a cluster: `srun` and `scontrol` on PATH are
//! small scripts. The fake `srun` prints the MPI program's measurement line for each pair
//! (slow for every pair with `n3`); the fake `scontrol` refuses everything, as it does for
//! a user who is not a Slurm operator, so `--drain` fails.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{gpudirect_without, run, scratch, stderr, stdout};

/// A pair's step: the measurement line `gpudirect-mpi pair` prints, 10 GB/s each way, or
/// 0.1 GB/s when one of the pair is `n3`.
const SRUN: &str = r#"#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    --nodelist=*) pair=${arg#--nodelist=} ;;
  esac
done
first=${pair%,*}
second=${pair#*,}
gbps=10.0
case ",$pair," in
  *,n3,*) gbps=0.1 ;;
esac
echo "{\"gpudirect_rail\":1,\"rail\":\"eth1\",\"hosts\":[\"$first\",\"$second\"],\"size_bytes\":16777216,\"messages\":8,\"forward_gbps\":$gbps,\"backward_gbps\":$gbps,\"latency_us\":5.0}"
"#;

/// `scontrol` of a user who may not drain: every call fails.
const SCONTROL: &str =
    "#!/bin/sh\necho 'scontrol: error: Invalid user for SlurmUser' >&2\nexit 1\n";

fn script(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a fake Slurm command");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make it executable");
}

#[test]
fn a_failed_rails_drain_prints_and_exits_2() {
    let dir = scratch("validate-rails", "failed-drain");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("create bin");
    script(&bin, "srun", SRUN);
    script(&bin, "scontrol", SCONTROL);
    // The MPI program is never started (srun is fake), but it must exist.
    let program = bin.join("gpudirect-mpi");
    script(&bin, "gpudirect-mpi", "#!/bin/sh\nexit 0\n");

    let mut cmd = gpudirect_without(&["SLURM_JOB_ID", "SLURM_CLUSTER_NAME", "GPUDIRECT_CLUSTER"]);
    cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("SLURM_JOB_NODELIST", "n[1-6]")
        .env("GPUDIRECT_DB", dir.path().join("history.sqlite"))
        .args(["validate", "--test", "rails", "--rails", "eth1", "--drain"])
        .arg("--mpi-program")
        .arg(&program);
    let out = run(&mut cmd);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a drain that did not work is exit 2:\n{text}\n{}",
        stderr(&out)
    );
    let verdict = text
        .lines()
        .find(|l| l.starts_with("verdict:"))
        .unwrap_or_else(|| panic!("no verdict line in:\n{text}"));
    assert!(
        verdict.starts_with(
            "verdict: Degraded (exit 2: a drain, a resume or --on-drain did not work)"
        ),
        "the verdict line names the code the command exits with: {verdict}"
    );
    assert!(text.contains("n3"), "the slow node is named:\n{text}");
}
